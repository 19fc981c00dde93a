//! Pure attribution: parsed ranks (or aggregated events) in, per-collective hotspots, per-rank overlap
//! and the priority out. No I/O, and no decision: the mitigation and the follow-up are the
//! decision layer's (`decide::mitigation::diagnose`).
//!
//! Every definition here is `docs/attribution.md`'s: the step window, the equal-share
//! sweep, cross-rank matching and the clock-free imbalance ratio, and HTA's parity rules under
//! [`Compat::Hta`].
//!
//! Submodules: `hotspot` (the data: aggregated events, hotspots, and their aggregation), `combine` (per collective over ranks), `transfer` (instances matched across
//! ranks: imbalance, transfer, wait, bus bandwidth, last arrival) and [`series`] (which step a
//! kernel belongs to, and the per-step samples) and `sizes` (per-call distributions by message
//! size, for sources without compute).

mod combine;
mod hotspot;
pub mod picture;
pub mod series;
mod sizes;
pub mod timeline;
mod transfer;
pub mod whatif;

pub use crate::model::CommEvent;
#[doc(hidden)]
pub use hotspot::example_events;
pub use hotspot::{priority, summarize_comm_hotspots, Hotspot, SizeBucket, StepSeries};
pub use transfer::{bus_factor, LAST_ARRIVAL_ALPHA};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::caveats::{RankCoverage, StepsIgnored};
use super::classify::{
    collective_from_kernel_name, dtype_size, kernel_family, kind_default, kind_hta, library_comm, looks_like_comm,
    normalize_collective, CommPattern, KernelKind, PatternSet, UNKNOWN_COLLECTIVE,
};
use super::intervals::{intersection, length, lone_negatives, sweep, union, Span};
use super::limits::{
    ReadLimits, DEFAULT_MAX_EVENTS, MAX_DISTINCT_COLLECTIVES, MAX_NAME_BYTES, OTHER_COLLECTIVES, TRUNCATION_MARK,
};
use super::model::{CommMeta, CommOp, GpuAnnotation, Kernel, KernelCat, Launch, Ns, RankTrace};
use super::narrow::{float_to_i64, saturating_u32};

pub const SCHEMA_VERSION: u32 = 1;

/// Which rules decide the window, the rounding and the kernel classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Compat {
    /// commgate's own definitions: exact nanoseconds, the `ProfilerStep` window.
    #[default]
    Default,
    /// Holistic Trace Analysis's window, rounding and name rules.
    Hta,
}

/// What the caller chose; resolved from flags and `commgate.toml` by `config`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AttributeOptions {
    pub compat: Compat,
    /// The number of steps of traces without ProfilerStep markers (per-step figures divide by
    /// it). Where markers delimit steps they win, and the attribution notes the setting ignored.
    pub steps: Option<StepsSetting>,
    /// Extra substrings that mark a kernel as communication (custom collectives), each
    /// optionally naming its row.
    pub comm_patterns: Vec<CommPattern>,
    /// Events one trace file may hold (`None`: [`DEFAULT_MAX_EVENTS`]).
    pub max_events: Option<u64>,
    /// What the what-if replay is asked besides its own scenarios.
    pub what_if: whatif::WhatIfOptions,
}

impl AttributeOptions {
    /// The per-file read limits these options set.
    pub fn read_limits(&self) -> ReadLimits {
        ReadLimits { max_events: self.max_events.unwrap_or(DEFAULT_MAX_EVENTS) }
    }
}

/// A step count the user gave, and how (for the note when the markers win).
#[derive(Debug, Clone, PartialEq)]
pub struct StepsSetting {
    pub count: u64,
    /// `--steps 4`, `COMMGATE_STEPS=4` or `steps = 4 (commgate.toml)`.
    pub set_by: String,
}

impl StepsSetting {
    /// A count set in code (tests, the library), named like the settings-file key.
    pub fn new(count: u64) -> Self {
        StepsSetting { count, set_by: format!("steps = {count}") }
    }
}

/// Where the numbers came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// `kineto` or `events` (the aggregated-events shape).
    pub format: String,
    pub files: Vec<String>,
    pub ranks: Vec<u32>,
    pub world_size: u32,
    /// Steps in the window (the smallest over ranks when they differ).
    pub steps: u64,
    /// `steps` (ProfilerStep window), `trace` (whole trace), `hta` (HTA's window) or `events`.
    pub window: String,
    pub compat: Compat,
    /// Which of the job's ranks the traces cover (absent for aggregated events, which have no ranks,
    /// and in files written before commgate recorded it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<RankCoverage>,
    /// A `steps` setting the traces' ProfilerStep markers overrode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_ignored: Option<StepsIgnored>,
    /// Some kernel, step, collective or process-group name was longer than the limit and was
    /// cut (it ends in the truncation mark), so names may merge or read short.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub names_truncated: bool,
    /// Kernels counted under the catch-all collective because their rank already had the
    /// maximum number of distinct collective names (the largest count over ranks).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub collectives_folded: u64,
    /// Steps past [`series::MAX_STEP_SAMPLES`] left out of the per-step samples (the largest
    /// count over ranks); the per-step means still cover every step.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub steps_past_sample_cap: u64,
    /// Whether the source records compute kernels; when not (NCCL Inspector logs), overlap and
    /// exposed time are not measured and the reports show them as absent.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub compute_observed: bool,
    /// GPU activities outside the step window because they were queued before the capture
    /// began (no launch event on a rank whose other activities have one), summed over ranks.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub queued_before_capture: u64,
    /// Some trace names mixture-of-experts work (`moe`, `expert`, DeepEP kernels, …): the advice
    /// then asks for expert and token measurements.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub moe_markers: bool,
    /// When no rank has a kernel commgate knows as communication: the compute kernels whose
    /// names look like it ([`looks_like_comm`]), by family, the most time first (at most
    /// [`MAX_LOOKALIKES`]), for the note that says how to name them (`--comm-pattern`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comm_lookalikes: Vec<Lookalike>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// The note of one rank's trace from a larger job.
