//! Device memory as the memory layer drives it (SPEC §7.3, §7.4): backing allocations per tier,
//! batched asynchronous copies with events as fences, and chunk digests on the device.
//!
//! - **Tiers.** Device backing comes from `cuMemAlloc`, pinned host backing from
//!   `cuMemHostAlloc` (portable, mapped), pageable backing from the Rust allocator
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
//!   `CUDA_ERROR_INVALID_VALUE`). A batch's fence is one event per stream it used. A pageable device-to-host copy returns only when it is done (the driver stages it);
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
//! - **Ordering.** Nothing here orders against application streams: the window has waited for
//!   the pass (or drained the device) before it asks for a copy or a digest, and waits for each
//!   fence before it submits the next pass.

use std::alloc::Layout;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use replay_core::{
    AgentId, BackendError, BackendErrorKind, BackingId, CopyOp, DeviceMemory, Digest128, DigestKey,
    DigestOp, Fence, MemLoc, MemoryClass, PointerInfo, Tier, TierInfo,
};
use smallvec::SmallVec;

use crate::device::{wait_events, Device, Event, SendPtr};
use crate::error::{CudaError, CudaResult};
use crate::kernels;
use crate::launch::{launch_raw, ArgBlock, DevicePtr, LaunchConfig};
use crate::module::{compile_cubin, CudaFunction, CudaModule, ModuleRegistry};
use crate::queue::{QueueRegistry, RelaxedCapture, Stream};
use crate::result::{self, mapped_pointer, DriverCall};
use crate::sys;

pub use crate::queue::{Direction, ResolvedCopy};

/// How the backend sizes and drives its tiers.
#[derive(Debug, Clone, PartialEq)]
pub struct TierConfig {
    /// Fraction of `MemAvailable` reported as the pinned tier's capacity (the memory layer
    /// plans for half of what is reported).
    pub pinned_fraction: f64,
    /// Fraction of `MemAvailable` reported as the pageable tier's capacity (the memory layer
    /// plans for at most half of `MemAvailable`, and no more than reported).
    pub pageable_fraction: f64,
    /// Host copies are split into chunks of this size, alternating between two streams.
    pub host_chunk_bytes: u64,
    /// Bandwidths reported to the memory layer, GB/s (device, pinned, pageable).
    pub gbps: [f64; 3],
}

impl Default for TierConfig {
    fn default() -> Self {
        Self {
            pinned_fraction: 0.8,
            pageable_fraction: 0.4,
            host_chunk_bytes: 64 << 20,
            gbps: [2000.0, 50.0, 10.0],
        }
    }
}

/// What the machine reports now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityReport {
    /// Free device memory (`cuMemGetInfo`).
    pub device_free: u64,
    /// The host's `MemAvailable`.
    pub host_available: u64,
}

/// The tier capacities the backend reports to the memory layer (index: [`Tier::ALL`]);
/// `enabled` masks tiers off (`None`).
pub fn report_tiers(
    report: CapacityReport,
    config: &TierConfig,
    enabled: [bool; 3],
) -> [Option<TierInfo>; 3] {
    let frac = |f: f64| (report.host_available as f64 * f.clamp(0.0, 1.0)) as u64;
    let caps = [
        report.device_free,
        frac(config.pinned_fraction),
        frac(config.pageable_fraction),
    ];
    std::array::from_fn(|i| {
        enabled[i].then_some(TierInfo {
            available_bytes: caps[i],
            gbps: config.gbps[i],
        })
    })
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
pub fn host_mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A backing allocation.
#[derive(Debug)]
enum Backing {
    Device {
        ptr: u64,
        bytes: u64,
    },
    Pinned {
        host: SendPtr,
        dptr: u64,
        bytes: u64,
    },
    Pageable {
        ptr: SendPtr,
        bytes: u64,
    },
}

impl Backing {
    fn bytes(&self) -> u64 {
        match self {
            Self::Device { bytes, .. }
            | Self::Pinned { bytes, .. }
            | Self::Pageable { bytes, .. } => *bytes,
        }
    }
}

/// Alignment of pageable backing blocks. Kept at the allocator's natural alignment so that
/// `alloc_zeroed` is `calloc`, whose large blocks are fresh zero pages committed only when a
/// copy first touches them (a larger alignment makes the standard library zero every byte).
const PAGEABLE_ALIGN: usize = 16;

/// Which stream lane a copy runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Device to device.
    Device,
    /// To or from host memory.
    Host,
}

impl ResolvedCopy {
    /// Which lane runs it.
    pub fn lane(&self) -> Lane {
        match self.dir {
            Direction::DeviceToDevice => Lane::Device,
            _ => Lane::Host,
        }
    }
}

/// Splits host copies into chunks of at most `chunk` bytes and assigns each piece a stream:
/// device copies to stream 0 of the device lane, host chunks alternately to host streams 0
/// and 1. Returns `(lane, stream index, copy)` in submission order.
pub fn schedule(ops: &[ResolvedCopy], chunk: u64) -> Vec<(Lane, usize, ResolvedCopy)> {
    let chunk = chunk.max(1);
    let mut out = Vec::with_capacity(ops.len());
    let mut next_host = 0usize;
    for op in ops.iter().filter(|o| o.len > 0) {
        match op.lane() {
            Lane::Device => out.push((Lane::Device, 0, *op)),
            Lane::Host => {
                let mut off = 0;
                while off < op.len {
                    let len = chunk.min(op.len - off);
                    out.push((
                        Lane::Host,
                        next_host % 2,
                        ResolvedCopy {
                            dir: op.dir,
                            src: op.src + off,
                            dst: op.dst + off,
                            len,
                        },
                    ));
                    next_host += 1;
                    off += len;
                }
            }
        }
    }
    out
}

/// A block of mapped pinned host memory: its host address and the address kernels use.
#[derive(Debug)]
struct Mapped {
    host: SendPtr,
    dptr: u64,
}

/// Reusable buffers of one digest batch: the segment table and the results in mapped pinned
/// host memory (kernels read and write them there), partial sums on the device.
#[derive(Debug)]
struct Scratch {
    /// Capacities in bytes: table, results, partial sums.
    caps: [usize; 3],
    table: Mapped,
    out: Mapped,
    partials: u64,
}

