//! What a benchmark is asked to do and what it will do. `config` produces a [`BenchRequest`]
//! (validated, nothing probed); the top layer calls [`BenchRequest::resolve`] once, which turns
//! `auto` into the backend that will run, fills the defaults of that backend and the world size,
//! and hands back at most one note for stderr. Nothing below the top layer probes the machine to
//! decide a setting.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::launch::Launch;
use super::{Dtype, Plan};

/// Which backend the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// CUDA when a driver, a GPU and NCCL are present, else the CPU backend (saying so).
    Auto,
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

/// A benchmark as the user asked for it: flags > environment > `commgate.toml`, validated;
/// `None` where the default depends on the backend that will run.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRequest {
    pub backend: BackendChoice,
    /// `None` (or 0): every visible GPU on cuda, 2 otherwise; a launcher's `WORLD_SIZE` wins.
    pub world_size: Option<u32>,
    pub dtype: Dtype,
    pub payload_elements: Option<u64>,
    pub compute_dim: Option<u64>,
    pub warmup: Option<u32>,
    pub repeats: Option<u32>,
    pub seed: u64,
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
}

/// Everything `commgate bench` needs, resolved against the machine.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchSettings {
    pub plan: Plan,
    pub backend: BackendKind,
    pub run: RunOptions,
}

/// Per-backend defaults: the CPU backend's are smaller, so that a run takes seconds.
struct Defaults {
    payload_elements: u64,
    compute_dim: u64,
    warmup: u32,
    repeats: u32,
}

const GPU_DEFAULTS: Defaults = Defaults { payload_elements: 4 << 20, compute_dim: 2048, warmup: 10, repeats: 200 };
const CPU_DEFAULTS: Defaults = Defaults { payload_elements: 1 << 20, compute_dim: 192, warmup: 3, repeats: 120 };

/// Ranks when neither `--world-size` nor a launcher says: on cpu and mock, and on cuda when the
/// GPUs cannot be counted.
const DEFAULT_WORLD_SIZE: u32 = 2;

impl BenchRequest {
    /// Resolves the request. `probe` counts the usable GPUs (or says what is missing); it is
    /// called at most once, and only when `auto` or a cuda world size needs it. The note, when
    /// there is one, says why `auto` chose the CPU.
    pub fn resolve<E: std::fmt::Display>(
        self,
        launch: Option<&Launch>,
        probe: impl FnOnce() -> Result<u32, E>,
    ) -> (BenchSettings, Option<String>) {
        let world_size = launch.map(|l| l.world_size).or(self.world_size.filter(|n| *n > 0));
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
            (None, Some(Ok(n))) if backend == BackendKind::Cuda && *n > 0 => *n,
            (None, _) => DEFAULT_WORLD_SIZE,
        };
        let d = if backend == BackendKind::Cpu { CPU_DEFAULTS } else { GPU_DEFAULTS };
        let plan = Plan {
            world_size,
            dtype: self.dtype,
            payload_elements: self.payload_elements.unwrap_or(d.payload_elements),
            compute_dim: self.compute_dim.unwrap_or(d.compute_dim),
            warmup: self.warmup.unwrap_or(d.warmup),
            repeats: self.repeats.unwrap_or(d.repeats),
            seed: self.seed,
        };
        (BenchSettings { plan, backend, run: self.run }, note)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(backend: BackendChoice) -> BenchRequest {
        BenchRequest {
            backend,
            world_size: None,
            dtype: Dtype::Bfloat16,
            payload_elements: None,
            compute_dim: None,
            warmup: None,
            repeats: None,
            seed: 1,
            run: RunOptions {
                timeout: Duration::from_secs(300),
                run_label: "default".into(),
                environment_profile: None,
                output: None,
                results_dir: PathBuf::from("benchmarks/results"),
                progress: false,
                dry_run: false,
            },
        }
    }

    fn no_probe() -> Result<u32, String> {
        panic!("no probe expected")
    }

    #[test]
    fn auto_probes_once_and_says_why_it_chose_the_cpu() {
        let calls = std::cell::Cell::new(0);
        let (s, note) = request(BackendChoice::Auto).resolve(None, || {
            calls.set(calls.get() + 1);
            Err::<u32, _>("libcuda.so.1 was not found")
        });
        assert_eq!((s.backend, s.plan.world_size, s.plan.repeats), (BackendKind::Cpu, 2, 120));
        assert_eq!(note.as_deref(), Some("libcuda.so.1 was not found; using the CPU backend (--backend cpu)"));
        let (s, note) = request(BackendChoice::Auto).resolve(None, || {
            calls.set(calls.get() + 1);
            Ok::<u32, String>(4)
        });
        assert_eq!((s.backend, s.plan.world_size, s.plan.compute_dim, note), (BackendKind::Cuda, 4, 2048, None));
        assert_eq!(calls.get(), 2, "one probe per resolution");
        let (s, note) = request(BackendChoice::Auto).resolve(None, || Ok::<u32, String>(0));
        assert_eq!(s.backend, BackendKind::Cpu);
        assert!(note.is_some_and(|n| n.contains("no CUDA device visible")));
    }

    #[test]
    fn explicit_choices_and_sizes_need_no_probe() {
        let (s, note) = request(BackendChoice::Mock).resolve(None, no_probe);
        assert_eq!(
            (s.backend, s.plan.world_size, s.plan.payload_elements, note),
            (BackendKind::Mock, 2, 4 << 20, None)
        );
        let (s, _) = BenchRequest { world_size: Some(3), repeats: Some(7), ..request(BackendChoice::Cuda) }
            .resolve(None, no_probe);
        assert_eq!((s.plan.world_size, s.plan.repeats, s.plan.warmup), (3, 7, 10));
        let (s, _) = request(BackendChoice::Cuda).resolve(None, || Err::<u32, _>("no GPU"));
        assert_eq!((s.backend, s.plan.world_size), (BackendKind::Cuda, 2));
    }
}
