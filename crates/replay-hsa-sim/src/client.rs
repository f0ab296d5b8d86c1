//! A HIP-like client of the simulated runtime (SPEC §9.1), for tests of HSA tools (this
//! workspace's, and a tool author's own): it reads the application's entries from the API table **after** the
//! tool's `OnLoad` (so it calls the tool's wrappers, as the HIP runtime would) and drives the
//! runtime the way an application does: create a queue, allocate from pools, write AQL packets
//! (header last, with release ordering) and ring the doorbell, wait on completion signals,
//! copy asynchronously.
//!
//! Every helper asserts that the runtime answered `HSA_STATUS_SUCCESS`: a failure is a test
//! failure with the entry named. The raw entries are public for tests that need another
//! argument or want the status.
//!
//! Beside the entries: it uses the state, the queues and the pools below it, and nothing of
//! the crate uses it.

use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use replay_hsa::sys::aql;
use replay_hsa::sys::{self, Entry};

use crate::SimHsa;

/// How long the client's waits are bounded (a hint large enough for any timestamp frequency a
/// test configures, yet finite so a broken tool fails the test instead of hanging it).
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// The set-up every test of `replay-hsa` on the simulator starts from: a fresh simulated
/// runtime of `config` with `replay-hsa`'s `OnLoad` installed on its table (asserting it
/// succeeded), and the client reading the application's entries after it.
pub fn loaded(config: crate::SimConfig) -> (SimHsa, Client) {
    let mut sim = SimHsa::new(config);
    // SAFETY: the sim's table, alive, not used by other threads during the call.
    let ok = unsafe { replay_hsa::on_load(sim.table().cast(), 1, 0, std::ptr::null()) };
    assert!(ok, "{}", replay_hsa::backend().state_json());
    let client = Client::new(&sim);
    (sim, client)
}

/// A fresh simulated runtime of `config` with `replay-hsa`'s `OnLoad` installed on its table,
/// and the application's entries a standalone replay calls (`replay_hsa::standalone`, SPEC
/// §13), read from the table after `OnLoad`; `Err` says why `OnLoad` refused or an entry is
/// missing.
pub fn installed(
    config: crate::SimConfig,
) -> Result<(SimHsa, replay_hsa::standalone::App), String> {
    let mut sim = SimHsa::new(config);
    // SAFETY: the sim's table, alive, not used by other threads during the call.
    let ok = unsafe { replay_hsa::on_load(sim.table().cast(), 1, 0, std::ptr::null()) };
    if !ok {
        return Err(format!(
            "OnLoad refused the simulated runtime's table: {}",
            replay_hsa::backend().state_json()
        ));
    }
    // SAFETY: the table `OnLoad` just wrapped, alive while `sim` is, not written meanwhile.
    let app = unsafe { replay_hsa::standalone::App::from_table(sim.table()) }?;
    Ok((sim, app))
}

/// The process's replay service for those tests: `policy`, the wall clock, `tool` subscribed to
/// `subscription`, started by the caller, handed to `replay-hsa`'s interceptor.
pub fn install_service(
    policy: replay_core::Policy,
    subscription: replay_core::Subscription,
    tool: std::sync::Arc<dyn replay_core::ReplayTool>,
) -> std::sync::Arc<replay_core::ReplayService> {
    let service = std::sync::Arc::new(replay_core::ReplayService::new(
        policy,
        std::sync::Arc::new(replay_core::SystemClock::new()),
        std::sync::Arc::new(replay_core::NoContextControl),
    ));
    service
        .configure(replay_core::ContextId(1), subscription, tool)
        .expect("the first configuration of the process");
    replay_hsa::set_service(service.clone());
    service
}

/// A table slot read as its entry's C type.
///
/// # Safety
///
/// 1. `F` is the entry's C signature and `S` a nullable function pointer field of a table.
pub unsafe fn typed<S: Copy, F: Copy>(slot: S) -> F {
    assert_eq!(std::mem::size_of::<S>(), std::mem::size_of::<Entry>());
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<Entry>());
    // SAFETY: same size; a nullable function pointer (caller, item 1).
    let e: Entry = unsafe { std::mem::transmute_copy(&slot) };
    let f = e.expect("no entry of the simulated table is NULL");
    // SAFETY: same size; `F` is the entry's signature (caller, item 1).
    unsafe { std::mem::transmute_copy(&f) }
}

