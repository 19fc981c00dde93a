//! What the parsers keep of a trace: a compact, owned, per-rank record of the events attribution
//! needs (kernels, their launches, communication ops, step markers). Times are integer
//! nanoseconds, exactly as written in the trace (µs with up to three decimals).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::attribute::CommEvent;

/// Integer nanoseconds.
pub type Ns = i64;

/// One input file as the readers hand it to attribution, whatever its source: a rank's
/// timeline of kernels (a Kineto JSON trace, one GPU of an Nsight Systems export, or an NCCL
/// Inspector log, each read into the same [`RankTrace`]), or the seed format's aggregated events.
#[derive(Debug)]
pub enum Document {
    Timeline(Box<RankTrace>),
    Events(Vec<CommEvent>),
}

/// Metadata PyTorch attaches to communication (on kernels since 2.2, on `record_param_comms`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommMeta {
    /// Raw `Collective name` (e.g. `allreduce`, `_allgather_base`).
    pub collective: Option<String>,
    pub in_nelems: Option<u64>,
    pub out_nelems: Option<u64>,
    pub dtype: Option<String>,
    pub pg_name: Option<String>,
    /// `Seq` of the collective in its process group, when the trace has it.
    pub seq: Option<u64>,
    /// Size in bytes from `Input Dims` × `Input type` (the shapes fallback), when present.
    pub shapes_bytes: Option<u64>,
    /// `Group size`: the ranks of the collective's process group, whether or not their traces
    /// are at hand (the bus factor's n).
    pub group_size: Option<u32>,
}

/// A GPU activity: `cat` kernel, gpu_memcpy or gpu_memset, complete events only.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub ts: Ns,
    pub dur: Ns,
    /// Index into [`RankTrace::names`].
    pub name: u32,
    pub cat: KernelCat,
    /// The stream (the event's `tid` on the GPU track).
    pub stream: i64,
    pub correlation: Option<u64>,
    pub meta: Option<Box<CommMeta>>,
}

impl Kernel {
    pub fn end(&self) -> Ns {
        self.ts + self.dur
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
    pub launches: HashMap<u64, Launch>,
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

impl RankTrace {
    pub fn kernel_name(&self, k: &Kernel) -> &str {
        self.names.get(k.name as usize).map(|n| &**n).unwrap_or("")
    }
}
