//! `baseline update --traces` keeps a history of trace runs, and `check --traces` judges the
//! current traces against it with the benchmark's statistics: unchanged traces pass, a straggler
//! at every `all_to_all` blocks with cause `wait` and names the rank, a slower `all_reduce` wire
//! blocks with cause `transfer`. The traces are the testkit generator's (4 ranks, 30 steps, the
//! same buffer sizes every step), each trace run with its own seed; eight stored runs put the
//! comparison in the history regime, two in the pooled one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};

use commgate_testkit::synth::{write_all_ranks, Perturb, SynthSpec};
use serde_json::Value;

mod common;
use common::{commgate, root};

const STORE: &str = "tests/fixtures/compare/baselines/SIM-MOCK/par-overlap-allreduce-matmul.json";
const SAME: &str = "tests/fixtures/compare/current-same.json";

/// One trace capture of the job (`SynthSpec::gate_job`: 4 ranks, 30 steps, steady sizes, rank 1
/// the usual straggler).
fn spec(seed: u64, perturb: Perturb) -> SynthSpec {
    SynthSpec::gate_job(seed, perturb)
}

fn capture(dir: &Path, name: &str, spec: &SynthSpec) -> PathBuf {
    let out = dir.join(name);
    write_all_ranks(spec, &out, false).expect("traces");
    out
}

/// A store with the mock run and `runs` trace runs under "default" (seeds 1…runs).
fn store_with_trace_runs(tmp: &Path, runs: u64) -> PathBuf {
    let store = tmp.join("baselines");
    std::fs::create_dir_all(store.join("SIM-MOCK")).expect("dir");
    std::fs::copy(root().join(STORE), store.join("SIM-MOCK/par-overlap-allreduce-matmul.json")).expect("copy");
    for seed in 1..=runs {
        let traces = capture(tmp, &format!("base-{seed}"), &spec(seed, Perturb::default()));
        let out = commgate()
            .args(["baseline", "update", "--environment-profile", "SIM-MOCK", "--keep", "10", "--baselines"])
            .arg(&store)
            .arg("--traces")
            .arg(&traces)
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let held = format!("now holds {seed} trace run{} \"default\"", if seed == 1 { "" } else { "s" });
        assert!(stderr.contains(&held), "{stderr}");
    }
    store
}

fn check(store: &Path, traces: &Path) -> (Option<i32>, Value) {
    let out = commgate()
        .args(["check", "--result", SAME, "--format", "json", "--baselines"])
        .arg(store)
        .arg("--traces")
        .arg(traces)
        .output()
        .expect("runs");
    let v: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), v)
}

/// The check report in `format`, with the temporary directory's path made stable.
fn rendered(store: &Path, traces: &Path, format: &str, tmp: &Path) -> String {
    let out = commgate()
        .args(["check", "--result", SAME, "--format", format, "--baselines"])
        .arg(store)
        .arg("--traces")
        .arg(traces)
        .output()
        .expect("runs");
    String::from_utf8_lossy(&out.stdout).replace(&tmp.display().to_string(), "<tmp>")
}

fn collective<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["trace_comparison"]["collectives"]
        .as_array()
        .expect("collectives")
        .iter()
        .find(|c| c["collective"] == name)
        .unwrap_or_else(|| panic!("{name} in {}", v["trace_comparison"]))
}

