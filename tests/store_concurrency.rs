//! The baseline store through the binary: parallel `baseline update`s lose no run and leave
//! nothing behind, while a reader sees only whole files; the same result twice is stored once; temporaries of a killed update are
//! cleaned; a store whose runs mix workloads is refused (exit 2, naming the run) by `check`,
//! `compare` and `baseline update`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use predicates::prelude::*;
use serde_json::Value;

mod common;
use common::{command_in, commgate, root};

const SAME: &str = "tests/fixtures/compare/current-same.json";
const STORE: &str = "tests/fixtures/compare/baselines/SIM-MOCK/par-overlap-allreduce-matmul.json";
/// Where a result of the fixtures' profile and workload is stored under a store directory.
const STORE_FILE: &str = "SIM-MOCK/par-overlap-allreduce-matmul.json";

/// The binary in the repository root, as a `std::process::Command` (spawned in parallel).
fn command() -> std::process::Command {
    command_in(&root())
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("JSON")
}

/// The fixture result, made another run by its creation time (part of the run's identity), with
/// its first 12 repeats only: a store of 80 runs stays small, so the test is quick.
fn distinct_result(dir: &Path, n: usize) -> PathBuf {
    let mut v = json(&root().join(SAME));
    v["created_at"] = format!("2026-12-01T{:02}:{:02}:00Z", n / 60, n % 60).into();
    v["workload"]["repeats"] = 12.into();
    for row in v["rows"].as_array_mut().expect("rows") {
        row["samples_ms"].as_array_mut().expect("samples").truncate(12);
    }
    v["run_label"] = format!("run-{n}").into();
    let path = dir.join(format!("result-{n}.json"));
    std::fs::write(&path, v.to_string()).expect("write");
    path
}

/// Every path under `dir`, relative to it.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("ls") {
            let path = entry.expect("entry").path();
            out.push(path.strip_prefix(dir).expect("under dir").display().to_string());
            if path.is_dir() {
                todo.push(path);
            }
        }
    }
    out.sort();
    out
}

/// "… now holds N runs (added run …" → N.
fn runs_reported(stderr: &str) -> usize {
    let (_, rest) = stderr.split_once(" now holds ").unwrap_or_else(|| panic!("no update message: {stderr}"));
    rest.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no count: {stderr}"))
}

#[test]
fn eight_parallel_updates_times_ten_lose_no_run_and_leave_nothing_behind() {
    const PROCESSES: usize = 8;
    const TRIALS: usize = 10;
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("baselines");
    // A reader, as `check` or `compare` would be, takes no lock: every version of the file it
    // sees must be whole, and none may hold fewer runs than one it saw before.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (file, stop) = (store.join(STORE_FILE), Arc::clone(&stop));
        std::thread::spawn(move || {
            let (mut reads, mut most) = (0usize, 0usize);
            while !stop.load(Ordering::Relaxed) {
                let Ok(text) = std::fs::read_to_string(&file) else { continue };
                let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("a torn read: {e}"));
                let runs = v["runs"].as_array().expect("runs").len();
                assert!(runs >= most, "{runs} runs after {most}");
                (reads, most) = (reads + 1, runs);
                // Leave the two cores of a CI runner to the writers.
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            reads
        })
    };
    let mut reported = Vec::new();
    for trial in 0..TRIALS {
        let results: Vec<PathBuf> =
            (0..PROCESSES).map(|p| distinct_result(tmp.path(), trial * PROCESSES + p)).collect();
        // All eight start before any is waited for.
        let children: Vec<_> = results
            .iter()
            .map(|from| {
                command()
                    .args(["baseline", "update", "--keep", "100", "--from"])
                    .arg(from)
                    .arg("--baselines")
                    .arg(&store)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawns")
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().expect("waits");
            let stderr = String::from_utf8(out.stderr).expect("utf-8");
            assert_eq!(out.status.code(), Some(0), "trial {trial}: {stderr}");
            reported.push(runs_reported(&stderr));
        }
        let runs = json(&store.join(STORE_FILE))["runs"].as_array().expect("runs").clone();
        let labels: BTreeSet<String> =
            runs.iter().map(|r| r["run_label"].as_str().expect("label").to_string()).collect();
        let expected: BTreeSet<String> = (0..(trial + 1) * PROCESSES).map(|n| format!("run-{n}")).collect();
        assert_eq!(runs.len(), expected.len(), "trial {trial}: a run lost or stored twice");
        assert_eq!(labels, expected, "trial {trial}");
    }
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().expect("the reader saw only whole files") > 0, "the reader read");
    // Each update saw the store its predecessor wrote: the counts they reported are 1..=80.
    reported.sort_unstable();
    assert_eq!(reported, (1..=PROCESSES * TRIALS).collect::<Vec<_>>());
    assert_eq!(tree(&store), ["SIM-MOCK", STORE_FILE], "no temporary or lock file in the store");
}

