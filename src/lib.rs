//! commgate: gate merges on communication performance.
//!
//! Data flows one way through these layers. The module imports form no cycle: [`cli`] and
//! [`config`] name the option types the later layers define (one definition per choice), each
//! stage reads the data of the stages before it, and nothing but `main` imports [`run`](mod@run).
//!
//! | layer | modules | owns |
//! |---|---|---|
//! | what the user typed | [`cli`] | clap structs, parsed into the domain enums directly |
//! | settings | [`config`] | flags > `COMMGATE_*` > `commgate.toml` > defaults, validated, nothing probed |
//! | work | [`bench`](mod@bench), [`trace`], [`stats`], [`compare`], [`baseline`], [`check`] | measuring, reading traces, statistics, the store |
//! | decision | [`verdict`], [`hotspots`], [`decision`] | one verdict from the evidence |
//! | rendering | [`report`] | data in, `String` out |
//! | output | [`output`], [`github`] | stdout, atomic files, the job summary and the PR comment |
//! | scaffolding | [`init`] | `commgate init`: the settings file, the store and the workflows of a new repository |
//!
//! [`run`](mod@run) is the top: it resolves the benchmark against the machine once
//! ([`bench::settings::BenchRequest::resolve`]), calls the layers in order, and returns the
//! [`Outcome`] that `main` maps to an exit code (0 passed, 1 blocked, 2 could not evaluate).
//! Shared data types ([`result`], [`units`]) and the reading of input files ([`input`]) sit below
//! all of them.

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