pub const ONE_RANK_NOTE: &str =
    "one rank's trace: transfer, wait, imbalance and last arrival compare ranks, so they are not observed";

/// The note beside a bus bandwidth marked `>=`.
pub const BUSBW_LOWER_BOUND_NOTE: &str = "bus bandwidth marked >= is a lower bound: the traces hold fewer of the \
     process group's ranks than its size, so the shortest kernel seen may still include waiting";

/// The note of a source without compute kernels.
pub const NO_COMPUTE_NOTE: &str =
    "NCCL Inspector logs have no compute kernels: overlap and exposed time are not measured";

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Source {
    /// What the figures do not cover, one plain sentence each (renderers escape them): the
    /// missing ranks of a partial rank set, and a `steps` setting the markers overrode.
    pub fn notes(&self) -> Vec<String> {
        let partial = self.coverage.as_ref().filter(|c| c.is_partial());
        let ranks = partial.map(|c| format!("partial rank set: {}", c.summary()));
        let one_rank = partial.filter(|c| c.ranks_present == 1).map(|_| ONE_RANK_NOTE.to_string());
        let truncated = self
            .names_truncated
            .then(|| format!("names over {MAX_NAME_BYTES} bytes were cut and end in \"{TRUNCATION_MARK}\""));
        let folded = (self.collectives_folded > 0).then(|| {
            format!(
                "{} kernels of collectives past the first {MAX_DISTINCT_COLLECTIVES} distinct names of a rank are counted under \"{OTHER_COLLECTIVES}\"",
                self.collectives_folded
            )
        });
        let capped = (self.steps_past_sample_cap > 0).then(|| {
            format!(
                "per-step samples keep the first {} steps; {} later steps are left out of them (not of the per-step figures)",
                series::MAX_STEP_SAMPLES,
                self.steps_past_sample_cap
            )
        });
        let no_compute = (!self.compute_observed).then(|| NO_COMPUTE_NOTE.to_string());
        let lookalikes = lookalike_note(&self.comm_lookalikes);
        let queued = (self.queued_before_capture > 0).then(|| {
            let (n, one) = (self.queued_before_capture, self.queued_before_capture == 1);
            let (what, verb) = if one { ("GPU activity", "is") } else { ("GPU activities", "are") };
            format!("{n} {what} queued before the capture began (no launch event in the trace) {verb} outside the step window")
        });
        no_compute
            .into_iter()
            .chain(ranks)
            .chain(one_rank)
            .chain(self.steps_ignored.as_ref().map(StepsIgnored::summary))
            .chain(truncated)
            .chain(folded)
            .chain(capped)
            .chain(queued)
            .chain(lookalikes)
            .collect()
    }
}

/// A compute kernel family whose name looks like communication, and its time per step (the
/// mean over the ranks that run it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lookalike {
    pub family: String,
    pub ms_per_step: f64,
}

/// The most look-alike families a note names.
pub const MAX_LOOKALIKES: usize = 3;

/// The note that names look-alike kernels and the flag that would count them.
fn lookalike_note(lookalikes: &[Lookalike]) -> Option<String> {
    let first = lookalikes.first()?;
    let named: Vec<String> =
        lookalikes.iter().map(|l| format!("{} ({:.3} ms per step)", l.family, l.ms_per_step)).collect();
    let row = first.family.rsplit("::").next().unwrap_or(&first.family);
    Some(format!(
        "no kernel is one commgate knows as communication, but these look like it: {}; if they are, name them \
         with --comm-pattern NAME=SUBSTRING (repeatable), e.g. --comm-pattern {row}={}",
        named.join(", "),
        first.family
    ))
}

/// One rank's overlap, per step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankSummary {
    pub rank: u32,
    pub file: String,
    pub steps: u64,
    pub comm_ms: f64,
    pub compute_ms: f64,
    pub overlapped_ms: f64,
    pub exposed_ms: f64,
    /// `100 · overlapped / comm`; 0 when there is no communication.
    pub overlap_pct: f64,
    pub comm_kernels: u64,
    /// The length of each step, milliseconds, in time order (capped at
    /// [`series::MAX_STEP_SAMPLES`]); the whole trace is one step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_ms: Vec<f64>,
}

/// The result of `commgate attribute`, the JSON of formats.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    pub schema_version: u32,
    pub source: Source,
    pub by_collective: BTreeMap<String, Hotspot>,
    pub priority: Option<Hotspot>,
    pub num_events: u64,
    pub ranks: Vec<RankSummary>,
    /// What would fix it: the replayed steps, the fixes ranked by the time they would save, the
    /// critical path and the picture of the median step (traces with compute kernels only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what_if: Option<whatif::WhatIf>,
    /// The analyses the what-if was replayed from, so that `check` can replay them again with
    /// the benchmark's bus bandwidth. Never written.
    #[serde(skip)]
    pub replayable: Replayable,
}

