//! The snapshot engine (SPEC §7.2–§7.4): plans a scope, captures it into pooled backing memory
//! across the tiers, checks memory outside the scope and restores between passes.
//!
//! One engine per agent. The window holds the agent's writer lock while it plans, captures,
//! restores and drops a snapshot, so at most one snapshot of an agent is alive at a time.

use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::policy::{Policy, RestoreMode, Scope};
use replay_core::wait::{bounded, Bounds, WaitError};
use replay_core::{
    AgentId, BackendError, BackendErrorKind, BackingId, CaptureStats, CopyOp, DeviceMemory,
    Digest128, DigestKey, DigestOp, Dispatch, MemLoc, MemoryClass, RegionRef, RestoreError,
    RestoreStats, ScopeCheck, Snapshot, SnapshotError, SnapshotPlan, Snapshotter, Tier,
    UntrackedSummary, WaitSpec,
};
use smallvec::SmallVec;

use crate::classify::{classify, Treatment};
use crate::modules::{is_bookkeeping, ModuleVariables};
use crate::tracker::{MemoryHold, Tracker};

/// Automatic device-tier headroom: the application keeps this fraction of what the device
/// reports available ...
pub const DEVICE_HEADROOM_DIVISOR: u64 = 10;
/// ... plus this many bytes, so its next allocations still succeed while a snapshot is held.
pub const DEVICE_HEADROOM_BYTES: u64 = 256 << 20;

/// Generation of module-variable regions: they are not allocations the tracker knows; their
/// liveness is the load of their code object ([`ModuleVariables::load_generation`]).
/// Generations from the tracker start at 1.
const MODULE_GENERATION: u64 = 0;

/// Generation of an allocation the tracker never saw and the runtime described
/// ([`DeviceMemory::query_pointer`]): its liveness is the runtime's answer, asked again.
const RUNTIME_GENERATION: u64 = u64::MAX;

/// A backing allocation, in use by a snapshot or free in the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    id: BackingId,
    tier: Tier,
    size: u64,
}

/// Backing memory pooled per agent (SPEC §7.3).
#[derive(Debug, Default)]
struct Pool {
    free: Vec<Block>,
    /// Bytes of every backing allocation not freed: free, in use and quarantined.
    held: u64,
    peak: u64,
    /// Bytes leaked on purpose: an abandoned copy may still write them.
    quarantined: u64,
    /// `release_pools` ran while a snapshot held blocks: free them when they come back.
    release_returning: bool,
}

impl Pool {
    fn free_bytes(&self, tier: Tier) -> u64 {
        self.free
            .iter()
            .filter(|b| b.tier == tier)
            .map(|b| b.size)
            .sum()
    }

    /// Takes free blocks of `tier` covering as much of `need` as possible: the smallest single
    /// block that covers it, else the largest blocks first.
    fn take(&mut self, tier: Tier, need: u64) -> Vec<Block> {
        let fit = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.tier == tier && b.size >= need)
            .min_by_key(|(_, b)| b.size)
            .map(|(i, _)| i);
        if let Some(i) = fit {
            return vec![self.free.swap_remove(i)];
        }
        let mut mine: Vec<Block> = Vec::new();
        let mut rest = Vec::with_capacity(self.free.len());
        for b in self.free.drain(..) {
            if b.tier == tier {
                mine.push(b);
            } else {
                rest.push(b);
            }
        }
        mine.sort_by_key(|b| std::cmp::Reverse(b.size));
        let mut got = 0;
        let mut taken = Vec::new();
        for b in mine {
            if got < need {
                got += b.size;
                taken.push(b);
            } else {
                rest.push(b);
            }
        }
        self.free = rest;
        taken
    }

    /// Blocks to free so that each tier's free pool is at most `keep` bytes; the largest
    /// blocks that fit are kept, since they serve the most captures.
    fn trim(&mut self, keep: u64) -> Vec<Block> {
        let mut out = Vec::new();
        for tier in Tier::ALL {
            let mut mine: Vec<Block> = Vec::new();
            self.free.retain(|b| {
                if b.tier == tier {
                    mine.push(*b);
                    false
                } else {
                    true
                }
            });
            mine.sort_by_key(|b| std::cmp::Reverse(b.size));
            let mut kept = 0u64;
            for b in mine {
                if kept + b.size <= keep {
                    kept += b.size;
                    self.free.push(b);
                } else {
                    out.push(b);
                }
            }
        }
        self.held -= out.iter().map(|b| b.size).sum::<u64>();
        out
    }
}

/// State shared by the engine and its live snapshot.
struct Shared {
    agent: AgentId,
    tracker: Arc<Tracker>,
    device: Arc<dyn DeviceMemory>,
    modules: Arc<dyn ModuleVariables>,
    key: DigestKey,
    pool: Mutex<Pool>,
}

