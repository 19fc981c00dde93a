//! Every `unsafe` call in commgate, and the only module allowed one: cudarc marks its library
//! checks, the event-tracking switch, the driver-version query, the GEMM, the timing gate's
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
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DriverError, PinnedHostSlice};
use std::ffi::c_int;
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

/// The timing gate's word: four bytes of page-locked host memory, mapped into the address space
/// of every context of this process (`PORTABLE | DEVICEMAP`), that the host writes and the GPUs'
/// streams wait on. Not write-combined, so a store is visible to the GPUs without a flush.
pub(super) struct GateWord {
    /// Owns the allocation (freed on drop, after every stream that waits on it has finished:
    /// `Gpus::drop` synchronises each context first, or leaks the gate with everything else).
    _host: PinnedHostSlice<u32>,
    word: NonNull<u32>,
}

impl GateWord {
    /// Allocates the word, set to 0, in `ctx` (usable from every context of the process).
    pub(super) fn new(ctx: &Arc<CudaContext>) -> Result<GateWord, DriverError> {
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: cudarc's one condition is that the memory starts uninitialised; nothing reads it
        // before the store below sets it (no stream knows its address yet).
        let mut host = unsafe { ctx.alloc_pinned_with_flags::<u32>(1, flags) }?;
        let word = NonNull::new(host.as_mut_ptr()?).ok_or(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY))?;
        let gate = GateWord { _host: host, word };
        gate.word().store(0, Ordering::SeqCst);
        Ok(gate)
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

/// Queues on `stream` a wait until the gate word at `address` reaches `generation` (a cyclic
/// comparison, `(i32)(word − generation) ≥ 0`, so the counter may wrap).
pub(super) fn wait_at_gate(stream: &CudaStream, address: CUdeviceptr, generation: u32) -> Result<(), DriverError> {
    stream.context().bind_to_thread()?;
    let flags = CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
    // SAFETY: `address` comes from `GateWord::device_address` in this stream's context, and the
    // `GateWord` outlives every wait on it (`Gpus` drops it only after synchronising every context,
    // and opens the gate before that). The stream is live (borrowed). The driver only reads the
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
