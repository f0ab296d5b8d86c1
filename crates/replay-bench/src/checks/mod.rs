//! Correctness on the GPU (SPEC §6–§9.2 on hardware): each check prints PASS or FAIL and
//! returns a JSON row; [`run_all`] runs them in order. The checks live by what they check:
//! `primitives` (argument layouts, device digests, tier copies), `replay` (passes and
//! restores), `classes` (memory classes), `declines` (declines and truncations), `capture`
//! (stream capture), `concurrent` (tool work and copies beside a window) and `backing` (the
//! snapshot's backing), over the shapes in `expect`.

mod backing;
mod capture;
mod classes;
mod concurrent;
mod declines;
mod expect;
mod primitives;
mod replay;

use replay_core::{RestoreMode, Scope};

use crate::common::{Bench, Row};
use backing::{backing_gives_way, free_behind_spin};
use capture::{capture_beside, capture_launch};
use classes::{capture_vmm, module_variables, untracked_argument};
use concurrent::{concurrent_copy, reentrant};
use declines::{
    decline_budget, decline_callback, decline_drain, decline_snapshot, pass_stuck, tier_fallback,
    Drain,
};
use primitives::{copy_tiers, digest_equivalence, param_layouts};
use replay::{freed_region, replay_rmw, write_outside_scope};

pub fn run_all(b: &Bench, rows: &mut Vec<Row>) {
    const C: &str = "correctness";
    rows.push(Row::check(C, "param_layouts", param_layouts(b)));
    rows.push(Row::check(C, "digest_equivalence", digest_equivalence(b)));
    rows.push(Row::check(C, "copy_tiers", copy_tiers(b)));
    for scope in [Scope::All, Scope::Arguments] {
        for restore in [RestoreMode::Full, RestoreMode::Dirty] {
            rows.push(Row::check(
                C,
                format!("replay_rmw/{}/{}", scope.as_str(), restore.as_str()),
                replay_rmw(b, scope, restore),
            ));
        }
    }
    for scope in [Scope::All, Scope::Arguments] {
        rows.push(Row::check(
            C,
            format!("module_variables/{}", scope.as_str()),
            module_variables(b, scope),
        ));
    }
    for restore in [RestoreMode::Full, RestoreMode::Dirty] {
        rows.push(Row::check(
            C,
            format!("freed_region/{}", restore.as_str()),
            freed_region(b, restore),
        ));
    }
    rows.push(Row::check(C, "write_outside_scope", write_outside_scope(b)));
    rows.push(Row::check(C, "backing_gives_way", backing_gives_way(b)));
    rows.push(Row::check(
        C,
        "managed_argument",
        untracked_argument(b, false),
    ));
    rows.push(Row::check(
        C,
        "pinned_host_argument",
        untracked_argument(b, true),
    ));
    rows.push(Row::check(
        C,
        "capture/virtual_mapping",
        capture_vmm(b, false),
    ));
    rows.push(Row::check(
        C,
        "capture/stream_ordered_pool",
        capture_vmm(b, true),
    ));
    rows.push(Row::check(C, "decline/footprint_budget", decline_budget(b)));
    rows.push(Row::check(
        C,
        "decline/snapshot_failed",
        decline_snapshot(b),
    ));
    rows.push(Row::check(C, "tier_fallback", tier_fallback(b)));
    rows.push(Row::check(
        C,
        "decline/callback_failed",
        decline_callback(b),
    ));
    for which in [Drain::Queue, Drain::Agent, Drain::CopyFence] {
        rows.push(Row::check(
            C,
            format!("decline/{}", which.reason().as_str()),
            decline_drain(b, which),
        ));
    }
    rows.push(Row::check(C, "truncate/pass_drain_stuck", pass_stuck(b)));
    rows.push(Row::check(C, "reentrant_dispatch", reentrant(b)));
    rows.push(Row::check(
        C,
        "capture/launch_into_capturing_stream",
        capture_launch(b),
    ));
    for known in [false, true] {
        rows.push(Row::check(
            C,
            format!(
                "capture/window_beside_global_capture/{}",
                if known {
                    "known_stream"
                } else {
                    "unknown_stream"
                }
            ),
            capture_beside(b, known),
        ));
    }
    rows.push(Row::check(C, "concurrent_copy", concurrent_copy(b)));
    rows.push(Row::check(
        C,
        "free_behind_spinning_kernel",
        free_behind_spin(b),
    ));
    // Leave nothing behind for the measurements.
    b.backend.engine().release_pools();
    let _ = b.set_policy(Bench::policy(Scope::All, RestoreMode::Full));
}
