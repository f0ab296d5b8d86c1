//! Status codes to `Result` (STYLE: the `result` layer), and the errors of table handling.

use crate::sys::{self, hsa_status_t};

/// A failed HSA call: the entry's name and the status it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{call} returned {} ({status:#x})", status_name(*.status))]
pub struct HsaError {
    /// The entry called, e.g. `hsa_amd_pointer_info`.
    pub call: &'static str,
    /// What it returned.
    pub status: hsa_status_t,
}

/// `Ok(())` for `HSA_STATUS_SUCCESS` (and `HSA_STATUS_INFO_BREAK`, which iterations return
/// when a callback stopped them on purpose), else the error naming `call`.
pub fn check(call: &'static str, status: hsa_status_t) -> Result<(), HsaError> {
    match status {
        sys::HSA_STATUS_SUCCESS | sys::HSA_STATUS_INFO_BREAK => Ok(()),
        status => Err(HsaError { call, status }),
    }
}

/// The header's name of a status code (the common ones), for messages.
pub fn status_name(status: hsa_status_t) -> &'static str {
    match status {
        sys::HSA_STATUS_SUCCESS => "HSA_STATUS_SUCCESS",
        sys::HSA_STATUS_INFO_BREAK => "HSA_STATUS_INFO_BREAK",
        sys::HSA_STATUS_ERROR => "HSA_STATUS_ERROR",
        sys::HSA_STATUS_ERROR_INVALID_ARGUMENT => "HSA_STATUS_ERROR_INVALID_ARGUMENT",
        sys::HSA_STATUS_ERROR_INVALID_QUEUE_CREATION => "HSA_STATUS_ERROR_INVALID_QUEUE_CREATION",
        sys::HSA_STATUS_ERROR_INVALID_ALLOCATION => "HSA_STATUS_ERROR_INVALID_ALLOCATION",
        sys::HSA_STATUS_ERROR_INVALID_AGENT => "HSA_STATUS_ERROR_INVALID_AGENT",
        sys::HSA_STATUS_ERROR_INVALID_REGION => "HSA_STATUS_ERROR_INVALID_REGION",
        sys::HSA_STATUS_ERROR_INVALID_SIGNAL => "HSA_STATUS_ERROR_INVALID_SIGNAL",
        sys::HSA_STATUS_ERROR_INVALID_QUEUE => "HSA_STATUS_ERROR_INVALID_QUEUE",
        sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES => "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
        sys::HSA_STATUS_ERROR_INVALID_PACKET_FORMAT => "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT",
        sys::HSA_STATUS_ERROR_RESOURCE_FREE => "HSA_STATUS_ERROR_RESOURCE_FREE",
        sys::HSA_STATUS_ERROR_NOT_INITIALIZED => "HSA_STATUS_ERROR_NOT_INITIALIZED",
        _ => "an HSA status",
    }
}

/// Why `OnLoad` installed nothing. Every variant leaves the application untouched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// The runtime passed a NULL table (or a NULL sub-table the backend needs).
    #[error("the {table} table pointer is NULL")]
    Null {
        /// `root`, `core` or `amd_ext`.
        table: &'static str,
    },
    /// A major version this build has no binding for: entries may have moved.
    #[error("the {table} table has major version {major}, which this build does not bind (known: {known})")]
    UnknownMajor {
        /// Which table.
        table: &'static str,
        /// Its major version.
        major: u32,
        /// The majors this build binds.
        known: &'static str,
    },
    /// The table is too small (by its `minor_id`, its size) for an entry the backend needs.
    #[error("the {table} table (major {major}) is {size} bytes, too small for {entry}, which needs {needed}")]
    TooSmall {
        /// Which table.
        table: &'static str,
        /// Its major version.
        major: u32,
        /// The entry the backend needs.
        entry: &'static str,
        /// Its size (`minor_id`).
        size: u32,
        /// The size the entry needs (its offset plus a pointer).
        needed: usize,
    },
    /// A needed entry is present by size but empty.
    #[error("the {table} table's entry {entry} is NULL")]
    NullEntry {
        /// Which table.
        table: &'static str,
        /// The entry.
        entry: &'static str,
    },
    /// The table already holds this library's wrappers and the originals are unknown.
    #[error("the {table} table's entry {entry} already holds this library's wrapper, and the original is unknown")]
    AlreadyWrapped {
        /// Which table.
        table: &'static str,
        /// The entry.
        entry: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_results() {
        assert_eq!(check("x", sys::HSA_STATUS_SUCCESS), Ok(()));
        assert_eq!(check("x", sys::HSA_STATUS_INFO_BREAK), Ok(()));
        let e = check("hsa_init", sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES).unwrap_err();
        assert_eq!(e.status, 0x1008);
        assert_eq!(
            e.to_string(),
            "hsa_init returned HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008)"
        );
        assert_eq!(status_name(0x4242), "an HSA status");
    }
}
