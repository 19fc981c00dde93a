//! The JSON rendering: the [`Attribution`](commgate_trace::attribute::Attribution) exactly as its serde derives shape it (the schema of
//! `docs/formats.md`, "Attribution JSON"), pretty-printed, with a trailing newline.
//! Field names live on the types; nothing is renamed here.

use commgate_gate::compare::Comparison;
use commgate_gate::decide::mitigation::Diagnosis;

/// Renders an attribution as pretty JSON ending in a newline. When the source has no compute
/// (`source.compute_observed` is false), the figures it cannot measure are `null`, not zero.
pub fn attribution(a: &Diagnosis) -> String {
    if a.source.compute_observed {
        return pretty(a);
    }
    #[expect(clippy::expect_used, reason = "infallible: the same derived types that `pretty` serialises")]
    let mut v = serde_json::to_value(a).expect("report types always serialise to JSON");
    let unmeasured = |h: &mut serde_json::Value| {
        if !h.is_object() {
            return;
        }
        for key in ["exposed_comm_ms", "exposed_comm_ms_max_rank", "overlap_ratio"] {
            h[key] = serde_json::Value::Null;
        }
        if h["steps"].is_object() {
            h["steps"]["exposed_ms"] = serde_json::Value::Null;
        }
    };
    v["by_collective"].as_object_mut().into_iter().flat_map(|m| m.values_mut()).for_each(unmeasured);
    unmeasured(&mut v["priority"]);
    for r in v["ranks"].as_array_mut().into_iter().flatten() {
        for key in ["compute_ms", "overlapped_ms", "exposed_ms", "overlap_pct"] {
            r[key] = serde_json::Value::Null;
        }
    }
    pretty(&v)
}

/// Renders a comparison (formats.md, "Comparison JSON").
pub fn comparison(c: &Comparison) -> String {
    pretty(c)
}

/// Renders a check report (formats.md, "Check report").
pub fn check(r: &commgate_gate::check::CheckReport) -> String {
    pretty(r)
}

/// Pretty JSON with a trailing newline.
fn pretty<T: serde::Serialize>(value: &T) -> String {
    // Cannot fail for these types: every map key is a `String`, every Serialize impl is
    // derived, and serde_json writes non-finite floats as `null` rather than erroring.
    #[expect(clippy::expect_used, reason = "infallible for these types (the comment above)")]
    let mut out = serde_json::to_string_pretty(value).expect("report types always serialise to JSON");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{empty, multi_rank, seed};
    use super::*;

    #[test]
    fn round_trips_and_ends_with_a_newline() {
        for a in [seed(), multi_rank(), empty()] {
            let out = attribution(&a);
            assert!(out.ends_with("}\n"), "{out}");
            let back: Diagnosis = serde_json::from_str(&out).expect("valid JSON");
            assert_eq!(back, a);
        }
    }

    #[test]
    fn unknown_payload_and_unobserved_imbalance_are_null_not_zero() {
        let v: serde_json::Value = serde_json::from_str(&attribution(&multi_rank())).expect("valid JSON");
        assert_eq!(v["schema_version"], 1);
        let gather = &v["by_collective"]["all_gather"];
        assert!(gather["payload_bytes"].is_null());
        assert_eq!(gather["payload_known"], false);
        let send_recv = &v["by_collective"]["send_recv"];
        assert!(send_recv["rank_imbalance_ratio"].is_null());
        assert_eq!(send_recv["rank_imbalance_observed"], false);
        assert_eq!(v["priority"]["collective"], "all_reduce");
        assert_eq!(v["followup"]["decision"], "tune");
        assert_eq!(v["mitigation"]["strategy"], "rebalance_ranks_or_experts");
    }

    #[test]
    fn non_finite_numbers_become_null() {
        let mut a = seed();
        if let Some(h) = a.attribution.by_collective.get_mut("broadcast") {
            h.overlap_ratio = f64::NAN;
        }
        let v: serde_json::Value = serde_json::from_str(&attribution(&a)).expect("valid JSON");
        assert!(v["by_collective"]["broadcast"]["overlap_ratio"].is_null());
    }
}
