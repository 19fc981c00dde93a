//! `commgate compare`'s estimates: is each metric of the current run slower than its baseline,
//! faster, the same, or is the evidence not enough? This module computes the per-metric
//! estimates and applies the state rules it is handed ([`StateRules`]: `decide::metric_state`'s,
//! `docs/gate.md`) without naming them; the comparison's verdict, headline and advice are the decision layer's too
//! (`decide::comparison`), and renderers only display them.
//!
//! The run is the unit of evidence: clocks, NCCL's algorithm choice and placement move a whole
//! run, so steps of one run are not independent replicates. Each row of each run is first bounded
//! (`bound.rs`) and its warm-up cut off (`warmup.rs`, MSER-5); the comparable baseline runs are
//! those on this hardware and, where recorded, with NCCL's same choice (`modes.rs`); each run
//! gives one Harrell–Davis value per metric, and the current runs (one, or K with `check --runs`)
//! are contrasted with the baseline runs grouped by runner (`stats::runlevel`), with a Student-t
//! interval and one-sided p-values. With 1–2 baseline runs and one current run the spread between
//! runs is unknown: the steps are compared directly to show the effect (`pooled`), but nothing
//! blocks.
//!
//! A metric is `regressed` only when its Holm-adjusted p-value (family α = 0.01) is significant
//! *and* its whole 95 % interval lies above 1 + δ, δ the user's equivalence margin (`min_effect`,
//! 3 %), and nothing says it cannot block: too few runs, an unseen NCCL choice, a runner the
//! baseline cannot judge, what one current run cannot confirm (`one_run.rs`), or a row of the
//! current run serially dependent beyond the typical baseline run (the dependence guard:
//! Ljung–Box on ranks, `estimate::dependence`). Each estimate also carries its minimum detectable
//! effect, the smallest slowdown it would block with 95 % power.
//!
//! Exposed communication is a small difference of two step times, so its change is reported as
//! a share of the baseline step (overlap median), not of itself: a 1.5 % slower step would
//! otherwise read as "+9 % exposed" and block.

mod bound;
mod cause;
mod estimate;
mod evidence;
pub mod family;
mod judged;
pub mod limits;
mod modes;
pub(crate) mod nullable;
mod one_run;
pub mod paired;
pub mod sweep;
mod throughput;
pub mod traces;
mod warmup;

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::baseline::Baseline;
pub use bound::SAMPLE_LIMIT;
use bound::{Bounder, Whose};
pub use cause::{mover, Moves, StepCause};
use commgate_core::result::{EvidenceLevel, RunResult, Schedule, SoftwareChange, Workload};
use commgate_core::units::{change, interval, plural};
use commgate_core::vocab::Decision;
use commgate_stats::interval::robust_spread;
use commgate_stats::rng::Rng;
use commgate_stats::runlevel::group_ids;
use estimate::{bootstrap_run, history, pooled, Estimate, History, Metric, RunRows, Weights, METRICS};
pub use evidence::{MetricEvidence, MetricState, StateRules, LOOKS_REGRESSED};
pub use family::{adjust_together, adjust_with_traces, Adjusted, Pending};
pub use judged::{Judged, OwnDelta, SharedDelta};
pub use throughput::{Throughput, ThroughputKind};

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
            resamples: commgate_stats::bootstrap::DEFAULT_RESAMPLES,
            seed: 0x00C0_FFEE,
            min_samples: 30,
            p95_min_samples: commgate_stats::quantile::P95_MIN_SAMPLES,
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

/// What is compared of a row: its median, its P95, or (of the overlap row) the exposed
/// communication, overlap median minus compute-only median.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    Median,
    P95,
    ExposedCommMs,
}

impl Statistic {
    pub fn as_str(self) -> &'static str {
        match self {
            Statistic::Median => "median",
            Statistic::P95 => "p95",
            Statistic::ExposedCommMs => "exposed_comm_ms",
        }
    }
}

/// Which regime judged a metric (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    History,
    Pooled,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::History => "history",
            Method::Pooled => "pooled",
        }
    }
}

