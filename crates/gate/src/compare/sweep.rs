//! An nccl-tests sweep judged like the benchmark (`docs/gate.md`, "nccl-tests sweeps"): each
//! point (collective, dtype, redop, size, placement) is a workload of its own whose samples are
//! the per-iteration times, prepared by the benchmark's comparison ([`super::prepare_runs`]),
//! and every point of the sweep is one entry of Holm's family. After the correction the points
//! are merged back into one comparison of the sweep, each metric carrying its point
//! ([`PointRef`]): the size × busbw table, the chart and the reasons read from it.
//!
//! Each point also carries this runner's ceiling: the best bus bandwidth any stored run on the
//! same hardware fingerprint reached at that point, and the plateau, the best of those over
//! the sweep's sizes, so that "busbw 370 GB/s" reads as "78 % of this runner's measured peak".
//! And the process nccl-tests timed slowest in most iterations is named when it stands out
//! (`per_process_max_times_us`), with the one-sided binomial test the traces use for a rank
//! that arrives last (`LAST_ARRIVAL_ALPHA`, Bonferroni over the processes).
//!
//! A point judged from its per-iteration times also has its summary time, which nccl-tests
//! takes over the same iterations: when the change the summary says and the change the
//! iterations say disagree beyond δ (`Said::disagree`), the point's figures contradict each
//! other (an edited file, or a run no comparison can read), and the sweep is not accepted: it
//! is `collect_more_evidence` with the point and both figures in its headline, unless another
//! point blocks.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::family::{Adjusted, Pending};
use super::throughput::{Throughput, ThroughputKind};
use super::{prepare_runs, BaselineSummary, CompareOptions, MetricComparison, State};
use crate::baseline::ceiling::Ceiling;
use crate::baseline::Baseline;
use commgate_core::result::sweep::{point_run, point_summary_run, PointKey, SweepData, SweepPoint};
use commgate_core::result::RunResult;
use commgate_core::units::{change, plural};
use commgate_stats::serial::rank_ljung_box;
use commgate_stats::tail::binomial_greater;
use commgate_trace::attribute::LAST_ARRIVAL_ALPHA;

/// The point a metric of a sweep's comparison judged, with what its row of the table shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointRef {
    #[serde(flatten)]
    pub key: PointKey,
    /// The best bus bandwidth stored runs on this hardware reached at this point, GB/s (their
    /// medians); `None` without such runs or a bandwidth.
    #[serde(default)]
    pub ceiling_gbps: Option<f64>,
    /// The best of the ceilings over the sweep's sizes (same collective, dtype, op and
    /// placement): the large-message plateau.
    #[serde(default)]
    pub plateau_gbps: Option<f64>,
}

impl PointRef {
    /// The current bus bandwidth as a share of this runner's ceiling at this point.
    pub fn of_ceiling(&self, busbw: f64) -> Option<f64> {
        self.ceiling_gbps.filter(|c| *c > 0.0).map(|c| busbw / c)
    }

    /// The current bus bandwidth as a share of the plateau.
    pub fn of_plateau(&self, busbw: f64) -> Option<f64> {
        self.plateau_gbps.filter(|c| *c > 0.0).map(|c| busbw / c)
    }
}

pub use super::{SlowestProcess, SweepSummary};

impl SlowestProcess {
    /// "process 3 (node-d, GPU 0) was the slowest in 412 of 800 iterations (52 %; 12 % if none
    /// stood out)".
    pub fn sentence(&self) -> String {
        let at = match (&self.host, self.device) {
            (Some(h), Some(d)) => format!(" ({}, GPU {d})", h.escape_debug()),
            (Some(h), None) => format!(" ({})", h.escape_debug()),
            _ => String::new(),
        };
        format!(
            "process {}{at} was the slowest in {} of {} iterations ({:.0} %; {:.0} % if no process stood out): check \
             that host's GPU clocks, NIC and PCIe links",
            self.process,
            self.last,
            self.iterations,
            100.0 * self.last as f64 / self.iterations.max(1) as f64,
            100.0 / self.processes.max(1) as f64
        )
    }
}

/// A process is named when it was the slowest this much more often than its fair share
/// (`1/P`): twice it, or for two processes three iterations in four.
fn stands_out(share: f64, processes: usize) -> bool {
    let fair = 1.0 / processes as f64;
    share >= (2.0 * fair).min((1.0 + fair) / 2.0)
}

