//! What the loader tells the backend: a failed module enumeration, kernel symbols' names.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use replay_core::Policy;
use replay_hsa::sys;
use replay_hsa_sim::{FaultMode, SimFault};

use crate::common::{buffer_and_args, dispatch, read, rmw, sim, typed};
use crate::harness::{expect, policy, world, Case};

#[test]
fn a_module_enumeration_that_fails_declines_untracked_memory() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let c = Case::new(0, 31);
    let f = c
        .sim
        .inject(SimFault::LoaderIterationFails, FaultMode::Always);
    expect(w, &c, true, "untracked_memory");
    c.sim.clear(f);
    w.service.stop().unwrap();
}

#[test]
fn dispatches_carry_the_kernel_symbols_name() {
    let (w, _g) = world();
    w.service.start().unwrap();
    let (sim, api) = sim();
    let runs = Arc::new(AtomicU64::new(0));
    let r = runs.clone();
    let body: replay_hsa_sim::KernelFn = Arc::new(move |d| {
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, rmw(v))?;
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    let exec = sim.load_module(0, &[], &[("_Z3rmwPm.kd", body)]);
    let object = sim
        .kernel_object("_Z3rmwPm.kd")
        .expect("the module's kernel");
    let q = api.queue(sim.gpu_agents()[0]);
    let (buf, args) = buffer_and_args(&sim, &api, 0, 34);
    w.tool.set_passes(Some(2));
    let done = api.signal(1);
    api.submit(q, dispatch(object, args, done));
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read(buf), rmw(34));
    assert_eq!(w.tool.config_kernels(), vec!["_Z3rmwPm".to_owned()]);
    // The kernel filter matches that name: excluded, the next dispatch is not replayed.
    w.service
        .set_policy(Policy {
            filter: replay_core::filter::KernelFilter {
                exclude: vec!["_Z3rmw*".into()],
                ..Default::default()
            },
            ..policy()
        })
        .unwrap();
    let before = w.service.summary();
    let done = api.signal(1);
    api.submit(q, dispatch(object, args, done));
    assert_eq!(api.wait_zero(done), 0);
    assert_eq!(read(buf), rmw(rmw(34)));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "two passes, then one ordinary run"
    );
    assert_eq!(w.service.summary().replayed, before.replayed);
    // Destroying the executable through the (wrapped) entry forgets its kernels, whose
    // kernel-object addresses a later executable may reuse.
    let state: serde_json::Value =
        serde_json::from_str(&replay_hsa::backend().state_json()).unwrap();
    assert!(
        state["installed"]["wrapped"]
            .as_array()
            .unwrap()
            .contains(&"hsa_executable_destroy".into()),
        "{state}"
    );
    assert!(replay_hsa::kernels::global().knows(object));
    // SAFETY: the core table's entry as its C signature.
    let destroy: sys::ExecutableDestroyFn = unsafe { typed(sim.core().hsa_executable_destroy_fn) };
    // SAFETY: the executable loaded above, idle.
    assert_eq!(unsafe { destroy(exec) }, 0);
    assert!(!replay_hsa::kernels::global().knows(object), "forgotten");
    assert_eq!(
        sim.kernel_object("_Z3rmwPm.kd"),
        None,
        "the runtime destroyed it too"
    );
    w.service.stop().unwrap();
}
