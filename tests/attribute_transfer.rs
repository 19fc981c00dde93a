//! Transfer, wait, bus bandwidth and last arrival on hand-built ranks (two, four and one), with
//! every expected number worked out in the comments. Kernels are given in nanoseconds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::collections::BTreeMap;

use approx::assert_relative_eq;
use commgate_trace::attribute::{
    attribute_analyses, AttributeOptions, CommKernel, MatchKey, RankAnalysis, RankCollective,
};

/// A rank over one whole-trace step whose all_reduce instances have these (start, duration)
/// pairs, with Seq 0, 1, … and `payload` bytes each; its clock starts at `base`.
fn rank(rank: u32, base: i64, kernels: &[(i64, i64)], payload: Option<u64>) -> RankAnalysis {
    in_group(rank, base, kernels, payload, None)
}

/// [`rank`], with the kernels' `Group size`.
fn in_group(
    rank: u32,
    base: i64,
    kernels: &[(i64, i64)],
    payload: Option<u64>,
    group_size: Option<u32>,
) -> RankAnalysis {
    let comm_kernels: Vec<CommKernel> = kernels
        .iter()
        .enumerate()
        .map(|(i, &(ts, dur))| CommKernel {
            ts,
            end: ts + dur,
            collective: "all_reduce".into(),
            payload,
            key: MatchKey::Seq { pg: "0".into(), seq: i as u64 },
            step: 0,
            group_size,
        })
        .collect();
    let total: i64 = kernels.iter().map(|k| k.1).sum();
    let rc = RankCollective {
        kernels: kernels.len() as u64,
        total_ns: total as f64,
        exposed_ns: total as f64,
        payload_bytes: payload.unwrap_or(0) * kernels.len() as u64,
        payload_known: payload.is_some(),
        exposed_by_step: vec![(0, total as f64)],
    };
    RankAnalysis {
        rank,
        file: format!("rank-{rank}.json"),
        steps: 1,
        steps_from_markers: false,
        window: "trace",
        comm_ns: total,
        compute_ns: 0,
        overlapped_ns: 0,
        comm_kernels,
        by_collective: BTreeMap::from([("all_reduce".to_string(), rc)]),
        base_time_ns: Some(base),
        world_size: None,
        num_events: 0,
        names_truncated: false,
        collectives_folded: 0,
        samples: 1,
        step_ns: vec![10_000_000],
        no_compute: false,
        timeline: Vec::new(),
        unlaunched_left_out: 0,
        moe_markers: false,
        comm_lookalikes: Vec::new(),
    }
}

/// Two ranks, clocks 5 s apart and timestamps shifted: instance 0 lasts 1000 ns on rank 0 and
/// 400 on rank 1 (rank 1 last, transfer 400, rank 0 waits 600); instance 1 lasts 500 / 800
/// (rank 0 last, transfer 500, rank 1 waits 300). transfer = 900 ns = 0.0009 ms; wait =
/// (600 + 300) / 2 ranks = 450 ns. Last arrival: once each: the largest share is 0.5 (rank 0
/// first on the tie of counts), p = 2 × P(X ≥ 1 | 2, ½) = 1, so no rank is claimed. busbw:
/// 2 × 1e6 bytes × 1 / 900e-9 s / 1e9 = 2222.2 GB/s.
#[test]
fn two_ranks_with_offset_clocks_and_a_tie() {
    let r0 = rank(0, 0, &[(1_000, 1_000), (5_000, 500)], Some(1_000_000));
    let r1 = rank(1, 5_000_000_000, &[(9_000_000, 400), (9_004_000, 800)], Some(1_000_000));
    let a = attribute_analyses(vec![r0, r1], &AttributeOptions::default());
    let h = &a.by_collective["all_reduce"];
    assert_relative_eq!(h.transfer_ms.expect("matched"), 0.0009);
    assert_relative_eq!(h.wait_ms.expect("matched"), 0.00045);
    assert_relative_eq!(h.busbw_gbps.expect("known"), 2e6 / 900e-9 / 1e9);
    assert_eq!((h.last_arrival_rank, h.last_arrival_share), (None, Some(0.5)));
    assert_eq!((h.last_arrival_instances, h.last_arrival_p_value), (2, Some(1.0)));
    assert_eq!(h.straggler_rank, None);
    assert!(!h.busbw_lower_bound);

    // Shifting every timestamp of a rank changes nothing but the start skew.
    let r0 = rank(0, 0, &[(1_000, 1_000), (5_000, 500)], Some(1_000_000));
    let r1 = rank(1, 0, &[(123, 400), (4_123, 800)], Some(1_000_000));
    let b = attribute_analyses(vec![r0, r1], &AttributeOptions::default());
    let g = &b.by_collective["all_reduce"];
    assert_eq!((g.transfer_ms, g.wait_ms, g.busbw_gbps), (h.transfer_ms, h.wait_ms, h.busbw_gbps));
    assert_eq!(g.last_arrival_rank, h.last_arrival_rank);
}

