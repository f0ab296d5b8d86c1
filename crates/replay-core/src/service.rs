//! The replay service: the one owner (SPEC §3), the policy (§8), the per-agent gates (§6), the
//! library's memory of misbehaving kernels, outcome delivery and the run summary.
//!
//! A process holds one service, [`ReplayService::global`]; the C ABI and the backend entry
//! points use that one. Embedders and tests may build private ones with
//! [`ReplayService::new`].

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use dashmap::DashMap;
use parking_lot::{Mutex, RwLock};

use crate::backend::{Clock, SystemClock};
use crate::contract::{ContextControl, NoContextControl, ReplayTool, Subscription};
use crate::error::ServiceError;
use crate::filter::FilterState;
use crate::locks::{AgentGate, Gates, Unlocked, WriteGate};
use crate::outcome::{OutcomeRecord, RunSummary};
use crate::policy::Policy;
use crate::types::{ContextId, KernelKey};

static GLOBAL: OnceLock<Arc<ReplayService>> = OnceLock::new();

/// Who owns the replay service.
#[derive(Clone)]
pub struct Registration {
    /// The owning context.
    pub context: ContextId,
    /// What it subscribes to.
    pub subscription: Subscription,
    /// Its callback.
    pub tool: Arc<dyn ReplayTool>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("context", &self.context)
            .field("subscription", &self.subscription)
            .finish_non_exhaustive()
    }
}

/// What the library remembers about a kernel after it misbehaved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelMemo {
    /// It wrote outside its `arguments` scope: use scope `all` from now on.
    ForceScopeAll,
    /// A pass stalled: do not replay it again.
    NoReplay,
}

/// Called with every outcome record.
pub type OutcomeSink = Arc<dyn Fn(&OutcomeRecord) + Send + Sync>;

/// What the service did with one submission.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchReport {
    /// The outcome record, for candidates and tool work; `None` for ordinary submissions.
    pub record: Option<OutcomeRecord>,
    /// Not submitted: a forwarded submission found the agent inside a replay window. The
    /// backend resubmits it later, keeping its queue order (SPEC §9.1: a runtime thread never
    /// blocks on a window).
    pub deferred: bool,
}

impl DispatchReport {
    pub(crate) fn done(record: Option<OutcomeRecord>) -> Self {
        Self {
            record,
            deferred: false,
        }
    }

    pub(crate) fn deferred() -> Self {
        Self {
            record: None,
            deferred: true,
        }
    }
}

/// The process's replay service.
pub struct ReplayService {
    pub(crate) owner: RwLock<Option<Registration>>,
    pub(crate) active: AtomicBool,
    pub(crate) policy: RwLock<Arc<Policy>>,
    pub(crate) filter_state: FilterState,
    pub(crate) next_dispatch: AtomicU64,
    pub(crate) gates: Gates,
    pub(crate) memo: DashMap<KernelKey, KernelMemo>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) contexts: Arc<dyn ContextControl>,
    pub(crate) summary: Mutex<RunSummary>,
    pub(crate) sink: RwLock<Option<OutcomeSink>>,
    /// One bit per `SubmissionKind` already warned about (no lock on the submission path).
    pub(crate) warned_kinds: AtomicU32,
    pub(crate) warned_zero: AtomicBool,
    /// Windows holding a writer lock now ([`crate::locks::WindowOpen`]).
    pub(crate) windows_open: AtomicU32,
    /// Dispatches the filter named communication kernels, run once.
    pub(crate) communication_runs: AtomicU64,
    /// Code objects (agent, id) a backend declared communication code whatever their kernels'
    /// names ([`ReplayService::mark_communication_code_object`]).
    pub(crate) communication_code: DashMap<(crate::types::AgentId, u64), ()>,
}

impl std::fmt::Debug for ReplayService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayService")
            .field("owner", &*self.owner.read())
            .field("active", &self.active.load(Ordering::Relaxed))
            .field("policy", &*self.policy.read())
            .finish_non_exhaustive()
    }
}

impl ReplayService {
    /// A private service with the given clock and context control.
    pub fn new(policy: Policy, clock: Arc<dyn Clock>, contexts: Arc<dyn ContextControl>) -> Self {
        Self {
            owner: RwLock::new(None),
            active: AtomicBool::new(false),
            policy: RwLock::new(Arc::new(policy)),
            filter_state: FilterState::default(),
            next_dispatch: AtomicU64::new(1),
            gates: Gates::default(),
            memo: DashMap::new(),
            clock,
            contexts,
            summary: Mutex::new(RunSummary::default()),
            sink: RwLock::new(None),
            warned_kinds: AtomicU32::new(0),
            warned_zero: AtomicBool::new(false),
            windows_open: AtomicU32::new(0),
            communication_runs: AtomicU64::new(0),
            communication_code: DashMap::new(),
        }
    }

