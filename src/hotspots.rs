//! The seed's three decision functions, as typed Rust: aggregate communication events into
//! per-collective hotspots (`summarize_comm_hotspots`), choose a mitigation for the priority
//! collective (`choose_comm_mitigation`) and recommend a follow-up (`recommend_comm_followup`).
//!
//! These are the only place where the mitigation order and the follow-up rule live; the Kineto
//! attribution builds the same [`Hotspot`] values and then calls the same two rule functions.
//! Definitions: `docs/attribution.md`, "Priority, mitigation, follow-up".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::decision::Decision;

/// One communication observation in the seed's aggregated shape (a whole trace already reduced
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
    /// An event with the seed's defaults: one sync, total time equal to the exposed time, no
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

/// Everything known about one collective, aggregated. For traces every time, byte and count
/// figure is per step (see attribution.md); for seed events they are sums over the events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hotspot {
    pub collective: String,
    /// Instances seen (kernels for traces, events for the seed format).
    pub count: u64,
    /// Calls per step, mean over ranks.
    pub sync_count: f64,
    pub total_comm_ms: f64,
    pub exposed_comm_ms: f64,
    /// Exposed time per step on the worst rank.
    pub exposed_comm_ms_max_rank: f64,
    /// Bytes moved per step; `None` when no event said (never reported as 0).
    pub payload_bytes: Option<u64>,
    pub payload_known: bool,
    /// `1 − exposed/total`, on the worst rank (the seed keeps the worst overlap).
    pub overlap_ratio: f64,
    pub rank_imbalance_ratio: Option<f64>,
    pub rank_imbalance_observed: bool,
    /// The rank that most often arrived last, weighted by the wait it caused.
    pub straggler_rank: Option<u32>,
    /// Mean over matched instances of (latest − earliest kernel start), when clocks allow.
    pub start_skew_ms: Option<f64>,
    /// Instances that did not match on every rank.
    pub unmatched: u64,
    /// Per step: Σ over matched instances of the shortest duration among the ranks (the time the
    /// data moved once the last rank arrived). `None` for seed events or without a matched
    /// instance.
    #[serde(default)]
    pub transfer_ms: Option<f64>,
    /// Per step: the participants' mean of Σ (own duration − the instance's transfer), the time
    /// a rank sat in the kernel waiting for the last one.
    #[serde(default)]
    pub wait_ms: Option<f64>,
    /// Bus bandwidth in GB/s over the matched instances with a known payload (nccl-tests' bus
    /// factor); `None` when no payload is known, the transfer time is 0, one rank only, or the
    /// collective has no bus factor.
    #[serde(default)]
    pub busbw_gbps: Option<f64>,
    /// The rank that arrived last (shortest kernel) in the most matched instances (ties: the
    /// lowest rank); `None` with fewer than two participants.
    #[serde(default)]
    pub last_arrival_rank: Option<u32>,
    /// The share of matched instances in which [`Hotspot::last_arrival_rank`] arrived last.
    #[serde(default)]
    pub last_arrival_share: Option<f64>,
    /// Per-step samples (traces only), capped in length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<StepSeries>,
    /// Per message-size bucket, the per-call distributions (NCCL Inspector logs only, whose
    /// every record is one call at its own size); ascending by size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<SizeBucket>,
}

/// One power-of-two message-size bucket of a collective: how its calls ran, per call and per
/// rank (each rank's record of a call is one sample).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeBucket {
    /// Payloads in `[bytes_min, 2 · bytes_min)` (a payload of 0 is its own bucket, `0`). The
    /// payload is the full buffer as nccl-tests sizes it, like `payload_bytes`.
    pub bytes_min: u64,
    /// Calls (rank records) in the bucket.
    pub count: u64,
    /// Execution time, milliseconds: the median and the 95th percentile (type 7).
    pub exec_ms_median: f64,
    pub exec_ms_p95: f64,
    /// Bus bandwidth per call, GB/s (nccl-tests' bus factor, 0-µs calls left out): the median
    /// and the 95th percentile; `None` when no call of the bucket has one.
    pub busbw_gbps_median: Option<f64>,
    pub busbw_gbps_p95: Option<f64>,
}

