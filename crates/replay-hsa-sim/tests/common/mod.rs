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
