//! `kreplay run`'s unit tests: the options parsed, the counters planned, the table's lines
//! and the outputs written, and the program never started where the plan fails.

use super::counters::{plan_lines, without_unavailable_set_metrics};
use super::output::{counters_output, cupti_line, interception_notes, phase_line};
use super::*;

#[test]
fn the_phase_line_gives_each_phase_its_share_of_the_windows() {
    let s = serde_json::json!({"phases": {"window": 0.01, "wait": 0.005, "capture": 0.0025}});
    let line = phase_line(&s);
    assert!(line.starts_with("replay time 10.000 ms: "), "{line}");
    assert!(line.contains("wait 5.000 ms (50%)"), "{line}");
    assert!(line.contains("capture 2.500 ms (25%)"), "{line}");
    assert!(line.contains("drain 0.000 ms (0%)"), "{line}");
    assert_eq!(phase_line(&serde_json::json!({})), "");
}

#[test]
fn sanitizer_runtimes_stay_first_in_ld_preload_and_the_library_comes_next() {
    let lib = std::path::Path::new("/opt/kr/libkernel_replay.so");
    assert_eq!(preload_with(lib, None), "/opt/kr/libkernel_replay.so");
    assert_eq!(preload_with(lib, Some("")), "/opt/kr/libkernel_replay.so");
    assert_eq!(
        preload_with(lib, Some("libfaketime.so.1 /x/libtrace.so")),
        "/opt/kr/libkernel_replay.so:libfaketime.so.1:/x/libtrace.so"
    );
    assert_eq!(
        preload_with(
            lib,
            Some("/x/libtrace.so:/usr/lib/libasan.so.8:libclang_rt.tsan-x86_64.so")
        ),
        "/usr/lib/libasan.so.8:libclang_rt.tsan-x86_64.so:/opt/kr/libkernel_replay.so:/x/libtrace.so"
    );
}

#[test]
fn launches_run_once_behind_a_host_wait_or_beside_a_capture_are_told() {
    assert_eq!(
        interception_notes(&serde_json::json!({"launches_seen": 3})),
        ""
    );
    let n = interception_notes(&serde_json::json!({"behind_host_wait": 12, "beside_capture": 0}));
    assert!(n.starts_with("note: 12 launches ran once"), "{n}");
    assert!(n.contains("--xla_gpu_autotune_level=0"), "{n}");
    assert_eq!(n.lines().count(), 1, "{n}");
    let n = interception_notes(&serde_json::json!({"behind_host_wait": 1, "beside_capture": 4}));
    assert_eq!(n.lines().count(), 2, "{n}");
    assert!(
        n.lines()
            .nth(1)
            .unwrap()
            .starts_with("note: 4 launches ran once"),
        "{n}"
    );
}

