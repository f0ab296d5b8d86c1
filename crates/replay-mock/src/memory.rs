//! The [`DeviceMemory`] implementation ([`SimMemory`], SPEC §7.3, §7.4) and the device's
//! accesses to memory (kernels, copy engines, peer access, mapping access checks) over the
//! host-backed memory of [`crate::heap`] (every class of SPEC §7.1).
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

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::{
    AgentId, BackendError, BackendErrorKind, BackingId, Clock, CopyOp, DeviceMemory, Digest128,
    DigestKey, DigestOp, Fence, MemLoc, MemoryClass, PointerInfo, Tier, TierInfo,
};

use crate::expect::{CopyDirection, Event};
use crate::fault::Fault;
use crate::heap::{agent_of, check_access, Allocation, Area, Owner, Pool, RestoreHook};
use crate::invariant::WaitKind;
use crate::kernel::{Access, DeviceAccess, MemFault, MemFaultKind};
use crate::queue::{BatchResult, LaneKind, Work};
use crate::state::{AgentShared, FenceEntry, GpuShared};

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
            check_access(&a, agent, addr, buf.len() as u64, Access::Read)?;
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
            check_access(&a, agent, addr, data.len() as u64, Access::Write)?;
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
        check_access(&a, agent, addr, len as u64, Access::Write)?;
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
        check_access(&a, agent, addr, len, access)
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

impl DeviceAccess for GpuShared {
    fn read(&self, agent: AgentId, addr: u64, buf: &mut [u8], host: bool) -> Result<(), MemFault> {
        self.device_read(agent, addr, buf, host)
    }

    fn write(&self, agent: AgentId, addr: u64, data: &[u8], host: bool) -> Result<(), MemFault> {
        self.device_write(agent, addr, data, host)
    }

    fn update(
        &self,
        agent: AgentId,
        addr: u64,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), MemFault> {
        self.device_update(agent, addr, len, f)
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

    fn read_to_host(&self, addr: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.gpu
            .device_read(self.agent.id, addr, out, true)
            .map_err(|e| BackendError::on(self.agent.id, "read to host").invalid(e.to_string()))
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
        // Complete (or failed): no later work waits for it any more.
        self.agent.ordered.lock().retain(|&(f, _)| f != fence.0);
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

    /// Orders the agent's later passes and ordinary runs after the batch (a packet on their
    /// queue waits for the copy engine), where the agent is configured with `ORDERED_RESTORE`.
    fn order_after(&self, fence: Fence) -> Result<(), BackendError> {
        const OP: &str = "order after fence";
        if !self
            .agent
            .config
            .capabilities
            .contains(replay_core::Capabilities::ORDERED_RESTORE)
        {
            return Err(BackendError::on(self.agent.id, OP).error(
                BackendErrorKind::Unsupported,
                "the agent is not configured with ORDERED_RESTORE",
            ));
        }
        let seq = self
            .agent
            .fences
            .lock()
            .get(&fence.0)
            .map(|e| e.seq)
            .ok_or_else(|| {
                BackendError::on(self.agent.id, OP).invalid(format!("unknown fence {}", fence.0))
            })?;
        self.agent.ordered.lock().push((fence.0, seq));
        Ok(())
    }

    fn wait_ordered(&self, budget: Duration) -> Result<bool, BackendError> {
        let Some(seq) = self.agent.ordered_seq() else {
            return Ok(true);
        };
        Ok(self
            .gpu
            .poll_waits(&[(Arc::clone(&self.agent.copy), seq)], budget))
    }

    fn abandon_fence(&self, fence: Fence) {
        self.agent.ordered.lock().retain(|&(f, _)| f != fence.0);
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
