//! The device as the backend's other roles share it: the device with its retained primary
//! context and what the driver says about it, events (pooled per device) and the bounded event
//! wait every wait of the backend uses, and the pointer type for memory the backend owns.
//!
//! Every entry point of the backend first makes the device's context current on the calling
//! thread ([`Device::bind`]): the window runs on whichever thread submitted, and the driver
//! keeps the current context per thread.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{CudaError, CudaResult};
use crate::result::{self, init_driver, DriverCall};
use crate::sys;

/// What the driver says about a device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceInfo {
    /// Ordinal.
    pub ordinal: i32,
    /// Marketing name.
    pub name: String,
    /// Compute capability.
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub multiprocessors: i32,
    /// Total device memory.
    pub total_memory: u64,
    /// L2 cache bytes.
    pub l2_bytes: u64,
    /// `cuDriverGetVersion`.
    pub driver_version: i32,
    /// Whether the device supports the stream-ordered allocator.
    pub memory_pools: bool,
    /// Whether it supports virtual memory management.
    pub virtual_memory: bool,
    /// Whether it supports managed memory.
    pub managed_memory: bool,
}

/// A CUDA device and its retained primary context.
#[derive(Debug)]
pub struct Device {
    dev: sys::CUdevice,
    ctx: Ctx,
    info: DeviceInfo,
    events: EventPool,
}

/// The primary context handle.
#[derive(Debug, Clone, Copy)]
struct Ctx(sys::CUcontext);

// SAFETY: a CUcontext is a driver handle that any thread may make current; the driver API is
// thread-safe for it. We never dereference it.
unsafe impl Send for Ctx {}
// SAFETY: as above; shared use is through driver calls only.
unsafe impl Sync for Ctx {}

impl Device {
    /// Opens device `ordinal`: initialises the driver, retains the primary context (shared with
    /// the CUDA runtime and the application, so their allocations and ours live in one address
    /// space) and makes it current on this thread.
    pub fn open(ordinal: i32) -> CudaResult<Arc<Self>> {
        let count = init_driver()?;
        if ordinal < 0 || ordinal >= count {
            return Err(CudaError::InvalidArgument(format!(
                "device {ordinal} requested; the driver reports {count}"
            )));
        }
        let dev = result::device::get(ordinal).call("cuDeviceGet")?;
        // SAFETY: `dev` came from cuDeviceGet; retain pairs with the release in Drop.
        let ctx = unsafe { result::primary_ctx::retain(dev) }.call("cuDevicePrimaryCtxRetain")?;
        // SAFETY: `ctx` is the primary context just retained.
        unsafe { result::ctx::set_current(ctx) }.call("cuCtxSetCurrent")?;
        let attr = |a: sys::CUdevice_attribute| -> CudaResult<i32> {
            // SAFETY: `dev` is a valid device; attribute queries have no other precondition.
            unsafe { result::device::get_attribute(dev, a) }.call("cuDeviceGetAttribute")
        };
        use sys::CUdevice_attribute as A;
        let name = result::device::get_name(dev).call("cuDeviceGetName")?;
        // SAFETY: `dev` is a valid device.
        let total = unsafe { result::device::total_mem(dev) }.call("cuDeviceTotalMem")? as u64;
        let mut version = 0;
        // SAFETY: out pointer to a live local.
        unsafe { sys::cuDriverGetVersion(&mut version) }.call("cuDriverGetVersion")?;
        let info = DeviceInfo {
            ordinal,
            name,
            compute_capability: (
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            ),
            multiprocessors: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            total_memory: total,
            l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?.max(0) as u64,
            driver_version: version,
            memory_pools: attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)? != 0,
            virtual_memory: attr(A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)? != 0,
            managed_memory: attr(A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)? != 0,
        };
        Ok(Arc::new(Self {
            dev,
            ctx: Ctx(ctx),
            info,
            events: EventPool::default(),
        }))
    }

    /// What the driver reports about the device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The raw device handle.
    pub fn raw(&self) -> sys::CUdevice {
        self.dev
    }

    /// The raw primary context.
    pub fn raw_context(&self) -> sys::CUcontext {
        self.ctx.0
    }

    /// Makes the primary context current on this thread (a no-op when it already is).
    pub fn bind(&self) -> CudaResult<()> {
        match result::ctx::get_current().call("cuCtxGetCurrent")? {
            Some(c) if c == self.ctx.0 => Ok(()),
            // SAFETY: the context is retained for as long as `self` lives.
            _ => unsafe { result::ctx::set_current(self.ctx.0) }.call("cuCtxSetCurrent"),
        }
    }

    /// Free and total device memory now.
    pub fn mem_info(&self) -> CudaResult<(u64, u64)> {
        self.bind()?;
        let (free, total) = result::mem_get_info().call("cuMemGetInfo")?;
        Ok((free as u64, total as u64))
    }

    /// An event from the pool (timing or not); return it with [`Device::recycle_event`].
    pub(crate) fn event(&self, timing: bool) -> CudaResult<Event> {
        if let Some(e) = self.events.take(timing) {
            return Ok(e);
        }
        self.bind()?;
        Event::create(timing)
    }

    /// Returns a completed event to the pool.
    pub(crate) fn recycle_event(&self, e: Event) {
        self.events.give(e);
    }

    /// Synchronises the whole context, unbounded. For tools and benchmarks outside a window
    /// only: the window never calls it (SPEC §6 bounded waits).
    pub fn synchronize(&self) -> CudaResult<()> {
        self.bind()?;
        result::ctx::synchronize().call("cuCtxSynchronize")
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // Pooled events belong to the context: destroy them while it is still retained.
        if self.bind().is_ok() {
            self.events.clear();
        }
        // SAFETY: pairs with the retain in `open`; nothing of ours uses the context after this
        // (every owner of device objects holds an `Arc<Device>`).
        if let Err(e) = unsafe { result::primary_ctx::release(self.dev) } {
            log::warn!("[kernel-replay] cuDevicePrimaryCtxRelease: {e}");
        }
    }
}

