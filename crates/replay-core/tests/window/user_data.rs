//! SPEC §3's `user_data` threading, as a property over seeds, pass counts and early stops:
//! each callback sees what the one before it left, and no pass sees the previous pass's value.

use std::sync::Arc;

use proptest::prelude::*;
use replay_core::*;

use crate::harness::{agent, dispatch, memory, plan_of, policy, push, snap, Harness, Log};

/// Runs a window whose tool checks SPEC §3 `user_data` threading; returns violations.
fn run(seed: u64, passes: u64, stop_after: Option<u32>) -> (Vec<String>, OutcomeRecord) {
    let bad: Log = Arc::default();
    let b = bad.clone();
    let h = Harness::custom(policy(), move |_, _| {
        Arc::new(
            move |op: Operation, ph: Phase, p: &mut ReplayPayload<'_>, ud: &mut UserData| {
                let pass = u64::from(p.current_pass);
                match (op, ph) {
                    (Operation::Config, Phase::Enter) => {
                        *ud = seed;
                        let b2 = b.clone();
                        p.replay_pass_count = Some(Arc::new(move |_, u| {
                            if u != seed {
                                push(&b2, format!("pass count saw {u}"));
                            }
                            passes
                        }));
                        if stop_after.is_some() {
                            let b3 = b.clone();
                            p.replay_continue = Some(Arc::new(move |_, pass, _, u| {
                                if u != 0xdead ^ u64::from(pass) {
                                    push(&b3, format!("continue {pass} saw {u}"));
                                }
                                i32::from(Some(pass) != stop_after)
                            }));
                        }
                    }
                    (Operation::Pass, Phase::Enter) => {
                        if *ud != seed {
                            push(&b, format!("PASS ENTER {pass} saw {ud}"));
                        }
                        *ud = seed ^ (pass + 1);
                    }
                    (Operation::Pass, Phase::Exit) => {
                        if *ud != seed ^ (pass + 1) {
                            push(&b, format!("PASS EXIT {pass} saw {ud}"));
                        }
                        // The continue callback sees this; the next pass must not.
                        *ud = 0xdead ^ pass;
                    }
                    (Operation::Config, Phase::Exit) => {
                        if *ud != seed {
                            push(&b, format!("CONFIG EXIT saw {ud}"));
                        }
                    }
                }
            },
        )
    });
    let a = agent(&h);
    let m = memory(&h, plan_of(10), Some(snap(&h.log, 10)));
    let rec = h.svc.submit(&a, &m, dispatch("k")).unwrap().record.unwrap();
    let v = bad.lock().clone();
    (v, rec)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn threading_follows_spec(seed in any::<u64>(), passes in 2u64..9, stop in proptest::option::of(0u32..9)) {
        let (violations, rec) = run(seed, passes, stop);
        prop_assert!(violations.is_empty(), "{:?}", violations);
        let expect = match stop { Some(s) if u64::from(s) + 1 < passes => s + 1, _ => passes as u32 };
        prop_assert_eq!(rec.executed_passes, expect);
        prop_assert_eq!(rec.outcome, Outcome::Replayed);
    }
}
