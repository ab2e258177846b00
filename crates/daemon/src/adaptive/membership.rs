//! Which devices the daemon knows and whether it manages them: discovery at a rescan,
//! devices that come, go and come back, a reload that clears a hands-off mark, and the
//! exit path that puts every original back. The ownership itself (one record per tunable)
//! is the actuator's; this is the daemon's side of it.

use super::{Daemon, DeviceRuntime, LADDER};
use crate::actuator::Actuator;
use crate::state::{RestoreOutcome, RestoreResult};
use mergetune_kernel::blockfs::{BlockFs, FsError};
use mergetune_kernel::devices::{DeviceIdentity, DeviceInfo, Sameness, read_device, read_identity};
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::decision::{Applied, Change, Decision, DecisionKind};
use mergetune_logic::devices::{classify, describe};
use mergetune_logic::policy::{Caps, PolicyState};
use mergetune_logic::pricing::worth::Worth;
use mergetune_logic::sampler::WindowAcc;
use tracing::{info, warn};

impl Daemon {
    /// What the configured profile says of this device: its table where it matches the
    /// running kernel and the device, else unknown (live pricing: replaced per window).
    fn profile_worth(&mut self, fs: &mut dyn BlockFs, info: &DeviceInfo) -> Worth {
        if self.kernel_release.is_none() {
            self.kernel_release = fs.kernel_release();
        }
        let key = device_key(fs, info);
        // While the sampler cannot run, the fallback profile's table is the device's
        // (`live_prices`).
        let source = self.fallback_pricing().unwrap_or(&self.pricing);
        source.profile_worth(
            info.known_scheduler(),
            self.kernel_release.as_deref(),
            key.as_ref(),
        )
    }

    pub(super) fn log_restores(results: &[RestoreResult], context: &str) {
        for r in results {
            if r.outcome.failed() {
                warn!(device = %r.device, "{context}: {r}");
            } else {
                info!(device = %r.device, "{context}: {r}");
            }
        }
    }

    /// A rescan: devices a reload cleared are rediscovered, devices gone are forgotten
    /// (their records kept), and every device listed is read and either added or brought
    /// up to date (management, capabilities).
    pub(super) fn rescan(&mut self, now_ms: u64, fs: &mut dyn BlockFs) {
        for name in std::mem::take(&mut self.pending_rediscover) {
            info!(device = %name, "{name}: reload clears the hands-off mark; rediscovering it");
            let results = self.actuator.rediscover(fs, &name);
            Self::log_restores(&results, "rediscovery");
            self.drop_runtime(&name);
        }
        let names = match fs.list_block_devices() {
            Ok(n) => n,
            Err(e) => {
                warn!("cannot list block devices: {e}");
                return;
            }
        };
        self.forget_gone(&names, now_ms, fs);
        for name in names {
            if self.detached(fs, &name, now_ms) {
                continue;
            }
            if !self.devices.contains_key(&name) && self.actuator.has_vanished_records(&name) {
                self.note_same_queue(fs, &name);
                // Back after a while: a value mergetune wrote is still mergetune's.
                let results = self.actuator.device_returned(fs, &name);
                Self::log_restores(&results, "device back");
            }
            if self.devices.get(&name).is_some_and(|d| d.another_disk)
                || (self.devices.contains_key(&name)
                    && self.actuator.recorded_identity(&name).is_some())
            {
                // A disk holding mergetune's values is checked at every rescan: a value of
                // its that another disk under the name happens to hold must not be taken
                // for mergetune's.
                self.forget_if_another_disk(fs, &name);
            }
            let Some(info) = self.read_info(fs, &name) else {
                continue;
            };
            let worth = self.profile_worth(fs, &info);
            if self.devices.contains_key(&name) {
                self.update_known(fs, &name, info, worth, now_ms);
            } else {
                let identity = read_identity(fs, &name).ok().flatten();
                self.add_new(name, info, identity, worth, now_ms);
            }
        }
        self.refresh_unmanaged = false;
    }

