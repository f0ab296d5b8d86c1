//! Context life under interception (SPEC §9.2): what a primary-context reset, a context's
//! destruction and the contexts other than the primary one mean for what the library
//! remembers.
//!
//! The hooks are `state`'s (`hook_primary_ctx_reset`, `hook_ctx_destroy`, and the allocation
//! hooks); this module keeps the counts and the answers about contexts.
//!
//! - **`cuDevicePrimaryCtxReset`** (what `cudaDeviceReset` calls) destroys every allocation,
//!   stream and module of the device's primary context. Before the driver's call the
//!   device's backend is closed (a later launch opens a new one), every region the tracker
//!   holds for the device is forgotten (waiting, bounded, for a restore in flight over it, as
//!   a free does), every stream seen on that context is forgotten, and every code image
//!   whose globals were resolved there, and every module (its context is not known), is
//!   forgotten with its functions' layouts and the service's per-kernel memos; a later
//!   launch of a forgotten image's kernel declines (image unknown) rather than trust globals
//!   that died.
//! - **`cuCtxDestroy`** of a device's primary context is handled as a reset; of another
//!   context it is counted (nothing of it was remembered: see below).
//! - **Other contexts.** A launch while a context other than its device's primary one is
//!   current runs once, untouched, under the device's write gate (so it never lands inside
//!   a window's passes), counted `other_context`. An allocation made while such a context is
//!   current is not recorded as the primary context's memory, counted
//!   `other_context_allocs`: a launch in the primary context with a pointer into it is asked
//!   of the driver and declines. Whether a context is primary is the open backend's answer,
//!   else the driver's (`cuDevicePrimaryCtxGetState`, and the active primary context's
//!   handle), remembered per context handle until it is destroyed.
//! - **Stream capture.** `cuMemAllocAsync` / `cuMemAllocFromPoolAsync` into a capturing stream
//!   adds an allocation node to the graph: the memory exists only while the graph runs, so it
//!   is not recorded as live memory (counted `alloc_async_captured`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUcontext, CUresult, CUstream};
use parking_lot::Mutex;
use serde::Serialize;

/// Counts of what this module saw.
#[derive(Debug, Default, Serialize)]
pub struct ContextCounters {
    /// Primary-context resets (and destroys of a primary context) handled.
    pub primary_resets: AtomicU64,
    /// `cuCtxDestroy` of a context other than a primary one.
    pub contexts_destroyed: AtomicU64,
    /// Allocations made while another context was current (not recorded).
    pub other_context_allocs: AtomicU64,
    /// Stream-ordered allocations into a capturing stream (not recorded).
    pub alloc_async_captured: AtomicU64,
    /// Regions forgotten by resets.
    pub reset_regions_forgotten: AtomicU64,
}

fn counters() -> &'static ContextCounters {
    static C: OnceLock<ContextCounters> = OnceLock::new();
    C.get_or_init(ContextCounters::default)
}

/// The counts as JSON.
pub fn counters_json() -> serde_json::Value {
    serde_json::to_value(counters()).unwrap_or_default()
}

/// Contexts already asked whether they are their device's primary context, by handle
/// (forgotten when a context is destroyed or a device reset, as handles may be reused).
fn primaries() -> &'static Mutex<HashMap<usize, bool>> {
    static P: OnceLock<Mutex<HashMap<usize, bool>>> = OnceLock::new();
    P.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Whether `ctx` is device `d`'s primary context: `open` (the primary context of the device's
/// open backend) when given, else the driver's answer (an inactive primary context is not
/// `ctx`; an active one is retained and released at once to compare its handle, which
/// creates nothing).
pub(crate) fn is_primary(ctx: CUcontext, d: i32, open: Option<CUcontext>) -> bool {
    if let Some(&p) = primaries().lock().get(&(ctx as usize)) {
        return p;
    }
    let p = match open {
        Some(primary) => primary == ctx,
        None => {
            let (mut flags, mut active) = (0u32, 0i32);
            // SAFETY: a device ordinal the driver gave; out pointers to live locals.
            let r = unsafe { sys::cuDevicePrimaryCtxGetState(d, &mut flags, &mut active) };
            if r != CUresult::CUDA_SUCCESS {
                // Unknown: treated as the primary context, as before any of this.
                return true;
            }
            if active == 0 {
                false
            } else {
                let mut primary: CUcontext = std::ptr::null_mut();
                // SAFETY: as above; the primary context is active, so retaining it creates
                // nothing, and it is released at once.
                unsafe {
                    if sys::cuDevicePrimaryCtxRetain(&mut primary, d) != CUresult::CUDA_SUCCESS {
                        return true;
                    }
                    let _ = sys::cuDevicePrimaryCtxRelease_v2(d);
                }
                primary == ctx
            }
        }
    };
    primaries().lock().insert(ctx as usize, p);
    p
}

/// Counts an allocation not recorded because another context was current.
pub(crate) fn count_other_context_alloc() {
    counters()
        .other_context_allocs
        .fetch_add(1, Ordering::Relaxed);
}

/// Whether a stream-ordered allocation into `s` is a graph node (counted); true when so.
pub(crate) fn skip_captured_alloc(s: CUstream) -> bool {
    let captured = crate::queue::capture_status(s).is_ok_and(|c| c.is_live());
    if captured {
        counters()
            .alloc_async_captured
            .fetch_add(1, Ordering::Relaxed);
    }
    captured
}

/// Before a reset of a primary context: every context's answer is asked again (handles may
/// be reused), and the reset and the regions it forgot are counted.
pub(crate) fn note_reset(regions_forgotten: u64) {
    primaries().lock().clear();
    let c = counters();
    c.primary_resets.fetch_add(1, Ordering::Relaxed);
    c.reset_regions_forgotten
        .fetch_add(regions_forgotten, Ordering::Relaxed);
}

/// Before `cuCtxDestroy` of `ctx`: its answer is forgotten, and a context other than a
/// primary one (`primary` false) is counted.
pub(crate) fn note_destroy(ctx: CUcontext, primary: bool) {
    primaries().lock().remove(&(ctx as usize));
    if !primary {
        counters()
            .contexts_destroyed
            .fetch_add(1, Ordering::Relaxed);
    }
}
