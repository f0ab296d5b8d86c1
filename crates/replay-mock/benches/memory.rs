//! Memory cost per pass (SPEC §7.4, §11) on the simulator: 1 GiB tracked in four buffers, one
//! kernel writing 1 MiB contiguous per pass, under `all+full`, `all+dirty` and
//! `arguments+dirty`; and digest throughput beside a plain read of the same bytes, measured in
//! the same run.
//!
//! `cargo bench -p replay-mock --bench memory` (needs about 3 GiB of host memory).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use parking_lot::Mutex;
use replay_core::{
    AgentId, ContextId, Dim3, MemoryClass, NoContextControl, Operation, OutcomeRecord, Phase,
    Policy, ReplayPayload, ReplayService, RestoreMode, Scope, Subscription, UserData,
};
use replay_mock::{AgentConfig, KernArgs, Kernel, SimClock, SimRuntime};

const A: AgentId = AgentId(0);
const BUF: u64 = 256 << 20;
const WRITE: usize = 1 << 20;
const PASSES: u64 = 8;

struct Rig {
    rt: SimRuntime,
    kernel: Kernel,
    args: Vec<u8>,
    records: Arc<Mutex<Vec<OutcomeRecord>>>,
}

fn rig(scope: Scope, restore: RestoreMode) -> Rig {
    let clock = SimClock::real();
    let cfg = AgentConfig {
        device_bytes: 3 << 30,
        pinned_bytes: 2 << 30,
        ..AgentConfig::default()
    };
    let rt = SimRuntime::builder()
        .clock(clock.clone())
        .agent(cfg)
        .build();
    rt.gpu().recorder().set_enabled(false);
    let bufs: Vec<u64> = (0..4)
        .map(|_| rt.alloc(A, BUF, MemoryClass::DEVICE_COARSE).unwrap())
        .collect();
    let policy = Policy {
        scope,
        restore,
        ..Policy::default()
    };
    let svc = Arc::new(ReplayService::new(
        policy,
        clock,
        Arc::new(NoContextControl),
    ));
    svc.configure(
        ContextId(1),
        Subscription::CONFIG,
        Arc::new(
            |op: Operation, ph: Phase, p: &mut ReplayPayload<'_>, _: &mut UserData| {
                if (op, ph) == (Operation::Config, Phase::Enter) {
                    p.replay_pass_count = Some(Arc::new(|_, _| PASSES));
                }
            },
        ),
    )
    .unwrap();
    let records: Arc<Mutex<Vec<OutcomeRecord>>> = Arc::default();
    let sink = records.clone();
    svc.set_outcome_sink(Some(Arc::new(move |r: &OutcomeRecord| {
        sink.lock().push(r.clone())
    })));
    svc.start().unwrap();
    rt.set_service(Some(svc));
    // Read-modify-write of the first MiB of buffer 0.
    let kernel = Kernel::new("rmw_1mib", |ctx| {
        let p = ctx.word(0);
        ctx.update(p, WRITE, |b| {
            for x in b.iter_mut() {
                *x = x.wrapping_add(1);
            }
        })?;
        Ok(())
    });
    let args = KernArgs::new().ptr(bufs[0]).build();
    Rig {
        rt,
        kernel,
        args,
        records,
    }
}

fn dispatch(r: &Rig) {
    let c =
        r.rt.dispatch(r.rt.queue(A, 0), &r.kernel, &r.args, Dim3::new(1024, 1, 1))
            .unwrap();
    c.wait().unwrap();
}

fn modes(c: &mut Criterion) {
    let mut g = c.benchmark_group("1GiB tracked, 1MiB written per pass");
    g.sample_size(10);
    let mut table = Vec::new();
    for (name, scope, restore) in [
        ("all+full", Scope::All, RestoreMode::Full),
        ("all+dirty", Scope::All, RestoreMode::Dirty),
        ("arguments+dirty", Scope::Arguments, RestoreMode::Dirty),
    ] {
        let r = rig(scope, restore);
        dispatch(&r); // pool warm-up
        g.throughput(Throughput::Elements(PASSES));
        g.bench_function(name, |b| b.iter(|| dispatch(&r)));
        let t = Instant::now();
        let n = 5;
        r.records.lock().clear();
        for _ in 0..n {
            dispatch(&r);
        }
        let per_pass = t.elapsed().as_secs_f64() / f64::from(n) / PASSES as f64;
        let rec = r.records.lock().last().cloned().unwrap();
        table.push((name, per_pass, rec));
        r.rt.shutdown();
    }
    g.finish();
    println!();
    println!(
        "1 GiB tracked in 4 buffers, kernel writes 1 MiB contiguous, {PASSES} passes, chunk 1 MiB:"
    );
    println!(
        "  {:<16} {:>12} {:>14} {:>16} {:>16} {:>12}",
        "mode", "ms/pass", "captured MiB", "compared MiB/p", "restored MiB/p", "snap ms"
    );
    for (name, per_pass, r) in table {
        let restores = (r.executed_passes.max(2) - 1) as f64;
        println!(
            "  {:<16} {:>12.3} {:>14.1} {:>16.1} {:>16.2} {:>12.3}",
            name,
            per_pass * 1e3,
            r.captured_bytes as f64 / 1048576.0,
            r.compared_bytes as f64 / restores / 1048576.0,
            r.restored_bytes as f64 / restores / 1048576.0,
            r.snap_seconds * 1e3
        );
    }
}

fn digests(c: &mut Criterion) {
    let data: Vec<u8> = (0..(256usize << 20))
        .map(|i| (i * 31 % 251) as u8)
        .collect();
    let key = replay_core::digest::key_from_seed(7);
    let chunk = 1 << 20;
    let read = |d: &[u8]| -> u64 {
        d.chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
            .fold(0u64, u64::wrapping_add)
    };
    let mut g = c.benchmark_group("digest vs read, 256 MiB");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.sample_size(10);
    g.bench_function("plain read (ceiling)", |b| {
        b.iter(|| black_box(read(&data)))
    });
    g.bench_function("chunk digests (1 MiB)", |b| {
        b.iter(|| {
            for ch in data.chunks(chunk) {
                black_box(replay_core::digest::digest(key, ch));
            }
        })
    });
    g.finish();
    let time = |f: &dyn Fn()| {
        let t = Instant::now();
        for _ in 0..5 {
            f();
        }
        t.elapsed().as_secs_f64() / 5.0
    };
    let r = time(&|| {
        black_box(read(&data));
    });
    let d = time(&|| {
        for ch in data.chunks(chunk) {
            black_box(replay_core::digest::digest(key, ch));
        }
    });
    let gbs = |s: f64| data.len() as f64 / s / 1e9;
    println!();
    println!(
        "digest throughput {:.2} GB/s vs plain read {:.2} GB/s: {:.0}% of the read ceiling (target 85%)",
        gbs(d),
        gbs(r),
        100.0 * r / d
    );
}

criterion_group!(benches, modes, digests);
criterion_main!(benches);
