//! [`DeviceMemory`] for HSA (SPEC §7, §9.1): the memory layer's copies and digests on one agent,
//! and a [`MemoryEngine`] per agent over the stage-1 tracker.
//!
//! **Copies are asynchronous**: a batch is one `hsa_amd_memory_async_copy` per operation
//! through the original (unwrapped) entry, all decrementing one completion signal armed with
//! the batch's size, so the copy engines run them concurrently and the fence is that signal
//! reaching 0 (waited on directly, bounded, never through an async handler). No copy of ours
//! reaches the copy fence or the tracker. A copy the runtime refuses part-way through a batch
//! leaves the earlier ones in flight: the signal is lowered by the refused remainder, and the
//! fence reports the failure only once the submitted copies finished, so the memory layer
//! never reuses backing memory a copy still writes (a fence that does not finish in time is
//! abandoned, its signal leaked and its backing quarantined by the memory layer). Completion
//! signals are reused across batches.
//!
//! Digests are **host digests**: each range is copied (synchronously, `hsa_memory_copy`) slice
//! by slice into one staging block from the CPU agent's fine-grained pool and digested there as
//! a stream ([`replay_core::digest::DigestStream`]), so host memory stays bounded whatever the
//! range's size, so HSA runs with
//! `restore=full` (what `restore=auto` resolves to here) until a device digest kernel exists. Backing memory
//! comes from the agent's coarse-grained device pool (device tier) and the CPU's fine-grained
//! pool (pinned tier, made accessible to the GPU with `hsa_amd_agents_allow_access`) through
//! the original `hsa_amd_memory_pool_allocate`, so it is never tracked; there is no pageable
//! tier.
//!
//! Application host memory (pinned pools, locked memory) is copied naming a CPU agent for it,
//! as the runtime copies host memory; device memory naming the GPU. `query_pointer` answers
//! from `hsa_amd_pointer_info` through the original entry, classified by
//! [`crate::tracker::pointer_class`].

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::digest::DigestStream;
use replay_core::{
    AgentId, BackendError, BackendErrorKind, BackingId, CopyOp, DeviceMemory, Digest128, DigestKey,
    DigestOp, Fence, MemLoc, PointerInfo, Tier, TierInfo,
};
use replay_memory::MemoryEngine;

use crate::module::HsaModules;
use crate::state::{self, backend, AgentInfo, Originals, QueueFns};
use crate::sys;
use crate::tracker;

/// Device memory of one GPU agent, driven through the original entries.
pub struct HsaMemory {
    agent: AgentInfo,
    o: Arc<Originals>,
    q: QueueFns,
    device_pool: Option<sys::hsa_amd_memory_pool_t>,
    /// The CPU agent owning `host_pool`, and the pool.
    host_pool: Option<(sys::hsa_agent_t, sys::hsa_amd_memory_pool_t)>,
    backings: Mutex<HashMap<u64, (u64, u64, Tier)>>,
    /// Copy batches in flight, by fence.
    batches: Mutex<HashMap<u64, Batch>>,
    /// Completion signals of finished batches, at 0, for reuse.
    idle_signals: Mutex<Vec<sys::hsa_signal_t>>,
    digests: Mutex<HashMap<u64, Vec<Digest128>>>,
    /// The pinned block host digests stage through, once allocated.
    staging: Mutex<Option<BackingId>>,
    next: AtomicU64,
}

/// One batch of asynchronous copies: complete when `signal` reaches 0.
#[derive(Debug)]
struct Batch {
    signal: sys::hsa_signal_t,
    /// Why part of the batch was not submitted (reported once the rest finished).
    refused: Option<String>,
}

impl std::fmt::Debug for HsaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HsaMemory")
            .field("agent", &self.agent)
            .field("device_pool", &self.device_pool)
            .field("host_pool", &self.host_pool)
            .finish_non_exhaustive()
    }
}

