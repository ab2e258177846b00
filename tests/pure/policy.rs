//! Policy behaviour: the merge ladder, thresholds, hysteresis, dwell, cap, probes, and
//! invariants (proptest).

use mergetune_kernel::scheduler::Scheduler;
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::PolicyConfig;
use mergetune_logic::decision::Level;
use mergetune_logic::policy::LEAVE_L3_NOT_WORTH_AFTER_MS;
use mergetune_logic::policy::reason::NoL3;
use mergetune_logic::policy::signature::{
    RATE_BASELINE_MS, RATE_CHANGE_CONFIRM_MS, SignatureChange,
};
use mergetune_logic::policy::{
    Caps, ChangesLastHour, Evaluation, HOUR_MS, Mode, OutcomeKind, Phase, PolicyState, Reason,
    Signature, TAP_CONFIRM_SAMPLES, TAP_DECISIVE_SHARE, decide, hold_without_deciding,
    sensed_min_bios, tunables,
};
use mergetune_logic::pricing::profile::Verdict;
use mergetune_logic::pricing::profile::{self, CostProfile};
use mergetune_logic::pricing::worth::{Basis, Saving, SavingUnit, UnknownWhy, Worth};
use mergetune_logic::sampler::Sensed;
use mergetune_logic::sampler::{Counters, Window};
use proptest::prelude::*;

/// The ladder's mechanics: every rung, sight at L3 (a bio tap), no cost profile (every
/// level is taken as worth it). The tests of the profile and of blindness say otherwise.
const FULL: Caps = Caps {
    sense_at_l3: true,
    ..Caps::FULL
};
/// none / kyber with a bio tap: only L0 and L3.
const BARE: Caps = Caps {
    sense_at_l3: true,
    ..Caps::BARE
};

fn cfg() -> PolicyConfig {
    PolicyConfig {
        window_ticks: 1,
        min_window_bios: 100,
        disable_below_percent: 1.0,
        enable_above_percent: 5.0,
        step_down_after_windows: 2,
        disable_after_windows: 3,
        disabled_nomerges: 2,
        min_dwell_secs: 10,
        probe_initial_backoff_secs: 60,
        probe_max_backoff_secs: 240,
        probe_windows: 2,
        max_changes_per_hour: 20,
        ..PolicyConfig::default()
    }
}

/// The whole ladder walked rung by rung: L1, L2, then L3.
const WALK_TO_L3: [(OutcomeKind, Level); 3] = [
    (OutcomeKind::StepDown, Level::L1),
    (OutcomeKind::StepDown, Level::L2),
    (OutcomeKind::Disable, Level::L3),
];

/// The test config with at most two level changes an hour and no dwell: the hourly cap is
/// what binds.
fn two_changes_an_hour() -> PolicyConfig {
    let mut c = cfg();
    c.max_changes_per_hour = 2;
    c.min_dwell_secs = 0;
    c
}

/// The test config and a device's policy state at its first sight, at t = 0.
fn start() -> (PolicyConfig, PolicyState) {
    let c = cfg();
    let s = PolicyState::new(0, &c);
    (c, s)
}

/// The low windows counted toward a step down (merging mode; 0 elsewhere).
fn low_windows(s: &PolicyState) -> u32 {
    match &s.phase {
        Phase::Merging(m) => m.low_windows,
        _ => 0,
    }
}

/// A 1 s window with `bios` bios of which `merged` were merged.
fn win(bios: u64, merged: u64) -> Window {
    Window {
        counters: Counters {
            writes_completed: bios - merged,
            writes_merged: merged,
            ..Default::default()
        },
        duration_ms: 1000,
        sensed: None,
    }
}

/// A low window in which a few bios still merged (0.2%): the ladder is walked rung by
/// rung. A window in which none merged at all (`win(bios, 0)`) takes a device with a bio
/// tap from L0 straight to L3.
fn few(bios: u64) -> Window {
    win(bios, bios / 500)
}

/// Feeds one window per second starting at `t0`; returns the outcomes.
fn run(
    state: &mut PolicyState,
    caps: Caps,
    c: &PolicyConfig,
    t0: u64,
    windows: &[Window],
) -> Vec<(u64, OutcomeKind, Option<Level>, Reason)> {
    let mut out = Vec::new();
    for (i, w) in windows.iter().enumerate() {
        let now = t0 + (i as u64 + 1) * 1000;
        let ev = decide(state, Some(w), caps, c, now);
        out.push((now, ev.kind, ev.to_level, ev.reason));
        *state = ev.state;
    }
    out
}

fn changes(out: &[(u64, OutcomeKind, Option<Level>, Reason)]) -> Vec<(OutcomeKind, Level)> {
    out.iter().filter_map(|o| o.2.map(|l| (o.1, l))).collect()
}

/// From a device's first sight, `windows` busy windows with nothing merged take it to L3,
/// and the timed probe starts on the next one: the state in the probe, and when it started.
fn in_a_probe_from_l3(caps: Caps, c: &PolicyConfig, windows: usize) -> (PolicyState, u64) {
    let mut s = PolicyState::new(0, c);
    run(&mut s, caps, c, 100_000, &vec![win(5000, 0); windows]);
    assert_eq!(s.level(), Level::L3);
    let due = s.next_probe_at_ms().unwrap();
    let ev = decide(&s, Some(&win(5000, 0)), caps, c, due);
    assert_eq!(ev.kind, OutcomeKind::ProbeStart, "{}", ev.reason);
    (ev.state, due)
}

/// The level changes in `out` are `expected`, in order.
fn assert_changes(
    out: &[(u64, OutcomeKind, Option<Level>, Reason)],
    expected: &[(OutcomeKind, Level)],
) {
    assert_eq!(changes(out), expected, "{out:?}");
}

/// `ev` is a `kind` to `to` (its reason in the failure message).
fn assert_move(ev: &Evaluation, kind: OutcomeKind, to: Option<Level>) {
    assert_eq!((ev.kind, ev.to_level), (kind, to), "{}", ev.reason);
}

/// `assert!(matches!(value, pattern))`, the value in the failure message.
macro_rules! assert_matches {
    ($value:expr, $pattern:pat $(if $guard:expr)?) => {
        assert!(matches!($value, $pattern $(if $guard)?), "{}", $value)
    };
}

#[test]
fn walks_down_the_ladder_one_step_at_a_time() {
    let (c, mut s) = start();
    let out = run(&mut s, FULL, &c, 100_000, &[few(5000); 40]);
    assert_eq!(changes(&out), WALK_TO_L3.to_vec(), "{out:#?}");
    // L1 after 2 low windows (not before), L2 after 2 more, L3 after 3 more and the dwell.
    let at = |l: Level| out.iter().find(|o| o.2 == Some(l)).unwrap().0;
    assert_eq!(at(Level::L1), 102_000);
    assert_eq!(at(Level::L2), 104_000);
    assert_eq!(at(Level::L3), 114_000, "dwell of 10 s at L2");
    assert!(
        out.iter().any(|o| matches!(
            o.3,
            Reason::Dwell {
                level: Level::L2,
                ..
            }
        )),
        "{out:?}"
    );
    assert_eq!(s.mode(), Mode::AtL3);
    let d = out.iter().find(|o| o.2 == Some(Level::L3)).unwrap();
    // The reason keeps its numbers (10 low windows: those of the dwell count too), and says
    // them.
    assert_matches!(
        d.3,
        Reason::StepToL3 { windows: 10, bios_per_sec, level: Level::L2, .. }
            if bios_per_sec == 5000.0
    );
    let said = d.3.to_string();
    assert!(
        said.contains("< 1.0%") && said.contains("5000 bios/s"),
        "{said}"
    );
}

/// Where not one bio merged at L0 (every kind of merge tried) and a bio tap watches L3,
/// the rungs between would only count zero again: L0 -> L3 after `step_down_after_windows`
/// windows, with no dwell, and the workload remembered as merge-hostile.
#[test]
fn nothing_merged_at_l0_goes_straight_to_l3_where_a_tap_watches() {
    let (c, mut s) = start();
    let out = run(&mut s, FULL, &c, 100_000, &[win(5000, 0); 3]);
    assert_changes(&out, &[(OutcomeKind::Disable, Level::L3)]);
    // The first window already counts toward L3, and says so.
    assert!(
        matches!(
            out[0].3,
            Reason::LowWindow {
                n: 1,
                k: 2,
                next: Level::L3,
                ..
            }
        ),
        "{}",
        out[0].3
    );
    assert_eq!(
        out[1].0, 102_000,
        "after step_down_after_windows (2), no dwell"
    );
    assert!(
        matches!(out[1].3, Reason::NothingMergesToL3 { windows: 2, bios_per_sec, next_probe_in_ms: 60_000 } if bios_per_sec == 5000.0),
        "{}",
        out[1].3
    );
    let said = out[1].3.to_string();
    assert!(
        said.contains("no bio merged in 2 windows at L0") && said.contains("L0 -> L3"),
        "{said}"
    );
    assert_eq!(s.mode(), Mode::AtL3);
    assert_eq!(s.next_probe_at_ms(), Some(162_000));
    assert_eq!(
        s.history.known_hostile.len(),
        1,
        "remembered as merge-hostile"
    );
}

/// One merged bio among the low windows is a merge L0 found: the ladder is walked, so that
/// each rung shows what it loses.
#[test]
fn one_merged_bio_among_the_low_windows_keeps_the_walk() {
    let (c, mut s) = start();
    let mut windows = vec![win(5000, 1)];
    windows.extend([win(5000, 0); 3]);
    let out = run(&mut s, FULL, &c, 100_000, &windows);
    assert_eq!(changes(&out), WALK_TO_L3[..2].to_vec(), "{out:?}");
    assert_eq!(out[1].0, 102_000);
    assert!(
        matches!(
            out[0].3,
            Reason::LowWindow {
                next: Level::L1,
                ..
            }
        ),
        "{}",
        out[0].3
    );
    // Nothing merged at L1 either: that is no reason to skip (L1 no longer tries front
    // merges), so the walk goes on one rung at a time.
    let mut s = PolicyState::new(0, &c);
    s.move_to_for_test(Level::L1, 100_000);
    let out = run(&mut s, FULL, &c, 100_000, &[win(5000, 0); 2]);
    assert_changes(&out, &[(OutcomeKind::StepDown, Level::L2)]);
}

/// The step straight to L3 needs L3 to be a level to rest at: without a tap, with L3 not
/// allowed by the config, or with L3 saving nothing measurable, the walk goes where it
/// went before.
#[test]
fn nothing_merged_walks_where_l3_is_not_a_level_to_rest_at() {
    let c = cfg();
    // No tap: L2 is the deepest level.
    let mut s = PolicyState::new(0, &c);
    let out = run(&mut s, Caps::FULL, &c, 100_000, &[win(5000, 0); 10]);
    assert_eq!(changes(&out), WALK_TO_L3[..2].to_vec(), "{out:?}");
    // disabled_nomerges = 1.
    let mut c1 = c.clone();
    c1.disabled_nomerges = 1;
    let mut s = PolicyState::new(0, &c1);
    let out = run(&mut s, FULL, &c1, 100_000, &[win(5000, 0); 10]);
    assert_eq!(s.level(), Level::L2, "{out:?}");
    // L3 saves nothing measurable, L1 and L2 do (the 2008 profile with L3 made costly).
    let mut p = profile::builtin(profile::LKML_2008_NAME).unwrap();
    for cell in &mut p.cells {
        if cell.level == Level::L3 {
            cell.change_percent = Some(5.0);
        }
    }
    let caps = FULL.priced(Worth::from_profile(&p, Some(Scheduler::MqDeadline)));
    assert!(caps.worth.worth(Level::L2) && !caps.worth.worth(Level::L3));
    let mut s = PolicyState::new(0, &c);
    let out = run(&mut s, caps, &c, 100_000, &[win(5000, 0); 10]);
    assert_eq!(changes(&out), WALK_TO_L3[..2].to_vec(), "{out:?}");
}

/// Under the hourly cap the step straight to L3 waits like any step down, and is taken
/// once the hour allows it.
#[test]
fn nothing_merged_waits_under_the_hourly_cap() {
    let mut c = cfg();
    c.max_changes_per_hour = 1;
    let mut s = PolicyState::new(0, &c);
    s.history.changes.record(99_000);
    let out = run(&mut s, FULL, &c, 100_000, &[win(5000, 0); 5]);
    assert!(changes(&out).is_empty(), "{out:?}");
    assert!(
        matches!(out.last().unwrap().3, Reason::CapReached { .. }),
        "{out:?}"
    );
    let out = run(&mut s, FULL, &c, 99_000 + HOUR_MS, &[win(5000, 0)]);
    assert_changes(&out, &[(OutcomeKind::Disable, Level::L3)]);
}

#[test]
fn skips_rungs_a_scheduler_does_not_have() {
    let (c, mut s) = start();
    let out = run(&mut s, BARE, &c, 100_000, &[few(5000); 20]);
    assert_eq!(changes(&out), vec![(OutcomeKind::Disable, Level::L3)]);
    let bfq = Caps::for_scheduler(Some(Scheduler::Bfq), false).sensing(true);
    let mut s = PolicyState::new(0, &c);
    let out = run(&mut s, bfq, &c, 100_000, &[few(5000); 20]);
    assert_eq!(
        changes(&out),
        vec![
            (OutcomeKind::StepDown, Level::L2),
            (OutcomeKind::Disable, Level::L3)
        ]
    );
    // disabled_nomerges = 1: the ladder stops at L2.
    let mut c1 = c.clone();
    c1.disabled_nomerges = 1;
    let mut s = PolicyState::new(0, &c1);
    let out = run(&mut s, FULL, &c1, 100_000, &[few(5000); 40]);
    assert_eq!(s.level(), Level::L2);
    assert_eq!(changes(&out).len(), 2);
}

