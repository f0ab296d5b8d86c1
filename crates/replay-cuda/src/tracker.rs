//! Tracked allocation (SPEC §7.1): every allocation made through the backend's API is reported
//! to the [`replay_memory::Tracker`] with its class, and every free is recorded *before* the
//! memory is released, so no restore can write into released memory.
//!
//! | API | driver call | class |
//! |---|---|---|
//! | [`CudaAllocator::alloc_device`] | `cuMemAlloc` | coarse-grained device memory: tracked, captured |
//! | [`CudaAllocator::alloc_managed`] | `cuMemAllocManaged` | managed: captured by `arguments` when an argument points into it |
//! | [`CudaAllocator::alloc_pinned_host`] | `cuMemHostAlloc` (mapped) | pinned host: likewise |
//! | [`CudaAllocator::alloc_host`] | `cuMemAllocHost` | pinned host: likewise |
//! | [`CudaAllocator::register_host`] | `cuMemHostRegister` (mapped) | pinned (registered) host: likewise |
//! | [`CudaAllocator::alloc_async`] | `cuMemAllocAsync` (the device's default pool) | stream-ordered pool memory: coarse device memory marked `VIRTUAL_MAPPING`, captured, from the allocation to the point its free is ordered ([`Tracker::record_async_alloc`] / [`Tracker::record_async_free`], before `cuMemFreeAsync`) |
//! | [`CudaAllocator::alloc_from_pool_async`] | `cuMemAllocFromPoolAsync` (a pool of this device, e.g. [`CudaAllocator::default_pool`]) | likewise |
//! | [`CudaAllocator::alloc_virtual`] | `cuMemCreate` + `cuMemAddressReserve` + `cuMemMap` + `cuMemSetAccess` | a mapping of coarse device memory, captured on this device once it has read-write access ([`Tracker::record_map`] after `cuMemMap`, [`Tracker::record_access`] after `cuMemSetAccess`; [`Tracker::record_unmap`] before `cuMemUnmap`, [`Tracker::record_release_reservation`] before `cuMemAddressFree`) |
//!
//! `decline_on_vmem` (policy) still declines a dispatch while either kind is live.
//! The interception of unmodified applications reports the same calls through
//! [`report_map`], [`report_access`], [`report_unmap`], [`report_address_free`],
//! [`report_async_alloc`] and [`report_async_free`], in the order the table above gives.
//!
//! Host memory is recorded at the address kernels use for it (`cuMemHostGetDevicePointer`;
//! with unified addressing, the host address), which is also what an argument word holds and
//! what the device memory's copies and digests read and write.
//!
//! When the driver reports out of memory for an application allocation (every entry above:
//! device, managed, pinned, registered, stream-ordered and virtual), the allocator first calls
//! its out-of-memory hook (the backend releases the memory layer's pooled backing and the
//! backing waiting for release there, SPEC §7.3), then retries once.

use std::ffi::c_void;
use std::sync::Arc;

use parking_lot::Mutex;
use replay_core::{AgentId, MemoryClass};
use replay_memory::{MapAccess, MappedHandle, Tracker};

use crate::device::{Device, SendPtr};
use crate::error::{CudaError, CudaResult};
use crate::queue::Queue;
use crate::result::{self, mapped_pointer, DriverCall};
use crate::sys;

/// How an allocation was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum AllocKind {
    /// `cuMemAlloc`.
    Device,
    /// `cuMemAllocManaged`.
    Managed,
    /// `cuMemHostAlloc`, mapped into the device's address space, or `cuMemAllocHost`.
    PinnedHost,
    /// Host memory the caller owns, page-locked with `cuMemHostRegister` (mapped).
    RegisteredHost,
    /// `cuMemAllocAsync` from the device's default memory pool.
    StreamOrdered,
    /// `cuMemCreate` mapped at a reserved address range.
    Virtual,
}

impl AllocKind {
    /// The memory class the tracker records.
    pub const fn class(self) -> MemoryClass {
        match self {
            Self::Device => MemoryClass::DEVICE_COARSE,
            Self::Managed => MemoryClass::MANAGED,
            Self::PinnedHost | Self::RegisteredHost => MemoryClass::PINNED_HOST,
            // What the tracker's mapping and stream-ordered calls record for device memory
            // this device reads and writes.
            Self::StreamOrdered | Self::Virtual => {
                MemoryClass::VIRTUAL_MAPPING.union(MemoryClass::DEVICE_COARSE)
            }
        }
    }
}

/// Called when an application allocation fails for lack of memory, before the retry.
pub type OomHook = Arc<dyn Fn() + Send + Sync>;

