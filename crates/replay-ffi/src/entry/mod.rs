//! The `extern "C"` entry points of `include/kernel_replay.h` (SPEC §10), one per declared
//! function.
//!
//! Each one is thin: it runs its body under the checked layer's guard (no panic crosses the
//! boundary; the status and `kreplay_last_error` message come from one place), checks its
//! arguments through the checked layer in a fixed order — shut down, inside a callback (where refused), pointers
//! and enumeration values, then handles — and calls the core or the context registry.
//! The header documents each function for C users; the `# Safety` sections here state the
//! pointer contracts in Rust terms.
//!
//! One area has a file of its own, re-exported here: `capture` (SPEC §13), the capture a
//! tool asks for in PASS ENTER and what became of it.

use std::ffi::{c_char, c_void};
use std::panic::catch_unwind;

use replay_core::filter::{DispatchRange, KernelFilter};
use replay_core::{ContextControl, PolicyError};

use crate::checked::{
    c_str, check_versioned, copy_out_str, decode_subscription, decode_support, guard,
    last_error_ptr, non_null, read_versioned, summary_to_c, write_out, write_versioned, Error,
};
use crate::state::{library, library_if_created, mark_shut_down, stale, ContextEntry, Owner};
use crate::sys::*;
use crate::tool::{live_outcome, refuse_in_callback, sink_closure, CTool, ContextToggles};
use crate::wait::{wait_until_idle, window_wait_bounds};

mod capture;

pub use capture::*;

/// Most patterns a filter may list.
const MAX_PATTERNS: u64 = 65536;

/// The registry id of a live handle.
fn context_id(context: kreplay_context_t) -> Result<replay_core::ContextId, Error> {
    let lib = library()?;
    let handles = lib.handles.lock();
    Ok(handles.get(context.handle)?.id)
}

// ----- Status, errors, version -------------------------------------------------------------

/// The symbolic name of a status code; never NULL, static.
///
/// # Safety
///
/// No preconditions.
#[no_mangle]
pub extern "C" fn kreplay_status_string(status: kreplay_status_t) -> *const c_char {
    let s = match status {
        KREPLAY_STATUS_OK => c"KREPLAY_STATUS_OK",
        KREPLAY_STATUS_NULL_POINTER => c"KREPLAY_STATUS_NULL_POINTER",
        KREPLAY_STATUS_BAD_SIZE => c"KREPLAY_STATUS_BAD_SIZE",
        KREPLAY_STATUS_BAD_ENUM => c"KREPLAY_STATUS_BAD_ENUM",
        KREPLAY_STATUS_INVALID_HANDLE => c"KREPLAY_STATUS_INVALID_HANDLE",
        KREPLAY_STATUS_ALREADY_CONFIGURED => c"KREPLAY_STATUS_ALREADY_CONFIGURED",
        KREPLAY_STATUS_NOT_CONFIGURED => c"KREPLAY_STATUS_NOT_CONFIGURED",
        KREPLAY_STATUS_IN_CALLBACK => c"KREPLAY_STATUS_IN_CALLBACK",
        KREPLAY_STATUS_CONTEXT_ERROR => c"KREPLAY_STATUS_CONTEXT_ERROR",
        KREPLAY_STATUS_CONTEXT_NOT_STARTED => c"KREPLAY_STATUS_CONTEXT_NOT_STARTED",
        KREPLAY_STATUS_UNSUPPORTED => c"KREPLAY_STATUS_UNSUPPORTED",
        KREPLAY_STATUS_POLICY_ERROR => c"KREPLAY_STATUS_POLICY_ERROR",
        KREPLAY_STATUS_INTERNAL => c"KREPLAY_STATUS_INTERNAL",
        KREPLAY_STATUS_SHUT_DOWN => c"KREPLAY_STATUS_SHUT_DOWN",
        KREPLAY_STATUS_BAD_ARGUMENT => c"KREPLAY_STATUS_BAD_ARGUMENT",
        KREPLAY_STATUS_BUFFER_TOO_SMALL => c"KREPLAY_STATUS_BUFFER_TOO_SMALL",
        KREPLAY_STATUS_ALREADY_EXISTS => c"KREPLAY_STATUS_ALREADY_EXISTS",
        KREPLAY_STATUS_DEVICE_ERROR => c"KREPLAY_STATUS_DEVICE_ERROR",
        KREPLAY_STATUS_OUT_OF_MEMORY => c"KREPLAY_STATUS_OUT_OF_MEMORY",
        KREPLAY_STATUS_NOT_FOUND => c"KREPLAY_STATUS_NOT_FOUND",
        _ => c"KREPLAY_STATUS_UNKNOWN",
    };
    s.as_ptr()
}

