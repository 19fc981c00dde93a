//! nccl-tests output as gate evidence, through the binary: a baseline of five sweeps recorded
//! with `baseline update --from`, then `check --result` blocks a sweep with one size 10 % slower,
//! naming that size, and accepts the same sweep unchanged; `compare` agrees; the text table of a
//! run gives the summary figures of its JSON; a run without `-I 1`, one without a profile, a
//! failed data check and damaged files each end in one clear line or an honest verdict.
//!
//! The fixtures under `tests/fixtures/nccl-tests/` are this crate's generator's output
//! (`commgate_testkit::nccl_tests`), checked here to be exactly that: regenerate them with
//! `COMMGATE_REGEN_FIXTURES=1 cargo test --test nccl_tests`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::{Path, PathBuf};

use commgate_core::result::nccl_tests::{read, SizeResult, Sweep};
use commgate_testkit::nccl_tests::{json, text, NcclTestsSpec};

mod common;
use common::{commgate_in, copy_dir, root};

fn fixtures() -> PathBuf {
    root().join("tests/fixtures/nccl-tests")
}

/// Each fixture and the generator's spec it is written from.
fn specs() -> Vec<(&'static str, NcclTestsSpec, bool)> {
    let sweep = |seed: u64| NcclTestsSpec { iterations: 50, ..NcclTestsSpec::sweep(seed) };
    let mut out: Vec<(&'static str, NcclTestsSpec, bool)> = vec![
        ("baseline-1.json", sweep(1), true),
        ("baseline-2.json", sweep(2), true),
        ("baseline-3.json", sweep(3), true),
        ("baseline-4.json", sweep(4), true),
        ("baseline-5.json", sweep(5), true),
        ("current-same.json", sweep(9), true),
        ("current-same.txt", sweep(9), false),
    ];
    out.push(("current-slower.json", NcclTestsSpec { slower: Some((65_536, 1.1)), ..sweep(9) }, true));
    out
}

#[test]
fn the_fixtures_are_the_generators_output() {
    let regen = std::env::var_os("COMMGATE_REGEN_FIXTURES").is_some();
    for (name, spec, as_json) in specs() {
        let want = if as_json { json(&spec) } else { text(&spec) };
        let path = fixtures().join(name);
        if regen {
            std::fs::create_dir_all(fixtures()).expect("mkdir");
            std::fs::write(&path, &want).expect("write");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} differs from the generator's output: regenerate with COMMGATE_REGEN_FIXTURES=1 cargo test --test nccl_tests",
            path.display()
        );
    }
}

/// The summary figures of a sweep: every size and placement without its per-iteration lists.
fn summary(s: &Sweep) -> Vec<SizeResult> {
    s.results.iter().map(|r| SizeResult { times_us: Vec::new(), per_process_us: Vec::new(), ..r.clone() }).collect()
}

#[test]
fn the_text_table_of_a_run_gives_the_summary_figures_of_its_json() {
    let from_json = read(&fixtures().join("current-same.json")).expect("json");
    let from_text = read(&fixtures().join("current-same.txt")).expect("text");
    assert_eq!(summary(&from_json), summary(&from_text));
    assert_eq!(from_json.results.len(), 16);
    assert!(from_json.results.iter().all(|r| r.times_us.len() == 50));
    assert!(from_text.results.iter().all(|r| r.times_us.is_empty()));
    assert_eq!((from_json.collective, from_json.nccl_version), (from_text.collective, from_text.nccl_version));
    assert_eq!(from_json.devices, from_text.devices);
}

/// A scratch directory holding the fixtures and a store of the five baseline sweeps.
fn store() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&fixtures(), &tmp.path().join("runs"));
    let mut cmd = commgate_in(tmp.path());
    cmd.args(["baseline", "update", "--baselines", "store", "--environment-profile", "H200", "--from"]);
    cmd.args((1..=5).map(|i| format!("runs/baseline-{i}.json")));
    let out = cmd.output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("store/H200/nccl-tests-all_reduce-2ranks.json now holds 5 runs"), "{said}");
    tmp
}

