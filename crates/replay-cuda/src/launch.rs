//! What a kernel launch is (SPEC §9.2): argument blocks, the launch configuration, and the raw
//! `cuLaunchKernel` every launch of the backend goes through (a pass, an ordinary run, a
//! digest kernel).
//!
//! ## Argument blocks
//!
//! An [`ArgBlock`] is the kernel's parameter buffer as the device sees it: each parameter at an
//! offset aligned to its alignment, in declaration order, plus the layout (offset and size of
//! every parameter). In library mode the caller builds it ([`ArgBlock::arg`]); when launches are
//! intercepted, [`ArgBlock::capture`] copies it out of the `kernelParams` array with the layout
//! from `cuFuncGetParamInfo`. The window reads the block's 8-byte-aligned words for scope
//! `arguments`, so device pointers (8-byte aligned parameters) are always found. Passes are
//! launched with `kernelParams` pointing into a private copy of the block; the driver copies
//! parameter values when `cuLaunchKernel` returns, so the copy may go right after.

use std::ffi::c_void;

use replay_core::Dim3;
use smallvec::SmallVec;

use crate::error::{CudaError, CudaResult};
use crate::result::DriverCall;
use crate::sys;

/// Largest parameter block a launch may carry (CUDA 12.1+ on Volta and later).
pub const MAX_PARAM_BYTES: usize = 32764;

/// Offset and size of one kernel parameter in an [`ArgBlock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ParamSlot {
    /// Byte offset in the block.
    pub offset: u32,
    /// Bytes.
    pub size: u32,
}

/// A value that can be a kernel parameter: plain bytes with a natural alignment.
pub trait KernelParam: Copy {
    /// Alignment of the parameter in the block.
    const ALIGN: u32;
    /// Little-endian bytes.
    fn bytes(&self) -> SmallVec<[u8; 16]>;
}

macro_rules! param_int {
    ($($t:ty),*) => {$(
        impl KernelParam for $t {
            const ALIGN: u32 = std::mem::align_of::<$t>() as u32;
            fn bytes(&self) -> SmallVec<[u8; 16]> {
                SmallVec::from_slice(&self.to_le_bytes())
            }
        }
    )*};
}
param_int!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// A device pointer parameter (8 bytes, 8-byte aligned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DevicePtr(pub u64);

impl KernelParam for DevicePtr {
    const ALIGN: u32 = 8;
    fn bytes(&self) -> SmallVec<[u8; 16]> {
        SmallVec::from_slice(&self.0.to_le_bytes())
    }
}

/// A kernel's parameter block and its layout (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArgBlock {
    bytes: SmallVec<[u8; 256]>,
    params: SmallVec<[ParamSlot; 16]>,
}

impl ArgBlock {
    /// An empty block (a kernel without parameters).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a parameter (builder style).
    pub fn arg<T: KernelParam>(mut self, v: T) -> Self {
        self.push(v);
        self
    }

    /// Appends a parameter.
    pub fn push<T: KernelParam>(&mut self, v: T) -> &mut Self {
        self.push_bytes(&v.bytes(), T::ALIGN)
    }

    /// Appends a parameter given as raw bytes with its alignment (a power of two up to 16;
    /// larger or invalid alignments are a programming error and panic).
    pub fn push_bytes(&mut self, bytes: &[u8], align: u32) -> &mut Self {
        assert!(
            align.is_power_of_two() && align <= 16,
            "parameter alignment {align} must be a power of two up to 16"
        );
        let offset = self.bytes.len().next_multiple_of(align as usize);
        self.bytes.resize(offset, 0);
        self.bytes.extend_from_slice(bytes);
        assert!(
            self.bytes.len() <= MAX_PARAM_BYTES,
            "parameter block of {} bytes exceeds {MAX_PARAM_BYTES}",
            self.bytes.len()
        );
        self.params.push(ParamSlot {
            offset: offset as u32,
            size: bytes.len() as u32,
        });
        self
    }

