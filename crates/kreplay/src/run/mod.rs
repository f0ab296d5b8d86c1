//! `kreplay run`: an unmodified application under replay (SPEC §9.1, §9.2, §12), CUDA or HSA.
//!
//! ```text
//! kreplay run [--tool verify|timing|counters] [--passes N] [--metrics LIST] [--set NAME]
//!             [--kernel-include P] [--kernel-exclude P] [--dispatch-range R]
//!             [--out FILE.json|FILE.csv|FILE.html] [--library PATH] [--check-launches] [--ranks LIST]
//!             [--backend cuda|hsa]
//!             -- APP ARGS...
//! ```
//!
//! `--tool counters` collects hardware metrics (Nsight Compute's names: `--metrics` a comma
//! list, `--set` a built-in set, both together their union) with CUPTI's range profiler
//! (`replay_cuda::counters`). The list is compiled for the first device's chip before the
//! program starts (this command loads the driver and CUPTI's host library to learn the chip
//! and the pass count): a metric that cannot be collected is a usage error naming it (exit
//! status 2) and the program does not start; a set's metrics the chip lacks are left out
//! instead, named on one line (the `basic` set's FFMA count on an H200). The passes asked are the plan's, or `--passes`
//! if given and more (the tool asks for two at least: one pass is no replay); `KREPLAY_CACHE_CONTROL=flush` is set unless the environment sets it (caches
//! invalidated before each pass, as Nsight Compute does). The JSON report's `counters`
//! member is the `replay_report::CounterReport`.
//!
//! Sets up the injection and runs the program: `LD_PRELOAD` and `CUDA_INJECTION64_PATH` name
//! `libkernel_replay.so` (built with its `cuda` feature; `--library`, else `KREPLAY_LIBRARY`,
//! else next to this executable, in its `deps/`, or in `../lib/`), `KREPLAY_CUDA_BUILTIN` and
//! `KREPLAY_CUDA_PASSES` select the built-in tool, and the filter options become the policy's
//! `KREPLAY_KERNEL_*` variables. An injection the environment already names is chained after
//! ours (`KREPLAY_CUDA_CHAIN_INJECTION`), one naming no file refused; the CUPTI cross-check is
//! off (`KREPLAY_CUDA_CUPTI=0`) unless `--check-launches`. The tool itself runs inside each
//! process of the program (`replay_cuda::tool`), which streams its records to a file of its
//! own in a folder of this run (`KREPLAY_CUDA_OUT_DIR`, `replay_cuda::job`) and writes its
//! report there at exit. This command reads those files as they grow ([`crate::collect`]:
//! aggregates per process and kernel, never every record; a progress line on a terminal),
//! then prints the per-kernel table (Nsight Compute's short names, `replay_report::names`) and
//! writes `--out` (a name template, [`crate::template`]: one file per distinct name), as JSON
//! (the processes, their summaries summed, the kernels, then every record with its process
//! and rank, read again from the files) or one CSV row per dispatch and pass. When the reports
//! hold counters (member `counters`), the counters' table follows and `--out` gets them
//! instead, one file per process, in the format its extension names (`.csv`, `.json`, `.db`,
//! `.html`: `replay_report::write_counters`; an unknown extension is refused before the
//! program starts). An `.html` is one self-contained page: the kernels sortable by column,
//! roofline charts, each dispatch's sections (`kreplay report FILE.json --html OUT.html` makes
//! the same page later from a saved `.json`).
//! When sections were asked (`--section`, or `--set` naming one of Nsight Compute's sets), a
//! `.csv` is `replay_report::sections_csv`: each launch's section rows under ncu's display
//! names, `ID` the launch's index from 0 (`replay_cuda::counters::display`), then the raw
//! metrics under the section `raw`; `.json` and `.db` hold the raw metrics either way.
//!
//! `--backend hsa` (the default on a machine with `/dev/kfd` and no NVIDIA driver,
//! [`Backend::detect`]) attaches the same library through the HSA runtime instead:
//! `HSA_TOOLS_LIB` names it, `KREPLAY_HSA_BUILTIN` the tool (`verify` or `timing`; `counters`
//! is CUPTI's and refused), with the same pass count, filters, ranks and records folder; the
//! records, the table and `--out` are as on CUDA, less the CUDA interception's counts
//! (`replay_hsa::tool`: `replay-tools`' tools over the HSA backend's `ToolDevice`).
//!
//! The program runs in a process group of its own, which SIGINT, SIGTERM, SIGHUP and SIGQUIT
//! sent to this command are passed on to (`replay_cuda::signals`); on a terminal the group
//! gets the terminal while it runs. A process that ended without its report (killed) is
//! named with the records it made.
//!
//! `kreplay run --list-sass [--metrics LIST] [--set NAME]` starts no program: it prints the
//! first device's chip and the SASS metrics CUPTI's SASS Metrics API has for it (name, id,
//! description; the names `__sass_` metrics are mapped to), and with a list, its plan (which
//! metric runs in which pass, the SASS pass's API names) as JSON. Exit status 0, 2 for a list
//! that cannot be collected, 1 without CUPTI or a GPU.
//!
//! The exit status is the application's (128 + the signal for one killed by a signal, said
//! in one line: `the program was killed by SIGSEGV after N launches; records up to dispatch
//! K`). A program without a usable driver gets one clear line (from the library) and runs
//! untouched; one that never reached the driver gets one line from here.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use replay_cuda::job;

use crate::collect::{merge_sum, Collector, KernelRow, Process};
use crate::template::{Subject, Template};
use replay_report::names;

/// Options of `kreplay run`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunArgs {
    /// `verify`, `timing` or `counters`.
    pub tool: String,
    /// Passes per dispatch.
    pub passes: u64,
    /// Whether `--passes` was given (the counters tool otherwise asks for its plan's).
    pub passes_given: bool,
    /// `--metrics` (counters), split.
    pub metrics: Vec<String>,
    /// `--set` (counters).
    pub set: Option<String>,
    /// `--section` (counters): Nsight Compute section identifiers, in order.
    pub sections: Vec<String>,
    /// `--kernel-include`.
    pub include: Option<String>,
    /// `--kernel-exclude`.
    pub exclude: Option<String>,
    /// `--dispatch-range`.
    pub range: Option<String>,
    /// `--out`.
    pub out: Option<PathBuf>,
    /// `--library`.
    pub library: Option<PathBuf>,
    /// `--list-sass`: print the chip's SASS metrics (and the list's plan) and start nothing.
    pub list_sass: bool,
    /// `--check-launches`: the CUPTI cross-check of the launch wrappers.
    pub check_launches: bool,
    /// `--ranks`: the ranks that replay.
    pub ranks: Option<String>,
    /// The program and its arguments.
    pub app: Vec<String>,
    /// `--graph-profiling`: `node`, `graph` or `off` (none: the environment's, else `node`).
    pub graph_profiling: Option<String>,
    /// `--backend`: `cuda` or `hsa` (none: detected, [`Backend::detect`]).
    pub backend: Option<String>,
}

/// The runtime the program's kernels go through, and so how the library is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `LD_PRELOAD` and `CUDA_INJECTION64_PATH`.
    Cuda,
    /// `HSA_TOOLS_LIB`: the HSA runtime loads the library and calls its `OnLoad`.
    Hsa,
}

impl Backend {
    /// The machine's: HSA where there is an AMD GPU's kernel driver (`/dev/kfd`) and no
    /// NVIDIA one (`/dev/nvidiactl`), CUDA otherwise.
    pub fn detect() -> Self {
        let kfd = Path::new("/dev/kfd").exists();
        let nvidia = Path::new("/dev/nvidiactl").exists();
        if kfd && !nvidia {
            Self::Hsa
        } else {
            Self::Cuda
        }
    }
}

/// Usage of `kreplay run`.
pub const USAGE: &str = "usage: kreplay run [--tool verify|timing|counters] [--passes N] [--metrics LIST] \
[--set NAME] [--section NAME] [--kernel-include P] [--kernel-exclude P] [--dispatch-range R] [--out FILE.json|FILE.csv|FILE.html] \
[--library PATH] [--check-launches] [--ranks LIST] [--graph-profiling node|graph|off] [--backend cuda|hsa] -- APP ARGS...
       kreplay run --list-sass [--metrics LIST] [--set NAME]";

