//! Every setting that `commgate.toml` can hold, declared once: one struct per section of the
//! file, deriving both `clap::Args` (the flag, its `COMMGATE_*` variable and its help text, from
//! the doc comment) and `serde::Deserialize` (the file key: the field's name), with a default and
//! a limit written beside the field. The commands' argument structs in `cli` flatten these
//! sections, and `config::FileConfig` holds them, so a flag and its file key cannot drift apart.
//!
//! Why this shape (nextest's: clap derive and serde on one struct) rather than one table that
//! generates everything: the flags need clap's whole attribute language (`value_enum`, ranges,
//! delimiters, `short`, conflicts), which a generating table would have to restate. The
//! `section!` macro only adds what derive cannot say: every field is an `Option` (unset here,
//! so that flags > environment > file > default can be merged), and `= default` and
//! `=> limit` after a field become that setting's [`Spec`]. A `Spec`'s flag and variable are
//! read back from the clap definition itself (through `augment_args`), so that error messages
//! name where a value came from without a second list of names.
//!
//! Defaults that belong to a domain type (`CompareOptions`, `Thresholds`) are taken from it, and
//! those that depend on the backend that will run (the benchmark's sizes) are filled in by
//! `BenchRequest::resolve`; neither is restated here. A `[workloads.<name>]` table
//! (`workloads.rs`) sets six of `[bench]`'s keys for one workload; its values are checked by
//! `[bench]`'s limits.

use std::fmt::Display;
use std::path::PathBuf;

use commgate_bench::nccl::{Algo, Proto};
use commgate_bench::settings::timeout;
use commgate_bench::settings::BackendChoice;
use commgate_bench::sizes;
use commgate_bench::Dtype;
use commgate_gate::baseline::history::MAX_HISTORY;
use commgate_gate::baseline::{DEFAULT_HISTORY_KEEP, DEFAULT_KEEP};
use commgate_gate::check::{paired, Mode};
use commgate_gate::compare::CompareOptions;
use commgate_gate::decide::mitigation::Thresholds;
use commgate_gate::decide::FailOn;
use commgate_github::CommentPolicy;
use commgate_report::Format;
use commgate_trace::attribute::Compat;

/// One setting's names: `[section] name` in the file, its flag and its variable (`None` for a
/// key only the file sets). Built by [`Key::of`] from the clap definition of the setting, in
/// `sections`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub section: &'static str,
    pub name: &'static str,
    pub flag: Option<&'static str>,
    pub env: Option<&'static str>,
}

impl Key {
    /// The names of the argument `id` of `command` (a section's `augment_args`): its long flag
    /// and its variable, as clap defines them. Called once per setting, into a static, so the
    /// names are kept for the life of the process.
    pub fn of(command: &clap::Command, section: &'static str, id: &'static str) -> Key {
        let arg = command.get_arguments().find(|a| a.get_id().as_str() == id);
        let flag = arg.and_then(|a| a.get_long()).map(|long| &*format!("--{long}").leak());
        let env = arg.and_then(|a| a.get_env()).map(|var| &*var.to_string_lossy().into_owned().leak());
        Key { section, name: id, flag, env }
    }
}

impl Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.section, self.name)
    }
}

/// A limit: a check of a value alone, `Err(why)` when it is refused.
pub type Limit<T> = fn(&T) -> Result<(), String>;

/// One setting: its names (section and key in the file, flag, variable), its default and its
/// limit (a check of the value alone that says why it is refused).
#[derive(Debug)]
pub struct Spec<T: 'static> {
    pub key: Key,
    default: Option<fn() -> T>,
    check: Option<Limit<T>>,
}