#[test]
fn tunables_per_level() {
    let f = FULL;
    assert_eq!(
        tunables(Level::L0, f),
        vec![(Tunable::Nomerges, "0"), (Tunable::FrontMerges, "1")]
    );
    assert_eq!(
        tunables(Level::L1, f),
        vec![(Tunable::Nomerges, "0"), (Tunable::FrontMerges, "0")]
    );
    assert_eq!(tunables(Level::L2, f), vec![(Tunable::Nomerges, "1")]);
    assert_eq!(tunables(Level::L3, f), vec![(Tunable::Nomerges, "2")]);
    assert_eq!(
        tunables(Level::L0, Caps::BARE),
        vec![(Tunable::Nomerges, "0")]
    );
}

#[test]
fn a_good_window_resets_the_count() {
    let (c, mut s) = start();
    run(
        &mut s,
        FULL,
        &c,
        100_000,
        &[win(5000, 0), win(5000, 200), win(5000, 0)],
    );
    assert_eq!(s.level(), Level::L0);
    assert_eq!(low_windows(&s), 1);
}

#[test]
fn idle_windows_decide_nothing() {
    let (c, mut s) = start();
    let out = run(&mut s, FULL, &c, 100_000, &[win(50, 0); 20]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold));
    assert!(
        matches!(out[0].3, Reason::Idle { bios: 50, .. }),
        "{}",
        out[0].3
    );
    assert_eq!(low_windows(&s), 0);
}

#[test]
fn visible_merges_step_up_at_once_and_the_band_holds() {
    let (c, mut s) = start();
    run(&mut s, FULL, &c, 100_000, &[few(10_000); 4]);
    assert_eq!(s.level(), Level::L2);
    // In the band (3%, between 1% and 5%): nothing moves.
    let out = run(&mut s, FULL, &c, 104_000, &[win(10_000, 300); 30]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    assert_eq!(s.level(), Level::L2);
    // Plug merges visible at nomerges=1 over the high threshold: straight back to L0.
    let ev = decide(&s, Some(&win(10_000, 6000)), FULL, &c, 135_000);
    assert_move(&ev, OutcomeKind::Enable, Some(Level::L0));
    assert_matches!(
        ev.reason,
        Reason::StillMerging {
            level: Level::L2,
            ..
        }
    );
}

#[test]
fn probe_backoff_doubles_to_cap_and_resets_on_success() {
    let c = cfg();
    let caps = BARE;
    let mut s = PolicyState::new(0, &c);
    run(&mut s, caps, &c, 100_000, &[few(5000); 3]);
    assert_eq!(s.mode(), Mode::AtL3);
    assert_eq!(s.next_probe_at_ms(), Some(103_000 + 60_000));
    let mut backoffs = Vec::new();
    for _ in 0..5 {
        let due = s.next_probe_at_ms().unwrap();
        let ev = decide(&s, None, caps, &c, due - 1);
        assert_eq!(ev.kind, OutcomeKind::Hold);
        let ev = decide(&s, None, caps, &c, due);
        assert_move(&ev, OutcomeKind::ProbeStart, Some(Level::L0));
        s = ev.state;
        let out = run(&mut s, caps, &c, due, &[win(5000, 0), win(5000, 0)]);
        assert_eq!(
            (out[1].1, out[1].2),
            (OutcomeKind::ProbeFailed, Some(Level::L3)),
            "{out:?}"
        );
        backoffs.push(s.history.backoff_ms / 1000);
        s.history.changes = ChangesLastHour::default(); // keep the hourly cap out of this test
    }
    assert_eq!(backoffs, vec![120, 240, 240, 240, 240]);
    let due = s.next_probe_at_ms().unwrap();
    s = decide(&s, None, caps, &c, due).state;
    let out = run(&mut s, caps, &c, due, &[win(5000, 2000), win(5000, 2000)]);
    assert_eq!(out[1].1, OutcomeKind::ProbeSucceeded);
    assert_eq!(
        (s.mode(), s.level(), s.history.backoff_ms),
        (Mode::Merging, Level::L0, 60_000)
    );
    // A probe that finds merges forgets the workload as merge-hostile.
    assert!(s.history.known_hostile.is_empty(), "{:?}", s.history);
}

#[test]
fn a_probe_that_sees_only_idle_windows_ends_at_l0_as_inconclusive_not_succeeded() {
    let c = cfg();
    let caps = BARE;
    let mut s = PolicyState::new(0, &c);
    run(&mut s, caps, &c, 100_000, &[win(5000, 0); 3]);
    assert_eq!(s.mode(), Mode::AtL3);
    let due = s.next_probe_at_ms().unwrap();
    let ev = decide(&s, None, caps, &c, due);
    assert_eq!(ev.kind, OutcomeKind::ProbeStart);
    s = ev.state;
    // Idle windows (fewer bios than min_window_bios) measure nothing: 4 x probe_windows of
    // them end the probe where it is, at L0, the safe level.
    let idle = 4 * c.probe_windows as usize;
    let out = run(&mut s, caps, &c, due, &vec![win(10, 0); idle]);
    let kinds: Vec<OutcomeKind> = out.iter().map(|o| o.1).collect();
    assert!(
        kinds[..idle - 1].iter().all(|k| *k == OutcomeKind::Hold),
        "{out:?}"
    );
    assert_eq!(kinds[idle - 1], OutcomeKind::ProbeInconclusive, "{out:?}");
    assert!(
        matches!(out[idle - 1].3, Reason::ProbeInconclusive { .. }),
        "{out:?}"
    );
    assert_eq!((s.mode(), s.level()), (Mode::Merging, Level::L0));
    assert_eq!(
        out[idle - 1].2,
        None,
        "an inconclusive probe writes nothing"
    );
}

/// A probe counts a window of exactly `min_window_bios` bios, and a probe whose merge ratio
/// is exactly the low threshold found merging (L0 stays): only a ratio under it goes back.
#[test]
fn a_probe_counts_a_window_of_exactly_the_minimum_and_stays_at_exactly_the_low_threshold() {
    let c = cfg();
    let (mut s, due) = in_a_probe_from_l3(BARE, &c, 40);
    // 1 merged of 100, then 100 of 10,000: 1.0% over the probe, the low threshold.
    let ev = decide(&s, Some(&win(c.min_window_bios, 1)), BARE, &c, due + 1000);
    assert_matches!(
        ev.reason,
        Reason::ProbeWindow {
            window: 1,
            of: 2,
            ..
        }
    );
    s = ev.state;
    let ev = decide(&s, Some(&win(10_000, 100)), BARE, &c, due + 2000);
    assert_eq!(
        (ev.kind, ev.to_level, ev.state.level()),
        (OutcomeKind::ProbeSucceeded, None, Level::L0),
        "{}",
        ev.reason
    );
}

/// The state after `run` of windows of 94% merges at L0 with FULL caps: a trial of L2
/// started at 102 s against the last of them (600 requests per 10,000 bios).
fn in_a_trial(c: &PolicyConfig) -> PolicyState {
    let mut s = PolicyState::new(0, c);
    let out = run(&mut s, FULL, c, 100_000, &[win(10_000, 9_400); 2]);
    assert_changes(&out, &[(OutcomeKind::TrialStart, Level::L2)]);
    s
}

/// A trial measures `probe_windows` busy windows, then compares requests per bio with the
/// window it started from, with `trial_max_extra_requests_percent` of slack.
#[test]
fn a_trial_measures_its_windows_and_compares_requests_per_bio_with_its_slack() {
    let mut c = cfg();
    c.trial_max_extra_requests_percent = 2.0;
    let mut s = in_a_trial(&c);
    // A window of exactly min_window_bios is busy: it counts.
    let ev = decide(&s, Some(&win(c.min_window_bios, 94)), FULL, &c, 103_000);
    assert_eq!(ev.reason, Reason::TrialMeasuring);
    let ev = decide(&s, Some(&win(10_000, 9_390)), FULL, &c, 103_000);
    assert_eq!(ev.reason, Reason::TrialMeasuring);
    s = ev.state;
    let ev = decide(&s, Some(&win(10_000, 9_390)), FULL, &c, 104_000);
    assert_eq!(ev.kind, OutcomeKind::TrialSucceeded, "{}", ev.reason);
    // 1,220 requests for 20,000 bios against 600 for 10,000, the limit 2% over that.
    let Reason::TrialKeptMerges {
        requests_per_bio,
        baseline_per_bio,
        limit_per_bio,
        back,
    } = ev.reason
    else {
        panic!("{}", ev.reason)
    };
    assert_eq!(back, Level::L0);
    assert!(
        (requests_per_bio - 0.061).abs() < 1e-12,
        "{requests_per_bio}"
    );
    assert!(
        (baseline_per_bio - 0.06).abs() < 1e-12,
        "{baseline_per_bio}"
    );
    assert!((limit_per_bio - 0.0612).abs() < 1e-12, "{limit_per_bio}");
}

/// Idle windows do not count in a trial; 4 x `probe_windows` of them end it where it
/// started, with the next trial a backoff later.
#[test]
fn a_trial_that_sees_only_idle_windows_ends_where_it_started() {
    let c = cfg();
    let mut s = in_a_trial(&c);
    let idle = 4 * c.probe_windows as usize;
    let out = run(&mut s, FULL, &c, 102_000, &vec![win(50, 0); idle]);
    assert!(
        out[..idle - 1]
            .iter()
            .all(|o| o.3 == Reason::IdleDoesNotCount(Mode::Trial)),
        "{out:?}"
    );
    let last = &out[idle - 1];
    assert_eq!(
        (last.1, last.2, &last.3),
        (
            OutcomeKind::TrialFailed,
            Some(Level::L0),
            &Reason::TrialInconclusive { back: Level::L0 }
        )
    );
    assert_eq!(
        s.history.next_trial_at_ms,
        last.0 + c.probe_initial_backoff_secs * 1000
    );
}

/// A timed probe that finds merging that pays (at or over the high threshold) tries L2 at
/// once; one that finds merges under it stays at L0.
#[test]
fn a_probe_that_finds_merging_paying_tries_l2_at_once() {
    let c = cfg();
    let at_l3 = || in_a_probe_from_l3(FULL, &c, 40);
    let (mut s, due) = at_l3();
    let out = run(&mut s, FULL, &c, due, &[win(10_000, 9_400); 2]);
    assert_eq!(
        (out[1].1, out[1].2),
        (OutcomeKind::TrialStart, Some(Level::L2)),
        "{out:?}"
    );
    assert!(
        matches!(
            out[1].3,
            Reason::ProbeFoundMerges {
                trial_windows: Some(2),
                ..
            }
        ),
        "{}",
        out[1].3
    );
    // 3%: merging pays (over the low 1%) but not clearly (under the high 5%).
    let (mut s, due) = at_l3();
    let out = run(&mut s, FULL, &c, due, &[win(10_000, 300); 2]);
    assert_eq!((out[1].1, out[1].2), (OutcomeKind::ProbeSucceeded, None));
    assert!(
        matches!(
            out[1].3,
            Reason::ProbeFoundMerges {
                trial_windows: None,
                ..
            }
        ),
        "{}",
        out[1].3
    );
}

/// A probe that finds nothing where L3 cannot be rested at any more (the tap went away
/// during it) stays at L0: the ladder walks down from there.
#[test]
fn a_probe_that_finds_nothing_stays_at_l0_where_l3_went_blind() {
    let c = cfg();
    let (mut s, due) = in_a_probe_from_l3(FULL, &c, 40);
    let out = run(&mut s, Caps::FULL, &c, due, &[win(5000, 0); 2]);
    assert_eq!(
        (out[1].1, out[1].2, s.level(), s.mode()),
        (OutcomeKind::ProbeFailed, None, Level::L0, Mode::Merging),
        "{out:?}"
    );
    assert!(
        matches!(
            out[1].3,
            Reason::ProbeLowNoL3 {
                why: NoL3::Blind,
                ..
            }
        ),
        "{}",
        out[1].3
    );
}

/// A probe started by a workload change that finds nothing goes back to L3 keeping the
/// timed probe's time, unless that time has come: then the next is a backoff away.
#[test]
fn a_change_probe_that_finds_nothing_keeps_the_timer_unless_it_is_due() {
    let c = cfg();
    let busy = writes_at(190_000, 1000);
    let rise = writes_at(400_000, 1000);
    // The rise lasts 3 s and the tap's sample comes 1 s later: the probe starts 4 s in.
    for (start_before_due_ms, next_in_ms) in [(9000, 3000), (5000, 60_000)] {
        let mut s = PolicyState::new(0, &c);
        run(&mut s, BARE, &c, 100_000, &[busy; 3]);
        let due = s.next_probe_at_ms().unwrap();
        let t0 = due - start_before_due_ms;
        // The rate at L3, measured there.
        run(&mut s, BARE, &c, t0 - 3000, &[busy; 2]);
        let (ev, t) = until_a_probe(&s, &c, rise, t0);
        assert_eq!(t, t0 + 4000);
        assert_matches!(ev.reason, Reason::ProbeOnChange { .. });
        s = ev.state;
        let out = run(&mut s, BARE, &c, t, &[rise; 2]);
        let ended_ms = t + 2000;
        assert_eq!(out[1].1, OutcomeKind::ProbeFailed, "{out:?}");
        assert!(
            matches!(out[1].3, Reason::ProbeFoundNone { next_probe_in_ms, .. } if next_probe_in_ms == next_in_ms),
            "{}",
            out[1].3
        );
        assert_eq!(s.next_probe_at_ms(), Some(ended_ms + next_in_ms));
    }
}

/// A scheduler's rungs: front merges only on mq-deadline, nomerges=1 only where it differs
/// from 0 (mq-deadline, bfq); the mode names are what status and /status say.
#[test]
fn caps_follow_the_scheduler_and_modes_are_named_as_serialised() {
    let rungs = |s: Option<Scheduler>, front| {
        let c = Caps::for_scheduler(s, front);
        (c.front_merges, c.simple_merges)
    };
    assert_eq!(rungs(Some(Scheduler::MqDeadline), true), (true, true));
    assert_eq!(rungs(Some(Scheduler::MqDeadline), false), (false, true));
    assert_eq!(rungs(Some(Scheduler::Bfq), true), (false, true));
    assert_eq!(rungs(Some(Scheduler::Kyber), true), (false, false));
    assert_eq!(rungs(None, true), (false, false));
    for m in [Mode::Merging, Mode::AtL3, Mode::Probing, Mode::Trial] {
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            format!("\"{}\"", m.as_str())
        );
    }
    assert_eq!(Mode::AtL3.as_str(), "off");
}