/// Ranks' analyses kept for another replay. Not a figure: two attributions compare equal
/// whatever they hold, and it prints as its count.
#[derive(Clone, Default)]
pub struct Replayable(pub Option<Arc<Vec<RankAnalysis>>>);

impl PartialEq for Replayable {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for Replayable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Replayable({} ranks)", self.0.as_ref().map_or(0, |r| r.len()))
    }
}

impl Attribution {
    /// Replays the what-if again with `opts` (a bus bandwidth known only now); nothing when
    /// the analyses were not kept.
    pub fn replay_what_if(&mut self, opts: &whatif::WhatIfOptions) {
        if let Some(ranks) = &self.replayable.0 {
            self.what_if = whatif::what_if(ranks, &self.by_collective, opts);
        }
    }

    /// What the figures do not cover or how to read them, one plain sentence each: the source's
    /// notes, then a lower-bound bus bandwidth's.
    pub fn notes(&self) -> Vec<String> {
        let lower_bound = self.by_collective.values().any(|h| h.busbw_lower_bound);
        let mut notes = self.source.notes();
        notes.extend(lower_bound.then(|| BUSBW_LOWER_BOUND_NOTE.to_string()));
        notes
    }
}

/// The attribution of hotspots, for both input formats: the priority is the collective with the
/// most exposed time.
pub fn conclude(
    source: Source,
    by_collective: BTreeMap<String, Hotspot>,
    ranks: Vec<RankSummary>,
    num_events: u64,
) -> Attribution {
    let priority = priority(&by_collective).cloned();
    Attribution {
        schema_version: SCHEMA_VERSION,
        source,
        by_collective,
        priority,
        num_events,
        ranks,
        what_if: None,
        replayable: Replayable::default(),
    }
}

/// Attribution of aggregated events (already aggregated by whoever wrote them).
///
/// Their collective names get the same bounds as a Kineto trace's: each is cut to the name limit
/// (the reader already cut it; a cut name ends in the truncation mark) and names past the
/// distinct-name limit share the catch-all row.
pub fn attribute_events(files: Vec<String>, events: &[CommEvent]) -> Attribution {
    let mut budget = NameBudget::default();
    let events: Vec<CommEvent> = events
        .iter()
        .map(|e| CommEvent { collective: budget.admit(e.collective.clone()).to_string(), ..e.clone() })
        .collect();
    let names_truncated = events.iter().any(|e| e.collective.ends_with(TRUNCATION_MARK));
    let by_collective = summarize_comm_hotspots(&events);
    let source = Source {
        format: "events".to_string(),
        files,
        ranks: Vec::new(),
        world_size: 0,
        steps: 1,
        window: "events".to_string(),
        compat: Compat::Default,
        coverage: None,
        steps_ignored: None,
        names_truncated,
        collectives_folded: budget.folded,
        steps_past_sample_cap: 0,
        compute_observed: true,
        queued_before_capture: 0,
        moe_markers: false,
        comm_lookalikes: Vec::new(),
    };
    conclude(source, by_collective, Vec::new(), events.len() as u64)
}

// ---------------------------------------------------------------------------------------------
// Kineto traces: per rank, then across ranks.

/// How one communication kernel was identified.
#[derive(Debug, Clone, PartialEq)]
pub struct CommKernel {
    pub ts: Ns,
    pub end: Ns,
    /// Shared among the rank's kernels of one collective (millions of kernels, a few names).
    pub collective: Arc<str>,
    /// Bytes of this call, `None` when no metadata says.
    pub payload: Option<u64>,
    pub key: MatchKey,
    /// The step (0-based, in time order) whose window holds the kernel's anchor.
    pub step: u32,
    /// The process group's size (`Group size`), when the metadata says.
    pub group_size: Option<u32>,
}

/// How instances of a collective are matched across ranks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MatchKey {
    /// (`Process Group Name`, `Seq`), written by PyTorch.
    Seq { pg: Arc<str>, seq: u64 },
    /// (process group, collective, ordinal of the kernel on its rank).
    Ordinal { pg: Arc<str>, collective: Arc<str>, ordinal: u64 },
}

/// One collective on one rank, over the whole window.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RankCollective {
    pub kernels: u64,
    /// Swept shares, nanoseconds.
    pub total_ns: f64,
    pub exposed_ns: f64,
    pub payload_bytes: u64,
    pub payload_known: bool,
    /// Swept exposed nanoseconds per step, `(step, ns)` for the steps with this collective,
    /// ascending (steps past the sample cap left out).
    pub exposed_by_step: Vec<(u32, f64)>,
}

