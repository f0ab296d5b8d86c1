//! `kreplay capture` and `kreplay replay` of a CUDA capture end to end against the fake CUDA
//! driver (SPEC §13): the fake application (`replay-cuda`'s `tests/fake_driver/inject_app.c`)
//! runs under `kreplay capture`, which must leave its output and status unchanged and write
//! the chosen launch's folder; `kreplay replay` then recreates the regions at their captured
//! addresses through the fake's virtual memory calls, runs the kernel again and compares.
//! Skipped where no C compiler is found.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod support;
use support::{library, text};

fn build(tag: &str) -> Option<PathBuf> {
    support::build("kreplay-capture-fake", tag)
}

fn kreplay(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(args)
        .env("LD_LIBRARY_PATH", dir)
        .env_remove("LD_PRELOAD")
        .env_remove("CUDA_INJECTION64_PATH")
        .envs(env.iter().copied())
        .output()
        .expect("run kreplay")
}

/// Captures the first kr_rmw launch of the application into `dir/cap`.
fn capture(dir: &Path) -> (PathBuf, Output) {
    capture_index(dir, 0)
}

/// Captures kr_rmw launch `index` of the application into `dir/cap`.
fn capture_index(dir: &Path, index: u32) -> (PathBuf, Output) {
    // A folder whose parent does not exist yet.
    let cap = dir.join("caps").join("cap");
    let index = index.to_string();
    let lib = library();
    let out = kreplay(
        dir,
        &[
            "capture",
            "--library",
            lib.to_str().unwrap(),
            "--kernel-include",
            "kr_rmw",
            "--launch-index",
            &index,
            "--out",
            cap.to_str().unwrap(),
            "--",
            dir.join("app").to_str().unwrap(),
        ],
        &[],
    );
    (cap, out)
}

