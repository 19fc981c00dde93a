//! Simulated benchmark runs for measuring the gate's quality (`benches/gate_quality.rs`,
//! `benches/compare_speed.rs`, `examples/gen_results.rs`): seeded noise models shaped like real
//! GPU step times, an optional injected regression ([`Effect`]), and [`synthetic_run`] (or the
//! [`SimRun`] builder, which also places a run on a runner), which wraps the samples in a
//! complete, valid [`RunResult`].
//!
//! This module owns only the simulation; it decides nothing, and it is test and benchmark
//! support (`commgate-testkit`, a dev-dependency), never part of a gate's decision path. Every draw comes from
//! [`commgate_stats::rng::Rng`] seeded by the caller, so a run is a pure function of
//! `(model, n, effect, run spread, seed)`, and for [`NoiseModel::RunnerClusters`] of the runner
//! and the fleet's seed too ([`SimRun`]).
//!
//! How a step time is built, for each of the four rows (`comm_only` 0.50 ms, `compute_only`
//! 0.70 ms, `serial` 1.20 ms, `overlap` 0.85 ms):
//!
//! ```text
//! step = base · run_level · row_level · exp(N(0, 0.02)) · model-specific factor · effect (overlap, serial)
//! ```
//!
//! `run_level` is drawn once per run and shared by all four rows (a clock or placement change
//! moves the whole run), so `exposed = overlap − compute_only` keeps its sign. `row_level` is 1
//! except for NCCL's per-run choice ([`NoiseModel::NcclModes`]), which moves the collective and
//! the rows that contain it by their share of it. The effect's draws come from a stream of their
//! own, so the same seed with and without an effect gives the same noise: a pure median shift
//! multiplies the overlap and serial samples exactly. The families added after the first six
//! ([`NoiseModel::FAMILIES`]) draw their per-run state from a third stream, so the first six
//! ([`NoiseModel::ALL`]) give exactly the samples they always gave.

use std::collections::BTreeMap;

use commgate_bench::assemble::{self, RunContext, Timings};
use commgate_bench::{Dtype, HardwareInfo, Plan};
use commgate_core::result::{EvidenceLevel, Provenance, RunResult, Schedule};
use commgate_stats::quantile::type7_quantile;
use commgate_stats::rng::Rng;

/// The period of `PeriodicSpike`'s spikes, in steps.
pub const SPIKE_PERIOD: usize = 16;

/// Sigma of the per-step log-normal noise every model starts from (2 %).
pub const QUIET_SIGMA: f64 = 0.02;

/// Each schedule's base step time, ms.
pub const BASE_MS: [(Schedule, f64); 4] =
    [(Schedule::CommOnly, 0.50), (Schedule::ComputeOnly, 0.70), (Schedule::Serial, 1.20), (Schedule::Overlap, 0.85)];

/// How step times scatter, within a run and between runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoiseModel {
    /// `base · exp(N(0, 0.02))`, steps independent, no run-to-run movement.
    QuietLogNormal,
    /// Quiet, plus 5 % of steps slowed × U(1.3, 1.8) (preemption, a late rank, a page fault).
    HeavyOutliers,
    /// Quiet, with each step at one of two clock levels, 1.00 or 1.06; the share of slow steps is
    /// drawn per run from U(0.2, 0.4) (a 70/30 mix on average that itself moves between runs).
    BimodalClocks,
    /// Quiet, with each run's level moved by U(−s, +s), s = 2 % by default (clocks, NCCL's
    /// algorithm choice, placement).
    RunLevelShift,
    /// Quiet, with autocorrelated slow phases: a two-state Markov chain that enters a slow state
    /// (× U(1.15, 1.25), drawn per episode) with probability 0.02 per step and stays with
    /// probability 0.9 (≈ 17 % of steps slow in the long run, in bursts of ≈ 10); plus a run-level
    /// shift of U(±1 %).
    SlowEpisodes,
    /// Quiet, with a linear drift within the run from 0 to U(±2 %) at the last step (thermal
    /// throttling, a growing allocator), plus a run-level shift of U(±1 %).
    Drift,
    /// Quiet, with NCCL picking one of three (algorithm, protocol) choices per run
    /// ([`NCCL_CHOICES`]: `Ring/LL128` ×1.00 with probability 0.60, `Ring/Simple` ×1.06 with
    /// 0.25, `Tree/LL` ×0.95 with 0.15) on the `comm_only` row; `serial` moves by
    /// [`SERIAL_COMM_SHARE`] (0.50/1.20) of the factor's change and `overlap` by
    /// [`OVERLAP_COMM_SHARE`] (0.6, the exposed share) of it; `compute_only` does not move. The
    /// choice is recorded in `software.nccl_choice`. Plus a run-level shift of U(±0.5 %). Real
    /// runs fall into modes like this: a baseline mostly in one mode and a current run in another
    /// differ by up to 3.6 % on `overlap` with no code change.
    NcclModes,
    /// [`NoiseModel::NcclModes`] exactly (the same samples for the same seed), but with
    /// `software.nccl_choice` left `None`: what older results and non-NCCL backends give, so the
    /// gate cannot compare like with like.
    NcclModesUnrecorded,
    /// Quiet, with each run on a runner of a fleet: a runner has its own level
    /// `exp(N(0, 0.02))` ([`RUNNER_SIGMA`]), drawn from a stream seeded by the fleet's seed and the
    /// runner's index (the same runner is as fast in every run on it), plus a run-level shift of
    /// U(±0.5 %). The runner's name (`runner-3`, [`runner_name`]) goes into `provenance.runner`.
    /// [`SimRun::on_runner`] chooses the runner; without it the run's seed picks one of
    /// [`FLEET_SIZE`].
    RunnerClusters,
    /// Quiet, with a clock or power step: with probability 0.4 per run, from a step drawn
    /// uniformly in the middle 80 % of the run on, every step is × U(1.06, 1.12) slower (all four
    /// rows from the same step index, with the same factor); plus a run-level shift of U(±1 %).
    StepChange,
    /// Quiet, with a warm-up ramp in every run: the first L ~ U(5, 25) steps start U(20 %, 60 %)
    /// slower and the excess decays as `exp(−i / τ)`, τ = L / 3 (5 % of it left at step L, the
    /// same ramp on all four rows): what a too-short warm-up leaves in the samples. A rank-tail
    /// effect ([`Effect::tail_rank`]) slows the tail of the steps after the ramp: the warm-up is
    /// the run's slowest tenth, and slowing it is no regression of the job's steady state.
    WarmupRamp,
    /// Quiet, with every 16th step (the phase uniform in 0..16 per run, the same for all four
    /// rows) × U(1.4, 1.8) slower, drawn per spike: a checkpoint, logging, the allocator. Every run
    /// has it, at the same period: the interval is the job's, a property of its code and settings,
    /// not of the run (a period drawn per run from {10, 16, 25} moved the P95 in or out of the
    /// spikes from run to run, which no real job does).
    PeriodicSpike,
    /// Quiet times a Pareto tail of shape 2.5: `1 + 0.05 · (U^(−1/2.5) − 1)`, U uniform in
    /// (0, 1]: the factor's median is +1.6 %, its P99 +26.5 %, and 0.8 % of steps are beyond
    /// +30 % (with the step noise: the median ≈ +2 %). The mean is finite, the variance too but
    /// barely (shape > 2).
    HeavyTail,
    /// A loaded, shared machine: a run-level log-normal spread `exp(N(0, 0.08))`; slow episodes
    /// like [`NoiseModel::SlowEpisodes`] but × U(1.3, 2.0) and entered with probability 0.05 per
    /// step (stay 0.9: ≈ 1/3 of steps slow, in bursts of ≈ 10); and [`NoiseModel::HeavyTail`]'s
    /// tail on every step.
    SharedRunner,
}

