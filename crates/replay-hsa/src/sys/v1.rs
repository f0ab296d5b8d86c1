//! API tables of **major 1**: root 1, core 1, AMD extension 1, as in Debian's
//! `libhsa-runtime-dev` (ROCm 5.2, `hsa/hsa_api_trace.h`). Field order and names are those of
//! that header; the layout test (`tests/layout_major1.rs`) compiles a program against the
//! installed header and compares every size and offset with these structs.
//!
//! Major 1 has no virtual-memory entries and no engine-specific copy: those appear in major 2.

use std::ffi::c_void;

use super::*;

/// `HsaApiTable` of major 1: the version, then the sub-tables.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HsaApiTable {
    pub version: ApiTableVersion,
    pub core_: *mut CoreApiTable,
    pub amd_ext_: *mut AmdExtTable,
    /// `FinalizerExtTable*`, never touched.
    pub finalizer_ext_: *mut c_void,
    /// `ImageExtTable*`, never touched.
    pub image_ext_: *mut c_void,
}

core_api_table! {
    /// `CoreApiTable` of major 1.
}

api_table! {
    /// `AmdExtTable` of major 1.
    pub struct AmdExtTable {
        hsa_amd_coherency_get_type_fn: Entry,
        hsa_amd_coherency_set_type_fn: Entry,
        hsa_amd_profiling_set_profiler_enabled_fn: Entry,
        hsa_amd_profiling_async_copy_enable_fn: Entry,
        hsa_amd_profiling_get_dispatch_time_fn: Entry,
        hsa_amd_profiling_get_async_copy_time_fn: Entry,
        hsa_amd_profiling_convert_tick_to_system_domain_fn: Entry,
        hsa_amd_signal_async_handler_fn: Entry,
        hsa_amd_async_function_fn: Entry,
        hsa_amd_signal_wait_any_fn: Entry,
        hsa_amd_queue_cu_set_mask_fn: Entry,
        hsa_amd_memory_pool_get_info_fn: Option<PoolGetInfoFn>,
        hsa_amd_agent_iterate_memory_pools_fn: Entry,
        hsa_amd_memory_pool_allocate_fn: Option<PoolAllocateFn>,
        hsa_amd_memory_pool_free_fn: Option<PoolFreeFn>,
        hsa_amd_memory_async_copy_fn: Option<AsyncCopyFn>,
        hsa_amd_agent_memory_pool_get_info_fn: Entry,
        hsa_amd_agents_allow_access_fn: Entry,
        hsa_amd_memory_pool_can_migrate_fn: Entry,
        hsa_amd_memory_migrate_fn: Entry,
        hsa_amd_memory_lock_fn: Option<MemoryLockFn>,
        hsa_amd_memory_unlock_fn: Option<MemoryUnlockFn>,
        hsa_amd_memory_fill_fn: Option<MemoryFillFn>,
        hsa_amd_interop_map_buffer_fn: Entry,
        hsa_amd_interop_unmap_buffer_fn: Entry,
        hsa_amd_image_create_fn: Entry,
        hsa_amd_pointer_info_fn: Option<PointerInfoFn>,
        hsa_amd_pointer_info_set_userdata_fn: Entry,
        hsa_amd_ipc_memory_create_fn: Option<IpcMemoryCreateFn>,
        hsa_amd_ipc_memory_attach_fn: Option<IpcMemoryAttachFn>,
        hsa_amd_ipc_memory_detach_fn: Option<IpcMemoryDetachFn>,
        hsa_amd_signal_create_fn: Entry,
        hsa_amd_ipc_signal_create_fn: Entry,
        hsa_amd_ipc_signal_attach_fn: Entry,
        hsa_amd_register_system_event_handler_fn: Entry,
        hsa_amd_queue_intercept_create_fn: Entry,
        hsa_amd_queue_intercept_register_fn: Entry,
        hsa_amd_queue_set_priority_fn: Entry,
        hsa_amd_memory_async_copy_rect_fn: Option<AsyncCopyRectFn>,
        hsa_amd_runtime_queue_create_register_fn: Entry,
        hsa_amd_memory_lock_to_pool_fn: Option<MemoryLockToPoolFn>,
        hsa_amd_register_deallocation_callback_fn: Entry,
        hsa_amd_deregister_deallocation_callback_fn: Entry,
        hsa_amd_signal_value_pointer_fn: Entry,
        hsa_amd_svm_attributes_set_fn: Entry,
        hsa_amd_svm_attributes_get_fn: Entry,
        hsa_amd_svm_prefetch_async_fn: Entry,
        hsa_amd_queue_cu_get_mask_fn: Entry,
    }
}
