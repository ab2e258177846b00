//! One tick of mergetune, shared by every world: read counters through [`BlockFs`], turn
//! them into windows, ask the pure policy, apply through the [`Actuator`], and return the
//! decisions with their reasons. The real loop (main.rs), dry-run and the simulator all
//! call [`Daemon::tick`]; only the `BlockFs` and the state store differ.

use crate::actuator::{Actuator, SetOutcome};
use crate::blockfs::{BlockFs, FsError};
use crate::config::Config;
use crate::controller::{Controller, Decision};
use crate::devices::{DeviceInfo, Management, classify, describe, read_device};
use crate::diskstats::parse_diskstats;
use crate::policy::{Caps, OutcomeKind, PolicyState, decide, tunables};
use crate::sampler::{Counters, Delta, Sampler, Window, WindowAcc, WindowClose};
use crate::state::MemoryStore;
use serde::Serialize;
use std::collections::BTreeMap;
use tracing::{info, warn};

pub const NOMERGES: &str = "queue/nomerges";
pub const FRONT_MERGES: &str = "queue/iosched/front_merges";

/// Everything mergetune tracks about one device.
#[derive(Debug, Clone)]
pub struct DeviceRuntime {
    pub info: DeviceInfo,
    /// nomerges when mergetune first saw the device: the admin's value.
    pub first_nomerges: Option<String>,
    /// front_merges when mergetune first saw the device (mergetune's own L1 writes must
    /// not make the rung look unavailable later).
    pub first_front_merges: Option<String>,
    pub management: Management,
    /// Set when someone else changed a tunable under mergetune: sticky until restart.
    pub foreign: bool,
    pub policy: PolicyState,
    pub window: WindowAcc,
    /// What the kernel holds as far as mergetune knows (last read, or last written).
    pub observed_nomerges: Option<String>,
    /// The same for mq-deadline's front_merges (None where the ladder does not use it).
    pub observed_front_merges: Option<String>,
    /// The rungs of the merge ladder this device offers.
    pub caps: Caps,
    pub last_window: Option<Window>,
    /// When `last_window` closed.
    pub last_window_ms: u64,
    /// Scheduler slice tuning (src/slices.rs).
    pub slices: crate::slices::SliceState,
    /// The slice tunables' values when mergetune first saw them (a non-default value is
    /// the operator's), and what mergetune last wrote to each.
    pub slice_first: Option<Vec<(&'static str, u64)>>,
    pub slice_written: Vec<(&'static str, u64)>,
    /// Someone else changed a slice tunable: slices are left alone on this device.
    pub slices_foreign: bool,
    /// The counters of the last tick alone, for the device table.
    pub last_tick: Option<Window>,
    pub last_tick_ms: u64,
    pub last_reason: crate::policy::Reason,
    pub last_decision: Option<Decision>,
    /// A failed write is retried no earlier than this.
    pub retry_after_ms: u64,
}

/// Counters for the operator (exported as metrics by the metrics layer).
#[derive(Debug, Clone, Serialize)]
pub struct DaemonCounters {
    pub ticks: u64,
    pub decisions: u64,
    pub write_errors: u64,
    pub diskstats_errors: u64,
    pub counter_resets: u64,
    /// Failed saves of state.json.
    pub state_save_errors: u64,
    /// Failed reads of a device tunable.
    pub tunable_read_errors: u64,
    /// True when state.json holds every record mergetune has in memory.
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
    last_parse_error_count: usize,
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
            last_parse_error_count: 0,
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
            .iter()
            .filter(|(_, d)| d.foreign)
            .map(|(n, _)| n.clone())
            .collect();
        for name in foreign {
            info!(device = %name, "{name}: reload clears the hands-off mark; rediscovering it");
            self.devices.remove(&name);
        }
    }

    fn rescan(&mut self, now_ms: u64, fs: &mut dyn BlockFs) {
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
            info!(device = %name, "{name}: device removed");
            self.devices.remove(&name);
            self.pending.remove(&name);
            if let Err(e) = self.actuator.forget(&name) {
                warn!("{e}");
            }
        }
        for name in names {
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
                    judged.nomerges = dev.first_nomerges.clone();
                    let m = if dev.foreign {
                        dev.management.clone()
                    } else {
                        classify(&judged, &self.cfg.devices)
                    };
                    if m != dev.management {
                        info!(device = %name, "{}", describe(&judged, &m));
                        if dev.management.is_managed() && dev.policy.level != 0 {
                            for r in self.actuator.restore_all_for(fs, &name) {
                                info!(device = %name, "{r}");
                            }
                        }
                        dev.management = m;
                        dev.policy = PolicyState::new(now_ms, &self.cfg.policy);
                        dev.observed_nomerges = info.nomerges.clone();
                        dev.observed_front_merges = info.front_merges.clone();
                    }
                    let caps = Caps::for_scheduler(
                        info.scheduler.as_deref(),
                        info.has_front_merges && dev.first_front_merges.as_deref() == Some("1"),
                    );
                    if caps != dev.caps && dev.management.is_managed() {
                        info!(device = %name, "{name}: scheduler now {}: merge ladder rungs {:?}", info.scheduler.as_deref().unwrap_or("-"), caps);
                        // A lost rung (say front_merges after a scheduler switch) is
                        // simply no longer written; the level stays meaningful via nomerges.
                        dev.caps = caps;
                        dev.observed_front_merges = if caps.front_merges {
                            info.front_merges.clone()
                        } else {
                            None
                        };
                    }
                    dev.info = info;
                }
                None => {
                    let m = classify(&info, &self.cfg.devices);
                    info!(device = %name, "{}", describe(&info, &m));
                    self.devices.insert(
                        name.clone(),
                        DeviceRuntime {
                            first_nomerges: info.nomerges.clone(),
                            first_front_merges: info.front_merges.clone(),
                            observed_nomerges: info.nomerges.clone(),
                            observed_front_merges: info.front_merges.clone(),
                            caps: caps_of(&info),
                            info,
                            management: m,
                            foreign: false,
                            policy: PolicyState::new(now_ms, &self.cfg.policy),
                            window: WindowAcc {
                                started_ms: now_ms,
                                ..Default::default()
                            },
                            last_window: None,
                            last_window_ms: 0,
                            slices: Default::default(),
                            slice_first: None,
                            slice_written: Vec::new(),
                            slices_foreign: false,
                            last_tick: None,
                            last_tick_ms: now_ms,
                            last_reason: crate::policy::Reason::from(""),
                            last_decision: None,
                            retry_after_ms: 0,
                        },
                    );
                }
            }
        }
    }

    /// One tick at `now_ms` (ms since the daemon started, real or virtual).
    pub fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        self.slack_ms = self.next_step_ms / 2;
        let decisions = self.tick_inner(now_ms, fs);
        self.next_step_ms = self.step_after_tick();
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
            && self
                .devices
                .values()
                .any(|d| d.management.is_managed() && d.policy.mode == crate::policy::Mode::Off);
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
        let text = match fs.read_diskstats() {
            Ok(t) => t,
            Err(e) => {
                self.counters.diskstats_errors += 1;
                warn!("{e}");
                return Vec::new();
            }
        };
        let parsed = parse_diskstats(&text);
        if !parsed.errors.is_empty() {
            self.counters.diskstats_errors += 1;
            if parsed.errors.len() != self.last_parse_error_count {
                for e in parsed.errors.iter().take(5) {
                    warn!("diskstats: {e} (other devices still read)");
                }
            }
        }
        self.last_parse_error_count = parsed.errors.len();
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
        self.counters.decisions += decisions.len() as u64;
        decisions
    }

    fn tick_device(&mut self, name: &str, now_ms: u64, fs: &mut dyn BlockFs) -> Option<Decision> {
        let pcfg = self.cfg.policy.clone();
        let dev = self.devices.get_mut(name)?;
        let window_ms = self.cfg.window_ms();
        let close = if dev.policy.mode == crate::policy::Mode::Off {
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
        let window = self
            .pending
            .get(name)
            .and_then(|c| dev.window.push(c, now_ms, &close));
        if window.is_some() {
            dev.last_window = window;
            dev.last_window_ms = now_ms;
        }
        let ev = decide(&dev.policy, window.as_ref(), dev.caps, &pcfg, now_ms);
        if ev.kind == OutcomeKind::Hold && window.is_none() {
            // Nothing to decide: spare the sysfs reads (a few µs per device per tick).
            dev.policy = ev.state;
            dev.last_reason = ev.reason;
            return None;
        }
        // Someone else's write wins: stop managing and never restore over it. Checked at
        // every window and before every write.
        let mut watched = vec![(NOMERGES, dev.observed_nomerges.clone())];
        if dev.caps.front_merges {
            watched.push((FRONT_MERGES, dev.observed_front_merges.clone()));
        }
        let mut current_nomerges = String::new();
        for (attr, expected) in watched {
            let current = match fs.read_attr(name, attr) {
                Ok(v) => v.trim().to_string(),
                Err(FsError::NotFound { .. }) => {
                    self.force_rescan = true;
                    return None;
                }
                Err(e) => {
                    warn!(device = %name, "{e}");
                    return None;
                }
            };
            if expected.as_deref() != Some(current.as_str()) {
                let was = expected.unwrap_or_default();
                warn!(
                    device = %name,
                    "{name}: {attr} changed from {was} to {current} by someone else: no longer managed (restart mergetune to manage it again)"
                );
                dev.foreign = true;
                dev.management = Management::AdminOwned(format!(
                    "{attr} changed from {was} to {current} by someone else"
                ));
                if attr == NOMERGES {
                    dev.info.nomerges = Some(current);
                }
                if let Err(e) = self.actuator.forget(name) {
                    warn!("{e}");
                }
                return None;
            }
            if attr == NOMERGES {
                current_nomerges = current;
            }
        }
        if ev.kind == OutcomeKind::Hold {
            dev.policy = ev.state;
            dev.last_reason = ev.reason;
            return None;
        }
        let from_level = dev.policy.level;
        let mut decision = Decision {
            at_ms: now_ms,
            device: name.to_string(),
            attr: NOMERGES.to_string(),
            from: current_nomerges.clone(),
            to: current_nomerges.clone(),
            kind: ev.kind.as_str().to_string(),
            reason: ev.reason.to_string(),
            applied: true,
        };
        let Some(to_level) = ev.to_level else {
            // A probe that ends at L0 changes nothing in the kernel.
            info!(device = %name, from = %decision.from, to = %decision.to, reason = %decision.reason, "{name}: {}: {}", decision.kind, decision.reason);
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
        let mut changed: Vec<(&str, String, &str)> = Vec::new();
        let mut dry = false;
        let mut failure = None;
        for (attr, value) in tunables(to_level, dev.caps) {
            match self.actuator.set(fs, name, attr, value) {
                Ok(SetOutcome::Unchanged) => {}
                Ok(SetOutcome::Written { from }) => {
                    if attr == NOMERGES {
                        dev.observed_nomerges = Some(value.to_string());
                    } else {
                        dev.observed_front_merges = Some(value.to_string());
                    }
                    changed.push((attr, from, value));
                }
                Ok(SetOutcome::DryRun { from }) => {
                    dry = true;
                    changed.push((attr, from, value));
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if let Some((attr, from, to)) = changed.first() {
            decision.attr = changed.iter().map(|c| c.0).collect::<Vec<_>>().join("+");
            decision.from = changed
                .iter()
                .map(|c| c.1.as_str())
                .collect::<Vec<_>>()
                .join("+");
            decision.to = changed.iter().map(|c| c.2).collect::<Vec<_>>().join("+");
            let _ = (attr, from, to);
        }
        if let Some(e) = failure {
            self.counters.write_errors += 1;
            let wait_ms = (pcfg.min_dwell_secs * 1000).max(self.cfg.window_ms());
            dev.retry_after_ms = now_ms + wait_ms;
            warn!(device = %name, "{name}: L{from_level} -> L{to_level} failed, level unchanged, retry in {wait_ms} ms: {e}");
            decision.applied = false;
            decision.reason = format!("{} (write failed: {e})", decision.reason);
            dev.last_reason = decision.reason.clone().into();
            if matches!(
                e,
                crate::actuator::ActuatorError::Fs(FsError::NotFound { .. })
            ) {
                self.force_rescan = true;
            }
            return Some(decision);
        }
        if dry {
            decision.applied = false;
            info!(device = %name, from = %decision.from, to = %decision.to, reason = %decision.reason,
                "{name}: dry-run, would write {} {} -> {}: {}: {}", decision.attr, decision.from, decision.to, decision.kind, decision.reason);
        } else {
            info!(device = %name, from = %decision.from, to = %decision.to, reason = %decision.reason,
                "{name}: {} {} -> {}: {}: {}", decision.attr, decision.from, decision.to, decision.kind, decision.reason);
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
        if !dev.management.is_managed() || dev.slices_foreign || dev.last_window_ms != now_ms {
            return None;
        }
        let w = dev.last_window?;
        let sched = dev.info.scheduler.clone()?;
        let defaults = crate::slices::tunables_for(&sched);
        if defaults.is_empty() {
            return None;
        }
        let mut values = Vec::with_capacity(defaults.len());
        for (n, _) in defaults {
            if let Ok(v) = fs.read_attr(name, &crate::slices::attr(n))
                && let Ok(x) = v.trim().parse::<u64>()
            {
                values.push((*n, x));
            }
        }
        let first = dev
            .slice_first
            .get_or_insert_with(|| values.clone())
            .clone();
        // Someone else's write wins, as for nomerges.
        for (n, ours) in &dev.slice_written {
            if let Some((_, cur)) = values.iter().find(|(m, _)| m == n)
                && cur != ours
            {
                warn!(device = %name, "{name}: {} changed from {ours} to {cur} by someone else: scheduler slices no longer tuned here", crate::slices::attr(n));
                dev.slices_foreign = true;
                for (m, _) in &dev.slice_written {
                    if let Err(e) = self.actuator.forget_attr(name, &crate::slices::attr(m)) {
                        warn!("{e}");
                    }
                }
                return None;
            }
        }
        let owned: Vec<&'static str> = defaults
            .iter()
            .filter(|(n, d)| first.iter().any(|(m, v)| m == n && v != d))
            .map(|(n, _)| *n)
            .collect();
        let (state, change) =
            crate::slices::decide(&dev.slices, &w, &sched, &values, &owned, &cfg, now_ms);
        let previous = std::mem::replace(&mut dev.slices, state);
        if let Some(kept) = dev.slices.kept.take() {
            info!(device = %name, "{name}: slices: {kept}");
        }
        let ch = change?;
        let attr = crate::slices::attr(ch.tunable);
        let mut decision = Decision {
            at_ms: now_ms,
            device: name.to_string(),
            attr: attr.clone(),
            from: ch.from.to_string(),
            to: ch.to.to_string(),
            kind: ch.kind.to_string(),
            reason: ch.reason.clone(),
            applied: true,
        };
        match self.actuator.set(fs, name, &attr, &ch.to.to_string()) {
            Ok(SetOutcome::DryRun { .. }) => {
                decision.applied = false;
                info!(device = %name, from = %decision.from, to = %decision.to, reason = %decision.reason,
                    "{name}: dry-run, would write {attr} {} -> {}: {}: {}", decision.from, decision.to, decision.kind, decision.reason);
            }
            Ok(_) => {
                dev.slice_written.retain(|(n, _)| *n != ch.tunable);
                dev.slice_written.push((ch.tunable, ch.to));
                info!(device = %name, from = %decision.from, to = %decision.to, reason = %decision.reason,
                    "{name}: {attr} {} -> {}: {}: {}", decision.from, decision.to, decision.kind, decision.reason);
            }
            Err(e) => {
                self.counters.write_errors += 1;
                warn!(device = %name, "{name}: write of {attr}={} failed, slices unchanged: {e}", ch.to);
                dev.slices = previous;
                decision.applied = false;
                decision.reason = format!("{} (write failed: {e})", decision.reason);
            }
        }
        dev.last_decision = Some(decision.clone());
        Some(decision)
    }

    /// Restores every original value (on exit). Returns decisions of kind `restore`.
    pub fn restore_all(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        let results = self.actuator.restore_all(fs);
        results
            .into_iter()
            .map(|r| {
                info!(device = %r.device, "{r}");
                let (from, to, applied) = match &r.outcome {
                    crate::state::RestoreOutcome::Restored { from, to } => {
                        (from.clone(), to.clone(), true)
                    }
                    _ => (String::new(), String::new(), false),
                };
                if applied && let Some(dev) = self.devices.get_mut(&r.device) {
                    if r.attr == NOMERGES {
                        dev.observed_nomerges = Some(to.clone());
                    } else if r.attr == FRONT_MERGES {
                        dev.observed_front_merges = Some(to.clone());
                    }
                    dev.policy = PolicyState::new(now_ms, &self.cfg.policy);
                }
                Decision {
                    at_ms: now_ms,
                    device: r.device.clone(),
                    attr: r.attr.clone(),
                    from,
                    to,
                    kind: "restore".into(),
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
                nomerges: d
                    .observed_nomerges
                    .clone()
                    .or(d.info.nomerges.clone())
                    .unwrap_or_else(|| "-".into()),
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
