//! The device code compiles with NVRTC and its cubins have the symbols the backend relies on.
//! Needs only libnvrtc (no GPU, no driver); skipped where NVRTC cannot be loaded (CI). The
//! bench's CUDA sources are compiled by `replay-bench`'s `tests/nvrtc.rs`.

use replay_cuda::module::elf::{self, EM_CUDA, STT_FUNC};
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
fn digest_kernels_compile_to_a_cubin() {
    if !nvrtc() {
        return;
    }
    let cubin = compile_cubin(kernels::DIGEST_SOURCE, "kr_digest.cu", ARCH, &[]).unwrap();
    let img = elf::parse(&cubin).unwrap();
    assert_eq!(img.machine, EM_CUDA);
    let f = functions(&img);
    assert!(f.iter().any(|n| n == kernels::DIGEST_SEG), "{f:?}");
    assert!(f.iter().any(|n| n == kernels::DIGEST_FIN), "{f:?}");
    assert!(
        img.global_symbols().is_empty(),
        "the digest module has no globals"
    );
}
