//! Two processes' counter reports merged (`CounterReport::merge`, what `kreplay run` writes
//! for the ranks of a job sharing an output): every output shows both ranks and processes.

mod common;

use common::{dispatch, metric, sample, KERNEL_FILL};
use replay_report::{
    csv, from_json, html, parse_record, sections_csv, table, to_json, CounterReport, SectionRow,
    SectionRows, CSV_HEADER, ORIGIN_COLUMNS,
};

/// One rank's report: two launches of the fill kernel, dispatch ids 3 and 8 (each process
/// numbers its own).
fn rank_report(pid: u32, scale: f64) -> CounterReport {
    CounterReport {
        process_id: pid,
        process_name: "train.py".into(),
        host_name: "node1".into(),
        device_name: "NVIDIA H200".into(),
        compute_capability: "9.0".into(),
        passes: 1,
        metrics: vec![metric("gpu__time_duration.sum", "nsecond", 0)],
        dispatches: vec![
            dispatch(3, KERNEL_FILL, [4, 1, 1], [128, 1, 1], 2),
            dispatch(8, KERNEL_FILL, [4, 1, 1], [128, 1, 1], 2),
        ],
        samples: vec![
            sample(3, 0, "gpu__time_duration.sum", 1_000.0 * scale),
            sample(8, 0, "gpu__time_duration.sum", 2_000.0 * scale),
        ],
        ..CounterReport::default()
    }
}

fn merged() -> CounterReport {
    CounterReport::merge(vec![
        (rank_report(4242, 1.0), Some(0)),
        (rank_report(4243, 3.0), Some(1)),
    ])
    .unwrap()
}

#[test]
fn the_csv_has_each_dispatchs_process_and_rank() {
    let r = merged();
    let text = csv(&r);
    let mut lines = text.lines();
    let header = parse_record(lines.next().unwrap());
    // ncu's columns and ours as before, then the two of a merged report.
    assert_eq!(
        header[..header.len() - 2],
        parse_record(CSV_HEADER.trim_end())[..]
    );
    assert_eq!(header[header.len() - 2..], ORIGIN_COLUMNS);
    let col = |n: &str| header.iter().position(|h| h == n).unwrap();
    let rows: Vec<Vec<String>> = lines.map(parse_record).collect();
    assert_eq!(rows.len(), 4);
    let seen: Vec<(String, String, String, String, String)> = rows
        .iter()
        .map(|f| {
            (
                f[col("ID")].clone(),
                f[col("Process ID")].clone(),
                f[col("Rank")].clone(),
                f[col("Process Dispatch ID")].clone(),
                f[col("Metric Value")].clone(),
            )
        })
        .collect();
    let s = |a: &str, b: &str, c: &str, d: &str, e: &str| {
        (a.into(), b.into(), c.into(), d.into(), e.into())
    };
    assert_eq!(
        seen,
        [
            s("1", "4242", "0", "3", "1,000"),
            s("2", "4242", "0", "8", "2,000"),
            s("3", "4243", "1", "3", "3,000"),
            s("4", "4243", "1", "8", "6,000"),
        ]
    );
    // One process's own report keeps the layout without them.
    assert!(csv(&rank_report(1, 1.0)).starts_with(CSV_HEADER));
    assert!(!csv(&rank_report(1, 1.0)).contains("Rank"));
}

#[test]
fn the_sections_csv_has_them_too() {
    let r = merged();
    let mut rows = SectionRows::new();
    for d in &r.dispatches {
        rows.insert(
            d.dispatch_id,
            vec![SectionRow {
                section: "GPU Speed Of Light Throughput".into(),
                name: "Duration".into(),
                unit: "ns".into(),
                value: 1.0,
                passes: vec![0],
            }],
        );
    }
    let text = sections_csv(&r, &rows);
    let header = parse_record(text.lines().next().unwrap());
    let col = |n: &str| header.iter().position(|h| h == n).unwrap();
    let ranks: Vec<String> = text
        .lines()
        .skip(1)
        .map(parse_record)
        .filter(|f| f[col("Section Name")] != "raw")
        .map(|f| format!("{}:{}", f[col("Process ID")], f[col("Rank")]))
        .collect();
    assert_eq!(ranks, ["4242:0", "4242:0", "4243:1", "4243:1"]);
}

#[test]
fn the_table_has_a_block_per_rank() {
    let t = table(&merged());
    assert!(
        t.contains("2 processes: rank 0 (pid 4242), rank 1 (pid 4243)"),
        "{t}"
    );
    let r0 = t
        .find("rank 0 (pid 4242): void at::")
        .expect("rank 0's block");
    let r1 = t
        .find("rank 1 (pid 4243): void at::")
        .expect("rank 1's block");
    assert!(r0 < r1, "{t}");
    // Each block has its own rank's values: rank 1's are three times rank 0's.
    assert!(
        t[r0..r1].contains("1,000") && t[r0..r1].contains("2,000"),
        "{t}"
    );
    assert!(
        t[r1..].contains("3,000") && t[r1..].contains("6,000"),
        "{t}"
    );
}

#[test]
fn the_json_keeps_each_dispatchs_origin() {
    let r = merged();
    let text = to_json(&r).unwrap();
    assert!(text.contains("\"origin\""), "{text}");
    let back = from_json(&text).unwrap();
    assert_eq!(back, r);
    let o: Vec<_> = back
        .dispatches
        .iter()
        .map(|d| d.origin.map(|o| (o.process, o.rank)))
        .collect();
    assert_eq!(
        o,
        [
            Some((4242, Some(0))),
            Some((4242, Some(0))),
            Some((4243, Some(1))),
            Some((4243, Some(1)))
        ]
    );
}

#[test]
fn the_html_page_has_rank_and_process_columns() {
    let page = html(&merged(), None);
    assert!(page.contains(">Rank</th><th"), "{page}");
    assert!(page.contains(">Process</th>"), "{page}");
    assert!(
        page.contains("rank 0 (pid 4242), rank 1 (pid 4243)"),
        "the header names both"
    );
    // Rank 1's second dispatch: the merged id 4, then its rank and process cells.
    let row = &page[page.find("<tr data-dispatch=\"4\">").unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(
        row.contains(
            "<td class=\"num\" data-v=\"1e0\">1</td><td class=\"num\" data-v=\"4.243e3\">4243</td>"
        ),
        "{row}"
    );
    let d4 = &page[page.find("<details id=\"d-4\"").unwrap()..];
    assert!(d4.contains("rank 1, process 4243 (its dispatch 8)"), "{d4}");
    // One process's own page has neither column.
    let own = html(&rank_report(1, 1.0), None);
    assert!(!own.contains(">Rank</th>"));
}
