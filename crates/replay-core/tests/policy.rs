//! Policy (SPEC §8): defaults, `KREPLAY_*` variables and their upstream aliases, unit parsing,
//! the API (`set_var`, `validate`) and the kernel filter the variables build.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use replay_core::filter::{DispatchRange, FilterState, KernelFilter};
use replay_core::policy::{
    parse_bool, parse_bytes, parse_duration, LogLevel, ALIAS_PREFIX, PREFIX,
};
use replay_core::{
    AgentId, CacheControl, Dim3, DispatchId, DispatchInfo, KernelId, OutsideCheck, Policy,
    PolicyError, QueueId, RestoreMode, Scope,
};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Builds a policy from a map of variables, the way the environment would.
fn from_map(vars: &[(&str, &str)]) -> Result<Policy, PolicyError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Policy::from_lookup(|name| map.get(name).cloned())
}

/// One policy variable: its suffix, a valid non-default value, the change that value makes to
/// the default policy, and malformed values.
struct Case {
    suffix: &'static str,
    valid: &'static str,
    expect: fn(&mut Policy),
    bad: &'static [&'static str],
}

/// Every variable in `Policy::variable_names()` must have a row here
/// (`table_covers_every_variable` fails otherwise).
const CASES: &[Case] = &[
    Case {
        suffix: "MAX_SNAPSHOT_BYTES",
        valid: "2GiB",
        expect: |p| p.max_snapshot_bytes = 2 * GIB,
        bad: &["12XB", "lots", "-1", "1.5GiB", "99999999999999999999"],
    },
    Case {
        suffix: "DEVICE_TIER_BYTES",
        valid: "64KiB",
        expect: |p| p.device_tier_bytes = 64 << 10,
        bad: &["64QiB", "", "GiB"],
    },
    Case {
        suffix: "PINNED_TIER_BYTES",
        valid: "16MiB",
        expect: |p| p.pinned_tier_bytes = 16 * MIB,
        bad: &["-16MiB", "16PiB"],
    },
    Case {
        suffix: "PAGEABLE_TIER_BYTES",
        valid: "1048576",
        expect: |p| p.pageable_tier_bytes = MIB,
        bad: &["1e6", "17179869184GiB"],
    },
    Case {
        suffix: "POOL_KEEP_BYTES",
        valid: "512k",
        expect: |p| p.pool_keep_bytes = 512 << 10,
        bad: &["half", "0x100"],
    },
    Case {
        suffix: "POOL_IDLE_RELEASE",
        valid: "off",
        expect: |p| p.pool_idle_release = Duration::ZERO,
        bad: &["soon", "-1s", "5h", ""],
    },
    Case {
        suffix: "DECLINE_ON_VMEM",
        valid: "on",
        expect: |p| p.decline_on_vmem = true,
        bad: &["maybe", "2", ""],
    },
    Case {
        suffix: "DECLINE_ON_UNTRACKED",
        valid: "yes",
        expect: |p| p.decline_on_untracked = true,
        bad: &["y", "enable"],
    },
    Case {
        suffix: "WARN_SECONDS",
        valid: "2.5",
        expect: |p| p.warn_seconds = 2.5,
        bad: &["-1", "NaN", "inf", "ten"],
    },
    Case {
        suffix: "ASSUMED_GBPS",
        valid: "25",
        expect: |p| p.assumed_gbps = 25.0,
        bad: &["0", "-3", "NaN", "fast"],
    },
    Case {
        suffix: "DRAIN_TIMEOUT",
        valid: "500ms",
        expect: |p| p.drain_timeout = Duration::from_millis(500),
        bad: &["0", "0s", "-5", "soon"],
    },
    Case {
        suffix: "PASS_TIMEOUT",
        valid: "2m",
        expect: |p| p.pass_timeout = Duration::from_secs(120),
        bad: &["-5s", "5h", "0ms"],
    },
    Case {
        suffix: "POLL_SLICE",
        valid: "250us",
        expect: |p| p.poll_slice = Duration::from_micros(250),
        bad: &["10h", "ms", "1e3"],
    },
    Case {
        suffix: "PROGRESS_INTERVAL",
        valid: "30",
        expect: |p| p.progress_interval = Duration::from_secs(30),
        bad: &["often", "0m"],
    },
    Case {
        suffix: "MAX_PASSES",
        valid: "7",
        expect: |p| p.max_passes = 7,
        bad: &["0", "-1", "4294967296", "many"],
    },
    Case {
        suffix: "SCOPE",
        valid: "arguments",
        expect: |p| p.scope = Scope::Arguments,
        bad: &["some", "args", ""],
    },
    Case {
        suffix: "OUTSIDE_CHECK",
        valid: "First",
        expect: |p| p.outside_check = OutsideCheck::First,
        bad: &["sometimes", "0", ""],
    },
    Case {
        suffix: "RESTORE",
        valid: "dirty",
        expect: |p| p.restore = RestoreMode::Dirty,
        bad: &["partial", "clean"],
    },
    Case {
        suffix: "CHUNK_BYTES",
        valid: "64KiB",
        expect: |p| p.chunk_bytes = 64 << 10,
        bad: &["3000", "2KiB", "2GiB", "12KiB", "0"],
    },
    Case {
        suffix: "PREDICT",
        valid: "always",
        expect: |p| p.predict = replay_core::PredictWhen::Always,
        bad: &["sometimes", "1"],
    },
    Case {
        suffix: "CACHE_CONTROL",
        valid: "flush",
        expect: |p| p.cache_control = CacheControl::Flush,
        bad: &["purge", "invalidate"],
    },
    Case {
        suffix: "KERNEL_INCLUDE",
        valid: "gemm, conv*",
        expect: |p| p.filter.include = vec!["gemm".into(), "conv*".into()],
        bad: &["gemm,,conv", "gemm,", ""],
    },
    Case {
        suffix: "KERNEL_EXCLUDE",
        valid: "slow",
        expect: |p| p.filter.exclude = vec!["slow".into()],
        bad: &[",slow", " , "],
    },
    Case {
        suffix: "COMMUNICATION_KERNELS",
        valid: "nccl, mpi_*",
        expect: |p| p.filter.communication = vec!["nccl".into(), "mpi_*".into()],
        bad: &["nccl,", ","],
    },
    Case {
        suffix: "DISPATCH_RANGE",
        valid: "10-20",
        expect: |p| {
            p.filter.range = Some(DispatchRange {
                first: 10,
                last: Some(20),
            })
        },
        bad: &["20-10", "-5", "a-b", "ten"],
    },
    Case {
        suffix: "KERNEL_SKIP",
        valid: "3",
        expect: |p| p.filter.skip = 3,
        bad: &["three", "-1", "1.5"],
    },
    Case {
        suffix: "KERNEL_COUNT",
        valid: "5",
        expect: |p| p.filter.count = Some(5),
        bad: &["0", "five", "-2"],
    },
    Case {
        suffix: "LOG",
        valid: "debug",
        expect: |p| p.log_level = LogLevel::Debug,
        bad: &["loud", "verbose"],
    },
];

