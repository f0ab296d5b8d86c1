//! Pool allocations (SPEC §9.1): zeroed, page-aligned host blocks accounted against the pool
//! they come from and entered in the memory map, and their frees. As with the real runtime's
//! allocators, a freed block is kept and handed to the next allocation of its size from its
//! pool (same address, new allocation); beyond a few kept blocks the oldest are released.

use std::alloc::Layout;

use parking_lot::Mutex;

use super::memory::{Alloc, MEMORY};
use super::registry::{PoolRec, REG};

/// Freed blocks kept for reuse, most recent last: `(address, layout, pool)`. Like the real
/// runtime's allocators, a new allocation of the same size from the same pool gets the block
/// freed last, so an address is reused (a new generation at an old address, which a tool must
/// tell apart from the old one).
static FREED: Mutex<Vec<(u64, Layout, u64)>> = Mutex::new(Vec::new());

/// Freed blocks kept at most (the oldest are released beyond).
const FREED_KEPT: usize = 64;

/// Allocates `size` bytes of zeroed host memory for `pool`.
pub(crate) fn allocate(pool: &PoolRec, size: usize) -> Option<u64> {
    if size == 0 {
        return None;
    }
    {
        let mut used = pool.used.lock();
        if *used + size > pool.capacity - pool.reserved {
            return None;
        }
        *used += size;
    }
    let layout = Layout::from_size_align(size, 4096).ok()?;
    let reused = {
        let mut freed = FREED.lock();
        freed
            .iter()
            .rposition(|(_, l, pl)| *l == layout && *pl == pool.handle)
            .map(|i| freed.remove(i).0)
    };
    let p = match reused {
        Some(p) => {
            // SAFETY: a block of `layout` from `alloc_zeroed`, freed by the application and
            // reachable by nobody (it is in no map), zeroed again as a fresh allocation is.
            unsafe { std::ptr::write_bytes(p as *mut u8, 0, size) };
            p as *mut u8
        }
        // SAFETY: `layout` has a non-zero size.
        None => unsafe { std::alloc::alloc_zeroed(layout) },
    };
    if p.is_null() {
        *pool.used.lock() -= size;
        return None;
    }
    MEMORY.write().insert(
        p as u64,
        Alloc {
            size,
            layout,
            pool: pool.handle,
            agent: pool.agent,
            vmem: None,
        },
    );
    Some(p as u64)
}

/// Frees the allocation based at `base`.
pub(crate) fn free(base: u64) -> bool {
    // Foreign (locked) memory is the application's, never released here; a mapping is
    // released by its unmap.
    if MEMORY
        .read()
        .get(&base)
        .is_some_and(|a| a.pool == 0 || a.vmem.is_some())
    {
        return false;
    }
    let Some(a) = MEMORY.write().remove(&base) else {
        return false;
    };
    if let Some(pool) = REG.pools.lock().get(&a.pool) {
        *pool.used.lock() -= a.size;
    }
    let mut freed = FREED.lock();
    freed.push((base, a.layout, a.pool));
    if freed.len() > FREED_KEPT {
        let (old, layout, _) = freed.remove(0);
        // SAFETY: `old` came from `alloc_zeroed` with this layout and is in no map any more,
        // so no accessor can reach it (they hold the map's read lock while copying).
        unsafe { std::alloc::dealloc(old as *mut u8, layout) };
    }
    true
}
