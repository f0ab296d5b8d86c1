//! Host-backed device memory and the [`DeviceMemory`] implementation ([`SimMemory`]).
//!
//! Every allocation of every class of SPEC §7.1 is a `Vec<u8>` keyed by a fake device address.
//! Agent `i` owns the address range `[AGENT_SPAN * (i + 1), AGENT_SPAN * (i + 2))`, split into
//! areas: device memory, host-visible memory (pinned, managed), imported memory (IPC, peer
//! mappings) and library memory (kernarg pool, snapshot backing). Addresses are aligned, freed
//! addresses are reused first-fit (so the tracker's generations matter), and each agent has
//! capacity limits per pool: device, pinned host, pageable host.
//!
//! [`SimMemory`] serves the memory layer: three tiers with capacities and modelled bandwidths,
//! backing allocations (never reported to the tracker), and batched copies and digests that
//! run asynchronously on the agent's copy engine behind fences. Digests are
//! [`replay_core::digest::digest`] of each operation's bytes.
//!
//! [`SimMemory::query_pointer`] answers like `hsa_amd_pointer_info` / `cuPointerGetAttribute`
//! for any address the simulated GPU allocated, reported to the tracker or not
//! ([`crate::SimRuntime::alloc_untracked`] models allocations made behind the tracker's back),
//! and [`SimMemory::on_next_restore`] lets a test act on another thread while a restore is in
//! flight (a free racing it, SPEC §7.1).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use replay_core::{
    AgentId, BackendError, BackendErrorKind, BackingId, Clock, CopyOp, DeviceMemory, Digest128,
    DigestKey, DigestOp, Fence, MemLoc, MemoryClass, PointerInfo, Tier, TierInfo,
};

use crate::error::SimError;
use crate::expect::{CopyDirection, Event};
use crate::fault::Fault;
use crate::gpu::{AgentShared, GpuShared};
use crate::invariant::WaitKind;
use crate::kernel::{Access, MemFault, MemFaultKind};
use crate::queue::{BatchResult, Hold, LaneKind, Work};

/// Address span of one agent.
pub const AGENT_SPAN: u64 = 0x1000_0000_0000;

/// First address of `agent`'s range.
pub fn agent_base(agent: AgentId) -> u64 {
    AGENT_SPAN * (agent.0 + 1)
}

/// The agent whose range holds `addr`.
pub fn agent_of(addr: u64) -> Option<AgentId> {
    (addr / AGENT_SPAN).checked_sub(1).map(AgentId)
}

/// Where in an agent's range an allocation lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Area {
    Device,
    /// Reserved virtual ranges, where mappings live.
    Virtual,
    Host,
    Imported,
    Library,
}

impl Area {
    fn range(self) -> (u64, u64) {
        match self {
            Self::Device => (0, 0x0600_0000_0000),
            Self::Virtual => (0x0600_0000_0000, 0x0800_0000_0000),
            Self::Host => (0x0800_0000_0000, 0x0C00_0000_0000),
            Self::Imported => (0x0C00_0000_0000, 0x0E00_0000_0000),
            Self::Library => (0x0E00_0000_0000, AGENT_SPAN),
        }
    }

    /// The area's addresses in `agent`'s range, as (start, end).
    pub(crate) fn absolute(self, agent: AgentId) -> (u64, u64) {
        let (lo, hi) = self.range();
        (agent_base(agent) + lo, agent_base(agent) + hi)
    }
}

/// Which capacity an allocation counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    /// The agent's device memory.
    Device,
    /// Page-locked host memory.
    Pinned,
    /// Ordinary host memory.
    Pageable,
    /// Memory that lives elsewhere (IPC-imported, peer mappings): no capacity here.
    Elsewhere,
}

impl Pool {
    fn index(self) -> Option<usize> {
        match self {
            Self::Device => Some(0),
            Self::Pinned => Some(1),
            Self::Pageable => Some(2),
            Self::Elsewhere => None,
        }
    }

