//! Test and benchmark support, compiled only with the `testkit` cargo feature so that none of it
//! ships in the library or the `commgate` binary: the synthetic trace generator ([`synth`]), the
//! simulated benchmark runs ([`simulate`]) and a whole-trace loader for tests that inspect every
//! rank's parsed trace ([`load`]).
//!
//! `cargo test` turns the feature on through the package's dev-dependency on itself; benches and
//! examples that use this module declare `required-features = ["testkit"]`.

pub mod dense;
pub mod inspector;
pub mod load;
pub mod nccl_tests;
pub mod nsys;
pub mod simulate;
pub mod synth;
