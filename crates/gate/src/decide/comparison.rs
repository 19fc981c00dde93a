//! A comparison's verdict against its baseline (gate.md, "Verdict from a comparison"): the
//! metrics' states in, `accept`, `tune` (blocking) or `collect_more_evidence` out, with the
//! reasons in the order a reviewer reads them. [`judge`], [`judge_together`] and
//! [`judge_with_traces`] are the whole comparison: `compare` estimates and adjusts, this decides.

use super::metric_state::RULES;
use super::mitigation::for_trace_causes;
use super::vocab::{Decision, Verdict};
use crate::baseline::Baseline;
use crate::compare::sweep::SweepSummary;
use crate::compare::traces::{PendingTraces, TraceComparison};
use crate::compare::{
    adjust_together, adjust_with_traces, describe, prepare, prepare_runs, Adjusted, BaselineSummary, CompareOptions,
    Comparison, MetricComparison, Pending, RunsNeeded, State, Statistic, SCHEMA_VERSION,
};
use commgate_core::result::{RunResult, Schedule, SoftwareChange};
use commgate_core::units::{change, in_words, interval, pct, plural};

/// Compares `current` with `baseline`: Holm's family is this comparison's judged metrics.
pub fn judge(baseline: &Baseline, current: &RunResult, opts: &CompareOptions) -> Comparison {
    conclude(prepare(baseline, current, opts).adjust_alone(opts, RULES), opts)
}

/// [`judge`] with the ceilings the store kept for nccl-tests sweeps (`baseline::ceiling`).
pub fn judge_kept(
    baseline: &Baseline,
    current: &RunResult,
    opts: &CompareOptions,
    kept: &[crate::baseline::ceiling::Ceiling],
) -> Comparison {
    let pending = crate::compare::prepare_runs_kept(baseline, std::slice::from_ref(current), opts, kept);
    conclude(pending.adjust_alone(opts, RULES), opts)
}

/// [`judge`] with the current side as K runs of one workload (`check --runs K`).
pub fn judge_runs(baseline: &Baseline, current: &[RunResult], opts: &CompareOptions) -> Comparison {
    conclude(prepare_runs(baseline, current, opts).adjust_alone(opts, RULES), opts)
}

/// Judges several comparisons as one family (Holm over all their judged metrics together), each
/// then concluded with the rule `compare` uses. The output is in the input order.
pub fn judge_together(pending: Vec<Pending>, opts: &CompareOptions) -> Vec<Comparison> {
    adjust_together(pending, opts, RULES).into_iter().map(|j| conclude(j, opts)).collect()
}

/// [`judge_together`] with the trace comparison's quantities in the same family, so that a gate
/// judging workloads and traces keeps one family-wise error rate over everything it judges; each
/// regressed collective gets the mitigation its cause calls for.
pub fn judge_with_traces(
    pending: Vec<Pending>,
    traces: Option<PendingTraces>,
    opts: &CompareOptions,
) -> (Vec<Comparison>, Option<TraceComparison>) {
    let (judged, mut traces) = adjust_with_traces(pending, traces, opts, RULES);
    if let Some(t) = &mut traces {
        for_trace_causes(t);
    }
    (judged.into_iter().map(|j| conclude(j, opts)).collect(), traces)
}

/// The comparison of adjusted metrics: its verdict, the phase a blocking regression traces to
/// first in the reasons, what to do when it could not decide, its headline, and the notes last.
pub fn conclude(j: Adjusted, opts: &CompareOptions) -> Comparison {
    let Adjusted { baseline, delta, metrics, unusable, hardware, cause, notes, current_runs, runs_needed, sweep } = j;
    let mut v = match &unusable {
        Some(reason) => Verdict::because(Decision::CollectMoreEvidence, reason.clone()),
        None => decide(&metrics, &baseline, &hardware, delta, opts),
    };
    let cause = cause.filter(|_| v.blocking);
    if let Some((_, sentence)) = &cause {
        v.reasons.insert(0, sentence.clone());
    }
    let mde = metrics.iter().find(|m| m.primary).and_then(|m| m.mde).filter(|_| baseline.fingerprint_match);
    let undecided = unusable.is_none() && baseline.fingerprint_match && v.decision == Decision::CollectMoreEvidence;
    if undecided {
        if let Some(advice) = advice(&metrics, &baseline, mde, runs_needed) {
            v.reasons.insert(0, advice);
        }
    }
    v.reasons.extend(notes);
    if let Some(s) = &sweep {
        v.reasons.extend(sweep_reasons(s));
    }
    // A sweep that does not hold the baseline's points cannot be accepted on the points it
    // shares: a point renamed, resized or dropped would otherwise take its slowdown with it.
    let mismatch = sweep.as_ref().and_then(points_mismatch).filter(|_| v.decision == Decision::Accept);
    if let Some(why) = &mismatch {
        v.decision = Decision::CollectMoreEvidence;
        v.reasons.insert(0, why.clone());
    }
    let headline = match (&mismatch, sweep_headline(&v, &metrics, sweep.as_ref(), delta)) {
        (Some(why), _) => format!("cannot accept: {why}"),
        (None, Some(h)) if unusable.is_none() && baseline.fingerprint_match => h,
        _ => headline(&v, &metrics, &baseline, delta, mde, unusable.as_deref(), &hardware),
    };
    Comparison {
        schema_version: SCHEMA_VERSION,
        verdict: v.decision,
        regression: v.blocking,
        baseline,
        delta,
        metrics,
        cause: cause.map(|(c, _)| c),
        headline,
        current_runs,
        mde,
        runs_needed: runs_needed.filter(|_| undecided),
        reasons: v.reasons,
        sweep,
    }
}

