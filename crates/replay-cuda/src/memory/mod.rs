//! Device memory as the memory layer drives it (SPEC §7.3, §7.4): backing allocations per tier,
//! batched asynchronous copies with events as fences, and chunk digests on the device.
//!
//! - **Tiers.** Device backing comes from `cuMemAlloc`, pinned host backing from
//!   `cuMemHostAlloc` (portable, mapped) or, for blocks of 256 MiB and more, from the host
//!   allocator first touched on several threads and registered (`tier`'s docs: the first
//!   dispatch's warm-up), pageable backing from the Rust allocator
//!   (`alloc_zeroed`: lazily zeroed pages, and an error rather than an abort when the host is
//!   out of memory). The capacities reported to the memory layer ([`report_tiers`]) are the
//!   device's free memory and fractions of the host's `MemAvailable`
//!   ([`TierConfig::pinned_fraction`], [`TierConfig::pageable_fraction`]); the memory layer
//!   then applies its own headroom and halving, so the two host tiers together never plan for
//!   more than [`TierConfig::pinned_fraction`]/2 + [`TierConfig::pageable_fraction`] of it.
//! - **Copies** run on streams of their own, created non-blocking: device-to-device on one
//!   stream, host copies on two more, in chunks of [`TierConfig::host_chunk_bytes`] that
//!   alternate between them (so both directions' copy engines and both of a split snapshot's
//!   tiers overlap). Operations are never merged: each `cuMemcpyAsync` stays inside the ops as
//!   given, because two application allocations (or two module variables) that happen to be
//!   adjacent in the address space cannot be copied by one call (the driver answers
//!   `CUDA_ERROR_INVALID_VALUE`). Small device-to-device copies (at most
//!   [`kernels::KERNEL_COPY_MAX`] bytes) of a batch of several are instead one launch of the
//!   gather kernel `kr_copy` on the device lane, over a table in mapped pinned memory (pooled
//!   like the digests' scratch; pieces never cross an op either). A batch's fence is one event per stream it used. A pageable device-to-host copy returns only when it is done (the driver stages it);
//!   that is the last-resort tier's cost.
//! - **Digests** run on a fourth stream: the host splits the batch into segments
//!   ([`kernels::plan`]) in mapped pinned memory, `kr_digest_seg` (and `kr_digest_fin` when an
//!   op has several segments) read that table and write the digests straight into mapped
//!   pinned memory: one or two launches and one event per batch, however many digests. Digests
//!   of pageable backing are computed on the host when submitted (their bytes are final then:
//!   pageable copies complete before their submission returns). Without NVRTC the backend
//!   falls back to host digests over bytes staged through pinned memory (and stops claiming
//!   `DEVICE_DIGESTS`).
//! - **Release.** Driver backing (device and pinned) given back is released later, outside the
//!   window ([`CudaMemory::release_deferred`]): `cuMemFree` / `cuMemFreeHost` wait for the whole
//!   device. While a stream capture the backend can see is live, device and pinned backing is
//!   not allocated either. Pageable backing is released at once.
//! - **Pointer queries.** [`DeviceMemory::query_pointer`] asks `cuPointerGetAttributes` about an
//!   address the tracker never saw and gives its SPEC §7.1 class ([`PointerAttributes`]).
//! - **Ordering** (SPEC §6 step 8). The window has waited for the pass (or drained the device)
//!   before it asks for a copy or a digest. A restore is ordered on the device ahead of the next
//!   pass instead of waited for on the host ([`DeviceMemory::order_after`], while
//!   [`CudaMemory::ordered_restores`] is on, the default): its fence's events are kept until
//!   `poll_fence` sees them complete, and every stream that later work of the agent runs on
//!   waits for them first (`cuStreamWaitEvent`, `CudaMemory::order_stream`): the pass's and
//!   the ordinary run's stream and the cache flush's (the agent), and this memory's own digest
//!   stream before digests, [`CudaMemory::read_device`] and [`CudaMemory::write_device`] (so
//!   the `verify` tool's [`CudaMemory::digest_blocking`] in PASS ENTER sees restored memory).
//!   Memory read by other means (a tool's own stream, a host mapping) must first wait on the
//!   host: [`DeviceMemory::wait_ordered`], which `ReplayPayload::sync_memory` and
//!   `kreplay_pass_sync` call.
//!
//! ## Files
//!
//! | file | part |
//! |---|---|
//! | `tier.rs` | tier sizing and capacity reports, backing blocks: allocation and release |
//! | `copy.rs` | resolved copies, lanes and streams, the chunked schedule, blocking reads and writes |
//! | `digest.rs` | digest batches: segment planning, scratch and staging buffers, the kernels' launch, results |
//! | [`kernels`] | the digest kernels' CUDA C and their host-side plan |
//! | `pointer.rs` | pointer attributes and their SPEC §7.1 class |
//! | `fence.rs` | [`CudaMemory`]'s fences: their events, restores ordered on the device, poll, take and abandon |
//! | `pending.rs` | what a submitted batch leaves until its fence is taken (events, digests, the gather table) |
//! | `submit.rs` | [`CudaMemory`]'s copy and digest submission, its table and scratch pools, blocking reads, writes and digests |
//!
//! This file ties them into [`CudaMemory`] (its state, settings and deferred release) and
//! implements [`DeviceMemory`] over `fence` and `submit`, which hold methods of
//! [`CudaMemory`] itself. The other parts never import this file; `copy` and `digest` use
//! `tier`'s backing blocks, `digest` the `kernels`.

