//! API tables of the **current major**: root 3, core 2, AMD extension 2.
//!
//! Field order from the current public header of the runtime's source (ROCm's
//! `rocr-runtime`, `runtime/hsa-runtime/inc/hsa_api_trace.h`, majors from
//! `hsa_api_trace_version.h`); the test `tests/order_major2.rs` pins it against that order,
//! written out there as a list of names. The core table keeps major 1's order. The AMD
//! extension table inserts `hsa_amd_memory_async_copy_on_engine` and
//! `hsa_amd_memory_copy_engine_status` after `hsa_amd_memory_async_copy`, and the three
//! `hsa_amd_spm_*` entries before `hsa_amd_queue_cu_get_mask`, so every later entry (pointer
//! info, allow-access, queue intercept, ...) sits at another offset than in major 1. Runtimes
//! of this major append entries at the end over time; `minor_id` (the size) tells which exist.

use std::ffi::c_void;

use super::*;

/// `HsaApiTable` of root major 3 (root major 2 is not bound: it is refused as unknown).
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
    /// `ToolsApiTable*`, never touched.
    pub tools_: *mut c_void,
    /// `PcSamplingExtTable*`, never touched.
    pub pc_sampling_ext_: *mut c_void,
}

core_api_table! {
    /// `CoreApiTable` of major 2 (the same entries, in the same order, as major 1).
}

api_table! {
    /// `AmdExtTable` of major 2.
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
        hsa_amd_memory_async_copy_on_engine_fn: Option<AsyncCopyOnEngineFn>,
        hsa_amd_memory_copy_engine_status_fn: Entry,
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
        hsa_amd_spm_acquire_fn: Entry,
        hsa_amd_spm_release_fn: Entry,
        hsa_amd_spm_set_dest_buffer_fn: Entry,
        hsa_amd_queue_cu_get_mask_fn: Entry,
        hsa_amd_portable_export_dmabuf_fn: Entry,
        hsa_amd_portable_close_dmabuf_fn: Entry,
        hsa_amd_vmem_address_reserve_fn: Option<VmemAddressReserveFn>,
        hsa_amd_vmem_address_free_fn: Option<VmemAddressFreeFn>,
        hsa_amd_vmem_handle_create_fn: Option<VmemHandleCreateFn>,
        hsa_amd_vmem_handle_release_fn: Option<VmemHandleReleaseFn>,
        hsa_amd_vmem_map_fn: Option<VmemMapFn>,
        hsa_amd_vmem_unmap_fn: Option<VmemUnmapFn>,
        hsa_amd_vmem_set_access_fn: Option<VmemSetAccessFn>,
        hsa_amd_vmem_get_access_fn: Entry,
        hsa_amd_vmem_export_shareable_handle_fn: Entry,
        hsa_amd_vmem_import_shareable_handle_fn: Option<VmemImportShareableFn>,
        hsa_amd_vmem_retain_alloc_handle_fn: Entry,
        hsa_amd_vmem_get_alloc_properties_from_handle_fn: Entry,
        hsa_amd_agent_set_async_scratch_limit_fn: Entry,
        hsa_amd_queue_get_info_fn: Entry,
        hsa_amd_vmem_address_reserve_align_fn: Option<VmemAddressReserveAlignFn>,
        hsa_amd_enable_logging_fn: Entry,
        hsa_amd_signal_wait_all_fn: Entry,
        hsa_amd_memory_get_preferred_copy_engine_fn: Entry,
        hsa_amd_portable_export_dmabuf_v2_fn: Entry,
        hsa_amd_ais_file_write_fn: Entry,
        hsa_amd_ais_file_read_fn: Entry,
        hsa_amd_counted_queue_acquire_fn: Entry,
        hsa_amd_counted_queue_release_fn: Entry,
        hsa_amd_memory_async_batch_copy_fn: Entry,
        hsa_amd_agent_preload_fn: Entry,
        hsa_amd_svm_discard_batch_async_fn: Entry,
        hsa_amd_signal_get_event_id_fn: Entry,
        hsa_amd_sdma_queue_create_fn: Entry,
        hsa_amd_sdma_queue_destroy_fn: Entry,
        hsa_amd_sdma_queue_get_info_fn: Entry,
        hsa_amd_sdma_queue_ring_doorbell_fn: Entry,
    }
}
