//! One-sided Mann–Whitney U tests (Wilcoxon rank-sum), exact for small tie-free samples and the
//! tie-corrected normal approximation otherwise.
//!
//! - Test and statistic: H. B. Mann & D. R. Whitney, "On a test of whether one of two random
//!   variables is stochastically larger than the other", Ann. Math. Statist. 18(1):50–60, 1947.
//!   `U` of `x` is the number of pairs `(xᵢ, yⱼ)` with `xᵢ > yⱼ`, ties counting ½, computed from
//!   midranks as `R_x − n_x(n_x+1)/2`.
//! - Exact null distribution (no ties, `min(n₁, n₂) ≤ 20` and `n₁·n₂ ≤ 10 000`): the number of
//!   arrangements with `U = u` is the coefficient of `qᵘ` in the Gaussian binomial coefficient
//!   `[n₁+n₂ choose m]_q = Π_{i=1..m} (1 − q^{n+i}) / (1 − q^i)` (m = min, n = max side) — the
//!   generating function of partitions in an m × n box, equivalent to the counting recurrence of
//!   Mann & Whitney (1947). It is built one factor at a time in exact 128-bit integers: each step is
//!   one O(mn) pass, so the whole distribution costs O(m²n) additions (≈ 2·10⁵ at the limits;
//!   statrs's exact path enumerates combinations and is wrong for one-sided alternatives, see
//!   docs/crates.md). Within the limits `C(n₁+n₂, m) < 6·10³⁵ < 2¹²⁷`, so nothing overflows and
//!   the p-values are exact up to the final division.
//! - Asymptotic: normal approximation with the tie-corrected variance
//!   `σ² = n₁n₂/12 · ((N+1) − Σ(t³−t)/(N(N−1)))` (e.g. W. J. Conover, *Practical Nonparametric
//!   Statistics*, 3rd ed., 1999, §5.1; E. L. Lehmann, *Nonparametrics*, 1975) and continuity
//!   correction ½, matching `scipy.stats.mannwhitneyu(method="asymptotic", use_continuity=True)`.
//!
//! Both p-values are computed as upper tails of the same symmetric distribution, so swapping the
//! samples swaps them exactly: `p_greater(x, y) == p_less(y, x)`.

use statrs::function::erf::erfc;

/// Largest smaller side for the exact distribution.
const EXACT_MAX_MIN_SIDE: usize = 20;
/// Largest `n₁·n₂` for the exact distribution (bounds both time and the 128-bit counts).
const EXACT_MAX_PRODUCT: usize = 10_000;

/// The outcome of a one-sided Mann–Whitney comparison of `x` against `y`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MannWhitney {
    /// U of `x`: pairs with `x > y`, ties counting ½. Ranges over `0..=n₁·n₂`.
    pub u: f64,
    /// p-value for H1: `x` is stochastically greater than `y` (e.g. current slower than baseline).
    pub p_greater: f64,
    /// p-value for H1: `x` is stochastically less than `y`.
    pub p_less: f64,
    /// Whether the exact null distribution was used (otherwise the normal approximation).
    pub exact: bool,
}

/// One-sided Mann–Whitney U test of `x` against `y` (both p-values at once).
///
/// Values must be finite (callers check); they need not be sorted. If
/// either side is empty there is no evidence either way: `u = 0`, both p-values 1.
pub fn mann_whitney_u(x: &[f64], y: &[f64]) -> MannWhitney {
    let (n1, n2) = (x.len(), y.len());
    if n1 == 0 || n2 == 0 {
        return MannWhitney { u: 0.0, p_greater: 1.0, p_less: 1.0, exact: false };
    }
    let ranks = Ranks::of(x, y);
    let u1 = ranks.rank_sum_x - (n1 * (n1 + 1)) as f64 / 2.0;
    let u2 = (n1 * n2) as f64 - u1;
    let (p_greater, p_less, exact) =
        if !ranks.has_ties && n1.min(n2) <= EXACT_MAX_MIN_SIDE && n1 * n2 <= EXACT_MAX_PRODUCT {
            // Without ties U is an integer; the conversions are exact.
            let dist = ExactU::new(n1, n2);
            (dist.upper_tail(u1 as usize), dist.upper_tail(u2 as usize), true)
        } else {
            let sd = asymptotic_sd(n1, n2, ranks.tie_term);
            (asymptotic_upper_tail(u1, n1, n2, sd), asymptotic_upper_tail(u2, n1, n2, sd), false)
        };
    MannWhitney { u: u1, p_greater, p_less, exact }
}

