//! The judgement of one metric, the same for a benchmark metric ([`super::MetricComparison`])
//! and a trace quantity ([`super::traces::TraceMetric`]): the estimate, its p-value before and
//! after Holm's correction, and the state the four-state rule gave it. Each of the two carries
//! it flattened (`#[serde(flatten)]`) between its own identity and its own extras, so their JSON
//! reads field for field as it did before the two shared one type.

use serde::{Deserialize, Serialize};

use super::estimate::Estimate;
use super::{nullable, Method, State};

/// One metric as judged (formats.md, "Comparison JSON" `metrics[]` and the trace comparison's
/// `metrics[]`). A value that is undefined (a 0 ms step, no per-step samples) is NaN here and
/// `null` in the JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judged<A = SharedDelta> {
    /// Baseline value (ms): the geometric mean of the runs' values (history) or the pooled one;
    /// per step for a trace quantity.
    #[serde(deserialize_with = "nullable::f64")]
    pub baseline: f64,
    #[serde(deserialize_with = "nullable::f64")]
    pub current: f64,
    /// `current / baseline`, or for a change measured as a share of the step, `1 + Δ / step`.
    #[serde(deserialize_with = "nullable::f64")]
    pub ratio: f64,
    #[serde(deserialize_with = "nullable::pair")]
    pub ci: [f64; 2],
    /// One-sided p-value in the direction of the point estimate, before adjustment.
    #[serde(deserialize_with = "nullable::f64")]
    pub p_value: f64,
    /// After Holm's correction across everything judged together.
    #[serde(deserialize_with = "nullable::f64")]
    pub p_adjusted: f64,
    pub state: State,
    /// The δ the state was judged against: [`SharedDelta`] for a benchmark metric, [`OwnDelta`]
    /// for a trace quantity.
    #[serde(flatten)]
    pub against: A,
    pub n_baseline: usize,
    pub n_current: usize,
    pub method: Method,
}

/// A benchmark metric's δ is its comparison's (`Comparison::delta`): nothing of its own to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SharedDelta;

/// A trace quantity's own δ: the smallest change acted on, on its ratio's scale.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OwnDelta {
    #[serde(deserialize_with = "nullable::f64")]
    pub delta: f64,
}

impl<A> Judged<A> {
    /// `e` judged as `state` against `against`, with the raw and Holm-adjusted p-values of the
    /// direction its point estimate went (regressed from a ratio of 1 up, improved below).
    pub(super) fn of(e: &Estimate, p_reg: f64, p_imp: f64, state: State, against: A) -> Judged<A> {
        let up = e.ratio >= 1.0;
        Judged {
            baseline: e.baseline,
            current: e.current,
            ratio: e.ratio,
            ci: e.ci,
            p_value: if up { e.p_regressed } else { e.p_improved },
            p_adjusted: if up { p_reg } else { p_imp },
            state,
            against,
            n_baseline: e.n_baseline,
            n_current: e.n_current,
            method: e.method,
        }
    }
}
