//! Command-line parsing: small, dependency-free, and every bad input is an error that names the
//! option and what it accepts. Arguments arrive as `OsString`s: one that is not valid UTF-8 is
//! such an error too (never a panic).
//!
//! Options of `demo` override the environment (SPEC §8: defaults, then environment, then the
//! command line), so the fields the environment can also set are `None` unless given.

use replay_core::{RestoreMode, Scope};

/// Faults the demo can inject (SPEC §6, §8).
pub const FAULTS: &[&str] = &[
    "snapshot-oom",
    "capture-copy-fail",
    "queue-drain-stuck",
    "agent-drain-stuck",
    "copy-fence-stuck",
    "pass-stuck",
    "reentrant",
    "untracked-vmem",
    "over-budget",
    "callback-panic",
    "freed-region",
    "restore-fail",
];

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `kreplay demo`.
    Demo(DemoArgs),
    /// `kreplay bench --backend cuda [ARGS...]`: the arguments after `--backend cuda` go to the
    /// backend's bench as they are.
    Bench(BenchArgs),
    /// `kreplay help`, `--help`, or `kreplay demo --help`.
    Help,
    /// `kreplay --version`.
    Version,
}

/// Options of `kreplay demo`.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoArgs {
    /// Passes per replayed dispatch.
    pub passes: u64,
    /// One JSON document instead of tables.
    pub json: bool,
    /// A fault to inject.
    pub inject: Option<String>,
    /// Snapshot scope, when given (else the environment's, else the demo's default).
    pub scope: Option<Scope>,
    /// Restore mode, when given (else the environment's, else the demo's default).
    pub restore: Option<RestoreMode>,
}

impl Default for DemoArgs {
    fn default() -> Self {
        Self {
            passes: 4,
            json: false,
            inject: None,
            scope: None,
            restore: None,
        }
    }
}

/// Backends `kreplay bench` accepts.
pub const BENCH_BACKENDS: &[&str] = &["cuda"];

/// What `--backend` accepts, for error messages.
const BENCH_BACKENDS_EXPECTED: &str =
    "cuda (the simulator's benches are `cargo bench -p replay-mock`)";

/// Options of `kreplay bench`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchArgs {
    /// The backend (one of [`BENCH_BACKENDS`]).
    pub backend: String,
    /// Everything else, in order, for the backend's bench (`run`, `check`, `app`, `merge` and
    /// their options).
    pub args: Vec<String>,
}

/// A command-line error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CliError {
    /// No command given.
    #[error("no command given; try `kreplay demo` or `kreplay help`")]
    NoCommand,
    /// An unknown command.
    #[error("unknown command {0:?}; commands: demo, bench, help")]
    UnknownCommand(String),
    /// `kreplay bench` without `--backend`.
    #[error("`kreplay bench` needs --backend BACKEND; accepted: {BENCH_BACKENDS_EXPECTED}")]
    MissingBackend,
    /// An unknown option.
    #[error("unknown option {option:?} for `kreplay {command}`")]
    UnknownOption {
        /// The command.
        command: &'static str,
        /// The option.
        option: String,
    },
    /// An option without its value.
    #[error("{0} needs a value")]
    MissingValue(&'static str),
    /// An argument that is not valid UTF-8.
    #[error("argument {position} ({lossy:?}) is not valid UTF-8")]
    NotUtf8 {
        /// 1-based position after the program name.
        position: usize,
        /// The argument with invalid sequences replaced.
        lossy: String,
    },
    /// A bad value.
    #[error("{option} {value:?} is not valid: expected {expected}")]
    BadValue {
        /// The option.
        option: &'static str,
        /// The value.
        value: String,
        /// What is accepted.
        expected: String,
    },
}

