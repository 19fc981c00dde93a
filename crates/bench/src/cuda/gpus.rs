//! The opened GPUs and the timed step: per GPU its streams, cuBLAS handles, buffers and events,
//! one NCCL communicator each, the timing barrier, and a teardown that cannot abort.
//!
//! **Timing.** Everything is allocated in [`Rig::open`]: buffers (each on the stream that uses
//! it, with cudarc's per-buffer event tracking off, so the overlap schedule is not silently
//! serialised by waits cudarc would insert), cuBLAS handles, events, and the timing barrier's host
//! word (`barrier.rs`); then every schedule runs once, untimed and ungated, so that first-use costs
//! (NCCL's connections, cuBLAS's workspace, lazily loaded kernels) never happen while the barrier
//! holds the GPUs. A step queues `step.rs`'s operations on every local GPU — the barrier, the
//! line-up all-reduce, the start event, the schedule, the stop event — releases the barrier, and only
//! then synchronises the host, once, and reads `elapsed_ms` per GPU. Nothing inside a window
//! allocates, waits on the host, or (with the barrier) waits for the host to queue the next GPU's
//! work. The all-reduce is out of place (send → receive buffer, nccl-tests' "out-of-place"
//! column), so repeated sums never overflow the payload.
//!
//! **Teardown.** cudarc's `Comm` panics in `drop` if `ncclCommAbort` fails, and `CudaBlas` if
//! `cublasDestroy` does. After any error the GPUs are poisoned and leak their NCCL and cuBLAS
//! objects (and the barrier word, which a GPU may still read) instead of dropping them (the process
//! is about to write a failure and exit, and the OS reclaims everything); healthy ones open the
//! barrier, synchronise, then drop each object on its own under `catch_unwind`, so even an unexpected
//! panic there cannot escalate into an abort. Opening makes buffers and events first, cuBLAS
//! handles next and communicators last, so a failure part way never drops a `Comm`, and drops at
//! most a just-made cuBLAS handle.

use std::ffi::c_char;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::cublas::result::CublasError;
use cudarc::cublas::{CudaBlas, Gemm};
use cudarc::driver::sys::{CUdevice, CUdeviceptr, CUevent_flags};
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DriverError};
use cudarc::nccl::result::NcclError;
use std::time::Duration;

use cudarc::nccl::{group_end, group_start};

use super::barrier::{self, Barrier, TimingBarrier, HOLD_LIMIT};
use super::element::Element;
use super::ffi::{self, NcclComm};
use super::step::{self, Lane, Mark, Op, Payload};
use super::wait::{self, Waited};
use super::{Device, Sizes};
use crate::launch::{Launch, Rendezvous};
use crate::{BenchError, Dtype, Plan};
use commgate_core::result::Schedule;

/// Where the NCCL communicators' unique id comes from.
#[derive(Clone, Copy)]
pub(super) enum IdSource<'a> {
    /// One process drives every rank: `ncclCommInitAll`, no id to share.
    Local,
    /// One process per rank: rank 0 creates the id, the rendezvous carries it.
    Rendezvous { launch: &'a Launch, rendezvous: Option<&'a Rendezvous> },
}

/// The opened GPUs, in the plan's dtype.
pub(super) enum Rig {
    Bf16(Gpus<half::bf16>),
    F16(Gpus<half::f16>),
    F32(Gpus<f32>),
}

