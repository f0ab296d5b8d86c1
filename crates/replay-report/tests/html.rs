//! The HTML report: its structure from a hand-built report (one row per dispatch, one chart
//! point per dispatch with the roofline's metrics, names escaped, nothing from the network),
//! the roofline's numbers, and the page in a headless browser: with `chromium` (or
//! `chromium-browser`) on PATH its script must run without an error, set `data-ready` to the
//! number of points and sort the table by duration. Without a browser that test prints why it
//! skipped, unless `KREPLAY_REQUIRE_BROWSER=1` (CI sets it), which makes it fail.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{dispatch, metric, sample};
use replay_report::roofline::{rooflines, Precision};
use replay_report::{html, write_counters_with, CounterReport, Format, SectionRow, SectionRows};

const FFMA: &str = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum";
const FADD: &str = "sm__sass_thread_inst_executed_op_fadd_pred_on.sum";
const FMUL: &str = "sm__sass_thread_inst_executed_op_fmul_pred_on.sum";
const DFMA: &str = "sm__sass_thread_inst_executed_op_dfma_pred_on.sum";
const DADD: &str = "sm__sass_thread_inst_executed_op_dadd_pred_on.sum";
const DMUL: &str = "sm__sass_thread_inst_executed_op_dmul_pred_on.sum";

/// A kernel name with every character HTML must escape.
const TEMPLATED: &str = "void gemm<float, 128>(Tile<A&B> const*, \"x\", 'y')";

/// A dispatch of [`report`]: id, duration (ns), DRAM bytes, FP32 FFMA / FADD / FMUL counts,
/// FP64 DFMA / DADD / DMUL counts.
type Run = (u64, f64, f64, Option<[f64; 3]>, Option<[f64; 3]>);

/// Four dispatches: 3 and 11 with FP32 counts (11 the longest), 20 with FP64 counts, and 7
/// (the escaped name) without any FLOP count; device peaks for the ceilings on all of them.
fn report() -> CounterReport {
    let names = [
        (3u64, "saxpy(float, float const*, float*)"),
        (7, TEMPLATED),
        (11, "sgemm_kernel(float*)"),
        (20, "dgemm_kernel(double*)"),
    ];
    let mut metrics = vec![
        metric("gpu__time_duration.sum", "nsecond", 0),
        metric("dram__bytes.sum", "byte", 0),
        metric("dram__bytes.sum.peak_sustained", "byte/cycle", 0),
        metric("dram__cycles_elapsed.avg", "cycle", 0),
        metric("sm__cycles_elapsed.avg", "cycle", 0),
        metric(
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
            "inst/cycle",
            0,
        ),
    ];
    for m in [FFMA, FADD, FMUL, DFMA, DADD, DMUL] {
        metrics.push(metric(m, "inst", 1));
    }
    let mut samples = Vec::new();
    let mut put = |id: u64, m: &str, v: f64| {
        let pass = if m.starts_with("sm__sass_thread_inst_executed_op_")
            && !m.ends_with("peak_sustained")
        {
            1
        } else {
            0
        };
        samples.push(sample(id, pass, m, v));
    };
    let runs: [Run; 4] = [
        (3, 2_000.0, 1.2e6, Some([1e5, 0.0, 0.0]), None),
        (7, 1_000.0, 4096.0, None, None),
        (11, 90_000.0, 8.0e6, Some([4e8, 1e6, 1e6]), None),
        (20, 50_000.0, 2.0e6, None, Some([1e7, 0.0, 0.0])),
    ];
    for (id, ns, bytes, sp, dp) in runs {
        put(id, "gpu__time_duration.sum", ns);
        put(id, "dram__bytes.sum", bytes);
        // H200-like peaks: 64 bytes per DRAM cycle at 2.6 GHz; 16,896 FFMA per SM cycle at
        // 1.98 GHz.
        put(id, "dram__bytes.sum.peak_sustained", 64.0 * 16.0);
        put(id, "dram__cycles_elapsed.avg", 2.6e9 * ns * 1e-9);
        put(id, "sm__cycles_elapsed.avg", 1.98e9 * ns * 1e-9);
        put(
            id,
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
            16_896.0,
        );
        if let Some(v) = sp {
            for (m, x) in [FFMA, FADD, FMUL].iter().zip(v) {
                put(id, m, x);
            }
        }
        if let Some(v) = dp {
            for (m, x) in [DFMA, DADD, DMUL].iter().zip(v) {
                put(id, m, x);
            }
        }
    }
    CounterReport {
        process_id: 77,
        process_name: "bench<&>".into(),
        host_name: "node-a".into(),
        device_name: "NVIDIA H200".into(),
        compute_capability: "9.0".into(),
        chip: "GH100".into(),
        clock_control: String::new(),
        passes: 2,
        metrics,
        dispatches: names
            .iter()
            .map(|(id, k)| dispatch(*id, k, [64, 1, 1], [256, 1, 1], 2))
            .collect(),
        samples,
    }
}

