//! `replay-hsa` stage 2 on the simulated runtime: `OnLoad` on the sim's table with a tool
//! configured on the service the backend is given, then a HIP-like client: create a queue,
//! allocate from pools, write packets, ring the doorbell, wait on the completion signal.
//!
//! The backend and the service are process-wide, so the tests of this file run one at a time
//! (`SERIAL`) and share one scripted tool (`replay_mock::double`) that each test resets.

// Not every shared helper is used by every test file.
#[allow(dead_code)]
mod common;

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use replay_core::{Operation, Phase, Policy, ReplayService};
use replay_hsa::sys;
use replay_hsa::sys::aql;
use replay_hsa_sim::PoolKind;
use replay_mock::double::ScriptedTool;

use common::*;

struct World {
    service: Arc<ReplayService>,
    /// Its hook: [`watching`], or a test's own.
    tool: Arc<ScriptedTool>,
    watch: Arc<Watch>,
}

fn world() -> (&'static World, MutexGuard<'static, ()>) {
    static SERIAL: Mutex<()> = Mutex::new(());
    static WORLD: OnceLock<World> = OnceLock::new();
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = WORLD.get_or_init(|| {
        let policy = Policy {
            drain_timeout: Duration::from_secs(5),
            pass_timeout: Duration::from_secs(5),
            ..Policy::default()
        };
        let tool = scripted_tool();
        let service = install_service(policy, tool.clone());
        World {
            service,
            tool,
            watch: Arc::default(),
        }
    });
    w.tool.reset(no_passes());
    w.watch.reset();
    w.tool.set_hook(Some(watching(w.watch.clone(), |_| {})));
    (w, guard)
}

#[test]
fn a_replayed_dispatch_runs_n_passes_on_identical_inputs_and_completes_once() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let state: serde_json::Value =
        serde_json::from_str(&replay_hsa::backend().state_json()).unwrap();
    assert_eq!(state["queues_intercepted"], true, "{state}");
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let q = api.queue(sim.gpu_agents()[0]);
    assert!(
        replay_hsa::intercept::state_of(q).is_some(),
        "the queue is intercepted"
    );
    let (buf, args) = buffer_and_args(&sim, &api, 0, 5);
    w.tool.set_passes(Some(4));
    w.watch.addr.store(buf as u64, Ordering::SeqCst);
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    assert_eq!(api.wait_zero(done), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        api.load(done),
        0,
        "the completion signal fired exactly once"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 4, "four passes ran");
    assert_eq!(
        *w.watch.seen.lock().unwrap(),
        vec![5; 4],
        "every pass saw the same input"
    );
    assert_eq!(read(buf), rmw(5), "memory equals one execution");
    let s = w.service.summary();
    assert_eq!(
        (s.replayed - before.replayed, s.passes - before.passes),
        (1, 4),
        "{s:?}"
    );
    // SAFETY: the queue created above, idle.
    assert_eq!(unsafe { (api.queue_destroy)(q) }, 0);
    assert!(replay_hsa::intercept::state_of(q).is_none());
    w.service.stop().unwrap();
}

#[test]
fn a_barrier_passes_through_once() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let q = api.queue(sim.gpu_agents()[1]);
    let dep = api.signal(0);
    let done = api.signal(1);
    let mut p = sys::hsa_barrier_and_packet_t {
        header: aql::header(sys::HSA_PACKET_TYPE_BARRIER_AND, true, 2, 2),
        completion_signal: done,
        ..Default::default()
    };
    p.dep_signal[0] = dep;
    // SAFETY: a 64-byte plain-integer struct.
    api.submit(q, unsafe {
        std::mem::transmute::<sys::hsa_barrier_and_packet_t, [u8; 64]>(p)
    });
    assert_eq!(api.wait_zero(done), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(api.load(done), 0, "the barrier ran once");
    assert_eq!(
        w.tool.count("CONFIG ENTER") as u64,
        0,
        "no window for a barrier"
    );
    w.service.stop().unwrap();
}

