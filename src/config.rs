//! Typed, validated settings, resolved once: flags > `COMMGATE_*` environment (both through
//! clap) > `commgate.toml` > defaults. Each setting is declared once, in [`crate::cli::sections`] (its flag,
//! variable, file key, default and limit); everything after this module sees only domain types.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use serde::Deserialize;

use crate::cli::{AttributeArgs, BenchArgs, BenchFlags, CheckArgs, Cli, CompareArgs, UpdateArgs};
use commgate_bench::origin::{LimitError, Setting};
use commgate_bench::settings::environment_profile;
use commgate_bench::settings::Declared;
use commgate_bench::settings::{BenchRequest, RunOptions};
use commgate_bench::sizes::Sizes;
use commgate_bench::workload::IdChoice;
use commgate_gate::check::CheckOptions;
use commgate_gate::compare::CompareOptions;
use commgate_gate::decide::mitigation::Thresholds;
use commgate_github::CommentPolicy;
use commgate_report::Format;
use commgate_trace::attribute::whatif::{Busbw, WhatIfOptions};
use commgate_trace::attribute::{AttributeOptions, Compat, StepsSetting};
use commgate_trace::classify::CommPattern;

pub const DEFAULT_FILE: &str = "commgate.toml";

mod origin;
pub(crate) mod workloads;
pub use crate::cli::sections::{
    AttributeSection, BaselineSection, BenchSection, CheckSection, CompareSection, StoreDir, ThresholdsSection,
};
pub use origin::{parse_args, ArgsError, Provenance};
pub use workloads::{Collective, WorkloadTable};

/// `commgate.toml`, as written. Unknown keys and unknown choices are errors (naming the line and
/// the accepted values) so that typos do not pass silently.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub attribute: AttributeSection,
    #[serde(default)]
    pub thresholds: ThresholdsSection,
    #[serde(default)]
    pub compare: CompareSection,
    #[serde(default)]
    pub baseline: BaselineSection,
    #[serde(default)]
    pub bench: BenchSection,
    #[serde(default)]
    pub check: CheckSection,
    /// `[workloads.<name>]`: the workloads `bench` runs, in name order (none: the one of
    /// `[bench]` and the flags).
    #[serde(default)]
    pub workloads: BTreeMap<String, WorkloadTable>,
    /// Where the values came from, for error messages (not a key of the file).
    #[serde(skip)]
    pub provenance: Provenance,
}

/// The most a settings file may hold: far beyond any real one.
const MAX_SETTINGS_BYTES: u64 = 1 << 20;

/// Reads the settings file: `--config` (which must exist), else the nearest `commgate.toml` in
/// the working directory or above it, up to the repository's root (the first directory with a
/// `.git`), as cargo and git find theirs. The result remembers the file and the `COMMGATE_*`
/// variables clap read (see [`parse_args`]), so that a bad value is reported where it was set.
/// A file found above the working directory has its relative paths (store, results, report)
/// taken from its own directory, so that `check` run in `docs/` uses the repository's store.
pub fn load_file(cli: &Cli) -> Result<FileConfig> {
    let (path, found_above) = match cli.config.as_deref() {
        Some(p) => (p.to_path_buf(), None),
        None => match find_upward(Path::new(".")) {
            Some((path, dir)) => (path, dir),
            None => {
                return Ok(FileConfig { provenance: Provenance::new(None, &cli.from_env), ..FileConfig::default() })
            }
        },
    };
    let named = match cli.from_env.iter().find(|(var, _)| var == "COMMGATE_CONFIG") {
        Some((var, value)) => format!("{var}={value}"),
        None => path.display().to_string(),
    };
    // Through `input`: a regular file only, read once and bounded (a committed `commgate.toml`
    // link to /dev/zero or a pipe must not hang or fill memory).
    let text = commgate_core::input::read_text(&path, MAX_SETTINGS_BYTES)
        .map_err(|e| anyhow::anyhow!("{named}: cannot read the settings file: it {e}"))?;
    let mut file = parse_file_at(&text, Some(&path))?;
    if let Some(dir) = found_above {
        file.rebase(&dir);
    }
    file.provenance = Provenance::new(Some((path, text)), &cli.from_env);
    Ok(file)
}

