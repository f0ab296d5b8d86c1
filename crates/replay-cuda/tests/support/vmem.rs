//! What the virtual-memory tests share: driver entries as an application that looks them up
//! with `dlsym` gets them, their types, and the device-0 location they map for.
#![allow(dead_code)] // each test binary uses some of them

use std::ffi::c_void;

use replay_cuda::intercept;
use replay_cuda::sys;

/// The driver entry `name` as an application that looks it up with `dlsym` gets it: the
/// wrapper when the interception wraps it, else the driver's own.
pub fn app_entry<T: Copy>(name: &std::ffi::CStr) -> T {
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: dlsym on the driver's handle with a NUL-terminated name.
    let p = unsafe { intercept::dlsym_answer(intercept::driver_handle(), name.as_ptr()) };
    assert!(!p.is_null(), "the driver has {name:?}");
    // SAFETY: `T` is the entry's function-pointer type (the CUDA headers), pointer-sized.
    unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) }
}

pub type CreateFn =
    unsafe extern "C" fn(*mut u64, usize, *const sys::CUmemAllocationProp, u64) -> sys::CUresult;
pub type ImportFn = unsafe extern "C" fn(*mut u64, *mut c_void, u32) -> sys::CUresult;
pub type ExportFn = unsafe extern "C" fn(*mut c_void, u64, u32, u64) -> sys::CUresult;
pub type ReserveFn = unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> sys::CUresult;
pub type MapFn = unsafe extern "C" fn(u64, usize, usize, u64, u64) -> sys::CUresult;
pub type AccessFn =
    unsafe extern "C" fn(u64, usize, *const sys::CUmemAccessDesc, usize) -> sys::CUresult;
pub type RangeFn = unsafe extern "C" fn(u64, usize) -> sys::CUresult;
pub type ReleaseFn = unsafe extern "C" fn(u64) -> sys::CUresult;

/// The size of every range these tests map.
pub const VM_BYTES: usize = 2 << 20;

/// Device 0 as a memory location.
pub fn device0() -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: 0,
    }
}
