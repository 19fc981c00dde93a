//! The trace-bomb families at a small scale: a huge string under an ignored key, a huge kept
//! name, more events than the limit, and many distinct step and collective names. Each must be
//! read correctly (or refused with exit 2 naming the file), never built whole in memory.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::io::Write;
use std::path::Path;

use commgate_trace::attribute::AttributeOptions;
use commgate_trace::kineto::{parse_document_with, Document};
use commgate_trace::limits::{
    ReadLimits, MAX_DISTINCT_COLLECTIVES, MAX_NAME_BYTES, OTHER_COLLECTIVES, TRUNCATION_MARK,
};
use commgate_trace::load::attribute_paths;
use commgate_trace::model::RankTrace;

mod common;
use common::commgate;

/// Larger than the size parsed in place (1 MiB), so the byte-by-byte scan is what reads it.
const HUGE: usize = 3 << 20;

fn kernel(name: &str, ts: u64, args: &str) -> String {
    format!(r#"{{"ph":"X","cat":"kernel","name":"{name}","pid":0,"tid":7,"ts":{ts},"dur":5,"args":{{{args}}}}}"#)
}

fn step(n: u64) -> String {
    format!(r#"{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{n}","pid":1,"tid":1,"ts":{},"dur":5}}"#, n * 10)
}

fn trace(events: &[String], extra_top: &str) -> String {
    format!(r#"{{{extra_top}"traceEvents":[{}],"distributedInfo":{{"rank":0,"world_size":1}}}}"#, events.join(","))
}

fn rank(doc: &str) -> RankTrace {
    match parse_document_with(doc.as_bytes(), ReadLimits::default()) {
        Ok(Document::Timeline(t)) => *t,
        other => panic!("expected a trace, got {other:?}"),
    }
}

fn write(dir: &Path, name: &str, doc: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    let mut gz =
        flate2::write::GzEncoder::new(std::fs::File::create(&path).expect("create"), flate2::Compression::fast());
    gz.write_all(doc.as_bytes()).expect("write");
    gz.finish().expect("finish");
    path
}

#[test]
fn a_huge_string_under_an_ignored_key_is_skipped() {
    let junk = "x".repeat(HUGE);
    let event = format!(
        r#"{{"ph":"X","cat":"kernel","junk":"{junk}","name":"ncclDevKernel_AllReduce","pid":0,"tid":7,"ts":1,"dur":5,"args":{{"more":"{junk}","Collective name":"allreduce"}}}}"#
    );
    let t = rank(&trace(&[event, kernel("gemm", 2, "")], &format!(r#""deviceProperties":"{junk}","#)));
    assert_eq!(t.kernels.len(), 2);
    assert_eq!(t.kernel_name(&t.kernels[0]), "ncclDevKernel_AllReduce");
    let meta = t.kernels[0].meta.as_deref().expect("args read past the junk");
    assert_eq!(meta.collective.as_deref(), Some("allreduce"));
    assert!(!t.names_truncated);
}

#[test]
fn a_huge_kept_name_is_truncated_with_a_mark_and_a_note() {
    let name = format!("nccl{}", "é".repeat(HUGE / 2));
    let t = rank(&trace(&[kernel(&name, 1, r#""Collective name":"allreduce""#)], ""));
    let kept = t.kernel_name(&t.kernels[0]);
    assert!(kept.len() <= MAX_NAME_BYTES + TRUNCATION_MARK.len() && kept.ends_with(TRUNCATION_MARK), "{}", kept.len());
    assert!(t.names_truncated);
    // A long name that still fits the in-place parse is cut the same way.
    let t = rank(&trace(&[kernel(&"k".repeat(10_000), 1, "")], ""));
    assert_eq!(t.kernel_name(&t.kernels[0]), format!("{}{TRUNCATION_MARK}", "k".repeat(MAX_NAME_BYTES)));

    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "rank-0.json.gz", &trace(&[kernel(&name, 1, r#""Collective name":"allreduce""#)], ""));
    let out = commgate().args(["attribute", "--format", "json"]).arg(&path).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["source"]["names_truncated"], true);
    let text = commgate().args(["attribute"]).arg(&path).output().expect("runs");
    assert!(String::from_utf8_lossy(&text.stdout).contains("were cut"), "the text report carries the note");
}

#[test]
fn more_events_than_the_limit_exit_2_naming_the_file_and_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let events: Vec<String> = (0..10).map(|i| kernel("gemm", i, "")).collect();
    let path = write(dir.path(), "rank-0.json.gz", &trace(&events, ""));
    for (flag, env) in [(Some("--max-events=9"), None), (None, Some("9"))] {
        let mut cmd = commgate();
        cmd.arg("attribute").arg(&path).args(flag);
        if let Some(v) = env {
            cmd.env("COMMGATE_MAX_EVENTS", v);
        }
        let out = cmd.output().expect("runs");
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("rank-0.json.gz") && err.contains("more than 9 events") && err.contains("--max-events"),
            "{err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    let settings = dir.path().join("commgate.toml");
    std::fs::write(&settings, "[attribute]\nmax_events = 9\n").expect("settings");
    let out = commgate().arg("attribute").arg(&path).arg("--config").arg(&settings).output().expect("runs");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    commgate().args(["attribute", "--max-events", "10"]).arg(&path).assert().success();
}

#[test]
fn many_distinct_step_and_collective_names_are_attributed() {
    const STEPS: u64 = 20_000;
    const COLLECTIVES: u64 = 5_000;
    let mut events: Vec<String> = (0..STEPS).map(step).collect();
    for i in 0..COLLECTIVES {
        events.push(kernel(
            "ncclDevKernel_Generic",
            1 + i * 10,
            &format!(r#""Collective name":"custom{i}","Process Group Name":"0","Seq":{i}"#),
        ));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "rank-0.json.gz", &trace(&events, ""));
    // Rank 1 the same kernels, and one CPU op more: two GPUs' traces are never copies.
    events.push(r#"{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":3,"dur":1}"#.to_string());
    write(
        dir.path(),
        "rank-1.json.gz",
        &trace(&events, "").replace(r#""rank":0,"world_size":1"#, r#""rank":1,"world_size":2"#),
    );
    let a = attribute_paths(&[dir.path().to_path_buf()], &AttributeOptions::default()).expect("attributes");
    assert_eq!(a.source.steps, STEPS - 1);
    assert_eq!(a.source.window, "steps");
    // The kernels launched before the last step's start are in the window.
    let in_window = (0..COLLECTIVES).filter(|i| 1 + i * 10 < (STEPS - 1) * 10).count();
    assert_eq!(a.by_collective.len(), in_window);
    let h = &a.by_collective["custom42"];
    assert_eq!(h.count, 2);
    assert_eq!(h.rank_imbalance_ratio, Some(0.0), "matched on both ranks, equal durations");
}

#[test]
fn collective_names_past_the_limit_are_folded_into_one_row_with_a_note() {
    let extra = 7u64;
    let total = MAX_DISTINCT_COLLECTIVES as u64 + extra;
    let events: Vec<String> = (0..total)
        .map(|i| {
            kernel(
                "ncclDevKernel_Generic",
                1 + i * 10,
                &format!(r#""Collective name":"custom{i}","Process Group Name":"0","Seq":{i}"#),
            )
        })
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "rank-0.json.gz", &trace(&events, ""));
    let a = attribute_paths(&[dir.path().to_path_buf()], &AttributeOptions::default()).expect("attributes");
    // The first names (in time) keep their rows; the rest share one.
    assert_eq!(a.by_collective.len(), MAX_DISTINCT_COLLECTIVES + 1);
    assert!(a.by_collective.contains_key("custom0"));
    assert!(!a.by_collective.contains_key(&format!("custom{}", total - 1)));
    assert_eq!(a.by_collective[OTHER_COLLECTIVES].count, extra);
    assert_eq!(a.source.collectives_folded, extra);
    let notes = a.source.notes();
    assert!(
        notes.iter().any(|n| n.starts_with(&format!("{extra} kernels of collectives past the first"))),
        "{notes:?}"
    );
}

#[test]
fn aggregated_events_get_the_same_name_bounds() {
    use commgate_trace::attribute::{attribute_events, CommEvent};
    let extra = 3usize;
    let mut events: Vec<CommEvent> =
        (0..MAX_DISTINCT_COLLECTIVES + extra).map(|i| CommEvent::new(&format!("c{i}"), 1.0, 8.0, 0.5)).collect();
    events.insert(0, CommEvent::new(&format!("x{TRUNCATION_MARK}"), 1.0, 8.0, 0.5));
    let a = attribute_events(vec!["seed.json".into()], &events);
    assert_eq!(a.by_collective.len(), MAX_DISTINCT_COLLECTIVES + 1);
    assert_eq!(a.source.collectives_folded, extra as u64 + 1);
    assert!(a.source.names_truncated, "a cut name (ending in the mark) is noted");
}

/// A gzip file that expands past 64× its size (once past 64 MiB) is refused as a
/// decompression bomb, with one line that says what to do, by every reader of gzip input: a
/// Kineto trace, an NCCL Inspector log, a result file. Built from one compressed member of 1 MiB of blank
/// lines repeated (gzip allows several members), so the test compresses 1 MiB only.
#[test]
fn a_gzip_bomb_is_refused_with_exit_2_and_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let member = |bytes: &[u8]| {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(bytes).expect("compress");
        gz.finish().expect("finish")
    };
    let spaces = member(&vec![b'\n'; 1 << 20]);
    for (name, head) in [
        ("rank-0.json.gz", &br#"{"traceEvents":["#[..]),
        ("result.json.gz", &br#"{"schema_version": 2, "runs": ["#[..]),
        (
            "inspector.log.gz",
            &br#"{"header":{"id":"0x1","rank":0,"n_ranks":2,"nnodes":1},"coll_perf":{"coll":"AllReduce","coll_sn":1,"coll_msg_size_bytes":1024,"coll_exec_time_us":10}}
"#[..],
        ),
    ] {
        let path = dir.path().join(name);
        let mut bytes = member(head);
        for _ in 0..80 {
            bytes.extend_from_slice(&spaces);
        }
        std::fs::write(&path, &bytes).expect("write");
        let out = match name {
            "result.json.gz" => commgate().arg("compare").arg("--baseline").arg(&path).arg("--current").arg(&path).output(),
            _ => commgate().arg("attribute").arg(&path).output(),
        }
        .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains(name) && err.contains("decompression bomb") && err.contains("gunzip") && !err.contains("corrupt"),
            "{name}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// Times each within ±2^61 ns but further apart than one profile can be (a step marker 12 days
/// after the kernels): exit 2 naming the file and the span, never a step of 10^9 ms printed.
#[test]
fn a_trace_spanning_more_than_any_profile_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let twelve_days_us: u64 = 12 * 86_400 * 1_000_000;
    let mut events: Vec<String> = (0..4).map(|i| kernel("ncclDevKernel_AllReduce", 10 + i * 20, "")).collect();
    events.push(step(1));
    let fine = write(dir.path(), "rank-0.json.gz", &trace(&events, ""));
    commgate().arg("attribute").arg(&fine).assert().success();
    events.push(format!(
        r#"{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#2","pid":1,"tid":1,"ts":{twelve_days_us},"dur":5}}"#
    ));
    let far = write(dir.path(), "rank-1.json.gz", &trace(&events, ""));
    let out = commgate().arg("attribute").arg(&far).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("rank-1.json.gz") && err.contains("spans 12.0 days") && err.contains("11.6 days"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// One trace under two ranks' names (a copy over another rank's file, which would hide that
/// rank's own figures): exit 2 naming both files.
#[test]
fn a_trace_copied_under_another_ranks_name_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let events: Vec<String> = (0..4).map(|i| kernel("ncclDevKernel_AllReduce", 10 + i * 20, "")).collect();
    let doc = format!(r#"{{"traceEvents":[{}]}}"#, events.join(","));
    let (a, b) = (write(dir.path(), "rank-0.json.gz", &doc), write(dir.path(), "rank-1.json.gz", &doc));
    let out = commgate().arg("attribute").arg(&a).arg(&b).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("rank-1.json.gz") && err.contains("rank-0.json.gz") && err.contains("one is a copy"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
