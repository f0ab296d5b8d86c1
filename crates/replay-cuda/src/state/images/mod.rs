//! The application's code images under interception (SPEC §9.2 "Unmodified applications":
//! code): the hooks of `cuModuleLoad*`, `cuLibraryLoad*`, their unloads, and of
//! `cuModuleGetFunction` / `cuLibraryGetKernel` / `cuKernelGetFunction`, which map a launch's
//! function to its image (and a graph kernel node's function, through the node's kernel).
//!
//! After a load succeeds the image is read in place ([`crate::module::image::image_at`], or
//! the file read), the device's code chosen (a cubin, else PTX; a compressed fat-binary entry
//! decompressed, [`crate::module::image`]), and its `.nv.info` parameter tables and globals
//! kept (a PTX image's globals from its text, [`crate::module::ptx`]; it has no table).
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
//! **Globals unknown.** An image whose code could not be read (not a known format, a
//! compression not read, an inconsistent compressed entry, PTX that does not parse, no code for
//! the device) has globals nobody knows, so its kernels are not replayed blind: their
//! dispatches decline `untracked_memory` ("globals of IMAGE unknown"), counted
//! `declined_globals_unknown`. So does a launch whose function cannot be mapped to an image
//! loaded through the hooks (a function or kernel obtained by an entry the hooks do not see,
//! such as `cuModuleEnumerateFunctions`, `cuLibraryEnumerateKernels` or `cuLibraryGetModule`
//! and `cuModuleGetFunction`, or from a module loaded before the interception), counted
//! `declined_image_unknown`; before declining, the driver is asked which module
//! (`cuFuncGetModule`, also remembered for each library function `cuKernelGetFunction` gives)
//! or library (`cuKernelGetLibrary`, CUDA 12.5+, where the driver has it) the function belongs
//! to, and, for a module no hook saw, the recorded libraries that define a kernel of the
//! function's name (their image's tables name it, or `cuLibraryGetKernel` fetched it) for
//! their module in the current context (`cuLibraryGetModule`): one that gives the function's
//! module is its image. That is the case of a CUDA graph's kernel node captured from a
//! launch by a library kernel's `CUkernel` handle, as the CUDA runtime launches: the node
//! holds the context's function of the kernel, a handle no hook saw. Its node parameters'
//! `kern` (`CUDA_KERNEL_NODE_PARAMS_v2`, where the driver fills it) maps it first
//! ([`note_node_kernel`], from [`super::graph`]). Each library is asked at most once per
//! context, and a module none of them gives is not looked for again (with that name) until a
//! library is loaded; libraries not defining the name are never asked (asking may load a
//! lazily loaded library into the context). A function is never mapped by its name alone: an
//! image loaded before the interception or outside its hooks may define the same name.
//! `KREPLAY_CUDA_ALLOW_UNKNOWN_GLOBALS=1` (default `0`; a malformed value is reported on
//! stderr and keeps the default) replays them anyway, counted `allowed_globals_unknown`, for a
//! user who knows those kernels write no module global. Not covered either way: another
//! image's kernel writing such an image's globals through a pointer stored in device memory
//! (memory nobody tracks, SPEC §7.2); a pointer to them passed as an argument is asked of the
//! driver and declines.
//!
//! Not read: fat-binary wrappers of version 2 (prelinked lists), and a library's globals
//! before any of its kernels runs (they are resolved then).
//!
//! This file is the registry of loaded images and maps a function to its image; `hooks.rs`
//! holds the load and lookup hooks that fill it, `globals.rs` what becomes of an image's
//! globals at a launch (resolved into the backend's registry, or the launch declined).

use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{self, CUfunction, CUresult};
use parking_lot::Mutex;
use replay_core::AgentId;
use replay_memory::Tracker;
use serde::Serialize;

use crate::launch::ParamSlot;
use crate::module::elf::GlobalSymbol;
use crate::module::image::{self, CodeFormat, ImageNote};
use crate::module::ModuleRegistry;

// Reached by their own paths (`images::globals::…`, `images::hooks::…`): both read this
// registry, which names neither.
pub mod globals;
pub(crate) mod hooks;

