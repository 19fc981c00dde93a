//! NCCL Inspector logs: the same synthetic timeline as Kineto JSON and as Inspector logs gives
//! the same per-collective transfer, wait and bus bandwidth; overlap and exposed time read as
//! not measured; bad logs exit 2 with one line naming the file, the line and the fix.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};

use commgate_testkit::inspector::{write_all_ranks_logs, FORMAT_VERSION};
use commgate_testkit::synth::{write_all_ranks, SynthSpec};
use commgate_trace::attribute::{AttributeOptions, Attribution, StepsSetting};
use commgate_trace::load::attribute_paths;

mod common;
use common::commgate_in as commgate;

/// Runs `commgate attribute PATH` in `dir`, expects exit 2 and one stderr line; returns it.
fn fails_with_one_line(dir: &Path, path: &str) -> String {
    let out = commgate(dir).args(["attribute", path]).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{path}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

fn spec() -> SynthSpec {
    SynthSpec { world_size: 4, steps: 2, layers: 3, fractional_ts: false, ..SynthSpec::small() }
}

fn both(dir: &Path, spec: &SynthSpec) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let json = write_all_ranks(spec, &dir.join("kineto"), false).expect("kineto");
    let logs = write_all_ranks_logs(spec, &dir.join("inspector")).expect("inspector");
    (json, logs)
}

/// Attributes the logs with the Kineto attribution's step count: the logs have no step
/// markers, so the per-step figures divide by the count given, as `--steps N` does.
fn attribute_both(json: &[PathBuf], logs: &[PathBuf]) -> (Attribution, Attribution) {
    let from_json = attribute_paths(json, &AttributeOptions::default()).expect("kineto attributes");
    let opts = AttributeOptions { steps: Some(StepsSetting::new(from_json.source.steps)), ..Default::default() };
    let from_logs = attribute_paths(logs, &opts).expect("inspector attributes");
    (from_json, from_logs)
}

#[test]
fn the_same_timeline_gives_the_same_transfer_wait_and_busbw() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (json, logs) = both(dir.path(), &spec());
    let (from_json, from_logs) = attribute_both(&json, &logs);
    assert_eq!(from_logs.source.format, format!("nccl_inspector {FORMAT_VERSION}"));
    assert!(!from_logs.source.compute_observed);
    assert_eq!(from_logs.source.ranks, vec![0, 1, 2, 3]);
    assert_eq!(from_logs.source.world_size, 4);
    let names = |a: &Attribution| a.by_collective.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&from_json), names(&from_logs));
    assert!(from_json.by_collective.len() >= 2, "{:?}", names(&from_json));
    // Whole microseconds, as the plugin writes them: every figure is the same integer nanoseconds
    // divided the same way, so equal to the last bit.
    for (name, k) in &from_json.by_collective {
        let i = &from_logs.by_collective[name];
        assert_eq!(k.transfer_ms, i.transfer_ms, "{name} transfer");
        assert_eq!(k.wait_ms, i.wait_ms, "{name} wait");
        assert_eq!(k.busbw_gbps, i.busbw_gbps, "{name} busbw");
        assert_eq!(k.payload_bytes, i.payload_bytes, "{name} payload");
        assert_eq!((k.last_arrival_rank, k.last_arrival_share), (i.last_arrival_rank, i.last_arrival_share));
        assert_eq!((k.count, k.unmatched, k.total_comm_ms), (i.count, i.unmatched, i.total_comm_ms), "{name}");
        assert!(k.transfer_ms.is_some() && k.sizes.is_empty(), "{name}: traces keep no size buckets");
        assert!(!i.sizes.is_empty(), "{name}: logs have size buckets");
        assert_eq!(i.sizes.iter().map(|b| b.count).sum::<u64>(), i.count, "{name}: every call in a bucket");
    }
}

#[test]
fn fractional_durations_are_cut_to_whole_microseconds() {
    // The plugin writes `coll_exec_time_us` as an integer (GPU nanoseconds / 1000), so a trace with
    // nanosecond durations loses under 1 µs per call: transfer and wait agree within that.
    let dir = tempfile::tempdir().expect("tempdir");
    let (json, logs) = both(dir.path(), &SynthSpec { fractional_ts: true, ..spec() });
    let (from_json, from_logs) = attribute_both(&json, &logs);
    for (name, k) in &from_json.by_collective {
        let i = &from_logs.by_collective[name];
        let calls_per_step = k.count as f64 / 4.0 / from_json.source.steps as f64;
        let bound = calls_per_step * 0.001 * 2.0;
        let (a, b) = (k.transfer_ms.expect("transfer"), i.transfer_ms.expect("transfer"));
        assert!((a - b).abs() <= bound, "{name}: {a} vs {b}");
        let (a, b) = (k.wait_ms.expect("wait"), i.wait_ms.expect("wait"));
        assert!((a - b).abs() <= bound, "{name}: {a} vs {b}");
    }
}

