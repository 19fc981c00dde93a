//! Named workloads through the binary: `bench --payload-sizes` writes one result per size with
//! distinct ids, `baseline update` stores each in its own file (all or nothing), `[workloads]`
//! tables run in turn, and every bad declaration (an entry that is not a size, two workloads with
//! one id, an unknown key, `--output` with several workloads) exits 2 with one line.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

mod common;
use common::commgate_in as commgate;

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("file")).expect("JSON")
}

/// The one `commgate: error:` line of a run that exited 2.
fn refused(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("commgate: error: ")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    errors[0].trim_start_matches("commgate: error: ").to_string()
}

const QUICK: [&str; 6] = ["--backend", "mock", "--repeats", "100", "--warmup", "0"];

/// Runs `bench` with `extra` and returns the result files it printed on stdout.
fn bench(dir: &Path, extra: &[&str]) -> Vec<PathBuf> {
    let out = commgate(dir).arg("bench").args(QUICK).args(extra).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| dir.join(l)).collect()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned())).collect())
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn payload_sizes_write_one_result_per_size_and_update_stores_each_in_its_own_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let written = bench(tmp.path(), &["--payload-sizes", "1Mi,64Mi", "--results-dir", "out"]);
    assert_eq!(written.len(), 2, "{written:?}");
    let ids: Vec<String> =
        written.iter().map(|p| read(p)["workload"]["id"].as_str().expect("id").to_string()).collect();
    assert_eq!(ids, ["allreduce-bf16-1MiB-mm2048", "allreduce-bf16-64MiB-mm2048"]);
    for (path, id) in written.iter().zip(&ids) {
        assert!(path.starts_with(tmp.path().join("out")), "{}", path.display());
        let name = path.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(name.contains(&format!("_{id}_default")), "the file name carries the id: {name}");
    }
    assert_eq!(read(&written[1])["workload"]["payload_bytes_per_rank"], 64 << 20);

    let mut update = commgate(tmp.path());
    update.args(["baseline", "update", "--baselines", "store", "--from"]).args(&written);
    let out = update.output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        files_in(&tmp.path().join("store/PAR-MOCK")),
        ["allreduce-bf16-1MiB-mm2048.json", "allreduce-bf16-64MiB-mm2048.json"]
    );
    for id in &ids {
        let store = read(&tmp.path().join(format!("store/PAR-MOCK/{id}.json")));
        assert_eq!(store["workload_id"], id.as_str());
        assert_eq!(store["runs"].as_array().expect("runs").len(), 1);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("now holds 1 run").count(), 2, "{stderr}");
}

#[test]
fn an_update_of_several_results_is_all_or_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let written = bench(tmp.path(), &["--payload-sizes", "2Ki,4Ki"]);
    // A result of the first workload that measured something else under the same id.
    let mut other = read(&written[0]);
    other["workload"]["compute_dim"] = 64.into();
    other["run_label"] = "other".into();
    let other_path = tmp.path().join("other.json");
    std::fs::write(&other_path, other.to_string()).expect("write");
    let mut update = commgate(tmp.path());
    update.args(["baseline", "update", "--baselines", "store", "--from"]).args(&written).arg(&other_path);
    let line = refused(&update.output().expect("runs"));
    assert!(line.contains("measures a different workload"), "{line}");
    assert!(!tmp.path().join("store/PAR-MOCK").exists(), "nothing was written: {:?}", files_in(tmp.path()));
    // A missing file among them: refused before the store is touched.
    let mut update = commgate(tmp.path());
    update.args(["baseline", "update", "--baselines", "store", "--from"]).args(&written).arg("missing.json");
    let line = refused(&update.output().expect("runs"));
    assert!(line.starts_with("missing.json: "), "{line}");
    assert!(!tmp.path().join("store/PAR-MOCK").exists());
    // --traces goes into one baseline file only.
    let mut update = commgate(tmp.path());
    update.args(["baseline", "update", "--traces", "t", "--from"]).args(&written);
    assert!(refused(&update.output().expect("runs")).starts_with("baseline update --traces with 2 --from files"));
}

