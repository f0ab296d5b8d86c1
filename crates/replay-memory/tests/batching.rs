//! Call order and batching pinned with a mock device: one allocation, one copy batch per
//! capture and per restore, fence waits after submission, backing kept in the pool.

use std::sync::Arc;
use std::time::Duration;

use mockall::predicate::eq;
use mockall::Sequence;
use replay_core::policy::{Policy, Scope};
use replay_core::{
    AgentId, BackendError, BackingId, Clock, CopyOp, DeviceMemory, Digest128, DigestKey, DigestOp,
    Fence, MemLoc, MemoryClass, Snapshotter, Tier, TierInfo, WaitSpec,
};
use replay_memory::{MemoryEngine, NoModuleVariables, Tracker};

mod common;

mockall::mock! {
    Dev {}
    impl DeviceMemory for Dev {
        fn agent(&self) -> AgentId;
        fn tier_info(&self, tier: Tier) -> Option<TierInfo>;
        fn alloc_backing(&self, tier: Tier, bytes: u64) -> Result<BackingId, BackendError>;
        fn free_backing(&self, id: BackingId);
        fn submit_copies(&self, ops: &[CopyOp]) -> Result<Fence, BackendError>;
        fn submit_digests(&self, ops: &[DigestOp], key: DigestKey) -> Result<Fence, BackendError>;
        fn poll_fence(&self, fence: Fence, budget: Duration) -> Result<bool, BackendError>;
        fn take_digests(&self, fence: Fence) -> Result<Vec<Digest128>, BackendError>;
        fn abandon_fence(&self, fence: Fence);
    }
}

const A: AgentId = AgentId(3);

#[test]
fn one_allocation_and_one_batch_per_capture_and_restore() {
    let tracker = Arc::new(Tracker::new());
    for (base, size) in [(0x1000u64, 10u64), (0x2000, 20), (0x3000, 30)] {
        tracker.record_alloc(A, base, size, MemoryClass::DEVICE_COARSE);
    }
    let mut dev = MockDev::new();
    dev.expect_tier_info().returning(|t| {
        (t == Tier::Device).then_some(TierInfo {
            available_bytes: 1 << 40,
            gbps: 100.0,
        })
    });
    let mut seq = Sequence::new();
    dev.expect_alloc_backing()
        .with(eq(Tier::Device), eq(60))
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok(BackingId(9)));
    let capture_ops = vec![(0x1000u64, 0u64, 10u64), (0x2000, 10, 20), (0x3000, 30, 30)];
    let want = capture_ops.clone();
    dev.expect_submit_copies()
        .withf(move |ops: &[CopyOp]| {
            ops.len() == 3
                && ops.iter().zip(&want).all(|(o, &(addr, off, len))| {
                    o.src == MemLoc::Device { addr }
                        && o.dst
                            == MemLoc::Backing {
                                id: BackingId(9),
                                offset: off,
                            }
                        && o.len == len
                })
        })
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(Fence(1)));
    dev.expect_poll_fence()
        .with(eq(Fence(1)), mockall::predicate::always())
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok(true));
    let want = capture_ops;
    dev.expect_submit_copies()
        .withf(move |ops: &[CopyOp]| {
            ops.len() == 3
                && ops.iter().zip(&want).all(|(o, &(addr, off, len))| {
                    o.dst == MemLoc::Device { addr }
                        && o.src
                            == MemLoc::Backing {
                                id: BackingId(9),
                                offset: off,
                            }
                        && o.len == len
                })
        })
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(Fence(2)));
    // Not done at first: the engine polls again within the bound.
    dev.expect_poll_fence()
        .with(eq(Fence(2)), mockall::predicate::always())
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok(false));
    dev.expect_poll_fence()
        .with(eq(Fence(2)), mockall::predicate::always())
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _| Ok(true));
    // Kept in the pool: no free while the engine lives.
    dev.expect_free_backing().never();
    dev.expect_submit_digests().never();
    dev.expect_abandon_fence().never();

    let engine = MemoryEngine::new(A, tracker, Arc::new(dev), Arc::new(NoModuleVariables))
        .with_host_available_bytes(0);
    let policy = Policy::default();
    let plan = engine
        .plan(&common::dispatch(A, &[]), Scope::All, &policy)
        .unwrap();
    let clock = replay_mock::double::FakeClock::default();
    let wait = WaitSpec {
        clock: &clock,
        timeout: Duration::from_secs(1),
        progress: Duration::from_secs(5),
        slice: Duration::from_millis(5),
    };
    let mut snap = engine.capture(&plan, &policy, &wait).unwrap();
    let rs = snap.restore(&wait).unwrap();
    assert_eq!(rs.restored_bytes, 60);
    assert_eq!(clock.now(), Duration::from_millis(5), "one slice slept");
    drop(snap);
    assert_eq!(engine.pool_free_bytes(Tier::Device), 60);
}