#[test]
fn a_multi_packet_write_and_an_application_copy_pass_through_once() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let q = api.queue(sim.gpu_agents()[0]);
    let (b1, a1) = buffer_and_args(&sim, &api, 0, 3);
    let (b2, a2) = buffer_and_args(&sim, &api, 0, 4);
    w.tool.set_passes(Some(4));
    let before = w.service.summary();
    // Two dispatches in one interceptor call (an interceptor above the backend's writes them
    // together): not a single dispatch, so no window; each runs once.
    batch_above(&sim, q, 2);
    let (d1, d2) = (api.signal(1), api.signal(1));
    api.submit_many(q, &[dispatch(k, a1, d1), dispatch(k, a2, d2)]);
    assert_eq!(api.wait_zero(d1), 0);
    assert_eq!(api.wait_zero(d2), 0);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!((read(b1), read(b2)), (rmw(3), rmw(4)));
    // An application copy while replay is active runs once.
    let src = api.alloc(sim.pool(0, PoolKind::HostFine), 64);
    // SAFETY: a fresh host-visible simulated allocation.
    unsafe { src.cast::<u64>().write_volatile(99) };
    let (ready, copied) = (api.signal(0), api.signal(1));
    api.copy_after(sim.gpu_agents()[0], b1.cast(), src, 8, ready, copied);
    assert_eq!(api.wait_zero(copied), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(api.load(copied), 0, "the copy completed once");
    assert_eq!(read(b1), 99);
    assert_eq!(w.tool.count("CONFIG ENTER") as u64, 0, "no window");
    let s = w.service.summary();
    assert_eq!(s.replayed, before.replayed, "{s:?}");
    w.service.stop().unwrap();
}

#[test]
fn a_dispatch_while_the_service_is_inactive_runs_once_untouched() {
    let (w, _g) = world();
    w.service.stop().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let q = api.queue(sim.gpu_agents()[0]);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 7);
    w.tool.set_passes(Some(3));
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    assert_eq!(api.wait_zero(done), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(api.load(done), 0);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(read(buf), rmw(7));
    assert_eq!(
        w.tool.count("CONFIG ENTER") as u64,
        0,
        "the tool was not called"
    );
}

/// What the async-thread submitter needs.
struct Forward {
    api: Api,
    /// The `hsa_queue_t*`, as an address.
    queue: usize,
    packet: [u8; 64],
    sent: AtomicU64,
}

unsafe extern "C" fn forward(arg: *mut c_void) {
    // SAFETY: the test's `Forward`, alive until the test saw `sent`.
    let f = unsafe { &*arg.cast::<Forward>() };
    f.api.submit(f.queue as *mut sys::hsa_queue_t, f.packet);
    f.sent.store(1, Ordering::SeqCst);
}

