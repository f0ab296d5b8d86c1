//! # replay-ffi (`libkernel_replay`)
//!
//! The C ABI of kernel-replay and **the one shared object** (SPEC §2 "One shared object",
//! §10). A process must hold one instance of the core, so the C ABI — and later the HSA tool
//! entry points and the CUDA injection entry point — are all exported by the single library
//! this crate builds: `libkernel_replay.so` (and `.a`), with `include/kernel_replay.h`.
//!
//! `kreplay run` preloads that library into every application, so it carries nothing it does
//! not need there: no output writer and no SQLite, whatever its features (the CUDA counter
//! collection fills `replay-report-types`' plain types; `replay-report`, with the rocpd SQLite
//! writer, is `kreplay`'s). `tests/no_sqlite.rs` reads the built library's symbol tables.
//!
//! ## Layers
//!
//! - [`sys`]: the raw `#[repr(C)]` types and constants, named and laid out exactly as in the
//!   header. Enumeration fields are plain integers (C may store any value there).
//! - `checked` (one area per file under `checked/`): status codes and error messages, the
//!   entry guard (`catch_unwind`: no panic crosses the boundary), slot-and-generation handles,
//!   NULL / `size` / alignment / UTF-8 / enumeration checks, and conversions between the core's
//!   types and the C structs.
//! - `capture`: the capture a tool asks for in PASS ENTER (SPEC §13): the request slot of the
//!   running callback, the sink that writes the folder, and the table of what became of each
//!   request (`kreplay_capture_result`, `kreplay_capture_message`).
//! - [`entry`]: the `extern "C"` functions, one per header declaration, each thin: guard,
//!   checks in a fixed order (shut down, inside a callback where refused, pointers and
//!   enumerations, then handles), one call into the core or the context registry.
//! - `tool`: calls *into* C — the replay callback as a [`replay_core::ReplayTool`], the
//!   pass-count and continue callbacks as the core's closures, the outcome sink — behind gates
//!   that destroy and shutdown close, waiting for calls in flight, so no callback runs after
//!   they return.
//! - [`abi`]: the library's view of the layout (sizes, offsets, constant values), exported so C
//!   and C++ tests compare it with the header.
//! - `state`: the process-wide state (the one service, the registry, the clock, the handle
//!   table, the owner); `wait`: the bounded waits of shutdown and of a simulator's destroy.
//! - [`threads`]: the registry of threads the library starts, joined by `kreplay_shutdown`.
//! - `sim` (feature `sim`, on by default; one area per file under `sim/`): the simulated GPU through the C ABI (`kreplay_sim_*`): simulators with N agents,
//!   memory of every class, built-in kernels, modules, dispatches through the one service,
//!   counters, faults and digests, so a C or C++ tool is tested without a GPU.
//!
//! No file uses a file that uses it (replay-tests' `tests/layout_workspace.rs` checks it):
//! `sys`, then `checked`, `capture`, `tool`, `state`, `wait`, the simulator's files, `entry`,
//! and this root on top.
//!
//! ## Design choices
//!
//! - **One core.** The library creates the process-wide service with
//!   [`replay_core::ReplayService::global_with_clock`] (an `Arc`), with a
//!   [`replay_context::Contexts`] registry as its context control and a wall clock
//!   ([`LibraryClock`], [`clock()`]: replay-mock's `SimClock::real()` with the `sim` feature,
//!   else the core's `SystemClock`) created once. The simulator requires the service to run on
//!   its runtimes' clock, so every simulator of the C ABI is built on that same clock; real backends measure on it too (it is the wall clock). Code in the same
//!   shared object (backends) must take the service from [`service()`], so that it is created
//!   with that registry and clock; a service created earlier through `ReplayService::global()`
//!   is logged as an error (toggles would then answer `context_error`).
//! - **Contexts.** A C context is a handle onto a registry context. Global start/stop of the
//!   context that owns the service also starts/stops replay, so "replay is active" means "the
//!   owner is started" whatever the order of configure and start. Destroying the owner stops
//!   replay for good: the service keeps its one owner (SPEC §3), and a second configure answers
//!   `ALREADY_CONFIGURED`.
//! - **Callbacks.** The pass-count and continue callbacks have the upstream signatures, without
//!   an extra closure pointer: `user_data` is the closure (the value the tool leaves in CONFIG
//!   ENTER reaches the pass-count callback, and each pass's copy reaches the continue
//!   callback). The replay callback itself gets the `callback_data` given to configure.
//!   The pass-count clamp (a nonsense count such as 2^63 becomes `max_passes`) and the
//!   negative-continue rule (`callback_failed`) are the core's.
//! - **Payload.** `dispatch_info` is a pointer, not an embedded struct, so the dispatch info can
//!   grow (versioned by its own `size`) without moving the payload's later fields; the payload
//!   is 64 bytes on LP64 with no tail padding and `outcome` (CONFIG EXIT only) as its last
//!   field. A zero-filled payload means "no replay".
//! - **Outcomes.** A `kreplay_outcome_t` lives only during the callback that receives it;
//!   `kreplay_outcome_json` checks the pointer against the live records, so a stale or copied
//!   pointer is `INVALID_HANDLE`, not a wild read. Strings are copied out into caller buffers
//!   (`required` tells the size), so no library-owned string outlives a call, except
//!   `kreplay_last_error`'s, which is valid until the next call on the same thread.
//! - **Policy from the environment** (SPEC §8). The service is built with every well-formed
//!   `KREPLAY_*` variable applied; each malformed one (a value that does not parse or is not
//!   UTF-8) keeps its default and is kept in a list. `kreplay_configure_replay` answers
//!   `POLICY_ERROR`, naming every listed variable, until each is set through
//!   `kreplay_policy_set` (any of its names) or, for the filter's, `kreplay_filter_set`:
//!   a tool sees the problem instead of replaying on a silent default, and may fix it or run
//!   without replay. (The choice: keep the well-formed values, refuse to replay on the rest.)
//!   A Rust tool that configures [`service()`] itself reads the list with
//!   [`env_policy_errors`].
//! - **Shutdown.** `kreplay_shutdown` stops replay, closes the callback and sink gates (waiting
//!   for the call in progress), then waits, bounded by `drain_timeout + pass_timeout`, until no
//!   window is open ([`ReplayService::open_windows`]) and no `kreplay_sim_dispatch` runs: a
//!   window open on another thread runs its remaining passes without the tool and ends with
//!   memory equal to one execution. Only then does it release the registry, run the
//!   [`threads`] registry's hooks (the simulator's shuts every simulator left down, joining its
//!   queue and copy-engine workers), join every registered thread and release the service's
//!   tables. A window still open at the bound keeps all of that in place (`DEVICE_ERROR`); the
//!   library is shut down either way and stateful calls answer `SHUT_DOWN`. The core itself
//!   starts no thread (the window runs on the submitting thread).
//! - **Unloading a module** (`kreplay_sim_module_unload`) never frees memory a window captured:
//!   outside callbacks it takes the agent's write gate (waiting for a window there); inside a
//!   callback the handles go at once and the code object is unloaded when the window has
//!   closed, before the `kreplay_sim_dispatch` that ran it returns. This holds whether or not
//!   the memory engine re-checks module variables' liveness before a restore.
//! - **Counters** saturate (the summary's, the simulator's work-item count, fault hits).
//! - **Memory at exit.** Shutdown releases what the library holds through statics (the context
//!   registry, behind the service's context control; the service's per-agent gates and kernel
//!   memo, through `release_tables`; the simulators and their handle tables), and destroying a
//!   context removes it from the registry, so a leak checker run after it reports nothing of
//!   ours.
//! - **Logging.** The first call installs the core's stderr sink
//!   ([`replay_core::log_sink`]) at the level of `KREPLAY_LOG`, unless the embedding
//!   application installed a `log` logger first; `kreplay_policy_set("KREPLAY_LOG", ..)`
//!   changes it.
//!
//! ## Backends in the same library
//!
//! Each backend adds its entry points to this crate behind a Cargo feature of its own. The
//! simulator's (`kreplay_sim_*`) are behind `sim`, on by default: `--no-default-features`
//! builds a library without them and without replay-mock.
//! `hsa` (off by default; it needs nothing of ROCm to build, but a library exporting `OnLoad`
//! is an HSA tool and the default library should not claim to be one): the `hsa` module's `OnLoad`,
//! `OnUnload`, `kreplay_hsa_state_json` and `kreplay_hsa_mark_tool_queue` (declared in
//! `include/kernel_replay_hsa.h`), over
//! `replay-hsa` (re-exported as `replay_hsa`), so `HSA_TOOLS_LIB` can name this library.
//! `cuda`: the driver's injection entry point and wrapped driver entries (`cuda`), and the
//! counter collection for tools with their own front end (`counters`, declared in
//! `include/kernel_replay_cuda.h`). Because every entry point is
//! `#[no_mangle]` in this crate, it is exported by `libkernel_replay.so` and by any shared
//! object that links this crate.
//!
//! ## A Rust tool with its own shared object
//!
//! A Rust tool that ships its own `cdylib` links this crate statically (it is also an rlib,
//! named `kernel_replay`) and invokes [`export_c_abi!`] once at its crate root. Rust exports the
//! `#[no_mangle]` functions of linked rlibs from a `cdylib`, so the entry points keep their
//! names; defining forwarding functions of the same names would collide with them. The macro
//! instead anchors every entry point (and, later, each enabled backend's) with a `#[used]`
//! reference, so no link step can drop one, and it documents the intent at the call site.
//! That shared object is then the one shared object of its process: do not load
//! `libkernel_replay.so` beside it.
//!
//! As an HSA tool (feature `hsa`), that shared object is what `HSA_TOOLS_LIB` names, and the
//! tool's own initialisation is the `kreplay_tool_init` that `OnLoad` calls:
//! `export_c_abi!(hsa_tool = my_init)` defines it there (`my_init: fn(u64) -> Result<(), E>`,
//! `E: Display`, given the runtime version; see [`export_c_abi!`]). `OnLoad` looks it up in the
//! object that holds its own code when `KREPLAY_HSA_TOOL` is unset, so no second library is
//! needed. `examples/hsa-rust-tool` is a complete one, tested on the simulated HSA runtime.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod abi;
mod capture;
mod checked;
#[cfg(feature = "cuda")]
pub mod counters;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod entry;
#[cfg(feature = "hsa")]
pub mod hsa;
#[cfg(feature = "sim")]
pub mod sim;
mod state;
pub mod sys;
pub mod threads;
mod tool;
mod wait;