/// The nearest [`DEFAULT_FILE`] from `start` upwards, stopping at the first directory that holds
/// `.git` (the repository's root) or at the filesystem's root: its path, and its directory when
/// that is above `start` (`None` for `start` itself, whose paths need no rebasing).
pub fn find_upward(start: &Path) -> Option<(PathBuf, Option<PathBuf>)> {
    if start.join(DEFAULT_FILE).exists() {
        let path = if start == Path::new(".") { PathBuf::from(DEFAULT_FILE) } else { start.join(DEFAULT_FILE) };
        return Some((path, None));
    }
    if start.join(".git").exists() {
        return None;
    }
    let absolute = std::fs::canonicalize(start).ok()?;
    for dir in absolute.ancestors().skip(1) {
        let candidate = dir.join(DEFAULT_FILE);
        if candidate.is_file() {
            return Some((candidate, Some(dir.to_path_buf())));
        }
        if dir.join(".git").exists() {
            return None;
        }
    }
    None
}

impl FileConfig {
    /// Makes the file's relative paths, and the defaults of the paths it leaves unset (the
    /// store, the results directory), relative to `dir` (the file's own directory).
    pub(crate) fn rebase(&mut self, dir: &Path) {
        let rebase = |p: &mut Option<PathBuf>, default: Option<PathBuf>| {
            if p.is_none() {
                *p = default;
            }
            if let Some(path) = p.as_mut().filter(|p| p.is_relative()) {
                *path = dir.join(&*path);
            }
        };
        rebase(&mut self.bench.results_dir, Some(default_results_dir()));
        rebase(&mut self.check.output, None);
        let store = self.baseline.dir.get_or_insert_with(Default::default);
        rebase(&mut store.dir, Some(default_store_dir()));
    }
}

/// Settings text read from somewhere other than the working tree (the base commit's
/// `commgate.toml`); errors and setting origins name it `label` (`commgate.toml@1a2b3c4d5e6f`).
/// `from_env` is [`Cli::from_env`]: the `COMMGATE_*` variables that gave values.
pub fn file_from_text(from_env: &[(String, String)], label: &Path, text: String) -> Result<FileConfig> {
    let mut file = parse_file_at(&text, Some(label))?;
    file.provenance = Provenance::new(Some((label.to_path_buf(), text)), from_env);
    Ok(file)
}

/// Parses `commgate.toml` text (errors say `line:column`).
pub fn parse_file(text: &str) -> Result<FileConfig> {
    parse_file_at(text, None)
}

/// Parses settings text; errors name `path:line:column` (1-based) of the offending key or
/// value, in words without serde's or Rust's jargon.
fn parse_file_at(text: &str, path: Option<&Path>) -> Result<FileConfig> {
    toml::from_str(text).map_err(|e| {
        let message = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
        let message = commgate_core::input::plain_message(&message);
        let place = match e.span() {
            Some(span) => {
                let (line, column) = origin::line_column(text, span.start);
                format!("{line}:{column}")
            }
            None => "1:1".to_string(),
        };
        let file = path.map_or_else(|| "settings".to_string(), |p| p.display().to_string());
        anyhow::anyhow!("{file}:{place}: {message}")
    })
}

/// Settings for `commgate attribute`.
#[derive(Debug, Clone, PartialEq)]
pub struct AttributeConfig {
    pub paths: Vec<PathBuf>,
    pub format: Format,
    pub output: Option<PathBuf>,
    /// Write a partial file there instead of a report.
    pub partial: Option<PathBuf>,
    /// Text tables with every column.
    pub width: commgate_report::Width,
    pub options: AttributeOptions,
    /// The mitigation rules' thresholds, for the mitigation and the follow-up.
    pub thresholds: Thresholds,
}

