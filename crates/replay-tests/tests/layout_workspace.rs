//! The workspace's layout, checked from its sources by the one scanner,
//! `replay_tests::layout`: no source file of any library crate imports a file that imports it,
//! directly or through others (run over each crate's `src/` with comments left out: a doc link
//! is not an import; names a crate root re-exports, `pub use a::{B, C};`, are read from its
//! `lib.rs`, so `crate::B` resolves to the file that defines `B`); then each crate's own rules,
//! one module per crate and one test per rule: the uses its layout is made of (a blind scan
//! would pass anyway), its layers, doc links counted as uses where the crate says so, and every
//! file's top doc naming its SPEC section.

use std::collections::BTreeMap;

use replay_tests::layout;

/// Each library crate's scan result: `(crate, graph)`.
fn graphs() -> Vec<(String, layout::Graph)> {
    let mut dirs: Vec<_> = std::fs::read_dir(layout::crates_dir())
        .expect("crates/ is readable")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("src/lib.rs").is_file())
        .collect();
    dirs.sort();
    dirs.into_iter()
        .map(|dir| {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            (name, layout::code_graph(&dir.join("src"), false))
        })
        .collect()
}

/// `files` as the scanner's input.
fn files(list: &[(&str, &str)]) -> BTreeMap<String, String> {
    list.iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
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
    let got = layout::reexports(lib);
    let want: Vec<(String, String)> = [("B", "a"), ("E", "a"), ("G", "f"), ("I", "h"), ("J", "h")]
        .iter()
        .map(|(n, m)| ((*n).to_owned(), (*m).to_owned()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_circle_between_two_files_is_found() {
    let files = files(&[("a", "use crate::b::X;\n"), ("b", "use crate::a::Y;\n")]);
    let graph = layout::edges(&files, &[]);
    assert!(layout::cycle(&graph).is_some(), "{graph:?}");
}

/// replay-memory: every source file names its role and SPEC section in its top doc, and no
/// file uses a file that uses it, doc links included.
mod replay_memory {
    use super::*;

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
        layout::sources(&layout::crate_src("replay-memory"), false)
    }

    /// Which file each file uses.
    fn edges(files: &BTreeMap<String, String>) -> layout::Graph {
        layout::edges(files, REEXPORTS)
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
        if let Some(c) = layout::cycle(&graph) {
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
        let f = files(&[
            ("a", "use crate::b::X;"),
            ("b", "use crate::{c, d::Y};"),
            ("c", "/// Like [`crate::Tracker`]."),
            ("tracker", "//! Links back to [`super::a`]."),
            ("d", ""),
        ]);
        let c = layout::cycle(&edges(&f)).expect("a -> b -> c -> tracker -> a");
        assert_eq!(c, ["a", "b", "c", "tracker", "a"]);
        let acyclic = files(&[("a", "use crate::b;"), ("b", "")]);
        assert_eq!(layout::cycle(&edges(&acyclic)), None);
    }
}

/// replay-ffi: every source file, the crate root and the folders' files included, names its
/// SPEC section in its top doc, and no file uses a file that uses it, doc links included.
mod replay_ffi {
    use super::*;

    /// Crate-root re-exports of the crate's own items, mapped to the file that defines them.
    const REEXPORTS: &[(&str, &str)] = &[
        ("LibraryClock", "state"),
        ("clock", "state"),
        ("contexts", "state"),
        ("env_policy_errors", "state"),
        ("service", "state"),
    ];

    fn sources() -> BTreeMap<String, String> {
        layout::sources(&layout::crate_src("replay-ffi"), true)
    }

    #[test]
    fn no_file_uses_a_file_that_uses_it() {
        let files = sources();
        for f in [
            "lib",
            "checked",
            "checked::error",
            "entry",
            "sim",
            "sim::state",
        ] {
            assert!(files.contains_key(f), "{f} is scanned: {:?}", files.keys());
        }
        let graph = layout::edges(&files, REEXPORTS);
        let text = layout::render(&graph);
        // The scan sees the uses the layout is made of (a blind scan would pass anyway).
        for (from, to) in [
            ("entry", "checked"),
            ("checked", "checked::error"),
            ("checked::boundary", "checked::error"),
            ("sim", "sim::dispatch"),
            ("sim::dispatch", "sim::module"),
            ("sim::state", "state"),
            ("lib", "entry"),
            // `crate::service()` is defined in state and only re-exported by the root, so a
            // backend file that calls it uses state, not the root above it.
            ("hsa", "state"),
        ] {
            assert!(graph[from].contains(to), "{from} -> {to} is seen:\n{text}");
        }
        if let Some(c) = layout::cycle(&graph) {
            panic!(
                "files use each other in a circle: {}\n{text}",
                c.join(" -> ")
            );
        }
    }

    #[test]
    fn every_file_names_its_role_and_spec_section() {
        let missing = layout::without_spec_section(&sources());
        assert!(
            missing.is_empty(),
            "the top doc of these files names no SPEC section: {missing:?}"
        );
    }
}

/// replay-hsa-sim (SPEC §9.1 for the files' roles): every source file names its role and SPEC
/// section in its top doc, and no file uses a file that uses it, doc links included. The
/// layering: the pools, the table slots and the faults at the bottom, the state above them, the
/// queues and the vmem entries above the state, the C entries and the client on top (the C
/// entries by API family under `entries/`, the tables in its `mod.rs` above them, the panic
/// guard in `entries/boundary.rs` below them).
mod replay_hsa_sim {
    use super::*;

    /// Crate-root re-exports, mapped to the file that defines them (`SimHsa` and `Injector`
    /// are the root's own: the root is not scanned).
    const REEXPORTS: &[(&str, &str)] = &[
        ("Client", "client"),
        ("CodeObject", "code_object"),
        ("LoaderTable", "entries::loader"),
        ("STATUS_NOT_SIMULATED", "table"),
        ("FaultId", "fault"),
        ("FaultMode", "fault"),
        ("SimFault", "fault"),
        ("PoolKind", "pool"),
        ("PROCESSOR_THREAD_PREFIX", "queue"),
        ("ASYNC_THREAD_NAME", "state"),
        ("COPY_THREAD_NAME", "state"),
        ("Dispatch", "state::memory"),
        ("KernelFn", "state::memory"),
        ("MemFault", "state::memory"),
        ("SimConfig", "state::config"),
        ("VariableSpec", "state::config"),
    ];

    /// The files of `src/` other than `lib.rs`, by module name, with their text.
    fn sources() -> BTreeMap<String, String> {
        layout::sources(&layout::crate_src("replay-hsa-sim"), false)
    }

    #[test]
    fn no_file_uses_a_file_that_uses_it() {
        let files = sources();
        for f in ["entries", "queue", "state", "vmem"] {
            assert!(files.contains_key(f), "{f} is scanned: {:?}", files.keys());
        }
        let graph = layout::edges(&files, REEXPORTS);
        let text = layout::render(&graph);
        // The scan sees the uses the layout is made of (a blind scan would pass anyway).
        for (from, to) in [
            ("entries::queues", "queue"),
            ("entries", "vmem"),
            ("entries::memory", "state"),
            ("entries", "entries::memory"),
            ("entries::memory", "entries::boundary"),
            ("queue", "state"),
            ("vmem", "state"),
            ("client", "queue"),
        ] {
            assert!(graph[from].contains(to), "{from} -> {to} is seen:\n{text}");
        }
        if let Some(c) = layout::cycle(&graph) {
            panic!(
                "files use each other in a circle: {}\n{text}",
                c.join(" -> ")
            );
        }
    }

    #[test]
    fn every_file_names_its_role_and_spec_section() {
        let missing = layout::without_spec_section(&sources());
        assert!(
            missing.is_empty(),
            "these files' top docs name no SPEC section: {missing:?}"
        );
    }
}

/// replay-hsa: each file imports only files of its own layer or below (`sys`, `result`,
/// `table`; then `state`; then the roles; then the files of `intercept/` (the table wrappers by
/// API family, then `intercept/mod.rs`, which installs them), `tool` and `standalone/`; the
/// crate root last), and no file reaches itself again through the files it imports. Imports
/// are read from code (comments left out), the root's re-exports resolved to their files.
mod replay_hsa {
    use super::*;

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
        ],
        &[layout::ROOT],
    ];

    #[test]
    fn files_import_only_lower_layers_and_never_each_other() {
        let graph = layout::code_graph(&layout::crate_src("replay-hsa"), true);
        let shown = layout::render(&graph);
        if let Some(c) = layout::cycle(&graph) {
            panic!("files import each other: {}\n{shown}", c.join(" -> "));
        }
        let breaks = layout::layer_breaks(&graph, LAYERS);
        assert!(breaks.is_empty(), "{}\n{shown}", breaks.join("\n"));
        // The scan sees imports at all: the interceptor runs the agent and writes through queue.
        let interceptor = &graph["intercept::queue"];
        assert!(
            interceptor.contains("agent") && interceptor.contains("queue"),
            "{shown}"
        );
    }
}
