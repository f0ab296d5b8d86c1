//! The code-object wrapper (SPEC §7.2's forgetting of unloaded code): what `OnLoad` installs on
//! core `hsa_executable_destroy`. Before the runtime destroys an executable, its kernels are
//! forgotten in [`crate::module::kernels`]' map, in the service's memo of kernels that wrote
//! outside the `arguments` scope (keyed by executable) and in the memory engines' `predicted`
//! scope ([`replay_memory::Tracker::record_unload`]), because a later executable may get the
//! same kernel-object addresses.
//!
//! Loading needs no wrapper: kernel names and module variables are found by walking the loader
//! when they are first asked for ([`crate::module`]).

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::module::kernels;
use crate::state::{self, backend};
use crate::sys::{self, hsa_status_t};

/// Wrapper of core `hsa_executable_destroy`: the executable's kernels are forgotten first.
///
/// # Safety
///
/// The runtime's contract for `hsa_executable_destroy`.
pub(crate) unsafe extern "C" fn executable_destroy(executable: u64) -> hsa_status_t {
    let Some(destroy) = backend().originals().and_then(|o| o.executable_destroy) else {
        return sys::HSA_STATUS_ERROR_NOT_INITIALIZED;
    };
    let forgot = catch_unwind(AssertUnwindSafe(|| {
        kernels::global().forget_executable(executable);
        if let Some(svc) = state::service() {
            for a in backend().agents.all() {
                svc.forget_code_object(a.id, executable);
            }
        }
        for a in backend().agents.all() {
            backend().tracker.record_unload(a.id, executable);
        }
    }));
    if forgot.is_err() {
        log::error!(
            "[kernel-replay] hsa: forgetting the kernels of executable {executable:#x} panicked; the call went through"
        );
    }
    // SAFETY: the original entry with the caller's argument.
    unsafe { destroy(executable) }
}
