//! Tracked allocation (SPEC §7.1): the classification the wrappers of [`crate::intercept`]
//! report to the [`replay_memory::Tracker`] with ([`classify`] for what an allocation entry
//! made, [`pointer_class`] for an address the tracker never saw), the records they make
//! (allocations, frees, blocks under several agents), and the copy fence ([`fence`],
//! [`copy_fence`]) the async-copy wrappers record on.
//!
//! **Host memory** (a CPU agent's pools, locked memory) is recorded under every GPU agent that
//! may reach it, not under the CPU agent, so an argument of a GPU kernel that points into it is
//! found in that GPU's inventory and captured (SPEC §7.1), instead of being taken for another
//! agent's memory and declined.
//!
//! Queries the bookkeeping makes (pool info, pointer info, device type) go through the saved
//! originals, never through the wrapped table.

pub mod fence;

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use replay_core::{AgentId, MemoryClass};

use crate::state::{backend, AgentInfo, Originals};
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
pub(crate) fn grain(flags: u32) -> MemoryClass {
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
pub(crate) fn agent(o: &Originals, handle: sys::hsa_agent_t) -> AgentInfo {
    backend().agent(o, handle)
}

/// Reads a 4-byte info attribute through `query`.
pub(crate) fn info_u32(query: impl FnOnce(*mut c_void) -> hsa_status_t) -> Option<u32> {
    let mut v: u32 = 0;
    (query((&mut v as *mut u32).cast()) == sys::HSA_STATUS_SUCCESS).then_some(v)
}

/// A 4-byte attribute of `pool` (its segment, its global flags) through the original
/// `hsa_amd_memory_pool_get_info`.
pub(crate) fn pool_u32(o: &Originals, pool: sys::hsa_amd_memory_pool_t, attr: u32) -> Option<u32> {
    // SAFETY: the original `hsa_amd_memory_pool_get_info`; the attributes asked are 4 bytes.
    info_u32(|out| unsafe { (o.pool_get_info)(pool, attr, out) })
}

/// Records a new allocation `[ptr, ptr+size)` with the facts gathered so far; the owner and
/// the pointer type come from the pointer info. Host memory (owned by a CPU agent) is recorded
/// under every GPU agent ([`host_agents`]): a GPU kernel's argument that points into it must
/// find it under that GPU's inventory, not as some other agent's (peer) memory.
pub(crate) fn record_alloc(o: &Originals, ptr: *mut c_void, size: usize, mut facts: AllocFacts) {
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
pub(crate) fn record_under(
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
pub(crate) fn host_agents(o: &Originals, listed: &[sys::hsa_agent_t]) -> Vec<AgentId> {
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
pub(crate) fn record_free(ptr: *mut c_void) {
    let base = ptr as u64;
    let tracker = &backend().tracker;
    for agent in tracker.agents() {
        if tracker.lookup(agent, base).is_some_and(|r| r.base == base) {
            tracker.record_free(agent, base);
        }
    }
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
