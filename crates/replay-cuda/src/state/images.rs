//! The application's code images under interception (SPEC §9.2 "Unmodified applications":
//! code): the hooks of `cuModuleLoad*`, `cuLibraryLoad*`, their unloads, and of
//! `cuModuleGetFunction` / `cuLibraryGetKernel` / `cuKernelGetFunction`, which map a launch's
//! function to its image.
//!
//! After a load succeeds the image is read in place ([`crate::module::image::image_at`], or
//! the file read), the device's cubin chosen, and its `.nv.info` parameter tables and globals kept.
//! A launch whose layout the driver does not describe takes the table of its kernel's name
//! (`image_layout`). Globals are resolved to addresses at the first launch on the image's
//! device once a backend is open (`cuModuleGetGlobal`; for a library, `cuLibraryGetGlobal`
//! once one of its kernels is launched, so resolving never forces a lazily loaded library
//! into the context), and given to the backend's [`crate::ModuleRegistry`], which the memory
//! engine enumerates: a kernel that writes a `__device__` variable of the application's code
//! is restored like one of the library's own modules, and a global that cannot be resolved
//! declines (`untracked_memory`) while its image is loaded. An unload removes the image's
//! globals inside [`replay_memory::Tracker::release_with`], so it waits for a restore in
//! flight, before the driver unloads.
//!
//! Not read: PTX images (JIT-compiled: no table; their launches fall back to `extra` or an
//! unknown layout, and their globals are not enumerated), compressed fat-binary entries
//! (counted `images_compressed`), and a library's globals before any of its kernels runs.

use std::collections::HashMap;
use std::ffi::{c_char, c_uint, c_void, CStr, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{self, CUfunction, CUresult};
use parking_lot::Mutex;
use replay_core::AgentId;
use replay_memory::Tracker;
use serde::Serialize;

use crate::launch::ParamSlot;
use crate::module::elf::GlobalSymbol;
use crate::module::image::{self, ImageNote};
use crate::module::ModuleRegistry;

/// Counts of the images the application loaded.
#[derive(Debug, Default, Serialize)]
pub struct ImageCounters {
    /// Images the application loaded (`cuModuleLoad*`, `cuLibraryLoad*`).
    pub images_loaded: AtomicU64,
    /// Images whose cubin was read (parameter tables, globals).
    pub images_read: AtomicU64,
    /// PTX images (no table to read).
    pub images_ptx: AtomicU64,
    /// Fat binaries whose cubin for the device is compressed (not read).
    pub images_compressed: AtomicU64,
    /// Images not readable, or without a cubin for the device.
    pub images_unreadable: AtomicU64,
    /// Images whose writable globals were all resolved and registered.
    pub image_globals_resolved: AtomicU64,
    /// Images with a writable global that could not be resolved (replays decline while loaded).
    pub image_globals_failed: AtomicU64,
}

/// Module or library handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Handle {
    Module(usize),
    Library(usize),
}

/// Where an image's globals were registered: the agent, its registry and tracker.
type Registered = (AgentId, Arc<ModuleRegistry>, Arc<Tracker>);

/// What one loaded image gave.
#[derive(Debug)]
struct Image {
    layouts: HashMap<String, Vec<ParamSlot>>,
    /// Globals not resolved yet (taken when resolved).
    pending: Mutex<Option<Vec<GlobalSymbol>>>,
    /// Where its globals went, once resolved.
    registered: Mutex<Option<Registered>>,
}

/// The images, and which image and name each function or kernel handle belongs to.
#[derive(Debug, Default)]
struct Images {
    images: Mutex<HashMap<Handle, Arc<Image>>>,
    funcs: Mutex<HashMap<usize, (Handle, Arc<str>)>>,
    kernels: Mutex<HashMap<usize, (Handle, Arc<str>)>>,
    counters: ImageCounters,
}

fn images() -> &'static Images {
    static I: OnceLock<Images> = OnceLock::new();
    I.get_or_init(Images::default)
}

/// The image counts as JSON.
pub fn counters_json() -> serde_json::Value {
    serde_json::to_value(&images().counters).unwrap_or_default()
}