/// The entries an application uses, as the table holds them now.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy)]
pub struct Client {
    pub pool_allocate: sys::PoolAllocateFn,
    pub pool_free: sys::PoolFreeFn,
    pub queue_create: sys::QueueCreateFn,
    pub queue_destroy: sys::QueueDestroyFn,
    pub load_write_index: sys::QueueLoadIndexFn,
    pub add_write_index: sys::QueueAddIndexFn,
    pub signal_create: sys::SignalCreateFn,
    pub signal_load: sys::SignalLoadFn,
    pub signal_store: sys::SignalUpdateFn,
    pub signal_wait: sys::SignalWaitFn,
    pub async_function: sys::AsyncFunctionFn,
    pub async_copy: sys::AsyncCopyFn,
    pub memory_copy: sys::MemoryCopyFn,
    pub memory_fill: sys::MemoryFillFn,
    pub memory_lock: sys::MemoryLockFn,
    pub memory_unlock: sys::MemoryUnlockFn,
    pub ipc_create: sys::IpcMemoryCreateFn,
    pub ipc_attach: sys::IpcMemoryAttachFn,
    pub ipc_detach: sys::IpcMemoryDetachFn,
    pub pointer_info: sys::PointerInfoFn,
}

impl Client {
    /// The client of `sim`, reading the entries as a tool's `OnLoad` left them.
    pub fn new(sim: &SimHsa) -> Self {
        let c = sim.core();
        let a = sim.amd();
        // SAFETY: each entry is read as its C signature (the field names say which).
        unsafe {
            Self {
                pool_allocate: typed(a.hsa_amd_memory_pool_allocate_fn),
                pool_free: typed(a.hsa_amd_memory_pool_free_fn),
                queue_create: typed(c.hsa_queue_create_fn),
                queue_destroy: typed(c.hsa_queue_destroy_fn),
                load_write_index: typed(c.hsa_queue_load_write_index_relaxed_fn),
                add_write_index: typed(c.hsa_queue_add_write_index_screlease_fn),
                signal_create: typed(c.hsa_signal_create_fn),
                signal_load: typed(c.hsa_signal_load_relaxed_fn),
                signal_store: typed(c.hsa_signal_store_screlease_fn),
                signal_wait: typed(c.hsa_signal_wait_scacquire_fn),
                async_function: typed(a.hsa_amd_async_function_fn),
                async_copy: typed(a.hsa_amd_memory_async_copy_fn),
                memory_copy: typed(c.hsa_memory_copy_fn),
                memory_fill: typed(a.hsa_amd_memory_fill_fn),
                memory_lock: typed(a.hsa_amd_memory_lock_fn),
                memory_unlock: typed(a.hsa_amd_memory_unlock_fn),
                ipc_create: typed(a.hsa_amd_ipc_memory_create_fn),
                ipc_attach: typed(a.hsa_amd_ipc_memory_attach_fn),
                ipc_detach: typed(a.hsa_amd_ipc_memory_detach_fn),
                pointer_info: typed(a.hsa_amd_pointer_info_fn),
            }
        }
    }

    /// A signal with value `v`.
    pub fn signal(&self, v: i64) -> sys::hsa_signal_t {
        let mut s = sys::hsa_signal_t::default();
        // SAFETY: valid out pointer, no consumers.
        let st = unsafe { (self.signal_create)(v, 0, std::ptr::null(), &mut s) };
        assert_eq!(st, sys::HSA_STATUS_SUCCESS, "hsa_signal_create");
        s
    }

    /// A signal's value.
    pub fn load(&self, s: sys::hsa_signal_t) -> i64 {
        // SAFETY: the entry's contract; the runtime answers for unknown signals.
        unsafe { (self.signal_load)(s) }
    }

    /// Stores `v` into a signal (release).
    pub fn store(&self, s: sys::hsa_signal_t, v: i64) {
        // SAFETY: the entry's contract; the runtime ignores unknown signals.
        unsafe { (self.signal_store)(s, v) }
    }

