//! The outside check policy (SPEC §7.2, §11; `KREPLAY_OUTSIDE_CHECK`), end to end on the
//! simulator through the real window: a kernel that writes through a pointer stored in device
//! memory, outside its snapshot scope, on every pass or only from the second pass on.
//!
//! - `every` (the default) sees a write outside after any pass and truncates there;
//! - `first` sees one in the first pass, and by its documented trade misses one that only later
//!   passes make;
//! - `never` reads nothing outside: the write repeats once per pass;
//!
//! and every record names a policy other than `every` (a malformed value is covered with every
//! other variable in replay-core's policy tests).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use replay_core::Outcome;
use replay_core::{MemoryClass, OutcomeRecord, OutsideCheck, Policy, Reason, Scope};
use replay_mock::{KernArgs, Kernel, KernelCtx, KernelError, SimRuntime};
use replay_tests::{assert_outcome, fast_policy, finish, grid, runtime, ToolScript, A0};

const START: u64 = 41;

/// Bumps the `u64` whose address is stored at the start of the buffer at argument word 0 (the
/// write the scope cannot see) from execution `from` on, counting executions in `runs`, and
/// doubles word 1 of that buffer (the write it can).
fn stored_pointer_kernel(from: u32, runs: Arc<AtomicU32>) -> Kernel {
    Kernel::new(
        "stored_ptr_late",
        move |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            let n = runs.fetch_add(1, Ordering::SeqCst);
            let table = ctx.word(0);
            if n >= from {
                let target = ctx.read_u64(table)?;
                let v = ctx.read_u64(target)?;
                ctx.write_u64(target, v + 1)?;
            }
            let w = ctx.read_u64(table + 8)?;
            ctx.write_u64(table + 8, w * 2 + 1)?;
            Ok(())
        },
    )
}

/// The runtime after one dispatch of [`stored_pointer_kernel`] with 3 passes under `check`:
/// the record, how many times the kernel ran, the counter and word 1 of the table.
fn run(check: OutsideCheck, from: u32) -> (OutcomeRecord, u32, u64, u64, SimRuntime) {
    let rt = runtime(1);
    let policy = Policy {
        scope: Scope::Arguments,
        outside_check: check,
        ..fast_policy()
    };
    ToolScript::passes(3).install(&rt, policy);
    let table = rt.alloc(A0, 64, MemoryClass::DEVICE_COARSE).unwrap();
    let counter = rt.alloc(A0, 8, MemoryClass::FINE_GRAINED).unwrap();
    rt.write(table, &counter.to_le_bytes()).unwrap();
    rt.write(table + 8, &5u64.to_le_bytes()).unwrap();
    rt.write(counter, &START.to_le_bytes()).unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let k = stored_pointer_kernel(from, Arc::clone(&runs));
    let args = KernArgs::new().ptr(table).build();
    let done = rt.dispatch(rt.queue(A0, 0), &k, &args, grid(1)).unwrap();
    done.wait().unwrap();
    let rec = done.record().unwrap();
    let word = |a: u64| u64::from_le_bytes(rt.read(a, 8).unwrap().try_into().unwrap());
    let (c, w) = (word(counter), word(table + 8));
    (rec, runs.load(Ordering::SeqCst), c, w, rt)
}

#[test]
fn every_truncates_on_a_write_outside_in_any_pass() {
    let (rec, runs, counter, word, rt) = run(OutsideCheck::Every, 0);
    assert_outcome(&rec, Outcome::Truncated, Reason::WriteOutsideScope);
    assert_eq!((rec.executed_passes, runs), (1, 1), "{rec}");
    assert_eq!((counter, word), (START + 1, 11), "{rec}");
    assert_eq!(rec.outside_check, OutsideCheck::Every);
    assert!(!rec.to_string().contains("outside_check"), "{rec}");
    finish(&rt);

    // A write only the second pass makes is seen after that pass: memory is the second
    // execution's, on the same inputs as the first.
    let (rec, runs, counter, word, rt) = run(OutsideCheck::Every, 1);
    assert_outcome(&rec, Outcome::Truncated, Reason::WriteOutsideScope);
    assert_eq!((rec.executed_passes, runs), (2, 2), "{rec}");
    assert_eq!((counter, word), (START + 1, 11), "{rec}");
    finish(&rt);
}

#[test]
fn first_sees_a_first_pass_write_and_misses_only_later_ones() {
    let (rec, runs, counter, word, rt) = run(OutsideCheck::First, 0);
    assert_outcome(&rec, Outcome::Truncated, Reason::WriteOutsideScope);
    assert_eq!((rec.executed_passes, runs), (1, 1), "{rec}");
    assert_eq!((counter, word), (START + 1, 11), "{rec}");
    assert_eq!(rec.outside_check, OutsideCheck::First);
    assert!(rec.to_string().contains("outside_check=first"), "{rec}");
    finish(&rt);

    // The trade `first` documents: writes outside that only later passes make go unseen and
    // repeat, while the memory inside the scope is still restored.
    let (rec, runs, counter, word, rt) = run(OutsideCheck::First, 1);
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    assert_eq!((rec.executed_passes, runs), (3, 3), "{rec}");
    assert_eq!((counter, word), (START + 2, 11), "{rec}");
    finish(&rt);
}

#[test]
fn never_reads_nothing_outside_and_the_write_repeats() {
    let (rec, runs, counter, word, rt) = run(OutsideCheck::Never, 0);
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    assert_eq!((rec.executed_passes, runs), (3, 3), "{rec}");
    assert_eq!((counter, word), (START + 3, 11), "{rec}");
    assert_eq!(rec.outside_check, OutsideCheck::Never);
    assert!(rec.to_string().contains("outside_check=never"), "{rec}");
    finish(&rt);
}