    /// Name used in errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Device => "device",
            Self::Pinned => "pinned host",
            Self::Pageable => "pageable host",
            Self::Elsewhere => "imported",
        }
    }

    fn of_tier(t: Tier) -> Self {
        match t {
            Tier::Device => Self::Device,
            Tier::PinnedHost => Self::Pinned,
            Tier::PageableHost => Self::Pageable,
        }
    }
}

/// Who made an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// The application, reported to the tracker.
    App,
    /// The application, through a path the backend does not see (never reported).
    Unreported,
    /// A tool, marked as its own.
    Tool,
    /// A loaded code object's variable (found by enumeration, not reported).
    Module,
    /// The memory layer's backing memory.
    Backing,
    /// The runtime itself (the kernarg pool).
    Runtime,
}

/// Placement of an application allocation of `class`.
pub(crate) fn placement(class: MemoryClass) -> (Area, Pool) {
    if class.intersects(MemoryClass::IPC_IMPORTED | MemoryClass::PEER) {
        (Area::Imported, Pool::Elsewhere)
    } else if class.contains(MemoryClass::PINNED_HOST) {
        (Area::Host, Pool::Pinned)
    } else if class.contains(MemoryClass::MANAGED) {
        (Area::Host, Pool::Device)
    } else {
        (Area::Device, Pool::Device)
    }
}

/// One allocation: bytes on the host, keyed by a device address.
#[derive(Debug)]
pub(crate) struct Allocation {
    pub base: u64,
    pub size: u64,
    pub reserved: u64,
    pub class: MemoryClass,
    pub owner: Owner,
    pub pool: Pool,
    pub data: RwLock<Vec<u8>>,
    /// Set for a virtual-memory mapping: its handle and who may access it.
    pub map: Option<crate::vmem::MapInfo>,
}

/// Description of a live allocation, for tests and tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AllocInfo {
    /// Base address.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
    /// Class as allocated.
    pub class: MemoryClass,
    /// Who made it.
    pub owner: Owner,
    /// Which capacity it counts against.
    pub pool: Pool,
}

/// A test's action run on the copy engine when the next restore batch starts.
pub(crate) struct RestoreHook(Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for RestoreHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RestoreHook")
    }
}

/// One agent's memory: allocations by base and per-pool usage.
#[derive(Debug)]
pub(crate) struct Heap {
    agent: AgentId,
    base: u64,
    align: u64,
    caps: [u64; 3],
    used: Mutex<[u64; 3]>,
    allocs: RwLock<BTreeMap<u64, Arc<Allocation>>>,
    restore_hook: Mutex<Option<RestoreHook>>,
}

fn round_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

impl Heap {
    pub fn new(agent: AgentId, align: u64, caps: [u64; 3]) -> Self {
        Self {
            agent,
            base: agent_base(agent),
            align: align.max(1).next_power_of_two(),
            caps,
            used: Mutex::new([0; 3]),
            allocs: RwLock::new(BTreeMap::new()),
            restore_hook: Mutex::new(None),
        }
    }

    pub fn available(&self, pool: Pool) -> u64 {
        pool.index()
            .map(|i| self.caps[i].saturating_sub(self.used.lock()[i]))
            .unwrap_or(u64::MAX)
    }

    pub fn used(&self, pool: Pool) -> u64 {
        pool.index().map(|i| self.used.lock()[i]).unwrap_or(0)
    }

    pub fn alloc(
        &self,
        size: u64,
        class: MemoryClass,
        owner: Owner,
        area: Area,
        pool: Pool,
        at: Option<u64>,
    ) -> Result<Arc<Allocation>, SimError> {
        self.alloc_with(size, class, owner, area, pool, at, None, None)
    }