impl fmt::Display for Statistic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One compared statistic: which, its judgement, and what only a benchmark metric has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricComparison {
    pub row: Schedule,
    pub statistic: Statistic,
    #[serde(flatten)]
    pub judged: Judged,
    /// Whether this metric may block a merge (P95 needs enough samples).
    pub can_block: bool,
    /// The primary metric (overlap median) decides between accept and collect_more_evidence.
    pub primary: bool,
    /// Why the state is what it is, when that is not obvious from the numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The `comm_only` median as bus bandwidth, the `compute_only` median as matmul TFLOPS: the
    /// same test shown as a throughput (higher is better), never a test of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Throughput>,
    /// This metric's minimum detectable effect (the smallest slowdown it would block with 95 %
    /// power), relative; `None` when it cannot block.
    #[serde(default)]
    pub mde: Option<f64>,
    /// The nccl-tests point this metric judged (a sweep's comparison); `row` is then `comm_only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point: Option<sweep::PointRef>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineSummary {
    pub path: String,
    pub runs: usize,
    pub fingerprint_match: bool,
    /// What differs between the newest comparable baseline run's software and the current
    /// run's (driver, CUDA, NCCL, commgate, `NCCL_*`): judged like any change, named in reasons.
    #[serde(default)]
    pub software_changes: Vec<SoftwareChange>,
    /// Robust spread of the baseline runs' log overlap medians (≥ 3 runs), relative.
    pub spread: Option<f64>,
    /// The slowest baseline run's overlap median over the fastest's (≥ 2 runs): one run that
    /// disagrees with the rest shows here, not in the robust spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<f64>,
    /// How many distinct runners (`provenance.runner`) the compared baseline runs come from; a
    /// run without a recorded runner counts as one of its own.
    #[serde(default)]
    pub runners: usize,
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
    /// Which phase a regression traces to (`null` when nothing regressed); the reasons open with
    /// it in words.
    #[serde(default)]
    pub cause: Option<StepCause>,
    /// What a reviewer reads first, in words: "overlap step 8.1 % slower (95 % CI 7.5–8.8 %) —
    /// blocking" (decided with the verdict, `decide::comparison`).
    #[serde(default)]
    pub headline: String,
    /// How many current runs were judged (`check --runs K`; 1 otherwise).
    #[serde(default = "one")]
    pub current_runs: usize,
    /// The minimum detectable effect of this comparison: the smallest slowdown of the primary
    /// metric (overlap median) it would block with 95 % power, relative (0.045 = 4.5 %). `None`
    /// when it cannot block at all (1–2 baseline runs and one current run, other hardware).
    #[serde(default)]
    pub mde: Option<f64>,
    /// When the comparison could not decide: how many more runs would let it (gate.md,
    /// "Minimum detectable effect").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_needed: Option<RunsNeeded>,
    pub reasons: Vec<String>,
    /// An nccl-tests sweep's program, new points and slowest process (its metrics are per point).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<sweep::SweepSummary>,
}

fn one() -> usize {
    1
}

/// More runs that would let an undecided comparison decide: either more baseline runs with the
/// current side as it is, or more current runs (`check --runs K`) with the baseline as it is.
/// `None` in a field: no number up to the search's limit would do (the spread is too large).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunsNeeded {
    /// Baseline runs to add (`commgate baseline update` after each).
    pub more_baseline_runs: Option<usize>,
    /// Current runs to judge together (`check --runs K`).
    pub current_runs: Option<usize>,
}

/// Everything of a comparison before Holm's correction: the estimates and their raw p-values
/// ([`family`] adjusts them, alone or together with other comparisons', and finishes).
pub fn prepare(baseline: &Baseline, current: &RunResult, opts: &CompareOptions) -> Pending {
    prepare_runs(baseline, std::slice::from_ref(current), opts)
}

/// [`prepare`] with the current side as K runs of the same workload (`check --runs K`), judged
/// together: the first is the one the report shows. `current` must not be empty.
pub fn prepare_runs(baseline: &Baseline, current: &[RunResult], opts: &CompareOptions) -> Pending {
    prepare_runs_kept(baseline, current, opts, &[])
}

