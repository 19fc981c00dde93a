//! Quantile estimators on sorted data: Harrell–Davis (the gate's estimator) and the type-7
//! linear interpolation (numpy's default, for percentile intervals and cross-checks).
//!
//! **Harrell–Davis** (F. E. Harrell & C. E. Davis, "A new distribution-free quantile estimator",
//! Biometrika 69(3):635–640, 1982) estimates the p-quantile as a weighted sum of *all* order
//! statistics, `Σ wᵢ·x₍ᵢ₎`, with
//! `wᵢ = I_{i/n}(a, b) − I_{(i−1)/n}(a, b)`, `a = p(n+1)`, `b = (1−p)(n+1)`,
//! where `I` is the regularized incomplete beta function (statrs). It is the expectation of the
//! Beta(a, b)-weighted order statistic, so it is smooth in the data, has a much smaller variance
//! than a single order statistic at small n and in the tails (which is why the gate uses it for
//! P95), and its bootstrap distribution is not lumpy. It equals scipy's
//! `scipy.stats.mstats.hdquantiles`.
//!
//! The weights depend only on `(n, p)`, so [`HdWeights`] computes them once (n incomplete-beta
//! evaluations) and [`HdWeights::apply`] is then a dot product: O(n), no allocation, for every
//! bootstrap resample of the same size.
//!
//! **Type 7** (R. J. Hyndman & Y. Fan, "Sample quantiles in statistical packages", The American
//! Statistician 50(4), 1996, definition 7): linear interpolation between order statistics at
//! `h = (n−1)p`; numpy's `np.quantile(..., method="linear")`.
//!
//! Every function here expects ascending, finite input (callers sort and check)
//! and returns NaN for empty input or a NaN `p`.

use statrs::function::beta::checked_beta_reg;

/// The fewest samples on each side for a P95 to decide anything: a run with fewer repeats judges
/// its own P95 as not applicable, and a comparison lets a P95 change inform but not block.
pub const P95_MIN_SAMPLES: usize = 100;

/// Precomputed Harrell–Davis weights for one `(n, p)`.
///
/// Invariant: `weights.len() == n`; for a valid `p` every weight is ≥ 0 and they sum to 1 (to
/// rounding). For `p ≤ 0` (`p ≥ 1`) all weight is on the minimum (maximum), the limits of the
/// estimator; for a NaN `p` the weights are NaN, so [`HdWeights::apply`] returns NaN.
#[derive(Debug, Clone, PartialEq)]
pub struct HdWeights {
    weights: Vec<f64>,
}

impl HdWeights {
    /// Weights for the p-quantile of a sorted sample of size `n` (n regularized incomplete-beta
    /// evaluations).
    pub fn new(n: usize, p: f64) -> HdWeights {
        if n == 0 {
            return HdWeights { weights: Vec::new() };
        }
        let mut weights = vec![0.0; n];
        if p.is_nan() {
            weights.fill(f64::NAN);
            return HdWeights { weights };
        }
        if n == 1 || p <= 0.0 {
            weights[0] = 1.0;
            return HdWeights { weights };
        }
        if p >= 1.0 {
            weights[n - 1] = 1.0;
            return HdWeights { weights };
        }
        let m = n as f64 + 1.0;
        let (a, b) = (p * m, (1.0 - p) * m);
        let nf = n as f64;
        // a, b > 0 and x ∈ [0, 1] here, so checked_beta_reg cannot fail; the fallback keeps the
        // signature total without a panic path.
        let cdf = |i: usize| if i == n { 1.0 } else { checked_beta_reg(a, b, i as f64 / nf).unwrap_or(f64::NAN) };
        let mut previous = 0.0;
        let mut total = 0.0;
        for (i, w) in weights.iter_mut().enumerate() {
            let current = cdf(i + 1);
            // The difference of a non-decreasing function; clamp rounding noise (~1e-17) at zero.
            *w = (current - previous).max(0.0);
            total += *w;
            previous = current;
        }
        // Re-normalise away the clamping and rounding so the weights sum to 1 within an ulp or so.
        if total > 0.0 {
            for w in &mut weights {
                *w /= total;
            }
        }
        HdWeights { weights }
    }

