//! The allocation inventory of SPEC §7.1: per agent, every allocation the backend reported, with
//! a generation number that is never reused, so a freed-and-reallocated address is recognised.
//!
//! The backend must call [`Tracker::record_free`] *before* it releases memory: from that moment
//! no liveness check passes for the region, so no restore writes into released memory (the
//! upstream free wrappers did it the other way round; see `UPSTREAM.md`).
//!
//! Regions of one agent never overlap in the inventory: an allocation reported over a range
//! that still holds live entries evicts them with a warning (a free the backend did not see),
//! because the new allocation is what the memory is now.
//!
//! **Holds** make a restore's liveness check and its copy one step (SPEC §7.1). The memory
//! engine takes a [`MemoryHold`] over the ranges it is about to read or write *before* it
//! re-checks their liveness, and drops it once its copies' fence completed. A free
//! ([`Tracker::record_free`]) or a code-object unload ([`Tracker::release_with`]) of memory
//! that overlaps a hold waits until the hold is dropped, and it removes the memory while new
//! holds are kept out, so either the free comes first and the liveness check fails, or the
//! restore comes first and the free waits for its copies. A restore ordered on the device
//! keeps its hold ([`OwnedMemoryHold`]) past its call and says how to tell its copies are done
//! ([`OwnedMemoryHold::done_when`]): a free then waits for them on the device, not for the
//! hold to be dropped (the holder may be the thread that frees). The wait is bounded: the holder's
//! own waits are bounded by the policy, and [`Tracker::set_release_wait_cap`] (default
//! [`DEFAULT_RELEASE_WAIT_CAP`] of wall time) guards against a holder that never returns; past
//! it the free proceeds with an error logged.
//!
//! ## Virtual-memory mappings and stream-ordered allocations (for backends)
//!
//! A backend's wrappers report them as follows (SPEC §7.1 row); every report that ends memory
//! for an agent comes *before* the runtime's call, like a free:
//!
//! | runtime call (CUDA / HSA) | report | when |
//! |---|---|---|
//! | `cuMemAddressReserve` / `hsa_amd_vmem_address_reserve` | none | |
//! | `cuMemCreate` / `hsa_amd_vmem_handle_create` | none (remember the handle's agent and class) | |
//! | `cuMemMap` / `hsa_amd_vmem_map` | [`Tracker::record_map`] with [`MappedHandle::Local`] (or `Imported` for a handle from `cuMemImportFromShareableHandle` / `hsa_amd_vmem_import_shareable_handle`, `Multicast` for a multicast object) | after it succeeded |
//! | `cuMemSetAccess` / `hsa_amd_vmem_set_access` | [`Tracker::record_access`], once per agent of the descriptor list | before when it lowers that agent's access, after when it raises it |
//! | `cuMemUnmap` / `hsa_amd_vmem_unmap` | [`Tracker::record_unmap`] | before |
//! | `cuMemAddressFree` / `hsa_amd_vmem_address_free` | [`Tracker::record_release_reservation`] | before |
//! | `cuMemRelease` / `hsa_amd_vmem_handle_release`, retain, export | none: a mapping lives until it is unmapped | |
//! | `cuMemAllocAsync`, `cuMemAllocFromPoolAsync` / the HSA pool allocation behind `hipMallocAsync` | [`Tracker::record_async_alloc`] | after it returned |
//! | `cuMemFreeAsync` / `hipFreeAsync` | [`Tracker::record_async_free`] | before (the point the free is ordered, not the point the stream reaches it) |
//!
//! A report that fails to reach the tracker leaves the memory unknown: an argument into it
//! is then asked of the runtime and declines, never captured blindly.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use replay_core::{AgentId, MemoryClass, RegionRef};

/// How long a free or an unload waits at most, in wall time, for holds over its memory.
pub const DEFAULT_RELEASE_WAIT_CAP: Duration = Duration::from_secs(300);

/// Process-wide: generations stay unique even across several trackers (tests, embedders).
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Clone, Copy)]
struct Entry {
    size: u64,
    generation: u64,
    class: MemoryClass,
}

impl Entry {
    fn region(&self, base: u64) -> RegionRef {
        RegionRef {
            base,
            size: self.size,
            generation: self.generation,
            class: self.class,
        }
    }
}

