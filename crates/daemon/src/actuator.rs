//! Ownership of every tunable mergetune touches, and the only path that writes one.
//!
//! One [`TunableRecord`] per (device, [`Tunable`]), in the manner of bpftune's per-tunable
//! records: the value when mergetune first saw it, what the kernel holds as far as
//! mergetune knows, the persisted record of the original and of mergetune's writes, and
//! whose it is now. The merge ladder and the slice tuner are two tuners over these
//! records, so ownership, hand-off and restore exist once:
//!
//! - **record first, write second**: before a write the record, with the value about to be
//!   written as `pending`, is saved to the state store; if that save fails nothing is
//!   written, except the recorded original itself (putting it back needs no record: a
//!   restore from any older file finds the kernel at the original). After the write the record stays in memory whatever happens to later saves,
//!   which are retried every tick ([`Actuator::retry_persist`]) and reported
//!   ([`Actuator::persisted`]); exit restores from memory. A save counts only once its
//!   read-back matches ([`StateStore::verify`]), and its health is reported once per change
//!   ([`Actuator::take_persist_change`]), not once per attempt: a full disk under the L3
//!   watch would otherwise log twenty lines a second.
//! - **hand-off per tunable**: when someone else changes a tunable, that tunable becomes
//!   theirs (never restored); the tuner stops on that device and puts back its other
//!   tunables, which are still mergetune's.
//! - **vanished devices** keep their records; a device that comes back holding a value
//!   mergetune wrote gets its original back.
//! - **one disk per record**: each record names the disk it was made on
//!   ([`DeviceIdentity`]); another disk that takes the name is a new device
//!   ([`Actuator::device_replaced`]), never written with the old one's originals.
//!
//! In dry-run nothing is written and nothing is recorded; what would have been written is
//! kept apart, as the value each tunable would hold ([`Actuator::would_be`]), so the dry
//! run's decisions start from the level it would have set (crates/daemon/src/dryrun.rs). Any
//! event that would have put the originals back (a hand-off, a device leaving mergetune's
//! care, exit) forgets it.

use crate::state::{
    RestoreOutcome, RestoreResult, SavedAttr, SavedState, StateError, StateStore, restore_attr,
};
use mergetune_kernel::blockfs::{BlockFs, FsError};
use mergetune_kernel::devices::{DeviceIdentity, read_identity};
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::sampler::FnvHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;

#[derive(Debug, thiserror::Error)]
pub enum ActuatorError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error("not writing, the original could not be recorded: {0}")]
    State(#[from] StateError),
    #[error("not writing {tunable}: it is someone else's now (changed to {value})")]
    NotOurs { tunable: Tunable, value: String },
    #[error(
        "not writing {tunable}: another disk has the name now ({now}; the record is of {recorded})"
    )]
    AnotherDisk {
        tunable: Tunable,
        recorded: Box<DeviceIdentity>,
        now: Box<DeviceIdentity>,
    },
    #[error(
        "not writing {tunable}: the loop device was detached since it was found ({now}; found as {known}): nothing is written to it until it is attached again"
    )]
    Detached {
        tunable: Tunable,
        known: Box<DeviceIdentity>,
        now: Box<DeviceIdentity>,
    },
}

/// The wait before the first retry of a failed write, in ms; each failure in a row
/// doubles it.
pub const WRITE_RETRY_FIRST_MS: u64 = 100;
/// The longest wait between two tries of a write that keeps failing, in ms (five minutes):
/// a file that can never be written (an immutable one, EPERM) costs a try and a debug
/// line that often, not one every window.
pub const WRITE_RETRY_MAX_MS: u64 = 300_000;

/// Failed writes of one device in a row, for their exponential backoff and their log: the
/// first failure (and each one with another error) is said, with the backoff; repeats are
/// not. Pure: the caller gives the time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBackoff {
    failures: u32,
    last_error: Option<String>,
}

