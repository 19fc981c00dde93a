//! In a pull request the gate judges with the base commit's baselines and `commgate.toml`, not
//! the PR's own: a PR that raises `min_effect` or rewrites its baseline store is still judged
//! by the base's, and the report names what it changed. `--baselines-from-head` opts out; a
//! base commit missing from a shallow clone fails closed with the command that fetches it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::Path;
use std::process::Output;

use serde_json::{json, Value};

mod common;
use common::{commgate_in as commgate, git, root};

const STORE: &str = "tests/fixtures/compare/baselines/SIM-MOCK/par-overlap-allreduce-matmul.json";
const SLOWER: &str = "tests/fixtures/compare/current-slower.json";

/// A training repository whose main branch holds the real store and settings, and a PR head
/// that loosens `min_effect` and replaces the store with copies of the slower run. Returns the
/// clone and the base SHA.
fn repository() -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    git(d, &["init", "-q"]);
    let store_dir = d.join("baselines/SIM-MOCK");
    std::fs::create_dir_all(&store_dir).expect("dir");
    std::fs::copy(root().join(STORE), store_dir.join("par-overlap-allreduce-matmul.json")).expect("store");
    std::fs::write(d.join("commgate.toml"), "[compare]\nmin_effect = 0.03\n").expect("settings");
    std::fs::copy(root().join(SLOWER), d.join("slower.json")).expect("result");
    git(d, &["add", "-A"]);
    git(d, &["commit", "-qm", "main"]);
    let base = git(d, &["rev-parse", "HEAD"]);
    std::fs::write(d.join("commgate.toml"), "[compare]\nmin_effect = 0.999999\n").expect("settings");
    git(d, &["commit", "-qam", "PR: a looser gate"]);
    (tmp, base)
}

fn check(dir: &Path, extra: &[&str]) -> Output {
    commgate(dir)
        .args(["check", "--result", "slower.json", "--format", "json", "--comment", "never"])
        .args(extra)
        .output()
        .expect("runs")
}

/// `check` as a `pull_request` job of GitHub Actions runs it, its event payload at `event`.
fn check_in_pull_request(dir: &Path, event: &Path) -> Output {
    commgate(dir)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_EVENT_NAME", "pull_request")
        .env("GITHUB_EVENT_PATH", event)
        .args(["check", "--result", "slower.json", "--format", "json", "--comment", "never"])
        .output()
        .expect("runs")
}

fn report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
}

#[test]
fn the_head_cannot_loosen_its_own_gate() {
    let (tmp, base) = repository();
    // Judged by the PR's own settings, the +8 % run passes…
    let head = check(tmp.path(), &["--baselines-from-head"]);
    assert_eq!(head.status.code(), Some(0), "{}", String::from_utf8_lossy(&head.stderr));
    assert!(report(&head)["base"].is_null());
    // …judged by the base's, it blocks, and the report names the edit.
    let out = check(tmp.path(), &["--base", &base]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let v = report(&out);
    assert_eq!(v["verdict"], "tune");
    assert_eq!(v["base"]["sha"], base.as_str());
    assert_eq!(v["base"]["changed"], json!(["commgate.toml"]));
    assert_eq!(v["baseline"]["path"], "baselines/SIM-MOCK/par-overlap-allreduce-matmul.json");
    let reasons = v["reasons"].to_string();
    assert!(reasons.contains("this pull request changes commgate.toml"), "{reasons}");
}

#[test]
fn an_edited_baseline_is_ignored_in_favour_of_the_base_one() {
    let (tmp, base) = repository();
    // The PR replaces every stored run with its own slower run: compared with itself, it passes.
    let store = tmp.path().join("baselines/SIM-MOCK/par-overlap-allreduce-matmul.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&store).expect("store")).expect("json");
    let slower: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join(SLOWER)).expect("run")).expect("json");
    let runs = v["runs"].as_array_mut().expect("runs");
    for (i, run) in runs.iter_mut().enumerate() {
        *run = slower.clone();
        run["created_at"] = format!("2026-11-30T00:00:{i:02}Z").into();
    }
    std::fs::write(&store, v.to_string()).expect("forge");
    std::fs::write(tmp.path().join("commgate.toml"), "[compare]\nmin_effect = 0.03\n").expect("settings");
    git(tmp.path(), &["commit", "-qam", "PR: a friendlier baseline"]);
    assert_eq!(check(tmp.path(), &["--baselines-from-head"]).status.code(), Some(0));

    // In Actions, the base comes from the event payload.
    let event = tmp.path().join("event.json");
    std::fs::write(&event, json!({"pull_request": {"number": 9, "base": {"sha": base}}}).to_string()).expect("event");
    let out = check_in_pull_request(tmp.path(), &event);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let v = report(&out);
    assert_eq!(v["base"]["changed"], json!(["baselines/SIM-MOCK/par-overlap-allreduce-matmul.json"]));
}

