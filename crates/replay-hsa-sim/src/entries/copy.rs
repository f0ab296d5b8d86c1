//! The AMD asynchronous copy entries (SPEC §9.1): `hsa_amd_memory_async_copy` and
//! `_on_engine`, submitted to the copy engine of the instance owning the agent.

use std::ffi::c_void;

use replay_hsa::sys::{self, hsa_status_t};

use super::boundary::guard;
use crate::fault::SimFault;
use crate::state::{self, CopyJob};

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
pub(super) unsafe extern "C" fn hsa_amd_memory_async_copy(
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
pub(super) unsafe extern "C" fn hsa_amd_memory_async_copy_on_engine(
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
