//! Snapshot tiers and pools (SPEC §7.3, issue 4), end to end on the simulator.
//!
//! What is observable: the memory engine's pool ([`replay_memory::MemoryEngine::pooled_bytes`],
//! `pool_free_bytes`, `pooled_peak_bytes`), the simulator's live backing allocations
//! ([`replay_mock::SimMemory::backing_count`], `backing_bytes` per tier), the device's pool
//! usage, and the outcome record's `tier_bytes`. "No new backing allocation" is observed
//! directly: with `SnapshotOom` armed for every call, any `alloc_backing` would fail the
//! capture, so a dispatch that still replays allocated nothing.

use replay_core::{MemoryClass, Outcome, Policy, Reason, Snapshotter, Tier};
use replay_mock::{AgentConfig, Fault, FaultMode, Pool, SimRuntime};
use replay_tests::{
    assert_matches_reference, assert_outcome, fast_policy, finish, reference, reference_with,
    runtime, runtime_with, small_agent, RmwApp, ToolScript, A0, RMW_N,
};

/// `RmwApp`'s tracked bytes.
const APP: u64 = (RMW_N * 4 + 8 + 8192) as u64;
const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

#[test]
fn steady_state_dispatches_allocate_no_new_backing() {
    let policy = Policy {
        // The snapshot spans two tiers: two backing blocks.
        device_tier_bytes: 8 * KIB,
        ..fast_policy()
    };
    let rt = runtime(1);
    let replay = ToolScript::passes(3).install(&rt, policy);
    let app = RmwApp::setup(&rt);
    let (mem, engine) = (rt.memory(A0), rt.engine(A0));
    assert_eq!(mem.backing_count(), 0);

    let first = app.run(&rt);
    assert_outcome(&first, Outcome::Replayed, Reason::None);
    assert_eq!(
        (first.tier_bytes.device, first.tier_bytes.pinned),
        (8 * KIB, APP - 8 * KIB)
    );
    let blocks = mem.backing_count();
    assert_eq!(blocks, 2, "one block per tier used");
    assert_eq!(
        engine.pooled_bytes(),
        APP,
        "kept in the pool after the window"
    );
    assert_eq!(
        mem.backing_bytes(Tier::Device) + mem.backing_bytes(Tier::PinnedHost),
        APP
    );
    let peak = engine.pooled_peak_bytes();
    assert_eq!(peak, APP);

    // From now on any backing allocation fails: steady-state windows must not need one.
    let oom = rt.inject(A0, Fault::SnapshotOom, FaultMode::Always);
    for _ in 0..5 {
        let r = app.run(&rt);
        assert_outcome(&r, Outcome::Replayed, Reason::None);
        assert_eq!(r.tier_bytes, first.tier_bytes);
    }
    assert_eq!(
        rt.fault_hits(oom),
        0,
        "no backing allocated after the first window"
    );
    assert_eq!(mem.backing_count(), blocks);
    assert_eq!(engine.pooled_bytes(), APP);
    assert_eq!(engine.pooled_peak_bytes(), peak);
    assert_eq!(replay.svc.summary().peak_pooled_bytes, peak);

    // The observation works: a larger footprint needs a new block, and the fault fires.
    let more = rt.alloc(A0, 64 * KIB, MemoryClass::DEVICE_COARSE).unwrap();
    let r = app.run(&rt);
    assert_outcome(&r, Outcome::Declined, Reason::SnapshotFailed);
    assert!(rt.fault_hits(oom) >= 1, "every tier with room refused");
    rt.gpu().clear_faults();
    assert_outcome(&app.run(&rt), Outcome::Replayed, Reason::None);

    let reference = reference(1, |rt| {
        let app = RmwApp::setup(rt);
        for _ in 0..6 {
            app.run_plain(rt);
        }
        rt.alloc(A0, 64 * KIB, MemoryClass::DEVICE_COARSE).unwrap();
        app.run_plain(rt);
        app.run_plain(rt);
    });
    assert_matches_reference(&rt, &reference);
    let _ = more;
    finish(&rt);
}

