//! A crate's layout, checked from its sources: which file uses which, whether any
//! file uses a file that uses it (directly or through others), and whether every file's top
//! doc names its SPEC section.
//!
//! It reads text, not the compiler's view: a file *uses* another when it names it by a path —
//! `crate::a::b`, `super::x`, `self::x`, or a child module it declares (`mod x;`) as `x::` —
//! in `use` lines, inline paths and doc links alike (`{a, b::c}` groups give `a` and `b::c`).
//! A path resolves to the deepest source file it names (`crate::sim::state::X` is
//! `sim::state` when that file exists, else `sim`); a crate-root name goes to the file the
//! caller says re-exports it, else to the root itself when the root is scanned. Inside an
//! inline module of a file (`mod tests { .. }`, at column 0 through the next `}` at column 0,
//! as rustfmt writes it) `super::` is that file.
//!
//! This is the workspace's one layout scanner: `tests/layout_workspace.rs` runs it over every
//! crate's `src/` (a crate's `src/` is [`crate_src`]; no crate needs it as a dependency, the
//! scan reads files), each crate's own rules (edges it must see, layers, top docs) a test
//! function of their own there. Only `std` is used.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The key of the crate root (`lib.rs`) in [`sources`] and [`edges`].
pub const ROOT: &str = "lib";

