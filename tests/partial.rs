//! Scale-out attribution: ranks reduced to partial files where their traces are, then combined.
//! Combining equals attributing every rank on one machine, figure for figure, on random splits
//! of synthetic jobs (Kineto, Nsight Systems, NCCL Inspector, both `--compat` rules) and on the
//! real traces of the HTA fixtures; through the binary, a missing partial file is reported as a
//! partial rank set, and a duplicated, damaged or differently-set one is an error naming it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};

use commgate_testkit::synth::{write_all_ranks, write_rank, SynthSpec};
use commgate_testkit::{inspector::write_all_ranks_logs, nsys::write_all_ranks_sqlite};
use commgate_trace::attribute::{AttributeOptions, Attribution, Compat, StepsSetting};
use commgate_trace::load::{attribute_paths, partial_paths};
use commgate_trace::partial::encode;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

mod common;
use common::{commgate, root};

/// 8 ranks with a straggler, an exposed `all_to_all` and overlapped all-reduces; rank 7 is
/// captured without complete steps (one `ProfilerStep` name), so that under HTA's rules its
/// window depends on the other ranks' names and a partial file must carry its second analysis.
fn job(dir: &Path) -> Vec<PathBuf> {
    let spec = SynthSpec { world_size: 8, straggler_rank: 5, ..SynthSpec::small() };
    let mut files = write_all_ranks(&spec, dir, false).expect("traces");
    let short = SynthSpec { steps: 0, ..spec.clone() };
    let last = files.pop().expect("rank 7");
    write_rank(&short, 7, std::fs::File::create(&last).expect("create")).expect("rank 7");
    files.push(last);
    files
}

fn options(compat: Compat) -> AttributeOptions {
    AttributeOptions { compat, ..AttributeOptions::default() }
}

/// Splits `files` by `groups` (a group per file), writes one partial file per group and
/// attributes them.
fn combined(files: &[PathBuf], groups: &[usize], gzip: bool, opts: &AttributeOptions, out: &Path) -> Attribution {
    std::fs::create_dir_all(out).expect("dir");
    let mut partials = Vec::new();
    for g in 0..=groups.iter().copied().max().unwrap_or(0) {
        let mine: Vec<PathBuf> = files.iter().zip(groups).filter(|(_, &x)| x == g).map(|(f, _)| f.clone()).collect();
        if mine.is_empty() {
            continue;
        }
        let path = out.join(if gzip { format!("node-{g}.json.gz") } else { format!("node-{g}.json") });
        std::fs::write(&path, encode(&partial_paths(&mine, opts).expect("partial"), gzip)).expect("write");
        partials.push(path);
    }
    attribute_paths(&partials, opts).expect("combine")
}

#[test]
fn combining_random_splits_equals_attributing_every_rank_at_once() {
    let tmp = tempfile::tempdir().expect("tmp");
    let files = job(&tmp.path().join("traces"));
    let whole = [Compat::Default, Compat::Hta].map(|c| attribute_paths(&files, &options(c)).expect("whole"));
    assert!(whole[0].by_collective.values().any(|h| h.transfer_ms.is_some()), "the job has matched instances");
    let n = files.len();
    let splits = (prop::collection::vec(0usize..4, n), any::<bool>(), any::<bool>());
    let mut runner = TestRunner::new(Config { cases: 12, failure_persistence: None, ..Config::default() });
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&splits, |(groups, gzip, hta)| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (compat, expected) = if hta { (Compat::Hta, &whole[1]) } else { (Compat::Default, &whole[0]) };
            let out = tmp.path().join(format!("case-{case}"));
            let got = combined(&files, &groups, gzip, &options(compat), &out);
            prop_assert_eq!(&got, expected);
            Ok(())
        })
        .unwrap();
}

