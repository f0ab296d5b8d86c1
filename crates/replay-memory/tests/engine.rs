//! The engine against the fake device: plans, tiers, pools, failures, restore and scope checks,
//! all checked on real bytes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::dispatch;
use parking_lot::Mutex;
use replay_core::policy::{Policy, RestoreMode, Scope};
use replay_core::{AgentId, MemoryClass, ScopeCheck, Snapshotter, Tier, TierBytes};
use replay_memory::engine::{DEVICE_HEADROOM_BYTES, DEVICE_HEADROOM_DIVISOR};
use replay_memory::{MemoryEngine, ModuleVariable, ModuleVariables, Tracker};
use replay_mock::double::{FakeClock, FakeDeviceMemory};

const A: AgentId = AgentId(0);
const B: AgentId = AgentId(1);
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// Module variables a test sets.
#[derive(Default)]
struct Mods(
    Mutex<Option<Result<Vec<ModuleVariable>, String>>>,
    /// Addresses at or above this belong to a second code-object load (0: one load).
    std::sync::atomic::AtomicU64,
    /// The allocations the backend names for variables (empty: it cannot tell).
    Mutex<Vec<(u64, u64)>>,
    /// The generation the backend answers (`None`: it cannot tell).
    Mutex<Option<u64>>,
    /// Enumerations so far.
    std::sync::atomic::AtomicU64,
);

impl ModuleVariables for Mods {
    fn enumerate(&self, _agent: AgentId) -> Result<Vec<ModuleVariable>, String> {
        self.4.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.lock().clone().unwrap_or(Ok(Vec::new()))
    }

    fn generation(&self, _agent: AgentId) -> Option<u64> {
        *self.3.lock()
    }

    fn load_generation(&self, _agent: AgentId, addr: u64) -> Option<u64> {
        let second = self.1.load(std::sync::atomic::Ordering::Relaxed);
        Some(u64::from(second != 0 && addr >= second))
    }

    fn allocation_of(&self, _agent: AgentId, addr: u64) -> Option<(u64, u64)> {
        self.2
            .lock()
            .iter()
            .copied()
            .find(|&(b, s)| b <= addr && addr < b + s)
    }
}

struct Env {
    clock: Arc<FakeClock>,
    tracker: Arc<Tracker>,
    dev: Arc<FakeDeviceMemory>,
    mods: Arc<Mods>,
    engine: MemoryEngine,
}

impl Env {
    /// An application allocation of coarse-grained device memory.
    fn coarse(&self, base: u64, size: u64) {
        self.dev
            .app_alloc(&self.tracker, base, size, MemoryClass::DEVICE_COARSE);
    }

    /// A capture of every tracked region under `p`.
    fn capture_all(&self, p: &Policy) -> Box<dyn replay_core::Snapshot> {
        self.engine
            .capture(&plan_all(self, p), p, &self.clock.wait())
            .unwrap()
    }
}

fn env_with(avail: [Option<u64>; 3]) -> Env {
    let clock = Arc::new(FakeClock::default());
    let tracker = Arc::new(Tracker::new());
    let dev = Arc::new(FakeDeviceMemory::new(A, clock.clone(), avail));
    let mods = Arc::new(Mods::default());
    let engine = MemoryEngine::new(A, tracker.clone(), dev.clone(), mods.clone())
        .with_digest_key(replay_core::digest::key_from_seed(7))
        .with_host_available_bytes(GIB);
    Env {
        clock,
        tracker,
        dev,
        mods,
        engine,
    }
}

fn env() -> Env {
    env_with([Some(GIB), Some(GIB), Some(GIB)])
}

fn policy() -> Policy {
    Policy {
        pool_keep_bytes: GIB,
        ..Policy::default()
    }
}

fn capture_err(
    e: &Env,
    plan: &replay_core::SnapshotPlan,
    p: &Policy,
) -> replay_core::SnapshotError {
    match e.engine.capture(plan, p, &e.clock.wait()) {
        Ok(_) => panic!("capture succeeded"),
        Err(err) => err,
    }
}

fn plan_all(e: &Env, p: &Policy) -> replay_core::SnapshotPlan {
    e.engine.plan(&dispatch(A, &[]), Scope::All, p).unwrap()
}

