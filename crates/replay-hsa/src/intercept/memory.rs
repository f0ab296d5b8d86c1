//! The allocation, free, host-lock and IPC wrappers (SPEC §7.1): what `OnLoad` installs on
//! the allocation entries of the runtime's API table, reporting to the
//! [`replay_memory::Tracker`] with the class [`crate::tracker`] gives.
//!
//! | entry | reported |
//! |---|---|
//! | core `hsa_memory_allocate` / AMD `hsa_amd_memory_pool_allocate` | an allocation, classified by [`crate::tracker::classify`] from the region's or pool's segment and global flags, the allocate flags, and the pointer info (type, owner agent and its device type) |
//! | core `hsa_memory_free` / AMD `hsa_amd_memory_pool_free` | the free, recorded **before** the original releases the memory |
//! | AMD `hsa_amd_memory_lock` / `_lock_to_pool` / `_unlock` | a `PINNED_HOST` block at the agents' address, under the GPU agents given access (every GPU when none is named) / its removal, recorded first |
//! | AMD `hsa_amd_ipc_memory_attach` / `_detach` | an `IPC_IMPORTED` block under the mapping agents / its removal, recorded first |
//! | AMD `hsa_amd_ipc_memory_create` | the exported allocation is marked `IPC_IMPORTED` ([`replay_memory::Tracker::mark_shared`]): other processes write it during a window, so it is never captured and an argument into it declines |
//!
//! **`hipMallocAsync`**: HIP's stream-ordered pools sub-allocate blocks that HIP itself took
//! from `hsa_amd_memory_pool_allocate`, and `hipFreeAsync` gives a block back to HIP's pool,
//! not to the runtime. Nothing at this layer tells such a block from any other pool
//! allocation, so it is tracked as the ordinary allocation it is (coarse device memory,
//! captured), from its allocate to its `hsa_amd_memory_pool_free`: the memory a stream-ordered
//! free gives back stays allocated, so a restore into it never writes released memory.
//! [`replay_memory::Tracker::record_async_alloc`] is not used here.
//!
//! An allocation the runtime refuses for lack of memory while the memory layer holds pooled
//! backing releases that backing and runs once more (SPEC §7.3, `allocate_or_release`).

use std::ffi::c_void;
use std::panic::catch_unwind;

use replay_core::MemoryClass;

use super::entry::{original_entry, originals, quietly};
use crate::state::{self, backend, Originals};
use crate::sys::{self, hsa_status_t};
use crate::tracker::{
    host_agents, info_u32, pool_u32, record_alloc, record_free, record_under, AllocFacts, Source,
};

/// Runs an application allocation; when the runtime answers out-of-resources while the memory
/// layer holds pooled backing memory, that memory is released (SPEC §7.3: the application's
/// memory comes first) and the allocation runs once more.
fn allocate_or_release(what: &str, alloc: impl Fn() -> hsa_status_t) -> hsa_status_t {
    // Not from a tool's callback: a window is open there.
    if !replay_core::locks::thread_in_callback() {
        let _ = catch_unwind(state::release_idle);
    }
    let st = alloc();
    if st != sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES {
        return st;
    }
    let freed = catch_unwind(state::release_pools).unwrap_or(0);
    if freed == 0 {
        return st;
    }
    log::info!(
        "[kernel-replay] hsa: {what} ran out of memory; released {freed} bytes of pooled snapshot memory and retried"
    );
    alloc()
}

/// Runs an application allocation through `allocate_or_release` and, when it succeeded,
/// records the block with the facts `facts` gives (the bookkeeping never fails the call).
///
/// # Safety
///
/// 1. `ptr` is NULL or valid for reading the `void*` the runtime writes on success.
unsafe fn allocate_and_record(
    o: &Originals,
    what: &str,
    ptr: *mut *mut c_void,
    size: usize,
    alloc: impl Fn() -> hsa_status_t,
    facts: impl FnOnce() -> AllocFacts,
) -> hsa_status_t {
    let st = allocate_or_release(what, alloc);
    if st == sys::HSA_STATUS_SUCCESS && !ptr.is_null() {
        quietly(what, || {
            // SAFETY: the runtime wrote the new address through `ptr` (success; item 1).
            let p = unsafe { *ptr };
            record_alloc(o, p, size, facts());
        });
    }
    st
}

