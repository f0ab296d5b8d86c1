//! Pointer and string arguments (SPEC §10): NULL and alignment
//! checks, out-parameters, C strings in, versioned structs read and written up to the caller's
//! `size`, strings copied out into caller buffers. Each `unsafe` helper has a numbered
//! `# Safety` list.

use std::ffi::{c_char, CStr, CString};
use std::mem::{align_of, size_of};

use super::error::Error;
use crate::sys::*;

/// Fails with `NullPointer(what)` when `p` is NULL.
pub(crate) fn non_null<T>(p: *const T, what: &'static str) -> Result<(), Error> {
    if p.is_null() {
        Err(Error::NullPointer(what))
    } else {
        Ok(())
    }
}

/// Writes `value` through an out-parameter after checking it.
///
/// # Safety
///
/// 1. `p` is NULL or valid for a write of one `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, what: &'static str, value: T) -> Result<(), Error> {
    non_null(p, what)?;
    if p as usize % align_of::<T>() != 0 {
        return Err(Error::BadArgument(format!("`{what}` is misaligned")));
    }
    // SAFETY: non-null and aligned (checked above); valid for writes (caller, item 1).
    unsafe { p.write(value) };
    Ok(())
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
///
/// 1. `p` is NULL or points to a NUL-terminated string that stays unchanged for `'a`.
pub(crate) unsafe fn c_str<'a>(p: *const c_char, what: &'static str) -> Result<&'a str, Error> {
    non_null(p, what)?;
    // SAFETY: non-null (checked above); NUL-terminated and unchanged for 'a (caller, item 1).
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map_err(|e| Error::BadArgument(format!("`{what}` is not valid UTF-8: {e}")))
}

/// Struct types whose all-zero bit pattern is a valid value (integers, raw pointers,
/// `Option` of function pointers, arrays of those).
///
/// # Safety
///
/// Implement only for types where every field accepts the all-zero bit pattern.
pub(crate) unsafe trait ZeroValid: Copy {
    /// The all-zero value.
    fn zeroed() -> Self {
        // SAFETY: the implementor guarantees all-zero is a valid value of Self.
        unsafe { std::mem::MaybeUninit::<Self>::zeroed().assume_init() }
    }
}

// SAFETY: integers and raw pointers only.
unsafe impl ZeroValid for kreplay_kernel_filter_t {}
// SAFETY: integers, a float and arrays of integers only.
unsafe impl ZeroValid for kreplay_summary_t {}
// SAFETY: an integer and floats only.
unsafe impl ZeroValid for kreplay_phases_t {}
// SAFETY: integers only.
unsafe impl ZeroValid for kreplay_graph_node_t {}

/// Checks a versioned struct pointer without copying it: NULL, alignment, and `size` (at
/// least `first_version`).
///
/// # Safety
///
/// 1. `p` is NULL or points to a struct whose first 8 bytes are its `size` (u64), readable.
pub(crate) unsafe fn check_versioned<T>(
    p: *const T,
    what: &'static str,
    first_version: usize,
) -> Result<(), Error> {
    non_null(p, what)?;
    if p as usize % align_of::<T>() != 0 || p as usize % align_of::<u64>() != 0 {
        return Err(Error::BadArgument(format!("`{what}` is misaligned")));
    }
    // SAFETY: non-null and aligned for u64 (checked); the first 8 bytes are readable
    // (caller, item 1).
    let size = unsafe { p.cast::<u64>().read() };
    if size < first_version as u64 {
        return Err(Error::BadSize {
            what,
            got: size,
            min: first_version,
        });
    }
    Ok(())
}

