//! Hostile text reaching stderr through the binary: a file name, a trace's name inside a
//! directory, a `COMMGATE_*` value and a command-line argument carrying a line break and a
//! GitHub Actions workflow command (`::error title=x::pwned`). Each error is still one line
//! that starts with `commgate: `, with the line break escaped, and no stderr line starts a
//! workflow command.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::Path;

use tempfile::TempDir;

mod common;
use common::commgate_in;

const RANK_0: &str = include_str!("fixtures/hand_checked/rank-0.json");
const HOSTILE: &str = "\n::error title=x::pwned";

/// `commgate ARGS...` inside `dir`, isolated from the caller's settings.
fn commgate(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    commgate_in(dir).args(args).envs(env.iter().copied()).output().expect("runs")
}

/// No stderr line begins a workflow command (`::…` or `##[…`, leading blanks ignored, as the
/// runner reads them).
fn assert_no_command_lines(stderr: &str) {
    for line in stderr.lines() {
        let line = line.trim_start();
        assert!(!line.starts_with("::") && !line.starts_with("##["), "a workflow command on stderr: {stderr:?}");
    }
}

/// Exit 2 and exactly one stderr line, `commgate: error: …`, holding the hostile text escaped.
fn assert_one_escaped_error(out: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_no_command_lines(&stderr);
    assert_eq!(stderr.lines().count(), 1, "more than one stderr line: {stderr:?}");
    assert!(stderr.starts_with("commgate: error: "), "{stderr:?}");
    assert!(stderr.contains(r"\n::error title=x::pwned"), "the line break is not shown escaped: {stderr:?}");
    stderr
}

#[test]
fn a_file_name_with_a_line_break_stays_on_one_line() {
    let dir = TempDir::new().expect("tempdir");
    let name = format!("rank-0{HOSTILE}.json");
    let line = assert_one_escaped_error(&commgate(dir.path(), &["attribute", &name], &[]));
    assert!(line.contains("does not exist"), "{line}");
}

#[test]
fn a_trace_named_with_a_line_break_inside_a_directory_stays_on_one_line() {
    // The name comes from the directory listing (a fork's files), not from the command line.
    let dir = TempDir::new().expect("tempdir");
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).expect("mkdir");
    std::fs::write(traces.join("rank-0.json"), RANK_0).expect("write");
    std::fs::write(traces.join(format!("rank-1{HOSTILE}.json")), "{\"traceEvents\": [").expect("write");
    let line = assert_one_escaped_error(&commgate(dir.path(), &["attribute", "traces"], &[]));
    assert!(line.contains("rank-1"), "{line}");
}

#[test]
fn a_variable_with_a_line_break_stays_on_one_line() {
    let dir = TempDir::new().expect("tempdir");
    std::fs::write(dir.path().join("rank-0.json"), RANK_0).expect("write");
    let value = format!("text{HOSTILE}");
    let out = commgate(dir.path(), &["attribute", "rank-0.json"], &[("COMMGATE_FORMAT", &value)]);
    let line = assert_one_escaped_error(&out);
    assert!(line.starts_with(r"commgate: error: COMMGATE_FORMAT=text\n::error"), "{line}");
}

#[test]
fn a_usage_error_quoting_a_line_break_keeps_clap_lines_but_starts_no_command() {
    let dir = TempDir::new().expect("tempdir");
    let out = commgate(dir.path(), &["attribute", "rank-0.json", &format!("--x{HOSTILE}")], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: unexpected argument"), "clap's own text: {stderr}");
    assert!(stderr.contains("Usage: commgate attribute"), "{stderr}");
    assert_no_command_lines(&stderr);
}

#[test]
fn help_never_prints_a_variables_value() {
    let dir = TempDir::new().expect("tempdir");
    for args in [&["check", "--help"][..], &["attribute", "--help"], &["bench", "--help"]] {
        let out = commgate(dir.path(), args, &[("COMMGATE_FORMAT", HOSTILE), ("COMMGATE_BASELINES", HOSTILE)]);
        assert_eq!(out.status.code(), Some(0));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("[env: COMMGATE_"), "the variable's name is still shown: {stdout}");
        assert!(!stdout.contains("pwned"), "a variable's value reached --help: {stdout}");
        assert_no_command_lines(&stdout);
    }
}

/// A panic is a bug, and it keeps the stderr contract: exit 2 and one `commgate: internal error:`
/// line that says what panicked, where, and where to report it (not Rust's default lines and 101).
#[test]
fn a_panic_exits_2_with_one_internal_error_line() {
    let dir = TempDir::new().expect("tempdir");
    std::fs::write(dir.path().join("rank-0.json"), RANK_0).expect("write");
    let out = commgate(dir.path(), &["attribute", "rank-0.json"], &[("COMMGATE_TEST_PANIC", "1")]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "more than one stderr line: {stderr:?}");
    assert!(
        stderr.starts_with(
            r"commgate: internal error: the test trigger COMMGATE_TEST_PANIC=1\nsecond line at src/main.rs:"
        ),
        "{stderr:?}"
    );
    assert!(stderr.contains("please report it at https://github.com/commgate/commgate/issues"), "{stderr:?}");
    assert!(out.stdout.is_empty(), "nothing half-written: {:?}", String::from_utf8_lossy(&out.stdout));
}
