//! Each injected fault behaves as documented, through a real `ReplayService` where the window
//! survives it (RestoreFail and DigestFail abort a window by design: checked on the device).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use replay_core::{
    AgentId, CopyOp, DeviceMemory, DigestOp, KernelMemo, MemLoc, MemoryClass, Outcome,
    OutcomeRecord, Reason, Tier,
};
use replay_memory::ModuleVariables;
use replay_mock::{
    Event, EventKind, Expect, Fault, FaultMode, ModuleSpec, SimRuntime, TargetPattern, WaitBounds,
    WaitKind,
};

const N: usize = 1024;

struct Setup {
    rt: SimRuntime,
    buf: u64,
    other: u64,
    inputs: common::Inputs,
    kernel: replay_mock::Kernel,
}

fn initial() -> Vec<u32> {
    (0..N as u32).map(|i| i ^ 0x5a5a).collect()
}

/// A runtime whose tool asks `passes` passes, a buffer the kernel rewrites and another
/// allocation it never touches.
fn setup(passes: u64) -> Setup {
    let rt = common::runtime(1);
    common::with_replay(&rt, passes);
    let a = AgentId(0);
    let buf = rt
        .alloc(a, (N * 4) as u64, MemoryClass::DEVICE_COARSE)
        .unwrap();
    rt.write_u32s(buf, &initial()).unwrap();
    let other = rt.alloc(a, 8192, MemoryClass::DEVICE_COARSE).unwrap();
    rt.fill(other, 8192, 0x77).unwrap();
    let inputs: common::Inputs = Arc::default();
    let kernel = common::rmw_kernel(Arc::clone(&inputs));
    rt.gpu().recorder().clear();
    Setup {
        rt,
        buf,
        other,
        inputs,
        kernel,
    }
}

impl Setup {
    fn run(&self) -> OutcomeRecord {
        let c = self
            .rt
            .dispatch(
                self.rt.queue(AgentId(0), 0),
                &self.kernel,
                &common::args(self.buf, 0),
                common::grid(N as u32),
            )
            .unwrap();
        c.wait().unwrap();
        assert_eq!(c.fired(), 1, "the application sees exactly one completion");
        c.record().expect("a record")
    }

    fn assert_one_execution(&self) {
        assert_eq!(
            self.rt.read_u32s(self.buf, N).unwrap(),
            common::rmw_once(&initial())
        );
    }

    fn finish(&self) {
        self.rt.wait_idle();
        self.rt.check_invariants().unwrap();
    }
}

fn declined(r: &OutcomeRecord, reason: Reason) {
    assert_eq!((r.outcome, r.reason), (Outcome::Declined, reason), "{r}");
    assert_eq!(r.executed_passes, 1);
}

#[test]
fn snapshot_oom_declines() {
    let s = setup(3);
    // Every tier refuses: a tier that fails hands its share to the next, so one refusal alone
    // would not decline.
    let f =
        s.rt.inject(AgentId(0), Fault::SnapshotOom, FaultMode::Always);
    declined(&s.run(), Reason::SnapshotFailed);
    assert!(s.rt.fault_hits(f) >= 2, "the later tiers were tried too");
    s.assert_one_execution();
    s.rt.gpu().clear_faults();
    let r = s.run();
    assert_eq!(r.outcome, Outcome::Replayed, "{r}");
    s.finish();
}

#[test]
fn tier_oom_fails_only_that_tier() {
    let rt = common::runtime(1);
    let mem = rt.memory(AgentId(0));
    rt.inject(AgentId(0), Fault::TierOom(Tier::Device), FaultMode::Always);
    assert!(mem.alloc_backing(Tier::Device, 4096).is_err());
    assert!(mem.alloc_backing(Tier::Device, 4096).is_err());
    assert!(mem.alloc_backing(Tier::PinnedHost, 4096).is_ok());
}

