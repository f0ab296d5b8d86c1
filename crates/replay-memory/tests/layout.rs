//! The crate's layout (issue 12): every source file names its role and SPEC section in its top
//! doc, and no file uses a file that uses it, directly or through others.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

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
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).expect("src/ is readable") {
        let p = e.expect("a directory entry").path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if p.extension().is_some_and(|x| x == "rs") && name != "lib" {
            out.insert(name, std::fs::read_to_string(&p).expect("a source file"));
        }
    }
    out
}

/// The first segments of every `crate::` and `super::` path in `text` (use lines, inline paths
/// and doc links alike; `{a, b::c}` groups give `a` and `b`).
fn named(text: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for prefix in ["crate::", "super::"] {
        for (at, _) in text.match_indices(prefix) {
            let rest = &text[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                out.extend(group.split(',').map(ident));
            } else {
                out.insert(ident(rest));
            }
        }
    }
    out
}

/// Which file each file uses.
fn edges(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let reexport: BTreeMap<&str, &str> = REEXPORTS.iter().copied().collect();
    files
        .iter()
        .map(|(name, text)| {
            let used = named(text)
                .into_iter()
                .map(|n| {
                    reexport
                        .get(n.as_str())
                        .map_or(n.clone(), |m| m.to_string())
                })
                .filter(|n| n != name && files.contains_key(n))
                .collect();
            (name.clone(), used)
        })
        .collect()
}

/// A path of files that comes back to its start, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, graph, done, path) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut done, &mut Vec::new()))
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