/// This thread's last error message, or "" after a successful call; never NULL. Valid until
/// the next `kreplay_` call on this thread.
///
/// # Safety
///
/// No preconditions. The caller must not use the string after its next `kreplay_` call on
/// this thread.
#[no_mangle]
pub extern "C" fn kreplay_last_error() -> *const c_char {
    catch_unwind(last_error_ptr).unwrap_or(c"".as_ptr())
}

/// The library's version.
///
/// # Safety
///
/// 1. Each of `major`, `minor`, `patch` is NULL (refused) or valid for a write of a `u32`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_version(
    major: *mut u32,
    minor: *mut u32,
    patch: *mut u32,
) -> kreplay_status_t {
    guard("kreplay_version", || {
        non_null(major, "major")?;
        non_null(minor, "minor")?;
        non_null(patch, "patch")?;
        let v = |s: &str| s.parse::<u32>().unwrap_or(0);
        // SAFETY: each pointer is non-null (checked) and writable (caller, item 1).
        unsafe {
            write_out(major, "major", v(env!("CARGO_PKG_VERSION_MAJOR")))?;
            write_out(minor, "minor", v(env!("CARGO_PKG_VERSION_MINOR")))?;
            write_out(patch, "patch", v(env!("CARGO_PKG_VERSION_PATCH")))
        }
    })
}

/// The library's version as a static string.
///
/// # Safety
///
/// No preconditions.
#[no_mangle]
pub extern "C" fn kreplay_version_string() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0")
        .as_ptr()
        .cast::<c_char>()
}

/// The library's ABI table.
///
/// # Safety
///
/// 1. `entries` is NULL (refused) or valid for a write of a pointer.
/// 2. `count` is NULL (refused) or valid for a write of a `u64`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_abi_table(
    entries: *mut *const kreplay_abi_entry_t,
    count: *mut u64,
) -> kreplay_status_t {
    guard("kreplay_abi_table", || {
        non_null(entries, "entries")?;
        non_null(count, "count")?;
        let table = crate::abi::ABI_TABLE;
        // SAFETY: both non-null (checked) and writable (caller, items 1 and 2).
        unsafe {
            write_out(entries, "entries", table.as_ptr())?;
            write_out(count, "count", table.len() as u64)
        }
    })
}

/// One entry of the ABI table by name.
///
/// # Safety
///
/// 1. `name` is NULL (refused) or a NUL-terminated string.
/// 2. `value` is NULL (refused) or valid for a write of a `u64`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_abi_layout(
    name: *const c_char,
    value: *mut u64,
) -> kreplay_status_t {
    guard("kreplay_abi_layout", || {
        non_null(value, "value")?;
        // SAFETY: NULL or NUL-terminated (caller, item 1).
        let name = unsafe { c_str(name, "name")? };
        let v = crate::abi::lookup(name)
            .ok_or_else(|| Error::BadArgument(format!("no ABI entry is named {name:?}")))?;
        // SAFETY: non-null (checked) and writable (caller, item 2).
        unsafe { write_out(value, "value", v) }
    })
}

// ----- Contexts ----------------------------------------------------------------------------

