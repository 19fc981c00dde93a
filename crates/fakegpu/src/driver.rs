//! The CUDA driver API entry points commgate's cudarc calls (`libcuda.so.1`). Each checks its
//! handles and addresses against the registries: what a real driver answers with an error status
//! is answered so; what is undefined behaviour on a GPU (a destroyed handle, an address that is no
//! allocation, a stream of another context) is a contract violation.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdevice_P2PAttribute, CUdevice_attribute, CUdeviceptr, CUevent, CUmemAccessDesc,
    CUmemoryPool, CUresult, CUstream, CU_MEMHOSTALLOC_DEVICEMAP,
};

use crate::config::get as config;
use crate::config::Fault;
use crate::contract::{self, answer as call, put, status, violation, Fail};
use crate::memory::{AllocError, Block, InUse};
use crate::stream::{Event, Job, Stream};
use crate::world::{self, world};

type Outcome = Result<(), Fail<CUresult>>;

impl contract::Status for CUresult {
    const SUCCESS: Self = CUresult::CUDA_SUCCESS;
    const INVALID: Self = CUresult::CUDA_ERROR_INVALID_VALUE;
}

fn initialised() -> Outcome {
    if config().faults.contains(&Fault::StubLibrary) {
        return Err(status(CUresult::CUDA_ERROR_STUB_LIBRARY));
    }
    if world().initialised {
        Ok(())
    } else {
        Err(status(CUresult::CUDA_ERROR_NOT_INITIALIZED))
    }
}

fn device_count() -> u32 {
    if config().faults.contains(&Fault::NoDevice) {
        0
    } else {
        config().devices
    }
}

fn device(dev: CUdevice) -> Result<u32, Fail<CUresult>> {
    u32::try_from(dev).ok().filter(|&d| d < device_count()).ok_or(status(CUresult::CUDA_ERROR_INVALID_DEVICE))
}

/// The current context's device; a context released since it was made current is a violation.
fn current_device(what: &str) -> Result<u32, Fail<CUresult>> {
    initialised()?;
    let device = world::current().ok_or(status(CUresult::CUDA_ERROR_INVALID_CONTEXT))?;
    if world().retained.get(&device).copied().unwrap_or(0) == 0 {
        return Err(violation(format!("{what} in the primary context of device {device}, which was released")));
    }
    Ok(device)
}

/// The stream behind a handle; the null stream is the device's own default stream.
pub(crate) fn stream(handle: u64, device_for_null: u32) -> Result<Arc<Stream>, Fail<CUresult>> {
    let mut world = world();
    if handle == 0 {
        let key = DEFAULT_STREAMS + u64::from(device_for_null);
        if let Some(stream) = world.streams.get(&key) {
            return Ok(stream.clone());
        }
        let stream = Stream::start(key, device_for_null).map_err(|_| status(CUresult::CUDA_ERROR_OUT_OF_MEMORY))?;
        world.streams.insert(key, stream.clone());
        return Ok(stream);
    }
    world
        .streams
        .get(&handle)
        .cloned()
        .ok_or_else(|| violation(format!("stream {handle:#x} was destroyed or never made")))
}

/// Keys of the devices' default streams (never a handle value).
const DEFAULT_STREAMS: u64 = 0x5_0000;

/// The stream behind `handle`, which need not be the current context's: the driver takes memory
/// operations, event records and waits on any device's stream (the CUDA programming guide,
/// "Stream and Event Behavior"); kernels are checked where they are launched (cuBLAS). The null
/// stream is the current context's.
fn own_stream(handle: CUstream, what: &str) -> Result<Arc<Stream>, Fail<CUresult>> {
    initialised()?;
    let stream = if handle.is_null() { stream(0, current_device(what)?)? } else { stream(handle as u64, 0)? };
    if world().retained.get(&stream.device).copied().unwrap_or(0) == 0 {
        return Err(violation(format!(
            "{what} on stream {:#x}, whose context (device {}) was released",
            stream.id, stream.device
        )));
    }
    Ok(stream)
}

