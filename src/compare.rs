//! `commgate compare`: is the current run slower than its baseline, faster, the same, or is the
//! evidence not enough? One place computes the per-metric states and the comparison verdict
//! (`docs/gate.md`); renderers only display them.
//!
//! Two regimes, chosen by how much history the baseline holds:
//! - **history** (≥ 3 baseline runs): steps within a run are not independent of the run (clocks,
//!   NCCL's algorithm choice and placement move a whole run), so the unit of evidence is the run.
//!   Each baseline run's Harrell–Davis statistic gives one value; the current run's statistic is
//!   judged against their spread with a Student-t prediction interval on the log scale
//!   (Hahn & Meeker, *Statistical Intervals*, §4), the spread floored at the current run's own
//!   block-bootstrap standard error so a lucky, tight history cannot make noise significant.
//! - **pooled** (1–2 runs: the run-to-run spread is unknown): steps are compared directly —
//!   one-sided Mann–Whitney U for medians, an exact exceedance test over the baseline's P90 for
//!   P95s, and seeded moving-block bootstrap intervals (Künsch 1989) that respect autocorrelated
//!   slow episodes.
//!
//! A metric is `regressed` only when its Holm-adjusted p-value (family α = 0.01) is significant
//! *and* its whole 95 % interval lies above 1 + δ, with δ = max(min_effect, 3 × the robust
//! spread of the baseline runs' medians): a change must be both real and large enough to act on.
//!
//! Two guards keep the gate honest on real GPU timings (measured by `benches/gate_quality.rs`):
//! - exposed communication is a small difference of two step times, so its change is reported
//!   as a share of the baseline step (overlap median), not of itself: a 1.5 % slower step would
//!   otherwise read as "+9 % exposed" and block;
//! - a current run whose steps come in episodes (lag-1 autocorrelation above 0.35: a throttled
//!   clock, a noisy neighbour) cannot confirm a regression on its own: such a metric is
//!   `inconclusive` and the verdict asks for another run. Block lengths also grow with the
//!   autocorrelation ([`dependent_block_length`]).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::baseline::Baseline;
use crate::hotspots::Decision;
use crate::result::{RunResult, Schedule};
use crate::stats::bootstrap::{percentile_interval, SortedResampler};
use crate::stats::holm::holm_adjust;
use crate::stats::interval::{mean_sd, robust_spread, t_quantile, t_sf};
use crate::stats::mann_whitney::mann_whitney_u;
use crate::stats::quantile::HdWeights;
use crate::stats::rng::Rng;
use crate::stats::serial::{dependent_block_length, lag1_autocorrelation};
use crate::stats::tail::exceedance_test;
use crate::units::{change, interval, pct};

pub const SCHEMA_VERSION: u32 = 1;

/// Settings of the comparison (resolved by `config`).
#[derive(Debug, Clone, PartialEq)]
pub struct CompareOptions {
    /// The smallest relative change worth acting on, before the baseline's own spread.
    pub min_effect: f64,
    /// Family-wise error rate across the compared metrics (Holm).
    pub alpha: f64,
    /// Confidence level of the reported intervals.
    pub level: f64,
    pub resamples: usize,
    pub seed: u64,
    /// Fewer current samples than this → not enough evidence.
    pub min_samples: usize,
    /// A P95 may block only with at least this many samples on each side.
    pub p95_min_samples: usize,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            min_effect: 0.03,
            alpha: 0.01,
            level: 0.95,
            resamples: 1000,
            seed: 0x00C0_FFEE,
            min_samples: 30,
            p95_min_samples: 100,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Regressed,
    Improved,
    Unchanged,
    Inconclusive,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Regressed => "regressed",
            State::Improved => "improved",
            State::Unchanged => "unchanged",
            State::Inconclusive => "inconclusive",
        }
    }
}

