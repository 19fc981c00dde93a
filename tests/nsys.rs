//! Nsight Systems exports: the same synthetic timeline as Kineto JSON and as an nsys SQLite
//! export attributes identically (integer ns); one process driving several GPUs gives one rank
//! per GPU; bad inputs exit 2 with one line naming the file and the table; the input is never
//! modified.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};

use commgate_testkit::nsys::{write_all_ranks_sqlite, write_one_process_sqlite, write_rank_sqlite, SCHEMA_VERSION};
use commgate_testkit::synth::{write_all_ranks, SynthSpec};
use commgate_trace::attribute::{AttributeOptions, Attribution, Compat};
use commgate_trace::load::attribute_paths;
use rusqlite::Connection;

mod common;
use common::{commgate, root};

/// Runs `commgate attribute ARGS`, expects exit 2 and one stderr line; returns it.
fn fails_with_one_line(args: &[&str]) -> String {
    let out = commgate().arg("attribute").args(args).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(!stderr.contains("rusqlite") && !stderr.contains("Error {"), "{stderr}");
    stderr
}

/// The attribution with the parts that name files or count source events removed: what must
/// be equal whatever the source.
fn figures(a: &Attribution) -> serde_json::Value {
    let mut v = serde_json::to_value(a).expect("serializes");
    v["source"] = serde_json::Value::Null;
    v["num_events"] = serde_json::Value::Null;
    for r in v["ranks"].as_array_mut().expect("ranks") {
        r["file"] = serde_json::Value::Null;
    }
    v
}

fn spec() -> SynthSpec {
    SynthSpec { world_size: 4, steps: 2, layers: 3, ..SynthSpec::small() }
}

/// A one-rank synthetic export in `dir`, edited by `sql`.
fn edited_export(dir: &Path, sql: &str) -> PathBuf {
    let path = one_rank_export(dir);
    let conn = Connection::open(&path).expect("opens");
    conn.execute_batch(sql).expect("edits the export");
    path
}

/// A one-rank synthetic export, `rank-0.sqlite` in `dir`.
fn one_rank_export(dir: &Path) -> PathBuf {
    let path = dir.join("rank-0.sqlite");
    write_rank_sqlite(&SynthSpec { world_size: 1, straggler_rank: 0, ..spec() }, 0, &path).expect("writes");
    path
}

fn kineto_and_nsys(dir: &Path, spec: &SynthSpec) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let json = write_all_ranks(spec, &dir.join("kineto"), false).expect("kineto");
    let sqlite = write_all_ranks_sqlite(spec, &dir.join("nsys")).expect("nsys");
    (json, sqlite)
}

#[test]
fn the_same_timeline_attributes_identically_from_both_sources() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, spec) in [("fractional", spec()), ("whole_us", SynthSpec { fractional_ts: false, ..spec() })] {
        let (json, sqlite) = kineto_and_nsys(&dir.path().join(name), &spec);
        for compat in [Compat::Default, Compat::Hta] {
            let opts = AttributeOptions { compat, ..AttributeOptions::default() };
            let from_json = attribute_paths(&json, &opts).expect("kineto attributes");
            let from_nsys = attribute_paths(&sqlite, &opts).expect("nsys attributes");
            assert_eq!(figures(&from_json), figures(&from_nsys), "{name} {compat:?}");
            assert!(!from_json.by_collective.is_empty());
            assert!(
                from_nsys.by_collective.values().any(|h| h.payload_bytes.is_some_and(|b| b > 0)),
                "payloads from NVTX jsonText"
            );
            assert_eq!(from_nsys.source.format, format!("nsys-sqlite {SCHEMA_VERSION}"));
            assert_eq!(from_nsys.source.ranks, vec![0, 1, 2, 3]);
            assert_eq!(from_nsys.source.steps, from_json.source.steps);
            assert_eq!(from_nsys.source.window, from_json.source.window);
        }
    }
}

