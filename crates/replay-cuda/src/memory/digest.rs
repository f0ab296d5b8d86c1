//! Digests (SPEC §7.4) on the device: the host splits a batch into segments
//! ([`kernels::plan`]) in mapped pinned memory; `kr_digest_seg` (and `kr_digest_fin` when an op
//! has several segments) read that table and write the digests straight into mapped pinned
//! memory: one or two launches and one event per batch, however many digests. Digests of
//! pageable backing are computed on the host when submitted (their bytes are final then:
//! pageable copies complete before their submission returns). Without NVRTC the backend falls
//! back to host digests over bytes staged through pinned memory.

use std::collections::HashMap;
use std::sync::Arc;

use replay_core::{Digest128, DigestKey, DigestOp, MemLoc};

use super::kernels;
use super::tier::Backing;
use crate::device::{Device, Event, SendPtr};
use crate::error::{CudaError, CudaResult};
use crate::launch::{launch_raw, ArgBlock, DevicePtr, LaunchConfig};
use crate::module::{compile_cubin, CudaFunction, CudaModule, ModuleRegistry};
use crate::result::{self, mapped_pointer, DriverCall};
use crate::sys;

/// A block of mapped pinned host memory: its host address and the address kernels use.
#[derive(Debug)]
pub(super) struct Mapped {
    pub(super) host: SendPtr,
    pub(super) dptr: u64,
}

/// Reusable buffers of one digest batch: the segment table and the results in mapped pinned
/// host memory (kernels read and write them there), partial sums on the device.
#[derive(Debug)]
pub(super) struct Scratch {
    /// Capacities in bytes: table, results, partial sums.
    pub(super) caps: [usize; 3],
    table: Mapped,
    out: Mapped,
    partials: u64,
}

impl Scratch {
    pub(super) fn alloc(device: &Device, caps: [usize; 3]) -> CudaResult<Self> {
        device.bind()?;
        let caps = caps.map(|c| c.max(4096));
        let null = || Mapped {
            host: SendPtr(std::ptr::null_mut()),
            dptr: 0,
        };
        let mut s = Self {
            caps,
            table: null(),
            out: null(),
            partials: 0,
        };
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // On any failure `s` is dropped, which frees what was allocated so far.
        // SAFETY: plain allocations; the pointers are owned by `s` and freed in its Drop.
        unsafe {
            let h = result::malloc_host(caps[0], flags).call("cuMemHostAlloc")?;
            s.table = Mapped {
                host: SendPtr(h),
                dptr: mapped_pointer(h),
            };
            let h = result::malloc_host(caps[1], flags).call("cuMemHostAlloc")?;
            s.out = Mapped {
                host: SendPtr(h),
                dptr: mapped_pointer(h),
            };
            s.partials = result::malloc_sync(caps[2]).call("cuMemAlloc")?;
        }
        Ok(s)
    }

    pub(super) fn fits(&self, need: [usize; 3]) -> bool {
        self.caps.iter().zip(need).all(|(&c, n)| c >= n)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: each pointer was allocated by the matching call in `alloc` (or is null/0 and
        // skipped); no kernel uses them any more (abandoned scratch is leaked with
        // `mem::forget` instead of dropped).
        unsafe {
            for p in [self.table.host.0, self.out.host.0] {
                if !p.is_null() {
                    let _ = result::free_host(p);
                }
            }
            if self.partials != 0 {
                let _ = result::free_sync(self.partials);
            }
        }
    }
}

/// Host-fallback staging: bytes of a batch copied into pinned memory, digested on take.
#[derive(Debug)]
pub(super) struct Staging {
    host: SendPtr,
    bytes: usize,
    /// (op index, offset in staging, length)
    spans: Vec<(usize, usize, usize)>,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.host.0.is_null() {
            // SAFETY: allocated by cuMemHostAlloc in `Staging::stage`; its copies completed
            // (abandoned staging is leaked instead).
            let _ = unsafe { result::free_host(self.host.0) };
        }
    }
}

