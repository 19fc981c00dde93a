//! What the parsers keep of a trace: a compact, owned, per-rank record of the events attribution
//! needs (kernels, their launches, communication ops, step markers). Times are integer
//! nanoseconds, exactly as written in the trace (µs with up to three decimals).

use std::path::PathBuf;
use std::sync::Arc;

use crate::narrow::saturating_u32;

/// Integer nanoseconds.
pub type Ns = i64;

/// One input file as the readers hand it to attribution, whatever its source: a rank's
/// timeline of kernels (a Kineto JSON trace, one GPU of an Nsight Systems export, or an NCCL
/// Inspector log, each read into the same [`RankTrace`]), or aggregated events.
#[derive(Debug)]
pub enum Document {
    Timeline(Box<RankTrace>),
    Events(Vec<CommEvent>),
}

/// One communication observation in the aggregated-events shape (a whole trace already reduced
/// to one record per collective call, or per collective and rank).
#[derive(Debug, Clone, PartialEq)]
pub struct CommEvent {
    pub collective: String,
    pub exposed_comm_ms: f64,
    pub total_comm_ms: f64,
    pub payload_bytes: f64,
    pub overlap_ratio: f64,
    pub rank_imbalance_ratio: f64,
    pub rank_imbalance_observed: bool,
    pub sync_count: f64,
}

impl CommEvent {
    /// An event with the aggregated-events defaults: one sync, total time equal to the exposed time, no
    /// imbalance observed.
    pub fn new(collective: &str, exposed_comm_ms: f64, payload_bytes: f64, overlap_ratio: f64) -> Self {
        CommEvent {
            collective: collective.to_string(),
            exposed_comm_ms,
            total_comm_ms: exposed_comm_ms,
            payload_bytes,
            overlap_ratio,
            rank_imbalance_ratio: 0.0,
            rank_imbalance_observed: false,
            sync_count: 1.0,
        }
    }

    /// Sets an observed rank imbalance ratio.
    pub fn with_imbalance(mut self, ratio: f64) -> Self {
        self.rank_imbalance_ratio = ratio;
        self.rank_imbalance_observed = true;
        self
    }
}

/// Metadata PyTorch attaches to communication (on kernels since 2.2, on `record_param_comms`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommMeta {
    /// Raw `Collective name` (e.g. `allreduce`, `_allgather_base`). The texts are shared: a
    /// trace with millions of NCCL kernels holds each distinct one once.
    pub collective: Option<Arc<str>>,
    pub in_nelems: Option<u64>,
    pub out_nelems: Option<u64>,
    pub dtype: Option<Arc<str>>,
    pub pg_name: Option<Arc<str>>,
    /// `Seq` of the collective in its process group, when the trace has it.
    pub seq: Option<u64>,
    /// Size in bytes from `Input Dims` × `Input type` (the shapes fallback), when present.
    pub shapes_bytes: Option<u64>,
    /// `Group size`: the ranks of the collective's process group, whether or not their traces
    /// are at hand (the bus factor's n).
    pub group_size: Option<u32>,
}

/// A GPU activity: `cat` kernel, gpu_memcpy or gpu_memset, complete events only. Kept
/// compact (48 bytes), since a kernel-dense trace holds millions: the name is an index, the
/// correlation a value and a flag, and the rare communication metadata a box.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub ts: Ns,
    pub dur: Ns,
    /// The stream (the event's `tid` on the GPU track).
    pub stream: i64,
    correlation: u64,
    pub meta: Option<Box<CommMeta>>,
    /// Index into [`RankTrace::names`].
    pub name: u32,
    pub cat: KernelCat,
    has_correlation: bool,
}

impl Kernel {
    /// A kernel without communication metadata.
    pub fn new(ts: Ns, dur: Ns, name: u32, cat: KernelCat, stream: i64, correlation: Option<u64>) -> Self {
        Kernel {
            ts,
            dur,
            stream,
            correlation: correlation.unwrap_or(0),
            meta: None,
            name,
            cat,
            has_correlation: correlation.is_some(),
        }
    }

    pub fn end(&self) -> Ns {
        self.ts + self.dur
    }