/// Four ranks, rank 2 shortest in both instances (it arrived last). Instance 0 durations
/// 900, 700, 300, 500 → transfer 300, waits 600 + 400 + 0 + 200 = 1200; instance 1 durations
/// 400 each but rank 2 at 100 → transfer 100, waits 300 × 3 = 900. transfer = 400 ns; wait =
/// 2100 / 4 = 525 ns; rank 2 last in 2 of 2, which chance gives one time in 16 (p = 4 × 1/16 =
/// 0.25 over the four ranks); its arrival offsets {600, 300} against the others' {0, 200, 400,
/// 0, 0, 0}: U = 11 of 12, P(U ≥ 11) = 2/28, × 4 = 0.29; the smaller, doubled: 0.5, not claimed.
/// Payload unknown → busbw null.
#[test]
fn four_ranks_two_instances_are_too_few_to_name_a_straggler_and_unknown_payload_gives_no_busbw() {
    let ranks = vec![
        rank(0, 0, &[(0, 900), (2_000, 400)], None),
        rank(1, 77, &[(10, 700), (2_010, 400)], None),
        rank(2, 0, &[(600, 300), (2_300, 100)], None),
        rank(3, -5, &[(400, 500), (2_000, 400)], None),
    ];
    let a = attribute_analyses(ranks, &AttributeOptions::default());
    let h = &a.by_collective["all_reduce"];
    assert_relative_eq!(h.transfer_ms.expect("matched"), 0.0004);
    assert_relative_eq!(h.wait_ms.expect("matched"), 0.000525);
    assert_eq!(h.busbw_gbps, None);
    assert_eq!((h.last_arrival_rank, h.last_arrival_share), (None, Some(1.0)));
    assert_relative_eq!(h.last_arrival_p_value.expect("tested"), 0.5, max_relative = 1e-12);
    assert_eq!(h.straggler_rank, None);
    let steps = h.steps.as_ref().expect("series");
    assert_eq!(steps.transfer_ms.len(), 1);
    assert_relative_eq!(steps.transfer_ms[0], 0.0004);
}

/// Four ranks, eight instances: rank 2 is alone at the shortest kernel in six, rank 0 in one,
/// and one instance is a tie (no last arrival). By count p = 4 × P(X ≥ 6 | 7, ¼) = 4 × 0.001343 =
/// 0.00537, the smaller of the two tests here (the offsets tie), doubled: 0.0107 ≤ 0.05: rank 2 is
/// claimed, as the straggler too (it is charged the most wait).
#[test]
fn four_ranks_eight_instances_name_the_last_arrival_by_a_binomial_test() {
    let late =
        |shortest: &[u32], i: i64, r: u32| if shortest.contains(&r) { (i * 1_000, 100) } else { (i * 1_000, 500) };
    let who: [&[u32]; 8] = [&[2], &[2], &[0], &[2], &[1, 3], &[2], &[2], &[2]];
    let ranks: Vec<RankAnalysis> = (0..4)
        .map(|r| {
            let kernels: Vec<(i64, i64)> = who.iter().enumerate().map(|(i, s)| late(s, i as i64, r)).collect();
            rank(r, 0, &kernels, None)
        })
        .collect();
    let a = attribute_analyses(ranks, &AttributeOptions::default());
    let h = &a.by_collective["all_reduce"];
    assert_eq!(h.last_arrival_instances, 7);
    assert_relative_eq!(h.last_arrival_share.expect("share"), 6.0 / 7.0);
    // scipy.stats.binomtest(6, 7, 0.25, alternative="greater").pvalue = 0.0013427734375
    assert_relative_eq!(h.last_arrival_p_value.expect("tested"), 2.0 * 4.0 * 0.001_342_773_437_5, max_relative = 1e-9);
    assert_eq!((h.last_arrival_rank, h.straggler_rank), (Some(2), Some(2)));
}

