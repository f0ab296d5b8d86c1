//! The runtime's API table: version checks and entry slots (SPEC §9.1).
//!
//! [`bind`] reads the root table's version, then each sub-table's, and resolves the slot of
//! every entry the backend needs from the binding of *that* major ([`crate::sys::v1`],
//! [`crate::sys::v2`]). It checks `major_id` and `minor_id` (the table's size in bytes) before
//! it reads any entry: an unknown major, a table too small for a needed entry, or a needed
//! entry that is NULL is a [`TableError`], and the caller installs nothing. A size check
//! alone is not enough: the AMD extension table of major 2 moved entries, so a major-1 offset
//! would name another function there.
//!
//! Needed entries (both majors): core `hsa_agent_get_info`, `hsa_region_get_info`,
//! `hsa_memory_allocate`, `hsa_memory_free`, `hsa_signal_load_relaxed`; AMD extension
//! `hsa_amd_memory_pool_get_info`, `hsa_amd_memory_pool_allocate`, `hsa_amd_memory_pool_free`,
//! `hsa_amd_memory_async_copy`, `hsa_amd_pointer_info`. Optional (wrapped where the table has
//! them): `hsa_amd_memory_async_copy_rect`, and in major 2 `hsa_amd_memory_async_copy_on_engine`,
//! `hsa_amd_vmem_map`, `_unmap`, `_set_access`, `_address_reserve`, `_address_reserve_align`,
//! `_address_free`, `_handle_create`, `_handle_release`, `_import_shareable_handle` (major 1
//! has no virtual-memory entries); `hsa_amd_memory_lock` / `_lock_to_pool` /
//! `_unlock` and `hsa_amd_ipc_memory_attach` / `_detach` (host and imported memory),
//! `hsa_memory_copy` and `hsa_amd_memory_fill` (gated writes), and `hsa_iterate_agents` (read). The queue group ([`QueueSlots`]: core queue
//! create/destroy and index entries, signal create/destroy/store/add/subtract/wait,
//! `hsa_memory_copy`, `hsa_iterate_agents`; AMD pool iteration, intercept create/register,
//! `hsa_amd_async_function`) is bound all or nothing: missing any, queues are not intercepted.
//! So is the loader group ([`LoaderSlots`]: core `hsa_system_get_major_extension_table`,
//! `hsa_executable_iterate_agent_symbols`, `hsa_executable_symbol_get_info`, read and never
//! replaced): missing any, every module-variable enumeration fails (`untracked_memory`).

use std::ffi::c_void;
use std::mem::{offset_of, size_of};

use crate::result::TableError;
use crate::sys::{self, v1, v2, ApiTableVersion};

/// Root majors this build binds.
pub const ROOT_MAJORS: [u32; 2] = [1, 3];
/// Core table majors this build binds.
pub const CORE_MAJORS: [u32; 2] = [1, 2];
/// AMD extension table majors this build binds.
pub const AMD_EXT_MAJORS: [u32; 2] = [1, 2];

/// The slot of one entry inside the runtime's table.
pub struct Slot<F> {
    ptr: *mut Option<F>,
    /// The entry's C name.
    pub name: &'static str,
}

impl<F> std::fmt::Debug for Slot<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slot({} @ {:p})", self.name, self.ptr)
    }
}

// SAFETY: a slot points into the runtime's API table, which lives as long as the runtime and is
// written only by `OnLoad` (serialised by the backend's install lock); function pointers are
// `Send` and `Sync`.
unsafe impl<F: Send> Send for Slot<F> {}
// SAFETY: as above.
unsafe impl<F: Sync> Sync for Slot<F> {}

impl<F: Copy> Slot<F> {
    /// The entry's current value.
    ///
    /// # Safety
    ///
    /// 1. The table the slot was bound from is still alive.
    pub unsafe fn get(&self) -> Option<F> {
        // SAFETY: `bind` checked that the slot lies inside the table (by its size), and the
        // table is alive (caller, item 1); an entry is a nullable function pointer.
        unsafe { self.ptr.read() }
    }

