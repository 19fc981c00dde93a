//! The CUDA backend: an NCCL all-reduce and a cuBLAS matmul on real GPUs, timed with CUDA events.
//! This is the only file in commgate that touches CUDA, and the only one with `unsafe` code (the
//! small `ffi` module: cudarc marks a few calls unsafe, and each says why it is sound here).
//!
//! **What it loads at run time.** cudarc is built with `dynamic-loading`, so the binary links only
//! libc and builds on machines without CUDA; on first use cudarc `dlopen`s libcuda (the driver:
//! `libcuda.so`, `libcuda.so.1`), libcublas (`libcublas.so`, `.so.13`, `.so.12`, …; it pulls in
//! libcublasLt itself) and libnccl. A library that is missing makes cudarc *panic*, so [`probe`]
//! asks first with cudarc's `is_culib_present()` and turns each absence into one line saying how
//! to fix it. The bindings are CUDA 13's: event timing calls `cuEventElapsedTime_v2`, which only
//! drivers for CUDA 12.8 or newer export, so [`probe`] also checks the driver's CUDA version.
//!
//! **NCCL's `.so.2`.** cudarc looks for `libnccl.so`, `libnccl.so.13`, `.so.12`, `.so.11`, … but
//! never `libnccl.so.2`, the only name that pip's `nvidia-nccl-cu13` and the `libnccl2` package
//! install. It opens libraries by bare name, so the dynamic loader searches `LD_LIBRARY_PATH` —
//! and glibc reads that variable once, when the process starts: setting it later changes nothing,
//! and loading the `.so.2` ourselves first does not help either (glibc matches an already-loaded
//! library by the name it was opened with or its soname, `libnccl.so.2`, never `libnccl.so`). So
//! [`ensure_nccl_loadable`] makes a private directory holding a `libnccl.so` link to the `.so.2`
//! it finds (under `LD_LIBRARY_PATH`, Python's `nvidia/nccl/lib`, the usual system directories)
//! and re-executes this program (same pid, same arguments) with that directory first on
//! `LD_LIBRARY_PATH`; the new process removes the directory once NCCL is loaded. It must run
//! before anything that a re-exec would break (threads that matter, the rendezvous sockets):
//! [`CudaBackend::open`] does it itself in single-process mode; a multi-process run must call it
//! before building its [`Rendezvous`], and `open` then only reports the fix.
//!
//! **Timing.** Everything is allocated in [`CudaBackend::open`]: buffers (each on the stream that
//! uses it, with cudarc's per-buffer event tracking off, so the overlap schedule is not silently
//! serialised by waits cudarc would insert), cuBLAS handles and events. Each step first lines the
//! ranks up on the GPU with a one-element all-reduce (so a rank whose host arrived late does not
//! inflate the others' times), then records a start event (`CU_EVENT_DEFAULT`: timing on),
//! launches the schedule on every local GPU, records a stop event, and only then synchronises the
//! host, once, and reads `elapsed_ms` per GPU. Nothing inside the timed region allocates or waits
//! on the host. Per GPU there is a compute stream and a comm stream (the NCCL communicator's):
//! `comm_only` runs the all-reduce on the comm stream, `compute_only` the matmul on the compute
//! stream, `serial` both back to back on the comm stream, and `overlap` both at once, joined by
//! events (start on the compute stream, the comm stream waits on it; the comm stream's end event
//! is waited on by the compute stream, which records the stop). The all-reduce is out of place
//! (send → receive buffer, nccl-tests' "out-of-place" column), so repeated sums never overflow
//! the payload. First-use costs (NCCL's connections, cuBLAS's workspace) fall in the caller's
//! warm-up steps.
//!
//! **Teardown.** cudarc's `Comm` panics in `drop` if `ncclCommAbort` fails, and `CudaBlas` if
//! `cublasDestroy` does. After any error the backend is poisoned and leaks its NCCL and cuBLAS
//! objects instead of dropping them (the process is about to write a failure and exit, and the OS
//! reclaims everything); a healthy backend synchronises, then drops each object on its own under
//! `catch_unwind`, so even an unexpected panic there cannot escalate into an abort. `open` makes
//! buffers and events first, cuBLAS handles next and communicators last, so a failure part way
//! never drops a `Comm`, and drops at most a just-made cuBLAS handle.

use std::ffi::{c_char, OsString};
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cudarc::cublas::result::CublasError;
use cudarc::cublas::{CudaBlas, Gemm};
use cudarc::driver::sys::{CUevent_flags, CUresult};
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DeviceRepr, DriverError, ValidAsZeroBits};
use cudarc::nccl::result::NcclError;
use cudarc::nccl::{group_end, group_start, Comm, Id, NcclType, ReduceOp};

use super::launch::{Launch, Rendezvous};
use super::{Backend, BenchError, Dtype, HardwareInfo, Plan};
use crate::result::{EvidenceLevel, Schedule};

const LIBCUDA_MISSING: &str = "libcuda.so not found: install the NVIDIA driver, or use --backend cpu";
const NO_DEVICE: &str = "no CUDA device visible (CUDA_VISIBLE_DEVICES?): check `nvidia-smi`, or use --backend cpu";
const CUBLAS_MISSING: &str = "libcublas.so not found: pip install nvidia-cublas-cu13 or install the CUDA toolkit's cuBLAS, or set LD_LIBRARY_PATH";
const NCCL_MISSING: &str =
    "libnccl.so.2 not found: pip install nvidia-nccl-cu13 or apt install libnccl2, or set LD_LIBRARY_PATH";

