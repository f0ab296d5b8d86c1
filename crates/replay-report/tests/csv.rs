//! The CSV writer against Nsight Compute's own CSV (SPEC §12).

mod common;

use replay_report::{csv, parse_record, CSV_HEADER};

const NCU: &str = include_str!("fixtures/ncu_2025.3_h200_head.csv");
const OURS: &str = include_str!("fixtures/ours_ncu_layout.csv");

#[test]
fn the_csv_is_byte_for_byte_the_expected_file() {
    let got = csv(&common::ncu_head());
    if got != OURS {
        for (i, (g, w)) in got.lines().zip(OURS.lines()).enumerate() {
            assert_eq!(g, w, "line {} differs", i + 1);
        }
        assert_eq!(got.lines().count(), OURS.lines().count(), "line count");
        panic!("line ends differ");
    }
}

#[test]
fn without_the_replay_pass_column_every_line_is_nsight_computes() {
    // The expected file is Nsight Compute's lines with quoted fields appended (pass, graph,
    // node, then the graph launch and the window's phases), so what we write up to `Metric
    // Value` is exactly what ncu wrote for the same launches and values.
    let got = csv(&common::ncu_head());
    let ours: Vec<&str> = got.lines().collect();
    let theirs: Vec<&str> = NCU.lines().collect();
    assert_eq!(ours.len(), theirs.len());
    for (o, t) in ours.iter().zip(&theirs) {
        let mut cut = o.len();
        for _ in 0..3 + replay_report::DISPATCH_COLUMNS.len() {
            cut = o[..cut].rfind(",\"").expect("a last field");
        }
        assert_eq!(&o[..cut], *t);
    }
    let ours: String = replay_report::DISPATCH_COLUMNS
        .iter()
        .map(|c| format!(",\"{c}\""))
        .collect();
    assert_eq!(
        CSV_HEADER.trim_end(),
        format!("{},\"Replay Pass\",\"Graph\",\"Node\"{ours}", theirs[0])
    );
}

#[test]
fn names_with_commas_and_quotes_are_quoted_and_read_back() {
    let mut r = common::ncu_head();
    let odd = "k<\"a\", 1>(int, char const*)";
    r.dispatches[0].kernel_demangled = odd.into();
    r.process_name = "my,app \"v2\"".into();
    let text = csv(&r);
    let line = text.lines().nth(1).unwrap();
    assert!(line.contains("\"my,app \"\"v2\"\"\""), "{line}");
    assert!(
        line.contains("\"k<\"\"a\"\", 1>(int, char const*)\""),
        "{line}"
    );
    let fields = parse_record(line);
    assert_eq!(fields.len(), 30, "{fields:?}");
    assert_eq!(fields[2], "my,app \"v2\"");
    assert_eq!(fields[4], odd);
}

#[test]
fn a_graph_kernel_names_its_graph_and_node_in_the_last_columns() {
    let mut r = common::ncu_head();
    r.dispatches[0].graph = Some(2);
    r.dispatches[0].node = Some(5);
    r.dispatches[0].graph_launch = Some(3);
    let text = csv(&r);
    let header = parse_record(text.lines().next().unwrap());
    assert_eq!(&header[16..19], ["Graph", "Node", "Graph Launch"]);
    let fields = parse_record(text.lines().nth(1).unwrap());
    assert_eq!(&fields[16..19], ["2", "5", "3"]);
    let other = parse_record(text.lines().last().unwrap());
    assert_eq!(&other[16..19], ["", "", ""], "a kernel outside a graph");
}

