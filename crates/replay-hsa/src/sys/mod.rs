//! Raw `#[repr(C)]` bindings of the subset of HSA the backend uses (STYLE: the `sys` layer).
//!
//! Types shared by every table version live here: status codes, handles (agents, signals,
//! regions, memory pools), the queue, the 64-byte AQL kernel-dispatch and barrier-AND packets
//! and their header bits ([`aql`]), memory-pool and region info, pointer info, and the API table's
//! version header. The API tables themselves are bound **per major version** ([`v1`], [`v2`]),
//! because a major change moves entries (SPEC §9.1).
//!
//! Names follow the C headers (`hsa.h`, `hsa_ext_amd.h`, `hsa_api_trace.h`), so a reader can
//! compare them side by side; enumerations are plain integers because C may store any value
//! there. Facts come from the runtime's public headers: Debian's `libhsa-runtime-dev` (ROCm
//! 5.2, major 1, layout-tested in CI against the installed headers) and the current header of
//! the runtime's public source (ROCm's `rocr-runtime`, `hsa_api_trace.h` and
//! `hsa_api_trace_version.h`), whose order is pinned by a test.

#![allow(non_camel_case_types, non_snake_case, missing_docs)]

use std::ffi::c_void;
use std::fmt;

pub mod aql;
pub mod v1;
pub mod v2;

/// `hsa_status_t`.
pub type hsa_status_t = u32;
pub const HSA_STATUS_SUCCESS: hsa_status_t = 0x0;
pub const HSA_STATUS_INFO_BREAK: hsa_status_t = 0x1;
pub const HSA_STATUS_ERROR: hsa_status_t = 0x1000;
pub const HSA_STATUS_ERROR_INVALID_ARGUMENT: hsa_status_t = 0x1001;
pub const HSA_STATUS_ERROR_INVALID_QUEUE_CREATION: hsa_status_t = 0x1002;
pub const HSA_STATUS_ERROR_INVALID_ALLOCATION: hsa_status_t = 0x1003;
pub const HSA_STATUS_ERROR_INVALID_AGENT: hsa_status_t = 0x1004;
pub const HSA_STATUS_ERROR_INVALID_REGION: hsa_status_t = 0x1005;
pub const HSA_STATUS_ERROR_INVALID_SIGNAL: hsa_status_t = 0x1006;
pub const HSA_STATUS_ERROR_INVALID_QUEUE: hsa_status_t = 0x1007;
pub const HSA_STATUS_ERROR_OUT_OF_RESOURCES: hsa_status_t = 0x1008;
pub const HSA_STATUS_ERROR_INVALID_PACKET_FORMAT: hsa_status_t = 0x1009;
pub const HSA_STATUS_ERROR_RESOURCE_FREE: hsa_status_t = 0x100A;
pub const HSA_STATUS_ERROR_NOT_INITIALIZED: hsa_status_t = 0x100B;

/// `hsa_agent_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct hsa_agent_t {
    pub handle: u64,
}

/// `hsa_signal_t`. A handle of 0 is "no signal".
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct hsa_signal_t {
    pub handle: u64,
}

/// `hsa_signal_value_t` (64-bit model).
pub type hsa_signal_value_t = i64;

/// `hsa_region_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct hsa_region_t {
    pub handle: u64,
}

/// `hsa_amd_memory_pool_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct hsa_amd_memory_pool_t {
    pub handle: u64,
}

/// `hsa_amd_vmem_alloc_handle_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct hsa_amd_vmem_alloc_handle_t {
    pub handle: u64,
}

/// `hsa_access_permission_t`: none, read-only, write-only, read-write.
pub type hsa_access_permission_t = u32;
pub const HSA_ACCESS_PERMISSION_NONE: hsa_access_permission_t = 0;
pub const HSA_ACCESS_PERMISSION_RO: hsa_access_permission_t = 1;
pub const HSA_ACCESS_PERMISSION_WO: hsa_access_permission_t = 2;
pub const HSA_ACCESS_PERMISSION_RW: hsa_access_permission_t = 3;

/// `hsa_amd_memory_access_desc_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct hsa_amd_memory_access_desc_t {
    pub permissions: hsa_access_permission_t,
    pub agent_handle: hsa_agent_t,
}

/// `hsa_agent_info_t` (subset).
pub type hsa_agent_info_t = u32;
pub const HSA_AGENT_INFO_DEVICE: hsa_agent_info_t = 17;
/// `HSA_AMD_AGENT_INFO_MEMORY_AVAIL` (`uint64_t`): bytes free across the agent's global pools
/// (not in Debian's ROCm 5.2 headers; an older runtime answers an error).
pub const HSA_AMD_AGENT_INFO_MEMORY_AVAIL: hsa_agent_info_t = 0xA015;

/// `hsa_device_type_t`.
pub type hsa_device_type_t = u32;
pub const HSA_DEVICE_TYPE_CPU: hsa_device_type_t = 0;
pub const HSA_DEVICE_TYPE_GPU: hsa_device_type_t = 1;
pub const HSA_DEVICE_TYPE_DSP: hsa_device_type_t = 2;

