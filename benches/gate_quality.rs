//! Gate quality, measured (`harness = false`): replays `commgate_gate::compare::compare` on simulated
//! A/A and A/B data from `commgate_testkit::simulate` and prints the targets table of
//! `docs/gate.md` with the measured value, its Wilson 95 % interval and PASS/FAIL next to
//! each target.
//!
//! `cargo bench --bench gate_quality` (or `scripts/gate-quality.sh`). Each trial draws a fresh
//! baseline of 10 runs from the noise model (what a mature baseline store holds) and one current
//! run, all with their own seeds, and calls `compare` exactly as `commgate compare` does. The
//! 1-run-baseline (pooled) figures are informational: the targets are stated for a mature store.
//! The phase cells slow the current run's `comm_only` or `compute_only` row alone and count how
//! often the comparison blocked and named that phase (`comparison.cause`); every blocked cell
//! lists the causes it named.
//!
//! The several-workloads cells judge five workloads as one Holm family, as `commgate check` does
//! with several `--result` files: `prepare` each comparison, then `judge_together`. A trial is a
//! false regression when any workload of the family blocks.
//!
//! Environment: `COMMGATE_GATE_TRIALS` (trials per cell, default 1000), `COMMGATE_GATE_RESAMPLES`
//! (bootstrap resamples per comparison, default 1000, the production default),
//! `COMMGATE_GATE_THREADS` (default 2), `COMMGATE_GATE_ONLY` (comma-separated substrings: only
//! the cells whose label holds one of them run; the others print as skipped, and every cell keeps
//! its seeds, so a filtered run repeats the full run's figures). It prints, it does not assert: a benchmark is evidence,
//! not a test. PASS/FAIL compares the point estimate with the target; the interval says how sure
//! that is at this many trials.
//!
//! After those cells, the families' sections (every `NoiseModel::FAMILIES` model: the first six
//! and `nccl_modes` (NCCL's per-run algorithm/protocol choice, recorded), `nccl_modes_unrecorded`
//! (the same, not recorded), `runner_clusters` (a level per runner), `step_change` (a clock step
//! within the run), `warmup_ramp`, `periodic_spike`, `heavy_tail` (Pareto 2.5) and
//! `shared_runner` (a loaded machine); `simulate.rs` documents their parameters). Each cell's
//! label opens with its section's tag, so `COMMGATE_GATE_ONLY=families-aa` (or `families-shift`,
//! `families-tail`, `families-k3`, or a family's name) runs that part alone:
//! - `families-aa`: A/A false blocks for every family × baseline runs {1, 2, 3, 5, 10} × steps
//!   {20, 30, 50, 200}, target ≤ 1 % each, printed as a grid with the share answered
//!   `collect_more_evidence`; every cell runs the full `COMMGATE_GATE_TRIALS`.
//!   `runner_clusters` three times: the baseline on runners 0–2 and the current run on runner 3,
//!   all on runner 0 and the current on runner 1, and all on runner 0 (each trial its own fleet).
//! - `families-shift`: +5 % median shift, 10-run baseline, steps {50, 200}: caught ≥ 95 %, and
//!   "+5 % not caught but answered accept" ≤ 5 % (where the gate cannot see 5 %, it should ask
//!   for more evidence), with the shares answered collect_more_evidence and accept, the mean
//!   MDE over the trials that had one and the share without.
//! - `families-tail`: every step above the run's own P90 ×1.15 (`Effect::tail_rank`), 10-run
//!   baseline, 200 steps: caught ≥ 80 %, and the same further columns.
//! - `families-k3`: K = 3 current runs (`judge_runs`) on 5- and 10-run baselines, n = 100, for
//!   the noisiest families: A/A ≤ 1 %, +5 % informational.
//! - the summary: a row per family with the worst cell of each column and where it was.
//!
//! Every section prints its wall time.
//!
//! Last, the nccl-tests section (`COMMGATE_GATE_ONLY=nccl-tests`): whole nccl-tests sweeps judged
//! as `commgate check` judges one (`compare`: every point (size × placement) a workload of its
//! own, all 16 in one Holm family, one comparison). Each run is
//! `commgate_testkit::nccl_tests::json` of `NcclTestsSpec::sweep` (all-reduce, 8 sizes 1 KiB to
//! 16 MiB, 2 processes, the generator's own ±2 % per-process jitter, `NCCL_ALGO`/`NCCL_PROTO`
//! pinned so the choice is recorded) with the cell's iterations, read back with
//! `result::nccl_tests::parse` and `sweep::to_result`, and then given a shared runner's noise of
//! our own ([`SweepNoise::SHARED`]), multiplying every per-iteration time:
//! - a **run level** `exp(N(0, 0.015))`, drawn once per run and shared by every point (clocks,
//!   placement, the neighbours of the day);
//! - **per-iteration** log-normal noise `exp(N(0, σ))`, σ = 2 % + 3 % × the point's latency share
//!   (`10 µs / (10 µs + bytes / 100 GB/s)`, the generator's time model): 5 % at 1 KiB, 2.2 % at
//!   16 MiB, since small messages jitter more;
//! - **slow episodes**: a two-state chain over the run's timeline (the points in the order
//!   nccl-tests runs them, size by size, out of place then in place; an episode can run on into
//!   the next point) that enters with probability 0.002 per iteration and stays with 0.95
//!   (≈ 20 iterations), each episode × U(1.10, 1.25): ≈ 4 % of iterations slow;
//! - **spikes**: with probability 0.003 per iteration × a Pareto of shape 2 from 1.5 (median
//!   ×2.1), capped at ×10 (preemption, a page fault, a late rank).
//!
//! Every run draws its generator seed and its noise stream from the trial's seeds. The summary
//! (`time_us`, bandwidths) is set to the noisy iterations' mean, rounded to 0.01 µs as nccl-tests
//! prints it. Without `-I` each point holds that summary alone (one sample, `per_iteration`
//! false, no per-process counts), as `parse_text` of a run without the per-iteration columns
//! gives. The cells, each with the section's targets:
//! - A/A, baseline of {5, 10} runs × iterations {50, 200}: a false block is any point blocking
//!   (`comparison.regression`), ≤ 1 %;
//! - one size slowed +5 % and +10 % (out of place and in place, the generator's `slower`), the
//!   size rotating over the 8 sizes with the trial, same grid: caught = `regression` with every
//!   regressed point at that size; +5 % on 10 runs ≥ 95 %, the others informational; "not caught
//!   but answered accept" ≤ 5 % each; a per-size grid of the caught share;
//! - without `-I`: A/A on {5, 10} runs × {50, 200} iterations, must be 0 % (one sample cannot
//!   block), with the share answered `collect_more_evidence`; one size +10 % on 10 runs,
//!   informational;
//! - two diagnostics, one size +5 % on 10 runs: without the run level (σ = 0), and with the
//!   per-iteration noise alone (no run level, episodes or spikes): what each part of the noise
//!   costs the per-point contrast; and A/A at 50 iterations without the slow episodes;
//! - what blocked in the A/A cells, by point.
//!
//! The measured figures, and what fails and why: `docs/performance.md`, "nccl-tests sweeps".

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a benchmark stops by panicking")]

use std::collections::BTreeMap;
use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use commgate_core::result::nccl_tests::parse;
use commgate_core::result::sweep::to_result;
use commgate_core::result::{RunResult, Schedule};
use commgate_gate::baseline::Baseline;
use commgate_gate::compare::{prepare, CompareOptions, MetricComparison, State, StepCause};
use commgate_gate::decide::comparison::{judge, judge_runs, judge_together};
use commgate_gate::decide::Decision;
use commgate_stats::rng::Rng;
use commgate_testkit::nccl_tests::{json, NcclTestsSpec};
use commgate_testkit::simulate::{synthetic_run_with_spread, Effect, NoiseModel, SimRun};

#[path = "support/targets.rs"]
mod targets;
use targets::{env_number, print_grid, print_table, rate, run_trials, Line, Target};

const A_A_SIZES: [usize; 4] = [30, 50, 100, 200];
const BASELINE_RUNS: usize = 10;