unsafe extern "C" fn collect_pool(p: sys::hsa_amd_memory_pool_t, data: *mut c_void) -> u32 {
    // SAFETY: `data` is the `Vec` passed by `pools_of`, alive for the iteration.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        (*data.cast::<Vec<sys::hsa_amd_memory_pool_t>>()).push(p)
    }));
    sys::HSA_STATUS_SUCCESS
}

unsafe extern "C" fn collect_agent(a: sys::hsa_agent_t, data: *mut c_void) -> u32 {
    // SAFETY: `data` is the `Vec` passed by `cpu_agents`, alive for the iteration.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        (*data.cast::<Vec<sys::hsa_agent_t>>()).push(a)
    }));
    sys::HSA_STATUS_SUCCESS
}

fn pools_of(q: &QueueFns, agent: sys::hsa_agent_t) -> Vec<sys::hsa_amd_memory_pool_t> {
    let mut v: Vec<sys::hsa_amd_memory_pool_t> = Vec::new();
    // SAFETY: the original iteration with a callback of the right type and a live `Vec`.
    unsafe { (q.iterate_pools)(agent, Some(collect_pool), (&mut v as *mut Vec<_>).cast()) };
    v
}

fn pool_u32(o: &Originals, p: sys::hsa_amd_memory_pool_t, attr: u32) -> Option<u32> {
    let mut v: u32 = 0;
    // SAFETY: the original pool query; segment and flags are 4-byte attributes.
    let st = unsafe { (o.pool_get_info)(p, attr, (&mut v as *mut u32).cast()) };
    (st == sys::HSA_STATUS_SUCCESS).then_some(v)
}

fn pick(
    o: &Originals,
    pools: &[sys::hsa_amd_memory_pool_t],
    want: u32,
) -> Option<sys::hsa_amd_memory_pool_t> {
    pools.iter().copied().find(|&p| {
        pool_u32(o, p, sys::HSA_AMD_MEMORY_POOL_INFO_SEGMENT) == Some(sys::HSA_AMD_SEGMENT_GLOBAL)
            && pool_u32(o, p, sys::HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS).is_some_and(|f| {
                f & want != 0 && f & sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT == 0
            })
    })
}

impl HsaMemory {
    /// The memory of GPU agent `agent`, its pools found through the original entries.
    pub fn new(agent: AgentInfo, o: Arc<Originals>, q: QueueFns) -> Self {
        let handle = sys::hsa_agent_t {
            handle: agent.handle,
        };
        let device_pool = pick(
            &o,
            &pools_of(&q, handle),
            sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
        );
        let mut agents: Vec<sys::hsa_agent_t> = Vec::new();
        // SAFETY: the original iteration with a callback of the right type and a live `Vec`.
        unsafe { (q.iterate_agents)(Some(collect_agent), (&mut agents as *mut Vec<_>).cast()) };
        let host_pool = agents
            .into_iter()
            .filter(|a| backend().agent(&o, *a).is_cpu())
            .find_map(|a| {
                pick(
                    &o,
                    &pools_of(&q, a),
                    sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
                )
                .map(|p| (a, p))
            });
        Self {
            agent,
            o,
            q,
            device_pool,
            host_pool,
            backings: Mutex::new(HashMap::new()),
            batches: Mutex::new(HashMap::new()),
            idle_signals: Mutex::new(Vec::new()),
            digests: Mutex::new(HashMap::new()),
            staging: Mutex::new(None),
            next: AtomicU64::new(1),
        }
    }

    /// `HSA_AMD_AGENT_INFO_MEMORY_AVAIL` of the GPU, when the runtime answers it.
    fn memory_avail(&self) -> Option<u64> {
        let mut v: u64 = 0;
        // SAFETY: the original agent query; MEMORY_AVAIL is a `uint64_t`.
        let st = unsafe {
            (self.o.agent_get_info)(
                self.gpu(),
                sys::HSA_AMD_AGENT_INFO_MEMORY_AVAIL,
                (&mut v as *mut u64).cast(),
            )
        };
        (st == sys::HSA_STATUS_SUCCESS).then_some(v)
    }

