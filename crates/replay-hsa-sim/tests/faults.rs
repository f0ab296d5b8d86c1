//! Faults through `replay-hsa` on the simulated runtime (SPEC §8), with short policy bounds:
//! each ends with its reason and memory equal to one execution (or, for a restore that cannot
//! be repaired, an abort with a message). A process of its own: the backend and the service are
//! process-wide, so the tests of this file run one at a time (`SERIAL`) on one service whose
//! policy bounds are short.
//!
//! The simulator issue's faults (`replay_mock::Fault`), as HSA exposes them:
//!
//! | `replay_mock::Fault`          | here                                                        |
//! |-------------------------------|-------------------------------------------------------------|
//! | `SnapshotOom`                 | both backing pools exhausted → declined `snapshot_failed`   |
//! | `TierOom(Device)`             | device pool exhausted → the snapshot goes to pinned memory  |
//! | `CaptureCopyFail`             | an async copy refused → declined `snapshot_failed`          |
//! | `CaptureCopyStuck`            | copy engine stalled → declined `snapshot_failed`, quarantine|
//! | `QueueDrainStuck`             | a barrier ahead on the queue → declined `queue_drain_stuck` |
//! | `AgentDrainStuck`             | a barrier on another queue → declined `agent_drain_stuck`   |
//! | `CopyFenceStuck`              | an application copy held → declined `copy_fence_stuck`     |
//! | `PassStuck`                   | a pass held → truncated `pass_drain_stuck`                  |
//! | `PassSubmitFail { pass: 1 }`  | `hsa_signal_create` fails → truncated `submit_failed`       |
//! | `RestoreFail` (once / always) | a refused restore copy → retried / abort with a message     |
//! | `DigestFail`                  | `hsa_memory_copy` fails → truncated `scope_check_failed`    |
//! | `IncompleteModuleEnumeration` | loader iteration fails → declined `untracked_memory`        |
//! | `FreeDuringPass`              | the tool frees a region after pass 0 → skipped by restore   |
//! | `ReallocDuringPass`           | freed and reallocated at the same address → skipped         |
//! | `OrdinarySubmitFail`          | not reachable: the interceptor's `writer` cannot fail (a    |
//! |                               | full ring parks packets in the runtime)                     |
//!
//! One test binary, its tests by subject in `tests/faults/` over the shared `harness`. The
//! always-refused restore stays at the root: it re-runs itself in a child process by its exact
//! name, which a module would prefix.

// Not every shared helper is used by every test file.
#[allow(dead_code)]
mod common;

#[path = "faults/harness.rs"]
mod harness;

#[path = "faults/digests.rs"]
mod digests;
#[path = "faults/drains.rs"]
mod drains;
#[path = "faults/modules.rs"]
mod modules;
#[path = "faults/passes.rs"]
mod passes;
#[path = "faults/restores.rs"]
mod restores;
#[path = "faults/snapshots.rs"]
mod snapshots;

use replay_core::{Operation, Phase};
use replay_hsa_sim::{FaultMode, SimFault};

use crate::harness::{hook, world, Case};

#[test]
fn a_restore_the_runtime_always_refuses_aborts_with_a_message() {
    if std::env::var_os("KREPLAY_TEST_CHILD_RESTORE").is_some() {
        let (w, _g) = world();
        w.service.start().unwrap();
        let c = Case::new(0, 29);
        let inj = c.sim.injector();
        w.tool.add_hook(hook(move |op, phase, pass| {
            if (op, phase, pass) == (Operation::Pass, Phase::Exit, 0) {
                inj.inject(SimFault::AsyncCopyRefused, FaultMode::Always);
            }
        }));
        w.tool.set_passes(Some(3));
        let done = c.dispatch();
        c.api.wait_zero(done);
        unreachable!("a restore that cannot be repaired must abort");
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_restore_the_runtime_always_refuses_aborts_with_a_message",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KREPLAY_TEST_CHILD_RESTORE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(6), "SIGABRT expected: {stderr}");
    }
    assert!(stderr.contains("FATAL: restore failed"), "{stderr}");
    assert!(stderr.contains("hsa_amd_memory_async_copy"), "{stderr}");
}
