//! `kreplay` on clap (issue 12): `--help` on every command prints that command's usage and exits
//! 0, and an unknown option is a usage error (exit 2) that names it and the command it was given
//! to.

use std::process::{Command, Output, Stdio};

fn kreplay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kreplay"))
        .args(args)
        .env_remove("KREPLAY_LOG")
        .output()
        .expect("kreplay runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn help_on_every_command_prints_its_usage_and_exits_0() {
    for (args, usage) in [
        (&["--help"][..], "kreplay demo [--passes N]"),
        (&["-h"], "kreplay run [OPTIONS] -- APP ARGS..."),
        (&["help"], "kreplay bench --backend cuda check"),
        (&["demo", "--help"], "kreplay demo [OPTIONS]"),
        (&["demo", "-h"], "kreplay demo [OPTIONS]"),
        (&["help", "demo"], "kreplay demo [OPTIONS]"),
        (
            &["bench", "--help"],
            "kreplay bench --backend cuda [ARGS]...",
        ),
        (&["bench", "-h"], "kreplay bench --backend cuda [ARGS]..."),
        (&["help", "bench"], "kreplay bench --backend cuda [ARGS]..."),
        (
            &["run", "--help"],
            "kreplay run [--tool verify|timing|counters]",
        ),
        (
            &["run", "-h"],
            "kreplay run [--tool verify|timing|counters]",
        ),
        (&["help", "run"], "-- APP ARGS..."),
    ] {
        let o = kreplay(args);
        let out = text(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        assert!(out.contains("usage:"), "{args:?}: {out}");
        assert!(out.contains(usage), "{args:?}: {out}");
    }
    // Each command's help lists its own options.
    let demo = text(&kreplay(&["demo", "--help"]).stdout);
    for opt in ["--passes", "--json", "--inject", "--scope", "--restore"] {
        assert!(demo.contains(opt), "{opt}: {demo}");
    }
    assert!(demo.contains("restore-fail"), "the faults: {demo}");
    assert!(demo.contains("auto|all|arguments"), "{demo}");
    let bench = text(&kreplay(&["bench", "--help"]).stdout);
    assert!(bench.contains("--backend"), "{bench}");
    assert!(
        bench.contains("kreplay bench --backend cuda --help"),
        "{bench}"
    );
}

#[test]
fn help_after_the_backend_is_the_benchs_own() {
    // The bench prints its cases and options (to stderr, with its usage status 2).
    let o = kreplay(&["bench", "--backend", "cuda", "--help"]);
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(e.contains("cases: correctness"), "{e}");
}

#[test]
fn help_whose_stdout_cannot_be_written_ends_with_our_status() {
    for args in [
        &["demo", "--help"][..],
        &["bench", "--help"],
        &["run", "--help"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full exists");
        let o = Command::new(env!("CARGO_BIN_EXE_kreplay"))
            .args(args)
            .stdout(Stdio::from(full))
            .output()
            .expect("kreplay runs");
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o.stderr));
        assert!(!text(&o.stderr).contains("panicked"), "{}", text(&o.stderr));
    }
}

#[test]
fn an_unknown_option_is_a_usage_error_naming_it_and_its_command() {
    for (args, message, usage) in [
        (
            &["demo", "--fast"][..],
            "unknown option \"--fast\" for `kreplay demo`",
            "kreplay demo --help",
        ),
        (
            &["demo", "--passes", "2", "-q"],
            "unknown option \"-q\" for `kreplay demo`",
            "kreplay demo --help",
        ),
        (
            &["--fast", "demo"],
            "unknown option \"--fast\" for `kreplay`",
            "kreplay --help",
        ),
        (&["demo", "--json=yes"], "--json", "kreplay demo --help"),
    ] {
        let o = kreplay(args);
        let e = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(message), "{args:?}: {e}");
        // The usage shown is the command's, with where its help is.
        assert!(e.contains("usage:"), "{args:?}: {e}");
        assert!(e.contains(usage), "{args:?}: {e}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn auto_is_accepted_for_the_demos_scope_and_restore() {
    let o = kreplay(&["demo", "--json", "--scope", "auto", "--restore", "auto"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = kreplay(&["demo", "--scope", "everything"]);
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(
        e.contains("--scope \"everything\"") && e.contains("auto, all, arguments or predicted"),
        "{e}"
    );
}
