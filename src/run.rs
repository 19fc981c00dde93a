//! Runs a parsed command line: resolve settings, do the work, write the output. Returns the
//! [`Outcome`] (decided for `check` by [`check::CheckReport::outcome`]); errors travel up to
//! `main`, which prints them once.
//!
//! GitHub is treated differently by the two commands that talk to it. For `check`, the verdict
//! is the exit code and the report is already in `--output` and the job summary, so trouble
//! posting the comment (a fork's read-only token, an outage) is a warning and never changes the
//! exit code: a GitHub outage must not block merges, nor turn a red gate green. For `comment`,
//! posting is the whole job, so not posting exits 2 with the reason.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::cli::{BaseFlags, BaselineCommand, Cli, Command, InitArgs};
use crate::config;
use crate::init;
use commgate_bench as bench;
use commgate_bench::launch::{self, Launch};
use commgate_bench::nccl::{self, TuningLog};
use commgate_bench::runner::{self, BenchOutcome};
use commgate_bench::settings::{BackendChoice, BenchSettings};
use commgate_bench::BenchError;
use commgate_core::base_commit::BaseCommit;
use commgate_core::diag;
use commgate_core::output::emit;
use commgate_core::result;
use commgate_gate::baseline;
use commgate_gate::check;
use commgate_gate::decide::mitigation::diagnose;
pub use commgate_gate::decide::Outcome;
use commgate_gate::decide::{self, gate, ErrorKind, EvaluationError, FailOn};
use commgate_github::{self as github, CommentOutcome, CommentPolicy, GithubEnv};
use commgate_report as report;
use commgate_report::Format;
use commgate_trace::load::{attribute_paths, partial_paths};
use commgate_trace::partial;

