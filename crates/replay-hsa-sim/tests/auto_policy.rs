//! `scope=auto` and `restore=auto` on `replay-hsa` over the simulated runtime (SPEC §7.2, §8,
//! issue 15): HSA's digests are host ones, and by issue 15's decision `auto` resolves to
//! `arguments` + `full` there; the record names what ran and that `auto` chose it.

// Not every shared helper is used by every test file.
#[allow(dead_code)]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use replay_core::{
    Operation, Outcome, OutcomeRecord, Phase, Policy, Reason, ReplayPayload, ReplayTool,
    RestoreMode, Scope, UserData,
};
use replay_hsa_sim::PoolKind;

use common::*;

/// Four passes of every dispatch.
struct FourPasses;

impl ReplayTool for FourPasses {
    fn callback(&self, op: Operation, phase: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData) {
        if (op, phase) == (Operation::Config, Phase::Enter) {
            p.replay_pass_count = Some(Arc::new(|_, _| 4));
        }
    }
}

#[test]
fn auto_resolves_to_arguments_and_full_on_hsa() {
    let policy = Policy {
        drain_timeout: Duration::from_secs(5),
        pass_timeout: Duration::from_secs(5),
        ..Policy::default()
    };
    assert_eq!(
        (policy.scope, policy.restore),
        (Scope::Auto, RestoreMode::Auto)
    );
    let service = install_service(policy, Arc::new(FourPasses));
    let records = Arc::new(Mutex::new(Vec::<OutcomeRecord>::new()));
    let sink = records.clone();
    service.set_outcome_sink(Some(Arc::new(move |r: &OutcomeRecord| {
        sink.lock().unwrap().push(r.clone())
    })));
    service.start().unwrap();
    let (sim, api) = sim();
    let (buf, args) = buffer_and_args(&sim, &api, 0, 5);
    // Device memory no argument reaches: `all` would capture and restore it too.
    let other = api.alloc(sim.pool(0, PoolKind::DeviceCoarse), 4096);
    let runs = Arc::new(AtomicU64::new(0));
    let k = rmw_kernel(&sim, runs.clone(), Duration::ZERO);
    let q = api.queue(sim.gpu_agents()[0]);
    let done = api.signal(1);
    api.submit(q, dispatch(k, args, done));
    assert_eq!(api.wait_zero(done), 0);
    api.destroy(q);
    let r = records.lock().unwrap().pop().expect("a record");
    assert_eq!(
        (r.outcome, r.reason),
        (Outcome::Replayed, Reason::None),
        "{r}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    assert_eq!(read(buf), rmw(5), "memory equals one execution");
    assert_eq!(
        (r.scope, r.restore),
        (Scope::Arguments, RestoreMode::Full),
        "{r}"
    );
    assert!(r.scope_auto && r.restore_auto, "{r}");
    assert_eq!(
        (r.captured_regions, r.captured_bytes),
        (1, 64),
        "only the argument: {r}"
    );
    assert_eq!(
        r.restored_bytes,
        3 * 64,
        "full restores before passes 1 to 3: {r}"
    );
    assert!(
        r.to_string()
            .contains(" scope=arguments scope_auto=1 restore=full restore_auto=1 "),
        "{r}"
    );
    let s = service.summary();
    assert_eq!(s.ran.get("arguments+full"), Some(&1), "{s}");
    assert_eq!(s.ran_auto, 1, "{s}");
    api.free(other);
    service.stop().unwrap();
}