/// A module variable as the backend reports it.
fn var(name: impl Into<String>, base: u64, size: u64, read_only: bool) -> ModuleVariable {
    ModuleVariable {
        name: name.into(),
        base,
        size,
        read_only,
    }
}

/// The planned regions as (base, size).
fn spans(plan: &replay_core::SnapshotPlan) -> Vec<(u64, u64)> {
    plan.regions.iter().map(|r| (r.base, r.size)).collect()
}

#[test]
fn capture_then_restore_brings_bytes_back() {
    let e = env();
    e.coarse(0x1000, 4096);
    e.coarse(0x10000, 100);
    e.coarse(0x20000, 3 * MIB + 5);
    let before = e.dev.memory();
    let p = policy();
    let plan = plan_all(&e, &p);
    assert_eq!(plan.regions.len(), 3);
    assert_eq!(plan.captured_bytes, 4096 + 100 + 3 * MIB + 5);
    let mut snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
    let st = snap.stats();
    assert_eq!(st.captured_bytes, plan.captured_bytes);
    assert_eq!(st.captured_regions, 3);
    assert_eq!(st.tier_bytes.device, plan.captured_bytes);
    assert_eq!(st.skipped_regions, 0);

    // The kernel writes everywhere.
    e.dev.write(0x1000, &[0xAA; 4096]);
    e.dev.write(0x10000 + 50, &[1, 2, 3]);
    e.dev.write(0x20000 + 3 * MIB, &[9; 5]);
    assert_ne!(e.dev.memory(), before);
    let rs = snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(rs.restored_bytes, plan.captured_bytes);
    assert_eq!(rs.compared_bytes, 0);
    assert_eq!(e.dev.memory(), before);
    assert_eq!(
        snap.check_scope(&e.clock.wait()).unwrap(),
        ScopeCheck::Clean
    );
}

#[test]
fn capture_and_restore_are_single_batches_timed_on_the_clock() {
    let e = env();
    for i in 0..10u64 {
        e.dev.app_alloc(
            &e.tracker,
            0x1000 * (i + 1),
            256,
            MemoryClass::DEVICE_COARSE,
        );
    }
    e.dev.st.lock().latency = Duration::from_millis(300);
    let p = policy();
    let plan = plan_all(&e, &p);
    let mut snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
    assert_eq!(e.dev.st.lock().copy_batches, 1);
    assert_eq!(e.dev.st.lock().copy_ops.len(), 10);
    let secs = snap.stats().seconds;
    assert!(
        (0.3..0.35).contains(&secs),
        "capture took {secs} s on the clock"
    );
    let rs = snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(e.dev.st.lock().copy_batches, 2);
    assert!((0.3..0.35).contains(&rs.seconds));
}

#[test]
fn plan_all_treats_each_class_per_the_table() {
    let e = env();
    let t = &e.tracker;
    let d = &e.dev;
    d.app_alloc(t, 0x1000, 100, MemoryClass::DEVICE_COARSE);
    d.app_alloc(t, 0x2000, 10, MemoryClass::KERNARG);
    d.app_alloc(t, 0x3000, 20, MemoryClass::FINE_GRAINED);
    d.app_alloc(t, 0x4000, 30, MemoryClass::MANAGED);
    d.app_alloc(t, 0x5000, 40, MemoryClass::PINNED_HOST);
    d.app_alloc(t, 0x6000, 50, MemoryClass::IPC_IMPORTED);
    d.app_alloc(t, 0x7000, 60, MemoryClass::VIRTUAL_MAPPING);
    d.app_alloc(
        t,
        0x8000,
        70,
        MemoryClass::DEVICE_COARSE | MemoryClass::READ_ONLY,
    );
    d.app_alloc(t, 0x9000, 80, MemoryClass::DEVICE_COARSE);
    t.mark_tool_owned(A, 0x9000, 80);
    d.app_alloc(t, 0xA000, 90, MemoryClass::DEVICE_COARSE);
    let p = policy();
    let plan = plan_all(&e, &p);
    let bases: Vec<u64> = plan.regions.iter().map(|r| r.base).collect();
    assert_eq!(bases, vec![0x1000, 0xA000]);
    assert_eq!(plan.tracked_bytes, 190);
    assert_eq!(plan.captured_bytes, 190);
    assert_eq!(plan.scope, Scope::All);
    // Fine, managed, pinned and IPC are untracked by `all`; the mapping counts apart.
    assert_eq!(plan.untracked.bytes, 20 + 30 + 40 + 50);
    assert_eq!(plan.untracked.regions, 4);
    assert_eq!(plan.untracked.vmem_bytes, 60);
    assert_eq!(plan.untracked.vmem_regions, 1);
    assert_eq!(plan.uncapturable, None);
}