/// Everything measured on one rank, over its window (not yet per step).
#[derive(Debug, Clone, PartialEq)]
pub struct RankAnalysis {
    pub rank: u32,
    pub file: String,
    /// The divisor for per-step figures.
    pub steps: u64,
    /// Whether `steps` was counted from ProfilerStep markers (rather than set or defaulted).
    pub steps_from_markers: bool,
    pub window: &'static str,
    pub comm_ns: Ns,
    pub compute_ns: Ns,
    pub overlapped_ns: Ns,
    pub comm_kernels: Vec<CommKernel>,
    pub by_collective: BTreeMap<String, RankCollective>,
    pub base_time_ns: Option<i64>,
    pub world_size: Option<u32>,
    pub num_events: u64,
    /// Whether some name in the trace was over the length limit and was cut.
    pub names_truncated: bool,
    /// Kernels counted under [`OTHER_COLLECTIVES`] (past the distinct-name limit).
    pub collectives_folded: u64,
    /// How many step windows the window holds (1 for the whole trace), uncapped.
    pub samples: u64,
    /// The length of each step window (capped at [`series::MAX_STEP_SAMPLES`]); for the whole
    /// trace, from the first GPU activity's start to the last one's end.
    pub step_ns: Vec<Ns>,
    /// The source records communication only ([`RankTrace::no_compute`]).
    pub no_compute: bool,
    /// The kept steps' GPU work for what-if replay (empty without compute kernels, and in a
    /// partial file).
    pub timeline: Vec<timeline::StepTimeline>,
    /// GPU activities left out of a step window because they have no launch event on a rank
    /// whose other activities have one: queued before the capture began (0 under HTA's rules,
    /// which drop them as its own join does).
    pub unlaunched_left_out: u64,
    /// The trace names mixture-of-experts work ([`RankTrace::moe_markers`]).
    pub moe_markers: bool,
    /// When the rank has no communication kernel: its compute kernel families that look like
    /// communication and their time over the window, the most first (at most
    /// [`MAX_LOOKALIKES`]).
    pub comm_lookalikes: Vec<(String, Ns)>,
}

impl RankAnalysis {
    pub fn exposed_ns(&self) -> Ns {
        self.comm_ns - self.overlapped_ns
    }

    /// `100 · overlapped / comm`, HTA's `comp_comm_overlap_pctg`.
    pub fn overlap_pct(&self) -> f64 {
        if self.comm_ns == 0 {
            0.0
        } else {
            100.0 * self.overlapped_ns as f64 / self.comm_ns as f64
        }
    }

    /// What one step sample is divided by so that samples read per step like every other
    /// figure: 1 for step windows, the step count for a whole trace given `--steps N`.
    pub fn sample_divisor(&self) -> f64 {
        (self.steps as f64 / self.samples.max(1) as f64).max(1.0)
    }
}

/// Attribution from ranks already analysed (sorted by rank).
pub fn attribute_analyses(ranks: Vec<RankAnalysis>, opts: &AttributeOptions) -> Attribution {
    let by_collective = combine::combine_ranks(&ranks);
    let summaries = ranks.iter().map(combine::rank_summary).collect();
    let present: Vec<u32> = ranks.iter().map(|r| r.rank).collect();
    let coverage = RankCoverage::new(&present, ranks.iter().filter_map(|r| r.world_size).max());
    let source = Source {
        format: "kineto".to_string(),
        files: ranks.iter().map(|r| r.file.clone()).collect(),
        ranks: present,
        world_size: coverage.world_size,
        steps: ranks.iter().map(|r| r.steps).min().unwrap_or(1),
        window: ranks.first().map(|r| r.window).unwrap_or("trace").to_string(),
        compat: opts.compat,
        coverage: Some(coverage),
        steps_ignored: steps_ignored(&ranks, opts.steps.as_ref()),
        names_truncated: ranks.iter().any(|r| r.names_truncated),
        collectives_folded: ranks.iter().map(|r| r.collectives_folded).max().unwrap_or(0),
        steps_past_sample_cap: ranks
            .iter()
            .map(|r| r.samples.saturating_sub(series::MAX_STEP_SAMPLES as u64))
            .max()
            .unwrap_or(0),
        compute_observed: !ranks.iter().any(|r| r.no_compute),
        queued_before_capture: ranks.iter().map(|r| r.unlaunched_left_out).sum(),
        moe_markers: ranks.iter().any(|r| r.moe_markers),
        comm_lookalikes: lookalikes_of(&ranks),
    };
    let num_events = ranks.iter().map(|r| r.num_events).fold(0u64, u64::saturating_add);
    let what_if = whatif::what_if(&ranks, &by_collective, &opts.what_if);
    let replayable = Replayable(what_if.is_some().then(|| Arc::new(ranks)));
    Attribution { what_if, replayable, ..conclude(source, by_collective, summaries, num_events) }
}

/// The look-alike families over ranks, when no rank has a communication kernel: each family's
/// time per step, the mean over the ranks that run it, the most first.
fn lookalikes_of(ranks: &[RankAnalysis]) -> Vec<Lookalike> {
    if ranks.iter().any(|r| !r.comm_kernels.is_empty()) {
        return Vec::new();
    }
    let mut by_family: BTreeMap<&str, (f64, u32)> = BTreeMap::new();
    for r in ranks {
        for (family, ns) in &r.comm_lookalikes {
            let entry = by_family.entry(family).or_default();
            entry.0 += *ns as f64 / 1e6 / r.steps.max(1) as f64;
            entry.1 += 1;
        }
    }
    let mut all: Vec<Lookalike> = by_family
        .into_iter()
        .map(|(family, (ms, n))| Lookalike { family: family.to_string(), ms_per_step: ms / f64::from(n.max(1)) })
        .collect();
    all.sort_by(|a, b| b.ms_per_step.total_cmp(&a.ms_per_step).then_with(|| a.family.cmp(&b.family)));
    all.truncate(MAX_LOOKALIKES);
    all
}

/// A rank's look-alike families (see [`RankAnalysis::comm_lookalikes`]) from its look-alike
/// kernels' time by name.
fn rank_lookalikes(t: &RankTrace, by_name: HashMap<u32, Ns>) -> Vec<(String, Ns)> {
    let mut by_family: BTreeMap<String, Ns> = BTreeMap::new();
    for (name, ns) in by_name {
        let family = kernel_family(t.names.get(name as usize).map(|n| &**n).unwrap_or(""));
        let entry = by_family.entry(family).or_default();
        *entry = entry.saturating_add(ns);
    }
    let mut all: Vec<(String, Ns)> = by_family.into_iter().collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    all.truncate(MAX_LOOKALIKES);
    all
}

