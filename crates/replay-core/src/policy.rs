//! Policy (SPEC §8): defaults, then `KREPLAY_*` environment variables (the upstream
//! `ROCPROFILER_KERNEL_REPLAY_*` names are accepted as aliases), then the API.
//!
//! **`auto`** (the default of `scope` and `restore`) is resolved per dispatch by the window,
//! from the agent's [`Capabilities`] and the dispatch's [`ArgLayout`] ([`resolve`]):
//!
//! | agent | argument layout | `scope=auto` | `restore=auto` |
//! |---|---|---|---|
//! | `DEVICE_DIGESTS` (CUDA with its digest kernels, the simulator) | known | `predicted` | `dirty` |
//! | `DEVICE_DIGESTS` | unknown | `all` | `dirty` |
//! | `AUTO_ARGUMENTS`, host digests (HSA) | known | `predicted` | `full` |
//! | neither (CUDA without NVRTC) | any | `all` | `full` |
//!
//! `predicted` is `arguments` unless the regions the arguments reach would not fit
//! the device tier whole ([`PredictWhen::Spill`], the default): a pooled allocation of tens
//! of GiB. Only then does it capture predicted chunks and watch the rest of the pool by
//! digest, so where `arguments` fits nothing changes (the record says `arguments`, with
//! `predict_fallback=fits_device`), and where it does not, the snapshot costs what the
//! kernel writes instead of spilling the pool to host memory or declining
//! `footprint_budget`. On HSA the scope check's host digests read the rest of the pool every
//! pass, which costs about what restoring it from a host tier costs, without the pool-sized
//! host backing; where the pool fits the device tier, `arguments` stays (a device-tier copy
//! is far cheaper than a host digest). Measured on the simulated HSA runtime
//! (`cargo bench -p replay-hsa-sim --bench predicted`: a 256 MiB pool, 1 MiB written, 8
//! passes, `restore=full`): `predicted` costs 0.38 times what `arguments` costs per pass
//! (122 against 321 ms: a host digest of the rest of the pool against a restore of all of
//! it), and captures 3 MiB instead of 256. The simulator's copies run at host speed in every
//! tier, so that ratio stands for the host tiers only; it is why `auto` is `predicted` on HSA
//! too, with `spill` deciding per dispatch.
//!
//! SPEC §7.2 asks for device digests before `auto` picks `arguments`; this module decides that HSA,
//! whose digests are host ones, resolves to `arguments` + `full` anyway (restoring every tracked
//! byte each pass costs more than digesting what lies outside the arguments), until its digests
//! become cheap (device digests: then `DEVICE_DIGESTS`, and `dirty` follows). A backend opts in
//! to that through [`Capabilities::AUTO_ARGUMENTS`]; no other backend sets it. A kernel
//! remembered for writing outside its scope runs under `all` whatever `auto` would pick. The
//! outcome record names what ran (`scope`, `restore`) and whether `auto` chose it
//! (`scope_auto`, `restore_auto`).
//!
//! A malformed value is an error that names the variable; nothing falls back silently. A value
//! that is not valid UTF-8 is malformed too (it is never taken for an unset variable).
//! When both a `KREPLAY_` name and its alias are set, the `KREPLAY_` name wins and a warning
//! says so.
//!
//! Two ways to read the environment:
//! - [`Policy::from_env`] is strict: the first malformed variable is the error, and no policy
//!   comes back (the command line uses it and exits naming the variable).
//! - [`Policy::env_over`] keeps every well-formed value, leaves each malformed variable's field
//!   as it was in the base, and returns one [`PolicyError`] per malformed variable
//!   ([`EnvPolicy`]). The process-wide service is built this way, so a caller can see every
//!   bad variable at once and decide: the C ABI refuses `kreplay_configure_replay` with
//!   `KREPLAY_STATUS_POLICY_ERROR` until each one is fixed or set through the API.

use std::ffi::OsString;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::filter::{DispatchRange, KernelFilter};
use crate::types::ArgLayout;
use crate::types::Capabilities;

