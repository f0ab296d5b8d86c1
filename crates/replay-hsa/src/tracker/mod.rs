//! Tracked allocation (SPEC §7.1): the wrappers `OnLoad` installs on the allocation, free,
//! virtual-memory and async-copy entries, and the classification they report to the
//! [`replay_memory::Tracker`].
//!
//! | entry | reported |
//! |---|---|
//! | core `hsa_memory_allocate` / AMD `hsa_amd_memory_pool_allocate` | an allocation, classified by [`classify`] from the region's or pool's segment and global flags, the allocate flags, and the pointer info (type, owner agent and its device type) |
//! | core `hsa_memory_free` / AMD `hsa_amd_memory_pool_free` | the free, recorded **before** the original releases the memory |
//! | AMD `hsa_amd_vmem_handle_create` / `_import_shareable_handle` (major 2) | nothing; the handle's class (from its pool) or its being imported is remembered for its mappings |
//! | AMD `hsa_amd_vmem_map` (major 2) | [`replay_memory::Tracker::record_map`] after it succeeded: the owner from the pointer info, a local handle with its pool's class, an imported handle (or one never seen made) as `Imported` |
//! | AMD `hsa_amd_vmem_set_access` (major 2) | [`replay_memory::Tracker::record_access`] per GPU agent named: read-write after the call, anything else (read-only, write-only, none) before it |
//! | AMD `hsa_amd_vmem_unmap` / `hsa_amd_vmem_address_free` (major 2) | the unmap / the release of the reservation (what is still mapped in it), recorded before the call |
//! | AMD `hsa_amd_vmem_address_reserve` (`_align`), `_handle_release` (major 2) | nothing (the reservation's size is remembered for its free) |
//! | AMD `hsa_amd_memory_lock` / `_lock_to_pool` / `_unlock` | a `PINNED_HOST` block at the agents' address, under the GPU agents given access (every GPU when none is named) / its removal, recorded first |
//! | AMD `hsa_amd_ipc_memory_attach` / `_detach` | an `IPC_IMPORTED` block under the mapping agents / its removal, recorded first |
//! | AMD `hsa_amd_ipc_memory_create` | the exported allocation is marked `IPC_IMPORTED` ([`replay_memory::Tracker::mark_shared`]): other processes write it during a window, so it is never captured and an argument into it declines |
//! | AMD `hsa_amd_memory_async_copy` (and `_on_engine`, `_rect`) | a copy in flight on the copy fence ([`fence`], [`copy_fence`]), submitted holding the reader side of every GPU agent it writes |
//! | core `hsa_memory_copy`, AMD `hsa_amd_memory_fill` | nothing recorded; the call runs holding the reader side of every GPU agent it writes |
//!
//! **`hipMallocAsync`**: HIP's stream-ordered pools sub-allocate blocks that HIP itself took
//! from `hsa_amd_memory_pool_allocate`, and `hipFreeAsync` gives a block back to HIP's pool,
//! not to the runtime. Nothing at this layer tells such a block from any other pool
//! allocation, so it is tracked as the ordinary allocation it is (coarse device memory,
//! captured), from its allocate to its `hsa_amd_memory_pool_free`: the memory a stream-ordered
//! free gives back stays allocated, so a restore into it never writes released memory.
//! [`replay_memory::Tracker::record_async_alloc`] is not used here.
//!
//! **Host memory** (a CPU agent's pools, locked memory) is recorded under every GPU agent that
//! may reach it, not under the CPU agent, so an argument of a GPU kernel that points into it is
//! found in that GPU's inventory and captured (SPEC §7.1), instead of being taken for another
//! agent's memory and declined.
//!
//! **Writes that are not replayed** (SPEC §6 step 4): copies and fills take
//! [`replay_core::ReplayService::enter_write`] for each GPU agent they write (the destination's
//! owner, and every GPU for host memory or an unknown destination) across their submission, so
//! one started while a window holds that agent waits for the window to end (an asynchronous
//! copy's completion signal fires later, a synchronous call returns later), and the copy fence
//! sees the asynchronous ones until they complete. Tool work is not gated: a tool callback's
//! own thread, and the async-events thread while a callback of that agent's window runs; so a
//! tool callback must not wait for a copy another thread starts on that agent (it waits for the
//! window, which waits for the callback). Not gated either, because no entry of this table
//! sees them: device work written to a queue created before `OnLoad` (not intercepted) and
//! writes by other processes.
//!
//! Every wrapper calls the original entry with the caller's arguments unchanged and returns its
//! status; the bookkeeping runs under `catch_unwind`, so a bug here loses a record (logged),
//! never the application's call. Queries the bookkeeping makes (pool info, pointer info,
//! device type) go through the saved originals, never through the wrapped table.

pub mod fence;

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use replay_core::{AgentId, MemoryClass};

use crate::state::{self, backend, AgentInfo, Originals};
use crate::sys::{self, hsa_status_t};
use fence::CopyFence;