/// One simulated scenario: a baseline of `baseline_runs` runs and one current run.
#[derive(Debug, Clone, Copy)]
struct Cell {
    model: NoiseModel,
    n: usize,
    effect: Effect,
    run_spread: f64,
    baseline_runs: usize,
    /// A phase row of the current run slowed by this factor on its own (the simulator's effect
    /// moves only the step rows, `overlap` and `serial`).
    phase: Option<(Schedule, f64)>,
    /// Which runner each run was on ([`Placement::Unplaced`] in every cell before the families).
    placement: Placement,
    /// Current runs judged together (`judge_runs`); 1: `compare`, as every cell before the
    /// families.
    current_runs: usize,
    /// The section's tag, first in the label (`COMMGATE_GATE_ONLY=families-aa` runs that
    /// section alone); `None` in every cell before the families, whose labels stay as they were.
    section: Option<&'static str>,
}

/// Where a cell's runs ran: the runner named in `provenance.runner`, and for
/// `NoiseModel::RunnerClusters` the runner whose level they carry. Each trial draws a fleet of
/// its own (fresh runner levels), so a cell averages over fleets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// No runner given.
    Unplaced,
    /// Baseline run `i` on runner `i % spread`, every current run on runner `current`.
    Runners { spread: usize, current: usize },
}

impl Placement {
    /// What the families' cells use for `RunnerClusters`: the baseline spread over three runners,
    /// the current run on a fourth.
    const SPREAD: Placement = Placement::Runners { spread: 3, current: 3 };

    fn baseline(self, i: usize) -> Option<usize> {
        match self {
            Placement::Unplaced => None,
            Placement::Runners { spread, .. } => Some(i % spread.max(1)),
        }
    }

    fn current(self) -> Option<usize> {
        match self {
            Placement::Unplaced => None,
            Placement::Runners { current, .. } => Some(current),
        }
    }

    fn label(self) -> String {
        match self {
            Placement::Unplaced => String::new(),
            Placement::Runners { spread, current } => {
                let runners: Vec<String> = (0..spread).map(|r| r.to_string()).collect();
                format!(", baseline on runners {{{}}}, current on runner {current}", runners.join(","))
            }
        }
    }
}

impl Cell {
    fn new(model: NoiseModel, n: usize, effect: Effect) -> Cell {
        Cell {
            model,
            n,
            effect,
            run_spread: model.default_run_spread(),
            baseline_runs: BASELINE_RUNS,
            phase: None,
            placement: Placement::Unplaced,
            current_runs: 1,
            section: None,
        }
    }

    /// A cell of the families' sections: `RunnerClusters` runs spread over runners
    /// ([`Placement::SPREAD`]), every other family unplaced.
    fn family(section: &'static str, model: NoiseModel, n: usize, effect: Effect) -> Cell {
        let placement = if model == NoiseModel::RunnerClusters { Placement::SPREAD } else { Placement::Unplaced };
        Cell { placement, section: Some(section), ..Cell::new(model, n, effect) }
    }

    fn placed(self, placement: Placement) -> Cell {
        Cell { placement, ..self }
    }

    fn current(self, current_runs: usize) -> Cell {
        Cell { current_runs, ..self }
    }

    fn phase(model: NoiseModel, n: usize, row: Schedule, factor: f64) -> Cell {
        Cell { phase: Some((row, factor)), ..Cell::new(model, n, Effect::NONE) }
    }

    fn spread(self, run_spread: f64) -> Cell {
        Cell { run_spread, ..self }
    }

    fn pooled(self) -> Cell {
        Cell { baseline_runs: 1, ..self }
    }

    fn runs(self, baseline_runs: usize) -> Cell {
        Cell { baseline_runs, ..self }
    }

    fn label(&self) -> String {
        let e = &self.effect;
        let effect = if let Some((row, factor)) = self.phase {
            format!("{row} alone +{:.1} %", 100.0 * (factor - 1.0))
        } else if let Some(t) = e.rank_tail {
            format!("tail above P{:.0} ×{:.2}", 100.0 * t.quantile, t.factor)
        } else if *e == Effect::NONE {
            "A/A".to_string()
        } else if e.tail_fraction > 0.0 {
            format!("tail {:.0} % ×{:.2}", 100.0 * e.tail_fraction, e.tail_factor)
        } else {
            format!("+{:.1} %", 100.0 * e.median_shift)
        };
        let spread = 100.0 * self.run_spread;
        // One decimal only where it is needed, so the first cells' labels read as they always did.
        let spread =
            if (spread - spread.round()).abs() < 1e-9 { format!("{spread:.0}") } else { format!("{spread:.1}") };
        let section = self.section.map_or(String::new(), |s| format!("{s}: "));
        let current =
            if self.current_runs > 1 { format!(", K = {} current runs", self.current_runs) } else { String::new() };
        format!(
            "{section}{effect} {} (run spread ±{spread} %) n = {}, {}-run baseline{}{current}",
            self.model.name(),
            self.n,
            self.baseline_runs,
            self.placement.label()
        )
    }
}

/// Counts over a cell's trials.
#[derive(Debug, Clone, Default)]
struct Tally {
    trials: usize,
    /// `regression == true`.
    regression: usize,
    /// Verdict `collect_more_evidence`.
    collect_more: usize,
    /// The primary metric (overlap median) inconclusive.
    primary_inconclusive: usize,
    /// Verdict `accept` without `regression` (in a regressed cell: a miss the gate should have
    /// called `collect_more_evidence`).
    accept: usize,
    /// Trials with an MDE (`comparison.mde` is `Some`), and the sum of those MDEs.
    mde_known: usize,
    mde_sum: f64,
    /// Sum of `baseline.runners` (for the mean).
    runners_sum: usize,
    /// Sum of δ over the trials (for the mean δ).
    delta_sum: f64,
    /// Per metric (`row statistic`) that was `regressed`: how often, and the sums of its point
    /// ratio and interval's lower end (for means): what blocked, and by how much.
    regressed_by_metric: BTreeMap<String, Blocked>,
    /// How often each cause was named (`comparison.cause`), over the blocked trials.
    causes: BTreeMap<&'static str, usize>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Blocked {
    count: usize,
    ratio_sum: f64,
    lo_sum: f64,
}

impl Tally {
    fn add(&mut self, o: Tally) {
        for (k, v) in o.regressed_by_metric {
            let b = self.regressed_by_metric.entry(k).or_default();
            b.count += v.count;
            b.ratio_sum += v.ratio_sum;
            b.lo_sum += v.lo_sum;
        }
        for (k, v) in o.causes {
            *self.causes.entry(k).or_default() += v;
        }
        self.delta_sum += o.delta_sum;
        self.trials += o.trials;
        self.regression += o.regression;
        self.collect_more += o.collect_more;
        self.primary_inconclusive += o.primary_inconclusive;
        self.accept += o.accept;
        self.mde_known += o.mde_known;
        self.mde_sum += o.mde_sum;
        self.runners_sum += o.runners_sum;
    }

    /// The shares of the verdicts that matter beside `regression`, the mean MDE where known and
    /// the share without one, and the runners the baselines came from.
    fn note(&self) -> String {
        if self.trials == 0 {
            return String::new();
        }
        let share = |k: usize| 100.0 * k as f64 / self.trials as f64;
        let mde = if self.mde_known > 0 {
            format!("{:.2} %", 100.0 * self.mde_sum / self.mde_known as f64)
        } else {
            "—".to_string()
        };
        format!(
            "collect_more {:.1} %, accept {:.1} %, mean MDE {mde}, MDE none {:.0} %, runners {:.1}",
            share(self.collect_more),
            share(self.accept),
            share(self.trials - self.mde_known),
            self.runners_sum as f64 / self.trials as f64
        )
    }
}

