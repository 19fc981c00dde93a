//! The contract checker catches what it claims to: each scenario breaks one rule through the
//! exported entry points, in a child process (a violation aborts it), and the test reads the one
//! line it printed. A scenario that keeps the rules runs clean, so the checker is not simply
//! aborting everything.

#![allow(unsafe_code, reason = "the scenarios call the emulated C entry points")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::ffi::c_void;
use std::process::Command;

use commgate_fakegpu::contract::VIOLATION;
use commgate_fakegpu::{driver as cu, nccl_api as nccl};
use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUevent, CUresult, CUstream};
use cudarc::nccl::sys::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t};

const SCENARIO: &str = "FAKEGPU_CONTRACT_SCENARIO";

fn ok(r: CUresult) {
    assert_eq!(r, CUresult::CUDA_SUCCESS);
}

/// Device 0's context made current, and a stream on it.
unsafe fn setup() -> CUstream {
    unsafe {
        ok(cu::cuInit(0));
        let mut ctx: CUcontext = std::ptr::null_mut();
        ok(cu::cuDevicePrimaryCtxRetain(&mut ctx, 0));
        ok(cu::cuCtxSetCurrent(ctx));
        let mut stream: CUstream = std::ptr::null_mut();
        ok(cu::cuStreamCreate(&mut stream, 0));
        stream
    }
}

unsafe fn alloc(bytes: usize, stream: CUstream) -> CUdeviceptr {
    let mut ptr: CUdeviceptr = 0;
    ok(unsafe { cu::cuMemAllocAsync(&mut ptr, bytes, stream) });
    ptr
}

/// Two communicators of one clique on devices 0 and 1, each with a stream on its device.
unsafe fn two_comms() -> ([ncclComm_t; 2], [CUstream; 2]) {
    unsafe {
        let first = setup();
        let mut ctx: CUcontext = std::ptr::null_mut();
        ok(cu::cuDevicePrimaryCtxRetain(&mut ctx, 1));
        ok(cu::cuCtxSetCurrent(ctx));
        let mut second: CUstream = std::ptr::null_mut();
        ok(cu::cuStreamCreate(&mut second, 0));
        let mut comms: [ncclComm_t; 2] = [std::ptr::null_mut(); 2];
        assert_eq!(nccl::ncclCommInitAll(comms.as_mut_ptr(), 2, [0, 1].as_ptr()), ncclResult_t::ncclSuccess);
        (comms, [first, second])
    }
}

unsafe fn all_reduce(buf: CUdeviceptr, count: usize, comm: ncclComm_t, stream: CUstream) -> ncclResult_t {
    let ptr = buf as *mut c_void;
    let (f32s, sum) = (ncclDataType_t::ncclFloat32, ncclRedOp_t::ncclSum);
    unsafe { nccl::ncclAllReduce(ptr, ptr, count, f32s, sum, comm, stream as _) }
}