/// Creates a context.
///
/// # Safety
///
/// 1. `context` is NULL (refused) or valid for a write of a `kreplay_context_t`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_context_create(
    context: *mut kreplay_context_t,
) -> kreplay_status_t {
    guard("kreplay_context_create", || {
        let lib = library()?;
        non_null(context, "context")?;
        let mut handles = lib.handles.lock();
        if handles.closed {
            return Err(Error::ShutDown);
        }
        let id = lib.registry()?.create_context();
        let handle = handles.table.insert(ContextEntry { id }).map_err(|_| {
            Error::BadArgument(format!(
                "too many live contexts ({}); destroy some first",
                crate::checked::MAX_SLOTS
            ))
        })?;
        drop(handles);
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(context, "context", kreplay_context_t { handle }) }
    })
}

/// Destroys a context; if it owns the service, replay stops and its callback is never called
/// again once this returns.
///
/// # Safety
///
/// No preconditions (the handle is checked).
#[no_mangle]
pub extern "C" fn kreplay_context_destroy(context: kreplay_context_t) -> kreplay_status_t {
    guard("kreplay_context_destroy", || {
        let lib = library()?;
        refuse_in_callback()?;
        let tool = {
            let mut handles = lib.handles.lock();
            handles.get(context.handle)?;
            let entry = handles
                .table
                .remove(context.handle)
                .ok_or_else(|| stale(context.handle))?;
            // Forgotten by the registry (its memory goes too); a loop that began with it keeps
            // its snapshot until the loop ends.
            let _ = lib.registry()?.remove_context(entry.id);
            let owner = lib.owner.lock();
            match owner.as_ref() {
                Some(o) if o.id == entry.id => {
                    let _ = lib.service.stop();
                    Some(std::sync::Arc::clone(&o.tool))
                }
                _ => None,
            }
        };
        // No lock is held: callbacks on other threads may call into the library while we wait.
        if let Some(tool) = tool {
            tool.disable();
        }
        Ok(())
    })
}

/// Starts a context globally (and replay, if it owns the service).
///
/// # Safety
///
/// No preconditions (the handle is checked).
#[no_mangle]
pub extern "C" fn kreplay_context_start(context: kreplay_context_t) -> kreplay_status_t {
    guard("kreplay_context_start", || set_active(context, true))
}

/// Stops a context globally (and replay, if it owns the service).
///
/// # Safety
///
/// No preconditions (the handle is checked).
#[no_mangle]
pub extern "C" fn kreplay_context_stop(context: kreplay_context_t) -> kreplay_status_t {
    guard("kreplay_context_stop", || set_active(context, false))
}

fn set_active(context: kreplay_context_t, active: bool) -> Result<(), Error> {
    let lib = library()?;
    let handles = lib.handles.lock();
    let entry = handles.get(context.handle)?;
    let registry = lib.registry()?;
    if active {
        registry.activate(entry.id)?;
    } else {
        registry.deactivate(entry.id)?;
    }
    if lib.is_owner(entry.id) {
        if active {
            lib.service.start()?;
        } else {
            lib.service.stop()?;
        }
    }
    Ok(())
}

/// Whether a context is started globally.
///
/// # Safety
///
/// 1. `active` is NULL (refused) or valid for a write of an `i32`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_context_is_active(
    context: kreplay_context_t,
    active: *mut i32,
) -> kreplay_status_t {
    guard("kreplay_context_is_active", || {
        let lib = library()?;
        non_null(active, "active")?;
        let id = context_id(context)?;
        let v = i32::from(lib.registry()?.is_active(id));
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(active, "active", v) }
    })
}

/// Declares a participant of a context.
///
/// # Safety
///
/// 1. `name` is NULL (refused) or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn kreplay_context_declare_participant(
    context: kreplay_context_t,
    name: *const c_char,
    support: kreplay_override_support_t,
) -> kreplay_status_t {
    guard("kreplay_context_declare_participant", || {
        let lib = library()?;
        // SAFETY: NULL or NUL-terminated (caller, item 1); copied before returning.
        let name = unsafe { c_str(name, "name")? };
        let support = decode_support(support)?;
        let handles = lib.handles.lock();
        let entry = handles.get(context.handle)?;
        lib.registry()?
            .declare_participant(entry.id, name, support)
            .map_err(Error::from)
    })
}

