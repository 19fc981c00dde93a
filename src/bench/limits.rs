//! The limits of every count and size a benchmark or a comparison can be asked for, and the one
//! check of them. `config` reads each value with where it came from (a [`Setting`]: a flag, a
//! `COMMGATE_*` variable, a key of `commgate.toml`) and checks it here before anything runs;
//! [`check_plan`] checks the plan that `BenchRequest::resolve` builds from them (the launcher's
//! world size, the visible GPUs, the backend's defaults) as a whole, with checked arithmetic,
//! so a wrapped count or size never reaches a run. A refusal is one line that names the flag,
//! variable or file key, the value, the limit and why it is there.
//!
//! The comparison's `resamples` and `min_effect` are checked here too: they bound the same thing
//! as `repeats`, the work the gate does with a run's samples.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use super::Dtype;

/// Fewer repeats than this and a type-7 P95 is an interpolation between the two slowest repeats,
/// not a tail estimate.
pub const MIN_REPEATS: u32 = 20;
/// Every sample is kept in the result file (≈ 20 bytes of JSON each, four schedules) and
/// resampled by `compare`; beyond this a run only costs time and disk.
pub const MAX_REPEATS: u32 = 100_000;
/// Warm-up only has to reach steady clocks and NCCL's first-call setup (the default is 10).
pub const MAX_WARMUP: u32 = 10_000;
/// Ranks one process drives (threads on cpu, GPUs on cuda); a larger job runs under a launcher,
/// one process per rank.
pub const MAX_WORLD_SIZE: u32 = 1_024;
/// Timings rank 0 gathers per schedule, ranks × repeats: 2²⁴ × 4 schedules × 8 bytes = 512 MiB.
pub const MAX_RANK_REPEATS: u64 = 1 << 24;
/// The all-reduce buffer per rank: more than any gradient bucket or nccl-tests sweep uses.
pub const MAX_PAYLOAD_BYTES: u64 = 64 << 30;
/// A 65536³ matmul takes about half a second per step at 1 PFLOP/s, with 24–48 GiB of matrices.
pub const MAX_COMPUTE_DIM: u64 = 65_536;
/// A repeat that makes no progress for a day has hung.
pub const MAX_TIMEOUT_S: u64 = 86_400;
/// Bootstrap resamples per interval: below this the 95 % interval's ends rest on a handful of
/// resamples.
pub const MIN_RESAMPLES: usize = 100;
/// Beyond this the interval's ends no longer move; the time grows linearly.
pub const MAX_RESAMPLES: usize = 100_000;

/// Where a setting's value came from, so that a refusal names what to change.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// A command-line flag, e.g. `--repeats`.
    Flag(&'static str),
    /// An environment variable, e.g. `COMMGATE_RESAMPLES`.
    Env(&'static str),
    /// A key of the settings file.
    File { path: PathBuf, section: &'static str, key: &'static str },
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
    /// `commgate.toml: [bench] repeats = 3`.
    pub fn written(&self) -> String {
        let v = &self.value;
        match &self.origin {
            Origin::Flag(flag) => format!("{flag} {v}"),
            Origin::Env(var) => format!("{var}={v}"),
            Origin::File { path, section, key } => format!("{}: [{section}] {key} = {v}", path.display()),
            Origin::Table { place, table, key } => format!("{place}: [workloads.{table}] {key} = {v}"),
            Origin::Launcher => format!("the launcher's world size {v}"),
            Origin::VisibleGpus => format!("{v} visible GPU(s) (the default --world-size)"),
            Origin::Default(flag) => format!("the default {flag} {v}"),
        }
    }

    fn refuse(&self, why: impl Into<String>) -> LimitError {
        LimitError { setting: self.written(), why: why.into() }
    }
}

/// A setting outside its limits: `--repeats 3: at least 20 repeats are needed for a P95 (…)`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{setting}: {why}")]
pub struct LimitError {
    pub setting: String,
    pub why: String,
}

/// A setting's names: its flag, its environment variable (if it has one) and its key in
/// `commgate.toml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub flag: &'static str,
    pub env: Option<&'static str>,
    pub section: &'static str,
    pub name: &'static str,
}

