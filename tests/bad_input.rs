//! Bad input through the binary: every kind of broken file or path exits 2 with exactly one
//! line on stderr that names the file and what is wrong, prints nothing on stdout, and with
//! `--output` leaves no report (and no temporary file) behind. The bad files are made in a
//! temporary directory from the good fixtures, so each test shows what it broke. Settings out of
//! range get the same treatment, their line naming the flag, the variable or the file and key.

use std::io::Write;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde_json::Value;
use tempfile::TempDir;

const RANK_0: &str = include_str!("fixtures/hand_checked/rank-0.json");
const RANK_1: &str = include_str!("fixtures/hand_checked/rank-1.json");
const SEED: &str = include_str!("fixtures/seed_events.json");

/// `commgate attribute ARGS...` run inside `dir`, isolated from the caller's settings.
fn commgate(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::cargo_bin("commgate").expect("the commgate binary");
    cmd.current_dir(dir).arg("attribute").args(args);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("COMMGATE_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// The contract for bad input: exit 2, stdout empty, one stderr line that starts with
/// `commgate: error: ` and holds the file name and `fragment` (the field, "byte", ...).
fn assert_bad_input(dir: &Path, args: &[&str], file_name: &str, fragment: &str) -> String {
    let out = commgate(dir, args).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "exit code for {args:?}; stderr: {stderr}");
    assert!(out.stdout.is_empty(), "stdout for {args:?}: {}", String::from_utf8_lossy(&out.stdout));
    let line = stderr.strip_suffix('\n').unwrap_or(&stderr);
    assert!(!line.contains('\n'), "more than one stderr line for {args:?}:\n{stderr}");
    assert!(line.starts_with("commgate: error: "), "stderr for {args:?}: {line}");
    assert!(line.contains(file_name), "stderr for {args:?} does not name {file_name}: {line}");
    assert!(line.contains(fragment), "stderr for {args:?} does not say {fragment:?}: {line}");
    line.to_string()
}

fn write(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write a test file");
    path
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::default());
    enc.write_all(bytes).expect("compress");
    enc.finish().expect("compress")
}

/// The fixture as a JSON value, edited by `edit`, written back as text.
fn edited(doc: &str, edit: impl FnOnce(&mut Value)) -> String {
    let mut v: Value = serde_json::from_str(doc).expect("fixture is JSON");
    edit(&mut v);
    serde_json::to_string_pretty(&v).expect("serialize")
}

/// The first complete ("X") event of a Kineto fixture that has a `dur`.
fn first_complete_event(v: &mut Value) -> &mut serde_json::Map<String, Value> {
    v["traceEvents"]
        .as_array_mut()
        .expect("traceEvents")
        .iter_mut()
        .filter_map(Value::as_object_mut)
        .find(|e| e.get("ph") == Some(&Value::from("X")) && e.contains_key("dur"))
        .expect("a complete event")
}

/// Deterministic "random" bytes (a 64-bit LCG), starting with a byte no JSON document starts with.
fn garbage(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut out: Vec<u8> = (0..len)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (x >> 56) as u8
        })
        .collect();
    out[0] = 0x8F;
    out
}

/// `bytes` alone in a fresh directory as `file_name`, passed to `attribute`: asserts the
/// bad-input contract (see [`assert_bad_input`]) and returns the error line.
fn bad_file(file_name: &str, bytes: impl AsRef<[u8]>, fragment: &str) -> String {
    let dir = TempDir::new().expect("tempdir");
    write(dir.path(), file_name, bytes);
    assert_bad_input(dir.path(), &[file_name], file_name, fragment)
}

/// [`bad_file`] with `fixture` edited by `edit` (see [`edited`]).
fn bad_edit(fixture: &str, file_name: &str, edit: impl FnOnce(&mut Value), fragment: &str) -> String {
    bad_file(file_name, edited(fixture, edit), fragment)
}

#[test]
fn truncated_gzip_names_the_file_and_exits_2() {
    let gz = gzip(RANK_0.as_bytes());
    let line = bad_file("rank-0.json.gz", &gz[..gz.len() / 2], "byte");
    assert!(line.contains("gzip"), "{line}");
}

#[test]
fn json_cut_in_half_names_the_file_and_byte_and_exits_2() {
    let line = bad_file("rank-0.json", &RANK_0.as_bytes()[..RANK_0.len() / 2], "byte");
    assert!(line.contains("truncated"), "{line}");
}

#[test]
fn gzip_of_json_cut_in_half_names_the_decompressed_byte_and_exits_2() {
    bad_file("rank-0.json.gz", gzip(&RANK_0.as_bytes()[..RANK_0.len() / 2]), "decompressed byte");
}

#[test]
fn empty_file_names_the_file_and_exits_2() {
    bad_file("rank-0.json", "", "empty");
}