/// The usage text.
pub fn usage() -> String {
    format!(
        "kernel-replay command line\n\n\
         usage:\n  kreplay demo [--passes N] [--json] [--inject FAULT] [--scope auto|all|arguments] [--restore auto|full|dirty]\n  \
         kreplay bench --backend cuda [run] [--cases LIST] [--out FILE] [--big] [--alloc-gib LIST] [OPTIONS]\n  \
         kreplay bench --backend cuda check\n  \
         kreplay bench --backend cuda merge FILE... --out FILE\n  \
         kreplay bench --backend cuda app --alloc-gib N --kernel-mib M [--buffers 4]\n  \
         kreplay help | --help | demo --help\n  kreplay --version\n\n\
         demo runs a small workload on the simulated GPU under replay and checks every dispatch\n\
         against the same workload run once without replay.\n\n\
         bench --backend cuda checks and measures the CUDA backend on a real NVIDIA GPU (CUDA is\n\
         loaded at run time); `kreplay bench --backend cuda --help` lists its cases and options,\n\
         BENCHMARKS.md has the runs. `check` runs the correctness checks only, `merge` combines the\n\
         JSON results of several runs, `app` is the child process the ncu case profiles. The\n\
         simulator's benches are `cargo bench -p replay-mock`.\n\n\
         FAULT is one of: {}\n\n\
         Policy comes from the demo's defaults (scope all, restore full, 250 ms drain and pass\n\
         timeouts, 10 ms poll slice, 100 ms progress interval, on the simulator's virtual\n\
         time), then KREPLAY_* environment variables (see the README), then --scope and\n\
         --restore.",
        FAULTS.join(", ")
    )
}

/// Parses the process's arguments (without the program name), refusing one that is not UTF-8.
pub fn parse_os<I: IntoIterator<Item = std::ffi::OsString>>(args: I) -> Result<Command, CliError> {
    let args = args
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            a.into_string().map_err(|raw| CliError::NotUtf8 {
                position: i + 1,
                lossy: raw.to_string_lossy().into_owned(),
            })
        })
        .collect::<Result<Vec<String>, CliError>>()?;
    parse(args)
}

/// Parses `args` (without the program name).
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, CliError> {
    let mut it = args.into_iter();
    let cmd = it.next().ok_or(CliError::NoCommand)?;
    match cmd.as_str() {
        "demo" => parse_demo(it),
        "bench" => parse_bench(it).map(Command::Bench),
        "help" | "--help" | "-h" => Ok(Command::Help),
        "--version" | "-V" => Ok(Command::Version),
        _ => Err(CliError::UnknownCommand(cmd)),
    }
}

fn value(
    it: &mut impl Iterator<Item = String>,
    inline: Option<String>,
    opt: &'static str,
) -> Result<String, CliError> {
    inline
        .or_else(|| it.next())
        .ok_or(CliError::MissingValue(opt))
}

/// `kreplay bench`: takes `--backend B` (or `--backend=B`) out, wherever it is; the rest is the
/// backend's, checked by its bench.
fn parse_bench(mut it: impl Iterator<Item = String>) -> Result<BenchArgs, CliError> {
    let mut backend = None;
    let mut args = Vec::new();
    while let Some(arg) = it.next() {
        if arg == "--backend" {
            backend = Some(value(&mut it, None, "--backend")?);
        } else if let Some(v) = arg.strip_prefix("--backend=") {
            backend = Some(v.to_owned());
        } else {
            args.push(arg);
        }
    }
    let backend = backend.ok_or(CliError::MissingBackend)?;
    if !BENCH_BACKENDS.contains(&backend.as_str()) {
        return Err(CliError::BadValue {
            option: "--backend",
            value: backend,
            expected: BENCH_BACKENDS_EXPECTED.into(),
        });
    }
    Ok(BenchArgs { backend, args })
}

