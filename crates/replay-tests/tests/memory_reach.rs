//! Memory the snapshot must cover or decline (SPEC §7.1, §7.2; issue 11, items 1, 2, 3 and
//! 7, and the `dirty` fallback), end to end on the simulator through the real window:
//!
//! - capturable memory (fine-grained, managed, pinned host) an argument points into is
//!   captured and restored under every scope, `all` included;
//! - an argument into memory the tracker never saw is asked of the runtime: capturable memory
//!   is captured, coarse device memory declines `untracked_memory` and is counted;
//! - a write through a pointer stored in device memory into fine-grained memory outside the
//!   scope is seen by the scope check;
//! - a free (or an unload) racing a restore waits for it, so the restore never writes the
//!   freed-and-reallocated memory;
//! - a failed digest batch of a `dirty` restore falls back to a full restore.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use replay_core::{MemoryClass, Outcome, Policy, Reason, RestoreMode, Scope};
use replay_mock::{Fault, FaultMode, KernArgs, Kernel, KernelCtx, KernelError, ModuleSpec};
use replay_tests::{
    assert_matches_reference, assert_outcome, fast_policy, finish, grid, reference, rmw_kernel,
    rmw_once, runtime, At, Inputs, RmwApp, ToolScript, Watchdog, A0,
};

const N: usize = 256;

fn initial() -> Vec<u32> {
    (0..N as u32)
        .map(|i| i.wrapping_mul(0x9E37_79B9) ^ 3)
        .collect()
}

fn policy(scope: Scope) -> Policy {
    Policy {
        scope,
        ..fast_policy()
    }
}

/// Allocates `N` u32s of `class` (behind the tracker's back when `untracked`), fills them.
fn buffer(rt: &replay_mock::SimRuntime, class: MemoryClass, untracked: bool) -> u64 {
    let b = if untracked {
        rt.alloc_untracked(A0, (N * 4) as u64, class).unwrap()
    } else {
        rt.alloc(A0, (N * 4) as u64, class).unwrap()
    };
    rt.write_u32s(b, &initial()).unwrap();
    b
}

/// Runs the read-modify-write kernel over `buf` once with 3 passes requested; returns the
/// record, the inputs the kernel saw per execution, and the runtime.
fn rmw_replayed(
    class: MemoryClass,
    untracked: bool,
    scope: Scope,
) -> (
    replay_core::OutcomeRecord,
    Vec<replay_core::Digest128>,
    replay_mock::SimRuntime,
    u64,
) {
    let rt = runtime(1);
    ToolScript::passes(3).install(&rt, policy(scope));
    let b = buffer(&rt, class, untracked);
    let inputs: Inputs = Arc::default();
    let k = rmw_kernel("rmw_reach", Arc::clone(&inputs));
    let args = KernArgs::new().ptr(b + 64).ptr(0).build();
    // The kernel reads and writes from the pointer it is given: 64 bytes into the buffer.
    let done = rt.dispatch(rt.queue(A0, 0), &k, &args, grid(32)).unwrap();
    done.wait().unwrap();
    assert_eq!(done.fired(), 1);
    let rec = done.record().unwrap();
    let seen = inputs.lock().clone();
    (rec, seen, rt, b)
}

fn rmw_reference(class: MemoryClass, untracked: bool) -> Vec<replay_core::Digest128> {
    reference(1, |rt| {
        let b = buffer(rt, class, untracked);
        let k = rmw_kernel("rmw_reach", Arc::default());
        let args = KernArgs::new().ptr(b + 64).ptr(0).build();
        rt.dispatch(rt.queue(A0, 0), &k, &args, grid(32))
            .unwrap()
            .wait()
            .unwrap();
    })
}

fn expected_once() -> Vec<u32> {
    let mut v = initial();
    let once = rmw_once(&v[16..48]);
    v[16..48].copy_from_slice(&once);
    v
}