pub use replay_context::Contexts;
pub use replay_core::ReplayService;
/// The HSA backend (feature `hsa`), re-exported so Rust tools reach its state and bindings.
#[cfg(feature = "hsa")]
pub use replay_hsa;
// Defined in `state`, beside what they read, so a backend file that calls them does not use
// this root (which uses every backend file): the files stay one-way.
pub use state::{clock, contexts, env_policy_errors, service, LibraryClock};

/// Re-exports the C ABI (and the entry points of enabled backends) from a Rust tool's own
/// shared object. Invoke once, at the crate root of the tool's `cdylib`:
///
/// ```
/// kernel_replay::export_c_abi!();
/// # fn main() {}
/// ```
///
/// See the crate documentation ("A Rust tool with its own shared object") for why it anchors
/// the library's own `#[no_mangle]` functions rather than defining forwarders.
///
/// ## As an HSA tool (feature `hsa`)
///
/// ```ignore
/// // The tool's cdylib, named by HSA_TOOLS_LIB (examples/hsa-rust-tool compiles this form).
/// kernel_replay::export_c_abi!(hsa_tool = init, hsa_tool_fini = fini);
///
/// fn init(runtime_version: u64) -> Result<(), String> {
///     let service = kernel_replay::service();
///     // service.configure(..), service.start() ...
///     Ok(())
/// }
/// fn fini() { /* print a summary */ }
/// ```
///
/// `hsa_tool = PATH` also defines, in the tool's shared object,
/// `#[no_mangle] extern "C" fn kreplay_tool_init(runtime_version: u64) -> c_int`, which
/// `OnLoad` calls once after installing its wrappers (found in that same object when
/// `KREPLAY_HSA_TOOL` is unset; a library named by the variable wins). It calls
/// `PATH(runtime_version)`, any `FnOnce(u64) -> Result<(), E>` with `E: Display`, and answers
/// 0 for `Ok`, 1 for `Err` (logged with its message) and 2 for a panic (caught and logged:
/// no panic reaches the runtime). `hsa_tool_fini = PATH` (optional, `FnOnce()`) defines
/// `kreplay_tool_fini`, called from `OnUnload`, panics caught the same way. Both need
/// `replay-ffi`'s `hsa` feature (without it, compiling the form is an error saying so).
#[macro_export]
macro_rules! export_c_abi {
    () => {
        #[used]
        #[doc(hidden)]
        static __KERNEL_REPLAY_EXPORTS: fn() -> usize = $crate::__private::entry_points;
    };
    (hsa_tool = $init:path $(,)?) => {
        $crate::export_c_abi!();
        /// The HSA tool's initialisation, called by `OnLoad` (`export_c_abi!(hsa_tool = ..)`).
        #[no_mangle]
        pub extern "C" fn kreplay_tool_init(runtime_version: u64) -> ::std::ffi::c_int {
            $crate::__private::hsa_tool_init(stringify!($init), runtime_version, $init)
        }
    };
    (hsa_tool = $init:path, hsa_tool_fini = $fini:path $(,)?) => {
        $crate::export_c_abi!(hsa_tool = $init);
        /// The HSA tool's exit, called by `OnUnload` (`export_c_abi!(hsa_tool_fini = ..)`).
        #[no_mangle]
        pub extern "C" fn kreplay_tool_fini() {
            $crate::__private::hsa_tool_fini(stringify!($fini), $fini)
        }
    };
}

