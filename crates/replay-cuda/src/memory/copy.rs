//! Copies (SPEC §7.3): both ends of a copy resolved to addresses, the lanes and streams they
//! run on, and how a batch is split: device-to-device copies on one stream, host copies in
//! chunks of [`TierConfig::host_chunk_bytes`](super::TierConfig::host_chunk_bytes) alternating
//! between two more (so both directions' copy engines and both of a split snapshot's tiers
//! overlap). Operations are never merged: each `cuMemcpyAsync` stays inside the ops as given,
//! because two application allocations (or two module variables) that happen to be adjacent in
//! the address space cannot be copied by one call (the driver answers
//! `CUDA_ERROR_INVALID_VALUE`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use replay_core::{CopyOp, MemLoc};
use smallvec::SmallVec;

use super::kernels::{self, CopyPiece};
use super::tier::Backing;
use crate::device::{wait_events, Device, SendPtr};
use crate::error::{CudaError, CudaResult};
use crate::launch::{launch_raw, ArgBlock, DevicePtr, LaunchConfig};
use crate::module::CudaFunction;
use crate::queue::{Direction, ResolvedCopy, Stream};
use crate::result::{self, mapped_pointer, DriverCall};
use crate::sys;

/// Which stream lane a copy runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Device to device.
    Device,
    /// To or from host memory.
    Host,
}

impl ResolvedCopy {
    /// Which lane runs it.
    pub fn lane(&self) -> Lane {
        match self.dir {
            Direction::DeviceToDevice => Lane::Device,
            _ => Lane::Host,
        }
    }
}

/// Splits host copies into chunks of at most `chunk` bytes and assigns each piece a stream:
/// device copies to stream 0 of the device lane, host chunks alternately to host streams 0
/// and 1. Returns `(lane, stream index, copy)` in submission order.
pub fn schedule(ops: &[ResolvedCopy], chunk: u64) -> Vec<(Lane, usize, ResolvedCopy)> {
    let chunk = chunk.max(1);
    let mut out = Vec::with_capacity(ops.len());
    let mut next_host = 0usize;
    for op in ops.iter().filter(|o| o.len > 0) {
        match op.lane() {
            Lane::Device => out.push((Lane::Device, 0, *op)),
            Lane::Host => {
                let mut off = 0;
                while off < op.len {
                    let len = chunk.min(op.len - off);
                    out.push((
                        Lane::Host,
                        next_host % 2,
                        ResolvedCopy {
                            dir: op.dir,
                            src: op.src + off,
                            dst: op.dst + off,
                            len,
                        },
                    ));
                    next_host += 1;
                    off += len;
                }
            }
        }
    }
    out
}

/// The streams copies run on, created non-blocking: one for device-to-device copies, two for
/// host copies.
#[derive(Debug)]
pub(super) struct CopyStreams {
    d2d: Stream,
    host: [Stream; 2],
}

impl CopyStreams {
    /// Creates the three streams on `device` (device lane first).
    pub(super) fn new(device: &Arc<Device>) -> CudaResult<Self> {
        Ok(Self {
            d2d: Stream::non_blocking(device)?,
            host: [Stream::non_blocking(device)?, Stream::non_blocking(device)?],
        })
    }

    /// The raw streams: device lane, host lane 0, host lane 1.
    pub(super) fn raw(&self) -> [sys::CUstream; 3] {
        [self.d2d.raw(), self.host[0].raw(), self.host[1].raw()]
    }

    /// The stream of lane `lane`, index `idx` (as [`schedule`] assigns them).
    pub(super) fn stream(&self, lane: Lane, idx: usize) -> sys::CUstream {
        match lane {
            Lane::Device => self.d2d.raw(),
            Lane::Host => self.host[idx % 2].raw(),
        }
    }

    /// Enqueues one copy.
    pub(super) fn enqueue(&self, lane: Lane, idx: usize, c: &ResolvedCopy) -> CudaResult<()> {
        let stream = self.stream(lane, idx);
        // SAFETY: both ends were resolved against live allocations: application device memory
        // the tracker reported live (the memory layer re-checks liveness before every batch),
        // or backing blocks whose bounds `resolve` checked. Backing stays allocated until the
        // batch's fence completed. `cuMemcpyAsync` infers each end's kind from the unified
        // address space, so device, managed, mapped pinned and pageable memory all work.
        unsafe { sys::cuMemcpyAsync(c.dst, c.src, c.len as usize, stream) }.call("cuMemcpyAsync")
    }
}