/// [`prepare_runs`] with the ceilings the store kept for nccl-tests sweeps (`baseline::ceiling`),
/// which outlive the runs that reached them.
pub fn prepare_runs_kept(
    baseline: &Baseline,
    current: &[RunResult],
    opts: &CompareOptions,
    kept: &[crate::baseline::ceiling::Ceiling],
) -> Pending {
    let delta = opts.min_effect;
    let Some(first) = current.first() else {
        return Pending::unusable(empty_summary(baseline), delta, "no current run to judge".to_string());
    };
    if first.sweep.is_some() {
        return sweep::prepare(baseline, current, opts, kept);
    }
    let usable = baseline.runs.iter().filter(|r| r.is_usable());
    let same_hardware: Vec<&RunResult> =
        usable.clone().filter(|r| r.hardware.fingerprint == first.hardware.fingerprint).collect();
    let fingerprint_match = !same_hardware.is_empty();
    // Only runs on this hardware are evidence; without any, the others are shown but not judged.
    let runs: Vec<&RunResult> = if fingerprint_match { same_hardware } else { usable.collect() };
    let choice = modes::like_with_like(&runs, first, current.len());
    // Rows over the sample limit are judged on a subsample (bound.rs); the rest is untouched.
    let mut bounder = Bounder::new(opts.seed);
    let bounded: Vec<Cow<'_, RunResult>> =
        runs.iter().enumerate().map(|(i, r)| bounder.run(r, Whose::Baseline(i))).collect();
    // Then each row's warm-up is cut off (warmup.rs), baseline and current alike.
    let trimmed: Vec<Cow<'_, RunResult>> = bounded.iter().map(|r| warmup::trim(r, opts.min_samples).0).collect();
    let runs: Vec<&RunResult> = trimmed.iter().map(AsRef::as_ref).collect();
    let software_changes = runs.last().map(|newest| newest.software.changes_to(&first.software)).unwrap_or_default();
    let mut w = Weights::default();
    let base_rows: Vec<RunRows> = runs.iter().map(|r| RunRows::of(r)).collect();
    // The primary row's medians: the step's (overlap), or a sweep point's own times.
    let point = first.is_sweep_point();
    let medians: Vec<f64> =
        base_rows.iter().map(|r| w.quantile(if point { &r.comm } else { &r.overlap }, 0.5)).collect();
    let spread = (medians.len() >= 3).then(|| robust_spread(&medians.iter().map(|m| m.ln()).collect::<Vec<_>>()));
    let range = (medians.len() >= 2).then(|| {
        let (lo, hi) = medians.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &m| (lo.min(m), hi.max(m)));
        hi / lo
    });
    let names: Vec<Option<&str>> = runs.iter().map(|r| measured_on(r)).collect();
    let (runner_groups, runner_of_current) = group_ids(&names, measured_on(first));
    // Runs are grouped by runner and, when the current run's choice is shared, by NCCL's choice.
    let keys: Vec<Option<String>> = runs.iter().map(|r| group_key(r, choice.group)).collect();
    let key_refs: Vec<Option<&str>> = keys.iter().map(Option::as_deref).collect();
    let current_key = group_key(first, choice.group);
    let (groups, cur_group) = group_ids(&key_refs, current_key.as_deref());
    let summary = BaselineSummary {
        path: baseline.path.display().to_string(),
        runs: runs.len(),
        fingerprint_match,
        software_changes,
        spread,
        range: range.filter(|r| r.is_finite()),
        runners: recorded_runners(&names),
    };
    if let Some(reason) = current.iter().find_map(|c| unusable(c, runs.len())) {
        return Pending::unusable(summary, delta, reason);
    }
    let bounded_current: Vec<Cow<'_, RunResult>> = current.iter().map(|c| bounder.run(c, Whose::Current)).collect();
    let trims: Vec<(Cow<'_, RunResult>, warmup::Trimmed)> =
        bounded_current.iter().map(|c| warmup::trim(c, opts.min_samples)).collect();
    let currents: Vec<&RunResult> = trims.iter().map(|(c, _)| c.as_ref()).collect();
    let cur_rows: Vec<RunRows> = currents.iter().map(|c| RunRows::of(c)).collect();
    // The first current run (there is one: `first` is its untrimmed self) is the one the pooled
    // regime and the bootstrap floor read, and whose warm-up note is shown.
    let (Some(&first_current), Some(first_rows), Some((_, first_trim))) =
        (currents.first(), cur_rows.first(), trims.first())
    else {
        return Pending::unusable(summary, delta, "no current run to judge".to_string());
    };
    let dependence = estimate::dependence(&currents, &runs);
    // The steps the user recorded (`--repeats`), before the warm-up is cut: what the advice names.
    let recorded: Vec<&RunResult> = bounded_current.iter().map(AsRef::as_ref).collect();
    let one_run = one_run::limits(estimate::ROWS, &recorded, &runs);
    let family = METRICS.iter().filter(|m| applies(**m, first)).count();
    let mut rng = Rng::new(opts.seed);
    let k = base_rows.len();
    let estimates: Vec<Estimate> = if k >= 3 || (current.len() >= 2 && k + current.len() >= 3) {
        let boot = bootstrap_run(first_current, opts.resamples, &mut rng, &mut w);
        let h = History {
            base: &base_rows,
            groups: &groups,
            cur: &cur_rows,
            cur_group,
            floor: &boot,
            within: estimate::noisiest_within(&runs, &mut rng, &mut w),
            family,
            one_run: &one_run,
            cannot_block: choice
                .cannot_block
                .clone()
                .or_else(|| runner_reason(&runs, first, runner_of_current, &runner_groups)),
        };
        METRICS.iter().enumerate().map(|(i, &m)| history(m, i, &h, opts, delta, &mut w)).collect()
    } else {
        let why = choice.cannot_block.clone().unwrap_or_else(|| too_few_runs(k));
        let mut e = pooled(&runs, first_current, first_rows, opts, &mut rng, &mut w);
        e.iter_mut().for_each(|e| e.cannot_block = Some(why.clone()));
        e
    };
    // Holm's family is exactly the metrics judged: one rank's comm_only times a no-op.
    let judged: Vec<(Metric, Estimate)> =
        METRICS.iter().copied().zip(estimates).filter(|(m, _)| applies(*m, first)).collect();
    let hardware = hardware_differs(&runs, first);
    let notes = [bounder.note(), first_trim.note(), choice.note].into_iter().flatten().collect();
    Pending::judging(summary, delta, judged, dependence, first.workload.clone(), hardware, notes, current.len())
}

/// The group a run belongs to: its runner (measured runs), with NCCL's choice when `by_choice`;
/// `None` when neither is recorded.
fn group_key(run: &RunResult, by_choice: bool) -> Option<String> {
    let runner = measured_on(run);
    let choice = run.software.nccl_choice.as_deref().filter(|_| by_choice);
    (runner.is_some() || choice.is_some())
        .then(|| format!("{}\u{1f}{}", runner.unwrap_or_default(), choice.unwrap_or_default()))
}

