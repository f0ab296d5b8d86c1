//! What every test over the fake driver shares. The fake's state is process-wide, so
//! `setup` takes the one lock before it gives a backend over the fake (the driver API the
//! library calls itself), a started service, and the scripted tool that digests the inputs of
//! every pass (which must be identical from pass to pass). Also the image of the kernels the
//! fake emulates by name, the host's result of one execution (`rmw_host`), and the fake's own
//! exports.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayTool};
use replay_core::{
    ContextId, Digest128, NoContextControl, Policy, ReplayService, RestoreMode, Scope,
    Subscription, SystemClock,
};
use replay_cuda::module::elf::testing::{info, Builder};
use replay_cuda::module::elf::{STB_GLOBAL, STB_LOCAL, STT_FUNC, STT_OBJECT};
use replay_cuda::{ArgBlock, BackendConfig, CudaBackend, CudaFunction, DevicePtr, LaunchConfig};
use replay_memory::Tracker;
use replay_mock::double::{at, ScriptedTool, ToolHook, ToolScript};

use crate::support::{load_fake, Fake};

pub const WAIT: Duration = Duration::from_secs(30);

/// The fake driver's state is process-wide: tests run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// What the tests add to the scripted tool: input digests of `ranges` in every PASS ENTER.
pub struct Inputs {
    pub ranges: Mutex<Vec<(u64, u64)>>,
    pub seen: Mutex<Vec<Vec<Digest128>>>,
    pub memory: Arc<replay_cuda::CudaMemory>,
}

impl Inputs {
    pub fn hook(self: &Arc<Self>) -> ToolHook {
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

pub fn rmw_host(v: &mut [u8], k: u64) {
    for (i, w) in v.chunks_exact_mut(8).enumerate() {
        let x = u64::from_le_bytes(w.try_into().unwrap());
        let y = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(k ^ i as u64);
        w.copy_from_slice(&y.to_le_bytes());
    }
}

pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
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
pub fn image() -> Vec<u8> {
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

pub struct Ctx {
    pub backend: Arc<CudaBackend>,
    pub service: &'static ReplayService,
    /// Passes as set; its hook: [`Inputs::hook`], or that and a test's own.
    pub tool: Arc<ScriptedTool>,
    pub inputs: Arc<Inputs>,
}

impl Ctx {
    pub fn policy(&self, scope: Scope, restore: RestoreMode) {
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

    pub fn launch(
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

    pub fn inputs_identical(&self, passes: usize) {
        let seen = self.inputs.seen.lock();
        assert_eq!(seen.len(), passes);
        assert!(seen.iter().all(|d| *d == seen[0]), "per-pass inputs differ");
    }
}

/// A backend over the fake driver, a started service and the tool.
pub fn setup() -> Option<(parking_lot::MutexGuard<'static, ()>, Ctx, Arc<Tracker>)> {
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

/// A function the fake driver exports for tests.
pub fn fake_fn<T: Copy>(name: &[u8]) -> T {
    let this = libloading::os::unix::Library::this();
    // SAFETY: the fake driver is loaded globally and exports `name` with the type `T` the
    // caller names (checked by hand against fake_cuda*.c).
    let f = unsafe { this.get::<T>(name) }.expect("a fake driver export");
    *f
}

pub fn rmw_args(ptr: u64, bytes: u64, k: u64) -> ArgBlock {
    ArgBlock::new().arg(DevicePtr(ptr)).arg(bytes / 8).arg(k)
}

/// Launches `f` under replay on `q` with `passes` asked for; the report.
pub fn launch_on(
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

/// Sets (0: clears) the fake context's sticky error.
pub fn set_sticky(code: i32) {
    let f: unsafe extern "C" fn(i32) = fake_fn(b"fake_cuda_set_sticky\0");
    // SAFETY: an integer argument; sets the fake's state under its lock.
    unsafe { f(code) }
}

/// The fake's stand-in for a compiled image of the digest source: the fake emulates its
/// kernels by name.
pub fn device_code_image() -> Vec<u8> {
    let mut b = Builder::new();
    let mut f = Vec::new();
    for k in ["kr_digest_seg", "kr_digest_fin", "kr_copy"] {
        f.push((k, b.section(&format!(".text.{k}"), 1, vec![0; 16], 0)));
    }
    for (k, s) in f {
        b.symbol(k, info(STB_GLOBAL, STT_FUNC), s, 0, 16);
    }
    b.build()
}

pub fn kernel_copies() -> (u64, u64) {
    let f: unsafe extern "C" fn(*mut u64) -> u64 = fake_fn(b"fake_cuda_kernel_copies\0");
    let mut launches = 0u64;
    // SAFETY: an out pointer to a live local; reads two counters.
    let pieces = unsafe { f(&mut launches) };
    (launches, pieces)
}
