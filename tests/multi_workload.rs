//! `commgate check` over several workloads through the binary: each result against its own
//! store, one verdict (exit 0 accept, 1 a regression naming its workload, 0
//! collect_more_evidence naming the workload without a store; two results of one workload are
//! its runs, 2 when they measured differently),
//! and the three renderings of a multi-workload report.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

mod common;
use common::commgate_in;

fn commgate(dir: &Path) -> Command {
    let mut cmd = commgate_in(dir);
    cmd.env("CI", "true");
    cmd
}

fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = commgate(dir).args(args).output().expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

/// Two mock results (1 MiB and 64 MiB per rank), their paths sorted by workload id.
fn two_results(dir: &Path) -> Vec<PathBuf> {
    let (code, _, err) =
        run(dir, &["bench", "--backend", "mock", "--payload-sizes", "1Mi,64Mi", "--results-dir", "results"]);
    assert_eq!(code, 0, "{err}");
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(dir.join("results")).expect("results").map(|e| e.expect("entry").path()).collect();
    paths.sort_by_key(|p| id(p));
    assert_eq!(paths.len(), 2, "{paths:?}");
    paths
}

fn read(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).expect("read")).expect("json")
}

fn id(p: &Path) -> String {
    read(p)["workload"]["id"].as_str().expect("id").to_string()
}

fn record(dir: &Path, results: &[&Path]) {
    std::fs::create_dir_all(dir.join("baselines")).expect("mkdir");
    let mut args = vec!["baseline", "update", "--baselines", "baselines", "--from"];
    let paths: Vec<String> = results.iter().map(|p| p.display().to_string()).collect();
    args.extend(paths.iter().map(String::as_str));
    let (code, _, err) = run(dir, &args);
    assert_eq!(code, 0, "{err}");
}

/// `p` with every sample `factor` times slower, written next to it.
fn slower(p: &Path, factor: f64) -> PathBuf {
    let mut v = read(p);
    for row in v["rows"].as_array_mut().expect("rows") {
        for s in row["samples_ms"].as_array_mut().expect("samples") {
            *s = (s.as_f64().expect("number") * factor).into();
        }
    }
    let out = p.with_extension("slower.json");
    std::fs::write(&out, v.to_string()).expect("write");
    out
}

fn check(dir: &Path, results: &[&Path], extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["check", "--baselines", "baselines", "--comment", "never"];
    let paths: Vec<String> = results.iter().map(|p| p.display().to_string()).collect();
    for p in &paths {
        args.extend(["--result", p.as_str()]);
    }
    args.extend(extra);
    run(dir, &args)
}

/// The temp directory's path and the result names, as the snapshots should not see them.
fn stable(s: &str, dir: &Path, results: &[PathBuf]) -> String {
    let mut s = s.replace(&dir.display().to_string(), "[DIR]");
    for (i, p) in results.iter().enumerate() {
        let name = p.file_name().expect("name").to_string_lossy().to_string();
        s = s.replace(&name, &format!("[RESULT{i}]"));
    }
    s
}