/// The process's copy fence: the async-copy wrappers record on it, the agents' drains wait for
/// it. It is the tracker's (only the wrappers write it), so it lives here, not in `state`.
pub fn copy_fence() -> &'static CopyFence {
    static FENCE: OnceLock<CopyFence> = OnceLock::new();
    FENCE.get_or_init(CopyFence::new)
}

/// Which allocation entry made an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Core `hsa_memory_allocate` from a region (region segment and flags).
    Region,
    /// AMD `hsa_amd_memory_pool_allocate` (pool segment and flags).
    Pool,
    /// A virtual-memory mapping (the wrappers report mappings through
    /// [`replay_memory::Tracker::record_map`]; `classify` keeps this for facts that say so).
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
/// - memory owned by a CPU agent → `PINNED_HOST` (with `FINE_GRAINED` from a fine-grained
///   system pool);
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
        // Host memory from a CPU-agent pool: pinned, and fine-grained (coherent) where the
        // pool says so.
        Some(sys::HSA_DEVICE_TYPE_CPU) => {
            if flags & sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED != 0 {
                MemoryClass::PINNED_HOST | MemoryClass::FINE_GRAINED
            } else {
                MemoryClass::PINNED_HOST
            }
        }
        Some(sys::HSA_DEVICE_TYPE_GPU) => grain(flags),
        _ => MemoryClass::empty(),
    }
}

/// The grain a region's or pool's global flags give: coarse-grained → `DEVICE_COARSE`,
/// fine-grained (or extended-scope fine-grained) → `FINE_GRAINED`, else the empty class.
fn grain(flags: u32) -> MemoryClass {
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

/// What `hsa_amd_pointer_info` says about an address the tracker never saw, for GPU agent
/// `this` (SPEC §7.1: the runtime's answer decides between capturing it and declining
/// `untracked_memory`). `owner` is the record of `agentOwner`. `None` for
/// `HSA_EXT_POINTER_TYPE_UNKNOWN` (pageable host memory, or a word that is not a pointer).
///
/// | type | class |
/// |---|---|
/// | `HSA`, owned by a CPU agent | `PINNED_HOST` (with `FINE_GRAINED` from a fine-grained pool), or `KERNARG` |
/// | `HSA`, owned by `this` | `DEVICE_COARSE` or `FINE_GRAINED` by the global flags (`KERNARG` for a kernarg pool); empty when the flags say neither |
/// | `HSA`, owned by another GPU | `PEER` with its grain |
/// | `LOCKED` | `PINNED_HOST` |
/// | `IPC` | `IPC_IMPORTED` |
/// | `HSA_VMEM`, `RESERVED_ADDR` | `VIRTUAL_MAPPING` |
/// | `GRAPHICS` (interop) and anything else | empty: no class describes it, so it is uncapturable |
///
/// The base is the agents' address of the block (`agentBaseAddress`, else `hostBaseAddress`),
/// the size `sizeInBytes`; the owner is named for device memory (GPU owners) only.
pub fn pointer_class(
    info: &sys::hsa_amd_pointer_info_t,
    owner: Option<AgentInfo>,
    this: AgentId,
) -> Option<replay_core::PointerInfo> {
    use MemoryClass as M;
    let flags = info.global_flags;
    let grain = grain(flags);
    let kernarg = flags & sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT != 0;
    let gpu_owner = owner.filter(|a| a.device == Some(sys::HSA_DEVICE_TYPE_GPU));
    let class = match info.type_ {
        sys::HSA_EXT_POINTER_TYPE_UNKNOWN => return None,
        sys::HSA_EXT_POINTER_TYPE_HSA if kernarg => M::KERNARG,
        sys::HSA_EXT_POINTER_TYPE_HSA => match owner {
            Some(a) if a.is_cpu() => M::PINNED_HOST | (grain & M::FINE_GRAINED),
            Some(a) if a.device == Some(sys::HSA_DEVICE_TYPE_GPU) && a.id == this => grain,
            Some(a) if a.device == Some(sys::HSA_DEVICE_TYPE_GPU) => M::PEER | grain,
            _ => M::empty(),
        },
        sys::HSA_EXT_POINTER_TYPE_LOCKED => M::PINNED_HOST,
        sys::HSA_EXT_POINTER_TYPE_IPC => M::IPC_IMPORTED,
        sys::HSA_EXT_POINTER_TYPE_HSA_VMEM | sys::HSA_EXT_POINTER_TYPE_RESERVED_ADDR => {
            M::VIRTUAL_MAPPING
        }
        _ => M::empty(),
    };
    let base = if info.agentBaseAddress.is_null() {
        info.hostBaseAddress as u64
    } else {
        info.agentBaseAddress as u64
    };
    Some(replay_core::PointerInfo {
        base,
        size: info.sizeInBytes as u64,
        class,
        owner: gpu_owner.map(|a| a.id),
    })
}

/// Runs bookkeeping that must never unwind into the runtime.
fn quietly(what: &str, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        log::error!("[kernel-replay] hsa: bookkeeping of {what} panicked; the record is lost, the call went through");
    }
}

