//! The Action's `commgate check` step, its shell script taken from `action.yml` and run with a
//! fake commgate that records what it was given: the settings an earlier step of the job could
//! have planted in the environment (`$GITHUB_ENV`) never reach commgate, and the pull request's
//! base commit is named explicitly. Every step runs under the shell `action.yml` names for it,
//! which a planted `$BASH_ENV`, shell function or `PATH` entry (`$GITHUB_PATH`) cannot hook.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::Path;
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

/// The lines of the step named `name` from `- name:` up to its `run: |`.
fn step_head<'a>(action: &'a str, name: &str) -> &'a str {
    let start = action.find(&format!("- name: {name}\n")).unwrap_or_else(|| panic!("no step {name}"));
    let rest = &action[start..];
    &rest[..rest.find("      run: |\n").expect("a run block")]
}

/// The names of the step's steps: every `- name:` under `runs.steps`.
fn step_names(action: &str) -> Vec<&str> {
    action.lines().filter_map(|l| l.strip_prefix("    - name: ")).collect()
}

/// The step's `shell:` as a command line, `{0}` replaced with the script written into `dir`.
fn step_command(action: &str, name: &str, dir: &Path) -> Command {
    let head = step_head(action, name);
    let shell = head.lines().find_map(|l| l.strip_prefix("      shell: ")).expect("a shell");
    let file = dir.join(format!("{}.sh", name.replace(' ', "-")));
    std::fs::write(&file, step_script(action, name)).expect("script");
    let mut words = shell.split_whitespace().map(|w| if w == "{0}" { file.to_str().expect("utf-8") } else { w });
    let mut cmd = Command::new(words.next().expect("a program"));
    cmd.args(words);
    cmd
}

/// A program named `name` in `dir` that appends its arguments to `dir/ran` and fails.
fn planted(dir: &Path, name: &str) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\necho \"{name} $*\" >> '{}'\nexit 1\n", dir.join("ran").display()))
        .expect("planted");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
}

/// Every step runs /bin/bash by its path with -p (no `$BASH_ENV`, no functions or `SHELLOPTS`
/// from the environment), and only the step that runs commgate, and nothing else, has the token.
#[test]
fn every_step_has_a_shell_the_environment_cannot_hook_and_one_holds_the_token() {
    let action = std::fs::read_to_string(common::root().join("action.yml")).expect("action.yml");
    let names = step_names(&action);
    assert_eq!(names, ["Install commgate", "Fetch the base commit", "commgate check"]);
    for name in names {
        let head = step_head(&action, name);
        assert!(head.contains("      shell: /bin/bash --noprofile --norc -p -eo pipefail {0}\n"), "{head}");
        let script = step_script(&action, name);
        assert!(script.contains("unset BASH_ENV ENV LD_PRELOAD LD_AUDIT"), "{name}: {script}");
        let token = head.contains("GITHUB_TOKEN:");
        assert_eq!(token, name == "commgate check", "{name}: {head}");
        if !token {
            assert!(script.contains("export PATH=/usr/local/bin:/usr/bin:/bin\n"), "{name}: {script}");
        }
    }
    let install = step_script(&action, "Install commgate");
    assert!(install.contains("env -i \"${keep[@]}\" /bin/bash"), "{install}");
}

/// The fetch of the base commit runs the system's git, never one an earlier step put first on
/// `PATH`.
#[test]
fn the_base_commit_is_fetched_with_the_systems_git() {
    let action = std::fs::read_to_string(common::root().join("action.yml")).expect("action.yml");
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).expect("dir");
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("commgate.toml"), "").expect("settings");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "base"]);
    let base = git(&repo, &["rev-parse", "HEAD"]);
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).expect("dir");
    planted(&bin, "git");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    for (sha, fetches) in [(base.as_str(), false), ("0123456789abcdef0123456789abcdef01234567", true)] {
        let out = step_command(&action, "Fetch the base commit", tmp.path())
            .current_dir(&repo)
            .env("PATH", &path)
            .env("INPUT_WORKING_DIRECTORY", ".")
            .env("INPUT_BASELINES_FROM_HEAD", "false")
            .env("BASE_SHA", sha)
            .output()
            .expect("bash");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(!bin.join("ran").exists(), "{}", std::fs::read_to_string(bin.join("ran")).unwrap_or_default());
        // A commit the clone lacks: fetched (here there is no remote to fetch from: a warning).
        assert_eq!(stdout.contains("fetching the pull request's base commit"), fetches, "{stdout}");
        assert_eq!(stdout.contains("::warning title=commgate::could not fetch the base commit"), fetches, "{stdout}");
    }
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
    // The fake commgate: its environment's COMMGATE_* and LD_*, and its arguments, one per line.
    let seen = tmp.path().join("seen.txt");
    let fake = tmp.path().join("commgate");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\n{{ env | grep '^COMMGATE_\\|^LD_' | sort; printf 'arg %s\\n' \"$@\"; }} > '{}'\n",
            seen.display()
        ),
    )
    .expect("fake");
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    // What an earlier step could have planted to run code in this step, which holds the token:
    // a $BASH_ENV file, shell functions and options, a loader hook.
    let hooked = tmp.path().join("hooked");
    let hook = tmp.path().join("hook.sh");
    std::fs::write(&hook, format!("echo \"BASH_ENV ran with ${{GITHUB_TOKEN:-}}\" >> '{}'\n", hooked.display()))
        .expect("hook");
    let function = format!("() {{ echo \"function ran with $GITHUB_TOKEN\" >> '{}'; }}", hooked.display());
    let output = tmp.path().join("github_output");
    let out = step_command(&action, "commgate check", tmp.path())
        .current_dir(&repo)
        .env("GITHUB_TOKEN", "s3cret-token")
        .env("BASH_ENV", &hook)
        .env("ENV", &hook)
        .env("BASH_FUNC_printf%%", &function)
        .env("BASH_FUNC_echo%%", &function)
        .env("SHELLOPTS", "xtrace")
        .env("PS4", format!("$(cat '{}' >&2)", hook.display()))
        .env("LD_PRELOAD", "")
        .env("LD_AUDIT", "")
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
    assert!(!hooked.exists(), "{}", std::fs::read_to_string(&hooked).unwrap_or_default());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("hooked"), "{}", String::from_utf8_lossy(&out.stderr));
    let seen = std::fs::read_to_string(&seen).expect("the fake ran");
    assert!(!seen.contains("LD_PRELOAD") && !seen.contains("LD_AUDIT"), "{seen}");
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
