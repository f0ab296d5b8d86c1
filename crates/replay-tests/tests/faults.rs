//! Every fault of SPEC §6 and §8 end to end on the simulator: a real `ReplayService` on the
//! runtime's virtual clock with short bounds, `replay-memory`'s engine, and the simulator's
//! fault injection. For each fault: the outcome and reason, exactly one completion, the
//! simulator's invariants, and the application's final memory digest equal to a reference
//! runtime that ran the same workload once without a replay service.
//!
//! The one fault that aborts the process (a failed restore between passes) runs in a child
//! process: this binary re-executed with a scenario variable.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replay_core::{
    CopyOp, DeviceMemory, KernelMemo, MemLoc, MemoryClass, Outcome, OutcomeRecord, Policy, Reason,
    RestoreMode, Scope, Tier,
};
use replay_mock::{EventKind, Expect, Fault, FaultMode, ModuleSpec, SimRuntime, TargetPattern};
use replay_tests::{
    assert_aborted, assert_matches_reference, assert_outcome, child_scenario, fast_policy, finish,
    reference, run_child, runtime, At, Point, Replay, RmwApp, ToolScript, A0,
};

/// The reference of one `rmw` execution on a fresh runtime.
fn once() -> Vec<replay_core::Digest128> {
    reference(1, |rt| RmwApp::setup(rt).run_plain(rt))
}

/// A runtime whose tool asks `passes` passes of every dispatch, and the application.
fn setup(passes: u64, policy: Policy) -> (SimRuntime, Replay, RmwApp) {
    let rt = runtime(1);
    let replay = ToolScript::passes(passes).install(&rt, policy);
    let app = RmwApp::setup(&rt);
    rt.gpu().recorder().clear();
    (rt, replay, app)
}

/// Checks what every declined or truncated dispatch must show: the record CONFIG EXIT saw,
/// every executed pass saw the same inputs, memory equals one execution, invariants hold.
fn ends_as_one_execution(rt: &SimRuntime, replay: &Replay, app: &RmwApp, rec: &OutcomeRecord) {
    assert_eq!(
        replay.log.outcomes().last(),
        Some(rec),
        "CONFIG EXIT carried the outcome"
    );
    let seen = app.seen();
    assert_eq!(seen.len(), rec.executed_passes as usize, "{rec}");
    assert!(
        seen.windows(2).all(|w| w[0] == w[1]),
        "every execution saw the same inputs"
    );
    assert_eq!(
        rt.read_u32s(app.buf, replay_tests::RMW_N).unwrap(),
        replay_tests::rmw_once(&RmwApp::initial())
    );
    assert_eq!(app.counter_value(rt), 1, "the atomic counter moved once");
    assert_matches_reference(rt, &once());
    finish(rt);
}

fn declined(rt: &SimRuntime, replay: &Replay, app: &RmwApp, rec: &OutcomeRecord, why: Reason) {
    assert_outcome(rec, Outcome::Declined, why);
    assert_eq!(rec.executed_passes, 1);
    assert!(rec.pass_gpu_seconds.is_empty(), "{rec}");
    ends_as_one_execution(rt, replay, app, rec);
}

#[test]
fn snapshot_oom_declines_snapshot_failed() {
    let (rt, replay, app) = setup(3, fast_policy());
    // Every tier refuses (one refusing tier alone hands its share to the next).
    let f = rt.inject(A0, Fault::SnapshotOom, FaultMode::Always);
    let rec = app.run(&rt);
    assert!(rt.fault_hits(f) >= 2, "the later tiers were tried too");
    rt.gpu().clear_faults();
    declined(&rt, &replay, &app, &rec, Reason::SnapshotFailed);
    assert_eq!(rt.engine(A0).pooled_bytes(), 0, "nothing leaked");
    assert_eq!(rt.memory(A0).backing_count(), 0);
}

#[test]
fn capture_copy_failure_declines_snapshot_failed() {
    let (rt, replay, app) = setup(3, fast_policy());
    let f = rt.inject(A0, Fault::CaptureCopyFail, FaultMode::Once);
    let rec = app.run(&rt);
    assert_eq!(rt.fault_hits(f), 1);
    declined(&rt, &replay, &app, &rec, Reason::SnapshotFailed);
    assert_eq!(
        rt.engine(A0).quarantined_bytes(),
        0,
        "a failed copy leaks nothing"
    );
}

