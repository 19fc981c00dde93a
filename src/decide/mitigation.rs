//! THE evidence → strategy table, in one place: the seed's rules for an attribution (which
//! mitigation for the priority collective, [`choose_comm_mitigation`]; accept or tune,
//! [`recommend_comm_followup`]) and the trace gate's rule for a regressed collective (which
//! mitigation for its cause, [`for_cause`]), side by side. Definitions: `docs/attribution.md`,
//! "Priority, mitigation, follow-up", and `docs/gate.md` for the causes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::vocab::{Decision, Followup, Mitigation, Strategy};
use crate::compare::traces::{Cause, TraceComparison};
use crate::trace::attribute::{priority, Attribution, Hotspot};

/// Thresholds of the seed's rules; configurable through `commgate.toml` and flags.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Observed imbalance above this → `rebalance_ranks_or_experts`.
    pub imbalance_ratio: f64,
    /// Overlap below this (with exposed time) → `increase_overlap_or_delay_sync`.
    pub low_overlap_ratio: f64,
    /// Priority exposed time per step at or below this → `accept`.
    pub accept_exposed_ms: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds { imbalance_ratio: 0.20, low_overlap_ratio: 0.30, accept_exposed_ms: 5.0 }
    }
}

/// An attribution with its conclusion: what `commgate attribute` prints and the gate reads (the
/// attribution JSON of `docs/formats.md`: the measured fields, then `mitigation` and `followup`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    #[serde(flatten)]
    pub attribution: Attribution,
    pub mitigation: Mitigation,
    pub followup: Followup,
}

/// A diagnosis reads as its attribution: renderers and the trace comparison take the measured
/// fields through it, and only what shows the conclusion names `mitigation` and `followup`.
impl std::ops::Deref for Diagnosis {
    type Target = Attribution;

    fn deref(&self) -> &Attribution {
        &self.attribution
    }
}

/// Concludes an attribution with the seed's rules; a source without compute kernels
/// (`source.compute_observed` false) gets the rules' communication-time wording and no overlap
/// mitigation.
pub fn diagnose(attribution: Attribution, t: &Thresholds) -> Diagnosis {
    let compute = attribution.source.compute_observed;
    let mitigation = choose_comm_mitigation(attribution.priority.as_ref(), t, compute);
    let followup = recommend_comm_followup(&attribution.by_collective, t, compute);
    Diagnosis { attribution, mitigation, followup }
}

/// The seed's mitigation order, first match wins: imbalance, low overlap, all-to-all routing,
/// inspect. No priority → collect a trace.
///
/// Without compute kernels in the source (`compute_observed` false: NCCL Inspector logs) the
/// low-overlap rule is skipped: such a source has no overlap to measure, and its overlap ratio
/// of 0 would otherwise ask for overlap it cannot show.
pub fn choose_comm_mitigation(priority: Option<&Hotspot>, t: &Thresholds, compute_observed: bool) -> Mitigation {
    let Some(h) = priority else {
        return mitigation(Strategy::CollectTrace, None);
    };
    let imbalance = h.rank_imbalance_ratio.filter(|_| h.rank_imbalance_observed);
    let strategy = if imbalance.is_some_and(|r| r > t.imbalance_ratio) {
        Strategy::RebalanceRanksOrExperts
    } else if compute_observed && h.overlap_ratio < t.low_overlap_ratio && h.exposed_comm_ms > 0.0 {
        Strategy::IncreaseOverlapOrDelaySync
    } else if h.collective == "all_to_all" && h.payload_bytes.is_some_and(|p| p > 0) {
        Strategy::ReduceRoutingTraffic
    } else {
        Strategy::InspectCollectivePayloadAndSchedule
    };
    mitigation(strategy, Some(h.collective.clone()))
}

fn mitigation(strategy: Strategy, target: Option<String>) -> Mitigation {
    Mitigation {
        strategy,
        target,
        next_measurements: strategy.next_measurements().iter().map(|s| s.to_string()).collect(),
    }
}