#[test]
fn one_process_driving_several_gpus_is_one_rank_per_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = spec();
    let (json, _) = kineto_and_nsys(dir.path(), &spec);
    let one = dir.path().join("job.sqlite");
    write_one_process_sqlite(&spec, &one).expect("writes");
    let opts = AttributeOptions::default();
    let from_json = attribute_paths(&json, &opts).expect("kineto");
    let from_one = attribute_paths(std::slice::from_ref(&one), &opts).expect("nsys");
    assert_eq!(from_one.source.ranks, vec![0, 1, 2, 3]);
    // One process marks one set of steps for all its GPUs, so every device's step times are that
    // process's; the per-rank exports mark each rank's own. Everything else is identical.
    let step_times = |a: &Attribution| a.ranks.iter().map(|r| r.step_ms.clone()).collect::<Vec<_>>();
    let shared = step_times(&from_one);
    assert!(shared.windows(2).all(|w| w[0] == w[1]), "one process, one set of steps: {shared:?}");
    let without_steps = |a: &Attribution| {
        let mut v = figures(a);
        for r in v["ranks"].as_array_mut().expect("ranks") {
            r["step_ms"] = serde_json::Value::Null;
        }
        v
    };
    assert_eq!(without_steps(&from_json), without_steps(&from_one));
}

#[test]
fn the_binary_names_the_format_and_leaves_the_file_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = one_rank_export(dir.path());
    let before = std::fs::read(&path).expect("reads");
    let mtime = std::fs::metadata(&path).and_then(|m| m.modified()).expect("mtime");
    let listing = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d).expect("lists").map(|e| e.expect("entry").file_name()).collect();
        v.sort();
        v
    };
    let entries = listing(dir.path());
    let out = commgate().args(["attribute", "--format", "json"]).arg(&path).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["source"]["format"], format!("nsys-sqlite {SCHEMA_VERSION}"));
    let text = commgate().arg("attribute").arg(&path).output().expect("runs");
    assert!(String::from_utf8_lossy(&text.stdout).contains("nsys-sqlite"), "the text report names the source");
    assert_eq!(std::fs::read(&path).expect("reads"), before, "bytes unchanged");
    assert_eq!(std::fs::metadata(&path).and_then(|m| m.modified()).expect("mtime"), mtime, "mtime unchanged");
    assert_eq!(listing(dir.path()), entries, "no -wal, -shm or journal file created");
}

#[test]
fn a_sqlite_file_that_is_not_sqlite_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rank-0.sqlite");
    std::fs::write(&path, b"this is no database").expect("writes");
    let line = fails_with_one_line(&[path.to_str().expect("utf-8")]);
    assert!(line.contains("rank-0.sqlite") && line.contains("not an SQLite database"), "{line}");
}

#[test]
fn an_export_without_the_kernel_table_names_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rank-0.sqlite");
    Connection::open(&path)
        .and_then(|c| c.execute_batch("CREATE TABLE StringIds (id INTEGER, value TEXT);"))
        .expect("db");
    let line = fails_with_one_line(&[path.to_str().expect("utf-8")]);
    assert!(line.contains("rank-0.sqlite") && line.contains("CUPTI_ACTIVITY_KIND_KERNEL"), "{line}");
}

#[test]
fn a_truncated_export_is_refused_as_damaged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = one_rank_export(dir.path());
    let bytes = std::fs::read(&path).expect("reads");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("truncates");
    let line = fails_with_one_line(&[path.to_str().expect("utf-8")]);
    assert!(line.contains("rank-0.sqlite") && line.contains("damaged or truncated"), "{line}");
}

#[test]
fn a_json_text_that_does_not_parse_names_the_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = edited_export(dir.path(), "UPDATE NVTX_EVENTS SET jsonText = '{\"Seq\": ' WHERE rowid = 3");
    let line = fails_with_one_line(&[path.to_str().expect("utf-8")]);
    assert!(line.contains("NVTX_EVENTS row 3: jsonText is not JSON"), "{line}");
}