#[test]
fn binary_garbage_names_the_file_and_byte_and_exits_2() {
    bad_file("rank-0.json", garbage(4096), "byte 0");
}

#[test]
fn trailing_garbage_after_the_document_names_the_byte_and_exits_2() {
    let mut bytes = RANK_0.as_bytes().to_vec();
    bytes.extend_from_slice(b"\n{\"traceEvents\": [");
    bad_file("rank-0.json", bytes, "byte");
}

#[test]
fn trace_without_trace_events_names_the_field_and_exits_2() {
    bad_edit(
        RANK_0,
        "rank-0.json",
        |v| {
            v.as_object_mut().expect("object").remove("traceEvents");
        },
        "traceEvents",
    );
    bad_file("empty-object.json", "{}", "traceEvents");
}

#[test]
fn dur_that_is_a_string_names_the_field_and_exits_2() {
    let line = bad_edit(
        RANK_0,
        "rank-0.json",
        |v| {
            let e = first_complete_event(v);
            let dur = e["dur"].to_string();
            e.insert("dur".into(), Value::String(dur));
        },
        "`dur`",
    );
    assert!(line.contains("string") && line.contains("traceEvents["), "{line}");
}

#[test]
fn negative_dur_names_the_field_and_exits_2() {
    let line = bad_edit(
        RANK_0,
        "rank-0.json",
        |v| {
            first_complete_event(v).insert("dur".into(), Value::from(-5));
        },
        "`dur`",
    );
    assert!(line.contains("negative"), "{line}");
}

#[test]
fn timestamps_out_of_range_name_the_field_and_exit_2() {
    bad_edit(
        RANK_0,
        "rank-0.json",
        |v| {
            let e = first_complete_event(v);
            e.insert("ts".into(), Value::from(9_000_000_000_000_000u64));
            e.insert("dur".into(), Value::from(9_000_000_000_000_000u64));
        },
        "out of range",
    );
}

#[test]
fn seed_event_missing_collective_names_the_field_and_exits_2() {
    let line = bad_edit(
        SEED,
        "events.json",
        |v| {
            v[1].as_object_mut().expect("event").remove("collective");
        },
        "`collective`",
    );
    assert!(line.contains("events[1]"), "{line}");
}

#[test]
fn seed_event_with_non_numeric_field_names_the_field_and_exits_2() {
    let line = bad_edit(SEED, "events.json", |v| v[0]["exposed_comm_ms"] = Value::from("8.0"), "`exposed_comm_ms`");
    assert!(line.contains("events[0]"), "{line}");
}

#[test]
fn directory_with_no_traces_names_it_and_exits_2() {
    let dir = TempDir::new().expect("tempdir");
    std::fs::create_dir(dir.path().join("profiles")).expect("mkdir");
    write(&dir.path().join("profiles"), "notes.txt", "not a trace");
    assert_bad_input(dir.path(), &["profiles"], "profiles", "no trace files");
}

#[test]
fn path_that_does_not_exist_names_it_and_exits_2() {
    let dir = TempDir::new().expect("tempdir");
    assert_bad_input(dir.path(), &["missing-rank-7.json"], "missing-rank-7.json", "does not exist");
}

#[test]
fn two_files_claiming_the_same_rank_name_both_and_exit_2() {
    let dir = TempDir::new().expect("tempdir");
    write(dir.path(), "a.json", RANK_0);
    write(dir.path(), "b.json", RANK_0);
    let line = assert_bad_input(dir.path(), &["a.json", "b.json"], "b.json", "rank 0");
    assert!(line.contains("a.json"), "{line}");
}

#[test]
fn multi_file_input_where_a_file_has_no_rank_names_it_and_exits_2() {
    let dir = TempDir::new().expect("tempdir");
    write(dir.path(), "rank-0.json", RANK_0);
    write(
        dir.path(),
        "trace.json",
        edited(RANK_1, |v| {
            v.as_object_mut().expect("object").remove("distributedInfo");
        }),
    );
    assert_bad_input(dir.path(), &["rank-0.json", "trace.json"], "trace.json", "distributedInfo.rank");
}

/// Bad files of every kind, each with the name to pass and a fragment the error must hold.
fn bad_files(dir: &Path) -> Vec<(&'static str, &'static str)> {
    let gz = gzip(RANK_0.as_bytes());
    write(dir, "cut.json.gz", &gz[..gz.len() / 2]);
    write(dir, "cut.json", &RANK_0.as_bytes()[..RANK_0.len() / 2]);
    write(dir, "empty.json", "");
    write(dir, "garbage.json", garbage(512));
    write(dir, "seed.json", edited(SEED, |v| v[0]["payload_bytes"] = Value::from("lots")));
    vec![
        ("cut.json.gz", "gzip"),
        ("cut.json", "truncated"),
        ("empty.json", "empty"),
        ("garbage.json", "byte"),
        ("seed.json", "payload_bytes"),
        ("missing.json", "does not exist"),
    ]
}

