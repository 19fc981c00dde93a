//! Inputs and outputs that are not plain files, through the binary: a named pipe, a socket or a
//! device passed as an input, `/dev/stdin`, `-`, a broken link or a pipe in a directory of traces,
//! and planted symbolic links where a report is written. Each bad input exits 2 at once (never
//! waits on a pipe) with one stderr line naming the file; a planted link never makes commgate
//! write anywhere but the path it was given.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use tempfile::TempDir;

mod common;
use common::{command_in, commgate_in};

const RANK_0: &str = include_str!("fixtures/hand_checked/rank-0.json");
const RANK_1: &str = include_str!("fixtures/hand_checked/rank-1.json");
const RESULT: &str = include_str!("fixtures/compare/current-same.json");
const STORE: &str = include_str!("fixtures/compare/baselines/SIM-MOCK/par-overlap-allreduce-matmul.json");

/// `commgate ARGS...` in `dir`, isolated from the caller's settings and tokens, stdin closed.
/// The timeout is only a guard: a build that blocks on a pipe fails instead of hanging the suite.
fn commgate(dir: &Path, args: &[&str]) -> Output {
    commgate_in(dir).args(args).timeout(Duration::from_secs(60)).output().expect("runs")
}

/// Exit 2, nothing on stdout, one stderr line that names `file` and says `fragment`.
fn assert_refused(out: &Output, file: &str, fragment: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "stdout: {}", String::from_utf8_lossy(&out.stdout));
    let line = stderr.strip_suffix('\n').unwrap_or(&stderr);
    assert!(!line.contains('\n'), "more than one line:\n{stderr}");
    assert!(line.starts_with("commgate: error: "), "{line}");
    assert!(line.contains(file), "does not name {file}: {line}");
    assert!(line.contains(fragment), "does not say {fragment:?}: {line}");
    line.to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a test file");
    path
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_named_pipe_as_a_trace_exits_2_without_waiting_for_a_writer() {
    let dir = TempDir::new().expect("tempdir");
    mkfifo(&dir.path().join("rank-0.json"));
    let out = commgate(dir.path(), &["attribute", "rank-0.json"]);
    assert_refused(&out, "rank-0.json", "is a named pipe (FIFO), not a regular file");
}

#[test]
fn a_named_pipe_as_a_result_exits_2_without_waiting_for_a_writer() {
    let dir = TempDir::new().expect("tempdir");
    mkfifo(&dir.path().join("result.json"));
    let out = commgate(dir.path(), &["compare", "--current", "result.json", "--baseline", "result.json"]);
    assert_refused(&out, "result.json", "is a named pipe (FIFO), not a regular file");
}

#[test]
fn a_device_or_a_dash_is_refused_by_name() {
    let dir = TempDir::new().expect("tempdir");
    assert_refused(&commgate(dir.path(), &["attribute", "/dev/null"]), "/dev/null", "is a device");
    assert_refused(&commgate(dir.path(), &["attribute", "-"]), "-", "does not read standard input");
}

/// `/dev/stdin` is opened once: redirected from a file it reads like that file; from a pipe it is
/// refused by name (a pipe can be read only once, and may never end).
#[test]
fn dev_stdin_reads_a_redirected_file_once_and_refuses_a_pipe() {
    let dir = TempDir::new().expect("tempdir");
    let trace = write(dir.path(), "rank-0.json", RANK_0);
    let run = |stdin: Stdio| {
        command_in(dir.path())
            .args(["attribute", "--format", "json", "/dev/stdin"])
            .stdin(stdin)
            .output()
            .expect("runs")
    };
    let from_file = run(Stdio::from(std::fs::File::open(&trace).expect("open")));
    assert_eq!(from_file.status.code(), Some(0), "{}", String::from_utf8_lossy(&from_file.stderr));
    assert!(String::from_utf8_lossy(&from_file.stdout).contains("by_collective"));
    // A pipe: refused before anything is read (its writer closes at once, so a build that read
    // it would see an empty file and say so, not hang).
    let mut child = command_in(dir.path())
        .args(["attribute", "/dev/stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawns");
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("waits");
    assert_refused(&out, "/dev/stdin", "is a named pipe (FIFO), not a regular file");
}

#[test]
fn a_broken_link_in_a_directory_of_traces_is_named_not_skipped() {
    let dir = TempDir::new().expect("tempdir");
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).expect("mkdir");
    write(&traces, "rank-0.json", RANK_0);
    std::os::unix::fs::symlink(traces.join("gone.json"), traces.join("rank-1.json")).expect("symlink");
    let line = assert_refused(&commgate(dir.path(), &["attribute", "traces"]), "rank-1.json", "broken symbolic link");
    assert!(line.contains("traces/rank-1.json"), "{line}");
    // A link passed by itself says the same.
    let line = assert_refused(
        &commgate(dir.path(), &["attribute", "traces/rank-1.json"]),
        "rank-1.json",
        "broken symbolic link",
    );
    assert!(!line.contains(": does not exist"), "{line}");
}

