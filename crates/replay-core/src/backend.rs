//! The traits the replay window needs from below (SPEC §2, §6, §7): an [`Agent`] that drains,
//! submits passes and the ordinary run, [`DeviceMemory`] for batched asynchronous copies and
//! digests with fences, a [`Clock`] so bounded waits can run on virtual time, and the
//! [`Snapshotter`] that the memory layer implements over device memory.
//!
//! Every trait is object-safe: the CLI and the C ABI choose the backend at run time.
//! Asynchronous operations hand back a [`Ticket`] or [`Fence`] that the core polls with a time
//! budget; the core owns every deadline (see [`crate::wait`]). A backend blocks for at most the
//! budget it is given, then answers.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use bitflags::bitflags;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::error::{BackendError, BackendErrorKind};
use crate::outcome::{PredictFallback, PredictSource, TierBytes};
use crate::policy::{Policy, Scope};
use crate::types::{AgentId, Dispatch, QueueId};
pub use crate::types::{Capabilities, Tier};

/// Monotonic time as the backend sees it. The simulator runs it on virtual time, so tests check
/// deadlines without sleeping.
pub trait Clock: Send + Sync + Debug {
    /// Time since an arbitrary, fixed origin.
    fn now(&self) -> Duration;
    /// Lets at least `d` pass (a virtual clock advances by `d`).
    fn sleep(&self, d: Duration);
}

/// The wall clock.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }
}

/// An asynchronous agent operation in flight (a drain or a pass), opaque to the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket(pub u64);

/// What a drain waits for (SPEC §6 step 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DrainTarget {
    /// Everything submitted earlier to the dispatch's queue.
    Queue(QueueId),
    /// Everything submitted earlier to any queue of the agent.
    Agent,
    /// Asynchronous copies in flight that touch the agent (the copy fence).
    CopyFence,
}

impl DrainTarget {
    /// Name used in logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Queue(_) => "queue drain",
            Self::Agent => "agent drain",
            Self::CopyFence => "copy fence",
        }
    }
}

/// A completed pass, with its completion handling (counter read-out) drained.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PassCompletion {
    /// GPU time of the pass as the backend measured it.
    pub gpu_seconds: f64,
}

/// One GPU agent as the replay window drives it (SPEC §6).
///
/// Contract for implementors:
/// - `begin_drain` returns at once; completion is observed through `poll_drain`.
/// - `submit_pass` submits the captured dispatch with the application's completion suppressed.
/// - `abandon` gives up a ticket that did not complete in time: anything the device may still
///   reference (a barrier's signal) must be leaked, not destroyed.
/// - `signal_completion` fires the application's completion exactly once, ordered after every
///   pass submitted so far (a trailing barrier on HSA), so a truncated loop whose last pass is
///   still running never signals early.
/// - `submit_ordinary` submits the dispatch once, unchanged, with its own completion.
pub trait Agent: Send + Sync {
    /// The agent's identity.
    fn id(&self) -> AgentId;
    /// Optional abilities.
    fn capabilities(&self) -> Capabilities;
    /// Starts a drain.
    fn begin_drain(&self, target: DrainTarget) -> Result<Ticket, BackendError>;
    /// Waits at most `budget`; `true` once the drain completed.
    fn poll_drain(&self, ticket: Ticket, budget: Duration) -> Result<bool, BackendError>;
    /// Submits one replay pass of `dispatch`.
    fn submit_pass(&self, dispatch: &Dispatch, pass: u32) -> Result<Ticket, BackendError>;
    /// Waits at most `budget` for the pass and its completion handling.
    fn poll_pass(
        &self,
        ticket: Ticket,
        budget: Duration,
    ) -> Result<Option<PassCompletion>, BackendError>;
    /// Gives up a drain or pass that did not complete in time.
    fn abandon(&self, ticket: Ticket);
    /// Flushes and invalidates the agent's caches before a pass.
    fn flush_caches(&self) -> Result<(), BackendError>;
    /// Submits the dispatch once, unchanged, with its own completion (the ordinary run).
    fn submit_ordinary(&self, dispatch: &Dispatch) -> Result<(), BackendError>;
    /// Fires the application's completion once, after every pass submitted so far.
    fn signal_completion(&self, dispatch: &Dispatch) -> Result<(), BackendError>;
    /// The code image `dispatch` runs, as loaded, for a capture (SPEC §13). The default: the
    /// backend cannot hand it over (`Unsupported`), and a capture is refused.
    fn code_image(&self, dispatch: &Dispatch) -> Result<crate::types::CodeImage, BackendError> {
        let _ = dispatch;
        Err(BackendError::on(self.id(), "code image").error(
            BackendErrorKind::Unsupported,
            "this backend does not capture code images",
        ))
    }
    /// The device and driver, for a capture's manifest.
    fn device_description(&self) -> crate::types::DeviceDescription {
        crate::types::DeviceDescription::default()
    }
    /// The graph node the dispatch submitted on this thread now runs as, if the backend runs
    /// it from a graph (read once when the window opens, into the record's `graph`). The
    /// default: none.
    fn graph_node(&self) -> Option<crate::outcome::GraphNode> {
        None
    }
}

