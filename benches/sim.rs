//! Simulated bios per second of wall time, single thread, on the two paths that matter:
//! merge-heavy (batched sequential 4 KiB writes, QD64, batch 64, nomerges=0: 63 of every 64
//! bios merge in the plug) and random (4 KiB random reads at QD32: every lookup misses).
//! Goal: at least 5 million bios/s on each. `mergetune simulate --bench` prints the same
//! figure without criterion.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mergetune::cli::simulate::bench_scenario;
use mergetune_sim::engine::Simulation;
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim");
    g.sample_size(10);
    for (label, heavy, secs) in [("merge_heavy", true, 2.0), ("random", false, 0.5)] {
        let sc = bench_scenario(heavy, secs);
        let bios = {
            let mut sim = Simulation::new(&sc).unwrap();
            sim.run_to_end();
            sim.total_bios()
        };
        g.throughput(Throughput::Elements(bios));
        g.bench_function(label, |b| {
            b.iter(|| {
                let mut sim = Simulation::new(&sc).unwrap();
                sim.run_to_end();
                black_box(sim.total_bios())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