#[test]
fn workload_tables_run_in_turn_and_the_default_keeps_its_legacy_id() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        tmp.path().join("commgate.toml"),
        "[bench]\nresults_dir = \"r\"\n\n[workloads.small]\npayload_elements = 1024\n\n\
         [workloads.wide]\nid = \"wide-f32\"\ndtype = \"float32\"\ncompute_dim = 64\n",
    )
    .expect("write");
    let written = bench(tmp.path(), &[]);
    let ids: Vec<Value> = written.iter().map(|p| read(p)["workload"]["id"].clone()).collect();
    assert_eq!(ids, ["allreduce-bf16-2KiB-mm2048", "wide-f32"]);
    assert_eq!(read(&written[1])["workload"]["dtype"], "float32");
    // `--workload` runs one of them.
    let one = bench(tmp.path(), &["--workload", "small"]);
    assert_eq!(one.len(), 1);
    assert_eq!(read(&one[0])["workload"]["id"], "allreduce-bf16-2KiB-mm2048");

    // Without tables: the legacy id, or the one `--workload` gives.
    let plain = tempfile::tempdir().expect("tempdir");
    let default = bench(plain.path(), &[]);
    assert_eq!(read(&default[0])["workload"]["id"], "par-overlap-allreduce-matmul");
    let named = bench(plain.path(), &["--workload", "nightly", "--output", "n.json"]);
    assert_eq!(named, [plain.path().join("n.json")]);
    assert_eq!(read(&named[0])["workload"]["id"], "nightly");
}

#[test]
fn bad_declarations_exit_2_with_one_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str]| {
        let out = commgate(tmp.path()).arg("bench").args(QUICK).args(args).output().expect("runs");
        assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
        refused(&out)
    };
    assert!(run(&["--payload-sizes", "1Mi,1.5Mi"]).starts_with("--payload-sizes entry 1.5Mi: not a size"));
    assert!(run(&["--payload-sizes", "1Mi,,2Mi"]).starts_with("--payload-sizes entry : empty"));
    assert!(run(&["--payload-sizes", "3", "--dtype", "float32"])
        .starts_with("--payload-sizes entry 3: 3 bytes is not a whole number of float32 elements"));
    assert!(run(&["--payload-sizes", "1Mi,2Mi", "--output", "x.json"])
        .starts_with("--output x.json names one result file, but 2 workloads will run"));
    assert!(run(&["--workload", ".hidden"]).starts_with("--workload .hidden: starts with '.'"));
    assert!(run(&["--payload-sizes", "80Gi"]).starts_with("--payload-sizes entry 80Gi: too large"));

    std::fs::write(
        tmp.path().join("dup.toml"),
        "[workloads.a]\npayload_elements = 1024\n\n[workloads.b]\nid = \"allreduce-bf16-2KiB-mm2048\"\n\
         payload_elements = 4096\n",
    )
    .expect("write");
    let line = run(&["--config", "dup.toml"]);
    assert_eq!(
        line,
        "[workloads.a] and [workloads.b] both have the workload id \"allreduce-bf16-2KiB-mm2048\"; their results \
         would share one baseline file: give one of them another `id`, or change what it measures"
    );
    std::fs::write(tmp.path().join("typo.toml"), "[workloads.a]\npayload_elements = 1024\n  repeat = 100\n")
        .expect("write");
    let line = run(&["--config", "typo.toml"]);
    assert!(line.starts_with("typo.toml:3:3: unknown key `repeat`; expected one of id, collective, "), "{line}");
    std::fs::write(tmp.path().join("big.toml"), "[workloads.a]\npayload_elements = 9223372036854775807\n")
        .expect("write");
    let line = run(&["--config", "big.toml"]);
    assert!(
        line.starts_with("big.toml:2:1: [workloads.a] payload_elements = 9223372036854775807: at 2 bytes"),
        "{line}"
    );
    assert!(!tmp.path().join("benchmarks").exists(), "nothing was written");
}
