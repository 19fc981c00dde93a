//! What the user typed: clap derive structs. Doc comments are the help text. A flag that has a
//! `commgate.toml` key is declared in that key's section (`config::sections`, flattened in
//! here), with its `COMMGATE_*` variable; the flags declared here have no key. These types
//! never travel past `config.rs`.

// The doc comments here are clap's help text, where `<name>` is a placeholder the user reads,
// not an HTML tag: written for `--help`, not for rustdoc.
#![allow(rustdoc::invalid_html_tags)]

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub mod sections;
pub mod shell;

use commgate_github::MAX_PULL_REQUEST;
use commgate_report::Format;
use sections::{
    AttributeSection, BaselineSection, BenchSection, CheckSection, CompareSection, StoreDir, ThresholdsSection,
};

/// Gate merges on communication performance: find the collective whose time compute does not
/// hide, say what to try, and (soon) block regressions.
#[derive(Debug, Parser)]
#[command(name = "commgate", version, long_version = shell::LONG_VERSION.as_str(), about, max_term_width = 100)]
pub struct Cli {
    /// Settings file (default: ./commgate.toml when it exists).
    #[arg(long, global = true, env = "COMMGATE_CONFIG", hide_env_values = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// The `COMMGATE_*` variables that gave a value (name, value as written), filled by
    /// `config::parse_args` so that a bad value is reported as the variable that set it.
    #[arg(skip)]
    pub from_env: Vec<(String, String)>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Attribute communication hotspots in PyTorch profiler traces (one file per rank, plain or
    /// .gz, or directories of them), Nsight Systems SQLite exports, NCCL Inspector logs, or
    /// aggregated-event files.
    Attribute(AttributeArgs),
    /// Compare a result file with its baseline (the medians of all four schedules, the overlap
    /// and serial P95s, and exposed communication) and say regressed, improved, unchanged or
    /// inconclusive per metric. Exits 1 on a confirmed regression.
    Compare(CompareArgs),
    /// Run the overlap benchmark (all-reduce and matmul: alone, serially, overlapped) and write a
    /// result file per workload (--payload-sizes, [workloads.<name>] tables), listed on stdout.
    Bench(BenchArgs),
    /// The gate: run the benchmark (or take --result), compare with the stored baseline,
    /// attribute --traces, decide one verdict, write the report, comment on the pull request.
    /// Exits 1 when --fail-on names the verdict, 2 when it could not evaluate.
    Check(Box<CheckArgs>),
    /// Post or update the pull-request comment for a report written earlier by `check --output`
    /// (the trusted half of the fork-PR two-workflow pattern). Exits 2 when nothing was posted;
    /// --dry-run prints the comment instead, anywhere.
    Comment(CommentArgs),
    /// Manage the baseline store (`baselines/<environment_profile>/<workload_id>.json`).
    #[command(subcommand)]
    Baseline(BaselineCommand),
    /// Scaffold a repository for the gate: commgate.toml, baselines/<profile>/ and the
    /// pull-request workflow (with --fork-prs, also the fork-PR pair). Writes nothing when any of
    /// the files exists, unless --force.
    Init(InitArgs),
    /// Print the completion script for SHELL on stdout (docs/shell.md says where each shell
    /// looks for it).
    Completions(CompletionsArgs),
    /// Print the manual page (roff) on stdout (read it with `commgate man | man -l -`), or with
    /// --dir write one page per command there.
    Man(ManArgs),
}

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write commgate.1 and one page per command (commgate-check.1, …) into DIR (created if
    /// missing) and list them, instead of printing commgate.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The backend `init`'s workflows run the benchmark on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum GateBackend {
    /// NCCL and cuBLAS on the runner's GPUs (fails loudly without a usable GPU; `gpu` is taken
    /// for it too).
    #[default]
    #[value(alias = "gpu")]
    Cuda,
    /// The CPU backend: real timings of the mechanism on any runner.
    Cpu,
}

impl GateBackend {
    pub fn name(self) -> &'static str {
        match self {
            GateBackend::Cuda => "cuda",
            GateBackend::Cpu => "cpu",
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The directory to scaffold (the repository root).
    #[arg(long, value_name = "PATH", default_value = ".")]
    pub dir: PathBuf,

    /// The environment profile the baselines are kept under (default: the backend's,
    /// PAR-CUDA-MECHANISM or PAR-CPU-MECHANISM).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,

    /// The backend the workflows run the benchmark on (whatever this machine has): `cuda` on
    /// GPU runners, `cpu` to gate the mechanism on runners without a GPU.
    #[arg(long, value_enum, default_value_t = GateBackend::Cuda)]
    pub backend: GateBackend,

    /// The commgate action the workflows use, as OWNER/REPO@REF (a tag or a full commit SHA;
    /// default: this release's tag).
    #[arg(long, value_name = "OWNER/REPO@REF")]
    pub action_ref: Option<String>,

    /// Also write the two-workflow pair for pull requests from forks (measure, then comment).
    #[arg(long)]
    pub fork_prs: bool,

    /// Overwrite files that already exist.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// A baseline store file, or a single result file used as a one-run baseline.
    #[arg(long, value_name = "FILE")]
    pub baseline: PathBuf,

    /// The result file to judge.
    #[arg(long, value_name = "FILE")]
    pub current: PathBuf,

    #[command(flatten)]
    pub settings: CompareSection,

    /// Write the report to FILE (atomically) instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Text tables with every column (by default they fit 100 characters, the columns left out
    /// named under each table).
    #[arg(long)]
    pub wide: bool,
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub flags: BenchFlags,

    /// Print the plan (sizes, bytes, FLOPs, schedules) and run nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// The result file (default: <results dir>/<time>_<workload>_<label>.json, never
    /// overwriting an earlier one). One workload only: with several, use --results-dir.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// The workload's id (letters, digits, '-', '_', '.', '+'; at most 64), or with
    /// [workloads.<name>] tables in commgate.toml the one of them to run (by name or id).
    #[arg(long, value_name = "NAME")]
    pub workload: Option<String>,

    /// One workload per payload size, bytes per rank, comma-separated: plain numbers or with a
    /// Ki, Mi or Gi suffix (1Mi,64Mi,1Gi). Each gets an id derived from what it measures.
    #[arg(long, value_name = "SIZES", value_delimiter = ',', num_args = 1.., conflicts_with = "payload_elements")]
    pub payload_sizes: Vec<String>,
}

/// The benchmark's flags, shared by `bench` and `check`: `[bench]`'s, and three without a key.
#[derive(Debug, clap::Args)]
pub struct BenchFlags {
    #[command(flatten)]
    pub settings: BenchSection,

