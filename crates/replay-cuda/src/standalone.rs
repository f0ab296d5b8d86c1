//! Standalone replay of a captured CUDA launch (SPEC §13): `kreplay replay DIR` for a capture
//! whose backend is `cuda`.
//!
//! Every region that is not a module variable is recreated at its captured device address,
//! so pointers stored inside the data stay valid: the regions' granules (the driver's minimum
//! mapping granularity) are merged into ranges, each reserved at its address
//! (`cuMemAddressReserve` with the address, a hint the driver may not honour), backed by a
//! physical allocation (`cuMemCreate`, `cuMemMap`) and opened read-write to the device
//! (`cuMemSetAccess`). All ranges are reserved before anything else is allocated, so the
//! replay's own allocations cannot take the addresses first.
//!
//! The order, and why: under unified addressing a device address is a virtual address of
//! this process, shared with the shared libraries, the host heap and the driver's own
//! reservations (made when libcuda is loaded, at `cuInit`, at context creation). So the
//! caller reads the manifests first and holds every range as a host placeholder
//! ([`Placeholders::hold`], [`placeholder`]) *before* anything loads or initialises the
//! driver; this module then opens the device, and releases each range's placeholder
//! immediately before `cuMemAddressReserve` asks for it ([`replay_with`]; [`replay`] holds
//! them itself, for a process whose driver may already be loaded). A range the driver
//! still places elsewhere (or refuses) is released and tried again per region
//! ([`plan_pieces`]: regions that share a granule stay together); a piece that cannot be had
//! either is an [`StandaloneError::Address`] naming its first region and what holds the
//! range (`/proc/self/maps`), and whether it was taken before the driver was loaded. A region
//! is never replayed at another address.
//!
//! The code image is loaded as the driver got it (`cuModuleLoadData`; PTX gets its NUL). Module
//! variables are looked up by symbol: one the load placed at another address is written there
//! (the kernel reaches it by symbol), unless a pointer word of the argument block points into
//! it, which is an error naming it. The launch uses the captured grid, block and dynamic
//! shared memory, and the captured launch attributes through `cuLaunchKernelEx` (those that
//! hold no handle or pointer of the capturing process: cluster dimensions, priority, ...;
//! the others are reported as not applied), with the argument block split at the kernel's parameter offsets
//! (`cuFuncGetParamInfo`; without it, the block is handed whole as `extra`).
//!
//! **Relocation.** The driver honours an address hint only inside its own virtual-address
//! reservations, which a new process places elsewhere (a range free in the replay process is
//! still reserved elsewhere: `BENCHMARKS.md`, "The merged build on real programs").
//! Under [`Relocation::Allow`] (what `kreplay replay` asks for) a range it will not give is recreated where it
//! places it; the argument block's pointer words into it (the capture names each) are
//! rewritten, and the replay reports the relocation and how many 8-byte words inside the
//! regions' inputs look like pointers into a relocated range ([`Replayed::stored_pointers`]):
//! those are not rewritten (a data word cannot be told from a pointer), so a kernel that
//! follows them reads the captured addresses, which the output comparison shows.
//! [`Relocation::Refuse`] fails with the address error instead.
//!
//! Each pass writes the inputs, launches once on the legacy stream between two timing events,
//! waits, and reads every region back; the caller compares them with the captured outputs.

use std::ffi::{c_void, CString};
use std::sync::Arc;

use replay_capture::LoadedCapture;

use crate::device::{Device, Event};
use crate::error::CudaError;
use crate::result::DriverCall;
use crate::sys;

pub mod placeholder;
pub use placeholder::{plan_pieces, plan_ranges, Placeholders};

/// Why a capture could not be replayed on the CUDA device.
#[derive(Debug, thiserror::Error)]
pub enum StandaloneError {
    /// A driver call failed.
    #[error(transparent)]
    Driver(#[from] CudaError),
    /// A region cannot be had at its captured address.
    #[error(
        "region {index} at {base:#x} ({size} bytes) cannot be recreated at its address: {why}"
    )]
    Address {
        /// Region index.
        index: usize,
        /// Its captured base.
        base: u64,
        /// Its size.
        size: u64,
        /// Why.
        why: String,
    },
    /// The capture holds something this replay cannot rebuild.
    #[error("{0}")]
    Unsupported(String),
}