    /// The `correlation` that links the kernel to its launch, when the trace has one.
    pub fn correlation(&self) -> Option<u64> {
        self.has_correlation.then_some(self.correlation)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelCat {
    Kernel,
    Memcpy,
    Memset,
}

/// A CPU runtime event that launched GPU work (`cudaLaunchKernel`, …), keyed by correlation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Launch {
    pub ts: Ns,
    pub pid: i64,
    pub tid: i64,
}

/// The launches of one rank by correlation: collected in any order while reading, sorted once
/// ([`Launches::seal`]), then found by binary search. Each costs 24 bytes (its launching thread
/// is an index into a table of the rank's few threads), a quarter of a hash map's entry, which
/// matters when every kernel has one. As with a map, a correlation written twice keeps its last
/// launch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Launches {
    entries: Vec<LaunchEntry>,
    /// The distinct (pid, tid) of the launches, in order of first appearance.
    threads: Vec<(i64, i64)>,
    /// Whether `entries` is sorted by correlation without repeats (true while they arrive in
    /// increasing order, as Kineto writes them).
    sealed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct LaunchEntry {
    correlation: u64,
    ts: Ns,
    thread: u32,
}

impl Launches {
    pub fn insert(&mut self, correlation: u64, launch: Launch) {
        if self.entries.last().is_some_and(|last| last.correlation >= correlation) {
            self.sealed = false;
        } else if self.entries.is_empty() {
            self.sealed = true;
        }
        let thread = self.thread_index(launch.pid, launch.tid);
        self.entries.push(LaunchEntry { correlation, ts: launch.ts, thread });
    }

    /// The index of a launching thread: launches come from a handful of threads, mostly the
    /// last one seen, so a scan from the end finds it at once.
    fn thread_index(&mut self, pid: i64, tid: i64) -> u32 {
        if let Some(i) = self.threads.iter().rposition(|&t| t == (pid, tid)) {
            return saturating_u32(i);
        }
        self.threads.push((pid, tid));
        saturating_u32(self.threads.len() - 1)
    }

    /// Sorts by correlation, keeping the last launch of each; lookups need it.
    pub fn seal(&mut self) {
        if self.sealed {
            return;
        }
        // Stable, so that reversing puts the last of equal correlations first for `dedup`.
        self.entries.sort_by_key(|e| e.correlation);
        self.entries.reverse();
        self.entries.dedup_by_key(|e| e.correlation);
        self.entries.reverse();
        self.entries.shrink_to_fit();
        self.sealed = true;
    }

    /// The launch of `correlation`. On a list that was never sealed it falls back to a scan
    /// from the end (correct, slow: every reader seals).
    pub fn get(&self, correlation: &u64) -> Option<Launch> {
        let entry = if self.sealed {
            let i = self.entries.binary_search_by_key(correlation, |e| e.correlation).ok()?;
            self.entries.get(i)?
        } else {
            self.entries.iter().rev().find(|e| e.correlation == *correlation)?
        };
        Some(self.launch(entry))
    }

    fn launch(&self, e: &LaunchEntry) -> Launch {
        let (pid, tid) = self.threads.get(e.thread as usize).copied().unwrap_or_default();
        Launch { ts: e.ts, pid, tid }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every launch with its correlation, in correlation order once sealed.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Launch)> + '_ {
        self.entries.iter().map(|e| (e.correlation, self.launch(e)))
    }
}

impl FromIterator<(u64, Launch)> for Launches {
    fn from_iter<I: IntoIterator<Item = (u64, Launch)>>(iter: I) -> Self {
        let mut launches = Launches::default();
        for (c, l) in iter {
            launches.insert(c, l);
        }
        launches.seal();
        launches
    }
}

/// A CPU-side communication op: `record_param_comms` or a `nccl:<op>` annotation.
#[derive(Debug, Clone, PartialEq)]
pub struct CommOp {
    pub ts: Ns,
    pub end: Ns,
    pub pid: i64,
    pub tid: i64,
    /// `None` for `record_param_comms`; the op after `nccl:` for annotations.
    pub annotation: Option<String>,
    pub meta: CommMeta,
}

/// A `nccl:<op>` annotation on a GPU stream (`gpu_user_annotation`); never a kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuAnnotation {
    pub ts: Ns,
    pub end: Ns,
    pub stream: i64,
    pub op: String,
}

