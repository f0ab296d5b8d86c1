//! The test doubles every crate's tests share, written once (the simulator itself is the rest
//! of this crate): an [`InstantAgent`], a [`FakeDeviceMemory`], a [`ScriptedTool`] with its
//! [`ToolLog`], and a [`FakeClock`]. With [`crate::instant::InstantSnapshotter`] they stand in
//! for a backend wherever a test checks a layer above the backends (the window, contexts, the
//! memory layer, the C ABI) and not the simulator's behaviour.
//!
//! Each records what the tests assert on (the agent's submissions and completions, the
//! memory's copies and fences, the tool's callbacks in order) and takes a hook for what one
//! test needs beyond that, so no test keeps a copy of its own.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::{
    Agent, AgentId, BackendError, BackendErrorKind, BackingId, Capabilities, Clock, CopyOp,
    DeviceMemory, Digest128, DigestKey, DigestOp, Dispatch, DrainTarget, Fence, KernelId, MemLoc,
    MemoryClass, Operation, OutcomeRecord, PassCompletion, Phase, PointerInfo, ReplayPayload,
    ReplayTool, Ticket, Tier, TierInfo, UserData, WaitSpec,
};
use replay_memory::Tracker;

// ----- Clock ---------------------------------------------------------------------------------

/// Time that moves only when someone sleeps; nothing really sleeps. [`FakeClock::on_sleep`]
/// runs a hook at the next sleep (a test that acts while the window waits).
#[derive(Default)]
pub struct FakeClock {
    nanos: AtomicU64,
    hook: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl std::fmt::Debug for FakeClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("FakeClock").field(&self.now()).finish()
    }
}

impl FakeClock {
    /// Runs `f` at the next [`Clock::sleep`], once.
    pub fn on_sleep(&self, f: impl FnOnce() + Send + 'static) {
        *self.hook.lock() = Some(Box::new(f));
    }

    /// Bounds for waits on this clock: 2 s timeout, 5 s progress, 10 ms slices.
    pub fn wait(&self) -> WaitSpec<'_> {
        WaitSpec {
            clock: self,
            timeout: Duration::from_secs(2),
            progress: Duration::from_secs(5),
            slice: Duration::from_millis(10),
        }
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
    fn sleep(&self, d: Duration) {
        self.nanos.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
        let hook = self.hook.lock().take();
        if let Some(f) = hook {
            f();
        }
    }
}

// ----- Agent ---------------------------------------------------------------------------------

/// How an [`InstantAgent`] fails one pass ([`InstantAgent::fail_pass`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassFault {
    /// `submit_pass` refuses it (it does not run).
    Refused,
    /// `submit_pass` fails after the launch (`AfterSubmit`: it may run).
    AfterSubmit,
    /// It never completes (`poll_pass` answers `None`).
    Stuck,
}

/// Called at each submission of an [`InstantAgent`]: the dispatch, and the pass (`None`: the
/// ordinary run).
pub type SubmitHook = Box<dyn Fn(&Dispatch, Option<u32>) + Send + Sync>;

/// An agent whose every operation completes at once, without threads, so what remains of a
/// window is the core's own work. It counts passes, ordinary runs and completion signals; pass
/// `i` reports `pass_seconds * (i + 1)` of GPU time; [`InstantAgent::on_submit`] sees every
/// submission (a participant consulting contexts, say).
pub struct InstantAgent {
    id: AgentId,
    capabilities: Capabilities,
    fault: Option<(u32, PassFault)>,
    pass_seconds: f64,
    on_submit: Option<SubmitHook>,
    passes: AtomicU64,
    ordinary: AtomicU64,
    completions: AtomicU64,
}

impl Default for InstantAgent {
    fn default() -> Self {
        Self::new(AgentId(0))
    }
}

impl std::fmt::Debug for InstantAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstantAgent")
            .field("id", &self.id)
            .field("passes", &self.passes())
            .field("ordinary", &self.ordinary())
            .field("completions", &self.completions())
            .finish_non_exhaustive()
    }
}

impl InstantAgent {
    /// Agent `id`, passes of no GPU time, no hook.
    pub fn new(id: AgentId) -> Self {
        Self {
            id,
            capabilities: Capabilities::empty(),
            fault: None,
            pass_seconds: 0.0,
            on_submit: None,
            passes: AtomicU64::new(0),
            ordinary: AtomicU64::new(0),
            completions: AtomicU64::new(0),
        }
    }