impl Shared {
    /// Whether `r` is still the memory it was when planned or captured; `load` is the load
    /// generation of a module variable's code object at capture. Call under a hold
    /// ([`Tracker::hold`]) so that the answer stays true until the copies are done.
    fn is_live(&self, r: &RegionRef, load: Option<u64>) -> bool {
        match r.generation {
            MODULE_GENERATION => match load {
                Some(g) => self.modules.load_generation(self.agent, r.base) == Some(g),
                None => true,
            },
            RUNTIME_GENERATION => matches!(
                self.device.query_pointer(r.base),
                Ok(Some(i)) if i.base == r.base && i.size == r.size && i.class == r.class
            ),
            _ => self.tracker.is_live(self.agent, r),
        }
    }

    /// Holds `regions` against frees and unloads while the caller reads or writes them.
    fn hold<'r>(&self, regions: impl Iterator<Item = &'r RegionRef>) -> MemoryHold<'_> {
        let ranges: Vec<(u64, u64)> = regions.map(|r| (r.base, r.size)).collect();
        self.tracker.hold(self.agent, &ranges)
    }

    /// Free pooled blocks covering `need` bytes of `tier`, plus one new allocation for the rest.
    fn acquire(&self, tier: Tier, need: u64) -> Result<Vec<Block>, BackendError> {
        let mut blocks = self.pool.lock().take(tier, need);
        let have: u64 = blocks.iter().map(|b| b.size).sum();
        if have < need {
            let size = need - have;
            match self.device.alloc_backing(tier, size) {
                Ok(id) => {
                    let mut pool = self.pool.lock();
                    pool.held += size;
                    pool.peak = pool.peak.max(pool.held);
                    blocks.push(Block { id, tier, size });
                }
                Err(e) => {
                    self.give_back(blocks, None);
                    return Err(e);
                }
            }
        }
        Ok(blocks)
    }

    /// Returns blocks to the pool, then trims it to `keep` (when given).
    fn give_back(&self, blocks: Vec<Block>, keep: Option<u64>) {
        let to_free = {
            let mut pool = self.pool.lock();
            pool.free.extend(blocks);
            if std::mem::take(&mut pool.release_returning) {
                pool.trim(0)
            } else {
                keep.map(|k| pool.trim(k)).unwrap_or_default()
            }
        };
        // Free outside the lock: the backend may take its time.
        for b in to_free {
            self.device.free_backing(b.id);
        }
    }

    /// Leaks blocks an abandoned copy may still write: freeing or reusing them could corrupt
    /// whatever uses the memory next.
    fn quarantine(&self, blocks: &[Block]) {
        let bytes: u64 = blocks.iter().map(|b| b.size).sum();
        if bytes > 0 {
            log::warn!(
                "[kernel-replay] agent {}: leaking {bytes} bytes of backing memory that an abandoned copy may still write",
                self.agent
            );
            self.pool.lock().quarantined += bytes;
        }
    }

    fn bounds(wait: &WaitSpec<'_>) -> Bounds {
        wait.bounds()
    }

    /// Submits copies as one batch and waits for its fence.
    fn copy_batch(
        &self,
        ops: &[CopyOp],
        wait: &WaitSpec<'_>,
        what: &'static str,
    ) -> Result<(), WaitError> {
        if ops.is_empty() {
            return Ok(());
        }
        let fence = self.device.submit_copies(ops)?;
        let dev = &*self.device;
        let r = bounded(wait.clock, Self::bounds(wait), what, |budget| {
            dev.poll_fence(fence, budget).map(|done| done.then_some(()))
        });
        if matches!(r, Err(WaitError::Stuck { .. })) {
            dev.abandon_fence(fence);
        }
        r
    }

    /// Submits digests as one batch, waits, and takes them.
    fn digest_batch(
        &self,
        ops: &[DigestOp],
        wait: &WaitSpec<'_>,
    ) -> Result<Vec<Digest128>, WaitError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let fence = self.device.submit_digests(ops, self.key)?;
        let dev = &*self.device;
        let r = bounded(wait.clock, Self::bounds(wait), "digest fence", |budget| {
            dev.poll_fence(fence, budget).map(|done| done.then_some(()))
        });
        match r {
            Ok(()) => {
                let d = dev.take_digests(fence)?;
                if d.len() != ops.len() {
                    return Err(WaitError::Backend(BackendError::new(
                        BackendErrorKind::Other,
                        self.agent,
                        "take digests",
                        format!("{} digests for {} operations", d.len(), ops.len()),
                    )));
                }
                Ok(d)
            }
            Err(e) => {
                if matches!(e, WaitError::Stuck { .. }) {
                    dev.abandon_fence(fence);
                }
                Err(e)
            }
        }
    }
}

/// Digest operations over `len` bytes of device memory at `base`, one per chunk.
fn chunk_ops(base: u64, len: u64, chunk: u64, out: &mut Vec<DigestOp>) -> usize {
    let mut off = 0;
    let mut n = 0;
    while off < len {
        let l = chunk.min(len - off);
        out.push(DigestOp {
            at: MemLoc::Device { addr: base + off },
            len: l,
        });
        off += l;
        n += 1;
    }
    n
}

/// One contiguous part of a captured region in one backing block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    /// Offset inside the region.
    offset: u64,
    len: u64,
    backing: BackingId,
    backing_offset: u64,
}