    /// [`Heap::alloc`] with the initial bytes (zeros when `None`) and a mapping's info.
    #[allow(clippy::too_many_arguments)]
    pub fn alloc_with(
        &self,
        size: u64,
        class: MemoryClass,
        owner: Owner,
        area: Area,
        pool: Pool,
        at: Option<u64>,
        data: Option<Vec<u8>>,
        map: Option<crate::vmem::MapInfo>,
    ) -> Result<Arc<Allocation>, SimError> {
        let reserved = round_up(size.max(1), self.align);
        let mut allocs = self.allocs.write();
        if let Some(i) = pool.index() {
            let used = self.used.lock()[i];
            let available = self.caps[i].saturating_sub(used);
            if reserved > available {
                return Err(SimError::OutOfMemory {
                    agent: self.agent,
                    pool: pool.as_str(),
                    requested: reserved,
                    available,
                });
            }
        }
        let (lo, hi) = area.range();
        let (start, end) = (self.base + lo, self.base + hi);
        let base = match at {
            Some(a) => {
                let overlaps = allocs
                    .range(..a.saturating_add(reserved))
                    .next_back()
                    .is_some_and(|(&b, x)| b + x.reserved > a);
                if overlaps || agent_of(a) != Some(self.agent) {
                    return Err(SimError::AddressInUse {
                        agent: self.agent,
                        addr: a,
                        size,
                    });
                }
                a
            }
            None => {
                let mut cursor = start;
                for (&b, x) in allocs.range(start..end) {
                    if b >= cursor && b - cursor >= reserved {
                        break;
                    }
                    cursor = cursor.max(round_up(b + x.reserved, self.align));
                }
                if end.saturating_sub(cursor) < reserved {
                    return Err(SimError::OutOfMemory {
                        agent: self.agent,
                        pool: "address space",
                        requested: reserved,
                        available: end.saturating_sub(cursor),
                    });
                }
                cursor
            }
        };
        if let Some(i) = pool.index() {
            self.used.lock()[i] += reserved;
        }
        let a = Arc::new(Allocation {
            base,
            size,
            reserved,
            class,
            owner,
            pool,
            data: RwLock::new(
                data.unwrap_or_else(|| vec![0u8; usize::try_from(size).unwrap_or(usize::MAX)]),
            ),
            map,
        });
        allocs.insert(base, Arc::clone(&a));
        Ok(a)
    }

    pub fn get(&self, base: u64) -> Option<Arc<Allocation>> {
        self.allocs.read().get(&base).cloned()
    }

    pub fn remove(&self, base: u64) -> Option<Arc<Allocation>> {
        let a = self.allocs.write().remove(&base)?;
        if let Some(i) = a.pool.index() {
            let mut u = self.used.lock();
            u[i] = u[i].saturating_sub(a.reserved);
        }
        Some(a)
    }

    /// The allocation containing `addr`.
    pub fn find(&self, addr: u64) -> Option<Arc<Allocation>> {
        let map = self.allocs.read();
        let (_, a) = map.range(..=addr).next_back()?;
        (addr < a.base + a.size.max(1)).then(|| Arc::clone(a))
    }

    pub fn all(&self) -> Vec<Arc<Allocation>> {
        self.allocs.read().values().cloned().collect()
    }
}

