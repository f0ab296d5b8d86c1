//! `kreplay replay DIR` of HSA captures taken on the simulated HSA runtime (SPEC §13): the
//! dispatch is captured in this test process (`replay-hsa` on `replay-hsa-sim`, the capture
//! asked for in PASS ENTER), written with `replay-capture`, and replayed by the `kreplay`
//! binary in a process of its own, on a fresh simulated runtime: outputs equal for several
//! scopes and memory classes, timing printed, a capture with changed output bytes names the
//! region that differs (exit 1), and captures it cannot replay (a kernel whose body it does
//! not define, real GPU code) are refused saying why (exit 2).

#[allow(dead_code)]
#[path = "../../replay-hsa-sim/tests/support/capture.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use replay_core::Scope;
use support::*;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kreplay-hsa-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn replay(dir: &Path, extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .arg("replay")
        .arg(dir)
        .args(extra)
        .env_remove("KREPLAY_LOG")
        .output()
        .expect("kreplay runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kernel` over `args` captured under `scope`, written to a new folder `name`.
fn captured(name: &str, kernel: &str, args: &[Arg], scope: Scope) -> (PathBuf, Captured) {
    let cap = capture(kernel, args, scope);
    let dir = scratch(name);
    replay_capture::write(&dir, &cap.capture).unwrap();
    (dir, cap)
}

#[test]
fn captures_of_several_scopes_and_memory_classes_replay_equal() {
    let _g = serial();
    let cases: Vec<(&str, &str, Vec<Arg>, Scope)> = vec![
        (
            "all",
            "scale",
            vec![
                Arg::Buffer(Place::DeviceCoarse, 6),
                Arg::Buffer(Place::DeviceFine, 0),
                Arg::Variable("factor", 7),
            ],
            Scope::All,
        ),
        (
            "arguments",
            "rmw",
            vec![Arg::Buffer(Place::Vmem, 5)],
            Scope::Arguments,
        ),
        (
            "predicted",
            "add",
            vec![
                Arg::Buffer(Place::HostFine, 11),
                Arg::Buffer(Place::DeviceFine, 31),
                Arg::Buffer(Place::Vmem, 0),
            ],
            Scope::Predicted,
        ),
    ];
    for (name, kernel, args, scope) in cases {
        let (dir, cap) = captured(name, kernel, &args, scope);
        let (code, out, err) = replay(&dir, &["--passes", "3"]);
        assert_eq!(code, 0, "{name}: {out}\n{err}");
        assert!(out.contains("hsa backend"), "{out}");
        assert!(
            out.contains("verify: 3 passes, the outputs of every pass equal to the captured ones"),
            "{name}: {out}\n{err}"
        );
        drop(cap);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn timing_prints_the_passes_time() {
    let _g = serial();
    let (dir, cap) = captured("timing", "rmw", &[Arg::Buffer(Place::Vmem, 5)], Scope::All);
    let (code, out, err) = replay(&dir, &["--tool", "timing", "--passes", "4"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("timing over 4 passes: min"), "{out}");
    assert!(out.contains("simulated HSA runtime"), "{out}");
    drop(cap);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn changed_output_bytes_name_the_region_that_differs() {
    let _g = serial();
    let mut cap = capture(
        "scale",
        &[
            Arg::Buffer(Place::DeviceCoarse, 6),
            Arg::Buffer(Place::DeviceCoarse, 0),
            Arg::Variable("factor", 7),
        ],
        Scope::All,
    );
    let out_base = cap.addresses[1];
    let o = cap
        .capture
        .regions
        .iter()
        .position(|r| r.base == out_base)
        .unwrap();
    cap.capture.regions[o].output[0] ^= 0xff;
    let dir = scratch("tampered");
    replay_capture::write(&dir, &cap.capture).unwrap();
    let (code, out, err) = replay(&dir, &[]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains(&format!("region {o} at {out_base:#x}")),
        "{out}"
    );
    assert!(out.contains("DIFFER"), "{out}");
    drop(cap);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn captures_this_program_cannot_replay_are_refused_saying_why() {
    let _g = serial();
    let mut cap = capture("rmw", &[Arg::Buffer(Place::DeviceCoarse, 5)], Scope::All);
    // A kernel whose body kreplay does not define.
    cap.capture.code.bytes = replay_hsa_sim::CodeObject::new()
        .kernel("mystery.kd", 8)
        .to_bytes();
    let dir = scratch("unknown-kernel");
    replay_capture::write(&dir, &cap.capture).unwrap();
    let (code, out, err) = replay(&dir, &[]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains("mystery.kd"), "{err}");
    assert!(err.contains("rmw"), "names the kernels it knows: {err}");
    let _ = std::fs::remove_dir_all(&dir);

    // Real GPU code (an ELF code object): the error says what this machine has.
    cap.capture.code.bytes = b"\x7fELF\x02\x01\x01\x40 amdgcn code object".to_vec();
    let dir = scratch("real-code");
    replay_capture::write(&dir, &cap.capture).unwrap();
    let (code, out, err) = replay(&dir, &[]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains("an HSA capture of GPU code"), "{err}");
    assert!(
        err.contains("no HSA runtime")
            || err.contains("but no AMD GPU")
            || err.contains("is not built"),
        "{err}"
    );
    drop(cap);
    let _ = std::fs::remove_dir_all(&dir);
}