    /// Run with one rank: a smoke run (loading, timing and GEMM only). One rank communicates
    /// nothing, so it is refused without this flag, and its bus bandwidth is not applicable.
    #[arg(long)]
    pub allow_single_rank: bool,

    /// No progress bar (it is off anyway when stderr is not a terminal or CI is set).
    #[arg(long, short)]
    pub quiet: bool,

    /// Seed of the mock backend's timings.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Judge these result files instead of running the benchmark: one per workload (each
    /// carries its `workload.id` and is held against its own baseline).
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with = "results_dir")]
    pub result: Vec<PathBuf>,

    /// Run only this workload: its id, or with [workloads.<name>] tables in commgate.toml the
    /// one of them (by name or id). By default every workload `bench` would run is judged.
    #[arg(long, value_name = "NAME", conflicts_with = "result")]
    pub workload: Option<String>,

    /// One workload per payload size, bytes per rank, comma-separated (as `bench`); each is
    /// judged against its own baseline.
    #[arg(
        long,
        value_name = "SIZES",
        value_delimiter = ',',
        num_args = 1..,
        conflicts_with_all = ["payload_elements", "result"]
    )]
    pub payload_sizes: Vec<String>,

    #[command(flatten)]
    pub store: StoreDir,

    /// Profiler traces to attribute (files or directories, one trace per rank).
    #[arg(long, num_args = 1.., value_name = "PATH")]
    pub traces: Vec<PathBuf>,

    /// Which stored trace runs (`baseline update --traces --name`) to judge the traces against.
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub trace_name: String,

    /// Text tables with every column (by default they fit 100 characters, the columns left out
    /// named under each table).
    #[arg(long)]
    pub wide: bool,

    /// Measure the base commit and the working tree in alternating rounds on this runner and
    /// judge head against base (--mode paired; docs/gate.md, "Paired mode").
    #[arg(long, conflicts_with_all = ["mode", "result", "traces"])]
    pub paired: bool,

    #[command(flatten)]
    pub settings: CheckSection,

    #[command(flatten)]
    pub base: BaseFlags,

    #[command(flatten)]
    pub bench: BenchFlags,
}

