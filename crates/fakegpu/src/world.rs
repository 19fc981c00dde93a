//! The emulated machine's state: its settings, device memory (host memory, reference counted so
//! that no queued operation can outlive what it touches), the primary contexts and the handles
//! every library hands out. One lock guards the registries; no call holds it while it waits.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use crate::config::Config;
use crate::contract;

/// Device allocations are aligned as CUDA aligns them.
const ALIGN: usize = 256;

/// The settings, read once; an unreadable variable stops the process with one line (the
/// emulator never runs a machine nobody asked for).
pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        Config::from_vars(|name| std::env::var(format!("{}{name}", crate::config::PREFIX)).ok()).unwrap_or_else(|bad| {
            eprintln!("commgate-fakegpu: {bad}");
            std::process::exit(2)
        })
    })
}

/// One allocation: device memory (`device: Some`) or page-locked host memory. Its bytes live
/// while any `Arc` does, so an operation queued on a stream keeps them valid even after a free.
pub struct Block {
    pub base: u64,
    pub len: usize,
    pub device: Option<u32>,
    /// Host memory the devices may read (`CU_MEMHOSTALLOC_DEVICEMAP`).
    pub device_mapped: bool,
    /// Queued operations that use this block and have not finished.
    pub users: AtomicUsize,
    layout: Layout,
}

impl Block {
    fn new(len: usize, device: Option<u32>, device_mapped: bool) -> Option<Arc<Block>> {
        let layout = Layout::from_size_align(len.max(1), ALIGN).ok()?;
        // SAFETY: the layout has a non-zero size; the pointer is freed once, in `drop`, with it.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return None;
        }
        Some(Arc::new(Block { base: ptr as u64, len, device, device_mapped, users: AtomicUsize::new(0), layout }))
    }

    /// The bytes `[addr, addr + len)`, which the caller has checked lie inside this block.
    pub fn ptr(&self, addr: u64) -> *mut u8 {
        (self.base as usize + (addr - self.base) as usize) as *mut u8
    }

    /// Whether `[addr, addr + len)` lies inside this block.
    pub fn holds(&self, addr: u64, len: usize) -> bool {
        addr >= self.base && (addr - self.base).checked_add(len as u64).is_some_and(|end| end <= self.len as u64)
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: allocated in `Block::new` with this layout and freed only here.
        unsafe { dealloc(self.base as *mut u8, self.layout) }
    }
}

/// A use of a block by a queued operation: counted until the operation finishes.
pub struct InUse(Arc<Block>);

impl InUse {
    pub fn new(block: Arc<Block>) -> InUse {
        block.users.fetch_add(1, Ordering::SeqCst);
        InUse(block)
    }

    pub fn block(&self) -> &Block {
        &self.0
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        self.0.users.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The registries.
#[derive(Default)]
pub struct World {
    pub initialised: bool,
    /// Retains of each device's primary context.
    pub retained: HashMap<u32, u64>,
    /// Live allocations by base address.
    pub blocks: BTreeMap<u64, Arc<Block>>,
    /// Bytes allocated on each device.
    pub used: HashMap<u32, u64>,
    /// Device allocations made so far (for `alloc-fails=N`).
    pub allocations: u64,
    pub streams: HashMap<u64, Arc<crate::stream::Stream>>,
    pub events: HashMap<u64, Arc<crate::stream::Event>>,
    pub blas: HashMap<u64, crate::blas::Handle>,
    pub comms: HashMap<u64, Arc<crate::nccl::Comm>>,
}

pub fn world() -> MutexGuard<'static, World> {
    static WORLD: OnceLock<Mutex<World>> = OnceLock::new();
    WORLD.get_or_init(Mutex::default).lock().unwrap_or_else(PoisonError::into_inner)
}

/// A fresh handle value: never 0, never reused, never a small integer.
pub fn next_handle() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0x1000);
    NEXT.fetch_add(0x10, Ordering::SeqCst)
}

/// The handle of a device's primary context.
pub fn context_handle(device: u32) -> u64 {
    0xc0_0000 + u64::from(device) * 0x10
}

/// The device of a context handle, when it is one.
pub fn context_device(handle: u64) -> Option<u32> {
    let offset = handle.checked_sub(0xc0_0000)?;
    (offset % 0x10 == 0).then(|| u32::try_from(offset / 0x10).ok()).flatten()
}

thread_local! {
    /// This thread's current context's device.
    static CURRENT: Cell<Option<u32>> = const { Cell::new(None) };
}

pub fn current() -> Option<u32> {
    CURRENT.with(Cell::get)
}

pub fn set_current(device: Option<u32>) {
    CURRENT.with(|c| c.set(device));
}

impl World {
    /// The live block holding `[addr, addr + len)`.
    pub fn block(&self, addr: u64, len: usize) -> Option<&Arc<Block>> {
        let (_, block) = self.blocks.range(..=addr).next_back()?;
        block.holds(addr, len).then_some(block)
    }

    /// Allocates `len` bytes on `device` (`None`: page-locked host memory).
    pub fn allocate(&mut self, len: usize, device: Option<u32>, device_mapped: bool) -> Result<Arc<Block>, AllocError> {
        if let Some(device) = device {
            self.allocations += 1;
            let nth = self.allocations;
            if config().fault(|f| matches!(f, crate::config::Fault::AllocFails(n) if *n == nth).then_some(())).is_some()
            {
                return Err(AllocError::Injected);
            }
            let used = self.used.entry(device).or_default();
            if used.saturating_add(len as u64) > config().memory_bytes {
                return Err(AllocError::OutOfMemory);
            }
            *used += len as u64;
        }
        let block = Block::new(len, device, device_mapped).ok_or(AllocError::OutOfMemory)?;
        self.blocks.insert(block.base, block.clone());
        contract::made(if device.is_some() { "memory" } else { "host-memory" }, block.base);
        Ok(block)
    }

    /// Forgets the block at `base` (its bytes live on while a queued operation holds it).
    pub fn release(&mut self, base: u64) -> Option<Arc<Block>> {
        let block = self.blocks.remove(&base)?;
        if let Some(device) = block.device {
            let used = self.used.entry(device).or_default();
            *used = used.saturating_sub(block.len as u64);
        }
        contract::destroyed(if block.device.is_some() { "memory" } else { "host-memory" }, base);
        Some(block)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AllocError {
    OutOfMemory,
    Injected,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_found_by_any_address_inside_it_and_not_past_it() {
        let mut world = World::default();
        let Ok(block) = world.allocate(1000, None, false) else { panic!("no memory") };
        assert!(world.block(block.base, 1000).is_some());
        assert!(world.block(block.base + 10, 990).is_some());
        assert!(world.block(block.base + 10, 991).is_none());
        assert!(world.block(block.base.wrapping_sub(1), 1).is_none());
        assert!(world.release(block.base).is_some());
        assert!(world.block(block.base, 1).is_none());
    }

    #[test]
    fn context_handles_name_their_device() {
        assert_eq!(context_device(context_handle(3)), Some(3));
        assert_eq!(context_device(context_handle(3) + 1), None);
        assert_eq!(context_device(0x10), None);
    }
}
