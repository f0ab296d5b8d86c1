//! Scope `predicted` (SPEC §7.2, issue 18), end to end on the simulator: a pooled allocation,
//! a kernel that read-modify-writes sub-ranges around its argument pointer while that pointer
//! moves inside the pool between dispatches, sometimes with a write elsewhere in the pool.
//!
//! Properties: memory always equals a plain run's (one execution per dispatch); a write
//! outside the prediction always truncates `write_outside_scope` with misses counted, and
//! nothing else does; a kernel of a fixed shape stops missing after its first dispatch and
//! then captures at most twice what it writes plus chunk rounding. Deterministic tests: a miss
//! grows the prediction, unloading the code object forgets it, the per-kernel bound holds,
//! `predict=spill` keeps `arguments` while the pool fits the device tier, and `auto` picks
//! `predicted` on the simulator.

use std::sync::Arc;

use parking_lot::Mutex;
use proptest::prelude::*;
use replay_core::{
    KernelKey, MemoryClass, Outcome, OutcomeRecord, PredictFallback, PredictSource, PredictWhen,
    Reason, RestoreMode, Scope,
};
use replay_memory::engine::{FIRST_WINDOW_CHUNKS, MAX_RANGES};
use replay_mock::{KernArgs, Kernel, KernelCtx, KernelError, ModuleSpec, SimRuntime};
use replay_tests::{
    assert_matches_reference, assert_outcome, fast_policy, finish, grid, runtime, ToolScript, A0,
};

const CHUNK: u64 = 4096;
/// 512 chunks: large enough to predict (128 chunks and more).
const POOL: u64 = 512 * CHUNK;
/// A small allocation beside the pool, captured whole.
const SMALL: u64 = 2 * CHUNK;

/// Read-modify-writes of `len` bytes at `rel` from the argument pointer.
type Shape = Vec<(i64, u64)>;

/// The memory of one run: the pool, and a small allocation.
#[derive(Debug, Clone, Copy)]
struct Mem {
    pool: u64,
    small: u64,
}

fn fill(size: u64, salt: u8) -> Vec<u8> {
    (0..size)
        .map(|j| (j as u8).wrapping_mul(29).wrapping_add(salt) ^ (j >> 9) as u8)
        .collect()
}

fn setup(rt: &SimRuntime) -> Mem {
    let pool = rt.alloc(A0, POOL, MemoryClass::DEVICE_COARSE).unwrap();
    rt.write(pool, &fill(POOL, 3)).unwrap();
    let small = rt.alloc(A0, SMALL, MemoryClass::DEVICE_COARSE).unwrap();
    rt.write(small, &fill(SMALL, 9)).unwrap();
    Mem { pool, small }
}

/// The kernel: word 0 points into the pool, word 1 at the small allocation; it rewrites the
/// ranges the shared shape names, relative to word 0, and the small allocation's first word.
fn kernel(shape: Arc<Mutex<Shape>>) -> Kernel {
    Kernel::new(
        "pooled",
        move |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            let p = ctx.word(0);
            for &(rel, len) in shape.lock().iter() {
                let at = p.wrapping_add(rel as u64);
                let v = ctx.read_u32s(at, (len / 4) as usize)?;
                let out: Vec<u32> = v
                    .iter()
                    .enumerate()
                    .map(|(i, x)| x.wrapping_mul(3).wrapping_add(1 + i as u32))
                    .collect();
                ctx.write_u32s(at, &out)?;
            }
            let s = ctx.word(1);
            let w = ctx.read_u64(s)?;
            ctx.write_u64(s, w.wrapping_mul(5).wrapping_add(1))?;
            Ok(())
        },
    )
}

fn args(m: Mem, at: u64) -> Vec<u8> {
    KernArgs::new().ptr(m.pool + at).ptr(m.small).u64(7).build()
}

fn policy(restore: RestoreMode) -> replay_core::Policy {
    replay_core::Policy {
        scope: Scope::Predicted,
        restore,
        chunk_bytes: CHUNK,
        predict: PredictWhen::Always,
        ..fast_policy()
    }
}

/// One dispatch: where the pointer lands in the pool, and what the kernel writes.
#[derive(Debug, Clone)]
struct Step {
    at: u64,
    shape: Shape,
}

/// Runs `steps` under scope `predicted` (3 passes each); the records, and the runtime.
fn run(steps: &[Step], restore: RestoreMode) -> (SimRuntime, Vec<OutcomeRecord>, KernelKey) {
    run_with(steps, policy(restore))
}

