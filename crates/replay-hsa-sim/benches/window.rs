//! The HSA backend's cost per replay pass on the simulated HSA runtime, beside the simulator's
//! own dispatch round trip measured in the same run: what `replay-hsa` adds on the CPU (the
//! write interceptor, drains on counting signals, passes with their own signals, asynchronous
//! restore copies through the copy engine, the trailing completion barrier), with a tiny
//! footprint. The simulator's thread hand-offs dominate both figures; on a GPU the round trip
//! is the hardware's (see the H200 section of BENCHMARKS.md for the CUDA backend).
//!
//! `cargo bench -p replay-hsa-sim --bench window`. The closing line prints the ratio.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use replay_core::{Operation, Phase, Policy, ReplayPayload, ReplayService, Subscription, UserData};
use replay_hsa::sys;
use replay_hsa_sim::client::{dispatch, Client};
use replay_hsa_sim::{PoolKind, SimConfig, SimHsa};

const PASSES: u64 = 32;

struct Rig {
    _sim: SimHsa,
    client: Client,
    queue: *mut sys::hsa_queue_t,
    kernel: u64,
    args: *mut u8,
    service: Arc<ReplayService>,
}

fn rig() -> Rig {
    let (sim, client) = replay_hsa_sim::client::loaded(SimConfig::default());
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
    let runs = Arc::new(AtomicU64::new(0));
    let r = runs.clone();
    let kernel = sim.register_kernel("rmw", move |d| {
        let p = d.arg(0)?;
        let v = d.read_u64(p)?;
        d.write_u64(p, v.wrapping_mul(3).wrapping_add(1))?;
        r.fetch_add(1, Ordering::Relaxed);
        Ok(())
    });
    let queue = client.queue(sim.gpu_agents()[0]);
    let buf = client.alloc(sim.pool(0, PoolKind::DeviceCoarse), 4096);
    let args = client.alloc(sim.pool(0, PoolKind::Kernarg), 64);
    // SAFETY: a fresh host-visible simulated allocation of 64 bytes.
    unsafe { args.cast::<u64>().write(buf as u64) };
    Rig {
        _sim: sim,
        client,
        queue,
        kernel,
        args,
        service,
    }
}

impl Rig {
    /// One dispatch, submitted and waited for.
    fn run(&self) {
        let done = self.client.signal(1);
        self.client
            .submit(self.queue, dispatch(self.kernel, self.args, done));
        assert_eq!(self.client.wait_zero(done), 0);
    }
}

fn window(c: &mut Criterion) {
    let rig = rig();
    let mut g = c.benchmark_group("hsa-sim dispatch");
    g.sample_size(20);
    rig.service.stop().unwrap();
    g.bench_function("plain (service inactive)", |b| b.iter(|| rig.run()));
    rig.service.start().unwrap();
    g.bench_function(format!("replayed, {PASSES} passes"), |b| {
        b.iter(|| rig.run())
    });
    g.finish();

    let time = |n: u32| {
        let t = Instant::now();
        for _ in 0..n {
            rig.run();
        }
        t.elapsed().as_secs_f64() / f64::from(n)
    };
    rig.service.stop().unwrap();
    time(20);
    let plain = time(200);
    rig.service.start().unwrap();
    time(5);
    let replayed = time(50);
    rig.service.stop().unwrap();
    let per_pass = replayed / PASSES as f64;
    println!();
    println!(
        "hsa-sim: plain dispatch round trip {:.1} us; replayed dispatch {:.1} us = {:.1} us per pass; added per pass {:.1} us ({:.2}x the round trip)",
        plain * 1e6,
        replayed * 1e6,
        per_pass * 1e6,
        (per_pass - plain) * 1e6,
        per_pass / plain
    );
}

criterion_group!(benches, window);
criterion_main!(benches);
