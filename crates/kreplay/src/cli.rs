//! Command-line parsing (SPEC §8, the command line's part of the policy) on clap's derive API,
//! with few of its features (no colours, no suggestions, no terminal probing). Every bad input
//! is an error of our own ([`CliError`]) that names the option and what it accepts; clap's
//! errors are mapped onto it, so the messages and the exit status stay ours. Arguments arrive
//! as `OsString`s: one that is not valid UTF-8 is such an error too, naming its position
//! (never a panic).
//!
//! Options of `demo` override the environment (SPEC §8: defaults, then environment, then the
//! command line), so the fields the environment can also set are `None` unless given.
//!
//! `bench` and `run` hand their arguments on: `bench`'s to the CUDA bench as given (only
//! `--backend` is ours), `run`'s to [`crate::run::main`] exactly as they came.

use std::ffi::OsString;

use clap::builder::PossibleValuesParser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Args, CommandFactory, Parser, Subcommand};
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
    /// `kreplay run ARGS...`: the arguments after `run`, exactly as given, for
    /// [`crate::run::main`].
    Run(Vec<String>),
    /// `kreplay replay DIR`.
    Replay(ReplayArgs),
    /// `kreplay capture ARGS...`: the arguments after `capture`, as given, for
    /// [`crate::capture::main`].
    Capture(Vec<String>),
    /// `kreplay report FILE --html OUT`.
    Report(ReportArgs),
    /// `--help` (or `-h`, or `kreplay help [COMMAND]`) on any command: the text to print.
    Help(String),
    /// `kreplay --version`: the text to print.
    Version(String),
}

/// One line per command, with the forms of `bench`.
const USAGE: &str = "kreplay demo [--passes N] [--json] [--inject FAULT] [--scope auto|all|arguments|predicted] [--restore auto|full|dirty] [--capture DIR [--max-bytes N]]
  kreplay replay DIR [--tool verify|timing] [--passes N]
  kreplay capture [--kernel-include P] [--dispatch N | --launch-index K] [--out DIR] -- APP ARGS...
  kreplay bench --backend cuda [run] [--cases LIST] [--out FILE] [--big] [--alloc-gib LIST] [OPTIONS]
  kreplay bench --backend cuda check
  kreplay bench --backend cuda merge FILE... --out FILE
  kreplay bench --backend cuda app --alloc-gib N --kernel-mib M [--buffers 4]
  kreplay run [OPTIONS] -- APP ARGS...
  kreplay report FILE.json --html OUT.html
  kreplay help [COMMAND] | --help | COMMAND --help
  kreplay --version";

/// Help laid out as before clap: a lower-case `usage:` heading, then the options.
const TEMPLATE: &str = "{about-with-newline}\nusage:\n  {usage}\n\n{all-args}{after-help}";

const TOP_AFTER: &str = "\
demo runs a small workload on the simulated GPU under replay and checks every dispatch
against the same workload run once without replay.

bench --backend cuda checks and measures the CUDA backend on a real NVIDIA GPU (CUDA is
loaded at run time); `kreplay bench --backend cuda --help` lists its cases and options,
BENCHMARKS.md has the runs. `check` runs the correctness checks only, `merge` combines the
JSON results of several runs, `app` is the child process the ncu case profiles. The
simulator's benches are `cargo bench -p replay-mock`.

run runs an unmodified CUDA application under replay; `kreplay run --help` shows its options.

report turns a counters JSON (`kreplay run --tool counters --out FILE.json`) into the HTML
report that `--out FILE.html` writes.

replay re-runs captured dispatches (`kreplay demo --capture DIR`) standalone and checks their
outputs against the captured ones.";

const REPLAY_AFTER: &str = "\
DIR is one capture folder (it holds manifest.json) or a folder of them, each replayed in
turn. Every region is recreated at its captured address, the inputs written, the kernel
launched with the captured arguments and grid, N passes under replay (restored between
passes, as `kreplay run` does). verify (the default) compares every pass's outputs with the
captured ones and names the regions that differ; timing prints the passes' GPU time. A
damaged folder is refused naming the file (exit 2); outputs that differ exit 1. A CUDA
capture (from `kreplay capture`) runs on this machine's device, its regions reserved at
their captured addresses (one the driver will not give is relocated and reported, or, with
--exact-addresses, named, exit 2). An HSA capture taken on the simulated HSA runtime runs on a
fresh simulated runtime, the same way; one of real AMD GPU code is refused, saying what this
machine has.";