#[test]
fn capture_copy_stuck_declines_snapshot_failed_and_quarantines() {
    let (rt, replay, app) = setup(3, fast_policy());
    rt.inject(A0, Fault::CaptureCopyStuck, FaultMode::Once);
    let wall = Instant::now();
    let rec = app.run(&rt);
    assert!(wall.elapsed() < Duration::from_secs(3), "virtual time");
    assert!(rt.engine(A0).quarantined_bytes() > 0);
    assert_eq!(rt.gpu().recorder().count(EventKind::FenceAbandoned), 1);
    declined(&rt, &replay, &app, &rec, Reason::SnapshotFailed);
}

#[test]
fn queue_drain_stuck_declines() {
    let (rt, replay, app) = setup(3, fast_policy());
    rt.inject(A0, Fault::QueueDrainStuck, FaultMode::Once);
    let (wall, t0) = (Instant::now(), rt.now());
    let rec = app.run(&rt);
    assert!(
        wall.elapsed() < Duration::from_secs(3),
        "stalls cost no wall time"
    );
    assert!(
        rt.now() - t0 >= fast_policy().drain_timeout,
        "the bound elapsed on the simulator's clock"
    );
    Expect::new()
        .drain_abandoned(TargetPattern::Queue(None))
        .ordinary_of("rmw")
        .assert_finished(rt.gpu().recorder());
    declined(&rt, &replay, &app, &rec, Reason::QueueDrainStuck);
}

#[test]
fn agent_drain_stuck_declines() {
    let (rt, replay, app) = setup(3, fast_policy());
    rt.inject(A0, Fault::AgentDrainStuck, FaultMode::Once);
    let rec = app.run(&rt);
    Expect::new()
        .drain(TargetPattern::Queue(None))
        .drain_abandoned(TargetPattern::Agent)
        .ordinary_of("rmw")
        .assert_finished(rt.gpu().recorder());
    declined(&rt, &replay, &app, &rec, Reason::AgentDrainStuck);
}

#[test]
fn copy_fence_stuck_declines() {
    let (rt, replay, app) = setup(3, fast_policy());
    let dst = rt.alloc(A0, 8192, MemoryClass::DEVICE_COARSE).unwrap();
    let copy = rt.copy_async(A0, dst, app.other, 8192).unwrap();
    rt.inject(A0, Fault::CopyFenceStuck, FaultMode::Once);
    let rec = app.run(&rt);
    assert_outcome(&rec, Outcome::Declined, Reason::CopyFenceStuck);
    copy.wait().unwrap();
    assert_eq!(copy.fired(), 1);
    assert_eq!(rt.read(dst, 8192).unwrap(), vec![0x77; 8192]);
    assert_matches_reference(&rt, &copy_then_run_reference());
    assert_eq!(replay.log.outcomes(), vec![rec]);
    finish(&rt);
}

/// The reference of the copy-fence tests: the application copies 8 KiB, then runs once.
fn copy_then_run_reference() -> Vec<replay_core::Digest128> {
    reference(1, |rt| {
        let app = RmwApp::setup(rt);
        let dst = rt.alloc(A0, 8192, MemoryClass::DEVICE_COARSE).unwrap();
        rt.copy_async(A0, dst, app.other, 8192)
            .unwrap()
            .wait()
            .unwrap();
        app.run_plain(rt);
    })
}