/// Section rows as the counter tool computes them (a few of Speed Of Light's).
fn sections() -> SectionRows {
    let row = |name: &str, unit: &str, value: f64| SectionRow {
        section: "GPU Speed Of Light Throughput".into(),
        name: name.into(),
        unit: unit.into(),
        value,
        passes: vec![0],
    };
    [3u64, 7, 11, 20]
        .iter()
        .map(|id| {
            (
                *id,
                vec![
                    row("Compute (SM) Throughput", "%", 10.0 + *id as f64),
                    row("Duration", "ns", 1000.0 * *id as f64),
                ],
            )
        })
        .collect()
}

/// The text of the element that starts at `open` (its first occurrence) up to `close`.
fn element<'a>(page: &'a str, open: &str, close: &str) -> &'a str {
    let start = page
        .find(open)
        .unwrap_or_else(|| panic!("no {open} in the page"));
    let end = page[start..]
        .find(close)
        .unwrap_or_else(|| panic!("{open} is not closed by {close}"));
    &page[start..start + end + close.len()]
}

/// `data-dispatch` values of the `<circle`s in `svg`, in order.
fn points(svg: &str) -> Vec<(String, String)> {
    svg.match_indices("<circle")
        .map(|(i, _)| {
            let tag = &svg[i..i + svg[i..].find('>').unwrap()];
            let attr = |a: &str| {
                let at = tag
                    .find(&format!("{a}=\""))
                    .unwrap_or_else(|| panic!("{tag} has no {a}"));
                let v = &tag[at + a.len() + 2..];
                v[..v.find('"').unwrap()].to_string()
            };
            (attr("data-dispatch"), attr("data-precision"))
        })
        .collect()
}

