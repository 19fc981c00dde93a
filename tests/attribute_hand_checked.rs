//! The project's own two-rank trace (`tests/fixtures/hand_checked`), with every figure worked
//! out by hand (µs; two steps in the window [0, 2000)):
//!
//! rank 0: compute [100,400] [1100,1300]; all_reduce Seq 1 [300,600], Seq 2 [1200,1500];
//!         all_to_all (only a `nccl:all_to_all` annotation, 1024×256 float) [1500,1700];
//!         an all_reduce launched after the last step start (excluded); a memcpy (neither).
//!         comm 800, compute 500, overlapped 200 → per step 0.4 / 0.25 / 0.1 ms, 25 %.
//! rank 1: the same, but all_reduce Seq 1 [350,600] (it arrives last) and all_to_all
//!         [1450,1700] (rank 0 arrives last), so [1450,1500] is shared equally by two kernels:
//!         all_reduce total 525, exposed 375; all_to_all total 225, exposed 225.
//! all_reduce: per step total (300 + 262.5)/2 = 0.28125 ms, exposed (200 + 187.5)/2 = 0.19375,
//!   worst rank 0.2; overlap on the worst rank 1 − 375/525; wait 50 over span 1150; payload
//!   2 MiB per call × 2 calls / 2 steps.
//! all_to_all: exposed (100 + 112.5)/2 = 0.10625; wait 50 over span 450; 1 MiB / 2 steps.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::PathBuf;

use approx::assert_relative_eq;
use commgate_gate::decide::mitigation::{diagnose, Thresholds};
use commgate_gate::decide::{Decision, Strategy};
use commgate_trace::attribute::{AttributeOptions, Compat, StepsSetting};
use commgate_trace::classify::CommPattern;
use commgate_trace::load::attribute_paths;

