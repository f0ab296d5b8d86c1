//! Writes the snapshot cannot see (SPEC §9.2): what the interception detects, so such a
//! launch declines `unseen_writes` instead of replaying, and what it cannot.
//!
//! - **CUDA arrays through surface objects.** An array's memory is not linear device memory
//!   the tracker can capture. `cuArrayCreate`, `cuArray3DCreate`, `cuMipmappedArrayCreate`
//!   and their destroys are counted, and `cuMipmappedArrayGetLevel` remembers each level's
//!   array as part of its mipmapped array (a surface object over a level names both);
//!   `cuSurfObjectCreate` remembers each live surface object
//!   (until `cuSurfObjectDestroy`). A launch whose argument block holds a live surface-object
//!   handle as an 8-byte word declines; so does a launch of unknown layout while any surface
//!   object is live (its block cannot be read). Handles are small integers, so an unrelated
//!   argument equal to one declines too: declining is the safe side. Texture objects are
//!   read-only and are not looked for.
//! - **Device-side services** ([`crate::module::services`]): a kernel of an image whose code
//!   calls the device heap, device `printf` or a device-side graph launch declines.
//! - **Tensor maps (TMA descriptors).** `cuTensorMapEncodeTiled`, `cuTensorMapEncodeIm2col`
//!   and `cuTensorMapEncodeIm2colWide` remember each encoded map's 128 bytes with its global address
//!   and extent; `cuTensorMapReplaceAddress` moves a remembered map. A launch whose block
//!   carries a remembered map (passed by value, `__grid_constant__`) has the map's address
//!   added to the words the scope reads, so scope `arguments` captures the region it targets,
//!   and declines when the planned snapshot still does not cover the map's whole extent
//!   (memory nobody tracks, or a span across regions).
//!
//! Not detected (the crate docs and README list them): a surface object, tensor map or array
//! reached through device memory rather than the argument block; surface references
//! (`cuSurfRefSetArray`, gone from CUDA 12); a tensor map written on the device
//! (`tensormap.replace`, Triton's on-device descriptors) or copied into device memory; HMM pageable memory (system-allocated memory a kernel
//! reaches through a plain pointer on a system with HMM or ATS: no driver entry allocates it,
//! so an argument into it is asked of the driver, which answers "not device memory", and the
//! kernel's writes there are neither captured nor restored).

use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use cudarc::driver::sys::CUresult;
use parking_lot::Mutex;
use replay_core::{
    BackendError, Dispatch, Policy, Scope, Snapshot, SnapshotError, SnapshotPlan, Snapshotter,
    WaitSpec,
};
use serde::Serialize;

use super::images::{self, LaunchImage};

/// Counts of what this module saw and decided.
#[derive(Debug, Default, Serialize)]
pub struct UnseenCounters {
    /// `cuArrayCreate`, `cuArray3DCreate`, `cuMipmappedArrayCreate` calls that succeeded.
    pub arrays_created: AtomicU64,
    /// `cuMipmappedArrayGetLevel` calls that succeeded (a level's array, known as part of
    /// its mipmapped array).
    pub mipmap_levels: AtomicU64,
    /// `cuSurfObjectCreate` calls that succeeded.
    pub surfaces_created: AtomicU64,
    /// Tensor maps encoded (or moved) through the wrapped entries.
    pub tensor_maps_encoded: AtomicU64,
    /// Launches declined: a live surface object among their argument words (or their layout
    /// unknown while one is live).
    pub declined_surface: AtomicU64,
    /// Launches declined: their image calls a device-side service.
    pub declined_device_service: AtomicU64,
    /// Launches declined: a tensor map whose target the snapshot does not cover.
    pub declined_tensor_map: AtomicU64,
    /// Launches whose block carried a remembered tensor map (its target added to the scope).
    pub tensor_map_launches: AtomicU64,
}

/// A remembered tensor map's target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Target {
    base: u64,
    extent: u64,
}

/// Remembered maps with the same first word: each map's 128 bytes and its target.
type MapsByFirstWord = HashMap<u64, Vec<([u8; 128], Target)>>;