/// How many distinct recorded runners `names` holds.
fn recorded_runners(names: &[Option<&str>]) -> usize {
    let mut seen: Vec<&str> = names.iter().flatten().copied().collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// The runner whose machine a run's timings come from: `provenance.runner` for measured runs, none
/// for mock runs, whose timings are computed and do not depend on the machine that ran them.
fn measured_on(run: &RunResult) -> Option<&str> {
    (run.evidence_level != EvidenceLevel::Mock).then_some(run.provenance.runner.as_deref()).flatten()
}

/// What a single current run that cannot block should do instead: judge three runs together.
pub(super) const CONFIRM_WITH_RUNS: &str = "confirm with `commgate check --runs 3`";

/// "with 1 baseline run the run-to-run spread is unknown: …" (the pooled regime never blocks).
fn too_few_runs(k: usize) -> String {
    let more = 3 - k.min(2);
    format!(
        "with {k} baseline run{} the run-to-run spread is unknown, so one run cannot confirm a slowdown: record \
         {more} more baseline run{} or confirm with `commgate check --runs {}`",
        plural(k),
        plural(more),
        4 - k.min(3)
    )
}

/// Why the runner layout leaves nothing to judge by, when it does: every baseline run from one
/// runner and the current run from another.
fn runner_reason(
    runs: &[&RunResult],
    current: &RunResult,
    cur_group: Option<usize>,
    groups: &[usize],
) -> Option<String> {
    let one = groups.len() > 1 && groups.iter().all(|g| Some(g) == groups.first());
    if !one || cur_group.is_some() {
        return None;
    }
    let there = runs.first().and_then(|r| r.provenance.runner.as_deref()).unwrap_or("unknown");
    let here = current.provenance.runner.as_deref().unwrap_or("an unrecorded runner");
    Some(format!(
        "every baseline run comes from runner {there:?} and this run from {here:?}: the runner-to-runner spread is \
         unknown; run the gate on {there:?} or record baseline runs on 3 or more runners"
    ))
}

fn empty_summary(baseline: &Baseline) -> BaselineSummary {
    BaselineSummary {
        path: baseline.path.display().to_string(),
        runs: 0,
        fingerprint_match: false,
        software_changes: Vec::new(),
        spread: None,
        range: None,
        runners: 0,
    }
}

/// Whether `m` is judged for `current`: not the collective of a one-rank run, which moves
/// nothing (its bus bandwidth does not apply either).
fn applies(m: Metric, current: &RunResult) -> bool {
    if current.is_sweep_point() {
        // An nccl-tests point is a collective alone: its median is the one metric.
        return m == primary_metric(current);
    }
    m.row() != Schedule::CommOnly || current.workload.world_size > 1
}

/// An nccl-tests point's one metric: its collective's median.
const SWEEP_METRIC: Metric = Metric::Quantile { row: Schedule::CommOnly, p: 0.5 };

/// The metric that decides between accept and collect_more_evidence: the overlap median, or
/// for an nccl-tests point its collective's median.
fn primary_metric(run: &RunResult) -> Metric {
    if run.is_sweep_point() {
        SWEEP_METRIC
    } else {
        METRICS[0]
    }
}

/// The two phase medians, `comm_only` first, as far as they were judged.
fn phases(metrics: &[MetricComparison]) -> Vec<&MetricComparison> {
    [Schedule::CommOnly, Schedule::ComputeOnly]
        .iter()
        .filter_map(|&s| metrics.iter().find(|m| m.row == s && m.statistic == Statistic::Median))
        .collect()
}

/// What [`mover`] reads of the judged metrics.
fn moves(metrics: &[MetricComparison]) -> Moves {
    let phase = |s: Schedule| phases(metrics).into_iter().find(|m| m.row == s).map(|m| m.judged.state);
    let regressed = |s: Schedule| metrics.iter().any(|m| m.row == s && m.judged.state == State::Regressed);
    Moves {
        comm: phase(Schedule::CommOnly),
        compute: phase(Schedule::ComputeOnly),
        overlap_regressed: regressed(Schedule::Overlap),
        serial_regressed: regressed(Schedule::Serial),
    }
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

/// A metric's comparison: its numbers, with the state `rules.metric` decides from them (gate.md,
/// "The four states").
#[expect(clippy::too_many_arguments, reason = "one call site; the judgement reads each of them once")]
fn metric_comparison(
    m: Metric,
    e: &Estimate,
    p_reg: f64,
    p_imp: f64,
    delta: f64,
    dependence: Option<String>,
    workload: &Workload,
    opts: &CompareOptions,
    rules: StateRules,
) -> MetricComparison {
    let decided = (rules.metric)(MetricEvidence {
        p_reg,
        p_imp,
        ci: e.ci,
        delta,
        alpha: opts.alpha,
        cannot_block: e.cannot_block.as_deref(),
        dependence,
        tail_samples: m.is_tail().then(|| e.n_baseline.min(e.n_current)),
        p95_min_samples: opts.p95_min_samples,
    });
    MetricComparison {
        row: m.row(),
        statistic: m.statistic(),
        judged: Judged::of(e, p_reg, p_imp, decided.state, SharedDelta),
        can_block: decided.can_block,
        primary: m == METRICS[0] || (workload.backend == commgate_core::result::sweep::BACKEND && m == SWEEP_METRIC),
        note: decided.vetoed.or_else(|| e.note.clone()),
        throughput: (m.statistic() == Statistic::Median)
            .then(|| throughput::of_median(m.row(), workload, e.baseline, e.current, e.ratio, e.ci))
            .flatten(),
        mde: e.mde.filter(|_| decided.enough_samples),
        point: None,
    }
}

/// "the hardware differs from every baseline run (GPU: H100 there, H200 here): …".
fn hardware_differs(runs: &[&RunResult], current: &RunResult) -> String {
    let what = runs
        .last()
        .and_then(|base| base.hardware.difference(&current.hardware))
        .map_or_else(String::new, |(field, there, here)| format!(" ({field}: {there} there, {here} here)"));
    format!(
        "the hardware differs from every baseline run{what}: record a baseline on this hardware \
         (a software change alone never needs one)"
    )
}

impl MetricComparison {
    /// Why this metric looks regressed but may not block, when it does: "one run of 20 overlap
    /// steps cannot tell a slow episode from a slowdown: …".
    pub fn vetoed(&self) -> Option<&str> {
        self.note.as_deref().and_then(|n| n.strip_prefix(LOOKS_REGRESSED))
    }

    /// "overlap median", "serial P95", "exposed comm".
    pub fn label(&self) -> String {
        if let Some(p) = &self.point {
            return p.key.label(false);
        }
        match self.statistic {
            Statistic::Median => format!("{} median", self.row),
            Statistic::P95 => format!("{} P95", self.row),
            Statistic::ExposedCommMs => "exposed comm".to_string(),
        }
    }
}

/// "overlap median +9.7 % (95 % CI +7.1…+12.2 %)"; exposed communication reads in ms and as a
/// share of the step: "exposed comm +0.069 ms (+8.2 % of the step, 95 % CI +7.5…+8.9 %)".
pub fn describe(m: &MetricComparison) -> String {
    let name = m.label();
    if !m.judged.ratio.is_finite() {
        return name;
    }
    if m.statistic == Statistic::ExposedCommMs {
        let delta_ms = m.judged.current - m.judged.baseline;
        let sign = if delta_ms < 0.0 { "−" } else { "+" };
        return format!(
            "{name} {sign}{:.3} ms ({} of the step, 95 % CI {})",
            delta_ms.abs(),
            change(m.judged.ratio),
            interval(m.judged.ci)
        );
    }
    let throughput = m
        .throughput
        .as_ref()
        .map(|t| format!(", {} {} (95 % CI {})", t.kind.label(), change(t.ratio), interval(t.ci)))
        .unwrap_or_default();
    format!("{name} {} (95 % CI {}){throughput}", change(m.judged.ratio), interval(m.judged.ci))
}

/// What the comparison of a sweep says beyond its points' metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepSummary {
    /// The program (`all_reduce_perf`).
    pub program: String,
    /// Whether the current run had per-iteration times (`-I 1`).
    pub per_iteration: bool,
    /// Points of the current sweep that no baseline run holds: shown, not judged.
    #[serde(default)]
    pub new_points: Vec<commgate_core::result::sweep::PointKey>,
    /// Points the baseline holds that the current sweep did not run.
    #[serde(default)]
    pub missing_points: usize,
    /// The process that was the slowest in most iterations, when it stands out.
    #[serde(default)]
    pub slowest: Option<SlowestProcess>,
}

/// A process nccl-tests timed slowest far more often than chance would have it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowestProcess {
    /// Its index in the run's device report (its rank with one GPU per process).
    pub process: usize,
    /// Its host and device, when the run reported them (untrusted text).
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub device: Option<u64>,
    /// In how many of the counted iterations it was the slowest, and how many were counted.
    pub last: u64,
    pub iterations: u64,
    pub processes: usize,
    /// The one-sided binomial p-value against every process being equally likely.
    pub p_value: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::comparison::judge;
    use commgate_testkit::results as fixtures;
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
        c.metrics
            .iter()
            .find(|m| m.row.as_str() == row && m.statistic.as_str() == statistic)
            .map(|m| m.judged.state)
            .expect("metric")
    }

    #[test]
    fn same_distribution_is_accepted_and_unchanged() {
        let c = judge(&baseline(10, 200), &fixtures::run(&samples(200, 1.0, 7)), &CompareOptions::default());
        assert!(!c.regression, "{c:#?}");
        assert_eq!(c.verdict, Decision::Accept, "{:?}", c.reasons);
        assert_eq!(state(&c, "overlap", "median"), State::Unchanged);
        assert_eq!(c.metrics.len(), 7);
        assert!(c.metrics.iter().all(|m| m.judged.method == Method::History));
        assert_eq!(c.cause, None);
        assert_eq!(c.delta, 0.03);
    }

    #[test]
    fn a_large_shift_is_a_confirmed_regression_with_a_reason() {
        let c = judge(&baseline(10, 200), &fixtures::run(&samples(200, 1.2, 7)), &CompareOptions::default());
        assert!(c.regression);
        assert_eq!(c.verdict, Decision::Tune);
        assert_eq!(state(&c, "overlap", "median"), State::Regressed);
        // Every row of the fixture is 20 % slower: both phases moved, and the reasons say so first.
        assert_eq!(c.cause, Some(StepCause::CommunicationAndCompute));
        assert!(c.reasons[0].contains("→ both the collective"), "{:?}", c.reasons);
        assert!(c.reasons[1].starts_with("overlap median +"), "{:?}", c.reasons);
        assert!(c.reasons[1].contains("above the 3 % floor"), "{:?}", c.reasons);
        let faster = judge(&baseline(10, 200), &fixtures::run(&samples(200, 0.8, 7)), &CompareOptions::default());
        assert_eq!(state(&faster, "overlap", "median"), State::Improved);
        assert!(!faster.regression);
    }

    #[test]
    fn a_one_run_baseline_never_blocks_alone_and_a_confirming_rerun_can() {
        let c = judge(&baseline(1, 200), &fixtures::run(&samples(200, 1.2, 7)), &CompareOptions::default());
        assert!(c.metrics.iter().all(|m| m.judged.method == Method::Pooled));
        assert!(!c.regression, "{:?}", c.reasons);
        assert_eq!(c.verdict, Decision::CollectMoreEvidence);
        assert_eq!(c.mde, None);
        assert!(
            c.reasons.iter().any(|r| r.contains("with 1 baseline run the run-to-run spread is unknown")),
            "{:?}",
            c.reasons
        );
        assert!(c.headline.starts_with("cannot confirm yet: overlap step 20."), "{}", c.headline);
        assert_eq!(c.baseline.spread, None);
        // Two more current runs of the same slowdown: run-level evidence, and it blocks.
        let three: Vec<RunResult> = (0..3).map(|i| fixtures::run(&samples(200, 1.2, 7 + i))).collect();
        let confirmed = crate::decide::comparison::judge_runs(&baseline(1, 200), &three, &CompareOptions::default());
        assert!(confirmed.regression, "{:?}", confirmed.reasons);
        assert_eq!(confirmed.current_runs, 3);
        assert!(confirmed.headline.ends_with("— blocking"), "{}", confirmed.headline);
        let same = judge(&baseline(1, 200), &fixtures::run(&samples(200, 1.0, 7)), &CompareOptions::default());
        assert!(!same.regression, "{:?}", same.reasons);
    }

    #[test]
    fn hardware_mismatch_is_never_a_regression() {
        let mut cur = fixtures::run(&samples(200, 1.5, 7));
        cur.hardware.fingerprint = "another-gpu".into();
        let c = judge(&baseline(10, 200), &cur, &CompareOptions::default());
        assert!(!c.regression);
        assert_eq!(c.verdict, Decision::CollectMoreEvidence);
        assert!(c.reasons[0].contains("hardware differs"), "{:?}", c.reasons);
        assert!(!c.baseline.fingerprint_match);
    }

    #[test]
    fn failed_runs_and_few_samples_ask_for_more_evidence() {
        let mut cur = fixtures::run(&samples(200, 1.0, 7));
        cur.failure =
            Some(commgate_core::result::Failure { kind: "timeout".into(), message: "rank 1".into(), rank: Some(1) });
        let c = judge(&baseline(10, 200), &cur, &CompareOptions::default());
        assert_eq!(c.verdict, Decision::CollectMoreEvidence);
        assert!(c.metrics.is_empty());
        let c = judge(&baseline(10, 200), &fixtures::run(&samples(10, 1.0, 7)), &CompareOptions::default());
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
        let c = judge(&baseline(10, 60), &fixtures::run(&tail), &CompareOptions::default());
        let p95 = c.metrics.iter().find(|m| m.row == Schedule::Overlap && m.statistic == Statistic::P95).expect("p95");
        assert!(!p95.can_block);
        assert_ne!(p95.judged.state, State::Regressed);
    }

    #[test]
    fn verdicts_are_reproducible_for_a_seed() {
        let b = baseline(2, 150);
        let cur = fixtures::run(&samples(150, 1.04, 9));
        let opts = CompareOptions::default();
        assert_eq!(judge(&b, &cur, &opts), judge(&b, &cur, &opts));
    }
}

