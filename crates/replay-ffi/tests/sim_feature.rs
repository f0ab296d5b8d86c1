//! The simulator's C entries (`kreplay_sim_*`) are behind the default-on `sim` feature
//! (issue 12). The library this test run built exports every one the header declares when the
//! feature is on, none when it is off; a `--no-default-features` build, made here in a target
//! directory of its own (so the library the other tests load is untouched), exports the rest
//! of the C ABI and no `kreplay_sim_*`, and its dependency graph has no replay-mock.
//!
//! Exports are read from the shared object's dynamic symbol table (a small ELF64 reader, so no
//! tool is needed).

#![cfg(target_os = "linux")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

/// The functions `include/kernel_replay.h` declares (`kreplay_*` names followed by `(`).
fn header_functions() -> BTreeSet<String> {
    let header = std::fs::read_to_string(repo_root().join("include/kernel_replay.h"))
        .expect("the header is readable");
    let mut out = BTreeSet::new();
    for (at, _) in header.match_indices("kreplay_") {
        if at > 0 && header.as_bytes()[at - 1].is_ascii_alphanumeric() {
            continue;
        }
        let name: String = header[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if header[at + name.len()..].starts_with('(') && !name.ends_with("_t") {
            out.insert(name);
        }
    }
    out
}

fn u16_at(b: &[u8], at: usize) -> usize {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap()) as usize
}
fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}
fn u64_at(b: &[u8], at: usize) -> usize {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize
}

/// The defined symbols of a little-endian ELF64 shared object's `.dynsym` (what `nm -D
/// --defined-only` lists).
fn exported(so: &Path) -> BTreeSet<String> {
    let b = std::fs::read(so).unwrap_or_else(|e| panic!("{} is readable: {e}", so.display()));
    assert!(
        b.len() > 64 && &b[..4] == b"\x7fELF" && b[4] == 2 && b[5] == 1,
        "{} is not a little-endian ELF64 object",
        so.display()
    );
    let (shoff, shentsize, shnum) = (u64_at(&b, 0x28), u16_at(&b, 0x3a), u16_at(&b, 0x3c));
    let section = |i: usize| shoff + i * shentsize;
    let mut out = BTreeSet::new();
    for i in 0..shnum {
        let sh = section(i);
        const SHT_DYNSYM: usize = 11;
        if u32_at(&b, sh + 4) != SHT_DYNSYM {
            continue;
        }
        let (offset, size, entsize) = (u64_at(&b, sh + 0x18), u64_at(&b, sh + 0x20), 24);
        let strtab = u64_at(&b, section(u32_at(&b, sh + 0x28)) + 0x18);
        for sym in (offset..offset + size).step_by(entsize) {
            // st_shndx 0: undefined (imported), not exported.
            if u16_at(&b, sym + 6) == 0 {
                continue;
            }
            let name = strtab + u32_at(&b, sym);
            let end = b[name..].iter().position(|&c| c == 0).unwrap() + name;
            out.insert(String::from_utf8_lossy(&b[name..end]).into_owned());
        }
    }
    assert!(!out.is_empty(), "{} has no dynamic symbols", so.display());
    out
}

/// The `libkernel_replay.so` cargo built for this test run (next to the test executable).
fn this_runs_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let deps = exe.parent().expect("the test executable is in a directory");
    [deps, deps.parent().unwrap_or(deps)]
        .iter()
        .map(|d| d.join("libkernel_replay.so"))
        .find(|p| p.exists())
        .expect("cargo built libkernel_replay.so before this test")
}

fn split(names: &BTreeSet<String>) -> (BTreeSet<String>, BTreeSet<String>) {
    names
        .iter()
        .filter(|n| n.starts_with("kreplay_"))
        .cloned()
        .partition(|n| n.starts_with("kreplay_sim_"))
}

#[test]
fn this_runs_library_exports_the_simulator_entries_exactly_with_the_sim_feature() {
    let (sim_declared, _) = split(&header_functions());
    assert!(sim_declared.len() >= 20, "too few parsed: {sim_declared:?}");
    let (sim_exported, _) = split(&exported(&this_runs_library()));
    if cfg!(feature = "sim") {
        assert_eq!(sim_exported, sim_declared);
    } else {
        assert!(sim_exported.is_empty(), "{sim_exported:?}");
    }
}

#[test]
fn a_build_without_default_features_has_no_simulator_entries_and_no_replay_mock() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    // What the library links, without building anything.
    let tree = |extra: &[&str]| {
        let out = Command::new(&cargo)
            .current_dir(repo_root())
            .args([
                "tree",
                "-p",
                "replay-ffi",
                "-e",
                "normal",
                "--prefix",
                "none",
            ])
            .args(extra)
            .output()
            .expect("cargo tree runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        tree(&[]).contains("replay-mock"),
        "the default library links replay-mock"
    );
    let lean = tree(&["--no-default-features"]);
    assert!(!lean.contains("replay-mock"), "{lean}");

    // Its own target directory: a cdylib of another feature set would overwrite the one the
    // other tests load (cargo gives both the same path). Kept between runs, so only the first
    // builds; no debug info and unoptimised dependencies keep that build short.
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("replay-ffi-no-default-features");
    let out = Command::new(&cargo)
        .current_dir(repo_root())
        .args([
            "build",
            "-p",
            "replay-ffi",
            "--lib",
            "--no-default-features",
        ])
        .arg("--target-dir")
        .arg(&target)
        .args(["--config", "profile.dev.debug=0"])
        .args(["--config", "profile.dev.package.\"*\".opt-level=0"])
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("cargo build runs");
    assert!(
        out.status.success(),
        "cargo build --no-default-features failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let so = target.join("debug/libkernel_replay.so");
    let (sim, rest) = split(&exported(&so));
    assert!(sim.is_empty(), "exported without the sim feature: {sim:?}");
    let (_, declared_rest) = split(&header_functions());
    assert_eq!(rest, declared_rest, "the rest of the C ABI is exported");
}