#[test]
fn an_application_dispatch_arriving_on_the_async_thread_during_a_window_runs_once_after_it() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let gpu = sim.gpu_agents()[0];
    let a_runs = Arc::new(AtomicU64::new(0));
    let slow = rmw_kernel(&sim, a_runs.clone(), Duration::from_millis(100));
    // B's kernel records how many of A's passes had finished when it ran.
    let seen_at_b = Arc::new(AtomicU64::new(u64::MAX));
    let b_runs = Arc::new(AtomicU64::new(0));
    let (ar, sb, br) = (a_runs.clone(), seen_at_b.clone(), b_runs.clone());
    let kb = sim.register_kernel("b", move |d| {
        sb.store(ar.load(Ordering::SeqCst), Ordering::SeqCst);
        br.fetch_add(1, Ordering::SeqCst);
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, rmw(v))
    });
    let qa = api.queue(gpu);
    let qb = api.queue(gpu);
    let (buf_a, args_a) = buffer_and_args(&sim, &api, 0, 1);
    let (buf_b, args_b) = buffer_and_args(&sim, &api, 0, 10);
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done_a = api.signal(1);
    let done_b = api.signal(1);
    let fwd = Box::new(Forward {
        api,
        queue: qb as usize,
        packet: dispatch(kb, args_b, done_b),
        sent: AtomicU64::new(0),
    });
    let fwd_ptr = &*fwd as *const Forward as usize;
    let ar = a_runs.clone();
    let poster = std::thread::spawn(move || {
        // Once A's first pass finished (the window holds the agent), forward B's dispatch
        // from the runtime's async thread.
        let start = Instant::now();
        while ar.load(Ordering::SeqCst) < 1 {
            assert!(start.elapsed() < TIMEOUT);
            std::thread::sleep(Duration::from_millis(1));
        }
        // SAFETY: `forward` has the async function's signature; the `Forward` outlives it.
        let st = unsafe { (api.async_function)(Some(forward), fwd_ptr as *mut c_void) };
        assert_eq!(st, 0);
    });
    api.submit(qa, dispatch(slow, args_a, done_a));
    assert_eq!(api.wait_zero(done_a), 0);
    poster.join().unwrap();
    assert_eq!(api.wait_zero(done_b), 0, "B completes");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(fwd.sent.load(Ordering::SeqCst), 1);
    assert_eq!(b_runs.load(Ordering::SeqCst), 1, "B ran exactly once");
    assert_eq!(
        seen_at_b.load(Ordering::SeqCst),
        3,
        "B ran after the window's three passes"
    );
    assert_eq!(api.load(done_b), 0);
    assert_eq!(api.load(done_a), 0);
    assert_eq!(read(buf_a), rmw(1));
    assert_eq!(read(buf_b), rmw(10));
    assert_eq!(
        replay_hsa::intercept::state_of(qb).map(|s| s.parked()),
        Some(0)
    );
    let s = w.service.summary();
    let declined = |s: &replay_core::RunSummary| s.declined.values().sum::<u64>();
    assert_eq!(
        (
            s.dispatches - before.dispatches,
            s.replayed - before.replayed,
            declined(&s) - declined(&before)
        ),
        (2, 1, 1),
        "B was parked, then flushed on the async thread with a record of its own (declined \
         there, run once): {s:?}"
    );
    w.service.stop().unwrap();
}

#[test]
fn a_full_ring_declines_instead_of_hanging_and_the_dispatch_runs_once() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let q = api.queue_of(sim.gpu_agents()[1], 4);
    let (buf, args) = buffer_and_args(&sim, &api, 1, 2);
    // Three barriers waiting on `hold` fill the ring of four: the runtime keeps the last slot
    // for its retry barrier, so not even a drain barrier fits.
    let hold = api.signal(1);
    let barriers = api.signal(3);
    for _ in 0..3 {
        api.submit(q, barrier_on(hold, barriers));
    }
    assert_eq!(sim.parked(q), 0, "the three barriers are in the ring");
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = api.signal(1);
    let start = Instant::now();
    api.submit(q, dispatch(k, args, done));
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "the window declined without waiting for the drain timeout"
    );
    let s = w.service.summary();
    let declined = |s: &replay_core::RunSummary| s.declined.values().sum::<u64>();
    assert_eq!(declined(&s) - declined(&before), 1, "{s:?}");
    assert_eq!(s.replayed, before.replayed);
    assert_eq!(
        sim.parked(q),
        1,
        "only the ordinary run waits in the runtime for room: no drain barrier was written"
    );
    // SAFETY: a live signal: releases the barriers.
    unsafe { (api.signal_store)(hold, 0) };
    assert_eq!(api.wait_zero(barriers), 0);
    assert_eq!(api.wait_zero(done), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(api.load(done), 0, "the completion signal fired once");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the dispatch ran once");
    assert_eq!(read(buf), rmw(2));
    w.service.stop().unwrap();
}