fn expected(case: &Case) -> Policy {
    let mut p = Policy::default();
    (case.expect)(&mut p);
    p
}

/// Every name a variable may be set through in the environment: `KREPLAY_X`, then its aliases.
fn env_names(case: &Case) -> Vec<String> {
    let mut names = vec![
        format!("{PREFIX}{}", case.suffix),
        format!("{ALIAS_PREFIX}{}", case.suffix),
    ];
    if case.suffix == "DECLINE_ON_UNTRACKED" {
        names.push(format!("{ALIAS_PREFIX}DECLINE_ON_UNTRACKED_POOL"));
    }
    names
}

fn assert_names(err: &PolicyError, name: &str, value: &str) {
    assert_eq!(err.variable, name, "{err}");
    assert_eq!(err.value, value, "{err}");
    let text = err.to_string();
    assert!(text.contains(name), "{text:?} does not name {name}");
    assert!(
        text.contains(value),
        "{text:?} does not contain the value {value:?}"
    );
    assert!(!err.expected.is_empty(), "{text:?} says nothing expected");
}

fn info(name: &str, id: u64) -> DispatchInfo {
    DispatchInfo::new(
        AgentId(0),
        QueueId(0),
        KernelId(1),
        name,
        Dim3::new(1, 1, 1),
        Dim3::new(1, 1, 1),
    )
    .with_dispatch_id(DispatchId(id))
}

// ---------------------------------------------------------------------------------------------
// Defaults

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

// ---------------------------------------------------------------------------------------------
// The variable table