#[test]
fn the_page_has_a_row_per_dispatch_and_a_point_per_dispatch_with_the_metrics() {
    let r = report();
    r.check().unwrap();
    let page = html(&r, Some(&sections()));
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.trim_end().ends_with("</html>"));

    let table = element(&page, "<table id=\"kernels-table\"", "</table>");
    let tbody = element(table, "<tbody>", "</tbody>");
    assert_eq!(tbody.matches("<tr data-dispatch=").count(), 4, "{tbody}");
    for id in [3, 7, 11, 20] {
        assert!(
            tbody.contains(&format!("<tr data-dispatch=\"{id}\">")),
            "{id}"
        );
    }
    // Duration by default, longest first; a key section value and the roofline's columns.
    assert!(table.contains("data-default=\"descending\">Duration (ns)</th>"));
    assert!(table.contains(">SM %</th>") && table.contains(">FLOP/s</th>"));
    assert!(tbody.contains("data-v=\"9e4\">90,000</td>"), "{tbody}");
    assert!(tbody.contains(">21</td>"), "SM % of dispatch 11: {tbody}");

    let all = element(
        &page,
        "<svg class=\"roofline\" id=\"roofline-all\"",
        "</svg>",
    );
    let mut got = points(all);
    got.sort();
    let want: Vec<(String, String)> = [("11", "fp32"), ("20", "fp64"), ("3", "fp32")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(
        got, want,
        "one point per dispatch with FLOP counts, none for 7"
    );
    // Ceilings from the peaks: the DRAM roof and the FP32 roof (no FP64 peak was given).
    assert!(all.contains("class=\"roof mem\""), "{all}");
    assert!(all.contains("class=\"roof fp32\""), "{all}");
    assert!(!all.contains("class=\"roof fp64\""), "{all}");
    // 1,024 B/cycle at 2.6 GHz; 2 x 16,896 per cycle at 1.98 GHz.
    assert!(all.contains("DRAM 2.66 TB/s"), "{all}");
    assert!(all.contains("FP32 66.9 TFLOP/s"), "{all}");
    // The FP64 roof is named as missing, with the metric that would give it.
    assert!(page.contains(
        "not collected: <code>sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained</code>"
    ));
    // The dispatch without FLOP counts is listed with the reason.
    let none = element(&page, "<ul class=\"no-point\">", "</ul>");
    assert!(none.contains("data-dispatch=\"7\""), "{none}");
    assert!(none.contains(&format!("not collected: {FFMA}")), "{none}");
    assert!(!none.contains("data-dispatch=\"11\""), "{none}");

    // Each dispatch's own chart holds only its point; 7 has none and says why.
    for (id, prec) in [("3", "fp32"), ("11", "fp32"), ("20", "fp64")] {
        let open = format!("<svg class=\"roofline\" data-of=\"{id}\"");
        let svg = element(&page, &open, "</svg>");
        assert_eq!(points(svg), vec![(id.to_string(), prec.to_string())]);
    }
    assert!(!page.contains("data-of=\"7\""));
    let d7 = element(&page, "<details id=\"d-7\"", "</details>");
    assert!(d7.contains("No roofline point: not collected:"), "{d7}");
    // Sections per dispatch, values with units as the sections CSV has them, then raw.
    let d11 = element(&page, "<details id=\"d-11\"", "</details>");
    assert!(
        d11.contains("<h3>GPU Speed Of Light Throughput</h3>"),
        "{d11}"
    );
    assert!(
        d11.contains(
            "<tr><td>Duration</td><td>ns</td><td class=\"num\">11,000</td><td>0</td></tr>"
        ),
        "{d11}"
    );
    assert!(
        d11.contains("<tr><td>gpu__time_duration.sum</td><td>ns</td><td class=\"num\">90,000</td><td>0</td></tr>"),
        "{d11}"
    );
    assert!(
        d11.contains(&format!(
            "<tr><td>{FFMA}</td><td>inst</td><td class=\"num\">400,000,000</td><td>1</td></tr>"
        )),
        "{d11}"
    );
    assert!(
        d11.contains(&format!(
            "<tr><td>{DFMA}</td><td>inst</td><td class=\"num\">n/a</td><td></td></tr>"
        )),
        "{d11}"
    );
    assert_eq!(page.matches("<details id=\"d-").count(), 4);
}

#[test]
fn every_text_of_the_report_is_escaped() {
    let r = report();
    let page = html(&r, None);
    let escaped =
        "void gemm&lt;float, 128&gt;(Tile&lt;A&amp;B&gt; const*, &quot;x&quot;, &#39;y&#39;)";
    assert!(page.contains(escaped), "the escaped name is in the page");
    assert!(!page.contains("gemm<float"), "no raw <");
    assert!(!page.contains("A&B"), "no raw &");
    assert!(page.contains("<title>kernel-replay counters: bench&lt;&amp;&gt;</title>"));
    // The name appears in the row, its title attribute and the dispatch's summary.
    assert!(page.matches(escaped).count() >= 3);
}

#[test]
fn the_page_names_no_network_resource() {
    for page in [html(&report(), Some(&sections())), html(&report(), None)] {
        let lower = page.to_ascii_lowercase();
        for bad in [
            "http://", "https://", "//cdn", "<link", "src=\"", "@import", "url(",
        ] {
            assert!(!lower.contains(bad), "the page holds {bad:?}");
        }
        assert_eq!(lower.matches("<script>").count(), 1, "one inline script");
        assert_eq!(lower.matches("<style>").count(), 1, "one inline style");
    }
}