#[test]
fn a_captured_launch_replays_standalone_equal_to_its_captured_outputs() {
    let Some(dir) = build("equal") else { return };
    let plain = Command::new(dir.join("app"))
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .expect("run the application");
    assert_eq!(plain.status.code(), Some(7), "{}", text(&plain.stdout));
    let (cap, run) = capture(&dir);
    let stderr = text(&run.stderr);
    // The program ran as it would: its output and its status.
    assert_eq!(text(&run.stdout), text(&plain.stdout), "{stderr}");
    assert_eq!(run.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains("kreplay capture: wrote"), "{stderr}");

    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cap.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["backend"], "cuda");
    assert!(
        manifest["device"].as_str().unwrap().contains("sm_"),
        "{manifest}"
    );
    assert!(manifest["driver"]
        .as_str()
        .unwrap()
        .starts_with("CUDA driver"));
    // The driver's (mangled) name, by which the replay finds the function again.
    assert_eq!(manifest["kernel"]["symbol"], "_Z6kr_rmwPmmm");
    assert!(manifest["kernel"]["name"]
        .as_str()
        .unwrap()
        .starts_with("kr_rmw("));
    assert_eq!(manifest["kernel"]["code_format"], "ptx");
    assert_eq!(manifest["launch"]["workgroup"]["x"], 64);
    let regions = manifest["regions"].as_array().unwrap();
    assert!(!regions.is_empty());
    let pointers = manifest["arguments"]["pointers"].as_array().unwrap();
    assert!(
        pointers.iter().any(|p| p["offset"] == 0),
        "kr_rmw's first parameter points into a captured region: {manifest}"
    );
    for r in regions {
        for f in ["input", "output"] {
            assert!(cap.join(r[f]["file"].as_str().unwrap()).is_file());
        }
    }
    // The code image is the PTX the application loaded.
    let loaded = replay_capture::read(&cap).expect("a complete capture");
    assert!(String::from_utf8_lossy(&loaded.code).contains(".entry kr_rmw"));
    // kr_rmw is a read-modify-write: the region its pointer names changed.
    let target = pointers[0]["region"].as_u64().unwrap() as usize;
    assert_ne!(loaded.data[target].0, loaded.data[target].1);

    let replay = kreplay(
        &dir,
        &[
            "replay",
            cap.to_str().unwrap(),
            "--tool",
            "verify",
            "--passes",
            "3",
        ],
        &[],
    );
    let out = text(&replay.stdout);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{out}{}",
        text(&replay.stderr)
    );
    assert!(out.contains("cuda backend"), "{out}");
    assert!(
        out.contains("3 passes, the outputs of every pass equal to the captured ones"),
        "{out}"
    );
    let timing = kreplay(
        &dir,
        &[
            "replay",
            cap.to_str().unwrap(),
            "--tool",
            "timing",
            "--passes",
            "4",
        ],
        &[],
    );
    let out = text(&timing.stdout);
    assert_eq!(
        timing.status.code(),
        Some(0),
        "{out}{}",
        text(&timing.stderr)
    );
    assert!(out.contains("timing over 4 passes"), "{out}");
    assert!(out.contains("CUDA events"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_address_that_cannot_be_reserved_is_relocated_or_with_exact_addresses_an_error_naming_the_region(
) {
    let Some(dir) = build("address") else { return };
    let (cap, run) = capture(&dir);
    assert!(cap.join("manifest.json").is_file(), "{}", text(&run.stderr));
    // By default the range is recreated where the driver puts it, the argument pointers
    // follow, the relocation is said, and the outputs still match.
    let moved = kreplay(
        &dir,
        &["replay", cap.to_str().unwrap()],
        &[("KR_FAKE_IGNORE_ADDRESS_HINT", "1")],
    );
    let err = text(&moved.stderr);
    assert_eq!(moved.status.code(), Some(0), "{}{err}", text(&moved.stdout));
    assert!(err.contains("were relocated"), "{err}");
    assert!(err.contains("argument word(s) rewritten"), "{err}");
    let replay = kreplay(
        &dir,
        &["replay", cap.to_str().unwrap(), "--exact-addresses"],
        &[("KR_FAKE_IGNORE_ADDRESS_HINT", "1")],
    );
    let err = text(&replay.stderr);
    assert_eq!(replay.status.code(), Some(2), "{err}");
    let loaded = replay_capture::read(&cap).unwrap();
    let first = loaded
        .manifest
        .regions
        .iter()
        .find(|r| !r.class.contains(replay_core::MemoryClass::MODULE_VARIABLE))
        .unwrap();
    assert!(
        err.contains(&format!(
            "region {} at {:#x} ({} bytes) cannot be recreated at its address",
            first.index, first.base, first.size
        )),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_drivers_own_reservations_at_start_up_do_not_take_the_captured_addresses() {
    let Some(dir) = build("startup") else { return };
    let (cap, run) = capture(&dir);
    assert!(cap.join("manifest.json").is_file(), "{}", text(&run.stderr));
    let loaded = replay_capture::read(&cap).unwrap();
    // The fake driver's cuInit reserves, with the first region's granules as its hint, what
    // the real driver may reserve for itself when it starts: the replay held them before.
    const G: u64 = 2 << 20;
    let first = loaded
        .manifest
        .regions
        .iter()
        .find(|r| !r.class.contains(replay_core::MemoryClass::MODULE_VARIABLE))
        .unwrap();
    let lo = first.base / G * G;
    let len = (first.base + first.size).div_ceil(G) * G - lo;
    let hint = format!("{lo:#x}:{len}");
    let replay = kreplay(
        &dir,
        &["replay", cap.to_str().unwrap(), "--passes", "2"],
        &[("KR_FAKE_INIT_RESERVE", &hint)],
    );
    let (out, err) = (text(&replay.stdout), text(&replay.stderr));
    let line = err
        .lines()
        .find(|l| l.contains("fake_cuda: own reservation"))
        .unwrap_or_else(|| panic!("the fake's cuInit reserved: {err}"));
    assert!(
        line.ends_with(&format!("(hint {lo:#x})")) && !line.contains(&format!(" at {lo:#x} ")),
        "the driver's reservation went elsewhere: {line}"
    );
    assert_eq!(replay.status.code(), Some(0), "{out}{err}");
    assert!(out.contains("equal to the captured ones"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_cuda_capture_is_refused_naming_the_file() {
    let Some(dir) = build("damaged") else { return };
    let (cap, run) = capture(&dir);
    assert!(cap.join("manifest.json").is_file(), "{}", text(&run.stderr));
    let file = cap.join("regions/0000.in.zst");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let replay = kreplay(&dir, &["replay", cap.to_str().unwrap()], &[]);
    let err = text(&replay.stderr);
    assert_eq!(replay.status.code(), Some(2), "{err}");
    assert!(
        err.contains("0000.in.zst") && err.contains("truncated"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_capture_that_matches_no_launch_says_so_and_the_program_still_runs() {
    let Some(dir) = build("nomatch") else { return };
    let cap = dir.join("cap");
    let lib = library();
    let out = kreplay(
        &dir,
        &[
            "capture",
            "--library",
            lib.to_str().unwrap(),
            "--kernel-include",
            "no_such_kernel",
            "--out",
            cap.to_str().unwrap(),
            "--",
            dir.join("app").to_str().unwrap(),
        ],
        &[],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("nothing captured"), "{err}");
    assert!(text(&out.stdout).contains("done"));
    assert!(!cap.join("manifest.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_launch_through_cu_launch_kernel_ex_keeps_its_attributes_and_replays_with_them() {
    let Some(dir) = build("attributes") else {
        return;
    };
    // The application's third kr_rmw launch goes through cuLaunchKernelEx with a cluster of
    // one block.
    let (cap, run) = capture_index(&dir, 2);
    assert_eq!(run.status.code(), Some(7), "{}", text(&run.stderr));
    let loaded = replay_capture::read(&cap).expect("a complete capture");
    let attrs = &loaded.manifest.launch.attributes;
    assert_eq!(attrs.len(), 1, "{attrs:?}");
    assert_eq!(attrs[0].name, "cluster_dimension");
    assert_eq!(attrs[0].value[..3], [1, 1, 1]);
    let replay = kreplay(
        &dir,
        &["replay", cap.to_str().unwrap(), "--passes", "2"],
        &[],
    );
    let out = text(&replay.stdout);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{out}{}",
        text(&replay.stderr)
    );
    assert!(out.contains("equal to the captured ones"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn outputs_that_differ_from_the_captured_ones_name_the_region() {
    let Some(dir) = build("differ") else { return };
    let (cap, run) = capture(&dir);
    assert!(cap.join("manifest.json").is_file(), "{}", text(&run.stderr));
    let loaded = replay_capture::read(&cap).unwrap();
    let target = loaded.manifest.arguments.pointers[0].region;
    // The captured outputs of the region kr_rmw writes, changed at byte 5 and stored
    // uncompressed with their digest, as a capture of another result would hold them.
    let mut want = loaded.data[target].1.clone();
    want[5] ^= 0xff;
    let file = format!("regions/{target:04}.out.raw");
    std::fs::write(cap.join(&file), &want).unwrap();
    let path = cap.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["regions"][target]["output"] = serde_json::json!({
        "file": file,
        "compression": "none",
        "bytes": want.len(),
        "stored_bytes": want.len(),
        "digest": replay_capture::file_digest(&want).to_string(),
    });
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    let replay = kreplay(
        &dir,
        &["replay", cap.to_str().unwrap(), "--passes", "2"],
        &[],
    );
    let out = text(&replay.stdout);
    assert_eq!(
        replay.status.code(),
        Some(1),
        "{out}{}",
        text(&replay.stderr)
    );
    let base = loaded.manifest.regions[target].base;
    assert!(
        out.contains(&format!(
            "pass 0: region {target} at {base:#x}: 1 bytes differ, the first at offset 5"
        )),
        "{out}"
    );
    assert!(out.contains("outputs DIFFER"), "{out}");
    // Every pass computed the same bytes: a deterministic kernel, a different capture.
    assert!(!out.contains("non-deterministic"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
