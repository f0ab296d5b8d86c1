//! `kreplay report FILE --html OUT` (SPEC §12): the HTML report of a saved counters JSON,
//! the page `kreplay run --tool counters --out OUT.html` writes, made afterwards.
//!
//! FILE is the JSON `--out FILE.json` wrote (a `replay_report::CounterReport`), or the
//! library's whole JSON report, whose member `counters` holds one. The JSON does not say
//! which sections were asked, so the section rows are those of every Nsight Compute section
//! `replay_cuda::counters::display` knows, each row whose raw metrics FILE holds (a row whose
//! inputs are missing is left out, as in the sections CSV). OUT must end in `.html` or
//! `.htm`; it is written through a temporary file renamed into place
//! (`replay_report::write_counters_with`).

use std::path::{Path, PathBuf};

use replay_report::{CounterReport, Format, ReportError};

use crate::cli::ReportArgs;

/// Why `kreplay report` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReportCmdError {
    /// FILE could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// FILE.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// FILE is not a counters JSON.
    #[error("{}: not a counters report: {source}", path.display())]
    Parse {
        /// FILE.
        path: PathBuf,
        /// What the parser said.
        #[source]
        source: ReportError,
    },
    /// OUT does not name an HTML file.
    #[error("--html {}: the page's name must end in .html or .htm", .0.display())]
    NotHtml(PathBuf),
    /// Writing the page failed (or the report contradicts itself).
    #[error(transparent)]
    Write(ReportError),
}

impl ReportCmdError {
    /// The exit status: 2 for what the command line named wrongly, 1 for a failed write.
    pub fn exit_code(&self) -> u8 {
        match self {
            ReportCmdError::Read { .. }
            | ReportCmdError::Parse { .. }
            | ReportCmdError::NotHtml(_) => 2,
            ReportCmdError::Write(_) => 1,
        }
    }
}

/// The report in `text`: a `CounterReport`, or a tool report with a `counters` member.
fn parse(path: &Path, text: &str) -> Result<CounterReport, ReportCmdError> {
    let err = |source| ReportCmdError::Parse {
        path: path.to_path_buf(),
        source,
    };
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| err(e.into()))?;
    match replay_report::from_tool_report(&v) {
        Some(r) => r.map_err(err),
        None => serde_json::from_value(v).map_err(|e| err(e.into())),
    }
}

/// Writes the page; returns the number of dispatches it shows.
pub fn run(a: &ReportArgs) -> Result<usize, ReportCmdError> {
    if Format::of(&a.html).ok() != Some(Format::Html) {
        return Err(ReportCmdError::NotHtml(a.html.clone()));
    }
    let text = std::fs::read_to_string(&a.file).map_err(|source| ReportCmdError::Read {
        path: a.file.clone(),
        source,
    })?;
    let report = parse(&a.file, &text)?;
    let all: Vec<&str> = replay_cuda::counters::display::DISPLAY
        .iter()
        .map(|s| s.id)
        .collect();
    let rows = replay_cuda::counters::display::section_rows(&report, &all);
    replay_report::write_counters_with(&a.html, &report, Some(&rows))
        .map_err(ReportCmdError::Write)?;
    Ok(report.dispatches.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use replay_report::{CounterDispatch, CounterSample, MetricInfo};

    fn report() -> CounterReport {
        let metric = |name: &str| MetricInfo {
            name: name.into(),
            unit: String::new(),
            description: String::new(),
            pass: 0,
        };
        CounterReport {
            process_name: "app".into(),
            metrics: vec![
                metric("gpu__time_duration.sum"),
                metric("gpc__cycles_elapsed.max"),
            ],
            dispatches: vec![CounterDispatch {
                dispatch_id: 5,
                kernel: "_Z4fillPf".into(),
                kernel_demangled: "fill<A&B>(float*)".into(),
                device: 0,
                context: 1,
                stream: 7,
                grid: [4, 1, 1],
                block: [128, 1, 1],
                passes: 2,
                snapshot_bytes: 0,
                start_ns: 0,
                end_ns: 0,
                pass_ns: Vec::new(),
                graph: None,
                node: None,
                graph_launch: None,
                phases: None,
                origin: None,
            }],
            samples: vec![
                CounterSample {
                    dispatch_id: 5,
                    pass: 0,
                    metric: "gpu__time_duration.sum".into(),
                    value: 4_321.0,
                },
                CounterSample {
                    dispatch_id: 5,
                    pass: 0,
                    metric: "gpc__cycles_elapsed.max".into(),
                    value: 8_000.0,
                },
            ],
            ..CounterReport::default()
        }
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kreplay-report-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_saved_counters_json_becomes_the_page_with_its_section_rows() {
        let d = dir("ok");
        // Both forms: the --out JSON and the library's report with its `counters` member.
        let plain = replay_report::to_json(&report()).unwrap();
        let whole = serde_json::json!({ "counters": report() }).to_string();
        for (i, text) in [plain, whole].iter().enumerate() {
            let file = d.join(format!("c{i}.json"));
            std::fs::write(&file, text).unwrap();
            let a = ReportArgs {
                file,
                html: d.join(format!("c{i}.html")),
            };
            assert_eq!(run(&a).unwrap(), 1);
            let page = std::fs::read_to_string(&a.html).unwrap();
            assert!(page.contains("<tr data-dispatch=\"5\">"), "{page}");
            assert!(page.contains("fill&lt;A&amp;B&gt;(float*)"));
            // The Speed Of Light rows its metrics give, though the JSON does not say which
            // sections were asked.
            assert!(
                page.contains("<h3>GPU Speed Of Light Throughput</h3>"),
                "{page}"
            );
            assert!(page.contains(
                "<tr><td>Elapsed Cycles</td><td>cycle</td><td class=\"num\">8,000</td><td>0</td></tr>"
            ));
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn bad_inputs_are_refused_with_their_exit_status() {
        let d = dir("bad");
        let file = d.join("c.json");
        std::fs::write(&file, "{\"not\": \"a report\"}").unwrap();
        let a = ReportArgs {
            file: file.clone(),
            html: d.join("c.html"),
        };
        let e = run(&a).unwrap_err();
        assert!(matches!(e, ReportCmdError::Parse { .. }), "{e}");
        assert_eq!(e.exit_code(), 2);
        assert!(!a.html.exists());
        let e = run(&ReportArgs {
            file: d.join("missing.json"),
            html: d.join("c.html"),
        })
        .unwrap_err();
        assert!(matches!(e, ReportCmdError::Read { .. }), "{e}");
        std::fs::write(&file, replay_report::to_json(&report()).unwrap()).unwrap();
        let e = run(&ReportArgs {
            file,
            html: d.join("c.csv"),
        })
        .unwrap_err();
        assert!(e.to_string().contains("must end in .html"), "{e}");
        assert_eq!(e.exit_code(), 2);
        let _ = std::fs::remove_dir_all(&d);
    }
}