#[cfg(test)]
mod mover_tests {
    use super::*;
    use crate::decide::comparison::judge;
    use commgate_testkit::results as fixtures;
    use std::path::PathBuf;

    /// A run whose rows are `n` quiet steps, each row's level multiplied by its factor.
    fn run(seed: u64, factors: &[(Schedule, f64)]) -> RunResult {
        let mut rng = Rng::new(seed);
        let mut r = fixtures::run(&vec![1.0; 200]);
        for row in &mut r.rows {
            let f = factors.iter().find(|(s, _)| *s == row.schedule).map_or(1.0, |(_, f)| *f);
            row.samples_ms = (0..200).map(|_| f * (0.02 * rng.normal()).exp()).collect();
        }
        r
    }

    fn verdict(factors: &[(Schedule, f64)], base_runs: u64) -> Comparison {
        let runs = (0..base_runs).map(|i| run(100 + i, &[])).collect();
        judge(&Baseline { path: PathBuf::from("b.json"), runs }, &run(7, factors), &CompareOptions::default())
    }

    fn metric(c: &Comparison, row: Schedule) -> &MetricComparison {
        c.metrics.iter().find(|m| m.row == row && m.statistic == Statistic::Median).expect("metric")
    }

    #[test]
    fn a_slower_collective_alone_blocks_and_is_named() {
        for base_runs in [10, 5] {
            let c = verdict(&[(Schedule::CommOnly, 1.08)], base_runs);
            assert!(c.regression, "{base_runs}: {:?}", c.reasons);
            assert_eq!(c.cause, Some(StepCause::Communication), "{:?}", c.reasons);
            assert!(c.reasons[0].starts_with("comm_only median +8"), "{:?}", c.reasons);
            assert!(c.reasons[0].contains(", busbw −7"), "{:?}", c.reasons);
            assert!(
                c.reasons[0].contains("compute_only median unchanged → the collective got slower"),
                "{:?}",
                c.reasons
            );
            let t = metric(&c, Schedule::CommOnly).throughput.as_ref().expect("busbw");
            assert_eq!(t.kind, ThroughputKind::BusbwGbps);
            assert!(t.ratio < 0.95 && t.ci[1] < 1.0, "{t:?}");
        }
    }

