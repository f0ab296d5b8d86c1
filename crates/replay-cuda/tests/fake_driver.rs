//! The backend end to end over a fake CUDA driver, on a machine without a GPU.
//!
//! `tests/fake_driver/fake_cuda.c` is compiled with the system C compiler into a
//! `libcuda.so.1` and loaded before the backend looks for the driver; cudarc's open by name
//! then resolves to it through its soname. The fake keeps device memory in host memory, runs
//! every operation at once, emulates the kernels by name and can keep a stream busy, so the
//! real code paths of this crate run: driver loading, contexts, streams, events and bounded
//! waits, tracked allocation of every class, module globals from a cubin's symbol table, the
//! window's drains, passes, restores and digests (host digests where NVRTC is absent, as in
//! CI). What it cannot show (timing, real kernels, real copies) is the GPU run's job
//! (`cuda_bench`). Skipped where no C compiler is found, or where a real driver is present.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayTool};
use replay_core::{
    ContextId, Digest128, MemoryClass, NoContextControl, Outcome, Policy, Reason, ReplayService,
    RestoreMode, Scope, Subscription, SystemClock,
};
use replay_cuda::module::elf::testing::{info, Builder};
use replay_cuda::module::elf::{STB_GLOBAL, STB_LOCAL, STT_FUNC, STT_OBJECT};
use replay_cuda::{
    AllocKind, ArgBlock, BackendConfig, CudaBackend, CudaFunction, DevicePtr, LaunchConfig,
    QueueKind,
};
use replay_memory::{ModuleVariables, Tracker};
use replay_mock::double::{at, ScriptedTool, ToolHook, ToolScript};

const WAIT: Duration = Duration::from_secs(30);

/// The fake driver's state is process-wide: tests run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

mod support;
use support::{load_fake, Fake};

/// What the tests add to the scripted tool: input digests of `ranges` in every PASS ENTER.
struct Inputs {
    ranges: Mutex<Vec<(u64, u64)>>,
    seen: Mutex<Vec<Vec<Digest128>>>,
    memory: Arc<replay_cuda::CudaMemory>,
}

impl Inputs {
    fn hook(self: &Arc<Self>) -> ToolHook {
        let me = Arc::clone(self);
        at(Operation::Pass, Phase::Enter, move |_| {
            let ranges = me.ranges.lock().clone();
            if ranges.is_empty() {
                return;
            }
            let key = replay_core::digest::key_from_seed(7);
            let d = me
                .memory
                .digest_blocking(&ranges, key, WAIT)
                .expect("digest");
            me.seen.lock().push(d);
        })
    }
}

fn rmw_host(v: &mut [u8], k: u64) {
    for (i, w) in v.chunks_exact_mut(8).enumerate() {
        let x = u64::from_le_bytes(w.try_into().unwrap());
        let y = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(k ^ i as u64);
        w.copy_from_slice(&y.to_le_bytes());
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len / 8)
        .flat_map(|i| {
            (i as u64)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(seed)
                .to_le_bytes()
        })
        .collect()
}

/// A cubin-like image with the kernels and globals the fake emulates, laid out as NVRTC lays
/// out `globals.cu` (all globals local, `kr_hidden` not resolvable by name in the fake).
fn image() -> Vec<u8> {
    let mut b = Builder::new();
    let mut f = Vec::new();
    for k in ["kr_rmw", "kr_spin", "kr_indirect", "kr_globals", "kr_tiny"] {
        f.push((k, b.section(&format!(".text.{k}"), 1, vec![0; 16], 0)));
    }
    let global = b.section(".nv.global", 8, Vec::new(), 8328);
    let constant = b.section(".nv.constant3", 1, vec![0; 32], 0);
    for (k, s) in f {
        b.symbol(k, info(STB_GLOBAL, STT_FUNC), s, 0, 16);
    }
    b.symbol("kr_counter", info(STB_LOCAL, STT_OBJECT), global, 0, 8);
    b.symbol("kr_table", info(STB_LOCAL, STT_OBJECT), global, 136, 8192);
    b.symbol("kr_hidden", info(STB_LOCAL, STT_OBJECT), global, 8, 128);
    b.symbol("kr_const", info(STB_LOCAL, STT_OBJECT), constant, 0, 32);
    b.build()
}

