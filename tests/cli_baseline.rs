//! `commgate baseline list` and `baseline show` through the binary: exit codes (0 listed, 2 for a
//! missing directory, a corrupt store, an unknown or ambiguous workload), and `baseline update`
//! keeping the summary of an evicted run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};

use serde_json::Value;

mod common;
use common::{commgate, root};

const STORE: &str = "tests/fixtures/compare/baselines/SIM-MOCK/par-overlap-allreduce-matmul.json";
const WORKLOAD: &str = "par-overlap-allreduce-matmul";

fn run(args: &[&str]) -> (i32, String, String) {
    let out = commgate().args(args).output().expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

/// A store directory holding the fixture store under `profiles`.
fn store_dir(profiles: &[&str]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    for p in profiles {
        let dir = tmp.path().join(p);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let text = std::fs::read_to_string(root().join(STORE)).expect("fixture");
        std::fs::write(dir.join(format!("{WORKLOAD}.json")), text.replace("SIM-MOCK", p)).expect("write");
    }
    tmp
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn list_shows_every_store_and_exits_0() {
    let tmp = store_dir(&["SIM-MOCK"]);
    let (code, out, err) = run(&["baseline", "list", "--baselines", s(tmp.path()), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["stores"][0]["profile"], "SIM-MOCK");
    assert_eq!(v["stores"][0]["workload"], WORKLOAD);
    assert_eq!(v["stores"][0]["stats"]["runs"], 10);
    let (code, out, _) = run(&["baseline", "list", "--baselines", s(tmp.path())]);
    assert_eq!(code, 0);
    assert!(out.contains("SIM-MOCK  par-overlap-allreduce-matmul  10 (10 judged)"), "{out}");
}

#[test]
fn list_of_an_empty_dir_is_0_and_of_a_missing_dir_is_2() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (code, out, _) = run(&["baseline", "list", "--baselines", s(tmp.path())]);
    assert_eq!(code, 0);
    assert_eq!(out, format!("No baseline stores in {}.\n", tmp.path().display()));
    let missing = tmp.path().join("nope");
    let (code, out, err) = run(&["baseline", "list", "--baselines", s(&missing)]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("does not exist; pass the baseline store directory with --baselines DIR"), "{err}");
}

#[test]
fn a_corrupt_store_is_listed_then_exits_2() {
    let tmp = store_dir(&["SIM-MOCK"]);
    std::fs::write(tmp.path().join("SIM-MOCK/broken.json"), "{ not json").expect("write");
    let (code, out, err) = run(&["baseline", "list", "--baselines", s(tmp.path())]);
    assert_eq!(code, 2);
    assert!(out.contains("broken") && out.contains("is not valid JSON"), "{out}");
    assert!(out.contains(WORKLOAD), "the good store is listed too: {out}");
    assert!(err.contains("1 store(s) could not be read") && err.contains("broken.json"), "{err}");
}

#[test]
fn show_resolves_a_workload_or_a_file() {
    let tmp = store_dir(&["SIM-MOCK"]);
    let (code, out, err) = run(&["baseline", "show", WORKLOAD, "--baselines", s(tmp.path()), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(10));
    assert_eq!(v["runs"][0]["judged"], true);
    let (code, out, _) = run(&["baseline", "show", STORE, "--format", "markdown"]);
    assert_eq!(code, 0);
    assert!(out.contains("xychart-beta"), "{out}");
    let (code, out, _) = run(&["baseline", "show", STORE]);
    assert_eq!(code, 0);
    assert!(out.contains("overlap      "), "{out}");
}

#[test]
fn show_of_an_unknown_or_ambiguous_workload_exits_2() {
    let tmp = store_dir(&["A", "B"]);
    let (code, _, err) = run(&["baseline", "show", "nope", "--baselines", s(tmp.path())]);
    assert_eq!(code, 2);
    assert!(err.contains("holds no store of workload \"nope\" in any profile (profiles: A, B)"), "{err}");
    let (code, _, err) = run(&["baseline", "show", WORKLOAD, "--baselines", s(tmp.path())]);
    assert_eq!(code, 2);
    assert!(err.contains("in several profiles (profiles: A, B); pass --profile NAME"), "{err}");
    let (code, _, err) = run(&["baseline", "show", WORKLOAD, "--baselines", s(tmp.path()), "--profile", "B"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&["baseline", "show", WORKLOAD, "--baselines", s(&tmp.path().join("x"))]);
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn update_keeps_the_summary_of_an_evicted_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("baselines");
    let results: Vec<PathBuf> =
        ["previous.json", "current-same.json"].iter().map(|n| root().join("tests/fixtures/compare").join(n)).collect();
    for r in &results {
        let (code, _, err) =
            run(&["baseline", "update", "--from", s(r), "--baselines", s(&dir), "--keep", "1", "--history-keep", "5"]);
        assert_eq!(code, 0, "{err}");
    }
    let store = std::fs::read_dir(
        dir.join(std::fs::read_dir(&dir).expect("dir").next().expect("profile").expect("entry").file_name()),
    )
    .expect("profile dir")
    .next()
    .expect("store")
    .expect("entry")
    .path();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&store).expect("store")).expect("JSON");
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["history"].as_array().map(Vec::len), Some(1));
    assert!(v["history"][0].get("samples_ms").is_none());
    let (code, out, err) = run(&["baseline", "show", s(&store), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["runs"][0]["judged"], false);
    assert_eq!(v["runs"][1]["judged"], true);
    // Adding the evicted run back changes nothing: it is held, as a summary.
    let (code, _, err) = run(&["baseline", "update", "--from", s(&results[0]), "--baselines", s(&dir), "--keep", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("already holds this run"), "{err}");
}
