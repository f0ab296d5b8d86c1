//! Module-scope variables (SPEC §7.1): found by enumerating the loaded code objects at snapshot
//! time, captured (a large one through the tiers like any region, split where a tier's budget
//! runs out), restored between passes; read-only constants are skipped. A kernel that
//! increments a module variable, replayed N times, ends with one increment. The library's
//! memory of a misbehaving kernel is per code object and forgotten when it is unloaded
//! (SPEC §7.2).

use std::sync::{Arc, OnceLock};

use replay_core::{KernelMemo, MemoryClass, Outcome, Policy, Reason, RestoreMode, Scope};
use replay_mock::{
    Fault, FaultMode, KernArgs, KernelCtx, KernelError, Module, ModuleSpec, SimRuntime,
};
use replay_tests::{
    assert_matches_reference, assert_outcome, fast_policy, finish, grid, input_key, reference,
    runtime, Inputs, ToolScript, A0,
};

/// The large variable: over 16 MiB.
const BIG: u64 = (16 << 20) + 4096;
/// Offsets of the words the kernel rewrites in the large variable: 3 chunks of 64 KiB.
const BIG_WORDS: [u64; 3] = [0, BIG / 2, BIG - 8];
const CHUNK: u64 = 64 << 10;

/// Addresses of the module's variables, known once the code object is loaded (as a real
/// kernel's relocations are).
#[derive(Debug, Default)]
struct Symbols {
    hits: OnceLock<u64>,
    big: OnceLock<u64>,
    table: OnceLock<u64>,
}

fn table() -> Vec<u8> {
    (0..4096u32).map(|i| (i * 7 + 3) as u8).collect()
}

/// A code object with a counter, a large variable and a constant table, and a kernel `bump`
/// that increments the counter and rewrites three words of the large variable from their old
/// value and the table.
fn module(symbols: Arc<Symbols>, inputs: Inputs) -> ModuleSpec {
    ModuleSpec::new("app")
        .variable("hits", 8)
        .variable("big", BIG)
        .constant("table", &table())
        .kernel(
            "bump",
            move |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
                let hits = *symbols.hits.get().expect("loaded");
                let big = *symbols.big.get().expect("loaded");
                let table = *symbols.table.get().expect("loaded");
                let t = ctx.read_u64(table)?;
                let mut seen = ctx.read_vec(hits, 8)?;
                let mut words = Vec::new();
                for off in BIG_WORDS {
                    let v = ctx.read_u64(big + off)?;
                    seen.extend_from_slice(&v.to_le_bytes());
                    words.push(v);
                }
                inputs
                    .lock()
                    .push(replay_core::digest::digest(input_key(), &seen));
                for (off, v) in BIG_WORDS.iter().zip(words) {
                    ctx.write_u64(big + off, v.wrapping_mul(3).wrapping_add(t).wrapping_add(1))?;
                }
                ctx.atomic_add_u64(hits, 1)?;
                Ok(())
            },
        )
}

struct App {
    module: Module,
    buf: u64,
    inputs: Inputs,
}

/// Loads the module, fills the large variable and allocates one tracked buffer.
fn setup(rt: &SimRuntime) -> App {
    let buf = rt.alloc(A0, 4096, MemoryClass::DEVICE_COARSE).unwrap();
    rt.fill(buf, 4096, 0x11).unwrap();
    let symbols = Arc::new(Symbols::default());
    let inputs: Inputs = Arc::default();
    let module = rt
        .load_module(A0, module(Arc::clone(&symbols), Arc::clone(&inputs)))
        .unwrap();
    for (name, slot) in [
        ("hits", &symbols.hits),
        ("big", &symbols.big),
        ("table", &symbols.table),
    ] {
        slot.set(module.variable(name).unwrap()).unwrap();
    }
    let big = module.variable("big").unwrap();
    for (i, off) in BIG_WORDS.iter().enumerate() {
        rt.write(big + off, &(0x1234_5678 + i as u64).to_le_bytes())
            .unwrap();
    }
    App {
        module,
        buf,
        inputs,
    }
}

fn bump(rt: &SimRuntime, app: &App) -> Option<replay_core::OutcomeRecord> {
    let k = app.module.kernel("bump").unwrap();
    // The argument block points at the tracked buffer only: module variables are found by
    // enumeration, not through arguments.
    let args = KernArgs::new().ptr(app.buf).build();
    let c = rt.dispatch(rt.queue(A0, 0), &k, &args, grid(1)).unwrap();
    c.wait().unwrap();
    assert_eq!(c.fired(), 1);
    c.record()
}