/// A backing allocation made by [`DeviceMemory::alloc_backing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BackingId(pub u64);

/// One end of a copy or the subject of a digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemLoc {
    /// Application device memory at this address.
    Device {
        /// Device address.
        addr: u64,
    },
    /// Library-owned backing memory.
    Backing {
        /// The backing allocation.
        id: BackingId,
        /// Byte offset inside it.
        offset: u64,
    },
}

/// A copy of `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CopyOp {
    /// Source.
    pub src: MemLoc,
    /// Destination.
    pub dst: MemLoc,
    /// Bytes.
    pub len: u64,
}

/// A digest over `len` bytes at `at` (one digest per op; callers split into chunks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DigestOp {
    /// Where.
    pub at: MemLoc,
    /// Bytes.
    pub len: u64,
}

/// Completion of a batch of copies or digests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fence(pub u64);

/// Per-run key of the digest (SPEC §7.4): four independent 64-bit words, two per lane
/// (see [`crate::digest`]; [`crate::digest::random_key`] draws them from the OS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DigestKey(pub [u64; 4]);

/// A 128-bit digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Digest128(pub u128);

impl std::fmt::Display for Digest128 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// What a tier can hold now and how fast it copies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TierInfo {
    /// Bytes the backend can still allocate in this tier.
    pub available_bytes: u64,
    /// Copy bandwidth to and from the agent, GB/s.
    pub gbps: f64,
}

/// Device memory as the memory layer drives it: batched, asynchronous, fenced (SPEC §7).
pub trait DeviceMemory: Send + Sync {
    /// Agent whose memory this is.
    fn agent(&self) -> AgentId;
    /// Capacity of a tier; `None` when the backend has no such tier.
    fn tier_info(&self, tier: Tier) -> Option<TierInfo>;
    /// Allocates library-owned backing memory (never tracked).
    fn alloc_backing(&self, tier: Tier, bytes: u64) -> Result<BackingId, BackendError>;
    /// Frees backing memory.
    fn free_backing(&self, id: BackingId);
    /// Submits a batch of copies; returns at once.
    fn submit_copies(&self, ops: &[CopyOp]) -> Result<Fence, BackendError>;
    /// Submits a batch of digests (one per op, in op order); returns at once.
    fn submit_digests(&self, ops: &[DigestOp], key: DigestKey) -> Result<Fence, BackendError>;
    /// Waits at most `budget`; `true` once the batch completed.
    fn poll_fence(&self, fence: Fence, budget: Duration) -> Result<bool, BackendError>;
    /// The digests of a completed digest batch, in op order.
    fn take_digests(&self, fence: Fence) -> Result<Vec<Digest128>, BackendError>;
    /// Gives up a batch that did not complete in time.
    fn abandon_fence(&self, fence: Fence);
    /// Reads application device memory at `addr` into `out`, synchronously (a capture, SPEC
    /// §13; the window holds the agent's writer lock). The default cannot (`Unsupported`).
    fn read_to_host(&self, addr: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let _ = (addr, out);
        Err(BackendError::on(self.agent(), "read to host").error(
            BackendErrorKind::Unsupported,
            "this backend does not read device memory to the host",
        ))
    }
    /// Asks the runtime about `addr`, an argument word the tracker does not know (SPEC §7.1:
    /// `cuPointerGetAttribute`, `hsa_amd_pointer_info`). `Ok(None)`: the runtime knows no
    /// allocation there that the agent can reach (pageable host memory, or a word that is not a
    /// pointer). The default answers `Ok(None)`; a backend whose runtime can tell overrides it.
    fn query_pointer(&self, addr: u64) -> Result<Option<PointerInfo>, BackendError> {
        let _ = addr;
        Ok(None)
    }
    /// Orders the agent's later device work after the copy batch `fence` on the device (a
    /// restore ordered ahead of the next pass, SPEC §6 step 8): the agent's passes, ordinary
    /// runs and cache flushes, and this memory's own later digests, reads and writes, wait
    /// for it there, without the host waiting, until `poll_fence` reported it complete.
    /// Implemented together with the agent's [`Capabilities::ORDERED_RESTORE`]; the default
    /// refuses (`Unsupported`) and the memory layer then waits for the fence on the host.
    fn order_after(&self, fence: Fence) -> Result<(), BackendError> {
        let _ = fence;
        Err(BackendError::new(
            crate::error::BackendErrorKind::Unsupported,
            self.agent(),
            "order after fence",
            "this backend does not order work after a fence on the device",
        ))
    }
    /// Waits on the host at most `budget` until every fence ordered by
    /// [`DeviceMemory::order_after`] and not yet reported complete is done on the device,
    /// without consuming it (`poll_fence` still reports it): for a tool that reads device
    /// memory by its own means in PASS ENTER. `true` once none is pending. The default (no
    /// ordering) answers `true`.
    fn wait_ordered(&self, budget: Duration) -> Result<bool, BackendError> {
        let _ = budget;
        Ok(true)
    }
}

