//! The SASS pass through the window: patching on for that pass only, sums over the whole-GPU
//! records of the dispatch's own function (never the backend's flush kernel's or another
//! kernel's), and a kernel left unpatched or a SASS pass the window never reaches named as an
//! error, never read as zero.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use replay_core::{DispatchId, Outcome};
use replay_cuda::counters::{CounterCollector, CounterError, Profiler, ReportHeader};

use crate::fake::{value, Fake, CHIP};
use crate::rig::{dispatch, groups_plan, names, rig};

#[test]
fn the_sass_pass_sums_only_the_dispatchs_function_records_keyed_by_its_own_pass() {
    let r = rig(
        &[
            "smsp__inst_executed.sum",
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
            "smsp__sass_inst_executed_op_global_ld.sum",
            "dram__bytes_read.sum",
        ],
        4,
    );
    assert_eq!(r.collector.plan().passes, 2);
    assert_eq!(r.collector.pass_count(), 4);
    let rec = r.run(1);
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    assert_eq!(rec.executed_passes, 4);
    assert!(
        r.collector.errors().is_empty(),
        "{:?}",
        r.collector.errors()
    );
    // The range group in pass 0, the SASS pass alone in pass 1, nothing in passes 2 and 3.
    assert_eq!(
        *r.fake.calls.lock(),
        [
            "begin 0xc0 smsp__inst_executed.sum,dram__bytes_read.sum",
            "start",
            "stop",
            "decode",
            "sass_begin 0xc0 [12, 13, 11] gpu",
            "sass_end",
        ]
    );
    // Patching saw the flush and another kernel beside the dispatch's, in pass 1 only.
    assert_eq!(
        *r.fake.sass_seen.lock(),
        ["kreplay_flush_l2", "_Z3rmwPdm", "_Z5otherv"]
    );
    let rep = r.collector.report(&ReportHeader::default());
    let got: Vec<(&str, u32, f64)> = rep
        .samples
        .iter()
        .map(|s| (s.metric.as_str(), s.pass, s.value))
        .collect();
    // The dispatch's three instructions: (pc + 1) * (id % 10), one instance.
    let sum = |id: u64| ((1..=3).map(|pc| pc * (id % 10)).sum::<u64>()) as f64;
    assert_eq!(
        got,
        [
            (
                "smsp__inst_executed.sum",
                0,
                value("smsp__inst_executed.sum", 0)
            ),
            (
                "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
                1,
                sum(12)
            ),
            ("smsp__sass_inst_executed_op_global_ld.sum", 1, sum(13)),
            ("dram__bytes_read.sum", 0, value("dram__bytes_read.sum", 0)),
        ]
    );
    // A second dispatch patches again and gets its own values.
    let rec2 = r.run(1);
    let rep = r.collector.report(&ReportHeader::default());
    assert_eq!(
        rep.samples
            .iter()
            .filter(|s| s.dispatch_id == rec2.dispatch_id.0 && s.pass == 1)
            .count(),
        2
    );
    assert_eq!(
        r.fake
            .calls
            .lock()
            .iter()
            .filter(|c| c.starts_with("sass_begin"))
            .count(),
        2
    );
}

#[test]
fn sass_rollups_over_sms_are_refused_and_sums_use_whole_gpu_records() {
    for m in [
        "smsp__sass_inst_executed_op_global_ld.avg",
        "smsp__sass_inst_executed_op_global_ld.max",
        "sm__sass_inst_executed_op_global_ld.min",
    ] {
        let e = groups_plan(
            &Fake::default(),
            CHIP,
            &names(&["smsp__sass_inst_executed_op_global_ld.sum", m]),
        )
        .unwrap_err();
        let CounterError::Metrics { bad, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].0, m);
        assert!(bad[0].1.contains("do not add up"), "{bad:?}");
    }
    let r = rig(&["smsp__sass_inst_executed_op_global_ld.sum"], 1);
    let rec = r.run(1);
    assert_eq!(rec.executed_passes, 2);
    assert!(
        r.fake.calls.lock()[0].ends_with(" gpu"),
        "whole-GPU records: {:?}",
        r.fake.calls.lock()
    );
}

