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
pub mod decision;
pub mod github;
pub mod hotspots;
pub mod output;
pub mod report;
pub mod result;
pub mod run;
pub mod simulate;
pub mod stats;
pub mod trace;
pub mod units;
pub mod verdict;

pub use run::{run, Outcome};