/// What the runtime says about an address the tracker never saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointerInfo {
    /// Base of the allocation that holds the address.
    pub base: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its class as the runtime describes it (SPEC §7.1 table).
    pub class: MemoryClass,
    /// The agent that owns it, when it is device memory and the runtime says.
    pub owner: Option<AgentId>,
}

bitflags! {
    /// Memory classes of SPEC §7.1.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub struct MemoryClass: u32 {
        /// Coarse-grained device memory owned by the agent: tracked, captured, restored.
        const DEVICE_COARSE = 1 << 0;
        /// Kernel-argument memory or executable-flagged pools: excluded.
        const KERNARG = 1 << 1;
        /// Fine-grained device memory.
        const FINE_GRAINED = 1 << 2;
        /// Managed (unified) memory.
        const MANAGED = 1 << 3;
        /// Pinned host memory.
        const PINNED_HOST = 1 << 4;
        /// IPC-imported device memory.
        const IPC_IMPORTED = 1 << 5;
        /// Memory owned by a peer agent.
        const PEER = 1 << 6;
        /// Virtual-memory mappings (stream-ordered allocators, mapped handles).
        const VIRTUAL_MAPPING = 1 << 7;
        /// Module-scope device variable.
        const MODULE_VARIABLE = 1 << 8;
        /// Read-only (constant) data.
        const READ_ONLY = 1 << 9;
        /// Marked by a tool as its own, or the library's staging and backing memory.
        const TOOL_OWNED = 1 << 10;
    }
}

impl MemoryClass {
    /// Classes that `arguments` may capture when an argument points into them.
    pub const CAPTURABLE_UNTRACKED: MemoryClass = MemoryClass::FINE_GRAINED
        .union(MemoryClass::MANAGED)
        .union(MemoryClass::PINNED_HOST);
}

/// A tracked region at the time it was planned: a freed-and-reallocated address has a new
/// generation, so liveness re-checks can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RegionRef {
    /// Base address.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
    /// Generation number, never reused.
    pub generation: u64,
    /// Class.
    pub class: MemoryClass,
}

/// Memory of the agent that the snapshot does not cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UntrackedSummary {
    /// Bytes in untracked allocations other than virtual-memory mappings.
    pub bytes: u64,
    /// Number of such allocations.
    pub regions: u32,
    /// Bytes in virtual-memory mappings.
    pub vmem_bytes: u64,
    /// Number of virtual-memory mappings.
    pub vmem_regions: u32,
}

