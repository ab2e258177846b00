//! `replay` of a recording whose first tick lists many devices: the
//! recording's first tick lists `n` managed devices, the next ticks list nothing new, and
//! the config rescans every other tick, so each rescan compares the known devices with
//! the listed ones. A rescan once scanned the whole list per known device (quadratic:
//! 80,000 devices cost seconds per rescan); the figure per `n` shows whether the time
//! grows with `n` or with its square.
//!
//! `cargo bench --bench replay` (criterion, 10 samples per size).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::record::{self, TickRecord};
use mergetune_logic::config::Config;
use std::collections::BTreeMap;

/// A recording of `ticks` ticks, a second apart, whose first lists `n` devices, each an
/// mq-deadline queue at nomerges 0 (managed).
fn recording(n: usize, ticks: u64) -> Vec<TickRecord> {
    let devices: Vec<String> = (0..n).map(|i| format!("sd{i}")).collect();
    let mut attrs = BTreeMap::new();
    for d in &devices {
        for (rel, v) in [
            ("queue/scheduler", "[mq-deadline] none"),
            ("queue/rotational", "0"),
            ("queue/nomerges", "0"),
            ("queue/iosched/front_merges", "1"),
        ] {
            attrs.insert(format!("{d}/{rel}"), Some(v.to_string()));
        }
    }
    let first = TickRecord {
        t_ms: 0,
        devices: Some(devices),
        attrs,
        ..Default::default()
    };
    std::iter::once(first)
        .chain((1..ticks).map(|i| TickRecord {
            t_ms: i * 1000,
            ..Default::default()
        }))
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut cfg = Config::default();
    cfg.daemon.rescan_every_ticks = 2;
    let mut g = c.benchmark_group("replay_first_tick_lists_n_devices");
    g.sample_size(10);
    for n in [5_000usize, 20_000, 80_000] {
        let rec = recording(n, 4);
        g.bench_with_input(BenchmarkId::from_parameter(n), &rec, |b, rec| {
            b.iter(|| {
                let mut d = Daemon::simulated(cfg.clone());
                record::replay(rec.clone(), &mut d)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
