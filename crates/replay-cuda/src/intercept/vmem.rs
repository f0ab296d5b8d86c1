//! The virtual-memory hooks (PyTorch's expandable segments; SPEC §7.1 mapping row, §9.2
//! "Unmodified applications"), reporting to the tracker in `crate::tracker`'s report order:
//!
//! `cuMemCreate` remembers the handle's location (a device: its coarse memory; the host:
//! pinned host memory), `cuMemImportFromShareableHandle` marks it imported,
//! `cuMulticastCreate` / `cuMulticastBindMem` multicast (`cuMulticastBindAddr` turns the
//! bound range into a multicast mapping); `cuMemMap` reports the mapping after it
//! succeeded, `cuMemSetAccess` each device's access (lowered before, read-write after),
//! `cuMemUnmap` and `cuMemAddressFree` are reported before the driver's call
//! (`crate::tracker`'s report functions). `cuMemExportToShareableHandle` makes a created
//! handle shared memory: the ranges it is mapped at, and later mappings of it, are classed
//! as an imported handle's (other processes write them; never captured). The handles seen
//! are kept in [`crate::state::InjectState`] ([`HandleInfo`]), with the ranges each is
//! mapped at. A mapping of a handle the wrappers never
//! saw (made before the interception, or by `cuMemRetainAllocationHandle`) is not reported, so
//! an argument into it declines `untracked_memory`. Not wrapped: `cuMemMapArrayAsync`
//! (sparse arrays), pool creation and import (`cuMemPoolCreate`,
//! `cuMemPoolImportPointer`).

use std::ffi::{c_uint, c_void};
use std::sync::atomic::Ordering;

use cudarc::driver::sys::{CUdeviceptr, CUresult};
use replay_core::{AgentId, MemoryClass};

use super::memory::{with_oom_retry, Competes};
use crate::state::{current_agent, state, HandleInfo};

/// The head of `CUmemAllocationProp` (the CUDA headers' layout), read with plain integers so
/// a location type this code does not know is not an invalid Rust enum.
#[repr(C)]
struct AllocPropHead {
    _alloc_type: u32,
    _handle_types: u32,
    location_type: u32,
    location_id: i32,
}

/// `CUmemAccessDesc` (the CUDA headers' layout), with plain integers as above.
#[repr(C)]
struct AccessDesc {
    location_type: u32,
    location_id: i32,
    flags: u32,
}

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_DEVICE: u32 = 1;

/// `CU_MEM_ACCESS_FLAGS_PROT_READ`.
const ACCESS_READ: u32 = 1;

/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
const ACCESS_READWRITE: u32 = 3;

fn remember_handle(handle: *const u64, info: Option<HandleInfo>) {
    if handle.is_null() {
        return;
    }
    // SAFETY: the driver wrote the handle (the call succeeded) through this out pointer.
    let h = unsafe { *handle };
    let mut t = state().handles.lock();
    match info {
        Some(i) => t.insert(h, i),
        None => t.remove(&h),
    };
}

/// Hook of `cuMemCreate`: remembers what the handle's memory is (its location's device and
/// type); nothing is reported until it is mapped.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_create(
    real: unsafe extern "C" fn(*mut u64, usize, *const c_void, u64) -> CUresult,
    reached: &mut bool,
    handle: *mut u64,
    size: usize,
    prop: *const c_void,
    flags: u64,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = with_oom_retry(Competes::Device, || unsafe {
        real(handle, size, prop, flags)
    });
    if r == CUresult::CUDA_SUCCESS && !prop.is_null() {
        // SAFETY: the call succeeded, so `prop` points to a valid `CUmemAllocationProp`,
        // whose head has this layout.
        let head = unsafe { &*prop.cast::<AllocPropHead>() };
        let info = match head.location_type {
            LOCATION_DEVICE if head.location_id >= 0 => Some(HandleInfo::Local {
                owner: AgentId(head.location_id as u64),
                class: MemoryClass::DEVICE_COARSE,
            }),
            // Host and host-NUMA locations: page-locked host memory, captured as such.
            _ => current_agent().map(|owner| HandleInfo::Local {
                owner,
                class: MemoryClass::PINNED_HOST,
            }),
        };
        remember_handle(handle, info);
    }
    r
}

/// Hook of `cuMemImportFromShareableHandle`: the handle is another process's memory; a
/// mapping of it is `untracked_memory`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_import(
    real: unsafe extern "C" fn(*mut u64, *mut c_void, c_uint) -> CUresult,
    reached: &mut bool,
    handle: *mut u64,
    os_handle: *mut c_void,
    kind: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(handle, os_handle, kind) };
    if r == CUresult::CUDA_SUCCESS {
        remember_handle(
            handle,
            current_agent().map(|owner| HandleInfo::Imported { owner }),
        );
    }
    r
}

