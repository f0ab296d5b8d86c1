//! What arguments reach and what stays live (SPEC §7.1, §7.2, §7.4; issue 11), against the
//! fake device: capturable memory under every scope, memory only the runtime knows, the
//! scope check over fine-grained memory, module variables whose code object was unloaded,
//! and the full-restore fallback of a failed `dirty` digest batch.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::dispatch;
use parking_lot::Mutex;
use replay_core::policy::{Policy, RestoreMode, Scope};
use replay_core::{AgentId, MemoryClass, ScopeCheck, SnapshotPlan, Snapshotter};
use replay_memory::{MemoryEngine, ModuleVariable, ModuleVariables, Tracker};
use replay_mock::double::{FakeClock, FakeDeviceMemory};

const A: AgentId = AgentId(0);
const GIB: u64 = 1 << 30;

/// Module variables with a load generation per variable base; a test "unloads and reloads"
/// a code object by changing it.
#[derive(Default)]
struct Loader {
    vars: Mutex<Vec<ModuleVariable>>,
    loads: Mutex<HashMap<u64, u64>>,
}

impl ModuleVariables for Loader {
    fn enumerate(&self, _agent: AgentId) -> Result<Vec<ModuleVariable>, String> {
        Ok(self.vars.lock().clone())
    }

    fn load_generation(&self, _agent: AgentId, addr: u64) -> Option<u64> {
        let vars = self.vars.lock();
        let v = vars
            .iter()
            .find(|v| v.base <= addr && addr < v.base + v.size)?;
        self.loads.lock().get(&v.base).copied()
    }
}

struct Env {
    clock: Arc<FakeClock>,
    tracker: Arc<Tracker>,
    dev: Arc<FakeDeviceMemory>,
    loader: Arc<Loader>,
    engine: MemoryEngine,
}

fn env() -> Env {
    let clock = Arc::new(FakeClock::default());
    let tracker = Arc::new(Tracker::new());
    let dev = Arc::new(FakeDeviceMemory::new(
        A,
        clock.clone(),
        [Some(GIB), Some(GIB), Some(GIB)],
    ));
    let loader = Arc::new(Loader::default());
    let engine = MemoryEngine::new(A, tracker.clone(), dev.clone(), loader.clone())
        .with_digest_key(replay_core::digest::key_from_seed(11))
        .with_host_available_bytes(GIB);
    Env {
        clock,
        tracker,
        dev,
        loader,
        engine,
    }
}

fn policy() -> Policy {
    Policy {
        pool_keep_bytes: GIB,
        ..Policy::default()
    }
}

impl Env {
    fn plan(&self, scope: Scope, words: &[u64]) -> SnapshotPlan {
        self.engine
            .plan(&dispatch(A, words), scope, &policy())
            .unwrap()
    }

    fn bases(plan: &SnapshotPlan) -> Vec<u64> {
        plan.regions.iter().map(|r| r.base).collect()
    }
}

#[test]
fn every_scope_captures_capturable_memory_an_argument_reaches() {
    // Issue 11 item 1: under `all` only coarse memory was captured.
    for class in [
        MemoryClass::FINE_GRAINED,
        MemoryClass::MANAGED,
        MemoryClass::PINNED_HOST,
    ] {
        let e = env();
        e.dev
            .app_alloc(&e.tracker, 0x1000, 256, MemoryClass::DEVICE_COARSE);
        e.dev.app_alloc(&e.tracker, 0x5000, 256, class);
        e.dev.app_alloc(&e.tracker, 0x6000, 256, class); // not reached
        for scope in [Scope::All, Scope::Arguments] {
            let plan = e.plan(scope, &[0x5010]);
            assert!(
                Env::bases(&plan).contains(&0x5000),
                "{class:?} {scope:?}: {plan:?}"
            );
            assert!(!Env::bases(&plan).contains(&0x6000), "{class:?} {scope:?}");
            assert_eq!(plan.untracked.regions, 1, "only the one not reached");
            assert_eq!(plan.uncapturable, None);
        }
        let p = policy();
        let plan = e.plan(Scope::All, &[0x5010]);
        let before = e.dev.memory();
        let mut snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
        e.dev.write(0x5000, &[0xAB; 256]);
        snap.restore(&e.clock.wait()).unwrap();
        assert_eq!(e.dev.memory(), before, "{class:?}");
    }
}

