//! `commgate bench`: the overlap benchmark. The same all-reduce payload and matmul, timed with
//! communication alone, compute alone, serially on one stream, and overlapped on two streams,
//! after warm-up and over many repeats, per rank; the slowest rank's time per repeat is the
//! sample (docs/formats.md, "Result file").
//!
//! Hardware sits behind the narrow [`Backend`] trait: `cuda/` is the only
//! module that touches CUDA, `cpu/` gives real timings without a GPU, `mock.rs` exact ones for
//! tests, `host.rs` reads what `/proc` says about the machine. `launch/` reads the launcher's
//! environment and runs the TCP rendezvous; `settings.rs` turns a request into settings, `sizes.rs`
//! types the five sizes and counts once for every stage with their limits, `origin.rs` carries
//! where each value came from; `nccl.rs` pins or reads NCCL's algorithm and protocol;
//! `workload.rs` names what a run measures.

// This crate reads untrusted input (settings and results from pull requests, the launcher's wire
// messages from its peers): no index or slice that could panic on their contents (`get`,
// iterators and patterns instead), no `as` that could truncate a number (`try_from` instead);
// tests are exempt from the first through clippy.toml.
#![deny(clippy::indexing_slicing)]
#![deny(clippy::cast_possible_truncation)]

pub mod assemble;
pub mod cpu;
pub mod cuda;
pub mod host;
pub mod launch;
pub mod mock;
pub mod nccl;
pub mod origin;
pub mod runner;
pub mod settings;
pub mod sizes;
pub mod workload;

use commgate_core::result::{EvidenceLevel, Schedule};

/// Element type of the all-reduce payload and the matmul.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Bfloat16,
    Float16,
    Float32,
}

impl Dtype {
    pub fn size(self) -> u64 {
        match self {
            Dtype::Bfloat16 | Dtype::Float16 => 2,
            Dtype::Float32 => 4,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::Bfloat16 => "bfloat16",
            Dtype::Float16 => "float16",
            Dtype::Float32 => "float32",
        }
    }
}

/// What to run: resolved from flags and defaults by `config`, identical on every rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Ranks in the job (all processes together).
    pub world_size: u32,
    pub dtype: Dtype,
    /// Elements of the all-reduce buffer on each rank.
    pub payload_elements: u64,
    /// The matmul is `compute_dim`³ (square, C = A·B).
    pub compute_dim: u64,
    pub warmup: u32,
    pub repeats: u32,
    /// Seed of the mock backend's timings and of the buffers' contents.
    pub seed: u64,
}

impl Plan {
    /// The plan of `sizes` (checked by [`sizes::Sizes::within_limits`] when resolved) at `dtype`.
    pub fn new(sizes: sizes::Sizes<sizes::Plain>, dtype: Dtype, seed: u64) -> Self {
        let sizes::Sizes { world_size, payload_elements, compute_dim, warmup, repeats } = sizes;
        Plan { world_size, dtype, payload_elements, compute_dim, warmup, repeats, seed }
    }

    pub fn payload_bytes_per_rank(&self) -> u64 {
        // A resolved plan is within `sizes::MAX_PAYLOAD_BYTES`; saturating keeps a hand-built
        // one from wrapping.
        self.payload_elements.saturating_mul(self.dtype.size())
    }

    /// Floating-point operations of one matmul (2·m·n·k).
    pub fn matmul_flops(&self) -> f64 {
        2.0 * (self.compute_dim as f64).powi(3)
    }
}

/// What a backend knows about the machine, for the result's `hardware` block.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HardwareInfo {
    pub gpu_name: Option<String>,
    pub gpu_count: u32,
    /// Memory of one GPU, MiB (the first device's; a job's GPUs are one model).
    pub gpu_memory_mib: Option<u64>,
    /// How the GPUs reach each other, from the driver (e.g. `nvlink`, `pcie-p2p`, `no-p2p`,
    /// `single-gpu`); `None` where nothing could be asked.
    pub topology: Option<String>,
    pub driver: Option<String>,
    pub cuda: Option<String>,
    pub nccl: Option<String>,
    pub host_cpu: Option<String>,
    /// How the timing windows were taken, where that varies (CUDA: `gated` or `ungated`). Not
    /// hardware: it becomes the result's `workload.timing`, so runs timed differently are never
    /// compared.
    pub timing: Option<String>,
}

/// Why a benchmark could not run or did not finish.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BenchError {
    /// Something the machine lacks (no GPU, no libnccl): exit 2, say how to fix it, write no
    /// result.
    #[error("{0}")]
    Unavailable(String),
    /// The run started and failed: a result is written with `failure` filled.
    #[error("{kind} on rank {}: {message}", rank.map_or_else(|| "?".to_string(), |r| r.to_string()))]
    Failed { kind: String, message: String, rank: Option<u32> },
}

impl BenchError {
    pub fn failed(kind: &str, message: impl Into<String>, rank: Option<u32>) -> Self {
        BenchError::Failed { kind: kind.to_string(), message: message.into(), rank }
    }
}

/// What a backend is and which ranks it drives: fixed when it opens, so every backend describes
/// itself the same way, through [`Backend::info`].
#[derive(Debug, Clone, PartialEq)]
pub struct BackendInfo {
    /// `cuda`, `cuda-emulated` (commgate's emulated GPUs), `cpu` or `mock` (the result's
    /// `workload.backend`).
    pub name: &'static str,
    pub evidence_level: EvidenceLevel,
    pub hardware: HardwareInfo,
    /// The global ranks this process drives, in the order [`Backend::run`] reports them.
    pub local_ranks: Vec<u32>,
}

/// One way of running the schedules. Constructed, used and dropped on one thread (NCCL
/// communicators are neither `Send` nor `Sync`), so the trait asks for neither.
pub trait Backend {
    fn info(&self) -> &BackendInfo;
    /// `cuda`, `cpu` or `mock` (the result's `workload.backend`).
    fn name(&self) -> &'static str {
        self.info().name
    }
    fn evidence_level(&self) -> EvidenceLevel {
        self.info().evidence_level
    }
    fn hardware(&self) -> HardwareInfo {
        self.info().hardware.clone()
    }
    /// The global ranks this process drives, in the order [`Backend::run`] reports them.
    fn local_ranks(&self) -> Vec<u32> {
        self.info().local_ranks.clone()
    }
    /// Executes `schedule` once on every local rank and returns each rank's elapsed time in ms,
    /// measured around the schedule only: no allocation, no host synchronisation inside the
    /// timed region. Every rank of the job calls this in the same order.
    fn run(&mut self, schedule: Schedule) -> Result<Vec<f64>, BenchError>;
    /// The run is given up after its steps (another rank failed while the timings were being
    /// gathered): end whatever the ranks share as for an error, not in step with them.
    fn fail(&mut self) {}
}