#[derive(Debug, Default)]
struct Inventory {
    /// Live allocations by base; non-overlapping.
    live: BTreeMap<u64, Entry>,
    /// Ranges a tool marked as its own (base -> size). Allocations inside them carry
    /// [`MemoryClass::TOOL_OWNED`], whichever order mark and allocation are reported in.
    tool_owned: BTreeMap<u64, u64>,
}

fn end(base: u64, size: u64) -> u64 {
    base.saturating_add(size)
}

impl Inventory {
    fn containing(&self, addr: u64) -> Option<RegionRef> {
        let (&base, e) = self.live.range(..=addr).next_back()?;
        (addr < end(base, e.size)).then(|| e.region(base))
    }

    fn in_tool_range(&self, base: u64, size: u64) -> bool {
        // A range that starts after `base + size` cannot overlap; check those before the end.
        self.tool_owned
            .range(..end(base, size.max(1)))
            .any(|(&b, &s)| end(b, s) > base)
    }

    /// Bases of live entries overlapping [base, base+size).
    fn overlapping(&self, base: u64, size: u64) -> Vec<u64> {
        let stop = end(base, size.max(1));
        let mut out: Vec<u64> = self.live.range(base..stop).map(|(&b, _)| b).collect();
        if let Some((&b, e)) = self.live.range(..base).next_back() {
            if end(b, e.size) > base {
                out.push(b);
            }
        }
        out
    }
}

/// The access an agent has to a virtual-memory mapping, as the runtime's set-access call
/// gives it (`cuMemSetAccess`, `hsa_amd_vmem_set_access`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MapAccess {
    /// No access: the agent cannot read it, so no snapshot on it can cover it.
    None,
    /// Read-only: the agent's kernels cannot change it; nothing to restore.
    Read,
    /// Read and write: captured and restored like device memory.
    ReadWrite,
}

/// What a virtual-memory mapping maps: the physical handle behind it (SPEC §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MappedHandle {
    /// A handle this process created (`cuMemCreate`, `hsa_amd_vmem_handle_create`) of device
    /// memory on `owner`, of `class` (`DEVICE_COARSE`, or `FINE_GRAINED` for fine-grained
    /// pools).
    Local {
        /// The agent whose memory backs the handle.
        owner: AgentId,
        /// Its class.
        class: MemoryClass,
    },
    /// A handle imported from another process (`cuMemImportFromShareableHandle`,
    /// `hsa_amd_vmem_import_shareable_handle`): another process may write it at any time;
    /// never captured.
    Imported {
        /// The agent whose memory backs the handle.
        owner: AgentId,
    },
    /// A multicast object (`cuMulticastCreate`): writes reach every device of the group;
    /// never captured.
    Multicast {
        /// The agent that mapped it.
        owner: AgentId,
    },
}

impl MappedHandle {
    fn owner(self) -> AgentId {
        match self {
            Self::Local { owner, .. } | Self::Imported { owner } | Self::Multicast { owner } => {
                owner
            }
        }
    }

    /// The class of the memory behind the mapping, for an agent with read-write access.
    fn class(self) -> MemoryClass {
        match self {
            Self::Local { class, .. } => class,
            Self::Imported { .. } => MemoryClass::IPC_IMPORTED,
            // No device class: uncapturable (classify).
            Self::Multicast { .. } => MemoryClass::empty(),
        }
    }
}

/// One mapped range and who may access it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    size: u64,
    handle: MappedHandle,
    access: BTreeMap<AgentId, MapAccess>,
}

impl Mapping {
    /// The inventory entries the mapping at `base` gives, as (agent, base, size, class): one
    /// for each agent with access, and one for the handle's owner whatever its access, so an
    /// argument into the mapping is never unknown (it declines when the owner has no access).
    fn entries(&self, base: u64) -> Vec<(AgentId, u64, u64, MemoryClass)> {
        let owner = self.handle.owner();
        let mut out: Vec<(AgentId, u64, u64, MemoryClass)> = self
            .access
            .iter()
            .filter(|(&a, &acc)| acc != MapAccess::None || a == owner)
            .map(|(&a, &acc)| (a, base, self.size, self.class_for(acc)))
            .collect();
        if !self.access.contains_key(&owner) {
            out.push((owner, base, self.size, self.class_for(MapAccess::None)));
        }
        out
    }

