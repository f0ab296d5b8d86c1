//! The `extern "C"` entries of the simulated API table and the tables themselves (SPEC §9.1):
//! the top of the crate, calling down into the state, the queues, the vmem entries (which it
//! installs) and the faults; nothing below calls back up into it. This file builds the core and
//! AMD extension tables; the entries live by API family: `agents` (system and agents), `memory`
//! (regions, pools, allocation, copies and fills), `pointer` (pointer info, locked and IPC
//! memory), `copy` (asynchronous copies), `queues` (user-mode and intercepting queues),
//! `signals` (signals and the async-events thread), `loader` (the loader extension) and
//! `executables` (executables and their symbols), each over `boundary` (the panic guard and
//! out-pointer writes).
//!
//! Every entry catches panics and answers `HSA_STATUS_ERROR` (value-returning signal and
//! queue-index entries answer `-1` / `u64::MAX`). Every slot of the tables is filled: entries
//! that are not simulated point to [`not_simulated`], which ignores its arguments (the C
//! calling convention lets a callee ignore them) and answers [`STATUS_NOT_SIMULATED`].

mod agents;
mod boundary;
mod copy;
mod executables;
mod loader;
mod memory;
mod pointer;
mod queues;
mod signals;

use replay_hsa::sys::v2;

use crate::table::{fill_stubs, set, version};
use agents::{hsa_agent_get_info, hsa_init, hsa_iterate_agents, hsa_system_get_info};
use copy::{hsa_amd_memory_async_copy, hsa_amd_memory_async_copy_on_engine};
use executables::{
    hsa_code_object_reader_create_from_memory, hsa_code_object_reader_destroy,
    hsa_executable_agent_global_variable_define, hsa_executable_create_alt, hsa_executable_destroy,
    hsa_executable_freeze, hsa_executable_get_symbol_by_name, hsa_executable_iterate_agent_symbols,
    hsa_executable_load_agent_code_object, hsa_executable_symbol_get_info,
};
use loader::{hsa_system_get_major_extension_table, hsa_system_major_extension_supported};
use memory::{
    hsa_agent_iterate_regions, hsa_amd_agent_iterate_memory_pools,
    hsa_amd_agent_memory_pool_get_info, hsa_amd_agents_allow_access, hsa_amd_memory_fill,
    hsa_amd_memory_pool_allocate, hsa_amd_memory_pool_get_info, hsa_memory_allocate,
    hsa_memory_copy, hsa_memory_free, hsa_region_get_info,
};
use pointer::{
    hsa_amd_ipc_memory_attach, hsa_amd_ipc_memory_create, hsa_amd_ipc_memory_detach,
    hsa_amd_memory_lock, hsa_amd_memory_lock_to_pool, hsa_amd_memory_unlock, hsa_amd_pointer_info,
};
use queues::{
    add_write_index, cas_write_index, hsa_amd_queue_intercept_create,
    hsa_amd_queue_intercept_register, hsa_queue_create, hsa_queue_destroy, load_read_index,
    load_write_index, store_write_index,
};
use signals::{
    hsa_amd_async_function, hsa_amd_signal_async_handler, hsa_amd_signal_create, hsa_signal_add,
    hsa_signal_create, hsa_signal_destroy, hsa_signal_exchange, hsa_signal_load,
    hsa_signal_silent_store, hsa_signal_store, hsa_signal_subtract, hsa_signal_wait,
};

pub use executables::DEFAULT_KERNARG_SEGMENT_SIZE;
pub(crate) use executables::KERNARG_SIZES;
pub use loader::{LoaderTable, HSA_EXTENSION_AMD_LOADER};
// The status codes and the stub live with the table's slots (below the queue and vmem files,
// which answer them too); their paths here stay.
pub use crate::table::{
    not_simulated, HSA_STATUS_ERROR_EXCEPTION, HSA_STATUS_ERROR_INVALID_EXECUTABLE,
    HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL, STATUS_NOT_SIMULATED,
};

