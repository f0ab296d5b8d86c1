//! The window's drains: a queue, agent or copy drain past its bound, work in flight waited for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use replay_hsa::sys;
use replay_hsa_sim::{PoolKind, SimHsa};

use crate::common::{barrier_on, buffer_and_args, dispatch, read, rmw, rmw_kernel, sim, Api};
use crate::harness::{delta, ends_once, expect, world, Case, World};

#[test]
fn a_queue_drain_that_does_not_complete_in_time_declines_queue_drain_stuck() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let q = api.queue(sim.gpu_agents()[1]);
    let (buf, args) = buffer_and_args(&sim, &api, 1, 9);
    // A barrier-AND ahead in the same queue waits on an unsignalled dependency.
    let hold = api.signal(1);
    let barrier_done = api.signal(1);
    api.submit(q, barrier_on(hold, barrier_done));
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = api.signal(1);
    let start = Instant::now();
    api.submit(q, dispatch(k, args, done));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the window gave up after the drain bound"
    );
    let s = w.service.summary();
    assert_eq!(
        delta(&s.declined, &before.declined, "queue_drain_stuck"),
        1,
        "{s:?}"
    );
    assert_eq!(s.replayed, before.replayed);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "still behind the barrier");
    // SAFETY: a live signal: releases the barrier.
    unsafe { (api.signal_store)(hold, 0) };
    assert_eq!(api.wait_zero(barrier_done), 0);
    ends_once(&api, done, &runs, buf, 9);
    w.service.stop().unwrap();
}

#[test]
fn an_agent_drain_that_does_not_complete_in_time_declines_agent_drain_stuck() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 25);
    // Work on another queue of the same agent waits on an unsignalled dependency.
    let other = c.api.queue(c.sim.gpu_agents()[0]);
    let hold = c.api.signal(1);
    let barrier_done = c.api.signal(1);
    c.api.submit(other, barrier_on(hold, barrier_done));
    expect(w, &c, true, "agent_drain_stuck");
    // SAFETY: a live signal: releases the barrier.
    unsafe { (c.api.signal_store)(hold, 0) };
    assert_eq!(c.api.wait_zero(barrier_done), 0);
    w.service.stop().unwrap();
}

#[test]
fn an_application_copy_that_does_not_finish_in_time_declines_copy_fence_stuck() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 26);
    let agent = c.sim.gpu_agents()[0];
    let src = c.api.alloc(c.sim.pool(0, PoolKind::HostFine), 64);
    let dst = c.api.alloc(c.sim.pool(0, PoolKind::DeviceCoarse), 64);
    let hold = c.api.signal(1);
    let copied = c.api.signal(1);
    c.api.copy_after(agent, dst, src, 64, hold, copied);
    expect(w, &c, true, "copy_fence_stuck");
    assert_eq!(c.api.load(copied), 1, "the copy is still held");
    // SAFETY: a live signal: lets the copy run.
    unsafe { (c.api.signal_store)(hold, 0) };
    assert_eq!(c.api.wait_zero(copied), 0);
    w.service.stop().unwrap();
}

#[test]
fn the_window_waits_for_an_application_copy_in_flight_and_every_pass_sees_its_result() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let agent = sim.gpu_agents()[0];
    let (k, seen) = recording_rmw_kernel(&sim);
    let q = api.queue(agent);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 1);
    // The application copies 77 into the buffer; the copy waits on `hold`, which a thread
    // releases shortly after the dispatch was submitted (well inside the drain bound).
    let src = api.alloc(sim.pool(0, PoolKind::HostFine), 64);
    // SAFETY: a fresh host-visible simulated allocation.
    unsafe { src.cast::<u64>().write_volatile(77) };
    let hold = api.signal(1);
    let copied = api.signal(1);
    api.copy_after(agent, buf.cast(), src, 8, hold, copied);
    let before = w.service.summary();
    dispatch_while_held(w, &api, q, dispatch(k, args, api.signal(1)), hold);
    assert_eq!(
        api.load(copied),
        0,
        "the copy finished before the window captured"
    );
    replayed_on(w, &before, &seen, buf, 77);
    w.service.stop().unwrap();
}

#[test]
fn the_window_waits_for_work_on_the_agents_other_queues() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let agent = sim.gpu_agents()[0];
    let (k, seen) = recording_rmw_kernel(&sim);
    let set = sim.register_kernel("set-50", |d| {
        let p = d.arg(0)?;
        d.write_u64(p, 50)
    });
    let (buf, args) = buffer_and_args(&sim, &api, 0, 1);
    // Another queue of the agent: a barrier held until shortly after the dispatch was
    // submitted, then a kernel that sets the buffer to 50.
    let other = api.queue(agent);
    let hold = api.signal(1);
    api.submit(other, barrier_on(hold, sys::hsa_signal_t::default()));
    let set_done = api.signal(1);
    api.submit(other, dispatch(set, args, set_done));
    let q = api.queue(agent);
    let before = w.service.summary();
    dispatch_while_held(w, &api, q, dispatch(k, args, api.signal(1)), hold);
    assert_eq!(
        api.load(set_done),
        0,
        "the other queue's work finished first"
    );
    replayed_on(w, &before, &seen, buf, 50);
    w.service.stop().unwrap();
}

/// Submits `packet` (3 passes asked) while `hold` keeps work the window must wait for from
/// finishing; a thread releases `hold` 100 ms later (well inside the drain bound). Waits for the
/// packet's completion signal.
fn dispatch_while_held(
    w: &World,
    api: &Api,
    q: *mut sys::hsa_queue_t,
    packet: [u8; 64],
    hold: sys::hsa_signal_t,
) {
    let store = api.signal_store;
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: a live signal.
        unsafe { store(hold, 0) };
    });
    w.tool.set_passes(Some(3));
    // The completion signal sits in the packet's last 8 bytes.
    let done = sys::hsa_signal_t {
        handle: u64::from_le_bytes(packet[56..64].try_into().unwrap()),
    };
    api.submit(q, packet);
    releaser.join().unwrap();
    assert_eq!(api.wait_zero(done), 0);
}

/// The dispatch was replayed once, every pass read `input`, and memory holds one execution.
fn replayed_on(
    w: &World,
    before: &replay_core::RunSummary,
    seen: &Mutex<Vec<u64>>,
    buf: *const u64,
    input: u64,
) {
    assert_eq!(*seen.lock().unwrap(), vec![input; 3], "identical inputs");
    assert_eq!(read(buf), rmw(input), "memory equals one execution");
    assert_eq!(w.service.summary().replayed - before.replayed, 1);
}

/// An `rmw` kernel that records the value each execution read.
fn recording_rmw_kernel(sim: &SimHsa) -> (u64, Arc<Mutex<Vec<u64>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let k = sim.register_kernel("rmw-recording", move |d| {
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        s2.lock().unwrap().push(v);
        d.write_u64(p, rmw(v))
    });
    (k, seen)
}