const CAPTURE_AFTER: &str = "\
Runs the program as `kreplay run --tool verify --passes 2` does and writes the chosen launch's
first pass to DIR (a new or empty folder): manifest.json, the code image as loaded, every
region of the snapshot scope before and after the pass. The program's output and exit status
are unchanged; exit 1 when nothing was captured (the reason is printed).";

const REPORT_AFTER: &str = "\
FILE is what `kreplay run --tool counters --out FILE.json` wrote (or the library's whole JSON
report, with its `counters` member). OUT gets the page `--out OUT.html` would have: the kernel
table sortable by column, the roofline charts, each dispatch's sections and raw metrics. The
section rows are those of every Nsight Compute section whose metrics FILE holds. A FILE that
cannot be read or parsed is exit 2; a page that cannot be written, exit 1.";

const DEMO_AFTER: &str = "\
Policy comes from the demo's defaults (scope all, restore full, 250 ms drain and pass
timeouts, 10 ms poll slice, 100 ms progress interval, on the simulator's virtual
time), then KREPLAY_* environment variables (see the README), then --scope and
--restore. `auto` asks for the policy's own default (SPEC §7.2, §8).";

const BENCH_AFTER: &str = "\
ARGS go to the backend's bench unchanged: `kreplay bench --backend cuda --help` lists its
cases and options (run, the default, check, merge, app). --backend may also come after
them. The simulator's benches are `cargo bench -p replay-mock`.";

const RUN_AFTER: &str = "\
The program and its arguments follow `--`. Every process it starts writes its own records;
the table, --out and the exit status (the program's; 128 + N for one killed by signal N)
cover them all. SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed on to the program.";

/// The `run` usage line, without its `usage: ` prefix: `run/args.rs` keeps it.
fn run_usage() -> &'static str {
    crate::run::USAGE
        .strip_prefix("usage: ")
        .unwrap_or(crate::run::USAGE)
}

#[derive(Debug, Parser)]
#[command(
    name = "kreplay",
    version,
    about = "kernel-replay command line",
    override_usage = USAGE,
    help_template = TEMPLATE,
    after_help = TOP_AFTER,
    subcommand_required = true,
    arg_required_else_help = false
)]
struct Cli {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Runs a small workload on the simulated GPU under replay and checks every dispatch
    /// against a plain run.
    #[command(help_template = TEMPLATE, after_help = DEMO_AFTER, args_override_self = true)]
    Demo(DemoArgs),
    /// Checks and measures a backend on real hardware (CUDA).
    #[command(
        help_template = TEMPLATE,
        after_help = BENCH_AFTER,
        override_usage = "kreplay bench --backend cuda [ARGS]...",
        // `--help` after `--backend cuda` is the bench's own; before it, this command's (see
        // `bench`).
        disable_help_flag = true,
        args_override_self = true
    )]
    Bench(BenchCli),
    /// Runs an unmodified CUDA application under replay.
    #[command(
        help_template = TEMPLATE,
        after_help = RUN_AFTER,
        override_usage = run_usage(),
        args_override_self = true
    )]
    Run(Box<crate::run::RunOpts>),
    /// Replays captured dispatches standalone and checks their outputs.
    #[command(help_template = TEMPLATE, after_help = REPLAY_AFTER, args_override_self = true)]
    Replay(ReplayArgs),
    /// Runs an unmodified CUDA application and captures one launch to a folder.
    #[command(help_template = TEMPLATE, after_help = CAPTURE_AFTER, args_override_self = true)]
    Capture(Box<crate::capture::CaptureOpts>),
    /// Writes the HTML report of a saved counters JSON.
    #[command(help_template = TEMPLATE, after_help = REPORT_AFTER, args_override_self = true)]
    Report(ReportArgs),
}

/// Options of `kreplay report`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct ReportArgs {
    /// A counters JSON (`kreplay run --tool counters --out FILE.json`).
    #[arg(value_name = "FILE")]
    pub file: std::path::PathBuf,
    /// The HTML page to write.
    #[arg(long, value_name = "OUT", required = true)]
    pub html: std::path::PathBuf,
}

/// Tools `kreplay replay` runs.
pub const REPLAY_TOOLS: &[&str] = &["verify", "timing"];

