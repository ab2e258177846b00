//! One tick's work for 8, 64 and 1024 devices: (a) the pure pipeline (parse
//! /proc/diskstats, deltas, windows, policy) and (b) `Daemon::tick` over the in-memory
//! kernel of the tests (the same plus device bookkeeping and the per-device nomerges read-back).
//! Every device is busy in those (each line changes at each tick); (c) `daemon_64_busy` is
//! the daemon's tick on a host of 1024 devices of which 64 are busy and the rest idle (their
//! lines the same at every tick), as on a host whose diskstats lists many partitions,
//! loop and dm devices that see no I/O.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mergetune_daemon::adaptive::Daemon;
use mergetune_kernel::diskstats::parse_diskstats;
use mergetune_logic::config::Config;
use mergetune_logic::policy::{Caps, PolicyState, decide};
use mergetune_logic::sampler::{Delta, Sampler, WindowAcc, WindowClose};
use std::hint::black_box;

#[path = "../tests/support/memkernel.rs"]
mod memkernel;
use memkernel::MemKernel;

fn diskstats_text(n: usize, tick: u64) -> String {
    diskstats_text_busy(n, n, tick)
}

/// `n` devices of which the first `busy` count I/O at each tick; the rest stay as they were
/// at tick 0.
fn diskstats_text_busy(n: usize, busy: usize, tick: u64) -> String {
    let mut s = String::new();
    for i in 0..n {
        let tick = if i < busy { tick } else { 0 };
        let r = 1000 + tick * 997 + i as u64;
        let w = 2000 + tick * 1013 + i as u64;
        s.push_str(&format!(
            "{:>4} {:>7} sd{} {r} {} {} 4000 {w} {} {} 9000 0 3000 13000 10 0 80 1 50 2\n",
            8,
            i * 16,
            i,
            r / 100,
            r * 8,
            w / 50,
            w * 8
        ));
    }
    s
}

fn bench(c: &mut Criterion) {
    let cfg = Config::default();
    let mut g = c.benchmark_group("tick");
    for n in [8usize, 64, 1024] {
        // Monotonic snapshots so every delta is a real delta; the bench cycles through
        // many of them (counters never go backwards within a run of 10,000).
        let texts: Vec<String> = (0..64).map(|t| diskstats_text(n, t)).collect();
        g.bench_with_input(BenchmarkId::new("pure", n), &n, |b, &n| {
            let mut sampler = Sampler::new();
            sampler.observe(&parse_diskstats(&texts[0]).devices);
            let mut states: Vec<PolicyState> =
                (0..n).map(|_| PolicyState::new(0, &cfg.policy)).collect();
            let mut windows = vec![WindowAcc::default(); n];
            let close = WindowClose::fixed(cfg.window_ms(), cfg.daemon.interval_ms / 2);
            let mut i = 1usize;
            let mut now = 0u64;
            b.iter(|| {
                now += 1000;
                let parsed = parse_diskstats(&texts[i % texts.len()]);
                i += 1;
                // Wrap-around in the cycle would look like a reset: restart the sampler then.
                if i.is_multiple_of(texts.len()) {
                    sampler = Sampler::new();
                }
                let set = sampler.observe(&parsed.devices);
                for (k, d) in set.deltas.iter().enumerate() {
                    if let Delta::Counters(c) = d {
                        let w = windows[k].push(c, now, &close);
                        let ev = decide(&states[k], w.as_ref(), Caps::FULL, &cfg.policy, now);
                        states[k] = ev.state;
                    }
                }
                black_box(&states);
            })
        });
        g.bench_with_input(BenchmarkId::new("daemon", n), &n, |b, &n| {
            daemon_ticks(b, &texts, n, &cfg)
        });
    }
    let (n, busy) = (1024usize, 64usize);
    let texts: Vec<String> = (0..64).map(|t| diskstats_text_busy(n, busy, t)).collect();
    g.bench_with_input(BenchmarkId::new("daemon_64_busy", n), &n, |b, &n| {
        daemon_ticks(b, &texts, n, &cfg)
    });
    g.finish();
}

/// `Daemon::tick` over `n` devices whose diskstats cycles through `texts`, one second apart.
fn daemon_ticks(b: &mut criterion::Bencher, texts: &[String], n: usize, cfg: &Config) {
    let mut fs = MemKernel::unsettled(n, texts.iter().map(|t| t.clone().into_bytes()).collect());
    let mut cfg = cfg.clone();
    // No rescans inside the measured ticks: they are a once-in-30-ticks cost.
    cfg.daemon.rescan_every_ticks = u32::MAX;
    let mut d = Daemon::simulated(cfg);
    let mut now = 0u64;
    b.iter(|| {
        now += 1000;
        black_box(d.tick(now, &mut fs));
    })
}

criterion_group!(benches, bench);
criterion_main!(benches);
