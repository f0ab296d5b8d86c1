//! # replay-mock
//!
//! The simulated GPU of kernel-replay (SPEC §2): a backend that behaves like a GPU where it
//! matters, so the replay window (SPEC §6) and the memory layer (§7) run and are tested end to
//! end on a machine with no GPU. It both **simulates** (real bytes, real asynchrony, virtual
//! time, fault injection) and **records** (expectations with readable mismatch messages, and an
//! invariant checker for stress tests), like wgpu's `noop` backend and `tracing-mock`.
//!
//! Roles, named as in a real backend:
//! - [`agent`]: [`SimAgent`], the [`replay_core::Agent`] the window drives (drains, passes,
//!   the ordinary run, the completion signal).
//! - [`memory`]: [`SimMemory`], the [`replay_core::DeviceMemory`] with three tiers (§7.3),
//!   backing allocations and fenced, asynchronous copies and digests (§7.4), over [`heap`]:
//!   host-backed device memory of every class of SPEC §7.1 at fake, per-agent addresses with
//!   capacities, and the virtual-memory state (reservations, handles, mapping access).
//! - [`queue`]: queues and the copy engine, each a FIFO with its own worker thread and counting
//!   completion (§9.1: drains wait on completion, never on the read index).
//! - [`module`]: code objects: the loader, the kernels a code object holds, and its module
//!   variables ([`SimModuleVariables`], what `replay-memory` enumerates). There is no `tracker` file:
//!   [`SimRuntime::alloc`] and [`SimRuntime::free`] report to `replay-memory`'s tracker
//!   themselves.
//! - [`vmem`]: virtual-memory mappings of the simulated memory (reserved ranges, handles,
//!   map / unmap of whole mappings, access per agent enforced on kernels and copy engines) and
//!   stream-ordered allocations, reported to the tracker as a backend's wrappers do.
//! - [`gpu`]: [`SimGpu`], the device: agents and their worker threads (lane loops, kernel
//!   executions); [`state`]: what the device, its handles and its workers share (agents,
//!   recorder, invariant checker, faults, counters, tracker, pending submissions).
//! - [`clock`]: [`SimClock`], wall or virtual time; [`kernel`]: kernels as Rust closures over
//!   device memory (not a role of a real backend, whose kernels are code); [`fault`]: injected faults; [`expect`]: the recorder and [`Expect`];
//!   [`invariant`]: the stress-test checker; [`counters`]: simulated counter groups;
//!   [`runtime`]: [`SimRuntime`], the application-facing API that calls the replay service.
//! - Test doubles for the layers above the backends, shared by every crate's tests:
//!   [`double`] (an instant agent, a fake device memory, a scripted tool with its log, a fake
//!   clock) and [`instant`] (a snapshotter that finishes at once).
//!
//! Files use each other one way, bottom to top: `clock`, `counters`, `fault`,
//! `expect`; `kernel` (kernels and their context, which reaches memory through a trait the
//! state implements); `error`, `heap`, `queue`, `invariant`; `state`; the roles `agent`,
//! `memory`, `tracker`; `gpu` (the device and its workers); `runtime` (the runtime itself in
//! `runtime/mod.rs`, its memory calls and its submissions in `memory` and `submit` beside it);
//! `vmem` (the runtime's virtual-memory entries). `instant` stands apart.
//!
//! Design:
//! - Everything the window waits for is asynchronous: each queue and copy engine has a worker
//!   thread; drains, passes and fences are tickets polled with a time budget. On the wall clock
//!   a poll blocks up to its budget; on virtual time it blocks (in wall time) while the awaited
//!   work runs and advances the clock by the budget only once that work is blocked (an
//!   injected stall, a kernel with a modelled duration) and the device is quiescent. So host
//!   speed never makes a pass look stuck, and a stuck one times out in microseconds.
//! - Injected stalls always end: released when the window abandons the wait they stalled
//!   (after it declined or truncated), or after a wall-clock cap. The application always
//!   completes, exactly once.
//! - The simulator knows a window is open on an agent from the calls the window makes (first
//!   drain → completion signal or its own ordinary run) and flags ordinary work inside it.
//! - Only the window-facing calls are recorded for expectations, on the calling thread, in
//!   call order: deterministic in a single-threaded test. Worker timing is not recorded.
//! - Validation: the core validates transitions; misuse of this backend (unknown tickets,
//!   handles, queues) is an `InvalidArgument` error, never a panic on a worker thread. A kernel's
//!   memory fault or panic completes the dispatch with an error.
//!
//! Decisions where SPEC is silent:
//! - Module variables are not reported to the tracker as allocations; the memory layer finds
//!   them by enumeration. Their storage counts against device memory.
//! - Tool work is recognised as the core does: inside a callback on the same thread, or
//!   launched from inside a callback and forwarded through the runtime thread.
//! - On virtual time, time advanced by one stalled wait is seen by every other waiter; give
//!   concurrent stress tests pass bounds larger than the injected stalls they overlap.
//! - The replay service must run on the runtime's clock ([`SimRuntime::clock`]).
//! - Every path that writes device memory besides a single dispatch waits for a window open
//!   on the agent it writes (SPEC §6 step 4), so no restore undoes it: host writes
//!   ([`SimRuntime::write`], `fill`, `write_u32s`) and asynchronous copies
//!   ([`SimRuntime::copy_async`], gated on the agent that owns the destination) take
//!   [`replay_core::ReplayService::enter_write`] across the write or the submission;
//!   [`SimRuntime::write_async`], barriers and multi-kernel submissions
//!   ([`SimRuntime::dispatch_batch`]) are submissions the service itself gates. From
//!   inside a tool callback they run at once (tool work). A copy into an agent's memory on
//!   another agent's engine is in the destination agent's copy fence.
//! - A pass can fail after its launch ([`Fault::PassSubmitAfterLaunch`]): the packet is queued
//!   and runs, and `submit_pass` reports `AfterSubmit`.
//!
//! A minimal end-to-end use:
//!
//! ```
//! use std::sync::Arc;
//! use replay_core::{AgentId, ContextId, Dim3, MemoryClass, NoContextControl, Operation, Phase,
//!     Policy, ReplayPayload, ReplayService, Subscription, UserData};
//! use replay_mock::{KernArgs, Kernel, SimRuntime};
//!
//! let rt = SimRuntime::new(); // one agent, virtual time
//! let svc = Arc::new(ReplayService::new(Policy::default(), rt.clock(), Arc::new(NoContextControl)));
//! let tool = |op: Operation, ph: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData| {
//!     if (op, ph) == (Operation::Config, Phase::Enter) {
//!         p.replay_pass_count = Some(Arc::new(|_, _| 3));
//!     }
//! };
//! svc.configure(ContextId(1), Subscription::CONFIG | Subscription::PASS, Arc::new(tool)).unwrap();
//! svc.start().unwrap();
//! rt.set_service(Some(svc));
//!
//! let buf = rt.alloc(AgentId(0), 64, MemoryClass::DEVICE_COARSE).unwrap();
//! let inc = Kernel::new("inc", |ctx| {
//!     let p = ctx.word(0);
//!     ctx.atomic_add_u64(p, 1)?;
//!     Ok(())
//! });
//! let args = KernArgs::new().ptr(buf).build();
//! let done = rt.dispatch(rt.queue(AgentId(0), 0), &inc, &args, Dim3::new(1, 1, 1)).unwrap();
//! assert_eq!(done.record().unwrap().executed_passes, 3);
//! done.wait().unwrap();
//! assert_eq!(rt.read(buf, 8).unwrap(), 1u64.to_le_bytes()); // three passes, one execution
//! ```