/// What a sweep's comparison adds to its reasons: the points no baseline holds, and the process
/// that was the slowest far more often than chance.
fn sweep_reasons(s: &SweepSummary) -> Vec<String> {
    let mut out = Vec::new();
    if !s.new_points.is_empty() {
        out.push(format!(
            "{} point{} of this sweep {} no baseline yet ({}): shown, not judged; record baseline runs of this sweep",
            s.new_points.len(),
            plural(s.new_points.len()),
            if s.new_points.len() == 1 { "has" } else { "have" },
            new_points_named(s, 4)
        ));
    }
    if s.missing_points > 0 {
        out.push(format!(
            "{} not in this sweep (another size range or dtype): not judged",
            baseline_points(s.missing_points)
        ));
    }
    if let Some(p) = &s.slowest {
        out.push(p.sentence());
    }
    out
}

/// "2 points of the baseline are" (what follows says where they are not).
fn baseline_points(n: usize) -> String {
    format!("{n} point{} of the baseline {}", plural(n), if n == 1 { "is" } else { "are" })
}

/// The first `shown` of the points no baseline holds, and how many more: "64.0 KiB out-of-place
/// and 3 more".
fn new_points_named(s: &SweepSummary, shown: usize) -> String {
    let named: Vec<String> = s.new_points.iter().take(shown).map(|k| k.label(false)).collect();
    let more = s.new_points.len().saturating_sub(named.len());
    let more = if more > 0 { format!(" and {more} more") } else { String::new() };
    format!("{}{more}", named.join(", "))
}

/// Why a sweep's points do not match its baseline's, or `None` when they do: points the
/// baseline lacks (another size, dtype, reduction or placement than it recorded) and baseline
/// points this sweep lacks (a size left out, a hole in the series).
fn points_mismatch(s: &SweepSummary) -> Option<String> {
    if s.new_points.is_empty() && s.missing_points == 0 {
        return None;
    }
    let mut parts = Vec::new();
    if s.missing_points > 0 {
        parts.push(format!("{} missing from this sweep", baseline_points(s.missing_points)));
    }
    if !s.new_points.is_empty() {
        parts.push(format!(
            "{} {} no baseline ({})",
            s.new_points.len(),
            if s.new_points.len() == 1 { "point has" } else { "points have" },
            new_points_named(s, 2)
        ));
    }
    Some(format!(
        "this sweep does not match the baseline's points ({}): run the sweep the baseline recorded (same sizes, \
         dtypes, reduction ops and placements), or record baselines of this one",
        parts.join("; ")
    ))
}

/// A sweep's headline when it accepts: how many points held within δ, rather than the primary
/// point alone; other verdicts read like any comparison's (the point that blocks, or why not).
fn sweep_headline(
    v: &Verdict,
    metrics: &[MetricComparison],
    sweep: Option<&SweepSummary>,
    delta: f64,
) -> Option<String> {
    let s = sweep?;
    if v.decision != Decision::Accept || metrics.is_empty() {
        return None;
    }
    let improved: Vec<&MetricComparison> = metrics.iter().filter(|m| m.judged.state == State::Improved).collect();
    let n = metrics.len();
    let first = format!("{} of {n} points of {} within ±{}", n - improved.len(), s.program, pct(delta));
    Some(match improved.first() {
        None => first,
        Some(m) => format!("{first}; {} {}", plain(m), in_words(m.judged.ratio, m.judged.ci)),
    })
}