struct Inner {
    device: Arc<Device>,
    agent: AgentId,
    tracker: Arc<Tracker>,
    on_oom: Mutex<Option<OomHook>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaAllocator")
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

/// Allocates device, managed, pinned, pool and virtual memory and reports it to the tracker.
#[derive(Debug, Clone)]
pub struct CudaAllocator {
    inner: Arc<Inner>,
}

/// A device-memory pool the driver gave ([`CudaAllocator::default_pool`]).
#[derive(Debug)]
pub struct MemPool(sys::CUmemoryPool);

// SAFETY: a pool handle is an opaque driver handle, usable from any thread of the process.
unsafe impl Send for MemPool {}
// SAFETY: as above; the driver serialises its own use of the pool.
unsafe impl Sync for MemPool {}

/// What a virtual-memory allocation holds besides its address.
#[derive(Debug)]
struct VmmParts {
    handle: sys::CUmemGenericAllocationHandle,
    size: usize,
}

/// Memory allocated through [`CudaAllocator`]; freed (and the free recorded first) on drop.
#[derive(Debug)]
pub struct Allocation {
    inner: Arc<Inner>,
    ptr: u64,
    bytes: u64,
    kind: AllocKind,
    host: Option<SendPtr>,
    vmm: Option<VmmParts>,
    queue: Option<Arc<Queue>>,
}

impl Allocation {
    /// Device address (for pinned host memory: its device mapping).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Bytes requested.
    pub fn len(&self) -> u64 {
        self.bytes
    }

    /// Whether zero bytes were requested.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// How it was allocated.
    pub fn kind(&self) -> AllocKind {
        self.kind
    }

    /// The host pointer of pinned host memory.
    pub fn host_ptr(&self) -> Option<*mut c_void> {
        self.host.map(|p| p.0)
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        let i = &self.inner;
        // The free (the unmap, the ordered free) is recorded before the memory is released
        // (SPEC §7.1).
        match (self.kind, &self.vmm) {
            (AllocKind::Virtual, Some(v)) => {
                report_unmap(&i.tracker, self.ptr, v.size as u64);
                report_address_free(&i.tracker, self.ptr, v.size as u64);
            }
            (AllocKind::StreamOrdered, _) => {
                report_async_free(&i.tracker, i.agent, self.ptr);
            }
            _ => {
                i.tracker.record_free(i.agent, self.ptr);
            }
        }
        if let Err(e) = i.device.bind() {
            log::warn!("[kernel-replay] freeing {:#x}: {e}", self.ptr);
            return;
        }
        // SAFETY: each branch releases what the matching allocation call returned, once; the
        // owner dropped the allocation, so it no longer uses the memory (for stream-ordered
        // memory the free is ordered on its stream after the owner's work).
        let r = unsafe {
            match self.kind {
                AllocKind::Device | AllocKind::Managed => {
                    result::free_sync(self.ptr).call("cuMemFree")
                }
                AllocKind::PinnedHost => match self.host {
                    Some(h) => result::free_host(h.0).call("cuMemFreeHost"),
                    None => Ok(()),
                },
                AllocKind::RegisteredHost => match self.host {
                    Some(h) => sys::cuMemHostUnregister(h.0).call("cuMemHostUnregister"),
                    None => Ok(()),
                },
                AllocKind::StreamOrdered => {
                    let s = self
                        .queue
                        .as_ref()
                        .map_or(std::ptr::null_mut(), |q| q.raw());
                    result::free_async(self.ptr, s).call("cuMemFreeAsync")
                }
                AllocKind::Virtual => match &self.vmm {
                    Some(v) => sys::cuMemUnmap(self.ptr, v.size)
                        .call("cuMemUnmap")
                        .and(sys::cuMemRelease(v.handle).call("cuMemRelease"))
                        .and(sys::cuMemAddressFree(self.ptr, v.size).call("cuMemAddressFree")),
                    None => Ok(()),
                },
            }
        };
        if let Err(e) = r {
            log::warn!("[kernel-replay] freeing {:#x}: {e}", self.ptr);
        }
    }
}

impl CudaAllocator {
    /// An allocator for `agent` on `device`, reporting to `tracker`.
    pub fn new(device: Arc<Device>, agent: AgentId, tracker: Arc<Tracker>) -> Self {
        Self {
            inner: Arc::new(Inner {
                device,
                agent,
                tracker,
                on_oom: Mutex::new(None),
            }),
        }
    }

    /// Installs the out-of-memory hook.
    pub fn set_oom_hook(&self, hook: Option<OomHook>) {
        *self.inner.on_oom.lock() = hook;
    }