/// Which memory a snapshot covers (SPEC §7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Every tracked region of the agent plus module variables.
    All,
    /// What the argument block points into, plus module variables.
    Arguments,
    /// Chunks inside the regions the arguments reach: a predicted set of chunks
    /// of each large region (learned per kernel from what its earlier dispatches wrote,
    /// relative to the argument pointers; a first-seen kernel gets a window of chunks at
    /// each pointer), the small regions whole, plus module variables; every other byte the
    /// kernel could reach is watched by the scope check's digests. A write outside the
    /// prediction truncates (`write_outside_scope`, memory equal to one execution) and grows
    /// the kernel's prediction. Where no region is large enough to predict, it plans
    /// `arguments`, and the record says `arguments`.
    Predicted,
    /// The default: resolved per dispatch by the window before it plans (see the
    /// [module docs](self)); a record names what ran instead. The memory layer, handed it
    /// directly, plans `all`.
    #[default]
    Auto,
}

impl Scope {
    /// Name used in logs and variables.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Arguments => "arguments",
            Self::Predicted => "predicted",
            Self::Auto => "auto",
        }
    }

    /// Parses `auto`, `all`, `arguments` or `predicted` (any case).
    pub fn parse(v: &str) -> Option<Self> {
        match v.to_ascii_lowercase().as_str() {
            "auto" => Some(Self::Auto),
            "all" => Some(Self::All),
            "arguments" => Some(Self::Arguments),
            "predicted" => Some(Self::Predicted),
            _ => None,
        }
    }
}

/// How memory is put back between passes (SPEC §7.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestoreMode {
    /// Every captured byte.
    Full,
    /// Only chunks whose digest changed.
    Dirty,
    /// The default: `dirty` where digests run on the device, else `full` (see the
    /// [module docs](self)); a record names what ran instead. The memory layer, handed it
    /// directly, restores `full`.
    #[default]
    Auto,
}

impl RestoreMode {
    /// Name used in logs and variables.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Dirty => "dirty",
            Self::Auto => "auto",
        }
    }

    /// Parses `auto`, `full` or `dirty` (any case).
    pub fn parse(v: &str) -> Option<Self> {
        match v.to_ascii_lowercase().as_str() {
            "auto" => Some(Self::Auto),
            "full" => Some(Self::Full),
            "dirty" => Some(Self::Dirty),
            _ => None,
        }
    }
}

/// Which large regions scope `predicted` predicts chunks of; the others it
/// captures whole, as `arguments` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PredictWhen {
    /// The default: only when capturing the regions the arguments reach whole would not fit
    /// the device tier (the snapshot would spill to host memory, 20-50 times slower to copy,
    /// or not fit at all: the pooled-allocator case). A snapshot that fits the device tier
    /// costs about what the prediction's scope check costs (one read of the region per
    /// pass), so predicting there would only add the risk of a miss.
    #[default]
    Spill,
    /// Every region of at least 128 digest chunks the arguments reach.
    Always,
}

impl PredictWhen {
    /// Name used in logs and variables.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Spill => "spill",
            Self::Always => "always",
        }
    }

    /// Parses `spill` or `always` (any case).
    pub fn parse(v: &str) -> Option<Self> {
        match v.to_ascii_lowercase().as_str() {
            "spill" => Some(Self::Spill),
            "always" => Some(Self::Always),
            _ => None,
        }
    }
}

/// When the scope check (SPEC §7.2) reads the tracked memory outside the snapshot.
///
/// The default, `every`, is the strict guarantee: after every pass, so a write outside the
/// snapshot in any pass is detected before a later pass could repeat it. Its cost is one
/// read of everything watched per pass, which on a device-sized pool (JAX preallocates 75% of
/// the GPU in one allocation) is most of the window (SPEC §11). The other values trade that
/// guarantee for speed and are only ever chosen explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutsideCheck {
    /// After every pass (strict; the default).
    #[default]
    Every,
    /// After the first pass only: a kernel that writes outside its snapshot in the first
    /// pass still truncates there with memory equal to one execution, but one whose writes
    /// outside differ between passes (a data-dependent target on restored inputs cannot, a
    /// kernel reading a clock or racing another stream can) goes unseen in later passes.
    /// Two reads of the watched memory per dispatch instead of one per pass plus one.
    First,
    /// Never: the snapshot scope is trusted. A kernel that writes outside it repeats those
    /// writes once per pass. For kernels whose scope is known to be complete.
    Never,
}