/// What a replay did.
#[derive(Debug, Clone, Default)]
pub struct Replayed {
    /// Per pass, per region (the manifest's order): the bytes after the pass.
    pub outputs: Vec<Vec<Vec<u8>>>,
    /// Per pass: the launch's GPU time in seconds.
    pub seconds: Vec<f64>,
    /// Module variables the load placed elsewhere than in the captured run: (region, address).
    pub moved_variables: Vec<(usize, u64)>,
    /// Launch attributes not applied again (they hold a handle or pointer of the capturing
    /// process, or this build does not know them), by name.
    pub skipped_attributes: Vec<String>,
    /// Address ranges this process could not have at their captured addresses, recreated
    /// elsewhere ([`Relocation`]): (captured start, end, start here).
    pub relocated: Vec<(u64, u64, u64)>,
    /// Argument-block words rewritten to the relocated addresses.
    pub rewritten_words: usize,
    /// 8-byte-aligned words inside the regions' input bytes whose value falls in a relocated
    /// range: pointers the kernel may follow, not rewritten (a data word cannot be told from
    /// one), so the outputs may differ from the captured ones where the kernel follows them.
    pub stored_pointers: usize,
}

/// What a replay does with a range the driver will not place at its captured address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relocation {
    /// Recreate it wherever the driver places it, rewrite the argument block's pointer words
    /// into it and report both, with the words inside memory that look like pointers into it
    /// ([`Replayed::relocated`]): what `kreplay replay` does unless told `--exact-addresses`
    /// (the driver honours an address hint only inside its own reservations, which another
    /// process places elsewhere).
    Allow,
    /// Fail with [`StandaloneError::Address`] ([`replay`] and [`replay_with`]).
    Refuse,
}

/// A reserved, mapped range; unmapped and released on drop.
struct Range {
    base: u64,
    size: u64,
    handle: Option<u64>,
    mapped: bool,
}

impl Drop for Range {
    fn drop(&mut self) {
        // SAFETY: undoes what `reserve` did on this range, once; failures leave the process's
        // address space as the driver has it, which ends with the replay.
        unsafe {
            if self.mapped {
                let _ = sys::cuMemUnmap(self.base, self.size as usize);
            }
            let _ = sys::cuMemAddressFree(self.base, self.size as usize);
            if let Some(h) = self.handle {
                let _ = sys::cuMemRelease(h);
            }
        }
    }
}

fn location(ordinal: i32) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: ordinal,
    }
}

fn prop(ordinal: i32) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType_enum(0),
        location: location(ordinal),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// Where the driver put a reservation asked for at an address.
enum Placed {
    /// At the address: reserved, backed and open to the device.
    At(Range),
    /// Elsewhere (released again).
    Elsewhere(u64),
    /// Not at all.
    Refused(CudaError),
}

/// Reserves `[lo, hi)` at its address and backs it; a driver error after the reservation is
/// the caller's error, the reservation itself is `Placed`.
fn reserve_one(ordinal: i32, lo: u64, hi: u64, granule: u64) -> Result<Placed, CudaError> {
    let size = hi - lo;
    let mut got: sys::CUdeviceptr = 0;
    // SAFETY: an out pointer to a live local; the address is only a request.
    let r = unsafe { sys::cuMemAddressReserve(&mut got, size as usize, granule as usize, lo, 0) }
        .call("cuMemAddressReserve");
    if let Err(e) = r {
        return Ok(Placed::Refused(e));
    }
    let mut range = Range {
        base: got,
        size,
        handle: None,
        mapped: false,
    };
    if got != lo {
        // Released by the drop.
        return Ok(Placed::Elsewhere(got));
    }
    back(ordinal, &mut range)?;
    Ok(Placed::At(range))
}