/// The seed's follow-up: nothing to judge → collect more evidence; a small priority → accept;
/// otherwise tune, with the mitigation's next measurements.
///
/// Without compute kernels in the source (`compute_observed` false) nothing is known to be
/// exposed: the budget is held against the collective's communication time (which is what its
/// exposed figure holds there) and the reason says so; the mitigation skips the overlap rule.
pub fn recommend_comm_followup(
    hotspots: &BTreeMap<String, Hotspot>,
    t: &Thresholds,
    compute_observed: bool,
) -> Followup {
    let Some(h) = priority(hotspots) else {
        return Followup {
            decision: Decision::CollectMoreEvidence,
            reason: "no communication was found: capture a trace that includes collective kernels".to_string(),
            next_measurements: Strategy::CollectTrace.next_measurements().iter().map(|s| s.to_string()).collect(),
        };
    };
    let (c, budget) = (&h.collective, t.accept_exposed_ms);
    let judged_ms = if compute_observed { h.exposed_comm_ms } else { h.total_comm_ms };
    if judged_ms <= budget {
        let reason = if compute_observed {
            format!("{c} is the largest exposed collective at {judged_ms:.3} ms, within the {budget:.1} ms budget")
        } else {
            format!("{c} has the most communication time, {judged_ms:.3} ms, within the {budget:.1} ms budget")
        };
        return Followup { decision: Decision::Accept, reason, next_measurements: Vec::new() };
    }
    let m = choose_comm_mitigation(Some(h), t, compute_observed);
    let strategy = m.strategy.as_str();
    let reason = if compute_observed {
        format!("{c} exposes {judged_ms:.3} ms of communication (over the {budget:.1} ms budget): try {strategy}")
    } else {
        format!("{c} spends {judged_ms:.3} ms in communication (over the {budget:.1} ms budget): try {strategy}")
    };
    Followup { decision: Decision::Tune, reason, next_measurements: m.next_measurements }
}

/// The trace gate's table: the mitigation for a regressed collective's cause. A late rank (set
/// by the comparison) is what to measure first, in place of every rank's elapsed time.
pub fn for_cause(cause: Cause, collective: &str, late_rank: Option<u32>) -> Mitigation {
    let strategy = match cause {
        Cause::Wait | Cause::Mixed => Strategy::RebalanceRanksOrExperts,
        Cause::Transfer => Strategy::TuneCollectiveTransport,
        Cause::Overlap => Strategy::IncreaseOverlapOrDelaySync,
    };
    let mut m = mitigation(strategy, Some(collective.to_string()));
    if let Some(rank) = late_rank {
        m.next_measurements.retain(|n| n != "rank_elapsed_ms");
        m.next_measurements.insert(0, format!("rank {rank}'s time before {collective} (rank_elapsed_ms)"));
    }
    m
}

