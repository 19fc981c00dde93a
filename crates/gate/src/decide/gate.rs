//! THE decision: a comparison, trace evidence and the state of the inputs in, one verdict out
//! (`accept`, `tune` or `collect_more_evidence`), whether it blocks, and why; then, with
//! `--fail-on`, the [`Outcome`] that becomes the exit code. Every command's exit code is
//! decided here ([`FailOn::outcome`], [`compare_outcome`], [`rank_failed_outcome`]). Reports display a [`Verdict`] and an
//! [`Outcome`]; they never recompute them.
//!
//! Two kinds of "not enough to judge" are kept apart on purpose. Evidence that is honestly
//! missing (no baseline yet, other hardware, an inconclusive result) is `collect_more_evidence`
//! and exits 0: merging is not blocked by something the change did not cause. Evidence that
//! *could not be gathered* (the benchmark failed or hung, the baselines directory or file is
//! wrong, the traces asked for cannot be read) is an [`EvaluationError`]: the gate exits 2, so a
//! change that makes NCCL hang never merges green.

use super::balance::Balance;
use super::mitigation::Diagnosis;
use super::vocab::{Decision, EvaluationError, Outcome, Verdict};
use crate::compare::traces::{self, CollectiveComparison, TraceComparison};
use crate::compare::{Comparison, State};
use serde::{Deserialize, Serialize};

/// `commgate compare`'s exit: 1 for a confirmed regression, else 0 (it has no `--fail-on`).
pub fn compare_outcome(c: &Comparison) -> Outcome {
    if c.regression {
        Outcome::Blocked
    } else {
        Outcome::Passed
    }
}

/// The exit of a non-zero rank whose own part of the benchmark failed: what a report with that
/// failure (and no verdict on the change) gives under `fail_on`.
pub fn rank_failed_outcome(error: &EvaluationError, fail_on: FailOn) -> Outcome {
    fail_on.outcome(&Verdict::new(Decision::CollectMoreEvidence, Vec::new()), Some(error))
}

/// What `--fail-on` names: the verdicts that exit 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum FailOn {
    /// Only a confirmed regression (the default).
    Regression,
    /// Any `tune`, blocking or not.
    Tune,
    /// Anything but `accept`.
    CollectMoreEvidence,
    Never,
}

impl FailOn {
    /// Whether a verdict exits 1 under this policy.
    pub fn fails(self, v: &Verdict) -> bool {
        match self {
            FailOn::Regression => v.blocking,
            FailOn::Tune => v.decision == Decision::Tune,
            FailOn::CollectMoreEvidence => v.decision != Decision::Accept,
            FailOn::Never => false,
        }
    }

    /// THE exit decision of `check`: `never` passes everything; otherwise an evaluation error
    /// is exit 2 (even next to a regression: the evaluation is incomplete, and both fail the
    /// job), then the verdicts this policy names exit 1.
    pub fn outcome(self, v: &Verdict, error: Option<&EvaluationError>) -> Outcome {
        if self == FailOn::Never {
            Outcome::Passed
        } else if error.is_some() {
            Outcome::CouldNotEvaluate
        } else if self.fails(v) {
            Outcome::Blocked
        } else {
            Outcome::Passed
        }
    }
}

/// One workload's evidence: its comparison with its own stored baseline, or why there is none.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkloadEvidence<'a> {
    /// The workload's id when the gate judges several (it opens each of this workload's reasons);
    /// `None` for a gate of one, whose reasons read as they always have.
    pub id: Option<&'a str>,
    /// The comparison with the stored baseline, when there was one.
    pub comparison: Option<&'a Comparison>,
    /// Why no comparison could be made (no baseline file, another workload, …).
    pub missing_baseline: Option<&'a str>,
}

impl WorkloadEvidence<'_> {
    /// `reason` as this workload's: `"<id>: reason"` when the gate judges several.
    fn own(&self, reason: &str) -> String {
        match self.id {
            Some(id) => format!("{id}: {reason}"),
            None => reason.to_string(),
        }
    }
}

