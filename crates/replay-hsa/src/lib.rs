//! # replay-hsa
//!
//! The AMD backend of kernel-replay (SPEC §9.1): an HSA tool library. The HSA runtime loads the
//! one shared object (`libkernel_replay`, built by `replay-ffi` with its `hsa` feature) named in
//! `HSA_TOOLS_LIB` and calls its `OnLoad` with the runtime's API table; this crate is what that
//! `OnLoad` does. Nothing of ROCm is needed at build time.
//!
//! HIP graphs need nothing of their own here: the HIP runtime launches a graph's nodes as
//! ordinary AQL packets on its queues, so each kernel node reaches the write interceptor as a
//! kernel dispatch and is replayed like any other (SPEC §9.2 "Graphs").
//!
//! ## Layers (STYLE)
//!
//! A file imports only files of its own layer or below, and no file reaches itself through
//! what it imports (replay-tests' `layout_workspace` test checks both on every file), so no
//! two files import each other. Within a layer, each file imports only those listed before it.
//!
//! 1. The bottom: [`sys`], `#[repr(C)]` bindings of the subset used (status codes, agents,
//!    signals, queues, AQL packets and their header bits, [`sys::aql`], memory pools, pointer
//!    info) and the API tables **bound per major version** ([`sys::v1`]: Debian's ROCm 5.2
//!    headers; [`sys::v2`]: current ROCm, root 3 / core 2 / AMD extension 2, whose AMD
//!    extension table inserts entries in the middle); [`result`], status codes to `Result`
//!    ([`result::HsaError`]) and why a table is refused ([`result::TableError`]); [`table`],
//!    which checks `major_id` and `minor_id` (the size) of every table before any entry is
//!    read, and resolves the slots of the entries the backend needs from the right binding.
//! 2. [`state`]: the process-wide state the entry points share: the saved originals, the
//!    backend (install record, tracker, agents), the service, the async-events thread, the
//!    memory engines.
//! 3. The roles, named as in every backend: [`queue`] (packets, the intercepted queues,
//!    completion tracking), [`tracker`] (the SPEC §7.1 classification, the records the
//!    wrappers make, the copy fence), [`module`] (code objects: module variables, and kernel
//!    names in [`module::kernels`]), [`memory`] (the memory layer's copies and digests),
//!    [`agent`] (the `Agent` of one submission).
//! 4. The entry points: [`intercept`] (the wrappers installed in the runtime's API table, one
//!    file per API family: [`intercept::memory`] allocations, frees, host locks and IPC,
//!    [`intercept::vmem`] virtual memory, [`intercept::copy`] copies and fills,
//!    [`intercept::code`] executable destruction, [`intercept::queue`] the queue wrappers and
//!    the write interceptor; `intercept/mod.rs` installs them) and [`tool`] (`OnLoad` /
//!    `OnUnload`, the attached C/C++ or Rust tool or `replay-tools`' built-in `verify` /
//!    `timing` over this backend's `ToolDevice`, the diagnostics), and beside them
//!    [`standalone`] (SPEC §13: a capture replayed on a runtime whose table `OnLoad` wrapped,
//!    as an application: regions recreated through the virtual-memory entries at their
//!    captured addresses or relocated, the code object loaded with its variables placed, one
//!    launch under a replay service of its own; `kreplay replay` on the simulated runtime).
//!
//! ## What this stage does, and what it does not
//!
//! `OnLoad` validates the table, saves the original entries and installs wrappers on core
//! `hsa_memory_allocate`/`free`, AMD `hsa_amd_memory_pool_allocate`/`free`, the virtual-memory
//! entries of major 2 (`hsa_amd_vmem_map`, `_unmap`, `_set_access`, `_address_reserve`
//! (`_align`), `_address_free`, `_handle_create` / `_release`, `_import_shareable_handle`:
//! mappings with read-write access for an agent are captured on it, SPEC §7.1 row), `hsa_amd_memory_lock` / `_lock_to_pool` / `_unlock`,
//! `hsa_amd_ipc_memory_attach` / `_detach`, and the async-copy entries
//! (`hsa_amd_memory_async_copy`, `_rect`, and `_on_engine` in major 2); they feed a
//! [`replay_memory::Tracker`] (the free is recorded before the memory is released; host memory
//! is recorded for every GPU agent, so an argument pointing into it is found) and the copy
//! fence. The copies, core `hsa_memory_copy` and AMD `hsa_amd_memory_fill` run holding the
//! reader side of every GPU agent they write (SPEC §6 step 4: a window's restore never undoes
//! them; [`intercept::copy`] says what is gated and what cannot be); and core
//! `hsa_executable_destroy`, so an unloaded executable's kernels are forgotten
//! ([`intercept::code`], [`module::kernels`]). It then attaches the tool: the C/C++ library
//! named by `KREPLAY_HSA_TOOL`, else a built-in tool named by `KREPLAY_HSA_BUILTIN`, else one
//! built into the shared object itself ([`tool`] documents the symbols).
//!
//! When the table also has the queue, signal and interception entries (all of them;
//! [`table::QueueSlots`]), `hsa_queue_create` and `hsa_queue_destroy` are wrapped too: queues
//! are created as intercepting queues with the write interceptor of [`intercept::queue`],
//! which runs the replay window (SPEC §6) for a submission of exactly one kernel dispatch
//! through the service given with [`set_service`] (the shared object gives its one service), with
//! [`agent::QueueAgent`] as the agent and a [`replay_memory::MemoryEngine`] per agent over
//! [`memory::HsaMemory`] (asynchronous copies through the original
//! `hsa_amd_memory_async_copy` on reused completion signals, host digests, `restore=full`,
//! and `hsa_amd_pointer_info` for argument words the tracker never saw:
//! [`tracker::pointer_class`]). The argument block is read to the kernel symbol's kernarg
//! segment size ([`module::kernels::kernarg_segment_size`]).
//! Signal-wait timeouts are converted to the runtime's timestamp ticks.
//!
//! What the window gates and what a tool sees ([`intercept::queue`], [`agent`]): the interceptor
//! never blocks (what cannot run now is parked per queue, in order, and flushed when the
//! window ends); every submission it does not replay is written under the reader side of the
//! agent's gate; tool work is what runs on a tool's queue (created from a callback, or
//! declared with [`queue::mark_tool_queue`], which C and C++ tools call as
//! `kreplay_hsa_mark_tool_queue` from `include/kernel_replay_hsa.h`). A replayed dispatch's completion signal is
//! fired by a trailing barrier-AND, so profiling times read from that signal are the
//! barrier's, after the last pass, not the kernel's. Not gated: device work that reaches the
//! GPU without an intercepted queue (queues created before `OnLoad`, device-side enqueues
//! into rings the runtime does not intercept), and tool work written into an application's
//! queue (it is parked as application work while a window runs, so a tool must not wait for
//! it inside a callback; a submission parked on an application queue while a tool callback
//! runs is named in a warning, once per queue, that says how to declare the queue).
//!
//! Module variables are enumerated per agent through the AMD loader extension and executable
//! symbol iteration ([`module::HsaModules`]), and a capture names each module-variable region
//! by its symbol (the dispatch's executable's variables, [`agent`]'s code image); the same walk names kernels
//! ([`module::kernels::KernelNames`]: kernel object → symbol name), so the kernel filter
//! matches the names users know.
//!
//! Not yet: device digests (a digest kernel in a code object needs the AMD toolchain), so
//! `restore=dirty` and the `arguments` scope check digest on the host.
//!
//! ## Memory classes: what declines, and what cannot be detected
//!
//! Decline rather than corrupt, where this layer can tell:
//!
//! - **IPC.** A block imported from another process (`hsa_amd_ipc_memory_attach`) and a local
//!   block exported to others (`hsa_amd_ipc_memory_create`) are `IPC_IMPORTED`: peers write
//!   them during a window, so they are never captured, and a kernel whose argument points into
//!   one declines `untracked_memory` ([`intercept::memory`]).
//! - **Imported virtual-memory handles** (`hsa_amd_vmem_import_shareable_handle`) map as
//!   uncapturable memory: an argument into them declines.
//!
//! Not detectable here (nothing this backend wraps or reads tells them apart), so users must
//! exclude such kernels (`KREPLAY_KERNEL_EXCLUDE`) or accept what follows:
//!
//! - **Images written by kernels** (`hsa_ext_image_create`, `hsa_amd_image_create`: the image
//!   extension table is not wrapped). A kernel writes an image through a handle, not a pointer
//!   into the image's memory: scope `all` captures that memory where the application
//!   allocated it through a wrapped entry; scope `arguments` does not, and only the after-pass
//!   scope check (a host digest of the tracked memory outside the scope) finds the write,
//!   truncating `write_outside_scope` and moving the kernel to scope `all`. Image memory no
//!   wrapped entry allocated is invisible.
//! - **The hostcall and printf buffers** of kernels that call the host (`printf`, `malloc`
//!   through hostcall, sanitizer reports): each pass calls the host again, so output is
//!   printed once per pass, and the buffers (ordinary allocations, reached through the hidden
//!   kernel arguments of the kernarg segment) are captured and restored between passes while
//!   the host's listener may still be reading them. Telling such kernels apart needs the code
//!   object's kernel metadata (`hidden_hostcall_buffer`, `hidden_printf_buffer`), which this
//!   backend does not parse.
//! - **The device heap** (`malloc`/`free` in kernels, `hidden_heap_v1`): restored with the
//!   memory an argument reaches, so a pass's allocations are undone with the heap's state; a
//!   heap the runtime grows from memory no wrapped entry allocated is not.
//! - **Other processes' writes** to memory they reach without IPC through this table (a
//!   dma-buf or shareable handle exported by other means, a peer device's direct writes), and
//!   device-side enqueues into rings the runtime does not intercept: not gated, not seen; a
//!   restore undoes them.
//!
//! ## Design choices
//!
//! - **Refuse rather than guess.** An unknown major, a table too small for a needed entry or a
//!   NULL needed entry installs nothing, logs why, and `OnLoad` answers `false`: the runtime
//!   then runs the application untouched. Sizes alone are not trusted, because majors move
//!   entries.
//! - **Validate, then save, then write.** Every slot is resolved and every original read before
//!   the first entry is replaced, and the originals are published before the first wrapper, so
//!   a wrapper never runs without its original.
//! - **Wrappers never fail the application's call.** They call the original with the caller's
//!   arguments and return its status; the bookkeeping runs under `catch_unwind`.
//! - **Queries go to the originals**, never through the wrapped table, so the backend's own
//!   queries are not recorded as the application's.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

// Bottom layer.
pub mod result;
pub mod sys;
pub mod table;
// Process state.
pub mod state;
// Roles.
pub mod agent;
pub mod memory;
pub mod module;
pub mod queue;
pub mod tracker;
// Entry points.
pub mod intercept;
pub mod standalone;
pub mod tool;

pub use module::kernels;
pub use result::{HsaError, TableError};
pub use state::{backend, service, set_service};
pub use tool::{on_load, on_unload, TOOL_ENV, TOOL_INIT_SYMBOL};