/// The local override of a context on this thread.
///
/// # Safety
///
/// 1. `value` is NULL (refused) or valid for a write of an `i32`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_context_override(
    context: kreplay_context_t,
    value: *mut i32,
) -> kreplay_status_t {
    guard("kreplay_context_override", || {
        let lib = library()?;
        non_null(value, "value")?;
        let id = context_id(context)?;
        let v = match lib.registry()?.override_for(id) {
            None => KREPLAY_OVERRIDE_NONE,
            Some(false) => KREPLAY_OVERRIDE_STOPPED,
            Some(true) => KREPLAY_OVERRIDE_STARTED,
        };
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(value, "value", v) }
    })
}

/// Whether a context takes part in the pass being prepared on this thread.
///
/// # Safety
///
/// 1. `participates` is NULL (refused) or valid for a write of an `i32`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_context_participates(
    context: kreplay_context_t,
    participates: *mut i32,
) -> kreplay_status_t {
    guard("kreplay_context_participates", || {
        let lib = library()?;
        non_null(participates, "participates")?;
        let id = context_id(context)?;
        let v = i32::from(lib.registry()?.participates(id));
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(participates, "participates", v) }
    })
}

/// Whether any local override exists on this thread.
///
/// # Safety
///
/// 1. `any` is NULL (refused) or valid for a write of an `i32`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_has_overrides(any: *mut i32) -> kreplay_status_t {
    guard("kreplay_has_overrides", || {
        let lib = library()?;
        non_null(any, "any")?;
        let v = i32::from(lib.registry()?.has_overrides());
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(any, "any", v) }
    })
}

// ----- The replay service ------------------------------------------------------------------

/// Makes a context the owner of the replay service.
///
/// # Safety
///
/// 1. `callback`, when not NULL, is a function with the signature of
///    `kreplay_replay_callback_t`, callable from any thread until the context is destroyed or
///    the library shut down, and it does not unwind.
/// 2. `callback_data` may be anything; it is passed back to `callback`, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn kreplay_configure_replay(
    context: kreplay_context_t,
    subscription: kreplay_subscription_t,
    callback: kreplay_replay_callback_t,
    callback_data: *mut c_void,
) -> kreplay_status_t {
    guard("kreplay_configure_replay", || {
        let lib = library()?;
        refuse_in_callback()?;
        let callback = callback.ok_or(Error::NullPointer("callback"))?;
        let subscription = decode_subscription(subscription)?;
        let handles = lib.handles.lock();
        let entry = handles.get(context.handle)?;
        // A malformed environment variable is the caller's to see, not a silent default.
        lib.check_env_policy()?;
        let toggles = ContextToggles {
            start: Some(kreplay_replay_start_context),
            stop: Some(kreplay_replay_stop_context),
        };
        let tool = CTool::new(callback, callback_data, toggles);
        lib.service
            .configure(entry.id, subscription, std::sync::Arc::clone(&tool) as _)?;
        *lib.owner.lock() = Some(Owner {
            handle: context.handle,
            id: entry.id,
            tool,
        });
        if lib.registry()?.is_active(entry.id) {
            lib.service.start()?;
        }
        Ok(())
    })
}

/// The context that configured the replay service.
///
/// # Safety
///
/// 1. `owner` is NULL (refused) or valid for a write of a `kreplay_context_t`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_replay_owner(owner: *mut kreplay_context_t) -> kreplay_status_t {
    guard("kreplay_replay_owner", || {
        let lib = library()?;
        non_null(owner, "owner")?;
        let handle = lib
            .owner
            .lock()
            .as_ref()
            .map(|o| o.handle)
            .ok_or(Error::NotConfigured)?;
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(owner, "owner", kreplay_context_t { handle }) }
    })
}

