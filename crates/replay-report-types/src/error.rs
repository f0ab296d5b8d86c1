//! The one error of the types (SPEC §12): a report that contradicts itself, found by
//! [`crate::CounterReport::check`] before anything is written.

/// The counter report contradicts itself (a collector's bug): a dispatch listed twice, a sample
/// of a dispatch the report does not list, or two values for one `(dispatch, pass, metric)`.
/// The message says which.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the counter report is inconsistent: {0}")]
pub struct InconsistentReport(pub String);
