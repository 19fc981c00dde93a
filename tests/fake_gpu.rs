//! The CUDA backend end to end, through the binary, on commgate's emulated GPUs (`crates/fakegpu`,
//! linked by `scripts/fake-gpu.sh` as libcuda, libcublas and libnccl): one process driving two
//! GPUs, two processes through the rendezvous, `check` against a store, and every injected fault
//! ending the run with exit 2 and one line naming it. Every run's ledger must show zero contract
//! violations, and a healthy run must leave no handle alive (no leak of a stream, an event, a
//! buffer, a cuBLAS handle or a communicator).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use commgate_fakegpu::contract::{read_ledger, VIOLATION};

/// The emulator's library directory, built once per test binary by the script CI and users run.
fn emulator() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| variant(""))
}

/// The directory of the emulator built with `features` (a variant that lacks an entry point).
fn variant(features: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(common::root().join("scripts/fake-gpu.sh"))
        .env("FAKEGPU_FEATURES", features)
        .output()
        .expect("run fake-gpu.sh");
    assert!(out.status.success(), "fake-gpu.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    let dir = PathBuf::from(String::from_utf8(out.stdout).expect("utf-8").trim());
    assert!(dir.join("libcuda.so.1").exists(), "{}", dir.display());
    dir
}

/// A small benchmark: the CUDA path, not speed, is under test (each test adds `--repeats`).
const SMALL: [&str; 9] =
    ["bench", "--backend", "cuda", "--payload-elements", "65536", "--compute-dim", "64", "--warmup", "2"];

/// `commgate ARGS` on the emulator in `dir`, its ledger at `dir/ledger-NAME`.
fn command(dir: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = common::command_in(dir);
    cmd.args(args)
        .env("LD_LIBRARY_PATH", emulator())
        .env("COMMGATE_FAKEGPU_LEDGER", dir.join(format!("ledger-{name}")))
        .env_remove("COMMGATE_FAKEGPU_FAULT");
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd
}

/// What the ledger of run `name` says: the handles left alive and the violations.
fn ledger(dir: &Path, name: &str) -> (Vec<(String, String)>, Vec<String>) {
    read_ledger(&std::fs::read_to_string(dir.join(format!("ledger-{name}"))).unwrap_or_default())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts run `name` broke no contract (stderr and ledger) and, when `healthy`, left nothing alive.
fn assert_clean(dir: &Path, name: &str, out: &Output, healthy: bool) {
    let stderr = text(&out.stderr);
    assert!(!stderr.contains(VIOLATION), "{name}: {stderr}");
    let (alive, violations) = ledger(dir, name);
    assert!(violations.is_empty(), "{name}: {violations:?}");
    if healthy {
        assert!(alive.is_empty(), "{name} left alive: {alive:?}\n{stderr}");
    }
}

fn the_result(dir: &Path) -> serde_json::Value {
    let results = dir.join("results");
    let file =
        std::fs::read_dir(&results).expect("results").map(|e| e.expect("entry").path()).next().expect("a result");
    serde_json::from_str(&std::fs::read_to_string(file).expect("read")).expect("json")
}

#[test]
fn one_process_drives_two_emulated_gpus_and_labels_the_run_emulated() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = command(dir.path(), "one", &SMALL, &[])
        .args(["--world-size", "2", "--repeats", "20", "--results-dir", "results"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_clean(dir.path(), "one", &out, true);
    let result = the_result(dir.path());
    assert_eq!(result["evidence_level"], "emulated");
    assert_eq!(result["workload"]["backend"], "cuda-emulated");
    assert_eq!(result["environment_profile"], "PAR-CUDA-EMULATED");
    assert_eq!(result["hardware"]["gpu_name"], commgate_core::result::EMULATED_GPU_NAME);
    assert_eq!(result["hardware"]["gpu_count"], 2);
    assert_eq!(result["workload"]["timing"], "gated", "the timing barrier held the streams");
    assert_eq!(result["rows"].as_array().map(Vec::len), Some(4));
    // NCCL's tuning log, written by the emulated NCCL 2.27, was read back.
    assert_eq!(result["software"]["nccl"], "2.27.3");
    assert_eq!(result["software"]["nccl_choice"], "Ring/Simple");
    assert!(text(&out.stderr).contains("emulator"), "the run says it ran on the emulator");
}

#[test]
fn every_nccl_version_the_tuning_log_knows_is_read_back() {
    for (version, choice) in [("2.18.5", None), ("2.21.5", Some("Ring/Simple")), ("2.23.4", Some("Ring/Simple"))] {
        let dir = tempfile::tempdir().expect("tmp");
        let out = command(dir.path(), "v", &SMALL, &[("COMMGATE_FAKEGPU_NCCL", version)])
            .args(["--world-size", "2", "--repeats", "20", "--results-dir", "results"])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(0), "{version}: {}", text(&out.stderr));
        assert_clean(dir.path(), "v", &out, true);
        let result = the_result(dir.path());
        assert_eq!(result["software"]["nccl"], version);
        assert_eq!(result["software"]["nccl_choice"].as_str(), choice, "{version}");
    }
}

/// A free loopback port for a rendezvous.
fn free_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port().to_string()
}

/// Rank `rank` of two, one process per GPU, as torchrun starts them.
fn rank(dir: &Path, rank: u32, port: &str, extra: &[&str]) -> Child {
    let r = rank.to_string();
    let env = [
        ("RANK", r.as_str()),
        ("LOCAL_RANK", r.as_str()),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", port),
    ];
    command(dir, &format!("rank{rank}"), &SMALL, &env)
        .args(["--results-dir", "results"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

#[test]
fn two_processes_join_through_the_rendezvous_and_end_cleanly() {
    let dir = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let ranks = [rank(dir.path(), 0, &port, &["--repeats", "20"]), rank(dir.path(), 1, &port, &["--repeats", "20"])];
    for (i, child) in ranks.into_iter().enumerate() {
        let out = child.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(0), "rank {i}: {}", text(&out.stderr));
        assert_clean(dir.path(), &format!("rank{i}"), &out, true);
    }
    let result = the_result(dir.path());
    assert_eq!(
        (result["workload"]["world_size"].as_u64(), result["evidence_level"].as_str()),
        (Some(2), Some("emulated"))
    );
}

#[test]
fn a_killed_peer_ends_the_survivor_at_once_through_the_asynchronous_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let long = ["--repeats", "100000"];
    let survivor = rank(dir.path(), 0, &port, &long);
    let mut victim = rank(dir.path(), 1, &port, &long);
    // The job forms and runs steps: the victim's ledger shows its communicator.
    let start = Instant::now();
    while !ledger(dir.path(), "rank1").0.iter().any(|(kind, _)| kind == "nccl-comm") {
        assert!(start.elapsed() < Duration::from_secs(60), "the job never formed");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    victim.kill().expect("kill");
    let killed_at = Instant::now();
    let out = survivor.wait_with_output().expect("wait");
    let _ = victim.wait();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("ncclCommGetAsyncError") && stderr.contains("ncclRemoteError"), "{stderr}");
    // The asynchronous error, not the 60 s step deadline, ended it.
    assert!(killed_at.elapsed() < Duration::from_secs(30), "{:?}", killed_at.elapsed());
    assert_clean(dir.path(), "rank0", &out, false);
}

/// Each fault the emulator injects ends the run with exit 2 and one `commgate: error:` line that
/// names it, without a contract violation on the way out.
#[test]
fn every_injected_fault_ends_the_run_with_exit_2_and_one_line_naming_it() {
    let cases: [(&str, &str, &str); 7] = [
        ("COMMGATE_FAKEGPU_FAULT", "stub-library", "CUDA_ERROR_STUB_LIBRARY"),
        ("COMMGATE_FAKEGPU_FAULT", "no-device", "no CUDA device visible"),
        ("COMMGATE_FAKEGPU_DEVICES", "1", "1 CUDA device(s) visible"),
        ("COMMGATE_FAKEGPU_CUDA", "12.4", "needs 12.8 or newer"),
        ("COMMGATE_FAKEGPU_FAULT", "alloc-fails=3", "CUDA_ERROR_OUT_OF_MEMORY"),
        ("COMMGATE_FAKEGPU_FAULT", "nccl-init-fails", "ncclCommInitAll"),
        ("COMMGATE_FAKEGPU_FAULT", "async-error-after=6", "ncclCommGetAsyncError"),
    ];
    for (i, (variable, value, named)) in cases.into_iter().enumerate() {
        let dir = tempfile::tempdir().expect("tmp");
        let name = format!("fault{i}");
        let start = Instant::now();
        let out = command(dir.path(), &name, &SMALL, &[(variable, value)])
            .args(["--world-size", "2", "--repeats", "20", "--results-dir", "results"])
            .output()
            .expect("run");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("commgate: error:")).collect();
        assert_eq!(errors.len(), 1, "{value}: {stderr}");
        assert!(errors[0].contains(named), "{value}: {}", errors[0]);
        assert!(start.elapsed() < Duration::from_secs(30), "{value} took {:?}", start.elapsed());
        assert_clean(dir.path(), &name, &out, false);
    }
}

/// A rank that never finishes its collective and never reports an error: the step deadline (60 s)
/// gives the run up, the communicators are aborted, and the process ends.
#[test]
fn a_hung_rank_is_given_up_at_the_step_deadline() {
    let dir = tempfile::tempdir().expect("tmp");
    let start = Instant::now();
    let out = command(dir.path(), "hang", &SMALL, &[("COMMGATE_FAKEGPU_FAULT", "hang-rank=1@5")])
        .args(["--world-size", "2", "--repeats", "20", "--results-dir", "results"])
        .output()
        .expect("run");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("did not finish within 60 s"), "{stderr}");
    let took = start.elapsed();
    assert!(took >= Duration::from_secs(55) && took < Duration::from_secs(150), "{took:?}");
    assert_clean(dir.path(), "hang", &out, false);
}

