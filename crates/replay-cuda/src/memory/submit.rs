//! Submission of copy and digest batches (the gather launch or a copy per op, the digest
//! kernels or host digests over staged bytes), the pools of gather tables and digest scratch
//! they draw from, and the blocking reads, writes and digests over them that tools and
//! benchmarks use. Apart from the fences, which only see a batch once it is enqueued.

use std::sync::atomic::Ordering;
use std::time::Duration;

use replay_core::{
    BackendError, BackendErrorKind, CopyOp, DeviceMemory, Digest128, DigestKey, DigestOp, Fence,
    MemLoc,
};
use smallvec::SmallVec;

use super::copy::{self, CopyTable};
use super::digest::{self, Batch, DigestJob, Scratch, Staging};
use super::pending::Pending;
use super::{kernels, schedule, CudaMemory, Lane, PointerAttributes, ResolvedCopy, State};
use crate::device::{wait_events, Event};
use crate::error::{CudaError, CudaResult};
use crate::sys;

impl CudaMemory {
    fn take_scratch(&self, need: [usize; 3]) -> CudaResult<Scratch> {
        {
            let mut st = self.state.lock();
            if let Some(i) = st.scratch.iter().position(|s| s.fits(need)) {
                return Ok(st.scratch.swap_remove(i));
            }
        }
        Scratch::alloc(&self.device, need.map(usize::next_power_of_two))
    }

    pub(super) fn give_scratch(&self, s: Scratch) {
        let mut st = self.state.lock();
        st.scratch.push(s);
        if st.scratch.len() > 4 {
            // Keep the largest ones.
            st.scratch
                .sort_by_key(|s| std::cmp::Reverse(s.caps.iter().sum::<usize>()));
            let extra = st.scratch.split_off(4);
            st.deferred_scratch.extend(extra);
        }
    }

    fn take_table(&self, pieces: usize) -> CudaResult<CopyTable> {
        {
            let mut st = self.state.lock();
            if let Some(i) = st.tables.iter().position(|t| t.cap >= pieces) {
                return Ok(st.tables.swap_remove(i));
            }
        }
        CopyTable::alloc(&self.device, pieces)
    }

    /// Back to the pool (the largest four kept; the others released with the deferred
    /// backing, since `cuMemFreeHost` waits for the device).
    pub(super) fn give_table(st: &mut State, t: CopyTable) {
        st.tables.push(t);
        if st.tables.len() > 4 {
            st.tables.sort_by_key(|t| std::cmp::Reverse(t.cap));
            let extra = st.tables.split_off(4);
            st.deferred_tables.extend(extra);
        }
    }

    /// Digests `ranges` of device memory and waits at most `timeout` (tools and benchmarks;
    /// the memory layer uses the asynchronous interface).
    pub fn digest_blocking(
        &self,
        ranges: &[(u64, u64)],
        key: DigestKey,
        timeout: Duration,
    ) -> Result<Vec<Digest128>, BackendError> {
        let ops: Vec<DigestOp> = ranges
            .iter()
            .map(|&(addr, len)| DigestOp {
                at: MemLoc::Device { addr },
                len,
            })
            .collect();
        let f = self.submit_digests(&ops, key)?;
        if !self.poll_fence(f, timeout)? {
            self.abandon_fence(f);
            return Err(BackendError::on(self.agent, "digest").error(
                BackendErrorKind::Other,
                format!("not done within {timeout:?}"),
            ));
        }
        self.take_digests(f)
    }

    /// Chunk digests of `[addr, addr+len)` in chunks of `chunk` bytes (the memory layer's
    /// split), waiting at most `timeout`.
    pub fn chunk_digests(
        &self,
        addr: u64,
        len: u64,
        chunk: u64,
        key: DigestKey,
        timeout: Duration,
    ) -> Result<Vec<Digest128>, BackendError> {
        let chunk = chunk.max(1);
        let mut ranges = Vec::with_capacity(len.div_ceil(chunk) as usize);
        let mut off = 0;
        while off < len {
            let l = chunk.min(len - off);
            ranges.push((addr + off, l));
            off += l;
        }
        self.digest_blocking(&ranges, key, timeout)
    }

    /// Copies `len` bytes of device memory to a new host vector (waits, bounded by `timeout`).
    pub fn read_device(&self, addr: u64, len: u64, timeout: Duration) -> CudaResult<Vec<u8>> {
        self.device.bind()?;
        self.order_stream(self.digest_stream.raw())?;
        copy::read_device(&self.device, self.digest_stream.raw(), addr, len, timeout)
    }

