//! What every case shares: the backend, the replay service with its tool, the kernels, fills,
//! reference runs, digests and bounded waits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_core::contract::{Operation, Phase, ReplayPayload, ReplayTool, UserData};
use replay_core::{
    ContextId, Digest128, DigestKey, DispatchReport, NoContextControl, OutcomeRecord, Policy,
    ReplayService, RestoreMode, Scope, Subscription, SystemClock,
};
use replay_cuda::{
    Allocation, ArgBlock, CompletionEvent, CudaBackend, CudaFunction, CudaModule, DevicePtr,
    LaunchConfig, LaunchOptions, Queue,
};
use serde_json::{json, Value};

/// The bench's kernels (kernels.cu).
pub const KERNELS_SRC: &str = include_str!("kernels.cu");
/// The module-variable kernels (globals.cu).
pub const GLOBALS_SRC: &str = include_str!("globals.cu");

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
/// Bound of every wait the bench does outside a window.
pub const WAIT: Duration = Duration::from_secs(180);

/// A hook the tool runs in PASS ENTER or PASS EXIT, with the pass index.
pub type Hook = Box<dyn FnMut(u32) + Send>;

/// What the tool does for the next launches.
#[derive(Default)]
pub struct ToolState {
    /// Passes to ask for (0 or 1: no replay).
    pub passes: u64,
    /// Ranges digested in every PASS ENTER (the pass's inputs).
    pub digest_ranges: Vec<(u64, u64)>,
    /// Digests per pass, filled by the tool.
    pub pass_digests: Vec<Vec<Digest128>>,
    /// Errors the tool met (a digest that failed).
    pub errors: Vec<String>,
    /// Panics in CONFIG ENTER (provokes `callback_failed`).
    pub panic_in_config: bool,
    pub on_pass_enter: Option<Hook>,
    pub on_pass_exit: Option<Hook>,
    /// Progress on stderr for long loops.
    pub label: String,
    last_progress: Option<Instant>,
    started: Option<Instant>,
}

/// The tool: asks for `passes`, digests inputs, runs hooks.
pub struct BenchTool {
    pub state: Mutex<ToolState>,
    pub memory: Arc<replay_cuda::CudaMemory>,
    pub key: DigestKey,
}

impl ReplayTool for BenchTool {
    fn callback(
        &self,
        op: Operation,
        phase: Phase,
        payload: &mut ReplayPayload<'_>,
        _user_data: &mut UserData,
    ) {
        match (op, phase) {
            (Operation::Config, Phase::Enter) => {
                let mut st = self.state.lock();
                if st.panic_in_config {
                    drop(st);
                    panic!("cuda_bench: a tool callback that panics (provoking callback_failed)");
                }
                let n = st.passes;
                st.started = Some(Instant::now());
                st.last_progress = None;
                if n >= 1 {
                    payload.replay_pass_count = Some(Arc::new(move |_, _| n));
                }
            }
            (Operation::Pass, Phase::Enter) => {
                let pass = payload.current_pass;
                let (ranges, hook) = {
                    let mut st = self.state.lock();
                    (st.digest_ranges.clone(), st.on_pass_enter.take())
                };
                if !ranges.is_empty() {
                    match self.memory.digest_blocking(&ranges, self.key, WAIT) {
                        Ok(d) => self.state.lock().pass_digests.push(d),
                        Err(e) => self.state.lock().errors.push(e.to_string()),
                    }
                }
                if let Some(mut h) = hook {
                    h(pass);
                    self.state.lock().on_pass_enter = Some(h);
                }
            }
            (Operation::Pass, Phase::Exit) => {
                let pass = payload.current_pass;
                let total = payload.total_passes;
                let hook = self.state.lock().on_pass_exit.take();
                if let Some(mut h) = hook {
                    h(pass);
                    self.state.lock().on_pass_exit = Some(h);
                }
                let mut st = self.state.lock();
                let now = Instant::now();
                let since = st.last_progress.or(st.started).unwrap_or(now);
                if now.duration_since(since) > Duration::from_secs(3) {
                    st.last_progress = Some(now);
                    eprintln!(
                        "[cuda_bench]   {} pass {}/{} ({:.1} s)",
                        st.label,
                        pass + 1,
                        total,
                        st.started.map_or(0.0, |s| s.elapsed().as_secs_f64())
                    );
                }
            }
            _ => {}
        }
    }
}

/// The bench's kernels.
pub struct Kernels {
    pub _module: Arc<CudaModule>,
    pub fill: CudaFunction,
    pub rmw: CudaFunction,
    pub read: CudaFunction,
    pub indirect: CudaFunction,
    pub spin: CudaFunction,
    pub tiny: CudaFunction,
}

/// Everything a case needs.
pub struct Bench {
    pub backend: Arc<CudaBackend>,
    pub service: &'static ReplayService,
    pub tool: Arc<BenchTool>,
    pub k: Kernels,
    pub queue: Arc<Queue>,
    pub key: DigestKey,
    pub done: Arc<CompletionEvent>,
    pub sms: u32,
}

