//! `check --paired` end to end through the binary, on a real git repository with a base and a
//! head commit: each arm's benchmark runs as a process in its own tree (the base in a temporary
//! worktree), rounds until the sequence decides, and every failure exits 2 naming the arm and
//! the step. The mock backend makes the verdicts exact; one test runs the CPU backend for real.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::Path;
use std::process::Output;

use serde_json::Value;

mod common;
use common::{commgate_in as commgate, git};

/// A repository whose base commit sets `base` as commgate.toml and whose head commit sets
/// `head`; returns it and the base SHA.
fn repository(base: &str, head: &str) -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    git(d, &["init", "-q"]);
    std::fs::write(d.join("commgate.toml"), base).expect("settings");
    git(d, &["add", "-A"]);
    git(d, &["commit", "-qm", "main"]);
    let sha = git(d, &["rev-parse", "HEAD"]);
    std::fs::write(d.join("commgate.toml"), head).expect("settings");
    git(d, &["commit", "-qam", "PR", "--allow-empty"]);
    (tmp, sha)
}

const MOCK: &str = "[bench]\nbackend = \"mock\"\n";

fn paired(dir: &Path, base: &str, extra: &[&str]) -> Output {
    commgate(dir)
        .args(["check", "--paired", "--base", base, "--format", "json", "--comment", "never"])
        .args(extra)
        .output()
        .expect("runs")
}

fn report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
}

fn worktrees(dir: &Path) -> usize {
    git(dir, &["worktree", "list"]).lines().count()
}