impl OutsideCheck {
    /// Name used in logs, records and variables.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Every => "every",
            Self::First => "first",
            Self::Never => "never",
        }
    }

    /// Parses `every`, `first` or `never` (any case).
    pub fn parse(v: &str) -> Option<Self> {
        match v.to_ascii_lowercase().as_str() {
            "every" => Some(Self::Every),
            "first" => Some(Self::First),
            "never" => Some(Self::Never),
            _ => None,
        }
    }

    /// Whether the check after pass `pass` (from 0) reads the watched memory.
    pub const fn checks_after(self, pass: u32) -> bool {
        match self {
            Self::Every => true,
            Self::First => pass == 0,
            Self::Never => false,
        }
    }
}

/// What `auto` resolves to for one dispatch: the scope and restore mode that run, and whether
/// `auto` chose each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Resolved {
    /// Scope to plan (never [`Scope::Auto`]).
    pub scope: Scope,
    /// Restore mode to use (never [`RestoreMode::Auto`]).
    pub restore: RestoreMode,
    /// The policy's scope was `auto`.
    pub scope_auto: bool,
    /// The policy's restore mode was `auto`.
    pub restore_auto: bool,
}

/// Resolves `auto` (the table in the [module docs](self)); explicit values pass unchanged.
pub fn resolve(
    scope: Scope,
    restore: RestoreMode,
    caps: Capabilities,
    layout: ArgLayout,
) -> Resolved {
    let device = caps.contains(Capabilities::DEVICE_DIGESTS);
    let scope_out = match scope {
        Scope::Auto
            if layout == ArgLayout::Known
                && (device || caps.contains(Capabilities::AUTO_ARGUMENTS)) =>
        {
            Scope::Predicted
        }
        Scope::Auto => Scope::All,
        s => s,
    };
    let restore_out = match restore {
        RestoreMode::Auto if device => RestoreMode::Dirty,
        RestoreMode::Auto => RestoreMode::Full,
        r => r,
    };
    Resolved {
        scope: scope_out,
        restore: restore_out,
        scope_auto: scope == Scope::Auto,
        restore_auto: restore == RestoreMode::Auto,
    }
}

/// Cache handling before each pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheControl {
    /// Flush and invalidate before each pass, so every pass starts cold.
    Flush,
    /// Leave caches alone.
    #[default]
    None,
}

/// Log verbosity of the default sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    /// Nothing.
    Off,
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// Outcome lines and above.
    #[default]
    Info,
    /// Window steps.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// Parses `off`, `error`, `warn`, `info`, `debug` or `trace` (any case).
    pub fn parse(v: &str) -> Option<Self> {
        parse_level(v)
    }

    /// The `log` crate's filter for this level.
    pub const fn to_filter(self) -> log::LevelFilter {
        match self {
            Self::Off => log::LevelFilter::Off,
            Self::Error => log::LevelFilter::Error,
            Self::Warn => log::LevelFilter::Warn,
            Self::Info => log::LevelFilter::Info,
            Self::Debug => log::LevelFilter::Debug,
            Self::Trace => log::LevelFilter::Trace,
        }
    }
}

