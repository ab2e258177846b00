//! Every policy a comparison runs, in one place, all through the same [`Controller`] seam:
//! - `kernel-default`: L0 always (nothing written);
//! - `static-nomerges-2`: the admin who "knows" the load is random (L3 always);
//! - `naive-toggle`: Brunelle's switch without hysteresis, dwell or probing: every window,
//!   nomerges=2 when the merge ratio is under the low threshold, else 0;
//! - `adaptive`: mergetune's daemon, unchanged;
//! - `oracle`: knows each phase's true pattern. It is built from the scenario itself: the
//!   scenario is first run at each static ladder level, and for each phase
//!   [`oracle_levels`] takes the cheapest level whose throughput stays within
//!   [`ORACLE_MAX_LOSS`] of L0's and that saves at least [`ORACLE_MIN_SAVING`] of L0's CPU
//!   (else L0: a toggle freezes the queue, not worth nothing); then it runs with that level
//!   set at every phase start.
//!
//! [`CONTENDERS`] is the list, in the order of the report.

use super::figures::PolicyRun;
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::controller::{Controller, KernelDefault};
use mergetune_kernel::blockfs::BlockFs;
use mergetune_kernel::diskstats::parse_diskstats;
use mergetune_kernel::scheduler::Reported;
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::Config;
use mergetune_logic::decision::Decision;
use mergetune_logic::decision::Level;
use mergetune_logic::decision::{Applied, Change, DecisionKind};
use mergetune_logic::policy::{Caps, tunables};
use mergetune_logic::sampler::{Delta, Sampler, WindowAcc, WindowClose};
use std::collections::BTreeMap;

/// Largest throughput loss the oracle accepts for a deeper level.
pub const ORACLE_MAX_LOSS: f64 = 0.005;
/// Least CPU saving (share of the phase's L0 CPU) for which the oracle leaves L0: a
/// `queue/nomerges` write freezes the queue, so it does not move for a saving that is
/// nothing (in the measured profile every level's saving can be exactly that).
pub const ORACLE_MIN_SAVING: f64 = 0.001;

/// The policies of a comparison, in the order of the report. The first is the reference
/// the others are measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    KernelDefault,
    StaticNomerges2,
    NaiveToggle,
    Adaptive,
    Oracle,
}

pub const CONTENDERS: [Contender; 5] = [
    Contender::KernelDefault,
    Contender::StaticNomerges2,
    Contender::NaiveToggle,
    Contender::Adaptive,
    Contender::Oracle,
];

impl Contender {
    /// The policy's name in the report.
    pub fn label(self) -> &'static str {
        match self {
            Contender::KernelDefault => "kernel-default",
            Contender::StaticNomerges2 => "static-nomerges-2",
            Contender::NaiveToggle => "naive-toggle",
            Contender::Adaptive => "adaptive",
            Contender::Oracle => "oracle",
        }
    }

    /// Its controller; the oracle's follows `oracle_schedule` ((start_ms, level) per phase).
    pub fn controller(self, cfg: &Config, oracle_schedule: &[(u64, Level)]) -> Box<dyn Controller> {
        let interval_ms = cfg.daemon.interval_ms;
        match self {
            Contender::KernelDefault => Box::new(KernelDefault { interval_ms }),
            Contender::StaticNomerges2 => Box::new(static_level(interval_ms, Level::L3)),
            Contender::NaiveToggle => Box::new(NaiveToggle::new(cfg.clone())),
            Contender::Adaptive => Box::new(Daemon::simulated(cfg.clone())),
            Contender::Oracle => Box::new(LevelSchedule::new(
                interval_ms,
                oracle_schedule.to_vec(),
                "oracle",
            )),
        }
    }
}

/// The static levels the oracle is chosen from: L0 to L3 pinned for the whole run.
pub fn static_level(interval_ms: u64, level: Level) -> LevelSchedule {
    LevelSchedule::new(interval_ms, vec![(0, level)], "pin")
}