#[test]
fn the_pool_is_trimmed_to_pool_keep_bytes_after_each_window() {
    let policy = Policy {
        device_tier_bytes: MIB,
        pool_keep_bytes: 16 * KIB,
        ..fast_policy()
    };
    let rt = runtime(1);
    let replay = ToolScript::passes(2).install(&rt, policy.clone());
    let app = RmwApp::setup(&rt);
    let (mem, engine) = (rt.memory(A0), rt.engine(A0));

    // 12 KiB fit under the limit: kept.
    assert_outcome(&app.run(&rt), Outcome::Replayed, Reason::None);
    assert_eq!(engine.pooled_bytes(), APP);
    assert_eq!(engine.pool_free_bytes(Tier::Device), APP);

    // 64 KiB more: the pooled block is reused and one block added for the rest; after the
    // window the pool keeps what fits in 16 KiB (the old block) and frees the new one.
    let big = rt.alloc(A0, 64 * KIB, MemoryClass::DEVICE_COARSE).unwrap();
    rt.fill(big, (64 * KIB) as usize, 0x3c).unwrap();
    let r = app.run(&rt);
    assert_outcome(&r, Outcome::Replayed, Reason::None);
    assert_eq!(r.captured_bytes, APP + 64 * KIB);
    assert_eq!(engine.pooled_peak_bytes(), APP + 64 * KIB);
    assert_eq!(engine.pooled_bytes(), APP);
    for tier in Tier::ALL {
        assert!(engine.pool_free_bytes(tier) <= policy.pool_keep_bytes);
        assert!(mem.backing_bytes(tier) <= policy.pool_keep_bytes);
    }
    assert_eq!(mem.backing_count(), 1);

    // A limit of 0 keeps nothing between windows.
    replay
        .svc
        .set_policy(Policy {
            pool_keep_bytes: 0,
            ..policy
        })
        .unwrap();
    assert_outcome(&app.run(&rt), Outcome::Replayed, Reason::None);
    assert_eq!(engine.pooled_bytes(), 0);
    assert_eq!(mem.backing_count(), 0);
    assert_eq!(replay.svc.summary().peak_pooled_bytes, APP + 64 * KIB);

    let reference = reference(1, |rt| {
        let app = RmwApp::setup(rt);
        app.run_plain(rt);
        let big = rt.alloc(A0, 64 * KIB, MemoryClass::DEVICE_COARSE).unwrap();
        rt.fill(big, (64 * KIB) as usize, 0x3c).unwrap();
        app.run_plain(rt);
        app.run_plain(rt);
    });
    assert_matches_reference(&rt, &reference);
    finish(&rt);
}

fn tight_agent() -> AgentConfig {
    AgentConfig {
        device_bytes: 16 * MIB,
        ..small_agent()
    }
}

#[test]
fn an_application_allocation_that_fails_for_lack_of_memory_releases_the_pools() {
    let policy = Policy {
        device_tier_bytes: 8 * MIB,
        ..fast_policy()
    };
    let rt = runtime_with(&[tight_agent()]);
    ToolScript::passes(2).install(&rt, policy);
    let workload = |rt: &SimRuntime| {
        let app = RmwApp::setup(rt);
        let data = rt.alloc(A0, 4 * MIB, MemoryClass::DEVICE_COARSE).unwrap();
        rt.fill(data, (4 * MIB) as usize, 0x5a).unwrap();
        app
    };
    let app = workload(&rt);
    let (mem, engine) = (rt.memory(A0), rt.engine(A0));
    let r = app.run(&rt);
    assert_outcome(&r, Outcome::Replayed, Reason::None);
    assert_eq!(r.tier_bytes.device, APP + 4 * MIB, "all in the device tier");
    let pooled = mem.backing_bytes(Tier::Device);
    assert_eq!(pooled, APP + 4 * MIB, "kept in the pool");

    // An allocation that fits only once the pool is gone.
    let free = 16 * MIB - rt.gpu().pool_used(A0, Pool::Device);
    let request = free + 2 * MIB;
    assert!(request > free && request < free + pooled);
    let x = rt
        .alloc(A0, request, MemoryClass::DEVICE_COARSE)
        .expect("the pools were released and the allocation retried");
    assert_eq!(mem.backing_bytes(Tier::Device), 0);
    assert_eq!(engine.pooled_bytes(), 0);
    assert_eq!(mem.backing_count(), 0);

    // Replay goes on: the device is nearly full now, so the snapshot spills to host tiers.
    let r = app.run(&rt);
    assert_outcome(&r, Outcome::Replayed, Reason::None);
    assert!(r.tier_bytes.device < r.captured_bytes, "{r}");
    assert!(r.tier_bytes.pinned + r.tier_bytes.pageable > 0, "{r}");
    assert_eq!(r.tier_bytes.total(), r.captured_bytes);

    let reference = reference_with(&[tight_agent()], |rt| {
        let app = workload(rt);
        app.run_plain(rt);
        let y = rt.alloc(A0, request, MemoryClass::DEVICE_COARSE).unwrap();
        assert_eq!(y, x, "same address");
        app.run_plain(rt);
    });
    assert_matches_reference(&rt, &reference);
    finish(&rt);
}

