//! Test and benchmark support, a dev-dependency only, so that none of it ships in the `commgate`
//! binary: the synthetic trace generator ([`synth`]), the simulated benchmark runs ([`simulate`]),
//! result files built in code ([`results`]) and a whole-trace loader for tests that inspect every
//! rank's parsed trace ([`load`]).
//!
//! A crate's unit tests may use it when they pass it no type of the crate under test (the kit
//! links the crate's ordinary build, not its test build); the rest use it from `tests/`.

pub mod dense;
pub mod inspector;
pub mod load;
pub mod nccl_tests;
pub mod nsys;
pub mod results;
pub mod simulate;
pub mod synth;