#[test]
fn a_pipe_or_a_directory_named_like_a_trace_in_a_directory_is_named() {
    let dir = TempDir::new().expect("tempdir");
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).expect("mkdir");
    write(&traces, "rank-0.json", RANK_0);
    mkfifo(&traces.join("rank-1.json"));
    assert_refused(&commgate(dir.path(), &["attribute", "traces"]), "rank-1.json", "is a named pipe (FIFO)");
    std::fs::remove_file(traces.join("rank-1.json")).expect("rm");
    std::fs::create_dir(traces.join("rank-1")).expect("mkdir");
    assert_refused(&commgate(dir.path(), &["attribute", "traces"]), "rank-1", "is a directory");
    // Other entries (notes, a regular `rank-2.txt`) are still ignored.
    std::fs::remove_dir(traces.join("rank-1")).expect("rmdir");
    write(&traces, "rank-1.json", RANK_1);
    write(&traces, "notes.txt", "x");
    write(&traces, "rank-2.txt", "x");
    let out = commgate(dir.path(), &["attribute", "traces"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn an_output_path_that_is_a_link_is_replaced_never_written_through() {
    let dir = TempDir::new().expect("tempdir");
    write(dir.path(), "rank-0.json", RANK_0);
    let victim = write(dir.path(), "victim.txt", "precious");
    std::os::unix::fs::symlink(&victim, dir.path().join("report.md")).expect("symlink");
    let out = commgate(dir.path(), &["attribute", "--output", "report.md", "rank-0.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");
    let meta = std::fs::symlink_metadata(dir.path().join("report.md")).expect("stat");
    assert!(meta.file_type().is_file(), "report.md is now a file of its own");
    assert!(!std::fs::read_to_string(dir.path().join("report.md")).expect("read").is_empty());
}

/// Links planted at every name a temporary file of this or an earlier version could take
/// (`.commgate-tmp-*`, `.<name>.tmp-<pid>`), each dangling towards a file that must not appear:
/// the report is written, and nothing is created through any of them.
#[test]
fn links_planted_at_temporary_names_receive_nothing() {
    let dir = TempDir::new().expect("tempdir");
    let store = dir.path().join("baselines/SIM-MOCK");
    std::fs::create_dir_all(&store).expect("dir");
    write(&store, "par-overlap-allreduce-matmul.json", STORE);
    write(dir.path(), "result.json", RESULT);
    let victim = dir.path().join("victim");
    for pid in 0..64 {
        for name in [format!(".report.json.tmp-{pid}"), format!(".commgate-tmp-{pid}-0-0")] {
            std::os::unix::fs::symlink(&victim, dir.path().join(name)).expect("symlink");
        }
    }
    let before = listing(dir.path());
    let out = commgate(
        dir.path(),
        &[
            "check",
            "--result",
            "result.json",
            "--baselines",
            "baselines",
            "--output",
            "report.json",
            "--comment",
            "never",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!victim.exists(), "something was written through a planted link");
    let mut after = before.clone();
    after.push("report.json".to_string());
    after.sort();
    assert_eq!(listing(dir.path()), after, "only report.json is new");
}

/// A committed `commgate.toml` that is a link to a device or a pipe: refused by name, not read
/// forever (git stores links, so a pull request can add one).
#[test]
fn a_settings_file_that_is_a_device_or_a_pipe_is_refused() {
    let dir = TempDir::new().expect("tempdir");
    write(dir.path(), "rank-0.json", RANK_0);
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("commgate.toml")).expect("symlink");
    let out = commgate(dir.path(), &["attribute", "rank-0.json"]);
    assert_refused(&out, "commgate.toml", "cannot read the settings file: it is a device");
    std::fs::remove_file(dir.path().join("commgate.toml")).expect("rm");
    mkfifo(&dir.path().join("commgate.toml"));
    let out = commgate(dir.path(), &["attribute", "rank-0.json"]);
    assert_refused(&out, "commgate.toml", "is a named pipe (FIFO)");
}

/// A socket as an input says so, not the system's "No such device or address".
#[test]
fn a_socket_as_an_input_is_named_a_socket() {
    let dir = TempDir::new().expect("tempdir");
    let _listener = std::os::unix::net::UnixListener::bind(dir.path().join("rank-0.json")).expect("socket");
    let out = commgate(dir.path(), &["attribute", "rank-0.json"]);
    assert_refused(&out, "rank-0.json", "is a socket, not a regular file");
}

/// A `--result` directory is read as if each file in it were named: a link to a result is
/// judged; a pipe, a broken link or a link loop in it is an error naming the entry, never
/// skipped (a run silently missing would be judged on the rest).
#[test]
fn a_result_directory_follows_links_and_names_what_it_cannot_read() {
    let dir = TempDir::new().expect("tempdir");
    let store = dir.path().join("baselines/SIM-MOCK");
    std::fs::create_dir_all(&store).expect("store dir");
    write(&store, "par-overlap-allreduce-matmul.json", STORE);
    let real = write(dir.path(), "current-same.json", RESULT);
    let results = dir.path().join("results");
    std::fs::create_dir_all(&results).expect("results dir");
    std::os::unix::fs::symlink(&real, results.join("run.json")).expect("link");
    let out = commgate(dir.path(), &["check", "--result", "results", "--format", "json", "--comment", "never"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["comparison"]["current_runs"], 1, "the linked result was judged");

    type Make<'a> = &'a dyn Fn(&Path);
    let cases: [(&str, Make, &str); 3] = [
        ("pipe.json", &|p: &Path| mkfifo(p), "is a named pipe (FIFO), not a regular file"),
        (
            "broken.json",
            &|p: &Path| std::os::unix::fs::symlink("gone.json", p).expect("link"),
            "is a broken symbolic link",
        ),
        ("loop.json", &|p: &Path| std::os::unix::fs::symlink("loop.json", p).expect("link"), "is a symbolic link loop"),
    ];
    for (name, make, said) in cases {
        let entry = results.join(name);
        make(&entry);
        let out = commgate(dir.path(), &["check", "--result", "results", "--comment", "never"]);
        assert_refused(&out, name, said);
        std::fs::remove_file(&entry).expect("remove");
    }
}