/// The outcome of one replayed launch.
pub struct Run {
    pub record: Option<OutcomeRecord>,
    /// Wall time of the launch call (the whole window).
    pub wall: f64,
    pub pass_digests: Vec<Vec<Digest128>>,
    pub tool_errors: Vec<String>,
}

impl Run {
    pub fn rec(&self) -> Result<&OutcomeRecord, String> {
        self.record
            .as_ref()
            .ok_or_else(|| "no outcome record (the service did not consider the launch)".into())
    }

    /// Every pass saw the same inputs (and at least one pass was digested).
    pub fn inputs_identical(&self) -> Result<(), String> {
        if !self.tool_errors.is_empty() {
            return Err(format!("tool errors: {:?}", self.tool_errors));
        }
        let Some(first) = self.pass_digests.first() else {
            return Err("no pass digested".into());
        };
        for (i, d) in self.pass_digests.iter().enumerate() {
            if d != first {
                let chunk = d.iter().zip(first).position(|(a, b)| a != b);
                return Err(format!(
                    "pass {i} saw other inputs than pass 0 (first differing chunk {chunk:?})"
                ));
            }
        }
        Ok(())
    }
}

pub fn record_json(r: &OutcomeRecord) -> Value {
    serde_json::from_str(&r.to_json()).unwrap_or(Value::Null)
}

