//! Runs a parsed command line: resolve settings, do the work, write the output. Returns the
//! [`Outcome`] (decided for `check` by [`commgate_gate::check::CheckReport::outcome`]); errors travel up to
//! `main`, which prints them once.
//!
//! GitHub is treated differently by the two commands that talk to it. For `check`, the verdict
//! is the exit code and the report is already in `--output` and the job summary, so trouble
//! posting the comment (a fork's read-only token, an outage) is a warning and never changes the
//! exit code: a GitHub outage must not block merges, nor turn a red gate green. For `comment`,
//! posting is the whole job, so not posting exits 2 with the reason.
//!
//! One file per command; this switchboard readies CUDA when the command may use it, reads the
//! settings file once (the base commit's for `check` on a pull request), and hands each command
//! its arguments.

mod attribute;
mod baseline;
mod bench;
mod check;
mod comment;
mod compare;
mod init;

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::cli::{BaselineCommand, Cli, Command};
use crate::config;
use commgate_bench::settings::BackendChoice;
use commgate_core::diag;
use commgate_core::output::emit;
pub use commgate_gate::decide::Outcome;
use commgate_report as report;
use commgate_report::Format;

/// Runs the parsed command line and returns how it ended; errors go up to `main`, printed once.
pub fn run(cli: Cli) -> Result<Outcome> {
    if may_run_cuda(&cli.command) {
        // First of all, on this thread: this may restart the program so that NCCL loads, which
        // must happen before anything a restart would lose exists.
        commgate_bench::cuda::prepare_at_start();
    }
    // `check` on a pull request is judged by its base commit's settings: the PR's own
    // commgate.toml is then not even parsed.
    let base = match &cli.command {
        Command::Check(args) => check::base_commit(&args.base)?,
        _ => None,
    };
    let mut config_path = cli.config.clone().unwrap_or_else(|| PathBuf::from(config::DEFAULT_FILE));
    let file = match (&base, &cli.command) {
        // `init` writes the settings file: an existing one (valid or not) is not read; nor is
        // it by the commands that print what the command line is (completions, man pages).
        (_, Command::Init(_) | Command::Completions(_) | Command::Man(_)) => config::FileConfig::default(),
        // Looked up upwards at the base as in the working tree: a file the pull request plants
        // in a subdirectory cannot stand in for the repository's.
        (Some(b), _) if cli.config.is_none() => {
            let (file, path) = check::base_settings_upward(&cli.from_env, b)?;
            config_path = path;
            file
        }
        (Some(b), _) => check::base_settings(&cli.from_env, b, &config_path)?,
        (None, _) => config::load_file(&cli)?,
    };
    match cli.command {
        Command::Attribute(args) => attribute::run(args, &file),
        Command::Compare(args) => compare::run(args, &file),
        Command::Bench(args) => bench::run(args, &file),
        Command::Check(args) => check::run(*args, &file, base.as_ref(), &config_path, cli.config.is_some()),
        Command::Comment(args) => comment::run(args),
        Command::Init(args) => init::run(&args),
        Command::Completions(args) => crate::cli::shell::completions(&args),
        Command::Man(args) => crate::cli::shell::man(&args),
        Command::Baseline(BaselineCommand::Update(args)) => baseline::update(args, &file),
        Command::Baseline(BaselineCommand::List(args)) => baseline::list(args, &file),
        Command::Baseline(BaselineCommand::Show(args)) => baseline::show(args, &file),
        Command::Baseline(BaselineCommand::Remove(args)) => baseline::remove(args, &file),
    }
}

/// Whether `command` may run the CUDA backend: `bench`, or `check` that runs the benchmark (no
/// `--result` files), unless its command line asks for `cpu` or `mock` (the environment and a
/// settings file are read later; readying the libraries for nothing costs a library lookup).
fn may_run_cuda(command: &Command) -> bool {
    let (flags, judges_results) = match command {
        Command::Bench(args) => (&args.flags, false),
        // A paired check runs each arm's benchmark as a process of its own, which readies them.
        Command::Check(args) => (&args.bench, !args.result.is_empty() || args.paired),
        _ => return false,
    };
    !judges_results && !matches!(flags.settings.backend, Some(BackendChoice::Cpu | BackendChoice::Mock))
}

/// A rendered report to stdout or `output`; text on a terminal gets its verdicts in colour.
fn emit_report(text: &str, format: Format, output: Option<&Path>) -> Result<()> {
    if format == Format::Text {
        commgate_core::output::emit_text(text, output)
    } else {
        emit(text, output)
    }
}

/// What an attribution does not cover (missing ranks, an ignored steps setting), on stderr too,
/// where a reader of the exit code looks.
fn print_notes(a: &commgate_trace::attribute::Attribution) {
    for note in a.notes() {
        diag::note(report::escape::plain(&note, report::escape::TEXT));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(args: &[&str]) -> Command {
        let cli = config::parse_args(std::iter::once("commgate").chain(args.iter().copied()), |_| None);
        cli.map(|c| c.command).unwrap_or_else(|_| panic!("{args:?} parses"))
    }

    /// The libraries are readied (and the program possibly restarted) only for a command that
    /// may run the CUDA backend, before anything else.
    #[test]
    fn only_a_run_that_may_use_cuda_readies_its_libraries() {
        assert!(may_run_cuda(&command(&["bench"])));
        assert!(may_run_cuda(&command(&["bench", "--backend", "cuda"])));
        assert!(may_run_cuda(&command(&["check", "--backend", "auto"])));
        assert!(!may_run_cuda(&command(&["bench", "--backend", "cpu"])));
        assert!(!may_run_cuda(&command(&["check", "--result", "r.json"])));
        assert!(!may_run_cuda(&command(&["attribute", "t.json"])));
    }
}