/// Whether replay is active.
///
/// # Safety
///
/// 1. `active` is NULL (refused) or valid for a write of an `i32`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_replay_is_active(active: *mut i32) -> kreplay_status_t {
    guard("kreplay_replay_is_active", || {
        let lib = library()?;
        non_null(active, "active")?;
        // SAFETY: non-null (checked) and writable (caller, item 1).
        unsafe { write_out(active, "active", i32::from(lib.service.is_active())) }
    })
}

/// `replay_start_context` (SPEC §5).
///
/// # Safety
///
/// No preconditions (the handle is checked; the phase is checked by the registry).
#[no_mangle]
pub extern "C" fn kreplay_replay_start_context(context: kreplay_context_t) -> kreplay_status_t {
    guard("kreplay_replay_start_context", || {
        let id = context_id(context)?;
        ContextControl::start(&*library()?.registry()?, id).map_err(Error::Context)
    })
}

/// `replay_stop_context` (SPEC §5).
///
/// # Safety
///
/// No preconditions (the handle is checked; the phase is checked by the registry).
#[no_mangle]
pub extern "C" fn kreplay_replay_stop_context(context: kreplay_context_t) -> kreplay_status_t {
    guard("kreplay_replay_stop_context", || {
        let id = context_id(context)?;
        ContextControl::stop(&*library()?.registry()?, id).map_err(Error::Context)
    })
}

/// Inside a PASS ENTER callback: waits until the restore before this pass is done on the
/// device (SPEC §6 step 8), for a tool that reads device memory by its own means.
///
/// # Safety
///
/// No preconditions.
#[no_mangle]
pub extern "C" fn kreplay_pass_sync() -> kreplay_status_t {
    guard("kreplay_pass_sync", crate::tool::pass_sync)
}

// ----- Policy and the filter ---------------------------------------------------------------

/// Sets one policy variable.
///
/// # Safety
///
/// 1. `name` and `value` are each NULL (refused) or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn kreplay_policy_set(
    name: *const c_char,
    value: *const c_char,
) -> kreplay_status_t {
    guard("kreplay_policy_set", || {
        let lib = library()?;
        // SAFETY: NULL or NUL-terminated (caller, item 1).
        let (name, value) = unsafe { (c_str(name, "name")?, c_str(value, "value")?) };
        let _serial = lib.policy_lock.lock();
        lib.service.set_policy_var(name, value)?;
        lib.env_fixed([name]);
        if lib.log_sink {
            replay_core::log_sink::set_level(lib.service.policy().log_level);
        }
        Ok(())
    })
}

/// The policy as JSON.
///
/// # Safety
///
/// 1. `buffer` is NULL or valid for writes of `buffer_size` bytes.
/// 2. `required` is NULL (refused) or valid for a write of a `usize`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_policy_json(
    buffer: *mut c_char,
    buffer_size: usize,
    required: *mut usize,
) -> kreplay_status_t {
    guard("kreplay_policy_json", || {
        let lib = library()?;
        let json = serde_json::to_string(&*lib.service.policy())
            .map_err(|e| Error::Internal(format!("the policy did not serialise: {e}")))?;
        // SAFETY: the caller's items 1 and 2.
        unsafe { copy_out_str(&json, buffer, buffer_size, required) }
    })
}

/// Reads `count` pattern strings.
///
/// # Safety
///
/// 1. `patterns` is NULL or points to `count` readable pointers, each NULL or a NUL-terminated
///    string.
unsafe fn patterns(
    patterns: *const *const c_char,
    count: u64,
    what: &'static str,
    field: &'static str,
) -> Result<Vec<String>, Error> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if count > MAX_PATTERNS {
        return Err(Error::BadArgument(format!(
            "`{what}_count` = {count} exceeds {MAX_PATTERNS}"
        )));
    }
    non_null(patterns, what)?;
    // SAFETY: non-null (checked), `count` readable pointers (caller, item 1); count fits in
    // usize (at most MAX_PATTERNS).
    let ptrs = unsafe { std::slice::from_raw_parts(patterns, count as usize) };
    ptrs.iter()
        .map(|&p| {
            // SAFETY: each NULL or NUL-terminated (caller, item 1).
            let s = unsafe { c_str(p, what)? };
            if s.is_empty() {
                return Err(Error::Policy(PolicyError {
                    variable: field.to_owned(),
                    value: String::new(),
                    expected: "non-empty name patterns",
                }));
            }
            Ok(s.to_owned())
        })
        .collect()
}