impl Bench {
    pub fn new(backend: Arc<CudaBackend>) -> Result<Self, String> {
        let key = replay_core::digest::key_from_seed(0x6b72_6570_6c61_7921);
        let service: &'static ReplayService = Box::leak(Box::new(ReplayService::new(
            Policy::default(),
            Arc::new(SystemClock::new()),
            Arc::new(NoContextControl),
        )));
        let tool = Arc::new(BenchTool {
            state: Mutex::new(ToolState::default()),
            memory: Arc::clone(backend.memory()),
            key,
        });
        service
            .configure(
                ContextId(1),
                Subscription::CONFIG | Subscription::PASS,
                Arc::clone(&tool) as Arc<dyn ReplayTool>,
            )
            .map_err(|e| e.to_string())?;
        service.start().map_err(|e| e.to_string())?;
        let t = Instant::now();
        let module = backend
            .modules()
            .compile_and_load(KERNELS_SRC, "kernels.cu", &[])
            .map_err(|e| e.to_string())?;
        let f = |n: &str| module.function(n).map_err(|e| e.to_string());
        let k = Kernels {
            fill: f("kr_fill")?,
            rmw: f("kr_rmw")?,
            read: f("kr_read")?,
            indirect: f("kr_indirect")?,
            spin: f("kr_spin")?,
            tiny: f("kr_tiny")?,
            _module: module,
        };
        progress(&format!(
            "kernels compiled and loaded in {:.2} s",
            t.elapsed().as_secs_f64()
        ));
        let queue = backend
            .create_queue(replay_cuda::QueueKind::Compute)
            .map_err(|e| e.to_string())?;
        let done = CompletionEvent::new(backend.device()).map_err(|e| e.to_string())?;
        let sms = backend.device().info().multiprocessors.max(1) as u32;
        Ok(Self {
            backend,
            service,
            tool,
            k,
            queue,
            key,
            done,
            sms,
        })
    }

    /// A grid-stride launch for `n` items.
    pub fn grid(&self, n: u64) -> LaunchConfig {
        let threads = 256u32;
        let blocks = n
            .div_ceil(u64::from(threads))
            .clamp(1, u64::from(self.sms) * 32) as u32;
        LaunchConfig::linear(blocks, threads)
    }

    /// Waits for everything on the bench's queue (bounded).
    pub fn sync(&self) -> Result<(), String> {
        self.sync_queue(&self.queue)
    }

    pub fn sync_queue(&self, q: &Queue) -> Result<(), String> {
        self.done.record(q).map_err(|e| e.to_string())?;
        match self.done.wait(WAIT) {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!("the GPU did not finish within {WAIT:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    pub fn alloc(&self, bytes: u64) -> Result<Allocation, String> {
        self.backend
            .allocator()
            .alloc_device(bytes)
            .map_err(|e| format!("cuMemAlloc of {bytes} bytes: {e}"))
    }

    /// Fills `words` 8-byte words at `ptr` with the pattern of `seed` (asynchronous).
    pub fn fill_words(&self, ptr: u64, words: u64, seed: u64) -> Result<(), String> {
        let args = ArgBlock::new().arg(DevicePtr(ptr)).arg(words).arg(seed);
        // SAFETY: kr_fill(u64* p, u64 n, u64 seed) writes n words at p; callers pass memory
        // they own of at least that size.
        unsafe {
            self.backend.launch_plain(
                self.service,
                &self.k.fill,
                self.grid(words),
                &self.queue,
                &args,
            )
        }
        .map_err(|e| e.to_string())
    }

    pub fn fill(&self, a: &Allocation, seed: u64) -> Result<(), String> {
        self.fill_words(a.ptr(), a.len() / 8, seed)
    }

    pub fn rmw_args(ptr: u64, words: u64, k: u64) -> ArgBlock {
        ArgBlock::new().arg(DevicePtr(ptr)).arg(words).arg(k)
    }

    /// Runs kr_rmw once, outside the service (the reference execution).
    pub fn rmw_plain(&self, ptr: u64, words: u64, k: u64) -> Result<(), String> {
        let args = Self::rmw_args(ptr, words, k);
        // SAFETY: kr_rmw(u64* p, u64 n, u64 k) reads and writes n words at p, memory the
        // caller owns.
        unsafe {
            self.backend.launch_plain(
                self.service,
                &self.k.rmw,
                self.grid(words),
                &self.queue,
                &args,
            )
        }
        .map_err(|e| e.to_string())
    }

    /// Chunk digests (1 MiB) of whole allocations.
    pub fn digests(&self, allocs: &[&Allocation]) -> Result<Vec<Digest128>, String> {
        self.sync()?;
        let mut out = Vec::new();
        for a in allocs {
            out.extend(
                self.backend
                    .memory()
                    .chunk_digests(a.ptr(), a.len(), MIB, self.key, WAIT)
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(out)
    }

    /// Chunk ranges (1 MiB) of `[ptr, ptr+len)`, for the tool's per-pass input digests.
    pub fn chunk_ranges(ptr: u64, len: u64) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        let mut off = 0;
        while off < len {
            let l = MIB.min(len - off);
            v.push((ptr + off, l));
            off += l;
        }
        v
    }

    pub fn read(&self, ptr: u64, len: u64) -> Result<Vec<u8>, String> {
        self.sync()?;
        self.backend
            .memory()
            .read_device(ptr, len, WAIT)
            .map_err(|e| e.to_string())
    }

    /// A policy for bench replays: pools kept between warm-up and steady runs.
    pub fn policy(scope: Scope, restore: RestoreMode) -> Policy {
        Policy {
            scope,
            restore,
            pool_keep_bytes: u64::MAX,
            max_passes: 4096,
            drain_timeout: Duration::from_secs(120),
            pass_timeout: Duration::from_secs(120),
            warn_seconds: 1e9,
            ..Policy::default()
        }
    }

    pub fn set_policy(&self, p: Policy) -> Result<(), String> {
        self.service.set_policy(p).map_err(|e| e.to_string())
    }

    /// Launches `func` under replay with `passes` passes (0: the tool asks for none) and
    /// digests `digest_ranges` in every PASS ENTER.
    pub fn replay(
        &self,
        label: &str,
        func: &CudaFunction,
        cfg: LaunchConfig,
        args: &ArgBlock,
        passes: u64,
        digest_ranges: Vec<(u64, u64)>,
    ) -> Result<Run, String> {
        self.replay_on(label, func, cfg, &self.queue, args, passes, digest_ranges)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn replay_on(
        &self,
        label: &str,
        func: &CudaFunction,
        cfg: LaunchConfig,
        queue: &Arc<Queue>,
        args: &ArgBlock,
        passes: u64,
        digest_ranges: Vec<(u64, u64)>,
    ) -> Result<Run, String> {
        {
            let mut st = self.tool.state.lock();
            st.passes = passes;
            st.digest_ranges = digest_ranges;
            st.pass_digests.clear();
            st.errors.clear();
            st.label = label.to_string();
        }
        let t = Instant::now();
        // SAFETY: every bench kernel's argument block is built for its signature by the caller,
        // over memory the caller owns for the whole replay.
        let report: Result<DispatchReport, _> = unsafe {
            self.backend.launch(
                self.service,
                func,
                cfg,
                queue,
                args,
                LaunchOptions::default(),
            )
        };
        let wall = t.elapsed().as_secs_f64();
        let report = report.map_err(|e| e.to_string())?;
        let (pass_digests, tool_errors) = {
            let mut st = self.tool.state.lock();
            st.passes = 0;
            st.digest_ranges.clear();
            (
                std::mem::take(&mut st.pass_digests),
                std::mem::take(&mut st.errors),
            )
        };
        Ok(Run {
            record: report.record,
            wall,
            pass_digests,
            tool_errors,
        })
    }
}

pub fn progress(msg: &str) {
    eprintln!("[cuda_bench] {msg}");
}

/// One result row: a correctness check or a measurement.
#[derive(Debug, Clone)]
pub struct Row {
    pub case: &'static str,
    pub name: String,
    pub pass: Option<bool>,
    pub data: Value,
}

impl Row {
    pub fn check(case: &'static str, name: impl Into<String>, r: Result<Value, String>) -> Self {
        let name = name.into();
        let (pass, data) = match r {
            Ok(v) => (true, v),
            Err(e) => (false, json!({ "error": e })),
        };
        progress(&format!(
            "{} {case}/{name}{}",
            if pass { "PASS" } else { "FAIL" },
            data.get("error")
                .and_then(Value::as_str)
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ));
        Self {
            case,
            name,
            pass: Some(pass),
            data,
        }
    }

    pub fn measure(case: &'static str, name: impl Into<String>, data: Value) -> Self {
        Self {
            case,
            name: name.into(),
            pass: None,
            data,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "case": self.case,
            "name": self.name,
            "pass": self.pass,
            "data": self.data,
        })
    }
}

/// `Err` unless `cond`.
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}