#[test]
fn copy_fence_stuck_behind_a_stalled_application_copy() {
    // The copy engine is stalled (another component's batch that will not finish) and the
    // application's asynchronous copy is in flight behind it: the copy fence cannot pass.
    let (rt, replay, app) = setup(3, fast_policy());
    let dst = rt.alloc(A0, 8192, MemoryClass::DEVICE_COARSE).unwrap();
    let mem = rt.memory(A0);
    let scratch = mem.alloc_backing(Tier::PageableHost, 4096).unwrap();
    rt.inject(A0, Fault::CaptureCopyStuck, FaultMode::Once);
    let stall = mem
        .submit_copies(&[CopyOp {
            src: MemLoc::Device { addr: app.other },
            dst: MemLoc::Backing {
                id: scratch,
                offset: 0,
            },
            len: 4096,
        }])
        .unwrap();
    let copy = rt.copy_async(A0, dst, app.other, 8192).unwrap();
    let rec = app.run(&rt);
    assert_outcome(&rec, Outcome::Declined, Reason::CopyFenceStuck);
    assert!(!copy.is_done(), "the application's copy is still stalled");
    Expect::new()
        .drain(TargetPattern::Queue(None))
        .drain(TargetPattern::Agent)
        .drain_abandoned(TargetPattern::CopyFence)
        .ordinary_of("rmw")
        .assert_finished(rt.gpu().recorder());
    // The stall ends; the application's copy completes, once.
    mem.abandon_fence(stall);
    copy.wait().unwrap();
    assert_eq!(copy.fired(), 1);
    rt.wait_idle();
    mem.free_backing(scratch);
    assert_matches_reference(&rt, &copy_then_run_reference());
    assert_eq!(replay.log.outcomes(), vec![rec]);
    finish(&rt);
}

#[test]
fn pass_stuck_truncates_and_the_kernel_is_not_replayed_again() {
    let (rt, replay, app) = setup(4, fast_policy());
    rt.inject(A0, Fault::PassStuck { pass: 1 }, FaultMode::Once);
    let wall = Instant::now();
    let rec = app.run(&rt);
    assert!(wall.elapsed() < Duration::from_secs(3));
    assert_outcome(&rec, Outcome::Truncated, Reason::PassDrainStuck);
    assert_eq!(rec.executed_passes, 2, "{rec}");
    Expect::new()
        .window_drains()
        .pass(0)
        .pass_abandoned(1)
        .signal()
        .assert_finished(rt.gpu().recorder());
    // The stuck pass ran after the window gave up on it, on restored inputs; no restore
    // followed, so memory holds that pass's results: one execution.
    ends_as_one_execution(&rt, &replay, &app, &rec);
    assert_eq!(
        replay.svc.kernel_memo(&app.kernel.key(A0)),
        Some(KernelMemo::NoReplay)
    );

    // The next dispatch of that kernel is declined.
    rt.gpu().recorder().clear();
    let second = app.run(&rt);
    assert_outcome(&second, Outcome::Declined, Reason::PassDrainStuck);
    assert_eq!(second.executed_passes, 1);
    Expect::new()
        .ordinary_of("rmw")
        .assert_finished(rt.gpu().recorder());
    assert_eq!(app.seen().len(), 3);
    assert_eq!(app.counter_value(&rt), 2);
    let reference = reference(1, |rt| {
        let app = RmwApp::setup(rt);
        app.run_plain(rt);
        app.run_plain(rt);
    });
    assert_matches_reference(&rt, &reference);
    finish(&rt);
}

#[test]
fn reentrant_dispatch_is_tool_work_on_the_same_thread_and_forwarded() {
    let rt = runtime(1);
    let app = RmwApp::setup(&rt);
    let tool_records: Arc<Mutex<Vec<OutcomeRecord>>> = Arc::default();
    let sink = Arc::clone(&tool_records);
    let tool_app = app.clone();
    let replay = ToolScript::passes_for("rmw", 3)
        .on(At::PassEnter, move |rt, p| {
            if p.current_pass != 0 {
                return;
            }
            let q = rt.queue(A0, 1);
            let args = tool_app.tool_args();
            let k = &tool_app.tool_kernel;
            let same = rt.dispatch(q, k, &args, replay_tests::grid(1)).unwrap();
            let fwd = rt
                .dispatch_forwarded(q, k, &args, replay_tests::grid(1))
                .unwrap();
            // Wait inside the callback: the hand-over happens while the window's marker is set.
            fwd.wait_submitted().unwrap();
            same.wait().unwrap();
            fwd.wait().unwrap();
            sink.lock().push(same.record().unwrap());
            sink.lock().push(fwd.record().unwrap());
        })
        .install(&rt, fast_policy());
    rt.gpu().recorder().clear();
    let rec = app.run(&rt);
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    assert_eq!(rec.executed_passes, 3);
    assert_eq!(rec.reentrancy, 0);
    let tool = tool_records.lock().clone();
    assert_eq!(tool.len(), 2);
    for r in &tool {
        assert_outcome(r, Outcome::Declined, Reason::ReentrantDispatch);
        assert_eq!((r.executed_passes, r.reentrancy), (1, 1), "{r}");
        assert_eq!(r.kernel, "tool_mark");
        assert_ne!(r.dispatch_id, rec.dispatch_id);
    }
    assert_eq!(app.tool_count(&rt), 2, "each launch ran exactly once");
    Expect::new()
        .window_drains()
        .tool_work()
        .tool_work()
        .passes(3)
        .signal()
        .assert_finished(rt.gpu().recorder());
    let s = replay.svc.summary();
    assert_eq!(s.replayed, 1);
    assert_eq!(s.declined.get("reentrant_dispatch"), Some(&2), "{s:?}");
    ends_as_one_execution(&rt, &replay, &app, &rec);
    assert_eq!(rt.gpu().invariants().stats().tool_work_in_window, 2);
}

