//! The `extern "C"` entry points of the capture a tool asks for in PASS ENTER (SPEC §13, §10):
//! the request, and what became of it (`kreplay_capture_result`, `kreplay_capture_message`),
//! thin over the crate's `capture` file, in the fixed order of every entry: shut down,
//! pointers, then the request or the look-up.

use std::ffi::c_char;

use crate::checked::{
    c_str, check_versioned, copy_out_str, guard, non_null, write_versioned, Error,
};
use crate::state::library;
use crate::sys::*;

/// Inside a PASS ENTER callback: asks for a capture of this pass (SPEC §13) into the new folder
/// `dir`, with at most `max_bytes` of regions (0: 4 GiB).
///
/// # Safety
///
/// 1. `dir` is NULL (refused) or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn kreplay_request_capture(
    dir: *const c_char,
    max_bytes: u64,
) -> kreplay_status_t {
    guard("kreplay_request_capture", || {
        library()?;
        // SAFETY: NULL or NUL-terminated (caller, item 1); read only during this call.
        let dir = unsafe { c_str(dir, "dir") }?;
        crate::capture::request(dir, max_bytes)
    })
}

/// What became of the last capture asked for into the folder `dir`.
///
/// # Safety
///
/// 1. `dir` is NULL (refused) or a NUL-terminated string.
/// 2. `result` is NULL (refused) or points to a `kreplay_capture_result_t` whose first 8
///    bytes are its `size`, and whose `size` bytes are writable.
#[no_mangle]
pub unsafe extern "C" fn kreplay_capture_result(
    dir: *const c_char,
    result: *mut kreplay_capture_result_t,
) -> kreplay_status_t {
    guard("kreplay_capture_result", || {
        library()?;
        // SAFETY: NULL or NUL-terminated (caller, item 1); read only during this call.
        let dir = unsafe { c_str(dir, "dir") }?;
        // SAFETY: NULL or a struct whose first 8 bytes are readable (caller, item 2).
        unsafe { check_versioned(result.cast_const(), "result", first_version::CAPTURE_RESULT) }?;
        let (r, _) = crate::capture::result(dir)?;
        // SAFETY: checked above; `size` bytes writable (caller, item 2); the struct's first
        // field is its `size`.
        unsafe { write_versioned(result, "result", first_version::CAPTURE_RESULT, r) }
    })
}

/// The message of the last capture asked for into `dir` (where it was written, or why not),
/// copied into `buffer` as `kreplay_policy_json` does.
///
/// # Safety
///
/// 1. `dir` is NULL (refused) or a NUL-terminated string.
/// 2. `buffer` is NULL or valid for writes of `buffer_size` bytes.
/// 3. `required` is NULL (refused) or valid for a write of one `size_t`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_capture_message(
    dir: *const c_char,
    buffer: *mut c_char,
    buffer_size: usize,
    required: *mut usize,
) -> kreplay_status_t {
    guard("kreplay_capture_message", || {
        library()?;
        // SAFETY: NULL or NUL-terminated (caller, item 1); read only during this call.
        let dir = unsafe { c_str(dir, "dir") }?;
        non_null(required, "required")?;
        if buffer.is_null() && buffer_size > 0 {
            return Err(Error::NullPointer("buffer (with buffer_size > 0)"));
        }
        let (_, message) = crate::capture::result(dir)?;
        // SAFETY: `buffer` and `required` as the caller promised (items 2 and 3).
        unsafe { copy_out_str(&message, buffer, buffer_size, required) }
    })
}