/// `kreplay run`'s options, declared for clap (the top-level command line flattens them for
/// its help and its errors; [`parse`] reads them again into [`RunArgs`]).
#[derive(Debug, Clone, clap::Args)]
pub struct RunOpts {
    /// The built-in tool: input and output digests per pass, GPU time per pass, or hardware
    /// counters.
    #[arg(long, value_name = "verify|timing|counters", default_value = "verify",
          value_parser = clap::builder::PossibleValuesParser::new(["verify", "timing", "counters"]))]
    pub tool: String,
    /// Passes per dispatch, at least 1 [default: 3; counters: the plan's, or this if more].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = passes_value)]
    pub passes: Option<u64>,
    /// counters: Nsight Compute metric names, comma-separated; may be repeated.
    #[arg(long, value_name = "LIST", value_parser = metrics_value)]
    pub metrics: Vec<String>,
    /// counters: a metric set (basic, memory; Nsight Compute's detailed, full, roofline).
    #[arg(long, value_name = "NAME", value_parser = set_value)]
    pub set: Option<String>,
    /// counters: an Nsight Compute section (LaunchStats, SpeedOfLight, ...); may be repeated.
    #[arg(long = "section", value_name = "NAME", value_parser = section_value)]
    pub sections: Vec<String>,
    /// Replay only kernels whose name matches P (the policy's KREPLAY_KERNEL_INCLUDE).
    #[arg(long = "kernel-include", value_name = "P")]
    pub include: Option<String>,
    /// Do not replay kernels whose name matches P (KREPLAY_KERNEL_EXCLUDE).
    #[arg(long = "kernel-exclude", value_name = "P")]
    pub exclude: Option<String>,
    /// Replay only the dispatches in R (KREPLAY_DISPATCH_RANGE).
    #[arg(long = "dispatch-range", value_name = "R")]
    pub range: Option<String>,
    /// Output file: .json or .csv (counters: .csv, .json, .db, .html). A name template: %p pid,
    /// %h host, %q{NAME} a variable's value, %i lowest free number, %rank% rank, %% a %;
    /// processes whose names come out equal share one file.
    #[arg(long, value_name = "FILE", value_parser = out_value)]
    pub out: Option<PathBuf>,
    /// libkernel_replay.so to preload [default: KREPLAY_LIBRARY, else beside kreplay].
    #[arg(long, value_name = "PATH")]
    pub library: Option<PathBuf>,
    /// Print the first GPU's SASS metrics (and the plan of --metrics / --set); start nothing.
    #[arg(long = "list-sass")]
    pub list_sass: bool,
    /// Cross-check the launch wrappers with CUPTI (off by default: it takes CUPTI's one
    /// subscriber slot, which the program's own profiler may need).
    #[arg(long = "check-launches")]
    pub check_launches: bool,
    /// Replay only in these ranks (0,2-3; from RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or
    /// SLURM_PROCID; none: rank 0); the others run untouched.
    #[arg(long, value_name = "LIST", value_parser = ranks_value)]
    pub ranks: Option<String>,
    /// CUDA graph launches: every kernel node a dispatch of its own (node, the default, as
    /// Nsight Compute's), the whole graph one dispatch (graph), or run once (off)
    /// [KREPLAY_GRAPH_PROFILING].
    #[arg(long = "graph-profiling", value_name = "node|graph|off",
          value_parser = clap::builder::PossibleValuesParser::new(["node", "graph", "off"]))]
    pub graph_profiling: Option<String>,
    /// How the library is attached: the CUDA driver's injection, or the HSA runtime's
    /// HSA_TOOLS_LIB (the tools verify and timing) [default: hsa on a machine with /dev/kfd
    /// and no NVIDIA driver, else cuda].
    #[arg(long, value_name = "cuda|hsa",
          value_parser = clap::builder::PossibleValuesParser::new(["cuda", "hsa"]))]
    pub backend: Option<String>,
    /// The program and its arguments (after `--`, or from the first argument that is not an
    /// option).
    #[arg(value_name = "APP ARGS", trailing_var_arg = true, num_args = 0..)]
    pub app: Vec<String>,
}

fn passes_value(v: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| "a whole number of at least 1".into())
}

fn metrics_value(v: &str) -> Result<String, String> {
    if replay_cuda::counters::parse_metric_list(v).is_empty() {
        return Err("metric names, comma-separated".into());
    }
    Ok(v.to_owned())
}

fn section_value(v: &str) -> Result<String, String> {
    use replay_cuda::counters::sections;
    if sections::section(v).is_none() {
        let known: Vec<&str> = sections::SECTIONS.iter().map(|s| s.name).collect();
        return Err(format!("one of {}", known.join(", ")));
    }
    Ok(v.to_owned())
}

fn set_value(v: &str) -> Result<String, String> {
    use replay_cuda::counters::sections;
    if replay_cuda::counters::metric_set(v).is_none() && sections::section_set(v).is_none() {
        let mut sets: Vec<&str> = replay_cuda::counters::METRIC_SETS
            .iter()
            .map(|(n, _)| *n)
            .collect();
        for (n, _) in sections::SECTION_SETS {
            if !sets.contains(n) {
                sets.push(n);
            }
        }
        return Err(format!("one of {}", sets.join(", ")));
    }
    Ok(v.to_owned())
}

fn out_value(v: &str) -> Result<PathBuf, String> {
    Template::parse(v).map(|_| PathBuf::from(v))
}

fn ranks_value(v: &str) -> Result<String, String> {
    job::parse_ranks(v).map(|_| v.to_owned())
}

#[derive(Debug, clap::Parser)]
#[command(
    name = "kreplay run",
    args_override_self = true,
    disable_help_flag = true
)]
struct RunParser {
    #[command(flatten)]
    opts: RunOpts,
}

/// Parses the arguments after `run`.
pub fn parse(args: &[String]) -> Result<RunArgs, String> {
    use clap::Parser;
    let argv = std::iter::once("kreplay run".to_owned()).chain(args.iter().cloned());
    let o = RunParser::try_parse_from(argv)
        .map_err(|e| crate::cli::run_error(&e))?
        .opts;
    let a = RunArgs {
        tool: o.tool,
        passes: o.passes.unwrap_or(3),
        passes_given: o.passes.is_some(),
        metrics: o
            .metrics
            .iter()
            .flat_map(|m| replay_cuda::counters::parse_metric_list(m))
            .collect(),
        set: o.set,
        sections: o.sections,
        include: o.include,
        exclude: o.exclude,
        range: o.range,
        out: o.out,
        library: o.library,
        list_sass: o.list_sass,
        check_launches: o.check_launches,
        ranks: o.ranks,
        app: o.app,
        graph_profiling: o.graph_profiling,
        backend: o.backend,
    };
    if a.list_sass {
        if !a.app.is_empty() {
            return Err("--list-sass starts no program".into());
        }
        return Ok(a);
    }
    if a.app.is_empty() {
        return Err("no program given (after --)".into());
    }
    if a.tool == "counters" && a.backend.as_deref() == Some("hsa") {
        return Err("--tool counters is CUDA's (CUPTI); on --backend hsa: verify or timing".into());
    }
    if a.tool == "counters" {
        if a.metrics.is_empty() && a.set.is_none() && a.sections.is_empty() {
            return Err("--tool counters needs --metrics LIST or --set NAME".into());
        }
    } else if !a.metrics.is_empty() || a.set.is_some() || !a.sections.is_empty() {
        return Err(format!(
            "--metrics, --set and --section are for --tool counters, not {}",
            a.tool
        ));
    }
    Ok(a)
}

impl RunArgs {
    /// The backend: `--backend`, else [`Backend::detect`].
    pub fn backend(&self) -> Backend {
        match self.backend.as_deref() {
            Some("hsa") => Backend::Hsa,
            Some(_) => Backend::Cuda,
            None => Backend::detect(),
        }
    }

    /// `--out` as a name template (checked when parsed).
    pub fn out_template(&self) -> Option<Template> {
        self.out
            .as_deref()
            .and_then(|o| Template::parse(&o.to_string_lossy()).ok())
    }

    /// What `--set` and `--section` ask of Nsight Compute's sections (a kreplay set such as
    /// `basic` or `memory` is a plain list, not sections).
    pub fn resolved_sections(&self) -> replay_cuda::counters::sections::Resolved {
        use replay_cuda::counters::{metric_set, sections};
        let sets: Vec<String> = self
            .set
            .iter()
            .filter(|s| metric_set(s).is_none())
            .cloned()
            .collect();
        // Both were checked when parsed.
        sections::resolve(&sets, &self.sections).unwrap_or_default()
    }

    /// The counters tool's metrics: `--set`'s, the sections' raw metrics, then `--metrics`',
    /// without repeats.
    pub fn metric_list(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .set
            .as_deref()
            .and_then(replay_cuda::counters::metric_set)
            .unwrap_or_default()
            .iter()
            .map(|s| s.to_string())
            .collect();
        for m in self.resolved_sections().raw {
            if !all.contains(&m) {
                all.push(m);
            }
        }
        for m in &self.metrics {
            if !all.contains(m) {
                all.push(m.clone());
            }
        }
        all
    }
}

/// `--list-sass`: the first device's chip, its SASS metrics on stdout, and the plan of the
/// list if one is given; the exit status.
fn list_sass(a: &RunArgs) -> u8 {
    use replay_cuda::counters::{plan_for_device, sass_metrics_for_device, CounterError};
    let (chip, list) = match sass_metrics_for_device(0) {
        Ok(l) => l,
        Err(e) => {
            crate::say(format_args!("kreplay run: --list-sass: {e}"));
            return 1;
        }
    };
    let mut text = format!(
        "{chip}: {} SASS metrics
",
        list.len()
    );
    for m in &list {
        text.push_str(&format!(
            "{}	{}	{}
",
            m.name, m.id, m.description
        ));
    }
    if !crate::print_out(text.trim_end()) {
        return 1;
    }
    let names = a.metric_list();
    if names.is_empty() {
        return 0;
    }
    match plan_for_device(0, &names) {
        Ok(plan) => {
            let j = serde_json::to_string_pretty(&plan.summary()).unwrap_or_default();
            if crate::print_out(&j) {
                0
            } else {
                1
            }
        }
        Err(e @ (CounterError::Metrics { .. } | CounterError::Empty)) => {
            crate::say(format_args!("kreplay run: {e}"));
            2
        }
        Err(e) => {
            crate::say(format_args!("kreplay run: --list-sass: {e}"));
            1
        }
    }
}