struct Ctx {
    backend: Arc<CudaBackend>,
    service: &'static ReplayService,
    /// Passes as set; its hook: [`Inputs::hook`], or that and a test's own.
    tool: Arc<ScriptedTool>,
    inputs: Arc<Inputs>,
}

impl Ctx {
    fn policy(&self, scope: Scope, restore: RestoreMode) {
        self.service
            .set_policy(Policy {
                scope,
                restore,
                chunk_bytes: 64 << 10,
                drain_timeout: Duration::from_millis(300),
                pass_timeout: Duration::from_millis(300),
                ..Policy::default()
            })
            .unwrap();
    }

    fn launch(
        &self,
        f: &CudaFunction,
        args: &ArgBlock,
        passes: u64,
        ranges: Vec<(u64, u64)>,
    ) -> replay_core::OutcomeRecord {
        self.tool.set_passes(Some(passes));
        *self.inputs.ranges.lock() = ranges;
        self.inputs.seen.lock().clear();
        let q = Arc::clone(self.backend.legacy_queue());
        // SAFETY: the fake emulates every kernel of the image with these parameter lists, over
        // memory the test owns.
        let r = unsafe {
            self.backend.launch(
                self.service,
                f,
                LaunchConfig::linear(4, 64),
                &q,
                args,
                Default::default(),
            )
        }
        .unwrap();
        r.record.expect("a candidate dispatch has a record")
    }

    fn inputs_identical(&self, passes: usize) {
        let seen = self.inputs.seen.lock();
        assert_eq!(seen.len(), passes);
        assert!(seen.iter().all(|d| *d == seen[0]), "per-pass inputs differ");
    }
}

/// A backend over the fake driver, a started service and the tool.
fn setup() -> Option<(parking_lot::MutexGuard<'static, ()>, Ctx, Arc<Tracker>)> {
    let guard = SERIAL.lock();
    load_fake(Fake::Library)?;
    assert_eq!(replay_cuda::is_available(), Ok(1));
    let tracker = Arc::new(Tracker::new());
    let backend =
        Arc::new(CudaBackend::new(0, Arc::clone(&tracker), BackendConfig::default()).unwrap());
    let service: &'static ReplayService = Box::leak(Box::new(ReplayService::new(
        Policy::default(),
        Arc::new(SystemClock::new()),
        Arc::new(NoContextControl),
    )));
    let tool = ScriptedTool::new(
        Arc::default(),
        ToolScript {
            passes: Some(0),
            ..Default::default()
        },
    );
    let inputs = Arc::new(Inputs {
        ranges: Mutex::new(Vec::new()),
        seen: Mutex::new(Vec::new()),
        memory: Arc::clone(backend.memory()),
    });
    tool.set_hook(Some(inputs.hook()));
    service
        .configure(
            ContextId(1),
            Subscription::CONFIG | Subscription::PASS,
            Arc::clone(&tool) as Arc<dyn ReplayTool>,
        )
        .unwrap();
    service.start().unwrap();
    Some((
        guard,
        Ctx {
            backend,
            service,
            tool,
            inputs,
        },
        tracker,
    ))
}

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

/// A function the fake driver exports for tests.
fn fake_fn<T: Copy>(name: &[u8]) -> T {
    let this = libloading::os::unix::Library::this();
    // SAFETY: the fake driver is loaded globally and exports `name` with the type `T` the
    // caller names (checked by hand against fake_cuda.c).
    let f = unsafe { this.get::<T>(name) }.expect("a fake driver export");
    *f
}

fn blocking_frees() -> i32 {
    let f: unsafe extern "C" fn() -> i32 = fake_fn(b"fake_cuda_blocking_frees\0");
    // SAFETY: no arguments; reads a counter under the fake's lock.
    unsafe { f() }
}

fn rmw_args(ptr: u64, bytes: u64, k: u64) -> ArgBlock {
    ArgBlock::new().arg(DevicePtr(ptr)).arg(bytes / 8).arg(k)
}

