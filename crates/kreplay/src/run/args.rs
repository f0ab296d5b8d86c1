//! `kreplay run`'s command line: the options as clap declares them ([`RunOpts`]), their
//! checks, and what the rest of the command reads of them ([`RunArgs`], [`Backend`]).

use std::path::{Path, PathBuf};

use replay_cuda::counters::clocks::ClockControl;
use replay_cuda::job;

use crate::template::Template;

/// Options of `kreplay run`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RunArgs {
    /// `verify`, `timing` or `counters`.
    pub(super) tool: String,
    /// Passes per dispatch.
    pub(super) passes: u64,
    /// Whether `--passes` was given (the counters tool otherwise asks for its plan's).
    pub(super) passes_given: bool,
    /// `--metrics` (counters), split.
    pub(super) metrics: Vec<String>,
    /// `--set` (counters).
    pub(super) set: Option<String>,
    /// `--section` (counters): Nsight Compute section identifiers, in order.
    pub(super) sections: Vec<String>,
    /// `--kernel-include`.
    pub(super) include: Option<String>,
    /// `--kernel-exclude`.
    pub(super) exclude: Option<String>,
    /// `--dispatch-range`.
    pub(super) range: Option<String>,
    /// `--out`.
    pub(super) out: Option<PathBuf>,
    /// `--library`.
    pub(super) library: Option<PathBuf>,
    /// `--list-sass`: print the chip's SASS metrics (and the list's plan) and start nothing.
    pub(super) list_sass: bool,
    /// `--check-launches`: the CUPTI cross-check of the launch wrappers.
    pub(super) check_launches: bool,
    /// `--ranks`: the ranks that replay.
    pub(super) ranks: Option<String>,
    /// The program and its arguments.
    pub(super) app: Vec<String>,
    /// `--graph-profiling`: `node`, `graph` or `off` (none: the environment's, else `node`).
    pub(super) graph_profiling: Option<String>,
    /// `--backend`: `cuda` or `hsa` (none: detected, [`Backend::detect`]).
    pub(super) backend: Option<String>,
    /// `--clock-control` (none given: [`RunArgs::clock_control`]'s default).
    pub(super) clock_control: Option<ClockControl>,
}

/// The runtime the program's kernels go through, and so how the library is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Backend {
    /// `LD_PRELOAD` and `CUDA_INJECTION64_PATH`.
    Cuda,
    /// `HSA_TOOLS_LIB`: the HSA runtime loads the library and calls its `OnLoad`.
    Hsa,
}