fn check(dir: &Path, result: &str, format: &str) -> (i32, String, String) {
    let out = commgate_in(dir)
        .args(["check", "--comment", "never", "--baselines", "store", "--environment-profile", "H200"])
        .args(["--format", format, "--result", result])
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn one_size_ten_percent_slower_blocks_naming_it() {
    let tmp = store();
    let (code, out, err) = check(tmp.path(), "runs/current-slower.json", "text");
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.starts_with("Verdict: tune: all_reduce 64.0 KiB out-of-place "), "{out}");
    assert!(out.contains("— blocking"), "{out}");
    insta::assert_snapshot!("sweep_slower_text", out);
    let (code, md, _) = check(tmp.path(), "runs/current-slower.json", "markdown");
    assert_eq!(code, 1);
    assert!(md.contains("```mermaid") && md.contains("Bus bandwidth (GB/s) by size"), "{md}");
    insta::assert_snapshot!("sweep_slower_markdown", md);
    // `compare` against the store file says the same.
    let out = commgate_in(tmp.path())
        .args(["compare", "--baseline", "store/H200/nccl-tests-all_reduce-2ranks.json"])
        .args(["--current", "runs/current-slower.json"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("all_reduce 64.0 KiB out-of-place "), "{said}");
    // A directory of sweeps is judged as if each file were named.
    let dir = tmp.path().join("slower-dir");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::copy(tmp.path().join("runs/current-slower.json"), dir.join("sweep.json")).expect("copy");
    let (code, from_dir, _) = check(tmp.path(), "slower-dir", "text");
    assert_eq!(
        (code, from_dir.lines().next()),
        (1, out_first_line(&check(tmp.path(), "runs/current-slower.json", "text").1))
    );
}

fn out_first_line(s: &str) -> Option<&str> {
    s.lines().next()
}

#[test]
fn the_store_keeps_this_runners_ceiling_past_eviction() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&fixtures(), &tmp.path().join("runs"));
    for i in 1..=5 {
        let out = commgate_in(tmp.path())
            .args(["baseline", "update", "--baselines", "store", "--environment-profile", "H200", "--keep", "2"])
            .args(["--from", &format!("runs/baseline-{i}.json")])
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let text = std::fs::read_to_string(tmp.path().join("store/H200/nccl-tests-all_reduce-2ranks.json")).expect("store");
    let store: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(store["runs"].as_array().map(Vec::len), Some(2));
    let ceilings = store["ceilings"].as_array().expect("ceilings");
    assert_eq!(ceilings.len(), 16, "one per point on this machine");
    // The ceiling of the largest size is the best median busbw of all five runs, not of the two kept.
    let best = (1..=5)
        .map(|i| {
            let s = read(&fixtures().join(format!("baseline-{i}.json"))).expect("sweep");
            let r = commgate_core::result::sweep::to_result(&s, "2026-12-01T00:00:00Z");
            r.metrics.busbw_gbps.expect("busbw")
        })
        .fold(0.0, f64::max);
    let largest = ceilings
        .iter()
        .find(|c| c["size"] == 16_777_216 && c["placement"] == "out_of_place")
        .and_then(|c| c["busbw_gbps"].as_f64());
    let largest = largest.expect("the largest size's ceiling");
    assert!((largest - best).abs() < 1e-9 * best, "{largest} vs {best}");
}

#[test]
fn the_same_sweep_unchanged_is_accepted() {
    let tmp = store();
    let (code, out, err) = check(tmp.path(), "runs/current-same.json", "text");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("Verdict: accept: 16 of 16 points of all_reduce_perf within ±3 %"), "{out}");
    insta::assert_snapshot!("sweep_same_text", out);
    let (code, md, _) = check(tmp.path(), "runs/current-same.json", "markdown");
    assert_eq!(code, 0);
    insta::assert_snapshot!("sweep_same_markdown", md);
}