/// One trial: deterministic in `(cell_id, trial)`.
///
/// The seeds are drawn in the order the first cells always drew them (the baseline runs, then
/// the current run), and the further current runs after them; the fleet (the runners' levels)
/// has a stream of its own. An unplaced run of one of the first six models is exactly
/// `synthetic_run_with_spread`'s.
fn trial(cell: &Cell, cell_id: u64, trial: u64, opts: &CompareOptions) -> Tally {
    let mut seeds = Rng::new((cell_id << 32) ^ trial ^ 0x6A7E_0000_0000_0000);
    let fleet = Rng::new((cell_id << 32) ^ trial ^ 0xF1EE_7000_0000_0000).next_u64();
    let sim = |seed: u64, effect: &Effect, runner: Option<usize>| {
        let run = SimRun::new(cell.model, cell.n, seed).effect(*effect).spread(cell.run_spread).fleet(fleet);
        runner.map_or(run, |r| run.on_runner(r)).build()
    };
    let runs =
        (0..cell.baseline_runs).map(|i| sim(seeds.next_u64(), &Effect::NONE, cell.placement.baseline(i))).collect();
    let mut current: Vec<RunResult> =
        (0..cell.current_runs.max(1)).map(|_| sim(seeds.next_u64(), &cell.effect, cell.placement.current())).collect();
    if let Some((row, factor)) = cell.phase {
        current.iter_mut().for_each(|r| slow_down(r, row, factor));
    }
    let baseline = Baseline { path: "sim".into(), runs };
    let c = match current.as_slice() {
        [one] => judge(&baseline, one, opts),
        many => judge_runs(&baseline, many, opts),
    };
    Tally {
        trials: 1,
        regression: usize::from(c.regression),
        collect_more: usize::from(c.verdict == Decision::CollectMoreEvidence),
        accept: usize::from(c.verdict == Decision::Accept && !c.regression),
        mde_known: usize::from(c.mde.is_some()),
        mde_sum: c.mde.unwrap_or(0.0),
        runners_sum: c.baseline.runners,
        primary_inconclusive: usize::from(c.metrics.iter().any(|m| m.primary && m.judged.state == State::Inconclusive)),
        delta_sum: c.delta,
        regressed_by_metric: c
            .metrics
            .iter()
            .filter(|m| m.judged.state == State::Regressed)
            .map(|m| {
                (
                    format!("{} {}", m.row, m.statistic),
                    Blocked { count: 1, ratio_sum: m.judged.ratio, lo_sum: m.judged.ci[0] },
                )
            })
            .collect(),
        causes: c.cause.map(|k| (k.as_str(), 1)).into_iter().collect(),
    }
}

/// Multiplies every step of one row of `run` by `factor`.
fn slow_down(run: &mut RunResult, row: Schedule, factor: f64) {
    for r in run.rows.iter_mut().filter(|r| r.schedule == row) {
        r.samples_ms.iter_mut().for_each(|s| *s *= factor);
    }
}

/// How often the blocked trials named `cause`.
fn times_named(t: &Tally, cause: StepCause) -> usize {
    t.causes.get(cause.as_str()).copied().unwrap_or(0)
}

/// All trials of one cell, split over `threads` scoped threads.
fn run_cell(cell: &Cell, cell_id: u64, trials: usize, threads: usize, opts: &CompareOptions) -> Tally {
    run_trials(trials, threads, |i| trial(cell, cell_id, i, opts), Tally::add)
}

/// Workloads judged together in a several-workloads cell.
const FAMILY_WORKLOADS: usize = 5;

/// Several workloads judged as one Holm family: each workload its own baseline of
/// [`BASELINE_RUNS`] runs and one current run of `n` steps; workload `k` of trial `t` draws from
/// `NoiseModel::ALL[(k + t) % 6]`, so every trial mixes five different models and every model
/// takes every position. `slowed`: the first workload's current run gets this median shift.
#[derive(Debug, Clone, Copy)]
struct FamilyCell {
    n: usize,
    slowed: Option<f64>,
}

impl FamilyCell {
    fn label(&self) -> String {
        let effect = self.slowed.map_or("A/A".to_string(), |s| format!("one workload +{:.0} %", 100.0 * s));
        format!(
            "{effect}, {FAMILY_WORKLOADS} workloads as one family (mixed models), n = {}, {BASELINE_RUNS}-run baselines",
            self.n
        )
    }
}

/// Counts over a several-workloads cell's trials.
#[derive(Debug, Clone, Copy, Default)]
struct FamilyTally {
    trials: usize,
    /// Any workload of the family `regression == true`.
    any_regression: usize,
    /// The slowed workload `regression == true`.
    slowed_regression: usize,
}

impl FamilyTally {
    fn add(&mut self, o: FamilyTally) {
        self.trials += o.trials;
        self.any_regression += o.any_regression;
        self.slowed_regression += o.slowed_regression;
    }
}

/// One trial of a several-workloads cell: deterministic in `(cell_id, trial)`.
fn family_trial(cell: &FamilyCell, cell_id: u64, trial: u64, opts: &CompareOptions) -> FamilyTally {
    let mut seeds = Rng::new((cell_id << 32) ^ trial ^ 0x6A7E_0000_0000_0000);
    let models = NoiseModel::ALL;
    let pending = (0..FAMILY_WORKLOADS)
        .map(|k| {
            let model = models[(k + trial as usize) % models.len()];
            let spread = model.default_run_spread();
            let runs = (0..BASELINE_RUNS)
                .map(|_| synthetic_run_with_spread(model, cell.n, &Effect::NONE, spread, seeds.next_u64()))
                .collect();
            let effect = match cell.slowed {
                Some(s) if k == 0 => Effect::shift(s),
                _ => Effect::NONE,
            };
            let current = synthetic_run_with_spread(model, cell.n, &effect, spread, seeds.next_u64());
            prepare(&Baseline { path: format!("sim-{k}").into(), runs }, &current, opts)
        })
        .collect();
    let judged = judge_together(pending, opts);
    FamilyTally {
        trials: 1,
        any_regression: usize::from(judged.iter().any(|c| c.regression)),
        slowed_regression: usize::from(cell.slowed.is_some() && judged[0].regression),
    }
}

fn print_table_titled(title: &str, lines: &[Line]) {
    println!("{title}");
    print_table(lines);
}

/// The short-history cells: a store only five runs old, with heavy outliers (5 % of steps
/// ×1.3–1.8): adjacent outliers can read as "slow episodes" and make a clear +5 % inconclusive.
fn short_history(runner: &mut Runner) -> Vec<Line> {
    const RUNS: usize = 5;
    let shift = runner.cell(Cell::new(NoiseModel::HeavyOutliers, 100, Effect::shift(0.05)).runs(RUNS));
    let aa = runner.cell(Cell::new(NoiseModel::HeavyOutliers, 100, Effect::NONE).runs(RUNS));
    vec![
        Line::rate(
            "+5 % median shift detected, n = 100, heavy_outliers, 5-run baseline",
            Target::AtLeast(95.0),
            shift.regression,
            shift.trials,
        ),
        Line::rate(
            "A/A false regressions, n = 100, heavy_outliers, 5-run baseline",
            Target::AtMost(1.0),
            aa.regression,
            aa.trials,
        ),
    ]
}

/// The several-workloads cells: five workloads, one Holm family (`check` with several results).
fn several_workloads(runner: &mut Runner) -> Vec<Line> {
    let aa = runner.family(FamilyCell { n: 100, slowed: None });
    let slowed = runner.family(FamilyCell { n: 100, slowed: Some(0.08) });
    vec![
        Line::rate(
            format!("A/A false regressions (any of {FAMILY_WORKLOADS} blocks), n = 100, mixed models"),
            Target::AtMost(1.0),
            aa.any_regression,
            aa.trials,
        ),
        Line::info(
            format!("one of {FAMILY_WORKLOADS} workloads +8 %: that workload blocked, n = 100"),
            slowed.slowed_regression,
            slowed.trials,
        ),
        Line::info(
            format!("one of {FAMILY_WORKLOADS} workloads +8 %: any workload blocked, n = 100"),
            slowed.any_regression,
            slowed.trials,
        ),
    ]
}