/// The process slowest in most iterations over every point of `sweep`, when the binomial test
/// (at [`LAST_ARRIVAL_ALPHA`] over the processes) and `stands_out` both say so.
pub fn slowest_process(sweep: &SweepData) -> Option<SlowestProcess> {
    let processes = sweep.points.iter().map(|p| p.last.len()).max()?;
    if processes < 2 {
        return None;
    }
    let mut counts = vec![0u64; processes];
    for p in sweep.points.iter().filter(|p| p.last.len() == processes) {
        for (c, n) in counts.iter_mut().zip(&p.last) {
            *c += u64::from(*n);
        }
    }
    let iterations: u64 = counts.iter().sum();
    let (process, &last) = counts.iter().enumerate().max_by_key(|(i, c)| (**c, std::cmp::Reverse(*i)))?;
    let p_value = binomial_greater(last, iterations, 1.0 / processes as f64);
    let share = last as f64 / iterations.max(1) as f64;
    let significant = p_value <= LAST_ARRIVAL_ALPHA / processes as f64;
    (iterations > 0 && significant && stands_out(share, processes)).then(|| {
        let at = sweep.processes.get(process).filter(|_| sweep.processes.len() == processes);
        SlowestProcess {
            process,
            host: at.map(|p| p.host.clone()),
            device: at.map(|p| p.device),
            last,
            iterations,
            processes,
            p_value,
        }
    })
}

/// Per point of the current sweep, the best median busbw the stored runs on its hardware
/// reached there (and any run the store kept the ceiling of, `kept`), and the plateau of each
/// (collective, dtype, op, placement).
fn ceilings(
    keys: &[PointKey],
    stored: &[&RunResult],
    kept: &[Ceiling],
    fingerprint: &str,
) -> Vec<(Option<f64>, Option<f64>)> {
    let best = |k: &PointKey| {
        let runs = stored
            .iter()
            .filter(|r| r.hardware.fingerprint == fingerprint)
            .filter_map(|r| r.sweep.as_ref()?.points.iter().find(|p| p.key == *k))
            .filter_map(SweepPoint::median_busbw);
        let past = kept.iter().filter(|c| c.fingerprint == fingerprint && c.key == *k).map(|c| c.busbw_gbps);
        runs.chain(past).fold(None, |acc: Option<f64>, b| Some(acc.map_or(b, |a| a.max(b))))
    };
    let each: Vec<Option<f64>> = keys.iter().map(best).collect();
    let same_curve = |a: &PointKey, b: &PointKey| {
        (&a.collective, &a.dtype, &a.redop, &a.placement) == (&b.collective, &b.dtype, &b.redop, &b.placement)
    };
    keys.iter()
        .zip(&each)
        .map(|(k, c)| {
            let plateau = keys
                .iter()
                .zip(&each)
                .filter(|(o, _)| same_curve(k, o))
                .filter_map(|(_, c)| *c)
                .fold(None, |acc: Option<f64>, b| Some(acc.map_or(b, |a| a.max(b))));
            (*c, plateau)
        })
        .collect()
}

/// Where some baseline sweep's iterations come in episodes, the evidence that one current sweep
/// of fewer iterations per size than this cannot confirm a slowdown (the benchmark's rule for an
/// episodic baseline, `one_run.rs`).
pub const EPISODIC_ITERATIONS: usize = super::one_run::EPISODIC_RUN_STEPS;

/// Whether a sweep's iterations come in episodes, and the first of `runs` that shows it: its
/// points' per-iteration times, each divided by its point's median and laid end to end in the
/// order nccl-tests ran them (the first point left out: it follows the warm-up), tested for serial
/// dependence (Ljung–Box on ranks, at the benchmark guard's level divided over the runs). One
/// point's 50 iterations rarely show an episode of 20; a whole sweep's hundreds do, and an episode
/// that ran over into the next size is seen whole. A slower size moves all of its iterations and
/// divides out: it is no episode. Measured with `benches/gate_quality.rs` (`nccl-tests`): before
/// this, 5–6 % of unchanged 50-iteration sweeps blocked on a runner with slow episodes.
pub fn episodic(runs: &[&RunResult]) -> Option<(usize, f64)> {
    let level = super::estimate::DEPENDENCE_ALPHA / runs.len().max(1) as f64;
    runs.iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let points = &r.sweep.as_ref()?.points;
            let series: Vec<f64> = points
                .iter()
                .skip(1)
                .filter(|p| p.samples_ms.len() > 1)
                .flat_map(|p| {
                    let mut sorted = p.samples_ms.clone();
                    sorted.sort_by(f64::total_cmp);
                    let m = commgate_stats::quantile::median(&sorted);
                    p.samples_ms.iter().map(move |x| x / m)
                })
                .collect();
            (series.len() >= 2 * EPISODIC_ITERATIONS).then(|| (i, rank_ljung_box(&series).p_value))
        })
        .filter(|(_, p)| *p < level)
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// What a sweep that cannot block on its own should do instead: be judged with two more.
const CONFIRM_WITH_SWEEPS: &str = "judge 3 sweeps together (`check --result` a directory of them)";