fn read_u64(rt: &SimRuntime, at: u64) -> u64 {
    u64::from_le_bytes(rt.read(at, 8).unwrap().try_into().unwrap())
}

#[test]
fn module_variables_are_captured_and_restored_and_constants_skipped() {
    for (scope, restore) in [
        (Scope::All, RestoreMode::Full),
        (Scope::All, RestoreMode::Dirty),
        (Scope::Arguments, RestoreMode::Dirty),
    ] {
        let policy = Policy {
            scope,
            restore,
            chunk_bytes: CHUNK,
            // The large variable splits across all three tiers.
            device_tier_bytes: 8 << 20,
            pinned_tier_bytes: 4 << 20,
            ..fast_policy()
        };
        let rt = runtime(1);
        let replay = ToolScript::passes(3).install(&rt, policy);
        let app = setup(&rt);
        let hits = app.module.variable("hits").unwrap();
        let big = app.module.variable("big").unwrap();
        let table_at = app.module.variable("table").unwrap();
        let rec = bump(&rt, &app).expect("a record");
        let case = format!("{scope:?}/{restore:?}: {rec}");
        assert_outcome(&rec, Outcome::Replayed, Reason::None);
        assert_eq!(rec.executed_passes, 3, "{case}");

        // Replayed three times, incremented once; the large variable holds one execution.
        assert_eq!(read_u64(&rt, hits), 1, "{case}");
        let t = u64::from_le_bytes(table()[..8].try_into().unwrap());
        for (i, off) in BIG_WORDS.iter().enumerate() {
            let v0 = 0x1234_5678 + i as u64;
            assert_eq!(
                read_u64(&rt, big + off),
                v0.wrapping_mul(3).wrapping_add(t).wrapping_add(1),
                "{case}"
            );
        }
        let seen = app.inputs.lock().clone();
        assert_eq!(seen.len(), 3);
        assert!(seen.windows(2).all(|w| w[0] == w[1]), "{case}");
        assert_eq!(rt.read(table_at, 4096).unwrap(), table(), "{case}");

        // Captured: the buffer (the argument points into it), the counter and the large
        // variable, never the constant.
        assert_eq!(rec.captured_bytes, 4096 + 8 + BIG, "{case}");
        assert_eq!(rec.captured_regions, 3, "{case}");
        assert_eq!(
            (rec.tier_bytes.device, rec.tier_bytes.pinned),
            (8 << 20, 4 << 20),
            "{case}"
        );
        assert_eq!(rec.tier_bytes.total(), rec.captured_bytes, "{case}");
        match rec.restore {
            RestoreMode::Full => {
                assert_eq!(rec.compared_bytes, 0);
                assert_eq!(rec.restored_bytes, 2 * rec.captured_bytes, "{case}");
            }
            RestoreMode::Dirty | RestoreMode::Auto => {
                assert_eq!(rec.compared_bytes, 2 * rec.captured_bytes, "{case}");
                // Per restore: the counter's one chunk and three chunks of the large variable.
                for &b in &rec.pass_restored_bytes[1..] {
                    assert!(b <= 8 + 3 * CHUNK, "{case}");
                    assert!(b >= 8 + 3 * 8, "{case}");
                }
            }
        }

        let reference = reference(1, |rt| {
            let app = setup(rt);
            bump(rt, &app);
        });
        assert_matches_reference(&rt, &reference);
        assert_eq!(replay.log.outcomes(), vec![rec]);
        finish(&rt);
    }
}

/// A code object with a kernel that follows a pointer stored in its module variable `slot`
/// (outside any `arguments` scope) and rewrites the `u64` there; and the cell that receives
/// the slot's address once loaded.
fn escape_module() -> (ModuleSpec, Arc<OnceLock<u64>>) {
    let slot: Arc<OnceLock<u64>> = Arc::default();
    let s = Arc::clone(&slot);
    let spec = ModuleSpec::new("escape").variable("slot", 8).kernel(
        "escape",
        move |ctx: &mut KernelCtx<'_>| -> Result<(), KernelError> {
            let arg = ctx.word(0);
            let v = ctx.read_u64(arg)?;
            ctx.write_u64(arg, v.wrapping_mul(5).wrapping_add(1))?;
            let target = ctx.read_u64(*s.get().expect("loaded"))?;
            let w = ctx.read_u64(target)?;
            ctx.write_u64(target, w.wrapping_mul(7).wrapping_add(2))?;
            Ok(())
        },
    );
    (spec, slot)
}

