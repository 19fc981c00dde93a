//! commgate: gate merges on communication performance.
//!
//! Data flows one way through these layers, bottom to top. A module imports only from its own
//! layer or those above it in this table, and the modules form no import circle; `tests/layers.rs`
//! reads this table and every `crate::` path of the shipped code (test modules aside) and fails
//! when either stops being true.
//!
//! | layer | modules | owns |
//! |---|---|---|
//! | vocabulary and edges | `units`, `diag`, `input`, `output`, `base_commit`, `github`, `decide::vocab` | units and wording, stderr lines, bounded reads of untrusted files, atomic writes and stdout, the base commit's tree, the GitHub API; the gate's words (no rules) |
//! | data | `result` | the result file's typed schema |
//! | reading and statistics | `stats`, `trace` | pure statistics; traces in, the attribution out (no decision) |
//! | work | `baseline`, `bench`, `compare` | the store, measuring, the comparison's estimates and four states |
//! | decision | `decide::run`, `decide::comparison`, `decide::mitigation`, `decide::balance`, `decide::gate` | every rule that turns evidence into a verdict, a mitigation or an exit code |
//! | gathering | `check` | the gate's evidence, handed to the decisions |
//! | rendering | `report` | data in, `String` out |
//! | the command line | `cli`, `config`, `init`, `run`, `testkit` | what the user typed, settings resolved once (flags > `COMMGATE_*` > `commgate.toml` > defaults, each declared once in `config::sections`), `commgate init`'s scaffolding of them, the command switchboard; the test kit |
//!
//! [`run`](mod@run) is the top: it resolves the benchmark against the machine once
//! ([`bench::settings::BenchRequest::resolve`]), calls the layers in order, hands each stage's
//! evidence to [`decide`], and returns the [`Outcome`] that `main` maps to an exit code (0
//! passed, 1 blocked, 2 could not evaluate).

pub mod base_commit;
pub mod baseline;
pub mod bench;
pub mod check;
pub mod cli;
pub mod compare;
pub mod config;
pub mod decide;
pub mod diag;
pub mod github;
pub mod init;
pub mod input;
pub mod output;
pub mod report;
pub mod result;
pub mod run;
pub mod stats;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod trace;
pub mod units;

pub use run::{run, Outcome};
