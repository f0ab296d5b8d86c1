//! Virtual-memory mappings and stream-ordered allocations (SPEC §7.1 row, §8
//! `decline_on_vmem`; issue 14), end to end on the simulator.
//!
//! A kernel writing into a mapped range replays with memory equal to one execution under each
//! scope and restore mode; a range unmapped (fully, partly) or remapped between capture and
//! restore is never written; a mapping this agent cannot access declines `untracked_memory`;
//! a stream-ordered allocation freed during the window (from a PASS callback or another
//! thread) is never written after its free.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use replay_core::{MemoryClass, Outcome, Policy, Reason, RestoreMode, Scope};
use replay_mock::{HandleKind, KernArgs, Kernel, KernelCtx, KernelError, MapAccess, SimRuntime};
use replay_tests::{
    assert_matches_reference, assert_outcome, fast_policy, finish, grid, reference, runtime, At,
    ToolScript, Watchdog, A0, A1,
};

/// Bytes of one mapped chunk (the simulated allocation granularity).
const CHUNK: u64 = 4096;

/// A kernel that, for every non-zero argument word, rewrites the `CHUNK` bytes there as
/// `b * 3 + 1` (wrapping) and skips memory it cannot reach (unmapped between passes), so a
/// pass after an unmap still completes.
fn chunks_kernel() -> Kernel {
    Kernel::new(
        "chunks",
        |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            for i in 0..4 {
                let at = ctx.word(i);
                if at == 0 {
                    continue;
                }
                let Ok(v) = ctx.read_vec(at, CHUNK as usize) else {
                    continue;
                };
                let out: Vec<u8> = v
                    .iter()
                    .map(|b| b.wrapping_mul(3).wrapping_add(1))
                    .collect();
                ctx.write(at, &out)?;
            }
            Ok(())
        },
    )
}

fn f(b: u8) -> u8 {
    b.wrapping_mul(3).wrapping_add(1)
}

/// Reserves `n` chunks on A0, maps a fresh device handle into each, gives A0 read-write
/// access and fills chunk `i` with byte `0x10 + i`. Returns the reservation's base.
fn mapped(rt: &SimRuntime, n: u64) -> u64 {
    let va = rt.vmem_reserve(A0, n * CHUNK).unwrap();
    for i in 0..n {
        let h = rt.vmem_create(A0, CHUNK, HandleKind::Device).unwrap();
        rt.vmem_map(va + i * CHUNK, h).unwrap();
    }
    rt.vmem_set_access(va, n * CHUNK, A0, MapAccess::ReadWrite)
        .unwrap();
    for i in 0..n {
        rt.fill(va + i * CHUNK, CHUNK as usize, 0x10 + i as u8)
            .unwrap();
    }
    va
}

/// Whether the `CHUNK` bytes at `at` all equal `byte` (a readable failure, not 4096 bytes).
fn filled(rt: &SimRuntime, at: u64, byte: u8) -> bool {
    rt.read(at, CHUNK as usize)
        .is_ok_and(|v| v.iter().all(|&b| b == byte))
}

fn run(rt: &SimRuntime, words: &[u64]) -> replay_core::OutcomeRecord {
    let mut args = KernArgs::new();
    for &w in words {
        args = args.ptr(w);
    }
    let done = rt
        .dispatch(rt.queue(A0, 0), &chunks_kernel(), &args.build(), grid(1))
        .unwrap();
    done.wait().unwrap();
    done.record().unwrap()
}

/// A kernel that rewrites the two chunks from its argument word 0 on as `b * 3 + 1`,
/// through that one pointer.
fn span_kernel() -> Kernel {
    Kernel::new(
        "span",
        |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            let at = ctx.word(0);
            // The simulated device checks each access against one mapping: one per chunk.
            for c in 0..2 {
                let v = ctx.read_vec(at + c * CHUNK, CHUNK as usize)?;
                let out: Vec<u8> = v.iter().map(|&b| f(b)).collect();
                ctx.write(at + c * CHUNK, &out)?;
            }
            Ok(())
        },
    )
}