/// A `deviceId` that is no GPU's index, and times at i64's ends (whose difference overflowed to
/// a negative communication time), name their row.
#[test]
fn device_ids_and_times_out_of_range_name_the_row() {
    for (update, says) in [
        ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = -1 WHERE rowid = 1", "`deviceId` (-1) is not a GPU's index"),
        ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 4294967295 WHERE rowid = 1", "`deviceId` (4294967295)"),
        (
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -9223372036854775808, end = 9223372036854775807 WHERE rowid = 1",
            "`start` (-9223372036854775808) is out of range",
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = edited_export(dir.path(), update);
        let line = fails_with_one_line(&[path.to_str().expect("utf-8")]);
        assert!(line.contains("CUPTI_ACTIVITY_KIND_KERNEL row 1") && line.contains(says), "{line}");
    }
}

/// A string table without an index (every name looked up from the host scanned it: hours for
/// tens of thousands of names) and a 5 MB name: the names come through SQLite's own lookup, cut
/// to the name limit before they leave it.
#[test]
fn a_string_table_without_an_index_and_huge_names_stay_cheap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = one_rank_export(dir.path());
    let conn = Connection::open(&path).expect("opens");
    conn.execute_batch(
        "CREATE TABLE s2 (id INTEGER, value TEXT); INSERT INTO s2 SELECT id, value FROM StringIds; \
         DROP TABLE StringIds; ALTER TABLE s2 RENAME TO StringIds;",
    )
    .expect("an unindexed table");
    let n = 20_000;
    // Each kernel at the export's own times (an export spans one profile).
    let t0: i64 =
        conn.query_row("SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_KERNEL", [], |r| r.get(0)).expect("a kernel");
    conn.execute_batch(&format!(
        "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < {last}) \
         INSERT INTO StringIds (id, value) SELECT 1000000 + i, 'kernel_' || i FROM c; \
         WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < {last}) \
         INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, demangledName, shortName) \
         SELECT {t0} + i * 10, {t0} + i * 10 + 5, 0, 7, 1000000 + i, 1000000 + i FROM c;",
        last = n - 1
    ))
    .expect("many names and kernels");
    conn.execute("INSERT INTO StringIds (id, value) VALUES (2000000, ?1)", ["x".repeat(5 << 20)]).expect("huge");
    conn.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, demangledName, shortName) \
         VALUES (?1, ?1 + 1, 0, 7, 2000000, 2000000)",
        [t0],
    )
    .expect("kernel");
    drop(conn);
    let a = attribute_paths(std::slice::from_ref(&path), &AttributeOptions::default()).expect("attributes");
    assert!(a.source.names_truncated, "the 5 MB name was cut");
    assert!(a.num_events > n as u64);
}

/// A string table whose names are a generated column: a virtual one is computed on every read,
/// so a small file could make each name hundreds of megabytes (43 such names took 25 s). Nsight
/// Systems never writes one: refused, naming the table and column, before any name is read.
#[test]
fn a_generated_column_is_refused_before_it_is_computed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = edited_export(
        dir.path(),
        "CREATE TABLE s2 (id INTEGER PRIMARY KEY, v TEXT, \
           value TEXT GENERATED ALWAYS AS (v || printf('%.*c', 200000000, 'x')) VIRTUAL); \
         INSERT INTO s2 (id, v) SELECT id, value FROM StringIds; \
         DROP TABLE StringIds; ALTER TABLE s2 RENAME TO StringIds;",
    );
    let line = fails_with_one_line(&[path.to_str().expect("utf-8")]);
    assert!(line.contains("StringIds has a generated column `value`"), "{line}");
}

/// Kernels of hundreds of GPUs in one export (each GPU a rank with its own names): refused.
#[test]
fn an_export_of_hundreds_of_gpus_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = edited_export(
        dir.path(),
        "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < 299) \
         INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, demangledName, shortName) \
         SELECT i, i + 1, i, 7, 1, 1 FROM c;",
    );
    let line = fails_with_one_line(&[path.to_str().expect("utf-8")]);
    assert!(line.contains("holds kernels of 300 GPUs"), "{line}");
}

