//! The raw and checked layers of a standalone replay (SPEC §13): the application's entries as
//! the API table holds them after `OnLoad` (so every allocation, mapping, load and queue goes
//! through this backend's wrappers, as a HIP program's would), each read as its C signature
//! ([`App::from_table`]), and one checked call per entry: a status other than success is an
//! [`HsaError`] naming the entry.

use std::ffi::{c_char, c_void, CStr};

use crate::result::{check, HsaError};
use crate::sys::{self, v2, Entry};

type ReaderCreateFn = unsafe extern "C" fn(*const c_void, usize, *mut u64) -> sys::hsa_status_t;
type ReaderDestroyFn = unsafe extern "C" fn(u64) -> sys::hsa_status_t;
type ExecCreateFn = unsafe extern "C" fn(u32, u32, *const c_char, *mut u64) -> sys::hsa_status_t;
type VariableDefineFn =
    unsafe extern "C" fn(u64, sys::hsa_agent_t, *const c_char, *mut c_void) -> sys::hsa_status_t;
type LoadFn =
    unsafe extern "C" fn(u64, sys::hsa_agent_t, u64, *const c_char, *mut u64) -> sys::hsa_status_t;
type FreezeFn = unsafe extern "C" fn(u64, *const c_char) -> sys::hsa_status_t;
type ByNameFn = unsafe extern "C" fn(
    u64,
    *const c_char,
    *const sys::hsa_agent_t,
    *mut u64,
) -> sys::hsa_status_t;

/// The application's entries a standalone replay calls.
#[derive(Debug, Clone, Copy)]
pub struct App {
    queue_create: sys::QueueCreateFn,
    queue_destroy: sys::QueueDestroyFn,
    add_write_index: sys::QueueAddIndexFn,
    signal_create: sys::SignalCreateFn,
    signal_destroy: sys::SignalDestroyFn,
    signal_store: sys::SignalUpdateFn,
    signal_wait: sys::SignalWaitFn,
    memory_copy: sys::MemoryCopyFn,
    reader_create: ReaderCreateFn,
    reader_destroy: ReaderDestroyFn,
    exec_create: ExecCreateFn,
    exec_destroy: sys::ExecutableDestroyFn,
    variable_define: VariableDefineFn,
    load: LoadFn,
    freeze: FreezeFn,
    by_name: ByNameFn,
    symbol_info: sys::SymbolGetInfoFn,
    pool_allocate: sys::PoolAllocateFn,
    pool_free: sys::PoolFreeFn,
    reserve: sys::VmemAddressReserveFn,
    address_free: sys::VmemAddressFreeFn,
    handle_create: sys::VmemHandleCreateFn,
    handle_release: sys::VmemHandleReleaseFn,
    map: sys::VmemMapFn,
    unmap: sys::VmemUnmapFn,
    set_access: sys::VmemSetAccessFn,
}

/// A table slot as the entry's C type; `None` for an empty slot.
///
/// # Safety
///
/// 1. `F` is the C signature of the entry the slot holds.
unsafe fn typed<S: Copy, F: Copy>(slot: S) -> Option<F> {
    if std::mem::size_of::<S>() != std::mem::size_of::<Entry>()
        || std::mem::size_of::<F>() != std::mem::size_of::<Entry>()
    {
        return None;
    }
    // SAFETY: same size; every slot is a nullable function pointer.
    let e: Entry = unsafe { std::mem::transmute_copy(&slot) };
    // SAFETY: same size; `F` is the entry's signature (caller, item 1).
    e.map(|f| unsafe { std::mem::transmute_copy(&f) })
}