/// Replaces the kernel filter.
///
/// # Safety
///
/// 1. `filter` is NULL (refused) or points to a `kreplay_kernel_filter_t` whose `size` bytes
///    are readable, with `include` / `exclude` as `patterns` requires for their counts.
#[no_mangle]
pub unsafe extern "C" fn kreplay_filter_set(
    filter: *const kreplay_kernel_filter_t,
) -> kreplay_status_t {
    guard("kreplay_filter_set", || {
        let lib = library()?;
        // SAFETY: the caller's item 1.
        let f = unsafe { read_versioned(filter, "filter", first_version::KERNEL_FILTER)? };
        // SAFETY: the caller's item 1, for each pattern array.
        let include = unsafe {
            patterns(
                f.include,
                f.include_count,
                "filter->include",
                "filter.include",
            )?
        };
        // SAFETY: as above.
        let exclude = unsafe {
            patterns(
                f.exclude,
                f.exclude_count,
                "filter->exclude",
                "filter.exclude",
            )?
        };
        let range = (f.range_first != 0 || f.range_last != 0).then_some(DispatchRange {
            first: f.range_first,
            last: (f.range_last != 0).then_some(f.range_last),
        });
        let _serial = lib.policy_lock.lock();
        let mut policy = (*lib.service.policy()).clone();
        // The struct has no communication list: the policy's (environment or default) stays.
        policy.filter = KernelFilter {
            include,
            exclude,
            range,
            skip: f.skip,
            count: (f.count != 0).then_some(f.count),
            communication: std::mem::take(&mut policy.filter.communication),
        };
        lib.service.set_policy(policy)?;
        lib.env_fixed([
            "KERNEL_INCLUDE",
            "KERNEL_EXCLUDE",
            "DISPATCH_RANGE",
            "KERNEL_SKIP",
            "KERNEL_COUNT",
        ]);
        Ok(())
    })
}

// ----- Outcomes and the summary ------------------------------------------------------------

/// An outcome as JSON.
///
/// # Safety
///
/// 1. `outcome` may be any pointer: it is only compared with the live outcomes, never
///    dereferenced unless it is one.
/// 2. `buffer` is NULL or valid for writes of `buffer_size` bytes.
/// 3. `required` is NULL (refused) or valid for a write of a `usize`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_outcome_json(
    outcome: *const kreplay_outcome_t,
    buffer: *mut c_char,
    buffer_size: usize,
    required: *mut usize,
) -> kreplay_status_t {
    guard("kreplay_outcome_json", || {
        library()?;
        let live = live(outcome)?;
        // SAFETY: the caller's items 2 and 3.
        unsafe { copy_out_str(&live.json(), buffer, buffer_size, required) }
    })
}

/// The live outcome at `outcome`, or the error the header names.
fn live(
    outcome: *const kreplay_outcome_t,
) -> Result<std::sync::Arc<crate::checked::COutcome>, Error> {
    non_null(outcome, "outcome")?;
    live_outcome(outcome).ok_or_else(|| {
        Error::InvalidHandle(
            "`outcome` is not a record the library handed to a callback that is still running (a copy, or used after its callback returned)".to_owned(),
        )
    })
}

