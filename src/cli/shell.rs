//! What the command line says about itself: `--version`'s commit line, the shell completion
//! scripts (`commgate completions SHELL`, clap_complete) and the manual pages (`commgate man`,
//! clap_mangen). All are made from [`Cli`]'s definition by the binary that runs, so they cannot
//! drift from `--help`.
//!
//! The man pages come from a subcommand rather than a build script: a build script may write
//! only into `OUT_DIR`, deep inside `target/`, where no packager looks, and `cargo install` users
//! would have no page at all; the binary can always print its own (`commgate man | man -l -`).
//! `scripts/gen-man.sh` runs `commgate man --dir target/man`.

use std::sync::LazyLock;

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;

use super::{Cli, CompletionsArgs, ManArgs};
use commgate_core::output::{emit, write_atomic};
use commgate_gate::decide::Outcome;

/// The commit this binary was built from (12 hex digits) and its date, from `build.rs`; each
/// empty when unknown.
pub const BUILD_COMMIT: &str = env!("COMMGATE_BUILD_COMMIT");
pub const BUILD_DATE: &str = env!("COMMGATE_BUILD_DATE");

/// `--version`'s text after `commgate `: the version, then `commit 3f2a9c1e4b7d (2026-12-01)` on a
/// second line when the commit is known (release builds in a git checkout or from crates.io; see
/// `build.rs`). The first line stays exactly `commgate X.Y.Z`, and `-V` prints only that line.
pub static LONG_VERSION: LazyLock<String> = LazyLock::new(|| long_version(BUILD_COMMIT, BUILD_DATE));

fn long_version(commit: &str, date: &str) -> String {
    let version = env!("CARGO_PKG_VERSION");
    match (commit, date) {
        ("", _) => version.to_string(),
        (commit, "") => format!("{version}\ncommit {commit}"),
        (commit, date) => format!("{version}\ncommit {commit} ({date})"),
    }
}

/// `commgate completions SHELL`: the script on stdout.
pub fn completions(args: &CompletionsArgs) -> Result<Outcome> {
    emit(&completion_script(args.shell), None)?;
    Ok(Outcome::Passed)
}

/// The completion script for `shell`, for the binary named `commgate`.
pub fn completion_script(shell: Shell) -> String {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "commgate", &mut script);
    String::from_utf8_lossy(&script).into_owned()
}

/// `commgate man`: `commgate.1` on stdout, or with `--dir` every page written there (atomically)
/// and their paths listed on stdout.
pub fn man(args: &ManArgs) -> Result<Outcome> {
    let pages = man_pages()?;
    match &args.dir {
        None => {
            let (_, top) = pages.first().context("no manual page was generated")?;
            emit(top, None)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create the directory", dir.display()))?;
            let mut written = String::new();
            for (name, page) in &pages {
                let path = dir.join(name);
                write_atomic(&path, page.as_bytes())
                    .with_context(|| format!("{}: cannot write the manual page", path.display()))?;
                written.push_str(&format!("{}\n", path.display()));
            }
            emit(&written, None)?;
        }
    }
    Ok(Outcome::Passed)
}

/// Every manual page as (file name, roff): `commgate.1` first, then one per visible subcommand,
/// depth first (`commgate-baseline.1`, `commgate-baseline-update.1`, …). Hidden commands and
/// clap's `help` subcommand get none, as with `clap_mangen::generate_to`.
pub fn man_pages() -> Result<Vec<(String, String)>> {
    let mut top = Cli::command().disable_help_subcommand(true);
    // Names each subcommand `commgate-baseline-update` (the page's title and file name).
    top.build();
    let mut pages = Vec::new();
    add_pages(&top, &mut pages)?;
    Ok(pages)
}

fn add_pages(cmd: &clap::Command, pages: &mut Vec<(String, String)>) -> Result<()> {
    let mut man = clap_mangen::Man::new(cmd.clone()).manual("commgate manual");
    if !BUILD_DATE.is_empty() {
        man = man.date(BUILD_DATE);
    }
    let mut roff = Vec::new();
    man.render(&mut roff).context("cannot render the manual page")?;
    pages.push((man.get_filename(), String::from_utf8_lossy(&roff).into_owned()));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        add_pages(sub, pages)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_line_says_what_is_known() {
        let v = env!("CARGO_PKG_VERSION");
        assert_eq!(long_version("", "2026-12-01"), v);
        assert_eq!(long_version("3f2a9c1e4b7d", ""), format!("{v}\ncommit 3f2a9c1e4b7d"));
        assert_eq!(long_version("3f2a9c1e4b7d", "2026-12-01"), format!("{v}\ncommit 3f2a9c1e4b7d (2026-12-01)"));
    }

    #[test]
    fn every_command_has_a_page_and_help_none() {
        let pages = man_pages().expect("renders");
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.first(), Some(&"commgate.1"));
        for name in ["commgate-attribute.1", "commgate-check.1", "commgate-baseline-update.1", "commgate-man.1"] {
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("help") || n.contains('/')), "{names:?}");
        for (name, page) in &pages {
            // clap_mangen's two-line prelude (the `Aq` string for groff and others), then the title.
            let title = page.lines().find(|l| !l.starts_with(".ie ") && !l.starts_with(".el ")).unwrap_or_default();
            assert!(title.starts_with(&format!(".TH {} 1 ", name.trim_end_matches(".1"))), "{name}: {title}");
        }
    }
}
