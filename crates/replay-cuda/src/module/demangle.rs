//! Kernel names as people read them (SPEC §9.2 "Unmodified applications": the filter and the
//! output name kernels): the Itanium C++ ABI's `__cxa_demangle`, looked up at run time in the
//! C++ runtime already in the process (else `libstdc++.so.6`, opened once), so no dependency
//! is added. A name it cannot demangle (C names, Triton's, a process without a C++ runtime)
//! stays as given.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

type CxaDemangle =
    unsafe extern "C" fn(*const c_char, *mut c_char, *mut usize, *mut c_int) -> *mut c_char;

extern "C" {
    fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn free(p: *mut c_void);
}

const RTLD_NOW: c_int = 2;
const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();

fn cxa_demangle() -> Option<CxaDemangle> {
    static F: OnceLock<usize> = OnceLock::new();
    let p = *F.get_or_init(|| {
        // SAFETY: symbol lookups and a dlopen of the C++ runtime by its soname, with constant
        // NUL-terminated strings; loading libstdc++ runs only its own initialisers.
        unsafe {
            let mut p = dlsym(RTLD_DEFAULT, c"__cxa_demangle".as_ptr());
            if p.is_null() {
                let h = dlopen(c"libstdc++.so.6".as_ptr(), RTLD_NOW);
                if !h.is_null() {
                    p = dlsym(h, c"__cxa_demangle".as_ptr());
                }
            }
            p as usize
        }
    });
    // SAFETY: a non-null `__cxa_demangle` has the ABI's signature.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, CxaDemangle>(p) })
}

/// `name` demangled, or `name` itself when it is not a mangled C++ name or no demangler is
/// found.
pub fn demangle(name: &str) -> String {
    if !name.starts_with("_Z") {
        return name.to_owned();
    }
    let (Some(f), Ok(c)) = (cxa_demangle(), CString::new(name)) else {
        return name.to_owned();
    };
    let mut status: c_int = -1;
    // SAFETY: a NUL-terminated input; null buffer and length ask the demangler to allocate
    // the result with malloc, which we free below.
    let out = unsafe {
        f(
            c.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut status,
        )
    };
    if out.is_null() {
        return name.to_owned();
    }
    let s = (status == 0).then(|| {
        // SAFETY: on success the result is a NUL-terminated string the demangler allocated.
        unsafe { CStr::from_ptr(out) }
            .to_string_lossy()
            .into_owned()
    });
    // SAFETY: allocated by the demangler with malloc; freed once.
    unsafe { free(out.cast()) };
    s.unwrap_or_else(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn mangled_names_read_as_declared_and_others_stay() {
        if super::cxa_demangle().is_none() {
            eprintln!("skipped: no C++ runtime with __cxa_demangle");
            return;
        }
        assert_eq!(
            demangle("_Z6kr_rmwPmmm"),
            "kr_rmw(unsigned long*, unsigned long, unsigned long)"
        );
        assert_eq!(
            demangle("_ZN7cutlass6KernelINS_4gemm6kernel4GemmEEEvNT_6ParamsE"),
            "void cutlass::Kernel<cutlass::gemm::kernel::Gemm>(cutlass::gemm::kernel::Gemm::Params)"
        );
        assert_eq!(demangle("triton_poi_fused_add_0"), "triton_poi_fused_add_0");
        assert_eq!(demangle("_Znot a name"), "_Znot a name");
    }
}
