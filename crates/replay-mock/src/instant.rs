//! A snapshotter that finishes everything at once, without memory or threads: for tests of
//! the layers above the core (contexts §5, the C ABI §10) whose agents complete at once, and for
//! measuring the core's own cost per pass (the window bench). It captures nothing; its plan
//! reports `footprint_bytes` tracked and captured, and each restore reports the configured
//! restored and compared bytes, so the outcome's per-pass figures can be checked.

use replay_core::{
    AgentId, BackendError, BackendErrorKind, CaptureStats, Dispatch, Policy, RestoreError,
    RestoreStats, Scope, ScopeCheck, Snapshot, SnapshotError, SnapshotPlan, Snapshotter, WaitSpec,
};

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct InstantSnapshotter {
    /// Bytes the plan reports tracked and captured.
    pub footprint_bytes: u64,
    /// Bytes each restore reports written back.
    pub restored_bytes: u64,
    /// Bytes each restore reports compared.
    pub compared_bytes: u64,
    /// `sync_ordered` fails (a restore ordered on the device that did not finish), so a
    /// decorator's test can tell it forwards the call.
    pub sync_fails: bool,
}

/// The snapshot of an [`InstantSnapshotter`].
#[derive(Debug, Clone, Copy)]
pub struct InstantSnapshot(InstantSnapshotter);

impl Snapshotter for InstantSnapshotter {
    fn plan(&self, _: &Dispatch, scope: Scope, _: &Policy) -> Result<SnapshotPlan, BackendError> {
        Ok(SnapshotPlan {
            scope,
            tracked_bytes: self.footprint_bytes,
            captured_bytes: self.footprint_bytes,
            capacity_bytes: 1 << 40,
            ..SnapshotPlan::default()
        })
    }

    fn capture(
        &self,
        _: &SnapshotPlan,
        _: &Policy,
        _: &WaitSpec<'_>,
    ) -> Result<Box<dyn Snapshot>, SnapshotError> {
        Ok(Box::new(InstantSnapshot(*self)))
    }

    fn pooled_peak_bytes(&self) -> u64 {
        0
    }

    fn sync_ordered(&self, _: &WaitSpec<'_>) -> Result<(), BackendError> {
        if self.sync_fails {
            return Err(BackendError::on(AgentId(0), "sync ordered restores").error(
                BackendErrorKind::CopyFailed,
                "an ordered restore did not finish",
            ));
        }
        Ok(())
    }
}

impl Snapshot for InstantSnapshot {
    fn stats(&self) -> CaptureStats {
        CaptureStats::default()
    }

    fn check_scope(&mut self, _: &WaitSpec<'_>) -> Result<ScopeCheck, BackendError> {
        Ok(ScopeCheck::Clean)
    }

    fn restore(&mut self, _: &WaitSpec<'_>) -> Result<RestoreStats, RestoreError> {
        Ok(RestoreStats {
            restored_bytes: self.0.restored_bytes,
            compared_bytes: self.0.compared_bytes,
            ..RestoreStats::default()
        })
    }
}