#[test]
fn plan_rejects_a_dispatch_of_another_agent() {
    let e = env();
    assert!(e
        .engine
        .plan(&dispatch(B, &[]), Scope::All, &policy())
        .is_err());
}

#[test]
fn module_variables_captured_once_and_filtered() {
    let e = env();
    e.coarse(0x10_0000, 0x1000);
    e.dev.raw_alloc(0x50_0000, 64);
    e.dev.raw_alloc(0x60_0000, 8 * MIB); // large: through the tiers like any region
    e.dev.raw_alloc(0x70_0000 + 0x100_0000, 16);
    *e.mods.0.lock() = Some(Ok(vec![
        var("counter", 0x50_0000, 64, false),
        var("big_table", 0x60_0000, 8 * MIB, false),
        var("consts", 0x170_0000, 16, true),
        var("__hip_cuid_abc123", 0x170_0008, 1, false),
        // Inside the tracked region: not captured twice.
        var("inside", 0x10_0010, 32, false),
        // A duplicate report of the same variable.
        var("counter_again", 0x50_0000, 64, false),
    ]));
    let p = policy();
    let plan = plan_all(&e, &p);
    let got = spans(&plan);
    assert_eq!(
        got,
        vec![(0x10_0000, 0x1000), (0x50_0000, 64), (0x60_0000, 8 * MIB)]
    );
    assert_eq!(plan.tracked_bytes, 0x1000);
    assert_eq!(plan.captured_bytes, 0x1000 + 64 + 8 * MIB);
    let before = e.dev.memory();
    let mut snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
    e.dev.write(0x50_0000, &[0; 64]);
    e.dev.write(0x60_0000 + 8 * MIB - 4, &[0; 4]);
    snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(e.dev.memory(), before);
}

#[test]
fn neighbouring_variables_of_one_load_are_one_region() {
    let e = env();
    e.dev.raw_alloc(0x50_0000, 0x10_0000);
    // 1000 globals of 8 bytes, 16 bytes apart, in one allocation the backend names (they
    // start on multiples of 256 too); then one in another allocation; then a second load
    // right behind that one.
    let mut vars: Vec<ModuleVariable> = (0..1000)
        .map(|i| var(format!("v{i}"), 0x50_0000 + 16 * i, 8, false))
        .collect();
    let end: u64 = 0x50_0000 + 16 * 999 + 8;
    let lone = end.next_multiple_of(256) + 16;
    vars.push(var("v1000", lone, 8, false));
    vars.push(var("v1001", lone + 8, 8, false));
    e.mods
        .1
        .store(lone + 8, std::sync::atomic::Ordering::Relaxed);
    *e.mods.2.lock() = vec![
        (0x50_0000, end.next_multiple_of(256) - 0x50_0000),
        (lone - 16, 256),
    ];
    vars.reverse(); // the enumeration's order is any
    *e.mods.0.lock() = Some(Ok(vars));
    let p = policy();
    let plan = plan_all(&e, &p);
    let got = spans(&plan);
    assert_eq!(
        got,
        vec![(0x50_0000, end - 0x50_0000), (lone, 8), (lone + 8, 8)],
        "one region per run of one load"
    );
    // The padding between the variables is restored with them (it never changes).
    let before = e.dev.memory();
    let mut snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
    e.dev.write(0x50_0000 + 16 * 500, &[0xff; 8]);
    e.dev.write(lone + 8, &[0xff; 8]);
    snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(e.dev.memory(), before);
}

