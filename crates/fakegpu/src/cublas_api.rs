//! The cuBLAS entry points commgate's cudarc calls (`libcublas.so.12`): handles, their stream,
//! and the GEMM (`cublasSgemm_v2`, `cublasGemmEx`), queued on the handle's stream.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use std::ffi::{c_char, c_int, c_void};

use cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasHandle_t, cublasOperation_t, cublasStatus_t, cudaDataType,
    cudaStream_t,
};

use crate::blas::{Element, Gemm, Handle};
use crate::config::get as config;
use crate::contract::{self, answer as call, status, violation, Fail};
use crate::world::{self, world};

type Outcome = Result<(), Fail<cublasStatus_t>>;

impl contract::Status for cublasStatus_t {
    const SUCCESS: Self = cublasStatus_t::CUBLAS_STATUS_SUCCESS;
    const INVALID: Self = cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE;
}

fn handle(h: cublasHandle_t) -> Result<Handle, Fail<cublasStatus_t>> {
    world()
        .blas
        .get(&(h as u64))
        .copied()
        .ok_or_else(|| violation(format!("cuBLAS handle {:#x} was destroyed or never made", h as u64)))
}

#[no_mangle]
pub unsafe extern "C" fn cublasCreate_v2(out: *mut cublasHandle_t) -> cublasStatus_t {
    call("cublasCreate_v2", || {
        let device = world::current().ok_or(status(cublasStatus_t::CUBLAS_STATUS_NOT_INITIALIZED))?;
        if out.is_null() {
            return Err(status(cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE));
        }
        let id = world::next_handle();
        world().blas.insert(id, Handle { device, stream: None });
        contract::made("cublas", id);
        // SAFETY: a non-null out-pointer the caller provides.
        unsafe { out.write(id as cublasHandle_t) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasDestroy_v2(h: cublasHandle_t) -> cublasStatus_t {
    call("cublasDestroy_v2", || {
        let id = h as u64;
        world()
            .blas
            .remove(&id)
            .ok_or_else(|| violation(format!("cuBLAS handle {id:#x} destroyed twice or never made")))?;
        contract::destroyed("cublas", id);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasSetStream_v2(h: cublasHandle_t, stream: cudaStream_t) -> cublasStatus_t {
    call("cublasSetStream_v2", || {
        let mut blas = handle(h)?;
        let bound = crate::driver::stream(stream as u64, blas.device).map_err(to_blas)?;
        if bound.device != blas.device {
            return Err(violation(format!(
                "stream {:#x} of device {} given to a cuBLAS handle of device {}",
                bound.id, bound.device, blas.device
            )));
        }
        blas.stream = Some(bound.id);
        world().blas.insert(h as u64, blas);
        Ok(())
    })
}

fn to_blas(fail: Fail<cudarc::driver::sys::CUresult>) -> Fail<cublasStatus_t> {
    match fail {
        Fail::Status(_) => status(cublasStatus_t::CUBLAS_STATUS_EXECUTION_FAILED),
        Fail::Violation(what) => Fail::Violation(what),
    }
}

fn element(data: cudaDataType) -> Option<Element> {
    match data {
        cudaDataType::CUDA_R_32F => Some(Element::F32),
        cudaDataType::CUDA_R_16F => Some(Element::F16),
        cudaDataType::CUDA_R_16BF => Some(Element::Bf16),
        _ => None,
    }
}

/// Checks a GEMM's arguments and queues it on the handle's stream.
fn queue_gemm(
    name: &str,
    h: cublasHandle_t,
    ops: (cublasOperation_t, cublasOperation_t),
    gemm: Gemm,
    a: u64,
    b: u64,
    c: u64,
) -> Outcome {
    let blas = handle(h)?;
    if world::current() != Some(blas.device) {
        return Err(violation(format!(
            "a cuBLAS handle of device {} used while the current context is {:?}'s (make its context current first)",
            blas.device,
            world::current()
        )));
    }
    if ops != (cublasOperation_t::CUBLAS_OP_N, cublasOperation_t::CUBLAS_OP_N) {
        return Err(status(cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED));
    }
    let Some([span_a, span_b, span_c]) = gemm.spans() else {
        return Err(status(cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE));
    };
    let bytes = |addr: u64, span: usize, which: &str| {
        crate::driver::device_bytes(addr, span, blas.device, &format!("{name}, matrix {which}"))
            .map_err(Fail::Violation)
    };
    let (in_a, in_b, in_c) = (bytes(a, span_a, "A")?, bytes(b, span_b, "B")?, bytes(c, span_c, "C")?);
    let stream = crate::driver::stream(blas.stream.unwrap_or(0), blas.device).map_err(to_blas)?;
    let gflops = config().gemm_gflops;
    stream
        .enqueue(Box::new(move || {
            // SAFETY: each operand's span lies in its held block (checked above); C is written only here.
            unsafe { gemm.run(in_a.block().ptr(a), in_b.block().ptr(b), in_c.block().ptr(c), gflops) };
            Ok(())
        }))
        .map(drop)
        .map_err(|_| violation(format!("the cuBLAS handle's stream {:#x} was destroyed", stream.id)))
}

fn dims(m: c_int, n: c_int, k: c_int, lda: c_int, ldb: c_int, ldc: c_int) -> Option<[usize; 6]> {
    let all = [m, n, k, lda, ldb, ldc].map(|v| usize::try_from(v).ok());
    Some([all[0]?, all[1]?, all[2]?, all[3]?, all[4]?, all[5]?])
}

/// Reads a host scalar the caller passes (cuBLAS's default pointer mode).
fn scalar(ptr: *const f32) -> Result<f32, Fail<cublasStatus_t>> {
    if ptr.is_null() {
        return Err(status(cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE));
    }
    // SAFETY: a non-null host pointer to an f32 the caller provides.
    Ok(unsafe { ptr.read() })
}

#[no_mangle]
pub unsafe extern "C" fn cublasSgemm_v2(
    h: cublasHandle_t,
    transa: cublasOperation_t,
    transb: cublasOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    a: *const f32,
    lda: c_int,
    b: *const f32,
    ldb: c_int,
    beta: *const f32,
    c: *mut f32,
    ldc: c_int,
) -> cublasStatus_t {
    call("cublasSgemm_v2", || {
        let [m, n, k, lda, ldb, ldc] =
            dims(m, n, k, lda, ldb, ldc).ok_or(status(cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE))?;
        let gemm = Gemm { m, n, k, lda, ldb, ldc, alpha: scalar(alpha)?, beta: scalar(beta)?, element: Element::F32 };
        queue_gemm("cublasSgemm_v2", h, (transa, transb), gemm, a as u64, b as u64, c as u64)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasGemmEx(
    h: cublasHandle_t,
    transa: cublasOperation_t,
    transb: cublasOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: cudaDataType,
    lda: c_int,
    b: *const c_void,
    b_type: cudaDataType,
    ldb: c_int,
    beta: *const c_void,
    c: *mut c_void,
    c_type: cudaDataType,
    ldc: c_int,
    compute: cublasComputeType_t,
    _algo: cublasGemmAlgo_t,
) -> cublasStatus_t {
    call("cublasGemmEx", || {
        let [m, n, k, lda, ldb, ldc] =
            dims(m, n, k, lda, ldb, ldc).ok_or(status(cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE))?;
        let types = (element(a_type), element(b_type), element(c_type));
        let (Some(ea), Some(eb), Some(ec)) = types else {
            return Err(status(cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED));
        };
        if ea != eb || eb != ec {
            return Err(status(cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED));
        }
        // FP32 compute takes FP32 scalars; the emulator computes in FP32 whatever is asked.
        use cublasComputeType_t::*;
        if !matches!(
            compute,
            CUBLAS_COMPUTE_32F
                | CUBLAS_COMPUTE_32F_FAST_16F
                | CUBLAS_COMPUTE_32F_FAST_16BF
                | CUBLAS_COMPUTE_32F_FAST_TF32
        ) {
            return Err(status(cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED));
        }
        let gemm =
            Gemm { m, n, k, lda, ldb, ldc, alpha: scalar(alpha.cast())?, beta: scalar(beta.cast())?, element: ea };
        queue_gemm("cublasGemmEx", h, (transa, transb), gemm, a as u64, b as u64, c as u64)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetStatusString(code: cublasStatus_t) -> *const c_char {
    let text: &'static [u8] = match code {
        cublasStatus_t::CUBLAS_STATUS_SUCCESS => b"success\0",
        cublasStatus_t::CUBLAS_STATUS_NOT_INITIALIZED => b"the library was not initialized\0",
        cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE => b"an invalid numeric value was used as an argument\0",
        cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED => b"the functionality requested is not supported\0",
        _ => b"an error occurred\0",
    };
    text.as_ptr().cast()
}