/// A benchmark reason in a sweep's words: its steps are iterations, `--repeats` is nccl-tests'
/// `-n`, and `check --runs` is several sweeps judged together.
fn in_sweep_words(text: &str) -> String {
    text.replace("steps per row (`--repeats`)", "iterations per size (nccl-tests `-n`)")
        .replace("confirm with `commgate check --runs 3`", CONFIRM_WITH_SWEEPS)
        .replace(" steps ", " iterations ")
}

/// One point of a sweep prepared: its reference for the report, the work that turns its times
/// into bus bandwidth, what its summary time says beside its iterations, and its comparison
/// before Holm.
/// A point's bytes × bus factor as the current run printed it, and as the baseline runs did (the
/// median over the runs), when known.
type Work = (f64, Option<f64>);

pub(super) struct PreparedPoint {
    pub(super) point: PointRef,
    /// The bytes × bus factor of the point as the current run and as the baseline runs printed
    /// it (the median over the runs): each side's bus bandwidth is its own work over its time.
    pub(super) work: Option<Work>,
    pub(super) said: Option<Said>,
    pub(super) pending: Pending,
}

/// What a point's two kinds of figures each say of its change, current over baseline (the
/// geometric mean of the runs' on each side): its summary time (`time`, the host's mean over the
/// timed iterations, averaged over the ranks) and its per-iteration times' mean (CUDA events,
/// the slowest process's). The comparison judges the per-iteration times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Said {
    pub(super) summary: f64,
    pub(super) iterations_mean: f64,
}

impl Said {
    /// The ratios of a point's current runs over its baseline runs, when the current runs have
    /// per-iteration times and every figure is a time (`None` otherwise: a run without `-I 1`
    /// is judged from its summary alone, and there is nothing to disagree).
    fn of(stored: &[&RunResult], current: &[RunResult], key: &PointKey) -> Option<Said> {
        let points = |runs: &mut dyn Iterator<Item = &RunResult>| -> Vec<SweepPoint> {
            runs.filter_map(|r| r.sweep.as_ref()?.points.iter().find(|p| p.key == *key).cloned()).collect()
        };
        let (base, now) = (points(&mut stored.iter().copied()), points(&mut current.iter()));
        if now.iter().any(|p| p.samples_ms.len() < 2) {
            return None;
        }
        let summary = |ps: &[SweepPoint]| geometric_mean(ps.iter().map(|p| p.time_us));
        let mean = |ps: &[SweepPoint]| {
            geometric_mean(ps.iter().map(|p| 1e3 * p.samples_ms.iter().sum::<f64>() / p.samples_ms.len() as f64))
        };
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b).filter(|r| r.is_finite() && *r > 0.0);
        Some(Said { summary: ratio(summary(&now), summary(&base))?, iterations_mean: ratio(mean(&now), mean(&base))? })
    }

    /// Whether the summary's change contradicts the judged one (`judged`, the comparison's
    /// ratio of the per-iteration times): the two lie more than δ apart and on different sides
    /// of ±δ (one beyond it, the other within; or beyond it the two ways), and the per-iteration
    /// times' mean does not side with the summary either (a few slow iterations move a mean,
    /// which the summary is, and not the median the comparison reads).
    pub(super) fn disagree(&self, judged: f64, delta: f64) -> bool {
        let side = |r: f64| {
            if r - 1.0 > delta {
                1
            } else if r - 1.0 < -delta {
                -1
            } else {
                0
            }
        };
        let apart = |a: f64, b: f64| (a - b).abs() > delta && side(a) != side(b);
        judged.is_finite() && apart(self.summary, judged) && apart(self.summary, self.iterations_mean)
    }

    /// "64.0 KiB out-of-place: the summary time says +9.3 % but the per-iteration times say
    /// +0.1 %: …".
    fn sentence(&self, point: &PointKey, judged: f64) -> String {
        format!(
            "{}: the summary time says {} but the per-iteration times say {}: the file's figures disagree (nccl-tests \
             times both over the same iterations), so this point cannot be judged; rerun the sweep",
            point.label(false),
            change(self.summary),
            change(judged)
        )
    }
}

