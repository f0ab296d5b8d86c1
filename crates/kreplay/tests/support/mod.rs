//! What the end-to-end tests against the fake CUDA driver share: the fake driver
//! (`replay-cuda`'s `tests/fake_driver/fake_inject.c` over its `fake_cuda*.c`) and its
//! application built in a fresh folder, and the `libkernel_replay.so` this crate's
//! dev-dependency built.

#![allow(dead_code)] // each test binary uses its own part

use std::path::PathBuf;
use std::process::Command;

#[path = "../../../replay-cuda/tests/support/fake_sources.rs"]
mod fake_sources;
use fake_sources::{fake_driver_sources, FAKE_DRIVER_DIR as FAKE};

pub fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Builds the fake driver (`libcuda.so.1`) and the application (`app`, linked with `-lcuda`)
/// in a fresh folder named after `prefix`, the process and `tag`; `None` without a compiler.
pub fn build(prefix: &str, tag: &str) -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).ok()?;
    let lib = dir.join("libcuda.so.1");
    let ok = Command::new(cc())
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .args(["-Wl,-soname,libcuda.so.1", "-Wl,-Bsymbolic"])
        .args(fake_driver_sources(true))
        .args(["-lpthread", "-ldl"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("skipped: could not compile the fake driver with {}", cc());
        return None;
    }
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).ok()?;
    let ok = Command::new(cc())
        .args(["-O1", "-o"])
        .arg(dir.join("app"))
        .arg(format!("{FAKE}/inject_app.c"))
        .arg(format!("-L{}", dir.display()))
        .args(["-lcuda", "-ldl"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "the fake driver compiled, so the application must");
    Some(dir)
}

/// The shared object this crate's dev-dependency built, checked to have the CUDA entries.
pub fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let deps = exe.parent().expect("deps folder");
    let lib = [
        deps.join("libkernel_replay.so"),
        deps.join("../libkernel_replay.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect("libkernel_replay.so beside the test (replay-ffi dev-dependency)");
    let bytes = std::fs::read(&lib).expect("read the library");
    assert!(
        bytes.windows(19).any(|w| w == b"InitializeInjection"),
        "{} lacks the cuda feature's entries",
        lib.display()
    );
    lib
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
