//! Property: whatever the layout and whatever the kernel writes, capture, mutate, restore
//! leaves memory equal to the original (both restore modes, regions split across tiers).

mod common;

use std::sync::Arc;

use common::dispatch;
use proptest::prelude::*;
use replay_core::policy::{Policy, RestoreMode, Scope};
use replay_core::{AgentId, MemoryClass, Snapshotter};
use replay_memory::{MemoryEngine, NoModuleVariables, Tracker};
use replay_mock::double::{FakeClock, FakeDeviceMemory};

const A: AgentId = AgentId(0);

fn layout() -> impl Strategy<Value = Vec<(u64, u64)>> {
    // Gaps and sizes; regions never overlap.
    prop::collection::vec((0u64..64, 1u64..20_000), 1..8).prop_map(|v| {
        let mut at = 0x10_0000;
        v.into_iter()
            .map(|(gap, size)| {
                at += gap * 16;
                let r = (at, size);
                at += size;
                r
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn capture_mutate_restore_is_identity(
        regions in layout(),
        writes in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), 1usize..300, any::<u8>()), 0..20),
        dirty in any::<bool>(),
        device_budget in 1u64..50_000,
        passes in 1usize..4,
    ) {
        let clock = Arc::new(FakeClock::default());
        let tracker = Arc::new(Tracker::new());
        let dev = Arc::new(FakeDeviceMemory::new(A, clock.clone(), [Some(1 << 30), Some(1 << 30), Some(1 << 30)]));
        for &(base, size) in &regions {
            dev.app_alloc(&tracker, base, size, MemoryClass::DEVICE_COARSE);
        }
        let engine = MemoryEngine::new(A, tracker, dev.clone(), Arc::new(NoModuleVariables))
            .with_host_available_bytes(1 << 30);
        let policy = Policy {
            restore: if dirty { RestoreMode::Dirty } else { RestoreMode::Full },
            chunk_bytes: 4096,
            device_tier_bytes: device_budget,
            pinned_tier_bytes: 7_000,
            ..Policy::default()
        };
        let original = dev.memory();
        let plan = engine.plan(&dispatch(A, &[]), Scope::All, &policy).unwrap();
        let mut snap = engine.capture(&plan, &policy, &clock.wait()).unwrap();
        for _ in 0..passes {
            for (r, at, len, byte) in &writes {
                let (base, size) = regions[r.index(regions.len())];
                let off = at.index(size as usize) as u64;
                let len = (*len as u64).min(size - off);
                dev.write(base + off, &vec![*byte; len as usize]);
            }
            snap.restore(&clock.wait()).unwrap();
            prop_assert_eq!(&dev.memory(), &original);
        }
    }
}
