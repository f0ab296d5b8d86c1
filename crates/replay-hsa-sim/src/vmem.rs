//! The AMD virtual-memory entries (`hsa_amd_vmem_*`, SPEC §7.1 row, §9.1), simulated over host
//! memory so that `replay-hsa`'s wrappers of them can be tested.
//!
//! - **Reserve** (`hsa_amd_vmem_address_reserve`, `_reserve_align`): host memory of the size
//!   (page-aligned, or the alignment asked), in no memory map: nothing reaches it until mapped;
//!   `hsa_amd_pointer_info` answers `RESERVED_ADDR` with the reservation's base and size.
//!   An address hint (page-aligned, non-zero) is honoured where that host range is free in
//!   the process: the reservation is then an anonymous mapping made there
//!   (`MAP_FIXED_NOREPLACE`, never over anything mapped); a range not free gives a
//!   reservation elsewhere, as the real runtime may (a standalone replay asks for captured
//!   addresses this way, SPEC §13). `hsa_amd_vmem_address_free` unmaps what is still mapped in
//!   it and releases it.
//! - **Handles** (`hsa_amd_vmem_handle_create` from a GPU pool, `_release`,
//!   `hsa_amd_vmem_retain_alloc_handle`, `hsa_amd_vmem_get_alloc_properties_from_handle`):
//!   physical memory of the pool's agent, reference-counted; its bytes live in the handle
//!   while it is not mapped. Pool capacity is not charged.
//! - **Map / unmap** (`hsa_amd_vmem_map(va, size, offset, handle)`, `hsa_amd_vmem_unmap`): a
//!   map copies `[offset, offset + size)` of the handle's bytes to `va` (inside a reservation)
//!   and enters the range in the memory map as a block of the handle's pool and agent
//!   (`pointer_info` type `HSA_VMEM`); an unmap takes whole mappings out (a range that cuts one
//!   is refused) and copies their bytes back into the handle, so a handle unmapped and mapped
//!   again keeps its contents. Two mappings of overlapping parts of one handle at once do not
//!   alias (each has its own bytes): not modelled.
//! - **Access** (`hsa_amd_vmem_set_access`, `_get_access`): per mapping and agent, none until
//!   set. A kernel of an agent without access faults (a write needs read-write); the copy
//!   engine and the host are not checked.
//! - **Sharing** (`hsa_amd_vmem_export_shareable_handle`, `_import_shareable_handle`): the
//!   simulator is one process, so an export gives a pretend file descriptor and an import a
//!   new handle holding a copy of the exporter's bytes as they were while unmapped.
//!
//! Above the state (the memory map, which holds each mapping's [`MapAccess`] and checks it)
//! and the table's slot writer; the C entries install these entries in their table.

use std::alloc::Layout;
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use replay_hsa::sys::{self, hsa_status_t, v2};

use crate::state::{self, REG};
// A mapping's access record and its permission values are read by the memory map's checks,
// so they live in the state below; their paths here stay.
pub use crate::state::{
    MapAccess, HSA_ACCESS_PERMISSION_NONE, HSA_ACCESS_PERMISSION_RO, HSA_ACCESS_PERMISSION_RW,
    HSA_ACCESS_PERMISSION_WO,
};

/// `hsa_amd_memory_access_desc_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryAccessDesc {
    /// `hsa_access_permission_t`.
    pub permissions: u32,
    /// The agent.
    pub agent_handle: sys::hsa_agent_t,
}

#[derive(Debug)]
struct Handle {
    pool: u64,
    agent: u64,
    size: usize,
    bytes: Vec<u8>,
    refs: u32,
    /// Bases of its live mappings.
    mapped: Vec<u64>,
}

#[derive(Debug, Default)]
struct Vmem {
    /// Reservations by base: their host memory.
    reservations: BTreeMap<u64, Reservation>,
    handles: HashMap<u64, Handle>,
    next: u64,
}

static VMEM: LazyLock<Mutex<Vmem>> = LazyLock::new(Default::default);

/// A reservation's host memory.
#[derive(Debug, Clone, Copy)]
enum Reservation {
    /// From the heap, with this layout.
    Heap(Layout),
    /// An anonymous mapping of this many bytes at the address asked for.
    Mapped(usize),
}

impl Reservation {
    fn size(&self) -> usize {
        match self {
            Self::Heap(l) => l.size(),
            Self::Mapped(n) => *n,
        }
    }
}

