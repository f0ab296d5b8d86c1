//! Scope `arguments` and restore `dirty` (SPEC §7.2, §7.4; issue 4), end to end on the
//! simulator.
//!
//! The property: for random region layouts, argument words (pointers anywhere inside regions,
//! junk words, words into alignment padding, hidden arguments) and kernel writes (read-modify-
//! writes through argument pointers, and a write through a pointer stored in device memory at a
//! random pass, which may land outside the argument scope), `arguments` + `dirty` ends with the
//! same memory and the same per-pass input digests as `all` + `full`, or it truncates with
//! `write_outside_scope` exactly when the stored-pointer write left the scope, and still ends
//! equal to one execution (a reference run). `dirty` restores at most the touched chunks, and
//! reports the bytes it compared. A kernel that wrote outside its scope is replayed with scope
//! `all` next time.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use proptest::sample::Index;
use replay_core::{
    Digest128, KernelMemo, MemoryClass, Outcome, OutcomeRecord, Policy, Reason, RestoreMode, Scope,
};
use replay_mock::{KernArgs, Kernel, KernelCtx, KernelError, SimRuntime};
use replay_tests::{
    assert_outcome, digests, fast_policy, finish, grid, input_key, runtime, Inputs, Replay,
    ToolScript, A0,
};

const CHUNK: u64 = 4096;

/// One argument word.
#[derive(Debug, Clone, Copy)]
enum Arg {
    /// A pointer `offset` bytes into region `region` (anywhere, not only its base).
    Ptr { region: usize, offset: u64 },
    /// A scalar that points nowhere.
    Junk(u64),
    /// The first byte after region `region`'s end, inside its alignment padding when it has
    /// some (no allocation contains it); a scalar otherwise.
    Gap(usize),
}

/// A read-modify-write of `len` `u32`s at `offset` of the region that argument `arg` (a
/// pointer) points into, addressed through that pointer.
#[derive(Debug, Clone, Copy)]
struct Write {
    arg: usize,
    offset: u64,
    len: u64,
}

/// A read-modify-write of the `u64` at `offset` of region `region`, through a pointer the
/// kernel loads from device memory, in the execution with index `pass` only.
#[derive(Debug, Clone, Copy)]
struct Escape {
    region: usize,
    offset: u64,
    pass: u32,
}

#[derive(Debug, Clone)]
struct Case {
    sizes: Vec<u64>,
    args: Vec<Arg>,
    writes: Vec<Write>,
    escape: Option<Escape>,
    passes: u32,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=5)
        .prop_flat_map(|n| {
            let sizes = prop::collection::vec((1u64..=3, 0u64..512), n).prop_map(|v| {
                v.into_iter()
                    .map(|(chunks, cut)| chunks * CHUNK - cut * 8)
                    .collect::<Vec<_>>()
            });
            // Kinds 0-3: a pointer; 4: junk; 5: a word into alignment padding.
            let arg = (0u8..6, 0..n, any::<Index>(), 0u64..1 << 32);
            let args = prop::collection::vec(arg, 1..=6);
            let writes = prop::collection::vec((any::<Index>(), any::<Index>(), 1u64..=16), 0..=6);
            let escape = prop::option::of((0..n, any::<Index>(), 0u32..5));
            (sizes, args, writes, escape, 2u32..=4)
        })
        .prop_map(|(sizes, args, writes, escape, passes)| {
            let mut args: Vec<Arg> = args
                .into_iter()
                .map(|(kind, region, at, v)| match kind {
                    0..=3 => Arg::Ptr {
                        region,
                        offset: at.index(sizes[region] as usize) as u64,
                    },
                    4 => Arg::Junk(v),
                    _ => Arg::Gap(region),
                })
                .collect();
            if !args.iter().any(|a| matches!(a, Arg::Ptr { .. })) {
                args.insert(
                    0,
                    Arg::Ptr {
                        region: 0,
                        offset: 0,
                    },
                );
            }
            let ptrs: Vec<usize> = args
                .iter()
                .enumerate()
                .filter(|(_, a)| matches!(a, Arg::Ptr { .. }))
                .map(|(i, _)| i)
                .collect();
            let writes = writes
                .into_iter()
                .map(|(arg, at, len)| {
                    let arg = ptrs[arg.index(ptrs.len())];
                    let Arg::Ptr { region, .. } = args[arg] else {
                        unreachable!()
                    };
                    let words = sizes[region] / 4;
                    let first = at.index(words as usize) as u64;
                    Write {
                        arg,
                        offset: first * 4,
                        len: len.min(words - first),
                    }
                })
                .collect();
            let escape = escape.map(|(region, at, pass)| Escape {
                region,
                offset: at.index((sizes[region] / 8) as usize) as u64 * 8,
                pass,
            });
            Case {
                sizes,
                args,
                writes,
                escape,
                passes,
            }
        })
}