#[doc(hidden)]
pub mod __private {
    use std::ffi::c_int;
    #[cfg(feature = "hsa")]
    use std::fmt::Display;
    #[cfg(feature = "hsa")]
    use std::panic::{catch_unwind, AssertUnwindSafe};

    use crate::entry::*;
    #[cfg(feature = "sim")]
    use crate::sim;

    /// The body of the `kreplay_tool_init` that `export_c_abi!(hsa_tool = ..)` defines: 0 when
    /// `init` answers `Ok`, 1 for `Err` and 2 for a panic (both logged), so no panic crosses
    /// the C boundary into `OnLoad`.
    #[cfg(feature = "hsa")]
    pub fn hsa_tool_init<E: Display>(
        name: &str,
        runtime_version: u64,
        init: impl FnOnce(u64) -> Result<(), E>,
    ) -> c_int {
        match catch_unwind(AssertUnwindSafe(|| init(runtime_version))) {
            Ok(Ok(())) => 0,
            Ok(Err(e)) => {
                log::error!("[kernel-replay] hsa: the tool's init ({name}) failed: {e}");
                1
            }
            Err(_) => {
                log::error!("[kernel-replay] hsa: the tool's init ({name}) panicked");
                2
            }
        }
    }

    /// The body of the `kreplay_tool_fini` that `export_c_abi!(.., hsa_tool_fini = ..)`
    /// defines: runs `fini`, catching and logging a panic.
    #[cfg(feature = "hsa")]
    pub fn hsa_tool_fini(name: &str, fini: impl FnOnce()) {
        if catch_unwind(AssertUnwindSafe(fini)).is_err() {
            log::error!("[kernel-replay] hsa: the tool's fini ({name}) panicked");
        }
    }