/// Options of `kreplay replay`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct ReplayArgs {
    /// A capture folder, or a folder of capture folders.
    #[arg(value_name = "DIR")]
    pub dir: std::path::PathBuf,
    /// What to do with the replayed passes.
    #[arg(long, value_name = "verify|timing", default_value = "verify", value_parser = PossibleValuesParser::new(REPLAY_TOOLS))]
    pub tool: String,
    /// Passes under replay (1: one plain execution).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = passes)]
    pub passes: u64,
    /// Fail when a CUDA or HSA region cannot be had at its captured address, instead of relocating
    /// it (argument pointers rewritten, the relocation reported).
    #[arg(long = "exact-addresses")]
    pub exact_addresses: bool,
}

/// Options of `kreplay demo`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct DemoArgs {
    /// Passes per replayed dispatch (at least 1).
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = passes)]
    pub passes: u64,
    /// One JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
    /// A fault to inject.
    #[arg(long, value_name = "FAULT", value_parser = PossibleValuesParser::new(FAULTS))]
    pub inject: Option<String>,
    /// Snapshot scope, when given (else the environment's, else the demo's default).
    #[arg(long, value_name = "auto|all|arguments|predicted", value_parser = scope)]
    pub scope: Option<Scope>,
    /// Restore mode, when given (else the environment's, else the demo's default).
    #[arg(long, value_name = "auto|full|dirty", value_parser = restore)]
    pub restore: Option<RestoreMode>,
    /// Captures every replayed dispatch's first pass into a folder of DIR (SPEC §13).
    #[arg(long, value_name = "DIR")]
    pub capture: Option<std::path::PathBuf>,
    /// Bound on one capture's region bytes (default 4 GiB); a larger scope is not captured.
    #[arg(long, value_name = "N", default_value_t = replay_core::DEFAULT_CAPTURE_MAX_BYTES, value_parser = bytes)]
    pub max_bytes: u64,
}

impl Default for DemoArgs {
    fn default() -> Self {
        Self {
            passes: 4,
            json: false,
            inject: None,
            scope: None,
            restore: None,
            capture: None,
            max_bytes: replay_core::DEFAULT_CAPTURE_MAX_BYTES,
        }
    }
}

fn bytes(v: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| "a whole number of bytes, at least 1".into())
}

fn passes(v: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| "a whole number of at least 1".into())
}

// The scope and restore values are the policy's own (`Scope::parse`, `RestoreMode::parse`), so
// they stay in one place.
fn scope(v: &str) -> Result<Scope, String> {
    Scope::parse(v).ok_or_else(|| "auto, all, arguments or predicted".into())
}

fn restore(v: &str) -> Result<RestoreMode, String> {
    RestoreMode::parse(v).ok_or_else(|| "auto, full or dirty".into())
}

/// Backends `kreplay bench` accepts.
pub const BENCH_BACKENDS: &[&str] = &["cuda"];

/// What `--backend` accepts, for error messages.
const BENCH_BACKENDS_EXPECTED: &str =
    "cuda (the simulator's benches are `cargo bench -p replay-mock`)";

fn backend(v: &str) -> Result<String, String> {
    if BENCH_BACKENDS.contains(&v) {
        Ok(v.to_owned())
    } else {
        Err(BENCH_BACKENDS_EXPECTED.into())
    }
}

#[derive(Debug, Args)]
struct BenchCli {
    /// The backend: cuda.
    #[arg(long, value_name = "BACKEND", value_parser = backend)]
    backend: Option<String>,
    /// The bench's own arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<String>,
}

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
    #[error("unknown command {0:?}; commands: demo, bench, run, replay, capture, report, help")]
    UnknownCommand(String),
    /// `kreplay bench` without `--backend`.
    #[error("`kreplay bench` needs --backend BACKEND; accepted: {BENCH_BACKENDS_EXPECTED}")]
    MissingBackend,
    /// An unknown option.
    #[error("unknown option {option:?} for `{command}`")]
    UnknownOption {
        /// The command (`kreplay demo`).
        command: String,
        /// The option.
        option: String,
    },
    /// An option without its value.
    #[error("{0} needs a value")]
    MissingValue(String),
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
        option: String,
        /// The value.
        value: String,
        /// What is accepted.
        expected: String,
    },
    /// Any other misuse, in clap's words (a flag given a value, for example).
    #[error("{0}")]
    Other(String),
}

/// A rejected command line: the error, and the usage of the command it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct UsageError {
    /// What was wrong.
    pub error: CliError,
    /// `usage:` and the usage of the command concerned, and where its help is.
    pub usage: String,
}