/// A captured region and where its bytes live.
#[derive(Debug, Clone)]
struct CapturedRegion {
    region: RegionRef,
    /// A module variable's code-object load generation at capture.
    load: Option<u64>,
    pieces: SmallVec<[Piece; 2]>,
    /// Chunk digests at capture (restore `dirty` only).
    digests: Vec<Digest128>,
}

impl CapturedRegion {
    /// Copies from backing to device for region bytes [from, to).
    fn restore_ops(&self, from: u64, to: u64, out: &mut Vec<CopyOp>) {
        for p in &self.pieces {
            let s = from.max(p.offset);
            let e = to.min(p.offset + p.len);
            if s < e {
                out.push(CopyOp {
                    src: MemLoc::Backing {
                        id: p.backing,
                        offset: p.backing_offset + (s - p.offset),
                    },
                    dst: MemLoc::Device {
                        addr: self.region.base + s,
                    },
                    len: e - s,
                });
            }
        }
    }
}

/// A tracked region outside an `arguments` scope, with its digests before the first pass.
#[derive(Debug, Clone)]
struct Watched {
    region: RegionRef,
    digests: Vec<Digest128>,
}

/// The memory layer of one agent: implements [`Snapshotter`] over [`DeviceMemory`].
pub struct MemoryEngine {
    shared: Arc<Shared>,
    host_available: Option<u64>,
}

