//! One trace quantity of one collective, estimated: the per-step samples of the stored trace runs
//! against the current traces', in the two regimes the benchmark comparison uses (history over
//! runs when there are at least three, pooled steps otherwise). Pure functions on samples.

use super::{Quantity, Scale};
use crate::compare::estimate::{one_sided, Estimate};
use crate::compare::Method;
use commgate_stats::bootstrap::{percentile_interval, SortedResampler};
use commgate_stats::interval::{mean_sd, prediction_interval, robust_spread, t_sf};
use commgate_stats::mann_whitney::mann_whitney_u;
use commgate_stats::quantile::{harrell_davis, HdWeights};
use commgate_stats::rng::Rng;
use commgate_stats::serial::dependent_block_length;

/// A quantity's per-step samples: one series per stored run (oldest first) and the current one.
pub(super) struct Samples<'a> {
    pub(super) runs: Vec<&'a [f64]>,
    pub(super) current: &'a [f64],
}

/// What the estimate needs besides the samples.
pub(super) struct Setting {
    pub(super) scale: Scale,
    pub(super) min_effect: f64,
    pub(super) level: f64,
    pub(super) resamples: usize,
}

/// A quantity's estimate with its own δ (the smallest change that counts: per quantity for
/// traces, from the stored runs' spread).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct WithDelta {
    pub(super) estimate: Estimate,
    pub(super) delta: f64,
}

/// The median of unsorted samples (Harrell–Davis, as the benchmark's).
fn median_of(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        f64::NAN
    } else {
        harrell_davis(&sorted, 0.5)
    }
}

impl Scale {
    /// The value on the scale the test runs on: the log for a ratio, the share of the baseline
    /// step for a share.
    fn to_test(self, ms: f64) -> f64 {
        match self {
            Scale::Log => ms.ln(),
            Scale::ShareOfStep(step) => ms / step,
        }
    }

    /// A difference on the test's scale as the reported ratio (1 = unchanged).
    fn to_ratio(self, d: f64) -> f64 {
        match self {
            Scale::Log => d.exp(),
            Scale::ShareOfStep(_) => 1.0 + d,
        }
    }

    fn defined(self, ms: f64) -> bool {
        match self {
            Scale::Log => ms > 0.0 && ms.is_finite(),
            Scale::ShareOfStep(step) => ms.is_finite() && step > 0.0 && step.is_finite(),
        }
    }
}

/// Estimates one quantity: the history regime with at least three stored runs, pooled steps
/// otherwise. `rng` drives the moving-block bootstraps (seeded by the caller).
pub(super) fn estimate(q: Quantity, s: &Samples<'_>, set: &Setting, rng: &mut Rng) -> WithDelta {
    let n_baseline = s.runs.iter().map(|r| r.len()).min().unwrap_or(0);
    let n_current = s.current.len();
    let method = if s.runs.len() >= 3 { Method::History } else { Method::Pooled };
    let undefined = |baseline: f64, current: f64, why: String| WithDelta {
        estimate: Estimate::undefined(baseline, current, n_baseline, n_current, method, Some(why)),
        delta: set.min_effect,
    };
    if n_baseline == 0 || n_current == 0 {
        return undefined(f64::NAN, f64::NAN, format!("{} has no per-step samples on one side", q.as_str()));
    }
    if method == Method::History {
        history(q, s, set, rng, n_baseline, n_current).unwrap_or_else(|(b, c, why)| undefined(b, c, why))
    } else {
        pooled(q, s, set, rng, n_current).unwrap_or_else(|(b, c, why)| undefined(b, c, why))
    }
}

/// Why an estimate is undefined, with the baseline and current values to show.
type Undefined = (f64, f64, String);

/// The current series' median replicates (moving blocks, as the benchmark's current run).
fn current_replicates(current: &[f64], resamples: usize, rng: &mut Rng) -> Vec<f64> {
    let mut resampler = SortedResampler::new(current);
    let block = dependent_block_length(current);
    // Every replicate has the series' length: one set of Harrell–Davis weights serves them all.
    let weights = HdWeights::new(current.len(), 0.5);
    let mut out = Vec::with_capacity(resamples);
    let mut buf = Vec::with_capacity(current.len());
    for _ in 0..resamples {
        resampler.resample_sorted(block, rng, &mut buf);
        out.push(weights.apply(&buf));
    }
    out
}