impl Scratch {
    fn alloc(device: &Device, caps: [usize; 3]) -> CudaResult<Self> {
        device.bind()?;
        let caps = caps.map(|c| c.max(4096));
        let null = || Mapped {
            host: SendPtr(std::ptr::null_mut()),
            dptr: 0,
        };
        let mut s = Self {
            caps,
            table: null(),
            out: null(),
            partials: 0,
        };
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // On any failure `s` is dropped, which frees what was allocated so far.
        // SAFETY: plain allocations; the pointers are owned by `s` and freed in its Drop.
        unsafe {
            let h = result::malloc_host(caps[0], flags).call("cuMemHostAlloc")?;
            s.table = Mapped {
                host: SendPtr(h),
                dptr: mapped_pointer(h),
            };
            let h = result::malloc_host(caps[1], flags).call("cuMemHostAlloc")?;
            s.out = Mapped {
                host: SendPtr(h),
                dptr: mapped_pointer(h),
            };
            s.partials = result::malloc_sync(caps[2]).call("cuMemAlloc")?;
        }
        Ok(s)
    }

    fn fits(&self, need: [usize; 3]) -> bool {
        self.caps.iter().zip(need).all(|(&c, n)| c >= n)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: each pointer was allocated by the matching call in `alloc` (or is null/0 and
        // skipped); no kernel uses them any more (abandoned scratch is leaked with
        // `mem::forget` instead of dropped).
        unsafe {
            for p in [self.table.host.0, self.out.host.0] {
                if !p.is_null() {
                    let _ = result::free_host(p);
                }
            }
            if self.partials != 0 {
                let _ = result::free_sync(self.partials);
            }
        }
    }
}

/// Host-fallback staging: bytes of a batch copied into pinned memory, digested on take.
#[derive(Debug)]
struct Staging {
    host: SendPtr,
    bytes: usize,
    /// (op index, offset in staging, length)
    spans: Vec<(usize, usize, usize)>,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.host.0.is_null() {
            // SAFETY: allocated by cuMemHostAlloc in `submit_digests`; its copies completed
            // (abandoned staging is leaked instead).
            let _ = unsafe { result::free_host(self.host.0) };
        }
    }
}

/// The digest part of a pending fence.
#[derive(Debug)]
struct DigestJob {
    n: usize,
    /// (op index, digest) computed on the host at submission.
    host: Vec<(usize, Digest128)>,
    /// Op indices computed on the device, in table order.
    device_ops: Vec<usize>,
    scratch: Option<Scratch>,
    staging: Option<Staging>,
    key: DigestKey,
}

#[derive(Debug)]
struct Pending {
    events: SmallVec<[Event; 4]>,
    digests: Option<DigestJob>,
    done: bool,
}

#[derive(Debug, Default)]
struct State {
    backing: HashMap<u64, Backing>,
    /// Backing given back but not yet released: `cuMemFree` and `cuMemFreeHost` wait for the
    /// whole device, so they never run inside a window ([`CudaMemory::release_deferred`]).
    deferred: Vec<Backing>,
    /// Digest buffers dropped from the pool (or of a finished host-fallback batch), released
    /// with the deferred backing for the same reason.
    deferred_scratch: Vec<Scratch>,
    deferred_staging: Vec<Staging>,
    next_backing: u64,
    fences: HashMap<u64, Pending>,
    next_fence: u64,
    scratch: Vec<Scratch>,
}

/// The compiled digest kernels.
#[derive(Debug)]
struct DigestKernels {
    _module: Arc<CudaModule>,
    seg: CudaFunction,
    fin: CudaFunction,
}

/// How long a capacity report is reused.
pub const CAPACITY_TTL: Duration = Duration::from_millis(20);

/// Device memory of one agent (see the module docs).
#[derive(Debug)]
pub struct CudaMemory {
    device: Arc<Device>,
    agent: AgentId,
    d2d: Stream,
    host: [Stream; 2],
    digest_stream: Stream,
    kernels: Option<DigestKernels>,
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
}

impl CudaMemory {
    /// Creates the streams and compiles the digest kernels for `device`. Without NVRTC the
    /// memory still works, with host digests (logged once).
    pub fn new(
        device: &Arc<Device>,
        agent: AgentId,
        modules: &ModuleRegistry,
        config: TierConfig,
    ) -> CudaResult<Self> {
        let kernels = match compile_cubin(
            kernels::DIGEST_SOURCE,
            "kr_digest.cu",
            device.info().compute_capability,
            &[],
        ) {
            Ok(cubin) => {
                let m = modules.load_private(&cubin, "kr_digest")?;
                Some(DigestKernels {
                    seg: m.function(kernels::DIGEST_SEG)?,
                    fin: m.function(kernels::DIGEST_FIN)?,
                    _module: m,
                })
            }
            Err(e @ CudaError::NvrtcUnavailable(_)) => {
                log::warn!("[kernel-replay] {e}; digests run on the host (slow)");
                None
            }
            Err(e) => return Err(e),
        };
        Ok(Self {
            d2d: Stream::non_blocking(device)?,
            host: [Stream::non_blocking(device)?, Stream::non_blocking(device)?],
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
        })
    }