fn fixture() -> Vec<PathBuf> {
    vec![PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hand_checked")]
}

#[test]
fn per_rank_overlap_matches_hand_computation() {
    let a = attribute_paths(&fixture(), &AttributeOptions::default()).expect("attributes");
    assert_eq!(a.source.ranks, vec![0, 1]);
    assert_eq!((a.source.steps, a.source.window.as_str()), (2, "steps"));
    let r0 = &a.ranks[0];
    assert_relative_eq!(r0.comm_ms, 0.4);
    assert_relative_eq!(r0.compute_ms, 0.25);
    assert_relative_eq!(r0.overlapped_ms, 0.1);
    assert_relative_eq!(r0.exposed_ms, 0.3);
    assert_relative_eq!(r0.overlap_pct, 25.0);
    assert_eq!(r0.comm_kernels, 3);
    let r1 = &a.ranks[1];
    assert_relative_eq!(r1.comm_ms, 0.375);
    assert_relative_eq!(r1.overlapped_ms, 0.075);
    assert_relative_eq!(r1.overlap_pct, 20.0);
}

#[test]
fn per_collective_figures_match_hand_computation() {
    let a = attribute_paths(&fixture(), &AttributeOptions::default()).expect("attributes");
    let ar = &a.by_collective["all_reduce"];
    assert_eq!(ar.count, 4);
    assert_relative_eq!(ar.sync_count, 1.0);
    assert_relative_eq!(ar.total_comm_ms, 0.28125);
    assert_relative_eq!(ar.exposed_comm_ms, 0.19375);
    assert_relative_eq!(ar.exposed_comm_ms_max_rank, 0.2);
    assert_relative_eq!(ar.overlap_ratio, 1.0 - 375.0 / 525.0);
    assert_eq!(ar.payload_bytes, Some(2 * 1024 * 1024));
    assert_relative_eq!(ar.rank_imbalance_ratio.expect("observed"), 50.0 / 1150.0);
    // Rank 1 caused the only wait, but one decided instance (Seq 2 is a tie) cannot rule out
    // chance (p = 2 × P(X ≥ 1 | 1, ½) = 1): no straggler is claimed.
    assert_eq!(ar.straggler_rank, None);
    assert_relative_eq!(ar.start_skew_ms.expect("clocks known"), 0.025);
    assert_eq!(ar.unmatched, 0);

    let a2a = &a.by_collective["all_to_all"];
    assert_eq!(a2a.count, 2);
    assert_relative_eq!(a2a.exposed_comm_ms, 0.10625);
    assert_relative_eq!(a2a.overlap_ratio, 0.0);
    assert_eq!(a2a.payload_bytes, Some(512 * 1024));
    assert_relative_eq!(a2a.rank_imbalance_ratio.expect("observed"), 50.0 / 450.0);
    // One all_to_all instance: rank 0 caused its wait, but one instance proves nothing.
    assert_eq!(a2a.straggler_rank, None);

    // The shares add up to each rank's union.
    let total: f64 = a.by_collective.values().map(|h| h.total_comm_ms).sum();
    let mean_comm = (a.ranks[0].comm_ms + a.ranks[1].comm_ms) / 2.0;
    assert_relative_eq!(total, mean_comm, epsilon = 1e-12);
}

#[test]
fn priority_mitigation_and_followup_follow_the_seed_rules() {
    let measured = attribute_paths(&fixture(), &AttributeOptions::default()).expect("attributes");
    let a = diagnose(measured.clone(), &Thresholds::default());
    assert_eq!(a.priority.as_ref().map(|p| p.collective.as_str()), Some("all_reduce"));
    assert_eq!(a.mitigation.strategy, Strategy::IncreaseOverlapOrDelaySync);
    assert_eq!(a.followup.decision, Decision::Accept);

    let strict = Thresholds { accept_exposed_ms: 0.1, ..Thresholds::default() };
    let a = diagnose(measured.clone(), &strict);
    assert_eq!(a.followup.decision, Decision::Tune);
    assert_eq!(a.followup.next_measurements, ["exposed_comm_ms", "overlap_ratio", "step_time_ms"]);

    let imbalance = Thresholds { imbalance_ratio: 0.04, ..Thresholds::default() };
    let a = diagnose(measured, &imbalance);
    assert_eq!(a.mitigation.strategy, Strategy::RebalanceRanksOrExperts);
}

#[test]
fn step_markers_win_over_a_steps_setting_and_hta_window() {
    let opts = AttributeOptions { steps: Some(StepsSetting::new(4)), ..AttributeOptions::default() };
    let a = attribute_paths(&fixture(), &opts).expect("attributes");
    assert_relative_eq!(a.ranks[0].comm_ms, 0.4);
    let ignored = a.source.steps_ignored.expect("the setting the markers overrode is noted");
    assert_eq!((ignored.requested, ignored.marker_steps), (4, 2));

    // HTA keeps everything launched before the last step start: the same kernels here.
    let opts = AttributeOptions { compat: Compat::Hta, ..AttributeOptions::default() };
    let a = attribute_paths(&fixture(), &opts).expect("attributes");
    assert_eq!(a.source.window, "hta");
    assert_relative_eq!(a.ranks[0].overlap_pct, 25.0);
    assert_relative_eq!(a.ranks[1].overlap_pct, 20.0);
}

#[test]
fn a_single_rank_observes_no_imbalance() {
    let file = fixture()[0].join("rank-0.json");
    let a = attribute_paths(&[file], &AttributeOptions::default()).expect("attributes");
    let ar = &a.by_collective["all_reduce"];
    assert!(!ar.rank_imbalance_observed);
    assert_eq!(ar.rank_imbalance_ratio, None);
    assert_eq!(ar.straggler_rank, None);
}

#[test]
fn custom_communication_kernels_are_named_by_their_pattern() {
    let dir = tempfile::tempdir().expect("tempdir");
    let doc = r#"{"traceEvents":[
        {"ph":"X","cat":"kernel","name":"void cross_device_reduce_1stage<bf16>","pid":0,"tid":7,"ts":0,"dur":100,"args":{}},
        {"ph":"X","cat":"kernel","name":"ampere_gemm","pid":0,"tid":8,"ts":50,"dur":100,"args":{}}
    ]}"#;
    let file = dir.path().join("rank-0.json");
    std::fs::write(&file, doc).expect("write");
    let opts = AttributeOptions {
        comm_patterns: vec![CommPattern::parse("cross_device_reduce").unwrap()],
        ..AttributeOptions::default()
    };
    let a = attribute_paths(std::slice::from_ref(&file), &opts).expect("attributes");
    // Named by the kernel's family (its name without `void` and template arguments).
    let h = &a.by_collective["cross_device_reduce_1stage"];
    assert_relative_eq!(h.total_comm_ms, 0.1);
    assert_relative_eq!(h.exposed_comm_ms, 0.05);
    assert!(!h.payload_known);
    assert_eq!(h.payload_bytes, None);
    // NAME=SUBSTRING names the row.
    let named = AttributeOptions {
        comm_patterns: vec![CommPattern::parse("custom_ar=cross_device_reduce").unwrap()],
        ..AttributeOptions::default()
    };
    let a = attribute_paths(std::slice::from_ref(&file), &named).expect("attributes");
    assert_eq!(a.by_collective.keys().collect::<Vec<_>>(), ["custom_ar"]);
    // Without the pattern it is compute.
    let a = attribute_paths(&[file], &AttributeOptions::default()).expect("attributes");
    assert!(a.by_collective.is_empty());
    assert_eq!(diagnose(a, &Thresholds::default()).followup.decision, Decision::CollectMoreEvidence);
}

