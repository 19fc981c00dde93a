//! Bad input through the binary: every kind of broken file or path exits 2 with exactly one
//! line on stderr that names the file and what is wrong, prints nothing on stdout, and with
//! `--output` leaves no report (and no temporary file) behind. The bad files are made in a
//! temporary directory from the good fixtures, so each test shows what it broke. Settings out of
//! range get the same treatment, their line naming the flag, the variable or the file and key.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::io::Write;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde_json::Value;
use tempfile::TempDir;

mod common;
use common::commgate_in;

const RANK_0: &str = include_str!("fixtures/hand_checked/rank-0.json");
const RANK_1: &str = include_str!("fixtures/hand_checked/rank-1.json");
const SEED: &str = include_str!("fixtures/seed_events.json");

/// `commgate attribute ARGS...` run inside `dir`, isolated from the caller's settings.
fn commgate(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = commgate_in(dir);
    cmd.arg("attribute").args(args);
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

// ---------------------------------------------------------------------------------------------
// Settings: a bad value is named where it was set (the file and line, the variable, the flag),
// and no message carries a Rust type name or serde's words.

/// `commgate ARGS...` (any command) in `dir` with `env`, isolated from the caller's settings.
fn commgate_any(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    commgate_in(dir).args(args).envs(env.iter().copied()).output().expect("runs")
}

/// Words that mean a serde or Rust message reached the user.
const JARGON: [&str; 10] =
    ["struct ", "Sniff", "RawEvent", "enum ", "variant", "sequence", "u32", "u64", "f64", "missing field"];

/// Exit 2, nothing on stdout, and exactly the one line `commgate: error: {expected}…`, free of
/// jargon. Returns the line.
fn assert_error_line(dir: &Path, args: &[&str], env: &[(&str, &str)], expected: &str) -> String {
    let out = commgate_any(dir, args, env);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&out.stdout));
    let line = stderr.strip_suffix('\n').unwrap_or(&stderr);
    assert!(!line.contains('\n'), "more than one line for {args:?}:\n{stderr}");
    assert!(line.starts_with(&format!("commgate: error: {expected}")), "{args:?} {env:?}:\n{line}\nwanted: {expected}");
    for word in JARGON {
        assert!(!line.contains(word), "{args:?}: {word:?} in {line}");
    }
    line.to_string()
}

#[test]
fn settings_file_errors_name_the_file_line_and_column() {
    let dir = TempDir::new().expect("tempdir");
    write(dir.path(), "rank-0.json", RANK_0);
    write(dir.path(), "other.toml", "# mine\n[thresholds]\n  bogus = 1\n");
    assert_error_line(
        dir.path(),
        &["--config", "other.toml", "attribute", "rank-0.json"],
        &[],
        "other.toml:3:3: unknown key `bogus`; expected one of imbalance_ratio, low_overlap_ratio, accept_exposed_ms",
    );
    // The same file through COMMGATE_CONFIG, and a missing one named as the variable.
    assert_error_line(
        dir.path(),
        &["attribute", "rank-0.json"],
        &[("COMMGATE_CONFIG", "other.toml")],
        "other.toml:3:3: ",
    );
    assert_error_line(
        dir.path(),
        &["attribute", "rank-0.json"],
        &[("COMMGATE_CONFIG", "nope.toml")],
        "COMMGATE_CONFIG=nope.toml: cannot read the settings file",
    );
    // The discovered commgate.toml: a choice, a type and a value out of range.
    write(dir.path(), "commgate.toml", "[attribute]\nformat = \"html\"\n");
    assert_error_line(
        dir.path(),
        &["attribute", "rank-0.json"],
        &[],
        "commgate.toml:2:10: unknown value `html`; expected one of text, json, markdown",
    );
    write(dir.path(), "commgate.toml", "[bench]\nrepeats = \"many\"\n");
    assert_error_line(
        dir.path(),
        &["bench", "--dry-run"],
        &[],
        "commgate.toml:2:11: found the string \"many\", expected a whole number ≥ 0",
    );
    write(dir.path(), "commgate.toml", "[bench]\nbackend = \"mock\"\n\n[thresholds]\naccept_exposed_ms = -1\n");
    assert_error_line(
        dir.path(),
        &["attribute", "rank-0.json"],
        &[],
        "commgate.toml:5:1: thresholds.accept_exposed_ms = -1: it must be a finite number of ms ≥ 0",
    );
    write(dir.path(), "commgate.toml", "[attribute]\nsteps = 0\n");
    assert_error_line(dir.path(), &["attribute", "rank-0.json"], &[], "commgate.toml:2:1: attribute.steps = 0: ");
    write(dir.path(), "commgate.toml", "[check]\ntrace_absolute_floor_ms = -2\n");
    assert_error_line(
        dir.path(),
        &["check", "--backend", "mock"],
        &[],
        "commgate.toml:2:1: check.trace_absolute_floor_ms = -2: the fixed trace floors were retired",
    );
    write(dir.path(), "commgate.toml", "[attribute\n");
    assert_error_line(dir.path(), &["attribute", "rank-0.json"], &[], "commgate.toml:1:11: ");
}