/// Hook of `cuMulticastCreate`: a mapping of the object is `untracked_memory`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_multicast_create(
    real: unsafe extern "C" fn(*mut u64, *const c_void) -> CUresult,
    reached: &mut bool,
    handle: *mut u64,
    prop: *const c_void,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(handle, prop) };
    if r == CUresult::CUDA_SUCCESS {
        remember_handle(
            handle,
            current_agent().map(|owner| HandleInfo::Multicast { owner }),
        );
    }
    r
}

/// Hook of `cuMulticastBindMem`: memory bound into a multicast object is written by every
/// device of the group, so a mapping of its handle made from now on is multicast. Reported
/// before the call, so no window captures it as local memory once the bind is in place.
///
/// # Safety
/// The entry's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn hook_multicast_bind_mem(
    real: unsafe extern "C" fn(u64, usize, u64, usize, usize, u64) -> CUresult,
    reached: &mut bool,
    mc: u64,
    mc_offset: usize,
    mem: u64,
    mem_offset: usize,
    size: usize,
    flags: u64,
) -> CUresult {
    if let Some(owner) = current_agent() {
        state()
            .handles
            .lock()
            .insert(mem, HandleInfo::Multicast { owner });
    }
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(mc, mc_offset, mem, mem_offset, size, flags) }
}

/// Hook of `cuMulticastBindAddr`: the mapped range bound into a multicast object becomes a
/// multicast mapping (no access recorded, so uncapturable), before the call.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_multicast_bind_addr(
    real: unsafe extern "C" fn(u64, usize, CUdeviceptr, usize, u64) -> CUresult,
    reached: &mut bool,
    mc: u64,
    mc_offset: usize,
    ptr: CUdeviceptr,
    size: usize,
    flags: u64,
) -> CUresult {
    if let Some(owner) = current_agent().filter(|_| size > 0) {
        state().tracker.record_map(
            ptr,
            size as u64,
            replay_memory::MappedHandle::Multicast { owner },
        );
    }
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(mc, mc_offset, ptr, size, flags) }
}

/// Hook of `cuMemRelease`: the handle is forgotten once released (a mapping of it lives on
/// until it is unmapped, so nothing is reported).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_release(
    real: unsafe extern "C" fn(u64) -> CUresult,
    reached: &mut bool,
    handle: u64,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(handle) };
    if r == CUresult::CUDA_SUCCESS {
        state().handles.lock().remove(&handle);
    }
    r
}

/// Hook of `cuMemAddressReserve`: a reservation is no memory yet; forwarded, nothing reported.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_address_reserve(
    real: unsafe extern "C" fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, u64) -> CUresult,
    reached: &mut bool,
    p: *mut CUdeviceptr,
    size: usize,
    align: usize,
    addr: CUdeviceptr,
    flags: u64,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(p, size, align, addr, flags) }
}

/// Hook of `cuMemAddressFree`: whatever is still mapped in the range ends, before the call.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_address_free(
    real: unsafe extern "C" fn(CUdeviceptr, usize) -> CUresult,
    reached: &mut bool,
    p: CUdeviceptr,
    size: usize,
) -> CUresult {
    let st = state();
    crate::tracker::report_address_free(&st.tracker, p, size as u64);
    st.counters.vmem_unmaps.fetch_add(1, Ordering::Relaxed);
    forget_mapped(p, size);
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(p, size) }
}

