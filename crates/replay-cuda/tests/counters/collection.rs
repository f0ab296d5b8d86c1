//! Range-profiler values collected through the window: the pass count it is asked for, each
//! value from the pass it is keyed by, and a profiler that fails, finishes a session early or
//! late, or evaluates no value costing that dispatch's samples only, with what is missing
//! named rather than reported as a value.

use std::sync::atomic::Ordering;

use replay_core::{DispatchId, Outcome};
use replay_cuda::counters::ReportHeader;
use replay_report_types::CounterSample;

use crate::fake::{value, CHIP};
use crate::rig::{rig, rig_packed};

#[test]
fn the_window_asks_for_the_plans_passes_and_each_value_comes_from_the_pass_it_is_keyed_by() {
    let r = rig(
        &[
            "launch__grid_size",
            "launch__registers_per_thread",
            "smsp__inst_executed.sum",
            "lts__t_sector_hit_rate.pct",
            "l1tex__t_sector_hit_rate.pct",
            "dram__bytes_read.sum",
            "big__two_pass.sum",
        ],
        3,
    );
    // Groups: [inst, lts ratio, dram_rd] (4 counters), [l1 ratio], [big over 2 passes].
    assert_eq!(r.collector.plan().passes, 4);
    assert_eq!(r.collector.pass_count(), 4);
    let rec = r.run(3);
    assert_eq!(rec.outcome, Outcome::Replayed, "{rec}");
    assert_eq!(rec.requested_passes, 4);
    assert_eq!(rec.executed_passes, 4);
    assert_eq!(
        *r.fake.calls.lock(),
        [
            "begin 0xc0 smsp__inst_executed.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum",
            "start",
            "stop",
            "decode",
            "begin 0xc0 l1tex__t_sector_hit_rate.pct",
            "start",
            "stop",
            "decode",
            "begin 0xc0 big__two_pass.sum",
            "start",
            "stop",
            "start",
            "stop",
            "decode",
        ]
    );
    // Where a pass's time goes: every profiler call counted by kind.
    let spent = r.collector.profiler_time();
    for want in ["begin 3x", "start 4x", "stop 4x", "decode 3x"] {
        assert!(spent.contains(want), "{spent}");
    }
    assert!(!spent.contains("sass"), "{spent}");
    let rep = r.collector.report(&ReportHeader {
        process_id: 42,
        process_name: "app".into(),
        ..ReportHeader::default()
    });
    assert!(
        r.collector.errors().is_empty(),
        "{:?}",
        r.collector.errors()
    );
    let d = rec.dispatch_id.0;
    let s = |metric: &str, pass: u32, value: f64| CounterSample {
        dispatch_id: d,
        pass,
        metric: metric.into(),
        value,
    };
    let v = |m: &str, p: u32| value(m, p);
    assert_eq!(
        rep.samples,
        vec![
            s("launch__grid_size", 0, 80.0),
            // The driver's count, as the fake gives it.
            s("launch__registers_per_thread", 0, 30.0),
            s(
                "smsp__inst_executed.sum",
                0,
                v("smsp__inst_executed.sum", 0)
            ),
            s(
                "lts__t_sector_hit_rate.pct",
                0,
                v("lts__t_sector_hit_rate.pct", 0)
            ),
            s(
                "l1tex__t_sector_hit_rate.pct",
                1,
                v("l1tex__t_sector_hit_rate.pct", 1)
            ),
            s("dram__bytes_read.sum", 0, v("dram__bytes_read.sum", 0)),
            s("big__two_pass.sum", 2, v("big__two_pass.sum", 2)),
        ]
    );
    // One sample at a time (what the C ABI's value query reads), the same as the report's.
    for x in &rep.samples {
        assert_eq!(r.collector.sample(d, &x.metric), Some((x.pass, x.value)));
    }
    assert_eq!(r.collector.sample(d, "dram__bytes_write.sum"), None);
    assert_eq!(r.collector.sample(d + 1, "dram__bytes_read.sum"), None);
    assert_eq!(rep.passes, 4);
    assert_eq!(rep.chip, CHIP);
    assert_eq!((rep.process_id, rep.process_name.as_str()), (42, "app"));
    assert_eq!(rep.dispatches.len(), 1);
    let cd = &rep.dispatches[0];
    assert_eq!(cd.dispatch_id, d);
    assert_eq!((cd.grid, cd.block), ([80, 1, 1], [256, 1, 1]));
    assert_eq!((cd.passes, cd.context, cd.stream), (4, 0xc0, 0x5eed));
    assert_eq!(cd.kernel, "_Z3rmwPdm");
    // The window's phases as CONFIG EXIT saw them: they add up to its window, which ends
    // where CONFIG EXIT began, inside the record's whole window.
    let p = cd.phases.expect("the collector records the phases");
    assert!((p.sum() - p.window).abs() <= 1e-9, "{p:?}");
    assert!(
        p.window > 0.0 && p.window <= rec.phases.window,
        "{p:?} {rec:?}"
    );
    assert_eq!((p.drain, p.capture), (rec.phases.drain, rec.phases.capture));
    // Not a graph's node.
    assert_eq!((cd.graph, cd.node, cd.graph_launch), (None, None, None));
    // Round trip through the report's JSON.
    let back: replay_report_types::CounterReport =
        serde_json::from_str(&serde_json::to_string(&rep).unwrap()).unwrap();
    assert_eq!(back, rep);
}

