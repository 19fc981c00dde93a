//! The per-workload part of a check report when the gate judges several workloads: each
//! workload's result, comparison, store, verdict and overlap-median trend; and the grouping of
//! result files into each workload's runs.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::BaselineRef;
use crate::baseline::{trend_points, BaselineFile};
use crate::compare::Comparison;
use crate::decide::Decision;
use crate::decide::EvaluationError;
use commgate_core::result::{RunResult, Schedule};

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

/// Two result files of one workload id that measured differently: they cannot be runs of one
/// workload, judged together.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{} and {} are both results of workload `{}` but measured differently (`{field}`: {first_value} there, \
     {second_value} here): runs judged together must measure alike; give each workload its own id",
    first.display(),
    second.display(),
    id.escape_debug()
)]
pub struct UnlikeRuns {
    pub id: String,
    pub first: PathBuf,
    pub second: PathBuf,
    pub field: String,
    pub first_value: String,
    pub second_value: String,
}

/// Groups result files by workload id, in the order each workload first appears: several files
/// of one workload are that many current runs of it, in the order given (`check --result A B`).
/// Files of one id that measured differently (another `workload` field or environment profile)
/// are refused, naming both.
pub fn group_runs(results: Vec<(PathBuf, RunResult)>) -> Result<Vec<Vec<RunResult>>, Box<UnlikeRuns>> {
    // Each workload's first file and run, then its runs after the first.
    let mut groups: Vec<(PathBuf, RunResult, Vec<RunResult>)> = Vec::new();
    for (path, r) in results {
        let Some((first_path, first, more)) =
            groups.iter_mut().find(|(_, first, _)| first.workload.id == r.workload.id)
        else {
            groups.push((path, r, Vec::new()));
            continue;
        };
        let unlike = |field: String, a: String, b: String| {
            Box::new(UnlikeRuns {
                id: r.workload.id.clone(),
                first: first_path.clone(),
                second: path.clone(),
                field,
                first_value: a,
                second_value: b,
            })
        };
        if let Some((field, a, b)) = first.workload.difference(&r.workload) {
            return Err(unlike(format!("workload.{field}"), a, b));
        }
        if first.environment_profile != r.environment_profile {
            let q = |s: &str| format!("{s:?}");
            return Err(unlike(
                "environment_profile".to_string(),
                q(&first.environment_profile),
                q(&r.environment_profile),
            ));
        }
        more.push(r);
    }
    Ok(groups.into_iter().map(|(_, first, more)| std::iter::once(first).chain(more).collect()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_testkit::results as fixtures;

    fn at(name: &str, r: &RunResult) -> (PathBuf, RunResult) {
        (PathBuf::from(name), r.clone())
    }

    #[test]
    fn results_of_one_workload_are_its_runs_in_the_order_given() {
        let (a, b) = (fixtures::run(&[1.0; 40]), fixtures::run(&[1.1; 40]));
        let mut other = b.clone();
        other.workload.id = "other".into();
        let groups = group_runs(vec![at("a.json", &a), at("o.json", &other), at("b.json", &b)]).expect("alike");
        assert_eq!(groups, vec![vec![a.clone(), b.clone()], vec![other]]);
        let mut bigger = b.clone();
        bigger.workload.payload_elements *= 2;
        let e = group_runs(vec![at("a.json", &a), at("b.json", &bigger)]).expect_err("unlike");
        assert!(e.to_string().starts_with("a.json and b.json are both results of workload `"), "{e}");
        assert!(e.to_string().contains("(`workload.payload_elements`: "), "{e}");
        let mut elsewhere = b;
        elsewhere.environment_profile = "OTHER".into();
        let e = group_runs(vec![at("a.json", &a), at("b.json", &elsewhere)]).expect_err("unlike");
        assert!(e.to_string().contains("`environment_profile`"), "{e}");
        assert_eq!(e.to_string().lines().count(), 1);
    }
}