/// Counts of the images the application loaded, and of the launches their state decided.
#[derive(Debug, Default, Serialize)]
pub struct ImageCounters {
    /// Images the application loaded (`cuModuleLoad*`, `cuLibraryLoad*`).
    pub images_loaded: AtomicU64,
    /// Images whose code for the device was read (a cubin's tables and symbols, or a PTX
    /// text's globals): their globals are known.
    pub images_read: AtomicU64,
    /// Of those read, images whose code came from a compressed fat-binary entry.
    pub images_decompressed: AtomicU64,
    /// Images whose code for the device is PTX (read or not).
    pub images_ptx: AtomicU64,
    /// Fat binaries whose code for the device is compressed (decompressed or not).
    pub images_compressed: AtomicU64,
    /// Images whose code could not be read: their globals are unknown and their kernels
    /// decline.
    pub images_unreadable: AtomicU64,
    /// Images whose writable globals were all resolved and registered.
    pub image_globals_resolved: AtomicU64,
    /// Images with a writable global that could not be resolved (replays decline while loaded).
    pub image_globals_failed: AtomicU64,
    /// Dispatches declined because their image's globals are unknown.
    pub declined_globals_unknown: AtomicU64,
    /// Dispatches declined because their function maps to no image loaded through the hooks.
    pub declined_image_unknown: AtomicU64,
    /// Dispatches of either kind let past this check because
    /// `KREPLAY_CUDA_ALLOW_UNKNOWN_GLOBALS` says so.
    pub allowed_globals_unknown: AtomicU64,
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
    /// How the logs name it (its file, or its handle).
    name: String,
    /// Why its globals are unknown, when they are.
    unknown: Option<String>,
    layouts: HashMap<String, Vec<ParamSlot>>,
    /// Globals not resolved yet (taken when resolved).
    pending: Mutex<Option<Vec<GlobalSymbol>>>,
    /// Where its globals went, once resolved.
    registered: Mutex<Option<Registered>>,
    /// Device-side services its code calls whose effects no snapshot sees.
    services: Vec<crate::module::services::DeviceService>,
    /// Its code object id in [`replay_core::KernelKey`] (never 0, never reused): an unload
    /// forgets only its kernels' memos and predictions.
    code_object: u64,
    /// It links NVSHMEM's device code (a kernel or global named `nvshmem*`): every kernel of
    /// it is a communication kernel, whatever its name (SPEC §9.2).
    nvshmem: bool,
    /// The image's bytes as the driver got them, kept only while a capture is armed
    /// ([`crate::capture`]): a program's images can be hundreds of MiB.
    code: Option<Arc<[u8]>>,
}

/// Whether an image with these kernels and globals links NVSHMEM's device library: its device
/// state and entry points are named `nvshmem*` / `nvshmemi_*`, whatever the kernels are named.
pub(crate) fn links_nvshmem<'a>(
    kernels: impl IntoIterator<Item = &'a str>,
    globals: impl IntoIterator<Item = &'a str>,
) -> bool {
    kernels
        .into_iter()
        .chain(globals)
        .any(|n| n.starts_with("nvshmem") || n.contains("nvshmemi_"))
}

