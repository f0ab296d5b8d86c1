//! What an unmodified program does beside its kernel launches, under the interception, over
//! the fake driver (`tests/fake_driver/fake_inject.c` as `libcuda.so.1`):
//!
//! - streams: a stream that only ever carried a copy, memset, graph launch or stream-ordered
//!   allocation, or that the program created through `cuStreamCreate*`, is covered by the
//!   window's agent drain; a stream destroyed on another thread during a window waits for it;
//!   a drain that timed out on a stream is not waited for again while that stream is stuck;
//! - stream capture beside a window: a capture another thread began through the wrappers
//!   leaves a pre-capture fence, so a window on another stream replays, its drain waiting for
//!   the capturing stream's pre-capture work (and recording nothing there), and the capture
//!   stays valid; a capture begun past the wrappers still declines the window; ending one
//!   capture through the wrappers leaves another thread's global capture valid;
//! - peer and UVA copies issued from another device's context into this device's memory wait
//!   for this device's window;
//! - host-resident memory: a host write into pinned memory during a window does not truncate
//!   an unrelated kernel; `cuMemHostRegister`'s I/O-memory and read-only flags are honoured;
//! - shared memory: `cuIpcOpenMemHandle` mappings are IPC memory (never captured); a kernel of
//!   a module that links NVSHMEM is a communication kernel whatever its name;
//! - each loaded module has its own code object, so an unload forgets only its own memos;
//! - a `fork()`ed child does not block on a lock another thread of the parent held.
//!
//! Skipped where no C compiler is found, or where a real driver is present.
//!
//! One test binary, its tests by subject in `tests/streams/` over the shared `harness`.

mod support;

#[path = "streams/harness.rs"]
mod harness;

#[path = "streams/capture.rs"]
mod capture;
#[path = "streams/drains.rs"]
mod drains;
#[path = "streams/fork.rs"]
mod fork;
#[path = "streams/host_memory.rs"]
mod host_memory;
#[path = "streams/modules.rs"]
mod modules;
#[path = "streams/peer_copies.rs"]
mod peer_copies;
#[path = "streams/shared_memory.rs"]
mod shared_memory;
