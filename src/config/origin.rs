//! Where each setting came from, so that a bad value is reported at its source: a flag as the
//! flag (`--imbalance-ratio 1.5`), a variable as the variable and its value
//! (`COMMGATE_BACKEND=gpu`), a settings-file value as `file:line:column` of its key.
//!
//! clap merges flags and `COMMGATE_*` variables before the typed structs exist, so
//! [`parse_args`] asks clap's matches which values came from the environment and keeps that
//! list on the [`Cli`]; `load_file` keeps it, with the file's text, in [`Provenance`].

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Display;
use std::path::{Path, PathBuf};

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use super::FileConfig;
use crate::cli::sections::{Key, Spec};
use crate::cli::Cli;
use commgate_bench::origin::{LimitError, Origin, Setting};

/// The settings file read (its path and text, and where each of its keys is written) and the
/// `COMMGATE_*` variables clap took values from (name, value as written).
#[derive(Debug, Default, Clone)]
pub struct Provenance {
    pub(super) file: Option<(PathBuf, String)>,
    /// `(section, key)` → line and column, from one parse of the file's text.
    positions: BTreeMap<(String, String), (usize, usize)>,
    env: Vec<(String, String)>,
}

impl Provenance {
    pub fn new(file: Option<(PathBuf, String)>, env: &[(String, String)]) -> Self {
        let positions = file.as_ref().map(|(_, text)| key_positions(text)).unwrap_or_default();
        Provenance { file, positions, env: env.to_vec() }
    }
}

impl FileConfig {
    /// The file these settings came from, for messages about its values (`commgate.toml` when
    /// they were parsed from text with no file named).
    pub fn path(&self) -> &Path {
        self.provenance.file.as_ref().map_or(Path::new(super::DEFAULT_FILE), |(path, _)| path.as_path())
    }

    /// Where a value of `key` came from: its variable when clap took it from there, else its flag
    /// (`from_args`: the value came through clap); otherwise the file, at the key's line and
    /// column when it is written there.
    fn source(&self, key: Key, from_args: bool) -> Origin {
        if from_args {
            if let Some(var) = key.env.filter(|var| self.provenance.env.iter().any(|(name, _)| name == var)) {
                return Origin::Env(var);
            }
            if let Some(flag) = key.flag {
                return Origin::Flag(flag);
            }
        }
        let at = self.provenance.positions.get(&(key.section.to_string(), key.name.to_string()));
        let place = match at {
            Some((line, column)) => format!("{}:{line}:{column}", self.path().display()),
            None => self.path().display().to_string(),
        };
        Origin::File { place, section: key.section, key: key.name }
    }

    /// Where the value in use was set, as [`Setting::written`] says it: `COMMGATE_X=value` or
    /// `--flag value` when it came through clap (`from_args`), else
    /// `file:line:column: section.name = value`.
    pub(super) fn origin(&self, key: Key, from_args: bool, value: &dyn Display) -> String {
        Setting::new(value, self.source(key, from_args)).written()
    }

    /// THE merge rule of every setting: the flag (or its variable, through clap) wins over the
    /// file; the value is checked against the setting's limit, and carries where it came from.
    /// `None`: neither sets it (the caller's default applies, see [`FileConfig::value`]).
    pub(super) fn setting<T: Display>(
        &self,
        spec: &Spec<T>,
        arg: Option<T>,
        file: Option<T>,
    ) -> Result<Option<Setting<T>>, LimitError> {
        let from_args = arg.is_some();
        let Some(value) = arg.or(file) else { return Ok(None) };
        let setting = Setting::new(value, self.source(spec.key, from_args));
        setting.within(|v| spec.within(v))?;
        Ok(Some(setting))
    }

    /// The value in use: [`FileConfig::setting`], else the setting's default.
    pub(super) fn value<T: Display>(&self, spec: &Spec<T>, arg: Option<T>, file: Option<T>) -> Result<T, LimitError> {
        Ok(self.setting(spec, arg, file)?.map_or_else(|| spec.default_value(), |s| s.value))
    }
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
pub(super) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
}