#[test]
fn scope_all_captures_capturable_memory_an_argument_points_into() {
    // Issue 11 item 1: under `all`, fine-grained, managed and pinned memory an argument
    // reaches was neither captured nor declined, so the kernel's read-modify-write applied
    // once per pass.
    for class in [
        MemoryClass::FINE_GRAINED,
        MemoryClass::MANAGED,
        MemoryClass::PINNED_HOST,
    ] {
        let (rec, seen, rt, b) = rmw_replayed(class, false, Scope::All);
        assert_outcome(&rec, Outcome::Replayed, Reason::None);
        assert_eq!(rec.executed_passes, 3, "{rec}");
        assert_eq!(seen.len(), 3);
        assert!(
            seen.windows(2).all(|w| w[0] == w[1]),
            "{class:?}: every pass saw the same input"
        );
        assert_eq!(rec.captured_bytes, (N * 4) as u64, "{class:?}: {rec}");
        assert_eq!(rt.read_u32s(b, N).unwrap(), expected_once(), "{class:?}");
        assert_matches_reference(&rt, &rmw_reference(class, false));
        finish(&rt);
    }
}

#[test]
fn an_argument_into_device_memory_the_tracker_never_saw_declines_untracked_memory() {
    // Issue 11 item 2: such a word was skipped in silence (replayed, applied N times, not
    // counted). The runtime describes it as coarse device memory: the library would not hear
    // of its free, so it declines, under every scope, and counts it.
    for scope in [Scope::All, Scope::Arguments] {
        let (rec, seen, rt, b) = rmw_replayed(MemoryClass::DEVICE_COARSE, true, scope);
        assert_outcome(&rec, Outcome::Declined, Reason::UntrackedMemory);
        assert_eq!(rec.untracked_regions, 1, "{scope:?}: {rec}");
        assert_eq!(rec.untracked_bytes, (N * 4) as u64, "{scope:?}: {rec}");
        assert_eq!(seen.len(), 1, "ran once");
        assert_eq!(rt.read_u32s(b, N).unwrap(), expected_once());
        finish(&rt);
    }
}

#[test]
fn an_argument_into_capturable_memory_the_tracker_never_saw_is_captured() {
    // Issue 11 item 2: fine-grained, managed or pinned memory the runtime describes is
    // captured like tracked memory of those classes, under every scope.
    for scope in [Scope::All, Scope::Arguments] {
        for class in [
            MemoryClass::FINE_GRAINED,
            MemoryClass::MANAGED,
            MemoryClass::PINNED_HOST,
        ] {
            let (rec, seen, rt, b) = rmw_replayed(class, true, scope);
            assert_outcome(&rec, Outcome::Replayed, Reason::None);
            assert_eq!(
                rec.captured_bytes,
                (N * 4) as u64,
                "{scope:?} {class:?}: {rec}"
            );
            assert!(seen.windows(2).all(|w| w[0] == w[1]), "{scope:?} {class:?}");
            assert_eq!(rt.read_u32s(b, N).unwrap(), expected_once());
            assert_matches_reference(&rt, &rmw_reference(class, true));
            finish(&rt);
        }
    }
}

#[test]
fn a_word_the_runtime_does_not_know_is_not_a_pointer() {
    // `Ok(None)` from the runtime: a scalar that looks like nothing; the dispatch replays.
    let rt = runtime(1);
    ToolScript::passes(2).install(&rt, policy(Scope::Arguments));
    let b = buffer(&rt, MemoryClass::DEVICE_COARSE, false);
    let k = rmw_kernel("rmw_reach", Arc::default());
    let args = KernArgs::new()
        .ptr(b)
        .ptr(0)
        .u64(0x0123_4567_89ab_cdef)
        .build();
    let done = rt.dispatch(rt.queue(A0, 0), &k, &args, grid(8)).unwrap();
    done.wait().unwrap();
    let rec = done.record().unwrap();
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    assert_eq!(rec.untracked_regions, 0, "{rec}");
    finish(&rt);
}

/// A kernel that bumps the `u64` whose address is stored at the start of the buffer at
/// argument word 0 (a pointer stored in device memory), and writes word 1 of that buffer.
fn stored_pointer_kernel() -> Kernel {
    Kernel::new(
        "stored_ptr",
        |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            let table = ctx.word(0);
            let target = ctx.read_u64(table)?;
            let v = ctx.read_u64(target)?;
            ctx.write_u64(target, v + 1)?;
            let w = ctx.read_u64(table + 8)?;
            ctx.write_u64(table + 8, w * 2 + 1)?;
            Ok(())
        },
    )
}