#[derive(Default)]
struct Unseen {
    /// Live surface objects, with the array each was made over (0: not an array).
    surfaces: Mutex<HashMap<u64, u64>>,
    /// Level arrays (`cuMipmappedArrayGetLevel`), with their mipmapped array and level, until
    /// that mipmapped array is destroyed.
    levels: Mutex<HashMap<u64, (u64, u32)>>,
    live_surfaces: AtomicUsize,
    /// Encoded maps by their first word, then their whole 128 bytes.
    maps: Mutex<MapsByFirstWord>,
    live_maps: AtomicUsize,
    counters: UnseenCounters,
}

fn unseen() -> &'static Unseen {
    static U: OnceLock<Unseen> = OnceLock::new();
    U.get_or_init(Unseen::default)
}

/// The counts as JSON.
pub fn counters_json() -> serde_json::Value {
    serde_json::to_value(&unseen().counters).unwrap_or_default()
}

/// What a launch's check found: why it declines, or the tensor-map targets the scope must
/// cover.
#[derive(Debug, Default)]
pub(crate) struct Check {
    why: Option<String>,
    targets: Vec<Target>,
}

impl Check {
    /// The addresses of the tensor-map targets, one 8-byte word each, for the block the
    /// scope reads.
    pub(crate) fn target_words(&self) -> impl Iterator<Item = [u8; 8]> + '_ {
        self.targets.iter().map(|t| t.base.to_le_bytes())
    }

    /// Both launches' findings, as one (a whole graph under one window): the first reason to
    /// decline, every target.
    pub(crate) fn merge(mut self, other: Check) -> Check {
        self.why = self.why.or(other.why);
        self.targets.extend(other.targets);
        self
    }
}

fn words(kernarg: &[u8]) -> impl Iterator<Item = (usize, u64)> + '_ {
    kernarg
        .chunks_exact(8)
        .enumerate()
        .map(|(i, w)| (i * 8, u64::from_le_bytes(w.try_into().unwrap_or([0; 8]))))
}

/// Checks one launch of `kernel` (of `image`) with argument block `kernarg` (`known`: the
/// block is the real one, not a stand-in for an unknown layout).
pub(crate) fn check(kernarg: &[u8], known: bool, image: &LaunchImage, kernel: &str) -> Check {
    let u = unseen();
    let c = &u.counters;
    if let Some((name, services)) = images::image_services(image) {
        c.declined_device_service.fetch_add(1, Ordering::Relaxed);
        let what: Vec<&str> = services.iter().map(|s| s.why()).collect();
        return Check {
            why: Some(format!(
                "kernel {kernel}: its image {name} {}",
                what.join("; and ")
            )),
            targets: Vec::new(),
        };
    }
    if u.live_surfaces.load(Ordering::Acquire) > 0 {
        let s = u.surfaces.lock();
        let why = if !known && !s.is_empty() {
            Some(format!(
                "kernel {kernel}: its argument block is unknown while {} surface object(s) are \
                 live, and a CUDA array written through one is not seen by any snapshot",
                s.len()
            ))
        } else {
            words(kernarg).find_map(|(_, w)| {
                s.get(&w).map(|&array| {
                    let over = match mipmap_level(array) {
                        Some((m, l)) => {
                            format!("CUDA array {array:#x}, level {l} of mipmapped array {m:#x}")
                        }
                        None => format!("CUDA array {array:#x}"),
                    };
                    format!(
                        "kernel {kernel}: argument word {w:#x} is a live surface object (over \
                         {over}); writes through it are not seen by any snapshot"
                    )
                })
            })
        };
        if why.is_some() {
            c.declined_surface.fetch_add(1, Ordering::Relaxed);
            return Check {
                why,
                targets: Vec::new(),
            };
        }
    }
    let mut targets = Vec::new();
    if known && u.live_maps.load(Ordering::Acquire) > 0 && kernarg.len() >= 128 {
        let m = u.maps.lock();
        for (at, w) in words(kernarg) {
            let Some(cands) = m.get(&w) else { continue };
            let Some(bytes) = kernarg.get(at..at + 128) else {
                continue;
            };
            if let Some((_, t)) = cands.iter().find(|(b, _)| b.as_slice() == bytes) {
                if !targets.contains(t) {
                    targets.push(*t);
                }
            }
        }
        if !targets.is_empty() {
            c.tensor_map_launches.fetch_add(1, Ordering::Relaxed);
        }
    }
    Check { why: None, targets }
}