impl Case {
    fn region_of(&self, arg: usize) -> Option<usize> {
        match self.args[arg] {
            Arg::Ptr { region, .. } => Some(region),
            _ => None,
        }
    }

    /// Regions an argument points into.
    fn in_scope(&self) -> BTreeSet<usize> {
        (0..self.args.len())
            .filter_map(|i| self.region_of(i))
            .collect()
    }

    /// Whether the stored-pointer write lands outside the argument scope in some pass.
    fn escapes(&self) -> Option<u32> {
        let e = self.escape?;
        (e.pass < self.passes && !self.in_scope().contains(&e.region)).then_some(e.pass)
    }

    /// Chunks one pass may change (an upper bound for `dirty`): the writes' chunks and the
    /// stored-pointer write's, per region.
    fn touched_chunks(&self) -> usize {
        let mut c = BTreeSet::new();
        for w in &self.writes {
            let r = self.region_of(w.arg).expect("writes go through pointers");
            for k in w.offset / CHUNK..=(w.offset + w.len * 4 - 1) / CHUNK {
                c.insert((r, k));
            }
        }
        if let Some(e) = self.escape {
            c.insert((e.region, e.offset / CHUNK));
        }
        c.len()
    }
}

/// Memory of one run of a case.
struct Memory {
    regions: Vec<(u64, u64)>,
    /// 8 bytes holding the stored pointer (pointed to by the last argument word).
    slot: u64,
}

fn fill(i: usize, size: u64) -> Vec<u8> {
    (0..size)
        .map(|j| {
            (j as u8)
                .wrapping_mul(31)
                .wrapping_add((i as u8).wrapping_mul(77))
                ^ (j >> 8) as u8
        })
        .collect()
}

fn setup(rt: &SimRuntime, c: &Case) -> Memory {
    let regions: Vec<(u64, u64)> = c
        .sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let b = rt.alloc(A0, size, MemoryClass::DEVICE_COARSE).unwrap();
            rt.write(b, &fill(i, size)).unwrap();
            (b, size)
        })
        .collect();
    let slot = rt.alloc(A0, 8, MemoryClass::DEVICE_COARSE).unwrap();
    let target = c.escape.map_or(0, |e| regions[e.region].0 + e.offset);
    rt.write(slot, &target.to_le_bytes()).unwrap();
    Memory { regions, slot }
}

fn args(c: &Case, m: &Memory) -> Vec<u8> {
    let mut k = KernArgs::new();
    for a in &c.args {
        k = k.u64(match *a {
            Arg::Ptr { region, offset } => m.regions[region].0 + offset,
            Arg::Junk(v) => v,
            Arg::Gap(region) => {
                let (b, s) = m.regions[region];
                if s % 4096 == 0 {
                    0x7777
                } else {
                    b + s
                }
            }
        });
    }
    // Hidden arguments: grid sizes, a null pointer, then the stored-pointer slot.
    k.u32(1).u32(1).u32(1).u32(64).u64(0).ptr(m.slot).build()
}

