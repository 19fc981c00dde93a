//! Real nccl-tests output as people publish it (`tests/fixtures/nccl-tests-real/`, each file
//! verbatim under its licence: README and NOTICE there): job logs with a launcher's preamble,
//! the layouts before 2.13 (no `root`, an `error` column, `N/A`, `NCCL INFO` lines inside the
//! table, repeated 0-byte lines), programs without a `# Collective test starting:` line. Each is
//! read through the binary into a store named after its collective, never one shared by
//! collectives; the logs as launchers rewrite them read the same.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};

use serde_json::Value;

mod common;
use common::{commgate, root};

fn real(name: &str) -> PathBuf {
    root().join("tests/fixtures/nccl-tests-real").join(name)
}

/// `baseline update --from FILE` into `store`: the exit code and stderr.
fn store(store: &Path, file: &Path) -> (Option<i32>, String) {
    let out = commgate()
        .args(["baseline", "update", "--environment-profile", "REAL", "--baselines"])
        .arg(store)
        .arg("--from")
        .arg(file)
        .output()
        .expect("runs");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
}

/// The one run a store file holds.
fn stored(store: &Path, id: &str) -> Value {
    let text = std::fs::read_to_string(store.join("REAL").join(format!("{id}.json"))).expect("the store file");
    let v: Value = serde_json::from_str(&text).expect("json");
    v["runs"][0].clone()
}

#[test]
fn every_real_log_is_read_into_its_collectives_store() {
    let cases = [
        ("azureml_k80_allreduce_old.txt", "nccl-tests-all_reduce-4ranks", (5, 20)),
        ("cscs_gh200_n2_allreduce_cxi.txt", "nccl-tests-all_reduce-8ranks", (1, 20)),
        ("cscs_gh200_n2_sarus_allreduce.txt", "nccl-tests-all_reduce-2ranks", (1, 20)),
        ("gke_b200_n2_allgather.txt", "nccl-tests-unnamed-none-16ranks", (50, 100)),
        ("gke_h200_n2_allgather.txt", "nccl-tests-unnamed-none-2ranks", (50, 100)),
        ("gke_h200_n2_allreduce_ompi.txt", "nccl-tests-all_reduce-2ranks", (5, 20)),
        ("pkb_k80_n2_allreduce.txt", "nccl-tests-all_reduce-2ranks", (5, 1)),
        ("sb_a100_allgather.log", "nccl-tests-all_gather-8ranks", (5, 20)),
        ("sb_a100_allreduce.log", "nccl-tests-all_reduce-8ranks", (5, 20)),
        ("sb_a100_alltoall.log", "nccl-tests-alltoall-8ranks", (5, 20)),
        ("sb_a100_broadcast.log", "nccl-tests-broadcast-8ranks", (5, 20)),
        ("sb_a100_reducescatter.log", "nccl-tests-reduce_scatter-8ranks", (5, 20)),
    ];
    for (file, id, (warmup, repeats)) in cases {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (code, err) = store(tmp.path(), &real(file));
        assert_eq!(code, Some(0), "{file}: {err}");
        assert!(err.contains(&format!("{id}.json now holds 1 run")), "{file}: {err}");
        let run = stored(tmp.path(), id);
        let w = &run["workload"];
        assert_eq!((w["warmup"].as_u64(), w["repeats"].as_u64()), (Some(warmup), Some(repeats)), "{file}: {w}");
    }
}

/// The sizes below ranks × 4 bytes print as 0 again and again: the first is kept, the rest are
/// the same measurement, not a file edited by hand.
#[test]
fn repeated_zero_byte_lines_are_read_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (code, err) = store(tmp.path(), &real("sb_a100_allgather.log"));
    assert_eq!(code, Some(0), "{err}");
    let points =
        stored(tmp.path(), "nccl-tests-all_gather-8ranks")["sweep"]["points"].as_array().expect("points").clone();
    let zero = points.iter().filter(|p| p["size"] == 0).count();
    assert_eq!(zero, 2, "one 0-byte size, out of place and in place");
}

/// A log whose table was left out, and one log holding two runs: exit 2, one line saying what
/// was expected and how to go on.
#[test]
fn a_log_without_its_table_or_with_two_runs_says_so() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (code, err) = store(tmp.path(), &real("gke_b200_4w_allgather_elided.txt"));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no size line under `#  size  count  type …` column heads") && !err.contains("JSON"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let both = format!(
        "{}{}",
        std::fs::read_to_string(real("cscs_gh200_n2_allreduce_cxi.txt")).expect("read"),
        std::fs::read_to_string(real("cscs_gh200_n2_allreduce_nocxi.txt")).expect("read")
    );
    let path = tmp.path().join("two-runs.txt");
    std::fs::write(&path, both).expect("write");
    let (code, err) = store(tmp.path(), &path);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("holds more than one nccl-tests run") && err.contains("split the log"), "{err}");
}

