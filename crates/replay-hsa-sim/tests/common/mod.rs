//! Helpers shared by `replay.rs` and `faults.rs`: a fresh sim with `OnLoad` installed and its
//! HIP-like client (`replay_hsa_sim::client`), the `rmw` kernel and its buffers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use replay_hsa_sim::{SimConfig, SimHsa};

// Not every test file uses every helper.
#[allow(unused_imports)]
pub use replay_hsa_sim::client::{barrier_on, dispatch, typed, Client as Api, TIMEOUT};

/// The process's replay service for these tests (`client::install_service`): `tool`
/// subscribed to CONFIG and PASS.
pub fn install_service(
    policy: replay_core::Policy,
    tool: Arc<dyn replay_core::ReplayTool>,
) -> Arc<replay_core::ReplayService> {
    replay_hsa_sim::client::install_service(
        policy,
        replay_core::Subscription::CONFIG | replay_core::Subscription::PASS,
        tool,
    )
}

/// A fresh sim with `OnLoad` installed, and the client's entries read from its table after.
pub fn sim() -> (SimHsa, Api) {
    sim_with(SimConfig::default())
}

/// [`sim`] with a configuration of its own (`client::loaded`).
pub fn sim_with(config: SimConfig) -> (SimHsa, Api) {
    replay_hsa_sim::client::loaded(config)
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

/// What `replay.rs` and `memory_classes.rs` add to the scripted tool: in every PASS ENTER it
/// reads the `u64` at `addr` (when not 0) into `seen`, a tool looking at the kernel's inputs.
#[derive(Default)]
pub struct Watch {
    pub addr: AtomicU64,
    pub seen: std::sync::Mutex<Vec<u64>>,
}

impl Watch {
    pub fn reset(&self) {
        self.addr.store(0, Ordering::SeqCst);
        self.seen.lock().unwrap().clear();
    }
}

/// The scripted tool's hook: `watch` in every PASS ENTER, then `on_pass` with the pass index.
pub fn watching(
    watch: Arc<Watch>,
    on_pass: impl Fn(u32) + Send + Sync + 'static,
) -> replay_mock::double::ToolHook {
    use replay_core::{Operation, Phase};
    Arc::new(move |op, phase, p, _| {
        if (op, phase) != (Operation::Pass, Phase::Enter) {
            return;
        }
        let a = watch.addr.load(Ordering::SeqCst);
        if a != 0 {
            // SAFETY: a live simulated allocation (host memory) of 8 bytes.
            let v = unsafe { std::ptr::read_volatile(a as *const u64) };
            watch.seen.lock().unwrap().push(v);
        }
        on_pass(p.current_pass);
    })
}

/// The scripted tool of these tests: it asks for no pass until a test says how many.
pub fn scripted_tool() -> Arc<replay_mock::double::ScriptedTool> {
    replay_mock::double::ScriptedTool::new(Arc::default(), no_passes())
}

/// The script every test starts from: a pass-count callback answering 0.
pub fn no_passes() -> replay_mock::double::ToolScript {
    replay_mock::double::ToolScript {
        passes: Some(0),
        ..Default::default()
    }
}
