//! Simulated performance counters (SPEC §3, the PASS callbacks a profiler reads them in):
//! deterministic values computed from what each execution did.
//!
//! Like a real counter block, the simulated one collects **one group per execution**: a tool
//! selects the group for an agent ([`CounterStore::select`], typically in PASS ENTER) and every
//! execution submitted afterwards on that agent collects it. Reading a group that was not
//! collected gives `None`, so a tool that wants all four groups needs four passes. Values:
//!
//! | group | value |
//! |---|---|
//! | 0 [`CounterGroup::WorkItems`] | grid size |
//! | 1 [`CounterGroup::BytesRead`] | bytes the kernel loaded |
//! | 2 [`CounterGroup::BytesWritten`] | bytes it stored |
//! | 3 [`CounterGroup::Instructions`] | memory accesses plus what it counted itself |
//!
//! Results are stored before the execution completes, so in PASS EXIT
//! [`CounterStore::read`] / [`CounterStore::last`] already see the pass. Executions are keyed
//! by dispatch id (the library's reservation, the same for every pass) and pass index
//! (`None` for an ordinary run).

use std::collections::HashMap;

use parking_lot::Mutex;
use replay_core::{AgentId, DispatchId};

/// One counter group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CounterGroup {
    /// Work-items launched.
    WorkItems = 0,
    /// Bytes loaded.
    BytesRead = 1,
    /// Bytes stored.
    BytesWritten = 2,
    /// Modelled instructions.
    Instructions = 3,
}

impl CounterGroup {
    /// Every group, by index.
    pub const ALL: [CounterGroup; 4] = [
        CounterGroup::WorkItems,
        CounterGroup::BytesRead,
        CounterGroup::BytesWritten,
        CounterGroup::Instructions,
    ];

    /// The group with this index.
    pub fn from_index(i: u32) -> Option<Self> {
        Self::ALL.get(i as usize).copied()
    }

    /// Name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WorkItems => "work_items",
            Self::BytesRead => "bytes_read",
            Self::BytesWritten => "bytes_written",
            Self::Instructions => "instructions",
        }
    }
}

/// All four values of one execution (ground truth; a tool sees only the collected group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct CounterValues {
    /// Group 0.
    pub work_items: u64,
    /// Group 1.
    pub bytes_read: u64,
    /// Group 2.
    pub bytes_written: u64,
    /// Group 3.
    pub instructions: u64,
}

impl CounterValues {
    /// The value of a group.
    pub fn get(&self, g: CounterGroup) -> u64 {
        match g {
            CounterGroup::WorkItems => self.work_items,
            CounterGroup::BytesRead => self.bytes_read,
            CounterGroup::BytesWritten => self.bytes_written,
            CounterGroup::Instructions => self.instructions,
        }
    }
}

/// What a tool reads for one execution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CounterSample {
    /// Agent.
    pub agent: AgentId,
    /// Dispatch.
    pub dispatch: DispatchId,
    /// Pass index; `None` for an ordinary run.
    pub pass: Option<u32>,
    /// Group collected; `None` when none was selected.
    pub group: Option<CounterGroup>,
    /// Its value (0 when none was collected).
    pub value: u64,
    /// Modelled GPU time of the execution.
    pub gpu_seconds: f64,
}

#[derive(Debug, Clone, Copy)]
struct Run {
    agent: AgentId,
    pass: Option<u32>,
    group: Option<CounterGroup>,
    values: CounterValues,
    gpu_seconds: f64,
}

/// Runs kept per dispatch id (older ones are dropped).
const KEEP_RUNS: usize = 4096;

/// Counter selection and results of a device.
#[derive(Debug, Default)]
pub struct CounterStore {
    selected: Mutex<HashMap<AgentId, CounterGroup>>,
    runs: Mutex<HashMap<DispatchId, Vec<Run>>>,
}

impl CounterStore {
    /// Selects the group executions on `agent` collect from now on (`None`: collect nothing).
    pub fn select(&self, agent: AgentId, group: Option<CounterGroup>) {
        let mut s = self.selected.lock();
        match group {
            Some(g) => {
                s.insert(agent, g);
            }
            None => {
                s.remove(&agent);
            }
        }
    }

    /// The group selected on `agent`.
    pub fn selected(&self, agent: AgentId) -> Option<CounterGroup> {
        self.selected.lock().get(&agent).copied()
    }

    pub(crate) fn record(
        &self,
        agent: AgentId,
        dispatch: DispatchId,
        pass: Option<u32>,
        group: Option<CounterGroup>,
        values: CounterValues,
        gpu_seconds: f64,
    ) {
        let mut runs = self.runs.lock();
        let v = runs.entry(dispatch).or_default();
        if v.len() >= KEEP_RUNS {
            v.remove(0);
        }
        v.push(Run {
            agent,
            pass,
            group,
            values,
            gpu_seconds,
        });
    }

    fn sample(dispatch: DispatchId, r: &Run) -> CounterSample {
        CounterSample {
            agent: r.agent,
            dispatch,
            pass: r.pass,
            group: r.group,
            value: r.group.map(|g| r.values.get(g)).unwrap_or(0),
            gpu_seconds: r.gpu_seconds,
        }
    }

    /// What the tool collected in pass `pass` of `dispatch` (the latest such execution).
    pub fn read(&self, dispatch: DispatchId, pass: u32) -> Option<CounterSample> {
        let runs = self.runs.lock();
        runs.get(&dispatch)?
            .iter()
            .rev()
            .find(|r| r.pass == Some(pass))
            .map(|r| Self::sample(dispatch, r))
    }

    /// What the last completed execution of `dispatch` (a pass or the ordinary run) collected.
    pub fn last(&self, dispatch: DispatchId) -> Option<CounterSample> {
        let runs = self.runs.lock();
        runs.get(&dispatch)?
            .last()
            .map(|r| Self::sample(dispatch, r))
    }

    /// The value of `group` from the last completed execution of `dispatch`, if that
    /// execution collected it.
    pub fn read_last(&self, dispatch: DispatchId, group: CounterGroup) -> Option<u64> {
        self.last(dispatch)
            .filter(|s| s.group == Some(group))
            .map(|s| s.value)
    }

    /// Ground truth: all four values of an execution (`pass: None` for the ordinary run).
    pub fn values(&self, dispatch: DispatchId, pass: Option<u32>) -> Option<CounterValues> {
        let runs = self.runs.lock();
        runs.get(&dispatch)?
            .iter()
            .rev()
            .find(|r| r.pass == pass)
            .map(|r| r.values)
    }

    /// Number of executions recorded for `dispatch`.
    pub fn executions(&self, dispatch: DispatchId) -> usize {
        self.runs.lock().get(&dispatch).map(Vec::len).unwrap_or(0)
    }
}
