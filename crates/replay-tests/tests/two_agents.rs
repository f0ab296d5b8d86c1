//! Two agents replayed at once from two threads (SPEC §6: each agent has its own lock; a window
//! on one never waits for a window on another): both windows are open at the same time, and
//! each agent's memory equals one execution.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use replay_core::{Outcome, Reason};
use replay_tests::{
    assert_outcome, fast_policy, finish, rmw_once, runtime, At, RmwApp, ToolScript, A0, A1, RMW_N,
};

/// Windows that reached their second pass, and how many of them saw the other's.
#[derive(Default)]
struct Meeting {
    arrived: Mutex<Vec<u64>>,
    cv: Condvar,
}

impl Meeting {
    /// Arrives once per dispatch; waits (bounded) until two dispatches have arrived. Returns
    /// whether the other one did while this one waited inside its window.
    fn meet(&self, dispatch: u64) -> bool {
        let mut a = self.arrived.lock();
        if !a.contains(&dispatch) {
            a.push(dispatch);
            self.cv.notify_all();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while a.len() < 2 {
            if self.cv.wait_until(&mut a, deadline).timed_out() {
                return false;
            }
        }
        true
    }
}

#[test]
fn windows_on_two_agents_are_open_at_once_and_both_end_as_one_execution() {
    let rt = runtime(2);
    let meeting = Arc::new(Meeting::default());
    let met = Arc::new(Mutex::new(Vec::<(u64, bool)>::new()));
    let (m, log) = (Arc::clone(&meeting), Arc::clone(&met));
    let replay = ToolScript::passes(3)
        .on(At::PassEnter, move |_, p| {
            if p.current_pass == 1 {
                let id = p.dispatch_info.dispatch_id.0;
                let both = m.meet(id);
                log.lock().push((id, both));
            }
        })
        .install(&rt, fast_policy());
    let apps = [RmwApp::setup_on(&rt, A0), RmwApp::setup_on(&rt, A1)];
    rt.gpu().recorder().clear();
    let recs: Vec<_> = thread::scope(|s| {
        let hs: Vec<_> = apps
            .iter()
            .map(|app| {
                let rt = &rt;
                s.spawn(move || app.run(rt))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (rec, app) in recs.iter().zip(&apps) {
        assert_outcome(rec, Outcome::Replayed, Reason::None);
        assert_eq!(rec.executed_passes, 3);
        assert_eq!(rec.agent, app.agent);
        assert_eq!(
            rt.read_u32s(app.buf, RMW_N).unwrap(),
            rmw_once(&RmwApp::initial()),
            "agent {:?} holds one execution",
            app.agent
        );
        assert_eq!(app.counter_value(&rt), 1);
        let seen = app.seen();
        assert_eq!(seen.len(), 3);
        assert!(
            seen.windows(2).all(|w| w[0] == w[1]),
            "same inputs per pass"
        );
    }
    let met = met.lock().clone();
    assert_eq!(met.len(), 2, "{met:?}");
    assert!(
        met.iter().all(|(_, both)| *both),
        "each window, inside its second pass, saw the other agent's window open: {met:?}"
    );
    assert_eq!(replay.svc.open_windows(), 0);
    finish(&rt);
}