#[test]
fn untracked_vmem_declines_unless_the_policy_allows_it() {
    let lookup = |allow: bool| {
        move |name: &str| -> Option<String> {
            match name {
                // The default is now false (mappings are captured): name both ways.
                "KREPLAY_DECLINE_ON_VMEM" => Some((!allow).to_string()),
                "KREPLAY_DRAIN_TIMEOUT" | "KREPLAY_PASS_TIMEOUT" => Some("200ms".into()),
                "KREPLAY_PROGRESS_INTERVAL" => Some("3600s".into()),
                // Written for `all`, which captures every tracked region but the mapping.
                "KREPLAY_SCOPE" => Some("all".into()),
                _ => None,
            }
        }
    };
    let workload = |rt: &SimRuntime| {
        let app = RmwApp::setup(rt);
        let vmem = rt
            .alloc(A0, 64 << 10, MemoryClass::VIRTUAL_MAPPING)
            .unwrap();
        (app, vmem)
    };
    for allow in [false, true] {
        let policy = Policy::from_lookup(lookup(allow)).unwrap();
        assert_eq!(policy.decline_on_vmem, !allow);
        let rt = runtime(1);
        let replay = ToolScript::passes(3).install(&rt, policy);
        let (app, _vmem) = workload(&rt);
        let rec = app.run(&rt);
        assert_eq!(rec.untracked_regions, 1, "{rec}");
        assert_eq!(rec.untracked_bytes, 64 << 10, "{rec}");
        if allow {
            assert_outcome(&rec, Outcome::Replayed, Reason::None);
            assert_eq!(rec.executed_passes, 3);
            assert_eq!(
                rec.captured_bytes,
                (replay_tests::RMW_N * 4 + 8 + 8192) as u64,
                "the mapping is not captured"
            );
        } else {
            assert_outcome(&rec, Outcome::Declined, Reason::UntrackedMemory);
            assert_eq!(rec.executed_passes, 1);
        }
        let reference = reference(1, |rt| workload(rt).0.run_plain(rt));
        assert_matches_reference(&rt, &reference);
        assert_eq!(replay.log.outcomes(), vec![rec]);
        finish(&rt);
    }
}

#[test]
fn over_budget_declines_footprint_budget() {
    let footprint = (replay_tests::RMW_N * 4 + 8 + 8192) as u64;
    for (budget, want) in [(4096, Outcome::Declined), (footprint, Outcome::Replayed)] {
        let policy = Policy {
            max_snapshot_bytes: budget,
            ..fast_policy()
        };
        let (rt, replay, app) = setup(3, policy);
        let rec = app.run(&rt);
        assert_eq!(rec.tracked_bytes, footprint, "{rec}");
        if want == Outcome::Declined {
            assert_outcome(&rec, Outcome::Declined, Reason::FootprintBudget);
            assert_eq!(rec.captured_bytes, 0, "nothing was copied");
            assert_eq!(rt.memory(A0).backing_count(), 0);
            declined(&rt, &replay, &app, &rec, Reason::FootprintBudget);
        } else {
            assert_outcome(&rec, Outcome::Replayed, Reason::None);
            assert_eq!(rec.captured_bytes, footprint);
            ends_as_one_execution(&rt, &replay, &app, &rec);
        }
    }
}