pub fn attribute(args: AttributeArgs, file: &FileConfig) -> Result<AttributeConfig> {
    let specs = AttributeSection::specs();
    let a = args.settings.clone().or(&file.attribute);
    let format = specs.format.or_default(a.format);
    let compat = specs.compat.or_default(a.compat);
    let thresholds = thresholds(args.thresholds, file)?;
    let steps = steps(args.settings.steps, file)?;
    let mut raw_patterns = file.attribute.comm_patterns.clone().unwrap_or_default();
    raw_patterns.extend(args.settings.comm_patterns.unwrap_or_default());
    let comm_patterns = comm_patterns(&raw_patterns)?;
    Ok(AttributeConfig {
        paths: args.paths,
        format,
        output: args.output,
        partial: args.partial,
        width: commgate_report::Width::from_flag(args.wide),
        options: AttributeOptions {
            compat,
            steps,
            comm_patterns,
            max_events: a.max_events,
            what_if: what_if(
                file.setting(&specs.busbw, args.settings.busbw, file.attribute.busbw)?,
                file.setting(
                    &specs.bucket_earlier_us,
                    args.settings.bucket_earlier_us,
                    file.attribute.bucket_earlier_us,
                )?
                .map(|s| s.value),
            ),
        },
        thresholds,
    })
}

/// Settings for `commgate compare`.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareConfig {
    pub baseline: PathBuf,
    pub current: PathBuf,
    pub format: Format,
    /// Text tables with every column.
    pub width: commgate_report::Width,
    pub output: Option<PathBuf>,
    pub options: CompareOptions,
}

pub fn compare(args: CompareArgs, file: &FileConfig) -> Result<CompareConfig> {
    let format = CompareSection::specs().format.or_default(args.settings.format.or(file.compare.format));
    Ok(CompareConfig {
        baseline: args.baseline,
        current: args.current,
        width: commgate_report::Width::from_flag(args.wide),
        format,
        output: args.output,
        options: compare_options(args.settings, file)?,
    })
}

/// The comparison's options: `args` (the flags; none for `check`) over `[compare]`.
fn compare_options(args: CompareSection, file: &FileConfig) -> Result<CompareOptions, LimitError> {
    let (specs, f) = (CompareSection::specs(), &file.compare);
    Ok(CompareOptions {
        min_effect: file.value(&specs.min_effect, args.min_effect, f.min_effect)?,
        resamples: file.value(&specs.resamples, args.resamples, f.resamples)?,
        seed: specs.seed.or_default(args.seed.or(f.seed)),
        ..CompareOptions::default()
    })
}

/// Benchmark runs `check --runs` judges together per workload: past this the gate's time grows
/// linearly while the current side's spread no longer narrows enough to change a verdict.
pub const MAX_RUNS: u32 = 20;

/// `check --runs`: how many times each workload is benchmarked and judged together.
pub fn runs(value: &u32) -> Result<(), String> {
    if *value == 0 || *value > MAX_RUNS {
        return Err(format!(
            "give 1 to {MAX_RUNS} runs per workload (1 is the default): each run is one full benchmark, \
             judged together as the current side"
        ));
    }
    Ok(())
}

/// Settings for `commgate check`.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckConfig {
    /// Results to judge (empty: run the workloads).
    pub result: Vec<PathBuf>,
    /// The workloads to run when no result is given, as `bench` declares them.
    pub workloads: Vec<Declared>,
    /// Benchmark runs per workload (`--runs`, `[check] runs`), judged together; 1 with `--result`
    /// (the files are the runs).
    pub runs: u32,
    pub options: CheckOptions,
    pub comment: CommentPolicy,
    pub format: Format,
    /// Text tables with every column.
    pub width: commgate_report::Width,
    pub output: Option<PathBuf>,
    /// Stored baselines, or base and head in rounds (`--paired`, `[check] mode`).
    pub mode: commgate_gate::check::Mode,
    pub paired: PairedSettings,
}

/// The paired mode's settings (`[check]`; read in either mode, so a bad value is refused
/// whichever runs).
#[derive(Debug, Clone, PartialEq)]
pub struct PairedSettings {
    pub max_rounds: usize,
    pub budget_minutes: f64,
    /// Run once in each arm's tree before its first round.
    pub prepare: Option<String>,
    /// Run in each arm's tree in every round, `{out}` its trace directory.
    pub capture: Option<String>,
}

