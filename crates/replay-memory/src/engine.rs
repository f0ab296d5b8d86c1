//! The snapshot engine (SPEC §7.2–§7.4): [`MemoryEngine`], one per agent, implements
//! [`Snapshotter`] by gluing the steps of the crate's other files together (planning, capture,
//! the scope check, restore, the pool, and the per-kernel predictions of scope `predicted`),
//! and its snapshot implements [`Snapshot`].
//!
//! The window holds the agent's writer lock while it plans, captures, restores and drops a
//! snapshot, so at most one snapshot of an agent is alive at a time.

use std::sync::Arc;
use std::time::Duration;

use replay_core::policy::{Policy, Scope};
use replay_core::wait::{bounded, WaitError};
use replay_core::{
    AgentId, BackendError, BackendErrorKind, CaptureStats, Clock, DeviceMemory, DigestKey,
    Dispatch, KernelKey, RestoreError, RestoreStats, ScopeCheck, Snapshot, SnapshotError,
    SnapshotPlan, Snapshotter, Tier, WaitSpec,
};

use crate::modules::ModuleVariables;
use crate::pool::BackingPool;
use crate::predict::Predictor;
use crate::shared::Shared;
use crate::snapshot::EngineSnapshot;
use crate::tracker::Tracker;
use crate::{capture, check, plan, restore};

pub use crate::predict::{
    FIRST_WINDOW_CHUNKS, MAX_KERNELS, MAX_MISSES, MAX_RANGES, MIN_REGION_CHUNKS,
};
pub use crate::tiers::{DEVICE_HEADROOM_BYTES, DEVICE_HEADROOM_DIVISOR};

/// The memory layer of one agent: implements [`Snapshotter`] over [`DeviceMemory`].
pub struct MemoryEngine {
    shared: Arc<Shared>,
    predictor: Arc<Predictor>,
    host_available: Option<u64>,
}

impl std::fmt::Debug for MemoryEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryEngine")
            .field("agent", &self.shared.agent)
            .field("pool", &self.shared.pool)
            .finish_non_exhaustive()
    }
}

impl MemoryEngine {
    /// An engine for `agent`, whose memory `device` drives. The digest key is per engine, four
    /// independent words from the OS's random source ([`replay_core::digest::random_key`]).
    pub fn new(
        agent: AgentId,
        tracker: Arc<Tracker>,
        device: Arc<dyn DeviceMemory>,
        modules: Arc<dyn ModuleVariables>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                agent,
                tracker,
                pool: BackingPool::new(agent, Arc::clone(&device)),
                device,
                modules,
                key: replay_core::digest::random_key(),
                module_view: parking_lot::Mutex::new(None),
            }),
            predictor: Arc::default(),
            host_available: None,
        }
    }

    /// Uses `key` for digests (tests, reproducible runs). Call before the first capture.
    pub fn with_digest_key(mut self, key: DigestKey) -> Self {
        Arc::get_mut(&mut self.shared)
            .expect("no snapshot exists before the first capture")
            .key = key;
        self
    }

    /// Measures the pool's idle time ([`MemoryEngine::release_idle`]) on `clock` (the
    /// service's; default the wall clock). Call before the first capture.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        Arc::get_mut(&mut self.shared)
            .expect("no snapshot exists before the first capture")
            .pool
            .clock = clock;
        self
    }

    /// Uses `bytes` as the host's available memory instead of `/proc/meminfo` (tests, hosts
    /// without procfs).
    pub fn with_host_available_bytes(mut self, bytes: u64) -> Self {
        self.host_available = Some(bytes);
        self
    }

    /// The backend's device memory under this engine (for a tool's digests outside the
    /// window's own: `replay_tools::ToolDevice`).
    pub fn device_memory(&self) -> &Arc<dyn DeviceMemory> {
        &self.shared.device
    }

    /// The agent.
    pub fn agent(&self) -> AgentId {
        self.shared.agent
    }

    /// Frees every pooled backing allocation now; blocks a live snapshot holds are freed when
    /// it is dropped. For the backend to call when an application allocation fails for lack
    /// of memory (SPEC §7.3), before it retries.
    pub fn release_pools(&self) {
        self.shared.pool.release();
    }

    /// Frees the pooled backing when no snapshot holds any of it and none came back for
    /// `after` or longer (`Policy::pool_idle_release`; zero: never); returns the bytes given
    /// to [`DeviceMemory::free_backing`]. Nothing runs on its own: the backend calls this from
    /// its entry points (a launch, an allocation), so an application that stopped replaying
    /// does not keep the memory from another process (SPEC §7.3).
    pub fn release_idle(&self, after: Duration) -> u64 {
        self.shared.pool.release_idle(after)
    }

    /// Backing bytes held now: pooled, in use, and quarantined.
    pub fn pooled_bytes(&self) -> u64 {
        self.shared.pool.held()
    }

    /// Free pooled bytes of `tier`.
    pub fn pool_free_bytes(&self, tier: Tier) -> u64 {
        self.shared.pool.lock().free_bytes(tier)
    }

    /// Backing bytes leaked because an abandoned copy may still write them.
    pub fn quarantined_bytes(&self) -> u64 {
        self.shared.pool.quarantined()
    }

    /// Kernels scope `predicted` keeps a prediction for (at most [`MAX_KERNELS`]). Code
    /// objects unloaded since the last plan ([`Tracker::record_unload`]) are forgotten first.
    pub fn predicted_kernels(&self) -> usize {
        self.predictor
            .forget_unloaded(&self.shared.tracker, self.shared.agent);
        self.predictor.kernels()
    }

    /// The number of ranges in `kernel`'s prediction (at most [`MAX_RANGES`]); `None` when
    /// none is kept.
    pub fn prediction_ranges(&self, kernel: &KernelKey) -> Option<usize> {
        self.predictor
            .forget_unloaded(&self.shared.tracker, self.shared.agent);
        self.predictor.ranges(kernel)
    }
}

