//! The estimates behind each compared metric: Harrell–Davis statistics of the rows, the
//! current run's block bootstrap, the history regime's prediction interval and the pooled
//! regime's direct tests. Pure functions on sorted samples; `mod.rs` turns an [`Estimate`] into a
//! state and the states into a verdict.

use std::collections::HashMap;

use super::{CompareOptions, Method, Statistic};
use crate::result::{RunResult, Schedule};
use crate::stats::bootstrap::{percentile_interval, SortedResampler};
use crate::stats::interval::{mean_sd, prediction_interval, t_sf};
use crate::stats::mann_whitney::mann_whitney_u;
use crate::stats::quantile::HdWeights;
use crate::stats::rng::Rng;
use crate::stats::serial::{dependent_block_length, lag1_autocorrelation, rank_lag1_autocorrelation};
use crate::stats::tail::exceedance_test;

/// The compared statistics, primary first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Metric {
    Quantile { row: Schedule, p: f64 },
    Exposed,
}

/// The step's own rows first, then the two phases alone, so a slower step can be traced to the
/// phase that moved (`cause.rs`). The two phase medians also carry the bus bandwidth and the
/// matmul rate as displayed transforms of the same test (`throughput.rs`).
pub(super) const METRICS: [Metric; 7] = [
    Metric::Quantile { row: Schedule::Overlap, p: 0.5 },
    Metric::Quantile { row: Schedule::Overlap, p: 0.95 },
    Metric::Quantile { row: Schedule::Serial, p: 0.5 },
    Metric::Quantile { row: Schedule::Serial, p: 0.95 },
    Metric::Exposed,
    Metric::Quantile { row: Schedule::CommOnly, p: 0.5 },
    Metric::Quantile { row: Schedule::ComputeOnly, p: 0.5 },
];

/// The rows the metrics read, in [`RunRows`]' order.
const ROWS: [Schedule; 4] = [Schedule::Overlap, Schedule::Serial, Schedule::ComputeOnly, Schedule::CommOnly];

impl Metric {
    pub(super) fn row(self) -> Schedule {
        match self {
            Metric::Quantile { row, .. } => row,
            Metric::Exposed => Schedule::Overlap,
        }
    }

    pub(super) fn statistic(self) -> Statistic {
        match self {
            Metric::Quantile { p: 0.5, .. } => Statistic::Median,
            Metric::Quantile { .. } => Statistic::P95,
            Metric::Exposed => Statistic::ExposedCommMs,
        }
    }

    pub(super) fn is_tail(self) -> bool {
        matches!(self, Metric::Quantile { p, .. } if p > 0.5)
    }

    pub(super) fn label(self) -> String {
        match self {
            Metric::Exposed => "exposed comm".to_string(),
            _ => format!("{} {}", self.row(), if self.is_tail() { "P95" } else { "median" }),
        }
    }
}

/// Sorted samples of one row of one run.
fn sorted_row(run: &RunResult, row: Schedule) -> Vec<f64> {
    let mut v = run.row(row).map(|r| r.samples_ms.clone()).unwrap_or_default();
    v.sort_by(f64::total_cmp);
    v
}

/// Harrell–Davis weights, computed once per (n, p).
#[derive(Default)]
pub(super) struct Weights(HashMap<(usize, u64), HdWeights>);

impl Weights {
    pub(super) fn quantile(&mut self, sorted: &[f64], p: f64) -> f64 {
        if sorted.is_empty() {
            return f64::NAN;
        }
        self.0.entry((sorted.len(), p.to_bits())).or_insert_with(|| HdWeights::new(sorted.len(), p)).apply(sorted)
    }
}

/// A run reduced to the rows the metrics use, each sorted.
#[derive(Default)]
pub(super) struct RunRows {
    pub(super) overlap: Vec<f64>,
    serial: Vec<f64>,
    compute: Vec<f64>,
    comm: Vec<f64>,
}

