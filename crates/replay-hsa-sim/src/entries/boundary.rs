//! The C boundary every entry of the simulated API table shares (SPEC §9.1): the panic guard
//! (`guard!`: the body under `catch_unwind`, a panic logged and answered with the entry's
//! error value) and the write through an attribute's out pointer.

use std::ffi::c_void;

use replay_hsa::sys::{self, hsa_status_t};

macro_rules! guard {
    ($name:literal, $on_panic:expr, $body:block) => {
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| $body)) {
            Ok(v) => v,
            Err(_) => {
                log::error!("hsa-sim: {} panicked", $name);
                $on_panic
            }
        }
    };
}

/// Writes `v` through the caller's `value` pointer.
///
/// # Safety
///
/// 1. `value` is NULL or valid for writing a `T` (the attribute's documented type).
pub(super) unsafe fn put<T>(value: *mut c_void, v: T) -> hsa_status_t {
    if value.is_null() {
        return sys::HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: caller's item 1; unaligned write for leniency.
    unsafe { value.cast::<T>().write_unaligned(v) };
    sys::HSA_STATUS_SUCCESS
}

pub(super) use guard;
