//! An emulated CUDA driver, cuBLAS and NCCL for commgate's CUDA backend: the real code path
//! (cudarc, the timing barrier, the communicators, the teardown) runs end to end on a machine
//! without a GPU, against libraries that are strict about the contract.
//!
//! Built as one shared object that `scripts/fake-gpu.sh` links as `libcuda.so.1`,
//! `libcublas.so.12` and `libnccl.so.2`, it implements exactly the entry points commgate calls,
//! with CPU semantics: device memory is host memory; each stream is a worker thread, so two
//! streams really overlap; events are stamped when their stream reaches them; the GEMM is
//! computed on small sizes and timed from a configured rate on large ones; the all-reduce sums
//! for real, between the communicators of one process or between processes over loopback.
//!
//! **Strict.** A call that is undefined behaviour on a GPU — a destroyed handle, an address in no
//! allocation, a stream or buffer of another context, an event queried before it was ever
//! recorded, counts or types that differ across ranks, a group left open, a communicator
//! destroyed with work in flight, memory freed while a stream still uses it — is reported as one
//! line starting with [`contract::VIOLATION`], and the process aborts. The ledger
//! (`COMMGATE_FAKEGPU_LEDGER`) records every handle made and destroyed, for the leak check.
//!
//! **Faults** (`COMMGATE_FAKEGPU_FAULT`, see [`config::Fault`]) and the machine's shape
//! (`COMMGATE_FAKEGPU_DEVICES`, `_CUDA`, `_NCCL`, …, see [`config::Config`]) come from the
//! environment. Every device says [`config::DEVICE_NAME`]: a run on the emulator is never taken
//! for a GPU's.

#![expect(unsafe_code, reason = "an emulated C library: exported entry points, raw device pointers, host memory")]

pub mod blas;
pub mod config;
pub mod contract;
pub mod cublas_api;
pub mod driver;
pub mod memory;
pub mod nccl;
pub mod nccl_api;
pub mod stream;
pub mod world;