    /// Waits until `s` is 0, bounded by [`TIMEOUT`]; its value then.
    pub fn wait_zero(&self, s: sys::hsa_signal_t) -> i64 {
        let hint = crate::state::duration_to_ticks(TIMEOUT);
        // SAFETY: the entry's contract: EQ 0, a finite hint in the runtime's ticks.
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

    /// `size` bytes from `pool`.
    pub fn alloc(&self, pool: sys::hsa_amd_memory_pool_t, size: usize) -> *mut u8 {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out pointer.
        let st = unsafe { (self.pool_allocate)(pool, size, 0, &mut p) };
        assert_eq!(st, sys::HSA_STATUS_SUCCESS, "hsa_amd_memory_pool_allocate");
        p.cast()
    }

    /// A 64-byte coarse-grained buffer on GPU `gpu` holding `init`, and a kernel-argument block
    /// (from the CPU's kernarg pool) whose first argument points at it: the inputs of a
    /// one-argument kernel.
    pub fn buffer_and_args(&self, sim: &SimHsa, gpu: usize, init: u64) -> (*mut u64, *mut u8) {
        let buf = self
            .alloc(sim.pool(gpu, crate::PoolKind::DeviceCoarse), 64)
            .cast::<u64>();
        let args = self.alloc(sim.pool(0, crate::PoolKind::Kernarg), 64);
        // SAFETY: two fresh simulated allocations of 64 bytes, host memory.
        unsafe {
            buf.write_volatile(init);
            args.cast::<u64>().write(buf as u64);
        }
        (buf, args)
    }

    /// Frees a block from [`Client::alloc`].
    pub fn free(&self, p: *mut u8) {
        // SAFETY: the entry's contract; the runtime answers an error for unknown pointers.
        let st = unsafe { (self.pool_free)(p.cast()) };
        assert_eq!(st, sys::HSA_STATUS_SUCCESS, "hsa_amd_memory_pool_free");
    }

    /// A 64-packet queue on `agent`.
    pub fn queue(&self, agent: sys::hsa_agent_t) -> *mut sys::hsa_queue_t {
        self.queue_of(agent, 64)
    }

    /// A queue of `size` packets on `agent`.
    pub fn queue_of(&self, agent: sys::hsa_agent_t, size: u32) -> *mut sys::hsa_queue_t {
        let mut q = std::ptr::null_mut();
        // SAFETY: valid out pointer; no callback.
        let st = unsafe {
            (self.queue_create)(agent, size, 0, None, std::ptr::null_mut(), 0, 0, &mut q)
        };
        assert_eq!(st, sys::HSA_STATUS_SUCCESS, "hsa_queue_create");
        q
    }

    /// Destroys an idle queue from [`Client::queue`].
    // The pointer is only handed to the runtime's entry, which checks it against its queues.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn destroy(&self, q: *mut sys::hsa_queue_t) {
        // SAFETY: the entry's contract; the simulator answers an error for unknown queues.
        let st = unsafe { (self.queue_destroy)(q) };
        assert_eq!(st, sys::HSA_STATUS_SUCCESS, "hsa_queue_destroy");
    }

    /// Writes `packet` at the next write index and rings the doorbell (see
    /// [`Client::submit_many`]).
    pub fn submit(&self, q: *mut sys::hsa_queue_t, packet: [u8; 64]) {
        self.submit_many(q, &[packet]);
    }

    /// Writes `packets` at the next write indices (each header last, with release ordering)
    /// and rings the doorbell once, for the last: the runtime hands them to the interceptors
    /// one by one, in order, on the ringing thread.
    ///
    /// # Panics
    ///
    /// If `q` is not a live queue of the simulator (a queue from [`Client::queue`]). The ring
    /// must have room for the packets (as for an application, a full ring is overwritten).
    // `q` is checked against the simulator's live queues, and their memory is held while it is
    // written, so no argument makes this unsound.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn submit_many(&self, q: *mut sys::hsa_queue_t, packets: &[[u8; 64]]) {
        let _alive = crate::queue::lookup(q).expect("a live queue of the simulator");
        assert!(!packets.is_empty());
        // SAFETY: `q` is a live queue whose memory `_alive` holds; the slots reserved by the
        // write index are ours until their headers are published.
        unsafe {
            let qs = &*q;
            let first = (self.add_write_index)(q, packets.len() as u64);
            for (i, packet) in packets.iter().enumerate() {
                let idx = first + i as u64;
                let slot = qs
                    .base_address
                    .cast::<u8>()
                    .add((idx % u64::from(qs.size)) as usize * 64);
                std::ptr::copy_nonoverlapping(packet[2..].as_ptr(), slot.add(2), 62);
                AtomicU16::from_ptr(slot.cast()).store(
                    u16::from_le_bytes([packet[0], packet[1]]),
                    Ordering::Release,
                );
            }
            (self.signal_store)(
                qs.doorbell_signal,
                (first + packets.len() as u64 - 1) as i64,
            );
        }
    }

    /// An asynchronous copy of `len` bytes from `src` to `dst` (both on `agent`'s side) that
    /// starts once `dep` is 0 and decrements `done`.
    pub fn copy_after(
        &self,
        agent: sys::hsa_agent_t,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        dep: sys::hsa_signal_t,
        done: sys::hsa_signal_t,
    ) {
        // SAFETY: the entry's contract: one dependency signal; the runtime checks the ranges.
        let st =
            unsafe { (self.async_copy)(dst.cast(), agent, src.cast(), agent, len, 1, &dep, done) };
        assert_eq!(st, sys::HSA_STATUS_SUCCESS, "hsa_amd_memory_async_copy");
    }
}

