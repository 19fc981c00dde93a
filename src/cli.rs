//! What the user typed: clap derive structs. Doc comments are the help text; every flag that
//! has a `commgate.toml` counterpart also reads `COMMGATE_*`. These types never travel past
//! `config.rs`.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Gate merges on communication performance: find the collective whose time compute does not
/// hide, say what to try, and (soon) block regressions.
#[derive(Debug, Parser)]
#[command(name = "commgate", version, about, max_term_width = 100)]
pub struct Cli {
    /// Settings file (default: ./commgate.toml when it exists).
    #[arg(long, global = true, env = "COMMGATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Attribute communication hotspots in PyTorch profiler traces (one file per rank, plain or
    /// .gz, or directories of them) or in seed-format event files.
    Attribute(AttributeArgs),
}

#[derive(Debug, clap::Args)]
pub struct AttributeArgs {
    /// Trace files or directories holding them.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,

    /// Report format.
    #[arg(long, value_enum, env = "COMMGATE_FORMAT")]
    pub format: Option<FormatArg>,

    /// Write the report to FILE (atomically) instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Number of steps the traces hold, when they have no ProfilerStep markers (or to override).
    #[arg(long, env = "COMMGATE_STEPS", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: Option<u64>,

    /// Rules for the window, rounding and kernel classes: commgate's own or Holistic Trace
    /// Analysis's (to cross-check its numbers).
    #[arg(long, value_enum, env = "COMMGATE_COMPAT")]
    pub compat: Option<CompatArg>,

    /// A kernel-name substring that marks a custom communication kernel (repeatable), e.g.
    /// `cross_device_reduce`.
    #[arg(long = "comm-pattern", value_name = "SUBSTRING")]
    pub comm_patterns: Vec<String>,

    /// Observed rank imbalance above this ratio → rebalance_ranks_or_experts.
    #[arg(long, env = "COMMGATE_IMBALANCE_RATIO", value_name = "RATIO")]
    pub imbalance_ratio: Option<f64>,

    /// Overlap below this ratio (with exposed time) → increase_overlap_or_delay_sync.
    #[arg(long, env = "COMMGATE_LOW_OVERLAP_RATIO", value_name = "RATIO")]
    pub low_overlap_ratio: Option<f64>,

    /// The priority collective's exposed time per step at or below this is accepted.
    #[arg(long, env = "COMMGATE_ACCEPT_EXPOSED_MS", value_name = "MS")]
    pub accept_exposed_ms: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    Text,
    Json,
    Markdown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompatArg {
    Default,
    Hta,
}
