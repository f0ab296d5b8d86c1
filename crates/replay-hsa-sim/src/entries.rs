//! The `extern "C"` entries of the simulated API table and the tables themselves (SPEC §9.1):
//! the top of the crate, calling down into the state, the queues, the vmem entries (which it
//! installs) and the faults; nothing below calls back up into it.
//!
//! Every entry catches panics and answers `HSA_STATUS_ERROR` (value-returning signal and
//! queue-index entries answer `-1` / `u64::MAX`). Every slot of the tables is filled: entries
//! that are not simulated point to [`not_simulated`], which ignores its arguments (the C
//! calling convention lets a callee ignore them) and answers [`STATUS_NOT_SIMULATED`].

use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::LazyLock;

use parking_lot::Mutex;

use replay_hsa::sys::{self, hsa_status_t, v2, Entry};

use crate::fault::SimFault;
use crate::queue::{self, InterceptHandler, QueueCallback};
use crate::state::{self, CopyJob, REG};
use crate::table::{erase, fill_stubs, set, version};
// The status codes and the stub live with the table's slots (below the queue and vmem files,
// which answer them too); their paths here stay.
pub use crate::table::{
    not_simulated, HSA_STATUS_ERROR_EXCEPTION, HSA_STATUS_ERROR_INVALID_EXECUTABLE,
    HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL, STATUS_NOT_SIMULATED,
};

/// `HSA_EXTENSION_AMD_LOADER`.
pub const HSA_EXTENSION_AMD_LOADER: u16 = 0x201;

macro_rules! guard {
    ($name:literal, $on_panic:expr, $body:block) => {
        match catch_unwind(AssertUnwindSafe(|| $body)) {
            Ok(v) => v,
            Err(_) => {
                log::error!("hsa-sim: {} panicked", $name);
                $on_panic
            }
        }
    };
}

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

// ----- Helpers --------------------------------------------------------------------------------