/// The kernel of a case; `exec` counts its executions (the stored-pointer write happens in
/// execution `escape.pass` only).
fn kernel(c: &Case, m: &Memory, exec: Arc<AtomicU32>, inputs: Inputs) -> Kernel {
    let (c, regions, slot) = (c.clone(), m.regions.clone(), m.slot);
    let ptr_offsets: Vec<u64> = c
        .args
        .iter()
        .map(|a| match a {
            Arg::Ptr { offset, .. } => *offset,
            _ => 0,
        })
        .collect();
    Kernel::new(
        "scoped",
        move |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            let e = exec.fetch_add(1, Ordering::SeqCst);
            let mut seen = Vec::new();
            for &(b, s) in &regions {
                seen.extend(ctx.read_vec(b, s as usize)?);
            }
            seen.extend(ctx.read_vec(slot, 8)?);
            inputs
                .lock()
                .push(replay_core::digest::digest(input_key(), &seen));
            for w in &c.writes {
                let at = ctx.word(w.arg) - ptr_offsets[w.arg] + w.offset;
                let v = ctx.read_u32s(at, w.len as usize)?;
                let out: Vec<u32> = v
                    .iter()
                    .enumerate()
                    .map(|(i, x)| x.wrapping_mul(3).wrapping_add(1 + i as u32))
                    .collect();
                ctx.write_u32s(at, &out)?;
            }
            if let Some(esc) = c.escape {
                if e == esc.pass {
                    let slot_word = ctx.word(ctx.args().len() / 8 - 1);
                    let target = ctx.read_u64(slot_word)?;
                    let w = ctx.read_u64(target)?;
                    ctx.write_u64(target, w.wrapping_mul(7).wrapping_add(2))?;
                }
            }
            Ok(())
        },
    )
}

struct Run {
    rt: SimRuntime,
    replay: Replay,
    rec: OutcomeRecord,
    inputs: Vec<Digest128>,
    kernel: Kernel,
    args: Vec<u8>,
}

fn run(c: &Case, scope: Scope, restore: RestoreMode) -> Run {
    let rt = runtime(1);
    let replay = ToolScript::passes(u64::from(c.passes)).install(
        &rt,
        Policy {
            scope,
            restore,
            chunk_bytes: CHUNK,
            ..fast_policy()
        },
    );
    let m = setup(&rt, c);
    let inputs: Inputs = Arc::default();
    let kernel = kernel(c, &m, Arc::default(), Arc::clone(&inputs));
    let args = args(c, &m);
    let done = rt
        .dispatch(rt.queue(A0, 0), &kernel, &args, grid(1))
        .unwrap();
    done.wait().unwrap();
    assert_eq!(done.fired(), 1);
    let rec = done.record().unwrap();
    let inputs = inputs.lock().clone();
    rt.wait_idle();
    Run {
        rt,
        replay,
        rec,
        inputs,
        kernel,
        args,
    }
}

/// Memory after executing the case's kernel once per entry of `execs` (the execution index
/// each run behaves as), on a runtime without replay.
fn reference(c: &Case, execs: &[u32]) -> Vec<Digest128> {
    replay_tests::reference(1, |rt| {
        let m = setup(rt, c);
        let exec = Arc::new(AtomicU32::new(0));
        let k = kernel(c, &m, Arc::clone(&exec), Arc::default());
        let a = args(c, &m);
        for &e in execs {
            exec.store(e, Ordering::SeqCst);
            rt.dispatch(rt.queue(A0, 0), &k, &a, grid(1))
                .unwrap()
                .wait()
                .unwrap();
        }
    })
}

