//! The bench's device code compiles with NVRTC, and the backend's ELF reader finds the module
//! globals of a real cubin. Needs only libnvrtc (no GPU, no driver); skipped where NVRTC cannot
//! be loaded (CI).

use replay_cuda::module::compile_cubin_logged;
use replay_cuda::module::elf::{self, STT_FUNC};
use replay_cuda::{compile_cubin, kernels, nvrtc_available};

const ARCH: (i32, i32) = (9, 0); // H100/H200

fn nvrtc() -> bool {
    match nvrtc_available() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

fn functions(img: &elf::ElfImage) -> Vec<String> {
    img.symbols
        .iter()
        .filter(|s| s.kind == STT_FUNC)
        .map(|s| s.name.clone())
        .collect()
}

#[test]
fn bench_kernels_compile() {
    if !nvrtc() {
        return;
    }
    let src = include_str!("../src/kernels.cu");
    let cubin = compile_cubin(src, "kernels.cu", ARCH, &[]).unwrap();
    let img = elf::parse(&cubin).unwrap();
    let f = functions(&img);
    for k in [
        "kr_fill",
        "kr_rmw",
        "kr_read",
        "kr_indirect",
        "kr_spin",
        "kr_tiny",
    ] {
        assert!(f.iter().any(|n| n == k), "{k} in {f:?}");
    }
}

#[test]
fn module_globals_are_found_in_a_real_cubin() {
    if !nvrtc() {
        return;
    }
    let src = include_str!("../src/globals.cu");
    let cubin = compile_cubin(src, "globals.cu", ARCH, &[]).unwrap();
    let img = elf::parse(&cubin).unwrap();
    for s in &img.sections {
        eprintln!("section {:<32} type {:>2} size {}", s.name, s.kind, s.size);
    }
    let g = img.global_symbols();
    for s in &g {
        eprintln!("global {s:?}");
    }
    let by = |n: &str| g.iter().find(|s| s.name.contains(n)).cloned();
    let counter = by("kr_counter").expect("kr_counter");
    assert_eq!((counter.size, counter.read_only), (8, false));
    let table = by("kr_table").expect("kr_table");
    assert_eq!((table.size, table.read_only), (8192, false));
    let hidden = by("kr_hidden").expect("the static variable");
    assert_eq!(hidden.size, 128);
    assert!(!hidden.read_only);
    let c = by("kr_const").expect("kr_const");
    assert!(c.read_only);
    assert_eq!(c.size, 32);
}

#[test]
#[ignore = "prints ptxas resource usage; run by hand"]
fn ptxas_report() {
    if !nvrtc() {
        return;
    }
    for (name, src) in [
        ("kr_digest.cu", kernels::DIGEST_SOURCE),
        ("kernels.cu", include_str!("../src/kernels.cu")),
    ] {
        match compile_cubin_logged(src, name, ARCH, &["--ptxas-options=--verbose"]) {
            Ok((c, log)) => eprintln!("{name}: {} bytes\n{log}", c.len()),
            Err(e) => eprintln!("{name}: {e}"),
        }
    }
}
