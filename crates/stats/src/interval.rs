//! Location, spread and the prediction interval for run-level summaries.
//!
//! - [`mean_sd`]: the mean and the sample standard deviation (n − 1 denominator), computed in two
//!   passes for accuracy.
//! - [`t_quantile`], [`t_sf`]: Student's t (statrs's `StudentsT`; W. S. Gosset, "The probable error
//!   of a mean", Biometrika 6(1), 1908).
//! - [`prediction_interval`]: where one *new* run's value should fall given `k` earlier runs,
//!   assuming runs are exchangeable and roughly normal:
//!   `mean ± t_{k−1, (1+level)/2} · sd · √(1 + 1/k)` (G. J. Hahn & W. Q. Meeker, *Statistical
//!   Intervals*, Wiley 1991, §4.6; 2nd ed. with L. A. Escobar, 2017). The gate uses it to judge the
//!   current run's median against the spread of the baseline runs' medians, which captures the
//!   run-to-run variation that pooled steps hide.
//! - [`robust_spread`]: 1.4826 × the median absolute deviation, a consistent estimator of the
//!   standard deviation under normality that ignores outlying runs (F. R. Hampel, "The influence
//!   curve and its role in robust estimation", JASA 69(346), 1974; P. J. Rousseeuw & C. Croux,
//!   JASA 88(424), 1993).

use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

use super::quantile::median;

/// Mean and sample standard deviation (n − 1). `sd` is 0 for one value; both NaN for none.
pub fn mean_sd(values: &[f64]) -> (f64, f64) {
    let n = values.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return (mean, 0.0);
    }
    let ss: f64 = values.iter().map(|v| (v - mean) * (v - mean)).sum();
    (mean, (ss / (n - 1) as f64).sqrt())
}

/// The p-quantile of Student's t with `df` degrees of freedom (`df = ∞` is the standard normal).
/// `p = 0` and `p = 1` give ∓∞; NaN for `df ≤ 0`, a NaN argument or `p` outside `[0, 1]`.
pub fn t_quantile(df: f64, p: f64) -> f64 {
    if df.is_nan() || df <= 0.0 || !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    if df.is_infinite() {
        return Normal::standard().inverse_cdf(p);
    }
    StudentsT::new(0.0, 1.0, df).map_or(f64::NAN, |t| t.inverse_cdf(p))
}

/// Upper tail `P(T > t)` of Student's t with `df` degrees of freedom; NaN for `df ≤ 0` or NaN input.
pub fn t_sf(df: f64, t: f64) -> f64 {
    if df.is_nan() || df <= 0.0 || t.is_nan() {
        return f64::NAN;
    }
    if df.is_infinite() {
        return Normal::standard().sf(t);
    }
    StudentsT::new(0.0, 1.0, df).map_or(f64::NAN, |d| d.sf(t))
}

/// A two-sided prediction interval for one future observation: `center ± half_width`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PredictionInterval {
    /// Mean of the history.
    pub center: f64,
    /// `t_{df, (1+level)/2} · se`.
    pub half_width: f64,
    /// Standard error of a new observation minus the mean: `sd · √(1 + 1/k)`.
    pub se: f64,
    /// Degrees of freedom, `k − 1`.
    pub df: f64,
    /// The history's sample standard deviation.
    pub sd: f64,
    /// `t_{df, (1+level)/2}`.
    pub t: f64,
}

impl PredictionInterval {
    /// Lower end, `center − half_width`.
    pub fn lower(&self) -> f64 {
        self.center - self.half_width
    }

    /// Upper end, `center + half_width`.
    pub fn upper(&self) -> f64 {
        self.center + self.half_width
    }

    /// The same interval with the standard deviation raised to at least `sd` (a NaN floor is
    /// ignored). The gate floors the runs' spread at the current run's own bootstrap standard
    /// error, so that a short, tight history cannot make one run's noise significant.
    pub fn with_sd_floor(self, sd: f64) -> Self {
        let sd = self.sd.max(sd);
        let se = sd * (1.0 + 1.0 / (self.df + 1.0)).sqrt();
        PredictionInterval { half_width: self.t * se, se, sd, ..self }
    }
}

/// Prediction interval at `level` (e.g. 0.99) for the next value given `history` (k ≥ 2 values).
/// `None` for fewer than 2 values, a non-finite value, or `level` outside (0, 1). A history of
/// identical values gives a zero-width interval; callers widen it with their minimum effect.
pub fn prediction_interval(history: &[f64], level: f64) -> Option<PredictionInterval> {
    let k = history.len();
    if k < 2 || !(level > 0.0 && level < 1.0) || history.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let (center, sd) = mean_sd(history);
    let kf = k as f64;
    let se = sd * (1.0 + 1.0 / kf).sqrt();
    let df = kf - 1.0;
    let t = t_quantile(df, (1.0 + level) / 2.0);
    if !t.is_finite() {
        return None;
    }
    Some(PredictionInterval { center, half_width: t * se, se, df, sd, t })
}