#[test]
fn a_bad_variable_is_named_as_the_variable_and_a_bad_flag_as_the_flag() {
    let dir = TempDir::new().expect("tempdir");
    write(dir.path(), "rank-0.json", RANK_0);
    let unknown = "unknown backend; expected one of auto, cuda, cpu, mock";
    assert_error_line(
        dir.path(),
        &["bench", "--dry-run"],
        &[("COMMGATE_BACKEND", "tpu")],
        &format!("COMMGATE_BACKEND=tpu: {unknown}"),
    );
    assert_error_line(
        dir.path(),
        &["check"],
        &[("COMMGATE_BACKEND", "tpu")],
        &format!("COMMGATE_BACKEND=tpu: {unknown}"),
    );
    assert_error_line(
        dir.path(),
        &["bench", "--dry-run", "--backend", "tpu"],
        &[],
        &format!("--backend tpu: {unknown}"),
    );
    // The flag wins over the variable, so a bad flag is named even when the variable is fine…
    assert_error_line(dir.path(), &["bench", "--backend=tpu"], &[("COMMGATE_BACKEND", "mock")], "--backend tpu: ");
    // …and a value the settings check refuses is named the same way.
    assert_error_line(
        dir.path(),
        &["attribute", "rank-0.json"],
        &[("COMMGATE_IMBALANCE_RATIO", "1.5")],
        "COMMGATE_IMBALANCE_RATIO=1.5: it must be a ratio in 0..=1",
    );
    assert_error_line(
        dir.path(),
        &["attribute", "rank-0.json", "--imbalance-ratio", "1.5"],
        &[],
        "--imbalance-ratio 1.5: it must be a ratio in 0..=1",
    );
    assert_error_line(
        dir.path(),
        &["attribute", "rank-0.json"],
        &[("COMMGATE_STEPS", "0")],
        "COMMGATE_STEPS=0: 0 is less than 1",
    );
    assert_error_line(
        dir.path(),
        &["attribute", "rank-0.json"],
        &[("COMMGATE_ACCEPT_EXPOSED_MS", "lots")],
        "COMMGATE_ACCEPT_EXPOSED_MS=lots: not a number",
    );
    assert_error_line(
        dir.path(),
        &["compare", "--baseline", "b.json", "--current", "c.json"],
        &[("COMMGATE_MIN_EFFECT", "2")],
        "COMMGATE_MIN_EFFECT=2: give the smallest change",
    );
    assert_error_line(dir.path(), &["baseline", "update", "--from", "r.json", "--keep", "0"], &[], "--keep 0: ");
}