#[test]
fn callback_panics_decline_before_the_first_pass_and_truncate_after() {
    use Outcome::{Declined, Replayed, Truncated};
    let cases = [
        (Point::ConfigEnter, Declined, Reason::CallbackFailed, 1),
        (Point::PassCount, Declined, Reason::CallbackFailed, 1),
        (Point::PassEnter(0), Declined, Reason::CallbackFailed, 1),
        (Point::PassExit(0), Truncated, Reason::CallbackFailed, 1),
        // Memory was restored for pass 1: it still runs once, silently.
        (Point::PassEnter(1), Truncated, Reason::CallbackFailed, 2),
        (Point::Continue(1), Truncated, Reason::CallbackFailed, 2),
        (Point::PassExit(2), Truncated, Reason::CallbackFailed, 3),
        // CONFIG EXIT is the last word: the outcome stands.
        (Point::ConfigExit, Replayed, Reason::None, 3),
    ];
    for (point, outcome, reason, passes) in cases {
        let rt = runtime(1);
        let replay = ToolScript::passes(3)
            .with_continue(Arc::new(|_, _, _, _| 1))
            .panic_at(point)
            .install(&rt, fast_policy());
        let app = RmwApp::setup(&rt);
        let rec = app.run(&rt);
        assert_eq!(
            (rec.outcome, rec.reason, rec.executed_passes),
            (outcome, reason, passes),
            "panic at {point:?}: {rec}"
        );
        if point == Point::ConfigExit {
            // The panic came before the tool logged it.
            assert!(replay.log.outcomes().is_empty());
            assert_eq!(app.seen().len(), 3);
            assert_matches_reference(&rt, &once());
            finish(&rt);
        } else {
            ends_as_one_execution(&rt, &replay, &app, &rec);
        }
    }
}

#[test]
fn open_ended_loop_stops_at_max_passes() {
    let policy = Policy {
        max_passes: 3,
        ..fast_policy()
    };
    let rt = runtime(1);
    let replay = ToolScript::passes(0)
        .with_continue(Arc::new(|_, _, _, _| 1))
        .install(&rt, policy);
    let app = RmwApp::setup(&rt);
    let rec = app.run(&rt);
    assert_outcome(&rec, Outcome::Truncated, Reason::PassLimit);
    assert_eq!((rec.requested_passes, rec.executed_passes), (0, 3));
    ends_as_one_execution(&rt, &replay, &app, &rec);
}

#[test]
fn a_region_freed_during_a_pass_is_skipped_by_the_restore() {
    for mode in [RestoreMode::Full, RestoreMode::Dirty] {
        let policy = Policy {
            restore: mode,
            chunk_bytes: 4096,
            ..fast_policy()
        };
        let (rt, replay, app) = setup(3, policy);
        rt.inject(
            A0,
            Fault::FreeDuringPass {
                base: app.other,
                pass: 0,
            },
            FaultMode::Once,
        );
        let rec = app.run(&rt);
        assert_outcome(&rec, Outcome::Replayed, Reason::None);
        assert_eq!(rec.executed_passes, 3);
        assert_eq!(rec.captured_regions, 3, "{rec}");
        assert!(rt.tracker().lookup(A0, app.other).is_none());
        assert!(
            rt.read(app.other, 1).is_err(),
            "freed, and nothing wrote it back"
        );
        let seen = app.seen();
        assert!(seen.windows(2).all(|w| w[0] == w[1]));
        // The reference frees the same region after the dispatch.
        let reference = reference(1, |rt| {
            let app = RmwApp::setup(rt);
            app.run_plain(rt);
            rt.free(A0, app.other).unwrap();
        });
        assert_matches_reference(&rt, &reference);
        assert_eq!(replay.log.outcomes(), vec![rec]);
        finish(&rt);
    }
}

