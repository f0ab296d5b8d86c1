//! A window's passes failing: a tool panic, a pass past its bound, a pass the runtime refuses.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use replay_core::{Operation, Phase};
use replay_hsa_sim::{FaultMode, SimConfig, SimFault};
use replay_mock::double::ToolScript;

use crate::common::{buffer_and_args, dispatch, read, rmw, rmw_kernel, sim, TIMEOUT};
use crate::harness::{delta, ends_once, hook, world, Case};

#[test]
fn a_tool_panicking_before_the_first_pass_declines_callback_failed() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let q = api.queue(sim.gpu_agents()[0]);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 6);
    w.tool.set_script(ToolScript {
        passes: Some(3),
        panic_at: Some(("CONFIG ENTER", 0)),
        ..Default::default()
    });
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    ends_once(&api, done, &runs, buf, 6);
    let s = w.service.summary();
    assert_eq!(
        delta(&s.declined, &before.declined, "callback_failed"),
        1,
        "{s:?}"
    );
    assert_eq!(s.replayed, before.replayed);
    assert_eq!(w.tool.count("PASS EXIT"), 0, "no pass ran");
    w.service.stop().unwrap();
}

#[test]
fn a_pass_that_does_not_complete_in_time_truncates_pass_drain_stuck() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    // The first execution waits on `gate`, which the test releases after the window ended.
    let gate = api.signal(1);
    let first = Arc::new(AtomicU64::new(1));
    let (r, f) = (runs.clone(), first.clone());
    let k = sim.register_kernel("stalls-once", move |d| {
        if f.swap(0, Ordering::SeqCst) == 1 {
            let g = replay_hsa_sim::state::signal(gate.handle).expect("a live signal");
            g.wait(|v| v == 0, Some(TIMEOUT));
        }
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, rmw(v))?;
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    let q = api.queue(sim.gpu_agents()[0]);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 8);
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = api.signal(1);
    let start = Instant::now();
    api.submit(q, dispatch(k, args, done));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the window gave up after the pass bound"
    );
    let s = w.service.summary();
    assert_eq!(
        delta(&s.truncated, &before.truncated, "pass_drain_stuck"),
        1,
        "{s:?}"
    );
    assert_eq!(w.tool.count("PASS EXIT"), 0, "no PASS EXIT");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(api.load(done), 1, "no completion before the pass finished");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // SAFETY: a live signal: releases the stalled pass.
    unsafe { (api.signal_store)(gate, 0) };
    ends_once(&api, done, &runs, buf, 8);
    w.service.stop().unwrap();
}

#[test]
fn timeouts_follow_the_runtimes_timestamp_frequency() {
    // At 1 kHz a hint in nanoseconds would be a million times too long: the 500 ms pass bound
    // would become days, and this test would hang instead of truncating.
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::with(
        SimConfig {
            timestamp_hz: 1_000,
            ..SimConfig::default()
        },
        0,
        33,
    );
    let gate = c.api.signal(1);
    let first = Arc::new(AtomicU64::new(1));
    let (r, f) = (c.runs.clone(), first.clone());
    let k = c.sim.register_kernel("stalls-once-khz", move |d| {
        if f.swap(0, Ordering::SeqCst) == 1 {
            let g = replay_hsa_sim::state::signal(gate.handle).expect("a live signal");
            g.wait(|v| v == 0, Some(TIMEOUT));
        }
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, rmw(v))?;
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.api.signal(1);
    let start = Instant::now();
    c.api.submit(c.queue, dispatch(k, c.args, done));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the pass bound held"
    );
    let s = w.service.summary();
    assert_eq!(
        delta(&s.truncated, &before.truncated, "pass_drain_stuck"),
        1,
        "{s:?}"
    );
    // SAFETY: a live signal: releases the stalled pass.
    unsafe { (c.api.signal_store)(gate, 0) };
    c.ends_once(done);
    w.service.stop().unwrap();
}

#[test]
fn a_pass_the_runtime_refuses_after_a_restore_truncates_submit_failed_and_runs_once() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 27);
    let inj = c.sim.injector();
    w.tool.add_hook(hook(move |op, phase, pass| {
        if (op, phase, pass) == (Operation::Pass, Phase::Enter, 1) {
            inj.inject(SimFault::SignalCreateFails, FaultMode::Once);
        }
    }));
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = c.dispatch();
    assert_eq!(c.api.wait_zero(done), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(c.api.load(done), 0, "the completion signal fired once");
    let s = w.service.summary();
    assert_eq!(
        delta(&s.truncated, &before.truncated, "submit_failed"),
        1,
        "{s:?}"
    );
    assert_eq!(c.sim.fired("signal_create_fails"), 1);
    // Pass 0, then the ordinary run on restored memory.
    assert_eq!(c.runs.load(Ordering::SeqCst), 2);
    assert_eq!(read(c.buf), rmw(27), "memory equals one execution");
    w.service.stop().unwrap();
}
