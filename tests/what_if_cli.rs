//! "What would fix it" through the binary: `attribute` prints the fixes ranked by saving and the
//! critical path, `--busbw` adds a transfer fix, and `check --fail-on-savings-ms` blocks a pull
//! request whose late rank costs more than the stored trace runs' did, passes one that does
//! not, and says it cannot judge without traces.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};

use commgate_testkit::synth::{write_all_ranks, Perturb, SynthSpec};
use serde_json::Value;

mod common;
use common::{commgate, root};

const STORE: &str = "tests/fixtures/compare/baselines/SIM-MOCK/par-overlap-allreduce-matmul.json";
const SAME: &str = "tests/fixtures/compare/current-same.json";

fn capture(dir: &Path, name: &str, seed: u64, perturb: Perturb) -> PathBuf {
    let out = dir.join(name);
    write_all_ranks(&SynthSpec::gate_job(seed, perturb), &out, false).expect("traces");
    out
}

fn store(tmp: &Path, runs: u64) -> PathBuf {
    let store = tmp.join("baselines");
    std::fs::create_dir_all(store.join("SIM-MOCK")).expect("dir");
    std::fs::copy(root().join(STORE), store.join("SIM-MOCK/par-overlap-allreduce-matmul.json")).expect("copy");
    for seed in 1..=runs {
        let traces = capture(tmp, &format!("base-{seed}"), seed, Perturb::default());
        let out = commgate()
            .args(["baseline", "update", "--environment-profile", "SIM-MOCK", "--baselines"])
            .arg(&store)
            .arg("--traces")
            .arg(&traces)
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    store
}

fn check(store: &Path, traces: Option<&Path>, limit: &str) -> (Option<i32>, Value) {
    let mut cmd = commgate();
    cmd.args(["check", "--result", SAME, "--format", "json", "--fail-on-savings-ms", limit, "--baselines"]).arg(store);
    if let Some(t) = traces {
        cmd.arg("--traces").arg(t);
    }
    let out = cmd.output().expect("runs");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code(), json)
}

fn reasons(report: &Value) -> String {
    report["reasons"].as_array().expect("reasons").iter().filter_map(Value::as_str).collect::<Vec<_>>().join("\n")
}

#[test]
fn attribute_ranks_the_fixes_and_names_the_critical_path() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let traces = capture(tmp.path(), "job", 5, Perturb::default());
    let out = commgate().arg("attribute").arg(&traces).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("What would fix it (replay of "), "{text}");
    assert!(text.contains("rank 1 on time"), "{text}");
    assert!(text.contains("all_to_all hidden"), "{text}");
    assert!(text.contains("Critical path of the median step (step "), "{text}");
    assert!(text.contains("Would save: "), "{text}");

    let out = commgate()
        .arg("attribute")
        .arg(&traces)
        .args(["--format", "json", "--busbw", "400", "--bucket-earlier-us", "100"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).expect("json");
    let w = &json["what_if"];
    assert_eq!(w["late_rank"], 1);
    let kinds: Vec<&str> =
        w["scenarios"].as_array().expect("scenarios").iter().filter_map(|s| s["kind"].as_str()).collect();
    assert!(kinds.contains(&"transfer_at_busbw") && kinds.contains(&"late_rank_on_time"), "{kinds:?}");
    assert!(kinds.contains(&"earlier"), "{kinds:?}");
    let at =
        w["scenarios"].as_array().expect("scenarios").iter().find(|s| s["kind"] == "transfer_at_busbw").expect("one");
    assert_eq!(at["busbw_set_by"], "--busbw 400");
    assert!(!w["critical_path"]["path"].as_array().expect("path").is_empty());

    let md = commgate().arg("attribute").arg(&traces).args(["--format", "markdown"]).output().expect("runs");
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(md.contains("```mermaid\ngantt") || md.contains("```mermaid\n%%{init"), "{md}");
    assert!(md.contains("**Would save:**"), "{md}");
}

#[test]
fn a_bus_bandwidth_that_is_not_one_is_refused_naming_the_flag() {
    for (flag, value, said) in [
        ("--busbw", "0", "GB/s above 0"),
        ("--busbw", "1e300", "at most 100000"),
        ("--bucket-earlier-us", "1e18", "at most 1e9"),
    ] {
        let out =
            commgate().args(["attribute", "tests/fixtures/seed_events.json", flag, value]).output().expect("runs");
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag) && err.contains(said), "{err}");
    }
}

#[test]
fn a_late_rank_that_costs_more_than_the_limit_blocks_and_one_within_it_passes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store(tmp.path(), 2);
    let same = capture(tmp.path(), "same", 9, Perturb::default());
    let (code, report) = check(&store, Some(&same), "1.0");
    assert_eq!(code, Some(0), "{}", reasons(&report));
    assert!(reasons(&report).contains("balance within the limit: rank 1 on time would save"), "{}", reasons(&report));
    assert_eq!(report["balance"]["blocking"], false);
    assert_eq!(report["balance"]["baseline_runs"], 2);

    // Rank 1 arrives 250 µs later at each all-to-all: four a step.
    let late = capture(tmp.path(), "late", 9, Perturb { all_to_all_late_ns: 250_000, ..Perturb::default() });
    let (code, report) = check(&store, Some(&late), "0.5");
    assert_eq!(code, Some(1), "{}", reasons(&report));
    assert!(reasons(&report).contains("balance regressed: rank 1 on time would save"), "{}", reasons(&report));
    let b = &report["balance"];
    assert_eq!(b["blocking"], true);
    assert!(b["growth_ms"].as_f64().expect("growth") > 0.5, "{b}");
}

#[test]
fn without_traces_the_balance_rule_cannot_judge_and_says_so() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store(tmp.path(), 0);
    let (code, report) = check(&store, None, "1.0");
    assert_eq!(code, Some(0));
    assert_eq!(report["verdict"], "collect_more_evidence");
    assert!(
        reasons(&report).contains("--fail-on-savings-ms gates on the traces' what-if: attach --traces"),
        "{}",
        reasons(&report)
    );
    assert!(report.get("balance").is_none());
}

#[test]
fn without_stored_trace_runs_the_saving_itself_is_held_against_the_limit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store(tmp.path(), 0);
    let traces = capture(tmp.path(), "job", 9, Perturb::default());
    let (code, report) = check(&store, Some(&traces), "0");
    assert_eq!(code, Some(1), "{}", reasons(&report));
    assert!(
        reasons(&report).contains("no stored trace run has a what-if, so it is held against 0 ms"),
        "{}",
        reasons(&report)
    );
    let (code, _) = check(&store, Some(&traces), "100");
    assert_eq!(code, Some(0));
}
