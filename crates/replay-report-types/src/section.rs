//! Nsight Compute's section rows of one dispatch (SPEC §12: counters by ncu's sections), as the
//! counter tool derives them from its raw metrics; `replay-report`'s `sections_csv` writes them
//! under ncu's section and metric display names.

/// One row of an Nsight Compute section for one dispatch: what `ncu --set/--section --csv`
/// prints, as the counter tool derived it from its raw metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct SectionRow {
    /// The section's display name (`GPU Speed Of Light Throughput`).
    pub section: String,
    /// The row's label (`Duration`).
    pub name: String,
    /// Its unit (a base unit: `ns`, `hz`, `byte/s`, `%`; empty for counts).
    pub unit: String,
    /// Its value.
    pub value: f64,
    /// The replay passes its raw metrics were collected in, ascending.
    pub passes: Vec<u32>,
}

/// Section rows by dispatch id.
pub type SectionRows = std::collections::BTreeMap<u64, Vec<SectionRow>>;