    /// The tracker it reports to.
    pub fn tracker(&self) -> &Arc<Tracker> {
        &self.inner.tracker
    }

    /// Runs `f`, and once more after the out-of-memory hook if it failed for lack of memory.
    fn with_retry<T>(&self, mut f: impl FnMut() -> CudaResult<T>) -> CudaResult<T> {
        match f() {
            Err(e) if e.is_out_of_memory() => {
                let hook = self.inner.on_oom.lock().clone();
                match hook {
                    Some(h) => {
                        log::info!(
                            "[kernel-replay] agent {}: out of memory; releasing pooled backing memory and retrying",
                            self.inner.agent
                        );
                        h();
                        f()
                    }
                    None => Err(e),
                }
            }
            r => r,
        }
    }

    fn track(&self, ptr: u64, bytes: u64, kind: AllocKind) -> Allocation {
        self.inner
            .tracker
            .record_alloc(self.inner.agent, ptr, bytes, kind.class());
        self.untracked(ptr, bytes, kind)
    }

    /// The value owning an allocation whose report the caller made.
    fn untracked(&self, ptr: u64, bytes: u64, kind: AllocKind) -> Allocation {
        Allocation {
            inner: Arc::clone(&self.inner),
            ptr,
            bytes,
            kind,
            host: None,
            vmm: None,
            queue: None,
        }
    }

    /// `cuMemAlloc`: coarse-grained device memory, tracked and captured.
    pub fn alloc_device(&self, bytes: u64) -> CudaResult<Allocation> {
        self.inner.device.bind()?;
        let size = size_of(bytes)?;
        let ptr = self.with_retry(|| {
            // SAFETY: a plain allocation, owned by the returned value.
            unsafe { result::malloc_sync(size) }.call("cuMemAlloc")
        })?;
        Ok(self.track(ptr, bytes, AllocKind::Device))
    }

    /// `cuMemAllocManaged` (attached globally).
    pub fn alloc_managed(&self, bytes: u64) -> CudaResult<Allocation> {
        self.inner.device.bind()?;
        let size = size_of(bytes)?;
        let ptr = self.with_retry(|| {
            // SAFETY: a plain allocation, owned by the returned value.
            unsafe { result::malloc_managed(size, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
                .call("cuMemAllocManaged")
        })?;
        Ok(self.track(ptr, bytes, AllocKind::Managed))
    }

    /// `cuMemHostAlloc`, portable and mapped; the tracker records its device address.
    pub fn alloc_pinned_host(&self, bytes: u64) -> CudaResult<Allocation> {
        self.inner.device.bind()?;
        let size = size_of(bytes)?;
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        let host = self.with_retry(|| {
            // SAFETY: a plain allocation, owned by the returned value.
            unsafe { result::malloc_host(size, flags) }.call("cuMemHostAlloc")
        })?;
        let dptr = mapped_pointer(host);
        let mut a = self.track(dptr, bytes, AllocKind::PinnedHost);
        a.host = Some(SendPtr(host));
        Ok(a)
    }

    /// `cuMemAllocHost`: page-locked host memory, accessible from the device at its host
    /// address (unified addressing); the tracker records its device address.
    pub fn alloc_host(&self, bytes: u64) -> CudaResult<Allocation> {
        self.inner.device.bind()?;
        let size = size_of(bytes)?;
        let mut host: *mut c_void = std::ptr::null_mut();
        self.with_retry(|| {
            // SAFETY: a plain allocation, owned by the returned value; out pointer to a live
            // local.
            unsafe { sys::cuMemAllocHost_v2(&mut host, size) }.call("cuMemAllocHost")
        })?;
        let dptr = mapped_pointer(host);
        let mut a = self.track(dptr, bytes, AllocKind::PinnedHost);
        a.host = Some(SendPtr(host));
        Ok(a)
    }

    /// `cuMemHostRegister` (portable, mapped) of `bytes` bytes of host memory at `host`; the
    /// tracker records its device address. Dropping the value unregisters the memory (the
    /// free is recorded first); the memory itself stays the caller's.
    ///
    /// # Safety
    /// `host` is valid for `bytes` bytes, not registered yet, and outlives the returned value.
    pub unsafe fn register_host(&self, host: *mut c_void, bytes: u64) -> CudaResult<Allocation> {
        self.inner.device.bind()?;
        let size = size_of(bytes)?;
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        self.with_retry(|| {
            // SAFETY: the caller guarantees the range; it is unregistered once, on drop.
            unsafe { sys::cuMemHostRegister_v2(host, size, flags) }.call("cuMemHostRegister")
        })?;
        let dptr = mapped_pointer(host);
        let mut a = self.track(dptr, bytes, AllocKind::RegisteredHost);
        a.host = Some(SendPtr(host));
        Ok(a)
    }

    /// `cuMemAllocAsync` on `queue` from the device's default pool (stream-ordered).
    pub fn alloc_async(&self, bytes: u64, queue: &Arc<Queue>) -> CudaResult<Allocation> {
        self.inner.device.bind()?;
        let size = size_of(bytes)?;
        let ptr = self.with_retry(|| {
            // SAFETY: `queue` is a live stream of this device; the allocation is owned by the
            // returned value and freed on the same stream.
            unsafe { result::malloc_async(queue.raw(), size) }.call("cuMemAllocAsync")
        })?;
        report_async_alloc(&self.inner.tracker, self.inner.agent, ptr, bytes);
        let mut a = self.untracked(ptr, bytes, AllocKind::StreamOrdered);
        a.queue = Some(Arc::clone(queue));
        Ok(a)
    }

    /// The device's default memory pool (`cuDeviceGetDefaultMemPool`), the pool
    /// [`CudaAllocator::alloc_async`] allocates from.
    pub fn default_pool(&self) -> CudaResult<MemPool> {
        let dev = &self.inner.device;
        dev.bind()?;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: out pointer to a live local; the device handle is the open device's.
        unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, dev.raw()) }
            .call("cuDeviceGetDefaultMemPool")?;
        Ok(MemPool(pool))
    }

