//! Virtual-memory mappings and stream-ordered allocations of the simulated memory (SPEC §7.1),
//! reported to the tracker as a backend's wrappers do (the free-like reports first).
//!
//! A **reservation** ([`SimRuntime::vmem_reserve`]) is a range of virtual addresses of an
//! agent, with no memory behind it. A **handle** ([`SimRuntime::vmem_create`]) is physical
//! memory of an agent (device, fine-grained, imported from another process, or a multicast
//! object). [`SimRuntime::vmem_map`] maps a whole handle at an address of a reservation: the
//! mapped range is an allocation of the simulated device, class `VIRTUAL_MAPPING` plus the
//! handle's, and the handle's bytes live there while it is mapped (they go back to the handle
//! on unmap, so a handle unmapped and mapped again, here or elsewhere, keeps its contents).
//! Nobody may access a mapping until [`SimRuntime::vmem_set_access`] gives an agent read or
//! read-write access; a kernel or copy engine of an agent without it faults
//! ([`crate::MemFaultKind::NoAccess`]). Host reads and writes of tests ([`SimRuntime::read`],
//! [`SimRuntime::write`]) are not checked. [`SimRuntime::vmem_unmap`] unmaps whole mappings
//! (part or all of a reservation), [`SimRuntime::vmem_address_free`] releases a reservation
//! and what is still mapped in it, [`SimRuntime::vmem_release`] a handle (its memory lives
//! until it is unmapped).
//!
//! What is not modelled: one handle mapped at two addresses at once (refused), mappings of
//! part of a handle (a map names the whole handle), and an unmap that cuts a mapping (refused,
//! as `cuMemUnmap` does; the tracker handles it anyway).
//!
//! **Stream-ordered allocations** ([`SimRuntime::alloc_async`], [`SimRuntime::free_async`])
//! are reported through [`Tracker::record_async_alloc`] and [`Tracker::record_async_free`];
//! the simulated stream reaches the free at once, so the memory is released when
//! `free_async` returns.
//!
//! These are the runtime's entries ([`SimRuntime`]'s `vmem_*`, `alloc_async`, `free_async`),
//! above it; the state they work on (reservations, handles, mapping access) is in
//! [`crate::heap`], below the memory that checks it.
//!
//! [`Tracker::record_async_alloc`]: replay_memory::Tracker::record_async_alloc
//! [`Tracker::record_async_free`]: replay_memory::Tracker::record_async_free

use std::collections::BTreeMap;

use parking_lot::RwLock;
use replay_core::{AgentId, MemoryClass};

pub use replay_memory::MapAccess;

use crate::error::SimError;
use crate::expect::Event;
use crate::heap::{
    agent_of, Allocation, Area, Handle, HandleKind, MapInfo, Owner, Pool, VmemState,
};
use crate::runtime::SimRuntime;

/// A physical memory handle of the simulated runtime (`CUmemGenericAllocationHandle`,
/// `hsa_amd_vmem_alloc_handle_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VmemHandle(pub u64);

fn invalid(what: String) -> SimError {
    SimError::Invalid(what)
}

impl SimRuntime {
    /// Reserves `size` bytes of virtual addresses of `agent` (`cuMemAddressReserve`,
    /// `hsa_amd_vmem_address_reserve`), rounded up to the allocation alignment.
    pub fn vmem_reserve(&self, agent: AgentId, size: u64) -> Result<u64, SimError> {
        let sh = self.shared();
        let a = sh.agent_or_err(agent)?;
        let align = a.config.alignment.max(1);
        let size = size.max(1).div_ceil(align) * align;
        let mut st = sh.vmem.lock();
        let (lo, hi) = Area::Virtual.absolute(agent);
        let at = st.cursor.entry(agent).or_insert(lo);
        if hi.saturating_sub(*at) < size {
            return Err(SimError::OutOfMemory {
                agent: a.id,
                pool: "virtual address space",
                requested: size,
                available: hi.saturating_sub(*at),
            });
        }
        let base = *at;
        *at += size;
        st.reservations.insert(base, (agent, size));
        Ok(base)
    }

    /// Creates a handle of `size` bytes of `kind` memory of `agent` (`cuMemCreate`,
    /// `hsa_amd_vmem_handle_create`; `Imported` stands for `cuMemImportFromShareableHandle`).
    pub fn vmem_create(
        &self,
        agent: AgentId,
        size: u64,
        kind: HandleKind,
    ) -> Result<VmemHandle, SimError> {
        let sh = self.shared();
        sh.agent_or_err(agent)?;
        let mut st = sh.vmem.lock();
        st.next_handle += 1;
        let id = st.next_handle;
        st.handles.insert(
            id,
            Handle {
                agent,
                size,
                kind,
                bytes: vec![0u8; usize::try_from(size).unwrap_or(usize::MAX)],
                mapped_at: None,
                released: false,
            },
        );
        Ok(VmemHandle(id))
    }