/// An anonymous read-write mapping of `size` bytes exactly at `at`, where nothing is mapped.
fn map_at(at: u64, size: usize) -> Option<u64> {
    if at == 0 || at % 4096 != 0 {
        return None;
    }
    // SAFETY: a new anonymous mapping; MAP_FIXED_NOREPLACE never replaces an existing one
    // (the call fails instead), so no memory of the process is touched.
    let p = unsafe {
        libc::mmap(
            at as *mut c_void,
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    if p as u64 != at {
        // A kernel without MAP_FIXED_NOREPLACE took it as a hint and placed it elsewhere.
        // SAFETY: the mapping just made, of `size` bytes, which nothing else knows.
        unsafe { libc::munmap(p, size) };
        return None;
    }
    Some(at)
}

/// Installs the entries in the AMD table.
pub(crate) fn install(t: &mut v2::AmdExtTable) {
    use crate::table::set;
    set(
        &mut t.hsa_amd_vmem_address_reserve_fn,
        address_reserve as *const (),
    );
    set(
        &mut t.hsa_amd_vmem_address_reserve_align_fn,
        address_reserve_align as *const (),
    );
    set(
        &mut t.hsa_amd_vmem_address_free_fn,
        address_free as *const (),
    );
    set(
        &mut t.hsa_amd_vmem_handle_create_fn,
        handle_create as *const (),
    );
    set(
        &mut t.hsa_amd_vmem_handle_release_fn,
        handle_release as *const (),
    );
    set(&mut t.hsa_amd_vmem_map_fn, map as *const ());
    set(&mut t.hsa_amd_vmem_unmap_fn, unmap as *const ());
    set(&mut t.hsa_amd_vmem_set_access_fn, set_access as *const ());
    set(&mut t.hsa_amd_vmem_get_access_fn, get_access as *const ());
    set(
        &mut t.hsa_amd_vmem_export_shareable_handle_fn,
        export_shareable as *const (),
    );
    set(
        &mut t.hsa_amd_vmem_import_shareable_handle_fn,
        import_shareable as *const (),
    );
    set(
        &mut t.hsa_amd_vmem_retain_alloc_handle_fn,
        retain_alloc_handle as *const (),
    );
    set(
        &mut t.hsa_amd_vmem_get_alloc_properties_from_handle_fn,
        get_alloc_properties as *const (),
    );
}

/// The reservation containing `addr`, as (base, size), for `hsa_amd_pointer_info`.
pub(crate) fn reservation(addr: u64) -> Option<(u64, usize)> {
    let v = VMEM.lock();
    let (&b, r) = v.reservations.range(..=addr).next_back()?;
    (addr < b + r.size() as u64).then_some((b, r.size()))
}

fn guard(name: &str, f: impl FnOnce() -> hsa_status_t) -> hsa_status_t {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        log::error!("hsa-sim: {name} panicked");
        sys::HSA_STATUS_ERROR
    })
}

const BAD: hsa_status_t = sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;

fn reserve(va: *mut *mut c_void, size: usize, address: u64, align: usize) -> hsa_status_t {
    if va.is_null() || size == 0 {
        return BAD;
    }
    let Ok(layout) = Layout::from_size_align(size, align.max(4096).next_power_of_two()) else {
        return BAD;
    };
    if address % layout.align() as u64 == 0 {
        if let Some(at) = map_at(address, size) {
            VMEM.lock()
                .reservations
                .insert(at, Reservation::Mapped(size));
            // SAFETY: a non-NULL out pointer to a `void*` (the caller's contract).
            unsafe { va.write(at as *mut c_void) };
            return sys::HSA_STATUS_SUCCESS;
        }
    }
    // SAFETY: `layout` has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    VMEM.lock()
        .reservations
        .insert(p as u64, Reservation::Heap(layout));
    // SAFETY: a non-NULL out pointer to a `void*` (the caller's contract).
    unsafe { va.write(p.cast()) };
    sys::HSA_STATUS_SUCCESS
}

/// `hsa_amd_vmem_address_reserve(void** va, size_t size, uint64_t address, uint64_t flags)`.
///
/// # Safety
///
/// 1. `va` is NULL or writable for a `void*`.
unsafe extern "C" fn address_reserve(
    va: *mut *mut c_void,
    size: usize,
    address: u64,
    _flags: u64,
) -> hsa_status_t {
    guard("hsa_amd_vmem_address_reserve", || {
        reserve(va, size, address, 4096)
    })
}

