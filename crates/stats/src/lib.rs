//! Pure statistics for the comparison gate: small types with written invariants and functions
//! with no I/O, no serde and no clap, each tested against scipy/numpy outputs for fixed inputs
//! (the Python is in a comment above each expected-value test).
//!
//! | file | owns | literature |
//! |---|---|---|
//! | [`rng`] | [`Rng`]: frozen, seeded xoshiro256** (splitmix64 seeding, Lemire bounded ints) | Blackman & Vigna 2018/2021; Steele, Lea & Flood 2014; Lemire 2019 |
//! | [`quantile`] | Harrell–Davis ([`HdWeights`], reusable across resamples), type-7, median | Harrell & Davis, Biometrika 69(3), 1982; Hyndman & Fan 1996 |
//! | [`mann_whitney`] | one-sided U test: exact (Gaussian-binomial counts) or tie-corrected normal | Mann & Whitney 1947; Conover 1999 |
//! | [`bootstrap`] | circular moving-block resampling (also pre-sorted in O(n)), block ≈ n^(1/3), percentile interval | Efron 1979; Künsch 1989; Politis & Romano 1992; Hall, Horowitz & Jing 1995 |
//! | [`interval`] | mean/sd, Student's t, prediction interval for a new run, 1.4826·MAD | Hahn & Meeker 1991; Hampel 1974 |
//! | [`runlevel`] | the run-level contrast of current and baseline runs, grouped by runner (one-way random effects) | Searle, Casella & McCulloch 1992; Hahn & Meeker 1991 |
//! | [`tail`] | exceedance test: share above the baseline's HD quantile, one-sided Fisher exact | Fisher 1922; Agresti 2013 |
//! | [`paired`] | paired rounds judged sequentially: each look's Student-t interval of the per-round log ratios at its spent level ([`Plan`]: Pocock-type alpha spending, union bound over looks), p-values, MDE, projected further rounds, the stopping rule | Lan & DeMets, Biometrika 70(3), 1983; Jennison & Turnbull 2000; Abedi & Brecht, ICPE 2017; Laaber, Scheuner & Leitner, EMSE 24, 2019 |
//! | [`holm`] | Holm step-down adjusted p-values for the family of compared metrics | Holm 1979 |
//! | [`serial`] | lag-1 autocorrelation (raw and rank), AR(1) block length, Ljung–Box on ranks | Box, Jenkins & Reinsel; Bartels 1982; Ljung & Box 1978 |
//! | [`warmup`] | MSER-5 warm-up truncation | White 1997; White, Cobb & Spratt 2000 |
//! | [`subsample`] | seeded stratified (jittered systematic) subsample of a long series, in time order | Cochran 1977 |
//!
//! Conventions: functions on slices expect finite values (callers validate their input) and, where
//! an answer does not exist (empty input, NaN probability), return NaN or `None` rather than
//! panic; p-values are always in `[0, 1]`. statrs supplies the distributions (incomplete beta,
//! Student's t, normal, hypergeometric) but not its Mann–Whitney test, whose exact path is wrong
//! (docs/crates.md).

pub mod bootstrap;
pub mod holm;
pub mod interval;
pub mod mann_whitney;
pub mod paired;
pub mod quantile;
pub mod rng;
pub mod runlevel;
pub mod serial;
pub mod subsample;
pub mod tail;
pub mod warmup;

pub use bootstrap::{block_length, percentile_interval, resample_blocks, SortedResampler};
pub use holm::holm_adjust;
pub use interval::{mean_sd, prediction_interval, robust_spread, t_quantile, t_sf, PredictionInterval};
pub use mann_whitney::{mann_whitney_u, MannWhitney};
pub use paired::{further_rounds, look, next, Look, Next, Plan, MIN_ROUNDS};
pub use quantile::{harrell_davis, median, type7_quantile, HdWeights};
pub use rng::Rng;
pub use serial::{dependent_block_length, lag1_autocorrelation, rank_lag1_autocorrelation, rank_ljung_box, LjungBox};
pub use subsample::stratified_subsample;
pub use tail::{binomial_greater, exceedance_test, fisher_exact_greater, Exceedance};
pub use warmup::mser5_truncation;
