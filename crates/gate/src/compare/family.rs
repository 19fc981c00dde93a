//! Holm's correction over a family of comparisons: the raw p-values of every judged metric of
//! every comparison (one per workload) are adjusted together, then each metric's state is
//! derived with the one four-state rule (`decide::metric_state`). A comparison alone is a family
//! of one, so `compare` and a one-workload `check` agree by construction. The verdict on each
//! adjusted comparison ([`Adjusted`]) is `decide::comparison`'s.
//!
//! Why one family: a gate that judges ten workloads at α = 0.01 each would block one pull
//! request in ten on noise alone; Holm over all of them keeps the family-wise error at α.

use super::estimate::{row_note, runs_needed, Estimate, Metric};
use super::traces::{PendingTraces, TraceComparison};
use super::{
    cause, metric_comparison, moves, phases, BaselineSummary, CompareOptions, MetricComparison, RunsNeeded, StateRules,
    StepCause, SweepSummary,
};
use commgate_core::result::Workload;
use commgate_stats::holm::holm_adjust;

/// A comparison up to Holm's correction (made by [`super::prepare`]).
pub struct Pending {
    summary: BaselineSummary,
    delta: f64,
    stage: Stage,
}

enum Stage {
    /// The comparison could not start (a failed or dry current run, no usable baseline run).
    Unusable(String),
    Judging(Box<Judging>),
    /// Several comparisons adjusted with the family and merged into one after Holm (an
    /// nccl-tests sweep: one comparison per point).
    Parts(Box<Parts>),
}

/// Turns the adjusted parts, in their order, into the one comparison they make.
pub(super) type Merge = Box<dyn FnOnce(Vec<Adjusted>) -> Adjusted>;

struct Parts {
    parts: Vec<Pending>,
    merge: Merge,
}

struct Judging {
    judged: Vec<(Metric, Estimate)>,
    /// Per row (`estimate::ROWS`), the note of a current run atypically dependent there.
    dependence: [Option<String>; 4],
    workload: Workload,
    /// Why the hardware differs, said only when no baseline run shares the fingerprint.
    hardware: String,
    /// Reasons that go last: a subsampled row, a trimmed warm-up, the runs NCCL's choice kept.
    notes: Vec<String>,
    current_runs: usize,
}

impl Pending {
    pub(super) fn unusable(summary: BaselineSummary, delta: f64, reason: String) -> Self {
        Pending { summary, delta, stage: Stage::Unusable(reason) }
    }

    #[expect(clippy::too_many_arguments, reason = "one call site, in prepare_runs")]
    pub(super) fn judging(
        summary: BaselineSummary,
        delta: f64,
        judged: Vec<(Metric, Estimate)>,
        dependence: [Option<String>; 4],
        workload: Workload,
        hardware: String,
        notes: Vec<String>,
        current_runs: usize,
    ) -> Self {
        Pending {
            summary,
            delta,
            stage: Stage::Judging(Box::new(Judging { judged, dependence, workload, hardware, notes, current_runs })),
        }
    }

    /// A comparison made of `parts`, each adjusted in the family, then merged by `merge`;
    /// `fallback` is its baseline summary when it has no part.
    pub(super) fn parts(parts: Vec<Pending>, fallback: BaselineSummary, delta: f64, merge: Merge) -> Self {
        let summary = parts.first().map_or(fallback, |p| p.summary.clone());
        Pending { summary, delta, stage: Stage::Parts(Box::new(Parts { parts, merge })) }
    }

    /// This comparison with every judged metric unable to block, for `why` (a limit seen only
    /// from outside it, such as a sweep's episodes); a metric that already cannot keeps its own
    /// reason. Its minimum detectable effect goes with it.
    pub(super) fn cannot_block(mut self, why: &str) -> Self {
        if let Stage::Judging(j) = &mut self.stage {
            for (_, e) in &mut j.judged {
                if e.cannot_block.is_none() {
                    e.cannot_block = Some(why.to_string());
                    e.mde = None;
                }
            }
        }
        self
    }

    /// The raw one-sided p-values (regressed, improved) of the judged metrics, in order.
    fn raw(&self) -> (Vec<f64>, Vec<f64>) {
        match &self.stage {
            Stage::Unusable(_) => (Vec::new(), Vec::new()),
            Stage::Judging(j) => j.judged.iter().map(|(_, e)| (e.p_regressed, e.p_improved)).unzip(),
            Stage::Parts(s) => {
                let (mut reg, mut imp) = (Vec::new(), Vec::new());
                for p in &s.parts {
                    let (r, i) = p.raw();
                    reg.extend(r);
                    imp.extend(i);
                }
                (reg, imp)
            }
        }
    }

