//! `kreplay replay DIR` of a capture the HSA backend took (SPEC §13).
//!
//! A capture taken on the simulated HSA runtime (its code object is the simulator's text,
//! `replay_hsa_sim::code_object`) is replayed on a fresh simulated runtime in this process:
//! the kernel bodies of `replay_hsa_sim::kernels` are defined (a code object naming another
//! kernel is refused, naming it), `replay-hsa`'s `OnLoad` is installed on the runtime's table,
//! and `replay_hsa::standalone` recreates the regions (at their captured addresses where this
//! process can have them, else relocated with the argument block's pointer words rewritten and
//! a warning; `--exact-addresses` makes that an error naming the region), loads the code
//! object with the captured module variables placed, writes the inputs, and launches once
//! under a replay service of its own that runs `--passes` passes, reading every region after
//! each. A capture of real GPU code needs the GPU it was captured on: the error says what
//! this machine has (no HSA runtime, or the runtime without an AMD GPU).

use replay_capture::{compare_outputs, LoadedCapture, RegionDiff};
use replay_hsa::standalone::{self, RealRuntime, Relocation, StandaloneError};

use crate::replay::{passes_agree, warn_relocated, ReplayError, Replayed};

/// Replays the HSA capture `c`.
pub(crate) fn replay(c: &LoadedCapture, passes: u64, exact: bool) -> Result<Replayed, ReplayError> {
    let m = &c.manifest;
    let unsupported = |why: String| ReplayError::Unsupported {
        dir: c.dir.clone(),
        why,
    };
    let Some(code) = replay_hsa_sim::CodeObject::parse(&c.code) else {
        return Err(unsupported(real_gpu_code(c.code.len(), &m.kernel.name)));
    };
    let unknown: Vec<&str> = code
        .kernels
        .iter()
        .map(|k| k.name.as_str())
        .filter(|n| !replay_hsa_sim::kernels::knows(n))
        .collect();
    if !unknown.is_empty() {
        return Err(unsupported(format!(
            "a simulated HSA code object naming kernel(s) {} whose bodies this program does not define (the simulated runtime's kernels are closures; kreplay defines {})",
            unknown.join(", "),
            replay_hsa_sim::kernels::names().join(", ")
        )));
    }
    let hsa = |source: StandaloneError| match source {
        StandaloneError::Address {
            index,
            base,
            size,
            why,
        } => ReplayError::Address {
            dir: c.dir.clone(),
            index,
            base,
            size,
            why,
        },
        source => ReplayError::Hsa {
            dir: c.dir.clone(),
            source,
        },
    };
    let (sim, app) = replay_hsa_sim::client::installed(replay_hsa_sim::SimConfig::default())
        .map_err(|why| hsa(StandaloneError::Unsupported(why)))?;
    replay_hsa_sim::kernels::define(&sim);
    let relocation = if exact {
        Relocation::Refuse
    } else {
        Relocation::Allow
    };
    let r = standalone::replay(app, c, passes, relocation).map_err(hsa)?;
    warn_relocated(c, &r.relocated, r.rewritten_words, r.stored_pointers);
    let pass_diffs: Vec<Vec<RegionDiff>> =
        r.outputs.iter().map(|o| compare_outputs(c, o)).collect();
    let seconds = r
        .record
        .as_ref()
        .map(|rec| rec.pass_gpu_seconds.iter().copied().collect::<Vec<f64>>())
        .unwrap_or_default();
    drop(sim);
    Ok(Replayed {
        final_diffs: compare_outputs(c, &r.after),
        passes_agree: passes_agree(&r.outputs),
        record: r.record,
        pass_diffs,
        seconds: Some((seconds, "simulated HSA runtime, wall clock")),
    })
}

/// Why a capture of real GPU code is not replayed here, naming what this machine has.
fn real_gpu_code(bytes: usize, kernel: &str) -> String {
    let what = format!("an HSA capture of GPU code (kernel {kernel:?}, {bytes} code object bytes, not the simulated runtime's)");
    match standalone::real_runtime() {
        RealRuntime::None => format!(
            "{what}: this machine has no HSA runtime ({} not found) and no AMD GPU; replay it on the machine it was captured on",
            standalone::RUNTIME_LIBRARIES[0]
        ),
        RealRuntime::WithoutGpu(lib) => format!(
            "{what}: this machine has a real HSA runtime ({lib}) but no AMD GPU (/dev/kfd is absent), so the code object cannot run here; replay it on a machine with the GPU it was captured on"
        ),
        RealRuntime::WithGpu(lib) => format!(
            "{what}: a standalone replay on a real HSA runtime ({lib}, with an AMD GPU) is not built; kreplay replays HSA captures taken on the simulated runtime"
        ),
    }
}
