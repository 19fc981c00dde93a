//! The reference tables of `docs/formats.md`, generated from the declarations they describe: every
//! command's flags (with their `COMMGATE_*` variables) from [`Cli`]'s clap definition, and every
//! `commgate.toml` key from the [`sections`](crate::cli::sections) and the `[workloads.<name>]` table,
//! and the variables without a flag from [`commgate_core::environment`].
//! `tests/reference.rs` compares each generated block of the page with what this module renders
//! now, so a flag, key or variable that is added, renamed or removed fails the tests until the page
//! is regenerated (`scripts/regen-docs.sh`); nothing in these tables is written by hand.

use clap::{Arg, Command, CommandFactory};

use crate::cli::sections::{
    AttributeSection, BaselineSection, BenchSection, CheckSection, CompareSection, ThresholdsSection,
};
use crate::cli::Cli;

/// The name of each generated block, as `<!-- generated: NAME -->` marks it in the page, and its
/// text now.
pub fn blocks() -> Vec<(&'static str, String)> {
    let cli = built(Cli::command());
    vec![("flags", flags(&cli)), ("variables", variables(&cli)), ("env-only", env_only()), ("keys", keys())]
}

/// The command as clap completes it before parsing (each argument's number of values, the
/// subcommands' own), which is what these tables read.
fn built(mut command: Command) -> Command {
    command.build();
    command
}

/// Text safe in a Markdown table cell: one line, `|` escaped, and `<`, `>` outside code spans
/// written as entities (so `[workloads.<name>]` is not taken for an HTML tag).
fn cell(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|");
    let mut out = String::with_capacity(line.len());
    for (i, part) in line.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        if i % 2 == 0 {
            out.push_str(&part.replace('<', "&lt;").replace('>', "&gt;"));
        } else {
            out.push_str(part);
        }
    }
    out
}

/// The command's subcommands, depth first, each with its full name (`baseline update`), leaving
/// out clap's own `help`.
fn commands(cli: &Command) -> Vec<(String, &Command)> {
    fn walk<'a>(prefix: &str, c: &'a Command, out: &mut Vec<(String, &'a Command)>) {
        for sub in c.get_subcommands().filter(|s| s.get_name() != "help") {
            let name =
                if prefix.is_empty() { sub.get_name().to_string() } else { format!("{prefix} {}", sub.get_name()) };
            if sub.has_subcommands() {
                walk(&name, sub, out);
            } else {
                out.push((name, sub));
            }
        }
    }
    let mut out = Vec::new();
    walk("", cli, &mut out);
    out
}

/// The flags a user types: named, not hidden, not clap's own `--help` and `--version`.
fn user_flags(c: &Command) -> impl Iterator<Item = &Arg> {
    c.get_arguments().filter(|a| a.get_long().is_some() && !a.is_hide_set()).filter(|a| {
        let id = a.get_id().as_str();
        id != "help" && id != "version"
    })
}

/// What a flag takes: its choices, or its value's name, or nothing for a switch.
fn takes(a: &Arg) -> String {
    let choices: Vec<String> =
        a.get_possible_values().iter().filter(|v| !v.is_hide_set()).map(|v| v.get_name().to_string()).collect();
    let takes_value = a.get_num_args().is_some_and(|n| n.takes_values());
    if !takes_value {
        String::new()
    } else if !choices.is_empty() {
        format!("`{}`", choices.join("` \\| `"))
    } else {
        a.get_value_names().map(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" ")).unwrap_or_default()
    }
}

fn env_of(a: &Arg) -> Option<String> {
    a.get_env().map(|v| v.to_string_lossy().into_owned())
}

fn help_of(a: &Arg) -> String {
    a.get_long_help().or_else(|| a.get_help()).map(|h| cell(&h.to_string())).unwrap_or_default()
}

/// One table per command: flag, variable, value, meaning (the help text `--help` prints).
pub fn flags(cli: &Command) -> String {
    let mut out = String::new();
    let global: Vec<&Arg> = user_flags(cli).collect();
    for (name, c) in commands(cli) {
        out.push_str(&format!(
            "\n#### `commgate {name}`\n\n| flag | variable | value | meaning |\n|---|---|---|---|\n"
        ));
        for a in user_flags(c).chain(global.iter().copied()) {
            let flag = match a.get_short() {
                Some(s) => format!("`--{}`, `-{s}`", a.get_long().unwrap_or_default()),
                None => format!("`--{}`", a.get_long().unwrap_or_default()),
            };
            let env = env_of(a).map(|e| format!("`{e}`")).unwrap_or_default();
            out.push_str(&format!("| {flag} | {env} | {} | {} |\n", takes(a), help_of(a)));
        }
    }
    out
}

