//! The benchmark's five sizes and counts (ranks, payload, matmul dimension, warm-up, repeats),
//! typed once for every stage they pass through on their way from flag to plan, with their
//! limits beside them.
//!
//! One struct, [`Sizes`], whose fields are the five numbers; its stage says what each field holds:
//!
//! | stage | a field holds | where |
//! |---|---|---|
//! | [`Given`] | `Option<T>`: a value a `[workloads.<name>]` table writes | `config` reads the file |
//! | [`Asked`] | `Option<Setting<T>>`: the value asked for (flags > environment > table > `[bench]`), with where it came from | [`BenchRequest`](super::settings::BenchRequest) |
//! | [`Resolved`] | `Setting<T>`: every value, the backend's defaults and the world size filled in | [`BenchRequest::resolve`](super::settings::BenchRequest::resolve) checks the plan as a whole |
//! | [`Plain`] | `T`: the number | the defaults, and the [`Plan`](super::Plan) every rank runs |
//!
//! Each limit is a check of one value alone that says why it is refused (the command line's
//! declarations of the flags point at them, so a flag, its variable, its `[bench]` key and its
//! `[workloads.<name>]` key are refused by the same words); [`Sizes::<Resolved>::within_limits`] then checks
//! the plan as a whole, with checked arithmetic, so a wrapped count or size never reaches a run.

use std::fmt;

use super::origin::{LimitError, Origin, Setting};
use super::Dtype;
use commgate_stats::quantile::P95_MIN_SAMPLES;

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

/// The numbers a [`Sizes`] holds.
pub trait Number: Copy + fmt::Debug + fmt::Display + PartialEq + 'static {}
impl Number for u32 {}
impl Number for u64 {}

/// What each field of a [`Sizes`] holds at one stage (the module doc's table).
pub trait Stage {
    type Of<T: Number>: Clone + fmt::Debug + PartialEq;
}

/// A `[workloads.<name>]` table's values, as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Given;
/// The values asked for, each with where it came from; `None` where the default depends on the
/// backend that will run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asked;
/// Every value, with where it came from (a default or the launcher included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved;
/// The numbers alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plain;

impl Stage for Given {
    type Of<T: Number> = Option<T>;
}
impl Stage for Asked {
    type Of<T: Number> = Option<Setting<T>>;
}
impl Stage for Resolved {
    type Of<T: Number> = Setting<T>;
}
impl Stage for Plain {
    type Of<T: Number> = T;
}

/// The benchmark's sizes and counts at one [`Stage`].
#[derive(Debug, Clone, PartialEq)]
pub struct Sizes<S: Stage> {
    /// Ranks in the job (all processes together).
    pub world_size: S::Of<u32>,
    /// Elements of the all-reduce buffer on each rank.
    pub payload_elements: S::Of<u64>,
    /// The matmul is `compute_dim`³ (square, C = A·B).
    pub compute_dim: S::Of<u64>,
    /// Untimed repeats first.
    pub warmup: S::Of<u32>,
    /// Timed repeats of every schedule.
    pub repeats: S::Of<u32>,
}

impl Sizes<Given> {
    /// A table that sets none of them.
    pub fn none() -> Self {
        Sizes { world_size: None, payload_elements: None, compute_dim: None, warmup: None, repeats: None }
    }
}

impl Sizes<Asked> {
    /// Nothing asked for: every value is the backend's default.
    pub fn none() -> Self {
        Sizes { world_size: None, payload_elements: None, compute_dim: None, warmup: None, repeats: None }
    }

    /// Each value asked for, within its own limit (the plan as a whole is checked once resolved).
    pub fn each_within_limits(&self) -> Result<(), LimitError> {
        fn within<T: Number>(s: &Option<Setting<T>>, limit: fn(&T) -> Result<(), String>) -> Result<(), LimitError> {
            s.as_ref().map_or(Ok(()), |s| s.within(limit))
        }
        within(&self.world_size, world_size)?;
        within(&self.payload_elements, payload_elements)?;
        within(&self.compute_dim, compute_dim)?;
        within(&self.warmup, warmup)?;
        within(&self.repeats, repeats)
    }