/// The note for a step count the markers overrode: the setting differs from the markers' count
/// (the smallest over the ranks that have markers).
fn steps_ignored(ranks: &[RankAnalysis], setting: Option<&StepsSetting>) -> Option<StepsIgnored> {
    let setting = setting?;
    let marker_steps = ranks.iter().filter(|r| r.steps_from_markers).map(|r| r.steps).min()?;
    (marker_steps != setting.count).then(|| StepsIgnored {
        requested: setting.count,
        set_by: setting.set_by.clone(),
        marker_steps,
    })
}

/// The window on one rank: which kernels count, and how many steps they span.
struct Window {
    /// Launch (or kernel) start must lie in `[start, end)`.
    start: Ns,
    end: Ns,
    /// Kernels without a launch event are kept (default) or dropped (HTA's inner join).
    keep_unlaunched: bool,
    steps: u64,
    name: &'static str,
    /// The first start of each step, in time order (empty for the whole trace).
    starts: Vec<Ns>,
}

fn window(t: &RankTrace, opts: &AttributeOptions, multi_step_names: bool) -> Window {
    // First start of each distinct step, in time order.
    // Indexed by name: a trace may hold a million distinct step names.
    let mut first_by_name: HashMap<&str, Ns> = HashMap::with_capacity(t.steps.len());
    for s in &t.steps {
        let first = first_by_name.entry(s.name.as_str()).or_insert(s.ts);
        *first = (*first).min(s.ts);
    }
    let mut firsts: Vec<(&str, Ns)> = first_by_name.into_iter().collect();
    firsts.sort_unstable_by_key(|&(name, ts)| (ts, name));
    let counted_steps = (firsts.len() as u64).saturating_sub(1).max(1);
    let starts: Vec<Ns> = if firsts.len() >= 2 { firsts.iter().map(|&(_, ts)| ts).collect() } else { Vec::new() };
    let first_and_last = match starts.as_slice() {
        [first, .., last] => Some((*first, *last)),
        _ => None,
    };
    let w = match (opts.compat, first_and_last) {
        (Compat::Hta, _) if multi_step_names => {
            // The latest step start, the GPU timeline's copies included (HTA reads them as CPU
            // events).
            let last = t.steps.iter().chain(&t.gpu_steps).map(|s| s.ts).max().unwrap_or(Ns::MAX);
            Window {
                start: Ns::MIN,
                end: hta_round(t, last),
                keep_unlaunched: false,
                steps: counted_steps,
                name: "hta",
                starts,
            }
        }
        (Compat::Hta, _) => {
            Window { start: Ns::MIN, end: Ns::MAX, keep_unlaunched: true, steps: 1, name: "trace", starts: Vec::new() }
        }
        // Kineto records every launch from the start of the capture, so on a rank with launch
        // events a GPU activity without one was queued before the capture began: before the
        // first step, whenever it ran.
        (Compat::Default, Some((start, end))) => {
            Window { start, end, keep_unlaunched: t.launches.is_empty(), steps: counted_steps, name: "steps", starts }
        }
        (Compat::Default, None) => {
            Window { start: Ns::MIN, end: Ns::MAX, keep_unlaunched: true, steps: 1, name: "trace", starts: Vec::new() }
        }
    };
    // Markers win: a `steps` setting only fills in for a trace that has none.
    match &opts.steps {
        Some(setting) if w.name == "trace" => Window { steps: setting.count.max(1), ..w },
        _ => w,
    }
}

/// A time as HTA holds it: the trace's microseconds read as the nearest float64 (0.25 µs apart
/// at today's epoch times), `None` when HTA does not round this trace (then it keeps the exact
/// values).
fn hta_micros(t: &RankTrace, ns: Ns) -> Option<f64> {
    t.fractional_ts.then(|| micros_f64(ns))
}

/// `ns` as the float64 nearest to its microseconds, as a JSON reader parses `ts` text (three
/// decimals: the nanoseconds commgate keeps).
fn micros_f64(ns: Ns) -> f64 {
    let sign = if ns < 0 { "-" } else { "" };
    let abs = ns.unsigned_abs();
    format!("{sign}{}.{:03}", abs / 1000, abs % 1000).parse().unwrap_or(ns as f64 / 1e3)
}

/// Whole microseconds back to nanoseconds (HTA's rounded values are integers).
fn whole_us(us: f64) -> Ns {
    float_to_i64(us) * 1000
}

/// A launch or step time under HTA's rules: rounded up to a whole microsecond when it rounds.
fn hta_round(t: &RankTrace, ts: Ns) -> Ns {
    hta_micros(t, ts).map_or(ts, |us| whole_us(us.ceil()))
}

/// A GPU activity under HTA's rules: `ceil(ts)` to `floor(ts + dur)`, the sum taken in float64
/// first, so a sub-µs kernel that holds no whole microsecond ends 1 µs before it starts.
fn hta_span(t: &RankTrace, k: &Kernel) -> Span {
    match hta_micros(t, k.ts) {
        Some(ts) => (whole_us(ts.ceil()), whole_us((ts + micros_f64(k.dur)).floor())),
        None => (k.ts, k.end()),
    }
}

