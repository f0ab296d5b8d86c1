//! Pins the order of the current major's tables (root 3, core 2, AMD extension 2) against the
//! documented order: the lists below are the entry names, in order, of the current public
//! header in the runtime's source (ROCm's `rocr-runtime`,
//! `runtime/hsa-runtime/inc/hsa_api_trace.h`; majors from `hsa_api_trace_version.h`),
//! written out by hand. A binding edit that drops, adds or moves an entry fails here, and so
//! does a binding whose offsets are not consecutive pointers.

use std::mem::{offset_of, size_of};

use replay_hsa::sys::{self, v1, v2};

/// `AmdExtTable` of AMD extension major 2, in header order (names without `_fn`).
const AMD_EXT_MAJOR2: &[&str] = &[
    "hsa_amd_coherency_get_type",
    "hsa_amd_coherency_set_type",
    "hsa_amd_profiling_set_profiler_enabled",
    "hsa_amd_profiling_async_copy_enable",
    "hsa_amd_profiling_get_dispatch_time",
    "hsa_amd_profiling_get_async_copy_time",
    "hsa_amd_profiling_convert_tick_to_system_domain",
    "hsa_amd_signal_async_handler",
    "hsa_amd_async_function",
    "hsa_amd_signal_wait_any",
    "hsa_amd_queue_cu_set_mask",
    "hsa_amd_memory_pool_get_info",
    "hsa_amd_agent_iterate_memory_pools",
    "hsa_amd_memory_pool_allocate",
    "hsa_amd_memory_pool_free",
    "hsa_amd_memory_async_copy",
    "hsa_amd_memory_async_copy_on_engine",
    "hsa_amd_memory_copy_engine_status",
    "hsa_amd_agent_memory_pool_get_info",
    "hsa_amd_agents_allow_access",
    "hsa_amd_memory_pool_can_migrate",
    "hsa_amd_memory_migrate",
    "hsa_amd_memory_lock",
    "hsa_amd_memory_unlock",
    "hsa_amd_memory_fill",
    "hsa_amd_interop_map_buffer",
    "hsa_amd_interop_unmap_buffer",
    "hsa_amd_image_create",
    "hsa_amd_pointer_info",
    "hsa_amd_pointer_info_set_userdata",
    "hsa_amd_ipc_memory_create",
    "hsa_amd_ipc_memory_attach",
    "hsa_amd_ipc_memory_detach",
    "hsa_amd_signal_create",
    "hsa_amd_ipc_signal_create",
    "hsa_amd_ipc_signal_attach",
    "hsa_amd_register_system_event_handler",
    "hsa_amd_queue_intercept_create",
    "hsa_amd_queue_intercept_register",
    "hsa_amd_queue_set_priority",
    "hsa_amd_memory_async_copy_rect",
    "hsa_amd_runtime_queue_create_register",
    "hsa_amd_memory_lock_to_pool",
    "hsa_amd_register_deallocation_callback",
    "hsa_amd_deregister_deallocation_callback",
    "hsa_amd_signal_value_pointer",
    "hsa_amd_svm_attributes_set",
    "hsa_amd_svm_attributes_get",
    "hsa_amd_svm_prefetch_async",
    "hsa_amd_spm_acquire",
    "hsa_amd_spm_release",
    "hsa_amd_spm_set_dest_buffer",
    "hsa_amd_queue_cu_get_mask",
    "hsa_amd_portable_export_dmabuf",
    "hsa_amd_portable_close_dmabuf",
    "hsa_amd_vmem_address_reserve",
    "hsa_amd_vmem_address_free",
    "hsa_amd_vmem_handle_create",
    "hsa_amd_vmem_handle_release",
    "hsa_amd_vmem_map",
    "hsa_amd_vmem_unmap",
    "hsa_amd_vmem_set_access",
    "hsa_amd_vmem_get_access",
    "hsa_amd_vmem_export_shareable_handle",
    "hsa_amd_vmem_import_shareable_handle",
    "hsa_amd_vmem_retain_alloc_handle",
    "hsa_amd_vmem_get_alloc_properties_from_handle",
    "hsa_amd_agent_set_async_scratch_limit",
    "hsa_amd_queue_get_info",
    "hsa_amd_vmem_address_reserve_align",
    "hsa_amd_enable_logging",
    "hsa_amd_signal_wait_all",
    "hsa_amd_memory_get_preferred_copy_engine",
    "hsa_amd_portable_export_dmabuf_v2",
    "hsa_amd_ais_file_write",
    "hsa_amd_ais_file_read",
    "hsa_amd_counted_queue_acquire",
    "hsa_amd_counted_queue_release",
    "hsa_amd_memory_async_batch_copy",
    "hsa_amd_agent_preload",
    "hsa_amd_svm_discard_batch_async",
    "hsa_amd_signal_get_event_id",
    "hsa_amd_sdma_queue_create",
    "hsa_amd_sdma_queue_destroy",
    "hsa_amd_sdma_queue_get_info",
    "hsa_amd_sdma_queue_ring_doorbell",
];

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|n| format!("{n}_fn")).collect()
}

