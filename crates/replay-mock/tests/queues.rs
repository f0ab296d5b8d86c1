//! Queues run asynchronously and in order; drains wait for completion, not the read index;
//! the copy fence; passes and the trailing completion barrier; virtual and wall time.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use replay_core::{Agent, AgentId, Clock, DrainTarget, MemoryClass, Origin};
use replay_mock::{Kernel, SimClock, SimRuntime, WorkerState};

/// A host-side gate a kernel blocks on until the test opens it.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut o = self.open.lock();
        while !*o {
            self.cv.wait(&mut o);
        }
    }
    fn open(&self) {
        *self.open.lock() = true;
        self.cv.notify_all();
    }
}

fn gated(gate: Arc<Gate>, log: Arc<Mutex<Vec<u32>>>, tag: u32) -> Kernel {
    Kernel::new("gated", move |_| {
        gate.wait();
        log.lock().push(tag);
        Ok(())
    })
}

fn logging(log: Arc<Mutex<Vec<u32>>>, tag: u32) -> Kernel {
    Kernel::new("logging", move |_| {
        log.lock().push(tag);
        Ok(())
    })
}

#[test]
fn dispatches_run_asynchronously_and_in_order() {
    let rt = common::runtime(1);
    let q = rt.queue(AgentId(0), 0);
    let gate = Arc::new(Gate::default());
    let log = Arc::new(Mutex::new(Vec::new()));
    let first = rt
        .dispatch(
            q,
            &gated(Arc::clone(&gate), Arc::clone(&log), 0),
            &[],
            common::grid(1),
        )
        .unwrap();
    let rest: Vec<_> = (1..5)
        .map(|i| {
            rt.dispatch(q, &logging(Arc::clone(&log), i), &[], common::grid(1))
                .unwrap()
        })
        .collect();
    // `dispatch` returned while the first kernel still runs: nothing behind it ran either.
    std::thread::sleep(Duration::from_millis(20));
    assert!(!first.is_done());
    assert!(rest.iter().all(|c| !c.is_done()));
    assert!(log.lock().is_empty());
    gate.open();
    for c in &rest {
        c.wait().unwrap();
    }
    assert_eq!(*log.lock(), vec![0, 1, 2, 3, 4]);
    assert!(first.is_done() && first.fired() == 1);
}

#[test]
fn queues_of_one_agent_run_independently() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let gate = Arc::new(Gate::default());
    let log = Arc::new(Mutex::new(Vec::new()));
    let blocked = rt
        .dispatch(
            rt.queue(a, 0),
            &gated(Arc::clone(&gate), Arc::clone(&log), 0),
            &[],
            common::grid(1),
        )
        .unwrap();
    rt.dispatch(
        rt.queue(a, 1),
        &logging(Arc::clone(&log), 1),
        &[],
        common::grid(1),
    )
    .unwrap()
    .wait()
    .unwrap();
    assert_eq!(*log.lock(), vec![1]);
    gate.open();
    blocked.wait().unwrap();
}