/// Whether `c` goes through the gather kernel ([`kernels::COPY_KERNEL`]) rather than its own
/// `cuMemcpyAsync`: a device-to-device copy of at most [`kernels::KERNEL_COPY_MAX`] bytes.
pub fn gathered(c: &ResolvedCopy) -> bool {
    c.dir == Direction::DeviceToDevice && c.len > 0 && c.len <= kernels::KERNEL_COPY_MAX
}

/// A table of [`CopyPiece`]s in mapped pinned memory, which `kr_copy` reads directly; pooled,
/// and out of the pool until its batch's fence completed.
#[derive(Debug)]
pub(super) struct CopyTable {
    host: SendPtr,
    dptr: u64,
    /// Capacity in pieces.
    pub(super) cap: usize,
}

impl CopyTable {
    /// A table for at least `pieces` pieces (a power of two, at least 128).
    pub(super) fn alloc(device: &Device, pieces: usize) -> CudaResult<Self> {
        device.bind()?;
        let cap = pieces.next_power_of_two().max(128);
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: a plain allocation of `cap` entries; owned by the table, freed in its Drop.
        let h = unsafe { result::malloc_host(cap * std::mem::size_of::<CopyPiece>(), flags) }
            .call("cuMemHostAlloc")?;
        Ok(Self {
            host: SendPtr(h),
            dptr: mapped_pointer(h),
            cap,
        })
    }
}

impl Drop for CopyTable {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in `alloc`; no kernel reads it any more (a table
        // whose batch was abandoned is leaked with `mem::forget` instead of dropped).
        let _ = unsafe { result::free_host(self.host.0) };
    }
}

/// Writes `pieces` into `table` and launches `kr_copy` (`f`) over them on `stream`. On an
/// error, whatever was enqueued may still run: the caller leaks the table rather than reuse it.
pub(super) fn launch_gather(
    f: &CudaFunction,
    table: &CopyTable,
    pieces: &[CopyPiece],
    stream: sys::CUstream,
) -> CudaResult<()> {
    assert!(pieces.len() <= table.cap, "copy table too small");
    let blocks = u32::try_from(pieces.len())
        .map_err(|_| CudaError::InvalidArgument(format!("{} copy pieces", pieces.len())))?;
    // SAFETY: the table holds `cap >= pieces.len()` entries of pinned memory no kernel uses
    // (taken out of the pool until its fence completes); `CopyPiece` is plain `repr(C)` data.
    unsafe {
        std::ptr::copy_nonoverlapping(
            pieces.as_ptr(),
            table.host.0.cast::<CopyPiece>(),
            pieces.len(),
        );
    }
    let args = ArgBlock::new()
        .arg(DevicePtr(table.dptr))
        .arg(pieces.len() as u64);
    // SAFETY: `kr_copy(const KrCopy*, u64)` reads `pieces.len()` table entries (mapped pinned
    // memory written above) and copies each piece between two live device ranges: both ends
    // of every op were resolved against memory the memory layer checked live or backing
    // blocks it holds until the fence completes, and a piece lies inside its op.
    unsafe {
        launch_raw(
            f.raw(),
            &LaunchConfig::linear(blocks, kernels::BLOCK),
            stream,
            args.params(),
            args.bytes(),
        )
    }
}

/// Resolves one end of a copy against the backing blocks: `(is_host, address)`.
fn resolve(backing: &HashMap<u64, Backing>, loc: MemLoc, len: u64) -> Result<(bool, u64), String> {
    match loc {
        MemLoc::Device { addr } => Ok((false, addr)),
        MemLoc::Backing { id, offset } => {
            let b = backing
                .get(&id.0)
                .ok_or_else(|| format!("unknown backing block {}", id.0))?;
            let end = offset.checked_add(len).ok_or("offset overflow")?;
            if end > b.bytes() {
                return Err(format!(
                    "{offset}+{len} lies outside backing block {} of {} bytes",
                    id.0,
                    b.bytes()
                ));
            }
            Ok(match b {
                Backing::Device { ptr, .. } => (false, ptr + offset),
                Backing::Pinned { host, .. } => (true, host.0 as u64 + offset),
                Backing::Pageable { ptr, .. } => (true, ptr.0 as u64 + offset),
            })
        }
    }
}

