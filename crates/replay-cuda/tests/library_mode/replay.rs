//! Replays over the fake driver: every allocation class tracked, every scope and restore mode
//! leaving memory as one execution would, module globals, a write outside the scope, a busy
//! stream; and a window beside another thread's graph capture or copy, which it must leave
//! valid and must not undo.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase};
use replay_core::{Digest128, MemoryClass, Outcome, Policy, Reason, RestoreMode, Scope};
use replay_cuda::{AllocKind, ArgBlock, DevicePtr, LaunchConfig, QueueKind};
use replay_memory::ModuleVariables;
use replay_mock::double::at;

use crate::harness::{image, launch_on, pattern, rmw_args, rmw_host, setup, WAIT};

#[test]
fn the_backend_over_a_fake_driver() {
    let Some((_serial, cx, tracker)) = setup() else {
        return;
    };
    let backend = Arc::clone(&cx.backend);
    assert_eq!(backend.device().info().name, "Fake CUDA device");
    assert_eq!(backend.device().info().compute_capability, (9, 0));
    let module = backend.modules().load(&image(), "fake.cubin").unwrap();
    let mem = backend.memory();
    let agent = backend.agent_id();

    // Every allocation class is tracked, and a free is recorded.
    let alloc = backend.allocator();
    let q = backend.create_queue(QueueKind::Compute).unwrap();
    {
        let d = alloc.alloc_device(4096).unwrap();
        let m = alloc.alloc_managed(4096).unwrap();
        let p = alloc.alloc_pinned_host(4096).unwrap();
        let s = alloc.alloc_async(4096, &q).unwrap();
        let v = alloc.alloc_virtual(4096).unwrap();
        for (a, class) in [
            (&d, MemoryClass::DEVICE_COARSE),
            (&m, MemoryClass::MANAGED),
            (&p, MemoryClass::PINNED_HOST),
            (
                &s,
                MemoryClass::VIRTUAL_MAPPING | MemoryClass::DEVICE_COARSE,
            ),
            (
                &v,
                MemoryClass::VIRTUAL_MAPPING | MemoryClass::DEVICE_COARSE,
            ),
        ] {
            assert_eq!(tracker.lookup(agent, a.ptr()).unwrap().class, class);
        }
        assert_eq!(v.kind(), AllocKind::Virtual);
        assert!(p.host_ptr().is_some());
        let dp = d.ptr();
        drop(d);
        assert!(tracker.lookup(agent, dp).is_none(), "the free is recorded");
    }
    drop(q);

    // Replay of a read-modify-write kernel, every scope and restore mode.
    let rmw = module.function("kr_rmw").unwrap();
    let built = ArgBlock::new().arg(DevicePtr(0)).arg(0u64).arg(0u64);
    assert_eq!(rmw.param_layout().unwrap(), built.params());
    let a = alloc.alloc_device(1 << 20).unwrap();
    let other = alloc.alloc_device(256 << 10).unwrap();
    let words = a.len() / 8;
    for scope in [Scope::All, Scope::Arguments] {
        for restore in [RestoreMode::Full, RestoreMode::Dirty] {
            let input = pattern(a.len() as usize, scope as u64 * 10 + restore as u64);
            let untouched = pattern(other.len() as usize, 99);
            mem.write_device(a.ptr(), &input, WAIT).unwrap();
            mem.write_device(other.ptr(), &untouched, WAIT).unwrap();
            let mut want = input.clone();
            rmw_host(&mut want, 5);
            cx.policy(scope, restore);
            let args = ArgBlock::new().arg(DevicePtr(a.ptr())).arg(words).arg(5u64);
            let rec = cx.launch(&rmw, &args, 4, vec![(a.ptr(), a.len())]);
            assert_eq!(
                (rec.outcome, rec.executed_passes),
                (Outcome::Replayed, 4),
                "{scope:?}/{restore:?}: {rec}"
            );
            cx.inputs_identical(4);
            assert_eq!(mem.read_device(a.ptr(), a.len(), WAIT).unwrap(), want);
            assert_eq!(
                mem.read_device(other.ptr(), other.len(), WAIT).unwrap(),
                untouched
            );
            // Module variables are in every scope: 8 + 128 + 8192 bytes (the constant is not).
            let expect_captured = 8328
                + match rec.scope {
                    Scope::All | Scope::Auto => a.len() + other.len(),
                    // `predicted` plans `arguments` for regions this small.
                    Scope::Arguments | Scope::Predicted => a.len(),
                };
            assert_eq!(rec.captured_bytes, expect_captured);
            if restore == RestoreMode::Dirty {
                assert!(rec.pass_restored_bytes.iter().all(|&b| b <= a.len()));
            }
        }
    }

    // Device digests equal the host's over the same bytes (issue 15): with NVRTC present the
    // fake runs its C copy of the digest kernels (one op split into segments, unaligned ops,
    // a tail); without it (CI) the backend digests on the host and this holds trivially.
    let key = replay_core::digest::key_from_seed(15);
    let bytes = mem.read_device(a.ptr(), a.len(), WAIT).unwrap();
    let ranges = [
        (0u64, a.len()),
        (5, 1000),
        (16, 4096 + 7),
        (3 << 16, 40),
        (8, 0),
    ];
    let ops: Vec<(u64, u64)> = ranges.iter().map(|&(o, l)| (a.ptr() + o, l)).collect();
    let want: Vec<Digest128> = ranges
        .iter()
        .map(|&(o, l)| replay_core::digest::digest(key, &bytes[o as usize..(o + l) as usize]))
        .collect();
    assert_eq!(mem.digest_blocking(&ops, key, WAIT).unwrap(), want);

    // Module variables from the image's symbol table, captured and restored.
    let vars = backend.modules().enumerate(agent).unwrap();
    let var = |n: &str| vars.iter().find(|v| v.name == n).unwrap().clone();
    let (counter, table, hidden) = (var("kr_counter"), var("kr_table"), var("kr_hidden"));
    assert_eq!(
        hidden.base,
        counter.base + 8,
        "resolved through its section"
    );
    assert_eq!(table.base, counter.base + 136);
    assert!(var("kr_const").read_only);
    mem.write_device(counter.base, &41u64.to_le_bytes(), WAIT)
        .unwrap();
    let table0 = pattern(8192, 3);
    mem.write_device(table.base, &table0, WAIT).unwrap();
    cx.policy(Scope::Arguments, RestoreMode::Full);
    let globals = module.function("kr_globals").unwrap();
    let rec = cx.launch(
        &globals,
        &ArgBlock::new().arg(2u64),
        3,
        vec![(counter.base, 8)],
    );
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    cx.inputs_identical(3);
    let c = mem.read_device(counter.base, 8, WAIT).unwrap();
    assert_eq!(
        u64::from_le_bytes(c.try_into().unwrap()),
        42,
        "one execution"
    );
    let t = mem.read_device(table.base, 8192, WAIT).unwrap();
    let want: Vec<u8> = table0
        .chunks_exact(8)
        .enumerate()
        .flat_map(|(i, w)| {
            let x = u64::from_le_bytes(w.try_into().unwrap());
            (x.wrapping_mul(3) + 2 + [1u64, 2, 3, 4][i & 3]).to_le_bytes()
        })
        .collect();
    assert_eq!(t, want);

    // A write through a pointer in device memory, outside the `arguments` scope.
    let holder = alloc.alloc_device(4096).unwrap();
    mem.write_device(holder.ptr(), &other.ptr().to_le_bytes(), WAIT)
        .unwrap();
    let before = pattern(other.len() as usize, 5);
    mem.write_device(other.ptr(), &before, WAIT).unwrap();
    let indirect = module.function("kr_indirect").unwrap();
    let args = ArgBlock::new()
        .arg(DevicePtr(holder.ptr()))
        .arg(other.len() / 8)
        .arg(1u64);
    let rec = cx.launch(&indirect, &args, 4, vec![]);
    assert_eq!(
        (rec.outcome, rec.reason, rec.executed_passes),
        (Outcome::Truncated, Reason::WriteOutsideScope, 1),
        "{rec}"
    );
    let once: Vec<u8> = before
        .chunks_exact(8)
        .flat_map(|w| (u64::from_le_bytes(w.try_into().unwrap()).wrapping_mul(3) + 1).to_le_bytes())
        .collect();
    assert_eq!(
        mem.read_device(other.ptr(), other.len(), WAIT).unwrap(),
        once
    );

    // A busy stream: the queue drain times out, the launch runs once, unreplayed.
    let spin = module.function("kr_spin").unwrap();
    let flag = alloc.alloc_device(8).unwrap();
    cx.policy(Scope::All, RestoreMode::Full);
    let legacy = Arc::clone(backend.legacy_queue());
    let spin_args = ArgBlock::new()
        .arg(2_000_000_000u64)
        .arg(DevicePtr(flag.ptr()));
    // SAFETY: kr_spin(u64 ns, u64* flag) writes one word of `flag`.
    unsafe {
        backend.launch_plain(
            cx.service,
            &spin,
            LaunchConfig::linear(1, 32),
            &legacy,
            &spin_args,
        )
    }
    .unwrap();
    let input = pattern(a.len() as usize, 77);
    mem.write_device(a.ptr(), &input, WAIT).unwrap();
    let mut want = input.clone();
    rmw_host(&mut want, 5);
    let args = ArgBlock::new().arg(DevicePtr(a.ptr())).arg(words).arg(5u64);
    let rec = cx.launch(&rmw, &args, 4, vec![]);
    assert_eq!(
        (rec.outcome, rec.reason, rec.executed_passes),
        (Outcome::Declined, Reason::QueueDrainStuck, 1),
        "{rec}"
    );
    legacy.synchronize().unwrap();
    assert_eq!(mem.read_device(a.ptr(), a.len(), WAIT).unwrap(), want);
    assert_eq!(
        backend.agent().pending_tickets(),
        0,
        "abandoned tickets are dropped"
    );
}