/// Sets the mitigation of every collective of a trace comparison that has a cause (the
/// regressed ones).
pub fn for_trace_causes(t: &mut TraceComparison) {
    for c in &mut t.collectives {
        c.mitigation = c.cause.map(|cause| for_cause(cause, &c.collective, c.late_rank));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::attribute::{seed_events, summarize_comm_hotspots, CommEvent};

    #[test]
    fn the_seed_fixture_asks_to_reduce_routing_traffic() {
        let s = summarize_comm_hotspots(&seed_events());
        let p = priority(&s).expect("a priority");
        let m = choose_comm_mitigation(Some(p), &Thresholds::default(), true);
        assert_eq!(m.strategy, Strategy::ReduceRoutingTraffic);
        assert_eq!(m.target.as_deref(), Some("all_to_all"));
    }

    #[test]
    fn mitigation_order_imbalance_then_low_overlap() {
        let t = Thresholds::default();
        let s = summarize_comm_hotspots(&[CommEvent::new("all_reduce", 16.0, 4096.0, 0.10)]);
        let m = choose_comm_mitigation(priority(&s), &t, true);
        assert_eq!(m.strategy, Strategy::IncreaseOverlapOrDelaySync);
        assert_eq!(m.next_measurements, ["exposed_comm_ms", "overlap_ratio", "step_time_ms"]);

        let s = summarize_comm_hotspots(&[CommEvent::new("all_to_all", 12.0, 4096.0, 0.10).with_imbalance(0.35)]);
        let m = choose_comm_mitigation(priority(&s), &t, true);
        assert_eq!(m.strategy, Strategy::RebalanceRanksOrExperts);

        let m = choose_comm_mitigation(None, &t, true);
        assert_eq!(m.strategy, Strategy::CollectTrace);
        assert_eq!(m.target, None);
    }

    #[test]
    fn followup_empty_accept_and_tune() {
        let t = Thresholds::default();
        let f = recommend_comm_followup(&BTreeMap::new(), &t, true);
        assert_eq!(f.decision, Decision::CollectMoreEvidence);

        let s = summarize_comm_hotspots(&[CommEvent::new("broadcast", 2.0, 512.0, 0.90)]);
        let f = recommend_comm_followup(&s, &t, true);
        assert_eq!(f.decision, Decision::Accept);

        let f = recommend_comm_followup(&summarize_comm_hotspots(&seed_events()), &t, true);
        assert_eq!(f.decision, Decision::Tune);
        assert!(f.next_measurements.iter().any(|m| m == "dispatch_payload_bytes"));
        assert!(f.reason.contains("all_to_all"), "{}", f.reason);
    }

    #[test]
    fn thresholds_are_honoured() {
        let t = Thresholds { accept_exposed_ms: 25.0, ..Thresholds::default() };
        let f = recommend_comm_followup(&summarize_comm_hotspots(&seed_events()), &t, true);
        assert_eq!(f.decision, Decision::Accept);
        let t = Thresholds { low_overlap_ratio: 0.7, ..Thresholds::default() };
        let s = summarize_comm_hotspots(&seed_events());
        assert_eq!(choose_comm_mitigation(priority(&s), &t, true).strategy, Strategy::IncreaseOverlapOrDelaySync);
    }

    /// A source without compute kernels: its overlap ratio is 0 and its exposed time is all of
    /// its communication time, as the attribution of such a source fills them in.
    fn comm_only(collective: &str, ms: f64) -> BTreeMap<String, Hotspot> {
        summarize_comm_hotspots(&[CommEvent::new(collective, ms, 4096.0, 0.0)])
    }

    #[test]
    fn without_compute_the_overlap_mitigation_is_never_chosen() {
        let t = Thresholds::default();
        let s = comm_only("all_reduce", 16.0);
        assert_eq!(choose_comm_mitigation(priority(&s), &t, true).strategy, Strategy::IncreaseOverlapOrDelaySync);
        let m = choose_comm_mitigation(priority(&s), &t, false);
        assert_eq!(m.strategy, Strategy::InspectCollectivePayloadAndSchedule);
        assert_eq!(m.target.as_deref(), Some("all_reduce"));
        let s = comm_only("all_to_all", 16.0);
        assert_eq!(choose_comm_mitigation(priority(&s), &t, false).strategy, Strategy::ReduceRoutingTraffic);
        let s = summarize_comm_hotspots(&[CommEvent::new("all_reduce", 16.0, 4096.0, 0.0).with_imbalance(0.5)]);
        assert_eq!(choose_comm_mitigation(priority(&s), &t, false).strategy, Strategy::RebalanceRanksOrExperts);
        assert_eq!(choose_comm_mitigation(None, &t, false).strategy, Strategy::CollectTrace);
    }

    #[test]
    fn without_compute_the_followup_speaks_of_communication_time() {
        let t = Thresholds::default();
        let f = recommend_comm_followup(&comm_only("all_reduce", 16.0), &t, false);
        assert_eq!(f.decision, Decision::Tune);
        assert_eq!(
            f.reason,
            "all_reduce spends 16.000 ms in communication (over the 5.0 ms budget): try \
             inspect_collective_payload_and_schedule"
        );
        assert!(!f.next_measurements.iter().any(|m| m == "overlap_ratio"), "{:?}", f.next_measurements);
        let f = recommend_comm_followup(&comm_only("all_reduce", 2.0), &t, false);
        assert_eq!(f.decision, Decision::Accept);
        assert_eq!(f.reason, "all_reduce has the most communication time, 2.000 ms, within the 5.0 ms budget");
        assert!(!f.reason.contains("exposed"));
        // The seed's wording stays for sources with compute.
        let f = recommend_comm_followup(&comm_only("all_reduce", 16.0), &t, true);
        assert_eq!(
            f.reason,
            "all_reduce exposes 16.000 ms of communication (over the 5.0 ms budget): try increase_overlap_or_delay_sync"
        );
    }
}