/// What [`WriteBackoff::failed`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Wait at least this long before the next try, in ms.
    pub wait_ms: u64,
    /// Failures in a row, this one included.
    pub failures: u32,
    /// Say it: the first failure, or another error than the last one's.
    pub say: bool,
}

impl WriteBackoff {
    /// A write failed with `error`: the wait before the next try (100 ms, doubling with
    /// each failure in a row up to [`WRITE_RETRY_MAX_MS`]).
    pub fn failed(&mut self, error: &str) -> Retry {
        self.failures = self.failures.saturating_add(1);
        let say = self.last_error.as_deref() != Some(error);
        if say {
            self.last_error = Some(error.to_string());
        }
        let doublings = (self.failures - 1).min(32);
        Retry {
            wait_ms: WRITE_RETRY_FIRST_MS
                .saturating_mul(1u64 << doublings)
                .min(WRITE_RETRY_MAX_MS),
            failures: self.failures,
            say,
        }
    }

    /// A write succeeded: the backoff starts over. The failures it ends, if any.
    pub fn succeeded(&mut self) -> Option<u32> {
        let ended = (self.failures > 0).then_some(self.failures);
        *self = WriteBackoff::default();
        ended
    }
}

/// A change of the state file's health, for the log (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PersistChange {
    /// A save, or its read-back, failed after the last one had succeeded.
    Failing(String),
    /// After failures, a save holding `records` records was written and read back.
    Persisted { records: usize },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetOutcome {
    Written {
        from: String,
    },
    /// Already at the value: nothing written.
    Unchanged,
    /// Dry-run: this is what would have been written over `from`.
    DryRun {
        from: String,
    },
}

/// Everything mergetune knows about one tunable of one device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TunableRecord {
    /// The value when mergetune first saw it (an operator's value if not the default).
    pub first_seen: Option<String>,
    /// What the kernel holds as far as mergetune knows: last read or last written.
    pub expected: Option<String>,
    /// The original and mergetune's writes, once it has written (or is about to).
    pub saved: Option<SavedAttr>,
    /// Someone else changed it to this value: theirs, never written or restored again.
    pub theirs: Option<String>,
}

/// The records of each device, by name. A hash map, not a tree: each managed device's
/// tick looks its records up, and at 1024 devices a tree's ten compares of names (each a
/// pointer to chase) were a visible share of the tick. What is walked in an order that
/// shows (restore on exit) is sorted by name first.
type Records = HashMap<String, BTreeMap<Tunable, TunableRecord>, BuildHasherDefault<FnvHasher>>;

/// One device's records, as [`Actuator::records_of`] found them.
#[derive(Debug, Clone, Copy)]
pub struct DeviceRecords<'a>(Option<&'a BTreeMap<Tunable, TunableRecord>>);

impl<'a> DeviceRecords<'a> {
    /// What the device's `t` holds as far as mergetune knows ([`Actuator::expected`]).
    pub fn expected(&self, t: Tunable) -> Option<&'a str> {
        self.0
            .and_then(|m| m.get(&t))
            .and_then(|r| r.expected.as_deref())
    }
}

pub struct Actuator {
    dry_run: bool,
    store: Box<dyn StateStore>,
    records: Records,
    /// The last save reached the store: the file holds every record in memory.
    persisted: bool,
    save_errors: u64,
    /// The last failed save's error, for the stop's account.
    last_save_error: Option<String>,
    /// The last save that tried to write records (or any save that failed) failed; a save
    /// of an empty state (removing a file that may not exist) proves nothing either way.
    store_failing: bool,
    /// Not yet taken by the daemon's log.
    persist_change: Option<PersistChange>,
    /// Seconds since the epoch at `now_ms == 0`, for the vanished-device timestamps.
    clock_origin_unix_secs: u64,
    /// Dry-run: the value each tunable would hold had the dry run written it.
    would_be: BTreeMap<String, BTreeMap<Tunable, String>>,
}