/// A metric in plain words, for the headline: "overlap step", "serial step P95", "the collective
/// alone (comm_only)".
fn plain(m: &MetricComparison) -> String {
    if let Some(p) = &m.point {
        return format!("{} {}", p.key.collective, p.key.label(false));
    }
    let tail = if m.statistic == Statistic::P95 { " P95" } else { "" };
    match (m.row, m.statistic) {
        (_, Statistic::ExposedCommMs) => "exposed communication".to_string(),
        (Schedule::Overlap | Schedule::Serial, _) => format!("{} step{tail}", m.row),
        (Schedule::CommOnly, _) => format!("the collective alone (comm_only{tail})"),
        (Schedule::ComputeOnly, _) => format!("the matmul alone (compute_only{tail})"),
    }
}

/// "overlap step 8.1 % slower (95 % CI 7.5–8.8 %)"; exposed comm as a share of the step.
fn in_plain_words(m: &MetricComparison) -> String {
    if let (Some(p), Some(t)) = (&m.point, &m.throughput) {
        let peak = p
            .of_ceiling(t.current)
            .map(|s| format!(", {:.0} % of this runner's measured peak", 100.0 * s))
            .unwrap_or_default();
        return format!("{} {}: busbw {:.2} GB/s{peak}", plain(m), in_words(m.judged.ratio, m.judged.ci), t.current);
    }
    if m.statistic == Statistic::ExposedCommMs {
        return format!("{} {} of the step (95 % CI {})", plain(m), change(m.judged.ratio), interval(m.judged.ci));
    }
    format!("{} {}", plain(m), in_words(m.judged.ratio, m.judged.ci))
}

/// What a reviewer reads first: the slowdown and that it blocks, or that nothing changed beyond
/// δ, or why the gate cannot tell and what it can see.
fn headline(
    v: &Verdict,
    metrics: &[MetricComparison],
    baseline: &BaselineSummary,
    delta: f64,
    mde: Option<f64>,
    unusable: Option<&str>,
    hardware: &str,
) -> String {
    if let Some(reason) = unusable {
        return format!("cannot judge: {reason}");
    }
    if !baseline.fingerprint_match {
        return format!("cannot judge: {hardware}");
    }
    let primary = metrics.iter().find(|m| m.primary);
    if v.blocking {
        let first = metrics.iter().find(|m| m.judged.state == State::Regressed);
        return first.map_or_else(
            || "a confirmed regression — blocking".to_string(),
            |m| format!("{} — blocking", in_plain_words(m)),
        );
    }
    let Some(p) = primary else { return v.reasons.first().cloned().unwrap_or_default() };
    match v.decision {
        Decision::Accept => match p.judged.state {
            State::Improved => in_plain_words(p),
            _ => format!("{}, within ±{}", in_plain_words(p), pct(delta)),
        },
        _ => {
            // A metric whose interval lies beyond δ but may not block says why, first: "cannot
            // tell yet" beside an interval wholly above δ reads as a contradiction.
            if let Some((m, why)) = metrics.iter().find_map(|m| m.vetoed().map(|why| (m, why))) {
                return format!("cannot confirm yet: {}; {why}", in_plain_words(m));
            }
            let open = metrics
                .iter()
                .find(|m| m.judged.state == State::Inconclusive && m.judged.ratio > 1.0 + delta)
                .unwrap_or(p);
            // The MDE of the metric named, not the primary's: a P95 may see far less. Named with
            // its metric when it is not the primary's, which the rest of the report shows.
            let sees = match (open.mde, mde) {
                (Some(m), Some(_)) if open.primary => {
                    format!("this comparison can only block slowdowns above {}", pct(m))
                }
                (Some(m), Some(_)) => format!("its {} can only block slowdowns above {}", open.label(), pct(m)),
                (None, Some(_)) => format!("its {} cannot block on this evidence", open.label()),
                _ => "this comparison cannot block on its own".to_string(),
            };
            format!("cannot tell yet: {}; {sees}", in_plain_words(open))
        }
    }
}

