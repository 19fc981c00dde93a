//! `commgate compare` and `commgate baseline update` through the binary: the three renderings,
//! exit codes (0 passed, 1 confirmed regression, 2 bad input), and every kind of bad file.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};

use predicates::prelude::*;
use serde_json::Value;

mod common;
use common::{commgate, root};

const STORE: &str = "tests/fixtures/compare/baselines/SIM-MOCK/par-overlap-allreduce-matmul.json";
const SAME: &str = "tests/fixtures/compare/current-same.json";
const SLOWER: &str = "tests/fixtures/compare/current-slower.json";
const PREVIOUS: &str = "tests/fixtures/compare/previous.json";

fn compare(baseline: &str, current: &str, extra: &[&str]) -> (i32, String, String) {
    let out =
        commgate().args(["compare", "--baseline", baseline, "--current", current]).args(extra).output().expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

#[test]
fn unchanged_run_is_accepted_with_exit_0() {
    let (code, out, _) = compare(STORE, SAME, &[]);
    assert_eq!(code, 0);
    insta::assert_snapshot!(out);
}

#[test]
fn slower_run_is_a_confirmed_regression_with_exit_1() {
    let (code, out, _) = compare(STORE, SLOWER, &["--format", "json"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["verdict"], "tune");
    assert_eq!(v["regression"], true);
    assert_eq!(v["baseline"]["runs"], 10);
    for key in ["row", "statistic", "baseline", "current", "ratio", "ci", "p_value", "state", "n_baseline", "n_current"]
    {
        assert!(v["metrics"][0].get(key).is_some(), "metric field {key}");
    }
    insta::assert_snapshot!(out);
}

#[test]
fn markdown_against_a_single_result_file() {
    // One earlier run never blocks on its own: the run-to-run spread is unknown.
    let (code, out, _) = compare(PREVIOUS, SLOWER, &["--format", "markdown"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("**commgate compare `collect_more_evidence`: cannot confirm yet: overlap step 8."),
        "{out}"
    );
    assert!(out.contains("with 1 baseline run the run-to-run spread is unknown"), "{out}");
    insta::assert_snapshot!(out);
}

#[test]
fn verdicts_are_reproducible_and_the_seed_is_a_setting() {
    let a = compare(STORE, SLOWER, &["--format", "json"]).1;
    let b = compare(STORE, SLOWER, &["--format", "json"]).1;
    assert_eq!(a, b);
    let (code, _, _) = compare(STORE, SLOWER, &["--seed", "7", "--resamples", "200"]);
    assert_eq!(code, 1);
}

/// Writes a copy of `src` with `edit` applied to its JSON.
fn edited(dir: &Path, name: &str, src: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(root().join(src)).expect("read")).expect("json");
    edit(&mut v);
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).expect("write");
    p
}

fn assert_bad(baseline: &Path, current: &Path, fragment: &str) {
    let out =
        commgate().args(["compare", "--baseline"]).arg(baseline).arg("--current").arg(current).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("commgate: error: "), "{stderr}");
    assert!(stderr.contains(fragment), "expected {fragment:?} in {stderr}");
}

#[test]
fn bad_result_files_exit_2_naming_file_and_field() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let store = root().join(STORE);
    let negative = edited(d, "negative.json", SAME, |v| v["rows"][3]["samples_ms"][4] = (-1.0).into());
    assert_bad(&store, &negative, "rows[3].samples_ms[4]");
    let nan = edited(d, "nan.json", SAME, |v| v["rows"][3]["samples_ms"][0] = "NaN".into());
    assert_bad(&store, &nan, "rows[3].samples_ms[0]");
    let empty = edited(d, "empty.json", SAME, |v| v["rows"][3]["samples_ms"] = Value::Array(vec![]));
    assert_bad(&store, &empty, "empty `samples_ms`");
    let missing = edited(d, "missing.json", SAME, |v| {
        v["rows"].as_array_mut().expect("rows").retain(|r| r["schedule"] != "serial")
    });
    assert_bad(&store, &missing, "no `serial` row");
    let future = edited(d, "future.json", SAME, |v| v["schema_version"] = 99.into());
    assert_bad(&store, &future, "`schema_version` is 99");
    let no_workload = edited(d, "noworkload.json", SAME, |v| {
        v.as_object_mut().expect("object").remove("workload");
    });
    assert_bad(&store, &no_workload, "workload");
    let zero_runs = edited(d, "zero.json", STORE, |v| v["runs"] = Value::Array(vec![]));
    assert_bad(&zero_runs, &root().join(SAME), "holds no runs");
    let truncated = d.join("cut.json");
    let text = std::fs::read_to_string(root().join(SAME)).expect("read");
    std::fs::write(&truncated, &text[..text.len() / 2]).expect("write");
    assert_bad(&store, &truncated, "cut.json");
    assert_bad(&store, &d.join("absent.json"), "does not exist");
}

