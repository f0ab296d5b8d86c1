//! Writing a report to a file chosen by its extension (SPEC §12): what `kreplay run --tool
//! counters --out FILE` calls.

use std::path::Path;

use crate::csv::{csv, sections_csv};
use crate::error::ReportError;
use crate::html::html;
use crate::json::to_json;
use crate::rocpd::{temp_beside, write_rocpd};
use replay_report_types::{CounterReport, SectionRows};

/// The output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `.csv`: Nsight Compute's CSV layout with `Replay Pass`.
    Csv,
    /// `.json`: the report as JSON.
    Json,
    /// `.db`, `.sqlite`, `.sqlite3`: rocpd SQLite.
    Rocpd,
    /// `.html`, `.htm`: one self-contained page ([`html`]).
    Html,
}

impl Format {
    /// The format `path`'s extension names (case-insensitive).
    pub fn of(path: &Path) -> Result<Format, ReportError> {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        match ext.as_str() {
            "csv" => Ok(Format::Csv),
            "json" => Ok(Format::Json),
            "db" | "sqlite" | "sqlite3" => Ok(Format::Rocpd),
            "html" | "htm" => Ok(Format::Html),
            _ => Err(ReportError::UnknownFormat {
                path: path.to_path_buf(),
                ext,
            }),
        }
    }
}

/// Writes `report` to `path` in the format its extension names, replacing any file there;
/// returns the format. The unknown extension is refused before anything is written.
pub fn write_counters(path: &Path, report: &CounterReport) -> Result<Format, ReportError> {
    write_counters_with(path, report, None)
}

/// [`write_counters`], with the rows of Nsight Compute sections when the collection was asked
/// by sections: a `.csv` is then [`sections_csv`] (ncu's section rows, then the raw metrics
/// under the section `raw`) and an `.html` page shows them (its table's key values, each
/// dispatch's sections); JSON and rocpd hold the raw metrics either way.
pub fn write_counters_with(
    path: &Path,
    report: &CounterReport,
    sections: Option<&SectionRows>,
) -> Result<Format, ReportError> {
    let format = Format::of(path)?;
    report.check()?;
    let text = match (format, sections) {
        (Format::Rocpd, _) => return write_rocpd(path, report).map(|()| format),
        (Format::Csv, Some(rows)) => sections_csv(report, rows),
        (Format::Csv, None) => csv(report),
        (Format::Json, _) => to_json(report)?,
        (Format::Html, rows) => html(report, rows),
    };
    let tmp = temp_beside(path);
    let io = |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let result = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io).map(|()| format)
}

/// What `kreplay run` makes of the injected library's JSON report when a counter tool ran.
#[derive(Debug)]
pub struct RunOutput {
    /// The terminal table ([`crate::table()`]).
    pub table: String,
    /// The `--out` file's fate: `None` when none was asked.
    pub written: Option<Result<Format, ReportError>>,
}

/// `kreplay run`'s output step: when `tool_report` has a `counters` member, its table and, if
/// `out` names a file, the file written by [`write_counters`]. `None` when no counter tool ran
/// (the caller keeps its own output); an error when the member does not parse.
pub fn counters_output(
    tool_report: &serde_json::Value,
    out: Option<&Path>,
) -> Option<Result<RunOutput, ReportError>> {
    counters_output_with(tool_report, out, None)
}

/// The function that computes a report's section rows ([`counters_output_with`]).
pub type SectionsOf<'a> = &'a dyn Fn(&CounterReport) -> SectionRows;

/// [`counters_output`] for a collection asked by Nsight Compute sections: `sections` computes
/// the report's section rows, which a `.csv` and an `.html` get ([`write_counters_with`]).
pub fn counters_output_with(
    tool_report: &serde_json::Value,
    out: Option<&Path>,
    sections: Option<SectionsOf<'_>>,
) -> Option<Result<RunOutput, ReportError>> {
    let report = match crate::json::from_tool_report(tool_report)? {
        Ok(r) => r,
        Err(e) => return Some(Err(e)),
    };
    Some(Ok(RunOutput {
        table: crate::table::table(&report),
        written: out.map(|p| {
            let rows = sections.map(|f| f(&report));
            write_counters_with(p, &report, rows.as_ref())
        }),
    }))
}
