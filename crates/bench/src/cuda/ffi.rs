//! Every `unsafe` call in commgate, and the only module allowed one: cudarc marks its library
//! checks, the event-tracking switch, the driver-version query, the GEMM, the timing barrier's
//! host-mapped word and stream wait, and the peer-to-peer queries unsafe, and each call here says
//! why it is sound.

#![expect(
    unsafe_code,
    reason = "cudarc's library checks, event-tracking switch, driver queries, pinned memory, stream waits and \
              GEMM are unsafe fns"
)]

use super::element::Element;
use cudarc::cublas::result::CublasError;
use cudarc::cublas::sys::{cublasOperation_t, cublasStatus_t};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::sys::{self, CUdevice, CUdevice_P2PAttribute, CUdeviceptr, CUresult, CUstreamWaitValue_flags};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DriverError, PinnedHostSlice};
use cudarc::nccl::result::NcclError;
use cudarc::nccl::{self, sys as nccl_sys};
use std::ffi::{c_char, c_int};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

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

/// Loads the shared library at `path` for the life of the process (`RTLD_NOW | RTLD_GLOBAL`), so
/// that cudarc's own `dlopen` by the library's soname finds this copy. `Err` with the loader's
/// message when it does not load.
pub(super) fn load_resident(path: &Path) -> Result<(), String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading runs the library's initialisers, as cudarc's own loading of it would; the
    // handle is never closed (forgotten below), so nothing resolved from it can dangle.
    let library = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| e.to_string())?;
    std::mem::forget(library);
    Ok(())
}

/// Loads NCCL through cudarc now and keeps it (cudarc holds it for the life of the process), so
/// that the link it was loaded through can go. Call only when [`nccl_present`] is true.
pub(super) fn keep_nccl_loaded() {
    if nccl_present() {
        // SAFETY: NCCL is present (checked above), so cudarc's loader finds it instead of
        // panicking; it loads the library once and keeps it in a static.
        let _ = unsafe { cudarc::nccl::sys::culib() };
    }
}

/// One of the libraries cudarc loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lib {
    Driver,
    Cublas,
    Nccl,
}