impl std::fmt::Debug for MemoryEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryEngine")
            .field("agent", &self.shared.agent)
            .field("pool", &*self.shared.pool.lock())
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
                device,
                modules,
                key: replay_core::digest::random_key(),
                pool: Mutex::new(Pool::default()),
            }),
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

    /// Uses `bytes` as the host's available memory instead of `/proc/meminfo` (tests, hosts
    /// without procfs).
    pub fn with_host_available_bytes(mut self, bytes: u64) -> Self {
        self.host_available = Some(bytes);
        self
    }

    /// The agent.
    pub fn agent(&self) -> AgentId {
        self.shared.agent
    }

    /// Frees every pooled backing allocation now; blocks a live snapshot holds are freed when
    /// it is dropped. For the backend to call when an application allocation fails for lack
    /// of memory (SPEC §7.3), before it retries.
    pub fn release_pools(&self) {
        let to_free = {
            let mut pool = self.shared.pool.lock();
            let in_use =
                pool.held - pool.quarantined - pool.free.iter().map(|b| b.size).sum::<u64>();
            pool.release_returning = in_use > 0;
            pool.trim(0)
        };
        for b in to_free {
            self.shared.device.free_backing(b.id);
        }
    }

    /// Backing bytes held now: pooled, in use, and quarantined.
    pub fn pooled_bytes(&self) -> u64 {
        self.shared.pool.lock().held
    }

    /// Free pooled bytes of `tier`.
    pub fn pool_free_bytes(&self, tier: Tier) -> u64 {
        self.shared.pool.lock().free_bytes(tier)
    }

    /// Backing bytes leaked because an abandoned copy may still write them.
    pub fn quarantined_bytes(&self) -> u64 {
        self.shared.pool.lock().quarantined
    }

    /// Half of the host's available memory: `MemAvailable` from `/proc/meminfo`, else what the
    /// backend reports for the pageable tier.
    fn host_available(&self, tier_reported: u64) -> u64 {
        self.host_available
            .or_else(mem_available)
            .unwrap_or(tier_reported)
    }

    /// What each tier may hold now, within its budget (index: position in [`Tier::ALL`]).
    ///
    /// - device: `device_tier_bytes`, or when 0 the available bytes less a headroom of a tenth
    ///   of them plus [`DEVICE_HEADROOM_BYTES`]; never more than is available;
    /// - pinned: only where the backend has the tier; `pinned_tier_bytes`, or when 0 half of
    ///   what the backend reports (page-locked memory cannot be reclaimed by the host);
    /// - pageable: `pageable_tier_bytes`, or when 0 half of the host's available memory
    ///   (`MemAvailable`; the backend's report where procfs is missing); never more than the
    ///   backend reports available.
    ///
    /// Free pooled blocks count as available: they are reused first.
    fn tier_caps(&self, policy: &Policy) -> [u64; 3] {
        let dev = &*self.shared.device;
        let pool = self.shared.pool.lock();
        let mut caps = [0u64; 3];
        for (i, tier) in Tier::ALL.into_iter().enumerate() {
            let Some(info) = dev.tier_info(tier) else {
                continue;
            };
            let pooled = pool.free_bytes(tier);
            let avail = info.available_bytes.saturating_add(pooled);
            let (budget, auto) = match tier {
                Tier::Device => (
                    policy.device_tier_bytes,
                    info.available_bytes.saturating_sub(
                        info.available_bytes / DEVICE_HEADROOM_DIVISOR + DEVICE_HEADROOM_BYTES,
                    ) + pooled,
                ),
                Tier::PinnedHost => (policy.pinned_tier_bytes, info.available_bytes / 2 + pooled),
                Tier::PageableHost => (
                    policy.pageable_tier_bytes,
                    self.host_available(info.available_bytes) / 2 + pooled,
                ),
            };
            caps[i] = if budget == 0 { auto } else { budget }.min(avail);
        }
        caps
    }

    fn error(&self, kind: BackendErrorKind, operation: &'static str, msg: String) -> BackendError {
        BackendError::new(kind, self.shared.agent, operation, msg)
    }

    /// What the kernel's arguments reach (SPEC §7.1, §7.2): every allocation an 8-byte-aligned
    /// argument word points into, anywhere inside it. Tracked captured and capturable memory
    /// (fine-grained, managed, pinned host) is returned; a word the tracker does not know, and
    /// that no module variable in `vars` (sorted (start, end) ranges) holds, is asked of the
    /// runtime ([`DeviceMemory::query_pointer`]). Memory no snapshot can cover sets
    /// `uncapturable`; what the tracker does not count already is added to `untracked`.
    ///
    /// What the runtime describes: capturable memory is returned with [`RUNTIME_GENERATION`]
    /// (captured like tracked memory; its liveness is asked of the runtime again); coarse
    /// device memory the tracker never saw is uncapturable, because the library would not hear
    /// of its free, so a restore could write it after the application released it; IPC, peer,
    /// virtual-memory and undescribed memory is uncapturable; excluded classes (kernarg pools,
    /// read-only, tool memory) are skipped. A failed query is uncapturable: the word may point
    /// at memory the kernel writes. `Ok(None)`: not reachable, skipped.
    fn argument_reach(
        &self,
        dispatch: &Dispatch,
        vars: &[(u64, u64)],
        uncapturable: &mut Option<String>,
        untracked: &mut UntrackedSummary,
    ) -> SmallVec<[RegionRef; 8]> {
        let agent = self.shared.agent;
        let tracker = &*self.shared.tracker;
        let mut out: SmallVec<[RegionRef; 8]> = SmallVec::new();
        // Untracked allocations already counted, as (start, end).
        let mut counted: SmallVec<[(u64, u64); 4]> = SmallVec::new();
        let count = |counted: &mut SmallVec<[(u64, u64); 4]>,
                     base: u64,
                     size: u64,
                     class: MemoryClass,
                     u: &mut UntrackedSummary| {
            let end = base.saturating_add(size);
            if counted.iter().any(|&(s, e)| s == base && e == end) {
                return;
            }
            counted.push((base, end));
            if classify(class) == Treatment::VirtualMapping {
                u.vmem_bytes += size;
                u.vmem_regions += 1;
            } else {
                u.bytes += size;
                u.regions += 1;
            }
        };
        for (i, word) in dispatch.argument_words().enumerate() {
            if word == 0 {
                continue;
            }
            let offset = i * 8;
            if out
                .iter()
                .any(|o| o.base <= word && word < o.base.saturating_add(o.size))
                || counted.iter().any(|&(s, e)| s <= word && word < e)
            {
                continue;
            }
            if let Some(r) = tracker.lookup(agent, word) {
                match classify(r.class) {
                    Treatment::Captured | Treatment::CapturableUntracked => out.push(r),
                    Treatment::Excluded => {}
                    Treatment::Uncapturable | Treatment::VirtualMapping => {
                        uncapturable.get_or_insert_with(|| {
                            format!(
                                "argument at offset {offset} ({word:#x}) points into {:?} memory {:#x}+{} that no snapshot can cover",
                                r.class, r.base, r.size
                            )
                        });
                    }
                }
                continue;
            }
            if let Some((owner, r)) = tracker.lookup_any(word) {
                if classify(r.class) != Treatment::Excluded {
                    count(&mut counted, r.base, r.size, r.class, untracked);
                    uncapturable.get_or_insert_with(|| {
                        format!(
                            "argument at offset {offset} ({word:#x}) points into memory {:#x}+{} of agent {owner}; peer memory cannot be captured",
                            r.base, r.size
                        )
                    });
                }
                continue;
            }
            let k = vars.partition_point(|&(s, _)| s <= word);
            if k > 0 && word < vars[k - 1].1 {
                // A module variable: covered (or skipped as constant) by the enumeration.
                continue;
            }
            let info = match self.shared.device.query_pointer(word) {
                Ok(None) => continue,
                Ok(Some(info)) => info,
                Err(e) => {
                    uncapturable.get_or_insert_with(|| {
                        format!(
                            "argument at offset {offset} ({word:#x}) is unknown to the tracker and the runtime could not describe it: {e}"
                        )
                    });
                    continue;
                }
            };
            let inside = info.base <= word && word < info.base.saturating_add(info.size);
            let peer = info.owner.is_some_and(|o| o != agent)
                && !info
                    .class
                    .intersects(MemoryClass::PINNED_HOST | MemoryClass::MANAGED);
            let why = match classify(info.class) {
                _ if !inside => Some(format!(
                    "the runtime described it as {:#x}+{}, which does not contain it",
                    info.base, info.size
                )),
                Treatment::Excluded => None,
                _ if peer => Some(format!(
                    "it is {:?} memory {:#x}+{} of agent {}; peer memory cannot be captured",
                    info.class,
                    info.base,
                    info.size,
                    info.owner.map_or(agent, |o| o)
                )),
                Treatment::CapturableUntracked => {
                    out.push(RegionRef {
                        base: info.base,
                        size: info.size,
                        generation: RUNTIME_GENERATION,
                        class: info.class,
                    });
                    None
                }
                Treatment::Captured => Some(format!(
                    "it is {:?} memory {:#x}+{} whose allocation the tracker never saw, so its free would not be seen either",
                    info.class, info.base, info.size
                )),
                Treatment::Uncapturable | Treatment::VirtualMapping => Some(format!(
                    "it is {:?} memory {:#x}+{} that no snapshot can cover",
                    info.class, info.base, info.size
                )),
            };
            if let Some(why) = why {
                count(&mut counted, info.base, info.size, info.class, untracked);
                uncapturable.get_or_insert_with(|| {
                    format!(
                        "argument at offset {offset} ({word:#x}) points into untracked memory: {why}"
                    )
                });
            }
        }
        out
    }
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Parts of [base, base+size) not covered by `covered` (sorted, non-overlapping intervals).
fn uncovered(base: u64, size: u64, covered: &[(u64, u64)]) -> SmallVec<[(u64, u64); 2]> {
    let mut out = SmallVec::new();
    let end = base.saturating_add(size);
    let mut at = base;
    for &(s, e) in covered {
        if e <= at {
            continue;
        }
        if s >= end {
            break;
        }
        if s > at {
            out.push((at, s - at));
        }
        at = at.max(e);
        if at >= end {
            break;
        }
    }
    if at < end {
        out.push((at, end - at));
    }
    out
}

