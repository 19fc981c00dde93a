//! `baseline remove` through the binary: a benchmark run out by its id, a trace run out by name
//! and position, a store that a duplicated trace run had made unreadable mended without an
//! editor, and every refusal exit 2 with the file untouched.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::Path;
use std::process::Output;

use serde_json::Value;

mod common;
use common::commgate_in as commgate;

const STORE: &str = "baselines/PAR-MOCK/par-overlap-allreduce-matmul.json";

fn run(dir: &Path, args: &[&str]) -> Output {
    commgate(dir).args(args).output().expect("runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// A store of two mock runs (seeds 1 and 2) and one trace run of the example traces; the ids.
fn store(dir: &Path) -> Vec<String> {
    let traces = common::root().join("examples/traces");
    for seed in ["1", "2"] {
        let name = format!("run-{seed}.json");
        let out = run(dir, &["bench", "--backend", "mock", "--seed", seed, "--quiet", "-o", &name]);
        assert!(out.status.success(), "{}", stderr(&out));
        let mut args = vec!["baseline", "update", "--from", &name];
        let traces = traces.to_string_lossy().to_string();
        if seed == "1" {
            args.extend(["--traces", &traces]);
        }
        let out = run(dir, &args);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let file: Value = serde_json::from_str(&std::fs::read_to_string(dir.join(STORE)).expect("store")).expect("json");
    let show = run(dir, &["baseline", "show", "par-overlap-allreduce-matmul", "--format", "json"]);
    let shown: Value = serde_json::from_slice(&show.stdout).expect("json");
    let ids: Vec<String> =
        shown["runs"].as_array().expect("runs").iter().map(|r| r["run_id"].as_str().expect("id").into()).collect();
    assert_eq!(ids.len(), 2, "{file}");
    ids
}

#[test]
fn a_run_goes_by_its_id_and_a_trace_run_by_its_position() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ids = store(tmp.path());
    // `baseline show` prints the id `remove` takes.
    let show = run(tmp.path(), &["baseline", "show", "par-overlap-allreduce-matmul"]);
    assert!(String::from_utf8_lossy(&show.stdout).contains(&ids[0][..12]), "{}", String::from_utf8_lossy(&show.stdout));
    let out = run(tmp.path(), &["baseline", "remove", "par-overlap-allreduce-matmul", "--run", &ids[0][..12]]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&format!("removed run {}", &ids[0][..12])), "{err}");
    assert!(err.contains("now holds 1 run and 1 trace run"), "{err}");
    let out = run(tmp.path(), &["baseline", "remove", STORE, "--trace-run", "default:1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("now holds 1 run and 0 trace runs"), "{}", stderr(&out));
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join(STORE)).expect("store")).expect("json");
    assert!(file.get("traces").is_none(), "a name left with no runs goes: {file}");
    assert_eq!(run(tmp.path(), &["baseline", "list"]).status.code(), Some(0));
}

#[test]
fn a_store_broken_by_a_duplicated_trace_run_is_mended() {
    let tmp = tempfile::tempdir().expect("tempdir");
    store(tmp.path());
    // What an old retried update (or a hand edit) left: the same trace run twice.
    let path = tmp.path().join(STORE);
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("store")).expect("json");
    let first = file["traces"]["default"][0].clone();
    file["traces"]["default"].as_array_mut().expect("list").push(first);
    std::fs::write(&path, serde_json::to_string_pretty(&file).expect("json")).expect("write");
    let list = run(tmp.path(), &["baseline", "list"]);
    assert_eq!(list.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&list.stdout).contains("is the same trace run as"));
    let out = run(tmp.path(), &["baseline", "remove", "par-overlap-allreduce-matmul", "--trace-run", "default:2"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(run(tmp.path(), &["baseline", "list"]).status.code(), Some(0));
}

#[test]
fn what_cannot_be_removed_is_refused_and_nothing_is_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ids = store(tmp.path());
    let path = tmp.path().join(STORE);
    let before = std::fs::read(&path).expect("store");
    let cases: [(&[&str], &str); 5] = [
        (&["--run", "abc"], "give at least 12 hex digits"),
        (&["--run", "0123456789abcdef"], "holds no run with id 0123456789abcdef"),
        (&["--trace-run", "default:5"], "holds 1 trace run \"default\": there is no run 5"),
        (&["--trace-run", "nightly:1"], "holds no trace runs \"nightly\" (it holds \"default\")"),
        (&["--trace-run", "default"], "--trace-run `default`: give NAME:N"),
    ];
    for (extra, said) in cases {
        let mut args = vec!["baseline", "remove", "par-overlap-allreduce-matmul"];
        args.extend_from_slice(extra);
        let out = run(tmp.path(), &args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(said), "{extra:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
    // One good and one bad id: the good one is not taken out either.
    let out = run(tmp.path(), &["baseline", "remove", STORE, "--run", &ids[0][..16], "--run", "ffffffffffffffff"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(std::fs::read(&path).expect("store"), before, "nothing written");
}
