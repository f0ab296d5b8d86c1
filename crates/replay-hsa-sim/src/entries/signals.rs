//! The signal entries of the simulated tables (SPEC §9.1): create, destroy, load, store, add,
//! subtract, exchange and wait (timeout hints in timestamp ticks), and the AMD extension's
//! async-events thread (`hsa_amd_signal_async_handler`, `hsa_amd_async_function`).

use std::ffi::c_void;

use replay_hsa::sys::{self, hsa_status_t};

use super::boundary::guard;
use crate::fault::SimFault;
use crate::state;

pub(super) unsafe extern "C" fn hsa_signal_create(
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

pub(super) unsafe extern "C" fn hsa_amd_signal_create(
    initial: i64,
    n: u32,
    consumers: *const sys::hsa_agent_t,
    _attributes: u64,
    out: *mut sys::hsa_signal_t,
) -> hsa_status_t {
    // SAFETY: same contract as `hsa_signal_create`.
    unsafe { hsa_signal_create(initial, n, consumers, out) }
}

pub(super) unsafe extern "C" fn hsa_signal_destroy(s: sys::hsa_signal_t) -> hsa_status_t {
    guard!("hsa_signal_destroy", sys::HSA_STATUS_ERROR, {
        if state::signal_destroy(s.handle) {
            sys::HSA_STATUS_SUCCESS
        } else {
            sys::HSA_STATUS_ERROR_INVALID_SIGNAL
        }
    })
}

pub(super) unsafe extern "C" fn hsa_signal_load(s: sys::hsa_signal_t) -> i64 {
    guard!("hsa_signal_load", -1, {
        state::signal(s.handle).map_or(-1, |s| s.load())
    })
}

pub(super) unsafe extern "C" fn hsa_signal_store(s: sys::hsa_signal_t, v: i64) {
    guard!("hsa_signal_store", (), {
        if let Some(sig) = state::signal(s.handle) {
            sig.store_silent(v);
            sig.on_store();
        }
    })
}

pub(super) unsafe extern "C" fn hsa_signal_silent_store(s: sys::hsa_signal_t, v: i64) {
    guard!("hsa_signal_silent_store", (), {
        if let Some(sig) = state::signal(s.handle) {
            sig.store_silent(v);
        }
    })
}

pub(super) unsafe extern "C" fn hsa_signal_add(s: sys::hsa_signal_t, v: i64) {
    guard!("hsa_signal_add", (), {
        if let Some(sig) = state::signal(s.handle) {
            sig.update(|x| x.wrapping_add(v));
        }
    })
}

pub(super) unsafe extern "C" fn hsa_signal_subtract(s: sys::hsa_signal_t, v: i64) {
    guard!("hsa_signal_subtract", (), {
        if let Some(sig) = state::signal(s.handle) {
            sig.update(|x| x.wrapping_sub(v));
        }
    })
}

pub(super) unsafe extern "C" fn hsa_signal_exchange(s: sys::hsa_signal_t, v: i64) -> i64 {
    guard!("hsa_signal_exchange", -1, {
        state::signal(s.handle).map_or(-1, |sig| sig.update(|_| v))
    })
}

/// `hsa_signal_wait_*`: conditions EQ 0, NE 1, LT 2, GTE 3; the timeout hint is read as
/// nanoseconds (`u64::MAX`: no timeout). Returns the value observed last.
pub(super) unsafe extern "C" fn hsa_signal_wait(
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

/// `hsa_amd_signal_async_handler`: the handler runs on the async-events thread when the
/// condition holds, and stays armed while it answers true.
pub(super) unsafe extern "C" fn hsa_amd_signal_async_handler(
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
pub(super) unsafe extern "C" fn hsa_amd_async_function(
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