impl Snapshotter for MemoryEngine {
    fn plan(
        &self,
        dispatch: &Dispatch,
        scope: Scope,
        policy: &Policy,
    ) -> Result<SnapshotPlan, BackendError> {
        let agent = self.shared.agent;
        if dispatch.info.agent != agent {
            return Err(self.error(
                BackendErrorKind::InvalidArgument,
                "plan snapshot",
                format!(
                    "dispatch for agent {} given to the memory engine of agent {agent}",
                    dispatch.info.agent
                ),
            ));
        }
        let all = self.shared.tracker.regions(agent);
        let mut plan = SnapshotPlan {
            scope,
            ..SnapshotPlan::default()
        };

        // Module variables first: an argument into one is covered by the enumeration, not
        // asked of the runtime.
        let vars = match self.shared.modules.enumerate(agent) {
            Err(why) => {
                plan.uncapturable.get_or_insert_with(|| {
                    format!("module variables of agent {agent} could not be enumerated: {why}")
                });
                Vec::new()
            }
            Ok(mut vars) => {
                vars.sort_by_key(|v| v.base);
                vars
            }
        };
        let var_ranges: Vec<(u64, u64)> = vars
            .iter()
            .map(|v| (v.base, v.base.saturating_add(v.size)))
            .collect();

        // Under every scope, the capturable memory the arguments reach is captured, and
        // memory they reach that nothing can capture declines (SPEC §7.1).
        let mut untracked = UntrackedSummary::default();
        let reach = self.argument_reach(
            dispatch,
            &var_ranges,
            &mut plan.uncapturable,
            &mut untracked,
        );
        let mut regions: SmallVec<[RegionRef; 8]> = match scope {
            Scope::All => {
                let mut v: SmallVec<[RegionRef; 8]> = all
                    .iter()
                    .filter(|r| classify(r.class) == Treatment::Captured)
                    .copied()
                    .collect();
                v.extend(
                    reach
                        .into_iter()
                        .filter(|r| classify(r.class) != Treatment::Captured),
                );
                v
            }
            Scope::Arguments => reach,
        };
        regions.retain(|r| r.size > 0);

        for r in &all {
            match classify(r.class) {
                Treatment::Captured => plan.tracked_bytes += r.size,
                Treatment::CapturableUntracked if !regions.iter().any(|o| o.base == r.base) => {
                    untracked.bytes += r.size;
                    untracked.regions += 1;
                }
                // Counted with the untracked: a kernel may write them and nothing restores them.
                Treatment::Uncapturable => {
                    untracked.bytes += r.size;
                    untracked.regions += 1;
                }
                Treatment::VirtualMapping => {
                    untracked.vmem_bytes += r.size;
                    untracked.vmem_regions += 1;
                }
                Treatment::CapturableUntracked | Treatment::Excluded => {}
            }
        }
        plan.untracked = untracked;

        // Module variables: what the scope does not already cover, each part once.
        let mut covered: Vec<(u64, u64)> = regions
            .iter()
            .map(|r| (r.base, r.base.saturating_add(r.size)))
            .collect();
        for v in vars {
            if v.read_only || v.size == 0 || is_bookkeeping(&v) {
                continue;
            }
            covered.sort_unstable();
            let parts = uncovered(v.base, v.size, &covered);
            for (base, size) in parts {
                covered.push((base, base + size));
                regions.push(RegionRef {
                    base,
                    size,
                    generation: MODULE_GENERATION,
                    class: MemoryClass::MODULE_VARIABLE,
                });
            }
        }
        regions.sort_by_key(|r| r.base);
        plan.captured_bytes = regions.iter().map(|r| r.size).sum();
        plan.regions = regions;
        plan.capacity_bytes = self.tier_caps(policy).iter().sum();
        Ok(plan)
    }