#[test]
fn a_report_without_nsys_on_path_gives_the_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.nsys-rep");
    std::fs::write(&path, b"\x00\x01not an export").expect("writes");
    let out = commgate().env("PATH", dir.path()).arg("attribute").arg(&path).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("nsys export --type sqlite --output") && stderr.contains("run.sqlite"), "{stderr}");
}

#[test]
fn the_events_limit_counts_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = one_rank_export(dir.path());
    let line = fails_with_one_line(&["--max-events", "10", path.to_str().expect("utf-8")]);
    assert!(line.contains("the limit per file"), "{line}");
}

#[test]
fn kineto_and_nsys_inputs_are_not_mixed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (json, sqlite) = kineto_and_nsys(dir.path(), &SynthSpec { world_size: 2, straggler_rank: 0, ..spec() });
    let line = fails_with_one_line(&[json[0].to_str().expect("utf-8"), sqlite[1].to_str().expect("utf-8")]);
    assert!(line.contains("separately"), "{line}");
}

/// A repository-like directory for the gate: a copy of the committed mock baseline store under
/// `baselines/` and four ranks' nsys exports under `nsys/`.
fn gate_checkout() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = root();
    let store = dir.path().join("baselines/PAR-MOCK");
    std::fs::create_dir_all(&store).expect("mkdir");
    let file = "par-overlap-allreduce-matmul.json";
    std::fs::copy(root.join("baselines/PAR-MOCK").join(file), store.join(file)).expect("copies the store");
    write_all_ranks_sqlite(&spec(), &dir.path().join("nsys")).expect("nsys");
    dir
}

fn stored_traces(dir: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(dir.join("baselines/PAR-MOCK/par-overlap-allreduce-matmul.json")).expect("store");
    serde_json::from_str::<serde_json::Value>(&text).expect("JSON")["traces"].clone()
}

#[test]
fn baseline_update_and_check_take_a_directory_of_nsys_exports() {
    let dir = gate_checkout();
    let in_dir = |args: &[&str]| {
        let mut cmd = commgate();
        cmd.current_dir(dir.path()).args(args).output().expect("runs")
    };
    let update = in_dir(&[
        "baseline",
        "update",
        "--traces",
        "nsys",
        "--name",
        "nsys-nightly",
        "--environment-profile",
        "PAR-MOCK",
        "--baselines",
        "baselines",
    ]);
    assert_eq!(update.status.code(), Some(0), "{}", String::from_utf8_lossy(&update.stderr));
    let traces = stored_traces(dir.path());
    assert_eq!(traces["nsys-nightly"][0]["source"]["format"], format!("nsys-sqlite {SCHEMA_VERSION}"), "{traces}");
    assert!(traces.get("default").is_some(), "the committed trace runs are kept beside it");

    // The committed trace runs are another job (8 ranks): the 4-rank exports cannot join them.
    let refused = in_dir(&["baseline", "update", "--traces", "nsys", "--environment-profile", "PAR-MOCK"]);
    assert_eq!(refused.status.code(), Some(2), "{}", String::from_utf8_lossy(&refused.stderr));
    // The gate's first command with the exports in place of Kineto traces, judged against a
    // trace run of the same exports.
    let check =
        in_dir(&["check", "--backend", "mock", "--traces", "nsys", "--trace-name", "nsys-nightly", "--format", "json"]);
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&check.stdout).expect("JSON report");
    assert_eq!(report["attribution"]["source"]["format"], format!("nsys-sqlite {SCHEMA_VERSION}"), "{report}");
    assert_eq!(report["attribution"]["source"]["ranks"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(report["trace_comparison"]["name"], "nsys-nightly", "{report}");
    assert!(report["trace_comparison"]["collectives"].as_array().is_some_and(|c| c.len() == 3), "{report}");
}
