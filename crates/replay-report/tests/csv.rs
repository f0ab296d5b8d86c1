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
    // The expected file is Nsight Compute's lines with three quoted fields appended (pass,
    // graph, node), so what we write up to `Metric Value` is exactly what ncu wrote for the
    // same launches and values.
    let got = csv(&common::ncu_head());
    let ours: Vec<&str> = got.lines().collect();
    let theirs: Vec<&str> = NCU.lines().collect();
    assert_eq!(ours.len(), theirs.len());
    for (o, t) in ours.iter().zip(&theirs) {
        let mut cut = o.len();
        for _ in 0..3 {
            cut = o[..cut].rfind(",\"").expect("a last field");
        }
        assert_eq!(&o[..cut], *t);
    }
    assert_eq!(
        CSV_HEADER.trim_end(),
        format!("{},\"Replay Pass\",\"Graph\",\"Node\"", theirs[0])
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
    assert_eq!(fields.len(), 18, "{fields:?}");
    assert_eq!(fields[2], "my,app \"v2\"");
    assert_eq!(fields[4], odd);
}

#[test]
fn a_graph_kernel_names_its_graph_and_node_in_the_last_columns() {
    let mut r = common::ncu_head();
    r.dispatches[0].graph = Some(2);
    r.dispatches[0].node = Some(5);
    let text = csv(&r);
    let fields = parse_record(text.lines().nth(1).unwrap());
    assert_eq!(&fields[16..], ["2", "5"]);
    let other = parse_record(text.lines().last().unwrap());
    assert_eq!(&other[16..], ["", ""], "a kernel outside a graph");
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