#[test]
fn partial_files_of_partial_files_and_of_every_source_combine_to_the_same_figures() {
    let tmp = tempfile::tempdir().expect("tmp");
    let spec = SynthSpec { world_size: 4, ..SynthSpec::small() };
    let sources = [
        ("kineto", write_all_ranks(&spec, &tmp.path().join("kineto"), true).expect("kineto")),
        ("nsys", write_all_ranks_sqlite(&spec, &tmp.path().join("nsys")).expect("nsys")),
        ("inspector", write_all_ranks_logs(&spec, &tmp.path().join("inspector")).expect("inspector")),
    ];
    let opts = AttributeOptions { steps: Some(StepsSetting::new(3)), ..AttributeOptions::default() };
    for (name, files) in &sources {
        let whole = attribute_paths(files, &opts).expect("whole");
        let got = combined(files, &[0, 1, 1, 2], false, &opts, &tmp.path().join(format!("{name}-partials")));
        assert_eq!(got, whole, "{name}");
        assert_eq!(got.source.format, whole.source.format, "{name}");
    }
    // Partial files reduced again (racks of nodes) still give the same figures.
    let files = &sources[0].1;
    let nodes = tmp.path().join("nodes");
    let first = combined(&files[..2], &[0, 1], false, &opts, &nodes);
    assert_eq!(first.ranks.len(), 2);
    let rack = tmp.path().join("rack.json");
    let node_files = [nodes.join("node-0.json"), nodes.join("node-1.json")];
    std::fs::write(&rack, encode(&partial_paths(&node_files, &opts).expect("rack"), false)).expect("write");
    let mut inputs = vec![rack];
    inputs.extend(files[2..].iter().cloned());
    assert_eq!(attribute_paths(&inputs, &opts).expect("mixed"), attribute_paths(files, &opts).expect("whole"));
}