    /// Whether digests run on the device.
    pub fn device_digests(&self) -> bool {
        self.kernels.is_some()
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
            {
                return 0;
            }
        }
        let _relaxed = RelaxedCapture::enter();
        if !force && !self.device_idle() {
            return self.deferred_bytes();
        }
        let (blocks, scratch, staging) = {
            let mut st = self.state.lock();
            (
                std::mem::take(&mut st.deferred),
                std::mem::take(&mut st.deferred_scratch),
                std::mem::take(&mut st.deferred_staging),
            )
        };
        self.invalidate_capacity();
        for b in blocks {
            self.release_backing(b);
        }
        if self.device.bind().is_ok() {
            drop(scratch);
            drop(staging);
        } else {
            scratch.into_iter().for_each(std::mem::forget);
            staging.into_iter().for_each(std::mem::forget);
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
        [
            self.d2d.raw(),
            self.host[0].raw(),
            self.host[1].raw(),
            self.digest_stream.raw(),
        ]
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

    fn err(&self, e: CudaError, op: &'static str) -> BackendError {
        e.to_backend(self.agent, op)
    }

    fn invalid(&self, op: &'static str, msg: String) -> BackendError {
        BackendError::new(BackendErrorKind::InvalidArgument, self.agent, op, msg)
    }

    fn new_backing(&self, tier: Tier, bytes: u64) -> CudaResult<Backing> {
        let bytes = bytes.max(1);
        let size = usize::try_from(bytes)
            .map_err(|_| CudaError::InvalidArgument(format!("{bytes} bytes")))?;
        match tier {
            Tier::Device => {
                self.device.bind()?;
                // SAFETY: a plain allocation, owned by the returned value.
                let ptr = unsafe { result::malloc_sync(size) }.call("cuMemAlloc")?;
                Ok(Backing::Device { ptr, bytes })
            }
            Tier::PinnedHost => {
                self.device.bind()?;
                let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
                // SAFETY: a plain allocation, owned by the returned value.
                let host = unsafe { result::malloc_host(size, flags) }.call("cuMemHostAlloc")?;
                let dptr = mapped_pointer(host);
                Ok(Backing::Pinned {
                    host: SendPtr(host),
                    dptr,
                    bytes,
                })
            }
            Tier::PageableHost => {
                let layout = Layout::from_size_align(size, PAGEABLE_ALIGN)
                    .map_err(|_| CudaError::HostOutOfMemory { bytes })?;
                // SAFETY: the layout has a non-zero size; the block is freed with the same
                // layout in `free_backing`.
                let p = unsafe { std::alloc::alloc_zeroed(layout) };
                if p.is_null() {
                    return Err(CudaError::HostOutOfMemory { bytes });
                }
                Ok(Backing::Pageable {
                    ptr: SendPtr(p.cast()),
                    bytes,
                })
            }
        }
    }

    fn release_backing(&self, b: Backing) {
        let bound = self.device.bind().is_ok();
        match b {
            Backing::Device { ptr, .. } => {
                if bound {
                    // SAFETY: allocated by cuMemAlloc in `new_backing`; the memory layer frees
                    // a block only after the fences of every copy into or out of it completed.
                    if let Err(e) = unsafe { result::free_sync(ptr) } {
                        log::warn!("[kernel-replay] cuMemFree of backing memory: {e}");
                    }
                }
            }
            Backing::Pinned { host, .. } => {
                if bound {
                    // SAFETY: as above, allocated by cuMemHostAlloc.
                    if let Err(e) = unsafe { result::free_host(host.0) } {
                        log::warn!("[kernel-replay] cuMemFreeHost of backing memory: {e}");
                    }
                }
            }
            Backing::Pageable { ptr, bytes } => {
                let layout = Layout::from_size_align(bytes as usize, PAGEABLE_ALIGN)
                    .expect("the layout was valid at allocation");
                // SAFETY: allocated by alloc_zeroed with this layout; no copy uses it any more.
                unsafe { std::alloc::dealloc(ptr.0.cast(), layout) };
            }
        }
    }

    /// Resolves one end of a copy: `(is_host, address)`.
    fn resolve(&self, st: &State, loc: MemLoc, len: u64) -> Result<(bool, u64), String> {
        match loc {
            MemLoc::Device { addr } => Ok((false, addr)),
            MemLoc::Backing { id, offset } => {
                let b = st
                    .backing
                    .get(&id.0)
                    .ok_or_else(|| format!("unknown backing block {}", id.0))?;
                let end = offset.checked_add(len).ok_or("offset overflow")?;
                if end > b.bytes() {
                    return Err(format!(
                        "{offset}+{len} lies outside backing block {} of {} bytes",
                        id.0,
                        b.bytes()
                    ));
                }
                Ok(match b {
                    Backing::Device { ptr, .. } => (false, ptr + offset),
                    Backing::Pinned { host, .. } => (true, host.0 as u64 + offset),
                    Backing::Pageable { ptr, .. } => (true, ptr.0 as u64 + offset),
                })
            }
        }
    }

    fn host_stream(&self, i: usize) -> sys::CUstream {
        self.host[i % 2].raw()
    }

    /// Enqueues one copy.
    fn enqueue(&self, lane: Lane, idx: usize, c: &ResolvedCopy) -> CudaResult<()> {
        let stream = match lane {
            Lane::Device => self.d2d.raw(),
            Lane::Host => self.host_stream(idx),
        };
        // SAFETY: both ends were resolved against live allocations: application device memory
        // the tracker reported live (the memory layer re-checks liveness before every batch),
        // or backing blocks whose bounds `resolve` checked. Backing stays allocated until the
        // batch's fence completed. `cuMemcpyAsync` infers each end's kind from the unified
        // address space, so device, managed, mapped pinned and pageable memory all work.
        unsafe { sys::cuMemcpyAsync(c.dst, c.src, c.len as usize, stream) }.call("cuMemcpyAsync")
    }

    fn new_fence(&self, p: Pending) -> Fence {
        let mut st = self.state.lock();
        st.next_fence += 1;
        let id = st.next_fence;
        st.fences.insert(id, p);
        Fence(id)
    }

    /// Records one event per stream in `streams` (fences for what was enqueued there).
    fn fence_events(&self, streams: &[sys::CUstream]) -> CudaResult<SmallVec<[Event; 4]>> {
        let mut evs = SmallVec::new();
        for &s in streams {
            let e = self.device.event(false)?;
            e.record(s)?;
            evs.push(e);
        }
        Ok(evs)
    }

    fn take_scratch(&self, need: [usize; 3]) -> CudaResult<Scratch> {
        {
            let mut st = self.state.lock();
            if let Some(i) = st.scratch.iter().position(|s| s.fits(need)) {
                return Ok(st.scratch.swap_remove(i));
            }
        }
        Scratch::alloc(&self.device, need.map(usize::next_power_of_two))
    }

    fn give_scratch(&self, s: Scratch) {
        let mut st = self.state.lock();
        st.scratch.push(s);
        if st.scratch.len() > 4 {
            // Keep the largest ones.
            st.scratch
                .sort_by_key(|s| std::cmp::Reverse(s.caps.iter().sum::<usize>()));
            let extra = st.scratch.split_off(4);
            st.deferred_scratch.extend(extra);
        }
    }

    /// Digests `ranges` of device memory and waits at most `timeout` (tools and benchmarks;
    /// the memory layer uses the asynchronous interface).
    pub fn digest_blocking(
        &self,
        ranges: &[(u64, u64)],
        key: DigestKey,
        timeout: Duration,
    ) -> Result<Vec<Digest128>, BackendError> {
        let ops: Vec<DigestOp> = ranges
            .iter()
            .map(|&(addr, len)| DigestOp {
                at: MemLoc::Device { addr },
                len,
            })
            .collect();
        let f = self.submit_digests(&ops, key)?;
        if !self.poll_fence(f, timeout)? {
            self.abandon_fence(f);
            return Err(BackendError::new(
                BackendErrorKind::Other,
                self.agent,
                "digest",
                format!("not done within {timeout:?}"),
            ));
        }
        self.take_digests(f)
    }

    /// Chunk digests of `[addr, addr+len)` in chunks of `chunk` bytes (the memory layer's
    /// split), waiting at most `timeout`.
    pub fn chunk_digests(
        &self,
        addr: u64,
        len: u64,
        chunk: u64,
        key: DigestKey,
        timeout: Duration,
    ) -> Result<Vec<Digest128>, BackendError> {
        let chunk = chunk.max(1);
        let mut ranges = Vec::with_capacity(len.div_ceil(chunk) as usize);
        let mut off = 0;
        while off < len {
            let l = chunk.min(len - off);
            ranges.push((addr + off, l));
            off += l;
        }
        self.digest_blocking(&ranges, key, timeout)
    }

    /// Copies `len` bytes of device memory to a new host vector (waits, bounded by `timeout`).
    pub fn read_device(&self, addr: u64, len: u64, timeout: Duration) -> CudaResult<Vec<u8>> {
        let mut out = vec![0u8; len as usize];
        if len == 0 {
            return Ok(out);
        }
        self.device.bind()?;
        let s = self.digest_stream.raw();
        // SAFETY: `out` has `len` bytes and outlives the wait below (on timeout it is leaked,
        // since the copy may still write it); `addr` is device memory the caller owns.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(out.as_mut_ptr().cast(), addr, len as usize, s)
                .call("cuMemcpyDtoHAsync")?;
        }
        let e = self.device.event(false)?;
        e.record(s)?;
        if !wait_events(&[&e], timeout)? {
            std::mem::forget(out);
            return Err(CudaError::InvalidArgument(format!(
                "device read of {len} bytes not done within {timeout:?}"
            )));
        }
        self.device.recycle_event(e);
        Ok(out)
    }

