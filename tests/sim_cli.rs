//! The `simulate` entry point end to end: the embedded default scenario runs and reports.

use mergetune::config::Config;
use mergetune::sim::{Policy, Scenario, Simulation, run_scenario};

#[test]
fn default_scenario_parses() {
    let sc = Scenario::default_scenario();
    assert!(sc.phases.len() >= 2);
}

/// Prints the default scenario's report under the adaptive policy (run with --ignored
/// --nocapture in release to look at it; too slow for a debug test run).
#[test]
#[ignore]
fn print_default_report() {
    let sc = Scenario::default_scenario();
    let mut sim = Simulation::new(&sc).unwrap();
    let mut c = Policy::Adaptive.controller(Config::default());
    let start = std::time::Instant::now();
    let r = run_scenario(&mut sim, c.as_mut(), "adaptive", &mut |_, _| {});
    println!("{}", r.render_text());
    println!("wall {:?}", start.elapsed());
}
