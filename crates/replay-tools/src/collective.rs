//! Replay time against the collective timeout in force (SPEC §12 "Jobs"): a rank that replays
//! reaches its next collective late, and the other ranks wait for it there; past the
//! collective timeout the job is aborted. `kreplay run` warns before a multi-rank job starts
//! ([`collective_timeout_warning`]); while it runs, each process that replays
//! watches its own replay time ([`ReplayTimeWatch`]) and warns, once, with the numbers when
//! it approaches the timeout.
//!
//! The timeout in force ([`timeout_in_force`]): `KREPLAY_COLLECTIVE_TIMEOUT` (seconds, for a
//! program that passes its own `timeout=` to `init_process_group`, which no variable shows),
//! else the smallest of the variables of [`crate::job::COLLECTIVE_TIMEOUT_VARS`] that hold
//! seconds ([`SECONDS_VARS`]), else PyTorch's default for `init_process_group` with NCCL,
//! 10 minutes.
//!
//! What is measured, honestly: the library does not see collectives (gloo's run on the CPU,
//! and NCCL's kernels are only some of them), so it cannot know how much replay time lies
//! between two of them. It watches two things instead, each against [`WARN_FRACTION`] of the
//! timeout: one dispatch's replay window (a window that long alone delays the next collective
//! by that much), and the process's replay time summed since it started (an upper bound of
//! what any one collective waited for; in a long run whose ranks meet often it overstates
//! the wait, hence one warning, not one per dispatch). Each warns once.

use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;

/// Environment variable: the collective timeout in seconds, over every other source.
pub const TIMEOUT_ENV: &str = "KREPLAY_COLLECTIVE_TIMEOUT";

/// The variables of [`crate::job::COLLECTIVE_TIMEOUT_VARS`] whose value is a timeout in
/// seconds (the others are switches or, `NCCL_IB_TIMEOUT`, an exponent of a network retry).
pub const SECONDS_VARS: &[&str] = &[
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    "NCCL_TIMEOUT",
    "GLOO_TIMEOUT_SECONDS",
];

/// PyTorch's default timeout of `init_process_group` with NCCL.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The share of the timeout a window, or the process's replay time, may reach before the
/// warning.
pub const WARN_FRACTION: f64 = 0.5;

/// The collective timeout in force and what set it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectiveTimeout {
    /// The timeout, seconds.
    pub seconds: f64,
    /// What set it: `VAR=VALUE`, or PyTorch's default.
    pub source: String,
}

fn seconds_of(v: &str) -> Option<f64> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
}

/// The collective timeout in force under `env` (see the module's doc).
pub fn timeout_in_force(env: &dyn Fn(&str) -> Option<String>) -> CollectiveTimeout {
    let set = |v: &str| env(v).and_then(|x| seconds_of(&x).map(|s| (s, format!("{v}={x}"))));
    if let Some((seconds, source)) = set(TIMEOUT_ENV) {
        return CollectiveTimeout { seconds, source };
    }
    SECONDS_VARS
        .iter()
        .filter_map(|v| set(v))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(seconds, source)| CollectiveTimeout { seconds, source })
        .unwrap_or_else(|| CollectiveTimeout {
            seconds: DEFAULT_TIMEOUT.as_secs_f64(),
            source: format!(
                "PyTorch's init_process_group default ({} min; none of {TIMEOUT_ENV}, {} is set)",
                DEFAULT_TIMEOUT.as_secs() / 60,
                SECONDS_VARS.join(", ")
            ),
        })
}

#[derive(Debug, Default, Clone, Serialize)]
struct Seen {
    replay_seconds: f64,
    longest_window_seconds: f64,
    windows: u64,
    warnings: Vec<String>,
    #[serde(skip)]
    warned_window: bool,
    #[serde(skip)]
    warned_total: bool,
}

