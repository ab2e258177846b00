//! Policy behaviour: thresholds, hysteresis, dwell, cap, probes, and invariants (proptest).

use mergetune::config::PolicyConfig;
use mergetune::policy::{HOUR_MS, Mode, OutcomeKind, PolicyState, decide};
use mergetune::sampler::{Counters, Window};
use proptest::prelude::*;

fn cfg() -> PolicyConfig {
    PolicyConfig {
        window_ticks: 1,
        min_window_bios: 100,
        disable_below_percent: 1.0,
        enable_above_percent: 5.0,
        disable_after_windows: 3,
        disabled_nomerges: 2,
        min_dwell_secs: 10,
        probe_initial_backoff_secs: 60,
        probe_max_backoff_secs: 240,
        probe_windows: 2,
        max_changes_per_hour: 6,
        ..PolicyConfig::default()
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
    }
}

/// Feeds one window per second starting at `t0`; returns the outcomes.
fn run(
    state: &mut PolicyState,
    c: &PolicyConfig,
    t0: u64,
    windows: &[Window],
) -> Vec<(u64, OutcomeKind, String)> {
    let mut out = Vec::new();
    for (i, w) in windows.iter().enumerate() {
        let now = t0 + (i as u64 + 1) * 1000;
        let ev = decide(state, Some(w), c, now);
        out.push((now, ev.kind, ev.reason.to_string()));
        *state = ev.state;
    }
    out
}

fn started(c: &PolicyConfig) -> PolicyState {
    // Started long enough ago that dwell does not interfere unless a test wants it to.
    PolicyState::new(0, c)
}

#[test]
fn disables_after_k_low_windows_and_not_before() {
    let c = cfg();
    let mut s = started(&c);
    let out = run(&mut s, &c, 100_000, &[win(5000, 0), win(5000, 10)]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold));
    assert_eq!(s.mode, Mode::Merging);
    let ev = decide(&s, Some(&win(5000, 5)), &c, 103_000);
    assert_eq!(ev.kind, OutcomeKind::Disable);
    assert_eq!(ev.write_nomerges, Some(2));
    assert!(ev.reason.contains("for 3 windows"), "{}", ev.reason);
    assert!(ev.reason.contains("5000 bios/s"), "{}", ev.reason);
}

#[test]
fn a_good_window_resets_the_count() {
    let c = cfg();
    let mut s = started(&c);
    run(
        &mut s,
        &c,
        100_000,
        &[
            win(5000, 0),
            win(5000, 0),
            win(5000, 200),
            win(5000, 0),
            win(5000, 0),
        ],
    );
    assert_eq!(s.mode, Mode::Merging);
    assert_eq!(s.low_windows, 2);
}

#[test]
fn idle_windows_decide_nothing() {
    let c = cfg();
    let mut s = started(&c);
    let out = run(&mut s, &c, 100_000, &[win(50, 0); 20]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold));
    assert!(out[0].2.contains("idle"));
    assert_eq!(s.low_windows, 0);
}

#[test]
fn no_change_inside_hysteresis_band() {
    let c = cfg();
    // Merging with 3% merges (between 1% and 5%): stays on.
    let mut s = started(&c);
    run(&mut s, &c, 100_000, &[win(10_000, 300); 50]);
    assert_eq!(s.mode, Mode::Merging);
    // Off with 3% still visible (nomerges=1 keeps plug merges): stays off until the probe.
    let mut c1 = c.clone();
    c1.disabled_nomerges = 1;
    let mut s = started(&c1);
    run(&mut s, &c1, 100_000, &[win(10_000, 0); 3]);
    assert_eq!(s.mode, Mode::Off);
    let out = run(&mut s, &c1, 103_000, &[win(10_000, 300); 30]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold), "{out:?}");
    // Over the high threshold: on at once.
    let ev = decide(&s, Some(&win(10_000, 600)), &c1, 134_000);
    assert_eq!(ev.kind, OutcomeKind::Enable);
    assert_eq!(ev.write_nomerges, Some(0));
}

#[test]
fn dwell_delays_disable() {
    let c = cfg();
    let mut s = PolicyState::new(100_000, &c);
    let out = run(&mut s, &c, 100_000, &[win(5000, 0); 12]);
    let first_off = out.iter().find(|o| o.1 == OutcomeKind::Disable).unwrap();
    assert_eq!(first_off.0, 110_000, "{out:?}");
    assert!(out.iter().any(|o| o.2.contains("dwell")));
}