/// The plan's passes, one line each: the range groups, then the SASS pass.
fn plan_lines(plan: &replay_cuda::counters::MetricPlan) -> Vec<String> {
    let mut lines: Vec<String> = plan
        .groups
        .iter()
        .map(|g| {
            format!(
                "pass {}{}: {}",
                g.first_pass,
                if g.config.passes > 1 {
                    format!("-{}", g.first_pass + g.config.passes - 1)
                } else {
                    String::new()
                },
                g.config.metrics.join(",")
            )
        })
        .collect();
    if let Some(s) = &plan.sass {
        let m: Vec<String> = s
            .metrics
            .iter()
            .map(|m| format!("{} (SASS {})", m.name, m.api_name))
            .collect();
        lines.push(format!("pass {}: {}", s.first_pass, m.join(",")));
    }
    lines
}

/// Compiles the counters tool's list before the program starts: the passes to ask for, or
/// the exit status (2: a metric cannot be collected; 1: no CUPTI or no driver).
/// A set is a convenience over what chips offer: the metrics of `--set` that the chip cannot
/// collect (`bad`) are left out, one line naming them, as long as every one of them came
/// from the set (a metric asked for by name is an error) and some metric remains. `None`:
/// nothing to leave out that way.
fn without_unavailable_set_metrics(
    a: &RunArgs,
    names: &[String],
    chip: &str,
    bad: &[(String, String)],
) -> Option<Vec<String>> {
    let set = a
        .set
        .as_deref()
        .or(a.sections.first().map(String::as_str))?;
    if bad.is_empty() || bad.iter().any(|(m, _)| a.metrics.contains(m)) {
        return None;
    }
    let rest: Vec<String> = names
        .iter()
        .filter(|n| !bad.iter().any(|(m, _)| m == *n))
        .cloned()
        .collect();
    if rest.is_empty() {
        return None;
    }
    crate::say(format_args!(
        "kreplay run: --set {set}: left out, not collectable on {chip}: {}",
        bad.iter()
            .map(|(m, why)| format!("{m} ({why})"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Some(rest)
}

/// Compiles the counters' list for device 0 before the program starts: the passes to ask for
/// and the list to collect (a set's metrics the chip lacks left out), or the exit status.
fn plan_counters(a: &RunArgs) -> Result<(u64, Vec<String>), u8> {
    use replay_cuda::counters::{plan_for_device, CounterError};
    let mut names = a.metric_list();
    if let Some(line) = a.resolved_sections().not_collectable_line() {
        crate::say(format_args!("kreplay run: counters: {line}"));
    }
    let mut planned = plan_for_device(0, &names);
    if let Err(CounterError::Metrics { chip, bad }) = &planned {
        if let Some(rest) = without_unavailable_set_metrics(a, &names, chip, bad) {
            names = rest;
            planned = plan_for_device(0, &names);
        }
    }
    match planned {
        Ok(plan) => {
            let groups = plan_lines(&plan);
            crate::say(format_args!(
                "kreplay run: counters: {} metrics on {} in {} passes (the host API's single configuration: {}); {}",
                names.len(),
                plan.chip,
                plan.passes,
                plan.single_config_passes,
                groups.join("; ")
            ));
            let given = if a.passes_given { a.passes } else { 1 };
            Ok((given.max(u64::from(plan.passes)), names))
        }
        Err(e @ (CounterError::Metrics { .. } | CounterError::Empty)) => {
            crate::say(format_args!("kreplay run: {e}\n{USAGE}"));
            Err(2)
        }
        Err(e) => {
            crate::say(format_args!(
                "kreplay run: counters cannot be collected here: {e}; the program was not started"
            ));
            Err(1)
        }
    }
}

const LIB_NAME: &str = "libkernel_replay.so";

fn find_library(a: &RunArgs) -> Option<PathBuf> {
    if let Some(l) = &a.library {
        return Some(l.clone());
    }
    if let Some(l) = std::env::var_os("KREPLAY_LIBRARY") {
        return Some(PathBuf::from(l));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join(LIB_NAME),
        dir.join("deps").join(LIB_NAME),
        dir.join("../lib").join(LIB_NAME),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Runs `kreplay run ARGS`; returns the exit status.
pub fn main(args: &[String]) -> u8 {
    main_with_env(args, &[])
}

/// [`main`], with `env` also set for the program (`kreplay capture`'s variables).
pub fn main_with_env(args: &[String], env: &[(&str, String)]) -> u8 {
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            crate::say(format_args!("kreplay run: {e}\n{USAGE}"));
            return 2;
        }
    };
    // A library named explicitly must exist: preloading a missing one would only make the
    // dynamic loader print a warning into the application's stderr.
    let explicit = a
        .library
        .clone()
        .map(|l| ("--library", l))
        .or_else(|| std::env::var_os("KREPLAY_LIBRARY").map(|l| ("KREPLAY_LIBRARY", l.into())));
    if let Some((what, l)) = explicit {
        if !l.is_file() {
            crate::say(format_args!(
                "kreplay run: {what} {}: no such file\n{USAGE}",
                l.display()
            ));
            return 2;
        }
    }
    if a.list_sass {
        return list_sass(&a);
    }
    if let Err(e) = check_out(&a) {
        crate::say(format_args!("kreplay run: {e}\n{USAGE}"));
        return 2;
    }
    // A bad value in the environment is an error before the program starts, not a
    // silent fallback inside it.
    if a.graph_profiling.is_none() {
        if let Err(e) = replay_cuda::state::graph::GraphProfiling::from_env() {
            crate::say(format_args!(
                "kreplay run: {e}; the program was not started"
            ));
            return 2;
        }
    }
    let (passes, metrics) = if a.tool == "counters" {
        match plan_counters(&a) {
            Ok(p) => p,
            Err(code) => return code,
        }
    } else {
        (a.passes, Vec::new())
    };
    let dir = run_dir();
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        crate::say(format_args!(
            "kreplay run: cannot make the report folder {}: {e}; the program was not started",
            dir.display()
        ));
        return 1;
    }
    let mut cmd = Command::new(&a.app[0]);
    cmd.args(&a.app[1..]);
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    match find_library(&a) {
        Some(lib) => {
            let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
            if a.backend() == Backend::Hsa {
                // The HSA runtime loads the library at `hsa_init` and calls its `OnLoad`.
                cmd.env("HSA_TOOLS_LIB", &lib)
                    .env(replay_hsa::tool::BUILTIN_ENV, &a.tool)
                    .env(replay_tools::PASSES_ENV, passes.to_string())
                    .env(job::OUT_DIR_ENV, &dir)
                    .env_remove(replay_hsa::tool::OUT_ENV)
                    .env_remove(replay_hsa::tool::TOOL_ENV);
            } else {
                let preload = preload_with(&lib, std::env::var("LD_PRELOAD").ok().as_deref());
                if let Err(code) = chain_injection(&mut cmd, &lib) {
                    let _ = std::fs::remove_dir_all(&dir);
                    return code;
                }
                cmd.env("LD_PRELOAD", preload)
                    .env("CUDA_INJECTION64_PATH", &lib)
                    .env("KREPLAY_CUDA_BUILTIN", &a.tool)
                    .env("KREPLAY_CUDA_PASSES", passes.to_string())
                    .env(job::OUT_DIR_ENV, &dir)
                    .env_remove(replay_cuda::tool::OUT_ENV);
                if let Some(g) = &a.graph_profiling {
                    cmd.env(replay_cuda::state::graph::GRAPH_PROFILING_ENV, g);
                }
                if a.tool == "counters" {
                    cmd.env("KREPLAY_CUDA_METRICS", metrics.join(","));
                    if std::env::var_os("KREPLAY_CACHE_CONTROL").is_none()
                        && std::env::var_os("ROCPROFILER_KERNEL_REPLAY_CACHE_CONTROL").is_none()
                    {
                        cmd.env("KREPLAY_CACHE_CONTROL", "flush");
                    }
                }
            }
            if std::env::var_os("KREPLAY_LOG").is_none() {
                // One outcome line per dispatch is too much for a real program: the table
                // at the end and `--out` have them.
                cmd.env("KREPLAY_LOG", "warn");
            }
            // The cross-check subscribes to CUPTI, which the program's own profiler may need.
            let cupti = replay_cuda::intercept::cupti::CUPTI_ENV;
            if a.check_launches {
                cmd.env(cupti, "1");
            } else if std::env::var_os(cupti).is_none() {
                cmd.env(cupti, "0");
            }
            if let Some(r) = &a.ranks {
                cmd.env(job::RANKS_ENV, r);
            }
            let names = a.out_template().map(|t| t.env_names()).unwrap_or_default();
            if !names.is_empty() {
                cmd.env(job::REPORT_ENV_ENV, names.join(","));
            }
            for (var, v) in [
                ("KREPLAY_KERNEL_INCLUDE", &a.include),
                ("KREPLAY_KERNEL_EXCLUDE", &a.exclude),
                ("KREPLAY_DISPATCH_RANGE", &a.range),
            ] {
                if let Some(v) = v {
                    cmd.env(var, v);
                }
            }
        }
        None => crate::say(format_args!(
            "kreplay run: {LIB_NAME} not found (give --library or KREPLAY_LIBRARY); running the program untouched"
        )),
    }
    // Ranks that replay fall behind the others, which wait for them inside collectives:
    // said before the job starts, with the timeouts that could end it.
    let pass_timeout = replay_core::Policy::from_env()
        .map(|p| p.pass_timeout)
        .unwrap_or_else(|_| replay_core::Policy::default().pass_timeout);
    if let Some(w) = job::collective_timeout_warning(
        a.app.first().map(String::as_str),
        &|v| std::env::var(v).ok(),
        a.passes,
        pass_timeout,
        a.ranks.as_deref(),
    ) {
        crate::say(format_args!("kreplay run: warning: {w}"));
    }
    // The program gets a process group of its own, which the signals this command gets are
    // passed on to: a scheduler's SIGTERM stops all of it, and this command lives on to
    // report what ran.
    cmd.process_group(0);
    replay_cuda::signals::catch();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            crate::say(format_args!(
                "kreplay run: cannot start {:?}: {e}",
                a.app[0]
            ));
            return 127;
        }
    };
    let pid = child.id();
    replay_cuda::signals::forward_to_group(pid);
    // On a terminal the program, in its own group, gets the terminal while it runs.
    let terminal = replay_cuda::signals::give_terminal(pid);
    let mut col = Collector::new(&dir);
    let status = wait_reading(&mut child, &mut col);
    drop(terminal);
    if let Some(sig) = replay_cuda::signals::caught() {
        crate::say(format_args!(
            "kreplay run: {} passed on to the program (process group {pid})",
            replay_cuda::signals::name(sig)
        ));
    }
    col.finish();
    let code = match &status {
        Some(s) => exit_code(s),
        None => 1,
    };
    let killed = status
        .as_ref()
        .and_then(std::os::unix::process::ExitStatusExt::signal);
    report(&a, passes, &col, pid, killed);
    let _ = std::fs::remove_dir_all(&dir);
    code
}

/// The folder the processes write their files to: one per `kreplay run`.
fn run_dir() -> PathBuf {
    std::env::temp_dir().join(format!("kreplay-run-{}", std::process::id()))
}

/// An injection library the environment already names (another tool's: Nsight Systems',
/// a profiler's) is chained after ours, never dropped: ours calls its `InitializeInjection`.
/// One that names no file is refused (exit status 2).
fn chain_injection(cmd: &mut Command, ours: &Path) -> Result<(), u8> {
    let Some(theirs) = std::env::var_os("CUDA_INJECTION64_PATH").filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let theirs = PathBuf::from(theirs);
    if std::fs::canonicalize(&theirs).ok().as_deref() == Some(ours) {
        return Ok(());
    }
    if !theirs.is_file() {
        crate::say(format_args!(
            "kreplay run: CUDA_INJECTION64_PATH {} names no file; it cannot be chained after ours and is not dropped silently: unset it or fix it (the program was not started)",
            theirs.display()
        ));
        return Err(2);
    }
    crate::say(format_args!(
        "kreplay run: CUDA_INJECTION64_PATH {} is chained: ours initialises first, then it",
        theirs.display()
    ));
    cmd.env(job::CHAIN_ENV, &theirs);
    Ok(())
}

/// Waits for the program, reading the records as they come and showing a progress line on a
/// terminal. `None` when waiting failed.
fn wait_reading(
    child: &mut std::process::Child,
    col: &mut Collector,
) -> Option<std::process::ExitStatus> {
    use std::io::{IsTerminal, Write};
    let tty = std::io::stderr().is_terminal();
    let mut shown = false;
    let mut tick = 0u32;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {}
            Err(e) => {
                crate::say(format_args!("kreplay run: waiting for the program: {e}"));
                break child.wait().ok();
            }
        }
        // Short waits first, so a short program is not held up.
        std::thread::sleep(std::time::Duration::from_millis(if tick < 20 {
            10
        } else {
            100
        }));
        tick = tick.saturating_add(1);
        if tick % 5 == 0 {
            col.poll();
            let (seen, replayed) = col.progress();
            if tty && seen > 0 {
                let mut e = std::io::stderr().lock();
                let _ = write!(
                    e,
                    "\rkreplay run: {seen} dispatches seen, {replayed} replayed ({} processes)",
                    col.procs.len()
                );
                let _ = e.flush();
                shown = true;
            }
        }
    };
    if shown {
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[K");
        let _ = e.flush();
    }
    status
}