#[test]
fn bad_input_with_output_leaves_no_report_and_no_temp_file() {
    let dir = TempDir::new().expect("tempdir");
    let cases = bad_files(dir.path());
    write(dir.path(), "rank-1.json", RANK_1);
    let before = listing(dir.path());
    for (name, fragment) in cases {
        assert_bad_input(dir.path(), &["--output", "out.md", name], name, fragment);
        // Next to a good file, in another format: still nothing written.
        assert_bad_input(dir.path(), &["--output", "out.md", "--format", "json", "rank-1.json", name], name, fragment);
        assert!(!dir.path().join("out.md").exists(), "{name} left out.md behind");
        assert_eq!(listing(dir.path()), before, "{name} left a file behind");
    }
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
fn good_run_with_output_writes_the_file_and_nothing_on_stdout() {
    let dir = TempDir::new().expect("tempdir");
    write(dir.path(), "rank-0.json", RANK_0);
    write(dir.path(), "rank-1.json.gz", gzip(RANK_1.as_bytes()));
    let out = commgate(dir.path(), &["--output", "out.md", "--format", "markdown", "rank-0.json", "rank-1.json.gz"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty(), "stdout: {}", String::from_utf8_lossy(&out.stdout));
    let report = std::fs::read_to_string(dir.path().join("out.md")).expect("out.md written");
    assert!(!report.trim().is_empty());
    assert_eq!(listing(dir.path()), ["out.md", "rank-0.json", "rank-1.json.gz"], "no temp file left");
}

/// `commgate ARGS...` (any command) inside `dir` with `env` set, isolated from the caller's
/// settings; asserts the bad-settings contract (exit 2, nothing on stdout, one stderr line that
/// starts with `commgate: error: {expected}`, nothing written in `dir`) and returns the line.
fn refused_setting(dir: &Path, env: &[(&str, &str)], args: &[&str], expected: &str) -> String {
    let mut cmd = Command::cargo_bin("commgate").expect("the commgate binary");
    cmd.current_dir(dir).args(args);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("COMMGATE_")
            || key.starts_with("GITHUB_")
            || ["CI", "RANK", "WORLD_SIZE"].contains(&key.as_str())
        {
            cmd.env_remove(key);
        }
    }
    cmd.envs(env.iter().copied());
    let before = listing(dir);
    let out = cmd.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "exit code for {args:?}; stderr: {stderr}");
    assert!(out.stdout.is_empty(), "stdout for {args:?}: {}", String::from_utf8_lossy(&out.stdout));
    let line = stderr.strip_suffix('\n').unwrap_or(&stderr);
    assert!(!line.contains('\n'), "more than one stderr line for {args:?}:\n{stderr}");
    assert!(line.starts_with(&format!("commgate: error: {expected}")), "stderr for {args:?}: {line}");
    assert_eq!(listing(dir), before, "{args:?} wrote something");
    line.to_string()
}

#[test]
fn settings_out_of_range_name_the_flag_the_variable_or_the_file_and_exit_2() {
    let dir = TempDir::new().expect("tempdir");
    let compare = ["compare", "--baseline", "b.json", "--current", "c.json"];
    let with = |extra: &[&'static str]| -> Vec<&str> { compare.iter().chain(extra).copied().collect() };
    refused_setting(dir.path(), &[], &with(&["--resamples", "0"]), "--resamples 0: give 100 to 100000");
    refused_setting(dir.path(), &[("COMMGATE_RESAMPLES", "0")], &compare, "COMMGATE_RESAMPLES=0: ");
    refused_setting(dir.path(), &[], &with(&["--min-effect", "2"]), "--min-effect 2: ");
    refused_setting(dir.path(), &[("COMMGATE_TIMEOUT", "0")], &["bench", "--backend", "mock"], "COMMGATE_TIMEOUT=0: ");

    let settings = write(dir.path(), "gate.toml", "[bench]\nrepeats = 3\n[compare]\nresamples = 7\n");
    let config = settings.to_string_lossy().into_owned();
    refused_setting(
        dir.path(),
        &[],
        &["--config", &config, "bench", "--backend", "mock"],
        &format!("{config}: [bench] repeats = 3: at least 20 repeats"),
    );
    // A flag beats the file; check reads [compare] from the file alone.
    refused_setting(
        dir.path(),
        &[("COMMGATE_CONFIG", &config)],
        &["check", "--backend", "mock", "--repeats", "200"],
        &format!("{config}: [compare] resamples = 7: "),
    );
    let profile = write(dir.path(), "commgate.toml", "[bench]\nenvironment_profile = \"team/a\"\n");
    assert!(profile.exists());
    refused_setting(
        dir.path(),
        &[],
        &["bench", "--backend", "mock"],
        "commgate.toml: [bench] environment_profile = \"team/a\": ",
    );
}
