//! Queues: dispatches, barriers, read indices, copies, memory faults, two GPUs at once.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use replay_hsa::sys;
use replay_hsa_sim::{PoolKind, SimConfig, SimHsa};

use crate::harness::{
    add_kernel, api, barrier_and, buffer_and_args, dispatch, eventually, read_u64, TIMEOUT,
};

#[test]
fn dispatch_runs_and_completion_signal_fires() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 42);
    let q = api.queue(sim.gpu_agents()[0], 64, false);
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done, false), true);
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 42);
    // SAFETY: a live queue.
    assert_eq!(unsafe { (api.load_read_index)(q) }, 1);
    // SAFETY: a live queue.
    assert_eq!(unsafe { (api.queue_destroy)(q) }, 0);
}

#[test]
fn barrier_and_waits_for_its_dependency() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let k = add_kernel(&sim);
    let (buf, args) = buffer_and_args(&sim, &api, 1);
    let q = api.queue(sim.gpu_agents()[1], 64, false);
    let dep = api.signal(1);
    let b = api.signal(1);
    let done = api.signal(1);
    api.submit(q, barrier_and(&[dep], b), false);
    api.submit(q, dispatch(k, args, done, false), true);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(api.load(b), 1, "the barrier waits");
    assert_eq!(read_u64(buf), 0, "the dispatch behind it waits");
    // SAFETY: a live queue.
    assert_eq!(unsafe { (api.load_read_index)(q) }, 0, "not consumed yet");
    // SAFETY: a live signal.
    unsafe { (api.signal_store_screlease)(dep, 0) };
    assert_eq!(api.wait_zero(b), 0);
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read_u64(buf), 1);
}

#[test]
fn read_index_moves_on_consume_not_on_completion() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let g = gate.clone();
    let k = sim.register_kernel("blocked", move |_| {
        let (m, cv) = &*g;
        let open = m.lock().unwrap();
        let _open = cv.wait_timeout_while(open, TIMEOUT, |o| !*o).unwrap();
        Ok(())
    });
    let q = api.queue(sim.gpu_agents()[0], 64, false);
    let done = api.signal(1);
    api.submit(q, dispatch(k, std::ptr::null_mut(), done, false), true);
    // SAFETY: a live queue.
    eventually("consumption", || unsafe { (api.load_read_index)(q) } == 1);
    assert_eq!(api.load(done), 1, "consumed, still running");
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    assert_eq!(api.wait_zero(done), 0);
}

#[test]
fn barrier_bit_waits_for_earlier_packets() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let order = Arc::new(Mutex::new(Vec::new()));
    let o = order.clone();
    let slow = sim.register_kernel("slow", move |_| {
        std::thread::sleep(Duration::from_millis(30));
        o.lock().unwrap().push("slow");
        Ok(())
    });
    let o = order.clone();
    let fast = sim.register_kernel("fast", move |_| {
        o.lock().unwrap().push("fast");
        Ok(())
    });
    let q = api.queue(sim.gpu_agents()[0], 64, false);
    let s1 = api.signal(1);
    let s2 = api.signal(1);
    api.submit(q, dispatch(slow, std::ptr::null_mut(), s1, false), false);
    api.submit(q, dispatch(fast, std::ptr::null_mut(), s2, true), true);
    assert_eq!(api.wait_zero(s2), 0);
    assert_eq!(api.wait_zero(s1), 0);
    assert_eq!(*order.lock().unwrap(), ["slow", "fast"]);
}

#[test]
fn async_copy_runs_on_the_copy_engine() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let src = api.alloc(sim.pool(0, PoolKind::DeviceCoarse), 256);
    let dst = api.alloc(sim.pool(1, PoolKind::DeviceCoarse), 256);
    // SAFETY: 256 bytes of simulated (host) memory.
    unsafe { std::ptr::write_bytes(src, 0xab, 256) };
    let dep = api.signal(1);
    let done = api.signal(1);
    let gpus = sim.gpu_agents();
    // SAFETY: live ranges, one dependency.
    let st =
        unsafe { (api.async_copy)(dst.cast(), gpus[1], src.cast(), gpus[0], 256, 1, &dep, done) };
    assert_eq!(st, 0);
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(api.load(done), 1, "waits for its dependency");
    // SAFETY: a live signal.
    unsafe { (api.signal_store_screlease)(dep, 0) };
    assert_eq!(api.wait_zero(done), 0);
    // SAFETY: 256 bytes of simulated memory.
    assert!(unsafe { std::slice::from_raw_parts(dst, 256) }
        .iter()
        .all(|b| *b == 0xab));
}

unsafe extern "C" fn queue_error(status: u32, _q: *mut sys::hsa_queue_t, data: *mut c_void) {
    // SAFETY: `data` is the test's `AtomicU64`.
    unsafe { (*data.cast::<AtomicU64>()).store(u64::from(status), Ordering::SeqCst) };
}

#[test]
fn kernel_memory_fault_reaches_the_queue_callback() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let k = sim.register_kernel("wild", |d| d.write_u64(0x10, 1));
    let status = AtomicU64::new(0);
    let mut q = std::ptr::null_mut();
    // SAFETY: a valid out pointer; the callback's data outlives the queue.
    let st = unsafe {
        (api.queue_create)(
            sim.gpu_agents()[0],
            64,
            0,
            Some(queue_error),
            (&status as *const AtomicU64).cast_mut().cast(),
            0,
            0,
            &mut q,
        )
    };
    assert_eq!(st, 0);
    let done = api.signal(1);
    api.submit(q, dispatch(k, std::ptr::null_mut(), done, false), true);
    eventually("the error callback", || status.load(Ordering::SeqCst) != 0);
    assert_eq!(
        status.load(Ordering::SeqCst),
        u64::from(replay_hsa_sim::entries::HSA_STATUS_ERROR_EXCEPTION)
    );
    assert!(sim
        .faults()
        .iter()
        .any(|f| f.contains("memory fault at 0x10")));
    assert_eq!(api.load(done), 1, "a faulting dispatch does not complete");
    // SAFETY: a live queue.
    assert_eq!(unsafe { (api.queue_destroy)(q) }, 0);
}

#[test]
fn two_gpu_agents_run_concurrently() {
    let sim = SimHsa::new(SimConfig::default());
    let api = api(&sim);
    let flag = Arc::new(AtomicU64::new(0));
    let f = flag.clone();
    // GPU 0's kernel finishes only once GPU 1's kernel ran: both must be in flight together.
    let waiter = sim.register_kernel("waiter", move |_| {
        let start = Instant::now();
        while f.load(Ordering::SeqCst) == 0 && start.elapsed() < TIMEOUT {
            std::thread::sleep(Duration::from_micros(100));
        }
        Ok(())
    });
    let f = flag.clone();
    let setter = sim.register_kernel("setter", move |_| {
        f.store(1, Ordering::SeqCst);
        Ok(())
    });
    let gpus = sim.gpu_agents();
    let (q0, q1) = (api.queue(gpus[0], 64, false), api.queue(gpus[1], 64, true));
    let (s0, s1) = (api.signal(1), api.signal(1));
    api.submit(q0, dispatch(waiter, std::ptr::null_mut(), s0, false), true);
    api.submit(q1, dispatch(setter, std::ptr::null_mut(), s1, false), true);
    assert_eq!(api.wait_zero(s1), 0);
    assert_eq!(api.wait_zero(s0), 0);
    assert_eq!(flag.load(Ordering::SeqCst), 1);
}