/// Where each `[section] name` is written (a table, a dotted key or an inline table alike): its
/// line and column, from one parse of `text`.
fn key_positions(text: &str) -> BTreeMap<(String, String), (usize, usize)> {
    type Spans = BTreeMap<String, BTreeMap<toml::Spanned<String>, serde::de::IgnoredAny>>;
    let Ok(tables) = toml::from_str::<Spans>(text) else { return BTreeMap::new() };
    tables
        .into_iter()
        .flat_map(|(section, keys)| {
            keys.into_keys()
                .map(|k| {
                    let at = line_column(text, k.span().start);
                    ((section.clone(), k.into_inner()), at)
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Why the command line could not be used.
#[derive(Debug)]
pub enum ArgsError {
    /// clap's own report (usage, `--help`, `--version`, a missing argument): print it with
    /// [`clap::Error::exit`].
    Clap(clap::Error),
    /// A bad value, as one line naming the flag or the variable that gave it.
    Value(String),
}

/// Parses the command line like `Cli::parse`, but a bad value is reported as one line naming
/// where it came from (`COMMGATE_BACKEND=gpu: unknown backend; expected one of …`, not clap's
/// `--backend`), and the `COMMGATE_*` variables used are kept in [`Cli::from_env`]. `env` reads
/// a variable (clap itself reads the real environment; this only tells a variable's value from
/// a flag's).
pub fn parse_args<I, T>(args: I, env: impl Fn(&str) -> Option<String>) -> Result<Cli, ArgsError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let command = Cli::command();
    let matches = command.clone().try_get_matches_from(&args).map_err(|e| explain(e, &command, &args, &env))?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(ArgsError::Clap)?;
    cli.from_env = env_sourced(&command, &matches);
    Ok(cli)
}

/// The (variable, value) pairs clap took from the environment, in the command and the
/// subcommand that ran.
fn env_sourced(command: &clap::Command, matches: &ArgMatches) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for arg in command.get_arguments() {
        let Some(var) = arg.get_env() else { continue };
        let id = arg.get_id().as_str();
        if matches.try_contains_id(id).unwrap_or(false) && matches.value_source(id) == Some(ValueSource::EnvVariable) {
            let value = matches.get_raw(id).and_then(|mut v| v.next()).map(|v| v.to_string_lossy().into_owned());
            out.push((var.to_string_lossy().into_owned(), value.unwrap_or_default()));
        }
    }
    if let Some((name, sub)) = matches.subcommand() {
        if let Some(sub_command) = command.find_subcommand(name) {
            out.extend(env_sourced(sub_command, sub));
        }
    }
    out
}

/// A bad value becomes one line naming its source; any other clap error stays clap's.
fn explain(
    e: clap::Error,
    command: &clap::Command,
    args: &[OsString],
    env: &dyn Fn(&str) -> Option<String>,
) -> ArgsError {
    if !matches!(e.kind(), ErrorKind::InvalidValue | ErrorKind::ValueValidation) {
        return ArgsError::Clap(e);
    }
    let text = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    let (Some(shown), Some(value)) = (text(ContextKind::InvalidArg), text(ContextKind::InvalidValue)) else {
        return ArgsError::Clap(e);
    };
    let Some(arg) = find_arg(command, &shown) else { return ArgsError::Clap(e) };
    let Some(long) = arg.get_long() else { return ArgsError::Clap(e) };
    let on_command_line = args.iter().skip(1).any(|a| {
        let a = a.to_string_lossy();
        a == format!("--{long}") || a.starts_with(&format!("--{long}="))
    });
    let var = arg.get_env().map(|v| v.to_string_lossy().into_owned());
    let (source, from_env) = match var {
        Some(var) if !on_command_line && env(&var).as_deref() == Some(value.as_str()) => {
            (format!("{var}={value}"), true)
        }
        _ => (format!("--{long} {value}"), false),
    };
    let why = match (e.kind(), e.get(ContextKind::ValidValue)) {
        // An empty value (`COMMGATE_BASELINES=`): clap lists no valid values then.
        _ if value.is_empty() && from_env => "empty; give a value, or unset the variable".to_string(),
        _ if value.is_empty() => "empty; give a value".to_string(),
        (ErrorKind::InvalidValue, Some(ContextValue::Strings(valid))) if !valid.is_empty() => {
            let suggestion = match e.get(ContextKind::SuggestedValue) {
                Some(ContextValue::String(s)) => format!(" (did you mean {s}?)"),
                _ => String::new(),
            };
            format!("unknown {}; expected one of {}{suggestion}", noun(long), valid.join(", "))
        }
        _ => match std::error::Error::source(&e) {
            Some(cause) => plain_cause(&cause.to_string()),
            None => format!("not a valid {}", noun(long)),
        },
    };
    ArgsError::Value(format!("{source}: {why}"))
}

/// What a value of `--long` is called in a message.
fn noun(long: &str) -> String {
    match long {
        "fail-on" => "--fail-on verdict".to_string(),
        "comment" => "comment policy".to_string(),
        other => other.replace('-', " "),
    }
}

/// Why clap's value parser refused a value, in words: `0 is not in 1..18446744073709551615` says
/// `0 is less than 1`, and Rust's number-parsing messages say what was expected.
fn plain_cause(message: &str) -> String {
    match message {
        "invalid float literal" => return "not a number".to_string(),
        "invalid digit found in string" => return "not a whole number ≥ 0".to_string(),
        "number too large to fit in target type" => return "too large".to_string(),
        "cannot parse integer from empty string" => return "empty; give a number".to_string(),
        _ => {}
    }
    match message.split_once(" is not in ") {
        Some((value, range)) => match range.split_once("..") {
            Some((low, high)) if high.trim_start_matches('=') == u64::MAX.to_string() => {
                format!("{value} is less than {low}")
            }
            _ => message.to_string(),
        },
        None => message.to_string(),
    }
}

/// The argument clap shows as `shown` (`--backend <BACKEND>`), in the command or a subcommand.
fn find_arg<'a>(command: &'a clap::Command, shown: &str) -> Option<&'a clap::Arg> {
    let long = shown.split_whitespace().next()?.strip_prefix("--")?;
    let long = long.split('=').next()?;
    command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .or_else(|| command.get_subcommands().find_map(|sub| find_arg(sub, shown)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn line_and_column_are_one_based() {
        let text = "[thresholds]\n  bogus = 1\né = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, text.find("bogus").expect("bogus")), (2, 3));
        assert_eq!(line_column(text, text.find(" = 2").expect("é")), (3, 2), "columns count characters");
        assert_eq!(line_column(text, 10_000), (4, 1));
    }

    #[test]
    fn keys_are_found_in_tables_dotted_keys_and_inline_tables() {
        let key_position = |text: &str, section: &str, name: &str| {
            key_positions(text).get(&(section.to_string(), name.to_string())).copied()
        };
        let text = "# settings\n[thresholds]\n\n  accept_exposed_ms = -1\n";
        assert_eq!(key_position(text, "thresholds", "accept_exposed_ms"), Some((4, 3)));
        let text = "thresholds.imbalance_ratio = 2\nbench = { repeats = 0 }\n";
        assert_eq!(key_position(text, "thresholds", "imbalance_ratio"), Some((1, 12)));
        assert_eq!(key_position(text, "bench", "repeats"), Some((2, 11)));
        assert_eq!(key_position(text, "bench", "warmup"), None);
    }

    #[test]
    fn a_bad_flag_value_is_one_line_naming_the_flag() {
        let Err(ArgsError::Value(line)) = parse_args(["commgate", "bench", "--backend", "tpu"], no_env) else {
            panic!("not a value error")
        };
        assert_eq!(line, "--backend tpu: unknown backend; expected one of auto, cuda, cpu, mock (did you mean cpu?)");
        let Err(ArgsError::Value(line)) = parse_args(["commgate", "attribute", "t.json", "--steps=0"], no_env) else {
            panic!("not a value error")
        };
        assert_eq!(line, "--steps 0: 0 is less than 1");
        let Err(ArgsError::Value(line)) =
            parse_args(["commgate", "compare", "--baseline", "b", "--current", "c", "--seed", "x"], no_env)
        else {
            panic!("not a value error")
        };
        assert_eq!(line, "--seed x: not a whole number ≥ 0");
    }

    #[test]
    fn a_value_that_matches_the_variable_is_named_as_the_variable() {
        let env = |k: &str| (k == "COMMGATE_FORMAT").then(|| "html".to_string());
        let e = explain_with(&["commgate", "attribute", "t.json", "--format", "html"], env);
        assert!(e.starts_with("--format html: unknown format;"), "the flag was given: {e}");
        // clap reads the real environment, so the variable's case goes through `explain` alone.
        let err = Cli::command()
            .try_get_matches_from(["commgate", "attribute", "t.json", "--format", "html"])
            .expect_err("html is no format");
        let ArgsError::Value(line) = explain(err, &Cli::command(), &["commgate".into(), "attribute".into()], &env)
        else {
            panic!("not a value error")
        };
        assert_eq!(line, "COMMGATE_FORMAT=html: unknown format; expected one of text, json, markdown");
        // An empty value lists no valid values: say it is empty, for the variable or the flag.
        let empty = || {
            Cli::command()
                .try_get_matches_from(["commgate", "attribute", "t.json", "--format", ""])
                .expect_err("empty is no format")
        };
        let args = ["commgate".into(), "attribute".into()];
        let unset_var = |k: &str| (k == "COMMGATE_FORMAT").then(String::new);
        let ArgsError::Value(line) = explain(empty(), &Cli::command(), &args, &unset_var) else { panic!("value") };
        assert_eq!(line, "COMMGATE_FORMAT=: empty; give a value, or unset the variable");
        let ArgsError::Value(line) = explain(empty(), &Cli::command(), &args, &|_| None) else { panic!("value") };
        assert_eq!(line, "--format : empty; give a value");
    }

    fn explain_with(args: &[&str], env: impl Fn(&str) -> Option<String>) -> String {
        match parse_args(args.iter().copied(), env) {
            Err(ArgsError::Value(line)) => line,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn usage_help_and_version_stay_clap_reports() {
        for args in [&["commgate"][..], &["commgate", "--help"], &["commgate", "--version"], &["commgate", "attribute"]]
        {
            assert!(matches!(parse_args(args.iter().copied(), no_env), Err(ArgsError::Clap(_))), "{args:?}");
        }
    }

    #[test]
    fn values_from_flags_are_not_listed_as_from_the_environment() {
        let cli = parse_args(["commgate", "attribute", "t.json", "--steps", "3"], no_env).expect("parses");
        assert!(cli.from_env.iter().all(|(var, _)| var != "COMMGATE_STEPS"), "{:?}", cli.from_env);
    }

    #[test]
    fn origins_name_the_variable_the_flag_or_the_file_line() {
        let text = "[thresholds]\nimbalance_ratio = 1.5\n";
        let mut file = super::super::parse_file(text).expect("valid");
        file.provenance = Provenance::new(
            Some((PathBuf::from("other.toml"), text.to_string())),
            &[("COMMGATE_LOW_OVERLAP_RATIO".to_string(), "2".to_string())],
        );
        let t = super::super::ThresholdsSection::specs();
        let (imbalance, low_overlap) = (t.imbalance_ratio.key, t.low_overlap_ratio.key);
        assert_eq!(file.origin(imbalance, false, &1.5), "other.toml:2:1: thresholds.imbalance_ratio = 1.5");
        assert_eq!(file.origin(imbalance, true, &1.5), "--imbalance-ratio 1.5");
        assert_eq!(file.origin(low_overlap, true, &2.0), "COMMGATE_LOW_OVERLAP_RATIO=2");
        let keep = super::super::BaselineSection::specs().keep.key;
        assert_eq!(file.origin(keep, false, &0), "other.toml: baseline.keep = 0", "a key the file lacks");
    }
}
