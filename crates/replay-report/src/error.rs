//! The writers' errors (SPEC §12): each names the file and what went wrong, so `kreplay run`
//! prints one clear line and a tool author can match on the kind.

use std::path::PathBuf;

use replay_report_types::InconsistentReport;

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The output path's extension names no format.
    #[error(
        "{}: unknown output format {ext:?} (expected .csv, .json, .db, .sqlite, .sqlite3, .html or .htm)",
        path.display()
    )]
    UnknownFormat {
        /// The path asked for.
        path: PathBuf,
        /// Its extension ("" when it has none).
        ext: String,
    },
    /// Creating, writing or renaming the file failed.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// SQLite refused to open, create or fill the database.
    #[error("cannot write the rocpd database {}: {source}", path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
    /// The report contradicts itself (a collector's bug); nothing is written.
    #[error("the counter report is inconsistent: {0}")]
    Inconsistent(String),
    /// Serializing or parsing the JSON form failed.
    #[error("counter report JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// [`crate::CounterReport::check`]'s finding, as the writers report it.
impl From<InconsistentReport> for ReportError {
    fn from(e: InconsistentReport) -> Self {
        ReportError::Inconsistent(e.0)
    }
}