/// Baseline sizes of the families' A/A grid.
const FAMILY_BASELINES: [usize; 5] = [1, 2, 3, 5, 10];
/// Steps per run of the families' A/A grid.
const FAMILY_STEPS: [usize; 4] = [20, 30, 50, 200];
/// Steps per run of the families' +5 % cells.
const POWER_STEPS: [usize; 2] = [50, 200];
/// The noisy families the K-run cells judge.
const K_FAMILIES: [NoiseModel; 4] =
    [NoiseModel::NcclModes, NoiseModel::RunnerClusters, NoiseModel::StepChange, NoiseModel::SharedRunner];
/// Current runs in the K-run cells.
const K_RUNS: usize = 3;

/// A measured cell of the families' sections: where in its section's grid it lies (short, for
/// the summary's "worst" columns), and its counts.
#[derive(Debug, Clone)]
struct Spot {
    at: String,
    tally: Tally,
}

/// What the families' sections measured, per family, in [`NoiseModel::FAMILIES`] order.
#[derive(Debug, Clone)]
struct FamilyFigures {
    model: NoiseModel,
    aa: Vec<Spot>,
    shift: Vec<Spot>,
    tail: Vec<Spot>,
}

/// The placements of a family's A/A cells: `RunnerClusters` spread over three runners with the
/// current run on a fourth, all on runner 0 with the current on runner 1, and all on runner 0.
fn aa_placements(model: NoiseModel) -> Vec<Placement> {
    if model == NoiseModel::RunnerClusters {
        vec![
            Placement::SPREAD,
            Placement::Runners { spread: 1, current: 1 },
            Placement::Runners { spread: 1, current: 0 },
        ]
    } else {
        vec![Placement::Unplaced]
    }
}

/// The placement in a few characters, for grids and "worst" columns.
fn short_placement(p: Placement) -> String {
    match p {
        Placement::Unplaced => String::new(),
        Placement::Runners { spread: 1, current } => format!(" runner 0→{current}"),
        Placement::Runners { spread, current } => format!(" runners 0–{}→{current}", spread - 1),
    }
}

/// A/A over every family × baseline size × steps (and `RunnerClusters`' placements).
fn families_aa(runner: &mut Runner, model: NoiseModel) -> Vec<Spot> {
    let mut spots = Vec::new();
    for placement in aa_placements(model) {
        for runs in FAMILY_BASELINES {
            for n in FAMILY_STEPS {
                let cell = Cell::family("families-aa", model, n, Effect::NONE).runs(runs).placed(placement);
                let at = format!("n = {n}, {runs}-run{}", short_placement(placement));
                spots.push(Spot { at, tally: runner.cell(cell) });
            }
        }
    }
    spots
}

/// `k` of `tally` as a percentage, `-` for a skipped cell.
fn pct_of(k: usize, t: &Tally) -> String {
    if t.trials == 0 {
        "-".to_string()
    } else {
        format!("{:.2} %", 100.0 * k as f64 / t.trials as f64)
    }
}

/// The A/A grid of one family: a row per placement × baseline size, a column per step count;
/// each entry the false-block rate (`!` above 1 %) and the share answered collect_more_evidence.
fn print_aa_grid(figures: &[FamilyFigures], trials: usize) {
    let mut header = vec!["family".to_string(), "placement".to_string(), "baseline".to_string()];
    header.extend(FAMILY_STEPS.iter().map(|n| format!("n = {n} ({trials} trials): blocked · collect_more")));
    let mut rows = Vec::new();
    for f in figures {
        let mut spots = f.aa.iter();
        for placement in aa_placements(f.model) {
            for runs in FAMILY_BASELINES {
                let mut row = vec![f.model.name().to_string(), short_placement(placement), format!("{runs} runs")];
                for _ in FAMILY_STEPS {
                    let Some(s) = spots.next() else { break };
                    let t = &s.tally;
                    let flag = if Target::AtMost(1.0).verdict(t.regression, t.trials) == "FAIL" { " !" } else { "" };
                    row.push(format!("{}{flag} · {}", pct_of(t.regression, t), pct_of(t.collect_more, t)));
                }
                rows.push(row);
            }
        }
    }
    print_grid(&header, &rows);
}

/// The spot with the highest (`worst_high`) or lowest rate of `k` among those that ran.
fn worst(spots: &[Spot], k: fn(&Tally) -> usize, worst_high: bool) -> Option<&Spot> {
    let r = |s: &Spot| k(&s.tally) as f64 / s.tally.trials as f64;
    let ran = spots.iter().filter(|s| s.tally.trials > 0);
    if worst_high {
        ran.max_by(|a, b| r(a).total_cmp(&r(b)))
    } else {
        ran.min_by(|a, b| r(a).total_cmp(&r(b)))
    }
}

/// One summary entry: the worst spot's rate, PASS/FAIL against `target`, and where it was.
fn summary_entry(spots: &[Spot], k: fn(&Tally) -> usize, target: Target) -> String {
    let worst_high = matches!(target, Target::AtMost(_));
    match worst(spots, k, worst_high) {
        None => "(skipped)".to_string(),
        Some(s) => {
            let t = &s.tally;
            format!("{} {} ({})", pct_of(k(t), t), target.verdict(k(t), t.trials), s.at)
        }
    }
}

/// The per-family summary: the worst A/A cell, the worst +5 % and tail cells, the worst share of
/// missed +5 % answered accept, and the mean MDE of the 200-step +5 % cell.
fn print_summary(figures: &[FamilyFigures]) {
    let header: Vec<String> = [
        "family",
        "worst A/A blocked (≤ 1 %)",
        "+5 % caught (≥ 95 %)",
        "tail P90 ×1.15 caught (≥ 80 %)",
        "+5 % missed, answered accept (≤ 5 %)",
        "mean MDE (+5 %, n = 200)",
    ]
    .map(String::from)
    .to_vec();
    let rows: Vec<Vec<String>> = figures
        .iter()
        .map(|f| {
            let mde = f.shift.iter().rev().find(|s| s.tally.trials > 0).map_or("-".to_string(), |s| {
                let t = &s.tally;
                if t.mde_known == 0 {
                    "— (none)".to_string()
                } else {
                    format!(
                        "{:.2} % ({:.0} % none)",
                        100.0 * t.mde_sum / t.mde_known as f64,
                        100.0 * (t.trials - t.mde_known) as f64 / t.trials as f64
                    )
                }
            });
            vec![
                f.model.name().to_string(),
                summary_entry(&f.aa, |t| t.regression, Target::AtMost(1.0)),
                summary_entry(&f.shift, |t| t.regression, Target::AtLeast(95.0)),
                summary_entry(&f.tail, |t| t.regression, Target::AtLeast(80.0)),
                summary_entry(&f.shift, |t| t.accept, Target::AtMost(5.0)),
                mde,
            ]
        })
        .collect();
    print_grid(&header, &rows);
}

/// The regressed cells' lines: caught (against `caught`), and missed but answered accept
/// (≤ 5 %), with the verdict shares and the MDE beside them.
fn regressed_lines(what: &str, model: NoiseModel, spots: &[Spot], caught: Target) -> Vec<Line> {
    spots
        .iter()
        .flat_map(|s| {
            let t = &s.tally;
            [
                Line::rate(format!("{what} caught  {} {}", model.name(), s.at), caught, t.regression, t.trials)
                    .note(t.note()),
                Line::rate(
                    format!("{what} not caught but answered accept  {} {}", model.name(), s.at),
                    Target::AtMost(5.0),
                    t.accept,
                    t.trials,
                ),
            ]
        })
        .collect()
}

/// Prints how long a section took.
fn section_time(name: &str, since: Instant) {
    println!("[{name}: {:.1} s]", since.elapsed().as_secs_f64());
}