#[test]
fn passes_beyond_the_plan_run_without_the_profiler_and_one_pass_plans_still_replay() {
    let r = rig(&["dram__bytes_read.sum", "dram__bytes_write.sum"], 5);
    assert_eq!(r.collector.plan().passes, 1);
    assert_eq!(r.collector.pass_count(), 5);
    let rec = r.run(1);
    assert_eq!(rec.executed_passes, 5);
    assert_eq!(r.fake.calls.lock().len(), 4, "{:?}", r.fake.calls.lock());
    // A one-pass plan asked alone still asks for two passes: one pass is no replay, and so
    // no PASS callbacks to run the profiler in.
    let r = rig(&["dram__bytes_read.sum"], 1);
    assert_eq!(r.collector.pass_count(), 2);
    let rec = r.run(1);
    assert_eq!(rec.outcome, Outcome::Replayed);
    let rep = r.collector.report(&ReportHeader::default());
    assert_eq!(rep.samples.len(), 1);
    assert_eq!(rep.samples[0].pass, 0);
}

#[test]
fn a_profiler_failure_ends_that_dispatchs_collection_only_and_says_what_is_missing() {
    let r = rig(
        &[
            "smsp__inst_executed.sum",
            "l1tex__t_sector_hit_rate.pct",
            "lts__t_sector_hit_rate.pct",
        ],
        1,
    );
    // Groups: [inst, l1 ratio] (3 counters), then [lts ratio] (3 + 2 > 4).
    assert_eq!(r.collector.plan().passes, 2);
    // The second start (pass 1 of the first dispatch) fails.
    *r.fake.fail_start_at.lock() = Some(1);
    let first = r.run(1);
    assert_eq!(
        first.outcome,
        Outcome::Replayed,
        "the replay itself goes on"
    );
    let second = r.run(1);
    assert_eq!(second.outcome, Outcome::Replayed);
    let rep = r.collector.report(&ReportHeader::default());
    let of = |d: DispatchId| -> Vec<(String, u32)> {
        rep.samples
            .iter()
            .filter(|s| s.dispatch_id == d.0)
            .map(|s| (s.metric.clone(), s.pass))
            .collect()
    };
    assert_eq!(
        of(first.dispatch_id),
        [
            ("smsp__inst_executed.sum".to_string(), 0),
            ("l1tex__t_sector_hit_rate.pct".to_string(), 0)
        ]
    );
    assert_eq!(of(second.dispatch_id).len(), 3);
    let errors = r.collector.errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors.iter().all(|(d, _)| *d == first.dispatch_id.0));
    assert!(
        errors[0].1.contains("cuptiRangeProfilerStart"),
        "{errors:?}"
    );
    assert!(
        errors[1].1.contains("not collected") && errors[1].1.contains("lts__t_sector_hit_rate.pct"),
        "{errors:?}"
    );
}