    /// A block from raw bytes and a layout; every slot must lie inside the bytes.
    pub fn from_layout(layout: &[ParamSlot], bytes: &[u8]) -> CudaResult<Self> {
        if bytes.len() > MAX_PARAM_BYTES {
            return Err(CudaError::InvalidArgument(format!(
                "parameter block of {} bytes exceeds {MAX_PARAM_BYTES}",
                bytes.len()
            )));
        }
        for (i, p) in layout.iter().enumerate() {
            let end = p.offset as usize + p.size as usize;
            if end > bytes.len() {
                return Err(CudaError::InvalidArgument(format!(
                    "parameter {i} at {}+{} lies outside the {}-byte block",
                    p.offset,
                    p.size,
                    bytes.len()
                )));
            }
        }
        Ok(Self {
            bytes: SmallVec::from_slice(bytes),
            params: SmallVec::from_slice(layout),
        })
    }

    /// Captures the block of an intercepted launch from its `kernelParams` array: parameter
    /// `i` is copied from `kernel_params[i]` to `layout[i].offset`.
    ///
    /// # Safety
    /// `kernel_params` must point to `layout.len()` pointers, the `i`-th of which points to at
    /// least `layout[i].size` readable bytes (what `cuLaunchKernel` itself requires).
    pub unsafe fn capture(layout: &[ParamSlot], kernel_params: *const *const c_void) -> Self {
        let len = layout
            .iter()
            .map(|p| p.offset as usize + p.size as usize)
            .max()
            .unwrap_or(0);
        let mut bytes: SmallVec<[u8; 256]> = SmallVec::from_elem(0, len);
        for (i, p) in layout.iter().enumerate() {
            // SAFETY: the caller guarantees `layout.len()` entries.
            let src = unsafe { *kernel_params.add(i) } as *const u8;
            if p.size == 0 || src.is_null() {
                continue;
            }
            // SAFETY: the caller guarantees `p.size` readable bytes at `src`; the destination
            // range lies inside `bytes` by construction of `len`.
            let s = unsafe { std::slice::from_raw_parts(src, p.size as usize) };
            bytes[p.offset as usize..p.offset as usize + p.size as usize].copy_from_slice(s);
        }
        Self {
            bytes,
            params: SmallVec::from_slice(layout),
        }
    }

    /// The block's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The layout.
    pub fn params(&self) -> &[ParamSlot] {
        &self.params
    }

    /// The block as the window's `Dispatch::kernarg`: padded with zeros to a multiple of 8, so
    /// every 8-byte-aligned word is visible to scope `arguments`.
    pub fn kernarg(&self) -> SmallVec<[u8; 256]> {
        let mut k = self.bytes.clone();
        k.resize(k.len().next_multiple_of(8), 0);
        k
    }
}

/// Bytes of a parameter block in 16-byte-aligned storage, with the `kernelParams` pointer
/// array into it.
#[derive(Debug)]
pub(crate) struct PackedParams {
    /// Owns the bytes the pointers point into.
    _storage: Vec<u128>,
    pointers: Vec<*mut c_void>,
}

