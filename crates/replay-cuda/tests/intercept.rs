//! The interception layer in process, over the fake driver (`tests/fake_driver/fake_inject.c`
//! compiled as `libcuda.so.1` and loaded before anything looks for the driver): the wrappers
//! of `replay_cuda::intercept` called as an application's calls would reach them.
//!
//! - a copy or memset (1D, 2D) issued on another thread while a window is open waits for the
//!   window (the write gate), so no restore undoes it;
//! - a free of captured memory on another thread during a window is recorded first and the
//!   window ends with memory equal to one execution;
//! - a launch of unknown layout that writes pinned host memory is replayed with that memory
//!   captured (not truncated after one pass) and ends equal to one execution;
//! - a kernel whose layout the driver does not describe takes the `.nv.info` table of the
//!   image the application loaded it from;
//! - a kernel of an application image (a fat binary) that writes its module globals is
//!   replayed with them restored, and they leave the registry when the module is unloaded;
//! - inside the library (`Internal`) every wrapper forwards to the driver, no window;
//! - virtual-memory mappings (`cuMemCreate` / `cuMemAddressReserve` / `cuMemMap` /
//!   `cuMemSetAccess`, PyTorch's expandable segments) reached through `dlsym`, as an
//!   application reaches them: a kernel writing one replays with memory equal to one
//!   execution; one unmapped on another thread during the window is never written after; a
//!   mapping of a handle imported from a shareable handle, or one whose access for the
//!   device is withdrawn (`cuMemSetAccess`), declines `untracked_memory`; a
//!   `cuMemAllocFromPoolAsync` allocation is captured until `cuMemFreeAsync` orders its free;
//! - the library's backing gives way to the program: an allocation or array creation that
//!   runs out of memory while backing is pooled is retried after its release, and backing
//!   unused past `pool_idle_release` is released by the next intercepted allocation.
//!
//! Skipped where no C compiler is found, or where a real driver is present.
//!
//! One test binary, its tests by subject in `tests/intercept/` over the shared `harness`.

mod support;

#[path = "intercept/harness.rs"]
mod harness;

#[path = "intercept/backing.rs"]
mod backing;
#[path = "intercept/captures.rs"]
mod captures;
#[path = "intercept/globals.rs"]
mod globals;
#[path = "intercept/layouts.rs"]
mod layouts;
#[path = "intercept/run_once.rs"]
mod run_once;
#[path = "intercept/virtual_memory.rs"]
mod virtual_memory;
#[path = "intercept/write_gate.rs"]
mod write_gate;