/// One rank: nothing to compare it with, so transfer, wait, imbalance and last arrival are not
/// observed (`None`, never 0); without the group's size there is no bus factor either.
#[test]
fn a_single_rank_observes_no_transfer_wait_or_last_arrival() {
    let a =
        attribute_analyses(vec![rank(0, 0, &[(0, 1_000), (5_000, 500)], Some(1_000))], &AttributeOptions::default());
    let h = &a.by_collective["all_reduce"];
    assert_eq!((h.transfer_ms, h.wait_ms), (None, None));
    assert_eq!((h.rank_imbalance_ratio, h.rank_imbalance_observed), (None, false));
    assert_eq!((h.last_arrival_rank, h.last_arrival_share, h.busbw_gbps), (None, None, None));
    let steps = h.steps.as_ref().expect("series");
    assert!(steps.transfer_ms.is_empty() && steps.wait_ms.is_empty(), "{steps:?}");
    assert_eq!(a.ranks[0].step_ms, vec![10.0]);
}

/// One rank of an eight-rank group (`Group size` 8): the bus factor is 2 × 7/8 and the time is
/// the whole kernel's (1000 + 500 ns, wait included), so the bus bandwidth is a lower bound:
/// 2 × 1000 B × 1.75 / 1500e-9 s / 1e9 = 2.333 GB/s.
#[test]
fn a_single_rank_with_its_group_size_gives_a_lower_bound_bus_bandwidth() {
    let r = in_group(0, 0, &[(0, 1_000), (5_000, 500)], Some(1_000), Some(8));
    let a = attribute_analyses(vec![r], &AttributeOptions::default());
    let h = &a.by_collective["all_reduce"];
    assert_relative_eq!(h.busbw_gbps.expect("group size known"), 2.0 * 1_000.0 * 1.75 / 1_500e-9 / 1e9);
    assert!(h.busbw_lower_bound);
    assert_eq!(h.transfer_ms, None);

    // Both ranks of a two-rank group: the exact figure, factor 2 × 1/2.
    let r0 = in_group(0, 0, &[(0, 1_000)], Some(1_000), Some(2));
    let r1 = in_group(1, 0, &[(0, 400)], Some(1_000), Some(2));
    let a = attribute_analyses(vec![r0, r1], &AttributeOptions::default());
    let h = &a.by_collective["all_reduce"];
    assert_relative_eq!(h.busbw_gbps.expect("known"), 1_000.0 / 400e-9 / 1e9);
    assert!(!h.busbw_lower_bound);
}

/// Eight ranks, three instances, each with a different last arrival (ranks 1, 4 and 6): the
/// largest count is 1 of 3 (33 %), p = min(1, 8 × P(X ≥ 1 | 3, ⅛)) = 1. No straggler is named,
/// though ranks waited.
#[test]
fn three_instances_with_three_last_arrivals_name_no_straggler() {
    let last = [1u32, 4, 6];
    let ranks: Vec<RankAnalysis> = (0..8)
        .map(|r| {
            let kernels: Vec<(i64, i64)> =
                last.iter().enumerate().map(|(i, &l)| (i as i64 * 1_000, if l == r { 100 } else { 400 })).collect();
            rank(r, 0, &kernels, None)
        })
        .collect();
    let a = attribute_analyses(ranks, &AttributeOptions::default());
    let h = &a.by_collective["all_reduce"];
    assert!(h.rank_imbalance_ratio.expect("observed") > 0.5);
    assert_eq!((h.last_arrival_rank, h.straggler_rank), (None, None));
    assert_relative_eq!(h.last_arrival_share.expect("share"), 1.0 / 3.0);
    assert_eq!(h.last_arrival_p_value, Some(1.0));
}