pub fn run(cli: Cli) -> Result<Outcome> {
    if may_run_cuda(&cli.command) {
        // First of all, on this thread: this may restart the program so that NCCL loads, which
        // must happen before anything a restart would lose exists.
        bench::cuda::prepare_at_start();
    }
    // `check` on a pull request is judged by its base commit's settings: the PR's own
    // commgate.toml is then not even parsed.
    let base = match &cli.command {
        Command::Check(args) => base_commit(&args.base)?,
        _ => None,
    };
    let config_path = cli.config.clone().unwrap_or_else(|| PathBuf::from(config::DEFAULT_FILE));
    let file = match (&base, &cli.command) {
        // `init` writes the settings file: an existing one (valid or not) is not read; nor is
        // it by the commands that print what the command line is (completions, man pages).
        (_, Command::Init(_) | Command::Completions(_) | Command::Man(_)) => config::FileConfig::default(),
        (Some(b), _) => base_settings(&cli.from_env, b, &config_path)?,
        (None, _) => config::load_file(&cli)?,
    };
    match cli.command {
        Command::Attribute(args) => {
            let cfg = config::attribute(args, &file)?;
            if let Some(out) = &cfg.partial {
                return write_partial(&cfg, out);
            }
            let attribution = diagnose(attribute_paths(&cfg.paths, &cfg.options)?, &cfg.thresholds);
            print_notes(&attribution);
            let rendered = report::render_attribution_in(&attribution, cfg.format, cfg.width);
            emit_report(&rendered, cfg.format, cfg.output.as_deref())?;
            Ok(Outcome::Passed)
        }
        Command::Compare(args) => {
            let cfg = config::compare(args, &file)?;
            let (baseline, kept) = baseline::load_kept(&cfg.baseline)?;
            // nccl-tests output names no profile; here the baseline's is as good as any.
            let profile = baseline.runs.first().map(|r| r.environment_profile.clone());
            let current = result::with_profile(result::load_result(&cfg.current)?, profile.as_deref(), &cfg.current)?;
            baseline.check_workload(&current, &cfg.current)?;
            let comparison = decide::comparison::compare_kept(&baseline, &current, &cfg.options, &kept);
            emit_report(
                &report::render_comparison_in(&comparison, cfg.format, cfg.width),
                cfg.format,
                cfg.output.as_deref(),
            )?;
            Ok(gate::compare_outcome(&comparison))
        }
        Command::Bench(args) => {
            let declared = config::bench(args, &file, |k| std::env::var(k).ok())?;
            // Before anything is probed or started: see `nccl_setup`.
            let log = nccl_setup(&declared);
            let launch = launch::from_env(|k| std::env::var(k).ok())?;
            let (all, notes) = bench::settings::resolve_all(declared, launch.as_ref(), bench::cuda::probe)?;
            for note in notes {
                diag::info(note);
            }
            if all.len() > 1 && launch.is_some() {
                anyhow::bail!(
                    "{} workloads under a multi-process launcher: run one per job (--workload NAME, or one \
                     --payload-sizes entry)",
                    all.len()
                );
            }
            run_benches(&all, launch, log.as_ref())
        }
        Command::Check(args) => {
            let mut cfg = config::check(*args, &file, |k| std::env::var(k).ok())?;
            // Held until the gate is done: the private copy of the base commit's baselines.
            let _copy = match &base {
                Some(b) => use_base_baselines(b, &config_path, &mut cfg)?,
                None => None,
            };
            run_check(cfg)
        }
        Command::Comment(args) => {
            let mut report = check::load_report(&args.report)?;
            // The report may be a fork's: its job link is shown only when it points into this
            // repository's runs.
            let var = |k: &str| std::env::var(k).ok();
            let prefix =
                var("GITHUB_SERVER_URL").zip(var("GITHUB_REPOSITORY")).and_then(|(s, r)| check::runs_prefix(&s, &r));
            report.job = report.job.as_ref().and_then(|j| j.vetted(prefix.as_deref()));
            let markdown = report::render_check(&report, Format::Markdown);
            if args.dry_run {
                emit(&markdown, None)?;
                return Ok(Outcome::Passed);
            }
            let Some(mut gh) = GithubEnv::from_env(|k| std::env::var(k).ok()) else {
                anyhow::bail!(
                    "nothing was posted: this is not GitHub Actions (GITHUB_ACTIONS is not true); \
                     run it in a workflow job, or preview the comment with `commgate comment --dry-run --report {}`",
                    args.report.display()
                );
            };
            if args.pr.is_some() {
                gh.pull_request = args.pr;
            }
            if gh.pull_request.is_none() {
                anyhow::bail!(
                    "nothing was posted: the event `{}` is not a pull request; pass --pr N (or COMMGATE_PR)",
                    gh.event_name.as_deref().unwrap_or("unknown")
                );
            }
            match github::upsert_comment(&gh, &markdown) {
                CommentOutcome::Created { url, .. } => diag::info(format_args!("commented on the pull request: {url}")),
                CommentOutcome::Updated { url, .. } => {
                    diag::info(format_args!("updated the pull-request comment: {url}"))
                }
                CommentOutcome::Skipped(why) | CommentOutcome::Warning(why) => {
                    anyhow::bail!("nothing was posted: {why}")
                }
            }
            Ok(Outcome::Passed)
        }
        Command::Init(args) => run_init(&args),
        Command::Completions(args) => crate::cli::shell::completions(&args),
        Command::Man(args) => crate::cli::shell::man(&args),
        Command::Baseline(BaselineCommand::Update(args)) => {
            let cfg = config::update(args, &file)?;
            // Attributed before the store is locked or touched: bad traces change nothing.
            let traces = if cfg.traces.is_empty() {
                None
            } else {
                let attribution = attribute_paths(&cfg.traces, &config::attribute_defaults(&file)?)?;
                print_notes(&attribution);
                Some((cfg.name, attribution))
            };
            let targets: Vec<baseline::Target> = if cfg.from.is_empty() {
                vec![baseline::Target::File {
                    profile: cfg.environment_profile.clone().unwrap_or_default(),
                    workload_id: cfg.workload_id,
                }]
            } else {
                cfg.from.into_iter().map(baseline::Target::Result).collect()
            };
            let changes: Vec<baseline::Change> = targets
                .into_iter()
                .map(|target| baseline::Change {
                    target,
                    keep: cfg.keep,
                    history_keep: cfg.history_keep,
                    traces: traces.clone(),
                    profile: cfg.environment_profile.clone(),
                })
                .collect();
            let waiting = || diag::info(format_args!("waiting for another update of {} to finish", cfg.dir.display()));
            for updated in baseline::update_all(&cfg.dir, changes, waiting)? {
                for line in updated.messages() {
                    diag::info(line);
                }
            }
            Ok(Outcome::Passed)
        }
        Command::Baseline(BaselineCommand::List(args)) => {
            let dir = config::store_dir(&args.store, &file);
            let listing = baseline::list::list(&dir)?;
            emit(&report::history::list(&listing, args.format), None)?;
            let esc = |p: &str| report::escape::plain(p, report::escape::PATH);
            let failed: Vec<String> = listing.failed().map(|s| esc(&s.path)).collect();
            if !failed.is_empty() {
                anyhow::bail!("{} store(s) could not be read (listed above): {}", failed.len(), failed.join(", "));
            }
            Ok(Outcome::Passed)
        }
        Command::Baseline(BaselineCommand::Show(args)) => {
            let dir = config::store_dir(&args.store, &file);
            let path = baseline::show::resolve(&args.target, &dir, args.profile.as_deref())?;
            let shown = baseline::show::show(&path)?;
            emit(&report::history::show(&shown, args.format), None)?;
            Ok(Outcome::Passed)
        }
    }
}