    /// Reads like [`Self::read_device`] but through the gather kernel, which reads what the
    /// application's kernels read even where the copy engine refuses the address.
    pub(super) fn read_by_kernel(
        &self,
        addr: u64,
        len: u64,
        timeout: Duration,
    ) -> CudaResult<Vec<u8>> {
        let k = self
            .kernels
            .get()
            .ok_or_else(|| CudaError::InvalidArgument("the gather kernel is not loaded".into()))?;
        self.device.bind()?;
        let s = self.digest_stream.raw();
        self.order_stream(s)?;
        let pieces = kernels::copy_pieces(&[(addr, 0, len)]).len();
        let t = self.take_table(pieces)?;
        match copy::read_device_by_kernel(&self.device, &k.copy, &t, s, addr, len, timeout) {
            Ok(bytes) => {
                Self::give_table(&mut self.state.lock(), t);
                Ok(bytes)
            }
            Err(e) => {
                // The kernel may still read the table.
                std::mem::forget(t);
                Err(e)
            }
        }
    }

    /// Copies `bytes` into device memory at `addr` (waits, bounded by `timeout`). Not gated
    /// (tools and benchmarks outside a window, or tool work inside one): a write that may run
    /// beside a window goes through [`crate::CudaBackend::copy`].
    pub fn write_device(&self, addr: u64, bytes: &[u8], timeout: Duration) -> CudaResult<()> {
        self.device.bind()?;
        self.order_stream(self.digest_stream.raw())?;
        copy::write_device(&self.device, self.digest_stream.raw(), addr, bytes, timeout)
    }

    pub(super) fn submit_digests_inner(
        &self,
        ops: &[DigestOp],
        key: DigestKey,
    ) -> CudaResult<Fence> {
        self.device.bind()?;
        let (host, dev) = digest::split_ops(&self.state.lock().backing, ops, key)?;
        let mut job = DigestJob {
            n: ops.len(),
            host,
            device_ops: dev.iter().map(|d| d.0).collect(),
            scratch: None,
            staging: None,
            key,
            timing: None,
        };
        let s = self.digest_stream.raw();
        if dev.is_empty() {
            return Ok(self.new_fence(Pending {
                events: SmallVec::new(),
                digests: Some(job),
                table: None,
                timing: None,
                done: true,
            }));
        }
        // Digests read what a restore ordered on the device wrote.
        self.order_stream(s)?;
        if log::log_enabled!(log::Level::Debug) {
            self.log_unheld_ranges(&dev);
        }
        match self.kernels.get() {
            Some(k) => {
                let batch = Batch::plan(&dev, self.segment.load(Ordering::Relaxed))?;
                let scratch = self.take_scratch(batch.need)?;
                let before = if log::log_enabled!(log::Level::Trace) {
                    let e = self.device.event(true)?;
                    e.record(s)?;
                    Some(e)
                } else {
                    None
                };
                if let Err(e) = batch.launch(k, &scratch, key, s) {
                    // Whatever was enqueued may still run: leak the scratch rather than reuse it.
                    std::mem::forget(scratch);
                    return Err(e);
                }
                job.scratch = Some(scratch);
                if let Some(a) = before {
                    let b = self.device.event(true)?;
                    b.record(s)?;
                    let bytes = dev.iter().map(|d| d.2).sum();
                    job.timing = Some((a, b, bytes, batch.blocks as usize));
                }
            }
            None => job.staging = Some(Staging::stage(&dev, s)?),
        }
        let events = self.fence_events(&[s])?;
        Ok(self.new_fence(Pending {
            events,
            digests: Some(job),
            table: None,
            timing: None,
            done: false,
        }))
    }

    /// Diagnostics (debug log): names every range of a digest batch that no live allocation
    /// or mapping holds as the driver sees it, before the kernel reads it. Such a read faults
    /// the context; the memory layer checks liveness against the tracker, so a range named here
    /// is memory the tracker still thinks live.
    fn log_unheld_ranges(&self, dev: &[digest::DeviceOp]) {
        let mut bad = Vec::new();
        for &(_, addr, len) in dev {
            let held = PointerAttributes::query(addr).is_ok_and(|a| {
                let (base, size) = if a.mapped { a.mapping } else { a.range };
                a.memory_type != 0 && base <= addr && addr + len <= base + size
            });
            if !held && bad.len() < 16 {
                bad.push(format!("{addr:#x}+{len}"));
            }
        }
        if !bad.is_empty() {
            log::debug!(
                "[kernel-replay] agent {}: digest batch reads ranges no allocation holds: {}",
                self.agent,
                bad.join(" ")
            );
        }
    }

