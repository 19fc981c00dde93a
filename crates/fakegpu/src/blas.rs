//! cuBLAS: handles bound to a stream, and the GEMM, computed for real on small sizes (so the
//! arithmetic is checked) and timed from the configured rate on large ones.

use std::time::{Duration, Instant};

use half::{bf16, f16};

/// A cuBLAS handle: made on the current context's device, bound to one of its streams.
#[derive(Debug, Clone, Copy)]
pub struct Handle {
    pub device: u32,
    /// `None`: the default stream (never set).
    pub stream: Option<u64>,
}

/// The element types the emulated GEMM takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Element {
    F32,
    F16,
    Bf16,
}

impl Element {
    pub fn size(self) -> usize {
        match self {
            Element::F32 => 4,
            Element::F16 | Element::Bf16 => 2,
        }
    }

    /// Reads element `i` of the bytes at `base`.
    ///
    /// # Safety
    /// `base` points to at least `(i + 1) · size` readable bytes.
    unsafe fn read(self, base: *const u8, i: usize) -> f32 {
        // SAFETY: the caller's condition; unaligned reads, as device pointers need not be aligned here.
        unsafe {
            match self {
                Element::F32 => std::ptr::read_unaligned(base.add(i * 4).cast::<f32>()),
                Element::F16 => f16::from_bits(std::ptr::read_unaligned(base.add(i * 2).cast::<u16>())).to_f32(),
                Element::Bf16 => bf16::from_bits(std::ptr::read_unaligned(base.add(i * 2).cast::<u16>())).to_f32(),
            }
        }
    }

    /// Writes `value` as element `i` of the bytes at `base`.
    ///
    /// # Safety
    /// `base` points to at least `(i + 1) · size` writable bytes.
    unsafe fn write(self, base: *mut u8, i: usize, value: f32) {
        // SAFETY: the caller's condition.
        unsafe {
            match self {
                Element::F32 => std::ptr::write_unaligned(base.add(i * 4).cast::<f32>(), value),
                Element::F16 => {
                    std::ptr::write_unaligned(base.add(i * 2).cast::<u16>(), f16::from_f32(value).to_bits())
                }
                Element::Bf16 => {
                    std::ptr::write_unaligned(base.add(i * 2).cast::<u16>(), bf16::from_f32(value).to_bits())
                }
            }
        }
    }
}

/// An untransposed column-major GEMM, C = alpha·A·B + beta·C (A m×k, B k×n, C m×n).
#[derive(Debug, Clone, Copy)]
pub struct Gemm {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    pub alpha: f32,
    pub beta: f32,
    pub element: Element,
}

/// Matmuls of at most this many multiply-adds are computed; larger ones are timed only.
pub const COMPUTED_MACS: u64 = 1 << 24;

impl Gemm {
    /// Bytes each operand spans (the last column is `rows` long, the others `ld`).
    pub fn spans(&self) -> Option<[usize; 3]> {
        let span = |ld: usize, rows: usize, cols: usize| -> Option<usize> {
            if ld < rows.max(1) {
                return None;
            }
            if cols == 0 || rows == 0 {
                return Some(0);
            }
            ld.checked_mul(cols - 1)?.checked_add(rows)?.checked_mul(self.element.size())
        };
        Some([span(self.lda, self.m, self.k)?, span(self.ldb, self.k, self.n)?, span(self.ldc, self.m, self.n)?])
    }

    pub fn macs(&self) -> u64 {
        (self.m as u64).saturating_mul(self.n as u64).saturating_mul(self.k as u64)
    }

    /// How long the matmul takes at `gflops`.
    pub fn time_at(&self, gflops: f64) -> Duration {
        Duration::from_secs_f64((2.0 * self.macs() as f64 / (gflops * 1e9)).min(3600.0))
    }

    /// Runs the matmul on the bytes at `a`, `b`, `c` (each at least its [`Gemm::spans`]): computed
    /// when small, and lasting at least its time at `gflops` either way.
    ///
    /// # Safety
    /// `a`, `b` and `c` point to at least their spans' bytes; `c` is written by no one else meanwhile.
    pub unsafe fn run(&self, a: *const u8, b: *const u8, c: *mut u8, gflops: f64) {
        let start = Instant::now();
        if self.macs() <= COMPUTED_MACS {
            // SAFETY: the caller's condition.
            unsafe { self.compute(a, b, c) };
        }
        crate::stream::last_at_least(start, self.time_at(gflops));
    }

    /// # Safety
    /// As [`Gemm::run`].
    unsafe fn compute(&self, a: *const u8, b: *const u8, c: *mut u8) {
        let e = self.element;
        for j in 0..self.n {
            for i in 0..self.m {
                let mut sum = 0f32;
                for l in 0..self.k {
                    // SAFETY: i < m, l < k, j < n: inside the spans.
                    sum += unsafe { e.read(a, i + l * self.lda) * e.read(b, l + j * self.ldb) };
                }
                let at = i + j * self.ldc;
                // Beta 0 never reads C (cuBLAS's rule: C may hold NaN then).
                // SAFETY: inside C's span.
                let old = if self.beta == 0.0 { 0.0 } else { self.beta * unsafe { e.read(c, at) } };
                // SAFETY: inside C's span.
                unsafe { e.write(c, at, self.alpha * sum + old) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_computed_product_is_the_matrix_product_in_each_element_type() {
        // Column-major 2×3 · 3×2.
        let a = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
        let b = [7.0f32, 9.0, 11.0, 8.0, 10.0, 12.0];
        let expected = [58.0f32, 139.0, 64.0, 154.0];
        for element in [Element::F32, Element::F16, Element::Bf16] {
            let encode = |values: &[f32]| -> Vec<u8> {
                let mut bytes = vec![0u8; values.len() * element.size()];
                for (i, v) in values.iter().enumerate() {
                    // SAFETY: `bytes` holds every element.
                    unsafe { element.write(bytes.as_mut_ptr(), i, *v) };
                }
                bytes
            };
            let (a, b) = (encode(&a), encode(&b));
            let mut c = encode(&[f32::NAN; 4]);
            let gemm = Gemm { m: 2, n: 2, k: 3, lda: 2, ldb: 3, ldc: 2, alpha: 1.0, beta: 0.0, element };
            assert_eq!(gemm.spans(), Some([6 * element.size(), 6 * element.size(), 4 * element.size()]));
            // SAFETY: each buffer holds its span.
            unsafe { gemm.run(a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), 1e6) };
            // SAFETY: `c` holds four elements.
            let got: Vec<f32> = (0..4).map(|i| unsafe { element.read(c.as_ptr(), i) }).collect();
            assert_eq!(got, expected, "{element:?}");
        }
    }

    #[test]
    fn a_leading_dimension_shorter_than_the_rows_is_refused() {
        let gemm = Gemm { m: 4, n: 4, k: 4, lda: 3, ldb: 4, ldc: 4, alpha: 1.0, beta: 0.0, element: Element::F32 };
        assert_eq!(gemm.spans(), None);
        let fine = Gemm { lda: 4, ..gemm };
        assert_eq!(fine.spans(), Some([64, 64, 64]));
        assert_eq!(fine.time_at(1.0), Duration::from_nanos(128));
    }
}
