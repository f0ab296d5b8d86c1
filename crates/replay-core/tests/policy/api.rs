//! The API: `set_var`, `validate`, serde and `from_env` over the process environment.

use std::time::Duration;

use replay_core::filter::{DispatchRange, KernelFilter};
use replay_core::policy::{ALIAS_PREFIX, PREFIX};
use replay_core::{Policy, RestoreMode};

use crate::harness::{assert_names, env_names, expected, from_map, CASES, GIB};

#[test]
fn set_var_accepts_prefixed_alias_and_bare_names() {
    for case in CASES {
        let mut names = env_names(case);
        names.push(case.suffix.to_owned());
        names.push(case.suffix.to_ascii_lowercase());
        for name in names {
            let mut p = Policy::default();
            p.set_var(&name, case.valid)
                .unwrap_or_else(|e| panic!("set_var({name}, {}) failed: {e}", case.valid));
            assert_eq!(p, expected(case), "set_var({name}, {})", case.valid);
        }
    }
    // The upstream-only alias suffix works bare too.
    let mut p = Policy::default();
    p.set_var("DECLINE_ON_UNTRACKED_POOL", "1").unwrap();
    assert!(p.decline_on_untracked);
}

#[test]
fn set_var_rejects_malformed_values_naming_the_given_name() {
    for case in CASES {
        for name in [
            format!("{PREFIX}{}", case.suffix),
            format!("{ALIAS_PREFIX}{}", case.suffix),
            case.suffix.to_owned(),
        ] {
            for bad in case.bad {
                let mut p = Policy::default();
                let err = p
                    .set_var(&name, bad)
                    .expect_err(&format!("set_var({name}, {bad:?}) should fail"));
                assert_names(&err, &name, bad);
            }
        }
    }
}

#[test]
fn set_var_unknown_name_is_an_error() {
    for name in [
        "KREPLAY_NO_SUCH_THING",
        "ROCPROFILER_KERNEL_REPLAY_NOPE",
        "NOPE",
        "",
    ] {
        let mut p = Policy::default();
        let err = p.set_var(name, "1").unwrap_err();
        assert_eq!(err.variable, name);
        assert_eq!(err.value, "1");
        assert!(err.to_string().contains(name), "{err}");
        assert!(err.expected.contains("known policy variable"), "{err}");
        assert_eq!(p, Policy::default(), "an unknown name changed the policy");
    }
}

#[test]
fn set_var_overrides_environment() {
    let mut p = from_map(&[("KREPLAY_MAX_PASSES", "3"), ("KREPLAY_RESTORE", "dirty")]).unwrap();
    p.set_var("max_passes", "12").unwrap();
    assert_eq!(p.max_passes, 12);
    assert_eq!(p.restore, RestoreMode::Dirty);
}

#[test]
fn validate_names_bad_api_fields() {
    type Breaker = fn(&mut Policy);
    let cases: &[(&str, Breaker)] = &[
        ("max_passes", |p| p.max_passes = 0),
        ("assumed_gbps", |p| p.assumed_gbps = 0.0),
        ("assumed_gbps", |p| p.assumed_gbps = f64::NAN),
        ("assumed_gbps", |p| p.assumed_gbps = -1.0),
        ("assumed_gbps", |p| p.assumed_gbps = f64::INFINITY),
        ("warn_seconds", |p| p.warn_seconds = -1.0),
        ("warn_seconds", |p| p.warn_seconds = f64::NAN),
        ("chunk_bytes", |p| p.chunk_bytes = 3000),
        ("chunk_bytes", |p| p.chunk_bytes = 0),
        ("chunk_bytes", |p| p.chunk_bytes = 2048),
        ("chunk_bytes", |p| p.chunk_bytes = 2 * GIB),
        ("drain_timeout", |p| p.drain_timeout = Duration::ZERO),
        ("pass_timeout", |p| p.pass_timeout = Duration::ZERO),
        ("poll_slice", |p| p.poll_slice = Duration::ZERO),
        ("progress_interval", |p| {
            p.progress_interval = Duration::ZERO
        }),
        ("filter.count", |p| p.filter.count = Some(0)),
        ("filter.range", |p| {
            p.filter.range = Some(DispatchRange {
                first: 9,
                last: Some(3),
            })
        }),
    ];
    for (field, breaker) in cases {
        let mut p = Policy::default();
        breaker(&mut p);
        let err = p.validate().expect_err(&format!("{field} not caught"));
        assert_eq!(err.variable, *field, "{err}");
        assert!(err.to_string().contains(field), "{err}");
        assert!(!err.expected.is_empty());
    }
}

#[test]
fn validate_accepts_good_api_fields() {
    let mut p = Policy {
        max_passes: 1,
        assumed_gbps: 0.001,
        warn_seconds: 0.0,
        chunk_bytes: 4096,
        poll_slice: Duration::from_nanos(1),
        filter: KernelFilter {
            count: Some(1),
            range: Some(DispatchRange {
                first: 5,
                last: None,
            }),
            ..KernelFilter::default()
        },
        ..Policy::default()
    };
    assert_eq!(p.validate(), Ok(()));
    p.chunk_bytes = GIB;
    p.filter.range = Some(DispatchRange {
        first: 5,
        last: Some(5),
    });
    assert_eq!(p.validate(), Ok(()));
}

#[test]
fn set_var_reports_an_invalid_api_field() {
    // set_var validates the whole policy afterwards, so a bad API-set field surfaces.
    let mut p = Policy {
        max_passes: 0,
        ..Policy::default()
    };
    let err = p.set_var("KREPLAY_SCOPE", "arguments").unwrap_err();
    assert_eq!(err.variable, "max_passes");
}

#[test]
fn policy_serde_round_trip() {
    let mut want = Policy::default();
    for case in CASES {
        (case.expect)(&mut want);
    }
    let json = serde_json::to_string(&want).unwrap();
    assert!(json.contains("\"scope\":\"arguments\""), "{json}");
    assert!(json.contains("\"restore\":\"dirty\""), "{json}");
    assert!(json.contains("\"cache_control\":\"flush\""), "{json}");
    assert!(json.contains("\"log_level\":\"debug\""), "{json}");
    let back: Policy = serde_json::from_str(&json).unwrap();
    assert_eq!(back, want);
}

#[test]
fn from_env_reads_the_process_environment() {
    // The only test that touches the process environment; it restores what it changed.
    const NAME: &str = "KREPLAY_PROGRESS_INTERVAL";
    let saved = std::env::var_os(NAME);
    std::env::set_var(NAME, "17s");
    let got = Policy::from_env();
    std::env::set_var(NAME, "bogus");
    let bad = Policy::from_env();
    std::env::set_var(NAME, {
        use std::os::unix::ffi::OsStringExt;
        std::ffi::OsString::from_vec(b"17\xffs".to_vec())
    });
    let not_utf8 = Policy::from_env();
    let lenient = Policy::env_over(Policy::default());
    match &saved {
        Some(v) => std::env::set_var(NAME, v),
        None => std::env::remove_var(NAME),
    }
    assert_eq!(got.unwrap().progress_interval, Duration::from_secs(17));
    assert_names(&bad.unwrap_err(), NAME, "bogus");
    let e = not_utf8.expect_err("a value that is not UTF-8 is malformed, not unset");
    assert_eq!(e.variable, NAME);
    assert!(e.to_string().contains("UTF-8"), "{e}");
    assert_eq!(lenient.errors.len(), 1, "{:?}", lenient.errors);
    assert_eq!(lenient.errors[0].variable, NAME);
}