#[test]
fn a_tier_that_cannot_allocate_leaves_the_snapshot_to_the_next_tier() {
    // This agent's device memory is below the device tier's headroom: snapshots go to pinned
    // host memory, which now refuses; the pageable tier takes its share.
    let s = setup(3);
    s.rt.engine(AgentId(0)).release_pools();
    let f = s.rt.inject(
        AgentId(0),
        Fault::TierOom(Tier::PinnedHost),
        FaultMode::Always,
    );
    let r = s.run();
    assert_eq!(r.outcome, Outcome::Replayed, "{r}");
    assert!(s.rt.fault_hits(f) >= 1, "{r}");
    assert_eq!((r.tier_bytes.device, r.tier_bytes.pinned), (0, 0), "{r}");
    assert_eq!(r.tier_bytes.pageable, r.captured_bytes, "{r}");
    s.assert_one_execution();
    s.finish();
}

#[test]
fn capture_copy_fail_declines() {
    let s = setup(3);
    s.rt.inject(AgentId(0), Fault::CaptureCopyFail, FaultMode::Once);
    declined(&s.run(), Reason::SnapshotFailed);
    s.assert_one_execution();
    assert_eq!(s.inputs.lock().len(), 1);
    s.finish();
}

#[test]
fn capture_copy_stuck_declines_and_quarantines() {
    let s = setup(3);
    s.rt.inject(AgentId(0), Fault::CaptureCopyStuck, FaultMode::Once);
    let wall = Instant::now();
    declined(&s.run(), Reason::SnapshotFailed);
    assert!(wall.elapsed() < Duration::from_secs(3));
    assert!(s.rt.engine(AgentId(0)).quarantined_bytes() > 0);
    // The copy's fence, and the digests submitted beside it (the capture waits for the copy
    // first and drops the digests with it): one bound waited, two fences abandoned.
    assert_eq!(s.rt.gpu().recorder().count(EventKind::FenceAbandoned), 2);
    s.assert_one_execution();
    s.finish();
}

#[test]
fn queue_drain_stuck_declines_and_the_application_still_completes() {
    let s = setup(3);
    s.rt.inject(AgentId(0), Fault::QueueDrainStuck, FaultMode::Once);
    let (wall, t0) = (Instant::now(), s.rt.now());
    declined(&s.run(), Reason::QueueDrainStuck);
    assert!(
        wall.elapsed() < Duration::from_secs(3),
        "stalls resolve quickly in wall time"
    );
    assert!(
        s.rt.now() - t0 >= common::policy().drain_timeout,
        "on virtual time"
    );
    s.assert_one_execution();
    Expect::new()
        .drain_abandoned(TargetPattern::Queue(None))
        .ordinary()
        .assert_finished(s.rt.gpu().recorder());
    let drains: Vec<_> =
        s.rt.gpu()
            .invariants()
            .waits()
            .into_iter()
            .filter(|w| w.kind == WaitKind::Drain)
            .collect();
    assert!(drains[0].abandoned);
    s.finish();
    // The bound check would flag a wait longer than a tighter bound.
    let tight = WaitBounds {
        drain: Duration::from_millis(100),
        pass: Duration::from_secs(1),
        fence: Duration::from_secs(1),
        tolerance: Duration::ZERO,
    };
    assert!(s.rt.gpu().invariants().check(&tight).is_err());
}

#[test]
fn agent_drain_stuck_declines() {
    let s = setup(3);
    s.rt.inject(AgentId(0), Fault::AgentDrainStuck, FaultMode::Once);
    declined(&s.run(), Reason::AgentDrainStuck);
    s.assert_one_execution();
    Expect::new()
        .drain(TargetPattern::Queue(None))
        .drain_abandoned(TargetPattern::Agent)
        .ordinary()
        .assert_finished(s.rt.gpu().recorder());
    s.finish();
}

#[test]
fn copy_fence_stuck_declines() {
    let s = setup(3);
    // An application copy in flight, too.
    let a = AgentId(0);
    let tmp = s.rt.alloc(a, 4096, MemoryClass::DEVICE_COARSE).unwrap();
    let copy = s.rt.copy_async(a, tmp, s.other, 4096).unwrap();
    s.rt.inject(a, Fault::CopyFenceStuck, FaultMode::Once);
    declined(&s.run(), Reason::CopyFenceStuck);
    copy.wait().unwrap();
    s.assert_one_execution();
    s.finish();
}