    /// A `[workloads.<name>]` table's values layered in: a flag or a variable wins over the
    /// table's value, which wins over `[bench]`'s. `origin` names the table's key.
    pub fn under(&self, table: &Sizes<Given>, origin: impl Fn(&'static str) -> Origin) -> Self {
        fn layer<T: Number>(
            asked: &Option<Setting<T>>,
            table: Option<T>,
            origin: impl FnOnce() -> Origin,
        ) -> Option<Setting<T>> {
            match (asked, table) {
                (Some(s), _) if matches!(s.origin, Origin::Flag(_) | Origin::Env(_)) => asked.clone(),
                (_, Some(v)) => Some(Setting::new(v, origin())),
                (_, None) => asked.clone(),
            }
        }
        Sizes {
            world_size: layer(&self.world_size, table.world_size, || origin("world_size")),
            payload_elements: layer(&self.payload_elements, table.payload_elements, || origin("payload_elements")),
            compute_dim: layer(&self.compute_dim, table.compute_dim, || origin("compute_dim")),
            warmup: layer(&self.warmup, table.warmup, || origin("warmup")),
            repeats: layer(&self.repeats, table.repeats, || origin("repeats")),
        }
    }

    /// Every value: the one asked for, else `defaults`' under the flag that would change it. The
    /// world size is resolved by the caller (a launcher's, the visible GPUs, else the default).
    pub fn or_defaults(self, world_size: Setting<u32>, defaults: &Sizes<Plain>) -> Sizes<Resolved> {
        fn or<T: Number>(asked: Option<Setting<T>>, value: T, flag: &'static str) -> Setting<T> {
            asked.unwrap_or_else(|| Setting::new(value, Origin::Default(flag)))
        }
        Sizes {
            world_size,
            payload_elements: or(self.payload_elements, defaults.payload_elements, "--payload-elements"),
            compute_dim: or(self.compute_dim, defaults.compute_dim, "--compute-dim"),
            warmup: or(self.warmup, defaults.warmup, "--warmup"),
            repeats: or(self.repeats, defaults.repeats, "--repeats"),
        }
    }
}

impl Sizes<Resolved> {
    /// The plan as a whole, once the world size and the defaults are known: each value within its
    /// limit, one rank only when asked for (`allow_single_rank`), the payload's bytes at `dtype`,
    /// the timings rank 0 gathers. Every product is checked; a value that would wrap is refused
    /// like one that is too large.
    pub fn within_limits(&self, dtype: Dtype, allow_single_rank: bool) -> Result<(), LimitError> {
        self.repeats.within(repeats)?;
        self.warmup.within(warmup)?;
        self.payload_elements.within(payload_elements)?;
        self.compute_dim.within(compute_dim)?;
        let world = &self.world_size;
        if world.value == 0 {
            return Err(world.refuse("a job needs at least one rank"));
        }
        if world.value == 1 && !allow_single_rank {
            return Err(world.refuse(
                "one rank communicates nothing, so bus bandwidth and exposed communication mean nothing; \
                 pass --allow-single-rank for a smoke run (loading, timing and GEMM only), or run on 2 or more GPUs",
            ));
        }
        let bytes = self.payload_elements.value.checked_mul(dtype.size()).filter(|b| *b <= MAX_PAYLOAD_BYTES);
        if bytes.is_none() {
            return Err(self.payload_elements.refuse(format!(
                "at {} bytes an element ({}) that is more than {} GiB per rank, more than any gradient bucket \
                 or nccl-tests sweep uses",
                dtype.size(),
                dtype.as_str(),
                MAX_PAYLOAD_BYTES >> 30
            )));
        }
        let gathered =
            u64::from(world.value).checked_mul(u64::from(self.repeats.value)).filter(|n| *n <= MAX_RANK_REPEATS);
        if gathered.is_none() {
            return Err(self.repeats.refuse(format!(
                "with {} ranks rank 0 would gather more than {MAX_RANK_REPEATS} timings per schedule \
                 (ranks × repeats, 512 MiB in all); lower the repeats",
                world.value
            )));
        }
        Ok(())
    }

