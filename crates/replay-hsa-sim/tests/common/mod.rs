//! Client helpers shared by `replay.rs` and `faults.rs`: a fresh sim with `OnLoad` installed,
//! the client's entries read from its table, and queue, signal, packet and buffer helpers.

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use replay_hsa::queue as aql;
use replay_hsa::sys::{self, Entry};
use replay_hsa_sim::{PoolKind, SimConfig, SimHsa};

pub const TIMEOUT: Duration = Duration::from_secs(20);

/// A table slot as the entry's C type.
///
/// # Safety
///
/// 1. `F` is the entry's C signature and `S` a nullable function pointer field.
pub unsafe fn typed<S: Copy, F: Copy>(slot: S) -> F {
    assert_eq!(std::mem::size_of::<S>(), std::mem::size_of::<Entry>());
    // SAFETY: same size; a nullable function pointer (caller, item 1).
    let e: Entry = unsafe { std::mem::transmute_copy(&slot) };
    let f = e.expect("no entry is NULL");
    // SAFETY: same size; `F` is the entry's signature (caller, item 1).
    unsafe { std::mem::transmute_copy(&f) }
}

pub type QueueCreate = sys::QueueCreateFn;

#[derive(Clone, Copy)]
pub struct Api {
    pub pool_allocate: sys::PoolAllocateFn,
    pub queue_create: QueueCreate,
    pub queue_destroy: sys::QueueDestroyFn,
    pub load_write_index: sys::QueueLoadIndexFn,
    pub add_write_index: sys::QueueAddIndexFn,
    pub signal_create: sys::SignalCreateFn,
    pub signal_load: sys::SignalLoadFn,
    pub signal_store: sys::SignalUpdateFn,
    pub signal_wait: sys::SignalWaitFn,
    pub async_function: sys::AsyncFunctionFn,
    pub pool_free: sys::PoolFreeFn,
    pub async_copy: sys::AsyncCopyFn,
}

/// A fresh sim with `OnLoad` installed, and the client's entries read from its table after.
pub fn sim() -> (SimHsa, Api) {
    sim_with(SimConfig::default())
}

/// [`sim`] with a configuration of its own.
pub fn sim_with(config: SimConfig) -> (SimHsa, Api) {
    let mut sim = SimHsa::new(config);
    // SAFETY: the sim's table, alive, not used by other threads during the call.
    let ok = unsafe { replay_hsa::on_load(sim.table().cast(), 1, 0, std::ptr::null()) };
    assert!(ok, "{}", replay_hsa::backend().state_json());
    let c = sim.core();
    let a = sim.amd();
    // SAFETY: each entry is read as its C signature.
    let api = unsafe {
        Api {
            pool_allocate: typed(a.hsa_amd_memory_pool_allocate_fn),
            queue_create: typed(c.hsa_queue_create_fn),
            queue_destroy: typed(c.hsa_queue_destroy_fn),
            load_write_index: typed(c.hsa_queue_load_write_index_relaxed_fn),
            add_write_index: typed(c.hsa_queue_add_write_index_screlease_fn),
            signal_create: typed(c.hsa_signal_create_fn),
            signal_load: typed(c.hsa_signal_load_relaxed_fn),
            signal_store: typed(c.hsa_signal_store_screlease_fn),
            signal_wait: typed(c.hsa_signal_wait_scacquire_fn),
            async_function: typed(a.hsa_amd_async_function_fn),
            pool_free: typed(a.hsa_amd_memory_pool_free_fn),
            async_copy: typed(a.hsa_amd_memory_async_copy_fn),
        }
    };
    (sim, api)
}

impl Api {
    pub fn signal(&self, v: i64) -> sys::hsa_signal_t {
        let mut s = sys::hsa_signal_t::default();
        // SAFETY: valid out pointer, no consumers.
        let st = unsafe { (self.signal_create)(v, 0, std::ptr::null(), &mut s) };
        assert_eq!(st, 0);
        s
    }

    pub fn load(&self, s: sys::hsa_signal_t) -> i64 {
        // SAFETY: a live signal.
        unsafe { (self.signal_load)(s) }
    }

    pub fn wait_zero(&self, s: sys::hsa_signal_t) -> i64 {
        // SAFETY: a live signal; EQ 0; the hint is generous at any timestamp frequency of the
        // tests (nanoseconds at the default 1 GHz).
        unsafe { (self.signal_wait)(s, 0, 0, TIMEOUT.as_nanos() as u64, 0) }
    }