/// The same real log as `mpirun --tag-output` and `srun --label` write it, and run by a program
/// built with a suffix (`all_reduce_perf_mpi`): the same store, the same points.
#[test]
fn logs_as_launchers_rewrite_them_read_the_same() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let original = std::fs::read_to_string(real("cscs_gh200_n2_allreduce_cxi.txt")).expect("read");
    let (code, err) = store(&tmp.path().join("plain"), &real("cscs_gh200_n2_allreduce_cxi.txt"));
    assert_eq!(code, Some(0), "{err}");
    let id = "nccl-tests-all_reduce-8ranks";
    let points = stored(&tmp.path().join("plain"), id)["sweep"]["points"].clone();
    let rewrites: [(&str, String); 3] = [
        ("tagged", original.lines().map(|l| format!("[1,0]<stdout>:{l}\n")).collect()),
        ("labelled", original.lines().map(|l| format!("0: {l}\n")).collect()),
        ("suffixed", original.replace("all_reduce_perf", "all_reduce_perf_mpi")),
    ];
    for (what, text) in rewrites {
        let path = tmp.path().join(format!("{what}.txt"));
        std::fs::write(&path, text).expect("write");
        let dir = tmp.path().join(what);
        let (code, err) = store(&dir, &path);
        assert_eq!(code, Some(0), "{what}: {err}");
        assert_eq!(stored(&dir, id)["sweep"]["points"], points, "{what}");
    }
}

/// nccl-tests output names no environment profile: `COMMGATE_ENVIRONMENT_PROFILE` gives it one
/// in `baseline update`, as in `check`.
#[test]
fn the_profile_variable_names_the_store_of_a_log() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = commgate()
        .env("COMMGATE_ENVIRONMENT_PROFILE", "A100-SXM")
        .args(["baseline", "update", "--baselines"])
        .arg(tmp.path())
        .arg("--from")
        .arg(real("sb_a100_allreduce.log"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(tmp.path().join("A100-SXM/nccl-tests-all_reduce-8ranks.json").is_file());
}

/// The same two GH200 nodes without and with their network plugin: each point's baseline bus
/// bandwidth is the one the baseline log printed, not one recomputed from the current run's
/// rounded figures.
#[test]
fn the_baseline_bus_bandwidth_is_the_baselines_own() {
    let out = commgate()
        .args(["compare", "--format", "json", "--current"])
        .arg(real("cscs_gh200_n2_allreduce_cxi.txt"))
        .arg("--baseline")
        .arg(real("cscs_gh200_n2_allreduce_nocxi.txt"))
        .output()
        .expect("runs");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let printed: Vec<(u64, f64)> = std::fs::read_to_string(real("cscs_gh200_n2_allreduce_nocxi.txt"))
        .expect("read")
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            Some((w.first()?.parse().ok()?, w.get(7)?.parse().ok()?))
        })
        .collect();
    let metrics = v["metrics"].as_array().expect("metrics");
    let mut checked = 0;
    for (size, busbw) in printed.into_iter().filter(|&(_, b)| b > 0.0) {
        let m = metrics
            .iter()
            .find(|m| m["point"]["size"] == size && m["point"]["placement"] == "out_of_place")
            .unwrap_or_else(|| panic!("{size}"));
        assert!((m["throughput"]["baseline"].as_f64().expect("busbw") - busbw).abs() < 1e-9, "{size}: {m}");
        checked += 1;
    }
    assert!(checked >= 15, "{checked}");
}

/// A real table pasted without its `#` lines (only its size lines, as issue threads quote it):
/// read by its lines' shape (no rank lines: unnamed, without a rank count); an older table's shape is
/// ambiguous without its heads and is refused saying so.
#[test]
fn a_table_pasted_without_its_heads_is_read_by_its_shape() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let body: String = std::fs::read_to_string(real("cscs_gh200_n2_allreduce_cxi.txt"))
        .expect("read")
        .lines()
        .filter(|l| l.split_whitespace().next().is_some_and(|w| w.parse::<u64>().is_ok()))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = tmp.path().join("pasted.txt");
    std::fs::write(&path, body).expect("write");
    let (code, err) = store(tmp.path(), &path);
    assert_eq!(code, Some(0), "{err}");
    // Without its `#  Rank` lines nothing says how many ranks ran: stored as what it shows.
    assert!(err.contains("nccl-tests-unnamed-sum.json now holds 1 run"), "{err}");
    let old: String = std::fs::read_to_string(real("sb_a100_allreduce.log"))
        .expect("read")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = tmp.path().join("old-pasted.txt");
    std::fs::write(&path, old).expect("write");
    let (code, err) = store(tmp.path(), &path);
    assert_eq!(code, Some(2), "{err}");
}
