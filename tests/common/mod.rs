//! What the binary tests share: the repository root and the `commgate` binary run in a clean
//! environment, so that neither the developer's shell nor the CI runner can change what a test
//! sees. One rule says which of the caller's variables the child never inherits
//! ([`is_callers_setting`]): commgate's own settings, GitHub Actions' variables and token, `CI`,
//! and every launcher's rank and rendezvous variables. Everything else (PATH, HOME, …) passes
//! through; a test sets what it needs on the command it gets.

// Each test file compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether the caller's variable `name` is one the binary reads as a setting, and so is removed
/// from every child: `COMMGATE_*`; GitHub Actions (`GITHUB_*`, `GH_TOKEN`) and `CI`; the
/// launchers' rank, world and rendezvous (torchrun's `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
/// `MASTER_*`, Slurm's `SLURM_*`, Open MPI's `OMPI_*`).
pub fn is_callers_setting(name: &str) -> bool {
    const PREFIXES: [&str; 5] = ["COMMGATE_", "GITHUB_", "MASTER_", "SLURM_", "OMPI_"];
    const NAMES: [&str; 5] = ["GH_TOKEN", "CI", "RANK", "WORLD_SIZE", "LOCAL_RANK"];
    PREFIXES.iter().any(|prefix| name.starts_with(prefix)) || NAMES.contains(&name)
}

/// The binary as a `std::process::Command` (for tests that spawn several at once or wire its
/// standard streams), in `dir`, without the caller's settings.
pub fn command_in(dir: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_commgate"));
    cmd.current_dir(dir);
    // `vars_os`: a variable whose name or value is not UTF-8 must not stop the suite.
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(is_callers_setting) {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// Copies `from` (a directory) to `to`, recursively: the committed inputs a test runs on, in a
/// scratch directory it may write to.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("name"));
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).expect("copy");
        }
    }
}

/// The binary in `dir`, without the caller's settings.
pub fn commgate_in(dir: &Path) -> Command {
    Command::from_std(command_in(dir))
}

/// The binary in the repository root, without the caller's settings.
pub fn commgate() -> Command {
    commgate_in(&root())
}

#[test]
fn the_callers_settings_are_removed_and_the_rest_kept() {
    for name in [
        "COMMGATE_CONFIG",
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "CI",
        "RANK",
        "MASTER_PORT",
        "SLURM_NTASKS",
        "OMPI_COMM_WORLD_RANK",
    ] {
        assert!(is_callers_setting(name), "{name}");
    }
    for name in ["PATH", "HOME", "TMPDIR", "RANKING", "CIRCLE", "COMMGATE"] {
        assert!(!is_callers_setting(name), "{name}");
    }
}

/// `git ARGS...` in `dir` as a test's author (no signing), which must succeed: its stdout,
/// trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