/// One of NCCL's (algorithm, protocol) choices in [`NoiseModel::NcclModes`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NcclChoice {
    /// `ALGO/PROTO`, as `software.nccl_choice` records it.
    pub name: &'static str,
    /// How often NCCL picks it, per run.
    pub probability: f64,
    /// Its factor on the `comm_only` row.
    pub comm_factor: f64,
}

/// NCCL's choices in [`NoiseModel::NcclModes`]; the probabilities sum to 1.
pub const NCCL_CHOICES: [NcclChoice; 3] = [
    NcclChoice { name: "Ring/LL128", probability: 0.60, comm_factor: 1.00 },
    NcclChoice { name: "Ring/Simple", probability: 0.25, comm_factor: 1.06 },
    NcclChoice { name: "Tree/LL", probability: 0.15, comm_factor: 0.95 },
];

/// Share of the collective's relative change that `serial` shows: serial = compute + comm, so
/// the comm row's 0.50 ms of serial's 1.20 ms.
pub const SERIAL_COMM_SHARE: f64 = 0.50 / 1.20;

/// Share of the collective's relative change that `overlap` shows: the part of a slower
/// collective that the compute does not hide.
pub const OVERLAP_COMM_SHARE: f64 = 0.6;

/// Sigma of a runner's log-normal level in [`NoiseModel::RunnerClusters`] (2 %).
pub const RUNNER_SIGMA: f64 = 0.02;

/// Runners a [`NoiseModel::RunnerClusters`] run without [`SimRun::on_runner`] is spread over.
pub const FLEET_SIZE: usize = 8;

/// The fleet a [`SimRun`] is on unless [`SimRun::fleet`] says otherwise (a fixed set of runner
/// levels; a benchmark that wants fresh runners per trial gives each trial its own fleet seed).
pub const DEFAULT_FLEET_SEED: u64 = 0xF1EE_7000_0000_0001;

/// Sigma of [`NoiseModel::SharedRunner`]'s run-level log-normal spread (8 %).
pub const SHARED_RUNNER_SIGMA: f64 = 0.08;

/// The name a simulated runner has in `provenance.runner`.
pub fn runner_name(runner: usize) -> String {
    format!("runner-{runner}")
}

impl NoiseModel {
    /// The first six models, kept as they were: other code iterates over exactly these.
    pub const ALL: [NoiseModel; 6] = [
        NoiseModel::QuietLogNormal,
        NoiseModel::HeavyOutliers,
        NoiseModel::BimodalClocks,
        NoiseModel::RunLevelShift,
        NoiseModel::SlowEpisodes,
        NoiseModel::Drift,
    ];

    /// Every model: [`NoiseModel::ALL`] and then the families shaped like real GPU timings'
    /// nastier habits (modes, runners, steps, warm-up, spikes, tails, a shared machine).
    pub const FAMILIES: [NoiseModel; 14] = [
        NoiseModel::QuietLogNormal,
        NoiseModel::HeavyOutliers,
        NoiseModel::BimodalClocks,
        NoiseModel::RunLevelShift,
        NoiseModel::SlowEpisodes,
        NoiseModel::Drift,
        NoiseModel::NcclModes,
        NoiseModel::NcclModesUnrecorded,
        NoiseModel::RunnerClusters,
        NoiseModel::StepChange,
        NoiseModel::WarmupRamp,
        NoiseModel::PeriodicSpike,
        NoiseModel::HeavyTail,
        NoiseModel::SharedRunner,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NoiseModel::QuietLogNormal => "quiet_lognormal",
            NoiseModel::HeavyOutliers => "heavy_outliers",
            NoiseModel::BimodalClocks => "bimodal_clocks",
            NoiseModel::RunLevelShift => "run_level_shift",
            NoiseModel::SlowEpisodes => "slow_episodes",
            NoiseModel::Drift => "drift",
            NoiseModel::NcclModes => "nccl_modes",
            NoiseModel::NcclModesUnrecorded => "nccl_modes_unrecorded",
            NoiseModel::RunnerClusters => "runner_clusters",
            NoiseModel::StepChange => "step_change",
            NoiseModel::WarmupRamp => "warmup_ramp",
            NoiseModel::PeriodicSpike => "periodic_spike",
            NoiseModel::HeavyTail => "heavy_tail",
            NoiseModel::SharedRunner => "shared_runner",
        }
    }

    /// Half-width of the uniform run-level factor this model uses by default (0 for the models
    /// without one; [`NoiseModel::SharedRunner`]'s log-normal run spread is its own, on top).
    pub fn default_run_spread(self) -> f64 {
        match self {
            NoiseModel::QuietLogNormal
            | NoiseModel::HeavyOutliers
            | NoiseModel::BimodalClocks
            | NoiseModel::WarmupRamp
            | NoiseModel::PeriodicSpike
            | NoiseModel::HeavyTail
            | NoiseModel::SharedRunner => 0.0,
            NoiseModel::RunLevelShift => 0.02,
            NoiseModel::SlowEpisodes | NoiseModel::Drift | NoiseModel::StepChange => 0.01,
            NoiseModel::NcclModes | NoiseModel::NcclModesUnrecorded | NoiseModel::RunnerClusters => 0.005,
        }
    }

    /// Whether a run of this model records NCCL's choice in `software.nccl_choice`.
    fn records_nccl_choice(self) -> bool {
        self == NoiseModel::NcclModes
    }
}