#[test]
fn drains_wait_for_completion_not_the_read_index() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let q = rt.queue(a, 0);
    let agent = rt.agent(a);
    let gate = Arc::new(Gate::default());
    let log = Arc::new(Mutex::new(Vec::new()));
    let c = rt
        .dispatch(
            q,
            &gated(Arc::clone(&gate), Arc::clone(&log), 0),
            &[],
            common::grid(1),
        )
        .unwrap();
    // The worker took the packet (read index moved) but it has not completed.
    let wall = Instant::now();
    let idx = loop {
        let i = rt.gpu().queue_indices(a, q.queue).unwrap();
        if i.consumed == 1 {
            break i;
        }
        assert!(wall.elapsed() < Duration::from_secs(5));
        std::thread::yield_now();
    };
    assert_eq!(idx.submitted, 1);
    assert_eq!(idx.completed, 0);
    assert_eq!(idx.worker, WorkerState::Running);

    let t0 = rt.now();
    let queue_drain = agent.begin_drain(DrainTarget::Queue(q.queue)).unwrap();
    let agent_drain = agent.begin_drain(DrainTarget::Agent).unwrap();
    assert!(!agent
        .poll_drain(queue_drain, Duration::from_millis(10))
        .unwrap());
    assert!(!agent
        .poll_drain(agent_drain, Duration::from_millis(10))
        .unwrap());
    // Running work is not "stuck": virtual time did not move.
    assert_eq!(rt.now(), t0);

    gate.open();
    let mut done = false;
    for _ in 0..1000 {
        if agent
            .poll_drain(queue_drain, Duration::from_millis(10))
            .unwrap()
        {
            done = true;
            break;
        }
    }
    assert!(done);
    assert!(
        c.is_done(),
        "the drain completed only after the dispatch did"
    );
    assert!(agent
        .poll_drain(agent_drain, Duration::from_millis(10))
        .unwrap());
    // A drain of an idle queue completes at once.
    let t = agent.begin_drain(DrainTarget::Queue(q.queue)).unwrap();
    assert!(agent.poll_drain(t, Duration::ZERO).unwrap());
}

#[test]
fn modelled_duration_runs_on_virtual_time() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let q = rt.queue(a, 0);
    let agent = rt.agent(a);
    let slow = Kernel::new("slow", |_| Ok(())).with_duration(Duration::from_secs(5));
    let c = rt.dispatch(q, &slow, &[], common::grid(1)).unwrap();
    let wall = Instant::now();
    let t = agent.begin_drain(DrainTarget::Queue(q.queue)).unwrap();
    let mut polls = 0;
    while !agent.poll_drain(t, Duration::from_millis(100)).unwrap() {
        polls += 1;
        assert!(polls < 1000);
    }
    assert!(rt.now() >= Duration::from_secs(5));
    assert!(rt.now() < Duration::from_secs(6));
    assert!(
        polls >= 49,
        "each unfinished poll advanced the clock by its budget"
    );
    assert!(wall.elapsed() < Duration::from_secs(3));
    assert!(c.is_done());

    // An application waiting on virtual time advances the clock itself.
    let c = rt.dispatch(q, &slow, &[], common::grid(1)).unwrap();
    let before = rt.now();
    c.wait().unwrap();
    assert!(rt.now() >= before + Duration::from_secs(5));
}

#[test]
fn polls_block_for_their_budget_on_the_wall_clock() {
    let rt = common::runtime_on(SimClock::real(), 1);
    let a = AgentId(0);
    let q = rt.queue(a, 0);
    let agent = rt.agent(a);
    let gate = Arc::new(Gate::default());
    let log = Arc::new(Mutex::new(Vec::new()));
    rt.dispatch(q, &gated(Arc::clone(&gate), log, 0), &[], common::grid(1))
        .unwrap();
    let t = agent.begin_drain(DrainTarget::Queue(q.queue)).unwrap();
    let start = rt.clock().now();
    assert!(!agent.poll_drain(t, Duration::from_millis(30)).unwrap());
    let waited = rt.clock().now() - start;
    assert!(waited >= Duration::from_millis(30), "{waited:?}");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    gate.open();
    assert!(agent.poll_drain(t, Duration::from_secs(5)).unwrap());
}

#[test]
fn copy_fence_waits_for_application_copies() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let src = rt.alloc(a, 1 << 20, MemoryClass::DEVICE_COARSE).unwrap();
    let dst = rt.alloc(a, 1 << 20, MemoryClass::DEVICE_COARSE).unwrap();
    rt.fill(src, 1 << 20, 0xAB).unwrap();
    let copies: Vec<_> = (0..4)
        .map(|_| rt.copy_async(a, dst, src, 1 << 20).unwrap())
        .collect();
    let agent = rt.agent(a);
    let t = agent.begin_drain(DrainTarget::CopyFence).unwrap();
    while !agent.poll_drain(t, Duration::from_millis(10)).unwrap() {}
    assert!(copies.iter().all(|c| c.is_done()));
    assert!(rt.read(dst, 1 << 20).unwrap().iter().all(|&b| b == 0xAB));
    let idx = rt.gpu().copy_engine_indices(a).unwrap();
    assert_eq!(idx.completed, idx.submitted);
}