/// Resolves both ends of every op against the backing blocks: the copies to enqueue, or what
/// is wrong with an op.
pub(super) fn resolve_ops(
    backing: &HashMap<u64, Backing>,
    ops: &[CopyOp],
) -> Result<Vec<ResolvedCopy>, String> {
    let mut v = Vec::with_capacity(ops.len());
    for op in ops {
        let (sh, src) = resolve(backing, op.src, op.len)?;
        let (dh, dst) = resolve(backing, op.dst, op.len)?;
        let dir = match (sh, dh) {
            (false, false) => Direction::DeviceToDevice,
            (false, true) => Direction::DeviceToHost,
            (true, false) => Direction::HostToDevice,
            (true, true) => {
                return Err("host-to-host copies between backing blocks are not supported".into())
            }
        };
        v.push(ResolvedCopy {
            dir,
            src,
            dst,
            len: op.len,
        });
    }
    Ok(v)
}

/// Copies `len` bytes of device memory at `addr` to a new host vector on `stream`, waiting at
/// most `timeout`.
pub(super) fn read_device(
    device: &Device,
    stream: sys::CUstream,
    addr: u64,
    len: u64,
    timeout: Duration,
) -> CudaResult<Vec<u8>> {
    let mut out = vec![0u8; len as usize];
    if len == 0 {
        return Ok(out);
    }
    device.bind()?;
    let s = stream;
    // SAFETY: `out` has `len` bytes and outlives the wait below (on timeout it is leaked,
    // since the copy may still write it); `addr` is device memory the caller owns.
    unsafe {
        sys::cuMemcpyDtoHAsync_v2(out.as_mut_ptr().cast(), addr, len as usize, s)
            .call("cuMemcpyDtoHAsync")?;
    }
    let e = device.event(false)?;
    e.record(s)?;
    if !wait_events(&[&e], timeout)? {
        std::mem::forget(out);
        return Err(CudaError::InvalidArgument(format!(
            "device read of {len} bytes not done within {timeout:?}"
        )));
    }
    device.recycle_event(e);
    Ok(out)
}

/// Reads `len` bytes at `addr` with the gather kernel `f` into mapped pinned memory, waiting
/// at most `timeout`: for memory a kernel can read but the copy engine refuses (module
/// variables of a lazily loaded library can be neither an allocation `cuMemcpy` resolves nor a
/// pointer `cuPointerGetAttribute` knows, while the kernels that use them read them fine).
pub(super) fn read_device_by_kernel(
    device: &Device,
    f: &CudaFunction,
    table: &CopyTable,
    stream: sys::CUstream,
    addr: u64,
    len: u64,
    timeout: Duration,
) -> CudaResult<Vec<u8>> {
    let mut out = vec![0u8; len as usize];
    if len == 0 {
        return Ok(out);
    }
    device.bind()?;
    let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
    // SAFETY: a plain allocation of `len` bytes, freed below (or leaked on a timeout, when the
    // kernel may still write it).
    let h = unsafe { result::malloc_host(len as usize, flags) }.call("cuMemHostAlloc")?;
    let dst = mapped_pointer(h);
    let pieces = kernels::copy_pieces(&[(addr, dst, len)]);
    if pieces.len() > table.cap {
        // SAFETY: allocated above; nothing was launched on it.
        let _ = unsafe { result::free_host(h) };
        return Err(CudaError::InvalidArgument(format!(
            "kernel read of {len} bytes needs {} pieces, the table holds {}",
            pieces.len(),
            table.cap
        )));
    }
    let done = launch_gather(f, table, &pieces, stream).and_then(|()| {
        let e = device.event(false)?;
        e.record(stream)?;
        let ok = wait_events(&[&e], timeout)?;
        device.recycle_event(e);
        Ok(ok)
    });
    match done {
        Ok(true) => {
            // SAFETY: `h` holds `len` bytes the finished kernel wrote; nothing else uses it.
            unsafe {
                std::ptr::copy_nonoverlapping(h.cast::<u8>(), out.as_mut_ptr(), len as usize)
            };
            // SAFETY: allocated above; the kernel that wrote it has finished.
            let _ = unsafe { result::free_host(h) };
            Ok(out)
        }
        // The kernel may still write the buffer (and read the table): the caller leaks the
        // table, and the buffer stays allocated.
        Ok(false) => Err(CudaError::InvalidArgument(format!(
            "kernel read of {len} bytes not done within {timeout:?}"
        ))),
        Err(e) => Err(e),
    }
}

