//! One tick of mergetune, shared by every world: read counters through [`BlockFs`], turn
//! them into windows, ask the pure policy, apply through the [`Actuator`], and return the
//! decisions with their reasons. The real loop (main.rs), dry-run and the simulator all
//! call [`Daemon::tick`]; only the `BlockFs` and the state store differ.

use crate::daemon::actuator::{Actuator, ActuatorError, SetOutcome};
use crate::daemon::controller::Controller;
use crate::daemon::state::MemoryStore;
use crate::daemon::state::{RestoreOutcome, RestoreResult};
use crate::kernel::blockfs::{BlockFs, FsError};
use crate::kernel::devices::{DeviceInfo, Management, classify, describe, read_device};
use crate::kernel::diskstats::{DiskstatsHealth, HealthReport, parse_diskstats};
use crate::kernel::tunable::Tunable;
use crate::logic::config::Config;
use crate::logic::decision::{Applied, Change, Decision, DecisionKind};
use crate::logic::policy::{Caps, OutcomeKind, PolicyState, decide, tunables};
use crate::logic::sampler::{Counters, Delta, Sampler, Window, WindowAcc, WindowClose};
use serde::Serialize;
use std::collections::BTreeMap;
use tracing::{info, warn};

/// The merge ladder's tunables.
pub const LADDER: [Tunable; 2] = [Tunable::Nomerges, Tunable::FrontMerges];
/// The slice tuner's tunables.
pub const SLICES: [Tunable; 3] = [
    Tunable::WritesStarved,
    Tunable::ReadExpire,
    Tunable::TimeoutSync,
];
/// A warning about an unreadable tunable is repeated at most this often per device.
const READ_WARN_EVERY_MS: u64 = 600_000;

/// Everything mergetune tracks about one device.
#[derive(Debug, Clone)]
pub struct DeviceRuntime {
    pub info: DeviceInfo,
    pub management: Management,
    pub policy: PolicyState,
    pub window: WindowAcc,
    /// The rungs of the merge ladder this device offers.
    pub caps: Caps,
    pub last_window: Option<Window>,
    /// When `last_window` closed.
    pub last_window_ms: u64,
    /// Scheduler slice tuning (src/slices.rs).
    pub slices: crate::logic::slices::SliceState,
    /// The counters of the last tick alone, for the device table.
    pub last_tick: Option<Window>,
    pub last_tick_ms: u64,
    pub last_reason: crate::logic::policy::Reason,
    pub last_decision: Option<Decision>,
    /// A failed write is retried no earlier than this.
    pub retry_after_ms: u64,
    /// The last warning about an unreadable tunable, to repeat it rarely.
    pub read_warned_ms: Option<u64>,
    /// sense: the bio tap's duty cycle and samples at L3 (src/daemon/sense.rs).
    pub sense: crate::daemon::sense::DeviceSense,
}

/// Counters for the operator (exported as metrics by the metrics layer).
#[derive(Debug, Clone, Serialize)]
pub struct DaemonCounters {
    pub ticks: u64,
    pub decisions: u64,
    pub write_errors: u64,
    pub diskstats_errors: u64,
    pub counter_resets: u64,
    /// Failed saves of the state file.
    pub state_save_errors: u64,
    /// Failed reads of a device tunable.
    pub tunable_read_errors: u64,
    /// The state file holds every record mergetune has in memory.
    pub state_persisted: bool,
}

impl Default for DaemonCounters {
    fn default() -> Self {
        DaemonCounters {
            ticks: 0,
            decisions: 0,
            write_errors: 0,
            diskstats_errors: 0,
            counter_resets: 0,
            state_save_errors: 0,
            tunable_read_errors: 0,
            state_persisted: true,
        }
    }
}

/// A row of the device table.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceRow {
    pub device: String,
    pub scheduler: String,
    pub status: String,
    pub why: String,
    pub nomerges: String,
    pub mode: String,
    pub bios_per_sec: Option<f64>,
    pub read_merge_percent: Option<f64>,
    pub write_merge_percent: Option<f64>,
    pub last: String,
}