impl PackedParams {
    /// Copies `bytes` and points one entry per slot of `layout` into the copy.
    pub fn new(layout: &[ParamSlot], bytes: &[u8]) -> CudaResult<Self> {
        let mut storage = vec![0u128; bytes.len().div_ceil(16).max(1)];
        {
            // SAFETY: `storage` holds at least `bytes.len()` initialised bytes; u8 has no
            // alignment or validity requirement.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(storage.as_mut_ptr() as *mut u8, storage.len() * 16)
            };
            dst[..bytes.len()].copy_from_slice(bytes);
        }
        let base = storage.as_mut_ptr() as *mut u8;
        let mut pointers = Vec::with_capacity(layout.len());
        for (i, p) in layout.iter().enumerate() {
            if p.offset as usize + p.size as usize > bytes.len() {
                return Err(CudaError::InvalidArgument(format!(
                    "parameter {i} at {}+{} lies outside the {}-byte block",
                    p.offset,
                    p.size,
                    bytes.len()
                )));
            }
            // SAFETY: in bounds of `storage` (checked above).
            pointers.push(unsafe { base.add(p.offset as usize) } as *mut c_void);
        }
        Ok(Self {
            _storage: storage,
            pointers,
        })
    }

    /// The `kernelParams` array (null for a kernel without parameters).
    pub fn as_kernel_params(&mut self) -> *mut *mut c_void {
        if self.pointers.is_empty() {
            std::ptr::null_mut()
        } else {
            self.pointers.as_mut_ptr()
        }
    }

    #[cfg(test)]
    fn read(&self, i: usize, size: usize) -> Vec<u8> {
        // SAFETY: test helper; `i` indexes a pointer into `storage`, `size` is its slot size.
        unsafe { std::slice::from_raw_parts(self.pointers[i] as *const u8, size) }.to_vec()
    }
}

