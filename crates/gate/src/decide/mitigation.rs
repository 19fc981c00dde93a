//! THE evidence → strategy table, in one place: the mitigation rules for an attribution (which
//! mitigation for the priority collective, [`choose_comm_mitigation`]; accept or tune,
//! [`recommend_comm_followup`]) and the trace gate's rule for a regressed collective (which
//! mitigation for its cause, [`for_cause`]), side by side. Definitions: `docs/attribution.md`,
//! "Priority, mitigation, follow-up", and `docs/gate.md` for the causes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::vocab::{Decision, Followup, Job, Mitigation, Strategy};
use crate::compare::traces::{CollectiveCause, TraceComparison};
use commgate_trace::attribute::{priority, Attribution, Hotspot};

/// Thresholds of the mitigation rules; configurable through `commgate.toml` and flags.
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

/// What the rules know of the evidence besides its hotspots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    /// Whether the source records compute kernels (NCCL Inspector logs do not).
    pub compute_observed: bool,
    /// Which measurements exist for the job.
    pub job: Job,
    /// The job's ranks (0 for aggregated events, which have none).
    pub world_size: u32,
}

impl Context {
    /// The rules as first written, for aggregated events: compute observed.
    pub const AGGREGATED: Context = Context { compute_observed: true, job: Job::Aggregated, world_size: 0 };

    /// The context of an attribution: aggregated events keep the rules as first written; traces get the
    /// measurements of their kind of job and the worst-rank rule.
    pub fn of(a: &Attribution) -> Self {
        let job = match (a.source.format.as_str(), a.source.moe_markers) {
            ("events", _) => Job::Aggregated,
            (_, true) => Job::Moe,
            (_, false) => Job::Dense,
        };
        Context { compute_observed: a.source.compute_observed, job, world_size: a.source.world_size }
    }
}

/// Concludes an attribution with the mitigation rules, fitted to the evidence ([`Context::of`]).
pub fn diagnose(attribution: Attribution, t: &Thresholds) -> Diagnosis {
    let ctx = Context::of(&attribution);
    let mitigation = choose_comm_mitigation(attribution.priority.as_ref(), t, ctx);
    let followup = recommend_comm_followup(&attribution.by_collective, t, ctx);
    Diagnosis { attribution, mitigation, followup }
}

/// The mitigation order, first match wins: imbalance, low overlap, all-to-all routing,
/// inspect. No priority → collect a trace. The measurements are those of the job's kind.
///
/// Without compute kernels in the source (`compute_observed` false: NCCL Inspector logs) the
/// low-overlap rule is skipped: such a source has no overlap to measure, and its overlap ratio
/// of 0 would otherwise ask for overlap it cannot show. Imbalance is observed only between two
/// or more ranks, so one rank's trace never asks to rebalance.
pub fn choose_comm_mitigation(priority: Option<&Hotspot>, t: &Thresholds, ctx: Context) -> Mitigation {
    let Some(h) = priority else {
        return mitigation(Strategy::CollectTrace, None, ctx.job);
    };
    let imbalance = h.rank_imbalance_ratio.filter(|_| h.rank_imbalance_observed);
    let strategy = if imbalance.is_some_and(|r| r > t.imbalance_ratio) {
        Strategy::RebalanceRanksOrExperts
    } else if ctx.compute_observed && h.overlap_ratio < t.low_overlap_ratio && h.exposed_comm_ms > 0.0 {
        Strategy::IncreaseOverlapOrDelaySync
    } else if h.collective == "all_to_all" && h.payload_bytes.is_some_and(|p| p > 0) {
        Strategy::ReduceRoutingTraffic
    } else {
        Strategy::InspectCollectivePayloadAndSchedule
    };
    mitigation(strategy, Some(h.collective.clone()), ctx.job)
}

fn mitigation(strategy: Strategy, target: Option<String>, job: Job) -> Mitigation {
    Mitigation { strategy, target, next_measurements: owned(strategy.next_measurements(job)) }
}