/// What to do when the comparison could not decide, with the runs it would take: "baseline runs
/// vary 18.8 %, so this gate can only see slowdowns above 45 %: quiet the runner, pin clocks, or
/// record 12 more baseline runs (or judge 4 current runs: `commgate check --runs 4`)".
fn advice(
    metrics: &[MetricComparison],
    baseline: &BaselineSummary,
    mde: Option<f64>,
    needed: Option<RunsNeeded>,
) -> Option<String> {
    let primary = metrics.iter().find(|m| m.primary)?;
    let mde = mde?;
    // Only a genuinely wide interval is helped by more runs; a vetoed metric has its own note.
    if primary.judged.state != State::Inconclusive || primary.note.is_some() {
        return None;
    }
    let vary = match (baseline.spread, baseline.range) {
        // One run far off the others: the robust spread does not show it, the range does.
        (spread, Some(range)) if disagree(spread, range) => format!(
            "baseline runs disagree (the slowest run's median is {range:.2}× the fastest's; remove or re-record the \
             odd run), so "
        ),
        (Some(s), _) => format!("baseline runs vary {}, so ", pct(s.exp_m1())),
        _ => String::new(),
    };
    let baseline_runs = |b: usize| {
        format!(
            "record {b} more baseline run{} (`commgate baseline update` after each; the store keeps `--keep` runs)",
            if b == 1 { "" } else { "s" }
        )
    };
    let current_runs = |k: usize| format!("judge {k} current runs (`commgate check --runs {k}`)");
    let todo = match needed.map(|n| (n.more_baseline_runs, n.current_runs)) {
        Some((Some(b), Some(k))) => {
            format!("quiet the runner, pin clocks, or {} or {}", baseline_runs(b), current_runs(k))
        }
        Some((Some(b), None)) => format!("quiet the runner, pin clocks, or {}", baseline_runs(b)),
        Some((None, Some(k))) => format!("quiet the runner, pin clocks, or {}", current_runs(k)),
        _ => "quiet the runner or pin clocks: more runs alone would not decide at this spread".to_string(),
    };
    Some(format!(
        "{vary}this gate can only see slowdowns above {} (its minimum detectable effect, on the {}): {todo}",
        pct(mde),
        primary.label()
    ))
}

/// How far the slowest baseline run may lie from the fastest before the runs are said to
/// disagree: 25 %, and three times what their robust spread accounts for.
pub const DISAGREE_RANGE: f64 = 0.25;

/// Whether the baseline runs disagree beyond [`DISAGREE_RANGE`].
fn disagree(spread: Option<f64>, range: f64) -> bool {
    let explained = spread.map_or(0.0, |s| 3.0 * s.exp_m1());
    range - 1.0 > DISAGREE_RANGE && range - 1.0 > explained
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
    // A metric that looks slower beyond δ but is not confirmed is not a pass either.
    let looks_slower = metrics.iter().any(|m| m.judged.state == State::Inconclusive && m.judged.ratio > 1.0 + delta);
    // Metrics that are open for the same reason share one line: a reviewer reads the reason once.
    let mut open: Vec<(String, Vec<String>)> = Vec::new();
    for m in metrics.iter().filter(|m| m.judged.state == State::Inconclusive) {
        let why = m.note.clone().unwrap_or_else(|| format!("not enough evidence either way at δ = {}", pct(delta)));
        match open.iter_mut().find(|(w, _)| *w == why) {
            Some((_, said)) => said.push(describe(m)),
            None => open.push((why, vec![describe(m)])),
        }
    }
    reasons.extend(open.into_iter().map(|(why, said)| format!("{}: {why}", said.join("; "))));
    let unchanged: Vec<String> =
        metrics.iter().filter(|m| m.judged.state == State::Unchanged).map(MetricComparison::label).collect();
    let points = metrics.iter().any(|m| m.point.is_some());
    if points && unchanged.len() > 4 {
        reasons.push(format!("{} of {} points unchanged within ±{}", unchanged.len(), metrics.len(), pct(delta)));
    } else if !unchanged.is_empty() {
        reasons.push(format!("{} unchanged within ±{}", unchanged.join(", "), pct(delta)));
    }
    if too_few {
        let fewest = metrics.iter().map(|m| m.judged.n_current).min().unwrap_or(0);
        let why = match (points, fewest) {
            (true, 1) => format!(
                "nccl-tests ran without `-I 1`: one time per size, and one figure cannot confirm or clear a change; \
                 run it with `-I 1 -n {}` or more for per-iteration times",
                opts.min_samples
            ),
            (true, _) => format!(
                "only {fewest} iterations per size in the current sweep; run nccl-tests with `-n {}` or more",
                opts.min_samples
            ),
            (false, _) => format!(
                "only {fewest} samples in the current run; run at least {} repeats ({} for P95 to count)",
                opts.min_samples, opts.p95_min_samples
            ),
        };
        reasons.insert(0, why);
        return Verdict::new(Decision::CollectMoreEvidence, reasons);
    }
    if primary_open || looks_slower {
        return Verdict::new(Decision::CollectMoreEvidence, reasons);
    }
    Verdict::new(Decision::Accept, reasons)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One run 3× off nine that agree: the runs disagree; runs alternating ±18 % vary.
    #[test]
    fn runs_disagree_when_the_range_outgrows_the_spread() {
        assert!(disagree(Some(0.0036), 3.02));
        assert!(!disagree(Some(0.272), 1.39), "a wide spread explains the range");
        assert!(!disagree(Some(0.001), 1.2), "within 25 %");
        assert!(disagree(None, 1.5), "two runs, 50 % apart");
    }
}