impl<T> Spec<T> {
    /// The value used when nothing sets it. Panics for a setting declared without one (a
    /// programming error, caught by the tests that resolve every command's settings).
    #[expect(
        clippy::panic,
        reason = "only a setting declared without `= default` has none, and no call site asks one for it"
    )]
    pub fn default_value(&self) -> T {
        (self.default.unwrap_or_else(|| panic!("{} has no default", self.key)))()
    }

    /// `value`, else the default.
    pub fn or_default(&self, value: Option<T>) -> T {
        value.unwrap_or_else(|| self.default_value())
    }

    /// The setting's limit: `Err(why)` when `value` is outside it.
    pub fn within(&self, value: &T) -> Result<(), String> {
        self.check.map_or(Ok(()), |check| check(value))
    }
}

/// `section!`'s `= default`, as a function (none when the field has no default).
macro_rules! default_fn {
    ($ty:ty) => {
        None
    };
    ($ty:ty, $default:expr) => {
        Some((|| $default) as fn() -> $ty)
    };
}

/// `section!`'s `=> limit`, as a function (none when the field has no limit).
macro_rules! check_fn {
    ($ty:ty) => {
        None
    };
    ($ty:ty, $check:path) => {
        Some($check as Limit<$ty>)
    };
}

/// A section of `commgate.toml` and the flags that set the same values: see the module doc.
/// `pub name: T = default => limit,` declares the field `name: Option<T>` (with the attributes
/// written above it) and the entry `name: Spec<T>` of the section's `specs()`.
macro_rules! section {
    (
        $(#[$meta:meta])*
        pub struct $name:ident($section:literal), specs $specs:ident {
            $(
                $(#[$field_meta:meta])*
                pub $field:ident: $ty:ty $(= $default:expr)? $(=> $check:path)?
            ),* $(,)?
        }
    ) => {
        #[derive(Debug, Default, Clone, PartialEq, clap::Args, serde::Deserialize)]
        $(#[$meta])*
        pub struct $name {
            $( $(#[$field_meta])* pub $field: Option<$ty>, )*
        }

        #[doc = concat!("The settings of [`", stringify!($name), "`]: names, defaults and limits.")]
        #[derive(Debug)]
        pub struct $specs {
            $( pub $field: Spec<$ty>, )*
        }

        impl $name {
            /// The section's name in `commgate.toml`.
            pub const SECTION: &'static str = $section;

            /// The section's keys in `commgate.toml`, in declaration order (the reference's rows).
            pub const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// Each setting's names (its flag and variable as clap defines them), default and limit.
            pub fn specs() -> &'static $specs {
                static SPECS: std::sync::OnceLock<$specs> = std::sync::OnceLock::new();
                SPECS.get_or_init(|| {
                    let command = <$name as clap::Args>::augment_args(clap::Command::new($section));
                    $specs {
                        $( $field: Spec {
                            key: Key::of(&command, $section, stringify!($field)),
                            default: default_fn!($ty $(, $default)?),
                            check: check_fn!($ty $(, $check)?),
                        }, )*
                    }
                })
            }

            /// These values (the flags, with their variables) over `file`'s, field by field.
            pub fn or(self, file: &Self) -> Self {
                $name { $( $field: self.$field.or_else(|| file.$field.clone()), )* }
            }
        }
    };
}

section! {
    /// `[compare]`: how a result is judged against its baseline (`compare`; `check` reads the
    /// file's values).
    #[serde(deny_unknown_fields)]
    pub struct CompareSection("compare"), specs CompareSpecs {
        /// Report format.
        #[arg(long, value_enum, env = "COMMGATE_FORMAT", hide_env_values = true)]
        pub format: Format = Format::Text,

        /// The smallest relative change worth acting on (before the baseline's own spread), e.g. 0.03.
        #[arg(long, env = "COMMGATE_MIN_EFFECT", hide_env_values = true, value_name = "FRACTION")]
        pub min_effect: f64 = CompareOptions::default().min_effect => commgate_gate::compare::limits::min_effect,

        /// Bootstrap resamples per interval (default 1000; 100 to 100000).
        #[arg(long, env = "COMMGATE_RESAMPLES", hide_env_values = true, value_name = "N")]
        pub resamples: usize = CompareOptions::default().resamples => commgate_gate::compare::limits::resamples,

        /// Seed of the bootstrap, so a verdict is reproducible.
        #[arg(long, env = "COMMGATE_SEED", hide_env_values = true, value_name = "N")]
        pub seed: u64 = CompareOptions::default().seed,
    }
}

section! {
    /// `[check]`: what the gate does with its verdict.
    #[serde(deny_unknown_fields)]
    pub struct CheckSection("check"), specs CheckSpecs {
        /// Which verdicts exit 1.
        #[arg(long, value_enum, env = "COMMGATE_FAIL_ON", hide_env_values = true)]
        pub fail_on: FailOn = FailOn::Regression,

        /// Comment on the pull request: auto (inside GitHub Actions on a pull request), always, never.
        #[arg(long, value_enum, env = "COMMGATE_COMMENT", hide_env_values = true)]
        pub comment: CommentPolicy = CommentPolicy::Auto,

        /// Terminal report format.
        #[arg(long, value_enum, env = "COMMGATE_FORMAT", hide_env_values = true)]
        pub format: Format = Format::Text,

        /// Write the JSON report here (before any network call); `commgate comment --report` reads it.
        #[arg(long, short, value_name = "FILE")]
        pub output: PathBuf,

        /// Benchmark each workload K times (1 to 20) and judge the K runs together as the current
        /// side. Each run writes its own result file (the 2nd to Kth beside the first, as
        /// `<first>.run2.json` …). Not with --result: pass several files of one workload instead.
        #[arg(long, env = "COMMGATE_RUNS", hide_env_values = true, value_name = "K")]
        pub runs: u32 = 1 => crate::config::runs,

        /// Block when the late rank's cost grew by more than this many ms per step: what the
        /// traces' what-if says putting it on time would save, against the stored trace runs'
        /// (or 0 without them). Needs --traces.
        #[arg(long, env = "COMMGATE_FAIL_ON_SAVINGS_MS", hide_env_values = true, value_name = "MS")]
        pub fail_on_savings_ms: f64 => milliseconds,

        /// How the gate measures: stored (this run against the baselines stored in the
        /// repository) or paired (the base commit and the working tree measured in alternating
        /// rounds on this runner, in the same job; --paired).
        #[arg(long, value_enum, env = "COMMGATE_MODE", hide_env_values = true)]
        pub mode: Mode = Mode::Stored,

        /// Paired mode: the most rounds (3 to 100; default 10). Each round benchmarks both arms.
        #[arg(long, env = "COMMGATE_MAX_ROUNDS", hide_env_values = true, value_name = "N")]
        pub max_rounds: usize = paired::DEFAULT_MAX_ROUNDS => paired::max_rounds,

        /// Paired mode: stop undecided (collect_more_evidence) once this many minutes have
        /// passed, after the round under way (default 20; at most 1440).
        #[arg(long, env = "COMMGATE_BUDGET_MINUTES", hide_env_values = true, value_name = "MINUTES")]
        pub budget_minutes: f64 = paired::DEFAULT_BUDGET_MINUTES => paired::budget_minutes,

        /// Paired mode: a shell command run once in each arm's tree before its first round
        /// (e.g. `uv sync --frozen`, so each arm gets the libraries of its own lock file).
        #[arg(long, value_name = "CMD")]
        pub prepare: String => paired::prepare,

        /// Paired mode: a shell command that captures the arm's own training step in every
        /// round, run in the arm's tree; `{out}` is replaced by the directory its traces go to
        /// (e.g. `torchrun --nproc-per-node 8 train.py --steps 30 --profile-dir {out}`).
        #[arg(long, value_name = "CMD")]
        pub capture: String => paired::capture,

        /// Retired: traces are judged statistically against the stored trace runs. Read only to
        /// say so when a settings file still sets it.
        #[arg(skip)]
        pub trace_relative_floor: toml::Value,

        /// Retired, as `trace_relative_floor`.
        #[arg(skip)]
        pub trace_absolute_floor_ms: toml::Value,
    }
}

section! {
    /// `[bench]`: the benchmark's parameters, shared by `bench` and `check` (a
    /// `[workloads.<name>]` table overrides the sizes and counts for its workload). The sizes
    /// and counts have no default here: they depend on the backend that will run.
    #[serde(deny_unknown_fields)]
    pub struct BenchSection("bench"), specs BenchSpecs {
        /// Where to run: cuda (NCCL + cuBLAS), cpu (threads or processes, real timings without a GPU),
        /// mock (deterministic, for tests), or auto (cuda when usable, else cpu).
        #[arg(long, value_enum, env = "COMMGATE_BACKEND", hide_env_values = true)]
        pub backend: BackendChoice = BackendChoice::Auto,

        /// Ranks driven by this process (default: every visible GPU; 2 on cpu and mock; at most
        /// 1024; 1 only with --allow-single-rank). Ignored under torchrun, srun or mpirun, whose
        /// WORLD_SIZE wins.
        #[arg(long, value_name = "N")]
        pub world_size: u32 => sizes::world_size,

        /// Elements of the all-reduce buffer per rank (default 4Mi; 1Mi on cpu; at most 64 GiB).
        #[arg(long, value_name = "N")]
        pub payload_elements: u64 => sizes::payload_elements,

        /// Element type of the payload and the matmul.
        #[arg(long, value_enum)]
        pub dtype: Dtype = Dtype::Bfloat16,

        /// The matmul is DIM×DIM×DIM (default 2048; 192 on cpu; at most 65536).
        #[arg(long, value_name = "DIM")]
        pub compute_dim: u64 => sizes::compute_dim,

        /// Untimed repeats first (default 10; at most 10000).
        #[arg(long, value_name = "N")]
        pub warmup: u32 => sizes::warmup,

        /// Timed repeats of every schedule (default 200; 20 to 100000). The run judges
        /// its own P95 from 100.
        #[arg(long, value_name = "N")]
        pub repeats: u32 => sizes::repeats,

        /// Fail the run when no repeat finishes for this long (a dead rank, a hung collective;
        /// default 300, at most 86400).
        #[arg(long, value_name = "SECONDS", env = "COMMGATE_TIMEOUT", hide_env_values = true)]
        pub timeout: u64 = 300 => timeout,

        /// A label for this run, kept in the file and its default name.
        #[arg(long, value_name = "LABEL", env = "COMMGATE_RUN_LABEL", hide_env_values = true)]
        pub run_label: String = "default".to_string(),

        /// Which fleet of machines this run speaks for; baselines are kept per profile.
        #[arg(long, value_name = "NAME", env = "COMMGATE_ENVIRONMENT_PROFILE", hide_env_values = true)]
        pub environment_profile: String,

        /// Directory of the result files a run writes, each named after its time, workload and
        /// label (default: benchmarks/results).
        #[arg(long, value_name = "DIR")]
        pub results_dir: PathBuf = PathBuf::from("benchmarks/results"),

        /// Pin NCCL's algorithm (NCCL_ALGO for the benchmark): Tree, Ring, CollNetDirect,
        /// CollNetChain, NVLS, NVLSTree or PAT, any case. On cpu and mock it is only recorded.
        #[arg(long, value_name = "ALGO", value_parser = clap::value_parser!(Algo))]
        pub nccl_algo: Algo,

        /// Pin NCCL's protocol (NCCL_PROTO for the benchmark): LL, LL128 or Simple, any case. On
        /// cpu and mock it is only recorded. With --nccl-algo it is the run's software.nccl_choice.
        #[arg(long, value_name = "PROTO", value_parser = clap::value_parser!(Proto))]
        pub nccl_proto: Proto,

        /// `[bench.env]`: `NCCL_*` variables the benchmark runs with (e.g. `NCCL_BUFFSIZE =
        /// "65536"`), set for NCCL before it starts and recorded in the result's
        /// software.nccl_env; they win over the same variables in the job's environment. The CPU
        /// backend's ring cuts its all-reduce by NCCL_BUFFSIZE as NCCL does.
        #[arg(skip)]
        pub env: std::collections::BTreeMap<String, String>,
    }
}

section! {
    /// `[baseline]`: the baseline store and what `baseline update` keeps in it.
    #[serde(deny_unknown_fields)]
    pub struct BaselineSection("baseline"), specs BaselineSpecs {
        // `dir`: the store directory, `--baselines`.
        #[command(flatten)]
        pub dir: StoreDir,

        /// How many runs the baseline keeps (newest).
        #[arg(long, env = "COMMGATE_KEEP", hide_env_values = true, value_name = "N")]
        pub keep: usize = DEFAULT_KEEP => keeps_a_run,

        /// How many summaries of older runs the baseline keeps for `baseline show` (default 1000).
        #[arg(long, value_name = "N")]
        pub history_keep: usize = DEFAULT_HISTORY_KEEP => within_history,
    }
}

section! {
    /// `[baseline] dir`, alone: the store directory, for the commands that read the store.
    #[serde(transparent)]
    pub struct StoreDir("baseline"), specs StoreDirSpecs {
        /// The baseline store directory (default: baselines).
        #[arg(long = "baselines", env = "COMMGATE_BASELINES", hide_env_values = true, value_name = "DIR")]
        pub dir: PathBuf = PathBuf::from("baselines"),
    }
}

section! {
    /// `[attribute]`: how traces are read and attributed.
    #[serde(deny_unknown_fields)]
    pub struct AttributeSection("attribute"), specs AttributeSpecs {
        /// Report format.
        #[arg(long, value_enum, env = "COMMGATE_FORMAT", hide_env_values = true)]
        pub format: Format = Format::Text,

        /// Rules for the window, rounding and kernel classes: commgate's own or Holistic Trace
        /// Analysis's (to cross-check its numbers).
        #[arg(long, value_enum, env = "COMMGATE_COMPAT", hide_env_values = true)]
        pub compat: Compat = Compat::default(),

        /// Number of steps of traces that have no ProfilerStep markers (where markers delimit steps,
        /// they win and a note says the setting was ignored).
        #[arg(long, env = "COMMGATE_STEPS", hide_env_values = true, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        pub steps: u64 => at_least_one_step,

        /// A kernel-name substring that marks a custom communication kernel (repeatable), e.g.
        /// `cross_device_reduce`; `NAME=SUBSTRING` names the row its kernels are reported under
        /// (else one row per kernel family). The file's patterns come first, the flags' are added.
        #[arg(long = "comm-pattern", value_name = "[NAME=]SUBSTRING")]
        pub comm_patterns: Vec<String>,

        /// Events one trace file may hold before the read stops (exit 2); default 50 million.
        #[arg(long, env = "COMMGATE_MAX_EVENTS", hide_env_values = true, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        pub max_events: u64,

        /// Also replay each collective's transfer at this bus bandwidth (GB/s) among the fixes
        /// of "What would fix it" (`check` uses the benchmark's measured all-reduce bandwidth
        /// when this is not set).
        #[arg(long, env = "COMMGATE_BUSBW", hide_env_values = true, value_name = "GBPS")]
        pub busbw: f64 => gbps,

        /// Also replay each collective's buckets released this many µs earlier by the work they
        /// wait for (smaller buckets, or gradients ready sooner), among the fixes.
        #[arg(long, env = "COMMGATE_BUCKET_EARLIER_US", hide_env_values = true, value_name = "US")]
        pub bucket_earlier_us: f64 => positive_us,
    }
}

section! {
    /// `[thresholds]`: when attribution suggests a mitigation.
    #[serde(deny_unknown_fields)]
    pub struct ThresholdsSection("thresholds"), specs ThresholdsSpecs {
        /// Observed rank imbalance above this ratio → rebalance_ranks_or_experts.
        #[arg(long, env = "COMMGATE_IMBALANCE_RATIO", hide_env_values = true, value_name = "RATIO")]
        pub imbalance_ratio: f64 = Thresholds::default().imbalance_ratio => ratio,

        /// Overlap below this ratio (with exposed time) → increase_overlap_or_delay_sync.
        #[arg(long, env = "COMMGATE_LOW_OVERLAP_RATIO", hide_env_values = true, value_name = "RATIO")]
        pub low_overlap_ratio: f64 = Thresholds::default().low_overlap_ratio => ratio,

        /// The priority collective's exposed time per step at or below this is accepted.
        #[arg(long, env = "COMMGATE_ACCEPT_EXPOSED_MS", hide_env_values = true, value_name = "MS")]
        pub accept_exposed_ms: f64 = Thresholds::default().accept_exposed_ms => milliseconds,
    }
}

/// A limit: `why` unless `ok`.
fn unless(ok: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(why())
    }
}

fn keeps_a_run(keep: &usize) -> Result<(), String> {
    unless(*keep > 0, || format!("that would keep no runs; use 1 or more (default {DEFAULT_KEEP})"))
}

fn within_history(keep: &usize) -> Result<(), String> {
    unless(*keep <= MAX_HISTORY, || {
        format!("a store keeps at most {MAX_HISTORY} run summaries (default {DEFAULT_HISTORY_KEEP})")
    })
}

fn at_least_one_step(steps: &u64) -> Result<(), String> {
    unless(*steps > 0, || "give the number of steps traces without ProfilerStep markers hold (≥ 1)".to_string())
}

fn ratio(value: &f64) -> Result<(), String> {
    unless((0.0..=1.0).contains(value), || "it must be a ratio in 0..=1".to_string())
}

fn positive_us(value: &f64) -> Result<(), String> {
    unless(value.is_finite() && *value > 0.0 && *value <= 1e9, || {
        "it must be a number of µs above 0 and at most 1e9 (1,000 s, longer than any step)".to_string()
    })
}

/// The fastest bus bandwidth a replay takes: 10^5 GB/s (100 TB/s), past any fabric's.
const MAX_BUSBW_GBPS: f64 = 1e5;

fn gbps(value: &f64) -> Result<(), String> {
    unless(value.is_finite() && *value > 0.0 && *value <= MAX_BUSBW_GBPS, || {
        "it must be a bus bandwidth in GB/s above 0 and at most 100000 (100 TB/s, past any fabric)".to_string()
    })
}

fn milliseconds(value: &f64) -> Result<(), String> {
    unless(value.is_finite() && *value >= 0.0, || "it must be a finite number of ms ≥ 0".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_read_the_flag_and_variable_from_clap() {
        let key = CompareSection::specs().min_effect.key;
        assert_eq!((key.flag, key.env), (Some("--min-effect"), Some("COMMGATE_MIN_EFFECT")));
        assert_eq!(BenchSection::specs().repeats.key.env, None);
        let dir = BaselineSection::specs().dir.key;
        assert_eq!((dir.flag, dir.env), (Some("--baselines"), Some("COMMGATE_BASELINES")));
        let retired = CheckSection::specs().trace_relative_floor.key;
        assert_eq!((retired.flag, retired.env), (None, None), "a key only the file sets");
        assert_eq!(AttributeSection::specs().comm_patterns.key.flag, Some("--comm-pattern"));
    }

    #[test]
    fn defaults_are_within_their_limits() {
        let b = BenchSection::specs();
        assert_eq!(b.timeout.within(&b.timeout.default_value()), Ok(()));
        let c = CompareSection::specs();
        assert_eq!(c.min_effect.within(&c.min_effect.default_value()), Ok(()));
        assert_eq!(c.resamples.within(&c.resamples.default_value()), Ok(()));
        let k = BaselineSection::specs();
        assert_eq!(k.keep.within(&k.keep.default_value()), Ok(()));
        assert_eq!(k.history_keep.within(&k.history_keep.default_value()), Ok(()));
        let t = ThresholdsSection::specs();
        for spec in [&t.imbalance_ratio, &t.low_overlap_ratio, &t.accept_exposed_ms] {
            assert_eq!(spec.within(&spec.default_value()), Ok(()), "{}", spec.key);
        }
    }
}