/// The families' sections (each cell's label opens with its section's tag, so
/// `COMMGATE_GATE_ONLY=families-aa` runs one section): A/A over every family × baseline size ×
/// steps, +5 % and a rank tail on a 10-run baseline, K = 3 current runs, and the summary.
fn families(runner: &mut Runner) {
    let trials = runner.trials;
    let started = Instant::now();
    let aa: Vec<Vec<Spot>> = NoiseModel::FAMILIES.iter().map(|&m| families_aa(runner, m)).collect();
    let mut figures: Vec<FamilyFigures> = NoiseModel::FAMILIES
        .iter()
        .zip(aa)
        .map(|(&model, aa)| FamilyFigures { model, aa, shift: Vec::new(), tail: Vec::new() })
        .collect();
    println!(
        "\nFamilies (`families-aa`): A/A false blocks, every family × baseline runs {FAMILY_BASELINES:?} × steps \
         {FAMILY_STEPS:?}; target ≤ 1 % each (! marks a FAIL); runner_clusters: baseline on runners 0–2 and the \
         current on runner 3, all on runner 0 and the current on runner 1, all on runner 0"
    );
    print_aa_grid(&figures, trials);
    section_time("families-aa", started);

    let started = Instant::now();
    for f in figures.iter_mut() {
        f.shift = POWER_STEPS
            .iter()
            .map(|&n| Spot {
                at: format!("n = {n}"),
                tally: runner.cell(Cell::family("families-shift", f.model, n, Effect::shift(0.05))),
            })
            .collect();
    }
    println!("\nFamilies (`families-shift`): +5 % median shift, {BASELINE_RUNS}-run baseline");
    let lines: Vec<Line> =
        figures.iter().flat_map(|f| regressed_lines("+5 %", f.model, &f.shift, Target::AtLeast(95.0))).collect();
    print_table(&lines);
    section_time("families-shift", started);

    let started = Instant::now();
    for f in figures.iter_mut() {
        let cell = Cell::family("families-tail", f.model, 200, Effect::tail_rank(0.90, 1.15));
        f.tail = vec![Spot { at: "n = 200".to_string(), tally: runner.cell(cell) }];
    }
    println!(
        "\nFamilies (`families-tail`): every step above the run's own P90 ×1.15 (P95 +15 %, median unchanged), \
         {BASELINE_RUNS}-run baseline, n = 200"
    );
    let lines: Vec<Line> = figures
        .iter()
        .flat_map(|f| regressed_lines("tail P90 ×1.15", f.model, &f.tail, Target::AtLeast(80.0)))
        .collect();
    print_table(&lines);
    section_time("families-tail", started);

    let started = Instant::now();
    let mut lines = Vec::new();
    for model in K_FAMILIES {
        for runs in [5, BASELINE_RUNS] {
            let cell = |effect| Cell::family("families-k3", model, 100, effect).runs(runs).current(K_RUNS);
            let aa = runner.cell(cell(Effect::NONE));
            let shift = runner.cell(cell(Effect::shift(0.05)));
            let at = format!("{} n = 100, {runs}-run baseline, K = {K_RUNS}", model.name());
            lines.push(
                Line::rate(format!("A/A blocked  {at}"), Target::AtMost(1.0), aa.regression, aa.trials).note(aa.note()),
            );
            lines.push(Line::info(format!("+5 % caught  {at}"), shift.regression, shift.trials).note(shift.note()));
            lines.push(Line::info(format!("+5 % not caught but answered accept  {at}"), shift.accept, shift.trials));
        }
    }
    println!("\nFamilies (`families-k3`): K = {K_RUNS} current runs judged together (judge_runs), n = 100");
    print_table(&lines);
    section_time("families-k3", started);

    println!("\nSummary by family (worst cell of each column, and where it was)");
    print_summary(&figures);
}

/// A shared runner's noise on an nccl-tests sweep's per-iteration times (the module doc's
/// nccl-tests section): a run level, per-iteration log-normal noise that is larger for
/// latency-bound sizes, slow episodes over the run's timeline and heavy-tailed spikes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SweepNoise {
    /// σ of the run's log-normal level, shared by every point of the run.
    run_sigma: f64,
    /// σ of the per-iteration log-normal noise at a bandwidth-bound point, and what a wholly
    /// latency-bound point adds.
    iter_sigma: f64,
    iter_sigma_latency: f64,
    /// Slow episodes: entered with this probability per iteration, stayed in with `episode_stay`,
    /// each × U(lo, hi).
    episode_enter: f64,
    episode_stay: f64,
    episode_factor: (f64, f64),
    /// Spikes: this probability per iteration, × `spike_scale · U^(−1/spike_shape)` capped at
    /// `spike_cap`.
    spike: f64,
    spike_scale: f64,
    spike_shape: f64,
    spike_cap: f64,
}

impl SweepNoise {
    const SHARED: SweepNoise = SweepNoise {
        run_sigma: 0.015,
        iter_sigma: 0.02,
        iter_sigma_latency: 0.03,
        episode_enter: 0.002,
        episode_stay: 0.95,
        episode_factor: (1.10, 1.25),
        spike: 0.003,
        spike_scale: 1.5,
        spike_shape: 2.0,
        spike_cap: 10.0,
    };

    /// The generator's time model (`testkit::nccl_tests`): 10 µs of latency plus the bytes at
    /// 100 GB/s; a point's latency share sets its per-iteration σ.
    fn sigma(&self, size: u64) -> f64 {
        const LATENCY_US: f64 = 10.0;
        let share = LATENCY_US / (LATENCY_US + size as f64 / 1e5);
        self.iter_sigma + self.iter_sigma_latency * share
    }

    /// Multiplies every per-iteration time of `run`'s sweep by this noise, sets each point's
    /// summary to the noisy mean (rounded as nccl-tests prints it, bandwidths with it), and
    /// without `-I` (`per_iteration` false) leaves that summary as the point's one sample.
    fn apply(&self, run: &mut RunResult, rng: &mut Rng, per_iteration: bool) {
        let sweep = run.sweep.as_mut().expect("a converted sweep");
        let level = (self.run_sigma * rng.normal()).exp();
        let mut slow: Option<f64> = None;
        // The points in the order nccl-tests runs them: size by size, out of place, then in place.
        for p in &mut sweep.points {
            let sigma = self.sigma(p.key.size);
            for s in &mut p.samples_ms {
                slow = match slow {
                    Some(f) if rng.next_f64() < self.episode_stay => Some(f),
                    Some(_) => None,
                    None if rng.next_f64() < self.episode_enter => {
                        let (lo, hi) = self.episode_factor;
                        Some(lo + (hi - lo) * rng.next_f64())
                    }
                    None => None,
                };
                let spike = if rng.next_f64() < self.spike {
                    // 1 − u lies in (0, 1], so the power is finite.
                    (self.spike_scale * (1.0 - rng.next_f64()).powf(-1.0 / self.spike_shape)).min(self.spike_cap)
                } else {
                    1.0
                };
                *s *= level * (sigma * rng.normal()).exp() * slow.unwrap_or(1.0) * spike;
            }
            let mean_us = 1e3 * p.samples_ms.iter().sum::<f64>() / p.samples_ms.len() as f64;
            let time_us = ((mean_us * 100.0).round() / 100.0).max(0.01);
            let scale = p.time_us / time_us;
            p.alg_bw *= scale;
            p.bus_bw *= scale;
            p.time_us = time_us;
            if !per_iteration {
                p.samples_ms = vec![time_us * 1e-3];
                p.last.clear();
            }
        }
        sweep.per_iteration = per_iteration;
    }
}

/// The nccl-tests section's baseline sizes, iterations per point and one-size slowdowns.
const SWEEP_BASELINES: [usize; 2] = [5, 10];
const SWEEP_ITERATIONS: [usize; 2] = [50, 200];
const SWEEP_SLOWER: [f64; 2] = [1.05, 1.10];

/// One nccl-tests cell: a baseline of `baseline_runs` sweeps and one current sweep.
#[derive(Debug, Clone, Copy)]
struct SweepCell {
    iterations: usize,
    baseline_runs: usize,
    /// The current sweep's one slowed size's factor (`NcclTestsSpec::slower`; the size is the
    /// trial's index modulo the sweep's sizes); `None`: A/A.
    slower: Option<f64>,
    /// `-I 1`: per-iteration times; without, each point holds its summary time alone.
    per_iteration: bool,
    noise: SweepNoise,
    /// A diagnostic cell's name: the noise with parts switched off.
    diagnostic: Option<&'static str>,
}