/// In a pull request whose event payload gives no usable base commit, the gate cannot judge:
/// exit 2, naming what is missing, never the head's own (looser) settings and a green check.
#[test]
fn a_pull_request_without_a_usable_base_commit_is_not_judged_by_its_head() {
    let (tmp, _) = repository();
    let d = tmp.path();
    std::fs::write(d.join("event.json"), r#"{"pull_request": {"number": 3, "base": {"sha": "abc"}}}"#).expect("write");
    let mut bad_payloads = vec![d.join("event.json")];
    std::fs::write(d.join("broken.json"), "{").expect("write");
    bad_payloads.push(d.join("broken.json"));
    bad_payloads.push(d.join("absent.json"));
    for payload in bad_payloads {
        let out = check_in_pull_request(d, &payload);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", payload.display());
        assert!(stderr.contains("--base <sha>") && stderr.contains("pull_request"), "{stderr}");
        assert!(out.stdout.is_empty(), "no report: {}", String::from_utf8_lossy(&out.stdout));
    }
}

#[test]
fn a_base_commit_missing_from_a_shallow_clone_fails_closed() {
    let (tmp, _) = repository();
    let absent = "0123456789abcdef0123456789abcdef01234567";
    let out = check(tmp.path(), &["--base", absent]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fetch-depth: 0") && stderr.contains(absent), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn a_base_without_baselines_means_no_baseline_yet_but_a_misspelled_dir_still_fails() {
    let (tmp, base) = repository();
    // A directory neither the base nor the head has: a misspelling, exit 2.
    let out = check(tmp.path(), &["--base", &base, "--baselines", "baselnes"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(report(&out)["error"]["kind"], "baselines_missing");
    // A PR that adds the first store: the base has none, so there is honestly no baseline yet.
    std::fs::create_dir_all(tmp.path().join("new-stores/SIM-MOCK")).expect("dir");
    std::fs::copy(root().join(STORE), tmp.path().join("new-stores/SIM-MOCK/par-overlap-allreduce-matmul.json"))
        .expect("store");
    git(tmp.path(), &["add", "-A"]);
    git(tmp.path(), &["commit", "-qm", "PR: first baselines"]);
    let out = check(tmp.path(), &["--base", &base, "--baselines", "new-stores"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = report(&out);
    assert_eq!(v["verdict"], "collect_more_evidence");
    assert_eq!(v["baseline"]["exists"], false);
    assert_eq!(v["baseline"]["path"], "new-stores/SIM-MOCK/par-overlap-allreduce-matmul.json");
}

#[test]
fn a_head_whose_settings_do_not_even_parse_is_judged_by_the_base() {
    let (tmp, base) = repository();
    std::fs::write(tmp.path().join("commgate.toml"), "[compare\nmin_effect = \n").expect("broken settings");
    let out = check(tmp.path(), &["--base", &base]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let v = report(&out);
    assert_eq!(v["base"]["changed"], json!(["commgate.toml"]));
    // From a subdirectory, paths climb to the same files.
    let sub = tmp.path().join("jobs");
    std::fs::create_dir_all(&sub).expect("dir");
    std::fs::copy(tmp.path().join("slower.json"), sub.join("slower.json")).expect("result");
    let out = commgate(&sub)
        .args(["--config", "../commgate.toml", "check", "--result", "slower.json", "--format", "json"])
        .args(["--comment", "never", "--baselines", "../baselines", "--base", &base])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(report(&out)["baseline"]["path"], "../baselines/SIM-MOCK/par-overlap-allreduce-matmul.json");
}

/// Run from a subdirectory (the Action's `working-directory`), the base commit's settings are
/// found upwards as the working tree's are: a `sub/commgate.toml` the pull request plants does
/// not replace the repository's stricter one with defaults.
#[test]
fn a_settings_file_planted_in_a_subdirectory_does_not_replace_the_bases() {
    let (tmp, _) = repository();
    let d = tmp.path();
    // Main's settings block on any `tune`, not only a confirmed regression.
    std::fs::write(d.join("commgate.toml"), "[compare]\nmin_effect = 0.03\n[check]\nfail_on = \"tune\"\n")
        .expect("settings");
    git(d, &["commit", "-qam", "main: stricter"]);
    let base = git(d, &["rev-parse", "HEAD"]);
    let sub = d.join("sub");
    std::fs::create_dir_all(&sub).expect("dir");
    std::fs::write(sub.join("commgate.toml"), "[compare]\nmin_effect = 0.999999\n").expect("settings");
    std::fs::copy(root().join(SLOWER), sub.join("slower.json")).expect("result");
    git(d, &["add", "-A"]);
    git(d, &["commit", "-qm", "PR: a looser gate in sub/"]);
    let out = check(&sub, &["--base", &base, "--baselines", "../baselines"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let v = report(&out);
    assert_eq!((v["verdict"].as_str(), v["fail_on"].as_str()), (Some("tune"), Some("tune")), "{v}");
    // Judged by its own files, the planted one would have let it pass.
    let head = check(&sub, &["--baselines-from-head", "--baselines", "../baselines"]);
    assert_eq!(head.status.code(), Some(0), "{}", String::from_utf8_lossy(&head.stderr));
}

/// A `git` first on `PATH` (where an earlier step of the job can put one, with `$GITHUB_PATH`)
/// is never run: it would run as the job's user and could read commgate's environment, its
/// token included, in /proc. The base commit is still read, with the system's git.
#[cfg(unix)]
#[test]
fn a_git_planted_first_on_path_is_never_run() {
    use std::os::unix::fs::PermissionsExt;
    let (tmp, base) = repository();
    let bin = tempfile::tempdir().expect("tempdir");
    let ran = bin.path().join("ran");
    std::fs::write(bin.path().join("git"), format!("#!/bin/sh\necho \"$@\" >> '{}'\nexit 1\n", ran.display()))
        .expect("planted git");
    std::fs::set_permissions(bin.path().join("git"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let out = commgate(tmp.path())
        .env("PATH", path)
        .args(["check", "--result", "slower.json", "--format", "json", "--comment", "never", "--base", &base])
        .output()
        .expect("runs");
    assert!(!ran.exists(), "the planted git ran: {}", std::fs::read_to_string(&ran).unwrap_or_default());
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(report(&out)["base"]["sha"], base.as_str());
}
