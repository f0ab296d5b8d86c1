//! The fake CUDA driver's C sources (`replay-cuda`'s `tests/fake_driver/`), listed once for
//! every test build that compiles them, in this crate and in `kreplay`'s tests (which include
//! this file by its path): the driver API by family in `fake_cuda*.c`, compiled together, and
//! for the interception's driver `fake_inject.c` over them.

use std::ffi::OsString;
use std::path::PathBuf;

/// The folder of the fake driver's sources (both crates are in `crates/`).
pub const FAKE_DRIVER_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../replay-cuda/tests/fake_driver"
);

/// The C compiler's arguments that name the fake driver's sources: every `fake_cuda*.c` of
/// the folder (sorted), and with `inject` also `fake_inject.c` and the define it is built with.
pub fn fake_driver_sources(inject: bool) -> Vec<OsString> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(FAKE_DRIVER_DIR)
        .expect("the fake driver's folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("fake_cuda") && n.ends_with(".c"))
        })
        .collect();
    files.sort();
    let mut args = Vec::new();
    if inject {
        args.push("-DFAKE_CUDA_INJECT".into());
        args.push(PathBuf::from(FAKE_DRIVER_DIR).join("fake_inject.c").into());
    }
    args.extend(files.into_iter().map(OsString::from));
    args
}
