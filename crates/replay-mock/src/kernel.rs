//! Kernels as Rust closures over simulated device memory (SPEC §2; atomics run once per pass,
//! §7.2). Not one of the backend roles (a real backend's kernels are the application's code):
//! the simulator's stand-in for that code. Code objects that hold kernels are the `module`
//! role ([`crate::module`]).
//!
//! A [`Kernel`] is called once per execution (dispatch, replay pass or tool work) with a
//! [`KernelCtx`]: the argument block, the grid, and read/write access to device memory by
//! device address. A bad address, an out-of-bounds access or a write to read-only memory is a
//! simulated memory fault ([`MemFault`]) returned to the body, which normally propagates it with
//! `?`; the execution then ends, the dispatch still completes, and its [`crate::Completion`]
//! carries the error. A panicking body is caught on the worker thread and reported the same way.
//!
//! The context counts what the kernel did (bytes read and written, accesses as instructions),
//! which feeds the simulated counters ([`crate::counters`]) and the modelled GPU time.
//!
//! The context reaches device memory through `DeviceAccess`, which the device's shared state
//! implements in [`crate::memory`]; executions run on the device's worker threads
//! ([`crate::gpu`]). So this file is near the bottom: it uses only the counters.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use replay_core::{AgentId, Dim3, DispatchId, KernelId, KernelKey, MemoryClass};

use crate::counters::CounterValues;

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// A load.
    Read,
    /// A store.
    Write,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Read => "read",
            Self::Write => "write",
        })
    }
}

/// Why an access faulted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MemFaultKind {
    /// No allocation contains the address (never allocated, or freed).
    Unmapped,
    /// The access starts inside an allocation but runs past its end.
    OutOfBounds {
        /// Base of the allocation.
        base: u64,
        /// Its size.
        size: u64,
    },
    /// A virtual-memory mapping this agent has no access to (or only read access, for a
    /// store).
    NoAccess,
    /// A store to read-only memory (a module constant).
    ReadOnly,
}

impl fmt::Display for MemFaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unmapped => f.write_str("address not mapped"),
            Self::OutOfBounds { base, size } => {
                write!(f, "runs past the end of allocation {base:#x}+{size}")
            }
            Self::NoAccess => f.write_str("mapping not accessible to this agent"),
            Self::ReadOnly => f.write_str("memory is read-only"),
        }
    }
}

/// A simulated memory fault.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
#[error("memory fault on agent {agent}: {access} of {len} bytes at {addr:#x}: {kind}")]
pub struct MemFault {
    /// Agent that made the access.
    pub agent: AgentId,
    /// Address accessed.
    pub addr: u64,
    /// Bytes accessed.
    pub len: u64,
    /// Load or store.
    pub access: Access,
    /// Why it faulted.
    pub kind: MemFaultKind,
}

/// How a kernel execution failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// A memory fault.
    #[error(transparent)]
    Fault(#[from] MemFault),
    /// The body panicked (caught on the worker; the dispatch still completes).
    #[error("kernel {kernel:?} panicked: {message}")]
    Panic {
        /// Kernel name.
        kernel: String,
        /// The panic message.
        message: String,
    },
    /// The body trapped on purpose (`s_trap`, `__trap()`).
    #[error("kernel trapped: {0}")]
    Trap(String),
    /// The simulator was shut down before the submission completed.
    #[error("the simulator was shut down before the submission completed")]
    Lost,
}

/// The body of a kernel.
pub type KernelBody = Arc<dyn Fn(&mut KernelCtx<'_>) -> Result<(), KernelError> + Send + Sync>;

static NEXT_SYMBOL: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_symbol() -> u64 {
    NEXT_SYMBOL.fetch_add(1, Ordering::Relaxed)
}

/// A kernel: name, code object and symbol (its identity for the library's memo, SPEC §7.2), and
/// the body. Cheap to clone.
#[derive(Clone)]
pub struct Kernel {
    /// Symbol name, as tools see it.
    pub name: Arc<str>,
    /// Loaded code object; 0 for a kernel made with [`Kernel::new`] outside a module.
    pub code_object: u64,
    /// Symbol handle, unique per kernel.
    pub symbol: u64,
    /// Workgroup size reported in the dispatch info.
    pub workgroup: Dim3,
    /// Private segment bytes per work-item.
    pub private_segment_size: u32,
    /// Group segment bytes per workgroup.
    pub group_segment_size: u32,
    /// Modelled run time on the simulator's clock: the execution waits this long (virtual time
    /// in virtual mode, so it takes no wall time) before the body runs. `None`: instant.
    pub duration: Option<Duration>,
    /// What it does.
    pub body: KernelBody,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name)
            .field("code_object", &self.code_object)
            .field("symbol", &self.symbol)
            .field("duration", &self.duration)
            .finish_non_exhaustive()
    }
}