/// Runs in the child: the scenario named by the environment.
fn scenario(name: &str) {
    // SAFETY: each scenario passes valid pointers for its out-parameters; what it breaks is the
    // emulated libraries' contract, which is the point.
    unsafe {
        match name {
            "clean" => {
                let stream = setup();
                let buf = alloc(64, stream);
                let mut event: CUevent = std::ptr::null_mut();
                ok(cu::cuEventCreate(&mut event, 0));
                ok(cu::cuMemsetD8Async(buf, 1, 64, stream));
                ok(cu::cuEventRecord(event, stream));
                ok(cu::cuStreamSynchronize(stream));
                ok(cu::cuEventQuery(event));
                ok(cu::cuMemFreeAsync(buf, stream));
                ok(cu::cuStreamSynchronize(stream));
                ok(cu::cuEventDestroy_v2(event));
                ok(cu::cuStreamDestroy_v2(stream));
            }
            "event-queried-before-recorded" => {
                setup();
                let mut event: CUevent = std::ptr::null_mut();
                ok(cu::cuEventCreate(&mut event, 0));
                cu::cuEventQuery(event);
            }
            "stream-destroyed-twice" => {
                let stream = setup();
                ok(cu::cuStreamDestroy_v2(stream));
                cu::cuStreamDestroy_v2(stream);
            }
            "copy-into-freed-memory" => {
                let stream = setup();
                let buf = alloc(64, stream);
                ok(cu::cuMemFreeAsync(buf, stream));
                let bytes = [0u8; 64];
                cu::cuMemcpyHtoDAsync_v2(buf, bytes.as_ptr().cast(), 64, stream);
            }
            "copy-past-the-end" => {
                let stream = setup();
                let buf = alloc(64, stream);
                let bytes = [0u8; 65];
                cu::cuMemcpyHtoDAsync_v2(buf, bytes.as_ptr().cast(), 65, stream);
            }
            "freed-under-another-stream" => {
                let stream = setup();
                let mut other: CUstream = std::ptr::null_mut();
                ok(cu::cuStreamCreate(&mut other, 0));
                let buf = alloc(64, stream);
                ok(cu::cuStreamSynchronize(stream));
                // `other` waits on a word nobody sets, then writes the buffer: queued, in use.
                let mut word: *mut c_void = std::ptr::null_mut();
                ok(cu::cuMemHostAlloc(&mut word, 4, 0x2));
                ok(cu::cuStreamWaitValue32_v2(other, word as CUdeviceptr, 1, 0));
                ok(cu::cuMemsetD8Async(buf, 0, 64, other));
                ok(cu::cuMemFreeAsync(buf, stream));
                ok(cu::cuStreamSynchronize(stream));
            }
            "counts-differ-across-ranks" => {
                let (comms, streams) = two_comms();
                let (a, b) = (alloc(64, streams[0]), alloc(64, streams[1]));
                nccl::ncclGroupStart();
                all_reduce(a, 16, comms[0], streams[0]);
                all_reduce(b, 8, comms[1], streams[1]);
                nccl::ncclGroupEnd();
                ok(cu::cuStreamSynchronize(streams[0]));
            }
            "one-thread-several-comms-without-a-group" => {
                let (comms, streams) = two_comms();
                let a = alloc(64, streams[0]);
                all_reduce(a, 16, comms[0], streams[0]);
            }
            "group-left-open" => {
                let (comms, streams) = two_comms();
                let (a, b) = (alloc(64, streams[0]), alloc(64, streams[1]));
                nccl::ncclGroupStart();
                all_reduce(a, 16, comms[0], streams[0]);
                all_reduce(b, 16, comms[1], streams[1]);
                cu::cuStreamSynchronize(streams[0]);
            }
            "communicator-destroyed-with-work-in-flight" => {
                let (comms, streams) = two_comms();
                let a = alloc(64, streams[0]);
                nccl::ncclGroupStart();
                all_reduce(a, 16, comms[0], streams[0]);
                nccl::ncclGroupEnd();
                // Rank 1 never joins: rank 0's collective stays in flight.
                nccl::ncclCommDestroy(comms[0]);
            }
            "collective-on-an-aborted-communicator" => {
                let (comms, streams) = two_comms();
                let a = alloc(64, streams[0]);
                assert_eq!(nccl::ncclCommAbort(comms[0]), ncclResult_t::ncclSuccess);
                nccl::ncclGroupStart();
                all_reduce(a, 16, comms[0], streams[0]);
            }
            other => panic!("no scenario {other}"),
        }
    }
    std::process::exit(0);
}

/// This test binary re-run as the child of scenario `name`: its exit status and stderr.
fn run(name: &str) -> (bool, String) {
    let out = Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", "child", "--nocapture", "--test-threads", "1"])
        .env(SCENARIO, name)
        .output()
        .expect("spawn");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The child's entry: does nothing unless a scenario is named.
#[test]
fn child() {
    if let Ok(name) = std::env::var(SCENARIO) {
        scenario(&name);
    }
}

#[test]
fn a_scenario_that_keeps_the_rules_runs_clean() {
    let (success, stderr) = run("clean");
    assert!(success && !stderr.contains(VIOLATION), "{stderr}");
}

#[test]
fn every_broken_rule_is_one_line_naming_the_call_and_the_run_aborts() {
    let cases = [
        ("event-queried-before-recorded", "in cuEventQuery: event", "queried before it was ever recorded"),
        ("stream-destroyed-twice", "in cuStreamDestroy_v2: stream", "destroyed twice"),
        ("copy-into-freed-memory", "in cuMemcpyHtoDAsync_v2:", "not inside one live allocation"),
        ("copy-past-the-end", "in cuMemcpyHtoDAsync_v2:", "65 bytes"),
        ("freed-under-another-stream", "in cuMemFreeAsync:", "still use it"),
        ("counts-differ-across-ranks", "in ncclAllReduce: rank 1 passed count 8", "same count"),
        ("one-thread-several-comms-without-a-group", "in ncclAllReduce: one thread drives 2", "ncclGroupStart"),
        ("group-left-open", "in cuStreamSynchronize:", "ncclGroupEnd missing"),
        ("communicator-destroyed-with-work-in-flight", "in ncclCommDestroy: communicator", "in flight"),
        ("collective-on-an-aborted-communicator", "in ncclAllReduce:", "destroyed, aborted or never made"),
    ];
    for (name, call, what) in cases {
        let (success, stderr) = run(name);
        assert!(!success, "{name}: the run went on: {stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with(VIOLATION)).collect();
        assert_eq!(lines.len(), 1, "{name}: {stderr}");
        assert!(lines[0].contains(call) && lines[0].contains(what), "{name}: {}", lines[0]);
    }
}