/// A conservative one-sided p-value for H1 "`x` is stochastically greater than `y`" whatever the
/// ties: U counts only the pairs with `x > y` strictly (each tie broken against the alternative),
/// and its upper tail is read from the tie-free null distribution, exact for small samples (the
/// limits of [`mann_whitney_u`]), else its normal approximation with the continuity correction.
/// Breaking every tie against H1 can only lower U, so the p-value is never smaller than a
/// randomised tie-break's. O((n₁ + n₂) log n₂). Values must be finite; an empty side gives 1.
pub fn greater_p_ties_against(x: &[f64], y: &[f64]) -> f64 {
    let (n1, n2) = (x.len(), y.len());
    if n1 == 0 || n2 == 0 {
        return 1.0;
    }
    let mut sorted = y.to_vec();
    sorted.sort_by(f64::total_cmp);
    // Pairs with x > y: for each x, the y's strictly below it.
    let u: usize = x.iter().map(|v| sorted.partition_point(|w| w < v)).sum();
    if n1.min(n2) <= EXACT_MAX_MIN_SIDE && n1 * n2 <= EXACT_MAX_PRODUCT {
        ExactU::new(n1, n2).upper_tail(u)
    } else {
        asymptotic_upper_tail(u as f64, n1, n2, asymptotic_sd(n1, n2, 0.0))
    }
}

/// Midrank sum of `x` in the pooled sample, and the tie structure.
struct Ranks {
    rank_sum_x: f64,
    /// Σ (t³ − t) over groups of `t` tied values.
    tie_term: f64,
    has_ties: bool,
}

impl Ranks {
    fn of(x: &[f64], y: &[f64]) -> Ranks {
        // (value, from_x), sorted by value; the side does not affect ranks.
        let mut pooled: Vec<(f64, bool)> = x.iter().map(|&v| (v, true)).chain(y.iter().map(|&v| (v, false))).collect();
        pooled.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let mut rank_sum_x = 0.0;
        let mut tie_term = 0.0;
        let mut start = 0;
        while start < pooled.len() {
            let mut end = start + 1;
            while end < pooled.len() && pooled[end].0 == pooled[start].0 {
                end += 1;
            }
            // Ranks start..end (0-based) share the midrank; midranks are multiples of ½, so these
            // sums are exact in f64 for any realistic n.
            let midrank = (start + end + 1) as f64 / 2.0;
            let in_x = pooled[start..end].iter().filter(|(_, from_x)| *from_x).count();
            rank_sum_x += midrank * in_x as f64;
            let t = (end - start) as f64;
            tie_term += t * t * t - t;
            start = end;
        }
        Ranks { rank_sum_x, tie_term, has_ties: tie_term > 0.0 }
    }
}

/// Standard deviation of U under H0 with the tie correction.
fn asymptotic_sd(n1: usize, n2: usize, tie_term: f64) -> f64 {
    let n = (n1 + n2) as f64;
    let (n1, n2) = (n1 as f64, n2 as f64);
    (n1 * n2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)))).sqrt()
}

/// P(U ≥ u) by the normal approximation with continuity correction ½ (scipy's `_get_mwu_z`).
fn asymptotic_upper_tail(u: f64, n1: usize, n2: usize, sd: f64) -> f64 {
    let mean = (n1 * n2) as f64 / 2.0;
    let numerator = u - mean - 0.5;
    // sd == 0 only when every value is tied: then U == mean, z = −∞ and the p-value is 1.
    let z = if sd > 0.0 { numerator / sd } else { f64::NEG_INFINITY };
    (0.5 * erfc(z / std::f64::consts::SQRT_2)).clamp(0.0, 1.0)
}