/// Which of `names` the library does not export. cudarc resolves each symbol on its first call
/// and *panics* when it is missing, so the backend asks first. Call only when the library is
/// present ([`driver_present`], [`cublas_present`], [`nccl_present`]).
pub(super) fn missing_symbols(lib: Lib, names: &[&'static str]) -> Vec<&'static str> {
    // SAFETY: the library is present (the caller's condition), so cudarc's loader finds it
    // instead of panicking, loads it once and keeps it in a static.
    let library = unsafe {
        match lib {
            Lib::Driver => cudarc::driver::sys::culib(),
            Lib::Cublas => cudarc::cublas::sys::culib(),
            Lib::Nccl => cudarc::nccl::sys::culib(),
        }
    };
    names
        .iter()
        .copied()
        // SAFETY: only looks the symbol up (dlsym); nothing is called through the pointer.
        .filter(|name| unsafe { library.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_err())
        .collect()
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

/// The timing barrier's word: four bytes of page-locked host memory, mapped into the address space
/// of every context of this process (`PORTABLE | DEVICEMAP`), that the host writes and the GPUs'
/// streams wait on. Not write-combined, so a store is visible to the GPUs without a flush.
pub(super) struct BarrierWord {
    /// Owns the allocation (freed on drop, after every stream that waits on it has finished:
    /// `Gpus::drop` synchronises each context first, or leaks the barrier with everything else).
    _host: PinnedHostSlice<u32>,
    word: NonNull<u32>,
}

impl BarrierWord {
    /// Allocates the word, set to 0, in `ctx` (usable from every context of the process).
    pub(super) fn new(ctx: &Arc<CudaContext>) -> Result<BarrierWord, DriverError> {
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: cudarc's one condition is that the memory starts uninitialised; nothing reads it
        // before the store below sets it (no stream knows its address yet).
        let mut host = unsafe { ctx.alloc_pinned_with_flags::<u32>(1, flags) }?;
        let word = NonNull::new(host.as_mut_ptr()?).ok_or(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY))?;
        let barrier = BarrierWord { _host: host, word };
        barrier.word().store(0, Ordering::SeqCst);
        Ok(barrier)
    }

    /// The word, for the host: every host access goes through this atomic.
    pub(super) fn word(&self) -> &AtomicU32 {
        // SAFETY: `word` points to one u32 of page-locked memory (page-aligned, so aligned for an
        // AtomicU32) that `_host` keeps allocated while `self`, and so the returned borrow, lives.
        // On the host it is only ever accessed through this atomic; the GPUs only read it.
        unsafe { AtomicU32::from_ptr(self.word.as_ptr()) }
    }

    /// The word's address in `ctx`'s device address space.
    pub(super) fn device_address(&self, ctx: &CudaContext) -> Result<CUdeviceptr, DriverError> {
        ctx.bind_to_thread()?;
        let mut address: CUdeviceptr = 0;
        // SAFETY: `word` is a live cuMemHostAlloc(DEVICEMAP | PORTABLE) allocation, which is what
        // cuMemHostGetDevicePointer takes (flags must be 0); it only writes the local `address`.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut address, self.word.as_ptr().cast(), 0) }.result()?;
        Ok(address)
    }
}

/// Queues on `stream` a wait until the barrier word at `address` reaches `generation` (a cyclic
/// comparison, `(i32)(word − generation) ≥ 0`, so the counter may wrap).
pub(super) fn wait_at_barrier(stream: &CudaStream, address: CUdeviceptr, generation: u32) -> Result<(), DriverError> {
    stream.context().bind_to_thread()?;
    let flags = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
    // SAFETY: `address` comes from `BarrierWord::device_address` in this stream's context, and the
    // `BarrierWord` outlives every wait on it (`Gpus` drops it only after synchronising every context,
    // and opens the barrier before that). The stream is live (borrowed). The driver only reads the
    // word.
    unsafe { sys::cuStreamWaitValue32_v2(stream.cu_stream(), address, generation, flags) }.result()
}

/// A peer-to-peer attribute of the link from `src` to `dst` (`cuDeviceGetP2PAttribute`).
pub(super) fn p2p_attribute(
    attribute: CUdevice_P2PAttribute,
    src: CUdevice,
    dst: CUdevice,
) -> Result<i32, DriverError> {
    let mut value: c_int = 0;
    // SAFETY: both devices are handles from cuDeviceGet after cuInit (a context is open); the
    // pointer is to a live local int, which the call only writes.
    unsafe { sys::cuDeviceGetP2PAttribute(&mut value, attribute, src, dst) }.result()?;
    Ok(value)
}

/// Lets each of `peers` read and write every allocation of `owner`'s default memory pool, made
/// before or after (`cuDeviceGetDefaultMemPool`, `cuMemPoolSetAccess`). cudarc allocates from that
/// pool (`cuMemAllocAsync`), and enabling peer access does not reach pool memory.
pub(super) fn grant_pool_access(owner: CUdevice, peers: &[CUdevice]) -> Result<(), DriverError> {
    if peers.is_empty() {
        return Ok(());
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `owner` is a handle from cuDeviceGet after cuInit (its context is open); the
    // pointer is to a live local, which the call only writes.
    unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, owner) }.result()?;
    let descriptors: Vec<sys::CUmemAccessDesc> = peers
        .iter()
        .map(|&peer| sys::CUmemAccessDesc {
            location: sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: peer },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        })
        .collect();
    // SAFETY: `pool` is the owner's default pool (just returned); the descriptors are a live
    // slice of `descriptors.len()` initialised entries, which the call only reads.
    unsafe { sys::cuMemPoolSetAccess(pool, descriptors.as_ptr(), descriptors.len()) }.result()
}

/// Whether `dev` can map `peer`'s memory (`cuDeviceCanAccessPeer`).
pub(super) fn can_access_peer(dev: CUdevice, peer: CUdevice) -> Result<bool, DriverError> {
    let mut value: c_int = 0;
    // SAFETY: as `p2p_attribute`.
    unsafe { sys::cuDeviceCanAccessPeer(&mut value, dev, peer) }.result()?;
    Ok(value != 0)
}

/// An NCCL communicator made through NCCL's own API. cudarc's `Comm` keeps its handle to itself,
/// so it can be neither polled for an asynchronous error nor aborted against a deadline, and its
/// drop always aborts (panicking when that fails). This one ends only as its owner says:
/// [`NcclComm::finalize`] and [`NcclComm::destroy`] after a healthy run, [`NcclComm::abort`] on an
/// error. One dropped without either is leaked (the process is about to exit), never torn down
/// behind the owner's back.
pub(super) struct NcclComm {
    handle: nccl_sys::ncclComm_t,
    stream: Arc<CudaStream>,
}

/// An argument NCCL would refuse (a count or rank past `int`), refused before calling it.
fn invalid_argument() -> NcclError {
    NcclError(nccl_sys::ncclResult_t::ncclInvalidArgument)
}

impl NcclComm {
    /// `ncclCommInitAll`: one communicator per stream's GPU, ranks in the streams' order, all in
    /// this process.
    pub(super) fn init_all(streams: &[Arc<CudaStream>]) -> Result<Vec<NcclComm>, NcclError> {
        let count = c_int::try_from(streams.len()).map_err(|_| invalid_argument())?;
        let ordinals = streams
            .iter()
            .map(|s| c_int::try_from(s.context().ordinal()))
            .collect::<Result<Vec<c_int>, _>>()
            .map_err(|_| invalid_argument())?;
        let mut handles: Vec<nccl_sys::ncclComm_t> = vec![std::ptr::null_mut(); streams.len()];
        // SAFETY: `handles` has room for `count` handles and `ordinals` holds `count` device
        // ordinals of GPUs whose contexts are open; NCCL only writes the handles.
        unsafe { nccl::result::comm_init_all(handles.as_mut_ptr(), count, ordinals.as_ptr()) }?;
        Ok(handles.into_iter().zip(streams).map(|(handle, s)| NcclComm { handle, stream: s.clone() }).collect())
    }

    /// `ncclCommInitRank` on the stream's GPU: rank `rank` of `world` ranks sharing `id`.
    pub(super) fn init_rank(
        stream: &Arc<CudaStream>,
        world: u32,
        id: [c_char; 128],
        rank: u32,
    ) -> Result<NcclComm, NcclError> {
        let (world, rank) = match (c_int::try_from(world), c_int::try_from(rank)) {
            (Ok(w), Ok(r)) if r < w => (w, r),
            _ => return Err(invalid_argument()),
        };
        // NCCL joins on the current device.
        stream.context().bind_to_thread().map_err(|_| NcclError(nccl_sys::ncclResult_t::ncclUnhandledCudaError))?;
        let mut handle: nccl_sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: the pointer is to a live local handle, which NCCL only writes; the id is the
        // 128 bytes rank 0's ncclGetUniqueId made, passed by value.
        unsafe { nccl::result::comm_init_rank(&mut handle, world, nccl_sys::ncclUniqueId { internal: id }, rank) }?;
        Ok(NcclComm { handle, stream: stream.clone() })
    }

    /// Queues the sum of every rank's `send` into `recv` (out of place) on the communicator's stream.
    pub(super) fn all_reduce_sum<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
    ) -> Result<(), NcclError> {
        if recv.len() < send.len() {
            return Err(invalid_argument());
        }
        let count = send.len();
        let (src, _read) = send.device_ptr(&self.stream);
        let (dst, _write) = recv.device_ptr_mut(&self.stream);
        // SAFETY: both buffers live on this communicator's GPU and outlive the call's guards;
        // `recv` holds at least `count` elements (checked); the stream is the communicator's own.
        unsafe { self.all_reduce(src, dst, count, T::as_nccl_type()) }
    }

    /// Queues the in-place sum of every rank's `buffer` on the communicator's stream.
    pub(super) fn all_reduce_sum_in_place<T: Element>(&self, buffer: &mut CudaSlice<T>) -> Result<(), NcclError> {
        let count = buffer.len();
        let (ptr, _write) = buffer.device_ptr_mut(&self.stream);
        // SAFETY: as `all_reduce_sum`, with one buffer read and written in place.
        unsafe { self.all_reduce(ptr, ptr, count, T::as_nccl_type()) }
    }

    /// # Safety
    /// `src` and `dst` are device pointers of this communicator's GPU, live until the queued
    /// operation has run, each of at least `count` elements of `dtype`.
    unsafe fn all_reduce(
        &self,
        src: CUdeviceptr,
        dst: CUdeviceptr,
        count: usize,
        dtype: nccl_sys::ncclDataType_t,
    ) -> Result<(), NcclError> {
        let op = nccl_sys::ncclRedOp_t::ncclSum;
        let stream = self.stream.cu_stream() as nccl_sys::cudaStream_t;
        // SAFETY: the caller's conditions, and a live communicator handle (owned by `self`).
        unsafe { nccl::result::all_reduce(src as *const _, dst as *mut _, count, dtype, op, self.handle, stream) }
            .map(drop)
    }

    /// The communicator's asynchronous error (`ncclCommGetAsyncError`): `Ok` while it is healthy
    /// or still completing an operation, the error once a peer failed or a transport broke.
    pub(super) fn async_error(&self) -> Result<(), NcclError> {
        let mut state = nccl_sys::ncclResult_t::ncclSuccess;
        // SAFETY: a live handle (owned by `self`) and a pointer to a live local, which NCCL only
        // writes.
        unsafe { nccl_sys::ncclCommGetAsyncError(self.handle, &mut state) }.result()?;
        match state {
            nccl_sys::ncclResult_t::ncclSuccess | nccl_sys::ncclResult_t::ncclInProgress => Ok(()),
            failed => Err(NcclError(failed)),
        }
    }

    /// `ncclCommAbort`: stops the communicator's operations in flight (its kernels return) and
    /// frees it; the way out after an error or a missed deadline.
    pub(super) fn abort(self) -> Result<(), NcclError> {
        // SAFETY: a live handle, consumed: it is used no more.
        unsafe { nccl::result::comm_abort(self.handle) }.map(drop)
    }

    /// `ncclCommFinalize`: completes the communicator's operations, in step with the other ranks
    /// that use its resources. Several communicators of one thread are finalized inside one group.
    pub(super) fn finalize(&self) -> Result<(), NcclError> {
        // SAFETY: a live handle (owned by `self`).
        unsafe { nccl::result::comm_finalize(self.handle) }.map(drop)
    }

    /// `ncclCommDestroy`, after [`NcclComm::finalize`].
    pub(super) fn destroy(self) -> Result<(), NcclError> {
        // SAFETY: a live handle, consumed: it is used no more.
        unsafe { nccl::result::comm_destroy(self.handle) }.map(drop)
    }
}

/// Ends the process with `code` without running anything at exit: no `atexit` handler, no
/// library's static destructor (CUDA's and NCCL's would run while a benchmark thread may still be
/// inside the driver, and crash or hang there). Buffered output is flushed first.
pub fn exit_without_destructors(code: u8) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` takes any status and never returns; nothing of ours needs to run after it
    // (files are written and closed, output flushed above).
    unsafe { libc::_exit(c_int::from(code)) }
}