    #[test]
    fn a_slower_gemm_is_named_and_shown_as_tflops() {
        let c = verdict(&[(Schedule::ComputeOnly, 1.08)], 10);
        assert!(c.regression, "{:?}", c.reasons);
        assert_eq!(c.cause, Some(StepCause::Compute));
        assert!(c.reasons[0].contains("matmul TFLOPS −7"), "{:?}", c.reasons);
        assert!(c.reasons[0].ends_with("→ the GEMM got slower (cuBLAS, clocks, power)"), "{:?}", c.reasons);
    }

    #[test]
    fn a_slower_overlapped_step_with_both_phases_unchanged_names_the_overlap() {
        let c = verdict(&[(Schedule::Overlap, 1.08)], 10);
        assert!(c.regression, "{:?}", c.reasons);
        assert_eq!(c.cause, Some(StepCause::Overlap));
        assert!(
            c.reasons[0].starts_with(
                "comm_only median unchanged, compute_only median unchanged → the two streams overlap less"
            ),
            "{:?}",
            c.reasons
        );
    }

    #[test]
    fn one_rank_judges_no_collective_and_no_bandwidth() {
        let mut cur = run(7, &[]);
        cur.workload.world_size = 1;
        let runs = (0..10)
            .map(|i| {
                let mut r = run(100 + i, &[]);
                r.workload.world_size = 1;
                r
            })
            .collect();
        let c = judge(&Baseline { path: PathBuf::from("b.json"), runs }, &cur, &CompareOptions::default());
        assert_eq!(c.metrics.len(), 6, "Holm's family is what is judged");
        assert!(c.metrics.iter().all(|m| m.row != Schedule::CommOnly));
        assert!(metric(&c, Schedule::ComputeOnly).throughput.is_some());
    }
}