pub fn check(args: CheckArgs, file: &FileConfig, env: impl Fn(&str) -> Option<String>) -> Result<CheckConfig> {
    let specs = CheckSection::specs();
    let runs_arg = args.settings.runs;
    let runs = file.value(&specs.runs, runs_arg, file.check.runs)?;
    // The file's value is the measuring gate's; given result files are the runs.
    if runs > 1 && !args.result.is_empty() && runs_arg.is_some() {
        bail!(
            "{} with --result: the result files are the runs (pass several files of one workload to judge \
             them together); drop --runs",
            file.origin(specs.runs.key, true, &runs)
        );
    }
    let runs = if args.result.is_empty() { runs } else { 1 };
    let savings_arg = args.settings.fail_on_savings_ms;
    let paired = PairedSettings {
        max_rounds: file.value(&specs.max_rounds, args.settings.max_rounds, file.check.max_rounds)?,
        budget_minutes: file.value(&specs.budget_minutes, args.settings.budget_minutes, file.check.budget_minutes)?,
        prepare: file
            .setting(&specs.prepare, args.settings.prepare.clone(), file.check.prepare.clone())?
            .map(|s| s.value),
        capture: file
            .setting(&specs.capture, args.settings.capture.clone(), file.check.capture.clone())?
            .map(|s| s.value),
    };
    let mode = if args.paired {
        commgate_gate::check::Mode::Paired
    } else {
        specs.mode.or_default(args.settings.mode.or(file.check.mode))
    };
    let c = args.settings.or(&file.check);
    let fail_on = specs.fail_on.or_default(c.fail_on);
    let comment = specs.comment.or_default(c.comment);
    let format = specs.format.or_default(c.format);
    for (spec, set) in [
        (&specs.trace_relative_floor, &c.trace_relative_floor),
        (&specs.trace_absolute_floor_ms, &c.trace_absolute_floor_ms),
    ] {
        if let Some(value) = set {
            bail!(
                "{}: the fixed trace floors were retired: traces are judged with the benchmark's statistics \
                 against the stored trace runs (min_effect in [compare] sets the smallest change); remove the key",
                file.origin(spec.key, false, value)
            );
        }
    }
    Ok(CheckConfig {
        runs,
        width: commgate_report::Width::from_flag(args.wide),
        result: args.result,
        workloads: workloads::declare(
            BenchArgs {
                flags: args.bench,
                dry_run: false,
                output: None,
                workload: args.workload,
                payload_sizes: args.payload_sizes,
            },
            file,
            &env,
        )?,
        options: CheckOptions {
            baselines: store_dir(&args.store, file),
            traces: args.traces,
            trace_name: args.trace_name,
            attribute: attribute_defaults(file)?,
            thresholds: thresholds(ThresholdsSection::default(), file)?,
            compare: compare_options(CompareSection::default(), file)?,
            fail_on,
            fail_on_savings_ms: file
                .setting(&specs.fail_on_savings_ms, savings_arg, file.check.fail_on_savings_ms)?
                .map(|s| s.value),
            base: None,
        },
        comment,
        format,
        output: c.output,
        mode,
        paired,
    })
}

/// The baseline store directory: `--baselines` (or its variable), else `[baseline] dir`, else
/// the default.
pub fn store_dir(flag: &StoreDir, file: &FileConfig) -> PathBuf {
    let from_file = file.baseline.dir.as_ref().and_then(|d| d.dir.clone());
    StoreDir::specs().dir.or_default(flag.dir.clone().or(from_file))
}

/// The store directory when nothing names one (`init` scaffolds it).
pub fn default_store_dir() -> PathBuf {
    StoreDir::specs().dir.default_value()
}

/// Where result files go unless `bench.results_dir` says otherwise.
pub fn default_results_dir() -> PathBuf {
    BenchSection::specs().results_dir.default_value()
}

/// Attribution options from `commgate.toml` alone (for commands without attribute flags).
pub fn attribute_defaults(file: &FileConfig) -> Result<AttributeOptions> {
    Ok(AttributeOptions {
        compat: Compat::Default,
        steps: steps(None, file)?,
        comm_patterns: comm_patterns(file.attribute.comm_patterns.as_deref().unwrap_or_default())?,
        max_events: file.attribute.max_events,
        what_if: what_if(
            file.setting(&AttributeSection::specs().busbw, None, file.attribute.busbw)?,
            file.setting(&AttributeSection::specs().bucket_earlier_us, None, file.attribute.bucket_earlier_us)?
                .map(|s| s.value),
        ),
    })
}