/// `hsa_region_info_t` (subset) and its values.
pub type hsa_region_info_t = u32;
pub const HSA_REGION_INFO_SEGMENT: hsa_region_info_t = 0;
pub const HSA_REGION_INFO_GLOBAL_FLAGS: hsa_region_info_t = 1;
/// `hsa_region_segment_t`.
pub type hsa_region_segment_t = u32;
pub const HSA_REGION_SEGMENT_GLOBAL: hsa_region_segment_t = 0;
pub const HSA_REGION_SEGMENT_READONLY: hsa_region_segment_t = 1;
pub const HSA_REGION_SEGMENT_PRIVATE: hsa_region_segment_t = 2;
pub const HSA_REGION_SEGMENT_GROUP: hsa_region_segment_t = 3;
pub const HSA_REGION_SEGMENT_KERNARG: hsa_region_segment_t = 4;
/// `hsa_region_global_flag_t` bits.
pub const HSA_REGION_GLOBAL_FLAG_KERNARG: u32 = 1;
pub const HSA_REGION_GLOBAL_FLAG_FINE_GRAINED: u32 = 2;
pub const HSA_REGION_GLOBAL_FLAG_COARSE_GRAINED: u32 = 4;

/// `hsa_amd_memory_pool_info_t` (subset).
pub type hsa_amd_memory_pool_info_t = u32;
pub const HSA_AMD_MEMORY_POOL_INFO_SEGMENT: hsa_amd_memory_pool_info_t = 0;
pub const HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS: hsa_amd_memory_pool_info_t = 1;
pub const HSA_AMD_MEMORY_POOL_INFO_SIZE: hsa_amd_memory_pool_info_t = 2;
pub const HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED: hsa_amd_memory_pool_info_t = 5;
/// `hsa_amd_segment_t`.
pub type hsa_amd_segment_t = u32;
pub const HSA_AMD_SEGMENT_GLOBAL: hsa_amd_segment_t = 0;
pub const HSA_AMD_SEGMENT_READONLY: hsa_amd_segment_t = 1;
pub const HSA_AMD_SEGMENT_PRIVATE: hsa_amd_segment_t = 2;
pub const HSA_AMD_SEGMENT_GROUP: hsa_amd_segment_t = 3;
/// `hsa_amd_memory_pool_global_flag_t` bits.
pub const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT: u32 = 1;
pub const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED: u32 = 2;
pub const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED: u32 = 4;
/// Current headers only; absent from major 1.
pub const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_EXTENDED_SCOPE_FINE_GRAINED: u32 = 8;
/// `hsa_amd_memory_pool_flag_t`: the `flags` argument of `hsa_amd_memory_pool_allocate`.
/// Runtime kernarg pools and tools' buffers carry the executable flag.
pub const HSA_AMD_MEMORY_POOL_STANDARD_FLAG: u32 = 0;
pub const HSA_AMD_MEMORY_POOL_PCIE_FLAG: u32 = 1 << 0;
pub const HSA_AMD_MEMORY_POOL_CONTIGUOUS_FLAG: u32 = 1 << 1;
pub const HSA_AMD_MEMORY_POOL_EXECUTABLE_FLAG: u32 = 1 << 2;

/// `hsa_amd_pointer_type_t`.
pub type hsa_amd_pointer_type_t = u32;
pub const HSA_EXT_POINTER_TYPE_UNKNOWN: hsa_amd_pointer_type_t = 0;
pub const HSA_EXT_POINTER_TYPE_HSA: hsa_amd_pointer_type_t = 1;
pub const HSA_EXT_POINTER_TYPE_LOCKED: hsa_amd_pointer_type_t = 2;
pub const HSA_EXT_POINTER_TYPE_GRAPHICS: hsa_amd_pointer_type_t = 3;
pub const HSA_EXT_POINTER_TYPE_IPC: hsa_amd_pointer_type_t = 4;
/// Current headers only.
pub const HSA_EXT_POINTER_TYPE_RESERVED_ADDR: hsa_amd_pointer_type_t = 5;
/// Current headers only: a virtual-memory mapping (`hsa_amd_vmem_map`).
pub const HSA_EXT_POINTER_TYPE_HSA_VMEM: hsa_amd_pointer_type_t = 6;

/// `hsa_amd_pointer_info_t` as of major 1. Later runtimes append fields; the `size` field
/// versions the struct, so passing this size is always accepted.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hsa_amd_pointer_info_t {
    pub size: u32,
    pub type_: hsa_amd_pointer_type_t,
    pub agentBaseAddress: *mut c_void,
    pub hostBaseAddress: *mut c_void,
    pub sizeInBytes: usize,
    pub userData: *mut c_void,
    pub agentOwner: hsa_agent_t,
    pub global_flags: u32,
}

