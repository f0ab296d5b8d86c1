//! The memory map (SPEC §9.1): every live block the simulator hands out or maps (pool blocks,
//! locked host memory, virtual-memory mappings) by base address, and the only ways to reach
//! them, checked against the map under its read lock: a kernel's accessors ([`Dispatch`]),
//! copies, and the look-ups pointer info answers from. A mapping's access record
//! ([`MapAccess`]) is here because those checks read it.

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use parking_lot::{Mutex, RwLock};
use replay_hsa::sys;

/// A memory access outside every live allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemFault {
    /// The faulting address.
    pub addr: u64,
    /// The access length.
    pub len: usize,
}

impl std::fmt::Display for MemFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "memory fault at {:#x} ({} bytes)", self.addr, self.len)
    }
}

/// A kernel's body.
pub type KernelFn = Arc<dyn Fn(&mut Dispatch<'_>) -> Result<(), MemFault> + Send + Sync>;

/// What a kernel body sees: its dispatch packet and checked access to simulated memory.
#[derive(Debug)]
pub struct Dispatch<'a> {
    /// The packet (a copy taken when it was consumed).
    pub packet: &'a sys::hsa_kernel_dispatch_packet_t,
    /// The agent running it.
    pub agent: sys::hsa_agent_t,
}

impl Dispatch<'_> {
    /// Reads `buf.len()` bytes at `addr`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        with_range_as(Some((self.agent.handle, false)), addr, buf.len(), |p| {
            // SAFETY: `with_range` hands a pointer to `buf.len()` bytes inside a live
            // allocation, kept alive by the memory map's read lock during the call.
            unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) }
        })
    }

    /// Writes `data` at `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        with_range_as(Some((self.agent.handle, true)), addr, data.len(), |p| {
            // SAFETY: as in `read`; the allocation is writable host memory.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) }
        })
    }

    /// Reads a little-endian `u64`.
    pub fn read_u64(&self, addr: u64) -> Result<u64, MemFault> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes a little-endian `u64`.
    pub fn write_u64(&self, addr: u64, v: u64) -> Result<(), MemFault> {
        self.write(addr, &v.to_le_bytes())
    }

    /// The `i`-th 8-byte word of the kernel arguments.
    pub fn arg(&self, i: u64) -> Result<u64, MemFault> {
        self.read_u64(self.packet.kernarg_address + 8 * i)
    }

    /// Adds `v` to the `u64` at `addr` (atomically with respect to other kernels).
    pub fn atomic_add_u64(&self, addr: u64, v: u64) -> Result<u64, MemFault> {
        static ATOMICS: Mutex<()> = Mutex::new(());
        let _g = ATOMICS.lock();
        let old = self.read_u64(addr)?;
        self.write_u64(addr, old.wrapping_add(v))?;
        Ok(old)
    }

    /// Work items in the grid.
    pub fn work_items(&self) -> u64 {
        u64::from(self.packet.grid_size_x)
            * u64::from(self.packet.grid_size_y.max(1))
            * u64::from(self.packet.grid_size_z.max(1))
    }
}

/// One live allocation.
#[derive(Debug, Clone)]
pub struct Alloc {
    pub(crate) size: usize,
    pub(super) layout: Layout,
    pub(crate) pool: u64,
    pub(crate) agent: u64,
    /// Set for a virtual-memory mapping (the vmem entries): its handle and who may access it.
    pub(crate) vmem: Option<Arc<MapAccess>>,
}

/// `hsa_access_permission_t`: no access.
pub const HSA_ACCESS_PERMISSION_NONE: u32 = 0;
/// `hsa_access_permission_t`: read-only.
pub const HSA_ACCESS_PERMISSION_RO: u32 = 1;
/// `hsa_access_permission_t`: write-only.
pub const HSA_ACCESS_PERMISSION_WO: u32 = 2;
/// `hsa_access_permission_t`: read-write.
pub const HSA_ACCESS_PERMISSION_RW: u32 = 3;

/// Who may access one mapping, read by kernels' accessors under the memory map's lock. The
/// vmem entries create and update it; it is here because the memory map's checks read it.
#[derive(Debug, Default)]
pub struct MapAccess {
    /// The vmem handle mapped.
    pub(crate) handle: u64,
    /// Where in the handle the mapping starts, bytes.
    pub(crate) offset: usize,
    /// `hsa_access_permission_t` by agent handle (none until set).
    pub(crate) perms: Mutex<BTreeMap<u64, u32>>,
}

impl MapAccess {
    /// Whether `agent`'s kernels may read (or, with `write`, write) the mapping.
    pub(crate) fn allows(&self, agent: u64, write: bool) -> bool {
        match self.perms.lock().get(&agent).copied() {
            Some(HSA_ACCESS_PERMISSION_RW) => true,
            Some(HSA_ACCESS_PERMISSION_RO) => !write,
            Some(HSA_ACCESS_PERMISSION_WO) => write,
            _ => false,
        }
    }
}