/// One collective's per-step samples, milliseconds, one entry per step in time order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StepSeries {
    /// Swept exposed time on the rank where it is largest in that step.
    pub exposed_ms: Vec<f64>,
    /// Σ transfer of the matched instances of that step.
    pub transfer_ms: Vec<f64>,
    /// The participants' mean wait in the matched instances of that step.
    pub wait_ms: Vec<f64>,
}

impl Hotspot {
    /// A collective with nothing counted yet: no payload known, no imbalance observed, a
    /// perfect overlap (aggregations take the minimum).
    pub fn empty(collective: &str) -> Self {
        Hotspot {
            collective: collective.to_string(),
            count: 0,
            sync_count: 0.0,
            total_comm_ms: 0.0,
            exposed_comm_ms: 0.0,
            exposed_comm_ms_max_rank: 0.0,
            payload_bytes: None,
            payload_known: false,
            overlap_ratio: 1.0,
            rank_imbalance_ratio: None,
            rank_imbalance_observed: false,
            straggler_rank: None,
            start_skew_ms: None,
            unmatched: 0,
            transfer_ms: None,
            wait_ms: None,
            busbw_gbps: None,
            last_arrival_rank: None,
            last_arrival_share: None,
            steps: None,
            sizes: Vec::new(),
        }
    }
}

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