    /// Reports `caps` (default: none). With `ORDERED_RESTORE`, pair it with a
    /// [`FakeDeviceMemory`] whose `State::ordering` is set: its copies complete at submission,
    /// so every pass is ordered after them.
    pub fn capabilities(mut self, caps: Capabilities) -> Self {
        self.capabilities = caps;
        self
    }

    /// Fails pass `pass` as `fault` says.
    pub fn fail_pass(mut self, pass: u32, fault: PassFault) -> Self {
        self.fault = Some((pass, fault));
        self
    }

    /// Pass `i` reports `seconds * (i + 1)` of GPU time.
    pub fn pass_seconds(mut self, seconds: f64) -> Self {
        self.pass_seconds = seconds;
        self
    }

    /// `hook` runs at every pass and ordinary submission, on the submitting thread.
    pub fn on_submit(
        mut self,
        hook: impl Fn(&Dispatch, Option<u32>) + Send + Sync + 'static,
    ) -> Self {
        self.on_submit = Some(Box::new(hook));
        self
    }

    /// Passes submitted.
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// Ordinary runs submitted.
    pub fn ordinary(&self) -> u64 {
        self.ordinary.load(Ordering::Relaxed)
    }

    /// Completion signals.
    pub fn completions(&self) -> u64 {
        self.completions.load(Ordering::Relaxed)
    }
}

impl Agent for InstantAgent {
    fn id(&self) -> AgentId {
        self.id
    }