/// Copies `bytes` into device memory at `addr` on `stream`, waiting at most `timeout`.
pub(super) fn write_device(
    device: &Device,
    stream: sys::CUstream,
    addr: u64,
    bytes: &[u8],
    timeout: Duration,
) -> CudaResult<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    device.bind()?;
    let s = stream;
    // SAFETY: `bytes` outlives the wait below (on timeout the process cannot tell when the
    // driver finished reading it, so the caller's buffer must not be reused: we report an
    // error and the caller keeps it alive as it owns it); `addr` is device memory the
    // caller owns.
    unsafe {
        sys::cuMemcpyHtoDAsync_v2(addr, bytes.as_ptr().cast(), bytes.len(), s)
            .call("cuMemcpyHtoDAsync")?;
    }
    let e = device.event(false)?;
    e.record(s)?;
    if !wait_events(&[&e], timeout)? {
        return Err(CudaError::InvalidArgument(format!(
            "device write of {} bytes not done within {timeout:?}",
            bytes.len()
        )));
    }
    device.recycle_event(e);
    Ok(())
}

/// Submits `plan` (from [`schedule`]) on `streams`: the streams used, in first-use order, and
/// the error of the copy that failed (the copies after it are not enqueued).
pub(super) fn enqueue_all(
    streams: &CopyStreams,
    plan: &[(Lane, usize, ResolvedCopy)],
) -> (SmallVec<[sys::CUstream; 4]>, Option<CudaError>) {
    let mut used: SmallVec<[sys::CUstream; 4]> = SmallVec::new();
    for (lane, idx, c) in plan {
        let s = streams.stream(*lane, *idx);
        if let Err(e) = streams.enqueue(*lane, *idx, c) {
            return (used, Some(e));
        }
        if !used.contains(&s) {
            used.push(s);
        }
    }
    (used, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d2d(src: u64, dst: u64, len: u64) -> ResolvedCopy {
        ResolvedCopy {
            dir: Direction::DeviceToDevice,
            src,
            dst,
            len,
        }
    }

    #[test]
    fn copies_are_never_merged_across_ops() {
        // Two adjacent allocations (as cuMemAlloc hands them out) snapshotted into one backing
        // block: contiguous at both ends, yet one cuMemcpyAsync over both is invalid on a real
        // driver. Each op stays its own copy.
        let mib = 1 << 20;
        let ops = [
            d2d(0x1000_0000, 0x9000_0000, mib),
            d2d(0x1000_0000 + mib, 0x9000_0000 + mib, mib),
            d2d(0x1000_0000 + 2 * mib, 0x9000_0000 + 2 * mib, mib),
        ];
        let s = schedule(&ops, 64 * mib);
        assert_eq!(s.len(), 3);
        for ((_, _, c), o) in s.iter().zip(&ops) {
            assert_eq!(c, o);
        }
        // Host copies are chunked within an op, never across ops.
        let host: Vec<ResolvedCopy> = (0..2u64)
            .map(|i| ResolvedCopy {
                dir: Direction::DeviceToHost,
                src: 0x1000_0000 + i * 3 * mib,
                dst: 0x7000_0000 + i * 3 * mib,
                len: 3 * mib,
            })
            .collect();
        let s = schedule(&host, 2 * mib);
        let spans: Vec<(u64, u64)> = s.iter().map(|(_, _, c)| (c.src, c.len)).collect();
        assert_eq!(
            spans,
            vec![
                (0x1000_0000, 2 * mib),
                (0x1000_0000 + 2 * mib, mib),
                (0x1000_0000 + 3 * mib, 2 * mib),
                (0x1000_0000 + 5 * mib, mib),
            ]
        );
    }

    #[test]
    fn host_copies_are_chunked_across_two_streams() {
        let ops = [
            ResolvedCopy {
                dir: Direction::DeviceToHost,
                src: 0x1000,
                dst: 0x7000_0000,
                len: 250,
            },
            d2d(0x5000, 0x6000, 1000),
            ResolvedCopy {
                dir: Direction::HostToDevice,
                src: 0x8000_0000,
                dst: 0x2000,
                len: 100,
            },
        ];
        let s = schedule(&ops, 100);
        let lanes: Vec<(Lane, usize, u64, u64)> =
            s.iter().map(|(l, i, c)| (*l, *i, c.src, c.len)).collect();
        assert_eq!(
            lanes,
            vec![
                (Lane::Host, 0, 0x1000, 100),
                (Lane::Host, 1, 0x1000 + 100, 100),
                (Lane::Host, 0, 0x1000 + 200, 50),
                (Lane::Device, 0, 0x5000, 1000),
                (Lane::Host, 1, 0x8000_0000, 100),
            ]
        );
        // Bytes are conserved, destinations follow sources.
        for (_, _, c) in &s {
            if c.dir == Direction::DeviceToHost {
                assert_eq!(c.dst - 0x7000_0000, c.src - 0x1000);
            }
        }
    }
}