/// [`run`] under `policy`.
fn run_with(
    steps: &[Step],
    policy: replay_core::Policy,
) -> (SimRuntime, Vec<OutcomeRecord>, KernelKey) {
    let rt = runtime(1);
    let _replay = ToolScript::passes(3).install(&rt, policy);
    let m = setup(&rt);
    let shape: Arc<Mutex<Shape>> = Arc::default();
    let k = kernel(Arc::clone(&shape));
    let mut recs = Vec::new();
    for s in steps {
        *shape.lock() = s.shape.clone();
        let done = rt
            .dispatch(rt.queue(A0, 0), &k, &args(m, s.at), grid(1))
            .unwrap();
        done.wait().unwrap();
        assert_eq!(done.fired(), 1, "one completion per dispatch");
        recs.push(done.record().unwrap());
    }
    (rt, recs, k.key(A0))
}

/// The same dispatches, once each, without replay.
fn reference(steps: &[Step]) -> Vec<replay_core::Digest128> {
    replay_tests::reference(1, |rt| {
        let m = setup(rt);
        let shape: Arc<Mutex<Shape>> = Arc::default();
        let k = kernel(Arc::clone(&shape));
        for s in steps {
            *shape.lock() = s.shape.clone();
            let done = rt
                .dispatch(rt.queue(A0, 0), &k, &args(m, s.at), grid(1))
                .unwrap();
            done.wait().unwrap();
        }
    })
}

/// Bytes of the union of the shape's ranges.
fn written(shape: &Shape) -> u64 {
    let mut r: Vec<(i64, i64)> = shape.iter().map(|&(s, l)| (s, s + l as i64)).collect();
    r.sort_unstable();
    let mut total = 0;
    let mut end = i64::MIN;
    for (s, e) in r {
        let s = s.max(end);
        if e > s {
            total += (e - s) as u64;
        }
        end = end.max(e);
    }
    total
}

/// Ranges around the pointer: some below it, some past the first rule's window.
fn shape() -> impl Strategy<Value = Shape> {
    prop::collection::vec((-12i64..80, 1u64..=4), 1..=4).prop_map(|v| {
        v.into_iter()
            .map(|(rel, words)| (rel * 4096 + (rel.rem_euclid(3) * 1000), words * 1024))
            .collect()
    })
}

/// Pointer positions that keep every range of `shape()` inside the pool.
fn position() -> impl Strategy<Value = u64> {
    (16u64..=(512 - 90))
        .prop_flat_map(|c| (Just(c), 0u64..1024).prop_map(|(c, b)| c * CHUNK + b * 4))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random shapes, moving pointers, and now and then a write elsewhere in the pool: memory
    /// equals one execution per dispatch; exactly the dispatches with misses truncate.
    #[test]
    fn memory_equals_one_execution_and_misses_truncate(
        base in shape(),
        steps in prop::collection::vec((position(), prop::option::weighted(0.3, (0u64..POOL / 4 - 4, 1u64..=2))), 2..=5),
        dirty in any::<bool>(),
    ) {
        let steps: Vec<Step> = steps
            .into_iter()
            .map(|(at, escape)| {
                let mut shape = base.clone();
                if let Some((word, len)) = escape {
                    let abs = (word * 4).min(POOL - len * 1024);
                    shape.push((abs as i64 - at as i64, len * 1024));
                }
                Step { at, shape }
            })
            .collect();
        let restore = if dirty { RestoreMode::Dirty } else { RestoreMode::Full };
        let (rt, recs, _) = run(&steps, restore);
        // Dispatches with a miss so far: from `MAX_MISSES` on the kernel falls back to a region
        // scope (by design), replayed in full.
        let mut missed = 0;
        for (i, r) in recs.iter().enumerate() {
            if missed >= replay_memory::engine::MAX_MISSES {
                prop_assert!(matches!(r.scope, Scope::Arguments | Scope::All), "{}", r);
                prop_assert_eq!(r.predict_fallback, PredictFallback::RepeatedMisses, "{}", r);
                prop_assert_eq!((r.outcome, r.reason), (Outcome::Replayed, Reason::None), "{}", r);
                continue;
            }
            prop_assert_eq!(r.scope, Scope::Predicted, "{}", r);
            let source = if i == 0 { PredictSource::FirstRule } else { PredictSource::Learned };
            prop_assert_eq!(r.predict_source, source, "{}", r);
            if r.prediction_misses > 0 {
                missed += 1;
                prop_assert_eq!((r.outcome, r.reason), (Outcome::Truncated, Reason::WriteOutsideScope), "{}", r);
                prop_assert_eq!(r.executed_passes, 1, "the miss shows after the first pass: {}", r);
            } else {
                prop_assert_eq!((r.outcome, r.reason), (Outcome::Replayed, Reason::None), "{}", r);
            }
        }
        assert_matches_reference(&rt, &reference(&steps));
        finish(&rt);
    }

    /// A fixed shape: after the first dispatch no miss, and from the third on the prediction
    /// costs at most twice the written bytes plus chunk rounding.
    #[test]
    fn predictions_converge(
        shape in shape(),
        at in prop::collection::vec(position(), 5),
    ) {
        let steps: Vec<Step> = at.into_iter().map(|at| Step { at, shape: shape.clone() }).collect();
        let (rt, recs, _) = run(&steps, RestoreMode::Dirty);
        for r in &recs[1..] {
            prop_assert_eq!((r.outcome, r.prediction_misses), (Outcome::Replayed, 0), "{}", r);
        }
        let w = written(&shape);
        // Each range: its partial end chunks, and one chunk more where alignments differ.
        let rounding = 4 * CHUNK * shape.len() as u64;
        for r in &recs[2..] {
            prop_assert!(
                r.predicted_bytes <= 2 * w + rounding,
                "predicted {} bytes for {} written: {}", r.predicted_bytes, w, r
            );
            prop_assert!(r.captured_bytes <= r.predicted_bytes + SMALL, "{}", r);
        }
        assert_matches_reference(&rt, &reference(&steps));
        finish(&rt);
    }
}