    /// Copies `bytes` into device memory at `addr` (waits, bounded by `timeout`). Not gated
    /// (tools and benchmarks outside a window, or tool work inside one): a write that may run
    /// beside a window goes through [`crate::CudaBackend::copy`].
    pub fn write_device(&self, addr: u64, bytes: &[u8], timeout: Duration) -> CudaResult<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.device.bind()?;
        let s = self.digest_stream.raw();
        // SAFETY: `bytes` outlives the wait below (on timeout the process cannot tell when the
        // driver finished reading it, so the caller's buffer must not be reused: we report an
        // error and the caller keeps it alive as it owns it); `addr` is device memory the
        // caller owns.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(addr, bytes.as_ptr().cast(), bytes.len(), s)
                .call("cuMemcpyHtoDAsync")?;
        }
        let e = self.device.event(false)?;
        e.record(s)?;
        if !wait_events(&[&e], timeout)? {
            return Err(CudaError::InvalidArgument(format!(
                "device write of {} bytes not done within {timeout:?}",
                bytes.len()
            )));
        }
        self.device.recycle_event(e);
        Ok(())
    }

    fn submit_digests_inner(&self, ops: &[DigestOp], key: DigestKey) -> CudaResult<Fence> {
        self.device.bind()?;
        let mut host: Vec<(usize, Digest128)> = Vec::new();
        let mut dev: Vec<(usize, u64, u64)> = Vec::with_capacity(ops.len());
        {
            let st = self.state.lock();
            for (i, op) in ops.iter().enumerate() {
                match op.at {
                    MemLoc::Device { addr } => dev.push((i, addr, op.len)),
                    MemLoc::Backing { id, offset } => {
                        let b = st.backing.get(&id.0).ok_or_else(|| {
                            CudaError::InvalidArgument(format!("unknown backing block {}", id.0))
                        })?;
                        if offset.checked_add(op.len).is_none_or(|e| e > b.bytes()) {
                            return Err(CudaError::InvalidArgument(format!(
                                "digest {offset}+{} outside backing block {}",
                                op.len, id.0
                            )));
                        }
                        match b {
                            Backing::Device { ptr, .. } => dev.push((i, ptr + offset, op.len)),
                            Backing::Pinned { dptr, .. } => dev.push((i, dptr + offset, op.len)),
                            Backing::Pageable { ptr, .. } => {
                                // SAFETY: in bounds (checked above); pageable copies complete
                                // before their submission returns, so the bytes are final.
                                let s = unsafe {
                                    std::slice::from_raw_parts(
                                        (ptr.0 as *const u8).add(offset as usize),
                                        op.len as usize,
                                    )
                                };
                                host.push((i, replay_core::digest::digest(key, s)));
                            }
                        }
                    }
                }
            }
        }
        let mut job = DigestJob {
            n: ops.len(),
            host,
            device_ops: dev.iter().map(|d| d.0).collect(),
            scratch: None,
            staging: None,
            key,
        };
        let s = self.digest_stream.raw();
        if dev.is_empty() {
            return Ok(self.new_fence(Pending {
                events: SmallVec::new(),
                digests: Some(job),
                done: true,
            }));
        }
        match &self.kernels {
            Some(k) => {
                let ranges: Vec<(u64, u64)> = dev.iter().map(|&(_, a, l)| (a, l)).collect();
                let total: u64 = ranges.iter().map(|r| r.1).sum();
                let seg = match self.segment.load(Ordering::Relaxed) {
                    0 => kernels::segment_bytes(total),
                    b => b,
                };
                let (segs, fins) = kernels::plan(&ranges, seg);
                let n = dev.len();
                let seg_bytes = segs.len() * std::mem::size_of::<kernels::Seg>();
                let fin_bytes = fins.len() * std::mem::size_of::<kernels::Fin>();
                let scratch =
                    self.take_scratch([seg_bytes + fin_bytes, n * 16, segs.len() * 32])?;
                // SAFETY: the table holds `caps[0] >= seg_bytes + fin_bytes` bytes of pinned
                // memory that no kernel uses (scratch is taken out of the pool until its fence
                // completes); `Seg` and `Fin` are plain `repr(C)` data of 32 bytes, and pinned
                // allocations are page-aligned.
                unsafe {
                    let base = scratch.table.host.0 as *mut u8;
                    std::ptr::copy_nonoverlapping(segs.as_ptr().cast::<u8>(), base, seg_bytes);
                    std::ptr::copy_nonoverlapping(
                        fins.as_ptr().cast::<u8>(),
                        base.add(seg_bytes),
                        fin_bytes,
                    );
                }
                let [k0, k1, k2, k3] = kernels::kernel_keys(key);
                let seg_args = ArgBlock::new()
                    .arg(DevicePtr(scratch.table.dptr))
                    .arg(segs.len() as u64)
                    .arg(k0)
                    .arg(k1)
                    .arg(k2)
                    .arg(k3)
                    .arg(DevicePtr(scratch.partials))
                    .arg(DevicePtr(scratch.out.dptr));
                let blocks = u32::try_from(segs.len()).map_err(|_| {
                    CudaError::InvalidArgument(format!("{} digest segments", segs.len()))
                })?;
                let r = (|| -> CudaResult<()> {
                    // SAFETY: `kr_digest_seg(const KrSeg*, u64, u64 x4, u64* partials, u64* out)`
                    // reads `segs.len()` table entries (mapped pinned memory written above),
                    // the bytes each names (live device memory: application memory the memory
                    // layer checked, or backing blocks it holds), and writes one partial sum
                    // (32 bytes) per segment and one result (16 bytes) per op, within the
                    // scratch's capacities; `kr_digest_fin` reads the `fins` entries after the
                    // segments and those partial sums. One stream, so in order; the scratch
                    // stays out of the pool until the fence completes.
                    unsafe {
                        launch_raw(
                            k.seg.raw(),
                            &LaunchConfig::linear(blocks, kernels::BLOCK),
                            s,
                            seg_args.params(),
                            seg_args.bytes(),
                        )?;
                        if !fins.is_empty() {
                            let fin_args = ArgBlock::new()
                                .arg(DevicePtr(scratch.table.dptr + seg_bytes as u64))
                                .arg(fins.len() as u64)
                                .arg(DevicePtr(scratch.partials))
                                .arg(DevicePtr(scratch.out.dptr));
                            launch_raw(
                                k.fin.raw(),
                                &LaunchConfig::linear(
                                    (fins.len() as u32).div_ceil(kernels::FIN_BLOCK),
                                    kernels::FIN_BLOCK,
                                ),
                                s,
                                fin_args.params(),
                                fin_args.bytes(),
                            )?;
                        }
                    }
                    Ok(())
                })();
                if let Err(e) = r {
                    // Whatever was enqueued may still run: leak the scratch rather than reuse it.
                    std::mem::forget(scratch);
                    return Err(e);
                }
                job.scratch = Some(scratch);
            }
            None => {
                // Host fallback: stage the bytes in pinned memory.
                let total: u64 = dev.iter().map(|d| d.2).sum();
                let size = usize::try_from(total.max(1))
                    .map_err(|_| CudaError::HostOutOfMemory { bytes: total })?;
                // SAFETY: a plain allocation owned by the staging value below.
                let hp = unsafe { result::malloc_host(size, 0) }.call("cuMemHostAlloc")?;
                let mut staging = Staging {
                    host: SendPtr(hp),
                    bytes: size,
                    spans: Vec::with_capacity(dev.len()),
                };
                let mut off = 0usize;
                for &(i, addr, len) in &dev {
                    if len > 0 {
                        // SAFETY: the staging block has room for every span (sized as their
                        // sum); `addr` is live device memory (see above).
                        let r = unsafe {
                            sys::cuMemcpyDtoHAsync_v2(
                                (hp as *mut u8).add(off).cast(),
                                addr,
                                len as usize,
                                s,
                            )
                        };
                        if let Err(e) = r.call("cuMemcpyDtoHAsync") {
                            std::mem::forget(staging);
                            return Err(e);
                        }
                    }
                    staging.spans.push((i, off, len as usize));
                    off += len as usize;
                }
                job.staging = Some(staging);
            }
        }
        let events = self.fence_events(&[s])?;
        Ok(self.new_fence(Pending {
            events,
            digests: Some(job),
            done: false,
        }))
    }

    fn submit_copies_inner(&self, ops: &[CopyOp]) -> Result<Fence, BackendError> {
        const OP: &str = "submit copies";
        let resolved: Vec<ResolvedCopy> = {
            let st = self.state.lock();
            let mut v = Vec::with_capacity(ops.len());
            for op in ops {
                let (sh, src) = self
                    .resolve(&st, op.src, op.len)
                    .map_err(|m| self.invalid(OP, m))?;
                let (dh, dst) = self
                    .resolve(&st, op.dst, op.len)
                    .map_err(|m| self.invalid(OP, m))?;
                let dir = match (sh, dh) {
                    (false, false) => Direction::DeviceToDevice,
                    (false, true) => Direction::DeviceToHost,
                    (true, false) => Direction::HostToDevice,
                    (true, true) => {
                        return Err(self.invalid(
                            OP,
                            "host-to-host copies between backing blocks are not supported".into(),
                        ))
                    }
                };
                v.push(ResolvedCopy {
                    dir,
                    src,
                    dst,
                    len: op.len,
                });
            }
            v
        };
        self.device.bind().map_err(|e| self.err(e, OP))?;
        let plan = schedule(&resolved, self.config.host_chunk_bytes);
        let mut used: SmallVec<[sys::CUstream; 4]> = SmallVec::new();
        let mut failure = None;
        for (lane, idx, c) in &plan {
            let s = match lane {
                Lane::Device => self.d2d.raw(),
                Lane::Host => self.host_stream(*idx),
            };
            if let Err(e) = self.enqueue(*lane, *idx, c) {
                failure = Some(e);
                break;
            }
            if !used.contains(&s) {
                used.push(s);
            }
        }
        let events = self.fence_events(&used).map_err(|e| self.err(e, OP))?;
        if let Some(e) = failure {
            // Copies enqueued before the failure may still run; wait for them (bounded) so the
            // memory layer may reuse its blocks, then report the failure.
            let refs: Vec<&Event> = events.iter().collect();
            if !matches!(wait_events(&refs, Duration::from_secs(10)), Ok(true)) {
                log::warn!("[kernel-replay] copies before a failed copy did not finish in 10 s");
            }
            return Err(BackendError::new(
                BackendErrorKind::CopyFailed,
                self.agent,
                OP,
                e.to_string(),
            ));
        }
        Ok(self.new_fence(Pending {
            events,
            digests: None,
            done: false,
        }))
    }
}

