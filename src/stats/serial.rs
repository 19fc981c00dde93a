//! Serial dependence of step times: the lag-1 autocorrelation, and a bootstrap block length that
//! grows with it.
//!
//! GPU step times come in episodes (a throttled clock, a noisy neighbour, a slow NCCL channel)
//! that last many steps. For an AR(1)-like series with lag-1 autocorrelation ρ, the integrated
//! autocorrelation time is τ = (1 + ρ)/(1 − ρ) (Box, Jenkins & Reinsel, *Time Series Analysis*,
//! §2.1; the same factor gives the effective sample size n/τ), so blocks shorter than τ cut the
//! episodes apart and make a bootstrap interval too narrow. The block used is
//! max(n^(1/3), ⌈τ⌉), at most n/2.

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
    use crate::stats::rng::Rng;

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

    #[test]
    fn degenerate_inputs() {
        assert_eq!(lag1_autocorrelation(&[]), 0.0);
        assert_eq!(lag1_autocorrelation(&[1.0, 2.0]), 0.0);
        assert_eq!(lag1_autocorrelation(&[3.0; 10]), 0.0);
        assert_eq!(dependent_block_length(&[1.0]), 1);
    }
}