    /// Maps the whole of `handle` at `va`, inside a reservation (`cuMemMap`,
    /// `hsa_amd_vmem_map`); no agent may access it yet. Reported to the tracker after the map.
    pub fn vmem_map(&self, va: u64, handle: VmemHandle) -> Result<(), SimError> {
        let sh = self.shared();
        let mut st = sh.vmem.lock();
        let h = st
            .handles
            .get(&handle.0)
            .ok_or_else(|| invalid(format!("no handle {}", handle.0)))?;
        if h.released || h.mapped_at.is_some() {
            return Err(invalid(format!(
                "handle {} is released or mapped already",
                handle.0
            )));
        }
        let size = h.size;
        let (owner, _) = reservation_of(&st, va, size)
            .ok_or_else(|| invalid(format!("{va:#x}+{size} is not inside a reservation")))?;
        let (kind, agent) = (h.kind, h.agent);
        let a = sh.agent_or_err(owner)?;
        let h = st.handles.get_mut(&handle.0).expect("looked up above");
        let bytes = std::mem::take(&mut h.bytes);
        let map = MapInfo {
            handle: handle.0,
            access: RwLock::new(BTreeMap::new()),
        };
        match a.heap.alloc_with(
            size,
            kind.class(),
            Owner::App,
            Area::Virtual,
            Pool::Elsewhere,
            Some(va),
            Some(bytes),
            Some(map),
        ) {
            Ok(_) => h.mapped_at = Some(va),
            Err(e) => {
                h.bytes = vec![0u8; usize::try_from(size).unwrap_or(usize::MAX)];
                return Err(e);
            }
        }
        drop(st);
        sh.tracker.record_map(va, size, kind.tracked(agent));
        sh.recorder.record(Event::Alloc {
            agent: owner,
            base: va,
            size,
            class: kind.class(),
        });
        Ok(())
    }

    /// Sets `agent`'s access to every mapping in `[va, va + size)` (`cuMemSetAccess`,
    /// `hsa_amd_vmem_set_access`). The tracker hears of a lowered access before it takes
    /// effect, of a raised one after.
    pub fn vmem_set_access(
        &self,
        va: u64,
        size: u64,
        agent: AgentId,
        access: MapAccess,
    ) -> Result<(), SimError> {
        let sh = self.shared();
        sh.agent_or_err(agent)?;
        let maps = self.mappings_in(va, size)?;
        let rank = |a: Option<MapAccess>| match a {
            None | Some(MapAccess::None) => 0,
            Some(MapAccess::Read) => 1,
            Some(MapAccess::ReadWrite) => 2,
        };
        let lowered = maps.iter().any(|m| {
            let info = m.map.as_ref().expect("a mapping");
            rank(Some(access)) < rank(info.access.read().get(&agent).copied())
        });
        if lowered {
            sh.tracker.record_access(va, size, agent, access);
        }
        for m in &maps {
            m.map
                .as_ref()
                .expect("a mapping")
                .access
                .write()
                .insert(agent, access);
        }
        if !lowered {
            sh.tracker.record_access(va, size, agent, access);
        }
        Ok(())
    }

    /// Unmaps the mappings in `[va, va + size)` (`cuMemUnmap`, `hsa_amd_vmem_unmap`): all of
    /// a reservation or part of it, whole mappings only. The tracker hears of it first; each
    /// handle gets its bytes back.
    pub fn vmem_unmap(&self, va: u64, size: u64) -> Result<(), SimError> {
        let maps = self.mappings_in(va, size)?;
        self.shared().tracker.record_unmap(va, size);
        self.drop_mappings(&maps);
        Ok(())
    }

    /// Releases a handle (`cuMemRelease`, `hsa_amd_vmem_handle_release`): its memory lives
    /// until it is unmapped.
    pub fn vmem_release(&self, handle: VmemHandle) -> Result<(), SimError> {
        let mut st = self.shared().vmem.lock();
        let h = st
            .handles
            .get_mut(&handle.0)
            .ok_or_else(|| invalid(format!("no handle {}", handle.0)))?;
        h.released = true;
        if h.mapped_at.is_none() {
            st.handles.remove(&handle.0);
        }
        Ok(())
    }