impl SweepCell {
    fn new(iterations: usize, baseline_runs: usize, slower: Option<f64>) -> SweepCell {
        SweepCell {
            iterations,
            baseline_runs,
            slower,
            per_iteration: true,
            noise: SweepNoise::SHARED,
            diagnostic: None,
        }
    }

    fn without_i(self) -> SweepCell {
        SweepCell { per_iteration: false, ..self }
    }

    /// A diagnostic: the noise without its run level.
    fn without_run_level(self) -> SweepCell {
        let noise = SweepNoise { run_sigma: 0.0, ..self.noise };
        SweepCell { noise, diagnostic: Some("no run level"), ..self }
    }

    /// A diagnostic: the noise without its slow episodes.
    fn without_episodes(self) -> SweepCell {
        let noise = SweepNoise { episode_enter: 0.0, ..self.noise };
        SweepCell { noise, diagnostic: Some("no episodes"), ..self }
    }

    /// A diagnostic: the per-iteration log-normal noise alone (no run level, episodes or spikes).
    fn iteration_noise_only(self) -> SweepCell {
        let noise = SweepNoise { run_sigma: 0.0, episode_enter: 0.0, spike: 0.0, ..self.noise };
        SweepCell { noise, diagnostic: Some("iteration noise only"), ..self }
    }

    fn label(&self) -> String {
        let effect = self.slower.map_or("A/A".to_string(), |f| format!("one size +{:.0} %", 100.0 * (f - 1.0)));
        let form = if self.per_iteration { "" } else { " without -I" };
        let diagnostic = self.diagnostic.map_or(String::new(), |d| format!(", {d} (diagnostic)"));
        format!("nccl-tests: {effect}{form}, n = {}, {}-run baseline{diagnostic}", self.iterations, self.baseline_runs)
    }

    /// The row's short name in the section's tables.
    fn at(&self) -> String {
        let form = if self.per_iteration { "" } else { ", no -I" };
        let diagnostic = self.diagnostic.map_or(String::new(), |d| format!(", {d}"));
        format!("n = {}, {}-run{form}{diagnostic}", self.iterations, self.baseline_runs)
    }
}

/// Counts over an nccl-tests cell's trials.
#[derive(Debug, Clone, Default)]
struct SweepTally {
    trials: usize,
    /// Any point blocked (`comparison.regression`).
    regression: usize,
    /// Blocked with every regressed point at the slowed size.
    caught: usize,
    /// Blocked with some regressed point at another size.
    elsewhere: usize,
    collect_more: usize,
    /// Verdict `accept` without `regression`.
    accept: usize,
    /// The MDE of the slowed size's out-of-place point (A/A: the comparison's, its primary
    /// point's), where it had one, and their sum.
    mde_known: usize,
    mde_sum: f64,
    /// Per slowed size: trials and caught.
    by_size: BTreeMap<u64, (usize, usize)>,
    /// How often each point (size, placement) was regressed.
    blocked_at: BTreeMap<(u64, String), usize>,
}

impl SweepTally {
    fn add(&mut self, o: SweepTally) {
        self.trials += o.trials;
        self.regression += o.regression;
        self.caught += o.caught;
        self.elsewhere += o.elsewhere;
        self.collect_more += o.collect_more;
        self.accept += o.accept;
        self.mde_known += o.mde_known;
        self.mde_sum += o.mde_sum;
        for (k, (n, c)) in o.by_size {
            let e = self.by_size.entry(k).or_default();
            e.0 += n;
            e.1 += c;
        }
        for (k, v) in o.blocked_at {
            *self.blocked_at.entry(k).or_default() += v;
        }
    }

    fn share(&self, k: usize) -> f64 {
        100.0 * k as f64 / self.trials.max(1) as f64
    }

    fn note(&self) -> String {
        if self.trials == 0 {
            return String::new();
        }
        let mde = if self.mde_known > 0 {
            format!("{:.2} %", 100.0 * self.mde_sum / self.mde_known as f64)
        } else {
            "—".to_string()
        };
        format!(
            "blocked {:.1} %, elsewhere {:.1} %, collect_more {:.1} %, accept {:.1} %, mean MDE {mde}, MDE none {:.0} %",
            self.share(self.regression),
            self.share(self.elsewhere),
            self.share(self.collect_more),
            self.share(self.accept),
            self.share(self.trials - self.mde_known)
        )
    }
}

/// One nccl-tests trial: deterministic in `(cell_id, trial)`. Each sweep draws its generator
/// seed and its noise stream from the trial's seeds, the baseline's first.
fn sweep_trial(cell: &SweepCell, cell_id: u64, trial: u64, opts: &CompareOptions) -> SweepTally {
    let mut seeds = Rng::new((cell_id << 32) ^ trial ^ 0x5EE9_0000_0000_0000);
    let sizes = NcclTestsSpec::sweep(0).sizes;
    let slowed = cell.slower.map(|f| (sizes[trial as usize % sizes.len()], f));
    let mut sweep = |slower: Option<(u64, f64)>| {
        let spec = NcclTestsSpec { iterations: cell.iterations, slower, ..NcclTestsSpec::sweep(seeds.next_u64()) };
        let mut run = to_result(&parse(&json(&spec)).expect("the generator's JSON reads"), "2026-12-01T00:00:00Z");
        run.environment_profile = "H200".into();
        cell.noise.apply(&mut run, &mut Rng::new(seeds.next_u64()), cell.per_iteration);
        run
    };
    let runs: Vec<RunResult> = (0..cell.baseline_runs).map(|_| sweep(None)).collect();
    let current = sweep(slowed);
    let c = judge(&Baseline { path: "sim".into(), runs }, &current, opts);
    let regressed: Vec<&MetricComparison> = c.metrics.iter().filter(|m| m.judged.state == State::Regressed).collect();
    let size_of = |m: &MetricComparison| m.point.as_ref().map(|p| p.key.size);
    let at_slowed = |m: &&MetricComparison| slowed.is_some_and(|(s, _)| size_of(m) == Some(s));
    let caught = c.regression && slowed.is_some() && regressed.iter().all(at_slowed);
    let mde = match slowed {
        Some((size, _)) => c
            .metrics
            .iter()
            .find(|m| m.point.as_ref().is_some_and(|p| p.key.size == size && p.key.placement == "out_of_place"))
            .and_then(|m| m.mde),
        None => c.mde,
    };
    SweepTally {
        trials: 1,
        regression: usize::from(c.regression),
        caught: usize::from(caught),
        elsewhere: usize::from(c.regression && !regressed.iter().all(at_slowed)),
        collect_more: usize::from(c.verdict == Decision::CollectMoreEvidence),
        accept: usize::from(c.verdict == Decision::Accept && !c.regression),
        mde_known: usize::from(mde.is_some()),
        mde_sum: mde.unwrap_or(0.0),
        by_size: slowed.map(|(s, _)| (s, (1, usize::from(caught)))).into_iter().collect(),
        blocked_at: regressed
            .iter()
            .filter_map(|m| m.point.as_ref().map(|p| ((p.key.size, p.key.placement.clone()), 1)))
            .collect(),
    }
}