    /// The estimate `Σ wᵢ·sorted[i]`. `sorted` must be ascending with length `n`; NaN otherwise
    /// (a length mismatch is a caller bug, but not one worth a panic in a merge gate).
    pub fn apply(&self, sorted: &[f64]) -> f64 {
        if sorted.len() != self.weights.len() || sorted.is_empty() {
            return f64::NAN;
        }
        self.weights.iter().zip(sorted).map(|(w, x)| w * x).sum()
    }

    /// The weights, one per order statistic.
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// The sample size `n` the weights were built for.
    pub fn len(&self) -> usize {
        self.weights.len()
    }

    /// True when built for `n == 0`.
    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }
}

/// Harrell–Davis p-quantile of ascending `sorted` (`n == 1` gives the value itself).
/// Computes the weights each call; reuse an [`HdWeights`] when estimating many samples of one size.
pub fn harrell_davis(sorted: &[f64], p: f64) -> f64 {
    HdWeights::new(sorted.len(), p).apply(sorted)
}

/// Type-7 (numpy default, linear interpolation) p-quantile of ascending `sorted`; `p` is clamped to
/// `[0, 1]`.
pub fn type7_quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() || p.is_nan() {
        return f64::NAN;
    }
    let h = (sorted.len() - 1) as f64 * p.clamp(0.0, 1.0);
    let lo = h.floor();
    let i = lo as usize;
    match sorted.get(i + 1) {
        Some(&next) => sorted[i] + (h - lo) * (next - sorted[i]),
        None => sorted[i],
    }
}

