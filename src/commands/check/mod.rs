//! `commgate check`: the gate. Measure (or read `--result`), compare with the baselines, attribute
//! the traces, decide, and publish the report everywhere it goes.

mod arm;
mod paired;

use super::bench::{nccl_setup, rank_failed, resolve_workloads, run_environment};
use commgate_gate::check;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::cli::BaseFlags;
use crate::config;
use commgate_bench::launch::{self};
use commgate_bench::nccl::TuningLog;
use commgate_bench::runner::{self, BenchOutcome};
use commgate_bench::settings::BenchSettings;
use commgate_core::base_commit::BaseCommit;
use commgate_core::diag;
use commgate_core::output::emit;
use commgate_core::result;
use commgate_gate::decide::Outcome;
use commgate_gate::decide::{self};
use commgate_github::{self as github, CommentOutcome, CommentPolicy, GithubEnv};
use commgate_report as report;
use commgate_report::Format;

use super::{emit_report, print_notes};

/// `commgate check`, judged by the base commit's settings and baselines when `base` is given.
pub(super) fn run(
    args: crate::cli::CheckArgs,
    file: &config::FileConfig,
    base: Option<&BaseCommit>,
    config_path: &Path,
    config_given: bool,
) -> Result<Outcome> {
    let arm_flags = paired::bench_flags(&args);
    let mut cfg = config::check(args, file, |k| std::env::var(k).ok())?;
    if cfg.mode == check::Mode::Paired {
        // The stored runs only inform a paired report (the runner's history): a store the base
        // commit cannot give is said, not fatal.
        let _copy = match base.map(|b| use_base_baselines(b, config_path, &mut cfg)) {
            Some(Ok(copy)) => copy,
            Some(Err(e)) => {
                diag::warn(format_args!("the stored history is left out of the paired report: {e:#}"));
                None
            }
            None => None,
        };
        let report = paired::run(&cfg, base, &arm_flags, config_path, config_given)?;
        return finish(&cfg, report);
    }
    // Held until the gate is done: the private copy of the base commit's baselines.
    let _copy = match base {
        Some(b) => use_base_baselines(b, config_path, &mut cfg)?,
        None => None,
    };
    run_check(cfg)
}

