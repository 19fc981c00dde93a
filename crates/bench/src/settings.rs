//! What a benchmark is asked to do and what it will do. `config` produces a [`BenchRequest`]
//! (each value with where it came from, checked against its limit, nothing probed); the
//! top layer calls [`BenchRequest::resolve`] once, which turns `auto` into the backend that will
//! run, fills the defaults of that backend and the world size, checks the plan as a whole, and
//! hands back at most one note for stderr. Nothing below the top layer probes the machine to
//! decide a setting.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::launch::Launch;
use super::origin::{LimitError, Origin, Setting};
use super::sizes::{Asked, Plain, Sizes};
use super::workload::{validate_unique, DuplicateId, IdChoice};
use super::{Dtype, Plan};

/// Which backend the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// CUDA when a driver, a GPU and NCCL are present, else the CPU backend (saying so).
    Auto,
    /// NCCL and cuBLAS on the GPUs (`gpu` is taken for it too: a GPU user means this).
    #[value(alias = "gpu")]
    #[serde(alias = "gpu")]
    Cuda,
    Cpu,
    Mock,
}

/// The backend that runs: `auto` resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Cuda,
    Cpu,
    Mock,
}

impl BackendKind {
    /// The result file's `workload.backend`.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Cuda => "cuda",
            BackendKind::Cpu => "cpu",
            BackendKind::Mock => "mock",
        }
    }
}

/// A benchmark as the user asked for it: flags > environment > `commgate.toml`, each value with
/// where it came from; `None` where the default depends on the backend that will run.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRequest {
    pub backend: BackendChoice,
    /// The sizes and counts asked for. A world size left out is every visible GPU on cuda, 2
    /// otherwise; a launcher's `WORLD_SIZE` wins over any.
    pub sizes: Sizes<Asked>,
    pub dtype: Dtype,
    /// `--allow-single-rank`: a one-rank run is a smoke run (loading, timing, GEMM), refused
    /// without it.
    pub allow_single_rank: bool,
    pub seed: u64,
    /// How the workload's id is chosen, once the plan is known (the default workload keeps the
    /// id stores were named by before workloads could be named).
    pub workload: IdChoice,
    pub run: RunOptions,
}

/// How a run is watched, labelled and written: the same before and after resolution.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    /// A run with no finished repeat for this long has failed (a dead rank, a hung collective).
    pub timeout: Duration,
    pub run_label: String,
    pub environment_profile: Option<String>,
    /// The result file; `None`: a new file under `results_dir`.
    pub output: Option<PathBuf>,
    pub results_dir: PathBuf,
    pub progress: bool,
    pub dry_run: bool,
    /// The NCCL algorithm and protocol pinned for the run (`--nccl-algo`, `--nccl-proto`).
    pub nccl: super::nccl::Tuning,
    /// `[bench.env]`: the `NCCL_*` variables the run is given ([`nccl_env`] checked them).
    pub env: BTreeMap<String, String>,
}

/// Everything `commgate bench` needs, resolved against the machine.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchSettings {
    pub plan: Plan,
    /// The result's `workload.id`, in its file name and its baseline store file's.
    pub workload_id: String,
    pub backend: BackendKind,
    pub run: RunOptions,
}

/// Ranks when neither `--world-size` nor a launcher says: on cpu and mock, and on cuda when the
/// GPUs cannot be counted.
const DEFAULT_WORLD_SIZE: u32 = 2;

/// Per-backend defaults: the CPU backend's payload and matmul are smaller, so that a run takes
/// seconds; its warm-up and repeats are the GPU's (a loaded machine's warm-up trim cut 120 repeats
/// below the 100 steps a P95 needs to block).
const GPU_DEFAULTS: Sizes<Plain> =
    Sizes { world_size: DEFAULT_WORLD_SIZE, payload_elements: 4 << 20, compute_dim: 2048, warmup: 10, repeats: 200 };
const CPU_DEFAULTS: Sizes<Plain> =
    Sizes { world_size: DEFAULT_WORLD_SIZE, payload_elements: 1 << 20, compute_dim: 192, warmup: 10, repeats: 200 };

/// A repeat that makes no progress for a day has hung.
pub const MAX_TIMEOUT_S: u64 = 86_400;