#[test]
fn real_traces_combine_to_the_same_figures() {
    let tmp = tempfile::tempdir().expect("tmp");
    for fixture in ["sampled_2rank", "modern_synthetic"] {
        let dir = root().join("tests/fixtures/hta").join(fixture);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).expect("dir").map(|e| e.expect("entry").path()).collect();
        files.sort();
        for compat in [Compat::Default, Compat::Hta] {
            let whole = attribute_paths(&files, &options(compat)).expect("whole");
            let out = tmp.path().join(format!("{fixture}-{compat:?}"));
            assert_eq!(combined(&files, &[0, 1], true, &options(compat), &out), whole, "{fixture} {compat:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Through the binary.

/// `commgate attribute --partial OUT FILES...`, which must succeed; returns its stderr.
fn write_partial(out: &Path, files: &[PathBuf], extra: &[&str]) -> String {
    let run = commgate().arg("attribute").arg("--partial").arg(out).args(files).args(extra).output().expect("runs");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(run.stdout.is_empty(), "no report with --partial");
    String::from_utf8(run.stderr).expect("utf-8")
}

fn attribute(inputs: &[PathBuf], extra: &[&str]) -> std::process::Output {
    commgate().arg("attribute").args(inputs).args(extra).output().expect("runs")
}

#[test]
fn the_binary_writes_partial_files_and_combines_them_into_the_same_report() {
    let tmp = tempfile::tempdir().expect("tmp");
    let files = job(&tmp.path().join("traces"));
    let (a, b) = (tmp.path().join("node-a.json.gz"), tmp.path().join("node-b.json"));
    let said = write_partial(&a, &files[..4], &[]);
    assert_eq!(
        said.trim_end(),
        format!(
            "commgate: wrote {} (ranks 0-3 of 8); combine the partial files of every node with `commgate attribute PARTIAL...`",
            a.display()
        )
    );
    write_partial(&b, &files[4..], &[]);
    for format in ["text", "json", "markdown"] {
        let whole = attribute(&files, &["--format", format]);
        let combined = attribute(&[a.clone(), b.clone()], &["--format", format]);
        assert!(combined.status.success(), "{}", String::from_utf8_lossy(&combined.stderr));
        assert_eq!(String::from_utf8_lossy(&combined.stdout), String::from_utf8_lossy(&whole.stdout), "{format}");
    }
    // `check --traces` takes partial files as it takes traces.
    let check = |traces: &[PathBuf]| {
        let out = commgate()
            .args(["check", "--result", "tests/fixtures/compare/current-same.json", "--format", "json"])
            .args(["--baselines", "tests/fixtures/compare/baselines"])
            .args(traces.iter().flat_map(|t| [Path::new("--traces"), t.as_path()]))
            .output()
            .expect("runs");
        (out.status.code(), String::from_utf8(out.stdout).expect("utf-8"))
    };
    let (code, report) = check(&[a.clone(), b.clone()]);
    assert_eq!((code, report.clone()), check(&[tmp.path().join("traces")]));
    assert!(report.contains("\"attribution\""), "{report}");
}

#[test]
fn a_missing_partial_file_is_reported_as_a_partial_rank_set() {
    let tmp = tempfile::tempdir().expect("tmp");
    let files = job(&tmp.path().join("traces"));
    let a = tmp.path().join("node-a.json");
    write_partial(&a, &files[..4], &[]);
    let out = attribute(&[a], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ranks 0-3 of 8: 4 missing (4-7)"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("4 missing"), "the report says so too");
}

#[test]
fn a_duplicated_damaged_or_differently_set_partial_file_is_named_with_exit_2() {
    let tmp = tempfile::tempdir().expect("tmp");
    let files = job(&tmp.path().join("traces"));
    let (a, b) = (tmp.path().join("node-a.json"), tmp.path().join("node-b.json"));
    write_partial(&a, &files[..4], &[]);
    write_partial(&b, &files[2..], &[]);
    let one_line = |out: &std::process::Output| {
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8(out.stderr.clone()).expect("utf-8");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        stderr
    };
    let stderr = one_line(&attribute(&[a.clone(), b.clone()], &[]));
    assert!(stderr.contains(&format!("{}: holds rank 2, like {}", b.display(), a.display())), "{stderr}");
    assert!(stderr.contains("pass each node's partial file once"), "{stderr}");
    // A trace of a rank a partial file already holds.
    let stderr = one_line(&attribute(&[a.clone(), files[0].clone()], &[]));
    assert!(stderr.contains("holds rank 0, like"), "{stderr}");

    let hta = tmp.path().join("node-hta.json");
    write_partial(&hta, &files[4..], &["--compat", "hta"]);
    let stderr = one_line(&attribute(&[a.clone(), hta.clone()], &[]));
    assert!(
        stderr.contains("was written with --compat hta (this run: --compat default); combine with the settings"),
        "{stderr}"
    );

    let damaged = tmp.path().join("node-damaged.json");
    let text = std::fs::read_to_string(&b).expect("read");
    std::fs::write(&damaged, text.replacen("\"window\":\"steps\"", "\"window\":\"\\u001b[31m\"", 1)).expect("write");
    let stderr = one_line(&attribute(&[damaged], &[]));
    assert!(stderr.contains("is a damaged commgate partial file"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr}");

    let newer = tmp.path().join("node-newer.json");
    std::fs::write(&newer, text.replacen("{\"commgate_partial\":1", "{\"commgate_partial\":2", 1)).expect("write");
    let stderr = one_line(&attribute(&[newer], &[]));
    assert!(stderr.contains("is a commgate partial file of version 2"), "{stderr}");

    // A partial file is not a trace for the readers that take one trace.
    let out =
        commgate().args(["attribute", "--partial"]).arg(tmp.path().join("x.json")).arg(&a).output().expect("runs");
    assert!(out.status.success(), "partial files reduce again: {}", String::from_utf8_lossy(&out.stderr));
    let out = commgate().args(["attribute", "--output", "r.txt", "--partial", "p.json", "x"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(2), "--output and --partial conflict");
}

/// One edited step count (a rank's `steps` set to 1,000 or 2^64−1 where its window holds the
/// job's steps) would divide every per-step figure and turn a straggler into `accept`: the step
/// counts are checked against each other, and such a file is refused naming the fields.
/// The partial file `edited`, written as `edited-WHAT.json` in `dir`, is refused: exit 2, one line
/// naming rank 1 and saying `said`.
fn refused_naming_rank_1(dir: &Path, what: &str, edited: &serde_json::Value, said: &str) {
    let path = dir.join(format!("edited-{what}.json"));
    std::fs::write(&path, serde_json::to_string(edited).expect("json")).expect("write");
    let out = attribute(&[path], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
    assert!(stderr.contains("rank 1: ") && stderr.contains(said), "{what}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn a_partial_file_whose_step_counts_disagree_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let files = job(&tmp.path().join("traces"));
    let good = tmp.path().join("node.json");
    write_partial(&good, &files, &[]);
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&good).expect("read")).expect("json");
    let steps = v["ranks"][1]["analysis"]["steps"].as_u64().expect("steps");
    assert_eq!(v["ranks"][1]["analysis"]["samples"].as_u64(), Some(steps), "as written, they agree");
    let edits: [(&str, serde_json::Value, &str); 4] = [
        ("steps", serde_json::json!(1000), "`steps` is 1000 but `samples` (the step windows) is"),
        ("steps", serde_json::json!(u64::MAX), "`steps` is 18446744073709551615 but `samples`"),
        ("samples", serde_json::json!(steps + 1), "`steps` is"),
        ("steps_from_markers", serde_json::json!(false), "`steps_from_markers` is false but `window` is \"steps\""),
    ];
    for (field, value, said) in edits {
        let mut edited = v.clone();
        edited["ranks"][1]["analysis"][field] = value;
        refused_naming_rank_1(tmp.path(), field, &edited, said);
    }
    // A step length dropped.
    v["ranks"][1]["analysis"]["step_ns"].as_array_mut().expect("lengths").pop();
    let path = tmp.path().join("edited-step-ns.json");
    std::fs::write(&path, serde_json::to_string(&v).expect("json")).expect("write");
    let stderr = String::from_utf8_lossy(&attribute(&[path], &[]).stderr).to_string();
    assert!(stderr.contains("`step_ns` holds"), "{stderr}");
}

/// An edit of one rank's analysis, given a far time.
type Edit = fn(&mut serde_json::Value, i64);

/// Times within ±2^61 ns but longer than any profile (a step, a step's timeline, the
/// communication kernels, a collective's exposed time in a step): exit 2 naming the field,
/// never a step of 10^13 ms printed.
#[test]
fn a_partial_file_whose_times_span_more_than_any_profile_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let files = job(&tmp.path().join("traces"));
    let good = tmp.path().join("node.json");
    write_partial(&good, &files, &[]);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&good).expect("read")).expect("json");
    let far: i64 = 1 << 60;
    let edits: [(&str, Edit, &str); 5] = [
        ("step", |a, far| a["step_ns"][0] = far.into(), "`step_ns` holds 1152921504606846976, a step longer than"),
        ("backwards", |a, _| a["kernels"]["dur"][0] = (-5).into(), "kernel 0 ends 5 ns before it starts"),
        ("segment", |a, far| a["timeline"][0]["segs"][0][2] = far.into(), "timeline step"),
        ("kernel", |a, far| a["kernels"]["dur"][0] = far.into(), "`kernels` spans"),
        (
            "exposed",
            |a, far| a["collectives"][0]["exposed_by_step"][0][1] = far.to_string().into(),
            "an exposed time of",
        ),
    ];
    for (what, edit, said) in edits {
        let mut edited = v.clone();
        edit(&mut edited["ranks"][1]["analysis"], far);
        refused_naming_rank_1(tmp.path(), what, &edited, said);
    }
}

/// A partial file naming a format commgate does not write is refused by name, not taken for an
/// Nsight Systems export.
#[test]
fn a_partial_file_of_an_unknown_format_is_named() {
    let tmp = tempfile::tempdir().expect("tmp");
    let files = job(&tmp.path().join("traces"));
    let good = tmp.path().join("node.json");
    write_partial(&good, &files, &[]);
    let text = std::fs::read_to_string(&good).expect("read");
    assert!(text.contains("\"format\":\"kineto\""), "as written");
    let edited = tmp.path().join("edited.json");
    std::fs::write(&edited, text.replacen("\"format\":\"kineto\"", "\"format\":\"inspector\"", 1)).expect("write");
    let out = attribute(&[edited], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`format` is \"inspector\", not one commgate writes"), "{stderr}");
    assert!(!stderr.contains("Nsight"), "{stderr}");
}
