//! Interception (SPEC §9.1): the wrappers `OnLoad` installs in the runtime's API table, one
//! file per API family, and their installation (`install`).
//!
//! | file | entries wrapped |
//! |---|---|
//! | [`memory`] | core `hsa_memory_allocate` / `_free`, AMD `hsa_amd_memory_pool_allocate` / `_free`, `hsa_amd_memory_lock` / `_lock_to_pool` / `_unlock`, `hsa_amd_ipc_memory_attach` / `_detach` / `_create`: allocations, frees, host locks and IPC blocks reported to the tracker with their SPEC §7.1 class |
//! | [`vmem`] | the `hsa_amd_vmem_*` entries of major 2: mappings, their access, unmaps and reservations |
//! | [`copy`] | `hsa_amd_memory_async_copy` (`_on_engine`, `_rect`), core `hsa_memory_copy`, AMD `hsa_amd_memory_fill`: gated on the agents they write (SPEC §6 step 4), the async ones recorded on the copy fence |
//! | [`code`] | core `hsa_executable_destroy`: the executable's kernels forgotten first |
//! | [`queue`] | `hsa_queue_create` / `hsa_queue_destroy` (intercepting queues) and the write interceptor that runs the window |
//!
//! `entry` holds what every wrapper starts from: the saved originals it calls, and the
//! `catch_unwind` guard of its bookkeeping. The classification and the records the wrappers
//! make are [`crate::tracker`]'s, the queues' state [`crate::queue`]'s.
//!
//! `install` saves the originals (a slot that already holds our wrapper, from an earlier
//! `OnLoad` on the same table, keeps the original saved then), publishes them, then writes the
//! wrappers; nothing is written until every original is known. Entries installed only as a
//! group: map / unmap / set-access / address-free (with the other `vmem` entries), lock /
//! unlock, IPC attach / detach, and the queue entries when the table has every queue, signal
//! and interception entry.

mod entry;

pub mod code;
pub mod copy;
pub mod memory;
pub mod queue;
pub mod vmem;

use std::sync::Arc;

use crate::result::TableError;
use crate::state::{backend, Installed, LoaderFns, Originals, QueueFns};
use crate::sys;
use crate::table::{Bound, Slot};

// The queue wrappers and the interceptor, the registry's lookup and the tool-queue declaration,
// where tools and tests have found them.
pub use crate::queue::{mark_tool_queue, state_of};
pub use queue::{interceptor, queue_create, queue_destroy};

/// The original in a slot: the value there, unless it is our own wrapper (an earlier `OnLoad`
/// on this same table), in which case the original saved then.
///
/// # Safety
///
/// 1. The slot's table is alive.
unsafe fn original<F: Copy>(
    slot: &Slot<F>,
    ours: Option<F>,
    previous: Option<F>,
    as_addr: impl Fn(F) -> usize,
) -> Result<F, TableError> {
    // SAFETY: the caller's item 1; `bind` checked the slot is inside the table and not NULL.
    let current = unsafe { slot.get() }.ok_or(TableError::NullEntry {
        table: "api",
        entry: slot.name,
    })?;
    if ours.is_none_or(|w| as_addr(w) != as_addr(current)) {
        return Ok(current);
    }
    previous.ok_or(TableError::AlreadyWrapped {
        table: "api",
        entry: slot.name,
    })
}

