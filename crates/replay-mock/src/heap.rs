//! Host-backed device memory: the data model under [`crate::memory`] and [`crate::vmem`].
//!
//! Every allocation of every class of SPEC §7.1 is a `Vec<u8>` keyed by a fake device address.
//! Agent `i` owns the address range `[AGENT_SPAN * (i + 1), AGENT_SPAN * (i + 2))`, split into
//! areas: device memory, host-visible memory (pinned, managed), imported memory (IPC, peer
//! mappings) and library memory (kernarg pool, snapshot backing). Addresses are aligned, freed
//! addresses are reused first-fit (so the tracker's generations matter), and each agent has
//! capacity limits per pool: device, pinned host, pageable host.
//!
//! Virtual memory is modelled here too: the runtime's reservations and physical handles
//! (`VmemState`) and what a mapping allocation knows besides its bytes (`MapInfo`: its
//! handle and access per agent, checked on every device access by `check_access`).
//!
//! It uses only the kernel's fault types and [`SimError`]; every file that touches device
//! memory builds on it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use replay_core::{AgentId, MemoryClass, Tier};
use replay_memory::{MapAccess, MappedHandle};

use crate::error::SimError;
use crate::kernel::{Access, MemFault, MemFaultKind};

/// Address span of one agent.
pub const AGENT_SPAN: u64 = 0x1000_0000_0000;

/// First address of `agent`'s range.
pub fn agent_base(agent: AgentId) -> u64 {
    AGENT_SPAN * (agent.0 + 1)
}

/// The agent whose range holds `addr`.
pub fn agent_of(addr: u64) -> Option<AgentId> {
    (addr / AGENT_SPAN).checked_sub(1).map(AgentId)
}

/// Where in an agent's range an allocation lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Area {
    Device,
    /// Reserved virtual ranges, where mappings live.
    Virtual,
    Host,
    Imported,
    Library,
}

impl Area {
    fn range(self) -> (u64, u64) {
        match self {
            Self::Device => (0, 0x0600_0000_0000),
            Self::Virtual => (0x0600_0000_0000, 0x0800_0000_0000),
            Self::Host => (0x0800_0000_0000, 0x0C00_0000_0000),
            Self::Imported => (0x0C00_0000_0000, 0x0E00_0000_0000),
            Self::Library => (0x0E00_0000_0000, AGENT_SPAN),
        }
    }

    /// The area's addresses in `agent`'s range, as (start, end).
    pub(crate) fn absolute(self, agent: AgentId) -> (u64, u64) {
        let (lo, hi) = self.range();
        (agent_base(agent) + lo, agent_base(agent) + hi)
    }
}

/// Which capacity an allocation counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    /// The agent's device memory.
    Device,
    /// Page-locked host memory.
    Pinned,
    /// Ordinary host memory.
    Pageable,
    /// Memory that lives elsewhere (IPC-imported, peer mappings): no capacity here.
    Elsewhere,
}

impl Pool {
    fn index(self) -> Option<usize> {
        match self {
            Self::Device => Some(0),
            Self::Pinned => Some(1),
            Self::Pageable => Some(2),
            Self::Elsewhere => None,
        }
    }

    /// Name used in errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Device => "device",
            Self::Pinned => "pinned host",
            Self::Pageable => "pageable host",
            Self::Elsewhere => "imported",
        }
    }

    pub(crate) fn of_tier(t: Tier) -> Self {
        match t {
            Tier::Device => Self::Device,
            Tier::PinnedHost => Self::Pinned,
            Tier::PageableHost => Self::Pageable,
        }
    }
}

/// Who made an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// The application, reported to the tracker.
    App,
    /// The application, through a path the backend does not see (never reported).
    Unreported,
    /// A tool, marked as its own.
    Tool,
    /// A loaded code object's variable (found by enumeration, not reported).
    Module,
    /// The memory layer's backing memory.
    Backing,
    /// The runtime itself (the kernarg pool).
    Runtime,
}

/// Placement of an application allocation of `class`.
pub(crate) fn placement(class: MemoryClass) -> (Area, Pool) {
    if class.intersects(MemoryClass::IPC_IMPORTED | MemoryClass::PEER) {
        (Area::Imported, Pool::Elsewhere)
    } else if class.contains(MemoryClass::PINNED_HOST) {
        (Area::Host, Pool::Pinned)
    } else if class.contains(MemoryClass::MANAGED) {
        (Area::Host, Pool::Device)
    } else {
        (Area::Device, Pool::Device)
    }
}