/// The current median against the spread of the runs' medians: a Student-t prediction interval
/// on the test's scale, its spread floored at the current median's bootstrap standard error;
/// δ = max(min effect, 3 × the runs' robust spread).
fn history(
    q: Quantity,
    s: &Samples<'_>,
    set: &Setting,
    rng: &mut Rng,
    n_baseline: usize,
    n_current: usize,
) -> Result<WithDelta, Undefined> {
    let medians: Vec<f64> = s.runs.iter().map(|r| median_of(r)).collect();
    let current = median_of(s.current);
    let baseline = medians.iter().sum::<f64>() / medians.len() as f64;
    if !medians.iter().chain([&current]).all(|&v| set.scale.defined(v)) {
        return Err((baseline, current, undefined_why(q, set.scale)));
    }
    let xs: Vec<f64> = medians.iter().map(|&v| set.scale.to_test(v)).collect();
    let x = set.scale.to_test(current);
    let reps: Vec<f64> = current_replicates(s.current, set.resamples, rng)
        .into_iter()
        .filter(|&v| set.scale.defined(v))
        .map(|v| set.scale.to_test(v))
        .collect();
    let (_, se_current) = mean_sd(&reps);
    let Some(pi) = prediction_interval(&xs, set.level).map(|pi| pi.with_sd_floor(se_current)) else {
        return Err((baseline, current, format!("{} has a non-finite stored value", q.as_str())));
    };
    let d = x - pi.center;
    let (p_regressed, p_improved) = one_sided(d, pi.se, |z| t_sf(pi.df, z));
    let baseline = match set.scale {
        Scale::Log => pi.center.exp(),
        Scale::ShareOfStep(_) => baseline,
    };
    let estimate = Estimate {
        mde: None,
        cannot_block: None,
        spread: None,
        baseline,
        current,
        ratio: set.scale.to_ratio(d),
        ci: [set.scale.to_ratio(d - pi.half_width), set.scale.to_ratio(d + pi.half_width)],
        p_regressed,
        p_improved,
        n_baseline,
        n_current,
        method: Method::History,
        note: None,
    };
    Ok(WithDelta { estimate, delta: set.min_effect.max(3.0 * robust_spread(&xs)) })
}

/// Steps compared directly (one or two stored runs: their run-to-run spread is unknown):
/// one-sided Mann–Whitney U on the steps, a moving-block bootstrap interval of the change of
/// the median (each stored run resampled on its own), δ = the minimum effect.
fn pooled(
    q: Quantity,
    s: &Samples<'_>,
    set: &Setting,
    rng: &mut Rng,
    n_current: usize,
) -> Result<WithDelta, Undefined> {
    let base: Vec<f64> = s.runs.iter().flat_map(|r| r.iter().copied()).collect();
    let (baseline, current) = (median_of(&base), median_of(s.current));
    if !set.scale.defined(baseline) || !set.scale.defined(current) {
        return Err((baseline, current, undefined_why(q, set.scale)));
    }
    let point = set.scale.to_test(current) - set.scale.to_test(baseline);
    let mut base_resamplers: Vec<(SortedResampler, usize)> =
        s.runs.iter().map(|r| (SortedResampler::new(r), dependent_block_length(r))).collect();
    let mut cur = (SortedResampler::new(s.current), dependent_block_length(s.current));
    let (mut pooled, mut buf) = (Vec::new(), Vec::new());
    let (base_weights, cur_weights) = (HdWeights::new(base.len(), 0.5), HdWeights::new(s.current.len(), 0.5));
    let mut reps = Vec::with_capacity(set.resamples);
    for _ in 0..set.resamples {
        pooled.clear();
        for (r, block) in &mut base_resamplers {
            r.resample_sorted(*block, rng, &mut buf);
            pooled.extend_from_slice(&buf);
        }
        pooled.sort_by(f64::total_cmp);
        let b = base_weights.apply(&pooled);
        cur.0.resample_sorted(cur.1, rng, &mut buf);
        let c = cur_weights.apply(&buf);
        if set.scale.defined(b) && set.scale.defined(c) {
            reps.push(set.scale.to_test(c) - set.scale.to_test(b));
        }
    }
    let (lo, hi) = if reps.is_empty() { (point, point) } else { percentile_interval(&mut reps, set.level) };
    let mw = mann_whitney_u(s.current, &base);
    let estimate = Estimate {
        mde: None,
        cannot_block: None,
        spread: None,
        baseline,
        current,
        ratio: set.scale.to_ratio(point),
        ci: [set.scale.to_ratio(lo), set.scale.to_ratio(hi)],
        p_regressed: mw.p_greater,
        p_improved: mw.p_less,
        n_baseline: base.len(),
        n_current,
        method: Method::Pooled,
        note: None,
    };
    Ok(WithDelta { estimate, delta: set.min_effect })
}

