//! The per-pass cost floor (SPEC §11, issue 15) through the real window on the simulator: with
//! `arguments` + `dirty`, the scope check and `dirty`'s comparison are one digest batch per
//! pass, a watched region is one digest operation, and the last pass (no restore follows)
//! digests only what the check watches; memory still ends equal to one execution.

use replay_core::{Outcome, Policy, Reason, RestoreMode, Scope};
use replay_mock::{Event, EventKind};
use replay_tests::*;

const PASSES: u32 = 4;

#[test]
fn one_digest_batch_per_pass_for_the_scope_check_and_dirty_and_none_for_dirty_after_the_last() {
    let reference = reference(1, |rt| RmwApp::setup(rt).run_plain(rt));
    let rt = runtime(1);
    let policy = Policy {
        scope: Scope::Arguments,
        restore: RestoreMode::Dirty,
        ..fast_policy()
    };
    let _replay = ToolScript::passes(u64::from(PASSES)).install(&rt, policy);
    let app = RmwApp::setup(&rt);
    rt.gpu().recorder().clear();
    let rec = app.run(&rt);
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    assert_eq!(rec.executed_passes, PASSES, "{rec}");
    let seen = app.seen();
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "same inputs: {rec}");
    assert_matches_reference(&rt, &reference);

    let batches: Vec<(usize, u64)> = rt
        .gpu()
        .recorder()
        .of_kind(EventKind::DigestBatch)
        .into_iter()
        .filter_map(|e| match e {
            Event::DigestBatch { ops, bytes, .. } => Some((ops, bytes)),
            _ => None,
        })
        .collect();
    // The application's 8 KiB buffer that no argument reaches is watched: one op for the
    // whole region.
    let watched = 8192u64;
    let scope = rec.captured_bytes;
    // Capture: the scope's chunks and the watched region; after each of the first passes one
    // batch for both; after the last only the watched region.
    assert_eq!(
        batches.len(),
        1 + PASSES as usize,
        "one digest batch per pass and one at capture: {batches:?}"
    );
    for &(_, bytes) in &batches[..PASSES as usize] {
        assert_eq!(bytes, scope + watched, "{batches:?}");
    }
    assert_eq!(
        batches[PASSES as usize],
        (1, watched),
        "after the last pass only the watched region, as one op: {batches:?}"
    );
    assert_eq!(
        rec.compared_bytes,
        scope * u64::from(PASSES - 1),
        "dirty compared the scope before every restore: {rec}"
    );
}