pub struct Daemon {
    cfg: Config,
    actuator: Actuator,
    sampler: Sampler,
    devices: BTreeMap<String, DeviceRuntime>,
    pending: BTreeMap<String, Counters>,
    force_rescan: bool,
    /// Devices a reload cleared of their hands-off mark: rediscovered at the next tick.
    pending_rediscover: Vec<String>,
    diskstats_health: DiskstatsHealth,
    /// The time to the next tick, decided at the end of each tick: `interval_ms`, or the
    /// L3 watch interval while a managed device is at L3.
    next_step_ms: u64,
    /// Half the step that led to this tick: the tolerance of window lengths.
    slack_ms: u64,
    pub counters: DaemonCounters,
}

impl Daemon {
    pub fn new(cfg: Config, actuator: Actuator) -> Self {
        let cfg_interval = cfg.daemon.interval_ms;
        Daemon {
            cfg,
            actuator,
            sampler: Sampler::new(),
            devices: BTreeMap::new(),
            pending: BTreeMap::new(),
            force_rescan: true,
            pending_rediscover: Vec::new(),
            diskstats_health: DiskstatsHealth::new(),
            next_step_ms: cfg_interval,
            slack_ms: cfg_interval / 2,
            counters: DaemonCounters::default(),
        }
    }

