//! The crate's file graph, checked: each file imports only files of its own layer or below
//! (`sys`, `result`, `table`; then `state`; then the roles; then the files of `intercept/` (the
//! table wrappers by API family, then `intercept/mod.rs`, which installs them) and `tool`; the
//! crate root last), and no file reaches itself again through the files it imports.
//!
//! An import is any module path in code (comments and strings are skipped): `crate::a::b` (in
//! `use` lines, use groups, full paths and `$crate::` in macros), `super::`, and a path that
//! starts with a child module of the file (`fence::CopyFence` in `tracker/mod.rs`). A path
//! names the file of its longest prefix that is a module. `super::` inside a file's
//! `mod tests` is the file itself. Method calls are not imports: `module::kernels` calls the
//! loader walk `module` defines on [`crate::state::LoaderFns`] without naming `module`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Layers, bottom first; a file not listed fails the test until it is placed.
const LAYERS: &[&[&str]] = &[
    &["sys", "sys::aql", "sys::v1", "sys::v2", "result", "table"],
    &["state"],
    &[
        "queue",
        "tracker",
        "tracker::fence",
        "module",
        "module::kernels",
        "memory",
        "agent",
    ],
    &[
        "intercept::entry",
        "intercept::memory",
        "intercept::vmem",
        "intercept::copy",
        "intercept::code",
        "intercept::queue",
        "intercept",
        "tool",
        "standalone::entries",
        "standalone",
        "layering",
    ],
    &[""],
];

/// Module path (`""` for the root, `a::b`) of every source file under `src`, with its text.
fn modules(src: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            if path.is_dir() {
                let mut p = prefix.to_vec();
                p.push(name);
                walk(&path, &p, out);
                continue;
            }
            let Some(stem) = name.strip_suffix(".rs") else {
                continue;
            };
            let mut p = prefix.to_vec();
            if !(stem == "mod" || (prefix.is_empty() && stem == "lib")) {
                p.push(stem.to_owned());
            }
            out.insert(p.join("::"), std::fs::read_to_string(&path).unwrap());
        }
    }
    let mut out = BTreeMap::new();
    walk(src, &[], &mut out);
    out
}

/// The text without comments and without the contents of string and `'"'` literals.
fn code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        match (in_str, c) {
            (true, '\\') => {
                chars.next();
            }
            (true, '"') => in_str = false,
            (true, _) => {}
            (false, '"') => in_str = true,
            (false, '/') if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            (false, '\'') if chars.peek() == Some(&'"') => {
                chars.next();
                chars.next();
            }
            (false, c) => out.push(c),
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses the use tree at the start of `s` (`a::b`, `a::{b, c::d}`, `a::*`), appending every
/// full path under `prefix` to `out`.
fn tree(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    let mut i = 0;
    let b = s.as_bytes();
    loop {
        while i < b.len() && (b[i] as char).is_whitespace() {
            i += 1;
        }
        if i < b.len() && b[i] == b'{' {
            i += 1;
            loop {
                while i < b.len() && (b[i] == b',' || (b[i] as char).is_whitespace()) {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    return i + 1;
                }
                i += tree(&s[i..], &path, out);
            }
        }
        let start = i;
        while i < b.len() && is_ident(b[i] as char) {
            i += 1;
        }
        let seg = &s[start..i];
        if !seg.is_empty() && seg != "self" {
            path.push(seg.to_owned());
        }
        if s[i..].starts_with("::") {
            i += 2;
            continue;
        }
        if s[i..].starts_with('*') {
            i += 1;
        }
        out.push(path);
        return i;
    }
}

/// The files `module`'s text imports (module paths), itself excluded.
fn imports(module: &str, text: &str, all: &BTreeMap<String, String>) -> BTreeSet<String> {
    let here: Vec<String> = module
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let parent = &here[..here.len().saturating_sub(1)];
    let text = code(text);
    let tests_at = text.find("mod tests {").unwrap_or(text.len());
    let mut paths = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        tree(&text[i + "crate::".len()..], &[], &mut paths);
    }
    for (i, _) in text.match_indices("super::") {
        let base = if i > tests_at { &here[..] } else { parent };
        tree(&text[i + "super::".len()..], base, &mut paths);
    }
    // Paths that start with a child module of this file.
    for child in all.keys().filter_map(|m| {
        let rest = if module.is_empty() {
            m.as_str()
        } else {
            m.strip_prefix(module)?.strip_prefix("::")?
        };
        (!rest.is_empty() && !rest.contains("::")).then_some(rest)
    }) {
        let pat = format!("{child}::");
        for (i, _) in text.match_indices(&pat) {
            let before = text[..i].chars().next_back();
            if before.is_some_and(|c| is_ident(c) || c == ':' || c == '$') {
                continue;
            }
            tree(&text[i..], &here, &mut paths);
        }
    }
    paths
        .into_iter()
        .filter_map(|p| {
            (0..=p.len())
                .rev()
                .map(|n| p[..n].join("::"))
                .find(|m| all.contains_key(m))
        })
        .filter(|m| m != module)
        .collect()
}

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

#[test]
fn files_import_only_lower_layers_and_never_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let all = modules(&src);
    let graph: BTreeMap<&str, BTreeSet<String>> = all
        .iter()
        .map(|(m, text)| (m.as_str(), imports(m, text, &all)))
        .collect();
    let shown: Vec<String> = graph
        .iter()
        .map(|(m, to)| format!("{m:?} -> {to:?}"))
        .collect();
    let shown = shown.join("\n");
    // No file reaches itself: depth-first search for a back edge.
    fn visit<'a>(
        m: &'a str,
        graph: &'a BTreeMap<&str, BTreeSet<String>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|s| *s == m) {
            let mut cycle: Vec<String> = stack[at..].iter().map(|s| s.to_string()).collect();
            cycle.push(m.to_owned());
            return Some(cycle);
        }
        if !done.insert(m) {
            return None;
        }
        stack.push(m);
        for t in &graph[m] {
            if let Some(c) = visit(t, graph, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        if let Some(cycle) = visit(m, &graph, &mut Vec::new(), &mut done) {
            panic!("files import each other: {}\n{shown}", cycle.join(" -> "));
        }
    }
    for (m, to) in &graph {
        let Some(lm) = layer(m) else {
            panic!("{m:?} is in no layer of LAYERS; place it\n{shown}");
        };
        for t in to {
            let lt = layer(t).unwrap_or(usize::MAX);
            assert!(lt <= lm, "{m:?} imports {t:?}, a layer above it\n{shown}");
        }
    }
    // The scan sees imports at all: the interceptor runs the agent and writes through queue.
    let interceptor = &graph["intercept::queue"];
    assert!(interceptor.contains("agent") && interceptor.contains("queue"));
    println!("{shown}");
}