#[test]
fn a_miss_truncates_and_grows_the_prediction() {
    let near: Shape = vec![(0, 4096)];
    // Far past the first rule's window.
    let far_rel = ((FIRST_WINDOW_CHUNKS + 20) * CHUNK) as i64;
    let far: Shape = vec![(0, 4096), (far_rel, 4096)];
    let steps = [
        Step {
            at: 10 * CHUNK,
            shape: near.clone(),
        },
        Step {
            at: 40 * CHUNK + 64,
            shape: far.clone(),
        },
        Step {
            at: 200 * CHUNK + 128,
            shape: far.clone(),
        },
    ];
    let (rt, recs, _) = run(&steps, RestoreMode::Dirty);
    assert_outcome(&recs[0], Outcome::Replayed, Reason::None);
    assert_eq!(recs[0].predict_source, PredictSource::FirstRule);
    assert_outcome(&recs[1], Outcome::Truncated, Reason::WriteOutsideScope);
    // The far write is one chunk long, 64 bytes off the grid: two chunks missed.
    assert_eq!(recs[1].prediction_misses, 2, "{}", recs[1]);
    assert_eq!(recs[1].executed_passes, 1);
    // The prediction grew by the missed chunk: the same shape elsewhere replays in full.
    assert_outcome(&recs[2], Outcome::Replayed, Reason::None);
    assert_eq!(recs[2].executed_passes, 3);
    assert!(
        recs[2].predicted_bytes <= 6 * CHUNK,
        "two one-chunk writes, off the grid: {}",
        recs[2]
    );
    // A predicted miss does not force scope `all` on the kernel.
    assert_eq!(recs[2].scope, Scope::Predicted);
    let s = rt.service().unwrap().summary();
    assert_eq!((s.predicted, s.prediction_misses), (3, 1), "{s}");
    assert_matches_reference(&rt, &reference(&steps));
    finish(&rt);
}

#[test]
fn unloading_the_code_object_forgets_its_predictions() {
    let rt = runtime(1);
    let _replay = ToolScript::passes(2).install(&rt, policy(RestoreMode::Dirty));
    let m = setup(&rt);
    let module = rt
        .load_module(
            A0,
            ModuleSpec::new("pool_module").kernel("pool_kernel", |ctx| {
                let p = ctx.word(0);
                let v = ctx.read_u64(p)?;
                ctx.write_u64(p, v + 1)?;
                Ok(())
            }),
        )
        .unwrap();
    let k = module.kernel("pool_kernel").unwrap();
    let key = k.key(A0);
    let done = rt
        .dispatch(rt.queue(A0, 0), &k, &args(m, 3 * CHUNK), grid(1))
        .unwrap();
    done.wait().unwrap();
    let rec = done.record().unwrap();
    assert_eq!(rec.scope, Scope::Predicted, "{rec}");
    let engine = rt.engine(A0);
    assert_eq!(engine.prediction_ranges(&key), Some(1));
    assert_eq!(engine.predicted_kernels(), 1);
    rt.unload_module(&module).unwrap();
    assert_eq!(engine.prediction_ranges(&key), None);
    assert_eq!(engine.predicted_kernels(), 0);
    finish(&rt);
}

#[test]
fn a_kernel_prediction_keeps_at_most_max_ranges() {
    // Forty one-word writes, each in its own chunk, spread over the pool.
    let shape: Shape = (0..40).map(|i| (i * 5 * CHUNK as i64, 4)).collect();
    let steps = [
        Step {
            at: 4 * CHUNK,
            shape: shape.clone(),
        },
        Step {
            at: 6 * CHUNK + 8,
            shape: shape.clone(),
        },
    ];
    let (rt, recs, key) = run(&steps, RestoreMode::Dirty);
    let engine = rt.engine(A0);
    assert_eq!(engine.predicted_kernels(), 1);
    let n = engine.prediction_ranges(&key).unwrap();
    assert!((1..=MAX_RANGES).contains(&n), "{n} ranges");
    // Merged ranges cover the gaps between writes, so the second dispatch does not miss.
    assert_outcome(&recs[1], Outcome::Replayed, Reason::None);
    assert_matches_reference(&rt, &reference(&steps));
    finish(&rt);
}

