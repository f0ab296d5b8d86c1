//! The variable table: each `KREPLAY_*` variable and alias sets its field, bad values name it.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use replay_core::policy::{LogLevel, PREFIX};
use replay_core::{Policy, Scope};

use crate::harness::{assert_names, env_names, expected, from_map, CASES};

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
