//! Runs a parsed command line: resolve settings, do the work, write the output. Returns the
//! exit status; errors travel up to `main`, which prints them once.

use anyhow::Result;

use crate::bench;
use crate::bench::launch::{self, Launch};
use crate::bench::runner::{self, BenchOutcome};
use crate::bench::settings::{BenchRequest, BenchSettings};
use crate::check;
use crate::cli::{BaselineCommand, Cli, Command};
use crate::config;
use crate::github::{self, CommentOutcome, CommentPolicy, GithubEnv};
use crate::output::emit;
use crate::report;
use crate::report::Format;
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
            let cfg = config::compare(args, &file, |k| std::env::var(k).ok())?;
            let baseline = baseline::load(&cfg.baseline)?;
            let current = result::load_result(&cfg.current)?;
            baseline.check_workload(&current, &cfg.current)?;
            let comparison = compare::compare(&baseline, &current, &cfg.options);
            emit(&report::render_comparison(&comparison, cfg.format), cfg.output.as_deref())?;
            Ok(if comparison.regression { Outcome::Blocked } else { Outcome::Passed })
        }
        Command::Bench(args) => {
            let request = config::bench(args, &file, |k| std::env::var(k).ok())?;
            let (settings, launch) = resolve_bench(request)?;
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
        Command::Check(args) => {
            let cfg = config::check(args, &file, |k| std::env::var(k).ok())?;
            run_check(cfg)
        }
        Command::Comment(args) => {
            let report = check::load_report(&args.report)?;
            let Some(mut gh) = GithubEnv::from_env(|k| std::env::var(k).ok()) else {
                anyhow::bail!("commgate comment runs inside GitHub Actions (GITHUB_ACTIONS=true with GITHUB_REPOSITORY, GITHUB_TOKEN and a pull-request event)");
            };
            if args.pr.is_some() {
                gh.pull_request = args.pr;
            }
            post_comment(&gh, &report::render_check(&report, Format::Markdown));
            Ok(Outcome::Passed)
        }
        Command::Baseline(BaselineCommand::Update(args)) => {
            let cfg = config::update(args, &file)?;
            let mut path = None;
            if let Some(from) = &cfg.from {
                let u = baseline::update(&cfg.dir, from, cfg.keep)?;
                if let Some(note) = &u.fingerprint_note {
                    eprintln!("commgate: note: {note}");
                }
                let dropped = if u.dropped > 0 { format!(", dropped the oldest {}", u.dropped) } else { String::new() };
                let plural = if u.runs == 1 { "" } else { "s" };
                eprintln!("commgate: {} now holds {} run{plural}{dropped}", u.path.display(), u.runs);
                path = Some(u.path);
            }
            if !cfg.traces.is_empty() {
                let path = match path {
                    Some(p) => p,
                    None => baseline::store_path_for(
                        &cfg.dir,
                        cfg.environment_profile.as_deref().unwrap_or_default(),
                        &cfg.workload_id,
                    )?,
                };
                let attribution = attribute_paths(&cfg.traces, &config::attribute_defaults(&file)?)?;
                let n = baseline::add_traces(&path, &cfg.name, attribution)?;
                eprintln!("commgate: {} now holds trace summary \"{}\" ({n} collectives)", path.display(), cfg.name);
            }
            Ok(Outcome::Passed)
        }
    }
}

/// The gate: measure (or load), judge, write the report, then talk to GitHub. The report is on
/// disk before any network call, and GitHub trouble never changes the exit code.
fn run_check(cfg: config::CheckConfig) -> Result<Outcome> {
    let result = match &cfg.result {
        Some(path) => result::load_result(path)?,
        None => {
            let (settings, launch) = resolve_bench(cfg.bench.clone())?;
            match runner::run(&settings, launch)? {
                BenchOutcome::Written { path, result } | BenchOutcome::Failed { path, result } => {
                    eprintln!("commgate: benchmark result in {}", path.display());
                    *result
                }
                BenchOutcome::Contributed { rank } => {
                    eprintln!("commgate: rank {rank} done; rank 0 judges the run");
                    return Ok(Outcome::Passed);
                }
                BenchOutcome::Planned(text) => {
                    emit(&text, None)?;
                    return Ok(Outcome::Passed);
                }
            }
        }
    };
    let report = check::evaluate(result, &cfg.options)?;
    if let Some(path) = &cfg.output {
        emit(&report::render_check(&report, Format::Json), Some(path))?;
    }
    emit(&report::render_check(&report, cfg.format), None)?;
    if let Some(gh) = GithubEnv::from_env(|k| std::env::var(k).ok()) {
        let markdown = report::render_check(&report, Format::Markdown);
        if let Err(e) = github::write_step_summary(&gh, &markdown) {
            eprintln!("commgate: warning: {e}");
        }
        let report_path = cfg.output.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
        let outputs = [
            ("verdict", report.verdict.as_str()),
            ("blocking", if report.blocking { "true" } else { "false" }),
            ("report", report_path.as_str()),
        ];
        if let Err(e) = github::write_outputs(&gh, &outputs) {
            eprintln!("commgate: warning: {e}");
        }
        let wanted = match cfg.comment {
            CommentPolicy::Never => false,
            CommentPolicy::Always => true,
            CommentPolicy::Auto => gh.pull_request.is_some(),
        };
        if wanted {
            post_comment(&gh, &markdown);
        }
    } else if cfg.comment == CommentPolicy::Always {
        eprintln!("commgate: warning: --comment always, but this is not GitHub Actions (GITHUB_ACTIONS is not true): no comment");
    }
    Ok(if report.fails() { Outcome::Blocked } else { Outcome::Passed })
}

/// Posts or updates the PR comment; trouble is a warning, never an error.
fn post_comment(gh: &GithubEnv, markdown: &str) {
    match github::upsert_comment(gh, markdown) {
        CommentOutcome::Created { url, .. } => eprintln!("commgate: commented on the pull request: {url}"),
        CommentOutcome::Updated { url, .. } => eprintln!("commgate: updated the pull-request comment: {url}"),
        CommentOutcome::Skipped(why) => eprintln!("commgate: no comment: {why}"),
        CommentOutcome::Warning(why) => eprintln!("commgate: warning: {why}"),
    }
}

/// Resolves a benchmark request against the launcher's environment and the machine: the one
/// place that probes CUDA to decide a setting, with at most one note on stderr.
fn resolve_bench(request: BenchRequest) -> Result<(BenchSettings, Option<Launch>)> {
    let launch = launch::from_env(|k| std::env::var(k).ok())?;
    let (settings, note) = request.resolve(launch.as_ref(), bench::cuda::probe)?;
    if let Some(note) = note {
        eprintln!("commgate: {note}");
    }
    Ok((settings, launch))
}
