//! # replay-tools
//!
//! The built-in tools of `kreplay run` (SPEC §12), above `replay-core` and below every
//! backend, so that each backend offers the same tools with the same records:
//!
//! - [`builtin`]: the `verify` and `timing` tools as one [`BuiltinTool`] (a
//!   [`replay_core::ReplayTool`]), their per-dispatch [`DispatchRecord`] and the per-kernel
//!   [`KernelRow`] of the report. What they need of the device is the narrow [`ToolDevice`]
//!   trait a backend implements: the regions `verify` digests and a digest of them now. GPU
//!   time per pass is the outcome record's (`pass_gpu_seconds`, from the backend's
//!   `Agent::poll_pass`), so `timing` needs nothing more. A backend's own tools (CUDA's
//!   counters, its capture) hang off the trait's callback hooks.
//! - [`job`]: the process's place in a job (ranks, `KREPLAY_RANKS`) and its records streamed
//!   to a file of its own, its report written atomically, as `kreplay run` reads them.
//! - [`collective`]: each process's replay time against the collective timeout in force
//!   (a window, and the process's total, past half of it warn once with the numbers).
//! - [`library`]: a user's tool library loaded by path, as every backend keeps it, and the
//!   one loader the shared object registers for all of them.
//!
//! No unsafe code, nothing of any device API.

#![forbid(unsafe_code)]

pub mod builtin;
pub mod collective;
pub mod job;
pub mod library;

pub use builtin::{
    kernel_rows, BuiltinTool, DispatchRecord, KernelRow, ToolDevice, ToolError, ToolKind,
    PASSES_ENV,
};