impl Kernel {
    /// A kernel outside any module (code object 0, a fresh symbol).
    pub fn new(
        name: &str,
        body: impl Fn(&mut KernelCtx<'_>) -> Result<(), KernelError> + Send + Sync + 'static,
    ) -> Self {
        Self::from_body(name, Arc::new(body))
    }

    /// A kernel from a shared body.
    pub fn from_body(name: &str, body: KernelBody) -> Self {
        Self {
            name: Arc::from(name),
            code_object: 0,
            symbol: next_symbol(),
            workgroup: Dim3::new(64, 1, 1),
            private_segment_size: 0,
            group_segment_size: 0,
            duration: None,
            body,
        }
    }

    /// Sets the workgroup size.
    pub fn with_workgroup(mut self, workgroup: Dim3) -> Self {
        self.workgroup = workgroup;
        self
    }

    /// Sets the modelled run time.
    pub fn with_duration(mut self, duration: Duration) -> Self {
        self.duration = Some(duration);
        self
    }

    /// Sets the private and group segment sizes.
    pub fn with_segments(mut self, private: u32, group: u32) -> Self {
        self.private_segment_size = private;
        self.group_segment_size = group;
        self
    }

    /// The kernel object id tools see.
    pub fn id(&self) -> KernelId {
        KernelId(self.symbol)
    }

    /// Its identity for the library's memo when dispatched on `agent`.
    pub fn key(&self, agent: AgentId) -> KernelKey {
        KernelKey {
            agent,
            code_object: self.code_object,
            symbol: self.symbol,
        }
    }
}

/// Builds an argument block: scalars at their natural alignment, pointers 8-byte aligned, the
/// block padded to a multiple of 8 bytes (SPEC §7.2 reads it as 8-byte words).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernArgs {
    bytes: Vec<u8>,
}

impl KernArgs {
    /// An empty block.
    pub fn new() -> Self {
        Self::default()
    }

    /// Pads to a multiple of `n` bytes.
    pub fn align(mut self, n: usize) -> Self {
        let n = n.max(1);
        while self.bytes.len() % n != 0 {
            self.bytes.push(0);
        }
        self
    }

    /// Offset the next value of alignment `n` will land at.
    pub fn offset_for(&self, n: usize) -> usize {
        self.bytes.len().div_ceil(n.max(1)) * n.max(1)
    }

    /// A device pointer.
    pub fn ptr(self, addr: u64) -> Self {
        self.u64(addr)
    }

    /// A 64-bit value.
    pub fn u64(self, v: u64) -> Self {
        let mut s = self.align(8);
        s.bytes.extend_from_slice(&v.to_le_bytes());
        s
    }

    /// A 32-bit value.
    pub fn u32(self, v: u32) -> Self {
        let mut s = self.align(4);
        s.bytes.extend_from_slice(&v.to_le_bytes());
        s
    }

    /// A signed 32-bit value.
    pub fn i32(self, v: i32) -> Self {
        self.u32(v as u32)
    }

    /// A float.
    pub fn f32(self, v: f32) -> Self {
        self.u32(v.to_bits())
    }

    /// A double.
    pub fn f64(self, v: f64) -> Self {
        self.u64(v.to_bits())
    }

    /// Raw bytes, unaligned.
    pub fn bytes(mut self, b: &[u8]) -> Self {
        self.bytes.extend_from_slice(b);
        self
    }

    /// The block, padded to a multiple of 8.
    pub fn build(self) -> Vec<u8> {
        self.align(8).bytes
    }
}

