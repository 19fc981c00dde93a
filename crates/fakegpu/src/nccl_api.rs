//! The NCCL entry points commgate's cudarc calls (`libnccl.so.2`): versions, unique ids,
//! communicators (made, polled, finalized, destroyed, aborted), groups and the all-reduce.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cudarc::nccl::sys::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId};

use crate::config::get as config;
use crate::config::Fault;
use crate::contract::{self, answer as call, put, status, violation, Fail};
use crate::nccl::{group_depth, Comm, JoinError, Part, GROUP};
use crate::world::{self, world};

type Outcome = Result<(), Fail<ncclResult_t>>;

impl contract::Status for ncclResult_t {
    const SUCCESS: Self = ncclResult_t::ncclSuccess;
    const INVALID: Self = ncclResult_t::ncclInvalidArgument;
}

fn comm(handle: ncclComm_t, what: &str) -> Result<Arc<Comm>, Fail<ncclResult_t>> {
    world().comms.get(&(handle as u64)).cloned().ok_or_else(|| {
        violation(format!("{what} on communicator {:#x}, which was destroyed, aborted or never made", handle as u64))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> ncclResult_t {
    call("ncclGetVersion", || put(version, config().nccl_code()))
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetUniqueId(out: *mut ncclUniqueId) -> ncclResult_t {
    call("ncclGetUniqueId", || {
        let id = crate::nccl::unique_id().map_err(|_| status(ncclResult_t::ncclSystemError))?;
        put(out, ncclUniqueId { internal: id.map(|b| b as c_char) })
    })
}

fn init_fault() -> Outcome {
    if config().faults.contains(&Fault::NcclInitFails) {
        return Err(status(ncclResult_t::ncclSystemError));
    }
    Ok(())
}

fn register(comm: Arc<Comm>) -> u64 {
    let id = comm.id;
    world().comms.insert(id, comm);
    contract::made("nccl-comm", id);
    id
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitAll(comms: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> ncclResult_t {
    call("ncclCommInitAll", || {
        init_fault()?;
        let n = usize::try_from(ndev).ok().filter(|&n| n > 0).ok_or(status(ncclResult_t::ncclInvalidArgument))?;
        if comms.is_null() {
            return Err(status(ncclResult_t::ncclInvalidArgument));
        }
        let devices: Vec<u32> = if devlist.is_null() {
            (0..n as u32).collect()
        } else {
            // SAFETY: the caller passes `ndev` device ordinals at `devlist`.
            unsafe { std::slice::from_raw_parts(devlist, n) }
                .iter()
                .map(|&d| u32::try_from(d).unwrap_or(u32::MAX))
                .collect()
        };
        let visible = if config().faults.contains(&Fault::NoDevice) { 0 } else { config().devices };
        if devices.iter().any(|&d| d >= visible) {
            return Err(status(ncclResult_t::ncclInvalidArgument));
        }
        let made = crate::nccl::init_all(&devices, world::next_handle);
        for (i, comm) in made.into_iter().enumerate() {
            let id = register(comm);
            // SAFETY: the caller gives room for `ndev` handles at `comms`.
            unsafe { comms.add(i).write(id as ncclComm_t) };
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    out: *mut ncclComm_t,
    nranks: c_int,
    id: ncclUniqueId,
    rank: c_int,
) -> ncclResult_t {
    call("ncclCommInitRank", || {
        init_fault()?;
        let (Ok(nranks), Ok(rank)) = (u32::try_from(nranks), u32::try_from(rank)) else {
            return Err(status(ncclResult_t::ncclInvalidArgument));
        };
        if nranks == 0 || rank >= nranks || out.is_null() {
            return Err(status(ncclResult_t::ncclInvalidArgument));
        }
        // NCCL joins on the current device.
        let device = world::current().unwrap_or(0);
        let bytes = id.internal.map(|c| c as u8);
        let comm = crate::nccl::init_rank(&bytes, nranks, rank, device, world::next_handle()).map_err(|e| match e {
            JoinError::NotAnId | JoinError::NotTheIdsProcess => status(ncclResult_t::ncclInvalidUsage),
            JoinError::Io(_) => status(ncclResult_t::ncclSystemError),
        })?;
        let handle = register(comm);
        put(out, handle as ncclComm_t)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: ncclDataType_t,
    op: ncclRedOp_t,
    handle: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    call("ncclAllReduce", || {
        let comm = comm(handle, "ncclAllReduce")?;
        if comm.aborted.load(Ordering::SeqCst) {
            return Err(violation("a collective on an aborted communicator"));
        }
        let stream = crate::driver::stream(stream as u64, comm.device).map_err(|fail| match fail {
            Fail::Status(_) => status(ncclResult_t::ncclUnhandledCudaError),
            Fail::Violation(what) => Fail::Violation(what),
        })?;
        if stream.device != comm.device {
            return Err(violation(format!(
                "stream {:#x} of device {} given to communicator {:#x} of device {}",
                stream.id, stream.device, comm.id, comm.device
            )));
        }
        let element = crate::nccl::element_of(dtype).ok_or(status(ncclResult_t::ncclInvalidArgument))?;
        if op != ncclRedOp_t::ncclSum {
            return Err(status(ncclResult_t::ncclInvalidArgument));
        }
        let bytes = count.checked_mul(element.size()).ok_or(status(ncclResult_t::ncclInvalidArgument))?;
        let held = |addr: u64, which: &str| {
            crate::driver::device_bytes(addr, bytes, comm.device, &format!("ncclAllReduce's {which} buffer"))
                .map_err(Fail::Violation)
        };
        let part = Part {
            send: (held(send as u64, "send")?, send as u64),
            recv: (held(recv as u64, "receive")?, recv as u64),
            count,
            element,
            dtype,
            op,
        };
        let depth = group_depth();
        if depth == 0 && comm.clique.local > 1 {
            return Err(violation(format!(
                "one thread drives {} communicators of this clique and calls ncclAllReduce outside ncclGroupStart/ncclGroupEnd \
                 (NCCL may deadlock)",
                comm.clique.local
            )));
        }
        let job = comm.all_reduce(part);
        if depth > 0 {
            GROUP.with(|g| g.borrow_mut().1.push((stream, job)));
            return Ok(());
        }
        stream.enqueue(job).map(drop).map_err(|_| violation(format!("stream {:#x} was destroyed", stream.id)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupStart() -> ncclResult_t {
    call("ncclGroupStart", || {
        GROUP.with(|g| g.borrow_mut().0 += 1);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupEnd() -> ncclResult_t {
    call("ncclGroupEnd", || {
        let held = GROUP.with(|g| {
            let mut group = g.borrow_mut();
            match group.0 {
                0 => None,
                1 => {
                    group.0 = 0;
                    Some(std::mem::take(&mut group.1))
                }
                _ => {
                    group.0 -= 1;
                    Some(Vec::new())
                }
            }
        });
        let held = held.ok_or_else(|| violation("ncclGroupEnd without ncclGroupStart"))?;
        for (stream, job) in held {
            stream.enqueue(job).map_err(|_| violation(format!("stream {:#x} was destroyed", stream.id)))?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(handle: ncclComm_t, error: *mut ncclResult_t) -> ncclResult_t {
    call("ncclCommGetAsyncError", || {
        let comm = comm(handle, "ncclCommGetAsyncError")?;
        put(error, comm.async_error())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommAbort(handle: ncclComm_t) -> ncclResult_t {
    call("ncclCommAbort", || {
        let comm = comm(handle, "ncclCommAbort")?;
        comm.abort();
        world().comms.remove(&comm.id);
        contract::destroyed("nccl-comm", comm.id);
        Ok(())
    })
}

#[cfg(not(feature = "no-finalize"))]
#[no_mangle]
pub unsafe extern "C" fn ncclCommFinalize(handle: ncclComm_t) -> ncclResult_t {
    call("ncclCommFinalize", || {
        let comm = comm(handle, "ncclCommFinalize")?;
        // Blocking mode: returns once every collective of the communicator has finished.
        while comm.in_flight.load(Ordering::SeqCst) > 0 && !comm.aborted.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommDestroy(handle: ncclComm_t) -> ncclResult_t {
    call("ncclCommDestroy", || {
        let comm = comm(handle, "ncclCommDestroy")?;
        let in_flight = comm.in_flight.load(Ordering::SeqCst);
        if in_flight > 0 {
            return Err(violation(format!(
                "communicator {:#x} destroyed with {in_flight} collective(s) in flight (finalize it, or abort it after an \
                 error)",
                comm.id
            )));
        }
        comm.abort();
        world().comms.remove(&comm.id);
        contract::destroyed("nccl-comm", comm.id);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommCount(handle: ncclComm_t, count: *mut c_int) -> ncclResult_t {
    call("ncclCommCount", || put(count, comm(handle, "ncclCommCount")?.nranks as c_int))
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommUserRank(handle: ncclComm_t, rank: *mut c_int) -> ncclResult_t {
    call("ncclCommUserRank", || put(rank, comm(handle, "ncclCommUserRank")?.rank as c_int))
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommCuDevice(handle: ncclComm_t, device: *mut c_int) -> ncclResult_t {
    call("ncclCommCuDevice", || put(device, comm(handle, "ncclCommCuDevice")?.device as c_int))
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetErrorString(code: ncclResult_t) -> *const c_char {
    let text: &'static [u8] = match code {
        ncclResult_t::ncclSuccess => b"no error\0",
        ncclResult_t::ncclUnhandledCudaError => b"unhandled cuda error (run with NCCL_DEBUG=INFO for details)\0",
        ncclResult_t::ncclSystemError => b"unhandled system error (run with NCCL_DEBUG=INFO for details)\0",
        ncclResult_t::ncclInternalError => b"internal error - please report this issue to the NCCL developers\0",
        ncclResult_t::ncclInvalidArgument => b"invalid argument (run with NCCL_DEBUG=WARN for details)\0",
        ncclResult_t::ncclInvalidUsage => b"invalid usage (run with NCCL_DEBUG=WARN for details)\0",
        ncclResult_t::ncclRemoteError => b"remote process exited or there was a network error\0",
        ncclResult_t::ncclInProgress => b"NCCL operation in progress\0",
        _ => b"unknown result code\0",
    };
    text.as_ptr().cast()
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetLastError(_comm: ncclComm_t) -> *const c_char {
    c"".as_ptr()
}