    pub(super) fn submit_copies_inner(&self, ops: &[CopyOp]) -> Result<Fence, BackendError> {
        const OP: &str = "submit copies";
        let resolved = copy::resolve_ops(&self.state.lock().backing, ops)
            .map_err(|m| BackendError::on(self.agent, OP).invalid(m))?;
        self.device
            .bind()
            .map_err(|e| e.to_backend(self.agent, OP))?;
        // Small device-to-device copies: one gather launch on the device lane (when the
        // kernels compiled and there are several); the rest one `cuMemcpyAsync` each.
        let (gather, rest): (Vec<ResolvedCopy>, Vec<ResolvedCopy>) = match self.kernels.get() {
            Some(_)
                if self.gather.load(Ordering::Relaxed)
                    && resolved.iter().filter(|c| copy::gathered(c)).count() > 1 =>
            {
                resolved.iter().partition(|c| copy::gathered(c))
            }
            _ => (Vec::new(), resolved),
        };
        let mut table = None;
        let mut used: SmallVec<[sys::CUstream; 4]> = SmallVec::new();
        let trace = log::log_enabled!(log::Level::Trace);
        let lane = self.copies.stream(Lane::Device, 0);
        let before = match trace {
            true => {
                let e = self
                    .device
                    .event(true)
                    .map_err(|e| e.to_backend(self.agent, OP))?;
                e.record(lane).map_err(|e| e.to_backend(self.agent, OP))?;
                Some(e)
            }
            false => None,
        };
        if let (Some(k), false) = (self.kernels.get(), gather.is_empty()) {
            let ops: Vec<(u64, u64, u64)> = gather.iter().map(|c| (c.src, c.dst, c.len)).collect();
            let pieces = kernels::copy_pieces(&ops);
            let t = self
                .take_table(pieces.len())
                .map_err(|e| e.to_backend(self.agent, OP))?;
            let s = self.copies.stream(Lane::Device, 0);
            if let Err(e) = copy::launch_gather(&k.copy, &t, &pieces, s) {
                // Whatever was enqueued may still read the table: leak it rather than reuse it.
                std::mem::forget(t);
                return Err(e.to_backend(self.agent, OP));
            }
            table = Some(t);
            used.push(s);
        }
        let plan = schedule(&rest, self.config.host_chunk_bytes);
        let (more, failure) = copy::enqueue_all(&self.copies, &plan);
        let timing = match before {
            Some(a) if failure.is_none() => {
                let b = self
                    .device
                    .event(true)
                    .map_err(|e| e.to_backend(self.agent, OP))?;
                b.record(lane).map_err(|e| e.to_backend(self.agent, OP))?;
                let bytes = gather.iter().chain(&rest).map(|c| c.len).sum();
                Some((a, b, gather.len(), rest.len(), bytes))
            }
            _ => None,
        };
        for s in more {
            if !used.contains(&s) {
                used.push(s);
            }
        }
        let events = self
            .fence_events(&used)
            .map_err(|e| e.to_backend(self.agent, OP))?;
        if let Some(e) = failure {
            // Copies enqueued before the failure may still run; wait for them (bounded) so the
            // memory layer may reuse its blocks, then report the failure.
            let refs: Vec<&Event> = events.iter().collect();
            if !matches!(wait_events(&refs, Duration::from_secs(10)), Ok(true)) {
                log::warn!("[kernel-replay] copies before a failed copy did not finish in 10 s");
            }
            // A sticky error (the context is lost) stays one: the window then skips a restore
            // instead of aborting on it.
            let kind = match e.kind() {
                BackendErrorKind::DeviceLost => BackendErrorKind::DeviceLost,
                _ => BackendErrorKind::CopyFailed,
            };
            if let Some(t) = table {
                // Waited for above when the wait succeeded; either way never reused.
                std::mem::forget(t);
            }
            return Err(BackendError::on(self.agent, OP).error(kind, e.to_string()));
        }
        Ok(self.new_fence(Pending {
            events,
            digests: None,
            table,
            timing,
            done: false,
        }))
    }
}