/// Parses the process's arguments (without the program name), refusing one that is not UTF-8.
pub fn parse_os<I: IntoIterator<Item = OsString>>(args: I) -> Result<Command, UsageError> {
    let args = args
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            a.into_string().map_err(|raw| CliError::NotUtf8 {
                position: i + 1,
                lossy: raw.to_string_lossy().into_owned(),
            })
        })
        .collect::<Result<Vec<String>, CliError>>()
        .map_err(|error| UsageError {
            error,
            usage: usage_of(None),
        })?;
    parse(args)
}

/// Parses `args` (without the program name).
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, UsageError> {
    let args: Vec<String> = args.into_iter().collect();
    let argv = std::iter::once("kreplay".to_owned()).chain(args.iter().cloned());
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => return from_clap(&e, args.first().map(String::as_str)),
    };
    match cli.command {
        Sub::Demo(a) => Ok(Command::Demo(a)),
        Sub::Bench(b) => bench(b),
        // clap would drop a leading `--`, which `run` reads as the start of the program: its
        // arguments are taken from the command line itself (the first one is `run`, the only
        // way to reach this command).
        Sub::Run(_) => Ok(Command::Run(args[1..].to_vec())),
        Sub::Replay(a) => Ok(Command::Replay(a)),
        // As `run`: the program's arguments are taken from the command line itself.
        Sub::Capture(_) => Ok(Command::Capture(args[1..].to_vec())),
        Sub::Report(a) => Ok(Command::Report(a)),
    }
}

/// `kreplay bench`: `--backend B` may also come among the bench's arguments (it is taken out
/// wherever it is); `--help` before any `--backend` is this command's help.
fn bench(b: BenchCli) -> Result<Command, UsageError> {
    let mut backend = b.backend;
    let mut args = Vec::with_capacity(b.args.len());
    let mut it = b.args.into_iter();
    while let Some(arg) = it.next() {
        let value = if arg == "--backend" {
            Some(
                it.next()
                    .ok_or_else(|| bench_error(CliError::MissingValue("--backend".into())))?,
            )
        } else {
            arg.strip_prefix("--backend=").map(str::to_owned)
        };
        match value {
            Some(v) => {
                backend = Some(self::backend(&v).map_err(|expected| {
                    bench_error(CliError::BadValue {
                        option: "--backend".into(),
                        value: v,
                        expected,
                    })
                })?);
            }
            None => args.push(arg),
        }
    }
    match backend {
        Some(backend) => Ok(Command::Bench(BenchArgs { backend, args })),
        None if args.first().is_some_and(|a| a == "--help" || a == "-h") => {
            Ok(Command::Help(help_of(Some("bench"))))
        }
        None => Err(bench_error(CliError::MissingBackend)),
    }
}

fn bench_error(error: CliError) -> UsageError {
    UsageError {
        error,
        usage: usage_of(Some("bench")),
    }
}

/// The command definition, built (so a subcommand's usage names `kreplay` too).
fn built() -> clap::Command {
    let mut cmd = Cli::command();
    cmd.build();
    cmd
}

/// The help of `kreplay` or one of its commands.
fn help_of(command: Option<&str>) -> String {
    let mut cmd = built();
    match command.and_then(|c| cmd.find_subcommand_mut(c)) {
        Some(sub) => sub.render_help().to_string(),
        None => cmd.render_help().to_string(),
    }
}

/// `usage:` and the usage of `kreplay` or one of its commands, and how to get its help.
fn usage_of(command: Option<&str>) -> String {
    let mut cmd = built();
    let (usage, help) = match command.and_then(|c| cmd.find_subcommand_mut(c)) {
        Some(sub) => {
            let name = sub.get_name().to_owned();
            (
                sub.render_usage().to_string(),
                format!("kreplay {name} --help"),
            )
        }
        None => (cmd.render_usage().to_string(), "kreplay --help".to_owned()),
    };
    let usage = usage.trim_end();
    let usage = usage.strip_prefix("Usage: ").unwrap_or(usage);
    format!("usage:\n  {usage}\n\nmore: `{help}`")
}

fn context_str(e: &clap::Error, kind: ContextKind) -> Option<String> {
    match e.get(kind)? {
        ContextValue::String(s) => Some(s.clone()),
        ContextValue::Strings(v) => Some(v.join(", ")),
        ContextValue::StyledStr(s) => Some(s.to_string()),
        _ => None,
    }
}

