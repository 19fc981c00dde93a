//! The commit `commgate --version` names on its second line (`commit 3f2a9c1e4b7d (2026-12-01)`),
//! handed to the compiler as `COMMGATE_BUILD_COMMIT` and `COMMGATE_BUILD_DATE` (each empty when
//! unknown; `src/cli/shell.rs` composes the line).
//!
//! Where it comes from, first found wins:
//! 1. git, only when this package's own directory holds `.git` (a directory, or a worktree's
//!    file): `git rev-parse` alone would walk up and could name an enclosing repository, such as
//!    a home directory kept in git around `~/.cargo/registry`.
//! 2. `.cargo_vcs_info.json`, which `cargo package` writes into a published crate: the commit
//!    without a date.
//! 3. Nothing: a source tarball, git missing or refusing the directory (another user's checkout
//!    in a container). `--version` is then the one line `commgate X.Y.Z`, as `-V` always is.
//!
//! Only release-profile builds look (`cargo build --release`, `cargo install`, the release assets,
//! `--profile profiling`): a new commit reruns this script, and cargo then recompiles the crate and
//! every test binary even when no source changed, a cost the edit-test-commit loop of debug
//! builds would pay on every commit. Debug builds print the one line.
//!
//! Reruns only when this file or the checked-out commit changes: HEAD, the branch it points to,
//! and the packed refs (each watched only when it exists, since cargo reruns a build script on
//! every build while a watched file is missing). Nothing is written anywhere.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    // "release" for the release profile and those that inherit from it.
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let found = if release { from_git(&dir).or_else(|| from_vcs_info(&dir)) } else { None };
    let (commit, date) = found.unwrap_or_default();
    println!("cargo:rustc-env=COMMGATE_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=COMMGATE_BUILD_DATE={date}");
}

/// The checked-out commit (12 hex digits) and its commit date (`YYYY-MM-DD`, or empty), when
/// `dir` is the top of a git checkout and git answers.
fn from_git(dir: &Path) -> Option<(String, String)> {
    if !dir.join(".git").exists() {
        return None;
    }
    let commit = git(dir, &["rev-parse", "--short=12", "HEAD"]).filter(|c| is_hex(c, 7..=40))?;
    let date = git(dir, &["log", "-1", "--format=%cd", "--date=short"]).filter(|d| is_date(d)).unwrap_or_default();
    watch_head(dir);
    Some((commit, date))
}

/// Tells cargo which files change when another commit is checked out or the branch moves.
fn watch_head(dir: &Path) {
    let mut names = vec!["HEAD".to_string(), "packed-refs".to_string(), "reftable/tables.list".to_string()];
    // `refs/heads/main`; a detached HEAD answers `HEAD`, already watched.
    if let Some(branch) = git(dir, &["rev-parse", "--symbolic-full-name", "HEAD"]).filter(|r| r.starts_with("refs/")) {
        names.push(branch);
    }
    for name in names {
        // `--git-path` finds the right directory for a worktree (its own HEAD, the shared refs).
        let Some(path) = git(dir, &["rev-parse", "--git-path", &name]) else { continue };
        let path = dir.join(path);
        if path.is_file() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// The commit a published crate was packaged from: the `"sha1"` of `.cargo_vcs_info.json`.
fn from_vcs_info(dir: &Path) -> Option<(String, String)> {
    let text = std::fs::read_to_string(dir.join(".cargo_vcs_info.json")).ok()?;
    let after = &text[text.find("\"sha1\"")? + "\"sha1\"".len()..];
    let start = after.find(|c: char| c.is_ascii_hexdigit())?;
    let sha: String = after[start..].chars().take_while(char::is_ascii_hexdigit).collect();
    (sha.len() == 40).then(|| (sha[..12].to_string(), String::new()))
}

/// `git -C dir ARGS…`'s first line of output, when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.lines().next()?.trim().to_string())
}

/// Whether `s` is lowercase hex of a length in `len` (what goes into the binary is checked: it
/// ends up on a line of `--version`).
fn is_hex(s: &str, len: std::ops::RangeInclusive<usize>) -> bool {
    len.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `s` looks like `2026-12-01`.
fn is_date(s: &str) -> bool {
    s.len() == 10 && s.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() })
}