    fn capture(
        &self,
        plan: &SnapshotPlan,
        policy: &Policy,
        wait: &WaitSpec<'_>,
    ) -> Result<Box<dyn Snapshot>, SnapshotError> {
        let sh = &self.shared;
        let start = wait.clock.now();
        let fail = |message: String| SnapshotError { message };

        // Memory outside the scope that the scope check watches (SPEC §7.2): under every
        // scope, every tracked region of a captured or capturable class that is not captured,
        // so a write through a pointer stored in device memory into fine-grained, managed or
        // pinned memory is seen like one into coarse memory.
        let mut watched: Vec<Watched> = sh
            .tracker
            .regions(sh.agent)
            .into_iter()
            .filter(|r| {
                r.size > 0
                    && matches!(
                        classify(r.class),
                        Treatment::Captured | Treatment::CapturableUntracked
                    )
                    && !plan
                        .regions
                        .iter()
                        .any(|l| l.base == r.base && l.generation == r.generation)
            })
            .map(|region| Watched {
                region,
                digests: Vec::new(),
            })
            .collect();

        // Frees and unloads of this memory wait until the copies and digests below are done;
        // taken before the liveness re-check so that its answer stays true meanwhile.
        let hold = sh.hold(plan.regions.iter().chain(watched.iter().map(|w| &w.region)));
        watched.retain(|w| sh.is_live(&w.region, None));

        // Liveness re-check: the plan may be stale.
        let mut stats = CaptureStats::default();
        let mut live: Vec<RegionRef> = Vec::with_capacity(plan.regions.len());
        let mut loads: Vec<Option<u64>> = Vec::with_capacity(plan.regions.len());
        for r in &plan.regions {
            let load = if r.generation == MODULE_GENERATION {
                sh.modules.load_generation(sh.agent, r.base)
            } else {
                None
            };
            let unloaded = r.generation == MODULE_GENERATION && load.is_none();
            if !unloaded && sh.is_live(r, load) {
                live.push(*r);
                loads.push(load);
            } else {
                log::warn!(
                    "[kernel-replay] agent {}: region {:#x}+{} was freed or reallocated since planning; not captured",
                    sh.agent,
                    r.base,
                    r.size
                );
                stats.skipped_regions += 1;
            }
        }

        // Placement: device, then pinned, then pageable, splitting a region where a tier runs out;
        // a tier that fails to allocate hands its share to the later ones.
        let caps = self.tier_caps(policy);
        let total: u64 = live.iter().map(|r| r.size).sum();
        if total > caps.iter().sum() {
            return Err(fail(format!(
                "{total} bytes do not fit the tiers (device {}, pinned {}, pageable {} bytes)",
                caps[0], caps[1], caps[2]
            )));
        }
        let mut need = [0u64; 3];
        {
            let mut left = total;
            for i in 0..3 {
                need[i] = left.min(caps[i]);
                left -= need[i];
            }
        }
        let mut cursors: [TierCursor; 3] = Default::default();
        for (i, tier) in Tier::ALL.into_iter().enumerate() {
            if need[i] == 0 {
                continue;
            }
            match sh.acquire(tier, need[i]) {
                Ok(b) => {
                    cursors[i].blocks = b;
                    cursors[i].left = need[i];
                }
                Err(e) => {
                    // The tier reported room it could not give (fragmentation, another
                    // process): its share moves to the later tiers where their caps allow.
                    let mut carry = need[i];
                    for j in i + 1..3 {
                        let take = carry.min(caps[j] - need[j]);
                        need[j] += take;
                        carry -= take;
                    }
                    if carry == 0 {
                        log::info!(
                            "[kernel-replay] agent {}: {} bytes of {} backing memory could not be allocated ({e}); using the next tiers",
                            sh.agent,
                            need[i],
                            tier.as_str()
                        );
                        need[i] = 0;
                        continue;
                    }
                    let blocks = cursors.into_iter().flat_map(|c| c.blocks).collect();
                    sh.give_back(blocks, Some(policy.pool_keep_bytes));
                    return Err(fail(format!(
                        "could not allocate {} bytes of {} backing memory, and the later tiers have no room for them: {e}",
                        need[i],
                        tier.as_str()
                    )));
                }
            }
        }

        // Assign pieces: regions in order fill the device tier, then pinned, then pageable.
        let mut regions: Vec<CapturedRegion> = Vec::with_capacity(live.len());
        let mut ops: Vec<CopyOp> = Vec::with_capacity(live.len());
        let mut t = 0;
        for r in &live {
            let mut pieces: SmallVec<[Piece; 2]> = SmallVec::new();
            let mut off = 0;
            while off < r.size {
                while cursors[t].left == 0 {
                    t += 1;
                }
                let c = &mut cursors[t];
                let b = c.blocks[c.idx];
                if c.used == b.size {
                    c.idx += 1;
                    c.used = 0;
                    continue;
                }
                let len = (r.size - off).min(b.size - c.used).min(c.left);
                pieces.push(Piece {
                    offset: off,
                    len,
                    backing: b.id,
                    backing_offset: c.used,
                });
                ops.push(CopyOp {
                    src: MemLoc::Device { addr: r.base + off },
                    dst: MemLoc::Backing {
                        id: b.id,
                        offset: c.used,
                    },
                    len,
                });
                stats.tier_bytes.add(b.tier, len);
                c.used += len;
                c.left -= len;
                off += len;
            }
            regions.push(CapturedRegion {
                region: *r,
                load: None,
                pieces,
                digests: Vec::new(),
            });
        }
        for (c, load) in regions.iter_mut().zip(&loads) {
            c.load = *load;
        }
        let blocks: Vec<Block> = cursors.into_iter().flat_map(|c| c.blocks).collect();

        if let Err(e) = sh.copy_batch(&ops, wait, "snapshot copy fence") {
            let message = format!(
                "copying {total} bytes in {} regions to backing memory failed: {e}",
                live.len()
            );
            if matches!(e, WaitError::Stuck { .. }) {
                sh.quarantine(&blocks);
            } else {
                sh.give_back(blocks, Some(policy.pool_keep_bytes));
            }
            return Err(fail(message));
        }

        // Digests before the first pass: of the captured chunks for `dirty`, and of every
        // tracked region outside an `arguments` scope for the scope check.
        let chunk = policy.chunk_bytes.max(1);
        let mut dops: Vec<DigestOp> = Vec::new();
        let mut counts: Vec<usize> = Vec::new();
        if policy.restore == RestoreMode::Dirty {
            for c in &regions {
                counts.push(chunk_ops(c.region.base, c.region.size, chunk, &mut dops));
            }
        }
        for w in &watched {
            counts.push(chunk_ops(w.region.base, w.region.size, chunk, &mut dops));
        }
        let digested = sh.digest_batch(&dops, wait);
        drop(hold);
        match digested {
            Ok(digests) => {
                let mut it = digests.into_iter();
                let mut n = counts.into_iter();
                if policy.restore == RestoreMode::Dirty {
                    for c in &mut regions {
                        c.digests = it.by_ref().take(n.next().unwrap_or(0)).collect();
                    }
                }
                for w in &mut watched {
                    w.digests = it.by_ref().take(n.next().unwrap_or(0)).collect();
                }
            }
            Err(e) => {
                // Digests read only device memory: the backing is safe to pool.
                sh.give_back(blocks, Some(policy.pool_keep_bytes));
                return Err(fail(format!("digests before the first pass failed: {e}")));
            }
        }

        stats.captured_bytes = total;
        stats.captured_regions = regions.len() as u32;
        stats.seconds = wait.clock.now().saturating_sub(start).as_secs_f64();
        Ok(Box::new(EngineSnapshot {
            shared: Arc::clone(sh),
            regions,
            blocks,
            watched,
            stats,
            mode: policy.restore,
            chunk,
            keep: policy.pool_keep_bytes,
            poisoned: false,
        }))
    }