    /// An application copy through the (wrapped) `hsa_amd_memory_async_copy`, after `dep`
    /// reaches 0, decrementing `done`.
    pub fn copy_after(
        &self,
        agent: sys::hsa_agent_t,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        dep: sys::hsa_signal_t,
        done: sys::hsa_signal_t,
    ) {
        // SAFETY: live simulated allocations of `len` bytes; one dependency signal.
        let st =
            unsafe { (self.async_copy)(dst.cast(), agent, src.cast(), agent, len, 1, &dep, done) };
        assert_eq!(st, 0);
    }

    pub fn alloc(&self, pool: sys::hsa_amd_memory_pool_t, size: usize) -> *mut u8 {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out pointer.
        assert_eq!(unsafe { (self.pool_allocate)(pool, size, 0, &mut p) }, 0);
        p.cast()
    }

    pub fn queue(&self, agent: sys::hsa_agent_t) -> *mut sys::hsa_queue_t {
        self.queue_of(agent, 64)
    }

    pub fn queue_of(&self, agent: sys::hsa_agent_t, size: u32) -> *mut sys::hsa_queue_t {
        let mut q = std::ptr::null_mut();
        // SAFETY: valid out pointer; no callback.
        let st = unsafe {
            (self.queue_create)(agent, size, 0, None, std::ptr::null_mut(), 0, 0, &mut q)
        };
        assert_eq!(st, 0);
        q
    }

    /// Writes `packets` at the next write indices (each header last, release) and rings the
    /// doorbell once, for the last: the runtime hands them to the interceptor in one call.
    pub fn submit_many(&self, q: *mut sys::hsa_queue_t, packets: &[[u8; 64]]) {
        // SAFETY: a live queue; the slots are ours until their headers are published.
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

    /// Writes `packet` at the next write index (header last, release) and rings the doorbell.
    pub fn submit(&self, q: *mut sys::hsa_queue_t, packet: [u8; 64]) {
        // SAFETY: a live queue; the slot is ours until the header is published.
        unsafe {
            let idx = (self.add_write_index)(q, 1);
            let qs = &*q;
            let slot = qs
                .base_address
                .cast::<u8>()
                .add((idx % u64::from(qs.size)) as usize * 64);
            std::ptr::copy_nonoverlapping(packet[2..].as_ptr(), slot.add(2), 62);
            AtomicU16::from_ptr(slot.cast()).store(
                u16::from_le_bytes([packet[0], packet[1]]),
                Ordering::Release,
            );
            let w = (self.load_write_index)(q);
            (self.signal_store)(qs.doorbell_signal, w as i64 - 1);
        }
    }
}

pub fn dispatch(kernel: u64, kernarg: *mut u8, completion: sys::hsa_signal_t) -> [u8; 64] {
    let p = sys::hsa_kernel_dispatch_packet_t {
        header: aql::header(sys::HSA_PACKET_TYPE_KERNEL_DISPATCH, true, 1, 1),
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
    unsafe { std::mem::transmute(p) }
}

/// `x = 3x + 1` on the `u64` at `arg0` (read-modify-write: a replay that does not restore
/// shows).
pub fn rmw(x: u64) -> u64 {
    x.wrapping_mul(3).wrapping_add(1)
}

pub fn rmw_kernel(sim: &SimHsa, runs: Arc<AtomicU64>, delay: Duration) -> u64 {
    sim.register_kernel("rmw", move |d| {
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        std::thread::sleep(delay);
        d.write_u64(p, rmw(v))?;
        runs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
}

/// A coarse device buffer holding `init` and kernargs `(buffer)` on GPU `gpu`.
pub fn buffer_and_args(sim: &SimHsa, api: &Api, gpu: usize, init: u64) -> (*mut u64, *mut u8) {
    let buf = api
        .alloc(sim.pool(gpu, PoolKind::DeviceCoarse), 64)
        .cast::<u64>();
    let args = api.alloc(sim.pool(0, PoolKind::Kernarg), 64);
    // SAFETY: fresh host-visible simulated allocations.
    unsafe {
        buf.write_volatile(init);
        args.cast::<u64>().write(buf as u64);
    }
    (buf, args)
}

pub fn read(p: *const u64) -> u64 {
    // SAFETY: a live simulated allocation.
    unsafe { std::ptr::read_volatile(p) }
}

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