fn undefined_why(q: Quantity, scale: Scale) -> String {
    match scale {
        Scale::Log => format!("{} is 0 ms on one side: no ratio to judge", q.as_str()),
        Scale::ShareOfStep(_) => "no step time to measure the change against".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noisy(n: usize, level: f64, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| level * (0.02 * rng.normal()).exp()).collect()
    }

    fn setting(scale: Scale) -> Setting {
        Setting { scale, min_effect: 0.03, level: 0.95, resamples: 400 }
    }

    fn run(q: Quantity, runs: &[Vec<f64>], current: &[f64], scale: Scale) -> Estimate {
        let s = Samples { runs: runs.iter().map(Vec::as_slice).collect(), current };
        estimate(q, &s, &setting(scale), &mut Rng::new(1)).estimate
    }

    #[test]
    fn history_finds_a_ten_percent_slower_transfer_and_not_an_equal_one() {
        let runs: Vec<Vec<f64>> = (0..5).map(|i| noisy(30, 2.0, 10 + i)).collect();
        let same = run(Quantity::Transfer, &runs, &noisy(30, 2.0, 99), Scale::Log);
        assert_eq!(same.method, Method::History);
        assert!(same.ci[0] > 0.97 && same.ci[1] < 1.03, "{same:?}");
        let slower = run(Quantity::Transfer, &runs, &noisy(30, 2.2, 99), Scale::Log);
        assert!(slower.ci[0] > 1.03 + 0.0 && slower.p_regressed < 1e-3, "{slower:?}");
        assert!((slower.ratio - 1.1).abs() < 0.02, "{slower:?}");
    }

    #[test]
    fn shares_of_the_step_are_differences_over_the_step() {
        // Wait 0.2 ms per step in the baseline, 1.2 ms now, steps of 10 ms: +10 % of the step.
        let runs: Vec<Vec<f64>> = (0..2).map(|i| noisy(20, 0.2, i)).collect();
        let e = run(Quantity::Wait, &runs, &noisy(20, 1.2, 9), Scale::ShareOfStep(10.0));
        assert_eq!(e.method, Method::Pooled);
        assert!((e.ratio - 1.10).abs() < 0.005, "{e:?}");
        assert!(e.p_regressed < 1e-6 && e.ci[0] > 1.03, "{e:?}");
    }

    #[test]
    fn zeros_and_missing_samples_are_undefined_not_zero() {
        let zeros = vec![vec![0.0; 10]];
        let e = run(Quantity::Transfer, &zeros, &[1.0; 10], Scale::Log);
        assert!(e.ratio.is_nan() && e.note.as_deref().is_some_and(|n| n.contains("0 ms on one side")), "{e:?}");
        let e = run(Quantity::Exposed, &[vec![]], &[1.0], Scale::ShareOfStep(5.0));
        assert!(e.note.as_deref().is_some_and(|n| n.contains("no per-step samples")), "{e:?}");
        // Zero exposed time in the baseline is a fine baseline for a share of the step.
        let e = run(Quantity::Exposed, &zeros, &[0.0; 10], Scale::ShareOfStep(5.0));
        assert_eq!((e.ratio, e.ci), (1.0, [1.0, 1.0]));
    }
}