/// The memory layer's plan for one dispatch, used by admission (SPEC §6 step 5).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SnapshotPlan {
    /// Scope planned (may be `All` where `Arguments` was asked, for a remembered kernel).
    pub scope: Scope,
    /// Regions to capture.
    pub regions: SmallVec<[RegionRef; 8]>,
    /// All tracked bytes of the agent.
    pub tracked_bytes: u64,
    /// Bytes the snapshot would copy.
    pub captured_bytes: u64,
    /// What is not covered.
    pub untracked: UntrackedSummary,
    /// Set when the arguments reach memory no snapshot can cover (IPC, peer, virtual-memory
    /// mappings, device memory only the runtime knows, a failed pointer query) or the
    /// module-variable enumeration is incomplete: always declines `untracked_memory`.
    pub uncapturable: Option<String>,
    /// Set when the kernel writes memory no snapshot can see, whatever the scope (a backend
    /// knows it from the launch or the kernel's code; SPEC §9.2): always declines
    /// `unseen_writes`, before anything else of admission.
    pub unseen_writes: Option<String>,
    /// What the tiers can hold within their budgets now.
    pub capacity_bytes: u64,
    /// Scope `predicted`: of `captured_bytes`, the bytes the prediction names.
    pub predicted_bytes: u64,
    /// Scope `predicted`: how the chunks were chosen.
    pub predict_source: PredictSource,
    /// Scope `predicted`: why it planned a region scope instead.
    pub predict_fallback: PredictFallback,
    /// Opaque to the window: the memory layer's handle on what it planned, for its capture.
    pub ticket: u64,
}

/// How long a wait inside the memory layer may take, on the backend's clock.
#[derive(Debug, Clone, Copy)]
pub struct WaitSpec<'a> {
    /// The clock deadlines are measured on.
    pub clock: &'a dyn Clock,
    /// Total bound.
    pub timeout: Duration,
    /// Longest single poll.
    pub slice: Duration,
    /// Interval of the progress warning during a long wait.
    pub progress: Duration,
}

/// What a capture did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CaptureStats {
    /// Bytes captured.
    pub captured_bytes: u64,
    /// Regions captured.
    pub captured_regions: u32,
    /// Bytes per tier.
    pub tier_bytes: TierBytes,
    /// Regions skipped because they were freed or reallocated since planning.
    pub skipped_regions: u32,
    /// Time the capture took.
    pub seconds: f64,
}

/// What one restore did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RestoreStats {
    /// Bytes compared by digest (0 for `full`).
    pub compared_bytes: u64,
    /// Bytes written back.
    pub restored_bytes: u64,
    /// Time it took; for a restore ordered on the device ([`Snapshot::order_restores`]), the
    /// host's time to plan and enqueue it (its copies run inside the next pass's wait).
    pub seconds: f64,
}

/// The result of the after-pass check of memory outside the scope (SPEC §7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeCheck {
    /// Nothing the scope check watches changed (under `all`, it watches only capturable
    /// memory no argument reached).
    Clean,
    /// A region outside the scope changed.
    Changed {
        /// Base of the first region found changed.
        base: u64,
    },
}

/// A capture could not be made; the window declines `snapshot_failed`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("snapshot failed: {message}")]
pub struct SnapshotError {
    /// What failed.
    pub message: String,
}

/// A restore failed: on a healthy context memory can no longer be repaired and the process
/// aborts (SPEC §6); where the context is lost ([`RestoreError::context_lost`]) the window
/// stops instead, and the application gets the driver's error from its own next call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("restore of region {base:#x} ({size} bytes) failed: {message}")]
pub struct RestoreError {
    /// Base of the region.
    pub base: u64,
    /// Its size.
    pub size: u64,
    /// What failed.
    pub message: String,
    /// The category of the backend error behind it, where one was (`None`: a timeout, or a
    /// failure of the memory layer's own).
    pub cause: Option<BackendErrorKind>,
}

impl RestoreError {
    /// Whether the backend reported the context lost ([`BackendErrorKind::DeviceLost`]): the
    /// copies cannot run, and nothing the application does in that context can either.
    pub fn context_lost(&self) -> bool {
        self.cause == Some(BackendErrorKind::DeviceLost)
    }
}

