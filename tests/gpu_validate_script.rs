//! `scripts/gpu-validate.sh` and its logic, `scripts/gpu_validate.py`, without a GPU: the script
//! parses, the Python module's selftest passes on the recorded outputs of
//! `tests/fixtures/gpu-validate` (passing and failing checks, the tally, the exit codes), and on a
//! machine with no GPU the script says so and exits 2 instead of reporting anything. The checks
//! themselves need an NVIDIA GPU and run there only (see the script's header).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `name` on the caller's PATH, as an absolute path.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| candidate.is_file())
}

/// The real interpreter behind `python3` (not a shim such as pyenv's, which needs its own PATH),
/// or `None` with the reason printed: the Python tests are skipped where there is no python3.
fn python3() -> Option<PathBuf> {
    let Some(python) = on_path("python3") else {
        println!("skipped: python3 is not on PATH");
        return None;
    };
    let out = Command::new(&python).args(["-c", "import sys; print(sys.executable)"]).output().expect("run python3");
    let executable = String::from_utf8(out.stdout).expect("utf-8").trim().to_string();
    if !out.status.success() || executable.is_empty() {
        println!("skipped: python3 does not run: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    Some(PathBuf::from(executable))
}

fn bash() -> PathBuf {
    on_path("bash").unwrap_or_else(|| PathBuf::from("/bin/bash"))
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_script_parses() {
    let out = Command::new(bash()).arg("-n").arg("scripts/gpu-validate.sh").current_dir(root()).output().expect("bash");
    assert!(out.status.success(), "bash -n scripts/gpu-validate.sh: {}", describe(&out));
}

#[test]
fn the_logic_passes_its_selftest_on_recorded_outputs() {
    let Some(python) = python3() else { return };
    let out = Command::new(python)
        .args(["scripts/gpu_validate.py", "selftest", "tests/fixtures/gpu-validate"])
        .current_dir(root())
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the selftest failed: {}", describe(&out));
    assert!(stdout.contains("all passed"), "{}", describe(&out));
}

/// A `python3` without torch: `-I -S` leaves out every site-packages directory and PYTHONPATH,
/// so `import torch` fails whatever this machine has installed.
fn python_without_torch(dir: &Path, python: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let wrapper = dir.join("python3-without-torch");
    std::fs::write(&wrapper, format!("#!/bin/sh\nexec '{}' -I -S \"$@\"\n", python.display())).expect("write");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    wrapper
}

#[test]
fn without_a_gpu_the_script_says_so_and_exits_2() {
    let Some(python) = python3() else { return };
    let scratch = tempfile::tempdir().expect("tempdir");
    // A PATH holding nothing at all, so no nvidia-smi; the script finds Python through PYTHON.
    let empty_bin = scratch.path().join("bin");
    std::fs::create_dir(&empty_bin).expect("mkdir");
    let out = Command::new(bash())
        .arg("scripts/gpu-validate.sh")
        .current_dir(root())
        .env_clear()
        .env("PATH", &empty_bin)
        .env("HOME", scratch.path())
        .env("PYTHON", python_without_torch(scratch.path(), &python))
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(stdout.lines().any(|line| line == "not validated: no GPU"), "{}", describe(&out));
    assert!(stdout.contains("nvidia-smi not on PATH"), "the reason is given: {}", describe(&out));
    // It stopped before anything else: no check line, no tally, no temporary directory announced.
    assert!(!stdout.contains("checks passed") && !stdout.contains("files in"), "{}", describe(&out));
}

/// `EMULATOR=1`: the script's whole logic against commgate's emulated GPUs (scripts/fake-gpu.sh),
/// small sizes: every check that does not compare with torch or nccl-tests runs and passes, and
/// the report says that it validated the emulator, never a GPU.
#[test]
fn against_the_emulator_the_script_says_it_validated_the_emulator_not_a_gpu() {
    let Some(python) = python3() else { return };
    let scratch = tempfile::tempdir().expect("tempdir");
    let out = Command::new(bash())
        .arg("scripts/gpu-validate.sh")
        .current_dir(root())
        .env("EMULATOR", "1")
        .env("COMMGATE", env!("CARGO_BIN_EXE_commgate"))
        .env("PYTHON", python_without_torch(scratch.path(), &python))
        .env("OUT_DIR", scratch.path().join("out"))
        .envs([("GEMMS", "bf16:64"), ("GATE_DIM", "64"), ("WARMUP", "2"), ("REPEATS", "20"), ("BUSBW_BYTES", "262144")])
        // A 64³ matmul lasts 10 ms, the 256 KiB all-reduce 13 ms: the schedules' sums hold
        // whatever else loads the machine.
        .envs([("COMMGATE_FAKEGPU_GFLOPS", "0.05"), ("COMMGATE_FAKEGPU_BUSBW_GBPS", "0.02")])
        .env("KILL_AFTER", "3")
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        stdout.starts_with("gpu-validate: 2 GPU(s) (commgate emulated GPU) counted by commgate's emulator"),
        "{stdout}"
    );
    assert!(stdout.contains("\nEMULATOR: these runs used commgate's emulated GPUs"), "{stdout}");
    for check in ["gate-timing", "gate-medians", "schedules", "topology", "world-n", "two-process", "killed-peer"] {
        assert!(stdout.contains(&format!("\nPASS {check}: ")), "{check}: {stdout}");
    }
    for check in ["gemm-bf16-64", "gpu-memory", "libraries", "busbw"] {
        assert!(stdout.contains(&format!("\nSKIP {check}: not applicable on the emulator")), "{check}: {stdout}");
    }
    assert!(stdout.contains("\n7 of 7 checks passed on the emulator (not a GPU)\n"), "{stdout}");
    assert!(stdout.contains("\nvalidated: the emulator, not a GPU"), "{stdout}");
}