    /// The adaptive daemon for the simulator: originals kept in memory, no real clock.
    pub fn simulated(cfg: Config) -> Self {
        Daemon::new(cfg, Actuator::new(false, Box::new(MemoryStore::default())))
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn devices(&self) -> &BTreeMap<String, DeviceRuntime> {
        &self.devices
    }

    pub fn actuator(&self) -> &Actuator {
        &self.actuator
    }

    /// `queue/nomerges` of a device as mergetune last read or wrote it.
    pub fn nomerges_of(&self, name: &str) -> Option<String> {
        self.actuator
            .expected(name, Tunable::Nomerges)
            .map(str::to_string)
            .or_else(|| self.devices.get(name)?.info.nomerges.clone())
    }

    /// `queue/nomerges` of a device when mergetune first saw it.
    pub fn original_nomerges(&self, name: &str) -> Option<String> {
        self.actuator
            .first_seen(name, Tunable::Nomerges)
            .map(str::to_string)
    }

    /// Whether someone else took over one of the ladder's tunables of this device.
    pub fn ladder_handed_off(&self, name: &str) -> bool {
        self.actuator.any_theirs(name, &LADDER)
    }

    /// Takes a new (already validated) config; device membership is re-evaluated at the
    /// next tick, policy state is kept.
    ///
    /// A reload is also how an operator clears a device that was left alone because
    /// someone else changed its tunables: it is forgotten and rediscovered from scratch,
    /// taking its current values as the new originals (managed again if nomerges is 0).
    pub fn reload(&mut self, cfg: Config) {
        self.cfg = cfg;
        self.force_rescan = true;
        let foreign: Vec<String> = self
            .devices
            .keys()
            .filter(|n| {
                self.actuator.any_theirs(n, &LADDER) || self.actuator.any_theirs(n, &SLICES)
            })
            .cloned()
            .collect();
        self.pending_rediscover.extend(foreign);
    }

    fn log_restores(results: &[RestoreResult], context: &str) {
        for r in results {
            if r.outcome.failed() {
                warn!(device = %r.device, "{context}: {r}");
            } else {
                info!(device = %r.device, "{context}: {r}");
            }
        }
    }

    fn rescan(&mut self, now_ms: u64, fs: &mut dyn BlockFs) {
        for name in std::mem::take(&mut self.pending_rediscover) {
            info!(device = %name, "{name}: reload clears the hands-off mark; rediscovering it");
            let results = self.actuator.rediscover(fs, &name);
            Self::log_restores(&results, "rediscovery");
            self.devices.remove(&name);
        }
        let names = match fs.list_block_devices() {
            Ok(n) => n,
            Err(e) => {
                warn!("cannot list block devices: {e}");
                return;
            }
        };
        let gone: Vec<String> = self
            .devices
            .keys()
            .filter(|n| !names.contains(n))
            .cloned()
            .collect();
        for name in gone {
            let _ = fs.tap_close(&name); // sense: a removed device's tap goes with it
            info!(device = %name, "{name}: device removed (any original mergetune changed stays recorded)");
            self.devices.remove(&name);
            self.pending.remove(&name);
            self.actuator.device_vanished(&name, now_ms);
        }
        for name in names {
            if !self.devices.contains_key(&name) && self.actuator.has_vanished_records(&name) {
                // Back after a while: a value mergetune wrote is still mergetune's.
                let results = self.actuator.device_returned(fs, &name);
                Self::log_restores(&results, "device back");
            }
            let info = match read_device(fs, &name) {
                Ok(i) => i,
                Err(FsError::NotFound { .. }) => continue,
                Err(e) => {
                    warn!(device = %name, "{name}: cannot read queue attributes: {e}");
                    continue;
                }
            };
            match self.devices.get_mut(&name) {
                Some(dev) => {
                    let mut judged = info.clone();
                    judged.nomerges = self
                        .actuator
                        .first_seen(&name, Tunable::Nomerges)
                        .map(str::to_string);
                    let m = if self.actuator.any_theirs(&name, &LADDER) {
                        dev.management.clone()
                    } else {
                        classify(&judged, &self.cfg.devices)
                    };
                    if m != dev.management {
                        info!(device = %name, "{}", describe(&judged, &m));
                        if dev.management.is_managed() {
                            let results = self.actuator.restore_device(fs, &name);
                            Self::log_restores(&results, "no longer managed");
                        }
                        dev.management = m;
                        dev.policy = PolicyState::new(now_ms, &self.cfg.policy);
                        observe_ladder(&mut self.actuator, &info);
                    }
                    let caps = Caps::for_scheduler(
                        info.scheduler.as_deref(),
                        info.has_front_merges
                            && self.actuator.first_seen(&name, Tunable::FrontMerges) == Some("1"),
                    );
                    if caps != dev.caps && dev.management.is_managed() {
                        info!(device = %name, "{name}: scheduler now {}: merge ladder rungs {:?}", info.scheduler.as_deref().unwrap_or("-"), caps);
                        // A lost rung (say front_merges after a scheduler switch) is
                        // simply no longer written; the level stays meaningful via nomerges.
                        dev.caps = caps;
                        if caps.front_merges {
                            self.actuator.observe(
                                &name,
                                Tunable::FrontMerges,
                                info.front_merges.as_deref(),
                            );
                        }
                    }
                    dev.info = info;
                }
                None => {
                    observe_ladder(&mut self.actuator, &info);
                    let m = classify(&info, &self.cfg.devices);
                    info!(device = %name, "{}", describe(&info, &m));
                    self.devices.insert(
                        name.clone(),
                        DeviceRuntime {
                            caps: caps_of(&info),
                            info,
                            management: m,
                            policy: PolicyState::new(now_ms, &self.cfg.policy),
                            window: WindowAcc {
                                started_ms: now_ms,
                                ..Default::default()
                            },
                            last_window: None,
                            last_window_ms: 0,
                            slices: Default::default(),
                            last_tick: None,
                            last_tick_ms: now_ms,
                            last_reason: crate::logic::policy::Reason::from(""),
                            last_decision: None,
                            retry_after_ms: 0,
                            read_warned_ms: None,
                            sense: Default::default(), // sense
                        },
                    );
                }
            }
        }
    }

    /// One tick at `now_ms` (ms since the daemon started, real or virtual).
    pub fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        self.slack_ms = self.next_step_ms / 2;
        let was_persisted = self.actuator.persisted();
        if let Err(e) = self.actuator.retry_persist() {
            if was_persisted || self.counters.ticks.is_multiple_of(600) {
                warn!(
                    "{e}; the originals are kept in memory and restored on exit, no tunable is written until the state file can be saved"
                );
            }
        } else if !was_persisted {
            info!(
                "state file {} saved again: originals persisted",
                self.actuator.store_name()
            );
        }
        let decisions = self.tick_inner(now_ms, fs);
        self.next_step_ms = self.step_after_tick();
        self.counters.state_persisted = self.actuator.persisted();
        self.counters.state_save_errors = self.actuator.save_errors();
        decisions
    }