    /// Holm over this comparison's metrics alone (what `compare` does).
    pub fn adjust_alone(self, opts: &CompareOptions, rules: StateRules) -> Adjusted {
        let (reg, imp) = self.raw();
        self.adjust(&holm_adjust(&reg), &holm_adjust(&imp), opts, rules)
    }

    /// States from the adjusted p-values (one per judged metric).
    fn adjust(self, p_reg: &[f64], p_imp: &[f64], opts: &CompareOptions, rules: StateRules) -> Adjusted {
        let Pending { summary, delta, stage } = self;
        let j = match stage {
            Stage::Unusable(reason) => {
                return Adjusted {
                    baseline: summary,
                    delta,
                    metrics: Vec::new(),
                    unusable: Some(reason),
                    hardware: String::new(),
                    cause: None,
                    notes: Vec::new(),
                    current_runs: 1,
                    runs_needed: None,
                    sweep: None,
                }
            }
            Stage::Parts(s) => {
                let Parts { parts, merge } = *s;
                let (mut reg, mut imp) = (p_reg, p_imp);
                let adjusted = parts
                    .into_iter()
                    .map(|p| {
                        let n = p.raw().0.len();
                        p.adjust(take_front(&mut reg, n), take_front(&mut imp, n), opts, rules)
                    })
                    .collect();
                return merge(adjusted);
            }
            Stage::Judging(j) => *j,
        };
        let metrics: Vec<_> = j
            .judged
            .iter()
            .zip(p_reg.iter().zip(p_imp))
            .map(|((m, e), (&r, &i))| {
                metric_comparison(*m, e, r, i, delta, row_note(*m, &j.dependence), &j.workload, opts, rules)
            })
            .collect();
        let cause = cause::mover(moves(&metrics)).map(|c| (c, cause::sentence(c, &phases(&metrics))));
        // How many runs would decide the primary metric, when it is undecided.
        let runs_needed = j
            .judged
            .first()
            .zip(metrics.first())
            .filter(|(_, mc)| mc.judged.state == super::State::Inconclusive && mc.note.is_none())
            .and_then(|((_, e), _)| e.spread.as_ref())
            .map(|s| runs_needed(s, opts));
        Adjusted {
            baseline: summary,
            delta,
            metrics,
            unusable: None,
            hardware: j.hardware,
            cause,
            notes: j.notes,
            current_runs: j.current_runs,
            runs_needed,
            sweep: None,
        }
    }
}

/// A comparison with its metrics' states, before its verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Adjusted {
    pub baseline: BaselineSummary,
    pub delta: f64,
    pub metrics: Vec<MetricComparison>,
    /// Why the comparison could not start (a failed or dry current run, no usable baseline run);
    /// `metrics` is then empty.
    pub unusable: Option<String>,
    /// Why the hardware differs; a reason only when no baseline run shares the fingerprint.
    pub hardware: String,
    /// The phase a regression traces to, with its sentence (a reason only if the verdict blocks).
    pub cause: Option<(StepCause, String)>,
    /// Reasons that go last: a subsampled row, a trimmed warm-up, the runs NCCL's choice kept.
    pub notes: Vec<String>,
    /// How many current runs were judged.
    pub current_runs: usize,
    /// When the primary metric is undecided on run-level evidence: how many more runs would
    /// decide it.
    pub runs_needed: Option<RunsNeeded>,
    /// What a sweep's comparison says beyond its points' metrics.
    pub sweep: Option<SweepSummary>,
}

/// Adjusts several comparisons as one family: Holm over all their judged metrics together. The
/// output is in the input order.
pub fn adjust_together(pending: Vec<Pending>, opts: &CompareOptions, rules: StateRules) -> Vec<Adjusted> {
    adjust_with_traces(pending, None, opts, rules).0
}

