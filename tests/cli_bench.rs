//! `commgate bench` through the binary: the mock and CPU backends, the result file, dry runs,
//! failures and timeouts, a two-process launch through the launcher's environment, a clean
//! refusal of `--backend cuda` on a machine without a GPU or with a misspelt timing-barrier setting,
//! parameters outside their limits refused before any work, and intruders on the rendezvous port
//! dropped while the real ranks complete the run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

mod common;
use common::{command_in, commgate_in as commgate};

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("result file")).expect("JSON")
}

fn one_error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("commgate: error: ")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    errors[0].to_string()
}

const SMALL_MOCK: [&str; 8] = ["--backend", "mock", "--repeats", "120", "--warmup", "2", "--seed", "7"];

#[test]
fn mock_run_writes_a_complete_deterministic_result() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = (tmp.path().join("a.json"), tmp.path().join("b.json"));
    for out in [&a, &b] {
        commgate(tmp.path()).arg("bench").args(SMALL_MOCK).arg("--output").arg(out).assert().success();
    }
    let (va, vb) = (read(&a), read(&b));
    assert_eq!(va["rows"], vb["rows"], "same seed, same samples");
    assert_eq!(va["schema_version"], 2);
    assert_eq!(va["software"]["commgate"], env!("CARGO_PKG_VERSION"));
    assert_eq!(va["hardware"]["nodes"], 1);
    assert!(va["hardware"].get("nccl").is_none(), "software is not hardware");
    assert_eq!(va["evidence_level"], "mock");
    assert_eq!(va["workload"]["backend"], "mock");
    assert_eq!(va["workload"]["world_size"], 2);
    assert_eq!(va["workload"]["payload_bytes_per_rank"], 8_388_608);
    let rows = va["rows"].as_array().expect("rows");
    let schedules: Vec<&str> = rows.iter().map(|r| r["schedule"].as_str().unwrap_or("")).collect();
    assert_eq!(schedules, ["comm_only", "compute_only", "serial", "overlap"]);
    for r in rows {
        assert_eq!(r["samples_ms"].as_array().expect("samples").len(), 120);
        assert_eq!(r["rank_mean_ms"].as_array().expect("rank means").len(), 2);
    }
    assert_eq!(va["decision"]["verdict"], "accept", "{}", va["decision"]["reason"]);
    assert!(va["metrics"]["busbw_gbps"].as_f64().expect("busbw") > 0.0);
    assert_eq!(va["hardware"]["fingerprint"].as_str().expect("fingerprint").len(), 16);
}

#[test]
fn default_file_names_never_overwrite_history() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for _ in 0..2 {
        commgate(tmp.path()).arg("bench").args(SMALL_MOCK).args(["--run-label", "nightly"]).assert().success();
    }
    let files: Vec<PathBuf> = std::fs::read_dir(tmp.path().join("benchmarks/results"))
        .expect("results dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files.iter().all(|f| f.to_string_lossy().contains("_par-overlap-allreduce-matmul_nightly")));
}

#[test]
fn dry_run_prints_the_plan_and_runs_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = commgate(tmp.path())
        .args(["bench", "--backend", "mock", "--dry-run", "--payload-elements", "1048576", "--compute-dim", "1024"])
        .output()
        .expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2097152 bytes per rank"), "{text}");
    assert!(text.contains("2.147e9 FLOPs"), "{text}");
    assert!(text.contains("comm_only, compute_only, serial"), "{text}");
    assert!(!tmp.path().join("benchmarks").exists());
}

#[test]
fn cpu_backend_measures_real_time() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("cpu.json");
    commgate(tmp.path())
        .args(["bench", "--backend", "cpu", "--payload-elements", "4096", "--compute-dim", "48"])
        .args(["--repeats", "20", "--warmup", "1", "--world-size", "2", "--output"])
        .arg(&file)
        .assert()
        .success();
    let v = read(&file);
    assert_eq!(v["evidence_level"], "cpu_mechanism");
    assert_eq!(v["workload"]["backend"], "cpu");
    assert_eq!(v["decision"]["verdict"], "collect_more_evidence", "20 repeats cannot give a P95");
    for r in v["rows"].as_array().expect("rows") {
        assert!(r["samples_ms"].as_array().expect("samples").iter().all(|x| x.as_f64().is_some_and(|t| t > 0.0)));
    }
}

#[test]
fn a_rank_that_dies_still_writes_the_failure_and_exits_2() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("failed.json");
    let out = commgate(tmp.path())
        .env("COMMGATE_MOCK_FAULT", "die:1")
        .arg("bench")
        .args(SMALL_MOCK)
        .arg("--output")
        .arg(&file)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(one_error_line(&out).contains("rank_died"));
    let v = read(&file);
    assert_eq!(v["failure"]["kind"], "rank_died");
    assert_eq!(v["failure"]["rank"], 1);
    assert_eq!(v["decision"]["verdict"], "collect_more_evidence");
}