/// Measures one rank: unions, overlap, the per-collective sweep, and each comm kernel's identity.
pub fn analyze_rank(t: &RankTrace, opts: &AttributeOptions, multi_step_names: bool) -> RankAnalysis {
    let w = window(t, opts, multi_step_names);
    let hta = opts.compat == Compat::Hta;
    let ops = OpIndex::new(&t.comm_ops);
    let bounds = series::interior_bounds(&w.starts);
    let mut comm: Vec<(Span, &Kernel, u32)> = Vec::new();
    let mut compute: Vec<Span> = Vec::new();
    let mut gpu_span: Option<Span> = None;
    let mut unlaunched_left_out = 0u64;
    let patterns = PatternSet::new(&opts.comm_patterns);
    // Each distinct name is classified once: a rank has far fewer names than kernels.
    let mut kinds: Vec<Option<KernelKind>> = vec![None; t.names.len()];
    // Whether each compute kernel's name looks like communication, and those kernels' time.
    let mut looks: Vec<Option<bool>> = vec![None; t.names.len()];
    let mut lookalike_ns: HashMap<u32, Ns> = HashMap::new();
    // HTA counts CPU events that carry a stream as GPU work, at their own (CPU) time.
    let stream_ops: &[Kernel] = if hta { &t.stream_ops } else { &[] };
    let activities = t.kernels.iter().map(|k| (k, false)).chain(stream_ops.iter().map(|k| (k, true)));
    let samples = if w.starts.len() >= 2 { w.starts.len() as u64 - 1 } else { 1 };
    let replayed = timeline::replayed_steps(samples, t.kernels.len() as u64);
    let mut met: Vec<timeline::Met> = Vec::new();
    for (index, (k, on_cpu)) in activities.enumerate() {
        let launch = k.correlation().and_then(|c| t.launches.get(&c));
        let anchor = match launch {
            _ if on_cpu => hta_round(t, k.ts),
            Some(l) if hta => hta_round(t, l.ts),
            Some(l) => l.ts,
            None if !w.keep_unlaunched => {
                unlaunched_left_out += 1;
                continue;
            }
            None => k.ts,
        };
        if anchor < w.start || anchor >= w.end {
            continue;
        }
        let name = t.kernel_name(k);
        let kind = match k.cat {
            // Copies and fills are never compute or communication in the default mode.
            KernelCat::Memcpy | KernelCat::Memset if !hta => KernelKind::Other,
            _ => match kinds.get_mut(k.name as usize) {
                Some(Some(kind)) => *kind,
                slot => {
                    let kind =
                        if hta { kind_hta(name, &patterns) } else { kind_default(KernelCat::Kernel, name, &patterns) };
                    if let Some(slot) = slot {
                        *slot = Some(kind);
                    }
                    kind
                }
            },
        };
        let span = if hta { hta_span(t, k) } else { (k.ts, k.end()) };
        gpu_span = Some(gpu_span.map_or(span, |(a, b)| (a.min(span.0), b.max(span.1))));
        let step = series::step_of(bounds, anchor);
        if !on_cpu && !t.no_compute && timeline::kept(step, samples, replayed) {
            let comm = if kind == KernelKind::Comm { saturating_u32(comm.len()) } else { timeline::NOT_COMM };
            met.push(timeline::Met { step, kernel: saturating_u32(index), comm });
        }
        match kind {
            KernelKind::Comm => comm.push((span, k, step)),
            KernelKind::Compute => {
                compute.push(span);
                let looks_comm = match looks.get_mut(k.name as usize) {
                    Some(Some(known)) => *known,
                    Some(slot) => *slot.insert(!hta && looks_like_comm(name)),
                    None => false,
                };
                if looks_comm {
                    let entry = lookalike_ns.entry(k.name).or_default();
                    *entry = entry.saturating_add(span.1.saturating_sub(span.0));
                }
            }
            KernelKind::Other => {}
        }
    }
    let comm_lookalikes = if comm.is_empty() { rank_lookalikes(t, lookalike_ns) } else { Vec::new() };
    // Sorted by span (stably, as before), remembering where each kernel went for the timeline.
    let mut order: Vec<(usize, (Span, &Kernel, u32))> = comm.into_iter().enumerate().collect();
    order.sort_by_key(|&(_, (span, _, _))| span);
    let mut sorted_at = vec![0u32; order.len()];
    for (at, &(i, _)) in order.iter().enumerate() {
        if let Some(slot) = sorted_at.get_mut(i) {
            *slot = saturating_u32(at);
        }
    }
    let comm: Vec<(Span, &Kernel, u32)> = order.into_iter().map(|(_, c)| c).collect();
    for m in met.iter_mut().filter(|m| m.comm != timeline::NOT_COMM) {
        if let Some(&at) = sorted_at.get(m.comm as usize) {
            m.comm = at;
        }
    }
    let (comm_kernels, collectives_folded) = identify(t, &ops, &comm, &patterns);
    let comm_spans: Vec<Span> = comm.iter().map(|&(s, _, _)| s).collect();
    // Under HTA's rules a lone negative interval subtracts its length from the totals.
    let (comm_lone, compute_lone) =
        if hta { (lone_negatives(&comm_spans), lone_negatives(&compute)) } else { (Vec::new(), Vec::new()) };
    let lone_ns =
        |spans: &[Span], lone: &[usize]| lone.iter().filter_map(|&i| spans.get(i)).map(|&(s, e)| e - s).sum::<Ns>();
    let (comm_lone_ns, compute_lone_ns) = (lone_ns(&comm_spans, &comm_lone), lone_ns(&compute, &compute_lone));
    let comm_union = union(comm_spans.clone());
    let compute_union = union(compute);
    let overlapped = intersection(&comm_union, &compute_union);

    let mut labels: Vec<Arc<str>> = comm_kernels.iter().map(|c| Arc::clone(&c.collective)).collect();
    labels.sort_unstable();
    labels.dedup();
    let labelled: Vec<(Span, usize)> = comm
        .iter()
        .zip(&comm_kernels)
        .map(|(&(span, _, _), c)| (span, labels.binary_search(&c.collective).unwrap_or(0)))
        .collect();
    let mut shares = sweep(&labelled, &compute_union, labels.len());
    for &(span, label) in comm_lone.iter().filter_map(|&i| labelled.get(i)) {
        if let (Some(total), Some(exposed)) = (shares.total.get_mut(label), shares.exposed.get_mut(label)) {
            *total += (span.1 - span.0) as f64;
            *exposed += (span.1 - span.0) as f64;
        }
    }
    let samples = if w.starts.len() >= 2 { w.starts.len() as u64 - 1 } else { 1 };
    let exposed_by_step = if samples > 1 {
        let steps: Vec<u32> = comm_kernels.iter().map(|c| c.step).collect();
        series::exposed_by_step(&labelled, &steps, &compute_union, labels.len())
    } else {
        shares.exposed.iter().map(|&e| vec![(0, e)]).collect()
    };
    let mut by_collective: BTreeMap<String, RankCollective> = BTreeMap::new();
    let per_label = labels.iter().zip(&shares.total).zip(&shares.exposed).zip(exposed_by_step);
    for (((label, &total_ns), &exposed_ns), exposed_by_step) in per_label {
        by_collective.insert(
            label.to_string(),
            RankCollective { total_ns, exposed_ns, exposed_by_step, ..RankCollective::default() },
        );
    }
    for c in &comm_kernels {
        if let Some(rc) = by_collective.get_mut(&*c.collective) {
            rc.kernels += 1;
            if let Some(p) = c.payload {
                rc.payload_bytes = rc.payload_bytes.saturating_add(p);
                rc.payload_known = true;
            }
        }
    }
    RankAnalysis {
        rank: t.rank.unwrap_or(0),
        file: t.file.display().to_string(),
        steps: w.steps,
        steps_from_markers: w.name != "trace",
        window: w.name,
        comm_ns: length(&comm_union) + comm_lone_ns,
        compute_ns: length(&compute_union) + compute_lone_ns,
        overlapped_ns: overlapped,
        comm_kernels,
        by_collective,
        base_time_ns: t.base_time_ns,
        world_size: t.world_size,
        num_events: t.num_events,
        names_truncated: t.names_truncated,
        collectives_folded,
        samples,
        unlaunched_left_out: if hta { 0 } else { unlaunched_left_out },
        moe_markers: t.moe_markers,
        comm_lookalikes,
        // Without a clock (synthetic start times) there is no step length to report.
        step_ns: if t.no_compute { Vec::new() } else { series::step_lengths(&w.starts, gpu_span) },
        no_compute: t.no_compute,
        timeline: timeline::build(t, met),
    }
}