/// The geometric mean of the positive finite values, `None` without one.
fn geometric_mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.filter(|v| v.is_finite() && *v > 0.0).fold((0.0, 0usize), |(s, n), v| (s + v.ln(), n + 1));
    (n > 0).then(|| (sum / n as f64).exp())
}

/// Prepares a sweep's comparison: each point of the first current run against the same point of
/// the baseline runs, the current runs' same point judged together (`check --runs`, or several
/// sweeps of one program). Points without a baseline are listed, not judged.
pub(super) fn prepare(baseline: &Baseline, current: &[RunResult], opts: &CompareOptions, kept: &[Ceiling]) -> Pending {
    let delta = opts.min_effect;
    let Some(first) = current.first() else {
        return Pending::unusable(super::empty_summary(baseline), delta, "no current run to judge".to_string());
    };
    let Some(sweep) = first.sweep.as_ref() else {
        return Pending::unusable(super::empty_summary(baseline), delta, "the current run holds no sweep".into());
    };
    let stored: Vec<&RunResult> = baseline.runs.iter().filter(|r| r.is_usable() && r.sweep.is_some()).collect();
    let keys: Vec<PointKey> = sweep.points.iter().map(|p| p.key.clone()).collect();
    let limits = ceilings(&keys, &stored, kept, &first.hardware.fingerprint);
    let mut summary = SweepSummary {
        program: sweep.program.clone(),
        per_iteration: sweep.per_iteration,
        slowest: slowest_process(sweep),
        ..SweepSummary::default()
    };
    let mut stored_keys: Vec<&PointKey> =
        stored.iter().filter_map(|r| r.sweep.as_ref()).flat_map(|s| s.points.iter().map(|p| &p.key)).collect();
    stored_keys.sort();
    stored_keys.dedup();
    summary.missing_points = stored_keys.iter().filter(|k| !keys.contains(k)).count();
    // One current sweep of short points against a baseline whose sweeps show episodes: no point
    // may block (K sweeps are run-level evidence of their own).
    let short = sweep.points.iter().map(|p| p.samples_ms.len()).min().unwrap_or(0);
    // The same when the current sweep's own iterations come in episodes.
    let fix = format!("run nccl-tests with `-n {EPISODIC_ITERATIONS}` or more, or {CONFIRM_WITH_SWEEPS}");
    let episodes = (current.len() == 1 && short < EPISODIC_ITERATIONS)
        .then(|| match (episodic(&[first]), episodic(&stored)) {
            (Some((_, p)), _) => Some(format!(
                "this sweep's iterations come in episodes (Ljung–Box p = {p:.1e}): a size that sat in one looks slower \
                 than it is; {fix}"
            )),
            (None, Some((i, p))) => Some(format!(
                "the baseline sweeps' iterations come in episodes (baseline run {} of {}: Ljung–Box p = {p:.1e}), and \
                 one sweep of {short} iterations per size can sit wholly in one: {fix}",
                i + 1,
                stored.len(),
            )),
            (None, None) => None,
        })
        .flatten();
    let mut points = Vec::new();
    let stored_works = stored_works(&stored);
    for (p, (ceiling, plateau)) in sweep.points.iter().zip(limits) {
        // A run without per-iteration times is held against the baseline's summaries (means).
        let project = if p.samples_ms.len() == 1 { point_summary_run } else { point_run };
        let runs: Vec<RunResult> = stored.iter().filter_map(|r| project(r, &p.key)).collect();
        if runs.is_empty() {
            summary.new_points.push(p.key.clone());
            continue;
        }
        let currents: Vec<RunResult> = current.iter().filter_map(|c| point_run(c, &p.key)).collect();
        let b = Baseline { path: baseline.path.clone(), runs };
        let pending = prepare_runs(&b, &currents, opts);
        points.push(PreparedPoint {
            point: PointRef { key: p.key.clone(), ceiling_gbps: ceiling, plateau_gbps: plateau },
            work: p.busbw_work().map(|w| (w, stored_works.get(&p.key).copied())),
            said: Said::of(&stored, current, &p.key),
            pending: match &episodes {
                Some(why) => pending.cannot_block(why),
                None => pending,
            },
        });
    }
    if points.is_empty() {
        let mut s = super::empty_summary(baseline);
        s.runs = stored.len();
        return Pending::unusable(
            s,
            delta,
            format!(
                "the baseline holds none of this sweep's {} points (sizes, dtypes, placements): record a baseline of \
                 the same sweep (`commgate baseline update --from`)",
                keys.len()
            ),
        );
    }
    // The family adjusts the points' comparisons with every other metric, then hands them back
    // here to be merged into the sweep's.
    let fallback = super::empty_summary(baseline);
    type Ref = (PointRef, Option<Work>, Option<Said>);
    let (refs, pendings): (Vec<Ref>, Vec<Pending>) =
        points.into_iter().map(|p| ((p.point, p.work, p.said), p.pending)).unzip();
    let merge_back = fallback.clone();
    Pending::parts(
        pendings,
        fallback,
        delta,
        Box::new(move |adjusted: Vec<Adjusted>| {
            let parts = refs.into_iter().zip(adjusted).map(|((point, work, said), a)| (point, work, said, a)).collect();
            merge(delta, merge_back, parts, summary)
        }),
    )
}