/// A regression injected into the `overlap` and `serial` rows (a real regression shows in both).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Effect {
    /// Relative shift of every step, e.g. 0.05 for +5 %.
    pub median_shift: f64,
    /// Share of steps (each independently) that also get slowed by `tail_factor`, e.g. 0.10.
    pub tail_fraction: f64,
    /// Factor on the tail steps, e.g. 1.30.
    pub tail_factor: f64,
    /// The steps above the run's own quantile, slowed ([`Effect::tail_rank`]).
    pub rank_tail: Option<RankTail>,
}

/// Every step of a row above that row's own `quantile` (by value, within the run) multiplied by
/// `factor`: a tail regression that moves the upper quantiles by `factor` and the median not at
/// all, whatever the noise (a random share of steps, [`Effect::tail`], also moves the median).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankTail {
    /// In (0, 1), e.g. 0.90.
    pub quantile: f64,
    /// e.g. 1.15.
    pub factor: f64,
}

impl Effect {
    /// No change: an A/A comparison.
    pub const NONE: Effect = Effect { median_shift: 0.0, tail_fraction: 0.0, tail_factor: 1.0, rank_tail: None };

    /// Every step slower by `shift` (relative).
    pub fn shift(shift: f64) -> Effect {
        Effect { median_shift: shift, ..Effect::NONE }
    }

    /// A share `fraction` of the steps slower by `factor`; the rest untouched.
    pub fn tail(fraction: f64, factor: f64) -> Effect {
        Effect { tail_fraction: fraction, tail_factor: factor, ..Effect::NONE }
    }

    /// Every step above the row's own `quantile` slower by `factor` ([`RankTail`]):
    /// `tail_rank(0.90, 1.15)` moves the P95 by +15 % and leaves the median where it was.
    pub fn tail_rank(quantile: f64, factor: f64) -> Effect {
        Effect { rank_tail: Some(RankTail { quantile, factor }), ..Effect::NONE }
    }
}

/// A uniform draw in `[-s, s)`.
fn symmetric(rng: &mut Rng, s: f64) -> f64 {
    s * (2.0 * rng.next_f64() - 1.0)
}

/// A uniform draw in `[lo, hi)`.
fn uniform(rng: &mut Rng, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.next_f64()
}

/// [`NoiseModel::HeavyTail`]'s factor: `1 + 0.05 · (U^(−1/2.5) − 1)`, a Pareto of shape 2.5.
fn pareto_tail(rng: &mut Rng) -> f64 {
    // 1 − u lies in (0, 1], so the power is finite.
    let u = 1.0 - rng.next_f64();
    1.0 + 0.05 * (u.powf(-1.0 / 2.5) - 1.0)
}

/// One step of a two-state slow-episode chain: in an episode, stay with probability `stay`;
/// outside one, enter with probability `enter` at a factor drawn from U(lo, hi). Returns the
/// step's factor.
fn episode(slow: &mut Option<f64>, rng: &mut Rng, enter: f64, stay: f64, (lo, hi): (f64, f64)) -> f64 {
    *slow = match *slow {
        Some(f) if rng.next_f64() < stay => Some(f),
        Some(_) => None,
        None if rng.next_f64() < enter => Some(uniform(rng, lo, hi)),
        None => None,
    };
    slow.unwrap_or(1.0)
}

/// The index of NCCL's choice for a uniform draw `u` in [0, 1).
fn nccl_choice(u: f64) -> usize {
    let mut acc = 0.0;
    for (i, c) in NCCL_CHOICES.iter().enumerate() {
        acc += c.probability;
        if u < acc {
            return i;
        }
    }
    NCCL_CHOICES.len() - 1
}