    fn gpu(&self) -> sys::hsa_agent_t {
        sys::hsa_agent_t {
            handle: self.agent.handle,
        }
    }

    fn pool(&self, tier: Tier) -> Option<sys::hsa_amd_memory_pool_t> {
        match tier {
            Tier::Device => self.device_pool,
            Tier::PinnedHost => self.host_pool.map(|(_, p)| p),
            Tier::PageableHost => None,
        }
    }

    fn addr(&self, loc: MemLoc) -> Result<u64, BackendError> {
        self.locate(loc).map(|(a, _)| a)
    }

    /// The agent a copy names for application memory at `addr`: a CPU agent for host memory
    /// (pinned or locked, which the runtime copies as host memory), the GPU otherwise.
    fn side_of(&self, addr: u64) -> sys::hsa_agent_t {
        let cpu = self.host_pool.map(|(cpu, _)| cpu);
        if let Some(r) = backend().tracker.lookup(self.agent.id, addr) {
            return match cpu {
                Some(cpu) if r.class.contains(replay_core::MemoryClass::PINNED_HOST) => cpu,
                _ => self.gpu(),
            };
        }
        // Memory the tracker never saw (the memory layer asked `query_pointer` about it).
        match tracker::pointer_info(&self.o, addr as *const c_void) {
            Some(info) if info.type_ == sys::HSA_EXT_POINTER_TYPE_LOCKED => {
                cpu.unwrap_or(self.gpu())
            }
            Some(info)
                if info.agentOwner.handle != 0
                    && backend().agent(&self.o, info.agentOwner).is_cpu() =>
            {
                info.agentOwner
            }
            _ => self.gpu(),
        }
    }

    /// The address of `loc` and the agent a copy names for it: the GPU for device memory and
    /// device backing, a CPU agent for host memory ([`HsaMemory::side_of`]) and pinned
    /// backing.
    fn locate(&self, loc: MemLoc) -> Result<(u64, sys::hsa_agent_t), BackendError> {
        match loc {
            MemLoc::Device { addr } => Ok((addr, self.side_of(addr))),
            MemLoc::Backing { id, offset } => {
                let (base, _, tier) =
                    self.backings.lock().get(&id.0).copied().ok_or_else(|| {
                        BackendError::on(self.agent.id, "copy").invalid("unknown backing")
                    })?;
                let agent = match (tier, self.host_pool) {
                    (Tier::PinnedHost, Some((cpu, _))) => cpu,
                    _ => self.gpu(),
                };
                Ok((base + offset, agent))
            }
        }
    }

    /// A completion signal for a batch, armed with `n`.
    fn batch_signal(&self, n: i64) -> Result<sys::hsa_signal_t, BackendError> {
        let reused = self.idle_signals.lock().pop();
        let signal = match reused {
            Some(s) => s,
            None => self.q.create_signal(0).map_err(|st| {
                BackendError::on(self.agent.id, "copy").error(
                    BackendErrorKind::OutOfMemory,
                    format!("hsa_signal_create returned {st:#x}"),
                )
            })?,
        };
        // SAFETY: the original store on our own signal, which no copy references now.
        unsafe { (self.q.signal_store)(signal, n) };
        Ok(signal)
    }

    /// Submits one asynchronous copy decrementing `signal`.
    fn async_copy(&self, op: &CopyOp, signal: sys::hsa_signal_t) -> Result<(), BackendError> {
        let (dst, dst_agent) = self.locate(op.dst)?;
        let (src, src_agent) = self.locate(op.src)?;
        // SAFETY: the original `hsa_amd_memory_async_copy` between two ranges the memory layer
        // owns or tracks (live allocations of at least `len` bytes, kept alive until the fence
        // completes or is abandoned and quarantined); no dependencies.
        let st = unsafe {
            (self.o.async_copy)(
                dst as *mut c_void,
                dst_agent,
                src as *const c_void,
                src_agent,
                op.len as usize,
                0,
                std::ptr::null(),
                signal,
            )
        };
        if st != sys::HSA_STATUS_SUCCESS {
            return Err(BackendError::on(self.agent.id, "copy").error(
                BackendErrorKind::CopyFailed,
                format!(
                    "hsa_amd_memory_async_copy of {} bytes {src:#x} -> {dst:#x} returned {st:#x}",
                    op.len
                ),
            ));
        }
        Ok(())
    }