/// The compute capability of the current context's device as `sm` (e.g. 90).
fn current_sm() -> Option<u32> {
    let mut d: sys::CUdevice = 0;
    // SAFETY: out pointer to a live local.
    if unsafe { sys::cuCtxGetDevice(&mut d) } != CUresult::CUDA_SUCCESS {
        return None;
    }
    let (mut major, mut minor) = (0i32, 0i32);
    // SAFETY: out pointers to live locals, a device ordinal the driver gave.
    unsafe {
        let a = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR;
        let b = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR;
        if sys::cuDeviceGetAttribute(&mut major, a, d) != CUresult::CUDA_SUCCESS
            || sys::cuDeviceGetAttribute(&mut minor, b, d) != CUresult::CUDA_SUCCESS
        {
            return None;
        }
    }
    Some((major * 10 + minor) as u32)
}

/// Records a loaded image; `bytes` is what the application gave (or the file's contents).
fn record(handle: Handle, bytes: Result<&[u8], ImageNote>) {
    let s = images();
    s.counters.images_loaded.fetch_add(1, Ordering::Relaxed);
    let sm = current_sm().unwrap_or(u32::MAX);
    let info = bytes.and_then(|b| {
        let c = image::cubin_for(b, sm)?;
        image::read_cubin(c)
    });
    let info = match info {
        Ok(i) => {
            s.counters.images_read.fetch_add(1, Ordering::Relaxed);
            i
        }
        Err(note) => {
            match note {
                ImageNote::Ptx => &s.counters.images_ptx,
                ImageNote::Compressed(_) => &s.counters.images_compressed,
                ImageNote::NoCubin(_) | ImageNote::Unreadable(_) => &s.counters.images_unreadable,
            }
            .fetch_add(1, Ordering::Relaxed);
            log::debug!("[kernel-replay] image {handle:?}: {note}");
            Default::default()
        }
    };
    let writable = info.globals.iter().any(|g| !g.read_only && g.size > 0);
    let img = Arc::new(Image {
        layouts: info.layouts,
        pending: Mutex::new(writable.then_some(info.globals)),
        registered: Mutex::new(None),
    });
    s.images.lock().insert(handle, img);
}

/// The parameter table of function `f`'s kernel in its image, when one was read.
pub(crate) fn image_layout(f: CUfunction) -> Option<Vec<ParamSlot>> {
    let imgs = images();
    let (h, name) = imgs
        .funcs
        .lock()
        .get(&(f as usize))
        .cloned()
        .or_else(|| imgs.kernels.lock().get(&(f as usize)).cloned())?;
    let img = imgs.images.lock().get(&h).cloned()?;
    img.layouts.get(&*name).cloned()
}

/// Resolves the globals of every loaded module, and of the library `f` belongs to, into
/// `registry` (the backend of `agent`, where a launch is about to run).
pub(crate) fn resolve_globals(
    agent: AgentId,
    f: CUfunction,
    registry: &Arc<ModuleRegistry>,
    tracker: &Arc<Tracker>,
) {
    let s = images();
    let own = s
        .funcs
        .lock()
        .get(&(f as usize))
        .cloned()
        .or_else(|| s.kernels.lock().get(&(f as usize)).cloned())
        .map(|(h, _)| h);
    let todo: Vec<(Handle, Arc<Image>)> = s
        .images
        .lock()
        .iter()
        .filter(|(h, i)| {
            (matches!(h, Handle::Module(_)) || Some(**h) == own) && i.pending.lock().is_some()
        })
        .map(|(h, i)| (*h, Arc::clone(i)))
        .collect();
    for (h, img) in todo {
        let Some(syms) = img.pending.lock().take() else {
            continue;
        };
        let lookup = |name: &str| -> Option<(u64, u64)> {
            let c = CString::new(name).ok()?;
            let (mut p, mut n): (sys::CUdeviceptr, usize) = (0, 0);
            // SAFETY: a loaded module/library handle of the application; out pointers to
            // live locals.
            let r = unsafe {
                match h {
                    Handle::Module(m) => {
                        sys::cuModuleGetGlobal_v2(&mut p, &mut n, m as sys::CUmodule, c.as_ptr())
                    }
                    Handle::Library(l) => {
                        sys::cuLibraryGetGlobal(&mut p, &mut n, l as sys::CUlibrary, c.as_ptr())
                    }
                }
            };
            (r == CUresult::CUDA_SUCCESS).then_some((p, n as u64))
        };
        if registry.add_foreign(key(h), syms, lookup) {
            s.counters
                .image_globals_resolved
                .fetch_add(1, Ordering::Relaxed);
        } else {
            s.counters
                .image_globals_failed
                .fetch_add(1, Ordering::Relaxed);
        }
        *img.registered.lock() = Some((agent, Arc::clone(registry), Arc::clone(tracker)));
    }
}

