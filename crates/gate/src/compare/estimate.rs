//! The estimates behind each compared metric: Harrell–Davis statistics of the rows, the
//! current run's block bootstrap, the history regime's prediction interval and the pooled
//! regime's direct tests. Pure functions on sorted samples; `mod.rs` turns an [`Estimate`] into a
//! state and the states into a verdict.

use std::collections::HashMap;

use super::{CompareOptions, Method, RunsNeeded, Statistic};
use commgate_core::result::{RunResult, Schedule};
use commgate_stats::bootstrap::{percentile_interval, SortedResampler};
use commgate_stats::interval::{mean_sd, t_quantile, t_sf};
use commgate_stats::mann_whitney::mann_whitney_u;
use commgate_stats::quantile::{median, HdWeights};
use commgate_stats::rng::Rng;
use commgate_stats::runlevel::{contrast, NoContrast, Runs};
use commgate_stats::serial::{dependent_block_length, rank_ljung_box};
use commgate_stats::tail::exceedance_test;

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
pub(super) const ROWS: [Schedule; 4] = [Schedule::Overlap, Schedule::Serial, Schedule::ComputeOnly, Schedule::CommOnly];

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

    /// The rows whose steps this metric reads (exposed comm: the step and the GEMM alone).
    pub(super) fn rows(self) -> &'static [Schedule] {
        match self {
            Metric::Quantile { row: Schedule::Overlap, .. } => &[Schedule::Overlap],
            Metric::Quantile { row: Schedule::Serial, .. } => &[Schedule::Serial],
            Metric::Quantile { row: Schedule::CommOnly, .. } => &[Schedule::CommOnly],
            Metric::Quantile { row: Schedule::ComputeOnly, .. } => &[Schedule::ComputeOnly],
            Metric::Exposed => &[Schedule::Overlap, Schedule::ComputeOnly],
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
    pub(super) comm: Vec<f64>,
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
        for (o, m) in out.iter_mut().zip(&METRICS) {
            o.push(rows.value(*m, w));
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
    /// The minimum detectable effect: the smallest slowdown this metric would block with 95 %
    /// power, on the ratio's scale minus one (0.045: 4.5 %); `None` when it cannot block.
    pub(super) mde: Option<f64>,
    /// Why this metric cannot block however large the change looks, when it cannot.
    pub(super) cannot_block: Option<String>,
    /// The run-level spread behind the interval, for the "how many runs" advice.
    pub(super) spread: Option<Spread>,
}

/// What the "how many more runs" advice needs of a run-level estimate: the per-run standard
/// deviation on the metric's scale, the runs behind it, and the margin and family it was judged
/// with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Spread {
    pub(super) sd: f64,
    pub(super) baseline_runs: usize,
    pub(super) current_runs: usize,
    /// How many metrics share Holm's family (the first step tests at α / m).
    pub(super) family: usize,
    /// δ and the point change on the estimate's own scale (log ratio, or share of the step).
    pub(super) delta: f64,
    pub(super) d: f64,
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
            mde: None,
            cannot_block: None,
            spread: None,
        }
    }
}

/// The runs a history estimate reads: the comparable baseline runs with their runner groups,
/// and the K current runs with theirs (`stats::runlevel`).
pub(super) struct History<'a> {
    pub(super) base: &'a [RunRows],
    pub(super) groups: &'a [usize],
    pub(super) cur: &'a [RunRows],
    pub(super) cur_group: Option<usize>,
    /// Bootstrap replicates of every metric on the first current run: the runs' spread is
    /// floored at that run's own standard error (for a P95 only below [`FLOOR_BELOW_RUNS`]
    /// baseline runs).
    pub(super) floor: &'a [Vec<f64>],
    /// Per row ([`ROWS`]' order), the largest bootstrap standard error of a log median among the
    /// baseline runs ([`noisiest_within`]): a floor for the medians' uncertainty.
    pub(super) within: [f64; 4],
    /// Holm's family size (the metrics judged).
    pub(super) family: usize,
    /// Per row ([`ROWS`]' order), why one current run cannot block on the metrics reading it
    /// (`one_run.rs`).
    pub(super) one_run: &'a [Option<String>; 4],
    /// Why nothing blocks when the runner layout says so (set by the caller for display runs).
    pub(super) cannot_block: Option<String>,
}