/// An owned event.
#[derive(Debug)]
pub(crate) struct Event {
    raw: sys::CUevent,
    timing: bool,
}

// SAFETY: a CUevent is a driver handle usable from any thread; we only pass it to driver calls.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// Creates an event; without timing it is cheaper to record and query.
    pub fn create(timing: bool) -> CudaResult<Self> {
        let flags = if timing {
            sys::CUevent_flags::CU_EVENT_DEFAULT
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        let raw = result::event::create(flags).call("cuEventCreate")?;
        Ok(Self { raw, timing })
    }

    /// Records the event on `stream` (a raw handle; null is the legacy default stream).
    pub fn record(&self, stream: sys::CUstream) -> CudaResult<()> {
        // SAFETY: the event is alive; `stream` is a stream of the current context or null,
        // which the caller guarantees by binding the device first.
        unsafe { result::event::record(self.raw, stream) }.call("cuEventRecord")
    }

    /// The driver handle (for `cuStreamWaitEvent`, which orders a stream after it).
    pub(crate) fn raw(&self) -> sys::CUevent {
        self.raw
    }

    /// `true` once everything recorded before the event completed.
    pub fn query(&self) -> CudaResult<bool> {
        // SAFETY: the event is alive.
        match unsafe { result::event::query(self.raw) } {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(CudaError::driver("cuEventQuery", e)),
        }
    }

    /// Milliseconds between two completed timing events.
    pub fn elapsed_ms(start: &Event, end: &Event) -> CudaResult<f32> {
        if !(start.timing && end.timing) {
            return Err(CudaError::InvalidArgument(
                "elapsed time needs timing events".into(),
            ));
        }
        // SAFETY: both events are alive, completed (the caller polled `end`), and were created
        // with timing enabled.
        unsafe { result::event::elapsed(start.raw, end.raw) }.call("cuEventElapsedTime")
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: destroyed once. The driver allows destroying an event that has not completed
        // yet: it releases it when the work completes (that is how abandoned waits let go).
        if let Err(e) = unsafe { result::event::destroy(self.raw) } {
            log::debug!("[kernel-replay] cuEventDestroy: {e}");
        }
    }
}

/// Completed events kept for reuse, per kind.
#[derive(Debug, Default)]
struct EventPool {
    timing: Mutex<Vec<Event>>,
    plain: Mutex<Vec<Event>>,
}

impl EventPool {
    const KEEP: usize = 64;

    fn take(&self, timing: bool) -> Option<Event> {
        if timing {
            self.timing.lock().pop()
        } else {
            self.plain.lock().pop()
        }
    }

    fn give(&self, e: Event) {
        let pool = if e.timing { &self.timing } else { &self.plain };
        let mut p = pool.lock();
        if p.len() < Self::KEEP {
            p.push(e);
        }
    }

    fn clear(&self) {
        self.timing.lock().clear();
        self.plain.lock().clear();
    }
}

/// Waits at most `budget` for every event; `true` once all completed.
///
/// Spins on `cuEventQuery` for the first 200 µs (a pass of a small kernel or a small restore
/// completes within tens of microseconds, and a sleep would dominate it), then yields the CPU
/// between queries until 20 ms into the wait (so a copy of a few gigabytes is seen done within
/// microseconds, which the throughput measurements rely on), then sleeps 100 µs between
/// queries. The driver's own synchronise calls have no timeout, so they are never used.
pub(crate) fn wait_events(events: &[&Event], budget: Duration) -> CudaResult<bool> {
    let start = Instant::now();
    let mut next = 0;
    loop {
        while next < events.len() && events[next].query()? {
            next += 1;
        }
        if next == events.len() {
            return Ok(true);
        }
        if !back_off(start, budget) {
            return Ok(false);
        }
    }
}

/// One step between two polls of a wait begun at `start`: spin, then yield, then sleep
/// briefly, so a long wait does not hold a core; `false` once `budget` is spent.
pub(crate) fn back_off(start: Instant, budget: Duration) -> bool {
    const SPIN: Duration = Duration::from_micros(200);
    const YIELD: Duration = Duration::from_millis(20);
    const SLEEP: Duration = Duration::from_micros(100);
    let elapsed = start.elapsed();
    if elapsed >= budget {
        return false;
    }
    if elapsed < SPIN {
        std::hint::spin_loop();
    } else if elapsed < YIELD {
        std::thread::yield_now();
    } else {
        std::thread::sleep(SLEEP.min(budget - elapsed));
    }
    true
}

/// A raw pointer that may cross threads (driver-owned or pinned memory the backend manages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendPtr(pub *mut c_void);

// SAFETY: the pointee is page-locked host memory owned by the backend, accessed only through
// driver copies and by the owner under its mutex.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}