impl Default for hsa_amd_pointer_info_t {
    fn default() -> Self {
        Self {
            size: std::mem::size_of::<Self>() as u32,
            type_: HSA_EXT_POINTER_TYPE_UNKNOWN,
            agentBaseAddress: std::ptr::null_mut(),
            hostBaseAddress: std::ptr::null_mut(),
            sizeInBytes: 0,
            userData: std::ptr::null_mut(),
            agentOwner: hsa_agent_t::default(),
            global_flags: 0,
        }
    }
}

/// `hsa_queue_type32_t`.
pub type hsa_queue_type32_t = u32;

/// `hsa_queue_t` (64-bit little-endian model: `base_address` is a plain pointer).
#[repr(C)]
#[derive(Debug)]
pub struct hsa_queue_t {
    pub type_: hsa_queue_type32_t,
    pub features: u32,
    pub base_address: *mut c_void,
    pub doorbell_signal: hsa_signal_t,
    pub size: u32,
    pub reserved1: u32,
    pub id: u64,
}

/// `hsa_packet_type_t`: the low byte of an AQL header.
pub const HSA_PACKET_TYPE_VENDOR_SPECIFIC: u16 = 0;
pub const HSA_PACKET_TYPE_INVALID: u16 = 1;
pub const HSA_PACKET_TYPE_KERNEL_DISPATCH: u16 = 2;
pub const HSA_PACKET_TYPE_BARRIER_AND: u16 = 3;
pub const HSA_PACKET_TYPE_AGENT_DISPATCH: u16 = 4;
pub const HSA_PACKET_TYPE_BARRIER_OR: u16 = 5;
/// `hsa_packet_header_t`: bit offsets in the 16-bit header.
pub const HSA_PACKET_HEADER_TYPE: u16 = 0;
pub const HSA_PACKET_HEADER_BARRIER: u16 = 8;
pub const HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE: u16 = 9;
pub const HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE: u16 = 11;
/// `hsa_packet_header_width_t`.
pub const HSA_PACKET_HEADER_WIDTH_TYPE: u16 = 8;
pub const HSA_PACKET_HEADER_WIDTH_BARRIER: u16 = 1;
pub const HSA_PACKET_HEADER_WIDTH_SCACQUIRE_FENCE_SCOPE: u16 = 2;
pub const HSA_PACKET_HEADER_WIDTH_SCRELEASE_FENCE_SCOPE: u16 = 2;
/// `hsa_fence_scope_t`.
pub const HSA_FENCE_SCOPE_NONE: u16 = 0;
pub const HSA_FENCE_SCOPE_AGENT: u16 = 1;
pub const HSA_FENCE_SCOPE_SYSTEM: u16 = 2;

/// `hsa_kernel_dispatch_packet_t` (64 bytes).
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, Default)]
pub struct hsa_kernel_dispatch_packet_t {
    pub header: u16,
    pub setup: u16,
    pub workgroup_size_x: u16,
    pub workgroup_size_y: u16,
    pub workgroup_size_z: u16,
    pub reserved0: u16,
    pub grid_size_x: u32,
    pub grid_size_y: u32,
    pub grid_size_z: u32,
    pub private_segment_size: u32,
    pub group_segment_size: u32,
    pub kernel_object: u64,
    /// `void*` in C (64-bit model), kept as an address.
    pub kernarg_address: u64,
    pub reserved2: u64,
    pub completion_signal: hsa_signal_t,
}

/// `hsa_barrier_and_packet_t` (64 bytes).
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, Default)]
pub struct hsa_barrier_and_packet_t {
    pub header: u16,
    pub reserved0: u16,
    pub reserved1: u32,
    pub dep_signal: [hsa_signal_t; 5],
    pub reserved2: u64,
    pub completion_signal: hsa_signal_t,
}

/// `ApiTableVersion`: the first member of every API table. `minor_id` is the table's size in
/// bytes, so it tells which entries exist.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApiTableVersion {
    pub major_id: u32,
    pub minor_id: u32,
    pub step_id: u32,
    pub reserved: u32,
}

/// An entry the backend never calls: only its slot (pointer-sized, nullable) matters.
pub type Entry = Option<unsafe extern "C" fn()>;

// Signatures of the entries the backend calls or wraps (identical in every bound major).
pub type AgentGetInfoFn =
    unsafe extern "C" fn(hsa_agent_t, hsa_agent_info_t, *mut c_void) -> hsa_status_t;
pub type RegionGetInfoFn =
    unsafe extern "C" fn(hsa_region_t, hsa_region_info_t, *mut c_void) -> hsa_status_t;
pub type MemoryAllocateFn =
    unsafe extern "C" fn(hsa_region_t, usize, *mut *mut c_void) -> hsa_status_t;
pub type MemoryFreeFn = unsafe extern "C" fn(*mut c_void) -> hsa_status_t;
pub type SignalLoadFn = unsafe extern "C" fn(hsa_signal_t) -> hsa_signal_value_t;
pub type PoolGetInfoFn = unsafe extern "C" fn(
    hsa_amd_memory_pool_t,
    hsa_amd_memory_pool_info_t,
    *mut c_void,
) -> hsa_status_t;
pub type PoolAllocateFn =
    unsafe extern "C" fn(hsa_amd_memory_pool_t, usize, u32, *mut *mut c_void) -> hsa_status_t;
