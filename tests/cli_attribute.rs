//! `commgate attribute` through the binary: formats, settings, exit codes, and snapshots of the
//! three renderings of the project's hand-checked trace.

use std::path::Path;

use assert_cmd::Command;
use predicates::prelude::*;

fn commgate() -> Command {
    let mut cmd = Command::cargo_bin("commgate").expect("binary");
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
    for (key, _) in std::env::vars() {
        if key.starts_with("COMMGATE_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

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
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hand_checked");
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
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hand_checked");
    commgate()
        .current_dir(dir.path())
        .arg("attribute")
        .arg(&fixture)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("commgate.toml").and(predicate::str::contains("bogus")));
}

#[test]
fn compat_hta_and_steps_flags() {
    let out = stdout_of(&["attribute", "tests/fixtures/hand_checked", "--compat", "hta", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["source"]["compat"], "hta");
    assert_eq!(v["source"]["window"], "hta");
    let out = stdout_of(&["attribute", "tests/fixtures/hand_checked", "--steps", "4", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["source"]["steps"], 4);
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
