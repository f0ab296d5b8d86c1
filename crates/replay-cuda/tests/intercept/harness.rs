//! What every interception test shares: the three-pass tool, `setup`, buffers, `kr_rmw`.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_cuda::intercept;
use replay_cuda::sys;

use crate::support::{bind_device0, intercept_with, launch_block, load_fake, Fake};

type Hook = Box<dyn Fn(u32) + Send + Sync>;

/// Three passes; `hook` runs in PASS ENTER with the pass index.
#[derive(Default)]
pub struct Tool {
    pub hook: Mutex<Option<Hook>>,
    pub replayed: AtomicU32,
    pub last: Mutex<String>,
    pub last_record: Mutex<Option<replay_core::OutcomeRecord>>,
}

impl ReplayTool for Tool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData) {
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                p.replay_pass_count = Some(Arc::new(|_, _| 3));
            }
            (Operation::Pass, Phase::Enter) => {
                if let Some(h) = &*self.hook.lock() {
                    h(p.current_pass);
                }
            }
            (Operation::Config, Phase::Exit) => {
                *self.last.lock() = format!("{:?}", p.outcome);
                *self.last_record.lock() = p.outcome.cloned();
                if p.outcome.map(|o| o.executed_passes) == Some(3) {
                    self.replayed.fetch_add(1, Ordering::SeqCst);
                }
            }
            _ => {}
        }
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

/// The application's image of `kr_rmw` and friends, loaded through the intercepted
/// `cuModuleLoadData`: PTX without module globals (the fake driver compiles nothing), so its
/// kernels' globals are known to be none.
pub const APP_PTX: &std::ffi::CStr =
    c".version 8.4\n.target sm_90\n.address_size 64\n.visible .entry kr_rmw()\n{\n\tret;\n}\n";

pub struct Setup {
    pub tool: Arc<Tool>,
    pub func: sys::CUfunction,
}

/// The fake driver, a started service with the tool, interception on, the backend of
/// device 0 open (its primary context current) and `kr_rmw`.
pub fn setup() -> Option<(parking_lot::MutexGuard<'static, ()>, Setup)> {
    let guard = SERIAL.lock();
    load_fake(Fake::Inject)?;
    static TOOL: std::sync::OnceLock<Arc<Tool>> = std::sync::OnceLock::new();
    let tool = Arc::clone(TOOL.get_or_init(|| {
        let tool = Arc::new(Tool::default());
        intercept_with(Arc::clone(&tool) as Arc<dyn ReplayTool>);
        tool
    }));
    *tool.hook.lock() = None;
    bind_device0();
    let mut module: sys::CUmodule = std::ptr::null_mut();
    let mut func: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: the fake driver's module and function calls with out pointers to live locals.
    unsafe {
        assert_eq!(
            intercept::module_load_data(&mut module, APP_PTX.as_ptr().cast()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuModuleGetFunction(&mut func, module, c"kr_rmw".as_ptr()),
            sys::CUresult::CUDA_SUCCESS
        );
    }
    Some((guard, Setup { tool, func }))
}

pub const N: usize = 512;

/// An intercepted `cuMemAlloc_v2` of `N` words, filled with a pattern.
pub fn alloc_filled(seed: u64) -> u64 {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the wrapper's contract is the driver's: an out pointer.
    let r = unsafe { intercept::mem_alloc(&mut p, N * 8) };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    let host: Vec<u64> = (0..N as u64).map(|i| i * 7 + seed).collect();
    // SAFETY: the fake driver's memory is host memory at the device address (unified).
    unsafe { std::ptr::copy_nonoverlapping(host.as_ptr(), p as *mut u64, N) };
    p
}

pub fn read(p: u64) -> Vec<u64> {
    // SAFETY: as in `alloc_filled`; the fake runs every operation at once.
    unsafe { std::slice::from_raw_parts(p as *const u64, N) }.to_vec()
}

pub fn rmw_host(v: &mut [u64], k: u64) {
    for (i, x) in v.iter_mut().enumerate() {
        *x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(k ^ i as u64);
    }
}

/// `kr_rmw(p, N, k)` through the intercepted `cuLaunchKernel`.
pub fn launch_rmw(func: sys::CUfunction, mut p: u64, mut k: u64) -> sys::CUresult {
    let mut n = N as u64;
    let mut args: [*mut std::ffi::c_void; 3] = [
        (&mut p as *mut u64).cast(),
        (&mut n as *mut u64).cast(),
        (&mut k as *mut u64).cast(),
    ];
    // SAFETY: kr_rmw's three 8-byte parameters, live arguments.
    unsafe { launch_block(func, 64, &mut args) }
}

/// Waits (bounded) for `flag`.
pub fn wait_for(flag: &AtomicBool, budget: Duration) -> bool {
    let end = Instant::now() + budget;
    while Instant::now() < end {
        if flag.load(Ordering::SeqCst) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    flag.load(Ordering::SeqCst)
}

/// Another thread's global-mode capture on a stream of its own, begun before this returns:
/// `go` ends it, and the thread's result says whether it ended valid.
pub fn global_capture_beside() -> (
    std::sync::mpsc::Sender<()>,
    std::thread::JoinHandle<Result<(), String>>,
) {
    let (begun_tx, begun_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let capturer = std::thread::spawn(move || -> Result<(), String> {
        bind_device0();
        let mut st: sys::CUstream = std::ptr::null_mut();
        // SAFETY: plain driver calls on a stream this thread creates and destroys, and a graph
        // owned here.
        unsafe {
            sys::cuStreamCreate(&mut st, 1)
                .result()
                .map_err(|e| e.to_string())?;
            sys::cuStreamBeginCapture_v2(
                st,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            )
            .result()
            .map_err(|e| format!("begin: {e}"))?;
            begun_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            let mut g: sys::CUgraph = std::ptr::null_mut();
            let ended = sys::cuStreamEndCapture(st, &mut g)
                .result()
                .map_err(|e| format!("the capture was invalidated: {e}"));
            if !g.is_null() {
                sys::cuGraphDestroy(g);
            }
            sys::cuStreamDestroy_v2(st);
            ended
        }
    });
    begun_rx.recv().unwrap();
    (go_tx, capturer)
}