/// Everything that steers replay. Build with [`Policy::default`] or [`Policy::from_env`], then
/// adjust fields through the API and call [`Policy::validate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// Upper bound on snapshot bytes; 0 = half of available host memory for the host tiers.
    pub max_snapshot_bytes: u64,
    /// Budget of the device tier; 0 = what the backend reports available, less headroom.
    pub device_tier_bytes: u64,
    /// Budget of the pinned-host tier; 0 = automatic.
    pub pinned_tier_bytes: u64,
    /// Budget of the pageable-host tier; 0 = automatic.
    pub pageable_tier_bytes: u64,
    /// Bytes the device pool keeps after a window (trimmed to this).
    pub pool_keep_bytes: u64,
    /// How long pooled backing may sit unused before it is released (the next call into the
    /// library after that frees it); zero keeps it until the application runs out of memory.
    /// Another process sharing the device cannot ask for it back, so it is bounded.
    #[serde(default = "default_pool_idle_release")]
    pub pool_idle_release: Duration,
    /// Decline when the agent has virtual-memory mappings or stream-ordered allocations
    /// (SPEC §7.1), instead of capturing them like device memory: the behaviour before they
    /// were captured. Default false.
    pub decline_on_vmem: bool,
    /// Decline when the agent has other untracked allocations.
    pub decline_on_untracked: bool,
    /// Warn (still admit) when the projected copy time exceeds this many seconds.
    pub warn_seconds: f64,
    /// Copy bandwidth assumed for that projection, GB/s.
    pub assumed_gbps: f64,
    /// Bound of each drain wait.
    pub drain_timeout: Duration,
    /// Bound of each pass wait.
    pub pass_timeout: Duration,
    /// Longest single poll inside a bounded wait; a progress warning follows each
    /// `progress_interval` of waiting.
    pub poll_slice: Duration,
    /// Interval of the progress warning during a long wait.
    pub progress_interval: Duration,
    /// Bound on the number of passes (SPEC §4).
    pub max_passes: u32,
    /// Snapshot scope (default `auto`).
    pub scope: Scope,
    /// Restore mode (default `auto`).
    pub restore: RestoreMode,
    /// Chunk size of `dirty` digests, of the scope check and of scope `predicted`.
    pub chunk_bytes: u64,
    /// Which regions scope `predicted` predicts chunks of (default `spill`).
    #[serde(default)]
    pub predict: PredictWhen,
    /// When the scope check reads the memory outside the snapshot (default `every`).
    #[serde(default)]
    pub outside_check: OutsideCheck,
    /// Cache handling before each pass.
    pub cache_control: CacheControl,
    /// Which dispatches are candidates.
    pub filter: KernelFilter,
    /// Log level of the default sink.
    pub log_level: LogLevel,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            max_snapshot_bytes: 0,
            device_tier_bytes: 0,
            pinned_tier_bytes: 0,
            pageable_tier_bytes: 0,
            pool_keep_bytes: 256 << 20,
            pool_idle_release: default_pool_idle_release(),
            decline_on_vmem: false,
            decline_on_untracked: false,
            warn_seconds: 10.0,
            assumed_gbps: 4.0,
            drain_timeout: Duration::from_secs(60),
            pass_timeout: Duration::from_secs(60),
            poll_slice: Duration::from_millis(10),
            progress_interval: Duration::from_secs(5),
            max_passes: 1024,
            scope: Scope::Auto,
            restore: RestoreMode::Auto,
            chunk_bytes: 1 << 20,
            predict: PredictWhen::Spill,
            outside_check: OutsideCheck::Every,
            cache_control: CacheControl::None,
            filter: KernelFilter::default(),
            log_level: LogLevel::Info,
        }
    }
}

/// The default of [`Policy::pool_idle_release`]: long enough that back-to-back dispatches
/// of a training step reuse the pool, short enough that a process started after this one's
/// replay finds the device's memory free.
pub const DEFAULT_POOL_IDLE_RELEASE: Duration = Duration::from_secs(5);

fn default_pool_idle_release() -> Duration {
    DEFAULT_POOL_IDLE_RELEASE
}

/// A rejected policy value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?} is not valid: expected {expected}")]
pub struct PolicyError {
    /// The variable (or API field) that was wrong.
    pub variable: String,
    /// The value given.
    pub value: String,
    /// What would have been accepted.
    pub expected: &'static str,
}

/// The policy the environment gives over a base: every well-formed variable applied, and one
/// error per malformed variable, in the order of [`Policy::variable_names`].
#[derive(Debug, Clone, PartialEq)]
pub struct EnvPolicy {
    /// The base with every well-formed variable applied; the field of a malformed variable
    /// keeps the base's value.
    pub policy: Policy,
    /// One per malformed variable (its `variable` is the name that was set: ours or the
    /// alias). Empty when the environment was clean.
    pub errors: Vec<PolicyError>,
}

