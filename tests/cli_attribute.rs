//! `commgate attribute` through the binary: formats, settings, exit codes, and snapshots of the
//! three renderings of the project's hand-checked trace.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::Path;

use predicates::prelude::*;

mod common;
use common::{commgate, commgate_in, root};

fn stdout_of(args: &[&str]) -> String {
    let out = commgate().args(args).output().expect("runs");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn text_report_snapshot() {
    insta::assert_snapshot!(stdout_of(&["attribute", "tests/fixtures/hand_checked"]));
}

#[test]
fn markdown_report_snapshot() {
    insta::assert_snapshot!(stdout_of(&["attribute", "tests/fixtures/hand_checked", "--format", "markdown"]));
}

#[test]
fn json_report_snapshot_and_shape() {
    let out = stdout_of(&["attribute", "tests/fixtures/hand_checked", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    for key in
        ["schema_version", "source", "by_collective", "priority", "num_events", "ranks", "mitigation", "followup"]
    {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["priority"]["collective"], "all_reduce");
    insta::assert_snapshot!(out);
}

#[test]
fn seed_events_follow_the_seed_rules() {
    let out = stdout_of(&["attribute", "tests/fixtures/seed_events.json", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["source"]["format"], "events");
    assert_eq!(v["by_collective"]["all_reduce"]["count"], 2);
    assert_eq!(v["by_collective"]["all_reduce"]["payload_bytes"], 3072);
    assert_eq!(v["priority"]["collective"], "all_to_all");
    assert_eq!(v["mitigation"]["strategy"], "reduce_routing_traffic");
    assert_eq!(v["followup"]["decision"], "tune");
}

#[test]
fn thresholds_come_from_flags_env_and_commgate_toml() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = root().join("tests/fixtures/hand_checked");
    std::fs::write(dir.path().join("commgate.toml"), "[thresholds]\naccept_exposed_ms = 0.1\n").expect("write");
    let run = |extra: &[&str], env: Option<(&str, &str)>| {
        let mut cmd = commgate();
        cmd.current_dir(dir.path()).arg("attribute").arg(&fixture).args(["--format", "json"]).args(extra);
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        v["followup"]["decision"].as_str().unwrap_or_default().to_string()
    };
    assert_eq!(run(&[], None), "tune", "the file lowers the budget");
    assert_eq!(run(&[], Some(("COMMGATE_ACCEPT_EXPOSED_MS", "1.0"))), "accept", "env beats the file");
    assert_eq!(
        run(&["--accept-exposed-ms", "0.05"], Some(("COMMGATE_ACCEPT_EXPOSED_MS", "1.0"))),
        "tune",
        "flag beats env"
    );
}

#[test]
fn a_bad_settings_file_exits_2_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("commgate.toml"), "[thresholds]\nbogus = 1\n").expect("write");
    let fixture = root().join("tests/fixtures/hand_checked");
    commgate()
        .current_dir(dir.path())
        .arg("attribute")
        .arg(&fixture)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("commgate.toml").and(predicate::str::contains("bogus")));
}

