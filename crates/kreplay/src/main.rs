//! # kreplay
//!
//! The command line of kernel-replay (SPEC §2, top layer): `kreplay demo` runs a workload on the
//! simulated GPU under replay and checks it against a plain run; `kreplay bench --backend cuda`
//! runs the CUDA backend's checks and measurements on a real GPU ([`replay_bench`]);
//! `kreplay run` runs an unmodified CUDA application under replay; `kreplay demo --capture DIR`
//! captures the demo's replayed dispatches ([`replay_capture`], SPEC §13) and
//! `kreplay replay DIR` replays them standalone and checks their outputs; `kreplay report FILE
//! --html OUT` writes the HTML report of a saved counters JSON ([`report`]). The command line is parsed
//! in [`cli`] (clap's derive API); `--help` works on every command.
//!
//! Bad input never panics: an argument or a `KREPLAY_*` value that is not UTF-8 is an error
//! naming it (exit 2, like every usage error), and a message that cannot be written (stderr or
//! stdout closed or full) is dropped, the exit status saying what happened (1: the demo failed
//! or its output could not be written, 2: bad input).

#![forbid(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

mod capture;
mod cli;
mod collect;
mod demo;
mod replay;
mod replay_hsa;
mod report;
mod run;
mod template;

use std::io::Write;
use std::process::ExitCode;

use replay_core::policy::LogLevel;

/// Bad command line or environment.
const EXIT_USAGE: u8 = 2;
/// The demo failed, or output could not be written.
const EXIT_FAILED: u8 = 1;

/// Writes one line to stderr; a stderr that cannot be written (closed, full) loses the line,
/// never the process (`eprintln!` would panic).
pub(crate) fn say(msg: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(msg).and_then(|()| err.write_all(b"\n"));
    let _ = err.flush();
}

/// Writes `text` and a newline to stdout; `false` when it could not be written.
fn print_out(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").and_then(|()| out.flush()).is_ok()
}

/// The default sink's level: `KREPLAY_LOG` (read as the policy reads it, so a value that is
/// not UTF-8 is malformed), else warnings.
fn log_level() -> Result<LogLevel, replay_core::PolicyError> {
    let base = replay_core::Policy {
        log_level: LogLevel::Warn,
        ..replay_core::Policy::default()
    };
    let env = replay_core::Policy::lookup_over(base, |name| {
        (name == "KREPLAY_LOG")
            .then(|| std::env::var_os(name))
            .flatten()
    });
    env.into_result().map(|p| p.log_level)
}

fn main() -> ExitCode {
    // A panic anywhere (a bug, or code outside this crate that prints with `eprintln!` to a
    // stderr that cannot take it) is one line, if stderr takes it, and exit 1: never a
    // backtrace or the status 101 of an uncaught panic.
    std::panic::set_hook(Box::new(|info| {
        say(format_args!("kreplay: internal error: {info}"));
    }));
    std::panic::catch_unwind(run).unwrap_or(ExitCode::from(EXIT_FAILED))
}

fn run() -> ExitCode {
    let cmd = match cli::parse_os(std::env::args_os().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            say(format_args!("kreplay: {e}\n\n{}", e.usage));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if !matches!(cmd, cli::Command::Run(_) | cli::Command::Capture(_)) {
        // The default sink: warnings unless KREPLAY_LOG says otherwise (outcome lines are
        // printed by the demo itself).
        let level = match log_level() {
            Ok(l) => l,
            Err(e) => {
                say(format_args!("kreplay: {e}"));
                return ExitCode::from(EXIT_USAGE);
            }
        };
        replay_core::log_sink::install(level);
    }
    match cmd {
        // Help and version are rendered to text and printed here, never by clap's
        // `Error::print`/`exit`: a stdout that cannot take them is exit 1, not a panic.
        cli::Command::Help(text) | cli::Command::Version(text) => {
            if print_out(text.trim_end()) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_FAILED)
            }
        }
        cli::Command::Run(rest) => {
            // Warnings for `kreplay run`'s own messages; the application's level is its
            // KREPLAY_LOG (run/mod.rs sets it for the child).
            replay_core::log_sink::install(LogLevel::Warn);
            ExitCode::from(run::main(&rest))
        }
        cli::Command::Capture(rest) => {
            replay_core::log_sink::install(LogLevel::Warn);
            ExitCode::from(capture::main(&rest))
        }
        cli::Command::Bench(b) => {
            // Only "cuda" gets past the parser. The ncu case re-invokes this executable as
            // `kreplay bench --backend cuda app ...`.
            let me = replay_bench::SelfInvocation::current(&["bench", "--backend", &b.backend]);
            let code = replay_bench::main_with_args(b.args, me);
            ExitCode::from(u8::try_from(code).unwrap_or(EXIT_FAILED))
        }
        cli::Command::Report(a) => match report::run(&a) {
            Ok(n) => {
                say(format_args!(
                    "kreplay report: {} ({n} dispatch(es))",
                    a.html.display()
                ));
                ExitCode::SUCCESS
            }
            Err(e) => {
                say(format_args!("kreplay report: {e}"));
                ExitCode::from(e.exit_code())
            }
        },
        cli::Command::Replay(a) => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            match replay::run(&a, &mut out) {
                Ok(code) => {
                    if out.flush().is_err() {
                        return ExitCode::from(EXIT_FAILED);
                    }
                    ExitCode::from(code)
                }
                Err(e) => {
                    let _ = out.flush();
                    say(format_args!("kreplay replay: {e}"));
                    ExitCode::from(e.exit_code())
                }
            }
        }
        cli::Command::Demo(a) => {
            if a.inject.as_deref() == Some("callback-panic") {
                // The demo's tool panics on purpose; say so in one line instead of a backtrace.
                std::panic::set_hook(Box::new(|info| {
                    say(format_args!(
                        "[demo] tool callback panicked on purpose: {info}"
                    ));
                }));
            }
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            match demo::run(&a, &mut out) {
                Ok(code) => {
                    if out.flush().is_err() {
                        return ExitCode::from(EXIT_FAILED);
                    }
                    ExitCode::from(code)
                }
                Err(e) => {
                    say(format_args!("kreplay demo: {e}"));
                    ExitCode::from(match e {
                        demo::DemoError::Policy(_) => EXIT_USAGE,
                        _ => EXIT_FAILED,
                    })
                }
            }
        }
    }
}
