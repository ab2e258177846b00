//! Scheduler slices on the simulator: where reads starve behind writes (an HDD with a
//! shallow tag queue, mq-deadline), the tuner takes a step, keeps it because the reads gain
//! more than the writes lose, and undoes it when the mix ends; on an SSD's fast mixed load
//! it never moves. Figures in docs/evaluation.md ("Scheduler slices").

use mergetune_kernel::tunable::Tunable;
use mergetune_lab::compare::suite_scenario;
use mergetune_logic::config::Config;
use mergetune_logic::decision::Decision;
use mergetune_sim::engine::Simulation;
use mergetune_sim::report::{DeviceReport, Report};
use mergetune_sim::runner::{Policy, run_scenario};
use mergetune_sim::scenario::Scenario;
use std::path::Path;

fn run(sc: &Scenario, cfg: Config) -> Report {
    let mut sim = Simulation::new(sc).unwrap();
    let mut controller = Policy::Adaptive.controller(cfg);
    run_scenario(&mut sim, controller.as_mut(), "adaptive", &mut |_, _| {})
}

/// The decisions that wrote scheduler slice tunables.
fn slice_decisions(r: &Report) -> Vec<&Decision> {
    r.decisions
        .iter()
        .filter(|d| d.changes.iter().any(|c| !c.tunable.is_ladder()))
        .collect()
}

fn dev(r: &Report, phase: usize) -> &DeviceReport {
    &r.phases[phase].devices[0]
}

#[test]
fn starving_reads_on_an_hdd_get_a_step_that_pays_and_it_is_undone_after() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/scenarios/slices_hdd_readers_writer.toml");
    let sc = Scenario::load_file(&path).unwrap();
    // The slice tuner is opt-in: off by default, turned on here.
    let off = Config::default();
    assert!(!off.slices.enabled, "off by default");
    let without = run(&sc, off.clone());
    let mut on = off;
    on.slices.enabled = true;
    let with = run(&sc, on);

    let slice_decisions = slice_decisions(&with);
    let kinds: Vec<(&str, &str, &str)> = slice_decisions
        .iter()
        .map(|d| {
            (
                d.kind.as_str(),
                d.changes[0].from.as_str(),
                d.changes[0].to.as_str(),
            )
        })
        .collect();
    // One step while the mix lasts (kept: no undo), undone once the writer stops.
    assert_eq!(
        kinds,
        vec![("favour_reads", "2", "3"), ("relax", "3", "2")],
        "{slice_decisions:#?}"
    );
    assert!(slice_decisions[1].at_ms >= 120_000);
    assert!(
        without
            .decisions
            .iter()
            .all(|d| d.change_of(Tunable::WritesStarved).is_none())
    );

    let (r0, r1) = (&dev(&without, 0).read, &dev(&with, 0).read);
    let (w0, w1) = (&dev(&without, 0).write, &dev(&with, 0).write);
    let read_gain = 1.0 - r1.lat_mean_us / r0.lat_mean_us;
    let write_loss = 1.0 - w1.mb_per_s / w0.mb_per_s;
    eprintln!(
        "reads {:.1} -> {:.1} ms mean ({:+.0}%), p99 {:.0} -> {:.0} ms, {:.0} -> {:.0} IOPS; \
         writes {:.1} -> {:.1} MB/s ({:+.0}%)",
        r0.lat_mean_us / 1000.0,
        r1.lat_mean_us / 1000.0,
        -read_gain * 100.0,
        r0.lat_p99_us / 1000.0,
        r1.lat_p99_us / 1000.0,
        r0.iops,
        r1.iops,
        w0.mb_per_s,
        w1.mb_per_s,
        -write_loss * 100.0
    );
    assert!(
        read_gain >= 0.1,
        "reads gained only {:.1}%",
        read_gain * 100.0
    );
    assert!(
        write_loss <= read_gain,
        "writes lost {:.1}%",
        write_loss * 100.0
    );
    // After the mix the originals are back: the readers alone run as without the tuner.
    let (a, b) = (
        dev(&without, 1).read.lat_mean_us,
        dev(&with, 1).read.lat_mean_us,
    );
    assert!((a - b).abs() / a < 0.02, "readers alone: {a} vs {b} µs");
}

#[test]
fn a_fast_mixed_load_on_an_ssd_is_left_alone() {
    for name in ["mix_noise", "oltp_steady"] {
        let sc = suite_scenario(name, 0.1).unwrap();
        let mut cfg = Config::default();
        cfg.slices.enabled = true;
        let r = run(&sc, cfg);
        let slices = slice_decisions(&r);
        assert!(slices.is_empty(), "{name}: {slices:#?}");
    }
}