fn event(handle: CUevent) -> Result<Arc<Event>, Fail<CUresult>> {
    world()
        .events
        .get(&(handle as u64))
        .cloned()
        .ok_or_else(|| violation(format!("event {:#x} was destroyed or never made", handle as u64)))
}

/// The live device allocation of `device` holding `[addr, addr + len)`, held in use.
pub(crate) fn device_bytes(addr: u64, len: usize, device: u32, what: &str) -> Result<InUse, String> {
    let world = world();
    let Some(block) = world.block(addr, len) else {
        return Err(format!(
            "{what}: {len} bytes at {addr:#x} are not inside one live allocation (freed, or past its end)"
        ));
    };
    match block.device {
        Some(owner) if owner == device => Ok(InUse::new(block.clone())),
        Some(owner) => {
            Err(format!("{what}: the buffer at {addr:#x} is device {owner}'s, the work runs on device {device}"))
        }
        None => Ok(InUse::new(block.clone())),
    }
}

fn queue(stream: &Stream, job: Job) -> Outcome {
    stream.enqueue(job).map(drop).map_err(|_| violation(format!("stream {:#x} was destroyed", stream.id)))
}

/// An NCCL group left open on this thread makes the calls that wait a violation.
fn no_open_group(what: &str) -> Outcome {
    if crate::nccl::group_depth() > 0 {
        return Err(violation(format!("{what} while an NCCL group is open on this thread (ncclGroupEnd missing)")));
    }
    Ok(())
}

