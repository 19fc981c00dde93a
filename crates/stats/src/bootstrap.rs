//! Seeded bootstrap resampling: iid and circular moving blocks, plus the percentile interval.
//!
//! - Bootstrap: B. Efron, "Bootstrap methods: another look at the jackknife", Ann. Statist. 7(1),
//!   1979; percentile interval: B. Efron & R. J. Tibshirani, *An Introduction to the Bootstrap*,
//!   1993, ch. 13.
//! - Step times within a run are autocorrelated (clock and thermal drift, NCCL algorithm phases),
//!   and the iid bootstrap then understates the variance. The moving-block bootstrap
//!   (H. R. Künsch, "The jackknife and the bootstrap for general stationary observations",
//!   Ann. Statist. 17(3), 1989) resamples runs of consecutive observations; the circular variant
//!   (D. N. Politis & J. P. Romano, "A circular block-resampling procedure for stationary data",
//!   1992) wraps blocks around the end so every observation is equally likely to be drawn.
//! - Block length `≈ n^(1/3)`: the MSE-optimal order for variance and distribution estimation
//!   (P. Hall, J. L. Horowitz & B.-Y. Jing, "On blocking rules for the bootstrap with dependent
//!   data", Biometrika 82(3), 1995).
//!
//! Reproducibility: all randomness comes from [`Rng::below`], whose stream is fixed for a seed on
//! every platform. [`resample_blocks`] writes into a caller-owned buffer, so a bootstrap loop
//! allocates once; [`SortedResampler`] draws the same blocks but hands back each resample sorted
//! in O(n) (a counting pass over precomputed ranks), for quantile estimators.

use super::quantile::type7_quantile;
use super::rng::Rng;

/// Bootstrap resamples per interval unless the user sets another number (`--resamples`).
pub const DEFAULT_RESAMPLES: usize = 1000;

/// Block length for `n` observations: `n^(1/3)` rounded to the nearest integer, at least 1.
/// Computed in integers so it cannot depend on a platform's `cbrt`.
pub fn block_length(n: usize) -> usize {
    let n = n as u128;
    // Largest b with b³ ≤ n.
    let mut b: u128 = 1;
    while (b + 1).pow(3) <= n {
        b += 1;
    }
    // Round: take b + 1 when n ≥ (b + ½)³, i.e. 8n ≥ (2b + 1)³.
    let rounded = if 8 * n >= (2 * b + 1).pow(3) { b + 1 } else { b };
    rounded.max(1) as usize
}

/// Fills `out` with a circular moving-block resample of `data`: blocks of `block` consecutive
/// values starting at uniformly drawn positions, wrapping past the end, the last block truncated so
/// that `out.len() == data.len()`. `block` 0 or 1 is the iid bootstrap. `out` is cleared first and
/// only grows the first time, so reusing it across resamples does not allocate.
pub fn resample_blocks(data: &[f64], block: usize, rng: &mut Rng, out: &mut Vec<f64>) {
    out.clear();
    let n = data.len();
    if n == 0 {
        return;
    }
    out.reserve(n);
    let block = block.clamp(1, n);
    while out.len() < n {
        let start = rng.below(n);
        let take = block.min(n - out.len());
        // The block is data[start..] followed, if it wraps, by data[..].
        let first = take.min(n - start);
        out.extend_from_slice(&data[start..start + first]);
        out.extend_from_slice(&data[..take - first]);
    }
}

/// Circular moving-block resampling that delivers each resample **already sorted**, in O(n)
/// without a comparison sort, for order-statistic estimators such as [`HdWeights::apply`]
/// (sorting 1000 values costs ~20 µs, twenty times the Harrell–Davis dot product).
///
/// It ranks the series once; a resample is then a multiset of positions, counted by rank and read
/// back in rank order. For the same generator state it draws exactly the blocks that
/// [`resample_blocks`] draws, so `resample_sorted` equals `resample_blocks` followed by a sort.
///
/// Invariant: `sorted` is `data` in ascending order, `rank[i]` is the index in `sorted` of the
/// value at position `i` of `data`, and `counts.len() == data.len()`.
///
/// [`HdWeights::apply`]: super::quantile::HdWeights::apply
#[derive(Debug, Clone)]
pub struct SortedResampler {
    sorted: Vec<f64>,
    rank: Vec<usize>,
    counts: Vec<u32>,
}