/// Which commit's baselines and settings judge the change.
#[derive(Debug, Clone, clap::Args)]
pub struct BaseFlags {
    /// Judge with the baselines and commgate.toml of this commit (SHA, branch or tag), as in a
    /// pull request, where it defaults to the event's base commit.
    #[arg(
        long,
        value_name = "REV",
        env = "COMMGATE_BASE",
        hide_env_values = true,
        conflicts_with = "baselines_from_head"
    )]
    pub base: Option<String>,

    /// In a pull request, judge with its own baselines and commgate.toml instead of the base
    /// commit's (a pull request can then edit what judges it).
    #[arg(long)]
    pub baselines_from_head: bool,
}

#[derive(Debug, clap::Args)]
pub struct CommentArgs {
    /// A report written by `commgate check --output`. It is untrusted data (it may come from a
    /// fork's run): it is parsed strictly and the comment is rendered and escaped from it anew.
    #[arg(long, value_name = "REPORT.json")]
    pub report: PathBuf,

    /// The pull request to comment on, when the event is not a pull request (a `workflow_run`
    /// job finds it from the run's head SHA).
    #[arg(long, env = "COMMGATE_PR", hide_env_values = true, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_PULL_REQUEST))]
    pub pr: Option<u64>,

    /// Print the comment's Markdown on stdout and post nothing (no GitHub Actions or token needed).
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Subcommand)]
pub enum BaselineCommand {
    /// Add a finished result to its baseline file, keeping the newest runs (atomic write).
    Update(UpdateArgs),
    /// List every store under the store directory: runs, newest date, newest medians. Exits 2
    /// when a store does not load (after listing them all).
    List(ListArgs),
    /// Show every run a store knows, oldest first (judged runs and summaries), with a trend.
    Show(ShowArgs),
    /// Take runs out of a store: benchmark runs by run id, trace runs by name and position
    /// (under the store's lock, atomic write; the store must be valid afterwards).
    Remove(RemoveArgs),
}

/// One store file: named, or found by workload id (and profile) under the store directory.
#[derive(Debug, clap::Args)]
pub struct StoreFile {
    /// A store file, or a workload id looked up under --baselines.
    #[arg(value_name = "FILE|WORKLOAD")]
    pub target: String,

    #[command(flatten)]
    pub store: StoreDir,

    /// The environment profile (for a workload id held by several profiles).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct RemoveArgs {
    #[command(flatten)]
    pub file: StoreFile,

    /// Benchmark runs to remove, by run id: 12 or more of its hex digits, as `baseline update`
    /// printed it (`baseline show --format json` lists every run's id).
    #[arg(long = "run", value_name = "ID", num_args = 1.., required_unless_present = "trace_run")]
    pub runs: Vec<String>,

    /// Trace runs to remove: NAME:N, the N-th run stored under NAME, oldest first (1-based).
    #[arg(long, value_name = "NAME:N", num_args = 1..)]
    pub trace_run: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub store: StoreDir,

    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub file: StoreFile,

    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    /// The result files to add, each to its own profile's and workload's file (all checked
    /// before any is written).
    #[arg(long, value_name = "RESULT", num_args = 1.., required_unless_present = "traces")]
    pub from: Vec<PathBuf>,

    /// Profiler traces whose attribution summary the baseline keeps, for `check --traces`.
    #[arg(long, num_args = 1.., value_name = "PATH")]
    pub traces: Vec<PathBuf>,

    /// The name the trace run is stored under (its runs are judged together by `check --trace-name`).
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub name: String,

    /// The baseline's environment profile: with --traces and no --from, and for nccl-tests
    /// output, which names none.
    #[arg(long, env = "COMMGATE_ENVIRONMENT_PROFILE", hide_env_values = true, value_name = "NAME")]
    pub environment_profile: Option<String>,

    /// With --traces and no --from: the baseline's workload id.
    #[arg(long, value_name = "ID", default_value = "par-overlap-allreduce-matmul")]
    pub workload_id: String,

    #[command(flatten)]
    pub baseline: BaselineSection,
}

#[derive(Debug, clap::Args)]
pub struct AttributeArgs {
    /// Trace files or directories holding them.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,

    #[command(flatten)]
    pub settings: AttributeSection,

    /// Write the report to FILE (atomically) instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Reduce the ranks given (say one node's) to a partial file at OUT (gzip when OUT ends in
    /// `.gz`) instead of a report; `commgate attribute PARTIAL...` combines partial files into
    /// the report for all ranks.
    #[arg(long, value_name = "OUT", conflicts_with = "output")]
    pub partial: Option<PathBuf>,

    /// Text tables with every column (by default they fit 100 characters, the columns left out
    /// named under each table).
    #[arg(long)]
    pub wide: bool,

    #[command(flatten)]
    pub thresholds: ThresholdsSection,
}