/// Hook of `cuMemMap`: after it succeeded, the mapping is reported with its handle's kind
/// (no access yet). A handle the wrappers never saw is not reported: an argument into the
/// range is asked of the driver and declines.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_map(
    real: unsafe extern "C" fn(CUdeviceptr, usize, usize, u64, u64) -> CUresult,
    reached: &mut bool,
    p: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(p, size, offset, handle, flags) };
    if r == CUresult::CUDA_SUCCESS && size > 0 {
        let st = state();
        // Held while the mapping is recorded, so an export on another thread either sees
        // this range or has already changed the handle's kind.
        let mut mapped = st.mapped.lock();
        let info = st.handles.lock().get(&handle).copied();
        match info {
            Some(HandleInfo::Local { owner, class }) => {
                crate::tracker::report_map(&st.tracker, p, size as u64, owner, class);
                st.counters.vmem_maps.fetch_add(1, Ordering::Relaxed);
            }
            Some(i) => {
                st.tracker.record_map(p, size as u64, i.mapped());
                st.counters.vmem_maps.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                st.counters
                    .vmem_unknown_handle
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        if info.is_some() {
            mapped.insert(p, (size as u64, handle));
        }
    }
    r
}

/// Forgets the mapped ranges that start inside `[p, p + size)` (an unmap or a reservation's
/// release).
fn forget_mapped(p: CUdeviceptr, size: usize) {
    let end = p.saturating_add(size.max(1) as u64);
    let mut mapped = state().mapped.lock();
    let inside: Vec<u64> = mapped.range(p..end).map(|(&b, _)| b).collect();
    for b in inside {
        mapped.remove(&b);
    }
}

/// Hook of `cuMemExportToShareableHandle`: once the driver exported a handle this process
/// created, other processes may map it and write it during any window, so its memory is
/// shared, as an imported handle's: every range it is mapped at now becomes shared memory
/// (never captured; an argument into it declines `untracked_memory`), with each device's
/// access kept, and so does every mapping of it made later.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_export(
    real: unsafe extern "C" fn(*mut c_void, u64, c_uint, u64) -> CUresult,
    reached: &mut bool,
    os_handle: *mut c_void,
    handle: u64,
    kind: c_uint,
    flags: u64,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(os_handle, handle, kind, flags) };
    if r == CUresult::CUDA_SUCCESS {
        let st = state();
        let mapped = st.mapped.lock();
        let exported = {
            let mut h = st.handles.lock();
            match h.get(&handle).copied() {
                Some(HandleInfo::Local { owner, .. }) => {
                    h.insert(handle, HandleInfo::Exported { owner });
                    true
                }
                _ => false,
            }
        };
        if exported {
            for (&base, &(size, _)) in mapped.iter().filter(|(_, (_, h))| *h == handle) {
                st.tracker.mark_mappings_shared(base, size);
            }
            st.counters.ipc_exported.fetch_add(1, Ordering::Relaxed);
        }
    }
    r
}

/// Hook of `cuMemUnmap`: reported before the call, so no restore writes the range after it.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_unmap(
    real: unsafe extern "C" fn(CUdeviceptr, usize) -> CUresult,
    reached: &mut bool,
    p: CUdeviceptr,
    size: usize,
) -> CUresult {
    let st = state();
    crate::tracker::report_unmap(&st.tracker, p, size as u64);
    st.counters.vmem_unmaps.fetch_add(1, Ordering::Relaxed);
    forget_mapped(p, size);
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(p, size) }
}

/// The access a `CUmemAccessDesc` grants, for its device; `None` for other locations.
fn access_of(d: &AccessDesc) -> Option<(AgentId, replay_memory::MapAccess)> {
    use replay_memory::MapAccess;
    if d.location_type != LOCATION_DEVICE || d.location_id < 0 {
        return None;
    }
    let access = match d.flags {
        ACCESS_READWRITE => MapAccess::ReadWrite,
        ACCESS_READ => MapAccess::Read,
        _ => MapAccess::None,
    };
    Some((AgentId(d.location_id as u64), access))
}

/// Hook of `cuMemSetAccess`: per device of the list, read-only and no access are reported
/// before the call (a lowering must be known before it takes effect; an early raise to
/// read-only captures nothing), read-write after it succeeded. When the call fails after a
/// report made before it, those devices are recorded without access: what the driver left
/// is unknown, and no access declines rather than guesses.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mem_set_access(
    real: unsafe extern "C" fn(CUdeviceptr, usize, *const c_void, usize) -> CUresult,
    reached: &mut bool,
    p: CUdeviceptr,
    size: usize,
    desc: *const c_void,
    count: usize,
) -> CUresult {
    use replay_memory::MapAccess;
    let descs: Vec<(AgentId, MapAccess)> = if desc.is_null() || size == 0 {
        Vec::new()
    } else {
        // SAFETY: the entry's contract: `desc` holds `count` access descriptors, whose
        // layout `AccessDesc` mirrors with plain integers.
        unsafe { std::slice::from_raw_parts(desc.cast::<AccessDesc>(), count) }
            .iter()
            .filter_map(access_of)
            .collect()
    };
    let tracker = &state().tracker;
    let (size64, lowered) = (size as u64, |a: &MapAccess| *a != MapAccess::ReadWrite);
    for (agent, access) in descs.iter().filter(|(_, a)| lowered(a)) {
        crate::tracker::report_access(tracker, p, size64, *agent, *access);
    }
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(p, size, desc, count) };
    for (agent, access) in &descs {
        match (r == CUresult::CUDA_SUCCESS, lowered(access)) {
            (true, false) => crate::tracker::report_access(tracker, p, size64, *agent, *access),
            (false, true) => {
                crate::tracker::report_access(tracker, p, size64, *agent, MapAccess::None)
            }
            _ => {}
        }
    }
    r
}
