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

pub mod baseline;
pub mod check;
pub mod compare;
pub mod decide;
