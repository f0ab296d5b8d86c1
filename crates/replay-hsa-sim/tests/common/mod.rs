//! Helpers shared by `replay.rs` and `faults.rs`: a fresh sim with `OnLoad` installed and its
//! HIP-like client (`replay_hsa_sim::client`), the `rmw` kernel and its buffers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use replay_hsa_sim::{SimConfig, SimHsa};

// Not every test file uses every helper.
#[allow(unused_imports)]
pub use replay_hsa_sim::client::{barrier_on, dispatch, typed, Client as Api, TIMEOUT};

/// The process's replay service for these tests: `policy`, the wall clock, `tool` subscribed
/// to CONFIG and PASS, handed to the backend's interceptor.
pub fn install_service(
    policy: replay_core::Policy,
    tool: Arc<dyn replay_core::ReplayTool>,
) -> Arc<replay_core::ReplayService> {
    let service = Arc::new(replay_core::ReplayService::new(
        policy,
        Arc::new(replay_core::SystemClock::new()),
        Arc::new(replay_core::NoContextControl),
    ));
    service
        .configure(
            replay_core::ContextId(1),
            replay_core::Subscription::CONFIG | replay_core::Subscription::PASS,
            tool,
        )
        .unwrap();
    replay_hsa::set_service(service.clone());
    service
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
    let api = Api::new(&sim);
    (sim, api)
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
    api.buffer_and_args(sim, gpu, init)
}

pub fn read(p: *const u64) -> u64 {
    // SAFETY: a live simulated allocation.
    unsafe { std::ptr::read_volatile(p) }
}

/// An interceptor registered above the backend's that holds dispatch packets until it has `n`,
/// then writes them in one call, as a tool that rewrites one packet into several does: the runtime
/// itself hands interceptors one packet per call.
struct Batcher {
    n: usize,
    held: std::sync::Mutex<Vec<[u8; 64]>>,
}

unsafe extern "C" fn batcher(
    pkts: *const std::ffi::c_void,
    count: u64,
    _user_index: u64,
    data: *mut std::ffi::c_void,
    writer: replay_hsa::sys::PacketWriter,
) {
    // SAFETY: `data` is the `Batcher` leaked by `batch_above` for this queue.
    let b = unsafe { &*data.cast::<Batcher>() };
    let mut held = b.held.lock().unwrap();
    for i in 0..count as usize {
        // SAFETY: the runtime's contract: `count` packets of 64 bytes.
        let p = unsafe { pkts.cast::<[u8; 64]>().add(i).read_unaligned() };
        let header = u16::from_le_bytes([p[0], p[1]]);
        if replay_hsa::sys::aql::packet_type(header)
            == replay_hsa::sys::HSA_PACKET_TYPE_KERNEL_DISPATCH
        {
            held.push(p);
        } else {
            // Anything else (barriers) goes down alone, at once.
            // SAFETY: this call's writer with one packet alive for the call.
            unsafe { writer.unwrap()(p.as_ptr().cast(), 1) };
        }
    }
    if held.len() >= b.n {
        let out = std::mem::take(&mut *held);
        // SAFETY: this call's writer with packets alive for the call.
        unsafe { writer.unwrap()(out.as_ptr().cast(), out.len() as u64) };
    }
}

/// Registers a [`Batcher`] of `n` on the intercepting queue `q`, above the backend's
/// interceptor: the next `n` packets reach the backend in one call.
pub fn batch_above(sim: &SimHsa, q: *mut replay_hsa::sys::hsa_queue_t, n: usize) {
    let b = Box::into_raw(Box::new(Batcher {
        n,
        held: std::sync::Mutex::new(Vec::new()),
    }));
    // SAFETY: the AMD table's register entry of the sim, with its C signature.
    let register: replay_hsa::sys::InterceptRegisterFn =
        unsafe { typed(sim.amd().hsa_amd_queue_intercept_register_fn) };
    // SAFETY: a live intercepting queue; the leaked `Batcher` outlives it.
    let st = unsafe { register(q, Some(batcher), b.cast()) };
    assert_eq!(st, 0);
}