impl SortedResampler {
    /// Ranks `data` (kept in its time order, which the blocks follow).
    pub fn new(data: &[f64]) -> SortedResampler {
        let mut order: Vec<usize> = (0..data.len()).collect();
        order.sort_by(|&a, &b| data[a].total_cmp(&data[b]));
        let mut rank = vec![0; data.len()];
        for (r, &position) in order.iter().enumerate() {
            rank[position] = r;
        }
        let sorted = order.iter().map(|&i| data[i]).collect();
        SortedResampler { sorted, rank, counts: vec![0; data.len()] }
    }

    /// The data in ascending order.
    pub fn sorted(&self) -> &[f64] {
        &self.sorted
    }

    /// Number of observations.
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// True for an empty series.
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// Fills `out` with an ascending circular moving-block resample (see [`resample_blocks`] for
    /// the scheme and `block`). Allocates only the first time `out` is used.
    pub fn resample_sorted(&mut self, block: usize, rng: &mut Rng, out: &mut Vec<f64>) {
        out.clear();
        let n = self.sorted.len();
        if n == 0 {
            return;
        }
        self.counts.fill(0);
        let block = block.clamp(1, n);
        let mut drawn = 0;
        while drawn < n {
            // Same draws, in the same order, as resample_blocks.
            let start = rng.below(n);
            let take = block.min(n - drawn);
            let first = take.min(n - start);
            for &r in self.rank[start..start + first].iter().chain(&self.rank[..take - first]) {
                self.counts[r] += 1;
            }
            drawn += take;
        }
        // Branch-light expansion: counts are ~Poisson(1), so write every value three times
        // unconditionally and advance by its count (rare longer runs take the loop); the slack of
        // three slots at the end is cut off afterwards.
        out.resize(n + 3, 0.0);
        let mut at = 0;
        for (&value, &count) in self.sorted.iter().zip(&self.counts) {
            let count = count as usize;
            out[at..at + 3].fill(value);
            if count > 3 {
                out[at + 3..at + count].fill(value);
            }
            at += count;
        }
        out.truncate(n);
    }
}