    /// Frees a reservation (`cuMemAddressFree`, `hsa_amd_vmem_address_free`), unmapping what
    /// is still mapped in it; the tracker hears of it first.
    pub fn vmem_address_free(&self, va: u64) -> Result<(), SimError> {
        let sh = self.shared();
        let (_, size) = *sh
            .vmem
            .lock()
            .reservations
            .get(&va)
            .ok_or_else(|| invalid(format!("{va:#x} is not a reservation")))?;
        let maps = self.mappings_in(va, size)?;
        sh.tracker.record_release_reservation(va, size);
        self.drop_mappings(&maps);
        sh.vmem.lock().reservations.remove(&va);
        Ok(())
    }

    /// Whether `handle` exists (not released, or released and still mapped).
    pub fn vmem_handle_exists(&self, handle: VmemHandle) -> bool {
        self.shared().vmem.lock().handles.contains_key(&handle.0)
    }

    /// A stream-ordered allocation (`cuMemAllocAsync`, `hipMallocAsync`) of `size` bytes of
    /// `class` on `agent`, reported through `Tracker::record_async_alloc`.
    pub fn alloc_async(
        &self,
        agent: AgentId,
        size: u64,
        class: MemoryClass,
    ) -> Result<u64, SimError> {
        let sh = self.shared();
        let a = sh.agent_or_err(agent)?;
        let class = class | MemoryClass::VIRTUAL_MAPPING;
        let alloc = a
            .heap
            .alloc(size, class, Owner::App, Area::Device, Pool::Device, None)?;
        sh.tracker.record_async_alloc(
            agent,
            alloc.base,
            size,
            class - MemoryClass::VIRTUAL_MAPPING,
        );
        sh.recorder.record(Event::Alloc {
            agent,
            base: alloc.base,
            size,
            class,
        });
        Ok(alloc.base)
    }

    /// The stream-ordered free of `base` (`cuMemFreeAsync`, `hipFreeAsync`): reported
    /// (`Tracker::record_async_free`) when it is ordered, before the memory is released.
    pub fn free_async(&self, agent: AgentId, base: u64) -> Result<(), SimError> {
        let sh = self.shared();
        let a = sh.agent_or_err(agent)?;
        a.heap
            .get(base)
            .filter(|x| x.owner == Owner::App && x.map.is_none())
            .ok_or(SimError::InvalidFree { agent, addr: base })?;
        sh.tracker.record_async_free(agent, base);
        a.heap.remove(base);
        sh.recorder.record(Event::Free { agent, base });
        Ok(())
    }

    /// The mapping allocations in `[va, va + size)`; an error when the range cuts one.
    fn mappings_in(&self, va: u64, size: u64) -> Result<Vec<std::sync::Arc<Allocation>>, SimError> {
        let sh = self.shared();
        let owner = agent_of(va).ok_or_else(|| invalid(format!("{va:#x} is no address")))?;
        let a = sh.agent_or_err(owner)?;
        let end = va.saturating_add(size);
        let maps: Vec<_> = a
            .heap
            .all()
            .into_iter()
            .filter(|m| m.map.is_some() && m.base < end && va < m.base + m.size)
            .collect();
        if let Some(m) = maps.iter().find(|m| m.base < va || m.base + m.size > end) {
            return Err(invalid(format!(
                "{va:#x}+{size} cuts mapping {:#x}+{}",
                m.base, m.size
            )));
        }
        Ok(maps)
    }

    /// Removes mapping allocations (the tracker has heard of it) and gives their bytes back.
    fn drop_mappings(&self, maps: &[std::sync::Arc<Allocation>]) {
        let sh = self.shared();
        for m in maps {
            let Some(owner) = agent_of(m.base) else {
                continue;
            };
            if let Some(a) = sh.agent_shared(owner) {
                a.heap.remove(m.base);
            }
            let info = m.map.as_ref().expect("a mapping");
            let mut st = sh.vmem.lock();
            if let Some(h) = st.handles.get_mut(&info.handle) {
                h.bytes = std::mem::take(&mut *m.data.write());
                h.mapped_at = None;
                if h.released {
                    st.handles.remove(&info.handle);
                }
            }
            drop(st);
            sh.recorder.record(Event::Free {
                agent: owner,
                base: m.base,
            });
        }
    }
}

/// The reservation holding `[va, va + size)`: (agent, base).
fn reservation_of(st: &VmemState, va: u64, size: u64) -> Option<(AgentId, u64)> {
    let (&b, &(agent, s)) = st.reservations.range(..=va).next_back()?;
    (va.saturating_add(size) <= b + s).then_some((agent, b))
}