/// The pointer info of `ptr` through the original entry.
pub(crate) fn pointer_info(
    o: &Originals,
    ptr: *const c_void,
) -> Option<sys::hsa_amd_pointer_info_t> {
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

/// The agent record of `handle` ([`crate::state::Backend::agent`]).
fn agent(o: &Originals, handle: sys::hsa_agent_t) -> AgentInfo {
    backend().agent(o, handle)
}

/// Reads a 4-byte info attribute through `query`.
fn info_u32(query: impl FnOnce(*mut c_void) -> hsa_status_t) -> Option<u32> {
    let mut v: u32 = 0;
    (query((&mut v as *mut u32).cast()) == sys::HSA_STATUS_SUCCESS).then_some(v)
}

/// A 4-byte attribute of `pool` (its segment, its global flags) through the original
/// `hsa_amd_memory_pool_get_info`.
fn pool_u32(o: &Originals, pool: sys::hsa_amd_memory_pool_t, attr: u32) -> Option<u32> {
    // SAFETY: the original `hsa_amd_memory_pool_get_info`; the attributes asked are 4 bytes.
    info_u32(|out| unsafe { (o.pool_get_info)(pool, attr, out) })
}

/// Records a new allocation `[ptr, ptr+size)` with the facts gathered so far; the owner and
/// the pointer type come from the pointer info. Host memory (owned by a CPU agent) is recorded
/// under every GPU agent ([`host_agents`]): a GPU kernel's argument that points into it must
/// find it under that GPU's inventory, not as some other agent's (peer) memory.
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
    let under = if owner.is_cpu() {
        host_agents(o, &[])
    } else {
        Vec::new()
    };
    record_under(&under, Some(owner.id), ptr as u64, size as u64, class);
}

/// Records `[base, base+size)` under each agent of `under`, or under `fallback` when there is
/// none (no GPU agent known: then nothing replays anyway).
fn record_under(
    under: &[AgentId],
    fallback: Option<AgentId>,
    base: u64,
    size: u64,
    class: MemoryClass,
) {
    let tracker = &backend().tracker;
    if let (true, Some(f)) = (under.is_empty(), fallback) {
        tracker.record_alloc(f, base, size, class);
    }
    for &a in under {
        tracker.record_alloc(a, base, size, class);
    }
}

unsafe extern "C" fn collect_agent(a: sys::hsa_agent_t, data: *mut c_void) -> hsa_status_t {
    // SAFETY: `data` is the `Vec` passed by `gpu_agents`, alive for the iteration.
    let _ = catch_unwind(AssertUnwindSafe(|| unsafe {
        (*data.cast::<Vec<sys::hsa_agent_t>>()).push(a)
    }));
    sys::HSA_STATUS_SUCCESS
}