    fn class_for(&self, access: MapAccess) -> MemoryClass {
        MemoryClass::VIRTUAL_MAPPING
            | match access {
                MapAccess::ReadWrite => self.handle.class(),
                MapAccess::Read => self.handle.class() | MemoryClass::READ_ONLY,
                MapAccess::None => MemoryClass::empty(),
            }
    }
}

/// Inserts a live entry under a new generation, evicting stale entries it overlaps (frees the
/// backend did not see); returns the generation.
fn insert_entry(
    inv: &mut Inventory,
    agent: AgentId,
    base: u64,
    size: u64,
    class: MemoryClass,
) -> u64 {
    let generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
    for old in inv.overlapping(base, size) {
        let e = inv.live.remove(&old).expect("listed by overlapping");
        log::warn!(
            "[kernel-replay] agent {agent}: allocation {base:#x}+{size} overlaps {old:#x}+{} (generation {}), whose free was not reported; forgetting it",
            e.size,
            e.generation
        );
    }
    let mut class = class;
    if inv.in_tool_range(base, size) {
        class |= MemoryClass::TOOL_OWNED;
    }
    inv.live.insert(
        base,
        Entry {
            size,
            generation,
            class,
        },
    );
    generation
}

/// Waits at most the budget given for the device work a hold covers; `true` once it is done
/// ([`OwnedMemoryHold::done_when`]).
pub type DeviceDone = std::sync::Arc<dyn Fn(Duration) -> bool + Send + Sync>;

/// One hold: its id, the agent, the held ranges as (start, end), and, for a restore ordered
/// on the device, how a free can tell its copies are done.
struct Held {
    id: u64,
    agent: AgentId,
    ranges: Vec<(u64, u64)>,
    device: Option<DeviceDone>,
    /// The device work is done: frees no longer wait for this hold.
    done: bool,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("id", &self.id)
            .field("agent", &self.agent)
            .field("ranges", &self.ranges)
            .field("device", &self.device.is_some())
            .field("done", &self.done)
            .finish()
    }
}

impl Held {
    fn overlaps(&self, agent: AgentId, ranges: &[(u64, u64)]) -> bool {
        !self.done
            && self.agent == agent
            && self
                .ranges
                .iter()
                .any(|&(s, e)| ranges.iter().any(|&(rs, re)| rs < e && s < re))
    }
}

/// Ranges the memory engine reads or writes now, and the frees waiting for them.
#[derive(Debug, Default)]
struct Holds {
    next: u64,
    active: Vec<Held>,
    /// Frees and unloads waiting for a hold now.
    waiting: usize,
}

impl Holds {
    fn overlaps(&self, agent: AgentId, ranges: &[(u64, u64)]) -> bool {
        self.active.iter().any(|h| h.overlaps(agent, ranges))
    }

    /// An overlapping hold whose device work a free can wait for itself.
    fn device_wait(&self, agent: AgentId, ranges: &[(u64, u64)]) -> Option<(u64, DeviceDone)> {
        self.active
            .iter()
            .filter(|h| h.overlaps(agent, ranges))
            .find_map(|h| h.device.as_ref().map(|d| (h.id, std::sync::Arc::clone(d))))
    }
}

/// The per-process allocation inventory (SPEC §7.1). `Send + Sync`; lookups take a read lock.
#[derive(Debug)]
pub struct Tracker {
    agents: RwLock<BTreeMap<AgentId, Inventory>>,
    holds: Mutex<Holds>,
    released: Condvar,
    wait_cap: Mutex<Duration>,
    /// Virtual-memory mappings by base (process-wide addresses); non-overlapping. Lock order:
    /// `holds`, then `mappings`, then `agents`.
    mappings: Mutex<BTreeMap<u64, Mapping>>,
    /// Code objects unloaded, most recent last: what the engines' predictions forget.
    unloads: Mutex<UnloadLog>,
}

/// The most recent unloads, numbered; an engine that fell further behind forgets everything.
#[derive(Debug, Default)]
struct UnloadLog {
    /// Unloads recorded so far.
    seq: u64,
    /// The last [`UNLOAD_LOG`] of them: (number, agent, code object).
    recent: std::collections::VecDeque<(u64, AgentId, u64)>,
}

/// Unloads kept for engines that have not looked yet.
const UNLOAD_LOG: usize = 256;