    fn copy(&self, dst: u64, src: u64, len: u64) -> Result<(), BackendError> {
        // SAFETY: the original `hsa_memory_copy` between two ranges the memory layer owns or
        // tracks (live allocations of at least `len` bytes).
        let st =
            unsafe { (self.q.memory_copy)(dst as *mut c_void, src as *const c_void, len as usize) };
        if st != sys::HSA_STATUS_SUCCESS {
            return Err(BackendError::on(self.agent.id, "copy").error(
                BackendErrorKind::CopyFailed,
                format!("hsa_memory_copy returned {st:#x}"),
            ));
        }
        Ok(())
    }

    fn fence(&self) -> Fence {
        Fence(self.next.fetch_add(1, Ordering::Relaxed))
    }
}

/// Staging for host digests, in slices of this many bytes (a multiple of the digest's 16-byte
/// word).
const STAGING: u64 = 4 << 20;

impl DeviceMemory for HsaMemory {
    fn agent(&self) -> AgentId {
        self.agent.id
    }

    fn tier_info(&self, tier: Tier) -> Option<TierInfo> {
        let pool = self.pool(tier)?;
        let mut size: usize = 0;
        // SAFETY: the original pool query; HSA_AMD_MEMORY_POOL_INFO_SIZE is a `size_t`.
        let st = unsafe {
            (self.o.pool_get_info)(
                pool,
                sys::HSA_AMD_MEMORY_POOL_INFO_SIZE,
                (&mut size as *mut usize).cast(),
            )
        };
        if st != sys::HSA_STATUS_SUCCESS {
            return None;
        }
        let held: u64 = self
            .backings
            .lock()
            .values()
            .filter(|(_, _, t)| *t == tier)
            .map(|(_, s, _)| *s)
            .sum();
        let available = match tier {
            // What is free on the GPU now (the application's memory, other processes' and our
            // own backing all count as used), so the memory layer's headroom is kept from
            // what the application can still allocate, not from the pool's size. Runtimes
            // without the attribute: the pool's size less our backing and the application's
            // tracked device memory.
            Tier::Device => self.memory_avail().unwrap_or_else(|| {
                let app: u64 = backend()
                    .tracker
                    .regions(self.agent.id)
                    .iter()
                    .filter(|r| r.class.contains(replay_core::MemoryClass::DEVICE_COARSE))
                    .map(|r| r.size)
                    .sum();
                (size as u64).saturating_sub(held).saturating_sub(app)
            }),
            _ => (size as u64).saturating_sub(held),
        };
        Some(TierInfo {
            available_bytes: available,
            gbps: if tier == Tier::Device { 1000.0 } else { 25.0 },
        })
    }