#[test]
fn a_session_the_profiler_completes_early_is_decoded_then_and_its_other_passes_run_without_it() {
    let r = rig(&["big__two_pass.sum", "dram__bytes_read.sum"], 1);
    // Groups: [big] over passes 0-1 (the host API's count), [dram] at pass 2.
    assert_eq!(r.collector.plan().passes, 3);
    r.fake.finish_early.store(true, Ordering::SeqCst);
    let rec = r.run(1);
    assert_eq!(rec.executed_passes, 3);
    assert!(
        r.collector.errors().is_empty(),
        "{:?}",
        r.collector.errors()
    );
    assert_eq!(
        *r.fake.calls.lock(),
        [
            "begin 0xc0 big__two_pass.sum",
            "start",
            "stop",
            "decode",
            "begin 0xc0 dram__bytes_read.sum",
            "start",
            "stop",
            "decode",
        ]
    );
    let rep = r.collector.report(&ReportHeader::default());
    let got: Vec<(&str, u32, f64)> = rep
        .samples
        .iter()
        .map(|s| (s.metric.as_str(), s.pass, s.value))
        .collect();
    assert_eq!(
        got,
        [
            ("big__two_pass.sum", 0, value("big__two_pass.sum", 0)),
            ("dram__bytes_read.sum", 2, value("dram__bytes_read.sum", 2)),
        ]
    );
}

#[test]
fn a_session_the_profiler_wants_more_passes_for_than_planned_is_an_error_and_no_sample() {
    let r = rig(&["big__two_pass.sum", "dram__bytes_read.sum"], 1);
    // Groups: [big] over passes 0-1, [dram] at pass 2.
    assert_eq!(r.collector.plan().passes, 3);
    r.fake.finish_late.store(true, Ordering::SeqCst);
    let rec = r.run(1);
    assert_eq!(rec.outcome, Outcome::Replayed, "the replay itself goes on");
    assert_eq!(rec.executed_passes, 3);
    // Never decoded, and the dispatch's later group is not begun.
    assert_eq!(
        *r.fake.calls.lock(),
        [
            "begin 0xc0 big__two_pass.sum",
            "start",
            "stop",
            "start",
            "stop"
        ]
    );
    let rep = r.collector.report(&ReportHeader::default());
    assert!(rep.samples.is_empty(), "{:?}", rep.samples);
    let errors = r.collector.errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0]
            .1
            .contains("the profiler wants more than the 2 passes the host API planned"),
        "{errors:?}"
    );
    assert!(
        errors[1].1.contains("not collected after 3 passes")
            && errors[1]
                .1
                .ends_with(": big__two_pass.sum,dram__bytes_read.sum"),
        "{errors:?}"
    );
}

#[test]
fn a_value_the_profiler_cannot_evaluate_is_an_error_not_a_sample() {
    let r = rig(&["nan__metric.sum", "dram__bytes_read.sum"], 1);
    let rec = r.run(1);
    let rep = r.collector.report(&ReportHeader::default());
    assert!(rep.samples.iter().all(|s| s.value.is_finite()));
    assert_eq!(rep.samples.len(), 1, "{:?}", rep.samples);
    assert_eq!(rep.samples[0].metric, "dram__bytes_read.sum");
    let errors = r.collector.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, rec.dispatch_id.0);
    assert!(
        errors[0]
            .1
            .contains("nan__metric.sum: the profiler evaluated no value"),
        "{errors:?}"
    );
}