impl Client {
    /// Locks `size` bytes of host memory at `host` for every agent; the agents' address.
    pub fn lock(&self, host: *mut u8, size: usize) -> *mut u8 {
        let mut at = std::ptr::null_mut();
        // SAFETY: the entry's contract: no agent list (every agent), a valid out pointer; the
        // runtime checks the range.
        let st = unsafe { (self.memory_lock)(host.cast(), size, std::ptr::null_mut(), 0, &mut at) };
        assert_eq!(st, sys::HSA_STATUS_SUCCESS, "hsa_amd_memory_lock");
        at.cast()
    }

    /// Unlocks host memory locked with [`Client::lock`].
    pub fn unlock(&self, host: *mut u8) {
        // SAFETY: the entry's contract; the runtime answers an error for unknown pointers.
        let st = unsafe { (self.memory_unlock)(host.cast()) };
        assert_eq!(st, sys::HSA_STATUS_SUCCESS, "hsa_amd_memory_unlock");
    }

    /// A synchronous copy of `len` bytes.
    pub fn copy_now(&self, dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: the entry's contract; the runtime checks the ranges.
        let st = unsafe { (self.memory_copy)(dst.cast(), src.cast(), len) };
        assert_eq!(st, sys::HSA_STATUS_SUCCESS, "hsa_memory_copy");
    }

    /// Fills `count` 32-bit words at `dst` with `value`, synchronously.
    pub fn fill(&self, dst: *mut u8, value: u32, count: usize) {
        // SAFETY: the entry's contract; the runtime checks the range.
        let st = unsafe { (self.memory_fill)(dst.cast(), value, count) };
        assert_eq!(st, sys::HSA_STATUS_SUCCESS, "hsa_amd_memory_fill");
    }

    /// An IPC-imported mapping of the block at `exported` (`len` bytes), for every agent.
    pub fn ipc_import(&self, exported: *mut u8, len: usize) -> *mut u8 {
        let mut h = sys::hsa_amd_ipc_memory_t::default();
        // SAFETY: the entry's contract; a valid out pointer.
        let st = unsafe { (self.ipc_create)(exported.cast(), len, &mut h) };
        assert_eq!(st, sys::HSA_STATUS_SUCCESS, "hsa_amd_ipc_memory_create");
        let mut at = std::ptr::null_mut();
        // SAFETY: the entry's contract: the handle just made, no agent list, an out pointer.
        let st = unsafe { (self.ipc_attach)(&h, len, 0, std::ptr::null(), &mut at) };
        assert_eq!(st, sys::HSA_STATUS_SUCCESS, "hsa_amd_ipc_memory_attach");
        at.cast()
    }

    /// The runtime's pointer info of `p`.
    pub fn pointer_info(&self, p: *const u8) -> sys::hsa_amd_pointer_info_t {
        let mut info = sys::hsa_amd_pointer_info_t::default();
        // SAFETY: the entry's contract: an out-struct with its size set, no agent list.
        let st = unsafe {
            (self.pointer_info)(
                p.cast(),
                &mut info,
                None,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(st, sys::HSA_STATUS_SUCCESS, "hsa_amd_pointer_info");
        info
    }
}

/// A one-work-item kernel-dispatch packet with system-scope fences and the barrier bit.
pub fn dispatch(kernel: u64, kernarg: *mut u8, completion: sys::hsa_signal_t) -> [u8; 64] {
    let p = sys::hsa_kernel_dispatch_packet_t {
        header: aql::header(sys::HSA_PACKET_TYPE_KERNEL_DISPATCH, true, 2, 2),
        setup: 1,
        workgroup_size_x: 1,
        workgroup_size_y: 1,
        workgroup_size_z: 1,
        grid_size_x: 1,
        grid_size_y: 1,
        grid_size_z: 1,
        kernel_object: kernel,
        kernarg_address: kernarg as u64,
        completion_signal: completion,
        ..Default::default()
    };
    // SAFETY: a 64-byte plain-integer struct.
    unsafe { std::mem::transmute::<sys::hsa_kernel_dispatch_packet_t, [u8; 64]>(p) }
}

/// A barrier-AND packet (barrier bit, system-scope fences) waiting on `dep`.
pub fn barrier_on(dep: sys::hsa_signal_t, completion: sys::hsa_signal_t) -> [u8; 64] {
    let mut p = sys::hsa_barrier_and_packet_t {
        header: aql::header(sys::HSA_PACKET_TYPE_BARRIER_AND, true, 2, 2),
        completion_signal: completion,
        ..Default::default()
    };
    p.dep_signal[0] = dep;
    // SAFETY: a 64-byte plain-integer struct.
    unsafe { std::mem::transmute::<sys::hsa_barrier_and_packet_t, [u8; 64]>(p) }
}