#[test]
fn a_launch_into_a_capturing_stream_runs_once_into_the_graph() {
    let Some((_serial, cx, _)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let mem = cx.backend.memory();
    cx.policy(Scope::All, RestoreMode::Full);
    let a = cx.backend.allocator().alloc_device(64 << 10).unwrap();
    let input = pattern(a.len() as usize, 3);
    mem.write_device(a.ptr(), &input, WAIT).unwrap();
    let q = cx.backend.create_queue(QueueKind::Compute).unwrap();
    cx.backend
        .begin_capture(&q, replay_cuda::CaptureMode::Global)
        .unwrap();
    let r = launch_on(&cx, &rmw, &q, &rmw_args(a.ptr(), a.len(), 7), 4).expect("the launch");
    assert!(r.record.is_none(), "not a replay candidate: {:?}", r.record);
    // The capture is intact, and nothing ran yet.
    let graph = cx
        .backend
        .end_capture(&q)
        .expect("the capture is still valid");
    assert_eq!(mem.read_device(a.ptr(), a.len(), WAIT).unwrap(), input);
    // SAFETY: the graph's one kernel updates `a`, which is alive.
    unsafe { cx.backend.launch_graph(cx.service, &graph, &q) }.unwrap();
    q.synchronize().unwrap();
    let mut want = input.clone();
    rmw_host(&mut want, 7);
    assert_eq!(
        mem.read_device(a.ptr(), a.len(), WAIT).unwrap(),
        want,
        "the graph ran the kernel once"
    );
}

#[test]
fn a_window_beside_another_threads_global_capture_leaves_it_valid() {
    use replay_cuda::sys;
    let Some((_serial, cx, _)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let tiny = module.function("kr_tiny").unwrap();
    let mem = Arc::clone(cx.backend.memory());
    let alloc = cx.backend.allocator();
    let a = alloc.alloc_device(256 << 10).unwrap();
    let counter = alloc.alloc_device(8).unwrap();
    mem.write_device(counter.ptr(), &5u64.to_le_bytes(), WAIT)
        .unwrap();
    let legacy = Arc::clone(cx.backend.legacy_queue());
    let mut p = Policy {
        scope: Scope::All,
        restore: RestoreMode::Full,
        pool_keep_bytes: 0,
        drain_timeout: Duration::from_millis(300),
        pass_timeout: Duration::from_millis(300),
        ..Policy::default()
    };
    p.chunk_bytes = 64 << 10;
    cx.service.set_policy(p).unwrap();

    // Case 1: a non-blocking stream the backend does not know, capturing in global mode on
    // another thread (PyTorch's default): the window runs beside it and leaves it valid.
    // Case 2: the capturing stream is one the backend knows: the window cannot drain it
    // without touching the capture, so it declines, and the capture stays valid too.
    for known in [false, true] {
        let (begun_tx, begun_rx) = std::sync::mpsc::channel::<()>();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let known_queue = if known {
            Some(cx.backend.create_queue(QueueKind::Compute).unwrap())
        } else {
            None
        };
        let stream_raw = known_queue.as_ref().map(|q| q.raw() as u64);
        let counter_ptr = counter.ptr();
        let tiny_raw = tiny.raw() as u64;
        let capturer = std::thread::spawn(move || -> Result<(), String> {
            let dev = replay_cuda::Device::open(0).map_err(|e| e.to_string())?;
            dev.bind().map_err(|e| e.to_string())?;
            let mut s: sys::CUstream = match stream_raw {
                Some(r) => r as sys::CUstream,
                None => std::ptr::null_mut(),
            };
            // SAFETY: plain driver calls on a stream this thread creates (or the test's known
            // stream), a kernel of the loaded module with its one pointer parameter, and a
            // graph owned here.
            unsafe {
                if stream_raw.is_none() {
                    sys::cuStreamCreate(&mut s, 1)
                        .result()
                        .map_err(|e| e.to_string())?;
                }
                sys::cuStreamBeginCapture_v2(
                    s,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
                )
                .result()
                .map_err(|e| format!("begin: {e}"))?;
                begun_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                let mut ptr = counter_ptr;
                let mut params = [&mut ptr as *mut u64 as *mut std::ffi::c_void];
                sys::cuLaunchKernel(
                    tiny_raw as sys::CUfunction,
                    1,
                    1,
                    1,
                    32,
                    1,
                    1,
                    0,
                    s,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
                .result()
                .map_err(|e| format!("captured launch: {e}"))?;
                let mut g: sys::CUgraph = std::ptr::null_mut();
                sys::cuStreamEndCapture(s, &mut g)
                    .result()
                    .map_err(|e| format!("the capture was invalidated: {e}"))?;
                let mut exec: sys::CUgraphExec = std::ptr::null_mut();
                sys::cuGraphInstantiateWithFlags(&mut exec, g, 0)
                    .result()
                    .map_err(|e| e.to_string())?;
                sys::cuGraphLaunch(exec, s)
                    .result()
                    .map_err(|e| e.to_string())?;
                sys::cuGraphExecDestroy(exec);
                sys::cuGraphDestroy(g);
                if stream_raw.is_none() {
                    sys::cuStreamDestroy_v2(s);
                }
            }
            Ok(())
        });
        begun_rx.recv().unwrap();
        let input = pattern(a.len() as usize, 40 + known as u64);
        {
            // The test's own set-up write runs in relaxed mode, as a well-behaved tool's would.
            let _relaxed = replay_cuda::RelaxedCapture::enter();
            mem.write_device(a.ptr(), &input, WAIT).unwrap();
        }
        let rec = launch_on(&cx, &rmw, &legacy, &rmw_args(a.ptr(), a.len(), 3), 3)
            .expect("the launch")
            .record
            .expect("a candidate");
        go_tx.send(()).unwrap();
        capturer
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("known stream {known}: {e}; window: {rec}"));
        let want_outcome = if known {
            (Outcome::Declined, Reason::AgentDrainStuck, 1)
        } else {
            (Outcome::Replayed, Reason::None, 3)
        };
        assert_eq!(
            (rec.outcome, rec.reason, rec.executed_passes),
            want_outcome,
            "known stream {known}: {rec}"
        );
        let mut want = input.clone();
        rmw_host(&mut want, 3);
        assert_eq!(mem.read_device(a.ptr(), a.len(), WAIT).unwrap(), want);
        drop(known_queue);
    }
    // Each graph ran its kernel once: 5 → 16 → 49.
    let c = mem.read_device(counter.ptr(), 8, WAIT).unwrap();
    assert_eq!(u64::from_le_bytes(c.try_into().unwrap()), 49);
}

#[test]
fn a_copy_started_during_a_window_waits_for_it() {
    let Some((_serial, cx, _)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let mem = Arc::clone(cx.backend.memory());
    let alloc = cx.backend.allocator();
    let a = alloc.alloc_device(64 << 10).unwrap();
    let src = alloc.alloc_device(64 << 10).unwrap();
    let dst = alloc.alloc_device(64 << 10).unwrap();
    let (input, copied) = (pattern(a.len() as usize, 1), pattern(src.len() as usize, 2));
    mem.write_device(a.ptr(), &input, WAIT).unwrap();
    mem.write_device(src.ptr(), &copied, WAIT).unwrap();
    mem.write_device(dst.ptr(), &pattern(dst.len() as usize, 3), WAIT)
        .unwrap();
    cx.policy(Scope::All, RestoreMode::Full);
    let copyq = cx.backend.create_queue(QueueKind::Copy).unwrap();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let copier = {
        let backend = Arc::clone(&cx.backend);
        let service = cx.service;
        let q = Arc::clone(&copyq);
        let c = replay_cuda::memory::ResolvedCopy {
            dir: replay_cuda::memory::Direction::DeviceToDevice,
            src: src.ptr(),
            dst: dst.ptr(),
            len: src.len(),
        };
        std::thread::spawn(move || {
            go_rx.recv().unwrap();
            ready_tx.send(()).unwrap();
            // SAFETY: both ends are 64 KiB allocations alive until this thread is joined.
            unsafe { backend.copy(service, &q, &c) }.unwrap();
        })
    };
    // In PASS ENTER of the first pass, another thread copies into `dst`, which the window
    // captured: ungated, the copy lands inside the window and the restore before pass 1 undoes
    // it. The pause only makes that likely; the gate makes the result certain.
    let channels = Mutex::new((go_tx, ready_rx));
    cx.tool
        .add_hook(at(Operation::Pass, Phase::Enter, move |pass| {
            if pass == 0 {
                let (go_tx, ready_rx) = &*channels.lock();
                go_tx.send(()).unwrap();
                ready_rx.recv().unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
        }));
    let rec = cx.launch(&rmw, &rmw_args(a.ptr(), a.len(), 6), 3, vec![]);
    cx.tool.set_hook(Some(cx.inputs.hook()));
    copier.join().unwrap();
    assert_eq!(
        (rec.outcome, rec.executed_passes),
        (Outcome::Replayed, 3),
        "{rec}"
    );
    let mut want = input.clone();
    rmw_host(&mut want, 6);
    assert_eq!(mem.read_device(a.ptr(), a.len(), WAIT).unwrap(), want);
    assert_eq!(
        mem.read_device(dst.ptr(), dst.len(), WAIT).unwrap(),
        copied,
        "the copy was not undone"
    );
}
