//! What a metric's state is decided from, and the rules that decide it, as the comparison is
//! handed them: the rules themselves are `decide::metric_state`'s, so that `compare` gathers
//! numbers and applies [`StateRules`] without importing `decide` (which reads the comparison).

use super::State;

/// How the note of a metric that looks regressed but may not block opens; what follows is why.
pub const LOOKS_REGRESSED: &str = "looks regressed, but ";

/// The rules that turn numbers into states, handed to the comparison by whoever runs it.
#[derive(Debug, Clone, Copy)]
pub struct StateRules {
    /// A benchmark metric's state from its evidence.
    pub metric: fn(MetricEvidence<'_>) -> MetricState,
    /// THE four-state rule, from the adjusted p-values (regressed, improved), the interval, δ
    /// and α: a trace quantity's state.
    pub four_states: fn(f64, f64, [f64; 2], f64, f64) -> State,
}

/// What a benchmark metric is judged from: its Holm-adjusted p-values, its interval, δ and α,
/// and what may keep it from blocking, in the order a reason is named.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricEvidence<'a> {
    /// Holm-adjusted one-sided p-values for "slower" and "faster".
    pub p_reg: f64,
    pub p_imp: f64,
    /// The interval of the ratio, current over baseline.
    pub ci: [f64; 2],
    pub delta: f64,
    pub alpha: f64,
    /// Why the estimate cannot block, when it cannot: 1–2 baseline runs and one current run, an
    /// unseen NCCL choice, a runner the baseline cannot judge, what one current run cannot confirm.
    pub cannot_block: Option<&'a str>,
    /// The dependence guard's finding on a row the metric reads, when it fired.
    pub dependence: Option<String>,
    /// For a tail metric (P95), the smaller side's sample count (after the warm-up cut); `None`
    /// for a median or the exposed communication.
    pub tail_samples: Option<usize>,
    /// A P95 may block only with at least this many samples on each side.
    pub p95_min_samples: usize,
}

/// A benchmark metric's state, and whether it may block at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricState {
    pub state: State,
    /// "looks regressed, but …" when the four-state rule said `regressed` and something kept the
    /// metric from blocking (`state` is then `inconclusive`).
    pub vetoed: Option<String>,
    /// Whether the metric may block a merge on this evidence: the estimate can, and a P95 has
    /// enough samples.
    pub can_block: bool,
    /// Whether a P95 has enough samples per side (a median always does); a minimum detectable
    /// effect means something only then.
    pub enough_samples: bool,
}