/// One allocation: bytes on the host, keyed by a device address.
#[derive(Debug)]
pub(crate) struct Allocation {
    pub base: u64,
    pub size: u64,
    pub reserved: u64,
    pub class: MemoryClass,
    pub owner: Owner,
    pub pool: Pool,
    pub data: RwLock<Vec<u8>>,
    /// Set for a virtual-memory mapping: its handle and who may access it.
    pub map: Option<MapInfo>,
}

/// Description of a live allocation, for tests and tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AllocInfo {
    /// Base address.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
    /// Class as allocated.
    pub class: MemoryClass,
    /// Who made it.
    pub owner: Owner,
    /// Which capacity it counts against.
    pub pool: Pool,
}

/// A test's action run on the copy engine when the next restore batch starts.
pub(crate) struct RestoreHook(pub(crate) Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for RestoreHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RestoreHook")
    }
}

/// One agent's memory: allocations by base and per-pool usage.
#[derive(Debug)]
pub(crate) struct Heap {
    agent: AgentId,
    base: u64,
    align: u64,
    caps: [u64; 3],
    used: Mutex<[u64; 3]>,
    allocs: RwLock<BTreeMap<u64, Arc<Allocation>>>,
    pub(crate) restore_hook: Mutex<Option<RestoreHook>>,
}

fn round_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

impl Heap {
    pub fn new(agent: AgentId, align: u64, caps: [u64; 3]) -> Self {
        Self {
            agent,
            base: agent_base(agent),
            align: align.max(1).next_power_of_two(),
            caps,
            used: Mutex::new([0; 3]),
            allocs: RwLock::new(BTreeMap::new()),
            restore_hook: Mutex::new(None),
        }
    }

    pub fn available(&self, pool: Pool) -> u64 {
        pool.index()
            .map(|i| self.caps[i].saturating_sub(self.used.lock()[i]))
            .unwrap_or(u64::MAX)
    }

    pub fn used(&self, pool: Pool) -> u64 {
        pool.index().map(|i| self.used.lock()[i]).unwrap_or(0)
    }

    pub fn alloc(
        &self,
        size: u64,
        class: MemoryClass,
        owner: Owner,
        area: Area,
        pool: Pool,
        at: Option<u64>,
    ) -> Result<Arc<Allocation>, SimError> {
        self.alloc_with(size, class, owner, area, pool, at, None, None)
    }

    /// [`Heap::alloc`] with the initial bytes (zeros when `None`) and a mapping's info.
    #[allow(clippy::too_many_arguments)]
    pub fn alloc_with(
        &self,
        size: u64,
        class: MemoryClass,
        owner: Owner,
        area: Area,
        pool: Pool,
        at: Option<u64>,
        data: Option<Vec<u8>>,
        map: Option<MapInfo>,
    ) -> Result<Arc<Allocation>, SimError> {
        let reserved = round_up(size.max(1), self.align);
        let mut allocs = self.allocs.write();
        if let Some(i) = pool.index() {
            let used = self.used.lock()[i];
            let available = self.caps[i].saturating_sub(used);
            if reserved > available {
                return Err(SimError::OutOfMemory {
                    agent: self.agent,
                    pool: pool.as_str(),
                    requested: reserved,
                    available,
                });
            }
        }
        let (lo, hi) = area.range();
        let (start, end) = (self.base + lo, self.base + hi);
        let base = match at {
            Some(a) => {
                let overlaps = allocs
                    .range(..a.saturating_add(reserved))
                    .next_back()
                    .is_some_and(|(&b, x)| b + x.reserved > a);
                if overlaps || agent_of(a) != Some(self.agent) {
                    return Err(SimError::AddressInUse {
                        agent: self.agent,
                        addr: a,
                        size,
                    });
                }
                a
            }
            None => {
                let mut cursor = start;
                for (&b, x) in allocs.range(start..end) {
                    if b >= cursor && b - cursor >= reserved {
                        break;
                    }
                    cursor = cursor.max(round_up(b + x.reserved, self.align));
                }
                if end.saturating_sub(cursor) < reserved {
                    return Err(SimError::OutOfMemory {
                        agent: self.agent,
                        pool: "address space",
                        requested: reserved,
                        available: end.saturating_sub(cursor),
                    });
                }
                cursor
            }
        };
        if let Some(i) = pool.index() {
            self.used.lock()[i] += reserved;
        }
        let a = Arc::new(Allocation {
            base,
            size,
            reserved,
            class,
            owner,
            pool,
            data: RwLock::new(
                data.unwrap_or_else(|| vec![0u8; usize::try_from(size).unwrap_or(usize::MAX)]),
            ),
            map,
        });
        allocs.insert(base, Arc::clone(&a));
        Ok(a)
    }