fn parse_demo(mut it: impl Iterator<Item = String>) -> Result<Command, CliError> {
    let mut a = DemoArgs::default();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        match name.as_str() {
            "--passes" => {
                let v = value(&mut it, inline, "--passes")?;
                a.passes = v.parse::<u64>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    CliError::BadValue {
                        option: "--passes",
                        value: v.clone(),
                        expected: "a whole number of at least 1".into(),
                    }
                })?;
            }
            "--json" if inline.is_none() => a.json = true,
            "--help" | "-h" if inline.is_none() => return Ok(Command::Help),
            "--inject" => {
                let v = value(&mut it, inline, "--inject")?;
                if !FAULTS.contains(&v.as_str()) {
                    return Err(CliError::BadValue {
                        option: "--inject",
                        value: v,
                        expected: format!("one of {}", FAULTS.join(", ")),
                    });
                }
                a.inject = Some(v);
            }
            "--scope" => {
                let v = value(&mut it, inline, "--scope")?;
                a.scope = match v.as_str() {
                    "auto" => Some(Scope::Auto),
                    "all" => Some(Scope::All),
                    "arguments" => Some(Scope::Arguments),
                    _ => {
                        return Err(CliError::BadValue {
                            option: "--scope",
                            value: v,
                            expected: "auto, all or arguments".into(),
                        })
                    }
                };
            }
            "--restore" => {
                let v = value(&mut it, inline, "--restore")?;
                a.restore = match v.as_str() {
                    "auto" => Some(RestoreMode::Auto),
                    "full" => Some(RestoreMode::Full),
                    "dirty" => Some(RestoreMode::Dirty),
                    _ => {
                        return Err(CliError::BadValue {
                            option: "--restore",
                            value: v,
                            expected: "auto, full or dirty".into(),
                        })
                    }
                };
            }
            _ => {
                return Err(CliError::UnknownOption {
                    command: "demo",
                    option: arg,
                })
            }
        }
    }
    Ok(Command::Demo(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Result<Command, CliError> {
        parse(v.iter().map(|s| s.to_string()))
    }

    #[test]
    fn demo_options() {
        assert_eq!(p(&["demo"]), Ok(Command::Demo(DemoArgs::default())));
        let Ok(Command::Demo(a)) = p(&[
            "demo",
            "--passes",
            "5",
            "--json",
            "--inject=pass-stuck",
            "--scope",
            "arguments",
            "--restore=dirty",
        ]) else {
            panic!("parse failed")
        };
        assert_eq!(a.passes, 5);
        assert!(a.json);
        assert_eq!(a.inject.as_deref(), Some("pass-stuck"));
        assert_eq!(
            (a.scope, a.restore),
            (Some(Scope::Arguments), Some(RestoreMode::Dirty))
        );
        assert_eq!(p(&["demo", "--help"]), Ok(Command::Help));
        assert_eq!(p(&["demo", "--passes", "2", "-h"]), Ok(Command::Help));
    }

    #[test]
    fn an_argument_that_is_not_utf8_is_an_error_naming_its_position() {
        use std::os::unix::ffi::OsStringExt;
        let args = vec![
            std::ffi::OsString::from("demo"),
            std::ffi::OsString::from_vec(b"--scope=\xffall".to_vec()),
        ];
        let e = parse_os(args).unwrap_err();
        assert!(matches!(e, CliError::NotUtf8 { position: 2, .. }), "{e:?}");
        assert!(e.to_string().contains("argument 2"), "{e}");
        assert!(e.to_string().contains("UTF-8"), "{e}");
    }

    #[test]
    fn bench_options() {
        let b = |v: &[&str]| BenchArgs {
            backend: "cuda".into(),
            args: v.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(
            p(&["bench", "--backend", "cuda"]),
            Ok(Command::Bench(b(&[])))
        );
        assert_eq!(
            p(&["bench", "--backend=cuda", "run", "--out", "x.json"]),
            Ok(Command::Bench(b(&["run", "--out", "x.json"])))
        );
        assert_eq!(
            p(&[
                "bench",
                "merge",
                "a.json",
                "--backend",
                "cuda",
                "--out",
                "all.json"
            ]),
            Ok(Command::Bench(b(&["merge", "a.json", "--out", "all.json"])))
        );
        assert_eq!(p(&["bench"]), Err(CliError::MissingBackend));
        assert_eq!(p(&["bench", "check"]), Err(CliError::MissingBackend));
        assert_eq!(
            p(&["bench", "--backend"]),
            Err(CliError::MissingValue("--backend"))
        );
        let e = p(&["bench", "--backend", "mock"]).unwrap_err();
        assert!(e.to_string().contains("\"mock\""), "{e}");
        assert!(e.to_string().contains("expected cuda"), "{e}");
        assert!(e.to_string().contains("cargo bench -p replay-mock"), "{e}");
    }

    #[test]
    fn errors_name_the_option() {
        assert_eq!(p(&[]), Err(CliError::NoCommand));
        assert!(matches!(p(&["frob"]), Err(CliError::UnknownCommand(_))));
        let e = p(&["demo", "--passes", "0"]).unwrap_err();
        assert!(e.to_string().contains("--passes \"0\""), "{e}");
        let e = p(&["demo", "--passes"]).unwrap_err();
        assert_eq!(e, CliError::MissingValue("--passes"));
        let e = p(&["demo", "--inject", "meteor"]).unwrap_err();
        assert!(e.to_string().contains("restore-fail"), "{e}");
        let e = p(&["demo", "--scope", "some"]).unwrap_err();
        assert!(e.to_string().contains("all or arguments"));
        let e = p(&["demo", "--fast"]).unwrap_err();
        assert!(e.to_string().contains("--fast"));
    }
}
