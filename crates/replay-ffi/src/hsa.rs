//! The HSA tool entry points of the one shared object (feature `hsa`, SPEC §9.1), declared in
//! `include/kernel_replay_hsa.h`.
//!
//! `HSA_TOOLS_LIB=libkernel_replay.so` makes the HSA runtime call [`OnLoad`] with its API
//! table at `hsa_init`, and [`OnUnload`] at shutdown. Both run the backend ([`replay_hsa`])
//! under `catch_unwind`: a panic answers `false` (nothing installed, or what was installed
//! keeps passing calls to the originals) and never unwinds into the runtime.
//! `OnLoad` first creates the library's one service ([`crate::service`]), so the stderr log
//! sink is installed and a tool attached through `KREPLAY_HSA_TOOL` configures that service.

use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::checked::{copy_out_str, guard, Error};
use crate::sys::kreplay_status_t;

/// The HSA runtime's tool entry: validates the API table's versions, saves the original
/// entries, installs the allocation wrappers and attaches the tool named by
/// `KREPLAY_HSA_TOOL`. `false` (nothing installed, the reason logged) for a table this build
/// does not bind, or if anything panicked.
///
/// # Safety
///
/// 1. `table` is NULL or the runtime's `HsaApiTable*`: a version header and, as far as each
///    table's size says, sub-table pointers each NULL or pointing to a table as large as its
///    own `minor_id`; alive, and not used by other threads during the call.
/// 2. `failed_tool_names` is NULL or points to `failed_tool_count` pointers, each NULL or a
///    NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn OnLoad(
    table: *mut c_void,
    runtime_version: u64,
    failed_tool_count: u64,
    failed_tool_names: *const *const c_char,
) -> bool {
    catch_unwind(AssertUnwindSafe(|| {
        replay_hsa::set_service(crate::service());
        replay_tools::library::register_loader(crate::tool::load_tool_library);
        // SAFETY: the caller's items 1 and 2.
        unsafe { replay_hsa::on_load(table, runtime_version, failed_tool_count, failed_tool_names) }
    }))
    .unwrap_or_else(|_| {
        log::error!("[kernel-replay] OnLoad: caught a panic; answering false");
        false
    })
}

/// The HSA runtime's tool exit: calls the attached tool's `kreplay_tool_fini` if it has one.
/// The table is left as it is (the wrappers keep calling the originals).
#[no_mangle]
pub extern "C" fn OnUnload() {
    if catch_unwind(replay_hsa::on_unload).is_err() {
        log::error!("[kernel-replay] OnUnload: caught a panic");
    }
}

/// The HSA backend's state as JSON: the installed table versions and wrapped entries (or why
/// the last `OnLoad` installed nothing), the attached tool, the agents met, every tracked
/// allocation with its class, and the asynchronous copies seen. For diagnostics and tests.
///
/// # Safety
///
/// 1. `buffer` is NULL or valid for writes of `buffer_size` bytes.
/// 2. `required` is NULL (refused) or valid for a write of a `usize`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_hsa_state_json(
    buffer: *mut c_char,
    buffer_size: usize,
    required: *mut usize,
) -> kreplay_status_t {
    guard("kreplay_hsa_state_json", || {
        let json = replay_hsa::backend().state_json();
        // SAFETY: the caller's items 1 and 2.
        unsafe { copy_out_str(&json, buffer, buffer_size, required) }
    })
}

/// Declares `queue` (an `hsa_queue_t*` the tool created, typically in `kreplay_tool_init`) as
/// the tool's own: every packet on it is tool work, never gated, parked or replayed, so work
/// the tool submits there in PASS ENTER and waits for in PASS EXIT runs inside the window.
/// Queues created from inside a tool callback are the tool's already. `NULL_POINTER` for NULL,
/// `NOT_FOUND` when `queue` is not an intercepted queue (created before `OnLoad`, or not a
/// queue).
///
/// # Safety
///
/// 1. `queue` is NULL or any pointer: it is only compared with the intercepted queues'
///    addresses, never read.
#[no_mangle]
pub unsafe extern "C" fn kreplay_hsa_mark_tool_queue(queue: *const c_void) -> kreplay_status_t {
    guard("kreplay_hsa_mark_tool_queue", || {
        if queue.is_null() {
            return Err(Error::NullPointer("queue"));
        }
        if replay_hsa::intercept::mark_tool_queue(queue.cast()) {
            Ok(())
        } else {
            Err(Error::NotFound(format!(
                "{queue:p} is not an intercepted queue (queues created before OnLoad are not intercepted)"
            )))
        }
    })
}