#[test]
fn graph_launches_run_once_are_told_by_reason_and_the_mode_option_is_read() {
    let n = interception_notes(&serde_json::json!({
        "graph_run_once": {"unseen_graph": 2, "node_type": 0, "device_launch": 1}
    }));
    assert_eq!(
        n,
        "note: graph launches ran once, untouched: device_launch 1, unseen_graph 2\n"
    );
    let a = parse(&s(&["--graph-profiling", "graph", "--", "app"])).unwrap();
    assert_eq!(a.graph_profiling.as_deref(), Some("graph"));
    assert!(parse(&s(&["--graph-profiling", "nodes", "--", "app"])).is_err());
    assert_eq!(parse(&s(&["--", "app"])).unwrap().graph_profiling, None);
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn the_table_reports_the_cupti_cross_check() {
    let v = |c: serde_json::Value| cupti_line(&c);
    let t = v(
        serde_json::json!({"status": "subscribed", "inside": 9, "outside": 2,
        "outside_by_entry": {"cuLaunchGrid": 2}}),
    );
    assert!(t.contains("cupti: 2 launches did NOT pass"), "{t}");
    assert!(t.contains("cuLaunchGrid"), "{t}");
    let t = v(serde_json::json!({"status": "subscribed", "inside": 9, "outside": 0}));
    assert!(
        t.contains("every launch the driver ran passed through a wrapper"),
        "{t}"
    );
    let t = v(serde_json::json!({"status": "off", "detail": "KREPLAY_CUDA_CUPTI=0"}));
    assert!(t.contains("--check-launches turns it on"), "{t}");
    let t = v(serde_json::json!({"status": "unavailable", "detail": "no libcupti found"}));
    assert!(
        t.contains("cupti: no cross-check (unavailable: no libcupti found)"),
        "{t}"
    );
}

#[test]
fn the_counter_tools_out_needs_a_known_extension() {
    let mut a = parse(&s(&["--out", "c.xlsx", "--", "app"])).unwrap();
    assert!(check_out(&a).is_ok(), "other tools keep their own --out");
    a.tool = "counters".into();
    let e = check_out(&a).unwrap_err().to_string();
    assert!(
        e.contains("c.xlsx") && e.contains(".csv, .json, .db"),
        "{e}"
    );
    for ok in ["c.csv", "c.json", "c.db", "c.html"] {
        a.out = Some(PathBuf::from(ok));
        assert!(check_out(&a).is_ok(), "{ok}");
    }
}

/// A counter report of two launches with the raw metrics `--set full` asks, as the
/// library's JSON report holds it.
fn full_set_report(metrics: &[String]) -> serde_json::Value {
    use replay_report::{CounterDispatch, CounterReport, CounterSample, MetricInfo};
    let dispatch = |id: u64| CounterDispatch {
        dispatch_id: id,
        kernel: "_Z4fillPf".into(),
        kernel_demangled: "fill(float*)".into(),
        device: 0,
        context: 1,
        stream: 7,
        grid: [4, 1, 1],
        block: [128, 1, 1],
        passes: 5,
        snapshot_bytes: 0,
        start_ns: 0,
        end_ns: 0,
        pass_ns: Vec::new(),
        graph: None,
        node: None,
        graph_launch: None,
        phases: None,
        origin: None,
    };
    let value = |m: &str, id: u64| match m {
        "gpu__time_duration.sum" => 1_000.0 * id as f64,
        "gpc__cycles_elapsed.avg" => 1_980.0 * id as f64,
        "smsp__inst_executed.sum" => 256.0,
        "smsp__thread_inst_executed.sum" => 8_192.0,
        _ => 1.0,
    };
    let r = CounterReport {
        process_id: 42,
        process_name: "app".into(),
        compute_capability: "9.0".into(),
        metrics: metrics
            .iter()
            .map(|m| MetricInfo {
                name: m.clone(),
                unit: String::new(),
                description: String::new(),
                pass: 1,
            })
            .collect(),
        // Dispatch ids as the service gives them: not from 0, not contiguous.
        dispatches: vec![dispatch(3), dispatch(11)],
        samples: [3u64, 11]
            .iter()
            .flat_map(|id| {
                metrics.iter().map(move |m| CounterSample {
                    dispatch_id: *id,
                    pass: 1,
                    metric: m.clone(),
                    value: value(m, *id),
                })
            })
            .collect(),
        ..CounterReport::default()
    };
    serde_json::json!({ "counters": r })
}

#[test]
fn set_full_writes_nsight_computes_section_rows_keyed_by_launch_index() {
    let a = parse(&s(&[
        "--tool", "counters", "--set", "full", "--out", "k.csv", "--", "app",
    ]))
    .unwrap();
    let tool = full_set_report(&a.metric_list());
    let d = std::env::temp_dir().join(format!("kreplay-sections-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let out = d.join("k.csv");
    let o = counters_output(&a, &tool, Some(&out)).unwrap().unwrap();
    assert_eq!(o.written.unwrap().unwrap(), replay_report::Format::Csv);
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    let header = replay_report::parse_record(lines.next().unwrap());
    let col = |n: &str| header.iter().position(|h| h == n).unwrap();
    let recs: Vec<Vec<String>> = lines.map(replay_report::parse_record).collect();
    let get = |id: &str, section: &str, name: &str| {
        recs.iter()
            .find(|f| {
                f[col("ID")] == id
                    && f[col("Section Name")] == section
                    && f[col("Metric Name")] == name
            })
            .map(|f| {
                (
                    f[col("Metric Unit")].clone(),
                    f[col("Metric Value")].clone(),
                )
            })
    };
    let sol = "GPU Speed Of Light Throughput";
    assert_eq!(
        get("0", sol, "Duration"),
        Some(("ns".into(), "3,000".into()))
    );
    assert_eq!(
        get("1", sol, "Duration"),
        Some(("ns".into(), "11,000".into()))
    );
    assert_eq!(
        get("0", sol, "SM Frequency"),
        Some(("hz".into(), "1,980,000,000".into()))
    );
    assert_eq!(
        get("0", "Warp State Statistics", "Avg. Active Threads Per Warp"),
        Some((String::new(), "32".into()))
    );
    // Not collectable through CUPTI: absent, not 0.
    assert_eq!(get("0", "Occupancy", "Block Limit Registers"), None);
    assert_eq!(get("0", "Launch Statistics", "Waves Per SM"), None);
    // The raw metrics follow under "raw".
    assert!(get("1", "raw", "smsp__inst_executed.sum").is_some());
    // The dispatch ids stay in a column of ours.
    assert!(recs
        .iter()
        .any(|f| f[col("ID")] == "1" && f[col("Dispatch ID")] == "11"));
    // Without sections (a plain --metrics list) the file is the raw layout.
    let plain = parse(&s(&[
        "--tool",
        "counters",
        "--metrics",
        "gpu__time_duration.sum",
        "--",
        "app",
    ]))
    .unwrap();
    let o = counters_output(&plain, &tool, Some(&out)).unwrap().unwrap();
    assert!(o.written.unwrap().is_ok());
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with(replay_report::CSV_HEADER));
    assert!(!text.contains("GPU Speed Of Light Throughput"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_html_out_gets_the_page_with_the_section_rows() {
    let a = parse(&s(&[
        "--tool", "counters", "--set", "full", "--out", "k.html", "--", "app",
    ]))
    .unwrap();
    assert!(check_out(&a).is_ok());
    let tool = full_set_report(&a.metric_list());
    let d = std::env::temp_dir().join(format!("kreplay-html-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let out = d.join("k.html");
    let o = counters_output(&a, &tool, Some(&out)).unwrap().unwrap();
    assert_eq!(o.written.unwrap().unwrap(), replay_report::Format::Html);
    let page = std::fs::read_to_string(&out).unwrap();
    assert_eq!(page.matches("<tr data-dispatch=").count(), 2, "{page}");
    // The table's key values and each dispatch's sections come from the section rows.
    assert!(page.contains(">SM %</th>"), "{page}");
    let d11 = &page[page.find("<details id=\"d-11\"").unwrap()..];
    assert!(
        d11.contains("<tr><td>Duration</td><td>ns</td><td class=\"num\">11,000</td>"),
        "{d11}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn sections_and_ncu_sets_expand_to_their_raw_metrics() {
    let a = parse(&s(&[
        "--tool",
        "counters",
        "--section",
        "LaunchStats",
        "--section",
        "MemoryWorkloadAnalysis",
        "--",
        "app",
    ]))
    .unwrap();
    let m = a.metric_list();
    assert_eq!(m[0], "launch__block_size");
    assert!(m.contains(&"l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum".to_string()));
    assert!(!m.iter().any(|x| x.starts_with("device__attribute_")));
    let r = a.resolved_sections();
    assert_eq!(r.sections, ["LaunchStats", "MemoryWorkloadAnalysis"]);
    let full = parse(&s(&["--tool", "counters", "--set", "full", "--", "app"])).unwrap();
    assert!(full.resolved_sections().not_collectable_line().is_some());
    assert!(full
        .metric_list()
        .contains(&"smsp__warps_eligible.avg.per_cycle_active".into()));
    let e = parse(&s(&[
        "--tool",
        "counters",
        "--section",
        "Nope",
        "--",
        "app",
    ]))
    .unwrap_err();
    assert!(e.contains("SpeedOfLight"), "{e}");
    let e = parse(&s(&["--section", "Occupancy", "--", "app"])).unwrap_err();
    assert!(e.contains("for --tool counters"), "{e}");
}

#[test]
fn parses_the_counters_options() {
    let a = parse(&s(&[
        "--tool",
        "counters",
        "--set",
        "basic",
        "--metrics",
        "dram__bytes_read.sum, l1tex__t_sectors.sum",
        "--",
        "app",
    ]))
    .unwrap();
    let m = a.metric_list();
    assert_eq!(m[0], "launch__grid_size");
    assert_eq!(m.iter().filter(|x| *x == "dram__bytes_read.sum").count(), 1);
    assert_eq!(m.last().unwrap(), "l1tex__t_sectors.sum");
    let e = parse(&s(&["--tool", "counters", "--", "app"])).unwrap_err();
    assert!(e.contains("needs --metrics LIST or --set NAME"), "{e}");
    let e = parse(&s(&["--tool", "counters", "--set", "all", "--", "app"])).unwrap_err();
    assert!(e.contains("expected one of basic"), "{e}");
    let e = parse(&s(&["--metrics", "a.sum", "--", "app"])).unwrap_err();
    assert!(e.contains("for --tool counters, not verify"), "{e}");
    assert!(parse(&s(&["--tool", "counters", "--metrics", " , ", "--", "app"])).is_err());
}

#[test]
fn a_sets_metrics_the_chip_lacks_are_left_out_and_named_ones_are_not() {
    let ffma = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum";
    let bad = vec![(
        ffma.to_string(),
        "not among the chip's SASS metrics".to_string(),
    )];
    let set = parse(&s(&["--tool", "counters", "--set", "basic", "--", "app"])).unwrap();
    let names = set.metric_list();
    let rest = without_unavailable_set_metrics(&set, &names, "GH100", &bad).unwrap();
    assert_eq!(rest.len(), names.len() - 1);
    assert!(!rest.iter().any(|m| m == ffma));
    // Asked for by name (too): an error, as without a set.
    let named = parse(&s(&[
        "--tool",
        "counters",
        "--set",
        "basic",
        "--metrics",
        ffma,
        "--",
        "app",
    ]))
    .unwrap();
    let names = named.metric_list();
    assert_eq!(
        without_unavailable_set_metrics(&named, &names, "GH100", &bad),
        None
    );
    let list = parse(&s(&["--tool", "counters", "--metrics", ffma, "--", "app"])).unwrap();
    assert_eq!(
        without_unavailable_set_metrics(&list, &list.metric_list(), "GH100", &bad),
        None
    );
    // Nothing would remain: an error.
    let all_bad: Vec<(String, String)> = set
        .metric_list()
        .into_iter()
        .map(|m| (m, "no".to_string()))
        .collect();
    assert_eq!(
        without_unavailable_set_metrics(&set, &set.metric_list(), "GH100", &all_bad),
        None
    );
}

#[test]
fn list_sass_starts_no_program_and_a_mixed_list_parses() {
    let a = parse(&s(&["--list-sass"])).unwrap();
    assert!(a.list_sass && a.app.is_empty());
    let a = parse(&s(&[
        "--list-sass",
        "--metrics",
        "smsp__inst_executed.sum,sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
    ]))
    .unwrap();
    assert_eq!(a.metric_list().len(), 2);
    let e = parse(&s(&["--list-sass", "--", "app"])).unwrap_err();
    assert!(e.contains("starts no program"), "{e}");
    assert!(parse(&s(&["--list-sass=1"])).is_err());
    // A mixed list (range and SASS metrics) is one --metrics list.
    let a = parse(&s(&[
        "--tool",
        "counters",
        "--metrics",
        "dram__bytes_read.sum,sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
        "--",
        "app",
    ]))
    .unwrap();
    assert_eq!(
        a.metric_list(),
        s(&[
            "dram__bytes_read.sum",
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
        ])
    );
    // Without CUPTI (CI) the listing is one line and status 1.
    if replay_cuda::counters::CuptiProfiler::global().is_err() {
        assert_eq!(list_sass(&parse(&s(&["--list-sass"])).unwrap()), 1);
    }
}

#[test]
fn the_plan_lines_name_the_sass_pass_and_its_api_metrics_after_the_range_groups() {
    use replay_cuda::counters::{
        Config, Group, MetricPlan, Rollup, SassGranularity, SassGroup, SassMetric,
    };
    let plan = MetricPlan {
        chip: "GH100".into(),
        metrics: Vec::new(),
        launch: Vec::new(),
        groups: vec![Group {
            config: Config {
                metrics: s(&["dram__bytes_read.sum"]),
                image: Vec::new(),
                passes: 2,
                handle: 0,
            },
            first_pass: 0,
        }],
        sass: Some(SassGroup {
            first_pass: 2,
            metrics: vec![SassMetric {
                name: "sm__sass_thread_inst_executed_op_ffma_pred_on.sum".into(),
                api_name: "smsp__sass_thread_inst_executed_op_ffma_pred_on".into(),
                id: 7,
                rollup: Rollup::Sum,
            }],
            granularity: SassGranularity::Gpu,
            sentinel: None,
        }),
        passes: 3,
        single_config_passes: 2,
    };
    assert_eq!(
        plan_lines(&plan),
        s(&[
            "pass 0-1: dram__bytes_read.sum",
            "pass 2: sm__sass_thread_inst_executed_op_ffma_pred_on.sum (SASS smsp__sass_thread_inst_executed_op_ffma_pred_on)"
        ])
    );
}

/// Runs `kreplay run --tool counters --metrics METRICS -- sh -c 'touch MARKER'` in a
/// fresh directory named after `tag`: the exit status and whether the program started.
fn run_counters_touching_a_marker(tag: &str, metrics: &str) -> (u8, bool) {
    let dir = std::env::temp_dir().join(format!("kreplay-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("started");
    let code = main(&s(&[
        "--tool",
        "counters",
        "--metrics",
        metrics,
        "--",
        "sh",
        "-c",
        &format!("touch {}", marker.display()),
    ]));
    let started = marker.exists();
    let _ = std::fs::remove_dir_all(&dir);
    (code, started)
}

#[test]
fn a_mixed_counter_list_is_compiled_before_the_program_starts() {
    // A SASS metric an H200 has (GH100's SASS Metrics API has no per-opcode thread counts).
    let (code, started) = run_counters_touching_a_marker(
        "mixed",
        "smsp__inst_executed.sum,smsp__sass_inst_executed.sum",
    );
    // Here (no GPU) CUPTI or the driver is missing: 1 and no start; with them the list
    // compiles (a range group and the SASS pass) and the program runs.
    match code {
        1 => assert!(!started, "the program must not start"),
        0 => assert!(started),
        c => panic!("exit status {c}: the list was refused"),
    }
}

#[test]
fn a_counter_list_that_cannot_be_compiled_never_starts_the_program() {
    let (code, started) = run_counters_touching_a_marker("counters", "no__such_metric.sum");
    // Here (no GPU) CUPTI or the driver is missing: 1; with them the metric is unknown: 2.
    assert!(code == 1 || code == 2, "{code}");
    assert!(!started, "the program must not start");
}

#[test]
fn a_bad_value_names_its_option() {
    let e = parse(&s(&["--passes", "-1", "--", "app"])).unwrap_err();
    assert!(
        e.contains("--passes \"-1\"") && e.contains("a whole number of at least 1"),
        "{e}"
    );
    let e = parse(&s(&["--ranks", "1,x", "--", "app"])).unwrap_err();
    assert!(e.contains("--ranks") && e.contains("\"x\""), "{e}");
    let e = parse(&s(&["--out", "r-%x.json", "--", "app"])).unwrap_err();
    assert!(e.contains("--out") && e.contains("%x"), "{e}");
    let e = parse(&s(&["--tool", "fast", "--", "app"])).unwrap_err();
    assert!(
        e.contains("--tool") && e.contains("verify, timing, counters"),
        "{e}"
    );
    let e = parse(&s(&["--frob", "--", "app"])).unwrap_err();
    assert!(e.contains("unknown option \"--frob\""), "{e}");
    // A repeated option: the last one counts; --metrics adds up.
    let a = parse(&s(&[
        "--tool",
        "timing",
        "--tool",
        "counters",
        "--metrics",
        "a.sum",
        "--metrics",
        "b.sum,c.sum",
        "--check-launches",
        "--ranks",
        "0,2-3",
        "app",
        "--passes",
        "x",
    ]))
    .unwrap();
    assert_eq!(a.tool, "counters");
    assert_eq!(a.metrics, s(&["a.sum", "b.sum", "c.sum"]));
    assert!(a.check_launches);
    assert_eq!(a.ranks.as_deref(), Some("0,2-3"));
    assert_eq!(
        a.app,
        s(&["app", "--passes", "x"]),
        "the program's own arguments"
    );
    assert!(!a.passes_given && a.passes == 3);
}

#[test]
fn parses_options_and_program() {
    let a = parse(&s(&[
        "--tool",
        "timing",
        "--passes=5",
        "--out",
        "r.csv",
        "--",
        "app",
        "-x",
    ]))
    .unwrap();
    assert_eq!(a.tool, "timing");
    assert_eq!(a.passes, 5);
    assert_eq!(a.out, Some(PathBuf::from("r.csv")));
    assert_eq!(a.app, s(&["app", "-x"]));
    assert!(parse(&s(&["--tool", "nonsense", "--", "app"])).is_err());
    assert!(parse(&s(&["--passes", "0", "--", "app"])).is_err());
    assert!(parse(&s(&["--tool", "verify"])).is_err());
}

#[test]
fn clock_control_defaults_to_base_for_counters_only() {
    use replay_cuda::counters::clocks::ClockControl;
    let c = parse(&s(&[
        "--tool",
        "counters",
        "--set",
        "basic",
        "--backend",
        "cuda",
        "--",
        "app",
    ]))
    .unwrap();
    assert_eq!(c.clock_control(), (ClockControl::Base, false));
    let v = parse(&s(&["--", "app"])).unwrap();
    assert_eq!(v.clock_control(), (ClockControl::None, false));
    let n = parse(&s(&[
        "--tool",
        "counters",
        "--set",
        "basic",
        "--clock-control",
        "none",
        "--",
        "app",
    ]))
    .unwrap();
    assert_eq!(n.clock_control(), (ClockControl::None, true));
    let b = parse(&s(&[
        "--tool",
        "timing",
        "--clock-control",
        "base",
        "--",
        "app",
    ]))
    .unwrap();
    assert_eq!(b.clock_control(), (ClockControl::Base, true));
    let e = parse(&s(&[
        "--clock-control",
        "base",
        "--backend",
        "hsa",
        "--",
        "app",
    ]))
    .unwrap_err();
    assert!(e.contains("not on --backend hsa"), "{e}");
}

/// Two processes of a job, ranks 0 and 1, whose reports hold `tool`'s counters (pids 4242
/// and 4243).
fn two_ranks_collected(tool: &serde_json::Value) -> crate::collect::Collector {
    let dir = std::env::temp_dir().join(format!("kreplay-ranks-col-{}", std::process::id()));
    let mut col = crate::collect::Collector::new(&dir);
    for (pid, rank) in [(4242u32, 0u64), (4243, 1)] {
        let mut report = tool.clone();
        report["counters"]["process_id"] = pid.into();
        report["process"] = serde_json::json!({"process": pid, "rank": rank});
        let mut p = crate::collect::Process::default();
        p.pid = pid;
        p.header = serde_json::json!({"process": pid, "rank": rank});
        p.report = Some(report);
        col.procs.insert(pid, p);
    }
    col
}

#[test]
fn two_processes_counters_share_each_output_with_both_ranks() {
    let tool = full_set_report(&["gpu__time_duration.sum".to_string()]);
    let col = two_ranks_collected(&tool);
    let d = std::env::temp_dir().join(format!("kreplay-ranks-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    for ext in ["csv", "json", "html"] {
        let out = d.join(format!("c.{ext}"));
        let a = parse(&s(&[
            "--tool",
            "counters",
            "--metrics",
            "gpu__time_duration.sum",
            "--out",
            out.to_str().unwrap(),
            "--",
            "app",
        ]))
        .unwrap();
        output::report(&a, 2, &col, 4242, None);
        let text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{ext}: {e}"));
        match ext {
            "csv" => {
                let mut lines = text.lines();
                let header = replay_report::parse_record(lines.next().unwrap());
                let col = |n: &str| header.iter().position(|h| h == n).unwrap();
                let who: Vec<String> = lines
                    .map(replay_report::parse_record)
                    .map(|f| {
                        format!(
                            "{}:{}:{}",
                            f[col("Process ID")],
                            f[col("Rank")],
                            f[col("Process Dispatch ID")]
                        )
                    })
                    .collect();
                assert_eq!(who, ["4242:0:3", "4242:0:11", "4243:1:3", "4243:1:11"]);
            }
            "json" => {
                let r = replay_report::from_json(&text).unwrap();
                assert_eq!(r.origins(), [(4242, Some(0)), (4243, Some(1))], "{text}");
                assert_eq!(r.dispatches.len(), 4);
            }
            _ => {
                assert!(text.contains(">Rank</th>"), "{text}");
                assert!(
                    text.contains("rank 0 (pid 4242), rank 1 (pid 4243)"),
                    "{text}"
                );
            }
        }
    }
    // A per-process template gives each rank a file of its own, still with its rank.
    let out = d.join("c.%q{RANK}.csv");
    let a = parse(&s(&[
        "--tool",
        "counters",
        "--metrics",
        "gpu__time_duration.sum",
        "--out",
        out.to_str().unwrap(),
        "--",
        "app",
    ]))
    .unwrap();
    let mut col = col;
    for (pid, rank) in [(4242u32, "0"), (4243, "1")] {
        let p = col.procs.get_mut(&pid).unwrap();
        p.header["env"] = serde_json::json!({ "RANK": rank });
    }
    output::report(&a, 2, &col, 4242, None);
    for rank in ["0", "1"] {
        let text = std::fs::read_to_string(d.join(format!("c.{rank}.csv"))).unwrap();
        let rows: Vec<Vec<String>> = text.lines().map(replay_report::parse_record).collect();
        let at = rows[0].iter().position(|h| h == "Rank").unwrap();
        assert!(rows[1..].iter().all(|f| f[at] == rank), "{text}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_ranks_collective_timeout_warnings_are_said_again_at_the_end() {
    let tool =
        serde_json::json!({"collective_timeout": {"warnings": ["one replay window took 400.0 s"]}});
    let col = two_ranks_collected(&serde_json::json!({"counters": {}}));
    assert_eq!(output::collective_lines(&col), "");
    let mut col = col;
    col.procs.get_mut(&4243).unwrap().report = Some(tool);
    assert_eq!(
        output::collective_lines(&col),
        "kreplay run: warning: process 4243 (rank 1): one replay window took 400.0 s\n"
    );
}
