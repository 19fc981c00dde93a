//! Simulated benchmark runs for measuring the gate's quality (`benches/gate_quality.rs`,
//! `benches/compare_speed.rs`, `examples/gen_results.rs`): seeded noise models shaped like real
//! GPU step times, an optional injected regression ([`Effect`]), and [`synthetic_run`], which
//! wraps the samples in a complete, valid [`RunResult`].
//!
//! This module owns only the simulation; it decides nothing, and it is test and benchmark
//! support (the `testkit` feature), never part of a gate's decision path. Every draw comes from
//! [`crate::stats::rng::Rng`] seeded by the caller, so a run is a pure function of
//! `(model, n, effect, run spread, seed)`.
//!
//! How a step time is built, for each of the four rows (`comm_only` 0.50 ms, `compute_only`
//! 0.70 ms, `serial` 1.20 ms, `overlap` 0.85 ms):
//!
//! ```text
//! step = base · run_level · exp(N(0, 0.02)) · model-specific factor · effect (overlap, serial)
//! ```
//!
//! `run_level` is drawn once per run and shared by all four rows (a clock or placement change
//! moves the whole run), so `exposed = overlap − compute_only` keeps its sign. The effect's draws
//! come from a stream of their own, so the same seed with and without an effect gives the same
//! noise: a pure median shift multiplies the overlap and serial samples exactly.

use std::collections::BTreeMap;

use crate::bench::assemble::{self, RunContext, Timings};
use crate::bench::{Dtype, HardwareInfo, Plan};
use crate::result::{EvidenceLevel, Provenance, RunResult, Schedule};
use crate::stats::rng::Rng;

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
}

impl NoiseModel {
    pub const ALL: [NoiseModel; 6] = [
        NoiseModel::QuietLogNormal,
        NoiseModel::HeavyOutliers,
        NoiseModel::BimodalClocks,
        NoiseModel::RunLevelShift,
        NoiseModel::SlowEpisodes,
        NoiseModel::Drift,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NoiseModel::QuietLogNormal => "quiet_lognormal",
            NoiseModel::HeavyOutliers => "heavy_outliers",
            NoiseModel::BimodalClocks => "bimodal_clocks",
            NoiseModel::RunLevelShift => "run_level_shift",
            NoiseModel::SlowEpisodes => "slow_episodes",
            NoiseModel::Drift => "drift",
        }
    }

    /// Half-width of the uniform run-level factor this model uses by default (0 for the models
    /// without one).
    pub fn default_run_spread(self) -> f64 {
        match self {
            NoiseModel::QuietLogNormal | NoiseModel::HeavyOutliers | NoiseModel::BimodalClocks => 0.0,
            NoiseModel::RunLevelShift => 0.02,
            NoiseModel::SlowEpisodes | NoiseModel::Drift => 0.01,
        }
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
}

impl Effect {
    /// No change: an A/A comparison.
    pub const NONE: Effect = Effect { median_shift: 0.0, tail_fraction: 0.0, tail_factor: 1.0 };

    /// Every step slower by `shift` (relative).
    pub fn shift(shift: f64) -> Effect {
        Effect { median_shift: shift, ..Effect::NONE }
    }

    /// A share `fraction` of the steps slower by `factor`; the rest untouched.
    pub fn tail(fraction: f64, factor: f64) -> Effect {
        Effect { tail_fraction: fraction, tail_factor: factor, ..Effect::NONE }
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

/// Per-run state of a noise model, drawn once per run.
struct RunState {
    level: f64,
    /// BimodalClocks: this run's share of steps at the slow clock.
    slow_share: f64,
    /// Drift: relative change from the first step to the last.
    drift: f64,
}

impl RunState {
    fn draw(model: NoiseModel, run_spread: f64, rng: &mut Rng) -> RunState {
        let level = 1.0 + symmetric(rng, run_spread);
        let slow_share = uniform(rng, 0.2, 0.4);
        let drift = symmetric(rng, 0.02);
        match model {
            NoiseModel::BimodalClocks => RunState { level, slow_share, drift: 0.0 },
            NoiseModel::Drift => RunState { level, slow_share: 0.0, drift },
            _ => RunState { level, slow_share: 0.0, drift: 0.0 },
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
                NoiseModel::QuietLogNormal | NoiseModel::RunLevelShift => 1.0,
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
                NoiseModel::SlowEpisodes => {
                    slow = match slow {
                        Some(f) if rng.next_f64() < 0.9 => Some(f),
                        Some(_) => None,
                        None if rng.next_f64() < 0.02 => Some(uniform(rng, 1.15, 1.25)),
                        None => None,
                    };
                    slow.unwrap_or(1.0)
                }
                NoiseModel::Drift => 1.0 + state.drift * i as f64 / (n.max(2) - 1) as f64,
            };
            state.level * quiet * specific
        })
        .collect()
}

/// Applies `effect` to one row's samples in place, drawing from `rng` (a stream of its own).
fn apply_effect(samples: &mut [f64], effect: &Effect, rng: &mut Rng) {
    for s in samples.iter_mut() {
        *s *= 1.0 + effect.median_shift;
        // Always draw, so the noise does not depend on whether a tail is injected.
        if rng.next_f64() < effect.tail_fraction {
            *s *= effect.tail_factor;
        }
    }
}

/// A complete, valid mock [`RunResult`] whose four rows each hold `n` simulated samples from
/// `model`, with `effect` applied to `overlap` and `serial`, using the model's default run-level
/// spread ([`NoiseModel::default_run_spread`]). Deterministic in `seed`.
pub fn synthetic_run(model: NoiseModel, n: usize, effect: &Effect, seed: u64) -> RunResult {
    synthetic_run_with_spread(model, n, effect, model.default_run_spread(), seed)
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
    let mut rng = Rng::new(seed);
    // A second, independent stream for the effect (splitmix64 seeding decorrelates the seeds).
    let mut effect_rng = Rng::new(seed ^ 0x5EED_E77E_C7E5_A5A5);
    let state = RunState::draw(model, run_spread, &mut rng);
    // Two ranks: the simulated samples are the slowest rank's, the other is 1 % faster.
    let mut timings: Timings = BTreeMap::new();
    for &(schedule, base) in BASE_MS.iter() {
        let mut samples: Vec<f64> = row_factors(model, &state, n, &mut rng).into_iter().map(|f| base * f).collect();
        if matches!(schedule, Schedule::Overlap | Schedule::Serial) {
            apply_effect(&mut samples, effect, &mut effect_rng);
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
        evidence_level: EvidenceLevel::Mock,
        hardware: HardwareInfo {
            gpu_name: Some("simulated".into()),
            gpu_count: 2,
            host_cpu: Some("simulated".into()),
            ..HardwareInfo::default()
        },
        nodes: 1,
        nccl_env: BTreeMap::new(),
        provenance: Provenance::default(),
        run_label: format!("sim-{}-{seed}", model.name()),
        environment_profile: "SIM-MOCK".into(),
        created_at: "2026-11-30T00:00:00Z".into(),
    };
    assemble::build(&ctx, Some(&timings), None, crate::decide::run::decide)
}

/// The hardware fingerprint every simulated run carries.
pub const SIM_FINGERPRINT: &str = "044b46ed0e1a6216";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::validate;
    use crate::stats::quantile::median;

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
                    &Effect { median_shift: 0.05, tail_fraction: 0.1, tail_factor: 1.3 },
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
}