#[test]
fn tool_work_launched_from_a_callback_arrives_on_the_async_thread_and_completes() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let gpu = sim.gpu_agents()[0];
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let tool_runs = Arc::new(AtomicU64::new(0));
    let kt = rmw_kernel(&sim, tool_runs.clone(), Duration::ZERO);
    let qa = api.queue(gpu);
    let qt = api.queue(gpu);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 3);
    let (tbuf, targs) = buffer_and_args(&sim, &api, 0, 100);
    let tool_done = api.signal(1);
    // The tool's own queue, created at start-up and declared as the tool's.
    assert!(replay_hsa::intercept::mark_tool_queue(qt));
    let fwd = Arc::new(Forward {
        api,
        queue: qt as usize,
        packet: dispatch(kt, targs, tool_done),
        sent: AtomicU64::new(0),
    });
    let completed_in_callback = Arc::new(AtomicU64::new(0));
    {
        let fwd = fwd.clone();
        let c = completed_in_callback.clone();
        w.tool.set_hook(Some(Arc::new(move |op, phase, _, _| {
            if (op, phase) != (Operation::Config, Phase::Enter) {
                return;
            }
            if fwd.sent.load(Ordering::SeqCst) != 0 {
                return;
            }
            let p = Arc::as_ptr(&fwd) as *mut c_void;
            // SAFETY: `forward` has the async function's signature; `fwd` outlives it.
            assert_eq!(unsafe { (api.async_function)(Some(forward), p) }, 0);
            // The tool waits for its own work inside the callback.
            if api.wait_zero(tool_done) == 0 {
                c.store(1, Ordering::SeqCst);
            }
        })));
    }
    w.tool.set_passes(Some(2));
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(qa, dispatch(k, args, done));
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(
        completed_in_callback.load(Ordering::SeqCst),
        1,
        "the tool's work completed while its callback waited"
    );
    assert_eq!(
        tool_runs.load(Ordering::SeqCst),
        1,
        "tool work ran once, not replayed"
    );
    assert_eq!(read(tbuf), rmw(100));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the dispatch was replayed twice"
    );
    assert_eq!(read(buf), rmw(3));
    let s = w.service.summary();
    assert_eq!(s.replayed - before.replayed, 1, "{s:?}");
    w.service.stop().unwrap();
}

#[test]
fn an_application_dispatch_on_the_async_thread_declines_instead_of_hanging() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let gpu = sim.gpu_agents()[1];
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let qa = api.queue(gpu);
    let _other = api.queue(gpu);
    let (buf, args) = buffer_and_args(&sim, &api, 1, 4);
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = api.signal(1);
    let fwd = Box::new(Forward {
        api,
        queue: qa as usize,
        packet: dispatch(k, args, done),
        sent: AtomicU64::new(0),
    });
    let start = Instant::now();
    // SAFETY: `forward` has the async function's signature; `fwd` outlives it.
    let st = unsafe { (api.async_function)(Some(forward), &*fwd as *const Forward as *mut c_void) };
    assert_eq!(st, 0);
    assert_eq!(api.wait_zero(done), 0);
    assert!(start.elapsed() < Duration::from_secs(4), "no drain timeout");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(api.load(done), 0, "the completion signal fired once");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the dispatch ran once");
    assert_eq!(read(buf), rmw(4));
    let s = w.service.summary();
    let declined = |s: &replay_core::RunSummary| s.declined.values().sum::<u64>();
    assert_eq!(declined(&s) - declined(&before), 1, "{s:?}");
    w.service.stop().unwrap();
}