    /// Replaces the entry.
    ///
    /// # Safety
    ///
    /// 1. The table the slot was bound from is still alive, and no thread calls through it
    ///    concurrently (the runtime calls `OnLoad` before the application uses the table).
    pub unsafe fn set(&self, f: F) {
        // SAFETY: inside the table (checked by `bind`), alive and not used concurrently
        // (caller, item 1).
        unsafe { self.ptr.write(Some(f)) }
    }
}

/// The versions of the tables `OnLoad` received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Versions {
    /// Root table `(major, size, step)`.
    pub root: (u32, u32, u32),
    /// Core table.
    pub core: (u32, u32, u32),
    /// AMD extension table.
    pub amd_ext: (u32, u32, u32),
}

/// Every slot the backend reads or replaces.
#[allow(missing_docs)]
#[derive(Debug)]
pub struct Entries {
    pub agent_get_info: Slot<sys::AgentGetInfoFn>,
    pub region_get_info: Slot<sys::RegionGetInfoFn>,
    pub memory_allocate: Slot<sys::MemoryAllocateFn>,
    pub memory_free: Slot<sys::MemoryFreeFn>,
    pub signal_load_relaxed: Slot<sys::SignalLoadFn>,
    pub pool_get_info: Slot<sys::PoolGetInfoFn>,
    pub pool_allocate: Slot<sys::PoolAllocateFn>,
    pub pool_free: Slot<sys::PoolFreeFn>,
    pub async_copy: Slot<sys::AsyncCopyFn>,
    pub pointer_info: Slot<sys::PointerInfoFn>,
    pub async_copy_rect: Option<Slot<sys::AsyncCopyRectFn>>,
    pub async_copy_on_engine: Option<Slot<sys::AsyncCopyOnEngineFn>>,
    pub vmem_map: Option<Slot<sys::VmemMapFn>>,
    pub vmem_unmap: Option<Slot<sys::VmemUnmapFn>>,
    /// The rest of the virtual-memory group (major 2): wrapped with map and unmap (see
    /// `tool.rs` for which are needed together).
    pub vmem_reserve: Option<Slot<sys::VmemAddressReserveFn>>,
    pub vmem_reserve_align: Option<Slot<sys::VmemAddressReserveAlignFn>>,
    pub vmem_address_free: Option<Slot<sys::VmemAddressFreeFn>>,
    pub vmem_handle_create: Option<Slot<sys::VmemHandleCreateFn>>,
    pub vmem_handle_release: Option<Slot<sys::VmemHandleReleaseFn>>,
    pub vmem_set_access: Option<Slot<sys::VmemSetAccessFn>>,
    pub vmem_import: Option<Slot<sys::VmemImportShareableFn>>,
    /// Wrapped where present: an executable's kernels are forgotten before it is destroyed.
    pub executable_destroy: Option<Slot<sys::ExecutableDestroyFn>>,
    /// Host memory made GPU-accessible (`hsa_amd_memory_lock`, `_lock_to_pool`, `_unlock`):
    /// wrapped where lock and unlock are both present.
    pub memory_lock: Option<Slot<sys::MemoryLockFn>>,
    pub memory_lock_to_pool: Option<Slot<sys::MemoryLockToPoolFn>>,
    pub memory_unlock: Option<Slot<sys::MemoryUnlockFn>>,
    /// IPC-imported memory (`hsa_amd_ipc_memory_attach` / `_detach`): wrapped together.
    pub ipc_attach: Option<Slot<sys::IpcMemoryAttachFn>>,
    pub ipc_detach: Option<Slot<sys::IpcMemoryDetachFn>>,
    /// Local memory exported to other processes (`hsa_amd_ipc_memory_create`): wrapped where
    /// present, so the exported allocation is marked as shared.
    pub ipc_create: Option<Slot<sys::IpcMemoryCreateFn>>,
    /// Writes that are not replayed, gated on the agents they write (SPEC §6 step 4): core
    /// `hsa_memory_copy` and AMD `hsa_amd_memory_fill`, wrapped where present.
    pub memory_copy: Option<Slot<sys::MemoryCopyFn>>,
    pub memory_fill: Option<Slot<sys::MemoryFillFn>>,
    /// `hsa_iterate_agents`, read (never replaced): the GPU agents host memory is recorded for.
    pub iterate_agents: Option<Slot<sys::IterateAgentsFn>>,
    /// The queue, signal and interception entries (stage 2): all present, or `None` and
    /// queues are left untouched.
    pub queue: Option<QueueSlots>,
    /// The entries module-variable enumeration needs (core
    /// `hsa_system_get_major_extension_table`, `hsa_executable_iterate_agent_symbols`,
    /// `hsa_executable_symbol_get_info`): all present, or `None` and every enumeration fails.
    pub loader: Option<LoaderSlots>,
}