fn tier_index(t: Tier) -> usize {
    match t {
        Tier::Device => 0,
        Tier::PinnedHost => 1,
        Tier::PageableHost => 2,
    }
}

/// What `cuPointerGetAttributes` says about an address (zero where the driver does not say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PointerAttributes {
    /// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`: 0 (unknown to CUDA), 1 host, 2 device.
    pub memory_type: u32,
    /// `CU_POINTER_ATTRIBUTE_IS_MANAGED`.
    pub is_managed: bool,
    /// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`.
    pub device_ordinal: i32,
    /// `CU_POINTER_ATTRIBUTE_RANGE_START_ADDR` / `RANGE_SIZE`: the allocation around it.
    pub range: (u64, u64),
    /// `CU_POINTER_ATTRIBUTE_MAPPED`: a virtual-memory mapping (`cuMemMap`).
    pub mapped: bool,
    /// `CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR` / `MAPPING_SIZE`: the mapping around it.
    pub mapping: (u64, u64),
    /// `CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE` is set: stream-ordered pool memory.
    pub from_pool: bool,
}

impl PointerAttributes {
    /// Asks the driver about `addr` (the context must be current). Never fails for an address
    /// CUDA does not know: `memory_type` is then 0.
    pub fn query(addr: u64) -> CudaResult<Self> {
        use sys::CUpointer_attribute as A;
        let mut attrs = [
            A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
            A::CU_POINTER_ATTRIBUTE_MAPPED,
            A::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
            A::CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
            A::CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
        ];
        // Every slot is 8 bytes and zeroed, wider than any attribute's value (unsigned int,
        // int, bool, CUdeviceptr, size_t, a handle), so a narrower write leaves a value that
        // reads the same (little-endian).
        let mut vals = [0u64; 9];
        let mut data: [*mut c_void; 9] = std::array::from_fn(|i| {
            // SAFETY: in bounds of `vals`.
            unsafe { vals.as_mut_ptr().add(i) }.cast()
        });
        // SAFETY: `attrs` and `data` have 9 entries each; every data pointer points to 8
        // writable bytes that outlive the call. The call does not fail for unknown addresses.
        unsafe {
            sys::cuPointerGetAttributes(
                attrs.len() as u32,
                attrs.as_mut_ptr(),
                data.as_mut_ptr(),
                addr,
            )
        }
        .call("cuPointerGetAttributes")?;
        Ok(Self {
            memory_type: vals[0] as u32,
            is_managed: vals[1] as u32 != 0,
            device_ordinal: vals[2] as i32,
            range: (vals[3], vals[4]),
            mapped: vals[5] as u32 != 0,
            from_pool: vals[6] != 0,
            mapping: (vals[7], vals[8]),
        })
    }

