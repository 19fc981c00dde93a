//! Deterministic subsampling of a long time series: one value drawn uniformly from each of `m`
//! equal strata of consecutive positions ("jittered systematic" or stratified sampling,
//! W. G. Cochran, *Sampling Techniques*, 3rd ed., 1977, §8.1 and §5A).
//!
//! Why strata and not a plain stride or a simple random sample:
//! - like a stride, every stretch of the run is represented in proportion to its length (a slow
//!   episode in the middle of a run keeps its share) and the subsample stays in time order, so a
//!   moving-block bootstrap of it still respects what serial dependence is left;
//! - unlike a fixed stride, the draw inside each stratum is random, so a periodic pattern in the
//!   steps (a checkpoint every 50 steps, gradient accumulation every 8) cannot alias with the
//!   stride and be kept always or never: each value is kept with probability m/n exactly, and
//!   every quantile of the subsample is an unbiased-in-distribution draw of the run's.
//!
//! The draws come from [`Rng::below`], so a seed fixes the subsample on every platform.

use super::rng::Rng;

/// `m` values of `data` in time order, one drawn uniformly from each stratum
/// `[⌊i·n/m⌋, ⌊(i+1)·n/m⌋)`, `i = 0..m`. Returns `data` unchanged when `m ≥ n` (nothing to
/// drop) and nothing when `m == 0`.
pub fn stratified_subsample(data: &[f64], m: usize, rng: &mut Rng) -> Vec<f64> {
    let n = data.len();
    if m >= n {
        return data.to_vec();
    }
    // u128 so that i·n cannot overflow for any slice length.
    let bound = |i: usize| (i as u128 * n as u128 / m as u128) as usize;
    (0..m)
        .map(|i| {
            let (start, end) = (bound(i), bound(i + 1));
            // m < n, so every stratum holds at least one value: end > start.
            data[start + rng.below(end - start)]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_series_is_returned_whole() {
        let data = [3.0, 1.0, 2.0];
        assert_eq!(stratified_subsample(&data, 3, &mut Rng::new(1)), data);
        assert_eq!(stratified_subsample(&data, 10, &mut Rng::new(1)), data);
        assert!(stratified_subsample(&data, 0, &mut Rng::new(1)).is_empty());
    }

    #[test]
    fn one_value_per_stratum_in_time_order() {
        // data[i] = i, so each kept value names its position.
        let data: Vec<f64> = (0..1003).map(f64::from).collect();
        let kept = stratified_subsample(&data, 100, &mut Rng::new(7));
        assert_eq!(kept.len(), 100);
        for (i, &x) in kept.iter().enumerate() {
            let (start, end) = (i * 1003 / 100, (i + 1) * 1003 / 100);
            assert!((start as f64..end as f64).contains(&x), "stratum {i}: {x}");
        }
    }

    #[test]
    fn a_seed_fixes_the_subsample_and_another_seed_moves_it() {
        let data: Vec<f64> = (0..10_000).map(f64::from).collect();
        let a = stratified_subsample(&data, 500, &mut Rng::new(11));
        assert_eq!(a, stratified_subsample(&data, 500, &mut Rng::new(11)));
        assert_ne!(a, stratified_subsample(&data, 500, &mut Rng::new(12)));
    }

    #[test]
    fn a_period_matching_the_stride_is_not_aliased() {
        // Every 10th step is slow; a plain stride of 10 would keep all of them or none.
        let data: Vec<f64> = (0..100_000).map(|i| if i % 10 == 0 { 2.0 } else { 1.0 }).collect();
        let kept = stratified_subsample(&data, 10_000, &mut Rng::new(3));
        let slow = kept.iter().filter(|&&x| x == 2.0).count() as f64 / kept.len() as f64;
        assert!((slow - 0.1).abs() < 0.02, "share of slow steps {slow}");
    }
}
