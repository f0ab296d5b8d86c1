//! # replay-cuda
//!
//! The NVIDIA backend of kernel-replay (SPEC §9.2): the replay window of `replay-core` and the
//! memory layer of `replay-memory`, over the CUDA driver API loaded at run time through
//! [`cudarc`]. Nothing of CUDA is needed to build it; where the driver cannot be loaded,
//! [`is_available`] says why and every constructor returns that error.
//!
//! Layers, as in cudarc: [`sys`] (raw bindings) and [`result`] (status codes as `Result`) are
//! cudarc's, re-exported, with this crate's checked calls added to [`result`]; this crate's
//! modules own the driver objects and implement the core's traits, with the same role names
//! as every backend:
//!
//! | module | role |
//! |---|---|
//! | [`agent`] | [`replay_core::Agent`] for a device: drains, passes, ordinary run, completion; the captured launch it replays |
//! | [`memory`] | [`replay_core::DeviceMemory`]: tiers, batched copies on non-blocking streams with events as fences, device digests (its [`kernels`]: CUDA C compiled with NVRTC), pointer queries |
//! | [`queue`] | the streams the backend knows and owns, stream capture, what a copy submitted to a stream looks like, completion events and timers |
//! | [`tracker`] | allocation API reporting to [`replay_memory::Tracker`] with the classes of SPEC §7.1 |
//! | [`module`] | code objects: NVRTC compilation, cubin loading, kernel names and parameter layouts, module globals from the ELF symbol table |
//! | [`intercept`] | where an unmodified application hands the backend a submission: the wrapper table (`intercept/mod.rs`: the driver's entries, their wrappers under `catch_unwind`, handed out by `dlsym` and `cuGetProcAddress`) and the hooks by API family: `launch` (`run_launch` and the launch entries), `memory` (allocations, frees, host registration), `vmem` (virtual-memory mappings), `copy` (gated copies and memsets), `code` (module and library unloads, naming the loads of `state::images`), `stream` (streams and captures), `context` (context life), `gate` (write gates) |
//! | [`state`] | process-wide state of the interception: on or off, the service, backends per device, tracker, streams and captures seen, mapping handles, layouts, counts by kind; beside it the state of one concern each with that concern's hooks: [`state::graph`] (graphs), [`state::images`] (loaded code images), [`state::unseen`] (writes no snapshot sees), [`state::context`] (context life) |
//! | [`tool`] | entry points a runtime calls (`InitializeInjection`'s body) and the tools attached there: `replay-tools`' built-in `verify` and `timing` over this backend's `ToolDevice` ([`tool::CudaTools`]), and the `counters` tool of `kreplay run` |
//! | [`job`] | the process's place in a job (`replay_tools::job`, re-exported: its rank and whether it replays, its records streamed to a file of its own and its report written atomically), and another tool's injection chained after ours |
//! | [`signals`] | for a launcher (`kreplay run`): termination signals passed on to the program's process group, the terminal handed to it |
//! | [`counters`] | hardware counters of replayed dispatches: CUPTI's range profiler loaded at run time, metric lists compiled into one-pass groups on the host, profiler passes inside replay passes; `__sass_` metrics through the SASS Metrics API in a pass of their own (SPEC §12.1); the values go into `replay-report-types`' plain report, never through `replay-report`'s writers (this crate is linked into the preloaded library, which carries no SQLite) |
//! | [`sys`], [`result`] | raw bindings, checked calls (and the driver loaded and initialised once, [`is_available`]) |
//!
//! and, beside the roles: [`launch`] (argument blocks, launch configuration, the raw launch),
//! `device` ([`Device`]: the primary context, events, the bounded event wait), [`error`], and
//! [`backend`], the library API on top: one [`CudaBackend`] per device ties the roles
//! together, and [`CudaBackend::launch`] runs a launch under replay.
//!
//! Dependencies point one way: `tool` uses `intercept` and `state`; `intercept`'s hooks use
//! `state` (and `state::graph` uses the launch, stream and gate hooks of `intercept`), `state`
//! uses `backend`; `backend` uses the roles, `agent` uses `memory`, `module`, `queue` and `launch`;
//! `memory` uses `module`, `queue` and `launch`; `tracker` uses `queue`; every role uses
//! `device`, `error`, `result` and `sys`, which import no role.
//!
//! Who validates what: the core validates every window transition and owns every deadline;
//! the memory layer plans, places and checks liveness; this crate translates. Misuse of the
//! backend (an unknown fence, a backing offset out of bounds) is reported as
//! `BackendErrorKind::InvalidArgument`, never a panic.
//!
//! ## Design choices
//!
//! - **One context.** Each device is used through its retained primary context, the one the
//!   CUDA runtime and the application use, so their pointers and ours agree. Every entry point
//!   makes it current on the calling thread first.
//! - **Bounded waits.** The driver's synchronise calls have no timeout; every wait records an
//!   event and polls `cuEventQuery` (spinning, then yielding, then sleeping in short steps)
//!   within the budget the core gives.
//! - **Own streams.** Snapshot and restore copies and digest kernels run on non-blocking
//!   streams of their own, so they neither wait for nor order against the legacy default
//!   stream; a restore is ordered before the next pass on the device (the pass's stream waits
//!   on the restore's events: `cuStreamWaitEvent`, see [`agent`] and [`memory`]), everything
//!   else by the window waiting on fences.
//! - **Digests on the device**, bit-identical to [`replay_core::digest::digest`], by a kernel
//!   compiled with NVRTC at start-up (see [`kernels`]: one block per segment, order-free sums).
//!   Without NVRTC the backend digests on the host and says so.
//! - **Library mode completion** is the stream order: see [`agent`].
//! - **Kernel identity.** A kernel's `code_object` is its module's load number, never reused,
//!   so what the library remembers about a misbehaving kernel dies with its module.
//!
//! ## Unsafe code
//!
//! Confined to this crate: driver and NVRTC calls through cudarc's `sys` and `result` layers,
//! the `Send`/`Sync` of driver handles, pinned and pageable backing memory, and opening the
//! CUDA libraries. The ELF reader is safe code over byte slices. Launching a kernel is
//! `unsafe` for the caller ([`CudaBackend::launch`]): the argument block must match the kernel
//! and its pointers must be valid, which no library can check.
//!
//! ## Testing without a GPU
//!
//! Unit tests cover argument blocks, the ELF reader, copy coalescing and scheduling, tier
//! reports and the memory layer's planning over them, and line-by-line ports of the digest
//! kernels against the reference. `tests/nvrtc.rs` compiles the digest kernels with NVRTC where
//! libnvrtc is present (`replay-bench`'s own `tests/nvrtc.rs` compiles the bench's CUDA sources
//! and reads module globals from a real cubin). `tests/fake_driver.rs` runs the backend end to end over a fake
//! `libcuda` (C, compiled at test time) that keeps device memory in host memory and emulates
//! the kernels by name. The GPU run is the `replay-bench` crate
//! (`kreplay bench --backend cuda`, or its `cuda_bench` binary).
//!
//! ## Stream capture
//!
//! A launch into a stream that is capturing a graph (or into the legacy stream while a blocking
//! stream captures) is a `SubmissionKind::StreamCapture`: it runs once, unchanged, into the
//! graph, and is never replayed. [`CudaBackend::begin_capture`], [`CudaBackend::end_capture`]
//! and [`CudaBackend::launch_graph`] are the library API for captures; a graph launch is gated
//! like any write that is not replayed. Under interception, graph launches are unrolled node by
//! node or profiled whole (SPEC §9.2 "Graphs", [`state::graph`]). The window never disturbs a
//! capture:
//!
//! - its driver calls run with the thread in the relaxed capture mode ([`RelaxedCapture`]),
//!   so an allocation, free or event query never fails and never invalidates a capture that
//!   another thread runs in global mode (PyTorch's default). The mode covers the whole
//!   [`CudaBackend::launch`] call, the tool's callbacks of the window included, and is restored
//!   when it returns;
//! - a drain never records an event on a capturing stream (such an event joins the capture,
//!   and querying it invalidates the capture). A capturing stream runs nothing new on the
//!   device, so the drain waits there on the stream's pre-capture fence, the event the
//!   interception's begin-capture hook recorded just before the capture began ([`queue`],
//!   "Pre-capture fence"). A capturing stream without one (begun through
//!   [`CudaBackend::begin_capture`], before the wrappers saw the stream, or outside them), or
//!   the legacy stream implicated in a blocking stream's capture (the per-thread default
//!   stream's among them), declines the window instead: the work submitted there before the
//!   capture began cannot be waited for otherwise;
//! - no device or pinned backing is allocated while a capture the backend can see is live
//!   (the snapshot falls back to pooled or pageable memory, or declines), and no backing is
//!   freed then ([`CudaMemory::release_deferred`]).
//!
//! A capture on a non-blocking stream the application created without registering it is
//! invisible to the backend; the relaxed mode keeps the window from disturbing it.
//!
//! ## Freeing backing memory
//!
//! `cuMemFree` and `cuMemFreeHost` wait for the whole device (measured on an H200: 1.5 s
//! behind a kernel spinning on another stream; forever beside a persistent kernel). Backing the
//! memory layer gives back is therefore never freed inside a window: it is kept on a deferred
//! list and released after the launch returns, outside the window, once every stream the
//! backend knows is idle and no capture is live; at once when an application allocation fails
//! for lack of memory; and when the backend is dropped.
//!
//! ## What the window gates, and what it cannot (SPEC §6 step 4)
//!
//! Every write to device memory made through this crate takes the agent's gate across its
//! submission, so it waits while a window is open and no restore undoes it:
//! [`CudaBackend::launch`] (replayed or not), [`CudaBackend::launch_plain`],
//! [`CudaBackend::copy`], [`CudaBackend::memset_d32`], [`CudaBackend::launch_graph`]. Tool work
//! inside a window's callback runs at once. Not gated: [`Queue::copy_async`] and
//! [`CudaMemory::write_device`] (for benchmarks and tools outside a window), and everything the
//! application does without the backend: kernels, copies and memsets it submits to the driver
//! or the runtime itself, work of other libraries (NCCL, cuBLAS workspaces), and host writes to
//! managed or pinned memory. A restore undoes such a write if it lands during a window. While
//! the service is active, an application in library mode must route its device writes through
//! the backend, or keep other threads from writing device memory while it launches kernels
//! under replay, and register the streams it uses so the drains see their work.
//!
//! Under interception of an unmodified application ([`intercept`]) the application's own
//! launches, graph launches, copies and memsets (1D, 2D, 3D, peer) pass through the wrappers
//! and so through the gate (array copies and `cuMemcpyBatchAsync` do not yet); a copy or
//! memset whose destination is tracked memory of another device (a peer copy, a UVA copy
//! issued from another device's context) takes that device's gate too. Every stream the
//! program creates (`cuStreamCreate`, `cuStreamCreateWithPriority`) or hands a launch, copy,
//! memset, graph launch or stream-ordered allocation is registered, so the agent drain waits
//! for work queued there; `cuStreamDestroy` waits for a window in progress before the stream
//! is forgotten. A drain that timed out on a stream is remembered: while the work it waited
//! for there is not done, later windows that would drain that stream decline at once instead
//! of waiting their whole bound again.
//!
//! Host writes into pinned, registered or managed memory cannot be gated. The scope check
//! does not watch such memory outside the snapshot (`replay_memory`'s crate docs, "Scope
//! check"), so a host thread filling a pinned buffer during a window neither truncates the
//! kernel nor forces scope `all` on it; such memory an argument reaches is captured, and a
//! host write into it during the window is undone by the restore. `cuMemHostRegister` ranges
//! flagged read-only are never digested, captured or restored; ranges flagged I/O memory are
//! neither, and a kernel given one declines `untracked_memory`. Memory shared with other
//! processes or devices (`cuIpcOpenMemHandle`, imported shareable handles, multicast objects,
//! and this process's own memory once exported: an allocation handed out by
//! `cuIpcGetMemHandle`, a `cuMemCreate` handle by `cuMemExportToShareableHandle`, at every
//! address it is mapped at) is never watched or captured (an argument into it declines; a
//! peer's write into it during a window is never undone), and a kernel of a module that
//! links NVSHMEM's device code (a symbol named `nvshmem*`) is a communication kernel, run
//! once, whatever its name. A `fork()`ed child runs with the interception off: every wrapper
//! forwards at once, so no lock another thread of the parent held at the fork is waited for.
//!
//! ## What a tool sees of a replayed launch's timing
//!
//! The passes run on the application's stream, one after another, with the restores between
//! them on the backend's own streams, each ordered before the next pass (the application's
//! stream waits for it on the device). Events the application
//! records on that stream around a replayed launch therefore enclose all N passes (and the
//! waits and restores between them): their elapsed time is about N times the kernel's plus
//! the restores, not one execution's. Per-pass GPU times are in the outcome record
//! (`pass_gpu_seconds`, from events around each pass alone); a caller's completion event
//! ([`LaunchOptions::completion`]) is recorded once, after the last pass.
//!
//! ## Not covered
//!
//! Cooperative launches are not submitted through [`CudaBackend::launch`]. Interception of an
//! unmodified application ([`intercept`], [`state`], [`tool`]; `kreplay run`) covers the launch
//! entries, the allocation and free entries (virtual-memory mappings and pool allocations
//! included; `cuMemMapArrayAsync` not), streams,
//! graph launches, copies and memsets (gated), module and library loads (`.nv.info` parameter
//! tables and module globals of cubins and of fat-binary entries, LZ4- and ZSTD-compressed
//! ones decompressed; the `.global` variables of PTX images; names demangled; a kernel of an
//! image whose globals stay unknown declines `untracked_memory` unless
//! `KREPLAY_CUDA_ALLOW_UNKNOWN_GLOBALS=1`), and CUPTI's count of launches that did not pass
//! through a wrapper where libcupti is found. Not yet: array copies, `cuMemcpyBatchAsync`,
//! parameter tables of PTX images (they have none: the driver or `extra` describes their
//! launches), fat-binary wrappers of version 2, a library's globals before one of its kernels
//! runs. See [`intercept`] and [`state`] for what each of those means for a run.
//!
//! ## Writes the snapshot cannot see, and context life (SPEC §9.2)
//!
//! Under interception these decline `unseen_writes` (the kernel runs once; [`state::unseen`]):
//! a launch whose argument block holds a live surface object (`cuSurfObjectCreate` over a CUDA
//! array, a 3D array or a mipmapped array's level from `cuMipmappedArrayGetLevel`, written
//! through `surf*write`), or whose layout is unknown while
//! one is live; a kernel of an image whose code calls the device-side heap (`malloc`/`free`),
//! device `printf` (`vprintf`) or a device-side graph launch ([`module::services`], the whole
//! image being the unit); a launch carrying a tensor map (`cuTensorMapEncodeTiled`,
//! `cuTensorMapEncodeIm2col`, `cuTensorMapEncodeIm2colWide`, moved by
//! `cuTensorMapReplaceAddress`) whose target the planned
//! snapshot does not cover (a target in tracked memory is added to the scope). What cannot be
//! detected, and so is not covered:
//!
//! - **HMM / ATS pageable memory**: system-allocated host memory (`malloc`, the stack, a
//!   file mapping) a kernel writes through a plain pointer on a system with HMM or ATS. No
//!   driver entry allocates it, the pointer query answers "not device memory", and the writes
//!   are neither captured nor restored: such a kernel replays with N executions' effects there.
//! - Surface objects, tensor maps or arrays reached through device memory (a table of handles
//!   in a buffer) instead of the argument block; surface references (`cuSurfRefSetArray`, gone
//!   from CUDA 12); tensor maps written on the device (`tensormap.replace`, Triton's
//!   on-device descriptors) or copied into device memory.
//! - A device-side service called by only some kernels of an image declines all of them.
//!
//! Context life ([`state::context`]): `cuDevicePrimaryCtxReset` (what `cudaDeviceReset`
//! calls) and `cuCtxDestroy` of a primary context forget the device's backend, its tracked
//! memory, streams and modules first; a launch in another context runs once under the
//! device's write gate, and what is allocated there is not recorded as the primary context's;
//! a stream-ordered allocation into a capturing stream is a graph node, not live memory.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod agent;
pub mod backend;
pub mod capture;
pub mod counters;
mod device;
pub mod error;
pub mod graph_tag;
pub mod intercept;
pub mod job;
pub mod launch;
pub mod memory;
pub mod module;
pub mod queue;
pub mod result;
pub mod signals;
pub mod standalone;
pub mod state;
pub mod sys;
pub mod tool;
pub mod tracker;

