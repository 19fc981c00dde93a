//! Typed, validated settings, resolved once: flags > `COMMGATE_*` environment (both through
//! clap) > `commgate.toml` > defaults. Everything after this module sees only domain types.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde::Deserialize;

use crate::baseline::history::MAX_HISTORY;
use crate::baseline::{DEFAULT_HISTORY_KEEP, DEFAULT_KEEP};
use crate::bench::limits;
use crate::bench::settings::{BackendChoice, BenchRequest, RunOptions};
use crate::bench::workload::{Declared, IdChoice};
use crate::bench::Dtype;
use crate::check::CheckOptions;
use crate::cli::{AttributeArgs, BenchArgs, BenchFlags, CheckArgs, Cli, CompareArgs, UpdateArgs};
use crate::compare::CompareOptions;
use crate::decide::mitigation::Thresholds;
use crate::decide::FailOn;
use crate::github::CommentPolicy;
use crate::report::Format;
use crate::trace::attribute::{AttributeOptions, Compat, StepsSetting};

pub const DEFAULT_FILE: &str = "commgate.toml";

mod origin;
mod workloads;
use origin::{key, ACCEPT_EXPOSED_MS, HISTORY_KEEP, IMBALANCE_RATIO, KEEP, LOW_OVERLAP_RATIO, STEPS};
pub use origin::{parse_args, ArgsError, Provenance};
pub use workloads::{Collective, WorkloadTable};