pub type PoolFreeFn = unsafe extern "C" fn(*mut c_void) -> hsa_status_t;
pub type PointerInfoFn = unsafe extern "C" fn(
    *const c_void,
    *mut hsa_amd_pointer_info_t,
    Option<unsafe extern "C" fn(usize) -> *mut c_void>,
    *mut u32,
    *mut *mut hsa_agent_t,
) -> hsa_status_t;
pub type AsyncCopyFn = unsafe extern "C" fn(
    *mut c_void,
    hsa_agent_t,
    *const c_void,
    hsa_agent_t,
    usize,
    u32,
    *const hsa_signal_t,
    hsa_signal_t,
) -> hsa_status_t;
/// Current major only (the entry the AMD extension table of major 2 inserts).
pub type AsyncCopyOnEngineFn = unsafe extern "C" fn(
    *mut c_void,
    hsa_agent_t,
    *const c_void,
    hsa_agent_t,
    usize,
    u32,
    *const hsa_signal_t,
    hsa_signal_t,
    u32,
    bool,
) -> hsa_status_t;
/// `hsa_amd_memory_async_copy_rect`: the pitched-pointer and dimension structs are passed
/// through untouched, so they stay opaque here.
pub type AsyncCopyRectFn = unsafe extern "C" fn(
    *const c_void,
    *const c_void,
    *const c_void,
    *const c_void,
    *const c_void,
    hsa_agent_t,
    u32,
    u32,
    *const hsa_signal_t,
    hsa_signal_t,
) -> hsa_status_t;
pub type VmemMapFn = unsafe extern "C" fn(
    *mut c_void,
    usize,
    usize,
    hsa_amd_vmem_alloc_handle_t,
    u64,
) -> hsa_status_t;
pub type VmemUnmapFn = unsafe extern "C" fn(*mut c_void, usize) -> hsa_status_t;
/// `hsa_amd_vmem_address_reserve(void** va, size_t size, uint64_t address, uint64_t flags)`.
pub type VmemAddressReserveFn =
    unsafe extern "C" fn(*mut *mut c_void, usize, u64, u64) -> hsa_status_t;
/// `hsa_amd_vmem_address_reserve_align(void** va, size_t size, uint64_t address, uint64_t
/// alignment, uint64_t flags)`.
pub type VmemAddressReserveAlignFn =
    unsafe extern "C" fn(*mut *mut c_void, usize, u64, u64, u64) -> hsa_status_t;
/// `hsa_amd_vmem_address_free(void* va, size_t size)`.
pub type VmemAddressFreeFn = unsafe extern "C" fn(*mut c_void, usize) -> hsa_status_t;
/// `hsa_amd_vmem_handle_create(pool, size, hsa_amd_memory_type_t type, uint64_t flags,
/// hsa_amd_vmem_alloc_handle_t* handle)`.
pub type VmemHandleCreateFn = unsafe extern "C" fn(
    hsa_amd_memory_pool_t,
    usize,
    u32,
    u64,
    *mut hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t;
/// `hsa_amd_vmem_handle_release(hsa_amd_vmem_alloc_handle_t)`.
pub type VmemHandleReleaseFn = unsafe extern "C" fn(hsa_amd_vmem_alloc_handle_t) -> hsa_status_t;
/// `hsa_amd_vmem_set_access(void* va, size_t size, const hsa_amd_memory_access_desc_t* desc,
/// size_t desc_cnt)`.
pub type VmemSetAccessFn = unsafe extern "C" fn(
    *mut c_void,
    usize,
    *const hsa_amd_memory_access_desc_t,
    usize,
) -> hsa_status_t;
/// `hsa_amd_vmem_import_shareable_handle(int dmabuf_fd, hsa_amd_vmem_alloc_handle_t* handle)`.
pub type VmemImportShareableFn =
    unsafe extern "C" fn(i32, *mut hsa_amd_vmem_alloc_handle_t) -> hsa_status_t;
/// `hsa_amd_memory_lock(host_ptr, size, agents, num_agent, agent_ptr)`: `agents` NULL and
/// `num_agent` 0 give every agent access.
pub type MemoryLockFn = unsafe extern "C" fn(
    *mut c_void,
    usize,
    *mut hsa_agent_t,
    i32,
    *mut *mut c_void,
) -> hsa_status_t;
/// `hsa_amd_memory_lock_to_pool(host_ptr, size, agents, num_agent, pool, flags, agent_ptr)`.
pub type MemoryLockToPoolFn = unsafe extern "C" fn(
    *mut c_void,
    usize,
    *mut hsa_agent_t,
    i32,
    hsa_amd_memory_pool_t,
    u32,
    *mut *mut c_void,
) -> hsa_status_t;
/// `hsa_amd_memory_unlock(host_ptr)`.
pub type MemoryUnlockFn = unsafe extern "C" fn(*mut c_void) -> hsa_status_t;
/// `hsa_amd_memory_fill(ptr, value, count)`: `count` 32-bit words (synchronous).
pub type MemoryFillFn = unsafe extern "C" fn(*mut c_void, u32, usize) -> hsa_status_t;
/// `hsa_amd_ipc_memory_t`: an opaque handle of eight 32-bit words.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct hsa_amd_ipc_memory_t {
    pub handle: [u32; 8],
}
/// `hsa_amd_ipc_memory_create(ptr, len, handle)`.
pub type IpcMemoryCreateFn =
    unsafe extern "C" fn(*mut c_void, usize, *mut hsa_amd_ipc_memory_t) -> hsa_status_t;