impl App {
    /// The entries of `table` (current major), as its slots hold them now; an empty slot is
    /// an `Err` naming it.
    ///
    /// # Safety
    ///
    /// 1. `table` is a live `HsaApiTable` of root major 3 whose core and AMD sub-tables are
    ///    live and hold the entries of their bindings ([`crate::sys::v2`]), not written by
    ///    another thread during the call.
    pub unsafe fn from_table(table: *const v2::HsaApiTable) -> Result<Self, String> {
        // SAFETY: the caller's item 1.
        let root = unsafe { table.as_ref() }.ok_or("the API table is NULL")?;
        if root.version.major_id != 3 {
            return Err(format!(
                "the API table has root major {}, not 3",
                root.version.major_id
            ));
        }
        // SAFETY: the caller's item 1.
        let (c, a) = unsafe { (root.core_.as_ref(), root.amd_ext_.as_ref()) };
        let (c, a) = (c.ok_or("no core table")?, a.ok_or("no AMD table")?);
        macro_rules! get {
            ($t:ident . $slot:ident) => {
                // SAFETY: the field's entry read as its C signature (the name says which).
                unsafe { typed($t.$slot) }.ok_or(concat!("the table has no ", stringify!($slot)))?
            };
        }
        Ok(Self {
            queue_create: get!(c.hsa_queue_create_fn),
            queue_destroy: get!(c.hsa_queue_destroy_fn),
            add_write_index: get!(c.hsa_queue_add_write_index_screlease_fn),
            signal_create: get!(c.hsa_signal_create_fn),
            signal_destroy: get!(c.hsa_signal_destroy_fn),
            signal_store: get!(c.hsa_signal_store_screlease_fn),
            signal_wait: get!(c.hsa_signal_wait_scacquire_fn),
            memory_copy: get!(c.hsa_memory_copy_fn),
            reader_create: get!(c.hsa_code_object_reader_create_from_memory_fn),
            reader_destroy: get!(c.hsa_code_object_reader_destroy_fn),
            exec_create: get!(c.hsa_executable_create_alt_fn),
            exec_destroy: get!(c.hsa_executable_destroy_fn),
            variable_define: get!(c.hsa_executable_agent_global_variable_define_fn),
            load: get!(c.hsa_executable_load_agent_code_object_fn),
            freeze: get!(c.hsa_executable_freeze_fn),
            by_name: get!(c.hsa_executable_get_symbol_by_name_fn),
            symbol_info: get!(c.hsa_executable_symbol_get_info_fn),
            pool_allocate: get!(a.hsa_amd_memory_pool_allocate_fn),
            pool_free: get!(a.hsa_amd_memory_pool_free_fn),
            reserve: get!(a.hsa_amd_vmem_address_reserve_fn),
            address_free: get!(a.hsa_amd_vmem_address_free_fn),
            handle_create: get!(a.hsa_amd_vmem_handle_create_fn),
            handle_release: get!(a.hsa_amd_vmem_handle_release_fn),
            map: get!(a.hsa_amd_vmem_map_fn),
            unmap: get!(a.hsa_amd_vmem_unmap_fn),
            set_access: get!(a.hsa_amd_vmem_set_access_fn),
        })
    }

    /// `hsa_amd_vmem_address_reserve` of `size` bytes, asking for `at` (0: anywhere); where
    /// the runtime placed it.
    pub fn reserve(&self, size: u64, at: u64) -> Result<u64, HsaError> {
        let mut va: *mut c_void = std::ptr::null_mut();
        // SAFETY: an out pointer to a live local; the address is only a request.
        let st = unsafe { (self.reserve)(&mut va, size as usize, at, 0) };
        check("hsa_amd_vmem_address_reserve", st).map(|()| va as u64)
    }

    /// `hsa_amd_vmem_address_free` of a reservation of [`App::reserve`].
    pub fn address_free(&self, va: u64, size: u64) -> Result<(), HsaError> {
        // SAFETY: a reservation this replay made, of this size; the runtime checks it.
        check("hsa_amd_vmem_address_free", unsafe {
            (self.address_free)(va as *mut c_void, size as usize)
        })
    }

    /// `hsa_amd_vmem_handle_create` of `size` bytes from `pool`.
    pub fn handle_create(&self, pool: u64, size: u64) -> Result<u64, HsaError> {
        let mut h = sys::hsa_amd_vmem_alloc_handle_t::default();
        // SAFETY: an out pointer to a live local; memory type 0 (pinned), no flags.
        let st = unsafe {
            (self.handle_create)(
                sys::hsa_amd_memory_pool_t { handle: pool },
                size as usize,
                0,
                0,
                &mut h,
            )
        };
        check("hsa_amd_vmem_handle_create", st).map(|()| h.handle)
    }