#[test]
fn probe_backoff_doubles_to_cap_and_resets_on_success() {
    let c = cfg();
    let mut s = started(&c);
    run(&mut s, &c, 100_000, &[win(5000, 0); 3]);
    assert_eq!(s.mode, Mode::Off);
    assert_eq!(s.next_probe_at_ms, Some(103_000 + 60_000));
    let mut t = 103_000;
    let mut backoffs = Vec::new();
    for _ in 0..5 {
        let due = s.next_probe_at_ms.unwrap();
        // Before the due time: hold.
        let ev = decide(&s, None, &c, due - 1);
        assert_eq!(ev.kind, OutcomeKind::Hold);
        let ev = decide(&s, None, &c, due);
        assert_eq!(ev.kind, OutcomeKind::ProbeStart);
        assert_eq!(ev.write_nomerges, Some(0));
        s = ev.state;
        t = due;
        let out = run(&mut s, &c, t, &[win(5000, 0), win(5000, 0)]);
        assert_eq!(out[1].1, OutcomeKind::ProbeFailed, "{out:?}");
        backoffs.push(s.backoff_ms / 1000);
        // Keep the hourly cap out of this test.
        s.changes_ms.clear();
    }
    assert_eq!(backoffs, vec![120, 240, 240, 240, 240]);
    // A probe that finds merging re-enables it and resets the backoff.
    let due = s.next_probe_at_ms.unwrap();
    s = decide(&s, None, &c, due).state;
    let out = run(&mut s, &c, due, &[win(5000, 2000), win(5000, 2000)]);
    assert_eq!(out[1].1, OutcomeKind::ProbeSucceeded);
    assert_eq!(s.mode, Mode::Merging);
    assert_eq!(s.backoff_ms, 60_000);
    let _ = t;
}

#[test]
fn hourly_cap_keeps_merging_on() {
    let mut c = cfg();
    c.max_changes_per_hour = 2;
    c.min_dwell_secs = 0;
    let mut s = started(&c);
    run(&mut s, &c, 100_000, &[win(5000, 0); 3]); // change 1: off
    let due = s.next_probe_at_ms.unwrap();
    s = decide(&s, None, &c, due).state; // change 2: probe (never refused)
    let out = run(&mut s, &c, due, &[win(5000, 0), win(5000, 0)]);
    assert_eq!(out[1].1, OutcomeKind::ProbeSucceeded, "{out:?}");
    assert!(out[1].2.contains("cap"), "{}", out[1].2);
    assert_eq!(s.mode, Mode::Merging);
    // More low windows within the hour do not turn it off.
    let out = run(&mut s, &c, due + 2000, &[win(5000, 0); 10]);
    assert!(out.iter().all(|o| o.1 == OutcomeKind::Hold));
    // After the hour has passed, it may.
    let out = run(&mut s, &c, 100_000 + HOUR_MS, &[win(5000, 0); 3]);
    assert_eq!(out[2].1, OutcomeKind::Disable, "{out:?}");
}

#[test]
fn idle_probe_ends_with_merging_on() {
    let c = cfg();
    let mut s = started(&c);
    run(&mut s, &c, 100_000, &[win(5000, 0); 3]);
    let due = s.next_probe_at_ms.unwrap();
    s = decide(&s, None, &c, due).state;
    let out = run(&mut s, &c, due, &[win(10, 0); 8]);
    assert_eq!(out[7].1, OutcomeKind::ProbeSucceeded);
    assert_eq!(s.mode, Mode::Merging);
}

fn arb_window() -> impl Strategy<Value = Option<Window>> {
    prop_oneof![
        1 => Just(None),
        4 => (0u64..20_000, 0u64..=100).prop_map(|(bios, pct)| {
            let merged = bios * pct / 100 / if pct > 50 { 1 } else { 5 };
            Some(Window {
                counters: Counters {
                    reads_completed: bios - merged,
                    reads_merged: merged,
                    ..Default::default()
                },
                duration_ms: 1000,
            })
        }),
    ]
}

proptest! {
    #[test]
    fn invariants_hold(windows in proptest::collection::vec(arb_window(), 1..400),
                       step_ms in 200u64..120_000) {
        let c = cfg();
        let mut s = PolicyState::new(0, &c);
        let mut consecutive_low = 0u32;
        let mut disables: Vec<u64> = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            let now = (i as u64 + 1) * step_ms;
            let ev = decide(&s, w.as_ref(), &c, now);
            // Deterministic: same input, same output.
            prop_assert_eq!(&ev, &decide(&s, w.as_ref(), &c, now));
            // Backoff within bounds.
            prop_assert!(ev.state.backoff_ms >= c.probe_initial_backoff_secs * 1000);
            prop_assert!(ev.state.backoff_ms <= c.probe_max_backoff_secs * 1000);
            if s.mode == Mode::Merging {
                if let Some(w) = w
                    && w.counters.bios() >= c.min_window_bios
                {
                    if w.counters.merge_ratio() < c.disable_below_percent / 100.0 {
                        consecutive_low += 1;
                    } else {
                        consecutive_low = 0;
                    }
                }
                // Never off without K consecutive busy low windows.
                if ev.kind == OutcomeKind::Disable {
                    prop_assert!(consecutive_low >= c.disable_after_windows);
                }
                // Idle or missing windows never change anything.
                let idle = w.as_ref().is_none_or(|w| w.counters.bios() < c.min_window_bios);
                if idle {
                    prop_assert_eq!(ev.kind, OutcomeKind::Hold);
                }
            } else {
                consecutive_low = 0;
            }
            if matches!(ev.kind, OutcomeKind::Disable | OutcomeKind::ProbeFailed) {
                disables.push(now);
            }
            // The write matches the new mode.
            if let Some(v) = ev.write_nomerges {
                prop_assert_eq!(v, ev.state.nomerges(&c));
            }
            s = ev.state;
        }
        // Changes that turn merging off never exceed the hourly cap in any hour.
        for (i, t) in disables.iter().enumerate() {
            let in_hour = disables[i..].iter().filter(|&&u| u - t < HOUR_MS).count();
            prop_assert!(in_hour as u32 <= c.max_changes_per_hour);
        }
    }
}
