//! Defaults: the SPEC's values, an empty environment, and what `auto` resolves to.

use std::time::Duration;

use replay_core::filter::KernelFilter;
use replay_core::policy::LogLevel;
use replay_core::{CacheControl, Policy, RestoreMode, Scope};

use crate::harness::{from_map, MIB};

#[test]
fn defaults_match_spec() {
    let p = Policy::default();
    assert_eq!(p.max_snapshot_bytes, 0, "0 = automatic");
    assert_eq!(p.device_tier_bytes, 0);
    assert_eq!(p.pinned_tier_bytes, 0);
    assert_eq!(p.pageable_tier_bytes, 0);
    assert_eq!(p.pool_keep_bytes, 256 * MIB);
    assert!(!p.decline_on_vmem, "mappings are captured (SPEC §7.1)");
    assert!(!p.decline_on_untracked);
    assert_eq!(p.warn_seconds, 10.0);
    assert_eq!(p.assumed_gbps, 4.0);
    assert_eq!(p.drain_timeout, Duration::from_secs(60));
    assert_eq!(p.pass_timeout, Duration::from_secs(60));
    assert_eq!(p.poll_slice, Duration::from_millis(10));
    assert_eq!(p.progress_interval, Duration::from_secs(5));
    assert_eq!(p.max_passes, 1024);
    // SPEC §7.2, §8: `auto` for both, resolved per dispatch by the window.
    assert_eq!(p.scope, Scope::Auto);
    assert_eq!(p.restore, RestoreMode::Auto);
    assert_eq!(p.chunk_bytes, MIB);
    assert_eq!(p.cache_control, CacheControl::None);
    assert_eq!(p.filter, KernelFilter::default());
    assert!(p.filter.include.is_empty());
    assert!(p.filter.exclude.is_empty());
    assert_eq!(p.filter.range, None);
    assert_eq!(p.filter.skip, 0);
    assert_eq!(p.filter.count, None);
    assert_eq!(p.log_level, LogLevel::Info);
    assert_eq!(p.validate(), Ok(()));
}

#[test]
fn empty_environment_gives_defaults() {
    assert_eq!(from_map(&[]), Ok(Policy::default()));
    // Unrelated variables are ignored.
    assert_eq!(
        from_map(&[("KREPLAY", "1"), ("KREPLAY_", "x"), ("PATH", "/bin")]),
        Ok(Policy::default())
    );
}

#[test]
fn snapshot_bound_uses_auto_only_when_zero() {
    let mut p = Policy::default();
    assert_eq!(p.snapshot_bound(123), 123);
    p.max_snapshot_bytes = 7;
    assert_eq!(p.snapshot_bound(123), 7);
}

#[test]
fn auto_resolves_by_capability_and_argument_layout() {
    use replay_core::policy::resolve;
    use replay_core::{ArgLayout, Capabilities};
    let device = Capabilities::DEVICE_DIGESTS | Capabilities::COPY_FENCE;
    let hsa = Capabilities::AUTO_ARGUMENTS | Capabilities::COPY_FENCE;
    let neither = Capabilities::COPY_FENCE;
    for (caps, layout, scope, restore) in [
        (
            device,
            ArgLayout::Known,
            Scope::Predicted,
            RestoreMode::Dirty,
        ),
        (device, ArgLayout::Unknown, Scope::All, RestoreMode::Dirty),
        (hsa, ArgLayout::Known, Scope::Predicted, RestoreMode::Full),
        (hsa, ArgLayout::Unknown, Scope::All, RestoreMode::Full),
        (neither, ArgLayout::Known, Scope::All, RestoreMode::Full),
        (neither, ArgLayout::Unknown, Scope::All, RestoreMode::Full),
    ] {
        let r = resolve(Scope::Auto, RestoreMode::Auto, caps, layout);
        assert_eq!(
            (r.scope, r.restore, r.scope_auto, r.restore_auto),
            (scope, restore, true, true),
            "{caps:?} {layout:?}"
        );
        // Explicit values pass unchanged, and are not marked as chosen by auto.
        for s in [Scope::All, Scope::Arguments] {
            for m in [RestoreMode::Full, RestoreMode::Dirty] {
                let r = resolve(s, m, caps, layout);
                assert_eq!(
                    (r.scope, r.restore, r.scope_auto, r.restore_auto),
                    (s, m, false, false)
                );
            }
        }
        // One auto, one explicit.
        let r = resolve(Scope::All, RestoreMode::Auto, caps, layout);
        assert_eq!((r.scope, r.restore), (Scope::All, restore));
        assert!(!r.scope_auto && r.restore_auto);
    }
}
