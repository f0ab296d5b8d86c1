//! `libkernel_replay.so` carries no SQLite (SPEC §2: the one shared object, which `kreplay run`
//! preloads into every application). The rocpd writer that needs SQLite is `replay-report`'s,
//! linked into `kreplay`; the backends use the report's types only (`replay-report-types`).
//!
//! The check reads the library this test run built, with whatever features it was built
//! (`cuda`, `hsa`, default), through a small ELF64 reader of its own: the symbol names of
//! `.dynsym` (what it exports) and of `.symtab` (everything linked in: SQLite's C functions
//! are local there, since the library exports only its own entries, and every object file
//! linked leaves a `FILE` symbol named after its crate, `rusqlite.<hash>-cgu.<n>`, even where
//! the linker's garbage collection dropped all its code, as it did when only `replay-cuda`'s
//! use of the report's types brought `rusqlite` in), and the bytes of the whole file for what
//! SQLite leaves: its file header string (the amalgamation's B-tree code holds it, so a
//! stripped library is checked too) and, with debug info, the names of its sources
//! (`sqlite3.c`, `rusqlite`, `libsqlite3-sys`). The same reader, run on this test's own
//! executable, which links SQLite on purpose (`rusqlite` is a dev-dependency), must find it:
//! the check can fail.
//!
//! `KREPLAY_CHECK_LIBRARY=path/to/libkernel_replay.so` checks that library instead of the one
//! this run built (a release build, an installed copy).

use std::path::PathBuf;

fn library() -> PathBuf {
    if let Some(p) = std::env::var_os("KREPLAY_CHECK_LIBRARY") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test executable has a path");
    let deps = exe.parent().expect("the test executable is in a directory");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let lib = dir.join("libkernel_replay.so");
        if lib.exists() {
            return lib;
        }
    }
    panic!("libkernel_replay.so was not found in {}", deps.display());
}

/// ELF section types this reader cares about.
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;