/// `hsa_amd_ipc_memory_attach(handle, len, num_agents, mapping_agents, mapped_ptr)`.
pub type IpcMemoryAttachFn = unsafe extern "C" fn(
    *const hsa_amd_ipc_memory_t,
    usize,
    u32,
    *const hsa_agent_t,
    *mut *mut c_void,
) -> hsa_status_t;
/// `hsa_amd_ipc_memory_detach(mapped_ptr)`.
pub type IpcMemoryDetachFn = unsafe extern "C" fn(*mut c_void) -> hsa_status_t;

/// Defines an API table: `version` first, then one pointer-sized slot per entry, in order.
/// Also generates `ENTRY_NAMES` (the header's field names, in order) and
/// `entry_offsets()`, which the layout and order tests compare with the headers.
macro_rules! api_table {
    ($(#[$meta:meta])* pub struct $name:ident { $($field:ident : $ty:ty,)* }) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy)]
        pub struct $name {
            pub version: $crate::sys::ApiTableVersion,
            $(pub $field: $ty,)*
        }

        impl $name {
            /// The entries' field names as the header spells them (`<function>_fn`), in order.
            pub const ENTRY_NAMES: &'static [&'static str] = &[$(stringify!($field)),*];

            /// `(field name, byte offset)` of every entry, in order.
            pub fn entry_offsets() -> Vec<(&'static str, usize)> {
                vec![$((stringify!($field), std::mem::offset_of!($name, $field))),*]
            }

            /// A table with `version` and every entry empty.
            pub fn empty(version: $crate::sys::ApiTableVersion) -> Self {
                Self { version, $($field: None,)* }
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("version", &self.version)
                    .finish_non_exhaustive()
            }
        }
    };
}
pub(crate) use api_table;