/// CPU communication ops by thread, sorted by start, for "which op encloses this launch".
struct OpIndex<'a> {
    ops: Vec<&'a CommOp>,
}

impl<'a> OpIndex<'a> {
    fn new(ops: &'a [CommOp]) -> Self {
        let mut ops: Vec<&CommOp> = ops.iter().collect();
        ops.sort_by_key(|o| (o.pid, o.tid, o.ts));
        OpIndex { ops }
    }

    /// The innermost `record_param_comms` and `nccl:*` ops enclosing `launch` on its thread.
    fn enclosing(&self, launch: &Launch) -> (Option<&'a CommOp>, Option<&'a CommOp>) {
        let key = (launch.pid, launch.tid, launch.ts);
        let upto = self.ops.partition_point(|o| (o.pid, o.tid, o.ts) <= key);
        let (mut record, mut annotation) = (None, None);
        // Ops nest shallowly; looking back a few dozen ops on the same thread is enough.
        for o in self.ops.iter().take(upto).rev().take(64) {
            if o.pid != launch.pid || o.tid != launch.tid {
                break;
            }
            if o.end < launch.ts {
                continue;
            }
            if o.annotation.is_some() {
                annotation = annotation.or(Some(*o));
            } else {
                record = record.or(Some(*o));
            }
        }
        (record, annotation)
    }
}

/// The distinct collective names of one rank, up to [`MAX_DISTINCT_COLLECTIVES`]; later names
/// become [`OTHER_COLLECTIVES`], counted, so a hostile trace cannot make the report, the JSON and
/// every per-collective table as long as the trace.
#[derive(Default)]
struct NameBudget {
    seen: HashSet<Arc<str>>,
    folded: u64,
    other: Option<Arc<str>>,
}

impl NameBudget {
    /// The name as kept (each distinct one allocated once), or the fold past the limit.
    fn admit(&mut self, name: String) -> Arc<str> {
        if let Some(seen) = self.seen.get(name.as_str()) {
            return Arc::clone(seen);
        }
        if self.seen.len() >= MAX_DISTINCT_COLLECTIVES {
            self.folded += 1;
            return Arc::clone(self.other.get_or_insert_with(|| Arc::from(OTHER_COLLECTIVES)));
        }
        let shared: Arc<str> = Arc::from(name);
        self.seen.insert(Arc::clone(&shared));
        shared
    }
}

