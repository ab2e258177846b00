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
