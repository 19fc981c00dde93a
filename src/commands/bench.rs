//! `commgate bench`: the workloads measured, one result file each; and what `check` shares with it
//! (the run environment, NCCL's settings, a failed rank's end).

use commgate_bench as bench;
use std::path::PathBuf;

use anyhow::Result;

use crate::config;
use commgate_bench::launch::{self, Launch};
use commgate_bench::nccl::{self, TuningLog};
use commgate_bench::runner::{self, BenchOutcome};
use commgate_bench::settings::{BackendChoice, BenchSettings};
use commgate_bench::BenchError;
use commgate_core::diag;
use commgate_core::output::emit;
use commgate_core::result;
use commgate_gate::decide::Outcome;
use commgate_gate::decide::{self, gate, ErrorKind, EvaluationError, FailOn};
use commgate_report as report;

/// `commgate bench`.
pub(super) fn run(args: crate::cli::BenchArgs, file: &config::FileConfig) -> Result<Outcome> {
    let declared = config::bench(args, file, |k| std::env::var(k).ok())?;
    // Before anything is probed or started: see `nccl_setup`.
    let log = nccl_setup(&declared);
    let launch = launch::from_env(|k| std::env::var(k).ok())?;
    let all = resolve_workloads(declared, launch.as_ref(), "run")?;
    run_benches(&all, launch, log.as_ref())
}

/// The declared workloads resolved against this machine (its notes said once each), refused
/// before anything runs when there are several under a multi-process launcher, which runs one
/// workload per job; `verb` says what the command does with each (`run`, `judge`).
pub(super) fn resolve_workloads(
    declared: Vec<bench::settings::Declared>,
    launch: Option<&Launch>,
    verb: &str,
) -> Result<Vec<BenchSettings>> {
    let (all, notes) = bench::settings::resolve_all(declared, launch, bench::cuda::probe)?;
    for note in notes {
        diag::info(note);
    }
    if all.len() > 1 && launch.is_some() {
        anyhow::bail!(
            "{} workloads under a multi-process launcher: {verb} one per job (--workload NAME, or one \
             --payload-sizes entry)",
            all.len()
        );
    }
    Ok(all)
}

/// What the run records from the process environment, read here so the run reads none, and
/// the NCCL tuning log it reads NCCL's choice from.
pub(super) fn run_environment(launch: Option<&Launch>, log: Option<&TuningLog>) -> runner::RunEnvironment {
    let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    let env = runner::RunEnvironment::read(launch, std::env::vars(), |k| std::env::var_os(k), host_name);
    runner::RunEnvironment { tuning_log: log.map(|l| l.dir().to_path_buf()), ..env }
}

/// NCCL's settings for the runs of `declared`: the pinned algorithm and protocol and, unless
/// they pin both, the tuning log NCCL's choice is read from ([`TuningLog::start`]). They go
/// into this process's environment now, on the main thread before anything is probed or any
/// thread started, for NCCL to read when the CUDA backend initialises it ([`nccl::apply`]).
/// Only for a backend that may be CUDA; cpu and mock only record the pinned values. The log's
/// directory lives as long as what this returns. `[bench.env]`'s variables go in first, on every
/// backend: the run records them in `software.nccl_env`, and the CPU backend reads
/// `NCCL_BUFFSIZE` there.
pub(super) fn nccl_setup(declared: &[bench::settings::Declared]) -> Option<TuningLog> {
    let request = &declared.first()?.request;
    let from_file: Vec<(String, String)> = request.run.env.clone().into_iter().collect();
    nccl::apply(&from_file);
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
        match runner::run(settings, launch.clone(), &run_environment(launch.as_ref(), log), decide::bench_run::decide)?
        {
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

/// The end of a non-zero rank whose own part of the benchmark failed: one line, and the exit
/// code a report with that failure would give.
pub(super) fn rank_failed(rank: u32, e: &BenchError, fail_on: FailOn) -> Outcome {
    let error = EvaluationError::new(ErrorKind::BenchFailed, format!("rank {rank}'s part: {e}"));
    let outcome = gate::rank_failed_outcome(&error, fail_on);
    if outcome == Outcome::CouldNotEvaluate {
        diag::error(format_args!("{error}; rank 0 reports the run"));
    } else {
        diag::warn(format_args!("{error}; rank 0 reports the run; exit 0 only because of --fail-on never"));
    }
    outcome
}