    /// The process-wide service: policy from the environment (every well-formed variable is
    /// applied; a malformed one is logged and keeps its default, so a typo never takes the
    /// application down, and callers that must refuse it check `Policy::env_over`, as the C
    /// ABI's configure does), the wall clock,
    /// and no context control unless [`ReplayService::global_with`] or
    /// [`ReplayService::global_with_clock`] created it first.
    pub fn global() -> &'static ReplayService {
        Self::global_with(|| Arc::new(NoContextControl))
    }

    /// The process-wide service, created on first use with the context control `make` builds.
    pub fn global_with(make: impl FnOnce() -> Arc<dyn ContextControl>) -> &'static ReplayService {
        Self::global_slot(|| (make(), Arc::new(SystemClock::new()) as Arc<dyn Clock>))
    }

    /// The process-wide service as an `Arc` (for backends that hold it), created on first use
    /// with the context control and clock `make` returns. Later calls return the same one.
    pub fn global_with_clock(
        make: impl FnOnce() -> (Arc<dyn ContextControl>, Arc<dyn Clock>),
    ) -> Arc<ReplayService> {
        Self::global_slot(make);
        Arc::clone(GLOBAL.get().expect("initialised above"))
    }

    /// Whether the process-wide service exists yet.
    pub fn global_exists() -> bool {
        GLOBAL.get().is_some()
    }

    fn global_slot(
        make: impl FnOnce() -> (Arc<dyn ContextControl>, Arc<dyn Clock>),
    ) -> &'static ReplayService {
        GLOBAL.get_or_init(|| {
            // Every well-formed variable is kept; each malformed one (not UTF-8 included) keeps
            // its default and is logged here. Callers that must refuse to run on such a policy
            // read the errors themselves with `Policy::env_over` (the C ABI does).
            let env = Policy::env_over(Policy::default());
            for e in &env.errors {
                log::error!("[kernel-replay] {e}; that variable keeps its default");
            }
            let policy = env.policy;
            let (contexts, clock) = make();
            Arc::new(ReplayService::new(policy, clock, contexts))
        })
    }

    /// Drops the per-agent gates, the kernel memo and the warning sets, so an explicit shutdown
    /// leaves nothing reachable. Only call it when no window can be running (after shutdown).
    pub fn release_tables(&self) {
        self.gates.clear();
        self.memo.clear();
        self.memo.shrink_to_fit();
        self.warned_kinds.store(0, Ordering::Relaxed);
    }

    /// Makes `context` the owner (SPEC §3). A second call fails, even after the owner stopped.
    pub fn configure(
        &self,
        context: ContextId,
        subscription: Subscription,
        tool: Arc<dyn ReplayTool>,
    ) -> Result<(), ServiceError> {
        let mut owner = self.owner.write();
        if let Some(r) = &*owner {
            return Err(ServiceError::AlreadyConfigured { owner: r.context });
        }
        *owner = Some(Registration {
            context,
            subscription,
            tool,
        });
        Ok(())
    }

    /// Activates the owner's context.
    pub fn start(&self) -> Result<(), ServiceError> {
        if self.owner.read().is_none() {
            return Err(ServiceError::NotConfigured);
        }
        self.active.store(true, Ordering::Release);
        Ok(())
    }

    /// Deactivates it; dispatches then run untouched. A window already open goes on to its
    /// end, and its gate stays closed until then: ordinary dispatches and gated writes to its
    /// agent still wait for it (SPEC §6 step 4).
    pub fn stop(&self) -> Result<(), ServiceError> {
        if self.owner.read().is_none() {
            return Err(ServiceError::NotConfigured);
        }
        self.active.store(false, Ordering::Release);
        Ok(())
    }

    /// Whether replay is active.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        Arc::clone(&self.policy.read())
    }

    /// Replaces the policy after validating it; the error names the bad field.
    pub fn set_policy(&self, policy: Policy) -> Result<(), ServiceError> {
        policy.validate()?;
        *self.policy.write() = Arc::new(policy);
        Ok(())
    }

    /// Sets one policy variable by name (`KREPLAY_X`, an alias, or `X`).
    pub fn set_policy_var(&self, name: &str, value: &str) -> Result<(), ServiceError> {
        let mut guard = self.policy.write();
        let mut p = (**guard).clone();
        p.set_var(name, value)?;
        *guard = Arc::new(p);
        Ok(())
    }

    /// Installs a function that receives every outcome record.
    pub fn set_outcome_sink(&self, sink: Option<OutcomeSink>) {
        *self.sink.write() = sink;
    }

    /// The run summary so far.
    pub fn summary(&self) -> RunSummary {
        self.summary.lock().clone()
    }

    /// The library's memory of a kernel.
    pub fn kernel_memo(&self, kernel: &KernelKey) -> Option<KernelMemo> {
        self.memo.get(kernel).map(|m| *m)
    }

    /// Forgets every kernel of a code object that was unloaded (SPEC §7.2).
    pub fn forget_code_object(&self, agent: crate::types::AgentId, code_object: u64) {
        self.memo
            .retain(|k, _| !(k.agent == agent && k.code_object == code_object));
        self.communication_code.remove(&(agent, code_object));
    }

    /// Declares every kernel of code object `code_object` on `agent` a communication kernel
    /// (SPEC §9.2), whatever its name: a backend that sees a module link a communication
    /// library's device code (NVSHMEM) says so; its dispatches run once, counted as the
    /// filter's `communication` list's. Forgotten with [`ReplayService::forget_code_object`].
    pub fn mark_communication_code_object(&self, agent: crate::types::AgentId, code_object: u64) {
        self.communication_code.insert((agent, code_object), ());
    }

    /// Whether `kernel` is a communication kernel: its name is on the filter's list, or its
    /// code object was declared one.
    pub fn is_communication(&self, kernel: &KernelKey, name: &str) -> bool {
        self.policy().filter.is_communication(name)
            || self
                .communication_code
                .contains_key(&(kernel.agent, kernel.code_object))
    }

    /// The lock and tool-work marker of an agent (backends use it to tell whether a window
    /// is open; tests check the lock is held where SPEC §6 says).
    pub fn agent_gate(&self, agent: crate::types::AgentId) -> Arc<crate::locks::AgentGate> {
        self.gates.get(agent)
    }

    /// Takes the reader side of `agent`'s gate for a write that is not replayed (SPEC §6 step
    /// 4), waiting while a window holds it. Tool work (this thread inside a callback) gets
    /// [`WriteGate::Open`] at once. With the service inactive and no window open it takes no
    /// lock ([`WriteGate::Unlocked`]), but a window that starts before it is dropped waits for
    /// it. Must not be called where waiting could deadlock (inside a runtime's queue lock): use
    /// [`ReplayService::try_enter_write`] there and park the work.
    pub fn enter_write(&self, agent: crate::types::AgentId) -> WriteGate {
        match self.write_gate(agent) {
            Ok(open) => open,
            Err(gate) => WriteGate::Held(gate.lock.read_arc()),
        }
    }

    /// Like [`ReplayService::enter_write`] without waiting: `None` while a window holds the
    /// gate (the caller parks the work and retries when the window ends).
    pub fn try_enter_write(&self, agent: crate::types::AgentId) -> Option<WriteGate> {
        match self.write_gate(agent) {
            Ok(open) => Some(open),
            Err(gate) => gate.lock.try_read_arc().map(WriteGate::Held),
        }
    }

    /// The gate of a write that needs no lock, or the agent's gate to take the reader side of.
    pub(crate) fn write_gate(
        &self,
        agent: crate::types::AgentId,
    ) -> Result<WriteGate, Arc<AgentGate>> {
        if crate::locks::thread_in_callback() {
            return Ok(WriteGate::Open);
        }
        let gate = self.gates.get(agent);
        // Counted before the check (both sequentially consistent, as the window's count):
        // either this sees the window, or the window sees this write and waits for it.
        let counted = Unlocked::enter(Arc::clone(&gate));
        if !self.active.load(Ordering::SeqCst) && self.windows_open.load(Ordering::SeqCst) == 0 {
            return Ok(WriteGate::Unlocked(counted));
        }
        drop(counted);
        Err(gate)
    }

    /// Number of windows holding an agent's writer lock now (SPEC §6: stopping the service
    /// does not open a gate a window holds).
    pub fn open_windows(&self) -> u32 {
        self.windows_open.load(Ordering::Acquire)
    }

    /// Dispatches of communication kernels (the filter's `communication` list) that ran once,
    /// unreplayed, since the service was made.
    pub fn communication_runs(&self) -> u64 {
        self.communication_runs.load(Ordering::Relaxed)
    }

    /// The clock the service measures on.
    pub fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// The context control in use.
    pub fn contexts(&self) -> &Arc<dyn ContextControl> {
        &self.contexts
    }

    pub(crate) fn emit(&self, record: &OutcomeRecord, window_seconds: f64, pooled_peak: u64) {
        log::info!(target: "kernel_replay", "{record}");
        {
            let mut s = self.summary.lock();
            s.add(record, window_seconds);
            s.peak_pooled_bytes = s.peak_pooled_bytes.max(pooled_peak);
        }
        let sink = self.sink.read().clone();
        if let Some(sink) = sink {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink(record))).is_err() {
                log::error!("[kernel-replay] the outcome sink panicked; record dropped");
            }
        }
    }
}