#[cfg(test)]
mod episode_tests {
    use super::*;
    use crate::decide::comparison::judge;
    use commgate_testkit::results as fixtures;
    use std::path::PathBuf;

    #[test]
    fn a_run_spent_in_a_slow_episode_cannot_confirm_a_regression() {
        let mut rng = Rng::new(3);
        let mut noise = |level: f64| level * (0.02 * rng.normal()).exp();
        let runs = (0..10).map(|_| fixtures::run(&(0..100).map(|_| noise(1.0)).collect::<Vec<_>>())).collect();
        let baseline = Baseline { path: PathBuf::from("b.json"), runs };
        // Steps 20..80 run throttled: +20 %, one long episode.
        let episodic: Vec<f64> = (0..100).map(|i| noise(if (20..80).contains(&i) { 1.2 } else { 1.0 })).collect();
        let c = judge(&baseline, &fixtures::run(&episodic), &CompareOptions::default());
        assert!(!c.regression, "{:?}", c.reasons);
        assert_eq!(c.verdict, Decision::CollectMoreEvidence);
        assert!(c.reasons.iter().any(|r| r.contains("overlap steps come in episodes")), "{:?}", c.reasons);
        // The same slowdown spread evenly is a regression.
        let even: Vec<f64> = (0..100).map(|_| noise(1.2)).collect();
        assert!(judge(&baseline, &fixtures::run(&even), &CompareOptions::default()).regression);
    }
}

/// The crafted cases that fooled the earlier gate, each now blocked or answered
/// `collect_more_evidence` with what the comparison can see.
#[cfg(test)]
mod crafted_tests {
    use super::*;
    use crate::decide::comparison::judge;
    use commgate_testkit::results as fixtures;
    use std::path::PathBuf;