fn assert_consecutive(table: &str, offsets: &[(&str, usize)]) {
    for (i, (name, off)) in offsets.iter().enumerate() {
        assert_eq!(
            *off,
            size_of::<sys::ApiTableVersion>() + i * size_of::<usize>(),
            "{table}.{name} is not at slot {i}"
        );
    }
}

#[test]
fn amd_ext_major2_follows_the_documented_order() {
    assert_eq!(v2::AmdExtTable::ENTRY_NAMES, names(AMD_EXT_MAJOR2));
    assert_consecutive("AmdExtTable", &v2::AmdExtTable::entry_offsets());
    assert_eq!(size_of::<v2::AmdExtTable>(), 16 + 8 * AMD_EXT_MAJOR2.len());
}

#[test]
fn major2_moves_amd_entries_that_major1_has_elsewhere() {
    // The inserted engine copy entries shift everything after `hsa_amd_memory_async_copy` by
    // two slots, and the SPM entries by three more before `hsa_amd_queue_cu_get_mask`.
    assert_eq!(
        offset_of!(v1::AmdExtTable, hsa_amd_memory_async_copy_fn),
        offset_of!(v2::AmdExtTable, hsa_amd_memory_async_copy_fn)
    );
    assert_eq!(
        offset_of!(v1::AmdExtTable, hsa_amd_pointer_info_fn) + 16,
        offset_of!(v2::AmdExtTable, hsa_amd_pointer_info_fn)
    );
    assert_eq!(
        offset_of!(v1::AmdExtTable, hsa_amd_queue_intercept_create_fn) + 16,
        offset_of!(v2::AmdExtTable, hsa_amd_queue_intercept_create_fn)
    );
    assert_eq!(
        offset_of!(v1::AmdExtTable, hsa_amd_queue_cu_get_mask_fn) + 40,
        offset_of!(v2::AmdExtTable, hsa_amd_queue_cu_get_mask_fn)
    );
}

#[test]
fn core_major2_keeps_major1_order_and_root3_appends_tables() {
    assert_eq!(v1::CoreApiTable::ENTRY_NAMES, v2::CoreApiTable::ENTRY_NAMES);
    assert_consecutive("CoreApiTable", &v2::CoreApiTable::entry_offsets());
    assert_eq!(v2::CoreApiTable::ENTRY_NAMES.len(), 125);
    assert_eq!(v2::CoreApiTable::ENTRY_NAMES[0], "hsa_init_fn");
    assert_eq!(
        v2::CoreApiTable::ENTRY_NAMES[124],
        "hsa_executable_iterate_program_symbols_fn"
    );
    assert_eq!(
        offset_of!(v2::HsaApiTable, core_),
        offset_of!(v1::HsaApiTable, core_)
    );
    assert_eq!(
        offset_of!(v2::HsaApiTable, amd_ext_),
        offset_of!(v1::HsaApiTable, amd_ext_)
    );
    assert_eq!(offset_of!(v2::HsaApiTable, tools_), 48);
    assert_eq!(offset_of!(v2::HsaApiTable, pc_sampling_ext_), 56);
    assert_eq!(size_of::<v2::HsaApiTable>(), 64);
}