/// The exact null distribution of U for sample sizes `(m, n)` as cumulative counts.
struct ExactU {
    /// `cumulative[u]` = number of arrangements with `U ≤ u`, for `u` in `0..=m·n`.
    cumulative: Vec<i128>,
}

impl ExactU {
    fn new(n1: usize, n2: usize) -> ExactU {
        let (m, n) = (n1.min(n2), n1.max(n2));
        let max_u = m * n;
        // Coefficients of the Gaussian binomial [n+i choose i]_q, for i = 0..=m.
        let mut coef = vec![0i128; max_u + 1];
        coef[0] = 1;
        for i in 1..=m {
            // Multiply by (1 − q^{n+i}), high degrees first so each term reads the previous
            // polynomial. Only degrees ≤ i·n are needed: the quotient below has degree i·n and its
            // coefficient k depends on the product's coefficients ≤ k alone.
            let shift = n + i;
            for k in (shift..=i * n).rev() {
                coef[k] -= coef[k - shift];
            }
            // Divide by (1 − q^i): c[k] += c[k − i], ascending.
            for k in i..=i * n {
                coef[k] += coef[k - i];
            }
        }
        let mut running = 0i128;
        let cumulative = coef
            .iter()
            .map(|c| {
                running += c;
                running
            })
            .collect();
        ExactU { cumulative }
    }