/// The memory layer of a launch with what [`check`] found: a reason to decline goes into the
/// plan (`unseen_writes`), and a tensor-map target the planned regions do not cover whole
/// declines too.
pub(crate) struct UnseenGate<'a> {
    inner: &'a dyn Snapshotter,
    check: Check,
}

impl<'a> UnseenGate<'a> {
    /// `inner` planning for a launch [`check`]ed as `check`.
    pub(crate) fn new(inner: &'a dyn Snapshotter, check: Check) -> Self {
        Self { inner, check }
    }
}

/// Whether `[base, base + extent)` lies within the union of `regions`.
fn covered(plan: &SnapshotPlan, t: Target) -> bool {
    let mut spans: Vec<(u64, u64)> = plan
        .regions
        .iter()
        .map(|r| (r.base, r.base.saturating_add(r.size)))
        .collect();
    spans.sort_unstable();
    let (mut at, end) = (t.base, t.base.saturating_add(t.extent));
    for (b, e) in spans {
        if b <= at && at < e {
            at = e;
        }
        if at >= end {
            return true;
        }
    }
    at >= end
}

impl Snapshotter for UnseenGate<'_> {
    fn plan(
        &self,
        dispatch: &Dispatch,
        scope: Scope,
        policy: &Policy,
    ) -> Result<SnapshotPlan, BackendError> {
        let mut plan = self.inner.plan(dispatch, scope, policy)?;
        if let Some(why) = &self.check.why {
            plan.unseen_writes = Some(why.clone());
            return Ok(plan);
        }
        if let Some(t) = self.check.targets.iter().find(|t| !covered(&plan, **t)) {
            unseen()
                .counters
                .declined_tensor_map
                .fetch_add(1, Ordering::Relaxed);
            plan.unseen_writes = Some(format!(
                "kernel {}: a tensor map targets [{:#x}, +{:#x}), which the snapshot does not \
                 cover",
                dispatch.info.kernel_name, t.base, t.extent
            ));
        }
        Ok(plan)
    }

    fn capture(
        &self,
        plan: &SnapshotPlan,
        policy: &Policy,
        wait: &WaitSpec<'_>,
    ) -> Result<Box<dyn Snapshot>, SnapshotError> {
        self.inner.capture(plan, policy, wait)
    }

    fn pooled_peak_bytes(&self) -> u64 {
        self.inner.pooled_peak_bytes()
    }

    // A capture's reads (SPEC §13) go to the memory layer under the gate.
    fn read_to_host(&self, addr: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.inner.read_to_host(addr, out)
    }

    // A tool's `sync_memory()` in PASS ENTER waits for the memory layer's ordered restores.
    fn sync_ordered(&self, wait: &WaitSpec<'_>) -> Result<(), BackendError> {
        self.inner.sync_ordered(wait)
    }
}

// ----- Arrays and surface objects --------------------------------------------------------

/// Hook of `cuArrayCreate_v2` and `cuArray3DCreate_v2`: counted.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_array_create(
    real: unsafe extern "C" fn(*mut u64, *const c_void) -> CUresult,
    reached: &mut bool,
    a: *mut u64,
    desc: *const c_void,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(a, desc) };
    if r == CUresult::CUDA_SUCCESS {
        unseen()
            .counters
            .arrays_created
            .fetch_add(1, Ordering::Relaxed);
    }
    r
}

/// Hook of `cuMipmappedArrayCreate`: counted.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mipmapped_array_create(
    real: unsafe extern "C" fn(*mut u64, *const c_void, c_uint) -> CUresult,
    reached: &mut bool,
    a: *mut u64,
    desc: *const c_void,
    levels: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(a, desc, levels) };
    if r == CUresult::CUDA_SUCCESS {
        unseen()
            .counters
            .arrays_created
            .fetch_add(1, Ordering::Relaxed);
    }
    r
}

/// The mipmapped array and level the array `array` is (from `cuMipmappedArrayGetLevel`),
/// while that mipmapped array lives; `None` for any other array.
pub fn mipmap_level(array: u64) -> Option<(u64, u32)> {
    unseen().levels.lock().get(&array).copied()
}