impl Snapshotter for MemoryEngine {
    fn plan(
        &self,
        dispatch: &Dispatch,
        scope: Scope,
        policy: &Policy,
    ) -> Result<SnapshotPlan, BackendError> {
        plan::plan(
            &self.shared,
            &self.predictor,
            self.host_available,
            dispatch,
            scope,
            policy,
        )
    }

    fn capture(
        &self,
        plan: &SnapshotPlan,
        policy: &Policy,
        wait: &WaitSpec<'_>,
    ) -> Result<Box<dyn Snapshot>, SnapshotError> {
        let snap = capture::capture(
            &self.shared,
            &self.predictor,
            self.host_available,
            plan,
            policy,
            wait,
        )?;
        Ok(Box::new(snap))
    }

    fn pooled_peak_bytes(&self) -> u64 {
        self.shared.pool.peak()
    }

    fn read_to_host(&self, addr: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.shared.device.read_to_host(addr, out)
    }

    fn sync_ordered(&self, wait: &WaitSpec<'_>) -> Result<(), BackendError> {
        let dev = &*self.shared.device;
        bounded(
            wait.clock,
            wait.bounds(),
            "restore ordered on the device",
            |budget| dev.wait_ordered(budget).map(|done| done.then_some(())),
        )
        .map_err(|e| match e {
            WaitError::Backend(b) => b,
            stuck @ WaitError::Stuck { .. } => BackendError::new(
                BackendErrorKind::Other,
                self.shared.agent,
                "sync memory",
                stuck.to_string(),
            ),
        })
    }
}

impl Snapshot for EngineSnapshot {
    fn stats(&self) -> CaptureStats {
        self.stats.clone()
    }

    fn check_scope(&mut self, wait: &WaitSpec<'_>) -> Result<ScopeCheck, BackendError> {
        check::check_scope(self, wait)
    }

    fn restore_may_follow(&mut self, may: bool) {
        self.restore_may_follow = may;
    }

    fn restore(&mut self, wait: &WaitSpec<'_>) -> Result<RestoreStats, RestoreError> {
        restore::restore(self, wait)
    }

    fn order_restores(&mut self, on: bool) -> bool {
        self.ordered = on;
        on
    }

    fn restore_pending(&self) -> bool {
        self.pending.is_some()
    }

    fn complete_restore(&mut self, wait: &WaitSpec<'_>) -> Result<bool, RestoreError> {
        restore::complete(self, wait)
    }

    fn prediction_misses(&self) -> u32 {
        self.prediction.as_ref().map_or(0, |p| p.misses)
    }
}