#[test]
fn a_run_without_per_iteration_times_is_said_so_and_never_blocks_alone() {
    let tmp = store();
    let (code, out, err) = check(tmp.path(), "runs/current-same.txt", "text");
    assert_eq!(code, 0, "collect_more_evidence does not fail the job by default: {out}{err}");
    assert!(out.starts_with("Verdict: collect_more_evidence"), "{out}");
    assert!(out.contains("nccl-tests ran without `-I 1`: one time per size"), "{out}");
}

#[test]
fn bad_nccl_tests_input_ends_in_one_line_naming_the_file() {
    let tmp = store();
    let slower = std::fs::read_to_string(tmp.path().join("runs/current-slower.json")).expect("read");
    let cases = [
        ("wrong.json", slower.replacen("\"nwrong\":0", "\"nwrong\":7", 1), "reports 7 wrong elements at size 1024"),
        (
            "newer.json",
            slower.replacen("\"version\":3", "\"version\":9", 1),
            "file version 9, newer than this commgate",
        ),
        ("negative.json", slower.replacen("\"time\":", "\"time\":-", 1), "`results[0].out_of_place.time` is -"),
        ("short.json", slower.replacen("],[", ",1],[", 1), "lists 51 iterations, `times_us` 50"),
    ];
    for (name, text, expected) in cases {
        std::fs::write(tmp.path().join(name), text).expect("write");
        let (code, out, err) = check(tmp.path(), name, "text");
        assert_eq!(code, 2, "{name}: {out}{err}");
        let line = err.lines().find(|l| l.contains(name)).unwrap_or_default();
        assert!(line.contains(expected), "{name}: {err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("commgate: error")).count(), 1, "{name}: {err}");
    }
    // No profile from anywhere: the fix is named.
    let out = commgate_in(tmp.path())
        .args(["check", "--comment", "never", "--baselines", "store", "--result", "runs/current-same.json"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("runs/current-same.json: is nccl-tests output, which names no environment profile"), "{err}");
    assert!(err.contains("--environment-profile NAME"), "{err}");
}

/// `text` with process 1 slower by `factor` in every iteration of every size: its own times and
/// the slowest-per-iteration list nccl-tests derives from them.
fn with_late_process(text: &str, factor: f64) -> String {
    let mut doc: serde_json::Value = serde_json::from_str(text).expect("json");
    for r in doc["results"].as_array_mut().expect("results") {
        for key in ["out_of_place_per_iter", "in_place_per_iter"] {
            let per = &mut r[key];
            let mut lists: Vec<Vec<f64>> =
                serde_json::from_value(per["per_process_max_times_us"].clone()).expect("lists");
            lists[1].iter_mut().for_each(|t| *t *= factor);
            let slowest: Vec<f64> =
                (0..lists[0].len()).map(|k| lists.iter().map(|l| l[k]).fold(0.0, f64::max)).collect();
            per["per_process_max_times_us"] = serde_json::json!(lists);
            per["times_us"] = serde_json::json!(slowest);
        }
    }
    doc.to_string()
}

#[test]
fn a_process_slowest_in_most_iterations_is_named_with_its_evidence() {
    let tmp = store();
    let same = std::fs::read_to_string(tmp.path().join("runs/current-same.json")).expect("read");
    std::fs::write(tmp.path().join("late.json"), with_late_process(&same, 1.05)).expect("write");
    let (code, out, err) = check(tmp.path(), "late.json", "text");
    assert!(code == 0 || code == 1, "{out}{err}");
    assert!(
        out.contains(
            "process 1 (node-1, GPU 0) was the slowest in 800 of 800 iterations (100 %; 50 % if no process stood out)"
        ),
        "{out}"
    );
    // The unchanged sweep names nobody.
    let (_, plain, _) = check(tmp.path(), "runs/current-same.json", "text");
    assert!(!plain.contains("was the slowest in"), "{plain}");
}

#[test]
fn names_from_the_output_are_escaped_in_every_report() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let hostile = |text: &str| {
        text.replace("\"float\"", "\"fl|oat<b>x</b>\"")
            .replace("node-1", "node-1](javascript:alert(1))<img src=x>")
            .replace("NVIDIA H200", "H200 <script>alert(1)</script>")
    };
    std::fs::create_dir(tmp.path().join("runs")).expect("mkdir");
    for name in ["baseline-1.json", "baseline-2.json", "baseline-3.json", "current-slower.json"] {
        let text = std::fs::read_to_string(fixtures().join(name)).expect("read");
        std::fs::write(tmp.path().join("runs").join(name), hostile(&text)).expect("write");
    }
    let out = commgate_in(tmp.path())
        .args(["baseline", "update", "--baselines", "store", "--environment-profile", "H200", "--from"])
        .args(["runs/baseline-1.json", "runs/baseline-2.json", "runs/baseline-3.json"])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, md, err) = check(tmp.path(), "runs/current-slower.json", "markdown");
    assert!(md.contains("| size |"), "{md}{err}");
    for raw in ["<b>", "<img", "<script", "](javascript"] {
        assert!(!md.contains(raw), "{raw} got through:\n{md}");
    }
    let (_, text, _) = check(tmp.path(), "runs/current-slower.json", "text");
    assert!(!text.contains('\u{1b}'), "{text}");
}