    /// The SPEC §7.1 class of the memory for `agent` (device `ordinal`), or `None` where CUDA
    /// knows no allocation there (pageable host memory, a word that is not a pointer).
    ///
    /// | the driver says | class |
    /// |---|---|
    /// | managed | `MANAGED` |
    /// | host (`cuMemHostAlloc`, `cuMemAllocHost`, `cuMemHostRegister`) | `PINNED_HOST` |
    /// | device of another ordinal | `PEER`, owned by that device |
    /// | a `cuMemMap` mapping, or stream-ordered pool memory | `VIRTUAL_MAPPING` |
    /// | other device memory of this device | `DEVICE_COARSE` |
    ///
    /// IPC-imported memory is device memory to the driver's pointer attributes and cannot be
    /// told apart here; an extent the driver does not report gives `size` 0.
    pub fn classify(&self, addr: u64, agent: AgentId, ordinal: i32) -> Option<PointerInfo> {
        let class = match (self.memory_type, self.is_managed) {
            (0, false) => return None,
            (_, true) => MemoryClass::MANAGED,
            (1, _) => MemoryClass::PINNED_HOST,
            _ if self.device_ordinal != ordinal => MemoryClass::PEER,
            _ if self.mapped || self.from_pool => MemoryClass::VIRTUAL_MAPPING,
            _ => MemoryClass::DEVICE_COARSE,
        };
        let (base, size) = match (self.range, self.mapping) {
            ((b, n), _) if n > 0 && addr >= b && addr - b < n => (b, n),
            (_, (b, n)) if n > 0 && addr >= b && addr - b < n => (b, n),
            _ => (addr, 0),
        };
        let owner = if class == MemoryClass::PINNED_HOST {
            None
        } else if class == MemoryClass::PEER {
            Some(AgentId(self.device_ordinal.max(0) as u64))
        } else {
            Some(agent)
        };
        Some(PointerInfo {
            base,
            size,
            class,
            owner,
        })
    }
}

impl DeviceMemory for CudaMemory {
    fn agent(&self) -> AgentId {
        self.agent
    }

    fn query_pointer(&self, addr: u64) -> Result<Option<PointerInfo>, BackendError> {
        const OP: &str = "query pointer";
        self.device.bind().map_err(|e| self.err(e, OP))?;
        let a = PointerAttributes::query(addr).map_err(|e| self.err(e, OP))?;
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
            return Err(BackendError::new(
                BackendErrorKind::OutOfMemory,
                self.agent,
                OP,
                format!("{} allocation failure injected", tier.as_str()),
            ));
        }
        if tier != Tier::PageableHost {
            // A driver allocation while another thread captures could join or invalidate that
            // capture; pageable backing needs no driver call.
            if let Some(why) = self.live_capture() {
                return Err(BackendError::new(
                    BackendErrorKind::OutOfMemory,
                    self.agent,
                    OP,
                    format!(
                        "no {} backing allocated while a capture is live: {why}",
                        tier.as_str()
                    ),
                ));
            }
        }
        self.invalidate_capacity();
        let b = self.new_backing(tier, bytes).map_err(|e| self.err(e, OP))?;
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
                self.release_backing(b);
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
                done: true,
            }));
        }
        self.submit_copies_inner(ops)
    }

    fn submit_digests(&self, ops: &[DigestOp], key: DigestKey) -> Result<Fence, BackendError> {
        self.submit_digests_inner(ops, key)
            .map_err(|e| self.err(e, "submit digests"))
    }

    fn poll_fence(&self, fence: Fence, budget: Duration) -> Result<bool, BackendError> {
        const OP: &str = "poll fence";
        // Take the events out so the wait holds no lock (SPEC §6: a wait never holds a lock).
        let (events, is_digest) = {
            let mut st = self.state.lock();
            let p = st
                .fences
                .get_mut(&fence.0)
                .ok_or_else(|| self.invalid(OP, format!("unknown fence {}", fence.0)))?;
            if p.done {
                return Ok(true);
            }
            (std::mem::take(&mut p.events), p.digests.is_some())
        };
        let bound = self.device.bind();
        let refs: Vec<&Event> = events.iter().collect();
        let r = bound.and_then(|()| wait_events(&refs, budget));
        let mut st = self.state.lock();
        let done = matches!(r, Ok(true));
        match st.fences.get_mut(&fence.0) {
            Some(p) if done => {
                p.done = true;
                drop(refs);
                for e in events {
                    self.device.recycle_event(e);
                }
                if !is_digest {
                    st.fences.remove(&fence.0);
                }
            }
            Some(p) => p.events = events,
            None => {} // abandoned meanwhile: the events drop (destroyed when done)
        }
        r.map_err(|e| self.err(e, OP))
    }

    fn take_digests(&self, fence: Fence) -> Result<Vec<Digest128>, BackendError> {
        const OP: &str = "take digests";
        let p = {
            let mut st = self.state.lock();
            match st.fences.get(&fence.0) {
                Some(p) if p.done && p.digests.is_some() => {}
                Some(_) => {
                    return Err(self.invalid(
                        OP,
                        format!("fence {} is not a completed digest batch", fence.0),
                    ))
                }
                None => return Err(self.invalid(OP, format!("unknown fence {}", fence.0))),
            }
            st.fences.remove(&fence.0).expect("checked above")
        };
        let mut job = p.digests.expect("checked above");
        let mut out = vec![Digest128(0); job.n];
        for &(i, d) in &job.host {
            out[i] = d;
        }
        if let Some(scratch) = job.scratch.take() {
            // SAFETY: the batch completed: the results are in pinned memory, `device_ops.len()`
            // pairs of u64.
            let res = unsafe {
                std::slice::from_raw_parts(
                    scratch.out.host.0 as *const u64,
                    2 * job.device_ops.len(),
                )
            };
            for (j, &i) in job.device_ops.iter().enumerate() {
                out[i] = Digest128((u128::from(res[2 * j]) << 64) | u128::from(res[2 * j + 1]));
            }
            self.give_scratch(scratch);
        }
        if let Some(staging) = job.staging.take() {
            // SAFETY: the batch completed; the staging block holds `staging.bytes` bytes.
            let all =
                unsafe { std::slice::from_raw_parts(staging.host.0 as *const u8, staging.bytes) };
            for &(i, off, len) in &staging.spans {
                out[i] = replay_core::digest::digest(job.key, &all[off..off + len]);
            }
            self.state.lock().deferred_staging.push(staging);
        }
        Ok(out)
    }

    fn abandon_fence(&self, fence: Fence) {
        let p = self.state.lock().fences.remove(&fence.0);
        if let Some(p) = p {
            if let Some(mut job) = p.digests {
                // The device may still write them: leak, never reuse (as the memory layer does
                // with backing blocks of an abandoned copy).
                if let Some(s) = job.scratch.take() {
                    std::mem::forget(s);
                }
                if let Some(s) = job.staging.take() {
                    std::mem::forget(s);
                }
            }
            // Events of an incomplete batch are destroyed; the driver releases them when done.
        }
    }
}

