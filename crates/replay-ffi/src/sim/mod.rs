//! The simulated GPU through the C ABI (`kreplay_sim_*`): a C or C++ tool is tested without a
//! GPU, as Rust tools are with `replay-mock`.
//!
//! - A simulator is a [`replay_mock::SimRuntime`] with N agents, built on the library's clock
//!   (the wall clock the one replay service measures on; see `state`), with the one replay
//!   service installed: every `kreplay_sim_dispatch` is submitted through it on the calling
//!   thread, so the tool's replay callback runs there, exactly as an intercepted launch does.
//! - Kernels are built-ins chosen by name (the `builtins` module); modules are code objects with
//!   variables and instances of built-ins.
//! - Handles (simulator, kernel, module, dispatch) are checked like context handles, each type
//!   with its own tag. Destroying a simulator invalidates its kernels, modules and dispatches
//!   and joins its worker threads; `kreplay_shutdown` does the same for every simulator left
//!   (a hook of the [`crate::threads`] registry), once no `kreplay_sim_dispatch` is running
//!   (they are counted, so it can wait for a window running inside one).
//! - A module unloaded from inside a callback goes when the window has closed (see
//!   `kreplay_sim_module_unload`), so no restore writes into unloaded memory.
//! - Counters, faults and digests are the simulator's own: one counter group per execution,
//!   selected per agent (typically in PASS ENTER); faults per agent; a digest of all
//!   application memory of an agent, comparable across simulators.
//!
//! Each entry point follows the checked layer's order: shut down, inside a callback where
//! refused (only destroy), pointers and enumeration values, then handles, then the call.
//!
//! One area per file (SPEC §10), each using only those above it: `builtins` (the kernels by
//! name) and `convert` (limits and conversions), `state` (the handle tables and the shutdown
//! hook), `module` (kernels and code objects), then the entry points by area: `runtime`,
//! `memory`, `dispatch`, `counter`, `fault`. This file only gathers them.

mod builtins;
mod convert;
mod counter;
mod dispatch;
mod fault;
mod memory;
mod module;
mod runtime;
mod state;

pub use counter::{
    kreplay_sim_counter_group_name, kreplay_sim_counter_read, kreplay_sim_counter_select,
};
pub use dispatch::{kreplay_sim_dispatch, kreplay_sim_wait};
pub use fault::{kreplay_sim_fault_clear, kreplay_sim_fault_hits, kreplay_sim_fault_inject};
pub use memory::{
    kreplay_sim_alloc, kreplay_sim_digest, kreplay_sim_free, kreplay_sim_read, kreplay_sim_write,
};
pub use module::{
    kreplay_sim_kernel_create, kreplay_sim_module_kernel, kreplay_sim_module_load,
    kreplay_sim_module_unload, kreplay_sim_module_variable,
};
pub use runtime::{kreplay_sim_create, kreplay_sim_destroy, kreplay_sim_synchronize};

pub(crate) use dispatch::dispatches_in_flight;
