//! The kernel filter (SPEC §3): which dispatches are replay candidates at all, as profilers'
//! `-k` (name), `-s` (skip) and `-c` (count) options do.
//!
//! Patterns: a pattern with `*` or `?` is a glob over the whole kernel name; a pattern without
//! wildcards matches when it occurs anywhere in the name. Exclusion wins over inclusion; an
//! empty include list admits every name.
//!
//! Communication kernels (SPEC §9.2: NCCL, RCCL, NVSHMEM, ROCSHMEM, kernels that wait on other
//! processes or on the host, such as XLA's autotuning `DelayKernel`, which spins on a host flag
//! while the host enqueues the launches it times) would spin in every pass after the first, on
//! peers that do not repeat their side:
//! the filter's `communication` list names them (matched ignoring case, default
//! [`DEFAULT_COMMUNICATION`]), and a dispatch it names is never a candidate: it runs once, under
//! the agent's gate, counted apart ([`crate::ReplayService::communication_runs`]). An empty
//! list replays them like any kernel (a pass that then does not complete in time truncates).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::types::DispatchInfo;

/// A range of dispatch ids, inclusive; `last = None` is open-ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchRange {
    /// First id admitted.
    pub first: u64,
    /// Last id admitted.
    pub last: Option<u64>,
}

impl DispatchRange {
    /// Parses `FIRST-LAST`, `FIRST-` or a single id.
    pub fn parse(v: &str) -> Option<Self> {
        let (first, last) = match v.split_once('-') {
            Some((a, "")) => (a.trim().parse().ok()?, None),
            Some((a, b)) => (a.trim().parse().ok()?, Some(b.trim().parse().ok()?)),
            None => {
                let id = v.trim().parse().ok()?;
                (id, Some(id))
            }
        };
        if last.is_some_and(|l| l < first) {
            return None;
        }
        Some(Self { first, last })
    }

    /// Whether `id` lies inside.
    pub fn contains(&self, id: u64) -> bool {
        id >= self.first && self.last.is_none_or(|l| id <= l)
    }
}

/// The kernels excluded by default: the communication libraries' (name substrings) and XLA's
/// `stream_executor::gpu::DelayKernel` (a glob that matches it mangled or demangled), which
/// waits on a host flag.
pub const DEFAULT_COMMUNICATION: [&str; 5] = [
    "nccl",
    "rccl",
    "nvshmem",
    "rocshmem",
    "*stream_executor*DelayKernel*",
];

fn default_communication() -> Vec<String> {
    DEFAULT_COMMUNICATION
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

/// Which dispatches are candidates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelFilter {
    /// Name patterns to admit (empty = all).
    pub include: Vec<String>,
    /// Name patterns to refuse.
    pub exclude: Vec<String>,
    /// Dispatch ids to consider.
    pub range: Option<DispatchRange>,
    /// Matching dispatches to skip before the first candidate.
    pub skip: u64,
    /// Most candidates to admit.
    pub count: Option<u64>,
    /// Name patterns of communication kernels, matched ignoring case: never candidates, run
    /// once (empty = none excluded).
    #[serde(default = "default_communication")]
    pub communication: Vec<String>,
}

impl Default for KernelFilter {
    fn default() -> Self {
        Self {
            include: Vec::new(),
            exclude: Vec::new(),
            range: None,
            skip: 0,
            count: None,
            communication: default_communication(),
        }
    }
}

/// Running counts for `skip` and `count`, kept by the service.
#[derive(Debug, Default)]
pub struct FilterState {
    matched: AtomicU64,
}

impl KernelFilter {
    /// Whether the name and id match (without `skip`/`count`).
    pub fn matches(&self, info: &DispatchInfo) -> bool {
        let name = &*info.kernel_name;
        if self.range.is_some_and(|r| !r.contains(info.dispatch_id.0)) {
            return false;
        }
        if self.exclude.iter().any(|p| pattern_matches(p, name)) {
            return false;
        }
        self.include.is_empty() || self.include.iter().any(|p| pattern_matches(p, name))
    }

    /// Whether `name` is a communication kernel's (the `communication` list, ignoring case).
    pub fn is_communication(&self, name: &str) -> bool {
        if self.communication.is_empty() {
            return false;
        }
        // Asked on every dispatch: compared in place, nothing allocated.
        self.communication
            .iter()
            .any(|p| matches_with(p.as_bytes(), name.as_bytes(), u8::eq_ignore_ascii_case))
    }

    /// Whether the dispatch is a candidate; counts it against `skip` and `count`.
    pub fn admit(&self, info: &DispatchInfo, state: &FilterState) -> bool {
        if !self.matches(info) {
            return false;
        }
        if self.skip == 0 && self.count.is_none() {
            return true;
        }
        let index = state.matched.fetch_add(1, Ordering::Relaxed);
        index >= self.skip && self.count.is_none_or(|c| index - self.skip < c)
    }
}

