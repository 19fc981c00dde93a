//! Every `unsafe` call in commgate, and the only module allowed one: cudarc marks its library
//! checks, the event-tracking switch, the driver-version query and the GEMM unsafe, and each call
//! here says why it is sound.

#![expect(
    unsafe_code,
    reason = "cudarc's library checks, event-tracking switch, driver version and GEMM are unsafe fns"
)]

use super::gpus::Element;
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