#[test]
fn a_release_during_a_window_frees_the_snapshots_blocks_when_it_ends() {
    let rt = runtime_with(&[tight_agent()]);
    let tried = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let t = std::sync::Arc::clone(&tried);
    ToolScript::passes(2)
        .on(replay_tests::At::PassEnter, move |rt, p| {
            if p.current_pass == 0 {
                // Another allocation that cannot succeed: it releases the pools first.
                assert!(rt.alloc(A0, 64 * MIB, MemoryClass::DEVICE_COARSE).is_err());
                t.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        })
        .install(
            &rt,
            Policy {
                device_tier_bytes: 8 * MIB,
                ..fast_policy()
            },
        );
    let app = RmwApp::setup(&rt);
    assert_outcome(&app.run(&rt), Outcome::Replayed, Reason::None);
    assert!(tried.load(std::sync::atomic::Ordering::SeqCst));
    // The snapshot's blocks were in use during the release; they were freed when it ended.
    assert_eq!(rt.engine(A0).pooled_bytes(), 0);
    assert_eq!(rt.memory(A0).backing_count(), 0);
    assert_matches_reference(
        &rt,
        &reference_with(&[tight_agent()], |rt| RmwApp::setup(rt).run_plain(rt)),
    );
    finish(&rt);
}

#[test]
fn a_tier_that_runs_out_mid_plan_spills_to_the_next() {
    let workload = |rt: &SimRuntime| {
        let app = RmwApp::setup(rt);
        let data = rt.alloc(A0, 64 * KIB, MemoryClass::DEVICE_COARSE).unwrap();
        rt.fill(data, (64 * KIB) as usize, 0xe1).unwrap();
        app
    };
    let total = APP + 64 * KIB;
    // By budget: 8 KiB device, 16 KiB pinned, the rest pageable; `other` (8 KiB at 4 KiB +
    // 8 bytes) is split between device and pinned, the 64 KiB region between pinned and
    // pageable.
    let by_budget = Policy {
        device_tier_bytes: 8 * KIB,
        pinned_tier_bytes: 16 * KIB,
        ..fast_policy()
    };
    // By capacity: a small pinned pool (32 KiB, of which the automatic budget takes half)
    // and no room for the device tier's automatic headroom.
    let small_pinned = AgentConfig {
        pinned_bytes: 32 * KIB,
        ..small_agent()
    };
    for (agent, policy, want) in [
        (
            small_agent(),
            by_budget,
            [8 * KIB, 16 * KIB, total - 24 * KIB],
        ),
        (
            small_pinned.clone(),
            fast_policy(),
            [0, 16 * KIB, total - 16 * KIB],
        ),
    ] {
        let rt = runtime_with(std::slice::from_ref(&agent));
        let replay = ToolScript::passes(3).install(&rt, policy);
        let app = workload(&rt);
        let r = app.run(&rt);
        assert_outcome(&r, Outcome::Replayed, Reason::None);
        assert_eq!(r.captured_bytes, total);
        assert_eq!(
            [
                r.tier_bytes.device,
                r.tier_bytes.pinned,
                r.tier_bytes.pageable
            ],
            want,
            "{r}"
        );
        let seen = app.seen();
        assert_eq!(seen.len(), 3);
        assert!(
            seen.windows(2).all(|w| w[0] == w[1]),
            "restored from every tier"
        );
        let mem = rt.memory(A0);
        for (tier, bytes) in Tier::ALL.into_iter().zip(want) {
            assert_eq!(mem.backing_bytes(tier), bytes, "{tier:?} pooled");
        }
        assert_eq!(replay.svc.summary().peak_pooled_bytes, total);
        assert_matches_reference(
            &rt,
            &reference_with(std::slice::from_ref(&agent), |rt| {
                workload(rt).run_plain(rt)
            }),
        );
        finish(&rt);
    }
}

#[test]
fn pooled_backing_unused_for_the_idle_bound_is_released_on_the_simulators_clock() {
    let idle = std::time::Duration::from_secs(5);
    let policy = Policy {
        device_tier_bytes: 8 * MIB,
        pool_keep_bytes: u64::MAX,
        pool_idle_release: idle,
        ..fast_policy()
    };
    let rt = runtime(1);
    ToolScript::passes(3).install(&rt, policy);
    let app = RmwApp::setup(&rt);
    let (mem, engine, clock) = (rt.memory(A0), rt.engine(A0), rt.clock());
    assert_outcome(&app.run(&rt), Outcome::Replayed, Reason::None);
    assert_eq!(engine.pooled_bytes(), APP, "kept after the window");

    // Short of the bound: a later call into the library keeps the pool.
    clock.advance(idle / 2);
    let other = rt.alloc(A0, 4 * KIB, MemoryClass::DEVICE_COARSE).unwrap();
    assert_eq!(engine.pooled_bytes(), APP);
    assert_eq!(mem.backing_count(), 1);
    // A window in between restarts the idle time.
    assert_outcome(&app.run(&rt), Outcome::Replayed, Reason::None);
    clock.advance(idle - std::time::Duration::from_millis(1));
    rt.alloc(A0, 4 * KIB, MemoryClass::DEVICE_COARSE).unwrap();
    assert_eq!(
        engine.pooled_bytes(),
        APP + 4 * KIB,
        "the window used the pool"
    );

    // Past the bound: the next call releases every block.
    clock.advance(std::time::Duration::from_millis(2));
    rt.alloc(A0, 4 * KIB, MemoryClass::DEVICE_COARSE).unwrap();
    assert_eq!(engine.pooled_bytes(), 0);
    assert_eq!(mem.backing_count(), 0);
    for tier in Tier::ALL {
        assert_eq!(mem.backing_bytes(tier), 0, "{tier:?}");
    }

    // Replay goes on with fresh backing, and memory equals one execution of each dispatch.
    assert_outcome(&app.run(&rt), Outcome::Replayed, Reason::None);
    let reference = reference(1, |rt| {
        let app = RmwApp::setup(rt);
        app.run_plain(rt);
        rt.alloc(A0, 4 * KIB, MemoryClass::DEVICE_COARSE).unwrap();
        app.run_plain(rt);
        rt.alloc(A0, 4 * KIB, MemoryClass::DEVICE_COARSE).unwrap();
        rt.alloc(A0, 4 * KIB, MemoryClass::DEVICE_COARSE).unwrap();
        app.run_plain(rt);
    });
    assert_matches_reference(&rt, &reference);
    let _ = other;
    finish(&rt);
}

#[test]
fn an_idle_bound_of_zero_keeps_the_pool() {
    let policy = Policy {
        pool_keep_bytes: u64::MAX,
        pool_idle_release: std::time::Duration::ZERO,
        ..fast_policy()
    };
    let rt = runtime(1);
    ToolScript::passes(2).install(&rt, policy);
    let app = RmwApp::setup(&rt);
    assert_outcome(&app.run(&rt), Outcome::Replayed, Reason::None);
    rt.clock().advance(std::time::Duration::from_secs(3600));
    rt.alloc(A0, 4 * KIB, MemoryClass::DEVICE_COARSE).unwrap();
    assert_eq!(rt.engine(A0).pooled_bytes(), APP);
    finish(&rt);
}