#[test]
fn variables_meeting_at_a_multiple_of_256_stay_apart() {
    // Another allocation may start at any multiple of 256, even right where a variable
    // ends: a copy across it is refused by the driver (cuMemcpy over two allocations).
    let e = env();
    e.dev.raw_alloc(0x50_0000, 0x10_0000);
    let b = 0x50_0000;
    *e.mods.0.lock() = Some(Ok(vec![
        // Ends 8 bytes short of b + 256; the next starts there.
        var("v0", b + 0xf0, 8, false),
        var("v1", b + 0x100, 8, false),
        // Ends at b + 0x200 exactly; the next starts right behind it.
        var("v2", b + 0x1f8, 8, false),
        var("v3", b + 0x200, 8, false),
        // Padding of 8 bytes, no multiple of 256 inside: one run.
        var("v4", b + 0x210, 8, false),
    ]));
    let plan = plan_all(&e, &policy());
    let got = spans(&plan);
    assert_eq!(
        got,
        vec![(b + 0xf0, 8), (b + 0x100, 0x100), (b + 0x200, 0x18)],
        "no run crosses a multiple of 256"
    );
    // Named as one allocation, they are one run.
    *e.mods.2.lock() = vec![(b, 0x1000)];
    let plan = plan_all(&e, &policy());
    let got = spans(&plan);
    assert_eq!(got, vec![(b + 0xf0, 0x128)], "one allocation, one run");
}

#[test]
fn module_variables_are_enumerated_again_only_when_the_generation_changes() {
    let e = env();
    e.dev.raw_alloc(0x50_0000, 0x1000);
    let count = || e.mods.4.load(std::sync::atomic::Ordering::Relaxed);
    *e.mods.0.lock() = Some(Ok(vec![var("v500000", 0x50_0000, 8, false)]));
    *e.mods.3.lock() = Some(7);
    let p = policy();
    let regions =
        |e: &Env| -> Vec<u64> { plan_all(e, &p).regions.iter().map(|r| r.base).collect() };
    assert_eq!(regions(&e), [0x50_0000]);
    assert_eq!(regions(&e), [0x50_0000]);
    assert_eq!(count(), 1, "the same generation: the view is kept");
    // A load changes the set and the generation: the next plan sees it.
    *e.mods.0.lock() = Some(Ok(vec![
        var("v500000", 0x50_0000, 8, false),
        var("v500800", 0x50_0800, 8, false),
    ]));
    *e.mods.3.lock() = Some(8);
    assert_eq!(regions(&e), [0x50_0000, 0x50_0800]);
    assert_eq!(count(), 2);
    // A backend that cannot tell is asked every time; a failure is never kept.
    *e.mods.3.lock() = None;
    regions(&e);
    regions(&e);
    assert_eq!(count(), 4);
    *e.mods.3.lock() = Some(9);
    *e.mods.0.lock() = Some(Err("code object 3 could not be read".into()));
    assert!(plan_all(&e, &p).uncapturable.is_some());
    *e.mods.0.lock() = Some(Ok(vec![var("v500000", 0x50_0000, 8, false)]));
    assert_eq!(regions(&e), [0x50_0000], "the failure was not kept");
}

#[test]
fn incomplete_module_enumeration_is_uncapturable() {
    let e = env();
    *e.mods.0.lock() = Some(Err("code object 3 could not be read".into()));
    let plan = plan_all(&e, &policy());
    let why = plan.uncapturable.expect("declines");
    assert!(why.contains("code object 3 could not be read"), "{why}");
}

#[test]
fn automatic_budgets_leave_headroom() {
    let e = env_with([Some(GIB), Some(100 * MIB), Some(4 * GIB)]);
    let plan = plan_all(&e, &policy());
    let device = GIB - (GIB / DEVICE_HEADROOM_DIVISOR + DEVICE_HEADROOM_BYTES);
    let pinned = 50 * MIB;
    let pageable = GIB / 2; // half of the host's available memory
    assert_eq!(plan.capacity_bytes, device + pinned + pageable);

    // Explicit budgets, clamped to what the backend has; a missing tier holds nothing.
    let e = env_with([Some(GIB), None, Some(100)]);
    let p = Policy {
        device_tier_bytes: 2 * GIB,
        pinned_tier_bytes: 10,
        pageable_tier_bytes: 1000,
        ..policy()
    };
    assert_eq!(plan_all(&e, &p).capacity_bytes, GIB + 100);
}