// ---------------------------------------------------------------------------------------------
// Files of the wrong kind: named as what they are, never in serde's words.

const RESULT: &str = include_str!("fixtures/compare/current-same.json");
const STORE: &str = include_str!("fixtures/compare/baselines/SIM-MOCK/par-overlap-allreduce-matmul.json");

#[test]
fn a_json_value_that_is_not_a_trace_says_what_it_is() {
    let expected = "expected a PyTorch profiler trace (an object with `traceEvents`) or aggregated events";
    for (doc, found) in [
        ("[1, 2]", "a JSON array of numbers"),
        ("[[1]]", "a JSON array of arrays"),
        ("\"rank-0\"", "a JSON string"),
        ("42", "a number"),
        ("{}", "an empty JSON object"),
        ("{\"name\": \"x\"}", "a JSON object without `traceEvents`"),
        (RESULT, "a commgate result file"),
        (STORE, "a commgate baseline file"),
    ] {
        let line = bad_file("x.json", doc, &format!("x.json: is not a profiler trace ({found}); {expected}"));
        for word in JARGON {
            assert!(!line.contains(word), "{word:?} in {line}");
        }
    }
}

#[test]
fn a_malformed_value_inside_a_trace_names_its_place_in_plain_words() {
    for (doc, fragment) in [
        ("{\"traceEvents\": [5]}", "traceEvents[0]: found the number 5, expected an object"),
        ("{\"traceEvents\": [], \"distributedInfo\": 0}", "`distributedInfo`: found the number 0, expected an object"),
        ("{\"events\": [\"all_reduce\"]}", "events[0]: found the string \"all_reduce\", expected an object"),
        ("{\"traceEvents\": [{\"ph\": 5}]}", "traceEvents[0]: found the number 5, expected a string"),
        (
            "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 1, \"dur\": 2, \"args\": 5}]}",
            "traceEvents[0]: `args`: found the number 5, expected an object",
        ),
    ] {
        let line = bad_file("x.json", doc, fragment);
        for word in JARGON {
            assert!(!line.contains(word), "{word:?} in {line}");
        }
    }
}