/// The window's time by phase of an outcome.
///
/// # Safety
///
/// 1. `outcome` may be any pointer: it is only compared with the live outcomes, never
///    dereferenced unless it is one.
/// 2. `phases` is NULL (refused) or points to a `kreplay_phases_t` whose `size` field is
///    readable and whose `size` bytes are writable.
#[no_mangle]
pub unsafe extern "C" fn kreplay_outcome_phases(
    outcome: *const kreplay_outcome_t,
    phases: *mut kreplay_phases_t,
) -> kreplay_status_t {
    guard("kreplay_outcome_phases", || {
        library()?;
        non_null(phases, "phases")?;
        let value = live(outcome)?.phases();
        // SAFETY: the caller's item 2; `size` is the first field of kreplay_phases_t.
        unsafe { write_versioned(phases, "phases", first_version::PHASES, value) }
    })
}

/// The graph node an outcome's dispatch ran as.
///
/// # Safety
///
/// 1. `outcome` may be any pointer: it is only compared with the live outcomes, never
///    dereferenced unless it is one.
/// 2. `node` is NULL (refused) or points to a `kreplay_graph_node_t` whose `size` field is
///    readable and whose `size` bytes are writable.
#[no_mangle]
pub unsafe extern "C" fn kreplay_outcome_graph_node(
    outcome: *const kreplay_outcome_t,
    node: *mut kreplay_graph_node_t,
) -> kreplay_status_t {
    guard("kreplay_outcome_graph_node", || {
        library()?;
        non_null(node, "node")?;
        let live = live(outcome)?;
        // SAFETY: the caller's item 2 (its `size` is readable).
        unsafe { check_versioned(node, "node", first_version::GRAPH_NODE)? };
        let value = live.graph_node().ok_or_else(|| {
            Error::NotFound(format!(
                "dispatch {} did not run as a node of a graph",
                live.dispatch_id()
            ))
        })?;
        // SAFETY: the caller's item 2; `size` is the first field of kreplay_graph_node_t.
        unsafe { write_versioned(node, "node", first_version::GRAPH_NODE, value) }
    })
}

/// Installs (or, with NULL, removes) the outcome sink.
///
/// # Safety
///
/// 1. `sink`, when not NULL, is a function with the signature of `kreplay_outcome_sink_t`,
///    callable from any thread until replaced or the library shut down, and it does not unwind.
/// 2. `data` may be anything; it is passed back to `sink`, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn kreplay_outcome_sink_set(
    sink: kreplay_outcome_sink_t,
    data: *mut c_void,
) -> kreplay_status_t {
    guard("kreplay_outcome_sink_set", || {
        let lib = library()?;
        refuse_in_callback()?;
        let old = {
            let mut current = lib.sink.lock();
            match sink {
                Some(f) => {
                    let (closure, gate) = sink_closure(f, data);
                    lib.service.set_outcome_sink(Some(closure));
                    current.replace(gate)
                }
                None => {
                    lib.service.set_outcome_sink(None);
                    current.take()
                }
            }
        };
        if let Some(gate) = old {
            gate.disable();
        }
        Ok(())
    })
}

/// The run summary.
///
/// # Safety
///
/// 1. `summary` is NULL (refused) or points to a `kreplay_summary_t` whose `size` field is
///    readable and whose `size` bytes are writable.
#[no_mangle]
pub unsafe extern "C" fn kreplay_summary_get(summary: *mut kreplay_summary_t) -> kreplay_status_t {
    guard("kreplay_summary_get", || {
        let lib = library()?;
        let value = summary_to_c(&lib.service.summary());
        // SAFETY: the caller's item 1; `size` is the first field of kreplay_summary_t.
        unsafe { write_versioned(summary, "summary", first_version::SUMMARY, value) }
    })
}

/// The run summary as JSON.
///
/// # Safety
///
/// 1. `buffer` is NULL or valid for writes of `buffer_size` bytes.
/// 2. `required` is NULL (refused) or valid for a write of a `usize`.
#[no_mangle]
pub unsafe extern "C" fn kreplay_summary_json(
    buffer: *mut c_char,
    buffer_size: usize,
    required: *mut usize,
) -> kreplay_status_t {
    guard("kreplay_summary_json", || {
        let lib = library()?;
        let json = serde_json::to_string(&lib.service.summary())
            .map_err(|e| Error::Internal(format!("the summary did not serialise: {e}")))?;
        // SAFETY: the caller's items 1 and 2.
        unsafe { copy_out_str(&json, buffer, buffer_size, required) }
    })
}

