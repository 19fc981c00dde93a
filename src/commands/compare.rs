//! `commgate compare`: one result file against its stored baseline.

use commgate_gate::baseline;

use anyhow::Result;

use crate::config;
use commgate_core::result;
use commgate_gate::decide::Outcome;
use commgate_gate::decide::{self, gate};
use commgate_report as report;

use super::emit_report;

/// `commgate compare`.
pub(super) fn run(args: crate::cli::CompareArgs, file: &config::FileConfig) -> Result<Outcome> {
    let cfg = config::compare(args, file)?;
    let (baseline, kept) = baseline::load_kept(&cfg.baseline)?;
    // nccl-tests output names no profile; here the baseline's is as good as any.
    let profile = baseline.runs.first().map(|r| r.environment_profile.clone());
    let current = result::with_profile(result::load_result(&cfg.current)?, profile.as_deref(), &cfg.current)?;
    baseline.validate_workload(&current, &cfg.current)?;
    let comparison = decide::comparison::judge_kept(&baseline, &current, &cfg.options, &kept);
    emit_report(&report::render_comparison_in(&comparison, cfg.format, cfg.width), cfg.format, cfg.output.as_deref())?;
    Ok(gate::compare_outcome(&comparison))
}