#[test]
fn regions_split_across_tiers_within_budgets() {
    let e = env();
    e.coarse(0x1000, 300);
    e.coarse(0x2000, 100);
    let p = Policy {
        device_tier_bytes: 120,
        pinned_tier_bytes: 200,
        pageable_tier_bytes: 1000,
        ..policy()
    };
    let plan = plan_all(&e, &p);
    assert_eq!(plan.capacity_bytes, 1320);
    let before = e.dev.memory();
    let mut snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
    assert_eq!(
        snap.stats().tier_bytes,
        TierBytes {
            device: 120,
            pinned: 200,
            pageable: 80
        }
    );
    // The first region spans device and pinned; the second pinned and pageable.
    assert_eq!(e.dev.st.lock().copy_ops.len(), 4);
    e.dev.write(0x1000, &[0; 300]);
    e.dev.write(0x2000, &[0; 100]);
    snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(e.dev.memory(), before);

    // Without a pinned tier, device then pageable.
    let e = env_with([Some(GIB), None, Some(GIB)]);
    e.coarse(0x1000, 300);
    let p = Policy {
        device_tier_bytes: 100,
        ..policy()
    };
    let plan = plan_all(&e, &p);
    let snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
    assert_eq!(
        snap.stats().tier_bytes,
        TierBytes {
            device: 100,
            pinned: 0,
            pageable: 200
        }
    );
}

#[test]
fn capture_beyond_the_tiers_fails_cleanly() {
    let e = env_with([Some(GIB), None, None]);
    e.coarse(0x1000, 300);
    let p = Policy {
        device_tier_bytes: 100,
        ..policy()
    };
    let plan = plan_all(&e, &p);
    assert_eq!(plan.capacity_bytes, 100);
    let err = capture_err(&e, &plan, &p);
    assert!(err.message.contains("do not fit"), "{err}");
    assert_eq!(e.dev.st.lock().allocs, 0);
}

#[test]
fn pool_reused_across_captures_and_trimmed() {
    let e = env();
    e.coarse(0x1000, 1000);
    let p = policy();
    let plan = plan_all(&e, &p);
    for _ in 0..3 {
        let snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
        drop(snap);
    }
    assert_eq!(e.dev.st.lock().allocs, 1, "the backing block is reused");
    assert_eq!(e.engine.pool_free_bytes(Tier::Device), 1000);
    assert_eq!(e.engine.pooled_peak_bytes(), 1000);

    // A larger snapshot reuses the pooled block and allocates only the rest.
    e.coarse(0x2000, 500);
    let plan = plan_all(&e, &p);
    let snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
    assert_eq!(e.dev.st.lock().allocs, 2);
    assert_eq!(e.engine.pooled_peak_bytes(), 1500);
    drop(snap);

    // Trimmed after the window to the keep limit: the largest block that fits stays.
    let keep = Policy {
        pool_keep_bytes: 1200,
        ..p.clone()
    };
    let snap = e.engine.capture(&plan, &keep, &e.clock.wait()).unwrap();
    drop(snap);
    assert_eq!(e.engine.pool_free_bytes(Tier::Device), 1000);
    assert_eq!(e.dev.st.lock().frees, 1);
    assert_eq!(e.dev.backing_live(), 1);

    // Released at once when the application runs out of memory.
    e.engine.release_pools();
    assert_eq!(e.engine.pooled_bytes(), 0);
    assert_eq!(e.dev.backing_live(), 0);
    assert_eq!(e.engine.pooled_peak_bytes(), 1500);
}

#[test]
fn release_during_a_window_frees_blocks_when_they_return() {
    let e = env();
    e.coarse(0x1000, 1000);
    let p = policy();
    let snap = e.capture_all(&p);
    e.engine.release_pools();
    assert_eq!(
        e.dev.backing_live(),
        1,
        "in use: not freed under the snapshot"
    );
    drop(snap);
    assert_eq!(e.dev.backing_live(), 0);
}