    fn quiet(n: usize, level: f64, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| level * (0.02 * rng.normal()).exp()).collect()
    }

    fn store(levels: &[f64]) -> Baseline {
        let runs = levels.iter().enumerate().map(|(i, l)| fixtures::run(&quiet(200, *l, 300 + i as u64))).collect();
        Baseline { path: PathBuf::from("b.json"), runs }
    }

    #[test]
    fn a_slower_tail_is_not_accepted() {
        // The slowest 6 % of 200 steps 25 % slower: the P95 moves about +20 %, the median not.
        let mut steps = quiet(200, 1.0, 7);
        let mut order: Vec<usize> = (0..200).collect();
        order.sort_by(|&a, &b| steps[b].total_cmp(&steps[a]));
        order.iter().take(12).for_each(|&i| steps[i] *= 1.25);
        let c = judge(&store(&[1.0; 10]), &fixtures::run(&steps), &CompareOptions::default());
        assert_ne!(c.verdict, Decision::Accept, "{:?}", c.reasons);
        assert!(c.regression, "{:?}", c.reasons);
        assert!(c.headline.starts_with("overlap step P95 "), "{}", c.headline);
    }

    #[test]
    fn a_sorted_row_that_did_not_regress_vetoes_nothing() {
        let mut r = fixtures::run(&quiet(200, 1.2, 7));
        let base = store(&[1.0; 10]);
        // comm_only unchanged in level, but its steps happen to be in ascending order.
        for row in r.rows.iter_mut().filter(|row| row.schedule == Schedule::CommOnly) {
            row.samples_ms = quiet(200, 1.0, 9);
            row.samples_ms.sort_by(f64::total_cmp);
        }
        let c = judge(&base, &r, &CompareOptions::default());
        assert!(c.regression, "{:?}", c.reasons);
    }

    #[test]
    fn one_wild_baseline_run_does_not_let_a_slowdown_pass() {
        let mut levels = [1.0; 10];
        levels[3] = 3.0;
        let c = judge(&store(&levels), &fixtures::run(&quiet(200, 1.2, 7)), &CompareOptions::default());
        assert_ne!(c.verdict, Decision::Accept, "{:?}", c.reasons);
    }

    #[test]
    fn a_noisy_store_says_what_it_can_see_and_how_many_runs_would_decide() {
        // Runs alternating ±5 %: a 20 % slowdown is beyond δ but not beyond what one run can show.
        let levels: Vec<f64> = (0..10).map(|i| if i % 2 == 0 { 1.05 } else { 0.95 }).collect();
        let c = judge(&store(&levels), &fixtures::run(&quiet(200, 1.2, 7)), &CompareOptions::default());
        assert_eq!(c.verdict, Decision::CollectMoreEvidence, "{:?}", c.reasons);
        let mde = c.mde.expect("a run-level comparison has an MDE");
        assert!(mde > 0.2, "{mde}");
        let k = c.runs_needed.and_then(|n| n.current_runs).expect("some current runs would decide");
        assert!(c.reasons[0].contains(&format!("`commgate check --runs {k}`")), "{:?}", c.reasons);
        insta::assert_snapshot!("noisy_store_headline_and_advice", format!("{}\n{}", c.headline, c.reasons[0]));
    }

    #[test]
    fn a_store_too_noisy_for_any_number_of_runs_says_so() {
        // Runs alternating ±15 %: no number of runs the advice searches would confirm +20 %.
        let levels: Vec<f64> = (0..10).map(|i| if i % 2 == 0 { 1.15 } else { 0.85 }).collect();
        let c = judge(&store(&levels), &fixtures::run(&quiet(200, 1.2, 7)), &CompareOptions::default());
        assert_eq!(c.verdict, Decision::CollectMoreEvidence, "{:?}", c.reasons);
        assert_eq!(c.runs_needed, Some(RunsNeeded { more_baseline_runs: None, current_runs: None }));
        assert!(
            c.reasons[0].starts_with("baseline runs vary 25.1 %, so this gate can only see slowdowns above"),
            "{:?}",
            c.reasons
        );
        assert!(
            c.reasons[0].ends_with("quiet the runner or pin clocks: more runs alone would not decide at this spread")
        );
    }

    #[test]
    fn a_short_run_says_in_its_headline_why_it_cannot_confirm_and_three_runs_can() {
        let slower = |seed| fixtures::run(&quiet(40, 1.2, seed));
        let c = judge(&store(&[1.0; 10]), &slower(7), &CompareOptions::default());
        assert!(!c.regression, "{:?}", c.reasons);
        assert_eq!(c.verdict, Decision::CollectMoreEvidence);
        assert_eq!(c.mde, None);
        insta::assert_snapshot!("short_run_headline", c.headline);
        let three = [slower(7), slower(8), slower(9)];
        let confirmed = crate::decide::comparison::judge_runs(&store(&[1.0; 10]), &three, &CompareOptions::default());
        assert!(confirmed.regression, "{:?}", confirmed.reasons);
    }

    #[test]
    fn the_blocking_headline() {
        let c = judge(&store(&[1.0; 10]), &fixtures::run(&quiet(200, 1.08, 7)), &CompareOptions::default());
        assert!(c.regression);
        insta::assert_snapshot!("blocking_headline", c.headline);
    }
}