/// The runs' spread is floored at the current run's own block-bootstrap standard error, so that
/// a lucky, tight history cannot make one run's noise significant (a run spent in a slow episode
/// has a wide bootstrap of its median). For a P95 only below this many baseline runs: from it on
/// the runs' spread, which already holds each run's tail noise, is the whole uncertainty (a
/// block bootstrap of one run's P95 is wide and swamped tail regressions: gate-choices.md).
pub(super) const FLOOR_BELOW_RUNS: usize = 5;

/// Judges the current runs against the spread of the baseline runs' values (`stats::runlevel`).
pub(super) fn history(
    m: Metric,
    i: usize,
    h: &History<'_>,
    opts: &CompareOptions,
    delta: f64,
    w: &mut Weights,
) -> Estimate {
    let values: Vec<f64> = h.base.iter().map(|r| r.value(m, w)).collect();
    let currents: Vec<f64> = h.cur.iter().map(|r| r.value(m, w)).collect();
    let current = currents.first().copied().unwrap_or(f64::NAN);
    let n_baseline = h.base.iter().map(|r| r.n(m)).min().unwrap_or(0);
    let n_current = h.cur.iter().map(|r| r.n(m)).min().unwrap_or(0);
    let log_scale = m != Metric::Exposed;
    if log_scale && values.iter().chain(&currents).any(|v| *v <= 0.0) {
        return undefined(m, &values, current, n_baseline, n_current, Method::History, "a step time of 0 ms");
    }
    // Exposed time is a small difference of two step times: its change is measured as a share of
    // the baseline step (overlap median), so that a 1.5 % slower step does not read as "+9 %
    // exposed" and block on noise.
    let step = h.base.iter().map(|r| w.quantile(&r.overlap, 0.5)).sum::<f64>() / h.base.len().max(1) as f64;
    let to_scale = |v: f64| if log_scale { v.ln() } else { v };
    let xs: Vec<f64> = values.iter().map(|v| to_scale(*v)).collect();
    let ys: Vec<f64> = currents.iter().map(|v| to_scale(*v)).collect();
    let runs = Runs { baseline: &xs, groups: h.groups, current: &ys, current_group: h.cur_group };
    let (c, cannot_block) = match contrast(runs) {
        Ok(c) => (c, h.cannot_block.clone()),
        Err(NoContrast::NotFinite) => {
            return Estimate::undefined(f64::NAN, current, n_baseline, n_current, Method::History, None);
        }
        // No runner-to-runner spread to judge by: shown against every run as if each were its own
        // runner, and never blocking (the caller's reason says why).
        Err(_) => {
            let own: Vec<usize> = (0..xs.len()).collect();
            let display = Runs { baseline: &xs, groups: &own, current: &ys, current_group: None };
            let Ok(c) = contrast(display) else {
                return Estimate::undefined(f64::NAN, current, n_baseline, n_current, Method::History, None);
            };
            (c, Some(h.cannot_block.clone().unwrap_or_else(|| "the baseline's runs cannot judge this runner".into())))
        }
    };
    let cannot_block = cannot_block.or_else(|| row_note(m, h.one_run));
    let floored = !m.is_tail() || xs.len() < FLOOR_BELOW_RUNS;
    let se = match h.floor.get(i).filter(|_| floored) {
        Some(boot) => {
            let reps: Vec<f64> = boot.iter().filter(|v| !log_scale || **v > 0.0).map(|v| to_scale(*v)).collect();
            let (_, floor) = mean_sd(&reps);
            let floor = if floor.is_finite() { floor * (1.0 + 1.0 / xs.len() as f64).sqrt() } else { 0.0 };
            c.se.max(floor)
        }
        None => c.se,
    };
    // A median is never judged surer than the noisiest baseline run could know its own median.
    let within = match m {
        Metric::Quantile { row, p: 0.5 } => {
            ROWS.iter().position(|r| *r == row).and_then(|i| h.within.get(i)).map_or(0.0, |w| *w)
                * (1.0 + 1.0 / xs.len() as f64).sqrt()
        }
        _ => 0.0,
    };
    let se = se.max(within);
    let scale = if log_scale { 1.0 } else { step };
    let to_ratio = |v: f64| if log_scale { v.exp() } else { 1.0 + v / scale };
    let to_value = |v: f64| if log_scale { v.exp() } else { v };
    let baseline = to_value(c.center);
    let t = t_quantile(c.df, (1.0 + opts.level) / 2.0);
    if !t.is_finite() || !se.is_finite() {
        return Estimate::undefined(baseline, current, n_baseline, n_current, Method::History, None);
    }
    let half = t * se;
    let (p_regressed, p_improved) = one_sided(c.d, se, |z| t_sf(c.df, z));
    let delta_scale = if log_scale { (1.0 + delta).ln() } else { delta * scale };
    let mde =
        cannot_block.is_none().then(|| to_ratio(delta_scale + power_margin(c.df, opts.alpha, h.family) * se) - 1.0);
    let k = xs.len();
    let per_run = se / (1.0 / k as f64 + 1.0 / ys.len() as f64).sqrt();
    Estimate {
        baseline,
        current: to_value(mean_sd(&ys).0),
        ratio: to_ratio(c.d),
        ci: [to_ratio(c.d - half), to_ratio(c.d + half)],
        p_regressed,
        p_improved,
        n_baseline,
        n_current,
        method: Method::History,
        note: None,
        mde,
        cannot_block,
        spread: Some(Spread {
            sd: per_run,
            baseline_runs: k,
            current_runs: ys.len(),
            family: h.family,
            delta: delta_scale,
            d: c.d,
        }),
    }
}