#[test]
fn a_kernel_incrementing_a_module_variable_ends_with_one_increment() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let counter = Arc::new(AtomicU64::new(0));
    let (r, c) = (runs.clone(), counter.clone());
    let inc: replay_hsa_sim::KernelFn = Arc::new(move |d| {
        let a = c.load(Ordering::SeqCst);
        let v = d.read_u64(a)?;
        d.write_u64(a, v + 1)?;
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    let var = |name: &str, size: u32, is_const: bool| replay_hsa_sim::VariableSpec {
        name: name.into(),
        size,
        is_const,
    };
    sim.load_module(
        0,
        &[
            var("counter", 8, false),
            var("__hip_cuid_0123abcd", 1, false),
            var("table", 64, true),
        ],
        &[("inc", inc)],
    );
    let addr = sim.variable_address("counter").expect("loaded");
    counter.store(addr, Ordering::SeqCst);
    // SAFETY: the module variable, host-backed simulated memory of 8 bytes.
    unsafe { (addr as *mut u64).write_volatile(41) };

    // The enumeration through the loader extension sees the writable variable only.
    let o = replay_hsa::backend().originals().unwrap();
    let gpu = sim.gpu_agents()[0];
    let mods = replay_hsa::module::HsaModules::new(gpu.handle, o.loader);
    let vars = replay_memory::ModuleVariables::enumerate(&mods, replay_core::AgentId(0)).unwrap();
    assert_eq!(
        vars.iter()
            .map(|v| (v.name.as_str(), v.base, v.size))
            .collect::<Vec<_>>(),
        vec![("counter", addr, 8)],
        "{vars:?}"
    );
    let other = replay_hsa::module::HsaModules::new(sim.gpu_agents()[1].handle, o.loader);
    assert!(
        replay_memory::ModuleVariables::enumerate(&other, replay_core::AgentId(1))
            .unwrap()
            .is_empty()
    );

    // `load_module` answers the executable, not kernel objects: the dispatch names the same
    // body registered directly.
    let k = sim.register_kernel("inc-dispatch", {
        let c = counter.clone();
        let r = runs.clone();
        move |d| {
            let a = c.load(Ordering::SeqCst);
            let v = d.read_u64(a)?;
            d.write_u64(a, v + 1)?;
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    });
    let q = api.queue(gpu);
    let args = api.alloc(sim.pool(0, PoolKind::Kernarg), 64);
    w.tool.set_passes(Some(5));
    w.watch.addr.store(addr, Ordering::SeqCst);
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    assert_eq!(api.wait_zero(done), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(api.load(done), 0, "the completion signal fired once");
    assert_eq!(runs.load(Ordering::SeqCst), 5, "five passes ran");
    assert_eq!(
        *w.watch.seen.lock().unwrap(),
        vec![41; 5],
        "every pass saw 41"
    );
    assert_eq!(read(addr as *const u64), 42, "one increment");
    let s = w.service.summary();
    assert_eq!(s.replayed - before.replayed, 1, "{s:?}");
    w.service.stop().unwrap();
}

#[test]
fn two_gpu_agents_replay_concurrently_from_two_threads() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    w.tool.set_passes(Some(4));
    let before = w.service.summary();
    // Both windows are open at once: each kernel's first pass waits until the other agent's
    // kernel has started (bounded), so the two windows overlap.
    let started = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let overlapped = Arc::new(AtomicU64::new(0));
    let mut setups = Vec::new();
    for gpu in 0..2 {
        let runs = Arc::new(AtomicU64::new(0));
        let (me, other) = (started[gpu].clone(), started[1 - gpu].clone());
        let (r, ov) = (runs.clone(), overlapped.clone());
        let k = sim.register_kernel(&format!("rmw-gpu{gpu}"), move |d| {
            me.fetch_add(1, Ordering::SeqCst);
            let start = Instant::now();
            while other.load(Ordering::SeqCst) == 0 && start.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(1));
            }
            if r.load(Ordering::SeqCst) == 0 && other.load(Ordering::SeqCst) != 0 {
                ov.fetch_add(1, Ordering::SeqCst);
            }
            let p = d.arg(0)?;
            let v = d.read_u64(p)?;
            d.write_u64(p, rmw(v))?;
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        let q = api.queue(sim.gpu_agents()[gpu]);
        let (buf, args) = buffer_and_args(&sim, &api, gpu, 20 + gpu as u64);
        setups.push((runs, k, q as usize, buf as usize, args as usize));
    }
    let threads: Vec<_> = setups
        .iter()
        .map(|&(_, k, q, _, args)| {
            std::thread::spawn(move || {
                let done = api.signal(1);
                api.submit(
                    q as *mut sys::hsa_queue_t,
                    dispatch(k, args as *mut u8, done),
                );
                assert_eq!(api.wait_zero(done), 0);
                std::thread::sleep(Duration::from_millis(50));
                api.load(done)
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 0, "each completion signal fired once");
    }
    for (gpu, (runs, _, _, buf, _)) in setups.iter().enumerate() {
        assert_eq!(runs.load(Ordering::SeqCst), 4, "gpu {gpu}: four passes");
        assert_eq!(read(*buf as *const u64), rmw(20 + gpu as u64), "gpu {gpu}");
    }
    assert_eq!(
        overlapped.load(Ordering::SeqCst),
        2,
        "both first passes ran while the other agent's window was open"
    );
    let s = w.service.summary();
    assert_eq!(
        (s.replayed - before.replayed, s.passes - before.passes),
        (2, 8),
        "{s:?}"
    );
    w.service.stop().unwrap();
}