/// Whether a verdict contradicts its own evidence: the rule `commgate comment` applies to a
/// report written by the job that ran the pull request's code (untrusted), so that it never posts
/// an `accept` whose own tables show a regression, an error or an undecided comparison, nor a
/// block that is not a `tune`. The first contradiction, in words; `None` when there is none.
pub fn contradiction<'a>(
    verdict: Decision,
    blocking: bool,
    mut errors: impl Iterator<Item = &'a EvaluationError>,
    comparisons: impl Iterator<Item = &'a Comparison>,
    traces: Option<&TraceComparison>,
) -> Option<String> {
    let v = verdict.as_str();
    if let Some(e) = errors.next().filter(|_| verdict == Decision::Accept) {
        return Some(format!("its verdict is `accept` but it could not evaluate ({})", e.kind.as_str()));
    }
    for c in comparisons {
        if c.regression && !(verdict == Decision::Tune && blocking) {
            return Some(format!("a comparison confirms a regression but the verdict is `{v}`, not a blocking `tune`"));
        }
        if verdict == Decision::Accept {
            if c.verdict != Decision::Accept {
                return Some(format!("its verdict is `accept` but a comparison's is `{}`", c.verdict.as_str()));
            }
            if let Some(m) = c.metrics.iter().find(|m| m.judged.state == State::Regressed) {
                return Some(format!("its verdict is `accept` but its {} is regressed", m.label()));
            }
        }
    }
    if let Some(c) = traces.filter(|_| verdict == Decision::Accept).and_then(|t| t.regressed().next()) {
        return Some(format!("its verdict is `accept` but its trace comparison shows {} regressed", c.collective));
    }
    if let Some(c) =
        traces.filter(|_| verdict == Decision::Accept).and_then(|t| t.collectives.iter().find(|c| c.unjudged.is_some()))
    {
        return Some(format!("its verdict is `accept` but its trace comparison could not judge {}", c.collective));
    }
    (blocking && verdict != Decision::Tune).then(|| format!("it blocks with the verdict `{v}`; only a `tune` blocks"))
}

/// What the decision looks at.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// Every judged workload, in order (their comparisons already adjusted as one family).
    pub workloads: &'a [WorkloadEvidence<'a>],
    /// What could not be gathered (the run failed, the store is unusable, …), most basic first.
    pub errors: &'a [EvaluationError],
    pub attribution: Option<&'a Diagnosis>,
    /// The traces against the stored trace runs (states already adjusted with the family's).
    pub traces: Option<&'a TraceComparison>,
    /// The benchmark's bus bandwidth (GB/s) per collective it measured, for the reasons of a
    /// trace regression.
    pub bench_busbw: &'a [(String, f64)],
    /// The baseline holds trace runs but no traces were given.
    pub traces_expected: bool,
    /// The balance rule's answer, when `--fail-on-savings-ms` asked for it (`Err`: why it
    /// could not judge).
    pub balance: Option<&'a Result<Balance, String>>,
}

/// The one decision, over every workload at once. Evidence that could not be gathered → `collect_more_evidence`, not
/// blocking, the errors first in the reasons and then what the rest of the evidence says (the
/// exit code comes from [`FailOn::outcome`]). Otherwise a confirmed regression → `tune`,
/// blocking; a missing baseline, other hardware, an inconclusive primary metric, missing traces
/// or traces missing some of the job's ranks (whose trace diff then decides nothing) →
/// `collect_more_evidence`, never blocking; otherwise the trace follow-up chooses between
/// `accept` and a non-blocking `tune` with its mitigation.
pub fn decide(e: &Evidence<'_>) -> Verdict {
    let judged = judge(e);
    if e.errors.is_empty() {
        return judged;
    }
    // No verdict on the change: whatever the partial evidence says only follows the errors.
    let mut reasons: Vec<String> = e.errors.iter().map(ToString::to_string).collect();
    reasons.extend(judged.reasons);
    Verdict::new(Decision::CollectMoreEvidence, reasons)
}