    /// If another disk has taken `name`, the old one is forgotten as gone (its values went
    /// with it), so that the rescan finds the new one afresh.
    fn forget_if_another_disk(&mut self, fs: &mut dyn BlockFs, name: &str) {
        let known = self.devices.get(name).and_then(|d| d.identity.as_ref());
        let Some((was, now)) = another_disk(&self.actuator, known, fs, name) else {
            self.note_same_queue(fs, name);
            return;
        };
        info!(device = %name, "{name}: another disk has the name now ({now}; was {was}): a new device, found afresh; mergetune's records of the old one are dropped (its values went with it)");
        let _ = fs.tap_close(name);
        self.devices.remove(name);
        self.actuator.device_replaced(name);
        self.attr_read_errors.remove(name);
    }

    /// A loop device detached while mergetune knows it (by its records, or its first
    /// sight): like a device gone, nothing is written to it and its records are kept, until
    /// an attach shows which file it holds (the same: restored; another: another disk).
    fn detached(&mut self, fs: &mut dyn BlockFs, name: &str, now_ms: u64) -> bool {
        let known = self
            .actuator
            .recorded_identity(name)
            .or(self.devices.get(name).and_then(|d| d.identity.as_ref()))
            .or(self.detached.get(name))
            .filter(|k| k.backing.is_some())
            .cloned();
        let Some(known) = known else {
            return false;
        };
        let Some(now) = read_identity(fs, name).ok().flatten() else {
            return false;
        };
        if known.compare(&now) != Sameness::Detached {
            self.detached.remove(name);
            return false;
        }
        // Remembered while detached, also without records: a detached queue is nobody's
        // to manage (no I/O reaches it), and its next attach is judged against this.
        self.detached.insert(name.to_string(), known.clone());
        if self.devices.remove(name).is_some() {
            let _ = fs.tap_close(name);
            info!(device = %name, "{name}: loop device detached ({now}; was {known}): nothing is written to it until it is attached again; mergetune's records of it are kept (re-attached to the same file they are restored, to another they are dropped)");
            self.actuator.device_vanished(name, now_ms);
            self.attr_read_errors.remove(name);
        }
        true
    }

    /// A loop device re-attached to the same backing file while mergetune holds records
    /// of it: its queue kept its values, so the records stay and are restored. Whether a
    /// value equal to mergetune's is still mergetune's, or an operator wrote the same one
    /// meanwhile, cannot be told: said once, with what `restore` can be told.
    fn note_same_queue(&mut self, fs: &mut dyn BlockFs, name: &str) {
        let Some(known) = self.actuator.recorded_identity(name).cloned() else {
            return;
        };
        let Some(now) = read_identity(fs, name).ok().flatten() else {
            return;
        };
        if known.compare(&now) != Sameness::SameQueue
            || self.reattached_noted.get(name) == now.diskseq.as_ref()
        {
            return;
        }
        warn!(device = %name, "{name}: re-attached to the same backing file ({now}; the record is of {known}): its queue kept its values, and mergetune's records of it stay; a value equal to mergetune's that an operator wrote meanwhile cannot be told from it (`mergetune restore --reattached leave` leaves such values alone)");
        if let Some(seq) = now.diskseq {
            self.reattached_noted.insert(name.to_string(), seq);
        }
        if let Some(d) = self.devices.get_mut(name) {
            d.reattached = true;
        }
    }

    /// Forgets a device's runtime, to be found afresh, but not which disk it was: a loop
    /// device found afresh with no backing file is the same queue waiting for its file,
    /// judged against this identity at its next attach as if seen detached, and nothing is
    /// written to it meanwhile (a record made now would name no file, and no restore after
    /// the attach could tell the disk as the same).
    fn drop_runtime(&mut self, name: &str) {
        if let Some(id) = self
            .devices
            .remove(name)
            .and_then(|d| d.identity)
            .filter(|id| id.backing.is_some())
        {
            self.detached.insert(name.to_string(), id);
        }
    }

    /// Devices no longer listed: their taps closed, their runtime dropped, their records
    /// kept (marked vanished) for when they come back.
    fn forget_gone(&mut self, names: &[String], now_ms: u64, fs: &mut dyn BlockFs) {
        // A set, not a scan of `names` per known device: with 100,000 devices listed that
        // scan made every rescan quadratic (seconds of CPU per rescan).
        let listed: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
        let gone: Vec<String> = self
            .devices
            .keys()
            .filter(|n| !listed.contains(n.as_str()))
            .cloned()
            .collect();
        for name in gone {
            let _ = fs.tap_close(&name);
            info!(device = %name, "{name}: device removed (any original mergetune changed stays recorded)");
            self.drop_runtime(&name);
            self.actuator.device_vanished(&name, now_ms);
            self.attr_read_errors.remove(&name);
        }
    }

