//! One managed device's turn in a tick, as named steps a reader follows top to bottom
//! ([`DeviceTick::ladder`]): close the window, say what the device can do and what a step
//! would save, let a dry run see what the live daemon would, ask the pure policy, check
//! that nobody else wrote the device's tunables, then write and log. [`DeviceTick`] holds
//! what a step borrows of the daemon besides the device itself, so the daemon's device map
//! is walked once per tick, without a lookup by name per step.
//!
//! The window and the caps (200 bytes, most of it the worth) are built in place in the
//! ladder's frame and handed to the steps by reference: returned and passed by value from
//! step to step, their copies were a tenth of a tick.

use super::{Daemon, DeviceRuntime, LADDER, READ_WARN_EVERY_MS};
use crate::actuator::{Actuator, ActuatorError, SetOutcome};
use crate::dryrun::as_counted_at;
use crate::snapshot::DaemonCounters;
use mergetune_kernel::blockfs::{BlockFs, FsError};
use mergetune_kernel::devices::{Sameness, read_identity};
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::Config;
use mergetune_logic::decision::{Applied, Change, Decision, DecisionKind, Level};
use mergetune_logic::devices::Management;
use mergetune_logic::policy::{
    Caps, DEEPEST_LEVEL, Evaluation, Mode, OutcomeKind, Reason, decide, hold_without_deciding,
    tunables,
};
use mergetune_logic::pricing::live::LivePricing;
use mergetune_logic::sampler::{Window, WindowClose};
use tracing::{debug, info, warn};

use super::membership::another_disk;

/// What one device's tick borrows of the [`Daemon`].
pub(super) struct DeviceTick<'a> {
    pub cfg: &'a Config,
    pub actuator: &'a mut Actuator,
    /// The live pricing, when the daemon prices live (else the caps' profile worth stands).
    pub live: Option<&'a LivePricing>,
    /// The tolerance of window lengths: half the step that led to this tick.
    pub slack_ms: u64,
    pub counters: &'a mut DaemonCounters,
    pub force_rescan: &'a mut bool,
}