/// One process's replay time against the collective timeout: fed each window's length
/// ([`Self::observe`]), it says when to warn.
#[derive(Debug)]
pub struct ReplayTimeWatch {
    timeout: CollectiveTimeout,
    why: String,
    seen: Mutex<Seen>,
}

impl ReplayTimeWatch {
    /// A watch against `timeout`; `why` says why the process is one rank of several.
    pub fn new(timeout: CollectiveTimeout, why: impl Into<String>) -> Self {
        Self {
            timeout,
            why: why.into(),
            seen: Mutex::new(Seen::default()),
        }
    }

    /// A watch for this process when `env` makes it one rank of several
    /// ([`crate::job::multi_rank_reason`]); `None` for a single process.
    pub fn for_env(env: &dyn Fn(&str) -> Option<String>) -> Option<Self> {
        let why = crate::job::multi_rank_reason(None, env)?;
        Some(Self::new(timeout_in_force(env), why))
    }

    /// [`Self::for_env`] over the process's environment.
    pub fn from_env() -> Option<Self> {
        Self::for_env(&|v| std::env::var(v).ok())
    }

    /// The timeout it watches against.
    pub fn timeout(&self) -> &CollectiveTimeout {
        &self.timeout
    }

    /// Counts one replay window of `window_seconds` (dispatch `dispatch_id`, kernel `kernel`);
    /// returns the warnings it brings, at most one of each kind in the process's life: the
    /// window alone past [`WARN_FRACTION`] of the timeout, the process's replay time so far
    /// past it.
    pub fn observe(&self, dispatch_id: u64, kernel: &str, window_seconds: f64) -> Vec<String> {
        let window = if window_seconds.is_finite() {
            window_seconds.max(0.0)
        } else {
            0.0
        };
        let limit = self.timeout.seconds * WARN_FRACTION;
        let mut s = self.seen.lock();
        s.windows += 1;
        s.replay_seconds += window;
        s.longest_window_seconds = s.longest_window_seconds.max(window);
        let mut out = Vec::new();
        let timeout = format!(
            "the collective timeout in force is {:.0} s ({})",
            self.timeout.seconds, self.timeout.source
        );
        if !s.warned_window && window >= limit {
            s.warned_window = true;
            out.push(format!(
                "one replay window took {window:.1} s (dispatch {dispatch_id}, {kernel}), {:.0}% of the collective timeout: {timeout}; this rank ({}) reaches its next collective at least that late and the others wait for it there. Raise the timeout, or replay less (--kernel-include, --dispatch-range, --ranks, --passes)",
                100.0 * window / self.timeout.seconds,
                self.why
            ));
        }
        if !s.warned_total && s.replay_seconds >= limit {
            s.warned_total = true;
            out.push(format!(
                "this process has replayed for {:.1} s in {} windows, {:.0}% of the collective timeout: {timeout}. kernel-replay does not see collectives, so this is the replay time since the process started, an upper bound of what one collective waits for; if the ranks meet rarely, the job may be aborted. Raise the timeout, or replay less (--kernel-include, --dispatch-range, --ranks, --passes)",
                s.replay_seconds,
                s.windows,
                100.0 * s.replay_seconds / self.timeout.seconds
            ));
        }
        s.warnings.extend(out.iter().cloned());
        out
    }

    /// What the report says: the timeout, the replay time so far, the longest window and the
    /// warnings given.
    pub fn report(&self) -> serde_json::Value {
        let s = self.seen.lock().clone();
        serde_json::json!({
            "timeout_seconds": self.timeout.seconds,
            "source": self.timeout.source,
            "multi_rank": self.why,
            "warn_fraction": WARN_FRACTION,
            "replay_seconds": s.replay_seconds,
            "longest_window_seconds": s.longest_window_seconds,
            "windows": s.windows,
            "warnings": s.warnings,
        })
    }
}