/// Which files each file uses, by module path (`sim::state`; [`ROOT`] for `lib.rs`).
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The `.rs` files under `src`, by module path (`a`, `a::b`; a folder's `mod.rs` is the
/// folder's module), with their text. `lib.rs` is included as [`ROOT`] when `with_root`.
pub fn sources(src: &Path, with_root: bool) -> BTreeMap<String, String> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{} is readable: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for p in entries {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                let mut sub = prefix.to_vec();
                sub.push(name);
                walk(&p, &sub, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let mut path = prefix.to_vec();
                match name.as_str() {
                    "mod" => {}
                    "lib" | "main" if prefix.is_empty() => path.push(ROOT.to_owned()),
                    _ => path.push(name),
                }
                let text = std::fs::read_to_string(&p).expect("a source file");
                out.insert(path.join("::"), text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, &[], &mut out);
    if !with_root {
        out.remove(ROOT);
    }
    out
}

/// The workspace's `crates/` folder.
pub fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/ holds replay-tests")
        .to_path_buf()
}

/// The `src/` folder of the workspace crate `name` (`replay-memory`).
pub fn crate_src(name: &str) -> PathBuf {
    crates_dir().join(name).join("src")
}

/// `(name, module)` for every name `lib.rs` re-exports from one of its modules with
/// `pub use module::{..}` or `pub use module::Name;` (nested groups flattened; `self` and
/// globs skipped).
pub fn reexports(lib: &str) -> Vec<(String, String)> {
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
pub fn code_only(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The graph of the crate whose sources are under `src`, from code alone (comment lines left
/// out: a doc link is not a use), the names its `lib.rs` re-exports (`pub use a::{B, C};`)
/// resolved to the files that define them. The root takes part when `with_root`.
pub fn code_graph(src: &Path, with_root: bool) -> Graph {
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs is readable");
    let pairs = reexports(&lib);
    let files: BTreeMap<String, String> = sources(src, with_root)
        .into_iter()
        .map(|(m, text)| (m, code_only(&text)))
        .collect();
    let known: Vec<(&str, &str)> = pairs
        .iter()
        .filter(|(_, m)| files.contains_key(m.as_str()))
        .map(|(n, m)| (n.as_str(), m.as_str()))
        .collect();
    edges(&files, &known)
}

/// Where `graph` breaks `layers` (bottom first): a file in no layer, or a file that uses one of
/// a layer above its own. Empty when every file uses only its own layer or those below.
pub fn layer_breaks(graph: &Graph, layers: &[&[&str]]) -> Vec<String> {
    let layer = |m: &str| layers.iter().position(|l| l.contains(&m));
    let mut out = Vec::new();
    for (m, used) in graph {
        let Some(lm) = layer(m) else {
            out.push(format!("{m:?} is in no layer; place it"));
            continue;
        };
        for u in used {
            if layer(u).is_none_or(|lu| lu > lm) {
                out.push(format!("{m:?} uses {u:?}, a layer above it"));
            }
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths written after a prefix at the start of `rest`: `a::b::C` gives `[a, b, C]`,
/// `{a, b::{c, d}}` gives `[a]`, `[b, c]`, `[b, d]`; `*` and nothing give `[]`.
fn paths_at(rest: &str) -> Vec<Vec<String>> {
    let mut segs: Vec<String> = Vec::new();
    let mut s = rest;
    loop {
        let ident: String = s
            .trim_start()
            .chars()
            .take_while(|c| is_ident(*c))
            .collect();
        if ident.is_empty() {
            break;
        }
        s = &s.trim_start()[ident.len()..];
        segs.push(ident);
        match s.strip_prefix("::") {
            Some(after) => s = after,
            None => return vec![segs],
        }
    }
    let Some(group) = s.trim_start().strip_prefix('{') else {
        return vec![segs];
    };
    // The group's elements at depth 0, each parsed again after the common segments.
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                for p in paths_at(&group[start..i]) {
                    out.push(segs.iter().cloned().chain(p).collect());
                }
                return out;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                for p in paths_at(&group[start..i]) {
                    out.push(segs.iter().cloned().chain(p).collect());
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    out
}

/// The child modules a file declares (`mod x;`, `pub(crate) mod x;`).
fn declared_children(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l
                .strip_prefix("pub(crate) ")
                .or(l.strip_prefix("pub "))
                .unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            name.chars().all(is_ident).then(|| name.to_owned())
        })
        .collect()
}

/// Which file each file uses; `reexports` maps crate-root names to the file that defines them.
/// The root takes part when `files` holds [`ROOT`].
pub fn edges(files: &BTreeMap<String, String>, reexports: &[(&str, &str)]) -> Graph {
    let reexport: BTreeMap<&str, &str> = reexports.iter().copied().collect();
    let with_root = files.contains_key(ROOT);
    let module = |name: &str| -> Vec<String> {
        if name == ROOT {
            Vec::new()
        } else {
            name.split("::").map(str::to_owned).collect()
        }
    };
    // The file a path names, relative to `base`; `None` when it names no scanned file.
    let resolve = |base: &[String], segs: &[String]| -> Option<String> {
        let full: Vec<String> = base.iter().chain(segs).cloned().collect();
        for n in (base.len() + 1..=full.len()).rev() {
            let key = full[..n].join("::");
            if files.contains_key(&key) {
                return Some(key);
            }
        }
        if base.is_empty() {
            if let Some(first) = segs.first() {
                if let Some(m) = reexport.get(first.as_str()) {
                    return Some((*m).to_owned());
                }
            }
            return with_root.then(|| ROOT.to_owned());
        }
        Some(base.join("::"))
    };
    files
        .iter()
        .map(|(name, text)| {
            let me = module(name);
            let parent: Vec<String> = me[..me.len().saturating_sub(1)].to_vec();
            let children = declared_children(text);
            // Byte ranges of inline modules (`mod x {` at column 0 through `}` at column 0).
            let mut inline: Vec<(usize, usize)> = Vec::new();
            let mut offset = 0;
            let mut open = None;
            for line in text.split_inclusive('\n') {
                let bare = line.trim_end();
                let item = bare.strip_prefix("pub(crate) ").unwrap_or(bare);
                let item = item.strip_prefix("pub ").unwrap_or(item);
                if open.is_none() && item.starts_with("mod ") && bare.ends_with('{') {
                    open = Some(offset);
                } else if bare == "}" {
                    if let Some(start) = open.take() {
                        inline.push((start, offset + line.len()));
                    }
                }
                offset += line.len();
            }
            if let Some(start) = open {
                inline.push((start, text.len()));
            }
            let bytes = text.as_bytes();
            let mut used = BTreeSet::new();
            for (at, _) in text.match_indices("::") {
                let before = &text[..at];
                let word_start = before
                    .rfind(|c: char| !is_ident(c))
                    .map_or(0, |i| i + before[i..].chars().next().unwrap().len_utf8());
                let word = &before[word_start..];
                // `a::b::c` is one path: only its first `::` starts it.
                if word_start >= 2 && &bytes[word_start - 2..word_start] == b"::" {
                    continue;
                }
                let in_inline = inline.iter().any(|&(a, b)| a <= at && at < b);
                let base: Vec<String> = match word {
                    "crate" => Vec::new(),
                    "super" if in_inline => me.clone(),
                    "super" => parent.clone(),
                    "self" => me.clone(),
                    w if children.contains(w) => {
                        let mut b = me.clone();
                        b.push(w.to_owned());
                        b
                    }
                    _ => continue,
                };
                // `super::super::x` climbs once more per `super::`.
                let (mut base, mut rest) = (base, &text[at + 2..]);
                while let Some(r) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = r;
                }
                let paths = paths_at(rest);
                let paths = if paths.is_empty() {
                    vec![Vec::new()]
                } else {
                    paths
                };
                for p in paths {
                    if let Some(file) = resolve(&base, &p) {
                        used.insert(file);
                    }
                }
            }
            used.remove(name);
            (name.clone(), used)
        })
        .collect()
}

/// A path of files that comes back to its start, if there is one.
pub fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &Graph,
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

/// The files whose top doc (`//!` lines at the start) names no SPEC section (`§`).
pub fn without_spec_section(files: &BTreeMap<String, String>) -> Vec<String> {
    files
        .iter()
        .filter(|(_, text)| {
            !text
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .any(|l| l.contains('§'))
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// The graph as text, one `file -> used, used` line per file, for failure messages and notes.
pub fn render(graph: &Graph) -> String {
    graph
        .iter()
        .map(|(n, used)| {
            let used: Vec<&str> = used.iter().map(String::as_str).collect();
            format!("{n} -> {}\n", used.join(", "))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn nested_modules_resolve_to_the_deepest_file() {
        let f = files(&[
            (ROOT, "mod a;\nmod sim;\npub fn f() { sim::go(); }"),
            ("a", "use crate::sim::state::{T, U};\nuse crate::f;"),
            ("sim", "mod state;\nmod run;\npub use run::go;"),
            ("sim::state", "use super::super::a::X;"),
            (
                "sim::run",
                "use super::state::T;\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
            ),
        ]);
        let g = edges(&f, &[]);
        assert_eq!(g[ROOT], BTreeSet::from(["sim".to_owned()]));
        assert_eq!(
            g["a"],
            BTreeSet::from(["sim::state".to_owned(), ROOT.to_owned()])
        );
        assert_eq!(g["sim"], BTreeSet::from(["sim::run".to_owned()]));
        assert_eq!(g["sim::state"], BTreeSet::from(["a".to_owned()]));
        assert_eq!(
            g["sim::run"],
            BTreeSet::from(["sim::state".to_owned()]),
            "an inline test module's `super` is its own file"
        );
        let c = cycle(&g).expect("a -> lib -> sim -> run -> state -> a");
        assert_eq!(c, ["a", ROOT, "sim", "sim::run", "sim::state", "a"]);
    }

    #[test]
    fn a_child_that_uses_its_parent_is_a_circle() {
        let f = files(&[
            (
                "sim",
                "mod state;\npub(crate) use state::Tables;\nfn x() {}",
            ),
            ("sim::state", "use super::x;"),
        ]);
        let g = edges(&f, &[]);
        assert_eq!(cycle(&g).unwrap(), ["sim", "sim::state", "sim"]);
        let f = files(&[
            ("sim", "mod state;\nmod run;\npub(crate) use state::Tables;"),
            ("sim::state", ""),
            ("sim::run", "use super::state::Tables;\nuse std::sync::Arc;"),
        ]);
        assert_eq!(cycle(&edges(&f, &[])), None, "{}", render(&edges(&f, &[])));
    }

    #[test]
    fn a_use_of_a_higher_layer_breaks_the_layers() {
        let f = files(&[
            ("state", "use crate::queue::Q;"),
            ("queue", "use crate::state::S;"),
            ("tool", "use crate::queue::Q;"),
            ("extra", ""),
        ]);
        let g = edges(&f, &[]);
        let layers: &[&[&str]] = &[&["state"], &["queue"], &["tool"]];
        assert_eq!(
            layer_breaks(&g, layers),
            [
                "\"extra\" is in no layer; place it",
                "\"state\" uses \"queue\", a layer above it",
            ]
        );
    }

    #[test]
    fn files_without_a_spec_section_are_listed() {
        let f = files(&[
            ("a", "//! Role (SPEC §7).\n"),
            ("b", "//! Role.\n\n// §7\n"),
        ]);
        assert_eq!(without_spec_section(&f), ["b"]);
    }
}
