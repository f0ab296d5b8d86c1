//! What every fault test shares: the serialised `world`, its policy, hooks, counts and `Case`.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use replay_core::{Operation, OutcomeRecord, Phase, Policy, ReplayService, Scope};
use replay_hsa::sys;
use replay_hsa_sim::{SimConfig, SimHsa};
use replay_mock::double::{at, ScriptedTool, ToolHook, ToolScript};

use crate::common::{
    buffer_and_args, dispatch, install_service, read, rmw, rmw_kernel, sim_with, Api,
};

/// The policy's drain and pass bounds.
pub const BOUND: Duration = Duration::from_millis(500);

/// What a test adds to the scripted tool: in PASS EXIT of pass 0 it frees `target` through
/// the wrapped `hsa_amd_memory_pool_free` `func`, once.
#[derive(Default)]
pub struct FreeAfterPass0 {
    pub target: AtomicU64,
    pub func: Mutex<Option<sys::PoolFreeFn>>,
    pub freed: AtomicU64,
}

impl FreeAfterPass0 {
    pub fn hook(self: &Arc<Self>) -> ToolHook {
        let me = self.clone();
        at(Operation::Pass, Phase::Exit, move |pass| {
            if pass != 0 {
                return;
            }
            let a = me.target.swap(0, Ordering::SeqCst);
            let free = *me.func.lock().unwrap();
            if let (Some(free), true) = (free, a != 0) {
                // SAFETY: the wrapped free of an allocation the test made.
                assert_eq!(unsafe { free(a as *mut c_void) }, 0);
                me.freed.store(1, Ordering::SeqCst);
            }
        })
    }
}

/// A scripted-tool hook called at every callback with `(operation, phase, pass)`.
pub fn hook(f: impl Fn(Operation, Phase, u32) + Send + Sync + 'static) -> ToolHook {
    Arc::new(move |op, phase, p, _| f(op, phase, p.current_pass))
}

/// The script every test starts from: a pass-count callback answering 0.
pub fn no_passes() -> ToolScript {
    ToolScript {
        passes: Some(0),
        ..Default::default()
    }
}

/// The tests' policy: short bounds.
pub fn policy() -> Policy {
    Policy {
        drain_timeout: BOUND,
        pass_timeout: BOUND,
        // The fault cases capture every tracked region (`auto` would pick `arguments`).
        scope: Scope::All,
        ..Policy::default()
    }
}

pub struct World {
    pub service: Arc<ReplayService>,
    pub tool: Arc<ScriptedTool>,
    pub free: Arc<FreeAfterPass0>,
}

pub fn world() -> (&'static World, MutexGuard<'static, ()>) {
    static SERIAL: Mutex<()> = Mutex::new(());
    static WORLD: OnceLock<World> = OnceLock::new();
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let w = WORLD.get_or_init(|| {
        let tool = ScriptedTool::new(Arc::default(), no_passes());
        let service = install_service(policy(), tool.clone());
        World {
            service,
            tool,
            free: Arc::default(),
        }
    });
    w.tool.reset(no_passes());
    w.service.set_policy(policy()).unwrap();
    w.free.target.store(0, Ordering::SeqCst);
    *w.free.func.lock().unwrap() = None;
    w.free.freed.store(0, Ordering::SeqCst);
    w.tool.add_hook(w.free.hook());
    (w, guard)
}

/// `after - before` of a per-reason count.
pub fn delta(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>, reason: &str) -> u64 {
    after.get(reason).copied().unwrap_or(0) - before.get(reason).copied().unwrap_or(0)
}

/// Waits (bounded) until `done` is 0, then checks it stays 0, the kernel ran once and the
/// buffer holds one execution.
pub fn ends_once(api: &Api, done: sys::hsa_signal_t, runs: &AtomicU64, buf: *const u64, init: u64) {
    assert_eq!(api.wait_zero(done), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(api.load(done), 0, "the completion signal fired once");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the dispatch ran once");
    assert_eq!(read(buf), rmw(init), "memory equals one execution");
}

/// One application set-up on GPU `gpu`: the `rmw` kernel, a queue, a buffer holding `init`.
pub struct Case {
    pub sim: SimHsa,
    pub api: Api,
    pub runs: Arc<AtomicU64>,
    pub kernel: u64,
    pub queue: *mut sys::hsa_queue_t,
    pub buf: *mut u64,
    pub args: *mut u8,
    pub init: u64,
}

impl Case {
    pub fn new(gpu: usize, init: u64) -> Self {
        Self::with(SimConfig::default(), gpu, init)
    }

    pub fn with(config: SimConfig, gpu: usize, init: u64) -> Self {
        let (sim, api) = sim_with(config);
        let runs = Arc::new(AtomicU64::new(0));
        let kernel = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
        let queue = api.queue(sim.gpu_agents()[gpu]);
        let (buf, args) = buffer_and_args(&sim, &api, gpu, init);
        Self {
            sim,
            api,
            runs,
            kernel,
            queue,
            buf,
            args,
            init,
        }
    }

    /// Submits the dispatch; its completion signal.
    pub fn dispatch(&self) -> sys::hsa_signal_t {
        let done = self.api.signal(1);
        self.api
            .submit(self.queue, dispatch(self.kernel, self.args, done));
        done
    }

    /// [`ends_once`] for this case.
    pub fn ends_once(&self, done: sys::hsa_signal_t) {
        ends_once(&self.api, done, &self.runs, self.buf, self.init);
    }
}

/// Runs one dispatch of `case` asking for 3 passes; checks it ended once with one declined
/// (or truncated) dispatch of `reason`; the outcome record.
pub fn expect(w: &World, case: &Case, declined: bool, reason: &str) -> Option<OutcomeRecord> {
    w.tool.set_passes(Some(3));
    let before = w.service.summary();
    let done = case.dispatch();
    case.ends_once(done);
    let s = w.service.summary();
    let (now, then) = if declined {
        (&s.declined, &before.declined)
    } else {
        (&s.truncated, &before.truncated)
    };
    assert_eq!(delta(now, then, reason), 1, "{reason}: {s:?}");
    assert_eq!(s.replayed, before.replayed, "not replayed: {s:?}");
    let outcome = w.tool.outcomes().last().cloned();
    if let Some(o) = &outcome {
        assert_eq!(o.reason.as_str(), reason, "{o:?}");
    }
    outcome
}