#[test]
fn without_section_rows_the_table_shows_raw_metrics_and_without_flop_counts_no_chart() {
    // The ncu_head report: no FLOP counts of both precisions, no dram__bytes.sum.
    let r = common::ncu_head();
    let page = html(&r, None);
    let table = element(&page, "<table id=\"kernels-table\"", "</table>");
    assert!(table.contains(">launch__grid_size</th>"), "{table}");
    assert!(!table.contains(">FLOP/s</th>"), "{table}");
    assert!(!page.contains("<svg"), "no chart without points");
    assert!(!page.contains("<circle"));
    assert!(page.contains("No chart: no dispatch has the metrics"));
    // One line per distinct reason, naming what was not collected.
    let none = element(&page, "<ul class=\"no-point\">", "</ul>");
    assert!(
        none.contains("2 dispatch(es): not collected: dram__bytes.sum"),
        "{none}"
    );
    // The duration column falls back to the passes' GPU time without the metric.
    let mut r = common::repeated_counter();
    r.dispatches[0].pass_ns = vec![[1_000, 1_100], [2_000, 2_120], [3_000, 3_090]];
    let page = html(&r, None);
    assert!(page.contains("data-v=\"1e2\">100</td>"), "the median lap");
}

#[test]
fn the_rooflines_numbers_are_ncus() {
    let r = report();
    let roofs = rooflines(&r);
    let by = |id: u64| roofs.iter().find(|x| x.dispatch_id == id).unwrap();
    let p = by(11).points[0];
    assert_eq!(p.precision, Precision::Single);
    assert_eq!(p.flops, 2.0 * 4e8 + 1e6 + 1e6);
    assert!((p.achieved() - 8.02e8 / 90e-6).abs() < 1.0);
    assert!((p.intensity() - 8.02e8 / 8.0e6).abs() < 1e-9);
    let c = &by(11).ceilings;
    assert!((c.memory.unwrap() - 1024.0 * 2.6e9).abs() < 1e3);
    assert!((c.single.unwrap() - 2.0 * 16_896.0 * 1.98e9).abs() < 1e3);
    assert_eq!(c.double, None);
    assert_eq!(by(20).points[0].precision, Precision::Double);
    assert_eq!(by(20).points[0].flops, 2e7);
    assert!(by(7).points.is_empty());
    assert!(by(7).no_point.as_deref().unwrap().contains(DMUL));
    // Counts of 0: the reason says so, not "not collected".
    let mut z = report();
    for s in &mut z.samples {
        if s.metric.starts_with("sm__sass_thread_inst_executed_op_") && s.dispatch_id == 3 {
            s.value = 0.0;
        }
    }
    let r3 = rooflines(&z)
        .into_iter()
        .find(|x| x.dispatch_id == 3)
        .unwrap();
    assert!(r3.points.is_empty());
    assert!(
        r3.no_point
            .unwrap()
            .contains("no floating-point operation counted"),
        "zero counts"
    );
    // No DRAM traffic: an unbounded intensity, no point.
    let mut z = report();
    for s in &mut z.samples {
        if s.metric == "dram__bytes.sum" && s.dispatch_id == 11 {
            s.value = 0.0;
        }
    }
    let r11 = rooflines(&z)
        .into_iter()
        .find(|x| x.dispatch_id == 11)
        .unwrap();
    assert!(r11.no_point.unwrap().contains("unbounded"));
}