/// The entries module-variable enumeration needs (read, never replaced).
#[allow(missing_docs)]
#[derive(Debug)]
pub struct LoaderSlots {
    pub get_extension_table: Slot<sys::GetExtensionTableFn>,
    pub iterate_agent_symbols: Slot<sys::IterateAgentSymbolsFn>,
    pub symbol_get_info: Slot<sys::SymbolGetInfoFn>,
}

/// The entries queue interception needs (core queue/signal entries, AMD intercept entries).
#[allow(missing_docs)]
#[derive(Debug)]
pub struct QueueSlots {
    pub queue_create: Slot<sys::QueueCreateFn>,
    pub queue_destroy: Slot<sys::QueueDestroyFn>,
    pub load_read_index: Slot<sys::QueueLoadIndexFn>,
    pub load_write_index: Slot<sys::QueueLoadIndexFn>,
    pub add_write_index: Slot<sys::QueueAddIndexFn>,
    pub cas_write_index: Slot<sys::QueueCasIndexFn>,
    pub signal_create: Slot<sys::SignalCreateFn>,
    pub signal_destroy: Slot<sys::SignalDestroyFn>,
    pub signal_store: Slot<sys::SignalUpdateFn>,
    pub signal_add: Slot<sys::SignalUpdateFn>,
    pub signal_subtract: Slot<sys::SignalUpdateFn>,
    pub signal_wait: Slot<sys::SignalWaitFn>,
    pub memory_copy: Slot<sys::MemoryCopyFn>,
    pub iterate_agents: Slot<sys::IterateAgentsFn>,
    pub iterate_pools: Slot<sys::IteratePoolsFn>,
    pub intercept_create: Slot<sys::QueueCreateFn>,
    pub intercept_register: Slot<sys::InterceptRegisterFn>,
    pub async_function: Slot<sys::AsyncFunctionFn>,
    /// For the timestamp frequency (timeout hints); without it hints assume 1 GHz.
    pub system_get_info: Option<Slot<sys::SystemGetInfoFn>>,
    /// For host backing memory the GPU copies into; without it none is used.
    pub allow_access: Option<Slot<sys::AllowAccessFn>>,
}

/// A table whose versions were checked, with the slots of the entries the backend needs.
#[derive(Debug)]
pub struct Bound {
    /// The versions received.
    pub versions: Versions,
    /// The slots.
    pub entries: Entries,
}

fn triple(v: ApiTableVersion) -> (u32, u32, u32) {
    (v.major_id, v.minor_id, v.step_id)
}

fn known(majors: &[u32]) -> &'static str {
    match majors {
        [1, 3] => "1 and 3",
        _ => "1 and 2",
    }
}

/// One sub-table: its base, name and version, already checked against the known majors.
#[derive(Clone, Copy)]
struct Sub {
    base: *mut u8,
    name: &'static str,
    version: ApiTableVersion,
}