#[test]
fn table_covers_every_variable() {
    let names: Vec<String> = Policy::variable_names().collect();
    let unique: BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "duplicate variable names");
    for name in &names {
        assert!(name.starts_with(PREFIX), "{name} lacks the {PREFIX} prefix");
    }
    let table: BTreeSet<String> = CASES
        .iter()
        .map(|c| format!("{PREFIX}{}", c.suffix))
        .collect();
    assert_eq!(table.len(), CASES.len(), "duplicate rows in the test table");
    let known: BTreeSet<String> = names.into_iter().collect();
    let missing: Vec<&String> = known.difference(&table).collect();
    let stale: Vec<&String> = table.difference(&known).collect();
    assert!(
        missing.is_empty(),
        "variables without a test case: {missing:?}"
    );
    assert!(stale.is_empty(), "test cases for no variable: {stale:?}");
    for case in CASES {
        assert!(
            !case.bad.is_empty(),
            "{} has no malformed value",
            case.suffix
        );
        assert_ne!(
            expected(case),
            Policy::default(),
            "{}={} does not differ from the default",
            case.suffix,
            case.valid
        );
    }
}

#[test]
fn every_variable_sets_exactly_its_field() {
    for case in CASES {
        for name in env_names(case) {
            let got = from_map(&[(&name, case.valid)])
                .unwrap_or_else(|e| panic!("{name}={} rejected: {e}", case.valid));
            assert_eq!(got, expected(case), "{name}={}", case.valid);
        }
    }
}

#[test]
fn surrounding_whitespace_is_ignored() {
    for case in CASES {
        let name = format!("{PREFIX}{}", case.suffix);
        let padded = format!("  {}\t", case.valid);
        assert_eq!(
            from_map(&[(&name, &padded)]),
            Ok(expected(case)),
            "{name}={padded:?}"
        );
    }
}

#[test]
fn all_variables_at_once() {
    let vars: Vec<(String, &str)> = CASES
        .iter()
        .map(|c| (format!("{PREFIX}{}", c.suffix), c.valid))
        .collect();
    let refs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let mut want = Policy::default();
    for case in CASES {
        (case.expect)(&mut want);
    }
    assert_eq!(from_map(&refs), Ok(want));
}

#[test]
fn kreplay_name_wins_over_alias() {
    for case in CASES {
        let ours = format!("{PREFIX}{}", case.suffix);
        for alias in env_names(case).into_iter().skip(1) {
            // The alias holds a different (here: malformed) value; ours is used, the alias is
            // never looked at beyond a warning.
            for bad in case.bad {
                let got = from_map(&[(&ours, case.valid), (&alias, bad)]);
                assert_eq!(got, Ok(expected(case)), "{ours} vs {alias}={bad:?}");
            }
        }
    }
    // And with two valid, different values.
    let p = from_map(&[
        ("KREPLAY_MAX_PASSES", "3"),
        ("ROCPROFILER_KERNEL_REPLAY_MAX_PASSES", "9"),
    ])
    .unwrap();
    assert_eq!(p.max_passes, 3);
    let p = from_map(&[
        ("KREPLAY_DECLINE_ON_UNTRACKED", "false"),
        (
            "ROCPROFILER_KERNEL_REPLAY_DECLINE_ON_UNTRACKED_POOL",
            "true",
        ),
    ])
    .unwrap();
    assert!(!p.decline_on_untracked);
    let p = from_map(&[
        ("KREPLAY_SCOPE", "all"),
        ("ROCPROFILER_KERNEL_REPLAY_SCOPE", "arguments"),
    ])
    .unwrap();
    assert_eq!(p.scope, Scope::All);
}

#[test]
fn malformed_value_of_every_variable_names_it() {
    for case in CASES {
        for name in env_names(case) {
            for bad in case.bad {
                let err = from_map(&[(&name, bad)])
                    .expect_err(&format!("{name}={bad:?} should be rejected"));
                assert_names(&err, &name, bad);
            }
        }
    }
}

#[test]
fn malformed_value_is_reported_even_when_others_are_valid() {
    let err = from_map(&[
        ("KREPLAY_MAX_PASSES", "5"),
        ("KREPLAY_SCOPE", "everything"),
        ("KREPLAY_LOG", "debug"),
    ])
    .unwrap_err();
    assert_names(&err, "KREPLAY_SCOPE", "everything");
    assert!(err.to_string().contains("auto/all/arguments"), "{err}");
}

/// Like `from_map`, over `base`, with raw (possibly non-UTF-8) values.
fn over_map(base: Policy, vars: &[(&str, &[u8])]) -> replay_core::policy::EnvPolicy {
    use std::os::unix::ffi::OsStringExt;
    let map: HashMap<String, std::ffi::OsString> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), std::ffi::OsString::from_vec(v.to_vec())))
        .collect();
    Policy::lookup_over(base, |name| map.get(name).cloned())
}