    /// P(U ≥ u) = P(U ≤ mn − u), by the symmetry of the distribution about mn/2.
    fn upper_tail(&self, u: usize) -> f64 {
        let max_u = self.cumulative.len() - 1;
        let Some(&total) = self.cumulative.last() else { return 1.0 };
        if u == 0 {
            return 1.0;
        }
        if u > max_u {
            return 0.0;
        }
        self.cumulative[max_u - u] as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;
    use proptest::prelude::*;

    /// What SciPy's `mannwhitneyu` gives for one pair of samples (one-sided p-values).
    struct Scipy {
        exact: bool,
        u: f64,
        p_greater: f64,
        p_less: f64,
    }

    /// Asserts that `mann_whitney_u(x, y)` takes SciPy's path (exact or asymptotic) and gives its
    /// U exactly and its p-values within `max_relative`.
    fn assert_matches_scipy(x: &[f64], y: &[f64], scipy: Scipy, max_relative: f64) {
        let r = mann_whitney_u(x, y);
        assert_eq!(r.exact, scipy.exact);
        assert_eq!(r.u, scipy.u);
        assert_relative_eq!(r.p_greater, scipy.p_greater, max_relative = max_relative);
        assert_relative_eq!(r.p_less, scipy.p_less, max_relative = max_relative);
    }

    #[test]
    fn ties_against_the_alternative_give_the_tie_free_p_value_or_a_larger_one() {
        // No ties: the exact test's p-value.
        let (x, y) = ([5.0, 6.0, 7.0], [1.0, 2.0, 3.0, 4.0]);
        assert_relative_eq!(greater_p_ties_against(&x, &y), mann_whitney_u(&x, &y).p_greater);
        // All of x above all of y: 1 / C(12, 3).
        let y9 = [0.0, 0.0, 0.0, 1.0, 2.0, 1.5, 0.5, 2.5, 3.0];
        assert_relative_eq!(greater_p_ties_against(&[700.0, 701.0, 700.0], &y9), 1.0 / 220.0);
        // A tie between x and y counts against x.
        assert!(greater_p_ties_against(&[3.0, 700.0, 701.0], &y9) > 1.0 / 220.0);
        assert_eq!(greater_p_ties_against(&[], &y9), 1.0);
        // Large samples: the normal approximation, small for a clear shift, near 1 for none.
        let big_x: Vec<f64> = (0..200).map(|i| 1000.0 + f64::from(i)).collect();
        let big_y: Vec<f64> = (0..200).map(f64::from).collect();
        assert!(greater_p_ties_against(&big_x, &big_y) < 1e-10);
        assert!(greater_p_ties_against(&big_y, &big_x) > 0.99);
    }

    // from scipy import stats
    // x = [1.1, 2.3, 3.5, 4.0, 5.2]; y = [2.0, 4.4, 6.1, 7.3, 8.9]
    // stats.mannwhitneyu(y, x, alternative='greater', method='exact')  -> U = 20, p = 0.07539682539682539 (19/252)
    // stats.mannwhitneyu(y, x, alternative='less', method='exact')     -> p = 0.9523809523809524 (240/252)
    #[test]
    fn exact_five_by_five_matches_scipy() {
        let x = [1.1, 2.3, 3.5, 4.0, 5.2];
        let y = [2.0, 4.4, 6.1, 7.3, 8.9];
        let scipy = Scipy { exact: true, u: 20.0, p_greater: 19.0 / 252.0, p_less: 240.0 / 252.0 };
        assert_matches_scipy(&y, &x, scipy, 1e-15);
    }

    // x = [1, 2, 3, 5, 6]; y = [4, 7, 8, 9, 10]
    // stats.mannwhitneyu(y, x, alternative='greater', method='exact').pvalue    -> 0.015873015873015872 (4/252)
    // stats.mannwhitneyu(y, x, alternative='two-sided', method='exact').pvalue  -> 0.031746031746031744
    // (docs/crates.md's "0.0317" for n1 = n2 = 5 is this two-sided value; one-sided it is 0.0159.)
    #[test]
    fn exact_near_separation_matches_scipy() {
        let x = [1.0, 2.0, 3.0, 5.0, 6.0];
        let y = [4.0, 7.0, 8.0, 9.0, 10.0];
        let r = mann_whitney_u(&y, &x);
        assert_eq!(r.u, 23.0);
        assert_relative_eq!(r.p_greater, 0.015873015873015872, max_relative = 1e-15);
        assert_relative_eq!(2.0 * r.p_greater, 0.031746031746031744, max_relative = 1e-15);
        assert_eq!(mann_whitney_u(&x, &y).p_less, r.p_greater);
    }

    // import numpy as np
    // x = np.arange(8) * 1.37 + 0.5; y = np.arange(100) * 0.113 + 0.05
    // stats.mannwhitneyu(x, y, alternative='greater', method='exact')  -> U = 375, p = 0.615469587416491
    // stats.mannwhitneyu(x, y, alternative='less', method='exact')     -> p = 0.3889417975749221
    #[test]
    fn exact_eight_by_hundred_matches_scipy() {
        let x: Vec<f64> = (0..8).map(|i| i as f64 * 1.37 + 0.5).collect();
        let y: Vec<f64> = (0..100).map(|i| i as f64 * 0.113 + 0.05).collect();
        let scipy = Scipy { exact: true, u: 375.0, p_greater: 0.615469587416491, p_less: 0.3889417975749221 };
        assert_matches_scipy(&x, &y, scipy, 1e-12);
    }

    // x = np.arange(20) * 1.01; y = np.arange(500) * 0.0407 + 0.003  (the largest exact case)
    // stats.mannwhitneyu(x, y, alternative='greater', method='exact')  -> U = 4723, p = 0.6620831561324302
    // stats.mannwhitneyu(x, y, alternative='less', method='exact')     -> p = 0.33846832411966254
    #[test]
    fn exact_twenty_by_five_hundred_matches_scipy() {
        let x: Vec<f64> = (0..20).map(|i| i as f64 * 1.01).collect();
        let y: Vec<f64> = (0..500).map(|i| i as f64 * 0.0407 + 0.003).collect();
        let scipy = Scipy { exact: true, u: 4723.0, p_greater: 0.6620831561324302, p_less: 0.33846832411966254 };
        assert_matches_scipy(&x, &y, scipy, 1e-12);
    }

    // x = [1, 2, 2, 3, 3, 3, 4, 5, 5, 6]; y = [2, 3, 4, 4, 5, 6, 6, 6, 7, 8, 9]
    // stats.mannwhitneyu(x, y, alternative='less', method='asymptotic', use_continuity=True)     -> U = 24, p = 0.01498776997195982
    // stats.mannwhitneyu(x, y, alternative='greater', method='asymptotic', use_continuity=True)  -> p = 0.9875055582132839
    #[test]
    fn asymptotic_with_ties_matches_scipy() {
        let x = [1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 5.0, 5.0, 6.0];
        let y = [2.0, 3.0, 4.0, 4.0, 5.0, 6.0, 6.0, 6.0, 7.0, 8.0, 9.0];
        let scipy = Scipy { exact: false, u: 24.0, p_greater: 0.9875055582132839, p_less: 0.01498776997195982 };
        assert_matches_scipy(&x, &y, scipy, 1e-10);
    }

    // x = np.arange(30) * 0.7 + 3; y = np.arange(40) * 0.55  (min side 30 > 20; one float tie, U = 726.5)
    // stats.mannwhitneyu(x, y, alternative='greater', method='asymptotic', use_continuity=True)  -> p = 0.06741052157821828
    // stats.mannwhitneyu(x, y, alternative='less', method='asymptotic', use_continuity=True)     -> p = 0.9341236170812368
    #[test]
    fn asymptotic_large_without_ties_matches_scipy() {
        let x: Vec<f64> = (0..30).map(|i| i as f64 * 0.7 + 3.0).collect();
        let y: Vec<f64> = (0..40).map(|i| i as f64 * 0.55).collect();
        let scipy = Scipy { exact: false, u: 726.5, p_greater: 0.06741052157821828, p_less: 0.9341236170812368 };
        assert_matches_scipy(&x, &y, scipy, 1e-10);
    }

    #[test]
    fn degenerate_inputs() {
        let r = mann_whitney_u(&[], &[1.0]);
        assert_eq!((r.p_greater, r.p_less), (1.0, 1.0));
        // All tied: no evidence in either direction.
        let r = mann_whitney_u(&[2.0, 2.0], &[2.0, 2.0, 2.0]);
        assert_eq!((r.u, r.p_greater, r.p_less), (3.0, 1.0, 1.0));
        // One value each, no ties: P(U ≥ 1) = 1/2.
        let r = mann_whitney_u(&[2.0], &[1.0]);
        assert_eq!((r.u, r.p_greater, r.p_less), (1.0, 0.5, 1.0));
    }

    #[test]
    fn exact_distribution_is_a_distribution() {
        // Σ counts = C(m+n, m); symmetric about mn/2.
        let d = ExactU::new(7, 9);
        assert_eq!(*d.cumulative.last().unwrap(), 11_440);
        let counts: Vec<i128> =
            d.cumulative.iter().scan(0, |prev, &c| Some((c - std::mem::replace(prev, c)) as i128)).collect();
        assert!(counts.iter().all(|&c| c > 0));
        assert!(counts.iter().eq(counts.iter().rev()));
    }

    fn values() -> impl Strategy<Value = Vec<f64>> {
        // Rounded to create ties often.
        prop::collection::vec((0u32..40).prop_map(|v| v as f64 * 0.5), 1..40)
    }

    proptest! {
        #[test]
        fn swapping_sides_swaps_the_p_values(x in values(), y in values()) {
            let a = mann_whitney_u(&x, &y);
            let b = mann_whitney_u(&y, &x);
            prop_assert_eq!(a.p_greater, b.p_less);
            prop_assert_eq!(a.p_less, b.p_greater);
            prop_assert_eq!(a.u + b.u, (x.len() * y.len()) as f64);
            prop_assert!((0.0..=1.0).contains(&a.p_greater) && (0.0..=1.0).contains(&a.p_less));
        }

        #[test]
        fn exact_path_is_symmetric_too(x in prop::collection::vec(0.0f64..1.0, 1..20),
                                       y in prop::collection::vec(0.0f64..1.0, 1..60)) {
            let a = mann_whitney_u(&x, &y);
            let b = mann_whitney_u(&y, &x);
            prop_assert_eq!(a.exact, b.exact);
            prop_assert_eq!(a.p_greater, b.p_less);
            prop_assert_eq!(a.p_less, b.p_greater);
        }
    }
}
