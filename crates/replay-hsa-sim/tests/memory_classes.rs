//! `replay-hsa` and the memory the snapshot must see (SPEC §7.1, §7.2, §6 step 4), on the
//! simulated runtime: host memory recorded for the GPU agents (pinned pools, locked memory),
//! the runtime's answer about memory the tracker never saw (`hsa_amd_pointer_info`), argument
//! blocks longer than 256 bytes, and copies and fills started while a window is open.
//!
//! The backend and the service are process-wide, so the tests of this file run one at a time
//! (`SERIAL`) and share one scripted tool (`replay_mock::double`) that each test resets.

// Not every shared helper is used by every test file.
#[allow(dead_code)]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use replay_core::{
    DeviceMemory, MemoryClass, Outcome, OutcomeRecord, Policy, ReplayService, Scope,
};
use replay_hsa::sys;
use replay_hsa_sim::{PoolKind, SimConfig, SimHsa};
use replay_mock::double::ScriptedTool;

use common::*;

struct World {
    service: Arc<ReplayService>,
    /// Its hook: [`watching`], with a test's own PASS ENTER step.
    tool: Arc<ScriptedTool>,
    watch: Arc<Watch>,
    records: Arc<Mutex<Vec<OutcomeRecord>>>,
}

fn policy(scope: Scope) -> Policy {
    Policy {
        drain_timeout: Duration::from_secs(5),
        pass_timeout: Duration::from_secs(5),
        scope,
        ..Policy::default()
    }
}

fn world(scope: Scope) -> (&'static World, MutexGuard<'static, ()>) {
    static SERIAL: Mutex<()> = Mutex::new(());
    static WORLD: OnceLock<World> = OnceLock::new();
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = WORLD.get_or_init(|| {
        let tool = scripted_tool();
        let service = install_service(policy(Scope::All), tool.clone());
        let records = Arc::new(Mutex::new(Vec::new()));
        let sink = records.clone();
        service.set_outcome_sink(Some(Arc::new(move |r: &OutcomeRecord| {
            sink.lock().unwrap().push(r.clone())
        })));
        World {
            service,
            tool,
            watch: Arc::default(),
            records,
        }
    });
    w.service.set_policy(policy(scope)).unwrap();
    w.tool.reset(no_passes());
    w.watch.reset();
    w.tool.set_hook(Some(watching(w.watch.clone(), |_| {})));
    w.records.lock().unwrap().clear();
    (w, guard)
}

impl World {
    /// The one outcome record of the test's dispatch.
    fn record(&self) -> OutcomeRecord {
        let r = self.records.lock().unwrap();
        assert_eq!(r.len(), 1, "{r:?}");
        r[0].clone()
    }
}

/// Runs the `rmw` kernel on the `u64` at `target` (its kernargs: `args`) on GPU 0 with four
/// passes; the outcome record.
fn run_rmw(w: &World, sim: &SimHsa, api: &Api, target: *mut u64, args: *mut u8) -> OutcomeRecord {
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(sim, runs.clone(), Duration::ZERO);
    let q = api.queue(sim.gpu_agents()[0]);
    w.tool.set_passes(Some(4));
    w.watch.addr.store(target as u64, Ordering::SeqCst);
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    assert_eq!(api.wait_zero(done), 0);
    api.destroy(q);
    w.record()
}

fn assert_replayed(w: &World, r: &OutcomeRecord, init: u64, target: *const u64) {
    assert_eq!(
        (r.outcome, r.executed_passes),
        (Outcome::Replayed, 4),
        "{r:?}"
    );
    assert_eq!(
        *w.watch.seen.lock().unwrap(),
        vec![init; 4],
        "every pass saw the same input"
    );
    assert_eq!(read(target), rmw(init), "memory equals one execution");
}

/// Kernel arguments `(target)` from the CPU's kernarg pool.
fn args_for(sim: &SimHsa, api: &Api, target: *mut u8) -> *mut u8 {
    let args = api.alloc(sim.pool(0, PoolKind::Kernarg), 64);
    // SAFETY: a fresh simulated allocation of 64 bytes, host memory.
    unsafe { args.cast::<u64>().write(target as u64) };
    args
}

