//! The shapes real PyTorch traces take that hand-made ones rarely do, each in a small trace
//! written here: kernels queued before the capture, one rank of a larger job, the process
//! group's size on the kernels, a mixture-of-experts job or not, and a rank whose exposed time
//! is over the budget while the mean is within it. Times are µs, as Kineto writes them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::PathBuf;

use approx::assert_relative_eq;
use commgate_gate::decide::mitigation::{diagnose, Diagnosis, Thresholds};
use commgate_gate::decide::{Decision, Strategy};
use commgate_report::{render_attribution, render_attribution_in, Format, Width};
use commgate_trace::attribute::{AttributeOptions, BUSBW_LOWER_BOUND_NOTE, ONE_RANK_NOTE};
use commgate_trace::load::attribute_paths;
use serde_json::{json, Value};

/// One rank's trace document.
fn doc(rank: u32, world: u32, events: Vec<Value>) -> String {
    json!({"distributedInfo": {"rank": rank, "world_size": world}, "traceEvents": events}).to_string()
}

fn step(n: u32, ts: u64) -> Value {
    json!({"ph": "X", "cat": "user_annotation", "name": format!("ProfilerStep#{n}"), "pid": 1, "tid": 1, "ts": ts, "dur": 1000})
}

fn launch(correlation: u64, ts: u64) -> Value {
    json!({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 5,
           "args": {"correlation": correlation}})
}

fn kernel(name: &str, correlation: u64, ts: u64, dur: u64, args: Value) -> Value {
    let mut a = json!({"correlation": correlation, "stream": 7});
    a.as_object_mut().unwrap().extend(args.as_object().cloned().unwrap_or_default());
    json!({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": a})
}

/// PyTorch's metadata on a collective kernel: `elements` floats, call `seq` of group "0".
fn meta(collective: &str, elements: u64, seq: u64, group: u32) -> Value {
    json!({"Collective name": collective, "In msg nelems": elements, "Out msg nelems": elements, "dtype": "Float",
           "Process Group Name": "0", "Seq": seq, "Group size": group})
}

fn write(dir: &tempfile::TempDir, name: &str, text: String) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    path
}

fn attribute(paths: &[PathBuf]) -> Diagnosis {
    diagnose(attribute_paths(paths, &AttributeOptions::default()).expect("attributes"), &Thresholds::default())
}

/// Rank 0 of an 8-rank job, steps at 1000, 2000 and 3000 µs (two steps). Each step launches one
/// all_reduce (300 µs, 4 MiB, `Group size` 8) and one GEMM after it. Two communication kernels
/// queued before the capture (no launch event in the trace) still run at 1050 and 1160, inside
/// the first step: they are not this window's work.
fn one_rank_with_queued_kernels(dir: &tempfile::TempDir) -> PathBuf {
    let mut events = vec![step(1, 1000), step(2, 2000), step(3, 3000)];
    for s in 0..2u64 {
        let base = 1000 + 1000 * s;
        events.push(launch(10 + s, base + 100));
        events.push(kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            10 + s,
            base + 200,
            300,
            meta("allreduce", 1 << 20, s, 8),
        ));
        events.push(launch(20 + s, base + 150));
        events.push(kernel("sm90_xmma_gemm_bf16", 20 + s, base + 500, 200, json!({})));
    }
    events.push(kernel("ncclDevKernel_Generic", 900, 1050, 100, json!({})));
    events.push(kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 901, 1160, 30, json!({})));
    write(dir, "rank-0.json", doc(0, 8, events))
}

#[test]
fn kernels_queued_before_the_capture_are_outside_the_step_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = attribute(&[one_rank_with_queued_kernels(&dir)]);
    assert_eq!(d.by_collective.keys().collect::<Vec<_>>(), ["all_reduce"], "no unknown_collective row");
    let r = &d.ranks[0];
    assert_eq!((r.steps, r.comm_kernels), (2, 2));
    // Per step: the one 300 µs all_reduce launched in it, never more than the step.
    assert_relative_eq!(r.comm_ms, 0.3);
    assert_relative_eq!(r.exposed_ms, 0.3);
    assert_eq!(d.source.queued_before_capture, 2);
    let notes = d.source.notes();
    assert!(
        notes.iter().any(|n| n == "2 GPU activities queued before the capture began (no launch event in the trace) are outside the step window"),
        "{notes:?}"
    );
}

#[test]
fn one_rank_of_eight_observes_no_wait_transfer_or_imbalance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = attribute(&[one_rank_with_queued_kernels(&dir)]);
    let h = &d.by_collective["all_reduce"];
    assert_eq!((h.transfer_ms, h.wait_ms, h.rank_imbalance_ratio), (None, None, None));
    assert!(!h.rank_imbalance_observed);
    assert_eq!((h.straggler_rank, h.last_arrival_rank), (None, None));
    // The bus bandwidth from `Group size` 8: 4 MiB × 2·7/8 over the whole 300 µs kernel, a
    // lower bound (the wait is in it).
    assert_relative_eq!(h.busbw_gbps.expect("group size"), 4_194_304.0 * 1.75 / 300e-6 / 1e9);
    assert!(h.busbw_lower_bound);
    assert_ne!(d.mitigation.strategy, Strategy::RebalanceRanksOrExperts);

    // The report's caveats say what one rank cannot show, and how to read the `>=`.
    let notes = d.notes();
    assert!(notes.iter().any(|n| n.starts_with("partial rank set: ranks 0 of 8: 7 missing")), "{notes:?}");
    assert!(notes.iter().any(|n| n == ONE_RANK_NOTE), "{notes:?}");
    assert!(notes.iter().any(|n| n == BUSBW_LOWER_BOUND_NOTE), "{notes:?}");
    let json: Value = serde_json::from_str(&render_attribution(&d, Format::Json)).expect("json");
    let row = &json["by_collective"]["all_reduce"];
    for field in ["transfer_ms", "wait_ms", "rank_imbalance_ratio", "straggler_rank", "last_arrival_rank"] {
        assert_eq!(row[field], Value::Null, "{field}");
    }
    let text = render_attribution_in(&d, Format::Text, Width::Wide);
    let line = text.lines().find(|l| l.starts_with("all_reduce")).expect("a row");
    let cells: Vec<&str> = line.split_whitespace().collect();
    // imbalance, straggler, transfer, wait, busbw, last arrival (the payload takes two cells)
    assert_eq!(&cells[9..15], ["n/a", "-", "n/a", "n/a", ">=24.47", "-"], "{line}");
    let md = render_attribution(&d, Format::Markdown);
    assert!(md.contains("| n/a | - | n/a | n/a | >=24.47 | - |"), "{md}");
}