/// Device memory as a kernel reaches it: implemented by the device's shared state in
/// [`crate::memory`], so a kernel's context needs nothing above this file.
pub(crate) trait DeviceAccess {
    /// Loads bytes as agent `agent` sees them (host access when `host`).
    fn read(&self, agent: AgentId, addr: u64, buf: &mut [u8], host: bool) -> Result<(), MemFault>;
    /// Stores bytes; a device store to read-only memory faults, a host store does not.
    fn write(&self, agent: AgentId, addr: u64, data: &[u8], host: bool) -> Result<(), MemFault>;
    /// Read-modify-write of `len` bytes under one lock.
    fn update(
        &self,
        agent: AgentId,
        addr: u64,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), MemFault>;
}

/// What a kernel did, for counters and modelled time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ExecStats {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub instructions: u64,
}

/// What one execution of a kernel sees.
pub struct KernelCtx<'a> {
    gpu: &'a dyn DeviceAccess,
    agent: AgentId,
    args: &'a [u8],
    grid: Dim3,
    workgroup: Dim3,
    dispatch_id: DispatchId,
    pub(crate) stats: ExecStats,
}

impl fmt::Debug for KernelCtx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelCtx")
            .field("agent", &self.agent)
            .field("grid", &self.grid)
            .field("args", &self.args.len())
            .finish_non_exhaustive()
    }
}

impl<'a> KernelCtx<'a> {
    pub(crate) fn new(
        gpu: &'a dyn DeviceAccess,
        agent: AgentId,
        args: &'a [u8],
        grid: Dim3,
        workgroup: Dim3,
        dispatch_id: DispatchId,
    ) -> Self {
        Self {
            gpu,
            agent,
            args,
            grid,
            workgroup,
            dispatch_id,
            stats: ExecStats::default(),
        }
    }

    /// The agent running the kernel.
    pub fn agent(&self) -> AgentId {
        self.agent
    }

    /// The dispatch id (the library's reservation; 0 when no replay service saw it).
    pub fn dispatch_id(&self) -> DispatchId {
        self.dispatch_id
    }

    /// Grid size in work-items.
    pub fn grid(&self) -> Dim3 {
        self.grid
    }

    /// Workgroup size.
    pub fn workgroup(&self) -> Dim3 {
        self.workgroup
    }

    /// Number of work-items, saturating at `u64::MAX` (three `u32` dimensions can exceed it).
    pub fn work_items(&self) -> u64 {
        u64::from(self.grid.x)
            .saturating_mul(u64::from(self.grid.y.max(1)))
            .saturating_mul(u64::from(self.grid.z.max(1)))
    }

    /// The argument block.
    pub fn args(&self) -> &[u8] {
        self.args
    }

    fn arg_bytes<const N: usize>(&self, offset: usize) -> [u8; N] {
        let mut b = [0u8; N];
        if let Some(s) = self.args.get(offset..offset + N) {
            b.copy_from_slice(s);
        }
        b
    }

    /// The 64-bit argument at byte `offset` (0 past the end).
    pub fn arg_u64(&self, offset: usize) -> u64 {
        u64::from_le_bytes(self.arg_bytes(offset))
    }

    /// The 32-bit argument at byte `offset` (0 past the end).
    pub fn arg_u32(&self, offset: usize) -> u32 {
        u32::from_le_bytes(self.arg_bytes(offset))
    }

    /// The float argument at byte `offset`.
    pub fn arg_f32(&self, offset: usize) -> f32 {
        f32::from_bits(self.arg_u32(offset))
    }

    /// The `i`-th 8-byte word of the argument block.
    pub fn word(&self, i: usize) -> u64 {
        self.arg_u64(i * 8)
    }

    /// Counts `n` modelled instructions (every access counts one by itself).
    pub fn instructions(&mut self, n: u64) {
        self.stats.instructions += n;
    }

