//! The attributions the renderers' tests share: the aggregated-events fixture, a two-rank Kineto-like
//! result and an empty one.

use std::collections::BTreeMap;

use commgate_gate::decide::mitigation::{diagnose, Diagnosis, Thresholds};
use commgate_trace::attribute::{attribute_events, conclude, example_events, Compat, RankSummary, Source};
use commgate_trace::attribute::{Hotspot, StepSeries};
use commgate_trace::caveats::{RankCoverage, StepsIgnored};

/// The aggregated-events fixture through the events path, with its exact values.
pub fn seed() -> Diagnosis {
    diagnose(attribute_events(vec!["seed.json".into()], &example_events()), &Thresholds::default())
}

fn hotspot(collective: &str) -> Hotspot {
    Hotspot { overlap_ratio: 0.0, ..Hotspot::empty(collective) }
}

fn kineto_source(files: &[&str], ranks: Vec<u32>) -> Source {
    Source {
        format: "kineto".to_string(),
        files: files.iter().map(|f| f.to_string()).collect(),
        world_size: ranks.len() as u32,
        coverage: Some(RankCoverage::new(&ranks, None)),
        ranks,
        steps: 4,
        window: "steps".to_string(),
        compat: Compat::Default,
        steps_ignored: None,
        names_truncated: false,
        collectives_folded: 0,
        steps_past_sample_cap: 0,
        compute_observed: true,
        queued_before_capture: 0,
        moe_markers: false,
        comm_lookalikes: Vec::new(),
    }
}

fn rank(rank: u32, comm: f64, compute: f64, overlapped: f64, kernels: u64) -> RankSummary {
    RankSummary {
        rank,
        file: format!("rank-{rank}.json.gz"),
        steps: 4,
        comm_ms: comm,
        compute_ms: compute,
        overlapped_ms: overlapped,
        exposed_ms: comm - overlapped,
        overlap_pct: 100.0 * overlapped / comm,
        comm_kernels: kernels,
        step_ms: vec![comm + compute - overlapped; 4],
    }
}

/// Two ranks over four steps: an imbalanced all_reduce with rank 1 as straggler (the
/// priority, so `rebalance_ranks_or_experts` and `tune`), an all_gather whose payload no
/// trace field gave, and a send_recv that matched on no instance (imbalance not observed).
pub fn multi_rank() -> Diagnosis {
    let all_reduce = Hotspot {
        count: 48,
        sync_count: 6.0,
        total_comm_ms: 12.5,
        exposed_comm_ms: 7.25,
        exposed_comm_ms_max_rank: 8.125,
        worst_exposed_rank: Some(1),
        participants: 2,
        payload_bytes: Some(8 * 1024 * 1024),
        payload_known: true,
        overlap_ratio: 0.35,
        rank_imbalance_ratio: Some(0.27),
        rank_imbalance_observed: true,
        straggler_rank: Some(1),
        start_skew_ms: Some(0.042),
        transfer_ms: Some(9.125),
        wait_ms: Some(3.375),
        busbw_gbps: Some(7.35),
        last_arrival_rank: Some(1),
        last_arrival_share: Some(0.75),
        last_arrival_instances: 24,
        last_arrival_p_value: Some(0.023),
        steps: Some(StepSeries {
            exposed_ms: vec![8.125, 8.0, 7.5, 8.125],
            transfer_ms: vec![9.0, 9.25, 9.0, 9.25],
            wait_ms: vec![3.5, 3.25, 3.5, 3.25],
        }),
        ..hotspot("all_reduce")
    };
    let all_gather = Hotspot {
        count: 16,
        sync_count: 2.0,
        total_comm_ms: 3.25,
        exposed_comm_ms: 1.125,
        exposed_comm_ms_max_rank: 1.375,
        worst_exposed_rank: Some(0),
        participants: 2,
        overlap_ratio: 0.5769,
        rank_imbalance_ratio: Some(0.04),
        rank_imbalance_observed: true,
        unmatched: 2,
        transfer_ms: Some(3.0),
        wait_ms: Some(0.125),
        last_arrival_share: Some(0.5),
        last_arrival_instances: 6,
        last_arrival_p_value: Some(1.0),
        ..hotspot("all_gather")
    };
    let send_recv = Hotspot {
        count: 6,
        sync_count: 0.75,
        total_comm_ms: 0.5,
        exposed_comm_ms: 0.5,
        exposed_comm_ms_max_rank: 0.625,
        worst_exposed_rank: Some(0),
        participants: 2,
        payload_bytes: Some(1_572_864),
        payload_known: true,
        unmatched: 6,
        ..hotspot("send_recv")
    };
    let by_collective: BTreeMap<String, Hotspot> =
        [all_reduce, all_gather, send_recv].into_iter().map(|h| (h.collective.clone(), h)).collect();
    // Rank means add up to the collectives' sums (16.25 ms comm, 8.875 ms exposed), as the
    // sweep guarantees; rank 0 waits for the straggler, so its kernels run longer.
    let ranks = vec![rank(0, 17.0, 41.875, 7.5, 35), rank(1, 15.5, 40.5, 7.25, 35)];
    let source = kineto_source(&["rank-0.json.gz", "rank-1.json.gz"], vec![0, 1]);
    diagnose(conclude(source, by_collective, ranks, 70), &Thresholds::default())
}

/// [`multi_rank`] as ranks 0 and 1 of an 8-rank job, analysed with a `steps = 2` the
/// markers overrode: both notes.
pub fn partial() -> Diagnosis {
    let mut a = multi_rank();
    a.attribution.source.coverage = Some(RankCoverage::new(&a.source.ranks, Some(8)));
    a.attribution.source.world_size = 8;
    a.attribution.source.steps_ignored =
        Some(StepsIgnored { requested: 2, set_by: "steps = 2 (commgate.toml)".to_string(), marker_steps: 4 });
    a
}

/// One rank whose trace held no communication kernel.
pub fn empty() -> Diagnosis {
    let ranks = vec![RankSummary {
        steps: 1,
        comm_ms: 0.0,
        overlapped_ms: 0.0,
        exposed_ms: 0.0,
        overlap_pct: 0.0,
        file: "train.pt.trace.json.gz".to_string(),
        ..rank(0, 1.0, 25.5, 0.0, 0)
    }];
    let source =
        Source { steps: 1, window: "trace".to_string(), ..kineto_source(&["train.pt.trace.json.gz"], vec![0]) };
    diagnose(conclude(source, BTreeMap::new(), ranks, 0), &Thresholds::default())
}

/// A collective named to break out of a table and inject HTML, from a file named likewise.
pub fn hostile() -> Diagnosis {
    let h =
        Hotspot { count: 1, sync_count: 1.0, exposed_comm_ms: 9.0, total_comm_ms: 9.0, ..hotspot("<script>|**x**") };
    let by_collective = BTreeMap::from([(h.collective.clone(), h)]);
    let source = kineto_source(&["[x](javascript:alert(1)).json"], vec![0]);
    diagnose(conclude(source, by_collective, Vec::new(), 1), &Thresholds::default())
}