/// The images, and which image and name each function or kernel handle belongs to.
#[derive(Debug, Default)]
struct Images {
    images: Mutex<HashMap<Handle, Arc<Image>>>,
    funcs: Mutex<HashMap<usize, (Handle, Arc<str>)>>,
    kernels: Mutex<HashMap<usize, (Handle, Arc<str>)>>,
    /// The per-context module of a library, by module handle (from `cuFuncGetModule` of the
    /// functions `cuKernelGetFunction` gave).
    aliases: Mutex<HashMap<usize, Handle>>,
    /// Functions the driver mapped to no image the hooks saw (asked once, not at every launch;
    /// emptied whenever an image or a library's module is recorded or forgotten, since the
    /// answer may change then).
    unmapped: Mutex<HashSet<usize>>,
    /// Libraries asked for their module in a context (`cuLibraryGetModule`), by (context,
    /// library): each at most once, its answer kept in `aliases` ([`library_with_module`]).
    asked: Mutex<HashSet<(usize, usize)>>,
    /// Modules, with the function name looked for, that no recorded library defining that
    /// name gave in the current context: not looked for again until a library is loaded.
    missed: Mutex<HashSet<(usize, Arc<str>)>>,
    /// Modules whose globals await resolution, so a launch finding none skips the scan of
    /// every image ([`globals::resolve_globals`]); kept by [`take_pending`].
    pending_modules: std::sync::atomic::AtomicUsize,
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
fn record(handle: Handle, file: Option<String>, bytes: Result<&[u8], ImageNote>) {
    let s = images();
    let c = &s.counters;
    c.images_loaded.fetch_add(1, Ordering::Relaxed);
    let name = file.unwrap_or_else(|| match handle {
        Handle::Module(m) => format!("module {m:#x}"),
        Handle::Library(l) => format!("library {l:#x}"),
    });
    let sm = current_sm().unwrap_or(u32::MAX);
    let code = match &bytes {
        Ok(b) if crate::capture::armed() => Some(Arc::<[u8]>::from(*b)),
        _ => None,
    };
    let (info, unknown) = match bytes.and_then(|b| image::read_image(b, sm)) {
        Ok(i) => {
            c.images_read.fetch_add(1, Ordering::Relaxed);
            if i.compression.is_some() {
                c.images_compressed.fetch_add(1, Ordering::Relaxed);
                c.images_decompressed.fetch_add(1, Ordering::Relaxed);
            }
            if i.format == CodeFormat::Ptx {
                c.images_ptx.fetch_add(1, Ordering::Relaxed);
            }
            (i.code, None)
        }
        Err(note) => {
            c.images_unreadable.fetch_add(1, Ordering::Relaxed);
            match note {
                ImageNote::Ptx(_) => c.images_ptx.fetch_add(1, Ordering::Relaxed),
                ImageNote::Compressed { .. } | ImageNote::Decompression(_) => {
                    c.images_compressed.fetch_add(1, Ordering::Relaxed)
                }
                ImageNote::NoCubin(_) | ImageNote::Unreadable(_) => 0,
            };
            log::info!(
                "[kernel-replay] {name}: {note}; its globals are unknown, so its kernels decline"
            );
            (Default::default(), Some(note.to_string()))
        }
    };
    let services = info.services.clone();
    let writable = info.globals.iter().any(|g| !g.read_only && g.size > 0);
    if writable && matches!(handle, Handle::Module(_)) {
        s.pending_modules.fetch_add(1, Ordering::AcqRel);
    }
    // Above the ids the library's own module registry hands out, so the two never meet.
    static NEXT_CODE_OBJECT: AtomicU64 = AtomicU64::new(1 << 32);
    let nvshmem = links_nvshmem(
        info.layouts.keys().map(String::as_str),
        info.globals.iter().map(|g| g.name.as_str()),
    );
    let img = Arc::new(Image {
        name,
        unknown,
        layouts: info.layouts,
        pending: Mutex::new(writable.then_some(info.globals)),
        registered: Mutex::new(None),
        services,
        code_object: NEXT_CODE_OBJECT.fetch_add(1, Ordering::Relaxed),
        nvshmem,
        code,
    });
    let old = s.images.lock().insert(handle, img);
    if let Some(old) = old {
        take_pending(handle, &old);
    }
    // A function asked before may belong to it.
    s.unmapped.lock().clear();
    if matches!(handle, Handle::Library(_)) {
        // A module no library gave may be this one's.
        s.missed.lock().clear();
    }
}

/// A driver entry that older drivers may lack, looked up in the loaded driver itself (so never
/// one of the interception's own exported wrappers); `None` where it is absent.
pub(crate) fn optional_entry(name: &'static CStr) -> Option<usize> {
    use libloading::os::unix::{Library, RTLD_NOW};
    static DRIVER: OnceLock<Option<Library>> = OnceLock::new();
    static ENTRIES: Mutex<Vec<(&'static CStr, Option<usize>)>> = Mutex::new(Vec::new());
    if let Some(&(_, p)) = ENTRIES.lock().iter().find(|(n, _)| *n == name) {
        return p;
    }
    // SAFETY: the driver is already loaded (the application's calls reached the hooks), so
    // this opens it again by its soname, running no initialiser.
    let lib = DRIVER.get_or_init(|| unsafe { Library::open(Some("libcuda.so.1"), RTLD_NOW) }.ok());
    // SAFETY: only the address is taken; it is called through its declared type below.
    let p = lib.as_ref().and_then(|l| unsafe {
        l.get::<*const c_void>(name.to_bytes())
            .ok()
            .map(|sym| *sym as usize)
            .filter(|&p| p != 0)
    });
    ENTRIES.lock().push((name, p));
    p
}

/// `cuFuncGetModule(f)`, where the driver answers.
fn module_of(f: CUfunction) -> Option<usize> {
    type F = unsafe extern "C" fn(*mut sys::CUmodule, CUfunction) -> CUresult;
    let p = optional_entry(c"cuFuncGetModule")?;
    // SAFETY: the driver's entry of this name has this type (cuda.h).
    let call: F = unsafe { std::mem::transmute::<usize, F>(p) };
    let mut m: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: the application's function handle; an out pointer to a live local.
    let r = unsafe { call(&mut m, f) };
    (r == CUresult::CUDA_SUCCESS && !m.is_null()).then_some(m as usize)
}

/// `cuKernelGetLibrary(k)` (CUDA 12.5+), where the driver has it and `k` is a kernel.
fn library_of(k: sys::CUkernel) -> Option<usize> {
    type F = unsafe extern "C" fn(*mut sys::CUlibrary, sys::CUkernel) -> CUresult;
    let p = optional_entry(c"cuKernelGetLibrary")?;
    // SAFETY: the driver's entry of this name has this type (cuda.h).
    let call: F = unsafe { std::mem::transmute::<usize, F>(p) };
    let mut l: sys::CUlibrary = std::ptr::null_mut();
    // SAFETY: a handle of the application's (the driver rejects one that is not a kernel);
    // an out pointer to a live local.
    let r = unsafe { call(&mut l, k) };
    (r == CUresult::CUDA_SUCCESS && !l.is_null()).then_some(l as usize)
}

/// `cuLibraryGetModule(l)`: the library's module in the current context, where the driver
/// has the entry and answers.
fn library_module(l: usize) -> Option<usize> {
    type F = unsafe extern "C" fn(*mut sys::CUmodule, sys::CUlibrary) -> CUresult;
    let p = optional_entry(c"cuLibraryGetModule")?;
    // SAFETY: the driver's entry of this name has this type (cuda.h).
    let call: F = unsafe { std::mem::transmute::<usize, F>(p) };
    let mut m: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: a library handle the hooks saw loaded (and not unloaded since); an out pointer
    // to a live local.
    let r = unsafe { call(&mut m, l as sys::CUlibrary) };
    (r == CUresult::CUDA_SUCCESS && !m.is_null()).then_some(m as usize)
}

/// The recorded library whose module in the current context is `m`, a module the hooks never
/// saw (what `cuFuncGetModule` answers for the context's function of a library kernel the
/// CUDA runtime launched by its `CUkernel` handle, such as a graph's kernel node holds).
///
/// Only libraries that define a kernel named `name` are asked (their image's parameter
/// tables name it, or the hooks saw `cuLibraryGetKernel` fetch it; those first), since asking
/// may load a lazily loaded library into the context; each, once it answers, at most once
/// per context, its answer kept as an alias of the library. A module none of them gives is
/// remembered with `name` and not looked for again until a library is loaded.
fn library_with_module(m: usize, name: &Arc<str>) -> Option<Handle> {
    let s = images();
    let miss = (m, Arc::clone(name));
    if s.missed.lock().contains(&miss) {
        return None;
    }
    let ctx = {
        let mut c: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: out pointer to a live local (asked here rather than of `state`, which uses
        // this file).
        let _ = unsafe { sys::cuCtxGetCurrent(&mut c) };
        c as usize
    };
    let fetched: HashSet<usize> = s
        .kernels
        .lock()
        .values()
        .filter(|(_, n)| n == name)
        .filter_map(|(h, _)| match h {
            Handle::Library(l) => Some(*l),
            Handle::Module(_) => None,
        })
        .collect();
    let mut candidates: Vec<usize> = s
        .images
        .lock()
        .iter()
        .filter_map(|(h, img)| match h {
            Handle::Library(l) if fetched.contains(l) || img.layouts.contains_key(&**name) => {
                Some(*l)
            }
            _ => None,
        })
        .collect();
    {
        let asked = s.asked.lock();
        candidates.retain(|&l| !asked.contains(&(ctx, l)));
    }
    // Those whose kernel of that name the program fetched first.
    candidates.sort_by_key(|l| !fetched.contains(l));
    let mut found = None;
    for l in candidates {
        // A library without a module in this context (yet) is asked again later.
        let Some(lm) = library_module(l) else {
            continue;
        };
        s.asked.lock().insert((ctx, l));
        if s.aliases.lock().insert(lm, Handle::Library(l)).is_none() {
            // A function asked before may be of this module.
            s.unmapped.lock().clear();
        }
        if lm == m {
            found = Some(Handle::Library(l));
            break;
        }
    }
    if found.is_none() {
        s.missed.lock().insert(miss);
    }
    found
}

/// The driver's (mangled) name of `f`, what the image's tables are keyed by.
fn raw_name(f: CUfunction) -> Option<Arc<str>> {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: the application's handle; an out pointer to a live local.
    let mut r = unsafe { sys::cuFuncGetName(&mut p, f) };
    if r != CUresult::CUDA_SUCCESS || p.is_null() {
        // SAFETY: as above; a CUkernel may stand where a CUfunction is expected.
        r = unsafe { sys::cuKernelGetName(&mut p, f as sys::CUkernel) };
    }
    (r == CUresult::CUDA_SUCCESS && !p.is_null()).then(|| name_of(p))
}

/// The recorded image `h` stands for (itself, or the library whose per-context module it is)
/// and what it gave.
fn canonical(h: Handle) -> Option<(Handle, Arc<Image>)> {
    let s = images();
    if let Some(img) = s.images.lock().get(&h) {
        return Some((h, Arc::clone(img)));
    }
    let Handle::Module(m) = h else { return None };
    let lib = s.aliases.lock().get(&m).copied()?;
    let img = s.images.lock().get(&lib).cloned()?;
    Some((lib, img))
}

/// Takes `img`'s globals awaiting resolution, keeping [`Images::pending_modules`].
fn take_pending(h: Handle, img: &Image) -> Option<Vec<GlobalSymbol>> {
    let p = img.pending.lock().take();
    if p.is_some() && matches!(h, Handle::Module(_)) {
        images().pending_modules.fetch_sub(1, Ordering::AcqRel);
    }
    p
}

/// The image and name of function (or kernel) `f`: what the hooks saw, else what the driver
/// says it belongs to (then remembered): its module (`cuFuncGetModule`) when the hooks
/// recorded it or tied it to a library, its library (`cuKernelGetLibrary`, for a kernel
/// handle), else the recorded library that gives that module in the current context
/// ([`library_with_module`]). `None` when no image the hooks recorded holds it (a module
/// loaded outside them, or one `cuLibraryGetModule` gave and nothing tied to its library).
/// Never guessed by name alone: an image loaded before the interception, or outside its
/// hooks, may define the same name.
fn image_of(f: CUfunction) -> Option<(Handle, Arc<Image>, Arc<str>)> {
    let s = images();
    let seen = s.funcs.lock().get(&(f as usize)).cloned();
    let seen = seen.or_else(|| s.kernels.lock().get(&(f as usize)).cloned());
    if let Some((h, name)) = &seen {
        if let Some((c, img)) = canonical(*h) {
            return Some((c, img, Arc::clone(name)));
        }
    }
    if s.unmapped.lock().contains(&(f as usize)) {
        return None;
    }
    let module = module_of(f);
    let mut name = seen.map(|(_, n)| n);
    let found = module
        .and_then(|m| canonical(Handle::Module(m)))
        .or_else(|| library_of(f as sys::CUkernel).and_then(|l| canonical(Handle::Library(l))))
        .or_else(|| {
            let m = module?;
            if name.is_none() {
                name = raw_name(f);
            }
            canonical(library_with_module(m, name.as_ref()?)?)
        });
    let Some((handle, img)) = found else {
        s.unmapped.lock().insert(f as usize);
        return None;
    };
    let name = match name {
        Some(n) => n,
        None => raw_name(f)?,
    };
    s.funcs
        .lock()
        .insert(f as usize, (handle, Arc::clone(&name)));
    Some((handle, img, name))
}

/// The parameter table of function `f`'s kernel in its image, when one was read.
pub(crate) fn image_layout(f: CUfunction) -> Option<Vec<ParamSlot>> {
    let (_, img, name) = image_of(f)?;
    img.layouts.get(&*name).cloned()
}

/// The image a launch of `f` belongs to (and what it gave), asked once per launch and handed
/// to [`globals::resolve_globals`] and [`globals::unknown_globals`].
#[derive(Debug, Clone)]
pub(crate) struct LaunchImage(Option<(Handle, Arc<Image>)>);

/// [`LaunchImage`] of `f`.
pub(crate) fn launch_image(f: CUfunction) -> LaunchImage {
    LaunchImage(image_of(f).map(|(h, img, _)| (h, img)))
}

impl LaunchImage {
    /// The image's code object id for [`replay_core::KernelKey`]; 0 where the image is unknown
    /// (those kernels decline, and share code object 0).
    pub(crate) fn code_object(&self) -> u64 {
        self.0.as_ref().map_or(0, |(_, img)| img.code_object)
    }

    /// Whether the image links NVSHMEM (its kernels are communication kernels).
    pub(crate) fn links_nvshmem(&self) -> bool {
        self.0.as_ref().is_some_and(|(_, img)| img.nvshmem)
    }
}

/// The kept code image of code object `code_object` and the driver's name of `f` in it, for a
/// capture. `None` when no image of that id is loaded or its bytes were not kept.
pub(crate) fn code_image(code_object: u64, f: CUfunction) -> Option<KeptImage> {
    let (h, img) = images()
        .images
        .lock()
        .iter()
        .find(|(_, i)| i.code_object == code_object)
        .map(|(h, i)| (*h, Arc::clone(i)))?;
    let code = img.code.clone()?;
    let symbol = raw_name(f)?;
    // Its variables where they were resolved (its first launch resolves them).
    let variables = img
        .registered
        .lock()
        .as_ref()
        .map(|(_, registry, _)| registry.foreign_variables(key(h)))
        .unwrap_or_default();
    Some(KeptImage {
        name: img.name.clone(),
        code,
        symbol,
        variables,
    })
}

/// What [`code_image`] gives: the image's name, its bytes, the kernel's symbol in it, and its
/// writable variables where this load placed them.
pub(crate) struct KeptImage {
    pub(crate) name: String,
    pub(crate) code: Arc<[u8]>,
    pub(crate) symbol: Arc<str>,
    pub(crate) variables: Vec<replay_memory::ModuleVariable>,
}

/// The code object id of a loaded module or library (`None` when the hooks never saw it),
/// asked before its unload forgets it.
pub(crate) fn code_object_of(module: Option<usize>, library: Option<usize>) -> Option<u64> {
    let h = match (module, library) {
        (Some(m), _) => Handle::Module(m),
        (None, Some(l)) => Handle::Library(l),
        (None, None) => return None,
    };
    images().images.lock().get(&h).map(|img| img.code_object)
}

/// The device-side services the code of a launch's image calls (none when the image is
/// unknown: that declines already), with the image's name.
pub(crate) fn image_services(
    image: &LaunchImage,
) -> Option<(&str, &[crate::module::services::DeviceService])> {
    let (_, img) = image.0.as_ref()?;
    (!img.services.is_empty()).then(|| (img.name.as_str(), img.services.as_slice()))
}

fn key(h: Handle) -> usize {
    match h {
        Handle::Module(x) | Handle::Library(x) => x,
    }
}

/// Forgets an image before the driver unloads it: its globals leave the registry inside the
/// tracker's `release_with`, so the unload waits for a restore writing them.
/// Returns the function and kernel handles of the image it knew (a later load may reuse
/// them).
fn forget(handle: Handle) -> Vec<usize> {
    let s = images();
    let img = s.images.lock().remove(&handle);
    let mut gone = Vec::new();
    s.funcs.lock().retain(|&f, (h, _)| {
        let keep = *h != handle;
        if !keep {
            gone.push(f);
        }
        keep
    });
    // A kernel handle may be launched as a function (CUDA 12): its cached state goes too.
    s.kernels.lock().retain(|&k, (h, _)| {
        let keep = *h != handle;
        if !keep {
            gone.push(k);
        }
        keep
    });
    s.aliases.lock().retain(|_, h| *h != handle);
    if let Handle::Library(l) = handle {
        s.asked.lock().retain(|&(_, asked)| asked != l);
    }
    s.unmapped.lock().clear();
    let Some(img) = img else { return gone };
    take_pending(handle, &img);
    let Some((agent, registry, tracker)) = img.registered.lock().take() else {
        return gone;
    };
    let ranges = registry.foreign_ranges(key(handle));
    tracker.release_with(agent, &ranges, || {
        registry.remove_foreign(key(handle));
    });
    gone
}

/// Forgets, before a reset of `agent`'s primary context, every module (its context is not
/// known, and the reset unloads those of that context) and every library whose globals were
/// resolved on `agent` (their addresses die with the context). Returns their function and
/// kernel handles, as [`forget`].
pub(crate) fn forget_for_reset(agent: AgentId) -> Vec<usize> {
    let handles: Vec<Handle> = images()
        .images
        .lock()
        .iter()
        .filter(|(h, img)| {
            matches!(h, Handle::Module(_))
                || img
                    .registered
                    .lock()
                    .as_ref()
                    .is_some_and(|(a, _, _)| *a == agent)
        })
        .map(|(h, _)| *h)
        .collect();
    // The context's library modules die with it (a new context may reuse their handles).
    let s = images();
    s.asked.lock().clear();
    s.missed.lock().clear();
    handles.into_iter().flat_map(forget).collect()
}

/// Forgets a module before the driver unloads it (see [`forget`]); returns its functions.
pub(crate) fn forget_module(m: usize) -> Vec<usize> {
    forget(Handle::Module(m))
}

/// Forgets a library before the driver unloads it (see [`forget`]); returns its functions.
pub(crate) fn forget_library(l: usize) -> Vec<usize> {
    forget(Handle::Library(l))
}

fn name_of(p: *const c_char) -> Arc<str> {
    // SAFETY: the entry's contract: a NUL-terminated name.
    Arc::from(unsafe { CStr::from_ptr(p) }.to_string_lossy().as_ref())
}

/// A graph kernel node's function `f` (the context's function of its kernel, a handle the
/// hooks never saw) takes the image and name of the node's kernel `k`
/// (`CUDA_KERNEL_NODE_PARAMS_v2::kern`, where the driver gives it), as from
/// `cuKernelGetFunction`; its module in this context then maps to that library too. Nothing
/// is noted when `k` maps to no image.
pub(crate) fn note_node_kernel(f: CUfunction, k: sys::CUkernel) {
    if f.is_null() || k.is_null() || std::ptr::addr_eq(f, k) {
        return;
    }
    let s = images();
    if s.funcs.lock().contains_key(&(f as usize)) {
        return;
    }
    let Some((h, _, name)) = image_of(k as CUfunction) else {
        return;
    };
    s.funcs.lock().insert(f as usize, (h, name));
    s.unmapped.lock().remove(&(f as usize));
    if let (Handle::Library(_), Some(m)) = (h, module_of(f)) {
        if s.aliases.lock().insert(m, h).is_none() {
            // A function asked before may be of this module.
            s.unmapped.lock().clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_librarys_unload_forgets_its_kernel_handles_as_well_as_its_functions() {
        let (lib, kernel, func, other) = (0x5151_0000usize, 0x5151_0100, 0x5151_0200, 0x5151_0300);
        let s = images();
        let e = (Handle::Library(lib), Arc::<str>::from("kr_k"));
        s.kernels.lock().insert(kernel, e.clone());
        s.funcs.lock().insert(func, e);
        s.funcs
            .lock()
            .insert(other, (Handle::Library(lib + 1), Arc::from("kr_other")));
        let mut gone = forget_library(lib);
        gone.sort_unstable();
        assert_eq!(
            gone,
            vec![kernel, func],
            "a kernel launched as a function included"
        );
        assert!(!s.kernels.lock().contains_key(&kernel));
        assert!(
            s.funcs.lock().contains_key(&other),
            "another library's kept"
        );
        forget_library(lib + 1);
    }
}