/// [`adjust_together`] with the trace comparison's quantities in the same family, so that a gate
/// judging workloads and traces keeps one family-wise error rate over everything it judges.
pub fn adjust_with_traces(
    pending: Vec<Pending>,
    traces: Option<PendingTraces>,
    opts: &CompareOptions,
    rules: StateRules,
) -> (Vec<Adjusted>, Option<TraceComparison>) {
    let mut raw: Vec<(Vec<f64>, Vec<f64>)> = pending.iter().map(Pending::raw).collect();
    raw.extend(traces.as_ref().map(PendingTraces::raw));
    let reg = holm_adjust(&raw.iter().flat_map(|(r, _)| r.iter().copied()).collect::<Vec<_>>());
    let imp = holm_adjust(&raw.iter().flat_map(|(_, i)| i.iter().copied()).collect::<Vec<_>>());
    let (mut reg_left, mut imp_left) = (reg.as_slice(), imp.as_slice());
    let comparisons = pending
        .into_iter()
        .zip(&raw)
        .map(|(p, (r, _))| {
            p.adjust(take_front(&mut reg_left, r.len()), take_front(&mut imp_left, r.len()), opts, rules)
        })
        .collect();
    let traces = traces.map(|t| {
        let n = raw.last().map_or(0, |(r, _)| r.len());
        t.finish(take_front(&mut reg_left, n), take_front(&mut imp_left, n), opts, rules)
    });
    (comparisons, traces)
}

/// The first `n` of the family's adjusted p-values left, taken off `left`: each comparison's
/// share, in the order their raw p-values were gathered (all that is left, should fewer be).
fn take_front<'a>(left: &mut &'a [f64], n: usize) -> &'a [f64] {
    let all: &'a [f64] = left;
    let (head, tail) = all.split_at_checked(n).unwrap_or((all, &[]));
    *left = tail;
    head
}

#[cfg(test)]
mod tests {
    use super::super::{prepare, State};
    use super::*;
    use crate::baseline::Baseline;
    use crate::decide::comparison::{judge, judge_together};
    use crate::decide::Decision;
    use commgate_stats::rng::Rng;
    use commgate_testkit::results as fixtures;
    use std::path::PathBuf;

    fn samples(n: usize, level: f64, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| level * (0.02 * rng.normal()).exp()).collect()
    }

    fn baseline(runs: usize, seed: u64) -> Baseline {
        let runs = (0..runs).map(|i| fixtures::run(&samples(200, 1.0, seed + i as u64))).collect();
        Baseline { path: PathBuf::from("b.json"), runs }
    }

    #[test]
    fn a_family_of_one_is_the_comparison() {
        let opts = CompareOptions::default();
        for (runs, level) in [(10, 1.0), (10, 1.2), (2, 1.1), (1, 0.9)] {
            let (b, cur) = (baseline(runs, 100), fixtures::run(&samples(200, level, 7)));
            let together = judge_together(vec![prepare(&b, &cur, &opts)], &opts);
            assert_eq!(together, vec![judge(&b, &cur, &opts)], "{runs} runs at {level}");
        }
    }

    #[test]
    fn the_family_adjusts_across_comparisons() {
        let opts = CompareOptions::default();
        let (b, cur) = (baseline(10, 100), fixtures::run(&samples(200, 1.2, 7)));
        let alone = judge(&b, &cur, &opts);
        let pending = (0..5).map(|_| prepare(&b, &cur, &opts)).collect();
        let five = judge_together(pending, &opts);
        assert_eq!(five.len(), 5);
        // Five identical comparisons: each adjusted p-value is at least the lone one's.
        for (lone, fam) in alone.metrics.iter().zip(&five[0].metrics) {
            assert!(
                fam.judged.p_adjusted >= lone.judged.p_adjusted,
                "{} {} < {}",
                fam.label(),
                fam.judged.p_adjusted,
                lone.judged.p_adjusted
            );
            assert_eq!(fam.judged.p_value, lone.judged.p_value);
        }
        // A 20 % shift still blocks in a family of five.
        assert!(five.iter().all(|c| c.regression && c.metrics[0].judged.state == State::Regressed));
    }

    #[test]
    fn an_unusable_comparison_takes_no_place_in_the_family() {
        let opts = CompareOptions::default();
        let b = baseline(10, 100);
        let dry = Baseline { path: PathBuf::from("b.json"), runs: Vec::new() };
        let cur = fixtures::run(&samples(200, 1.2, 7));
        let out = judge_together(vec![prepare(&dry, &cur, &opts), prepare(&b, &cur, &opts)], &opts);
        assert!(out[0].metrics.is_empty() && out[0].verdict == Decision::CollectMoreEvidence);
        assert_eq!(out[1], judge(&b, &cur, &opts));
    }
}