#[test]
fn an_html_path_writes_the_page_by_its_extension() {
    let d = std::env::temp_dir().join(format!("replay-report-html-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    for name in ["r.html", "R.HTM"] {
        let path = d.join(name);
        assert_eq!(Format::of(&path).unwrap(), Format::Html);
        let rows = sections();
        assert_eq!(
            write_counters_with(&path, &report(), Some(&rows)).unwrap(),
            Format::Html
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, html(&report(), Some(&rows)));
    }
    // An inconsistent report writes nothing.
    let mut bad = report();
    bad.samples.push(sample(999, 0, "x", 1.0));
    let path = d.join("bad.html");
    assert!(write_counters_with(&path, &bad, None).is_err());
    assert!(!path.exists());
    let _ = std::fs::remove_dir_all(&d);
}

/// The browser on PATH, if any.
fn browser() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for name in ["chromium", "chromium-browser"] {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Loads `page` headless and returns (the DOM after its scripts ran, the browser's stderr).
/// A browser that has not finished within a minute is killed and the test fails.
fn load(browser: &Path, page: &Path, profile: &Path) -> (String, String) {
    let out_file = profile.with_extension("dom");
    let err_file = profile.with_extension("log");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--disable-extensions",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .expect("the browser starts");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("the browser can be waited for") {
            break s;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} did not finish loading the page within 60 s: {}",
                browser.display(),
                std::fs::read_to_string(&err_file).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let dom = std::fs::read_to_string(&out_file).unwrap();
    let log = std::fs::read_to_string(&err_file).unwrap();
    assert!(
        status.success(),
        "{} exited with {status}: {log}",
        browser.display()
    );
    (dom, log)
}

#[test]
fn the_page_renders_in_a_headless_browser_and_its_script_runs() {
    let Some(browser) = browser() else {
        assert!(
            std::env::var("KREPLAY_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "KREPLAY_REQUIRE_BROWSER=1 is set but neither chromium nor chromium-browser is on PATH"
        );
        eprintln!(
            "no chromium or chromium-browser on PATH; skipping the browser test \
             (set KREPLAY_REQUIRE_BROWSER=1 to make this a failure)"
        );
        return;
    };
    let d = std::env::temp_dir().join(format!("replay-report-browser-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let path = d.join("report.html");
    let rows = sections();
    write_counters_with(&path, &report(), Some(&rows)).unwrap();
    let (dom, log) = load(&browser, &path, &d.join("profile"));
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
        .collect();
    assert!(
        errors.is_empty(),
        "the page logged to the console: {errors:#?}"
    );
    // The script ran to its end: it linked the overview's three points to their rows.
    assert!(
        dom.contains("data-ready=\"3\""),
        "the script did not finish (no data-ready=\"3\" on <body>):\n{dom}"
    );
    // It sorted the table by duration, longest first: 11 (90 us), 20, 3, 7.
    let tbody = element(&dom, "<tbody>", "</tbody>");
    let order: Vec<&str> = tbody
        .match_indices("<tr data-dispatch=\"")
        .map(|(i, m)| {
            let v = &tbody[i + m.len()..];
            &v[..v.find('"').unwrap()]
        })
        .collect();
    assert_eq!(order, ["11", "20", "3", "7"], "{tbody}");
    let dur = element(&dom, "<th data-type=\"num\" title=\"gpu__time", "</th>");
    assert!(dur.contains("aria-sort=\"descending\""), "{dur}");
    // The escaped name came through the parser as text.
    assert!(
        dom.contains("gemm&lt;float, 128&gt;(Tile&lt;A&amp;B&gt;"),
        "{dom}"
    );

    // Clicks, by a script the test adds after the page's: a header sorts by its column
    // (ascending first for text, the other way on the next click), a point opens its
    // dispatch and marks its row.
    let page = std::fs::read_to_string(&path).unwrap();
    let clicks = r#"<script>
(function () {
  var th = document.querySelectorAll('#kernels-table th');
  function order() {
    return Array.prototype.map.call(document.querySelectorAll('#kernels-table tbody tr'),
      function (r) { return r.getAttribute('data-dispatch'); }).join(',');
  }
  th[1].click();
  document.body.setAttribute('data-by-name', order());
  th[1].click();
  document.body.setAttribute('data-by-name-desc', order());
  th[0].click();
  document.body.setAttribute('data-by-id', order());
  document.querySelector('#roofline-all circle[data-dispatch="20"]')
    .dispatchEvent(new MouseEvent('click', {bubbles: true}));
  document.body.setAttribute('data-marked',
    document.querySelector('#kernels-table tr.marked').getAttribute('data-dispatch'));
})();
</script>
</body>"#;
    let clicked = d.join("clicked.html");
    std::fs::write(&clicked, page.replace("</body>", clicks)).unwrap();
    let (dom, log) = load(&browser, &clicked, &d.join("profile3"));
    assert!(!log.contains("Uncaught"), "{log}");
    // Names: dgemm, saxpy, sgemm, void gemm.
    assert!(dom.contains("data-by-name=\"20,3,11,7\""), "{dom}");
    assert!(dom.contains("data-by-name-desc=\"7,11,3,20\""), "{dom}");
    // A number column sorts descending first.
    assert!(dom.contains("data-by-id=\"20,11,7,3\""), "{dom}");
    assert!(dom.contains("data-marked=\"20\""), "{dom}");
    assert!(
        dom.contains("<details id=\"d-20\" data-dispatch=\"20\" open=\"\">"),
        "{dom}"
    );

    // A page with no point still runs its script: data-ready is 0.
    let plain = d.join("plain.html");
    write_counters_with(&plain, &common::ncu_head(), None).unwrap();
    let (dom, log) = load(&browser, &plain, &d.join("profile2"));
    assert!(!log.contains("Uncaught"), "{log}");
    assert!(dom.contains("data-ready=\"0\""), "{dom}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn every_precision_with_work_is_a_point_and_its_ceiling_is_its_fma_peak_at_the_sm_clock() {
    use std::collections::BTreeMap;
    let mut v: BTreeMap<String, f64> = BTreeMap::new();
    let mut put = |m: &str, x: f64| {
        v.insert(m.to_string(), x);
    };
    put("gpu__time_duration.sum", 1_000.0);
    put("dram__bytes.sum", 1.0e6);
    put("dram__bytes.sum.peak_sustained", 1_504.0);
    put("dram__cycles_elapsed.avg.per_second", 3.2e9);
    put("sm__cycles_elapsed.avg.per_second", 1.5e9);
    for (m, x) in [
        (FFMA, 1e6),
        (FADD, 2e5),
        (FMUL, 3e5),
        (DFMA, 0.0),
        (DADD, 0.0),
        (DMUL, 0.0),
        ("sm__sass_thread_inst_executed_op_hfma_pred_on.sum", 1e5),
        ("sm__sass_thread_inst_executed_op_hadd_pred_on.sum", 0.0),
        ("sm__sass_thread_inst_executed_op_hmul_pred_on.sum", 5e4),
        (
            "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
            16_896.0,
        ),
        (
            "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained",
            8_448.0,
        ),
        (
            "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained",
            16_896.0,
        ),
    ] {
        put(m, x);
    }
    let r = replay_report::roofline::roofline(5, &v);
    // FP64 did no work: two points, FP32 then FP16.
    let got: Vec<Precision> = r.points.iter().map(|p| p.precision).collect();
    assert_eq!(got, [Precision::Single, Precision::Half]);
    let sp = r.points[0];
    assert_eq!(sp.flops, 2.0 * 1e6 + 2e5 + 3e5);
    assert!((sp.achieved() - 2.5e6 / 1e-6).abs() < 1.0);
    assert!((sp.intensity() - 2.5).abs() < 1e-12);
    let hp = r.points[1];
    assert_eq!(hp.flops, 2.0 * 1e5 + 5e4);
    let c = &r.ceilings;
    assert!((c.memory.unwrap() - 1_504.0 * 3.2e9).abs() < 1e3);
    assert!((c.single.unwrap() - 2.0 * 16_896.0 * 1.5e9).abs() < 1e3);
    assert!((c.double.unwrap() - 2.0 * 8_448.0 * 1.5e9).abs() < 1e3);
    assert!((c.half.unwrap() - 2.0 * 16_896.0 * 1.5e9).abs() < 1e3);
    assert!(c.missing.is_empty(), "{:?}", c.missing);
    assert_eq!(r.no_point, None);
}