impl EnvPolicy {
    /// The policy, or the first error.
    pub fn into_result(self) -> Result<Policy, PolicyError> {
        match self.errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(self.policy),
        }
    }
}

/// What a value that is not valid UTF-8 was expected to be.
const EXPECTED_UTF8: &str = "valid UTF-8 text (this value is not)";

/// The prefix of our variables.
pub const PREFIX: &str = "KREPLAY_";
/// The prefix of the upstream aliases.
pub const ALIAS_PREFIX: &str = "ROCPROFILER_KERNEL_REPLAY_";

/// One policy variable: its suffix after the prefix, upstream aliases and what it sets.
struct Var {
    name: &'static str,
    aliases: &'static [&'static str],
    expected: &'static str,
    apply: fn(&mut Policy, &str) -> Option<()>,
}

macro_rules! var {
    ($name:literal, [$($alias:literal),*], $expected:literal, |$p:ident, $v:ident| $body:expr) => {
        Var {
            name: $name,
            aliases: &[$($alias),*],
            expected: $expected,
            apply: |$p: &mut Policy, $v: &str| -> Option<()> { $body; Some(()) },
        }
    };
}

const VARS: &[Var] =
    &[
        var!(
            "MAX_SNAPSHOT_BYTES",
            [],
            "a byte count such as 1048576, 64KiB, 16MiB or 2GiB (0 = automatic)",
            |p, v| p.max_snapshot_bytes = parse_bytes(v)?
        ),
        var!(
            "DEVICE_TIER_BYTES",
            [],
            "a byte count such as 1048576, 64KiB, 16MiB or 2GiB (0 = automatic)",
            |p, v| p.device_tier_bytes = parse_bytes(v)?
        ),
        var!(
            "PINNED_TIER_BYTES",
            [],
            "a byte count such as 1048576, 64KiB, 16MiB or 2GiB (0 = automatic)",
            |p, v| p.pinned_tier_bytes = parse_bytes(v)?
        ),
        var!(
            "PAGEABLE_TIER_BYTES",
            [],
            "a byte count such as 1048576, 64KiB, 16MiB or 2GiB (0 = automatic)",
            |p, v| p.pageable_tier_bytes = parse_bytes(v)?
        ),
        var!(
            "POOL_KEEP_BYTES",
            [],
            "a byte count such as 1048576, 64KiB, 16MiB or 2GiB",
            |p, v| p.pool_keep_bytes = parse_bytes(v)?
        ),
        var!(
            "POOL_IDLE_RELEASE",
            [],
            "a duration such as 5s, 500ms or 2m, or 0 / off (keep until out of memory)",
            |p, v| p.pool_idle_release = parse_duration_or_off(v)?
        ),
        var!(
            "DECLINE_ON_VMEM",
            [],
            "a boolean (1, 0, true, false, yes, no, on, off)",
            |p, v| p.decline_on_vmem = parse_bool(v)?
        ),
        var!(
            "DECLINE_ON_UNTRACKED",
            ["DECLINE_ON_UNTRACKED_POOL"],
            "a boolean (1, 0, true, false, yes, no, on, off)",
            |p, v| p.decline_on_untracked = parse_bool(v)?
        ),
        var!(
            "WARN_SECONDS",
            [],
            "a non-negative number of seconds",
            |p, v| p.warn_seconds = parse_nonneg_f64(v)?
        ),
        var!("ASSUMED_GBPS", [], "a positive number of GB/s", |p, v| p
            .assumed_gbps =
            parse_pos_f64(v)?),
        var!(
            "DRAIN_TIMEOUT",
            [],
            "a positive duration such as 60, 60s, 500ms or 2m",
            |p, v| p.drain_timeout = parse_duration(v)?
        ),
        var!(
            "PASS_TIMEOUT",
            [],
            "a positive duration such as 60, 60s, 500ms or 2m",
            |p, v| p.pass_timeout = parse_duration(v)?
        ),
        var!(
            "POLL_SLICE",
            [],
            "a positive duration such as 60, 60s, 500ms or 2m",
            |p, v| p.poll_slice = parse_duration(v)?
        ),
        var!(
            "PROGRESS_INTERVAL",
            [],
            "a positive duration such as 60, 60s, 500ms or 2m",
            |p, v| p.progress_interval = parse_duration(v)?
        ),
        var!(
            "MAX_PASSES",
            [],
            "a whole number from 1 to 4294967295",
            |p, v| p.max_passes = parse_u32_min1(v)?
        ),
        var!("SCOPE", [], "auto/all/arguments/predicted", |p, v| p
            .scope =
            Scope::parse(v)?),
        var!("RESTORE", [], "auto/full/dirty", |p, v| p.restore =
            match v.to_ascii_lowercase().as_str() {
                "auto" => RestoreMode::Auto,
                "full" => RestoreMode::Full,
                "dirty" => RestoreMode::Dirty,
                _ => return None,
            }),
        var!(
            "CHUNK_BYTES",
            [],
            "a power-of-two byte count from 4KiB to 1GiB",
            |p, v| p.chunk_bytes = parse_chunk(v)?
        ),
        var!("PREDICT", [], "spill or always", |p, v| p.predict =
            PredictWhen::parse(v)?),
        var!("OUTSIDE_CHECK", [], "every, first or never", |p, v| p
            .outside_check =
            OutsideCheck::parse(v)?),
        var!("CACHE_CONTROL", [], "flush or none", |p, v| p
            .cache_control =
            match v.to_ascii_lowercase().as_str() {
                "flush" => CacheControl::Flush,
                "none" => CacheControl::None,
                _ => return None,
            }),
        var!(
            "KERNEL_INCLUDE",
            [],
            "a comma-separated list of non-empty name patterns",
            |p, v| p.filter.include = parse_patterns(v)?
        ),
        var!(
            "KERNEL_EXCLUDE",
            [],
            "a comma-separated list of non-empty name patterns",
            |p, v| p.filter.exclude = parse_patterns(v)?
        ),
        var!(
            "COMMUNICATION_KERNELS",
            [],
            "none, or a comma-separated list of non-empty name patterns",
            |p, v| p.filter.communication = if v.trim().eq_ignore_ascii_case("none") {
                Vec::new()
            } else {
                parse_patterns(v)?
            }
        ),
        var!(
            "DISPATCH_RANGE",
            [],
            "a dispatch-id range FIRST-LAST (LAST may be empty), FIRST <= LAST",
            |p, v| p.filter.range = Some(DispatchRange::parse(v)?)
        ),
        var!("KERNEL_SKIP", [], "a whole number", |p, v| p.filter.skip =
            v.parse().ok()?),
        var!(
            "KERNEL_COUNT",
            [],
            "a whole number of at least 1",
            |p, v| p.filter.count = Some(parse_u64_min1(v)?)
        ),
        var!(
            "LOG",
            [],
            "off, error, warn, info, debug or trace",
            |p, v| p.log_level = parse_level(v)?
        ),
    ];