/// Wrapper of core `hsa_memory_allocate`.
///
/// # Safety
///
/// The runtime's contract for `hsa_memory_allocate` (`ptr` valid for a write).
pub(crate) unsafe extern "C" fn memory_allocate(
    region: sys::hsa_region_t,
    size: usize,
    ptr: *mut *mut c_void,
) -> hsa_status_t {
    let o = match originals() {
        Ok(o) => o,
        Err(st) => return st,
    };
    let region_info = |attr| {
        // SAFETY: the original `hsa_region_get_info`; both attributes asked are 4 bytes.
        info_u32(|out| unsafe { (o.region_get_info)(region, attr, out) })
    };
    // SAFETY: the original entry with the caller's arguments.
    let alloc = || unsafe { (o.memory_allocate)(region, size, ptr) };
    let facts = || AllocFacts {
        source: Source::Region,
        segment: region_info(sys::HSA_REGION_INFO_SEGMENT),
        global_flags: region_info(sys::HSA_REGION_INFO_GLOBAL_FLAGS),
        alloc_flags: 0,
        pointer_type: None,
        owner_device: None,
    };
    // SAFETY: `ptr` is valid for a write, then a read (the caller's contract).
    unsafe { allocate_and_record(&o, "hsa_memory_allocate", ptr, size, alloc, facts) }
}

/// Wrapper of core `hsa_memory_free`: the free is recorded first.
///
/// # Safety
///
/// The runtime's contract for `hsa_memory_free`.
pub(crate) unsafe extern "C" fn memory_free(ptr: *mut c_void) -> hsa_status_t {
    let o = match originals() {
        Ok(o) => o,
        Err(st) => return st,
    };
    quietly("hsa_memory_free", || record_free(ptr));
    // SAFETY: the original entry with the caller's argument.
    unsafe { (o.memory_free)(ptr) }
}

/// Wrapper of AMD `hsa_amd_memory_pool_allocate`.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_memory_pool_allocate` (`ptr` valid for a write).
pub(crate) unsafe extern "C" fn pool_allocate(
    pool: sys::hsa_amd_memory_pool_t,
    size: usize,
    flags: u32,
    ptr: *mut *mut c_void,
) -> hsa_status_t {
    let o = match originals() {
        Ok(o) => o,
        Err(st) => return st,
    };
    let pool_info = |attr| pool_u32(&o, pool, attr);
    // SAFETY: the original entry with the caller's arguments.
    let alloc = || unsafe { (o.pool_allocate)(pool, size, flags, ptr) };
    let facts = || AllocFacts {
        source: Source::Pool,
        segment: pool_info(sys::HSA_AMD_MEMORY_POOL_INFO_SEGMENT),
        global_flags: pool_info(sys::HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS),
        alloc_flags: flags,
        pointer_type: None,
        owner_device: None,
    };
    // SAFETY: `ptr` is valid for a write, then a read (the caller's contract).
    unsafe { allocate_and_record(&o, "hsa_amd_memory_pool_allocate", ptr, size, alloc, facts) }
}

/// Wrapper of AMD `hsa_amd_memory_pool_free`: the free is recorded first.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_memory_pool_free`.
pub(crate) unsafe extern "C" fn pool_free(ptr: *mut c_void) -> hsa_status_t {
    let o = match originals() {
        Ok(o) => o,
        Err(st) => return st,
    };
    quietly("hsa_amd_memory_pool_free", || record_free(ptr));
    // SAFETY: the original entry with the caller's argument.
    unsafe { (o.pool_free)(ptr) }
}

/// Host addresses locked by `hsa_amd_memory_lock`, mapped to the address the agents use
/// (`agent_ptr`): where the block is recorded, and what `hsa_amd_memory_unlock` forgets.
static LOCKED: std::sync::LazyLock<parking_lot::Mutex<std::collections::HashMap<u64, u64>>> =
    std::sync::LazyLock::new(Default::default);