#[test]
fn reports_show_overlap_and_exposed_as_not_measured() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_all_ranks_logs(&spec(), &dir.path().join("logs")).expect("writes");
    let run = |format: &str| {
        let out = commgate(dir.path()).args(["attribute", "logs", "--steps", "2", "--format", format]).output();
        let out = out.expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let text = run("text");
    assert!(text.contains("Note: NCCL Inspector logs have no compute kernels"), "{text}");
    insta::assert_snapshot!("inspector_text", text);
    let markdown = run("markdown");
    assert!(markdown.contains("Per message size"), "{markdown}");
    insta::assert_snapshot!("inspector_markdown", markdown);
    let v: serde_json::Value = serde_json::from_str(&run("json")).expect("JSON");
    assert_eq!(v["source"]["compute_observed"], false);
    let all_reduce = &v["by_collective"]["all_reduce"];
    assert!(all_reduce["exposed_comm_ms"].is_null() && all_reduce["overlap_ratio"].is_null(), "{all_reduce}");
    assert!(all_reduce["transfer_ms"].is_number());
    assert!(v["ranks"][0]["exposed_ms"].is_null() && v["ranks"][0]["comm_ms"].is_number());
    assert!(all_reduce["sizes"][0]["busbw_gbps_median"].is_number(), "{all_reduce}");
}

#[test]
fn a_directory_is_searched_for_the_plugins_log_names_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    write_all_ranks_logs(&spec(), &logs).expect("writes");
    std::fs::write(logs.join("train.log"), "epoch 1 loss 2.3\n").expect("writes");
    let out = commgate(dir.path()).args(["attribute", "logs", "--format", "json"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["source"]["files"].as_array().map(Vec::len), Some(4));
}

#[test]
fn gzip_logs_read_like_plain_ones() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = write_all_ranks_logs(&spec(), &dir.path().join("plain")).expect("writes");
    let gz_dir = dir.path().join("gz");
    std::fs::create_dir_all(&gz_dir).expect("mkdir");
    let mut gz = Vec::new();
    for path in &logs {
        let name = format!("{}.gz", path.file_name().and_then(|n| n.to_str()).expect("name"));
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&std::fs::read(path).expect("reads")).expect("compresses");
        std::fs::write(gz_dir.join(&name), enc.finish().expect("finishes")).expect("writes");
        gz.push(gz_dir.join(name));
    }
    let opts = AttributeOptions::default();
    let plain = attribute_paths(&logs, &opts).expect("plain");
    let zipped = attribute_paths(&gz, &opts).expect("gzip");
    assert_eq!(plain.by_collective, zipped.by_collective);
}

/// Writes rank 0's log of a one-rank run into `dir` with `edit` applied to its text.
fn broken_log(dir: &Path, edit: impl Fn(String) -> String) -> String {
    let logs = write_all_ranks_logs(&SynthSpec { world_size: 1, straggler_rank: 0, ..spec() }, &dir.join("w"))
        .expect("writes");
    let text = std::fs::read_to_string(&logs[0]).expect("reads");
    std::fs::write(dir.join("node0-pid1000.log"), edit(text)).expect("writes");
    "node0-pid1000.log".to_string()
}

#[test]
fn a_line_cut_in_half_names_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = broken_log(dir.path(), |t| {
        let second_start = t.find('\n').expect("two lines") + 1;
        let second_len = t[second_start..].find('\n').expect("ends");
        format!("{}{}", &t[..second_start + second_len / 2], &t[second_start + second_len..])
    });
    let line = fails_with_one_line(dir.path(), &path);
    assert!(line.contains("node0-pid1000.log: line 2 ends inside its record"), "{line}");
    assert!(line.contains("copy the log again"), "{line}");
}

#[test]
fn a_non_numeric_time_names_the_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = broken_log(dir.path(), |t| {
        let at = t.find("\"coll_exec_time_us\":").expect("field") + "\"coll_exec_time_us\":".len();
        let end = at + t[at..].find(',').expect("comma");
        format!("{}\"12us\"{}", &t[..at], &t[end..])
    });
    let line = fails_with_one_line(dir.path(), &path);
    assert!(line.contains("line 1: `coll_perf.coll_exec_time_us` is the string \"12us\""), "{line}");
}

#[test]
fn a_missing_field_names_the_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = broken_log(dir.path(), |t| {
        let mut lines: Vec<String> = t.lines().map(str::to_string).collect();
        let at = lines[2].find("\"coll_sn\":").expect("field");
        let end = at + lines[2][at..].find(',').expect("comma") + 1;
        lines[2].replace_range(at..end, "");
        lines.join("\n")
    });
    let line = fails_with_one_line(dir.path(), &path);
    assert!(line.contains("line 3: `coll_perf.coll_sn` is missing"), "{line}");
}

#[test]
fn an_empty_log_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("node0-pid7.log"), "").expect("writes");
    let line = fails_with_one_line(dir.path(), "node0-pid7.log");
    assert!(line.contains("node0-pid7.log: holds no NCCL Inspector records"), "{line}");
}

#[test]
fn kineto_and_inspector_inputs_are_not_mixed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (json, logs) = both(dir.path(), &SynthSpec { world_size: 2, straggler_rank: 0, ..spec() });
    let out = commgate(dir.path()).arg("attribute").arg(&json[0]).arg(&logs[1]).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("attribute Kineto traces and NCCL Inspector logs separately"), "{stderr}");
}
