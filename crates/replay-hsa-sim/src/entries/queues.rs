//! The queue entries of the simulated tables (SPEC §9.1): user-mode queues of the core table
//! (create, destroy, the read and write index operations) and the AMD extension's
//! intercepting queues (`hsa_amd_queue_intercept_create`, `_register`), over the queues file.

use std::ffi::c_void;
use std::sync::atomic::Ordering;

use replay_hsa::sys::{self, hsa_status_t};

use super::boundary::guard;
use crate::queue::{self, InterceptHandler, QueueCallback};

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn hsa_queue_create(
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

pub(super) unsafe extern "C" fn hsa_queue_destroy(q: *mut sys::hsa_queue_t) -> hsa_status_t {
    guard!("hsa_queue_destroy", sys::HSA_STATUS_ERROR, {
        queue::destroy(q)
    })
}

pub(super) unsafe extern "C" fn load_read_index(q: *const sys::hsa_queue_t) -> u64 {
    guard!("hsa_queue_load_read_index", u64::MAX, {
        queue::lookup(q).map_or(u64::MAX, |e| e.indices().read.load(Ordering::Acquire))
    })
}

pub(super) unsafe extern "C" fn load_write_index(q: *const sys::hsa_queue_t) -> u64 {
    guard!("hsa_queue_load_write_index", u64::MAX, {
        queue::lookup(q).map_or(u64::MAX, |e| e.indices().write.load(Ordering::Acquire))
    })
}

pub(super) unsafe extern "C" fn store_write_index(q: *const sys::hsa_queue_t, v: u64) {
    guard!("hsa_queue_store_write_index", (), {
        if let Some(e) = queue::lookup(q) {
            e.indices().write.store(v, Ordering::Release);
        }
    })
}

pub(super) unsafe extern "C" fn add_write_index(q: *const sys::hsa_queue_t, v: u64) -> u64 {
    guard!("hsa_queue_add_write_index", u64::MAX, {
        queue::lookup(q).map_or(u64::MAX, |e| {
            e.indices().write.fetch_add(v, Ordering::AcqRel)
        })
    })
}

pub(super) unsafe extern "C" fn cas_write_index(
    q: *const sys::hsa_queue_t,
    expected: u64,
    v: u64,
) -> u64 {
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

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn hsa_amd_queue_intercept_create(
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

pub(super) unsafe extern "C" fn hsa_amd_queue_intercept_register(
    q: *mut sys::hsa_queue_t,
    handler: InterceptHandler,
    data: *mut c_void,
) -> hsa_status_t {
    guard!("hsa_amd_queue_intercept_register", sys::HSA_STATUS_ERROR, {
        queue::register(q, handler, data as usize)
    })
}