/// Reads a versioned struct the caller passes in: checks NULL, alignment and `size` (at least
/// `first_version` bytes), and copies `min(size, size_of::<T>())` bytes; fields the caller's
/// version lacks stay zero.
///
/// # Safety
///
/// 1. `p` is NULL or points to a readable struct whose first 8 bytes are its `size` (u64) and
///    whose `size` bytes are readable.
pub(crate) unsafe fn read_versioned<T: ZeroValid>(
    p: *const T,
    what: &'static str,
    first_version: usize,
) -> Result<T, Error> {
    non_null(p, what)?;
    if p as usize % align_of::<T>() != 0 {
        return Err(Error::BadArgument(format!("`{what}` is misaligned")));
    }
    // SAFETY: non-null and aligned for T, whose alignment is at least u64's (its first field);
    // the first 8 bytes are readable (caller, item 1).
    let size = unsafe { p.cast::<u64>().read() };
    if size < first_version as u64 {
        return Err(Error::BadSize {
            what,
            got: size,
            min: first_version,
        });
    }
    let n = size.min(size_of::<T>() as u64) as usize;
    let mut value = T::zeroed();
    // SAFETY: `n` bytes are readable at `p` (n <= size, caller item 1) and writable at `value`
    // (n <= size_of::<T>()); the regions are distinct; the bytes come from a struct of the
    // same C layout, so every field is a valid value.
    unsafe {
        std::ptr::copy_nonoverlapping(p.cast::<u8>(), (&mut value as *mut T).cast::<u8>(), n)
    };
    Ok(value)
}

/// Writes a versioned struct into the caller's: checks NULL, alignment and `size` (at least
/// `first_version`), then copies `min(size, size_of::<T>())` bytes of `value`, whose `size`
/// field is first set to that number.
///
/// # Safety
///
/// 1. `p` is NULL or points to a struct whose first 8 bytes are its `size` (u64), readable,
///    and whose `size` bytes are writable.
/// 2. `T`'s first field is its `size` (u64).
pub(crate) unsafe fn write_versioned<T: ZeroValid>(
    p: *mut T,
    what: &'static str,
    first_version: usize,
    mut value: T,
) -> Result<(), Error> {
    non_null(p, what)?;
    if p as usize % align_of::<T>() != 0 {
        return Err(Error::BadArgument(format!("`{what}` is misaligned")));
    }
    // SAFETY: non-null, aligned, first 8 bytes readable (caller, item 1).
    let size = unsafe { p.cast::<u64>().read() };
    if size < first_version as u64 {
        return Err(Error::BadSize {
            what,
            got: size,
            min: first_version,
        });
    }
    let n = size.min(size_of::<T>() as u64);
    // SAFETY: T's first field is a u64 (caller, item 2); `value` is a local of type T.
    unsafe { (&mut value as *mut T).cast::<u64>().write(n) };
    // SAFETY: `n` bytes are readable from `value` (n <= size_of::<T>()) and writable at `p`
    // (n <= size, caller item 1); the regions are distinct.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&value as *const T).cast::<u8>(),
            p.cast::<u8>(),
            n as usize,
        )
    };
    Ok(())
}

/// Copies `s` with a NUL into the caller's buffer; `*required` always receives the bytes
/// needed. A too small buffer is left untouched.
///
/// # Safety
///
/// 1. `buffer` is NULL or valid for writes of `buffer_size` bytes.
/// 2. `required` is NULL or valid for a write of one `usize`.
pub(crate) unsafe fn copy_out_str(
    s: &str,
    buffer: *mut c_char,
    buffer_size: usize,
    required: *mut usize,
) -> Result<(), Error> {
    non_null(required, "required")?;
    if buffer.is_null() && buffer_size > 0 {
        return Err(Error::NullPointer("buffer (with buffer_size > 0)"));
    }
    let bytes = s.as_bytes();
    let needed = bytes.len() + 1;
    // SAFETY: `required` is non-null (checked) and valid for writes (caller, item 2).
    unsafe { write_out(required, "required", needed)? };
    if buffer_size < needed {
        return Err(Error::BufferTooSmall {
            required: needed,
            given: buffer_size,
        });
    }
    // SAFETY: `buffer` is non-null (buffer_size >= needed > 0, checked above) and valid for
    // `buffer_size >= needed` bytes (caller, item 1); `bytes` is a distinct Rust allocation.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buffer, bytes.len());
        buffer.add(bytes.len()).write(0);
    }
    Ok(())
}