/// The digest part of a pending fence.
#[derive(Debug)]
pub(super) struct DigestJob {
    pub(super) n: usize,
    /// (op index, digest) computed on the host at submission.
    pub(super) host: Vec<HostDigest>,
    /// Op indices computed on the device, in table order.
    pub(super) device_ops: Vec<usize>,
    pub(super) scratch: Option<Scratch>,
    pub(super) staging: Option<Staging>,
    pub(super) key: DigestKey,
    /// Timing events around the kernels and the batch's size (bytes, segments), at `trace`
    /// level only: the kernels' own time beside the host's.
    pub(super) timing: Option<(Event, Event, u64, usize)>,
}

/// The compiled digest kernels and the gather copy of the same module.
#[derive(Debug)]
pub(super) struct DigestKernels {
    _module: Arc<CudaModule>,
    seg: CudaFunction,
    fin: CudaFunction,
    pub(super) copy: CudaFunction,
}

impl DigestKernels {
    /// Compiles the digest kernels for `device` with NVRTC and loads them as a private module
    /// of `modules`: `None` (logged) without NVRTC, when digests run on the host.
    pub(super) fn compile(device: &Device, modules: &ModuleRegistry) -> CudaResult<Option<Self>> {
        let cubin = match compile_cubin(
            kernels::DIGEST_SOURCE,
            "kr_digest.cu",
            device.info().compute_capability,
            &[],
        ) {
            Ok(cubin) => cubin,
            Err(e @ CudaError::NvrtcUnavailable(_)) => {
                log::warn!("[kernel-replay] {e}; digests run on the host (slow)");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        Self::load(modules, &cubin).map(Some)
    }

    /// Loads the kernels from a compiled image of [`kernels::DIGEST_SOURCE`] as a private
    /// module of `modules`.
    pub(super) fn load(modules: &ModuleRegistry, cubin: &[u8]) -> CudaResult<Self> {
        let m = modules.load_private(cubin, "kr_digest")?;
        Ok(Self {
            seg: m.function(kernels::DIGEST_SEG)?,
            fin: m.function(kernels::DIGEST_FIN)?,
            copy: m.function(kernels::COPY_KERNEL)?,
            _module: m,
        })
    }
}

/// One digest op on the device: (op index, device address, length).
pub(super) type DeviceOp = (usize, u64, u64);

/// One digest computed on the host: (op index, digest).
pub(super) type HostDigest = (usize, Digest128);

/// Sorts a batch's ops by where they are digested: on the host now (pageable backing, whose
/// bytes are final: pageable copies complete before their submission returns), or on the
/// device (device memory, device and pinned backing).
pub(super) fn split_ops(
    backing: &HashMap<u64, Backing>,
    ops: &[DigestOp],
    key: DigestKey,
) -> CudaResult<(Vec<HostDigest>, Vec<DeviceOp>)> {
    let mut host: Vec<HostDigest> = Vec::new();
    let mut dev: Vec<DeviceOp> = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        match op.at {
            MemLoc::Device { addr } => dev.push((i, addr, op.len)),
            MemLoc::Backing { id, offset } => {
                let b = backing.get(&id.0).ok_or_else(|| {
                    CudaError::InvalidArgument(format!("unknown backing block {}", id.0))
                })?;
                if offset.checked_add(op.len).is_none_or(|e| e > b.bytes()) {
                    return Err(CudaError::InvalidArgument(format!(
                        "digest {offset}+{} outside backing block {}",
                        op.len, id.0
                    )));
                }
                match b {
                    Backing::Device { ptr, .. } => dev.push((i, ptr + offset, op.len)),
                    Backing::Pinned { dptr, .. } => dev.push((i, dptr + offset, op.len)),
                    Backing::Pageable { ptr, .. } => {
                        // SAFETY: in bounds (checked above); pageable copies complete
                        // before their submission returns, so the bytes are final.
                        let s = unsafe {
                            std::slice::from_raw_parts(
                                (ptr.0 as *const u8).add(offset as usize),
                                op.len as usize,
                            )
                        };
                        host.push((i, replay_core::digest::digest(key, s)));
                    }
                }
            }
        }
    }
    Ok((host, dev))
}

/// A batch of device digests planned into segments: what the kernels read.
#[derive(Debug)]
pub(super) struct Batch {
    segs: Vec<kernels::Seg>,
    fins: Vec<kernels::Fin>,
    /// Blocks of `kr_digest_seg`: one per segment.
    pub(super) blocks: u32,
    /// Scratch the batch needs, in bytes: table, results, partial sums.
    pub(super) need: [usize; 3],
}

impl Batch {
    /// Plans `dev` into segments of `segment` bytes (0: [`kernels::segment_bytes`]). Fails
    /// when there are more segments than a grid has blocks.
    pub(super) fn plan(dev: &[DeviceOp], segment: u64) -> CudaResult<Self> {
        let ranges: Vec<(u64, u64)> = dev.iter().map(|&(_, a, l)| (a, l)).collect();
        let total: u64 = ranges.iter().map(|r| r.1).sum();
        let seg = match segment {
            0 => kernels::segment_bytes(total),
            b => b,
        };
        let (segs, fins) = kernels::plan(&ranges, seg);
        let n = dev.len();
        let seg_bytes = segs.len() * std::mem::size_of::<kernels::Seg>();
        let fin_bytes = fins.len() * std::mem::size_of::<kernels::Fin>();
        let blocks = u32::try_from(segs.len())
            .map_err(|_| CudaError::InvalidArgument(format!("{} digest segments", segs.len())))?;
        Ok(Self {
            need: [seg_bytes + fin_bytes, n * 16, segs.len() * 16],
            blocks,
            segs,
            fins,
        })
    }

