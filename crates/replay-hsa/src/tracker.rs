//! Tracked allocation (SPEC §7.1): the wrappers `OnLoad` installs on the allocation, free,
//! virtual-memory and async-copy entries, and the classification they report to the
//! [`replay_memory::Tracker`].
//!
//! | entry | reported |
//! |---|---|
//! | core `hsa_memory_allocate` / AMD `hsa_amd_memory_pool_allocate` | an allocation, classified by [`classify`] from the region's or pool's segment and global flags, the allocate flags, and the pointer info (type, owner agent and its device type) |
//! | core `hsa_memory_free` / AMD `hsa_amd_memory_pool_free` | the free, recorded **before** the original releases the memory |
//! | AMD `hsa_amd_vmem_map` / `hsa_amd_vmem_unmap` (major 2) | a virtual-memory mapping of the owner agent / its removal, recorded before the unmap |
//! | AMD `hsa_amd_memory_async_copy` (and `_on_engine`, `_rect`) | a copy in flight on the [`crate::fence::CopyFence`] |
//!
//! Every wrapper calls the original entry with the caller's arguments unchanged and returns its
//! status; the bookkeeping runs under `catch_unwind`, so a bug here loses a record (logged),
//! never the application's call. Queries the bookkeeping makes (pool info, pointer info,
//! device type) go through the saved originals, never through the wrapped table.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use replay_core::{AgentId, MemoryClass};

use crate::sys::{self, hsa_status_t};
use crate::tool::{backend, Originals};

/// Which allocation entry made an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Core `hsa_memory_allocate` from a region (region segment and flags).
    Region,
    /// AMD `hsa_amd_memory_pool_allocate` (pool segment and flags).
    Pool,
    /// AMD `hsa_amd_vmem_map`.
    VirtualMap,
}

/// What the backend learnt about one allocation; `None` where the runtime did not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocFacts {
    /// The entry that made it.
    pub source: Source,
    /// The region's or pool's segment (`hsa_region_segment_t` / `hsa_amd_segment_t`).
    pub segment: Option<u32>,
    /// The region's or pool's global flags (kernarg-init 1, fine 2, coarse 4, extended fine 8).
    pub global_flags: Option<u32>,
    /// The `flags` argument of a pool allocation (executable = `1 << 2`); 0 otherwise.
    pub alloc_flags: u32,
    /// `hsa_amd_pointer_info`'s type for the new pointer.
    pub pointer_type: Option<u32>,
    /// The owner agent's `hsa_device_type_t`.
    pub owner_device: Option<u32>,
}

/// The SPEC §7.1 class of an allocation. Unknown facts give the empty class, which the memory
/// layer treats as uncapturable: guessing would risk restoring memory nobody described.
///
/// - executable-flagged allocations, kernarg-init pools and kernarg regions → `KERNARG`
///   (excluded: restoring them would clobber in-flight arguments; runtime kernarg pools and
///   tools' buffers carry the executable flag);
/// - pointer type IPC → `IPC_IMPORTED`; virtual-memory mappings (pointer type 6, or made by
///   `hsa_amd_vmem_map`) → `VIRTUAL_MAPPING`;
/// - a read-only segment → `READ_ONLY` (excluded);
/// - memory owned by a CPU agent → `PINNED_HOST`;
/// - memory owned by a GPU agent: coarse-grained → `DEVICE_COARSE` (tracked, captured,
///   restored); fine-grained (or extended-scope fine-grained) → `FINE_GRAINED`.
pub fn classify(f: &AllocFacts) -> MemoryClass {
    let flags = f.global_flags.unwrap_or(0);
    let kernarg_region =
        f.source == Source::Region && f.segment == Some(sys::HSA_REGION_SEGMENT_KERNARG);
    if f.alloc_flags & sys::HSA_AMD_MEMORY_POOL_EXECUTABLE_FLAG != 0
        || flags & sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT != 0
        || kernarg_region
    {
        return MemoryClass::KERNARG;
    }
    if f.source == Source::VirtualMap || f.pointer_type == Some(sys::HSA_EXT_POINTER_TYPE_HSA_VMEM)
    {
        return MemoryClass::VIRTUAL_MAPPING;
    }
    if f.pointer_type == Some(sys::HSA_EXT_POINTER_TYPE_IPC) {
        return MemoryClass::IPC_IMPORTED;
    }
    match f.segment {
        Some(sys::HSA_AMD_SEGMENT_GLOBAL) => {}
        Some(sys::HSA_AMD_SEGMENT_READONLY) => return MemoryClass::READ_ONLY,
        _ => return MemoryClass::empty(),
    }
    match f.owner_device {
        Some(sys::HSA_DEVICE_TYPE_CPU) => MemoryClass::PINNED_HOST,
        Some(sys::HSA_DEVICE_TYPE_GPU) => {
            if flags & sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED != 0 {
                MemoryClass::DEVICE_COARSE
            } else if flags
                & (sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED
                    | sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_EXTENDED_SCOPE_FINE_GRAINED)
                != 0
            {
                MemoryClass::FINE_GRAINED
            } else {
                MemoryClass::empty()
            }
        }
        _ => MemoryClass::empty(),
    }
}