fn gpu_id(sim: &SimHsa, gpu: usize) -> replay_core::AgentId {
    let h = sim.gpu_agents()[gpu].handle;
    replay_hsa::backend()
        .agents
        .get(h, || Some(sys::HSA_DEVICE_TYPE_GPU))
        .id
}

#[test]
fn pinned_host_memory_an_argument_points_into_is_captured() {
    let (w, _g) = world(Scope::Arguments);
    w.service.start().unwrap();
    let (sim, api) = sim();
    let host = api.alloc(sim.pool(0, PoolKind::HostFine), 64);
    // SAFETY: a fresh host-visible simulated allocation.
    unsafe { host.cast::<u64>().write_volatile(5) };
    let args = args_for(&sim, &api, host);
    let r = run_rmw(w, &sim, &api, host.cast(), args);
    assert_replayed(w, &r, 5, host.cast());
    assert_eq!((r.captured_regions, r.captured_bytes), (1, 64), "{r:?}");
    w.service.stop().unwrap();
}

#[test]
fn host_memory_is_recorded_for_every_gpu_and_its_free_forgets_it_everywhere() {
    let (_w, _g) = world(Scope::All);
    let (sim, api) = sim();
    let host = api.alloc(sim.pool(0, PoolKind::HostFine), 4096);
    let tracker = &replay_hsa::backend().tracker;
    for gpu in 0..2 {
        let r = tracker
            .lookup(gpu_id(&sim, gpu), host as u64 + 8)
            .unwrap_or_else(|| panic!("host memory is in GPU {gpu}'s inventory"));
        assert_eq!(
            (r.base, r.size, r.class),
            (
                host as u64,
                4096,
                MemoryClass::PINNED_HOST | MemoryClass::FINE_GRAINED
            )
        );
    }
    api.free(host);
    assert_eq!(
        tracker.lookup_any(host as u64),
        None,
        "forgotten everywhere"
    );
}

#[test]
fn locked_host_memory_is_captured_and_its_unlock_forgets_it() {
    let (w, _g) = world(Scope::Arguments);
    w.service.start().unwrap();
    let (sim, api) = sim();
    // Host memory the application owns, then locked for every agent.
    let mut block = vec![0u64; 64].into_boxed_slice();
    block[0] = 7;
    let host = block.as_mut_ptr().cast::<u8>();
    let at = api.lock(host, 512);
    let tracker = &replay_hsa::backend().tracker;
    let r = tracker
        .lookup(gpu_id(&sim, 0), at as u64)
        .expect("recorded");
    assert_eq!((r.size, r.class), (512, MemoryClass::PINNED_HOST));
    let args = args_for(&sim, &api, at);
    let r = run_rmw(w, &sim, &api, at.cast(), args);
    assert_replayed(w, &r, 7, at.cast());
    api.unlock(host);
    assert_eq!(
        tracker.lookup_any(at as u64),
        None,
        "the unlock is recorded"
    );
    assert_eq!(block[0], rmw(7));
    // Locked for GPU 1 alone: recorded for GPU 1 alone.
    let mut gpu1 = [sim.gpu_agents()[1]];
    let mut at: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: the entry's contract: a one-agent list, a valid out pointer, live host memory.
    let st = unsafe { (api.memory_lock)(host.cast(), 512, gpu1.as_mut_ptr(), 1, &mut at) };
    assert_eq!(st, sys::HSA_STATUS_SUCCESS);
    assert!(tracker.lookup(gpu_id(&sim, 1), at as u64).is_some());
    assert_eq!(tracker.lookup(gpu_id(&sim, 0), at as u64), None);
    api.unlock(host);
    assert_eq!(tracker.lookup_any(at as u64), None);
    w.service.stop().unwrap();
}

#[test]
fn ipc_imported_memory_is_recorded_as_uncapturable_and_declines() {
    let (w, _g) = world(Scope::Arguments);
    w.service.start().unwrap();
    let (sim, api) = sim();
    let exported = api.alloc(sim.pool(1, PoolKind::DeviceCoarse), 64);
    let imported = api.ipc_import(exported, 64);
    let tracker = &replay_hsa::backend().tracker;
    let r = tracker
        .lookup(gpu_id(&sim, 0), imported as u64)
        .expect("recorded");
    assert_eq!(r.class, MemoryClass::IPC_IMPORTED);
    // SAFETY: a live simulated allocation of 64 bytes, host memory.
    unsafe { imported.cast::<u64>().write_volatile(2) };
    let args = args_for(&sim, &api, imported);
    let r = run_rmw(w, &sim, &api, imported.cast(), args);
    assert_eq!(r.outcome, Outcome::Declined, "{r:?}");
    assert_eq!(r.reason.as_str(), "untracked_memory", "{r:?}");
    assert_eq!(read(imported.cast()), rmw(2), "ran once");
    w.service.stop().unwrap();
}

