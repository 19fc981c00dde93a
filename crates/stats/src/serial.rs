//! Serial dependence of step times: the lag-1 autocorrelation, and a bootstrap block length that
//! grows with it.
//!
//! GPU step times come in episodes (a throttled clock, a noisy neighbour, a slow NCCL channel)
//! that last many steps. For an AR(1)-like series with lag-1 autocorrelation ρ, the integrated
//! autocorrelation time is τ = (1 + ρ)/(1 − ρ) (Box, Jenkins & Reinsel, *Time Series Analysis*,
//! §2.1; the same factor gives the effective sample size n/τ), so blocks shorter than τ cut the
//! episodes apart and make a bootstrap interval too narrow. The block used is
//! max(n^(1/3), ⌈τ⌉), at most n/2.
//!
//! [`rank_lag1_autocorrelation`] is the lag-1 autocorrelation of the steps' ranks (the rank version of von Neumann's ratio,
//! R. Bartels, "The rank version of von Neumann's ratio test for randomness", JASA 77(377),
//! 1982). On raw times one pair of adjacent outliers (two steps 2–3× slower, a preempted rank)
//! dominates both sums and reads as an "episode" (ρ ≈ 0.4 from two steps in a hundred). A rank
//! moves at most to n, so isolated outliers barely count, while a real episode (many consecutive
//! slow steps) still ranks high together. The gate's slow-episode guard asks for both: a raw
//! value above its threshold confirmed by a rank value above a lower one (`compare::estimate`);
//! the rank value alone lets slightly more short episodic runs (n = 30) through.

//!
//! [`rank_ljung_box`] is the portmanteau test of the gate's dependence guard: the Ljung–Box
//! statistic `Q = n(n + 2) Σ_{h=1..H} r_h² / (n − h)` over the first `H` autocorrelations of the
//! steps' ranks, with its χ²_H p-value (G. M. Ljung & G. E. P. Box, "On a measure of lack of fit
//! in time series models", Biometrika 65(2), 1978; on ranks as in Dufour & Roy, "Generalized
//! portmanteau statistics and tests of randomness", Comm. Statist. 1986). Unlike a fixed
//! threshold on ρ₁ it knows n: the same ρ₁ = 0.3 is noise at 30 steps and certain at 300.

use statrs::distribution::{ChiSquared, ContinuousCDF};

use super::bootstrap::block_length;

/// The lag-1 sample autocorrelation of `data` in its given (time) order; 0 for fewer than three
/// values or a constant series.
pub fn lag1_autocorrelation(data: &[f64]) -> f64 {
    let n = data.len();
    if n < 3 {
        return 0.0;
    }
    let mean = data.iter().sum::<f64>() / n as f64;
    let var: f64 = data.iter().map(|x| (x - mean) * (x - mean)).sum();
    if var <= 0.0 || !var.is_finite() {
        return 0.0;
    }
    let cov: f64 = data.windows(2).map(|w| (w[0] - mean) * (w[1] - mean)).sum();
    (cov / var).clamp(-1.0, 1.0)
}

/// The lag-1 autocorrelation of the ranks of `data` (ties share their mean rank), in time order;
/// 0 for fewer than three values or a constant series. Robust to isolated outliers (see the
/// module documentation).
pub fn rank_lag1_autocorrelation(data: &[f64]) -> f64 {
    lag1_autocorrelation(&ranks(data))
}

/// The sample autocorrelation of `data` at `lag` (the usual estimator: the lag-`lag` sum of
/// products over the full sum of squares); 0 for a constant series or a lag ≥ n.
fn autocorrelation(data: &[f64], lag: usize) -> f64 {
    let n = data.len();
    if lag == 0 || lag >= n {
        return 0.0;
    }
    let mean = data.iter().sum::<f64>() / n as f64;
    let var: f64 = data.iter().map(|x| (x - mean) * (x - mean)).sum();
    if var <= 0.0 || !var.is_finite() {
        return 0.0;
    }
    let cov: f64 = data.iter().zip(&data[lag..]).map(|(a, b)| (a - mean) * (b - mean)).sum();
    cov / var
}

/// A Ljung–Box test of serial independence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LjungBox {
    /// The statistic `Q`.
    pub q: f64,
    /// The lags summed, `H`.
    pub lags: usize,
    /// `P(χ²_H > Q)`: small when the steps are serially dependent.
    pub p_value: f64,
}

/// The lags a Ljung–Box test of `n` steps sums: `min(10, n / 5)`, at least 1 (Ljung & Box's
/// advice keeps `H` well below `n`; ten lags cover episodes of a few steps up to ten).
pub fn ljung_box_lags(n: usize) -> usize {
    (n / 5).clamp(1, 10)
}

/// Ljung–Box on the ranks of `data` in time order, over [`ljung_box_lags`] lags. Fewer than
/// eight steps, or a constant series: `Q = 0`, p = 1 (nothing to test).
pub fn rank_ljung_box(data: &[f64]) -> LjungBox {
    let n = data.len();
    let lags = ljung_box_lags(n);
    if n < 8 {
        return LjungBox { q: 0.0, lags, p_value: 1.0 };
    }
    let r = ranks(data);
    let nf = n as f64;
    let q = nf * (nf + 2.0) * (1..=lags).map(|h| autocorrelation(&r, h).powi(2) / (nf - h as f64)).sum::<f64>();
    let p_value = ChiSquared::new(lags as f64).map_or(1.0, |c| c.sf(q)).clamp(0.0, 1.0);
    LjungBox { q, lags, p_value }
}