#[test]
fn every_row_of_a_dispatch_has_its_windows_phases_which_add_up_to_the_window() {
    let mut r = common::ncu_head();
    r.dispatches[1].phases = Some(common::phases());
    let text = csv(&r);
    let mut lines = text.lines();
    let header = parse_record(lines.next().unwrap());
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let at = col("Window Seconds");
    assert_eq!(header.len(), at + 11);
    assert_eq!(
        header[at..],
        replay_report::DISPATCH_COLUMNS[1..],
        "the phase columns close the row"
    );
    let mut with = 0;
    for f in lines.map(parse_record) {
        assert_eq!(f.len(), header.len());
        let phases: Vec<&str> = f[at..].iter().map(String::as_str).collect();
        if f[col("ID")] == "8" {
            with += 1;
            let v: Vec<f64> = phases.iter().map(|p| p.parse().unwrap()).collect();
            assert_eq!(v, common::phases().values());
            // Drain to finish add up to the window; config enter is outside it.
            let sum: f64 = v[1..10].iter().sum();
            assert!((sum - v[0]).abs() < 1e-12, "{v:?}");
        } else {
            assert!(phases.iter().all(|p| p.is_empty()), "{f:?}");
        }
    }
    assert_eq!(with, 10, "one row per metric of launch 8");
}

#[test]
fn the_kernel_name_is_spelled_as_nsight_compute_demangles_it() {
    let mut r = common::ncu_head();
    r.dispatches[0].kernel_demangled = "void at::native::(anonymous namespace)::k<at::native::(anonymous namespace)::f()::{lambda(float)#1}>(int)".into();
    let text = csv(&r);
    let fields = parse_record(text.lines().nth(1).unwrap());
    assert_eq!(
        fields[4],
        "void at::native::<unnamed>::k<at::native::<unnamed>::f()::[lambda(float) (instance 1)]>(int)"
    );
}

#[test]
fn a_metric_several_passes_collected_is_one_row_per_pass_never_a_sum() {
    let text = csv(&common::repeated_counter());
    let rows: Vec<Vec<String>> = text.lines().skip(1).map(parse_record).collect();
    let warps: Vec<(&str, &str)> = rows
        .iter()
        .filter(|f| f[12] == "sm__warps_launched.sum")
        .map(|f| (f[14].as_str(), f[15].as_str()))
        .collect();
    assert_eq!(warps, [("512", "0"), ("512", "1"), ("512", "2")]);
    assert!(!text.contains("1,536"), "{text}");
    // One row per launch, metric and pass: 3 passes of the repeated metric + 3 unique ones.
    assert_eq!(rows.len(), 6);
}

/// Section rows for dispatches 0 and 8 of [`common::ncu_head`], as the counter tool would
/// derive them.
fn head_sections() -> replay_report::SectionRows {
    let row = |section: &str, name: &str, unit: &str, value: f64, passes: &[u32]| {
        replay_report::SectionRow {
            section: section.into(),
            name: name.into(),
            unit: unit.into(),
            value,
            passes: passes.to_vec(),
        }
    };
    let mut rows = replay_report::SectionRows::new();
    rows.insert(
        0,
        vec![
            row(
                "GPU Speed Of Light Throughput",
                "Duration",
                "ns",
                2_144.0,
                &[0],
            ),
            row(
                "Memory Workload Analysis",
                "Memory Throughput",
                "byte/s",
                1_910_447_761.19,
                &[0, 2],
            ),
        ],
    );
    rows.insert(
        8,
        vec![row(
            "Instruction Statistics",
            "Executed Instructions",
            "inst",
            3_308_736.0,
            &[1],
        )],
    );
    rows
}