/// The most baseline runs the advice searches (a store keeps `--keep`, default 10, runs).
const MAX_BASELINE_RUNS: usize = 40;

/// The most current runs the advice searches (`check --runs` allows 20).
const MAX_CURRENT_RUNS: usize = 20;

/// How many more runs would let a run-level estimate decide, on its own spread: for a change that
/// looks larger than δ, enough to block it with 95 % power; for one inside δ, enough for its
/// interval to fit within ±δ (an `unchanged`). Each side is searched alone, the other as it is;
/// the standard error scales as `sd·√(1/k + 1/K)` with `k + K − 2` degrees of freedom.
pub(super) fn runs_needed(s: &Spread, opts: &CompareOptions) -> RunsNeeded {
    let decides = |k: usize, kk: usize| {
        let se = s.sd * (1.0 / k as f64 + 1.0 / kk as f64).sqrt();
        let df = (k + kk).saturating_sub(2).max(1) as f64;
        if s.d.abs() > s.delta {
            s.delta + power_margin(df, opts.alpha, s.family) * se <= s.d.abs()
        } else {
            t_quantile(df, (1.0 + opts.level) / 2.0) * se <= s.delta - s.d.abs()
        }
    };
    let (k, kk) = (s.baseline_runs, s.current_runs);
    RunsNeeded {
        more_baseline_runs: (1..=MAX_BASELINE_RUNS.saturating_sub(k)).find(|n| decides(k + n, kk)),
        current_runs: (kk + 1..=MAX_CURRENT_RUNS).find(|&c| decides(k, c)),
    }
}

/// Resamples of each baseline run's median behind [`noisiest_within`]: enough for a standard
/// error to a few percent, a fifth of the current run's bootstrap.
const WITHIN_RESAMPLES: usize = 200;

