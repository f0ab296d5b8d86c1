//! Tiers (SPEC §7.3): how the backend sizes them ([`TierConfig`]), the capacities it reports
//! to the memory layer ([`report_tiers`]: the device's free memory and fractions of the host's
//! `MemAvailable`), and the backing blocks it allocates in each: `cuMemAlloc` (device),
//! pinned host (portable, mapped), the Rust allocator (pageable host: `alloc_zeroed`, so lazily
//! zeroed pages and an error rather than an abort when the host is out of memory).
//!
//! **Pinning** is the first dispatch's warm-up (about 1.6 GB/s through one
//! `cuMemHostAlloc`, 38 s for a 61 GiB share). A block of at least [`PIN_PARALLEL_MIN`] is
//! allocated from the host allocator aligned to 2 MiB, advised as transparent huge pages,
//! its pages first touched by up to [`TierConfig::pin_threads`] threads at once (the kernel's
//! page allocation and zeroing run in parallel), then page-locked and mapped with one
//! `cuMemHostRegister` (one registration, so every copy into the block stays inside it). On
//! the H200 machine 16 GiB took 0.85 s this way (20 GB/s) against 10.8 s through
//! `cuMemHostAlloc` (`BENCHMARKS.md`). The pinning still precedes the capture
//! copies; it is not overlapped with them.
//! When any step fails the block comes from `cuMemHostAlloc` as before; `pin_threads = 0`
//! always takes that path.

use std::alloc::Layout;
use std::time::Duration;

use replay_core::{Tier, TierInfo};

use crate::device::{Device, SendPtr};
use crate::error::{CudaError, CudaResult};
use crate::result::{self, mapped_pointer, DriverCall};
use crate::sys;

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
    /// Threads that first-touch a large pinned block before it is registered (0: one
    /// `cuMemHostAlloc` instead). See the module docs.
    pub pin_threads: usize,
}

