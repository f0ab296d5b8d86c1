//! Standalone replay of CUDA captures (`replay_cuda::standalone`) against the fake driver
//! (`tests/fake_driver/fake_cuda.c`, whose kernels run on the host at the device addresses):
//! a region recreated at its captured address, a module variable the load placed elsewhere,
//! and one an argument points into. Skipped without a C compiler.

use std::path::PathBuf;
use std::sync::Arc;

use replay_core::{
    AgentId, ArgLayout, Capture, CapturedRegion, CodeImage, DeviceDescription, Dim3, DispatchId,
    DispatchInfo, KernelId, KernelKey, MemoryClass, QueueId, Scope,
};
use replay_cuda::standalone::{replay, StandaloneError};

mod support;
use support::{load_fake, Fake};

/// A captured address no mapping of a test process is near (2 MiB-aligned).
const BASE: u64 = 0x5a5a_0000_0000;
const WORDS: usize = 512;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "replay-cuda-standalone-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn words(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn capture(kernel: &str, kernarg: Vec<u8>, regions: Vec<CapturedRegion>) -> Capture {
    Capture {
        info: DispatchInfo {
            agent: AgentId(0),
            queue: QueueId(0),
            dispatch_id: DispatchId(1),
            kernel_id: KernelId(1),
            kernel_name: Arc::from(kernel),
            grid: Dim3::new(64, 1, 1),
            workgroup: Dim3::new(64, 1, 1),
            private_segment_size: 0,
            group_segment_size: 0,
        },
        kernel: KernelKey {
            agent: AgentId(0),
            code_object: 1,
            symbol: 1,
        },
        kernarg,
        arg_layout: ArgLayout::Known,
        scope: Scope::All,
        pass: 0,
        device: DeviceDescription {
            backend: "cuda".into(),
            device: "fake".into(),
            driver: "fake".into(),
        },
        code: CodeImage {
            format: "ptx".into(),
            module: "test".into(),
            symbol: kernel.into(),
            bytes: b".version 8.4\n".to_vec(),
            launch_attributes: Vec::new(),
        },
        regions,
    }
}

fn written(name: &str, c: &Capture) -> replay_capture::LoadedCapture {
    let d = scratch(name);
    replay_capture::write(&d, c).expect("write");
    replay_capture::read(&d).expect("read")
}

#[test]
fn a_region_is_recreated_at_its_captured_address_and_replays_equal() {
    if load_fake(Fake::Library).is_none() {
        return;
    }
    let input: Vec<u64> = (0..WORDS as u64).map(|i| i * 7 + 1).collect();
    let k = 5u64;
    // kr_rmw: p[i] = p[i] * 6364136223846793005 + (k ^ i).
    let output: Vec<u64> = input
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.wrapping_mul(6364136223846793005)
                .wrapping_add(k ^ i as u64)
        })
        .collect();
    // The argument points inside the region, not at its base: the recreated address must be
    // exactly the captured one.
    let at = BASE + 4096;
    let kernarg = words(&[at, WORDS as u64, k]);
    let mut region_in = vec![0u8; 4096];
    region_in.extend(words(&input));
    let mut region_out = vec![0u8; 4096];
    region_out.extend(words(&output));
    let c = written(
        "rmw",
        &capture(
            "kr_rmw",
            kernarg,
            vec![CapturedRegion {
                base: BASE,
                size: region_in.len() as u64,
                class: MemoryClass::DEVICE_COARSE,
                symbol: None,
                input: region_in,
                output: region_out,
            }],
        ),
    );
    let r = replay(&c, 3).expect("replay");
    assert_eq!(r.outputs.len(), 3);
    assert_eq!(r.seconds.len(), 3);
    for o in &r.outputs {
        assert!(replay_capture::compare_outputs(&c, o).is_empty());
    }
    // Released afterwards: a second replay reserves the same address again.
    assert!(replay(&c, 1).is_ok());
    let _ = std::fs::remove_dir_all(&c.dir);
}

#[test]
fn a_module_variable_loaded_elsewhere_is_written_there_unless_an_argument_points_into_it() {
    if load_fake(Fake::Library).is_none() {
        return;
    }
    // kr_globals(k): kr_table[i] = kr_table[i] * 3 + k + kr_const[i & 3] (kr_const 1..4).
    let k = 9u64;
    let input: Vec<u64> = (0..1024u64).map(|i| i ^ 0x55).collect();
    let output: Vec<u64> = input
        .iter()
        .enumerate()
        .map(|(i, v)| v.wrapping_mul(3) + k + (i as u64 & 3) + 1)
        .collect();
    let table = |kernarg: Vec<u8>| {
        capture(
            "kr_globals",
            kernarg,
            vec![CapturedRegion {
                base: BASE,
                size: 8192,
                class: MemoryClass::MODULE_VARIABLE,
                symbol: Some("kr_table".into()),
                input: words(&input),
                output: words(&output),
            }],
        )
    };
    let c = written("globals", &table(words(&[k])));
    let r = replay(&c, 2).expect("replay");
    assert_eq!(
        r.moved_variables.len(),
        1,
        "the fake's kr_table is elsewhere"
    );
    assert_ne!(r.moved_variables[0].1, BASE);
    for o in &r.outputs {
        assert!(replay_capture::compare_outputs(&c, o).is_empty());
    }
    let _ = std::fs::remove_dir_all(&c.dir);

    // An argument word pointing into it would dangle there: refused naming it.
    let mut kernarg = words(&[k]);
    kernarg.extend(words(&[BASE + 8]));
    let c = written("globals-pointed", &table(kernarg));
    match replay(&c, 1) {
        Err(StandaloneError::Address {
            index, base, why, ..
        }) => {
            assert_eq!((index, base), (0, BASE));
            assert!(
                why.contains("kr_table") && why.contains("points into it"),
                "{why}"
            );
        }
        other => panic!("expected an address error, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&c.dir);
}