#[test]
fn a_value_that_is_not_utf8_is_malformed_naming_the_variable() {
    for case in CASES {
        for name in env_names(case) {
            let got = over_map(Policy::default(), &[(&name, b"\xff\xfe1")]);
            assert_eq!(got.errors.len(), 1, "{name}: {:?}", got.errors);
            let e = &got.errors[0];
            assert_eq!(e.variable, name, "{e}");
            assert!(e.to_string().contains(&name), "{e}");
            assert!(e.to_string().contains("UTF-8"), "{e}");
            assert_eq!(
                got.policy,
                Policy::default(),
                "{name}: the field keeps its value"
            );
            let strict = Policy::lookup_over(Policy::default(), |n| {
                (n == name).then(|| {
                    use std::os::unix::ffi::OsStringExt;
                    std::ffi::OsString::from_vec(vec![0xff])
                })
            })
            .into_result();
            assert!(strict.is_err(), "{name}: the strict form refuses it");
        }
    }
}

#[test]
fn env_over_keeps_the_well_formed_values_and_lists_every_malformed_one() {
    let got = over_map(
        Policy::default(),
        &[
            ("KREPLAY_MAX_PASSES", b"many"),
            ("KREPLAY_SCOPE", b"arguments"),
            ("ROCPROFILER_KERNEL_REPLAY_CHUNK_BYTES", b"\xff"),
            ("KREPLAY_LOG", b"debug"),
        ],
    );
    let names: Vec<&str> = got.errors.iter().map(|e| e.variable.as_str()).collect();
    assert_eq!(
        names,
        [
            "KREPLAY_MAX_PASSES",
            "ROCPROFILER_KERNEL_REPLAY_CHUNK_BYTES"
        ]
    );
    let want = Policy {
        scope: Scope::Arguments,
        log_level: LogLevel::Debug,
        ..Policy::default()
    };
    assert_eq!(
        got.policy, want,
        "well-formed values kept, malformed ones left as they were"
    );
    assert_eq!(got.clone().into_result().unwrap_err(), got.errors[0]);
}

#[test]
fn env_over_applies_over_a_base_and_leaves_unset_fields_alone() {
    let base = Policy {
        scope: Scope::Arguments,
        pass_timeout: Duration::from_millis(250),
        drain_timeout: Duration::from_millis(250),
        ..Policy::default()
    };
    let got = over_map(
        base.clone(),
        &[("KREPLAY_SCOPE", b"all"), ("KREPLAY_MAX_PASSES", b"0")],
    );
    assert_eq!(got.errors.len(), 1);
    let mut want = base;
    want.scope = Scope::All;
    assert_eq!(got.policy, want);
}

#[test]
fn canonical_names() {
    assert_eq!(
        Policy::canonical_name("ROCPROFILER_KERNEL_REPLAY_DECLINE_ON_UNTRACKED_POOL").as_deref(),
        Some("KREPLAY_DECLINE_ON_UNTRACKED")
    );
    assert_eq!(
        Policy::canonical_name("max_passes").as_deref(),
        Some("KREPLAY_MAX_PASSES")
    );
    assert_eq!(
        Policy::canonical_name("KREPLAY_SCOPE").as_deref(),
        Some("KREPLAY_SCOPE")
    );
    assert_eq!(Policy::canonical_name("KREPLAY_HSA_TOOL"), None);
}

