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

#[cfg(test)]
mod tests {
    use super::super::traces::{Quantity, TraceMetric};
    use super::*;

    fn judged<A>(against: A) -> Judged<A> {
        Judged {
            baseline: 1.0,
            current: 1.5,
            ratio: f64::NAN,
            ci: [f64::NAN, 2.0],
            p_value: 0.5,
            p_adjusted: 1.0,
            state: State::Inconclusive,
            against,
            n_baseline: 3,
            n_current: 4,
            method: Method::Pooled,
        }
    }

    /// Flattened, the judgement's fields stand where the trace metric's own stood before the two
    /// shared one type, δ between the state and the sample counts, and NaN still reads `null`.
    #[test]
    fn a_trace_metric_writes_and_reads_its_fields_in_their_old_order() {
        let m = TraceMetric { quantity: Quantity::Wait, judged: judged(OwnDelta { delta: f64::NAN }), note: None };
        let json = serde_json::to_string(&m).expect("json");
        assert_eq!(
            json,
            r#"{"quantity":"wait","baseline":1.0,"current":1.5,"ratio":null,"ci":[null,2.0],"p_value":0.5,"p_adjusted":1.0,"state":"inconclusive","delta":null,"n_baseline":3,"n_current":4,"method":"pooled"}"#
        );
        let back: TraceMetric = serde_json::from_str(&json).expect("reads back");
        assert!(back.judged.ratio.is_nan() && back.judged.ci[0].is_nan() && back.judged.against.delta.is_nan());
        assert_eq!((back.judged.n_current, back.judged.method), (4, Method::Pooled));
    }

    #[test]
    fn a_benchmark_judgement_writes_no_delta_of_its_own() {
        let json = serde_json::to_value(judged(SharedDelta)).expect("json");
        let keys: Vec<&str> = json.as_object().expect("an object").keys().map(String::as_str).collect();
        assert!(!keys.contains(&"delta"), "{keys:?}");
        assert!(json["ratio"].is_null());
        let back: Judged = serde_json::from_value(json).expect("reads back");
        assert!(back.ratio.is_nan() && back.ci[1] == 2.0);
    }
}