impl Sub {
    /// Reads the version of the table at `ptr` and checks its major.
    ///
    /// # Safety
    ///
    /// 1. `ptr` is NULL or points to a readable `ApiTableVersion`.
    unsafe fn open(
        ptr: *mut c_void,
        name: &'static str,
        majors: &'static [u32],
    ) -> Result<Self, TableError> {
        if ptr.is_null() {
            return Err(TableError::Null { table: name });
        }
        // SAFETY: non-NULL, and every API table begins with its version (caller, item 1).
        let version = unsafe { ptr.cast::<ApiTableVersion>().read() };
        if !majors.contains(&version.major_id) {
            return Err(TableError::UnknownMajor {
                table: name,
                major: version.major_id,
                known: known(majors),
            });
        }
        Ok(Self {
            base: ptr.cast(),
            name,
            version,
        })
    }

    /// Checks that the table's size covers a pointer at `offset`.
    fn covers(&self, offset: usize, entry: &'static str) -> Result<(), TableError> {
        let needed = offset + size_of::<usize>();
        if (self.version.minor_id as usize) < needed {
            return Err(TableError::TooSmall {
                table: self.name,
                major: self.version.major_id,
                entry,
                size: self.version.minor_id,
                needed,
            });
        }
        Ok(())
    }

    /// The slot at `offset` of an entry the backend needs: inside the table and not NULL.
    ///
    /// # Safety
    ///
    /// 1. The table is readable for its `minor_id` bytes.
    unsafe fn needed<F: Copy>(
        &self,
        offset: usize,
        entry: &'static str,
    ) -> Result<Slot<F>, TableError> {
        self.covers(offset, entry)?;
        let slot = Slot {
            // SAFETY: `covers` checked that offset + a pointer lies inside the table.
            ptr: unsafe { self.base.add(offset) }.cast::<Option<F>>(),
            name: entry,
        };
        // SAFETY: inside the readable table (item 1).
        if unsafe { slot.get() }.is_none() {
            return Err(TableError::NullEntry {
                table: self.name,
                entry,
            });
        }
        Ok(slot)
    }

    /// The slot of an optional entry: `None` when this major lacks it, the table is too small
    /// for it, or it is NULL.
    ///
    /// # Safety
    ///
    /// 1. The table is readable for its `minor_id` bytes.
    unsafe fn optional<F: Copy>(
        &self,
        offset: Option<usize>,
        entry: &'static str,
    ) -> Option<Slot<F>> {
        // SAFETY: the caller's item 1.
        offset.and_then(|o| unsafe { self.needed(o, entry) }.ok())
    }
}

/// Picks the offset of a field from the binding of the table's major.
macro_rules! offset {
    ($sub:expr, $table:ident, $field:ident) => {
        match $sub.version.major_id {
            1 => offset_of!(v1::$table, $field),
            _ => offset_of!(v2::$table, $field),
        }
    };
}