fn key(h: Handle) -> usize {
    match h {
        Handle::Module(x) | Handle::Library(x) => x,
    }
}

/// Forgets an image before the driver unloads it: its globals leave the registry inside the
/// tracker's `release_with`, so the unload waits for a restore writing them.
fn forget(handle: Handle) {
    let s = images();
    let img = s.images.lock().remove(&handle);
    s.funcs.lock().retain(|_, (h, _)| *h != handle);
    s.kernels.lock().retain(|_, (h, _)| *h != handle);
    let Some(img) = img else { return };
    let Some((agent, registry, tracker)) = img.registered.lock().take() else {
        return;
    };
    let ranges = registry.foreign_ranges(key(handle));
    tracker.release_with(agent, &ranges, || {
        registry.remove_foreign(key(handle));
    });
}

fn read_file(name: *const c_char) -> Result<Vec<u8>, ImageNote> {
    if name.is_null() {
        return Err(ImageNote::Unreadable("no file name".into()));
    }
    // SAFETY: the entry's contract: a NUL-terminated path.
    let path = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    std::fs::read(&path).map_err(|e| ImageNote::Unreadable(format!("{path}: {e}")))
}

/// The image at `p` (the driver accepted it), for the hook's duration.
fn copy<'a>(p: *const c_void) -> Result<&'a [u8], ImageNote> {
    // SAFETY: the driver just loaded an image from `p`, so its headers are valid; the
    // application's image stays alive during the load call, which the hook is inside.
    unsafe { image::image_at(p.cast()) }
}

/// Hook of `cuModuleLoad`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_module_load(
    real: unsafe extern "C" fn(*mut sys::CUmodule, *const c_char) -> CUresult,
    reached: &mut bool,
    m: *mut sys::CUmodule,
    fname: *const c_char,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(m, fname) };
    if r == CUresult::CUDA_SUCCESS && !m.is_null() {
        // SAFETY: the driver wrote the handle.
        record(
            Handle::Module(unsafe { *m } as usize),
            read_file(fname).as_deref().map_err(Clone::clone),
        );
    }
    r
}

/// Hook of `cuModuleLoadData` and `cuModuleLoadFatBinary`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_module_load_data(
    real: unsafe extern "C" fn(*mut sys::CUmodule, *const c_void) -> CUresult,
    reached: &mut bool,
    m: *mut sys::CUmodule,
    image: *const c_void,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(m, image) };
    if r == CUresult::CUDA_SUCCESS && !m.is_null() {
        // SAFETY: the driver wrote the handle.
        record(Handle::Module(unsafe { *m } as usize), copy(image));
    }
    r
}

/// Hook of `cuModuleLoadDataEx`.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_module_load_data_ex(
    real: unsafe extern "C" fn(
        *mut sys::CUmodule,
        *const c_void,
        c_uint,
        *mut c_void,
        *mut *mut c_void,
    ) -> CUresult,
    reached: &mut bool,
    m: *mut sys::CUmodule,
    image: *const c_void,
    n: c_uint,
    opts: *mut c_void,
    vals: *mut *mut c_void,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(m, image, n, opts, vals) };
    if r == CUresult::CUDA_SUCCESS && !m.is_null() {
        // SAFETY: the driver wrote the handle.
        record(Handle::Module(unsafe { *m } as usize), copy(image));
    }
    r
}

type LibLoad<T> = unsafe extern "C" fn(
    *mut sys::CUlibrary,
    T,
    *mut c_void,
    *mut *mut c_void,
    c_uint,
    *mut c_void,
    *mut *mut c_void,
    c_uint,
) -> CUresult;

/// Hook of `cuLibraryLoadData`.
///
/// # Safety
/// The entry's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn hook_library_load_data(
    real: LibLoad<*const c_void>,
    reached: &mut bool,
    l: *mut sys::CUlibrary,
    code: *const c_void,
    jo: *mut c_void,
    jv: *mut *mut c_void,
    nj: c_uint,
    lo: *mut c_void,
    lv: *mut *mut c_void,
    nl: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(l, code, jo, jv, nj, lo, lv, nl) };
    if r == CUresult::CUDA_SUCCESS && !l.is_null() {
        // SAFETY: the driver wrote the handle.
        record(Handle::Library(unsafe { *l } as usize), copy(code));
    }
    r
}