/// The nccl-tests section (every cell's label opens with `nccl-tests`): A/A and one size slowed
/// on sweeps with and without per-iteration times, the per-size grid and what blocked.
fn nccl_tests(runner: &mut Runner) {
    let started = Instant::now();
    let points = 2 * NcclTestsSpec::sweep(0).sizes.len();
    let mut lines = Vec::new();
    let mut aa_cells = Vec::new();
    for runs in SWEEP_BASELINES {
        for n in SWEEP_ITERATIONS {
            let cell = SweepCell::new(n, runs, None);
            let t = runner.sweep(cell);
            lines.push(
                Line::rate(
                    format!("A/A blocked (any of {points} points)  {}", cell.at()),
                    Target::AtMost(1.0),
                    t.regression,
                    t.trials,
                )
                .note(t.note()),
            );
            aa_cells.push((cell, t));
        }
    }
    let mut slowed_cells = Vec::new();
    for factor in SWEEP_SLOWER {
        for runs in SWEEP_BASELINES {
            for n in SWEEP_ITERATIONS {
                let cell = SweepCell::new(n, runs, Some(factor));
                let t = runner.sweep(cell);
                let what = format!("+{:.0} %", 100.0 * (factor - 1.0));
                let caught = format!("{what} one size caught (that size alone)  {}", cell.at());
                let caught = if factor == 1.05 && runs == BASELINE_RUNS {
                    Line::rate(caught, Target::AtLeast(95.0), t.caught, t.trials)
                } else {
                    Line::info(caught, t.caught, t.trials)
                };
                lines.push(caught.note(t.note()));
                lines.push(Line::rate(
                    format!("{what} one size not caught but answered accept  {}", cell.at()),
                    Target::AtMost(5.0),
                    t.accept,
                    t.trials,
                ));
                slowed_cells.push((cell, t));
            }
        }
    }
    for runs in SWEEP_BASELINES {
        for n in SWEEP_ITERATIONS {
            let cell = SweepCell::new(n, runs, None).without_i();
            let t = runner.sweep(cell);
            lines.push(
                Line::rate(
                    format!("A/A blocked (any of {points} points)  {}", cell.at()),
                    Target::AtMost(0.0),
                    t.regression,
                    t.trials,
                )
                .note(t.note()),
            );
            lines.push(Line::info(
                format!("A/A answered collect_more_evidence  {}", cell.at()),
                t.collect_more,
                t.trials,
            ));
        }
    }
    let cell = SweepCell::new(200, BASELINE_RUNS, Some(1.10)).without_i();
    let t = runner.sweep(cell);
    lines.push(Line::info(format!("+10 % one size caught  {}", cell.at()), t.caught, t.trials).note(t.note()));
    lines.push(Line::rate(
        format!("+10 % one size not caught but answered accept  {}", cell.at()),
        Target::AtMost(5.0),
        t.accept,
        t.trials,
    ));
    for diagnostic in [SweepCell::without_run_level, SweepCell::iteration_noise_only] {
        for n in SWEEP_ITERATIONS {
            let cell = diagnostic(SweepCell::new(n, BASELINE_RUNS, Some(1.05)));
            let t = runner.sweep(cell);
            lines.push(Line::info(format!("+5 % one size caught  {}", cell.at()), t.caught, t.trials).note(t.note()));
            slowed_cells.push((cell, t));
        }
    }
    for runs in SWEEP_BASELINES {
        let cell = SweepCell::new(50, runs, None).without_episodes();
        let t = runner.sweep(cell);
        lines.push(
            Line::info(format!("A/A blocked (any of {points} points)  {}", cell.at()), t.regression, t.trials)
                .note(t.note()),
        );
        aa_cells.push((cell, t));
    }
    println!(
        "\nnccl-tests (`nccl-tests`): all_reduce sweeps of {points} points (8 sizes 1 KiB–16 MiB × 2 placements, \
         2 processes, NCCL_ALGO/PROTO pinned) under a shared runner's noise (run level σ {:.1} %, per-iteration σ \
         2–5 %, slow episodes, spikes), one Holm family per sweep; \"blocked\" = any point, \"elsewhere\" = a point \
         at another size than the slowed one",
        100.0 * SweepNoise::SHARED.run_sigma
    );
    print_table(&lines);

    println!(
        "\nnccl-tests: one size slowed, caught (that size alone) by the slowed size (each size 1/8 of the trials)"
    );
    let sizes = NcclTestsSpec::sweep(0).sizes;
    let mut header = vec!["cell".to_string()];
    header.extend(sizes.iter().map(|&s| commgate_core::units::bytes(s)));
    let rows: Vec<Vec<String>> = slowed_cells
        .iter()
        .map(|(cell, t)| {
            let mut row = vec![format!("+{:.0} % {}", 100.0 * (cell.slower.unwrap_or(1.0) - 1.0), cell.at())];
            row.extend(sizes.iter().map(|s| match t.by_size.get(s) {
                Some(&(n, c)) if n > 0 => format!("{:.0} %", 100.0 * c as f64 / n as f64),
                _ => "-".to_string(),
            }));
            row
        })
        .collect();
    print_grid(&header, &rows);

    println!("\nnccl-tests: what blocked in the A/A cells (point: times regressed)");
    for (cell, t) in aa_cells.iter().filter(|(_, t)| t.regression > 0) {
        let at: Vec<String> = t
            .blocked_at
            .iter()
            .map(|((size, placement), k)| {
                format!("{} {} ×{k}", commgate_core::units::bytes(*size), placement.replace('_', "-"))
            })
            .collect();
        println!("  {}: {}/{} blocked; {}", cell.label(), t.regression, t.trials, at.join(", "));
    }
    section_time("nccl-tests", started);
}

/// Runs the cells in order, giving each the next id (its seeds) whether or not the
/// `COMMGATE_GATE_ONLY` filter runs it; a skipped cell tallies no trials.
struct Runner {
    next_id: u64,
    only: Vec<String>,
    trials: usize,
    threads: usize,
    opts: CompareOptions,
    /// Every cell run, by label, for the "what blocked" listing.
    named: Vec<(String, Tally)>,
}

impl Runner {
    /// The next cell's id, or `None` when the filter skips `label`.
    fn next(&mut self, label: &str) -> Option<u64> {
        self.next_id += 1;
        (self.only.is_empty() || self.only.iter().any(|o| label.contains(o.as_str()))).then_some(self.next_id)
    }

    fn cell(&mut self, cell: Cell) -> Tally {
        let label = cell.label();
        let Some(id) = self.next(&label) else { return Tally::default() };
        let t = run_cell(&cell, id, self.trials, self.threads, &self.opts);
        self.named.push((label, t.clone()));
        t
    }

    fn sweep(&mut self, cell: SweepCell) -> SweepTally {
        let Some(id) = self.next(&cell.label()) else { return SweepTally::default() };
        let opts = &self.opts;
        run_trials(self.trials, self.threads, |i| sweep_trial(&cell, id, i, opts), SweepTally::add)
    }

    fn family(&mut self, cell: FamilyCell) -> FamilyTally {
        let Some(id) = self.next(&cell.label()) else { return FamilyTally::default() };
        let opts = &self.opts;
        run_trials(self.trials, self.threads, |i| family_trial(&cell, id, i, opts), FamilyTally::add)
    }
}