/// The memory layer as the window uses it (implemented by `replay-memory`).
pub trait Snapshotter: Send + Sync {
    /// Plans the snapshot of `dispatch` under `scope`.
    fn plan(
        &self,
        dispatch: &Dispatch,
        scope: Scope,
        policy: &Policy,
    ) -> Result<SnapshotPlan, BackendError>;
    /// Captures what `plan` names.
    fn capture(
        &self,
        plan: &SnapshotPlan,
        policy: &Policy,
        wait: &WaitSpec<'_>,
    ) -> Result<Box<dyn Snapshot>, SnapshotError>;
    /// Peak bytes held in the backing and staging pools so far.
    fn pooled_peak_bytes(&self) -> u64;
    /// Waits, bounded by `wait`, until a restore ordered on the device
    /// ([`Snapshot::order_restores`]) is done there, without completing it for the window:
    /// what a tool reading device memory by its own means calls in PASS ENTER
    /// ([`crate::ReplayPayload::sync_memory`]). The default (restores wait on the host) has
    /// nothing to wait for.
    fn sync_ordered(&self, wait: &WaitSpec<'_>) -> Result<(), BackendError> {
        let _ = wait;
        Ok(())
    }
    /// Reads application memory at `addr` into `out` through the device memory
    /// ([`DeviceMemory::read_to_host`]), for a capture (SPEC §13). The default cannot.
    fn read_to_host(&self, addr: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let _ = (addr, out);
        Err(BackendError::new(
            BackendErrorKind::Unsupported,
            crate::types::AgentId::default(),
            "read to host",
            "this memory layer does not read device memory to the host",
        ))
    }
}

/// A captured snapshot, alive for one window; dropping it returns its memory to the pools.
pub trait Snapshot: Send {
    /// What the capture did.
    fn stats(&self) -> CaptureStats;
    /// Checks the tracked memory outside the snapshot after a pass (SPEC §7.2).
    fn check_scope(&mut self, wait: &WaitSpec<'_>) -> Result<ScopeCheck, BackendError>;
    /// Told before each scope check whether a restore may follow it (`false` after the last
    /// pass), so work only a restore needs (`dirty`'s digests, taken with the check's) is
    /// skipped when none will. The default ignores it.
    fn restore_may_follow(&mut self, may: bool) {
        let _ = may;
    }
    /// Restores the captured memory before the next pass. Frees and unloads of captured
    /// memory on other threads wait until its copies are done (`replay-memory`'s tracker
    /// holds): until it returns, or, for a restore ordered on the device, until
    /// [`Snapshot::complete_restore`] saw its fence complete. Ordered, it enqueues the copies
    /// and returns without waiting (its `seconds` are then the host's enqueue time).
    fn restore(&mut self, wait: &WaitSpec<'_>) -> Result<RestoreStats, RestoreError>;
    /// Asks that restores be ordered on the device ahead of the next pass instead of waited
    /// for on the host (the window asks when the agent claims
    /// [`Capabilities::ORDERED_RESTORE`]); returns whether they will be. A restore the device
    /// cannot order (its memory refuses [`DeviceMemory::order_after`], or the batch failed
    /// and is retried) still waits on the host. The default keeps restores on the host.
    fn order_restores(&mut self, on: bool) -> bool {
        let _ = on;
        false
    }
    /// Whether a restore was enqueued and not yet completed ([`Snapshot::complete_restore`]).
    fn restore_pending(&self) -> bool {
        false
    }
    /// Completes a restore ordered on the device: waits (bounded by `wait`) for its fence,
    /// then ends the hold against frees and unloads. `Ok(true)`: done (or nothing pending);
    /// `Ok(false)`: not done within the bound, so its fence was abandoned and the snapshot's
    /// blocks are leaked (the window calls it so only where the pass after it did not
    /// complete); `Err`: the fence reported an error, the restore failed (the window aborts).
    fn complete_restore(&mut self, wait: &WaitSpec<'_>) -> Result<bool, RestoreError> {
        let _ = wait;
        Ok(true)
    }
    /// Scope `predicted`: digest chunks the scope checks so far found written outside the
    /// prediction (0 for the other scopes).
    fn prediction_misses(&self) -> u32 {
        0
    }
}