/// Every `COMMGATE_*` variable a flag reads: the flag it stands for and the commands that read it.
pub fn variables(cli: &Command) -> String {
    let mut rows: Vec<(String, String, Vec<String>)> = Vec::new();
    let mut add = |env: String, flag: String, command: String| match rows.iter_mut().find(|r| r.0 == env) {
        Some(row) => {
            if !row.1.split(", ").any(|f| f == flag) {
                row.1 = format!("{}, {flag}", row.1);
            }
            if !row.2.contains(&command) {
                row.2.push(command);
            }
        }
        None => rows.push((env, flag, vec![command])),
    };
    for a in user_flags(cli) {
        if let Some(env) = env_of(a) {
            add(env, format!("`--{}`", a.get_long().unwrap_or_default()), "all".to_string());
        }
    }
    for (name, c) in commands(cli) {
        for a in user_flags(c) {
            if let Some(env) = env_of(a) {
                add(env, format!("`--{}`", a.get_long().unwrap_or_default()), name.clone());
            }
        }
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = String::from("| variable | flag it stands for | read by |\n|---|---|---|\n");
    for (env, flag, commands) in rows {
        out.push_str(&format!("| `{env}` | {flag} | {} |\n", commands.join(", ")));
    }
    out
}

/// Every `COMMGATE_*` variable commgate reads at run time: the flags' (from [`Cli`]) and those
/// without a flag ([`commgate_core::environment`]).
pub fn declared_variables() -> Vec<String> {
    let cli = built(Cli::command());
    let mut names: Vec<String> = commands(&cli)
        .into_iter()
        .flat_map(|(_, c)| user_flags(c).filter_map(env_of).collect::<Vec<_>>())
        .chain(user_flags(&cli).filter_map(env_of))
        .chain(commgate_core::environment::ENV_ONLY.iter().map(|v| v.name.to_string()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Every `COMMGATE_*` variable without a flag ([`commgate_core::environment`]): what it does and
/// the commands that read it.
pub fn env_only() -> String {
    let mut out = String::from("| variable | read by | meaning |\n|---|---|---|\n");
    for v in commgate_core::environment::ENV_ONLY {
        out.push_str(&format!("| `{}` | {} | {} |\n", v.name, v.read_by, cell(v.meaning)));
    }
    out
}

/// One section's rows: key, flag, variable, value, meaning; a key with no flag says so.
fn section_rows(section: &str, keys: &[&str], args: Command, out: &mut String) {
    let args = built(args);
    for key in keys {
        let arg = args.get_arguments().find(|a| a.get_id().as_str() == *key);
        let (flag, env, value, meaning) = match arg {
            Some(a) => (
                a.get_long().map(|l| format!("`--{l}`")).unwrap_or_default(),
                env_of(a).map(|e| format!("`{e}`")).unwrap_or_default(),
                takes(a),
                help_of(a),
            ),
            None => (String::new(), String::new(), String::new(), "file only (see below)".to_string()),
        };
        out.push_str(&format!("| `{section}.{key}` | {flag} | {env} | {value} | {meaning} |\n"));
    }
}

/// Every key of `commgate.toml`, section by section, with the flag and variable that set the same
/// value (flags > variables > the file > defaults).
pub fn keys() -> String {
    use clap::Args;
    let mut out = String::from("| key | flag | variable | value | meaning |\n|---|---|---|---|---|\n");
    // Each section in the order the page lists them: its name, keys and clap arguments.
    macro_rules! sections {
        ($($section:ty),*) => {$(
            section_rows(<$section>::SECTION, <$section>::KEYS, <$section>::augment_args(Command::new(<$section>::SECTION)), &mut out);
        )*};
    }
    sections!(AttributeSection, ThresholdsSection, CompareSection, BaselineSection, CheckSection, BenchSection);
    let workload_keys = serde_fields::<crate::config::workloads::WorkloadTable>().join("`, `");
    out.push_str(&format!(
        "| `workloads.<name>.*` |  |  | table: `{workload_keys}` | one workload `bench` and `check` run (see `bench`, \"Workloads\") |\n"
    ));
    out
}

/// The field names a `#[derive(Deserialize)]` struct declares, as serde hands them to the
/// deserializer (so the `[workloads.<name>]` keys are read from the struct, not listed again).
fn serde_fields<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{Error, Visitor};
    struct Capture<'a>(&'a std::cell::Cell<&'static [&'static str]>);
    impl<'de> serde::Deserializer<'de> for Capture<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.set(fields);
            Err(Error::custom("the fields are all that was asked for"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let fields = std::cell::Cell::new(&[][..]);
    let _ = T::deserialize(Capture(&fields));
    fields.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_key_and_variable_is_in_a_table() {
        let cli = built(Cli::command());
        let (flags, variables, keys) = (flags(&cli), variables(&cli), keys());
        for needle in
            ["`--fail-on-savings-ms`", "`--busbw`", "`--bucket-earlier-us`", "`--comm-pattern`", "`--baselines`"]
        {
            assert!(flags.contains(needle), "{needle} in the flags table");
        }
        for needle in ["`COMMGATE_FAIL_ON_SAVINGS_MS`", "`COMMGATE_BUSBW`", "`COMMGATE_BASELINES`"] {
            assert!(variables.contains(needle), "{needle} in the variables table");
        }
        for needle in
            ["`attribute.busbw`", "`attribute.bucket_earlier_us`", "`check.fail_on_savings_ms`", "`baseline.dir`"]
        {
            assert!(keys.contains(needle), "{needle} in the keys table");
        }
        assert!(flags.contains("#### `commgate baseline update`"), "nested commands have their own table");
        assert!(!flags.contains("`--help`"), "clap's own flags are left out");
    }

    #[test]
    fn the_workload_table_keys_are_read_from_its_struct() {
        let keys = serde_fields::<crate::config::workloads::WorkloadTable>();
        assert_eq!(keys.first(), Some(&"id"));
        assert!(keys.contains(&"payload_elements") && keys.contains(&"repeats"), "{keys:?}");
    }

    #[test]
    fn a_cell_is_one_line_with_pipes_escaped() {
        assert_eq!(cell("a |\n  b"), "a \\| b");
        assert_eq!(
            cell("[workloads.<name>] and `<first>.run2.json`"),
            "[workloads.&lt;name&gt;] and `<first>.run2.json`"
        );
    }
}
