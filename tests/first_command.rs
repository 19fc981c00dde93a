//! The README's first command, exactly: `check --backend mock --traces examples/traces` in a
//! copy of the repository's committed `baselines/` and `examples/traces` (no `.git`, no
//! `commgate.toml`, as in a release tarball) benchmarks on the mock backend, compares with the
//! committed mock store and its trace summary, and accepts (exit 0). If the mock, the store or
//! the traces drift apart, this fails instead of the README silently going stale.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::Path;
use std::process::Output;

mod common;
use common::{commgate_in, copy_dir, root};

/// A fresh copy of what the first command reads.
fn checkout() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&root().join("baselines"), &tmp.path().join("baselines"));
    copy_dir(&root().join("examples/traces"), &tmp.path().join("examples/traces"));
    tmp
}

fn first_command(dir: &Path, extra: &[&str]) -> Output {
    commgate_in(dir)
        .args(["check", "--backend", "mock", "--traces", "examples/traces"])
        .args(extra)
        .output()
        .expect("runs")
}

#[test]
fn the_readme_first_command_accepts() {
    let dir = checkout();
    let out = first_command(dir.path(), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("Verdict: accept: overlap step "), "{stdout}");
    assert!(stdout.lines().next().is_some_and(|l| l.ends_with(", within ±3 %")), "{stdout}");
    assert!(stdout.contains("no regression against 5 baseline run(s): 9 of 9 metrics unchanged"), "{stdout}");
    assert!(stdout.contains("hardware matches"), "{stdout}");
    assert!(stdout.contains("Traces against baseline \"default\":"), "{stdout}");
}

#[test]
fn its_markdown_form_is_the_pr_comment() {
    let dir = checkout();
    let out = first_command(dir.path(), &["--format", "markdown"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let markdown = String::from_utf8_lossy(&out.stdout);
    assert!(markdown.starts_with("<!-- commgate-report -->\n### "), "{markdown}");
    assert!(markdown.lines().nth(1).is_some_and(|l| l.contains("`accept`")), "{markdown}");
}