/// Checks the versions of the table `OnLoad` received and resolves the slots of the entries
/// the backend needs. Reads versions and entries; writes nothing.
///
/// # Safety
///
/// 1. `root` is NULL or points to the runtime's `HsaApiTable`: a readable version header,
///    and, as far as its `minor_id` says, sub-table pointers that are each NULL or point to a
///    table readable for its own `minor_id` bytes.
pub unsafe fn bind(root: *mut c_void) -> Result<Bound, TableError> {
    // SAFETY: the caller's item 1.
    let root = unsafe { Sub::open(root, "root", &ROOT_MAJORS) }?;
    // Root majors 1 and 3 both keep `core_` and `amd_ext_` at the same offsets.
    let core_off = match root.version.major_id {
        1 => offset_of!(v1::HsaApiTable, core_),
        _ => offset_of!(v2::HsaApiTable, core_),
    };
    let amd_off = match root.version.major_id {
        1 => offset_of!(v1::HsaApiTable, amd_ext_),
        _ => offset_of!(v2::HsaApiTable, amd_ext_),
    };
    root.covers(core_off, "core_")?;
    root.covers(amd_off, "amd_ext_")?;
    // SAFETY: both offsets lie inside the root table (checked above), which holds pointers
    // there (caller, item 1).
    let (core_ptr, amd_ptr) = unsafe {
        (
            root.base.add(core_off).cast::<*mut c_void>().read(),
            root.base.add(amd_off).cast::<*mut c_void>().read(),
        )
    };
    // SAFETY: NULL or a table with a version header (caller, item 1).
    let core = unsafe { Sub::open(core_ptr, "core", &CORE_MAJORS) }?;
    // SAFETY: as above.
    let amd = unsafe { Sub::open(amd_ptr, "amd_ext", &AMD_EXT_MAJORS) }?;
    let v2_only = |off: usize| (amd.version.major_id >= 2).then_some(off);
    // SAFETY: each sub-table is readable for its `minor_id` bytes (caller, item 1), and every
    // `needed` call checks its offset against that size.
    let queue = unsafe { queue_slots(&core, &amd) }
        .map_err(|e| log::info!("[kernel-replay] hsa: queues are not intercepted: {e}"))
        .ok();

    // SAFETY: as above.
    let loader = unsafe { loader_slots(&core) }
        .map_err(|e| log::info!("[kernel-replay] hsa: no module variables: {e}"))
        .ok();

    // SAFETY: (every `needed` / `optional` below) each sub-table is readable for its
    // `minor_id` bytes (caller, item 1), and each call checks the offset against that size.
    let entries = unsafe {
        Entries {
            agent_get_info: core.needed(
                offset!(core, CoreApiTable, hsa_agent_get_info_fn),
                "hsa_agent_get_info",
            )?,
            region_get_info: core.needed(
                offset!(core, CoreApiTable, hsa_region_get_info_fn),
                "hsa_region_get_info",
            )?,
            memory_allocate: core.needed(
                offset!(core, CoreApiTable, hsa_memory_allocate_fn),
                "hsa_memory_allocate",
            )?,
            memory_free: core.needed(
                offset!(core, CoreApiTable, hsa_memory_free_fn),
                "hsa_memory_free",
            )?,
            signal_load_relaxed: core.needed(
                offset!(core, CoreApiTable, hsa_signal_load_relaxed_fn),
                "hsa_signal_load_relaxed",
            )?,
            pool_get_info: amd.needed(
                offset!(amd, AmdExtTable, hsa_amd_memory_pool_get_info_fn),
                "hsa_amd_memory_pool_get_info",
            )?,
            pool_allocate: amd.needed(
                offset!(amd, AmdExtTable, hsa_amd_memory_pool_allocate_fn),
                "hsa_amd_memory_pool_allocate",
            )?,
            pool_free: amd.needed(
                offset!(amd, AmdExtTable, hsa_amd_memory_pool_free_fn),
                "hsa_amd_memory_pool_free",
            )?,
            async_copy: amd.needed(
                offset!(amd, AmdExtTable, hsa_amd_memory_async_copy_fn),
                "hsa_amd_memory_async_copy",
            )?,
            pointer_info: amd.needed(
                offset!(amd, AmdExtTable, hsa_amd_pointer_info_fn),
                "hsa_amd_pointer_info",
            )?,
            async_copy_rect: amd.optional(
                Some(offset!(amd, AmdExtTable, hsa_amd_memory_async_copy_rect_fn)),
                "hsa_amd_memory_async_copy_rect",
            ),
            async_copy_on_engine: amd.optional(
                v2_only(offset_of!(
                    v2::AmdExtTable,
                    hsa_amd_memory_async_copy_on_engine_fn
                )),
                "hsa_amd_memory_async_copy_on_engine",
            ),
            vmem_map: amd.optional(
                v2_only(offset_of!(v2::AmdExtTable, hsa_amd_vmem_map_fn)),
                "hsa_amd_vmem_map",
            ),
            vmem_unmap: amd.optional(
                v2_only(offset_of!(v2::AmdExtTable, hsa_amd_vmem_unmap_fn)),
                "hsa_amd_vmem_unmap",
            ),
            vmem_reserve: amd.optional(
                v2_only(offset_of!(v2::AmdExtTable, hsa_amd_vmem_address_reserve_fn)),
                "hsa_amd_vmem_address_reserve",
            ),
            vmem_reserve_align: amd.optional(
                v2_only(offset_of!(
                    v2::AmdExtTable,
                    hsa_amd_vmem_address_reserve_align_fn
                )),
                "hsa_amd_vmem_address_reserve_align",
            ),
            vmem_address_free: amd.optional(
                v2_only(offset_of!(v2::AmdExtTable, hsa_amd_vmem_address_free_fn)),
                "hsa_amd_vmem_address_free",
            ),
            vmem_handle_create: amd.optional(
                v2_only(offset_of!(v2::AmdExtTable, hsa_amd_vmem_handle_create_fn)),
                "hsa_amd_vmem_handle_create",
            ),
            vmem_handle_release: amd.optional(
                v2_only(offset_of!(v2::AmdExtTable, hsa_amd_vmem_handle_release_fn)),
                "hsa_amd_vmem_handle_release",
            ),
            vmem_set_access: amd.optional(
                v2_only(offset_of!(v2::AmdExtTable, hsa_amd_vmem_set_access_fn)),
                "hsa_amd_vmem_set_access",
            ),
            vmem_import: amd.optional(
                v2_only(offset_of!(
                    v2::AmdExtTable,
                    hsa_amd_vmem_import_shareable_handle_fn
                )),
                "hsa_amd_vmem_import_shareable_handle",
            ),
            executable_destroy: core.optional(
                Some(offset!(core, CoreApiTable, hsa_executable_destroy_fn)),
                "hsa_executable_destroy",
            ),
            memory_lock: amd.optional(
                Some(offset!(amd, AmdExtTable, hsa_amd_memory_lock_fn)),
                "hsa_amd_memory_lock",
            ),
            memory_lock_to_pool: amd.optional(
                Some(offset!(amd, AmdExtTable, hsa_amd_memory_lock_to_pool_fn)),
                "hsa_amd_memory_lock_to_pool",
            ),
            memory_unlock: amd.optional(
                Some(offset!(amd, AmdExtTable, hsa_amd_memory_unlock_fn)),
                "hsa_amd_memory_unlock",
            ),
            ipc_attach: amd.optional(
                Some(offset!(amd, AmdExtTable, hsa_amd_ipc_memory_attach_fn)),
                "hsa_amd_ipc_memory_attach",
            ),
            ipc_detach: amd.optional(
                Some(offset!(amd, AmdExtTable, hsa_amd_ipc_memory_detach_fn)),
                "hsa_amd_ipc_memory_detach",
            ),
            ipc_create: amd.optional(
                Some(offset!(amd, AmdExtTable, hsa_amd_ipc_memory_create_fn)),
                "hsa_amd_ipc_memory_create",
            ),
            memory_copy: core.optional(
                Some(offset!(core, CoreApiTable, hsa_memory_copy_fn)),
                "hsa_memory_copy",
            ),
            memory_fill: amd.optional(
                Some(offset!(amd, AmdExtTable, hsa_amd_memory_fill_fn)),
                "hsa_amd_memory_fill",
            ),
            iterate_agents: core.optional(
                Some(offset!(core, CoreApiTable, hsa_iterate_agents_fn)),
                "hsa_iterate_agents",
            ),
            queue,
            loader,
        }
    };
    Ok(Bound {
        versions: Versions {
            root: triple(root.version),
            core: triple(core.version),
            amd_ext: triple(amd.version),
        },
        entries,
    })
}