/// Hook of `cuMipmappedArrayGetLevel`: the level's array is remembered as part of its
/// mipmapped array (a surface object over it is one over the mipmapped array's memory), until
/// the mipmapped array is destroyed.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mipmapped_array_get_level(
    real: unsafe extern "C" fn(*mut u64, u64, c_uint) -> CUresult,
    reached: &mut bool,
    level_array: *mut u64,
    mipmapped: u64,
    level: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(level_array, mipmapped, level) };
    if r == CUresult::CUDA_SUCCESS && !level_array.is_null() {
        // SAFETY: the call succeeded, so the driver wrote the level's array there.
        let array = unsafe { *level_array };
        let u = unseen();
        u.levels.lock().insert(array, (mipmapped, level));
        u.counters.mipmap_levels.fetch_add(1, Ordering::Relaxed);
    }
    r
}

/// Hook of `cuMipmappedArrayDestroy`: its level arrays are forgotten once it is destroyed
/// (the driver may give their handles to later arrays); see [`hook_array_destroy`].
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_mipmapped_array_destroy(
    real: unsafe extern "C" fn(u64) -> CUresult,
    reached: &mut bool,
    a: u64,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(a) };
    if r == CUresult::CUDA_SUCCESS {
        unseen().levels.lock().retain(|_, (m, _)| *m != a);
    }
    r
}

/// Hook of `cuArrayDestroy` (and, through [`hook_mipmapped_array_destroy`],
/// `cuMipmappedArrayDestroy`): forwarded (a surface object over a destroyed array stays
/// remembered until it is destroyed itself: declining is the safe side).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_array_destroy(
    real: unsafe extern "C" fn(u64) -> CUresult,
    reached: &mut bool,
    a: u64,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(a) }
}

/// `CU_RESOURCE_TYPE_ARRAY` and `CU_RESOURCE_TYPE_MIPMAPPED_ARRAY`.
const RESOURCE_ARRAY: u32 = 0;
const RESOURCE_MIPMAPPED_ARRAY: u32 = 1;

/// Hook of `cuSurfObjectCreate`: the surface object is remembered once created.
///
/// # Safety
/// The entry's contract: `desc` points to a `CUDA_RESOURCE_DESC` (its type, then at offset 8
/// the array handle for an array resource).
pub(crate) unsafe fn hook_surf_object_create(
    real: unsafe extern "C" fn(*mut u64, *const c_void) -> CUresult,
    reached: &mut bool,
    s: *mut u64,
    desc: *const c_void,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(s, desc) };
    if r == CUresult::CUDA_SUCCESS && !s.is_null() {
        let array = if desc.is_null() {
            0
        } else {
            // SAFETY: the call succeeded, so `desc` is a valid resource descriptor: a 4-byte
            // type, then (8-aligned) the resource union, whose array member is one handle.
            unsafe {
                match *desc.cast::<u32>() {
                    RESOURCE_ARRAY | RESOURCE_MIPMAPPED_ARRAY => {
                        *desc.cast::<u8>().add(8).cast::<u64>()
                    }
                    _ => 0,
                }
            }
        };
        let u = unseen();
        // SAFETY: the driver wrote the handle.
        let h = unsafe { *s };
        let mut m = u.surfaces.lock();
        m.insert(h, array);
        u.live_surfaces.store(m.len(), Ordering::Release);
        u.counters.surfaces_created.fetch_add(1, Ordering::Relaxed);
    }
    r
}

/// Hook of `cuSurfObjectDestroy`: forgotten before the driver destroys it (a later launch
/// with the same word is no longer a surface's).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_surf_object_destroy(
    real: unsafe extern "C" fn(u64) -> CUresult,
    reached: &mut bool,
    s: u64,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(s) };
    if r == CUresult::CUDA_SUCCESS {
        let u = unseen();
        let mut m = u.surfaces.lock();
        m.remove(&s);
        u.live_surfaces.store(m.len(), Ordering::Release);
    }
    r
}

// ----- Tensor maps -----------------------------------------------------------------------