#[test]
fn hourly_cap_stops_steps_down_never_up() {
    let c = two_changes_an_hour();
    let caps = FULL;
    let mut s = PolicyState::new(0, &c);
    run(&mut s, caps, &c, 100_000, &[few(5000); 20]);
    assert_eq!(s.level(), Level::L2, "two changes, then the cap");
    // Stepping up is never refused.
    let ev = decide(&s, Some(&win(5000, 3000)), caps, &c, 121_000);
    assert_eq!(ev.to_level, Some(Level::L0));
    s = ev.state;
    let out = run(&mut s, caps, &c, 121_000, &[few(5000); 10]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold));
    // The step it waits for is to L1: no count of windows toward L3 in the reason.
    assert!(
        matches!(
            out.last().unwrap().3,
            Reason::CapReached {
                windows: None,
                level: Level::L0,
                cap: 2,
                ..
            }
        ),
        "{out:?}"
    );
    // After the hour, it may step down again.
    let out = run(&mut s, caps, &c, 130_000 + HOUR_MS, &[few(5000); 2]);
    // The low windows seen while capped still count: the step comes at once.
    assert_eq!(out[0].2, Some(Level::L1), "{out:?}");
}

fn arb_window() -> impl Strategy<Value = Option<Window>> {
    prop_oneof![
        1 => Just(None),
        // Not one bio merged: the step from L0 straight to L3.
        1 => (0u64..20_000).prop_map(|bios| Some(Window {
            counters: Counters {
                reads_completed: bios,
                ..Default::default()
            },
            duration_ms: 1000,
            sensed: None,
        })),
        4 => (0u64..20_000, 0u64..=100).prop_map(|(bios, pct)| {
            let merged = bios * pct / 100 / if pct > 50 { 1 } else { 5 };
            Some(Window {
                counters: Counters {
                    reads_completed: bios - merged,
                    reads_merged: merged,
                    ..Default::default()
                },
                duration_ms: 1000,
                sensed: None,
            })
        }),
        // With a tap's sample, as at L3: any size, and sizes at the minimum the policy
        // judges (min_window_bios / 4 = 25 with cfg()), where an off-by-one would show.
        1 => (0u64..20_000, prop_oneof![0u64..2_000, 23u64..28], 0u64..=100).prop_map(|(bios, sampled, pct)| {
            Some(Window {
                counters: Counters {
                    reads_completed: bios,
                    ..Default::default()
                },
                duration_ms: 1000,
                sensed: Some(Sensed {
                    bios: sampled,
                    mergeable: sampled * pct / 100,
                    sampled_ms: 250,
                    ..Default::default()
                }),
            })
        }),
    ]
}

/// One level's saving: the verdict decides (the figures only explain it).
fn arb_saving() -> impl Strategy<Value = Option<Saving>> {
    prop_oneof![
        Just(None),
        prop_oneof![
            Just(Verdict::Saves),
            Just(Verdict::Costs),
            Just(Verdict::NoMeasurableDifference)
        ]
        .prop_map(|verdict| Some(Saving {
            value: match verdict {
                Verdict::Saves => -10.0,
                Verdict::Costs => 10.0,
                Verdict::NoMeasurableDifference => -1.0,
            },
            ci: None,
            unit: SavingUnit::PercentPerIo,
            verdict,
        })),
    ]
}

/// What the levels save: no profile (every level worth it), each shipped profile for each
/// scheduler, and arbitrary tables (any level saving or not, trusted or not).
fn arb_worth() -> impl Strategy<Value = Worth> {
    let profile = |name: &str| profile::builtin(name).unwrap();
    let (measured, lkml) = (
        profile(profile::MEASURED_NAME),
        profile(profile::LKML_2008_NAME),
    );
    let sched = || {
        proptest::sample::select(vec![
            Scheduler::MqDeadline,
            Scheduler::Bfq,
            Scheduler::None,
            Scheduler::Kyber,
        ])
    };
    prop_oneof![
        Just(Worth::UNPRICED),
        sched().prop_map(move |s| Worth::from_profile(&measured, Some(s))),
        sched().prop_map(move |s| Worth::from_profile(&lkml, Some(s))),
        (arb_saving(), arb_saving(), arb_saving(), any::<bool>()).prop_map(
            |(l1, l2, l3, untrusted)| Worth {
                basis: Basis::Profile,
                scheduler: Some(Scheduler::MqDeadline),
                levels: [None, l1, l2, l3],
                coverage_percent: 97.9,
                untrusted,
            }
        ),
        // The live pricing's tables: saving in ms/s against the floor, or unknown.
        (arb_saving(), arb_saving(), arb_saving()).prop_map(|(l1, l2, l3)| {
            let live = |s: Option<Saving>| {
                s.map(|s| Saving {
                    value: -s.value,
                    ci: Some([-s.value - 1.0, -s.value + 1.0]),
                    unit: SavingUnit::CpuMsPerSec,
                    verdict: if s.verdict == Verdict::Saves {
                        Verdict::Saves
                    } else {
                        Verdict::NoMeasurableDifference
                    },
                })
            };
            Worth {
                basis: Basis::Live {
                    floor: mergetune_logic::pricing::floor::SavingFloor::from_percent_cpu(0.5),
                },
                scheduler: Some(Scheduler::MqDeadline),
                levels: [None, live(l1), live(l2), live(l3)],
                coverage_percent: 95.0,
                untrusted: false,
            }
        }),
        Just(Worth::unknown(UnknownWhy::NotMeasuredYet)),
    ]
}

fn arb_caps() -> impl Strategy<Value = Caps> {
    (any::<bool>(), any::<bool>(), any::<bool>(), arb_worth()).prop_map(|(f, s, seen, worth)| {
        Caps {
            sense_at_l3: seen,
            front_merges: f,
            simple_merges: s,
            worth,
        }
    })
}

/// The window's workload is one the state remembers as merge-hostile (typed: the
/// signatures, not the words of a reason).
fn known_hostile(s: &PolicyState, w: Option<&Window>) -> bool {
    w.is_some_and(|w| {
        let sig = Signature::of(w);
        s.history
            .known_hostile
            .iter()
            .any(|k| sig.changed_from(k).is_none())
    })
}

proptest! {
    #[test]
    fn invariants_hold(windows in proptest::collection::vec(arb_window(), 1..400),
                       step_ms in 200u64..120_000, caps in arb_caps()) {
        let (c, mut s) = start();
        let mut consecutive_low = 0u32;
        // Busy windows in a row at L0 in which not one bio merged.
        let mut consecutive_empty_at_l0 = 0u32;
        let mut downs: Vec<u64> = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            let now = (i as u64 + 1) * step_ms;
            let ev = decide(&s, w.as_ref(), caps, &c, now);
            // Deterministic: same input, same output.
            prop_assert_eq!(&ev, &decide(&s, w.as_ref(), caps, &c, now));
            // The tick's shortcut says what decide says. It is taken for an open window
            // everywhere but at L3, and for an idle window while merging.
            let mut held = s.clone();
            let reason = hold_without_deciding(&mut held, w.as_ref(), &c, now);
            let idle = w.is_some_and(|w| w.counters.bios() < c.min_window_bios);
            let expected = match w {
                None => s.mode() != Mode::AtL3,
                Some(_) => idle && s.mode() == Mode::Merging,
            };
            prop_assert_eq!(reason.is_some(), expected, "{:?} {:?}", s.mode(), w);
            if let Some(reason) = reason {
                let shortcut = Evaluation { state: held, kind: OutcomeKind::Hold, to_level: None, reason };
                prop_assert_eq!(&shortcut, &ev);
            }
            prop_assert!(ev.state.history.backoff_ms >= c.probe_initial_backoff_secs * 1000);
            prop_assert!(ev.state.history.backoff_ms <= c.probe_max_backoff_secs * 1000);
            prop_assert!(ev.state.level() <= Level::DEEPEST);
            // No blind level: L3 only with a bio tap.
            if !caps.sense_at_l3 { prop_assert!(ev.state.level() <= Level::L2); }
            // Only rungs the device has.
            if ev.state.level() == Level::L1 { prop_assert!(caps.front_merges); }
            if ev.state.level() == Level::L2 { prop_assert!(caps.simple_merges); }
            if ev.kind == OutcomeKind::TrialStart {
                prop_assert_eq!(ev.to_level, Some(Level::L2));
                prop_assert!(caps.simple_merges);
            }
            // L3 and Off go together.
            prop_assert_eq!(ev.state.level() == Level::L3, ev.state.mode() == Mode::AtL3);
            // Priced: a step down only toward a level the device has that saves
            // measurably (the rungs on the way to it may be taken); "not worth it" writes
            // nothing.
            if let Some(l) = ev.to_level && l > s.level() {
                prop_assert!(
                    Level::ALL.iter().filter(|m| **m >= l && caps.has(**m)).any(|m| caps.worth.worth(*m)),
                    "{:?} to {} with {:?}: {}", ev.kind, l, caps.worth, ev.reason
                );
            }
            if ev.kind == OutcomeKind::NotWorthIt { prop_assert_eq!(ev.to_level, None); }
            // At L3, a tap sample of at least the minimum size that is mostly mergeable
            // brings merging back when the one before it was too (`TAP_CONFIRM_SAMPLES`),
            // and is said when it is the first; a smaller one is not judged.
            if s.mode() == Mode::AtL3
                && let Some(sn) = w.as_ref().and_then(|w| w.sensed)
                && sn.bios > 0
                && caps.sense_at_l3
                && caps.worth.worth(Level::L3)
                && c.disabled_nomerges >= 2
            {
                let share = sn.mergeable as f64 / sn.bios as f64;
                let judged = sn.bios >= sensed_min_bios(&c);
                let before = match &s.phase { Phase::AtL3(at) => at.tap_high_samples, _ => 0 };
                if judged && share >= c.enable_above_percent / 100.0 {
                    if before + 1 >= TAP_CONFIRM_SAMPLES || share >= TAP_DECISIVE_SHARE {
                        prop_assert_eq!((ev.kind, ev.to_level), (OutcomeKind::Enable, Some(Level::L0)), "{}", ev.reason);
                    } else {
                        prop_assert!(matches!(ev.reason, Reason::SensedOnce { .. }), "{}", ev.reason);
                    }
                }
                if !judged {
                    // Not judged: the same decision as without the sample.
                    let mut unsampled = (*w).unwrap();
                    unsampled.sensed = None;
                    prop_assert_eq!(&ev, &decide(&s, Some(&unsampled), caps, &c, now));
                }
            }
            let hostile_before = known_hostile(&s, w.as_ref());
            if s.mode() == Mode::Merging {
                if let Some(w) = w
                    && w.counters.bios() >= c.min_window_bios
                {
                    if w.counters.merge_ratio() < c.disable_below_percent / 100.0 {
                        consecutive_low += 1;
                    } else {
                        consecutive_low = 0;
                    }
                    if s.level() == Level::L0 && w.counters.merged() == 0 {
                        consecutive_empty_at_l0 += 1;
                    } else {
                        consecutive_empty_at_l0 = 0;
                    }
                }
                // From L0 straight to L3 only after enough busy windows in which nothing
                // merged at all, and only where L3 is watched by a tap and saves.
                let nothing_merged = s.level() == Level::L0
                    && consecutive_empty_at_l0 >= c.step_down_after_windows;
                // Never down without enough consecutive busy low windows.
                match ev.kind {
                    OutcomeKind::StepDown => prop_assert!(consecutive_low >= c.step_down_after_windows),
                    OutcomeKind::Disable if hostile_before => {
                        prop_assert!(consecutive_low >= c.step_down_after_windows.min(2))
                    }
                    OutcomeKind::Disable if nothing_merged => {
                        prop_assert!(caps.sense_at_l3 && caps.worth.worth(Level::L3), "{}", ev.reason)
                    }
                    OutcomeKind::Disable => {
                        prop_assert!(consecutive_low >= c.disable_after_windows)
                    }
                    _ => {}
                }
                if ev.to_level.is_some() {
                    consecutive_low = 0;
                    consecutive_empty_at_l0 = 0;
                }
                // Idle or missing windows never change anything.
                let idle = w.as_ref().is_none_or(|w| w.counters.bios() < c.min_window_bios);
                if idle {
                    prop_assert_eq!(ev.kind, OutcomeKind::Hold);
                }
                // Steps down are one rung at a time (a trial goes straight to L2, a
                // workload that settled at L3 before straight to L3, and so does L0 where
                // nothing merged).
                if let Some(l) = ev.to_level
                    && l > s.level()
                    && ev.kind != OutcomeKind::TrialStart
                    && !(ev.kind == OutcomeKind::Disable && (hostile_before || nothing_merged))
                {
                    let (l, from) = (l.index(), s.level().index());
                    prop_assert!(l == from + 1 || (l > from + 1 && (from + 1..l).all(|m| (m == 1 && !caps.front_merges) || (m == 2 && !caps.simple_merges))));
                }
            } else {
                consecutive_low = 0;
                consecutive_empty_at_l0 = 0;
            }
            if let Some(l) = ev.to_level && l > s.level() {
                downs.push(now);
            }
            s = ev.state;
        }
        // Steps down never exceed the hourly cap in any hour.
        for (i, t) in downs.iter().enumerate() {
            let in_hour = downs[i..].iter().filter(|&&u| u - t < HOUR_MS).count();
            prop_assert!(in_hour as u32 <= c.max_changes_per_hour);
        }
    }
}