impl Actuator {
    pub fn new(dry_run: bool, store: Box<dyn StateStore>) -> Self {
        Actuator {
            dry_run,
            store,
            records: Records::default(),
            persisted: true,
            save_errors: 0,
            last_save_error: None,
            store_failing: false,
            persist_change: None,
            clock_origin_unix_secs: 0,
            would_be: BTreeMap::new(),
        }
    }

    /// Takes over records kept in the store from an earlier run (devices that were gone
    /// at its exit), so they are still restored when their device comes back.
    pub fn adopt(&mut self, kept: SavedState) {
        for (dev, m) in kept.devices {
            for (t, mut saved) in m {
                saved
                    .vanished_at_unix_secs
                    .get_or_insert(self.clock_origin_unix_secs);
                self.entry(&dev, t).saved = Some(saved);
            }
        }
    }

    /// Sets the wall-clock time of `now_ms == 0` (the real daemon's start), so records of
    /// vanished devices carry a date another process can judge.
    pub fn set_clock_origin_unix_secs(&mut self, secs: u64) {
        self.clock_origin_unix_secs = secs;
    }

    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// Whether the state store holds every record mergetune has in memory.
    pub fn persisted(&self) -> bool {
        self.persisted
    }

    /// The change of the state file's health since the last call, if any: logged once per
    /// change by the daemon.
    pub fn take_persist_change(&mut self) -> Option<PersistChange> {
        self.persist_change.take()
    }

    /// Why the store is not up to date, when it is not: the last failed save's error.
    pub fn unpersisted_because(&self) -> Option<&str> {
        (!self.persisted && !self.dry_run)
            .then_some(self.last_save_error.as_deref())
            .flatten()
    }

    /// Saves of the state store that failed since start.
    pub fn save_errors(&self) -> u64 {
        self.save_errors
    }

    /// Where the records are persisted, for messages.
    pub fn store_name(&self) -> String {
        self.store.describe()
    }

    pub fn record(&self, dev: &str, t: Tunable) -> Option<&TunableRecord> {
        self.records.get(dev).and_then(|m| m.get(&t))
    }