    /// The device's queue facts; None when it vanished mid-read or cannot be read (said
    /// once per device and error, not once per rescan).
    fn read_info(&mut self, fs: &mut dyn BlockFs, name: &str) -> Option<DeviceInfo> {
        match read_device(fs, name) {
            Ok(info) => {
                if self.attr_read_errors.remove(name).is_some() {
                    info!(device = %name, "{name}: queue attributes readable again");
                }
                Some(info)
            }
            Err(FsError::NotFound { .. }) => None,
            Err(e) => {
                let e = e.to_string();
                if self.attr_read_errors.get(name) != Some(&e) {
                    warn!(device = %name, "{name}: cannot read queue attributes: {e} (said once until it changes)");
                    self.attr_read_errors.insert(name.to_string(), e);
                }
                None
            }
        }
    }

    /// A known device read again: its management judged on the nomerges first seen (a
    /// device handed off keeps its state), restored when it stops being managed, and its
    /// capabilities brought up to date.
    fn update_known(
        &mut self,
        fs: &mut dyn BlockFs,
        name: &str,
        info: DeviceInfo,
        worth: Worth,
        now_ms: u64,
    ) {
        let Some(dev) = self.devices.get_mut(name) else {
            return;
        };
        if self.refresh_unmanaged && !dev.management.is_managed() {
            self.actuator.refresh_unowned(name);
            observe_ladder(&mut self.actuator, &info);
        }
        let mut judged = info.clone();
        judged.nomerges = self
            .actuator
            .first_seen(name, Tunable::Nomerges)
            .map(str::to_string);
        let m = if self.actuator.any_theirs(name, &LADDER) {
            dev.management.clone()
        } else {
            classify(&judged, &self.cfg.devices)
        };
        if m != dev.management {
            info!(device = %name, "{}", describe(&judged, &m));
            if dev.management.is_managed() {
                let results = self.actuator.restore_device(fs, name);
                Self::log_restores(&results, "no longer managed");
            }
            dev.management = m;
            dev.policy = PolicyState::new(now_ms, &self.cfg.policy);
            observe_ladder(&mut self.actuator, &info);
        }
        let caps = Caps::for_scheduler(
            info.known_scheduler(),
            info.has_front_merges()
                && self.actuator.first_seen(name, Tunable::FrontMerges) == Some("1"),
        )
        .priced(worth);
        if caps != dev.caps && dev.management.is_managed() {
            update_caps(&mut self.actuator, fs, dev, &info, caps);
        }
        dev.info = info;
    }

    /// A device seen for the first time: its ladder's values observed (the originals), its
    /// management judged, its state started.
    fn add_new(
        &mut self,
        name: String,
        info: DeviceInfo,
        identity: Option<DeviceIdentity>,
        worth: Worth,
        now_ms: u64,
    ) {
        observe_ladder(&mut self.actuator, &info);
        let m = classify(&info, &self.cfg.devices);
        info!(device = %name, "{}", describe(&info, &m));
        // Priced when found (live: at no rate yet), so that the startup log, status and
        // /metrics show a price before its first window closes and the tick prices it.
        let priced = if self.live_prices() {
            self.live
                .worth(&name, info.known_scheduler(), 0.0, &self.cfg.pricing)
        } else {
            worth
        };
        let runtime = DeviceRuntime {
            reattached: identity
                .as_ref()
                .and_then(|i| i.diskseq)
                .is_some_and(|s| self.reattached_noted.get(&name) == Some(&s)),
            identity,
            another_disk: false,
            caps: caps_of(&info).priced(worth),
            worth: priced,
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
            slice_writes: Default::default(),
            last_tick: None,
            last_tick_ms: now_ms,
            last_reason: mergetune_logic::policy::Reason::from(""),
            last_decision: None,
            retry_after_ms: 0,
            write_backoff: Default::default(),
            read_warned_ms: None,
            sense: Default::default(),
            tick_counters: None,
            cap_noted: false,
            time_back_noted: false,
            diskstats_line: None,
        };
        self.devices.insert(name, runtime);
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
}

/// The disk `name` was (its records', else its first sight's) and the one there now, when
/// they differ. A device whose number cannot be read now is taken to be the same (a gone
/// one is found gone by the rescan).
pub(super) fn another_disk(
    actuator: &Actuator,
    first_sight: Option<&DeviceIdentity>,
    fs: &mut dyn BlockFs,
    name: &str,
) -> Option<(DeviceIdentity, DeviceIdentity)> {
    let known = actuator.recorded_identity(name).or(first_sight)?;
    let now = read_identity(fs, name).ok().flatten()?;
    (!known.same_device(&now)).then(|| (known.clone(), now))
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
        info.known_scheduler(),
        info.front_merges.as_deref() == Some("1"),
    )
}