/// `commgate.toml`, as written. Unknown keys and unknown choices are errors (naming the line and
/// the accepted values) so that typos do not pass silently.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub attribute: AttributeFile,
    #[serde(default)]
    pub thresholds: ThresholdsFile,
    #[serde(default)]
    pub compare: CompareFile,
    #[serde(default)]
    pub baseline: BaselineFileConfig,
    #[serde(default)]
    pub bench: BenchFile,
    #[serde(default)]
    pub check: CheckFile,
    /// `[workloads.<name>]`: the workloads `bench` runs, in name order (none: the one of
    /// `[bench]` and the flags).
    #[serde(default)]
    pub workloads: BTreeMap<String, WorkloadTable>,
    /// Where the values came from, for error messages (not a key of the file).
    #[serde(skip)]
    pub provenance: Provenance,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckFile {
    pub fail_on: Option<FailOn>,
    pub comment: Option<CommentPolicy>,
    pub format: Option<Format>,
    pub output: Option<PathBuf>,
    /// Retired: traces are judged statistically against the stored trace runs. Read only to
    /// say so when a settings file still sets it.
    pub trace_relative_floor: Option<toml::Value>,
    /// Retired, as `trace_relative_floor`.
    pub trace_absolute_floor_ms: Option<toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchFile {
    pub backend: Option<BackendChoice>,
    pub world_size: Option<u32>,
    pub payload_elements: Option<u64>,
    pub dtype: Option<Dtype>,
    pub compute_dim: Option<u64>,
    pub warmup: Option<u32>,
    pub repeats: Option<u32>,
    pub timeout: Option<u64>,
    pub run_label: Option<String>,
    pub environment_profile: Option<String>,
    pub results_dir: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompareFile {
    pub format: Option<Format>,
    pub min_effect: Option<f64>,
    pub resamples: Option<usize>,
    pub seed: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineFileConfig {
    pub dir: Option<PathBuf>,
    pub keep: Option<usize>,
    pub history_keep: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttributeFile {
    pub format: Option<Format>,
    pub compat: Option<Compat>,
    pub steps: Option<u64>,
    #[serde(default)]
    pub comm_patterns: Vec<String>,
    pub max_events: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThresholdsFile {
    pub imbalance_ratio: Option<f64>,
    pub low_overlap_ratio: Option<f64>,
    pub accept_exposed_ms: Option<f64>,
}

/// The most a settings file may hold: far beyond any real one.
const MAX_SETTINGS_BYTES: u64 = 1 << 20;

/// Reads the settings file: `--config` (which must exist), else `./commgate.toml` if present.
/// The result remembers the file and the `COMMGATE_*` variables clap read (see [`parse_args`]),
/// so that a bad value is reported where it was set.
pub fn load_file(cli: &Cli) -> Result<FileConfig> {
    let path: PathBuf = match cli.config.as_deref() {
        Some(p) => p.to_path_buf(),
        None if Path::new(DEFAULT_FILE).exists() => PathBuf::from(DEFAULT_FILE),
        None => return Ok(FileConfig { provenance: Provenance::new(None, &cli.from_env), ..FileConfig::default() }),
    };
    let named = match cli.from_env.iter().find(|(var, _)| var == "COMMGATE_CONFIG") {
        Some((var, value)) => format!("{var}={value}"),
        None => path.display().to_string(),
    };
    // Through `input`: a regular file only, read once and bounded (a committed `commgate.toml`
    // link to /dev/zero or a pipe must not hang or fill memory).
    let text = crate::input::read_text(&path, MAX_SETTINGS_BYTES)
        .map_err(|e| anyhow::anyhow!("{named}: cannot read the settings file: it {e}"))?;
    let mut file = parse_file_at(&text, Some(&path))?;
    file.provenance = Provenance::new(Some((path, text)), &cli.from_env);
    Ok(file)
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
        let message = crate::input::plain_message(&message);
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
    pub options: AttributeOptions,
    /// The seed rules' thresholds, for the mitigation and the follow-up.
    pub thresholds: Thresholds,
}

pub fn attribute(args: AttributeArgs, file: &FileConfig) -> Result<AttributeConfig> {
    let format = args.format.or(file.attribute.format).unwrap_or(Format::Text);
    let compat = args.compat.or(file.attribute.compat).unwrap_or_default();
    let defaults = Thresholds::default();
    let t = &file.thresholds;
    let thresholds = Thresholds {
        imbalance_ratio: args.imbalance_ratio.or(t.imbalance_ratio).unwrap_or(defaults.imbalance_ratio),
        low_overlap_ratio: args.low_overlap_ratio.or(t.low_overlap_ratio).unwrap_or(defaults.low_overlap_ratio),
        accept_exposed_ms: args.accept_exposed_ms.or(t.accept_exposed_ms).unwrap_or(defaults.accept_exposed_ms),
    };
    validate_thresholds(&thresholds, file, [args.imbalance_ratio, args.low_overlap_ratio, args.accept_exposed_ms])?;
    let steps = match (args.steps, file.attribute.steps) {
        (Some(count), _) => Some(StepsSetting { count, set_by: file.origin(STEPS, true, &count) }),
        (None, Some(count)) => Some(file_steps(file, count)?),
        (None, None) => None,
    };
    let mut comm_patterns = file.attribute.comm_patterns.clone();
    comm_patterns.extend(args.comm_patterns);
    comm_patterns.retain(|p| !p.is_empty());
    Ok(AttributeConfig {
        paths: args.paths,
        format,
        output: args.output,
        options: AttributeOptions {
            compat,
            steps,
            comm_patterns,
            max_events: args.max_events.or(file.attribute.max_events),
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
    pub output: Option<PathBuf>,
    pub options: CompareOptions,
}

pub fn compare(args: CompareArgs, file: &FileConfig, env: impl Fn(&str) -> Option<String>) -> Result<CompareConfig> {
    let format = args.format.or(file.compare.format).unwrap_or(Format::Text);
    let defaults = CompareOptions::default();
    let min_effect = limits::min_effect(
        limits::MIN_EFFECT.pick(args.min_effect, file.compare.min_effect, file.path(), &env),
        defaults.min_effect,
    )?;
    let resamples = limits::resamples(
        limits::RESAMPLES.pick(args.resamples, file.compare.resamples, file.path(), &env),
        defaults.resamples,
    )?;
    Ok(CompareConfig {
        baseline: args.baseline,
        current: args.current,
        format,
        output: args.output,
        options: CompareOptions {
            min_effect,
            resamples,
            seed: args.seed.or(file.compare.seed).unwrap_or(defaults.seed),
            ..defaults
        },
    })
}

/// Settings for `commgate check`.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckConfig {
    /// Results to judge (empty: run the workloads).
    pub result: Vec<PathBuf>,
    /// The workloads to run when no result is given, as `bench` declares them.
    pub workloads: Vec<Declared>,
    pub options: CheckOptions,
    pub comment: CommentPolicy,
    pub format: Format,
    pub output: Option<PathBuf>,
}

pub fn check(args: CheckArgs, file: &FileConfig, env: impl Fn(&str) -> Option<String>) -> Result<CheckConfig> {
    let c = &file.check;
    let fail_on = args.fail_on.or(c.fail_on).unwrap_or(FailOn::Regression);
    let comment = args.comment.or(c.comment).unwrap_or(CommentPolicy::Auto);
    let format = args.format.or(c.format).unwrap_or(Format::Text);
    for (name, set) in
        [("trace_relative_floor", &c.trace_relative_floor), ("trace_absolute_floor_ms", &c.trace_absolute_floor_ms)]
    {
        if let Some(value) = set {
            bail!(
                "{}: the fixed trace floors were retired: traces are judged with the benchmark's statistics \
                 against the stored trace runs (min_effect in [compare] sets the smallest change); remove the key",
                file.origin(key("check", name), false, value)
            );
        }
    }
    let compare_defaults = CompareOptions::default();
    Ok(CheckConfig {
        result: args.result,
        workloads: workloads::declare(
            BenchArgs {
                flags: args.bench,
                dry_run: false,
                output: None,
                results_dir: args.results_dir,
                workload: args.workload,
                payload_sizes: args.payload_sizes,
            },
            file,
            &env,
        )?,
        options: CheckOptions {
            baselines: args
                .baselines
                .or_else(|| file.baseline.dir.clone())
                .unwrap_or_else(|| PathBuf::from("baselines")),
            traces: args.traces,
            trace_name: args.trace_name,
            attribute: attribute_defaults(file)?,
            thresholds: thresholds_defaults(file)?,
            compare: CompareOptions {
                min_effect: limits::min_effect(
                    limits::MIN_EFFECT.from_file(file.compare.min_effect, file.path()),
                    compare_defaults.min_effect,
                )?,
                resamples: limits::resamples(
                    limits::RESAMPLES.from_file(file.compare.resamples, file.path()),
                    compare_defaults.resamples,
                )?,
                seed: file.compare.seed.unwrap_or(compare_defaults.seed),
                ..compare_defaults
            },
            fail_on,
            base: None,
        },
        comment,
        format,
        output: args.output.or_else(|| c.output.clone()),
    })
}

/// Attribution options from `commgate.toml` alone (for commands without attribute flags).
pub fn attribute_defaults(file: &FileConfig) -> Result<AttributeOptions> {
    Ok(AttributeOptions {
        compat: Compat::Default,
        steps: file.attribute.steps.map(|count| file_steps(file, count)).transpose()?,
        comm_patterns: file.attribute.comm_patterns.clone(),
        max_events: file.attribute.max_events,
    })
}

/// The seed rules' thresholds from `commgate.toml` alone (for commands without their flags).
pub fn thresholds_defaults(file: &FileConfig) -> Result<Thresholds> {
    let defaults = Thresholds::default();
    let t = &file.thresholds;
    let thresholds = Thresholds {
        imbalance_ratio: t.imbalance_ratio.unwrap_or(defaults.imbalance_ratio),
        low_overlap_ratio: t.low_overlap_ratio.unwrap_or(defaults.low_overlap_ratio),
        accept_exposed_ms: t.accept_exposed_ms.unwrap_or(defaults.accept_exposed_ms),
    };
    validate_thresholds(&thresholds, file, [None; 3])?;
    Ok(thresholds)
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
    let keep = args.keep.or(file.baseline.keep).unwrap_or(DEFAULT_KEEP);
    if keep == 0 {
        bail!(
            "{}: that would keep no runs; use 1 or more (default {DEFAULT_KEEP})",
            file.origin(KEEP, args.keep.is_some(), &keep)
        );
    }
    let history_keep = args.history_keep.or(file.baseline.history_keep).unwrap_or(DEFAULT_HISTORY_KEEP);
    if history_keep > MAX_HISTORY {
        bail!(
            "{}: a store keeps at most {MAX_HISTORY} run summaries (default {DEFAULT_HISTORY_KEEP})",
            file.origin(HISTORY_KEEP, args.history_keep.is_some(), &history_keep)
        );
    }
    if args.from.len() > 1 && !args.traces.is_empty() {
        bail!(
            "baseline update --traces with {} --from files: the trace run would go into each of their baseline \
             files; add it with one --from (or with --environment-profile and --workload-id)",
            args.from.len()
        );
    }
    if args.from.is_empty() && args.environment_profile.is_none() {
        bail!(
            "baseline update --traces without --from needs --environment-profile (which baseline file to add them to)"
        );
    }
    Ok(UpdateConfig {
        from: args.from,
        traces: args.traces,
        name: args.name,
        environment_profile: args.environment_profile,
        workload_id: args.workload_id,
        dir: args.baselines.or_else(|| file.baseline.dir.clone()).unwrap_or_else(|| PathBuf::from("baselines")),
        keep,
        history_keep,
    })
}

/// Settings for `commgate bench`: the workloads to run, in order, each flags > env >
/// `[workloads.<name>]` > `[bench]`; what depends on the backend that will run (its default
/// sizes, the world size, a derived id) is left for [`crate::bench::workload::resolve_all`].
pub fn bench(args: BenchArgs, file: &FileConfig, env: impl Fn(&str) -> Option<String>) -> Result<Vec<Declared>> {
    workloads::declare(args, file, env)
}

/// The benchmark flags `bench` and `check` share, each value checked against its limits
/// ([`limits`]) with where it came from, before anything is probed or run.
pub fn bench_flags(args: BenchFlags, file: &FileConfig, env: impl Fn(&str) -> Option<String>) -> Result<BenchRequest> {
    let (f, path) = (&file.bench, file.path());
    let timeout = limits::timeout(limits::TIMEOUT.pick(args.timeout, f.timeout, path, &env))?;
    let environment_profile = limits::ENVIRONMENT_PROFILE
        .pick(args.environment_profile, f.environment_profile.clone(), path, &env)
        .map(limits::environment_profile)
        .transpose()?;
    let ci = env("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
    let request = BenchRequest {
        backend: args.backend.or(f.backend).unwrap_or(BackendChoice::Auto),
        world_size: limits::WORLD_SIZE.pick(args.world_size, f.world_size, path, &env),
        dtype: args.dtype.or(f.dtype).unwrap_or(Dtype::Bfloat16),
        payload_elements: limits::PAYLOAD_ELEMENTS.pick(args.payload_elements, f.payload_elements, path, &env),
        compute_dim: limits::COMPUTE_DIM.pick(args.compute_dim, f.compute_dim, path, &env),
        warmup: limits::WARMUP.pick(args.warmup, f.warmup, path, &env),
        repeats: limits::REPEATS.pick(args.repeats, f.repeats, path, &env),
        allow_single_rank: args.allow_single_rank,
        seed: args.seed.unwrap_or(1),
        workload: IdChoice::Legacy,
        run: RunOptions {
            timeout,
            run_label: args.run_label.or_else(|| f.run_label.clone()).unwrap_or_else(|| "default".to_string()),
            environment_profile,
            output: None,
            results_dir: f.results_dir.clone().unwrap_or_else(|| PathBuf::from("benchmarks/results")),
            progress: !args.quiet && !ci && std::io::IsTerminal::is_terminal(&std::io::stderr()),
            dry_run: false,
        },
    };
    request.check()?;
    Ok(request)
}

/// Checks the thresholds in use; `from_args` holds the flag (or variable) values, in the order
/// imbalance, low overlap, accept, so that a bad one is named where it was set.
fn validate_thresholds(t: &Thresholds, file: &FileConfig, from_args: [Option<f64>; 3]) -> Result<()> {
    let [imbalance, low_overlap, accept] = from_args.map(|v| v.is_some());
    for (k, v, flag) in
        [(IMBALANCE_RATIO, t.imbalance_ratio, imbalance), (LOW_OVERLAP_RATIO, t.low_overlap_ratio, low_overlap)]
    {
        if !(0.0..=1.0).contains(&v) {
            bail!("{}: it must be a ratio in 0..=1", file.origin(k, flag, &v));
        }
    }
    if !t.accept_exposed_ms.is_finite() || t.accept_exposed_ms < 0.0 {
        bail!("{}: it must be a finite number of ms ≥ 0", file.origin(ACCEPT_EXPOSED_MS, accept, &t.accept_exposed_ms));
    }
    Ok(())
}

/// `attribute.steps` from the file, which clap's range check never saw.
fn file_steps(file: &FileConfig, count: u64) -> Result<StepsSetting> {
    let origin = file.origin(STEPS, false, &count);
    if count == 0 {
        bail!("{origin}: give the number of steps traces without ProfilerStep markers hold (≥ 1)");
    }
    let set_by = match &file.provenance.file {
        Some((path, _)) => format!("steps = {count} ({})", path.display()),
        None => format!("steps = {count}"),
    };
    Ok(StepsSetting { count, set_by })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(line: &[&str]) -> AttributeArgs {
        let mut full = vec!["commgate", "attribute"];
        full.extend_from_slice(line);
        match crate::cli::Cli::try_parse_from(full).expect("parses").command {
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
        assert_eq!(c.options.comm_patterns, ["cross_device_reduce"]);
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
        let e = attribute_defaults(&FileConfig { thresholds: ThresholdsFile::default(), ..file }).unwrap_err();
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
    use clap::Parser;

    fn cli(line: &[&str]) -> crate::cli::Command {
        crate::cli::Cli::try_parse_from(line).expect("parses").command
    }

    #[test]
    fn compare_and_update_settings_resolve_and_validate() {
        let file =
            parse_file("[compare]\nmin_effect = 0.05\nseed = 9\n[baseline]\ndir = \"b\"\nkeep = 3\n").expect("valid");
        let crate::cli::Command::Compare(args) =
            cli(&["commgate", "compare", "--baseline", "b.json", "--current", "c.json", "--seed", "4"])
        else {
            panic!("compare")
        };
        let c = compare(args, &file, |_| None).expect("ok");
        assert_eq!((c.options.min_effect, c.options.seed, c.options.resamples), (0.05, 4, 1000));
        let crate::cli::Command::Compare(args) =
            cli(&["commgate", "compare", "--baseline", "b", "--current", "c", "--min-effect", "1.5"])
        else {
            panic!("compare")
        };
        assert!(compare(args, &file, |_| None).unwrap_err().to_string().contains("--min-effect 1.5"));
        let crate::cli::Command::Baseline(crate::cli::BaselineCommand::Update(args)) =
            cli(&["commgate", "baseline", "update", "--from", "r.json"])
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
    use crate::bench::settings::{BackendKind, BenchSettings};
    use clap::Parser;

    fn args(line: &[&str]) -> BenchArgs {
        let mut full = vec!["commgate", "bench"];
        full.extend_from_slice(line);
        match crate::cli::Cli::try_parse_from(full).expect("parses").command {
            crate::cli::Command::Bench(a) => a,
            other => panic!("not bench: {other:?}"),
        }
    }

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
        assert_eq!((auto_on_cpu.plan.payload_elements, auto_on_cpu.plan.repeats), (1 << 20, 120));
        let file = parse_file("[bench]\nrepeats = 150\ndtype = \"float32\"\n").expect("valid");
        let s = resolved(only(bench(args(&["--backend", "mock", "--repeats", "300"]), &file, no_env)), None);
        assert_eq!((s.plan.repeats, s.plan.dtype), (300, Dtype::Float32));
        let ci =
            only(bench(args(&["--backend", "mock"]), &FileConfig::default(), |k| (k == "CI").then(|| "true".into())));
        assert!(!ci.run.progress);
    }

    #[test]
    fn bad_bench_settings_are_named() {
        let e = bench(args(&["--backend", "mock", "--repeats", "0"]), &FileConfig::default(), no_env);
        assert!(e.unwrap_err().to_string().starts_with("--repeats 0: at least 20 repeats"));
        let file = file_from_text(&[], Path::new("ci/gate.toml"), "[bench]\nwarmup = 99999\n".into()).expect("valid");
        let e = bench(args(&["--backend", "mock"]), &file, no_env).unwrap_err();
        assert!(e.to_string().starts_with("ci/gate.toml: [bench] warmup = 99999: at most 10000"), "{e}");
        let env = |k: &str| (k == "COMMGATE_ENVIRONMENT_PROFILE").then(|| "../x".to_string());
        let mut a = args(&["--backend", "mock"]);
        a.flags.environment_profile = Some("../x".into());
        let e = bench(a, &FileConfig::default(), env).unwrap_err();
        assert!(e.to_string().starts_with("COMMGATE_ENVIRONMENT_PROFILE=\"../x\": "), "{e}");
        let file = parse_file("[compare]\nresamples = 5\n").expect("valid");
        let crate::cli::Command::Check(c) =
            crate::cli::Cli::try_parse_from(["commgate", "check"]).expect("parses").command
        else {
            panic!("check")
        };
        let e = check(c, &file, no_env).unwrap_err();
        assert!(e.to_string().starts_with("commgate.toml: [compare] resamples = 5: "), "{e}");
        let e = parse_file("[bench]\nbackend = \"tpu\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("tpu"), "{e:#}");
    }
}