/// Hook of `cuLibraryLoadFromFile`.
///
/// # Safety
/// The entry's contract.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn hook_library_load_file(
    real: LibLoad<*const c_char>,
    reached: &mut bool,
    l: *mut sys::CUlibrary,
    fname: *const c_char,
    jo: *mut c_void,
    jv: *mut *mut c_void,
    nj: c_uint,
    lo: *mut c_void,
    lv: *mut *mut c_void,
    nl: c_uint,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(l, fname, jo, jv, nj, lo, lv, nl) };
    if r == CUresult::CUDA_SUCCESS && !l.is_null() {
        // SAFETY: the driver wrote the handle.
        record(
            Handle::Library(unsafe { *l } as usize),
            read_file(fname).as_deref().map_err(Clone::clone),
        );
    }
    r
}

/// Hook of `cuModuleUnload`: the image's globals are forgotten first.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_module_unload(
    real: unsafe extern "C" fn(sys::CUmodule) -> CUresult,
    reached: &mut bool,
    m: sys::CUmodule,
) -> CUresult {
    forget(Handle::Module(m as usize));
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(m) }
}

/// Hook of `cuLibraryUnload`: the image's globals are forgotten first.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_library_unload(
    real: unsafe extern "C" fn(sys::CUlibrary) -> CUresult,
    reached: &mut bool,
    l: sys::CUlibrary,
) -> CUresult {
    forget(Handle::Library(l as usize));
    *reached = true;
    // SAFETY: forwarded as given.
    unsafe { real(l) }
}

fn name_of(p: *const c_char) -> Arc<str> {
    // SAFETY: the entry's contract: a NUL-terminated name.
    Arc::from(unsafe { CStr::from_ptr(p) }.to_string_lossy().as_ref())
}

/// Hook of `cuModuleGetFunction`: the function's image and name.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_module_get_function(
    real: unsafe extern "C" fn(*mut CUfunction, sys::CUmodule, *const c_char) -> CUresult,
    reached: &mut bool,
    f: *mut CUfunction,
    m: sys::CUmodule,
    name: *const c_char,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(f, m, name) };
    if r == CUresult::CUDA_SUCCESS && !f.is_null() && !name.is_null() {
        // SAFETY: the driver wrote the handle.
        let f = unsafe { *f } as usize;
        let e = (Handle::Module(m as usize), name_of(name));
        images().funcs.lock().insert(f, e);
    }
    r
}

/// Hook of `cuLibraryGetKernel`: the kernel's image and name.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_library_get_kernel(
    real: unsafe extern "C" fn(*mut sys::CUkernel, sys::CUlibrary, *const c_char) -> CUresult,
    reached: &mut bool,
    k: *mut sys::CUkernel,
    l: sys::CUlibrary,
    name: *const c_char,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(k, l, name) };
    if r == CUresult::CUDA_SUCCESS && !k.is_null() && !name.is_null() {
        // SAFETY: the driver wrote the handle.
        let k = unsafe { *k } as usize;
        let e = (Handle::Library(l as usize), name_of(name));
        images().kernels.lock().insert(k, e);
    }
    r
}

/// Hook of `cuKernelGetFunction`: the function takes its kernel's image and name.
///
/// # Safety
/// The entry's contract.
pub(crate) unsafe fn hook_kernel_get_function(
    real: unsafe extern "C" fn(*mut CUfunction, sys::CUkernel) -> CUresult,
    reached: &mut bool,
    f: *mut CUfunction,
    k: sys::CUkernel,
) -> CUresult {
    *reached = true;
    // SAFETY: forwarded as given.
    let r = unsafe { real(f, k) };
    if r == CUresult::CUDA_SUCCESS && !f.is_null() {
        let imgs = images();
        if let Some(e) = imgs.kernels.lock().get(&(k as usize)).cloned() {
            // SAFETY: the driver wrote the handle.
            imgs.funcs.lock().insert(unsafe { *f } as usize, e);
        }
    }
    r
}