/// Launches `f` under replay on `q` with `passes` asked for; the report.
fn launch_on(
    cx: &Ctx,
    f: &CudaFunction,
    q: &Arc<replay_cuda::Queue>,
    args: &ArgBlock,
    passes: u64,
) -> Result<replay_core::DispatchReport, replay_core::BackendError> {
    cx.tool.set_passes(Some(passes));
    cx.inputs.ranges.lock().clear();
    // SAFETY: the fake emulates the kernel with this parameter list over memory the test owns.
    unsafe {
        cx.backend.launch(
            cx.service,
            f,
            LaunchConfig::linear(4, 64),
            q,
            args,
            Default::default(),
        )
    }
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
fn backing_is_released_outside_the_window_once_the_device_is_idle() {
    let Some((_serial, cx, _)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let spin = module.function("kr_spin").unwrap();
    let mem = cx.backend.memory();
    let flag = cx.backend.allocator().alloc_device(8).unwrap();
    let _data = cx.backend.allocator().alloc_device(1 << 20).unwrap();
    cx.service
        .set_policy(Policy {
            scope: Scope::All,
            restore: RestoreMode::Full,
            pool_keep_bytes: 0,
            drain_timeout: Duration::from_millis(300),
            pass_timeout: Duration::from_millis(300),
            ..Policy::default()
        })
        .unwrap();
    let legacy = Arc::clone(cx.backend.legacy_queue());
    let before = blocking_frees();
    // A pass that spins past its bound: truncated, and the window gives its backing back while
    // the kernel still runs. Freeing it then would wait for the whole device, under the lock.
    let args = ArgBlock::new()
        .arg(1_500_000_000u64)
        .arg(DevicePtr(flag.ptr()));
    let rec = launch_on(&cx, &spin, &legacy, &args, 3)
        .unwrap()
        .record
        .unwrap();
    assert_eq!(
        (rec.outcome, rec.reason),
        (Outcome::Truncated, Reason::PassDrainStuck),
        "{rec}"
    );
    assert!(rec.captured_bytes > 0, "a snapshot was taken: {rec}");
    assert_eq!(
        blocking_frees(),
        before,
        "no free waited for the device inside the window"
    );
    assert!(mem.deferred_bytes() > 0, "released later, not now");
    legacy.synchronize().unwrap();
    assert_eq!(mem.release_deferred(false), 0, "released once idle");
    assert_eq!(blocking_frees(), before);
}

#[test]
fn a_failure_after_the_launch_is_reported_as_after_submit() {
    use std::sync::OnceLock;
    /// Collects the backend's warnings (the window logs why a pass could not be submitted).
    struct Lines(Mutex<Vec<String>>);
    impl log::Log for Lines {
        fn enabled(&self, m: &log::Metadata<'_>) -> bool {
            m.level() <= log::Level::Warn
        }
        fn log(&self, r: &log::Record<'_>) {
            self.0.lock().push(r.args().to_string());
        }
        fn flush(&self) {}
    }
    static LINES: OnceLock<&'static Lines> = OnceLock::new();
    let lines = *LINES.get_or_init(|| {
        let l: &'static Lines = Box::leak(Box::new(Lines(Mutex::new(Vec::new()))));
        let _ = log::set_logger(l);
        log::set_max_level(log::LevelFilter::Warn);
        l
    });
    let Some((_serial, cx, _)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let a = cx.backend.allocator().alloc_device(64 << 10).unwrap();
    cx.policy(Scope::All, RestoreMode::Full);
    let input = pattern(a.len() as usize, 8);
    cx.backend
        .memory()
        .write_device(a.ptr(), &input, WAIT)
        .unwrap();
    lines.0.lock().clear();
    // The event recorded after the pass's launch fails: the pass ran (or will).
    let arm: unsafe extern "C" fn(*const std::ffi::c_char) =
        fake_fn(b"fake_cuda_fail_record_after\0");
    // SAFETY: a NUL-terminated kernel name; the fake copies it.
    unsafe { arm(c"kr_rmw".as_ptr()) };
    let legacy = Arc::clone(cx.backend.legacy_queue());
    let rec = launch_on(&cx, &rmw, &legacy, &rmw_args(a.ptr(), a.len(), 2), 4)
        .unwrap()
        .record
        .unwrap();
    // What the window does next is the core's (it never submits again); the backend's part is
    // to say that the launch was made.
    assert!(rec.executed_passes >= 1, "{rec}");
    let logged = lines.0.lock().clone();
    assert!(
        logged
            .iter()
            .any(|l| l.contains("pass 0") && l.contains("AfterSubmit")),
        "the failure after the launch is AfterSubmit: {logged:#?}"
    );
}

#[test]
fn the_driver_describes_memory_the_tracker_never_saw() {
    use replay_core::DeviceMemory;
    use replay_cuda::sys;
    let Some((_serial, cx, tracker)) = setup() else {
        return;
    };
    let mem = cx.backend.memory();
    let agent = cx.backend.agent_id();
    // Allocated behind the backend's back, as an application's own driver calls would.
    let mut dev: sys::CUdeviceptr = 0;
    let mut managed: sys::CUdeviceptr = 0;
    let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: plain allocations, freed below.
    unsafe {
        sys::cuMemAlloc_v2(&mut dev, 8192).result().unwrap();
        sys::cuMemAllocManaged(&mut managed, 4096, 1)
            .result()
            .unwrap();
        sys::cuMemHostAlloc(&mut host, 4096, 0).result().unwrap();
    }
    let host = host as u64;
    for (addr, base, size, class, owner) in [
        (
            dev + 100,
            dev,
            8192,
            MemoryClass::DEVICE_COARSE,
            Some(agent),
        ),
        (
            managed + 8,
            managed,
            4096,
            MemoryClass::MANAGED,
            Some(agent),
        ),
        (host + 4000, host, 4096, MemoryClass::PINNED_HOST, None),
    ] {
        assert!(tracker.lookup(agent, addr).is_none());
        let info = mem
            .query_pointer(addr)
            .unwrap()
            .expect("known to the driver");
        assert_eq!(
            (info.base, info.size, info.class, info.owner),
            (base, size, class, owner),
            "{addr:#x}"
        );
    }
    // Pageable host memory (and any word that is no pointer) is unknown to CUDA.
    let stack = 0u64;
    assert_eq!(
        mem.query_pointer(&stack as *const u64 as u64).unwrap(),
        None
    );
    assert_eq!(mem.query_pointer(12345).unwrap(), None);
    // Stream-ordered pool memory is a virtual mapping.
    let q = cx.backend.create_queue(QueueKind::Compute).unwrap();
    let pool = cx.backend.allocator().alloc_async(4096, &q).unwrap();
    let info = mem.query_pointer(pool.ptr()).unwrap().unwrap();
    assert_eq!(info.class, MemoryClass::VIRTUAL_MAPPING);
    // SAFETY: frees what was allocated above, once.
    unsafe {
        sys::cuMemFree_v2(dev).result().unwrap();
        sys::cuMemFree_v2(managed).result().unwrap();
        sys::cuMemFreeHost(host as *mut std::ffi::c_void)
            .result()
            .unwrap();
    }
}

#[test]
fn pinned_registered_and_managed_memory_are_tracked_and_captured() {
    let Some((_serial, cx, tracker)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let alloc = cx.backend.allocator();
    let agent = cx.backend.agent_id();
    let len = 64u64 << 10;
    let mut own = vec![0u64; (len / 8) as usize];
    // SAFETY: `own` is `len` bytes, not registered, and outlives the registration (dropped
    // at the end of the test, after `reg`).
    let reg = unsafe { alloc.register_host(own.as_mut_ptr().cast(), len) }.unwrap();
    let allocs = [
        alloc.alloc_managed(len).unwrap(),
        alloc.alloc_pinned_host(len).unwrap(),
        alloc.alloc_host(len).unwrap(),
        reg,
    ];
    let classes = [
        MemoryClass::MANAGED,
        MemoryClass::PINNED_HOST,
        MemoryClass::PINNED_HOST,
        MemoryClass::PINNED_HOST,
    ];
    let legacy = Arc::clone(cx.backend.legacy_queue());
    cx.policy(Scope::Arguments, RestoreMode::Full);
    for (a, class) in allocs.iter().zip(classes) {
        assert_eq!(tracker.lookup(agent, a.ptr()).unwrap().class, class);
        let input = pattern(len as usize, a.ptr());
        let mem = cx.backend.memory();
        mem.write_device(a.ptr(), &input, WAIT).unwrap();
        *cx.inputs.ranges.lock() = vec![(a.ptr(), len)];
        let rec = cx.launch(&rmw, &rmw_args(a.ptr(), len, 4), 3, vec![(a.ptr(), len)]);
        assert_eq!(
            (rec.outcome, rec.executed_passes, rec.captured_bytes),
            (Outcome::Replayed, 3, len + 8328),
            "{class:?}: {rec}"
        );
        cx.inputs_identical(3);
        let mut want = input.clone();
        rmw_host(&mut want, 4);
        assert_eq!(
            mem.read_device(a.ptr(), len, WAIT).unwrap(),
            want,
            "{class:?}"
        );
    }
    drop(legacy);
    drop(allocs);
    drop(own);
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

/// Reads `len` bytes at `p` in the fake's memory (device memory is host memory there).
fn raw(p: u64, len: usize) -> Vec<u8> {
    // SAFETY: the fake's device arena is mapped for the whole process and never unmapped;
    // a freed block reads as zeros there.
    unsafe { std::slice::from_raw_parts(p as *const u8, len) }.to_vec()
}

#[test]
fn a_kernel_writing_a_mapping_and_a_pool_allocation_replays() {
    let Some((_serial, cx, tracker)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let alloc = cx.backend.allocator();
    let agent = cx.backend.agent_id();
    let mem = cx.backend.memory();
    let q = cx.backend.create_queue(QueueKind::Compute).unwrap();
    let len = 64u64 << 10;
    let v = alloc.alloc_virtual(len).unwrap();
    let s = alloc.alloc_async(len, &q).unwrap();
    let pool = alloc.default_pool().unwrap();
    let f = alloc.alloc_from_pool_async(len, &pool, &q).unwrap();
    for a in [&v, &s, &f] {
        let r = tracker.lookup(agent, a.ptr()).unwrap();
        assert_eq!(
            r.class,
            MemoryClass::VIRTUAL_MAPPING | MemoryClass::DEVICE_COARSE,
            "{:?}",
            a.kind()
        );
    }
    for scope in [Scope::All, Scope::Arguments] {
        for restore in [RestoreMode::Full, RestoreMode::Dirty] {
            for a in [&v, &s, &f] {
                let input = pattern(len as usize, a.ptr() ^ scope as u64 ^ restore as u64);
                mem.write_device(a.ptr(), &input, WAIT).unwrap();
                cx.policy(scope, restore);
                let rec = cx.launch(&rmw, &rmw_args(a.ptr(), len, 6), 4, vec![(a.ptr(), len)]);
                assert_eq!(
                    (rec.outcome, rec.executed_passes),
                    (Outcome::Replayed, 4),
                    "{:?} {scope:?}/{restore:?}: {rec}",
                    a.kind()
                );
                cx.inputs_identical(4);
                let mut want = input;
                rmw_host(&mut want, 6);
                assert_eq!(mem.read_device(a.ptr(), len, WAIT).unwrap(), want);
            }
        }
    }
    // decline_on_vmem keeps the old behaviour: declined, run once.
    for a in [&v, &s, &f] {
        let input = pattern(len as usize, 3);
        mem.write_device(a.ptr(), &input, WAIT).unwrap();
        cx.service
            .set_policy(Policy {
                decline_on_vmem: true,
                ..Policy::default()
            })
            .unwrap();
        let rec = cx.launch(&rmw, &rmw_args(a.ptr(), len, 6), 4, vec![]);
        assert_eq!(
            (rec.outcome, rec.reason),
            (Outcome::Declined, Reason::UntrackedMemory),
            "{rec}"
        );
        let mut want = input;
        rmw_host(&mut want, 6);
        assert_eq!(mem.read_device(a.ptr(), len, WAIT).unwrap(), want);
    }
    drop((v, s, f));
    drop(q);
}

#[test]
fn a_mapping_and_a_pool_allocation_freed_during_a_window_are_not_restored() {
    let Some((_serial, cx, tracker)) = setup() else {
        return;
    };
    let module = cx.backend.modules().load(&image(), "fake.cubin").unwrap();
    let rmw = module.function("kr_rmw").unwrap();
    let alloc = cx.backend.allocator();
    let agent = cx.backend.agent_id();
    let mem = cx.backend.memory();
    let q = cx.backend.create_queue(QueueKind::Compute).unwrap();
    let len = 256u64 << 10;
    let a = alloc.alloc_device(len).unwrap();
    let v = alloc.alloc_virtual(len).unwrap();
    let s = alloc.alloc_async(len, &q).unwrap();
    let input = pattern(len as usize, 17);
    for p in [a.ptr(), v.ptr(), s.ptr()] {
        mem.write_device(p, &input, WAIT).unwrap();
    }
    let (vp, sp) = (v.ptr(), s.ptr());
    // Captured under `all` (the kernel writes only `a`); the tool frees both before pass 1:
    // the unmap and the ordered free are recorded before the driver's calls, so the restores
    // that follow skip them.
    let freed = Arc::new(Mutex::new(Some((v, s))));
    let f = Arc::clone(&freed);
    cx.tool
        .add_hook(at(Operation::Pass, Phase::Enter, move |pass| {
            if pass == 1 {
                drop(f.lock().take());
            }
        }));
    cx.policy(Scope::All, RestoreMode::Full);
    let rec = cx.launch(&rmw, &rmw_args(a.ptr(), len, 2), 3, vec![]);
    cx.tool.set_hook(Some(cx.inputs.hook()));
    assert!(freed.lock().is_none(), "the tool freed them");
    assert_eq!(
        (rec.outcome, rec.executed_passes),
        (Outcome::Replayed, 3),
        "{rec}"
    );
    assert!(rec.captured_bytes >= 3 * len, "all three captured: {rec}");
    let mut want = input.clone();
    rmw_host(&mut want, 2);
    assert_eq!(mem.read_device(a.ptr(), len, WAIT).unwrap(), want);
    assert!(tracker.lookup(agent, vp).is_none() && tracker.lookup(agent, sp).is_none());
    // The pool block's whole pages were released by the free and were never written again.
    let page = (sp + 4095) & !4095;
    assert!(
        raw(page, 64 << 10).iter().all(|&b| b == 0),
        "no restore wrote the freed pool block"
    );
    drop(q);
}

#[test]
fn an_application_images_variables_name_their_section_as_their_block() {
    let Some((_g, ctx, _t)) = setup() else {
        return;
    };
    ctx.backend.device().bind().unwrap();
    use replay_cuda::module::elf::GlobalSymbol;
    let sym = |name: &str, section: usize, offset: u64| GlobalSymbol {
        name: name.into(),
        section_name: format!(".nv.global.{section}"),
        section,
        offset,
        size: 8,
        read_only: false,
        binding: STB_GLOBAL,
    };
    // Section 5 at 0x7000_0000, section 6 at 0x7000_1000 (where the driver put them; the
    // fake's pointer attributes know no allocation there).
    let at = |name: &str| -> Option<(u64, u64)> {
        match name {
            "a" => Some((0x7000_00f8, 8)),
            "b" => Some((0x7000_0100, 8)),
            "c" => Some((0x7000_1000, 8)),
            _ => None,
        }
    };
    let reg = ctx.backend.modules();
    assert!(reg.add_foreign(
        0xabc,
        vec![sym("a", 5, 0xf8), sym("b", 5, 0x100), sym("c", 6, 0)],
        at,
        |_| None
    ));
    let agent = replay_core::AgentId(0);
    let a = reg.allocation_of(agent, 0x7000_00f8);
    assert_eq!(
        a,
        Some((0x7000_0000, 0x108)),
        "a's section, as far as its symbols reach"
    );
    assert_eq!(
        reg.allocation_of(agent, 0x7000_0100),
        a,
        "b: the same section"
    );
    assert_eq!(
        reg.allocation_of(agent, 0x7000_1000),
        Some((0x7000_1000, 8))
    );
    assert!(reg.remove_foreign(0xabc));
    assert_eq!(reg.allocation_of(agent, 0x7000_00f8), None);
}

/// The `cuStreamWaitEvent` calls so far: (waiting stream, stream the event was recorded on).
fn stream_waits() -> Vec<(usize, usize)> {
    let n: unsafe extern "C" fn() -> i32 = fake_fn(b"fake_cuda_stream_waits\0");
    type At =
        unsafe extern "C" fn(i32, *mut *mut std::ffi::c_void, *mut *mut std::ffi::c_void) -> i32;
    let at: At = fake_fn(b"fake_cuda_stream_wait_at\0");
    // SAFETY: no arguments; reads a counter under the fake's lock.
    let count = unsafe { n() };
    (0..count)
        .map(|i| {
            let (mut s, mut e) = (std::ptr::null_mut(), std::ptr::null_mut());
            // SAFETY: `i` is in range; both out-pointers are valid for a write.
            assert_eq!(unsafe { at(i, &mut s, &mut e) }, 1);
            (s as usize, e as usize)
        })
        .collect()
}

#[test]
fn a_restore_is_ordered_before_the_next_pass_on_the_device() {
    let Some((_serial, cx, _)) = setup() else {
        return;
    };
    let backend = Arc::clone(&cx.backend);
    let module = backend.modules().load(&image(), "fake.cubin").unwrap();
    let mem = backend.memory();
    let rmw = module.function("kr_rmw").unwrap();
    let a = backend.allocator().alloc_device(1 << 20).unwrap();
    let copy_streams: Vec<usize> = mem.internal_streams()[..3]
        .iter()
        .map(|&s| s as usize)
        .collect();
    assert!(replay_core::Agent::capabilities(&**backend.agent())
        .contains(replay_core::Capabilities::ORDERED_RESTORE));
    for (ordered, seed) in [(true, 1u64), (false, 2)] {
        mem.set_ordered_restores(ordered);
        let input = pattern(a.len() as usize, seed);
        mem.write_device(a.ptr(), &input, WAIT).unwrap();
        let mut want = input.clone();
        rmw_host(&mut want, 5);
        cx.policy(Scope::All, RestoreMode::Full);
        let before = stream_waits().len();
        let rec = cx.launch(
            &rmw,
            &rmw_args(a.ptr(), a.len(), 5),
            4,
            vec![(a.ptr(), a.len())],
        );
        assert_eq!(
            (rec.outcome, rec.executed_passes),
            (Outcome::Replayed, 4),
            "{rec}"
        );
        // The verify-style digests in PASS ENTER saw restored memory every time.
        cx.inputs_identical(4);
        assert_eq!(mem.read_device(a.ptr(), a.len(), WAIT).unwrap(), want);
        assert_eq!(
            mem.ordered_pending(),
            0,
            "every ordered restore was completed"
        );
        let waits = stream_waits()[before..].to_vec();
        // The launch stream (the legacy one) waited for the three restores' copy events.
        let pass_waits = waits
            .iter()
            .filter(|(s, e)| *s == 0 && copy_streams.contains(e))
            .count();
        // So did the digest stream before the PASS ENTER digests of passes 1 to 3.
        let digest_stream = mem.internal_streams()[3] as usize;
        let digest_waits = waits
            .iter()
            .filter(|(s, e)| *s == digest_stream && copy_streams.contains(e))
            .count();
        if ordered {
            assert_eq!(pass_waits, 3, "{waits:x?}");
            assert_eq!(digest_waits, 3, "{waits:x?}");
        } else {
            assert!(
                waits.is_empty(),
                "host-ordered restores need no stream wait: {waits:x?}"
            );
        }
    }
    mem.set_ordered_restores(true);
}
