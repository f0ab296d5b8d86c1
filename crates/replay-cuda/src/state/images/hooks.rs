//! The hooks of the code-loading entries: `cuModuleLoad*` and `cuLibraryLoad*` record the
//! image the driver just accepted, `cuModuleGetFunction`, `cuLibraryGetKernel` and
//! `cuKernelGetFunction` tie a handle to its image and name. Apart from the registry they
//! fill, since these are the only parts that read the entries' raw arguments.

use std::ffi::{c_char, c_uint, c_void, CStr};

use cudarc::driver::sys::{self, CUfunction, CUresult};

use super::{images, library_of, module_of, name_of, raw_name, record, Handle};
use crate::module::image::{self, ImageNote};

fn file_name(name: *const c_char) -> Option<String> {
    if name.is_null() {
        return None;
    }
    // SAFETY: the entry's contract: a NUL-terminated path.
    let path = unsafe { CStr::from_ptr(name) };
    Some(path.to_string_lossy().into_owned())
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
            file_name(fname),
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
        record(Handle::Module(unsafe { *m } as usize), None, copy(image));
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
        record(Handle::Module(unsafe { *m } as usize), None, copy(image));
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
        record(Handle::Library(unsafe { *l } as usize), None, copy(code));
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
            file_name(fname),
            read_file(fname).as_deref().map_err(Clone::clone),
        );
    }
    r
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
        // SAFETY: the driver wrote the handle.
        let func = unsafe { *f };
        let known = imgs.kernels.lock().get(&(k as usize)).cloned();
        // A kernel the hooks did not see fetched (`cuLibraryEnumerateKernels`): its library,
        // where the driver says it.
        let e = known.or_else(|| {
            let l = Handle::Library(library_of(k)?);
            imgs.images.lock().contains_key(&l).then_some(())?;
            Some((l, raw_name(func)?))
        });
        if let Some(e) = e {
            // The library's module in this context: other functions of it map to the library.
            if let Some(m) = module_of(func) {
                imgs.aliases.lock().insert(m, e.0);
                imgs.unmapped.lock().clear();
            }
            imgs.funcs.lock().insert(func as usize, e);
        }
    }
    r
}