/// The commit whose baselines and settings judge: `--base`, else in a pull request its base
/// commit; `None` with `--baselines-from-head` or outside a pull request. A pull request whose
/// base commit cannot be had is an error (exit 2), never judged by the head's own baselines.
pub(super) fn base_commit(flags: &BaseFlags) -> Result<Option<BaseCommit>> {
    if flags.baselines_from_head {
        return Ok(None);
    }
    let rev = match &flags.base {
        Some(rev) => Some(rev.clone()),
        None => github::pull_request_base(|k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?,
    };
    let Some(rev) = rev else {
        return Ok(None);
    };
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    Ok(Some(BaseCommit::resolve(&cwd, &rev)?))
}

/// The base commit's settings file, named `PATH@SHA` in messages (defaults when it had none).
pub(super) fn base_settings(
    from_env: &[(String, String)],
    base: &BaseCommit,
    path: &Path,
) -> Result<config::FileConfig> {
    match base.file(path)? {
        Some(text) => {
            let label = PathBuf::from(format!("{}@{}", path.display(), base.short()));
            config::file_from_text(from_env, &label, text)
        }
        None => Ok(config::FileConfig::default()),
    }
}

/// The base commit's settings when no file is named: its `commgate.toml` in the working
/// directory, else the nearest one above it up to the repository's root, as the working tree's
/// is found ([`config::find_upward`]); a file found above has its relative paths taken from its
/// own directory. Returns the settings and the file's path from the working directory (to name
/// it, and to tell whether the pull request changed it); defaults and `commgate.toml` when the
/// base had none.
pub(super) fn base_settings_upward(
    from_env: &[(String, String)],
    base: &BaseCommit,
) -> Result<(config::FileConfig, PathBuf)> {
    for up in 0..=base.depth() {
        let dir: PathBuf = std::iter::repeat_n("..", up).collect();
        let path = dir.join(config::DEFAULT_FILE);
        if let Some(text) = base.file(&path)? {
            let label = PathBuf::from(format!("{}@{}", path.display(), base.short()));
            let mut file = config::file_from_text(from_env, &label, text)?;
            if up > 0 {
                file.rebase(&dir);
            }
            return Ok((file, path));
        }
    }
    Ok((config::FileConfig::default(), PathBuf::from(config::DEFAULT_FILE)))
}

/// Points the gate at a private copy of the base commit's baselines and records what the pull
/// request changes in them. A directory that neither the base nor the working tree has stays
/// as named, so a misspelled `--baselines` still fails closed.
fn use_base_baselines(
    base: &BaseCommit,
    config_path: &Path,
    cfg: &mut config::CheckConfig,
) -> Result<Option<tempfile::TempDir>> {
    let dir = cfg.options.baselines.clone();
    let changed = base.changed(&[config_path, &dir])?;
    let copy = base.tree(&dir)?;
    let base_has_none = std::fs::read_dir(copy.path()).map_or(true, |mut d| d.next().is_none());
    if base_has_none && !dir.exists() {
        return Ok(None);
    }
    cfg.options.base = Some(check::BaseRef { sha: base.sha.clone(), dir, changed });
    cfg.options.baselines = copy.path().to_path_buf();
    Ok(Some(copy))
}

/// The gate: measure (or load), judge, write the report, then talk to GitHub. The report is on
/// disk before any network call, also when the gate could not evaluate (it says what failed),
/// and GitHub trouble never changes the exit code.
fn run_check(cfg: config::CheckConfig) -> Result<Outcome> {
    let report = if cfg.result.is_empty() {
        // Before anything is probed or started: see `nccl_setup`.
        let log = nccl_setup(&cfg.workloads);
        match measure_all(&cfg, log.as_ref())? {
            Measured::Results(results, traces) => {
                check::evaluate_runs_with(results, &cfg.options, traces.map(|t| Ok(*t)))?
            }
            Measured::Report(report) => *report,
            Measured::Done(outcome) => return Ok(outcome),
        }
    } else {
        let profile = cfg.workloads.first().and_then(|w| w.request.run.environment_profile.clone());
        let loaded = result_files(&cfg.result)?
            .into_iter()
            .map(|p| Ok((p.clone(), result::with_profile(result::load_result(&p)?, profile.as_deref(), &p)?)))
            .collect::<Result<Vec<_>>>()?;
        check::evaluate_runs(check::several::group_runs(loaded)?, &cfg.options)?
    };
    finish(&cfg, report)
}

/// Publishes the report and says how the command ends.
fn finish(cfg: &config::CheckConfig, report: check::CheckReport) -> Result<Outcome> {
    if let Some(a) = &report.attribution {
        print_notes(a);
    }
    let report = check::CheckReport { job: check::JobRef::from_env(|k| std::env::var(k).ok()), ..report };
    publish(cfg, &report)?;
    let outcome = report.outcome();
    if let Some(e) = &report.error {
        if outcome == Outcome::CouldNotEvaluate {
            diag::error(e);
        } else {
            diag::warn(format_args!("{e}; exit 0 only because of --fail-on never"));
        }
    }
    Ok(outcome)
}

/// The files `check --result` names, each directory replaced by the files directly in it (by
/// name; hidden files and subdirectories left out): a directory of nccl-tests outputs or of
/// result files is judged as if each were named.
fn result_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if !p.is_dir() {
            out.push(p.clone());
            continue;
        }
        let entries = std::fs::read_dir(p).with_context(|| format!("{}: cannot list the directory", p.display()))?;
        // Each file judged as if it were named: links followed; a pipe, a socket, a device, a
        // broken link or a link loop is an error naming it, never skipped. Hidden entries and
        // subdirectories are not results.
        let mut files: Vec<PathBuf> = Vec::new();
        for entry in entries {
            let entry = entry.with_context(|| format!("{}: cannot list the directory", p.display()))?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            match commgate_core::input::file_or_dir(&path) {
                Ok(true) => files.push(path),
                Ok(false) => {}
                Err(e) => anyhow::bail!(
                    "{}: {e} (in the --result directory {}: remove it, or pass the result files by name)",
                    path.display(),
                    p.display()
                ),
            }
        }
        if files.is_empty() {
            anyhow::bail!(
                "{}: the directory holds no file to judge; pass result files or nccl-tests output",
                p.display()
            );
        }
        files.sort();
        out.extend(files);
    }
    Ok(out)
}

/// What running the workloads of a `check` gave.
enum Measured {
    /// Each workload's runs (`--runs`), in order (a failed run's too: its failure is judged),
    /// and the traces' attribution, made before the runs.
    Results(Vec<Vec<result::RunResult>>, Option<Box<commgate_gate::decide::mitigation::Diagnosis>>),
    /// The benchmark could not start: the report says so.
    Report(Box<check::CheckReport>),
    /// Nothing to judge here (a dry run's plan, or a rank other than 0): the command's end.
    Done(Outcome),
}

