//! README's "Day one on your repository", run as written: its `sh` block in a shell, in a fresh
//! directory, with this build's `commgate` first on `PATH`, on the CPU backend. Between `init`
//! and the rest, three of the settings `init` writes commented out are uncommented with smaller
//! values (as its file invites), so that a debug build's CPU runs take seconds, not minutes.
//! The last command's report must have the shape the README shows: a verdict a CPU run can give
//! (`accept`, or `collect_more_evidence` on a noisy machine, never an error or a block), the
//! run's figures, and the five stored runs under the CPU profile that `init` named.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::Path;
use std::process::Command;

mod common;
use common::{is_callers_setting, root};

/// The `sh` block under the README's "## Day one on your repository".
fn walkthrough() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README");
    let section = readme.split("## Day one on your repository").nth(1).expect("the section");
    let block = section.split("```sh\n").nth(1).expect("an sh block");
    block.split("```").next().expect("its end").to_string()
}

#[test]
fn the_readme_day_one_walkthrough_runs_as_written() {
    let script = walkthrough();
    assert!(script.contains("commgate init --backend cpu"), "{script}");
    let tmp = tempfile::tempdir().expect("tempdir");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_commgate")).parent().expect("bin dir").to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let (init, rest) = script.split_once('\n').expect("init, then the runs");
    let shell = |script: &str| {
        let mut cmd = Command::new("bash");
        cmd.arg("-eu").arg("-c").arg(script).current_dir(tmp.path()).env("PATH", &path);
        for (key, _) in std::env::vars_os() {
            if key.to_str().is_some_and(is_callers_setting) {
                cmd.env_remove(key);
            }
        }
        cmd.output().expect("bash runs")
    };
    let out = shell(init);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let settings = tmp.path().join("commgate.toml");
    let text = std::fs::read_to_string(&settings).expect("init wrote commgate.toml");
    let mut smaller = text.clone();
    for (line, value) in [
        ("# repeats = 200 ", "repeats = 30"),
        ("# compute_dim = 2048 ", "compute_dim = 48"),
        ("# payload_elements = 4194304 ", "payload_elements = 16384"),
    ] {
        let at = smaller.find(line).unwrap_or_else(|| panic!("init writes {line:?}: {text}"));
        let end = at + smaller[at..].find('\n').expect("a line");
        smaller.replace_range(at..end, value);
    }
    std::fs::write(&settings, smaller).expect("write");
    let out = shell(rest);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let report = stdout.rsplit("run-5.json\n").next().expect("check's report after the last bench's path");
    let first = report.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("Verdict: accept: overlap step ") || first.starts_with("Verdict: collect_more_evidence"),
        "{report}\n{stderr}"
    );
    assert!(report.contains("\nRun: busbw "), "{report}");
    assert!(
        report.contains(
            "Baseline: baselines/PAR-CPU-MECHANISM/par-overlap-allreduce-matmul.json (hardware matches, run spread "
        ),
        "{report}"
    );
    assert!(report.contains("): 5 runs from 1 runner, δ = 3 %, cannot block on its own"), "{report}");
    assert!(tmp.path().join("benchmarks/results/.gitignore").is_file());
}
