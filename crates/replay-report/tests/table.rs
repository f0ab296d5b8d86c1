//! The terminal table (SPEC §12).

mod common;

use replay_report::table;

fn line_of<'a>(t: &'a str, metric: &str) -> Vec<&'a str> {
    t.lines()
        .find(|l| l.trim_start().starts_with(metric))
        .unwrap_or_else(|| panic!("no line for {metric} in\n{t}"))
        .split_whitespace()
        .collect()
}

#[test]
fn one_dispatch_shows_the_value_of_the_pass_that_collected_it() {
    let mut r = common::repeated_counter();
    // Pass 1 collects the metric; pass 0 and 2 also report it, with other values.
    r.samples.retain(|s| s.metric != "sm__warps_launched.sum");
    r.metrics[0].pass = 1;
    for (pass, v) in [(0, 5.0), (1, 7.0), (2, 9.0)] {
        r.samples
            .push(common::sample(1, pass, "sm__warps_launched.sum", v));
    }
    let t = table(&r);
    assert_eq!(
        line_of(&t, "sm__warps_launched.sum"),
        ["sm__warps_launched.sum", "warp", "1", "7"]
    );
    assert!(
        t.contains("saxpy(float, float const*, float*)  (1 dispatch, 3 passes)"),
        "{t}"
    );
}

#[test]
fn several_dispatches_show_min_median_max() {
    let mut r = common::repeated_counter();
    r.samples
        .retain(|s| s.metric == "sm__warps_launched.sum" && s.pass == 0);
    r.metrics.truncate(1);
    for (id, v) in [(2, 3000.0), (3, 1000.0), (4, 2000.0)] {
        let mut d = r.dispatches[0].clone();
        d.dispatch_id = id;
        r.dispatches.push(d);
        r.samples
            .push(common::sample(id, 0, "sm__warps_launched.sum", v));
    }
    // Dispatch 1 has 512: values 512, 1000, 2000, 3000; the lower middle is 1000.
    let t = table(&r);
    assert_eq!(
        line_of(&t, "sm__warps_launched.sum"),
        [
            "sm__warps_launched.sum",
            "warp",
            "0",
            "512",
            "1,000",
            "3,000"
        ]
    );
    assert!(t.contains("min / median / max"), "{t}");
    assert!(t.contains("(4 dispatches, 3 passes)"), "{t}");
}

#[test]
fn a_metric_some_dispatches_lack_says_over_how_many() {
    let mut r = common::ncu_head();
    r.dispatches[1].kernel = r.dispatches[0].kernel.clone();
    r.samples
        .retain(|s| !(s.dispatch_id == 8 && s.metric == "lts__t_sectors.sum"));
    let t = table(&r);
    assert_eq!(line_of(&t, "lts__t_sectors.sum")[1..4], ["[1", "of", "2]"]);
    assert_eq!(
        line_of(&t, "profiler__replayer_bytes_mem_backed_up")[1..],
        ["-", "n/a", "n/a", "n/a"]
    );
    assert!(t.starts_with("kernel-replay counters: 1 kernel(s), 2 dispatch(es), 10 metric(s) in 3 pass(es) on NVIDIA H200 (CC 9.0)"), "{t}");
}

#[test]
fn the_table_says_how_the_clocks_ran_and_an_older_report_says_nothing() {
    let mut r = common::repeated_counter();
    assert!(!table(&r).contains("clocks:"), "not said: nothing printed");
    r.clock_control = "base".into();
    assert!(table(&r).contains("clocks: locked to base for the run"));
    r.clock_control = "none".into();
    assert!(table(&r).contains("clocks: as the GPU chose (--clock-control none)"));
    // A report written before the field existed reads as not said.
    let mut v = serde_json::to_value(&r).unwrap();
    v.as_object_mut().unwrap().remove("clock_control");
    let back: replay_report::CounterReport = serde_json::from_value(v).unwrap();
    assert_eq!(back.clock_control, "");
}