/// The core table (major 2).
pub(crate) fn core_table() -> v2::CoreApiTable {
    let mut t = v2::CoreApiTable::empty(version::<v2::CoreApiTable>(2));
    set(&mut t.hsa_init_fn, hsa_init as *const ());
    set(&mut t.hsa_shut_down_fn, hsa_init as *const ());
    set(
        &mut t.hsa_system_get_info_fn,
        hsa_system_get_info as *const (),
    );
    set(
        &mut t.hsa_iterate_agents_fn,
        hsa_iterate_agents as *const (),
    );
    set(
        &mut t.hsa_agent_get_info_fn,
        hsa_agent_get_info as *const (),
    );
    set(&mut t.hsa_queue_create_fn, hsa_queue_create as *const ());
    set(&mut t.hsa_queue_destroy_fn, hsa_queue_destroy as *const ());
    set(
        &mut t.hsa_queue_load_read_index_scacquire_fn,
        load_read_index as *const (),
    );
    set(
        &mut t.hsa_queue_load_read_index_relaxed_fn,
        load_read_index as *const (),
    );
    set(
        &mut t.hsa_queue_load_write_index_scacquire_fn,
        load_write_index as *const (),
    );
    set(
        &mut t.hsa_queue_load_write_index_relaxed_fn,
        load_write_index as *const (),
    );
    set(
        &mut t.hsa_queue_store_write_index_relaxed_fn,
        store_write_index as *const (),
    );
    set(
        &mut t.hsa_queue_store_write_index_screlease_fn,
        store_write_index as *const (),
    );
    set(
        &mut t.hsa_queue_cas_write_index_scacq_screl_fn,
        cas_write_index as *const (),
    );
    set(
        &mut t.hsa_queue_cas_write_index_scacquire_fn,
        cas_write_index as *const (),
    );
    set(
        &mut t.hsa_queue_cas_write_index_relaxed_fn,
        cas_write_index as *const (),
    );
    set(
        &mut t.hsa_queue_cas_write_index_screlease_fn,
        cas_write_index as *const (),
    );
    set(
        &mut t.hsa_queue_add_write_index_scacq_screl_fn,
        add_write_index as *const (),
    );
    set(
        &mut t.hsa_queue_add_write_index_scacquire_fn,
        add_write_index as *const (),
    );
    set(
        &mut t.hsa_queue_add_write_index_relaxed_fn,
        add_write_index as *const (),
    );
    set(
        &mut t.hsa_queue_add_write_index_screlease_fn,
        add_write_index as *const (),
    );
    set(
        &mut t.hsa_agent_iterate_regions_fn,
        hsa_agent_iterate_regions as *const (),
    );
    set(
        &mut t.hsa_region_get_info_fn,
        hsa_region_get_info as *const (),
    );
    set(
        &mut t.hsa_memory_allocate_fn,
        hsa_memory_allocate as *const (),
    );
    set(&mut t.hsa_memory_free_fn, hsa_memory_free as *const ());
    set(&mut t.hsa_memory_copy_fn, hsa_memory_copy as *const ());
    set(&mut t.hsa_signal_create_fn, hsa_signal_create as *const ());
    set(
        &mut t.hsa_signal_destroy_fn,
        hsa_signal_destroy as *const (),
    );
    set(
        &mut t.hsa_signal_load_relaxed_fn,
        hsa_signal_load as *const (),
    );
    set(
        &mut t.hsa_signal_load_scacquire_fn,
        hsa_signal_load as *const (),
    );
    set(
        &mut t.hsa_signal_store_relaxed_fn,
        hsa_signal_store as *const (),
    );
    set(
        &mut t.hsa_signal_store_screlease_fn,
        hsa_signal_store as *const (),
    );
    set(
        &mut t.hsa_signal_silent_store_relaxed_fn,
        hsa_signal_silent_store as *const (),
    );
    set(
        &mut t.hsa_signal_silent_store_screlease_fn,
        hsa_signal_silent_store as *const (),
    );
    set(
        &mut t.hsa_signal_wait_relaxed_fn,
        hsa_signal_wait as *const (),
    );
    set(
        &mut t.hsa_signal_wait_scacquire_fn,
        hsa_signal_wait as *const (),
    );
    set(
        &mut t.hsa_signal_add_relaxed_fn,
        hsa_signal_add as *const (),
    );
    set(
        &mut t.hsa_signal_add_scacquire_fn,
        hsa_signal_add as *const (),
    );
    set(
        &mut t.hsa_signal_add_screlease_fn,
        hsa_signal_add as *const (),
    );
    set(
        &mut t.hsa_signal_add_scacq_screl_fn,
        hsa_signal_add as *const (),
    );
    set(
        &mut t.hsa_signal_subtract_relaxed_fn,
        hsa_signal_subtract as *const (),
    );
    set(
        &mut t.hsa_signal_subtract_scacquire_fn,
        hsa_signal_subtract as *const (),
    );
    set(
        &mut t.hsa_signal_subtract_screlease_fn,
        hsa_signal_subtract as *const (),
    );
    set(
        &mut t.hsa_signal_subtract_scacq_screl_fn,
        hsa_signal_subtract as *const (),
    );
    set(
        &mut t.hsa_signal_exchange_relaxed_fn,
        hsa_signal_exchange as *const (),
    );
    set(
        &mut t.hsa_signal_exchange_scacquire_fn,
        hsa_signal_exchange as *const (),
    );
    set(
        &mut t.hsa_signal_exchange_screlease_fn,
        hsa_signal_exchange as *const (),
    );
    set(
        &mut t.hsa_signal_exchange_scacq_screl_fn,
        hsa_signal_exchange as *const (),
    );
    set(
        &mut t.hsa_system_major_extension_supported_fn,
        hsa_system_major_extension_supported as *const (),
    );
    set(
        &mut t.hsa_system_get_major_extension_table_fn,
        hsa_system_get_major_extension_table as *const (),
    );
    set(
        &mut t.hsa_executable_symbol_get_info_fn,
        hsa_executable_symbol_get_info as *const (),
    );
    set(
        &mut t.hsa_executable_iterate_agent_symbols_fn,
        hsa_executable_iterate_agent_symbols as *const (),
    );
    set(
        &mut t.hsa_executable_destroy_fn,
        hsa_executable_destroy as *const (),
    );
    set(
        &mut t.hsa_code_object_reader_create_from_memory_fn,
        hsa_code_object_reader_create_from_memory as *const (),
    );
    set(
        &mut t.hsa_code_object_reader_destroy_fn,
        hsa_code_object_reader_destroy as *const (),
    );
    set(
        &mut t.hsa_executable_create_alt_fn,
        hsa_executable_create_alt as *const (),
    );
    set(
        &mut t.hsa_executable_load_agent_code_object_fn,
        hsa_executable_load_agent_code_object as *const (),
    );
    set(
        &mut t.hsa_executable_freeze_fn,
        hsa_executable_freeze as *const (),
    );
    set(
        &mut t.hsa_executable_agent_global_variable_define_fn,
        hsa_executable_agent_global_variable_define as *const (),
    );
    set(
        &mut t.hsa_executable_get_symbol_by_name_fn,
        hsa_executable_get_symbol_by_name as *const (),
    );
    fill_stubs(&mut t, &v2::CoreApiTable::entry_offsets());
    t
}

