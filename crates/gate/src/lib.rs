//! commgate's gate: the baseline store, the comparisons (estimates and states), every decision
//! rule, and the evidence `commgate check` gathers. Uses `commgate-core`, `commgate-stats` and
//! `commgate-trace`; never the benchmark's backends, a renderer or the network.
//!
//! | module | owns |
//! |---|---|
//! | [`baseline`] | the store: files, lock, history, identity |
//! | [`compare`] | a comparison's estimates, and its metrics' states as [`decide`] rules them (no verdict) |
//! | [`decide`] | every rule that turns evidence into a verdict, a mitigation or an exit code |
//! | [`check`] | the gate's evidence, gathered and handed to [`decide`] |

// This crate reads untrusted files (baseline stores, results and traces from pull requests): no
// index or slice that could panic on their contents (`get`, iterators and patterns instead), no
// `as` that could truncate a number (`try_from` instead); tests are exempt from the first through
// clippy.toml.
#![deny(clippy::indexing_slicing)]
#![deny(clippy::cast_possible_truncation)]

pub mod baseline;
pub mod check;
pub mod compare;
pub mod decide;
