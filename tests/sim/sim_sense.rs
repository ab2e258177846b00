//! Sensing at L3 in virtual time: the simulator's bio tap through the same `BlockFs` seam
//! as the real one, driven by the daemon's own loop. A device sits at L3 under random 4 KiB
//! writes; then, at the same rate, read share and bio size (so the merge counters, zero at
//! nomerges=2, and the workload signature say nothing), the writes turn sequential and
//! batched. The tap's samples tell the two apart within one duty cycle.

use crate::scenarios::RandomThenSequential;
use mergetune_logic::config::Config;
use mergetune_logic::decision::Decision;
use mergetune_logic::decision::DecisionKind;
use mergetune_logic::decision::Level;
use mergetune_logic::sampler::Sensed;
use mergetune_logic::sense::mergeable_percent;

const SWITCH_MS: u64 = 40_000;

/// Random writes, then sequential writes at the same rate and block size: the same
/// signature, which only the bio tap tells apart.
const SCENARIO: RandomThenSequential = RandomThenSequential {
    name: "same-signature",
    seed: 7,
    random_s: 40.0,
    random_read_percent: 0.0,
    random_iops: 5000.0,
    sequential_phase: "log",
    sequential_job: "log",
    sequential_s: 20.0,
    sequential_read_percent: 0.0,
    sequential_iops: Some(5000.0),
};

struct Run {
    /// (tick ms, level, the sample the window closing at this tick carried).
    ticks: Vec<(u64, Level, Option<Sensed>)>,
    decisions: Vec<Decision>,
    samples: u64,
    usable: bool,
}

/// The 2008 cost profile: there L3 saves, so random writes take the device there (on the
/// measured profile nothing is worth leaving L0 for, and there would be no L3 to sense).
fn lkml() -> Config {
    let mut cfg = Config::default();
    cfg.policy.cost_profile = "lkml-2008".into();
    cfg
}

fn drive(cfg: Config) -> Run {
    let mut ticks = Vec::new();
    let (d, decisions) = SCENARIO.drive(cfg, |d, t_ms| {
        let dev = &d.devices()["sda"];
        let sensed = if dev.last_window_ms == t_ms {
            dev.last_window.and_then(|w| w.sensed)
        } else {
            None
        };
        ticks.push((t_ms, dev.policy.level(), sensed));
    });
    let dev = &d.devices()["sda"];
    Run {
        ticks,
        decisions,
        samples: dev.sense.samples,
        usable: dev.sense.usable(&d.config().sense),
    }
}

#[test]
fn the_tap_tells_random_from_sequential_at_l3_within_one_duty_cycle() {
    let run = drive(lkml());
    assert!(run.usable, "the simulator's tap works");
    let l3_at = run
        .decisions
        .iter()
        .find(|d| d.kind == DecisionKind::Disable)
        .map(|d| d.at_ms)
        .expect("random writes take the device to L3");
    assert!(l3_at < SWITCH_MS - 10_000, "L3 at {l3_at} ms");
    // Random writes at L3: every sample sees (almost) nothing mergeable.
    let before: Vec<Sensed> = run
        .ticks
        .iter()
        .filter(|(t, _, _)| *t < SWITCH_MS)
        .filter_map(|(_, _, s)| *s)
        .collect();
    assert!(
        before.len() >= 5,
        "{} samples at L3 before the switch",
        before.len()
    );
    for s in &before {
        assert!(
            mergeable_percent(s) < 2.0,
            "random writes look mergeable: {s:?}"
        );
        // 100 ms (one watch tick) at 5000 bios/s.
        assert!((400..=700).contains(&s.bios), "{s:?}");
        assert!((100..=150).contains(&s.sampled_ms), "{s:?}");
    }
    // The sequential batched writes are seen within one duty cycle (2 s) plus a sample
    // (the level recorded at that tick is already the one the sample made the policy take).
    let (seen_at, s) = run
        .ticks
        .iter()
        .filter(|(t, _, _)| *t >= SWITCH_MS)
        .find_map(|(t, _, s)| s.filter(|s| mergeable_percent(s) >= 90.0).map(|s| (*t, s)))
        .unwrap_or_else(|| {
            panic!(
                "no sample saw the sequential writes: {:?}",
                run.ticks
                    .iter()
                    .filter(|(t, _, s)| *t >= SWITCH_MS && s.is_some())
                    .collect::<Vec<_>>()
            )
        });
    assert!(
        seen_at <= SWITCH_MS + 2500,
        "seen {} ms after the switch: {s:?}",
        seen_at - SWITCH_MS
    );
}

#[test]
fn the_duty_cycle_bounds_the_time_the_tap_is_open() {
    let run = drive(lkml());
    let l3_ms: u64 = run
        .ticks
        .windows(2)
        .filter(|w| w[0].1 == Level::L3)
        .map(|w| w[1].0 - w[0].0)
        .sum();
    // The watch ticks every 100 ms, so each sample lasts 100 ms (open_ms) and the tap
    // then stays shut 1900 ms: open 1/20 of the time at L3, as open_ms / every_ms says,
    // never more.
    let open_ms = run.samples * 100;
    assert!(
        open_ms * 20 <= l3_ms + 2000,
        "{} samples of 100 ms in {l3_ms} ms at L3",
        run.samples
    );
    assert!(
        run.samples + 1 >= l3_ms / 2000,
        "{} samples in {l3_ms} ms at L3: the tap should open every 2 s",
        run.samples
    );
}

#[test]
fn sensing_off_leaves_the_windows_without_samples() {
    let mut cfg = lkml();
    cfg.sense.enabled = false;
    let run = drive(cfg);
    assert!(!run.usable);
    assert_eq!(run.samples, 0);
    assert!(run.ticks.iter().all(|(_, _, s)| s.is_none()));
}

/// The reaction the samples are for: back to merging within a few seconds of the switch,
/// not after the 30-minute probe backoff. The policy's rule (at L3, step up when the
/// sensed mergeable share reaches `enable_above_percent`) is another branch's; this test
/// runs once it is merged.
#[test]
fn merging_is_back_within_a_few_seconds_of_the_same_signature_switch() {
    let run = drive(lkml());
    let back = run
        .decisions
        .iter()
        .find(|d| d.at_ms >= SWITCH_MS && d.kind != DecisionKind::Disable)
        .unwrap_or_else(|| panic!("nothing happened after the switch: {:#?}", run.decisions));
    assert!(
        back.at_ms <= SWITCH_MS + 3000,
        "merging back {} ms after the switch: {back:?}",
        back.at_ms - SWITCH_MS
    );
    assert_eq!(
        run.ticks.last().unwrap().1,
        Level::L0,
        "{:#?}",
        run.decisions
    );
}

#[test]
fn a_bad_sense_key_is_named_and_a_high_duty_cycle_refused() {
    let e = mergetune_logic::config::load_str("[sense]\nopen_ms = 1000\nevery_ms = 2000\n", "t")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("sense.every_ms") && e.contains("duty cycle"),
        "{e}"
    );
    let e = mergetune_logic::config::load_str("[sense]\nrecent = 3\n", "t")
        .unwrap_err()
        .to_string();
    assert!(e.contains("recent"), "{e}");
}
