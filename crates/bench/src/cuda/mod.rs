//! The CUDA backend: an NCCL all-reduce and a cuBLAS matmul on real GPUs, timed with CUDA events.
//! This is the only module in commgate that touches CUDA. [`CudaBackend::open`] checks what the
//! machine has, decides which GPU drives which rank, and opens them; the work is split by job:
//!
//! - `discovery.rs`: which CUDA libraries load ([`probe`]), finding torch's pip cuBLAS, and
//!   making NCCL's `libnccl.so.2` loadable under the name cudarc looks for
//!   ([`prepare_at_start`], which may re-execute this program when it starts);
//! - `gpus.rs`: the opened GPUs: allocation, the timed step of each schedule, and a teardown that
//!   cannot abort the process;
//! - `step.rs`: what one timed step queues on each stream, as data (where each window opens and
//!   closes);
//! - `barrier.rs`: the timing barrier that holds every stream until the whole step is queued, so no
//!   window holds host-side launch latency;
//! - `topology.rs`: how the GPUs reach each other (`hardware.topology`) and their memory;
//! - `wait.rs`: waiting for the GPU against a deadline, never inside a blocking call;
//! - `ffi.rs`: every `unsafe` call in commgate (cudarc marks a few calls unsafe, and each says why
//!   it is sound here), the one module allowed any.

mod barrier;
mod discovery;
mod element;
mod ffi;
mod gpus;
mod step;
mod topology;
mod wait;

pub use barrier::{TimingBarrier, BARRIER_VARIABLE};
pub use discovery::{
    nccl_loadable, prepare_at_start, probe, CudaUnavailable, BARRIER_SYMBOL, CUBLAS_SYMBOLS, DRIVER_SYMBOLS,
    NCCL_SYMBOLS,
};
pub use ffi::exit_without_destructors;

use super::launch::{Launch, Rendezvous};
use super::{host, Backend, BackendInfo, BenchError, HardwareInfo, Plan};
use commgate_core::result::{EvidenceLevel, Schedule};
use gpus::{IdSource, Rig};

/// The CUDA backend: one or more GPUs driven from this thread (see the module doc).
pub struct CudaBackend {
    rig: Rig,
    info: BackendInfo,
}

impl CudaBackend {
    /// Opens the GPUs this process drives and allocates everything the runs need.
    ///
    /// `launch: None`: one process drives GPUs `0..plan.world_size`, ranks in the same order.
    /// `launch: Some`: this process is rank `launch.rank` on GPU `launch.local_rank`, and rank 0
    /// shares NCCL's unique id through `rendezvous`. `barrier_off` is [`barrier_off`]'s reading of
    /// the environment.
    pub fn open(
        plan: &Plan,
        launch: Option<&Launch>,
        rendezvous: Option<Rendezvous>,
        barrier_off: Result<Option<String>, String>,
    ) -> Result<CudaBackend, BenchError> {
        let barrier_off = barrier_off.map_err(BenchError::Unavailable)?;
        let visible = probe()?;
        let devices = assign_devices(plan, launch, visible)?;
        // The program restarted itself for NCCL, if it had to, when it started (`prepare_at_start`).
        nccl_loadable()?;
        let sizes = Sizes::from_plan(plan)?;
        let id_source = match launch {
            None => IdSource::Local,
            Some(launch) => IdSource::Rendezvous { launch, rendezvous: rendezvous.as_ref() },
        };
        let rig = Rig::open(plan, &sizes, &devices, id_source, barrier_off)?;
        // NCCL is resident now (cudarc keeps it open for the life of the process).
        discovery::remove_own_link_dir();
        if let Some(note) = rig.timing_barrier().note() {
            // An ungated run is not comparable with gated ones: say so where the user looks.
            commgate_core::diag::note(note);
        }
        let first = rig.first_context();
        let topology = topology::query(topology::ordinals(visible, plan.world_size))
            .ok()
            .and_then(|links| topology::summarise(plan.world_size, &links));
        let hardware = HardwareInfo {
            gpu_name: first.and_then(|ctx| ctx.name().ok()),
            // GPUs in the job: one per rank, whether one process drives them or many.
            gpu_count: plan.world_size,
            gpu_memory_mib: first.and_then(|ctx| ctx.total_mem().ok()).map(topology::mib),
            topology: topology.map(str::to_string),
            driver: host::driver_version(),
            cuda: ffi::driver_cuda_version().map(cuda_version_string),
            nccl: cudarc::nccl::result::get_nccl_version().ok().map(nccl_version_string),
            host_cpu: host::cpu_model(),
            timing: Some(rig.timing_barrier().as_str().to_string()),
        };
        let local_ranks = devices.iter().map(|d| d.rank).collect();
        let (name, evidence_level) = identity(hardware.gpu_name.as_deref());
        if evidence_level == EvidenceLevel::Emulated {
            commgate_core::diag::note(
                "these GPUs are commgate's emulator (scripts/fake-gpu.sh): the CUDA path runs for real, its times are \
                 simulated; the result is filed as cuda-emulated, never as a GPU's",
            );
        }
        let info = BackendInfo { name, evidence_level, hardware, local_ranks };
        Ok(CudaBackend { rig, info })
    }
}