    /// The numbers, without where they came from.
    pub fn plain(&self) -> Sizes<Plain> {
        Sizes {
            world_size: self.world_size.value,
            payload_elements: self.payload_elements.value,
            compute_dim: self.compute_dim.value,
            warmup: self.warmup.value,
            repeats: self.repeats.value,
        }
    }
}

/// `--world-size` as given: a job has at least one rank, and one process drives at most
/// [`MAX_WORLD_SIZE`]. (One rank is refused later, by [`Sizes::<Resolved>::within_limits`], where
/// `--allow-single-rank` and the visible GPUs are known.)
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

/// `--repeats`: enough for a P95, not more than a gate can use.
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

/// `--warmup`.
pub fn warmup(value: &u32) -> Result<(), String> {
    if *value > MAX_WARMUP {
        return Err(format!(
            "at most {MAX_WARMUP} warm-up repeats: warm-up only has to reach steady clocks and NCCL's \
             first-call setup (the default is 10)"
        ));
    }
    Ok(())
}

/// `--payload-elements` (its bytes are checked with the plan, where the dtype is known).
pub fn payload_elements(value: &u64) -> Result<(), String> {
    if *value == 0 {
        return Err("the all-reduce needs at least one element per rank".to_string());
    }
    Ok(())
}

/// `--compute-dim`.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn flag<T>(value: T, flag: &'static str) -> Setting<T> {
        Setting::new(value, Origin::Flag(flag))
    }

    fn plan() -> Sizes<Resolved> {
        let d = |v, f| Setting::new(v, Origin::Default(f));
        Sizes {
            world_size: Setting::new(2, Origin::Default("--world-size")),
            payload_elements: d(4 << 20, "--payload-elements"),
            compute_dim: d(2048, "--compute-dim"),
            warmup: Setting::new(10, Origin::Default("--warmup")),
            repeats: Setting::new(200, Origin::Default("--repeats")),
        }
    }

    #[test]
    fn each_limit_names_the_setting_and_why() {
        let e = flag(3, "--repeats").within(repeats).unwrap_err();
        assert_eq!(e.setting, "--repeats 3");
        assert!(e.why.starts_with("at least 20 repeats are needed for a P95"), "{e}");
        assert!(e.why.ends_with(&format!("judges itself from {P95_MIN_SAMPLES})")), "{e}");
        assert!(repeats(&MIN_REPEATS).is_ok());
        assert!(repeats(&MAX_REPEATS).is_ok());
        assert!(repeats(&(MAX_REPEATS + 1)).unwrap_err().contains("at most 100000"));
        assert!(warmup(&0).is_ok());
        assert!(warmup(&MAX_WARMUP).is_ok());
        let e = flag(u32::MAX, "--warmup").within(warmup).unwrap_err();
        assert_eq!(e.to_string().lines().count(), 1);
        assert!(e.to_string().starts_with("--warmup 4294967295: at most 10000"), "{e}");
        assert!(flag(0, "--world-size").within(world_size).unwrap_err().to_string().starts_with("--world-size 0: "));
        assert!(world_size(&1).is_ok(), "one rank is the plan's check to judge");
        assert!(world_size(&(MAX_WORLD_SIZE + 1)).is_err());
        assert!(payload_elements(&0).is_err());
        assert!(compute_dim(&0).is_err());
        assert!(compute_dim(&MAX_COMPUTE_DIM).is_ok());
        assert!(compute_dim(&(MAX_COMPUTE_DIM + 1)).is_err());
    }

    #[test]
    fn the_plan_is_checked_as_a_whole() {
        let bf16 = Dtype::Bfloat16;
        assert_eq!(plan().within_limits(bf16, false), Ok(()));
        let one = Sizes { world_size: Setting::new(1, Origin::VisibleGpus), ..plan() };
        let e = one.within_limits(bf16, false).unwrap_err();
        assert!(e.to_string().starts_with("1 visible GPU(s) (the default --world-size): one rank"), "{e}");
        assert!(e.why.contains("--allow-single-rank"));
        assert_eq!(one.within_limits(bf16, true), Ok(()));
        let huge = Sizes { payload_elements: flag(u64::MAX / 2, "--payload-elements"), ..plan() };
        let e = huge.within_limits(Dtype::Float32, false).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "--payload-elements 9223372036854775807: at 4 bytes an element (float32) that is more than 64 GiB"
            ),
            "{e}"
        );
        let edge = Sizes { payload_elements: flag(MAX_PAYLOAD_BYTES / 2, "--payload-elements"), ..plan() };
        assert_eq!(edge.within_limits(bf16, false), Ok(()));
        let gather = Sizes {
            world_size: Setting::new(1_000, Origin::Launcher),
            repeats: flag(MAX_REPEATS, "--repeats"),
            ..plan()
        };
        assert!(gather
            .within_limits(bf16, false)
            .unwrap_err()
            .to_string()
            .starts_with("--repeats 100000: with 1000 ranks"));
    }

    #[test]
    fn a_flag_beats_the_table_which_beats_bench() {
        let file = |key| Origin::File { place: "commgate.toml:2:1".into(), section: "bench", key };
        let asked = Sizes {
            repeats: Some(Setting::new(150, file("repeats"))),
            compute_dim: Some(flag(64, "--compute-dim")),
            ..Sizes::<Asked>::none()
        };
        let table = Sizes { repeats: Some(300), compute_dim: Some(512), warmup: Some(3), ..Sizes::<Given>::none() };
        let place = |key| Origin::Table { place: "commgate.toml:9:1".into(), table: "big".into(), key };
        let layered = asked.under(&table, place);
        assert_eq!(
            layered.repeats.map(|s| s.written()).as_deref(),
            Some("commgate.toml:9:1: [workloads.big] repeats = 300")
        );
        assert_eq!(layered.compute_dim.map(|s| s.value), Some(64), "the flag wins");
        assert_eq!(layered.warmup.map(|s| s.value), Some(3));
        assert_eq!(layered.world_size, None);
        let resolved = Sizes::<Asked>::none().or_defaults(
            Setting::new(2, Origin::Launcher),
            &Sizes::<Plain> { world_size: 2, payload_elements: 8, compute_dim: 16, warmup: 1, repeats: 20 },
        );
        assert_eq!(resolved.repeats.written(), "the default --repeats 20");
        assert_eq!(resolved.plain().compute_dim, 16);
    }
}