/// The AMD extension table (major 2).
pub(crate) fn amd_table() -> v2::AmdExtTable {
    let mut t = v2::AmdExtTable::empty(version::<v2::AmdExtTable>(2));
    crate::vmem::install(&mut t);
    set(
        &mut t.hsa_amd_memory_pool_get_info_fn,
        hsa_amd_memory_pool_get_info as *const (),
    );
    set(
        &mut t.hsa_amd_agent_iterate_memory_pools_fn,
        hsa_amd_agent_iterate_memory_pools as *const (),
    );
    set(
        &mut t.hsa_amd_memory_pool_allocate_fn,
        hsa_amd_memory_pool_allocate as *const (),
    );
    set(
        &mut t.hsa_amd_memory_pool_free_fn,
        hsa_memory_free as *const (),
    );
    set(
        &mut t.hsa_amd_memory_async_copy_fn,
        hsa_amd_memory_async_copy as *const (),
    );
    set(
        &mut t.hsa_amd_memory_async_copy_on_engine_fn,
        hsa_amd_memory_async_copy_on_engine as *const (),
    );
    set(
        &mut t.hsa_amd_agent_memory_pool_get_info_fn,
        hsa_amd_agent_memory_pool_get_info as *const (),
    );
    set(
        &mut t.hsa_amd_agents_allow_access_fn,
        hsa_amd_agents_allow_access as *const (),
    );
    set(
        &mut t.hsa_amd_pointer_info_fn,
        hsa_amd_pointer_info as *const (),
    );
    set(
        &mut t.hsa_amd_memory_lock_fn,
        hsa_amd_memory_lock as *const (),
    );
    set(
        &mut t.hsa_amd_memory_lock_to_pool_fn,
        hsa_amd_memory_lock_to_pool as *const (),
    );
    set(
        &mut t.hsa_amd_memory_unlock_fn,
        hsa_amd_memory_unlock as *const (),
    );
    set(
        &mut t.hsa_amd_memory_fill_fn,
        hsa_amd_memory_fill as *const (),
    );
    set(
        &mut t.hsa_amd_ipc_memory_create_fn,
        hsa_amd_ipc_memory_create as *const (),
    );
    set(
        &mut t.hsa_amd_ipc_memory_attach_fn,
        hsa_amd_ipc_memory_attach as *const (),
    );
    set(
        &mut t.hsa_amd_ipc_memory_detach_fn,
        hsa_amd_ipc_memory_detach as *const (),
    );
    set(
        &mut t.hsa_amd_signal_async_handler_fn,
        hsa_amd_signal_async_handler as *const (),
    );
    set(
        &mut t.hsa_amd_async_function_fn,
        hsa_amd_async_function as *const (),
    );
    set(
        &mut t.hsa_amd_signal_create_fn,
        hsa_amd_signal_create as *const (),
    );
    set(
        &mut t.hsa_amd_queue_intercept_create_fn,
        hsa_amd_queue_intercept_create as *const (),
    );
    set(
        &mut t.hsa_amd_queue_intercept_register_fn,
        hsa_amd_queue_intercept_register as *const (),
    );
    fill_stubs(&mut t, &v2::AmdExtTable::entry_offsets());
    t
}
