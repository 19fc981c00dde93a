//! An exceedance test for tail regressions.
//!
//! A bootstrapped P95 ratio moves slowly: at n = 200 a P95 rests on ~10 order statistics and its
//! interval is wide. Asking instead "do more current steps than expected exceed the baseline's
//! q-quantile?" uses every step. The threshold is the baseline's Harrell–Davis q-quantile (see
//! [`crate::quantile`]); each side's values strictly above it are counted, and the 2 × 2
//! table `[above, not above] × [current, baseline]` is tested with the one-sided **Fisher exact
//! test** (R. A. Fisher, "On the interpretation of χ² from contingency tables, and the calculation
//! of P", JRSS 85(1), 1922; A. Agresti, *Categorical Data Analysis*, 3rd ed., 2013, §3.5):
//! conditional on the margins, the current side's count is hypergeometric, and
//! `p_greater = P(X ≥ current_above)`, `X ~ Hypergeom(N = n_b + n_c, K = total above, draws = n_c)`,
//! which equals `scipy.stats.fisher_exact(table, alternative="greater")`.
//!
//! The threshold is estimated from the baseline itself, which makes the test slightly
//! conservative for the baseline's own count; the gate's simulation benchmark measures its
//! calibration rather than assuming it.

use statrs::distribution::{Binomial, DiscreteCDF, Hypergeometric};

use super::quantile::harrell_davis;

/// Counts above the baseline threshold and the one-sided Fisher p-value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exceedance {
    /// The baseline's Harrell–Davis q-quantile.
    pub threshold: f64,
    /// Baseline values strictly above `threshold`.
    pub baseline_above: usize,
    /// Baseline sample size.
    pub baseline_n: usize,
    /// Current values strictly above `threshold`.
    pub current_above: usize,
    /// Current sample size.
    pub current_n: usize,
    /// p-value for H1: the current side exceeds the threshold more often than the baseline.
    pub p_greater: f64,
}

impl Exceedance {
    /// Share of baseline values above the threshold (NaN for an empty baseline).
    pub fn baseline_share(&self) -> f64 {
        self.baseline_above as f64 / self.baseline_n as f64
    }

    /// Share of current values above the threshold (NaN for an empty current side).
    pub fn current_share(&self) -> f64 {
        self.current_above as f64 / self.current_n as f64
    }
}

/// Exceedance test of `current` against ascending `baseline_sorted` at quantile `q` (e.g. 0.9).
/// With an empty side (or a NaN threshold) nothing is counted and `p_greater` is 1.
pub fn exceedance_test(baseline_sorted: &[f64], current: &[f64], q: f64) -> Exceedance {
    let threshold = harrell_davis(baseline_sorted, q);
    let above = |values: &[f64]| values.iter().filter(|&&v| v > threshold).count();
    let (baseline_above, current_above) = (above(baseline_sorted), above(current));
    let (baseline_n, current_n) = (baseline_sorted.len(), current.len());
    let p_greater = fisher_exact_greater(current_above, current_n, baseline_above, baseline_n);
    Exceedance { threshold, baseline_above, baseline_n, current_above, current_n, p_greater }
}

/// One-sided Fisher exact test that group A's success share exceeds group B's:
/// `P(X ≥ a_successes)` with `X ~ Hypergeom(a_n + b_n, a_successes + b_successes, a_n)`.
/// Returns 1 when there is nothing to test (no successes, or an empty group) and NaN when a count
/// exceeds its group size.
pub fn fisher_exact_greater(a_successes: usize, a_n: usize, b_successes: usize, b_n: usize) -> f64 {
    if a_successes > a_n || b_successes > b_n {
        return f64::NAN;
    }
    if a_successes == 0 || a_n == 0 || b_n == 0 {
        return 1.0;
    }
    let population = (a_n + b_n) as u64;
    let successes = (a_successes + b_successes) as u64;
    match Hypergeometric::new(population, successes, a_n as u64) {
        // sf(k) = P(X > k), so P(X ≥ a) = sf(a − 1).
        Ok(h) => h.sf(a_successes as u64 - 1).clamp(0.0, 1.0),
        Err(_) => f64::NAN,
    }
}