/// Mid-ranks (1-based, ties averaged) of `data`, in `data`'s order.
fn ranks(data: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..data.len()).collect();
    order.sort_by(|&a, &b| data[a].total_cmp(&data[b]));
    let mut out = vec![0.0; data.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && data[order[j + 1]] == data[order[i]] {
            j += 1;
        }
        let mid = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            out[k] = mid;
        }
        i = j + 1;
    }
    out
}

/// A moving-block length for `data`: the usual n^(1/3), lengthened to cover the integrated
/// autocorrelation time when the series is positively autocorrelated.
pub fn dependent_block_length(data: &[f64]) -> usize {
    let n = data.len();
    let base = block_length(n);
    let rho = lag1_autocorrelation(data).clamp(0.0, 0.95);
    let tau = ((1.0 + rho) / (1.0 - rho)).ceil() as usize;
    base.max(tau).min((n / 2).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn white_noise_has_near_zero_autocorrelation_and_ar1_does_not() {
        let mut rng = Rng::new(5);
        let noise: Vec<f64> = (0..5000).map(|_| rng.normal()).collect();
        assert!(lag1_autocorrelation(&noise).abs() < 0.05);
        let mut ar = vec![0.0];
        for i in 1..5000 {
            let next = 0.8 * ar[i - 1] + rng.normal();
            ar.push(next);
        }
        let rho = lag1_autocorrelation(&ar);
        assert!((rho - 0.8).abs() < 0.05, "{rho}");
        // τ = 1.8 / 0.2 = 9 dominates n^(1/3) ≈ 6 at n = 200, not 17 at n = 5000.
        assert!((8..=10).contains(&dependent_block_length(&ar[..200])), "{}", dependent_block_length(&ar[..200]));
        assert_eq!(dependent_block_length(&ar), block_length(5000));
        assert_eq!(dependent_block_length(&noise), block_length(5000));
    }

    // r = [4, 1.5, 5, 1.5, 6, 8, 3, 7]  (scipy.stats.rankdata of x); m = sum(r) / 8
    // sum((r[i] - m) * (r[i + 1] - m) for i in range(7)) / sum((v - m) ** 2 for v in r)
    #[test]
    fn rank_autocorrelation_known_answer_with_ties() {
        let x = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0];
        assert_eq!(ranks(&x), vec![4.0, 1.5, 5.0, 1.5, 6.0, 8.0, 3.0, 7.0]);
        approx::assert_relative_eq!(rank_lag1_autocorrelation(&x), -0.23493975903614459, epsilon = 1e-12);
    }

    #[test]
    fn two_adjacent_outliers_are_no_episode_but_a_slow_phase_is() {
        let mut rng = Rng::new(11);
        let mut x: Vec<f64> = (0..100).map(|_| (0.02 * rng.normal()).exp()).collect();
        x[40] = 2.8;
        x[41] = 2.9;
        assert!(lag1_autocorrelation(&x) > 0.35, "raw ρ {}", lag1_autocorrelation(&x));
        assert!(rank_lag1_autocorrelation(&x) < 0.2, "rank ρ {}", rank_lag1_autocorrelation(&x));
        // Twenty consecutive steps 20 % slower: an episode on either scale.
        x.iter_mut().skip(60).take(20).for_each(|v| *v *= 1.2);
        assert!(rank_lag1_autocorrelation(&x) > 0.35, "rank ρ {}", rank_lag1_autocorrelation(&x));
    }

    // from statsmodels.stats.diagnostic import acorr_ljungbox; from scipy.stats import rankdata
    // x = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3]
    // acorr_ljungbox(rankdata(x), lags=[3])  ->  lb_stat, lb_pvalue
    #[test]
    fn ljung_box_known_answer() {
        let x = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0, 8.0, 9.0, 7.0, 9.0, 3.0];
        let lb = rank_ljung_box(&x);
        assert_eq!(lb.lags, 3);
        let r = ranks(&x);
        let n = 16.0;
        let q: f64 = n * (n + 2.0) * (1..=3).map(|h| autocorrelation(&r, h).powi(2) / (n - h as f64)).sum::<f64>();
        approx::assert_relative_eq!(lb.q, q, epsilon = 1e-12);
        assert!((0.0..=1.0).contains(&lb.p_value));
    }

    #[test]
    fn ljung_box_knows_n() {
        let mut rng = Rng::new(21);
        // Independent steps: p-values roughly uniform, rarely below 0.0025.
        let low = (0..400)
            .filter(|_| {
                let x: Vec<f64> = (0..100).map(|_| rng.normal()).collect();
                rank_ljung_box(&x).p_value < 0.0025
            })
            .count();
        assert!(low <= 6, "{low} of 400 independent series flagged");
        // One long episode: certain at 200 steps.
        let mut x: Vec<f64> = (0..200).map(|_| (0.02 * rng.normal()).exp()).collect();
        x.iter_mut().skip(50).take(60).for_each(|v| *v *= 1.2);
        assert!(rank_ljung_box(&x).p_value < 1e-6);
        // Two adjacent outliers are not dependence.
        let mut y: Vec<f64> = (0..100).map(|_| (0.02 * rng.normal()).exp()).collect();
        y[40] = 2.8;
        y[41] = 2.9;
        assert!(rank_ljung_box(&y).p_value > 0.0025, "{:?}", rank_ljung_box(&y));
        assert_eq!(rank_ljung_box(&[1.0; 5]).p_value, 1.0);
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(lag1_autocorrelation(&[]), 0.0);
        assert_eq!(lag1_autocorrelation(&[1.0, 2.0]), 0.0);
        assert_eq!(lag1_autocorrelation(&[3.0; 10]), 0.0);
        assert_eq!(rank_lag1_autocorrelation(&[3.0; 10]), 0.0);
        assert_eq!(rank_lag1_autocorrelation(&[]), 0.0);
        assert_eq!(dependent_block_length(&[1.0]), 1);
    }
}
