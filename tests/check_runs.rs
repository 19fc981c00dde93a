//! `commgate check --runs K` through the binary on the mock backend: K benchmark runs per
//! workload, each written to its own result file, judged together as the current side; the
//! limits of `--runs`, and `--runs` with `--result` refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};

use serde_json::Value;

mod common;
use common::{commgate_in, root};

/// `commgate check ARGS` in `dir` with the repository's mock store, results under `dir/results`.
fn check(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = commgate_in(dir)
        .env("CI", "true")
        .args(["check", "--backend", "mock", "--comment", "never", "--results-dir", "results", "--baselines"])
        .arg(root().join("baselines"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

fn results(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir.join("results")) {
        Ok(entries) => entries.map(|e| e.expect("entry").path()).collect(),
        Err(_) => Vec::new(),
    };
    paths.sort();
    paths
}

#[test]
fn three_runs_are_written_and_judged_together() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (code, out, err) = check(tmp.path(), &["--runs", "3", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON report");
    assert_eq!(v["comparison"]["current_runs"], 3, "{out}");
    assert!(v["error"].is_null(), "{out}");
    let files = results(tmp.path());
    assert_eq!(files.len(), 3, "{files:?}");
    let names: Vec<String> = files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    let first = names.iter().find(|n| !n.contains(".run")).expect("the first run's file");
    let stem = first.strip_suffix(".json").expect("json");
    for k in [2, 3] {
        assert!(names.contains(&format!("{stem}.run{k}.json")), "{names:?}");
    }
    for f in &files {
        let r: Value = serde_json::from_str(&std::fs::read_to_string(f).expect("read")).expect("result");
        assert_eq!(r["workload"]["id"], "par-overlap-allreduce-matmul");
    }
    assert_eq!(err.matches("benchmark result in ").count(), 3, "{err}");
    assert!(err.contains("run 3 of 3"), "{err}");
    // The report shows the first run.
    assert_eq!(v["bench"]["created_at"], {
        let r: Value =
            serde_json::from_str(&std::fs::read_to_string(tmp.path().join("results").join(first)).unwrap()).unwrap();
        r["created_at"].clone()
    });
}

#[test]
fn one_run_is_the_default() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (code, out, err) = check(tmp.path(), &["--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON report");
    assert_eq!(v["comparison"]["current_runs"], 1);
    assert_eq!(results(tmp.path()).len(), 1);
}

#[test]
fn runs_outside_their_limits_are_refused_naming_the_flag() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for bad in ["0", "21"] {
        let (code, out, err) = check(tmp.path(), &["--runs", bad]);
        assert_eq!(code, 2, "{bad}: {out}");
        assert!(err.contains(&format!("--runs {bad}")), "{err}");
        assert!(err.contains("1 to 20"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    assert!(results(tmp.path()).is_empty(), "nothing ran");
    std::fs::write(tmp.path().join("commgate.toml"), "[check]\nruns = 25\n").expect("settings");
    let (code, _, err) = check(tmp.path(), &[]);
    assert_eq!(code, 2);
    assert!(err.contains("check.runs = 25"), "{err}");
}

#[test]
fn runs_with_result_files_is_a_usage_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let same = root().join("tests/fixtures/compare/current-same.json");
    let out = commgate_in(tmp.path()).args(["check", "--runs", "2", "--result"]).arg(&same).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--runs 2 with --result"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
