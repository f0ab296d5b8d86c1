//! The entry guard and the last error (SPEC §10): an entry point's body runs under
//! `catch_unwind`, so no panic crosses the C boundary; its result becomes the status, and its
//! message (prefixed with the function's name) this thread's `kreplay_last_error`.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::error::Error;
use super::pointer::lossy_cstring;
use crate::sys::*;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `msg` as this thread's last error (NUL bytes are replaced).
pub(crate) fn set_last_error(msg: &str) {
    let c = lossy_cstring(msg);
    // At thread teardown the slot may be gone; the message is then dropped.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

/// Clears this thread's last error.
pub(crate) fn clear_last_error() {
    let _ = LAST_ERROR.try_with(|e| {
        let mut e = e.borrow_mut();
        if !e.as_bytes().is_empty() {
            *e = CString::default();
        }
    });
}

/// This thread's last error; valid until the next call that sets or clears it.
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// Runs an entry point's body: catches panics, maps the result to a status, records the error
/// message (prefixed with the function's name) or clears it.
pub(crate) fn guard(
    name: &'static str,
    body: impl FnOnce() -> Result<(), Error>,
) -> kreplay_status_t {
    let result = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic with a non-string payload".to_owned());
        log::error!("[kernel-replay] {name}: caught a panic: {msg}");
        Err(Error::Internal(format!("a panic was caught: {msg}")))
    });
    match result {
        Ok(()) => {
            clear_last_error();
            KREPLAY_STATUS_OK
        }
        Err(e) => {
            set_last_error(&format!("{name}: {e}"));
            e.status()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;

    #[test]
    fn the_guard_turns_panics_into_internal_and_records_messages() {
        let s = guard("kreplay_test", || panic!("boom"));
        assert_eq!(s, KREPLAY_STATUS_INTERNAL);
        // SAFETY: the last error is a NUL-terminated string owned by this thread.
        let msg = unsafe { CStr::from_ptr(last_error_ptr()) }
            .to_str()
            .unwrap()
            .to_owned();
        assert!(msg.starts_with("kreplay_test: internal error"), "{msg}");
        assert!(msg.contains("boom"), "{msg}");
        let s = guard("kreplay_test", || Err(Error::NullPointer("out")));
        assert_eq!(s, KREPLAY_STATUS_NULL_POINTER);
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(last_error_ptr()) }
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(msg, "kreplay_test: `out` is NULL");
        assert_eq!(guard("kreplay_test", || Ok(())), KREPLAY_STATUS_OK);
        // SAFETY: as above.
        assert_eq!(unsafe { CStr::from_ptr(last_error_ptr()) }, c"");
    }
}
