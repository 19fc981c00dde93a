//! commgate: gate merges on communication performance.
//!
//! The pipeline reads one way: `Cli → Config → inputs → trace::attribute → Attribution →
//! report::render → stdout / file`, and the outcome maps to an exit code in `main`.

pub mod hotspots;
pub mod report;
pub mod trace;
