//! commgate: gate merges on communication performance.
//!
//! The pipeline reads one way: `Cli → Config → inputs → trace::attribute → Attribution →
//! report::render → stdout / file`, and the [`run::Outcome`] maps to an exit code in `main`.

pub mod baseline;
pub mod bench;
pub mod check;
pub mod cli;
pub mod compare;
pub mod config;
pub mod github;
pub mod hotspots;
pub mod report;
pub mod result;
pub mod run;
pub mod stats;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod trace;
pub mod units;
pub mod verdict;

pub use run::{run, Outcome};