/// The agents of an access list `(agents, n)`; none when the list is NULL or empty.
///
/// # Safety
///
/// 1. `agents` is NULL or points to `n` agents that outlive the returned slice.
unsafe fn agent_list<'a>(agents: *const sys::hsa_agent_t, n: i64) -> &'a [sys::hsa_agent_t] {
    if agents.is_null() || n <= 0 {
        return &[];
    }
    // SAFETY: the caller's item 1.
    unsafe { std::slice::from_raw_parts(agents, n as usize) }
}

/// Records a locked host block: `PINNED_HOST` at the agents' address, under the GPU agents of
/// the access list (every GPU when it names none).
fn record_lock(
    o: &Originals,
    host_ptr: *mut c_void,
    size: usize,
    listed: &[sys::hsa_agent_t],
    agent_ptr: *mut *mut c_void,
) {
    let at = if agent_ptr.is_null() {
        0
    } else {
        // SAFETY: the runtime wrote the agents' address through `agent_ptr` (success).
        (unsafe { *agent_ptr }) as u64
    };
    let at = if at == 0 { host_ptr as u64 } else { at };
    // Memory the runtime allocated (a pool block locked again) keeps its record and class; its
    // free is what ends it.
    if backend().tracker.lookup_any(at).is_some() {
        return;
    }
    let under = host_agents(o, listed);
    log::debug!(
        "[kernel-replay] hsa: locked host block {host_ptr:p}+{size} at {at:#x} for agents {under:?}"
    );
    LOCKED.lock().insert(host_ptr as u64, at);
    record_under(&under, None, at, size as u64, MemoryClass::PINNED_HOST);
}

/// Records the block a lock answering `st` locked ([`record_lock`]), under [`quietly`].
///
/// # Safety
///
/// 1. `agents.0` is NULL or holds `agents.1` agents.
unsafe fn record_locked(
    o: &Originals,
    what: &str,
    st: hsa_status_t,
    host_ptr: *mut c_void,
    size: usize,
    agents: (*mut sys::hsa_agent_t, i32),
    agent_ptr: *mut *mut c_void,
) {
    if st == sys::HSA_STATUS_SUCCESS {
        quietly(what, || {
            // SAFETY: `agents` holds its count of agents (item 1).
            let listed = unsafe { agent_list(agents.0, i64::from(agents.1)) };
            record_lock(o, host_ptr, size, listed, agent_ptr);
        });
    }
}