#[test]
fn a_sweep_of_too_many_sizes_is_one_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let one = r#"{"size":8,"count":2,"type":"float","redop":"sum","out_of_place":{"time":1,"alg_bw":0,"bus_bw":0,"nwrong":0}}"#;
    let many = format!(
        "{{\"version\":3,\"nccl_version\":22703,\"results\":[{}]}}",
        std::iter::repeat_n(one, 1_000_000).collect::<Vec<_>>().join(",")
    );
    std::fs::write(tmp.path().join("huge.json"), many).expect("write");
    let out = commgate_in(tmp.path())
        .args(["check", "--comment", "never", "--environment-profile", "H200", "--result", "huge.json"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("huge.json: `results` holds more than 2048 sizes"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn the_benchmarks_busbw_is_held_against_a_sweeps_ceiling_on_the_same_gpus() {
    let tmp = store();
    let text = std::fs::read_to_string(root().join("tests/fixtures/compare/current-slower.json")).expect("read");
    let mut run: serde_json::Value = serde_json::from_str(&text).expect("json");
    run["environment_profile"] = "H200".into();
    run["hardware"]["gpu_name"] = "NVIDIA H200".into();
    run["hardware"]["gpu_count"] = 2.into();
    run["hardware"]["nodes"] = 2.into();
    run["workload"]["collective"] = "all_reduce".into();
    run["workload"]["payload_bytes_per_rank"] = 1_048_576.into();
    run["metrics"]["busbw_gbps"] = 40.0.into();
    std::fs::write(tmp.path().join("bench.json"), run.to_string()).expect("write");
    let (_, out, err) = check(tmp.path(), "bench.json", "text");
    let line = out.lines().find(|l| l.starts_with("Run: ")).unwrap_or_default();
    // The fixtures' ceiling at 1 MiB is about 50.9 GB/s and their plateau about 93.8 GB/s.
    assert!(
        line.starts_with(
            "Run: busbw 40.00 GB/s (79 % of this runner's nccl-tests peak at 1.0 MiB, 43 % of its plateau)"
        ),
        "{out}{err}"
    );
    // Another kind of machine, another size, or another collective: no ceiling is claimed.
    run["hardware"]["gpu_count"] = 8.into();
    std::fs::write(tmp.path().join("other.json"), run.to_string()).expect("write");
    let (_, out, _) = check(tmp.path(), "other.json", "text");
    assert!(out.contains("Run: busbw 40.00 GB/s ·"), "{out}");
}

#[test]
fn baseline_show_lists_the_newest_sweep_against_the_ceiling() {
    let tmp = store();
    let out = commgate_in(tmp.path())
        .args(["baseline", "show", "store/H200/nccl-tests-all_reduce-2ranks.json"])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("The newest nccl-tests sweep against this runner's ceiling:"), "{text}");
    let row = text.lines().find(|l| l.starts_with("16.0 MiB") && l.contains("out-of-place")).expect("a row");
    assert!(row.trim_end().ends_with('%'), "{row}");
    insta::assert_snapshot!("sweep_store_show", text);
}

#[test]
fn the_comparison_json_carries_each_point_and_the_sweep() {
    let tmp = store();
    let out = commgate_in(tmp.path())
        .args(["compare", "--format", "json", "--baseline", "store/H200/nccl-tests-all_reduce-2ranks.json"])
        .args(["--current", "runs/current-slower.json"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let metrics = json["metrics"].as_array().expect("metrics");
    assert_eq!(metrics.len(), 16);
    let slower = metrics
        .iter()
        .find(|m| m["point"]["size"] == 65_536 && m["point"]["placement"] == "out_of_place")
        .expect("64 KiB");
    assert_eq!(slower["state"], "regressed");
    assert!(slower["point"]["ceiling_gbps"].as_f64().is_some_and(|c| c > 6.0), "{slower}");
    assert_eq!(json["sweep"]["program"], "all_reduce_perf");
    assert_eq!(json["sweep"]["per_iteration"], true);
    insta::assert_snapshot!("sweep_slower_json", serde_json::to_string_pretty(&json).expect("pretty"));
}

#[test]
fn a_sweep_and_a_benchmark_result_are_judged_in_one_gate() {
    let tmp = store();
    copy_dir(&root().join("tests/fixtures/compare/baselines"), &tmp.path().join("store"));
    std::fs::copy(root().join("tests/fixtures/compare/current-slower.json"), tmp.path().join("bench.json"))
        .expect("copy");
    let out = commgate_in(tmp.path())
        .args(["check", "--comment", "never", "--baselines", "store", "--environment-profile", "H200"])
        .args(["--format", "json", "--result", "bench.json", "runs/current-same.json"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "the benchmark's slowdown blocks: {}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let workloads = report["workloads"].as_array().expect("two workloads");
    let ids: Vec<&str> = workloads.iter().filter_map(|w| w["id"].as_str()).collect();
    assert_eq!(ids, ["par-overlap-allreduce-matmul", "nccl-tests-all_reduce-2ranks"]);
    assert_eq!(workloads[1]["verdict"], "accept", "{}", workloads[1]);
    assert_eq!(workloads[1]["comparison"]["metrics"].as_array().map(Vec::len), Some(16));
}

#[test]
fn a_job_log_around_the_table_is_read_and_a_log_of_two_runs_is_refused() {
    let tmp = store();
    let table = std::fs::read_to_string(fixtures().join("current-same.txt")).expect("read");
    // What a launcher writes around the program's output, and NCCL's INFO lines inside it.
    let log = format!(
        "$ mpirun -n 2 ./build/all_reduce_perf -b 1K -e 16M -f 4\n--------\nTwo mutually-exclusive MCA variables were \
         specified.\n[node-0:12569] 1 more process has sent help message\nNCCL version 2.27.3+cuda12.8\n{}",
        table.replacen("\n#\n", "\n#\nnode-0:11:11 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE\n", 1)
    );
    assert!(log.contains("#\nnode-0:11:11 [0] NCCL INFO"), "{log}");
    std::fs::write(tmp.path().join("job.log"), &log).expect("write");
    let (code, out, err) = check(tmp.path(), "job.log", "text");
    assert_eq!(code, 0, "{out}{err}");
    let (_, from_table, _) = check(tmp.path(), "runs/current-same.txt", "text");
    assert_eq!(out, from_table, "the log reads as its table does");
    std::fs::write(tmp.path().join("two.log"), format!("{log}{table}")).expect("write");
    let (code, _, err) = check(tmp.path(), "two.log", "text");
    assert_eq!(code, 2);
    assert!(err.contains("two.log: holds more than one nccl-tests run"), "{err}");
}

/// The slower size of `current-slower.json` renamed (another reduction op), moved by one byte,
/// dropped from the series, or with its placements set to null: the comparison cannot match it with the baseline's point, so it
/// cannot accept on the points that remain; it says why in the headline (exit 0, not blocking).
#[test]
fn a_sweep_whose_points_do_not_match_the_baseline_is_never_accepted() {
    let tmp = store();
    let text = std::fs::read_to_string(tmp.path().join("runs/current-slower.json")).expect("read");
    let sweep: serde_json::Value = serde_json::from_str(&text).expect("json");
    let at = sweep["results"].as_array().expect("results").iter().position(|r| r["size"] == 65536).expect("64 KiB");
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let edits: [(&str, Edit, &str); 4] = [
        (
            "redop",
            Box::new(move |v| v["results"][at]["redop"] = "prod".into()),
            "2 points have no baseline (64.0 KiB out-of-place, 64.0 KiB in-place)",
        ),
        (
            "size",
            Box::new(move |v| v["results"][at]["size"] = 65537.into()),
            "2 points have no baseline (64.0 KiB out-of-place, 64.0 KiB in-place)",
        ),
        (
            "dropped",
            Box::new(move |v| {
                v["results"].as_array_mut().expect("results").remove(at);
            }),
            "2 points of the baseline are missing from this sweep",
        ),
        (
            "nulled",
            Box::new(move |v| {
                let r = &mut v["results"][at];
                for key in ["out_of_place", "in_place"] {
                    r[key] = serde_json::Value::Null;
                }
                if let Some(o) = r.as_object_mut() {
                    o.remove("out_of_place_per_iter");
                    o.remove("in_place_per_iter");
                }
            }),
            "2 points of the baseline are missing from this sweep",
        ),
    ];
    for (name, edit, said) in edits {
        let mut v = sweep.clone();
        edit(&mut v);
        let path = format!("runs/edited-{name}.json");
        std::fs::write(tmp.path().join(&path), serde_json::to_string(&v).expect("json")).expect("write");
        let (code, out, err) = check(tmp.path(), &path, "text");
        assert_eq!(code, 0, "{name}: {out}{err}");
        let first = out.lines().next().unwrap_or_default();
        assert!(
            first.starts_with(
                "Verdict: collect_more_evidence: cannot accept: this sweep does not match the baseline's points"
            ),
            "{name}: {out}"
        );
        assert!(first.contains(said), "{name}: {first}");
    }
}

/// `current-slower.json` with its 64 KiB size's `edit`ed (the red team's single edits of it).
fn slower_with(edit: impl Fn(&mut serde_json::Value, &serde_json::Value)) -> String {
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(fixtures().join(name)).expect("read")).expect("json")
    };
    let (mut slower, same) = (read("current-slower.json"), read("current-same.json"));
    let at = |v: &serde_json::Value| {
        v["results"].as_array().expect("results").iter().position(|r| r["size"] == 65_536).expect("64 KiB")
    };
    let (mine, theirs) = (at(&slower), at(&same));
    edit(&mut slower["results"][mine], &same["results"][theirs]);
    slower.to_string()
}

/// The slow size's per-iteration lists replaced by unslowed ones while its summary time still
/// says +9 %: the file's figures disagree, and the point is never accepted; the headline names it
/// with both figures.
#[test]
fn a_point_whose_iterations_contradict_its_summary_is_never_accepted() {
    let tmp = store();
    let edited = slower_with(|point, unslowed| {
        for key in ["out_of_place_per_iter", "in_place_per_iter"] {
            point[key] = unslowed[key].clone();
        }
    });
    std::fs::write(tmp.path().join("periter.json"), edited).expect("write");
    let (code, out, err) = check(tmp.path(), "periter.json", "text");
    assert_eq!(code, 0, "collect_more_evidence: {out}{err}");
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(
            "Verdict: collect_more_evidence: cannot judge: 64.0 KiB out-of-place: the summary time says +9."
        ),
        "{out}"
    );
    assert!(
        first.contains("% but the per-iteration times say ") && first.contains("the file's figures disagree"),
        "{first}"
    );
    assert!(first.contains("(and 1 more point alike)"), "in place too: {first}");
    // The report still lists every point; the two contradicted are left open with the reason.
    let (code, json, _) = check(tmp.path(), "periter.json", "json");
    assert_eq!(code, 0);
    let report: serde_json::Value = serde_json::from_str(&json).expect("json");
    let metrics = report["comparison"]["metrics"].as_array().expect("metrics");
    let open: Vec<&serde_json::Value> = metrics.iter().filter(|m| m["state"] == "inconclusive").collect();
    assert_eq!(open.len(), 2, "{metrics:?}");
    assert!(open.iter().all(|m| m["note"].as_str().is_some_and(|n| n.contains("the file's figures disagree"))));
}

/// The slow size's `times_us` unslowed while `per_process_max_times_us` is still slow: no run
/// writes that (`times_us` is the largest of the processes' times), and the file is refused
/// naming the first such iteration.
#[test]
fn times_us_apart_from_the_processes_times_is_refused() {
    let tmp = store();
    let edited = slower_with(|point, unslowed| {
        for key in ["out_of_place_per_iter", "in_place_per_iter"] {
            point[key]["times_us"] = unslowed[key]["times_us"].clone();
        }
    });
    std::fs::write(tmp.path().join("timesus.json"), edited).expect("write");
    let (code, out, err) = check(tmp.path(), "timesus.json", "text");
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("timesus.json: `results[3].out_of_place_per_iter.times_us[0]` is "), "{err}");
    assert!(err.contains("the slowest process's time of that iteration (`per_process_max_times_us`)"), "{err}");
    // The per-iteration summary beside the lists is held against them too.
    let edited = slower_with(|point, _| point["out_of_place_per_iter"]["avg_us"] = 10.0.into());
    std::fs::write(tmp.path().join("avg.json"), edited).expect("write");
    let (code, _, err) = check(tmp.path(), "avg.json", "text");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`results[3].out_of_place_per_iter.avg_us` is 10, but `times_us` after its 0 skipped"),
        "{err}"
    );
}

/// A bandwidth its size and time cannot give (the red team's 1e15 GB/s) is refused naming it,
/// and so is a busbw that is not algbw times the collective's bus factor.
#[test]
fn bandwidths_the_size_and_time_cannot_give_are_refused() {
    let tmp = store();
    let cases = [
        (
            "busbw.json",
            slower_with(|point, _| {
                point["out_of_place"]["alg_bw"] = 1e15.into();
                point["out_of_place"]["bus_bw"] = 1e15.into();
            }),
            "`results[3].out_of_place.alg_bw` is 1e15 GB/s, but its size and time (65536 B in 11.74 µs) \
             gives 5.582",
        ),
        (
            "factor.json",
            slower_with(|point, _| point["in_place"]["bus_bw"] = 11.0.into()),
            "`results[3].in_place.bus_bw` is 11 GB/s, but all_reduce's bus factor on 2 ranks (1.0000)",
        ),
    ];
    for (name, text, expected) in cases {
        std::fs::write(tmp.path().join(name), text).expect("write");
        let (code, out, err) = check(tmp.path(), name, "text");
        assert_eq!(code, 2, "{name}: {out}{err}");
        assert!(err.contains(expected), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// nccl-tests 2.13–2.16 output in a job's log (no `# Collective test starting:` line, the
/// launcher's lines first) is not read, and the refusal says what it is, not "not valid JSON".
#[test]
fn a_job_log_without_the_programs_lines_is_read_and_named_from_its_table() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let table = std::fs::read_to_string(fixtures().join("current-same.txt")).expect("read");
    let body: String = table
        .lines()
        .filter(|l| !l.starts_with("# nccl-tests version") && !l.starts_with("# Collective test starting"))
        .map(|l| format!("{l}\n"))
        .collect();
    let log = format!("kubectl exec nccl-test-0 -- run_nccl_tests.sh -t all_reduce\nHello from nccl-test-0\n{body}");
    std::fs::write(tmp.path().join("gke.txt"), log).expect("write");
    let out = commgate_in(tmp.path())
        .args(["baseline", "update", "--environment-profile", "H200", "--baselines", "b", "--from", "gke.txt"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("nccl-tests-all_reduce-") && !err.contains("not valid JSON"), "{err}");
}