    fn pooled_peak_bytes(&self) -> u64 {
        self.shared.pool.lock().peak
    }
}

/// Where placement stands in one tier's blocks.
#[derive(Debug, Default)]
struct TierCursor {
    blocks: Vec<Block>,
    idx: usize,
    used: u64,
    /// Bytes still to place in this tier.
    left: u64,
}

/// A snapshot alive for one window.
struct EngineSnapshot {
    shared: Arc<Shared>,
    regions: Vec<CapturedRegion>,
    blocks: Vec<Block>,
    watched: Vec<Watched>,
    stats: CaptureStats,
    mode: RestoreMode,
    chunk: u64,
    keep: u64,
    /// A restore copy was abandoned: the blocks may still be read by the device.
    poisoned: bool,
}

impl EngineSnapshot {
    /// Copy operations of one restore, per region, after the liveness re-check (and, for
    /// `dirty`, the digest comparison).
    fn restore_plan(
        &self,
        wait: &WaitSpec<'_>,
        stats: &mut RestoreStats,
    ) -> Result<Vec<(usize, Vec<CopyOp>)>, RestoreError> {
        let sh = &*self.shared;
        let mut live: Vec<usize> = Vec::with_capacity(self.regions.len());
        for (i, c) in self.regions.iter().enumerate() {
            if sh.is_live(&c.region, c.load) {
                live.push(i);
            } else {
                log::warn!(
                    "[kernel-replay] agent {}: region {:#x}+{} was freed, shrunk, reallocated or unloaded since capture; not restored",
                    sh.agent,
                    c.region.base,
                    c.region.size
                );
            }
        }
        let full = |live: Vec<usize>| {
            let mut out = Vec::with_capacity(live.len());
            for i in live {
                let c: &CapturedRegion = &self.regions[i];
                let mut ops = Vec::with_capacity(c.pieces.len());
                c.restore_ops(0, c.region.size, &mut ops);
                out.push((i, ops));
            }
            out
        };
        let mut out = Vec::with_capacity(live.len());
        match self.mode {
            RestoreMode::Full => out = full(live),
            RestoreMode::Dirty => {
                let mut dops = Vec::new();
                let mut compared = 0;
                for &i in &live {
                    let r = &self.regions[i].region;
                    chunk_ops(r.base, r.size, self.chunk, &mut dops);
                    compared += r.size;
                }
                let now = match sh.digest_batch(&dops, wait) {
                    Ok(d) => d,
                    Err(e) => {
                        // The digests only read: memory is as the pass left it, and writing
                        // every captured byte back repairs it as well as `dirty` would.
                        log::warn!(
                            "[kernel-replay] agent {}: digests of {} regions before a dirty restore failed ({e}); restoring them in full",
                            sh.agent,
                            live.len()
                        );
                        return Ok(full(live));
                    }
                };
                stats.compared_bytes += compared;
                let mut now = now.into_iter();
                for i in live {
                    let c = &self.regions[i];
                    let mut ops = Vec::new();
                    for (k, before) in c.digests.iter().enumerate() {
                        let changed = now.next() != Some(*before);
                        if changed {
                            let from = k as u64 * self.chunk;
                            let to = (from + self.chunk).min(c.region.size);
                            c.restore_ops(from, to, &mut ops);
                        }
                    }
                    if !ops.is_empty() {
                        out.push((i, ops));
                    }
                }
            }
        }
        Ok(out)
    }
}