/// `hsa_amd_vmem_address_reserve_align(void** va, size_t size, uint64_t address, uint64_t
/// alignment, uint64_t flags)`.
///
/// # Safety
///
/// 1. `va` is NULL or writable for a `void*`.
unsafe extern "C" fn address_reserve_align(
    va: *mut *mut c_void,
    size: usize,
    address: u64,
    alignment: u64,
    _flags: u64,
) -> hsa_status_t {
    guard("hsa_amd_vmem_address_reserve_align", || {
        reserve(
            va,
            size,
            address,
            usize::try_from(alignment).unwrap_or(usize::MAX),
        )
    })
}

/// Takes the mappings in `[va, va + size)` out and gives their bytes back to their handles;
/// false when the range cuts one.
fn unmap_range(v: &mut Vmem, va: u64, size: usize) -> bool {
    let Some(removed) = state::remove_mappings(va, size) else {
        return false;
    };
    for (base, a) in removed {
        let Some(acc) = a.vmem else { continue };
        let Some(h) = v.handles.get_mut(&acc.handle) else {
            continue;
        };
        let end = (acc.offset + a.size).min(h.bytes.len());
        // SAFETY: `[base, base + size)` is inside a reservation the registry owns (still
        // allocated: reservations are released only below, after their mappings), and no
        // accessor reaches it any more (removed from the map under its write lock).
        let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, a.size) };
        h.bytes[acc.offset..end].copy_from_slice(&bytes[..end - acc.offset]);
        h.mapped.retain(|&b| b != base);
        if h.refs == 0 && h.mapped.is_empty() {
            v.handles.remove(&acc.handle);
        }
    }
    true
}