mod copy;
mod digest;
mod fence;
pub mod kernels;
mod pending;
mod pointer;
mod submit;
mod tier;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::{
    AgentId, BackendError, BackendErrorKind, BackingId, CopyOp, DeviceMemory, Digest128, DigestKey,
    DigestOp, Fence, MemLoc, PointerInfo, Tier, TierInfo,
};
use smallvec::SmallVec;

use crate::device::Device;
use crate::error::CudaResult;
use crate::module::ModuleRegistry;
use crate::queue::{QueueRegistry, RelaxedCapture, Stream};
use crate::sys;

use copy::{CopyStreams, CopyTable};
use digest::{DigestKernels, Scratch, Staging};
use pending::Pending;
use tier::{tier_index, Backing};

pub use crate::queue::{Direction, ResolvedCopy};
pub use copy::{schedule, Lane};
pub use pointer::PointerAttributes;
pub use tier::{host_mem_available, report_tiers, CapacityReport, TierConfig, CAPACITY_TTL};

/// `KREPLAY_CUDA_GATHER_COPIES=0` sends every copy through its own `cuMemcpyAsync` (default
/// `1`: small device-to-device copies of a batch are one gather launch).
pub const GATHER_ENV: &str = "KREPLAY_CUDA_GATHER_COPIES";

/// [`GATHER_ENV`] as set: a value other than `0` or `1` is reported and keeps the default.
fn gather_from_env() -> bool {
    match std::env::var(GATHER_ENV).as_deref().map(str::trim) {
        Err(_) | Ok("1") | Ok("") => true,
        Ok("0") => false,
        Ok(v) => {
            log::warn!(
                "[kernel-replay] {GATHER_ENV}={v:?}: expected 0 or 1; gather copies stay on"
            );
            true
        }
    }
}

#[derive(Debug, Default)]
struct State {
    backing: HashMap<u64, Backing>,
    /// Copy fences ordered on the device ([`DeviceMemory::order_after`]) and not yet seen
    /// complete, with their events' handles: later work of the agent waits for them. An entry
    /// leaves before its events are recycled (`poll_fence`) or dropped (`abandon_fence`).
    ordered: Vec<(u64, SmallVec<[sys::CUevent; 4]>)>,
    /// Backing given back but not yet released: `cuMemFree` and `cuMemFreeHost` wait for the
    /// whole device, so they never run inside a window ([`CudaMemory::release_deferred`]).
    deferred: Vec<Backing>,
    /// Digest buffers dropped from the pool (or of a finished host-fallback batch), released
    /// with the deferred backing for the same reason.
    deferred_scratch: Vec<Scratch>,
    deferred_staging: Vec<Staging>,
    deferred_tables: Vec<CopyTable>,
    next_backing: u64,
    fences: HashMap<u64, Pending>,
    next_fence: u64,
    scratch: Vec<Scratch>,
    /// Free gather-copy tables.
    tables: Vec<CopyTable>,
}