#[test]
fn memory_only_the_runtime_knows_is_captured_or_declined() {
    // Issue 11 item 2: a word the tracker does not know was skipped in silence.
    let e = env();
    e.dev
        .app_alloc(&e.tracker, 0x1000, 256, MemoryClass::DEVICE_COARSE);
    e.dev
        .runtime_alloc(0x9000, 512, MemoryClass::FINE_GRAINED, Some(A));
    e.dev
        .runtime_alloc(0xA000, 1024, MemoryClass::DEVICE_COARSE, Some(A));
    e.dev
        .runtime_alloc(0xB000, 64, MemoryClass::FINE_GRAINED, Some(AgentId(3)));
    e.dev
        .runtime_alloc(0xC000, 64, MemoryClass::PINNED_HOST, Some(AgentId(3)));
    e.dev
        .runtime_alloc(0xD000, 64, MemoryClass::KERNARG, Some(A));

    for scope in [Scope::All, Scope::Arguments] {
        // Capturable: captured, not counted as untracked.
        let plan = e.plan(scope, &[0x9008, 0x9100, 0xC000, 0xD000, 0x4242]);
        assert_eq!(plan.uncapturable, None, "{scope:?}");
        let bases = Env::bases(&plan);
        assert!(
            bases.contains(&0x9000) && bases.contains(&0xC000),
            "{scope:?}: {bases:x?}"
        );
        assert!(!bases.contains(&0xD000), "kernarg memory is excluded");
        assert_eq!(plan.untracked.regions, 0, "{scope:?}");
        // Coarse device memory the tracker never saw: declined and counted, once.
        let plan = e.plan(scope, &[0xA000, 0xA010]);
        let why = plan.uncapturable.expect("declined");
        assert!(why.contains("tracker never saw"), "{why}");
        assert_eq!((plan.untracked.regions, plan.untracked.bytes), (1, 1024));
        // Another agent's fine-grained device memory: peer memory.
        let plan = e.plan(scope, &[0xB000]);
        assert!(plan.uncapturable.expect("declined").contains("peer"));
    }

    // The captured runtime memory is restored, and skipped once the runtime released it.
    let p = policy();
    let plan = e.plan(Scope::Arguments, &[0x1000, 0x9008]);
    let mut snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
    let kept = e.dev.read(0x9000, 512);
    e.dev.write(0x9000, &[1; 512]);
    snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(e.dev.read(0x9000, 512), kept);
    e.dev.runtime_free(0x9000);
    e.dev.raw_alloc(0x9000, 512); // someone else's now, behind the tracker's back
    e.dev.write(0x9000, &[7; 512]);
    snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(e.dev.read(0x9000, 512), vec![7; 512], "not written");

    // A failed query declines: the word may point at memory the kernel writes.
    e.dev.st.lock().fail_queries = true;
    let plan = e.plan(Scope::All, &[0x4242]);
    assert!(plan.uncapturable.expect("declined").contains("could not"));
}

#[test]
fn words_into_module_variables_are_not_asked_of_the_runtime() {
    let e = env();
    e.dev.raw_alloc(0x7000, 128);
    e.loader.vars.lock().push(ModuleVariable {
        name: "g".into(),
        base: 0x7000,
        size: 128,
        read_only: false,
    });
    e.loader.loads.lock().insert(0x7000, 1);
    // The runtime would call it untracked coarse memory.
    e.dev.st.lock().pointers.push(replay_core::PointerInfo {
        base: 0x7000,
        size: 128,
        class: MemoryClass::DEVICE_COARSE,
        owner: Some(A),
    });
    let plan = e.plan(Scope::Arguments, &[0x7040]);
    assert_eq!(plan.uncapturable, None);
    assert_eq!(Env::bases(&plan), vec![0x7000]);
    assert!(e.dev.st.lock().queries.is_empty());
}

#[test]
fn the_scope_check_watches_fine_grained_memory_outside_the_scope() {
    // Issue 11 item 3: only coarse regions outside the scope were watched, so a write through
    // a pointer stored in device memory into fine-grained memory went unseen.
    {
        let class = MemoryClass::FINE_GRAINED;
        let e = env();
        e.dev
            .app_alloc(&e.tracker, 0x1000, 256, MemoryClass::DEVICE_COARSE);
        e.dev.app_alloc(&e.tracker, 0x5000, 256, class);
        let p = policy();
        let plan = e.plan(Scope::Arguments, &[0x1000]);
        let mut snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
        assert_eq!(
            snap.check_scope(&e.clock.wait()).unwrap(),
            ScopeCheck::Clean
        );
        e.dev.write(0x5010, &[9]);
        assert_eq!(
            snap.check_scope(&e.clock.wait()).unwrap(),
            ScopeCheck::Changed { base: 0x5000 },
            "{class:?}"
        );
    }
}