// ----- Shutdown ----------------------------------------------------------------------------

/// Waits, bounded, until no replay window is open and no simulator dispatch is running.
/// `Err(what was still running)` at the bound.
fn wait_for_windows(lib: &crate::state::Library) -> Result<(), String> {
    wait_until_idle(lib, "shutdown", || {
        let windows = lib.service.open_windows();
        #[cfg(feature = "sim")]
        let dispatches = crate::sim::dispatches_in_flight();
        #[cfg(not(feature = "sim"))]
        let dispatches = 0;
        (windows != 0 || dispatches != 0).then(|| {
            format!("{windows} replay window(s) open, {dispatches} simulator dispatch(es) running")
        })
    })
}

/// Shuts the library down.
///
/// Windows open on other threads run their remaining passes without callbacks; shutdown waits
/// for them (bounded) before it shuts the simulators down and releases what they use.
///
/// # Safety
///
/// No preconditions.
#[no_mangle]
pub extern "C" fn kreplay_shutdown() -> kreplay_status_t {
    guard("kreplay_shutdown", || {
        library()?;
        refuse_in_callback()?;
        if !mark_shut_down() {
            return Err(Error::ShutDown);
        }
        // Pairs with the fence of a simulator dispatch that starts now: either it sees the
        // shutdown, or the wait below sees it.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        if let Some(lib) = library_if_created() {
            {
                let mut handles = lib.handles.lock();
                handles.closed = true;
                // Dropped with the registry below; the table's memory goes too.
                handles.table = Default::default();
            }
            let _ = lib.service.stop();
            let tool = lib
                .owner
                .lock()
                .as_ref()
                .map(|o| std::sync::Arc::clone(&o.tool));
            // Waits for the callback in flight; none starts afterwards, so a window still open
            // runs its remaining passes without the tool (an open-ended loop stops after the
            // pass in progress) and ends with memory equal to one execution.
            if let Some(tool) = tool {
                tool.disable();
            }
            lib.service.set_outcome_sink(None);
            let sink = lib.sink.lock().take();
            if let Some(gate) = sink {
                gate.disable();
            }
            // Nothing a window uses goes before it has closed: shutting a simulator down under
            // one would fail its restore, which aborts the process.
            if let Err(what) = wait_for_windows(lib) {
                let (bound, _) = window_wait_bounds(lib);
                log::error!(
                    "[kernel-replay] shutdown: {what} after {:.1} s; simulators, their threads and \
                     the service's tables are left in place",
                    bound.as_secs_f64()
                );
                log::logger().flush();
                return Err(Error::Device(format!(
                    "shutdown waited {:.1} s (drain_timeout + pass_timeout) and {what}; the library \
                     is shut down, but simulators, their threads and the service's tables were left \
                     in place so nothing is released under a running window",
                    bound.as_secs_f64()
                )));
            }
            // Contexts die with the registry (every handle is invalid already).
            lib.contexts.release();
        }
        // Runs the simulator's hook (its runtimes' worker threads are joined) and joins the
        // library's own threads.
        let report = crate::threads::shutdown_all();
        if let Some(lib) = library_if_created() {
            // No window can run any more: replay is stopped, none is open and every runtime is
            // shut down.
            lib.service.release_tables();
        }
        if !report.panicked.is_empty() {
            log::error!(
                "[kernel-replay] shutdown: library threads or hooks panicked: {:?}",
                report.panicked
            );
        }
        if !report.skipped.is_empty() {
            log::warn!(
                "[kernel-replay] shutdown ran on a library thread, which was not joined: {:?}",
                report.skipped
            );
        }
        log::debug!(
            "[kernel-replay] shut down; joined {} library thread(s)",
            report.joined.len()
        );
        log::logger().flush();
        Ok(())
    })
}