/// The what-if's options: a bus bandwidth to replay every collective's transfer at, and where
/// it was set.
fn what_if(busbw: Option<Setting<f64>>, earlier_us: Option<f64>) -> WhatIfOptions {
    WhatIfOptions { busbw: busbw.map(|s| Busbw { gbps: s.value, set_by: s.written(), collective: None }), earlier_us }
}

/// The thresholds in use, `args` over `[thresholds]`, each checked and named where it was set.
fn thresholds(args: ThresholdsSection, file: &FileConfig) -> Result<Thresholds> {
    let (specs, t) = (ThresholdsSection::specs(), &file.thresholds);
    Ok(Thresholds {
        imbalance_ratio: file.value(&specs.imbalance_ratio, args.imbalance_ratio, t.imbalance_ratio)?,
        low_overlap_ratio: file.value(&specs.low_overlap_ratio, args.low_overlap_ratio, t.low_overlap_ratio)?,
        accept_exposed_ms: file.value(&specs.accept_exposed_ms, args.accept_exposed_ms, t.accept_exposed_ms)?,
    })
}

/// `--steps` (clap checked its range), else `attribute.steps` (checked here), with how it was set.
/// The communication patterns, each `SUBSTRING` or `NAME=SUBSTRING`; empty ones are skipped.
fn comm_patterns(raw: &[String]) -> Result<Vec<CommPattern>> {
    raw.iter()
        .filter(|p| !p.is_empty())
        .map(|p| {
            CommPattern::parse(p).map_err(|why| {
                anyhow::anyhow!(
                    "the communication pattern `{}` (--comm-pattern, attribute.comm_patterns) {why}",
                    p.escape_debug()
                )
            })
        })
        .collect()
}

fn steps(arg: Option<u64>, file: &FileConfig) -> Result<Option<StepsSetting>> {
    let spec = &AttributeSection::specs().steps;
    if let Some(count) = arg {
        return Ok(Some(StepsSetting { count, set_by: file.origin(spec.key, true, &count) }));
    }
    let Some(count) = file.attribute.steps else { return Ok(None) };
    let count = file.value(spec, None, Some(count))?;
    let set_by = match &file.provenance.file {
        Some((path, _)) => format!("steps = {count} ({})", path.display()),
        None => format!("steps = {count}"),
    };
    Ok(Some(StepsSetting { count, set_by }))
}

/// Settings for `commgate baseline update`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateConfig {
    pub from: Vec<PathBuf>,
    pub traces: Vec<PathBuf>,
    pub name: String,
    pub environment_profile: Option<String>,
    pub workload_id: String,
    pub dir: PathBuf,
    pub keep: usize,
    pub history_keep: usize,
}

pub fn update(args: UpdateArgs, file: &FileConfig) -> Result<UpdateConfig> {
    let (specs, b, f) = (BaselineSection::specs(), args.baseline, &file.baseline);
    let keep = file.value(&specs.keep, b.keep, f.keep)?;
    let history_keep = file.value(&specs.history_keep, b.history_keep, f.history_keep)?;
    if args.from.len() > 1 && !args.traces.is_empty() {
        bail!(
            "baseline update --traces with {} --from files: the trace run would go into each of their baseline \
             files; add it with one --from (or with --environment-profile and --workload-id)",
            args.from.len()
        );
    }
    // The profile of a trace run without --from: the flag, else `[bench] environment_profile`
    // (the one `bench` and `check` use), checked as they check it.
    let environment_profile = file
        .setting(
            &BenchSection::specs().environment_profile,
            args.environment_profile,
            file.bench.environment_profile.clone(),
        )?
        .map(environment_profile)
        .transpose()?;
    if args.from.is_empty() && environment_profile.is_none() {
        bail!(
            "baseline update --traces without --from needs an environment profile (which baseline file to add them \
             to): pass --environment-profile NAME, or set environment_profile under [bench] in commgate.toml"
        );
    }
    Ok(UpdateConfig {
        from: args.from,
        traces: args.traces,
        name: args.name,
        environment_profile,
        workload_id: args.workload_id,
        dir: store_dir(&b.dir.unwrap_or_default(), file),
        keep,
        history_keep,
    })
}