#[test]
fn pass_stuck_truncates_and_memory_holds_that_pass() {
    let s = setup(4);
    s.rt.inject(AgentId(0), Fault::PassStuck { pass: 1 }, FaultMode::Once);
    let wall = Instant::now();
    let r = s.run();
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::Truncated, Reason::PassDrainStuck),
        "{r}"
    );
    assert_eq!(r.executed_passes, 2);
    assert!(wall.elapsed() < Duration::from_secs(3));
    // Pass 1 ran on restored inputs after the window gave up on it; nothing restored after.
    let seen = s.inputs.lock().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], seen[1]);
    s.assert_one_execution();
    Expect::new()
        .window_drains()
        .pass(0)
        .pass_abandoned(1)
        .signal()
        .assert_finished(s.rt.gpu().recorder());
    let key = s.kernel.key(AgentId(0));
    assert_eq!(
        s.rt.service().unwrap().kernel_memo(&key),
        Some(KernelMemo::NoReplay)
    );
    s.finish();
}

#[test]
fn pass_submit_fail_declines_before_the_first_pass_and_truncates_after() {
    let s = setup(3);
    s.rt.inject(
        AgentId(0),
        Fault::PassSubmitFail { pass: 0 },
        FaultMode::Once,
    );
    declined(&s.run(), Reason::SubmitFailed);
    s.assert_one_execution();

    let s = setup(3);
    s.rt.inject(
        AgentId(0),
        Fault::PassSubmitFail { pass: 2 },
        FaultMode::Once,
    );
    let r = s.run();
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::Truncated, Reason::SubmitFailed),
        "{r}"
    );
    s.assert_one_execution();
    let seen = s.inputs.lock().clone();
    assert_eq!(seen.len(), 3, "two passes and the ordinary run");
    assert!(seen.windows(2).all(|w| w[0] == w[1]));
    s.finish();
}

#[test]
fn restore_fail_fails_the_copy_back_to_application_memory() {
    // End to end this aborts the process (SPEC §6); here: the device side of it.
    let rt = common::runtime(1);
    let a = AgentId(0);
    let mem = rt.memory(a);
    let buf = rt.alloc(a, 4096, MemoryClass::DEVICE_COARSE).unwrap();
    let b = mem.alloc_backing(Tier::PageableHost, 4096).unwrap();
    rt.inject(a, Fault::RestoreFail, FaultMode::Once);
    let capture = CopyOp {
        src: MemLoc::Device { addr: buf },
        dst: MemLoc::Backing { id: b, offset: 0 },
        len: 4096,
    };
    let restore = CopyOp {
        src: capture.dst,
        dst: capture.src,
        len: 4096,
    };
    let poll = |f| loop {
        match mem.poll_fence(f, Duration::from_millis(10)) {
            Ok(false) => continue,
            other => break other,
        }
    };
    assert_eq!(
        poll(mem.submit_copies(&[capture]).unwrap()),
        Ok(true),
        "captures unaffected"
    );
    let e = poll(mem.submit_copies(&[restore]).unwrap()).unwrap_err();
    assert!(e.message.contains("restore_fail"), "{e}");
    assert_eq!(
        poll(mem.submit_copies(&[restore]).unwrap()),
        Ok(true),
        "once"
    );
}

#[test]
fn digest_fail_fails_the_digest_batch() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let mem = rt.memory(a);
    let buf = rt.alloc(a, 4096, MemoryClass::DEVICE_COARSE).unwrap();
    rt.inject(a, Fault::DigestFail, FaultMode::Once);
    let op = DigestOp {
        at: MemLoc::Device { addr: buf },
        len: 4096,
    };
    let f = mem
        .submit_digests(&[op], replay_core::digest::key_from_seed(1))
        .unwrap();
    let e = loop {
        match mem.poll_fence(f, Duration::from_millis(10)) {
            Ok(false) => continue,
            Ok(true) => panic!("digest succeeded"),
            Err(e) => break e,
        }
    };
    assert!(e.message.contains("digest_fail"), "{e}");
}

#[test]
fn incomplete_module_enumeration_declines_untracked_memory() {
    let s = setup(3);
    s.rt.load_module(AgentId(0), ModuleSpec::new("m").variable("v", 64))
        .unwrap();
    s.rt.inject(
        AgentId(0),
        Fault::IncompleteModuleEnumeration,
        FaultMode::Once,
    );
    declined(&s.run(), Reason::UntrackedMemory);
    s.assert_one_execution();
    assert_eq!(
        s.rt.module_variables().enumerate(AgentId(0)).unwrap().len(),
        1,
        "once"
    );
    s.finish();
}

