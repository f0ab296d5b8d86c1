//! Standalone replay of HSA captures on the simulated runtime (SPEC §13,
//! `replay_hsa::standalone`): a dispatch captured in this process is replayed on a fresh
//! simulated runtime, its regions recreated at their captured addresses where they are free
//! (the virtual-memory reservations the capture made, released first) and relocated where
//! they are not (the capturing runtime still holds them), the argument block's pointer words
//! rewritten; every pass's outputs equal the captured ones, for several scopes and memory
//! classes. Under `Relocation::Refuse` a taken address is an error naming the region, as is a
//! module variable the code object does not have; changed output bytes are named by the
//! comparison.

#[path = "support/capture.rs"]
mod support;

use replay_capture::{compare_outputs, LoadedCapture};
use replay_core::{MemoryClass, Scope};
use replay_hsa::standalone::{self, App, Relocation, StandaloneError};
use replay_hsa_sim::{client, SimConfig, SimHsa};

use support::*;

/// The capture written and read back, as `kreplay replay` reads it.
fn on_disk(c: &Captured, name: &str) -> LoadedCapture {
    let dir = std::env::temp_dir().join(format!("hsa-standalone-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    replay_capture::write(&dir, &c.capture).unwrap();
    let back = replay_capture::read(&dir).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    back
}

/// A fresh simulated runtime with `OnLoad` installed, and its application entries.
fn runtime() -> (SimHsa, App) {
    let (sim, app) = client::installed(SimConfig::default()).unwrap();
    replay_hsa_sim::kernels::define(&sim);
    (sim, app)
}

fn assert_equal(c: &LoadedCapture, r: &standalone::Replayed, passes: usize) {
    assert_eq!(r.outputs.len(), passes, "one read per pass");
    for (pass, o) in r.outputs.iter().enumerate() {
        assert_eq!(compare_outputs(c, o), vec![], "pass {pass}");
    }
    assert_eq!(compare_outputs(c, &r.after), vec![]);
}

#[test]
fn scope_all_with_device_host_and_variable_regions_replays_equal_relocated() {
    let _g = serial();
    // out = in * factor: in coarse device memory, out fine-grained, factor a module variable.
    let cap = capture(
        "scale",
        &[
            Arg::Buffer(Place::DeviceCoarse, 6),
            Arg::Buffer(Place::DeviceFine, 0),
            Arg::Variable("factor", 7),
        ],
        Scope::All,
    );
    let c = on_disk(&cap, "all");
    let m = &c.manifest;
    let f = m
        .regions
        .iter()
        .position(|r| r.base == cap.addresses[2])
        .expect("the variable captured");
    assert!(m.regions[f].class.contains(MemoryClass::MODULE_VARIABLE));
    assert_eq!(m.regions[f].symbol.as_deref(), Some("factor"), "named");
    assert!(
        m.device.contains(replay_hsa::agent::GPU_ORDINAL),
        "{}",
        m.device
    );

    let (_sim, app) = runtime();
    // The capturing runtime still holds every address: each range is relocated.
    let r = standalone::replay(app, &c, 3, Relocation::Allow).unwrap();
    assert_equal(&c, &r, 3);
    assert_eq!(r.relocated.len(), standalone::plan_ranges(&m.regions).len());
    assert_eq!(r.rewritten_words, 3, "every argument word rewritten");
    let rec = r.record.expect("a window ran");
    assert_eq!(rec.executed_passes, 3, "{rec}");
    drop(cap);
}

#[test]
fn scope_arguments_on_mappings_replays_at_the_captured_addresses() {
    let _g = serial();
    // x = 3x + 1 on a mapping: a replay that did not restore between passes would show.
    let mut cap = capture("rmw", &[Arg::Buffer(Place::Vmem, 5)], Scope::Arguments);
    let c = on_disk(&cap, "arguments");
    assert_eq!(c.manifest.regions.len(), 1, "{:?}", c.manifest.regions);
    assert_eq!(c.data[0].1[..8], 16u64.to_le_bytes());
    cap.release_vmem();
    let (_sim, app) = runtime();
    let r = standalone::replay(app, &c, 4, Relocation::Refuse).unwrap();
    assert!(r.relocated.is_empty(), "at its address: {:?}", r.relocated);
    assert_eq!(r.rewritten_words, 0);
    assert_equal(&c, &r, 4);
}

#[test]
fn scope_predicted_with_host_device_and_mapped_regions_replays_equal() {
    let _g = serial();
    // out = a + b: a pinned host buffer, a fine-grained device buffer, out a mapping.
    let cap = capture(
        "add",
        &[
            Arg::Buffer(Place::HostFine, 11),
            Arg::Buffer(Place::DeviceFine, 31),
            Arg::Buffer(Place::Vmem, 0),
        ],
        Scope::Predicted,
    );
    let c = on_disk(&cap, "predicted");
    assert_eq!(c.manifest.regions.len(), 3, "{:?}", c.manifest.regions);
    let (_sim, app) = runtime();
    let r = standalone::replay(app, &c, 2, Relocation::Allow).unwrap();
    assert_equal(&c, &r, 2);
    let out = c
        .manifest
        .regions
        .iter()
        .position(|r| r.base == cap.addresses[2])
        .unwrap();
    assert_eq!(r.after[out][..8], 42u64.to_le_bytes());
    drop(cap);
}

#[test]
fn a_pointer_stored_in_memory_is_counted_when_its_range_moves() {
    let _g = serial();
    // out = *table[0]: the pointer is in memory, not in the argument block.
    let cap = capture(
        "follow",
        &[
            Arg::PointerTo(Place::DeviceCoarse, 9),
            Arg::Buffer(Place::DeviceFine, 0),
        ],
        Scope::All,
    );
    let c = on_disk(&cap, "stored");
    let (_sim, app) = runtime();
    let r = standalone::replay(app, &c, 2, Relocation::Allow).unwrap();
    assert!(!r.relocated.is_empty());
    assert!(r.stored_pointers >= 1, "{r:?}");
    // The capturing runtime still holds the captured target, so the kernel reads 9 there.
    assert_equal(&c, &r, 2);
    drop(cap);
}

#[test]
fn a_taken_address_under_refuse_names_the_region() {
    let _g = serial();
    let cap = capture(
        "rmw",
        &[Arg::Buffer(Place::DeviceCoarse, 5)],
        Scope::Arguments,
    );
    let c = on_disk(&cap, "refuse");
    let (_sim, app) = runtime();
    match standalone::replay(app, &c, 2, Relocation::Refuse) {
        Err(StandaloneError::Address {
            index, base, why, ..
        }) => {
            assert_eq!((index, base), (0, cap.addresses[0]));
            assert!(why.contains("taken in this process"), "{why}");
        }
        other => panic!("refused: {other:?}"),
    }
    drop(cap);
}

#[test]
fn a_variable_the_code_object_lacks_is_named_and_changed_outputs_are_found() {
    let _g = serial();
    let cap = capture(
        "scale",
        &[
            Arg::Buffer(Place::DeviceCoarse, 6),
            Arg::Buffer(Place::DeviceCoarse, 0),
            Arg::Variable("factor", 7),
        ],
        Scope::All,
    );
    let good = on_disk(&cap, "variable");
    let f = good
        .manifest
        .regions
        .iter()
        .position(|r| r.symbol.is_some())
        .unwrap();
    let mut bad = good.clone();
    bad.manifest.regions[f].symbol = Some("nosuch".into());
    let (_sim, app) = runtime();
    let err = standalone::replay(app, &bad, 2, Relocation::Allow).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, StandaloneError::Address { index, .. } if index == f),
        "{text}"
    );
    assert!(text.contains("\"nosuch\""), "{text}");

    // Changed output bytes of the output region: the comparison names that region.
    let o = good
        .manifest
        .regions
        .iter()
        .position(|r| r.base == cap.addresses[1])
        .unwrap();
    let mut tampered = good.clone();
    tampered.data[o].1[0] ^= 0xff;
    let (_sim2, app) = runtime();
    let r = standalone::replay(app, &tampered, 2, Relocation::Allow).unwrap();
    let diffs = compare_outputs(&tampered, &r.outputs[0]);
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert_eq!(diffs[0].index, o);
    drop(cap);
}