    pub fn get(&self, base: u64) -> Option<Arc<Allocation>> {
        self.allocs.read().get(&base).cloned()
    }

    pub fn remove(&self, base: u64) -> Option<Arc<Allocation>> {
        let a = self.allocs.write().remove(&base)?;
        if let Some(i) = a.pool.index() {
            let mut u = self.used.lock();
            u[i] = u[i].saturating_sub(a.reserved);
        }
        Some(a)
    }

    /// The allocation containing `addr`.
    pub fn find(&self, addr: u64) -> Option<Arc<Allocation>> {
        let map = self.allocs.read();
        let (_, a) = map.range(..=addr).next_back()?;
        (addr < a.base + a.size.max(1)).then(|| Arc::clone(a))
    }

    pub fn all(&self) -> Vec<Arc<Allocation>> {
        self.allocs.read().values().cloned().collect()
    }
}

/// What memory a handle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HandleKind {
    /// Coarse-grained device memory of its agent.
    Device,
    /// Fine-grained device memory of its agent.
    FineGrained,
    /// Imported from another process through a shareable handle.
    Imported,
    /// A multicast object.
    Multicast,
}

impl HandleKind {
    pub(crate) fn class(self) -> MemoryClass {
        MemoryClass::VIRTUAL_MAPPING
            | match self {
                Self::Device => MemoryClass::DEVICE_COARSE,
                Self::FineGrained => MemoryClass::FINE_GRAINED,
                Self::Imported => MemoryClass::IPC_IMPORTED,
                Self::Multicast => MemoryClass::empty(),
            }
    }

    pub(crate) fn tracked(self, owner: AgentId) -> MappedHandle {
        match self {
            Self::Device => MappedHandle::Local {
                owner,
                class: MemoryClass::DEVICE_COARSE,
            },
            Self::FineGrained => MappedHandle::Local {
                owner,
                class: MemoryClass::FINE_GRAINED,
            },
            Self::Imported => MappedHandle::Imported { owner },
            Self::Multicast => MappedHandle::Multicast { owner },
        }
    }
}

#[derive(Debug)]
pub(crate) struct Handle {
    pub(crate) agent: AgentId,
    pub(crate) size: u64,
    pub(crate) kind: HandleKind,
    /// Its bytes while it is not mapped (while mapped they live in the mapping).
    pub(crate) bytes: Vec<u8>,
    pub(crate) mapped_at: Option<u64>,
    pub(crate) released: bool,
}

/// The runtime's reservations and handles.
#[derive(Debug, Default)]
pub(crate) struct VmemState {
    /// Reserved ranges by base: (agent, size).
    pub(crate) reservations: BTreeMap<u64, (AgentId, u64)>,
    pub(crate) handles: HashMap<u64, Handle>,
    pub(crate) next_handle: u64,
    /// Next free reserved address per agent.
    pub(crate) cursor: HashMap<AgentId, u64>,
}

/// What a mapping allocation knows besides its bytes.
#[derive(Debug)]
pub(crate) struct MapInfo {
    pub(crate) handle: u64,
    pub(crate) access: RwLock<BTreeMap<AgentId, MapAccess>>,
}

/// Whether `agent` may access `a` (any memory that is not a mapping: yes).
pub(crate) fn check_access(
    a: &Allocation,
    agent: AgentId,
    addr: u64,
    len: u64,
    access: Access,
) -> Result<(), MemFault> {
    let Some(m) = &a.map else {
        return Ok(());
    };
    let ok = matches!(
        (m.access.read().get(&agent), access),
        (Some(MapAccess::ReadWrite), _) | (Some(MapAccess::Read), Access::Read)
    );
    if ok {
        Ok(())
    } else {
        Err(MemFault {
            agent,
            addr,
            len,
            access,
            kind: MemFaultKind::NoAccess,
        })
    }
}
