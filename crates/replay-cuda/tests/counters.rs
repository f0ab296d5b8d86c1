//! The counter collection without a GPU (SPEC §12.1): metric lists compiled into one-pass
//! groups over a fake of the CUPTI layer, the pass count the window is asked for, and values
//! decoded into samples keyed by `(dispatch_id, pass)`, through a real replay window on the
//! mock's instant agent.
//!
//! One test binary, its tests by subject in `tests/counters/`, all over the one fake
//! (`fake.rs`) and the window that runs the collector on it (`rig.rs`).

#[path = "counters/fake.rs"]
mod fake;
#[path = "counters/rig.rs"]
mod rig;

#[path = "counters/collection.rs"]
mod collection;
#[path = "counters/plan.rs"]
mod plan;
#[path = "counters/sass_pass.rs"]
mod sass_pass;
