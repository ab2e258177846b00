//! The slice tuner's turn in a tick: on each closed window of a managed device, read the
//! scheduler's slice tunables, hand off any someone else changed, and ask the pure
//! [`mergetune_logic::slices::decide`] for at most one change, written through the actuator
//! like the ladder's. A write that fails backs off as the ladder's do ([`WriteBackoff`]:
//! 100 ms doubling to five minutes, said once, and once more when a write works again),
//! instead of being tried again at every window.

use super::device_tick::DeviceTick;
use super::{Daemon, DeviceRuntime, slices};
use crate::actuator::{ActuatorError, SetOutcome, WRITE_RETRY_MAX_MS, WriteBackoff};
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::decision::{Applied, Change, Decision};
use mergetune_logic::slices::{SliceChange, SliceState};
use mergetune_logic::tuners::{self, Knob};
use tracing::{debug, info, warn};

/// The slice tuner's failed writes of one device: their backoff, and the time before which
/// it writes nothing there.
#[derive(Debug, Clone, Default)]
pub struct SliceWrites {
    pub backoff: WriteBackoff,
    pub retry_after_ms: u64,
}

impl DeviceTick<'_> {
    /// Scheduler slices for one device, on the window that closed at this tick: the
    /// tunables read (handed off where someone else changed one), the pure decision, and
    /// at most one write.
    pub(super) fn slices(&mut self, name: &str, dev: &mut DeviceRuntime) -> Option<Decision> {
        let now_ms = self.now_ms;
        let cfg = &self.cfg.slices;
        if !cfg.enabled || !self.cfg.policy.enabled {
            return None;
        }
        if !dev.management.is_managed()
            || self.actuator.any_theirs(name, slices())
            || dev.last_window_ms != now_ms
        {
            return None;
        }
        let w = dev.last_window?;
        let sched = dev.info.known_scheduler()?;
        let knobs = tuners::table(sched).knobs;
        if knobs.is_empty() {
            return None;
        }
        let values = self.slice_values(name, knobs)?;
        // Backing off a failed write: no step is decided (none could be written).
        if now_ms < dev.slice_writes.retry_after_ms {
            return None;
        }
        // A tunable that was not at the kernel's default when first seen is the operator's.
        let owned: Vec<Tunable> = knobs
            .iter()
            .filter(|k| {
                self.actuator
                    .first_seen(name, k.tunable)
                    .is_some_and(|v| v != k.default.to_string())
            })
            .map(|k| k.tunable)
            .collect();
        let (state, change) =
            mergetune_logic::slices::decide(&dev.slices, &w, sched, &values, &owned, cfg, now_ms);
        let previous = std::mem::replace(&mut *dev.slices, state);
        if let Some(kept) = dev.slices.kept.take() {
            info!(device = %name, "{name}: slices: {kept}");
        }
        let decision = self.write_slice(name, dev, change?, previous);
        dev.last_decision = Some(Box::new(decision.clone()));
        Some(decision)
    }

    /// The current value of each slice tunable the scheduler has, as mergetune would see
    /// it (a dry run tunes from the values it would have written), each first sighting
    /// recorded as the original. None when someone else changed one since mergetune wrote
    /// it: their write wins, as for the ladder, and the slices are handed off.
    fn slice_values(&mut self, name: &str, knobs: &[Knob]) -> Option<Vec<(Tunable, u64)>> {
        let mut values = Vec::with_capacity(knobs.len());
        for t in knobs.iter().map(|k| k.tunable) {
            if let Ok(v) = self.fs.read_tunable(name, t)
                && let Ok(x) = self.actuator.as_seen(name, t, &v).parse::<u64>()
            {
                values.push((t, x));
            }
        }
        for (t, cur) in &values {
            if let Some(ours) = self.actuator.last_written(name, *t)
                && ours != cur.to_string()
            {
                warn!(device = %name, "{name}: {t} changed from {ours} to {cur} by someone else: scheduler slices no longer tuned here");
                let results = self
                    .actuator
                    .hand_off(self.fs, name, *t, &cur.to_string(), slices());
                Daemon::log_restores(&results, "hand-off");
                return None;
            }
        }
        for (t, v) in &values {
            if self.actuator.first_seen(name, *t).is_none() {
                self.actuator.observe(name, *t, Some(&v.to_string()));
            }
        }
        Some(values)
    }

    /// Writes the change through the actuator (a dry run only says it would); a failed
    /// write puts the slice state back, so the step is retried once its backoff is over,
    /// and says why.
    fn write_slice(
        &mut self,
        name: &str,
        dev: &mut DeviceRuntime,
        ch: SliceChange,
        previous: SliceState,
    ) -> Decision {
        let now_ms = self.now_ms;
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
        match self.actuator.set(self.fs, name, t, &ch.to.to_string()) {
            Ok(SetOutcome::DryRun { .. }) => {
                decision.applied = Applied::DryRun;
                info!(device = %name, kind = %decision.kind, from = %ch.from, to = %ch.to, reason = %decision.reason,
                    "{name}: dry-run, would write {t} {} -> {}: {}: {}", ch.from, ch.to, decision.kind, decision.reason);
            }
            Ok(_) => {
                if let Some(n) = dev.slice_writes.backoff.succeeded() {
                    info!(device = %name, "{name}: slices: written again after {n} failed tries");
                }
                info!(device = %name, kind = %decision.kind, from = %ch.from, to = %ch.to, reason = %decision.reason,
                    "{name}: {t} {} -> {}: {}: {}", ch.from, ch.to, decision.kind, decision.reason);
            }
            Err(e) => {
                if !matches!(
                    e,
                    ActuatorError::State(_) | ActuatorError::AnotherDisk { .. }
                ) {
                    self.counters.write_errors += 1;
                }
                let retry = dev.slice_writes.backoff.failed(&e.to_string());
                dev.slice_writes.retry_after_ms = now_ms + retry.wait_ms;
                if matches!(e, ActuatorError::State(_)) || !retry.say {
                    // The state file's failure is logged once per change (as for the
                    // ladder); a repeat of the same error was said at its first failure.
                    debug!(device = %name, "{name}: write of {t}={} failed (failure {} in a row), slices unchanged, retry in {} ms: {e}", ch.to, retry.failures, retry.wait_ms);
                } else {
                    warn!(device = %name, "{name}: write of {t}={} failed, slices unchanged: {e}; backing off: the next slice write in {} ms at the earliest, the wait doubling with each failure up to {} s (the same error again is not logged until a write succeeds)", ch.to, retry.wait_ms, WRITE_RETRY_MAX_MS / 1000);
                }
                *dev.slices = previous;
                decision.applied = Applied::Failed(e.to_string());
                decision.reason = format!("{} (write failed: {e})", decision.reason);
            }
        }
        decision
    }
}
