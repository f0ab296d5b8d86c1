//! The simulated runtime driven the way a HIP runtime drives the real one: through the API
//! table's entries only (agents, pools, queues, packets, doorbells, signals, interception, the
//! loader extension), then with `replay-hsa`'s `OnLoad` installed on the table.
//!
//! Every wait is bounded (`TIMEOUT`), so a broken simulator fails a test instead of hanging CI.
//!
//! One test binary, its tests by subject in `tests/sim/` over the shared `harness`.

#[path = "sim/harness.rs"]
mod harness;

#[path = "sim/interception.rs"]
mod interception;
#[path = "sim/loader.rs"]
mod loader;
#[path = "sim/on_load.rs"]
mod on_load;
#[path = "sim/queues.rs"]
mod queues;
#[path = "sim/table.rs"]
mod table;