/// The counter tool's `--out` must name a format the counters can be written in; checked
/// before the program runs, not after.
fn check_out(a: &RunArgs) -> Result<(), replay_report::ReportError> {
    match &a.out {
        Some(out) if a.tool == "counters" => replay_report::Format::of(out).map(drop),
        _ => Ok(()),
    }
}

fn exit_code(status: &std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => 128u8.wrapping_add(s as u8),
        _ => 1,
    }
}

/// The end of the run: how each process ended, the per-kernel table, the counters, `--out`.
fn report(a: &RunArgs, passes: u64, col: &Collector, pid: u32, killed: Option<i32>) {
    let signame = killed.map(replay_cuda::signals::name);
    if col.procs.is_empty() {
        match &signame {
            Some(sig) => crate::say(format_args!(
                "kreplay run: the program was killed by {sig} before any dispatch reached the replay tool; no records"
            )),
            None if a.backend() == Backend::Hsa => crate::say(format_args!(
                "kreplay run: no replay report: the program made no dispatch through the HSA runtime (none, or the runtime did not load HSA_TOOLS_LIB); it ran untouched"
            )),
            None => crate::say(format_args!(
                "kreplay run: no replay report: the program made no CUDA launch through the driver (none, or no usable driver); it ran untouched"
            )),
        }
        return;
    }
    let many = col.procs.len() > 1;
    let mut said_killed = false;
    for p in col.procs.values().filter(|p| p.report.is_none()) {
        let upto = p
            .last_dispatch
            .map_or_else(|| "none".into(), |d| format!("dispatch {d}"));
        match &signame {
            Some(sig) if p.pid == pid => {
                said_killed = true;
                crate::say(format_args!(
                    "kreplay run: the program was killed by {sig} after {} launches; records up to {upto}",
                    p.records
                ));
            }
            _ => crate::say(format_args!(
                "kreplay run: {} ended without its report (killed, or it exited without running exit handlers) after {} launches; records up to {upto}",
                if many || p.pid != pid {
                    format!("process {} (rank {})", p.pid, p.rank_text())
                } else {
                    "the program".to_string()
                },
                p.records
            )),
        }
    }
    if let (Some(sig), false) = (&signame, said_killed) {
        crate::say(format_args!("kreplay run: the program was killed by {sig}"));
    }
    crate::say(format_args!("{}", table(a, passes, col).trim_end()));
    let counters: Vec<&Process> = col
        .procs
        .values()
        .filter(|p| {
            p.report
                .as_ref()
                .is_some_and(|r| r.get("counters").is_some())
        })
        .collect();
    let template = a.out_template();
    if !counters.is_empty() {
        if let (Some(t), true) = (&template, counters.len() > 1) {
            if !t.per_process() {
                crate::say(format_args!(
                    "kreplay run: {} processes collected counters: each gets a file of its own, its pid before the extension",
                    counters.len()
                ));
            }
        }
        let paths = out_paths(template.as_ref(), &counters);
        for (p, out) in counters.iter().zip(paths) {
            if counters.len() > 1 {
                crate::say(format_args!("process {} (rank {}):", p.pid, p.rank_text()));
            }
            let Some(r) = &p.report else { continue };
            match counters_output(a, r, out.as_deref()) {
                Some(Ok(o)) => {
                    crate::say(format_args!("{}", o.table.trim_end()));
                    if let Some(Err(e)) = o.written {
                        crate::say(format_args!("kreplay run: {e}"));
                    }
                }
                Some(Err(e)) => crate::say(format_args!("kreplay run: {e}")),
                None => {}
            }
        }
        return;
    }
    let Some(t) = template else { return };
    // Processes whose names come out equal share a file.
    let mut groups: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for p in col.procs.values() {
        groups.entry(t.key(&subject(p))).or_default().push(p.pid);
    }
    let mut used: Vec<PathBuf> = Vec::new();
    for pids in groups.values() {
        let first = &col.procs[&pids[0]];
        let path = t.expand(&subject(first), &|p| {
            p.exists() || used.iter().any(|u| u == p)
        });
        used.push(path.clone());
        let written = if path.extension().and_then(|e| e.to_str()) == Some("csv") {
            write_csv(&path, col, pids)
        } else {
            write_json(&path, a, passes, col, pids)
        };
        if let Err(e) = written {
            crate::say(format_args!(
                "kreplay run: cannot write {}: {e}",
                path.display()
            ));
        }
    }
}

