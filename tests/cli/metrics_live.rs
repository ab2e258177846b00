//! `simulate --metrics-listen ADDR --speed X`: the simulated devices' metrics served while a
//! scenario runs, through [`LiveExporter`], driven here the way the simulator's loop does it
//! (advance, tick, `on_tick`).

use mergetune::cli::simulate::bench_scenario;
use mergetune_export::live::LiveExporter;
use mergetune_logic::config::Config;
use mergetune_sim::engine::Simulation;
use mergetune_sim::runner::Policy;
use std::time::{Duration, Instant};

#[test]
fn serves_the_simulated_devices_while_the_scenario_runs() {
    let sc = bench_scenario(false, 3.0);
    let mut sim = Simulation::new(&sc).unwrap();
    let mut controller = Policy::Adaptive.controller(Config::default());
    // 3 s of virtual time at 10x: about 0.3 s of wall time.
    let mut exporter = LiveExporter::start("127.0.0.1:0", Some(10.0)).unwrap();
    let addr = exporter.local_addr().unwrap().to_string();
    let started = Instant::now();
    let step_ns = controller.interval_ms() * 1_000_000;
    let mut t = 0;
    let d = controller.tick(0, &mut sim);
    exporter.on_tick(controller.as_ref(), &d, 0, 0.0);
    while t < sim.duration_ns() {
        t = (t + step_ns).min(sim.duration_ns());
        sim.advance_to(t);
        let t0 = Instant::now();
        let d = controller.tick(t / 1_000_000, &mut sim);
        exporter.on_tick(
            controller.as_ref(),
            &d,
            t / 1_000_000,
            t0.elapsed().as_secs_f64(),
        );
    }
    let wall = started.elapsed();
    assert!(
        wall >= Duration::from_millis(250),
        "--speed 10 paced 3 s of virtual time in {wall:?}"
    );
    let body =
        mergetune_export::status::http_get(&addr, "/metrics", Duration::from_secs(5)).unwrap();
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.contains(r#"mergetune_device_management{device="nvme0n1",management="managed"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"mergetune_device_bios_per_second{device="nvme0n1"}"#),
        "{text}"
    );
    assert!(text.contains("mergetune_ticks_total 4"), "{text}");
    // They say they are the simulator's, not a host's (the daemon's own exposition has no
    // such family: tests/cli/metrics_exposition.rs's golden text).
    assert!(
        text.contains("# TYPE mergetune_simulated gauge\nmergetune_simulated 1\n"),
        "{text}"
    );
    let s = mergetune_export::status::fetch(&addr, Duration::from_secs(5)).unwrap();
    assert_eq!(s.devices.len(), 1);
    assert!(s.simulated, "/status says simulated");
    assert!(
        (s.uptime_secs - 3.0).abs() < 1e-9,
        "virtual time: {}",
        s.uptime_secs
    );

    // Another controller (off, static:N) exports no device, but does not fail.
    let mut off = Policy::Off.controller(Config::default());
    let d = off.tick(0, &mut sim);
    exporter.on_tick(off.as_ref(), &d, 0, 0.0);
}
