//! Gate quality, measured (`harness = false`): replays `commgate::compare::compare` on simulated
//! A/A and A/B data from `commgate::testkit::simulate` and prints the targets table of
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

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a benchmark stops by panicking")]

use std::collections::BTreeMap;
use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use commgate::baseline::Baseline;
use commgate::compare::{prepare, Cause, CompareOptions, State};
use commgate::decide::comparison::{compare, judge_together};
use commgate::decide::Decision;
use commgate::result::{RunResult, Schedule};
use commgate::stats::rng::Rng;
use commgate::testkit::simulate::{synthetic_run_with_spread, Effect, NoiseModel};

#[path = "support/targets.rs"]
mod targets;
use targets::{print_table, rate, Line, Target};

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
}

impl Cell {
    fn new(model: NoiseModel, n: usize, effect: Effect) -> Cell {
        Cell { model, n, effect, run_spread: model.default_run_spread(), baseline_runs: BASELINE_RUNS, phase: None }
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
        } else if *e == Effect::NONE {
            "A/A".to_string()
        } else if e.tail_fraction > 0.0 {
            format!("tail {:.0} % ×{:.2}", 100.0 * e.tail_fraction, e.tail_factor)
        } else {
            format!("+{:.1} %", 100.0 * e.median_shift)
        };
        format!(
            "{effect} {} (run spread ±{:.0} %) n = {}, {}-run baseline",
            self.model.name(),
            100.0 * self.run_spread,
            self.n,
            self.baseline_runs
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
    }
}

/// One trial: deterministic in `(cell_id, trial)`.
fn trial(cell: &Cell, cell_id: u64, trial: u64, opts: &CompareOptions) -> Tally {
    let mut seeds = Rng::new((cell_id << 32) ^ trial ^ 0x6A7E_0000_0000_0000);
    let runs = (0..cell.baseline_runs)
        .map(|_| synthetic_run_with_spread(cell.model, cell.n, &Effect::NONE, cell.run_spread, seeds.next_u64()))
        .collect();
    let mut current = synthetic_run_with_spread(cell.model, cell.n, &cell.effect, cell.run_spread, seeds.next_u64());
    if let Some((row, factor)) = cell.phase {
        slow_down(&mut current, row, factor);
    }
    let c = compare(&Baseline { path: "sim".into(), runs }, &current, opts);
    Tally {
        trials: 1,
        regression: usize::from(c.regression),
        collect_more: usize::from(c.verdict == Decision::CollectMoreEvidence),
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
fn times_named(t: &Tally, cause: Cause) -> usize {
    t.causes.get(cause.as_str()).copied().unwrap_or(0)
}

/// All trials of one cell, split over `threads` scoped threads.
fn run_cell(cell: &Cell, cell_id: u64, trials: usize, threads: usize, opts: &CompareOptions) -> Tally {
    run_trials(trials, threads, |i| trial(cell, cell_id, i, opts), Tally::add)
}

/// Trials `0..trials` of `one`, split over `threads` scoped threads and summed with `add`.
fn run_trials<T: Default + Send>(
    trials: usize,
    threads: usize,
    one: impl Fn(u64) -> T + Sync,
    add: fn(&mut T, T),
) -> T {
    let mut total = T::default();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let one = &one;
                s.spawn(move || {
                    let mut tally = T::default();
                    for i in (t..trials).step_by(threads) {
                        add(&mut tally, one(i as u64));
                    }
                    tally
                })
            })
            .collect();
        for h in handles {
            add(&mut total, h.join().expect("a trial thread panicked"));
        }
    });
    total
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

    fn family(&mut self, cell: FamilyCell) -> FamilyTally {
        let Some(id) = self.next(&cell.label()) else { return FamilyTally::default() };
        let opts = &self.opts;
        run_trials(self.trials, self.threads, |i| family_trial(&cell, id, i, opts), FamilyTally::add)
    }
}

fn env_number<T: std::str::FromStr>(name: &str, default: T) -> Result<T, Box<dyn Error>> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map_err(|_| format!("{name}={v:?} is not a positive whole number").into()),
        Err(_) => Ok(default),
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
            times_named(&power_quiet, Cause::Overlap),
            power_quiet.trials,
        ),
        Line::info("comm_only alone +8 % detected, n = 100, quiet", comm8.regression, comm8.trials),
        Line::info(
            "comm_only alone +8 %: named `communication`, n = 100, quiet",
            times_named(&comm8, Cause::Communication),
            comm8.trials,
        ),
        Line::info("compute_only alone +8 % detected, n = 100, quiet", compute8.regression, compute8.trials),
        Line::info(
            "compute_only alone +8 %: named `compute`, n = 100, quiet",
            times_named(&compute8, Cause::Compute),
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