#[test]
fn a_kernel_writing_into_a_mapped_range_replays_as_one_execution() {
    // One buffer spanning two mapped chunks of a reserved range (an expandable segment), one
    // pointer to its start: under `arguments` the contiguous run of mappings is captured, so
    // nothing is written outside the scope.
    let workload = |rt: &SimRuntime| {
        let va = mapped(rt, 2);
        let done = rt
            .dispatch(
                rt.queue(A0, 0),
                &span_kernel(),
                &KernArgs::new().ptr(va).build(),
                grid(1),
            )
            .unwrap();
        done.wait().unwrap();
        (va, done.record())
    };
    for scope in [Scope::All, Scope::Arguments] {
        for restore in [RestoreMode::Full, RestoreMode::Dirty] {
            let rt = runtime(1);
            ToolScript::passes(3).install(
                &rt,
                Policy {
                    scope,
                    restore,
                    ..fast_policy()
                },
            );
            let (va, rec) = workload(&rt);
            let rec = rec.unwrap();
            assert_outcome(&rec, Outcome::Replayed, Reason::None);
            assert_eq!(rec.executed_passes, 3, "{rec}");
            assert_eq!((rec.scope, rec.untracked_regions), (scope, 0), "{rec}");
            assert_eq!(rec.captured_bytes, 2 * CHUNK, "{rec}");
            assert!(filled(&rt, va, f(0x10)), "{scope:?} {restore:?}");
            assert!(filled(&rt, va + CHUNK, f(0x11)));
            let reference = reference(1, |rt| {
                workload(rt);
            });
            assert_matches_reference(&rt, &reference);
            finish(&rt);
        }
    }
}

#[test]
fn decline_on_vmem_keeps_the_old_behaviour() {
    let rt = runtime(1);
    ToolScript::passes(3).install(
        &rt,
        Policy {
            decline_on_vmem: true,
            ..fast_policy()
        },
    );
    let va = mapped(&rt, 1);
    let rec = run(&rt, &[va]);
    assert_outcome(&rec, Outcome::Declined, Reason::UntrackedMemory);
    assert_eq!(rt.read(va, 1).unwrap(), vec![f(0x10)], "ran once");
    finish(&rt);
}

/// What happens to the second of two mapped chunks after pass 0.
#[derive(Debug, Clone, Copy)]
enum Change {
    /// Both chunks unmapped.
    UnmapAll,
    /// The second chunk unmapped.
    UnmapPart,
    /// The second chunk unmapped and a new handle (filled with 0x77) mapped there.
    Remap,
}

#[test]
fn a_range_unmapped_or_remapped_between_capture_and_restore_is_never_written() {
    for change in [Change::UnmapAll, Change::UnmapPart, Change::Remap] {
        for restore in [RestoreMode::Full, RestoreMode::Dirty] {
            let rt = runtime(1);
            let va = mapped(&rt, 2);
            ToolScript::passes(2)
                .on(At::PassExit, move |rt, p| {
                    if p.current_pass != 0 {
                        return;
                    }
                    match change {
                        Change::UnmapAll => rt.vmem_unmap(va, 2 * CHUNK).unwrap(),
                        Change::UnmapPart => rt.vmem_unmap(va + CHUNK, CHUNK).unwrap(),
                        Change::Remap => {
                            rt.vmem_unmap(va + CHUNK, CHUNK).unwrap();
                            let h = rt.vmem_create(A0, CHUNK, HandleKind::Device).unwrap();
                            rt.vmem_map(va + CHUNK, h).unwrap();
                            rt.vmem_set_access(va + CHUNK, CHUNK, A0, MapAccess::ReadWrite)
                                .unwrap();
                            // From the tool's callback: written at once.
                            rt.fill(va + CHUNK, CHUNK as usize, 0x77).unwrap();
                        }
                    }
                })
                .install(
                    &rt,
                    Policy {
                        restore,
                        ..fast_policy()
                    },
                );
            // A restore into unmapped memory would fail and abort; into the new mapping it
            // would put the old chunk's bytes back.
            let rec = run(&rt, &[va, va + CHUNK]);
            assert_outcome(&rec, Outcome::Replayed, Reason::None);
            assert_eq!(rec.executed_passes, 2, "{rec}");
            match change {
                Change::UnmapAll => assert_eq!(rec.restored_bytes, 0, "{rec}"),
                Change::UnmapPart => {
                    assert_eq!(rt.read(va, 1).unwrap(), vec![f(0x10)], "restored, rerun");
                    assert!(rt.read(va + CHUNK, 1).is_err(), "unmapped");
                    assert!(rec.restored_bytes <= CHUNK, "{rec}");
                }
                Change::Remap => {
                    assert_eq!(rt.read(va, 1).unwrap(), vec![f(0x10)]);
                    // Pass 1 ran on the new mapping's bytes, never on the old snapshot.
                    assert!(filled(&rt, va + CHUNK, f(0x77)), "{restore:?}");
                    assert!(rec.restored_bytes <= CHUNK, "{rec}");
                }
            }
            finish(&rt);
        }
    }
}

