//! Host memory: host writes into pinned memory, `cuMemHostRegister`'s I/O and read-only flags.

use replay_core::MemoryClass;
use replay_cuda::{intercept, state, sys};

use crate::harness::{alloc_filled, during_a_window, free, launch_rmw, read, rmw_host, setup, N};

/// `N` words of host memory registered through the wrapper with `flags`, filled.
fn registered_host(flags: u32) -> Vec<u64> {
    let mut v: Vec<u64> = (0..N as u64).map(|i| i * 11 + 3).collect();
    // SAFETY: the intercepted registration of a live vector's buffer.
    let r = unsafe { intercept::mem_host_register(v.as_mut_ptr().cast(), N * 8, flags) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    v
}

fn unregister(v: &mut [u64]) {
    // SAFETY: unregisters a buffer registered by `registered_host`.
    let r = unsafe { intercept::mem_host_unregister(v.as_mut_ptr().cast()) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
}

#[test]
fn a_host_write_into_pinned_memory_during_a_window_does_not_truncate_an_unrelated_kernel() {
    let Some((_g, s)) = setup() else { return };
    let mut pinned = registered_host(0);
    let p = pinned.as_mut_ptr() as usize;
    let a = alloc_filled(10);
    let mut once = read(a);
    rmw_host(&mut once, 5);
    // A pin-memory thread fills the buffer while the kernel's window is open.
    let early = during_a_window(&s, a, move || {
        // SAFETY: the registered buffer, alive until unregistered below.
        unsafe { std::ptr::write_volatile((p as *mut u64).add(3), 0xFEED) };
    });
    assert!(early, "a host write is no driver call: nothing gates it");
    assert_eq!(s.tool.last(), (3, "none".into()), "replayed, not truncated");
    assert_eq!(read(a), once, "memory equals one execution");
    assert_eq!(pinned[3], 0xFEED, "the host's write stays");
    unregister(&mut pinned);
    free(a);
}

#[test]
fn host_memory_registered_as_io_memory_or_read_only_is_never_captured() {
    let Some((_g, s)) = setup() else { return };
    let tracker = &state::state().tracker;
    const IOMEMORY: u32 = 0x04;
    const READ_ONLY: u32 = 0x08;
    for (flags, class) in [
        (IOMEMORY, MemoryClass::PINNED_HOST | MemoryClass::PEER),
        (READ_ONLY, MemoryClass::PINNED_HOST | MemoryClass::READ_ONLY),
        (0, MemoryClass::PINNED_HOST),
    ] {
        let mut v = registered_host(flags);
        let (_, r) = tracker.lookup_any(v.as_ptr() as u64).expect("recorded");
        assert_eq!(r.class, class, "flags {flags:#x}");
        unregister(&mut v);
    }
    // A kernel given I/O memory runs once: nothing can be captured or restored there.
    let mut io = registered_host(IOMEMORY);
    let mut once = io.clone();
    rmw_host(&mut once, 5);
    assert_eq!(
        launch_rmw(s.rmw, io.as_mut_ptr() as u64, 5),
        sys::CUresult::CUDA_SUCCESS
    );
    assert_eq!(s.tool.last(), (1, "untracked_memory".into()));
    assert_eq!(io, once, "one execution");
    unregister(&mut io);
}
