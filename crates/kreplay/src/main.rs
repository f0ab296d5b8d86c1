//! # kreplay
//!
//! The command line of kernel-replay (SPEC §2, top layer): `kreplay demo` runs a workload on the
//! simulated GPU under replay and checks it against a plain run; `kreplay bench --backend cuda`
//! runs the CUDA backend's checks and measurements on a real GPU ([`replay_cuda::bench`]);
//! running applications under replay attaches here as backends land.

#![forbid(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

mod cli;
mod demo;
mod run;

use std::io::Write;
use std::process::ExitCode;

use replay_core::policy::LogLevel;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("run") {
        replay_core::log_sink::install(LogLevel::Warn);
        return ExitCode::from(run::main(&args[1..]));
    }
    let cmd = match cli::parse(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kreplay: {e}\n\n{}", cli::usage());
            return ExitCode::from(2);
        }
    };
    // The default sink: warnings unless KREPLAY_LOG says otherwise (outcome lines are printed
    // by the demo itself).
    let level = match std::env::var("KREPLAY_LOG") {
        Ok(v) => match LogLevel::parse(&v) {
            Some(l) => l,
            None => {
                eprintln!(
                    "kreplay: KREPLAY_LOG={v:?} is not valid: expected off, error, warn, info, debug or trace"
                );
                return ExitCode::from(2);
            }
        },
        Err(_) => LogLevel::Warn,
    };
    replay_core::log_sink::install(level);
    match cmd {
        cli::Command::Help => {
            println!("{}", cli::usage());
            ExitCode::SUCCESS
        }
        cli::Command::Version => {
            println!("kreplay {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        cli::Command::Bench(b) => {
            // Only "cuda" gets past the parser. The ncu case re-invokes this executable as
            // `kreplay bench --backend cuda app ...`.
            let me =
                replay_cuda::bench::SelfInvocation::current(&["bench", "--backend", &b.backend]);
            let code = replay_cuda::bench::main_with_args(b.args, me);
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
        cli::Command::Demo(a) => {
            if a.inject.as_deref() == Some("callback-panic") {
                // The demo's tool panics on purpose; say so in one line instead of a backtrace.
                std::panic::set_hook(Box::new(|info| {
                    eprintln!("[demo] tool callback panicked on purpose: {info}");
                }));
            }
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            match demo::run(&a, &mut out) {
                Ok(code) => {
                    let _ = out.flush();
                    ExitCode::from(code as u8)
                }
                Err(e) => {
                    eprintln!("kreplay demo: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}
