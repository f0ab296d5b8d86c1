//! ARCHITECTURE.md's role × backend table is true of the tree: every file it names exists, and
//! every file of a backend named after a role is the one its row names for that backend (a
//! `tracker.rs` that is not the tracker, say, fails here).

use std::path::{Path, PathBuf};

const BACKENDS: [&str; 3] = ["replay-mock", "replay-hsa", "replay-cuda"];
const ROLES: [&str; 11] = [
    "agent",
    "memory",
    "queue",
    "tracker",
    "module",
    "intercept",
    "tool",
    "state",
    "standalone",
    "sys",
    "result",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The table's rows: the role names of the first cell, then one cell per backend.
fn rows() -> Vec<(Vec<String>, Vec<String>)> {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let start = doc
        .find("## Roles × backends")
        .expect("ARCHITECTURE.md has the role × backend table");
    let mut rows = Vec::new();
    for line in doc[start..].lines().skip(1) {
        if line.starts_with("## ") {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | role | mock | hsa | cuda |  →  ["", role, mock, hsa, cuda, ""]
        if cells.len() != 6 || !cells[1].starts_with('`') {
            continue;
        }
        let head = cells[1].split('(').next().unwrap();
        let roles = names(head).into_iter().map(|(_, n)| n).collect();
        rows.push((roles, cells[2..5].iter().map(|c| c.to_string()).collect()));
    }
    rows
}

/// The backticked names of `text`, each with whether it stands inside parentheses.
fn names(text: &str) -> Vec<(bool, String)> {
    let (mut out, mut depth, mut tick, mut cur) = (Vec::new(), 0, false, String::new());
    for c in text.chars() {
        match c {
            '`' if tick => {
                out.push((depth > 0, std::mem::take(&mut cur)));
                tick = false;
            }
            '`' => tick = true,
            _ if tick => cur.push(c),
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
    }
    out
}

/// The paths a cell names under its crate's `src/`: a folder's parenthesised files are inside
/// it; other parenthesised files are beside the role's.
fn paths(cell: &str) -> Vec<String> {
    let mut dir: Option<String> = None;
    let mut out = Vec::new();
    for (inner, n) in names(cell) {
        if !(n.ends_with(".rs") || n.ends_with('/')) {
            continue;
        }
        if !inner {
            dir = n.ends_with('/').then(|| n.clone());
            out.push(n);
        } else {
            out.push(format!("{}{n}", dir.as_deref().unwrap_or("")));
        }
    }
    out
}

#[test]
fn every_file_the_table_names_exists() {
    let rows = rows();
    assert!(rows.len() >= 9, "the table has a row per role: {rows:?}");
    for (roles, cells) in &rows {
        for (backend, cell) in BACKENDS.iter().zip(cells) {
            for p in paths(cell) {
                let at = root().join("crates").join(backend).join("src").join(&p);
                assert!(at.exists(), "{roles:?} of {backend}: {p} does not exist");
            }
        }
    }
}

#[test]
fn a_file_named_after_a_role_is_that_roles_file() {
    let rows = rows();
    for role in ROLES {
        let (_, cells) = rows
            .iter()
            .find(|(roles, _)| roles.iter().any(|r| r == role))
            .unwrap_or_else(|| panic!("no row for {role}"));
        for (backend, cell) in BACKENDS.iter().zip(cells) {
            let src = root().join("crates").join(backend).join("src");
            let named = paths(cell);
            for file in [format!("{role}.rs"), format!("{role}/")] {
                if src.join(file.trim_end_matches('/')).exists() {
                    assert!(
                        named.contains(&file),
                        "{backend} has src/{file}, but the `{role}` row names {named:?} for it"
                    );
                }
            }
        }
    }
}