impl Default for Tracker {
    fn default() -> Self {
        Self {
            agents: RwLock::default(),
            holds: Mutex::default(),
            released: Condvar::new(),
            wait_cap: Mutex::new(DEFAULT_RELEASE_WAIT_CAP),
            mappings: Mutex::default(),
            unloads: Mutex::default(),
        }
    }
}

/// Memory the engine reads or writes now: frees and unloads overlapping it wait until it is
/// dropped (see the module docs).
#[derive(Debug)]
#[must_use = "the hold ends when dropped"]
pub struct MemoryHold<'a> {
    tracker: &'a Tracker,
    id: u64,
}

impl Drop for MemoryHold<'_> {
    fn drop(&mut self) {
        self.tracker.end_hold(self.id);
    }
}

/// A [`MemoryHold`] that owns a reference to its tracker, so it can outlive the call that took
/// it: a restore ordered on the device holds its regions until its fence completed.
#[derive(Debug)]
#[must_use = "the hold ends when dropped"]
pub struct OwnedMemoryHold {
    tracker: std::sync::Arc<Tracker>,
    id: u64,
}

impl OwnedMemoryHold {
    /// The copies under this hold were handed to the device: from now on a free or unload
    /// overlapping it waits (bounded) until `done` reports them complete, not until the hold
    /// is dropped. So a free on the thread that holds it (a tool in PASS ENTER, while a
    /// restore ordered on the device runs) does not wait for itself.
    pub fn done_when(&self, done: DeviceDone) {
        let mut h = self.tracker.holds.lock();
        if let Some(held) = h.active.iter_mut().find(|x| x.id == self.id) {
            held.device = Some(done);
        }
        drop(h);
        self.tracker.released.notify_all();
    }
}

impl Drop for OwnedMemoryHold {
    fn drop(&mut self) {
        self.tracker.end_hold(self.id);
    }
}