/// A runner's level in a fleet: a pure function of the fleet's seed and the runner's index, so
/// every run on the same runner of the same fleet shares it.
fn runner_level(fleet_seed: u64, runner: usize) -> f64 {
    let mut rng = Rng::new(fleet_seed ^ (runner as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    (RUNNER_SIGMA * rng.normal()).exp()
}

/// Per-run state of a noise model, drawn once per run.
struct RunState {
    level: f64,
    /// BimodalClocks: this run's share of steps at the slow clock.
    slow_share: f64,
    /// Drift: relative change from the first step to the last.
    drift: f64,
    /// NcclModes: the index of NCCL's choice in [`NCCL_CHOICES`].
    nccl: Option<usize>,
    /// StepChange: the first slow step and its factor.
    step_change: Option<(usize, f64)>,
    /// WarmupRamp: the start excess and the time constant, in steps.
    ramp: Option<(f64, f64)>,
    /// PeriodicSpike: the period and the phase.
    spikes: Option<(usize, usize)>,
}

impl RunState {
    /// The first six models draw from `rng` exactly as they always did; the families after them
    /// draw their own state from `family` (so adding one never moves the others' samples).
    fn draw(model: NoiseModel, n: usize, run_spread: f64, rng: &mut Rng, family: &mut Rng) -> RunState {
        let level = 1.0 + symmetric(rng, run_spread);
        let slow_share = uniform(rng, 0.2, 0.4);
        let drift = symmetric(rng, 0.02);
        let plain =
            RunState { level, slow_share: 0.0, drift: 0.0, nccl: None, step_change: None, ramp: None, spikes: None };
        match model {
            NoiseModel::BimodalClocks => RunState { slow_share, ..plain },
            NoiseModel::Drift => RunState { drift, ..plain },
            NoiseModel::NcclModes | NoiseModel::NcclModesUnrecorded => {
                RunState { nccl: Some(nccl_choice(family.next_f64())), ..plain }
            }
            NoiseModel::StepChange => {
                let happens = family.next_f64() < 0.4;
                let at = uniform(family, 0.1, 0.9) * n as f64;
                let factor = uniform(family, 1.06, 1.12);
                RunState { step_change: happens.then_some((at as usize, factor)), ..plain }
            }
            NoiseModel::WarmupRamp => {
                let length = uniform(family, 5.0, 25.0);
                let excess = uniform(family, 0.2, 0.6);
                RunState { ramp: Some((excess, length / 3.0)), ..plain }
            }
            NoiseModel::PeriodicSpike => {
                // The draw is kept so the phase and every later draw stay where they were.
                let _ = family.below(3);
                let period = SPIKE_PERIOD;
                RunState { spikes: Some((period, family.below(period))), ..plain }
            }
            NoiseModel::SharedRunner => {
                RunState { level: level * (SHARED_RUNNER_SIGMA * family.normal()).exp(), ..plain }
            }
            _ => plain,
        }
    }

    /// The first step of the steady state: past [`NoiseModel::WarmupRamp`]'s ramp (its length
    /// `L = 3τ`), 0 in every other model.
    fn steady_from(&self) -> usize {
        self.ramp.map_or(0, |(_, tau)| (3.0 * tau).ceil() as usize)
    }

    /// The row's own level: NCCL's choice moves the collective and the rows that contain it.
    fn row_level(&self, schedule: Schedule) -> f64 {
        let Some(choice) = self.nccl.and_then(|i| NCCL_CHOICES.get(i)) else { return 1.0 };
        let change = choice.comm_factor - 1.0;
        match schedule {
            Schedule::CommOnly => choice.comm_factor,
            Schedule::Serial => 1.0 + SERIAL_COMM_SHARE * change,
            Schedule::Overlap => 1.0 + OVERLAP_COMM_SHARE * change,
            Schedule::ComputeOnly => 1.0,
        }
    }
}

/// `n` step times of one row (base 1.0; the caller scales), in time order.
fn row_factors(model: NoiseModel, state: &RunState, n: usize, rng: &mut Rng) -> Vec<f64> {
    let mut slow: Option<f64> = None;
    (0..n)
        .map(|i| {
            let quiet = (QUIET_SIGMA * rng.normal()).exp();
            let specific = match model {
                NoiseModel::QuietLogNormal
                | NoiseModel::RunLevelShift
                | NoiseModel::NcclModes
                | NoiseModel::NcclModesUnrecorded
                | NoiseModel::RunnerClusters => 1.0,
                NoiseModel::HeavyOutliers => {
                    if rng.next_f64() < 0.05 {
                        uniform(rng, 1.3, 1.8)
                    } else {
                        1.0
                    }
                }
                NoiseModel::BimodalClocks => {
                    if rng.next_f64() < state.slow_share {
                        1.06
                    } else {
                        1.0
                    }
                }
                NoiseModel::SlowEpisodes => episode(&mut slow, rng, 0.02, 0.9, (1.15, 1.25)),
                NoiseModel::Drift => 1.0 + state.drift * i as f64 / (n.max(2) - 1) as f64,
                NoiseModel::StepChange => match state.step_change {
                    Some((at, factor)) if i >= at => factor,
                    _ => 1.0,
                },
                NoiseModel::WarmupRamp => {
                    state.ramp.map_or(1.0, |(excess, tau)| 1.0 + excess * (-(i as f64) / tau).exp())
                }
                NoiseModel::PeriodicSpike => match state.spikes {
                    Some((period, phase)) if (i + phase) % period == 0 => uniform(rng, 1.4, 1.8),
                    _ => 1.0,
                },
                NoiseModel::HeavyTail => pareto_tail(rng),
                NoiseModel::SharedRunner => episode(&mut slow, rng, 0.05, 0.9, (1.3, 2.0)) * pareto_tail(rng),
            };
            state.level * quiet * specific
        })
        .collect()
}

/// Applies `effect` to one row's samples in place, drawing from `rng` (a stream of its own). A
/// rank tail slows the tail of the steady state, the steps from `steady` on: in a run with a
/// warm-up ramp its slowest steps are the warm-up, which the gate cuts off (MSER-5), and a tail
/// regression of the job is one of its steady state.
fn apply_effect(samples: &mut [f64], effect: &Effect, steady: usize, rng: &mut Rng) {
    for s in samples.iter_mut() {
        *s *= 1.0 + effect.median_shift;
        // Always draw, so the noise does not depend on whether a tail is injected.
        if rng.next_f64() < effect.tail_fraction {
            *s *= effect.tail_factor;
        }
    }
    if let Some(tail) = effect.rank_tail {
        let from = steady.min(samples.len());
        apply_rank_tail(&mut samples[from..], tail);
    }
}

/// Multiplies every sample above the samples' own `tail.quantile` (type 7) by `tail.factor`.
/// Draws nothing: which steps are slowed follows from the values alone.
fn apply_rank_tail(samples: &mut [f64], tail: RankTail) {
    if samples.is_empty() {
        return;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let threshold = type7_quantile(&sorted, tail.quantile);
    samples.iter_mut().filter(|s| **s > threshold).for_each(|s| *s *= tail.factor);
}

/// One simulated run, described: what [`synthetic_run`] takes, plus the runner it ran on.
/// Build one with [`SimRun::new`] and the setters, then [`SimRun::build`] it:
///
/// ```
/// # use commgate_testkit::simulate::{Effect, NoiseModel, SimRun};
/// let trial_fleet = 17; // fresh runner levels for this trial
/// let baseline: Vec<_> = (0..3)
///     .map(|i| SimRun::new(NoiseModel::RunnerClusters, 50, 100 + i).fleet(trial_fleet).on_runner(i as usize).build())
///     .collect();
/// let current = SimRun::new(NoiseModel::RunnerClusters, 50, 7).fleet(trial_fleet).on_runner(4).effect(Effect::shift(0.05)).build();
/// assert_eq!(current.provenance.runner.as_deref(), Some("runner-4"));
/// # assert_eq!(baseline.len(), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimRun {
    pub model: NoiseModel,
    /// Steps per row.
    pub n: usize,
    pub effect: Effect,
    /// Half-width of the uniform run-level factor ([`NoiseModel::default_run_spread`] unless set).
    pub run_spread: f64,
    /// The run's own noise.
    pub seed: u64,
    /// The runner the run was on: recorded in `provenance.runner` for every model, and its level
    /// applied for [`NoiseModel::RunnerClusters`]. `None`: no runner recorded, except for
    /// `RunnerClusters`, where the seed picks one of [`FLEET_SIZE`].
    pub runner: Option<usize>,
    /// The fleet whose runner levels apply ([`DEFAULT_FLEET_SEED`] unless set).
    pub fleet_seed: u64,
}

impl SimRun {
    /// A run of `model` with `n` steps per row, no effect, the model's default run spread, no
    /// runner chosen, the default fleet.
    pub fn new(model: NoiseModel, n: usize, seed: u64) -> SimRun {
        SimRun {
            model,
            n,
            effect: Effect::NONE,
            run_spread: model.default_run_spread(),
            seed,
            runner: None,
            fleet_seed: DEFAULT_FLEET_SEED,
        }
    }

    pub fn effect(self, effect: Effect) -> SimRun {
        SimRun { effect, ..self }
    }

    pub fn spread(self, run_spread: f64) -> SimRun {
        SimRun { run_spread, ..self }
    }

    pub fn on_runner(self, runner: usize) -> SimRun {
        SimRun { runner: Some(runner), ..self }
    }

    pub fn fleet(self, fleet_seed: u64) -> SimRun {
        SimRun { fleet_seed, ..self }
    }

    /// The complete, valid mock [`RunResult`]: a pure function of `self`.
    pub fn build(&self) -> RunResult {
        let SimRun { model, n, ref effect, run_spread, seed, runner, fleet_seed } = *self;
        let mut rng = Rng::new(seed);
        // A second, independent stream for the effect (splitmix64 seeding decorrelates the seeds),
        // and a third for the later families' per-run state.
        let mut effect_rng = Rng::new(seed ^ 0x5EED_E77E_C7E5_A5A5);
        let mut family_rng = Rng::new(seed ^ 0xFA71_1E55_0D15_C0DE);
        let mut state = RunState::draw(model, n, run_spread, &mut rng, &mut family_rng);
        let runner = match (runner, model) {
            (None, NoiseModel::RunnerClusters) => Some(family_rng.below(FLEET_SIZE)),
            (r, _) => r,
        };
        if let (Some(r), NoiseModel::RunnerClusters) = (runner, model) {
            state.level *= runner_level(fleet_seed, r);
        }
        // Two ranks: the simulated samples are the slowest rank's, the other is 1 % faster.
        let mut timings: Timings = BTreeMap::new();
        for &(schedule, base) in BASE_MS.iter() {
            let level = base * state.row_level(schedule);
            let mut samples: Vec<f64> =
                row_factors(model, &state, n, &mut rng).into_iter().map(|f| level * f).collect();
            if matches!(schedule, Schedule::Overlap | Schedule::Serial) {
                apply_effect(&mut samples, effect, state.steady_from(), &mut effect_rng);
            }
            let faster: Vec<f64> = samples.iter().map(|s| 0.99 * s).collect();
            timings.insert(schedule, BTreeMap::from([(0, samples), (1, faster)]));
        }
        let ctx = RunContext {
            plan: Plan {
                world_size: 2,
                dtype: Dtype::Bfloat16,
                payload_elements: 4 << 20,
                compute_dim: 2048,
                warmup: 10,
                repeats: u32::try_from(n).unwrap_or(u32::MAX),
                seed,
            },
            backend: "mock".into(),
            // A run placed on a runner stands for a measured GPU run there: the comparison groups
            // measured runs by runner, and mock runs (computed timings) by nothing.
            evidence_level: if runner.is_some() { EvidenceLevel::GpuNccl } else { EvidenceLevel::Mock },
            hardware: HardwareInfo {
                gpu_name: Some("simulated".into()),
                gpu_count: 2,
                host_cpu: Some("simulated".into()),
                ..HardwareInfo::default()
            },
            nodes: 1,
            nccl_env: BTreeMap::new(),
            provenance: Provenance { runner: runner.map(runner_name), ..Provenance::default() },
            run_label: format!("sim-{}-{seed}", model.name()),
            environment_profile: "SIM-MOCK".into(),
            created_at: "2026-11-30T00:00:00Z".into(),
        };
        let mut result = assemble::build(&ctx, Some(&timings), None, commgate_gate::decide::bench_run::decide);
        // NCCL ran in both NCCL families (a two-rank run with its version recorded), whether or
        // not its choice was.
        if matches!(model, NoiseModel::NcclModes | NoiseModel::NcclModesUnrecorded) {
            result.software.nccl = Some(SIM_NCCL_VERSION.to_string());
        }
        if model.records_nccl_choice() {
            result.software.nccl_choice = state.nccl.and_then(|i| NCCL_CHOICES.get(i)).map(|c| c.name.to_string());
        }
        result
    }
}

/// A complete, valid mock [`RunResult`] whose four rows each hold `n` simulated samples from
/// `model`, with `effect` applied to `overlap` and `serial`, using the model's default run-level
/// spread ([`NoiseModel::default_run_spread`]). Deterministic in `seed`.
pub fn synthetic_run(model: NoiseModel, n: usize, effect: &Effect, seed: u64) -> RunResult {
    SimRun::new(model, n, seed).effect(*effect).build()
}

/// As [`synthetic_run`], with the half-width of the uniform run-level factor set explicitly
/// (`run_spread = 0.01` draws each run's level from U(0.99, 1.01)).
pub fn synthetic_run_with_spread(
    model: NoiseModel,
    n: usize,
    effect: &Effect,
    run_spread: f64,
    seed: u64,
) -> RunResult {
    SimRun::new(model, n, seed).effect(*effect).spread(run_spread).build()
}

/// The NCCL version the runs of the NCCL families record.
pub const SIM_NCCL_VERSION: &str = "2.21.5";

/// The hardware fingerprint every simulated run carries.
pub const SIM_FINGERPRINT: &str = "044b46ed0e1a6216";

#[cfg(test)]
mod tests {
    use super::*;
    use commgate_core::result::validate;
    use commgate_stats::quantile::median;

    fn overlap_median(r: &RunResult) -> f64 {
        r.row(Schedule::Overlap).expect("overlap row").median_max_rank_ms
    }

    #[test]
    fn a_seed_determines_the_run() {
        for model in NoiseModel::ALL {
            let a = synthetic_run(model, 50, &Effect::tail(0.1, 1.3), 42);
            let b = synthetic_run(model, 50, &Effect::tail(0.1, 1.3), 42);
            assert_eq!(a, b, "{}", model.name());
            let c = synthetic_run(model, 50, &Effect::tail(0.1, 1.3), 43);
            assert_ne!(a.rows, c.rows, "{}", model.name());
        }
    }

    #[test]
    fn runs_are_valid_with_finite_positive_samples() {
        for model in NoiseModel::ALL {
            for seed in 0..20 {
                let r = synthetic_run(
                    model,
                    200,
                    &Effect { median_shift: 0.05, tail_fraction: 0.1, tail_factor: 1.3, rank_tail: None },
                    seed,
                );
                assert_eq!(validate(&r), Ok(()), "{}", model.name());
                assert_eq!(r.rows.len(), 4);
                for row in &r.rows {
                    assert_eq!(row.samples_ms.len(), 200);
                    assert!(
                        row.samples_ms.iter().all(|x| x.is_finite() && *x > 0.0),
                        "{} {:?}",
                        model.name(),
                        row.schedule
                    );
                    assert!(row.median_max_rank_ms > 0.0 && row.p95_max_rank_ms >= row.median_max_rank_ms);
                }
                assert!(
                    r.metrics.exposed_comm_ms.is_some_and(|e| e > 0.0),
                    "{} seed {seed}: exposed {:?}",
                    model.name(),
                    r.metrics.exposed_comm_ms
                );
                assert_eq!(r.hardware.fingerprint, SIM_FINGERPRINT);
                assert_eq!(r.evidence_level, EvidenceLevel::Mock);
            }
        }
    }

    #[test]
    fn a_median_shift_moves_overlap_and_serial_by_that_much() {
        for model in NoiseModel::ALL {
            let a = synthetic_run(model, 5_000, &Effect::NONE, 7);
            let b = synthetic_run(model, 5_000, &Effect::shift(0.05), 7);
            let ratio = overlap_median(&b) / overlap_median(&a);
            assert!((ratio - 1.05).abs() < 1e-9, "{}: {ratio}", model.name());
            let serial = |r: &RunResult| r.row(Schedule::Serial).expect("serial").median_max_rank_ms;
            assert!((serial(&b) / serial(&a) - 1.05).abs() < 1e-9);
            let compute = |r: &RunResult| r.row(Schedule::ComputeOnly).expect("compute").samples_ms.clone();
            assert_eq!(compute(&a), compute(&b), "the effect leaves compute_only alone");
        }
        // Across independent seeds too, on a big n, the quiet model's shift shows as ≈ 5 %.
        let a = synthetic_run(NoiseModel::QuietLogNormal, 20_000, &Effect::NONE, 1);
        let b = synthetic_run(NoiseModel::QuietLogNormal, 20_000, &Effect::shift(0.05), 2);
        let ratio = overlap_median(&b) / overlap_median(&a);
        assert!((ratio - 1.05).abs() < 0.002, "{ratio}");
    }

    #[test]
    fn models_have_their_documented_shape() {
        let n = 20_000;
        let overlap = |model, seed| -> Vec<f64> {
            let r = synthetic_run(model, n, &Effect::NONE, seed);
            r.row(Schedule::Overlap).expect("overlap").samples_ms.clone()
        };
        let share_above = |v: &[f64], x: f64| v.iter().filter(|s| **s > x).count() as f64 / v.len() as f64;
        // Quiet: log-sd ≈ 0.02.
        let logs: Vec<f64> = overlap(NoiseModel::QuietLogNormal, 3).iter().map(|x| (x / 0.85).ln()).collect();
        let mean = logs.iter().sum::<f64>() / n as f64;
        let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
        assert!((sd - 0.02).abs() < 0.001, "{sd}");
        // Heavy outliers: ≈ 5 % of steps beyond +25 %.
        let share = share_above(&overlap(NoiseModel::HeavyOutliers, 3), 0.85 * 1.25);
        assert!((0.04..0.06).contains(&share), "{share}");
        // Slow episodes: ≈ 1/6 of steps slow (stationary share 0.02 / (0.02 + 0.1)).
        let share = share_above(&overlap(NoiseModel::SlowEpisodes, 3), 0.85 * 1.01 * 1.10);
        assert!((0.10..0.24).contains(&share), "{share}");
        // Run-level shift: run medians spread by up to ±2 %, not more.
        let medians: Vec<f64> = (0..40)
            .map(|seed| {
                let mut v = overlap(NoiseModel::RunLevelShift, seed);
                v.sort_by(f64::total_cmp);
                median(&v) / 0.85
            })
            .collect();
        let (lo, hi) = medians.iter().fold((f64::MAX, f64::MIN), |(lo, hi), m| (lo.min(*m), hi.max(*m)));
        assert!(lo > 0.975 && hi < 1.025 && hi - lo > 0.02, "{lo} {hi}");
        // A tail effect slows about its share of the steps.
        let base = synthetic_run(NoiseModel::QuietLogNormal, n, &Effect::NONE, 9);
        let tail = synthetic_run(NoiseModel::QuietLogNormal, n, &Effect::tail(0.1, 1.3), 9);
        let slowed = base.rows[3].samples_ms.iter().zip(&tail.rows[3].samples_ms).filter(|(a, b)| *b > *a).count()
            as f64
            / n as f64;
        assert!((0.09..0.11).contains(&slowed), "{slowed}");
    }

    /// The `overlap` samples of one run, as built.
    fn row_of(r: &RunResult, schedule: Schedule) -> Vec<f64> {
        r.row(schedule).expect("row").samples_ms.clone()
    }

    fn sorted(mut v: Vec<f64>) -> Vec<f64> {
        v.sort_by(f64::total_cmp);
        v
    }

    /// Median of `v` (unsorted).
    fn med(v: &[f64]) -> f64 {
        median(&sorted(v.to_vec()))
    }

    /// Sample standard deviation.
    fn sd(v: &[f64]) -> f64 {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
    }

    #[test]
    fn the_first_six_models_give_the_samples_they_always_gave() {
        // Pinned from the simulator before the later families were added: a change here moves
        // every figure the gate-quality bench has ever printed.
        let pinned: [(NoiseModel, f64); 6] = [
            (NoiseModel::QuietLogNormal, PINNED[0]),
            (NoiseModel::HeavyOutliers, PINNED[1]),
            (NoiseModel::BimodalClocks, PINNED[2]),
            (NoiseModel::RunLevelShift, PINNED[3]),
            (NoiseModel::SlowEpisodes, PINNED[4]),
            (NoiseModel::Drift, PINNED[5]),
        ];
        for (model, sum) in pinned {
            let r = synthetic_run(
                model,
                100,
                &Effect { median_shift: 0.05, tail_fraction: 0.1, tail_factor: 1.3, rank_tail: None },
                11,
            );
            let got: f64 = r.rows.iter().flat_map(|row| row.samples_ms.iter()).sum();
            assert_eq!(got.to_bits(), sum.to_bits(), "{}: {got:?}", model.name());
        }
    }

    /// The sum of every sample of `synthetic_run(model, 100, +5 % and 10 % ×1.3, 11)`, bit for
    /// bit, from the simulator as it was before the later families.
    const PINNED: [f64; 6] = [
        342.47962361141015,
        353.46512274800716,
        347.99057975116375,
        338.6887059259497,
        348.40372466570415,
        338.84638819713797,
    ];

    #[test]
    fn every_family_is_deterministic_valid_and_shifts_exactly() {
        for model in NoiseModel::FAMILIES {
            let a = synthetic_run(model, 200, &Effect::NONE, 5);
            assert_eq!(a, synthetic_run(model, 200, &Effect::NONE, 5), "{}", model.name());
            assert_ne!(a.rows, synthetic_run(model, 200, &Effect::NONE, 6).rows, "{}", model.name());
            assert_eq!(validate(&a), Ok(()), "{}", model.name());
            assert!(a.rows.iter().all(|r| r.samples_ms.iter().all(|x| x.is_finite() && *x > 0.0)), "{}", model.name());
            let b = synthetic_run(model, 200, &Effect::shift(0.05), 5);
            for s in [Schedule::Overlap, Schedule::Serial] {
                for (x, y) in row_of(&a, s).iter().zip(&row_of(&b, s)) {
                    assert!((y / x - 1.05).abs() < 1e-12, "{} {s:?}", model.name());
                }
            }
            for s in [Schedule::CommOnly, Schedule::ComputeOnly] {
                assert_eq!(row_of(&a, s), row_of(&b, s), "{}", model.name());
            }
        }
    }

    #[test]
    fn a_rank_tail_moves_the_p95_and_not_the_median_whatever_the_family() {
        for model in NoiseModel::FAMILIES {
            for seed in 0..5 {
                let a = synthetic_run(model, 200, &Effect::NONE, seed);
                let b = synthetic_run(model, 200, &Effect::tail_rank(0.90, 1.15), seed);
                for s in [Schedule::Overlap, Schedule::Serial] {
                    let (ra, rb) = (a.row(s).expect("row"), b.row(s).expect("row"));
                    if model == NoiseModel::WarmupRamp {
                        // The tail of the steady state after the ramp (5–25 steps) is slowed:
                        // a tenth of its 175–195 steps, none of the ramp's first five.
                        let slowed: Vec<usize> = (0..200).filter(|&i| rb.samples_ms[i] > ra.samples_ms[i]).collect();
                        assert!((17..=20).contains(&slowed.len()), "{s:?}: {slowed:?}");
                        assert!(slowed.iter().all(|&i| i >= 5), "{s:?}: {slowed:?}");
                        assert_eq!(rb.median_max_rank_ms, ra.median_max_rank_ms, "{s:?}");
                        continue;
                    }
                    let p95 = rb.p95_max_rank_ms / ra.p95_max_rank_ms;
                    assert!((p95 - 1.15).abs() < 1e-9, "{} {s:?}: P95 ×{p95}", model.name());
                    assert_eq!(rb.median_max_rank_ms, ra.median_max_rank_ms, "{} {s:?}", model.name());
                    let slowed = ra.samples_ms.iter().zip(&rb.samples_ms).filter(|(x, y)| y > x).count();
                    assert_eq!(slowed, 20, "{} {s:?}: the steps above the P90 are 10 %", model.name());
                }
                assert_eq!(row_of(&a, Schedule::ComputeOnly), row_of(&b, Schedule::ComputeOnly));
            }
        }
    }

    #[test]
    fn nccl_modes_have_their_documented_shape() {
        let runs = 600;
        let mut counts = BTreeMap::new();
        for seed in 0..runs {
            let r = synthetic_run(NoiseModel::NcclModes, 400, &Effect::NONE, seed);
            let name = r.software.nccl_choice.clone().expect("NcclModes records the choice");
            let choice = NCCL_CHOICES.iter().find(|c| c.name == name).expect("a known choice");
            *counts.entry(choice.name).or_insert(0usize) += 1;
            let change = choice.comm_factor - 1.0;
            let level = |s: Schedule, base: f64| med(&row_of(&r, s)) / base;
            // compute_only: the run shift (±0.5 %) plus the median's sampling error (≈ 0.13 % at
            // n = 400); the others relative to it, so the run shift cancels.
            let compute = level(Schedule::ComputeOnly, 0.70);
            assert!((compute - 1.0).abs() < 0.011, "{name}: {compute}");
            let near = |x: f64, want: f64| (x / compute / want - 1.0).abs() < 0.008;
            assert!(near(level(Schedule::CommOnly, 0.50), choice.comm_factor), "{name}");
            assert!(near(level(Schedule::Serial, 1.20), 1.0 + change * 0.5 / 1.2), "{name}");
            assert!(near(level(Schedule::Overlap, 0.85), 1.0 + 0.6 * change), "{name}");
            // Unrecorded: the same samples, no choice.
            let u = synthetic_run(NoiseModel::NcclModesUnrecorded, 400, &Effect::NONE, seed);
            assert_eq!(u.rows, r.rows);
            assert_eq!(u.software.nccl_choice, None);
        }
        for c in NCCL_CHOICES {
            let share = counts.get(c.name).copied().unwrap_or(0) as f64 / runs as f64;
            assert!((share - c.probability).abs() < 0.05, "{}: {share}", c.name);
        }
        // The other models record no choice.
        assert_eq!(synthetic_run(NoiseModel::QuietLogNormal, 20, &Effect::NONE, 1).software.nccl_choice, None);
    }

    #[test]
    fn runner_clusters_have_their_documented_shape() {
        let level = |fleet: u64, runner: usize, seed: u64| {
            let r = SimRun::new(NoiseModel::RunnerClusters, 2_000, seed).fleet(fleet).on_runner(runner).build();
            assert_eq!(r.provenance.runner, Some(format!("runner-{runner}")));
            med(&row_of(&r, Schedule::Overlap)) / 0.85
        };
        // The same runner of the same fleet: within the ±0.5 % run shift (and sampling) of itself.
        let same: Vec<f64> = (0..20).map(|seed| level(3, 2, seed)).collect();
        let (lo, hi) = same.iter().fold((f64::MAX, f64::MIN), |(lo, hi), m| (lo.min(*m), hi.max(*m)));
        assert!(hi / lo < 1.013, "{lo} {hi}");
        // Runners differ: log-sd of their levels ≈ 2 % (one run each, so plus ≈ 0.3 % of run shift).
        let logs: Vec<f64> = (0..300).map(|runner| level(3, runner, 9).ln()).collect();
        let s = sd(&logs);
        assert!((0.017..0.024).contains(&s), "{s}");
        // Another fleet, other levels.
        assert!((level(3, 0, 1) / level(4, 0, 1) - 1.0).abs() > 1e-6);
        // Without a runner, the seed picks one of the fleet's.
        let r = synthetic_run(NoiseModel::RunnerClusters, 20, &Effect::NONE, 1);
        let name = r.provenance.runner.expect("a runner");
        assert!((0..FLEET_SIZE).any(|i| name == runner_name(i)), "{name}");
        // Other models record a runner only when given one, and their levels ignore it.
        assert_eq!(synthetic_run(NoiseModel::QuietLogNormal, 20, &Effect::NONE, 1).provenance.runner, None);
        let placed = SimRun::new(NoiseModel::QuietLogNormal, 20, 1).on_runner(5).build();
        assert_eq!(placed.provenance.runner.as_deref(), Some("runner-5"));
        assert_eq!(placed.rows, synthetic_run(NoiseModel::QuietLogNormal, 20, &Effect::NONE, 1).rows);
    }

    #[test]
    fn step_changes_have_their_documented_shape() {
        let n = 4_000;
        let runs = 300;
        let mut stepped = 0;
        for seed in 0..runs {
            let r = synthetic_run(NoiseModel::StepChange, n, &Effect::NONE, seed);
            // The first and last 10 % of steps lie before and after any step.
            let ratio = |s: Schedule| {
                let v = row_of(&r, s);
                med(&v[n * 9 / 10..]) / med(&v[..n / 10])
            };
            let ratios: Vec<f64> = BASE_MS.iter().map(|(s, _)| ratio(*s)).collect();
            let r0 = ratios[0];
            assert!(ratios.iter().all(|x| (x - r0).abs() < 0.012), "all rows step together: {ratios:?}");
            if r0 > 1.03 {
                stepped += 1;
                assert!((1.052..1.128).contains(&r0), "{r0}");
            } else {
                assert!((r0 - 1.0).abs() < 0.012, "{r0}");
            }
        }
        let share = f64::from(stepped) / runs as f64;
        assert!((0.33..0.47).contains(&share), "{share}");
    }

    #[test]
    fn warmup_ramps_have_their_documented_shape() {
        let n = 400;
        for seed in 0..100 {
            let r = synthetic_run(NoiseModel::WarmupRamp, n, &Effect::NONE, seed);
            for (s, base) in BASE_MS {
                let v = row_of(&r, s);
                let first = v[0] / base;
                // U(1.2, 1.6) times the 2 % step noise.
                assert!((1.12..1.72).contains(&first), "{seed} {s:?}: {first}");
                // Beyond the longest ramp (25 steps, τ ≤ 8.3) the level is back.
                let late = med(&v[60..]) / base;
                assert!((late - 1.0).abs() < 0.006, "{seed} {s:?}: {late}");
            }
            // The same ramp on every row.
            let start = |s: Schedule, base: f64| row_of(&r, s)[..3].iter().sum::<f64>() / (3.0 * base);
            let (a, b) = (start(Schedule::Overlap, 0.85), start(Schedule::ComputeOnly, 0.70));
            assert!((a / b - 1.0).abs() < 0.08, "{a} {b}");
        }
    }

    #[test]
    fn periodic_spikes_have_their_documented_shape() {
        let n = 1_000;
        let mut periods = BTreeMap::new();
        for seed in 0..60 {
            let r = synthetic_run(NoiseModel::PeriodicSpike, n, &Effect::NONE, seed);
            let spikes = |s: Schedule, base: f64| -> Vec<usize> {
                row_of(&r, s).iter().enumerate().filter(|(_, x)| **x > 1.25 * base).map(|(i, _)| i).collect()
            };
            let at = spikes(Schedule::Overlap, 0.85);
            assert_eq!(at, spikes(Schedule::CommOnly, 0.50), "the same steps on every row");
            let period = at[1] - at[0];
            assert_eq!(period, SPIKE_PERIOD);
            assert!(at[0] < period && at.windows(2).all(|w| w[1] - w[0] == period), "{at:?}");
            assert_eq!(at.len(), (n - at[0]).div_ceil(period));
            let v = row_of(&r, Schedule::Overlap);
            assert!(at.iter().all(|i| (1.3..1.95).contains(&(v[*i] / 0.85))), "U(1.4, 1.8) × the step noise");
            *periods.entry(period).or_insert(0) += 1;
        }
        assert_eq!(periods.len(), 1, "one period, the job's: {periods:?}");
    }

    #[test]
    fn heavy_tails_have_their_documented_shape() {
        let n = 200_000;
        let v = sorted(row_of(&synthetic_run(NoiseModel::HeavyTail, n, &Effect::NONE, 3), Schedule::Overlap));
        // The tail's own median is +1.6 %; times the step noise, ≈ +2 %.
        let m = median(&v) / 0.85;
        assert!((1.015..1.025).contains(&m), "median ×{m}");
        let p99 = type7_quantile(&v, 0.99) / 0.85;
        assert!((1.23..1.31).contains(&p99), "P99 ×{p99}");
        let beyond = v.iter().filter(|x| **x > 0.85 * 1.30).count() as f64 / n as f64;
        assert!((0.005..0.013).contains(&beyond), "{beyond}");
    }

    #[test]
    fn shared_runners_have_their_documented_shape() {
        let n = 20_000;
        // About a third of the steps in slow episodes of ×1.3–2.0.
        for seed in 0..5 {
            let v = sorted(row_of(&synthetic_run(NoiseModel::SharedRunner, n, &Effect::NONE, seed), Schedule::Overlap));
            let floor = type7_quantile(&v, 0.2);
            let slow = v.iter().filter(|x| **x > 1.25 * floor).count() as f64 / n as f64;
            assert!((0.25..0.45).contains(&slow), "{seed}: {slow}");
        }
        // Runs spread by ≈ 8 % (log-sd), more than any other family.
        let logs: Vec<f64> = (0..200)
            .map(|seed| {
                let v = sorted(row_of(
                    &synthetic_run(NoiseModel::SharedRunner, 400, &Effect::NONE, seed),
                    Schedule::Overlap,
                ));
                type7_quantile(&v, 0.2).ln()
            })
            .collect();
        let s = sd(&logs);
        assert!((0.065..0.1).contains(&s), "{s}");
    }
}