/// The index of the primary point: the largest size judged out of place (the bandwidth plateau,
/// where a run's figures are steadiest), else the largest.
fn primary(points: &[PointRef]) -> usize {
    let by_size = |only_out: bool| {
        points
            .iter()
            .enumerate()
            .filter(|(_, p)| !only_out || p.key.placement == "out_of_place")
            .max_by_key(|(i, p)| (p.key.size, std::cmp::Reverse(*i)))
            .map(|(i, _)| i)
    };
    by_size(true).or_else(|| by_size(false)).unwrap_or(0)
}

/// The points' comparisons, adjusted in one family, merged into the sweep's: each metric tagged
/// with its point and shown as bus bandwidth, the primary point's baseline summary and run
/// advice, the notes once each. A point whose summary time contradicts its judged iterations
/// ([`Said::disagree`]) is left open with the reason, and unless a point blocks, the sweep is
/// not judged: its reason heads it (`collect_more_evidence`), its points still listed.
pub(super) fn merge(
    delta: f64,
    fallback: BaselineSummary,
    parts: Vec<(PointRef, Option<Work>, Option<Said>, Adjusted)>,
    summary: SweepSummary,
) -> Adjusted {
    let refs: Vec<PointRef> = parts.iter().map(|(p, _, _, _)| p.clone()).collect();
    let at = primary(&refs);
    let unusable = parts.iter().find_map(|(_, _, _, a)| a.unusable.clone());
    // An unusable part empties the comparison; a contradiction keeps its points listed.
    let emptied = unusable.is_some();
    let mut metrics: Vec<MetricComparison> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut contradicted: Vec<String> = Vec::new();
    let mut hardware = String::new();
    let mut head: Option<(BaselineSummary, usize, Option<super::RunsNeeded>)> = None;
    for (i, (point, work, said, a)) in parts.into_iter().enumerate() {
        if i == at || head.is_none() {
            head = Some((a.baseline.clone(), a.current_runs, a.runs_needed));
        }
        if hardware.is_empty() {
            hardware = a.hardware.clone();
        }
        for n in a.notes.iter().map(|n| in_sweep_words(n)) {
            if !notes.contains(&n) {
                notes.push(n);
            }
        }
        for mut m in a.metrics {
            m.note = m.note.as_deref().map(in_sweep_words);
            m.primary = i == at;
            m.throughput = work.and_then(|w| busbw(w, &m));
            m.point = Some(point.clone());
            // A slowdown the iterations confirm blocks whatever the summary says; any other
            // state read from iterations their own summary contradicts is not a finding.
            let ratio = m.judged.ratio;
            if let Some(s) = said.filter(|s| s.disagree(ratio, delta)) {
                let why = s.sentence(&point.key, ratio);
                if m.judged.state != State::Regressed {
                    m.judged.state = State::Inconclusive;
                    m.note = Some(why.clone());
                }
                contradicted.push(why);
            }
            metrics.push(m);
        }
    }
    let blocks = metrics.iter().any(|m| m.judged.state == State::Regressed);
    let contradiction = (!contradicted.is_empty()).then(|| {
        let more = contradicted.len() - 1;
        let also = if more > 0 { format!(" (and {more} more point{} alike)", plural(more)) } else { String::new() };
        format!("{}{also}", contradicted.first().map_or("", String::as_str))
    });
    // A blocking point still blocks; the contradiction is then one more reason.
    let (unusable, contradiction) = match (unusable, contradiction) {
        (Some(u), c) => (Some(u), c),
        (None, Some(c)) if !blocks => (Some(c), None),
        (None, c) => (None, c),
    };
    notes.extend(contradiction);
    let (baseline, current_runs, runs_needed) = head.unwrap_or((fallback, 1, None));
    Adjusted {
        baseline,
        delta,
        metrics: if emptied { Vec::new() } else { metrics },
        unusable,
        hardware,
        cause: None,
        notes,
        current_runs,
        runs_needed,
        sweep: Some(summary),
    }
}