    /// `cuMemAllocFromPoolAsync` on `queue` from `pool`, a device-memory pool of this device
    /// (stream-ordered; reported and freed as [`CudaAllocator::alloc_async`]).
    pub fn alloc_from_pool_async(
        &self,
        bytes: u64,
        pool: &MemPool,
        queue: &Arc<Queue>,
    ) -> CudaResult<Allocation> {
        self.inner.device.bind()?;
        let size = size_of(bytes)?;
        let ptr = self.with_retry(|| {
            let mut p: sys::CUdeviceptr = 0;
            // SAFETY: `queue` is a live stream of this device and `pool` a pool the driver
            // gave (a device's default pool lives as long as its context); out pointer to a
            // live local. The allocation is owned by the returned value and freed on the same
            // stream.
            unsafe { sys::cuMemAllocFromPoolAsync(&mut p, size, pool.0, queue.raw()) }
                .call("cuMemAllocFromPoolAsync")
                .map(|()| p)
        })?;
        report_async_alloc(&self.inner.tracker, self.inner.agent, ptr, bytes);
        let mut a = self.untracked(ptr, bytes, AllocKind::StreamOrdered);
        a.queue = Some(Arc::clone(queue));
        Ok(a)
    }

    /// A virtual-memory allocation: physical memory from `cuMemCreate`, mapped read-write for
    /// this device at an address range reserved for it. The size is rounded up to the
    /// allocation granularity; the tracker records the requested size.
    pub fn alloc_virtual(&self, bytes: u64) -> CudaResult<Allocation> {
        let dev = &self.inner.device;
        dev.bind()?;
        let location = sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: dev.info().ordinal,
        };
        let prop = sys::CUmemAllocationProp {
            type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            requestedHandleTypes: sys::CUmemAllocationHandleType_enum(0),
            location,
            win32HandleMetaData: std::ptr::null_mut(),
            allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
                compressionType: 0,
                gpuDirectRDMACapable: 0,
                usage: 0,
                reserved: [0; 4],
            },
        };
        let mut gran: usize = 0;
        // SAFETY: `prop` is fully initialised; out pointer to a live local.
        unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut gran,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        }
        .call("cuMemGetAllocationGranularity")?;
        let size = size_of(bytes.max(1))?.next_multiple_of(gran.max(1));
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        self.with_retry(|| {
            // SAFETY: `prop` is initialised; out pointer to a live local.
            unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) }.call("cuMemCreate")
        })?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: reserves an address range for `size` bytes; out pointer to a live local.
        let reserved = unsafe { sys::cuMemAddressReserve(&mut ptr, size, 0, 0, 0) };
        if let Err(e) = reserved.call("cuMemAddressReserve") {
            // SAFETY: `handle` was created above and is not mapped.
            let _ = unsafe { sys::cuMemRelease(handle) };
            return Err(e);
        }
        let access = sys::CUmemAccessDesc {
            location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        let (agent, tracker) = (self.inner.agent, &self.inner.tracker);
        // SAFETY: maps the whole handle at the start of the reserved range, then grants this
        // device read-write access to exactly that range. Each report follows its call's
        // success (SPEC §7.1: a mapping is live from map plus access).
        let mapped = unsafe { sys::cuMemMap(ptr, size, 0, handle, 0) }
            .call("cuMemMap")
            .and_then(|()| {
                report_map(tracker, ptr, size as u64, agent, MemoryClass::DEVICE_COARSE);
                // SAFETY: as above.
                unsafe { sys::cuMemSetAccess(ptr, size, &access, 1) }.call("cuMemSetAccess")
            })
            .map(|()| report_access(tracker, ptr, size as u64, agent, MapAccess::ReadWrite));
        if let Err(e) = mapped {
            report_unmap(tracker, ptr, size as u64);
            report_address_free(tracker, ptr, size as u64);
            // SAFETY: undo in reverse order what succeeded; unmapping an unmapped range only
            // fails, which is ignored.
            unsafe {
                let _ = sys::cuMemUnmap(ptr, size);
                let _ = sys::cuMemRelease(handle);
                let _ = sys::cuMemAddressFree(ptr, size);
            }
            return Err(e);
        }
        let mut a = self.untracked(ptr, bytes, AllocKind::Virtual);
        a.vmm = Some(VmmParts { handle, size });
        Ok(a)
    }

    /// Marks memory the tool owns: never tracked or captured.
    pub fn mark_tool_owned(&self, ptr: u64, bytes: u64) {
        self.inner
            .tracker
            .mark_tool_owned(self.inner.agent, ptr, bytes);
    }
}