#[test]
fn a_stored_pointer_write_into_fine_grained_memory_outside_the_scope_truncates() {
    // Issue 11 item 3: under `arguments`, the scope check watched only coarse regions, so a
    // write through a stored pointer into fine-grained memory applied once per pass while the
    // record said `replayed`. Now those regions are watched too. Host-resident memory
    // (managed, pinned) is not watched: the host writes it during windows (replay-memory's
    // crate docs, "Scope check").
    {
        let class = MemoryClass::FINE_GRAINED;
        let setup = |rt: &replay_mock::SimRuntime| {
            let table = rt.alloc(A0, 64, MemoryClass::DEVICE_COARSE).unwrap();
            let counter = rt.alloc(A0, 8, class).unwrap();
            rt.write(table, &counter.to_le_bytes()).unwrap();
            rt.write(counter, &41u64.to_le_bytes()).unwrap();
            (table, counter)
        };
        let rt = runtime(1);
        ToolScript::passes(3).install(&rt, policy(Scope::Arguments));
        let (table, counter) = setup(&rt);
        let k = stored_pointer_kernel();
        let args = KernArgs::new().ptr(table).build();
        let done = rt.dispatch(rt.queue(A0, 0), &k, &args, grid(1)).unwrap();
        done.wait().unwrap();
        let rec = done.record().unwrap();
        assert_outcome(&rec, Outcome::Truncated, Reason::WriteOutsideScope);
        assert_eq!(rec.executed_passes, 1, "{rec}");
        assert_eq!(
            rt.read(counter, 8).unwrap(),
            42u64.to_le_bytes(),
            "{class:?}"
        );
        let reference = reference(1, |rt| {
            let (table, _) = setup(rt);
            rt.dispatch(
                rt.queue(A0, 0),
                &stored_pointer_kernel(),
                &KernArgs::new().ptr(table).build(),
                grid(1),
            )
            .unwrap()
            .wait()
            .unwrap();
        });
        assert_matches_reference(&rt, &reference);
        finish(&rt);
    }
}

/// Long bounds on virtual time: a restore held up by a test's hook does not time out.
fn patient_policy() -> Policy {
    Policy {
        drain_timeout: Duration::from_secs(3600),
        pass_timeout: Duration::from_secs(3600),
        poll_slice: Duration::from_secs(1),
        ..fast_policy()
    }
}