/// One compared statistic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricComparison {
    pub row: String,
    pub statistic: String,
    /// Baseline value (ms): the geometric mean of the runs' values (history) or the pooled one.
    pub baseline: f64,
    pub current: f64,
    pub ratio: f64,
    pub ci: [f64; 2],
    /// One-sided p-value in the direction of the point estimate, before adjustment.
    pub p_value: f64,
    /// After Holm's correction across the compared metrics.
    pub p_adjusted: f64,
    pub state: State,
    pub n_baseline: usize,
    pub n_current: usize,
    /// `history` or `pooled`.
    pub method: String,
    /// Whether this metric may block a merge (P95 needs enough samples).
    pub can_block: bool,
    /// The primary metric (overlap median) decides between accept and collect_more_evidence.
    pub primary: bool,
    /// Why the state is what it is, when that is not obvious from the numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineSummary {
    pub path: String,
    pub runs: usize,
    pub fingerprint_match: bool,
    /// Robust spread of the baseline runs' log overlap medians (≥ 3 runs), relative.
    pub spread: Option<f64>,
}

/// The result of `commgate compare` (formats.md, "Comparison JSON").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub schema_version: u32,
    pub verdict: Decision,
    pub regression: bool,
    pub baseline: BaselineSummary,
    pub delta: f64,
    pub metrics: Vec<MetricComparison>,
    pub reasons: Vec<String>,
}

/// The compared statistics, primary first.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Metric {
    Quantile { row: Schedule, p: f64 },
    Exposed,
}

const METRICS: [Metric; 5] = [
    Metric::Quantile { row: Schedule::Overlap, p: 0.5 },
    Metric::Quantile { row: Schedule::Overlap, p: 0.95 },
    Metric::Quantile { row: Schedule::Serial, p: 0.5 },
    Metric::Quantile { row: Schedule::Serial, p: 0.95 },
    Metric::Exposed,
];