/// Issue 24 (HSA): memory this process exported to others (`hsa_amd_ipc_memory_create`) is
/// written by them whenever they like: a restore would undo their writes. Its allocation is
/// marked shared, so a kernel whose argument points into it declines instead of replaying.
#[test]
fn memory_exported_through_ipc_is_never_captured_and_declines() {
    let (w, _g) = world(Scope::Arguments);
    w.service.start().unwrap();
    let (sim, api) = sim();
    let exported = api.alloc(sim.pool(0, PoolKind::DeviceCoarse), 64);
    let tracker = &replay_hsa::backend().tracker;
    let before = tracker
        .lookup(gpu_id(&sim, 0), exported as u64)
        .expect("recorded");
    assert!(!before.class.contains(MemoryClass::IPC_IMPORTED));
    // Exported (and, the simulator being one process, attached as a peer would).
    let _peer = api.ipc_import(exported, 64);
    let r = tracker
        .lookup(gpu_id(&sim, 0), exported as u64)
        .expect("still recorded");
    assert!(r.class.contains(MemoryClass::IPC_IMPORTED), "{:?}", r.class);
    // SAFETY: a live simulated allocation of 64 bytes, host memory.
    unsafe { exported.cast::<u64>().write_volatile(3) };
    let args = args_for(&sim, &api, exported);
    let r = run_rmw(w, &sim, &api, exported.cast(), args);
    assert_eq!(r.outcome, Outcome::Declined, "{r:?}");
    assert_eq!(r.reason.as_str(), "untracked_memory", "{r:?}");
    assert_eq!(read(exported.cast()), rmw(3), "ran once");
    w.service.stop().unwrap();
}

#[test]
fn query_pointer_answers_for_memory_the_tracker_never_saw() {
    let (_w, _g) = world(Scope::All);
    let mut sim = SimHsa::new(SimConfig::default());
    // The runtime's own entries, before `OnLoad`: nothing the tool will ever see.
    let raw = Api::new(&sim);
    let own = raw.alloc(sim.pool(0, PoolKind::DeviceCoarse), 128);
    let fine = raw.alloc(sim.pool(0, PoolKind::DeviceFine), 64);
    let peer = raw.alloc(sim.pool(1, PoolKind::DeviceCoarse), 64);
    let host = raw.alloc(sim.pool(0, PoolKind::HostFine), 64);
    let kernarg = raw.alloc(sim.pool(0, PoolKind::Kernarg), 64);
    let imported = raw.ipc_import(own, 128);
    let mut block = vec![0u64; 32].into_boxed_slice();
    let locked = raw.lock(block.as_mut_ptr().cast(), 256);
    let pageable = Box::new([0u64; 8]);
    // SAFETY: the sim's table, alive, not used by other threads during the call.
    assert!(unsafe { replay_hsa::on_load(sim.table().cast(), 1, 0, std::ptr::null()) });
    let tracker = &replay_hsa::backend().tracker;
    for p in [own, fine, peer, host, kernarg, imported, locked] {
        assert_eq!(
            tracker.lookup_any(p as u64),
            None,
            "the tracker never saw {p:p}"
        );
    }
    let o = replay_hsa::backend().originals().unwrap();
    let gpu0 = replay_hsa::backend()
        .agents
        .get(sim.gpu_agents()[0].handle, || {
            Some(sys::HSA_DEVICE_TYPE_GPU)
        });
    let mem = replay_hsa::memory::HsaMemory::new(gpu0, o.clone(), o.queue.unwrap());
    let ask = |p: *const u8, off: u64| {
        mem.query_pointer(p as u64 + off)
            .unwrap()
            .map(|i| (i.base, i.size, i.class, i.owner))
    };
    let (g0, g1) = (Some(gpu_id(&sim, 0)), Some(gpu_id(&sim, 1)));
    use MemoryClass as M;
    let cases = [
        ("own coarse", ask(own, 8), (own, 128, M::DEVICE_COARSE, g0)),
        ("own fine", ask(fine, 0), (fine, 64, M::FINE_GRAINED, g0)),
        (
            "peer",
            ask(peer, 16),
            (peer, 64, M::PEER | M::DEVICE_COARSE, g1),
        ),
        (
            "host pool",
            ask(host, 0),
            (host, 64, M::PINNED_HOST | M::FINE_GRAINED, None),
        ),
        ("kernarg", ask(kernarg, 0), (kernarg, 64, M::KERNARG, None)),
        (
            "ipc",
            ask(imported, 8),
            (imported, 128, M::IPC_IMPORTED, g0),
        ),
        (
            "locked",
            ask(locked, 8),
            (locked, 256, M::PINNED_HOST, None),
        ),
    ];
    for (what, got, (base, size, class, owner)) in cases {
        assert_eq!(got, Some((base as u64, size, class, owner)), "{what}");
    }
    assert_eq!(
        ask(pageable.as_ptr().cast(), 0),
        None,
        "pageable host memory"
    );
    // A runtime that cannot answer is an error, never "nothing there".
    let f = sim.inject(
        replay_hsa_sim::SimFault::PointerInfoFails,
        replay_hsa_sim::FaultMode::Once,
    );
    let e = mem.query_pointer(own as u64).unwrap_err();
    assert!(e.message.contains("hsa_amd_pointer_info"), "{e}");
    sim.clear(f);
    raw.unlock(block.as_mut_ptr().cast());
}