#![forbid(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod agent;
pub mod clock;
pub mod counters;
pub mod double;
pub mod error;
pub mod expect;
pub mod fault;
pub mod gpu;
pub mod heap;
pub mod instant;
pub mod invariant;
pub mod kernel;
pub mod memory;
pub mod module;
pub mod queue;
pub mod runtime;
pub mod state;
pub mod tools;
pub mod vmem;

pub use agent::{set_graph_node, with_graph_node, SimAgent, SIM_CAPABILITIES};
pub use clock::{ClockMode, SimClock};
pub use counters::{CounterGroup, CounterSample, CounterStore, CounterValues};
pub use error::SimError;
pub use expect::{
    CopyDirection, Event, EventKind, Expect, ExpectError, Pattern, Recorder, TargetPattern,
};
pub use fault::{Fault, FaultId, FaultMode};
pub use gpu::{LaneIndices, SimGpu};
pub use heap::{agent_base, agent_of, AllocInfo, HandleKind, Owner, Pool, AGENT_SPAN};
pub use invariant::{
    InvariantStats, Invariants, Stage, Violation, WaitBounds, WaitKind, WaitRecord,
};
pub use kernel::{
    Access, KernArgs, Kernel, KernelBody, KernelCtx, KernelError, MemFault, MemFaultKind,
};
pub use memory::SimMemory;
pub use module::{Module, ModuleSpec, SimModuleVariables, VariableSpec};
pub use queue::{Signal, WorkerState};
pub use runtime::{
    Completion, QueueRef, SimRuntime, SimRuntimeBuilder, WeakRuntime, FINAL_DIGEST_KEY,
};
pub use state::{AgentConfig, SimConfig};
pub use tools::SimTools;
pub use vmem::{MapAccess, VmemHandle};