/// Saves the originals of `bound` and installs the wrappers. Nothing is written until every
/// original is known.
///
/// # Safety
///
/// 1. The table `bound` was bound from is alive and not used concurrently.
pub(crate) unsafe fn install(bound: &Bound, runtime_version: u64) -> Result<Installed, TableError> {
    let e = &bound.entries;
    let prev = backend().originals();
    let p = prev.as_deref();
    macro_rules! orig {
        ($slot:expr, $wrapper:expr, $field:ident) => {{
            // SAFETY: the caller's item 1.
            unsafe { original(&$slot, $wrapper, p.map(|o| o.$field), |f| f as usize) }?
        }};
    }
    macro_rules! orig_opt {
        ($slot:expr, $wrapper:expr, $field:ident) => {
            match &$slot {
                Some(s) => Some({
                    // SAFETY: the caller's item 1.
                    unsafe {
                        original(s, Some($wrapper), p.and_then(|o| o.$field), |f| f as usize)
                    }?
                }),
                None => None,
            }
        };
    }
    let mut originals = Originals {
        agent_get_info: orig!(e.agent_get_info, None, agent_get_info),
        region_get_info: orig!(e.region_get_info, None, region_get_info),
        signal_load_relaxed: orig!(e.signal_load_relaxed, None, signal_load_relaxed),
        pool_get_info: orig!(e.pool_get_info, None, pool_get_info),
        pointer_info: orig!(e.pointer_info, None, pointer_info),
        memory_allocate: orig!(
            e.memory_allocate,
            Some(memory::memory_allocate),
            memory_allocate
        ),
        memory_free: orig!(e.memory_free, Some(memory::memory_free), memory_free),
        pool_allocate: orig!(e.pool_allocate, Some(memory::pool_allocate), pool_allocate),
        pool_free: orig!(e.pool_free, Some(memory::pool_free), pool_free),
        async_copy: orig!(e.async_copy, Some(copy::async_copy), async_copy),
        async_copy_rect: orig_opt!(e.async_copy_rect, copy::async_copy_rect, async_copy_rect),
        async_copy_on_engine: orig_opt!(
            e.async_copy_on_engine,
            copy::async_copy_on_engine,
            async_copy_on_engine
        ),
        vmem_map: orig_opt!(e.vmem_map, vmem::vmem_map, vmem_map),
        vmem_unmap: orig_opt!(e.vmem_unmap, vmem::vmem_unmap, vmem_unmap),
        vmem_reserve: orig_opt!(e.vmem_reserve, vmem::vmem_address_reserve, vmem_reserve),
        vmem_reserve_align: orig_opt!(
            e.vmem_reserve_align,
            vmem::vmem_address_reserve_align,
            vmem_reserve_align
        ),
        vmem_address_free: orig_opt!(
            e.vmem_address_free,
            vmem::vmem_address_free,
            vmem_address_free
        ),
        vmem_handle_create: orig_opt!(
            e.vmem_handle_create,
            vmem::vmem_handle_create,
            vmem_handle_create
        ),
        vmem_handle_release: orig_opt!(
            e.vmem_handle_release,
            vmem::vmem_handle_release,
            vmem_handle_release
        ),
        vmem_set_access: orig_opt!(e.vmem_set_access, vmem::vmem_set_access, vmem_set_access),
        vmem_import: orig_opt!(e.vmem_import, vmem::vmem_import, vmem_import),
        executable_destroy: orig_opt!(
            e.executable_destroy,
            code::executable_destroy,
            executable_destroy
        ),
        memory_lock: orig_opt!(e.memory_lock, memory::memory_lock, memory_lock),
        memory_lock_to_pool: orig_opt!(
            e.memory_lock_to_pool,
            memory::memory_lock_to_pool,
            memory_lock_to_pool
        ),
        memory_unlock: orig_opt!(e.memory_unlock, memory::memory_unlock, memory_unlock),
        ipc_attach: orig_opt!(e.ipc_attach, memory::ipc_attach, ipc_attach),
        ipc_detach: orig_opt!(e.ipc_detach, memory::ipc_detach, ipc_detach),
        ipc_create: orig_opt!(e.ipc_create, memory::ipc_create, ipc_create),
        memory_copy: orig_opt!(e.memory_copy, copy::memory_copy, memory_copy),
        memory_fill: orig_opt!(e.memory_fill, copy::memory_fill, memory_fill),
        // SAFETY: the caller's item 1; `bind` checked the slot.
        iterate_agents: e.iterate_agents.as_ref().and_then(|s| unsafe { s.get() }),
        queue: match &e.queue {
            None => None,
            Some(q) => {
                let pq = p.and_then(|o| o.queue);
                macro_rules! plain {
                    ($slot:ident) => {{
                        // SAFETY: the caller's item 1; `bind` checked the slot.
                        unsafe { q.$slot.get() }.ok_or(TableError::NullEntry {
                            table: "api",
                            entry: q.$slot.name,
                        })?
                    }};
                }
                Some(QueueFns {
                    // SAFETY: the caller's item 1.
                    queue_create: unsafe {
                        original(
                            &q.queue_create,
                            Some(queue::queue_create as sys::QueueCreateFn),
                            pq.map(|o| o.queue_create),
                            |f| f as usize,
                        )
                    }?,
                    // SAFETY: the caller's item 1.
                    queue_destroy: unsafe {
                        original(
                            &q.queue_destroy,
                            Some(queue::queue_destroy as sys::QueueDestroyFn),
                            pq.map(|o| o.queue_destroy),
                            |f| f as usize,
                        )
                    }?,
                    load_read_index: plain!(load_read_index),
                    load_write_index: plain!(load_write_index),
                    add_write_index: plain!(add_write_index),
                    cas_write_index: plain!(cas_write_index),
                    signal_create: plain!(signal_create),
                    signal_destroy: plain!(signal_destroy),
                    signal_store: plain!(signal_store),
                    signal_add: plain!(signal_add),
                    signal_subtract: plain!(signal_subtract),
                    signal_wait: plain!(signal_wait),
                    // Our wrapper once `hsa_memory_copy` is wrapped: the backend's own copies
                    // (digest staging) must reach the original, never the gate.
                    // SAFETY: the caller's item 1.
                    memory_copy: unsafe {
                        original(
                            &q.memory_copy,
                            Some(copy::memory_copy as sys::MemoryCopyFn),
                            pq.map(|o| o.memory_copy),
                            |f| f as usize,
                        )
                    }?,
                    iterate_agents: plain!(iterate_agents),
                    iterate_pools: plain!(iterate_pools),
                    intercept_create: plain!(intercept_create),
                    intercept_register: plain!(intercept_register),
                    async_function: plain!(async_function),
                    // SAFETY: the caller's item 1; `bind` checked the slot.
                    system_get_info: q.system_get_info.as_ref().and_then(|s| unsafe { s.get() }),
                    // SAFETY: the caller's item 1; `bind` checked the slot.
                    allow_access: q.allow_access.as_ref().and_then(|s| unsafe { s.get() }),
                })
            }
        },
        loader: match &e.loader {
            None => None,
            // SAFETY: (each `get`) the caller's item 1; `bind` checked the slots.
            Some(l) => unsafe {
                match (
                    l.get_extension_table.get(),
                    l.iterate_agent_symbols.get(),
                    l.symbol_get_info.get(),
                ) {
                    (
                        Some(get_extension_table),
                        Some(iterate_agent_symbols),
                        Some(symbol_get_info),
                    ) => Some(LoaderFns {
                        get_extension_table,
                        iterate_agent_symbols,
                        symbol_get_info,
                    }),
                    _ => None,
                }
            },
        },
    };
    // Map, unmap, set-access and address-free are wrapped together or not at all: a mapping
    // recorded without its unmap or the free of its reservation (or the reverse) would leave
    // the inventory wrong, and one without its access would never be captured. Without them
    // none of the group is wrapped, and a mapping an argument reaches is asked of the runtime
    // (`VIRTUAL_MAPPING`: declined). Reserve, handle create / release and import are wrapped
    // where present; a handle the wrappers never saw is taken for an imported one (declined).
    if originals.vmem_map.is_none()
        || originals.vmem_unmap.is_none()
        || originals.vmem_set_access.is_none()
        || originals.vmem_address_free.is_none()
    {
        originals.vmem_map = None;
        originals.vmem_unmap = None;
        originals.vmem_set_access = None;
        originals.vmem_address_free = None;
        originals.vmem_reserve = None;
        originals.vmem_reserve_align = None;
        originals.vmem_handle_create = None;
        originals.vmem_handle_release = None;
        originals.vmem_import = None;
    }
    // Lock and unlock are wrapped together (a lock recorded without its unlock would leave the
    // inventory wrong), as are IPC attach and detach.
    if originals.memory_lock.is_none() || originals.memory_unlock.is_none() {
        originals.memory_lock = None;
        originals.memory_lock_to_pool = None;
        originals.memory_unlock = None;
    }
    if originals.ipc_attach.is_none() || originals.ipc_detach.is_none() {
        originals.ipc_attach = None;
        originals.ipc_detach = None;
    }
    // The originals are visible before the first wrapper is.
    *backend().originals.write() = Some(Arc::new(originals));

    let mut wrapped = Vec::new();
    // SAFETY: (every `set` below) the caller's item 1; each wrapper has the entry's signature.
    unsafe {
        e.memory_allocate.set(memory::memory_allocate);
        e.memory_free.set(memory::memory_free);
        e.pool_allocate.set(memory::pool_allocate);
        e.pool_free.set(memory::pool_free);
        e.async_copy.set(copy::async_copy);
        wrapped.extend([
            e.memory_allocate.name,
            e.memory_free.name,
            e.pool_allocate.name,
            e.pool_free.name,
            e.async_copy.name,
        ]);
        if let (Some(s), Some(_)) = (&e.async_copy_rect, originals.async_copy_rect) {
            s.set(copy::async_copy_rect);
            wrapped.push(s.name);
        }
        if let (Some(s), Some(_)) = (&e.async_copy_on_engine, originals.async_copy_on_engine) {
            s.set(copy::async_copy_on_engine);
            wrapped.push(s.name);
        }
        if let (Some(m), Some(u), Some(a), Some(f), Some(_)) = (
            &e.vmem_map,
            &e.vmem_unmap,
            &e.vmem_set_access,
            &e.vmem_address_free,
            originals.vmem_map,
        ) {
            m.set(vmem::vmem_map);
            u.set(vmem::vmem_unmap);
            a.set(vmem::vmem_set_access);
            f.set(vmem::vmem_address_free);
            wrapped.extend([m.name, u.name, a.name, f.name]);
            if let (Some(s), Some(_)) = (&e.vmem_reserve, originals.vmem_reserve) {
                s.set(vmem::vmem_address_reserve);
                wrapped.push(s.name);
            }
            if let (Some(s), Some(_)) = (&e.vmem_reserve_align, originals.vmem_reserve_align) {
                s.set(vmem::vmem_address_reserve_align);
                wrapped.push(s.name);
            }
            if let (Some(s), Some(_)) = (&e.vmem_handle_create, originals.vmem_handle_create) {
                s.set(vmem::vmem_handle_create);
                wrapped.push(s.name);
            }
            if let (Some(s), Some(_)) = (&e.vmem_handle_release, originals.vmem_handle_release) {
                s.set(vmem::vmem_handle_release);
                wrapped.push(s.name);
            }
            if let (Some(s), Some(_)) = (&e.vmem_import, originals.vmem_import) {
                s.set(vmem::vmem_import);
                wrapped.push(s.name);
            }
        }
        if let (Some(l), Some(u), Some(_)) =
            (&e.memory_lock, &e.memory_unlock, originals.memory_lock)
        {
            l.set(memory::memory_lock);
            u.set(memory::memory_unlock);
            wrapped.extend([l.name, u.name]);
            if let (Some(s), Some(_)) = (&e.memory_lock_to_pool, originals.memory_lock_to_pool) {
                s.set(memory::memory_lock_to_pool);
                wrapped.push(s.name);
            }
        }
        if let (Some(a), Some(d), Some(_)) = (&e.ipc_attach, &e.ipc_detach, originals.ipc_attach) {
            a.set(memory::ipc_attach);
            d.set(memory::ipc_detach);
            wrapped.extend([a.name, d.name]);
        }
        if let (Some(s), Some(_)) = (&e.ipc_create, originals.ipc_create) {
            s.set(memory::ipc_create);
            wrapped.push(s.name);
        }
        if let (Some(s), Some(_)) = (&e.memory_copy, originals.memory_copy) {
            s.set(copy::memory_copy);
            wrapped.push(s.name);
        }
        if let (Some(s), Some(_)) = (&e.memory_fill, originals.memory_fill) {
            s.set(copy::memory_fill);
            wrapped.push(s.name);
        }
        if let (Some(s), Some(_)) = (&e.executable_destroy, originals.executable_destroy) {
            s.set(code::executable_destroy);
            wrapped.push(s.name);
        }
        if let (Some(q), Some(_)) = (&e.queue, originals.queue) {
            q.queue_create.set(queue::queue_create);
            q.queue_destroy.set(queue::queue_destroy);
            wrapped.extend([q.queue_create.name, q.queue_destroy.name]);
        }
    }
    Ok(Installed {
        versions: bound.versions,
        runtime_version,
        wrapped,
    })
}