fn main() -> ExitCode {
    match bench() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gate_quality: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench() -> Result<(), Box<dyn Error>> {
    // `cargo bench` passes `--bench`; nothing here takes arguments.
    let trials: usize = env_number("COMMGATE_GATE_TRIALS", 1000)?;
    let resamples: usize = env_number("COMMGATE_GATE_RESAMPLES", CompareOptions::default().resamples)?;
    let threads: usize = env_number("COMMGATE_GATE_THREADS", 2)?;
    if trials == 0 || resamples == 0 || threads == 0 {
        return Err("COMMGATE_GATE_TRIALS, COMMGATE_GATE_RESAMPLES and COMMGATE_GATE_THREADS must be ≥ 1".into());
    }
    let opts = CompareOptions { resamples, ..CompareOptions::default() };
    let started = Instant::now();
    println!(
        "gate quality: {trials} trials per cell, baseline = {BASELINE_RUNS} runs (informational rows: 1 run), \
         {resamples} bootstrap resamples per comparison{}, {threads} threads",
        if resamples == CompareOptions::default().resamples { " (the default)" } else { " (NOT the default)" }
    );
    println!(
        "compare options: min_effect {} %, alpha {}, level {}, min_samples {}, p95_min_samples {}\n",
        100.0 * opts.min_effect,
        opts.alpha,
        opts.level,
        opts.min_samples,
        opts.p95_min_samples
    );
    let only: Vec<String> = std::env::var("COMMGATE_GATE_ONLY")
        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect())
        .unwrap_or_default();
    let mut runner = Runner { next_id: 0, only, trials, threads, opts: opts.clone(), named: Vec::new() };
    let mut run = |cell: Cell| runner.cell(cell);

    // A/A over every model × n.
    let mut aa: Vec<(NoiseModel, usize, Tally)> = Vec::new();
    for model in NoiseModel::ALL {
        for n in A_A_SIZES {
            aa.push((model, n, run(Cell::new(model, n, Effect::NONE))));
        }
    }
    let shift5 = Effect::shift(0.05);
    let tail = Effect::tail(0.10, 1.30);
    let power_quiet = run(Cell::new(NoiseModel::QuietLogNormal, 100, shift5));
    let power_shift = run(Cell::new(NoiseModel::RunLevelShift, 100, shift5).spread(0.01));
    let shift8 = Effect::shift(0.08);
    let power8_quiet = run(Cell::new(NoiseModel::QuietLogNormal, 100, shift8));
    let power8_shift = run(Cell::new(NoiseModel::RunLevelShift, 100, shift8).spread(0.01));
    let comm8 = run(Cell::phase(NoiseModel::QuietLogNormal, 100, Schedule::CommOnly, 1.08));
    let compute8 = run(Cell::phase(NoiseModel::QuietLogNormal, 100, Schedule::ComputeOnly, 1.08));
    let tail_quiet = run(Cell::new(NoiseModel::QuietLogNormal, 200, tail));
    let below: Vec<(NoiseModel, Tally)> =
        NoiseModel::ALL.iter().map(|&m| (m, run(Cell::new(m, 100, Effect::shift(0.015))))).collect();
    let pooled_quiet = run(Cell::new(NoiseModel::QuietLogNormal, 100, shift5).pooled());
    let pooled_shift = run(Cell::new(NoiseModel::RunLevelShift, 100, shift5).spread(0.01).pooled());
    let pooled_tail = run(Cell::new(NoiseModel::QuietLogNormal, 200, tail).pooled());
    let pooled_aa: Vec<(NoiseModel, Tally)> =
        NoiseModel::ALL.iter().map(|&m| (m, run(Cell::new(m, 100, Effect::NONE).pooled()))).collect();

    let worst_aa = aa.iter().max_by_key(|(_, _, t)| t.regression).expect("cells");
    let quiet100 = &aa.iter().find(|(m, n, _)| *m == NoiseModel::QuietLogNormal && *n == 100).expect("cell").2;
    let worst_below = below.iter().max_by_key(|(_, t)| t.regression).expect("cells");
    let worst_pooled_aa = pooled_aa.iter().max_by_key(|(_, t)| t.regression).expect("cells");

    let lines = vec![
        Line::rate(
            format!(
                "A/A false regressions, every model, n = 30…200 (worst: {}, n = {})",
                worst_aa.0.name(),
                worst_aa.1
            ),
            Target::AtMost(1.0),
            worst_aa.2.regression,
            worst_aa.2.trials,
        ),
        Line::rate(
            "+5 % median shift detected, n = 100, quiet_lognormal",
            Target::AtLeast(95.0),
            power_quiet.regression,
            power_quiet.trials,
        ),
        Line::rate(
            "+5 % median shift detected, n = 100, run_level_shift ±1 %",
            Target::AtLeast(95.0),
            power_shift.regression,
            power_shift.trials,
        ),
        Line::info("+8 % median shift detected, n = 100, quiet", power8_quiet.regression, power8_quiet.trials),
        Line::info(
            "+8 % median shift detected, n = 100, run_level_shift ±1 %",
            power8_shift.regression,
            power8_shift.trials,
        ),
        Line::info(
            "+5 % step shift, both phases unchanged: named `overlap`, n = 100, quiet",
            times_named(&power_quiet, StepCause::Overlap),
            power_quiet.trials,
        ),
        Line::info("comm_only alone +8 % detected, n = 100, quiet", comm8.regression, comm8.trials),
        Line::info(
            "comm_only alone +8 %: named `communication`, n = 100, quiet",
            times_named(&comm8, StepCause::Communication),
            comm8.trials,
        ),
        Line::info("compute_only alone +8 % detected, n = 100, quiet", compute8.regression, compute8.trials),
        Line::info(
            "compute_only alone +8 %: named `compute`, n = 100, quiet",
            times_named(&compute8, StepCause::Compute),
            compute8.trials,
        ),
        Line::rate(
            "tail regression (10 % of steps ×1.30) detected, n = 200, quiet",
            Target::AtLeast(80.0),
            tail_quiet.regression,
            tail_quiet.trials,
        ),
        Line::rate(
            "A/A runs called inconclusive (collect_more_evidence), n = 100, quiet",
            Target::AtMost(10.0),
            quiet100.collect_more,
            quiet100.trials,
        ),
        Line::rate(
            format!("+1.5 % shift (below δ) blocked, every model, n = 100 (worst: {})", worst_below.0.name()),
            Target::AtMost(1.0),
            worst_below.1.regression,
            worst_below.1.trials,
        ),
        Line::info("[1-run baseline] +5 % detected, n = 100, quiet", pooled_quiet.regression, pooled_quiet.trials),
        Line::info(
            "[1-run baseline] +5 % detected, n = 100, run_level_shift ±1 %",
            pooled_shift.regression,
            pooled_shift.trials,
        ),
        Line::info("[1-run baseline] tail detected, n = 200, quiet", pooled_tail.regression, pooled_tail.trials),
        Line::info(
            format!("[1-run baseline] A/A false regressions, n = 100 (worst: {})", worst_pooled_aa.0.name()),
            worst_pooled_aa.1.regression,
            worst_pooled_aa.1.trials,
        ),
    ];
    print_table(&lines);
    print_table_titled("\nShort history (5-run baseline), heavy outliers, n = 100", &short_history(&mut runner));
    print_table_titled(
        &format!("\nSeveral workloads ({FAMILY_WORKLOADS}, one Holm family), 10-run baselines"),
        &several_workloads(&mut runner),
    );

    println!(
        "\nA/A false regressions by model × n (10-run baseline; target ≤ 1 %), and A/A verdict collect_more_evidence"
    );
    let mut sub = Vec::new();
    for (model, n, t) in &aa {
        sub.push(Line::rate(
            format!("A/A regression  {} n = {n}", model.name()),
            Target::AtMost(1.0),
            t.regression,
            t.trials,
        ));
        sub.push(Line::info(format!("A/A collect_more_evidence  {} n = {n}", model.name()), t.collect_more, t.trials));
    }
    print_table(&sub);

    println!("\nBelow δ (+1.5 % shift, n = 100; target ≤ 1 % blocked) and 1-run-baseline A/A, by model");
    let mut sub = Vec::new();
    for (model, t) in &below {
        sub.push(Line::rate(format!("+1.5 % blocked  {}", model.name()), Target::AtMost(1.0), t.regression, t.trials));
    }
    for (model, t) in &pooled_aa {
        sub.push(Line::info(format!("[1-run baseline] A/A regression  {}", model.name()), t.regression, t.trials));
    }
    print_table(&sub);

    println!(
        "\nA/A quiet n = 100: primary metric inconclusive in {}",
        rate(quiet100.primary_inconclusive, quiet100.trials)
    );
    println!("[the first cells: {:.1} s]", started.elapsed().as_secs_f64());

    families(&mut runner);
    nccl_tests(&mut runner);
    println!("\nWhat blocked (cells with any regression; mean ratio and mean CI lower end of the regressed metric)");
    for (name, t) in &runner.named {
        if t.regression == 0 {
            continue;
        }
        let parts: Vec<String> = t
            .regressed_by_metric
            .iter()
            .map(|(metric, b)| {
                let k = b.count as f64;
                format!("{metric} ×{} (ratio {:.3}, lo {:.3})", b.count, b.ratio_sum / k, b.lo_sum / k)
            })
            .collect();
        let causes: Vec<String> = t.causes.iter().map(|(c, k)| format!("{c} ×{k}")).collect();
        println!(
            "  {name}: {}/{} blocked, mean δ {:.2} %; {}; named: {}",
            t.regression,
            t.trials,
            100.0 * t.delta_sum / t.trials as f64,
            parts.join(", "),
            causes.join(", ")
        );
    }
    println!("wall time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