/// The one-sided **binomial test**: `P(X ≥ successes)` for `X ~ Binomial(n, p)`, which equals
/// `scipy.stats.binomtest(successes, n, p, alternative="greater").pvalue`. 1 for no successes,
/// NaN for `successes > n` or a `p` outside [0, 1].
pub fn binomial_greater(successes: u64, n: u64, p: f64) -> f64 {
    if successes > n {
        return f64::NAN;
    }
    if successes == 0 {
        return 1.0;
    }
    match Binomial::new(p, n) {
        // sf(k) = P(X > k), so P(X ≥ s) = sf(s − 1).
        Ok(b) => b.sf(successes - 1).clamp(0.0, 1.0),
        Err(_) => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;
    use proptest::prelude::{prop, prop_assert, proptest};

    // from scipy import stats
    // stats.fisher_exact([[7, 3], [2, 8]], alternative='greater').pvalue       -> 0.03488925934746368
    // stats.fisher_exact([[40, 160], [20, 180]], alternative='greater').pvalue -> 0.0037096186383774607
    // stats.fisher_exact([[0, 10], [2, 8]], alternative='greater').pvalue      -> 1.0
    #[test]
    fn fisher_one_sided_matches_scipy() {
        assert_relative_eq!(fisher_exact_greater(7, 10, 2, 10), 0.03488925934746368, max_relative = 1e-12);
        assert_relative_eq!(fisher_exact_greater(40, 200, 20, 200), 0.0037096186383774607, max_relative = 1e-10);
        assert_eq!(fisher_exact_greater(0, 10, 2, 10), 1.0);
        assert_eq!(fisher_exact_greater(3, 10, 0, 0), 1.0);
        assert!(fisher_exact_greater(11, 10, 0, 10).is_nan());
    }

    // import numpy as np
    // from scipy.stats.mstats import hdquantiles
    // b = np.sort(100 + 10 * np.sin(np.arange(100) * 0.7))
    // c = 100 + 10 * np.sin(np.arange(120) * 1.3) + 8.0 * (np.arange(120) % 5 == 0)
    // thr = hdquantiles(b, prob=[0.9]).data[0]                        -> 109.41811082587816
    // ba, ca = (b > thr).sum(), (c > thr).sum()                       -> 11, 23
    // stats.fisher_exact([[ca, 120 - ca], [ba, 100 - ba]], alternative='greater').pvalue
    //   == stats.hypergeom.sf(ca - 1, 220, ba + ca, 120)              -> 0.06820522864979674
    #[test]
    fn exceedance_matches_scipy() {
        let mut b: Vec<f64> = (0..100).map(|i| 100.0 + 10.0 * (f64::from(i) * 0.7).sin()).collect();
        b.sort_unstable_by(f64::total_cmp);
        let c: Vec<f64> =
            (0..120).map(|i| 100.0 + 10.0 * (f64::from(i) * 1.3).sin() + if i % 5 == 0 { 8.0 } else { 0.0 }).collect();
        let e = exceedance_test(&b, &c, 0.9);
        assert_relative_eq!(e.threshold, 109.41811082587816, max_relative = 1e-12);
        assert_eq!((e.baseline_above, e.baseline_n, e.current_above, e.current_n), (11, 100, 23, 120));
        assert_relative_eq!(e.p_greater, 0.06820522864979674, max_relative = 1e-10);
        assert_relative_eq!(e.current_share(), 23.0 / 120.0);
    }

    #[test]
    fn empty_sides_give_no_evidence() {
        let e = exceedance_test(&[], &[1.0, 2.0], 0.9);
        assert_eq!((e.current_above, e.p_greater), (0, 1.0));
        let e = exceedance_test(&[1.0, 2.0], &[], 0.9);
        assert_eq!(e.p_greater, 1.0);
    }

    proptest! {
        #[test]
        fn p_value_is_a_probability(a in 0usize..60, an in 0usize..60, b in 0usize..60, bn in 0usize..60) {
            let (a, b) = (a.min(an), b.min(bn));
            let p = fisher_exact_greater(a, an, b, bn);
            prop_assert!((0.0..=1.0).contains(&p), "{}", p);
        }

        #[test]
        fn more_current_exceedances_never_raise_p(base in prop::collection::vec(0.0f64..10.0, 5..80)) {
            let mut base = base;
            base.sort_unstable_by(f64::total_cmp);
            let low = vec![0.0; 50];
            let high = vec![100.0; 50];
            prop_assert!(exceedance_test(&base, &high, 0.9).p_greater <= exceedance_test(&base, &low, 0.9).p_greater);
        }
    }

    // from scipy import stats
    // stats.binomtest(1, 3, 1/8, alternative='greater').pvalue  -> 0.330078125
    // stats.binomtest(9, 12, 1/4, alternative='greater').pvalue -> 0.0003916621208190918
    // stats.binomtest(5, 10, 0.5, alternative='greater').pvalue -> 0.623046875
    #[test]
    fn binomial_greater_matches_scipy() {
        assert_relative_eq!(binomial_greater(1, 3, 0.125), 0.330_078_125, max_relative = 1e-12);
        assert_relative_eq!(binomial_greater(5, 10, 0.5), 0.623_046_875, max_relative = 1e-12);
        assert_relative_eq!(binomial_greater(9, 12, 0.25), 0.000_391_662_120_819_091_8, max_relative = 1e-9);
        assert_eq!(binomial_greater(0, 10, 0.5), 1.0);
        assert!(binomial_greater(11, 10, 0.5).is_nan());
    }
}