/// The ordinary sample median (mean of the two middle values for even n) of ascending `sorted`.
pub fn median(sorted: &[f64]) -> f64 {
    type7_quantile(sorted, 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;
    use proptest::prelude::*;

    const X10: [f64; 10] = [1.2, 1.9, 2.4, 3.1, 3.3, 4.8, 5.0, 6.7, 8.2, 12.5];

    // from scipy.stats.mstats import hdquantiles
    // x = [1.2, 1.9, 2.4, 3.1, 3.3, 4.8, 5.0, 6.7, 8.2, 12.5]
    // print(repr(hdquantiles(x, prob=[0.5, 0.95, 0.1]).data))
    //   -> 4.15475587834395, 11.739577563045037, 1.5669171132244717
    #[test]
    fn harrell_davis_matches_scipy_hdquantiles_n10() {
        assert_relative_eq!(harrell_davis(&X10, 0.5), 4.15475587834395, max_relative = 1e-12);
        assert_relative_eq!(harrell_davis(&X10, 0.95), 11.739577563045037, max_relative = 1e-12);
        assert_relative_eq!(harrell_davis(&X10, 0.1), 1.5669171132244717, max_relative = 1e-12);
    }

    // x = [10.0, 10.5, 11.0, 30.0]; print(repr(hdquantiles(x, prob=[0.5, 0.95]).data))
    //   -> 13.091822454677985, 29.11713378801626
    #[test]
    fn harrell_davis_matches_scipy_hdquantiles_n4_with_outlier() {
        let x = [10.0, 10.5, 11.0, 30.0];
        assert_relative_eq!(harrell_davis(&x, 0.5), 13.091822454677985, max_relative = 1e-12);
        assert_relative_eq!(harrell_davis(&x, 0.95), 29.11713378801626, max_relative = 1e-12);
    }

    // import numpy as np
    // x = 100 + 10 * np.sin(np.arange(1000) * 0.7) + np.arange(1000) * 0.01
    // print(repr(hdquantiles(np.sort(x), prob=[0.5, 0.95]).data))
    //   -> 104.93859987164342, 116.61736886816708
    #[test]
    fn harrell_davis_matches_scipy_hdquantiles_n1000() {
        let mut x: Vec<f64> = (0..1000).map(|i| 100.0 + 10.0 * (i as f64 * 0.7).sin() + i as f64 * 0.01).collect();
        x.sort_unstable_by(f64::total_cmp);
        assert_relative_eq!(harrell_davis(&x, 0.5), 104.93859987164342, max_relative = 1e-11);
        assert_relative_eq!(harrell_davis(&x, 0.95), 116.61736886816708, max_relative = 1e-11);
    }

    #[test]
    fn harrell_davis_degenerate_cases() {
        assert_eq!(harrell_davis(&[4.2], 0.95), 4.2);
        assert!(harrell_davis(&[], 0.5).is_nan());
        assert!(harrell_davis(&X10, f64::NAN).is_nan());
        assert_eq!(harrell_davis(&X10, 0.0), 1.2);
        assert_eq!(harrell_davis(&X10, 1.0), 12.5);
        assert!(HdWeights::new(3, 0.5).apply(&[1.0, 2.0]).is_nan());
    }

    // Not timed: the comparison relies on these properties for n ≈ 1000 resamples.
    #[test]
    fn weights_are_nonnegative_and_sum_to_one() {
        for n in [1, 2, 3, 10, 30, 100, 1000, 5000] {
            for p in [0.01, 0.05, 0.1, 0.5, 0.9, 0.95, 0.99] {
                let w = HdWeights::new(n, p);
                assert_eq!(w.len(), n);
                assert!(w.weights().iter().all(|&x| x >= 0.0), "n={n} p={p}");
                let total: f64 = w.weights().iter().sum();
                assert!((total - 1.0).abs() <= 1e-12, "n={n} p={p} total={total}");
            }
        }
    }

    // import numpy as np
    // x = [1.2, 1.9, 2.4, 3.1, 3.3, 4.8, 5.0, 6.7, 8.2, 12.5]
    // np.quantile(x, [0.5, 0.95, 0.1, 0.0, 1.0])  ->  [4.05, 10.565, 1.83, 1.2, 12.5]
    #[test]
    fn type7_matches_numpy() {
        assert_relative_eq!(type7_quantile(&X10, 0.5), 4.05, max_relative = 1e-14);
        assert_relative_eq!(type7_quantile(&X10, 0.95), 10.565, max_relative = 1e-14);
        assert_relative_eq!(type7_quantile(&X10, 0.1), 1.83, max_relative = 1e-14);
        assert_eq!(type7_quantile(&X10, 0.0), 1.2);
        assert_eq!(type7_quantile(&X10, 1.0), 12.5);
        assert_eq!(median(&[1.0, 2.0, 3.0]), 2.0);
        assert_eq!(median(&[5.0]), 5.0);
        assert!(median(&[]).is_nan());
    }

    fn sorted_vec() -> impl Strategy<Value = Vec<f64>> {
        prop::collection::vec(-1e6f64..1e6, 1..200).prop_map(|mut v| {
            v.sort_unstable_by(f64::total_cmp);
            v
        })
    }

    proptest! {
        #[test]
        fn quantiles_lie_within_min_max(x in sorted_vec(), p in 0.0f64..=1.0) {
            let (lo, hi) = (x[0], x[x.len() - 1]);
            let slack = 1e-9 * (lo.abs() + hi.abs() + 1.0);
            for q in [harrell_davis(&x, p), type7_quantile(&x, p)] {
                prop_assert!(q >= lo - slack && q <= hi + slack, "q={} not in [{}, {}]", q, lo, hi);
            }
        }

        #[test]
        fn quantiles_are_monotone_in_p(x in sorted_vec(), p1 in 0.0f64..=1.0, p2 in 0.0f64..=1.0) {
            let (p1, p2) = if p1 <= p2 { (p1, p2) } else { (p2, p1) };
            let slack = 1e-9 * (x[0].abs() + x[x.len() - 1].abs() + 1.0);
            prop_assert!(harrell_davis(&x, p1) <= harrell_davis(&x, p2) + slack);
            prop_assert!(type7_quantile(&x, p1) <= type7_quantile(&x, p2) + slack);
        }
    }
}