    fn graph_node(&self) -> Option<replay_core::GraphNode> {
        crate::agent::current_graph_node()
    }
    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }
    fn begin_drain(&self, _: DrainTarget) -> Result<Ticket, BackendError> {
        Ok(Ticket(0))
    }
    fn poll_drain(&self, _: Ticket, _: Duration) -> Result<bool, BackendError> {
        Ok(true)
    }
    fn submit_pass(&self, dispatch: &Dispatch, pass: u32) -> Result<Ticket, BackendError> {
        if self.fault == Some((pass, PassFault::Refused)) {
            return Err(BackendError::on(self.id, "submit pass").error(
                BackendErrorKind::Other,
                "injected: the queue refused the pass",
            ));
        }
        self.passes.fetch_add(1, Ordering::Relaxed);
        if let Some(h) = &self.on_submit {
            h(dispatch, Some(pass));
        }
        if self.fault == Some((pass, PassFault::AfterSubmit)) {
            return Err(BackendError::on(self.id, "submit pass").error(
                BackendErrorKind::AfterSubmit,
                "injected: the pass was launched, then the call failed",
            ));
        }
        Ok(Ticket(u64::from(pass)))
    }
    fn poll_pass(
        &self,
        ticket: Ticket,
        _: Duration,
    ) -> Result<Option<PassCompletion>, BackendError> {
        if self
            .fault
            .is_some_and(|(p, f)| f == PassFault::Stuck && u64::from(p) == ticket.0)
        {
            return Ok(None);
        }
        Ok(Some(PassCompletion {
            gpu_seconds: self.pass_seconds * (ticket.0 + 1) as f64,
        }))
    }
    fn abandon(&self, _: Ticket) {}
    fn flush_caches(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn submit_ordinary(&self, dispatch: &Dispatch) -> Result<(), BackendError> {
        self.ordinary.fetch_add(1, Ordering::Relaxed);
        if let Some(h) = &self.on_submit {
            h(dispatch, None);
        }
        Ok(())
    }
    fn signal_completion(&self, _: &Dispatch) -> Result<(), BackendError> {
        self.completions.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

// ----- Tool ----------------------------------------------------------------------------------

/// What a [`ScriptedTool`] and the doubles around it saw, in order: the tool writes
/// `CONFIG ENTER`, `PASS ENTER <pass>`, `PASS EXIT <pass>`, `continue? <pass>` and
/// `CONFIG EXIT <outcome> <reason>`; a test may push its own entries into the same log.
pub type ToolLog = Arc<Mutex<Vec<String>>>;

/// What a [`ScriptedTool`] does.
#[derive(Debug, Clone, Default)]
pub struct ToolScript {
    /// The pass count asked for in CONFIG ENTER (`None`: no pass-count callback, no replay).
    pub passes: Option<u64>,
    /// The pass count for a kernel (by `KernelId`), over `passes`.
    pub kernel_passes: HashMap<u64, u64>,
    /// Continue answers after pass `i` (missing: 1). `Some` installs a continue callback.
    pub continue_answers: Option<Vec<i32>>,
    /// Panics in this callback (`"PASS ENTER"`, ...) of this pass.
    pub panic_at: Option<(&'static str, u32)>,
}

/// Called at every callback of a [`ScriptedTool`], after its script.
pub type ToolHook =
    Arc<dyn Fn(Operation, Phase, &mut ReplayPayload<'_>, &mut UserData) + Send + Sync>;

/// A [`ToolHook`] running `f` with the pass index at one callback (`op`, `phase`) only.
pub fn at(op: Operation, phase: Phase, f: impl Fn(u32) + Send + Sync + 'static) -> ToolHook {
    Arc::new(move |o, ph, p, _| {
        if (o, ph) == (op, phase) {
            f(p.current_pass);
        }
    })
}

/// A tool that logs every callback ([`ToolLog`]), keeps the outcome of each CONFIG EXIT,
/// follows its [`ToolScript`] (which a test may change between dispatches) and runs its hooks.
/// It sets the user data to 1000 in CONFIG ENTER.
pub struct ScriptedTool {
    log: ToolLog,
    script: Mutex<ToolScript>,
    hooks: Mutex<Vec<ToolHook>>,
    configs: Mutex<Vec<String>>,
    outcomes: Mutex<Vec<(KernelId, OutcomeRecord)>>,
}

impl std::fmt::Debug for ScriptedTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedTool")
            .field("script", &*self.script.lock())
            .field("log", &self.log.lock().len())
            .finish_non_exhaustive()
    }
}

impl ScriptedTool {
    /// A tool writing into `log`.
    pub fn new(log: ToolLog, script: ToolScript) -> Arc<Self> {
        Arc::new(Self {
            log,
            script: Mutex::new(script),
            hooks: Mutex::new(Vec::new()),
            configs: Mutex::new(Vec::new()),
            outcomes: Mutex::new(Vec::new()),
        })
    }

    /// Its log.
    pub fn log(&self) -> &ToolLog {
        &self.log
    }

    /// Replaces the script for the next dispatches.
    pub fn set_script(&self, script: ToolScript) {
        *self.script.lock() = script;
    }

    /// Asks for `passes` passes from the next dispatch on (the rest of the script unchanged).
    pub fn set_passes(&self, passes: Option<u64>) {
        self.script.lock().passes = passes;
    }

    /// Asks for `passes` passes for `kernel` (its `KernelId`) from the next dispatch on.
    pub fn set_kernel_passes(&self, kernel: u64, passes: u64) {
        self.script.lock().kernel_passes.insert(kernel, passes);
    }

    /// Runs `hook` (alone) at every callback after the script (`None`: no hook).
    pub fn set_hook(&self, hook: Option<ToolHook>) {
        *self.hooks.lock() = hook.into_iter().collect();
    }

    /// Runs `hook` too, after the hooks already there.
    pub fn add_hook(&self, hook: ToolHook) {
        self.hooks.lock().push(hook);
    }

    /// How many entries of its log start with `entry` (`"PASS EXIT"`: every pass's).
    pub fn count(&self, entry: &str) -> usize {
        self.log
            .lock()
            .iter()
            .filter(|e| e.starts_with(entry))
            .count()
    }

    /// The kernel names CONFIG ENTER saw, oldest first.
    pub fn config_kernels(&self) -> Vec<String> {
        self.configs.lock().clone()
    }

    /// The outcomes CONFIG EXIT carried, oldest first.
    pub fn outcomes(&self) -> Vec<OutcomeRecord> {
        self.outcomes
            .lock()
            .iter()
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// The outcomes CONFIG EXIT carried for `kernel`, oldest first.
    pub fn outcomes_of(&self, kernel: KernelId) -> Vec<OutcomeRecord> {
        let all = self.outcomes.lock();
        all.iter()
            .filter(|(k, _)| *k == kernel)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// Forgets the log, the kernels, the outcomes, the hooks, and sets `script`.
    pub fn reset(&self, script: ToolScript) {
        self.log.lock().clear();
        self.configs.lock().clear();
        self.outcomes.lock().clear();
        self.hooks.lock().clear();
        self.set_script(script);
    }
}

impl ReplayTool for ScriptedTool {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, ud: &mut UserData) {
        let name = match (op, phase) {
            (Operation::Config, Phase::Enter) => "CONFIG ENTER",
            (Operation::Config, Phase::Exit) => "CONFIG EXIT",
            (Operation::Pass, Phase::Enter) => "PASS ENTER",
            (Operation::Pass, Phase::Exit) => "PASS EXIT",
        };
        match (op, phase) {
            (Operation::Pass, _) => self.log.lock().push(format!("{name} {}", p.current_pass)),
            (Operation::Config, Phase::Exit) => {
                let o = p.outcome.expect("CONFIG EXIT carries the outcome");
                self.outcomes
                    .lock()
                    .push((p.dispatch_info.kernel_id, o.clone()));
                self.log.lock().push(format!(
                    "{name} {} {}",
                    o.outcome.as_str(),
                    o.reason.as_str()
                ));
            }
            _ => {
                let kernel = p.dispatch_info.kernel_name.to_string();
                self.configs.lock().push(kernel);
                self.log.lock().push(name.into());
            }
        }
        let script = self.script.lock().clone();
        if script.panic_at == Some((name, p.current_pass)) {
            panic!("scripted panic in {name}");
        }
        if (op, phase) == (Operation::Config, Phase::Enter) {
            *ud = 1000;
            let kernel = p.dispatch_info.kernel_id.0;
            if let Some(n) = script.kernel_passes.get(&kernel).copied().or(script.passes) {
                p.replay_pass_count = Some(Arc::new(move |_, _| n));
            }
            if let Some(ans) = script.continue_answers {
                let log = self.log.clone();
                p.replay_continue = Some(Arc::new(move |_, pass, _, _| {
                    log.lock().push(format!("continue? {pass}"));
                    ans.get(pass as usize).copied().unwrap_or(1)
                }));
            }
        }
        // Cloned out: hooks may run on several threads at once, or replace themselves.
        let hooks = self.hooks.lock().clone();
        for h in hooks {
            h(op, phase, p, ud);
        }
    }
}

// ----- Device memory -------------------------------------------------------------------------
//
// A fake [`DeviceMemory`]: host `Vec`s stand in for device allocations and backing memory,
// copies and digests really move and hash bytes, fences complete after a configurable latency
// on a [`FakeClock`], and failures can be injected. Tests read and poke its [`State`].

#[derive(Debug)]
struct PendingFence {
    done_at: Duration,
    digests: Option<Vec<Digest128>>,
}

/// Everything the fake holds; tests read and poke it directly.
#[derive(Debug, Default)]
pub struct State {
    /// Application allocations by base.
    pub mem: BTreeMap<u64, Vec<u8>>,
    /// Backing allocations.
    pub backing: HashMap<u64, (Tier, Vec<u8>)>,
    next_id: u64,
    /// Remaining capacity per tier (`None`: no such tier), indexed like `Tier::ALL`.
    pub avail: [Option<u64>; 3],
    /// Copy bandwidth reported per tier, indexed like `Tier::ALL` (`None`: 10 GB/s each).
    pub gbps: Option<[f64; 3]>,
    /// `alloc_backing` fails for this tier.
    pub fail_alloc: Option<Tier>,
    /// The next this many `submit_copies` calls fail.
    pub fail_next_copies: u32,
    /// Every copy batch touching this device address fails.
    pub fail_copies_at: Option<u64>,
    /// Fences never complete.
    pub stuck: bool,
    /// Time a batch takes.
    pub latency: Duration,
    /// The next this many `submit_digests` calls fail.
    pub fail_next_digests: u32,
    /// What the runtime says about addresses (`query_pointer`): allocations it knows.
    pub pointers: Vec<PointerInfo>,
    /// `query_pointer` fails.
    pub fail_queries: bool,
    /// Every address `query_pointer` was asked about.
    pub queries: Vec<u64>,
    fences: HashMap<u64, PendingFence>,
    next_fence: u64,
    // Counters.
    /// Backing allocations made.
    pub allocs: u32,
    /// Backing allocations freed.
    pub frees: u32,
    /// `submit_copies` calls.
    pub copy_batches: u32,
    /// Every copy submitted, in order.
    pub copy_ops: Vec<CopyOp>,
    /// `submit_digests` calls.
    pub digest_batches: u32,
    /// Fences abandoned.
    pub abandoned: u32,
    /// Copies into application memory: `(address, length)`.
    pub device_writes: Vec<(u64, u64)>,
    /// `order_after` accepts fences (a device that orders later work after a restore).
    pub ordering: bool,
    /// Fences `order_after` accepted and no poll saw complete yet.
    pub ordered: Vec<u64>,
    /// Every `poll_fence` call (a host wait), by fence, in order.
    pub polls: Vec<u64>,
    /// Polling an ordered fence fails (a restore that failed on the device).
    pub fail_ordered_poll: bool,
    /// Ordered fences never complete (their copies were made; the device is stuck).
    pub stuck_ordered: bool,
    /// The last fence made.
    pub last_fence: u64,
}

fn idx(t: Tier) -> usize {
    Tier::ALL.iter().position(|x| *x == t).unwrap()
}

/// A fake [`DeviceMemory`] (see the module documentation).
#[derive(Debug)]
pub struct FakeDeviceMemory {
    /// The agent it serves.
    pub agent: AgentId,
    /// The clock its fences complete on.
    pub clock: Arc<FakeClock>,
    /// Everything it holds.
    pub st: Mutex<State>,
}

impl FakeDeviceMemory {
    /// A device of `agent` on `clock` with `avail` bytes per tier (indexed like `Tier::ALL`).
    pub fn new(agent: AgentId, clock: Arc<FakeClock>, avail: [Option<u64>; 3]) -> Self {
        Self {
            agent,
            clock,
            st: Mutex::new(State {
                avail,
                next_id: 1,
                next_fence: 1,
                ..State::default()
            }),
        }
    }

    /// The application allocates: memory filled with a pattern derived from `base`, reported to
    /// the tracker.
    pub fn app_alloc(&self, tracker: &Tracker, base: u64, size: u64, class: MemoryClass) -> u64 {
        let data = (0..size)
            .map(|i| (base.wrapping_add(i * 7) % 251) as u8)
            .collect();
        self.st.lock().mem.insert(base, data);
        tracker.record_alloc(self.agent, base, size, class)
    }

    /// Memory nobody reports to the tracker (module variables live in code objects).
    pub fn raw_alloc(&self, base: u64, size: u64) {
        let data = (0..size)
            .map(|i| (base.wrapping_add(i * 13) % 241) as u8)
            .collect();
        self.st.lock().mem.insert(base, data);
    }

    /// Memory the runtime knows and the tracker never heard of (`query_pointer` describes it).
    pub fn runtime_alloc(&self, base: u64, size: u64, class: MemoryClass, owner: Option<AgentId>) {
        self.raw_alloc(base, size);
        self.st.lock().pointers.push(PointerInfo {
            base,
            size,
            class,
            owner,
        });
    }

    /// Memory the runtime knew is released behind the tracker's back.
    pub fn runtime_free(&self, base: u64) {
        let mut st = self.st.lock();
        st.pointers.retain(|p| p.base != base);
        st.mem.remove(&base);
    }

    /// The application frees: recorded first, then released.
    pub fn app_free(&self, tracker: &Tracker, base: u64) {
        tracker.record_free(self.agent, base);
        self.st.lock().mem.remove(&base);
    }

    /// Writes application memory directly (the host's view).
    pub fn write(&self, addr: u64, bytes: &[u8]) {
        let mut st = self.st.lock();
        let (b, m) = containing(&mut st.mem, addr, bytes.len() as u64).expect("write inside");
        let off = (addr - b) as usize;
        m[off..off + bytes.len()].copy_from_slice(bytes);
    }

    /// Reads application memory directly.
    pub fn read(&self, addr: u64, len: u64) -> Vec<u8> {
        let mut st = self.st.lock();
        let (b, m) = containing(&mut st.mem, addr, len).expect("read inside");
        let off = (addr - b) as usize;
        m[off..off + len as usize].to_vec()
    }

    /// All application memory, by base.
    pub fn memory(&self) -> BTreeMap<u64, Vec<u8>> {
        self.st.lock().mem.clone()
    }

    /// Backing allocations live (allocated and not freed).
    pub fn backing_live(&self) -> usize {
        self.st.lock().backing.len()
    }
}

fn containing(
    mem: &mut BTreeMap<u64, Vec<u8>>,
    addr: u64,
    len: u64,
) -> Option<(u64, &mut Vec<u8>)> {
    let (&b, m) = mem.range_mut(..=addr).next_back()?;
    (addr + len <= b + m.len() as u64).then_some((b, m))
}

impl State {
    fn read_loc(&mut self, loc: MemLoc, len: u64) -> Result<Vec<u8>, String> {
        match loc {
            MemLoc::Device { addr } => {
                let (b, m) = containing(&mut self.mem, addr, len)
                    .ok_or_else(|| format!("read of unallocated device memory {addr:#x}+{len}"))?;
                let o = (addr - b) as usize;
                Ok(m[o..o + len as usize].to_vec())
            }
            MemLoc::Backing { id, offset } => {
                let (_, m) = self.backing.get(&id.0).ok_or("unknown backing")?;
                let o = offset as usize;
                m.get(o..o + len as usize)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| "backing read out of bounds".into())
            }
        }
    }

    fn write_loc(&mut self, loc: MemLoc, data: &[u8]) -> Result<(), String> {
        match loc {
            MemLoc::Device { addr } => {
                let len = data.len() as u64;
                let (b, m) = containing(&mut self.mem, addr, len)
                    .ok_or_else(|| format!("write to unallocated device memory {addr:#x}+{len}"))?;
                let o = (addr - b) as usize;
                m[o..o + data.len()].copy_from_slice(data);
                self.device_writes.push((addr, len));
                Ok(())
            }
            MemLoc::Backing { id, offset } => {
                let (_, m) = self.backing.get_mut(&id.0).ok_or("unknown backing")?;
                let o = offset as usize;
                m.get_mut(o..o + data.len())
                    .ok_or("backing write out of bounds")?
                    .copy_from_slice(data);
                Ok(())
            }
        }
    }
}

fn touches(op: &CopyOp, addr: u64) -> bool {
    [op.src, op.dst].iter().any(|l| match *l {
        MemLoc::Device { addr: a } => a <= addr && addr < a + op.len,
        MemLoc::Backing { .. } => false,
    })
}

impl DeviceMemory for FakeDeviceMemory {
    fn agent(&self) -> AgentId {
        self.agent
    }

    fn tier_info(&self, tier: Tier) -> Option<TierInfo> {
        let st = self.st.lock();
        st.avail[idx(tier)].map(|a| TierInfo {
            available_bytes: a,
            gbps: st.gbps.map_or(10.0, |g| g[idx(tier)]),
        })
    }

    fn alloc_backing(&self, tier: Tier, bytes: u64) -> Result<BackingId, BackendError> {
        let mut st = self.st.lock();
        let avail = st.avail[idx(tier)];
        if st.fail_alloc == Some(tier) || avail.is_none_or(|a| a < bytes) {
            return Err(BackendError::on(self.agent, "alloc backing")
                .error(BackendErrorKind::OutOfMemory, "out of memory"));
        }
        st.avail[idx(tier)] = avail.map(|a| a - bytes);
        let id = st.next_id;
        st.next_id += 1;
        st.backing.insert(id, (tier, vec![0xEE; bytes as usize]));
        st.allocs += 1;
        Ok(BackingId(id))
    }

    fn free_backing(&self, id: BackingId) {
        let mut st = self.st.lock();
        let (tier, m) = st.backing.remove(&id.0).expect("free of a live backing id");
        let i = idx(tier);
        st.avail[i] = st.avail[i].map(|a| a + m.len() as u64);
        st.frees += 1;
    }

    fn submit_copies(&self, ops: &[CopyOp]) -> Result<Fence, BackendError> {
        let mut st = self.st.lock();
        st.copy_batches += 1;
        st.copy_ops.extend_from_slice(ops);
        if st.fail_next_copies > 0 {
            st.fail_next_copies -= 1;
            return Err(BackendError::on(self.agent, "submit copies")
                .error(BackendErrorKind::CopyFailed, "injected"));
        }
        if let Some(a) = st.fail_copies_at {
            if ops.iter().any(|o| touches(o, a)) {
                return Err(BackendError::on(self.agent, "submit copies")
                    .error(BackendErrorKind::CopyFailed, "injected at address"));
            }
        }
        if !st.stuck {
            for op in ops {
                let data = st
                    .read_loc(op.src, op.len)
                    .map_err(|m| BackendError::on(self.agent, "copy").invalid(m))?;
                st.write_loc(op.dst, &data)
                    .map_err(|m| BackendError::on(self.agent, "copy").invalid(m))?;
            }
        }
        let id = st.next_fence;
        st.next_fence += 1;
        st.last_fence = id;
        let done_at = self.clock.now() + st.latency;
        st.fences.insert(
            id,
            PendingFence {
                done_at,
                digests: None,
            },
        );
        Ok(Fence(id))
    }

    fn order_after(&self, fence: Fence) -> Result<(), BackendError> {
        let mut st = self.st.lock();
        if !st.ordering {
            return Err(BackendError::on(self.agent, "order after fence")
                .error(BackendErrorKind::Unsupported, "no ordering"));
        }
        if !st.fences.contains_key(&fence.0) {
            return Err(BackendError::on(self.agent, "order after fence").invalid("unknown fence"));
        }
        st.ordered.push(fence.0);
        Ok(())
    }

    fn wait_ordered(&self, budget: Duration) -> Result<bool, BackendError> {
        let st = self.st.lock();
        let stuck = st.stuck_ordered && !st.ordered.is_empty();
        drop(st);
        if stuck {
            self.clock.sleep(budget);
        }
        Ok(!stuck)
    }

    fn submit_digests(&self, ops: &[DigestOp], key: DigestKey) -> Result<Fence, BackendError> {
        let mut st = self.st.lock();
        st.digest_batches += 1;
        if st.fail_next_digests > 0 {
            st.fail_next_digests -= 1;
            return Err(BackendError::on(self.agent, "submit digests")
                .error(BackendErrorKind::CopyFailed, "injected"));
        }
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            let data = st
                .read_loc(op.at, op.len)
                .map_err(|m| BackendError::on(self.agent, "digest").invalid(m))?;
            out.push(replay_core::digest::digest(key, &data));
        }
        let id = st.next_fence;
        st.next_fence += 1;
        let done_at = self.clock.now() + st.latency;
        st.fences.insert(
            id,
            PendingFence {
                done_at,
                digests: Some(out),
            },
        );
        Ok(Fence(id))
    }

    fn poll_fence(&self, fence: Fence, budget: Duration) -> Result<bool, BackendError> {
        let (stuck, done_at) = {
            let mut st = self.st.lock();
            st.polls.push(fence.0);
            let ordered = st.ordered.contains(&fence.0);
            if ordered && st.fail_ordered_poll {
                return Err(BackendError::on(self.agent, "poll fence").error(
                    BackendErrorKind::CopyFailed,
                    "injected: the copy engine faulted",
                ));
            }
            let f = st.fences.get(&fence.0).ok_or_else(|| {
                BackendError::on(self.agent, "poll fence").invalid("unknown fence")
            })?;
            (st.stuck || (ordered && st.stuck_ordered), f.done_at)
        };
        let now = self.clock.now();
        if !stuck && now >= done_at {
            self.st.lock().ordered.retain(|&f| f != fence.0);
            return Ok(true);
        }
        let wait = if stuck {
            budget
        } else {
            budget.min(done_at - now)
        };
        self.clock.sleep(wait);
        let done = !stuck && self.clock.now() >= done_at;
        if done {
            self.st.lock().ordered.retain(|&f| f != fence.0);
        }
        Ok(done)
    }

    fn take_digests(&self, fence: Fence) -> Result<Vec<Digest128>, BackendError> {
        self.st
            .lock()
            .fences
            .remove(&fence.0)
            .and_then(|f| f.digests)
            .ok_or_else(|| BackendError::on(self.agent, "take digests").invalid("no digests"))
    }

    fn query_pointer(&self, addr: u64) -> Result<Option<PointerInfo>, BackendError> {
        let mut st = self.st.lock();
        st.queries.push(addr);
        if st.fail_queries {
            return Err(BackendError::on(self.agent, "query pointer")
                .error(BackendErrorKind::Other, "injected"));
        }
        Ok(st
            .pointers
            .iter()
            .find(|p| p.base <= addr && addr < p.base + p.size)
            .copied())
    }

    fn abandon_fence(&self, fence: Fence) {
        let mut st = self.st.lock();
        st.fences.remove(&fence.0);
        st.ordered.retain(|&f| f != fence.0);
        st.abandoned += 1;
    }
}