impl Tracker {
    /// An empty inventory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Holds `ranges` (base, size) of `agent`'s memory until the returned guard is dropped:
    /// a free or an unload overlapping them waits. Take it *before* re-checking liveness.
    pub fn hold(&self, agent: AgentId, ranges: &[(u64, u64)]) -> MemoryHold<'_> {
        MemoryHold {
            tracker: self,
            id: self.begin_hold(agent, ranges),
        }
    }

    /// [`Tracker::hold`], with a guard that keeps the tracker alive.
    pub fn hold_owned(
        self: &std::sync::Arc<Self>,
        agent: AgentId,
        ranges: &[(u64, u64)],
    ) -> OwnedMemoryHold {
        OwnedMemoryHold {
            tracker: std::sync::Arc::clone(self),
            id: self.begin_hold(agent, ranges),
        }
    }

    fn begin_hold(&self, agent: AgentId, ranges: &[(u64, u64)]) -> u64 {
        let ranges = ranges
            .iter()
            .filter(|(_, size)| *size > 0)
            .map(|&(b, s)| (b, end(b, s)))
            .collect();
        let mut h = self.holds.lock();
        let id = h.next;
        h.next += 1;
        h.active.push(Held {
            id,
            agent,
            ranges,
            device: None,
            done: false,
        });
        id
    }

    fn end_hold(&self, id: u64) {
        let mut h = self.holds.lock();
        h.active.retain(|x| x.id != id);
        drop(h);
        self.released.notify_all();
    }

    /// Records that `code_object` was unloaded from `agent` (or destroyed): the engines'
    /// per-kernel predictions for its kernels (scope `predicted`) are forgotten before their
    /// next plan. Backends call it where they tell the service to forget the code object.
    pub fn record_unload(&self, agent: AgentId, code_object: u64) {
        let mut log = self.unloads.lock();
        log.seq += 1;
        let n = log.seq;
        log.recent.push_back((n, agent, code_object));
        if log.recent.len() > UNLOAD_LOG {
            log.recent.pop_front();
        }
    }

    /// Unloads recorded after the first `seen`: the new count and those unloads, or `None`
    /// in place of the list when some of them are no longer kept (forget everything).
    pub fn unloads_since(&self, seen: u64) -> (u64, Option<Vec<(AgentId, u64)>>) {
        let log = self.unloads.lock();
        if log.seq == seen {
            return (seen, Some(Vec::new()));
        }
        let complete = log.recent.front().is_some_and(|&(n, _, _)| n <= seen + 1);
        let list = complete.then(|| {
            log.recent
                .iter()
                .filter(|&&(n, _, _)| n > seen)
                .map(|&(_, a, c)| (a, c))
                .collect()
        });
        (log.seq, list)
    }

    /// Frees and unloads waiting for a hold now (tests, diagnostics).
    pub fn waiting_releases(&self) -> usize {
        self.holds.lock().waiting
    }

    /// The longest a free or an unload waits for a hold, in wall time.
    pub fn set_release_wait_cap(&self, cap: Duration) {
        *self.wait_cap.lock() = cap;
    }

    /// Waits until no hold of `agent` overlaps `ranges` (bounded), then runs `release` while
    /// new holds are kept out, and returns its result. For releases of memory the tracker does
    /// not inventory, such as a code object's variables on unload: `release` makes the memory
    /// unknown to whatever liveness check covers it (the loader's table), so a restore either
    /// finished its copies before, or sees the memory gone after.
    pub fn release_with<R>(
        &self,
        agent: AgentId,
        ranges: &[(u64, u64)],
        release: impl FnOnce() -> R,
    ) -> R {
        let ranges: Vec<(u64, u64)> = ranges
            .iter()
            .filter(|(_, size)| *size > 0)
            .map(|&(b, s)| (b, end(b, s)))
            .collect();
        let mut h = self.holds.lock();
        self.wait_for_holds(&mut h, agent, &ranges);
        release()
    }

    /// Blocks on the hold lock until no hold overlaps, or the cap passed (logged).
    fn wait_for_holds(
        &self,
        h: &mut parking_lot::MutexGuard<'_, Holds>,
        agent: AgentId,
        ranges: &[(u64, u64)],
    ) {
        if !h.overlaps(agent, ranges) {
            return;
        }
        let cap = *self.wait_cap.lock();
        let deadline = Instant::now() + cap;
        h.waiting += 1;
        while h.overlaps(agent, ranges) {
            if let Some((id, done)) = h.device_wait(agent, ranges) {
                // Copies handed to the device: wait for them there, without the lock.
                let left = deadline.saturating_duration_since(Instant::now());
                let slice = left.min(Duration::from_millis(10));
                let finished = parking_lot::MutexGuard::unlocked(h, || done(slice));
                if finished {
                    if let Some(x) = h.active.iter_mut().find(|x| x.id == id) {
                        x.done = true;
                    }
                    continue;
                }
                if Instant::now() < deadline {
                    // A waiter that answered early must not make this spin; a dropped hold
                    // wakes it.
                    let _ = self.released.wait_for(h, Duration::from_millis(1));
                    continue;
                }
            } else if !self.released.wait_until(h, deadline).timed_out() {
                continue;
            }
            if h.overlaps(agent, ranges) {
                log::error!(
                    "[kernel-replay] agent {agent}: a free of memory a restore is writing waited {cap:?} for it; releasing the memory anyway"
                );
                break;
            }
        }
        h.waiting -= 1;
    }

    /// Records an allocation the backend reported; returns its generation (never reused,
    /// process-wide counter).
    pub fn record_alloc(&self, agent: AgentId, base: u64, size: u64, class: MemoryClass) -> u64 {
        let mut agents = self.agents.write();
        insert_entry(agents.entry(agent).or_default(), agent, base, size, class)
    }

    /// Records a free *before* the backend releases the memory (so no restore writes into
    /// released memory); returns the region if it was known. When a restore or capture holds
    /// the region ([`Tracker::hold`]), waits (bounded) until it is done.
    pub fn record_free(&self, agent: AgentId, base: u64) -> Option<RegionRef> {
        let mut holds = self.holds.lock();
        let size = self.agents.read().get(&agent)?.live.get(&base)?.size;
        self.wait_for_holds(&mut holds, agent, &[(base, end(base, size))]);
        // Still under the hold lock: no restore can take a hold and pass its liveness check
        // between the wait and the removal.
        let mut agents = self.agents.write();
        let inv = agents.get_mut(&agent)?;
        let e = inv.live.remove(&base)?;
        // The tool's marks die with the memory: a later allocation at this address is the
        // application's again.
        let stale: Vec<u64> = inv
            .tool_owned
            .range(base..end(base, e.size.max(1)))
            .map(|(&b, _)| b)
            .collect();
        for b in stale {
            inv.tool_owned.remove(&b);
        }
        Some(e.region(base))
    }

    /// Memory a tool marks as its own: never tracked or captured. Live allocations overlapping
    /// the range, and allocations reported inside it later, carry [`MemoryClass::TOOL_OWNED`].
    pub fn mark_tool_owned(&self, agent: AgentId, base: u64, size: u64) {
        let mut agents = self.agents.write();
        let inv = agents.entry(agent).or_default();
        for b in inv.overlapping(base, size) {
            if let Some(e) = inv.live.get_mut(&b) {
                e.class |= MemoryClass::TOOL_OWNED;
            }
        }
        inv.tool_owned.insert(base, size);
    }

    /// Live allocations of `agent` overlapping `[base, base + size)` are shared with other
    /// processes (exported through IPC): they carry [`MemoryClass::IPC_IMPORTED`] from now on,
    /// so they are never captured and an argument into them declines (peers write them while a
    /// window runs; a restore would undo their writes). The mark dies with the allocation.
    pub fn mark_shared(&self, agent: AgentId, base: u64, size: u64) {
        let mut agents = self.agents.write();
        let Some(inv) = agents.get_mut(&agent) else {
            return;
        };
        for b in inv.overlapping(base, size.max(1)) {
            if let Some(e) = inv.live.get_mut(&b) {
                e.class |= MemoryClass::IPC_IMPORTED;
            }
        }
    }

    /// Runs `read` over those of `regions` (of `agent`) that are still allocated, under a hold
    /// that keeps their frees waiting until it returns, and answers one entry per region:
    /// `read`'s result for a live one, in order, `None` for one freed since it was listed.
    /// For readers outside the engine (a tool digesting the application's memory while other
    /// threads free it): a device read of freed memory faults the context.
    pub fn read_live<T, E>(
        &self,
        agent: AgentId,
        regions: &[RegionRef],
        read: impl FnOnce(&[RegionRef]) -> Result<Vec<T>, E>,
    ) -> Result<Vec<Option<T>>, E> {
        let ranges: Vec<(u64, u64)> = regions.iter().map(|r| (r.base, r.size)).collect();
        let _hold = self.hold(agent, &ranges);
        let live: Vec<bool> = regions.iter().map(|r| self.is_live(agent, r)).collect();
        let chosen: Vec<RegionRef> = regions
            .iter()
            .zip(&live)
            .filter(|(_, &l)| l)
            .map(|(r, _)| *r)
            .collect();
        let mut got = if chosen.is_empty() {
            Vec::new()
        } else {
            read(&chosen)?
        }
        .into_iter();
        Ok(live
            .into_iter()
            .map(|l| if l { got.next() } else { None })
            .collect())
    }

    /// Whether this exact region (base, size, generation) is still allocated.
    pub fn is_live(&self, agent: AgentId, region: &RegionRef) -> bool {
        self.agents
            .read()
            .get(&agent)
            .and_then(|inv| inv.live.get(&region.base))
            .is_some_and(|e| e.generation == region.generation && e.size == region.size)
    }

    /// The allocation containing `addr` (anywhere inside, not only at its base), of any class.
    pub fn lookup(&self, agent: AgentId, addr: u64) -> Option<RegionRef> {
        self.agents.read().get(&agent)?.containing(addr)
    }

    /// The allocation of any agent containing `addr` (peer memory), with its owner.
    pub fn lookup_any(&self, addr: u64) -> Option<(AgentId, RegionRef)> {
        self.agents
            .read()
            .iter()
            .find_map(|(&a, inv)| inv.containing(addr).map(|r| (a, r)))
    }

    // ----- virtual-memory mappings and stream-ordered allocations (SPEC §7.1) -----

    /// Records a mapping of `handle` over `[base, base + size)` of a reserved range, after
    /// `cuMemMap` / `hsa_amd_vmem_map` succeeded. It is no agent's capturable memory yet: it
    /// becomes one's with [`Tracker::record_access`]. Until then it is in the inventory of the
    /// handle's owner as a mapping without access (an argument into it declines
    /// `untracked_memory`). A mapping over a range that still holds mappings replaces them,
    /// with a warning (an unmap the backend did not see).
    pub fn record_map(&self, base: u64, size: u64, handle: MappedHandle) {
        let new = Mapping {
            size,
            handle,
            access: BTreeMap::new(),
        };
        self.edit_mappings(base, size, Some((base, new)), |b, m| {
            log::warn!(
                "[kernel-replay] mapping {base:#x}+{size} overlaps mapped {b:#x}+{}, whose unmap was not reported; forgetting it",
                m.size
            );
            None
        });
    }

    /// Records `agent`'s access to the mappings in `[base, base + size)` (`cuMemSetAccess`,
    /// `hsa_amd_vmem_set_access`: one call per agent they name). Call it *before* the
    /// runtime's call when access is lowered (to `Read` or `None`: like a free, it waits for
    /// a restore in flight, and no later restore writes the range on that agent), *after* it
    /// when access is raised. With `ReadWrite` the mapping is captured and restored on that
    /// agent like device memory, under a new generation; a mapping accessible to several
    /// agents is captured on the one whose kernel runs. A range that cuts a mapping gives
    /// each part its own region.
    pub fn record_access(&self, base: u64, size: u64, agent: AgentId, access: MapAccess) {
        self.edit_mappings(base, size, None, |b, mut m| {
            m.access.insert(agent, access);
            Some((b, m))
        });
    }

    /// The mappings in `[base, base + size)` map a handle this process exported
    /// (`cuMemExportToShareableHandle`): other processes write it whenever they like, so
    /// from now on they are shared memory, as a mapping of an imported handle is
    /// ([`MappedHandle::Imported`]: never captured, an argument into them declines), each
    /// agent's access kept. A restore in flight over them finishes first, as for an unmap.
    pub fn mark_mappings_shared(&self, base: u64, size: u64) {
        self.edit_mappings(base, size, None, |b, mut m| {
            if let MappedHandle::Local { owner, .. } = m.handle {
                m.handle = MappedHandle::Imported { owner };
            }
            Some((b, m))
        });
    }

    /// Records an unmap of `[base, base + size)` *before* the runtime unmaps it
    /// (`cuMemUnmap`, `hsa_amd_vmem_unmap`): the mappings in it are no agent's memory from now
    /// on, and a restore in flight over them finishes first (bounded, like
    /// [`Tracker::record_free`]). A range covering only some mappings of a reserved range
    /// unmaps only those; what stays mapped of a mapping the range cuts is a new region (new
    /// generation), so a snapshot of the whole is never written back.
    pub fn record_unmap(&self, base: u64, size: u64) {
        self.edit_mappings(base, size, None, |_, _| None);
    }

    /// Records the release of a reserved range *before* the runtime frees it
    /// (`cuMemAddressFree`, `hsa_amd_vmem_address_free`): whatever is still mapped in it is
    /// unmapped ([`Tracker::record_unmap`]). A handle's release (`cuMemRelease`,
    /// `hsa_amd_vmem_handle_release`) needs no report: its memory lives until it is unmapped.
    pub fn record_release_reservation(&self, base: u64, size: u64) {
        self.record_unmap(base, size);
    }

    /// Records a stream-ordered allocation (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`, the
    /// HSA pool allocation behind `hipMallocAsync`) when the allocating call returns: a region
    /// of `class` (`DEVICE_COARSE` for device pools) marked `VIRTUAL_MAPPING`, so
    /// `decline_on_vmem` covers it. Returns its generation.
    pub fn record_async_alloc(
        &self,
        agent: AgentId,
        base: u64,
        size: u64,
        class: MemoryClass,
    ) -> u64 {
        self.record_alloc(agent, base, size, class | MemoryClass::VIRTUAL_MAPPING)
    }

    /// Records the free of a stream-ordered allocation at the point it is ordered: in the
    /// wrapper of `cuMemFreeAsync` / `hipFreeAsync`, *before* the runtime's call, though the
    /// runtime releases the memory only when the stream reaches the free. Like
    /// [`Tracker::record_free`], it waits for a restore in flight over the region, and no
    /// later restore writes it.
    pub fn record_async_free(&self, agent: AgentId, base: u64) -> Option<RegionRef> {
        self.record_free(agent, base)
    }

    /// The run of mappings `region` belongs to: `region` and the agent's mappings directly
    /// before and after it, contiguous, in address order (an expandable segment maps chunks
    /// next to each other, and one tensor may span several). Just `region` when it is not a
    /// mapping.
    pub fn mapping_run(&self, agent: AgentId, region: &RegionRef) -> Vec<RegionRef> {
        let maps = self.mappings.lock();
        let agents = self.agents.read();
        let is_mapping = |base: u64, size: u64| maps.get(&base).is_some_and(|m| m.size == size);
        let Some(inv) = agents.get(&agent) else {
            return vec![*region];
        };
        if region.size == 0 || !is_mapping(region.base, region.size) {
            return vec![*region];
        }
        let mut before = Vec::new();
        let mut at = region.base;
        while let Some((&b, e)) = inv.live.range(..at).next_back() {
            if e.size == 0 || end(b, e.size) != at || !is_mapping(b, e.size) {
                break;
            }
            before.push(e.region(b));
            at = b;
        }
        before.reverse();
        before.push(*region);
        let mut next = end(region.base, region.size);
        while let Some(e) = inv.live.get(&next) {
            if e.size == 0 || !is_mapping(next, e.size) {
                break;
            }
            before.push(e.region(next));
            next = end(next, e.size);
        }
        before
    }

    /// Takes the mappings overlapping `[base, base + size)` out, keeps their parts outside
    /// it, passes each part inside to `inside` (which returns what replaces it), adds `add`,
    /// and brings the inventories in line: entries that changed (gone, cut, other access) are
    /// removed once no hold covers them, entries that appeared are inserted under new
    /// generations; unchanged ones keep theirs.
    fn edit_mappings(
        &self,
        base: u64,
        size: u64,
        add: Option<(u64, Mapping)>,
        mut inside: impl FnMut(u64, Mapping) -> Option<(u64, Mapping)>,
    ) {
        let mut holds = self.holds.lock();
        let mut maps = self.mappings.lock();
        let (s, e) = (base, end(base, size.max(1)));
        let keys: Vec<u64> = maps
            .range(..e)
            .filter(|(&b, m)| end(b, m.size.max(1)) > s)
            .map(|(&b, _)| b)
            .collect();
        let old: Vec<(u64, Mapping)> = keys
            .into_iter()
            .filter_map(|b| maps.remove(&b).map(|m| (b, m)))
            .collect();
        let mut new: Vec<(u64, Mapping)> = Vec::new();
        for (b, m) in &old {
            let me = end(*b, m.size);
            let part = |from: u64, to: u64| Mapping {
                size: to - from,
                ..m.clone()
            };
            if *b < s {
                new.push((*b, part(*b, s)));
            }
            if me > e {
                new.push((e, part(e, me)));
            }
            let (is, ie) = ((*b).max(s), me.min(e));
            if ie > is {
                new.extend(inside(is, part(is, ie)));
            }
        }
        new.extend(add);
        let old_entries: Vec<_> = old.iter().flat_map(|(b, m)| m.entries(*b)).collect();
        let new_entries: Vec<_> = new.iter().flat_map(|(b, m)| m.entries(*b)).collect();
        let gone: Vec<_> = old_entries
            .iter()
            .filter(|x| !new_entries.contains(x))
            .copied()
            .collect();
        // Like a free: wait until no restore holds what goes away. Waiting for one agent
        // lets holds of another in meanwhile, so check all again (bounded: each wait is).
        for _ in 0..=gone.len() {
            let mut waited = false;
            for &(a, b, sz, _) in &gone {
                let r = [(b, end(b, sz))];
                if holds.overlaps(a, &r) {
                    self.wait_for_holds(&mut holds, a, &r);
                    waited = true;
                }
            }
            if !waited {
                break;
            }
        }
        let mut agents = self.agents.write();
        for &(a, b, sz, _) in &gone {
            if let Some(inv) = agents.get_mut(&a) {
                if inv
                    .live
                    .get(&b)
                    .is_some_and(|x| x.size == sz && x.class.contains(MemoryClass::VIRTUAL_MAPPING))
                {
                    inv.live.remove(&b);
                }
            }
        }
        for &(a, b, sz, class) in new_entries.iter().filter(|x| !old_entries.contains(x)) {
            insert_entry(agents.entry(a).or_default(), a, b, sz, class);
        }
        maps.extend(new);
    }

    /// Every live allocation of the agent, in address order, of any class.
    pub fn regions(&self, agent: AgentId) -> Vec<RegionRef> {
        self.agents
            .read()
            .get(&agent)
            .map(|inv| inv.live.iter().map(|(&b, e)| e.region(b)).collect())
            .unwrap_or_default()
    }

    /// Agents with an inventory.
    pub fn agents(&self) -> Vec<AgentId> {
        self.agents.read().keys().copied().collect()
    }
}

#[cfg(test)]
mod tests;