/// The core table's entries, identical in order in every bound major: `core_api_table!` defines
/// `CoreApiTable` with them through [`api_table!`], once per major module.
macro_rules! core_api_table {
    ($(#[$meta:meta])*) => {
        $crate::sys::api_table! {
            $(#[$meta])*
            pub struct CoreApiTable {
                hsa_init_fn: Entry,
                hsa_shut_down_fn: Entry,
                hsa_system_get_info_fn: Entry,
                hsa_system_extension_supported_fn: Entry,
                hsa_system_get_extension_table_fn: Entry,
                hsa_iterate_agents_fn: Entry,
                hsa_agent_get_info_fn: Option<AgentGetInfoFn>,
                hsa_queue_create_fn: Entry,
                hsa_soft_queue_create_fn: Entry,
                hsa_queue_destroy_fn: Entry,
                hsa_queue_inactivate_fn: Entry,
                hsa_queue_load_read_index_scacquire_fn: Entry,
                hsa_queue_load_read_index_relaxed_fn: Entry,
                hsa_queue_load_write_index_scacquire_fn: Entry,
                hsa_queue_load_write_index_relaxed_fn: Entry,
                hsa_queue_store_write_index_relaxed_fn: Entry,
                hsa_queue_store_write_index_screlease_fn: Entry,
                hsa_queue_cas_write_index_scacq_screl_fn: Entry,
                hsa_queue_cas_write_index_scacquire_fn: Entry,
                hsa_queue_cas_write_index_relaxed_fn: Entry,
                hsa_queue_cas_write_index_screlease_fn: Entry,
                hsa_queue_add_write_index_scacq_screl_fn: Entry,
                hsa_queue_add_write_index_scacquire_fn: Entry,
                hsa_queue_add_write_index_relaxed_fn: Entry,
                hsa_queue_add_write_index_screlease_fn: Entry,
                hsa_queue_store_read_index_relaxed_fn: Entry,
                hsa_queue_store_read_index_screlease_fn: Entry,
                hsa_agent_iterate_regions_fn: Entry,
                hsa_region_get_info_fn: Option<RegionGetInfoFn>,
                hsa_agent_get_exception_policies_fn: Entry,
                hsa_agent_extension_supported_fn: Entry,
                hsa_memory_register_fn: Entry,
                hsa_memory_deregister_fn: Entry,
                hsa_memory_allocate_fn: Option<MemoryAllocateFn>,
                hsa_memory_free_fn: Option<MemoryFreeFn>,
                hsa_memory_copy_fn: Entry,
                hsa_memory_assign_agent_fn: Entry,
                hsa_signal_create_fn: Entry,
                hsa_signal_destroy_fn: Entry,
                hsa_signal_load_relaxed_fn: Option<SignalLoadFn>,
                hsa_signal_load_scacquire_fn: Entry,
                hsa_signal_store_relaxed_fn: Entry,
                hsa_signal_store_screlease_fn: Entry,
                hsa_signal_wait_relaxed_fn: Entry,
                hsa_signal_wait_scacquire_fn: Entry,
                hsa_signal_and_relaxed_fn: Entry,
                hsa_signal_and_scacquire_fn: Entry,
                hsa_signal_and_screlease_fn: Entry,
                hsa_signal_and_scacq_screl_fn: Entry,
                hsa_signal_or_relaxed_fn: Entry,
                hsa_signal_or_scacquire_fn: Entry,
                hsa_signal_or_screlease_fn: Entry,
                hsa_signal_or_scacq_screl_fn: Entry,
                hsa_signal_xor_relaxed_fn: Entry,
                hsa_signal_xor_scacquire_fn: Entry,
                hsa_signal_xor_screlease_fn: Entry,
                hsa_signal_xor_scacq_screl_fn: Entry,
                hsa_signal_exchange_relaxed_fn: Entry,
                hsa_signal_exchange_scacquire_fn: Entry,
                hsa_signal_exchange_screlease_fn: Entry,
                hsa_signal_exchange_scacq_screl_fn: Entry,
                hsa_signal_add_relaxed_fn: Entry,
                hsa_signal_add_scacquire_fn: Entry,
                hsa_signal_add_screlease_fn: Entry,
                hsa_signal_add_scacq_screl_fn: Entry,
                hsa_signal_subtract_relaxed_fn: Entry,
                hsa_signal_subtract_scacquire_fn: Entry,
                hsa_signal_subtract_screlease_fn: Entry,
                hsa_signal_subtract_scacq_screl_fn: Entry,
                hsa_signal_cas_relaxed_fn: Entry,
                hsa_signal_cas_scacquire_fn: Entry,
                hsa_signal_cas_screlease_fn: Entry,
                hsa_signal_cas_scacq_screl_fn: Entry,
                hsa_isa_from_name_fn: Entry,
                hsa_isa_get_info_fn: Entry,
                hsa_isa_compatible_fn: Entry,
                hsa_code_object_serialize_fn: Entry,
                hsa_code_object_deserialize_fn: Entry,
                hsa_code_object_destroy_fn: Entry,
                hsa_code_object_get_info_fn: Entry,
                hsa_code_object_get_symbol_fn: Entry,
                hsa_code_symbol_get_info_fn: Entry,
                hsa_code_object_iterate_symbols_fn: Entry,
                hsa_executable_create_fn: Entry,
                hsa_executable_destroy_fn: Entry,
                hsa_executable_load_code_object_fn: Entry,
                hsa_executable_freeze_fn: Entry,
                hsa_executable_get_info_fn: Entry,
                hsa_executable_global_variable_define_fn: Entry,
                hsa_executable_agent_global_variable_define_fn: Entry,
                hsa_executable_readonly_variable_define_fn: Entry,
                hsa_executable_validate_fn: Entry,
                hsa_executable_get_symbol_fn: Entry,
                hsa_executable_symbol_get_info_fn: Entry,
                hsa_executable_iterate_symbols_fn: Entry,
                hsa_status_string_fn: Entry,
                hsa_extension_get_name_fn: Entry,
                hsa_system_major_extension_supported_fn: Entry,
                hsa_system_get_major_extension_table_fn: Entry,
                hsa_agent_major_extension_supported_fn: Entry,
                hsa_cache_get_info_fn: Entry,
                hsa_agent_iterate_caches_fn: Entry,
                hsa_signal_silent_store_relaxed_fn: Entry,
                hsa_signal_silent_store_screlease_fn: Entry,
                hsa_signal_group_create_fn: Entry,
                hsa_signal_group_destroy_fn: Entry,
                hsa_signal_group_wait_any_scacquire_fn: Entry,
                hsa_signal_group_wait_any_relaxed_fn: Entry,
                hsa_agent_iterate_isas_fn: Entry,
                hsa_isa_get_info_alt_fn: Entry,
                hsa_isa_get_exception_policies_fn: Entry,
                hsa_isa_get_round_method_fn: Entry,
                hsa_wavefront_get_info_fn: Entry,
                hsa_isa_iterate_wavefronts_fn: Entry,
                hsa_code_object_get_symbol_from_name_fn: Entry,
                hsa_code_object_reader_create_from_file_fn: Entry,
                hsa_code_object_reader_create_from_memory_fn: Entry,
                hsa_code_object_reader_destroy_fn: Entry,
                hsa_executable_create_alt_fn: Entry,
                hsa_executable_load_program_code_object_fn: Entry,
                hsa_executable_load_agent_code_object_fn: Entry,
                hsa_executable_validate_alt_fn: Entry,
                hsa_executable_get_symbol_by_name_fn: Entry,
                hsa_executable_iterate_agent_symbols_fn: Entry,
                hsa_executable_iterate_program_symbols_fn: Entry,
            }
        }
    };
}
pub(crate) use core_api_table;

impl fmt::Display for ApiTableVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "major {} size {} step {}",
            self.major_id, self.minor_id, self.step_id
        )
    }
}