/// Wrapper of AMD `hsa_amd_memory_lock`: the locked block is recorded as pinned host memory.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_memory_lock`.
pub(crate) unsafe extern "C" fn memory_lock(
    host_ptr: *mut c_void,
    size: usize,
    agents: *mut sys::hsa_agent_t,
    num_agent: i32,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t {
    let (o, lock) = match original_entry(|o| o.memory_lock) {
        Ok(v) => v,
        Err(st) => return st,
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { lock(host_ptr, size, agents, num_agent, agent_ptr) };
    // SAFETY: `agents` holds `num_agent` agents (the caller's contract).
    unsafe {
        record_locked(
            &o,
            "hsa_amd_memory_lock",
            st,
            host_ptr,
            size,
            (agents, num_agent),
            agent_ptr,
        )
    };
    st
}

/// Wrapper of AMD `hsa_amd_memory_lock_to_pool`: as [`memory_lock`].
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_memory_lock_to_pool`.
pub(crate) unsafe extern "C" fn memory_lock_to_pool(
    host_ptr: *mut c_void,
    size: usize,
    agents: *mut sys::hsa_agent_t,
    num_agent: i32,
    pool: sys::hsa_amd_memory_pool_t,
    flags: u32,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t {
    let (o, lock) = match original_entry(|o| o.memory_lock_to_pool) {
        Ok(v) => v,
        Err(st) => return st,
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { lock(host_ptr, size, agents, num_agent, pool, flags, agent_ptr) };
    // SAFETY: `agents` holds `num_agent` agents (the caller's contract).
    unsafe {
        record_locked(
            &o,
            "hsa_amd_memory_lock_to_pool",
            st,
            host_ptr,
            size,
            (agents, num_agent),
            agent_ptr,
        )
    };
    st
}

/// Wrapper of AMD `hsa_amd_memory_unlock`: the removal is recorded first.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_memory_unlock`.
pub(crate) unsafe extern "C" fn memory_unlock(host_ptr: *mut c_void) -> hsa_status_t {
    let (_o, unlock) = match original_entry(|o| o.memory_unlock) {
        Ok(v) => v,
        Err(st) => return st,
    };
    quietly("hsa_amd_memory_unlock", || {
        // Only a block the lock recorded (a pool block locked again is ended by its free);
        // the map's lock is released before the free is recorded, which may wait for a
        // restore in flight.
        let at = LOCKED.lock().remove(&(host_ptr as u64));
        if let Some(at) = at {
            record_free(at as *mut c_void);
        }
    });
    // SAFETY: the original entry with the caller's argument.
    unsafe { unlock(host_ptr) }
}

/// Wrapper of AMD `hsa_amd_ipc_memory_attach`: the imported block is recorded as
/// `IPC_IMPORTED` (no snapshot can cover it) under the mapping agents (every GPU when the list
/// names none).
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_ipc_memory_attach`.
pub(crate) unsafe extern "C" fn ipc_attach(
    handle: *const sys::hsa_amd_ipc_memory_t,
    len: usize,
    num_agents: u32,
    mapping_agents: *const sys::hsa_agent_t,
    mapped_ptr: *mut *mut c_void,
) -> hsa_status_t {
    let (o, attach) = match original_entry(|o| o.ipc_attach) {
        Ok(v) => v,
        Err(st) => return st,
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { attach(handle, len, num_agents, mapping_agents, mapped_ptr) };
    if st == sys::HSA_STATUS_SUCCESS && !mapped_ptr.is_null() {
        quietly("hsa_amd_ipc_memory_attach", || {
            // SAFETY: the runtime wrote the mapping's address (success).
            let at = unsafe { *mapped_ptr } as u64;
            // SAFETY: `mapping_agents` holds `num_agents` agents (the caller's contract).
            let listed = unsafe { agent_list(mapping_agents, i64::from(num_agents)) };
            let under = host_agents(&o, listed);
            let class = MemoryClass::IPC_IMPORTED;
            record_under(&under, None, at, len as u64, class);
        });
    }
    st
}

/// Wrapper of AMD `hsa_amd_ipc_memory_create`: once the runtime exported the block, its
/// allocation is marked shared (`IPC_IMPORTED`) on every agent that tracks it. Another
/// process that attached it writes it whenever it likes; a restore would undo those writes, so
/// a kernel whose argument points into it declines `untracked_memory` instead of replaying.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_ipc_memory_create`.
pub(crate) unsafe extern "C" fn ipc_create(
    ptr: *mut c_void,
    len: usize,
    handle: *mut sys::hsa_amd_ipc_memory_t,
) -> hsa_status_t {
    let (_o, create) = match original_entry(|o| o.ipc_create) {
        Ok(v) => v,
        Err(st) => return st,
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { create(ptr, len, handle) };
    if st == sys::HSA_STATUS_SUCCESS {
        quietly("hsa_amd_ipc_memory_create", || {
            let tracker = &backend().tracker;
            for a in tracker.agents() {
                tracker.mark_shared(a, ptr as u64, len as u64);
            }
        });
    }
    st
}

/// Wrapper of AMD `hsa_amd_ipc_memory_detach`: the removal is recorded first.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_ipc_memory_detach`.
pub(crate) unsafe extern "C" fn ipc_detach(mapped_ptr: *mut c_void) -> hsa_status_t {
    let (_o, detach) = match original_entry(|o| o.ipc_detach) {
        Ok(v) => v,
        Err(st) => return st,
    };
    quietly("hsa_amd_ipc_memory_detach", || record_free(mapped_ptr));
    // SAFETY: the original entry with the caller's argument.
    unsafe { detach(mapped_ptr) }
}
