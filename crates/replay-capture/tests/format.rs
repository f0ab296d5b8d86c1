//! The capture folder: written and read back equal; every kind of damage refused naming the
//! file; another version refused.

use std::path::{Path, PathBuf};

use replay_capture::{compare_outputs, read, write, FormatError, FORMAT_VERSION, MANIFEST};
use replay_core::{
    AgentId, ArgLayout, Capture, CapturedRegion, CodeImage, DeviceDescription, Dim3, DispatchId,
    DispatchInfo, KernelId, KernelKey, LaunchAttribute, MemoryClass, QueueId, Scope,
};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("replay-capture-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn sample() -> Capture {
    let a = 0x1000_0000u64;
    let b = 0x2000_0000u64;
    let mut kernarg = Vec::new();
    kernarg.extend_from_slice(&(a + 16).to_le_bytes()); // inside a, not at its base
    kernarg.extend_from_slice(&64u64.to_le_bytes()); // a scalar
    kernarg.extend_from_slice(&b.to_le_bytes());
    Capture {
        info: DispatchInfo::new(
            AgentId(0),
            QueueId(0),
            KernelId(3),
            "k",
            Dim3::new(64, 1, 1),
            Dim3::new(64, 1, 1),
        )
        .with_dispatch_id(DispatchId(7))
        .with_group_segment_size(128),
        kernel: KernelKey {
            agent: AgentId(0),
            code_object: 1,
            symbol: 2,
        },
        kernarg,
        arg_layout: ArgLayout::Known,
        scope: Scope::Arguments,
        pass: 0,
        device: DeviceDescription {
            backend: "sim".into(),
            device: "d".into(),
            driver: "1".into(),
        },
        code: CodeImage {
            format: "sim-module".into(),
            module: "m".into(),
            symbol: "k".into(),
            bytes: b"sim-module m\n".to_vec(),
            launch_attributes: vec![LaunchAttribute {
                name: "cluster_dimension".into(),
                id: 4,
                value: vec![2, 1, 1, 0],
            }],
            variables: Vec::new(),
        },
        regions: vec![
            CapturedRegion {
                base: b,
                size: 4096,
                class: MemoryClass::FINE_GRAINED,
                symbol: None,
                input: vec![1; 4096],
                output: vec![1; 4096],
            },
            CapturedRegion {
                base: a,
                size: 1 << 16,
                class: MemoryClass::DEVICE_COARSE,
                symbol: None,
                input: (0..1u32 << 16).map(|i| (i % 251) as u8).collect(),
                output: vec![9; 1 << 16],
            },
        ],
    }
}

fn written(name: &str) -> PathBuf {
    let d = scratch(name);
    write(&d, &sample()).expect("write");
    d
}