/// The counters' table and `--out` of one process's report: with sections asked (`--set full`,
/// `--section X`), a `.csv` gets their rows under Nsight Compute's display names
/// (`replay_cuda::counters::display`), then the raw metrics.
fn counters_output(
    a: &RunArgs,
    tool_report: &serde_json::Value,
    out: Option<&Path>,
) -> Option<Result<replay_report::RunOutput, replay_report::ReportError>> {
    let resolved = a.resolved_sections();
    let sections: Vec<&str> = resolved.sections.clone();
    let rows = move |r: &replay_report::CounterReport| {
        replay_cuda::counters::display::section_rows(r, &sections)
    };
    let display: Option<replay_report::SectionsOf<'_>> =
        (!resolved.sections.is_empty()).then_some(&rows);
    replay_report::counters_output_with(tool_report, out, display)
}

/// The template's subject for process `p`.
fn subject(p: &Process) -> Subject {
    let names: Vec<String> = p.header["env"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    Subject {
        pid: p.pid,
        host: p.info("host").unwrap_or_else(hostname),
        rank: p.rank(),
        env: names.iter().map(|n| (n.clone(), p.env(n))).collect(),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The counters' files: one per process. Where the template gives two processes one name,
/// each gets its pid before the extension (`c.csv`: `c.4242.csv`).
fn out_paths(t: Option<&Template>, procs: &[&Process]) -> Vec<Option<PathBuf>> {
    let Some(t) = t else {
        return vec![None; procs.len()];
    };
    let mut used: Vec<PathBuf> = Vec::new();
    let keys: Vec<String> = procs.iter().map(|p| t.key(&subject(p))).collect();
    procs
        .iter()
        .zip(&keys)
        .map(|(p, k)| {
            let mut path = t.expand(&subject(p), &|x| x.exists() || used.iter().any(|u| u == x));
            if keys.iter().filter(|o| *o == k).count() > 1 {
                let stem = path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let name = match path.extension() {
                    Some(e) => format!("{stem}.{}.{}", p.pid, e.to_string_lossy()),
                    None => format!("{stem}.{}", p.pid),
                };
                path.set_file_name(name);
            }
            used.push(path.clone());
            Some(path)
        })
        .collect()
}

/// The `member` of the reports of `pids`, summed.
fn merged(col: &Collector, pids: &[u32], member: &str) -> serde_json::Value {
    let mut v = serde_json::Value::Null;
    for p in pids {
        if let Some(r) = &col.procs[p].report {
            merge_sum(&mut v, &r[member]);
        }
    }
    v
}

/// The processes of `pids`, for the outputs.
fn process_rows(col: &Collector, pids: &[u32]) -> Vec<serde_json::Value> {
    pids.iter()
        .map(|pid| {
            let p = &col.procs[pid];
            let r = p.report.as_ref();
            serde_json::json!({
                "process": p.pid,
                "rank": p.rank(),
                "local_rank": p.header["local_rank"],
                "host": p.info("host"),
                "exe": p.info("exe"),
                "records": p.records,
                "last_dispatch": p.last_dispatch,
                "report": r.is_some(),
                "summary": r.map(|r| r["summary"].clone()),
                "interception": r.map(|r| r["interception"].clone()),
                "cupti": r.map(|r| r["cupti"].clone()),
            })
        })
        .collect()
}

/// Writes what `body` writes through a temporary file beside `path` and a rename.
fn atomically(
    path: &Path,
    body: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let r = std::fs::File::create(&tmp)
        .and_then(|f| {
            let mut w = std::io::BufWriter::new(f);
            body(&mut w)?;
            std::io::Write::flush(&mut w)
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// The JSON output of the processes `pids`: their reports' summaries summed, the processes,
/// the kernels (merged by name), then every record with its process and rank, streamed from
/// the records files.
fn write_json(
    path: &Path,
    a: &RunArgs,
    passes: u64,
    col: &Collector,
    pids: &[u32],
) -> std::io::Result<()> {
    let mut kernels: BTreeMap<String, KernelRow> = BTreeMap::new();
    for pid in pids {
        for (name, row) in &col.procs[pid].kernels {
            kernels.entry(name.clone()).or_default().merge(row);
        }
    }
    let head = serde_json::json!({
        "tool": a.tool,
        "passes": passes,
        "processes": process_rows(col, pids),
        "summary": merged(col, pids, "summary"),
        "interception": merged(col, pids, "interception"),
        "cupti": merged(col, pids, "cupti"),
        "kernels": kernels.iter().map(|(k, r)| (k.clone(), r.for_json())).collect::<BTreeMap<_, _>>(),
    });
    let head = serde_json::to_string(&head).map_err(std::io::Error::other)?;
    atomically(path, |w| {
        w.write_all(&head.as_bytes()[..head.len() - 1])?;
        w.write_all(b",\"records\":[")?;
        let mut first = true;
        for pid in pids {
            let rank = col.procs[pid].rank();
            col.for_each_record(*pid, |mut r| {
                if let Some(o) = r.as_object_mut() {
                    o.insert("process".into(), (*pid).into());
                    o.insert("rank".into(), serde_json::json!(rank));
                }
                if !first {
                    w.write_all(b",")?;
                }
                first = false;
                serde_json::to_writer(&mut *w, &r).map_err(std::io::Error::other)
            })?;
        }
        w.write_all(b"]}")
    })
}

/// The CSV output: one row per dispatch and pass, with its process and rank; the kernel
/// named as Nsight Compute names it.
fn write_csv(path: &Path, col: &Collector, pids: &[u32]) -> std::io::Result<()> {
    atomically(path, |w| {
        w.write_all(b"process,rank,dispatch_id,kernel,outcome,reason,scope,layout,pass,gpu_seconds,inputs_identical,outputs_identical,graph,node,launch_seconds,wait_seconds,window_seconds\n")?;
        for pid in pids {
            let rank = col.procs[pid]
                .rank()
                .map(|r| r.to_string())
                .unwrap_or_default();
            col.for_each_record(*pid, |r| {
                let passes = r["pass_gpu_seconds"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let kernel =
                    names::ncu_demangled(r["kernel"].as_str().unwrap_or("")).replace('"', "\"\"");
                let per = |k: &str, p: usize| {
                    r[k].get(p)
                        .and_then(serde_json::Value::as_f64)
                        .map(|x| x.to_string())
                        .unwrap_or_default()
                };
                for p in 0..passes.len().max(1) {
                    writeln!(
                        w,
                        "{pid},{rank},{},\"{kernel}\",{},{},{},{},{},{},{},{},{},{},{},{},{}",
                        r["dispatch_id"],
                        r["outcome"].as_str().unwrap_or(""),
                        r["reason"].as_str().unwrap_or(""),
                        r["scope"].as_str().unwrap_or(""),
                        r["layout"].as_str().unwrap_or(""),
                        p,
                        passes.get(p).map(|x| x.to_string()).unwrap_or_default(),
                        r["inputs_identical"],
                        r["outputs_identical"],
                        r["graph"]
                            .as_u64()
                            .map(|g| g.to_string())
                            .unwrap_or_default(),
                        r["node"]
                            .as_u64()
                            .map(|n| n.to_string())
                            .unwrap_or_default(),
                        per("pass_launch_seconds", p),
                        per("pass_wait_seconds", p),
                        r["phases"]["window"].as_f64().unwrap_or(0.0),
                    )?;
                }
                Ok(())
            })?;
        }
        Ok(())
    })
}

/// The per-kernel table printed at the end: one row per process and kernel, the kernel by
/// its short name (Nsight Compute's function name, longer only where two kernels would read
/// the same; the outputs have the full names).
pub fn table(a: &RunArgs, passes: u64, col: &Collector) -> String {
    let short = names::short_names(
        col.procs
            .values()
            .flat_map(|p| p.kernels.keys().map(String::as_str)),
    );
    let w = short
        .values()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    let mut s = format!(
        "\nkreplay run: tool {} with {passes} passes{}\n{:>5} {:>8} {:<w$} {:>6} {:>8} {:>9} {:>9}  {}\n",
        a.tool,
        if col.procs.len() > 1 {
            format!(", {} processes", col.procs.len())
        } else {
            String::new()
        },
        "rank",
        "pid",
        "kernel",
        "seen",
        "replayed",
        "in-diff",
        "out-diff",
        "gpu us/pass min/median/max, not replayed"
    );
    for p in col.procs.values() {
        for (name, row) in &p.kernels {
            let times = match row.sample().min_median_max() {
                None => "-".to_string(),
                Some((lo, med, hi)) => format!("{:.1}/{:.1}/{:.1}", lo * 1e6, med * 1e6, hi * 1e6),
            };
            let not: Vec<String> = row
                .not_replayed
                .iter()
                .map(|(r, n)| format!("{r}={n}"))
                .collect();
            s.push_str(&format!(
                "{:>5} {:>8} {:<w$} {:>6} {:>8} {:>9} {:>9}  {} {}\n",
                p.rank_text(),
                p.pid,
                short.get(name).map(String::as_str).unwrap_or(name),
                row.dispatches,
                row.replayed,
                row.inputs_differed,
                row.outputs_differed,
                times,
                not.join(" ")
            ));
        }
    }
    let pids: Vec<u32> = col.procs.keys().copied().collect();
    s.push_str(&format!(
        "summary: {}\n",
        serde_json::to_string(&merged(col, &pids, "summary")).unwrap_or_default()
    ));
    // The CUDA interception's counts (the HSA backend has none).
    let interception = merged(col, &pids, "interception");
    if !interception.is_null() {
        s.push_str(&format!(
            "interception: {}\n",
            serde_json::to_string(&interception).unwrap_or_default()
        ));
    }
    s.push_str(&phase_line(&merged(col, &pids, "summary")));
    s.push_str(&cupti_line(&merged(col, &pids, "cupti")));
    s.push_str(&interception_notes(&merged(col, &pids, "interception")));
    s
}

/// Where the replay windows' time went, from the summary's `phases` (seconds summed over
/// every window): one line, each phase in ms and as a share of the windows' time.
pub fn phase_line(summary: &serde_json::Value) -> String {
    let p = &summary["phases"];
    let window = p["window"].as_f64().unwrap_or(0.0);
    if window <= 0.0 {
        return String::new();
    }
    let parts: Vec<String> = [
        "drain",
        "plan",
        "capture",
        "launch",
        "wait",
        "check",
        "restore",
        "callbacks",
        "finish",
    ]
    .iter()
    .map(|k| {
        let v = p[*k].as_f64().unwrap_or(0.0);
        format!("{k} {:.3} ms ({:.0}%)", v * 1e3, 100.0 * v / window)
    })
    .collect();
    format!("replay time {:.3} ms: {}\n", window * 1e3, parts.join(", "))
}

/// `LD_PRELOAD` for the program: the library first, before what the environment preloads,
/// except sanitizer runtimes (ASan, TSan, UBSan, LSan, MSan, HWASan, GCC's or clang's), which
/// must come first of all or refuse to start.
fn preload_with(lib: &std::path::Path, existing: Option<&str>) -> String {
    const SANITIZERS: [&str; 7] = [
        "libasan",
        "libtsan",
        "libubsan",
        "liblsan",
        "libmsan",
        "libhwasan",
        "libclang_rt.",
    ];
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    for p in existing
        .unwrap_or("")
        .split([':', ' '])
        .filter(|p| !p.is_empty())
    {
        let file = p.rsplit('/').next().unwrap_or(p);
        if SANITIZERS.iter().any(|s| file.starts_with(s)) {
            first.push(p);
        } else {
            rest.push(p);
        }
    }
    let lib = lib.display().to_string();
    first
        .into_iter()
        .chain(std::iter::once(lib.as_str()))
        .chain(rest)
        .collect::<Vec<_>>()
        .join(":")
}

/// What the user must know of launches the interception ran once without a window: those
/// behind a kernel that waits on the host (an autotuner's timing) and those beside another
/// thread's stream capture.
fn interception_notes(i: &serde_json::Value) -> String {
    let mut s = String::new();
    let behind = i["behind_host_wait"].as_u64().unwrap_or(0);
    if behind > 0 {
        s.push_str(&format!(
            "note: {behind} launches ran once, untouched, behind a kernel that waits on the host or \
             on peers (XLA's autotuner times its candidates behind such a kernel). An autotuner \
             that times kernels can still choose differently than in a plain run (XLA's does \
             even between plain runs): pin its choices (XLA_FLAGS=--xla_gpu_autotune_level=0, \
             or a persisted autotune cache) when results must match a plain run bit for bit\n"
        ));
    }
    let beside = i["beside_capture"].as_u64().unwrap_or(0);
    if beside > 0 {
        s.push_str(&format!(
            "note: {beside} launches ran once, untouched, beside a stream capture on another \
             thread (no window runs beside a live capture)\n"
        ));
    }
    // Graph launches that ran once, by reason (an unrolled graph's kernels are records).
    if let Some(once) = i["graph_run_once"].as_object() {
        let mut why: Vec<String> = once
            .iter()
            .filter_map(|(k, v)| v.as_u64().filter(|n| *n > 0).map(|n| format!("{k} {n}")))
            .collect();
        if !why.is_empty() {
            why.sort();
            s.push_str(&format!(
                "note: graph launches ran once, untouched: {}\n",
                why.join(", ")
            ));
        }
    }
    s
}

/// What the CUPTI cross-check found: launches that did not pass through a wrapper, or why
/// it did not run.
fn cupti_line(c: &serde_json::Value) -> String {
    match c["status"].as_str() {
        Some("subscribed") => {
            let outside = c["outside"].as_u64().unwrap_or(0);
            if outside == 0 {
                format!(
                    "cupti: every launch the driver ran passed through a wrapper ({} launch calls seen)\n",
                    c["inside"]
                )
            } else {
                format!(
                    "cupti: {outside} launches did NOT pass through a wrapper (not replayed, not gated): {}\n",
                    serde_json::to_string(&c["outside_by_entry"]).unwrap_or_default()
                )
            }
        }
        Some("off") => "cupti: no cross-check (off; --check-launches turns it on); launches that bypass the wrappers are not counted\n".to_string(),
        Some(status) => format!(
            "cupti: no cross-check ({status}: {}); launches that bypass the wrappers are not counted\n",
            c["detail"].as_str().unwrap_or("")
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_line_gives_each_phase_its_share_of_the_windows() {
        let s = serde_json::json!({"phases": {"window": 0.01, "wait": 0.005, "capture": 0.0025}});
        let line = phase_line(&s);
        assert!(line.starts_with("replay time 10.000 ms: "), "{line}");
        assert!(line.contains("wait 5.000 ms (50%)"), "{line}");
        assert!(line.contains("capture 2.500 ms (25%)"), "{line}");
        assert!(line.contains("drain 0.000 ms (0%)"), "{line}");
        assert_eq!(phase_line(&serde_json::json!({})), "");
    }

    #[test]
    fn sanitizer_runtimes_stay_first_in_ld_preload_and_the_library_comes_next() {
        let lib = std::path::Path::new("/opt/kr/libkernel_replay.so");
        assert_eq!(preload_with(lib, None), "/opt/kr/libkernel_replay.so");
        assert_eq!(preload_with(lib, Some("")), "/opt/kr/libkernel_replay.so");
        assert_eq!(
            preload_with(lib, Some("libfaketime.so.1 /x/libtrace.so")),
            "/opt/kr/libkernel_replay.so:libfaketime.so.1:/x/libtrace.so"
        );
        assert_eq!(
            preload_with(
                lib,
                Some("/x/libtrace.so:/usr/lib/libasan.so.8:libclang_rt.tsan-x86_64.so")
            ),
            "/usr/lib/libasan.so.8:libclang_rt.tsan-x86_64.so:/opt/kr/libkernel_replay.so:/x/libtrace.so"
        );
    }

    #[test]
    fn launches_run_once_behind_a_host_wait_or_beside_a_capture_are_told() {
        assert_eq!(
            interception_notes(&serde_json::json!({"launches_seen": 3})),
            ""
        );
        let n =
            interception_notes(&serde_json::json!({"behind_host_wait": 12, "beside_capture": 0}));
        assert!(n.starts_with("note: 12 launches ran once"), "{n}");
        assert!(n.contains("--xla_gpu_autotune_level=0"), "{n}");
        assert_eq!(n.lines().count(), 1, "{n}");
        let n =
            interception_notes(&serde_json::json!({"behind_host_wait": 1, "beside_capture": 4}));
        assert_eq!(n.lines().count(), 2, "{n}");
        assert!(
            n.lines()
                .nth(1)
                .unwrap()
                .starts_with("note: 4 launches ran once"),
            "{n}"
        );
    }

    #[test]
    fn graph_launches_run_once_are_told_by_reason_and_the_mode_option_is_read() {
        let n = interception_notes(&serde_json::json!({
            "graph_run_once": {"unseen_graph": 2, "node_type": 0, "device_launch": 1}
        }));
        assert_eq!(
            n,
            "note: graph launches ran once, untouched: device_launch 1, unseen_graph 2\n"
        );
        let a = parse(&s(&["--graph-profiling", "graph", "--", "app"])).unwrap();
        assert_eq!(a.graph_profiling.as_deref(), Some("graph"));
        assert!(parse(&s(&["--graph-profiling", "nodes", "--", "app"])).is_err());
        assert_eq!(parse(&s(&["--", "app"])).unwrap().graph_profiling, None);
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_table_reports_the_cupti_cross_check() {
        let v = |c: serde_json::Value| cupti_line(&c);
        let t = v(
            serde_json::json!({"status": "subscribed", "inside": 9, "outside": 2,
            "outside_by_entry": {"cuLaunchGrid": 2}}),
        );
        assert!(t.contains("cupti: 2 launches did NOT pass"), "{t}");
        assert!(t.contains("cuLaunchGrid"), "{t}");
        let t = v(serde_json::json!({"status": "subscribed", "inside": 9, "outside": 0}));
        assert!(
            t.contains("every launch the driver ran passed through a wrapper"),
            "{t}"
        );
        let t = v(serde_json::json!({"status": "off", "detail": "KREPLAY_CUDA_CUPTI=0"}));
        assert!(t.contains("--check-launches turns it on"), "{t}");
        let t = v(serde_json::json!({"status": "unavailable", "detail": "no libcupti found"}));
        assert!(
            t.contains("cupti: no cross-check (unavailable: no libcupti found)"),
            "{t}"
        );
    }

    #[test]
    fn the_counter_tools_out_needs_a_known_extension() {
        let mut a = parse(&s(&["--out", "c.xlsx", "--", "app"])).unwrap();
        assert!(check_out(&a).is_ok(), "other tools keep their own --out");
        a.tool = "counters".into();
        let e = check_out(&a).unwrap_err().to_string();
        assert!(
            e.contains("c.xlsx") && e.contains(".csv, .json, .db"),
            "{e}"
        );
        for ok in ["c.csv", "c.json", "c.db", "c.html"] {
            a.out = Some(PathBuf::from(ok));
            assert!(check_out(&a).is_ok(), "{ok}");
        }
    }

    /// A counter report of two launches with the raw metrics `--set full` asks, as the
    /// library's JSON report holds it.
    fn full_set_report(metrics: &[String]) -> serde_json::Value {
        use replay_report::{CounterDispatch, CounterReport, CounterSample, MetricInfo};
        let dispatch = |id: u64| CounterDispatch {
            dispatch_id: id,
            kernel: "_Z4fillPf".into(),
            kernel_demangled: "fill(float*)".into(),
            device: 0,
            context: 1,
            stream: 7,
            grid: [4, 1, 1],
            block: [128, 1, 1],
            passes: 5,
            snapshot_bytes: 0,
            start_ns: 0,
            end_ns: 0,
            pass_ns: Vec::new(),
            graph: None,
            node: None,
            graph_launch: None,
            phases: None,
        };
        let value = |m: &str, id: u64| match m {
            "gpu__time_duration.sum" => 1_000.0 * id as f64,
            "gpc__cycles_elapsed.avg" => 1_980.0 * id as f64,
            "smsp__inst_executed.sum" => 256.0,
            "smsp__thread_inst_executed.sum" => 8_192.0,
            _ => 1.0,
        };
        let r = CounterReport {
            process_id: 42,
            process_name: "app".into(),
            compute_capability: "9.0".into(),
            metrics: metrics
                .iter()
                .map(|m| MetricInfo {
                    name: m.clone(),
                    unit: String::new(),
                    description: String::new(),
                    pass: 1,
                })
                .collect(),
            // Dispatch ids as the service gives them: not from 0, not contiguous.
            dispatches: vec![dispatch(3), dispatch(11)],
            samples: [3u64, 11]
                .iter()
                .flat_map(|id| {
                    metrics.iter().map(move |m| CounterSample {
                        dispatch_id: *id,
                        pass: 1,
                        metric: m.clone(),
                        value: value(m, *id),
                    })
                })
                .collect(),
            ..CounterReport::default()
        };
        serde_json::json!({ "counters": r })
    }

    #[test]
    fn set_full_writes_nsight_computes_section_rows_keyed_by_launch_index() {
        let a = parse(&s(&[
            "--tool", "counters", "--set", "full", "--out", "k.csv", "--", "app",
        ]))
        .unwrap();
        let tool = full_set_report(&a.metric_list());
        let d = std::env::temp_dir().join(format!("kreplay-sections-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let out = d.join("k.csv");
        let o = counters_output(&a, &tool, Some(&out)).unwrap().unwrap();
        assert_eq!(o.written.unwrap().unwrap(), replay_report::Format::Csv);
        let text = std::fs::read_to_string(&out).unwrap();
        let mut lines = text.lines();
        let header = replay_report::parse_record(lines.next().unwrap());
        let col = |n: &str| header.iter().position(|h| h == n).unwrap();
        let recs: Vec<Vec<String>> = lines.map(replay_report::parse_record).collect();
        let get = |id: &str, section: &str, name: &str| {
            recs.iter()
                .find(|f| {
                    f[col("ID")] == id
                        && f[col("Section Name")] == section
                        && f[col("Metric Name")] == name
                })
                .map(|f| {
                    (
                        f[col("Metric Unit")].clone(),
                        f[col("Metric Value")].clone(),
                    )
                })
        };
        let sol = "GPU Speed Of Light Throughput";
        assert_eq!(
            get("0", sol, "Duration"),
            Some(("ns".into(), "3,000".into()))
        );
        assert_eq!(
            get("1", sol, "Duration"),
            Some(("ns".into(), "11,000".into()))
        );
        assert_eq!(
            get("0", sol, "SM Frequency"),
            Some(("hz".into(), "1,980,000,000".into()))
        );
        assert_eq!(
            get("0", "Warp State Statistics", "Avg. Active Threads Per Warp"),
            Some((String::new(), "32".into()))
        );
        // Not collectable through CUPTI: absent, not 0.
        assert_eq!(get("0", "Occupancy", "Block Limit Registers"), None);
        assert_eq!(get("0", "Launch Statistics", "Waves Per SM"), None);
        // The raw metrics follow under "raw".
        assert!(get("1", "raw", "smsp__inst_executed.sum").is_some());
        // The dispatch ids stay in a column of ours.
        assert!(recs
            .iter()
            .any(|f| f[col("ID")] == "1" && f[col("Dispatch ID")] == "11"));
        // Without sections (a plain --metrics list) the file is the raw layout.
        let plain = parse(&s(&[
            "--tool",
            "counters",
            "--metrics",
            "gpu__time_duration.sum",
            "--",
            "app",
        ]))
        .unwrap();
        let o = counters_output(&plain, &tool, Some(&out)).unwrap().unwrap();
        assert!(o.written.unwrap().is_ok());
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.starts_with(replay_report::CSV_HEADER));
        assert!(!text.contains("GPU Speed Of Light Throughput"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_html_out_gets_the_page_with_the_section_rows() {
        let a = parse(&s(&[
            "--tool", "counters", "--set", "full", "--out", "k.html", "--", "app",
        ]))
        .unwrap();
        assert!(check_out(&a).is_ok());
        let tool = full_set_report(&a.metric_list());
        let d = std::env::temp_dir().join(format!("kreplay-html-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let out = d.join("k.html");
        let o = counters_output(&a, &tool, Some(&out)).unwrap().unwrap();
        assert_eq!(o.written.unwrap().unwrap(), replay_report::Format::Html);
        let page = std::fs::read_to_string(&out).unwrap();
        assert_eq!(page.matches("<tr data-dispatch=").count(), 2, "{page}");
        // The table's key values and each dispatch's sections come from the section rows.
        assert!(page.contains(">SM %</th>"), "{page}");
        let d11 = &page[page.find("<details id=\"d-11\"").unwrap()..];
        assert!(
            d11.contains("<tr><td>Duration</td><td>ns</td><td class=\"num\">11,000</td>"),
            "{d11}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn sections_and_ncu_sets_expand_to_their_raw_metrics() {
        let a = parse(&s(&[
            "--tool",
            "counters",
            "--section",
            "LaunchStats",
            "--section",
            "MemoryWorkloadAnalysis",
            "--",
            "app",
        ]))
        .unwrap();
        let m = a.metric_list();
        assert_eq!(m[0], "launch__block_size");
        assert!(m.contains(&"l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum".to_string()));
        assert!(!m.iter().any(|x| x.starts_with("device__attribute_")));
        let r = a.resolved_sections();
        assert_eq!(r.sections, ["LaunchStats", "MemoryWorkloadAnalysis"]);
        let full = parse(&s(&["--tool", "counters", "--set", "full", "--", "app"])).unwrap();
        assert!(full.resolved_sections().not_collectable_line().is_some());
        assert!(full
            .metric_list()
            .contains(&"smsp__warps_eligible.avg.per_cycle_active".into()));
        let e = parse(&s(&[
            "--tool",
            "counters",
            "--section",
            "Nope",
            "--",
            "app",
        ]))
        .unwrap_err();
        assert!(e.contains("SpeedOfLight"), "{e}");
        let e = parse(&s(&["--section", "Occupancy", "--", "app"])).unwrap_err();
        assert!(e.contains("for --tool counters"), "{e}");
    }

    #[test]
    fn parses_the_counters_options() {
        let a = parse(&s(&[
            "--tool",
            "counters",
            "--set",
            "basic",
            "--metrics",
            "dram__bytes_read.sum, l1tex__t_sectors.sum",
            "--",
            "app",
        ]))
        .unwrap();
        let m = a.metric_list();
        assert_eq!(m[0], "launch__grid_size");
        assert_eq!(m.iter().filter(|x| *x == "dram__bytes_read.sum").count(), 1);
        assert_eq!(m.last().unwrap(), "l1tex__t_sectors.sum");
        let e = parse(&s(&["--tool", "counters", "--", "app"])).unwrap_err();
        assert!(e.contains("needs --metrics LIST or --set NAME"), "{e}");
        let e = parse(&s(&["--tool", "counters", "--set", "all", "--", "app"])).unwrap_err();
        assert!(e.contains("expected one of basic"), "{e}");
        let e = parse(&s(&["--metrics", "a.sum", "--", "app"])).unwrap_err();
        assert!(e.contains("for --tool counters, not verify"), "{e}");
        assert!(parse(&s(&["--tool", "counters", "--metrics", " , ", "--", "app"])).is_err());
    }

    #[test]
    fn a_sets_metrics_the_chip_lacks_are_left_out_and_named_ones_are_not() {
        let ffma = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum";
        let bad = vec![(
            ffma.to_string(),
            "not among the chip's SASS metrics".to_string(),
        )];
        let set = parse(&s(&["--tool", "counters", "--set", "basic", "--", "app"])).unwrap();
        let names = set.metric_list();
        let rest = without_unavailable_set_metrics(&set, &names, "GH100", &bad).unwrap();
        assert_eq!(rest.len(), names.len() - 1);
        assert!(!rest.iter().any(|m| m == ffma));
        // Asked for by name (too): an error, as without a set.
        let named = parse(&s(&[
            "--tool",
            "counters",
            "--set",
            "basic",
            "--metrics",
            ffma,
            "--",
            "app",
        ]))
        .unwrap();
        let names = named.metric_list();
        assert_eq!(
            without_unavailable_set_metrics(&named, &names, "GH100", &bad),
            None
        );
        let list = parse(&s(&["--tool", "counters", "--metrics", ffma, "--", "app"])).unwrap();
        assert_eq!(
            without_unavailable_set_metrics(&list, &list.metric_list(), "GH100", &bad),
            None
        );
        // Nothing would remain: an error.
        let all_bad: Vec<(String, String)> = set
            .metric_list()
            .into_iter()
            .map(|m| (m, "no".to_string()))
            .collect();
        assert_eq!(
            without_unavailable_set_metrics(&set, &set.metric_list(), "GH100", &all_bad),
            None
        );
    }

    #[test]
    fn list_sass_starts_no_program_and_a_mixed_list_parses() {
        let a = parse(&s(&["--list-sass"])).unwrap();
        assert!(a.list_sass && a.app.is_empty());
        let a = parse(&s(&[
            "--list-sass",
            "--metrics",
            "smsp__inst_executed.sum,sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
        ]))
        .unwrap();
        assert_eq!(a.metric_list().len(), 2);
        let e = parse(&s(&["--list-sass", "--", "app"])).unwrap_err();
        assert!(e.contains("starts no program"), "{e}");
        assert!(parse(&s(&["--list-sass=1"])).is_err());
        // A mixed list (range and SASS metrics) is one --metrics list.
        let a = parse(&s(&[
            "--tool",
            "counters",
            "--metrics",
            "dram__bytes_read.sum,sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
            "--",
            "app",
        ]))
        .unwrap();
        assert_eq!(
            a.metric_list(),
            s(&[
                "dram__bytes_read.sum",
                "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
            ])
        );
        // Without CUPTI (CI) the listing is one line and status 1.
        if replay_cuda::counters::CuptiProfiler::global().is_err() {
            assert_eq!(list_sass(&parse(&s(&["--list-sass"])).unwrap()), 1);
        }
    }

    #[test]
    fn the_plan_lines_name_the_sass_pass_and_its_api_metrics_after_the_range_groups() {
        use replay_cuda::counters::{
            Config, Group, MetricPlan, Rollup, SassGranularity, SassGroup, SassMetric,
        };
        let plan = MetricPlan {
            chip: "GH100".into(),
            metrics: Vec::new(),
            launch: Vec::new(),
            groups: vec![Group {
                config: Config {
                    metrics: s(&["dram__bytes_read.sum"]),
                    image: Vec::new(),
                    passes: 2,
                    handle: 0,
                },
                first_pass: 0,
            }],
            sass: Some(SassGroup {
                first_pass: 2,
                metrics: vec![SassMetric {
                    name: "sm__sass_thread_inst_executed_op_ffma_pred_on.sum".into(),
                    api_name: "smsp__sass_thread_inst_executed_op_ffma_pred_on".into(),
                    id: 7,
                    rollup: Rollup::Sum,
                }],
                granularity: SassGranularity::Gpu,
                sentinel: None,
            }),
            passes: 3,
            single_config_passes: 2,
        };
        assert_eq!(
            plan_lines(&plan),
            s(&[
                "pass 0-1: dram__bytes_read.sum",
                "pass 2: sm__sass_thread_inst_executed_op_ffma_pred_on.sum (SASS smsp__sass_thread_inst_executed_op_ffma_pred_on)"
            ])
        );
    }

    /// Runs `kreplay run --tool counters --metrics METRICS -- sh -c 'touch MARKER'` in a
    /// fresh directory named after `tag`: the exit status and whether the program started.
    fn run_counters_touching_a_marker(tag: &str, metrics: &str) -> (u8, bool) {
        let dir = std::env::temp_dir().join(format!("kreplay-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("started");
        let code = main(&s(&[
            "--tool",
            "counters",
            "--metrics",
            metrics,
            "--",
            "sh",
            "-c",
            &format!("touch {}", marker.display()),
        ]));
        let started = marker.exists();
        let _ = std::fs::remove_dir_all(&dir);
        (code, started)
    }

    #[test]
    fn a_mixed_counter_list_is_compiled_before_the_program_starts() {
        // A SASS metric an H200 has (GH100's SASS Metrics API has no per-opcode thread counts).
        let (code, started) = run_counters_touching_a_marker(
            "mixed",
            "smsp__inst_executed.sum,smsp__sass_inst_executed.sum",
        );
        // Here (no GPU) CUPTI or the driver is missing: 1 and no start; with them the list
        // compiles (a range group and the SASS pass) and the program runs.
        match code {
            1 => assert!(!started, "the program must not start"),
            0 => assert!(started),
            c => panic!("exit status {c}: the list was refused"),
        }
    }

    #[test]
    fn a_counter_list_that_cannot_be_compiled_never_starts_the_program() {
        let (code, started) = run_counters_touching_a_marker("counters", "no__such_metric.sum");
        // Here (no GPU) CUPTI or the driver is missing: 1; with them the metric is unknown: 2.
        assert!(code == 1 || code == 2, "{code}");
        assert!(!started, "the program must not start");
    }

    #[test]
    fn a_bad_value_names_its_option() {
        let e = parse(&s(&["--passes", "-1", "--", "app"])).unwrap_err();
        assert!(
            e.contains("--passes \"-1\"") && e.contains("a whole number of at least 1"),
            "{e}"
        );
        let e = parse(&s(&["--ranks", "1,x", "--", "app"])).unwrap_err();
        assert!(e.contains("--ranks") && e.contains("\"x\""), "{e}");
        let e = parse(&s(&["--out", "r-%x.json", "--", "app"])).unwrap_err();
        assert!(e.contains("--out") && e.contains("%x"), "{e}");
        let e = parse(&s(&["--tool", "fast", "--", "app"])).unwrap_err();
        assert!(
            e.contains("--tool") && e.contains("verify, timing, counters"),
            "{e}"
        );
        let e = parse(&s(&["--frob", "--", "app"])).unwrap_err();
        assert!(e.contains("unknown option \"--frob\""), "{e}");
        // A repeated option: the last one counts; --metrics adds up.
        let a = parse(&s(&[
            "--tool",
            "timing",
            "--tool",
            "counters",
            "--metrics",
            "a.sum",
            "--metrics",
            "b.sum,c.sum",
            "--check-launches",
            "--ranks",
            "0,2-3",
            "app",
            "--passes",
            "x",
        ]))
        .unwrap();
        assert_eq!(a.tool, "counters");
        assert_eq!(a.metrics, s(&["a.sum", "b.sum", "c.sum"]));
        assert!(a.check_launches);
        assert_eq!(a.ranks.as_deref(), Some("0,2-3"));
        assert_eq!(
            a.app,
            s(&["app", "--passes", "x"]),
            "the program's own arguments"
        );
        assert!(!a.passes_given && a.passes == 3);
    }

    #[test]
    fn parses_options_and_program() {
        let a = parse(&s(&[
            "--tool",
            "timing",
            "--passes=5",
            "--out",
            "r.csv",
            "--",
            "app",
            "-x",
        ]))
        .unwrap();
        assert_eq!(a.tool, "timing");
        assert_eq!(a.passes, 5);
        assert_eq!(a.out, Some(PathBuf::from("r.csv")));
        assert_eq!(a.app, s(&["app", "-x"]));
        assert!(parse(&s(&["--tool", "nonsense", "--", "app"])).is_err());
        assert!(parse(&s(&["--passes", "0", "--", "app"])).is_err());
        assert!(parse(&s(&["--tool", "verify"])).is_err());
    }
}