impl RunRows {
    pub(super) fn of(run: &RunResult) -> Self {
        RunRows {
            overlap: sorted_row(run, Schedule::Overlap),
            serial: sorted_row(run, Schedule::Serial),
            compute: sorted_row(run, Schedule::ComputeOnly),
            comm: sorted_row(run, Schedule::CommOnly),
        }
    }

    fn row(&self, row: Schedule) -> &[f64] {
        match row {
            Schedule::Serial => &self.serial,
            Schedule::ComputeOnly => &self.compute,
            Schedule::CommOnly => &self.comm,
            Schedule::Overlap => &self.overlap,
        }
    }

    fn row_mut(&mut self, row: Schedule) -> &mut Vec<f64> {
        match row {
            Schedule::Serial => &mut self.serial,
            Schedule::ComputeOnly => &mut self.compute,
            Schedule::CommOnly => &mut self.comm,
            Schedule::Overlap => &mut self.overlap,
        }
    }

    fn value(&self, m: Metric, w: &mut Weights) -> f64 {
        match m {
            Metric::Quantile { row, p } => w.quantile(self.row(row), p),
            Metric::Exposed => w.quantile(&self.overlap, 0.5) - w.quantile(&self.compute, 0.5),
        }
    }

    fn n(&self, m: Metric) -> usize {
        match m {
            Metric::Quantile { row, .. } => self.row(row).len(),
            Metric::Exposed => self.overlap.len().min(self.compute.len()),
        }
    }
}

/// Bootstrap replicates of every metric on one run (moving blocks over the time order of the
/// samples, which `samples_ms` keeps), computed from one shared set of resamples per row.
pub(super) fn bootstrap_run(run: &RunResult, resamples: usize, rng: &mut Rng, w: &mut Weights) -> Vec<Vec<f64>> {
    let mut resamplers: Vec<Resampler> = ROWS.iter().map(|&s| Resampler::of(run, s)).collect();
    let mut out = vec![Vec::with_capacity(resamples); METRICS.len()];
    let mut rows = RunRows::default();
    for _ in 0..resamples {
        for (r, &s) in resamplers.iter_mut().zip(&ROWS) {
            r.draw(rng, rows.row_mut(s));
        }
        for (i, m) in METRICS.iter().enumerate() {
            out[i].push(rows.value(*m, w));
        }
    }
    out
}

/// Draws sorted moving-block resamples of one row (block ≈ n^(1/3), longer for autocorrelated
/// steps: [`dependent_block_length`]).
struct Resampler {
    inner: SortedResampler,
    block: usize,
}

impl Resampler {
    fn new(samples: &[f64]) -> Self {
        Resampler { inner: SortedResampler::new(samples), block: dependent_block_length(samples) }
    }

    fn of(run: &RunResult, schedule: Schedule) -> Self {
        Resampler::new(run.row(schedule).map_or(&[][..], |r| r.samples_ms.as_slice()))
    }

    fn draw(&mut self, rng: &mut Rng, out: &mut Vec<f64>) {
        if self.inner.is_empty() {
            out.clear();
        } else {
            self.inner.resample_sorted(self.block, rng, out);
        }
    }
}

/// A metric's point estimate and uncertainty, before states are assigned (the benchmark's
/// metrics and, in `traces`, each collective's per-step quantities).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Estimate {
    pub(super) baseline: f64,
    pub(super) current: f64,
    pub(super) ratio: f64,
    pub(super) ci: [f64; 2],
    pub(super) p_regressed: f64,
    pub(super) p_improved: f64,
    pub(super) n_baseline: usize,
    pub(super) n_current: usize,
    pub(super) method: Method,
    pub(super) note: Option<String>,
}

