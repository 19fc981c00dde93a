//! The opened GPUs and the timed step: per GPU its streams, cuBLAS handles, buffers and events,
//! one NCCL communicator each, the four schedules, and a teardown that cannot abort.
//!
//! **Timing.** Everything is allocated in [`Rig::open`]: buffers (each on the stream that uses
//! it, with cudarc's per-buffer event tracking off, so the overlap schedule is not silently
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
//! `cublasDestroy` does. After any error the GPUs are poisoned and leak their NCCL and cuBLAS
//! objects instead of dropping them (the process is about to write a failure and exit, and the OS
//! reclaims everything); healthy ones synchronise, then drop each object on its own under
//! `catch_unwind`, so even an unexpected panic there cannot escalate into an abort. Opening makes
//! buffers and events first, cuBLAS handles next and communicators last, so a failure part way
//! never drops a `Comm`, and drops at most a just-made cuBLAS handle.

use std::ffi::c_char;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::cublas::result::CublasError;
use cudarc::cublas::{CudaBlas, Gemm};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DeviceRepr, DriverError, ValidAsZeroBits};
use cudarc::nccl::result::NcclError;
use cudarc::nccl::{group_end, group_start, Comm, Id, NcclType, ReduceOp};

use super::{ffi, Device, Sizes};
use crate::bench::launch::{Launch, Rendezvous};
use crate::bench::{BenchError, Dtype, Plan};
use crate::result::Schedule;

/// Where the NCCL communicators' unique id comes from.
#[derive(Clone, Copy)]
pub(super) enum IdSource<'a> {
    /// One process drives every rank: `ncclCommInitAll`, no id to share.
    Local,
    /// One process per rank: rank 0 creates the id, the rendezvous carries it.
    Rendezvous { launch: &'a Launch, rendezvous: Option<&'a Rendezvous> },
}

/// The element types the benchmark runs in: NCCL and cuBLAS both take them.
pub(super) trait Element: DeviceRepr + ValidAsZeroBits + NcclType + Copy {
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
pub(super) enum Rig {
    Bf16(Gpus<half::bf16>),
    F16(Gpus<half::f16>),
    F32(Gpus<f32>),
}

impl Rig {
    /// Opens `devices` and allocates everything the runs need, in `plan.dtype`.
    pub(super) fn open(
        plan: &Plan,
        sizes: &Sizes,
        devices: &[Device],
        id_source: IdSource<'_>,
    ) -> Result<Rig, BenchError> {
        Ok(match plan.dtype {
            Dtype::Bfloat16 => Rig::Bf16(Gpus::open(plan, sizes, devices, id_source)?),
            Dtype::Float16 => Rig::F16(Gpus::open(plan, sizes, devices, id_source)?),
            Dtype::Float32 => Rig::F32(Gpus::open(plan, sizes, devices, id_source)?),
        })
    }

    /// One timed step of `schedule` on every local GPU (see the module doc).
    pub(super) fn run(&mut self, schedule: Schedule) -> Result<Vec<f64>, BenchError> {
        match self {
            Rig::Bf16(gpus) => gpus.run(schedule),
            Rig::F16(gpus) => gpus.run(schedule),
            Rig::F32(gpus) => gpus.run(schedule),
        }
    }

    /// The first local GPU's name, as the driver reports it.
    pub(super) fn gpu_name(&self) -> Option<String> {
        let first = match self {
            Rig::Bf16(gpus) => gpus.gpus.first().map(|g| &g.ctx),
            Rig::F16(gpus) => gpus.gpus.first().map(|g| &g.ctx),
            Rig::F32(gpus) => gpus.gpus.first().map(|g| &g.ctx),
        };
        first.and_then(|ctx| ctx.name().ok())
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
pub(super) struct Gpus<T> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn host_values_are_seeded_and_in_range() {
        let a = host_values::<f32>(1000, 3);
        assert_eq!(a, host_values::<f32>(1000, 3));
        assert_ne!(a, host_values::<f32>(1000, 4));
        assert!(a.iter().all(|x| (-1.0..1.0).contains(x)));
        let mean = a.iter().sum::<f32>() / a.len() as f32;
        assert!(mean.abs() < 0.1, "mean {mean}");
    }
}