/// Oldest driver CUDA version the CUDA 13 bindings run on (`cuEventElapsedTime_v2`), as
/// `cuDriverGetVersion` reports it (1000·major + 10·minor).
const MIN_DRIVER_CUDA: i32 = 12080;

/// Number of visible GPUs, or one line naming what is missing and how to fix it. Never panics:
/// each library is looked for before cudarc is allowed to load it.
pub fn probe() -> Result<u32, String> {
    if !ffi::driver_present() {
        return Err(LIBCUDA_MISSING.to_string());
    }
    let count = match CudaContext::device_count() {
        Ok(n) if n > 0 => u32::try_from(n).unwrap_or(0),
        Ok(_) | Err(DriverError(CUresult::CUDA_ERROR_NO_DEVICE)) => {
            return Err(NO_DEVICE.to_string());
        }
        Err(e) => {
            return Err(format!("the CUDA driver did not start ({e}): check `nvidia-smi`, or use --backend cpu"));
        }
    };
    match ffi::driver_cuda_version() {
        Some(v) if v >= MIN_DRIVER_CUDA => {}
        Some(v) => {
            return Err(format!(
                "the NVIDIA driver supports CUDA {}, commgate's CUDA backend needs 12.8 or newer \
                 (driver R570+): update the driver, or use --backend cpu",
                cuda_version_string(v)
            ));
        }
        None => return Err(LIBCUDA_MISSING.to_string()),
    }
    if !ffi::cublas_present() {
        return Err(CUBLAS_MISSING.to_string());
    }
    match nccl_link::status() {
        nccl_link::Status::Missing => Err(NCCL_MISSING.to_string()),
        nccl_link::Status::Loadable | nccl_link::Status::OnlySo2(_) => Ok(count),
    }
}

/// Makes NCCL loadable under a name cudarc tries, re-executing this program when only
/// `libnccl.so.2` is installed (see the module doc). Returns `Ok` when NCCL loads as it is; on a
/// successful re-exec it does not return at all. Call it before anything a re-exec would break.
pub fn ensure_nccl_loadable() -> Result<(), String> {
    match nccl_link::status() {
        nccl_link::Status::Loadable => Ok(()),
        nccl_link::Status::Missing => Err(NCCL_MISSING.to_string()),
        nccl_link::Status::OnlySo2(so2) => nccl_link::reexec_with_link(&so2),
    }
}

/// The CUDA backend: one or more GPUs driven from this thread (see the module doc).
pub struct CudaBackend {
    rig: Rig,
    hardware: HardwareInfo,
    local_ranks: Vec<u32>,
}

impl CudaBackend {
    /// Opens the GPUs this process drives and allocates everything the runs need.
    ///
    /// `launch: None`: one process drives GPUs `0..plan.world_size`, ranks in the same order.
    /// `launch: Some`: this process is rank `launch.rank` on GPU `launch.local_rank`, and rank 0
    /// shares NCCL's unique id through `rendezvous`.
    pub fn open(
        plan: &Plan,
        launch: Option<&Launch>,
        rendezvous: Option<Rendezvous>,
    ) -> Result<CudaBackend, BenchError> {
        let visible = probe().map_err(BenchError::Unavailable)?;
        let devices = assign_devices(plan, launch, visible)?;
        match launch {
            // Nothing a re-exec could break exists yet in a single-process run.
            None => ensure_nccl_loadable().map_err(BenchError::Unavailable)?,
            Some(_) => {
                if let nccl_link::Status::OnlySo2(so2) = nccl_link::status() {
                    return Err(BenchError::Unavailable(nccl_link::manual_fix(&so2)));
                }
            }
        }
        let sizes = Sizes::from_plan(plan)?;
        let id_source = match launch {
            None => IdSource::Local,
            Some(launch) => IdSource::Rendezvous { launch, rendezvous: rendezvous.as_ref() },
        };
        let rig = match plan.dtype {
            Dtype::Bfloat16 => Rig::Bf16(Gpus::open(plan, &sizes, &devices, id_source)?),
            Dtype::Float16 => Rig::F16(Gpus::open(plan, &sizes, &devices, id_source)?),
            Dtype::Float32 => Rig::F32(Gpus::open(plan, &sizes, &devices, id_source)?),
        };
        // NCCL is resident now (cudarc keeps it open for the life of the process).
        nccl_link::remove_own_link_dir();
        let hardware = HardwareInfo {
            gpu_name: rig.first_context().and_then(|ctx| ctx.name().ok()),
            // GPUs in the job: one per rank, whether one process drives them or many.
            gpu_count: plan.world_size,
            driver: std::fs::read_to_string("/proc/driver/nvidia/version")
                .ok()
                .and_then(|text| parse_driver_version(&text)),
            cuda: ffi::driver_cuda_version().map(cuda_version_string),
            nccl: cudarc::nccl::result::get_nccl_version().ok().map(nccl_version_string),
            host_cpu: std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|text| parse_cpu_model(&text)),
        };
        let local_ranks = devices.iter().map(|d| d.rank).collect();
        Ok(CudaBackend { rig, hardware, local_ranks })
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn evidence_level(&self) -> EvidenceLevel {
        EvidenceLevel::GpuNccl
    }

    fn hardware(&self) -> HardwareInfo {
        self.hardware.clone()
    }

    fn local_ranks(&self) -> Vec<u32> {
        self.local_ranks.clone()
    }

