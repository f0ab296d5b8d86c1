//! What the one shared object links (SPEC §2: `libkernel_replay`, which `kreplay run` preloads
//! into every application; §12: the tools' output writers sit above the backends): no crate
//! the library depends on, with every feature on, depends on `replay-report` (the writers,
//! SQLite among them) or names SQLite itself. The counter collector inside the library uses
//! the report's types from `replay-report-types`, below the backends.
//!
//! Read from the workspace's manifests (normal dependencies only: `[dependencies]`,
//! `[dependencies.NAME]` and the `[target.*]` forms; dev- and build-dependencies never reach
//! the library), so it fails before anything is built. `replay-ffi`'s `no_sqlite` test checks
//! the built library itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

/// A manifest's package name and the names of its normal dependencies (optional ones
/// included: a feature may turn each on).
fn manifest(text: &str) -> (String, BTreeSet<String>) {
    let mut name = String::new();
    let mut deps = BTreeSet::new();
    let mut section = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || t.is_empty() {
            continue;
        }
        if let Some(s) = t.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = s.trim().to_owned();
            // `[dependencies.NAME]` / `[target.'cfg(..)'.dependencies.NAME]`: one dependency.
            // (`dev-dependencies.NAME` and `build-dependencies.NAME` match neither form.)
            if let Some((_, dep)) = section.rsplit_once(".dependencies.") {
                deps.insert(dep.to_owned());
            } else if let Some(dep) = section.strip_prefix("dependencies.") {
                deps.insert(dep.to_owned());
            }
            continue;
        }
        let Some((key, value)) = t.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if section == "package" && key == "name" {
            name = value.trim().trim_matches('"').to_owned();
        }
        let normal = section == "dependencies"
            || (section.starts_with("target.") && section.ends_with(".dependencies"));
        if normal {
            // `NAME = ..` or `NAME.workspace = true` (no manifest renames with `package =`).
            let dep = key.split('.').next().unwrap_or(key).trim_matches('"');
            deps.insert(dep.to_owned());
        }
    }
    (name, deps)
}

/// Every workspace crate's normal dependencies, by package name.
fn workspace() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for dir in ["crates", "examples"] {
        let Ok(entries) = std::fs::read_dir(root().join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(text) = std::fs::read_to_string(e.path().join("Cargo.toml")) else {
                continue;
            };
            let (name, deps) = manifest(&text);
            if !name.is_empty() {
                out.insert(name, deps);
            }
        }
    }
    out
}

/// The crates `from` reaches through normal dependencies, itself included, with the path by
/// which each was first reached.
fn closure(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeMap<String, String> {
    let mut seen = BTreeMap::from([(from.to_owned(), from.to_owned())]);
    let mut todo = vec![from.to_owned()];
    while let Some(c) = todo.pop() {
        let via = seen[&c].clone();
        for d in graph.get(&c).into_iter().flatten() {
            if !seen.contains_key(d) {
                seen.insert(d.clone(), format!("{via} -> {d}"));
                todo.push(d.clone());
            }
        }
    }
    seen
}

#[test]
fn the_shared_object_reaches_neither_the_writers_nor_sqlite() {
    let graph = workspace();
    let reach = closure(&graph, "replay-ffi");
    // The scan must see the library's real dependencies, or the check below proves nothing.
    for want in [
        "replay-cuda",
        "replay-hsa",
        "replay-core",
        "replay-report-types",
    ] {
        assert!(reach.contains_key(want), "replay-ffi reaches {reach:?}");
    }
    let banned = ["replay-report", "rusqlite", "libsqlite3-sys"];
    let found: Vec<&String> = banned.iter().filter_map(|b| reach.get(*b)).collect();
    assert!(
        found.is_empty(),
        "libkernel_replay would link the report writers or SQLite: {found:?}"
    );
    // Where SQLite belongs: the command line's output step.
    let cli = closure(&graph, "kreplay");
    assert!(cli.contains_key("rusqlite"), "kreplay reaches {cli:?}");
}

#[test]
fn manifests_are_read_by_section() {
    let text = r#"
[package]
name = "a"
[dependencies]
b.workspace = true
c = { path = "../c", optional = true }
[dependencies.d]
version = "1"
[target.'cfg(unix)'.dependencies]
e = "1"
[dev-dependencies]
f.workspace = true
[dev-dependencies.g]
version = "1"
[build-dependencies]
h = "1"
[target.'cfg(unix)'.dependencies.i]
version = "1"
[target.'cfg(unix)'.dev-dependencies.j]
version = "1"
"#;
    let (name, deps) = manifest(text);
    assert_eq!(name, "a");
    let want: BTreeSet<String> = ["b", "c", "d", "e", "i"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(deps, want);
}