fn edit_manifest(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join(MANIFEST);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn a_capture_reads_back_as_written_in_address_order_with_its_pointer_words() {
    let d = written("roundtrip");
    let c = read(&d).expect("read");
    let m = &c.manifest;
    assert_eq!(m.version, FORMAT_VERSION);
    assert_eq!(m.regions.len(), 2);
    assert_eq!(m.regions[0].base, 0x1000_0000);
    assert_eq!(m.regions[0].class, MemoryClass::DEVICE_COARSE);
    assert_eq!(c.data[0].0, sample().regions[1].input);
    assert_eq!(c.data[0].1, vec![9; 1 << 16]);
    assert_eq!(c.data[1].0, vec![1; 4096]);
    assert_eq!(c.kernarg, sample().kernarg);
    assert_eq!(c.code, b"sim-module m\n");
    assert_eq!(m.launch.attributes, sample().code.launch_attributes);
    // Words 0 and 2 point into regions 0 and 1; the scalar does not.
    let p: Vec<(u64, usize)> = m
        .arguments
        .pointers
        .iter()
        .map(|p| (p.offset, p.region))
        .collect();
    assert_eq!(p, vec![(0, 0), (16, 1)]);
    // The constant region compresses.
    assert!(m.regions[0].output.stored_bytes < 1024);
    let outputs: Vec<Vec<u8>> = c.data.iter().map(|(_, o)| o.clone()).collect();
    assert!(compare_outputs(&c, &outputs).is_empty());
    let mut changed = outputs.clone();
    changed[1][10] ^= 1;
    changed[1][20] ^= 1;
    let diffs = compare_outputs(&c, &changed);
    assert_eq!(diffs.len(), 1);
    assert_eq!(
        (
            diffs[0].index,
            diffs[0].differing_bytes,
            diffs[0].first_offset
        ),
        (1, 2, 10)
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_capture_is_never_written_over_another() {
    let d = written("exists");
    assert!(matches!(write(&d, &sample()), Err(FormatError::Exists(_))));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_truncated_region_file_is_refused_naming_it() {
    let d = written("truncated");
    let f = d.join("regions/0000.in.zst");
    let bytes = std::fs::read(&f).unwrap();
    std::fs::write(&f, &bytes[..bytes.len() / 2]).unwrap();
    let e = read(&d).unwrap_err();
    assert!(matches!(e, FormatError::Truncated { .. }), "{e}");
    assert!(e.to_string().contains("regions/0000.in.zst"), "{e}");
    assert!(e.to_string().contains("truncated"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_corrupted_region_file_is_refused_naming_it() {
    let d = written("corrupt");
    let f = d.join("regions/0001.out.zst");
    let mut bytes = std::fs::read(&f).unwrap();
    let n = bytes.len();
    bytes[n - 2] ^= 0x55;
    std::fs::write(&f, &bytes).unwrap();
    let e = read(&d).unwrap_err();
    assert!(matches!(e, FormatError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("regions/0001.out.zst"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_missing_file_and_a_damaged_manifest_are_refused_naming_them() {
    let d = written("missing");
    std::fs::remove_file(d.join("code.zst")).unwrap();
    let e = read(&d).unwrap_err();
    assert!(e.to_string().contains("code.zst"), "{e}");
    std::fs::write(
        d.join(MANIFEST),
        b"{\"format\": \"kernel-replay-capture\", \"vers",
    )
    .unwrap();
    let e = read(&d).unwrap_err();
    assert!(matches!(e, FormatError::Manifest { .. }), "{e}");
    assert!(e.to_string().contains(MANIFEST), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn another_format_version_is_refused_saying_which() {
    let d = written("version");
    edit_manifest(&d, |v| v["version"] = serde_json::json!(FORMAT_VERSION + 1));
    let e = read(&d).unwrap_err();
    assert!(
        matches!(e, FormatError::Version { found, .. } if found == FORMAT_VERSION + 1),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains(&format!("version {}", FORMAT_VERSION + 1)),
        "{e}"
    );
    edit_manifest(&d, |v| v["format"] = serde_json::json!("something-else"));
    assert!(matches!(read(&d), Err(FormatError::Manifest { .. })));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_inconsistent_manifest_is_refused() {
    let d = written("inconsistent");
    edit_manifest(&d, |v| {
        v["regions"][0]["size"] = serde_json::json!(1u64 << 40)
    });
    let e = read(&d).unwrap_err();
    assert!(matches!(e, FormatError::Manifest { .. }), "{e}");
    let d2 = written("escape");
    edit_manifest(&d2, |v| {
        v["kernel"]["code"]["file"] = serde_json::json!("../x")
    });
    let e = read(&d2).unwrap_err();
    assert!(e.to_string().contains("outside the capture folder"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&d2);
}

#[test]
fn a_manifest_without_launch_attributes_reads_as_having_none() {
    let d = written("no-attributes");
    edit_manifest(&d, |v| {
        v["launch"].as_object_mut().unwrap().remove("attributes");
    });
    let c = read(&d).expect("an older manifest without attributes");
    assert!(c.manifest.launch.attributes.is_empty());
    let _ = std::fs::remove_dir_all(&d);
}