#[test]
fn a_mapping_without_access_for_this_agent_declines_untracked_memory() {
    // Four ways: mapped with no access at all; read-write for another agent only; an
    // imported handle; a multicast object.
    for case in 0..4 {
        let rt = runtime(2);
        ToolScript::passes(3).install(&rt, fast_policy());
        let mine = rt.alloc(A0, CHUNK, MemoryClass::DEVICE_COARSE).unwrap();
        let owner = if case == 1 { A1 } else { A0 };
        let kind = match case {
            2 => HandleKind::Imported,
            3 => HandleKind::Multicast,
            _ => HandleKind::Device,
        };
        let va = rt.vmem_reserve(owner, CHUNK).unwrap();
        let h = rt.vmem_create(owner, CHUNK, kind).unwrap();
        rt.vmem_map(va, h).unwrap();
        match case {
            0 => {}
            1 => rt
                .vmem_set_access(va, CHUNK, A1, MapAccess::ReadWrite)
                .unwrap(),
            _ => rt
                .vmem_set_access(va, CHUNK, A0, MapAccess::ReadWrite)
                .unwrap(),
        }
        let rec = run(&rt, &[mine, va + 8]);
        assert_outcome(&rec, Outcome::Declined, Reason::UntrackedMemory);
        assert_eq!(rec.executed_passes, 1, "case {case}: {rec}");
        assert_eq!(rt.read(mine, 1).unwrap(), vec![f(0)], "ran once");
        finish(&rt);
    }
}

