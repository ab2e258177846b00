//! The whole exposition of a simulated run: the default scenario of `mergetune simulate`
//! (random OLTP, a sequential backup, OLTP again) under the adaptive daemon, its metrics
//! refreshed after every tick as `simulate --metrics-listen` does, with tick timings that
//! are a function of the tick (not of the wall clock), so the text is the same on every run.
//!
//! It is the before/after check of a change to the exporter's encoding: with
//! `MERGETUNE_METRICS_DUMP=FILE` the final `/metrics` body is written to FILE, to `diff`
//! against the same run of another commit.

use mergetune_daemon::snapshot::TickTiming;
use mergetune_export::metrics::Metrics;
use mergetune_sim::engine::Simulation;
use mergetune_sim::runner::{Policy, run_scenario_observed};
use mergetune_sim::scenario::Scenario;
use std::collections::{BTreeMap, BTreeSet};

/// A tick's duration and lag, cycling through values on both sides of the buckets' bounds.
fn timing(tick: u64, now_ms: u64) -> TickTiming {
    const DURATIONS: [f64; 5] = [0.000_03, 0.000_2, 0.003, 0.07, 2.0];
    const LAGS: [f64; 4] = [0.0, 0.004, 0.3, 7.0];
    TickTiming {
        now_ms,
        duration_seconds: DURATIONS[(tick % 5) as usize],
        lag_seconds: LAGS[(tick % 4) as usize],
    }
}

fn simulated_run() -> String {
    let scenario = Scenario::default_scenario();
    let mut sim = Simulation::new(&scenario).unwrap();
    let mut controller = Policy::Adaptive.controller(scenario.daemon_config(&Default::default()));
    let metrics = Metrics::simulated();
    let mut ticks = 0u64;
    let report = run_scenario_observed(
        &mut sim,
        controller.as_mut(),
        "adaptive",
        &mut |_, _| {},
        &mut |c, decisions, now_ms| {
            metrics.update(c, decisions, timing(ticks, now_ms));
            ticks += 1;
        },
    );
    assert!(sim.halted().is_none(), "{:?}", sim.halted());
    assert!(!report.decisions.is_empty(), "the default scenario decides");
    metrics.config_reload(true);
    String::from_utf8(metrics.render().to_vec()).unwrap()
}

#[test]
fn a_simulated_run_exposes_every_family_once_with_help_type_and_samples() {
    let text = simulated_run();
    if let Some(path) = std::env::var_os("MERGETUNE_METRICS_DUMP") {
        std::fs::write(&path, &text).unwrap();
    }
    // A real parser reads all of it.
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    // Each family announced once, HELP before TYPE, and every sample under its own family.
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helped = BTreeSet::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(helped.insert(name.to_string()), "{name}: HELP twice");
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap();
            assert!(helped.contains(name), "{name}: TYPE without HELP before it");
            assert!(
                types.insert(name.into(), ty.into()).is_none(),
                "{name}: TYPE twice"
            );
            current = Some((name.into(), ty.into()));
        } else {
            let sample = &line[..line.find(['{', ' ']).unwrap()];
            let (family, ty) = current.as_ref().expect("a sample before any TYPE");
            let own = sample == family
                || (ty == "histogram"
                    && ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|s| sample.strip_suffix(s) == Some(family)));
            assert!(own, "{sample} under the TYPE of {family}");
        }
    }
    for family in [
        "mergetune_simulated",
        "mergetune_build_info",
        "mergetune_device_ladder_level",
        "mergetune_device_nomerges",
        "mergetune_decisions_total",
        "mergetune_probes_total",
        "mergetune_ticks_total",
        "mergetune_config_reloads_total",
        "mergetune_tick_duration_seconds",
        "mergetune_tick_lag_seconds",
    ] {
        assert!(types.contains_key(family), "{family} missing:\n{text}");
    }
    let decided = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "mergetune_decisions_total")
        .filter(|s| s.labels.get("device") == Some("sda"))
        .count();
    assert!(decided > 0, "no decision of sda exported:\n{text}");
}
