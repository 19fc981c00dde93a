//! What a new user meets on the first day, through the binary: settings found from a
//! subdirectory, `baseline update --traces` filed under the settings' profile, `check` refusing
//! bad inputs before it runs the benchmark, `--base` outside a repository, the commit a run
//! records by hand, and a stored run judged again.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{commgate_in as commgate, git, root};

fn run(dir: &Path, args: &[&str]) -> Output {
    commgate(dir).args(args).output().expect("runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A scaffolded repository (profile DAY-ONE) in `tmp/repo`.
fn repo(tmp: &Path) -> PathBuf {
    let dir = tmp.join("repo");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let out = run(&dir, &["init", "--profile", "DAY-ONE", "--backend", "cpu"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    dir
}

fn results(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir.join("benchmarks/results")) else { return Vec::new() };
    entries.map(|e| e.expect("entry").path()).filter(|p| p.extension().is_some_and(|e| e == "json")).collect()
}

#[test]
fn settings_are_found_from_a_subdirectory_and_their_paths_stay_the_repositorys() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = repo(tmp.path());
    std::fs::create_dir_all(dir.join(".git")).expect("a repository root");
    let sub = dir.join("docs/deep");
    std::fs::create_dir_all(&sub).expect("mkdir");
    let out = run(&sub, &["check", "--backend", "mock", "--repeats", "20", "--quiet", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let store = report["baseline"]["path"].as_str().expect("a store path");
    assert!(store.ends_with("repo/baselines/DAY-ONE/par-overlap-allreduce-matmul.json"), "{store}");
    assert_eq!(results(&dir).len(), 1, "the result went to the repository's benchmarks/results");
    assert!(!sub.join("benchmarks").exists());
    // Above the repository's root nothing is looked for.
    let outside = tmp.path().join("elsewhere");
    std::fs::create_dir_all(outside.join(".git")).expect("mkdir");
    std::fs::write(tmp.path().join("commgate.toml"), "[bench]\nrepeats = 0\n").expect("write");
    let out = run(&outside, &["baseline", "list", "--format", "json"]);
    assert!(!stderr(&out).contains("repeats"), "{}", stderr(&out));
}

#[test]
fn baseline_update_traces_files_them_under_the_settings_profile() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = repo(tmp.path());
    let traces = root().join("tests/fixtures/hand_checked");
    let out = run(&dir, &["bench", "--backend", "mock", "--repeats", "20", "--quiet", "-o", "run.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(run(&dir, &["baseline", "update", "--from", "run.json"]).status.code(), Some(0));
    let out = commgate(&dir).args(["baseline", "update", "--traces"]).arg(&traces).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("baselines/DAY-ONE/par-overlap-allreduce-matmul.json now holds 1 trace run"),
        "{}",
        stderr(&out)
    );
    // Without a profile anywhere, the line says both ways to give one.
    let bare = tmp.path().join("bare");
    std::fs::create_dir_all(&bare).expect("mkdir");
    let out = commgate(&bare).args(["baseline", "update", "--traces"]).arg(&traces).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("pass --environment-profile NAME, or set environment_profile under [bench]"));
}

#[test]
fn check_refuses_bad_inputs_before_it_runs_the_benchmark() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = repo(tmp.path());
    std::fs::create_dir_all(dir.join("empty")).expect("mkdir");
    let store = dir.join("baselines/DAY-ONE/par-overlap-allreduce-matmul.json");
    let check = |extra: &[&str], expected: &str| {
        let mut args = vec!["check", "--backend", "mock", "--repeats", "20", "--quiet"];
        args.extend(extra);
        let out = run(&dir, &args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", stderr(&out));
        let text = format!("{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
        assert!(text.contains(expected), "{extra:?}: {text}");
        assert!(results(&dir).is_empty(), "{extra:?}: the benchmark did not run");
    };
    check(&["--baselines", "baselnes"], "baselnes does not exist");
    check(&["--traces", "empty"], "empty: holds no trace files");
    check(&["--traces", "missing-dir"], "missing-dir: does not exist");
    std::fs::write(&store, "{ not json").expect("write");
    check(&[], "par-overlap-allreduce-matmul.json");
}

#[test]
fn base_outside_a_repository_says_there_is_no_repository() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = run(tmp.path(), &["check", "--base", "main", "--backend", "mock"]);
    assert_eq!(out.status.code(), Some(2));
    let text = stderr(&out);
    assert!(text.contains("is not in a git repository, so `--base main` has no commit"), "{text}");
    assert!(!text.contains("this clone"), "{text}");
}

#[test]
fn a_run_recorded_by_hand_keeps_its_commit_and_a_stored_run_judged_again_is_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = repo(tmp.path());
    git(&dir, &["init", "-q"]);
    git(&dir, &["add", "."]);
    git(&dir, &["commit", "-q", "-m", "scaffold"]);
    let head = git(&dir, &["rev-parse", "HEAD"]);
    for seed in ["2", "3", "4"] {
        let file = format!("run-{seed}.json");
        let out = run(&dir, &["bench", "--backend", "mock", "--repeats", "20", "--seed", seed, "--quiet", "-o", &file]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(run(&dir, &["baseline", "update", "--from", &file]).status.code(), Some(0));
    }
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run-2.json")).expect("read")).expect("json");
    assert_eq!(result["provenance"]["commit"], head.as_str());
    let out = run(&dir, &["check", "--result", "run-2.json"]);
    assert_ne!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(text.contains("the run being judged is already in the baseline"), "{text}");
    assert!(text.contains("(1 of its 3 runs): it is compared with itself"), "{text}");
    // Three runs of one day: the trend chart tells them apart.
    let out = run(&dir, &["baseline", "show", "par-overlap-allreduce-matmul", "--format", "markdown"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    let axis = md.lines().find(|l| l.trim_start().starts_with("x-axis")).expect("a trend chart");
    let labels: Vec<&str> = axis.split('"').skip(1).step_by(2).collect();
    assert_eq!(labels.len(), 3, "{axis}");
    assert!(labels[0] != labels[1] && labels[1] != labels[2] && labels[0] != labels[2], "{axis}");
    let json = run(&dir, &["baseline", "show", "par-overlap-allreduce-matmul", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(v["schema_version"], 1);
}

#[test]
fn bench_says_what_it_measured_and_a_sweep_reads_like_nccl_tests() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = run(tmp.path(), &["bench", "--backend", "mock", "--repeats", "20", "--quiet", "-o", "one.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one.json\n", "stdout stays the result paths");
    let text = stderr(&out);
    for expected in ["commgate:   schedule      median ms  P95 ms", "commgate:   overlap ", "commgate:   busbw "] {
        assert!(text.contains(expected), "{expected:?} in {text}");
    }
    let out =
        run(tmp.path(), &["bench", "--backend", "mock", "--repeats", "20", "--quiet", "--payload-sizes", "4MiB,1MiB"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stderr(&out);
    let sweep: Vec<&str> = text.lines().skip_while(|l| !l.contains("size (B)")).collect();
    assert!(sweep.len() >= 4, "{text}");
    assert!(sweep[0].contains("time (us)  algbw (GB/s)  busbw (GB/s)"), "{text}");
    assert!(
        sweep[2].contains(" 1048576  all_reduce") && sweep[3].contains(" 4194304  all_reduce"),
        "ascending: {text}"
    );
}