impl Estimate {
    /// Nothing to judge: no ratio or interval (NaN), p-values of 1 (never significant), and why.
    pub(super) fn undefined(
        baseline: f64,
        current: f64,
        n_baseline: usize,
        n_current: usize,
        method: Method,
        note: Option<String>,
    ) -> Estimate {
        Estimate {
            baseline,
            current,
            ratio: f64::NAN,
            ci: [f64::NAN, f64::NAN],
            p_regressed: 1.0,
            p_improved: 1.0,
            n_baseline,
            n_current,
            method,
            note,
        }
    }
}

/// Judges the current run against the spread of the baseline runs' values.
pub(super) fn history(
    m: Metric,
    base: &[RunRows],
    cur: &RunRows,
    boot: &[f64],
    opts: &CompareOptions,
    w: &mut Weights,
) -> Estimate {
    let values: Vec<f64> = base.iter().map(|r| r.value(m, w)).collect();
    let current = cur.value(m, w);
    let k = values.len() as f64;
    let n_baseline = base.iter().map(|r| r.n(m)).min().unwrap_or(0);
    let n_current = cur.n(m);
    let log_scale = m != Metric::Exposed;
    let (center, scale, x, replicates): (f64, f64, f64, Vec<f64>) = if log_scale {
        if values.iter().chain([&current]).any(|v| *v <= 0.0) {
            return undefined(m, &values, current, n_baseline, n_current, Method::History, "a step time of 0 ms");
        }
        let logs: Vec<f64> = values.iter().map(|v| v.ln()).collect();
        let (mean, _) = mean_sd(&logs);
        (mean, 1.0, current.ln(), boot.iter().filter(|v| **v > 0.0).map(|v| v.ln()).collect())
    } else {
        // Exposed time is a small difference of two step times: its change is measured as a
        // share of the baseline step (overlap median), so that a 1.5 % slower step does not read
        // as "+9 % exposed" and block on noise.
        let (mean, _) = mean_sd(&values);
        let step = base.iter().map(|r| w.quantile(&r.overlap, 0.5)).sum::<f64>() / k;
        (mean, step, current, boot.to_vec())
    };
    let xs: Vec<f64> = if log_scale { values.iter().map(|v| v.ln()).collect() } else { values.clone() };
    let (_, se_current) = mean_sd(&replicates);
    let to_ratio = |v: f64| if log_scale { v.exp() } else { 1.0 + v / scale };
    let baseline = if log_scale { center.exp() } else { center };
    let Some(pi) = prediction_interval(&xs, opts.level).map(|pi| pi.with_sd_floor(se_current)) else {
        // A non-finite baseline value: nothing to judge against.
        return Estimate::undefined(baseline, current, n_baseline, n_current, Method::History, None);
    };
    let d = x - pi.center;
    let (p_regressed, p_improved) = one_sided(d, pi.se, |z| t_sf(pi.df, z));
    Estimate {
        baseline,
        current,
        ratio: to_ratio(d),
        ci: [to_ratio(d - pi.half_width), to_ratio(d + pi.half_width)],
        p_regressed,
        p_improved,
        n_baseline,
        n_current,
        method: Method::History,
        note: None,
    }
}

/// Lag-1 autocorrelation above which a run's steps come in episodes (a throttled clock, a noisy
/// neighbour) rather than as independent draws: one such run cannot confirm a regression.
const EPISODIC_AUTOCORRELATION: f64 = 0.35;

/// Rank lag-1 autocorrelation the same row must also exceed. On raw times two adjacent outliers
/// (a preempted rank) dominate both sums and alone read as ρ ≈ 0.4; their ranks barely move the
/// rank version, while a real episode (many consecutive slow steps) ranks high on both scales.
/// 0.15 rather than 0.35: the rank statistic only has to confirm that the order persists, and a
/// short episode in a 30-step run ranks lower than it reads raw (measured by
/// `benches/gate_quality.rs`: 0.35 let 1.3 % of slow-episode A/A runs at n = 30 block).
const EPISODIC_RANK_AUTOCORRELATION: f64 = 0.15;