/// Loads the escape module and stores `target` in its slot.
fn load_escape(rt: &SimRuntime, target: u64) -> Module {
    let (spec, slot) = escape_module();
    let m = rt.load_module(A0, spec).unwrap();
    let at = m.variable("slot").unwrap();
    slot.set(at).unwrap();
    rt.write(at, &target.to_le_bytes()).unwrap();
    m
}

fn stuck_module() -> ModuleSpec {
    ModuleSpec::new("stuck").kernel("stuck", |_| Ok(()))
}

/// The whole sequence; `check` runs after each step (a no-op for the reference run).
fn memo_sequence(rt: &SimRuntime, check: &dyn Fn(&str, &SimRuntime, &Module, &Module)) {
    let arg = rt.alloc(A0, 4096, MemoryClass::DEVICE_COARSE).unwrap();
    let target = rt.alloc(A0, 4096, MemoryClass::DEVICE_COARSE).unwrap();
    rt.fill(arg, 4096, 3).unwrap();
    rt.fill(target, 4096, 9).unwrap();
    let m1 = load_escape(rt, target);
    let m2 = rt.load_module(A0, stuck_module()).unwrap();
    let run = |m: &Module, name: &str, args: &[u8]| {
        let c = rt
            .dispatch(rt.queue(A0, 0), &m.kernel(name).unwrap(), args, grid(1))
            .unwrap();
        c.wait().unwrap();
        assert_eq!(c.fired(), 1);
    };
    let args = KernArgs::new().ptr(arg).build();
    run(&m1, "escape", &args);
    check("escaped once", rt, &m1, &m2);
    run(&m1, "escape", &args);
    check("escaped twice", rt, &m1, &m2);
    rt.inject(A0, Fault::PassStuck { pass: 1 }, FaultMode::Once);
    run(&m2, "stuck", &[]);
    check("stuck", rt, &m1, &m2);
    rt.unload_module(&m1).unwrap();
    check("unloaded", rt, &m1, &m2);
    let m3 = load_escape(rt, target);
    run(&m3, "escape", &args);
    check("reloaded", rt, &m3, &m2);
}

#[test]
fn unloading_the_code_object_forgets_the_kernels_memo() {
    let policy = Policy {
        scope: Scope::Arguments,
        ..fast_policy()
    };
    let rt = runtime(1);
    let replay = ToolScript::passes(3).install(&rt, policy);
    let svc = Arc::clone(&replay.svc);
    let log = Arc::clone(&replay.log);
    memo_sequence(&rt, &|step, _rt, m1, m2| {
        let escape = m1.kernel("escape").unwrap().key(A0);
        let stuck = m2.kernel("stuck").unwrap().key(A0);
        let last = log.outcomes().last().cloned();
        match step {
            "escaped once" => {
                let r = last.unwrap();
                assert_outcome(&r, Outcome::Truncated, Reason::WriteOutsideScope);
                assert_eq!((r.scope, r.executed_passes), (Scope::Arguments, 1), "{r}");
                assert_eq!(svc.kernel_memo(&escape), Some(KernelMemo::ForceScopeAll));
            }
            "escaped twice" => {
                let r = last.unwrap();
                assert_outcome(&r, Outcome::Replayed, Reason::None);
                assert_eq!((r.scope, r.executed_passes), (Scope::All, 3), "{r}");
            }
            "stuck" => {
                let r = last.unwrap();
                assert_outcome(&r, Outcome::Truncated, Reason::PassDrainStuck);
                assert_eq!(svc.kernel_memo(&stuck), Some(KernelMemo::NoReplay));
            }
            "unloaded" => {
                assert_eq!(
                    svc.kernel_memo(&escape),
                    None,
                    "forgotten with its code object"
                );
                assert_eq!(
                    svc.kernel_memo(&stuck),
                    Some(KernelMemo::NoReplay),
                    "other code objects are remembered"
                );
            }
            "reloaded" => {
                let r = last.unwrap();
                assert_eq!(r.scope, Scope::Arguments, "a fresh start: {r}");
                assert_outcome(&r, Outcome::Truncated, Reason::WriteOutsideScope);
            }
            _ => unreachable!(),
        }
    });
    assert_eq!(replay.log.outcomes().len(), 4);
    let reference = reference(1, |rt| memo_sequence(rt, &|_, _, _, _| {}));
    assert_matches_reference(&rt, &reference);
    finish(&rt);
}