impl Metric {
    fn row_name(self) -> &'static str {
        match self {
            Metric::Quantile { row, .. } => row.as_str(),
            Metric::Exposed => "overlap",
        }
    }

    fn statistic_name(self) -> &'static str {
        match self {
            Metric::Quantile { p: 0.5, .. } => "median",
            Metric::Quantile { .. } => "p95",
            Metric::Exposed => "exposed_comm_ms",
        }
    }

    fn is_tail(self) -> bool {
        matches!(self, Metric::Quantile { p, .. } if p > 0.5)
    }

    fn label(self) -> String {
        match self {
            Metric::Exposed => "exposed comm".to_string(),
            _ => format!("{} {}", self.row_name(), if self.is_tail() { "P95" } else { "median" }),
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
struct Weights(HashMap<(usize, u64), HdWeights>);

impl Weights {
    fn quantile(&mut self, sorted: &[f64], p: f64) -> f64 {
        if sorted.is_empty() {
            return f64::NAN;
        }
        self.0.entry((sorted.len(), p.to_bits())).or_insert_with(|| HdWeights::new(sorted.len(), p)).apply(sorted)
    }
}

/// A run reduced to the rows the metrics use, each sorted.
struct RunRows {
    overlap: Vec<f64>,
    serial: Vec<f64>,
    compute: Vec<f64>,
}

impl RunRows {
    fn of(run: &RunResult) -> Self {
        RunRows {
            overlap: sorted_row(run, Schedule::Overlap),
            serial: sorted_row(run, Schedule::Serial),
            compute: sorted_row(run, Schedule::ComputeOnly),
        }
    }

    fn row(&self, row: Schedule) -> &[f64] {
        match row {
            Schedule::Serial => &self.serial,
            Schedule::ComputeOnly => &self.compute,
            _ => &self.overlap,
        }
    }

    fn row_mut(&mut self, row: Schedule) -> &mut Vec<f64> {
        match row {
            Schedule::Serial => &mut self.serial,
            Schedule::ComputeOnly => &mut self.compute,
            _ => &mut self.overlap,
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
fn bootstrap_run(run: &RunResult, resamples: usize, rng: &mut Rng, w: &mut Weights) -> Vec<Vec<f64>> {
    let mut overlap = Resampler::of(run, Schedule::Overlap);
    let mut serial = Resampler::of(run, Schedule::Serial);
    let mut compute = Resampler::of(run, Schedule::ComputeOnly);
    let mut out = vec![Vec::with_capacity(resamples); METRICS.len()];
    let mut rows = RunRows { overlap: Vec::new(), serial: Vec::new(), compute: Vec::new() };
    for _ in 0..resamples {
        overlap.draw(rng, &mut rows.overlap);
        serial.draw(rng, &mut rows.serial);
        compute.draw(rng, &mut rows.compute);
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

/// Compares `current` with `baseline`.
pub fn compare(baseline: &Baseline, current: &RunResult, opts: &CompareOptions) -> Comparison {
    let fingerprint_match = baseline.fingerprint_match(current);
    let runs: Vec<&RunResult> = baseline.runs.iter().filter(|r| r.is_usable()).collect();
    let mut w = Weights::default();
    let base_rows: Vec<RunRows> = runs.iter().map(|r| RunRows::of(r)).collect();
    let spread = (base_rows.len() >= 3).then(|| {
        let logs: Vec<f64> = base_rows.iter().map(|r| w.quantile(&r.overlap, 0.5).ln()).collect();
        robust_spread(&logs)
    });
    let delta = opts.min_effect.max(3.0 * spread.unwrap_or(0.0));
    let summary =
        BaselineSummary { path: baseline.path.display().to_string(), runs: runs.len(), fingerprint_match, spread };
    if let Some(reason) = unusable(current, runs.len()) {
        return Comparison {
            schema_version: SCHEMA_VERSION,
            verdict: Decision::CollectMoreEvidence,
            regression: false,
            baseline: summary,
            delta,
            metrics: Vec::new(),
            reasons: vec![reason],
        };
    }
    let cur_rows = RunRows::of(current);
    let mut rng = Rng::new(opts.seed);
    let estimates: Vec<Estimate> = if base_rows.len() >= 3 {
        let boot = bootstrap_run(current, opts.resamples, &mut rng, &mut w);
        METRICS.iter().enumerate().map(|(i, &m)| history(m, &base_rows, &cur_rows, &boot[i], opts, &mut w)).collect()
    } else {
        pooled(&runs, current, &cur_rows, opts, &mut rng, &mut w)
    };
    let episodes = episodic(current);
    let p_reg = holm_adjust(&estimates.iter().map(|e| e.p_regressed).collect::<Vec<_>>());
    let p_imp = holm_adjust(&estimates.iter().map(|e| e.p_improved).collect::<Vec<_>>());
    let metrics: Vec<MetricComparison> = METRICS
        .iter()
        .zip(&estimates)
        .enumerate()
        .map(|(i, (&m, e))| judge(m, e, p_reg[i], p_imp[i], delta, episodes, opts))
        .collect();
    let (verdict, regression, reasons) = decide(&metrics, fingerprint_match, current, delta, opts);
    Comparison { schema_version: SCHEMA_VERSION, verdict, regression, baseline: summary, delta, metrics, reasons }
}

/// Why a comparison cannot start, if it cannot.
fn unusable(current: &RunResult, baseline_runs: usize) -> Option<String> {
    if let Some(f) = &current.failure {
        return Some(format!("the current run failed ({}: {}); fix it and run the benchmark again", f.kind, f.message));
    }
    if !current.is_usable() {
        return Some("the current run is a dry run with no samples; run the benchmark for real".to_string());
    }
    (baseline_runs == 0).then(|| "the baseline holds no finished run to compare with".to_string())
}

/// A metric's point estimate and uncertainty, before states are assigned.
struct Estimate {
    baseline: f64,
    current: f64,
    ratio: f64,
    ci: [f64; 2],
    p_regressed: f64,
    p_improved: f64,
    n_baseline: usize,
    n_current: usize,
    method: &'static str,
    note: Option<String>,
}

/// Judges the current run against the spread of the baseline runs' values.
fn history(
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
            return undefined(m, &values, current, n_baseline, n_current, "history", "a step time of 0 ms");
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
    let (_, sd_runs) = mean_sd(&xs);
    let (_, se_current) = mean_sd(&replicates);
    let sigma = sd_runs.max(se_current);
    let se = sigma * (1.0 + 1.0 / k).sqrt();
    let df = k - 1.0;
    let d = x - center;
    let t = t_quantile(df, (1.0 + opts.level) / 2.0);
    let to_ratio = |v: f64| if log_scale { v.exp() } else { 1.0 + v / scale };
    let (p_regressed, p_improved) = one_sided(d, se, |z| t_sf(df, z));
    Estimate {
        baseline: if log_scale { center.exp() } else { center },
        current,
        ratio: to_ratio(d),
        ci: [to_ratio(d - t * se), to_ratio(d + t * se)],
        p_regressed,
        p_improved,
        n_baseline,
        n_current,
        method: "history",
        note: None,
    }
}

/// Lag-1 autocorrelation above which a run's steps come in episodes (a throttled clock, a noisy
/// neighbour) rather than as independent draws: one such run cannot confirm a regression.
const EPISODIC_AUTOCORRELATION: f64 = 0.35;

/// The strongest lag-1 autocorrelation of the current run's overlap and serial rows, when it
/// says the run was episodic.
fn episodic(run: &RunResult) -> Option<f64> {
    let rho = [Schedule::Overlap, Schedule::Serial]
        .iter()
        .filter_map(|&s| run.row(s))
        .map(|r| lag1_autocorrelation(&r.samples_ms))
        .fold(f64::NEG_INFINITY, f64::max);
    (rho > EPISODIC_AUTOCORRELATION).then_some(rho)
}

/// One-sided p-values of `d / se` in both directions, with `sf` the upper tail.
fn one_sided(d: f64, se: f64, sf: impl Fn(f64) -> f64) -> (f64, f64) {
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
    method: &'static str,
    why: &str,
) -> Estimate {
    let baseline = if values.is_empty() { f64::NAN } else { values.iter().sum::<f64>() / values.len() as f64 };
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
        note: Some(format!("{} has no meaningful ratio ({why})", m.label())),
    }
}

/// Compares steps directly when the baseline has too few runs to know its run-to-run spread:
/// every metric on the pooled baseline steps against the current run's, with one shared
/// moving-block bootstrap of both sides (the baseline resampled within each run).
fn pooled(
    runs: &[&RunResult],
    current: &RunResult,
    cur: &RunRows,
    opts: &CompareOptions,
    rng: &mut Rng,
    w: &mut Weights,
) -> Vec<Estimate> {
    let schedules = [Schedule::Overlap, Schedule::Serial, Schedule::ComputeOnly];
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
    let base = RunRows { overlap: pooled_row(0), serial: pooled_row(1), compute: pooled_row(2) };
    let mut cur_resamplers: Vec<Resampler> = schedules.iter().map(|&s| Resampler::of(current, s)).collect();
    let step = w.quantile(&base.overlap, 0.5);
    let log_scale = |m: Metric| m != Metric::Exposed;
    let relative = |m: Metric, b: f64, c: f64| if log_scale(m) { (c / b).ln() } else { (c - b) / step };
    let mut reps: Vec<Vec<f64>> = vec![Vec::with_capacity(opts.resamples); METRICS.len()];
    let mut b = RunRows { overlap: Vec::new(), serial: Vec::new(), compute: Vec::new() };
    let mut c = RunRows { overlap: Vec::new(), serial: Vec::new(), compute: Vec::new() };
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
                    "pooled",
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
                method: "pooled",
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

/// Assigns a state from the adjusted p-values and the interval (gate.md, "four states").
fn judge(
    m: Metric,
    e: &Estimate,
    p_reg: f64,
    p_imp: f64,
    delta: f64,
    episodes: Option<f64>,
    opts: &CompareOptions,
) -> MetricComparison {
    let can_block = !m.is_tail() || e.n_baseline.min(e.n_current) >= opts.p95_min_samples;
    let [lo, hi] = e.ci;
    let mut note = e.note.clone();
    let state = if !lo.is_finite() || !hi.is_finite() {
        State::Inconclusive
    } else if p_reg <= opts.alpha && lo > 1.0 + delta {
        if let Some(rho) = episodes {
            note = Some(format!(
                "looks regressed, but the current run has slow episodes (lag-1 autocorrelation {rho:.2}): \
                 one run of it is not evidence of a regression; re-run"
            ));
            State::Inconclusive
        } else if can_block {
            State::Regressed
        } else {
            note = Some(format!(
                "{} looks regressed, but a P95 may block only with ≥ {} samples per side",
                m.label(),
                opts.p95_min_samples
            ));
            State::Inconclusive
        }
    } else if p_imp <= opts.alpha && hi < 1.0 - delta {
        State::Improved
    } else if lo >= 1.0 - delta && hi <= 1.0 + delta {
        State::Unchanged
    } else {
        State::Inconclusive
    };
    let up = e.ratio >= 1.0;
    MetricComparison {
        row: m.row_name().to_string(),
        statistic: m.statistic_name().to_string(),
        baseline: e.baseline,
        current: e.current,
        ratio: e.ratio,
        ci: e.ci,
        p_value: if up { e.p_regressed } else { e.p_improved },
        p_adjusted: if up { p_reg } else { p_imp },
        state,
        n_baseline: e.n_baseline,
        n_current: e.n_current,
        method: e.method.to_string(),
        can_block,
        primary: m == METRICS[0],
        note,
    }
}

/// The comparison's verdict (gate.md, "Verdict from a comparison").
fn decide(
    metrics: &[MetricComparison],
    fingerprint_match: bool,
    current: &RunResult,
    delta: f64,
    opts: &CompareOptions,
) -> (Decision, bool, Vec<String>) {
    let mut reasons = Vec::new();
    let regressed: Vec<&MetricComparison> = metrics.iter().filter(|m| m.state == State::Regressed).collect();
    for m in &regressed {
        reasons.push(format!("{}, above the {} floor", describe(m), pct(delta)));
    }
    if !fingerprint_match {
        reasons.insert(
            0,
            format!(
                "the hardware differs from every baseline run (fingerprint {}): record a baseline on this hardware",
                current.hardware.fingerprint
            ),
        );
        return (Decision::CollectMoreEvidence, false, reasons);
    }
    if !regressed.is_empty() {
        return (Decision::Tune, true, reasons);
    }
    for m in metrics.iter().filter(|m| m.state == State::Improved) {
        reasons.push(format!("{}: improved beyond the {} floor", describe(m), pct(delta)));
    }
    let too_few = metrics.iter().map(|m| m.n_current).min().unwrap_or(0) < opts.min_samples;
    let primary_open = metrics.iter().any(|m| m.primary && m.state == State::Inconclusive);
    for m in metrics.iter().filter(|m| m.state == State::Inconclusive) {
        let why = m.note.clone().unwrap_or_else(|| format!("not enough evidence either way at δ = {}", pct(delta)));
        reasons.push(format!("{}: {why}", describe(m)));
    }
    let unchanged: Vec<String> =
        metrics.iter().filter(|m| m.state == State::Unchanged).map(MetricComparison::label).collect();
    if !unchanged.is_empty() {
        reasons.push(format!("{} unchanged within ±{}", unchanged.join(", "), pct(delta)));
    }
    if too_few {
        reasons.insert(
            0,
            format!(
                "only {} samples in the current run; run at least {} repeats ({} for P95 to count)",
                metrics.iter().map(|m| m.n_current).min().unwrap_or(0),
                opts.min_samples,
                opts.p95_min_samples
            ),
        );
        return (Decision::CollectMoreEvidence, false, reasons);
    }
    if primary_open {
        return (Decision::CollectMoreEvidence, false, reasons);
    }
    (Decision::Accept, false, reasons)
}

impl MetricComparison {
    /// "overlap median", "serial P95", "exposed comm".
    pub fn label(&self) -> String {
        match self.statistic.as_str() {
            "median" => format!("{} median", self.row),
            "p95" => format!("{} P95", self.row),
            "exposed_comm_ms" => "exposed comm".to_string(),
            other => format!("{} {other}", self.row),
        }
    }
}

/// "overlap median +9.7 % (95 % CI +7.1…+12.2 %)"; exposed communication reads in ms and as a
/// share of the step: "exposed comm +0.069 ms (+8.2 % of the step, 95 % CI +7.5…+8.9 %)".
pub fn describe(m: &MetricComparison) -> String {
    let name = m.label();
    if !m.ratio.is_finite() {
        return name;
    }
    if m.statistic == "exposed_comm_ms" {
        let delta_ms = m.current - m.baseline;
        let sign = if delta_ms < 0.0 { "−" } else { "+" };
        return format!(
            "{name} {sign}{:.3} ms ({} of the step, 95 % CI {})",
            delta_ms.abs(),
            change(m.ratio),
            interval(m.ci)
        );
    }
    format!("{name} {} (95 % CI {})", change(m.ratio), interval(m.ci))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::fixtures;
    use std::path::PathBuf;

    /// `n` log-normal step times around `level` ms with 2 % noise.
    fn samples(n: usize, level: f64, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| level * (0.02 * rng.normal()).exp()).collect()
    }

    fn baseline(runs: usize, n: usize) -> Baseline {
        let runs = (0..runs).map(|i| fixtures::run(&samples(n, 1.0, 100 + i as u64))).collect();
        Baseline { path: PathBuf::from("b.json"), runs }
    }

    fn state(c: &Comparison, row: &str, statistic: &str) -> State {
        c.metrics.iter().find(|m| m.row == row && m.statistic == statistic).map(|m| m.state).expect("metric")
    }

    #[test]
    fn same_distribution_is_accepted_and_unchanged() {
        let c = compare(&baseline(10, 200), &fixtures::run(&samples(200, 1.0, 7)), &CompareOptions::default());
        assert!(!c.regression, "{c:#?}");
        assert_eq!(c.verdict, Decision::Accept, "{:?}", c.reasons);
        assert_eq!(state(&c, "overlap", "median"), State::Unchanged);
        assert_eq!(c.metrics.len(), 5);
        assert!(c.metrics.iter().all(|m| m.method == "history"));
        assert_eq!(c.delta, 0.03);
    }

    #[test]
    fn a_large_shift_is_a_confirmed_regression_with_a_reason() {
        let c = compare(&baseline(10, 200), &fixtures::run(&samples(200, 1.2, 7)), &CompareOptions::default());
        assert!(c.regression);
        assert_eq!(c.verdict, Decision::Tune);
        assert_eq!(state(&c, "overlap", "median"), State::Regressed);
        assert!(c.reasons[0].starts_with("overlap median +"), "{:?}", c.reasons);
        assert!(c.reasons[0].contains("above the 3 % floor"), "{:?}", c.reasons);
        let faster = compare(&baseline(10, 200), &fixtures::run(&samples(200, 0.8, 7)), &CompareOptions::default());
        assert_eq!(state(&faster, "overlap", "median"), State::Improved);
        assert!(!faster.regression);
    }

    #[test]
    fn a_one_run_baseline_uses_the_pooled_tests() {
        let c = compare(&baseline(1, 200), &fixtures::run(&samples(200, 1.2, 7)), &CompareOptions::default());
        assert!(c.metrics.iter().all(|m| m.method == "pooled"));
        assert!(c.regression, "{:?}", c.reasons);
        assert_eq!(c.baseline.spread, None);
        let same = compare(&baseline(1, 200), &fixtures::run(&samples(200, 1.0, 7)), &CompareOptions::default());
        assert!(!same.regression, "{:?}", same.reasons);
    }

    #[test]
    fn hardware_mismatch_is_never_a_regression() {
        let mut cur = fixtures::run(&samples(200, 1.5, 7));
        cur.hardware.fingerprint = "another-gpu".into();
        let c = compare(&baseline(10, 200), &cur, &CompareOptions::default());
        assert!(!c.regression);
        assert_eq!(c.verdict, Decision::CollectMoreEvidence);
        assert!(c.reasons[0].contains("hardware differs"), "{:?}", c.reasons);
        assert!(!c.baseline.fingerprint_match);
    }

    #[test]
    fn failed_runs_and_few_samples_ask_for_more_evidence() {
        let mut cur = fixtures::run(&samples(200, 1.0, 7));
        cur.failure = Some(crate::result::Failure { kind: "timeout".into(), message: "rank 1".into(), rank: Some(1) });
        let c = compare(&baseline(10, 200), &cur, &CompareOptions::default());
        assert_eq!(c.verdict, Decision::CollectMoreEvidence);
        assert!(c.metrics.is_empty());
        let c = compare(&baseline(10, 200), &fixtures::run(&samples(10, 1.0, 7)), &CompareOptions::default());
        assert_eq!(c.verdict, Decision::CollectMoreEvidence, "{:?}", c.reasons);
        assert!(c.reasons[0].contains("only 10 samples"), "{:?}", c.reasons);
    }

    #[test]
    fn p95_cannot_block_below_100_samples() {
        // Only the tail grows: 20 % of steps 60 % slower.
        let mut tail = samples(60, 1.0, 7);
        for x in tail.iter_mut().step_by(5) {
            *x *= 1.6;
        }
        let c = compare(&baseline(10, 60), &fixtures::run(&tail), &CompareOptions::default());
        let p95 = c.metrics.iter().find(|m| m.row == "overlap" && m.statistic == "p95").expect("p95");
        assert!(!p95.can_block);
        assert_ne!(p95.state, State::Regressed);
    }

    #[test]
    fn verdicts_are_reproducible_for_a_seed() {
        let b = baseline(2, 150);
        let cur = fixtures::run(&samples(150, 1.04, 9));
        let opts = CompareOptions::default();
        assert_eq!(compare(&b, &cur, &opts), compare(&b, &cur, &opts));
    }
}

#[cfg(test)]
mod episode_tests {
    use super::*;
    use crate::result::fixtures;
    use std::path::PathBuf;

    #[test]
    fn a_run_spent_in_a_slow_episode_cannot_confirm_a_regression() {
        let mut rng = Rng::new(3);
        let mut noise = |level: f64| level * (0.02 * rng.normal()).exp();
        let runs = (0..10).map(|_| fixtures::run(&(0..100).map(|_| noise(1.0)).collect::<Vec<_>>())).collect();
        let baseline = Baseline { path: PathBuf::from("b.json"), runs };
        // Steps 20..80 run throttled: +20 %, one long episode.
        let episodic: Vec<f64> = (0..100).map(|i| noise(if (20..80).contains(&i) { 1.2 } else { 1.0 })).collect();
        let c = compare(&baseline, &fixtures::run(&episodic), &CompareOptions::default());
        assert!(!c.regression, "{:?}", c.reasons);
        assert_eq!(c.verdict, Decision::CollectMoreEvidence);
        assert!(c.reasons.iter().any(|r| r.contains("slow episodes")), "{:?}", c.reasons);
        // The same slowdown spread evenly is a regression.
        let even: Vec<f64> = (0..100).map(|_| noise(1.2)).collect();
        assert!(compare(&baseline, &fixtures::run(&even), &CompareOptions::default()).regression);
    }
}