/// The strongest lag-1 autocorrelation of the current run's judged rows, when it says the run
/// was episodic: a row is episodic when both its raw and its rank lag-1 autocorrelation are above
/// their thresholds. An episode in the phase rows would blame a phase as surely as one in the
/// step. The rank is computed only for rows whose raw value is above (the sort is O(n log n)).
pub(super) fn episodic(run: &RunResult) -> Option<f64> {
    ROWS.iter()
        .filter_map(|&s| run.row(s))
        .map(|r| (lag1_autocorrelation(&r.samples_ms), &r.samples_ms))
        .filter(|(rho, samples)| {
            *rho > EPISODIC_AUTOCORRELATION && rank_lag1_autocorrelation(samples) > EPISODIC_RANK_AUTOCORRELATION
        })
        .map(|(rho, _)| rho)
        .reduce(f64::max)
}

/// One-sided p-values of `d / se` in both directions, with `sf` the upper tail.
pub(super) fn one_sided(d: f64, se: f64, sf: impl Fn(f64) -> f64) -> (f64, f64) {
    if se > 0.0 && se.is_finite() {
        (sf(d / se), sf(-d / se))
    } else if d > 0.0 {
        (0.0, 1.0)
    } else if d < 0.0 {
        (1.0, 0.0)
    } else {
        (1.0, 1.0)
    }
}

fn undefined(
    m: Metric,
    values: &[f64],
    current: f64,
    n_baseline: usize,
    n_current: usize,
    method: Method,
    why: &str,
) -> Estimate {
    let baseline = if values.is_empty() { f64::NAN } else { values.iter().sum::<f64>() / values.len() as f64 };
    let note = format!("{} has no meaningful ratio ({why})", m.label());
    Estimate::undefined(baseline, current, n_baseline, n_current, method, Some(note))
}

/// Compares steps directly when the baseline has too few runs to know its run-to-run spread:
/// every metric on the pooled baseline steps against the current run's, with one shared
/// moving-block bootstrap of both sides (the baseline resampled within each run).
pub(super) fn pooled(
    runs: &[&RunResult],
    current: &RunResult,
    cur: &RunRows,
    opts: &CompareOptions,
    rng: &mut Rng,
    w: &mut Weights,
) -> Vec<Estimate> {
    let schedules = ROWS;
    let mut base_resamplers: Vec<Vec<Resampler>> =
        schedules.iter().map(|&s| runs.iter().map(|r| Resampler::of(r, s)).collect()).collect();
    let pooled_row = |i: usize| -> Vec<f64> {
        let mut acc = Vec::new();
        let mut tmp = Vec::new();
        for r in &base_resamplers[i] {
            merge_into(&mut acc, r.inner.sorted(), &mut tmp);
        }
        acc
    };
    let base = RunRows { overlap: pooled_row(0), serial: pooled_row(1), compute: pooled_row(2), comm: pooled_row(3) };
    let mut cur_resamplers: Vec<Resampler> = schedules.iter().map(|&s| Resampler::of(current, s)).collect();
    let step = w.quantile(&base.overlap, 0.5);
    let log_scale = |m: Metric| m != Metric::Exposed;
    let relative = |m: Metric, b: f64, c: f64| if log_scale(m) { (c / b).ln() } else { (c - b) / step };
    let mut reps: Vec<Vec<f64>> = vec![Vec::with_capacity(opts.resamples); METRICS.len()];
    let (mut b, mut c) = (RunRows::default(), RunRows::default());
    let (mut scratch, mut merged) = (Vec::new(), Vec::new());
    for _ in 0..opts.resamples {
        for (i, resamplers) in base_resamplers.iter_mut().enumerate() {
            let acc = b.row_mut(schedules[i]);
            acc.clear();
            for r in resamplers.iter_mut() {
                r.draw(rng, &mut scratch);
                merge_into(acc, &scratch, &mut merged);
            }
        }
        for (i, r) in cur_resamplers.iter_mut().enumerate() {
            r.draw(rng, c.row_mut(schedules[i]));
        }
        for (k, &m) in METRICS.iter().enumerate() {
            let rep = relative(m, b.value(m, w), c.value(m, w));
            if rep.is_finite() {
                reps[k].push(rep);
            }
        }
    }
    METRICS
        .iter()
        .zip(reps.iter_mut())
        .map(|(&m, reps)| {
            let (baseline, current_value) = (base.value(m, w), cur.value(m, w));
            let (n_baseline, n_current) = (base.n(m), cur.n(m));
            if log_scale(m) && (baseline <= 0.0 || current_value <= 0.0) {
                return undefined(
                    m,
                    &[baseline],
                    current_value,
                    n_baseline,
                    n_current,
                    Method::Pooled,
                    "a step time of 0 ms",
                );
            }
            let point = relative(m, baseline, current_value);
            let (lo, hi) = if reps.is_empty() { (point, point) } else { percentile_interval(reps, opts.level) };
            let to_ratio = |v: f64| if log_scale(m) { v.exp() } else { 1.0 + v };
            let (p_regressed, p_improved) = match m {
                Metric::Quantile { row, p: 0.5 } => {
                    let mw = mann_whitney_u(cur.row(row), base.row(row));
                    (mw.p_greater, mw.p_less)
                }
                Metric::Quantile { row, .. } => (
                    exceedance_test(base.row(row), cur.row(row), 0.90).p_greater,
                    exceedance_test(cur.row(row), base.row(row), 0.90).p_greater,
                ),
                Metric::Exposed => {
                    let n = reps.len() as f64;
                    let below = reps.iter().filter(|r| **r <= 0.0).count() as f64;
                    let above = reps.iter().filter(|r| **r >= 0.0).count() as f64;
                    ((below + 1.0) / (n + 1.0), (above + 1.0) / (n + 1.0))
                }
            };
            Estimate {
                baseline,
                current: current_value,
                ratio: to_ratio(point),
                ci: [to_ratio(lo), to_ratio(hi)],
                p_regressed,
                p_improved,
                n_baseline,
                n_current,
                method: Method::Pooled,
                note: None,
            }
        })
        .collect()
}