/// DeepEP's kernels under one pattern: each family its own row, and a named pattern takes
/// precedence over the family.
#[test]
fn each_custom_kernel_family_gets_its_own_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let doc = r#"{"traceEvents":[
        {"ph":"X","cat":"kernel","name":"void deep_ep::intranode::notify_dispatch<8>(int const*, int*)","pid":0,"tid":7,"ts":0,"dur":10,"args":{}},
        {"ph":"X","cat":"kernel","name":"void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)","pid":0,"tid":7,"ts":20,"dur":100,"args":{}},
        {"ph":"X","cat":"kernel","name":"void deep_ep::intranode::combine<nv_bfloat16, 8, 768>(int4*)","pid":0,"tid":7,"ts":200,"dur":60,"args":{}}
    ]}"#;
    let file = dir.path().join("rank-0.json");
    std::fs::write(&file, doc).expect("write");
    let patterns = |p: &[&str]| AttributeOptions {
        comm_patterns: p.iter().map(|p| CommPattern::parse(p).unwrap()).collect(),
        ..AttributeOptions::default()
    };
    let a = attribute_paths(std::slice::from_ref(&file), &patterns(&["deep_ep"])).expect("attributes");
    let rows: Vec<&String> = a.by_collective.keys().collect();
    assert_eq!(
        rows,
        ["deep_ep::intranode::combine", "deep_ep::intranode::dispatch", "deep_ep::intranode::notify_dispatch"]
    );
    assert_relative_eq!(a.by_collective["deep_ep::intranode::dispatch"].total_comm_ms, 0.1);
    // A kernel with MoE markers in its name makes the advice ask for expert measurements.
    assert!(a.source.moe_markers);
    let a = attribute_paths(&[file], &patterns(&["dispatch=intranode::dispatch", "deep_ep"])).expect("attributes");
    let rows: Vec<&String> = a.by_collective.keys().collect();
    assert_eq!(rows, ["deep_ep::intranode::combine", "deep_ep::intranode::notify_dispatch", "dispatch"]);
}

/// Transfer and wait on the fixture's all_reduce (µs): Seq 1 lasts 300 on rank 0 and 250 on
/// rank 1 → transfer 250, rank 0 waits 50, rank 1 arrived last; Seq 2 lasts 300 on both →
/// transfer 300, no wait, a tie that names no last arrival. Per step (2 steps): transfer
/// 550/2 = 275 µs; wait 50 / 2 ranks / 2 steps = 12.5 µs. Last arrival: rank 1 in the one
/// decided instance, share 1, p = 2 × P(X ≥ 1 | 1, ½) = 1: not claimed. busbw: 2 calls × 2 MiB × factor 2(2−1)/2 = 1 over
/// 550 µs = 4194304 / 550e-6 / 1e9 GB/s.
#[test]
fn transfer_wait_busbw_and_last_arrival_match_hand_computation() {
    let a = attribute_paths(&fixture(), &AttributeOptions::default()).expect("attributes");
    let ar = &a.by_collective["all_reduce"];
    assert_relative_eq!(ar.transfer_ms.expect("matched"), 0.275);
    assert_relative_eq!(ar.wait_ms.expect("matched"), 0.0125);
    assert_relative_eq!(ar.busbw_gbps.expect("payload known"), 4_194_304.0 / 550e-6 / 1e9);
    assert_eq!(ar.last_arrival_rank, None);
    assert_relative_eq!(ar.last_arrival_share.expect("two ranks"), 1.0);
    assert_eq!(ar.last_arrival_instances, 1);
    assert_relative_eq!(ar.last_arrival_p_value.expect("tested"), 1.0, max_relative = 1e-12);
    // Per step: Seq 1 is in step 0, Seq 2 in step 1.
    let steps = ar.steps.as_ref().expect("a series");
    assert_eq!(steps.transfer_ms.len(), 2);
    assert_relative_eq!(steps.transfer_ms[0], 0.25);
    assert_relative_eq!(steps.transfer_ms[1], 0.3);
    assert_relative_eq!(steps.wait_ms[0], 0.025);
    assert_relative_eq!(steps.wait_ms[1], 0.0);
    // Step times: the ranks' ProfilerStep windows, 1000 µs each.
    assert_eq!(a.ranks[0].step_ms.len(), 2);
    assert_relative_eq!(a.ranks[0].step_ms[0] + a.ranks[0].step_ms[1], 2.0);
}

