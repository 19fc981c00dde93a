//! The Action's `commgate check` step, its shell script taken from `action.yml` and run with a
//! fake commgate that records what it was given: the settings an earlier step of the job could
//! have planted in the environment (`$GITHUB_ENV`) never reach commgate, and the pull request's
//! base commit is named explicitly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::process::Command;

mod common;
use common::git;

/// The `run: |` block of the step named `name`, de-indented.
fn step_script(action: &str, name: &str) -> String {
    let start = action.find(&format!("- name: {name}\n")).unwrap_or_else(|| panic!("no step {name}"));
    let rest = &action[start..];
    let run = rest.find("      run: |\n").expect("a run block") + "      run: |\n".len();
    let mut script = String::new();
    for line in rest[run..].lines() {
        if !line.is_empty() && !line.starts_with("        ") {
            break;
        }
        script.push_str(line.strip_prefix("        ").unwrap_or(line));
        script.push('\n');
    }
    script
}

#[test]
fn planted_settings_never_reach_commgate_and_the_base_is_named() {
    let action = std::fs::read_to_string(common::root().join("action.yml")).expect("action.yml");
    let script = step_script(&action, "commgate check");
    assert!(script.contains("\"$COMMGATE_BIN\" \"${args[@]}\""), "{script}");
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).expect("dir");
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("commgate.toml"), "[bench]\nbackend = \"mock\"\n").expect("settings");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "base"]);
    let base = git(&repo, &["rev-parse", "HEAD"]);
    // The fake commgate: its environment's COMMGATE_* and its arguments, one per line.
    let seen = tmp.path().join("seen.txt");
    let fake = tmp.path().join("commgate");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\n{{ env | grep '^COMMGATE_' | sort; printf 'arg %s\\n' \"$@\"; }} > '{}'\n", seen.display()),
    )
    .expect("fake");
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let output = tmp.path().join("github_output");
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(&repo)
        .env("COMMGATE_BIN", &fake)
        .env("COMMGATE_COMMENT_AUTHOR", "github-actions[bot]")
        // What a pull request's code could have written to $GITHUB_ENV in an earlier step.
        .env("COMMGATE_CONFIG", "pr/loose.toml")
        .env("COMMGATE_BASE", "HEAD")
        .env("COMMGATE_MIN_EFFECT", "0.99")
        .env("INPUT_BASELINES", "baselines")
        .env("INPUT_TRACES", "")
        .env("INPUT_RESULT", "")
        .env("INPUT_BACKEND", "mock")
        .env("INPUT_FAIL_ON", "regression")
        .env("INPUT_MODE", "stored")
        .env("INPUT_COMMENT", "never")
        .env("INPUT_WORKING_DIRECTORY", ".")
        .env("INPUT_EXTRA_ARGS", "")
        .env("INPUT_BASELINES_FROM_HEAD", "false")
        .env("BASE_SHA", &base)
        .env("RUNNER_TEMP", tmp.path())
        .env("GITHUB_OUTPUT", &output)
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let seen = std::fs::read_to_string(&seen).expect("the fake ran");
    // Only what the step sets itself (the binary's path, which commgate does not read, and the
    // comment's author).
    let settings: Vec<&str> =
        seen.lines().filter(|l| l.starts_with("COMMGATE_")).filter_map(|l| l.split('=').next()).collect();
    assert_eq!(settings, ["COMMGATE_BIN", "COMMGATE_COMMENT_AUTHOR"], "{seen}");
    assert!(seen.contains(&format!("arg --base\narg {base}\n")), "{seen}");
    for planted in ["COMMGATE_CONFIG", "COMMGATE_BASE", "COMMGATE_MIN_EFFECT"] {
        assert!(stdout.contains(&format!("commgate: ignoring {planted} from the job's environment")), "{stdout}");
    }
    assert!(std::fs::read_to_string(&output).expect("outputs").contains("exit-code=0"));
}