// Queue, signal and interception entries (stage 2). Signatures as in `hsa.h` and
// `hsa_ext_amd.h`, identical in every bound major.

/// `hsa_queue_error_callback` as `hsa_queue_create` takes it.
pub type QueueErrorCallback =
    Option<unsafe extern "C" fn(hsa_status_t, *mut hsa_queue_t, *mut c_void)>;
/// `hsa_queue_create` and `hsa_amd_queue_intercept_create` (same parameters).
pub type QueueCreateFn = unsafe extern "C" fn(
    hsa_agent_t,
    u32,
    hsa_queue_type32_t,
    QueueErrorCallback,
    *mut c_void,
    u32,
    u32,
    *mut *mut hsa_queue_t,
) -> hsa_status_t;
pub type QueueDestroyFn = unsafe extern "C" fn(*mut hsa_queue_t) -> hsa_status_t;
pub type QueueLoadIndexFn = unsafe extern "C" fn(*const hsa_queue_t) -> u64;
pub type QueueAddIndexFn = unsafe extern "C" fn(*const hsa_queue_t, u64) -> u64;
/// `hsa_queue_cas_write_index_*`: `(queue, expected, value)`, the value found.
pub type QueueCasIndexFn = unsafe extern "C" fn(*const hsa_queue_t, u64, u64) -> u64;
pub type SignalCreateFn = unsafe extern "C" fn(
    hsa_signal_value_t,
    u32,
    *const hsa_agent_t,
    *mut hsa_signal_t,
) -> hsa_status_t;
pub type SignalDestroyFn = unsafe extern "C" fn(hsa_signal_t) -> hsa_status_t;
/// `hsa_signal_store_*`, `hsa_signal_add_*`, `hsa_signal_subtract_*`.
pub type SignalUpdateFn = unsafe extern "C" fn(hsa_signal_t, hsa_signal_value_t);
/// `hsa_signal_wait_*(signal, condition, compare, timeout_hint, wait_state)`.
pub type SignalWaitFn =
    unsafe extern "C" fn(hsa_signal_t, u32, hsa_signal_value_t, u64, u32) -> hsa_signal_value_t;
/// `hsa_signal_condition_t`: `HSA_SIGNAL_CONDITION_EQ`.
pub const HSA_SIGNAL_CONDITION_EQ: u32 = 0;
/// `hsa_wait_state_t`: `HSA_WAIT_STATE_BLOCKED`.
pub const HSA_WAIT_STATE_BLOCKED: u32 = 0;
pub type MemoryCopyFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> hsa_status_t;
/// `hsa_system_get_info(attribute, value)`.
pub type SystemGetInfoFn = unsafe extern "C" fn(u32, *mut c_void) -> hsa_status_t;
/// `HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY` (`uint64_t`, Hz): the unit of signal-wait timeout
/// hints.
pub const HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY: u32 = 3;
/// `hsa_amd_agents_allow_access(num_agents, agents, flags, ptr)`.
pub type AllowAccessFn =
    unsafe extern "C" fn(u32, *const hsa_agent_t, *const u32, *const c_void) -> hsa_status_t;
pub type AgentIterCallback = Option<unsafe extern "C" fn(hsa_agent_t, *mut c_void) -> hsa_status_t>;
pub type IterateAgentsFn = unsafe extern "C" fn(AgentIterCallback, *mut c_void) -> hsa_status_t;
pub type PoolIterCallback =
    Option<unsafe extern "C" fn(hsa_amd_memory_pool_t, *mut c_void) -> hsa_status_t>;
pub type IteratePoolsFn =
    unsafe extern "C" fn(hsa_agent_t, PoolIterCallback, *mut c_void) -> hsa_status_t;
/// `hsa_amd_queue_intercept_packet_writer`.
pub type PacketWriter = Option<unsafe extern "C" fn(*const c_void, u64)>;
/// `hsa_amd_queue_intercept_handler`.
pub type InterceptHandler =
    Option<unsafe extern "C" fn(*const c_void, u64, u64, *mut c_void, PacketWriter)>;
pub type InterceptRegisterFn =
    unsafe extern "C" fn(*mut hsa_queue_t, InterceptHandler, *mut c_void) -> hsa_status_t;
pub type AsyncFunctionFn =
    unsafe extern "C" fn(Option<unsafe extern "C" fn(*mut c_void)>, *mut c_void) -> hsa_status_t;
