//! Runs a parsed command line: resolve settings, do the work, write the output. Returns the
//! exit status; errors travel up to `main`, which prints them once.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use crate::bench::runner::{self, BackendChoice, BenchOutcome};
use crate::bench::{self, launch};
use crate::cli::{BaselineCommand, Cli, Command};
use crate::config;
use crate::report;
use crate::trace::load::attribute_paths;
use crate::{baseline, compare, result};

/// How a successful run ended; `main` maps it to an exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Passed,
    /// Exit 1: the verdict is one the user asked to block on.
    Blocked,
}

pub fn run(cli: Cli) -> Result<Outcome> {
    let file = config::load_file(cli.config.as_deref())?;
    match cli.command {
        Command::Attribute(args) => {
            let cfg = config::attribute(args, &file)?;
            let attribution = attribute_paths(&cfg.paths, &cfg.options)?;
            let rendered = report::render_attribution(&attribution, cfg.format);
            emit(&rendered, cfg.output.as_deref())?;
            Ok(Outcome::Passed)
        }
        Command::Compare(args) => {
            let cfg = config::compare(args, &file)?;
            let baseline = baseline::load(&cfg.baseline)?;
            let current = result::load_result(&cfg.current)?;
            baseline.check_workload(&current, &cfg.current)?;
            let comparison = compare::compare(&baseline, &current, &cfg.options);
            emit(&report::render_comparison(&comparison, cfg.format), cfg.output.as_deref())?;
            Ok(if comparison.regression { Outcome::Blocked } else { Outcome::Passed })
        }
        Command::Bench(args) => {
            let settings = config::bench(args, &file, |k| std::env::var(k).ok(), runner::resolve_choice)?;
            let launch = launch::from_env(|k| std::env::var(k).ok()).map_err(|m| anyhow::anyhow!("{m}"))?;
            let mut settings = settings;
            if settings.plan.world_size == 0 {
                settings.plan.world_size = default_world_size(settings.backend);
            }
            match runner::run(&settings, launch)? {
                BenchOutcome::Planned(text) => emit(&text, None)?,
                BenchOutcome::Contributed { rank } => eprintln!("commgate: rank {rank} done; rank 0 writes the result"),
                BenchOutcome::Written { path, result } => {
                    eprintln!(
                        "commgate: wrote {} ({}: {})",
                        path.display(),
                        result.decision.verdict.as_str(),
                        result.decision.reason
                    );
                }
                BenchOutcome::Failed { path, result } => {
                    let why =
                        result.failure.as_ref().map_or_else(String::new, |f| format!("{}: {}", f.kind, f.message));
                    anyhow::bail!("the benchmark failed ({why}); the failure is recorded in {}", path.display());
                }
            }
            Ok(Outcome::Passed)
        }
        Command::Baseline(BaselineCommand::Update(args)) => {
            let cfg = config::update(args, &file)?;
            let u = baseline::update(&cfg.dir, &cfg.from, cfg.keep)?;
            if let Some(note) = &u.fingerprint_note {
                eprintln!("commgate: note: {note}");
            }
            let dropped = if u.dropped > 0 { format!(", dropped the oldest {}", u.dropped) } else { String::new() };
            eprintln!(
                "commgate: {} now holds {} run{}{dropped}",
                u.path.display(),
                u.runs,
                if u.runs == 1 { "" } else { "s" }
            );
            Ok(Outcome::Passed)
        }
    }
}

/// Ranks when `--world-size` is not given: every visible GPU on cuda, 2 otherwise.
fn default_world_size(choice: BackendChoice) -> u32 {
    match choice {
        BackendChoice::Cuda | BackendChoice::Auto => bench::cuda::probe().ok().filter(|n| *n > 0).unwrap_or(2),
        _ => 2,
    }
}

/// Writes a report to stdout, or atomically to a file (temporary file, then rename), so that a
/// failure never leaves a half-written report behind.
pub fn emit(text: &str, output: Option<&Path>) -> Result<()> {
    match output {
        None => {
            let mut out = std::io::stdout().lock();
            // A closed pipe (`| head`) is not an error worth a message.
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                other => other.context("cannot write to stdout"),
            }
        }
        Some(path) => write_atomic(path, text.as_bytes()),
    }
}

pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("report");
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("{}: cannot write the report (does the directory exist?)", path.display()))
}