/// Glob (`*`, `?`) over the whole name when the pattern has wildcards; substring otherwise.
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return name.contains(pattern);
    }
    glob(pattern.as_bytes(), name.as_bytes(), |a, b| a == b)
}

/// [`pattern_matches`] with bytes compared by `eq`.
fn matches_with(p: &[u8], s: &[u8], eq: impl Fn(&u8, &u8) -> bool + Copy) -> bool {
    if !p.iter().any(|&c| c == b'*' || c == b'?') {
        return p.is_empty()
            || s.windows(p.len())
                .any(|w| w.iter().zip(p).all(|(a, b)| eq(a, b)));
    }
    glob(p, s, eq)
}

fn glob(p: &[u8], s: &[u8], eq: impl Fn(&u8, &u8) -> bool) -> bool {
    // Iterative matcher with one backtrack point: linear in practice, no recursion.
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || eq(&p[pi], &s[si])) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::*;

    fn info(name: &str, id: u64) -> DispatchInfo {
        DispatchInfo::new(
            AgentId(0),
            QueueId(0),
            KernelId(1),
            name,
            Dim3::new(1, 1, 1),
            Dim3::new(1, 1, 1),
        )
        .with_dispatch_id(DispatchId(id))
    }

    #[test]
    fn substring_and_glob() {
        assert!(pattern_matches("gemm", "void ampere_gemm_kernel<float>"));
        assert!(!pattern_matches("gemm", "softmax"));
        assert!(pattern_matches("*gemm*", "xgemmy"));
        assert!(!pattern_matches("gemm*", "xgemm"));
        assert!(pattern_matches("k?rnel", "kernel"));
        assert!(pattern_matches("*", ""));
        assert!(!pattern_matches("?", ""));
    }

    #[test]
    fn exclude_wins_and_range_applies() {
        let f = KernelFilter {
            include: vec!["gemm".into()],
            exclude: vec!["*slow*".into()],
            range: Some(DispatchRange::parse("10-20").unwrap()),
            ..Default::default()
        };
        assert!(f.matches(&info("gemm_fast", 10)));
        assert!(!f.matches(&info("gemm_slow", 12)));
        assert!(!f.matches(&info("gemm_fast", 21)));
        assert!(!f.matches(&info("conv", 15)));
    }

    #[test]
    fn communication_kernels_are_named_by_the_list_ignoring_case() {
        let f = KernelFilter::default();
        for n in [
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            "_Z21ncclKernel_SendRecv_PvS_",
            "nvshmemi_barrier_all_kernel",
            "rocshmem_wg_barrier",
            "RCCL_AllGather",
            // XLA's autotuning delay kernel waits on a host flag: demangled and mangled.
            "stream_executor::gpu::(anonymous namespace)::DelayKernel(unsigned int volatile*, unsigned int)",
            "stream_executor::gpu::<unnamed>::DelayKernel",
            "_ZN15stream_executor3gpu12_GLOBAL__N_111DelayKernelEPVjj",
        ] {
            assert!(f.is_communication(n), "{n}");
        }
        assert!(!f.is_communication("gemm_f32"));
        assert!(!f.is_communication("my_DelayKernel"), "XLA's alone");
        let none = KernelFilter {
            communication: Vec::new(),
            ..Default::default()
        };
        assert!(!none.is_communication("ncclDevKernel_AllReduce"));
        let own = KernelFilter {
            communication: vec!["*_AllReduce_*".into()],
            ..Default::default()
        };
        assert!(
            own.is_communication("my_allreduce_ring"),
            "glob ignores case"
        );
        assert!(!own.is_communication("ncclDevKernel_Broadcast"));
        // A filter written before the list existed reads back with the default list.
        let old: KernelFilter = serde_json::from_str(
            r#"{"include":[],"exclude":[],"range":null,"skip":0,"count":null}"#,
        )
        .unwrap();
        assert_eq!(old.communication, KernelFilter::default().communication);
    }

    #[test]
    fn skip_and_count() {
        let f = KernelFilter {
            skip: 2,
            count: Some(3),
            ..Default::default()
        };
        let st = FilterState::default();
        let admitted: Vec<bool> = (0..8).map(|i| f.admit(&info("k", i), &st)).collect();
        assert_eq!(
            admitted,
            [false, false, true, true, true, false, false, false]
        );
    }

    #[test]
    fn range_parse() {
        assert_eq!(
            DispatchRange::parse("5-"),
            Some(DispatchRange {
                first: 5,
                last: None
            })
        );
        assert_eq!(
            DispatchRange::parse("7"),
            Some(DispatchRange {
                first: 7,
                last: Some(7)
            })
        );
        assert_eq!(DispatchRange::parse("9-3"), None);
        assert_eq!(DispatchRange::parse("x"), None);
    }
}