/// The symbol names of one ELF64 little-endian file, by table: `(dynsym, symtab)`. Every
/// offset is bounds-checked; a malformed file is an `Err` naming what was wrong.
fn symbols(elf: &[u8]) -> Result<(Vec<String>, Vec<String>), String> {
    let get = |at: usize, n: usize| {
        elf.get(at..at.checked_add(n).ok_or("offset overflows")?)
            .ok_or_else(|| format!("{n} bytes at {at} lie past the file's end"))
    };
    let u16_at = |at| get(at, 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |at| get(at, 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    let u64_at = |at| {
        get(at, 8).and_then(|b| {
            usize::try_from(u64::from_le_bytes(b.try_into().expect("8 bytes")))
                .map_err(|e| e.to_string())
        })
    };
    if get(0, 6)? != b"\x7fELF\x02\x01" {
        return Err("not a little-endian ELF64 file".into());
    }
    let (shoff, shentsize, shnum) = (u64_at(0x28)?, usize::from(u16_at(0x3a)?), u16_at(0x3c)?);
    if shentsize < 0x40 {
        return Err(format!("section header entries of {shentsize} bytes"));
    }
    let section = |i: usize| -> Result<(u32, usize, usize, usize, usize), String> {
        let h = shoff + i * shentsize;
        // sh_type, sh_offset, sh_size, sh_link, sh_entsize.
        Ok((
            u32_at(h + 4)?,
            u64_at(h + 0x18)?,
            u64_at(h + 0x20)?,
            u32_at(h + 0x28)? as usize,
            u64_at(h + 0x38)?,
        ))
    };
    let (mut dynsym, mut symtab) = (Vec::new(), Vec::new());
    for i in 0..usize::from(shnum) {
        let (kind, off, size, link, entsize) = section(i)?;
        let out = match kind {
            SHT_DYNSYM => &mut dynsym,
            SHT_SYMTAB => &mut symtab,
            _ => continue,
        };
        if entsize < 24 {
            return Err(format!("section {i}: symbols of {entsize} bytes"));
        }
        let (_, str_off, str_size, _, _) = section(link)?;
        let strings = get(str_off, str_size)?;
        for s in 0..size / entsize {
            let name = u32_at(off + s * entsize)? as usize;
            let tail = strings
                .get(name..)
                .ok_or_else(|| format!("section {i}: a name at {name} past its strings"))?;
            let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
            if end > 0 {
                out.push(String::from_utf8_lossy(&tail[..end]).into_owned());
            }
        }
    }
    Ok((dynsym, symtab))
}

/// Byte strings only SQLite's code, data or debug info puts in a file.
const TRACES: [&[u8]; 4] = [
    b"SQLite format 3\0",
    b"sqlite3.c\0",
    b"rusqlite",
    b"libsqlite3-sys",
];

/// What of SQLite `elf` holds: its symbols (C functions `sqlite3_*`, Rust's `rusqlite`
/// items) and which of [`TRACES`] its bytes contain.
fn sqlite_in(elf: &[u8], symbols: &[String]) -> (Vec<String>, Vec<String>) {
    let named: Vec<String> = symbols
        .iter()
        .filter(|s| s.starts_with("sqlite3_") || s.contains("rusqlite"))
        .cloned()
        .collect();
    let traces = TRACES
        .iter()
        .filter(|t| elf.windows(t.len()).any(|w| w == **t))
        .map(|t| String::from_utf8_lossy(t).trim_end_matches('\0').to_owned())
        .collect();
    (named, traces)
}

#[test]
fn the_library_links_no_sqlite() {
    let path = library();
    let elf = std::fs::read(&path).expect("the library is readable");
    let (dynsym, symtab) = symbols(&elf).expect("the library is an ELF64 file");
    // The reader sees the library's exports, so an empty answer below means something.
    assert!(
        dynsym.iter().any(|s| s == "kreplay_version"),
        "{} exports {} symbols, not kreplay_version",
        path.display(),
        dynsym.len()
    );
    let all: Vec<String> = dynsym.iter().chain(&symtab).cloned().collect();
    let (named, traces) = sqlite_in(&elf, &all);
    assert!(
        named.is_empty(),
        "{} links SQLite: {} of its symbols name it, e.g. {:?}",
        path.display(),
        named.len(),
        &named[..named.len().min(5)]
    );
    assert!(
        traces.is_empty(),
        "{} holds SQLite's code, data or debug info: it contains {traces:?}",
        path.display()
    );
    if symtab.is_empty() {
        eprintln!(
            "{}: no .symtab (stripped); checked its exports and SQLite's header string only",
            path.display()
        );
    }
}

#[test]
fn the_check_finds_sqlite_where_it_is_linked() {
    // This executable links SQLite: the call keeps it from being left out by the linker.
    assert!(rusqlite::version_number() >= 3_000_000);
    let exe = std::env::current_exe().expect("the test executable has a path");
    let elf = std::fs::read(&exe).expect("the test executable is readable");
    let (dynsym, symtab) = symbols(&elf).expect("the test executable is an ELF64 file");
    if symtab.is_empty() {
        eprintln!("{}: stripped, nothing to check against", exe.display());
        return;
    }
    let all: Vec<String> = dynsym.into_iter().chain(symtab).collect();
    let (named, _) = sqlite_in(&elf, &all);
    assert!(
        named.iter().any(|s| s == "sqlite3_libversion_number"),
        "the reader found no SQLite in {}, which links it ({} symbols named it)",
        exe.display(),
        named.len()
    );
}

#[test]
fn the_reader_refuses_what_is_not_elf64() {
    assert!(symbols(b"\x7fELF\x01\x01rest").is_err());
    assert!(symbols(b"MZ").is_err());
    // A header whose section table lies past the end.
    let mut h = vec![0u8; 0x40];
    h[..6].copy_from_slice(b"\x7fELF\x02\x01");
    h[0x28..0x30].copy_from_slice(&0x1000u64.to_le_bytes());
    h[0x3a..0x3c].copy_from_slice(&0x40u16.to_le_bytes());
    h[0x3c..0x3e].copy_from_slice(&1u16.to_le_bytes());
    assert!(symbols(&h).is_err());
}