    /// `hsa_amd_vmem_handle_release`.
    pub fn handle_release(&self, handle: u64) -> Result<(), HsaError> {
        // SAFETY: a handle this replay created; the runtime checks it.
        check("hsa_amd_vmem_handle_release", unsafe {
            (self.handle_release)(sys::hsa_amd_vmem_alloc_handle_t { handle })
        })
    }

    /// `hsa_amd_vmem_map` of the whole handle at `va`.
    pub fn map(&self, va: u64, size: u64, handle: u64) -> Result<(), HsaError> {
        // SAFETY: a range inside a reservation of this replay; the runtime checks it.
        check("hsa_amd_vmem_map", unsafe {
            (self.map)(
                va as *mut c_void,
                size as usize,
                0,
                sys::hsa_amd_vmem_alloc_handle_t { handle },
                0,
            )
        })
    }

    /// `hsa_amd_vmem_unmap`.
    pub fn unmap(&self, va: u64, size: u64) -> Result<(), HsaError> {
        // SAFETY: a mapping of this replay; the runtime checks it.
        check("hsa_amd_vmem_unmap", unsafe {
            (self.unmap)(va as *mut c_void, size as usize)
        })
    }

    /// `hsa_amd_vmem_set_access`: read-write for `agent`.
    pub fn set_access(&self, va: u64, size: u64, agent: sys::hsa_agent_t) -> Result<(), HsaError> {
        let desc = sys::hsa_amd_memory_access_desc_t {
            permissions: sys::HSA_ACCESS_PERMISSION_RW,
            agent_handle: agent,
        };
        // SAFETY: a mapping of this replay; one descriptor alive for the call.
        check("hsa_amd_vmem_set_access", unsafe {
            (self.set_access)(va as *mut c_void, size as usize, &desc, 1)
        })
    }

