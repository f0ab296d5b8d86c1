//! The reports of several processes as one (SPEC §12 "Jobs": merged with process and rank
//! columns): what `kreplay run` writes when the processes of a job share an output.
//!
//! Every dispatch keeps its values and gets its [`DispatchOrigin`]: the process it ran in,
//! that process's rank, and its dispatch id there. Dispatch ids are unique in a process only,
//! so a merge of several reports numbers the dispatches again from 1, process after process in
//! the order given (the origin keeps each one's own id, and the samples follow their
//! dispatch); a merge of one report keeps its ids. The metrics are the union, in the order
//! first seen; the device, chip and clocks are the first report's; `process_id`,
//! `process_name` and `host_name` are the one process's, or for several `0` and the distinct
//! names joined by `, ` (each dispatch's origin names its own).

use std::collections::BTreeMap;

use crate::error::InconsistentReport;
use crate::report::{CounterReport, DispatchOrigin};

impl CounterReport {
    /// `parts` (each process's report with its rank) as one report (see the module's doc).
    /// Each part is checked first ([`CounterReport::check`]); an inconsistent one is an error
    /// naming its process. A dispatch that already has an origin (a merged report merged
    /// again) keeps it.
    pub fn merge(
        parts: Vec<(CounterReport, Option<u32>)>,
    ) -> Result<CounterReport, InconsistentReport> {
        for (r, _) in &parts {
            r.check()
                .map_err(|e| InconsistentReport(format!("process {}: {}", r.process_id, e.0)))?;
        }
        let renumber = parts.len() > 1;
        let mut out = match parts.first() {
            Some((first, _)) => CounterReport {
                dispatches: Vec::new(),
                samples: Vec::new(),
                metrics: Vec::new(),
                ..first.clone()
            },
            None => return Ok(CounterReport::default()),
        };
        let distinct = |f: &dyn Fn(&CounterReport) -> &str| {
            let mut v: Vec<&str> = Vec::new();
            for (r, _) in &parts {
                let x = f(r);
                if !x.is_empty() && !v.contains(&x) {
                    v.push(x);
                }
            }
            v.join(", ")
        };
        if renumber {
            out.process_id = 0;
            out.process_name = distinct(&|r| r.process_name.as_str());
            out.host_name = distinct(&|r| r.host_name.as_str());
        }
        let mut next = 1u64;
        for (r, rank) in parts {
            out.passes = out.passes.max(r.passes);
            for m in r.metrics {
                if out.metric(&m.name).is_none() {
                    out.metrics.push(m);
                }
            }
            let mut ids: BTreeMap<u64, u64> = BTreeMap::new();
            for mut d in r.dispatches {
                let own = d.dispatch_id;
                if renumber {
                    d.dispatch_id = next;
                    next += 1;
                }
                ids.insert(own, d.dispatch_id);
                d.origin.get_or_insert(DispatchOrigin {
                    process: r.process_id,
                    rank,
                    dispatch_id: own,
                });
                out.dispatches.push(d);
            }
            for mut s in r.samples {
                // Checked above: every sample names a listed dispatch.
                if let Some(id) = ids.get(&s.dispatch_id) {
                    s.dispatch_id = *id;
                    out.samples.push(s);
                }
            }
        }
        Ok(out)
    }

    /// Whether the report was merged from processes (some dispatch has an origin): the
    /// writers then add their process and rank columns.
    pub fn is_merged(&self) -> bool {
        self.dispatches.iter().any(|d| d.origin.is_some())
    }

    /// The processes a merged report holds, in the order their dispatches come: `(process,
    /// rank)`; empty for one process's own report.
    pub fn origins(&self) -> Vec<(u32, Option<u32>)> {
        let mut v: Vec<(u32, Option<u32>)> = Vec::new();
        for o in self.dispatches.iter().filter_map(|d| d.origin) {
            if !v.iter().any(|(p, _)| *p == o.process) {
                v.push((o.process, o.rank));
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use crate::report::{CounterDispatch, CounterReport, CounterSample, MetricInfo};

    fn part(pid: u32, ids: &[u64], value: f64) -> CounterReport {
        CounterReport {
            process_id: pid,
            process_name: "train".into(),
            host_name: "node1".into(),
            passes: 2,
            metrics: vec![MetricInfo {
                name: "m".into(),
                unit: String::new(),
                description: String::new(),
                pass: 0,
            }],
            dispatches: ids
                .iter()
                .map(|&id| CounterDispatch {
                    dispatch_id: id,
                    kernel: "k".into(),
                    ..CounterDispatch::default()
                })
                .collect(),
            samples: ids
                .iter()
                .map(|&id| CounterSample {
                    dispatch_id: id,
                    pass: 0,
                    metric: "m".into(),
                    value: value + id as f64,
                })
                .collect(),
            ..CounterReport::default()
        }
    }

    #[test]
    fn two_processes_merge_with_their_ranks_and_ids_made_unique() {
        let m = CounterReport::merge(vec![
            (part(100, &[3, 5], 10.0), Some(0)),
            (part(200, &[3], 20.0), Some(1)),
        ])
        .unwrap();
        assert_eq!(m.check(), Ok(()));
        let ids: Vec<u64> = m.dispatches.iter().map(|d| d.dispatch_id).collect();
        assert_eq!(ids, [1, 2, 3]);
        let o: Vec<_> = m
            .dispatches
            .iter()
            .map(|d| d.origin.map(|o| (o.process, o.rank, o.dispatch_id)))
            .collect();
        assert_eq!(
            o,
            [
                Some((100, Some(0), 3)),
                Some((100, Some(0), 5)),
                Some((200, Some(1), 3))
            ]
        );
        // Each value follows its dispatch.
        assert_eq!(m.value(1, "m").map(|s| s.value), Some(13.0));
        assert_eq!(m.value(3, "m").map(|s| s.value), Some(23.0));
        assert_eq!(m.metrics.len(), 1);
        assert_eq!((m.process_id, m.process_name.as_str()), (0, "train"));
        assert!(m.is_merged());
        assert_eq!(m.origins(), [(100, Some(0)), (200, Some(1))]);
        // Merged again, the origins stay.
        let again = CounterReport::merge(vec![(m.clone(), None)]).unwrap();
        assert_eq!(again.dispatches, m.dispatches);
    }

    #[test]
    fn one_process_keeps_its_ids_and_gets_its_origin() {
        let m = CounterReport::merge(vec![(part(7, &[4, 9], 0.0), None)]).unwrap();
        assert_eq!(m.dispatches[1].dispatch_id, 9);
        assert_eq!(m.process_id, 7);
        assert_eq!(m.origins(), [(7, None)]);
        assert!(!part(7, &[1], 0.0).is_merged());
        assert_eq!(
            CounterReport::merge(Vec::new()).unwrap(),
            CounterReport::default()
        );
    }

    #[test]
    fn an_inconsistent_part_is_named_by_its_process() {
        let mut bad = part(300, &[1], 0.0);
        bad.samples[0].dispatch_id = 2;
        let e = CounterReport::merge(vec![(part(1, &[1], 0.0), None), (bad, Some(3))]).unwrap_err();
        assert!(e.0.starts_with("process 300: "), "{e}");
    }
}