/// On the copy engine, when the restore batch starts: on another thread, `release` then
/// `reuse` the memory; return once that thread finished or is waiting for the restore.
fn race_on_restore(
    rt: &replay_mock::SimRuntime,
    release: impl FnOnce(&replay_mock::SimRuntime) + Send + 'static,
    reuse: impl FnOnce(&replay_mock::SimRuntime) + Send + 'static,
) -> mpsc::Receiver<()> {
    let (done_tx, done_rx) = mpsc::channel();
    let weak = rt.downgrade();
    let tracker = rt.tracker();
    rt.memory(A0).on_next_restore(move || {
        let rt = weak.upgrade().expect("the runtime is alive");
        let finished = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&finished);
        std::thread::spawn(move || {
            release(&rt);
            reuse(&rt);
            f.store(true, Ordering::SeqCst);
            let _ = done_tx.send(());
        });
        // Bounded in wall time only as a guard; either condition arrives within
        // milliseconds.
        for _ in 0..10_000 {
            if finished.load(Ordering::SeqCst) || tracker.waiting_releases() > 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    done_rx
}

#[test]
fn a_free_racing_a_restore_waits_and_the_reallocated_memory_is_never_written() {
    // Issue 11 item 7: the restore's liveness check and its copy were not atomic with a free
    // on another thread. Here the free (and a new allocation at the same address, filled by
    // its new owner) runs while the restore is in flight: the free must wait for the restore,
    // so the restore writes the old allocation and never the new one.
    let _w = Watchdog::new("free_racing_restore", Duration::from_secs(60));
    let rt = runtime(1);
    ToolScript::passes(2).install(&rt, patient_policy());
    let app = RmwApp::setup(&rt);
    // `other` is captured by `all` and restored in full; the kernel never touches it.
    let other = app.other;
    let reused = Arc::new(parking_lot::Mutex::new(None));
    let r = Arc::clone(&reused);
    let done = race_on_restore(
        &rt,
        move |rt| rt.free(A0, other).unwrap(),
        move |rt| {
            let again = rt.alloc(A0, 8192, MemoryClass::DEVICE_COARSE).unwrap();
            rt.fill(again, 8192, 0xC3).unwrap();
            *r.lock() = Some(again);
        },
    );
    let rec = app.run(&rt);
    done.recv_timeout(Duration::from_secs(30))
        .expect("the free finished after the restore");
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    let again = reused.lock().expect("reallocated");
    assert_eq!(again, other, "first fit reuses the address");
    let written = rt
        .read(again, 8192)
        .unwrap()
        .iter()
        .filter(|&&b| b != 0xC3)
        .count();
    assert_eq!(
        written, 0,
        "the restore wrote {written} bytes of memory freed and reallocated under it"
    );
    finish(&rt);
}

#[test]
fn an_unload_racing_a_restore_waits_and_the_reused_memory_is_never_written() {
    // Issue 11 item 7, for code objects: an unload of a captured module variable waits for the
    // restore in flight; the memory its variable held, reused after the unload, is never
    // written by the restore.
    let _w = Watchdog::new("unload_racing_restore", Duration::from_secs(60));
    let rt = runtime(1);
    ToolScript::passes(2).install(&rt, patient_policy());
    let app = RmwApp::setup(&rt);
    let module = rt
        .load_module(
            A0,
            ModuleSpec::new("globals").variable_init("table", &[0x11; 4096]),
        )
        .unwrap();
    let var = module.variable("table").unwrap();
    let reused = Arc::new(parking_lot::Mutex::new(None));
    let r = Arc::clone(&reused);
    let done = race_on_restore(
        &rt,
        move |rt| rt.unload_module(&module).unwrap(),
        move |rt| {
            let again = rt.alloc(A0, 4096, MemoryClass::DEVICE_COARSE).unwrap();
            rt.fill(again, 4096, 0x5E).unwrap();
            *r.lock() = Some(again);
        },
    );
    let rec = app.run(&rt);
    done.recv_timeout(Duration::from_secs(30))
        .expect("the unload finished after the restore");
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    let again = reused.lock().expect("reallocated");
    assert_eq!(again, var, "first fit reuses the variable's address");
    let written = rt
        .read(again, 4096)
        .unwrap()
        .iter()
        .filter(|&&b| b != 0x5E)
        .count();
    assert_eq!(
        written, 0,
        "the restore wrote {written} bytes of memory unloaded and reused under it"
    );
    finish(&rt);
}

#[test]
fn a_failed_dirty_digest_batch_falls_back_to_a_full_restore() {
    // Issue 11: a `dirty` restore whose digest batch failed aborted the process, though the
    // memory was intact and a full restore would do.
    let rt = runtime(1);
    ToolScript::passes(3)
        .on(At::PassExit, |rt, p| {
            if p.current_pass == 0 {
                rt.inject(A0, Fault::DigestFail, FaultMode::Once);
            }
        })
        .install(
            &rt,
            Policy {
                restore: RestoreMode::Dirty,
                ..fast_policy()
            },
        );
    let app = RmwApp::setup(&rt);
    let rec = app.run(&rt);
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    let seen = app.seen();
    assert_eq!(seen.len(), 3);
    assert!(
        seen.windows(2).all(|w| w[0] == w[1]),
        "every pass saw the same input"
    );
    // Pass 1's restore was full (every captured byte), pass 2's dirty again.
    assert_eq!(rec.pass_restored_bytes.len(), 3, "{rec}");
    assert_eq!(rec.pass_restored_bytes[1], rec.captured_bytes, "{rec}");
    assert!(rec.pass_restored_bytes[2] < rec.captured_bytes, "{rec}");
    let reference = reference(1, |rt| RmwApp::setup(rt).run_plain(rt));
    assert_matches_reference(&rt, &reference);
    finish(&rt);
}