/// The verdict on the evidence that was gathered.
fn judge(e: &Evidence<'_>) -> Verdict {
    let mut reasons = Vec::new();
    // Traces missing some of the job's ranks can neither show a regression nor clear one.
    let partial = e.attribution.and_then(|a| a.attribution.source.coverage.as_ref()).filter(|c| c.is_partial());
    let regressed_collectives: Vec<&CollectiveComparison> = match e.traces {
        Some(t) if partial.is_none() => t.regressed().collect(),
        _ => Vec::new(),
    };
    let regressed: Vec<(&WorkloadEvidence<'_>, &Comparison)> =
        e.workloads.iter().filter_map(|w| w.comparison.filter(|c| c.regression).map(|c| (w, c))).collect();
    let unbalanced = e.balance.and_then(|b| b.as_ref().ok()).filter(|b| b.blocking);
    if !regressed.is_empty() || !regressed_collectives.is_empty() || unbalanced.is_some() {
        for (w, c) in &regressed {
            // A regressed comparison's reasons are its regressed metrics alone.
            reasons.extend(c.reasons.iter().map(|r| w.own(r)));
        }
        for c in &regressed_collectives {
            let bench =
                e.bench_busbw.iter().filter(|(name, _)| *name == c.collective).map(|(_, b)| *b).reduce(f64::max);
            reasons.push(traces::sentence(c, bench));
        }
        reasons.extend(unbalanced.map(Balance::sentence));
        // The trace evidence says why; without it, the attribution's own mitigation.
        let mitigations: Vec<String> =
            regressed_collectives.iter().filter_map(|c| traces::mitigation_sentence(c)).collect();
        if !mitigations.is_empty() {
            reasons.extend(mitigations);
        } else if let Some(a) = e.attribution {
            reasons.push(format!(
                "try {} on {}",
                a.mitigation.strategy.as_str(),
                a.mitigation.target.as_deref().unwrap_or("it")
            ));
        }
        return Verdict::regression(reasons);
    }
    for w in e.workloads {
        if let Some(m) = w.missing_baseline {
            reasons.push(w.own(m));
        }
        if let Some(c) = w.comparison.filter(|c| c.verdict == Decision::CollectMoreEvidence) {
            reasons.extend(c.reasons.iter().map(|r| w.own(r)));
        }
    }
    if let Some(c) = partial {
        reasons.push(format!(
            "the traces are a partial rank set ({}): attach one trace per rank to judge them",
            c.summary()
        ));
    }
    if let Some(t) = e.traces.filter(|_| partial.is_none()) {
        reasons.extend(t.unusable.clone());
        reasons.extend(t.collectives.iter().filter_map(|c| c.unjudged.clone()));
        reasons.extend(t.collectives.iter().filter_map(traces::looks_regressed));
    }
    if e.traces_expected {
        reasons.push("the baseline holds trace runs but no --traces were given: attach the profiler traces".into());
    }
    if let Some(Err(why)) = e.balance {
        reasons.push(why.clone());
    }
    if !reasons.is_empty() {
        return Verdict::new(Decision::CollectMoreEvidence, reasons);
    }
    for (w, c) in e.workloads.iter().filter_map(|w| w.comparison.map(|c| (w, c))) {
        // Counted as the table lists them: a median read as busbw or TFLOPS is a row of its own,
        // and a sweep's table has a row per point.
        let sweep = c.sweep.is_some();
        let rows = |m: &&crate::compare::MetricComparison| 1 + usize::from(m.throughput.is_some() && !sweep);
        let unchanged: usize = c.metrics.iter().filter(|m| m.judged.state == State::Unchanged).map(|m| rows(&m)).sum();
        let total: usize = c.metrics.iter().map(|m| rows(&m)).sum();
        let what = if sweep { "points" } else { "metrics" };
        reasons.push(w.own(&format!(
            "no regression against {} baseline run(s): {unchanged} of {total} {what} unchanged",
            c.baseline.runs
        )));
    }
    if let Some(Ok(b)) = e.balance {
        reasons.push(b.sentence());
    }
    match e.attribution {
        Some(a) if a.followup.decision == Decision::Tune => {
            reasons.insert(0, a.followup.reason.clone());
            Verdict::new(Decision::Tune, reasons)
        }
        Some(a) if a.followup.decision == Decision::CollectMoreEvidence => {
            reasons.insert(0, a.followup.reason.clone());
            Verdict::new(Decision::CollectMoreEvidence, reasons)
        }
        Some(a) => {
            reasons.push(a.followup.reason.clone());
            Verdict::new(Decision::Accept, reasons)
        }
        None => Verdict::new(Decision::Accept, reasons),
    }
}

#[cfg(test)]
mod tests {
    use super::super::mitigation::{diagnose, Thresholds};
    use super::super::vocab::ErrorKind;
    use super::*;
    use commgate_trace::attribute::{attribute_events, CommEvent};

    fn attribution(exposed: f64) -> Diagnosis {
        let measured = attribute_events(vec!["t".into()], &[CommEvent::new("all_reduce", exposed, 1024.0, 0.5)]);
        diagnose(measured, &Thresholds::default())
    }

    fn evidence<'a>() -> Evidence<'a> {
        Evidence {
            workloads: &[],
            errors: &[],
            attribution: None,
            traces: None,
            bench_busbw: &[],
            traces_expected: false,
            balance: None,
        }
    }

    /// A trace comparison whose one collective regressed by `cause`, rank 5 last in 93 %.
    fn regressed_traces(cause: traces::CollectiveCause) -> TraceComparison {
        use crate::compare::traces::TraceMetric;
        use crate::compare::{Judged, Method, OwnDelta};
        let metric = |quantity, ratio: f64| TraceMetric {
            quantity,
            judged: Judged {
                baseline: 1.0,
                current: 1.0 + (ratio - 1.0) * 10.0,
                ratio,
                ci: [ratio - 0.01, ratio + 0.01],
                p_value: 1e-6,
                p_adjusted: 1e-5,
                state: if ratio > 1.03 { State::Regressed } else { State::Unchanged },
                against: OwnDelta { delta: 0.03 },
                n_baseline: 50,
                n_current: 50,
                method: Method::History,
            },
            note: None,
        };
        let (transfer, wait) = match cause {
            traces::CollectiveCause::Transfer => (1.10, 1.0),
            _ => (1.0, 1.45),
        };
        let mut c = CollectiveComparison {
            collective: "all_to_all".into(),
            state: State::Regressed,
            cause: None,
            late_rank: None,
            late_share: None,
            last_arrival: None,
            busbw_baseline_gbps: Some(100.0),
            busbw_current_gbps: Some(91.0),
            mitigation: None,
            metrics: vec![
                metric(traces::Quantity::Exposed, 1.2),
                metric(traces::Quantity::Transfer, transfer),
                metric(traces::Quantity::Wait, wait),
            ],
            shares_of_own_time: false,
            note: None,
            unjudged: None,
        };
        let mut h = commgate_trace::attribute::Hotspot::empty("all_to_all");
        h.last_arrival_rank = Some(5);
        h.last_arrival_share = Some(0.93);
        traces::explain(&mut c, Some(&h));
        let mut t = TraceComparison {
            name: "default".into(),
            runs: 5,
            method: Method::History,
            step_ms: Some(10.0),
            collectives: vec![c],
            notes: Vec::new(),
            unusable: None,
            moe_markers: true,
        };
        super::super::mitigation::for_trace_causes(&mut t);
        t
    }

    #[test]
    fn fail_on_policies() {
        let tune = Verdict { decision: Decision::Tune, blocking: false, reasons: vec![] };
        let blocking = Verdict { decision: Decision::Tune, blocking: true, reasons: vec![] };
        let more = Verdict { decision: Decision::CollectMoreEvidence, blocking: false, reasons: vec![] };
        assert!(!FailOn::Regression.fails(&tune) && FailOn::Regression.fails(&blocking));
        assert!(FailOn::Tune.fails(&tune) && !FailOn::Tune.fails(&more));
        assert!(FailOn::CollectMoreEvidence.fails(&more));
        assert!(!FailOn::Never.fails(&blocking));
    }

    #[test]
    fn missing_evidence_asks_for_more_and_passes() {
        let missing = [WorkloadEvidence { missing_baseline: Some("no baseline"), ..Default::default() }];
        let v = decide(&Evidence { workloads: &missing, ..evidence() });
        assert_eq!((v.decision, v.blocking), (Decision::CollectMoreEvidence, false));
        assert_eq!(FailOn::Regression.outcome(&v, None), Outcome::Passed);
        let v = decide(&Evidence { traces_expected: true, ..evidence() });
        assert_eq!(v.decision, Decision::CollectMoreEvidence);
        assert_eq!(FailOn::CollectMoreEvidence.outcome(&v, None), Outcome::Blocked);
    }

    #[test]
    fn an_evaluation_error_leads_the_reasons_and_exits_2_unless_fail_on_never() {
        let timeout = EvaluationError::new(ErrorKind::BenchFailed, "timeout: no repeat finished for 1 s");
        let errors = [timeout.clone()];
        let missing = [WorkloadEvidence { missing_baseline: Some("no baseline at b.json"), ..Default::default() }];
        let v = decide(&Evidence { errors: &errors, workloads: &missing, ..evidence() });
        assert_eq!((v.decision, v.blocking), (Decision::CollectMoreEvidence, false));
        assert_eq!(
            v.reasons,
            [
                "could not evaluate: the benchmark failed (timeout: no repeat finished for 1 s)".to_string(),
                "no baseline at b.json".to_string()
            ]
        );
        for fail_on in [FailOn::Regression, FailOn::Tune, FailOn::CollectMoreEvidence] {
            assert_eq!(fail_on.outcome(&v, Some(&timeout)), Outcome::CouldNotEvaluate, "{fail_on:?}");
        }
        assert_eq!(FailOn::Never.outcome(&v, Some(&timeout)), Outcome::Passed);
        // Next to a confirmed regression too: the evaluation is incomplete.
        let blocking = Verdict::regression(vec![]);
        assert_eq!(FailOn::Regression.outcome(&blocking, Some(&timeout)), Outcome::CouldNotEvaluate);
        assert_eq!(FailOn::Regression.outcome(&blocking, None), Outcome::Blocked);
        assert_eq!([Outcome::Passed, Outcome::Blocked, Outcome::CouldNotEvaluate].map(Outcome::exit_code), [0, 1, 2]);
    }

    #[test]
    fn errors_serialise_with_snake_case_kinds() {
        let e = EvaluationError::new(ErrorKind::TracesUnreadable, "t: missing");
        let json = serde_json::to_value(&e).expect("json");
        assert_eq!(json, serde_json::json!({"kind": "traces_unreadable", "message": "t: missing"}));
        for kind in [
            ErrorKind::BenchFailed,
            ErrorKind::BenchUnavailable,
            ErrorKind::BaselinesMissing,
            ErrorKind::BaselineInvalid,
            ErrorKind::TracesUnreadable,
        ] {
            assert_eq!(serde_json::to_value(kind).expect("json"), kind.as_str(), "as_str matches the JSON");
        }
    }

    #[test]
    fn trace_follow_up_decides_when_nothing_regressed() {
        let small = attribution(2.0);
        let v = decide(&Evidence { attribution: Some(&small), ..evidence() });
        assert_eq!((v.decision, v.blocking), (Decision::Accept, false));
        let big = attribution(20.0);
        let v = decide(&Evidence { attribution: Some(&big), ..evidence() });
        assert_eq!((v.decision, v.blocking), (Decision::Tune, false));
    }

    #[test]
    fn a_regressed_collective_blocks_and_says_why() {
        let cur = attribution(5.0);
        let t = regressed_traces(traces::CollectiveCause::Wait);
        let v = decide(&Evidence { attribution: Some(&cur), traces: Some(&t), ..evidence() });
        assert_eq!((v.decision, v.blocking), (Decision::Tune, true));
        assert_eq!(
            v.reasons,
            [
                "all_to_all waits longer for the last rank: wait +4.500 ms per step (+45.0 % of the step, 95 % CI \
                 +44.0…+46.0 %); rank 5 arrives last in 93 % of all_to_all calls: its work before the collective grew",
                "try rebalance_ranks_or_experts on all_to_all; measure next: rank 5's time before all_to_all \
                 (rank_elapsed_ms), expert_load_skew, cross_rank_token_ratio",
            ]
        );
        let t = regressed_traces(traces::CollectiveCause::Transfer);
        let bench = [("all_to_all".to_string(), 120.0)];
        let v = decide(&Evidence { attribution: Some(&cur), traces: Some(&t), bench_busbw: &bench, ..evidence() });
        assert_eq!(
            v.reasons,
            [
                "all_to_all moves its data more slowly: transfer +10.0 % (95 % CI +9.0…+11.0 %), bus bandwidth \
                 100.0 → 91.0 GB/s (−9.0 %), below the benchmark's 120.0 GB/s",
                "try tune_collective_transport on all_to_all; measure next: busbw_gbps_by_message_size, \
                 nccl_algo_protocol, bucket_size_bytes",
            ]
        );
        let mut unusable = regressed_traces(traces::CollectiveCause::Wait);
        unusable.collectives.clear();
        unusable.unusable = Some("the trace baseline \"default\" was recorded with 8 ranks".into());
        let v = decide(&Evidence { attribution: Some(&cur), traces: Some(&unusable), ..evidence() });
        assert_eq!((v.decision, v.blocking), (Decision::CollectMoreEvidence, false));
    }

    #[test]
    fn a_partial_rank_set_neither_regresses_nor_passes() {
        let partial = |exposed| {
            let mut a = attribution(exposed);
            a.attribution.source.coverage = Some(commgate_trace::caveats::RankCoverage::new(&[0, 1, 2, 3], Some(8)));
            a
        };
        let cur = partial(5.0);
        let t = regressed_traces(traces::CollectiveCause::Wait);
        let v = decide(&Evidence { attribution: Some(&cur), traces: Some(&t), ..evidence() });
        assert_eq!((v.decision, v.blocking), (Decision::CollectMoreEvidence, false), "{:?}", v.reasons);
        assert!(v.reasons[0].contains("ranks 0-3 of 8: 4 missing (4-7)"), "{:?}", v.reasons);
        let small = partial(2.0);
        let v = decide(&Evidence { attribution: Some(&small), ..evidence() });
        assert_eq!(v.decision, Decision::CollectMoreEvidence, "never accept on part of the ranks");
    }
}