#[test]
fn passes_run_without_completion_and_the_signal_trails_them() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let q = rt.queue(a, 0);
    let agent = rt.agent(a);
    let runs = Arc::new(AtomicU32::new(0));
    let gate = Arc::new(Gate::default());
    let k = {
        let runs = Arc::clone(&runs);
        let gate = Arc::clone(&gate);
        Kernel::new("counted", move |_| {
            if runs.fetch_add(1, Ordering::SeqCst) == 1 {
                gate.wait();
            }
            Ok(())
        })
    };
    let (d, c) = rt
        .make_dispatch(q, &k, &[], common::grid(8), Origin::SubmittingThread)
        .unwrap();
    let p0 = agent.submit_pass(&d, 0).unwrap();
    let done = loop {
        if let Some(done) = agent.poll_pass(p0, Duration::from_millis(10)).unwrap() {
            break done;
        }
    };
    assert!(done.gpu_seconds > 0.0);
    assert!(
        !c.is_done(),
        "a pass does not fire the application's completion"
    );
    let _p1 = agent.submit_pass(&d, 1).unwrap();
    agent.signal_completion(&d).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(!c.is_done(), "the trailing barrier waits for pass 1");
    gate.open();
    c.wait().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(c.fired(), 1);
    rt.forget_dispatch(&c);
    // Unknown tickets and handles are errors, not panics.
    assert!(agent.poll_pass(p0, Duration::ZERO).is_err());
    assert!(agent.submit_pass(&d, 2).is_err());
}

#[test]
fn runtime_shuts_down_cleanly() {
    let rt = SimRuntime::new();
    let q = rt.queue(AgentId(0), 0);
    let slow = Kernel::new("slow", |_| Ok(())).with_duration(Duration::from_secs(3600));
    let pending = rt.dispatch(q, &slow, &[], common::grid(1)).unwrap();
    let wall = Instant::now();
    rt.shutdown();
    assert!(wall.elapsed() < Duration::from_secs(2));
    assert!(rt.dispatch(q, &slow, &[], common::grid(1)).is_err());
    // A kernel the worker had already picked up may still finish; one still queued is lost.
    // Either way its completion is settled: waiting never hangs.
    let settled = pending.wait();
    assert!(
        matches!(settled, Ok(()) | Err(replay_mock::KernelError::Lost)),
        "{settled:?}"
    );
}

#[test]
fn a_batch_runs_its_kernels_in_order_and_completes_once_after_the_last() {
    let rt = SimRuntime::new();
    let q = rt.queue(AgentId(0), 0);
    let log: Arc<Mutex<Vec<u32>>> = Arc::default();
    let gate = Arc::new(Gate::default());
    let first = gated(Arc::clone(&gate), Arc::clone(&log), 1);
    let l2 = Arc::clone(&log);
    let second = Kernel::new("second", move |ctx| {
        l2.lock().push(ctx.word(0) as u32);
        Ok(())
    });
    let args = replay_mock::KernArgs::new().u64(2).build();
    let c = rt
        .dispatch_batch(
            q,
            &[
                (&first, &[][..], replay_core::Dim3::new(1, 1, 1)),
                (&second, &args[..], replay_core::Dim3::new(1, 1, 1)),
            ],
        )
        .unwrap();
    assert!(!c.is_done(), "the first kernel is still held");
    gate.open();
    c.wait().unwrap();
    assert_eq!(c.fired(), 1);
    assert_eq!(*log.lock(), vec![1, 2]);
}