#[test]
fn compat_hta_flag() {
    let out = stdout_of(&["attribute", "tests/fixtures/hand_checked", "--compat", "hta", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["source"]["compat"], "hta");
    assert_eq!(v["source"]["window"], "hta");
}

// ---------------------------------------------------------------------------------------------
// `steps`: the ProfilerStep markers win; the setting fills in for traces without them.

/// `attribute ARGS` in `dir` with `env`: (exit code, stdout, stderr).
fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = commgate_in(dir).args(args).envs(env.iter().copied()).output().expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn hand_checked() -> String {
    root().join("tests/fixtures/hand_checked").display().to_string()
}

#[test]
fn a_steps_setting_never_overrides_step_markers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let traces = hand_checked();
    let (_, plain, _) = run_in(dir.path(), &["attribute", &traces, "--format", "json"], &[]);
    let plain: serde_json::Value = serde_json::from_str(&plain).expect("JSON");
    assert_eq!(plain["source"]["steps"], 2, "three ProfilerStep markers: two whole steps");
    // The docs' own `steps = 4` (docs/commands.md), the flag and the variable: the markers' 2 steps stay, and
    // every way of reading the report says the setting was ignored.
    std::fs::write(dir.path().join("commgate.toml"), "[attribute]\nsteps = 4\n").expect("write");
    for (extra, env, set_by) in [
        (&[][..], &[][..], "steps = 4 (commgate.toml)"),
        (&["--steps", "3"][..], &[][..], "--steps 3"),
        (&[][..], &[("COMMGATE_STEPS", "5")][..], "COMMGATE_STEPS=5"),
    ] {
        let mut args = vec!["attribute", traces.as_str(), "--format", "json"];
        args.extend_from_slice(extra);
        let (code, out, err) = run_in(dir.path(), &args, env);
        assert_eq!(code, Some(0), "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(v["source"]["steps"], 2, "{set_by}");
        assert_eq!(v["by_collective"], plain["by_collective"], "{set_by}: per-step figures unchanged");
        assert_eq!(v["followup"], plain["followup"], "{set_by}: the verdict does not flip");
        assert_eq!(v["source"]["steps_ignored"]["set_by"], set_by);
        assert_eq!(v["source"]["steps_ignored"]["marker_steps"], 2);
        assert!(
            err.contains(&format!(
                "commgate: note: {set_by} ignored: the traces' ProfilerStep markers delimit 2 steps"
            )),
            "{err}"
        );
    }
    for format in ["text", "markdown"] {
        let (_, out, _) = run_in(dir.path(), &["attribute", &traces, "--format", format], &[]);
        assert!(out.contains("steps = 4 ") && out.contains("ignored"), "{format}: {out}");
    }
    // A setting equal to the markers' count says nothing.
    let (_, out, err) = run_in(dir.path(), &["attribute", &traces, "--steps", "2", "--format", "json"], &[]);
    assert!(!out.contains("steps_ignored") && !err.contains("note"), "{err}");
}

#[test]
fn a_steps_setting_divides_traces_without_markers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(Path::new(&hand_checked()).join("rank-0.json")).expect("fixture");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    v["traceEvents"]
        .as_array_mut()
        .expect("events")
        .retain(|e| !e["name"].as_str().unwrap_or("").starts_with("ProfilerStep"));
    std::fs::write(dir.path().join("rank-0.json"), v.to_string()).expect("write");
    let (code, out, err) = run_in(dir.path(), &["attribute", "rank-0.json", "--steps", "4", "--format", "json"], &[]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!((v["source"]["steps"].as_u64(), v["source"]["window"].as_str()), (Some(4), Some("trace")));
    assert!(v["source"].get("steps_ignored").is_none(), "{out}");
    assert!(!err.contains("ignored"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Partial rank sets: named in every rendering, and never judged.

#[test]
fn one_rank_of_a_two_rank_job_is_named_as_a_partial_rank_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rank0 = Path::new(&hand_checked()).join("rank-0.json").display().to_string();
    let (code, out, err) = run_in(dir.path(), &["attribute", &rank0, "--format", "json"], &[]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let coverage = &v["source"]["coverage"];
    assert_eq!((coverage["ranks_present"].as_u64(), coverage["world_size"].as_u64()), (Some(1), Some(2)));
    assert_eq!(coverage["missing_ranks"], serde_json::json!([{"first": 1, "last": 1}]));
    assert!(err.contains("commgate: note: partial rank set: ranks 0 of 2: 1 missing (1)"), "{err}");
    let (_, text, _) = run_in(dir.path(), &["attribute", &rank0], &[]);
    assert!(text.contains("Note: partial rank set: ranks 0 of 2: 1 missing (1)\n"), "{text}");
    let (_, md, _) = run_in(dir.path(), &["attribute", &rank0, "--format", "markdown"], &[]);
    assert!(md.contains("**Note:** partial rank set: ranks 0 of 2: 1 missing \\(1\\)"), "{md}");
    // Both ranks: nothing to say.
    let (_, text, err) = run_in(dir.path(), &["attribute", &hand_checked()], &[]);
    assert!(!text.contains("partial") && !err.contains("partial"), "{text}{err}");
}

#[test]
fn check_with_a_partial_rank_set_asks_for_more_evidence() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = root();
    let store = tmp.path().join("baselines");
    std::fs::create_dir_all(store.join("SIM-MOCK")).expect("dir");
    let name = "SIM-MOCK/par-overlap-allreduce-matmul.json";
    std::fs::copy(root.join("tests/fixtures/compare/baselines").join(name), store.join(name)).expect("copy");
    let store = store.display().to_string();
    let (code, _, err) = run_in(
        tmp.path(),
        &[
            "baseline",
            "update",
            "--traces",
            &hand_checked(),
            "--environment-profile",
            "SIM-MOCK",
            "--baselines",
            &store,
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    let current = root.join("tests/fixtures/compare/current-same.json").display().to_string();
    let rank0 = Path::new(&hand_checked()).join("rank-0.json").display().to_string();
    let check = |traces: &str| {
        let args =
            ["check", "--result", &current, "--baselines", &store, "--traces", traces, "--output", "report.json"];
        let (code, out, err) = run_in(tmp.path(), &args, &[]);
        assert_ne!(code, Some(1), "partial evidence never blocks: {err}");
        let report = std::fs::read_to_string(tmp.path().join("report.json")).expect("report written");
        let report: serde_json::Value = serde_json::from_str(&report).expect("JSON");
        (report, out)
    };
    let (full, _) = check(&hand_checked());
    assert_eq!(full["verdict"], "accept", "{full}");
    let (partial, text) = check(&rank0);
    assert_eq!(
        (partial["verdict"].as_str(), partial["blocking"].as_bool()),
        (Some("collect_more_evidence"), Some(false))
    );
    let reasons = partial["reasons"].to_string();
    assert!(reasons.contains("partial rank set (ranks 0 of 2: 1 missing (1))"), "{reasons}");
    assert!(text.contains("Note: partial rank set: ranks 0 of 2: 1 missing (1)"), "{text}");
    // The PR comment says it too (rendered from the report, as `commgate comment` does).
    let (_, md, _) = run_in(
        tmp.path(),
        &["check", "--result", &current, "--baselines", &store, "--traces", &rank0, "--format", "markdown"],
        &[],
    );
    assert!(md.contains("ranks 0 of 2: 1 missing \\(1\\)"), "{md}");
    assert!(md.contains("`collect_more_evidence`"), "{md}");
}

#[test]
fn usage_errors_exit_2() {
    commgate().arg("attribute").assert().code(2);
    commgate().args(["attribute", "x.json", "--format", "html"]).assert().code(2);
    commgate().args(["attribute", "x.json", "--steps", "0"]).assert().code(2);
    commgate().arg("frobnicate").assert().code(2);
}

#[test]
fn help_and_version_exit_0() {
    commgate().arg("--help").assert().success().stdout(predicate::str::contains("attribute"));
    commgate().arg("--version").assert().success().stdout(predicate::str::contains(env!("CARGO_PKG_VERSION")));
}
