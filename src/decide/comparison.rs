//! A comparison's verdict against its baseline (gate.md, "Verdict from a comparison"): the
//! metrics' states in, `accept`, `tune` (blocking) or `collect_more_evidence` out, with the
//! reasons in the order a reviewer reads them. [`compare`], [`judge_together`] and
//! [`judge_with_traces`] are the whole comparison: `compare` estimates and adjusts, this decides.

use super::mitigation::for_trace_causes;
use super::vocab::{Decision, Verdict};
use crate::baseline::Baseline;
use crate::compare::traces::{PendingTraces, TraceComparison};
use crate::compare::{
    adjust_together, adjust_with_traces, describe, prepare, prepare_runs, Adjusted, BaselineSummary, CompareOptions,
    Comparison, MetricComparison, Pending, State, SCHEMA_VERSION,
};
use crate::result::{RunResult, SoftwareChange};
use crate::units::pct;

/// Compares `current` with `baseline`: Holm's family is this comparison's judged metrics.
pub fn compare(baseline: &Baseline, current: &RunResult, opts: &CompareOptions) -> Comparison {
    conclude(prepare(baseline, current, opts).adjust_alone(opts), opts)
}

/// [`compare`] with the current side as K runs of one workload (`check --runs K`).
pub fn compare_runs(baseline: &Baseline, current: &[RunResult], opts: &CompareOptions) -> Comparison {
    conclude(prepare_runs(baseline, current, opts).adjust_alone(opts), opts)
}

/// Judges several comparisons as one family (Holm over all their judged metrics together), each
/// then concluded with the rule `compare` uses. The output is in the input order.
pub fn judge_together(pending: Vec<Pending>, opts: &CompareOptions) -> Vec<Comparison> {
    adjust_together(pending, opts).into_iter().map(|j| conclude(j, opts)).collect()
}

/// [`judge_together`] with the trace comparison's quantities in the same family, so that a gate
/// judging workloads and traces keeps one family-wise error rate over everything it judges; each
/// regressed collective gets the mitigation its cause calls for.
pub fn judge_with_traces(
    pending: Vec<Pending>,
    traces: Option<PendingTraces>,
    opts: &CompareOptions,
) -> (Vec<Comparison>, Option<TraceComparison>) {
    let (judged, mut traces) = adjust_with_traces(pending, traces, opts);
    if let Some(t) = &mut traces {
        for_trace_causes(t);
    }
    (judged.into_iter().map(|j| conclude(j, opts)).collect(), traces)
}

/// The comparison of adjusted metrics: its verdict, the phase a blocking regression traces to
/// first in the reasons, and a subsampled row's note last.
pub fn conclude(j: Adjusted, opts: &CompareOptions) -> Comparison {
    let Adjusted { baseline, delta, metrics, unusable, hardware, cause, bounded } = j;
    let mut v = match unusable {
        Some(reason) => Verdict::because(Decision::CollectMoreEvidence, reason),
        None => decide(&metrics, &baseline, &hardware, delta, opts),
    };
    let cause = cause.filter(|_| v.blocking);
    if let Some((_, sentence)) = &cause {
        v.reasons.insert(0, sentence.clone());
    }
    v.reasons.extend(bounded);
    Comparison {
        schema_version: SCHEMA_VERSION,
        verdict: v.decision,
        regression: v.blocking,
        baseline,
        delta,
        metrics,
        cause: cause.map(|(c, _)| c),
        headline: String::new(),
        current_runs: 1,
        mde: None,
        runs_needed: None,
        reasons: v.reasons,
    }
}

/// "software changed since the baseline: NCCL 2.21.5 → 2.23.4, NCCL_ALGO unset → Ring".
fn software_changed(changes: &[SoftwareChange]) -> Option<String> {
    (!changes.is_empty()).then(|| {
        let list: Vec<String> = changes.iter().map(ToString::to_string).collect();
        format!("software changed since the baseline: {}", list.join(", "))
    })
}

/// The comparison's verdict (gate.md, "Verdict from a comparison").
fn decide(
    metrics: &[MetricComparison],
    baseline: &BaselineSummary,
    hardware: &str,
    delta: f64,
    opts: &CompareOptions,
) -> Verdict {
    let mut reasons = Vec::new();
    let regressed: Vec<&MetricComparison> = metrics.iter().filter(|m| m.judged.state == State::Regressed).collect();
    for m in &regressed {
        reasons.push(format!("{}, above the {} floor", describe(m), pct(delta)));
    }
    if !baseline.fingerprint_match {
        reasons.insert(0, hardware.to_string());
        return Verdict::new(Decision::CollectMoreEvidence, reasons);
    }
    if let Some(changed) = software_changed(&baseline.software_changes) {
        reasons.push(changed);
    }
    if !regressed.is_empty() {
        return Verdict::regression(reasons);
    }
    for m in metrics.iter().filter(|m| m.judged.state == State::Improved) {
        reasons.push(format!("{}: improved beyond the {} floor", describe(m), pct(delta)));
    }
    let too_few = metrics.iter().map(|m| m.judged.n_current).min().unwrap_or(0) < opts.min_samples;
    let primary_open = metrics.iter().any(|m| m.primary && m.judged.state == State::Inconclusive);
    for m in metrics.iter().filter(|m| m.judged.state == State::Inconclusive) {
        let why = m.note.clone().unwrap_or_else(|| format!("not enough evidence either way at δ = {}", pct(delta)));
        reasons.push(format!("{}: {why}", describe(m)));
    }
    let unchanged: Vec<String> =
        metrics.iter().filter(|m| m.judged.state == State::Unchanged).map(MetricComparison::label).collect();
    if !unchanged.is_empty() {
        reasons.push(format!("{} unchanged within ±{}", unchanged.join(", "), pct(delta)));
    }
    if too_few {
        reasons.insert(
            0,
            format!(
                "only {} samples in the current run; run at least {} repeats ({} for P95 to count)",
                metrics.iter().map(|m| m.judged.n_current).min().unwrap_or(0),
                opts.min_samples,
                opts.p95_min_samples
            ),
        );
        return Verdict::new(Decision::CollectMoreEvidence, reasons);
    }
    if primary_open {
        return Verdict::new(Decision::CollectMoreEvidence, reasons);
    }
    Verdict::new(Decision::Accept, reasons)
}