impl Policy {
    /// Names of every variable, with the `KREPLAY_` prefix.
    pub fn variable_names() -> impl Iterator<Item = String> {
        VARS.iter().map(|v| format!("{PREFIX}{}", v.name))
    }

    /// The `KREPLAY_` name of a policy variable given by any of its names (`KREPLAY_X`, an
    /// alias, or the bare suffix `X`, any case); `None` for a name that is not a policy
    /// variable.
    pub fn canonical_name(name: &str) -> Option<String> {
        Self::var_named(name).map(|v| format!("{PREFIX}{}", v.name))
    }

    fn var_named(name: &str) -> Option<&'static Var> {
        let upper = name.to_ascii_uppercase();
        let suffix = upper
            .strip_prefix(PREFIX)
            .or_else(|| upper.strip_prefix(ALIAS_PREFIX))
            .unwrap_or(&upper);
        VARS.iter()
            .find(|v| v.name == suffix || v.aliases.contains(&suffix))
    }

    /// Defaults overridden by the process environment; the first malformed variable (a value
    /// that is not valid UTF-8 included) is the error. See [`Policy::env_over`] for the form
    /// that keeps the well-formed values and reports every malformed one.
    pub fn from_env() -> Result<Self, PolicyError> {
        Self::env_over(Self::default()).into_result()
    }

    /// `base` overridden by every well-formed variable of the process environment, with one
    /// error per malformed variable (a value that is not valid UTF-8 included; the environment
    /// is read with [`std::env::var_os`], so such a value is never taken for an unset one).
    pub fn env_over(base: Policy) -> EnvPolicy {
        Self::lookup_over(base, |name| std::env::var_os(name))
    }

    /// Defaults overridden by variables from `lookup` (the environment, or a test's map); the
    /// first malformed variable is the error.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, PolicyError> {
        Self::lookup_over(Self::default(), |name| lookup(name).map(OsString::from)).into_result()
    }

    /// `base` overridden by the variables `lookup` finds, as [`Policy::env_over`] does with the
    /// process environment.
    pub fn lookup_over(base: Policy, lookup: impl Fn(&str) -> Option<OsString>) -> EnvPolicy {
        let mut policy = base;
        let mut errors = Vec::new();
        for var in VARS {
            let ours = format!("{PREFIX}{}", var.name);
            let alias_names = std::iter::once(var.name)
                .chain(var.aliases.iter().copied())
                .map(|n| format!("{ALIAS_PREFIX}{n}"));
            let mut found: Option<(String, OsString)> = lookup(&ours).map(|v| (ours.clone(), v));
            for alias in alias_names {
                if let Some(value) = lookup(&alias) {
                    match &found {
                        Some((name, _)) => {
                            log::warn!(
                                "[kernel-replay] both {name} and {alias} are set; {name} wins"
                            )
                        }
                        None => found = Some((alias, value)),
                    }
                }
            }
            let Some((name, value)) = found else { continue };
            let applied = match value.into_string() {
                Ok(value) => {
                    // Applied to a copy, so a rejected value leaves the field as it was.
                    let mut next = policy.clone();
                    next.set(&name, var, &value).map(|()| next)
                }
                Err(raw) => Err(PolicyError {
                    variable: name,
                    value: raw.to_string_lossy().into_owned(),
                    expected: EXPECTED_UTF8,
                }),
            };
            match applied {
                Ok(next) => policy = next,
                Err(e) => errors.push(e),
            }
        }
        // Each variable is checked as it is parsed; this catches a base that was not valid.
        if let Err(e) = policy.validate() {
            errors.push(e);
        }
        EnvPolicy { policy, errors }
    }

    /// Sets one variable by name (`KREPLAY_X`, an alias, or the bare suffix `X`), as the
    /// API and the command line do.
    pub fn set_var(&mut self, name: &str, value: &str) -> Result<(), PolicyError> {
        let var = Self::var_named(name).ok_or_else(|| PolicyError {
            variable: name.to_owned(),
            value: value.to_owned(),
            expected: "a known policy variable (see Policy::variable_names)",
        })?;
        // Apply to a copy so a rejected value leaves the policy as it was.
        let mut next = self.clone();
        next.set(name, var, value)?;
        next.validate()?;
        *self = next;
        Ok(())
    }

    fn set(&mut self, name: &str, var: &Var, value: &str) -> Result<(), PolicyError> {
        (var.apply)(self, value.trim()).ok_or_else(|| PolicyError {
            variable: name.to_owned(),
            value: value.to_owned(),
            expected: var.expected,
        })
    }

    /// Checks values set through the API; names the field that is wrong.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let bad = |field: &str, value: String, expected| {
            Err(PolicyError {
                variable: field.to_owned(),
                value,
                expected,
            })
        };
        if self.max_passes == 0 {
            return bad("max_passes", "0".into(), "a whole number of at least 1");
        }
        if !(self.assumed_gbps.is_finite() && self.assumed_gbps > 0.0) {
            return bad(
                "assumed_gbps",
                self.assumed_gbps.to_string(),
                "a positive number of GB/s",
            );
        }
        if !(self.warn_seconds.is_finite() && self.warn_seconds >= 0.0) {
            return bad(
                "warn_seconds",
                self.warn_seconds.to_string(),
                "a non-negative number of seconds",
            );
        }
        if parse_chunk(&self.chunk_bytes.to_string()).is_none() {
            return bad(
                "chunk_bytes",
                self.chunk_bytes.to_string(),
                "a power-of-two byte count from 4KiB to 1GiB",
            );
        }
        for (field, d) in [
            ("drain_timeout", self.drain_timeout),
            ("pass_timeout", self.pass_timeout),
            ("poll_slice", self.poll_slice),
            ("progress_interval", self.progress_interval),
        ] {
            if d.is_zero() {
                return bad(field, "0".into(), "a positive duration");
            }
        }
        if let Some(r) = &self.filter.range {
            if r.last.is_some_and(|l| l < r.first) {
                return bad("filter.range", format!("{r:?}"), "FIRST <= LAST");
            }
        }
        if self.filter.count == Some(0) {
            return bad("filter.count", "0".into(), "a whole number of at least 1");
        }
        Ok(())
    }

    /// The snapshot byte bound in force: `max_snapshot_bytes`, or, when 0, `auto`.
    pub fn snapshot_bound(&self, auto: u64) -> u64 {
        if self.max_snapshot_bytes == 0 {
            auto
        } else {
            self.max_snapshot_bytes
        }
    }
}