/// Two ranks whose `kernel` all_to_all (1 MiB) runs 10 times per step, rank 1 always last (its
/// kernels 200 µs, rank 0's 600 µs): imbalance (400 × 10) / (800 × 10) = 0.5.
fn imbalanced_pair(dir: &tempfile::TempDir, kernel_name: &str) -> Vec<PathBuf> {
    (0..2u32)
        .map(|rank| {
            let mut events = vec![step(1, 0), step(2, 10_000)];
            for i in 0..10u64 {
                let ts = 100 + 900 * i;
                events.push(launch(i, ts));
                let dur = if rank == 1 { 200 } else { 600 };
                events.push(kernel(kernel_name, i, ts + 10, dur, meta("all_to_all", 1 << 18, i, 2)));
            }
            events.push(launch(99, 50));
            events.push(kernel("sm90_xmma_gemm_bf16", 99, 60, 30, json!({})));
            write(dir, &format!("rank-{rank}.json"), doc(rank, 2, events))
        })
        .collect()
}

#[test]
fn an_imbalance_on_a_dense_job_asks_for_measurements_that_exist() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = attribute(&imbalanced_pair(&dir, "ncclDevKernel_AllToAll_RING_LL"));
    let h = &d.by_collective["all_to_all"];
    assert_relative_eq!(h.rank_imbalance_ratio.expect("observed"), 0.5);
    // Rank 1 last in 10 of 10: by count 2 × 0.5^10 ≈ 0.002; by lateness (its 10 offsets of 400 µs
    // above rank 0's 10 zeros) 2 × 1/C(20, 10); the smaller, doubled: 4/184756, claimed.
    assert_eq!((h.last_arrival_rank, h.straggler_rank), (Some(1), Some(1)));
    assert_relative_eq!(h.last_arrival_p_value.expect("tested"), 4.0 / 184_756.0, max_relative = 1e-9);
    assert_eq!(d.mitigation.strategy, Strategy::RebalanceRanksOrExperts);
    assert_eq!(d.mitigation.next_measurements, ["rank_elapsed_ms", "per_rank_payload_bytes", "step_time_ms"]);
    assert!(!d.source.moe_markers);
    assert!(d.followup.reason.contains("(rank imbalance 0.50 across 2 of the job's 2 ranks)"), "{}", d.followup.reason);
}

#[test]
fn an_imbalance_on_a_moe_job_asks_for_expert_and_token_measurements() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut paths = imbalanced_pair(&dir, "ncclDevKernel_AllToAll_RING_LL");
    // The same job with an expert kernel on rank 0.
    let text = std::fs::read_to_string(&paths[0]).expect("read");
    let mut v: Value = serde_json::from_str(&text).expect("json");
    v["traceEvents"].as_array_mut().unwrap().push(launch(98, 70));
    v["traceEvents"].as_array_mut().unwrap().push(kernel("fused_moe_kernel", 98, 95, 3, json!({})));
    paths[0] = write(&dir, "rank-0.json", v.to_string());
    let d = attribute(&paths);
    assert!(d.source.moe_markers);
    assert_eq!(d.mitigation.next_measurements, ["rank_elapsed_ms", "expert_load_skew", "cross_rank_token_ratio"]);
}

/// Two ranks, one all_reduce per step: rank 0 exposes 2 ms, rank 1 exposes 7.5 ms. The mean,
/// 4.75 ms, is within the 5 ms budget; rank 1 is not.
#[test]
fn a_rank_over_the_budget_turns_accept_into_tune() {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths: Vec<PathBuf> = [(0u32, 2_000u64), (1, 7_500)]
        .iter()
        .map(|&(rank, dur)| {
            let events = vec![
                step(1, 0),
                step(2, 10_000),
                launch(1, 100),
                kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1, 200, dur, meta("allreduce", 1 << 20, 0, 2)),
            ];
            write(&dir, &format!("rank-{rank}.json"), doc(rank, 2, events))
        })
        .collect();
    let d = attribute(&paths);
    let h = &d.by_collective["all_reduce"];
    assert_relative_eq!(h.exposed_comm_ms, 4.75);
    assert_eq!((h.worst_exposed_rank, h.exposed_comm_ms_max_rank), (Some(1), 7.5));
    assert_eq!(d.followup.decision, Decision::Tune);
    assert!(
        d.followup.reason.starts_with(
            "all_reduce exposes 4.750 ms of communication on average, within the 5.0 ms budget, but rank 1 exposes \
             7.500 ms in all_reduce (over it): try "
        ),
        "{}",
        d.followup.reason
    );
}