/// Runs every workload `bench` would run with the same flags and settings, one result file
/// each, in order.
fn measure_all(cfg: &config::CheckConfig, log: Option<&TuningLog>) -> Result<Measured> {
    let launch = launch::from_env(|k| std::env::var(k).ok())?;
    let rank = launch.as_ref().map_or(0, |l| l.rank);
    // Settings the machine refuses are bad input, before anything runs (as for `bench`).
    let all = resolve_workloads(cfg.workloads.clone(), launch.as_ref(), "judge")?;
    // Every input is checked before the benchmark, which can take minutes: a misspelled
    // `--baselines`, a corrupt store or unreadable traces end the gate now, in its report.
    let profiles: Vec<(String, &str)> = all.iter().map(|s| (runner::profile_of(s), s.workload_id.as_str())).collect();
    let traces = if rank == 0 {
        match check::preflight(&cfg.options, profiles.iter().map(|(p, w)| (p.as_str(), *w))) {
            Ok(traces) => traces.map(Box::new),
            Err(e) => return Ok(Measured::Report(Box::new(check::not_started(e, &cfg.options)))),
        }
    } else {
        None
    };
    let mut results = Vec::with_capacity(all.len());
    for settings in &all {
        let mut runs = Vec::new();
        let mut first_path: Option<PathBuf> = None;
        for k in 1..=cfg.runs {
            // The 2nd to Kth runs' files sit beside the first's (`<first>.run2.json`, …).
            let settings = match &first_path {
                Some(first) => &run_settings(settings, first, k),
                None => settings,
            };
            match runner::run(
                settings,
                launch.clone(),
                &run_environment(launch.as_ref(), log),
                decide::bench_run::decide,
            ) {
                Ok(BenchOutcome::Written { path, result } | BenchOutcome::Failed { path, result }) => {
                    let run = if cfg.runs > 1 { format!(", run {k} of {}", cfg.runs) } else { String::new() };
                    diag::info(format_args!(
                        "benchmark result in {} (workload {}{run})",
                        path.display(),
                        settings.workload_id
                    ));
                    first_path.get_or_insert(path);
                    let failed = result.failure.is_some();
                    runs.push(*result);
                    // A failed run is the workload's evidence; a broken machine would fail the rest too.
                    if failed {
                        break;
                    }
                }
                // Other ranks take part in every run; rank 0 judges them.
                Ok(BenchOutcome::Contributed { rank }) if k < cfg.runs => {
                    diag::info(format_args!("rank {rank} done with run {k} of {}", cfg.runs));
                }
                Ok(BenchOutcome::Contributed { rank }) => {
                    diag::info(format_args!("rank {rank} done; rank 0 judges the run"));
                    return Ok(Measured::Done(Outcome::Passed));
                }
                Ok(BenchOutcome::Planned(text)) => {
                    emit(&text, None)?;
                    return Ok(Measured::Done(Outcome::Passed));
                }
                // Another rank's own part failed: it leaves the report to rank 0 (which sees the
                // failure through the rendezvous) and exits as rank 0 will, 2 unless `--fail-on
                // never`, so the launcher fails the job too.
                Err(e) if rank != 0 => return Ok(Measured::Done(rank_failed(rank, &e, cfg.options.fail_on))),
                // Rank 0 reports for the job: a benchmark that cannot even start is a report too.
                Err(e) => {
                    let which =
                        if all.len() > 1 { format!("workload {}: ", settings.workload_id) } else { String::new() };
                    return Ok(Measured::Report(Box::new(check::could_not_run(format!("{which}{e}"), &cfg.options))));
                }
            }
        }
        results.push(runs);
    }
    Ok(Measured::Results(results, traces))
}

/// The settings of a workload's `k`th run (k ≥ 2): its result file beside the first run's,
/// `<first stem>.run<k>.json`, so a gate's runs read as one group in the results directory.
fn run_settings(settings: &BenchSettings, first: &Path, k: u32) -> BenchSettings {
    let stem = first.file_stem().map_or_else(|| "result".into(), |s| s.to_string_lossy().into_owned());
    let mut s = settings.clone();
    s.run.output = Some(first.with_file_name(format!("{stem}.run{k}.json")));
    s
}

/// Writes the report everywhere it goes: `--output`, stdout, and inside GitHub Actions the job
/// summary, the step outputs and (per `--comment`) the PR comment, in that order.
fn publish(cfg: &config::CheckConfig, report: &check::CheckReport) -> Result<()> {
    if let Some(path) = &cfg.output {
        emit(&report::render_check(report, Format::Json), Some(path))?;
    }
    emit_report(&report::render_check_in(report, cfg.format, cfg.width), cfg.format, None)?;
    let Some(gh) = GithubEnv::from_env(|k| std::env::var(k).ok()) else {
        if cfg.comment == CommentPolicy::Always {
            diag::warn("--comment always, but this is not GitHub Actions (GITHUB_ACTIONS is not true): no comment");
        }
        return Ok(());
    };
    let markdown = report::render_check(report, Format::Markdown);
    if let Err(e) = github::write_step_summary(&gh, &markdown) {
        diag::warn(e);
    }
    let report_path = cfg.output.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    let outputs = [
        ("verdict", report.verdict.as_str()),
        ("blocking", if report.blocking { "true" } else { "false" }),
        ("error", report.error.as_ref().map_or("", |e| e.kind.as_str())),
        ("report", report_path.as_str()),
    ];
    if let Err(e) = github::write_outputs(&gh, &outputs) {
        diag::warn(e);
    }
    let wanted = match cfg.comment {
        CommentPolicy::Never => false,
        CommentPolicy::Always => true,
        CommentPolicy::Auto => gh.pull_request.is_some(),
    };
    if wanted {
        // A warning at most: see the module doc.
        match github::upsert_comment(&gh, &markdown) {
            CommentOutcome::Created { url, .. } => diag::info(format_args!("commented on the pull request: {url}")),
            CommentOutcome::Updated { url, .. } => diag::info(format_args!("updated the pull-request comment: {url}")),
            CommentOutcome::Skipped(why) => diag::info(format_args!("no comment: {why}")),
            CommentOutcome::Warning(why) => diag::warn(format_args!("{why}; the report is in the job summary")),
        }
    }
    Ok(())
}