fn check_case(c: &Case) -> Result<(), TestCaseError> {
    let all = run(c, Scope::All, RestoreMode::Full);
    let args = run(c, Scope::Arguments, RestoreMode::Dirty);
    let (a, b) = (&args.rec, &all.rec);
    let n = c.passes;

    // `all` + `full`: every pass, every captured byte restored, memory as one execution.
    prop_assert_eq!(
        (b.outcome, b.executed_passes),
        (Outcome::Replayed, n),
        "{}",
        b
    );
    prop_assert_eq!(b.scope, Scope::All);
    prop_assert_eq!(b.compared_bytes, 0);
    prop_assert_eq!(
        b.restored_bytes,
        b.captured_bytes * u64::from(n - 1),
        "{}",
        b
    );
    prop_assert!(
        all.inputs.windows(2).all(|w| w[0] == w[1]),
        "identical inputs per pass"
    );
    prop_assert_eq!(&digests(&all.rt), &reference(c, &[n - 1]));

    // `arguments` + `dirty`.
    prop_assert_eq!(a.scope, Scope::Arguments);
    let scoped: u64 = c.in_scope().iter().map(|&r| c.sizes[r]).sum::<u64>() + 8;
    prop_assert_eq!(a.captured_bytes, scoped, "{}", a);
    prop_assert!(
        args.inputs.windows(2).all(|w| w[0] == w[1]),
        "identical inputs per pass"
    );
    prop_assert_eq!(&args.inputs[..], &all.inputs[..args.inputs.len()]);
    let restores = a.pass_restored_bytes.len() as u64 - 1;
    prop_assert_eq!(restores, u64::from(a.executed_passes - 1), "{}", a);
    prop_assert_eq!(a.compared_bytes, a.captured_bytes * restores, "{}", a);
    let bound = c.touched_chunks() as u64 * CHUNK;
    for &r in &a.pass_restored_bytes[1..] {
        prop_assert!(
            r <= bound,
            "restored {} > {} touched chunks: {}",
            r,
            bound / CHUNK,
            a
        );
    }
    prop_assert!(a.restored_bytes <= bound * restores);
    match c.escapes() {
        None => {
            prop_assert_eq!(
                (a.outcome, a.reason),
                (Outcome::Replayed, Reason::None),
                "{}",
                a
            );
            prop_assert_eq!(a.executed_passes, n);
            prop_assert_eq!(&args.inputs, &all.inputs);
            prop_assert_eq!(
                digests(&args.rt),
                digests(&all.rt),
                "same memory as all+full"
            );
        }
        Some(p) => {
            prop_assert_eq!(
                (a.outcome, a.reason),
                (Outcome::Truncated, Reason::WriteOutsideScope),
                "{}",
                a
            );
            prop_assert_eq!(a.executed_passes, p + 1, "{}", a);
            // The last pass ran on restored inputs: one execution (of pass p's behaviour).
            prop_assert_eq!(&digests(&args.rt), &reference(c, &[p]));
            // Remembered: the next dispatch of the kernel uses scope `all`.
            let svc = &args.replay.svc;
            prop_assert_eq!(
                svc.kernel_memo(&args.kernel.key(A0)),
                Some(KernelMemo::ForceScopeAll)
            );
            let again = args
                .rt
                .dispatch(args.rt.queue(A0, 0), &args.kernel, &args.args, grid(1))
                .unwrap();
            again.wait().unwrap();
            let r = again.record().unwrap();
            prop_assert_eq!(
                (r.outcome, r.scope),
                (Outcome::Replayed, Scope::All),
                "{}",
                r
            );
            prop_assert_eq!(&digests(&args.rt), &reference(c, &[p, p + 1]));
        }
    }
    finish(&args.rt);
    finish(&all.rt);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn arguments_and_dirty_end_like_all_and_full_or_truncate_safely(c in case()) {
        check_case(&c)?;
    }
}

// ----- explicit cases -----