pub(super) static MEMORY: LazyLock<RwLock<BTreeMap<u64, Alloc>>> =
    LazyLock::new(|| RwLock::new(BTreeMap::new()));

/// Maps host memory the simulator does not own (`hsa_amd_memory_lock`) into the memory map for
/// `agent`, without a pool (0), so kernels and copies reach it; a free never releases it.
/// Fails when the range is empty or overlaps a live allocation.
pub(crate) fn map_foreign(base: u64, size: usize, agent: u64) -> bool {
    let Ok(layout) = Layout::from_size_align(size, 1) else {
        return false;
    };
    let mut m = MEMORY.write();
    let end = base.saturating_add(size as u64);
    if size == 0
        || m.range(..end)
            .next_back()
            .is_some_and(|(b, a)| b + a.size as u64 > base)
    {
        return false;
    }
    m.insert(
        base,
        Alloc {
            size,
            layout,
            pool: 0,
            agent,
            vmem: None,
        },
    );
    true
}

/// Removes a mapping of [`map_foreign`] (the memory stays the owner's).
pub(crate) fn unmap_foreign(base: u64) -> bool {
    let mut m = MEMORY.write();
    if m.get(&base).is_some_and(|a| a.pool == 0) {
        m.remove(&base);
        true
    } else {
        false
    }
}

/// The allocation containing `addr`: `(base, record)`.
pub(crate) fn find(addr: u64) -> Option<(u64, Alloc)> {
    let m = MEMORY.read();
    let (b, a) = m.range(..=addr).next_back()?;
    (addr < b + a.size as u64).then(|| (*b, a.clone()))
}

/// Runs `f` with a pointer to `[addr, addr + len)` if it lies inside one live allocation.
pub(crate) fn with_range(addr: u64, len: usize, f: impl FnOnce(*mut u8)) -> Result<(), MemFault> {
    with_range_as(None, addr, len, f)
}

/// [`with_range`] for a kernel of `agent` (`Some((agent, write))`): a virtual-memory mapping
/// that agent has no access to (or only read access, for a write) faults.
fn with_range_as(
    by: Option<(u64, bool)>,
    addr: u64,
    len: usize,
    f: impl FnOnce(*mut u8),
) -> Result<(), MemFault> {
    let m = MEMORY.read();
    let fault = MemFault { addr, len };
    let (b, a) = m.range(..=addr).next_back().ok_or(fault.clone())?;
    if addr.checked_add(len as u64).ok_or(fault.clone())? > b + a.size as u64 {
        return Err(fault);
    }
    if let (Some((agent, write)), Some(v)) = (by, &a.vmem) {
        if !v.allows(agent, write) {
            return Err(fault);
        }
    }
    f(addr as *mut u8);
    Ok(())
}

/// Inserts a mapping's block (for the vmem entries): `[base, base + size)` of a reservation, which
/// the caller owns; fails when it overlaps a live allocation.
pub(crate) fn insert_mapping(
    base: u64,
    size: usize,
    pool: u64,
    agent: u64,
    access: Arc<MapAccess>,
) -> bool {
    let Ok(layout) = Layout::from_size_align(size, 1) else {
        return false;
    };
    let mut m = MEMORY.write();
    let end = base.saturating_add(size as u64);
    if size == 0
        || m.range(..end)
            .next_back()
            .is_some_and(|(b, a)| b + a.size as u64 > base)
    {
        return false;
    }
    m.insert(
        base,
        Alloc {
            size,
            layout,
            pool,
            agent,
            vmem: Some(access),
        },
    );
    true
}

/// Removes the mapping blocks inside `[base, base + size)` and returns them as (base, record);
/// `None` (nothing removed) when the range cuts one.
pub(crate) fn remove_mappings(base: u64, size: usize) -> Option<Vec<(u64, Alloc)>> {
    let mut m = MEMORY.write();
    let end = base.saturating_add(size as u64);
    let inside: Vec<u64> = m
        .range(..end)
        .filter(|(b, a)| a.vmem.is_some() && **b + a.size as u64 > base)
        .map(|(b, _)| *b)
        .collect();
    if inside
        .iter()
        .any(|b| *b < base || b + m[b].size as u64 > end)
    {
        return None;
    }
    Some(
        inside
            .into_iter()
            .filter_map(|b| m.remove(&b).map(|a| (b, a)))
            .collect(),
    )
}

/// Copies `len` bytes between two simulated ranges.
pub(crate) fn copy(dst: u64, src: u64, len: usize) -> Result<(), MemFault> {
    let mut tmp = vec![0u8; len];
    with_range(src, len, |p| {
        // SAFETY: `len` readable bytes inside a live allocation (map read-locked).
        unsafe { std::ptr::copy_nonoverlapping(p, tmp.as_mut_ptr(), len) }
    })?;
    with_range(dst, len, |p| {
        // SAFETY: `len` writable bytes inside a live allocation (map read-locked).
        unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr(), p, len) }
    })
}