/// Grid, block and dynamic shared memory of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks per grid.
    pub grid: Dim3,
    /// Threads per block.
    pub block: Dim3,
    /// Dynamic shared memory bytes per block.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// A one-dimensional launch.
    pub const fn linear(blocks: u32, threads: u32) -> Self {
        Self {
            grid: Dim3::new(blocks, 1, 1),
            block: Dim3::new(threads, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// Launches `func` on `stream` with the block `bytes` laid out as `layout`.
///
/// # Safety
/// 1. The context of `func` and `stream` is current on this thread.
/// 2. `layout` and `bytes` match the kernel's parameter list.
/// 3. Every device pointer in the block is valid for what the kernel does with it.
pub(crate) unsafe fn launch_raw(
    func: sys::CUfunction,
    cfg: &LaunchConfig,
    stream: sys::CUstream,
    layout: &[ParamSlot],
    bytes: &[u8],
) -> CudaResult<()> {
    let mut packed = PackedParams::new(layout, bytes)?;
    // SAFETY: guaranteed by the caller (1–3); the pointer array and its storage live until the
    // call returns, and the driver copies parameter values before it returns.
    unsafe {
        sys::cuLaunchKernel(
            func,
            cfg.grid.x,
            cfg.grid.y,
            cfg.grid.z,
            cfg.block.x,
            cfg.block.y,
            cfg.block.z,
            cfg.shared_mem_bytes,
            stream,
            packed.as_kernel_params(),
            std::ptr::null_mut(),
        )
    }
    .call("cuLaunchKernel")
}

/// A launch the window submits again: the application's own call, with the arguments it gave.
pub struct Relaunch {
    pub(crate) how: How,
    /// Launches the driver accepted or refused through this relaunch.
    pub(crate) launches: std::sync::atomic::AtomicU32,
    /// The last launch's status code.
    pub(crate) last: parking_lot::Mutex<sys::CUresult>,
}

impl std::fmt::Debug for Relaunch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relaunch").finish_non_exhaustive()
    }
}

/// The application's call.
pub(crate) enum How {
    Kernel {
        real: unsafe extern "C" fn(
            sys::CUfunction,
            std::ffi::c_uint,
            std::ffi::c_uint,
            std::ffi::c_uint,
            std::ffi::c_uint,
            std::ffi::c_uint,
            std::ffi::c_uint,
            std::ffi::c_uint,
            sys::CUstream,
            *mut *mut c_void,
            *mut *mut c_void,
        ) -> sys::CUresult,
        f: sys::CUfunction,
        grid: [std::ffi::c_uint; 3],
        block: [std::ffi::c_uint; 3],
        shmem: std::ffi::c_uint,
        stream: sys::CUstream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    },
    Ex {
        real: unsafe extern "C" fn(
            *const sys::CUlaunchConfig,
            sys::CUfunction,
            *mut *mut c_void,
            *mut *mut c_void,
        ) -> sys::CUresult,
        config: *const sys::CUlaunchConfig,
        f: sys::CUfunction,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    },
    /// A whole graph launch (graph profiling mode `graph`).
    Graph {
        real: unsafe extern "C" fn(sys::CUgraphExec, sys::CUstream) -> sys::CUresult,
        exec: sys::CUgraphExec,
        stream: sys::CUstream,
    },
}

// SAFETY: a relaunch lives only for the duration of the application's launch call that made it
// (the window runs synchronously inside that call), so the application's argument pointers it
// holds stay valid; the window may poll from the same thread only.
unsafe impl Send for Relaunch {}
// SAFETY: as above.
unsafe impl Sync for Relaunch {}

impl Relaunch {
    pub(crate) fn new(how: How) -> Self {
        Self {
            how,
            launches: std::sync::atomic::AtomicU32::new(0),
            last: parking_lot::Mutex::new(sys::CUresult::CUDA_SUCCESS),
        }
    }

    /// Submits the application's call once more.
    pub(crate) fn launch(&self) -> Result<(), CudaError> {
        // SAFETY: the application's own arguments, valid for the duration of its call (see the
        // Send impl); the real entry has this signature.
        let r = unsafe {
            match &self.how {
                How::Kernel {
                    real,
                    f,
                    grid,
                    block,
                    shmem,
                    stream,
                    params,
                    extra,
                } => real(
                    *f, grid[0], grid[1], grid[2], block[0], block[1], block[2], *shmem, *stream,
                    *params, *extra,
                ),
                How::Ex {
                    real,
                    config,
                    f,
                    params,
                    extra,
                } => real(*config, *f, *params, *extra),
                How::Graph { real, exec, stream } => real(*exec, *stream),
            }
        };
        self.launches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *self.last.lock() = r;
        if r == sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(CudaError::driver(
                "cuLaunchKernel (intercepted)",
                cudarc::driver::DriverError(r),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_aligned_in_declaration_order() {
        let b = ArgBlock::new()
            .arg(7u32)
            .arg(DevicePtr(0x7f00_0000_1000))
            .arg(3u8)
            .arg(2.5f32)
            .arg(-1i64);
        assert_eq!(
            b.params(),
            &[
                ParamSlot { offset: 0, size: 4 },
                ParamSlot { offset: 8, size: 8 },
                ParamSlot {
                    offset: 16,
                    size: 1
                },
                ParamSlot {
                    offset: 20,
                    size: 4
                },
                ParamSlot {
                    offset: 24,
                    size: 8
                },
            ]
        );
        assert_eq!(b.bytes().len(), 32);
        assert_eq!(&b.bytes()[0..4], &7u32.to_le_bytes());
        assert_eq!(&b.bytes()[4..8], &[0; 4], "padding is zero");
        assert_eq!(&b.bytes()[8..16], &0x7f00_0000_1000u64.to_le_bytes());
        assert_eq!(&b.bytes()[20..24], &2.5f32.to_le_bytes());
    }

    #[test]
    fn sixteen_byte_parameters_and_kernarg_padding() {
        let mut b = ArgBlock::new();
        b.push(1u8);
        b.push_bytes(&[0xAB; 16], 16);
        b.push(9u32);
        assert_eq!(
            b.params()[1],
            ParamSlot {
                offset: 16,
                size: 16
            }
        );
        assert_eq!(
            b.params()[2],
            ParamSlot {
                offset: 32,
                size: 4
            }
        );
        assert_eq!(b.bytes().len(), 36);
        let k = b.kernarg();
        assert_eq!(k.len(), 40, "padded to whole words");
        assert_eq!(&k[36..], &[0; 4]);
    }

    #[test]
    #[should_panic(expected = "power of two")]
    fn bad_alignment_is_a_programming_error() {
        ArgBlock::new().push_bytes(&[0; 3], 3);
    }

    #[test]
    fn pointers_are_visible_to_scope_arguments() {
        use replay_core::{
            AgentId, DispatchInfo, KernelId, KernelKey, Origin, QueueId, SubmissionKind,
        };
        let ptr_a = 0x7f12_3456_7800u64;
        let ptr_b = 0x7f12_3456_9910u64; // inside an allocation, not at its base
        let b = ArgBlock::new()
            .arg(1u32)
            .arg(DevicePtr(ptr_a))
            .arg(5u16)
            .arg(DevicePtr(ptr_b));
        let d = replay_core::Dispatch {
            info: DispatchInfo::new(
                AgentId(0),
                QueueId(0),
                KernelId(0),
                "k",
                Dim3::new(1, 1, 1),
                Dim3::new(1, 1, 1),
            ),
            kernel: KernelKey {
                agent: AgentId(0),
                code_object: 0,
                symbol: 0,
            },
            kind: SubmissionKind::KernelDispatch,
            kernarg: b.kernarg(),
            arg_layout: Default::default(),
            origin: Origin::SubmittingThread,
            handle: 0,
        };
        let words: Vec<u64> = d.argument_words().collect();
        assert!(words.contains(&ptr_a));
        assert!(words.contains(&ptr_b));
    }

    #[test]
    fn capture_from_kernel_params_round_trips() {
        // What an intercepted cuLaunchKernel hands over: one pointer per parameter, each to a
        // value somewhere in the caller's memory; the layout from cuFuncGetParamInfo.
        let a: u32 = 0xDEAD_BEEF;
        let p: u64 = 0x7000_0000_0040;
        let c: [u8; 16] = core::array::from_fn(|i| i as u8);
        let d: u16 = 0x1234;
        let layout = [
            ParamSlot { offset: 0, size: 4 },
            ParamSlot { offset: 8, size: 8 },
            ParamSlot {
                offset: 16,
                size: 16,
            },
            ParamSlot {
                offset: 32,
                size: 2,
            },
        ];
        let ptrs: [*const c_void; 4] = [
            &a as *const u32 as *const c_void,
            &p as *const u64 as *const c_void,
            c.as_ptr() as *const c_void,
            &d as *const u16 as *const c_void,
        ];
        // SAFETY: four valid pointers, each to at least its slot's size.
        let b = unsafe { ArgBlock::capture(&layout, ptrs.as_ptr()) };
        let built = ArgBlock::new()
            .arg(a)
            .arg(DevicePtr(p))
            .arg_bytes16(c)
            .arg(d);
        assert_eq!(b, built);

        // And the launch-side pointer array reproduces every parameter from the block.
        let packed = PackedParams::new(b.params(), b.bytes()).unwrap();
        assert_eq!(packed.read(0, 4), a.to_le_bytes());
        assert_eq!(packed.read(1, 8), p.to_le_bytes());
        assert_eq!(packed.read(2, 16), c);
        assert_eq!(packed.read(3, 2), d.to_le_bytes());
    }

    #[test]
    fn layouts_outside_the_block_are_rejected() {
        let bad = [ParamSlot { offset: 8, size: 8 }];
        assert!(ArgBlock::from_layout(&bad, &[0; 12]).is_err());
        assert!(PackedParams::new(&bad, &[0; 12]).is_err());
        let ok = ArgBlock::from_layout(&bad, &[0; 16]).unwrap();
        assert_eq!(ok.params(), &bad);
        let mut empty = PackedParams::new(&[], &[]).unwrap();
        assert!(empty.as_kernel_params().is_null());
    }

    impl ArgBlock {
        fn arg_bytes16(mut self, b: [u8; 16]) -> Self {
            self.push_bytes(&b, 16);
            self
        }
    }
}
