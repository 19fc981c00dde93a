//! Hardware vs software through the binary: a run on the same machine with a new NCCL (or
//! driver, CUDA, `NCCL_*` setting) is judged like any change and the change is named; a run on
//! another GPU model asks for a baseline of its own; a forged fingerprint changes nothing; a
//! version-1 store (software inside `hardware`) still reads.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};

use serde_json::Value;

mod common;
use common::{commgate, root};

const STORE_DIR: &str = "tests/fixtures/compare/baselines";
const STORE: &str = "tests/fixtures/compare/baselines/SIM-MOCK/par-overlap-allreduce-matmul.json";
const SAME: &str = "tests/fixtures/compare/current-same.json";
const SLOWER: &str = "tests/fixtures/compare/current-slower.json";

/// `source` (a fixture result) with `edit` applied, written under `dir`.
fn edited(dir: &Path, name: &str, source: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let text = std::fs::read_to_string(root().join(source)).expect("fixture");
    let mut v: Value = serde_json::from_str(&text).expect("json");
    edit(&mut v);
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).expect("write");
    p
}

/// The fixture store runs had no NCCL (version 1 files: software inside `hardware`); these
/// give every baseline run NCCL 2.21.5 and the current run `nccl`.
fn store_with_nccl(dir: &Path) -> PathBuf {
    let p = edited(dir, "store.json", STORE, |v| {
        for run in v["runs"].as_array_mut().expect("runs") {
            run["hardware"]["nccl"] = "2.21.5".into();
        }
    });
    let store = dir.join("baselines/SIM-MOCK");
    std::fs::create_dir_all(&store).expect("dir");
    let target = store.join("par-overlap-allreduce-matmul.json");
    std::fs::rename(&p, &target).expect("move");
    target
}

fn with_nccl(dir: &Path, name: &str, source: &str, nccl: &str) -> PathBuf {
    edited(dir, name, source, |v| v["hardware"]["nccl"] = nccl.into())
}

fn json_out(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn a_software_only_change_that_is_8_percent_slower_blocks_and_is_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store_with_nccl(tmp.path());
    let slower = with_nccl(tmp.path(), "slower.json", SLOWER, "2.23.4");
    let out = commgate()
        .args(["compare", "--format", "json", "--baseline"])
        .arg(&store)
        .arg("--current")
        .arg(&slower)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json_out(&out);
    assert_eq!(v["verdict"], "tune");
    assert_eq!(v["baseline"]["fingerprint_match"], true);
    assert_eq!(v["baseline"]["software_changes"][0]["component"], "NCCL");
    let reasons = v["reasons"].to_string();
    assert!(reasons.contains("NCCL 2.21.5 → 2.23.4"), "{reasons}");

    // The gate says the same, next to its verdict.
    let out = commgate()
        .args(["check", "--format", "text", "--result"])
        .arg(&slower)
        .arg("--baselines")
        .arg(tmp.path().join("baselines"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Verdict: tune: overlap step 8.1 % slower (95 % CI 7.4–8.9 %) — blocking"), "{text}");
    assert!(text.contains("software changed since the baseline: NCCL 2.21.5 → 2.23.4"), "{text}");
}

#[test]
fn an_unchanged_run_with_new_software_is_accepted_and_the_change_still_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store_with_nccl(tmp.path());
    let same = with_nccl(tmp.path(), "same.json", SAME, "2.23.4");
    let out = commgate()
        .args(["compare", "--format", "json", "--baseline"])
        .arg(&store)
        .arg("--current")
        .arg(&same)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    let v = json_out(&out);
    assert_eq!(v["verdict"], "accept");
    assert!(v["reasons"].to_string().contains("NCCL 2.21.5 → 2.23.4"));
}

#[test]
fn another_gpu_model_asks_for_its_own_baseline_and_never_blocks() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let moved = edited(tmp.path(), "moved.json", SLOWER, |v| v["hardware"]["gpu_name"] = "NVIDIA H100".into());
    let out = commgate()
        .args(["check", "--format", "json", "--result"])
        .arg(&moved)
        .args(["--baselines", STORE_DIR])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    let v = json_out(&out);
    assert_eq!(v["verdict"], "collect_more_evidence");
    let reasons = v["reasons"].to_string();
    assert!(reasons.contains("GPU: simulated there, NVIDIA H100 here"), "{reasons}");
}

#[test]
fn a_forged_fingerprint_is_recomputed_and_changes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let forged = edited(tmp.path(), "forged.json", SLOWER, |v| v["hardware"]["fingerprint"] = "other-gpu".into());
    let out = commgate()
        .args(["compare", "--format", "json", "--baseline", STORE, "--current"])
        .arg(&forged)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "the regression is still judged");
    assert_eq!(json_out(&out)["baseline"]["fingerprint_match"], true);
}

#[test]
fn a_version_1_store_is_upgraded_on_the_next_update() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("baselines");
    std::fs::create_dir_all(dir.join("SIM-MOCK")).expect("dir");
    std::fs::copy(root().join(STORE), dir.join("SIM-MOCK/par-overlap-allreduce-matmul.json")).expect("copy");
    let new = edited(tmp.path(), "new.json", SAME, |v| v["run_label"] = "newest".into());
    commgate()
        .args(["baseline", "update", "--keep", "20", "--from"])
        .arg(&new)
        .arg("--baselines")
        .arg(&dir)
        .assert()
        .success();
    let text = std::fs::read_to_string(dir.join("SIM-MOCK/par-overlap-allreduce-matmul.json")).expect("store");
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["schema_version"], 2);
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 11);
    for run in runs {
        assert_eq!(run["schema_version"], 2);
        assert!(run["software"].is_object(), "{run}");
        assert!(run["hardware"].get("driver").is_none());
        assert_eq!(run["hardware"]["fingerprint"], runs[0]["hardware"]["fingerprint"]);
    }
}