    /// Writes the segment table into `scratch` and launches the kernels on `stream`. On an
    /// error, whatever was enqueued may still run: the caller leaks the scratch rather than
    /// reuse it.
    pub(super) fn launch(
        &self,
        k: &DigestKernels,
        scratch: &Scratch,
        key: DigestKey,
        stream: sys::CUstream,
    ) -> CudaResult<()> {
        let (segs, fins, s) = (&self.segs, &self.fins, stream);
        let seg_bytes = segs.len() * std::mem::size_of::<kernels::Seg>();
        let fin_bytes = fins.len() * std::mem::size_of::<kernels::Fin>();
        // SAFETY: the table holds `caps[0] >= seg_bytes + fin_bytes` bytes of pinned
        // memory that no kernel uses (scratch is taken out of the pool until its fence
        // completes); `Seg` and `Fin` are plain `repr(C)` data of 32 bytes, and pinned
        // allocations are page-aligned.
        unsafe {
            let base = scratch.table.host.0 as *mut u8;
            std::ptr::copy_nonoverlapping(segs.as_ptr().cast::<u8>(), base, seg_bytes);
            std::ptr::copy_nonoverlapping(
                fins.as_ptr().cast::<u8>(),
                base.add(seg_bytes),
                fin_bytes,
            );
        }
        let [k0, k1, k2, k3] = kernels::kernel_keys(key);
        let seg_args = ArgBlock::new()
            .arg(DevicePtr(scratch.table.dptr))
            .arg(segs.len() as u64)
            .arg(k0)
            .arg(k1)
            .arg(k2)
            .arg(k3)
            .arg(DevicePtr(scratch.partials))
            .arg(DevicePtr(scratch.out.dptr));
        let blocks = self.blocks;
        (|| -> CudaResult<()> {
            // SAFETY: `kr_digest_seg(const KrSeg*, u64, u64 x4, u64* partials, u64* out)`
            // reads `segs.len()` table entries (mapped pinned memory written above),
            // the bytes each names (live device memory: application memory the memory
            // layer checked, or backing blocks it holds), and writes one partial sum
            // (16 bytes) per segment and one result (16 bytes) per op, within the
            // scratch's capacities; `kr_digest_fin(const KrFin*, u64, u64 k2, u64 k3,
            // const u64* partials, u64* out)` reads the `fins` entries after the segments and
            // those partial sums. One stream, so in order; the scratch
            // stays out of the pool until the fence completes.
            unsafe {
                launch_raw(
                    k.seg.raw(),
                    &LaunchConfig::linear(blocks, kernels::BLOCK),
                    s,
                    seg_args.params(),
                    seg_args.bytes(),
                )?;
                if !fins.is_empty() {
                    let fin_blocks =
                        u32::try_from(fins.len() as u64 * u64::from(kernels::FIN_LANES))
                            .map(|t| t.div_ceil(kernels::FIN_BLOCK))
                            .map_err(|_| {
                                CudaError::InvalidArgument(format!("{} ops to finish", fins.len()))
                            })?;
                    let fin_args = ArgBlock::new()
                        .arg(DevicePtr(scratch.table.dptr + seg_bytes as u64))
                        .arg(fins.len() as u64)
                        .arg(k2)
                        .arg(k3)
                        .arg(DevicePtr(scratch.partials))
                        .arg(DevicePtr(scratch.out.dptr));
                    launch_raw(
                        k.fin.raw(),
                        &LaunchConfig::linear(fin_blocks, kernels::FIN_BLOCK),
                        s,
                        fin_args.params(),
                        fin_args.bytes(),
                    )?;
                }
            }
            Ok(())
        })()
    }
}

impl Staging {
    /// Host fallback: enqueues copies of the `dev` ranges into a new pinned staging block on
    /// `stream`, to be digested on the host once they completed.
    pub(super) fn stage(dev: &[DeviceOp], stream: sys::CUstream) -> CudaResult<Self> {
        let s = stream;
        let total: u64 = dev.iter().map(|d| d.2).sum();
        let size = usize::try_from(total.max(1))
            .map_err(|_| CudaError::HostOutOfMemory { bytes: total })?;
        // SAFETY: a plain allocation owned by the staging value below.
        let hp = unsafe { result::malloc_host(size, 0) }.call("cuMemHostAlloc")?;
        let mut staging = Staging {
            host: SendPtr(hp),
            bytes: size,
            spans: Vec::with_capacity(dev.len()),
        };
        let mut off = 0usize;
        for &(i, addr, len) in dev {
            if len > 0 {
                // SAFETY: the staging block has room for every span (sized as their
                // sum); `addr` is live device memory (see above).
                let r = unsafe {
                    sys::cuMemcpyDtoHAsync_v2(
                        (hp as *mut u8).add(off).cast(),
                        addr,
                        len as usize,
                        s,
                    )
                };
                if let Err(e) = r.call("cuMemcpyDtoHAsync") {
                    std::mem::forget(staging);
                    return Err(e);
                }
            }
            staging.spans.push((i, off, len as usize));
            off += len as usize;
        }
        Ok(staging)
    }
}

impl DigestJob {
    /// The batch's digests, in op order, once its fence completed; and the scratch (back to
    /// the pool) and staging (released later) it used.
    pub(super) fn finish(mut self) -> (Vec<Digest128>, Option<Scratch>, Option<Staging>) {
        let job = &mut self;
        if let Some((a, b, bytes, segs)) = job.timing.take() {
            if let Ok(ms) = Event::elapsed_ms(&a, &b) {
                log::trace!(
                    "[kernel-replay] digest kernels: {} ops, {bytes} bytes, {segs} segments: {:.1} us on the device",
                    job.device_ops.len(),
                    ms * 1000.0
                );
            }
        }
        let mut out = vec![Digest128(0); job.n];
        for &(i, d) in &job.host {
            out[i] = d;
        }
        let scratch = job.scratch.take();
        if let Some(scratch) = &scratch {
            // SAFETY: the batch completed: the results are in pinned memory, `device_ops.len()`
            // pairs of u64.
            let res = unsafe {
                std::slice::from_raw_parts(
                    scratch.out.host.0 as *const u64,
                    2 * job.device_ops.len(),
                )
            };
            for (j, &i) in job.device_ops.iter().enumerate() {
                out[i] = Digest128((u128::from(res[2 * j]) << 64) | u128::from(res[2 * j + 1]));
            }
        }
        let staging = job.staging.take();
        if let Some(staging) = &staging {
            // SAFETY: the batch completed; the staging block holds `staging.bytes` bytes.
            let all =
                unsafe { std::slice::from_raw_parts(staging.host.0 as *const u8, staging.bytes) };
            for &(i, off, len) in &staging.spans {
                out[i] = replay_core::digest::digest(job.key, &all[off..off + len]);
            }
        }
        (out, scratch, staging)
    }
}