/// Backs the reservation `range` with one physical allocation of its size, mapped and opened
/// read-write to the device.
fn back(ordinal: i32, range: &mut Range) -> Result<(), CudaError> {
    let (base, size) = (range.base, range.size as usize);
    let p = prop(ordinal);
    let mut h = 0u64;
    // SAFETY: a fully initialised property block and an out pointer to a live local.
    unsafe { sys::cuMemCreate(&mut h, size, &p, 0) }.call("cuMemCreate")?;
    range.handle = Some(h);
    // SAFETY: the whole reservation, the handle just created of the same size.
    unsafe { sys::cuMemMap(base, size, 0, h, 0) }.call("cuMemMap")?;
    range.mapped = true;
    let access = sys::CUmemAccessDesc {
        location: location(ordinal),
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: the range is mapped; one descriptor.
    unsafe { sys::cuMemSetAccess(base, size, &access, 1) }.call("cuMemSetAccess")?;
    Ok(())
}

/// Why `[lo, hi)` was not placed at its address, naming what holds it.
fn not_placed(placed: Placed, lo: u64, hi: u64, holds: &Placeholders) -> String {
    let size = hi - lo;
    let now = placeholder::describe_holders(lo, hi);
    let mut why = match placed {
        Placed::Elsewhere(got) => format!(
            "the driver reserved {size} bytes at {got:#x}, not at {lo:#x} (that range is taken in this process: {now})"
        ),
        Placed::Refused(e) => format!("reserving {size} bytes at {lo:#x}: {e} ({now})"),
        Placed::At(_) => String::new(),
    };
    if let Some(r) = holds.refusal(lo, hi) {
        why.push_str(&format!(
            "; {:#x}-{:#x} was already taken when the replay started, before the driver was loaded ({})",
            r.lo, r.hi, r.why
        ));
    }
    why
}

/// Reserves the range `[lo, hi)` at its address (its placeholder released just before), else
/// each of its pieces; an address error names the first region of the piece that cannot be
/// had and what holds it.
fn reserve(
    ordinal: i32,
    (lo, hi, first): (u64, u64, usize),
    pieces: &[(u64, u64, usize)],
    granule: u64,
    regions: &[replay_capture::RegionEntry],
    holds: &mut Placeholders,
) -> Result<Vec<Range>, StandaloneError> {
    let address = |index: usize, why: String| {
        let r = &regions[index];
        StandaloneError::Address {
            index: r.index,
            base: r.base,
            size: r.size,
            why,
        }
    };
    holds.release(lo, hi);
    let whole = match reserve_one(ordinal, lo, hi, granule)? {
        Placed::At(range) => return Ok(vec![range]),
        other => other,
    };
    let pieces: Vec<(u64, u64, usize)> = pieces
        .iter()
        .copied()
        .filter(|&(a, b, _)| lo <= a && b <= hi)
        .collect();
    if pieces.len() < 2 {
        return Err(address(first, not_placed(whole, lo, hi, holds)));
    }
    let mut out = Vec::with_capacity(pieces.len());
    for (a, b, i) in pieces {
        match reserve_one(ordinal, a, b, granule)? {
            Placed::At(range) => out.push(range),
            other => return Err(address(i, not_placed(other, a, b, holds))),
        }
    }
    Ok(out)
}

/// Reserves `size` bytes wherever the driver places them and backs them (the relocation of a
/// range it would not give at its captured address).
fn reserve_anywhere(ordinal: i32, size: u64, granule: u64) -> Result<Range, CudaError> {
    let mut got: sys::CUdeviceptr = 0;
    // SAFETY: an out pointer to a live local; no address asked for.
    unsafe { sys::cuMemAddressReserve(&mut got, size as usize, granule as usize, 0, 0) }
        .call("cuMemAddressReserve")?;
    let mut range = Range {
        base: got,
        size,
        handle: None,
        mapped: false,
    };
    back(ordinal, &mut range)?;
    Ok(range)
}

/// Where `addr` of the capturing run lives here: moved by the relocation whose captured range
/// holds it, else unchanged.
pub fn relocate(addr: u64, relocated: &[(u64, u64, u64)]) -> u64 {
    relocated
        .iter()
        .find(|&&(lo, hi, _)| lo <= addr && addr < hi)
        .map_or(addr, |&(lo, _, at)| at + (addr - lo))
}

/// 8-byte-aligned words of `bytes` whose value falls in a relocated captured range.
pub fn pointer_like_words(bytes: &[u8], relocated: &[(u64, u64, u64)]) -> usize {
    bytes
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        .filter(|&v| relocated.iter().any(|&(lo, hi, _)| lo <= v && v < hi))
        .count()
}

/// The loaded code image; unloaded on drop.
struct Module(sys::CUmodule);

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: the module loaded by `replay`, unloaded once.
        let _ = unsafe { sys::cuModuleUnload(self.0) };
    }
}

