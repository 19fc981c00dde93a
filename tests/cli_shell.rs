//! What the binary says about itself, through the binary: `completions SHELL` prints a script
//! that knows the subcommands (and an unknown shell is a usage error, exit 2), `man` prints roff
//! (valid for groff where it is installed) or writes one page per command, neither reads
//! `commgate.toml`, and `--version` keeps its first line exactly
//! `commgate X.Y.Z` (the action and the installer compare it) with the commit on a second line.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::process::Output;

mod common;
use common::{commgate, commgate_in};

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 stdout")
}

/// Runs `commgate ARGS…` expecting exit 0 and nothing on stderr; its stdout.
fn ok(args: &[&str]) -> String {
    let out = commgate().args(args).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    stdout(&out)
}

/// A page's first line after clap_mangen's two-line prelude (`.ie`/`.el`, defining the `Aq`
/// string): the `.TH` title line.
fn title(page: &str) -> &str {
    page.lines().find(|l| !l.starts_with(".ie ") && !l.starts_with(".el ")).unwrap_or_default()
}

#[test]
fn completions_for_each_shell_know_the_subcommands() {
    // What marks each shell's script as that shell's.
    for (shell, marker) in
        [("bash", "complete -F _commgate"), ("zsh", "#compdef commgate"), ("fish", "complete -c commgate")]
    {
        let script = ok(&["completions", shell]);
        assert!(script.contains(marker), "{shell}: no `{marker}` in\n{script}");
        for word in ["attribute", "check", "baseline", "completions", "man", "--fail-on"] {
            assert!(script.contains(word), "{shell}: `{word}` missing");
        }
    }
}

#[test]
fn the_bash_script_is_valid_bash() {
    let script = ok(&["completions", "bash"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("commgate.bash");
    std::fs::write(&path, script).expect("write");
    let out = std::process::Command::new("bash").arg("-n").arg(&path).output().expect("bash runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn an_unknown_or_missing_shell_is_a_usage_error() {
    for args in [&["completions", "tcsh"][..], &["completions"]] {
        let out = commgate().args(args).output().expect("runs");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("<SHELL>"), "{args:?}: {stderr}");
    }
    let out = commgate().args(["completions", "tcsh"]).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("'tcsh'") && stderr.contains("bash, elvish, fish, powershell, zsh"), "{stderr}");
}

#[test]
fn completions_and_man_do_not_read_the_settings_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("commgate.toml"), "this is = = not toml\n").expect("write");
    for args in [&["completions", "zsh"][..], &["man"]] {
        let out = commgate_in(dir.path()).args(args).output().expect("runs");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn the_man_page_is_roff_for_the_whole_command() {
    let page = ok(&["man"]);
    assert!(title(&page).starts_with(".TH commgate 1 "), "{}", &page[..80.min(page.len())]);
    for section in [".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH OPTIONS", ".SH SUBCOMMANDS", ".SH VERSION"] {
        assert!(page.contains(section), "no {section}");
    }
    for sub in ["attribute", "check", "baseline", "completions", "man"] {
        assert!(page.contains(&format!("\ncommgate\\-{sub}(1)\n")), "no {sub}");
    }
}

#[test]
fn man_dir_writes_one_page_per_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("man");
    let listed = ok(&["man", "--dir", out_dir.to_str().expect("utf-8 path")]);
    let mut names: Vec<String> = std::fs::read_dir(&out_dir)
        .expect("the directory was created")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8 name"))
        .collect();
    names.sort();
    for name in
        ["commgate.1", "commgate-attribute.1", "commgate-check.1", "commgate-baseline-update.1", "commgate-man.1"]
    {
        assert!(names.iter().any(|n| n == name), "{name} missing from {names:?}");
    }
    assert!(!names.iter().any(|n| n.contains("help")), "clap's `help` gets no page: {names:?}");
    assert_eq!(listed.lines().count(), names.len(), "every page written is listed:\n{listed}");
    for name in &names {
        let page = std::fs::read_to_string(out_dir.join(name)).expect("read");
        let want = format!(".TH {} 1 ", name.trim_end_matches(".1"));
        assert!(title(&page).starts_with(&want), "{name}: {}", title(&page));
        assert!(listed.lines().any(|l| l.ends_with(&format!("/{name}"))), "{name} not listed");
    }
    let update = std::fs::read_to_string(out_dir.join("commgate-baseline-update.1")).expect("read");
    assert!(update.contains("\\-\\-from"), "the page documents the command's flags");
}

#[test]
fn the_man_page_renders_without_warnings_where_groff_is_installed() {
    let Ok(probe) = std::process::Command::new("groff").arg("--version").output() else {
        return; // No groff on this machine: the roff is checked by the other tests only.
    };
    assert!(probe.status.success());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("commgate.1");
    std::fs::write(&path, ok(&["man"])).expect("write");
    let out =
        std::process::Command::new("groff").args(["-man", "-Tutf8", "-ww", "-z"]).arg(&path).output().expect("runs");
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn version_keeps_its_first_line_and_adds_the_commit() {
    let want = format!("commgate {}", env!("CARGO_PKG_VERSION"));
    let long = ok(&["--version"]);
    let lines: Vec<&str> = long.lines().collect();
    assert_eq!(lines.first(), Some(&want.as_str()), "{long}");
    // What build.rs found: nothing in a debug build (or a source tarball), the commit in a
    // release build of a checkout.
    match (env!("COMMGATE_BUILD_COMMIT"), env!("COMMGATE_BUILD_DATE")) {
        ("", _) => assert_eq!(lines.len(), 1, "{long}"),
        (commit, date) => {
            assert!(commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit()), "{commit}");
            let second = if date.is_empty() { format!("commit {commit}") } else { format!("commit {commit} ({date})") };
            assert_eq!(lines, [want.as_str(), second.as_str()], "{long}");
        }
    }
    // `-V` is the one line that scripts compare with `commgate $want`.
    assert_eq!(ok(&["-V"]), format!("{want}\n"));
}

#[test]
fn help_lists_the_new_commands() {
    let help = ok(&["--help"]);
    for command in ["completions ", "man "] {
        assert!(help.lines().any(|l| l.trim_start().starts_with(command)), "{help}");
    }
}
