//! The `simulate` entry point end to end: the embedded default scenario runs and reports.

use mergetune_logic::config::Config;
use mergetune_sim::engine::Simulation;
use mergetune_sim::runner::Policy;
use mergetune_sim::runner::run_scenario;
use mergetune_sim::scenario::Scenario;

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
    let mut c = Policy::Adaptive.controller(sc.daemon_config(&Config::default()));
    let start = std::time::Instant::now();
    let r = run_scenario(&mut sim, c.as_mut(), "adaptive", &mut |_, _| {});
    println!("{}", r.render_text());
    println!("wall {:?}", start.elapsed());
}

/// The embedded default scenario under the daemon's own policy: merging goes off (fully or
/// partly) during the random phase and is back at nomerges=0 during the sequential backup.
#[test]
fn default_scenario_adaptive_turns_merging_off_and_back_on() {
    let sc = Scenario::default_scenario();
    let backup = &sc.phases[1];
    let backup_start_ms = (sc.phases[0].duration_s * 1000.0) as u64;
    let backup_end_ms = backup_start_ms + (backup.duration_s * 1000.0) as u64;
    let mut sim = Simulation::new(&sc).unwrap();
    let mut c = Policy::Adaptive.controller(sc.daemon_config(&Config::default()));
    let r = run_scenario(&mut sim, c.as_mut(), "adaptive", &mut |_, _| {});
    let tl = &r.nomerges_timeline;
    assert!(
        tl.iter()
            .any(|ch| ch.value > 0 && ch.at_ms < backup_start_ms),
        "merging never restricted during OLTP: {tl:?}"
    );
    assert!(
        tl.iter()
            .any(|ch| ch.value == 0 && ch.at_ms >= backup_start_ms && ch.at_ms < backup_end_ms),
        "merging never re-enabled during the backup: {tl:?}"
    );
    assert!(r.decisions.iter().all(|d| !d.reason.is_empty()));
    // The backup merges once merging is back on.
    assert!(r.phases[1].devices[0].read.merge_percent > 50.0);
    assert!(r.render_text().contains("decisions"));
}

/// `mergetune simulate` on the command line: its decisions are logged in virtual time and
/// marked simulated (`[sim 6.0s] sda: ...`), never with a wall-clock timestamp that would
/// read as a change to this machine's `sda`; the wall-clock speed goes to stderr, out of the
/// report on stdout, which is the same on every run.
#[test]
fn simulated_decisions_are_marked_and_timed_in_virtual_time() {
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_mergetune"))
            .args(["--log-format", "text", "simulate"])
            .env_remove("RUST_LOG")
            .env_remove("JOURNAL_STREAM")
            .output()
            .unwrap()
    };
    let o = run();
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let changes = crate::logs::nomerges_lines_marked(&err, "[sim ");
    // The first step down comes after 3 windows of 2 s of virtual time.
    assert!(
        changes
            .iter()
            .chain(
                err.lines()
                    .filter(|l| l.contains("front_merges"))
                    .collect::<Vec<_>>()
                    .iter()
            )
            .any(|l| l.starts_with("[sim 6.0s]")),
        "{err}"
    );
    assert!(err.contains("wall time"), "{err}");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!out.contains("wall time"), "{out}");
    assert_eq!(
        out,
        String::from_utf8_lossy(&run().stdout),
        "the report differs between two runs"
    );
}