/// Per row ([`ROWS`]' order), the largest moving-block bootstrap standard error of a baseline
/// run's log median: how well the noisiest baseline run knew its own median. On a runner with
/// slow episodes a short run knows its median only to a few percent (the blocks keep episodes
/// whole; isolated outliers do not move a median), and a current run spent wholly in one episode
/// shows no within-run dependence of its own: against a baseline whose runs happened to miss
/// their episodes it would otherwise look like a regression (measured by
/// `benches/gate_quality.rs`: 3–7 % false blocks at 20–50 steps with slow episodes and a shared
/// runner).
pub(super) fn noisiest_within(runs: &[&RunResult], rng: &mut Rng, w: &mut Weights) -> [f64; 4] {
    let mut out = [0.0_f64; 4];
    let mut scratch = Vec::new();
    for (noisiest, &s) in out.iter_mut().zip(&ROWS) {
        for run in runs {
            let mut r = Resampler::of(run, s);
            if r.inner.is_empty() {
                continue;
            }
            let reps: Vec<f64> = (0..WITHIN_RESAMPLES)
                .filter_map(|_| {
                    r.draw(rng, &mut scratch);
                    let m = w.quantile(&scratch, 0.5);
                    (m > 0.0).then(|| m.ln())
                })
                .collect();
            let (_, se) = mean_sd(&reps);
            if se.is_finite() {
                *noisiest = noisiest.max(se);
            }
        }
    }
    out
}

/// How many standard errors beyond δ a change must lie to be blocked with 95 % power: the
/// blocking bar (the larger of the interval's `t_{0.975}` and the first Holm step's
/// `t_{1 − α/m}`) plus `t_{0.95}` for the power.
pub(super) fn power_margin(df: f64, alpha: f64, family: usize) -> f64 {
    let bar = t_quantile(df, 0.975).max(t_quantile(df, 1.0 - alpha / family.max(1) as f64));
    bar + t_quantile(df, 0.95)
}

/// Level of the dependence guard's Ljung–Box test, before Bonferroni over the four rows.
pub(super) const DEPENDENCE_ALPHA: f64 = 0.01;

/// Which rows of the current runs are serially dependent in a way the baseline runs are not (a
/// throttled clock, a noisy neighbour during this run only), in [`ROWS`]' order, each with the
/// note its metrics carry: a metric reading such a row cannot confirm a regression on its own.
///
/// A row is flagged when, in some current run, its Ljung–Box test on ranks (n-aware:
/// `stats::serial`) rejects serial independence at 0.01 / 4 (Bonferroni over the rows) *and* its
/// statistic exceeds the typical (median) comparable baseline run's for that row. Dependence
/// most runs show (a runner whose clocks always step, a periodic checkpoint) is already in the
/// runs' spread and vetoes nothing; a real slowdown moves every step and creates none. The median
/// and not the largest: where only some runs have it (a clock step in 40 % of runs), the baseline
/// runs that did had it late enough to leave their medians alone, and a current run whose step
/// came early blocked 1.0 % of unchanged 200-step runs against the largest, 0.05 % against the
/// median (`benches/gate_quality.rs`, `step_change`).
pub(super) fn dependence(current: &[&RunResult], base: &[&RunResult]) -> [Option<String>; 4] {
    let level = DEPENDENCE_ALPHA / ROWS.len() as f64;
    ROWS.map(|s| {
        let mut qs: Vec<f64> = base.iter().filter_map(|b| b.row(s)).map(|r| rank_ljung_box(&r.samples_ms).q).collect();
        qs.sort_by(f64::total_cmp);
        let typical = if qs.is_empty() { 0.0 } else { median(&qs) };
        current
            .iter()
            .filter_map(|c| c.row(s))
            .map(|r| rank_ljung_box(&r.samples_ms))
            .filter(|lb| lb.p_value < level && lb.q > typical)
            .max_by(|a, b| a.q.total_cmp(&b.q))
            .map(|lb| {
                format!(
                    "the current run's {s} steps come in episodes (Ljung–Box p = {:.1e} over {} lags, beyond the \
                     typical baseline run's): one such run is not evidence of a regression; re-run",
                    lb.p_value, lb.lags
                )
            })
    })
}

