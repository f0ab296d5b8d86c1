//! The library's `dlsym` (feature `cuda`) beside another preloaded interposer: a lookup with
//! `RTLD_NEXT` is answered relative to its caller, as the C library answers it. Without that,
//! an interposer loaded after `libkernel_replay.so` (a tracer, `libfaketime`, a sanitizer's
//! helpers) asking for "the next `getppid`" got its own `getppid` back and recursed.
//!
//! Compiler: `$CC`, else `cc`; skipped when there is none (CI requires it through
//! `KREPLAY_REQUIRE_CXX`, which also names the C compiler's presence).

#![cfg(feature = "cuda")]

use std::path::{Path, PathBuf};
use std::process::Command;

fn library() -> PathBuf {
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

const INTERPOSER: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>
static int depth;
pid_t getppid(void) {
    if (depth++ > 0) _exit(42); /* its own symbol came back: recursion */
    pid_t (*next)(void) = (pid_t (*)(void))dlsym(RTLD_NEXT, "getppid");
    pid_t r = next ? next() : -7;
    depth--;
    return r;
}
"#;

const PROGRAM: &str = r#"
#include <stdio.h>
#include <unistd.h>
int main(void) {
    pid_t p = getppid();
    printf("getppid %d\n", (int)p);
    return p > 0 ? 0 : 1;
}
"#;

fn cc(dir: &Path, src: &str, name: &str, args: &[&str]) -> Option<PathBuf> {
    let c = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let file = dir.join(format!("{name}.c"));
    std::fs::write(&file, src).unwrap();
    let out = dir.join(name);
    let r = Command::new(&c)
        .args(args)
        .arg(&file)
        .arg("-o")
        .arg(&out)
        .arg("-ldl")
        .output();
    match r {
        Ok(o) if o.status.success() => Some(out),
        Ok(o) => panic!(
            "{c} failed on {name}: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(_) => {
            assert!(
                std::env::var("KREPLAY_REQUIRE_CXX").as_deref() != Ok("1"),
                "no C compiler ({c}) although KREPLAY_REQUIRE_CXX=1"
            );
            None
        }
    }
}

#[test]
fn rtld_next_from_an_interposer_loaded_after_the_library_finds_the_next_object() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("replay-ffi-dlsym");
    std::fs::create_dir_all(&dir).unwrap();
    let Some(interposer) = cc(&dir, INTERPOSER, "libinterposer.so", &["-shared", "-fPIC"]) else {
        return;
    };
    let program = cc(&dir, PROGRAM, "getppid_app", &[]).expect("compiled above");
    // Interception on or off, `RTLD_NEXT` is the caller's: both runs must find the C
    // library's entry.
    for intercepting in [false, true] {
        let mut cmd = Command::new(&program);
        cmd.env_remove("LD_LIBRARY_PATH").env(
            "LD_PRELOAD",
            format!("{} {}", library().display(), interposer.display()),
        );
        if intercepting {
            cmd.env("KREPLAY_CUDA_BUILTIN", "verify");
        } else {
            cmd.env_remove("KREPLAY_CUDA_BUILTIN");
        }
        let out = cmd.output().expect("the program runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "interception {intercepting}: status {:?} (42: the interposer got its own symbol \
             back from dlsym(RTLD_NEXT)); output: {text}",
            out.status
        );
        assert!(text.contains("getppid "), "{text}");
    }
}