fn scoped_case(escape_pass: Option<u32>) -> Case {
    Case {
        sizes: vec![4 * CHUNK, 2 * CHUNK, CHUNK],
        // Region 1 is reached only through the stored pointer.
        args: vec![
            Arg::Ptr {
                region: 0,
                offset: 3 * CHUNK + 17,
            },
            Arg::Junk(42),
            Arg::Ptr {
                region: 2,
                offset: 100,
            },
        ],
        writes: vec![
            Write {
                arg: 0,
                offset: 8,
                len: 4,
            },
            Write {
                arg: 0,
                offset: 2 * CHUNK + 64,
                len: 16,
            },
            Write {
                arg: 2,
                offset: 0,
                len: 1,
            },
        ],
        escape: escape_pass.map(|pass| Escape {
            region: 1,
            offset: CHUNK + 8,
            pass,
        }),
        passes: 4,
    }
}

#[test]
fn a_write_outside_the_scope_at_a_later_pass_truncates_there() {
    let c = scoped_case(Some(2));
    assert_eq!(c.escapes(), Some(2));
    check_case(&c).unwrap();
    let r = run(&c, Scope::Arguments, RestoreMode::Dirty);
    assert_outcome(&r.rec, Outcome::Truncated, Reason::WriteOutsideScope);
    assert_eq!(r.rec.executed_passes, 3);
    // Captured: regions 0 and 2 and the slot; region 1 is watched, not captured.
    assert_eq!(r.rec.captured_bytes, 5 * CHUNK + 8);
    assert_eq!(r.rec.captured_regions, 3);
    assert_eq!(r.rec.tracked_bytes, 7 * CHUNK + 8);
    finish(&r.rt);
}