/// Device memory of one agent (see the module docs).
#[derive(Debug)]
pub struct CudaMemory {
    device: Arc<Device>,
    agent: AgentId,
    copies: CopyStreams,
    digest_stream: Stream,
    /// The digest and gather-copy kernels: compiled at creation, or loaded later from an
    /// image ([`CudaMemory::load_device_code`]); unset, digests run on the host.
    kernels: std::sync::OnceLock<DigestKernels>,
    config: TierConfig,
    state: Mutex<State>,
    /// Bit i set: tier `Tier::ALL[i]` disabled.
    disabled: AtomicU8,
    fail_alloc: Mutex<Vec<Tier>>,
    /// Forced digest segment size in bytes (0: [`kernels::segment_bytes`]).
    segment: AtomicU64,
    /// The last capacity report and when it was taken: the memory layer asks for each tier
    /// several times per window, and a report costs a driver call and a read of
    /// `/proc/meminfo`.
    capacity: Mutex<Option<(std::time::Instant, CapacityReport)>>,
    /// The backend's queues: live stream captures and idle checks.
    queues: std::sync::OnceLock<Arc<QueueRegistry>>,
    /// [`TierConfig::pin_threads`], changeable (a benchmark comparing both ways of pinning).
    pin_threads: std::sync::atomic::AtomicUsize,
    /// Restores are ordered on the device ([`CudaMemory::set_ordered_restores`]).
    ordered_restores: std::sync::atomic::AtomicBool,
    /// Small device-to-device copies go through the gather kernel ([`GATHER_ENV`]).
    gather: std::sync::atomic::AtomicBool,
    /// `State::ordered` is not empty (set and cleared under the state lock): every launch of
    /// the agent asks, so the common answer costs one load.
    any_ordered: std::sync::atomic::AtomicBool,
}

// SAFETY: the raw event handles in `State::ordered` are driver handles, used only in driver
// calls under the state lock; the rest of the state is `Send`/`Sync` on its own.
unsafe impl Send for State {}

