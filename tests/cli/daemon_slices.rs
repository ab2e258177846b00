//! The daemon tunes scheduler slices through the same actuator as nomerges: originals
//! recorded and restored, someone else's value respected.

use crate::memkernel::{Load, MemDev, MemKernel};
use mergetune_daemon::adaptive::Daemon;
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::Config;
use mergetune_logic::decision::DecisionKind;

/// One mq-deadline disk whose counters show reads starving behind writes (50 reads at
/// 160 ms and 200 writes at 40 ms per second; reads and writes merge a little, so the merge
/// ladder stays at L0).
fn starving() -> MemKernel {
    let mut k = MemKernel {
        advance_on_read: Some(0),
        ..MemKernel::default()
    };
    k.add(
        "sda",
        MemDev::with_attrs(&[
            ("queue/nomerges", "0"),
            ("queue/scheduler", "none [mq-deadline]"),
            ("queue/rotational", "1"),
            ("queue/iosched/front_merges", "1"),
            ("queue/iosched/writes_starved", "2"),
            ("queue/iosched/read_expire", "500"),
        ]),
    )
    .load = Load::Fixed([
        50, 50, 800, 8000, 200, 200, 3200, 8000, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ]);
    k
}

/// The slice tuner is opt-in (`[slices] enabled = false` by default): these tests turn it on.
fn slices_on() -> Config {
    let mut cfg = Config::default();
    cfg.slices.enabled = true;
    cfg
}

#[test]
fn starving_reads_are_left_alone_by_default() {
    let mut fs = starving();
    let mut d = Daemon::simulated(Config::default());
    for t in 0..30u64 {
        d.tick(t * 1000, &mut fs);
    }
    assert_eq!(
        fs.writes_of(Tunable::WritesStarved),
        0,
        "the default config writes no slice tunable"
    );
    assert_eq!(fs.devs["sda"].attrs["queue/iosched/writes_starved"], "2");
}

#[test]
fn starving_reads_move_writes_starved_and_exit_restores_it() {
    let mut fs = starving();
    let mut d = Daemon::simulated(slices_on());
    let mut decisions = Vec::new();
    for t in 0..10u64 {
        decisions.extend(d.tick(t * 1000, &mut fs));
    }
    let step = decisions
        .iter()
        .find(|d| d.change_of(Tunable::WritesStarved).is_some())
        .unwrap_or_else(|| panic!("no slice decision: {decisions:?}"));
    let c = &step.changes[0];
    assert_eq!((c.from.as_str(), c.to.as_str()), ("2", "3"));
    assert_eq!(step.kind, DecisionKind::FavourReads, "{}", step.reason);
    assert_eq!(fs.devs["sda"].attrs["queue/iosched/writes_starved"], "3");
    d.restore_all(10_000, &mut fs);
    assert_eq!(fs.devs["sda"].attrs["queue/iosched/writes_starved"], "2");
}

#[test]
fn someone_elses_slice_value_stops_slice_tuning() {
    let mut fs = starving();
    let mut d = Daemon::simulated(slices_on());
    for t in 0..8u64 {
        d.tick(t * 1000, &mut fs);
    }
    assert_eq!(fs.devs["sda"].attrs["queue/iosched/writes_starved"], "3");
    fs.devs
        .get_mut("sda")
        .unwrap()
        .attrs
        .insert("queue/iosched/writes_starved".into(), "6".into());
    let steps = fs.writes_of(Tunable::WritesStarved);
    for t in 8..40u64 {
        d.tick(t * 1000, &mut fs);
    }
    assert_eq!(
        fs.writes_of(Tunable::WritesStarved),
        steps,
        "no further slice writes"
    );
    assert_eq!(fs.devs["sda"].attrs["queue/iosched/writes_starved"], "6");
    d.restore_all(40_000, &mut fs);
    assert_eq!(
        fs.devs["sda"].attrs["queue/iosched/writes_starved"], "6",
        "their value stays"
    );
}

#[test]
fn an_operator_set_value_is_never_touched() {
    let mut fs = starving();
    fs.devs
        .get_mut("sda")
        .unwrap()
        .attrs
        .insert("queue/iosched/writes_starved".into(), "4".into());
    fs.devs
        .get_mut("sda")
        .unwrap()
        .attrs
        .insert("queue/iosched/read_expire".into(), "250".into());
    let mut d = Daemon::simulated(slices_on());
    for t in 0..30u64 {
        d.tick(t * 1000, &mut fs);
    }
    assert_eq!(fs.writes_of(Tunable::WritesStarved), 0);
    assert_eq!(fs.devs["sda"].attrs["queue/iosched/read_expire"], "250");
}
