//! The daemon tunes scheduler slices through the same actuator as nomerges: originals
//! recorded and restored, someone else's value respected.

use mergetune_daemon::adaptive::Daemon;
use mergetune_kernel::blockfs::{BlockFs, FsError};
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::Config;
use mergetune_logic::decision::DecisionKind;
use std::collections::BTreeMap;

/// One mq-deadline disk whose counters show reads starving behind writes (50 reads at
/// 160 ms and 200 writes at 40 ms per second).
struct Starving {
    t: u64,
    attrs: BTreeMap<String, String>,
    steps: u64,
}

impl Starving {
    fn new() -> Self {
        let mut attrs = BTreeMap::new();
        for (k, v) in [
            ("queue/nomerges", "0"),
            ("queue/scheduler", "none [mq-deadline]"),
            ("queue/rotational", "1"),
            ("queue/iosched/front_merges", "1"),
            ("queue/iosched/writes_starved", "2"),
            ("queue/iosched/read_expire", "500"),
        ] {
            attrs.insert(k.to_string(), v.to_string());
        }
        Starving {
            t: 0,
            attrs,
            steps: 0,
        }
    }
}

impl BlockFs for Starving {
    fn read_diskstats(&mut self) -> Result<Vec<u8>, FsError> {
        self.t += 1;
        let (r, w) = (50 * self.t, 200 * self.t);
        // Reads and writes merge a little (so the merge ladder stays at L0) and take
        // 160 ms and 40 ms each.
        Ok(format!(
            "8 0 sda {r} {} {} {} {w} {} {} {} 0 0 0 0 0 0 0 0 0\n",
            r,
            r * 16,
            r * 160,
            w,
            w * 16,
            w * 40
        )
        .into_bytes())
    }
    fn list_block_devices(&mut self) -> Result<Vec<String>, FsError> {
        Ok(vec!["sda".into()])
    }
    fn read_attr(&mut self, _d: &str, rel: &str) -> Result<String, FsError> {
        self.attrs
            .get(rel)
            .cloned()
            .ok_or(FsError::NotFound { path: rel.into() })
    }
    fn write_tunable(&mut self, _d: &str, tunable: Tunable, value: &str) -> Result<(), FsError> {
        let rel = tunable.rel_path();
        if rel.ends_with("writes_starved") {
            self.steps += 1;
        }
        self.attrs.insert(rel.to_string(), value.to_string());
        Ok(())
    }
    fn list_dir(&mut self, _d: &str, _r: &str) -> Result<Vec<String>, FsError> {
        Ok(vec![])
    }
    fn attr_exists(&mut self, _d: &str, rel: &str) -> bool {
        self.attrs.contains_key(rel)
    }
}

/// The slice tuner is opt-in (`[slices] enabled = false` by default): these tests turn it on.
fn slices_on() -> Config {
    let mut cfg = Config::default();
    cfg.slices.enabled = true;
    cfg
}

#[test]
fn starving_reads_are_left_alone_by_default() {
    let mut fs = Starving::new();
    let mut d = Daemon::simulated(Config::default());
    for t in 0..30u64 {
        d.tick(t * 1000, &mut fs);
    }
    assert_eq!(fs.steps, 0, "the default config writes no slice tunable");
    assert_eq!(fs.attrs["queue/iosched/writes_starved"], "2");
}

#[test]
fn starving_reads_move_writes_starved_and_exit_restores_it() {
    let mut fs = Starving::new();
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
    assert_eq!(fs.attrs["queue/iosched/writes_starved"], "3");
    d.restore_all(10_000, &mut fs);
    assert_eq!(fs.attrs["queue/iosched/writes_starved"], "2");
}

#[test]
fn someone_elses_slice_value_stops_slice_tuning() {
    let mut fs = Starving::new();
    let mut d = Daemon::simulated(slices_on());
    for t in 0..8u64 {
        d.tick(t * 1000, &mut fs);
    }
    assert_eq!(fs.attrs["queue/iosched/writes_starved"], "3");
    fs.attrs
        .insert("queue/iosched/writes_starved".into(), "6".into());
    let steps = fs.steps;
    for t in 8..40u64 {
        d.tick(t * 1000, &mut fs);
    }
    assert_eq!(fs.steps, steps, "no further slice writes");
    assert_eq!(fs.attrs["queue/iosched/writes_starved"], "6");
    d.restore_all(40_000, &mut fs);
    assert_eq!(
        fs.attrs["queue/iosched/writes_starved"], "6",
        "their value stays"
    );
}

#[test]
fn an_operator_set_value_is_never_touched() {
    let mut fs = Starving::new();
    fs.attrs
        .insert("queue/iosched/writes_starved".into(), "4".into());
    fs.attrs
        .insert("queue/iosched/read_expire".into(), "250".into());
    let mut d = Daemon::simulated(slices_on());
    for t in 0..30u64 {
        d.tick(t * 1000, &mut fs);
    }
    assert_eq!(fs.steps, 0);
    assert_eq!(fs.attrs["queue/iosched/read_expire"], "250");
}