    /// The records of one device, looked up once for several of its tunables (a tick's
    /// check of the ladder's two: a lookup by name per tunable was a cache miss or two
    /// each at 1024 devices).
    pub fn records_of(&self, dev: &str) -> DeviceRecords<'_> {
        DeviceRecords(self.records.get(dev))
    }

    /// The value of `t` when mergetune first saw it on `dev`.
    pub fn first_seen(&self, dev: &str, t: Tunable) -> Option<&str> {
        self.record(dev, t).and_then(|r| r.first_seen.as_deref())
    }

    /// What `dev`'s `t` holds as far as mergetune knows.
    pub fn expected(&self, dev: &str, t: Tunable) -> Option<&str> {
        self.record(dev, t).and_then(|r| r.expected.as_deref())
    }

    /// Dry-run: the value `dev`'s `t` would hold, where the dry run would have written it
    /// (None where it would hold what the kernel holds).
    pub fn would_be(&self, dev: &str, t: Tunable) -> Option<&str> {
        self.would_be
            .get(dev)
            .and_then(|m| m.get(&t))
            .map(String::as_str)
    }

    /// The value `dev`'s `t` holds for the tuners: what the kernel holds (`read`), or in a
    /// dry run what it would hold.
    pub fn as_seen<'a>(&'a self, dev: &str, t: Tunable, read: &'a str) -> &'a str {
        self.would_be(dev, t).unwrap_or(read)
    }

    fn forget_would_be(&mut self, dev: &str) {
        self.would_be.remove(dev);
    }

    /// What mergetune last wrote to `dev`'s `t`, if it wrote.
    pub fn last_written(&self, dev: &str, t: Tunable) -> Option<&str> {
        self.record(dev, t)
            .and_then(|r| r.saved.as_ref())
            .and_then(|s| s.last_written.as_deref())
    }

    /// Whether someone else took `dev`'s `t` over.
    pub fn is_theirs(&self, dev: &str, t: Tunable) -> bool {
        self.record(dev, t).is_some_and(|r| r.theirs.is_some())
    }

    /// Notes a value read from the kernel: the first sight of a tunable sets its
    /// `first_seen`; every read sets what it is expected to hold.
    pub fn observe(&mut self, dev: &str, t: Tunable, value: Option<&str>) {
        let r = self.entry(dev, t);
        if r.first_seen.is_none() {
            r.first_seen = value.map(str::to_string);
        }
        r.expected = value.map(str::to_string);
    }

    /// The persisted view: every record with something to restore.
    pub fn saved(&self) -> SavedState {
        let mut s = SavedState::default();
        for (dev, m) in &self.records {
            for (t, r) in m {
                if let Some(saved) = &r.saved {
                    s.devices
                        .entry(dev.clone())
                        .or_default()
                        .insert(*t, saved.clone());
                }
            }
        }
        s
    }

    fn entry(&mut self, dev: &str, t: Tunable) -> &mut TunableRecord {
        self.records
            .entry(dev.to_string())
            .or_default()
            .entry(t)
            .or_default()
    }

    fn save(&mut self) -> Result<(), StateError> {
        let snapshot = self.saved();
        let r = if snapshot.is_empty() {
            self.store.remove()
        } else {
            self.store.save(&snapshot)
        }
        .and_then(|()| self.store.verify(&snapshot));
        match &r {
            Ok(()) => {
                self.persisted = true;
                if self.store_failing && !snapshot.is_empty() {
                    self.store_failing = false;
                    self.persist_change = Some(PersistChange::Persisted {
                        records: snapshot.devices.values().map(|m| m.len()).sum(),
                    });
                }
            }
            Err(e) => {
                self.persisted = false;
                self.save_errors += 1;
                self.last_save_error = Some(e.to_string());
                if !self.store_failing {
                    self.store_failing = true;
                    self.persist_change = Some(PersistChange::Failing(e.to_string()));
                }
            }
        }
        r
    }

    /// Saves again after a failed save; Ok when the store is (now) up to date.
    pub fn retry_persist(&mut self) -> Result<(), StateError> {
        if self.persisted || self.dry_run {
            return Ok(());
        }
        self.save()
    }

    /// A dry run's set: what the daemon would write, remembered as the level it acts on.
    fn set_dry_run(&mut self, dev: &str, t: Tunable, value: &str, current: &str) -> SetOutcome {
        let from = self.as_seen(dev, t, current).to_string();
        if from == value {
            return SetOutcome::Unchanged;
        }
        let m = self.would_be.entry(dev.to_string()).or_default();
        if current == value {
            m.remove(&t);
        } else {
            m.insert(t, value.to_string());
        }
        SetOutcome::DryRun { from }
    }

    /// Why `dev`'s `t` must not be written: someone else's value stands there, or the
    /// records are of another disk than the one under the name now.
    fn refuse_unless_ours(
        &self,
        fs: &mut dyn BlockFs,
        dev: &str,
        t: Tunable,
    ) -> Result<(), ActuatorError> {
        if let Some(theirs) = self.record(dev, t).and_then(|r| r.theirs.clone()) {
            return Err(ActuatorError::NotOurs {
                tunable: t,
                value: theirs,
            });
        }
        // The one write path checks the disk itself: a record of another disk is never
        // written over the one under the name now, whatever the daemon has noticed yet.
        if let Some(recorded) = self.recorded_identity(dev)
            && let Ok(Some(now)) = read_identity(fs, dev)
            && !recorded.same_device(&now)
        {
            return Err(ActuatorError::AnotherDisk {
                tunable: t,
                recorded: Box::new(recorded.clone()),
                now: Box::new(now),
            });
        }
        Ok(())
    }

    /// Sets `dev`'s `t` to `value`: read before write, record before write.
    pub fn set(
        &mut self,
        fs: &mut dyn BlockFs,
        dev: &str,
        t: Tunable,
        value: &str,
    ) -> Result<SetOutcome, ActuatorError> {
        let current = fs.read_tunable(dev, t)?;
        if self.dry_run {
            return Ok(self.set_dry_run(dev, t, value, &current));
        }
        if current == value {
            return Ok(SetOutcome::Unchanged);
        }
        self.refuse_unless_ours(fs, dev, t)?;
        let before = self.entry(dev, t).saved.clone();
        // Writing the original back needs no new record: whatever the file last held, a
        // restore after a crash finds the kernel at the original (and leaves it). So a step
        // toward the original never waits on a save: merging comes back while the state
        // directory is full or read-only.
        let back_to_original = before.as_ref().is_some_and(|s| s.original == value);
        let device = if before.is_none() {
            self.identity_for(fs, dev)
        } else {
            None
        };
        {
            let r = self.entry(dev, t);
            let saved = r.saved.get_or_insert_with(|| SavedAttr {
                original: current.clone(),
                last_written: None,
                pending: None,
                vanished_at_unix_secs: None,
                device,
            });
            saved.pending = Some(value.to_string());
        }
        if let Err(e) = self.save()
            && !back_to_original
        {
            // Never write what could not be recorded.
            self.entry(dev, t).saved = before;
            return Err(e.into());
        }
        let wrote = fs.write_tunable(dev, t, value);
        let r = self.entry(dev, t);
        if let Some(saved) = r.saved.as_mut() {
            saved.pending = None;
            if wrote.is_ok() {
                saved.last_written = Some(value.to_string());
            }
        }
        if wrote.is_err() && before.is_none() {
            // The first write failed: nothing of mergetune's is there, so there is nothing
            // to restore. A record naming no write would read as a maybe-write (the
            // version 1 format's meaning) and put the original back over whatever someone
            // else sets later.
            r.saved = None;
        }
        if wrote.is_ok() {
            r.expected = Some(value.to_string());
        }
        // The file already names `value` as pending, so it stays safe to restore from
        // whatever becomes of this save; a failure only marks the state not persisted.
        let _ = self.save();
        wrote?;
        Ok(SetOutcome::Written { from: current })
    }

    /// The disk `dev`'s records were made on, if any record names one.
    pub fn recorded_identity(&self, dev: &str) -> Option<&DeviceIdentity> {
        self.records
            .get(dev)?
            .values()
            .find_map(|r| r.saved.as_ref().and_then(|s| s.device.as_ref()))
    }

    /// The disk a new record of `dev` names: the one its other records name (one disk per
    /// record set), else the one the kernel says is there now.
    fn identity_for(&mut self, fs: &mut dyn BlockFs, dev: &str) -> Option<DeviceIdentity> {
        if let Some(id) = self.recorded_identity(dev) {
            return Some(id.clone());
        }
        read_identity(fs, dev).ok().flatten()
    }

    /// Another disk has taken `dev`'s name: everything known of the old one goes (its
    /// values went with it; the new disk's are its own, and it starts afresh).
    pub fn device_replaced(&mut self, dev: &str) {
        self.forget_would_be(dev);
        if self.records.remove(dev).is_some() {
            let _ = self.save();
        }
    }

    /// Someone else changed `dev`'s `changed` to `value`: it is theirs from now on. The
    /// tuner owning it stops on this device, so its `siblings` that are still mergetune's
    /// are put back to their originals.
    pub fn hand_off(
        &mut self,
        fs: &mut dyn BlockFs,
        dev: &str,
        changed: Tunable,
        value: &str,
        siblings: &[Tunable],
    ) -> Vec<RestoreResult> {
        self.forget_would_be(dev);
        {
            let r = self.entry(dev, changed);
            r.theirs = Some(value.to_string());
            r.expected = Some(value.to_string());
            r.saved = None;
        }
        let mut out = Vec::new();
        for &t in siblings.iter().filter(|&&t| t != changed) {
            if let Some(res) = self.restore_one(fs, dev, t) {
                out.push(res);
            }
        }
        let _ = self.save();
        out
    }

    /// Forgets what mergetune first saw of `dev`'s tunables that hold nothing of its own
    /// (no record, not someone else's): a device coming back into its care after a reload
    /// starts from what it holds then, not from what it held before it left.
    pub fn refresh_unowned(&mut self, dev: &str) {
        if let Some(m) = self.records.get_mut(dev) {
            for r in m.values_mut() {
                if r.saved.is_none() && r.theirs.is_none() {
                    r.first_seen = None;
                    r.expected = None;
                }
            }
        }
    }

    /// Whether any of `tunables` of `dev` was taken over by someone else.
    pub fn any_theirs(&self, dev: &str, tunables: &[Tunable]) -> bool {
        tunables.iter().any(|&t| self.is_theirs(dev, t))
    }

    /// Forgets everything about a device (a reload rediscovers it from scratch): its
    /// records must hold nothing to restore, or they are restored first.
    pub fn rediscover(&mut self, fs: &mut dyn BlockFs, dev: &str) -> Vec<RestoreResult> {
        let out = self.restore_device(fs, dev);
        if let Some(m) = self.records.get(dev)
            && m.values().all(|r| r.saved.is_none())
        {
            self.records.remove(dev);
        }
        out
    }

    fn restore_one(
        &mut self,
        fs: &mut dyn BlockFs,
        dev: &str,
        t: Tunable,
    ) -> Option<RestoreResult> {
        let saved = self.record(dev, t)?.saved.clone()?;
        let outcome = restore_attr(fs, dev, t, &saved);
        let r = self.entry(dev, t);
        match &outcome {
            RestoreOutcome::Restored { to, .. } => {
                r.saved = None;
                r.expected = Some(to.clone());
            }
            RestoreOutcome::AlreadyOriginal { value } => {
                r.saved = None;
                r.expected = Some(value.clone());
            }
            RestoreOutcome::LeftAlone { current, .. } => {
                r.saved = None;
                r.theirs = Some(current.clone());
                r.expected = Some(current.clone());
            }
            RestoreOutcome::SchedulerChanged | RestoreOutcome::ReattachedLeft { .. } => {
                r.saved = None;
                r.expected = None;
            }
            RestoreOutcome::Replaced { .. } => {
                // Another disk: nothing of the old one's applies to it.
                *r = TunableRecord::default();
            }
            RestoreOutcome::Vanished
            | RestoreOutcome::Detached
            | RestoreOutcome::Owned { .. }
            | RestoreOutcome::Failed { .. } => {}
        }
        Some(RestoreResult {
            device: dev.to_string(),
            tunable: t,
            outcome,
        })
    }

    /// Restores one recorded original (a tunable that leaves mergetune's care alone, say
    /// with the scheduler it belonged to).
    pub fn restore_tunable(
        &mut self,
        fs: &mut dyn BlockFs,
        dev: &str,
        t: Tunable,
    ) -> Option<RestoreResult> {
        let out = self.restore_one(fs, dev, t);
        if out.is_some() {
            let _ = self.save();
        }
        out
    }

    /// Restores every recorded original of one device (it leaves mergetune's care).
    pub fn restore_device(&mut self, fs: &mut dyn BlockFs, dev: &str) -> Vec<RestoreResult> {
        self.forget_would_be(dev);
        let tunables: Vec<Tunable> = self
            .records
            .get(dev)
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default();
        let out: Vec<RestoreResult> = tunables
            .into_iter()
            .filter_map(|t| self.restore_one(fs, dev, t))
            .collect();
        if !out.is_empty() {
            let _ = self.save();
        }
        out
    }

    /// A device is gone from `/sys/block` at `now_ms`: its records with something to
    /// restore are kept (dated), the rest forgotten.
    pub fn device_vanished(&mut self, dev: &str, now_ms: u64) {
        self.forget_would_be(dev);
        let at = self.clock_origin_unix_secs + now_ms / 1000;
        let Some(m) = self.records.get_mut(dev) else {
            return;
        };
        m.retain(|_, r| r.saved.is_some());
        for r in m.values_mut() {
            if let Some(s) = r.saved.as_mut() {
                s.vanished_at_unix_secs.get_or_insert(at);
            }
            r.expected = None;
            r.first_seen = None;
        }
        if m.is_empty() {
            self.records.remove(dev);
        }
        let _ = self.save();
    }

    /// Whether `dev` has records kept from before it vanished.
    pub fn has_vanished_records(&self, dev: &str) -> bool {
        self.records.get(dev).is_some_and(|m| {
            m.values().any(|r| {
                r.saved
                    .as_ref()
                    .is_some_and(|s| s.vanished_at_unix_secs.is_some())
            })
        })
    }

    /// A device that vanished is back: where it holds a value mergetune wrote, the
    /// original is put back (it is still mergetune's); where it holds anything else,
    /// that value stands. Either way the device then starts afresh.
    pub fn device_returned(&mut self, fs: &mut dyn BlockFs, dev: &str) -> Vec<RestoreResult> {
        let out = self.restore_device(fs, dev);
        if let Some(m) = self.records.get_mut(dev) {
            // What could not be restored stays recorded; the rest starts from what is there.
            m.retain(|_, r| r.saved.is_some());
            for r in m.values_mut() {
                r.theirs = None;
                if let Some(s) = r.saved.as_mut() {
                    s.vanished_at_unix_secs = None;
                }
            }
            if m.is_empty() {
                self.records.remove(dev);
            }
        }
        let _ = self.save();
        out
    }

    /// Restores every recorded original (on exit). Records that could not be restored
    /// (failed, device gone) stay in the store for `mergetune restore` or the next start.
    pub fn restore_all(&mut self, fs: &mut dyn BlockFs, now_ms: u64) -> Vec<RestoreResult> {
        self.would_be.clear();
        let mut devs: Vec<String> = self.records.keys().cloned().collect();
        // In the order of the names, as the records were kept before they were hashed.
        devs.sort();
        let mut out = Vec::new();
        for dev in devs {
            let results = self.restore_device(fs, &dev);
            if results.iter().any(|r| {
                matches!(
                    r.outcome,
                    RestoreOutcome::Vanished | RestoreOutcome::Detached
                )
            }) {
                let at = self.clock_origin_unix_secs + now_ms / 1000;
                if let Some(m) = self.records.get_mut(&dev) {
                    for r in m.values_mut() {
                        if let Some(s) = r.saved.as_mut() {
                            s.vanished_at_unix_secs.get_or_insert(at);
                        }
                    }
                }
            }
            out.extend(results);
        }
        let _ = self.save();
        out
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    #[test]
    fn failed_writes_back_off_exponentially_to_a_cap_say_once_and_reset_on_success() {
        let mut b = WriteBackoff::default();
        let waits: Vec<u64> = (0..14).map(|_| b.failed("EPERM").wait_ms).collect();
        assert_eq!(
            waits[..6],
            [100, 200, 400, 800, 1600, 3200],
            "doubling from 100 ms"
        );
        assert_eq!(*waits.last().unwrap(), WRITE_RETRY_MAX_MS, "capped");
        let mut b = WriteBackoff::default();
        assert!(b.failed("EPERM").say);
        assert!(!b.failed("EPERM").say, "a repeat is not said");
        let other = b.failed("EIO");
        assert!(other.say && other.failures == 3, "another error is");
        assert_eq!(b.succeeded(), Some(3));
        assert_eq!(b.succeeded(), None);
        let r = b.failed("EPERM");
        assert_eq!((r.wait_ms, r.failures, r.say), (100, 1, true), "reset");
        for _ in 0..100 {
            b.failed("EPERM");
        }
        assert_eq!(b.failed("EPERM").wait_ms, WRITE_RETRY_MAX_MS, "no overflow");
    }
}