/// Percentile interval at confidence `level` (e.g. 0.95): sorts `estimates` in place and returns
/// the type-7 quantiles at `(1 − level)/2` and `(1 + level)/2`. `level` is clamped to `[0, 1]`.
/// Returns `(NaN, NaN)` for no estimates or a NaN level.
pub fn percentile_interval(estimates: &mut [f64], level: f64) -> (f64, f64) {
    if estimates.is_empty() || level.is_nan() {
        return (f64::NAN, f64::NAN);
    }
    estimates.sort_unstable_by(f64::total_cmp);
    let level = level.clamp(0.0, 1.0);
    (type7_quantile(estimates, (1.0 - level) / 2.0), type7_quantile(estimates, (1.0 + level) / 2.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::{any, prop, prop_assert, prop_assert_eq, proptest, Strategy};

    #[test]
    fn block_length_is_the_rounded_cube_root() {
        let expected = [(0, 1), (1, 1), (3, 1), (4, 2), (8, 2), (27, 3), (30, 3), (100, 5), (1000, 10), (1331, 11)];
        for (n, b) in expected {
            assert_eq!(block_length(n), b, "n = {n}");
        }
        // (2.5)³ = 15.625: 15 rounds down, 16 up.
        assert_eq!((block_length(15), block_length(16)), (2, 3));
    }

    #[test]
    fn blocks_are_consecutive_and_wrap() {
        let data: Vec<f64> = (0..10).map(f64::from).collect();
        let mut rng = Rng::new(3);
        let mut out = Vec::new();
        resample_blocks(&data, 4, &mut rng, &mut out);
        assert_eq!(out.len(), 10);
        // Within each block of 4 (the last one truncated to 2), values step by 1 modulo 10.
        for chunk in out.chunks(4) {
            for pair in chunk.windows(2) {
                assert_eq!((pair[0] + 1.0) % 10.0, pair[1], "{out:?}");
            }
        }
    }

    #[test]
    fn resampling_reuses_the_buffer() {
        let data = vec![1.0; 1000];
        let mut rng = Rng::new(1);
        let mut out = Vec::new();
        resample_blocks(&data, 10, &mut rng, &mut out);
        let (ptr, cap) = (out.as_ptr(), out.capacity());
        for _ in 0..10 {
            resample_blocks(&data, 10, &mut rng, &mut out);
        }
        assert_eq!((out.as_ptr(), out.capacity()), (ptr, cap));
    }

    // import numpy as np
    // e = np.arange(1, 201) ** 1.5
    // [repr(float(v)) for v in np.quantile(e, [0.025, 0.975])]  ->  14.609023492469069, 2723.55113832157
    #[test]
    fn percentile_interval_matches_numpy() {
        let mut e: Vec<f64> = (1..=200).rev().map(|i| f64::from(i).powf(1.5)).collect();
        let (lo, hi) = percentile_interval(&mut e, 0.95);
        approx::assert_relative_eq!(lo, 14.609023492469069, max_relative = 1e-13);
        approx::assert_relative_eq!(hi, 2723.55113832157, max_relative = 1e-13);
        assert!(e.windows(2).all(|w| w[0] <= w[1]));
        let (lo, hi) = percentile_interval(&mut [], 0.95);
        assert!(lo.is_nan() && hi.is_nan());
    }

    #[test]
    fn bootstrap_of_the_mean_is_centred() {
        let data: Vec<f64> = (0..100).map(|i| f64::from(i % 7)).collect();
        let mean = data.iter().sum::<f64>() / 100.0;
        let mut rng = Rng::new(42);
        let mut buffer = Vec::new();
        let mut means: Vec<f64> = (0..2000)
            .map(|_| {
                resample_blocks(&data, block_length(100), &mut rng, &mut buffer);
                buffer.iter().sum::<f64>() / buffer.len() as f64
            })
            .collect();
        let (lo, hi) = percentile_interval(&mut means, 0.95);
        assert!(lo < mean && mean < hi, "{lo} {mean} {hi}");
    }

    #[test]
    fn sorted_resampler_delivers_sorted_input_values() {
        let data = [5.0, 1.0, 3.0, 3.0, 9.0, 2.0];
        let mut resampler = SortedResampler::new(&data);
        assert_eq!(resampler.sorted(), &[1.0, 2.0, 3.0, 3.0, 5.0, 9.0]);
        assert_eq!(resampler.len(), 6);
        let mut out = Vec::new();
        resampler.resample_sorted(2, &mut Rng::new(9), &mut out);
        assert_eq!(out.len(), 6);
        assert!(out.windows(2).all(|w| w[0] <= w[1]));
        SortedResampler::new(&[]).resample_sorted(3, &mut Rng::new(1), &mut out);
        assert!(out.is_empty());
    }

    proptest! {
        #[test]
        fn resample_preserves_length_and_draws_input_values(
            data in prop::collection::vec(-1e3f64..1e3, 0..300), block in 0usize..50, seed in any::<u64>()
        ) {
            let mut rng = Rng::new(seed);
            let mut out = vec![f64::NAN; 7];
            resample_blocks(&data, block, &mut rng, &mut out);
            prop_assert_eq!(out.len(), data.len());
            for v in &out {
                prop_assert!(data.contains(v));
            }
        }

        #[test]
        fn bootstrap_is_reproducible_for_a_seed(
            data in prop::collection::vec(-1e3f64..1e3, 1..100), block in 1usize..10, seed in any::<u64>()
        ) {
            let sums = |rng: &mut Rng| -> Vec<f64> {
                let mut buffer = Vec::new();
                (0..20).map(|_| { resample_blocks(&data, block, rng, &mut buffer); buffer.iter().sum::<f64>() }).collect()
            };
            prop_assert_eq!(sums(&mut Rng::new(seed)), sums(&mut Rng::new(seed)));
        }

        #[test]
        fn sorted_resample_equals_sorting_the_block_resample(
            data in prop::collection::vec((0u32..50).prop_map(f64::from), 0..200), block in 0usize..30, seed in any::<u64>()
        ) {
            let mut plain = Vec::new();
            resample_blocks(&data, block, &mut Rng::new(seed), &mut plain);
            plain.sort_unstable_by(f64::total_cmp);
            let mut sorted = Vec::new();
            SortedResampler::new(&data).resample_sorted(block, &mut Rng::new(seed), &mut sorted);
            prop_assert_eq!(plain, sorted);
        }
    }
}