#[test]
fn a_module_variable_whose_code_object_was_unloaded_is_not_restored() {
    // Issue 11 item 7: module variables were never re-checked, so a restore after an unload
    // wrote whatever the memory had become.
    let e = env();
    for (base, name) in [(0x7000, "a"), (0x8000, "b")] {
        e.dev.raw_alloc(base, 128);
        e.loader.vars.lock().push(ModuleVariable {
            name: name.into(),
            base,
            size: 128,
            read_only: false,
        });
    }
    e.loader.loads.lock().extend([(0x7000, 1), (0x8000, 2)]);
    let p = policy();
    let plan = e.plan(Scope::All, &[]);
    assert_eq!(Env::bases(&plan), vec![0x7000, 0x8000]);
    let mut snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
    let kept = e.dev.read(0x8000, 128);
    // Code object 1 is unloaded and another loaded at the same address (a new load).
    e.loader.loads.lock().insert(0x7000, 3);
    e.dev.write(0x7000, &[0x42; 128]);
    e.dev.write(0x8000, &[0; 128]);
    snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(e.dev.read(0x7000, 128), vec![0x42; 128], "not written");
    assert_eq!(e.dev.read(0x8000, 128), kept, "still loaded: restored");
    // Unloaded with nothing in its place: skipped too.
    e.loader.loads.lock().remove(&0x8000);
    e.dev.write(0x8000, &[5; 128]);
    snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(e.dev.read(0x8000, 128), vec![5; 128]);
}

#[test]
fn a_failed_dirty_digest_batch_restores_in_full() {
    // Issue 11: the failure aborted the process, though memory was intact.
    let e = env();
    e.dev
        .app_alloc(&e.tracker, 0x10000, 4 * 4096, MemoryClass::DEVICE_COARSE);
    let before = e.dev.memory();
    let p = Policy {
        restore: RestoreMode::Dirty,
        chunk_bytes: 4096,
        ..policy()
    };
    let plan = e.plan(Scope::All, &[]);
    let mut snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
    e.dev.write(0x10000 + 4096, &[0xFF; 10]);
    e.dev.st.lock().fail_next_digests = 1;
    let rs = snap
        .restore(&e.clock.wait())
        .expect("a full restore instead");
    assert_eq!(rs.restored_bytes, 4 * 4096, "every captured byte");
    assert_eq!(rs.compared_bytes, 0, "nothing was compared");
    assert_eq!(e.dev.memory(), before);
    // The next restore is `dirty` again.
    e.dev.write(0x10000, &[0xFF; 10]);
    let rs = snap.restore(&e.clock.wait()).unwrap();
    assert_eq!(rs.restored_bytes, 4096);
    assert_eq!(e.dev.memory(), before);
}

#[test]
fn host_resident_memory_no_argument_reaches_is_not_watched() {
    // A host thread writing pinned, registered or managed memory during a window (a loader's
    // pin-memory thread) truncated unrelated kernels `write_outside_scope` and then forced
    // scope `all` on them; and all of it was digested every pass.
    for class in [
        MemoryClass::PINNED_HOST,
        MemoryClass::MANAGED,
        MemoryClass::PINNED_HOST | MemoryClass::FINE_GRAINED,
    ] {
        for scope in [Scope::Arguments, Scope::All] {
            let e = env();
            e.dev
                .app_alloc(&e.tracker, 0x1000, 256, MemoryClass::DEVICE_COARSE);
            e.dev.app_alloc(&e.tracker, 0x5000, 256, class);
            let kept = e.dev.read(0x1000, 1);
            let p = policy();
            let plan = e.plan(scope, &[0x1000]);
            let mut snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
            // The host writes it between two passes; the kernel wrote its argument.
            e.dev.write(0x5010, &[9]);
            e.dev.write(0x1000, &[7]);
            assert_eq!(
                snap.check_scope(&e.clock.wait()).unwrap(),
                ScopeCheck::Clean,
                "{class:?} under {scope:?}"
            );
            snap.restore(&e.clock.wait()).unwrap();
            assert_eq!(e.dev.read(0x5010, 1), vec![9], "the host's write stays");
            assert_eq!(e.dev.read(0x1000, 1), kept, "the kernel's write is undone");
        }
    }
}

#[test]
fn host_resident_memory_an_argument_reaches_is_captured_and_restored() {
    for class in [MemoryClass::PINNED_HOST, MemoryClass::MANAGED] {
        let e = env();
        e.dev.app_alloc(&e.tracker, 0x5000, 256, class);
        let before = e.dev.read(0x5000, 256);
        let p = policy();
        let plan = e.plan(Scope::Arguments, &[0x5000]);
        assert_eq!(Env::bases(&plan), vec![0x5000], "{class:?}");
        let mut snap = e.engine.capture(&plan, &p, &e.clock.wait()).unwrap();
        e.dev.write(0x5010, &[9]);
        snap.restore(&e.clock.wait()).unwrap();
        assert_eq!(e.dev.read(0x5000, 256), before, "{class:?}");
    }
}