#[test]
fn registers_per_thread_read_as_allocated_at_least_sixteen() {
    // The fake's function `k` has 10 * k registers.
    let r = rig(&["launch__registers_per_thread", "launch__grid_size"], 1);
    r.run(1);
    r.run(3);
    let rep = r.collector.report(&ReportHeader::default());
    let regs: Vec<f64> = rep
        .samples
        .iter()
        .filter(|s| s.metric == "launch__registers_per_thread")
        .map(|s| s.value)
        .collect();
    assert_eq!(regs, [16.0, 30.0]);
}

#[test]
fn a_dispatch_after_one_that_ended_on_the_plans_last_group_runs_the_groups_reversed() {
    // Groups: [big] over passes 0-1, [dram] at pass 2. A kept range-profiler object serves
    // only the configuration first set on it, so the second dispatch starts where the first
    // ended: the dram group first, then the big one; the third starts again with big.
    let r = rig(&["big__two_pass.sum", "dram__bytes_read.sum"], 1);
    assert_eq!(r.collector.plan().passes, 3);
    let first = r.run(1);
    let second = r.run(1);
    let third = r.run(1);
    for rec in [&first, &second, &third] {
        assert_eq!(rec.outcome, Outcome::Replayed);
        assert_eq!(rec.executed_passes, 3);
    }
    assert!(
        r.collector.errors().is_empty(),
        "{:?}",
        r.collector.errors()
    );
    let one = ["begin 0xc0 dram__bytes_read.sum", "start", "stop", "decode"];
    let two = [
        "begin 0xc0 big__two_pass.sum",
        "start",
        "stop",
        "start",
        "stop",
        "decode",
    ];
    let calls = r.fake.calls.lock().clone();
    let want: Vec<&str> = [&two[..], &one, &one, &two, &two, &one].concat();
    assert_eq!(calls, want);
    // Each value is keyed by the pass that produced it in its dispatch's order.
    let rep = r.collector.report(&ReportHeader::default());
    let of = |d: DispatchId| -> Vec<(String, u32, f64)> {
        let mut v: Vec<_> = rep
            .samples
            .iter()
            .filter(|s| s.dispatch_id == d.0)
            .map(|s| (s.metric.clone(), s.pass, s.value))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let at = |big: u32, dram: u32| {
        vec![
            (
                "big__two_pass.sum".to_string(),
                big,
                value("big__two_pass.sum", big),
            ),
            (
                "dram__bytes_read.sum".to_string(),
                dram,
                value("dram__bytes_read.sum", dram),
            ),
        ]
    };
    assert_eq!(of(first.dispatch_id), at(0, 2));
    assert_eq!(of(second.dispatch_id), at(1, 0));
    assert_eq!(of(third.dispatch_id), at(0, 2));
}

#[test]
fn the_default_packing_is_one_configuration_over_its_passes_each_dispatch() {
    let r = rig_packed(
        &["big__two_pass.sum", "dram__bytes_read.sum"],
        1,
        replay_cuda::counters::Packing::default(),
    );
    let plan = r.collector.plan();
    assert_eq!(plan.groups.len(), 1);
    let passes = plan.groups[0].config.passes;
    assert!(passes >= 2, "{passes}");
    let first = r.run(1);
    let second = r.run(1);
    assert!(
        r.collector.errors().is_empty(),
        "{:?}",
        r.collector.errors()
    );
    // One configuration set per dispatch, the profiler started and stopped each pass.
    let mut one = vec!["begin 0xc0 big__two_pass.sum,dram__bytes_read.sum".to_string()];
    for _ in 0..passes {
        one.extend(["start".to_string(), "stop".to_string()]);
    }
    one.push("decode".into());
    let calls = r.fake.calls.lock().clone();
    assert_eq!(calls, [one.clone(), one].concat());
    let rep = r.collector.report(&ReportHeader::default());
    for d in [first.dispatch_id, second.dispatch_id] {
        let got: Vec<(&str, u32)> = rep
            .samples
            .iter()
            .filter(|s| s.dispatch_id == d.0)
            .map(|s| (s.metric.as_str(), s.pass))
            .collect();
        assert_eq!(got, [("big__two_pass.sum", 0), ("dram__bytes_read.sum", 0)]);
    }
}
