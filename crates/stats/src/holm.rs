//! Holm's step-down adjustment of p-values for a family of tests.
//!
//! S. Holm, "A simple sequentially rejective multiple test procedure", Scand. J. Statist. 6(2),
//! 65–70, 1979. With the m p-values sorted ascending, `p̃₍ⱼ₎ = max_{i ≤ j} min(1, (m − i + 1)·p₍ᵢ₎)`
//! (1-based). Rejecting every hypothesis whose adjusted p-value is ≤ α controls the family-wise
//! error rate at α under any dependence between the tests, and is uniformly more powerful than
//! Bonferroni. The gate compares several metrics of one run (family α = 0.01), so one noisy metric
//! cannot block a merge on its own.

/// Holm-adjusted p-values, in the input order. Each output is ≥ its input, ≤ 1, and the outputs
/// are monotone in the inputs' order. A NaN input is treated as 1 (no evidence).
pub fn holm_adjust(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let clean: Vec<f64> = p.iter().map(|&v| if v.is_nan() { 1.0 } else { v.clamp(0.0, 1.0) }).collect();
    let mut order: Vec<usize> = (0..m).collect();
    // Stable, so equal p-values keep their input order (the result does not depend on it).
    order.sort_by(|&a, &b| clean[a].total_cmp(&clean[b]));
    let mut adjusted = vec![0.0; m];
    let mut running_max: f64 = 0.0;
    for (rank, &index) in order.iter().enumerate() {
        let scaled = ((m - rank) as f64 * clean[index]).min(1.0);
        running_max = running_max.max(scaled);
        adjusted[index] = running_max;
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;
    use proptest::prelude::{prop, prop_assert, prop_assert_eq, proptest};

    // By hand (statsmodels' multipletests(method='holm') is not installed here):
    // p = [0.01, 0.04, 0.03, 0.005], m = 4; ascending 0.005, 0.01, 0.03, 0.04
    //   4·0.005 = 0.02; 3·0.01 = 0.03; 2·0.03 = 0.06; 1·0.04 = 0.04 → running max 0.06
    //   adjusted in input order: [0.03, 0.06, 0.06, 0.02]
    #[test]
    fn holm_by_hand() {
        let adjusted = holm_adjust(&[0.01, 0.04, 0.03, 0.005]);
        let expected = [0.03, 0.06, 0.06, 0.02];
        for (a, e) in adjusted.iter().zip(expected) {
            assert_relative_eq!(*a, e, max_relative = 1e-15);
        }
    }

    // p = [0.5, 0.001, 0.3]; ascending 0.001, 0.3, 0.5: 3·0.001 = 0.003; 2·0.3 = 0.6; 1·0.5 = 0.5 → 0.6
    //   adjusted: [0.6, 0.003, 0.6]; and capping: [0.9, 0.8] → 2·0.8 = 1.6 → 1, then 0.9 → 1
    #[test]
    fn holm_caps_and_enforces_monotonicity() {
        let adjusted = holm_adjust(&[0.5, 0.001, 0.3]);
        assert_relative_eq!(adjusted[0], 0.6, max_relative = 1e-15);
        assert_relative_eq!(adjusted[1], 0.003, max_relative = 1e-15);
        assert_relative_eq!(adjusted[2], 0.6, max_relative = 1e-15);
        assert_eq!(holm_adjust(&[0.9, 0.8]), vec![1.0, 1.0]);
        assert_eq!(holm_adjust(&[]), Vec::<f64>::new());
        assert_eq!(holm_adjust(&[0.02]), vec![0.02]);
        assert_eq!(holm_adjust(&[f64::NAN, 0.01]), vec![1.0, 0.02]);
    }

    proptest! {
        #[test]
        fn adjusted_is_at_least_raw_and_at_most_one(p in prop::collection::vec(0.0f64..=1.0, 0..30)) {
            let adjusted = holm_adjust(&p);
            prop_assert_eq!(adjusted.len(), p.len());
            for (raw, adj) in p.iter().zip(&adjusted) {
                prop_assert!(adj >= raw && *adj <= 1.0);
            }
            // Order-preserving: a smaller raw p never gets a larger adjusted p.
            for i in 0..p.len() {
                for j in 0..p.len() {
                    if p[i] < p[j] {
                        prop_assert!(adjusted[i] <= adjusted[j]);
                    }
                }
            }
        }
    }
}