fn write(addr: u64, bytes: &[u8]) -> Result<(), CudaError> {
    if bytes.is_empty() {
        return Ok(());
    }
    // SAFETY: `addr` is a range this replay mapped (or the module's variable) of at least
    // `bytes.len()` bytes; the copy is waited for before `bytes` is dropped.
    unsafe {
        sys::cuMemcpyHtoDAsync_v2(
            addr,
            bytes.as_ptr().cast(),
            bytes.len(),
            std::ptr::null_mut(),
        )
        .call("cuMemcpyHtoDAsync")?;
        sys::cuCtxSynchronize().call("cuCtxSynchronize")
    }
}

fn read(addr: u64, len: u64) -> Result<Vec<u8>, CudaError> {
    let mut out = vec![0u8; len as usize];
    if len == 0 {
        return Ok(out);
    }
    // SAFETY: as in `write`; `out` has `len` bytes and outlives the wait.
    unsafe {
        sys::cuMemcpyDtoHAsync_v2(
            out.as_mut_ptr().cast(),
            addr,
            len as usize,
            std::ptr::null_mut(),
        )
        .call("cuMemcpyDtoHAsync")?;
        sys::cuCtxSynchronize().call("cuCtxSynchronize")?;
    }
    Ok(out)
}

/// The kernel's parameter slots (offset, size), where the driver can say.
fn param_slots(f: sys::CUfunction) -> Option<Vec<(usize, usize)>> {
    let mut slots = Vec::new();
    for i in 0..4096usize {
        let (mut off, mut size) = (0usize, 0usize);
        // SAFETY: the function just got from the module; out pointers to live locals.
        let r = unsafe { sys::cuFuncGetParamInfo(f, i, &mut off, &mut size) };
        if r != sys::CUresult::CUDA_SUCCESS {
            break;
        }
        slots.push((off, size));
    }
    (!slots.is_empty()).then_some(slots)
}

/// Replays `c` on its device for `passes` passes (at least one), holding its address ranges
/// first ([`Placeholders::hold`]); where the driver is already loaded in this process, its
/// own reservations were made before (`kreplay replay` holds them earlier, [`replay_with`]).
pub fn replay(c: &LoadedCapture, passes: u64) -> Result<Replayed, StandaloneError> {
    let mut holds = Placeholders::hold(&[&c.manifest]);
    replay_with(c, passes, &mut holds)
}

/// Replays `c` with the address ranges `holds` keeps for it (made before the driver was
/// loaded): each range's placeholder is released immediately before the driver is asked for
/// it, and restored once the replay freed its reservations.
pub fn replay_with(
    c: &LoadedCapture,
    passes: u64,
    holds: &mut Placeholders,
) -> Result<Replayed, StandaloneError> {
    replay_relocating(c, passes, holds, Relocation::Refuse)
}

/// [`replay_with`], with what to do about a range that cannot be had at its address.
pub fn replay_relocating(
    c: &LoadedCapture,
    passes: u64,
    holds: &mut Placeholders,
    relocation: Relocation,
) -> Result<Replayed, StandaloneError> {
    let r = replay_held(c, passes, holds, relocation);
    // Every reservation of the replay is freed by now (the ranges are dropped on return).
    holds.restore();
    r
}

