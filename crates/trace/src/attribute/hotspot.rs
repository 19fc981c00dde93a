//! The attribution's data: one communication observation of the aggregated-events format ([`CommEvent`]),
//! everything known about one collective ([`Hotspot`]), its per-step samples and per-size
//! distributions; and the two functions that only aggregate: [`summarize_comm_hotspots`]
//! and [`priority`]. The rules that turn a hotspot into a mitigation and a follow-up are the
//! decision layer's (`decide::mitigation`). Definitions: `docs/attribution.md`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::CommEvent;
use crate::narrow::float_to_u64;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// Everything known about one collective, aggregated. For traces every time, byte and count
/// figure is per step (see attribution.md); for aggregated events they are sums over the events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hotspot {
    pub collective: String,
    /// Instances seen (kernels for traces, events for aggregated events).
    pub count: u64,
    /// Calls per step, mean over ranks.
    pub sync_count: f64,
    pub total_comm_ms: f64,
    pub exposed_comm_ms: f64,
    /// Exposed time per step on the worst rank.
    pub exposed_comm_ms_max_rank: f64,
    /// That rank (traces only; the lowest on ties).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worst_exposed_rank: Option<u32>,
    /// Ranks with at least one of its kernels (traces only).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub participants: u32,
    /// Bytes moved per step; `None` when no event said (never reported as 0).
    pub payload_bytes: Option<u64>,
    pub payload_known: bool,
    /// `1 − exposed/total`, on the worst rank (aggregated events keep the worst overlap).
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
    /// data moved once the last rank arrived). `None` for aggregated events or without a matched
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
    /// Whether [`Hotspot::busbw_gbps`] is a lower bound: some of the process group's ranks are
    /// not in the traces, so the shortest kernel seen may still hold waiting.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub busbw_lower_bound: bool,
    /// The rank that arrived last (the one shortest kernel) in the most matched instances (ties:
    /// the lowest rank), claimed only when [`Hotspot::last_arrival_p_value`] is at most
    /// [`LAST_ARRIVAL_ALPHA`](super::LAST_ARRIVAL_ALPHA); `None` otherwise and with fewer than two participants.
    #[serde(default)]
    pub last_arrival_rank: Option<u32>,
    /// The largest share of [`Hotspot::last_arrival_instances`] in which one rank arrived last,
    /// whether or not it is claimed.
    #[serde(default)]
    pub last_arrival_share: Option<f64>,
    /// Matched instances with one rank alone at the shortest kernel (a tie names no last arrival).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub last_arrival_instances: u64,
    /// The claim's test of that rank: the smaller of the binomial test of its count against chance
    /// (1 in k participants) and the Mann–Whitney test of its arrival offsets against the other
    /// ranks', each Bonferroni over the k ranks, doubled (Bonferroni over the two).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_arrival_p_value: Option<f64>,
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
            worst_exposed_rank: None,
            participants: 0,
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
            busbw_lower_bound: false,
            last_arrival_rank: None,
            last_arrival_share: None,
            last_arrival_instances: 0,
            last_arrival_p_value: None,
            steps: None,
            sizes: Vec::new(),
        }
    }
}

/// Aggregates aggregated events per collective: count, summed sync count, times and payload, the
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
        h.payload_bytes = h.payload_bytes.map(|p| p + float_to_u64(e.payload_bytes.round()));
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

/// The aggregated-events fixture, with its exact values (tests of the aggregation, the rules and the
/// renderers share it).
#[doc(hidden)]
pub fn example_events() -> Vec<CommEvent> {
    vec![
        CommEvent::new("all_reduce", 8.0, 1024.0, 0.60).with_imbalance(0.00),
        CommEvent::new("all_reduce", 6.0, 2048.0, 0.45).with_imbalance(0.05),
        CommEvent::new("all_to_all", 20.0, 65536.0, 0.60).with_imbalance(0.05),
        CommEvent::new("broadcast", 5.0, 512.0, 0.90).with_imbalance(0.00),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarize_aggregates_per_collective_and_picks_max_exposed() {
        let s = summarize_comm_hotspots(&example_events());
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
    }
}