/// What the run records from the process environment, read here so the run reads none, and
/// the NCCL tuning log it reads NCCL's choice from.
fn run_environment(launch: Option<&Launch>, log: Option<&TuningLog>) -> runner::RunEnvironment {
    let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    let env = runner::RunEnvironment::read(launch, std::env::vars(), |k| std::env::var_os(k), host_name);
    runner::RunEnvironment { tuning_log: log.map(|l| l.dir().to_path_buf()), ..env }
}

/// NCCL's settings for the runs of `declared`: the pinned algorithm and protocol and, unless
/// they pin both, the tuning log NCCL's choice is read from ([`TuningLog::start`]). They go
/// into this process's environment now, on the main thread before anything is probed or any
/// thread started, for NCCL to read when the CUDA backend initialises it ([`nccl::apply`]).
/// Only for a backend that may be CUDA; cpu and mock only record the pinned values. The log's
/// directory lives as long as what this returns.
fn nccl_setup(declared: &[bench::settings::Declared]) -> Option<TuningLog> {
    let request = &declared.first()?.request;
    if !matches!(request.backend, BackendChoice::Cuda | BackendChoice::Auto) || request.run.dry_run {
        return None;
    }
    let tuning = request.run.nccl;
    let mut vars = tuning.environment();
    let log = TuningLog::start(&tuning, |k| std::env::var(k).ok()).map(|(log, more)| {
        vars.extend(more);
        log
    });
    nccl::apply(&vars);
    log
}

/// Runs each workload in turn, saying what each wrote, and prints the result files written on
/// stdout, one a line. The first failed run stops the rest (a hung GPU would hang them too).
fn run_benches(all: &[BenchSettings], launch: Option<Launch>, log: Option<&TuningLog>) -> Result<Outcome> {
    let several = all.len() > 1;
    let mut written: Vec<PathBuf> = Vec::new();
    let mut results: Vec<Box<result::RunResult>> = Vec::new();
    for settings in all {
        let id = &settings.workload_id;
        match runner::run(settings, launch.clone(), &run_environment(launch.as_ref(), log), decide::run::decide)? {
            BenchOutcome::Planned(text) if several => emit(&format!("workload {id}\n{text}"), None)?,
            BenchOutcome::Planned(text) => emit(&text, None)?,
            BenchOutcome::Contributed { rank } => {
                diag::info(format_args!("rank {rank} done; rank 0 writes the result"))
            }
            BenchOutcome::Written { path, result } => {
                diag::info(format_args!(
                    "wrote {} (workload {id}; {}: {})",
                    path.display(),
                    result.decision.verdict.as_str(),
                    result.decision.reason
                ));
                for line in report::bench::run_summary(&result).lines() {
                    diag::info(format_args!("  {line}"));
                }
                written.push(path);
                results.push(result);
            }
            BenchOutcome::Failed { path, result } => {
                let why = result.failure.as_ref().map_or_else(String::new, |f| format!("{}: {}", f.kind, f.message));
                let before = if written.is_empty() {
                    String::new()
                } else {
                    let list: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
                    format!("; written before it: {}", list.join(", "))
                };
                anyhow::bail!(
                    "the benchmark of workload {id} failed ({why}); the failure is recorded in {}{before}",
                    path.display()
                );
            }
        }
    }
    let runs: Vec<&result::RunResult> = results.iter().map(|r| r.as_ref()).collect();
    if let Some(sweep) = report::bench::sweep_table(&runs) {
        diag::info("the sweep, as nccl-tests prints one (time: the collective alone, median of the slowest rank):");
        for line in sweep.lines() {
            diag::info(format_args!("  {line}"));
        }
    }
    if !written.is_empty() {
        let list: String = written.iter().map(|p| format!("{}\n", p.display())).collect();
        emit(&list, None)?;
    }
    Ok(Outcome::Passed)
}