impl DeviceTick<'_> {
    /// The merge ladder's turn: at most one decision.
    pub fn ladder(
        &mut self,
        name: &str,
        dev: &mut DeviceRuntime,
        now_ms: u64,
        fs: &mut dyn BlockFs,
    ) -> Option<Decision> {
        let mut window = self.close_window(name, dev, now_ms, fs);
        if let Some(reason) =
            hold_without_deciding(&mut dev.policy, window.as_ref(), &self.cfg.policy, now_ms)
        {
            // What the policy says to an open window or an idle one, without a copy of its
            // state, and to an open one without a price it would not read.
            if window.is_some() {
                // A window closed: its price is the device's, and nobody else's write to
                // its tunables goes unseen for longer than a window, busy or not.
                self.caps_priced(dev, window.as_ref());
                self.still_ours(name, dev, now_ms, fs)?;
                dev.read_warned_ms = None;
            }
            dev.last_reason = reason;
            return None;
        }
        let mut caps = self.caps_priced(dev, window.as_ref());
        if self.actuator.dry_run() {
            self.as_live_would_see(name, dev, &mut window, &mut caps);
        }
        let ev = decide(&dev.policy, window.as_ref(), caps, &self.cfg.policy, now_ms);
        self.note_cap(name, dev, &ev, now_ms);
        if ev.reason.asks_the_tap() {
            let threshold = self.cfg.policy.enable_above_percent;
            dev.sense.ask(name, now_ms, &self.cfg.sense, threshold, fs);
        }
        if ev.kind == OutcomeKind::Hold && window.is_none() {
            // Nothing to decide: spare the sysfs reads (a few µs per device per tick).
            settle(dev, ev);
            return None;
        }
        let current_nomerges = self.still_ours(name, dev, now_ms, fs)?;
        dev.read_warned_ms = None;
        // Every outcome but a hold is a decision.
        let Some(kind) = ev.kind.decision_kind() else {
            settle(dev, ev);
            return None;
        };
        let mut decision = self.decision_of(name, now_ms, kind, &ev);
        let Some(to_level) = ev.to_level else {
            return Some(self.nothing_to_write(name, dev, decision, ev, &current_nomerges));
        };
        if !self.cfg.policy.enabled {
            dev.last_reason =
                format!("policy disabled: would {}: {}", decision.kind, ev.reason).into();
            return None;
        }
        if now_ms < dev.retry_after_ms {
            dev.last_reason = format!("waiting to retry a failed write: {}", ev.reason).into();
            return None;
        }
        if let Err(e) = self.write_level(name, dev, to_level, &mut decision.changes, fs) {
            self.write_failed(name, dev, now_ms, to_level, &mut decision, e);
            dev.last_decision = Some(Box::new(decision.clone()));
            return Some(decision);
        }
        if let Some(n) = dev.write_backoff.succeeded() {
            info!(device = %name, "{name}: written again after {n} failed tries");
        }
        let (from, to) = match decision.changes.first() {
            Some(c) => (c.from.clone(), c.to.clone()),
            None => (current_nomerges.clone(), current_nomerges),
        };
        log_decision(name, &decision, &from, &to, Some(decision.changes_text()));
        settle(dev, ev);
        // A window straddling a change would mix two regimes.
        dev.window.restart(now_ms);
        dev.last_decision = Some(Box::new(decision.clone()));
        Some(decision)
    }

    /// A decision that changes nothing in the kernel (a probe that ends at L0, a trial that
    /// stays, not worth it): logged and kept as the device's last, and it says so (a dry
    /// run's stays marked dry-run).
    fn nothing_to_write(
        &mut self,
        name: &str,
        dev: &mut DeviceRuntime,
        mut decision: Decision,
        ev: Evaluation,
        current_nomerges: &str,
    ) -> Decision {
        if !self.actuator.dry_run() {
            decision.applied = Applied::NothingToWrite;
        }
        let seen = self
            .actuator
            .as_seen(name, Tunable::Nomerges, current_nomerges)
            .to_string();
        log_decision(name, &decision, &seen, &seen, None);
        dev.last_decision = Some(Box::new(decision.clone()));
        settle(dev, ev);
        decision
    }

    /// Closes the device's window if this tick completes it, with the bio tap's sample at
    /// L3.
    fn close_window(
        &self,
        name: &str,
        dev: &mut DeviceRuntime,
        now_ms: u64,
        fs: &mut dyn BlockFs,
    ) -> Option<Window> {
        let pcfg = &self.cfg.policy;
        let window_ms = self.cfg.window_ms();
        // The tap's duty cycle at L3; its sample rides on the next window to close.
        let at_l3 = dev.policy.level() == DEEPEST_LEVEL;
        dev.sense.tick(
            name,
            now_ms,
            at_l3,
            &self.cfg.sense,
            pcfg.enable_above_percent,
            fs,
        );
        let close = if dev.policy.mode() == Mode::AtL3 && dev.sense.has_pending() {
            // The tap's sample is read as soon as it is whole (its answer needs no counts).
            WindowClose::fixed(0, 0)
        } else if dev.policy.mode() == Mode::AtL3 {
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
        let mut window = dev
            .tick_counters
            .and_then(|c| dev.window.push(&c, now_ms, &close));
        if let Some(w) = window.as_mut() {
            w.sensed = dev.sense.take_sample();
            dev.last_window = Some(*w);
            dev.last_window_ms = now_ms;
        }
        window
    }

    /// What the device can do and what a step down would save here, priced when the policy
    /// is about to read it (a window closed, or at L3), so that `dev.worth` is the price of
    /// the last decision. Priced live, the device's own worth is not read (a cache miss of
    /// three lines per device at 1024 devices, for a value about to be replaced).
    fn caps_priced(&self, dev: &mut DeviceRuntime, window: Option<&Window>) -> Caps {
        let worth = match self.live {
            Some(live) => {
                // The live price of this device's workload at its rate: the window's, else
                // the last one's.
                let w = window.or(dev.last_window.as_ref());
                let rate = dev
                    .policy
                    .l3_rate_bios_per_sec()
                    .unwrap_or_else(|| w.map_or(0.0, Window::bios_per_sec));
                live.worth(
                    &dev.info.name,
                    dev.info.known_scheduler(),
                    rate,
                    &self.cfg.pricing,
                )
            }
            None => dev.caps.worth,
        };
        dev.worth = worth;
        Caps {
            front_merges: dev.caps.front_merges,
            simple_merges: dev.caps.simple_merges,
            // L3 is watched where the tap works.
            sense_at_l3: dev.sense.usable(&self.cfg.sense),
            worth,
        }
    }

    /// The hourly cap, when it refuses a step down, is said once per run at the cap (a
    /// warning naming the key and when room comes back) and counted; the device's
    /// `changes_last_hour` in `status` and /metrics shows it the whole time.
    fn note_cap(&mut self, name: &str, dev: &mut DeviceRuntime, ev: &Evaluation, now_ms: u64) {
        let cap = self.cfg.policy.max_changes_per_hour;
        let changes = &ev.state.history.changes;
        if !changes.reached(cap) {
            dev.cap_noted = false;
            return;
        }
        if dev.cap_noted || !matches!(ev.reason, Reason::CapReached { .. }) {
            return;
        }
        dev.cap_noted = true;
        let room_in_s = changes.room_in_ms(now_ms).div_ceil(1000);
        warn!(
            device = %name,
            "{name}: hourly cap reached: {} level changes in the last hour ([policy] max_changes_per_hour = {cap}); steps down are refused (merging stays on) until one ages out in {room_in_s} s. Steps up are never refused. Many changes in an hour mean the device flaps: the decisions before this line say between what",
            changes.count()
        );
    }

    /// A dry run decides on what the live daemon would have counted at the level it would
    /// have set; the counters were taken at the real level (crates/daemon/src/dryrun.rs). Its
    /// stand-in for the bio tap is the real level's merge counters, so it assumes the live
    /// daemon's tap works (root, tracefs): docs/operator.md says so. Called in a dry run
    /// only (live, the window and caps stand as they are).
    fn as_live_would_see(
        &self,
        name: &str,
        dev: &DeviceRuntime,
        window: &mut Option<Window>,
        caps: &mut Caps,
    ) {
        let real = self
            .actuator
            .expected(name, Tunable::Nomerges)
            .and_then(|v| v.trim().parse::<u8>().ok())
            .unwrap_or(0);
        let would = dev.policy.nomerges();
        // With a working tap the dry run sees what the live daemon would (its samples, on
        // the same duty cycle); without one the counted merges stand in for it.
        let tap_works = caps.sense_at_l3;
        if let Some(w) = window.as_mut() {
            *w = as_counted_at(w, real, would, tap_works);
        }
        caps.sense_at_l3 = true;
    }

    /// Someone else's write wins: the tunable becomes theirs, the ladder stops on this
    /// device and puts back the other tunable it owns. Checked at every window and before
    /// every write. Returns the device's nomerges as read, or `None` when the tick stops
    /// here (handed off, gone, or unreadable).
    fn still_ours(
        &mut self,
        name: &str,
        dev: &mut DeviceRuntime,
        now_ms: u64,
        fs: &mut dyn BlockFs,
    ) -> Option<String> {
        let watched: &[Tunable] = if dev.caps.front_merges {
            &LADDER
        } else {
            &LADDER[..1]
        };
        let mut current_nomerges = String::new();
        // Looked up once for both tunables.
        let records = self.actuator.records_of(name);
        for &t in watched {
            let current = match fs.read_tunable(name, t) {
                Ok(v) => v,
                Err(FsError::NotFound { .. }) => {
                    *self.force_rescan = true;
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
            if records.expected(t) != Some(current.as_str()) {
                let was = records.expected(t).unwrap_or_default().to_string();
                if another_disk(self.actuator, dev.identity.as_ref(), fs, name).is_some() {
                    // Another disk under the name: a new device for the next rescan, not
                    // a change by someone else.
                    dev.another_disk = true;
                    *self.force_rescan = true;
                    return None;
                }
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
                Daemon::log_restores(&results, "hand-off");
                return None;
            }
            if t == Tunable::Nomerges {
                current_nomerges = current;
            }
        }
        Some(current_nomerges)
    }

    /// The decision of an evaluation that is not a hold, before anything is written.
    fn decision_of(
        &self,
        name: &str,
        now_ms: u64,
        kind: DecisionKind,
        ev: &Evaluation,
    ) -> Decision {
        Decision {
            at_ms: now_ms,
            device: name.to_string(),
            kind,
            changes: Vec::new(),
            reason: ev.reason.to_string(),
            applied: if self.actuator.dry_run() {
                Applied::DryRun
            } else {
                Applied::Yes
            },
        }
    }

    /// Applies the level's tunables, nomerges first, recording each change; stops at the
    /// first failure (the changes before it stay recorded).
    fn write_level(
        &mut self,
        name: &str,
        dev: &DeviceRuntime,
        to_level: Level,
        changes: &mut Vec<Change>,
        fs: &mut dyn BlockFs,
    ) -> Result<(), ActuatorError> {
        for (t, value) in tunables(to_level, dev.caps) {
            still_the_known_disk(dev, fs, name, t)?;
            match self.actuator.set(fs, name, t, value)? {
                SetOutcome::Unchanged => {}
                SetOutcome::Written { from } | SetOutcome::DryRun { from } => {
                    changes.push(Change {
                        tunable: t,
                        from,
                        to: value.to_string(),
                    })
                }
            }
        }
        Ok(())
    }

    /// A failed write: the level is unchanged, the write is retried after the dwell time,
    /// and the decision says so.
    fn write_failed(
        &mut self,
        name: &str,
        dev: &mut DeviceRuntime,
        now_ms: u64,
        to_level: Level,
        decision: &mut Decision,
        e: ActuatorError,
    ) {
        let from_level = dev.policy.level();
        // A state file that cannot be saved is the state directory's failure, counted by the
        // actuator (mergetune_state_save_errors_total): sysfs was never tried.
        match e {
            ActuatorError::State(_) => {}
            ActuatorError::AnotherDisk { .. } => {
                // Not a failure of sysfs: a new device, for the next rescan to find.
                dev.another_disk = true;
                *self.force_rescan = true;
            }
            // Not a failure of sysfs either: the next rescan sets the device aside until
            // it is attached again.
            ActuatorError::Detached { .. } => *self.force_rescan = true,
            _ => self.counters.write_errors += 1,
        }
        // Never sooner than the policy would decide again, and backing off while the
        // failures go on (an immutable file fails every try).
        let retry = dev.write_backoff.failed(&e.to_string());
        let wait_ms = (self.cfg.policy.min_dwell_secs * 1000)
            .max(self.cfg.window_ms())
            .max(retry.wait_ms);
        dev.retry_after_ms = now_ms + wait_ms;
        let written = if decision.changes.is_empty() {
            String::new()
        } else {
            format!(" (written before the failure: {})", decision.changes_text())
        };
        if matches!(e, ActuatorError::State(_)) || !retry.say {
            // The state file's failure is logged once per change (log_persist_change); a
            // repeat of the same error was said at its first failure.
            debug!(device = %name, "{name}: {from_level} -> {to_level} not written (failure {} in a row), retry in {wait_ms} ms: {e}{written}", retry.failures);
        } else {
            warn!(device = %name, "{name}: {from_level} -> {to_level} failed, level unchanged: {e}{written}; retrying in {wait_ms} ms, the wait doubling with each failure up to {} s (the same error again is not logged until a write succeeds)", crate::actuator::WRITE_RETRY_MAX_MS / 1000);
        }
        decision.applied = Applied::Failed(e.to_string());
        decision.reason = format!("{} (write failed: {e})", decision.reason);
        dev.last_reason = decision.reason.clone().into();
        if matches!(e, ActuatorError::Fs(FsError::NotFound { .. })) {
            *self.force_rescan = true;
        }
        if !decision.changes.is_empty() {
            // Half a level was written (nomerges, not front_merges): the record holds it,
            // and the next window's check sees the kernel as it is.
            dev.window.restart(now_ms);
        }
    }
}

/// Refuses a write to `name` when the disk under it is no longer the one the daemon found
/// there (its identity at the last rescan): a loop device detached since (its queue takes
/// the write, but a record made now would name no backing file, and no restore after the
/// next attach could tell it as the same disk), or another disk. Rescans come every
/// `rescan_every_ticks`; this read of `dev`, `diskseq` and `loop/backing_file` at each
/// write closes the window between them. The next rescan then handles the change.
pub(super) fn still_the_known_disk(
    dev: &DeviceRuntime,
    fs: &mut dyn BlockFs,
    name: &str,
    tunable: Tunable,
) -> Result<(), ActuatorError> {
    let Some(known) = dev.identity.as_ref() else {
        return Ok(());
    };
    let Ok(Some(now)) = read_identity(fs, name) else {
        return Ok(());
    };
    let (known, now) = (Box::new(known.clone()), Box::new(now));
    match known.compare(&now) {
        Sameness::Same | Sameness::SameQueue => Ok(()),
        Sameness::Detached => Err(ActuatorError::Detached {
            tunable,
            known,
            now,
        }),
        Sameness::Another => Err(ActuatorError::AnotherDisk {
            tunable,
            recorded: known,
            now,
        }),
    }
}

/// The policy's new state and reason become the device's. Inlined, so that the
/// evaluation is not copied once more to be passed.
#[inline(always)]
fn settle(dev: &mut DeviceRuntime, ev: Evaluation) {
    dev.policy = ev.state;
    dev.last_reason = ev.reason;
}

/// One log line per decision; `written` is what was (or, in a dry run, would be) written,
/// `None` when the decision writes nothing.
fn log_decision(name: &str, d: &Decision, from: &str, to: &str, written: Option<String>) {
    let dry = d.applied == Applied::DryRun;
    match (written, dry) {
        (None, true) => {
            info!(device = %name, kind = %d.kind, from = %from, to = %to, reason = %d.reason, "{name}: dry-run: {}: {}", d.kind, d.reason)
        }
        (None, false) => {
            info!(device = %name, kind = %d.kind, from = %from, to = %to, reason = %d.reason, "{name}: {}: {}", d.kind, d.reason)
        }
        (Some(w), true) => {
            info!(device = %name, kind = %d.kind, from = %from, to = %to, reason = %d.reason, "{name}: dry-run, would write {w}: {}: {}", d.kind, d.reason)
        }
        (Some(w), false) => {
            info!(device = %name, kind = %d.kind, from = %from, to = %to, reason = %d.reason, "{name}: {w}: {}: {}", d.kind, d.reason)
        }
    }
}