/// Parses a byte count: digits with an optional K/M/G/T suffix (KiB, KB, k are all 1024-based).
pub fn parse_bytes(v: &str) -> Option<u64> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: u64 = num.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// Parses a boolean.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Parses a positive duration: a number with an optional unit (ns, us, ms, s, m); bare = seconds.
pub fn parse_duration(v: &str) -> Option<Duration> {
    let v = v.trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        "ns" => n / 1e9,
        "m" | "min" => n * 60.0,
        _ => return None,
    };
    if !(secs.is_finite() && secs > 0.0 && secs < 1e9) {
        return None;
    }
    // A positive value below one nanosecond would round to a zero Duration.
    Some(Duration::from_secs_f64(secs)).filter(|d| !d.is_zero())
}

/// [`parse_duration`], or zero for `0`, `off` and `never`.
pub fn parse_duration_or_off(v: &str) -> Option<Duration> {
    match v.trim().to_ascii_lowercase().as_str() {
        "0" | "off" | "never" => Some(Duration::ZERO),
        _ => parse_duration(v),
    }
}

fn parse_nonneg_f64(v: &str) -> Option<f64> {
    v.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0)
}

fn parse_pos_f64(v: &str) -> Option<f64> {
    v.parse::<f64>().ok().filter(|x| x.is_finite() && *x > 0.0)
}

fn parse_u32_min1(v: &str) -> Option<u32> {
    v.parse::<u32>().ok().filter(|x| *x >= 1)
}

fn parse_u64_min1(v: &str) -> Option<u64> {
    v.parse::<u64>().ok().filter(|x| *x >= 1)
}

fn parse_chunk(v: &str) -> Option<u64> {
    parse_bytes(v).filter(|c| c.is_power_of_two() && (4096..=1 << 30).contains(c))
}

fn parse_patterns(v: &str) -> Option<Vec<String>> {
    let pats: Vec<String> = v.split(',').map(|s| s.trim().to_owned()).collect();
    if pats.iter().any(|p| p.is_empty()) {
        return None;
    }
    Some(pats)
}

fn parse_level(v: &str) -> Option<LogLevel> {
    Some(match v.to_ascii_lowercase().as_str() {
        "off" => LogLevel::Off,
        "error" => LogLevel::Error,
        "warn" => LogLevel::Warn,
        "info" => LogLevel::Info,
        "debug" => LogLevel::Debug,
        "trace" => LogLevel::Trace,
        _ => return None,
    })
}