/// Every GPU agent of the system (through the original `hsa_iterate_agents`), else the GPU
/// agents met so far.
pub(crate) fn gpu_agents(o: &Originals) -> Vec<AgentId> {
    let iterate = o.iterate_agents.or(o.queue.map(|q| q.iterate_agents));
    let mut handles: Vec<sys::hsa_agent_t> = Vec::new();
    if let Some(iterate) = iterate {
        // SAFETY: the original iteration with a callback of the right type and a live `Vec`.
        unsafe { iterate(Some(collect_agent), (&mut handles as *mut Vec<_>).cast()) };
    }
    let mut ids: Vec<AgentId> = handles
        .into_iter()
        .map(|h| agent(o, h))
        .filter(|a| a.device == Some(sys::HSA_DEVICE_TYPE_GPU))
        .map(|a| a.id)
        .collect();
    if ids.is_empty() {
        ids = backend()
            .agents
            .all()
            .into_iter()
            .filter(|a| a.device == Some(sys::HSA_DEVICE_TYPE_GPU))
            .map(|a| a.id)
            .collect();
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The GPU agents host memory is recorded under: those `listed` (an application's access
/// list), or every GPU agent when the list names none. Recording it for a GPU that cannot
/// reach it costs nothing until an argument of that GPU's kernel points into it, which no
/// working kernel does.
fn host_agents(o: &Originals, listed: &[sys::hsa_agent_t]) -> Vec<AgentId> {
    let mut ids: Vec<AgentId> = listed
        .iter()
        .map(|&h| agent(o, h))
        .filter(|a| a.device == Some(sys::HSA_DEVICE_TYPE_GPU))
        .map(|a| a.id)
        .collect();
    if ids.is_empty() {
        return gpu_agents(o);
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Records a free before the memory is released, under every agent that recorded the block
/// (host memory is recorded under several). No lock of the backend is held meanwhile, so a
/// free that waits for a restore in flight never blocks that restore.
fn record_free(ptr: *mut c_void) {
    let base = ptr as u64;
    let tracker = &backend().tracker;
    for agent in tracker.agents() {
        if tracker.lookup(agent, base).is_some_and(|r| r.base == base) {
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

/// The saved originals and the optional entry `pick` takes from them, or the status a wrapper
/// answers when either is missing (never after a successful `OnLoad` that found the entry).
fn original_entry<F>(
    pick: impl FnOnce(&Originals) -> Option<F>,
) -> Result<(std::sync::Arc<Originals>, F), hsa_status_t> {
    let o = originals()?;
    let f = pick(&o).ok_or(sys::HSA_STATUS_ERROR_NOT_INITIALIZED)?;
    Ok((o, f))
}

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

// ----- virtual memory (major 2; SPEC §7.1 row) --------------------------------------------

/// What a virtual-memory handle holds, as its wrapper saw it made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HandleKind {
    /// Made by `hsa_amd_vmem_handle_create` from a pool of this class (empty: a pool no
    /// class describes, e.g. a CPU agent's, or unknown flags: never captured).
    Local(MemoryClass),
    /// Made by `hsa_amd_vmem_import_shareable_handle`: another process's memory.
    Imported,
}

/// Handles by value. Kept past `hsa_amd_vmem_handle_release`: a retained handle
/// (`hsa_amd_vmem_retain_alloc_handle`) is the same value, and a value the runtime gives out
/// again comes back through create or import, which overwrite it.
static VMEM_HANDLES: std::sync::LazyLock<
    parking_lot::Mutex<std::collections::HashMap<u64, HandleKind>>,
> = std::sync::LazyLock::new(Default::default);

/// Reserved ranges (base -> size), so the free of one ends every mapping inside it even when
/// the caller passes a size of 0.
static RESERVATIONS: std::sync::LazyLock<parking_lot::Mutex<std::collections::BTreeMap<u64, u64>>> =
    std::sync::LazyLock::new(Default::default);

/// The class of a handle made from `pool`: by the pool's segment and grain, for device memory.
fn handle_class(o: &Originals, pool: sys::hsa_amd_memory_pool_t) -> MemoryClass {
    if pool_u32(o, pool, sys::HSA_AMD_MEMORY_POOL_INFO_SEGMENT) != Some(sys::HSA_AMD_SEGMENT_GLOBAL)
    {
        return MemoryClass::empty();
    }
    grain(pool_u32(o, pool, sys::HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS).unwrap_or(0))
}

/// Records a successful `hsa_amd_vmem_map` of `handle` at `[va, va + size)`: the owner comes
/// from the pointer info of the new mapping; a handle that is not a GPU's own device memory
/// (unknown to the wrappers, imported, a CPU agent's) is recorded as imported or classless,
/// so an argument into it declines `untracked_memory`.
fn record_map(o: &Originals, va: *mut c_void, size: usize, handle: u64) {
    let Some(info) = pointer_info(o, va) else {
        log::warn!("[kernel-replay] hsa: no pointer info for the mapping at {va:p} ({size} bytes); it is not tracked (an argument into it declines)");
        return;
    };
    let owner = agent(o, info.agentOwner);
    let kind = VMEM_HANDLES.lock().get(&handle).copied();
    let mapped = match kind {
        Some(HandleKind::Local(class)) if owner.device == Some(sys::HSA_DEVICE_TYPE_GPU) => {
            replay_memory::MappedHandle::Local {
                owner: owner.id,
                class,
            }
        }
        Some(HandleKind::Local(_)) => replay_memory::MappedHandle::Local {
            owner: owner.id,
            class: MemoryClass::empty(),
        },
        Some(HandleKind::Imported) | None => {
            if kind.is_none() {
                log::warn!("[kernel-replay] hsa: mapping {va:p}+{size} of a handle the wrappers never saw made; taken for an imported one (not captured)");
            }
            replay_memory::MappedHandle::Imported { owner: owner.id }
        }
    };
    log::debug!("[kernel-replay] hsa: mapping {va:p}+{size} of handle {handle:#x}: {mapped:?}");
    backend().tracker.record_map(va as u64, size as u64, mapped);
}

/// Remembers the range a reserve answering `st` wrote the base of through `va`.
///
/// # Safety
///
/// 1. `va` is NULL or, when `st` is success, valid for reading the base the runtime wrote.
unsafe fn remember_reservation(what: &str, st: hsa_status_t, va: *mut *mut c_void, size: usize) {
    if st == sys::HSA_STATUS_SUCCESS && !va.is_null() {
        // SAFETY: the runtime wrote the range's base through `va` (success; item 1).
        let base = unsafe { *va } as u64;
        quietly(what, || {
            RESERVATIONS.lock().insert(base, size as u64);
        });
    }
}

/// Wrapper of AMD `hsa_amd_vmem_address_reserve` (major 2): the range is remembered.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_vmem_address_reserve` (`va` valid for a write).
pub(crate) unsafe extern "C" fn vmem_address_reserve(
    va: *mut *mut c_void,
    size: usize,
    address: u64,
    flags: u64,
) -> hsa_status_t {
    let (_o, reserve) = match original_entry(|o| o.vmem_reserve) {
        Ok(v) => v,
        Err(st) => return st,
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { reserve(va, size, address, flags) };
    // SAFETY: `va` is valid for a write, then a read (the caller's contract).
    unsafe { remember_reservation("hsa_amd_vmem_address_reserve", st, va, size) };
    st
}

/// Wrapper of AMD `hsa_amd_vmem_address_reserve_align` (major 2): as
/// [`vmem_address_reserve`].
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_vmem_address_reserve_align` (`va` valid for a write).
pub(crate) unsafe extern "C" fn vmem_address_reserve_align(
    va: *mut *mut c_void,
    size: usize,
    address: u64,
    alignment: u64,
    flags: u64,
) -> hsa_status_t {
    let (_o, reserve) = match original_entry(|o| o.vmem_reserve_align) {
        Ok(v) => v,
        Err(st) => return st,
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { reserve(va, size, address, alignment, flags) };
    // SAFETY: `va` is valid for a write, then a read (the caller's contract).
    unsafe { remember_reservation("hsa_amd_vmem_address_reserve_align", st, va, size) };
    st
}

/// Wrapper of AMD `hsa_amd_vmem_address_free` (major 2): what is still mapped in the range
/// is recorded unmapped first (the runtime unmaps it with the free).
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_vmem_address_free`.
pub(crate) unsafe extern "C" fn vmem_address_free(va: *mut c_void, size: usize) -> hsa_status_t {
    let (_o, free) = match original_entry(|o| o.vmem_address_free) {
        Ok(v) => v,
        Err(st) => return st,
    };
    quietly("hsa_amd_vmem_address_free", || {
        let reserved = RESERVATIONS.lock().remove(&(va as u64)).unwrap_or(0);
        let size = (size as u64).max(reserved);
        backend()
            .tracker
            .record_release_reservation(va as u64, size);
    });
    // SAFETY: the original entry with the caller's arguments.
    unsafe { free(va, size) }
}

/// Remembers what a handle made by a call answering `st` holds (`kind`, worked out under
/// [`quietly`] before the map is locked).
///
/// # Safety
///
/// 1. `handle` is NULL or, when `st` is success, valid for reading the handle the runtime
///    wrote.
unsafe fn remember_handle(
    what: &str,
    st: hsa_status_t,
    handle: *mut sys::hsa_amd_vmem_alloc_handle_t,
    kind: impl FnOnce() -> HandleKind,
) {
    if st == sys::HSA_STATUS_SUCCESS && !handle.is_null() {
        // SAFETY: the runtime wrote the handle (success; item 1).
        let h = unsafe { *handle }.handle;
        quietly(what, || {
            let kind = kind();
            VMEM_HANDLES.lock().insert(h, kind);
        });
    }
}

/// Wrapper of AMD `hsa_amd_vmem_handle_create` (major 2): the handle's class is remembered
/// for its mappings.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_vmem_handle_create` (`handle` valid for a write).
pub(crate) unsafe extern "C" fn vmem_handle_create(
    pool: sys::hsa_amd_memory_pool_t,
    size: usize,
    type_: u32,
    flags: u64,
    handle: *mut sys::hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t {
    let (o, create) = match original_entry(|o| o.vmem_handle_create) {
        Ok(v) => v,
        Err(st) => return st,
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { create(pool, size, type_, flags, handle) };
    let kind = || HandleKind::Local(handle_class(&o, pool));
    // SAFETY: `handle` is valid for a write, then a read (the caller's contract).
    unsafe { remember_handle("hsa_amd_vmem_handle_create", st, handle, kind) };
    st
}

/// Wrapper of AMD `hsa_amd_vmem_handle_release` (major 2): nothing is recorded, the memory
/// lives until its last mapping is unmapped (and unmaps are recorded).
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_vmem_handle_release`.
pub(crate) unsafe extern "C" fn vmem_handle_release(
    handle: sys::hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t {
    let (_o, release) = match original_entry(|o| o.vmem_handle_release) {
        Ok(v) => v,
        Err(st) => return st,
    };
    // SAFETY: the original entry with the caller's argument.
    unsafe { release(handle) }
}

/// Wrapper of AMD `hsa_amd_vmem_import_shareable_handle` (major 2): the handle is remembered
/// as imported (its mappings are never captured).
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_vmem_import_shareable_handle` (`handle` valid for a
/// write).
pub(crate) unsafe extern "C" fn vmem_import(
    fd: i32,
    handle: *mut sys::hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t {
    let (_o, import) = match original_entry(|o| o.vmem_import) {
        Ok(v) => v,
        Err(st) => return st,
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { import(fd, handle) };
    let kind = || HandleKind::Imported;
    // SAFETY: `handle` is valid for a write, then a read (the caller's contract).
    unsafe { remember_handle("hsa_amd_vmem_import_shareable_handle", st, handle, kind) };
    st
}

/// Wrapper of AMD `hsa_amd_vmem_map` (major 2): the mapping is recorded after it succeeded,
/// without access until `hsa_amd_vmem_set_access` gives some.
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
    let (o, map) = match original_entry(|o| o.vmem_map) {
        Ok(v) => v,
        Err(st) => return st,
    };
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { map(va, size, in_offset, handle, flags) };
    if st == sys::HSA_STATUS_SUCCESS {
        quietly("hsa_amd_vmem_map", || {
            record_map(&o, va, size, handle.handle)
        });
    }
    st
}

/// Wrapper of AMD `hsa_amd_vmem_unmap` (major 2): the unmap is recorded first. A call the
/// runtime refuses leaves the range unknown (an argument into it declines), never captured
/// blindly.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_vmem_unmap`.
pub(crate) unsafe extern "C" fn vmem_unmap(va: *mut c_void, size: usize) -> hsa_status_t {
    let (_o, unmap) = match original_entry(|o| o.vmem_unmap) {
        Ok(v) => v,
        Err(st) => return st,
    };
    quietly("hsa_amd_vmem_unmap", || {
        backend().tracker.record_unmap(va as u64, size as u64)
    });
    // SAFETY: the original entry with the caller's arguments.
    unsafe { unmap(va, size) }
}

/// The tracker's access for an `hsa_access_permission_t`: write-only memory cannot be read
/// back for a snapshot, so it counts as no access.
fn map_access(permissions: u32) -> replay_memory::MapAccess {
    match permissions {
        sys::HSA_ACCESS_PERMISSION_RW => replay_memory::MapAccess::ReadWrite,
        sys::HSA_ACCESS_PERMISSION_RO => replay_memory::MapAccess::Read,
        _ => replay_memory::MapAccess::None,
    }
}

/// Wrapper of AMD `hsa_amd_vmem_set_access` (major 2), one report per GPU agent of the
/// descriptors: access that is not read-write (which nothing is restored under) is recorded
/// *before* the runtime's call, so a lowering waits for a restore in flight and no later
/// restore writes the range; read-write is recorded *after* the call succeeded. The previous
/// access need not be known for that order.
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_vmem_set_access` (`desc` holds `desc_cnt`
/// descriptors).
pub(crate) unsafe extern "C" fn vmem_set_access(
    va: *mut c_void,
    size: usize,
    desc: *const sys::hsa_amd_memory_access_desc_t,
    desc_cnt: usize,
) -> hsa_status_t {
    let (o, set_access) = match original_entry(|o| o.vmem_set_access) {
        Ok(v) => v,
        Err(st) => return st,
    };
    let mut raised: Vec<AgentId> = Vec::new();
    quietly("hsa_amd_vmem_set_access", || {
        let descs: &[sys::hsa_amd_memory_access_desc_t] = if desc.is_null() || desc_cnt == 0 {
            &[]
        } else {
            // SAFETY: `desc` holds `desc_cnt` descriptors (the caller's contract).
            unsafe { std::slice::from_raw_parts(desc, desc_cnt) }
        };
        for d in descs {
            let a = agent(&o, d.agent_handle);
            if a.device != Some(sys::HSA_DEVICE_TYPE_GPU) {
                continue;
            }
            match map_access(d.permissions) {
                replay_memory::MapAccess::ReadWrite => raised.push(a.id),
                access => backend()
                    .tracker
                    .record_access(va as u64, size as u64, a.id, access),
            }
        }
    });
    // SAFETY: the original entry with the caller's arguments.
    let st = unsafe { set_access(va, size, desc, desc_cnt) };
    if st == sys::HSA_STATUS_SUCCESS && !raised.is_empty() {
        quietly("hsa_amd_vmem_set_access", || {
            for a in raised {
                backend().tracker.record_access(
                    va as u64,
                    size as u64,
                    a,
                    replay_memory::MapAccess::ReadWrite,
                );
            }
        });
    }
    st
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

/// The GPU agents whose replay windows a write to `dst` must not overlap (SPEC §6 step 4): a
/// restore there would undo it. `dst`'s owner where the tracker knows it, a GPU the caller
/// names for it, and every GPU agent for host memory (any GPU's window may capture host memory
/// an argument points into) or for an address nobody knows.
fn written_agents(o: &Originals, dst: Option<u64>, named: &[sys::hsa_agent_t]) -> Vec<AgentId> {
    let tracker = &backend().tracker;
    let mut ids: Vec<AgentId> = Vec::new();
    let mut host = dst.is_none();
    if let Some(dst) = dst {
        for a in tracker.agents() {
            if let Some(r) = tracker.lookup(a, dst) {
                host |= r.class.contains(MemoryClass::PINNED_HOST);
                ids.push(a);
            }
        }
    }
    for &h in named {
        let info = agent(o, h);
        match info.device {
            Some(sys::HSA_DEVICE_TYPE_GPU) => ids.push(info.id),
            _ => host = true,
        }
    }
    if host || ids.is_empty() {
        ids.extend(gpu_agents(o));
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The reader side of every agent in `ids` (in id order), held by the caller across a write
/// that is not replayed. Blocks while a window holds one of them (the write then lands after
/// that window, never inside it where a restore would undo it). Tool work is never blocked: a
/// thread inside a tool callback gets an open gate from the service, and so does the runtime's
/// async-events thread while a callback of that agent's window runs (work a tool launched
/// reaches it there, as its dispatches do).
fn enter_writes(ids: &[AgentId]) -> Vec<replay_core::WriteGate> {
    let Some(svc) = state::service() else {
        return Vec::new();
    };
    if !svc.is_active() && svc.open_windows() == 0 {
        return Vec::new();
    }
    let on_async = state::on_async_thread();
    ids.iter()
        .filter(|&&id| !(on_async && svc.agent_gate(id).in_callback()))
        .map(|&id| svc.enter_write(id))
        .collect()
}

/// The agents a write to `dst` is gated on ([`written_agents`]) and their gates, held by the
/// caller; none when the bookkeeping panicked (logged; the call goes through).
fn gate_write(
    o: &Originals,
    what: &str,
    dst: Option<u64>,
    named: &[sys::hsa_agent_t],
) -> (Vec<AgentId>, Vec<replay_core::WriteGate>) {
    let mut out = (Vec::new(), Vec::new());
    quietly(what, || {
        let ids = written_agents(o, dst, named);
        let gates = enter_writes(&ids);
        out = (ids, gates);
    });
    out
}

/// Wrapper of core `hsa_memory_copy` (synchronous): the copy runs holding the reader side of
/// every agent it writes, so no window's restore undoes it.
///
/// # Safety
///
/// The runtime's contract for `hsa_memory_copy`.
pub(crate) unsafe extern "C" fn memory_copy(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
) -> hsa_status_t {
    let (o, copy) = match original_entry(|o| o.memory_copy) {
        Ok(v) => v,
        Err(st) => return st,
    };
    let _gates = gate_write(&o, "hsa_memory_copy", Some(dst as u64), &[]);
    // SAFETY: the original entry with the caller's arguments.
    unsafe { copy(dst, src, size) }
}

/// Wrapper of AMD `hsa_amd_memory_fill` (synchronous): gated as [`memory_copy`].
///
/// # Safety
///
/// The runtime's contract for `hsa_amd_memory_fill`.
pub(crate) unsafe extern "C" fn memory_fill(
    ptr: *mut c_void,
    value: u32,
    count: usize,
) -> hsa_status_t {
    let (o, fill) = match original_entry(|o| o.memory_fill) {
        Ok(v) => v,
        Err(st) => return st,
    };
    let _gates = gate_write(&o, "hsa_amd_memory_fill", Some(ptr as u64), &[]);
    // SAFETY: the original entry with the caller's arguments.
    unsafe { fill(ptr, value, count) }
}

/// Records a copy on the fence before it is submitted (with the agents it touches and those
/// it writes); returns the ticket.
fn fence_record(
    o: &Originals,
    agents: &[sys::hsa_agent_t],
    written: &[AgentId],
    signal: sys::hsa_signal_t,
) -> Option<u64> {
    let mut ticket = None;
    quietly("an async copy", || {
        let mut ids: Vec<AgentId> = agents.iter().map(|&a| agent(o, a).id).collect();
        ids.extend_from_slice(written);
        ids.sort_unstable();
        ids.dedup();
        let value = if signal.handle == 0 {
            0
        } else {
            // SAFETY: the original `hsa_signal_load_relaxed` on the caller's (valid) signal.
            unsafe { (o.signal_load_relaxed)(signal) }
        };
        ticket = copy_fence().record(&ids, signal.handle, value);
    });
    ticket
}

/// Forgets a copy the runtime refused.
fn fence_cancel(st: hsa_status_t, ticket: Option<u64>) {
    if st != sys::HSA_STATUS_SUCCESS {
        quietly("a refused async copy", || copy_fence().cancel(ticket));
    }
}

/// Submits an async copy through `submit`: gated on the agents it writes ([`gate_write`] on
/// `dst` and `agents[0]`), which are held across the submission, and recorded on the fence
/// with `agents` first, so the fence sees the copy until it ends; forgotten if refused.
fn submit_copy(
    o: &Originals,
    dst: Option<u64>,
    agents: &[sys::hsa_agent_t],
    signal: sys::hsa_signal_t,
    submit: impl FnOnce() -> hsa_status_t,
) -> hsa_status_t {
    let (written, _gates) = gate_write(o, "an async copy", dst, &agents[..1]);
    let ticket = fence_record(o, agents, &written, signal);
    let st = submit();
    fence_cancel(st, ticket);
    st
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
    let agents = [dst_agent, src_agent];
    // SAFETY: the original entry with the caller's arguments.
    let submit = || unsafe {
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
    submit_copy(&o, Some(dst as u64), &agents, completion_signal, submit)
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
    let (o, copy) = match original_entry(|o| o.async_copy_on_engine) {
        Ok(v) => v,
        Err(st) => return st,
    };
    let agents = [dst_agent, src_agent];
    // SAFETY: the original entry with the caller's arguments.
    let submit = || unsafe {
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
    submit_copy(&o, Some(dst as u64), &agents, completion_signal, submit)
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
    let (o, copy) = match original_entry(|o| o.async_copy_rect) {
        Ok(v) => v,
        Err(st) => return st,
    };
    // The destination sits in an opaque pitched pointer: every GPU agent is gated.
    // SAFETY: the original entry with the caller's arguments.
    let submit = || unsafe {
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
    submit_copy(&o, None, &[copy_agent], completion_signal, submit)
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
    fn pointer_info_classes_follow_spec_7_1() {
        use sys::*;
        use MemoryClass as M;
        let this = AgentId(1);
        let gpu = |id| AgentInfo {
            id: AgentId(id),
            handle: 0x100 + id,
            device: Some(HSA_DEVICE_TYPE_GPU),
        };
        let cpu = AgentInfo {
            id: AgentId(0),
            handle: 0x100,
            device: Some(HSA_DEVICE_TYPE_CPU),
        };
        let info = |type_, flags| hsa_amd_pointer_info_t {
            type_,
            agentBaseAddress: 0x1000 as *mut c_void,
            hostBaseAddress: std::ptr::null_mut(),
            sizeInBytes: 64,
            global_flags: flags,
            ..Default::default()
        };
        const COARSE: u32 = HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED;
        const FINE: u32 = HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
        let cases = [
            (
                info(HSA_EXT_POINTER_TYPE_HSA, COARSE),
                Some(gpu(1)),
                Some(M::DEVICE_COARSE),
            ),
            (
                info(HSA_EXT_POINTER_TYPE_HSA, FINE),
                Some(gpu(1)),
                Some(M::FINE_GRAINED),
            ),
            (
                info(HSA_EXT_POINTER_TYPE_HSA, 0),
                Some(gpu(1)),
                Some(M::empty()),
            ),
            (
                info(HSA_EXT_POINTER_TYPE_HSA, COARSE),
                Some(gpu(2)),
                Some(M::PEER | M::DEVICE_COARSE),
            ),
            (
                info(HSA_EXT_POINTER_TYPE_HSA, FINE),
                Some(cpu),
                Some(M::PINNED_HOST | M::FINE_GRAINED),
            ),
            (
                info(HSA_EXT_POINTER_TYPE_HSA, COARSE),
                Some(cpu),
                Some(M::PINNED_HOST),
            ),
            (
                info(
                    HSA_EXT_POINTER_TYPE_HSA,
                    FINE | HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT,
                ),
                Some(cpu),
                Some(M::KERNARG),
            ),
            (
                info(HSA_EXT_POINTER_TYPE_HSA, COARSE),
                None,
                Some(M::empty()),
            ),
            (
                info(HSA_EXT_POINTER_TYPE_LOCKED, 0),
                Some(cpu),
                Some(M::PINNED_HOST),
            ),
            (
                info(HSA_EXT_POINTER_TYPE_IPC, COARSE),
                Some(gpu(2)),
                Some(M::IPC_IMPORTED),
            ),
            (
                info(HSA_EXT_POINTER_TYPE_GRAPHICS, 0),
                Some(gpu(1)),
                Some(M::empty()),
            ),
            (
                info(HSA_EXT_POINTER_TYPE_HSA_VMEM, 0),
                Some(gpu(1)),
                Some(M::VIRTUAL_MAPPING),
            ),
            (
                info(HSA_EXT_POINTER_TYPE_RESERVED_ADDR, 0),
                Some(gpu(1)),
                Some(M::VIRTUAL_MAPPING),
            ),
            (
                info(HSA_EXT_POINTER_TYPE_UNKNOWN, COARSE),
                Some(gpu(1)),
                None,
            ),
        ];
        for (i, owner, want) in cases {
            let got = pointer_class(&i, owner, this);
            assert_eq!(got.map(|p| p.class), want, "{i:?} owned by {owner:?}");
            if let Some(p) = got {
                assert_eq!((p.base, p.size), (0x1000, 64));
                let device_owner = owner.filter(|a| !a.is_cpu()).map(|a| a.id);
                assert_eq!(p.owner, device_owner);
            }
        }
        // Uncapturable for the memory layer: peer, IPC, graphics; captured: own coarse.
        let treat = |c| replay_memory::classify::classify(c);
        use replay_memory::classify::Treatment as T;
        assert_eq!(treat(M::PEER | M::DEVICE_COARSE), T::Uncapturable);
        assert_eq!(treat(M::empty()), T::Uncapturable);
        assert_eq!(
            treat(M::PINNED_HOST | M::FINE_GRAINED),
            T::CapturableUntracked
        );
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
            (
                pool(FINE, 0, CPU),
                MemoryClass::PINNED_HOST | MemoryClass::FINE_GRAINED,
            ),
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