#[test]
fn mismatched_workloads_exit_2() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let other = edited(tmp.path(), "other.json", SAME, |v| v["workload"]["payload_elements"] = 1024.into());
    assert_bad(&root().join(STORE), &other, "workload.payload_elements");
}

#[test]
fn other_hardware_asks_for_more_evidence_and_never_blocks() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let moved = edited(tmp.path(), "moved.json", SLOWER, |v| v["hardware"]["gpu_name"] = "other-gpu".into());
    let (code, out, _) = compare(STORE, moved.to_str().expect("utf-8 path"), &["--format", "json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["verdict"], "collect_more_evidence");
    assert_eq!(v["regression"], false);
}

#[test]
fn baseline_update_builds_the_store_and_refuses_bad_runs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("baselines");
    for from in [PREVIOUS, SAME, SLOWER] {
        commgate()
            .args(["baseline", "update", "--from", from, "--keep", "2", "--baselines"])
            .arg(&dir)
            .assert()
            .success()
            .stderr(predicate::str::contains("par-overlap-allreduce-matmul.json now holds"));
    }
    let file = dir.join("SIM-MOCK/par-overlap-allreduce-matmul.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("store")).expect("json");
    assert_eq!(v["runs"].as_array().expect("runs").len(), 2);
    assert_eq!(v["schema_version"], 2);
    let leftovers: Vec<_> = std::fs::read_dir(file.parent().expect("dir")).expect("list").collect();
    assert_eq!(leftovers.len(), 1, "no temporary files left");

    let failed = edited(tmp.path(), "failed.json", SAME, |v| {
        v["failure"] = serde_json::json!({"kind": "timeout", "message": "rank 1 hung", "rank": 1})
    });
    assert_update_refused(&failed, &dir, "failed run");
    let other = edited(tmp.path(), "other.json", SAME, |v| v["workload"]["dtype"] = "float32".into());
    assert_update_refused(&other, &dir, "workload.dtype");
}

/// `baseline update --from <from>` into the store `dir` exits 2 and says `fragment`.
fn assert_update_refused(from: &Path, dir: &Path, fragment: &str) {
    commgate()
        .args(["baseline", "update", "--from"])
        .arg(from)
        .arg("--baselines")
        .arg(dir)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(fragment));
}

#[test]
fn forged_or_dead_rows_exit_2_for_compare_and_check() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    // A faked, faster overlap row in front of the real one: judged on neither.
    let duplicated = edited(d, "dup.json", SLOWER, |v| {
        let rows = v["rows"].as_array_mut().expect("rows");
        let mut fake = rows.iter().find(|r| r["schedule"] == "overlap").expect("overlap").clone();
        fake["samples_ms"] = Value::Array(vec![0.5.into(); 120]);
        rows.insert(0, fake);
    });
    let zeros = edited(d, "zeros.json", SLOWER, |v| {
        for row in v["rows"].as_array_mut().expect("rows") {
            row["samples_ms"] = Value::Array(vec![0.into(); 120]);
        }
    });
    let frozen = edited(d, "frozen.json", SLOWER, |v| {
        v["workload"]["backend"] = "cuda".into();
        v["rows"][3]["samples_ms"] = Value::Array(vec![0.9.into(); 120]);
    });
    let store = root().join(STORE);
    for (file, fragment) in [
        (&duplicated, "`rows[4]` repeats the `overlap` row of `rows[0]`"),
        (&zeros, "`rows[0].samples_ms[0]` (comm_only) is 0"),
        (&frozen, "holds 120 identical step times"),
    ] {
        assert_bad(&store, file, fragment);
        let out = commgate()
            .args(["check", "--baselines", "tests/fixtures/compare/baselines", "--result"])
            .arg(file)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(fragment), "expected {fragment:?} in {stderr}");
    }
}