/// The mitigations, in the seed's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    RebalanceRanksOrExperts,
    IncreaseOverlapOrDelaySync,
    ReduceRoutingTraffic,
    InspectCollectivePayloadAndSchedule,
    CollectTrace,
    /// Trace evidence only (`check --traces`): the collective moves its bytes more slowly, with
    /// no rank keeping the others waiting: NCCL's algorithm, protocol and channels, and the
    /// framework's bucket sizes.
    TuneCollectiveTransport,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::RebalanceRanksOrExperts => "rebalance_ranks_or_experts",
            Strategy::IncreaseOverlapOrDelaySync => "increase_overlap_or_delay_sync",
            Strategy::ReduceRoutingTraffic => "reduce_routing_traffic",
            Strategy::InspectCollectivePayloadAndSchedule => "inspect_collective_payload_and_schedule",
            Strategy::CollectTrace => "collect_trace",
            Strategy::TuneCollectiveTransport => "tune_collective_transport",
        }
    }

    /// What to measure next when this mitigation is tried.
    pub fn next_measurements(self) -> &'static [&'static str] {
        match self {
            Strategy::RebalanceRanksOrExperts => &["rank_elapsed_ms", "expert_load_skew", "cross_rank_token_ratio"],
            Strategy::IncreaseOverlapOrDelaySync => &["exposed_comm_ms", "overlap_ratio", "step_time_ms"],
            Strategy::ReduceRoutingTraffic => {
                &["dispatch_payload_bytes", "cross_rank_token_ratio", "throughput_tokens_per_s"]
            }
            Strategy::InspectCollectivePayloadAndSchedule => &["payload_bytes", "exposed_comm_ms", "rank_elapsed_ms"],
            Strategy::CollectTrace => &["rank_elapsed_ms", "payload_bytes"],
            Strategy::TuneCollectiveTransport => {
                &["busbw_gbps_by_message_size", "nccl_algo_protocol", "bucket_size_bytes"]
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mitigation {
    pub strategy: Strategy,
    /// The collective it applies to; `None` when there is no priority.
    pub target: Option<String>,
    pub next_measurements: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Followup {
    pub decision: Decision,
    pub reason: String,
    pub next_measurements: Vec<String>,
}

/// Aggregates seed events per collective: count, summed sync count, times and payload, the
/// worst (lowest) overlap and the largest observed imbalance.
pub fn summarize_comm_hotspots(events: &[CommEvent]) -> BTreeMap<String, Hotspot> {
    let mut out: BTreeMap<String, Hotspot> = BTreeMap::new();
    for e in events {
        let h = out.entry(e.collective.clone()).or_insert_with(|| Hotspot {
            payload_bytes: Some(0),
            payload_known: true,
            overlap_ratio: f64::INFINITY,
            ..Hotspot::empty(&e.collective)
        });
        h.count += 1;
        h.sync_count += e.sync_count;
        h.total_comm_ms += e.total_comm_ms;
        h.exposed_comm_ms += e.exposed_comm_ms;
        h.exposed_comm_ms_max_rank = h.exposed_comm_ms_max_rank.max(e.exposed_comm_ms);
        h.payload_bytes = h.payload_bytes.map(|p| p + e.payload_bytes.round() as u64);
        h.overlap_ratio = h.overlap_ratio.min(e.overlap_ratio);
        if e.rank_imbalance_observed {
            h.rank_imbalance_observed = true;
            let prev = h.rank_imbalance_ratio.unwrap_or(f64::NEG_INFINITY);
            h.rank_imbalance_ratio = Some(prev.max(e.rank_imbalance_ratio));
        }
    }
    out
}

/// The collective with the largest exposed time (ties: the first by name, so it is stable).
pub fn priority(hotspots: &BTreeMap<String, Hotspot>) -> Option<&Hotspot> {
    let mut best: Option<&Hotspot> = None;
    for h in hotspots.values() {
        if best.is_none_or(|b| h.exposed_comm_ms > b.exposed_comm_ms) {
            best = Some(h);
        }
    }
    best
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

pub(crate) fn mitigation(strategy: Strategy, target: Option<String>) -> Mitigation {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's fixture, with its exact values.
    fn fixture() -> Vec<CommEvent> {
        vec![
            CommEvent::new("all_reduce", 8.0, 1024.0, 0.60).with_imbalance(0.00),
            CommEvent::new("all_reduce", 6.0, 2048.0, 0.45).with_imbalance(0.05),
            CommEvent::new("all_to_all", 20.0, 65536.0, 0.60).with_imbalance(0.05),
            CommEvent::new("broadcast", 5.0, 512.0, 0.90).with_imbalance(0.00),
        ]
    }

    #[test]
    fn summarize_aggregates_per_collective_and_picks_max_exposed() {
        let s = summarize_comm_hotspots(&fixture());
        let ar = &s["all_reduce"];
        assert_eq!(ar.count, 2);
        assert_eq!(ar.sync_count, 2.0);
        assert_eq!(ar.payload_bytes, Some(3072));
        assert_eq!(ar.exposed_comm_ms, 14.0);
        assert_eq!(ar.overlap_ratio, 0.45);
        assert_eq!(ar.rank_imbalance_ratio, Some(0.05));
        let p = priority(&s).expect("a priority");
        assert_eq!(p.collective, "all_to_all");
        assert_eq!(p.exposed_comm_ms, 20.0);
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

        let f = recommend_comm_followup(&summarize_comm_hotspots(&fixture()), &t, true);
        assert_eq!(f.decision, Decision::Tune);
        assert!(f.next_measurements.iter().any(|m| m == "dispatch_payload_bytes"));
        assert!(f.reason.contains("all_to_all"), "{}", f.reason);
    }

    #[test]
    fn thresholds_are_honoured() {
        let t = Thresholds { accept_exposed_ms: 25.0, ..Thresholds::default() };
        let f = recommend_comm_followup(&summarize_comm_hotspots(&fixture()), &t, true);
        assert_eq!(f.decision, Decision::Accept);
        let t = Thresholds { low_overlap_ratio: 0.7, ..Thresholds::default() };
        let s = summarize_comm_hotspots(&fixture());
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