impl Rig {
    /// Opens `devices` and allocates everything the runs need, in `plan.dtype`.
    /// `barrier_off`: why the timing barrier stays off, when it does not depend on the machine.
    pub(super) fn open(
        plan: &Plan,
        sizes: &Sizes,
        devices: &[Device],
        id_source: IdSource<'_>,
        barrier_off: Option<String>,
    ) -> Result<Rig, BenchError> {
        Ok(match plan.dtype {
            Dtype::Bfloat16 => Rig::Bf16(Gpus::open(plan, sizes, devices, id_source, barrier_off)?),
            Dtype::Float16 => Rig::F16(Gpus::open(plan, sizes, devices, id_source, barrier_off)?),
            Dtype::Float32 => Rig::F32(Gpus::open(plan, sizes, devices, id_source, barrier_off)?),
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

    /// Gives the run up ([`Gpus::fail`]).
    pub(super) fn fail(&mut self) {
        match self {
            Rig::Bf16(gpus) => gpus.fail(),
            Rig::F16(gpus) => gpus.fail(),
            Rig::F32(gpus) => gpus.fail(),
        }
    }

    /// The first local GPU's context: its name and memory stand for the job's.
    pub(super) fn first_context(&self) -> Option<&Arc<CudaContext>> {
        match self {
            Rig::Bf16(gpus) => gpus.gpus.first().map(|g| &g.ctx),
            Rig::F16(gpus) => gpus.gpus.first().map(|g| &g.ctx),
            Rig::F32(gpus) => gpus.gpus.first().map(|g| &g.ctx),
        }
    }

    /// Whether the timing windows open at the barrier.
    pub(super) fn timing_barrier(&self) -> &TimingBarrier {
        match self {
            Rig::Bf16(gpus) => gpus.barrier.status(),
            Rig::F16(gpus) => gpus.barrier.status(),
            Rig::F32(gpus) => gpus.barrier.status(),
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
    /// The barrier word's address in this GPU's context; `None` while the barrier is off.
    barrier_address: Option<CUdeviceptr>,
}

/// Every GPU this process drives, with one NCCL communicator each (`comms[i]` runs on
/// `gpus[i].comm`).
pub(super) struct Gpus<T> {
    gpus: Vec<Gpu<T>>,
    comms: Vec<NcclComm>,
    /// One process drives every rank (`ncclCommInitAll`): its communicators end together.
    single_process: bool,
    dim: usize,
    barrier: Barrier,
    /// Set by any failed call: the NCCL and cuBLAS objects are then leaked, not dropped.
    poisoned: bool,
}

impl<T: Element> Gpus<T>
where
    CudaBlas: Gemm<T>,
{
    fn open(
        plan: &Plan,
        sizes: &Sizes,
        devices: &[Device],
        id_source: IdSource<'_>,
        barrier_off: Option<String>,
    ) -> Result<Gpus<T>, BenchError> {
        // The matrices are the same on every rank; the payload differs per rank.
        let matrix_a = host_values::<T>(sizes.dim * sizes.dim, plan.seed ^ 0xa);
        let matrix_b = host_values::<T>(sizes.dim * sizes.dim, plan.seed ^ 0xb);
        // Built up in place, so that a failure part way is torn down by `Gpus::drop` too.
        let mut opened = Gpus {
            gpus: Vec::with_capacity(devices.len()),
            comms: Vec::new(),
            single_process: matches!(id_source, IdSource::Local),
            dim: sizes.dim,
            barrier: Barrier::off("not set up yet".to_string()),
            poisoned: false,
        };
        for device in devices {
            let payload = host_values::<T>(sizes.payload, plan.seed.wrapping_add(u64::from(device.rank)));
            opened.gpus.push(open_gpu(*device, sizes, &payload, &matrix_a, &matrix_b)?);
        }
        if matches!(id_source, IdSource::Local) {
            opened.share_pools()?;
        }
        // The communicators come last, once everything else they would wait on exists.
        opened.comms = match id_source {
            IdSource::Local => {
                let streams: Vec<_> = opened.gpus.iter().map(|g| g.comm.clone()).collect();
                NcclComm::init_all(&streams)
                    .map_err(nccl_error(None, "creating the NCCL communicators (ncclCommInitAll)"))?
            }
            IdSource::Rendezvous { launch, rendezvous } => {
                let rank = launch.rank;
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
                let comm = NcclComm::init_rank(&stream, launch.world_size, id, rank)
                    .map_err(nccl_error(Some(rank), "joining the NCCL communicator (ncclCommInitRank)"))?;
                vec![comm]
            }
        };
        match barrier_off {
            None => opened.open_barrier(),
            Some(why) => opened.barrier = Barrier::off(why),
        }
        opened.prime()?;
        Ok(opened)
    }

    /// Lets this process's GPUs write into each other's buffers (see [`pool_grants`]). A GPU
    /// without memory pools had its buffers made by `cuMemAlloc`, which peer access (NCCL
    /// enables it) reaches: nothing to grant there.
    fn share_pools(&self) -> Result<(), BenchError> {
        let devices: Vec<CUdevice> = self.gpus.iter().map(|g| g.ctx.cu_device()).collect();
        let can_access = |dev, peer| ffi::can_access_peer(dev, peer).unwrap_or(false);
        for (owner, peers) in pool_grants(&devices, can_access) {
            let Some(gpu) = self.gpus.iter().find(|g| g.ctx.cu_device() == owner) else { continue };
            if !gpu.ctx.has_async_alloc() {
                continue;
            }
            let rank = gpu.rank;
            ffi::grant_pool_access(owner, &peers).map_err(cuda_error(
                rank,
                format!("letting the other GPUs of this process write to GPU {owner}'s buffers (cuMemPoolSetAccess)"),
            ))?;
        }
        Ok(())
    }

    /// Sets up the timing barrier on every stream, or leaves it off with the reason.
    fn open_barrier(&mut self) {
        let contexts: Vec<_> = self.gpus.iter().map(|g| &g.ctx).collect();
        let (barrier, addresses) = Barrier::open(&contexts);
        if matches!(barrier.status(), TimingBarrier::Held) {
            for (gpu, address) in self.gpus.iter_mut().zip(addresses) {
                gpu.barrier_address = Some(address);
            }
        }
        self.barrier = barrier;
    }

    /// Every schedule once, ungated and untimed: whatever a first use does (connect, allocate,
    /// load a kernel, possibly waiting for the GPU) happens here, not while the barrier is held.
    fn prime(&mut self) -> Result<(), BenchError> {
        for schedule in Schedule::ALL {
            let primed = self.launch(&step::step(schedule, false), None).and_then(|()| self.collect());
            if let Err(e) = primed {
                self.fail();
                return Err(e);
            }
        }
        Ok(())
    }

    fn run(&mut self, schedule: Schedule) -> Result<Vec<f64>, BenchError> {
        let result = self.enqueue_step(schedule).and_then(|()| self.collect());
        if result.is_err() {
            self.fail();
        }
        result
    }

    /// Queues one step of `schedule` on every local GPU behind the barrier, then releases it (or,
    /// with the barrier off, queues it as it comes).
    fn enqueue_step(&mut self, schedule: Schedule) -> Result<(), BenchError> {
        let Some((word, generation)) = self.barrier.next() else {
            return self.launch(&step::step(schedule, false), None);
        };
        let ops = step::step(schedule, true);
        let held = barrier::hold_while(word.word(), generation, HOLD_LIMIT, || self.launch(&ops, Some(generation)))
            .map_err(|e| {
                BenchError::failed("internal", format!("cannot start the timing barrier's watchdog: {e}"), None)
            })?;
        if held.tripped {
            return Err(BenchError::failed(
                "cuda",
                format!(
                    "queueing one {schedule} step held the GPUs at the timing barrier for over {} s (a CUDA, cuBLAS or \
                     NCCL call waited for the GPU), so its times cannot be trusted: rerun with {}=off to time \
                     without the barrier",
                    HOLD_LIMIT.as_secs(),
                    barrier::BARRIER_VARIABLE
                ),
                None,
            ));
        }
        held.out
    }

    /// Queues `ops` (one step, see `step.rs`): each segment on one GPU after another, then the
    /// all-reduce that ends it on all GPUs at once. `generation`: what the barrier waits for.
    fn launch(&mut self, ops: &[Op], generation: Option<u32>) -> Result<(), BenchError> {
        for (per_gpu, reduce) in step::segments(ops) {
            for gpu in &mut self.gpus {
                for &op in per_gpu {
                    gpu.queue(op, self.dim, generation)?;
                }
            }
            if let Some(payload) = reduce {
                self.all_reduce(payload)?;
            }
        }
        Ok(())
    }

    /// The one wait of a step, after every GPU's work is queued ([`Gpus::wait_for_step`]); then
    /// each GPU's start-to-stop time, in `local_ranks` order.
    fn collect(&mut self) -> Result<Vec<f64>, BenchError> {
        self.wait_for_step()?;
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

    /// Waits for every GPU's stop event without blocking inside CUDA or NCCL: polls the events
    /// and every communicator's asynchronous error against [`STEP_LIMIT`]. A peer that died or a
    /// transport that broke shows as an asynchronous error at once; a collective that hangs
    /// without one, at the deadline. Either way every local communicator is aborted (NCCL's
    /// kernels return, so no thread is left inside the driver) and the step fails.
    fn wait_for_step(&mut self) -> Result<(), BenchError> {
        let (comms, gpus) = (&self.comms, &self.gpus);
        let waited = wait::poll_until(STEP_LIMIT, wait::POLL_PAUSE, || {
            wait::step_done(
                comms.iter().map(|c| c.async_error().map_err(Stalled::Nccl)),
                gpus.iter().map(|g| g.stop.try_is_complete().map_err(|e| Stalled::Cuda(g.rank, e))),
            )
        });
        let failure = match waited {
            Waited::Done => return Ok(()),
            Waited::Failed(Stalled::Nccl(e)) => nccl_error(
                None,
                "a collective failed (ncclCommGetAsyncError: a peer died or a transport broke); the communicators were \
                 aborted",
            )(e),
            Waited::Failed(Stalled::Cuda(rank, e)) => {
                cuda_error(rank, format!("waiting for the step to finish ({})", nccl_version()))(e)
            }
            Waited::TimedOut => BenchError::failed(
                "nccl",
                format!(
                    "a step did not finish within {} s (a rank died or a collective hung; {}); the communicators were \
                     aborted",
                    STEP_LIMIT.as_secs(),
                    nccl_version()
                ),
                None,
            ),
        };
        self.fail();
        Err(failure)
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
                Payload::Full => comm.all_reduce_sum(&gpu.send, &mut gpu.recv),
                Payload::Align => comm.all_reduce_sum_in_place(&mut gpu.align),
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

impl<T: Element> Gpu<T>
where
    CudaBlas: Gemm<T>,
{
    /// Queues one per-GPU operation of a step on this GPU.
    fn queue(&mut self, op: Op, dim: usize, generation: Option<u32>) -> Result<(), BenchError> {
        let rank = self.rank;
        match op {
            Op::Barrier(lane) => {
                let (Some(address), Some(generation)) = (self.barrier_address, generation) else {
                    return Err(BenchError::failed("internal", "a gated step without a barrier", Some(rank)));
                };
                ffi::wait_at_barrier(self.stream(lane), address, generation)
                    .map_err(cuda_error(rank, "queueing the wait at the timing barrier (cuStreamWaitValue32)"))
            }
            Op::Record(mark, lane) => self
                .event(mark)
                .record(self.stream(lane))
                .map_err(cuda_error(rank, format!("recording the {} event", mark_name(mark)))),
            Op::Wait(lane, mark) => self
                .stream(lane)
                .wait(self.event(mark))
                .map_err(cuda_error(rank, format!("waiting for the {} event", mark_name(mark)))),
            Op::Gemm(lane) => self.gemm(dim, lane),
            Op::AllReduce(_) => {
                Err(BenchError::failed("internal", "an all-reduce is queued on every GPU at once", Some(rank)))
            }
        }
    }

    fn stream(&self, lane: Lane) -> &CudaStream {
        match lane {
            Lane::Comm => &self.comm,
            Lane::Compute => &self.compute,
        }
    }

    fn event(&self, mark: Mark) -> &CudaEvent {
        match mark {
            Mark::Aligned => &self.aligned,
            Mark::Start => &self.start,
            Mark::Joined => &self.joined,
            Mark::Stop => &self.stop,
        }
    }

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
        barrier_address: None,
    })
}

fn mark_name(mark: Mark) -> &'static str {
    match mark {
        Mark::Aligned => "line-up",
        Mark::Start => "start",
        Mark::Joined => "all-reduce's end",
        Mark::Stop => "stop",
    }
}

impl<T> Gpus<T> {
    /// Gives the run up: aborts every communicator (once), so NCCL's kernels and threads stop,
    /// and marks the GPUs so that the teardown leaks what is left instead of dropping it.
    pub(super) fn fail(&mut self) {
        for comm in std::mem::take(&mut self.comms) {
            let _ = comm.abort();
        }
        self.poisoned = true;
    }
}

impl<T> Drop for Gpus<T> {
    fn drop(&mut self) {
        let gpus = std::mem::take(&mut self.gpus);
        // Never synchronise with a stream still held at the barrier.
        self.barrier.release_all();
        let barrier_word = self.barrier.take_word();
        let healthy = !self.poisoned && gpus.iter().all(|g| g.ctx.synchronize().is_ok());
        if !healthy {
            // The communicators are aborted (their kernels return); the rest is leaked: `CudaBlas`'s
            // drop panics when teardown fails, which is likely now, and a GPU may still read the
            // barrier word.
            self.fail();
            std::mem::forget(gpus);
            std::mem::forget(barrier_word);
            return;
        }
        let clean = end_communicators(std::mem::take(&mut self.comms), self.single_process);
        if clean {
            for gpu in gpus {
                let _ = catch_unwind(AssertUnwindSafe(move || drop(gpu)));
            }
        } else {
            std::mem::forget(gpus);
        }
    }
}

/// How long one step may take before the run is given up: one all-reduce and one matmul take
/// milliseconds to seconds; a minute means a rank died or a collective hung.
pub(super) const STEP_LIMIT: Duration = Duration::from_secs(60);

/// Why a step's wait ended early.
enum Stalled {
    Nccl(NcclError),
    Cuda(u32, DriverError),
}

/// Ends the communicators of a healthy run (every step done, every GPU synchronised); `false`
/// when one did not end cleanly (the rest are then aborted).
///
/// With one process per rank, the ranks' teardowns are not in step: a rank that aborted while a
/// peer still finishes its last collective could free memory the peer's kernels still touch. The
/// timings are gathered across ranks first (the runner drops the backend only after), then each
/// communicator is finalized (`ncclCommFinalize`: completes its operations in step with the
/// ranks that share its resources) and destroyed. One process driving every rank holds all of
/// them: after the synchronisation nothing is in flight and no other process shares them, so
/// they are aborted together (what the NCCL maintainers ask of ranks in one node).
fn end_communicators(comms: Vec<NcclComm>, single_process: bool) -> bool {
    if single_process {
        return comms.into_iter().map(|c| c.abort().is_ok()).fold(true, |a, b| a & b);
    }
    let mut clean = true;
    for comm in comms {
        if clean && comm.finalize().is_ok() {
            clean &= comm.destroy().is_ok();
        } else {
            clean = false;
            let _ = comm.abort();
        }
    }
    clean
}

/// NCCL's unique id for a multi-process job: rank 0 makes it, the rendezvous carries its 128
/// bytes (or nothing, when rank 0 failed, so that the others fail at once instead of waiting).
fn nccl_id(launch: &Launch, rendezvous: Option<&Rendezvous>) -> Result<[c_char; 128], BenchError> {
    let rank = launch.rank;
    let Some(rendezvous) = rendezvous else {
        return Err(BenchError::failed(
            "nccl",
            "one process per GPU needs the rendezvous to share NCCL's unique id",
            Some(rank),
        ));
    };
    if rank == 0 {
        let created = cudarc::nccl::result::get_uniqueid().map(|id| id.internal);
        let bytes = created.as_ref().map(id_to_bytes).unwrap_or_default();
        rendezvous.broadcast(Some(&bytes))?;
        created.map_err(nccl_error(Some(0), "creating NCCL's unique id (ncclGetUniqueId)"))
    } else {
        let bytes = rendezvous.broadcast(None)?;
        id_from_bytes(&bytes).ok_or_else(|| {
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

/// Which GPUs may write to which one's buffers: in a process that drives several GPUs, each GPU's
/// default memory pool (where cudarc allocates, `cuMemAllocAsync`) is opened to every other
/// GPU of the process that can map it (`can_access(peer, owner)`). NCCL up to 2.23 (what pip
/// ships with torch 2.6 and older) writes a same-process peer's data straight into the
/// receiver's buffer (P2P direct write, on Hopper and over PCIe), and enabling peer access does
/// not reach pool memory (CUDA Programming Guide, stream-ordered allocator, multi-GPU access):
/// without this grant the first all-reduce faults with an illegal address. Returns (owner, its
/// peers), owners without peers left out.
fn pool_grants(
    devices: &[CUdevice],
    can_access: impl Fn(CUdevice, CUdevice) -> bool,
) -> Vec<(CUdevice, Vec<CUdevice>)> {
    devices
        .iter()
        .map(|&owner| {
            (owner, devices.iter().copied().filter(|&peer| peer != owner && can_access(peer, owner)).collect())
        })
        .filter(|(_, peers): &(CUdevice, Vec<CUdevice>)| !peers.is_empty())
        .collect()
}

/// "NCCL 2.21.5", as the library loaded reports it, for every NCCL failure: behaviour (and
/// faults) differ by version.
fn nccl_version() -> String {
    cudarc::nccl::result::get_nccl_version()
        .map_or_else(|_| "NCCL of unknown version".to_string(), |v| format!("NCCL {}", super::nccl_version_string(v)))
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
        BenchError::failed(
            "nccl",
            format!("{what}: {:?} ({}; rerun with NCCL_DEBUG=WARN for NCCL's reason)", e.0, nccl_version()),
            rank,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four GPUs where 2 cannot map 3 (and 3 not 2): each pool opens to the peers that can map
    /// it; one GPU alone grants nothing.
    #[test]
    fn pools_open_to_every_peer_that_can_map_them() {
        let can = |peer: CUdevice, owner: CUdevice| !matches!((peer, owner), (2, 3) | (3, 2));
        assert_eq!(
            pool_grants(&[0, 1, 2, 3], can),
            vec![(0, vec![1, 2, 3]), (1, vec![0, 2, 3]), (2, vec![0, 1]), (3, vec![0, 1])]
        );
        assert!(pool_grants(&[5], |_, _| true).is_empty());
        assert!(pool_grants(&[0, 1], |_, _| false).is_empty());
    }

    #[test]
    fn nccl_id_survives_the_byte_round_trip() {
        let mut internal = [0 as c_char; 128];
        for (i, c) in internal.iter_mut().enumerate() {
            *c = c_char::from_ne_bytes([u8::try_from(i * 2 + 1).expect("below 256")]);
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