#[test]
fn the_same_result_twice_is_stored_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("baselines");
    let update =
        || commgate().args(["baseline", "update", "--from", SAME, "--baselines"]).arg(&store).output().expect("runs");
    let first = update();
    assert_eq!(first.status.code(), Some(0));
    let first = String::from_utf8(first.stderr).expect("utf-8");
    let (_, id) = first.split_once("(added run ").unwrap_or_else(|| panic!("{first}"));
    let id = &id[..12];
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{first}");
    assert!(first.contains(", created 2026-11-30T00:00:00Z)"), "{first}");
    let before = std::fs::read(store.join(STORE_FILE)).expect("store");

    let second = update();
    assert_eq!(second.status.code(), Some(0), "a retried update succeeds");
    let second = String::from_utf8(second.stderr).expect("utf-8");
    assert!(
        second
            .contains(&format!("already holds this run (run id {id}, created 2026-11-30T00:00:00Z); nothing changed")),
        "{second}"
    );
    assert_eq!(std::fs::read(store.join(STORE_FILE)).expect("store"), before, "the file is not rewritten");
    assert_eq!(json(&store.join(STORE_FILE))["runs"].as_array().expect("runs").len(), 1);
}

#[test]
fn temporaries_of_a_killed_update_are_removed_by_the_next() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("baselines");
    let profile = store.join("SIM-MOCK");
    std::fs::create_dir_all(&profile).expect("mkdir");
    // What a killed update leaves: this version's temporary, and an earlier version's.
    std::fs::write(profile.join(".commgate-tmp-4242-0badf00d-0"), "{\"schema_version\": 1, \"ru").expect("write");
    std::fs::write(profile.join(".par-overlap-allreduce-matmul.json.tmp-4242"), "{").expect("write");
    commgate()
        .args(["baseline", "update", "--from", SAME, "--baselines"])
        .arg(&store)
        .assert()
        .success()
        .stderr(predicate::str::contains("removed 2 temporary files left by an interrupted update"));
    assert_eq!(tree(&store), ["SIM-MOCK", STORE_FILE]);
}

/// A copy of the fixture store in which `runs[3]` ran on 4 GPUs instead of 2.
fn mixed_store(dir: &Path) -> PathBuf {
    let mut v = json(&root().join(STORE));
    v["runs"][3]["workload"]["world_size"] = 4.into();
    let path = dir.join("baselines").join(STORE_FILE);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, v.to_string()).expect("write");
    path
}

const MIXED: &str = "`runs[3].workload.world_size` is 4 but the newest run's (`runs[9]`) is 2";

#[test]
fn a_store_mixing_world_sizes_exits_2_naming_the_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = mixed_store(tmp.path());
    let shown = path.display().to_string();
    let named = || predicate::str::contains(shown.as_str()).and(predicate::str::contains(MIXED));

    commgate().args(["compare", "--current", SAME, "--baseline"]).arg(&path).assert().code(2).stderr(named());
    commgate()
        .args(["check", "--result", SAME, "--comment", "never", "--baselines"])
        .arg(tmp.path().join("baselines"))
        .assert()
        .code(2)
        .stderr(named());
    let before = std::fs::read(&path).expect("store");
    let from = distinct_result(tmp.path(), 1);
    commgate()
        .args(["baseline", "update", "--from"])
        .arg(&from)
        .arg("--baselines")
        .arg(tmp.path().join("baselines"))
        .assert()
        .code(2)
        .stderr(named());
    assert_eq!(std::fs::read(&path).expect("store"), before, "a refused update changes nothing");
}