#[test]
fn every_variable_name_is_documented() {
    // Prefer the user documentation once it exists (README.md and docs/*.md at the workspace
    // root); until then the variable must at least be listed in policy.rs.
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.join("../..");
    let mut docs = String::new();
    if let Ok(text) = std::fs::read_to_string(root.join("README.md")) {
        docs.push_str(&text);
    }
    if let Ok(dir) = std::fs::read_dir(root.join("docs")) {
        for entry in dir.flatten() {
            if entry.path().extension().is_some_and(|e| e == "md") {
                docs.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
    }
    if docs.is_empty() {
        let src = std::fs::read_to_string(manifest.join("src/policy.rs")).unwrap();
        for name in Policy::variable_names() {
            let suffix = name.strip_prefix(PREFIX).unwrap();
            assert!(
                src.contains(&format!("\"{suffix}\"")),
                "{name} is not listed in policy.rs"
            );
        }
    } else {
        for name in Policy::variable_names() {
            assert!(
                docs.contains(&name),
                "{name} is not documented in README.md/docs"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Units

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

// ---------------------------------------------------------------------------------------------
// The API

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

// ---------------------------------------------------------------------------------------------
// The kernel filter built from variables

#[test]
fn filter_include_exclude_lists() {
    let p = from_map(&[
        ("KREPLAY_KERNEL_INCLUDE", "gemm, conv*"),
        ("KREPLAY_KERNEL_EXCLUDE", "*slow*,naive"),
    ])
    .unwrap();
    let f = &p.filter;
    assert!(
        f.matches(&info("ampere_gemm_kernel", 1)),
        "substring include"
    );
    assert!(f.matches(&info("conv2d_fwd", 2)), "glob include");
    assert!(!f.matches(&info("my_conv2d", 3)), "glob is anchored");
    assert!(!f.matches(&info("softmax", 4)), "not included");
    assert!(!f.matches(&info("gemm_slow_path", 5)), "excluded by glob");
    assert!(!f.matches(&info("naive_gemm", 6)), "excluded by substring");
    assert!(!f.matches(&info("conv_slow", 7)), "exclusion wins");

    // Only an exclude list: every other name is admitted.
    let p = from_map(&[("KREPLAY_KERNEL_EXCLUDE", "memset")]).unwrap();
    assert!(p.filter.matches(&info("anything", 1)));
    assert!(!p.filter.matches(&info("__amd_rocclr_memset", 2)));

    // No filter variables: everything is admitted, without counting.
    let p = from_map(&[]).unwrap();
    let st = FilterState::default();
    assert!((0..100).all(|i| p.filter.admit(&info("k", i), &st)));
}

#[test]
fn filter_dispatch_range() {
    let p = from_map(&[("KREPLAY_DISPATCH_RANGE", "10-20")]).unwrap();
    let admitted: Vec<u64> = (0..30)
        .filter(|&i| p.filter.matches(&info("k", i)))
        .collect();
    assert_eq!(admitted, (10..=20).collect::<Vec<_>>());

    let p = from_map(&[("KREPLAY_DISPATCH_RANGE", "25-")]).unwrap();
    assert!(!p.filter.matches(&info("k", 24)));
    assert!(p.filter.matches(&info("k", 25)));
    assert!(p.filter.matches(&info("k", u64::MAX)));

    let p = from_map(&[("KREPLAY_DISPATCH_RANGE", "7")]).unwrap();
    let admitted: Vec<u64> = (0..30)
        .filter(|&i| p.filter.matches(&info("k", i)))
        .collect();
    assert_eq!(admitted, [7]);
}

#[test]
fn filter_skip_and_count() {
    let p = from_map(&[
        ("KREPLAY_KERNEL_INCLUDE", "gemm"),
        ("KREPLAY_KERNEL_SKIP", "1"),
        ("KREPLAY_KERNEL_COUNT", "2"),
    ])
    .unwrap();
    let st = FilterState::default();
    let names = [
        "gemm", "relu", "gemm", "relu", "gemm", "gemm", "relu", "gemm",
    ];
    let admitted: Vec<bool> = names
        .iter()
        .enumerate()
        .map(|(i, n)| p.filter.admit(&info(n, i as u64), &st))
        .collect();
    // Non-matching names do not count against skip or count: the first gemm is skipped, the
    // next two are admitted, later ones are not.
    assert_eq!(
        admitted,
        [false, false, true, false, true, false, false, false]
    );

    // Count alone.
    let p = from_map(&[("ROCPROFILER_KERNEL_REPLAY_KERNEL_COUNT", "3")]).unwrap();
    let st = FilterState::default();
    let n = (0..10)
        .filter(|&i| p.filter.admit(&info("k", i), &st))
        .count();
    assert_eq!(n, 3);

    // Skip alone.
    let p = from_map(&[("KREPLAY_KERNEL_SKIP", "4")]).unwrap();
    let st = FilterState::default();
    let admitted: Vec<u64> = (0..10)
        .filter(|&i| p.filter.admit(&info("k", i), &st))
        .collect();
    assert_eq!(admitted, (4..10).collect::<Vec<_>>());
}

#[test]
fn filter_range_combines_with_names_and_count() {
    let p = from_map(&[
        ("KREPLAY_DISPATCH_RANGE", "100-"),
        ("KREPLAY_KERNEL_EXCLUDE", "copy"),
        ("KREPLAY_KERNEL_COUNT", "2"),
    ])
    .unwrap();
    let st = FilterState::default();
    let seq = [
        ("k", 50),
        ("k", 99),
        ("copy_buffer", 100),
        ("k", 101),
        ("k", 102),
        ("k", 103),
    ];
    let admitted: Vec<u64> = seq
        .iter()
        .filter(|(n, i)| p.filter.admit(&info(n, *i), &st))
        .map(|(_, i)| *i)
        .collect();
    assert_eq!(admitted, [101, 102]);
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
