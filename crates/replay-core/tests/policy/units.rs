//! Units: bytes, durations, booleans, chunk sizes, enums and numeric edges parse or are rejected.

use std::time::Duration;

use replay_core::policy::{parse_bool, parse_bytes, parse_duration, LogLevel};
use replay_core::{CacheControl, Policy, RestoreMode, Scope};

use crate::harness::{assert_names, from_map, GIB, MIB};

#[test]
fn bytes_parse() {
    for (text, want) in [
        ("0", 0),
        ("1", 1),
        ("1048576", MIB),
        ("1b", 1),
        ("4k", 4096),
        ("4K", 4096),
        ("4kb", 4096),
        ("4KiB", 4096),
        ("4kib", 4096),
        ("3m", 3 * MIB),
        ("3MB", 3 * MIB),
        ("3MiB", 3 * MIB),
        ("2g", 2 * GIB),
        ("2GiB", 2 * GIB),
        ("1TiB", 1 << 40),
        ("16 MiB", 16 * MIB),
        ("  8  ", 8),
        ("18446744073709551615", u64::MAX),
        ("16777215TiB", 16_777_215 << 40),
    ] {
        assert_eq!(parse_bytes(text), Some(want), "{text:?}");
    }
    for text in [
        "",
        "k",
        "KiB",
        "1.5k",
        "-1",
        "+1",
        "1PiB",
        "1 2",
        "1KiBs",
        "0x10",
        "18446744073709551616",
        "17179869184GiB",
        "16777216TiB",
        "18014398509481984KiB",
    ] {
        assert_eq!(parse_bytes(text), None, "{text:?} should be rejected");
    }
}

#[test]
fn durations_parse() {
    for (text, want) in [
        ("500ms", Duration::from_millis(500)),
        ("2s", Duration::from_secs(2)),
        ("2", Duration::from_secs(2)),
        ("1.5", Duration::from_millis(1500)),
        ("0.25s", Duration::from_millis(250)),
        ("2m", Duration::from_secs(120)),
        ("1min", Duration::from_secs(60)),
        ("250us", Duration::from_micros(250)),
        ("100ns", Duration::from_nanos(100)),
        (" 60s ", Duration::from_secs(60)),
        ("60 s", Duration::from_secs(60)),
    ] {
        assert_eq!(parse_duration(text), Some(want), "{text:?}");
    }
    for text in [
        "",
        "s",
        "ms",
        "0",
        "0s",
        "0ms",
        "0.0",
        "0m",
        "-1",
        "-1s",
        "-0.5",
        "5h",
        "1d",
        "nan",
        "inf",
        "1e3",
        "1.2.3",
        "ten",
        "1e9",
        "99999999999",
    ] {
        assert_eq!(parse_duration(text), None, "{text:?} should be rejected");
    }
}

#[test]
fn durations_too_small_to_represent_are_rejected() {
    // A positive value that rounds to a zero Duration is not a positive duration; it must be
    // rejected by the variable itself (naming it), not later by validate() naming a field.
    for text in ["0.1ns", "0.0000000001", "0.0000001ms"] {
        let d = parse_duration(text);
        assert!(d.is_none_or(|d| !d.is_zero()), "{text:?} gave {d:?}");
    }
    let err = from_map(&[("KREPLAY_PASS_TIMEOUT", "0.1ns")]).unwrap_err();
    assert_names(&err, "KREPLAY_PASS_TIMEOUT", "0.1ns");
}

#[test]
fn booleans_parse() {
    for text in ["1", "true", "TRUE", "True", "yes", "YES", "on", "On"] {
        assert_eq!(parse_bool(text), Some(true), "{text:?}");
    }
    for text in ["0", "false", "FALSE", "no", "No", "off", "OFF"] {
        assert_eq!(parse_bool(text), Some(false), "{text:?}");
    }
    for text in [
        "", "2", "-1", "y", "n", "t", "f", "enable", "disabled", "truee",
    ] {
        assert_eq!(parse_bool(text), None, "{text:?} should be rejected");
    }
    // Through a variable, with padding.
    let p = from_map(&[("KREPLAY_DECLINE_ON_VMEM", " Yes ")]).unwrap();
    assert!(p.decline_on_vmem);
}

#[test]
fn chunk_must_be_power_of_two_in_range() {
    for (text, want) in [
        ("4096", 4096),
        ("4KiB", 4096),
        ("8k", 8192),
        ("1MiB", MIB),
        ("256MiB", 256 * MIB),
        ("1GiB", GIB),
    ] {
        let p = from_map(&[("KREPLAY_CHUNK_BYTES", text)]).unwrap();
        assert_eq!(p.chunk_bytes, want, "{text:?}");
    }
    for text in [
        "0", "1", "2048", "2KiB", "4095", "3000", "12KiB", "1536MiB", "2GiB", "1TiB",
    ] {
        let err = from_map(&[("KREPLAY_CHUNK_BYTES", text)]).unwrap_err();
        assert_names(&err, "KREPLAY_CHUNK_BYTES", text);
    }
}