/// The note of the first row metric `m` reads that has one, from per-row notes in [`ROWS`]'
/// order ([`dependence`]'s, `one_run::limits`').
pub(super) fn row_note(m: Metric, rows: &[Option<String>; 4]) -> Option<String> {
    m.rows().iter().find_map(|s| ROWS.iter().position(|r| r == s).and_then(|i| rows.get(i)).and_then(Clone::clone))
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
    let mut base = RunRows::default();
    for (resamplers, &s) in base_resamplers.iter().zip(&schedules) {
        let acc = base.row_mut(s);
        let mut tmp = Vec::new();
        for r in resamplers {
            merge_into(acc, r.inner.sorted(), &mut tmp);
        }
    }
    let mut cur_resamplers: Vec<Resampler> = schedules.iter().map(|&s| Resampler::of(current, s)).collect();
    let step = w.quantile(&base.overlap, 0.5);
    let log_scale = |m: Metric| m != Metric::Exposed;
    let relative = |m: Metric, b: f64, c: f64| if log_scale(m) { (c / b).ln() } else { (c - b) / step };
    let mut reps: Vec<Vec<f64>> = vec![Vec::with_capacity(opts.resamples); METRICS.len()];
    let (mut b, mut c) = (RunRows::default(), RunRows::default());
    let (mut scratch, mut merged) = (Vec::new(), Vec::new());
    for _ in 0..opts.resamples {
        for (resamplers, &s) in base_resamplers.iter_mut().zip(&schedules) {
            let acc = b.row_mut(s);
            acc.clear();
            for r in resamplers.iter_mut() {
                r.draw(rng, &mut scratch);
                merge_into(acc, &scratch, &mut merged);
            }
        }
        for (r, &s) in cur_resamplers.iter_mut().zip(&schedules) {
            r.draw(rng, c.row_mut(s));
        }
        for (reps, &m) in reps.iter_mut().zip(&METRICS) {
            let rep = relative(m, b.value(m, w), c.value(m, w));
            if rep.is_finite() {
                reps.push(rep);
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
                mde: None,
                cannot_block: None,
                spread: None,
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
    let (mut a, mut b) = (acc.as_slice(), add);
    while let (Some((&x, after_x)), Some((&y, after_y))) = (a.split_first(), b.split_first()) {
        if x <= y {
            tmp.push(x);
            a = after_x;
        } else {
            tmp.push(y);
            b = after_y;
        }
    }
    tmp.extend_from_slice(a);
    tmp.extend_from_slice(b);
    std::mem::swap(acc, tmp);
}

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_testkit::results as fixtures;

    fn quiet(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| (0.02 * rng.normal()).exp()).collect()
    }

    #[test]
    fn dependence_vetoes_only_what_the_baseline_runs_do_not_show() {
        let base: Vec<RunResult> = (0..5).map(|i| fixtures::run(&quiet(100, 20 + i))).collect();
        let base_refs: Vec<&RunResult> = base.iter().collect();
        let mut steps = quiet(100, 11);
        let clean = fixtures::run(&steps);
        assert!(dependence(&[&clean], &base_refs).iter().all(Option::is_none));
        // A preempted rank: two adjacent steps 2–3× slower, no episode.
        steps[40] = 2.8;
        steps[41] = 2.9;
        assert!(dependence(&[&fixtures::run(&steps)], &base_refs).iter().all(Option::is_none));
        // Thirty consecutive steps 20 % slower: an episode no baseline run has.
        steps.iter_mut().skip(50).take(30).for_each(|v| *v *= 1.2);
        let episodic = fixtures::run(&steps);
        let rows = dependence(&[&episodic], &base_refs);
        assert!(rows[0].as_deref().is_some_and(|n| n.contains("overlap steps come in episodes")), "{rows:?}");
        assert_eq!(row_note(Metric::Exposed, &rows), rows[0]);
        // The same episode in every baseline run is the runner's habit, not this run's.
        let habit: Vec<&RunResult> = vec![&episodic; 3];
        assert!(dependence(&[&episodic], &habit).iter().all(Option::is_none));
    }

    #[test]
    fn the_power_margin_shrinks_with_the_runs() {
        // 10 runs, seven metrics: t_9 at 1 − 0.01/7 ≈ 3.9 plus t_9 at 0.95 ≈ 1.83.
        let m10 = power_margin(9.0, 0.01, 7);
        assert!((5.5..6.0).contains(&m10), "{m10}");
        assert!(power_margin(4.0, 0.01, 7) > m10 + 2.0);
        assert!(power_margin(100.0, 0.01, 7) < m10);
    }
}