    /// The time to the next tick: while a managed device is at L3 (merges invisible, only a
    /// workload change shows that some are being missed) the counters are read every
    /// `l3_watch_interval_ms`, so a sequential phase starting there runs unmerged for one
    /// short tick instead of a whole interval. Reading the counters costs microseconds.
    pub fn next_tick_in_ms(&self) -> u64 {
        self.next_step_ms
    }

    fn step_after_tick(&self) -> u64 {
        let watching = self.cfg.policy.enabled
            && self.devices.values().any(|d| {
                d.management.is_managed() && d.policy.mode == crate::logic::policy::Mode::Off
            });
        if watching {
            self.cfg.l3_tick_ms()
        } else {
            self.cfg.daemon.interval_ms
        }
    }

    fn tick_inner(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        let rescan_every = u64::from(self.cfg.daemon.rescan_every_ticks.max(1));
        if self.force_rescan || self.counters.ticks.is_multiple_of(rescan_every) {
            self.force_rescan = false;
            self.rescan(now_ms, fs);
        }
        self.counters.ticks += 1;
        let read = fs.read_diskstats();
        let parsed = read.as_ref().map(parse_diskstats);
        let health = match &parsed {
            Ok(p) => self.diskstats_health.review(p),
            Err(e) => self.diskstats_health.read_failed(&e.to_string()),
        };
        self.note_diskstats_health(&health);
        let Ok(parsed) = parsed else {
            return Vec::new();
        };
        let samples = self.sampler.observe(&parsed.devices);
        self.pending.clear();
        for (stat, delta) in parsed.devices.iter().zip(samples.deltas) {
            let name = &stat.name;
            let Some(dev) = self.devices.get_mut(name) else {
                continue;
            };
            let prev_tick_ms = dev.last_tick_ms;
            dev.last_tick_ms = now_ms;
            match delta {
                Delta::First => dev.window.restart(now_ms),
                Delta::Reset => {
                    self.counters.counter_resets += 1;
                    info!(device = %name, "{name}: counters went backwards (device re-added?): window restarted");
                    dev.window.restart(now_ms);
                }
                Delta::Counters(c) => {
                    dev.last_tick = Some(Window {
                        counters: c,
                        duration_ms: now_ms.saturating_sub(prev_tick_ms),
                        sensed: None,
                    });
                    self.pending.insert(name.clone(), c);
                }
            }
        }

        let mut decisions = Vec::new();
        let names: Vec<String> = self
            .devices
            .iter()
            .filter(|(_, d)| d.management.is_managed())
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            if let Some(d) = self.tick_device(&name, now_ms, fs) {
                decisions.push(d);
            }
            if let Some(d) = self.tick_slices(&name, now_ms, fs) {
                decisions.push(d);
            }
        }
        // sense: a device that is no longer managed keeps no tap open.
        for (name, dev) in self.devices.iter_mut() {
            if !dev.management.is_managed() {
                dev.sense.stop(name, fs);
            }
        }
        self.counters.decisions += decisions.len() as u64;
        decisions
    }

    /// Logs what [`DiskstatsHealth`] says of this read, and counts a read with a problem.
    fn note_diskstats_health(&mut self, h: &HealthReport) {
        self.counters.diskstats_errors += u64::from(h.problem);
        for w in &h.warnings {
            warn!("diskstats: {w}");
        }
        for c in &h.cleared {
            info!("diskstats: {c}");
        }
    }

    fn tick_device(&mut self, name: &str, now_ms: u64, fs: &mut dyn BlockFs) -> Option<Decision> {
        let pcfg = self.cfg.policy.clone();
        let dev = self.devices.get_mut(name)?;
        let window_ms = self.cfg.window_ms();
        let close = if dev.policy.mode == crate::logic::policy::Mode::Off {
            // At L3 a window only has to show a workload change (the merges are invisible
            // there): it closes at the first watch tick that holds enough bios to judge.
            WindowClose {
                min_ms: self.cfg.l3_tick_ms(),
                full_ms: window_ms,
                min_bios: pcfg.min_window_bios,
                slack_ms: self.slack_ms,
            }
        } else {
            WindowClose::fixed(window_ms, self.slack_ms)
        };
        // sense: the tap's duty cycle at L3; its sample rides on the next window to close.
        let at_l3 = dev.policy.level == crate::logic::policy::TOP_LEVEL;
        let mergeable = pcfg.enable_above_percent;
        dev.sense
            .tick(name, now_ms, at_l3, &self.cfg.sense, mergeable, fs);
        let mut window = self
            .pending
            .get(name)
            .and_then(|c| dev.window.push(c, now_ms, &close));
        if let Some(w) = window.as_mut() {
            w.sensed = dev.sense.take_sample(); // sense
        }
        let mut caps = dev.caps; // sense: L3 is watched where the tap works
        caps.sense_at_l3 = dev.sense.usable(&self.cfg.sense);
        if window.is_some() {
            dev.last_window = window;
            dev.last_window_ms = now_ms;
        }
        let ev = decide(&dev.policy, window.as_ref(), caps, &pcfg, now_ms);
        if ev.kind == OutcomeKind::Hold && window.is_none() {
            // Nothing to decide: spare the sysfs reads (a few µs per device per tick).
            dev.policy = ev.state;
            dev.last_reason = ev.reason;
            return None;
        }
        // Someone else's write wins: the tunable becomes theirs, the ladder stops on this
        // device and puts back the other tunable it owns. Checked at every window and
        // before every write.
        let mut watched = vec![Tunable::Nomerges];
        if dev.caps.front_merges {
            watched.push(Tunable::FrontMerges);
        }
        let mut current_nomerges = String::new();
        for t in watched {
            let current = match fs.read_tunable(name, t) {
                Ok(v) => v,
                Err(FsError::NotFound { .. }) => {
                    self.force_rescan = true;
                    return None;
                }
                Err(e) => {
                    self.counters.tunable_read_errors += 1;
                    if dev
                        .read_warned_ms
                        .is_none_or(|at| now_ms.saturating_sub(at) >= READ_WARN_EVERY_MS)
                    {
                        warn!(device = %name, "{e} (the device's level is held; this warning repeats at most every {} min)", READ_WARN_EVERY_MS / 60_000);
                        dev.read_warned_ms = Some(now_ms);
                    }
                    return None;
                }
            };
            let expected = self.actuator.expected(name, t).map(str::to_string);
            if expected.as_deref() != Some(current.as_str()) {
                let was = expected.unwrap_or_default();
                warn!(
                    device = %name,
                    "{name}: {t} changed from {was} to {current} by someone else: no longer managed (`systemctl reload mergetune`, SIGHUP, manages it again)"
                );
                dev.management = Management::AdminOwned(format!(
                    "{t} changed from {was} to {current} by someone else"
                ));
                if t == Tunable::Nomerges {
                    dev.info.nomerges = Some(current.clone());
                }
                let results = self.actuator.hand_off(fs, name, t, &current, &LADDER);
                Self::log_restores(&results, "hand-off");
                return None;
            }
            if t == Tunable::Nomerges {
                current_nomerges = current;
            }
        }
        dev.read_warned_ms = None;
        if ev.kind == OutcomeKind::Hold {
            dev.policy = ev.state;
            dev.last_reason = ev.reason;
            return None;
        }
        let from_level = dev.policy.level;
        let mut decision = Decision {
            at_ms: now_ms,
            device: name.to_string(),
            kind: ev.kind.decision_kind().unwrap_or(DecisionKind::Enable),
            changes: Vec::new(),
            reason: ev.reason.to_string(),
            applied: Applied::Yes,
        };
        let Some(to_level) = ev.to_level else {
            // A probe that ends at L0, a trial that stays: nothing changes in the kernel.
            info!(device = %name, from = %current_nomerges, to = %current_nomerges, reason = %decision.reason, "{name}: {}: {}", decision.kind, decision.reason);
            dev.policy = ev.state;
            dev.last_reason = ev.reason;
            dev.last_decision = Some(decision.clone());
            return Some(decision);
        };
        if !pcfg.enabled {
            dev.last_reason =
                format!("policy disabled: would {}: {}", decision.kind, ev.reason).into();
            return None;
        }
        if now_ms < dev.retry_after_ms {
            dev.last_reason = format!("waiting to retry a failed write: {}", ev.reason).into();
            return None;
        }
        // Apply the level's tunables, nomerges first; stop at the first failure.
        let mut dry = false;
        let mut failure = None;
        for (t, value) in tunables(to_level, dev.caps) {
            match self.actuator.set(fs, name, t, value) {
                Ok(SetOutcome::Unchanged) => {}
                Ok(SetOutcome::Written { from }) => decision.changes.push(Change {
                    tunable: t,
                    from,
                    to: value.to_string(),
                }),
                Ok(SetOutcome::DryRun { from }) => {
                    dry = true;
                    decision.changes.push(Change {
                        tunable: t,
                        from,
                        to: value.to_string(),
                    });
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let (log_from, log_to) = match decision.changes.first() {
            Some(c) => (c.from.clone(), c.to.clone()),
            None => (current_nomerges.clone(), current_nomerges.clone()),
        };
        if let Some(e) = failure {
            self.counters.write_errors += 1;
            let wait_ms = (pcfg.min_dwell_secs * 1000).max(self.cfg.window_ms());
            dev.retry_after_ms = now_ms + wait_ms;
            let written = if decision.changes.is_empty() {
                String::new()
            } else {
                format!(" (written before the failure: {})", decision.changes_text())
            };
            warn!(device = %name, "{name}: L{from_level} -> L{to_level} failed, level unchanged, retry in {wait_ms} ms: {e}{written}");
            decision.applied = Applied::Failed(e.to_string());
            decision.reason = format!("{} (write failed: {e})", decision.reason);
            dev.last_reason = decision.reason.clone().into();
            if matches!(e, ActuatorError::Fs(FsError::NotFound { .. })) {
                self.force_rescan = true;
            }
            if !decision.changes.is_empty() {
                // Half a level was written (nomerges, not front_merges): the record holds
                // it, and the next window's check sees the kernel as it is.
                dev.window.restart(now_ms);
            }
            dev.last_decision = Some(decision.clone());
            return Some(decision);
        }
        if dry {
            decision.applied = Applied::DryRun;
            info!(device = %name, from = %log_from, to = %log_to, reason = %decision.reason,
                "{name}: dry-run, would write {}: {}: {}", decision.changes_text(), decision.kind, decision.reason);
        } else {
            info!(device = %name, from = %log_from, to = %log_to, reason = %decision.reason,
                "{name}: {}: {}: {}", decision.changes_text(), decision.kind, decision.reason);
        }
        dev.policy = ev.state;
        dev.last_reason = ev.reason;
        // A window straddling a change would mix two regimes.
        dev.window.restart(now_ms);
        dev.last_decision = Some(decision.clone());
        Some(decision)
    }

    /// Scheduler slices for one device, on the window that closed at this tick.
    fn tick_slices(&mut self, name: &str, now_ms: u64, fs: &mut dyn BlockFs) -> Option<Decision> {
        let cfg = self.cfg.slices.clone();
        if !cfg.enabled || !self.cfg.policy.enabled {
            return None;
        }
        let dev = self.devices.get_mut(name)?;
        if !dev.management.is_managed()
            || self.actuator.any_theirs(name, &SLICES)
            || dev.last_window_ms != now_ms
        {
            return None;
        }
        let w = dev.last_window?;
        let sched = dev.info.scheduler.clone()?;
        let defaults = crate::logic::slices::tunables_for(&sched);
        if defaults.is_empty() {
            return None;
        }
        let mut values = Vec::with_capacity(defaults.len());
        for (t, _) in defaults {
            if let Ok(v) = fs.read_tunable(name, *t)
                && let Ok(x) = v.parse::<u64>()
            {
                values.push((*t, x));
            }
        }
        // Someone else's write wins, as for the ladder: checked on what mergetune wrote.
        for (t, cur) in &values {
            if let Some(ours) = self.actuator.last_written(name, *t)
                && ours != cur.to_string()
            {
                warn!(device = %name, "{name}: {t} changed from {ours} to {cur} by someone else: scheduler slices no longer tuned here");
                let results = self
                    .actuator
                    .hand_off(fs, name, *t, &cur.to_string(), &SLICES);
                Self::log_restores(&results, "hand-off");
                return None;
            }
        }
        for (t, v) in &values {
            if self.actuator.first_seen(name, *t).is_none() {
                self.actuator.observe(name, *t, Some(&v.to_string()));
            }
        }
        // A tunable that was not at the kernel's default when first seen is the operator's.
        let owned: Vec<Tunable> = defaults
            .iter()
            .filter(|(t, d)| {
                self.actuator
                    .first_seen(name, *t)
                    .is_some_and(|v| v != d.to_string())
            })
            .map(|(t, _)| *t)
            .collect();
        let (state, change) =
            crate::logic::slices::decide(&dev.slices, &w, &sched, &values, &owned, &cfg, now_ms);
        let previous = std::mem::replace(&mut dev.slices, state);
        if let Some(kept) = dev.slices.kept.take() {
            info!(device = %name, "{name}: slices: {kept}");
        }
        let ch = change?;
        let t = ch.tunable;
        let mut decision = Decision {
            at_ms: now_ms,
            device: name.to_string(),
            kind: ch.kind,
            changes: vec![Change {
                tunable: t,
                from: ch.from.to_string(),
                to: ch.to.to_string(),
            }],
            reason: ch.reason.clone(),
            applied: Applied::Yes,
        };
        match self.actuator.set(fs, name, t, &ch.to.to_string()) {
            Ok(SetOutcome::DryRun { .. }) => {
                decision.applied = Applied::DryRun;
                info!(device = %name, from = %ch.from, to = %ch.to, reason = %decision.reason,
                    "{name}: dry-run, would write {t} {} -> {}: {}: {}", ch.from, ch.to, decision.kind, decision.reason);
            }
            Ok(_) => {
                info!(device = %name, from = %ch.from, to = %ch.to, reason = %decision.reason,
                    "{name}: {t} {} -> {}: {}: {}", ch.from, ch.to, decision.kind, decision.reason);
            }
            Err(e) => {
                self.counters.write_errors += 1;
                warn!(device = %name, "{name}: write of {t}={} failed, slices unchanged: {e}", ch.to);
                dev.slices = previous;
                decision.applied = Applied::Failed(e.to_string());
                decision.reason = format!("{} (write failed: {e})", decision.reason);
            }
        }
        dev.last_decision = Some(decision.clone());
        Some(decision)
    }

    /// Restores every original value (on exit). Returns decisions of kind `restore`.
    pub fn restore_all(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        let results = self.actuator.restore_all(fs, now_ms);
        results
            .into_iter()
            .map(|r| {
                if r.outcome.failed() {
                    warn!(device = %r.device, "{r}");
                } else {
                    info!(device = %r.device, "{r}");
                }
                let (changes, applied) = match &r.outcome {
                    RestoreOutcome::Restored { from, to } => (
                        vec![Change {
                            tunable: r.tunable,
                            from: from.clone(),
                            to: to.clone(),
                        }],
                        Applied::Yes,
                    ),
                    RestoreOutcome::Failed { error } => {
                        (Vec::new(), Applied::Failed(error.clone()))
                    }
                    _ => (Vec::new(), Applied::No),
                };
                if applied == Applied::Yes
                    && let Some(dev) = self.devices.get_mut(&r.device)
                {
                    dev.policy = PolicyState::new(now_ms, &self.cfg.policy);
                }
                Decision {
                    at_ms: now_ms,
                    device: r.device.clone(),
                    kind: DecisionKind::Restore,
                    changes,
                    reason: r.to_string(),
                    applied,
                }
            })
            .collect()
    }

    /// The device table.
    pub fn rows(&self) -> Vec<DeviceRow> {
        self.devices
            .values()
            .map(|d| DeviceRow {
                device: d.info.name.clone(),
                scheduler: d.info.scheduler.clone().unwrap_or_else(|| "-".into()),
                status: d.management.label().to_string(),
                why: d.management.why().to_string(),
                nomerges: self.nomerges_of(&d.info.name).unwrap_or_else(|| "-".into()),
                mode: if d.management.is_managed() {
                    format!("L{} {}", d.policy.level, d.policy.mode.as_str())
                } else {
                    "-".into()
                },
                bios_per_sec: d.last_tick.map(|w| w.bios_per_sec()),
                read_merge_percent: d
                    .last_tick
                    .filter(|w| w.counters.read_bios() > 0)
                    .map(|w| w.counters.read_merge_ratio() * 100.0),
                write_merge_percent: d
                    .last_tick
                    .filter(|w| w.counters.write_bios() > 0)
                    .map(|w| w.counters.write_merge_ratio() * 100.0),
                last: d.last_reason.to_string(),
            })
            .collect()
    }
}

/// Notes the ladder's tunables as just read from the device.
fn observe_ladder(actuator: &mut Actuator, info: &DeviceInfo) {
    actuator.observe(&info.name, Tunable::Nomerges, info.nomerges.as_deref());
    actuator.observe(
        &info.name,
        Tunable::FrontMerges,
        info.front_merges.as_deref(),
    );
}

fn caps_of(info: &DeviceInfo) -> Caps {
    Caps::for_scheduler(
        info.scheduler.as_deref(),
        info.front_merges.as_deref() == Some("1"),
    )
}

/// Formats the device table for humans.
pub fn format_rows(rows: &[DeviceRow]) -> String {
    let mut s = format!(
        "{:<12} {:<12} {:<12} {:>8} {:<11} {:>10} {:>7} {:>7}  {}\n",
        "DEVICE", "SCHEDULER", "STATUS", "NOMERGES", "LEVEL", "BIOS/S", "RD-MRG", "WR-MRG", "LAST"
    );
    let opt = |v: Option<f64>, prec: usize| match v {
        Some(x) => format!("{x:.prec$}"),
        None => "-".into(),
    };
    for r in rows {
        let last = if r.status == "managed" {
            r.last.clone()
        } else {
            r.why.clone()
        };
        s.push_str(&format!(
            "{:<12} {:<12} {:<12} {:>8} {:<11} {:>10} {:>6}% {:>6}%  {}\n",
            r.device,
            r.scheduler,
            r.status,
            r.nomerges,
            r.mode,
            opt(r.bios_per_sec, 0),
            opt(r.read_merge_percent, 1),
            opt(r.write_merge_percent, 1),
            last
        ));
    }
    s
}

impl Controller for Daemon {
    fn interval_ms(&self) -> u64 {
        self.cfg.daemon.interval_ms
    }
    fn next_tick_in_ms(&self) -> u64 {
        Daemon::next_tick_in_ms(self)
    }
    fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        Daemon::tick(self, now_ms, fs)
    }
    fn restore(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        self.restore_all(now_ms, fs)
    }
    fn as_daemon(&self) -> Option<&Daemon> {
        Some(self)
    }
}