impl CudaMemory {
    /// Creates the streams and compiles the digest kernels for `device`. Without NVRTC the
    /// memory still works, with host digests (logged once).
    pub fn new(
        device: &Arc<Device>,
        agent: AgentId,
        modules: &ModuleRegistry,
        config: TierConfig,
    ) -> CudaResult<Self> {
        let kernels = std::sync::OnceLock::new();
        if let Some(k) = DigestKernels::compile(device, modules)? {
            let _ = kernels.set(k);
        }
        let pin_threads = config.pin_threads;
        Ok(Self {
            copies: CopyStreams::new(device)?,
            digest_stream: Stream::non_blocking(device)?,
            device: Arc::clone(device),
            agent,
            kernels,
            config,
            state: Mutex::new(State::default()),
            disabled: AtomicU8::new(0),
            fail_alloc: Mutex::new(Vec::new()),
            segment: AtomicU64::new(0),
            capacity: Mutex::new(None),
            queues: std::sync::OnceLock::new(),
            pin_threads: std::sync::atomic::AtomicUsize::new(pin_threads),
            ordered_restores: std::sync::atomic::AtomicBool::new(true),
            gather: std::sync::atomic::AtomicBool::new(gather_from_env()),
            any_ordered: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether restores are ordered on the device ahead of the next pass (the default) or
    /// waited for on the host; the agent claims `ORDERED_RESTORE` while it is on.
    pub fn ordered_restores(&self) -> bool {
        self.ordered_restores.load(Ordering::Relaxed)
    }

    /// Orders restores on the device, or makes them wait on the host (a benchmark comparing
    /// both, a tool that reads device memory by its own means and does not call the sync).
    /// Takes effect at the next window.
    pub fn set_ordered_restores(&self, on: bool) {
        self.ordered_restores.store(on, Ordering::Relaxed);
    }

    /// Sets how large pinned blocks are pinned (see [`TierConfig::pin_threads`]; 0: one
    /// `cuMemHostAlloc`).
    pub fn set_pin_threads(&self, threads: usize) {
        self.pin_threads.store(threads, Ordering::Relaxed);
    }

    /// Sends small device-to-device copies through the gather kernel (the default) or each
    /// through its own `cuMemcpyAsync` (a benchmark comparing both).
    pub fn set_gather_copies(&self, on: bool) {
        self.gather.store(on, Ordering::Relaxed);
    }

    /// Whether digests run on the device.
    pub fn device_digests(&self) -> bool {
        self.kernels.get().is_some()
    }

    /// Loads the digest and gather-copy kernels from `image` (a cubin of
    /// [`kernels::DIGEST_SOURCE`] built for this device) where NVRTC was not there to compile
    /// them: `Ok(false)` when kernels are already loaded. Takes effect at the next batch; the
    /// capabilities the agent claimed at creation stay as they were.
    pub fn load_device_code(&self, modules: &ModuleRegistry, image: &[u8]) -> CudaResult<bool> {
        if self.kernels.get().is_some() {
            return Ok(false);
        }
        let k = DigestKernels::load(modules, image)?;
        Ok(self.kernels.set(k).is_ok())
    }

    /// Gives the memory the backend's queues (stream captures and idle checks see them).
    pub(crate) fn set_queues(&self, queues: Arc<QueueRegistry>) {
        let _ = self.queues.set(queues);
    }

    /// A stream capture the backend can see, described (see [`QueueRegistry::live_capture`]).
    fn live_capture(&self) -> Option<String> {
        let q = self.queues.get()?;
        match q.live_capture() {
            Ok(c) => c,
            Err(e) => Some(format!("the capture state is unknown: {e}")),
        }
    }

    /// Bytes of backing memory given back and not yet released.
    pub fn deferred_bytes(&self) -> u64 {
        self.state.lock().deferred.iter().map(Backing::bytes).sum()
    }

    /// Releases the backing memory given back since the last call, when that cannot wait for
    /// other work: with `force`, always (the application needs the memory now, or the backend
    /// goes away); otherwise only when every stream the backend knows is idle and no stream
    /// capture is live, since `cuMemFree` / `cuMemFreeHost` wait for the whole device (1.5 s
    /// behind a kernel spinning on another stream, measured on an H200; forever beside a
    /// persistent kernel). The backend calls it after each launch, outside the window, with no
    /// lock held. Returns the bytes still deferred.
    pub fn release_deferred(&self, force: bool) -> u64 {
        {
            let st = self.state.lock();
            if st.deferred.is_empty()
                && st.deferred_scratch.is_empty()
                && st.deferred_staging.is_empty()
                && st.deferred_tables.is_empty()
            {
                return 0;
            }
        }
        let _relaxed = RelaxedCapture::enter();
        if !force && !self.device_idle() {
            return self.deferred_bytes();
        }
        let (blocks, scratch, staging, tables) = {
            let mut st = self.state.lock();
            (
                std::mem::take(&mut st.deferred),
                std::mem::take(&mut st.deferred_scratch),
                std::mem::take(&mut st.deferred_staging),
                std::mem::take(&mut st.deferred_tables),
            )
        };
        self.invalidate_capacity();
        for b in blocks {
            b.release(&self.device);
        }
        if self.device.bind().is_ok() {
            drop(scratch);
            drop(staging);
            drop(tables);
        } else {
            scratch.into_iter().for_each(std::mem::forget);
            staging.into_iter().for_each(std::mem::forget);
            tables.into_iter().for_each(std::mem::forget);
        }
        self.deferred_bytes()
    }

    /// Whether every stream the backend knows (and its own) has no pending work, and no
    /// stream capture is live: a free then waits for nothing the backend can see.
    fn device_idle(&self) -> bool {
        if self.device.bind().is_err() {
            return false;
        }
        let Some(q) = self.queues.get() else {
            return false;
        };
        if self.live_capture().is_some() {
            return false;
        }
        let mut streams = q.known_streams();
        streams.extend(self.internal_streams());
        streams.iter().all(|&s| {
            // SAFETY: a live stream of the current context (known, owned, or the legacy one),
            // none of them capturing (checked above).
            let r = unsafe { sys::cuStreamQuery(s) };
            r == sys::CUresult::CUDA_SUCCESS
        })
    }

    /// The streams this memory copies and digests on (the copy fence waits for them).
    pub fn internal_streams(&self) -> [sys::CUstream; 4] {
        let [d2d, host0, host1] = self.copies.raw();
        [d2d, host0, host1, self.digest_stream.raw()]
    }

    /// Turns a tier off or on (a benchmark forcing a tier, a tool that forbids pinning).
    pub fn set_tier_enabled(&self, tier: Tier, enabled: bool) {
        let bit = 1u8 << tier_index(tier);
        if enabled {
            self.disabled.fetch_and(!bit, Ordering::Relaxed);
        } else {
            self.disabled.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// Makes every `alloc_backing` of the `tiers` fail (fault injection on real hardware: one
    /// tier moves the snapshot to the next, all of them provoke `snapshot_failed`); an empty
    /// slice clears it.
    pub fn inject_alloc_failure(&self, tiers: &[Tier]) {
        *self.fail_alloc.lock() = tiers.to_vec();
    }

    /// Forces the digest segment size (`None`: about [`kernels::TARGET_BLOCKS`] segments per
    /// batch): a benchmark or check exercising ops split over several blocks.
    pub fn force_digest_segment(&self, bytes: Option<u64>) {
        self.segment.store(bytes.unwrap_or(0), Ordering::Relaxed);
    }

    /// What the machine reports now (a report younger than [`CAPACITY_TTL`] is reused; backing
    /// allocated or freed here invalidates it).
    pub fn capacity_report(&self) -> CudaResult<CapacityReport> {
        if let Some((at, r)) = *self.capacity.lock() {
            if at.elapsed() < CAPACITY_TTL {
                return Ok(r);
            }
        }
        let (free, _) = self.device.mem_info()?;
        let r = CapacityReport {
            device_free: free,
            host_available: host_mem_available().unwrap_or(0),
        };
        *self.capacity.lock() = Some((std::time::Instant::now(), r));
        Ok(r)
    }

    fn invalidate_capacity(&self) {
        *self.capacity.lock() = None;
    }
}

impl DeviceMemory for CudaMemory {
    fn agent(&self) -> AgentId {
        self.agent
    }

    /// A capture's read (SPEC §13): ordered after every restore, like the digests.
    fn read_to_host(&self, addr: u64, out: &mut [u8]) -> Result<(), BackendError> {
        const OP: &str = "read to host";
        const BOUND: Duration = Duration::from_secs(60);
        let len = out.len() as u64;
        let first = match self.read_device(addr, len, BOUND) {
            Ok(bytes) => {
                out.copy_from_slice(&bytes);
                return Ok(());
            }
            Err(e) => e,
        };
        // Memory a kernel reads but the copy engine refuses (module variables of a lazily
        // loaded library), or a region crossing from one allocation into the next: the gather
        // kernel reads it as the application's kernels do.
        let by_kernel = match self.read_by_kernel(addr, len, BOUND) {
            Ok(bytes) => {
                out.copy_from_slice(&bytes);
                return Ok(());
            }
            Err(e) => e,
        };
        log::debug!(
            "[kernel-replay] agent {}: {OP} {len} bytes at {addr:#x}: copy failed ({first}), kernel read failed ({by_kernel}); reading per allocation",
            self.agent
        );
        // A copy may not cross from one allocation or mapping into the next (a scope region
        // can: neighbouring module-variable sections, a reservation mapped in pieces), while
        // a kernel's read can: read it piece by piece, each inside one.
        let mut at = addr;
        while at < addr + len {
            let a = PointerAttributes::query(at).map_err(|e| e.to_backend(self.agent, OP))?;
            let (base, size) = if a.mapped { a.mapping } else { a.range };
            if a.memory_type == 0 || size == 0 || at < base || at >= base + size {
                return Err(BackendError::on(self.agent, OP).invalid(format!(
                    "{len} bytes at {addr:#x}: no allocation holds {at:#x} (the whole read failed: {first})"
                )));
            }
            let end = (base + size).min(addr + len);
            let bytes = self
                .read_device(at, end - at, BOUND)
                .map_err(|e| e.to_backend(self.agent, OP))?;
            let o = (at - addr) as usize;
            out[o..o + bytes.len()].copy_from_slice(&bytes);
            at = end;
        }
        Ok(())
    }

    fn query_pointer(&self, addr: u64) -> Result<Option<PointerInfo>, BackendError> {
        const OP: &str = "query pointer";
        self.device
            .bind()
            .map_err(|e| e.to_backend(self.agent, OP))?;
        let a = PointerAttributes::query(addr).map_err(|e| e.to_backend(self.agent, OP))?;
        Ok(a.classify(addr, self.agent, self.device.info().ordinal))
    }

    fn tier_info(&self, tier: Tier) -> Option<TierInfo> {
        let disabled = self.disabled.load(Ordering::Relaxed);
        let enabled: [bool; 3] = std::array::from_fn(|i| disabled & (1 << i) == 0);
        if !enabled[tier_index(tier)] {
            return None;
        }
        let report = match self.capacity_report() {
            Ok(r) => r,
            Err(e) => {
                log::warn!(
                    "[kernel-replay] agent {}: capacity query failed: {e}",
                    self.agent
                );
                return Some(TierInfo {
                    available_bytes: 0,
                    gbps: self.config.gbps[tier_index(tier)],
                });
            }
        };
        report_tiers(report, &self.config, enabled)[tier_index(tier)]
    }

    fn alloc_backing(&self, tier: Tier, bytes: u64) -> Result<BackingId, BackendError> {
        const OP: &str = "allocate backing memory";
        if self.fail_alloc.lock().contains(&tier) {
            return Err(BackendError::on(self.agent, OP).error(
                BackendErrorKind::OutOfMemory,
                format!("{} allocation failure injected", tier.as_str()),
            ));
        }
        if tier != Tier::PageableHost {
            // A driver allocation while another thread captures could join or invalidate that
            // capture; pageable backing needs no driver call.
            if let Some(why) = self.live_capture() {
                return Err(BackendError::on(self.agent, OP).error(
                    BackendErrorKind::OutOfMemory,
                    format!(
                        "no {} backing allocated while a capture is live: {why}",
                        tier.as_str()
                    ),
                ));
            }
        }
        self.invalidate_capacity();
        let b = Backing::alloc(
            &self.device,
            tier,
            bytes,
            self.pin_threads.load(Ordering::Relaxed),
        )
        .map_err(|e| e.to_backend(self.agent, OP))?;
        let mut st = self.state.lock();
        st.next_backing += 1;
        let id = st.next_backing;
        st.backing.insert(id, b);
        Ok(BackingId(id))
    }

    fn free_backing(&self, id: BackingId) {
        let mut st = self.state.lock();
        let b = st.backing.remove(&id.0);
        match b {
            // Pageable backing is the process's own memory: released at once. Driver memory
            // waits for `release_deferred`, outside the window.
            Some(b @ Backing::Pageable { .. }) => {
                drop(st);
                b.release(&self.device);
            }
            Some(b) => st.deferred.push(b),
            None => log::warn!(
                "[kernel-replay] agent {}: free of unknown backing block {}",
                self.agent,
                id.0
            ),
        }
    }

    fn submit_copies(&self, ops: &[CopyOp]) -> Result<Fence, BackendError> {
        if ops.is_empty() {
            return Ok(self.new_fence(Pending {
                events: SmallVec::new(),
                digests: None,
                table: None,
                timing: None,
                done: true,
            }));
        }
        self.submit_copies_inner(ops)
    }

    fn submit_digests(&self, ops: &[DigestOp], key: DigestKey) -> Result<Fence, BackendError> {
        self.submit_digests_inner(ops, key).map_err(|e| {
            if e.kind() == BackendErrorKind::DeviceLost {
                // What the batch read, so a fault of its own (or the launch that reported
                // another's) can be told apart by address in the log.
                let app: Vec<String> = ops
                    .iter()
                    .filter_map(|o| match o.at {
                        MemLoc::Device { addr } => Some(format!("{addr:#x}+{}", o.len)),
                        _ => None,
                    })
                    .take(64)
                    .collect();
                log::warn!(
                    "[kernel-replay] agent {}: digest batch of {} ops failed ({e}); application ranges (first 64): {}",
                    self.agent,
                    ops.len(),
                    app.join(" ")
                );
            }
            e.to_backend(self.agent, "submit digests")
        })
    }

    fn order_after(&self, fence: Fence) -> Result<(), BackendError> {
        self.order_after_fence(fence)
    }

    fn wait_ordered(&self, budget: Duration) -> Result<bool, BackendError> {
        self.wait_for_ordered(budget)
    }

    fn poll_fence(&self, fence: Fence, budget: Duration) -> Result<bool, BackendError> {
        self.poll(fence, budget)
    }

    fn take_digests(&self, fence: Fence) -> Result<Vec<Digest128>, BackendError> {
        self.take_fence_digests(fence)
    }

    fn abandon_fence(&self, fence: Fence) {
        self.abandon(fence)
    }
}

impl Drop for CudaMemory {
    fn drop(&mut self) {
        let st = std::mem::take(&mut *self.state.lock());
        for b in st.backing.into_values().chain(st.deferred) {
            b.release(&self.device);
        }
        if self.device.bind().is_ok() {
            drop(st.scratch);
            drop(st.deferred_scratch);
            drop(st.deferred_staging);
            drop(st.tables);
            drop(st.deferred_tables);
        } else {
            st.scratch.into_iter().for_each(std::mem::forget);
            st.deferred_scratch.into_iter().for_each(std::mem::forget);
            st.deferred_staging.into_iter().for_each(std::mem::forget);
            st.tables.into_iter().for_each(std::mem::forget);
            st.deferred_tables.into_iter().for_each(std::mem::forget);
        }
    }
}