/// After a failed capture, everything allocated is back in the pool and nothing else is held.
fn assert_nothing_leaked(e: &Env) {
    let free: u64 = Tier::ALL.iter().map(|t| e.engine.pool_free_bytes(*t)).sum();
    assert_eq!(
        e.engine.pooled_bytes(),
        free,
        "every block is back in the pool"
    );
    e.engine.release_pools();
    assert_eq!(e.dev.backing_live(), 0);
    let st = e.dev.st.lock();
    assert_eq!(st.allocs, st.frees);
}

#[test]
fn a_tier_that_cannot_allocate_hands_its_share_to_the_next() {
    let e = env();
    e.coarse(0x1000, 300);
    e.dev.st.lock().fail_alloc = Some(Tier::PinnedHost);
    let p = Policy {
        device_tier_bytes: 100,
        pinned_tier_bytes: 100,
        ..policy()
    };
    let snap = e.capture_all(&p);
    let st = snap.stats();
    assert_eq!(
        (
            st.tier_bytes.device,
            st.tier_bytes.pinned,
            st.tier_bytes.pageable
        ),
        (100, 0, 200),
        "the pinned share went to the pageable tier"
    );
}

#[test]
fn capture_out_of_memory_fails_and_leaks_nothing() {
    // No pageable tier: the pinned tier's share has nowhere to go.
    let e = env_with([Some(GIB), Some(GIB), None]);
    e.coarse(0x1000, 300);
    e.dev.st.lock().fail_alloc = Some(Tier::PinnedHost);
    let p = Policy {
        device_tier_bytes: 100,
        ..policy()
    };
    let err = capture_err(&e, &plan_all(&e, &p), &p);
    assert!(err.message.contains("pinned"), "{err}");
    assert!(err.message.contains("no room"), "{err}");
    assert!(err.message.contains("out of memory"), "{err}");
    assert_eq!(e.dev.st.lock().allocs, 1, "the device block was allocated");
    assert_eq!(e.dev.st.lock().copy_batches, 0);
    assert_nothing_leaked(&e);
}

#[test]
fn capture_copy_failure_fails_and_leaks_nothing() {
    let e = env();
    e.coarse(0x1000, 300);
    e.dev.st.lock().fail_next_copies = 1;
    let p = policy();
    let err = capture_err(&e, &plan_all(&e, &p), &p);
    assert!(err.message.contains("injected"), "{err}");
    assert_nothing_leaked(&e);
}

#[test]
fn capture_stuck_fence_is_bounded_and_quarantines_the_backing() {
    let e = env();
    e.coarse(0x1000, 300);
    e.dev.st.lock().stuck = true;
    let p = policy();
    let w = e.clock.wait();
    let err = capture_err(&e, &plan_all(&e, &p), &p);
    assert!(err.message.contains("did not complete"), "{err}");
    assert!(e.clock.now_secs() >= w.timeout.as_secs_f64());
    assert!(e.clock.now_secs() < w.timeout.as_secs_f64() + 0.1);
    assert_eq!(e.dev.st.lock().abandoned, 1);
    // The abandoned copy may still write the block: neither freed nor reused, and accounted.
    assert_eq!(e.engine.quarantined_bytes(), 300);
    e.engine.release_pools();
    assert_eq!(e.dev.backing_live(), 1);
    e.dev.st.lock().stuck = false;
    let _snap = e.engine.capture(&plan_all(&e, &p), &p, &w).unwrap();
    assert_eq!(
        e.dev.st.lock().allocs,
        2,
        "a fresh block, not the quarantined one"
    );
}

#[test]
fn capture_skips_a_region_freed_since_planning() {
    let e = env();
    e.coarse(0x1000, 100);
    e.coarse(0x2000, 100);
    let p = policy();
    let plan = plan_all(&e, &p);
    e.dev.app_free(&e.tracker, 0x2000);
    let snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
    let st = snap.stats();
    assert_eq!(st.skipped_regions, 1);
    assert_eq!(st.captured_regions, 1);
    assert_eq!(st.captured_bytes, 100);
}