/// `hsa_amd_vmem_address_free(void* va, size_t size)`.
unsafe extern "C" fn address_free(va: *mut c_void, size: usize) -> hsa_status_t {
    guard("hsa_amd_vmem_address_free", || {
        let mut v = VMEM.lock();
        let base = va as u64;
        let Some(r) = v.reservations.get(&base).copied() else {
            return BAD;
        };
        if size != 0 && size != r.size() {
            return BAD;
        }
        if !unmap_range(&mut v, base, r.size()) {
            return BAD;
        }
        v.reservations.remove(&base);
        match r {
            // SAFETY: the reservation's memory from `alloc_zeroed` with this layout; nothing
            // maps it any more (its mappings were removed just above).
            Reservation::Heap(layout) => unsafe { std::alloc::dealloc(base as *mut u8, layout) },
            // SAFETY: the anonymous mapping `map_at` made for this reservation, of this size;
            // nothing maps it any more.
            Reservation::Mapped(n) => unsafe {
                libc::munmap(base as *mut c_void, n);
            },
        }
        sys::HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_vmem_handle_create(hsa_amd_memory_pool_t pool, size_t size,
/// hsa_amd_memory_type_t type, uint64_t flags, hsa_amd_vmem_alloc_handle_t* handle)`.
///
/// # Safety
///
/// 1. `out` is NULL or writable for a handle.
unsafe extern "C" fn handle_create(
    pool: sys::hsa_amd_memory_pool_t,
    size: usize,
    _type: u32,
    _flags: u64,
    out: *mut sys::hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t {
    guard("hsa_amd_vmem_handle_create", || {
        if out.is_null() || size == 0 {
            return BAD;
        }
        let Some(p) = REG.pools.lock().get(&pool.handle).cloned() else {
            return BAD;
        };
        let mut v = VMEM.lock();
        v.next += 1;
        let id = v.next;
        v.handles.insert(
            id,
            Handle {
                pool: p.handle,
                agent: p.agent,
                size,
                bytes: vec![0; size],
                refs: 1,
                mapped: Vec::new(),
            },
        );
        // SAFETY: the caller's item 1; non-NULL.
        unsafe { out.write(sys::hsa_amd_vmem_alloc_handle_t { handle: id }) };
        sys::HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_vmem_handle_release(hsa_amd_vmem_alloc_handle_t)`: the memory lives until its
/// last mapping is unmapped.
unsafe extern "C" fn handle_release(handle: sys::hsa_amd_vmem_alloc_handle_t) -> hsa_status_t {
    guard("hsa_amd_vmem_handle_release", || {
        let mut v = VMEM.lock();
        let Some(h) = v.handles.get_mut(&handle.handle) else {
            return BAD;
        };
        if h.refs == 0 {
            return BAD;
        }
        h.refs -= 1;
        if h.refs == 0 && h.mapped.is_empty() {
            v.handles.remove(&handle.handle);
        }
        sys::HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_vmem_map(void* va, size_t size, size_t in_offset, hsa_amd_vmem_alloc_handle_t,
/// uint64_t flags)`.
unsafe extern "C" fn map(
    va: *mut c_void,
    size: usize,
    offset: usize,
    handle: sys::hsa_amd_vmem_alloc_handle_t,
    _flags: u64,
) -> hsa_status_t {
    guard("hsa_amd_vmem_map", || {
        let mut v = VMEM.lock();
        let base = va as u64;
        let inside = v
            .reservations
            .range(..=base)
            .next_back()
            .is_some_and(|(&b, l)| base.saturating_add(size as u64) <= b + l.size() as u64);
        let Some(h) = v.handles.get(&handle.handle) else {
            return BAD;
        };
        if !inside || size == 0 || offset.checked_add(size).is_none_or(|e| e > h.size) {
            return BAD;
        }
        let access = Arc::new(MapAccess {
            handle: handle.handle,
            offset,
            perms: Mutex::default(),
        });
        // SAFETY: `[base, base + size)` lies inside a reservation the registry owns (checked
        // above), and no accessor reaches it before the block enters the map below.
        unsafe { std::ptr::copy_nonoverlapping(h.bytes[offset..].as_ptr(), base as *mut u8, size) };
        if !state::insert_mapping(base, size, h.pool, h.agent, access) {
            return BAD;
        }
        v.handles
            .get_mut(&handle.handle)
            .expect("looked up above")
            .mapped
            .push(base);
        sys::HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_vmem_unmap(void* va, size_t size)`: whole mappings only.
unsafe extern "C" fn unmap(va: *mut c_void, size: usize) -> hsa_status_t {
    guard("hsa_amd_vmem_unmap", || {
        let mut v = VMEM.lock();
        let found = state::find(va as u64).is_some_and(|(_, a)| a.vmem.is_some());
        if !found || !unmap_range(&mut v, va as u64, size) {
            return BAD;
        }
        sys::HSA_STATUS_SUCCESS
    })
}

/// The access records of the mappings in `[va, va + size)` (none: empty).
fn accesses(va: u64, size: usize) -> Vec<Arc<MapAccess>> {
    let mut out = Vec::new();
    let mut at = va;
    let end = va.saturating_add(size.max(1) as u64);
    while at < end {
        match state::find(at) {
            Some((b, a)) => {
                if let Some(acc) = a.vmem {
                    out.push(acc);
                }
                at = b + a.size.max(1) as u64;
            }
            None => at += 4096 - at % 4096,
        }
    }
    out
}

/// `hsa_amd_vmem_set_access(void* va, size_t size, const hsa_amd_memory_access_desc_t* desc,
/// size_t desc_cnt)`.
///
/// # Safety
///
/// 1. `desc` is NULL or points to `count` descriptors.
unsafe extern "C" fn set_access(
    va: *mut c_void,
    size: usize,
    desc: *const MemoryAccessDesc,
    count: usize,
) -> hsa_status_t {
    guard("hsa_amd_vmem_set_access", || {
        if desc.is_null() || count == 0 {
            return BAD;
        }
        // SAFETY: the caller's item 1, `count > 0`.
        let descs = unsafe { std::slice::from_raw_parts(desc, count) };
        if descs
            .iter()
            .any(|d| d.permissions > HSA_ACCESS_PERMISSION_RW)
        {
            return BAD;
        }
        let maps = accesses(va as u64, size);
        if maps.is_empty() {
            return BAD;
        }
        for m in maps {
            let mut p = m.perms.lock();
            for d in descs {
                p.insert(d.agent_handle.handle, d.permissions);
            }
        }
        sys::HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_vmem_get_access(void* va, hsa_access_permission_t* perms, hsa_agent_t)`.
///
/// # Safety
///
/// 1. `perms` is NULL or writable for a `u32`.
unsafe extern "C" fn get_access(
    va: *mut c_void,
    perms: *mut u32,
    agent: sys::hsa_agent_t,
) -> hsa_status_t {
    guard("hsa_amd_vmem_get_access", || {
        let Some(acc) = accesses(va as u64, 1).pop() else {
            return BAD;
        };
        if perms.is_null() {
            return BAD;
        }
        let p = acc
            .perms
            .lock()
            .get(&agent.handle)
            .copied()
            .unwrap_or(HSA_ACCESS_PERMISSION_NONE);
        // SAFETY: the caller's item 1; non-NULL.
        unsafe { perms.write(p) };
        sys::HSA_STATUS_SUCCESS
    })
}

/// Pretend file descriptors are the handle id plus this.
const FD_BASE: i32 = 0x4000;

/// `hsa_amd_vmem_export_shareable_handle(int* dmabuf_fd, hsa_amd_vmem_alloc_handle_t, uint64_t
/// flags)`.
///
/// # Safety
///
/// 1. `fd` is NULL or writable for an `int`.
unsafe extern "C" fn export_shareable(
    fd: *mut i32,
    handle: sys::hsa_amd_vmem_alloc_handle_t,
    _flags: u64,
) -> hsa_status_t {
    guard("hsa_amd_vmem_export_shareable_handle", || {
        let known = VMEM.lock().handles.contains_key(&handle.handle);
        let Ok(id) = i32::try_from(handle.handle) else {
            return BAD;
        };
        if fd.is_null() || !known {
            return BAD;
        }
        // SAFETY: the caller's item 1; non-NULL.
        unsafe { fd.write(FD_BASE + id) };
        sys::HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_vmem_import_shareable_handle(int dmabuf_fd, hsa_amd_vmem_alloc_handle_t*)`.
///
/// # Safety
///
/// 1. `out` is NULL or writable for a handle.
unsafe extern "C" fn import_shareable(
    fd: i32,
    out: *mut sys::hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t {
    guard("hsa_amd_vmem_import_shareable_handle", || {
        let mut v = VMEM.lock();
        let from = u64::try_from(fd - FD_BASE).unwrap_or(0);
        let Some(h) = v.handles.get(&from) else {
            return BAD;
        };
        if out.is_null() {
            return BAD;
        }
        let copy = Handle {
            pool: h.pool,
            agent: h.agent,
            size: h.size,
            bytes: h.bytes.clone(),
            refs: 1,
            mapped: Vec::new(),
        };
        v.next += 1;
        let id = v.next;
        v.handles.insert(id, copy);
        // SAFETY: the caller's item 1; non-NULL.
        unsafe { out.write(sys::hsa_amd_vmem_alloc_handle_t { handle: id }) };
        sys::HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_vmem_retain_alloc_handle(hsa_amd_vmem_alloc_handle_t*, void* addr)`: the handle
/// mapped at `addr`, with one more reference.
///
/// # Safety
///
/// 1. `out` is NULL or writable for a handle.
unsafe extern "C" fn retain_alloc_handle(
    out: *mut sys::hsa_amd_vmem_alloc_handle_t,
    addr: *mut c_void,
) -> hsa_status_t {
    guard("hsa_amd_vmem_retain_alloc_handle", || {
        let Some(acc) = accesses(addr as u64, 1).pop() else {
            return BAD;
        };
        let mut v = VMEM.lock();
        let Some(h) = v.handles.get_mut(&acc.handle) else {
            return BAD;
        };
        if out.is_null() {
            return BAD;
        }
        h.refs += 1;
        // SAFETY: the caller's item 1; non-NULL.
        unsafe {
            out.write(sys::hsa_amd_vmem_alloc_handle_t { handle: acc.handle });
        }
        sys::HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_vmem_get_alloc_properties_from_handle(hsa_amd_vmem_alloc_handle_t,
/// hsa_amd_memory_pool_t* pool, hsa_amd_memory_type_t* type)`: type `MEMORY_TYPE_NONE` (0).
///
/// # Safety
///
/// 1. `pool` and `type_` are NULL or writable for their types.
unsafe extern "C" fn get_alloc_properties(
    handle: sys::hsa_amd_vmem_alloc_handle_t,
    pool: *mut sys::hsa_amd_memory_pool_t,
    type_: *mut u32,
) -> hsa_status_t {
    guard("hsa_amd_vmem_get_alloc_properties_from_handle", || {
        let v = VMEM.lock();
        let Some(h) = v.handles.get(&handle.handle) else {
            return BAD;
        };
        if pool.is_null() || type_.is_null() {
            return BAD;
        }
        // SAFETY: the caller's item 1; both non-NULL.
        unsafe {
            pool.write(sys::hsa_amd_memory_pool_t { handle: h.pool });
            type_.write(0);
        }
        sys::HSA_STATUS_SUCCESS
    })
}
