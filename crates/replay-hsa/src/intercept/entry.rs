//! What every table wrapper of [`crate::intercept`] starts from (SPEC §9.1): the saved
//! originals (and the optional entry) it calls, or the status it answers without them, and the
//! guard its bookkeeping runs under.
//!
//! Every wrapper calls the original entry with the caller's arguments unchanged and returns its
//! status; the bookkeeping runs under `catch_unwind` ([`quietly`]), so a bug here loses a record
//! (logged), never the application's call.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::state::{backend, Originals};
use crate::sys::{self, hsa_status_t};

/// Runs bookkeeping that must never unwind into the runtime.
pub(crate) fn quietly(what: &str, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        log::error!("[kernel-replay] hsa: bookkeeping of {what} panicked; the record is lost, the call went through");
    }
}

/// The saved originals, or the status a wrapper answers when they are missing (never after a
/// successful `OnLoad`).
pub(crate) fn originals() -> Result<std::sync::Arc<Originals>, hsa_status_t> {
    backend()
        .originals()
        .ok_or(sys::HSA_STATUS_ERROR_NOT_INITIALIZED)
}

/// The saved originals and the optional entry `pick` takes from them, or the status a wrapper
/// answers when either is missing (never after a successful `OnLoad` that found the entry).
pub(crate) fn original_entry<F>(
    pick: impl FnOnce(&Originals) -> Option<F>,
) -> Result<(std::sync::Arc<Originals>, F), hsa_status_t> {
    let o = originals()?;
    let f = pick(&o).ok_or(sys::HSA_STATUS_ERROR_NOT_INITIALIZED)?;
    Ok((o, f))
}
