//! `bench --nccl-algo/--nccl-proto` through the binary: the pinned pair is the run's
//! `software.nccl_choice` and is recorded in `software.nccl_env` (on mock and cpu, where it has
//! no effect, too); NCCL's names in any case, anything else refused; and the debug settings
//! commgate sets to read NCCL's own choice never show up as the user's.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::Path;

use serde_json::Value;

mod common;
use common::commgate_in;

/// `commgate bench ARGS` in `dir`, results under `dir/r`; the one result file written.
fn bench(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Value {
    let out = commgate_in(dir)
        .env("CI", "true")
        .envs(env.iter().copied())
        .args(["bench", "--results-dir", "r"])
        .args(args)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let written = String::from_utf8(out.stdout).expect("utf-8");
    let path = dir.join(written.trim());
    let v = serde_json::from_str(&std::fs::read_to_string(&path).expect("result")).expect("JSON");
    std::fs::remove_file(path).expect("rm");
    v
}

#[test]
fn a_pinned_pair_is_the_runs_choice_and_is_recorded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let v = bench(tmp.path(), &["--backend", "mock", "--nccl-algo", "nvlstree", "--nccl-proto", "SIMPLE"], &[]);
    assert_eq!(v["software"]["nccl_choice"], "NVLSTree/Simple");
    assert_eq!(v["software"]["nccl_env"]["NCCL_ALGO"], "NVLSTree");
    assert_eq!(v["software"]["nccl_env"]["NCCL_PROTO"], "Simple");
    // One of the two: recorded, but no choice on mock (NCCL picks the other).
    let v = bench(tmp.path(), &["--backend", "mock", "--nccl-algo", "Ring"], &[("NCCL_PROTO", "LL")]);
    assert!(v["software"].get("nccl_choice").is_none(), "{}", v["software"]);
    assert_eq!(v["software"]["nccl_env"]["NCCL_ALGO"], "Ring");
    assert_eq!(v["software"]["nccl_env"]["NCCL_PROTO"], "LL", "the user's own");
    // The settings file's keys, any case.
    std::fs::write(tmp.path().join("commgate.toml"), "[bench]\nnccl_algo = \"tree\"\nnccl_proto = \"ll128\"\n")
        .expect("settings");
    let v = bench(tmp.path(), &["--backend", "mock"], &[]);
    assert_eq!(v["software"]["nccl_choice"], "Tree/LL128");
}

#[test]
fn names_nccl_does_not_know_are_refused_naming_the_flag() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (flag, bad) in [("--nccl-algo", "Butterfly"), ("--nccl-proto", "LL256")] {
        let out = commgate_in(tmp.path()).args(["bench", "--backend", "mock", flag, bad]).output().expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(&format!("{flag} {bad}")) && err.contains("use one of"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    std::fs::write(tmp.path().join("commgate.toml"), "[bench]\nnccl_algo = \"fast\"\n").expect("settings");
    let out = commgate_in(tmp.path()).args(["bench", "--backend", "mock"]).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("commgate.toml:2:") && err.contains("not an NCCL algorithm"), "{err}");
}

#[test]
fn the_tuning_logs_settings_are_not_recorded_and_its_directory_goes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let scratch = tempfile::tempdir().expect("tempdir");
    let tmpdir = scratch.path().to_str().expect("utf-8");
    // auto: CUDA where there is a GPU (the log is read), else the CPU backend (it is not); either
    // way commgate's own NCCL_DEBUG* are not the user's.
    let small = ["--backend", "auto", "--repeats", "20", "--warmup", "0", "--payload-elements", "1024"];
    let v = bench(tmp.path(), &[&small[..], &["--compute-dim", "16"]].concat(), &[("TMPDIR", tmpdir)]);
    let env = &v["software"]["nccl_env"];
    for k in ["NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"] {
        assert!(env.get(k).is_none(), "{k} recorded: {env}");
    }
    let left: Vec<_> = std::fs::read_dir(scratch.path()).expect("tmp").collect();
    assert!(left.is_empty(), "the log's directory is removed: {left:?}");
    // The user's own debug settings are theirs, and recorded.
    let v = bench(
        tmp.path(),
        &[&small[..], &["--compute-dim", "16"]].concat(),
        &[("TMPDIR", tmpdir), ("NCCL_DEBUG", "WARN")],
    );
    assert_eq!(v["software"]["nccl_env"]["NCCL_DEBUG"], "WARN");
}

#[test]
fn bench_env_variables_are_the_runs_and_are_recorded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        tmp.path().join("commgate.toml"),
        "[bench]\npayload_elements = 4096\ncompute_dim = 32\nrepeats = 20\nwarmup = 1\n\n\
         [bench.env]\nNCCL_BUFFSIZE = \"65536\"\nNCCL_MIN_NCHANNELS = \"4\"\n",
    )
    .expect("settings");
    // The file's value wins over the job's own.
    let v = bench(tmp.path(), &["--backend", "cpu"], &[("NCCL_BUFFSIZE", "4194304")]);
    assert_eq!(v["software"]["nccl_env"]["NCCL_BUFFSIZE"], "65536");
    assert_eq!(v["software"]["nccl_env"]["NCCL_MIN_NCHANNELS"], "4");
    let v = bench(tmp.path(), &["--backend", "mock"], &[]);
    assert_eq!(v["software"]["nccl_env"]["NCCL_BUFFSIZE"], "65536", "recorded on mock too");
}

#[test]
fn bench_env_refuses_what_is_not_an_nccl_setting() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (table, expected) in [
        ("LD_PRELOAD = \"/tmp/x.so\"", "commgate.toml: bench.env.LD_PRELOAD: only NCCL's own variables go here"),
        ("NCCL_ALGO = \"Ring\"", "commgate.toml: bench.env.NCCL_ALGO: pin the algorithm and protocol with nccl_algo"),
        ("NCCL_BUFFSIZE = \"12\"", "commgate.toml: bench.env.NCCL_BUFFSIZE: give a byte count from 4096 to 1073741824"),
        ("NCCL_DEBUG = \"INFO\\nx\"", "commgate.toml: bench.env.NCCL_DEBUG: give one line"),
    ] {
        std::fs::write(tmp.path().join("commgate.toml"), format!("[bench.env]\n{table}\n")).expect("settings");
        let out = commgate_in(tmp.path()).args(["bench", "--backend", "mock"]).output().expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(expected), "{table}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    assert!(!tmp.path().join("benchmarks").exists(), "nothing ran");
}
