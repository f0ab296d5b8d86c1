//! The crate's layout (issue 12; SPEC §9.1 for the files' roles): every source file names its
//! role and SPEC section in its top doc, and no file uses a file that uses it, directly or
//! through others, doc links included. The layering: the pools, the table slots and the faults
//! at the bottom, the state above them, the queues and the vmem entries above the state, the
//! C entries and the client on top (the C entries by API family under `entries/`, the tables in
//! its `mod.rs` above them, the panic guard in `entries/boundary.rs` below them).

use std::collections::BTreeMap;
use std::path::Path;

// The scan is shared (std only, so it is included by path, as the other crates do).
#[path = "../../replay-tests/src/layout.rs"]
#[allow(dead_code)]
mod layout;

/// Crate-root re-exports, mapped to the file that defines them (`SimHsa` and `Injector` are
/// the root's own: the root is not scanned).
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
    layout::sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), false)
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