    fn alloc_backing(&self, tier: Tier, bytes: u64) -> Result<BackingId, BackendError> {
        let Some(pool) = self.pool(tier) else {
            return Err(BackendError::on(self.agent.id, "alloc backing").error(
                BackendErrorKind::Unsupported,
                format!("no {} tier", tier.as_str()),
            ));
        };
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: the original (unwrapped, so untracked) pool allocate with a valid out pointer.
        let st = unsafe { (self.o.pool_allocate)(pool, bytes.max(1) as usize, 0, &mut p) };
        if st != sys::HSA_STATUS_SUCCESS || p.is_null() {
            return Err(BackendError::on(self.agent.id, "alloc backing").error(
                BackendErrorKind::OutOfMemory,
                format!("hsa_amd_memory_pool_allocate returned {st:#x}"),
            ));
        }
        if tier == Tier::PinnedHost {
            if let Some(allow) = self.q.allow_access {
                let gpu = self.gpu();
                // SAFETY: the original entry on a block the original allocate just returned;
                // one agent, no flags.
                let st = unsafe { allow(1, &gpu, std::ptr::null(), p) };
                if st != sys::HSA_STATUS_SUCCESS {
                    // SAFETY: the original free of the block just allocated, used by nobody.
                    unsafe { (self.o.pool_free)(p) };
                    return Err(BackendError::on(self.agent.id, "alloc backing").error(
                        BackendErrorKind::OutOfMemory,
                        format!("hsa_amd_agents_allow_access for the GPU returned {st:#x}"),
                    ));
                }
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.backings.lock().insert(id, (p as u64, bytes, tier));
        Ok(BackingId(id))
    }

    fn free_backing(&self, id: BackingId) {
        if let Some((base, _, _)) = self.backings.lock().remove(&id.0) {
            // SAFETY: the original free of a block the original allocate returned.
            unsafe { (self.o.pool_free)(base as *mut c_void) };
        }
    }

    fn submit_copies(&self, ops: &[CopyOp]) -> Result<Fence, BackendError> {
        let fence = self.fence();
        if ops.is_empty() {
            return Ok(fence);
        }
        let n = ops.len() as i64;
        let signal = self.batch_signal(n)?;
        let mut refused = None;
        for (i, op) in ops.iter().enumerate() {
            if let Err(e) = self.async_copy(op, signal) {
                if i == 0 {
                    // Nothing in flight: the signal is ours again.
                    // SAFETY: the original store on our own signal, referenced by no copy.
                    unsafe { (self.q.signal_store)(signal, 0) };
                    self.idle_signals.lock().push(signal);
                    return Err(e);
                }
                // The signal reaches 0 once the `i` submitted copies finished.
                // SAFETY: the original subtract on our own signal.
                unsafe { (self.q.signal_subtract)(signal, n - i as i64) };
                refused = Some(format!("copy {} of {n} refused: {e}", i + 1));
                break;
            }
        }
        self.batches
            .lock()
            .insert(fence.0, Batch { signal, refused });
        Ok(fence)
    }

    /// A capture's read (SPEC §13): slice by slice through the digests' staging block, as the
    /// digests read, so the copies go between memory the runtime knows.
    fn read_to_host(&self, addr: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let mut staging = self.staging.lock();
        let base = match *staging {
            Some(id) => self.addr(MemLoc::Backing { id, offset: 0 })?,
            None => {
                let id = self.alloc_backing(Tier::PinnedHost, STAGING)?;
                *staging = Some(id);
                self.addr(MemLoc::Backing { id, offset: 0 })?
            }
        };
        let mut done = 0usize;
        while done < out.len() {
            let n = (out.len() - done).min(STAGING as usize);
            self.copy(base, addr + done as u64, n as u64)?;
            // SAFETY: `n` bytes of the pinned staging block (host memory of `STAGING` bytes),
            // just written by a synchronous copy; nobody else uses it (lock held).
            let slice = unsafe { std::slice::from_raw_parts(base as *const u8, n) };
            out[done..done + n].copy_from_slice(slice);
            done += n;
        }
        Ok(())
    }

    fn submit_digests(&self, ops: &[DigestOp], key: DigestKey) -> Result<Fence, BackendError> {
        // One staging block, reused by every batch of this agent (digests are synchronous, and
        // the memory layer runs one window per agent at a time).
        let mut staging = self.staging.lock();
        let base = match *staging {
            Some(id) => self.addr(MemLoc::Backing { id, offset: 0 })?,
            None => {
                let id = self.alloc_backing(Tier::PinnedHost, STAGING)?;
                *staging = Some(id);
                self.addr(MemLoc::Backing { id, offset: 0 })?
            }
        };
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            let src = self.addr(op.at)?;
            // Slice by slice through the staging block: host memory stays bounded by it
            // whatever the range's size.
            let mut stream = DigestStream::new(key);
            while stream.len() < op.len {
                let done = stream.len();
                let n = (op.len - done).min(STAGING);
                self.copy(base, src + done, n)?;
                // SAFETY: `n` bytes of the pinned staging block (host memory of `STAGING`
                // bytes), just written by a synchronous copy; nobody else uses it (lock held).
                let slice = unsafe { std::slice::from_raw_parts(base as *const u8, n as usize) };
                stream.update(slice);
            }
            out.push(stream.finish());
        }
        drop(staging);
        let f = self.fence();
        self.digests.lock().insert(f.0, out);
        Ok(f)
    }

    fn poll_fence(&self, fence: Fence, budget: Duration) -> Result<bool, BackendError> {
        let Some(signal) = self.batches.lock().get(&fence.0).map(|b| b.signal) else {
            // Digest fences (synchronous) and empty batches are complete when submitted.
            return Ok(true);
        };
        // Our own signal, alive until the batch is retired or abandoned (then leaked).
        if !self.q.wait_zero(signal, budget) {
            return Ok(false);
        }
        let Some(batch) = self.batches.lock().remove(&fence.0) else {
            return Ok(true);
        };
        self.idle_signals.lock().push(batch.signal);
        match batch.refused {
            None => Ok(true),
            Some(why) => {
                Err(BackendError::on(self.agent.id, "copy")
                    .error(BackendErrorKind::CopyFailed, why))
            }
        }
    }

    fn take_digests(&self, fence: Fence) -> Result<Vec<Digest128>, BackendError> {
        self.digests
            .lock()
            .remove(&fence.0)
            .ok_or_else(|| BackendError::on(self.agent.id, "take digests").invalid("unknown fence"))
    }

    fn abandon_fence(&self, fence: Fence) {
        // The copies may still decrement the batch's signal: it is leaked, never reused.
        self.batches.lock().remove(&fence.0);
        self.digests.lock().remove(&fence.0);
    }

    /// `hsa_amd_pointer_info` through the original entry, as [`crate::tracker::pointer_class`]
    /// reads it for this agent.
    fn query_pointer(&self, addr: u64) -> Result<Option<PointerInfo>, BackendError> {
        let mut info = sys::hsa_amd_pointer_info_t::default();
        // SAFETY: the original `hsa_amd_pointer_info` with a valid out-struct whose `size` is
        // set; no allocator and no accessible-agent list are asked for.
        let st = unsafe {
            (self.o.pointer_info)(
                addr as *const c_void,
                &mut info,
                None,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        if st != sys::HSA_STATUS_SUCCESS {
            return Err(BackendError::on(self.agent.id, "query pointer").error(
                BackendErrorKind::Other,
                format!("hsa_amd_pointer_info({addr:#x}) returned {st:#x}"),
            ));
        }
        let owner =
            (info.agentOwner.handle != 0).then(|| backend().agent(&self.o, info.agentOwner));
        Ok(tracker::pointer_class(&info, owner, self.agent.id))
    }
}

/// The memory engine of `agent` (created on first use over the backend's tracker, and kept in
/// the process state: the allocation wrappers release its pools, [`state::release_pools`]).
///
/// # Panics
///
/// If the queue entries are not installed (the interceptor only runs once they are).
pub fn engine(agent: &AgentInfo) -> Arc<MemoryEngine> {
    state::engine_of(agent.handle, || {
        let o = backend().originals().expect("installed");
        let q = o.queue.expect("queue entries installed");
        let mem = HsaMemory::new(*agent, o.clone(), q);
        MemoryEngine::new(
            agent.id,
            backend().tracker.clone(),
            Arc::new(mem),
            Arc::new(HsaModules::new(agent.handle, o.loader)),
        )
    })
}