/// The oracle's level per phase, from the runs at each static level (`statics[l]` pinned
/// at L`l`): the cheapest in the scenario's cost profile whose throughput stays within
/// [`ORACLE_MAX_LOSS`] of L0's and that saves at least [`ORACLE_MIN_SAVING`], else L0.
pub fn oracle_levels(statics: &[PolicyRun]) -> Vec<Level> {
    let base = &statics[0];
    let nphases = base.phases.len();
    let mut oracle_levels = Vec::with_capacity(nphases);
    for i in 0..nphases {
        let b = base.phases[i].bytes as f64;
        let worth = base.phases[i].cycles as f64 * (1.0 - ORACLE_MIN_SAVING);
        let mut best = 0usize;
        for (level, run) in statics.iter().enumerate().skip(1) {
            let p = &run.phases[i];
            let within = b == 0.0 || (b - p.bytes as f64) / b <= ORACLE_MAX_LOSS;
            if within && (p.cycles as f64) < worth && p.cycles < statics[best].phases[i].cycles {
                best = level;
            }
        }
        // `statics` is indexed by level (one run per rung, in order).
        let best = Level::ALL[best];
        oracle_levels.push(best);
    }
    oracle_levels
}

/// The oracle's schedule: its level of each phase, set at the phase's start.
pub fn oracle_schedule(base: &PolicyRun, oracle_levels: &[Level]) -> Vec<(u64, Level)> {
    base.phases
        .iter()
        .zip(oracle_levels)
        .map(|(p, l)| (p.start_ms, *l))
        .collect()
}

/// Sets ladder levels on every request-based device on a schedule of (start_ms, level).
pub struct LevelSchedule {
    interval_ms: u64,
    schedule: Vec<(u64, Level)>,
    kind: &'static str,
    caps: BTreeMap<String, Caps>,
    applied: BTreeMap<String, Level>,
}

impl LevelSchedule {
    pub fn new(interval_ms: u64, schedule: Vec<(u64, Level)>, kind: &'static str) -> Self {
        LevelSchedule {
            interval_ms,
            schedule,
            kind,
            caps: BTreeMap::new(),
            applied: BTreeMap::new(),
        }
    }

    fn discover(&mut self, fs: &mut dyn BlockFs) {
        if !self.caps.is_empty() {
            return;
        }
        for dev in fs.list_block_devices().unwrap_or_default() {
            if !fs.list_dir(&dev, "slaves").unwrap_or_default().is_empty()
                || !fs.attr_exists(&dev, "queue/nomerges")
            {
                continue;
            }
            let sched = fs
                .read_attr(&dev, "queue/scheduler")
                .ok()
                .and_then(|s| Reported::parse(&s));
            let fm = fs.read_attr(&dev, "queue/iosched/front_merges").ok();
            let caps =
                Caps::for_scheduler(Reported::known(sched.as_ref()), fm.as_deref() == Some("1"));
            self.applied.insert(dev.clone(), Level::L0);
            self.caps.insert(dev, caps);
        }
    }
}

/// The deepest level these caps have at or above `level` (L0 exists everywhere).
fn available(level: Level, caps: Caps) -> Level {
    Level::ALL
        .into_iter()
        .rev()
        .find(|&l| l <= level && caps.has(l))
        .unwrap_or(Level::L0)
}