/// What the snapshots must not pin: the clock's times and dates (the runs are dated when they
/// run), commgate's own version (the results carry it), and the mock's raw step times (the
/// figures judged from them stay in the snapshot).
fn snapshot(name: &str, text: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z", "[TIME]");
    settings.add_filter(r"\d{4}-\d{2}-\d{2}", "[DATE]");
    settings.add_filter(r#""(version|commgate)": "\d+\.\d+\.\d+[^"]*""#, r#""$1": "[VERSION]""#);
    settings.add_filter(r#""samples_ms": \[[^\]]*\]"#, r#""samples_ms": "[STEP TIMES]""#);
    settings.bind(|| insta::assert_snapshot!(name, text));
}

#[test]
fn unchanged_workloads_are_accepted_and_each_is_reported() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let r = two_results(d);
    record(d, &[&r[0], &r[1]]);
    let (code, out, err) = check(d, &[&r[0], &r[1]], &["--format", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["verdict"], "accept", "{out}");
    assert_eq!(v["workloads"].as_array().expect("workloads").len(), 2);
    assert_eq!(v["workloads"][1]["id"], id(&r[1]).as_str());
    assert_eq!(v["workloads"][0]["trend"].as_array().expect("trend").len(), 2, "one stored run, then the current");
    for format in ["text", "markdown"] {
        let (code, out, _) = check(d, &[&r[0], &r[1]], &["--format", format]);
        assert_eq!(code, 0);
        snapshot(&format!("accepted_{format}"), &stable(&out, d, &r));
    }
}

/// Three more mock runs of both workloads recorded into the store (seeds 2 to 4; the first run
/// had the default seed 1, and a run of seed 1 in the same second would be that run again, so
/// the store's size would depend on the clock): a store that can block, since one or two runs
/// never do on their own.
fn record_three_more(dir: &Path) {
    for seed in 2..=4 {
        let out = format!("results-{seed}");
        let seed = seed.to_string();
        let args =
            ["bench", "--backend", "mock", "--payload-sizes", "1Mi,64Mi", "--results-dir", &out, "--seed", &seed];
        let (code, _, err) = run(dir, &args);
        assert_eq!(code, 0, "{err}");
        let paths: Vec<PathBuf> =
            std::fs::read_dir(dir.join(&out)).expect("results").map(|e| e.expect("entry").path()).collect();
        record(dir, &paths.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    }
}

#[test]
fn a_slower_workload_blocks_and_the_reason_names_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let r = two_results(d);
    record(d, &[&r[0], &r[1]]);
    record_three_more(d);
    let slow = slower(&r[1], 1.08);
    let (code, out, err) = check(d, &[&r[0], &slow], &["--format", "json"]);
    assert_eq!(code, 1, "{out}{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!((v["verdict"].as_str(), v["blocking"].as_bool()), (Some("tune"), Some(true)));
    let slow_id = id(&r[1]);
    let reasons: Vec<&str> = v["reasons"].as_array().expect("reasons").iter().filter_map(Value::as_str).collect();
    assert!(reasons[0].starts_with(&format!("{slow_id}: ")), "{reasons:?}");
    assert!(!reasons.iter().any(|x| x.starts_with(&id(&r[0]))), "the unchanged workload is not a reason: {reasons:?}");
    assert_eq!(v["workloads"][1]["blocking"], true);
    assert_eq!(v["workloads"][0]["blocking"], false);
    snapshot("regressed_json", &stable(&out, d, &r));
    let (code, md, _) = check(d, &[&r[0], &slow], &["--format", "markdown"]);
    assert_eq!(code, 1);
    snapshot("regressed_markdown", &stable(&md, d, &r));
}

#[test]
fn a_workload_without_a_store_asks_for_evidence_by_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let r = two_results(d);
    record(d, &[&r[0]]);
    let (code, out, err) = check(d, &[&r[0], &r[1]], &["--format", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["verdict"], "collect_more_evidence");
    let missing = id(&r[1]);
    assert!(
        v["reasons"]
            .as_array()
            .expect("reasons")
            .iter()
            .any(|x| x.as_str().is_some_and(|x| x.starts_with(&format!("{missing}: no baseline at")))),
        "{out}"
    );
    assert_eq!(v["workloads"][1]["baseline"]["exists"], false);
}

#[test]
fn two_results_of_one_workload_are_its_runs_and_unlike_ones_are_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let r = two_results(d);
    record(d, &[&r[0], &r[1]]);
    let copy = d.join("copy.json");
    std::fs::copy(&r[0], &copy).expect("copy");
    let (code, out, err) = check(d, &[&r[0], &copy], &["--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["comparison"]["current_runs"], 2, "{out}");
    assert!(v.get("workloads").is_none(), "one workload, judged from two runs: {out}");
    // The same id measuring another matmul is not a run of the same workload.
    let mut other = read(&r[0]);
    other["workload"]["compute_dim"] = (other["workload"]["compute_dim"].as_u64().expect("n") * 2).into();
    let unlike = d.join("unlike.json");
    std::fs::write(&unlike, other.to_string()).expect("write");
    let (code, out, err) = check(d, &[&r[0], &unlike], &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.is_empty(), "nothing half-written: {out}");
    assert!(err.contains(&r[0].display().to_string()) && err.contains("unlike.json"), "{err}");
    assert!(err.contains("both results of workload") && err.contains("`workload.compute_dim`"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn check_runs_every_declared_workload() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let r = two_results(d);
    record(d, &[&r[0], &r[1]]);
    let (code, out, err) = run(
        d,
        &[
            "check",
            "--backend",
            "mock",
            "--payload-sizes",
            "1Mi,64Mi",
            "--results-dir",
            "now",
            "--baselines",
            "baselines",
            "--comment",
            "never",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["verdict"], "accept", "{out}");
    let ids: Vec<&str> =
        v["workloads"].as_array().expect("workloads").iter().filter_map(|w| w["id"].as_str()).collect();
    let mut want = vec![id(&r[0]), id(&r[1])];
    let mut got: Vec<String> = ids.iter().map(ToString::to_string).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    assert_eq!(std::fs::read_dir(d.join("now")).expect("results").count(), 2);
}