/// `cargo test --test cli_compare -- --ignored` runs it; `result::tests` checks the cap in memory.
#[test]
#[ignore = "writes and parses a 10M-step file: about 15 s in a debug build"]
fn a_row_over_the_sample_cap_is_refused_naming_file_and_row() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let marked = edited(tmp.path(), "marked.json", SAME, |v| v["rows"][3]["samples_ms"] = "CAP".into());
    // Written as text: 10 000 001 samples as a serde_json::Value would take gigabytes.
    let samples = vec!["1"; commgate_core::result::MAX_SAMPLES_PER_ROW + 1].join(",");
    let text = std::fs::read_to_string(&marked).expect("read").replace("\"CAP\"", &format!("[{samples}]"));
    let huge = tmp.path().join("huge.json");
    std::fs::write(&huge, text).expect("write");
    assert_bad(&root().join(STORE), &huge, "huge.json");
    assert_bad(&root().join(STORE), &huge, "`rows[3].samples_ms` (overlap) holds 10000001 step times");
}

/// A copy of the unchanged run with one row's steps (and its quantile fields) times `factor`.
fn one_row_slower(dir: &Path, schedule: &str, factor: f64) -> PathBuf {
    edited(dir, &format!("{schedule}-slower.json"), SAME, |v| {
        let rows = v["rows"].as_array_mut().expect("rows");
        let row = rows.iter_mut().find(|r| r["schedule"] == schedule).expect("row");
        for key in ["median_max_rank_ms", "p95_max_rank_ms"] {
            row[key] = (row[key].as_f64().expect("number") * factor).into();
        }
        for s in row["samples_ms"].as_array_mut().expect("samples") {
            *s = (s.as_f64().expect("number") * factor).into();
        }
    })
}

#[test]
fn the_reason_names_the_phase_that_moved() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (schedule, cause, says) in [
        (
            "comm_only",
            "communication",
            "compute_only median unchanged → the collective got slower (NCCL, network, topology)",
        ),
        ("compute_only", "compute", "→ the GEMM got slower (cuBLAS, clocks, power)"),
        ("overlap", "overlap", "compute_only median unchanged → the two streams overlap less"),
    ] {
        let current = one_row_slower(tmp.path(), schedule, 1.08);
        let current = current.to_str().expect("utf-8");
        let (code, out, err) = compare(STORE, current, &["--format", "json"]);
        assert_eq!(code, 1, "{schedule}: {out}{err}");
        let v: Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(v["cause"], cause, "{schedule}: {out}");
        let first = v["reasons"][0].as_str().expect("a reason");
        assert!(first.contains(says), "{schedule}: {first}");
        let (code, text, _) = compare(STORE, current, &[]);
        assert_eq!(code, 1);
        assert!(text.contains(says), "{schedule}: {text}");
    }
    // busbw is the comm_only median shown as a rate: a drop, with the median's own p-value.
    let current = one_row_slower(tmp.path(), "comm_only", 1.08);
    let (_, out, _) = compare(STORE, current.to_str().expect("utf-8"), &["--format", "json"]);
    let v: Value = serde_json::from_str(&out).expect("JSON");
    let comm = v["metrics"].as_array().expect("metrics").iter().find(|m| m["row"] == "comm_only").expect("comm_only");
    assert_eq!(comm["throughput"]["kind"], "busbw_gbps");
    assert!(comm["throughput"]["ratio"].as_f64().expect("ratio") < 0.95, "{comm}");
    assert!(v["reasons"][0].as_str().expect("reason").starts_with("comm_only median +7.9 %, busbw −7.3 %"), "{out}");
}

#[test]
fn markdown_names_the_collective_and_shows_busbw() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let current = one_row_slower(tmp.path(), "comm_only", 1.08);
    let (code, out, _) = compare(STORE, current.to_str().expect("utf-8"), &["--format", "markdown"]);
    assert_eq!(code, 1);
    assert!(out.contains("| busbw \\(same test\\) | "), "{out}");
    insta::assert_snapshot!(out);
}