#[test]
fn a_hung_collective_is_ended_by_the_timeout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("hung.json");
    let started = std::time::Instant::now();
    let out = commgate(tmp.path())
        .env("COMMGATE_MOCK_FAULT", "hang")
        .args(["bench", "--backend", "mock", "--timeout", "1", "--output"])
        .arg(&file)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(started.elapsed().as_secs() < 30);
    assert!(one_error_line(&out).contains("timeout"));
    assert_eq!(read(&file)["failure"]["kind"], "timeout");
}

#[test]
fn cuda_without_a_gpu_fails_cleanly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = commgate(tmp.path()).args(["bench", "--backend", "cuda", "--repeats", "20"]).output().expect("runs");
    if out.status.success() {
        eprintln!("NOTICE: a GPU is present; the no-GPU refusal was not exercised");
        return;
    }
    assert_eq!(out.status.code(), Some(2));
    let line = one_error_line(&out);
    // A machine with one GPU refuses the one-rank default instead.
    assert!(
        line.contains("--backend cpu") || line.contains("install") || line.contains("--allow-single-rank"),
        "{line}"
    );
    assert!(!tmp.path().join("benchmarks").exists(), "no result for a machine that cannot run");
}

#[test]
fn a_timing_barrier_setting_that_is_not_on_or_off_is_bad_input() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = commgate(tmp.path())
        .args(["bench", "--backend", "cuda", "--world-size", "2", "--repeats", "20"])
        .env("COMMGATE_CUDA_GATE", "maybe")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        one_error_line(&out),
        "commgate: error: COMMGATE_CUDA_GATE=\"maybe\" is not understood: set it to on or off, or unset it"
    );
    assert!(!tmp.path().join("benchmarks").exists(), "no result for a run that never started");
}

/// `commgate bench --backend cpu` as rank `rank` of a two-rank job launched through the
/// launcher's environment (rendezvous on 127.0.0.1:`port`), writing the result to `file`.
fn cpu_rank(dir: &std::path::Path, file: &std::path::Path, port: u16, rank: u32) -> std::process::Command {
    let mut cmd = command_in(dir);
    cmd.args(["bench", "--backend", "cpu", "--payload-elements", "2048", "--compute-dim", "32"])
        .args(["--repeats", "20", "--warmup", "1", "--timeout", "60", "--output"])
        .arg(file)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", "2")
        .env("LOCAL_RANK", rank.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string());
    cmd
}

#[test]
fn two_processes_rendezvous_through_the_launcher_environment() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let file = tmp.path().join("two.json");
    let spawn = |rank: u32| cpu_rank(tmp.path(), &file, port, rank).spawn().expect("spawns");
    let (r0, r1) = (spawn(0), spawn(1));
    let (o0, o1) = (r0.wait_with_output().expect("rank 0"), r1.wait_with_output().expect("rank 1"));
    assert!(o0.status.success(), "rank 0: {}", String::from_utf8_lossy(&o0.stderr));
    assert!(o1.status.success(), "rank 1: {}", String::from_utf8_lossy(&o1.stderr));
    let v = read(&file);
    assert_eq!(v["workload"]["world_size"], 2);
    assert_eq!(v["rows"][3]["rank_mean_ms"].as_array().expect("rank means").len(), 2);
}