    fn run(&mut self, schedule: Schedule) -> Result<Vec<f64>, BenchError> {
        match &mut self.rig {
            Rig::Bf16(gpus) => gpus.run(schedule),
            Rig::F16(gpus) => gpus.run(schedule),
            Rig::F32(gpus) => gpus.run(schedule),
        }
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

/// Where the NCCL communicators' unique id comes from.
#[derive(Clone, Copy)]
enum IdSource<'a> {
    /// One process drives every rank: `ncclCommInitAll`, no id to share.
    Local,
    /// One process per rank: rank 0 creates the id, the rendezvous carries it.
    Rendezvous { launch: &'a Launch, rendezvous: Option<&'a Rendezvous> },
}

/// The element types the benchmark runs in: NCCL and cuBLAS both take them.
trait Element: DeviceRepr + ValidAsZeroBits + NcclType + Copy {
    const ZERO: Self;
    const ONE: Self;
    fn from_f32(x: f32) -> Self;
}

impl Element for half::bf16 {
    const ZERO: Self = half::bf16::ZERO;
    const ONE: Self = half::bf16::ONE;
    fn from_f32(x: f32) -> Self {
        half::bf16::from_f32(x)
    }
}

impl Element for half::f16 {
    const ZERO: Self = half::f16::ZERO;
    const ONE: Self = half::f16::ONE;
    fn from_f32(x: f32) -> Self {
        half::f16::from_f32(x)
    }
}

impl Element for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    fn from_f32(x: f32) -> Self {
        x
    }
}

/// The opened GPUs, in the plan's dtype.
enum Rig {
    Bf16(Gpus<half::bf16>),
    F16(Gpus<half::f16>),
    F32(Gpus<f32>),
}

impl Rig {
    fn first_context(&self) -> Option<&Arc<CudaContext>> {
        match self {
            Rig::Bf16(gpus) => gpus.gpus.first().map(|g| &g.ctx),
            Rig::F16(gpus) => gpus.gpus.first().map(|g| &g.ctx),
            Rig::F32(gpus) => gpus.gpus.first().map(|g| &g.ctx),
        }
    }
}

/// One GPU's share: its streams, cuBLAS handles, buffers and events, all made in `open`.
struct Gpu<T> {
    rank: u32,
    ctx: Arc<CudaContext>,
    /// Runs the matmul (compute_only, overlap).
    compute: Arc<CudaStream>,
    /// The NCCL communicator's stream: the all-reduce, and the whole serial schedule.
    comm: Arc<CudaStream>,
    blas_compute: CudaBlas,
    /// cuBLAS bound to the comm stream, for the serial schedule (one stream, back to back).
    blas_comm: CudaBlas,
    send: CudaSlice<T>,
    recv: CudaSlice<T>,
    /// One zero: the all-reduce that lines the ranks up before each timed step.
    align: CudaSlice<f32>,
    a: CudaSlice<T>,
    b: CudaSlice<T>,
    c: CudaSlice<T>,
    /// Timing events (`CU_EVENT_DEFAULT`).
    start: CudaEvent,
    stop: CudaEvent,
    /// Ordering-only events (timing disabled): the line-up done, the overlap's all-reduce done.
    aligned: CudaEvent,
    joined: CudaEvent,
}

/// Every GPU this process drives, with one NCCL communicator each (`comms[i]` runs on
/// `gpus[i].comm`).
struct Gpus<T> {
    gpus: Vec<Gpu<T>>,
    comms: Vec<Comm>,
    dim: usize,
    /// Set by any failed call: the NCCL and cuBLAS objects are then leaked, not dropped.
    poisoned: bool,
}