#[test]
fn restore_skips_freed_and_reallocated_regions() {
    let e = env();
    e.coarse(0x1000, 100);
    e.coarse(0x2000, 100);
    e.coarse(0x3000, 100);
    let p = policy();
    let mut snap = e.capture_all(&p);
    let kept = e.dev.read(0x3000, 100);
    // Freed: writing there would fail in the fake (no memory).
    e.dev.app_free(&e.tracker, 0x1000);
    // Reallocated at the same base with new content: must not be overwritten.
    e.dev.app_free(&e.tracker, 0x2000);
    e.coarse(0x2000, 100);
    e.dev.write(0x2000, &[0x55; 100]);
    e.dev.write(0x3000, &[0; 100]);
    let rs = snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(rs.restored_bytes, 100);
    assert_eq!(e.dev.read(0x2000, 100), vec![0x55; 100]);
    assert_eq!(e.dev.read(0x3000, 100), kept);
    assert!(e
        .dev
        .st
        .lock()
        .device_writes
        .iter()
        .all(|&(a, _)| a == 0x3000));
}

#[test]
fn restore_failure_names_the_region() {
    let e = env();
    e.coarse(0x1000, 100);
    e.coarse(0x2000, 200);
    let p = policy();
    let mut snap = e.capture_all(&p);
    e.dev.st.lock().fail_copies_at = Some(0x2010);
    let err = snap.restore(&e.clock.wait()).unwrap_err();
    assert_eq!((err.base, err.size), (0x2000, 200));
    assert!(err.message.contains("injected"), "{err}");
}

#[test]
fn restore_rides_over_a_transient_batch_failure() {
    let e = env();
    e.coarse(0x1000, 100);
    e.coarse(0x2000, 200);
    let before = e.dev.memory();
    let p = policy();
    let mut snap = e.capture_all(&p);
    e.dev.write(0x1000, &[0; 100]);
    e.dev.st.lock().fail_next_copies = 1;
    let rs = snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(rs.restored_bytes, 300);
    assert_eq!(e.dev.memory(), before);
}

#[test]
fn restore_stuck_fence_names_the_batch_and_leaks_the_backing() {
    let e = env();
    e.coarse(0x1000, 100);
    let p = policy();
    let mut snap = e.capture_all(&p);
    e.dev.st.lock().stuck = true;
    let err = snap.restore(&e.clock.wait()).unwrap_err();
    assert_eq!((err.base, err.size), (0x1000, 100));
    assert!(err.message.contains("did not complete"), "{err}");
    drop(snap);
    assert_eq!(e.engine.quarantined_bytes(), 100);
    assert_eq!(e.engine.pool_free_bytes(Tier::Device), 0);
}

#[test]
fn dirty_restore_writes_back_only_changed_chunks() {
    let e = env();
    let chunk = 4096;
    e.dev.app_alloc(
        &e.tracker,
        0x10000,
        10 * chunk + 100,
        MemoryClass::DEVICE_COARSE,
    );
    e.coarse(0x100000, 2 * chunk);
    let before = e.dev.memory();
    let p = Policy {
        restore: RestoreMode::Dirty,
        chunk_bytes: chunk,
        device_tier_bytes: 5 * chunk, // a chunk split across tiers too
        ..policy()
    };
    let mut snap = e.capture_all(&p);
    // Untouched: nothing written back.
    let rs = snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(rs.restored_bytes, 0);
    assert_eq!(rs.compared_bytes, 12 * chunk + 100);
    // Chunk 1 and the 100-byte tail of the first region, chunk 0 of the second.
    e.dev.write(0x10000 + chunk + 5, &[0xFF]);
    e.dev.write(0x10000 + 10 * chunk + 99, &[0xFF]);
    e.dev.write(0x100000, &[0xFF; 2]);
    let rs = snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(rs.restored_bytes, chunk + 100 + chunk);
    assert_eq!(e.dev.memory(), before);
}