#[test]
fn trace_runs_are_a_history_and_judge_unchanged_straggler_and_slower_transfer() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store_with_trace_runs(tmp.path(), 8);
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(store.join("SIM-MOCK/par-overlap-allreduce-matmul.json")).expect("store"),
    )
    .expect("json");
    assert_eq!(file["traces"]["default"].as_array().expect("a list of trace runs").len(), 8);

    // The same job again, another seed: nothing regressed, the gate accepts.
    let same = capture(tmp.path(), "same", &spec(77, Perturb::default()));
    let (code, v) = check(&store, &same);
    assert_eq!(code, Some(0), "{v:#}");
    let t = &v["trace_comparison"];
    assert_eq!((t["runs"].as_u64(), t["method"].as_str()), (Some(8), Some("history")));
    for c in t["collectives"].as_array().expect("collectives") {
        assert_ne!(c["state"], "regressed", "{c:#}");
    }

    // Rank 2 arrives 900 µs late at every all_to_all.
    let late = Perturb { all_to_all_late_ns: 900_000, ..Perturb::default() };
    let straggler = capture(tmp.path(), "straggler", &SynthSpec { straggler_rank: 2, ..spec(78, late) });
    let (code, v) = check(&store, &straggler);
    assert_eq!(code, Some(1), "{v:#}");
    let a2a = collective(&v, "all_to_all");
    assert_eq!(
        (a2a["state"].as_str(), a2a["cause"].as_str(), a2a["late_rank"].as_u64()),
        (Some("regressed"), Some("wait"), Some(2)),
        "{a2a:#}"
    );
    assert_eq!(a2a["mitigation"]["strategy"], "rebalance_ranks_or_experts");
    let reasons: Vec<&str> = v["reasons"].as_array().expect("reasons").iter().filter_map(Value::as_str).collect();
    assert!(
        reasons.iter().any(|r| r.starts_with("all_to_all waits longer for the last rank: wait +")
            && r.contains("rank 2 arrives last in 100 % of all_to_all calls")),
        "{reasons:#?}"
    );
    for format in ["markdown", "text"] {
        insta::assert_snapshot!(format!("straggler_{format}"), rendered(&store, &straggler, format, tmp.path()));
    }

    // Every all_reduce moves its bytes 10 % more slowly.
    let slower = Perturb { all_reduce_transfer_factor: 1.10, ..Perturb::default() };
    let transfer = capture(tmp.path(), "transfer", &spec(79, slower));
    let (code, v) = check(&store, &transfer);
    assert_eq!(code, Some(1), "{v:#}");
    let ar = collective(&v, "all_reduce");
    assert_eq!((ar["state"].as_str(), ar["cause"].as_str()), (Some("regressed"), Some("transfer")), "{ar:#}");
    assert_eq!(ar["mitigation"]["strategy"], "tune_collective_transport");
    assert!(ar.get("late_rank").is_none(), "{ar:#}");
}

#[test]
fn two_stored_trace_runs_compare_steps_directly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store_with_trace_runs(tmp.path(), 2);
    let late = Perturb { all_to_all_late_ns: 900_000, ..Perturb::default() };
    let straggler = capture(tmp.path(), "straggler", &SynthSpec { straggler_rank: 3, ..spec(80, late) });
    let (code, v) = check(&store, &straggler);
    assert_eq!(code, Some(1), "{v:#}");
    assert_eq!(v["trace_comparison"]["method"], "pooled");
    let a2a = collective(&v, "all_to_all");
    assert_eq!((a2a["cause"].as_str(), a2a["late_rank"].as_u64()), (Some("wait"), Some(3)), "{a2a:#}");
    // Traces of another job size are not judged against this baseline: the gate says so.
    let eight = capture(tmp.path(), "eight", &SynthSpec { world_size: 8, ..spec(81, Perturb::default()) });
    let (code, v) = check(&store, &eight);
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(v["verdict"], "collect_more_evidence");
    assert!(
        v["trace_comparison"]["unusable"]
            .as_str()
            .is_some_and(|u| u.contains("recorded with 4 ranks and the traces have 8")),
        "{v:#}"
    );
    // Nor stored under the same name.
    let out = commgate()
        .args(["baseline", "update", "--environment-profile", "SIM-MOCK", "--baselines"])
        .arg(&store)
        .arg("--traces")
        .arg(&eight)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("holds trace runs \"default\" of 4 ranks and these traces have 8"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn inspector_logs_are_judged_on_transfer_and_wait_only() {
    use commgate_testkit::inspector::write_all_ranks_logs;
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("baselines");
    std::fs::create_dir_all(store.join("SIM-MOCK")).expect("dir");
    std::fs::copy(root().join(STORE), store.join("SIM-MOCK/par-overlap-allreduce-matmul.json")).expect("copy");
    let logs = |name: &str, s: &SynthSpec| {
        let dir = tmp.path().join(name);
        write_all_ranks_logs(s, &dir).expect("logs");
        dir
    };
    for seed in 1..=3 {
        let out = commgate()
            .args(["baseline", "update", "--environment-profile", "SIM-MOCK", "--baselines"])
            .arg(&store)
            .arg("--traces")
            .arg(logs(&format!("base-{seed}"), &spec(seed, Perturb::default())))
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let late = Perturb { all_to_all_late_ns: 900_000, ..Perturb::default() };
    let (code, v) = check(&store, &logs("late", &SynthSpec { straggler_rank: 2, ..spec(9, late) }));
    let a2a = collective(&v, "all_to_all");
    let quantities: Vec<&str> =
        a2a["metrics"].as_array().expect("metrics").iter().filter_map(|m| m["quantity"].as_str()).collect();
    assert_eq!(quantities, ["transfer", "wait"], "no exposed time without compute kernels: {a2a:#}");
    // One whole-log sample per capture; three stored captures are a history of runs, against
    // whose spread a wait six times longer is confirmed. Without step times, wait is a share of
    // the collective's own baseline time.
    assert_eq!(code, Some(1), "{v:#}");
    assert_eq!((a2a["cause"].as_str(), a2a["late_rank"].as_u64()), (Some("wait"), Some(2)), "{a2a:#}");
    assert_eq!(v["trace_comparison"]["step_ms"], Value::Null);
    let reasons: Vec<&str> = v["reasons"].as_array().expect("reasons").iter().filter_map(Value::as_str).collect();
    assert!(reasons[0].contains("of its baseline time"), "{reasons:#?}");
}

/// A retried job stores its traces again, from the same directory or from a copy in another
/// workspace: the store keeps one copy, and `baseline list` and `check` keep working.
#[test]
fn a_retried_trace_update_changes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store_with_trace_runs(tmp.path(), 1);
    let first = tmp.path().join("base-1");
    let copy = tmp.path().join("retry/workspace/base-1");
    std::fs::create_dir_all(&copy).expect("dir");
    for entry in std::fs::read_dir(&first).expect("traces") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), copy.join(entry.file_name())).expect("copy");
    }
    for traces in [&first, &copy] {
        let out = commgate()
            .args(["baseline", "update", "--environment-profile", "SIM-MOCK", "--baselines"])
            .arg(&store)
            .arg("--traces")
            .arg(traces)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(stderr.contains("already holds this trace run; it holds 1 trace run \"default\""), "{stderr}");
    }
    let list = commgate().args(["baseline", "list", "--baselines"]).arg(&store).output().expect("runs");
    assert_eq!(list.status.code(), Some(0), "{}", String::from_utf8_lossy(&list.stderr));
    let (code, _) = check(&store, &first);
    assert_eq!(code, Some(0));
}