pub use agent::CudaAgent;
pub use backend::{BackendConfig, CaptureMode, CudaBackend, LaunchOptions};
pub use device::{Device, DeviceInfo};
pub use error::{CudaError, CudaResult, NvrtcUnavailable, Unavailable};
pub use launch::{ArgBlock, DevicePtr, KernelParam, LaunchConfig, ParamSlot};
pub use memory::kernels;
pub use memory::{CudaMemory, PointerAttributes, TierConfig};
pub use module::{compile_cubin, nvrtc_available, CudaFunction, CudaModule, ModuleRegistry};
pub use queue::{
    drain_beside_capture, set_drain_beside_capture, CaptureStatus, CapturedGraph, CompletionEvent,
    GpuTimer, Queue, QueueKind, RelaxedCapture, Stream, DRAIN_BESIDE_CAPTURE_ENV,
};
pub use result::MIN_DRIVER_VERSION;
pub use tracker::{AllocKind, Allocation, CudaAllocator, MemPool};

/// Whether CUDA can be used in this process: `Ok(number of devices)`, or why not (the driver
/// library is missing, `cuInit` failed, no device, a driver older than CUDA 12.0). Loads and
/// initialises the driver on first call; never panics.
pub fn is_available() -> Result<i32, Unavailable> {
    result::init_driver()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailability_is_reported_clearly() {
        match is_available() {
            Ok(n) => assert!(n > 0, "a machine with CUDA reports its devices"),
            Err(e) => {
                let msg = e.to_string();
                assert!(!msg.is_empty());
                if let Unavailable::NoDriverLibrary { tried } = &e {
                    assert!(msg.contains("libcuda"), "{msg}");
                    assert!(
                        tried.iter().any(|t| t.starts_with("libcuda.so")),
                        "{tried:?}"
                    );
                }
                // Every constructor fails the same way instead of panicking.
                let err = CudaBackend::new(0, Default::default(), BackendConfig::default())
                    .expect_err("no backend without CUDA");
                assert!(matches!(err, CudaError::Unavailable(_)), "{err}");
                assert!(err.to_string().contains("CUDA is not available"), "{err}");
                assert!(Device::open(0).is_err());
            }
        }
    }
}