    /// Implemented by nothing: what makes `export_c_abi!(hsa_tool = ..)` without the `hsa`
    /// feature a compile error that says what is missing.
    #[cfg(not(feature = "hsa"))]
    #[diagnostic::on_unimplemented(
        message = "`export_c_abi!(hsa_tool = ..)` needs the `hsa` feature of replay-ffi (kernel_replay)",
        label = "enable `features = [\"hsa\"]` on the replay-ffi dependency"
    )]
    pub trait HsaFeatureRequired {}

    /// Without the `hsa` feature: does not compile (see [`HsaFeatureRequired`]).
    #[cfg(not(feature = "hsa"))]
    pub fn hsa_tool_init<E: HsaFeatureRequired>(
        _name: &str,
        _runtime_version: u64,
        _init: impl FnOnce(u64) -> Result<(), E>,
    ) -> c_int {
        unreachable!("HsaFeatureRequired has no implementation")
    }

    /// Without the `hsa` feature: does not compile (see [`HsaFeatureRequired`]).
    #[cfg(not(feature = "hsa"))]
    pub fn hsa_tool_fini<F: FnOnce() + HsaFeatureRequired>(_name: &str, _fini: F) {
        unreachable!("HsaFeatureRequired has no implementation")
    }

    /// References every entry point, so a link step keeps them all.
    pub fn entry_points() -> usize {
        let all: &[*const ()] = &[
            kreplay_status_string as *const (),
            kreplay_last_error as *const (),
            kreplay_version as *const (),
            kreplay_version_string as *const (),
            kreplay_abi_table as *const (),
            kreplay_abi_layout as *const (),
            kreplay_context_create as *const (),
            kreplay_context_destroy as *const (),
            kreplay_context_start as *const (),
            kreplay_context_stop as *const (),
            kreplay_context_is_active as *const (),
            kreplay_context_declare_participant as *const (),
            kreplay_context_override as *const (),
            kreplay_context_participates as *const (),
            kreplay_has_overrides as *const (),
            kreplay_configure_replay as *const (),
            kreplay_replay_owner as *const (),
            kreplay_replay_is_active as *const (),
            kreplay_replay_start_context as *const (),
            kreplay_replay_stop_context as *const (),
            kreplay_pass_sync as *const (),
            kreplay_policy_set as *const (),
            kreplay_policy_json as *const (),
            kreplay_filter_set as *const (),
            kreplay_outcome_json as *const (),
            kreplay_outcome_sink_set as *const (),
            kreplay_summary_get as *const (),
            kreplay_summary_json as *const (),
            kreplay_shutdown as *const (),
            // The simulator's and the backends' entry points join below behind their features
            // (`sim`, `hsa`, `cuda`).
        ];
        #[cfg(feature = "sim")]
        let sim: &[*const ()] = &[
            sim::kreplay_sim_create as *const (),
            sim::kreplay_sim_destroy as *const (),
            sim::kreplay_sim_synchronize as *const (),
            sim::kreplay_sim_alloc as *const (),
            sim::kreplay_sim_free as *const (),
            sim::kreplay_sim_write as *const (),
            sim::kreplay_sim_read as *const (),
            sim::kreplay_sim_digest as *const (),
            sim::kreplay_sim_kernel_create as *const (),
            sim::kreplay_sim_module_load as *const (),
            sim::kreplay_sim_module_variable as *const (),
            sim::kreplay_sim_module_kernel as *const (),
            sim::kreplay_sim_module_unload as *const (),
            sim::kreplay_sim_dispatch as *const (),
            sim::kreplay_sim_wait as *const (),
            sim::kreplay_sim_counter_select as *const (),
            sim::kreplay_sim_counter_read as *const (),
            sim::kreplay_sim_counter_group_name as *const (),
            sim::kreplay_sim_fault_inject as *const (),
            sim::kreplay_sim_fault_hits as *const (),
            sim::kreplay_sim_fault_clear as *const (),
        ];
        #[cfg(not(feature = "sim"))]
        let sim: &[*const ()] = &[];
        #[cfg(feature = "hsa")]
        let hsa: &[*const ()] = &[
            crate::hsa::OnLoad as *const (),
            crate::hsa::OnUnload as *const (),
            crate::hsa::kreplay_hsa_state_json as *const (),
            crate::hsa::kreplay_hsa_mark_tool_queue as *const (),
        ];
        #[cfg(not(feature = "hsa"))]
        let hsa: &[*const ()] = &[];
        std::hint::black_box(all).len()
            + std::hint::black_box(sim).len()
            + std::hint::black_box(hsa).len()
    }
}

#[cfg(all(test, feature = "hsa"))]
mod tests {
    use super::__private::{hsa_tool_fini, hsa_tool_init};

    // What `export_c_abi!(hsa_tool = ..)` answers `OnLoad` for each way the tool's init ends
    // (the end-to-end path is examples/hsa-rust-tool's test).
    #[test]
    fn the_hsa_tool_init_wrapper_maps_ok_err_and_panic_to_status_codes() {
        let mut seen = None;
        assert_eq!(
            hsa_tool_init("ok", 42, |v| {
                seen = Some(v);
                Ok::<(), String>(())
            }),
            0
        );
        assert_eq!(seen, Some(42), "the runtime version is passed on");
        assert_eq!(hsa_tool_init("err", 1, |_| Err("no groups")), 1);
        assert_eq!(
            hsa_tool_init("panics", 1, |_| -> Result<(), String> {
                panic!("tool bug")
            }),
            2,
            "a panic is caught and reported, not unwound into OnLoad"
        );
        let mut ran = false;
        hsa_tool_fini("fini", || ran = true);
        assert!(ran);
        hsa_tool_fini("panicking fini", || panic!("tool bug"));
    }
}