/// Connects to rank 0's port once it listens (the probes are connect-and-close peers it drops).
fn connect_when_listening(port: u16) -> std::net::TcpStream {
    for _ in 0..600 {
        if let Ok(stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            stream.set_read_timeout(Some(std::time::Duration::from_secs(20))).expect("timeout");
            stream.set_write_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
            return stream;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("rank 0 never listened on port {port}");
}

/// Everything rank 0 sends on `stream` until it closes it.
fn until_closed(mut stream: std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    got
}

/// A frame: its body length (tag byte included) as a little-endian u64, the tag, the payload.
fn frame(tag: u8, payload: &[u8]) -> Vec<u8> {
    let mut bytes = (payload.len() as u64 + 1).to_le_bytes().to_vec();
    bytes.push(tag);
    bytes.extend_from_slice(payload);
    bytes
}

#[test]
fn intruders_on_the_rendezvous_port_are_dropped_and_the_run_completes() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let file = tmp.path().join("two.json");
    let spawn = |rank: u32| {
        let mut cmd = cpu_rank(tmp.path(), &file, port, rank);
        cmd.env("COMMGATE_RENDEZVOUS_SECRET", "a secret for this test only").stderr(std::process::Stdio::piped());
        cmd.spawn().expect("spawns")
    };
    let r0 = spawn(0);
    // Connect and close.
    drop(connect_when_listening(port));
    // 64 junk bytes.
    let mut junk = connect_when_listening(port);
    junk.write_all(&[0xAB; 64]).expect("junk");
    until_closed(junk);
    // A hello that claims rank 1 without the secret: magic, version 3, rank, world size, a
    // nonce and a proof of zeros, after reading rank 0's challenge (a header and 40 bytes).
    let mut forged = connect_when_listening(port);
    let mut challenge = [0u8; 9 + 40];
    forged.read_exact(&mut challenge).expect("challenge");
    assert_eq!(&challenge[9..13], b"CGRV");
    let mut hello = b"CGRV".to_vec();
    for word in [3u32, 1, 2] {
        hello.extend_from_slice(&word.to_le_bytes());
    }
    hello.extend_from_slice(&[0; 64]);
    forged.write_all(&frame(1, &hello)).expect("hello");
    let answer = String::from_utf8_lossy(&until_closed(forged)).to_string();
    assert!(answer.contains("does not prove this job's rendezvous secret"), "{answer:?}");
    // A frame with an unexpected tag (an all-reduce) and a 2^40 length, then bytes: rank 0
    // refuses it on its header, so the writes fail long before 64 MiB.
    let mut huge = connect_when_listening(port);
    let mut header = (1u64 << 40).to_le_bytes().to_vec();
    header.push(6);
    huge.write_all(&header).expect("header");
    let chunk = vec![0u8; 1 << 20];
    let mut sent = 0usize;
    let failure = loop {
        match huge.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) => break e,
        }
        assert!(sent < 64 << 20, "rank 0 took {sent} bytes of a frame it should have refused");
    };
    assert!(
        !matches!(failure.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        "rank 0 kept the connection open: {failure}"
    );
    // Rank 0's peak memory so far stays small (the frame was not buffered; about 14 MiB here).
    #[cfg(target_os = "linux")]
    {
        let status = std::fs::read_to_string(format!("/proc/{}/status", r0.id())).expect("status");
        let peak_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM");
        assert!(peak_kib < 256 * 1024, "rank 0 peaked at {peak_kib} KiB");
    }
    let r1 = spawn(1);
    let (o0, o1) = (r0.wait_with_output().expect("rank 0"), r1.wait_with_output().expect("rank 1"));
    let stderr0 = String::from_utf8_lossy(&o0.stderr).to_string();
    assert!(o0.status.success(), "rank 0: {stderr0}");
    assert!(o1.status.success(), "rank 1: {}", String::from_utf8_lossy(&o1.stderr));
    let drops: Vec<&str> = stderr0
        .lines()
        .filter(|l| l.starts_with("commgate: note: rendezvous: dropped a peer from 127.0.0.1:"))
        .collect();
    assert!(drops.len() >= 4, "{stderr0}");
    assert!(!stderr0.contains("a secret for this test only"), "the secret is never printed: {stderr0}");
    assert_eq!(read(&file)["workload"]["world_size"], 2);
}

#[test]
fn bench_then_baseline_then_compare() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("r.json");
    commgate(tmp.path()).arg("bench").args(SMALL_MOCK).arg("--output").arg(&file).assert().success();
    commgate(tmp.path()).args(["baseline", "update", "--from"]).arg(&file).assert().success();
    let store = tmp.path().join("baselines/PAR-MOCK/par-overlap-allreduce-matmul.json");
    commgate(tmp.path()).args(["compare", "--baseline"]).arg(&store).arg("--current").arg(&file).assert().code(0);
}

/// Runs `commgate ARGS` in a fresh directory and checks the refusal: exit 2, one error line that
/// starts with `expected`, nothing on stdout, no result written.
fn refused(args: &[&str], expected: &str) -> String {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = commgate(tmp.path()).args(args).output().expect("runs");
    assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&out.stdout));
    let line = one_error_line(&out);
    assert!(line.starts_with(&format!("commgate: error: {expected}")), "{args:?}: {line}");
    assert!(!tmp.path().join("benchmarks").exists(), "{args:?} wrote a result");
    line
}