pub const WORLD_SIZE: Key = Key::bench("--world-size", None, "world_size");
pub const PAYLOAD_ELEMENTS: Key = Key::bench("--payload-elements", None, "payload_elements");
pub const COMPUTE_DIM: Key = Key::bench("--compute-dim", None, "compute_dim");
pub const WARMUP: Key = Key::bench("--warmup", None, "warmup");
pub const REPEATS: Key = Key::bench("--repeats", None, "repeats");
pub const TIMEOUT: Key = Key::bench("--timeout", Some("COMMGATE_TIMEOUT"), "timeout");
pub const ENVIRONMENT_PROFILE: Key =
    Key::bench("--environment-profile", Some("COMMGATE_ENVIRONMENT_PROFILE"), "environment_profile");
pub const RESAMPLES: Key =
    Key { flag: "--resamples", env: Some("COMMGATE_RESAMPLES"), section: "compare", name: "resamples" };
pub const MIN_EFFECT: Key =
    Key { flag: "--min-effect", env: Some("COMMGATE_MIN_EFFECT"), section: "compare", name: "min_effect" };

impl Key {
    const fn bench(flag: &'static str, env: Option<&'static str>, name: &'static str) -> Key {
        Key { flag, env, section: "bench", name }
    }

    /// The value that wins, flags > environment > file, with where it came from. clap has already
    /// merged the flag with its variable; the variable is named when it holds the winning value
    /// (a flag equal to it would say the same).
    pub fn pick<T: FromStr + PartialEq>(
        &self,
        arg: Option<T>,
        file: Option<T>,
        file_path: &Path,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Option<Setting<T>> {
        if let Some(value) = arg {
            let from_env = self.env.filter(|var| env(var).and_then(|s| s.parse::<T>().ok()).as_ref() == Some(&value));
            let origin = from_env.map_or(Origin::Flag(self.flag), Origin::Env);
            return Some(Setting::new(value, origin));
        }
        file.map(|value| {
            Setting::new(value, Origin::File { path: file_path.to_path_buf(), section: self.section, key: self.name })
        })
    }

    /// A setting from the file alone (for commands without the flag).
    pub fn from_file<T>(&self, file: Option<T>, file_path: &Path) -> Option<Setting<T>> {
        file.map(|value| {
            Setting::new(value, Origin::File { path: file_path.to_path_buf(), section: self.section, key: self.name })
        })
    }
}

/// `--world-size` as given: a job has at least one rank, and one process drives at most
/// [`MAX_WORLD_SIZE`]. (One rank is refused later, by [`check_plan`], where `--allow-single-rank`
/// and the visible GPUs are known.)
pub fn world_size(s: &Setting<u32>) -> Result<(), LimitError> {
    if s.value == 0 {
        return Err(
            s.refuse("a job needs at least one rank; leave it out to use every visible GPU (2 ranks on cpu and mock)")
        );
    }
    if s.value > MAX_WORLD_SIZE {
        return Err(s.refuse(format!(
            "one process drives at most {MAX_WORLD_SIZE} ranks; run a larger job under a launcher \
             (torchrun, srun, mpirun), one process per rank"
        )));
    }
    Ok(())
}

pub fn repeats(s: &Setting<u32>) -> Result<(), LimitError> {
    if s.value < MIN_REPEATS {
        return Err(s.refuse(format!(
            "at least {MIN_REPEATS} repeats are needed for a P95 (use 200 for a gate; the run judges itself from 100)"
        )));
    }
    if s.value > MAX_REPEATS {
        return Err(s.refuse(format!(
            "at most {MAX_REPEATS} repeats: every sample is kept in the result file and resampled by compare, \
             and more adds nothing a gate can use"
        )));
    }
    Ok(())
}

pub fn warmup(s: &Setting<u32>) -> Result<(), LimitError> {
    if s.value > MAX_WARMUP {
        return Err(s.refuse(format!(
            "at most {MAX_WARMUP} warm-up repeats: warm-up only has to reach steady clocks and NCCL's \
             first-call setup (the default is 10)"
        )));
    }
    Ok(())
}

pub fn payload_elements(s: &Setting<u64>) -> Result<(), LimitError> {
    if s.value == 0 {
        return Err(s.refuse("the all-reduce needs at least one element per rank"));
    }
    Ok(())
}

pub fn compute_dim(s: &Setting<u64>) -> Result<(), LimitError> {
    if s.value == 0 {
        return Err(s.refuse("the matmul needs a dimension of at least 1"));
    }
    if s.value > MAX_COMPUTE_DIM {
        return Err(s.refuse(format!(
            "at most {MAX_COMPUTE_DIM}: a {MAX_COMPUTE_DIM}³ matmul already takes about half a second per step \
             at 1 PFLOP/s"
        )));
    }
    Ok(())
}

/// `--timeout` in seconds (default 300), as a duration.
pub fn timeout(s: Option<Setting<u64>>) -> Result<Duration, LimitError> {
    let Some(s) = s else { return Ok(Duration::from_secs(300)) };
    if s.value == 0 || s.value > MAX_TIMEOUT_S {
        return Err(s.refuse(format!(
            "give 1 to {MAX_TIMEOUT_S} seconds (a day): how long a run may go without finishing a repeat \
             before it counts as hung"
        )));
    }
    Ok(Duration::from_secs(s.value))
}

/// `--environment-profile` names a directory of the baseline store: it must be a name the store
/// accepts, checked before the run rather than after it.
pub fn environment_profile(s: Setting<String>) -> Result<String, LimitError> {
    match crate::baseline::store_path_for(Path::new(""), &s.value, super::assemble::WORKLOAD_ID) {
        Ok(_) => Ok(s.value),
        Err(_) => Err(LimitError {
            setting: match &s.origin {
                // The value is the user's own, shown escaped so that a control character cannot
                // break the line.
                Origin::Env(var) => format!("{var}={:?}", s.value),
                _ => Setting::new(format!("{:?}", s.value), s.origin.clone()).written(),
            },
            why: "the profile names a baseline directory: use letters, digits, '-', '_', '.' or '+'".to_string(),
        }),
    }
}

/// `--resamples` (default 1000).
pub fn resamples(s: Option<Setting<usize>>, default: usize) -> Result<usize, LimitError> {
    let Some(s) = s else { return Ok(default) };
    if s.value < MIN_RESAMPLES || s.value > MAX_RESAMPLES {
        return Err(s.refuse(format!(
            "give {MIN_RESAMPLES} to {MAX_RESAMPLES} bootstrap resamples per interval (1000 is the default): \
             fewer leave the 95 % interval's ends to a handful of draws, more only cost time"
        )));
    }
    Ok(s.value)
}

/// `--min-effect` (default 0.03): a fraction in [0, 1).
pub fn min_effect(s: Option<Setting<f64>>, default: f64) -> Result<f64, LimitError> {
    let Some(s) = s else { return Ok(default) };
    if !(0.0..1.0).contains(&s.value) {
        return Err(s.refuse("give the smallest change worth acting on as a fraction in [0, 1), e.g. 0.03 for 3 %"));
    }
    Ok(s.value)
}

/// What [`check_plan`] checks: the resolved plan's numbers, each with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanSettings {
    pub world_size: Setting<u32>,
    pub dtype: Dtype,
    pub payload_elements: Setting<u64>,
    pub compute_dim: Setting<u64>,
    pub warmup: Setting<u32>,
    pub repeats: Setting<u32>,
    /// `--allow-single-rank`: one rank is a smoke run, not a measurement of communication.
    pub allow_single_rank: bool,
}