impl Default for TierConfig {
    fn default() -> Self {
        Self {
            pinned_fraction: 0.8,
            pageable_fraction: 0.4,
            host_chunk_bytes: 64 << 20,
            gbps: [2000.0, 50.0, 10.0],
            pin_threads: 8,
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

/// How long a capacity report is reused.
pub const CAPACITY_TTL: Duration = Duration::from_millis(20);

/// A backing allocation.
#[derive(Debug)]
pub(super) enum Backing {
    Device {
        ptr: u64,
        bytes: u64,
    },
    Pinned {
        host: SendPtr,
        dptr: u64,
        bytes: u64,
        /// Registered host-allocator memory (released by unregistering and freeing it), not
        /// `cuMemHostAlloc`'s.
        registered: bool,
    },
    Pageable {
        ptr: SendPtr,
        bytes: u64,
    },
}

impl Backing {
    pub(super) fn bytes(&self) -> u64 {
        match self {
            Self::Device { bytes, .. }
            | Self::Pinned { bytes, .. }
            | Self::Pageable { bytes, .. } => *bytes,
        }
    }

    /// Allocates `bytes` of backing in `tier` (device and pinned: on `device`, whose context
    /// it binds).
    pub(super) fn alloc(
        device: &Device,
        tier: Tier,
        bytes: u64,
        pin_threads: usize,
    ) -> CudaResult<Self> {
        let bytes = bytes.max(1);
        let size = usize::try_from(bytes)
            .map_err(|_| CudaError::InvalidArgument(format!("{bytes} bytes")))?;
        match tier {
            Tier::Device => {
                device.bind()?;
                // SAFETY: a plain allocation, owned by the returned value.
                let ptr = unsafe { result::malloc_sync(size) }.call("cuMemAlloc")?;
                Ok(Self::Device { ptr, bytes })
            }
            Tier::PinnedHost => {
                device.bind()?;
                if pin_threads > 0 && size >= PIN_PARALLEL_MIN {
                    match pin_registered(size, pin_threads) {
                        Ok((host, dptr)) => {
                            return Ok(Self::Pinned {
                                host,
                                dptr,
                                bytes,
                                registered: true,
                            })
                        }
                        Err(e) => log::info!(
                            "[kernel-replay] pinning {size} bytes by registration failed ({e}); using cuMemHostAlloc"
                        ),
                    }
                }
                let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
                // SAFETY: a plain allocation, owned by the returned value.
                let host = unsafe { result::malloc_host(size, flags) }.call("cuMemHostAlloc")?;
                let dptr = mapped_pointer(host);
                Ok(Self::Pinned {
                    host: SendPtr(host),
                    dptr,
                    bytes,
                    registered: false,
                })
            }
            Tier::PageableHost => {
                let layout = Layout::from_size_align(size, PAGEABLE_ALIGN)
                    .map_err(|_| CudaError::HostOutOfMemory { bytes })?;
                // SAFETY: the layout has a non-zero size; the block is freed with the same
                // layout in `release`.
                let p = unsafe { std::alloc::alloc_zeroed(layout) };
                if p.is_null() {
                    return Err(CudaError::HostOutOfMemory { bytes });
                }
                Ok(Self::Pageable {
                    ptr: SendPtr(p.cast()),
                    bytes,
                })
            }
        }
    }

    /// Releases the block. Driver memory is released only when `device` can be bound (else it
    /// is leaked: its context is gone).
    pub(super) fn release(self, device: &Device) {
        let bound = device.bind().is_ok();
        match self {
            Backing::Device { ptr, .. } => {
                if bound {
                    // SAFETY: allocated by cuMemAlloc in `alloc`; the memory layer frees
                    // a block only after the fences of every copy into or out of it completed.
                    if let Err(e) = unsafe { result::free_sync(ptr) } {
                        log::warn!("[kernel-replay] cuMemFree of backing memory: {e}");
                    }
                }
            }
            Backing::Pinned {
                host,
                registered: false,
                ..
            } => {
                if bound {
                    // SAFETY: as above, allocated by cuMemHostAlloc.
                    if let Err(e) = unsafe { result::free_host(host.0) } {
                        log::warn!("[kernel-replay] cuMemFreeHost of backing memory: {e}");
                    }
                }
            }
            Backing::Pinned {
                host,
                bytes,
                registered: true,
                ..
            } => {
                if bound {
                    // SAFETY: registered by `pin_registered`; no copy uses it any more (as
                    // above). Only once it is unregistered is the memory given back.
                    let r = unsafe { sys::cuMemHostUnregister(host.0) };
                    if let Err(e) = r.call("cuMemHostUnregister") {
                        log::warn!("[kernel-replay] cuMemHostUnregister of backing memory: {e}");
                        return; // still locked for the device: leaked, never reused
                    }
                    // SAFETY: allocated by `pin_registered` with this layout, unregistered.
                    unsafe { std::alloc::dealloc(host.0.cast(), pin_layout(bytes as usize)) };
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
}

/// Pinned blocks at least this large are pinned by registration after a parallel first touch
/// (module docs); smaller ones through `cuMemHostAlloc`.
pub const PIN_PARALLEL_MIN: usize = 256 << 20;

/// Alignment of registered pinned blocks: a transparent huge page.
const HUGE_PAGE: usize = 2 << 20;

fn pin_layout(size: usize) -> Layout {
    Layout::from_size_align(size.next_multiple_of(HUGE_PAGE), HUGE_PAGE)
        .expect("a size below isize::MAX rounded to 2 MiB")
}

extern "C" {
    /// glibc's `madvise(2)`.
    fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
}
/// `MADV_HUGEPAGE` on Linux.
const MADV_HUGEPAGE: i32 = 14;

/// A block of `size` bytes from the host allocator, its pages first touched by `threads`
/// threads at once and then page-locked and mapped with one `cuMemHostRegister`: (host
/// pointer, device pointer). On failure nothing stays allocated.
fn pin_registered(size: usize, threads: usize) -> CudaResult<(SendPtr, u64)> {
    if size > isize::MAX as usize / 2 {
        return Err(CudaError::HostOutOfMemory { bytes: size as u64 });
    }
    let layout = pin_layout(size);
    // SAFETY: a non-zero size; freed with the same layout below or in `release`.
    let p = unsafe { std::alloc::alloc(layout) };
    if p.is_null() {
        return Err(CudaError::HostOutOfMemory {
            bytes: layout.size() as u64,
        });
    }
    // SAFETY: advice on memory this function owns; a failure (no transparent huge pages)
    // only leaves small pages.
    let _ = unsafe { madvise(p.cast(), layout.size(), MADV_HUGEPAGE) };
    let len = layout.size();
    let per = len.div_ceil(threads.max(1)).next_multiple_of(HUGE_PAGE);
    let base = p as usize;
    std::thread::scope(|s| {
        for start in (0..len).step_by(per) {
            let end = (start + per).min(len);
            let touch = move || {
                for off in (start..end).step_by(4096) {
                    // SAFETY: inside the block (off < len), which no one else uses yet; each
                    // thread writes its own pages.
                    unsafe { std::ptr::write_volatile((base + off) as *mut u8, 0) };
                }
            };
            if std::thread::Builder::new()
                .name("kreplay-pin".into())
                .spawn_scoped(s, touch)
                .is_err()
            {
                touch();
            }
        }
    });
    let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
    // SAFETY: `p` is `len` bytes of host memory this function owns, page-aligned.
    let r = unsafe { sys::cuMemHostRegister_v2(p.cast(), len, flags) };
    if let Err(e) = r.call("cuMemHostRegister") {
        // SAFETY: allocated above with this layout; never registered.
        unsafe { std::alloc::dealloc(p, layout) };
        return Err(e);
    }
    Ok((SendPtr(p.cast()), mapped_pointer(p.cast())))
}

/// Alignment of pageable backing blocks. Kept at the allocator's natural alignment so that
/// `alloc_zeroed` is `calloc`, whose large blocks are fresh zero pages committed only when a
/// copy first touches them (a larger alignment makes the standard library zero every byte).
const PAGEABLE_ALIGN: usize = 16;

pub(super) fn tier_index(t: Tier) -> usize {
    match t {
        Tier::Device => 0,
        Tier::PinnedHost => 1,
        Tier::PageableHost => 2,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use replay_core::AgentId;

    use super::*;

    const GIB: u64 = 1 << 30;

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

    fn plan_capacity(device_free: u64, host: u64, alloc: &[u64]) -> (u64, u64) {
        use replay_core::{
            Dim3, Dispatch, DispatchInfo, KernelId, KernelKey, MemoryClass, Origin, Policy,
            QueueId, Scope, Snapshotter, SubmissionKind,
        };
        use replay_memory::{MemoryEngine, NoModuleVariables, Tracker};
        let tracker = Arc::new(Tracker::new());
        let mut base = 0x7000_0000_0000u64;
        for &a in alloc {
            tracker.record_alloc(AgentId(0), base, a, MemoryClass::DEVICE_COARSE);
            base += a.next_multiple_of(1 << 21);
        }
        // The shared fake device memory, reporting capacities as the CUDA backend would, for
        // the memory layer's planning.
        let tiers = report_tiers(
            CapacityReport {
                device_free,
                host_available: host,
            },
            &TierConfig::default(),
            [true; 3],
        );
        let fake = replay_mock::double::FakeDeviceMemory::new(
            AgentId(0),
            Arc::default(),
            tiers.map(|t| t.map(|t| t.available_bytes)),
        );
        fake.st.lock().gbps = Some(tiers.map(|t| t.map_or(0.0, |t| t.gbps)));
        let engine = MemoryEngine::new(
            AgentId(0),
            tracker,
            Arc::new(fake),
            Arc::new(NoModuleVariables),
        )
        .with_host_available_bytes(host);
        let d = Dispatch {
            info: DispatchInfo::new(
                AgentId(0),
                QueueId(0),
                KernelId(0),
                "k",
                Dim3::new(1, 1, 1),
                Dim3::new(1, 1, 1),
            ),
            kernel: KernelKey {
                agent: AgentId(0),
                code_object: 0,
                symbol: 0,
            },
            kind: SubmissionKind::KernelDispatch,
            kernarg: Default::default(),
            arg_layout: Default::default(),
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