impl CudaBackend {
    /// Whether this run's timing windows open at the device-side barrier (docs/formats.md, "How the
    /// CUDA backend times a schedule").
    pub fn timing_barrier(&self) -> &TimingBarrier {
        self.rig.timing_barrier()
    }
}

impl Backend for CudaBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn run(&mut self, schedule: Schedule) -> Result<Vec<f64>, BenchError> {
        self.rig.run(schedule)
    }

    /// Aborts the communicators: a peer may be gone, so they cannot be finalized in step.
    fn fail(&mut self) {
        self.rig.fail();
    }
}

/// The backend's name and evidence level for GPUs named `gpu_name`: commgate's emulated GPUs
/// (`scripts/fake-gpu.sh`) are `cuda-emulated`, so that their runs are filed, compared and stored
/// apart from a GPU's and can never stand in for one.
fn identity(gpu_name: Option<&str>) -> (&'static str, EvidenceLevel) {
    match gpu_name {
        Some(commgate_core::result::EMULATED_GPU_NAME) => ("cuda-emulated", EvidenceLevel::Emulated),
        _ => ("cuda", EvidenceLevel::GpuNccl),
    }
}

/// Which GPU ordinal drives which global rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Device {
    ordinal: usize,
    rank: u32,
}

fn assign_devices(plan: &Plan, launch: Option<&Launch>, visible: u32) -> Result<Vec<Device>, BenchError> {
    match launch {
        None => {
            if plan.world_size == 0 || plan.world_size > visible {
                return Err(BenchError::Unavailable(format!(
                    "--world-size {} but {visible} CUDA device(s) visible: pass --world-size 1..{visible}, \
                     or launch one process per GPU (torchrun, srun, mpirun)",
                    plan.world_size
                )));
            }
            Ok((0..plan.world_size).map(|rank| Device { ordinal: rank as usize, rank }).collect())
        }
        Some(launch) => {
            if launch.world_size != plan.world_size {
                return Err(BenchError::Unavailable(format!(
                    "the launcher's WORLD_SIZE is {} but the plan's world size is {}: drop --world-size \
                     when launching one process per GPU",
                    launch.world_size, plan.world_size
                )));
            }
            let ordinal = if launch.local_rank < visible {
                launch.local_rank as usize
            } else if visible == 1 {
                // The launcher gave each task its own GPU through CUDA_VISIBLE_DEVICES.
                0
            } else {
                return Err(BenchError::Unavailable(format!(
                    "LOCAL_RANK={} but only {visible} CUDA device(s) visible on this node: start at most \
                     {visible} processes per node, or check CUDA_VISIBLE_DEVICES",
                    launch.local_rank
                )));
            };
            Ok(vec![Device { ordinal, rank: launch.rank }])
        }
    }
}

/// Buffer sizes in elements, checked once against what CUDA and cuBLAS take.
struct Sizes {
    payload: usize,
    dim: usize,
}

impl Sizes {
    fn from_plan(plan: &Plan) -> Result<Sizes, BenchError> {
        let payload = usize::try_from(plan.payload_elements).ok().filter(|&n| n > 0);
        let dim = usize::try_from(plan.compute_dim)
            .ok()
            .filter(|&d| d > 0 && i32::try_from(d).is_ok() && d.checked_mul(d).is_some());
        match (payload, dim) {
            (Some(payload), Some(dim)) => Ok(Sizes { payload, dim }),
            (None, _) => Err(BenchError::Unavailable(format!(
                "--payload-elements {} cannot be allocated on a GPU: pass a positive count",
                plan.payload_elements
            ))),
            (_, None) => Err(BenchError::Unavailable(format!(
                "--compute-dim {} is outside what cuBLAS takes: pass 1..{}",
                plan.compute_dim,
                i32::MAX
            ))),
        }
    }
}

/// Why the timing barrier is off, from the values of [`BARRIER_VARIABLE`] and `CUDA_LAUNCH_BLOCKING`
/// (`Ok(None)`: on); `Err` when the barrier's variable is not understood.
pub fn barrier_off(barrier: Option<String>, launch_blocking: Option<String>) -> Result<Option<String>, String> {
    barrier::wanted(barrier.as_deref(), launch_blocking.as_deref())
}