impl Drop for CudaMemory {
    fn drop(&mut self) {
        let st = std::mem::take(&mut *self.state.lock());
        for b in st.backing.into_values().chain(st.deferred) {
            self.release_backing(b);
        }
        if self.device.bind().is_ok() {
            drop(st.scratch);
            drop(st.deferred_scratch);
            drop(st.deferred_staging);
        } else {
            st.scratch.into_iter().for_each(std::mem::forget);
            st.deferred_scratch.into_iter().for_each(std::mem::forget);
            st.deferred_staging.into_iter().for_each(std::mem::forget);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn d2d(src: u64, dst: u64, len: u64) -> ResolvedCopy {
        ResolvedCopy {
            dir: Direction::DeviceToDevice,
            src,
            dst,
            len,
        }
    }

    #[test]
    fn copies_are_never_merged_across_ops() {
        // Two adjacent allocations (as cuMemAlloc hands them out) snapshotted into one backing
        // block: contiguous at both ends, yet one cuMemcpyAsync over both is invalid on a real
        // driver. Each op stays its own copy.
        let mib = 1 << 20;
        let ops = [
            d2d(0x1000_0000, 0x9000_0000, mib),
            d2d(0x1000_0000 + mib, 0x9000_0000 + mib, mib),
            d2d(0x1000_0000 + 2 * mib, 0x9000_0000 + 2 * mib, mib),
        ];
        let s = schedule(&ops, 64 * mib);
        assert_eq!(s.len(), 3);
        for ((_, _, c), o) in s.iter().zip(&ops) {
            assert_eq!(c, o);
        }
        // Host copies are chunked within an op, never across ops.
        let host: Vec<ResolvedCopy> = (0..2u64)
            .map(|i| ResolvedCopy {
                dir: Direction::DeviceToHost,
                src: 0x1000_0000 + i * 3 * mib,
                dst: 0x7000_0000 + i * 3 * mib,
                len: 3 * mib,
            })
            .collect();
        let s = schedule(&host, 2 * mib);
        let spans: Vec<(u64, u64)> = s.iter().map(|(_, _, c)| (c.src, c.len)).collect();
        assert_eq!(
            spans,
            vec![
                (0x1000_0000, 2 * mib),
                (0x1000_0000 + 2 * mib, mib),
                (0x1000_0000 + 3 * mib, 2 * mib),
                (0x1000_0000 + 5 * mib, mib),
            ]
        );
    }

    #[test]
    fn host_copies_are_chunked_across_two_streams() {
        let ops = [
            ResolvedCopy {
                dir: Direction::DeviceToHost,
                src: 0x1000,
                dst: 0x7000_0000,
                len: 250,
            },
            d2d(0x5000, 0x6000, 1000),
            ResolvedCopy {
                dir: Direction::HostToDevice,
                src: 0x8000_0000,
                dst: 0x2000,
                len: 100,
            },
        ];
        let s = schedule(&ops, 100);
        let lanes: Vec<(Lane, usize, u64, u64)> =
            s.iter().map(|(l, i, c)| (*l, *i, c.src, c.len)).collect();
        assert_eq!(
            lanes,
            vec![
                (Lane::Host, 0, 0x1000, 100),
                (Lane::Host, 1, 0x1000 + 100, 100),
                (Lane::Host, 0, 0x1000 + 200, 50),
                (Lane::Device, 0, 0x5000, 1000),
                (Lane::Host, 1, 0x8000_0000, 100),
            ]
        );
        // Bytes are conserved, destinations follow sources.
        for (_, _, c) in &s {
            if c.dir == Direction::DeviceToHost {
                assert_eq!(c.dst - 0x7000_0000, c.src - 0x1000);
            }
        }
    }

    #[test]
    fn pointer_attributes_give_the_spec_class() {
        let agent = AgentId(0);
        let dev = |ordinal| PointerAttributes {
            memory_type: 2,
            device_ordinal: ordinal,
            range: (0x1000, 0x1000),
            ..Default::default()
        };
        let c = |a: PointerAttributes| a.classify(0x1800, agent, 0).map(|i| (i.class, i.owner));
        assert_eq!(c(PointerAttributes::default()), None, "unknown to CUDA");
        assert_eq!(c(dev(0)), Some((MemoryClass::DEVICE_COARSE, Some(agent))));
        assert_eq!(
            c(dev(1)),
            Some((MemoryClass::PEER, Some(AgentId(1)))),
            "another device's memory"
        );
        assert_eq!(
            c(PointerAttributes {
                is_managed: true,
                ..dev(0)
            }),
            Some((MemoryClass::MANAGED, Some(agent)))
        );
        assert_eq!(
            c(PointerAttributes {
                memory_type: 1,
                ..dev(0)
            }),
            Some((MemoryClass::PINNED_HOST, None))
        );
        for a in [
            PointerAttributes {
                mapped: true,
                ..dev(0)
            },
            PointerAttributes {
                from_pool: true,
                ..dev(0)
            },
        ] {
            assert_eq!(c(a), Some((MemoryClass::VIRTUAL_MAPPING, Some(agent))));
        }
        // The extent: the range, else the mapping, else unknown (size 0).
        let i = PointerAttributes {
            mapped: true,
            range: (0, 0),
            mapping: (0x1000, 0x4000),
            ..dev(0)
        }
        .classify(0x1800, agent, 0)
        .unwrap();
        assert_eq!((i.base, i.size), (0x1000, 0x4000));
        let i = PointerAttributes {
            range: (0, 0),
            ..dev(0)
        }
        .classify(0x1800, agent, 0)
        .unwrap();
        assert_eq!((i.base, i.size), (0x1800, 0));
    }

    #[test]
    fn reported_tiers_follow_the_machine_and_the_mask() {
        let cfg = TierConfig::default();
        let r = CapacityReport {
            device_free: 19 * GIB,
            host_available: 120 * GIB,
        };
        let t = report_tiers(r, &cfg, [true; 3]);
        assert_eq!(t[0].unwrap().available_bytes, 19 * GIB);
        assert_eq!(t[1].unwrap().available_bytes, 96 * GIB);
        assert_eq!(t[2].unwrap().available_bytes, 48 * GIB);
        let masked = report_tiers(r, &cfg, [false, true, true]);
        assert!(masked[0].is_none());
        assert!(masked[1].is_some());
    }

    /// A fake device memory that reports capacities as the CUDA backend would, for the memory
    /// layer's planning.
    struct Fake {
        tiers: [Option<TierInfo>; 3],
    }

    impl DeviceMemory for Fake {
        fn agent(&self) -> AgentId {
            AgentId(0)
        }
        fn tier_info(&self, tier: Tier) -> Option<TierInfo> {
            self.tiers[tier_index(tier)]
        }
        fn alloc_backing(&self, _: Tier, _: u64) -> Result<BackingId, BackendError> {
            Err(BackendError::new(
                BackendErrorKind::Unsupported,
                AgentId(0),
                "fake",
                "planning only",
            ))
        }
        fn free_backing(&self, _: BackingId) {}
        fn submit_copies(&self, _: &[CopyOp]) -> Result<Fence, BackendError> {
            unreachable!("planning only")
        }
        fn submit_digests(&self, _: &[DigestOp], _: DigestKey) -> Result<Fence, BackendError> {
            unreachable!("planning only")
        }
        fn poll_fence(&self, _: Fence, _: Duration) -> Result<bool, BackendError> {
            unreachable!("planning only")
        }
        fn take_digests(&self, _: Fence) -> Result<Vec<Digest128>, BackendError> {
            unreachable!("planning only")
        }
        fn abandon_fence(&self, _: Fence) {}
    }

    fn plan_capacity(device_free: u64, host: u64, alloc: &[u64]) -> (u64, u64) {
        use replay_core::{
            Dim3, Dispatch, DispatchId, DispatchInfo, KernelId, KernelKey, MemoryClass, Origin,
            Policy, QueueId, Scope, Snapshotter, SubmissionKind,
        };
        use replay_memory::{MemoryEngine, NoModuleVariables, Tracker};
        let tracker = Arc::new(Tracker::new());
        let mut base = 0x7000_0000_0000u64;
        for &a in alloc {
            tracker.record_alloc(AgentId(0), base, a, MemoryClass::DEVICE_COARSE);
            base += a.next_multiple_of(1 << 21);
        }
        let fake = Fake {
            tiers: report_tiers(
                CapacityReport {
                    device_free,
                    host_available: host,
                },
                &TierConfig::default(),
                [true; 3],
            ),
        };
        let engine = MemoryEngine::new(
            AgentId(0),
            tracker,
            Arc::new(fake),
            Arc::new(NoModuleVariables),
        )
        .with_host_available_bytes(host);
        let d = Dispatch {
            info: DispatchInfo {
                agent: AgentId(0),
                queue: QueueId(0),
                dispatch_id: DispatchId(0),
                kernel_id: KernelId(0),
                kernel_name: "k".into(),
                grid: Dim3::new(1, 1, 1),
                workgroup: Dim3::new(1, 1, 1),
                private_segment_size: 0,
                group_segment_size: 0,
            },
            kernel: KernelKey {
                agent: AgentId(0),
                code_object: 0,
                symbol: 0,
            },
            kind: SubmissionKind::KernelDispatch,
            kernarg: Default::default(),
            origin: Origin::SubmittingThread,
            handle: 0,
        };
        let plan = engine.plan(&d, Scope::All, &Policy::default()).unwrap();
        (plan.captured_bytes, plan.capacity_bytes)
    }

    #[test]
    fn tier_planning_against_reported_capacities() {
        // 100 GiB allocated on a 140 GiB device of a host with 123 GiB available: the device
        // tier keeps headroom, the host tiers take fractions; together they hold the snapshot.
        let (captured, capacity) = plan_capacity(39 * GIB, 123 * GIB, &[25 * GIB; 4]);
        assert_eq!(captured, 100 * GIB);
        let device = 39 * GIB - (39 * GIB / 10 + (256 << 20));
        let host = 123 * GIB;
        let pinned = (host as f64 * 0.8) as u64 / 2;
        let pageable = (host as f64 * 0.4) as u64;
        let want = device + pinned + pageable.min(host / 2);
        let tolerance = GIB / 100;
        assert!(
            capacity.abs_diff(want) < tolerance,
            "capacity {capacity} want {want}"
        );
        assert!(capacity >= captured, "100 GiB fits");

        // 120 GiB allocated: device has 19 GiB free; the host tiers cannot make up the rest, so
        // the window will decline `footprint_budget` rather than overcommit host memory.
        let (captured, capacity) = plan_capacity(19 * GIB, 123 * GIB, &[30 * GIB; 4]);
        assert_eq!(captured, 120 * GIB);
        assert!(capacity < captured, "capacity {capacity}");
        // The host tiers never plan for more than 80% of what the host has available.
        assert!(capacity - (19 * GIB - (19 * GIB / 10 + (256 << 20))) <= 123 * GIB * 8 / 10);
    }
}