/// A `ProfilerStep#N` marker.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub name: String,
    pub ts: Ns,
}

/// One rank's trace, as parsed.
#[derive(Debug, Clone, Default)]
pub struct RankTrace {
    pub file: PathBuf,
    /// From `distributedInfo.rank`, else the file name; resolved by the loader.
    pub rank: Option<u32>,
    pub world_size: Option<u32>,
    pub base_time_ns: Option<i64>,
    /// Distinct kernel names, each stored once (shared with the parser's index).
    pub names: Vec<Arc<str>>,
    pub kernels: Vec<Kernel>,
    pub launches: Launches,
    pub comm_ops: Vec<CommOp>,
    pub gpu_annotations: Vec<GpuAnnotation>,
    pub steps: Vec<Step>,
    /// `ProfilerStep#N` as PyTorch also writes them on the GPU timeline (`gpu_user_annotation`):
    /// only HTA's window reads them.
    pub gpu_steps: Vec<Step>,
    /// Whether a kernel or annotation name marks a mixture-of-experts job (`moe`, `expert`,
    /// `deep_ep`, …): the advice then asks for expert and token measurements.
    pub moe_markers: bool,
    /// Whether HTA reads this trace's timestamps as floats (some event's `ts` is written with a
    /// decimal point or an exponent, or some event has none), and so rounds every interval
    /// inward to whole microseconds.
    pub fractional_ts: bool,
    /// CPU events whose `args` carry a `stream` (a Triton op's `cpu_op`): HTA counts them as GPU
    /// work at their CPU time, so only `--compat hta` reads them.
    pub stream_ops: Vec<Kernel>,
    /// All events in `traceEvents`, of any kind.
    pub num_events: u64,
    /// Whether some kept name was longer than the limit and was cut.
    pub names_truncated: bool,
    /// The source records communication only (NCCL Inspector logs): no compute kernels, no
    /// clock, so overlap and exposed time cannot be measured and are reported as absent.
    pub no_compute: bool,
}

/// The earliest start and the latest end of `spans` (start, end); `None` when there are none.
pub fn extent(spans: impl Iterator<Item = (Ns, Ns)>) -> Option<(Ns, Ns)> {
    spans.fold(None, |range, (start, end)| {
        let (first, last) = range.unwrap_or((start, end));
        Some((first.min(start), last.max(end)))
    })
}

impl RankTrace {
    pub fn kernel_name(&self, k: &Kernel) -> &str {
        self.names.get(k.name as usize).map(|n| &**n).unwrap_or("")
    }

    /// The first start and the last end of everything kept (kernels, communication ops and
    /// annotations, steps, launches); `None` when nothing is.
    pub fn time_range(&self) -> Option<(Ns, Ns)> {
        let kernels = self.kernels.iter().chain(&self.stream_ops).map(|k| (k.ts, k.end()));
        let ops = self.comm_ops.iter().map(|o| (o.ts, o.end));
        let annotations = self.gpu_annotations.iter().map(|a| (a.ts, a.end));
        let marks = self.steps.iter().chain(&self.gpu_steps).map(|s| (s.ts, s.ts));
        let launches = self.launches.iter().map(|(_, l)| (l.ts, l.ts));
        extent(kernels.chain(ops).chain(annotations).chain(marks).chain(launches))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launches_keep_the_last_of_a_repeated_correlation_in_any_order() {
        let at = |ts| Launch { ts, pid: 1, tid: 2 };
        let mut l = Launches::default();
        for (c, ts) in [(5, 1), (3, 2), (5, 3), (9, 4), (3, 5)] {
            l.insert(c, at(ts));
        }
        // Unsealed lookups are already right, only slower.
        assert_eq!(l.get(&5).map(|l| l.ts), Some(3));
        l.seal();
        assert_eq!(
            (l.get(&3).map(|l| l.ts), l.get(&5).map(|l| l.ts), l.get(&9).map(|l| l.ts)),
            (Some(5), Some(3), Some(4))
        );
        assert_eq!(l.get(&4), None);
        assert_eq!(l.len(), 3);
        assert_eq!(std::mem::size_of::<Kernel>(), 48);
        assert_eq!(std::mem::size_of::<LaunchEntry>(), 24);
    }
}