/// Names each comm kernel's collective and payload, and gives it a cross-rank match key; also
/// the number of kernels folded under [`OTHER_COLLECTIVES`].
fn identify(
    t: &RankTrace,
    ops: &OpIndex<'_>,
    comm: &[(Span, &Kernel, u32)],
    patterns: &PatternSet,
) -> (Vec<CommKernel>, u64) {
    let mut ordinals: HashMap<(Arc<str>, Arc<str>), u64> = HashMap::new();
    let no_pg: Arc<str> = Arc::from("");
    let mut budget = NameBudget::default();
    let gpu_annotations = GpuAnnotationIndex::new(&t.gpu_annotations);
    let kernels = comm
        .iter()
        .map(|&(span, k, step)| {
            let (record, annotation) = match k.correlation().and_then(|c| t.launches.get(&c)) {
                Some(l) => ops.enclosing(&l),
                None => (None, None),
            };
            let kernel_meta = k.meta.as_deref();
            let record_meta = record.map(|o| &o.meta);
            let collective = kernel_meta
                .and_then(|m| m.collective.as_deref())
                .and_then(normalize_collective)
                .or_else(|| record_meta.and_then(|m| m.collective.as_deref()).and_then(normalize_collective))
                .or_else(|| annotation.and_then(|a| a.annotation.as_deref()).and_then(normalize_collective))
                .or_else(|| gpu_annotations.enclosing(k).and_then(normalize_collective))
                .unwrap_or_else(|| name_by_kernel(t.kernel_name(k), patterns));
            let collective = budget.admit(collective);
            let payload = kernel_meta
                .and_then(message_bytes)
                .or_else(|| record_meta.and_then(message_bytes))
                .or_else(|| annotation.and_then(|a| a.meta.shapes_bytes));
            let pg =
                kernel_meta.and_then(|m| m.pg_name.clone()).or_else(|| record_meta.and_then(|m| m.pg_name.clone()));
            let seq = kernel_meta.and_then(|m| m.seq).or_else(|| record_meta.and_then(|m| m.seq));
            let group_size = kernel_meta.and_then(|m| m.group_size).or_else(|| record_meta.and_then(|m| m.group_size));
            let pg = pg.unwrap_or_else(|| Arc::clone(&no_pg));
            let key = match seq {
                Some(seq) => MatchKey::Seq { pg, seq },
                None => {
                    let n = ordinals.entry((pg.clone(), collective.clone())).or_insert(0);
                    *n += 1;
                    MatchKey::Ordinal { pg, collective: collective.clone(), ordinal: *n - 1 }
                }
            };
            CommKernel { ts: span.0, end: span.1, collective, payload, key, step, group_size }
        })
        .collect();
    (kernels, budget.folded)
}

/// When no metadata or annotation names the collective: the row a matching `NAME=SUBSTRING`
/// pattern names, else the collective the kernel name denotes, else (for a kernel a pattern made
/// communication) the kernel's family, so that DeepEP's `dispatch`, `combine` and
/// `notify_dispatch` each get their own row.
fn name_by_kernel(name: &str, patterns: &PatternSet) -> String {
    if let Some(row) = patterns.row(name) {
        return row.to_string();
    }
    let from_name = collective_from_kernel_name(name);
    if from_name == UNKNOWN_COLLECTIVE && (patterns.matches(name) || library_comm(name).is_some()) {
        return kernel_family(name);
    }
    from_name
}

/// `max(In msg nelems, Out msg nelems) × dtype size`, the full buffer as nccl-tests counts it.
fn message_bytes(m: &CommMeta) -> Option<u64> {
    let n = m.in_nelems.max(m.out_nelems)?;
    Some(n.saturating_mul(dtype_size(m.dtype.as_deref()?)?))
}

/// GPU annotations by stream and start, for "which annotation encloses this kernel" without a
/// scan of all of them per kernel.
struct GpuAnnotationIndex<'a> {
    /// (stream, start, position in the trace, annotation), sorted.
    by_stream: Vec<(i64, Ns, usize, &'a GpuAnnotation)>,
}

impl<'a> GpuAnnotationIndex<'a> {
    fn new(annotations: &'a [GpuAnnotation]) -> Self {
        let mut by_stream: Vec<_> = annotations.iter().enumerate().map(|(i, a)| (a.stream, a.ts, i, a)).collect();
        by_stream.sort_unstable_by_key(|&(stream, ts, i, _)| (stream, ts, i));
        GpuAnnotationIndex { by_stream }
    }

    /// The `nccl:<op>` of the first annotation (in trace order) on the kernel's stream that encloses it. Annotations
    /// nest shallowly, so looking back a few dozen starts on the stream is enough.
    fn enclosing(&self, k: &Kernel) -> Option<&'a str> {
        let upto = self.by_stream.partition_point(|&(stream, ts, _, _)| (stream, ts) <= (k.stream, k.ts));
        self.by_stream
            .iter()
            .take(upto)
            .rev()
            .take_while(|&&(stream, _, _, _)| stream == k.stream)
            .take(64)
            .filter(|&&(_, _, _, a)| k.end() <= a.end)
            .min_by_key(|&&(_, _, i, _)| i)
            .map(|&(_, _, _, a)| a.op.as_str())
    }
}

/// Nanoseconds as milliseconds.
pub(super) fn ms(ns: f64) -> f64 {
    ns / 1e6
}
