//! The element types the benchmark runs in (bf16, f16, f32): what NCCL and cuBLAS both take.
//! A leaf module, so the FFI layer and the GPU driver code can both name it without importing
//! each other.

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use cudarc::nccl::NcclType;

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