/// Settings for `commgate bench`: the workloads to run, in order, each flags > env >
/// `[workloads.<name>]` > `[bench]`; what depends on the backend that will run (its default
/// sizes, the world size, a derived id) is left for [`commgate_bench::settings::resolve_all`].
pub fn bench(args: BenchArgs, file: &FileConfig, env: impl Fn(&str) -> Option<String>) -> Result<Vec<Declared>> {
    workloads::declare(args, file, env)
}

/// The benchmark flags `bench` and `check` share, each value checked against the limit its flag
/// declares ([`commgate_bench::sizes`] for the sizes) with where it came from, before anything is
/// probed or run. `env` reads `CI` (no progress bar there).
pub fn bench_flags(args: BenchFlags, file: &FileConfig, env: impl Fn(&str) -> Option<String>) -> Result<BenchRequest> {
    let (specs, s, f) = (BenchSection::specs(), args.settings, &file.bench);
    let timeout = Duration::from_secs(file.value(&specs.timeout, s.timeout, f.timeout)?);
    let environment_profile = file
        .setting(&specs.environment_profile, s.environment_profile, f.environment_profile.clone())?
        .map(environment_profile)
        .transpose()?;
    let ci = env("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
    let request = BenchRequest {
        backend: specs.backend.or_default(s.backend.or(f.backend)),
        sizes: Sizes {
            world_size: file.setting(&specs.world_size, s.world_size, f.world_size)?,
            payload_elements: file.setting(&specs.payload_elements, s.payload_elements, f.payload_elements)?,
            compute_dim: file.setting(&specs.compute_dim, s.compute_dim, f.compute_dim)?,
            warmup: file.setting(&specs.warmup, s.warmup, f.warmup)?,
            repeats: file.setting(&specs.repeats, s.repeats, f.repeats)?,
        },
        dtype: specs.dtype.or_default(s.dtype.or(f.dtype)),
        allow_single_rank: args.allow_single_rank,
        seed: args.seed,
        workload: IdChoice::Legacy,
        run: RunOptions {
            timeout,
            run_label: specs.run_label.or_default(s.run_label.or_else(|| f.run_label.clone())),
            environment_profile,
            output: None,
            results_dir: specs.results_dir.or_default(s.results_dir.or_else(|| f.results_dir.clone())),
            progress: !args.quiet && !ci && std::io::IsTerminal::is_terminal(&std::io::stderr()),
            dry_run: false,
            nccl: commgate_bench::nccl::Tuning {
                algo: s.nccl_algo.or(f.nccl_algo),
                proto: s.nccl_proto.or(f.nccl_proto),
            },
            env: commgate_bench::settings::nccl_env(f.env.as_ref().unwrap_or(&Default::default())).map_err(
                |(name, why)| {
                    let shown = if name.is_empty() { String::new() } else { format!(".{}", name.escape_debug()) };
                    anyhow::anyhow!("{}: bench.env{shown}: {why}", file.path().display())
                },
            )?,
        },
    };
    Ok(request)
}

/// The subcommand `commgate LINE…` parses into (for this module's tests and its children's).
#[cfg(test)]
fn parsed(line: &[&str]) -> crate::cli::Command {
    let full = std::iter::once("commgate").chain(line.iter().copied());
    <Cli as clap::Parser>::try_parse_from(full).expect("parses").command
}

/// `commgate bench LINE…`'s arguments.
#[cfg(test)]
fn bench_args(line: &[&str]) -> BenchArgs {
    match parsed(&[&["bench"], line].concat()) {
        crate::cli::Command::Bench(a) => a,
        other => panic!("not bench: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &[&str]) -> AttributeArgs {
        match parsed(&[&["attribute"], line].concat()) {
            crate::cli::Command::Attribute(a) => a,
            other => panic!("not attribute: {other:?}"),
        }
    }

    #[test]
    fn flags_beat_file_beats_defaults() {
        let file = parse_file(
            "[attribute]\nformat = \"json\"\ncompat = \"hta\"\ncomm_patterns = [\"cross_device_reduce\"]\n\
             [thresholds]\naccept_exposed_ms = 2.5\nimbalance_ratio = 0.1\n",
        )
        .expect("valid");
        let c = attribute(args(&["t.json", "--format", "markdown", "--imbalance-ratio", "0.3"]), &file).expect("ok");
        assert_eq!(c.format, Format::Markdown);
        assert_eq!(c.options.compat, Compat::Hta);
        assert_eq!(c.thresholds.imbalance_ratio, 0.3);
        assert_eq!(c.thresholds.accept_exposed_ms, 2.5);
        assert_eq!(c.thresholds.low_overlap_ratio, 0.30);
        assert_eq!(c.options.comm_patterns, [CommPattern::parse("cross_device_reduce").unwrap()]);
        let c = attribute(args(&["t.json"]), &FileConfig::default()).expect("ok");
        assert_eq!((c.format, c.options.compat), (Format::Text, Compat::Default));
    }

    #[test]
    fn bad_settings_are_named_where_they_were_set() {
        let e = parse_file("[thresholds]\naccept_exposed = 1\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "settings:2:1: unknown key `accept_exposed`; expected one of imbalance_ratio, low_overlap_ratio, accept_exposed_ms"
        );
        let e = attribute(args(&["t.json", "--low-overlap-ratio", "1.5"]), &FileConfig::default()).unwrap_err();
        assert_eq!(e.to_string(), "--low-overlap-ratio 1.5: it must be a ratio in 0..=1");
        // An unknown choice is refused as the file is read, naming the value and the choices.
        let e = parse_file("[attribute]\nformat = \"html\"\n").unwrap_err();
        assert_eq!(e.to_string(), "settings:2:10: unknown value `html`; expected one of text, json, markdown");
        let e = parse_file("[bench]\nworld_size = \"x\"\n").unwrap_err();
        assert_eq!(e.to_string(), "settings:2:14: found the string \"x\", expected a whole number ≥ 0");
        // A value out of range in the file: the file, the key's line and column, the value.
        let text = "# tuned\n[thresholds]\n\n  imbalance_ratio = 1.5\n[attribute]\nsteps = 0\n";
        let mut file = parse_file(text).expect("valid TOML");
        file.provenance = Provenance::new(Some((PathBuf::from("other.toml"), text.to_string())), &[]);
        let e = attribute(args(&["t.json"]), &file).unwrap_err();
        assert_eq!(e.to_string(), "other.toml:4:3: thresholds.imbalance_ratio = 1.5: it must be a ratio in 0..=1");
        let e = attribute_defaults(&FileConfig { thresholds: ThresholdsSection::default(), ..file }).unwrap_err();
        assert!(e.to_string().starts_with("other.toml:6:1: attribute.steps = 0: "), "{e}");
    }

    #[test]
    fn a_steps_setting_remembers_how_it_was_set() {
        let text = "[attribute]\nsteps = 4\n";
        let mut file = parse_file(text).expect("valid");
        file.provenance = Provenance::new(Some((PathBuf::from("commgate.toml"), text.to_string())), &[]);
        let steps = |line: &[&str]| attribute(args(line), &file).expect("ok").options.steps.expect("set");
        assert_eq!(steps(&["t.json"]).set_by, "steps = 4 (commgate.toml)");
        assert_eq!(steps(&["t.json", "--steps", "3"]), StepsSetting { count: 3, set_by: "--steps 3".into() });
    }
}

#[cfg(test)]
mod compare_tests {
    use super::*;

    #[test]
    fn compare_and_update_settings_resolve_and_validate() {
        let file =
            parse_file("[compare]\nmin_effect = 0.05\nseed = 9\n[baseline]\ndir = \"b\"\nkeep = 3\n").expect("valid");
        let crate::cli::Command::Compare(args) =
            parsed(&["compare", "--baseline", "b.json", "--current", "c.json", "--seed", "4"])
        else {
            panic!("compare")
        };
        let c = compare(args, &file).expect("ok");
        assert_eq!((c.options.min_effect, c.options.seed, c.options.resamples), (0.05, 4, 1000));
        let crate::cli::Command::Compare(args) =
            parsed(&["compare", "--baseline", "b", "--current", "c", "--min-effect", "1.5"])
        else {
            panic!("compare")
        };
        assert!(compare(args, &file).unwrap_err().to_string().contains("--min-effect 1.5"));
        let crate::cli::Command::Baseline(crate::cli::BaselineCommand::Update(args)) =
            parsed(&["baseline", "update", "--from", "r.json"])
        else {
            panic!("update")
        };
        let u = update(args, &file).expect("ok");
        assert_eq!((u.dir, u.keep), (PathBuf::from("b"), 3));
    }
}

#[cfg(test)]
mod bench_tests {
    use super::*;
    use bench_args as args;
    use commgate_bench::settings::{BackendKind, BenchSettings};
    use commgate_bench::Dtype;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    /// The one workload a run without tables or `--payload-sizes` declares.
    fn only(declared: Result<Vec<Declared>>) -> BenchRequest {
        let mut all = declared.expect("ok");
        assert_eq!(all.len(), 1);
        all.remove(0).request
    }

    /// Resolves a request on a machine with `gpus` visible GPUs (`None`: no CUDA at all).
    fn resolved(request: BenchRequest, gpus: Option<u32>) -> BenchSettings {
        request.resolve(None, || gpus.ok_or("libcuda.so.1 was not found")).expect("within limits").0
    }

    #[test]
    fn defaults_follow_the_backend_that_will_run() {
        let gpu = resolved(only(bench(args(&["--backend", "mock"]), &FileConfig::default(), no_env)), None);
        assert_eq!((gpu.plan.payload_elements, gpu.plan.compute_dim, gpu.plan.repeats), (4 << 20, 2048, 200));
        assert_eq!(gpu.plan.dtype, Dtype::Bfloat16);
        let auto_on_cpu = resolved(only(bench(args(&[]), &FileConfig::default(), no_env)), None);
        assert_eq!(auto_on_cpu.backend, BackendKind::Cpu);
        assert_eq!((auto_on_cpu.plan.payload_elements, auto_on_cpu.plan.repeats), (1 << 20, 200));
        let file = parse_file("[bench]\nrepeats = 150\ndtype = \"float32\"\n").expect("valid");
        let s = resolved(only(bench(args(&["--backend", "mock", "--repeats", "300"]), &file, no_env)), None);
        assert_eq!((s.plan.repeats, s.plan.dtype), (300, Dtype::Float32));
        let ci =
            only(bench(args(&["--backend", "mock"]), &FileConfig::default(), |k| (k == "CI").then(|| "true".into())));
        assert!(!ci.run.progress);
    }

    #[test]
    fn values_out_of_range_are_refused_before_any_probe() {
        let e = bench(args(&["--warmup", "4294967295"]), &FileConfig::default(), no_env).unwrap_err();
        assert!(e.to_string().starts_with("--warmup 4294967295: "), "{e}");
        let e = bench(args(&["--world-size", "0"]), &FileConfig::default(), no_env).unwrap_err();
        assert!(e.to_string().starts_with("--world-size 0: "), "{e}");
    }

    #[test]
    fn bad_bench_settings_are_named() {
        let e = bench(args(&["--backend", "mock", "--repeats", "0"]), &FileConfig::default(), no_env);
        assert!(e.unwrap_err().to_string().starts_with("--repeats 0: at least 20 repeats"));
        let file = file_from_text(&[], Path::new("ci/gate.toml"), "[bench]\nwarmup = 99999\n".into()).expect("valid");
        let e = bench(args(&["--backend", "mock"]), &file, no_env).unwrap_err();
        assert!(e.to_string().starts_with("ci/gate.toml:2:1: bench.warmup = 99999: at most 10000"), "{e}");
        let mut a = args(&["--backend", "mock"]);
        a.flags.settings.environment_profile = Some("../x".into());
        let from_env = [("COMMGATE_ENVIRONMENT_PROFILE".to_string(), "../x".to_string())];
        let file = FileConfig { provenance: Provenance::new(None, &from_env), ..FileConfig::default() };
        let e = bench(a, &file, no_env).unwrap_err();
        assert!(e.to_string().starts_with("COMMGATE_ENVIRONMENT_PROFILE=\"../x\": "), "{e}");
        let file = parse_file("[compare]\nresamples = 5\n").expect("valid");
        let crate::cli::Command::Check(c) = parsed(&["check"]) else { panic!("check") };
        let e = check(*c, &file, no_env).unwrap_err();
        assert!(e.to_string().starts_with("commgate.toml: compare.resamples = 5: "), "{e}");
        let e = parse_file("[bench]\nbackend = \"tpu\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("tpu"), "{e:#}");
    }
}
