//! `commgate check`: one result (measured now or given), its stored baseline, any traces, one
//! verdict. This module gathers the evidence; [`crate::verdict::decide`] decides; the report
//! renderers display. GitHub I/O happens in `run.rs` after the report is on disk.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::baseline::{self, Baseline, BaselineFile};
use crate::compare::{self, CompareOptions, Comparison};
use crate::decision::{Decision, Verdict};
use crate::result::{FileError, RunResult};
use crate::trace::attribute::{AttributeOptions, Attribution};
use crate::trace::load::attribute_paths;
use crate::verdict::{self, Evidence, FailOn, TraceDiff};

/// The report embeds a result (`bench`), so it shares the result file's version.
pub const SCHEMA_VERSION: u32 = crate::result::SCHEMA_VERSION;

/// Settings of the gate beyond the benchmark's (resolved by `config`).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOptions {
    pub baselines: PathBuf,
    pub traces: Vec<PathBuf>,
    pub trace_name: String,
    pub attribute: AttributeOptions,
    pub compare: CompareOptions,
    /// A collective's exposed time per step must grow by more than this share…
    pub trace_relative_floor: f64,
    /// …and by more than this many ms to count as its regression.
    pub trace_absolute_floor_ms: f64,
    pub fail_on: FailOn,
}

/// Where the baseline was looked for and what was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineRef {
    pub path: String,
    pub exists: bool,
    pub runs: usize,
    pub fingerprint_match: bool,
}

/// The check report (formats.md, "Check report"): the JSON written to `--output`, and the
/// data behind the Markdown PR comment and the terminal text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    pub schema_version: u32,
    pub verdict: Decision,
    pub blocking: bool,
    pub reasons: Vec<String>,
    pub fail_on: FailOn,
    pub bench: Option<RunResult>,
    pub comparison: Option<Comparison>,
    pub attribution: Option<Attribution>,
    #[serde(default)]
    pub trace_diff: Option<TraceDiff>,
    pub baseline: BaselineRef,
}

impl CheckReport {
    /// Whether `--fail-on` makes this report exit 1.
    pub fn fails(&self) -> bool {
        self.fail_on.fails(&Verdict { decision: self.verdict, blocking: self.blocking, reasons: Vec::new() })
    }
}

/// Judges `result` against the store under `opts.baselines`. Errors are bad input (a corrupt
/// baseline file, unreadable traces): exit 2.
pub fn evaluate(result: RunResult, opts: &CheckOptions) -> Result<CheckReport, anyhow::Error> {
    let path = baseline::store_path(&opts.baselines, &result)?;
    let store = load_store(&path)?;
    let (comparison, missing) = match &store {
        None => (None, Some(missing_baseline_reason(&path, &opts.baselines))),
        Some(file) => match file.runs.last().and_then(|last| last.workload.difference(&result.workload)) {
            Some((field, base, cur)) => (
                None,
                Some(format!(
                    "the baseline {} measured another workload (`workload.{field}`: {base} there, {cur} now): \
                     start a new baseline for this workload",
                    path.display()
                )),
            ),
            None => {
                let b = Baseline { path: path.clone(), runs: file.runs.clone() };
                (Some(compare::compare(&b, &result, &opts.compare)), None)
            }
        },
    };
    let attribution = if opts.traces.is_empty() { None } else { Some(attribute_paths(&opts.traces, &opts.attribute)?) };
    let stored_traces = store.as_ref().and_then(|f| f.traces.get(&opts.trace_name));
    let trace_diff = match (stored_traces, &attribution) {
        (Some(base), Some(cur)) => Some(verdict::diff_traces(
            &opts.trace_name,
            base,
            cur,
            opts.trace_relative_floor,
            opts.trace_absolute_floor_ms,
        )),
        _ => None,
    };
    let failure = result.failure.as_ref().map(|f| format!("{}: {}", f.kind, f.message));
    let v = verdict::decide(&Evidence {
        comparison: comparison.as_ref(),
        failure: failure.as_deref(),
        missing_baseline: missing.as_deref(),
        attribution: attribution.as_ref(),
        trace_diff: trace_diff.as_ref(),
        traces_expected: stored_traces.is_some() && attribution.is_none(),
    });
    let baseline = BaselineRef {
        path: path.display().to_string(),
        exists: store.is_some(),
        runs: store.as_ref().map_or(0, |f| f.runs.len()),
        fingerprint_match: comparison.as_ref().is_some_and(|c| c.baseline.fingerprint_match),
    };
    Ok(CheckReport {
        schema_version: SCHEMA_VERSION,
        verdict: v.decision,
        blocking: v.blocking,
        reasons: v.reasons,
        fail_on: opts.fail_on,
        bench: Some(result),
        comparison,
        attribution,
        trace_diff,
        baseline,
    })
}

fn load_store(path: &Path) -> Result<Option<BaselineFile>, FileError> {
    if !path.exists() {
        return Ok(None);
    }
    baseline::load_store(path).map(Some)
}

/// A missing baseline says exactly which command creates it.
fn missing_baseline_reason(path: &Path, dir: &Path) -> String {
    format!(
        "no baseline at {}: record one on this hardware with `commgate baseline update --from RESULT --baselines {}` \
         (on main, after a trusted run)",
        path.display(),
        dir.display()
    )
}

/// Loads a check report written earlier (for `commgate comment --report`).
pub fn load_report(path: &Path) -> Result<CheckReport, FileError> {
    let report: CheckReport = crate::result::read_versioned(path, "commgate check report")?;
    Ok(report)
}
