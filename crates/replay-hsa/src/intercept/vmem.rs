//! The virtual-memory wrappers (major 2; SPEC §7.1 mapping row): what `OnLoad` installs on the
//! `hsa_amd_vmem_*` entries, reporting mappings, their access and their unmaps to the
//! [`replay_memory::Tracker`].
//!
//! | entry | reported |
//! |---|---|
//! | AMD `hsa_amd_vmem_handle_create` / `_import_shareable_handle` (major 2) | nothing; the handle's class (from its pool) or its being imported is remembered for its mappings |
//! | AMD `hsa_amd_vmem_map` (major 2) | [`replay_memory::Tracker::record_map`] after it succeeded: the owner from the pointer info, a local handle with its pool's class, an imported handle (or one never seen made) as `Imported` |
//! | AMD `hsa_amd_vmem_set_access` (major 2) | [`replay_memory::Tracker::record_access`] per GPU agent named: read-write after the call, anything else (read-only, write-only, none) before it |
//! | AMD `hsa_amd_vmem_unmap` / `hsa_amd_vmem_address_free` (major 2) | the unmap / the release of the reservation (what is still mapped in it), recorded before the call |
//! | AMD `hsa_amd_vmem_address_reserve` (`_align`), `_handle_release` (major 2) | nothing (the reservation's size is remembered for its free) |
//!
//! Map, unmap, set-access and address-free are installed together or not at all
//! ([`crate::intercept`]); a mapping of a handle these wrappers never saw made is taken for an
//! imported one (an argument into it declines `untracked_memory`).

use std::ffi::c_void;

use replay_core::{AgentId, MemoryClass};

use super::entry::{original_entry, quietly};
use crate::state::{backend, Originals};
use crate::sys::{self, hsa_status_t};
use crate::tracker::{agent, grain, pointer_info, pool_u32};

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
