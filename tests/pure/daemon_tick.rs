//! The daemon's tick hands each device its own counters: each device first tries its
//! diskstats line of the last read (`DeviceRuntime::diskstats_line`), and falls back to a
//! lookup by name when the lines have moved.

use crate::memkernel::{Load, MemKernel};
use mergetune_daemon::adaptive::Daemon;
use mergetune_logic::config::Config;

fn bios_of(d: &Daemon, dev: &str) -> u64 {
    d.devices()[dev].last_tick.map_or(0, |w| w.counters.bios())
}

#[test]
fn a_devices_counters_follow_its_name_when_the_diskstats_lines_shift() {
    // sda is not there yet (the fake keeps its device numbers, as the kernel does).
    let mut fs = MemKernel::with(&["sda", "sdb", "sdc"]);
    fs.devs.get_mut("sda").unwrap().present = false;
    fs.devs.get_mut("sdc").unwrap().load = Load::Random;
    let mut d = Daemon::simulated(Config::default());
    for t in 0..3u64 {
        fs.advance(500);
        d.tick(t * 1000, &mut fs);
    }
    assert_eq!((bios_of(&d, "sdb"), bios_of(&d, "sdc")), (1, 500));
    // A device comes whose line is printed first: every other line moves down by one
    // before the daemon's next rescan has even seen the newcomer, so each hint now points
    // at another device's line.
    fs.devs.get_mut("sda").unwrap().present = true;
    fs.advance(700);
    d.tick(3000, &mut fs);
    assert_eq!((bios_of(&d, "sdb"), bios_of(&d, "sdc")), (1, 700));
    for (name, dev) in d.devices() {
        assert_eq!(
            dev.diskstats_line,
            Some(
                ["sda", "sdb", "sdc"]
                    .iter()
                    .position(|n| n == name)
                    .unwrap()
            ),
            "{name}"
        );
    }
}

/// A reload that makes the level a device rests at not worth keeping takes it back to L0
/// at its next busy windows (at L2 under `lkml-2008`, a reload to `measured-6.18` once left
/// nomerges=1 for 10 s and more of busy windows). Here without a bio tap, so L2 is the
/// deepest level allowed: no level below it to weigh.
#[test]
fn a_reload_that_makes_the_level_not_worth_it_brings_merging_back() {
    use mergetune_logic::decision::Level;
    let mut fs = MemKernel::with(&["sda"]);
    fs.devs.get_mut("sda").unwrap().load = Load::RandomRareMerges;
    let mut cfg = Config::default();
    cfg.policy.cost_profile = "lkml-2008".into();
    cfg.sense.enabled = false;
    let mut d = Daemon::simulated(cfg.clone());
    let mut t = 0;
    loop {
        fs.advance(5000);
        d.tick(t, &mut fs);
        t += 1000;
        if d.devices()["sda"].policy.level() == Level::L2 {
            break;
        }
        assert!(t < 120_000, "never reached L2");
    }
    // A while at L2, then the reload.
    for _ in 0..6 {
        fs.advance(5000);
        d.tick(t, &mut fs);
        t += 1000;
    }
    assert_eq!(d.devices()["sda"].policy.level(), Level::L2);
    cfg.policy.cost_profile = "measured-6.18".into();
    d.reload(cfg.clone());
    let reloaded = t;
    while d.devices()["sda"].policy.level() != Level::L0 {
        assert!(
            t - reloaded <= 6_000,
            "still at L2 {} ms after the reload: {}",
            t - reloaded,
            d.devices()["sda"].last_reason
        );
        fs.advance(5000);
        d.tick(t, &mut fs);
        t += 1000;
    }
    assert_eq!(fs.devs["sda"].attrs["queue/nomerges"], "0");
}
