//! The emulated machine's state: its allocations, the primary contexts and the handles every
//! library hands out. One lock guards the registries; no call holds it while it waits.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use crate::config;
use crate::contract;
pub use crate::memory::{AllocError, Block, InUse};

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
            if config::get()
                .fault(|f| matches!(f, crate::config::Fault::AllocFails(n) if *n == nth).then_some(()))
                .is_some()
            {
                return Err(AllocError::Injected);
            }
            let used = self.used.entry(device).or_default();
            if used.saturating_add(len as u64) > config::get().memory_bytes {
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