/// An emulated run filed under a GPU's profile by hand is refused by that profile's store: the
/// store holds a GPU's run (an emulated one relabelled, as a GPU would have written it).
fn refused_by_a_gpu_store(dir: &Path, stored: &[String]) {
    let relabel = |from: &str, to: &str, gpu: bool| {
        let mut run: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(from).expect("read")).expect("json");
        run["environment_profile"] = "PAR-CUDA-MECHANISM".into();
        if gpu {
            run["workload"]["backend"] = "cuda".into();
            run["evidence_level"] = "gpu_nccl".into();
        }
        std::fs::write(dir.join(to), run.to_string()).expect("write");
    };
    relabel(&stored[0], "gpu.json", true);
    relabel(&stored[1], "emulated.json", false);
    let update = |file: &str| {
        let mut cmd = common::command_in(dir);
        cmd.args(["baseline", "update", "--baselines", "gpu-store", "--from", file]).output().expect("update")
    };
    assert_eq!(update("gpu.json").status.code(), Some(0));
    let out = update("emulated.json");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`workload.backend`: cuda there, cuda-emulated here"), "{stderr}");
}

/// `check --backend cuda` against a store of emulated runs: the gate runs end to end and files
/// them under their own profile, never a GPU's.
#[test]
fn check_compares_against_a_store_of_emulated_runs() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut args: Vec<&str> = SMALL.to_vec();
    args.extend(["--world-size", "2", "--repeats", "100"]);
    for i in 0..3 {
        let name = format!("base{i}");
        let out = command(dir.path(), &name, &args, &[]).args(["--results-dir", "stored"]).output().expect("run");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_clean(dir.path(), &name, &out, true);
    }
    let stored: Vec<String> = std::fs::read_dir(dir.path().join("stored"))
        .expect("stored")
        .map(|e| e.expect("entry").path().display().to_string())
        .collect();
    let mut update = common::command_in(dir.path());
    update.args(["baseline", "update", "--baselines", "baselines", "--from"]).args(&stored);
    let out = update.output().expect("update");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(dir.path().join("baselines/PAR-CUDA-EMULATED/par-overlap-allreduce-matmul.json").is_file());
    refused_by_a_gpu_store(dir.path(), &stored);
    let mut check: Vec<&str> = args.clone();
    check[0] = "check";
    let out = command(dir.path(), "check", &check, &[])
        .args(["--baselines", "baselines", "--baselines-from-head", "--results-dir", "current"])
        .output()
        .expect("check");
    let stdout = text(&out.stdout);
    // Unchanged code: never a confirmed regression's exit 1 or a could-not-evaluate's exit 2.
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.starts_with("Verdict: "), "{stdout}");
    assert!(stdout.contains("PAR-CUDA-EMULATED") && stdout.contains("comm_only median"), "{stdout}");
    assert_clean(dir.path(), "check", &out, true);
}