/// 1.4826 × MAD (median absolute deviation around the median), in the units of `values`;
/// 0 for fewer than 2 values. Values need not be sorted.
pub fn robust_spread(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    let m = median(&sorted);
    let mut deviations: Vec<f64> = sorted.iter().map(|v| (v - m).abs()).collect();
    deviations.sort_unstable_by(f64::total_cmp);
    1.4826 * median(&deviations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;

    // from scipy import stats
    // [repr(float(stats.t.ppf(p, df))) for df, p in
    //  [(9, 0.975), (1, 0.995), (4, 0.9), (29, 0.995), (2.5, 0.05), (1000, 0.975)]]
    #[test]
    fn t_quantiles_match_scipy() {
        let cases = [
            (9.0, 0.975, 2.262157162798205),
            (1.0, 0.995, 63.656741162871526),
            (4.0, 0.9, 1.533206274058944),
            (29.0, 0.995, 2.756385903670605),
            (2.5, 0.05, -2.5582186141359364),
            (1000.0, 0.975, 1.9623390808264083),
        ];
        for (df, p, expected) in cases {
            assert_relative_eq!(t_quantile(df, p), expected, max_relative = 1e-10);
        }
        assert_relative_eq!(t_quantile(f64::INFINITY, 0.975), 1.959963984540054, max_relative = 1e-12);
        assert_eq!(t_quantile(5.0, 1.0), f64::INFINITY);
        assert!(t_quantile(0.0, 0.5).is_nan() && t_quantile(5.0, 1.5).is_nan() && t_quantile(f64::NAN, 0.5).is_nan());
    }

    // [repr(float(stats.t.sf(t, df))) for df, t in [(9, 2.5), (3, -1.2), (20, 4.0)]]
    #[test]
    fn t_upper_tails_match_scipy() {
        assert_relative_eq!(t_sf(9.0, 2.5), 0.016930913841492867, max_relative = 1e-10);
        assert_relative_eq!(t_sf(3.0, -1.2), 0.8418689426509474, max_relative = 1e-10);
        assert_relative_eq!(t_sf(20.0, 4.0), 0.00035176164656415933, max_relative = 1e-10);
        assert!(t_sf(-1.0, 0.0).is_nan());
    }

    // import numpy as np
    // h = [10.2, 9.8, 10.5, 10.1, 9.9, 10.4]; k = len(h)
    // sd = np.std(h, ddof=1); se = sd * np.sqrt(1 + 1/k); hw = stats.t.ppf(0.975, k - 1) * se
    // -> mean 10.15, sd 0.27386127875258287, se 0.29580398915498063, half width 0.7603883614305545
    #[test]
    fn prediction_interval_matches_scipy() {
        let h = [10.2, 9.8, 10.5, 10.1, 9.9, 10.4];
        let (mean, sd) = mean_sd(&h);
        assert_relative_eq!(mean, 10.15, max_relative = 1e-14);
        assert_relative_eq!(sd, 0.27386127875258287, max_relative = 1e-13);
        let pi = prediction_interval(&h, 0.95).unwrap();
        assert_relative_eq!(pi.center, 10.15, max_relative = 1e-14);
        assert_relative_eq!(pi.se, 0.29580398915498063, max_relative = 1e-13);
        assert_relative_eq!(pi.half_width, 0.7603883614305545, max_relative = 1e-10);
        assert_eq!(pi.df, 5.0);
        assert!(pi.lower() < 9.8 && pi.upper() > 10.5);
    }

    #[test]
    fn prediction_interval_needs_two_finite_values_and_a_level() {
        assert_eq!(prediction_interval(&[1.0], 0.95), None);
        assert_eq!(prediction_interval(&[1.0, f64::NAN], 0.95), None);
        assert_eq!(prediction_interval(&[1.0, 2.0], 1.0), None);
        assert_eq!(prediction_interval(&[3.0, 3.0, 3.0], 0.95).map(|p| p.half_width), Some(0.0));
        assert_eq!(mean_sd(&[4.0]), (4.0, 0.0));
        assert!(mean_sd(&[]).0.is_nan());
    }

    // v = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    // 1.4826 * stats.median_abs_deviation(v)  ->  2.9652  (MAD = 2.0 around the median 3.5)
    #[test]
    fn robust_spread_matches_scipy() {
        let v = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0];
        assert_relative_eq!(robust_spread(&v), 2.9652, max_relative = 1e-14);
        assert_eq!(robust_spread(&[5.0]), 0.0);
        // One wild run does not move it much.
        assert_relative_eq!(robust_spread(&[10.0, 10.1, 9.9, 10.0, 50.0]), 0.14826, max_relative = 1e-10);
    }
}