/// A kernel whose one pointer argument sits at byte `OFFSET` of its argument block.
const OFFSET: usize = 264;

#[test]
fn a_pointer_argument_past_byte_256_is_in_the_arguments_scope() {
    let (w, _g) = world(Scope::Arguments);
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let counter = runs.clone();
    let body: replay_hsa_sim::KernelFn = Arc::new(move |d| {
        let p = d.arg(OFFSET as u64 / 8)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, rmw(v))?;
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    sim.load_module(0, &[], &[("wide", body)]);
    let k = sim.kernel_object("wide").unwrap();
    sim.set_kernarg_segment_size(k, OFFSET as u32 + 8);
    let buf = api
        .alloc(sim.pool(0, PoolKind::DeviceCoarse), 64)
        .cast::<u64>();
    // A block longer than the segment: a word past the segment's end is not an argument (it
    // points into IPC memory, which would decline).
    let imported = api.ipc_import(api.alloc(sim.pool(0, PoolKind::DeviceCoarse), 64), 64);
    let args = api.alloc(sim.pool(0, PoolKind::Kernarg), 1024);
    // SAFETY: fresh simulated allocations, host memory.
    unsafe {
        buf.write_volatile(5);
        args.add(OFFSET).cast::<u64>().write(buf as u64);
        args.add(512).cast::<u64>().write(imported as u64);
    }
    let q = api.queue(sim.gpu_agents()[0]);
    w.tool.set_passes(Some(4));
    w.watch.addr.store(buf as u64, Ordering::SeqCst);
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    assert_eq!(api.wait_zero(done), 0);
    api.destroy(q);
    let r = w.record();
    assert_eq!(r.kernel, "wide");
    assert_replayed(w, &r, 5, buf);
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    assert_eq!((r.captured_regions, r.captured_bytes), (1, 64), "{r:?}");
    w.service.stop().unwrap();
}

/// How the other thread writes the captured buffer while the window is open.
#[derive(Debug, Clone, Copy)]
enum Write {
    AsyncCopy,
    SyncCopy,
    Fill,
}

/// A write into a buffer the window captures, started from another thread during the first
/// pass: it must land once, after the window, and no restore may revert it.
fn a_write_during_the_window_lands_once_after_it(how: Write) {
    let (w, _g) = world(Scope::All);
    w.service.start().unwrap();
    let (sim, api) = sim();
    let (buf, args) = buffer_and_args(&sim, &api, 0, 5);
    let target = api.alloc(sim.pool(0, PoolKind::DeviceCoarse), 64);
    let src = api.alloc(sim.pool(0, PoolKind::HostFine), 64);
    // SAFETY: fresh host-visible simulated allocations.
    unsafe {
        target.cast::<u64>().write_volatile(1);
        src.cast::<u64>().write_volatile(99);
    }
    let done = api.signal(1);
    let landed = Arc::new(AtomicBool::new(false));
    let thread = Arc::new(Mutex::new(None));
    let (t, s, gpu) = (target as usize, src as usize, sim.gpu_agents()[0]);
    let (flag, slot) = (landed.clone(), thread.clone());
    w.tool.set_hook(Some(watching(w.watch.clone(), move |pass| {
        if pass != 0 {
            return;
        }
        let mine = flag.clone();
        let handle = std::thread::spawn(move || {
            let (t, s) = (t as *mut u8, s as *const u8);
            match how {
                Write::AsyncCopy => {
                    let ready = api.signal(0);
                    api.copy_after(gpu, t, s, 8, ready, done);
                    assert_eq!(api.wait_zero(done), 0);
                }
                Write::SyncCopy => api.copy_now(t, s, 8),
                Write::Fill => api.fill(t, 99, 2),
            }
            mine.store(true, Ordering::SeqCst);
        });
        *slot.lock().unwrap() = Some(handle);
        // Give an ungated write every chance to land inside the window (bounded; a gated one
        // waits for the window, so this wait runs out).
        let until = Instant::now() + Duration::from_millis(300);
        while !flag.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
    })));
    let r = run_rmw(w, &sim, &api, buf, args);
    assert_eq!(
        (r.outcome, r.executed_passes),
        (Outcome::Replayed, 4),
        "{r:?}"
    );
    let handle = thread.lock().unwrap().take().expect("the writer started");
    handle.join().unwrap();
    assert!(landed.load(Ordering::SeqCst));
    let want = match how {
        Write::Fill => (99 << 32) | 99,
        _ => 99,
    };
    assert_eq!(
        read(target.cast()),
        want,
        "{how:?}: the write is not reverted"
    );
    assert_eq!(read(buf), rmw(5), "memory equals one execution");
    if let Write::AsyncCopy = how {
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(api.load(done), 0, "the copy completed once");
    }
    w.service.stop().unwrap();
}

#[test]
fn an_async_copy_started_during_the_window_lands_once_after_it() {
    a_write_during_the_window_lands_once_after_it(Write::AsyncCopy);
}

#[test]
fn a_synchronous_copy_started_during_the_window_lands_once_after_it() {
    a_write_during_the_window_lands_once_after_it(Write::SyncCopy);
}

#[test]
fn a_fill_started_during_the_window_lands_once_after_it() {
    a_write_during_the_window_lands_once_after_it(Write::Fill);
}

#[test]
fn a_pending_copy_into_host_memory_holds_off_every_gpu_window() {
    let (w, _g) = world(Scope::Arguments);
    w.service
        .set_policy(Policy {
            drain_timeout: Duration::from_millis(200),
            ..policy(Scope::Arguments)
        })
        .unwrap();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let host = api.alloc(sim.pool(0, PoolKind::HostFine), 64);
    let src = api.alloc(sim.pool(0, PoolKind::HostFine), 64);
    // SAFETY: fresh host-visible simulated allocations.
    unsafe {
        host.cast::<u64>().write_volatile(5);
        src.cast::<u64>().write_volatile(99);
    }
    // A host-to-host copy into the buffer, waiting on a signal nobody has released yet: the
    // CPU agent is the only agent it names, yet a GPU window captures that buffer.
    let (ready, copied) = (api.signal(1), api.signal(1));
    api.copy_after(sim.cpu_agent(), host, src, 8, ready, copied);
    let args = args_for(&sim, &api, host);
    let r = run_rmw(w, &sim, &api, host.cast(), args);
    assert_eq!(
        (r.outcome, r.reason.as_str()),
        (Outcome::Declined, "copy_fence_stuck"),
        "{r:?}"
    );
    assert_eq!(read(host.cast()), rmw(5), "the kernel ran once");
    api.store(ready, 0);
    assert_eq!(api.wait_zero(copied), 0);
    assert_eq!(read(host.cast()), 99);
    w.service.stop().unwrap();
}
