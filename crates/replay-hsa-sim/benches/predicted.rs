//! Scope `predicted` against `arguments` on the HSA backend over the simulated runtime
//! (issue 18): one pooled allocation, a kernel read-modify-writing 1 MiB of it at its argument
//! pointer, the pointer moving inside the pool between dispatches, `restore=full` (what
//! `auto` resolves to on HSA, whose digests are host digests). Under `arguments` every pass
//! restores the whole pool; under `predicted` every pass digests the rest of the pool on the
//! host (the scope check) and restores the few predicted chunks. The ratio of the two per-pass
//! costs is what `auto` weighs on HSA (see `replay_core::policy`'s module docs).
//!
//! `cargo bench -p replay-hsa-sim --bench predicted` (a plain `main`, a few seconds).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use replay_core::{
    Operation, OutcomeRecord, Phase, Policy, PredictWhen, ReplayPayload, RestoreMode, Scope,
    Subscription, UserData,
};
use replay_hsa_sim::client::dispatch;
use replay_hsa_sim::{PoolKind, SimConfig};

const POOL: usize = 256 << 20;
const WRITE: usize = 1 << 20;
const PASSES: u64 = 8;
const DISPATCHES: usize = 6;

fn main() {
    let (sim, client) = replay_hsa_sim::client::loaded(SimConfig {
        device_pool_bytes: 2 << 30,
        host_pool_bytes: 512 << 20,
        ..SimConfig::default()
    });
    let service = replay_hsa_sim::client::install_service(
        Policy::default(),
        Subscription::CONFIG,
        Arc::new(
            |op: Operation, ph: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData| {
                if (op, ph) == (Operation::Config, Phase::Enter) {
                    p.replay_pass_count = Some(Arc::new(|_, _| PASSES));
                }
            },
        ),
    );
    let records = Arc::new(Mutex::new(Vec::<OutcomeRecord>::new()));
    let sink = records.clone();
    service.set_outcome_sink(Some(Arc::new(move |r: &OutcomeRecord| {
        sink.lock().unwrap().push(r.clone())
    })));
    let kernel = sim.register_kernel("pooled_rmw", |d| {
        let p = d.arg(0)?;
        let mut buf = vec![0u8; WRITE];
        d.read(p, &mut buf)?;
        for b in buf.iter_mut() {
            *b = b.wrapping_mul(3).wrapping_add(1);
        }
        d.write(p, &buf)
    });
    let queue = client.queue(sim.gpu_agents()[0]);
    let pool = client.alloc(sim.pool(0, PoolKind::DeviceCoarse), POOL);
    client.fill(pool, 0x1234_5678, POOL / 4);
    let args = client.alloc(sim.pool(0, PoolKind::Kernarg), 64);
    let run = |at: usize| {
        // SAFETY: a host-visible simulated kernarg allocation of 64 bytes.
        unsafe { args.cast::<u64>().write(pool as u64 + at as u64) };
        let done = client.signal(1);
        client.submit(queue, dispatch(kernel, args, done));
        assert_eq!(client.wait_zero(done), 0);
    };
    println!(
        "hsa-sim: {} MiB pool, {} MiB written per pass, {PASSES} passes, restore full",
        POOL >> 20,
        WRITE >> 20
    );
    let mut per_pass = Vec::new();
    for (label, scope) in [
        ("arguments", Scope::Arguments),
        ("predicted", Scope::Predicted),
    ] {
        service
            .set_policy(Policy {
                scope,
                restore: RestoreMode::Full,
                predict: PredictWhen::Always,
                ..Policy::default()
            })
            .unwrap();
        service.start().unwrap();
        run(1 << 20); // warm-up: pools, the first rule
        records.lock().unwrap().clear();
        let t = Instant::now();
        for i in 0..DISPATCHES {
            run((3 + 17 * i) << 20 | (i * 4096 + 512));
        }
        let secs = t.elapsed().as_secs_f64() / DISPATCHES as f64;
        service.stop().unwrap();
        let recs = records.lock().unwrap().clone();
        let last = recs.last().expect("records");
        let pass = secs / PASSES as f64;
        per_pass.push(pass);
        println!(
            "{label:<10} {:>8.2} ms per dispatch, {:>7.2} ms per pass; captured {:>6.1} MiB, compared {:>7.1} MiB, restored {:>7.1} MiB per dispatch; outcomes {:?}",
            secs * 1e3,
            pass * 1e3,
            last.captured_bytes as f64 / (1 << 20) as f64,
            last.compared_bytes as f64 / (1 << 20) as f64,
            last.restored_bytes as f64 / (1 << 20) as f64,
            recs.iter()
                .map(|r| r.outcome.as_str())
                .collect::<Vec<_>>()
        );
    }
    println!(
        "predicted / arguments per pass: {:.2}x (host digest of the rest of the pool against a full restore of it)",
        per_pass[1] / per_pass[0]
    );
    client.free(pool);
    client.destroy(queue);
}