#[test]
fn an_unchanged_head_is_accepted_and_every_round_is_kept() {
    let (tmp, base) = repository(MOCK, MOCK);
    let out = paired(tmp.path(), &base, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report(&out);
    assert_eq!(r["verdict"], "accept");
    let p = &r["paired"];
    assert_eq!(p["setup"]["base"], base.as_str());
    assert_eq!(p["stop"], "decided");
    let rounds = p["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 3, "exact arms settle at the first look");
    for round in rounds {
        assert_eq!(round["ratios"][0]["ratio"], 1.0, "{round}");
        assert_eq!(round["medians"].as_array().map(Vec::len), Some(4));
    }
    assert!(r["reasons"][0].as_str().expect("reason").starts_with("head and base are the same within ±3 %"), "{r}");
    assert_eq!(worktrees(tmp.path()), 1, "the base's worktree is removed");
}

#[test]
fn a_slower_head_blocks_with_exit_1_and_the_comment_shows_each_round() {
    let (tmp, base) = repository(MOCK, "[bench]\nbackend = \"mock\"\npayload_elements = 5000000\n");
    let out = paired(tmp.path(), &base, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report(&out);
    assert_eq!((r["verdict"].as_str(), r["blocking"].as_bool()), (Some("tune"), Some(true)));
    assert!(r["reasons"][0].as_str().expect("reason").starts_with("head is slower than base: overlap median +12.6 %"));
    let md = commgate(tmp.path())
        .args(["check", "--paired", "--base", &base, "--format", "markdown", "--comment", "never"])
        .output()
        .expect("runs");
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(md.contains("head vs base on this runner, 3 rounds, interleaved"), "{md}");
    assert!(md.contains("x-axis \"round\" [\"1\", \"2\", \"3\"]"), "{md}");
    // docs/gate.md shows this check's verdict and reasons as the binary prints them.
    let text =
        commgate(tmp.path()).args(["check", "--paired", "--base", &base, "--comment", "never"]).output().expect("runs");
    let text = String::from_utf8_lossy(&text.stdout);
    let shown: String = text.lines().take_while(|l| !l.starts_with("Run:")).map(|l| format!("{l}\n")).collect();
    let page = std::fs::read_to_string(common::root().join("docs/gate.md")).expect("docs");
    assert!(page.contains(&format!("```text\n{shown}```")), "docs/gate.md should show:\n{shown}");
}

#[test]
fn the_gate_settings_are_the_bases_and_the_bench_settings_each_arms() {
    // The head loosens δ to 99 % and slows its own benchmark: δ stays the base's 3 %.
    let (tmp, base) = repository(
        "[bench]\nbackend = \"mock\"\n[compare]\nmin_effect = 0.03\n",
        "[bench]\nbackend = \"mock\"\npayload_elements = 5000000\n[compare]\nmin_effect = 0.99\n",
    );
    let out = paired(tmp.path(), &base, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(report(&out)["paired"]["setup"]["delta"], 0.03);
}

#[test]
fn a_base_that_cannot_be_had_fails_closed() {
    let (tmp, _) = repository(MOCK, MOCK);
    let out = paired(tmp.path(), "0123456789abcdef0123456789abcdef01234567", &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not in this clone"), "{err}");
    let none = commgate(tmp.path()).args(["check", "--paired", "--comment", "never"]).output().expect("runs");
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("--paired measures the base commit beside the working tree"));
}

#[test]
fn a_failing_prepare_names_the_arm_and_its_last_line() {
    let (tmp, base) = repository(MOCK, MOCK);
    let out = paired(tmp.path(), &base, &["--prepare", "echo 'uv: no lock file' >&2; exit 3"]);
    assert_eq!(out.status.code(), Some(2));
    let r = report(&out);
    assert_eq!(r["error"]["kind"], "arm_failed");
    let m = r["error"]["message"].as_str().expect("message");
    assert!(
        m.starts_with("the base arm's prepare (`echo 'uv: no lock file' >&2; exit 3`) exited 3: uv: no lock file"),
        "{m}"
    );
    assert_eq!(worktrees(tmp.path()), 1, "removed after a failure too");
}

/// A repository (mock benchmark) whose base commit's `train.sh` copies the hand-checked traces
/// into its first argument; returns it, the base SHA and the traces' directory.
fn repository_with_training_step() -> (tempfile::TempDir, String, std::path::PathBuf) {
    let (tmp, _) = repository(MOCK, MOCK);
    let traces = common::root().join("tests/fixtures/hand_checked");
    std::fs::write(tmp.path().join("train.sh"), format!("cp '{}'/rank-*.json \"$1\"\n", traces.display()))
        .expect("script");
    git(tmp.path(), &["add", "-A"]);
    git(tmp.path(), &["commit", "-qm", "train"]);
    let base = git(tmp.path(), &["rev-parse", "HEAD"]);
    (tmp, base, traces)
}

#[test]
fn a_failing_capture_names_the_round_and_the_arm() {
    // The base's training script writes a trace; the head's is broken.
    let (tmp, base, _) = repository_with_training_step();
    std::fs::write(tmp.path().join("train.sh"), "echo 'Traceback: boom' >&2; exit 1\n").expect("script");
    let out = paired(tmp.path(), &base, &["--capture", "sh train.sh {out}"]);
    assert_eq!(out.status.code(), Some(2));
    let m = report(&out)["error"]["message"].as_str().expect("message").to_string();
    assert!(m.starts_with("round 1, the head arm: capture (`sh train.sh {out}`) exited 1: Traceback: boom"), "{m}");
}

#[test]
fn each_rounds_captures_are_attributed_side_by_side() {
    let (tmp, base) = repository(MOCK, MOCK);
    let traces = common::root().join("tests/fixtures/hand_checked");
    let line = format!("cp '{}'/rank-*.json {{out}}", traces.display());
    let out = paired(tmp.path(), &base, &["--capture", &line]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report(&out);
    let round = &r["paired"]["rounds"][0];
    let first = &round["capture"][0];
    assert!(first["collective"].is_string(), "{round}");
    assert_eq!(first["base_exposed_ms"], first["head_exposed_ms"], "the same traces in both arms");
    // Traces that cannot be read end the check, naming the arm.
    let out = paired(tmp.path(), &base, &["--capture", "echo '{' > {out}/rank-0.json"]);
    assert_eq!(out.status.code(), Some(2));
    let m = report(&out)["error"]["message"].as_str().expect("message").to_string();
    assert!(m.starts_with("round 1, the ") && m.contains("capture's traces cannot be attributed"), "{m}");
}

/// The benchmark is unchanged; the head's own training step keeps one all-reduce running 150 µs
/// longer past the matmul it overlapped (its exposed time +19 %): the captured collective blocks,
/// and the report names it.
#[test]
fn a_slower_collective_in_the_training_step_blocks() {
    let (tmp, base, traces) = repository_with_training_step();
    let slower = format!(
        "for f in '{}'/rank-*.json; do sed '/\"ts\": 300,/{{N;s/\"dur\": 300,/\"dur\": 450,/}}' \"$f\" > \"$1/${{f##*/}}\"; done\n",
        traces.display()
    );
    std::fs::write(tmp.path().join("train.sh"), slower).expect("script");
    let out = paired(tmp.path(), &base, &["--capture", "sh train.sh {out}"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report(&out);
    let reasons: Vec<&str> = r["reasons"].as_array().expect("reasons").iter().filter_map(Value::as_str).collect();
    assert_eq!(reasons.len(), 1, "only the captured all-reduce: {reasons:?}");
    assert!(reasons[0].starts_with("head is slower than base: all_reduce exposed (capture) +19.4 %"), "{reasons:?}");
    let metrics = r["paired"]["metrics"].as_array().expect("metrics");
    let judged: Vec<&str> =
        metrics.iter().filter_map(|m| m["metric"].as_str()).filter(|m| m.ends_with("(capture)")).collect();
    assert_eq!(judged, ["all_reduce exposed (capture)", "all_to_all exposed (capture)"]);
}

#[test]
fn a_capture_that_writes_no_trace_fails_closed() {
    let (tmp, base) = repository(MOCK, MOCK);
    let out = paired(tmp.path(), &base, &["--capture", "true {out}"]);
    assert_eq!(out.status.code(), Some(2));
    let m = report(&out)["error"]["message"].as_str().expect("message").to_string();
    assert!(m.contains("wrote no trace into {out}"), "{m}");
}

#[test]
fn an_arm_that_crashes_is_named_and_nothing_falls_back() {
    let (tmp, base) = repository(MOCK, "[bench]\nbackend = \"mock\"\nrepeats = 5\n");
    let out = paired(tmp.path(), &base, &[]);
    assert_eq!(out.status.code(), Some(2));
    let r = report(&out);
    let m = r["error"]["message"].as_str().expect("message");
    assert!(m.starts_with("round 1, the head arm: the benchmark exited 2: "), "{m}");
    assert!(m.contains("bench.repeats = 5"), "{m}");
    assert!(r["comparison"].is_null(), "no stored comparison instead");
    // A rank that dies in both arms: the first arm of round 1 is named.
    let (tmp, base) = repository(MOCK, MOCK);
    let out = commgate(tmp.path())
        .env("COMMGATE_MOCK_FAULT", "die:1")
        .args(["check", "--paired", "--base", &base, "--format", "json", "--comment", "never"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let m = report(&out)["error"]["message"].as_str().expect("message").to_string();
    assert!(m.starts_with("round 1, the "), "{m}");
}

#[test]
fn a_spent_budget_ends_undecided_and_passes() {
    let (tmp, base) = repository(MOCK, MOCK);
    let out = paired(tmp.path(), &base, &["--budget-minutes", "0.00001"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report(&out);
    assert_eq!(r["verdict"], "collect_more_evidence");
    assert_eq!(r["paired"]["stop"], "time_budget");
    let reason = r["reasons"][0].as_str().expect("reason");
    assert!(reason.starts_with("undecided when the time budget ended, after 1 rounds"), "{reason}");
    assert!(reason.contains("--budget-minutes"), "{reason}");
}

#[test]
fn paired_settings_are_checked_and_the_mode_can_come_from_the_file() {
    let (tmp, base) = repository(MOCK, MOCK);
    let out = paired(tmp.path(), &base, &["--max-rounds", "2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("give 3 to 100 rounds"));
    let out = paired(tmp.path(), &base, &["--capture", "train.py"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("it must contain {out}"));
    // `[check] mode = "paired"` in the base's settings file.
    let (tmp, base) = repository(&format!("{MOCK}[check]\nmode = \"paired\"\n"), MOCK);
    let out = commgate(tmp.path())
        .args(["check", "--base", &base, "--format", "json", "--comment", "never"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(report(&out)["paired"]["stop"], "decided");
}

#[test]
fn the_cpu_backend_measures_both_arms_for_real() {
    let cpu = "[bench]\nbackend = \"cpu\"\nrepeats = 20\nwarmup = 1\npayload_elements = 4096\ncompute_dim = 16\n";
    let (tmp, base) = repository(cpu, cpu);
    let out = paired(tmp.path(), &base, &["--max-rounds", "3"]);
    // Real timings: any verdict, but never an error, and three rounds of positive medians.
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report(&out);
    assert!(r["error"].is_null(), "{r}");
    for round in r["paired"]["rounds"].as_array().expect("rounds") {
        for m in round["medians"].as_array().expect("medians") {
            assert!(m["base_ms"].as_f64().expect("ms") > 0.0 && m["head_ms"].as_f64().expect("ms") > 0.0, "{m}");
        }
    }
}

#[test]
fn the_trusted_comment_posts_a_paired_report_and_refuses_a_forged_one() {
    let (tmp, base) = repository(MOCK, "[bench]\nbackend = \"mock\"\npayload_elements = 5000000\n");
    let path = tmp.path().join("report.json");
    let out = paired(tmp.path(), &base, &["--output", path.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    let comment = comment_dry_run(tmp.path(), &path);
    assert_eq!(comment.status.code(), Some(0), "{}", String::from_utf8_lossy(&comment.stderr));
    assert!(String::from_utf8_lossy(&comment.stdout).contains("head vs base on this runner, 3 rounds, interleaved"));
    // A fork's job rewrites the verdict to accept and keeps its regressed metrics.
    let mut forged: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    forged["verdict"] = "accept".into();
    forged["blocking"] = false.into();
    std::fs::write(&path, forged.to_string()).expect("write");
    let comment = comment_dry_run(tmp.path(), &path);
    assert_eq!(comment.status.code(), Some(2));
    let err = String::from_utf8_lossy(&comment.stderr);
    assert!(err.contains("its paired overlap median is regressed but the verdict is not a blocking `tune`"), "{err}");
    // And with every metric's state rewritten to agree: the figures still say regressed.
    for m in forged["paired"]["metrics"].as_array_mut().expect("metrics") {
        m["state"] = "unchanged".into();
    }
    std::fs::write(&path, forged.to_string()).expect("write");
    let comment = comment_dry_run(tmp.path(), &path);
    assert_eq!(comment.status.code(), Some(2));
    let err = String::from_utf8_lossy(&comment.stderr);
    assert!(err.contains("its paired overlap median is `unchanged` but its figures say `regressed`"), "{err}");
    // And with the overlap median's figures rewritten too (its interval and p-values made those
    // of no change): they are not what its rounds give.
    let m = &mut forged["paired"]["metrics"][0];
    (m["ci"], m["p_slower"], m["p_faster"], m["ratio"]) =
        (serde_json::json!([0.99, 1.01]), 0.5.into(), 0.5.into(), 1.0.into());
    std::fs::write(&path, forged.to_string()).expect("write");
    let comment = comment_dry_run(tmp.path(), &path);
    assert_eq!(comment.status.code(), Some(2));
    let err = String::from_utf8_lossy(&comment.stderr);
    assert!(err.contains("its paired overlap median's figures are not those its 3 rounds give"), "{err}");
}

/// `commgate comment --report REPORT --dry-run` in `dir`.
fn comment_dry_run(dir: &Path, report: &Path) -> std::process::Output {
    commgate(dir).args(["comment", "--report", report.to_str().expect("utf-8"), "--dry-run"]).output().expect("runs")
}

#[test]
fn the_runners_history_is_shown_beside_the_paired_verdict_and_never_in_it() {
    let (tmp, _) = repository(MOCK, MOCK);
    let d = tmp.path();
    for seed in ["2", "3", "4"] {
        let run = d.join(format!("run-{seed}.json"));
        let out = commgate(d)
            .args(["bench", "--quiet", "--seed", seed, "--output", run.to_str().expect("utf-8")])
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let out =
            commgate(d).args(["baseline", "update", "--from", run.to_str().expect("utf-8")]).output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::remove_file(&run).expect("remove");
    }
    git(d, &["add", "-A"]);
    git(d, &["commit", "-qm", "baselines"]);
    let base = git(d, &["rev-parse", "HEAD"]);
    let out = paired(d, &base, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r = report(&out);
    assert_eq!(r["verdict"], "accept");
    let history = r["paired"]["history"].as_str().expect("a history line");
    assert!(history.starts_with("this runner against its stored history (3 runs in baselines"), "{history}");
    assert!(history.ends_with("(not part of the paired verdict)"), "{history}");
    assert!(r["comparison"].is_null(), "the stored comparison does not judge");
}