/// Runs bookkeeping that must never unwind into the runtime.
fn quietly(what: &str, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        log::error!("[kernel-replay] hsa: bookkeeping of {what} panicked; the record is lost, the call went through");
    }
}

/// The pointer info of `ptr` through the original entry.
fn pointer_info(o: &Originals, ptr: *const c_void) -> Option<sys::hsa_amd_pointer_info_t> {
    let mut info = sys::hsa_amd_pointer_info_t::default();
    // SAFETY: the original `hsa_amd_pointer_info` with a valid out-struct whose `size` is set;
    // no allocator and no accessible-agent list are asked for.
    let st = unsafe {
        (o.pointer_info)(
            ptr,
            &mut info,
            None,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    (st == sys::HSA_STATUS_SUCCESS).then_some(info)
}

/// The agent record of `handle`, with its device type asked through the original entry.
pub(crate) fn agent_info(o: &Originals, handle: sys::hsa_agent_t) -> crate::agent::AgentInfo {
    agent(o, handle)
}

/// The agent record of `handle`, with its device type asked through the original entry.
fn agent(o: &Originals, handle: sys::hsa_agent_t) -> crate::agent::AgentInfo {
    backend().agents.get(handle.handle, || {
        let mut device: u32 = u32::MAX;
        // SAFETY: the original `hsa_agent_get_info`; HSA_AGENT_INFO_DEVICE writes a 4-byte
        // `hsa_device_type_t` into `device`.
        let st = unsafe {
            (o.agent_get_info)(
                handle,
                sys::HSA_AGENT_INFO_DEVICE,
                (&mut device as *mut u32).cast(),
            )
        };
        (st == sys::HSA_STATUS_SUCCESS).then_some(device)
    })
}

/// Reads a 4-byte info attribute through `query`.
fn info_u32(query: impl FnOnce(*mut c_void) -> hsa_status_t) -> Option<u32> {
    let mut v: u32 = 0;
    (query((&mut v as *mut u32).cast()) == sys::HSA_STATUS_SUCCESS).then_some(v)
}

/// Records a new allocation `[ptr, ptr+size)` with the facts gathered so far; the owner and
/// the pointer type come from the pointer info.
fn record_alloc(o: &Originals, ptr: *mut c_void, size: usize, mut facts: AllocFacts) {
    let Some(info) = pointer_info(o, ptr) else {
        log::warn!("[kernel-replay] hsa: no pointer info for the allocation at {ptr:p} ({size} bytes); it is not tracked (a kernel writing it is not restored)");
        return;
    };
    facts.pointer_type = Some(info.type_);
    let owner = agent(o, info.agentOwner);
    facts.owner_device = owner.device;
    let class = classify(&facts);
    log::debug!(
        "[kernel-replay] hsa: {:?} allocation {ptr:p}+{size} on agent {} ({facts:?}) -> {class:?}",
        facts.source,
        owner.id
    );
    backend()
        .tracker
        .record_alloc(owner.id, ptr as u64, size as u64, class);
}

/// Records a free before the memory is released.
fn record_free(ptr: *mut c_void) {
    let base = ptr as u64;
    let tracker = &backend().tracker;
    if let Some((agent, region)) = tracker.lookup_any(base) {
        if region.base == base {
            tracker.record_free(agent, base);
        }
    }
}

/// The saved originals, or the status a wrapper answers when they are missing (never after a
/// successful `OnLoad`).
fn originals() -> Result<std::sync::Arc<Originals>, hsa_status_t> {
    backend()
        .originals()
        .ok_or(sys::HSA_STATUS_ERROR_NOT_INITIALIZED)
}

/// Runs an application allocation; when the runtime answers out-of-resources while the memory
/// layer holds pooled backing memory, that memory is released (SPEC §7.3: the application's
/// memory comes first) and the allocation runs once more.
fn allocate_or_release(what: &str, alloc: impl Fn() -> hsa_status_t) -> hsa_status_t {
    let st = alloc();
    if st != sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES {
        return st;
    }
    let freed = catch_unwind(crate::memory::release_pools).unwrap_or(0);
    if freed == 0 {
        return st;
    }
    log::info!(
        "[kernel-replay] hsa: {what} ran out of memory; released {freed} bytes of pooled snapshot memory and retried"
    );
    alloc()
}

/// Runs an application allocation through [`allocate_or_release`] and, when it succeeded,
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
    let pool_info = |attr| {
        // SAFETY: the original `hsa_amd_memory_pool_get_info`; both attributes asked are 4
        // bytes.
        info_u32(|out| unsafe { (o.pool_get_info)(pool, attr, out) })
    };
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

/// Wrapper of AMD `hsa_amd_vmem_map` (major 2).
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_vmem_map`.
pub(crate) unsafe extern "C" fn vmem_map(
    va: *mut c_void,
    size: usize,
    in_offset: usize,
    handle: sys::hsa_amd_vmem_alloc_handle_t,
    flags: u64,
) -> hsa_status_t {
    let o = match originals() {
        Ok(o) => o,
        Err(st) => return st,
    };
    let Some(map) = o.vmem_map else {
        return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { map(va, size, in_offset, handle, flags) };
    if st == sys::HSA_STATUS_SUCCESS {
        quietly("hsa_amd_vmem_map", || {
            let facts = AllocFacts {
                source: Source::VirtualMap,
                segment: Some(sys::HSA_AMD_SEGMENT_GLOBAL),
                global_flags: None,
                alloc_flags: 0,
                pointer_type: None,
                owner_device: None,
            };
            record_alloc(&o, va, size, facts);
        });
    }
    st
}

/// Wrapper of AMD `hsa_amd_vmem_unmap` (major 2): the removal is recorded first.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_vmem_unmap`.
pub(crate) unsafe extern "C" fn vmem_unmap(va: *mut c_void, size: usize) -> hsa_status_t {
    let o = match originals() {
        Ok(o) => o,
        Err(st) => return st,
    };
    let Some(unmap) = o.vmem_unmap else {
        return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    quietly("hsa_amd_vmem_unmap", || record_free(va));
    // SAFETY: the original entry with the caller's arguments.
    unsafe { unmap(va, size) }
}

/// Records a copy on the fence before it is submitted; returns the ticket.
fn fence_record(
    o: &Originals,
    agents: &[sys::hsa_agent_t],
    signal: sys::hsa_signal_t,
) -> Option<u64> {
    let mut ticket = None;
    quietly("an async copy", || {
        let ids: Vec<AgentId> = agents.iter().map(|&a| agent(o, a).id).collect();
        let value = if signal.handle == 0 {
            0
        } else {
            // SAFETY: the original `hsa_signal_load_relaxed` on the caller's (valid) signal.
            unsafe { (o.signal_load_relaxed)(signal) }
        };
        ticket = backend().fence.record(&ids, signal.handle, value);
    });
    ticket
}

/// Forgets a copy the runtime refused.
fn fence_cancel(st: hsa_status_t, ticket: Option<u64>) {
    if st != sys::HSA_STATUS_SUCCESS {
        quietly("a refused async copy", || backend().fence.cancel(ticket));
    }
}

/// Wrapper of AMD `hsa_amd_memory_async_copy`: the copy is recorded on the copy fence.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_memory_async_copy`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn async_copy(
    dst: *mut c_void,
    dst_agent: sys::hsa_agent_t,
    src: *const c_void,
    src_agent: sys::hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const sys::hsa_signal_t,
    completion_signal: sys::hsa_signal_t,
) -> hsa_status_t {
    let o = match originals() {
        Ok(o) => o,
        Err(st) => return st,
    };
    let ticket = fence_record(&o, &[dst_agent, src_agent], completion_signal);
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe {
        (o.async_copy)(
            dst,
            dst_agent,
            src,
            src_agent,
            size,
            num_dep_signals,
            dep_signals,
            completion_signal,
        )
    };
    fence_cancel(st, ticket);
    st
}

/// Wrapper of AMD `hsa_amd_memory_async_copy_on_engine` (major 2).
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_memory_async_copy_on_engine`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn async_copy_on_engine(
    dst: *mut c_void,
    dst_agent: sys::hsa_agent_t,
    src: *const c_void,
    src_agent: sys::hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const sys::hsa_signal_t,
    completion_signal: sys::hsa_signal_t,
    engine_id: u32,
    force_copy_on_sdma: bool,
) -> hsa_status_t {
    let o = match originals() {
        Ok(o) => o,
        Err(st) => return st,
    };
    let Some(copy) = o.async_copy_on_engine else {
        return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let ticket = fence_record(&o, &[dst_agent, src_agent], completion_signal);
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe {
        copy(
            dst,
            dst_agent,
            src,
            src_agent,
            size,
            num_dep_signals,
            dep_signals,
            completion_signal,
            engine_id,
            force_copy_on_sdma,
        )
    };
    fence_cancel(st, ticket);
    st
}

/// Wrapper of AMD `hsa_amd_memory_async_copy_rect`.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_memory_async_copy_rect`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn async_copy_rect(
    dst: *const c_void,
    dst_offset: *const c_void,
    src: *const c_void,
    src_offset: *const c_void,
    range: *const c_void,
    copy_agent: sys::hsa_agent_t,
    dir: u32,
    num_dep_signals: u32,
    dep_signals: *const sys::hsa_signal_t,
    completion_signal: sys::hsa_signal_t,
) -> hsa_status_t {
    let o = match originals() {
        Ok(o) => o,
        Err(st) => return st,
    };
    let Some(copy) = o.async_copy_rect else {
        return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let ticket = fence_record(&o, &[copy_agent], completion_signal);
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe {
        copy(
            dst,
            dst_offset,
            src,
            src_offset,
            range,
            copy_agent,
            dir,
            num_dep_signals,
            dep_signals,
            completion_signal,
        )
    };
    fence_cancel(st, ticket);
    st
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(flags: u32, alloc_flags: u32, device: u32) -> AllocFacts {
        AllocFacts {
            source: Source::Pool,
            segment: Some(sys::HSA_AMD_SEGMENT_GLOBAL),
            global_flags: Some(flags),
            alloc_flags,
            pointer_type: Some(sys::HSA_EXT_POINTER_TYPE_HSA),
            owner_device: Some(device),
        }
    }

    #[test]
    fn classification_follows_spec_7_1() {
        use sys::*;
        const GPU: u32 = HSA_DEVICE_TYPE_GPU;
        const CPU: u32 = HSA_DEVICE_TYPE_CPU;
        const COARSE: u32 = HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED;
        const FINE: u32 = HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
        const KERNARG: u32 = HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT;
        let exec = HSA_AMD_MEMORY_POOL_EXECUTABLE_FLAG;
        let cases = [
            (pool(COARSE, 0, GPU), MemoryClass::DEVICE_COARSE),
            (pool(FINE, 0, GPU), MemoryClass::FINE_GRAINED),
            (
                pool(
                    HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_EXTENDED_SCOPE_FINE_GRAINED,
                    0,
                    GPU,
                ),
                MemoryClass::FINE_GRAINED,
            ),
            (pool(COARSE, exec, GPU), MemoryClass::KERNARG),
            (pool(FINE | KERNARG, 0, CPU), MemoryClass::KERNARG),
            (pool(FINE, exec, CPU), MemoryClass::KERNARG),
            (pool(FINE, 0, CPU), MemoryClass::PINNED_HOST),
            (pool(COARSE, 0, CPU), MemoryClass::PINNED_HOST),
            (pool(0, 0, GPU), MemoryClass::empty()),
            (pool(COARSE, 0, HSA_DEVICE_TYPE_DSP), MemoryClass::empty()),
            (
                AllocFacts {
                    pointer_type: Some(HSA_EXT_POINTER_TYPE_IPC),
                    ..pool(COARSE, 0, GPU)
                },
                MemoryClass::IPC_IMPORTED,
            ),
            (
                AllocFacts {
                    pointer_type: Some(HSA_EXT_POINTER_TYPE_HSA_VMEM),
                    ..pool(COARSE, 0, GPU)
                },
                MemoryClass::VIRTUAL_MAPPING,
            ),
            (
                AllocFacts {
                    source: Source::VirtualMap,
                    global_flags: None,
                    ..pool(0, 0, GPU)
                },
                MemoryClass::VIRTUAL_MAPPING,
            ),
            (
                AllocFacts {
                    segment: Some(HSA_AMD_SEGMENT_READONLY),
                    ..pool(COARSE, 0, GPU)
                },
                MemoryClass::READ_ONLY,
            ),
            (
                AllocFacts {
                    source: Source::Region,
                    segment: Some(HSA_REGION_SEGMENT_KERNARG),
                    ..pool(FINE, 0, CPU)
                },
                MemoryClass::KERNARG,
            ),
            (
                AllocFacts {
                    source: Source::Region,
                    ..pool(HSA_REGION_GLOBAL_FLAG_COARSE_GRAINED, 0, GPU)
                },
                MemoryClass::DEVICE_COARSE,
            ),
            (
                AllocFacts {
                    owner_device: None,
                    ..pool(COARSE, 0, GPU)
                },
                MemoryClass::empty(),
            ),
            (
                AllocFacts {
                    segment: None,
                    ..pool(COARSE, 0, GPU)
                },
                MemoryClass::empty(),
            ),
        ];
        for (facts, want) in cases {
            assert_eq!(classify(&facts), want, "{facts:?}");
        }
        // And what the memory layer then does with the coarse class.
        assert_eq!(
            replay_memory::classify::classify(MemoryClass::DEVICE_COARSE),
            replay_memory::classify::Treatment::Captured
        );
    }
}