fn replay_held(
    c: &LoadedCapture,
    passes: u64,
    holds: &mut Placeholders,
    relocation: Relocation,
) -> Result<Replayed, StandaloneError> {
    let m = &c.manifest;
    if m.backend != "cuda" {
        return Err(StandaloneError::Unsupported(format!(
            "a {} capture is not a CUDA one",
            m.backend
        )));
    }
    let ordinal = i32::try_from(m.agent).unwrap_or(i32::MAX);
    let device: Arc<Device> = Device::open(ordinal)?;
    let mut granule = 0usize;
    let p = prop(ordinal);
    // SAFETY: a fully initialised property block, an out pointer to a live local.
    unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut granule,
            &p,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    }
    .call("cuMemGetAllocationGranularity")?;
    let granule = (granule as u64).max(4096);

    // The addresses first, before the module or any allocation of ours can take them.
    let plain = placeholder::plain_regions(m);
    let pieces = placeholder::plan_pieces(&plain, granule);
    let mut ranges = Vec::new();
    let mut relocated: Vec<(u64, u64, u64)> = Vec::new();
    for range in placeholder::plan_ranges(&plain, granule) {
        match reserve(ordinal, range, &pieces, granule, &m.regions, holds) {
            Ok(r) => ranges.extend(r),
            Err(StandaloneError::Address { index, why, .. }) if relocation == Relocation::Allow => {
                let (lo, hi, _) = range;
                let r = reserve_anywhere(ordinal, hi - lo, granule)?;
                log::info!(
                    "[kernel-replay] replay: region {index}'s range {lo:#x}-{hi:#x} relocated to {:#x} ({why})",
                    r.base
                );
                relocated.push((lo, hi, r.base));
                ranges.push(r);
            }
            Err(e) => return Err(e),
        }
    }

    let mut code = c.code.clone();
    if m.kernel.code_format == "ptx" && code.last() != Some(&0) {
        code.push(0);
    }
    let mut raw: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: the image as the captured run's driver got it, alive for the call; an out
    // pointer to a live local.
    unsafe { sys::cuModuleLoadData(&mut raw, code.as_ptr().cast()) }.call("cuModuleLoadData")?;
    let module = Module(raw);

    // Where each region lives in this process.
    let mut at: Vec<u64> = m
        .regions
        .iter()
        .map(|r| relocate(r.base, &relocated))
        .collect();
    let mut moved = Vec::new();
    for r in m
        .regions
        .iter()
        .filter(|r| placeholder::is_named_variable(r))
    {
        let Some(symbol) = r.symbol.clone() else {
            continue;
        };
        let name = CString::new(symbol.clone())
            .map_err(|_| StandaloneError::Unsupported(format!("symbol {symbol:?}")))?;
        let (mut addr, mut bytes) = (0u64, 0usize);
        // SAFETY: the module loaded above; out pointers to live locals; a NUL-terminated name.
        unsafe { sys::cuModuleGetGlobal_v2(&mut addr, &mut bytes, module.0, name.as_ptr()) }
            .call("cuModuleGetGlobal")
            .map_err(|e| StandaloneError::Address {
                index: r.index,
                base: r.base,
                size: r.size,
                why: format!("module variable {symbol}: {e}"),
            })?;
        if (bytes as u64) < r.size {
            return Err(StandaloneError::Address {
                index: r.index,
                base: r.base,
                size: r.size,
                why: format!("module variable {symbol} has {bytes} bytes in the loaded image"),
            });
        }
        if addr != r.base {
            if m.arguments.pointers.iter().any(|w| w.region == r.index) {
                return Err(StandaloneError::Address {
                    index: r.index,
                    base: r.base,
                    size: r.size,
                    why: format!(
                        "module variable {symbol} was loaded at {addr:#x} and the argument block points into it"
                    ),
                });
            }
            moved.push((r.index, addr));
            at[r.index] = addr;
        }
    }

    let symbol = CString::new(m.kernel.symbol.clone())
        .map_err(|_| StandaloneError::Unsupported(format!("symbol {:?}", m.kernel.symbol)))?;
    let mut f: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: the module loaded above; an out pointer to a live local; a NUL-terminated name.
    unsafe { sys::cuModuleGetFunction(&mut f, module.0, symbol.as_ptr()) }
        .call("cuModuleGetFunction")?;

    let l = &m.launch;
    let blocks = |threads: u32, per: u32| threads / per.max(1);
    let (grid, block) = (
        [
            blocks(l.grid.x, l.workgroup.x),
            blocks(l.grid.y, l.workgroup.y),
            blocks(l.grid.z, l.workgroup.z),
        ],
        [l.workgroup.x, l.workgroup.y, l.workgroup.z],
    );
    let mut kernarg = c.kernarg.clone();
    // The argument block's pointers into relocated ranges follow them.
    let mut rewritten_words = 0;
    for w in &m.arguments.pointers {
        let moved = relocate(w.value, &relocated);
        let o = w.offset as usize;
        if moved != w.value && o + 8 <= kernarg.len() {
            kernarg[o..o + 8].copy_from_slice(&moved.to_le_bytes());
            rewritten_words += 1;
        }
    }
    let stored_pointers = if relocated.is_empty() {
        0
    } else {
        c.data
            .iter()
            .map(|(input, _)| pointer_like_words(input, &relocated))
            .sum()
    };
    let slots = param_slots(f);
    if let Some(s) = &slots {
        if let Some(&(off, size)) = s.iter().find(|&&(o, n)| o + n > kernarg.len()) {
            return Err(StandaloneError::Unsupported(format!(
                "the kernel's parameter at offset {off} ({size} bytes) lies past the captured argument block of {} bytes",
                kernarg.len()
            )));
        }
    }

    let mut out = Replayed {
        moved_variables: moved,
        relocated,
        rewritten_words,
        stored_pointers,
        ..Replayed::default()
    };
    let mut attrs: Vec<sys::CUlaunchAttribute> = Vec::new();
    for a in &l.attributes {
        match crate::capture::known_attribute(a.id) {
            Some((id, _, true)) => {
                // SAFETY: an attribute of zero bytes is valid; its id is a value of the enum.
                let mut raw: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
                raw.id = id;
                let value = std::ptr::addr_of_mut!(raw.value).cast::<u32>();
                for (w, v) in a.value.iter().take(4).enumerate() {
                    // SAFETY: the value union is 64 bytes; its first 16 are written.
                    unsafe { value.add(w).write_unaligned(*v) };
                }
                attrs.push(raw);
            }
            _ => out.skipped_attributes.push(a.name.clone()),
        }
    }
    let (start, end) = (Event::create(true)?, Event::create(true)?);
    for _ in 0..passes.max(1) {
        for (r, (input, _)) in m.regions.iter().zip(&c.data) {
            write(at[r.index], input)?;
        }
        let base = kernarg.as_mut_ptr();
        let mut params: Vec<*mut c_void> = slots
            .iter()
            .flatten()
            // No unsafe offset: every slot lies inside the block (checked above).
            .map(|&(off, _)| base.wrapping_add(off).cast::<c_void>())
            .collect();
        let mut size = kernarg.len();
        let mut extra: [*mut c_void; 5] = [
            // The markers are small integers cuda.h defines as pointers.
            std::ptr::without_provenance_mut(1), // CU_LAUNCH_PARAM_BUFFER_POINTER
            base.cast(),
            std::ptr::without_provenance_mut(2), // CU_LAUNCH_PARAM_BUFFER_SIZE
            (&mut size as *mut usize).cast(),
            std::ptr::null_mut(), // CU_LAUNCH_PARAM_END
        ];
        let (kp, ex) = if slots.is_some() {
            (params.as_mut_ptr(), std::ptr::null_mut())
        } else {
            (std::ptr::null_mut(), extra.as_mut_ptr())
        };
        start.record(std::ptr::null_mut())?;
        if attrs.is_empty() {
            // SAFETY: the function of the module loaded above; the argument block is the
            // captured one (its pointer words into relocated ranges rewritten), whose pointers
            // reach the regions recreated at their captured addresses or relocated; the parameter pointers (or the buffer) point into `kernarg`, alive
            // until the wait.
            unsafe {
                sys::cuLaunchKernel(
                    f,
                    grid[0],
                    grid[1],
                    grid[2],
                    block[0],
                    block[1],
                    block[2],
                    l.group_segment_size,
                    std::ptr::null_mut(),
                    kp,
                    ex,
                )
            }
            .call("cuLaunchKernel")?;
        } else {
            let config = sys::CUlaunchConfig {
                gridDimX: grid[0],
                gridDimY: grid[1],
                gridDimZ: grid[2],
                blockDimX: block[0],
                blockDimY: block[1],
                blockDimZ: block[2],
                sharedMemBytes: l.group_segment_size,
                hStream: std::ptr::null_mut(),
                attrs: attrs.as_mut_ptr(),
                numAttrs: attrs.len() as u32,
            };
            // SAFETY: as for cuLaunchKernel above; the configuration and its attributes are
            // alive for the call.
            unsafe { sys::cuLaunchKernelEx(&config, f, kp, ex) }.call("cuLaunchKernelEx")?;
        }
        end.record(std::ptr::null_mut())?;
        device.synchronize()?;
        out.seconds
            .push(f64::from(Event::elapsed_ms(&start, &end)?) / 1e3);
        let bytes = m
            .regions
            .iter()
            .map(|r| read(at[r.index], r.size))
            .collect::<Result<Vec<_>, _>>()?;
        out.outputs.push(bytes);
    }
    drop(module);
    drop(ranges);
    Ok(out)
}