/// One field of a partial file edited so that no call matches across ranks any more (rank 0's
/// process group renamed; its sequence numbers shifted), or a collective renamed in every column:
/// a blocking straggler is never accepted, and unchanged traces so edited are not accepted either
/// (the wait that would have blocked cannot be measured; the renamed collective cannot be
/// compared), the reason named.
#[test]
fn edits_that_unmatch_or_rename_a_collective_never_accept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store_with_trace_runs(tmp.path(), 3);
    let late = Perturb { all_to_all_late_ns: 900_000, ..Perturb::default() };
    let straggler = capture(tmp.path(), "straggler", &SynthSpec { straggler_rank: 2, ..spec(78, late) });
    let same = capture(tmp.path(), "same", &spec(77, Perturb::default()));
    for (job, traces, blocks) in [("straggler", straggler, Some(1)), ("same", same, Some(0))] {
        let partial = tmp.path().join(format!("{job}.json"));
        let out = commgate().args(["attribute", "--partial"]).arg(&partial).arg(&traces).output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(check(&store, &partial).0, blocks, "{job}: the partial file is judged as its traces are");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&partial).expect("read")).expect("json");
        for (what, edited, said) in edits(&v) {
            let path = tmp.path().join(format!("{job}-{}.json", what.replace(' ', "-")));
            std::fs::write(&path, serde_json::to_string(&edited).expect("json")).expect("write");
            let (code, report) = check(&store, &path);
            assert_ne!(report["verdict"], "accept", "{job}, {what}: {:#}", report["reasons"]);
            if blocks == Some(1) {
                assert_eq!(code, Some(1), "{job}, {what}: {:#}", report["reasons"]);
            } else {
                // Unchanged traces: asked for evidence, naming why; a renamed collective may
                // instead block as new work (judged against none in the baseline).
                let reasons = report["reasons"].to_string();
                assert!(reasons.contains(said) || code == Some(1), "{job}, {what}: {reasons}");
            }
        }
    }
}

/// The three edits, each with what the reason says.
fn edits(v: &Value) -> [(&'static str, Value, &'static str); 3] {
    let mut renamed_group = v.clone();
    let texts = renamed_group["ranks"][0]["analysis"]["kernels"]["texts"].as_array_mut().expect("texts");
    let pg = texts.iter().position(|t| t == "0").expect("process group \"0\"");
    texts[pg] = "zz".into();
    let mut shifted = v.clone();
    for n in shifted["ranks"][0]["analysis"]["kernels"]["key_n"].as_array_mut().expect("key_n") {
        *n = (n.as_u64().expect("n") + 1000).into();
    }
    let mut gone = v.clone();
    for r in gone["ranks"].as_array_mut().expect("ranks") {
        for t in r["analysis"]["kernels"]["texts"].as_array_mut().expect("texts") {
            if t == "all_to_all" {
                *t = "a2a".into();
            }
        }
        for c in r["analysis"]["collectives"].as_array_mut().expect("collectives") {
            if c["name"] == "all_to_all" {
                c["name"] = "a2a".into();
            }
        }
    }
    let unmatched = "but these traces match none of them";
    [
        ("renamed group", renamed_group, unmatched),
        ("shifted sequence", shifted, unmatched),
        ("renamed", gone, "all_to_all is in the trace baseline"),
    ]
}