/// Bytes per element of a `CUtensorMapDataType` (sub-byte and unknown types: an upper bound,
/// so an extent is never short).
fn element_bytes(dtype: c_uint) -> u64 {
    match dtype {
        0 => 1,                   // UINT8
        1 | 6 | 9 => 2,           // UINT16, FLOAT16, BFLOAT16
        2 | 3 | 7 | 10..=12 => 4, // UINT32, INT32, FLOAT32, FLOAT32_FTZ, TFLOAT32(_FTZ)
        4 | 5 | 8 => 8,           // UINT64, INT64, FLOAT64
        _ => 16,
    }
}

/// The bytes a map of `rank` dimensions reaches from its address: the last element's end.
///
/// # Safety
/// `dims` holds `rank` sizes and `strides` `rank - 1` byte strides (the encode entries'
/// contract), or either is null.
unsafe fn extent(dtype: c_uint, rank: c_uint, dims: *const u64, strides: *const u64) -> u64 {
    let elem = element_bytes(dtype);
    if dims.is_null() || rank == 0 || rank > 5 {
        return elem;
    }
    // SAFETY: the caller's contract.
    let dims = unsafe { std::slice::from_raw_parts(dims, rank as usize) };
    let mut last = dims[0].saturating_sub(1).saturating_mul(elem);
    if !strides.is_null() && rank > 1 {
        // SAFETY: the caller's contract.
        let strides = unsafe { std::slice::from_raw_parts(strides, rank as usize - 1) };
        for (d, s) in dims[1..].iter().zip(strides) {
            last = last.saturating_add(d.saturating_sub(1).saturating_mul(*s));
        }
    }
    last.saturating_add(elem)
}

/// After a `cuTensorMapEncode*` call: a map the driver wrote is remembered as targeting
/// `[addr, +extent)` of its dimensions and strides.
///
/// # Safety
/// The encode entry's arguments as given, `r` its result: on success `dims`/`strides` are as
/// the entry requires and the driver wrote the 128-byte map at `m`.
unsafe fn encoded(
    r: CUresult,
    m: *mut c_void,
    dtype: c_uint,
    rank: c_uint,
    addr: *mut c_void,
    dims: *const u64,
    strides: *const u64,
) {
    if r != CUresult::CUDA_SUCCESS || m.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    unsafe {
        let extent = extent(dtype, rank, dims, strides);
        remember_map(
            m,
            Target {
                base: addr as u64,
                extent,
            },
        );
    }
}

/// Remembers the map at `m` (just written by the driver) as targeting `t`.
///
/// # Safety
/// `m` points to 128 readable bytes.
unsafe fn remember_map(m: *const c_void, t: Target) {
    let mut bytes = [0u8; 128];
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(m.cast::<u8>(), bytes.as_mut_ptr(), 128) };
    let first = u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8]));
    let u = unseen();
    let mut maps = u.maps.lock();
    let e = maps.entry(first).or_default();
    match e.iter_mut().find(|(b, _)| *b == bytes) {
        Some(slot) => slot.1 = t,
        None => e.push((bytes, t)),
    }
    let n: usize = maps.values().map(Vec::len).sum();
    u.live_maps.store(n, Ordering::Release);
    u.counters
        .tensor_maps_encoded
        .fetch_add(1, Ordering::Relaxed);
}

/// The target remembered for the map at `m`, if any.
///
/// # Safety
/// `m` points to 128 readable bytes.
unsafe fn remembered(m: *const c_void) -> Option<Target> {
    let mut bytes = [0u8; 128];
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(m.cast::<u8>(), bytes.as_mut_ptr(), 128) };
    let first = u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8]));
    let maps = unseen().maps.lock();
    maps.get(&first)?
        .iter()
        .find(|(b, _)| *b == bytes)
        .map(|(_, t)| *t)
}

/// Hook of `cuTensorMapEncodeTiled`: the map is remembered with its target once encoded.
///
/// # Safety
/// The entry's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn hook_tensor_map_tiled(
    real: unsafe extern "C" fn(
        *mut c_void,
        c_uint,
        c_uint,
        *mut c_void,
        *const u64,
        *const u64,
        *const u32,
        *const u32,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
    ) -> CUresult,
    reached: &mut bool,
    m: *mut c_void,
    dtype: c_uint,
    rank: c_uint,
    addr: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    boxd: *const u32,
    estr: *const u32,
    il: c_uint,
    sw: c_uint,
    l2: c_uint,
    oob: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe {
        real(
            m, dtype, rank, addr, dims, strides, boxd, estr, il, sw, l2, oob,
        )
    };
    // SAFETY: the encode entry's own arguments, after its call.
    unsafe { encoded(r, m, dtype, rank, addr, dims, strides) };
    r
}

