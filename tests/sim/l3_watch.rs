//! The watch at L3: while a device is at L3 the daemon ticks every `l3_watch_interval_ms`
//! instead of every `interval_ms`, so a sequential phase starting there is seen (and
//! probed) after a fraction of a second; once no device is at L3 it ticks at the normal
//! interval again. Driven on the simulator with the daemon's own loop.

use crate::scenarios::RandomThenSequential;
use mergetune_daemon::adaptive::ASKED_SAMPLE_TICK_MS;
use mergetune_logic::config::Config;
use mergetune_logic::decision::Decision;
use mergetune_logic::decision::{DecisionKind, Level};

/// Random reads take the device to L3; a sequential scan then starts, which only the watch
/// sees in time.
const SCENARIO: RandomThenSequential = RandomThenSequential {
    name: "watch",
    seed: 3,
    random_s: 30.0,
    random_read_percent: 80.0,
    random_iops: 6000.0,
    sequential_phase: "scan",
    sequential_job: "backup",
    sequential_s: 10.0,
    sequential_read_percent: 100.0,
    sequential_iops: None,
};

/// Runs the scenario; returns (tick time ms, step to the next tick ms, level) per tick and
/// the decisions.
fn drive(cfg: Config) -> (Vec<(u64, u64, Level)>, Vec<Decision>) {
    let mut ticks = Vec::new();
    let (_, decisions) = SCENARIO.drive(cfg, |d, t_ms| {
        let level = d.devices()["sda"].policy.level();
        ticks.push((t_ms, d.next_tick_in_ms(), level));
    });
    (ticks, decisions)
}

/// The default config priced in the 2008 figures, where not merging pays.
fn lkml() -> Config {
    let mut cfg = Config::default();
    cfg.policy.cost_profile = "lkml-2008".into();
    cfg
}

#[test]
fn ticks_fast_only_at_l3_and_probes_a_scan_within_the_watch() {
    let (ticks, decisions) = drive(lkml());
    let disabled_at = decisions
        .iter()
        .find(|d| d.kind == DecisionKind::Disable)
        .map(|d| d.at_ms)
        .expect("the random phase reaches L3");
    // Before L3: the normal interval; at L3: the watch interval, or the short tick that
    // reads a sample asked of the bio tap as soon as it is whole.
    for &(t, step, level) in &ticks {
        if t < disabled_at {
            assert_eq!(step, 1000, "at {t} ms, {level}");
        } else if level == Level::L3 {
            assert!(
                [
                    mergetune_logic::config::DEFAULT_L3_WATCH_INTERVAL_MS,
                    ASKED_SAMPLE_TICK_MS
                ]
                .contains(&step),
                "at {t} ms, {level}: a step of {step} ms"
            );
        } else {
            assert_eq!(
                step, 1000,
                "at {t} ms, {level}: back to the normal interval"
            );
        }
    }
    // The scan starts at 30 s: merging is back within a few watch ticks (a window at L3
    // closes once it holds min_window_bios bios; a change of shape probes, one of rate
    // alone asks the tap), not after a whole interval.
    let probe = decisions
        .iter()
        .find(|d| matches!(d.kind, DecisionKind::Probe | DecisionKind::Enable) && d.at_ms >= 30_000)
        .unwrap_or_else(|| panic!("merging not back after the scan started: {decisions:#?}"));
    assert!(probe.at_ms <= 30_300, "merging back at {} ms", probe.at_ms);
    // Started by the change, not by the timer: the timed probe is a whole backoff after L3.
    let timed_probe_at_ms = disabled_at + lkml().policy.probe_initial_backoff_secs * 1000;
    assert!(
        probe.at_ms < timed_probe_at_ms,
        "probe at {} ms, the timed one due at {timed_probe_at_ms} ms: {}",
        probe.at_ms,
        probe.reason
    );
    // And merging stays on for the scan.
    assert_eq!(ticks.last().unwrap().2, Level::L0, "{decisions:#?}");
}

#[test]
fn the_watch_can_be_turned_off() {
    let mut cfg = lkml();
    cfg.policy.l3_watch_interval_ms = 0;
    let (ticks, decisions) = drive(cfg);
    assert!(ticks.iter().all(|&(_, step, _)| step == 1000));
    let probe = decisions
        .iter()
        .find(|d| matches!(d.kind, DecisionKind::Probe | DecisionKind::Enable) && d.at_ms >= 30_000)
        .unwrap_or_else(|| panic!("merging not back after the scan started: {decisions:#?}"));
    // Without the watch the scan runs unmerged until the next whole-second tick.
    assert!(probe.at_ms >= 31_000, "merging back at {} ms", probe.at_ms);
}