#[test]
fn a_kernel_that_was_not_patched_is_an_error_not_a_zero_and_other_dispatches_go_on() {
    let r = rig(
        &[
            "dram__bytes_read.sum",
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
        ],
        1,
    );
    r.fake.sass_unpatched.store(true, Ordering::SeqCst);
    let first = r.run(1);
    assert_eq!(
        first.outcome,
        Outcome::Replayed,
        "the replay itself goes on"
    );
    r.fake.sass_unpatched.store(false, Ordering::SeqCst);
    let second = r.run(1);
    let rep = r.collector.report(&ReportHeader::default());
    let of = |d: DispatchId| -> Vec<&str> {
        rep.samples
            .iter()
            .filter(|s| s.dispatch_id == d.0)
            .map(|s| s.metric.as_str())
            .collect()
    };
    assert_eq!(of(first.dispatch_id), ["dram__bytes_read.sum"]);
    assert_eq!(of(second.dispatch_id).len(), 2);
    let errors = r.collector.errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors.iter().all(|(d, _)| *d == first.dispatch_id.0));
    assert!(
        errors[0].1.contains("no SASS record of _Z3rmwPdm")
            && errors[0].1.contains("kreplay_flush_l2")
            && errors[0].1.contains("not patched"),
        "{errors:?}"
    );
    assert!(
        errors[1].1.contains("not collected")
            && errors[1]
                .1
                .contains("sm__sass_thread_inst_executed_op_ffma_pred_on.sum"),
        "{errors:?}"
    );
    // Patching was turned off after each dispatch's SASS pass.
    assert!(r.fake.sass.lock().is_none());
}

#[test]
fn a_sass_pass_the_window_never_reaches_leaves_patching_off_and_says_what_is_missing() {
    // A range group that fails leaves the SASS pass to run, but the dispatch's collection
    // has ended: nothing is enabled, and the SASS metrics are named as missing.
    let r = rig(
        &[
            "dram__bytes_read.sum",
            "smsp__sass_inst_executed_op_global_ld.sum",
        ],
        1,
    );
    *r.fake.fail_start_at.lock() = Some(0);
    let rec = r.run(1);
    assert_eq!(rec.executed_passes, 2);
    assert!(
        r.fake
            .calls
            .lock()
            .iter()
            .all(|c| !c.starts_with("sass_begin")),
        "{:?}",
        r.fake.calls.lock()
    );
    let errors = r.collector.errors();
    assert!(
        errors.iter().any(|(_, e)| e.contains("not collected")
            && e.contains("dram__bytes_read.sum")
            && e.contains("smsp__sass_inst_executed_op_global_ld.sum")),
        "{errors:?}"
    );
    // Asked for one pass only (a tool's own front end may): the SASS pass never runs, and
    // its metrics are missing from the dispatch.
    let c = CounterCollector::new(
        Arc::clone(r.collector.plan()),
        Arc::clone(&r.fake) as Arc<dyn Profiler>,
        1,
    );
    let d = dispatch(1).info;
    let pass = |c: &CounterCollector, n: u32| {
        c.pass_enter(&d, n);
        r.fake.current.store(n, Ordering::SeqCst);
        r.fake.launched(&d.kernel_name);
        c.pass_exit(&d, n);
    };
    pass(&c, 0);
    let mut o = replay_core::OutcomeRecord::new(d.dispatch_id, d.agent, &d.kernel_name);
    o.outcome = Outcome::Truncated;
    o.executed_passes = 1;
    o.requested_passes = 2;
    c.finish(&d, Some(&o));
    assert_eq!(c.errors().len(), 1, "{:?}", c.errors());
    assert!(
        c.errors()[0].1.contains("not collected after 1 passes")
            && c.errors()[0]
                .1
                .ends_with(": smsp__sass_inst_executed_op_global_ld.sum"),
        "{:?}",
        c.errors()
    );
    // A SASS pass whose EXIT never came (truncated inside it): CONFIG EXIT turns patching
    // off.
    let c = CounterCollector::new(
        Arc::clone(r.collector.plan()),
        Arc::clone(&r.fake) as Arc<dyn Profiler>,
        1,
    );
    *r.fake.fail_start_at.lock() = None;
    pass(&c, 0);
    c.pass_enter(&d, 1);
    assert!(r.fake.sass.lock().is_some());
    o.executed_passes = 2;
    c.finish(&d, Some(&o));
    assert!(r.fake.sass.lock().is_none(), "patching left on");
}