#[test]
fn a_mapping_on_two_agents_is_captured_on_the_one_that_runs_the_kernel() {
    let rt = runtime(2);
    ToolScript::passes(3).install(&rt, fast_policy());
    // A1's memory, mapped and accessible to both; the kernel runs on A0.
    let va = rt.vmem_reserve(A1, CHUNK).unwrap();
    let h = rt.vmem_create(A1, CHUNK, HandleKind::Device).unwrap();
    rt.vmem_map(va, h).unwrap();
    rt.vmem_set_access(va, CHUNK, A1, MapAccess::ReadWrite)
        .unwrap();
    rt.vmem_set_access(va, CHUNK, A0, MapAccess::ReadWrite)
        .unwrap();
    rt.fill(va, CHUNK as usize, 5).unwrap();
    let rec = run(&rt, &[va]);
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    assert_eq!(rec.captured_bytes, CHUNK, "{rec}");
    assert!(filled(&rt, va, f(5)));
    finish(&rt);
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

#[test]
fn a_stream_ordered_allocation_freed_in_a_pass_callback_is_never_written_after() {
    for restore in [RestoreMode::Full, RestoreMode::Dirty] {
        let rt = runtime(1);
        // `buf` is what the kernel writes; `spare` is captured by `all` and freed after pass
        // 0, and a new stream-ordered allocation takes its address.
        let buf = rt
            .alloc_async(A0, CHUNK, MemoryClass::DEVICE_COARSE)
            .unwrap();
        let spare = rt
            .alloc_async(A0, CHUNK, MemoryClass::DEVICE_COARSE)
            .unwrap();
        rt.fill(buf, CHUNK as usize, 2).unwrap();
        rt.fill(spare, CHUNK as usize, 0x5A).unwrap();
        ToolScript::passes(3)
            .on(At::PassExit, move |rt, p| {
                if p.current_pass == 0 {
                    rt.free_async(A0, spare).unwrap();
                    let again = rt
                        .alloc_async(A0, CHUNK, MemoryClass::DEVICE_COARSE)
                        .unwrap();
                    assert_eq!(again, spare, "the address is reused");
                    rt.fill(again, CHUNK as usize, 0x33).unwrap();
                }
            })
            .install(
                &rt,
                Policy {
                    scope: Scope::All,
                    restore,
                    ..patient_policy()
                },
            );
        let rec = run(&rt, &[buf]);
        assert_outcome(&rec, Outcome::Replayed, Reason::None);
        assert_eq!(rec.executed_passes, 3);
        assert!(filled(&rt, buf, f(2)));
        assert!(
            filled(&rt, spare, 0x33),
            "{restore:?}: the new allocation was written by a restore: {rec}"
        );
        finish(&rt);
    }
}

#[test]
fn a_stream_ordered_free_on_another_thread_waits_for_the_restore_and_is_never_written_after() {
    let _w = Watchdog::new("async_free_racing_restore", Duration::from_secs(60));
    let rt = runtime(1);
    let buf = rt
        .alloc_async(A0, CHUNK, MemoryClass::DEVICE_COARSE)
        .unwrap();
    let spare = rt
        .alloc_async(A0, CHUNK, MemoryClass::DEVICE_COARSE)
        .unwrap();
    rt.fill(buf, CHUNK as usize, 2).unwrap();
    rt.fill(spare, CHUNK as usize, 0x5A).unwrap();
    // When the first restore starts: on another thread, free `spare` (ordered on a stream)
    // and allocate again at its address (zeros). Pass 1 waits until that thread is done, so
    // the second restore comes after the free.
    let (done_tx, done_rx) = mpsc::channel::<u64>();
    let weak = rt.downgrade();
    let tracker = rt.tracker();
    rt.memory(A0).on_next_restore(move || {
        let rt = weak.upgrade().expect("the runtime is alive");
        let finished = Arc::new(AtomicBool::new(false));
        let fin = Arc::clone(&finished);
        std::thread::spawn(move || {
            rt.free_async(A0, spare).unwrap();
            let again = rt
                .alloc_async(A0, CHUNK, MemoryClass::DEVICE_COARSE)
                .unwrap();
            fin.store(true, Ordering::SeqCst);
            let _ = done_tx.send(again);
        });
        // Bounded in wall time only as a guard: the free waits for this restore.
        for _ in 0..10_000 {
            if finished.load(Ordering::SeqCst) || tracker.waiting_releases() > 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let done_rx = parking_lot::Mutex::new(done_rx);
    let again = Arc::new(parking_lot::Mutex::new(None));
    let seen = Arc::clone(&again);
    ToolScript::passes(3)
        .on(At::PassEnter, move |_, p| {
            if p.current_pass == 1 {
                let a = done_rx
                    .lock()
                    .recv_timeout(Duration::from_secs(30))
                    .expect("the free finished");
                *seen.lock() = Some(a);
            }
        })
        .install(&rt, patient_policy());
    let rec = run(&rt, &[buf]);
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    assert_eq!(rec.executed_passes, 3);
    assert_eq!(*again.lock(), Some(spare), "the address is reused");
    // No restore before pass 0; the first restore wrote both regions, the second only `buf`.
    assert_eq!(
        rec.pass_restored_bytes.as_slice(),
        &[0, 2 * CHUNK, CHUNK],
        "{rec}"
    );
    assert!(
        filled(&rt, spare, 0),
        "the new allocation was written by a restore"
    );
    assert!(filled(&rt, buf, f(2)));
    finish(&rt);
}

#[test]
fn an_unmap_on_another_thread_waits_for_the_restore_and_is_never_written_after() {
    let _w = Watchdog::new("unmap_racing_restore", Duration::from_secs(60));
    let rt = runtime(1);
    let va = mapped(&rt, 2);
    // When the first restore starts: on another thread, unmap the second chunk. Pass 1 waits
    // until that thread is done, so the second restore comes after the unmap.
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let weak = rt.downgrade();
    let tracker = rt.tracker();
    rt.memory(A0).on_next_restore(move || {
        let rt = weak.upgrade().expect("the runtime is alive");
        let finished = Arc::new(AtomicBool::new(false));
        let fin = Arc::clone(&finished);
        std::thread::spawn(move || {
            rt.vmem_unmap(va + CHUNK, CHUNK).unwrap();
            fin.store(true, Ordering::SeqCst);
            let _ = done_tx.send(());
        });
        // Bounded in wall time only as a guard: the unmap waits for this restore.
        for _ in 0..10_000 {
            if finished.load(Ordering::SeqCst) || tracker.waiting_releases() > 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let done_rx = parking_lot::Mutex::new(done_rx);
    ToolScript::passes(3)
        .on(At::PassEnter, move |_, p| {
            if p.current_pass == 1 {
                done_rx
                    .lock()
                    .recv_timeout(Duration::from_secs(30))
                    .expect("the unmap finished");
            }
        })
        .install(&rt, patient_policy());
    // A restore into the unmapped chunk would fail and abort.
    let rec = run(&rt, &[va, va + CHUNK]);
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    assert_eq!(rec.executed_passes, 3);
    assert_eq!(
        rec.pass_restored_bytes.as_slice(),
        &[0, 2 * CHUNK, CHUNK],
        "{rec}"
    );
    assert!(filled(&rt, va, f(0x10)));
    assert!(rt.read(va + CHUNK, 1).is_err(), "unmapped");
    finish(&rt);
}
