//! The JSON form (SPEC §12).

mod common;

use replay_report::{from_json, from_tool_report, to_json, CounterReport};

#[test]
fn json_round_trips_the_whole_report() {
    for r in [
        common::ncu_head(),
        common::repeated_counter(),
        CounterReport::default(),
    ] {
        let text = to_json(&r).unwrap();
        assert_eq!(from_json(&text).unwrap(), r);
    }
}

#[test]
fn a_dispatchs_graph_node_and_window_phases_are_members_and_read_back() {
    let mut r = common::repeated_counter();
    r.dispatches[0].graph = Some(4);
    r.dispatches[0].node = Some(2);
    r.dispatches[0].graph_launch = Some(7);
    r.dispatches[0].phases = Some(common::phases());
    let text = to_json(&r).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let d = &v["dispatches"][0];
    assert_eq!(
        (&d["graph"], &d["node"], &d["graph_launch"]),
        (&4.into(), &2.into(), &7.into())
    );
    let p = &d["phases"];
    for (name, want) in replay_report::WindowPhases::NAMES
        .iter()
        .zip(common::phases().values())
    {
        assert_eq!(p[name].as_f64(), Some(want), "{name} in {p}");
    }
    assert_eq!(from_json(&text).unwrap(), r);
    // The outcome record's `phases` (replay-core's member names) reads as the same phases.
    let record =
        serde_json::json!({"window": 0.5, "drain": 0.25, "wait": 0.25, "config_enter": 0.125});
    let back: replay_report::WindowPhases = serde_json::from_value(record).unwrap();
    assert_eq!(
        (back.window, back.sum(), back.config_enter),
        (0.5, 0.5, 0.125)
    );
    // Without them (outside a graph, a collector that does not record phases) they are absent.
    let plain = to_json(&common::repeated_counter()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&plain).unwrap();
    for m in ["graph", "node", "graph_launch", "phases"] {
        assert!(v["dispatches"][0].get(m).is_none(), "{m}");
    }
}

#[test]
fn json_keeps_every_pass_of_a_repeated_counter() {
    let text = to_json(&common::repeated_counter()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let warps: Vec<(u64, f64)> = v["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["metric"] == "sm__warps_launched.sum")
        .map(|s| (s["pass"].as_u64().unwrap(), s["value"].as_f64().unwrap()))
        .collect();
    assert_eq!(warps, [(0, 512.0), (1, 512.0), (2, 512.0)]);
}

#[test]
fn a_report_without_pass_times_reads_with_none() {
    // The first version of the type had no `pass_ns`; its JSON still reads.
    let mut r = common::ncu_head();
    let mut v = serde_json::to_value(&r).unwrap();
    for d in v["dispatches"].as_array_mut().unwrap() {
        assert!(d.get("pass_ns").is_none(), "empty pass times are left out");
        d.as_object_mut().unwrap().remove("pass_ns");
    }
    let back: CounterReport = serde_json::from_value(v).unwrap();
    r.dispatches.iter_mut().for_each(|d| d.pass_ns.clear());
    assert_eq!(back, r);
}

#[test]
fn the_counters_member_of_a_tool_report_is_found() {
    let r = common::repeated_counter();
    let tool = serde_json::json!({ "records": [], "counters": r });
    assert_eq!(from_tool_report(&tool).unwrap().unwrap(), r);
    assert!(from_tool_report(&serde_json::json!({ "records": [] })).is_none());
    let bad = serde_json::json!({ "counters": { "process_id": "x" } });
    let e = from_tool_report(&bad).unwrap().unwrap_err();
    assert!(e.to_string().contains("counter report JSON"), "{e}");
}

#[test]
fn the_run_output_step_prints_the_table_and_writes_the_file() {
    let r = common::repeated_counter();
    let tool = serde_json::json!({ "records": [], "counters": r });
    let d = std::env::temp_dir().join(format!("replay-report-{}-run", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let out = d.join("c.csv");
    let o = replay_report::counters_output(&tool, Some(&out))
        .unwrap()
        .unwrap();
    assert_eq!(o.table, replay_report::table(&r));
    assert_eq!(o.written.unwrap().unwrap(), replay_report::Format::Csv);
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        replay_report::csv(&r)
    );
    let o = replay_report::counters_output(&tool, Some(&d.join("c.xlsx")))
        .unwrap()
        .unwrap();
    assert!(o.written.unwrap().is_err());
    assert!(o.table.contains("sm__warps_launched.sum"));
    assert!(replay_report::counters_output(&serde_json::json!({}), None).is_none());
    let _ = std::fs::remove_dir_all(&d);
}