#[test]
fn dirty_restores_only_the_touched_chunks_and_reports_compared_bytes() {
    let c = scoped_case(None);
    for (scope, restore) in [
        (Scope::Arguments, RestoreMode::Dirty),
        (Scope::All, RestoreMode::Dirty),
        (Scope::All, RestoreMode::Full),
    ] {
        let r = run(&c, scope, restore);
        let rec = &r.rec;
        assert_outcome(rec, Outcome::Replayed, Reason::None);
        let captured = if scope == Scope::All {
            7 * CHUNK + 8
        } else {
            5 * CHUNK + 8
        };
        assert_eq!(rec.captured_bytes, captured, "{rec}");
        match rec.restore {
            RestoreMode::Dirty | RestoreMode::Auto => {
                // Chunk 0 and chunk 2 of region 0, chunk 0 of region 2.
                assert_eq!(
                    &rec.pass_restored_bytes[..],
                    &[0, 3 * CHUNK, 3 * CHUNK, 3 * CHUNK]
                );
                assert_eq!(rec.restored_bytes, 9 * CHUNK);
                assert_eq!(rec.compared_bytes, 3 * captured, "{rec}");
            }
            RestoreMode::Full => {
                assert_eq!(rec.restored_bytes, 3 * captured);
                assert_eq!(rec.compared_bytes, 0);
            }
        }
        assert!(r.inputs.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(digests(&r.rt), reference(&c, &[3]));
        assert_eq!(r.replay.log.outcomes(), vec![rec.clone()]);
        finish(&r.rt);
    }
}

#[test]
fn admission_estimates_use_the_planned_scope() {
    let c = scoped_case(None);
    // Enough for the argument scope (5 chunks and the slot), not for everything (7 chunks).
    for (scope, outcome) in [
        (Scope::Arguments, Outcome::Replayed),
        (Scope::All, Outcome::Declined),
    ] {
        let rt = runtime(1);
        let replay = ToolScript::passes(3).install(
            &rt,
            Policy {
                scope,
                max_snapshot_bytes: 6 * CHUNK,
                ..fast_policy()
            },
        );
        let m = setup(&rt, &c);
        let k = kernel(&c, &m, Arc::default(), Arc::default());
        let done = rt
            .dispatch(rt.queue(A0, 0), &k, &args(&c, &m), grid(1))
            .unwrap();
        done.wait().unwrap();
        let rec = done.record().unwrap();
        assert_eq!(rec.outcome, outcome, "{rec}");
        if outcome == Outcome::Declined {
            assert_eq!(rec.reason, Reason::FootprintBudget);
        }
        // No stored-pointer write: every execution behaves alike.
        assert_eq!(digests(&rt), reference(&c, &[0]));
        drop(replay);
        finish(&rt);
    }
}

#[test]
fn an_argument_into_capturable_untracked_memory_adds_it_to_the_scope() {
    // Fine-grained memory is not tracked by `all`, but an argument pointing into it puts it
    // in the `arguments` scope: captured and restored.
    for class in [
        MemoryClass::FINE_GRAINED,
        MemoryClass::MANAGED,
        MemoryClass::PINNED_HOST,
    ] {
        let workload = |rt: &SimRuntime| {
            let b = rt.alloc(A0, 4096, class).unwrap();
            rt.fill(b, 4096, 5).unwrap();
            b
        };
        let rt = runtime(1);
        ToolScript::passes(3).install(
            &rt,
            Policy {
                scope: Scope::Arguments,
                restore: RestoreMode::Dirty,
                chunk_bytes: CHUNK,
                ..fast_policy()
            },
        );
        let b = workload(&rt);
        let inputs: Inputs = Arc::default();
        let k = replay_tests::rmw_kernel("fine", Arc::clone(&inputs));
        let args = KernArgs::new().ptr(b + 512).ptr(0).build();
        // Through a pointer into the middle; the kernel reads from there.
        let done = rt.dispatch(rt.queue(A0, 0), &k, &args, grid(64)).unwrap();
        done.wait().unwrap();
        let rec = done.record().unwrap();
        assert_outcome(&rec, Outcome::Replayed, Reason::None);
        assert_eq!(
            (rec.captured_bytes, rec.captured_regions),
            (4096, 1),
            "{class:?}: {rec}"
        );
        assert_eq!(rec.untracked_regions, 0, "{rec}");
        let seen = inputs.lock().clone();
        assert!(seen.windows(2).all(|w| w[0] == w[1]));
        let reference = replay_tests::reference(1, |rt| {
            let b = workload(rt);
            rt.dispatch(
                rt.queue(A0, 0),
                &k,
                &KernArgs::new().ptr(b + 512).ptr(0).build(),
                grid(64),
            )
            .unwrap()
            .wait()
            .unwrap();
        });
        replay_tests::assert_matches_reference(&rt, &reference);
        finish(&rt);
    }
}

#[test]
fn an_argument_into_peer_or_vmem_memory_declines_untracked_memory() {
    for peer in [true, false] {
        let rt = runtime(2);
        ToolScript::passes(3).install(
            &rt,
            Policy {
                scope: Scope::Arguments,
                // Only the argument can decline here, not the mapping's mere existence.
                decline_on_vmem: false,
                ..fast_policy()
            },
        );
        let mine = rt.alloc(A0, 4096, MemoryClass::DEVICE_COARSE).unwrap();
        let target = if peer {
            let theirs = rt
                .alloc(replay_tests::A1, 4096, MemoryClass::DEVICE_COARSE)
                .unwrap();
            rt.map_peer(A0, theirs).unwrap();
            theirs
        } else {
            rt.alloc(A0, 4096, MemoryClass::VIRTUAL_MAPPING).unwrap()
        };
        let k = replay_tests::mark_kernel("touch");
        let args = KernArgs::new().ptr(mine).ptr(target + 8).build();
        let done = rt.dispatch(rt.queue(A0, 0), &k, &args, grid(1)).unwrap();
        done.wait().unwrap();
        let rec = done.record().unwrap();
        assert_outcome(&rec, Outcome::Declined, Reason::UntrackedMemory);
        assert_eq!(rt.read(mine, 8).unwrap(), 1u64.to_le_bytes(), "ran once");
        finish(&rt);
    }
}