    /// `hsa_amd_memory_pool_allocate` of `size` bytes from `pool`.
    pub fn pool_allocate(&self, pool: u64, size: u64) -> Result<u64, HsaError> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: an out pointer to a live local.
        let st = unsafe {
            (self.pool_allocate)(
                sys::hsa_amd_memory_pool_t { handle: pool },
                size as usize,
                0,
                &mut p,
            )
        };
        check("hsa_amd_memory_pool_allocate", st).map(|()| p as u64)
    }

    /// `hsa_amd_memory_pool_free`.
    pub fn pool_free(&self, p: u64) -> Result<(), HsaError> {
        // SAFETY: a block of [`App::pool_allocate`]; the runtime checks it.
        check("hsa_amd_memory_pool_free", unsafe {
            (self.pool_free)(p as *mut c_void)
        })
    }

    /// `hsa_memory_copy` of `len` bytes from `src` to `dst`, both runtime memory (the
    /// application's copy, gated on the agents it writes: never called inside a window).
    pub fn copy(&self, dst: u64, src: u64, len: usize) -> Result<(), HsaError> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: a synchronous copy between two ranges the runtime checks.
        check("hsa_memory_copy", unsafe {
            (self.memory_copy)(dst as *mut c_void, src as *const c_void, len)
        })
    }

    /// `hsa_code_object_reader_create_from_memory` over `code`, which must outlive the reader.
    pub fn reader_create(&self, code: &[u8]) -> Result<u64, HsaError> {
        let mut r = 0u64;
        // SAFETY: the bytes and an out pointer to a live local; the caller keeps the bytes
        // while the reader lives (the runtime reads them at load).
        let st = unsafe { (self.reader_create)(code.as_ptr().cast(), code.len(), &mut r) };
        check("hsa_code_object_reader_create_from_memory", st).map(|()| r)
    }

    /// `hsa_code_object_reader_destroy`.
    pub fn reader_destroy(&self, reader: u64) -> Result<(), HsaError> {
        // SAFETY: a reader of this replay; the runtime checks it.
        check("hsa_code_object_reader_destroy", unsafe {
            (self.reader_destroy)(reader)
        })
    }

    /// `hsa_executable_create_alt` (full profile, default rounding).
    pub fn exec_create(&self) -> Result<u64, HsaError> {
        let mut e = 0u64;
        // SAFETY: an out pointer to a live local; no options.
        let st = unsafe { (self.exec_create)(1, 0, std::ptr::null(), &mut e) };
        check("hsa_executable_create_alt", st).map(|()| e)
    }

    /// `hsa_executable_destroy`.
    pub fn exec_destroy(&self, exec: u64) -> Result<(), HsaError> {
        // SAFETY: an executable of this replay; the runtime checks it.
        check("hsa_executable_destroy", unsafe {
            (self.exec_destroy)(exec)
        })
    }

    /// `hsa_executable_agent_global_variable_define`: variable `name` at `at` for `agent`.
    pub fn variable_define(
        &self,
        exec: u64,
        agent: sys::hsa_agent_t,
        name: &CStr,
        at: u64,
    ) -> Result<(), HsaError> {
        // SAFETY: a NUL-terminated name alive for the call; the address is memory of this
        // replay the runtime records, never frees.
        check("hsa_executable_agent_global_variable_define", unsafe {
            (self.variable_define)(exec, agent, name.as_ptr(), at as *mut c_void)
        })
    }

    /// `hsa_executable_load_agent_code_object`, then `hsa_executable_freeze`.
    pub fn load(&self, exec: u64, agent: sys::hsa_agent_t, reader: u64) -> Result<(), HsaError> {
        // SAFETY: handles of this replay; no options, no loaded-code-object out pointer.
        let st =
            unsafe { (self.load)(exec, agent, reader, std::ptr::null(), std::ptr::null_mut()) };
        check("hsa_executable_load_agent_code_object", st)?;
        // SAFETY: as above.
        check("hsa_executable_freeze", unsafe {
            (self.freeze)(exec, std::ptr::null())
        })
    }

    /// `hsa_executable_get_symbol_by_name` for `agent`.
    pub fn symbol(&self, exec: u64, name: &CStr, agent: sys::hsa_agent_t) -> Result<u64, HsaError> {
        let mut s = 0u64;
        // SAFETY: a NUL-terminated name and the agent alive for the call; an out pointer.
        let st = unsafe { (self.by_name)(exec, name.as_ptr(), &agent, &mut s) };
        check("hsa_executable_get_symbol_by_name", st).map(|()| s)
    }

    /// An 8-byte symbol attribute (`VARIABLE_ADDRESS`, `KERNEL_OBJECT`).
    pub fn symbol_u64(&self, sym: u64, attr: u32) -> Result<u64, HsaError> {
        let mut v = 0u64;
        // SAFETY: the attributes asked for are `uint64_t`; an out pointer to a live local.
        let st = unsafe { (self.symbol_info)(sym, attr, (&mut v as *mut u64).cast()) };
        check("hsa_executable_symbol_get_info", st).map(|()| v)
    }

    /// `hsa_signal_create` with value `v`, no consumers.
    pub fn signal_create(&self, v: i64) -> Result<sys::hsa_signal_t, HsaError> {
        let mut s = sys::hsa_signal_t::default();
        // SAFETY: an out pointer to a live local; no consumer list.
        let st = unsafe { (self.signal_create)(v, 0, std::ptr::null(), &mut s) };
        check("hsa_signal_create", st).map(|()| s)
    }

    /// `hsa_signal_destroy`.
    pub fn signal_destroy(&self, s: sys::hsa_signal_t) {
        // SAFETY: a signal of this replay; the runtime checks it.
        let _ = unsafe { (self.signal_destroy)(s) };
    }

    /// `hsa_signal_wait_scacquire` until `s` is 0, bounded by the `hint` (timestamp ticks);
    /// the value then.
    pub fn wait_zero(&self, s: sys::hsa_signal_t, hint: u64) -> i64 {
        // SAFETY: a signal of this replay; a finite hint.
        unsafe {
            (self.signal_wait)(
                s,
                sys::HSA_SIGNAL_CONDITION_EQ,
                0,
                hint,
                sys::HSA_WAIT_STATE_BLOCKED,
            )
        }
    }

    /// `hsa_queue_create` of `size` packets on `agent` (the backend makes it an intercepting
    /// queue).
    pub fn queue_create(
        &self,
        agent: sys::hsa_agent_t,
        size: u32,
    ) -> Result<*mut sys::hsa_queue_t, HsaError> {
        let mut q = std::ptr::null_mut();
        // SAFETY: an out pointer to a live local; no error callback.
        let st = unsafe {
            (self.queue_create)(agent, size, 0, None, std::ptr::null_mut(), 0, 0, &mut q)
        };
        check("hsa_queue_create", st).map(|()| q)
    }

    /// `hsa_queue_destroy` of a queue of [`App::queue_create`] that is idle.
    ///
    /// # Safety
    ///
    /// 1. `q` is a queue of [`App::queue_create`], idle, destroyed once.
    pub unsafe fn queue_destroy(&self, q: *mut sys::hsa_queue_t) {
        // SAFETY: the caller's item 1.
        let _ = unsafe { (self.queue_destroy)(q) };
    }

    /// Writes `packet` at the next write index of `q` (header last, with release ordering)
    /// and rings its doorbell.
    ///
    /// # Safety
    ///
    /// 1. `q` is a live queue of [`App::queue_create`] with room for one packet.
    pub unsafe fn submit(&self, q: *mut sys::hsa_queue_t, packet: [u8; 64]) {
        use std::sync::atomic::{AtomicU16, Ordering};
        // SAFETY: the caller's item 1: the queue's ring is live and the slot the write index
        // reserves is ours until its header is published.
        unsafe {
            let qs = &*q;
            let idx = (self.add_write_index)(q, 1);
            let slot = qs
                .base_address
                .cast::<u8>()
                .add((idx % u64::from(qs.size)) as usize * 64);
            std::ptr::copy_nonoverlapping(packet[2..].as_ptr(), slot.add(2), 62);
            AtomicU16::from_ptr(slot.cast()).store(
                u16::from_le_bytes([packet[0], packet[1]]),
                Ordering::Release,
            );
            (self.signal_store)(qs.doorbell_signal, idx as i64);
        }
    }
}