impl<T: Element> Gpus<T>
where
    CudaBlas: Gemm<T>,
{
    fn open(plan: &Plan, sizes: &Sizes, devices: &[Device], id_source: IdSource<'_>) -> Result<Gpus<T>, BenchError> {
        // The matrices are the same on every rank; the payload differs per rank.
        let matrix_a = host_values::<T>(sizes.dim * sizes.dim, plan.seed ^ 0xa);
        let matrix_b = host_values::<T>(sizes.dim * sizes.dim, plan.seed ^ 0xb);
        // Built up in place, so that a failure part way is torn down by `Gpus::drop` too.
        let mut opened =
            Gpus { gpus: Vec::with_capacity(devices.len()), comms: Vec::new(), dim: sizes.dim, poisoned: false };
        for device in devices {
            let payload = host_values::<T>(sizes.payload, plan.seed.wrapping_add(u64::from(device.rank)));
            opened.gpus.push(open_gpu(*device, sizes, &payload, &matrix_a, &matrix_b)?);
        }
        // The communicators come last, once everything else they would wait on exists.
        opened.comms = match id_source {
            IdSource::Local => {
                let streams = opened.gpus.iter().map(|g| g.comm.clone()).collect();
                Comm::from_devices(streams)
                    .map_err(nccl_error(None, "creating the NCCL communicators (ncclCommInitAll)"))?
            }
            IdSource::Rendezvous { launch, rendezvous } => {
                let rank = launch.rank;
                // `from_rank` converts both to i32 with `expect`: both come from u32 and are
                // checked here first.
                if i32::try_from(launch.world_size).is_err() || i32::try_from(rank).is_err() {
                    return Err(BenchError::Unavailable(format!(
                        "WORLD_SIZE={} is more ranks than NCCL takes",
                        launch.world_size
                    )));
                }
                let id = nccl_id(launch, rendezvous)?;
                let stream = opened
                    .gpus
                    .first()
                    .map(|g| g.comm.clone())
                    .ok_or_else(|| BenchError::failed("cuda", "no GPU opened", Some(rank)))?;
                let comm = Comm::from_rank(stream, rank as usize, launch.world_size as usize, id)
                    .map_err(nccl_error(Some(rank), "joining the NCCL communicator (ncclCommInitRank)"))?;
                vec![comm]
            }
        };
        Ok(opened)
    }

    fn run(&mut self, schedule: Schedule) -> Result<Vec<f64>, BenchError> {
        let result = self.launch(schedule).and_then(|()| self.collect());
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    /// Queues one step of `schedule` on every local GPU, between its start and stop events.
    fn launch(&mut self, schedule: Schedule) -> Result<(), BenchError> {
        // Line the ranks up on the GPU, outside the timed region.
        self.all_reduce(Payload::Align)?;
        for gpu in &self.gpus {
            gpu.aligned.record(&gpu.comm).map_err(cuda_error(gpu.rank, "recording the line-up event"))?;
        }
        match schedule {
            Schedule::CommOnly => {
                for gpu in &self.gpus {
                    gpu.start.record(&gpu.comm).map_err(cuda_error(gpu.rank, "recording the start event"))?;
                }
                self.all_reduce(Payload::Full)?;
                for gpu in &self.gpus {
                    gpu.stop.record(&gpu.comm).map_err(cuda_error(gpu.rank, "recording the stop event"))?;
                }
            }
            Schedule::ComputeOnly => {
                for gpu in &mut self.gpus {
                    let rank = gpu.rank;
                    gpu.compute.wait(&gpu.aligned).map_err(cuda_error(rank, "waiting for the line-up"))?;
                    gpu.start.record(&gpu.compute).map_err(cuda_error(rank, "recording the start event"))?;
                    gpu.gemm(self.dim, Lane::Compute)?;
                    gpu.stop.record(&gpu.compute).map_err(cuda_error(rank, "recording the stop event"))?;
                }
            }
            Schedule::Serial => {
                for gpu in &self.gpus {
                    gpu.start.record(&gpu.comm).map_err(cuda_error(gpu.rank, "recording the start event"))?;
                }
                self.all_reduce(Payload::Full)?;
                for gpu in &mut self.gpus {
                    gpu.gemm(self.dim, Lane::Comm)?;
                    gpu.stop.record(&gpu.comm).map_err(cuda_error(gpu.rank, "recording the stop event"))?;
                }
            }
            Schedule::Overlap => {
                for gpu in &self.gpus {
                    let rank = gpu.rank;
                    gpu.compute.wait(&gpu.aligned).map_err(cuda_error(rank, "waiting for the line-up"))?;
                    gpu.start.record(&gpu.compute).map_err(cuda_error(rank, "recording the start event"))?;
                    gpu.comm.wait(&gpu.start).map_err(cuda_error(rank, "ordering the comm stream after the start"))?;
                }
                self.all_reduce(Payload::Full)?;
                for gpu in &mut self.gpus {
                    let rank = gpu.rank;
                    gpu.gemm(self.dim, Lane::Compute)?;
                    gpu.joined.record(&gpu.comm).map_err(cuda_error(rank, "recording the all-reduce's end"))?;
                    gpu.compute.wait(&gpu.joined).map_err(cuda_error(rank, "joining the comm stream"))?;
                    gpu.stop.record(&gpu.compute).map_err(cuda_error(rank, "recording the stop event"))?;
                }
            }
        }
        Ok(())
    }

    /// The one host synchronisation of a step, after every GPU's work is queued; then each GPU's
    /// start-to-stop time, in `local_ranks` order.
    fn collect(&self) -> Result<Vec<f64>, BenchError> {
        for gpu in &self.gpus {
            gpu.stop.synchronize().map_err(cuda_error(gpu.rank, "waiting for the step to finish"))?;
        }
        self.gpus
            .iter()
            .map(|gpu| {
                gpu.start
                    .elapsed_ms(&gpu.stop)
                    .map(f64::from)
                    .map_err(cuda_error(gpu.rank, "reading the step's elapsed time"))
            })
            .collect()
    }

    /// One all-reduce (sum) on every local communicator, grouped when this thread drives several
    /// GPUs (NCCL needs that to launch them together without deadlock).
    fn all_reduce(&mut self, payload: Payload) -> Result<(), BenchError> {
        let grouped = self.comms.len() > 1;
        if grouped {
            group_start().map_err(nccl_error(None, "ncclGroupStart"))?;
        }
        let mut queued = Ok(());
        for (comm, gpu) in self.comms.iter().zip(self.gpus.iter_mut()) {
            let call = match payload {
                Payload::Full => comm.all_reduce(&gpu.send, &mut gpu.recv, &ReduceOp::Sum),
                Payload::Align => comm.all_reduce_in_place(&mut gpu.align, &ReduceOp::Sum),
            };
            if let Err(e) = call {
                queued = Err(nccl_error(Some(gpu.rank), "queueing the all-reduce (ncclAllReduce)")(e));
                break;
            }
        }
        // A group that was started is always ended, even after a failed call inside it.
        let ended = if grouped { group_end().map(drop).map_err(nccl_error(None, "ncclGroupEnd")) } else { Ok(()) };
        queued.and(ended)
    }
}

#[derive(Clone, Copy)]
enum Payload {
    Full,
    Align,
}

#[derive(Clone, Copy)]
enum Lane {
    Compute,
    Comm,
}

impl<T: Element> Gpu<T>
where
    CudaBlas: Gemm<T>,
{
    /// C = A·B on the stream of `lane`'s cuBLAS handle.
    fn gemm(&mut self, dim: usize, lane: Lane) -> Result<(), BenchError> {
        // A cuBLAS handle belongs to the device that was current when it was made; one thread
        // driving several GPUs must make this GPU's context current first.
        self.ctx.bind_to_thread().map_err(cuda_error(self.rank, "making the GPU's context current"))?;
        let blas = match lane {
            Lane::Compute => &self.blas_compute,
            Lane::Comm => &self.blas_comm,
        };
        ffi::square_gemm(blas, dim, &self.a, &self.b, &mut self.c)
            .map_err(|e| BenchError::failed("cublas", format!("the matmul (cublasGemmEx): {e}"), Some(self.rank)))
    }
}

fn open_gpu<T: Element>(
    device: Device,
    sizes: &Sizes,
    payload: &[T],
    matrix_a: &[T],
    matrix_b: &[T],
) -> Result<Gpu<T>, BenchError> {
    let Device { ordinal, rank } = device;
    let ctx = CudaContext::new(ordinal).map_err(cuda_error(rank, format!("opening GPU {ordinal}")))?;
    // Before any stream or buffer exists: buffers made from now on carry no tracking events.
    ffi::disable_event_tracking(&ctx);
    let compute = ctx.new_stream().map_err(cuda_error(rank, "creating the compute stream"))?;
    let comm = ctx.new_stream().map_err(cuda_error(rank, "creating the comm stream"))?;
    let alloc = |what: &str| cuda_error(rank, format!("allocating the {what}"));
    let send = comm.clone_htod(payload).map_err(alloc("all-reduce send buffer"))?;
    let recv = comm.alloc_zeros::<T>(sizes.payload).map_err(alloc("all-reduce receive buffer"))?;
    let align = comm.alloc_zeros::<f32>(1).map_err(alloc("line-up buffer"))?;
    let a = compute.clone_htod(matrix_a).map_err(alloc("matrix A"))?;
    let b = compute.clone_htod(matrix_b).map_err(alloc("matrix B"))?;
    let c = compute.alloc_zeros::<T>(sizes.dim * sizes.dim).map_err(alloc("matrix C"))?;
    let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let event = |what: &str| cuda_error(rank, format!("creating the {what} event"));
    let start = ctx.new_event(timing).map_err(event("start"))?;
    let stop = ctx.new_event(timing).map_err(event("stop"))?;
    let aligned = ctx.new_event(None).map_err(event("line-up"))?;
    let joined = ctx.new_event(None).map_err(event("join"))?;
    // Allocations and copies are stream-ordered; finish them before another stream uses them.
    ctx.synchronize().map_err(cuda_error(rank, "finishing the allocations"))?;
    // Last, so that a failure above never drops a cuBLAS handle (whose drop unwraps).
    let blas_compute = CudaBlas::new(compute.clone()).map_err(cublas_error(rank, "creating a cuBLAS handle"))?;
    let blas_comm = CudaBlas::new(comm.clone()).map_err(cublas_error(rank, "creating a cuBLAS handle"))?;
    Ok(Gpu {
        rank,
        ctx,
        compute,
        comm,
        blas_compute,
        blas_comm,
        send,
        recv,
        align,
        a,
        b,
        c,
        start,
        stop,
        aligned,
        joined,
    })
}

impl<T> Drop for Gpus<T> {
    fn drop(&mut self) {
        let comms = std::mem::take(&mut self.comms);
        let gpus = std::mem::take(&mut self.gpus);
        let healthy = !self.poisoned && gpus.iter().all(|g| g.ctx.synchronize().is_ok());
        if !healthy {
            // `Comm`'s and `CudaBlas`'s drops panic when teardown fails, which is likely now.
            std::mem::forget(comms);
            std::mem::forget(gpus);
            return;
        }
        let mut clean = true;
        for comm in comms {
            // Each on its own, so that one panic is caught before the next drop runs.
            clean &= catch_unwind(AssertUnwindSafe(move || drop(comm))).is_ok();
        }
        if clean {
            for gpu in gpus {
                let _ = catch_unwind(AssertUnwindSafe(move || drop(gpu)));
            }
        } else {
            std::mem::forget(gpus);
        }
    }
}

/// NCCL's unique id for a multi-process job: rank 0 makes it, the rendezvous carries its 128
/// bytes (or nothing, when rank 0 failed, so that the others fail at once instead of waiting).
fn nccl_id(launch: &Launch, rendezvous: Option<&Rendezvous>) -> Result<Id, BenchError> {
    let rank = launch.rank;
    let Some(rendezvous) = rendezvous else {
        return Err(BenchError::failed(
            "nccl",
            "one process per GPU needs the rendezvous to share NCCL's unique id",
            Some(rank),
        ));
    };
    if rank == 0 {
        let created = Id::new();
        let bytes = created.as_ref().map(|id| id_to_bytes(id.internal())).unwrap_or_default();
        rendezvous.broadcast(Some(&bytes))?;
        created.map_err(nccl_error(Some(0), "creating NCCL's unique id (ncclGetUniqueId)"))
    } else {
        let bytes = rendezvous.broadcast(None)?;
        id_from_bytes(&bytes).map(Id::uninit).ok_or_else(|| {
            BenchError::failed(
                "nccl",
                format!("rank 0 sent {} bytes for NCCL's unique id, not 128: see rank 0's error", bytes.len()),
                Some(rank),
            )
        })
    }
}

fn id_to_bytes(internal: &[c_char; 128]) -> Vec<u8> {
    internal.iter().map(|&c| u8::from_ne_bytes(c.to_ne_bytes())).collect()
}

fn id_from_bytes(bytes: &[u8]) -> Option<[c_char; 128]> {
    let bytes: &[u8; 128] = bytes.try_into().ok()?;
    Some(bytes.map(|b| c_char::from_ne_bytes([b])))
}

/// `n` values in [-1, 1) from `seed` (splitmix64): real data for the matmul, whose power draw
/// (and so clock) depends on it, and a payload that differs per rank.
fn host_values<T: Element>(n: usize, seed: u64) -> Vec<T> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            // The top 24 bits as a fraction in [0, 1), then to [-1, 1).
            let unit = (z >> 40) as f32 / (1u64 << 24) as f32;
            T::from_f32(2.0 * unit - 1.0)
        })
        .collect()
}