/// DeepEP's kernels (the public `deep_ep::` and DeepSeek's own `dpsk::ep::` namespaces) are
/// communication without any pattern, each family its own row; the layout kernel computes.
#[test]
fn deep_ep_kernels_are_communication_by_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let doc = r#"{"traceEvents":[
        {"ph":"X","cat":"kernel","name":"void dpsk::ep::cuda::get_dispatch_layout<256>(long const*)","pid":0,"tid":7,"ts":0,"dur":10,"args":{}},
        {"ph":"X","cat":"kernel","name":"void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*)","pid":0,"tid":27,"ts":20,"dur":100,"args":{}},
        {"ph":"X","cat":"kernel","name":"void deep_ep::internode_ll::combine<8, 7168>(void*)","pid":0,"tid":27,"ts":200,"dur":60,"args":{}},
        {"ph":"X","cat":"kernel","name":"cutlass::device_kernel<gemm>","pid":0,"tid":7,"ts":30,"dur":200,"args":{}}
    ]}"#;
    let file = dir.path().join("rank-0.json");
    std::fs::write(&file, doc).expect("write");
    let a = attribute_paths(&[file], &AttributeOptions::default()).expect("attributes");
    let rows: Vec<&String> = a.by_collective.keys().collect();
    assert_eq!(rows, ["deep_ep::internode_ll::combine", "dpsk::ep::internode::dispatch"]);
    assert_relative_eq!(a.by_collective["dpsk::ep::internode::dispatch"].total_comm_ms, 0.1);
    assert!(a.source.moe_markers && a.source.comm_lookalikes.is_empty());
}

/// A trace whose communication commgate does not know: no row, but a note that names the
/// kernels that look like communication and the pattern that would count them; with that
/// pattern they are a row.
#[test]
fn kernels_that_look_like_communication_are_named_with_the_pattern_that_counts_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let doc = r#"{"traceEvents":[
        {"ph":"X","cat":"kernel","name":"void my_ep::fused_dispatch<8>(int*)","pid":0,"tid":9,"ts":0,"dur":300,"args":{}},
        {"ph":"X","cat":"kernel","name":"void my_ep::fused_dispatch<16>(int*)","pid":0,"tid":9,"ts":400,"dur":100,"args":{}},
        {"ph":"X","cat":"kernel","name":"triton_all_to_all_kernel","pid":0,"tid":9,"ts":600,"dur":50,"args":{}},
        {"ph":"X","cat":"kernel","name":"cutlass::device_kernel<gemm>","pid":0,"tid":7,"ts":0,"dur":700,"args":{}}
    ]}"#;
    let file = dir.path().join("rank-0.json");
    std::fs::write(&file, doc).expect("write");
    let a = attribute_paths(std::slice::from_ref(&file), &AttributeOptions::default()).expect("attributes");
    assert!(a.by_collective.is_empty());
    let found: Vec<(&str, f64)> = a.source.comm_lookalikes.iter().map(|l| (l.family.as_str(), l.ms_per_step)).collect();
    assert_eq!(found, [("my_ep::fused_dispatch", 0.4), ("triton_all_to_all_kernel", 0.05)]);
    let notes = a.notes().join("\n");
    assert!(
        notes.contains("my_ep::fused_dispatch (0.400 ms per step), triton_all_to_all_kernel (0.050 ms per step)"),
        "{notes}"
    );
    assert!(notes.contains("e.g. --comm-pattern fused_dispatch=my_ep::fused_dispatch"), "{notes}");
    let named = AttributeOptions {
        comm_patterns: vec![CommPattern::parse("fused_dispatch=my_ep::fused_dispatch").unwrap()],
        ..AttributeOptions::default()
    };
    let a = attribute_paths(&[file], &named).expect("attributes");
    assert_eq!(a.by_collective.keys().collect::<Vec<_>>(), ["fused_dispatch"]);
    assert!(a.source.comm_lookalikes.is_empty());
}