/// Hook of `cuTensorMapEncodeIm2col`: as [`hook_tensor_map_tiled`].
///
/// # Safety
/// The entry's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn hook_tensor_map_im2col(
    real: unsafe extern "C" fn(
        *mut c_void,
        c_uint,
        c_uint,
        *mut c_void,
        *const u64,
        *const u64,
        *const c_int,
        *const c_int,
        c_uint,
        c_uint,
        *const u32,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
    ) -> CUresult,
    reached: &mut bool,
    m: *mut c_void,
    dtype: c_uint,
    rank: c_uint,
    addr: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    lower: *const c_int,
    upper: *const c_int,
    cpp: c_uint,
    ppc: c_uint,
    estr: *const u32,
    il: c_uint,
    sw: c_uint,
    l2: c_uint,
    oob: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe {
        real(
            m, dtype, rank, addr, dims, strides, lower, upper, cpp, ppc, estr, il, sw, l2, oob,
        )
    };
    // SAFETY: the encode entry's own arguments, after its call.
    unsafe { encoded(r, m, dtype, rank, addr, dims, strides) };
    r
}

/// Hook of `cuTensorMapEncodeIm2colWide` (CUDA 12.8): as [`hook_tensor_map_tiled`].
///
/// # Safety
/// The entry's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn hook_tensor_map_im2col_wide(
    real: unsafe extern "C" fn(
        *mut c_void,
        c_uint,
        c_uint,
        *mut c_void,
        *const u64,
        *const u64,
        c_int,
        c_int,
        c_uint,
        c_uint,
        *const u32,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
    ) -> CUresult,
    reached: &mut bool,
    m: *mut c_void,
    dtype: c_uint,
    rank: c_uint,
    addr: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    lower: c_int,
    upper: c_int,
    cpp: c_uint,
    ppc: c_uint,
    estr: *const u32,
    il: c_uint,
    mode: c_uint,
    sw: c_uint,
    l2: c_uint,
    oob: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe {
        real(
            m, dtype, rank, addr, dims, strides, lower, upper, cpp, ppc, estr, il, mode, sw, l2,
            oob,
        )
    };
    // SAFETY: the encode entry's own arguments, after its call.
    unsafe { encoded(r, m, dtype, rank, addr, dims, strides) };
    r
}

/// Hook of `cuTensorMapReplaceAddress`: a remembered map keeps its extent at its new address
/// (an unknown one stays unknown).
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_tensor_map_replace_address(
    real: unsafe extern "C" fn(*mut c_void, *mut c_void) -> CUresult,
    reached: &mut bool,
    m: *mut c_void,
    addr: *mut c_void,
) -> CUresult {
    // SAFETY: the entry's contract: `m` is a 128-byte map.
    let before = (!m.is_null()).then(|| unsafe { remembered(m) }).flatten();
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(m, addr) };
    if let (CUresult::CUDA_SUCCESS, Some(t)) = (r, before) {
        // SAFETY: the driver rewrote the map at `m`.
        unsafe {
            remember_map(
                m,
                Target {
                    base: addr as u64,
                    extent: t.extent,
                },
            )
        };
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_core::SystemClock;
    use replay_mock::instant::InstantSnapshotter;
    use std::time::Duration;

    #[test]
    fn the_gate_forwards_a_tools_wait_for_ordered_restores() {
        let clock = SystemClock::new();
        let wait = WaitSpec {
            clock: &clock,
            timeout: Duration::from_millis(10),
            slice: Duration::from_millis(1),
            progress: Duration::from_secs(1),
        };
        let failing = InstantSnapshotter {
            sync_fails: true,
            ..InstantSnapshotter::default()
        };
        assert!(UnseenGate::new(&failing, Check::default())
            .sync_ordered(&wait)
            .is_err());
        let fine = InstantSnapshotter::default();
        assert!(UnseenGate::new(&fine, Check::default())
            .sync_ordered(&wait)
            .is_ok());
    }
}
