//! commgate: gate merges on communication performance. This crate is the binary's own layer, the
//! top of the workspace (docs/layout.md): what the user typed ([`cli`]), the settings resolved once
//! ([`config`]: flags > `COMMGATE_*` > `commgate.toml` > defaults), `commgate init`'s scaffolding
//! ([`init`]) and the command switchboard ([`commands`], one file per command). Everything below lives in its own
//! crate, each using only the crates under it:
//!
//! | crate | owns | uses |
//! |---|---|---|
//! | `commgate-core` | units, diagnostics, bounded input, atomic output, the verdict words, the result schema | — |
//! | `commgate-stats` | pure statistics | — |
//! | `commgate-trace` | trace readers, the trace model, attribution, critical path, what-if | core, stats |
//! | `commgate-bench` | the backends (CUDA, CPU, mock) and the launcher: measures, never decides | core, stats |
//! | `commgate-gate` | the baseline store, compare, every decision rule, check's evidence | core, stats, trace |
//! | `commgate-report` | data in, `String` out | core, stats, trace, bench, gate |
//! | `commgate-github` | the only crate that talks HTTP | core |
//! | `commgate-testkit` | generators and simulated runs (a dev-dependency only) | all but report and github |
//!
//! [`run`] resolves the benchmark against the machine once
//! ([`commgate_bench::settings::BenchRequest::resolve`]), calls the layers in order, hands each
//! stage's evidence to [`commgate_gate::decide`], and returns the [`Outcome`] that `main` maps to an
//! exit code (0 passed, 1 blocked, 2 could not evaluate).

pub mod cli;
pub mod commands;
pub mod config;
pub mod init;
pub mod reference;

pub use commands::{run, Outcome};