    /// Loads `buf.len()` bytes at `addr`.
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        self.stats.instructions += 1;
        self.gpu
            .read(self.agent, addr, buf, false)
            .inspect(|()| self.stats.bytes_read += buf.len() as u64)
    }

    /// Stores `data` at `addr`.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        self.stats.instructions += 1;
        self.gpu
            .write(self.agent, addr, data, false)
            .inspect(|()| self.stats.bytes_written += data.len() as u64)
    }

    /// Loads `len` bytes at `addr`.
    pub fn read_vec(&mut self, addr: u64, len: usize) -> Result<Vec<u8>, MemFault> {
        let mut v = vec![0u8; len];
        self.read(addr, &mut v)?;
        Ok(v)
    }

    /// Read-modify-write of `len` bytes at `addr` in one access (counts as a read and a write).
    pub fn update(
        &mut self,
        addr: u64,
        len: usize,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<(), MemFault> {
        self.stats.instructions += 2;
        let mut f = Some(f);
        self.gpu.update(self.agent, addr, len, &mut |b| {
            if let Some(f) = f.take() {
                f(b);
            }
        })?;
        self.stats.bytes_read += len as u64;
        self.stats.bytes_written += len as u64;
        Ok(())
    }

    /// Loads a `u32`.
    pub fn read_u32(&mut self, addr: u64) -> Result<u32, MemFault> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Stores a `u32`.
    pub fn write_u32(&mut self, addr: u64, v: u32) -> Result<(), MemFault> {
        self.write(addr, &v.to_le_bytes())
    }

    /// Loads a `u64`.
    pub fn read_u64(&mut self, addr: u64) -> Result<u64, MemFault> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Stores a `u64`.
    pub fn write_u64(&mut self, addr: u64, v: u64) -> Result<(), MemFault> {
        self.write(addr, &v.to_le_bytes())
    }

    /// Loads an `f32`.
    pub fn read_f32(&mut self, addr: u64) -> Result<f32, MemFault> {
        self.read_u32(addr).map(f32::from_bits)
    }

    /// Stores an `f32`.
    pub fn write_f32(&mut self, addr: u64, v: f32) -> Result<(), MemFault> {
        self.write_u32(addr, v.to_bits())
    }

    /// Loads `n` little-endian `u32`s.
    pub fn read_u32s(&mut self, addr: u64, n: usize) -> Result<Vec<u32>, MemFault> {
        let b = self.read_vec(addr, n * 4)?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Stores `u32`s.
    pub fn write_u32s(&mut self, addr: u64, v: &[u32]) -> Result<(), MemFault> {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.write(addr, &b)
    }

    /// Atomic add on a `u64`; returns the old value. Atomics run once per pass (SPEC §7.2).
    pub fn atomic_add_u64(&mut self, addr: u64, v: u64) -> Result<u64, MemFault> {
        let mut old = 0;
        self.update(addr, 8, |b| {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            old = u64::from_le_bytes(w);
            b.copy_from_slice(&old.wrapping_add(v).to_le_bytes());
        })?;
        Ok(old)
    }
}

/// Which execution this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Role {
    /// A replay pass (completion suppressed).
    Pass(u32),
    /// The dispatch run once with its own completion.
    Ordinary {
        /// Launched from inside a tool callback.
        tool_work: bool,
    },
}

/// What an execution produced.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunResult {
    pub gpu_seconds: f64,
    pub counters: CounterValues,
    pub error: Option<KernelError>,
}

/// Modelled GPU time: a launch overhead, the bytes at device bandwidth, one ns per instruction.
pub(crate) fn modelled_seconds(c: &CounterValues, device_gbps: f64) -> f64 {
    2e-6 + (c.bytes_read + c.bytes_written) as f64 / (device_gbps.max(1e-3) * 1e9)
        + c.instructions as f64 * 1e-9
}

/// Whether `class` forbids device stores.
pub(crate) fn is_read_only(class: MemoryClass) -> bool {
    class.contains(MemoryClass::READ_ONLY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernargs_align_and_pad() {
        let a = KernArgs::new().u32(7).ptr(0x1000).u32(3).build();
        assert_eq!(a.len(), 24);
        assert_eq!(&a[0..4], &7u32.to_le_bytes());
        assert_eq!(&a[8..16], &0x1000u64.to_le_bytes());
        assert_eq!(&a[16..20], &3u32.to_le_bytes());
        assert_eq!(KernArgs::new().u32(1).offset_for(8), 8);
    }
}