#[test]
fn dirty_restore_copies_neighbouring_changed_chunks_at_once() {
    let e = env();
    let chunk = 4096;
    e.dev
        .app_alloc(&e.tracker, 0x10000, 16 * chunk, MemoryClass::DEVICE_COARSE);
    let before = e.dev.memory();
    let p = Policy {
        restore: RestoreMode::Dirty,
        chunk_bytes: chunk,
        ..policy()
    };
    let mut snap = e.capture_all(&p);
    // Chunks 2..=9 and 12: two runs, two copies.
    for k in (2..=9).chain([12]) {
        e.dev.write(0x10000 + k * chunk + 7, &[0xFF]);
    }
    let ops_before = e.dev.st.lock().copy_ops.len();
    let rs = snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(rs.restored_bytes, 9 * chunk);
    assert_eq!(e.dev.st.lock().copy_ops.len() - ops_before, 2);
    assert_eq!(e.dev.memory(), before);
}

#[test]
fn arguments_scope_follows_pointers_and_checks_the_rest() {
    let e = env();
    let t = &e.tracker;
    let d = &e.dev;
    d.app_alloc(t, 0x1000, 0x100, MemoryClass::DEVICE_COARSE); // pointed into (not at base)
    d.app_alloc(t, 0x2000, 0x100, MemoryClass::DEVICE_COARSE); // outside the scope
    d.app_alloc(t, 0x3000, 0x100, MemoryClass::FINE_GRAINED); // pointed into: captured
    d.app_alloc(t, 0x4000, 0x100, MemoryClass::MANAGED); // not pointed into
    let p = Policy {
        scope: Scope::Arguments,
        ..policy()
    };
    let disp = dispatch(A, &[0x1040, 42, 0x3000, 0x1000]);
    let plan = e.engine.plan(&disp, Scope::Arguments, &p).unwrap();
    assert_eq!(plan.scope, Scope::Arguments);
    let bases: Vec<u64> = plan.regions.iter().map(|r| r.base).collect();
    assert_eq!(bases, vec![0x1000, 0x3000]);
    assert_eq!(plan.tracked_bytes, 0x200);
    assert_eq!(plan.captured_bytes, 0x200);
    assert_eq!(plan.untracked.bytes, 0x100);
    assert_eq!(plan.untracked.regions, 1);
    assert_eq!(plan.uncapturable, None);

    let before = d.memory();
    let mut snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
    d.write(0x1010, &[0; 16]);
    d.write(0x3010, &[0; 16]);
    assert_eq!(
        snap.check_scope(&e.clock.wait()).unwrap(),
        ScopeCheck::Clean
    );
    snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(d.memory(), before);
    d.write(0x2080, &[0; 1]);
    assert_eq!(
        snap.check_scope(&e.clock.wait()).unwrap(),
        ScopeCheck::Changed { base: 0x2000 }
    );
}

#[test]
fn arguments_into_uncapturable_memory_decline() {
    let e = env();
    let t = &e.tracker;
    e.dev
        .app_alloc(t, 0x1000, 0x100, MemoryClass::DEVICE_COARSE);
    e.dev.app_alloc(t, 0x6000, 0x100, MemoryClass::IPC_IMPORTED);
    e.dev
        .app_alloc(t, 0x7000, 0x100, MemoryClass::VIRTUAL_MAPPING);
    t.record_alloc(B, 0x9000, 0x100, MemoryClass::DEVICE_COARSE);
    let p = policy();
    for (word, what) in [
        (0x6010u64, "IPC"),
        (0x7010, "VIRTUAL_MAPPING"),
        (0x9010, "agent 1"),
    ] {
        let plan = e
            .engine
            .plan(&dispatch(A, &[0x1000, word]), Scope::Arguments, &p)
            .unwrap();
        let why = plan.uncapturable.expect("declines");
        assert!(why.contains(what) && why.contains("offset 8"), "{why}");
    }
    // Excluded memory (the argument block itself) is ignored.
    e.dev.app_alloc(t, 0xA000, 0x100, MemoryClass::KERNARG);
    let plan = e
        .engine
        .plan(&dispatch(A, &[0xA000]), Scope::Arguments, &p)
        .unwrap();
    assert_eq!(plan.uncapturable, None);
    assert!(plan.regions.is_empty());
}

trait NowSecs {
    fn now_secs(&self) -> f64;
}

impl NowSecs for FakeClock {
    fn now_secs(&self) -> f64 {
        replay_core::Clock::now(self).as_secs_f64()
    }
}
