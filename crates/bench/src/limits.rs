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
pub use commgate_stats::quantile::P95_MIN_SAMPLES;
/// Bootstrap resamples per interval: below this the 95 % interval's ends rest on a handful of
/// resamples.
pub const MIN_RESAMPLES: usize = 100;
/// Beyond this the interval's ends no longer move; the time grows linearly.
pub const MAX_RESAMPLES: usize = 100_000;

/// Benchmark runs `check --runs` judges together per workload: past this the gate's time grows
/// linearly while the current side's spread no longer narrows enough to change a verdict.
pub const MAX_RUNS: u32 = 20;

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

    fn refuse(&self, why: impl Into<String>) -> LimitError {
        LimitError { setting: self.written(), why: why.into() }
    }

    /// The setting checked against `limit` (one of this module's checks of a value alone).
    pub fn check(&self, limit: impl FnOnce(&T) -> Result<(), String>) -> Result<(), LimitError> {
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

/// `--world-size` as given: a job has at least one rank, and one process drives at most
/// [`MAX_WORLD_SIZE`]. (One rank is refused later, by [`check_plan`], where `--allow-single-rank`
/// and the visible GPUs are known.)
pub fn world_size(value: &u32) -> Result<(), String> {
    if *value == 0 {
        return Err("a job needs at least one rank; leave it out to use every visible GPU (2 ranks on cpu and mock)"
            .to_string());
    }
    if *value > MAX_WORLD_SIZE {
        return Err(format!(
            "one process drives at most {MAX_WORLD_SIZE} ranks; run a larger job under a launcher \
             (torchrun, srun, mpirun), one process per rank"
        ));
    }
    Ok(())
}

pub fn repeats(value: &u32) -> Result<(), String> {
    if *value < MIN_REPEATS {
        return Err(format!(
            "at least {MIN_REPEATS} repeats are needed for a P95 (use 200 for a gate; the run judges itself from \
             {P95_MIN_SAMPLES})"
        ));
    }
    if *value > MAX_REPEATS {
        return Err(format!(
            "at most {MAX_REPEATS} repeats: every sample is kept in the result file and resampled by compare, \
             and more adds nothing a gate can use"
        ));
    }
    Ok(())
}

pub fn warmup(value: &u32) -> Result<(), String> {
    if *value > MAX_WARMUP {
        return Err(format!(
            "at most {MAX_WARMUP} warm-up repeats: warm-up only has to reach steady clocks and NCCL's \
             first-call setup (the default is 10)"
        ));
    }
    Ok(())
}

pub fn payload_elements(value: &u64) -> Result<(), String> {
    if *value == 0 {
        return Err("the all-reduce needs at least one element per rank".to_string());
    }
    Ok(())
}

pub fn compute_dim(value: &u64) -> Result<(), String> {
    if *value == 0 {
        return Err("the matmul needs a dimension of at least 1".to_string());
    }
    if *value > MAX_COMPUTE_DIM {
        return Err(format!(
            "at most {MAX_COMPUTE_DIM}: a {MAX_COMPUTE_DIM}³ matmul already takes about half a second per step \
             at 1 PFLOP/s"
        ));
    }
    Ok(())
}

/// `--timeout` in seconds.
pub fn timeout(seconds: &u64) -> Result<(), String> {
    if *seconds == 0 || *seconds > MAX_TIMEOUT_S {
        return Err(format!(
            "give 1 to {MAX_TIMEOUT_S} seconds (a day): how long a run may go without finishing a repeat \
             before it counts as hung"
        ));
    }
    Ok(())
}

/// `--environment-profile` names a directory of the baseline store: it must be a name the store
/// accepts, checked before the run rather than after it.
pub fn environment_profile(s: Setting<String>) -> Result<String, LimitError> {
    if commgate_core::result::is_store_name(&s.value) {
        return Ok(s.value);
    }
    Err(LimitError {
        setting: match &s.origin {
            // The value is the user's own, shown escaped so that a control character cannot
            // break the line.
            Origin::Env(var) => format!("{var}={:?}", s.value),
            _ => Setting::new(format!("{:?}", s.value), s.origin.clone()).written(),
        },
        why: "the profile names a baseline directory: use letters, digits, '-', '_', '.' or '+'".to_string(),
    })
}

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

/// `--resamples`.
pub fn resamples(value: &usize) -> Result<(), String> {
    if *value < MIN_RESAMPLES || *value > MAX_RESAMPLES {
        return Err(format!(
            "give {MIN_RESAMPLES} to {MAX_RESAMPLES} bootstrap resamples per interval ({} is the default): \
             fewer leave the 95 % interval's ends to a handful of draws, more only cost time",
            commgate_stats::bootstrap::DEFAULT_RESAMPLES
        ));
    }
    Ok(())
}

/// `--min-effect`: a fraction in [0, 1).
pub fn min_effect(value: &f64) -> Result<(), String> {
    if !(0.0..1.0).contains(value) {
        return Err("give the smallest change worth acting on as a fraction in [0, 1), e.g. 0.03 for 3 %".to_string());
    }
    Ok(())
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
    p.repeats.check(repeats)?;
    p.warmup.check(warmup)?;
    p.payload_elements.check(payload_elements)?;
    p.compute_dim.check(compute_dim)?;
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

    fn flag<T>(value: T, flag: &'static str) -> Setting<T> {
        Setting::new(value, Origin::Flag(flag))
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
        let e = flag(3, "--repeats").check(repeats).unwrap_err();
        assert_eq!(e.setting, "--repeats 3");
        assert!(e.why.starts_with("at least 20 repeats are needed for a P95"), "{e}");
        assert!(e.why.ends_with(&format!("judges itself from {P95_MIN_SAMPLES})")), "{e}");
        assert!(repeats(&MIN_REPEATS).is_ok());
        assert!(repeats(&MAX_REPEATS).is_ok());
        assert!(repeats(&(MAX_REPEATS + 1)).unwrap_err().contains("at most 100000"));
        assert!(warmup(&0).is_ok());
        assert!(warmup(&MAX_WARMUP).is_ok());
        let e = flag(u32::MAX, "--warmup").check(warmup).unwrap_err();
        assert_eq!(e.to_string().lines().count(), 1);
        assert!(e.to_string().starts_with("--warmup 4294967295: at most 10000"), "{e}");
        assert!(flag(0, "--world-size").check(world_size).unwrap_err().to_string().starts_with("--world-size 0: "));
        assert!(world_size(&1).is_ok(), "one rank is check_plan's to judge");
        assert!(world_size(&(MAX_WORLD_SIZE + 1)).is_err());
        assert!(payload_elements(&0).is_err());
        assert!(compute_dim(&0).is_err());
        assert!(compute_dim(&MAX_COMPUTE_DIM).is_ok());
        assert!(compute_dim(&(MAX_COMPUTE_DIM + 1)).is_err());
    }

    #[test]
    fn timeouts_resamples_and_min_effect() {
        assert_eq!(timeout(&60), Ok(()));
        // Instant + u64::MAX seconds would panic in the rendezvous.
        assert!(timeout(&u64::MAX).is_err());
        assert!(timeout(&0).is_err());
        let e = Setting::new(0, Origin::Env("COMMGATE_RESAMPLES")).check(resamples).unwrap_err();
        assert!(e.to_string().starts_with("COMMGATE_RESAMPLES=0: give 100 to 100000"), "{e}");
        assert!(e.why.contains("(1000 is the default)"), "{e}");
        assert!(resamples(&(MAX_RESAMPLES + 1)).is_err());
        assert_eq!(min_effect(&0.05), Ok(()));
        for bad in [1.0, -0.1, f64::NAN, f64::INFINITY] {
            assert!(min_effect(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn profile_names_follow_the_store() {
        assert_eq!(
            environment_profile(flag("H100x8-nvlink+ib".into(), "--environment-profile")).as_deref(),
            Ok("H100x8-nvlink+ib")
        );
        for bad in ["", "..", "a/b", "x y", "ü"] {
            let e = environment_profile(flag(bad.into(), "--environment-profile")).unwrap_err();
            assert!(e.to_string().starts_with(&format!("--environment-profile {bad:?}: ")), "{e}");
        }
        let e =
            environment_profile(Setting::new("a\nb".into(), Origin::Env("COMMGATE_ENVIRONMENT_PROFILE"))).unwrap_err();
        assert_eq!(e.to_string().lines().count(), 1, "{e}");
    }

    #[test]
    fn the_plan_is_checked_as_a_whole() {
        assert_eq!(check_plan(&plan()), Ok(()));
        let one = PlanSettings { world_size: Setting::new(1, Origin::VisibleGpus), ..plan() };
        let e = check_plan(&one).unwrap_err();
        assert!(e.to_string().starts_with("1 visible GPU(s) (the default --world-size): one rank"), "{e}");
        assert!(e.why.contains("--allow-single-rank"));
        assert_eq!(check_plan(&PlanSettings { allow_single_rank: true, ..one }), Ok(()));
        let huge = PlanSettings {
            dtype: Dtype::Float32,
            payload_elements: flag(u64::MAX / 2, "--payload-elements"),
            ..plan()
        };
        let e = check_plan(&huge).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "--payload-elements 9223372036854775807: at 4 bytes an element (float32) that is more than 64 GiB"
            ),
            "{e}"
        );
        let edge = PlanSettings { payload_elements: flag(MAX_PAYLOAD_BYTES / 2, "--payload-elements"), ..plan() };
        assert_eq!(check_plan(&edge), Ok(()));
        let gather = PlanSettings {
            world_size: Setting::new(1_000, Origin::Launcher),
            repeats: flag(MAX_REPEATS, "--repeats"),
            ..plan()
        };
        assert!(check_plan(&gather).unwrap_err().to_string().starts_with("--repeats 100000: with 1000 ranks"));
    }
}