/// The comm-only median of a two-GPU run on a machine whose all-reduce lasts 10 ms, with `fault`.
fn comm_only_ms(fault: &str) -> f64 {
    let dir = tempfile::tempdir().expect("tmp");
    // 64 Ki bf16 elements, 2·½·128 KiB at 13.1 MB/s: 10 ms.
    let env = [("COMMGATE_FAKEGPU_BUSBW_GBPS", "0.0131"), ("COMMGATE_FAKEGPU_FAULT", fault)];
    let out = command(dir.path(), "slow", &SMALL, &env)
        .args(["--world-size", "2", "--repeats", "20", "--results-dir", "results"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{fault}: {}", text(&out.stderr));
    assert_clean(dir.path(), "slow", &out, true);
    let result = the_result(dir.path());
    let rows = result["rows"].as_array().expect("rows");
    let row = rows.iter().find(|r| r["schedule"] == "comm_only").expect("comm_only");
    row["median_max_rank_ms"].as_f64().expect("median")
}

/// A slower rank holds every rank's collective: three times as slow a rank makes the comm-only
/// step about three times as long (20 ms more than 10 ms; asserted at twice, far above noise).
#[test]
fn a_slower_rank_slows_every_collective() {
    let healthy = comm_only_ms("");
    let slowed = comm_only_ms("slow-rank=1:3");
    assert!(healthy >= 9.0, "{healthy} ms");
    assert!(slowed > 2.0 * healthy, "{slowed} ms against {healthy} ms");
}

/// Every entry point the backend checks for before its first call is one the emulator exports,
/// and the variants lack exactly theirs: the emulator answers for the backend's real call list.
#[test]
fn the_emulator_exports_every_entry_point_the_backend_checks_for() {
    use commgate_bench::cuda::{BARRIER_SYMBOL, CUBLAS_SYMBOLS, DRIVER_SYMBOLS, NCCL_SYMBOLS};
    let exported = |dir: &Path, name: &str| -> bool {
        // SAFETY: loads the emulator (a Rust cdylib with no initialisers of its own) and only looks
        // symbols up; nothing is called.
        #[allow(unsafe_code)]
        unsafe {
            let library = libloading::Library::new(dir.join("libcommgate_fakegpu.so")).expect("load");
            library.get::<unsafe extern "C" fn()>(name.as_bytes()).is_ok()
        }
    };
    let all: Vec<&str> =
        DRIVER_SYMBOLS.iter().chain(&CUBLAS_SYMBOLS).chain(&NCCL_SYMBOLS).copied().chain([BARRIER_SYMBOL]).collect();
    for name in &all {
        assert!(exported(emulator(), name), "the emulator lacks {name}");
    }
    let (no_wait, no_finalize) = (variant("no-wait-value"), variant("no-finalize"));
    for name in &all {
        assert_eq!(exported(&no_wait, name), *name != BARRIER_SYMBOL, "{name}");
        assert_eq!(exported(&no_finalize, name), *name != "ncclCommFinalize", "{name}");
    }
}

/// A driver without `cuStreamWaitValue32_v2`: cudarc would panic on the barrier's first wait;
/// the backend asks first, times the run ungated and says why.
#[test]
fn a_driver_without_the_stream_wait_is_timed_ungated_with_the_reason() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = command(dir.path(), "nowait", &SMALL, &[])
        .env("LD_LIBRARY_PATH", variant("no-wait-value"))
        .args(["--world-size", "2", "--repeats", "20", "--results-dir", "results"])
        .output()
        .expect("run");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("not gated (the driver lacks cuStreamWaitValue32_v2)"), "{stderr}");
    assert_eq!(the_result(dir.path())["workload"]["timing"], "ungated");
    assert_clean(dir.path(), "nowait", &out, true);
}

/// NCCL before 2.14 has no `ncclCommFinalize`: cudarc would panic at the teardown, after the
/// whole run; the backend refuses at the start, naming what the library lacks and the fix.
#[test]
fn nccl_without_finalize_is_refused_at_the_start_naming_what_it_lacks() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = command(dir.path(), "nofinal", &SMALL, &[])
        .env("LD_LIBRARY_PATH", variant("no-finalize"))
        .args(["--world-size", "2", "--repeats", "20", "--results-dir", "results"])
        .output()
        .expect("run");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("commgate: error:")).collect();
    let expected = "commgate: error: libnccl lacks ncclCommFinalize: commgate needs NCCL 2.14 or newer: pip install \
                    nvidia-nccl-cu13 (or -cu12), or use --backend cpu";
    assert_eq!(errors, [expected], "{stderr}");
    let (alive, violations) = ledger(dir.path(), "nofinal");
    assert!(violations.is_empty() && !alive.iter().any(|(kind, _)| kind == "nccl-comm"), "{alive:?}");
}