/// `hsa_system_get_major_extension_table(extension, major, table_length, table)`.
pub type GetExtensionTableFn = unsafe extern "C" fn(u16, u16, usize, *mut c_void) -> hsa_status_t;
/// `hsa_executable_iterate_agent_symbols` callback: `(executable, agent, symbol, data)`.
pub type AgentSymbolCallback =
    Option<unsafe extern "C" fn(u64, hsa_agent_t, u64, *mut c_void) -> hsa_status_t>;
/// `hsa_executable_iterate_agent_symbols(executable, agent, callback, data)`.
pub type IterateAgentSymbolsFn =
    unsafe extern "C" fn(u64, hsa_agent_t, AgentSymbolCallback, *mut c_void) -> hsa_status_t;
/// `hsa_executable_destroy(executable)`.
pub type ExecutableDestroyFn = unsafe extern "C" fn(u64) -> hsa_status_t;
/// `hsa_executable_symbol_get_info(symbol, attribute, value)`.
pub type SymbolGetInfoFn = unsafe extern "C" fn(u64, u32, *mut c_void) -> hsa_status_t;
/// `hsa_ven_amd_loader_iterate_executables` callback: `(executable, data)`.
pub type ExecutableCallback = Option<unsafe extern "C" fn(u64, *mut c_void) -> hsa_status_t>;
/// `hsa_ven_amd_loader_iterate_executables(callback, data)`.
pub type IterateExecutablesFn =
    unsafe extern "C" fn(ExecutableCallback, *mut c_void) -> hsa_status_t;
/// `HSA_EXTENSION_AMD_LOADER`.
pub const HSA_EXTENSION_AMD_LOADER: u16 = 0x201;
/// `hsa_ven_amd_loader_executable_iterate_loaded_code_objects`.
pub type IterateLoadedCodeObjectsFn = unsafe extern "C" fn(
    u64,
    Option<unsafe extern "C" fn(u64, *mut c_void) -> hsa_status_t>,
    *mut c_void,
) -> hsa_status_t;
/// `hsa_ven_amd_loader_loaded_code_object_get_info`.
pub type LoadedCodeObjectGetInfoFn = unsafe extern "C" fn(u64, u32, *mut c_void) -> hsa_status_t;
/// Loaded code object info: its agent (`hsa_agent_t`).
pub const LOADED_CODE_OBJECT_INFO_AGENT: u32 = 2;
/// Loaded code object info: storage type (`uint32_t`: 0 none, 1 memory, 2 file).
pub const LOADED_CODE_OBJECT_INFO_STORAGE_TYPE: u32 = 3;
/// Loaded code object info: storage memory base (`uint64_t`).
pub const LOADED_CODE_OBJECT_INFO_STORAGE_MEMORY_BASE: u32 = 4;
/// Loaded code object info: storage memory size (`uint64_t`).
pub const LOADED_CODE_OBJECT_INFO_STORAGE_MEMORY_SIZE: u32 = 5;
/// Storage type: memory.
pub const LOADED_CODE_OBJECT_STORAGE_MEMORY: u32 = 1;
/// `hsa_symbol_kind_t`: `HSA_SYMBOL_KIND_VARIABLE`.
pub const HSA_SYMBOL_KIND_VARIABLE: u32 = 0;
/// `hsa_symbol_kind_t`: `HSA_SYMBOL_KIND_KERNEL`.
pub const HSA_SYMBOL_KIND_KERNEL: u32 = 1;
/// `HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT` (`uint64_t`).
pub const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT: u32 = 22;
/// `HSA_EXECUTABLE_SYMBOL_INFO_TYPE` (`hsa_symbol_kind_t`, 4 bytes).
pub const HSA_EXECUTABLE_SYMBOL_INFO_TYPE: u32 = 0;
/// `HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH` (`uint32_t`).
pub const HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH: u32 = 1;
/// `HSA_EXECUTABLE_SYMBOL_INFO_NAME` (`NAME_LENGTH` bytes, not NUL-terminated).
pub const HSA_EXECUTABLE_SYMBOL_INFO_NAME: u32 = 2;
/// `HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE` (`uint32_t`).
pub const HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE: u32 = 9;
/// `HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST` (`bool`).
pub const HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST: u32 = 10;
/// `HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS` (`uint64_t`).
pub const HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS: u32 = 21;
/// `HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE` (`uint32_t`): the argument block's
/// size in bytes, hidden arguments included.
pub const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE: u32 = 11;

/// `hsa_ven_amd_loader_1_03_pfn_t`: the AMD loader extension table (major 1, minor 3).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(missing_docs)]
pub struct LoaderTable103 {
    pub query_host_address: Entry,
    pub query_segment_descriptors: Entry,
    pub query_executable: Entry,
    pub executable_iterate_loaded_code_objects: Entry,
    pub loaded_code_object_get_info: Entry,
    pub code_object_reader_create_from_file_with_offset_size: Entry,
    pub iterate_executables: Entry,
}