/// Writes `v` through the caller's `value` pointer.
///
/// # Safety
///
/// 1. `value` is NULL or valid for writing a `T` (the attribute's documented type).
unsafe fn put<T>(value: *mut c_void, v: T) -> hsa_status_t {
    if value.is_null() {
        return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: caller's item 1; unaligned write for leniency.
    unsafe { value.cast::<T>().write_unaligned(v) };
    sys::HSA_STATUS_SUCCESS
}

fn name64(s: &str) -> [u8; 64] {
    let mut b = [0u8; 64];
    let n = s.len().min(63);
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
    b
}

// ----- Core: system and agents ------------------------------------------------------------------

extern "C" fn hsa_init() -> hsa_status_t {
    sys::HSA_STATUS_SUCCESS
}

/// `hsa_system_get_info`: version (1.1), timestamp and its frequency
/// ([`crate::SimConfig::timestamp_hz`], the unit of timeout hints), the longest signal wait.
unsafe extern "C" fn hsa_system_get_info(attr: u32, value: *mut c_void) -> hsa_status_t {
    guard!("hsa_system_get_info", sys::HSA_STATUS_ERROR, {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let hz = state::timestamp_hz();
        let now = (EPOCH
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos()
            * u128::from(hz)
            / 1_000_000_000) as u64;
        // SAFETY: in each arm, `value` points to the attribute's documented type.
        unsafe {
            match attr {
                0 => put(value, 1u16),
                1 => put(value, 1u16),
                2 => put(value, now),
                3 => put(value, hz),
                4 => put(value, u64::MAX),
                _ => sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    })
}

type AgentCallback = Option<unsafe extern "C" fn(sys::hsa_agent_t, *mut c_void) -> hsa_status_t>;

unsafe extern "C" fn hsa_iterate_agents(cb: AgentCallback, data: *mut c_void) -> hsa_status_t {
    guard!("hsa_iterate_agents", sys::HSA_STATUS_ERROR, {
        let Some(cb) = cb else {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let Some(inst) = state::current() else {
            return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
        };
        for a in &inst.agents {
            // SAFETY: the application's callback with its data.
            let st = unsafe { cb(sys::hsa_agent_t { handle: a.handle }, data) };
            if st != sys::HSA_STATUS_SUCCESS {
                return st;
            }
        }
        sys::HSA_STATUS_SUCCESS
    })
}

unsafe extern "C" fn hsa_agent_get_info(
    agent: sys::hsa_agent_t,
    attr: u32,
    value: *mut c_void,
) -> hsa_status_t {
    guard!("hsa_agent_get_info", sys::HSA_STATUS_ERROR, {
        let Some(a) = REG.agents.lock().get(&agent.handle).cloned() else {
            return sys::HSA_STATUS_ERROR_INVALID_AGENT;
        };
        let gpu = a.device == sys::HSA_DEVICE_TYPE_GPU;
        let cfg = a
            .instance
            .upgrade()
            .map(|i| i.config.clone())
            .unwrap_or_default();
        // SAFETY: in each arm, `value` points to the attribute's type (the caller's contract).
        unsafe {
            match attr {
                0 => put(value, name64(&a.name)),
                1 => put(value, name64(if gpu { "AMD" } else { "CPU" })),
                2 => put(value, if gpu { 1u32 } else { 2u32 }),
                6 => put(value, 64u32),
                12 => put(value, if gpu { 128u32 } else { 0 }),
                13 => put(value, if gpu { cfg.queue_min_size } else { 0 }),
                14 => put(value, if gpu { cfg.queue_max_size } else { 0 }),
                15 => put(value, 1u32),
                16 => put(value, a.node),
                sys::HSA_AGENT_INFO_DEVICE => put(value, a.device),
                // One physical memory backs both device pools on a GPU; the simulator keeps
                // their capacities apart and reports the coarse pool's, where device
                // allocations and other processes' use land.
                sys::HSA_AMD_AGENT_INFO_MEMORY_AVAIL if gpu => {
                    let pools = REG.pools.lock();
                    let avail: usize = a
                        .pools
                        .iter()
                        .filter_map(|p| pools.get(p))
                        .filter(|p| p.kind == state::PoolKind::DeviceCoarse)
                        .map(|p| p.available())
                        .sum();
                    put(value, avail as u64)
                }
                _ => sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    })
}

type RegionCallback = Option<unsafe extern "C" fn(sys::hsa_region_t, *mut c_void) -> hsa_status_t>;

unsafe extern "C" fn hsa_agent_iterate_regions(
    agent: sys::hsa_agent_t,
    cb: RegionCallback,
    data: *mut c_void,
) -> hsa_status_t {
    guard!("hsa_agent_iterate_regions", sys::HSA_STATUS_ERROR, {
        let Some(cb) = cb else {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let Some(a) = REG.agents.lock().get(&agent.handle).cloned() else {
            return sys::HSA_STATUS_ERROR_INVALID_AGENT;
        };
        for p in &a.pools {
            // SAFETY: the application's callback with its data.
            let st = unsafe { cb(sys::hsa_region_t { handle: *p }, data) };
            if st != sys::HSA_STATUS_SUCCESS {
                return st;
            }
        }
        sys::HSA_STATUS_SUCCESS
    })
}

fn pool_info(handle: u64, attr: u32, value: *mut c_void, region: bool) -> hsa_status_t {
    let Some(p) = REG.pools.lock().get(&handle).cloned() else {
        return if region {
            sys::HSA_STATUS_ERROR_INVALID_REGION
        } else {
            sys::HSA_STATUS_ERROR_INVALID_ARGUMENT
        };
    };
    // SAFETY: in each arm, `value` points to the attribute's type (the caller's contract).
    unsafe {
        match attr {
            0 => put(value, sys::HSA_AMD_SEGMENT_GLOBAL),
            1 => put(value, p.kind.global_flags()),
            2 => put(value, p.capacity),
            4 if region => put(value, p.capacity),
            5 => put(value, true),
            6 | 7 => put(value, 4096usize),
            15 if !region => put(value, false),
            16 if !region => put(value, p.capacity),
            _ => sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    }
}

unsafe extern "C" fn hsa_region_get_info(
    region: sys::hsa_region_t,
    attr: u32,
    value: *mut c_void,
) -> hsa_status_t {
    guard!("hsa_region_get_info", sys::HSA_STATUS_ERROR, {
        pool_info(region.handle, attr, value, true)
    })
}

fn alloc_into(pool: u64, size: usize, out: *mut *mut c_void) -> hsa_status_t {
    if out.is_null() || size == 0 {
        return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let Some(p) = REG.pools.lock().get(&pool).cloned() else {
        return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    if state::instance_of_agent(p.agent)
        .is_some_and(|i| i.injected.fire(SimFault::PoolExhausted(p.kind)))
    {
        return sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    match state::allocate(&p, size) {
        Some(a) => {
            // SAFETY: `out` is non-NULL and points to a `void*` (the caller's contract).
            unsafe { out.write(a as *mut c_void) };
            sys::HSA_STATUS_SUCCESS
        }
        None => sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES,
    }
}

unsafe extern "C" fn hsa_memory_allocate(
    region: sys::hsa_region_t,
    size: usize,
    out: *mut *mut c_void,
) -> hsa_status_t {
    guard!("hsa_memory_allocate", sys::HSA_STATUS_ERROR, {
        alloc_into(region.handle, size, out)
    })
}

unsafe extern "C" fn hsa_memory_free(ptr: *mut c_void) -> hsa_status_t {
    guard!("hsa_memory_free", sys::HSA_STATUS_ERROR, {
        if ptr.is_null() || state::free(ptr as u64) {
            sys::HSA_STATUS_SUCCESS
        } else {
            sys::HSA_STATUS_ERROR_INVALID_ARGUMENT
        }
    })
}

unsafe extern "C" fn hsa_memory_copy(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
) -> hsa_status_t {
    guard!("hsa_memory_copy", sys::HSA_STATUS_ERROR, {
        let owner = state::find(dst as u64).or_else(|| state::find(src as u64));
        if owner
            .and_then(|(_, a)| state::instance_of_agent(a.agent))
            .is_some_and(|i| i.injected.fire(SimFault::MemoryCopyFails))
        {
            return sys::HSA_STATUS_ERROR;
        }
        match state::copy(dst as u64, src as u64, size) {
            Ok(()) => sys::HSA_STATUS_SUCCESS,
            Err(_) => sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    })
}

// ----- Core: queues --------------------------------------------------------------------------------

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn hsa_queue_create(
    agent: sys::hsa_agent_t,
    size: u32,
    _type: u32,
    callback: QueueCallback,
    data: *mut c_void,
    _private: u32,
    _group: u32,
    out: *mut *mut sys::hsa_queue_t,
) -> hsa_status_t {
    guard!("hsa_queue_create", sys::HSA_STATUS_ERROR, {
        if out.is_null() {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match queue::create(agent.handle, size, callback, data as usize) {
            Ok(q) => {
                // SAFETY: `out` is non-NULL and points to an `hsa_queue_t*`.
                unsafe { out.write(q) };
                sys::HSA_STATUS_SUCCESS
            }
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn hsa_queue_destroy(q: *mut sys::hsa_queue_t) -> hsa_status_t {
    guard!("hsa_queue_destroy", sys::HSA_STATUS_ERROR, {
        queue::destroy(q)
    })
}

unsafe extern "C" fn load_read_index(q: *const sys::hsa_queue_t) -> u64 {
    guard!("hsa_queue_load_read_index", u64::MAX, {
        queue::lookup(q).map_or(u64::MAX, |e| e.indices().read.load(Ordering::Acquire))
    })
}

unsafe extern "C" fn load_write_index(q: *const sys::hsa_queue_t) -> u64 {
    guard!("hsa_queue_load_write_index", u64::MAX, {
        queue::lookup(q).map_or(u64::MAX, |e| e.indices().write.load(Ordering::Acquire))
    })
}

unsafe extern "C" fn store_write_index(q: *const sys::hsa_queue_t, v: u64) {
    guard!("hsa_queue_store_write_index", (), {
        if let Some(e) = queue::lookup(q) {
            e.indices().write.store(v, Ordering::Release);
        }
    })
}

unsafe extern "C" fn add_write_index(q: *const sys::hsa_queue_t, v: u64) -> u64 {
    guard!("hsa_queue_add_write_index", u64::MAX, {
        queue::lookup(q).map_or(u64::MAX, |e| {
            e.indices().write.fetch_add(v, Ordering::AcqRel)
        })
    })
}

unsafe extern "C" fn cas_write_index(q: *const sys::hsa_queue_t, expected: u64, v: u64) -> u64 {
    guard!("hsa_queue_cas_write_index", u64::MAX, {
        queue::lookup(q).map_or(u64::MAX, |e| {
            match e.indices().write.compare_exchange(
                expected,
                v,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(x) | Err(x) => x,
            }
        })
    })
}

// ----- Core: signals -------------------------------------------------------------------------------

unsafe extern "C" fn hsa_signal_create(
    initial: i64,
    _n: u32,
    _consumers: *const sys::hsa_agent_t,
    out: *mut sys::hsa_signal_t,
) -> hsa_status_t {
    guard!("hsa_signal_create", sys::HSA_STATUS_ERROR, {
        if out.is_null() {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        if state::current().is_some_and(|i| i.injected.fire(SimFault::SignalCreateFails)) {
            return sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        }
        let h = state::signal_create(initial);
        // SAFETY: `out` is non-NULL and points to an `hsa_signal_t`.
        unsafe { out.write(sys::hsa_signal_t { handle: h }) };
        sys::HSA_STATUS_SUCCESS
    })
}

unsafe extern "C" fn hsa_amd_signal_create(
    initial: i64,
    n: u32,
    consumers: *const sys::hsa_agent_t,
    _attributes: u64,
    out: *mut sys::hsa_signal_t,
) -> hsa_status_t {
    // SAFETY: same contract as `hsa_signal_create`.
    unsafe { hsa_signal_create(initial, n, consumers, out) }
}

unsafe extern "C" fn hsa_signal_destroy(s: sys::hsa_signal_t) -> hsa_status_t {
    guard!("hsa_signal_destroy", sys::HSA_STATUS_ERROR, {
        if state::signal_destroy(s.handle) {
            sys::HSA_STATUS_SUCCESS
        } else {
            sys::HSA_STATUS_ERROR_INVALID_SIGNAL
        }
    })
}

unsafe extern "C" fn hsa_signal_load(s: sys::hsa_signal_t) -> i64 {
    guard!("hsa_signal_load", -1, {
        state::signal(s.handle).map_or(-1, |s| s.load())
    })
}

unsafe extern "C" fn hsa_signal_store(s: sys::hsa_signal_t, v: i64) {
    guard!("hsa_signal_store", (), {
        if let Some(sig) = state::signal(s.handle) {
            sig.store_silent(v);
            sig.on_store();
        }
    })
}

unsafe extern "C" fn hsa_signal_silent_store(s: sys::hsa_signal_t, v: i64) {
    guard!("hsa_signal_silent_store", (), {
        if let Some(sig) = state::signal(s.handle) {
            sig.store_silent(v);
        }
    })
}

unsafe extern "C" fn hsa_signal_add(s: sys::hsa_signal_t, v: i64) {
    guard!("hsa_signal_add", (), {
        if let Some(sig) = state::signal(s.handle) {
            sig.update(|x| x.wrapping_add(v));
        }
    })
}

unsafe extern "C" fn hsa_signal_subtract(s: sys::hsa_signal_t, v: i64) {
    guard!("hsa_signal_subtract", (), {
        if let Some(sig) = state::signal(s.handle) {
            sig.update(|x| x.wrapping_sub(v));
        }
    })
}

unsafe extern "C" fn hsa_signal_exchange(s: sys::hsa_signal_t, v: i64) -> i64 {
    guard!("hsa_signal_exchange", -1, {
        state::signal(s.handle).map_or(-1, |sig| sig.update(|_| v))
    })
}

/// `hsa_signal_wait_*`: conditions EQ 0, NE 1, LT 2, GTE 3; the timeout hint is read as
/// nanoseconds (`u64::MAX`: no timeout). Returns the value observed last.
unsafe extern "C" fn hsa_signal_wait(
    s: sys::hsa_signal_t,
    cond: u32,
    compare: i64,
    timeout_hint: u64,
    _wait_state: u32,
) -> i64 {
    guard!("hsa_signal_wait", -1, {
        let Some(sig) = state::signal(s.handle) else {
            return -1;
        };
        let timeout = state::ticks_to_duration(timeout_hint);
        sig.wait(|v| state::condition(cond, v, compare), timeout)
    })
}

// ----- AMD extension: the async-events thread ------------------------------------------------------

/// `hsa_amd_signal_async_handler`: the handler runs on the async-events thread when the
/// condition holds, and stays armed while it answers true.
unsafe extern "C" fn hsa_amd_signal_async_handler(
    signal: sys::hsa_signal_t,
    cond: u32,
    value: i64,
    handler: Option<unsafe extern "C" fn(i64, *mut c_void) -> bool>,
    arg: *mut c_void,
) -> hsa_status_t {
    guard!("hsa_amd_signal_async_handler", sys::HSA_STATUS_ERROR, {
        let Some(handler) = handler else {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        if state::signal(signal.handle).is_none() {
            return sys::HSA_STATUS_ERROR_INVALID_SIGNAL;
        }
        let Some(inst) = state::current() else {
            return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
        };
        inst.post_async(state::AsyncEvent::Handler(state::AsyncHandler {
            signal: signal.handle,
            cond,
            value,
            handler,
            arg: arg as usize,
        }));
        sys::HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_async_function`: `f(arg)` runs once on the async-events thread.
unsafe extern "C" fn hsa_amd_async_function(
    f: Option<unsafe extern "C" fn(*mut c_void)>,
    arg: *mut c_void,
) -> hsa_status_t {
    guard!("hsa_amd_async_function", sys::HSA_STATUS_ERROR, {
        let Some(f) = f else {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let Some(inst) = state::current() else {
            return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
        };
        inst.post_async(state::AsyncEvent::Function(state::AsyncFunction {
            f,
            arg: arg as usize,
        }));
        sys::HSA_STATUS_SUCCESS
    })
}

// ----- AMD extension: pools, pointers, copies ------------------------------------------------------

type PoolCallback =
    Option<unsafe extern "C" fn(sys::hsa_amd_memory_pool_t, *mut c_void) -> hsa_status_t>;

unsafe extern "C" fn hsa_amd_agent_iterate_memory_pools(
    agent: sys::hsa_agent_t,
    cb: PoolCallback,
    data: *mut c_void,
) -> hsa_status_t {
    guard!(
        "hsa_amd_agent_iterate_memory_pools",
        sys::HSA_STATUS_ERROR,
        {
            let Some(cb) = cb else {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            };
            let Some(a) = REG.agents.lock().get(&agent.handle).cloned() else {
                return sys::HSA_STATUS_ERROR_INVALID_AGENT;
            };
            for p in &a.pools {
                // SAFETY: the application's callback with its data.
                let st = unsafe { cb(sys::hsa_amd_memory_pool_t { handle: *p }, data) };
                if st != sys::HSA_STATUS_SUCCESS {
                    return st;
                }
            }
            sys::HSA_STATUS_SUCCESS
        }
    )
}

unsafe extern "C" fn hsa_amd_memory_pool_get_info(
    pool: sys::hsa_amd_memory_pool_t,
    attr: u32,
    value: *mut c_void,
) -> hsa_status_t {
    guard!("hsa_amd_memory_pool_get_info", sys::HSA_STATUS_ERROR, {
        pool_info(pool.handle, attr, value, false)
    })
}

unsafe extern "C" fn hsa_amd_agent_memory_pool_get_info(
    _agent: sys::hsa_agent_t,
    pool: sys::hsa_amd_memory_pool_t,
    attr: u32,
    value: *mut c_void,
) -> hsa_status_t {
    guard!(
        "hsa_amd_agent_memory_pool_get_info",
        sys::HSA_STATUS_ERROR,
        {
            if !REG.pools.lock().contains_key(&pool.handle) {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            match attr {
                // SAFETY: attribute ACCESS (0) is a 4-byte enum: 1 = allowed by default.
                0 => unsafe { put(value, 1u32) },
                _ => sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    )
}

unsafe extern "C" fn hsa_amd_agents_allow_access(
    _n: u32,
    _agents: *const sys::hsa_agent_t,
    _flags: *const u32,
    ptr: *const c_void,
) -> hsa_status_t {
    guard!("hsa_amd_agents_allow_access", sys::HSA_STATUS_ERROR, {
        let owner = state::find(ptr as u64).and_then(|(_, a)| state::instance_of_agent(a.agent));
        if owner.is_some_and(|i| i.injected.fire(SimFault::AllowAccessFails)) {
            return sys::HSA_STATUS_ERROR;
        }
        if state::find(ptr as u64).is_some() {
            sys::HSA_STATUS_SUCCESS
        } else {
            sys::HSA_STATUS_ERROR_INVALID_ARGUMENT
        }
    })
}

unsafe extern "C" fn hsa_amd_memory_pool_allocate(
    pool: sys::hsa_amd_memory_pool_t,
    size: usize,
    _flags: u32,
    out: *mut *mut c_void,
) -> hsa_status_t {
    guard!("hsa_amd_memory_pool_allocate", sys::HSA_STATUS_ERROR, {
        alloc_into(pool.handle, size, out)
    })
}

unsafe extern "C" fn hsa_amd_pointer_info(
    ptr: *const c_void,
    info: *mut sys::hsa_amd_pointer_info_t,
    alloc: Option<unsafe extern "C" fn(usize) -> *mut c_void>,
    num_agents: *mut u32,
    agents: *mut *mut sys::hsa_agent_t,
) -> hsa_status_t {
    guard!("hsa_amd_pointer_info", sys::HSA_STATUS_ERROR, {
        if info.is_null() {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: `info` points to a pointer-info struct whose `size` field is set.
        let given = unsafe { (*info).size } as usize;
        if given < std::mem::size_of::<sys::hsa_amd_pointer_info_t>() {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        if state::current().is_some_and(|i| i.injected.fire(SimFault::PointerInfoFails)) {
            return sys::HSA_STATUS_ERROR;
        }
        let mut out = sys::hsa_amd_pointer_info_t::default();
        let mut owner_agents = Vec::new();
        let found = state::find(ptr as u64);
        if found.is_none() {
            if let Some((base, size)) = crate::vmem::reservation(ptr as u64) {
                // Reserved, nothing mapped there.
                out.type_ = sys::HSA_EXT_POINTER_TYPE_RESERVED_ADDR;
                out.agentBaseAddress = base as *mut c_void;
                out.hostBaseAddress = base as *mut c_void;
                out.sizeInBytes = size;
            }
        }
        if let Some((base, a)) = found {
            out.type_ = if a.vmem.is_some() {
                sys::HSA_EXT_POINTER_TYPE_HSA_VMEM
            } else {
                POINTER_TYPES
                    .lock()
                    .get(&base)
                    .copied()
                    .unwrap_or(sys::HSA_EXT_POINTER_TYPE_HSA)
            };
            out.agentBaseAddress = base as *mut c_void;
            out.hostBaseAddress = base as *mut c_void;
            out.sizeInBytes = a.size;
            out.agentOwner = sys::hsa_agent_t { handle: a.agent };
            out.global_flags = REG
                .pools
                .lock()
                .get(&a.pool)
                .map_or(0, |p| p.kind.global_flags());
            if let Some(inst) = state::instance_of_agent(a.agent) {
                owner_agents = inst.agents.iter().map(|a| a.handle).collect();
            }
        }
        // SAFETY: `info` is writable for the struct (its size was checked above); the
        // caller's `size` is kept.
        unsafe {
            out.size = (*info).size;
            info.write(out);
        }
        if let (Some(alloc), false, false) = (alloc, num_agents.is_null(), agents.is_null()) {
            let n = owner_agents.len();
            // SAFETY: the caller's allocator, asked for `n` agents.
            let buf = unsafe { alloc(n.max(1) * std::mem::size_of::<sys::hsa_agent_t>()) }
                .cast::<sys::hsa_agent_t>();
            if buf.is_null() {
                return sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES;
            }
            // SAFETY: `buf` holds `n` agents; the out pointers are non-NULL.
            unsafe {
                for (i, h) in owner_agents.iter().enumerate() {
                    buf.add(i).write(sys::hsa_agent_t { handle: *h });
                }
                num_agents.write(n as u32);
                agents.write(buf);
            }
        }
        sys::HSA_STATUS_SUCCESS
    })
}

/// Pointer types other than `HSA_EXT_POINTER_TYPE_HSA`, by block base: locked host memory
/// (`LOCKED`) and IPC-imported blocks (`IPC`).
static POINTER_TYPES: LazyLock<Mutex<HashMap<u64, u32>>> = LazyLock::new(Default::default);

/// The instance an access list names (its first agent's), else the calling thread's.
///
/// # Safety
///
/// 1. `agents` is NULL or points to `n` agents.
unsafe fn instance_of_list(
    agents: *const sys::hsa_agent_t,
    n: i64,
) -> Option<std::sync::Arc<state::Instance>> {
    let first = if agents.is_null() || n <= 0 {
        None
    } else {
        // SAFETY: the caller's item 1, `n > 0`.
        Some(unsafe { *agents })
    };
    first
        .and_then(|a| state::instance_of_agent(a.handle))
        .or_else(state::current)
}

/// Locks `[host_ptr, host_ptr+size)`: host memory the simulator does not own becomes a
/// `LOCKED` block of the CPU agent that kernels and copies reach at the same address (the
/// agents' address is the host address, as on systems with a unified address space); memory the
/// simulator allocated is already reachable and stays as it is.
fn lock_range(
    inst: Option<std::sync::Arc<state::Instance>>,
    host_ptr: *mut c_void,
    size: usize,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t {
    if host_ptr.is_null() || size == 0 {
        return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let Some(inst) = inst else {
        return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let base = host_ptr as u64;
    if state::find(base).is_none() {
        if !state::map_foreign(base, size, inst.agents[0].handle) {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        POINTER_TYPES
            .lock()
            .insert(base, sys::HSA_EXT_POINTER_TYPE_LOCKED);
    }
    if !agent_ptr.is_null() {
        // SAFETY: a non-NULL out pointer to a `void*` (the caller's contract).
        unsafe { agent_ptr.write(host_ptr) };
    }
    sys::HSA_STATUS_SUCCESS
}

/// `hsa_amd_memory_lock`.
unsafe extern "C" fn hsa_amd_memory_lock(
    host_ptr: *mut c_void,
    size: usize,
    agents: *mut sys::hsa_agent_t,
    num_agent: i32,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t {
    guard!("hsa_amd_memory_lock", sys::HSA_STATUS_ERROR, {
        // SAFETY: `agents` holds `num_agent` agents (the caller's contract).
        let inst = unsafe { instance_of_list(agents, i64::from(num_agent)) };
        lock_range(inst, host_ptr, size, agent_ptr)
    })
}

/// `hsa_amd_memory_lock_to_pool`: as `hsa_amd_memory_lock` (the pool is not simulated).
unsafe extern "C" fn hsa_amd_memory_lock_to_pool(
    host_ptr: *mut c_void,
    size: usize,
    agents: *mut sys::hsa_agent_t,
    num_agent: i32,
    _pool: sys::hsa_amd_memory_pool_t,
    _flags: u32,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t {
    guard!("hsa_amd_memory_lock_to_pool", sys::HSA_STATUS_ERROR, {
        // SAFETY: `agents` holds `num_agent` agents (the caller's contract).
        let inst = unsafe { instance_of_list(agents, i64::from(num_agent)) };
        lock_range(inst, host_ptr, size, agent_ptr)
    })
}

/// `hsa_amd_memory_unlock`: a locked block leaves the memory map (the host memory stays the
/// application's).
unsafe extern "C" fn hsa_amd_memory_unlock(host_ptr: *mut c_void) -> hsa_status_t {
    guard!("hsa_amd_memory_unlock", sys::HSA_STATUS_ERROR, {
        let base = host_ptr as u64;
        if state::unmap_foreign(base) {
            POINTER_TYPES.lock().remove(&base);
            sys::HSA_STATUS_SUCCESS
        } else if state::find(base).is_some() {
            sys::HSA_STATUS_SUCCESS
        } else {
            sys::HSA_STATUS_ERROR_INVALID_ARGUMENT
        }
    })
}

/// `hsa_amd_memory_fill`: `count` 32-bit words of `value` at `ptr`, synchronously.
unsafe extern "C" fn hsa_amd_memory_fill(
    ptr: *mut c_void,
    value: u32,
    count: usize,
) -> hsa_status_t {
    guard!("hsa_amd_memory_fill", sys::HSA_STATUS_ERROR, {
        // As in the runtime: the pointer must be 4-byte aligned.
        let Some(len) = count.checked_mul(4).filter(|_| (ptr as usize) % 4 == 0) else {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let filled = state::with_range(ptr as u64, len, |p| {
            for i in 0..count {
                // SAFETY: `len` writable bytes inside a live allocation (map read-locked).
                unsafe { p.add(4 * i).cast::<u32>().write_unaligned(value) };
            }
        });
        match filled {
            Ok(()) => sys::HSA_STATUS_SUCCESS,
            Err(_) => sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    })
}

/// The first word of a simulated IPC handle.
const IPC_MAGIC: u32 = 0x4b52_4950;

/// `hsa_amd_ipc_memory_create`: a handle naming the block at `ptr` (its base) and `len`.
unsafe extern "C" fn hsa_amd_ipc_memory_create(
    ptr: *mut c_void,
    len: usize,
    handle: *mut sys::hsa_amd_ipc_memory_t,
) -> hsa_status_t {
    guard!("hsa_amd_ipc_memory_create", sys::HSA_STATUS_ERROR, {
        let base = ptr as u64;
        match state::find(base) {
            Some((b, a)) if b == base && len <= a.size && a.pool != 0 && !handle.is_null() => {
                let mut h = sys::hsa_amd_ipc_memory_t::default();
                h.handle[0] = IPC_MAGIC;
                h.handle[1] = base as u32;
                h.handle[2] = (base >> 32) as u32;
                h.handle[3] = len as u32;
                h.handle[4] = (len as u64 >> 32) as u32;
                // SAFETY: a non-NULL out pointer to a handle (the caller's contract).
                unsafe { handle.write(h) };
                sys::HSA_STATUS_SUCCESS
            }
            _ => sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    })
}

/// `hsa_amd_ipc_memory_attach`: the simulator is one process, so the imported mapping is a
/// block of its own (from the exporter's pool, holding the exporter's bytes at attach time),
/// of pointer type `IPC`; writes to it do not reach the exporter.
unsafe extern "C" fn hsa_amd_ipc_memory_attach(
    handle: *const sys::hsa_amd_ipc_memory_t,
    len: usize,
    _num_agents: u32,
    _agents: *const sys::hsa_agent_t,
    mapped: *mut *mut c_void,
) -> hsa_status_t {
    guard!("hsa_amd_ipc_memory_attach", sys::HSA_STATUS_ERROR, {
        if handle.is_null() || mapped.is_null() || len == 0 {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: a non-NULL handle (the caller's contract).
        let h = unsafe { *handle };
        let base = u64::from(h.handle[1]) | (u64::from(h.handle[2]) << 32);
        let size = u64::from(h.handle[3]) | (u64::from(h.handle[4]) << 32);
        if h.handle[0] != IPC_MAGIC || len as u64 > size {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        let Some(pool) = state::find(base)
            .filter(|(b, _)| *b == base)
            .and_then(|(_, a)| REG.pools.lock().get(&a.pool).cloned())
        else {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        let Some(view) = state::allocate(&pool, len) else {
            return sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES;
        };
        if state::copy(view, base, len).is_err() {
            state::free(view);
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        POINTER_TYPES
            .lock()
            .insert(view, sys::HSA_EXT_POINTER_TYPE_IPC);
        // SAFETY: a non-NULL out pointer to a `void*` (the caller's contract).
        unsafe { mapped.write(view as *mut c_void) };
        sys::HSA_STATUS_SUCCESS
    })
}

/// `hsa_amd_ipc_memory_detach`: releases a mapping of `hsa_amd_ipc_memory_attach`.
unsafe extern "C" fn hsa_amd_ipc_memory_detach(mapped: *mut c_void) -> hsa_status_t {
    guard!("hsa_amd_ipc_memory_detach", sys::HSA_STATUS_ERROR, {
        let base = mapped as u64;
        let ipc = POINTER_TYPES.lock().get(&base) == Some(&sys::HSA_EXT_POINTER_TYPE_IPC);
        if ipc && state::free(base) {
            POINTER_TYPES.lock().remove(&base);
            sys::HSA_STATUS_SUCCESS
        } else {
            sys::HSA_STATUS_ERROR_INVALID_ARGUMENT
        }
    })
}

/// Argument block sizes of kernel symbols, by kernel object ([`crate::SimHsa::set_kernarg_segment_size`]).
pub(crate) static KERNARG_SIZES: LazyLock<Mutex<HashMap<u64, u32>>> =
    LazyLock::new(Default::default);

/// What a kernel symbol reports as its argument block's size when none was set.
pub const DEFAULT_KERNARG_SEGMENT_SIZE: u32 = 256;

/// Submits a copy to the copy engine of the instance owning `agent` (or the current one).
fn submit_copy(
    dst: *mut c_void,
    agent: sys::hsa_agent_t,
    src: *const c_void,
    size: usize,
    num_deps: u32,
    deps: *const sys::hsa_signal_t,
    completion: sys::hsa_signal_t,
) -> hsa_status_t {
    let Some(inst) = state::instance_of_agent(agent.handle).or_else(state::current) else {
        return sys::HSA_STATUS_ERROR_INVALID_AGENT;
    };
    if state::find(dst as u64).is_none() || state::find(src as u64).is_none() {
        return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if inst.injected.fire(SimFault::AsyncCopyRefused) {
        return sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    let deps: Vec<u64> = if num_deps == 0 || deps.is_null() {
        Vec::new()
    } else {
        // SAFETY: `deps` holds `num_deps` signals (the caller's contract).
        unsafe { std::slice::from_raw_parts(deps, num_deps as usize) }
            .iter()
            .map(|s| s.handle)
            .collect()
    };
    let job = CopyJob {
        dst: dst as u64,
        src: src as u64,
        len: size,
        deps,
        completion: completion.handle,
    };
    if inst.submit_copy(job) {
        sys::HSA_STATUS_SUCCESS
    } else {
        sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn hsa_amd_memory_async_copy(
    dst: *mut c_void,
    dst_agent: sys::hsa_agent_t,
    src: *const c_void,
    _src_agent: sys::hsa_agent_t,
    size: usize,
    num_deps: u32,
    deps: *const sys::hsa_signal_t,
    completion: sys::hsa_signal_t,
) -> hsa_status_t {
    guard!("hsa_amd_memory_async_copy", sys::HSA_STATUS_ERROR, {
        submit_copy(dst, dst_agent, src, size, num_deps, deps, completion)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn hsa_amd_memory_async_copy_on_engine(
    dst: *mut c_void,
    dst_agent: sys::hsa_agent_t,
    src: *const c_void,
    _src_agent: sys::hsa_agent_t,
    size: usize,
    num_deps: u32,
    deps: *const sys::hsa_signal_t,
    completion: sys::hsa_signal_t,
    _engine: u32,
    _force: bool,
) -> hsa_status_t {
    guard!(
        "hsa_amd_memory_async_copy_on_engine",
        sys::HSA_STATUS_ERROR,
        { submit_copy(dst, dst_agent, src, size, num_deps, deps, completion) }
    )
}

// ----- AMD extension: intercepting queues ----------------------------------------------------------

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn hsa_amd_queue_intercept_create(
    agent: sys::hsa_agent_t,
    size: u32,
    _type: u32,
    callback: QueueCallback,
    data: *mut c_void,
    _private: u32,
    _group: u32,
    out: *mut *mut sys::hsa_queue_t,
) -> hsa_status_t {
    guard!("hsa_amd_queue_intercept_create", sys::HSA_STATUS_ERROR, {
        if out.is_null() {
            return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
        }
        match queue::create_intercept(agent.handle, size, callback, data as usize) {
            Ok(q) => {
                // SAFETY: `out` is non-NULL and points to an `hsa_queue_t*`.
                unsafe { out.write(q) };
                sys::HSA_STATUS_SUCCESS
            }
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn hsa_amd_queue_intercept_register(
    q: *mut sys::hsa_queue_t,
    handler: InterceptHandler,
    data: *mut c_void,
) -> hsa_status_t {
    guard!("hsa_amd_queue_intercept_register", sys::HSA_STATUS_ERROR, {
        queue::register(q, handler, data as usize)
    })
}

// ----- Loader extension and executable symbols ----------------------------------------------------

/// `hsa_ven_amd_loader_1_03_pfn_t`: the loader extension table (major 1, minor 3). Only the
/// host-address query, the executable query and `hsa_ven_amd_loader_iterate_executables` are
/// simulated; the others answer [`STATUS_NOT_SIMULATED`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LoaderTable {
    /// `hsa_ven_amd_loader_query_host_address(const void*, const void**)`.
    pub query_host_address: Entry,
    /// `hsa_ven_amd_loader_query_segment_descriptors`.
    pub query_segment_descriptors: Entry,
    /// `hsa_ven_amd_loader_query_executable(const void*, hsa_executable_t*)`.
    pub query_executable: Entry,
    /// `hsa_ven_amd_loader_executable_iterate_loaded_code_objects`.
    pub executable_iterate_loaded_code_objects: Entry,
    /// `hsa_ven_amd_loader_loaded_code_object_get_info`.
    pub loaded_code_object_get_info: Entry,
    /// `hsa_ven_amd_loader_code_object_reader_create_from_file_with_offset_size`.
    pub code_object_reader_create_from_file_with_offset_size: Entry,
    /// `hsa_ven_amd_loader_iterate_executables(callback(hsa_executable_t, void*), void*)`.
    pub iterate_executables: Entry,
}

fn loader_table() -> LoaderTable {
    let stub = erase(not_simulated as *const ());
    LoaderTable {
        query_host_address: erase(loader_query_host_address as *const ()),
        query_segment_descriptors: stub,
        query_executable: erase(loader_query_executable as *const ()),
        executable_iterate_loaded_code_objects: stub,
        loaded_code_object_get_info: stub,
        code_object_reader_create_from_file_with_offset_size: stub,
        iterate_executables: erase(loader_iterate_executables as *const ()),
    }
}

unsafe extern "C" fn hsa_system_major_extension_supported(
    extension: u16,
    major: u16,
    minor: *mut u16,
    result: *mut bool,
) -> hsa_status_t {
    guard!(
        "hsa_system_major_extension_supported",
        sys::HSA_STATUS_ERROR,
        {
            if result.is_null() {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            let ok = extension == HSA_EXTENSION_AMD_LOADER && major == 1;
            // SAFETY: non-NULL out pointers of the documented types.
            unsafe {
                result.write(ok);
                if ok && !minor.is_null() {
                    minor.write(3);
                }
            }
            sys::HSA_STATUS_SUCCESS
        }
    )
}

unsafe extern "C" fn hsa_system_get_major_extension_table(
    extension: u16,
    major: u16,
    length: usize,
    table: *mut c_void,
) -> hsa_status_t {
    guard!(
        "hsa_system_get_major_extension_table",
        sys::HSA_STATUS_ERROR,
        {
            if extension != HSA_EXTENSION_AMD_LOADER || major != 1 || table.is_null() {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            let t = loader_table();
            let n = length.min(std::mem::size_of::<LoaderTable>());
            // SAFETY: the caller gives `length` writable bytes; at most the table's size is copied.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (&t as *const LoaderTable).cast::<u8>(),
                    table.cast(),
                    n,
                )
            };
            sys::HSA_STATUS_SUCCESS
        }
    )
}

unsafe extern "C" fn loader_query_host_address(
    device: *const c_void,
    host: *mut *const c_void,
) -> hsa_status_t {
    guard!(
        "hsa_ven_amd_loader_query_host_address",
        sys::HSA_STATUS_ERROR,
        {
            if host.is_null() || state::find(device as u64).is_none() {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            // SAFETY: non-NULL out pointer; simulated memory is host memory.
            unsafe { host.write(device) };
            sys::HSA_STATUS_SUCCESS
        }
    )
}

unsafe extern "C" fn loader_query_executable(device: *const c_void, out: *mut u64) -> hsa_status_t {
    guard!(
        "hsa_ven_amd_loader_query_executable",
        sys::HSA_STATUS_ERROR,
        {
            if out.is_null() {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            let syms = REG.symbols.lock();
            let ex = REG.executables.lock();
            for (h, e) in ex.iter() {
                for s in e.symbols.iter().filter_map(|s| syms.get(s)) {
                    let a = device as u64;
                    if !s.is_kernel && a >= s.address && a < s.address + u64::from(s.size.max(1)) {
                        // SAFETY: non-NULL out pointer to an `hsa_executable_t`.
                        unsafe { out.write(*h) };
                        return sys::HSA_STATUS_SUCCESS;
                    }
                }
            }
            sys::HSA_STATUS_ERROR_INVALID_ARGUMENT
        }
    )
}

type ExecCallback = Option<unsafe extern "C" fn(u64, *mut c_void) -> hsa_status_t>;

unsafe extern "C" fn loader_iterate_executables(
    cb: ExecCallback,
    data: *mut c_void,
) -> hsa_status_t {
    guard!(
        "hsa_ven_amd_loader_iterate_executables",
        sys::HSA_STATUS_ERROR,
        {
            let Some(cb) = cb else {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            };
            let Some(inst) = state::current() else {
                return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
            };
            if inst.injected.fire(SimFault::LoaderIterationFails) {
                return sys::HSA_STATUS_ERROR;
            }
            let execs = inst.executables.lock().clone();
            for e in execs {
                // SAFETY: the application's callback with its data.
                let st = unsafe { cb(e, data) };
                if st != sys::HSA_STATUS_SUCCESS {
                    return st;
                }
            }
            sys::HSA_STATUS_SUCCESS
        }
    )
}

/// `hsa_executable_destroy`: the executable and its symbols disappear, its variables' memory
/// is released (as the real loader unloads the code object's segments).
unsafe extern "C" fn hsa_executable_destroy(exec: u64) -> hsa_status_t {
    guard!("hsa_executable_destroy", sys::HSA_STATUS_ERROR, {
        let Some(rec) = REG.executables.lock().remove(&exec) else {
            return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
        };
        for inst in state::instances() {
            inst.executables.lock().retain(|e| *e != exec);
        }
        let mut symbols = REG.symbols.lock();
        for s in rec.symbols {
            if let Some(sym) = symbols.remove(&s) {
                if !sym.is_kernel && sym.address != 0 {
                    state::free(sym.address);
                }
            }
        }
        sys::HSA_STATUS_SUCCESS
    })
}

type SymbolCallback =
    Option<unsafe extern "C" fn(u64, sys::hsa_agent_t, u64, *mut c_void) -> hsa_status_t>;

unsafe extern "C" fn hsa_executable_iterate_agent_symbols(
    exec: u64,
    agent: sys::hsa_agent_t,
    cb: SymbolCallback,
    data: *mut c_void,
) -> hsa_status_t {
    guard!(
        "hsa_executable_iterate_agent_symbols",
        sys::HSA_STATUS_ERROR,
        {
            let Some(cb) = cb else {
                return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
            };
            let Some(symbols) = REG.executables.lock().get(&exec).map(|e| e.symbols.clone()) else {
                return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
            };
            for s in symbols {
                let same = REG
                    .symbols
                    .lock()
                    .get(&s)
                    .is_some_and(|r| r.agent == agent.handle);
                if same {
                    // SAFETY: the application's callback with its data.
                    let st = unsafe { cb(exec, agent, s, data) };
                    if st != sys::HSA_STATUS_SUCCESS {
                        return st;
                    }
                }
            }
            sys::HSA_STATUS_SUCCESS
        }
    )
}

unsafe extern "C" fn hsa_executable_symbol_get_info(
    sym: u64,
    attr: u32,
    value: *mut c_void,
) -> hsa_status_t {
    guard!("hsa_executable_symbol_get_info", sys::HSA_STATUS_ERROR, {
        let Some(s) = REG.symbols.lock().get(&sym).cloned() else {
            return HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL;
        };
        // SAFETY: in each arm, `value` points to the attribute's documented type; NAME gets
        // NAME_LENGTH bytes (not NUL-terminated), as in the real runtime.
        unsafe {
            match attr {
                0 => put(value, u32::from(s.is_kernel)),
                1 => put(value, s.name.len() as u32),
                2 => {
                    if value.is_null() {
                        return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
                    }
                    std::ptr::copy_nonoverlapping(s.name.as_ptr(), value.cast(), s.name.len());
                    sys::HSA_STATUS_SUCCESS
                }
                5 => put(value, 0u32),
                6 => put(value, 0u32),
                7 => put(value, 0u32),
                8 => put(value, 16u32),
                9 => put(value, s.size),
                10 => put(value, s.is_const),
                17 => put(value, true),
                11 if s.is_kernel => put(
                    value,
                    KERNARG_SIZES
                        .lock()
                        .get(&s.address)
                        .copied()
                        .unwrap_or(DEFAULT_KERNARG_SEGMENT_SIZE),
                ),
                20 => put(value, sys::hsa_agent_t { handle: s.agent }),
                21 if !s.is_kernel => put(value, s.address),
                22 if s.is_kernel => put(value, s.address),
                _ => sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    })
}