/// The plan as a whole, once the world size and the defaults are known: one rank only when asked
/// for, the payload's bytes, the timings rank 0 gathers. Every product is checked; a value that
/// would wrap is refused like one that is too large.
pub fn check_plan(p: &PlanSettings) -> Result<(), LimitError> {
    repeats(&p.repeats)?;
    warmup(&p.warmup)?;
    payload_elements(&p.payload_elements)?;
    compute_dim(&p.compute_dim)?;
    let world = &p.world_size;
    if world.value == 0 {
        return Err(world.refuse("a job needs at least one rank"));
    }
    if world.value == 1 && !p.allow_single_rank {
        return Err(world.refuse(
            "one rank communicates nothing, so bus bandwidth and exposed communication mean nothing; \
             pass --allow-single-rank for a smoke run (loading, timing and GEMM only), or run on 2 or more GPUs",
        ));
    }
    let bytes = p.payload_elements.value.checked_mul(p.dtype.size()).filter(|b| *b <= MAX_PAYLOAD_BYTES);
    if bytes.is_none() {
        return Err(p.payload_elements.refuse(format!(
            "at {} bytes an element ({}) that is more than {} GiB per rank, more than any gradient bucket \
             or nccl-tests sweep uses",
            p.dtype.size(),
            p.dtype.as_str(),
            MAX_PAYLOAD_BYTES >> 30
        )));
    }
    let gathered = u64::from(world.value).checked_mul(u64::from(p.repeats.value)).filter(|n| *n <= MAX_RANK_REPEATS);
    if gathered.is_none() {
        return Err(p.repeats.refuse(format!(
            "with {} ranks rank 0 would gather more than {MAX_RANK_REPEATS} timings per schedule \
             (ranks × repeats, 512 MiB in all); lower the repeats",
            world.value
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag<T>(value: T, key: Key) -> Setting<T> {
        Setting::new(value, Origin::Flag(key.flag))
    }

    fn plan() -> PlanSettings {
        let d = |v, f| Setting::new(v, Origin::Default(f));
        PlanSettings {
            world_size: Setting::new(2, Origin::Default("--world-size")),
            dtype: Dtype::Bfloat16,
            payload_elements: d(4 << 20, "--payload-elements"),
            compute_dim: d(2048, "--compute-dim"),
            warmup: Setting::new(10, Origin::Default("--warmup")),
            repeats: Setting::new(200, Origin::Default("--repeats")),
            allow_single_rank: false,
        }
    }

    #[test]
    fn each_limit_names_the_setting_and_why() {
        let e = repeats(&flag(3, REPEATS)).unwrap_err();
        assert_eq!(e.setting, "--repeats 3");
        assert!(e.why.starts_with("at least 20 repeats are needed for a P95"), "{e}");
        assert!(repeats(&flag(MIN_REPEATS, REPEATS)).is_ok());
        assert!(repeats(&flag(MAX_REPEATS, REPEATS)).is_ok());
        assert!(repeats(&flag(MAX_REPEATS + 1, REPEATS)).unwrap_err().why.contains("at most 100000"));
        assert!(warmup(&flag(0, WARMUP)).is_ok());
        assert!(warmup(&flag(MAX_WARMUP, WARMUP)).is_ok());
        let e = warmup(&flag(u32::MAX, WARMUP)).unwrap_err();
        assert_eq!(e.to_string().lines().count(), 1);
        assert!(e.to_string().starts_with("--warmup 4294967295: at most 10000"), "{e}");
        assert!(world_size(&flag(0, WORLD_SIZE)).unwrap_err().to_string().starts_with("--world-size 0: "));
        assert!(world_size(&flag(1, WORLD_SIZE)).is_ok(), "one rank is check_plan's to judge");
        assert!(world_size(&flag(MAX_WORLD_SIZE + 1, WORLD_SIZE)).is_err());
        assert!(payload_elements(&flag(0, PAYLOAD_ELEMENTS)).is_err());
        assert!(compute_dim(&flag(0, COMPUTE_DIM)).is_err());
        assert!(compute_dim(&flag(MAX_COMPUTE_DIM, COMPUTE_DIM)).is_ok());
        assert!(compute_dim(&flag(MAX_COMPUTE_DIM + 1, COMPUTE_DIM)).is_err());
    }

    #[test]
    fn timeouts_resamples_and_min_effect() {
        assert_eq!(timeout(None), Ok(Duration::from_secs(300)));
        assert_eq!(timeout(Some(flag(60, TIMEOUT))), Ok(Duration::from_secs(60)));
        // Instant + u64::MAX seconds would panic in the rendezvous.
        assert!(timeout(Some(flag(u64::MAX, TIMEOUT))).is_err());
        assert!(timeout(Some(flag(0, TIMEOUT))).is_err());
        assert_eq!(resamples(None, 1000), Ok(1000));
        let e = resamples(Some(Setting::new(0, Origin::Env("COMMGATE_RESAMPLES"))), 1000).unwrap_err();
        assert!(e.to_string().starts_with("COMMGATE_RESAMPLES=0: give 100 to 100000"), "{e}");
        assert!(resamples(Some(flag(MAX_RESAMPLES + 1, RESAMPLES)), 1000).is_err());
        assert_eq!(min_effect(Some(flag(0.05, MIN_EFFECT)), 0.03), Ok(0.05));
        for bad in [1.0, -0.1, f64::NAN, f64::INFINITY] {
            assert!(min_effect(Some(flag(bad, MIN_EFFECT)), 0.03).is_err(), "{bad}");
        }
    }

    #[test]
    fn profile_names_follow_the_store() {
        assert_eq!(
            environment_profile(flag("H100x8-nvlink+ib".into(), ENVIRONMENT_PROFILE)).as_deref(),
            Ok("H100x8-nvlink+ib")
        );
        for bad in ["", "..", "a/b", "x y", "ü"] {
            let e = environment_profile(flag(bad.into(), ENVIRONMENT_PROFILE)).unwrap_err();
            assert!(e.to_string().starts_with(&format!("--environment-profile {bad:?}: ")), "{e}");
        }
        let e =
            environment_profile(Setting::new("a\nb".into(), Origin::Env("COMMGATE_ENVIRONMENT_PROFILE"))).unwrap_err();
        assert_eq!(e.to_string().lines().count(), 1, "{e}");
    }

    #[test]
    fn settings_say_where_they_came_from() {
        let no_env = |_: &str| None;
        let file = Path::new("ci/commgate.toml");
        assert_eq!(
            REPEATS.pick(Some(7u32), Some(9), file, &no_env).map(|s| s.written()).as_deref(),
            Some("--repeats 7")
        );
        assert_eq!(
            REPEATS.pick(None, Some(9u32), file, &no_env).map(|s| s.written()).as_deref(),
            Some("ci/commgate.toml: [bench] repeats = 9")
        );
        assert_eq!(REPEATS.pick::<u32>(None, None, file, &no_env), None);
        let env = |k: &str| (k == "COMMGATE_RESAMPLES").then(|| "50".to_string());
        assert_eq!(
            RESAMPLES.pick(Some(50usize), None, file, &env).map(|s| s.written()).as_deref(),
            Some("COMMGATE_RESAMPLES=50")
        );
        // A flag that differs from the variable won over it.
        assert_eq!(
            RESAMPLES.pick(Some(60usize), None, file, &env).map(|s| s.written()).as_deref(),
            Some("--resamples 60")
        );
    }

    #[test]
    fn the_plan_is_checked_as_a_whole() {
        assert_eq!(check_plan(&plan()), Ok(()));
        let one = PlanSettings { world_size: Setting::new(1, Origin::VisibleGpus), ..plan() };
        let e = check_plan(&one).unwrap_err();
        assert!(e.to_string().starts_with("1 visible GPU(s) (the default --world-size): one rank"), "{e}");
        assert!(e.why.contains("--allow-single-rank"));
        assert_eq!(check_plan(&PlanSettings { allow_single_rank: true, ..one }), Ok(()));
        let huge =
            PlanSettings { dtype: Dtype::Float32, payload_elements: flag(u64::MAX / 2, PAYLOAD_ELEMENTS), ..plan() };
        let e = check_plan(&huge).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "--payload-elements 9223372036854775807: at 4 bytes an element (float32) that is more than 64 GiB"
            ),
            "{e}"
        );
        let edge = PlanSettings { payload_elements: flag(MAX_PAYLOAD_BYTES / 2, PAYLOAD_ELEMENTS), ..plan() };
        assert_eq!(check_plan(&edge), Ok(()));
        let gather = PlanSettings {
            world_size: Setting::new(1_000, Origin::Launcher),
            repeats: flag(MAX_REPEATS, REPEATS),
            ..plan()
        };
        assert!(check_plan(&gather).unwrap_err().to_string().starts_with("--repeats 100000: with 1000 ranks"));
    }
}