/// The warning `kreplay run` prints before a multi-rank job starts: ranks that replay run
/// every candidate dispatch `passes` times (a window may wait up to `pass_timeout` per pass),
/// while the others wait for them in their next collective, so a collective timeout may end
/// the job. Names each variable that bounds it, with its value where set, and the timeout in
/// force ([`timeout_in_force`], which each rank's replay time is watched
/// against while it runs). `None` for a single process, or when no rank replays more than once.
pub fn collective_timeout_warning(
    program: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    passes: u64,
    pass_timeout: std::time::Duration,
    ranks: Option<&str>,
) -> Option<String> {
    let why = crate::job::multi_rank_reason(program, env)?;
    if passes < 2 {
        return None;
    }
    let set: Vec<String> = crate::job::COLLECTIVE_TIMEOUT_VARS
        .iter()
        .map(|(v, what)| match env(v) {
            Some(val) => format!("{v}={val} ({what})"),
            None => format!("{v} unset ({what})"),
        })
        .collect();
    let which = match ranks {
        Some(r) => format!("ranks {r} replay, the others do not"),
        None => "every rank replays, each at its own pace".into(),
    };
    let t = timeout_in_force(env);
    Some(format!(
        "this looks like a multi-rank job ({why}); {which}: each candidate dispatch runs {passes} passes (a pass may wait up to {:.0} s), so ranks reach their collectives unevenly and the others wait in them. If that wait exceeds a collective timeout the job is aborted: raise it, or limit replay (--ranks, --kernel-include, --dispatch-range). Timeout in force: {:.0} s ({}); each rank warns when its replay time reaches {:.0}% of it. Bounds: {}",
        pass_timeout.as_secs_f64(),
        t.seconds,
        t.source,
        100.0 * WARN_FRACTION,
        set.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_rank_job_is_warned_about_collective_timeouts_naming_the_variables() {
        let none = |_: &str| None;
        let secs = std::time::Duration::from_secs(60);
        // A single process, or no replay: no warning.
        assert_eq!(
            collective_timeout_warning(Some("python"), &none, 5, secs, None),
            None
        );
        let world1 = |v: &str| (v == "WORLD_SIZE").then(|| "1".to_string());
        assert_eq!(
            collective_timeout_warning(Some("./app"), &world1, 5, secs, None),
            None
        );
        assert_eq!(
            collective_timeout_warning(Some("/usr/bin/torchrun"), &none, 1, secs, None),
            None
        );
        // The launcher by name.
        let w = collective_timeout_warning(Some("/usr/bin/torchrun"), &none, 5, secs, Some("0"))
            .expect("torchrun starts ranks");
        assert!(w.contains("the program is torchrun"), "{w}");
        assert!(w.contains("ranks 0 replay"), "{w}");
        assert!(w.contains("5 passes"), "{w}");
        assert!(w.contains("NCCL_TIMEOUT unset"), "{w}");
        assert!(w.contains("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC unset"), "{w}");
        // A world size from the environment, with a timeout the user set.
        let env = |v: &str| match v {
            "SLURM_NTASKS" => Some("8".to_string()),
            "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC" => Some("60".to_string()),
            _ => None,
        };
        let w = collective_timeout_warning(Some("python"), &env, 38, secs, None).unwrap();
        assert!(w.contains("SLURM_NTASKS=8"), "{w}");
        assert!(w.contains("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=60"), "{w}");
        assert!(w.contains("every rank replays"), "{w}");
        // The timeout in force, as each rank's watch has it.
        assert!(
            w.contains("Timeout in force: 60 s (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=60); each rank warns when its replay time reaches 50%"),
            "{w}"
        );
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |v: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == v)
                .map(|(_, x)| x.to_string())
        }
    }

    #[test]
    fn the_seconds_variables_are_among_those_the_start_warning_names() {
        for v in SECONDS_VARS {
            assert!(
                crate::job::COLLECTIVE_TIMEOUT_VARS
                    .iter()
                    .any(|(n, _)| n == v),
                "{v}"
            );
        }
    }

    #[test]
    fn the_timeout_in_force_is_ours_else_the_smallest_set_else_pytorchs_default() {
        let t = timeout_in_force(&env(&[]));
        assert_eq!(t.seconds, 600.0);
        assert!(
            t.source.contains("init_process_group default (10 min"),
            "{t:?}"
        );
        let t = timeout_in_force(&env(&[
            ("NCCL_TIMEOUT", "1800"),
            ("GLOO_TIMEOUT_SECONDS", "120"),
            ("TORCH_NCCL_BLOCKING_WAIT", "1"),
        ]));
        assert_eq!(
            t,
            CollectiveTimeout {
                seconds: 120.0,
                source: "GLOO_TIMEOUT_SECONDS=120".into()
            }
        );
        // A value that is no positive number is not a bound.
        let t = timeout_in_force(&env(&[
            ("NCCL_TIMEOUT", "soon"),
            ("GLOO_TIMEOUT_SECONDS", "0"),
        ]));
        assert_eq!(t.seconds, 600.0);
        let t = timeout_in_force(&env(&[(TIMEOUT_ENV, "3600"), ("NCCL_TIMEOUT", "60")]));
        assert_eq!(t.source, "KREPLAY_COLLECTIVE_TIMEOUT=3600");
    }

    #[test]
    fn only_a_rank_of_several_is_watched() {
        assert!(ReplayTimeWatch::for_env(&env(&[])).is_none());
        assert!(ReplayTimeWatch::for_env(&env(&[("WORLD_SIZE", "1")])).is_none());
        let w = ReplayTimeWatch::for_env(&env(&[("WORLD_SIZE", "4"), ("NCCL_TIMEOUT", "100")]))
            .expect("a rank of four");
        assert_eq!(w.timeout().seconds, 100.0);
    }

    #[test]
    fn a_long_window_and_a_long_total_each_warn_once_with_the_numbers() {
        let w = ReplayTimeWatch::new(
            CollectiveTimeout {
                seconds: 100.0,
                source: "NCCL_TIMEOUT=100".into(),
            },
            "WORLD_SIZE=2",
        );
        // Below half the timeout: nothing, whatever the count.
        assert!(w.observe(1, "k", 10.0).is_empty());
        assert!(w.observe(2, "k", 30.0).is_empty());
        // The total passes half (10 + 30 + 15 = 55 s): one warning, with the numbers.
        let out = w.observe(3, "k", 15.0);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(
            out[0].contains("replayed for 55.0 s in 3 windows, 55%"),
            "{out:?}"
        );
        assert!(out[0].contains("100 s (NCCL_TIMEOUT=100)"), "{out:?}");
        assert!(w.observe(4, "k", 1.0).is_empty(), "the total warns once");
        // One window of half the timeout: its own warning, once.
        let out = w.observe(5, "gemm", 50.0);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(
            out[0].contains("one replay window took 50.0 s (dispatch 5, gemm), 50%"),
            "{out:?}"
        );
        assert!(out[0].contains("WORLD_SIZE=2"), "{out:?}");
        assert!(
            w.observe(6, "gemm", 99.0).is_empty(),
            "the window warns once"
        );
        let r = w.report();
        assert_eq!(r["windows"], 6);
        assert_eq!(r["longest_window_seconds"], 99.0);
        assert_eq!(r["warnings"].as_array().map(Vec::len), Some(2));
        assert_eq!(r["timeout_seconds"], 100.0);
    }

    #[test]
    fn one_window_past_half_warns_of_both_at_once() {
        let w = ReplayTimeWatch::new(timeout_in_force(&env(&[])), "the program is torchrun");
        let out = w.observe(7, "k", 400.0);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out[0].contains("67% of the collective timeout"), "{out:?}");
        // Nonsense lengths count as nothing.
        assert!(w.observe(8, "k", f64::NAN).is_empty());
        assert_eq!(w.report()["replay_seconds"], 400.0);
    }
}
