//! The crate's layout (issue 12): every source file names its role and SPEC section in its top
//! doc, and no file uses a file that uses it, directly or through others.

use std::collections::BTreeMap;
use std::path::Path;

// The scan is shared (std only, so it is included by path: replay-tests depends on this crate).
#[path = "../../replay-tests/src/layout.rs"]
#[allow(dead_code)]
mod layout;

/// Crate-root re-exports, mapped to the file that defines them.
const REEXPORTS: &[(&str, &str)] = &[
    ("classify", "classify"),
    ("Treatment", "classify"),
    ("MemoryEngine", "engine"),
    ("ModuleVariable", "modules"),
    ("ModuleVariables", "modules"),
    ("NoModuleVariables", "modules"),
    ("Tracker", "tracker"),
];

/// The files of `src/` other than `lib.rs`, by module name, with their text.
fn sources() -> BTreeMap<String, String> {
    layout::sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), false)
}

/// Which file each file uses.
fn edges(files: &BTreeMap<String, String>) -> layout::Graph {
    layout::edges(files, REEXPORTS)
}

/// A path of files that comes back to its start, if there is one.
fn cycle(graph: &layout::Graph) -> Option<Vec<String>> {
    layout::cycle(graph)
}

#[test]
fn no_file_uses_a_file_that_uses_it() {
    let files = sources();
    assert!(files.contains_key("engine") && files.contains_key("tracker"));
    let graph = edges(&files);
    assert!(
        graph["engine"].contains("tracker"),
        "the scan sees the engine's use of the tracker: {graph:?}"
    );
    if let Some(c) = cycle(&graph) {
        panic!("files use each other in a circle: {}", c.join(" -> "));
    }
}

#[test]
fn every_file_names_its_role_and_spec_section() {
    for (name, text) in sources() {
        let doc: String = text
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            doc.contains('§'),
            "{name}.rs: the top doc names no SPEC section: {doc:?}"
        );
    }
}

#[test]
fn the_scan_sees_a_circle() {
    let files: BTreeMap<String, String> = [
        ("a", "use crate::b::X;"),
        ("b", "use crate::{c, d::Y};"),
        ("c", "/// Like [`crate::Tracker`]."),
        ("tracker", "//! Links back to [`super::a`]."),
        ("d", ""),
    ]
    .into_iter()
    .map(|(n, t)| (n.to_string(), t.to_string()))
    .collect();
    let c = cycle(&edges(&files)).expect("a -> b -> c -> tracker -> a");
    assert_eq!(c, ["a", "b", "c", "tracker", "a"]);
    let acyclic: BTreeMap<String, String> = [("a", "use crate::b;"), ("b", "")]
        .into_iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    assert_eq!(cycle(&edges(&acyclic)), None);
}