/// The kind of device, for matching a profile's key; None where the world does not say
/// (a simulated or fake device without `queue/rotational`).
fn device_key(
    fs: &mut dyn BlockFs,
    info: &DeviceInfo,
) -> Option<mergetune_logic::pricing::profile::DeviceKey> {
    let rotational = info.rotational?;
    Some(mergetune_logic::pricing::profile::DeviceKey {
        rotational,
        nr_hw_queues: fs.list_dir(&info.name, "mq").map_or(0, |v| v.len() as u32),
        driver: info
            .name
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .collect(),
        model: fs
            .read_attr(&info.name, "device/model")
            .map(|m| m.trim().to_string())
            .unwrap_or_default(),
    })
}

/// What changed in a device's ladder, in words: the scheduler only when it changed, the
/// rungs only when they changed, the prices only when the cost profile gave new ones (a
/// reload that changes only `cost_profile` changes only those).
fn caps_change(old_info: &DeviceInfo, old: &Caps, info: &DeviceInfo, new: &Caps) -> String {
    use mergetune_logic::decision::Level;
    let mut parts = Vec::new();
    if old_info.scheduler != info.scheduler {
        parts.push(format!(
            "scheduler {} -> {}",
            old_info.scheduler.as_ref().map_or("-", |s| s.name()),
            info.scheduler.as_ref().map_or("-", |s| s.name())
        ));
    }
    let rungs = |c: &Caps| -> Vec<Level> { Level::ALL.into_iter().filter(|&l| c.has(l)).collect() };
    if rungs(old) != rungs(new) {
        let names: Vec<String> = rungs(new).iter().map(|l| l.to_string()).collect();
        parts.push(format!("merge ladder rungs now {}", names.join(", ")));
    }
    if old.sense_at_l3 != new.sense_at_l3 {
        parts.push(if new.sense_at_l3 {
            "the bio tap now sees at L3".to_string()
        } else {
            "the bio tap no longer sees at L3".to_string()
        });
    }
    if old.worth != new.worth {
        let levels: Vec<Level> = rungs(new).into_iter().filter(|&l| l != Level::L0).collect();
        parts.push(format!(
            "what not merging saves, from the cost profile: {}",
            new.worth.describe(levels)
        ));
    }
    if parts.is_empty() {
        parts.push("merge ladder unchanged".into());
    }
    parts.join("; ")
}

/// New capabilities of a managed device (a scheduler switch, a reload that re-priced it).
/// A lost rung (say front_merges after a scheduler switch) is simply no longer written;
/// the level stays meaningful via nomerges. Its file went with the old scheduler: a
/// hand-off of that tunable, not a device gone (whose record would be kept for days). A
/// rung that appears (a switch to mq-deadline) starts from what is there; one that stays
/// keeps what mergetune expects, so that a change by someone else is still seen as theirs
/// (a reload that re-prices the caps must not launder it).
fn update_caps(
    actuator: &mut Actuator,
    fs: &mut dyn BlockFs,
    dev: &mut DeviceRuntime,
    info: &DeviceInfo,
    caps: Caps,
) {
    let name = info.name.as_str();
    info!(device = %name, "{name}: {}", caps_change(&dev.info, &dev.caps, info, &caps));
    if dev.caps.front_merges && !info.has_front_merges() {
        let results = actuator.restore_tunable(fs, name, Tunable::FrontMerges);
        Daemon::log_restores(results.as_slice(), "scheduler switch");
    }
    let appeared = caps.front_merges && !dev.caps.front_merges;
    dev.caps = caps;
    if appeared {
        actuator.observe(name, Tunable::FrontMerges, info.front_merges.as_deref());
    }
}
