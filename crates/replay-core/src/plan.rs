//! The pass plan (SPEC §4).
//!
//! | pass count | continue | behaviour |
//! |---|---|---|
//! | none, or 1 | any | no replay |
//! | N ≥ 2 | none | exactly N passes |
//! | N ≥ 2 | set | at most N; asked after passes 0..N-2, 0 stops; not asked after the last |
//! | 0 | set | open-ended: asked after every pass; `total_passes` is 0 |
//! | 0 | none | warn once, no replay |
//!
//! `max_passes` bounds both: a fixed N is clamped at plan time; an open-ended loop that reaches
//! it stops with `truncated` / `pass_limit`.

/// What the tool's answers amount to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassPlan {
    /// One ordinary execution, no snapshot, no PASS.
    NoReplay {
        /// The tool returned 0 without a continue callback (warned once).
        zero_without_continue: bool,
    },
    /// At most `total` passes.
    Fixed {
        /// What the tool asked for.
        requested: u64,
        /// After clamping to `max_passes`.
        total: u32,
        /// A continue callback is installed.
        asks_continue: bool,
    },
    /// Until the continue callback returns 0, bounded by `limit`.
    OpenEnded {
        /// `max_passes`.
        limit: u32,
    },
}

/// What follows a completed pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Restore, then run the next pass.
    Next,
    /// The plan is complete (all N passes, or the tool returned 0).
    Done,
    /// An open-ended loop reached `max_passes`.
    PassLimit,
}

impl PassPlan {
    /// Plans from the pass-count callback's answer (`None` when none is installed).
    pub fn new(pass_count: Option<u64>, has_continue: bool, max_passes: u32) -> Self {
        let max_passes = max_passes.max(1);
        match pass_count {
            None | Some(1) => Self::NoReplay {
                zero_without_continue: false,
            },
            Some(0) if has_continue => Self::OpenEnded { limit: max_passes },
            Some(0) => Self::NoReplay {
                zero_without_continue: true,
            },
            Some(n) => Self::Fixed {
                requested: n,
                total: u32::try_from(n).unwrap_or(u32::MAX).min(max_passes),
                asks_continue: has_continue,
            },
        }
    }

    /// Whether passes run at all.
    pub fn replays(&self) -> bool {
        !matches!(self, Self::NoReplay { .. })
    }

    /// `requested_passes` of the outcome record (0 for open-ended or none).
    pub fn requested(&self) -> u64 {
        match self {
            Self::Fixed { requested, .. } => *requested,
            _ => 0,
        }
    }

    /// `total_passes` of the payload: N after clamping, 0 for open-ended.
    pub fn total_passes(&self) -> u32 {
        match self {
            Self::Fixed { total, .. } => *total,
            _ => 0,
        }
    }

    /// Whether the continue callback is asked after `pass` (0-based).
    pub fn asks_continue_after(&self, pass: u32) -> bool {
        match *self {
            Self::NoReplay { .. } => false,
            Self::Fixed {
                total,
                asks_continue,
                ..
            } => asks_continue && pass + 1 < total,
            Self::OpenEnded { .. } => true,
        }
    }

    /// The step after `pass` completed; `answer` is the continue callback's decision when it
    /// was asked (`Some(true)` = go on), `None` when it was not.
    pub fn after_pass(&self, pass: u32, answer: Option<bool>) -> Step {
        match *self {
            Self::NoReplay { .. } => Step::Done,
            Self::Fixed { total, .. } => {
                if pass + 1 >= total || answer == Some(false) {
                    Step::Done
                } else {
                    Step::Next
                }
            }
            Self::OpenEnded { limit } => match answer {
                Some(true) if pass + 1 >= limit => Step::PassLimit,
                Some(true) => Step::Next,
                _ => Step::Done,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs a plan against a scripted continue callback; returns (passes, asked-after list, step).
    fn simulate(plan: PassPlan, answers: &[bool]) -> (u32, Vec<u32>, Step) {
        let mut asked = Vec::new();
        let mut pass = 0;
        loop {
            let answer = if plan.asks_continue_after(pass) {
                asked.push(pass);
                Some(answers.get(asked.len() - 1).copied().unwrap_or(true))
            } else {
                None
            };
            match plan.after_pass(pass, answer) {
                Step::Next => pass += 1,
                s => return (pass + 1, asked, s),
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn none_or_one_never_replays(has_cont in any::<bool>(), max in 1u32..2000) {
            prop_assert!(!PassPlan::new(None, has_cont, max).replays());
            prop_assert!(!PassPlan::new(Some(1), has_cont, max).replays());
        }

        #[test]
        fn fixed_without_continue_runs_exactly_n(n in 2u64..5000, max in 1u32..2000) {
            let plan = PassPlan::new(Some(n), false, max);
            let expect = n.min(u64::from(max)) as u32;
            prop_assert_eq!(plan.total_passes(), expect);
            prop_assert_eq!(plan.requested(), n);
            let (passes, asked, step) = simulate(plan, &[]);
            prop_assert_eq!(passes, expect);
            prop_assert!(asked.is_empty());
            prop_assert_eq!(step, Step::Done);
        }

        #[test]
        fn fixed_with_continue_asks_before_last_only(n in 2u64..300, stop_at in proptest::option::of(0usize..300)) {
            let plan = PassPlan::new(Some(n), true, 1024);
            let answers: Vec<bool> = (0..300).map(|i| Some(i) != stop_at).collect();
            let (passes, asked, step) = simulate(plan, &answers);
            prop_assert_eq!(step, Step::Done);
            let expect = match stop_at { Some(s) if (s as u64) < n - 1 => s as u32 + 1, _ => n as u32 };
            prop_assert_eq!(passes, expect);
            // Asked after every pass but the last executed one, and never after pass N-1.
            let want: Vec<u32> = (0..passes.min(n as u32 - 1)).collect();
            prop_assert_eq!(asked, want);
        }

        #[test]
        fn open_ended_is_bounded(stop_at in proptest::option::of(0usize..3000), max in 1u32..2000) {
            let plan = PassPlan::new(Some(0), true, max);
            prop_assert_eq!(plan.total_passes(), 0);
            let answers: Vec<bool> = (0..3000).map(|i| Some(i) != stop_at).collect();
            let (passes, asked, step) = simulate(plan, &answers);
            prop_assert_eq!(asked.len() as u32, passes, "asked after every pass");
            match stop_at {
                Some(s) if (s as u32) < max => {
                    prop_assert_eq!(passes, s as u32 + 1);
                    prop_assert_eq!(step, Step::Done);
                }
                _ => {
                    prop_assert_eq!(passes, max);
                    prop_assert_eq!(step, Step::PassLimit);
                }
            }
        }
    }

    #[test]
    fn zero_without_continue_is_flagged() {
        assert_eq!(
            PassPlan::new(Some(0), false, 8),
            PassPlan::NoReplay {
                zero_without_continue: true
            }
        );
    }

    #[test]
    fn huge_counts_clamp() {
        let plan = PassPlan::new(Some(1 << 63), false, 1024);
        assert_eq!(plan.total_passes(), 1024);
        assert_eq!(plan.requested(), 1 << 63);
    }
}