// --- initialisation, devices, versions --------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    call("cuInit", || {
        if config().faults.contains(&Fault::StubLibrary) {
            return Err(status(CUresult::CUDA_ERROR_STUB_LIBRARY));
        }
        if flags != 0 {
            return Err(status(CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        world().initialised = true;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    call("cuDriverGetVersion", || put(version, config().cuda_version))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    call("cuDeviceGetCount", || {
        initialised()?;
        put(count, device_count() as c_int)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(out: *mut CUdevice, ordinal: c_int) -> CUresult {
    call("cuDeviceGet", || {
        initialised()?;
        put(out, device(ordinal)? as CUdevice)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: CUdevice_attribute,
    dev: CUdevice,
) -> CUresult {
    call("cuDeviceGetAttribute", || {
        initialised()?;
        device(dev)?;
        use CUdevice_attribute::*;
        let answer = match attribute {
            CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED => 1,
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => 9,
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => 0,
            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => 4,
            CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING | CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY => 1,
            CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR => 1,
            CU_DEVICE_ATTRIBUTE_PCI_BUS_ID | CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID => dev,
            _ => 0,
        };
        put(value, answer)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    call("cuDeviceGetName", || {
        initialised()?;
        device(dev)?;
        let text = crate::config::DEVICE_NAME.as_bytes();
        let room = usize::try_from(len).unwrap_or(0);
        if name.is_null() || room == 0 {
            return Err(status(CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        let n = text.len().min(room - 1);
        // SAFETY: the caller gave `len` writable bytes at `name`; n + 1 ≤ len are written.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), name, n);
            name.add(n).write(0);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    call("cuDeviceTotalMem_v2", || {
        initialised()?;
        device(dev)?;
        put(bytes, usize::try_from(config().memory_bytes).unwrap_or(usize::MAX))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(can: *mut c_int, dev: CUdevice, peer: CUdevice) -> CUresult {
    call("cuDeviceCanAccessPeer", || {
        initialised()?;
        put(can, c_int::from(device(dev)? != device(peer)?))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetP2PAttribute(
    value: *mut c_int,
    attribute: CUdevice_P2PAttribute,
    src: CUdevice,
    dst: CUdevice,
) -> CUresult {
    call("cuDeviceGetP2PAttribute", || {
        initialised()?;
        if device(src)? == device(dst)? {
            return Err(status(CUresult::CUDA_ERROR_INVALID_DEVICE));
        }
        use CUdevice_P2PAttribute::*;
        let answer = match attribute {
            CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED | CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED => 1,
            _ => 0,
        };
        put(value, answer)
    })
}

/// Error names and descriptions: the enum's own name, made once per code and kept.
fn error_text(error: CUresult) -> *const c_char {
    static TEXTS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<u32, &'static CStr>>> =
        std::sync::OnceLock::new();
    let mut texts = TEXTS.get_or_init(Default::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let text = texts.entry(error as u32).or_insert_with(|| {
        let name = CString::new(format!("{error:?}")).unwrap_or_default();
        Box::leak(name.into_boxed_c_str())
    });
    text.as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, text: *mut *const c_char) -> CUresult {
    call("cuGetErrorName", || put(text, error_text(error)))
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, text: *mut *const c_char) -> CUresult {
    call("cuGetErrorString", || put(text, error_text(error)))
}

// --- contexts -----------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    call("cuDevicePrimaryCtxRetain", || {
        initialised()?;
        let device = device(dev)?;
        *world().retained.entry(device).or_default() += 1;
        contract::made("context", world::context_handle(device));
        put(ctx, world::context_handle(device) as CUcontext)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    call("cuDevicePrimaryCtxRelease_v2", || {
        initialised()?;
        let device = device(dev)?;
        let mut world = world();
        let retained = world.retained.entry(device).or_default();
        if *retained == 0 {
            return Err(violation(format!("device {device}'s primary context released more often than retained")));
        }
        *retained -= 1;
        contract::destroyed("context", world::context_handle(device));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut CUcontext) -> CUresult {
    call("cuCtxGetCurrent", || {
        initialised()?;
        let handle = world::current().map_or(0, world::context_handle);
        put(ctx, handle as CUcontext)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    call("cuCtxSetCurrent", || {
        initialised()?;
        if ctx.is_null() {
            world::set_current(None);
            return Ok(());
        }
        let Some(device) = world::context_device(ctx as u64).filter(|&d| d < device_count()) else {
            return Err(violation(format!("{:#x} is no context", ctx as u64)));
        };
        if world().retained.get(&device).copied().unwrap_or(0) == 0 {
            return Err(violation(format!("device {device}'s primary context was released (or never retained)")));
        }
        world::set_current(Some(device));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    call("cuCtxSynchronize", || {
        no_open_group("cuCtxSynchronize")?;
        let device = current_device("cuCtxSynchronize")?;
        let streams: Vec<Arc<Stream>> = world().streams.values().filter(|s| s.device == device).cloned().collect();
        for stream in streams {
            stream.synchronize().map_err(status)?;
        }
        Ok(())
    })
}

// --- streams ------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(out: *mut CUstream, _flags: c_uint) -> CUresult {
    call("cuStreamCreate", || {
        let device = current_device("cuStreamCreate")?;
        let id = world::next_handle();
        let stream = Stream::start(id, device).map_err(|_| status(CUresult::CUDA_ERROR_OUT_OF_MEMORY))?;
        world().streams.insert(id, stream);
        contract::made("stream", id);
        put(out, id as CUstream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(handle: CUstream) -> CUresult {
    call("cuStreamDestroy_v2", || {
        let id = handle as u64;
        let stream = world()
            .streams
            .remove(&id)
            .ok_or_else(|| violation(format!("stream {id:#x} destroyed twice or never made")))?;
        stream.close();
        contract::destroyed("stream", id);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(handle: CUstream) -> CUresult {
    call("cuStreamSynchronize", || {
        no_open_group("cuStreamSynchronize")?;
        own_stream(handle, "cuStreamSynchronize")?.synchronize().map_err(status)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(handle: CUstream) -> CUresult {
    call("cuStreamQuery", || match own_stream(handle, "cuStreamQuery")?.idle().map_err(status)? {
        true => Ok(()),
        false => Err(status(CUresult::CUDA_ERROR_NOT_READY)),
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(handle: CUstream, ev: CUevent, _flags: c_uint) -> CUresult {
    call("cuStreamWaitEvent", || {
        let stream = own_stream(handle, "cuStreamWaitEvent")?;
        // Waiting for another device's event is allowed.
        let event = event(ev)?;
        queue(&stream, event.wait_job())
    })
}

/// `cuStreamWaitValue32`: the stream waits until the 32-bit word at `addr` satisfies `flags`'
/// comparison with `value` (GEQ is cyclic: `(int32)(word − value) ≥ 0`).
#[cfg(not(feature = "no-wait-value"))]
#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitValue32_v2(
    handle: CUstream,
    addr: CUdeviceptr,
    value: u32,
    flags: c_uint,
) -> CUresult {
    call("cuStreamWaitValue32_v2", || {
        let stream = own_stream(handle, "cuStreamWaitValue32_v2")?;
        let block = {
            let world = world();
            let Some(block) = world.block(addr, 4) else {
                return Err(violation(format!("the word at {addr:#x} is in no live allocation")));
            };
            if block.device.is_none() && !block.device_mapped {
                return Err(violation(format!(
                    "the word at {addr:#x} is host memory not mapped for the device (CU_MEMHOSTALLOC_DEVICEMAP)"
                )));
            }
            if !addr.is_multiple_of(4) {
                return Err(status(CUresult::CUDA_ERROR_INVALID_VALUE));
            }
            InUse::new(block.clone())
        };
        let satisfied: fn(u32, u32) -> bool = match flags & 0xf {
            0 => |word, value| (word.wrapping_sub(value) as i32) >= 0,
            1 => |word, value| word == value,
            2 => |word, value| word & value != 0,
            3 => |word, value| !(word | value) != 0,
            _ => return Err(status(CUresult::CUDA_ERROR_INVALID_VALUE)),
        };
        queue(
            &stream,
            Box::new(move || {
                // SAFETY: the block holds the aligned word (checked) and stays allocated while held.
                let word = unsafe { std::sync::atomic::AtomicU32::from_ptr(block.block().ptr(addr).cast::<u32>()) };
                while !satisfied(word.load(Ordering::SeqCst), value) {
                    std::thread::sleep(std::time::Duration::from_micros(20));
                }
                Ok(())
            }),
        )
    })
}

// --- events -------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(out: *mut CUevent, flags: c_uint) -> CUresult {
    call("cuEventCreate", || {
        let device = current_device("cuEventCreate")?;
        let id = world::next_handle();
        // CU_EVENT_DISABLE_TIMING = 0x2.
        world().events.insert(id, Arc::new(Event::new(id, device, flags & 0x2 == 0)));
        contract::made("event", id);
        put(out, id as CUevent)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(ev: CUevent) -> CUresult {
    call("cuEventDestroy_v2", || {
        let id = ev as u64;
        world().events.remove(&id).ok_or_else(|| violation(format!("event {id:#x} destroyed twice or never made")))?;
        contract::destroyed("event", id);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(ev: CUevent, handle: CUstream) -> CUresult {
    call("cuEventRecord", || {
        let stream = own_stream(handle, "cuEventRecord")?;
        let event = event(ev)?;
        if event.device != stream.device {
            return Err(violation(format!(
                "event {:#x} of device {} recorded on stream {:#x} of device {}",
                event.id, event.device, stream.id, stream.device
            )));
        }
        queue(&stream, event.record())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(ev: CUevent) -> CUresult {
    call("cuEventQuery", || {
        no_open_group("cuEventQuery")?;
        let event = event(ev)?;
        if !event.ever_recorded() {
            return Err(violation(format!("event {:#x} queried before it was ever recorded", event.id)));
        }
        if event.complete() {
            Ok(())
        } else {
            Err(status(CUresult::CUDA_ERROR_NOT_READY))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(ev: CUevent) -> CUresult {
    call("cuEventSynchronize", || {
        no_open_group("cuEventSynchronize")?;
        event(ev)?.synchronize();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    call("cuEventElapsedTime_v2", || {
        let (start, end) = (event(start)?, event(end)?);
        if !start.timing || !end.timing || !start.ever_recorded() || !end.ever_recorded() {
            return Err(status(CUresult::CUDA_ERROR_INVALID_HANDLE));
        }
        let (Some(a), Some(b)) = (start.stamp(), end.stamp()) else {
            return Err(status(CUresult::CUDA_ERROR_NOT_READY));
        };
        let elapsed = if b >= a { (b - a).as_secs_f64() } else { -(a - b).as_secs_f64() };
        put(ms, (elapsed * 1e3) as f32)
    })
}

// --- memory -------------------------------------------------------------------------------------

fn allocate(out: *mut CUdeviceptr, bytes: usize, device: u32) -> Outcome {
    if bytes == 0 {
        return Err(status(CUresult::CUDA_ERROR_INVALID_VALUE));
    }
    let block = world().allocate(bytes, Some(device), false).map_err(|e| match e {
        AllocError::OutOfMemory | AllocError::Injected => status(CUresult::CUDA_ERROR_OUT_OF_MEMORY),
    })?;
    put(out, block.base)
}

/// Forgets the allocation at `base` now (no new work may use it) and returns it.
fn forget(base: u64, what: &str) -> Result<Arc<Block>, Fail<CUresult>> {
    let mut world = world();
    match world.blocks.get(&base) {
        Some(block) if block.device.is_some() => {}
        _ => {
            return Err(violation(format!(
                "{what}: {base:#x} is not the start of a live device allocation (freed twice?)"
            )))
        }
    }
    world.release(base).ok_or_else(|| violation(format!("{what}: {base:#x} vanished")))
}

/// The allocation is gone: nothing queued on another stream may still use it.
fn check_unused(block: &Block, what: &str) {
    let users = block.users.load(Ordering::SeqCst);
    if users > 0 {
        contract::report(what, &format!("{:#x} freed while {users} queued operation(s) still use it", block.base));
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(out: *mut CUdeviceptr, bytes: usize) -> CUresult {
    call("cuMemAlloc_v2", || allocate(out, bytes, current_device("cuMemAlloc_v2")?))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(out: *mut CUdeviceptr, bytes: usize, handle: CUstream) -> CUresult {
    call("cuMemAllocAsync", || {
        let stream = own_stream(handle, "cuMemAllocAsync")?;
        allocate(out, bytes, stream.device)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(base: CUdeviceptr) -> CUresult {
    call("cuMemFree_v2", || {
        let block = forget(base, "cuMemFree_v2")?;
        check_unused(&block, "cuMemFree_v2");
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(base: CUdeviceptr, handle: CUstream) -> CUresult {
    call("cuMemFreeAsync", || {
        let stream = own_stream(handle, "cuMemFreeAsync")?;
        let block = forget(base, "cuMemFreeAsync")?;
        queue(
            &stream,
            Box::new(move || {
                check_unused(&block, "cuMemFreeAsync");
                Ok(())
            }),
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(dst: CUdeviceptr, byte: u8, n: usize, handle: CUstream) -> CUresult {
    call("cuMemsetD8Async", || {
        let stream = own_stream(handle, "cuMemsetD8Async")?;
        let target = device_bytes(dst, n, stream.device, "cuMemsetD8Async").map_err(Fail::Violation)?;
        queue(
            &stream,
            Box::new(move || {
                // SAFETY: `n` bytes at `dst` lie in the held block (checked).
                unsafe { std::ptr::write_bytes(target.block().ptr(dst), byte, n) };
                Ok(())
            }),
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    handle: CUstream,
) -> CUresult {
    call("cuMemcpyHtoDAsync_v2", || {
        let stream = own_stream(handle, "cuMemcpyHtoDAsync_v2")?;
        let target = device_bytes(dst, n, stream.device, "cuMemcpyHtoDAsync_v2").map_err(Fail::Violation)?;
        if src.is_null() && n > 0 {
            return Err(status(CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        // Pageable memory is staged at the call, as the driver does.
        // SAFETY: the caller passes `n` readable bytes at `src`.
        let staged =
            if n == 0 { Vec::new() } else { unsafe { std::slice::from_raw_parts(src.cast::<u8>(), n) }.to_vec() };
        queue(
            &stream,
            Box::new(move || {
                // SAFETY: `n` bytes at `dst` lie in the held block (checked).
                unsafe { std::ptr::copy_nonoverlapping(staged.as_ptr(), target.block().ptr(dst), n) };
                Ok(())
            }),
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    handle: CUstream,
) -> CUresult {
    call("cuMemcpyDtoHAsync_v2", || {
        let stream = own_stream(handle, "cuMemcpyDtoHAsync_v2")?;
        let source = device_bytes(src, n, stream.device, "cuMemcpyDtoHAsync_v2").map_err(Fail::Violation)?;
        if dst.is_null() && n > 0 {
            return Err(status(CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        let (sender, receiver) = std::sync::mpsc::channel::<Vec<u8>>();
        queue(
            &stream,
            Box::new(move || {
                // SAFETY: `n` bytes at `src` lie in the held block (checked).
                let bytes = unsafe { std::slice::from_raw_parts(source.block().ptr(src), n) }.to_vec();
                let _ = sender.send(bytes);
                Ok(())
            }),
        )?;
        // To pageable memory the copy is synchronous, as the driver's is.
        let bytes = receiver.recv().map_err(|_| status(CUresult::CUDA_ERROR_LAUNCH_FAILED))?;
        // SAFETY: the caller passes `n` writable bytes at `dst`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.cast::<u8>(), n) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(out: *mut *mut c_void, bytes: usize, flags: c_uint) -> CUresult {
    call("cuMemHostAlloc", || {
        current_device("cuMemHostAlloc")?;
        let block = world()
            .allocate(bytes.max(1), None, flags & CU_MEMHOSTALLOC_DEVICEMAP != 0)
            .map_err(|_| status(CUresult::CUDA_ERROR_OUT_OF_MEMORY))?;
        put(out, block.base as *mut c_void)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(ptr: *mut c_void) -> CUresult {
    call("cuMemFreeHost", || {
        let base = ptr as u64;
        let block = {
            let mut world = world();
            match world.blocks.get(&base) {
                Some(block) if block.device.is_none() => {}
                _ => return Err(violation(format!("{base:#x} is not live page-locked host memory (freed twice?)"))),
            }
            world.release(base)
        };
        if let Some(block) = block {
            check_unused(&block, "cuMemFreeHost");
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    out: *mut CUdeviceptr,
    ptr: *mut c_void,
    flags: c_uint,
) -> CUresult {
    call("cuMemHostGetDevicePointer_v2", || {
        current_device("cuMemHostGetDevicePointer_v2")?;
        if flags != 0 {
            return Err(status(CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        let mapped = world().block(ptr as u64, 1).is_some_and(|b| b.device.is_none() && b.device_mapped);
        if !mapped {
            return Err(status(CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        // One address space (UVA): the device address is the host address.
        put(out, ptr as u64)
    })
}

/// Memory pool handles: one per device.
const POOLS: u64 = 0x7_0000;

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut CUmemoryPool, dev: CUdevice) -> CUresult {
    call("cuDeviceGetDefaultMemPool", || {
        initialised()?;
        let device = device(dev)?;
        put(pool, (POOLS + u64::from(device) * 0x10) as CUmemoryPool)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAccess(pool: CUmemoryPool, map: *const CUmemAccessDesc, count: usize) -> CUresult {
    call("cuMemPoolSetAccess", || {
        initialised()?;
        let owner = (pool as u64).checked_sub(POOLS).filter(|o| o % 0x10 == 0).map(|o| o / 0x10);
        let Some(owner) = owner.and_then(|o| u32::try_from(o).ok()).filter(|&o| o < device_count()) else {
            return Err(violation(format!("{:#x} is no memory pool", pool as u64)));
        };
        if map.is_null() && count > 0 {
            return Err(status(CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        for i in 0..count {
            // SAFETY: the caller passes `count` descriptors at `map`.
            let desc = unsafe { map.add(i).read() };
            let peer = device(desc.location.id)?;
            if peer == owner {
                return Err(status(CUresult::CUDA_ERROR_INVALID_DEVICE));
            }
        }
        Ok(())
    })
}
