//! Device memory: host memory, reference counted so that no queued operation can outlive what
//! it touches, and counted while queued work uses it (a free under a stream is caught).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Device allocations are aligned as CUDA aligns them.
const ALIGN: usize = 256;

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
    pub fn new(len: usize, device: Option<u32>, device_mapped: bool) -> Option<Arc<Block>> {
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

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AllocError {
    OutOfMemory,
    Injected,
}