#[test]
fn a_region_reallocated_between_capture_and_restore_is_never_written() {
    for mode in [RestoreMode::Full, RestoreMode::Dirty] {
        let policy = Policy {
            restore: mode,
            chunk_bytes: 4096,
            ..fast_policy()
        };
        let (rt, replay, app) = setup(3, policy);
        let old = rt.tracker().lookup(A0, app.other).unwrap();
        rt.inject(
            A0,
            Fault::ReallocDuringPass {
                base: app.other,
                pass: 1,
            },
            FaultMode::Once,
        );
        let rec = app.run(&rt);
        assert_outcome(&rec, Outcome::Replayed, Reason::None);
        let new = rt.tracker().lookup(A0, app.other).unwrap();
        assert_eq!((new.base, new.size), (old.base, old.size));
        assert_ne!(new.generation, old.generation, "a new generation");
        assert!(
            rt.read(app.other, 8192).unwrap().iter().all(|&b| b == 0),
            "the new allocation was not overwritten with the old snapshot ({mode:?})"
        );
        let reference = reference(1, |rt| {
            let app = RmwApp::setup(rt);
            app.run_plain(rt);
            rt.free(A0, app.other).unwrap();
            let again = rt.alloc(A0, 8192, MemoryClass::DEVICE_COARSE).unwrap();
            assert_eq!(again, app.other, "first fit reuses the address");
        });
        assert_matches_reference(&rt, &reference);
        assert_eq!(replay.log.outcomes(), vec![rec]);
        finish(&rt);
    }
}

#[test]
fn incomplete_module_enumeration_declines_untracked_memory() {
    let (rt, replay, app) = setup(3, fast_policy());
    rt.load_module(A0, ModuleSpec::new("m").variable("v", 64))
        .unwrap();
    let f = rt.inject(A0, Fault::IncompleteModuleEnumeration, FaultMode::Once);
    let rec = app.run(&rt);
    assert_eq!(rt.fault_hits(f), 1);
    assert_outcome(&rec, Outcome::Declined, Reason::UntrackedMemory);
    let reference = reference(1, |rt| {
        let app = RmwApp::setup(rt);
        rt.load_module(A0, ModuleSpec::new("m").variable("v", 64))
            .unwrap();
        app.run_plain(rt);
    });
    assert_matches_reference(&rt, &reference);
    assert_eq!(replay.log.outcomes(), vec![rec]);
    finish(&rt);
}

#[test]
fn a_failed_scope_check_truncates() {
    let policy = Policy {
        scope: Scope::Arguments,
        ..fast_policy()
    };
    let rt = runtime(1);
    // The next digest batch (the check after pass 0 of `other`, outside the scope) fails.
    let replay = ToolScript::passes(3)
        .on(At::PassEnter, |rt, p| {
            if p.current_pass == 0 {
                rt.inject(A0, Fault::DigestFail, FaultMode::Once);
            }
        })
        .install(&rt, policy);
    let app = RmwApp::setup(&rt);
    let rec = app.run(&rt);
    assert_outcome(&rec, Outcome::Truncated, Reason::ScopeCheckFailed);
    assert_eq!(rec.scope, Scope::Arguments);
    assert_eq!(rec.executed_passes, 1);
    ends_as_one_execution(&rt, &replay, &app, &rec);
}

#[test]
fn a_transient_restore_failure_is_retried() {
    // Once: the batch fails, the region-by-region retry succeeds; no abort.
    let (rt, replay, app) = setup(3, fast_policy());
    let f = rt.inject(A0, Fault::RestoreFail, FaultMode::Once);
    let rec = app.run(&rt);
    assert_eq!(rt.fault_hits(f), 1);
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    ends_as_one_execution(&rt, &replay, &app, &rec);
}

const RESTORE_FAIL_TEST: &str = "a_failed_restore_aborts_naming_the_dispatch_and_region";

#[test]
fn a_failed_restore_aborts_naming_the_dispatch_and_region() {
    if child_scenario().as_deref() == Some("restore_fail") {
        // The child: every restore attempt fails, so the retry fails too.
        let (rt, _replay, app) = setup(3, fast_policy());
        rt.inject(A0, Fault::RestoreFail, FaultMode::Always);
        println!("REGION={:#x}", app.buf);
        let _ = app.launch(&rt);
        println!("NOT ABORTED");
        std::process::exit(3);
    }
    let (stdout, stderr, context) = assert_aborted(&run_child(RESTORE_FAIL_TEST, "restore_fail"));
    let region = stdout
        .split("REGION=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("the child reached the dispatch; {context}"));
    assert!(stderr.contains("FATAL: restore failed"), "{context}");
    assert!(
        stderr.contains("dispatch 1 (kernel \"rmw\""),
        "the message names the dispatch; {context}"
    );
    assert!(
        stderr.contains(&format!("region {region}")),
        "the message names the region; {context}"
    );
}
