//! The process's place in a job (SPEC §9.2 "Unmodified applications", §12): the backend-neutral
//! part (ranks, the per-process records and report files) is [`replay_tools::job`]'s, re-exported
//! here; what is CUDA's alone is another tool's injection chained after ours.

use std::ffi::c_int;

pub use replay_tools::job::*;

/// Environment variable: another tool's injection library (the `CUDA_INJECTION64_PATH` the
/// program had), whose `InitializeInjection` ours calls after its own.
pub const CHAIN_ENV: &str = "KREPLAY_CUDA_CHAIN_INJECTION";

/// Loads the injection library `CHAIN_ENV` names and calls its `InitializeInjection`, as the
/// driver would have had it been the only one; each failure is one line, never silent.
pub fn chain_injection() {
    let Some(path) = std::env::var_os(CHAIN_ENV).filter(|p| !p.is_empty()) else {
        return;
    };
    // SAFETY: the program's own injection library, which the driver would have loaded; its
    // initialisers run as they would have.
    let lib = match unsafe { libloading::Library::new(&path) } {
        Ok(l) => l,
        Err(e) => {
            eprintln!("[kernel-replay] the chained injection {path:?} cannot be loaded: {e}");
            return;
        }
    };
    type Init = unsafe extern "C" fn() -> c_int;
    // SAFETY: the driver's documented injection entry has this signature.
    let init = match unsafe { lib.get::<Init>(b"InitializeInjection\0") } {
        Ok(f) => *f,
        Err(e) => {
            eprintln!(
                "[kernel-replay] the chained injection {path:?} has no InitializeInjection: {e}"
            );
            return;
        }
    };
    // SAFETY: called once, inside cuInit, as the driver calls it.
    let r = unsafe { init() };
    if r != 1 {
        eprintln!(
            "[kernel-replay] the chained injection {path:?}: InitializeInjection returned {r}"
        );
    }
    // It stays loaded for the process's life, as an injection library does.
    std::mem::forget(lib);
}