/// `commgate init`: check the values, plan every file, write them (all or none), say what next.
fn run_init(args: &InitArgs) -> Result<Outcome> {
    let values = init::Values::new(args.profile.as_deref(), args.action_ref.as_deref(), args.backend)?;
    let files = init::plan(&values, args.fork_prs)?;
    for path in init::write(&args.dir, &files, args.force)? {
        diag::info(format_args!("wrote {}", path.display()));
    }
    emit(&init::next_steps(&values, args.fork_prs), None)?;
    Ok(Outcome::Passed)
}

/// Whether `command` may run the CUDA backend: `bench`, or `check` that runs the benchmark (no
/// `--result` files), unless its command line asks for `cpu` or `mock` (the environment and a
/// settings file are read later; readying the libraries for nothing costs a library lookup).
fn may_run_cuda(command: &Command) -> bool {
    let (flags, judges_results) = match command {
        Command::Bench(args) => (&args.flags, false),
        Command::Check(args) => (&args.bench, !args.result.is_empty()),
        _ => return false,
    };
    !judges_results && !matches!(flags.settings.backend, Some(BackendChoice::Cpu | BackendChoice::Mock))
}

/// The commit whose baselines and settings judge: `--base`, else in a pull request its base
/// commit; `None` with `--baselines-from-head` or outside a pull request. A pull request whose
/// base commit cannot be had is an error (exit 2), never judged by the head's own baselines.
fn base_commit(flags: &BaseFlags) -> Result<Option<BaseCommit>> {
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
fn base_settings(from_env: &[(String, String)], base: &BaseCommit, path: &Path) -> Result<config::FileConfig> {
    match base.file(path)? {
        Some(text) => {
            let label = PathBuf::from(format!("{}@{}", path.display(), base.short()));
            config::file_from_text(from_env, &label, text)
        }
        None => Ok(config::FileConfig::default()),
    }
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
    if let Some(a) = &report.attribution {
        print_notes(a);
    }
    let report = check::CheckReport { job: check::JobRef::from_env(|k| std::env::var(k).ok()), ..report };
    publish(&cfg, &report)?;
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
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .collect();
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
    let (all, notes) = bench::settings::resolve_all(cfg.workloads.clone(), launch.as_ref(), bench::cuda::probe)?;
    for note in notes {
        diag::info(note);
    }
    if all.len() > 1 && launch.is_some() {
        anyhow::bail!(
            "{} workloads under a multi-process launcher: judge one per job (--workload NAME, or one \
             --payload-sizes entry)",
            all.len()
        );
    }
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
            match runner::run(settings, launch.clone(), &run_environment(launch.as_ref(), log), decide::run::decide) {
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

/// A rendered report to stdout or `output`; text on a terminal gets its verdicts in colour.
fn emit_report(text: &str, format: Format, output: Option<&Path>) -> Result<()> {
    if format == Format::Text {
        commgate_core::output::emit_text(text, output)
    } else {
        emit(text, output)
    }
}

/// `commgate attribute --partial OUT`: the ranks given, reduced to a partial file.
fn write_partial(cfg: &config::AttributeConfig, out: &Path) -> Result<Outcome> {
    let reduced = partial_paths(&cfg.paths, &cfg.options)?;
    let gzip = out.extension().is_some_and(|e| e == "gz");
    commgate_core::output::write_atomic(out, &partial::encode(&reduced, gzip))
        .with_context(|| format!("{}: cannot write the partial file (does the directory exist?)", out.display()))?;
    diag::info(format_args!(
        "wrote {} ({}); combine the partial files of every node with `commgate attribute PARTIAL...`",
        out.display(),
        partial::describe(&reduced)
    ));
    Ok(Outcome::Passed)
}

/// What an attribution does not cover (missing ranks, an ignored steps setting), on stderr too,
/// where a reader of the exit code looks.
fn print_notes(a: &commgate_trace::attribute::Attribution) {
    for note in a.notes() {
        diag::note(report::escape::plain(&note, report::escape::TEXT));
    }
}

/// The end of a non-zero rank whose own part of the benchmark failed: one line, and the exit
/// code a report with that failure would give.
fn rank_failed(rank: u32, e: &BenchError, fail_on: FailOn) -> Outcome {
    let error = EvaluationError::new(ErrorKind::BenchFailed, format!("rank {rank}'s part: {e}"));
    let outcome = gate::rank_failed_outcome(&error, fail_on);
    if outcome == Outcome::CouldNotEvaluate {
        diag::error(format_args!("{error}; rank 0 reports the run"));
    } else {
        diag::warn(format_args!("{error}; rank 0 reports the run; exit 0 only because of --fail-on never"));
    }
    outcome
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