#[test]
fn the_sections_csv_has_ncus_columns_keyed_by_launch_index_then_the_raw_metrics() {
    let r = common::ncu_head();
    let text = replay_report::sections_csv(&r, &head_sections());
    let mut lines = text.lines();
    let header = parse_record(lines.next().unwrap());
    let ncu_cols = parse_record(NCU.lines().next().unwrap());
    // ncu's fifteen columns first, in its order; ours after.
    assert_eq!(header[..15], ncu_cols[..]);
    assert_eq!(
        header[15..],
        [
            &["Replay Pass", "Graph", "Node", "Dispatch ID", "Passes"][..],
            &replay_report::DISPATCH_COLUMNS[..]
        ]
        .concat()
    );
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let recs: Vec<Vec<String>> = lines.map(parse_record).collect();
    assert!(recs.iter().all(|f| f.len() == header.len()));
    let find = |id: &str, section: &str, metric: &str| {
        recs.iter()
            .filter(|f| {
                f[col("ID")] == id
                    && f[col("Section Name")] == section
                    && f[col("Metric Name")] == metric
            })
            .collect::<Vec<_>>()
    };
    let d = find("0", "GPU Speed Of Light Throughput", "Duration");
    assert_eq!(d.len(), 1);
    assert_eq!(d[0][col("Metric Unit")], "ns");
    assert_eq!(d[0][col("Metric Value")], "2,144");
    assert_eq!(d[0][col("Dispatch ID")], "0");
    assert_eq!(d[0][col("Passes")], "3");
    let bw = find("0", "Memory Workload Analysis", "Memory Throughput");
    assert_eq!(bw[0][col("Metric Value")], "1,910,447,761.19");
    assert_eq!(bw[0][col("Replay Pass")], "0;2");
    // Dispatch 8 is the second launch: ID 1, its own id in our column.
    let e = find("1", "Instruction Statistics", "Executed Instructions");
    assert_eq!(e[0][col("Dispatch ID")], "8");
    assert_eq!(e[0][col("Metric Value")], "3,308,736");
    assert_eq!(e[0][col("Block Size")], "(8, 8, 1)");
    assert_eq!(e[0][col("Grid Size")], "(1024, 1, 1)");
    assert!(find("8", "Instruction Statistics", "Executed Instructions").is_empty());
    // Every raw metric of every launch is there too, under "raw", with the collecting pass.
    let raw = find("1", replay_report::RAW_SECTION, "smsp__inst_executed.sum");
    assert_eq!(raw.len(), 1);
    assert_eq!(raw[0][col("Metric Value")], "3,308,736");
    assert_eq!(raw[0][col("Replay Pass")], "1");
    let raws = recs
        .iter()
        .filter(|f| f[col("Section Name")] == "raw")
        .count();
    // Ten metrics per launch (one without a value: its row says n/a).
    assert_eq!(raws, r.metrics.len() * 2);
    assert_eq!(r.metrics.len(), 10);
    assert!(
        find("0", "raw", "profiler__replayer_bytes_mem_backed_up")[0][col("Metric Value")] == "n/a"
    );
    // A launch without section rows keeps its raw rows; none of its section rows are made up.
    let mut only_first = head_sections();
    only_first.remove(&8);
    let t = replay_report::sections_csv(&r, &only_first);
    assert!(t
        .lines()
        .skip(1)
        .map(parse_record)
        .all(|f| f[col("ID")] == "0" || f[col("Section Name")] == "raw"));
}

#[test]
fn python_reads_the_sections_csv_as_the_comparison_script_does() {
    let Ok(py) = std::process::Command::new("python3")
        .arg("--version")
        .output()
    else {
        eprintln!("no python3: skipped");
        return;
    };
    assert!(py.status.success());
    let d = std::env::temp_dir().join(format!("replay-report-sections-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let path = d.join("k.csv");
    let fmt =
        replay_report::write_counters_with(&path, &common::ncu_head(), Some(&head_sections()))
            .unwrap();
    assert_eq!(fmt, replay_report::Format::Csv);
    // What bench/real/ncu_sections.sh does: the lines starting with a quote, DictReader,
    // keyed by (ID, Section Name, Metric Name), values without thousands separators.
    let script = r#"
import csv, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
by = {}
for r in csv.DictReader(lines):
    by[(int(r["ID"]), r["Section Name"], r["Metric Name"])] = (r["Metric Unit"], float(r["Metric Value"].replace(",", "")) if r["Metric Value"] != "n/a" else None)
print(by[(0, "GPU Speed Of Light Throughput", "Duration")])
print(by[(1, "Instruction Statistics", "Executed Instructions")])
print(by[(0, "raw", "dram__bytes_read.sum")])
print(len({k[0] for k in by}))
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&d);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "('ns', 2144.0)\n('inst', 3308736.0)\n('byte', 4096.0)\n2\n"
    );
}