impl Snapshot for EngineSnapshot {
    fn stats(&self) -> CaptureStats {
        self.stats.clone()
    }

    fn check_scope(&mut self, wait: &WaitSpec<'_>) -> Result<ScopeCheck, BackendError> {
        if self.watched.is_empty() {
            return Ok(ScopeCheck::Clean);
        }
        let sh = &*self.shared;
        let _hold = sh.hold(self.watched.iter().map(|w| &w.region));
        let mut dops = Vec::new();
        let mut checked: Vec<&Watched> = Vec::new();
        for w in &self.watched {
            // A region freed meanwhile cannot be compared; its bytes are no one's any more.
            if sh.is_live(&w.region, None) {
                chunk_ops(w.region.base, w.region.size, self.chunk, &mut dops);
                checked.push(w);
            }
        }
        let now = sh.digest_batch(&dops, wait).map_err(|e| match e {
            WaitError::Backend(b) => b,
            stuck @ WaitError::Stuck { .. } => BackendError::new(
                BackendErrorKind::Other,
                sh.agent,
                "scope check",
                stuck.to_string(),
            ),
        })?;
        let mut now = now.into_iter();
        for w in checked {
            let mut changed = false;
            for before in &w.digests {
                changed |= now.next() != Some(*before);
            }
            if changed {
                return Ok(ScopeCheck::Changed {
                    base: w.region.base,
                });
            }
        }
        Ok(ScopeCheck::Clean)
    }

    fn restore(&mut self, wait: &WaitSpec<'_>) -> Result<RestoreStats, RestoreError> {
        let sh = Arc::clone(&self.shared);
        let start = wait.clock.now();
        let mut stats = RestoreStats::default();
        // Frees and unloads of captured memory wait until the copies are done, and the
        // liveness re-check in `restore_plan` runs under the same hold: check and copy are one
        // step (SPEC §7.1).
        let _hold = sh.hold(self.regions.iter().map(|c| &c.region));
        let per_region = self.restore_plan(wait, &mut stats)?;
        let all: Vec<CopyOp> = per_region
            .iter()
            .flat_map(|(_, o)| o.iter().copied())
            .collect();
        let bytes: u64 = all.iter().map(|o| o.len).sum();
        match sh.copy_batch(&all, wait, "restore copy fence") {
            Ok(()) => {}
            Err(stuck @ WaitError::Stuck { .. }) => {
                self.poisoned = true;
                let r = per_region
                    .first()
                    .map(|(i, _)| self.regions[*i].region)
                    .expect("a non-empty batch has a region");
                return Err(RestoreError {
                    base: r.base,
                    size: r.size,
                    message: format!(
                        "{stuck} (batch of {} regions, {bytes} bytes, starting with this one)",
                        per_region.len()
                    ),
                });
            }
            Err(WaitError::Backend(batch_err)) => {
                // Rewriting snapshot bytes is idempotent: retry region by region, which both
                // names the failing region and rides over a transient failure.
                log::warn!(
                    "[kernel-replay] agent {}: restore batch failed ({batch_err}); retrying region by region",
                    sh.agent
                );
                for (i, ops) in &per_region {
                    let r = self.regions[*i].region;
                    if let Err(e) = sh.copy_batch(ops, wait, "restore copy fence") {
                        if matches!(e, WaitError::Stuck { .. }) {
                            self.poisoned = true;
                        }
                        return Err(RestoreError {
                            base: r.base,
                            size: r.size,
                            message: e.to_string(),
                        });
                    }
                }
            }
        }
        stats.restored_bytes = bytes;
        stats.seconds = wait.clock.now().saturating_sub(start).as_secs_f64();
        Ok(stats)
    }
}

impl Drop for EngineSnapshot {
    fn drop(&mut self) {
        let blocks = std::mem::take(&mut self.blocks);
        if self.poisoned {
            self.shared.quarantine(&blocks);
        } else {
            self.shared.give_back(blocks, Some(self.keep));
        }
    }
}