impl GpuShared {
    /// Resolves `len` bytes at `addr` to an allocation and offset, on any agent (peer access).
    fn resolve(
        &self,
        agent: AgentId,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<(Arc<Allocation>, usize), MemFault> {
        let fault = |kind| MemFault {
            agent,
            addr,
            len,
            access,
            kind,
        };
        let owner = agent_of(addr).ok_or_else(|| fault(MemFaultKind::Unmapped))?;
        let a = self
            .agent_shared(owner)
            .and_then(|o| o.heap.find(addr))
            .ok_or_else(|| fault(MemFaultKind::Unmapped))?;
        let off = addr - a.base;
        if off.checked_add(len).is_none_or(|e| e > a.size) {
            return Err(fault(MemFaultKind::OutOfBounds {
                base: a.base,
                size: a.size,
            }));
        }
        Ok((a, off as usize))
    }

    /// Loads bytes as agent `agent` sees them (host access when `host`).
    pub(crate) fn device_read(
        &self,
        agent: AgentId,
        addr: u64,
        buf: &mut [u8],
        _host: bool,
    ) -> Result<(), MemFault> {
        let (a, off) = self.resolve(agent, addr, buf.len() as u64, Access::Read)?;
        if !_host {
            crate::vmem::check_access(&a, agent, addr, buf.len() as u64, Access::Read)?;
        }
        buf.copy_from_slice(&a.data.read()[off..off + buf.len()]);
        Ok(())
    }

    /// Stores bytes; a device store to read-only memory faults, a host store does not.
    pub(crate) fn device_write(
        &self,
        agent: AgentId,
        addr: u64,
        data: &[u8],
        host: bool,
    ) -> Result<(), MemFault> {
        let (a, off) = self.resolve(agent, addr, data.len() as u64, Access::Write)?;
        if !host {
            crate::vmem::check_access(&a, agent, addr, data.len() as u64, Access::Write)?;
        }
        if !host && crate::kernel::is_read_only(a.class) {
            return Err(MemFault {
                agent,
                addr,
                len: data.len() as u64,
                access: Access::Write,
                kind: MemFaultKind::ReadOnly,
            });
        }
        a.data.write()[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Read-modify-write under one lock.
    pub(crate) fn device_update(
        &self,
        agent: AgentId,
        addr: u64,
        len: usize,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<(), MemFault> {
        let (a, off) = self.resolve(agent, addr, len as u64, Access::Write)?;
        crate::vmem::check_access(&a, agent, addr, len as u64, Access::Write)?;
        if crate::kernel::is_read_only(a.class) {
            return Err(MemFault {
                agent,
                addr,
                len: len as u64,
                access: Access::Write,
                kind: MemFaultKind::ReadOnly,
            });
        }
        f(&mut a.data.write()[off..off + len]);
        Ok(())
    }

    /// An application's asynchronous copy, executed on the copy engine.
    pub(crate) fn app_copy(
        &self,
        agent: &AgentShared,
        dst: u64,
        src: u64,
        len: u64,
    ) -> Result<(), MemFault> {
        let mut tmp = vec![0u8; len as usize];
        self.device_read(agent.id, src, &mut tmp, true)?;
        self.device_write(agent.id, dst, &tmp, true)?;
        if self.config.advance_clock_for_work {
            self.clock.advance(Duration::from_secs_f64(
                len as f64 / (agent.config.device_gbps * 1e9),
            ));
        }
        Ok(())
    }

    /// Whether `agent`'s copy engine may access a mapping at `addr` (other memory: yes).
    fn copy_access(
        &self,
        agent: AgentId,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<(), MemFault> {
        let (a, _) = self.resolve(agent, addr, len, access)?;
        crate::vmem::check_access(&a, agent, addr, len, access)
    }

    fn loc_read(&self, agent: &AgentShared, loc: MemLoc, len: u64) -> Result<Vec<u8>, String> {
        let mut buf = vec![0u8; len as usize];
        match loc {
            MemLoc::Device { addr } => self
                .device_read(agent.id, addr, &mut buf, true)
                .and_then(|()| self.copy_access(agent.id, addr, len, Access::Read))
                .map_err(|e| e.to_string())?,
            MemLoc::Backing { id, offset } => {
                let b = agent.backing(id)?;
                let end = offset.checked_add(len).filter(|&e| e <= b.size).ok_or_else(|| {
                    format!("backing {} read of {len} bytes at offset {offset} runs past its {} bytes", id.0, b.size)
                })?;
                buf.copy_from_slice(&b.data.read()[offset as usize..end as usize]);
            }
        }
        Ok(buf)
    }

    fn loc_write(&self, agent: &AgentShared, loc: MemLoc, data: &[u8]) -> Result<(), String> {
        match loc {
            MemLoc::Device { addr } => self
                .copy_access(agent.id, addr, data.len() as u64, Access::Write)
                .and_then(|()| self.device_write(agent.id, addr, data, true))
                .map_err(|e| e.to_string()),
            MemLoc::Backing { id, offset } => {
                let b = agent.backing(id)?;
                let len = data.len() as u64;
                let end = offset.checked_add(len).filter(|&e| e <= b.size).ok_or_else(|| {
                    format!("backing {} write of {len} bytes at offset {offset} runs past its {} bytes", id.0, b.size)
                })?;
                b.data.write()[offset as usize..end as usize].copy_from_slice(data);
                Ok(())
            }
        }
    }

    fn modelled_copy_seconds(&self, agent: &AgentShared, loc: MemLoc, len: u64) -> f64 {
        let gbps = match loc {
            MemLoc::Backing { id, .. } => match agent.backing(id).map(|b| b.pool) {
                Ok(Pool::Pinned) => agent.config.pinned_gbps,
                Ok(Pool::Pageable) => agent.config.pageable_gbps,
                _ => agent.config.device_gbps,
            },
            MemLoc::Device { .. } => agent.config.device_gbps,
        };
        len as f64 / (gbps.max(1e-3) * 1e9)
    }

    /// A batch of the memory layer's copies, on the copy engine.
    pub(crate) fn run_copies(&self, agent: &AgentShared, ops: &[CopyOp]) -> Result<(), String> {
        if direction(ops) == CopyDirection::Restore {
            let hook = agent.heap.restore_hook.lock().take();
            if let Some(RestoreHook(f)) = hook {
                f();
            }
        }
        let mut secs = 0.0;
        for (i, op) in ops.iter().enumerate() {
            // In bounded slices: a whole-region staging buffer would cost a fresh allocation
            // (and its page faults) as large as the region.
            const SLICE: u64 = 4 << 20;
            let mut copied = Ok(());
            let mut off = 0;
            while off < op.len && copied.is_ok() {
                let n = SLICE.min(op.len - off);
                copied = self
                    .loc_read(agent, offset_loc(op.src, off), n)
                    .and_then(|d| self.loc_write(agent, offset_loc(op.dst, off), &d));
                off += n;
            }
            let data = copied.map_err(|e| {
                format!(
                    "copy {} of {}: {:?} -> {:?} ({} bytes): {e}",
                    i + 1,
                    ops.len(),
                    op.src,
                    op.dst,
                    op.len
                )
            });
            data?;
            secs += self
                .modelled_copy_seconds(agent, op.src, op.len)
                .max(self.modelled_copy_seconds(agent, op.dst, op.len));
        }
        if self.config.advance_clock_for_work {
            self.clock.advance(Duration::from_secs_f64(secs));
        }
        Ok(())
    }

    /// A batch of the memory layer's digests, on the copy engine.
    pub(crate) fn run_digests(
        &self,
        agent: &AgentShared,
        ops: &[DigestOp],
        key: DigestKey,
    ) -> Result<Vec<Digest128>, String> {
        let mut out = Vec::with_capacity(ops.len());
        let mut secs = 0.0;
        for (i, op) in ops.iter().enumerate() {
            let data = self.loc_read(agent, op.at, op.len).map_err(|e| {
                format!(
                    "digest {} of {}: {:?} ({} bytes): {e}",
                    i + 1,
                    ops.len(),
                    op.at,
                    op.len
                )
            })?;
            out.push(replay_core::digest::digest(key, &data));
            secs += self.modelled_copy_seconds(agent, op.at, op.len);
        }
        if self.config.advance_clock_for_work {
            self.clock.advance(Duration::from_secs_f64(secs));
        }
        Ok(out)
    }
}

impl AgentShared {
    pub(crate) fn backing(&self, id: BackingId) -> Result<Arc<Allocation>, String> {
        self.backings
            .lock()
            .get(&id.0)
            .cloned()
            .ok_or_else(|| format!("backing {} is not allocated", id.0))
    }
}

/// A submitted batch of copies or digests.
#[derive(Debug)]
pub(crate) struct FenceEntry {
    seq: u64,
    digests: bool,
    result: BatchResult,
    begun: Duration,
    hold: Option<Arc<Hold>>,
}

/// One agent's memory as the memory layer drives it (implements [`DeviceMemory`]).
pub struct SimMemory {
    pub(crate) gpu: Arc<GpuShared>,
    pub(crate) agent: Arc<AgentShared>,
}

impl std::fmt::Debug for SimMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimMemory")
            .field("agent", &self.agent.id)
            .finish_non_exhaustive()
    }
}

impl SimMemory {
    /// Backing bytes allocated now, per tier (tests check that pools are returned).
    pub fn backing_bytes(&self, tier: Tier) -> u64 {
        self.agent
            .backings
            .lock()
            .values()
            .filter(|b| b.pool == Pool::of_tier(tier))
            .map(|b| b.size)
            .sum()
    }

    /// Number of live backing allocations.
    pub fn backing_count(&self) -> usize {
        self.agent.backings.lock().len()
    }

    /// Runs `f` on the agent's copy engine when the next restore batch (backing → device
    /// copies) starts executing, before it writes a byte; the window is then waiting for that
    /// batch's fence. For tests that race a free or an unload against a restore in flight.
    /// Replaces a hook not run yet.
    pub fn on_next_restore(&self, f: impl FnOnce() + Send + 'static) {
        *self.agent.heap.restore_hook.lock() = Some(RestoreHook(Box::new(f)));
    }

    fn submit_batch(
        &self,
        work: impl FnOnce(Option<String>, BatchResult) -> Work,
        fail: Option<String>,
        stall: bool,
        digests: bool,
    ) -> Result<Fence, BackendError> {
        let result: BatchResult = Arc::new(Mutex::new(None));
        let lane = &self.agent.copy;
        let hold = stall.then(|| {
            let h = self.gpu.new_hold("copy batch");
            let _ = lane.push(Work::Hold(Arc::clone(&h)));
            h
        });
        let seq = lane.push(work(fail, Arc::clone(&result))).ok_or_else(|| {
            BackendError::on(self.agent.id, "submit copies")
                .error(BackendErrorKind::DeviceLost, "simulator shut down")
        })?;
        let id = self.gpu.next_id();
        self.agent.fences.lock().insert(
            id,
            FenceEntry {
                seq,
                digests,
                result,
                begun: self.gpu.clock.now(),
                hold,
            },
        );
        Ok(Fence(id))
    }

    fn end_wait(&self, e: &FenceEntry, abandoned: bool) {
        self.gpu.invariants.record_wait(
            self.agent.id,
            WaitKind::Fence,
            e.begun,
            self.gpu.clock.now(),
            abandoned,
        );
    }
}

/// `loc` moved `off` bytes on.
fn offset_loc(loc: MemLoc, off: u64) -> MemLoc {
    match loc {
        MemLoc::Device { addr } => MemLoc::Device { addr: addr + off },
        MemLoc::Backing { id, offset } => MemLoc::Backing {
            id,
            offset: offset + off,
        },
    }
}

fn direction(ops: &[CopyOp]) -> CopyDirection {
    let capture = ops.iter().all(|o| {
        matches!(
            (o.src, o.dst),
            (MemLoc::Device { .. }, MemLoc::Backing { .. })
        )
    });
    let restore = ops.iter().all(|o| {
        matches!(
            (o.src, o.dst),
            (MemLoc::Backing { .. }, MemLoc::Device { .. })
        )
    });
    match (capture, restore) {
        (true, false) => CopyDirection::Capture,
        (false, true) => CopyDirection::Restore,
        _ => CopyDirection::Other,
    }
}

impl DeviceMemory for SimMemory {
    fn agent(&self) -> AgentId {
        self.agent.id
    }

    fn tier_info(&self, tier: Tier) -> Option<TierInfo> {
        let c = &self.agent.config;
        let gbps = match tier {
            Tier::Device => c.device_gbps,
            Tier::PinnedHost => c.pinned_gbps,
            Tier::PageableHost => c.pageable_gbps,
        };
        Some(TierInfo {
            available_bytes: self.agent.heap.available(Pool::of_tier(tier)),
            gbps,
        })
    }

    fn alloc_backing(&self, tier: Tier, bytes: u64) -> Result<BackingId, BackendError> {
        let id = self.agent.id;
        if let Some(f) = self.gpu.take_fault(id, |f| {
            matches!(f, Fault::SnapshotOom) || *f == Fault::TierOom(tier)
        }) {
            return Err(
                BackendError::on(self.agent.id, "allocate backing memory").error(
                    BackendErrorKind::OutOfMemory,
                    format!("injected {f}: {bytes} bytes of {} memory", tier.as_str()),
                ),
            );
        }
        let a = self
            .agent
            .heap
            .alloc(
                bytes,
                MemoryClass::TOOL_OWNED,
                Owner::Backing,
                Area::Library,
                Pool::of_tier(tier),
                None,
            )
            .map_err(|e| {
                BackendError::on(self.agent.id, "allocate backing memory")
                    .error(BackendErrorKind::OutOfMemory, e.to_string())
            })?;
        let bid = self.gpu.next_id();
        self.agent.backings.lock().insert(bid, a);
        Ok(BackingId(bid))
    }

    fn free_backing(&self, id: BackingId) {
        if let Some(a) = self.agent.backings.lock().remove(&id.0) {
            self.agent.heap.remove(a.base);
        } else {
            log::error!(
                "[replay-mock] agent {}: free of unknown backing {}",
                self.agent.id,
                id.0
            );
        }
    }

    fn submit_copies(&self, ops: &[CopyOp]) -> Result<Fence, BackendError> {
        let agent = self.agent.id;
        for op in ops {
            for loc in [op.src, op.dst] {
                if let MemLoc::Backing { id, .. } = loc {
                    self.agent
                        .backing(id)
                        .map_err(|m| BackendError::on(self.agent.id, "submit copies").invalid(m))?;
                }
            }
        }
        let dir = direction(ops);
        let bytes = ops.iter().map(|o| o.len).sum();
        self.gpu.recorder.record(Event::CopyBatch {
            agent,
            ops: ops.len(),
            bytes,
            direction: dir,
        });
        let touches = |capture: bool| {
            ops.iter().any(|o| match (o.src, o.dst) {
                (MemLoc::Device { .. }, MemLoc::Backing { .. }) => capture,
                (MemLoc::Backing { .. }, MemLoc::Device { .. }) => !capture,
                _ => false,
            })
        };
        let mut fail = None;
        let mut stall = false;
        if touches(true) {
            if let Some(f) = self.gpu.take_fault(agent, |f| {
                matches!(f, Fault::CaptureCopyFail | Fault::CaptureCopyStuck)
            }) {
                match f {
                    Fault::CaptureCopyStuck => stall = true,
                    _ => fail = Some(format!("injected {f}: the copy engine reported an error")),
                }
            }
        }
        if touches(false) {
            if let Some(f) = self
                .gpu
                .take_fault(agent, |f| matches!(f, Fault::RestoreFail))
            {
                fail = Some(format!("injected {f}: the copy engine reported an error"));
            }
        }
        let owned = ops.to_vec();
        self.submit_batch(
            move |fail, result| Work::Copies {
                ops: owned,
                fail,
                result,
            },
            fail,
            stall,
            false,
        )
    }

    fn submit_digests(&self, ops: &[DigestOp], key: DigestKey) -> Result<Fence, BackendError> {
        let agent = self.agent.id;
        for op in ops {
            if let MemLoc::Backing { id, .. } = op.at {
                self.agent
                    .backing(id)
                    .map_err(|m| BackendError::on(self.agent.id, "submit digests").invalid(m))?;
            }
        }
        self.gpu.recorder.record(Event::DigestBatch {
            agent,
            ops: ops.len(),
            bytes: ops.iter().map(|o| o.len).sum(),
        });
        let fail = self
            .gpu
            .take_fault(agent, |f| matches!(f, Fault::DigestFail))
            .map(|f| format!("injected {f}: the digest kernel reported an error"));
        let owned = ops.to_vec();
        self.submit_batch(
            move |fail, result| Work::Digests {
                ops: owned,
                key,
                fail,
                result,
            },
            fail,
            false,
            true,
        )
    }

    fn poll_fence(&self, fence: Fence, budget: Duration) -> Result<bool, BackendError> {
        let (seq, result) = {
            let f = self.agent.fences.lock();
            let e = f.get(&fence.0).ok_or_else(|| {
                BackendError::on(self.agent.id, "poll fence")
                    .invalid(format!("unknown fence {}", fence.0))
            })?;
            (e.seq, Arc::clone(&e.result))
        };
        let lane = Arc::clone(&self.agent.copy);
        debug_assert_eq!(lane.kind, LaneKind::Copy);
        if !self.gpu.poll_waits(&[(lane, seq)], budget) {
            return Ok(false);
        }
        let r = result.lock().clone();
        let mut fences = self.agent.fences.lock();
        match r {
            Some(Ok(_)) => {
                let keep = fences.get(&fence.0).is_some_and(|e| e.digests);
                if let Some(e) = fences.get(&fence.0) {
                    self.end_wait(e, false);
                }
                if !keep {
                    fences.remove(&fence.0);
                }
                Ok(true)
            }
            Some(Err(msg)) => {
                if let Some(e) = fences.remove(&fence.0) {
                    self.end_wait(&e, false);
                }
                Err(BackendError::on(self.agent.id, "copy batch")
                    .error(BackendErrorKind::CopyFailed, msg))
            }
            None => Err(BackendError::on(self.agent.id, "poll fence").error(
                BackendErrorKind::Other,
                "the batch completed without a result",
            )),
        }
    }

    fn take_digests(&self, fence: Fence) -> Result<Vec<Digest128>, BackendError> {
        let e = self.agent.fences.lock().remove(&fence.0).ok_or_else(|| {
            BackendError::on(self.agent.id, "take digests")
                .invalid(format!("unknown fence {}", fence.0))
        })?;
        if !e.digests {
            return Err(BackendError::on(self.agent.id, "take digests")
                .invalid(format!("fence {} is a copy batch", fence.0)));
        }
        let r = e.result.lock().clone();
        match r {
            Some(Ok(d)) => Ok(d),
            Some(Err(msg)) => Err(BackendError::on(self.agent.id, "digest batch")
                .error(BackendErrorKind::CopyFailed, msg)),
            None => Err(BackendError::on(self.agent.id, "take digests")
                .invalid(format!("fence {} has not completed", fence.0))),
        }
    }

    /// The simulated runtime's pointer query: any allocation of any agent that holds `addr`,
    /// whoever made it (reported to the tracker or not, module variables, the kernarg pool,
    /// backing memory: as the real runtimes, it knows them all). Host-resident memory
    /// (pinned, managed) has no owning agent; device memory names its agent.
    fn query_pointer(&self, addr: u64) -> Result<Option<PointerInfo>, BackendError> {
        let Some(owner) = agent_of(addr) else {
            return Ok(None);
        };
        let Some(a) = self.gpu.agent_shared(owner).and_then(|o| o.heap.find(addr)) else {
            return Ok(None);
        };
        let host = a
            .class
            .intersects(MemoryClass::PINNED_HOST | MemoryClass::MANAGED);
        Ok(Some(PointerInfo {
            base: a.base,
            size: a.size,
            class: a.class,
            owner: (!host).then_some(owner),
        }))
    }

    fn abandon_fence(&self, fence: Fence) {
        if let Some(e) = self.agent.fences.lock().remove(&fence.0) {
            self.end_wait(&e, true);
            if let Some(h) = &e.hold {
                h.release();
            }
            self.gpu.recorder.record(Event::FenceAbandoned {
                agent: self.agent.id,
            });
        }
    }
}