/// The interception entries, all or none.
///
/// # Safety
///
/// 1. Both tables are readable for their `minor_id` bytes.
unsafe fn queue_slots(core: &Sub, amd: &Sub) -> Result<QueueSlots, TableError> {
    // SAFETY: (every call) the caller's item 1; `needed` checks each offset against the size.
    unsafe {
        Ok(QueueSlots {
            queue_create: core.needed(
                offset!(core, CoreApiTable, hsa_queue_create_fn),
                "hsa_queue_create",
            )?,
            queue_destroy: core.needed(
                offset!(core, CoreApiTable, hsa_queue_destroy_fn),
                "hsa_queue_destroy",
            )?,
            load_read_index: core.needed(
                offset!(core, CoreApiTable, hsa_queue_load_read_index_scacquire_fn),
                "hsa_queue_load_read_index_scacquire",
            )?,
            load_write_index: core.needed(
                offset!(core, CoreApiTable, hsa_queue_load_write_index_scacquire_fn),
                "hsa_queue_load_write_index_scacquire",
            )?,
            add_write_index: core.needed(
                offset!(core, CoreApiTable, hsa_queue_add_write_index_scacq_screl_fn),
                "hsa_queue_add_write_index_scacq_screl",
            )?,
            cas_write_index: core.needed(
                offset!(core, CoreApiTable, hsa_queue_cas_write_index_scacq_screl_fn),
                "hsa_queue_cas_write_index_scacq_screl",
            )?,
            signal_create: core.needed(
                offset!(core, CoreApiTable, hsa_signal_create_fn),
                "hsa_signal_create",
            )?,
            signal_destroy: core.needed(
                offset!(core, CoreApiTable, hsa_signal_destroy_fn),
                "hsa_signal_destroy",
            )?,
            signal_store: core.needed(
                offset!(core, CoreApiTable, hsa_signal_store_screlease_fn),
                "hsa_signal_store_screlease",
            )?,
            signal_add: core.needed(
                offset!(core, CoreApiTable, hsa_signal_add_screlease_fn),
                "hsa_signal_add_screlease",
            )?,
            signal_subtract: core.needed(
                offset!(core, CoreApiTable, hsa_signal_subtract_screlease_fn),
                "hsa_signal_subtract_screlease",
            )?,
            signal_wait: core.needed(
                offset!(core, CoreApiTable, hsa_signal_wait_scacquire_fn),
                "hsa_signal_wait_scacquire",
            )?,
            memory_copy: core.needed(
                offset!(core, CoreApiTable, hsa_memory_copy_fn),
                "hsa_memory_copy",
            )?,
            iterate_agents: core.needed(
                offset!(core, CoreApiTable, hsa_iterate_agents_fn),
                "hsa_iterate_agents",
            )?,
            iterate_pools: amd.needed(
                offset!(amd, AmdExtTable, hsa_amd_agent_iterate_memory_pools_fn),
                "hsa_amd_agent_iterate_memory_pools",
            )?,
            intercept_create: amd.needed(
                offset!(amd, AmdExtTable, hsa_amd_queue_intercept_create_fn),
                "hsa_amd_queue_intercept_create",
            )?,
            intercept_register: amd.needed(
                offset!(amd, AmdExtTable, hsa_amd_queue_intercept_register_fn),
                "hsa_amd_queue_intercept_register",
            )?,
            async_function: amd.needed(
                offset!(amd, AmdExtTable, hsa_amd_async_function_fn),
                "hsa_amd_async_function",
            )?,
            system_get_info: core.optional(
                Some(offset!(core, CoreApiTable, hsa_system_get_info_fn)),
                "hsa_system_get_info",
            ),
            allow_access: amd.optional(
                Some(offset!(amd, AmdExtTable, hsa_amd_agents_allow_access_fn)),
                "hsa_amd_agents_allow_access",
            ),
        })
    }
}

/// The module-variable entries, all or none.
///
/// # Safety
///
/// 1. The core table is readable for its `minor_id` bytes.
unsafe fn loader_slots(core: &Sub) -> Result<LoaderSlots, TableError> {
    // SAFETY: (every call) the caller's item 1; `needed` checks each offset against the size.
    unsafe {
        Ok(LoaderSlots {
            get_extension_table: core.needed(
                offset!(core, CoreApiTable, hsa_system_get_major_extension_table_fn),
                "hsa_system_get_major_extension_table",
            )?,
            iterate_agent_symbols: core.needed(
                offset!(core, CoreApiTable, hsa_executable_iterate_agent_symbols_fn),
                "hsa_executable_iterate_agent_symbols",
            )?,
            symbol_get_info: core.needed(
                offset!(core, CoreApiTable, hsa_executable_symbol_get_info_fn),
                "hsa_executable_symbol_get_info",
            )?,
        })
    }
}