#[test]
fn a_trial_of_l2_stays_when_it_keeps_the_merges_and_backs_off_when_not() {
    let mut c = cfg();
    c.probe_windows = 1;
    c.trial_max_extra_requests_percent = 2.0;
    let caps = FULL;
    // Batched sequential: 94% merged at L0 and at L2 alike.
    let mut s = PolicyState::new(0, &c);
    let out = run(&mut s, caps, &c, 100_000, &[win(10_000, 9_400); 2]);
    assert_changes(&out, &[(OutcomeKind::TrialStart, Level::L2)]);
    let ev = decide(&s, Some(&win(10_000, 9_390)), caps, &c, 105_000);
    assert_eq!(ev.kind, OutcomeKind::TrialSucceeded, "{}", ev.reason);
    s = ev.state;
    // Verified L2: a high ratio there is no reason to go back to L0.
    let out = run(&mut s, caps, &c, 105_000, &[win(10_000, 9_400); 10]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    assert_eq!(s.level(), Level::L2);

    // Unbatched sequential that only the elevator merges: L2 loses them.
    let mut s = PolicyState::new(0, &c);
    run(&mut s, caps, &c, 100_000, &[win(10_000, 9_000); 2]);
    assert_eq!(s.mode(), Mode::Trial);
    let ev = decide(&s, Some(&win(10_000, 1_000)), caps, &c, 104_000);
    assert_move(&ev, OutcomeKind::TrialFailed, Some(Level::L0));
    assert_matches!(
        ev.reason,
        Reason::TrialLostMerges {
            back: Level::L0,
            ..
        }
    );
    s = ev.state;
    assert_eq!(
        s.history.next_trial_at_ms,
        104_000 + 120_000,
        "backoff doubled"
    );
    // No new trial before then.
    let out = run(&mut s, caps, &c, 104_000, &[win(10_000, 9_000); 20]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold));
}

#[test]
fn a_workload_change_at_l3_probes_at_once() {
    let c = cfg();
    let caps = BARE;
    let mut s = PolicyState::new(0, &c);
    // Random reads at 5000 bios/s take the device to L3.
    let rnd = reads_at(5000);
    run(&mut s, caps, &c, 100_000, &[rnd; 3]);
    assert_eq!(s.level(), Level::L3);
    // The same workload: nothing until the timer.
    let out = run(&mut s, caps, &c, 103_000, &[rnd; 10]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold));
    // A backup starts: 15,000 sequential write bios/s, unmerged at L3.
    let backup = writes_at(15_000, 1000);
    let ev = decide(&s, Some(&backup), caps, &c, 114_000);
    assert_move(&ev, OutcomeKind::ProbeStart, Some(Level::L0));
    assert_matches!(ev.reason, Reason::ProbeOnChange { .. });
    // The probe finds nothing (it was random after all): back to L3 without doubling the
    // timed backoff, and the new workload is the new baseline.
    let mut s = ev.state;
    let out = run(&mut s, caps, &c, 114_000, &[backup, backup]);
    assert_eq!(out[1].1, OutcomeKind::ProbeFailed);
    assert_eq!(s.history.backoff_ms, 60_000);
    let out = run(&mut s, caps, &c, 116_000, &[backup; 5]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
}

/// Random 4 KiB writes at `bios_per_sec`, over a `duration_ms` window (the watch's 100 ms
/// windows at L3).
/// A signature is the window's rate, its share of reads and its mean bio size; another
/// workload is one whose read share moved by 20 points, bio size by 2x or rate by 1.5x.
#[test]
fn a_signature_is_rate_read_share_and_bio_size_and_each_tells_a_workload_change() {
    let w = Window {
        counters: Counters {
            reads_completed: 250,
            sectors_read: 250 * 8,
            writes_completed: 750,
            sectors_written: 750 * 64,
            ..Default::default()
        },
        duration_ms: 500,
        sensed: None,
    };
    let sig = Signature::of(&w);
    assert_eq!(
        (sig.bios_per_sec, sig.read_share, sig.sectors_per_bio),
        (2000.0, 0.25, 50.0)
    );
    let base = Signature {
        bios_per_sec: 5000.0,
        read_share: 0.5,
        sectors_per_bio: 8.0,
    };
    let with = |f: fn(&mut Signature)| {
        let mut s = base;
        f(&mut s);
        s.changed_from(&base)
    };
    // What changed, by kind ("none" when nothing did).
    let kind = |f: fn(&mut Signature)| match with(f) {
        None => "none",
        Some(SignatureChange::Rate { .. }) => "rate",
        Some(SignatureChange::ReadShare { .. }) => "read share",
        Some(SignatureChange::BioSize { .. }) => "bio size",
    };
    assert_eq!(kind(|s| s.read_share = 0.69), "none");
    assert_eq!(kind(|s| s.read_share = 0.75), "read share");
    assert_eq!(kind(|s| s.sectors_per_bio = 15.9), "none");
    assert_eq!(kind(|s| s.sectors_per_bio = 16.0), "bio size");
    assert_eq!(kind(|s| s.sectors_per_bio = 4.0), "bio size");
    assert_eq!(kind(|s| s.bios_per_sec = 7499.0), "none");
    assert_eq!(kind(|s| s.bios_per_sec = 7500.0), "rate");
    // A rate that went to nothing is a change (infinitely), and nothing against nothing is not.
    assert_eq!(kind(|s| s.bios_per_sec = 0.0), "rate");
    let idle = Signature {
        bios_per_sec: 0.0,
        ..base
    };
    assert_eq!(idle.changed_from(&idle), None);
}

/// A 1 s window of random 4 KiB reads at `bios_per_sec`.
fn reads_at(bios_per_sec: u64) -> Window {
    reads_merging_at(bios_per_sec, 0)
}

/// A second of 4 KiB reads, `bios_per_sec` bios of which `merged` merged.
fn reads_merging_at(bios_per_sec: u64, merged: u64) -> Window {
    Window {
        counters: Counters {
            reads_completed: bios_per_sec - merged,
            reads_merged: merged,
            sectors_read: bios_per_sec * 8,
            ..Default::default()
        },
        duration_ms: 1000,
        sensed: None,
    }
}

fn writes_at(bios_per_sec: u64, duration_ms: u64) -> Window {
    let bios = bios_per_sec * duration_ms / 1000;
    Window {
        counters: Counters {
            writes_completed: bios,
            sectors_written: bios * 8,
            ..Default::default()
        },
        duration_ms,
        sensed: None,
    }
}

/// Feeds one `duration_ms` window after another from `t0`; returns the outcomes.
fn watch(
    s: &mut PolicyState,
    c: &PolicyConfig,
    t0: u64,
    windows: &[Window],
) -> Vec<(u64, OutcomeKind, Option<Level>, Reason)> {
    let mut out = Vec::new();
    let mut now = t0;
    for w in windows {
        now += w.duration_ms;
        let ev = decide(s, Some(w), BARE, c, now);
        out.push((now, ev.kind, ev.to_level, ev.reason));
        *s = ev.state;
    }
    out
}

/// The test config, and a device without a tap that random writes at `bios_per_sec` took
/// to L3 within `windows` 1 s windows from t = 100 s.
fn at_l3_writing_at(bios_per_sec: u64, windows: usize) -> (PolicyConfig, PolicyState) {
    let (c, mut s) = start();
    run(
        &mut s,
        BARE,
        &c,
        100_000,
        &vec![writes_at(bios_per_sec, 1000); windows],
    );
    assert_eq!(s.level(), Level::L3);
    (c, s)
}

/// A tap's sample of 1000 bios, `mergeable` of them mergeable, taken in `w`.
fn sampled(mut w: Window, mergeable: u64) -> Window {
    w.sensed = Some(Sensed {
        bios: 1000,
        mergeable,
        front_mergeable: 0,
        sampled_ms: 100,
    });
    w
}

/// At L3, feeds `w` from `t0` until the policy changes the level. A change in rate alone
/// counts once it has lasted `RATE_CHANGE_CONFIRM_MS`, and then the tap's next sample
/// answers it: one neither clearly low nor calling for merging (3% mergeable) leaves it to
/// a probe. Returns the evaluation that changed the level, and its time.
fn until_a_probe(s: &PolicyState, c: &PolicyConfig, w: Window, t0: u64) -> (Evaluation, u64) {
    let mut s = s.clone();
    let mut now = t0;
    for _ in 0..200 {
        now += w.duration_ms;
        let ev = decide(&s, Some(&w), BARE, c, now);
        if matches!(ev.reason, Reason::RateChangeAwaitsTap { .. }) {
            now += w.duration_ms;
            return (decide(&ev.state, Some(&sampled(w, 30)), BARE, c, now), now);
        }
        if ev.kind != OutcomeKind::Hold {
            return (ev, now);
        }
        s = ev.state;
    }
    panic!("no probe: {s:?}");
}

/// The windows of 100 ms that cover the time at L3 during which the rate only sets the
/// baseline (`RATE_BASELINE_MS`).
fn settling(w: Window) -> Vec<Window> {
    vec![w; (RATE_BASELINE_MS / w.duration_ms) as usize]
}

