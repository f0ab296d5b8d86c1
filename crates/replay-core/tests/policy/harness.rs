//! What every policy test shares: `from_map`, the variable table (`CASES`), error checks.

use std::collections::HashMap;
use std::time::Duration;

use replay_core::filter::DispatchRange;
use replay_core::policy::{LogLevel, ALIAS_PREFIX, PREFIX};
use replay_core::{CacheControl, OutsideCheck, Policy, PolicyError, RestoreMode, Scope};

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// Builds a policy from a map of variables, the way the environment would.
pub fn from_map(vars: &[(&str, &str)]) -> Result<Policy, PolicyError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Policy::from_lookup(|name| map.get(name).cloned())
}

/// One policy variable: its suffix, a valid non-default value, the change that value makes to
/// the default policy, and malformed values.
pub struct Case {
    pub suffix: &'static str,
    pub valid: &'static str,
    pub expect: fn(&mut Policy),
    pub bad: &'static [&'static str],
}

/// Every variable in `Policy::variable_names()` must have a row here
/// (`table_covers_every_variable` fails otherwise).
pub const CASES: &[Case] = &[
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

pub fn expected(case: &Case) -> Policy {
    let mut p = Policy::default();
    (case.expect)(&mut p);
    p
}

/// Every name a variable may be set through in the environment: `KREPLAY_X`, then its aliases.
pub fn env_names(case: &Case) -> Vec<String> {
    let mut names = vec![
        format!("{PREFIX}{}", case.suffix),
        format!("{ALIAS_PREFIX}{}", case.suffix),
    ];
    if case.suffix == "DECLINE_ON_UNTRACKED" {
        names.push(format!("{ALIAS_PREFIX}DECLINE_ON_UNTRACKED_POOL"));
    }
    names
}

pub fn assert_names(err: &PolicyError, name: &str, value: &str) {
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
