//! The memory entries of the simulated tables (SPEC §9.1, §7.1): regions and AMD memory pools
//! (iteration, info, access), allocation and free from them, `hsa_memory_copy` and
//! `hsa_amd_memory_fill`.

use std::ffi::c_void;

use replay_hsa::sys::{self, hsa_status_t};

use super::boundary::{guard, put};
use crate::fault::SimFault;
use crate::state::{self, REG};

type RegionCallback = Option<unsafe extern "C" fn(sys::hsa_region_t, *mut c_void) -> hsa_status_t>;

pub(super) unsafe extern "C" fn hsa_agent_iterate_regions(
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

pub(super) unsafe extern "C" fn hsa_region_get_info(
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

pub(super) unsafe extern "C" fn hsa_memory_allocate(
    region: sys::hsa_region_t,
    size: usize,
    out: *mut *mut c_void,
) -> hsa_status_t {
    guard!("hsa_memory_allocate", sys::HSA_STATUS_ERROR, {
        alloc_into(region.handle, size, out)
    })
}

pub(super) unsafe extern "C" fn hsa_memory_free(ptr: *mut c_void) -> hsa_status_t {
    guard!("hsa_memory_free", sys::HSA_STATUS_ERROR, {
        if ptr.is_null() || state::free(ptr as u64) {
            sys::HSA_STATUS_SUCCESS
        } else {
            sys::HSA_STATUS_ERROR_INVALID_ARGUMENT
        }
    })
}

pub(super) unsafe extern "C" fn hsa_memory_copy(
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

type PoolCallback =
    Option<unsafe extern "C" fn(sys::hsa_amd_memory_pool_t, *mut c_void) -> hsa_status_t>;

pub(super) unsafe extern "C" fn hsa_amd_agent_iterate_memory_pools(
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

pub(super) unsafe extern "C" fn hsa_amd_memory_pool_get_info(
    pool: sys::hsa_amd_memory_pool_t,
    attr: u32,
    value: *mut c_void,
) -> hsa_status_t {
    guard!("hsa_amd_memory_pool_get_info", sys::HSA_STATUS_ERROR, {
        pool_info(pool.handle, attr, value, false)
    })
}

pub(super) unsafe extern "C" fn hsa_amd_agent_memory_pool_get_info(
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

pub(super) unsafe extern "C" fn hsa_amd_agents_allow_access(
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

pub(super) unsafe extern "C" fn hsa_amd_memory_pool_allocate(
    pool: sys::hsa_amd_memory_pool_t,
    size: usize,
    _flags: u32,
    out: *mut *mut c_void,
) -> hsa_status_t {
    guard!("hsa_amd_memory_pool_allocate", sys::HSA_STATUS_ERROR, {
        alloc_into(pool.handle, size, out)
    })
}

/// `hsa_amd_memory_fill`: `count` 32-bit words of `value` at `ptr`, synchronously.
pub(super) unsafe extern "C" fn hsa_amd_memory_fill(
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