fn owned(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// The follow-up: nothing to judge → collect more evidence; a small priority → accept;
/// otherwise tune, with the mitigation's next measurements.
///
/// On traces of two or more ranks the step waits for the slowest rank, so the worst rank's
/// exposed time is held against the budget too: it is shown beside the budget, and a rank over
/// it turns an `accept` into a `tune` naming that rank. Without compute kernels in the source
/// (`compute_observed` false) nothing is known to be exposed: the budget is held against the
/// collective's communication time (which is what its exposed figure holds there) and the
/// reason says so; the mitigation skips the overlap rule.
pub fn recommend_comm_followup(hotspots: &BTreeMap<String, Hotspot>, t: &Thresholds, ctx: Context) -> Followup {
    let Some(h) = priority(hotspots) else {
        return Followup {
            decision: Decision::CollectMoreEvidence,
            reason: "no communication was found: capture a trace that includes collective kernels".to_string(),
            next_measurements: owned(Strategy::CollectTrace.next_measurements(ctx.job)),
        };
    };
    let (c, budget) = (&h.collective, t.accept_exposed_ms);
    let judged_ms = if ctx.compute_observed { h.exposed_comm_ms } else { h.total_comm_ms };
    let over = worst_rank_over(hotspots, budget, ctx);
    if judged_ms <= budget && over.is_none() {
        let worst = worst_rank_note(h, ctx);
        let reason = if ctx.compute_observed {
            format!(
                "{c} is the largest exposed collective at {judged_ms:.3} ms{worst}, within the {budget:.1} ms budget"
            )
        } else {
            format!("{c} has the most communication time, {judged_ms:.3} ms, within the {budget:.1} ms budget")
        };
        return Followup { decision: Decision::Accept, reason, next_measurements: Vec::new() };
    }
    if let (true, Some((w, rank))) = (judged_ms <= budget, over) {
        let m = choose_comm_mitigation(Some(w), t, ctx);
        let reason = format!(
            "{c} exposes {judged_ms:.3} ms of communication on average, within the {budget:.1} ms budget, but rank \
             {rank} exposes {:.3} ms in {} (over it): try {}{}",
            w.exposed_comm_ms_max_rank,
            w.collective,
            m.strategy.as_str(),
            imbalance_note(w, m.strategy, ctx)
        );
        return Followup { decision: Decision::Tune, reason, next_measurements: m.next_measurements };
    }
    let m = choose_comm_mitigation(Some(h), t, ctx);
    let (strategy, seen) = (m.strategy.as_str(), imbalance_note(h, m.strategy, ctx));
    let reason = if ctx.compute_observed {
        let (mean, worst) = match worst_rank(h, ctx) {
            Some((rank, ms)) => (" on average", format!("; worst rank {rank}: {ms:.3} ms")),
            None => ("", String::new()),
        };
        format!("{c} exposes {judged_ms:.3} ms of communication{mean} (over the {budget:.1} ms budget{worst}): try {strategy}{seen}")
    } else {
        format!("{c} spends {judged_ms:.3} ms in communication (over the {budget:.1} ms budget): try {strategy}{seen}")
    };
    Followup { decision: Decision::Tune, reason, next_measurements: m.next_measurements }
}

/// The collective whose worst rank exposes the most, and that rank, when it is over the budget
/// (traces with compute and two or more ranks only).
fn worst_rank_over(hotspots: &BTreeMap<String, Hotspot>, budget: f64, ctx: Context) -> Option<(&Hotspot, u32)> {
    if !ctx.compute_observed {
        return None;
    }
    hotspots
        .values()
        .filter_map(|h| worst_rank(h, ctx).map(|(rank, ms)| (h, rank, ms)))
        .max_by(|a, b| a.2.total_cmp(&b.2))
        .filter(|&(_, _, ms)| ms > budget)
        .map(|(h, rank, _)| (h, rank))
}

/// The worst rank and its exposed time, shown beside a mean over two or more ranks of a trace.
fn worst_rank(h: &Hotspot, ctx: Context) -> Option<(u32, f64)> {
    h.worst_exposed_rank
        .filter(|_| ctx.job != Job::Aggregated && h.participants >= 2)
        .map(|rank| (rank, h.exposed_comm_ms_max_rank))
}

/// ` on average (worst rank 3: 11.000 ms)` after a mean over two or more ranks; empty otherwise.
fn worst_rank_note(h: &Hotspot, ctx: Context) -> String {
    worst_rank(h, ctx).map_or_else(String::new, |(rank, ms)| format!(" on average (worst rank {rank}: {ms:.3} ms)"))
}

/// ` (rank imbalance 0.35 across 2 of the job's 128 ranks)` after a rebalance advice on traces:
/// how much of the job the imbalance was seen on. Empty for other advice and for aggregated events.
fn imbalance_note(h: &Hotspot, strategy: Strategy, ctx: Context) -> String {
    match h.rank_imbalance_ratio {
        Some(r)
            if strategy == Strategy::RebalanceRanksOrExperts
                && ctx.job != Job::Aggregated
                && h.participants > 0
                && ctx.world_size > 0 =>
        {
            format!(" (rank imbalance {r:.2} across {} of the job's {} ranks)", h.participants, ctx.world_size)
        }
        _ => String::new(),
    }
}

/// The trace gate's table: the mitigation for a regressed collective's cause, with the
/// measurements of the job's kind. A late rank (set by the comparison) is what to measure
/// first, in place of every rank's elapsed time.
pub fn for_cause(cause: CollectiveCause, collective: &str, late_rank: Option<u32>, job: Job) -> Mitigation {
    let strategy = match cause {
        CollectiveCause::Wait | CollectiveCause::Mixed => Strategy::RebalanceRanksOrExperts,
        CollectiveCause::Transfer => Strategy::TuneCollectiveTransport,
        CollectiveCause::Overlap => Strategy::IncreaseOverlapOrDelaySync,
    };
    let mut m = mitigation(strategy, Some(collective.to_string()), job);
    if let Some(rank) = late_rank {
        m.next_measurements.retain(|n| n != "rank_elapsed_ms");
        m.next_measurements.insert(0, format!("rank {rank}'s time before {collective} (rank_elapsed_ms)"));
    }
    m
}

/// Names the late rank ([`super::late_rank`]) and sets the mitigation of every collective of a
/// trace comparison that has a cause (the regressed ones).
pub fn for_trace_causes(t: &mut TraceComparison) {
    let job = if t.moe_markers { Job::Moe } else { Job::Dense };
    for c in &mut t.collectives {
        super::late_rank::name(c);
        c.mitigation = c.cause.map(|cause| for_cause(cause, &c.collective, c.late_rank, job));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_trace::attribute::{example_events, summarize_comm_hotspots, CommEvent};

    #[test]
    fn the_seed_fixture_asks_to_reduce_routing_traffic() {
        let s = summarize_comm_hotspots(&example_events());
        let p = priority(&s).expect("a priority");
        let m = choose_comm_mitigation(Some(p), &Thresholds::default(), Context::AGGREGATED);
        assert_eq!(m.strategy, Strategy::ReduceRoutingTraffic);
        assert_eq!(m.target.as_deref(), Some("all_to_all"));
    }

    #[test]
    fn mitigation_order_imbalance_then_low_overlap() {
        let t = Thresholds::default();
        let s = summarize_comm_hotspots(&[CommEvent::new("all_reduce", 16.0, 4096.0, 0.10)]);
        let m = choose_comm_mitigation(priority(&s), &t, Context::AGGREGATED);
        assert_eq!(m.strategy, Strategy::IncreaseOverlapOrDelaySync);
        assert_eq!(m.next_measurements, ["exposed_comm_ms", "overlap_ratio", "step_time_ms"]);

        let s = summarize_comm_hotspots(&[CommEvent::new("all_to_all", 12.0, 4096.0, 0.10).with_imbalance(0.35)]);
        let m = choose_comm_mitigation(priority(&s), &t, Context::AGGREGATED);
        assert_eq!(m.strategy, Strategy::RebalanceRanksOrExperts);

        let m = choose_comm_mitigation(None, &t, Context::AGGREGATED);
        assert_eq!(m.strategy, Strategy::CollectTrace);
        assert_eq!(m.target, None);
    }

    #[test]
    fn followup_empty_accept_and_tune() {
        let t = Thresholds::default();
        let f = recommend_comm_followup(&BTreeMap::new(), &t, Context::AGGREGATED);
        assert_eq!(f.decision, Decision::CollectMoreEvidence);

        let s = summarize_comm_hotspots(&[CommEvent::new("broadcast", 2.0, 512.0, 0.90)]);
        let f = recommend_comm_followup(&s, &t, Context::AGGREGATED);
        assert_eq!(f.decision, Decision::Accept);

        let f = recommend_comm_followup(&summarize_comm_hotspots(&example_events()), &t, Context::AGGREGATED);
        assert_eq!(f.decision, Decision::Tune);
        assert!(f.next_measurements.iter().any(|m| m == "dispatch_payload_bytes"));
        assert!(f.reason.contains("all_to_all"), "{}", f.reason);
    }

    #[test]
    fn thresholds_are_honoured() {
        let t = Thresholds { accept_exposed_ms: 25.0, ..Thresholds::default() };
        let f = recommend_comm_followup(&summarize_comm_hotspots(&example_events()), &t, Context::AGGREGATED);
        assert_eq!(f.decision, Decision::Accept);
        let t = Thresholds { low_overlap_ratio: 0.7, ..Thresholds::default() };
        let s = summarize_comm_hotspots(&example_events());
        assert_eq!(
            choose_comm_mitigation(priority(&s), &t, Context::AGGREGATED).strategy,
            Strategy::IncreaseOverlapOrDelaySync
        );
    }

    /// The rules' context for a source without compute kernels.
    const COMM_ONLY: Context = Context { compute_observed: false, ..Context::AGGREGATED };

    /// A source without compute kernels: its overlap ratio is 0 and its exposed time is all of
    /// its communication time, as the attribution of such a source fills them in.
    fn comm_only(collective: &str, ms: f64) -> BTreeMap<String, Hotspot> {
        summarize_comm_hotspots(&[CommEvent::new(collective, ms, 4096.0, 0.0)])
    }

    #[test]
    fn without_compute_the_overlap_mitigation_is_never_chosen() {
        let t = Thresholds::default();
        let s = comm_only("all_reduce", 16.0);
        assert_eq!(
            choose_comm_mitigation(priority(&s), &t, Context::AGGREGATED).strategy,
            Strategy::IncreaseOverlapOrDelaySync
        );
        let m = choose_comm_mitigation(priority(&s), &t, COMM_ONLY);
        assert_eq!(m.strategy, Strategy::InspectCollectivePayloadAndSchedule);
        assert_eq!(m.target.as_deref(), Some("all_reduce"));
        let s = comm_only("all_to_all", 16.0);
        assert_eq!(choose_comm_mitigation(priority(&s), &t, COMM_ONLY).strategy, Strategy::ReduceRoutingTraffic);
        let s = summarize_comm_hotspots(&[CommEvent::new("all_reduce", 16.0, 4096.0, 0.0).with_imbalance(0.5)]);
        assert_eq!(choose_comm_mitigation(priority(&s), &t, COMM_ONLY).strategy, Strategy::RebalanceRanksOrExperts);
        assert_eq!(choose_comm_mitigation(None, &t, COMM_ONLY).strategy, Strategy::CollectTrace);
    }

    #[test]
    fn without_compute_the_followup_speaks_of_communication_time() {
        let t = Thresholds::default();
        let f = recommend_comm_followup(&comm_only("all_reduce", 16.0), &t, COMM_ONLY);
        assert_eq!(f.decision, Decision::Tune);
        assert_eq!(
            f.reason,
            "all_reduce spends 16.000 ms in communication (over the 5.0 ms budget): try \
             inspect_collective_payload_and_schedule"
        );
        assert!(!f.next_measurements.iter().any(|m| m == "overlap_ratio"), "{:?}", f.next_measurements);
        let f = recommend_comm_followup(&comm_only("all_reduce", 2.0), &t, COMM_ONLY);
        assert_eq!(f.decision, Decision::Accept);
        assert_eq!(f.reason, "all_reduce has the most communication time, 2.000 ms, within the 5.0 ms budget");
        assert!(!f.reason.contains("exposed"));
        // The first wording stays for sources with compute.
        let f = recommend_comm_followup(&comm_only("all_reduce", 16.0), &t, Context::AGGREGATED);
        assert_eq!(
            f.reason,
            "all_reduce exposes 16.000 ms of communication (over the 5.0 ms budget): try increase_overlap_or_delay_sync"
        );
    }

    /// Two ranks of a dense trace: a mean within the budget with one rank over it.
    fn two_ranks(mean: f64, worst: f64) -> BTreeMap<String, Hotspot> {
        let h = Hotspot {
            exposed_comm_ms: mean,
            total_comm_ms: mean,
            exposed_comm_ms_max_rank: worst,
            worst_exposed_rank: Some(3),
            participants: 2,
            overlap_ratio: 0.9,
            ..Hotspot::empty("all_to_all")
        };
        BTreeMap::from([("all_to_all".to_string(), h)])
    }

    #[test]
    fn a_rank_over_the_budget_is_tuned_on_traces_only() {
        let t = Thresholds::default();
        let dense = Context { compute_observed: true, job: Job::Dense, world_size: 8 };
        let f = recommend_comm_followup(&two_ranks(4.66, 11.0), &t, dense);
        assert_eq!(f.decision, Decision::Tune);
        assert!(f.reason.contains("but rank 3 exposes 11.000 ms in all_to_all (over it)"), "{}", f.reason);
        let f = recommend_comm_followup(&two_ranks(4.66, 4.9), &t, dense);
        assert_eq!(f.decision, Decision::Accept);
        assert!(f.reason.contains("4.660 ms on average (worst rank 3: 4.900 ms)"), "{}", f.reason);
        // Aggregated events keep the first rule: their worst is an event, not a rank.
        assert_eq!(recommend_comm_followup(&two_ranks(4.66, 11.0), &t, Context::AGGREGATED).decision, Decision::Accept);
    }

    #[test]
    fn measurements_follow_the_job() {
        let seed = Strategy::RebalanceRanksOrExperts.next_measurements(Job::Aggregated);
        assert_eq!(Strategy::RebalanceRanksOrExperts.next_measurements(Job::Moe), seed);
        assert!(seed.contains(&"expert_load_skew"));
        let dense = Strategy::RebalanceRanksOrExperts.next_measurements(Job::Dense);
        assert!(!dense.iter().any(|m| m.contains("expert") || m.contains("token")), "{dense:?}");
        let dense = Strategy::ReduceRoutingTraffic.next_measurements(Job::Dense);
        assert!(!dense.iter().any(|m| m.contains("dispatch") || m.contains("token")), "{dense:?}");
    }
}