/// The option a clap error is about: `--passes <N>` names `--passes`.
fn option_of(e: &clap::Error) -> String {
    context_str(e, ContextKind::InvalidArg)
        .and_then(|a| a.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "an option".into())
}

/// The message of a clap error of `kreplay run`'s options, in our words (`run/args.rs` parses
/// them again after this module checked them).
pub(crate) fn run_error(e: &clap::Error) -> String {
    match from_clap(e, Some("run")) {
        Err(u) => u.error.to_string(),
        Ok(_) => e.render().to_string(),
    }
}

/// Maps a clap error onto ours; help and version requests become commands.
fn from_clap(e: &clap::Error, first: Option<&str>) -> Result<Command, UsageError> {
    // The command concerned: every error below the top level is about the subcommand the
    // first argument names (the top level takes no option with a value).
    let command =
        first.filter(|c| ["demo", "bench", "run", "replay", "capture", "report"].contains(c));
    let error = match e.kind() {
        ErrorKind::DisplayHelp => return Ok(Command::Help(e.render().to_string())),
        ErrorKind::DisplayVersion => return Ok(Command::Version(e.render().to_string())),
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            CliError::NoCommand
        }
        ErrorKind::InvalidSubcommand => CliError::UnknownCommand(
            context_str(e, ContextKind::InvalidSubcommand)
                .or_else(|| first.map(str::to_owned))
                .unwrap_or_default(),
        ),
        ErrorKind::UnknownArgument => CliError::UnknownOption {
            command: command.map_or_else(|| "kreplay".into(), |c| format!("kreplay {c}")),
            option: context_str(e, ContextKind::InvalidArg).unwrap_or_default(),
        },
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => {
            let value = context_str(e, ContextKind::InvalidValue).unwrap_or_default();
            if value.is_empty() && e.kind() == ErrorKind::InvalidValue {
                CliError::MissingValue(option_of(e))
            } else {
                let expected = match context_str(e, ContextKind::ValidValue) {
                    Some(list) => format!("one of {list}"),
                    None => std::error::Error::source(e)
                        .map(ToString::to_string)
                        .unwrap_or_else(|| "another value".into()),
                };
                CliError::BadValue {
                    option: option_of(e),
                    value,
                    expected,
                }
            }
        }
        // clap's text puts the missing arguments on the lines after the first.
        ErrorKind::MissingRequiredArgument => CliError::Other(format!(
            "missing {}",
            context_str(e, ContextKind::InvalidArg).unwrap_or_else(|| "an argument".into())
        )),
        _ => {
            let text = e.render().to_string();
            let first_line = text.lines().next().unwrap_or_default();
            CliError::Other(
                first_line
                    .strip_prefix("error: ")
                    .unwrap_or(first_line)
                    .to_owned(),
            )
        }
    };
    Err(UsageError {
        error,
        usage: usage_of(command),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Result<Command, CliError> {
        parse(v.iter().map(|s| s.to_string())).map_err(|e| e.error)
    }

    fn help(v: &[&str]) -> String {
        match p(v) {
            Ok(Command::Help(h)) => h,
            other => panic!("{v:?}: {other:?}"),
        }
    }

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
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
        assert!(help(&["demo", "--help"]).contains("usage:"));
        assert!(help(&["demo", "--passes", "2", "-h"]).contains("--passes"));
        // A repeated option: the last one counts, as before.
        let Ok(Command::Demo(a)) = p(&["demo", "--passes", "2", "--passes", "3"]) else {
            panic!("parse failed")
        };
        assert_eq!(a.passes, 3);
    }

    #[test]
    fn auto_is_accepted_for_scope_and_restore() {
        let Ok(Command::Demo(a)) = p(&["demo", "--scope", "auto", "--restore=auto"]) else {
            panic!("parse failed")
        };
        assert_eq!(
            (a.scope, a.restore),
            (Some(Scope::Auto), Some(RestoreMode::Auto))
        );
        let e = p(&["demo", "--restore", "some"]).unwrap_err();
        assert!(e.to_string().contains("auto, full or dirty"), "{e}");
    }

    #[test]
    fn an_argument_that_is_not_utf8_is_an_error_naming_its_position() {
        use std::os::unix::ffi::OsStringExt;
        let args = vec![
            OsString::from("demo"),
            OsString::from_vec(b"--scope=\xffall".to_vec()),
        ];
        let e = parse_os(args).unwrap_err().error;
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
        // The bench's own `--help` and `--` pass through.
        assert_eq!(
            p(&["bench", "--backend", "cuda", "--help"]),
            Ok(Command::Bench(b(&["--help"])))
        );
        assert_eq!(
            p(&["bench", "--backend", "cuda", "check", "--", "-x"]),
            Ok(Command::Bench(b(&["check", "--", "-x"])))
        );
        assert!(help(&["bench", "--help"]).contains("usage:"));
        assert_eq!(p(&["bench"]), Err(CliError::MissingBackend));
        assert_eq!(p(&["bench", "check"]), Err(CliError::MissingBackend));
        assert_eq!(
            p(&["bench", "--backend"]),
            Err(CliError::MissingValue("--backend".into()))
        );
        assert_eq!(
            p(&["bench", "check", "--backend"]),
            Err(CliError::MissingValue("--backend".into()))
        );
        for args in [
            &["bench", "--backend", "mock"][..],
            &["bench", "run", "--backend=mock"],
        ] {
            let e = p(args).unwrap_err();
            assert!(e.to_string().contains("\"mock\""), "{e}");
            assert!(e.to_string().contains("expected cuda"), "{e}");
            assert!(e.to_string().contains("cargo bench -p replay-mock"), "{e}");
        }
    }

    #[test]
    fn run_arguments_pass_through_exactly() {
        let args = ["--tool", "timing", "--", "./app", "--help", "-x"];
        let mut v = vec!["run"];
        v.extend(args);
        assert_eq!(
            p(&v),
            Ok(Command::Run(args.iter().map(|s| s.to_string()).collect()))
        );
        // A leading `--` stays: run/args.rs reads it as the start of the program.
        assert_eq!(
            p(&["run", "--", "./app"]),
            Ok(Command::Run(vec!["--".into(), "./app".into()]))
        );
        assert_eq!(p(&["run"]), Ok(Command::Run(vec![])));
        let h = help(&["run", "--help"]);
        assert!(h.contains("usage:") && h.contains("-- APP ARGS..."), "{h}");
    }

    #[test]
    fn errors_name_the_option() {
        assert_eq!(p(&[]), Err(CliError::NoCommand));
        assert!(matches!(p(&["frob"]), Err(CliError::UnknownCommand(c)) if c == "frob"));
        let e = p(&["demo", "--passes", "0"]).unwrap_err();
        assert!(e.to_string().contains("--passes \"0\""), "{e}");
        let e = p(&["demo", "--passes"]).unwrap_err();
        assert_eq!(e, CliError::MissingValue("--passes".into()));
        let e = p(&["demo", "--inject", "meteor"]).unwrap_err();
        assert!(e.to_string().contains("restore-fail"), "{e}");
        let e = p(&["demo", "--scope", "some"]).unwrap_err();
        assert!(e.to_string().contains("all, arguments or predicted"));
        let e = p(&["demo", "--fast"]).unwrap_err();
        assert_eq!(
            e,
            CliError::UnknownOption {
                command: "kreplay demo".into(),
                option: "--fast".into()
            }
        );
        let e = p(&["demo", "--json=yes"]).unwrap_err();
        assert!(e.to_string().contains("--json"), "{e}");
    }

    #[test]
    fn report_takes_a_file_and_the_page_to_write() {
        assert_eq!(
            p(&["report", "c.json", "--html", "c.html"]),
            Ok(Command::Report(ReportArgs {
                file: "c.json".into(),
                html: "c.html".into(),
            }))
        );
        let e = p(&["report", "c.json"]).unwrap_err().to_string();
        assert!(e.contains("missing") && e.contains("--html"), "{e}");
        assert!(help(&["report", "--help"]).contains("kreplay report"));
    }

    #[test]
    fn usage_names_the_command_concerned() {
        let e = parse(["demo".to_owned(), "--fast".to_owned()]).unwrap_err();
        assert!(e.usage.starts_with("usage:\n  kreplay demo"), "{}", e.usage);
        assert!(e.usage.contains("kreplay demo --help"), "{}", e.usage);
        let e = parse(["bench".to_owned()]).unwrap_err();
        assert!(e
            .usage
            .starts_with("usage:\n  kreplay bench --backend cuda"));
        let e = parse(Vec::new()).unwrap_err();
        assert!(e.usage.contains("kreplay run"), "{}", e.usage);
    }
}
