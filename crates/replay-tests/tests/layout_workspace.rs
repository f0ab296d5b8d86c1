//! Every library crate of the workspace keeps the layout of issue 12: no source file imports a
//! file that imports it, directly or through others (the scan of `replay_tests::layout`, run
//! over each crate's `src/` with comments left out: a doc link is not an import; crates whose
//! own layout test holds doc links to the same rule check that themselves). Names a crate root re-exports (`pub use a::{B, C};`) are read from its
//! `lib.rs`, so `crate::B` resolves to the file that defines `B`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use replay_tests::layout;

/// The workspace's `crates/` folder.
fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/ holds this crate")
        .to_path_buf()
}

/// `(name, module)` for every name `lib.rs` re-exports from one of its modules with
/// `pub use module::{..}` or `pub use module::Name;` (nested groups flattened; `self` and
/// globs skipped).
fn reexports(lib: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stmt = String::new();
    let mut open = false;
    for line in lib.lines() {
        let t = line.trim();
        if !open {
            if !t.starts_with("pub use ") {
                continue;
            }
            stmt.clear();
            open = true;
        }
        stmt.push_str(t);
        stmt.push(' ');
        if t.ends_with(';') {
            open = false;
            let body = stmt
                .trim_start_matches("pub use ")
                .trim_end()
                .trim_end_matches(';');
            let Some((module, rest)) = body.split_once("::") else {
                continue;
            };
            let module = module.trim();
            if module == "crate" || module == "self" || module == "super" {
                continue;
            }
            let names = rest.replace(['{', '}'], ",");
            for item in names.split(',') {
                let item = item.trim();
                let last = item.rsplit("::").next().unwrap_or(item);
                let last = last.split(" as ").last().unwrap_or(last).trim();
                if last.is_empty() || last == "*" || last == "self" {
                    continue;
                }
                if last.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    out.push((last.to_owned(), module.to_owned()));
                }
            }
        }
    }
    out
}

/// `text` without its comment lines (`//`, `//!`, `///`), so only code paths count as uses.
fn code_only(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each library crate's scan result: `(crate, graph)`.
fn graphs() -> Vec<(String, layout::Graph)> {
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(crates_dir())
        .expect("crates/ is readable")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("src/lib.rs").is_file())
        .collect();
    dirs.sort();
    for dir in dirs {
        let src = dir.join("src");
        let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs is readable");
        let pairs = reexports(&lib);
        let files: BTreeMap<String, String> = layout::sources(&src, false)
            .into_iter()
            .map(|(m, text)| (m, code_only(&text)))
            .collect();
        let known: Vec<(&str, &str)> = pairs
            .iter()
            .filter(|(_, m)| files.contains_key(m.as_str()))
            .map(|(n, m)| (n.as_str(), m.as_str()))
            .collect();
        let graph = layout::edges(&files, &known);
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        out.push((name, graph));
    }
    out
}

#[test]
fn no_file_of_any_crate_uses_a_file_that_uses_it() {
    let all = graphs();
    // The scan must see the crates and their edges, or the check below proves nothing.
    let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "replay-core",
        "replay-memory",
        "replay-cuda",
        "replay-hsa",
        "replay-ffi",
        "replay-report",
    ] {
        assert!(names.contains(&want), "scanned {names:?}");
    }
    let edges: usize = all
        .iter()
        .map(|(_, g)| g.values().map(|s| s.len()).sum::<usize>())
        .sum();
    assert!(
        edges > 50,
        "the scan found only {edges} uses across the workspace"
    );
    let mut circles = Vec::new();
    for (name, graph) in &all {
        if let Some(c) = layout::cycle(graph) {
            circles.push(format!("{name}: {}", c.join(" -> ")));
        }
    }
    assert!(
        circles.is_empty(),
        "files use each other in a circle:\n{}",
        circles.join("\n")
    );
}

#[test]
fn reexports_are_read_from_pub_use_lines() {
    let lib = "pub use a::{B, c::D as E};\npub use f::G;\npub use h::{\n    I,\n    J,\n};\npub use crate::k::L;\n";
    let got = reexports(lib);
    let want: Vec<(String, String)> = [("B", "a"), ("E", "a"), ("G", "f"), ("I", "h"), ("J", "h")]
        .iter()
        .map(|(n, m)| ((*n).to_owned(), (*m).to_owned()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_circle_between_two_files_is_found() {
    let files: BTreeMap<String, String> = [
        ("a".to_owned(), "use crate::b::X;\n".to_owned()),
        ("b".to_owned(), "use crate::a::Y;\n".to_owned()),
    ]
    .into_iter()
    .collect();
    let graph = layout::edges(&files, &[]);
    assert!(layout::cycle(&graph).is_some(), "{graph:?}");
}