/// Merges the sorted `add` into the sorted `acc` in linear time (`tmp` is scratch space).
fn merge_into(acc: &mut Vec<f64>, add: &[f64], tmp: &mut Vec<f64>) {
    if acc.is_empty() {
        acc.extend_from_slice(add);
        return;
    }
    tmp.clear();
    tmp.reserve(acc.len() + add.len());
    let (mut i, mut j) = (0, 0);
    while i < acc.len() && j < add.len() {
        if acc[i] <= add[j] {
            tmp.push(acc[i]);
            i += 1;
        } else {
            tmp.push(add[j]);
            j += 1;
        }
    }
    tmp.extend_from_slice(&acc[i..]);
    tmp.extend_from_slice(&add[j..]);
    std::mem::swap(acc, tmp);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::fixtures;

    fn quiet(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| (0.02 * rng.normal()).exp()).collect()
    }

    #[test]
    fn adjacent_outliers_are_no_episode_but_a_slow_stretch_is() {
        let mut steps = quiet(100, 11);
        assert_eq!(episodic(&fixtures::run(&steps)), None);
        // A preempted rank: two adjacent steps 2–3× slower. Raw ρ is above 0.35, rank ρ is not.
        steps[40] = 2.8;
        steps[41] = 2.9;
        assert!(lag1_autocorrelation(&steps) > EPISODIC_AUTOCORRELATION);
        assert_eq!(episodic(&fixtures::run(&steps)), None);
        // Twelve consecutive steps 20 % slower: an episode on both scales.
        steps.iter_mut().skip(60).take(12).for_each(|v| *v *= 1.2);
        let rho = episodic(&fixtures::run(&steps)).expect("episodic");
        assert!(rho > EPISODIC_AUTOCORRELATION, "{rho}");
    }
}