#[test]
fn enums_and_log_levels_parse() {
    for (text, want) in [
        ("off", LogLevel::Off),
        ("error", LogLevel::Error),
        ("warn", LogLevel::Warn),
        ("info", LogLevel::Info),
        ("DEBUG", LogLevel::Debug),
        ("trace", LogLevel::Trace),
    ] {
        assert_eq!(
            from_map(&[("KREPLAY_LOG", text)]).unwrap().log_level,
            want,
            "{text:?}"
        );
    }
    assert_eq!(LogLevel::Off.to_filter(), log::LevelFilter::Off);
    assert_eq!(LogLevel::Trace.to_filter(), log::LevelFilter::Trace);
    for (text, want) in [
        ("all", Scope::All),
        ("arguments", Scope::Arguments),
        ("auto", Scope::Auto),
    ] {
        let base = Policy {
            scope: if want == Scope::Auto {
                Scope::All
            } else {
                Scope::Auto
            },
            ..Policy::default()
        };
        let p = Policy::lookup_over(base, |n| {
            (n == "KREPLAY_SCOPE").then(|| text.to_ascii_uppercase().into())
        })
        .into_result()
        .unwrap();
        assert_eq!(p.scope, want, "{text} in any case");
        assert_eq!(want.as_str(), text);
        assert_eq!(Scope::parse(text), Some(want));
        assert_eq!(serde_json::to_value(want).unwrap(), text);
    }
    for (text, want) in [
        ("full", RestoreMode::Full),
        ("dirty", RestoreMode::Dirty),
        ("auto", RestoreMode::Auto),
    ] {
        let base = Policy {
            restore: if want == RestoreMode::Auto {
                RestoreMode::Full
            } else {
                RestoreMode::Auto
            },
            ..Policy::default()
        };
        let p = Policy::lookup_over(base, |n| {
            (n == "KREPLAY_RESTORE").then(|| text.to_ascii_uppercase().into())
        })
        .into_result()
        .unwrap();
        assert_eq!(p.restore, want, "{text} in any case");
        assert_eq!(want.as_str(), text);
        assert_eq!(RestoreMode::parse(text), Some(want));
        assert_eq!(serde_json::to_value(want).unwrap(), text);
    }
    // Through the API's by-name setter too, and back from `auto` to an explicit value.
    let mut p = Policy {
        scope: Scope::All,
        restore: RestoreMode::Dirty,
        ..Policy::default()
    };
    p.set_var("scope", "auto").unwrap();
    p.set_var("KREPLAY_RESTORE", "auto").unwrap();
    assert_eq!((p.scope, p.restore), (Scope::Auto, RestoreMode::Auto));
    let err = p.set_var("KREPLAY_RESTORE", "automatic").unwrap_err();
    assert!(err.to_string().contains("auto/full/dirty"), "{err}");
    assert_eq!(
        p.restore,
        RestoreMode::Auto,
        "a rejected value changes nothing"
    );
    for (text, want) in [("flush", CacheControl::Flush), ("none", CacheControl::None)] {
        let p = from_map(&[("KREPLAY_CACHE_CONTROL", text)]).unwrap();
        assert_eq!(p.cache_control, want);
    }
}

#[test]
fn numeric_edges() {
    let p = from_map(&[("KREPLAY_MAX_PASSES", "4294967295")]).unwrap();
    assert_eq!(p.max_passes, u32::MAX);
    let p = from_map(&[("KREPLAY_MAX_PASSES", "1")]).unwrap();
    assert_eq!(p.max_passes, 1);
    let p = from_map(&[("KREPLAY_WARN_SECONDS", "0")]).unwrap();
    assert_eq!(p.warn_seconds, 0.0, "0 warn seconds is allowed");
    let p = from_map(&[("KREPLAY_ASSUMED_GBPS", "0.5")]).unwrap();
    assert_eq!(p.assumed_gbps, 0.5);
    let p = from_map(&[("KREPLAY_KERNEL_SKIP", "0")]).unwrap();
    assert_eq!(p.filter.skip, 0);
    let p = from_map(&[("KREPLAY_MAX_SNAPSHOT_BYTES", "0")]).unwrap();
    assert_eq!(p.max_snapshot_bytes, 0);
}