/// A point's median shown as bus bandwidth, from nccl-tests' own bytes and factor: the current
/// side from the current run's printed figures, the baseline side from the baseline runs' (a
/// baseline shown as 1.86 GB/s where it printed 1.88 was the current run's rounding).
fn busbw((work, base_work): Work, m: &MetricComparison) -> Option<Throughput> {
    let j = &m.judged;
    let mut t = Throughput::of_work(ThroughputKind::BusbwGbps, work, j.baseline, j.current, j.ratio, j.ci);
    if let Some(b) = base_work {
        t.baseline = b / j.baseline;
    }
    [t.baseline, t.current].iter().all(|v| v.is_finite() && *v > 0.0).then_some(t)
}

/// Per point, the median over the stored runs of its printed work (bus bandwidth × time), in one
/// pass over the runs' points.
fn stored_works<'a>(stored: &[&'a RunResult]) -> HashMap<&'a PointKey, f64> {
    let mut works: HashMap<&PointKey, Vec<f64>> = HashMap::new();
    for p in stored.iter().filter_map(|r| r.sweep.as_ref()).flat_map(|s| &s.points) {
        if let Some(w) = p.busbw_work() {
            works.entry(&p.key).or_default().push(w);
        }
    }
    works
        .into_iter()
        .filter_map(|(key, mut w)| {
            w.sort_by(f64::total_cmp);
            let n = w.len();
            match (w.get(n.saturating_sub(1) / 2), w.get(n / 2)) {
                (Some(&lo), Some(&hi)) => Some((key, (lo + hi) / 2.0)),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_core::result::sweep::Process;

    fn point(size: u64, last: Vec<u32>) -> SweepPoint {
        SweepPoint {
            key: PointKey {
                collective: "all_reduce".into(),
                dtype: "float".into(),
                redop: "sum".into(),
                size,
                placement: "out_of_place".into(),
            },
            count: size / 4,
            time_us: 10.0,
            alg_bw: 1.0,
            bus_bw: 2.0,
            samples_ms: vec![0.01],
            last,
        }
    }

    fn sweep(lasts: &[Vec<u32>]) -> SweepData {
        SweepData {
            program: "all_reduce_perf".into(),
            per_iteration: true,
            processes: (0..lasts[0].len()).map(|i| Process { host: format!("node-{i}"), device: 0 }).collect(),
            points: lasts.iter().enumerate().map(|(i, l)| point(1024 << i, l.clone())).collect(),
        }
    }

    #[test]
    fn a_process_last_far_more_often_than_chance_is_named() {
        // 8 processes, 8 sizes of 50 iterations: process 5 slowest in 30 of each.
        let lasts: Vec<Vec<u32>> = (0..8).map(|_| vec![3, 3, 3, 3, 2, 30, 3, 3]).collect();
        let s = slowest_process(&sweep(&lasts)).expect("named");
        assert_eq!((s.process, s.last, s.iterations), (5, 240, 400));
        assert_eq!(s.host.as_deref(), Some("node-5"));
        assert!(s
            .sentence()
            .starts_with("process 5 (node-5, GPU 0) was the slowest in 240 of 400 iterations (60 %; 12 %"));
        // Evenly spread: nobody is named.
        let even: Vec<Vec<u32>> = (0..8).map(|i| (0..8).map(|p| if p == i { 8 } else { 6 }).collect()).collect();
        assert_eq!(slowest_process(&sweep(&even)), None);
        // Two processes: 60 % is within what chance and a fair share allow; 80 % is not.
        assert_eq!(slowest_process(&sweep(&vec![vec![30, 20]; 8])), None);
        assert_eq!(slowest_process(&sweep(&vec![vec![10, 40]; 8])).map(|s| s.process), Some(1));
        // One process: nothing to compare.
        assert_eq!(slowest_process(&sweep(&vec![vec![]; 2])), None);
    }

    #[test]
    fn the_ceiling_is_the_best_stored_median_on_this_hardware_and_the_plateau_the_best_size() {
        let mut run = commgate_testkit::results::run(&[1.0]);
        run.rows.clear();
        run.sweep = Some(sweep(&[vec![], vec![]]));
        let mut faster = run.clone();
        for p in &mut faster.sweep.as_mut().expect("sweep").points {
            p.samples_ms = vec![0.005];
        }
        let mut elsewhere = faster.clone();
        elsewhere.hardware.fingerprint = "other".into();
        for p in &mut elsewhere.sweep.as_mut().expect("sweep").points {
            p.samples_ms = vec![0.001];
        }
        let keys: Vec<PointKey> = run.sweep.as_ref().expect("sweep").points.iter().map(|p| p.key.clone()).collect();
        let fp = run.hardware.fingerprint.clone();
        let c = ceilings(&keys, &[&run, &faster, &elsewhere], &[], &fp);
        // work = 2 GB/s × 10 µs; at 0.005 ms that is 4 GB/s; the other machine's 20 GB/s is not this runner's.
        assert!(c.iter().all(|(ceiling, plateau)| *ceiling == Some(4.0) && *plateau == Some(4.0)), "{c:?}");
    }

    /// The summary's change against the judged one and the iterations' mean: a contradiction
    /// only when neither reading of the iterations gives what the summary says.
    #[test]
    fn a_summary_time_that_contradicts_the_iterations_disagrees() {
        let d = 0.03;
        let said = |summary, iterations_mean| Said { summary, iterations_mean };
        assert!(said(1.093, 1.001).disagree(1.001, d), "the summary +9.3 %, the iterations +0.1 %");
        assert!(said(0.90, 1.05).disagree(1.05, d), "opposite ways");
        assert!(said(1.0, 1.10).disagree(1.10, d), "the iterations alone slower");
        assert!(!said(1.093, 1.09).disagree(1.001, d), "a few slow iterations: their mean sides with the summary");
        assert!(!said(1.02, 1.04).disagree(1.04, d), "within δ of each other");
        assert!(!said(1.10, 1.25).disagree(1.25, d), "both slower beyond δ");
        assert!(!said(1.093, 1.0).disagree(f64::NAN, d), "nothing judged");
        let key = point(1024, vec![]).key;
        assert_eq!(
            said(1.093, 1.001).sentence(&key, 1.001),
            "1.0 KiB out-of-place: the summary time says +9.3 % but the per-iteration times say +0.1 %: the file's \
             figures disagree (nccl-tests times both over the same iterations), so this point cannot be judged; rerun \
             the sweep"
        );
        // From the runs: the current point's summary 10 % up, its iterations as before.
        let mut base = commgate_testkit::results::run(&[1.0]);
        base.rows.clear();
        let mut s = sweep(&[vec![]]);
        s.points[0].samples_ms = vec![0.009, 0.011];
        base.sweep = Some(s);
        let mut now = base.clone();
        now.sweep.as_mut().expect("sweep").points[0].time_us = 11.0;
        let said = Said::of(&[&base], std::slice::from_ref(&now), &key).expect("said");
        assert!((said.summary - 1.1).abs() < 1e-12 && (said.iterations_mean - 1.0).abs() < 1e-12, "{said:?}");
        // Without per-iteration times the summary is what is judged: nothing to disagree.
        now.sweep.as_mut().expect("sweep").points[0].samples_ms = vec![0.011];
        assert_eq!(Said::of(&[&base], &[now], &key), None);
    }

    #[test]
    fn the_primary_point_is_the_largest_out_of_place() {
        let p = |size, placement: &str| PointRef {
            key: PointKey { placement: placement.into(), ..point(size, vec![]).key },
            ceiling_gbps: None,
            plateau_gbps: None,
        };
        assert_eq!(primary(&[p(8, "out_of_place"), p(64, "in_place"), p(32, "out_of_place")]), 2);
        assert_eq!(primary(&[p(8, "in_place"), p(64, "in_place")]), 1);
    }
}
