//! The per-workload part of a check report when the gate judges several workloads: each
//! workload's result, comparison, store, verdict and overlap-median trend; and the refusal of
//! two results of one workload.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::BaselineRef;
use crate::baseline::{trend_points, BaselineFile};
use crate::compare::Comparison;
use crate::decide::Decision;
use crate::decide::EvaluationError;
use crate::result::{RunResult, Schedule};

/// The trend keeps at most this many points (the newest baseline runs, then the current run):
/// a store of hundreds of runs must not grow the PR comment.
pub const TREND_POINTS: usize = 12;

/// One workload of a check report (formats.md, "Check report").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadReport {
    /// The workload id (the result's `workload.id`; untrusted).
    pub id: String,
    pub result: RunResult,
    pub comparison: Option<Comparison>,
    pub baseline: BaselineRef,
    /// What could not be gathered for this workload, if anything.
    #[serde(default)]
    pub error: Option<EvaluationError>,
    /// This workload's verdict alone (its metrics adjusted with the whole family's).
    pub verdict: Decision,
    pub blocking: bool,
    pub reasons: Vec<String>,
    /// The overlap median of the stored runs, oldest first, then the current run's.
    #[serde(default)]
    pub trend: Vec<TrendPoint>,
}

impl WorkloadReport {
    /// Whether this workload's group is shown open: it blocks or could not be evaluated.
    pub fn needs_attention(&self) -> bool {
        self.blocking || self.error.is_some()
    }
}

/// One point of a workload's trend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrendPoint {
    /// The run's date (`YYYY-MM-DD`; untrusted) or `current`.
    pub label: String,
    pub overlap_median_ms: f64,
    /// The current run (the last point).
    #[serde(default)]
    pub current: bool,
}

/// The stored runs' trend (the newest [`TREND_POINTS`] − 1), then the current run's point.
pub(super) fn trend(store: Option<&BaselineFile>, current: &RunResult) -> Vec<TrendPoint> {
    let stored = store.map(trend_points).unwrap_or_default();
    let skip = stored.len().saturating_sub(TREND_POINTS - 1);
    let mut points: Vec<TrendPoint> = stored
        .into_iter()
        .skip(skip)
        .map(|(label, ms)| TrendPoint { label, overlap_median_ms: ms, current: false })
        .collect();
    let now = crate::baseline::history::summarise(current);
    if let Some(s) = now.schedules.get(&Schedule::Overlap) {
        points.push(TrendPoint { label: "current".into(), overlap_median_ms: s.median_ms, current: true });
    }
    points
}

/// Two result files of one workload: the gate would judge one of them twice.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{} and {} are both results of workload `{}`: pass one --result per workload (each result \
     carries its `workload.id`)",
    first.display(),
    second.display(),
    id.escape_debug()
)]
pub struct SameWorkload {
    pub id: String,
    pub first: PathBuf,
    pub second: PathBuf,
}

/// Refuses two results with one workload id, naming both files.
pub fn unique_ids<'a>(results: impl IntoIterator<Item = (&'a Path, &'a RunResult)>) -> Result<(), SameWorkload> {
    let mut seen: Vec<(&str, &Path)> = Vec::new();
    for (path, r) in results {
        if let Some((_, first)) = seen.iter().find(|(id, _)| *id == r.workload.id) {
            return Err(SameWorkload { id: r.workload.id.clone(), first: first.to_path_buf(), second: path.into() });
        }
        seen.push((&r.workload.id, path));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::fixtures;

    #[test]
    fn two_results_of_one_workload_are_refused_naming_both_files() {
        let (a, b) = (fixtures::run(&[1.0; 40]), fixtures::run(&[1.1; 40]));
        let e = unique_ids([(Path::new("a.json"), &a), (Path::new("b.json"), &b)]).expect_err("same id");
        assert!(e.to_string().starts_with("a.json and b.json are both results of workload `"), "{e}");
        let mut other = b.clone();
        other.workload.id = "other".into();
        assert_eq!(unique_ids([(Path::new("a.json"), &a), (Path::new("b.json"), &other)]), Ok(()));
    }
}