/// `hsa_memory_copy` of `len` bytes from `src` to `dst` through the runtime's original entry
/// (not the application's, which waits for the agents' writers: a window holds them while its
/// tools read the outputs of a pass).
pub fn copy_original(dst: u64, src: u64, len: usize) -> Result<(), HsaError> {
    let copy = crate::state::backend()
        .originals()
        .and_then(|o| o.memory_copy)
        .ok_or(HsaError {
            call: "hsa_memory_copy",
            status: sys::HSA_STATUS_ERROR_NOT_INITIALIZED,
        })?;
    if len == 0 {
        return Ok(());
    }
    // SAFETY: a synchronous copy between two ranges the runtime checks.
    check("hsa_memory_copy", unsafe {
        copy(dst as *mut c_void, src as *const c_void, len)
    })
}

/// `hsa_amd_memory_pool_allocate` through the runtime's original entry: a block the backend
/// never tracks (the replay's own staging memory, which no snapshot holds and no scope check
/// digests).
pub fn pool_allocate_original(pool: u64, size: u64) -> Result<u64, HsaError> {
    let o = crate::state::backend().originals().ok_or(HsaError {
        call: "hsa_amd_memory_pool_allocate",
        status: sys::HSA_STATUS_ERROR_NOT_INITIALIZED,
    })?;
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: an out pointer to a live local.
    let st = unsafe {
        (o.pool_allocate)(
            sys::hsa_amd_memory_pool_t { handle: pool },
            size as usize,
            0,
            &mut p,
        )
    };
    check("hsa_amd_memory_pool_allocate", st).map(|()| p as u64)
}

/// `hsa_amd_memory_pool_free` of a block of [`pool_allocate_original`], through the original.
pub fn pool_free_original(p: u64) {
    if let Some(o) = crate::state::backend().originals() {
        // SAFETY: a block of `pool_allocate_original`; the runtime checks it.
        let _ = unsafe { (o.pool_free)(p as *mut c_void) };
    }
}