#[test]
fn free_during_a_pass_is_not_restored_into() {
    let s = setup(3);
    let a = AgentId(0);
    s.rt.inject(
        a,
        Fault::FreeDuringPass {
            base: s.other,
            pass: 0,
        },
        FaultMode::Once,
    );
    let r = s.run();
    assert_eq!(r.outcome, Outcome::Replayed, "{r}");
    assert!(s.rt.tracker().lookup(a, s.other).is_none());
    assert!(
        s.rt.read(s.other, 1).is_err(),
        "freed, and nothing wrote it back"
    );
    assert!(s
        .rt
        .gpu()
        .recorder()
        .events()
        .iter()
        .any(|e| matches!(e, Event::Free { base, .. } if *base == s.other)));
    s.assert_one_execution();
    s.finish();
}

#[test]
fn realloc_during_a_pass_is_not_restored_into() {
    let s = setup(3);
    let a = AgentId(0);
    let old = s.rt.tracker().lookup(a, s.other).unwrap();
    s.rt.inject(
        a,
        Fault::ReallocDuringPass {
            base: s.other,
            pass: 1,
        },
        FaultMode::Once,
    );
    let r = s.run();
    assert_eq!(r.outcome, Outcome::Replayed, "{r}");
    let new = s.rt.tracker().lookup(a, s.other).unwrap();
    assert_eq!(new.base, old.base);
    assert_ne!(new.generation, old.generation);
    assert!(
        s.rt.read(s.other, 8192).unwrap().iter().all(|&b| b == 0),
        "the new allocation was not overwritten with the old snapshot"
    );
    s.assert_one_execution();
    s.finish();
}

#[test]
fn ordinary_submit_fail_is_the_applications_error() {
    let rt = common::runtime(1);
    rt.inject(AgentId(0), Fault::OrdinarySubmitFail, FaultMode::Once);
    let k = replay_mock::Kernel::new("k", |_| Ok(()));
    let e = rt
        .dispatch(rt.queue(AgentId(0), 0), &k, &[], common::grid(1))
        .unwrap_err();
    assert!(e.to_string().contains("ordinary_submit_fail"), "{e}");
    rt.dispatch(rt.queue(AgentId(0), 0), &k, &[], common::grid(1))
        .unwrap()
        .wait()
        .unwrap();
    rt.wait_idle();
    rt.check_invariants().unwrap();
}

#[test]
fn always_faults_fire_every_time_and_stalls_end_on_their_own() {
    let rt = common::runtime(1);
    let a = AgentId(0);
    let f = rt.inject(a, Fault::SnapshotOom, FaultMode::Always);
    let mem = rt.memory(a);
    for _ in 0..3 {
        assert!(mem.alloc_backing(Tier::PageableHost, 64).is_err());
    }
    assert_eq!(rt.fault_hits(f), 3);
    rt.gpu().clear_faults();
    assert!(mem.alloc_backing(Tier::PageableHost, 64).is_ok());

    // A stall nobody releases ends at its wall cap.
    let rt = SimRuntime::builder()
        .config(replay_mock::SimConfig {
            stall_wall_cap: Duration::from_millis(50),
            ..replay_mock::SimConfig::default()
        })
        .build();
    rt.inject(a, Fault::QueueDrainStuck, FaultMode::Once);
    let agent = rt.agent(a);
    let q = rt.queue(a, 0);
    let t =
        replay_core::Agent::begin_drain(&*agent, replay_core::DrainTarget::Queue(q.queue)).unwrap();
    let wall = Instant::now();
    let k = replay_mock::Kernel::new("k", |_| Ok(()));
    rt.dispatch(q, &k, &[], common::grid(1))
        .unwrap()
        .wait()
        .unwrap();
    assert!(wall.elapsed() < Duration::from_secs(3));
    assert!(replay_core::Agent::poll_drain(&*agent, t, Duration::ZERO).unwrap());
    assert_eq!(rt.gpu().recorder().count(EventKind::StallAutoReleased), 1);
}