#[test]
fn spill_keeps_arguments_while_the_pool_fits_the_device_tier() {
    for (device_tier, want, fallback) in [
        (8 << 20, Scope::Arguments, PredictFallback::FitsDevice),
        (POOL / 2, Scope::Predicted, PredictFallback::None),
    ] {
        let rt = runtime(1);
        let replay = ToolScript::passes(2).install(
            &rt,
            replay_core::Policy {
                predict: PredictWhen::Spill,
                device_tier_bytes: device_tier,
                ..policy(RestoreMode::Dirty)
            },
        );
        let m = setup(&rt);
        let k = kernel(Arc::new(Mutex::new(vec![(0, 4096)])));
        let done = rt
            .dispatch(rt.queue(A0, 0), &k, &args(m, 5 * CHUNK), grid(1))
            .unwrap();
        done.wait().unwrap();
        let rec = done.record().unwrap();
        assert_outcome(&rec, Outcome::Replayed, Reason::None);
        assert_eq!((rec.scope, rec.predict_fallback), (want, fallback), "{rec}");
        if want == Scope::Predicted {
            // The first rule's window: the device tier's budget beside the small region.
            assert!(rec.captured_bytes <= POOL / 2, "{rec}");
        } else {
            assert!(rec.captured_bytes >= POOL, "{rec}");
        }
        let s = replay.svc.summary();
        assert_eq!(
            s.predict_fallback.get(fallback.as_str()).copied(),
            (fallback != PredictFallback::None).then_some(1),
            "{s}"
        );
        finish(&rt);
    }
}

#[test]
fn auto_resolves_to_predicted_on_the_simulator() {
    let rt = runtime(1);
    let _replay = ToolScript::passes(2).install(
        &rt,
        replay_core::Policy {
            scope: Scope::Auto,
            restore: RestoreMode::Auto,
            chunk_bytes: CHUNK,
            device_tier_bytes: 64 << 10,
            ..fast_policy()
        },
    );
    let m = setup(&rt);
    let k = kernel(Arc::new(Mutex::new(vec![(0, 4096)])));
    let done = rt
        .dispatch(rt.queue(A0, 0), &k, &args(m, 5 * CHUNK), grid(1))
        .unwrap();
    done.wait().unwrap();
    let rec = done.record().unwrap();
    assert_outcome(&rec, Outcome::Replayed, Reason::None);
    assert_eq!(
        (rec.scope, rec.scope_auto),
        (Scope::Predicted, true),
        "{rec}"
    );
    assert!(
        rec.predicted_bytes > 0 && rec.predicted_bytes < POOL / 4,
        "{rec}"
    );
    assert!(
        rec.to_string().contains(" predict_source=first_rule "),
        "{rec}"
    );
    finish(&rt);
}

#[test]
fn a_first_dispatch_writing_far_past_its_pointer_replays_while_the_device_tier_holds_it() {
    // From the pool's base, far more than FIRST_WINDOW_CHUNKS chunks: the first rule's
    // window is the device tier's budget, so with room for the pool there the first
    // dispatch already replays; with a device tier of 100 chunks it misses once, and the
    // second dispatch, learned, replays.
    let big: Shape = vec![(0, 300 * CHUNK)];
    let steps = [
        Step {
            at: 0,
            shape: big.clone(),
        },
        Step { at: 0, shape: big },
    ];
    let roomy = replay_core::Policy {
        device_tier_bytes: 2 * POOL,
        ..policy(RestoreMode::Dirty)
    };
    let (rt, recs, _) = run_with(&steps, roomy);
    assert_outcome(&recs[0], Outcome::Replayed, Reason::None);
    assert_eq!(recs[0].predict_source, PredictSource::FirstRule);
    assert_outcome(&recs[1], Outcome::Replayed, Reason::None);
    assert!(
        recs[1].predicted_bytes <= 302 * CHUNK,
        "learned what was written: {}",
        recs[1]
    );
    assert_matches_reference(&rt, &reference(&steps));
    finish(&rt);

    let small_tier = replay_core::Policy {
        device_tier_bytes: 100 * CHUNK,
        ..policy(RestoreMode::Dirty)
    };
    let (rt, recs, _) = run_with(&steps, small_tier);
    assert_outcome(&recs[0], Outcome::Truncated, Reason::WriteOutsideScope);
    assert_outcome(&recs[1], Outcome::Replayed, Reason::None);
    assert_matches_reference(&rt, &reference(&steps));
    finish(&rt);
}
