//! A setting's value with where it came from, and a refusal that says so: a flag
//! (`--repeats 3`), a `COMMGATE_*` variable (`COMMGATE_RESAMPLES=0`), a key of `commgate.toml`
//! (`commgate.toml:4:1: bench.repeats = 3`) or of a `[workloads.<name>]` table, the launcher, the
//! visible GPUs, or a default. The limits themselves sit beside what they limit: the benchmark's
//! sizes in [`super::sizes`], the run's options in [`super::settings`], the comparison's in
//! `commgate_gate::compare::limits`. A refusal is one line that names the setting as written, the
//! limit and why it is there.

use std::fmt;

/// Where a setting's value came from, so that a refusal names what to change.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// A command-line flag, e.g. `--repeats`.
    Flag(&'static str),
    /// An environment variable, e.g. `COMMGATE_RESAMPLES`.
    Env(&'static str),
    /// A key of the settings file: `place` is `file:line:column` of the key (`file` alone when the
    /// key's place is unknown).
    File { place: String, section: &'static str, key: &'static str },
    /// A key of a `[workloads.<name>]` table: `place` is `file:line:column` of the key.
    Table { place: String, table: String, key: &'static str },
    /// The launcher's world size (`WORLD_SIZE`, `SLURM_NTASKS`, `OMPI_COMM_WORLD_SIZE`).
    Launcher,
    /// The GPUs counted on this machine (the default world size on cuda).
    VisibleGpus,
    /// The backend's default.
    Default(&'static str),
}

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting<T> {
    pub value: T,
    pub origin: Origin,
}

impl<T> Setting<T> {
    pub fn new(value: T, origin: Origin) -> Self {
        Setting { value, origin }
    }
}

impl<T: fmt::Display> Setting<T> {
    /// The setting as the user wrote it: `--repeats 3`, `COMMGATE_RESAMPLES=0`,
    /// `commgate.toml:4:1: bench.repeats = 3`.
    pub fn written(&self) -> String {
        let v = &self.value;
        match &self.origin {
            Origin::Flag(flag) => format!("{flag} {v}"),
            Origin::Env(var) => format!("{var}={v}"),
            Origin::File { place, section, key } => format!("{place}: {section}.{key} = {v}"),
            Origin::Table { place, table, key } => format!("{place}: [workloads.{table}] {key} = {v}"),
            Origin::Launcher => format!("the launcher's world size {v}"),
            Origin::VisibleGpus => format!("{v} visible GPU(s) (the default --world-size)"),
            Origin::Default(flag) => format!("the default {flag} {v}"),
        }
    }

    pub(crate) fn refuse(&self, why: impl Into<String>) -> LimitError {
        LimitError { setting: self.written(), why: why.into() }
    }

    /// The setting checked against `limit` (one of this module's checks of a value alone).
    pub fn within(&self, limit: impl FnOnce(&T) -> Result<(), String>) -> Result<(), LimitError> {
        limit(&self.value).map_err(|why| self.refuse(why))
    }
}

/// A setting outside its limits: `--repeats 3: at least 20 repeats are needed for a P95 (…)`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{setting}: {why}")]
pub struct LimitError {
    pub setting: String,
    pub why: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_written_as_the_user_wrote_it() {
        assert_eq!(Setting::new(3, Origin::Flag("--repeats")).written(), "--repeats 3");
        assert_eq!(Setting::new(0, Origin::Env("COMMGATE_RESAMPLES")).written(), "COMMGATE_RESAMPLES=0");
        let file = Origin::File { place: "ci/gate.toml:4:1".into(), section: "bench", key: "repeats" };
        assert_eq!(Setting::new(3, file).written(), "ci/gate.toml:4:1: bench.repeats = 3");
        assert_eq!(Setting::new(200, Origin::Default("--repeats")).written(), "the default --repeats 200");
        let e =
            Setting::new(3, Origin::Flag("--repeats")).within(|v| if *v < 20 { Err("too few".into()) } else { Ok(()) });
        assert_eq!(e.unwrap_err().to_string(), "--repeats 3: too few");
    }
}
