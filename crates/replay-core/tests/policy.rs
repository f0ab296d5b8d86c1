//! Policy (SPEC §8): defaults, `KREPLAY_*` variables and their upstream aliases, unit parsing,
//! the API (`set_var`, `validate`) and the kernel filter the variables build.
//!
//! One test binary, its tests by subject in `tests/policy/` over the shared `harness`.

#[path = "policy/harness.rs"]
mod harness;

#[path = "policy/api.rs"]
mod api;
#[path = "policy/defaults.rs"]
mod defaults;
#[path = "policy/filter.rs"]
mod filter;
#[path = "policy/units.rs"]
mod units;
#[path = "policy/variables.rs"]
mod variables;