#[test]
fn parameters_outside_their_limits_are_refused_before_any_work() {
    let line = refused(&["bench", "--backend", "mock", "--warmup", "4294967295"], "--warmup 4294967295: at most 10000");
    assert!(line.contains("warm-up"), "{line}");
    refused(&["bench", "--backend", "mock", "--world-size", "0"], "--world-size 0: a job needs at least one rank");
    refused(&["bench", "--backend", "mock", "--repeats", "0"], "--repeats 0: at least 20 repeats are needed for a P95");
    refused(&["bench", "--backend", "mock", "--repeats", "3"], "--repeats 3: at least 20 repeats");
    refused(&["bench", "--backend", "mock", "--repeats", "100001"], "--repeats 100001: at most 100000");
    refused(&["bench", "--backend", "mock", "--payload-elements", "0"], "--payload-elements 0: ");
    refused(
        &["bench", "--backend", "mock", "--dtype", "float32", "--payload-elements", "18446744073709551615"],
        "--payload-elements 18446744073709551615: at 4 bytes an element (float32)",
    );
    refused(&["bench", "--backend", "mock", "--compute-dim", "65537"], "--compute-dim 65537: at most 65536");
    refused(&["bench", "--backend", "mock", "--timeout", "18446744073709551615"], "--timeout 18446744073709551615: ");
    // check runs the same benchmark: the same refusals, before the baseline is looked at.
    refused(&["check", "--backend", "mock", "--warmup", "4294967295"], "--warmup 4294967295: ");
    // A dry run is refused too: the plan it would print could never run.
    refused(&["bench", "--backend", "mock", "--dry-run", "--repeats", "3"], "--repeats 3: ");
}

#[test]
fn a_bad_profile_name_is_refused_before_the_run() {
    let line = refused(
        &["bench", "--backend", "mock", "--environment-profile", "../main"],
        "--environment-profile \"../main\": ",
    );
    assert!(line.contains("letters, digits"), "{line}");
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = commgate(tmp.path())
        .env("COMMGATE_ENVIRONMENT_PROFILE", "a b")
        .args(["bench", "--backend", "mock"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(one_error_line(&out).starts_with("commgate: error: COMMGATE_ENVIRONMENT_PROFILE=\"a b\": "));
    assert!(!tmp.path().join("benchmarks").exists());
}

#[test]
fn one_rank_is_a_smoke_run_only_when_asked_for() {
    let line =
        refused(&["bench", "--backend", "mock", "--world-size", "1"], "--world-size 1: one rank communicates nothing");
    assert!(line.contains("--allow-single-rank"), "{line}");
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("one.json");
    let out = commgate(tmp.path())
        .arg("bench")
        .args(SMALL_MOCK)
        .args(["--world-size", "1", "--allow-single-rank", "--output"])
        .arg(&file)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = read(&file);
    assert_eq!(v["workload"]["world_size"], 1);
    assert!(v["metrics"]["busbw_gbps"].is_null(), "not applicable, not 0: {}", v["metrics"]);
    assert!(v["metrics"]["overlap_ratio"].is_null());
    assert!(v["metrics"]["matmul_tflops"].as_f64().is_some_and(|t| t > 0.0), "the GEMM is measured");
    assert_eq!(v["decision"]["verdict"], "collect_more_evidence");
    // Figures rounded to 6 digits: the mock's noise goes through the platform's `exp`.
    let rounded = |block: &Value| -> Value {
        block
            .as_object()
            .expect("object")
            .iter()
            .map(|(k, x)| (k.clone(), x.as_f64().map_or(x.clone(), |f| Value::from(format!("{f:.6}")))))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let judged = serde_json::json!({
        "metrics": rounded(&v["metrics"]),
        "comparison": rounded(&v["comparison"]),
        "decision": v["decision"],
    });
    insta::assert_snapshot!("one_rank_figures", serde_json::to_string_pretty(&judged).expect("pretty"));
    // The one-rank result goes through the barrier, and its report reads back.
    let report = tmp.path().join("report.json");
    std::fs::create_dir_all(tmp.path().join("baselines")).expect("an empty store");
    let out = commgate(tmp.path())
        .args(["check", "--comment", "never", "--format", "markdown", "--result"])
        .arg(&file)
        .arg("--output")
        .arg(&report)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("| busbw | not applicable (one rank communicates nothing) |"), "{md}");
    // `comment` reads what check wrote (its preview renders the same comment).
    let out = commgate(tmp.path()).args(["comment", "--dry-run", "--report"]).arg(&report).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("| busbw | not applicable (one rank communicates nothing) |"));
}

/// A GPU user's word for the CUDA backend is taken for it, on the flag and in the variable.
#[test]
fn backend_gpu_means_cuda() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = commgate(tmp.path()).args(["bench", "--backend", "gpu", "--dry-run"]).output().expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("backend            cuda (NCCL and cuBLAS on the GPUs)"), "{stdout}");
    let out = commgate(tmp.path()).args(["bench", "--dry-run"]).env("COMMGATE_BACKEND", "gpu").output().expect("runs");
    assert!(String::from_utf8_lossy(&out.stdout).contains("backend            cuda"), "{out:?}");
}