fn cuda_error(rank: u32, what: impl Display) -> impl FnOnce(DriverError) -> BenchError {
    move |e| BenchError::failed("cuda", format!("{what}: {e}"), Some(rank))
}

fn cublas_error(rank: u32, what: impl Display) -> impl FnOnce(CublasError) -> BenchError {
    move |e| BenchError::failed("cublas", format!("{what}: {e}"), Some(rank))
}

/// `NcclError` has no `Display` and its `Debug` prints only "NcclError": name the result code.
fn nccl_error(rank: Option<u32>, what: impl Display) -> impl FnOnce(NcclError) -> BenchError {
    move |e| {
        BenchError::failed("nccl", format!("{what}: {:?} (rerun with NCCL_DEBUG=WARN for NCCL's reason)", e.0), rank)
    }
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

/// The kernel module's version from `/proc/driver/nvidia/version`, e.g. "580.95.05" from
/// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 …".
fn parse_driver_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version"))?;
    line.split_whitespace()
        .find(|token| {
            token.contains('.')
                && token.split('.').all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// The first "model name" of `/proc/cpuinfo`.
fn parse_cpu_model(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| key.trim() == "model name")
        .map(|(_, value)| value.trim().to_string())
        .filter(|value| !value.is_empty())
}

/// Finding `libnccl.so.2` and giving it the `libnccl.so` name cudarc loads (module doc).
mod nccl_link {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// Set by the re-exec: the private directory holding our `libnccl.so` link.
    pub(super) const LINK_DIR_ENV: &str = "COMMGATE_NCCL_LINK_DIR";
    const DIR_PREFIX: &str = "commgate-nccl-";

    pub(super) enum Status {
        /// cudarc finds NCCL under one of its names.
        Loadable,
        /// Only `libnccl.so.2` exists, at this path.
        OnlySo2(PathBuf),
        Missing,
    }

    pub(super) fn status() -> Status {
        if ffi::nccl_present() {
            Status::Loadable
        } else {
            find_so2().map_or(Status::Missing, Status::OnlySo2)
        }
    }

    /// The fix to print when re-executing is not an option.
    pub(super) fn manual_fix(so2: &Path) -> String {
        format!(
            "NCCL is installed as {} but cudarc loads only libnccl.so: run `ln -s {} DIR/libnccl.so` \
             and start again with DIR first on LD_LIBRARY_PATH",
            so2.display(),
            so2.display()
        )
    }

    fn find_so2() -> Option<PathBuf> {
        let found = candidate_dirs().into_iter().map(|dir| dir.join("libnccl.so.2")).find(|p| p.is_file());
        // Last, the Python environment on PATH, wherever its site-packages are.
        found.or_else(|| python_nccl_dirs().into_iter().map(|dir| dir.join("libnccl.so.2")).find(|p| p.is_file()))
    }

    fn candidate_dirs() -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
            .map(|paths| std::env::split_paths(&paths).filter(|p| !p.as_os_str().is_empty()).collect())
            .unwrap_or_default();
        let mut prefixes: Vec<PathBuf> =
            ["VIRTUAL_ENV", "CONDA_PREFIX"].iter().filter_map(|var| std::env::var_os(var).map(PathBuf::from)).collect();
        if let Some(conda) = std::env::var_os("CONDA_PREFIX") {
            dirs.push(PathBuf::from(conda).join("lib"));
        }
        if let Some(home) = std::env::var_os("HOME") {
            prefixes.push(PathBuf::from(home).join(".local"));
        }
        prefixes.push(PathBuf::from("/usr/local"));
        prefixes.push(PathBuf::from("/usr"));
        for prefix in prefixes {
            dirs.extend(site_packages(&prefix.join("lib")).into_iter().map(|sp| sp.join("nvidia/nccl/lib")));
        }
        dirs.extend(
            [
                "/usr/lib/x86_64-linux-gnu",
                "/usr/lib/aarch64-linux-gnu",
                "/usr/lib64",
                "/usr/lib",
                "/usr/local/cuda/lib64",
                "/usr/local/nccl/lib",
                "/opt/nccl/lib",
            ]
            .map(PathBuf::from),
        );
        dirs
    }

    /// `LIB/python3*/{site,dist}-packages` and `LIB/python3/dist-packages` (Debian).
    fn site_packages(lib: &Path) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(lib) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("python3") {
                found.push(entry.path().join("site-packages"));
                found.push(entry.path().join("dist-packages"));
            }
        }
        found.sort();
        found
    }

    /// Asks `python3` where the `nvidia.nccl` package lives (pip's nvidia-nccl-cu1x).
    fn python_nccl_dirs() -> Vec<PathBuf> {
        let script = "import importlib.util as u\n\
                      s = u.find_spec('nvidia.nccl')\n\
                      print('\\n'.join(s.submodule_search_locations or []) if s else '')";
        let Ok(output) = std::process::Command::new("python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
        else {
            return Vec::new();
        };
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| PathBuf::from(l.trim()).join("lib"))
            .collect()
    }

    /// Re-executes this program with a private `libnccl.so` link first on `LD_LIBRARY_PATH`.
    /// Returns only on failure.
    pub(super) fn reexec_with_link(so2: &Path) -> Result<(), String> {
        if let Some(dir) = std::env::var_os(LINK_DIR_ENV).map(PathBuf::from) {
            // Already re-executed with a working link and still no NCCL: the library is broken.
            if dir.join("libnccl.so").exists() && first_library_dir().as_deref() == Some(dir.as_path()) {
                return Err(format!(
                    "{} was linked as libnccl.so in {} but does not load: check `ldd {}` for a missing \
                     dependency, or reinstall NCCL",
                    so2.display(),
                    dir.display(),
                    so2.display()
                ));
            }
        }
        let dir = make_link_dir(so2).map_err(|e| {
            format!(
                "NCCL is installed as {} but could not be linked as libnccl.so in {} ({e}): {}",
                so2.display(),
                std::env::temp_dir().display(),
                manual_fix(so2)
            )
        })?;
        let mut library_path = OsString::from(dir.as_os_str());
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|old| !old.is_empty()) {
            library_path.push(":");
            library_path.push(old);
        }
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find this program to restart it ({e}): {}", manual_fix(so2)))?;
        let mut args = std::env::args_os();
        let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
        // Whatever is buffered would be lost by exec.
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        let error = std::process::Command::new(&exe)
            .arg0(arg0)
            .args(args)
            .env("LD_LIBRARY_PATH", library_path)
            .env(LINK_DIR_ENV, &dir)
            .exec();
        let _ = std::fs::remove_file(dir.join("libnccl.so"));
        let _ = std::fs::remove_dir(&dir);
        Err(format!("restarting {} with NCCL on LD_LIBRARY_PATH failed ({error}): {}", exe.display(), manual_fix(so2)))
    }

    fn first_library_dir() -> Option<PathBuf> {
        std::env::var_os("LD_LIBRARY_PATH").and_then(|paths| std::env::split_paths(&paths).next())
    }

    /// A fresh directory of ours under the temp dir (created, never reused, so nobody else's),
    /// holding `libnccl.so` → `so2`.
    pub(super) fn make_link_dir(so2: &Path) -> std::io::Result<PathBuf> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let mut last = None;
        for attempt in 0..16u32 {
            let dir = base.join(format!("{DIR_PREFIX}{}-{nanos}-{attempt}", std::process::id()));
            match std::fs::create_dir(&dir) {
                Ok(()) => {
                    let target = so2.canonicalize().unwrap_or_else(|_| so2.to_path_buf());
                    if let Err(e) = std::os::unix::fs::symlink(&target, dir.join("libnccl.so")) {
                        let _ = std::fs::remove_dir(&dir);
                        return Err(e);
                    }
                    return Ok(dir);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no directory name left")))
    }

    /// Once NCCL is loaded, removes the link directory the re-exec made — only ours: a
    /// `commgate-nccl-*` directory under the temp dir, holding nothing but the link.
    pub(super) fn remove_own_link_dir() {
        let Some(dir) = std::env::var_os(LINK_DIR_ENV).map(PathBuf::from) else {
            return;
        };
        let ours = dir.parent() == Some(std::env::temp_dir().as_path())
            && dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with(DIR_PREFIX));
        let link = dir.join("libnccl.so");
        if ours && link.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
            let _ = std::fs::remove_file(&link);
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

/// Every `unsafe` call in commgate. cudarc marks these unsafe; each says why it is sound here.
mod ffi {
    #![expect(
        unsafe_code,
        reason = "cudarc's library checks, event-tracking switch, driver version and GEMM are unsafe fns"
    )]

    use super::Element;
    use cudarc::cublas::result::CublasError;
    use cudarc::cublas::sys::{cublasOperation_t, cublasStatus_t};
    use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
    use cudarc::driver::{CudaContext, CudaSlice};
    use std::ffi::c_int;

    pub(super) fn driver_present() -> bool {
        // SAFETY: dlopens cudarc's candidate names for libcuda and closes them again; no memory
        // of ours is involved. The driver's initialisers run, as they would on first use.
        unsafe { cudarc::driver::sys::is_culib_present() }
    }

    pub(super) fn cublas_present() -> bool {
        // SAFETY: as `driver_present`, for libcublas.
        unsafe { cudarc::cublas::sys::is_culib_present() }
    }

    pub(super) fn nccl_present() -> bool {
        // SAFETY: as `driver_present`, for libnccl.
        unsafe { cudarc::nccl::sys::is_culib_present() }
    }

    /// The CUDA version the driver supports (1000·major + 10·minor), `None` without libcuda.
    pub(super) fn driver_cuda_version() -> Option<i32> {
        if !driver_present() {
            // cudarc would panic loading the symbol.
            return None;
        }
        let mut version: c_int = 0;
        // SAFETY: libcuda is present (checked above); the pointer is to a live local int, which
        // cuDriverGetVersion only writes. It needs no cuInit.
        let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
        (status == cudarc::driver::sys::CUresult::CUDA_SUCCESS).then_some(version)
    }

    /// Turns off cudarc's per-buffer event tracking for buffers made after this call.
    pub(super) fn disable_event_tracking(ctx: &CudaContext) {
        // SAFETY: cudarc's conditions are ours to keep, and `Gpus` keeps them: (1) no buffer is
        // used on another stream before its allocation finished: `open_gpu` synchronises the
        // context after allocating; (2) no buffer is freed while another stream uses it: every
        // step ends with a host synchronisation on its stop event, and `Gpus::drop` synchronises
        // each context before anything is dropped (or leaks everything after an error); (3) no
        // buffer is written by two streams at once: the overlap schedule writes `recv` only on
        // the comm stream and `c` only on the compute stream, and the serial one uses one stream.
        unsafe { ctx.disable_event_tracking() }
    }

    /// C = A·B for square `dim`×`dim` column-major matrices (cublasGemmEx with FP32 compute for
    /// bf16/f16, cublasSgemm for f32), queued on `blas`'s stream.
    pub(super) fn square_gemm<T: Element>(
        blas: &CudaBlas,
        dim: usize,
        a: &CudaSlice<T>,
        b: &CudaSlice<T>,
        c: &mut CudaSlice<T>,
    ) -> Result<(), CublasError>
    where
        CudaBlas: Gemm<T>,
    {
        let invalid = CublasError(cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE);
        let n = c_int::try_from(dim).map_err(|_| invalid)?;
        let elements = dim.checked_mul(dim).ok_or(invalid)?;
        if a.len() < elements || b.len() < elements || c.len() < elements {
            return Err(invalid);
        }
        let cfg = GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_N,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: n,
            n,
            k: n,
            alpha: T::ONE,
            lda: n,
            ldb: n,
            beta: T::ZERO,
            ldc: n,
        };
        // SAFETY: A, B and C each hold at least dim² elements (checked above), untransposed with
        // leading dimension dim, so cuBLAS reads and writes only inside them; alpha and beta are
        // host scalars (cuBLAS's default pointer mode, which we never change); all three live on
        // the handle's device and outlive the kernel (freed only after a synchronisation).
        unsafe { blas.gemm(cfg, a, b, c) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            Err(message) => assert!(is_one_helpful_line(&message), "unhelpful: {message:?}"),
        }
    }

    #[test]
    fn open_is_unavailable_without_a_gpu() {
        if probe().is_ok() {
            // Opening would run (and maybe re-exec) on a real GPU: gpu-validate.sh's job.
            return;
        }
        let plan = plan();
        let outcome = catch_unwind(|| CudaBackend::open(&plan, None, None).err());
        let Ok(error) = outcome else { panic!("open panicked") };
        match error {
            Some(BenchError::Unavailable(message)) => {
                assert!(is_one_helpful_line(&message), "unhelpful: {message:?}")
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    #[test]
    fn nccl_id_survives_the_byte_round_trip() {
        let mut internal = [0 as c_char; 128];
        for (i, c) in internal.iter_mut().enumerate() {
            *c = c_char::from_ne_bytes([(i * 2 + 1) as u8]);
        }
        let bytes = id_to_bytes(&internal);
        assert_eq!(bytes.len(), 128);
        assert_eq!(bytes[127], 255);
        assert_eq!(id_from_bytes(&bytes), Some(internal));
        assert_eq!(id_from_bytes(&bytes[..127]), None);
        assert_eq!(id_from_bytes(&[]), None);
    }

    #[test]
    fn the_link_dir_names_the_so2_as_cudarc_looks_for_it() {
        let lib = tempfile::NamedTempFile::new().ok();
        let Some(lib) = lib else { panic!("no temp file") };
        let dir = nccl_link::make_link_dir(lib.path()).ok();
        let Some(dir) = dir else { panic!("no link dir") };
        let link = dir.join("libnccl.so");
        let target = std::fs::read_link(&link).ok();
        assert_eq!(target, lib.path().canonicalize().ok());
        assert!(dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with("commgate-nccl-")));
        assert_eq!(dir.parent(), Some(std::env::temp_dir().as_path()));
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn versions_read_as_people_write_them() {
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(12080), "12.8");
        assert_eq!(nccl_version_string(22703), "2.27.3");
        assert_eq!(nccl_version_string(2804), "2.8.4");
        let proc_text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16-I3-C03-3-3)  Tue Sep 23 09:31:17 UTC 2025\nGCC version:  gcc version 13.3.0\n";
        assert_eq!(parse_driver_version(proc_text).as_deref(), Some("580.95.05"));
        assert_eq!(parse_driver_version("GCC version: 13.3.0"), None);
        let cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n";
        assert_eq!(parse_cpu_model(cpuinfo).as_deref(), Some("Intel(R) Xeon(R) Platinum 8480+"));
        assert_eq!(parse_cpu_model("processor\t: 0\n"), None);
    }

    #[test]
    fn host_values_are_seeded_and_in_range() {
        let a = host_values::<f32>(1000, 3);
        assert_eq!(a, host_values::<f32>(1000, 3));
        assert_ne!(a, host_values::<f32>(1000, 4));
        assert!(a.iter().all(|x| (-1.0..1.0).contains(x)));
        let mean = a.iter().sum::<f32>() / a.len() as f32;
        assert!(mean.abs() < 0.1, "mean {mean}");
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
        let launch =
            Launch { rank: 1, world_size: 2, local_rank: 1, master_addr: "127.0.0.1".to_string(), master_port: 29500 };
        assert_eq!(assign_devices(&plan, Some(&launch), 2).ok(), Some(vec![Device { ordinal: 1, rank: 1 }]));
        // One GPU per task through CUDA_VISIBLE_DEVICES.
        assert_eq!(assign_devices(&plan, Some(&launch), 1).ok(), Some(vec![Device { ordinal: 0, rank: 1 }]));
        let far = Launch { local_rank: 5, ..launch.clone() };
        assert!(matches!(assign_devices(&plan, Some(&far), 2), Err(BenchError::Unavailable(_))));
        plan.world_size = 3;
        assert!(matches!(assign_devices(&plan, Some(&launch), 2), Err(BenchError::Unavailable(_))));
    }
}