/// A scratch directory holding the fixtures' baseline store and a check report.
fn check_dir() -> (TempDir, String) {
    let dir = TempDir::new().expect("tempdir");
    let store = dir.path().join("baselines/SIM-MOCK");
    std::fs::create_dir_all(&store).expect("dir");
    write(&store, "par-overlap-allreduce-matmul.json", STORE);
    write(dir.path(), "result.json", RESULT);
    let out = commgate_any(
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
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    (dir, "baselines".to_string())
}

#[test]
fn a_file_of_the_wrong_kind_passed_as_a_result_says_what_it_is() {
    let (dir, store) = check_dir();
    let check = |file: &str| ["check", "--result", file, "--baselines", &store].map(str::to_string);
    let run = |file: &str, expected: &str| {
        let args = check(file);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_error_line(dir.path(), &args, &[], expected)
    };
    let pass = "pass the result (`--result`, `--current` and `--from` take what `commgate bench` writes)";
    run("report.json", &format!("report.json: is a commgate check report, not a commgate result file; {pass}"));
    run(
        "baselines/SIM-MOCK/par-overlap-allreduce-matmul.json",
        "baselines/SIM-MOCK/par-overlap-allreduce-matmul.json: is a commgate baseline file, not a commgate result file; ",
    );
    write(dir.path(), "trace.json", RANK_0);
    run("trace.json", "trace.json: is a PyTorch profiler trace, not a commgate result file; ");
    write(dir.path(), "array.json", "[1]");
    run("array.json", &format!("array.json: is not a commgate result file (a JSON array); {pass}"));
    write(dir.path(), "tool.json", edited(RESULT, |v| v["tool"] = Value::from(5)));
    run("tool.json", "tool.json: `tool`: found the number 5, expected an object");
    write(dir.path(), "cut.json", &RESULT[..RESULT.len() / 2]);
    run("cut.json", "cut.json: is not valid JSON (line ");
    write(dir.path(), "binary.json", [0x7b, 0xff, 0xfe, 0x00]);
    run("binary.json", "binary.json: is not UTF-8 text (byte 1)");
    // The other readers of commgate's files say the same.
    assert_error_line(dir.path(), &["comment", "--report", "result.json"], &[], "result.json: is a commgate result file, not a commgate check report; pass the report that `commgate check --output` wrote");
    assert_error_line(
        dir.path(),
        &["compare", "--baseline", "report.json", "--current", "result.json"],
        &[],
        "report.json: is a commgate check report, not a commgate result file",
    );
    assert_error_line(
        dir.path(),
        &["baseline", "update", "--from", "report.json", "--baselines", "b2"],
        &[],
        "report.json: is a commgate check report, not a commgate result file",
    );
}

#[test]
fn a_gzip_result_is_read_like_a_plain_one() {
    let (dir, store) = check_dir();
    write(dir.path(), "result.json.gz", gzip(RESULT.as_bytes()));
    let out = commgate_any(
        dir.path(),
        &["check", "--result", "result.json.gz", "--baselines", &store, "--format", "json"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["verdict"], "accept");
    let gz = gzip(RESULT.as_bytes());
    write(dir.path(), "cut.json.gz", &gz[..gz.len() / 2]);
    assert_error_line(
        dir.path(),
        &["check", "--result", "cut.json.gz", "--baselines", &store],
        &[],
        "cut.json.gz: the gzip data is corrupt or truncated",
    );
}

/// `commgate ARGS...` (any command) inside `dir` with `env` set, isolated from the caller's
/// settings; asserts the bad-settings contract (exit 2, nothing on stdout, one stderr line that
/// starts with `commgate: error: {expected}`, nothing written in `dir`) and returns the line.
fn refused_setting(dir: &Path, env: &[(&str, &str)], args: &[&str], expected: &str) -> String {
    let mut cmd = commgate_in(dir);
    cmd.args(args).envs(env.iter().copied());
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
        &format!("{config}:2:1: bench.repeats = 3: at least 20 repeats"),
    );
    // A flag beats the file; check reads [compare] from the file alone.
    refused_setting(
        dir.path(),
        &[("COMMGATE_CONFIG", &config)],
        &["check", "--backend", "mock", "--repeats", "200"],
        &format!("{config}:4:1: compare.resamples = 7: "),
    );
    let profile = write(dir.path(), "commgate.toml", "[bench]\nenvironment_profile = \"team/a\"\n");
    assert!(profile.exists());
    refused_setting(
        dir.path(),
        &[],
        &["bench", "--backend", "mock"],
        "commgate.toml:2:1: bench.environment_profile = \"team/a\": ",
    );
}

/// A pull request number outside GitHub's (1..2³¹) is refused before anything is posted.
#[test]
fn a_pull_request_number_out_of_range_is_refused() {
    let tmp = TempDir::new().expect("tempdir");
    for pr in ["0", "18446744073709551615", "2147483648"] {
        let out = commgate_in(tmp.path())
            .args(["comment", "--report", "report.json", "--dry-run", "--pr", pr])
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--pr {pr}: {stderr}");
        assert!(stderr.contains("--pr") && stderr.contains("1..=2147483647"), "{stderr}");
    }
}

/// `--output /dev/null` writes into the device and leaves it a device, never a regular file.
#[test]
fn a_report_written_to_a_device_leaves_the_device_in_place() {
    let tmp = TempDir::new().expect("tempdir");
    write(tmp.path(), "seed.json", SEED);
    let out = commgate(tmp.path(), &["seed.json", "--output", "/dev/null"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let meta = std::fs::symlink_metadata("/dev/null").expect("exists");
    assert!(!meta.file_type().is_file(), "/dev/null is still a device");
}