impl Backend {
    /// The machine's: HSA where there is an AMD GPU's kernel driver (`/dev/kfd`) and no
    /// NVIDIA one (`/dev/nvidiactl`), CUDA otherwise.
    fn detect() -> Self {
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
pub(crate) const USAGE: &str = "usage: kreplay run [--tool verify|timing|counters] [--passes N] [--metrics LIST] \
[--set NAME] [--section NAME] [--kernel-include P] [--kernel-exclude P] [--dispatch-range R] [--out FILE.json|FILE.csv|FILE.html] \
[--library PATH] [--check-launches] [--ranks LIST] [--graph-profiling node|graph|off] [--clock-control base|none] [--backend cuda|hsa] -- APP ARGS...
       kreplay run --list-sass [--metrics LIST] [--set NAME]";

/// `kreplay run`'s options, declared for clap (the top-level command line flattens them for
/// its help and its errors; [`parse`] reads them again into [`RunArgs`]).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RunOpts {
    /// The built-in tool: input and output digests per pass, GPU time per pass, or hardware
    /// counters.
    #[arg(long, value_name = "verify|timing|counters", default_value = "verify",
          value_parser = clap::builder::PossibleValuesParser::new(["verify", "timing", "counters"]))]
    tool: String,
    /// Passes per dispatch, at least 1 [default: 3; counters: the plan's, or this if more].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = passes_value)]
    passes: Option<u64>,
    /// counters: Nsight Compute metric names, comma-separated; may be repeated.
    #[arg(long, value_name = "LIST", value_parser = metrics_value)]
    metrics: Vec<String>,
    /// counters: a metric set (basic, memory; Nsight Compute's detailed, full, roofline).
    #[arg(long, value_name = "NAME", value_parser = set_value)]
    set: Option<String>,
    /// counters: an Nsight Compute section (LaunchStats, SpeedOfLight, ...); may be repeated.
    #[arg(long = "section", value_name = "NAME", value_parser = section_value)]
    sections: Vec<String>,
    /// Replay only kernels whose name matches P (the policy's KREPLAY_KERNEL_INCLUDE).
    #[arg(long = "kernel-include", value_name = "P")]
    include: Option<String>,
    /// Do not replay kernels whose name matches P (KREPLAY_KERNEL_EXCLUDE).
    #[arg(long = "kernel-exclude", value_name = "P")]
    exclude: Option<String>,
    /// Replay only the dispatches in R (KREPLAY_DISPATCH_RANGE).
    #[arg(long = "dispatch-range", value_name = "R")]
    range: Option<String>,
    /// Output file: .json or .csv (counters: .csv, .json, .db, .html). A name template: %p pid,
    /// %h host, %q{NAME} a variable's value, %i lowest free number, %rank% rank, %% a %;
    /// processes whose names come out equal share one file.
    #[arg(long, value_name = "FILE", value_parser = out_value)]
    out: Option<PathBuf>,
    /// libkernel_replay.so to preload [default: KREPLAY_LIBRARY, else beside kreplay].
    #[arg(long, value_name = "PATH")]
    library: Option<PathBuf>,
    /// Print the first GPU's SASS metrics (and the plan of --metrics / --set); start nothing.
    #[arg(long = "list-sass")]
    list_sass: bool,
    /// Cross-check the launch wrappers with CUPTI (off by default: it takes CUPTI's one
    /// subscriber slot, which the program's own profiler may need).
    #[arg(long = "check-launches")]
    check_launches: bool,
    /// Replay only in these ranks (0,2-3; from RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or
    /// SLURM_PROCID; none: rank 0); the others run untouched.
    #[arg(long, value_name = "LIST", value_parser = ranks_value)]
    ranks: Option<String>,
    /// CUDA graph launches: every kernel node a dispatch of its own (node, the default, as
    /// Nsight Compute's), the whole graph one dispatch (graph), or run once (off)
    /// [KREPLAY_GRAPH_PROFILING].
    #[arg(long = "graph-profiling", value_name = "node|graph|off",
          value_parser = clap::builder::PossibleValuesParser::new(["node", "graph", "off"]))]
    graph_profiling: Option<String>,
    /// How the library is attached: the CUDA driver's injection, or the HSA runtime's
    /// HSA_TOOLS_LIB (the tools verify and timing) [default: hsa on a machine with /dev/kfd
    /// and no NVIDIA driver, else cuda].
    #[arg(long, value_name = "cuda|hsa",
          value_parser = clap::builder::PossibleValuesParser::new(["cuda", "hsa"]))]
    backend: Option<String>,
    /// GPU clocks while the program runs: locked to base (the default of --tool counters, as
    /// Nsight Compute's; needs root) or left as they are (none, the other tools' default).
    #[arg(long = "clock-control", value_name = "base|none", value_parser = ClockControl::parse)]
    clock_control: Option<ClockControl>,
    /// The program and its arguments (after `--`, or from the first argument that is not an
    /// option).
    #[arg(value_name = "APP ARGS", trailing_var_arg = true, num_args = 0..)]
    app: Vec<String>,
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
pub(super) fn parse(args: &[String]) -> Result<RunArgs, String> {
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
        clock_control: o.clock_control,
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
    if a.clock_control == Some(ClockControl::Base) && a.backend.as_deref() == Some("hsa") {
        return Err("--clock-control base locks NVIDIA clocks (NVML); not on --backend hsa".into());
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
    /// `--clock-control`, else `base` for the counters tool (Nsight Compute's default) and
    /// `none` for the others; with whether it was given.
    pub(super) fn clock_control(&self) -> (ClockControl, bool) {
        match self.clock_control {
            Some(c) => (c, true),
            None if self.tool == "counters" && self.backend() == Backend::Cuda => {
                (ClockControl::Base, false)
            }
            None => (ClockControl::None, false),
        }
    }

    /// The backend: `--backend`, else [`Backend::detect`].
    pub(super) fn backend(&self) -> Backend {
        match self.backend.as_deref() {
            Some("hsa") => Backend::Hsa,
            Some(_) => Backend::Cuda,
            None => Backend::detect(),
        }
    }

    /// `--out` as a name template (checked when parsed).
    pub(super) fn out_template(&self) -> Option<Template> {
        self.out
            .as_deref()
            .and_then(|o| Template::parse(&o.to_string_lossy()).ok())
    }

    /// What `--set` and `--section` ask of Nsight Compute's sections (a kreplay set such as
    /// `basic` or `memory` is a plain list, not sections).
    pub(super) fn resolved_sections(&self) -> replay_cuda::counters::sections::Resolved {
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
    pub(super) fn metric_list(&self) -> Vec<String> {
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