/// A C string from Rust text; interior NUL bytes become U+FFFD.
pub(crate) fn lossy_cstring(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|_| {
        CString::new(s.replace('\0', "\u{fffd}")).expect("no NUL bytes are left")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_versioned_checks_null_size_and_alignment() {
        let mut f = kreplay_kernel_filter_t::zeroed();
        // SAFETY: NULL is allowed by the contract.
        let r = unsafe { read_versioned::<kreplay_kernel_filter_t>(std::ptr::null(), "filter", 8) };
        assert_eq!(r.unwrap_err().status(), KREPLAY_STATUS_NULL_POINTER);

        f.size = 4;
        // SAFETY: `f` is a valid, aligned filter.
        let r = unsafe { read_versioned(&f, "filter", first_version::KERNEL_FILTER) };
        let e = r.unwrap_err();
        assert_eq!(e.status(), KREPLAY_STATUS_BAD_SIZE);
        assert!(e.to_string().contains("`filter->size` is 4"), "{e}");

        f.size = first_version::KERNEL_FILTER as u64;
        f.skip = 5;
        // SAFETY: as above.
        let r = unsafe { read_versioned(&f, "filter", first_version::KERNEL_FILTER) }.unwrap();
        assert_eq!(r.skip, 5);

        // A misaligned pointer is refused before anything is read.
        let bytes = [0u64; 16];
        let p = (bytes.as_ptr() as *const u8).wrapping_add(1) as *const kreplay_kernel_filter_t;
        // SAFETY: the pointer is refused on alignment before it is dereferenced.
        let r = unsafe { read_versioned(p, "filter", first_version::KERNEL_FILTER) };
        assert_eq!(r.unwrap_err().status(), KREPLAY_STATUS_BAD_ARGUMENT);
    }

    #[test]
    fn read_versioned_copies_only_what_the_caller_version_has() {
        // A caller built against a longer (future) struct: only our size is read.
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Longer {
            f: kreplay_kernel_filter_t,
            extra: u64,
        }
        let mut l = Longer {
            f: kreplay_kernel_filter_t::zeroed(),
            extra: 99,
        };
        l.f.size = size_of::<Longer>() as u64;
        l.f.count = 3;
        // SAFETY: `l` is readable for its full size, which its `size` field states.
        let r = unsafe { read_versioned(&l.f, "filter", first_version::KERNEL_FILTER) }.unwrap();
        assert_eq!(r.count, 3);
    }

    #[test]
    fn copy_out_reports_the_required_size() {
        let mut need = 0usize;
        // SAFETY: NULL buffer with size 0 is allowed; `need` is writable.
        let r = unsafe { copy_out_str("abc", std::ptr::null_mut(), 0, &mut need) };
        assert_eq!(r.unwrap_err().status(), KREPLAY_STATUS_BUFFER_TOO_SMALL);
        assert_eq!(need, 4);
        let mut buf = [0x55 as c_char; 4];
        // SAFETY: `buf` holds 4 bytes.
        unsafe { copy_out_str("abc", buf.as_mut_ptr(), 3, &mut need) }.unwrap_err();
        assert_eq!(buf[0], 0x55, "a too small buffer is untouched");
        // SAFETY: as above.
        unsafe { copy_out_str("abc", buf.as_mut_ptr(), 4, &mut need) }.unwrap();
        // SAFETY: the buffer now holds a NUL-terminated string.
        assert_eq!(unsafe { CStr::from_ptr(buf.as_ptr()) }, c"abc");
        // SAFETY: NULL pointers are refused before use.
        let r = unsafe { copy_out_str("abc", std::ptr::null_mut(), 4, &mut need) };
        assert_eq!(r.unwrap_err().status(), KREPLAY_STATUS_NULL_POINTER);
        // SAFETY: as above.
        let r = unsafe { copy_out_str("abc", buf.as_mut_ptr(), 4, std::ptr::null_mut()) };
        assert_eq!(r.unwrap_err().status(), KREPLAY_STATUS_NULL_POINTER);
    }
}