/// `cuDriverGetVersion`'s 1000·major + 10·minor as "major.minor".
fn cuda_version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// `ncclGetVersion`'s code as "major.minor.patch": 10000·major + 100·minor + patch since NCCL
/// 2.9, 1000·major + 100·minor + patch before.
fn nccl_version_string(code: i32) -> String {
    if code >= 10000 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

#[cfg(test)]
mod tests {
    use std::panic::catch_unwind;

    use super::*;
    use crate::Dtype;

    fn plan() -> Plan {
        Plan {
            world_size: 1,
            dtype: Dtype::Bfloat16,
            payload_elements: 1024,
            compute_dim: 64,
            warmup: 1,
            repeats: 1,
            seed: 7,
        }
    }

    fn is_one_helpful_line(message: &str) -> bool {
        !message.is_empty()
            && !message.contains('\n')
            && ["install", "CUDA_VISIBLE_DEVICES", "--backend cpu", "LD_LIBRARY_PATH", "update"]
                .iter()
                .any(|fix| message.contains(fix))
    }

    #[test]
    fn probe_explains_what_is_missing_without_panicking() {
        let outcome = catch_unwind(probe);
        let Ok(result) = outcome else { panic!("probe panicked") };
        match result {
            // A GPU machine: the CUDA path is checked there by scripts/gpu-validate.sh.
            Ok(count) => assert!(count > 0),
            Err(unavailable) => {
                let message = unavailable.to_string();
                assert!(is_one_helpful_line(&message), "unhelpful: {message:?}")
            }
        }
    }

    #[test]
    fn open_is_unavailable_without_a_gpu() {
        if probe().is_ok() {
            // Opening would run (and maybe re-exec) on a real GPU: gpu-validate.sh's job.
            return;
        }
        let plan = plan();
        let outcome = catch_unwind(|| CudaBackend::open(&plan, None, None, Ok(None)).err());
        let Ok(error) = outcome else { panic!("open panicked") };
        match error {
            Some(BenchError::Unavailable(message)) => {
                assert!(is_one_helpful_line(&message), "unhelpful: {message:?}")
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    #[test]
    fn emulated_gpus_are_never_labelled_as_gpus() {
        assert_eq!(
            identity(Some(commgate_core::result::EMULATED_GPU_NAME)),
            ("cuda-emulated", EvidenceLevel::Emulated)
        );
        assert_eq!(identity(Some("NVIDIA H200")), ("cuda", EvidenceLevel::GpuNccl));
        assert_eq!(identity(None), ("cuda", EvidenceLevel::GpuNccl));
    }

    #[test]
    fn versions_read_as_people_write_them() {
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(12080), "12.8");
        assert_eq!(nccl_version_string(22703), "2.27.3");
    }

    #[test]
    fn sizes_reject_what_cuda_cannot_take() {
        let mut plan = plan();
        assert!(Sizes::from_plan(&plan).is_ok());
        plan.compute_dim = 0;
        assert!(matches!(Sizes::from_plan(&plan), Err(BenchError::Unavailable(_))));
        plan.compute_dim = u64::from(u32::MAX);
        assert!(matches!(Sizes::from_plan(&plan), Err(BenchError::Unavailable(_))));
        plan.compute_dim = 64;
        plan.payload_elements = 0;
        assert!(matches!(Sizes::from_plan(&plan), Err(BenchError::Unavailable(_))));
    }

    #[test]
    fn devices_follow_the_launch_mode() {
        let mut plan = plan();
        plan.world_size = 2;
        let single = assign_devices(&plan, None, 4).ok();
        assert_eq!(single, Some(vec![Device { ordinal: 0, rank: 0 }, Device { ordinal: 1, rank: 1 }]));
        assert!(matches!(assign_devices(&plan, None, 1), Err(BenchError::Unavailable(_))));
        let launch = Launch::new(1, 2, 1, "127.0.0.1", 29500);
        assert_eq!(assign_devices(&plan, Some(&launch), 2).ok(), Some(vec![Device { ordinal: 1, rank: 1 }]));
        // One GPU per task through CUDA_VISIBLE_DEVICES.
        assert_eq!(assign_devices(&plan, Some(&launch), 1).ok(), Some(vec![Device { ordinal: 0, rank: 1 }]));
        let far = Launch { local_rank: 5, ..launch.clone() };
        assert!(matches!(assign_devices(&plan, Some(&far), 2), Err(BenchError::Unavailable(_))));
        plan.world_size = 3;
        assert!(matches!(assign_devices(&plan, Some(&launch), 2), Err(BenchError::Unavailable(_))));
    }
}