// ----- Reports of mappings and stream-ordered allocations (SPEC §7.1 row) -----------------
//
// One function per driver call, for the allocator above and for the interception of
// unmodified applications; each says whether it goes before or after the driver's call.

/// After a successful `cuMemMap` of a handle this process created (`cuMemCreate`) of device
/// memory on `owner`, of `class` (`DEVICE_COARSE`): the mapping is known, without access yet.
/// For a handle from `cuMemImportFromShareableHandle` or a multicast object, call
/// [`Tracker::record_map`] with [`MappedHandle::Imported`] / [`MappedHandle::Multicast`].
pub fn report_map(tracker: &Tracker, ptr: u64, size: u64, owner: AgentId, class: MemoryClass) {
    tracker.record_map(ptr, size, MappedHandle::Local { owner, class });
}

/// `cuMemSetAccess`, once per device of its descriptor list: *before* the call when it lowers
/// that device's access (read-only, none), *after* a successful call when it raises it.
pub fn report_access(tracker: &Tracker, ptr: u64, size: u64, agent: AgentId, access: MapAccess) {
    tracker.record_access(ptr, size, agent, access);
}

/// *Before* `cuMemUnmap`: no restore writes the range from now on.
pub fn report_unmap(tracker: &Tracker, ptr: u64, size: u64) {
    tracker.record_unmap(ptr, size);
}

/// *Before* `cuMemAddressFree`: whatever is still mapped in the range ends.
pub fn report_address_free(tracker: &Tracker, ptr: u64, size: u64) {
    tracker.record_release_reservation(ptr, size);
}

/// After a successful `cuMemAllocAsync` / `cuMemAllocFromPoolAsync` of device memory of
/// `agent`: captured like device memory until its free is ordered.
pub fn report_async_alloc(tracker: &Tracker, agent: AgentId, ptr: u64, size: u64) {
    tracker.record_async_alloc(agent, ptr, size, MemoryClass::DEVICE_COARSE);
}

/// *Before* `cuMemFreeAsync`: the point the free is ordered, not the point the stream
/// reaches it.
pub fn report_async_free(tracker: &Tracker, agent: AgentId, ptr: u64) {
    tracker.record_async_free(agent, ptr);
}

fn size_of(bytes: u64) -> CudaResult<usize> {
    usize::try_from(bytes.max(1))
        .map_err(|_| CudaError::InvalidArgument(format!("{bytes} bytes do not fit a usize")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_memory::{classify, Treatment};

    #[test]
    fn classes_follow_spec_7_1() {
        assert_eq!(classify(AllocKind::Device.class()), Treatment::Captured);
        for k in [
            AllocKind::Managed,
            AllocKind::PinnedHost,
            AllocKind::RegisteredHost,
        ] {
            assert_eq!(classify(k.class()), Treatment::CapturableUntracked, "{k:?}");
        }
        for k in [AllocKind::StreamOrdered, AllocKind::Virtual] {
            assert_eq!(classify(k.class()), Treatment::Captured, "{k:?}");
            assert_eq!(
                replay_memory::classify_under(k.class(), true),
                Treatment::VirtualMapping,
                "{k:?} under decline_on_vmem"
            );
        }
    }
}