impl BenchRequest {
    /// Resolves the request. `probe` counts the usable GPUs (or says what is missing); it is
    /// called at most once, and only when `auto` or a cuda world size needs it. The note, when
    /// there is one, says why `auto` chose the CPU. The resolved plan is checked as a whole
    /// ([`Sizes::<Resolved>::within_limits`](super::sizes::Sizes::within_limits)): one rank without `--allow-single-rank`, a payload too large, too
    /// many timings to gather are refused here, before any work.
    pub fn resolve<E: std::fmt::Display>(
        self,
        launch: Option<&Launch>,
        probe: impl FnOnce() -> Result<u32, E>,
    ) -> Result<(BenchSettings, Option<String>), LimitError> {
        let world_size =
            launch.map(|l| Setting::new(l.world_size, Origin::Launcher)).or_else(|| self.sizes.world_size.clone());
        // The GPUs are counted only when `auto` must choose, or cuda must size the job.
        let must_count = match self.backend {
            BackendChoice::Auto => true,
            BackendChoice::Cuda => world_size.is_none(),
            BackendChoice::Cpu | BackendChoice::Mock => false,
        };
        let visible = must_count.then(|| probe().map_err(|e| e.to_string()));
        let mut note = None;
        let backend = match self.backend {
            BackendChoice::Cuda => BackendKind::Cuda,
            BackendChoice::Cpu => BackendKind::Cpu,
            BackendChoice::Mock => BackendKind::Mock,
            BackendChoice::Auto => match visible.as_ref().unwrap_or(&Ok(0)) {
                Ok(n) if *n > 0 => BackendKind::Cuda,
                Ok(_) => {
                    note = Some("no CUDA device visible; using the CPU backend (--backend cpu)".to_string());
                    BackendKind::Cpu
                }
                Err(why) => {
                    note = Some(format!("{why}; using the CPU backend (--backend cpu)"));
                    BackendKind::Cpu
                }
            },
        };
        let world_size = match (world_size, &visible) {
            (Some(n), _) => n,
            (None, Some(Ok(n))) if backend == BackendKind::Cuda && *n > 0 => Setting::new(*n, Origin::VisibleGpus),
            (None, _) => Setting::new(DEFAULT_WORLD_SIZE, Origin::Default("--world-size")),
        };
        let defaults = if backend == BackendKind::Cpu { &CPU_DEFAULTS } else { &GPU_DEFAULTS };
        let sizes = self.sizes.or_defaults(world_size, defaults);
        sizes.within_limits(self.dtype, self.allow_single_rank)?;
        let plan = Plan::new(sizes.plain(), self.dtype, self.seed);
        let workload_id = self.workload.id_for(&plan);
        Ok((BenchSettings { plan, workload_id, backend, run: self.run }, note))
    }
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

/// At most this many `[bench.env]` variables (as many as a result's `software.nccl_env` keeps).
pub const MAX_ENV_VARS: usize = 64;
/// A `[bench.env]` value longer than this is no NCCL setting.
pub const MAX_ENV_VALUE_CHARS: usize = 256;
/// `NCCL_BUFFSIZE` in `[bench.env]`: NCCL's own floor is a few KiB, and past 1 GiB a buffer per
/// peer and channel no longer fits a GPU.
pub const BUFFSIZE_RANGE: std::ops::RangeInclusive<u64> = 4096..=(1 << 30);

/// `[bench.env]`: each name an `NCCL_*` variable (capitals, digits, `_`; at most 64 characters),
/// each value one line of at most [`MAX_ENV_VALUE_CHARS`], `NCCL_BUFFSIZE` a byte count in
/// [`BUFFSIZE_RANGE`], and not the algorithm or protocol, which `nccl_algo` and `nccl_proto`
/// pin (and record). `Err((name, why))` names the first variable refused.
pub fn nccl_env(table: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, (String, String)> {
    if table.len() > MAX_ENV_VARS {
        return Err((String::new(), format!("at most {MAX_ENV_VARS} variables")));
    }
    for (name, value) in table {
        let refuse = |why: String| Err((name.clone(), why));
        let well_named = name.len() <= 64
            && name.strip_prefix("NCCL_").is_some_and(|rest| {
                !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            });
        if !well_named {
            return refuse(
                "only NCCL's own variables go here: NCCL_ followed by capitals, digits and '_' (at most 64 characters)"
                    .to_string(),
            );
        }
        if matches!(name.as_str(), "NCCL_ALGO" | "NCCL_PROTO") {
            return refuse(
                "pin the algorithm and protocol with nccl_algo and nccl_proto under [bench] (or --nccl-algo and \
                 --nccl-proto), which the result records as NCCL's choice"
                    .to_string(),
            );
        }
        if value.chars().count() > MAX_ENV_VALUE_CHARS || value.chars().any(char::is_control) {
            return refuse(format!("give one line of at most {MAX_ENV_VALUE_CHARS} characters"));
        }
        if name == "NCCL_BUFFSIZE" && buffsize(table).is_none() {
            return refuse(format!(
                "give a byte count from {} to {} (NCCL's default is 4194304)",
                BUFFSIZE_RANGE.start(),
                BUFFSIZE_RANGE.end()
            ));
        }
    }
    Ok(table.clone())
}

/// `NCCL_BUFFSIZE` of an NCCL environment, when it is a byte count NCCL would use.
pub fn buffsize(env: &BTreeMap<String, String>) -> Option<u64> {
    env.get("NCCL_BUFFSIZE").and_then(|v| v.trim().parse::<u64>().ok()).filter(|b| BUFFSIZE_RANGE.contains(b))
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

/// A workload as declared: where (`[workloads.big]`, `--payload-sizes entry 64Mi`, the command
/// line) and what it asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    pub label: String,
    pub request: BenchRequest,
}

/// Why the workloads of a run cannot all run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Limit(#[from] LimitError),
    #[error(transparent)]
    Duplicate(#[from] DuplicateId),
}

/// Resolves every declared workload ([`BenchRequest::resolve`]) and refuses two with one id,
/// before any of them runs. `probe` is called at most once for them all; the notes (why `auto`
/// chose the CPU) are returned once each.
pub fn resolve_all<E: fmt::Display>(
    declared: Vec<Declared>,
    launch: Option<&Launch>,
    probe: impl FnOnce() -> Result<u32, E>,
) -> Result<(Vec<BenchSettings>, Vec<String>), ResolveError> {
    let mut probe = Some(probe);
    let mut counted: Option<Result<u32, String>> = None;
    let mut resolved = Vec::with_capacity(declared.len());
    let mut notes: Vec<String> = Vec::new();
    for d in &declared {
        let count = || {
            counted
                .get_or_insert_with(|| match probe.take() {
                    Some(p) => p().map_err(|e| e.to_string()),
                    None => Err("the GPUs could not be counted".to_string()),
                })
                .clone()
        };
        let (settings, note) = d.request.clone().resolve(launch, count)?;
        if let Some(note) = note.filter(|n| !notes.contains(n)) {
            notes.push(note);
        }
        resolved.push(settings);
    }
    validate_unique(declared.iter().zip(&resolved).map(|(d, s)| (d.label.as_str(), s.workload_id.as_str())))?;
    Ok((resolved, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(backend: BackendChoice) -> BenchRequest {
        BenchRequest {
            backend,
            sizes: Sizes::<Asked>::none(),
            dtype: Dtype::Bfloat16,
            allow_single_rank: false,
            seed: 1,
            workload: IdChoice::Legacy,
            run: RunOptions {
                timeout: Duration::from_secs(300),
                run_label: "default".into(),
                environment_profile: None,
                output: None,
                results_dir: PathBuf::from("benchmarks/results"),
                progress: false,
                dry_run: false,
                nccl: Default::default(),
                env: BTreeMap::new(),
            },
        }
    }

    fn flag<T>(value: T, flag: &'static str) -> Option<Setting<T>> {
        Some(Setting::new(value, Origin::Flag(flag)))
    }

    fn no_probe() -> Result<u32, String> {
        panic!("no probe expected")
    }

    fn resolve(r: BenchRequest, probe: impl FnOnce() -> Result<u32, String>) -> (BenchSettings, Option<String>) {
        r.resolve(None, probe).expect("within limits")
    }

    #[test]
    fn auto_probes_once_and_says_why_it_chose_the_cpu() {
        let calls = std::cell::Cell::new(0);
        let (s, note) = resolve(request(BackendChoice::Auto), || {
            calls.set(calls.get() + 1);
            Err("libcuda.so.1 was not found".to_string())
        });
        assert_eq!((s.backend, s.plan.world_size, s.plan.repeats), (BackendKind::Cpu, 2, 200));
        assert_eq!(note.as_deref(), Some("libcuda.so.1 was not found; using the CPU backend (--backend cpu)"));
        let (s, note) = resolve(request(BackendChoice::Auto), || {
            calls.set(calls.get() + 1);
            Ok(4)
        });
        assert_eq!((s.backend, s.plan.world_size, s.plan.compute_dim, note), (BackendKind::Cuda, 4, 2048, None));
        assert_eq!(calls.get(), 2, "one probe per resolution");
        let (s, note) = resolve(request(BackendChoice::Auto), || Ok(0));
        assert_eq!(s.backend, BackendKind::Cpu);
        assert!(note.is_some_and(|n| n.contains("no CUDA device visible")));
    }

    #[test]
    fn explicit_choices_and_sizes_need_no_probe() {
        let (s, note) = resolve(request(BackendChoice::Mock), no_probe);
        assert_eq!(
            (s.backend, s.plan.world_size, s.plan.payload_elements, note),
            (BackendKind::Mock, 2, 4 << 20, None)
        );
        assert_eq!(s.workload_id, "par-overlap-allreduce-matmul", "the default workload keeps the legacy id");
        let (s, _) = resolve(BenchRequest { workload: IdChoice::Derived, ..request(BackendChoice::Cpu) }, no_probe);
        assert_eq!(s.workload_id, "allreduce-bf16-2MiB-mm192", "derived from the backend's defaults");
        let (s, _) = resolve(
            BenchRequest {
                sizes: Sizes {
                    world_size: flag(3, "--world-size"),
                    repeats: flag(70, "--repeats"),
                    ..Sizes::<Asked>::none()
                },
                ..request(BackendChoice::Cuda)
            },
            no_probe,
        );
        assert_eq!((s.plan.world_size, s.plan.repeats, s.plan.warmup), (3, 70, 10));
        let (s, _) = resolve(request(BackendChoice::Cuda), || Err("no GPU".to_string()));
        assert_eq!((s.backend, s.plan.world_size), (BackendKind::Cuda, 2));
    }

    #[test]
    fn one_rank_only_when_asked_for() {
        // A machine with one GPU: the default world size is 1, refused without the flag.
        let e = request(BackendChoice::Auto).resolve(None, || Ok::<u32, String>(1)).unwrap_err();
        assert!(e.to_string().starts_with("1 visible GPU(s) (the default --world-size): one rank"), "{e}");
        let one = Sizes { world_size: flag(1, "--world-size"), ..Sizes::<Asked>::none() };
        let e = BenchRequest { sizes: one, ..request(BackendChoice::Mock) }.resolve(None, no_probe).unwrap_err();
        assert!(e.to_string().starts_with("--world-size 1: one rank"), "{e}");
        let smoke = BenchRequest { allow_single_rank: true, ..request(BackendChoice::Cuda) };
        let (s, _) = resolve(smoke, || Ok(1));
        assert_eq!(s.plan.world_size, 1);
    }

    #[test]
    fn defaults_are_within_the_limits() {
        use super::super::sizes;
        for d in [GPU_DEFAULTS, CPU_DEFAULTS] {
            assert!(sizes::world_size(&d.world_size).is_ok());
            assert!(sizes::repeats(&d.repeats).is_ok());
            assert!(sizes::warmup(&d.warmup).is_ok());
            assert!(sizes::payload_elements(&d.payload_elements).is_ok());
            assert!(sizes::compute_dim(&d.compute_dim).is_ok());
        }
    }

    #[test]
    fn timeouts_and_profiles() {
        assert_eq!(timeout(&60), Ok(()));
        // Instant + u64::MAX seconds would panic in the rendezvous.
        assert!(timeout(&u64::MAX).is_err());
        assert!(timeout(&0).is_err());
        let flag = |v: &str| Setting::new(v.to_string(), Origin::Flag("--environment-profile"));
        assert_eq!(environment_profile(flag("H100x8-nvlink+ib")).as_deref(), Ok("H100x8-nvlink+ib"));
        for bad in ["", "..", "a/b", "x y", "ü"] {
            let e = environment_profile(flag(bad)).unwrap_err();
            assert!(e.to_string().starts_with(&format!("--environment-profile {bad:?}: ")), "{e}");
        }
        let e =
            environment_profile(Setting::new("a\nb".into(), Origin::Env("COMMGATE_ENVIRONMENT_PROFILE"))).unwrap_err();
        assert_eq!(e.to_string().lines().count(), 1, "{e}");
    }
}
