//! The AMD entries for memory the tool may never have seen (SPEC §9.1, §7.1):
//! `hsa_amd_pointer_info` and the pointer types it answers, host memory locked and unlocked
//! (`hsa_amd_memory_lock`, `_lock_to_pool`, `_unlock`) and IPC handles (`hsa_amd_ipc_memory_*`).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::LazyLock;

use parking_lot::Mutex;

use replay_hsa::sys::{self, hsa_status_t};

use super::boundary::guard;
use crate::fault::SimFault;
use crate::state::{self, REG};

pub(super) unsafe extern "C" fn hsa_amd_pointer_info(
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
pub(super) unsafe extern "C" fn hsa_amd_memory_lock(
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
pub(super) unsafe extern "C" fn hsa_amd_memory_lock_to_pool(
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
pub(super) unsafe extern "C" fn hsa_amd_memory_unlock(host_ptr: *mut c_void) -> hsa_status_t {
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

/// The first word of a simulated IPC handle.
const IPC_MAGIC: u32 = 0x4b52_4950;

/// `hsa_amd_ipc_memory_create`: a handle naming the block at `ptr` (its base) and `len`.
pub(super) unsafe extern "C" fn hsa_amd_ipc_memory_create(
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
pub(super) unsafe extern "C" fn hsa_amd_ipc_memory_attach(
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
pub(super) unsafe extern "C" fn hsa_amd_ipc_memory_detach(mapped: *mut c_void) -> hsa_status_t {
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