/// At L3 a fall in rate alone is what CPU contention does to a CPU-bound device (measured
/// on a loop device: one 100 ms window at 0.56x the one before, nothing else changed; with
/// two busy loops beside fio, falls of 0.55-0.65x lasting over a second). It never probes
/// on its own: until it has lasted `RATE_CHANGE_CONFIRM_MS` (1 s) it is no change at all,
/// and after that the bio tap's next sample answers it: a low one makes the slower rate
/// the baseline, with no excursion; a mergeable one brings merging back.
#[test]
fn at_l3_a_fall_in_rate_alone_is_answered_by_the_tap_not_by_a_probe() {
    let (c, mut s) = at_l3_writing_at(190_000, 3);
    let (steady, dip) = (writes_at(190_000, 100), writes_at(106_000, 100));
    let n = (RATE_CHANGE_CONFIRM_MS / 100) as usize;
    // The rate at L3 is measured there first.
    let out = watch(&mut s, &c, 103_000, &settling(steady));
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    // Dips one window short of the confirmation, then the rate is back: nothing said but
    // the dip.
    let mut dips = Vec::new();
    for _ in 0..3 {
        dips.extend(vec![dip; n - 1]);
        dips.push(steady);
    }
    let t0 = 103_000 + RATE_BASELINE_MS;
    let out = watch(&mut s, &c, t0, &dips);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    assert!(
        matches!(out[0].3, Reason::ChangeUnconfirmed(_)),
        "{}",
        out[0].3
    );
    assert!(
        matches!(&s.phase, Phase::AtL3(at) if at.changed_since_ms.is_none()),
        "the steady window clears it: {:?}",
        s.phase
    );
    // A fall that lasts: no probe, however long, until the tap has a sample.
    let t0 = out.last().unwrap().0;
    let out = watch(&mut s, &c, t0, &vec![dip; 3 * n]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    assert!(
        matches!(
            out[n - 1].3,
            Reason::RateChangeAwaitsTap { from_per_sec, to_per_sec, .. }
                if from_per_sec == 190_000.0 && to_per_sec == 106_000.0
        ),
        "{}",
        out[n - 1].3
    );
    assert!(
        out[n - 1].3.to_string().starts_with(
            "at L3 the rate changed (bios/s 190000 -> 106000) for 1s, the same shape: the bio tap's next sample says"
        ),
        "{}",
        out[n - 1].3
    );
    let t = out.last().unwrap().0;
    // A mergeable sample brings merging back; a random one answers the fall at L3.
    let ev = decide(&s, Some(&sampled(dip, 900)), BARE, &c, t + 100);
    assert_eq!(ev.to_level, Some(Level::L0), "{}", ev.reason);
    let ev = decide(&s, Some(&sampled(dip, 1)), BARE, &c, t + 100);
    assert_eq!(ev.to_level, None, "{}", ev.reason);
    assert_matches!(ev.reason, Reason::ChangeAnsweredByTap(_));
    // The slower rate is the baseline now: the next window is no change.
    let s = ev.state;
    let again = decide(&s, Some(&dip), BARE, &c, t + 200);
    assert_matches!(again.reason, Reason::AtL3 { .. });
}

/// The baseline climbs with the rate seen at L3, a window at a time (each under 1.5x the
/// last): L3 reached while another process held the CPU, its end is no new workload. A
/// jump of 1.5x or more in one window still is.
#[test]
fn at_l3_the_rate_baseline_climbs_with_the_rate_seen_there() {
    let (c, mut s) = at_l3_writing_at(50_000, 3);
    let mut climb = settling(writes_at(50_000, 100));
    climb.extend([70_000, 100_000, 140_000].map(|r| writes_at(r, 100)));
    let out = watch(&mut s, &c, 103_000, &climb);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    let (ev, _) = until_a_probe(&s, &c, writes_at(210_000, 100), out.last().unwrap().0);
    assert_eq!(ev.kind, OutcomeKind::ProbeStart, "{}", ev.reason);
}

/// A device bound by its submitting CPU speeds up at L3 over seconds, not in one window:
/// while L3 is new (`RATE_BASELINE_MS`) every window of the same shape raises the
/// baseline, so the daemon's own step is no new workload (seen in a 6.12 guest: a probe
/// 2 s after the step, on 42480 -> 67930 bios/s). After that a rise is judged again.
#[test]
fn at_l3_the_speed_up_the_step_itself_brings_is_no_new_workload() {
    let (c, mut s) = at_l3_writing_at(42_480, 3);
    let entered = s.history.since_ms;
    // The first windows at L3 (the freeze, then the rate it came with), and 2 s in, 67930,
    // which lasts past the time the baseline is set in.
    let mut ramp = vec![writes_at(30_000, 100)];
    ramp.extend(vec![writes_at(42_480, 100); 19]);
    ramp.extend(vec![
        writes_at(67_930, 100);
        (RATE_BASELINE_MS / 100) as usize
    ]);
    let out = watch(&mut s, &c, entered, &ramp);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    assert!(
        out.iter().all(|o| matches!(o.3, Reason::AtL3 { .. })),
        "{out:?}"
    );
    // Settled at 67930: 1.5x that is a new workload.
    let (ev, _) = until_a_probe(&s, &c, writes_at(102_000, 100), out.last().unwrap().0);
    assert_eq!(ev.kind, OutcomeKind::ProbeStart, "{}", ev.reason);
}

/// The rate L3 was entered with is replaced, not kept as a floor: a device that runs slower
/// at L3 than the window that led there (a burst in that window) has not fallen.
#[test]
fn at_l3_a_rate_lower_than_the_entry_is_no_fall() {
    let (c, mut s) = at_l3_writing_at(100_000, 2);
    let out = watch(&mut s, &c, 103_000, &[writes_at(60_000, 100); 15]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    assert!(
        out.iter().all(|o| matches!(o.3, Reason::AtL3 { .. })),
        "{out:?}"
    );
}

/// Each fall is confirmed on its own: one that lasted and made a known workload the
/// baseline does not confirm the next fall, which waits its own second.
#[test]
fn at_l3_a_fall_right_after_a_confirmed_one_waits_its_own_second() {
    let c = cfg();
    let (a, b, third) = (
        writes_at(100_000, 100),
        writes_at(60_000, 100),
        writes_at(36_000, 100),
    );
    // Known merge-hostile: A (the way in) and B (a probe that found nothing).
    let n = (RATE_CHANGE_CONFIRM_MS / 100) as usize;
    let mut s = PolicyState::new(0, &c);
    run(&mut s, BARE, &c, 100_000, &[writes_at(100_000, 1000); 3]);
    let t = 103_000 + RATE_BASELINE_MS;
    watch(&mut s, &c, 103_000, &settling(a));
    let (ev, t) = until_a_probe(&s, &c, writes_at(200_000, 100), t);
    assert_eq!(ev.kind, OutcomeKind::ProbeStart, "{}", ev.reason);
    s = ev.state;
    watch(&mut s, &c, t, &[b; 2]);
    assert_eq!(s.level(), Level::L3);
    let t = t + 200;
    watch(&mut s, &c, t, &settling(a));
    // B again, for a second: a known workload, so no probe once the fall is confirmed.
    let t = t + RATE_BASELINE_MS;
    let out = watch(&mut s, &c, t, &vec![b; n]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    assert!(
        matches!(out[n - 1].3, Reason::KnownHostileChange { .. }),
        "{}",
        out[n - 1].3
    );
    // B is the baseline now: its next window is no change at all.
    let t = t + RATE_CHANGE_CONFIRM_MS + 100;
    let again = decide(&s, Some(&b), BARE, &c, t);
    assert_matches!(again.reason, Reason::AtL3 { .. });
    // At once a third rate, 1/1.67 of B's: a fall of its own, not yet confirmed.
    let ev = decide(&s, Some(&third), BARE, &c, t);
    assert!(
        matches!(&ev.reason, Reason::ChangeUnconfirmed(c) if c.lasted_ms == 100),
        "{}",
        ev.reason
    );
}

/// A change of shape (something new submitting I/O) probes with its first window, counted
/// from the first window at L3. A change in rate alone is what CPU contention and its end
/// look like (random reads at full rate beside two busy loops: `bios/s 84720 -> 154360` in
/// 50 ms windows, four probes in 90 s that each found 0.0% merging; four busy null_blk
/// devices on 2 emulated vCPUs: rises of 3.4-3.8x): it never probes. It asks the bio tap
/// from its first window, whose sample brings merging back when it sees mergeable I/O; a
/// rise under 3x counts once it has lasted `RATE_CHANGE_CONFIRM_MS`, one of 3x or more at
/// once, and then a clearly low sample answers it.
#[test]
fn at_l3_a_change_of_shape_probes_at_once_and_a_change_of_rate_asks_the_tap() {
    let c = cfg();
    let mut at_l3 = PolicyState::new(0, &c);
    run(
        &mut at_l3,
        BARE,
        &c,
        100_000,
        &[writes_at(100_000, 1000); 3],
    );
    assert_eq!(at_l3.level(), Level::L3);
    let rise = writes_at(160_000, 50);
    // The same fall in rate, but the bio size doubles (a larger-block job took over).
    let mut bigger = writes_at(60_000, 50);
    bigger.counters.sectors_written *= 2;
    // A fall in rate with reads appearing (a scan started beside the writes).
    let mut with_reads = writes_at(60_000, 50);
    with_reads.counters.reads_completed = with_reads.counters.writes_completed / 2;
    with_reads.counters.sectors_read = with_reads.counters.reads_completed * 8;
    let probes = |s: &PolicyState, w: &Window, now: u64| {
        let ev = decide(s, Some(w), BARE, &c, now);
        (ev.kind, ev.to_level) == (OutcomeKind::ProbeStart, Some(Level::L0))
    };
    // Just arrived: the shape is judged against the window L3 was entered with, and a
    // change of shape counts with its first window.
    for w in [bigger, with_reads] {
        assert!(probes(&at_l3, &w, 103_050), "{w:?}");
    }
    let mut settled = at_l3.clone();
    let out = watch(
        &mut settled,
        &c,
        103_000,
        &settling(writes_at(100_000, 100)),
    );
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    let t = 103_000 + RATE_BASELINE_MS;
    // A rise in 50 ms windows, for just under a second: said, never a probe.
    let k = (RATE_CHANGE_CONFIRM_MS / 50) as usize - 1;
    let mut s = settled.clone();
    let out = watch(&mut s, &c, t, &vec![rise; k]);
    assert!(
        out.iter().all(|o| o.1 == OutcomeKind::Hold
            && matches!(o.3, Reason::ChangeUnconfirmed(_))
            && o.3.asks_the_tap()),
        "{out:?}"
    );
    // Lasting, it waits for the tap: a clearly low sample makes it the baseline, no probe.
    let out = watch(&mut s, &c, t + 50 * k as u64, &[rise; 4]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    assert!(
        matches!(out[0].3, Reason::RateChangeAwaitsTap { .. }),
        "{}",
        out[0].3
    );
    let ev = decide(&s, Some(&sampled(rise, 1)), BARE, &c, t + 5000);
    assert_eq!(ev.to_level, None, "{}", ev.reason);
    assert_matches!(ev.reason, Reason::ChangeAnsweredByTap(_));
    // A change of shape probes with its first window.
    for w in [bigger, with_reads] {
        assert!(probes(&settled, &w, t + 50), "{w:?}");
    }
    // A rise of 3x or more counts with its first window, and asks the tap, not a probe.
    let tripled = writes_at(300_000, 50);
    let ev = decide(&settled, Some(&tripled), BARE, &c, t + 50);
    assert_eq!(ev.to_level, None, "{}", ev.reason);
    assert!(
        matches!(ev.reason, Reason::RateChangeAwaitsTap { .. }) && ev.reason.asks_the_tap(),
        "{}",
        ev.reason
    );
    // The tap's answer in the next window: clearly low, it stays at L3; mergeable I/O
    // (half the bios or more needs no second sample) brings merging back.
    let mut asked = settled.clone();
    watch(&mut asked, &c, t + 50, &[tripled]);
    let ev = decide(&asked, Some(&sampled(tripled, 1)), BARE, &c, t + 150);
    assert_matches!(ev.reason, Reason::ChangeAnsweredByTap(_));
    let ev = decide(&asked, Some(&sampled(tripled, 600)), BARE, &c, t + 150);
    assert_eq!(ev.to_level, Some(Level::L0), "{}", ev.reason);
}

/// A sample of the tap opened before a change began holds the old workload's bios: it
/// does not answer the change (it would call a scan merge-hostile from the random reads
/// before it). One taken since does.
#[test]
fn at_l3_a_tap_sample_older_than_the_change_does_not_answer_it() {
    let (c, mut s) = start();
    run(&mut s, BARE, &c, 100_000, &[writes_at(100_000, 1000); 3]);
    assert_eq!(s.level(), Level::L3);
    let t = 103_000 + RATE_BASELINE_MS;
    watch(&mut s, &c, 103_000, &settling(writes_at(100_000, 100)));
    // The rise's first window (50 ms) carries a sample that was open for 100 ms: begun
    // before the change.
    let tripled = writes_at(300_000, 50);
    let ev = decide(&s, Some(&sampled(tripled, 1)), BARE, &c, t + 50);
    assert_matches!(ev.reason, Reason::RateChangeAwaitsTap { .. });
    // A change of shape with such a sample probes.
    let mut bigger = writes_at(60_000, 50);
    bigger.counters.sectors_written *= 2;
    let ev = decide(&s, Some(&sampled(bigger, 1)), BARE, &c, t + 50);
    assert_eq!(ev.kind, OutcomeKind::ProbeStart, "{}", ev.reason);
}

/// The rate L3 is entered with was measured at another level, and a CPU-bound device runs
/// faster at L3 (that is the saving): the rise is no new workload. Nor is the end of CPU
/// contention: the baseline is the fastest window seen at L3. The case is CI's
/// (2026-12-03, random 4 KiB writes on a loop device, mq-deadline): entered at 43706
/// bios/s from L2, 78370 at L3, a probe that found nothing and went back with its own L0
/// rate of 34695, then 66380.
#[test]
fn at_l3_the_rate_is_judged_only_against_rates_seen_at_l3() {
    let (c, mut s) = at_l3_writing_at(43_706, 2);
    // The first window holds the write's drain; then the device runs at its L3 rate, with
    // a 300 ms dip under contention.
    let mut windows = vec![writes_at(30_000, 100)];
    windows.extend([writes_at(78_370, 100); 3]);
    windows.extend([writes_at(45_000, 100); 3]);
    windows.extend([writes_at(78_370, 100); 3]);
    windows.extend(vec![writes_at(78_370, 100); 20]);
    let out = watch(&mut s, &c, 103_000, &windows);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    assert!(
        matches!(&s.phase, Phase::AtL3(at) if at.signature.is_some_and(|g| g.bios_per_sec == 78_370.0)),
        "{:?}",
        s.phase
    );
    // Something new at 1.5x the L3 rate is a change.
    let (ev, t) = until_a_probe(&s, &c, writes_at(117_600, 100), out.last().unwrap().0);
    assert_eq!(ev.kind, OutcomeKind::ProbeStart, "{}", ev.reason);
    // A probe that finds nothing goes back with the probe's L0 rate: no baseline either.
    let mut s = ev.state;
    let out = watch(&mut s, &c, t, &[writes_at(34_695, 200); 2]);
    assert_changes(&out, &[(OutcomeKind::ProbeFailed, Level::L3)]);
    let out = watch(&mut s, &c, t + 400, &[writes_at(66_380, 100); 35]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
}

#[test]
fn a_known_hostile_workload_goes_straight_to_l3() {
    let c = cfg();
    let caps = FULL;
    let rnd = reads_merging_at(5000, 10);
    // First time: the whole ladder, and the workload is remembered at L3.
    let mut s = PolicyState::new(0, &c);
    let out = run(&mut s, caps, &c, 100_000, &[rnd; 20]);
    assert_eq!(changes(&out).len(), 3, "{out:?}");
    assert_eq!(s.history.known_hostile.len(), 1);
    // Back at L0 (say a sequential phase came and went), the same workload returns:
    // two low windows and straight to L3.
    s.move_to_for_test(Level::L0, 200_000);
    let out = run(&mut s, caps, &c, 200_000, &[rnd; 3]);
    assert_changes(&out, &[(OutcomeKind::Disable, Level::L3)]);
    assert!(
        matches!(out[1].3, Reason::KnownHostileToL3(_)),
        "{}",
        out[1].3
    );
    // Its first timed probe is one backoff after the step.
    assert_eq!(out[1].0, 202_000);
    assert_eq!(
        s.next_probe_at_ms(),
        Some(202_000 + s.history.backoff_ms),
        "{out:?}"
    );
    // Another workload (twice the rate) walks the ladder again.
    let other = reads_merging_at(10_000, 20);
    let mut s2 = s.clone();
    s2.move_to_for_test(Level::L0, 300_000);
    let out = run(&mut s2, caps, &c, 300_000, &[other; 3]);
    assert_changes(&out, &[(OutcomeKind::StepDown, Level::L1)]);
}

#[test]
fn two_known_hostile_workloads_taking_turns_at_l3_do_not_probe() {
    let c = cfg();
    let caps = BARE;
    let (slow, fast) = (reads_at(5000), reads_at(15_000));
    let mut s = PolicyState::new(0, &c);
    run(&mut s, caps, &c, 100_000, &[slow; 3]);
    assert_eq!(s.level(), Level::L3);
    // The rate at L3, measured there; then the first switch to the faster rate is news:
    // probe, nothing found, back to L3.
    run(&mut s, caps, &c, 103_000, &[slow; 2]);
    let (ev, t) = until_a_probe(&s, &c, fast, 105_000);
    assert_eq!(ev.kind, OutcomeKind::ProbeStart, "{}", ev.reason);
    s = ev.state;
    let out = run(&mut s, caps, &c, t, &[fast; 2]);
    assert_changes(&out, &[(OutcomeKind::ProbeFailed, Level::L3)]);
    let t = t + 2000;
    assert_eq!(
        s.history.known_hostile.len(),
        2,
        "{:?}",
        s.history.known_hostile
    );
    // From now on the two take turns without a probe: both are known merge-hostile.
    let turns: Vec<Window> = (0..24)
        .map(|i| if i % 8 < 4 { slow } else { fast })
        .collect();
    let out = run(&mut s, caps, &c, t, &turns);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    assert!(
        out.iter()
            .any(|o| matches!(o.3, Reason::KnownHostileChange { .. })),
        "{out:?}"
    );
    // A third workload (a sequential scan, a larger bio) still probes once it lasts.
    let scan = Window {
        counters: Counters {
            reads_completed: 5000,
            sectors_read: 5000 * 64,
            ..Default::default()
        },
        duration_ms: 1000,
        sensed: None,
    };
    let (ev, _) = until_a_probe(&s, &c, scan, t + 24_000);
    assert_move(&ev, OutcomeKind::ProbeStart, Some(Level::L0));
}

/// A change at L3 that needs no probe of its own (to a known merge-hostile workload, or a
/// fall in rate not yet confirmed) holds, counting down to the timed probe; at the timed
/// probe's time it is the timed probe that runs.
#[test]
fn at_l3_a_change_that_needs_no_probe_holds_until_the_timed_probe_is_due() {
    let c = cfg();
    let (slow, fast) = (reads_at(5000), reads_at(15_000));
    // Both workloads known merge-hostile, the device at L3 with the fast one.
    let mut s = PolicyState::new(0, &c);
    run(&mut s, BARE, &c, 100_000, &[slow; 3]);
    run(&mut s, BARE, &c, 103_000, &[slow; 2]);
    let (ev, t) = until_a_probe(&s, &c, fast, 105_000);
    s = ev.state;
    run(&mut s, BARE, &c, t, &[fast; 2]);
    assert_eq!((s.level(), s.history.known_hostile.len()), (Level::L3, 2));
    let due = s.next_probe_at_ms().unwrap();
    run(&mut s, BARE, &c, due - 7000, &[fast; 2]);
    let mut lasting = s.clone();
    run(&mut lasting, BARE, &c, due - 5000, &[slow; 2]);
    let ev = decide(&lasting, Some(&slow), BARE, &c, due - 2000);
    assert_matches!(
        ev.reason,
        Reason::KnownHostileChange {
            next_probe_in_ms: 2000,
            ..
        }
    );
    let ev = decide(&s, Some(&slow), BARE, &c, due);
    assert_eq!(
        (ev.kind, &ev.reason),
        (
            OutcomeKind::ProbeStart,
            &Reason::TimedProbe {
                off_for_ms: due - s.history.since_ms,
                windows: c.probe_windows
            }
        )
    );

    // A fall in rate, not yet lasted 500 ms.
    let mut s = PolicyState::new(0, &c);
    run(&mut s, BARE, &c, 100_000, &[writes_at(190_000, 1000); 3]);
    let due = s.next_probe_at_ms().unwrap();
    run(&mut s, BARE, &c, due - 6000, &[writes_at(190_000, 1000); 2]);
    let dip = writes_at(106_000, 100);
    let ev = decide(&s, Some(&dip), BARE, &c, due - 3000);
    assert!(
        matches!(
            &ev.reason,
            Reason::ChangeUnconfirmed(c) if c.lasted_ms == 100 && c.next_probe_in_ms == 3000
        ),
        "{}",
        ev.reason
    );
    let ev = decide(&s, Some(&dip), BARE, &c, due);
    assert_matches!(ev.reason, Reason::TimedProbe { .. });
}

/// mq-deadline with every rung and a bio tap, priced by the shipped profile `name`.
fn priced(name: &str) -> Caps {
    let p = profile::builtin(name).unwrap();
    Caps::for_scheduler(Some(Scheduler::MqDeadline), true)
        .sensing(true)
        .priced(Worth::from_profile(&p, Some(Scheduler::MqDeadline)))
}

#[test]
fn on_the_measured_profile_merging_stays_on_and_says_why_once() {
    let c = cfg();
    let caps = priced(profile::MEASURED_NAME);
    let mut s = PolicyState::new(0, &c);
    let out = run(&mut s, caps, &c, 100_000, &[win(5000, 0); 40]);
    assert!(changes(&out).is_empty(), "no write: {out:?}");
    assert_eq!(s.level(), Level::L0);
    let said: Vec<_> = out
        .iter()
        .filter(|o| o.1 == OutcomeKind::NotWorthIt)
        .collect();
    assert_eq!(said.len(), 1, "a decision once, then holds: {out:?}");
    // Said when the step would have come (after step_down_after_windows low windows).
    assert_eq!(said[0].0, 102_000);
    assert_eq!(said[0].2, None);
    // With the numbers: the measured change of CPU per I/O and its interval, per level.
    let r = said[0].3.to_string();
    assert!(
        matches!(said[0].3, Reason::NotWorth { at: Level::L0, .. }),
        "{r}"
    );
    assert!(r.contains("L3 -6.1% [-25.6, +17.5]"), "{r}");
    assert!(r.contains("on mq-deadline"), "{r}");
    assert!(r.contains("staying at L0"), "{r}");
    assert!(
        matches!(out.last().unwrap().3, Reason::NotWorth { .. }),
        "the holds say it too"
    );
    // Merges seen again, then low again: said again once.
    let out = run(
        &mut s,
        caps,
        &c,
        140_000,
        &[win(5000, 500), win(5000, 0), win(5000, 0), win(5000, 0)],
    );
    let n = out
        .iter()
        .filter(|o| o.1 == OutcomeKind::NotWorthIt)
        .count();
    assert_eq!(n, 1, "{out:?}");
    // The trial of L2 needs L2 to save, too: merging that pays stays at L0.
    let mut s = PolicyState::new(0, &c);
    let out = run(&mut s, caps, &c, 200_000, &[win(10_000, 9_400); 10]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
}

#[test]
fn on_the_2008_profile_the_ladder_is_walked_as_without_a_profile() {
    let c = cfg();
    let windows = [win(5000, 0); 40];
    let mut a = PolicyState::new(0, &c);
    let with = run(
        &mut a,
        priced(profile::LKML_2008_NAME),
        &c,
        100_000,
        &windows,
    );
    let mut b = PolicyState::new(0, &c);
    let without = run(&mut b, FULL, &c, 100_000, &windows);
    assert_eq!(with, without);
    assert_eq!(a.level(), Level::L3);
    // And the trial of L2 (-16.25% there) is tried.
    let mut s = PolicyState::new(0, &c);
    let caps = priced(profile::LKML_2008_NAME);
    let out = run(&mut s, caps, &c, 100_000, &[win(10_000, 9_400); 2]);
    assert_eq!(changes(&out), vec![(OutcomeKind::TrialStart, Level::L2)]);
}

/// The measured profile with mq-deadline's L3 random cell made a clear saving.
fn l3_only_saves() -> CostProfile {
    let mut p = profile::builtin(profile::MEASURED_NAME).unwrap();
    for cell in &mut p.cells {
        if cell.scheduler.name() == "mq-deadline"
            && cell.level == Level::L3
            && cell.workload.to_string() == "random-unbatched"
        {
            cell.change_percent = Some(-8.0);
            cell.change_ci = Some([-12.0, -4.0]);
        }
    }
    p.validate().unwrap();
    p
}

#[test]
fn the_safe_rungs_are_walked_toward_a_level_that_saves() {
    let c = cfg();
    let worth = Worth::from_profile(&l3_only_saves(), Some(Scheduler::MqDeadline));
    assert!(!worth.worth(Level::L1) && !worth.worth(Level::L2) && worth.worth(Level::L3));
    let caps = Caps::for_scheduler(Some(Scheduler::MqDeadline), true)
        .sensing(true)
        .priced(worth);
    let mut s = PolicyState::new(0, &c);
    let out = run(&mut s, caps, &c, 100_000, &[few(5000); 40]);
    assert_eq!(changes(&out), WALK_TO_L3.to_vec());
    // Without a tap L3 cannot be rested at, and L1, L2 save nothing: stay at L0.
    let mut s = PolicyState::new(0, &c);
    let out = run(
        &mut s,
        caps.sensing(false),
        &c,
        100_000,
        &[win(5000, 0); 40],
    );
    assert!(changes(&out).is_empty(), "{out:?}");
    let r = &out
        .iter()
        .find(|o| o.1 == OutcomeKind::NotWorthIt)
        .unwrap()
        .3;
    // The levels weighed are L1 and L2, not the blind L3.
    assert_matches!(
        r,
        Reason::NotWorth {
            at: Level::L0,
            below: [false, true, true, false],
            ..
        }
    );
}

#[test]
fn a_level_no_longer_worth_it_is_left_for_l0() {
    // Reached on the 2008 profile, then the profile changes (a reload): L2 saves nothing.
    let (c, mut s) = start();
    let (lkml, measured) = (
        priced(profile::LKML_2008_NAME),
        priced(profile::MEASURED_NAME),
    );
    run(&mut s, lkml, &c, 100_000, &[few(5000); 4]);
    assert_eq!(s.level(), Level::L2);
    // The first busy window at L2 holds the write's queue freeze: nothing is judged on it.
    let first = decide(&s, Some(&win(5000, 0)), measured, &c, 105_000);
    assert_eq!(first.to_level, None, "{}", first.reason);
    // A device that has been at L2 a while leaves it at the next busy window.
    let mut s = first.state;
    run(&mut s, lkml, &c, 105_000, &[few(5000); 3]);
    assert_eq!(s.level(), Level::L2);
    let ev = decide(&s, Some(&win(5000, 0)), measured, &c, 109_000);
    assert_move(&ev, OutcomeKind::Enable, Some(Level::L0));
    assert_matches!(
        ev.reason,
        Reason::LeaveNotWorth {
            from: Level::L2,
            to: Level::L0,
            ..
        }
    );
}

#[test]
fn without_a_bio_tap_the_deepest_level_is_l2() {
    let (c, mut s) = start();
    let out = run(&mut s, Caps::FULL, &c, 100_000, &[win(5000, 0); 40]);
    assert_eq!(changes(&out), WALK_TO_L3[..2].to_vec());
    assert_eq!((s.level(), s.mode()), (Level::L2, Mode::Merging));
    let last = &out.last().unwrap().3;
    assert_matches!(
        last,
        Reason::DeepestAllowed {
            level: Level::L2,
            l3_blind: true,
            ..
        }
    );
    // none/kyber have no L2: they stay at L0.
    let mut s = PolicyState::new(0, &c);
    let out = run(&mut s, Caps::BARE, &c, 100_000, &[win(5000, 0); 40]);
    assert!(changes(&out).is_empty(), "{out:?}");
    // At L3 when the tap goes away (say tracefs was unmounted): up to L2 at once.
    let mut s = PolicyState::new(0, &c);
    run(&mut s, FULL, &c, 100_000, &[win(5000, 0); 40]);
    assert_eq!(s.level(), Level::L3);
    let ev = decide(&s, None, Caps::FULL, &c, 141_000);
    assert_move(&ev, OutcomeKind::Enable, Some(Level::L2));
    assert_eq!(ev.reason, Reason::BlindAtL3 { to: Level::L2 });
}

/// A device without L2 (none, kyber) that loses its tap at L3 goes back to L0, the only
/// other rung it has.
#[test]
fn at_l3_a_device_without_l2_that_loses_its_tap_goes_back_to_l0() {
    let (c, mut s) = start();
    run(&mut s, BARE, &c, 100_000, &[win(5000, 0); 40]);
    assert_eq!(s.level(), Level::L3);
    let ev = decide(&s, None, Caps::BARE, &c, 141_000);
    assert_move(&ev, OutcomeKind::Enable, Some(Level::L0));
    assert_eq!(ev.reason, Reason::BlindAtL3 { to: Level::L0 });
}

/// A window of random 4 KiB writes at 5000 bios/s whose tap sampled `bios` bios, of which
/// `mergeable` could have merged into a request not yet issued.
fn sensed(bios: u64, mergeable: u64) -> Window {
    Window {
        counters: Counters {
            writes_completed: 5000,
            sectors_written: 40_000,
            ..Default::default()
        },
        duration_ms: 1000,
        sensed: Some(Sensed {
            bios,
            mergeable,
            sampled_ms: 250,
            ..Default::default()
        }),
    }
}

/// The tap's call for merging counts only when it lasts: `TAP_CONFIRM_SAMPLES` samples in
/// a row at or over the high threshold bring merging back; a lone one (a burst over before
/// the next sample, or chance: 11-18% on fast random reads) holds and says so, and a
/// sample under the threshold starts the count again. One at `TAP_DECISIVE_SHARE` (50%)
/// or more brings merging back alone: chance does not make it, and a real stream loses
/// throughput while it waits. (A false call was L3 -> L0 -> L1 -> L2, four writes with
/// front_merges.)
#[test]
fn at_l3_sensed_mergeable_samples_in_a_row_step_up_and_a_lone_burst_does_not() {
    let c = cfg();
    assert_eq!(TAP_CONFIRM_SAMPLES, 2);
    let mut s = PolicyState::new(0, &c);
    run(&mut s, FULL, &c, 100_000, &[sensed(0, 0); 40]);
    assert_eq!(s.level(), Level::L3);
    // Same rate, same size, same read share: the counters see nothing. The tap does.
    let ev = decide(&s, Some(&sensed(1000, 20)), FULL, &c, 141_000);
    assert_eq!(
        ev.kind,
        OutcomeKind::Hold,
        "2% is not mergeable I/O: {}",
        ev.reason
    );
    // A lone burst: one sample at 11%, then the random load again, then one at 15%.
    let out = run(
        &mut s.clone(),
        FULL,
        &c,
        140_000,
        &[sensed(1000, 111), sensed(1000, 5), sensed(1000, 150)],
    );
    assert!(out.iter().all(|o| o.2.is_none()), "{out:?}");
    assert!(
        matches!(
            out[0].3,
            Reason::SensedOnce {
                samples: 1,
                of: 2,
                ..
            }
        ),
        "{}",
        out[0].3
    );
    // Two in a row: back to L0.
    let ev = decide(&s, Some(&sensed(1000, 111)), FULL, &c, 141_000);
    assert_move(&ev, OutcomeKind::Hold, None);
    let ev = decide(&ev.state, Some(&sensed(1000, 150)), FULL, &c, 142_000);
    assert_move(&ev, OutcomeKind::Enable, Some(Level::L0));
    assert_matches!(
        ev.reason,
        Reason::SensedMergeable { share, sampled: 1000, .. }
            if share == 0.15
    );
    // One decisive sample (94%) alone: back to L0.
    let decisive = decide(&s, Some(&sensed(1000, 940)), FULL, &c, 141_000);
    assert_eq!(decisive.to_level, Some(Level::L0), "{}", decisive.reason);
    assert_eq!(ev.state.mode(), Mode::Merging);
    // The workload L3 was entered with did not settle there: it is no longer remembered as
    // merge-hostile.
    assert_eq!(s.history.known_hostile.len(), 1);
    assert!(ev.state.history.known_hostile.is_empty());
    // The timer runs only at L3: status shows no next probe for a device back at L0 (the
    // flat state of before kept the old time, and status showed it).
    assert_eq!(s.next_probe_at_ms().map(|_| ()), Some(()));
    assert_eq!(ev.state.next_probe_at_ms(), None);
    // Too small a sample decides nothing (min_window_bios / 4 = 25 bios here).
    let ev = decide(&s, Some(&sensed(20, 20)), FULL, &c, 141_000);
    assert_eq!(ev.kind, OutcomeKind::Hold);
}

#[test]
fn at_l3_a_sample_of_exactly_the_minimum_is_judged_and_one_fewer_is_not() {
    let c = cfg();
    assert_eq!(sensed_min_bios(&c), 25);
    let mut s = PolicyState::new(0, &c);
    run(&mut s, FULL, &c, 100_000, &[sensed(0, 0); 40]);
    assert_eq!(s.level(), Level::L3);
    let ev = decide(&s, Some(&sensed(25, 25)), FULL, &c, 141_000);
    assert_eq!(
        (ev.kind, ev.to_level),
        (OutcomeKind::Enable, Some(Level::L0)),
        "25 of 25 mergeable, the minimum: {}",
        ev.reason
    );
    let out = run(&mut s, FULL, &c, 140_000, &[sensed(24, 24); 2]);
    assert!(
        out.iter()
            .all(|o| o.1 == OutcomeKind::Hold && !matches!(o.3, Reason::SensedOnce { .. })),
        "24 bios: {out:?}"
    );
}

#[test]
fn at_l3_a_clearly_low_sensed_share_answers_the_probe() {
    let (c, mut s) = start();
    run(&mut s, FULL, &c, 100_000, &[sensed(0, 0); 40]);
    let due = s.next_probe_at_ms().unwrap();
    // The timed probe with a sample showing 0.5% mergeable: no excursion to L0.
    let ev = decide(&s, Some(&sensed(1000, 5)), FULL, &c, due);
    assert_eq!(ev.kind, OutcomeKind::Hold, "{}", ev.reason);
    assert_matches!(ev.reason, Reason::AnsweredByTap { sampled: 1000, .. });
    assert_eq!(
        ev.state.next_probe_at_ms(),
        Some(due + s.history.backoff_ms)
    );
    // Without a sample the probe goes to L0 as ever.
    let ev = decide(&s, Some(&sensed(0, 0)), FULL, &c, due);
    assert_move(&ev, OutcomeKind::ProbeStart, Some(Level::L0));
}

/// At L3 the hold counts down to the timed probe, and only a sample under the low
/// threshold answers it: one exactly at it is not "clearly low", so the probe goes to L0.
#[test]
fn at_l3_the_hold_counts_down_and_a_sample_at_the_low_threshold_does_not_answer_the_probe() {
    let (c, mut s) = start();
    run(&mut s, FULL, &c, 100_000, &[sensed(0, 0); 40]);
    let due = s.next_probe_at_ms().unwrap();
    let ev = decide(&s, Some(&sensed(0, 0)), FULL, &c, due - 1500);
    assert_eq!(
        ev.reason,
        Reason::AtL3 {
            next_probe_in_ms: 1500
        }
    );
    // 10 of 1000 is 1.0%, the low threshold itself.
    let ev = decide(&s, Some(&sensed(1000, 10)), FULL, &c, due);
    assert_move(&ev, OutcomeKind::ProbeStart, Some(Level::L0));
    let ev = decide(&s, Some(&sensed(1000, 9)), FULL, &c, due);
    assert_matches!(ev.reason, Reason::AnsweredByTap { sampled: 1000, .. });
}

/// The same workload as [`sensed`], at L0: `merged` of its 5000 bios merged.
fn writes_merged(merged: u64) -> Window {
    Window {
        counters: Counters {
            writes_completed: 5000 - merged,
            writes_merged: merged,
            sectors_written: 40_000,
            ..Default::default()
        },
        duration_ms: 1000,
        sensed: None,
    }
}

/// The tap at L3 calls for merging (15% of its sample mergeable) at `t` and again a second
/// later (`TAP_CONFIRM_SAMPLES`): back to L0. Returns the time of the call that brought merging back.
fn tap_calls(s: &mut PolicyState, caps: Caps, c: &PolicyConfig, t: u64) -> u64 {
    let out = run(s, caps, c, t - 1000, &[sensed(400, 60); 2]);
    assert_changes(&out, &[(OutcomeKind::Enable, Level::L0)]);
    t + 1000
}

/// The tap at L3 calls for merging (a sequential stream: every bio starts where one ended),
/// but at L0 the counters show merging finds next to nothing (a neighbour already
/// dispatched cannot merge). Without a hold-off the known workload went straight back to
/// L3 and the tap called again: L0 -> L3 -> L0 every two windows. Not borne out, steps to
/// L3 wait a hold-off (60 s, doubled at each such call in a row, up to the probes' longest
/// backoff); the device stays where the counters still see.
#[test]
fn a_tap_call_the_counters_do_not_bear_out_holds_off_l3_and_doubles() {
    let (c, mut s) = start();
    run(&mut s, BARE, &c, 100_000, &[writes_merged(0); 2]);
    assert_eq!(s.level(), Level::L3);
    let mut t = 102_000;
    let mut held_s = Vec::new();
    for _ in 0..4 {
        // The tap calls.
        t = tap_calls(&mut s, BARE, &c, t + 1000);
        // At L0 the counters find 0.5%, window after window: not borne out. BARE has no
        // L1 or L2, so the device holds at L0 until the hold-off is over.
        let first_at_l0 = t + 1000;
        let mut said_held = false;
        loop {
            t += 1000;
            let ev = decide(&s, Some(&writes_merged(25)), BARE, &c, t);
            s = ev.state;
            if ev.to_level.is_some() {
                assert_eq!(ev.to_level, Some(Level::L3), "{}", ev.reason);
                break;
            }
            said_held |= matches!(
                ev.reason,
                Reason::L3HeldOff {
                    level: Level::L0,
                    ..
                }
            );
            assert!(t < first_at_l0 + 600_000, "never back to L3");
        }
        assert!(said_held);
        held_s.push((t - first_at_l0) / 1000);
    }
    // Held for the hold-off from the first window at L0 (where the call was found not
    // borne out), then the known workload's low windows had long been counted: back to
    // L3 at once. 60 s, doubled, up to probe_max_backoff_secs (240 s here).
    assert_eq!(held_s, vec![60, 120, 240, 240]);
    let said = Reason::L3HeldOff {
        level: Level::L2,
        remaining_ms: 42_000,
    }
    .to_string();
    assert!(
        said.contains("at L2, no step down toward L3 for another 42s"),
        "{said}"
    );
}

/// A tap call the counters bear out (merges over the low threshold at L0) resets the
/// hold-off. One they do not bear out walks no rung while L3 is held off (L0 showed what
/// merging finds; each rung would be a write: a false call was L3 -> L0 -> L1 -> L2), and
/// the workload, remembered as merge-hostile, goes straight back to L3 after it.
#[test]
fn a_tap_call_borne_out_resets_the_holdoff_and_one_not_borne_out_walks_no_rung() {
    let (c, mut s) = start();
    run(&mut s, FULL, &c, 100_000, &[writes_merged(0); 2]);
    assert_eq!(s.level(), Level::L3);
    let t = tap_calls(&mut s, FULL, &c, 103_000);
    let out = run(&mut s, FULL, &c, t, &[writes_merged(25); 30]);
    assert_eq!(changes(&out), vec![], "no rung while L3 waits: {out:?}");
    assert!(
        matches!(
            out.last().unwrap().3,
            Reason::L3HeldOff {
                level: Level::L0,
                remaining_ms: 31_000
            }
        ),
        "{}",
        out.last().unwrap().3
    );
    assert_eq!(
        s.history.tap_holdoff_ms, 120_000,
        "doubled for the next call"
    );
    // Past the hold-off: straight to L3 (a known workload), then a call the counters bear
    // out (30% merged at L0): the hold-off is back to its first length, and nothing is
    // held.
    let out = run(&mut s, FULL, &c, t + 30_000, &[writes_merged(25); 31]);
    assert_changes(&out, &[(OutcomeKind::Disable, Level::L3)]);
    assert!(
        matches!(out.last().unwrap().3, Reason::KnownHostileToL3(_)),
        "{}",
        out.last().unwrap().3
    );
    let t = tap_calls(&mut s, FULL, &c, t + 62_000);
    run(&mut s, FULL, &c, t, &[writes_merged(1500)]);
    assert_eq!(s.history.tap_holdoff_ms, 60_000);
    assert_eq!(s.history.l3_not_before_ms, 165_000, "the old one, past");
}

/// `min_window_bios` is the least a busy window holds: a window of exactly that many bios
/// is judged (here two of them, with nothing merged, take L0 to L3), one fewer is idle.
#[test]
fn a_window_of_exactly_min_window_bios_is_busy_and_one_fewer_is_idle() {
    let c = cfg();
    assert_eq!(c.min_window_bios, 100);
    let mut s = PolicyState::new(0, &c);
    let out = run(&mut s, FULL, &c, 100_000, &[win(99, 0); 5]);
    assert!(
        out.iter().all(|o| matches!(
            o.3,
            Reason::Idle {
                bios: 99,
                min_bios: 100
            }
        )),
        "{out:?}"
    );
    let out = run(&mut s, FULL, &c, 105_000, &[win(100, 0); 2]);
    assert_changes(&out, &[(OutcomeKind::Disable, Level::L3)]);
}

/// At the deepest level allowed, the hold says whether L3 is out of reach because it would
/// be blind (no tap, where the config allows L3) or because the config stops at L2
/// (`disabled_nomerges = 1`), with or without a tap.
#[test]
fn the_deepest_level_says_blind_only_where_the_config_allows_l3() {
    let mut c = cfg();
    let blind_at_l2 = |caps: Caps, c: &PolicyConfig| {
        let mut s = PolicyState::new(0, c);
        let out = run(&mut s, caps, c, 100_000, &[few(5000); 10]);
        assert_eq!(s.level(), Level::L2, "{out:?}");
        match out.last().unwrap().3 {
            Reason::DeepestAllowed { l3_blind, .. } => l3_blind,
            ref r => panic!("{r}"),
        }
    };
    assert!(blind_at_l2(Caps::FULL, &c), "no tap, L3 allowed: blind");
    c.disabled_nomerges = 1;
    assert!(
        !blind_at_l2(Caps::FULL, &c),
        "no tap, the config stops at L2"
    );
    assert!(!blind_at_l2(FULL, &c), "a tap, the config stops at L2");
}

/// An unknown saving is no verdict: it is its own decision, `saving_unknown`, said once
/// per run of low windows and never worded "not worth it"; "not worth it" is said once
/// more when the saving becomes known (still not worth it), and never again.
#[test]
fn saving_unknown_is_said_once_and_not_worth_it_once_more_known() {
    let c = cfg();
    let unknown = FULL.priced(Worth::unknown(UnknownWhy::NotMeasuredYet));
    let measured = priced(profile::MEASURED_NAME);
    let mut s = PolicyState::new(0, &c);
    let said = |out: &[(u64, OutcomeKind, Option<Level>, Reason)], kind| {
        out.iter().filter(|o| o.1 == kind).count()
    };
    let out = run(&mut s, unknown, &c, 100_000, &[few(5000); 6]);
    assert_eq!(said(&out, OutcomeKind::SavingUnknown), 1, "{out:?}");
    assert_eq!(said(&out, OutcomeKind::NotWorthIt), 0, "{out:?}");
    assert!(out.iter().all(|o| !o.3.contains("not worth it")), "{out:?}");
    let decision = out
        .iter()
        .find(|o| o.1 == OutcomeKind::SavingUnknown)
        .unwrap();
    assert!(
        decision.3.to_string().starts_with(
            "saving unknown: the merge path has not been sampled under this scheduler here yet"
        ),
        "{}",
        decision.3
    );
    assert_eq!(
        OutcomeKind::SavingUnknown
            .decision_kind()
            .map(|k| k.as_str()),
        Some("saving_unknown")
    );
    let out = run(&mut s, unknown, &c, 106_000, &[few(5000); 6]);
    assert_eq!(said(&out, OutcomeKind::SavingUnknown), 0, "{out:?}");
    let out = run(&mut s, measured, &c, 112_000, &[few(5000); 6]);
    assert_eq!(said(&out, OutcomeKind::NotWorthIt), 1, "known now: {out:?}");
    let out = run(&mut s, unknown, &c, 118_000, &[few(5000); 6]);
    assert_eq!(said(&out, OutcomeKind::NotWorthIt), 0, "{out:?}");
    assert_eq!(said(&out, OutcomeKind::SavingUnknown), 0, "{out:?}");
    assert_eq!(s.level(), Level::L0);
}

/// A probe that found merging rare but stayed at L0 for lack of worth, followed by a step
/// to L3 once the saving is priced worth it: the step says what changed (the saving, now),
/// rather than "not worth it here: staying at L0" and then L3 seconds later for no stated
/// reason. And a probe refused for an unknown saving says "unknown", not "not worth it".
#[test]
fn a_step_after_not_worth_it_says_what_changed() {
    let c = cfg();
    let unknown = FULL.priced(Worth::unknown(UnknownWhy::NotMeasuredYet));
    let measured = priced(profile::MEASURED_NAME);
    let lkml = priced(profile::LKML_2008_NAME);
    for (before, word) in [
        (measured, "L3 is not worth it here"),
        (unknown, "the saving at L3 is unknown"),
    ] {
        let (mut s, due) = in_a_probe_from_l3(FULL, &c, 2);
        let out = run(&mut s, before, &c, due, &[win(5000, 0); 2]);
        let failed = &out[1];
        assert_eq!(
            (failed.1, failed.2),
            (OutcomeKind::ProbeFailed, None),
            "{out:?}"
        );
        assert!(failed.3.contains(word), "{}", failed.3);
        // Priced now, and worth it: the step to L3 says so.
        let out = run(&mut s, lkml, &c, due + 2000, &[win(5000, 0); 20]);
        let step = out
            .iter()
            .find(|o| o.2 == Some(Level::L3))
            .expect("no step");
        assert_matches!(step.3, Reason::WorthChanged(_));
        assert!(step.3.contains("before; now L3 "), "{}", step.3);
    }
}

/// Capped before the step to L3, the hold counts the windows that step waits for.
#[test]
fn capped_before_l3_the_hold_counts_the_windows_of_that_step() {
    let c = two_changes_an_hour();
    let mut s = PolicyState::new(0, &c);
    let out = run(&mut s, FULL, &c, 100_000, &[few(5000); 10]);
    assert_eq!(s.level(), Level::L2, "{out:?}");
    let last = &out.last().unwrap().3;
    assert_matches!(
        last,
        Reason::CapReached {
            windows: Some(3),
            level: Level::L2,
            ..
        }
    );
    assert!(last.to_string().contains("for 3 windows"), "{last}");
}

/// A state stands for the nomerges value of its level (what the dry run compares with
/// the value it really left in place).
#[test]
fn a_state_stands_for_the_nomerges_of_its_level() {
    let (_, mut s) = start();
    let mut seen = Vec::new();
    for l in Level::ALL {
        s.move_to_for_test(l, 1000);
        seen.push((s.level(), s.nomerges()));
    }
    assert_eq!(
        seen,
        vec![
            (Level::L0, 0),
            (Level::L1, 0),
            (Level::L2, 1),
            (Level::L3, 2)
        ]
    );
}

/// A device remembers the last four workloads found merge-hostile: a fifth pushes out the
/// oldest, and a like one replaces its twin instead of taking a second place.
#[test]
fn the_known_merge_hostile_workloads_are_the_newest_four() {
    let (c, mut s) = start();
    let mut t = 100_000;
    for rate in [1000, 2000, 4000, 8000, 16_000, 16_000] {
        s.move_to_for_test(Level::L0, t);
        run(&mut s, FULL, &c, t, &[win(rate, 0); 2]);
        assert_eq!(s.level(), Level::L3, "{rate}");
        t += 10_000;
    }
    let known: Vec<f64> = s
        .history
        .known_hostile
        .iter()
        .map(|k| k.bios_per_sec)
        .collect();
    assert_eq!(known, vec![2000.0, 4000.0, 8000.0, 16_000.0]);
}

/// Every outcome but a hold is a decision the daemon logs and counts, each its own kind.
#[test]
fn every_outcome_but_a_hold_is_a_decision_of_its_own_kind() {
    use mergetune_logic::decision::DecisionKind as D;
    let kinds = [
        (OutcomeKind::Hold, None),
        (OutcomeKind::StepDown, Some(D::StepDown)),
        (OutcomeKind::Disable, Some(D::Disable)),
        (OutcomeKind::Enable, Some(D::Enable)),
        (OutcomeKind::ProbeStart, Some(D::Probe)),
        (OutcomeKind::ProbeSucceeded, Some(D::ProbeSucceeded)),
        (OutcomeKind::ProbeInconclusive, Some(D::ProbeInconclusive)),
        (OutcomeKind::ProbeFailed, Some(D::ProbeFailed)),
        (OutcomeKind::TrialStart, Some(D::Trial)),
        (OutcomeKind::TrialSucceeded, Some(D::TrialSucceeded)),
        (OutcomeKind::TrialFailed, Some(D::TrialFailed)),
        (OutcomeKind::NotWorthIt, Some(D::NotWorthIt)),
    ];
    for (outcome, kind) in kinds {
        assert_eq!(outcome.decision_kind(), kind, "{outcome:?}");
    }
}

/// `trial_max_extra_requests_percent = 0` turns trials of L2 off: merging that pays holds
/// at L0 however long it lasts.
#[test]
fn a_zero_trial_slack_turns_trials_off() {
    let mut c = cfg();
    c.trial_max_extra_requests_percent = 0.0;
    let mut s = PolicyState::new(0, &c);
    let out = run(&mut s, FULL, &c, 100_000, &[win(10_000, 9_400); 10]);
    assert!(changes(&out).is_empty(), "{out:?}");
    assert!(
        out.iter().all(|o| matches!(
            o.3,
            Reason::Pays {
                level: Level::L0,
                ..
            }
        )),
        "{out:?}"
    );
}

/// A change leaves the hourly cap's count exactly one hour after it was made, and not
/// before: with the cap at 2 and changes at 0 s and 30 s, a step is refused until 3600 s,
/// taken at 3600 s, and the next one refused again (30 s and 3600 s are in its hour).
#[test]
fn a_change_leaves_the_hourly_count_exactly_one_hour_later() {
    let c = two_changes_an_hour();
    let mut s = PolicyState::new(0, &c);
    s.history.changes = ChangesLastHour::from(vec![0, 30_000]);
    let out = run(&mut s, FULL, &c, HOUR_MS - 3000, &[few(5000); 2]);
    assert!(
        out.iter().all(|o| o.1 == OutcomeKind::Hold),
        "capped before the hour: {out:?}"
    );
    let out = run(&mut s, FULL, &c, HOUR_MS - 1000, &[few(5000)]);
    assert_eq!(out[0].0, HOUR_MS);
    assert_changes(&out, &[(OutcomeKind::StepDown, Level::L1)]);
    assert_eq!(s.history.changes.times_ms(), [30_000, HOUR_MS]);
    let out = run(&mut s, FULL, &c, HOUR_MS, &[few(5000); 3]);
    assert!(changes(&out).is_empty(), "{out:?}");
    assert!(
        matches!(
            out.last().unwrap().3,
            Reason::CapReached {
                level: Level::L1,
                ..
            }
        ),
        "{out:?}"
    );
}

/// none/kyber with a bio tap, priced live at L3: `[lo, hi]` ms/s against the 5 ms/s floor.
fn live_l3(lo: f64, hi: f64) -> Caps {
    let mut worth = Worth {
        basis: Basis::Live {
            floor: mergetune_logic::pricing::floor::SavingFloor::from_percent_cpu(0.5),
        },
        scheduler: Some(Scheduler::None),
        levels: [None; 4],
        coverage_percent: 95.0,
        untrusted: false,
    };
    worth.levels[3] = Some(Saving {
        value: (lo + hi) / 2.0,
        ci: Some([lo, hi]),
        unit: SavingUnit::CpuMsPerSec,
        verdict: if lo >= 5.0 {
            Verdict::Saves
        } else {
            Verdict::NoMeasurableDifference
        },
    });
    BARE.priced(worth)
}

/// The live bar is a band, not a line (the flap seen on a loop device: 0 -> 2 at one
/// rate, 2 -> 0 0.2 s later on 6.69 ms/s [4.05, 10.57], 22 writes in 104 s). Down: the
/// saving's lower bound clears the floor in as many windows in a row as the step waits
/// for, so one fast window does not take it. Back for lack of worth: only where the upper
/// bound falls under the floor, for 30 s of settled windows, never on the windows that hold
/// the write's freeze.
/// Between the two, the device stays where it is.
#[test]
fn the_live_bar_is_a_band_down_over_the_floor_back_only_under_it() {
    let c = cfg();
    let k = c.step_down_after_windows as usize;
    let (over, band, under) = (live_l3(5.5, 9.0), live_l3(4.05, 10.57), live_l3(1.0, 4.9));
    let nothing = writes_at(200_000, 1000);
    let mut s = PolicyState::new(0, &c);
    let mut now = 100_000;
    let step = |s: &mut PolicyState, w: &Window, caps: Caps, now: u64| {
        let ev = decide(s, Some(w), caps, &c, now);
        *s = ev.state.clone();
        ev
    };
    // Over the floor, then inside the band, alternating: never k in a row, never a step.
    for i in 0..4 * k {
        now += 1000;
        let caps = if i % 2 == 0 { over } else { band };
        let ev = step(&mut s, &nothing, caps, now);
        assert_eq!(ev.to_level, None, "window {i}: {}", ev.reason);
    }
    // k windows in a row over the floor: L0 -> L3.
    let mut to = None;
    for _ in 0..k {
        now += 1000;
        to = step(&mut s, &nothing, over, now).to_level;
    }
    assert_eq!(to, Some(Level::L3));
    assert_eq!(s.level(), Level::L3);
    // The first windows at L3 hold the write's freeze: priced clearly under the floor at
    // their depressed rate, they are not judged.
    let fast = writes_at(200_000, 100);
    for _ in 0..2 {
        now += 100;
        let ev = step(&mut s, &fast, under, now);
        assert_eq!(ev.to_level, None, "{}", ev.reason);
    }
    // Settled, inside the band: L3 is kept, window after window.
    for _ in 0..50 {
        now += 100;
        let ev = step(&mut s, &fast, band, now);
        assert_eq!(ev.to_level, None, "{}", ev.reason);
    }
    // The upper bound under the floor, window after settled window: L3 is kept while that
    // has lasted under LEAVE_L3_NOT_WORTH_AFTER_MS (contention halves a CPU-bound rate for
    // seconds at a time), a window back in the band starts the count again, and then it is
    // left for L0, saying why.
    for _ in 0..100 {
        now += 100;
        let ev = step(&mut s, &fast, under, now);
        assert_eq!(ev.to_level, None, "{}", ev.reason);
    }
    now += 100;
    step(&mut s, &fast, band, now);
    let n = LEAVE_L3_NOT_WORTH_AFTER_MS / 100;
    for _ in 0..n {
        now += 100;
        let ev = step(&mut s, &fast, under, now);
        assert_eq!(ev.to_level, None, "{}", ev.reason);
    }
    now += 100;
    let ev = step(&mut s, &fast, under, now);
    assert_move(&ev, OutcomeKind::Enable, Some(Level::L0));
    assert!(
        ev.reason
            .to_string()
            .contains("L3 saves 2.95 ms/s [1.00, 4.90]"),
        "{}",
        ev.reason
    );
}

/// A reload that lowers `disabled_nomerges` to 1 at L3 says so: the cause is the config,
/// not the saving (which would read as a saving: "L3 -22.5% CPU per I/O").
#[test]
fn a_reload_that_no_longer_allows_l3_says_the_config_did_it() {
    let mut c = cfg();
    let mut s = PolicyState::new(0, &c);
    run(&mut s, FULL, &c, 100_000, &[win(5000, 0); 12]);
    assert_eq!(s.level(), Level::L3);
    c.disabled_nomerges = 1;
    let ev = decide(&s, Some(&win(5000, 0)), FULL, &c, 200_000);
    assert_eq!(ev.to_level, Some(Level::L2), "{}", ev.reason);
    assert_matches!(
        ev.reason,
        Reason::L3NoLongerAllowed {
            disabled_nomerges: 1,
            to: Level::L2
        }
    );
    assert!(
        ev.reason
            .to_string()
            .contains("[policy] disabled_nomerges = 1"),
        "{}",
        ev.reason
    );
}