impl Controller for LevelSchedule {
    fn interval_ms(&self) -> u64 {
        self.interval_ms
    }
    fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        self.discover(fs);
        let want = self
            .schedule
            .iter()
            .rev()
            .find(|(t, _)| *t <= now_ms)
            .map(|(_, l)| *l)
            .unwrap_or(Level::L0);
        let mut out = Vec::new();
        for (dev, caps) in &self.caps {
            let level = available(want, *caps);
            if self.applied.get(dev) == Some(&level) {
                continue;
            }
            let from = self.applied.get(dev).copied().unwrap_or(Level::L0);
            for (t, value) in tunables(level, *caps) {
                let cur = fs.read_tunable(dev, t).unwrap_or_default();
                if cur != value && fs.write_tunable(dev, t, value).is_ok() {
                    out.push(Decision {
                        at_ms: now_ms,
                        device: dev.clone(),
                        kind: DecisionKind::Pin,
                        changes: vec![Change {
                            tunable: t,
                            from: cur,
                            to: value.to_string(),
                        }],
                        reason: format!("{}: {from} -> {level}", self.kind),
                        applied: Applied::Yes,
                    });
                }
            }
            self.applied.insert(dev.clone(), level);
        }
        out
    }
    fn restore(&mut self, _now_ms: u64, _fs: &mut dyn BlockFs) -> Vec<Decision> {
        Vec::new()
    }
}

/// Brunelle's switch without Axboe's answers: one threshold, no dwell, no probe.
pub struct NaiveToggle {
    cfg: Config,
    sampler: Sampler,
    windows: BTreeMap<String, WindowAcc>,
    managed: Option<Vec<String>>,
}

impl NaiveToggle {
    pub fn new(cfg: Config) -> Self {
        NaiveToggle {
            cfg,
            sampler: Sampler::new(),
            windows: BTreeMap::new(),
            managed: None,
        }
    }
}

impl Controller for NaiveToggle {
    fn interval_ms(&self) -> u64 {
        self.cfg.daemon.interval_ms
    }
    fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        if self.managed.is_none() {
            let devs = fs.list_block_devices().unwrap_or_default();
            self.managed = Some(
                devs.into_iter()
                    .filter(|d| {
                        fs.list_dir(d, "slaves").unwrap_or_default().is_empty()
                            && fs.attr_exists(d, "queue/nomerges")
                    })
                    .collect(),
            );
        }
        let Ok(text) = fs.read_diskstats() else {
            return Vec::new();
        };
        let parsed = parse_diskstats(&text);
        let set = self.sampler.observe(&parsed.devices);
        let low = self.cfg.policy.disable_below_percent / 100.0;
        let mut out = Vec::new();
        for (stat, delta) in parsed.devices.iter().zip(set.deltas) {
            if !self
                .managed
                .as_ref()
                .is_some_and(|m| m.contains(&stat.name))
            {
                continue;
            }
            let acc = self.windows.entry(stat.name.clone()).or_default();
            let Delta::Counters(c) = delta else {
                acc.restart(now_ms);
                continue;
            };
            let close = WindowClose::fixed(self.cfg.window_ms(), self.cfg.daemon.interval_ms / 2);
            let Some(w) = acc.push(&c, now_ms, &close) else {
                continue;
            };
            if w.counters.bios() < self.cfg.policy.min_window_bios {
                continue;
            }
            let want = if w.counters.merge_ratio() < low {
                "2"
            } else {
                "0"
            };
            let cur = fs
                .read_tunable(&stat.name, Tunable::Nomerges)
                .unwrap_or_default();
            if cur != want
                && fs
                    .write_tunable(&stat.name, Tunable::Nomerges, want)
                    .is_ok()
            {
                out.push(Decision {
                    at_ms: now_ms,
                    device: stat.name.clone(),
                    kind: if want == "2" {
                        DecisionKind::Disable
                    } else {
                        DecisionKind::Enable
                    },
                    changes: vec![Change {
                        tunable: Tunable::Nomerges,
                        from: cur,
                        to: want.into(),
                    }],
                    reason: format!(
                        "naive toggle: merge ratio {:.1}% vs {:.1}%",
                        w.counters.merge_ratio() * 100.0,
                        low * 100.0
                    ),
                    applied: Applied::Yes,
                });
            }
        }
        out
    }
    fn restore(&mut self, _now_ms: u64, _fs: &mut dyn BlockFs) -> Vec<Decision> {
        Vec::new()
    }
}
