//! The original tunables, kept so the machine is always left as it was found.
//!
//! One record per (device, tunable) mergetune has written: the original value, what it last
//! wrote, and the value it is about to write (`pending`). The record is saved atomically
//! (temp file, fsync, rename, fsync of the directory) *before* every write, with the
//! value about to be written as `pending`: a crash at any point leaves a record that names
//! every value the kernel may hold by mergetune's doing. Restoring puts the original back
//! only where the tunable still holds one of mergetune's values, so a later change by
//! someone else is never overwritten. Each record names the disk it was made on
//! (major:minor, and `diskseq` with the boot's id where the kernel has it): a disk that has
//! since taken the name is never written, and its records are dropped.
//!
//! The file is outside input (an operator, or an attacker with write access to the state
//! directory, may edit it), so loading is strict about what it accepts and lenient about
//! the rest: an entry whose device is not a plain `/sys/block` name, whose attribute is not
//! one of the [`Tunable`]s, or whose values are not values that tunable can hold is
//! reported and skipped, and every other entry is still restored. Every format version
//! ever written is read (1: no `pending`, no `vanished_at_unix_secs`; 2: no `device`; 3: no
//! `backing` in it).
//!
//! "Persisted" is claimed only after a read-back: [`StateStore::verify`] loads what was
//! saved and compares it with what was meant (a save that reports success over a full or
//! lying file system is not a record).
//!
//! The daemon's state directory is fixed for its life (a reload cannot move it, see
//! crates/daemon/src/reload.rs). A daemon whose `state_dir` is not the runtime directory
//! (`/run/mergetune`, the unit's `RuntimeDirectory=`) leaves a [`StatePointer`] there naming
//! it, so `mergetune restore` finds its records even when the config file has since been
//! edited to name another directory.

mod claim;
mod safe_dir;

pub use claim::{CLAIMS_DIR_NAME, Claims};
pub use safe_dir::Unsafe;
use safe_dir::{DirError, SafeDir};

use mergetune_kernel::blockfs::{BlockFs, FsError};
use mergetune_kernel::devices::{DeviceIdentity, Sameness, read_identity};
use mergetune_kernel::roots::KernelRoots;
use mergetune_kernel::tunable::{Tunable, is_plain_device_name};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const STATE_FILE_NAME: &str = "state.json";
/// The format written; [`FileStore::load`] reads every version from 1 up to this one
/// (3 added each record's `device`; 4 its loop device's `backing` file, which a reader of
/// 3 would refuse record by record and drop: it refuses the whole file instead, and keeps
/// it).
pub const STATE_VERSION: u32 = 4;
/// A vanished device's records are kept this long after it went away (it may come back
/// with mergetune's value, which must then still be restored), then dropped.
pub const VANISHED_KEEP_SECS: u64 = 7 * 24 * 3600;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{path}: cannot read state file: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: state file is corrupt: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error(
        "{path}: state file format {version} was written by a newer mergetune (this one reads 1 to {STATE_VERSION}); its originals are kept: restore them with that version"
    )]
    TooNew { path: PathBuf, version: u64 },
    #[error("{path}: cannot write state file: {message}")]
    Write { path: PathBuf, message: String },
    #[error("{path}: refused: {why}")]
    Unsafe { path: PathBuf, why: Unsafe },
    #[error("{path}: not a directory")]
    NotADirectory { path: PathBuf },
    #[error(
        "{path}: held by a running mergetune{}: its records are its own (stop it first, or --force)",
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    Held { path: PathBuf, pid: Option<u32> },
    #[error(
        "{device}: owned by a running process{} (its claim {path} is locked): one owner per device, so nothing is written to it here",
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    DeviceOwned {
        device: String,
        path: PathBuf,
        pid: Option<u32>,
    },
}

impl StateError {
    /// A [`DirError`] met while reading (`reading`) or writing.
    pub(crate) fn from_dir(e: DirError, reading: bool) -> StateError {
        match e {
            DirError::Unsafe { path, why } => StateError::Unsafe { path, why },
            DirError::NotADirectory { path } => StateError::NotADirectory { path },
            DirError::Io { path, source } if reading => StateError::Read { path, source },
            DirError::Io { path, source } => StateError::Write {
                path,
                message: source.to_string(),
            },
        }
    }
}

/// One recorded tunable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedAttr {
    pub original: String,
    /// What mergetune last wrote (None until the first write succeeded).
    pub last_written: Option<String>,
    /// A value saved just before writing it: the write may or may not have happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
    /// When the device was seen to vanish (seconds since the epoch), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vanished_at_unix_secs: Option<u64>,
    /// The disk the record was made on (major:minor, diskseq, boot), where the world
    /// tells: nothing is restored to another disk that has since taken the name. Absent
    /// from records of format 1 and 2, which are restored by value alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceIdentity>,
}

impl SavedAttr {
    /// Whether `value` is one mergetune put there (or may have, for a pending write).
    pub fn is_ours(&self, value: &str) -> bool {
        self.last_written.as_deref() == Some(value) || self.pending.as_deref() == Some(value)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SavedState {
    pub version: u32,
    /// The pid of the daemon that wrote it, for the humans reading it.
    pub pid: u32,
    /// device -> tunable -> record.
    pub devices: BTreeMap<String, BTreeMap<Tunable, SavedAttr>>,
}

impl Default for SavedState {
    fn default() -> Self {
        SavedState {
            version: STATE_VERSION,
            pid: std::process::id(),
            devices: BTreeMap::new(),
        }
    }
}

impl SavedState {
    pub fn is_empty(&self) -> bool {
        self.devices.values().all(|m| m.is_empty())
    }
    pub fn get(&self, dev: &str, t: Tunable) -> Option<&SavedAttr> {
        self.devices.get(dev).and_then(|m| m.get(&t))
    }
}

/// An entry of a state file that was not accepted, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejected {
    pub device: String,
    pub attr: String,
    pub reason: String,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}: skipped: {}", self.device, self.attr, self.reason)
    }
}

/// A loaded state file: what can be restored, and what was refused.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Loaded {
    pub state: SavedState,
    pub rejected: Vec<Rejected>,
}

/// Parses a state file's text (any version). `path` only names the file in errors.
pub fn parse_state(text: &str, path: &Path) -> Result<Loaded, StateError> {
    let corrupt = |message: String| StateError::Corrupt {
        path: path.to_path_buf(),
        message,
    };
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))?;
    let obj = value
        .as_object()
        .ok_or_else(|| corrupt("not a JSON object".into()))?;
    let version = match obj.get("version") {
        None => return Err(corrupt("no \"version\"".into())),
        Some(v) => v.as_u64().ok_or_else(|| {
            corrupt(format!(
                "\"version\" must be a whole number from 1 to {STATE_VERSION}, not {}",
                printable_json(v)
            ))
        })?,
    };
    if version == 0 {
        return Err(corrupt("version 0".into()));
    }
    if version > u64::from(STATE_VERSION) {
        return Err(StateError::TooNew {
            path: path.to_path_buf(),
            version,
        });
    }
    let pid = obj
        .get("pid")
        .and_then(|v| v.as_u64())
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or(0);
    let devices = match obj.get("devices") {
        Some(serde_json::Value::Object(d)) => d,
        Some(_) => return Err(corrupt("\"devices\" is not an object".into())),
        None => return Err(corrupt("no \"devices\"".into())),
    };
    let mut out = Loaded {
        state: SavedState {
            version: STATE_VERSION,
            pid,
            devices: BTreeMap::new(),
        },
        rejected: Vec::new(),
    };
    for (dev, attrs) in devices {
        load_device(&mut out, dev, attrs);
    }
    Ok(out)
}

/// A JSON value as it may be quoted in an error: short, and whatever would drive a terminal
/// or hide escaped (the file is outside input).
fn printable_json(v: &serde_json::Value) -> String {
    let text = v.to_string();
    let short = if text.chars().count() > 40 {
        format!("{}...", text.chars().take(40).collect::<String>())
    } else {
        text
    };
    mergetune_logic::printable::printable(&short).into_owned()
}

/// One device's records, each kept or refused with why: a device name that is not plain,
/// an attribute that names no tunable mergetune writes, an unreadable record, or a value
/// the tunable cannot hold.
fn load_device(out: &mut Loaded, dev: &str, attrs: &serde_json::Value) {
    let reject = |attr: &str, reason: String| Rejected {
        device: dev.to_string(),
        attr: attr.to_string(),
        reason,
    };
    if !is_plain_device_name(dev) {
        out.rejected.push(reject(
            "*",
            "not a plain /sys/block device name (a path, or unusual characters)".into(),
        ));
        return;
    }
    let Some(attrs) = attrs.as_object() else {
        out.rejected
            .push(reject("*", "the device's entry is not an object".into()));
        return;
    };
    for (attr, rec) in attrs {
        let Some(t) = Tunable::from_rel_path(attr) else {
            out.rejected.push(reject(
                attr,
                "not a tunable mergetune writes (queue/nomerges or a known queue/iosched/ file)"
                    .into(),
            ));
            continue;
        };
        let rec: SavedAttr = match serde_json::from_value(rec.clone()) {
            Ok(r) => r,
            Err(e) => {
                out.rejected
                    .push(reject(attr, format!("unreadable record: {e}")));
                continue;
            }
        };
        let bad = std::iter::once(Some(&rec.original))
            .chain([rec.last_written.as_ref(), rec.pending.as_ref()])
            .flatten()
            .find(|v| !t.accepts(v));
        if let Some(v) = bad {
            out.rejected
                .push(reject(attr, format!("{v:?} is not a value {t} can hold")));
            continue;
        }
        out.state
            .devices
            .entry(dev.to_string())
            .or_default()
            .insert(t, rec);
    }
}

/// Where the record lives: a file for the daemon, memory for the simulator and dry-run.
pub trait StateStore {
    fn load(&self) -> Result<Option<Loaded>, StateError>;
    fn save(&mut self, state: &SavedState) -> Result<(), StateError>;
    fn remove(&mut self) -> Result<(), StateError>;
    fn describe(&self) -> String;
    /// Who else owns the disk `id` now (its claim, see crates/daemon/src/state/claim.rs):
    /// None when nobody else does, else the owner's pid when it wrote one. A store without
    /// claims (memory) knows of no other owner.
    fn other_owner(&self, _id: &DeviceIdentity) -> Result<Option<Option<u32>>, StateError> {
        Ok(None)
    }
    /// Reads back what [`StateStore::save`] (or `remove`, for an empty state) left and
    /// checks that it holds `state`'s records: the proof behind "persisted".
    fn verify(&self, state: &SavedState) -> Result<(), StateError> {
        let differs = |message: &str| StateError::Write {
            path: PathBuf::from(self.describe()),
            message: message.to_string(),
        };
        match self.load()? {
            None if state.is_empty() => Ok(()),
            None => Err(differs("read back after the save: no state file")),
            Some(l) if l.state.devices == state.devices => Ok(()),
            Some(_) => Err(differs(
                "read back after the save: the file does not hold what was saved",
            )),
        }
    }
}

/// `<dir>/state.json`, reached through the directory opened and checked (with every
/// ancestor, crates/daemon/src/state/safe_dir.rs) once per use, or, once the lock is taken,
/// once for the store's life. A live daemon holds `<dir>/mergetune.lock` for its life
/// ([`FileStore::lock`]), so that `mergetune restore` can tell its records from a dead
/// one's.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
    /// The lock, while this store's process holds it.
    lock: Option<Arc<rustix::fd::OwnedFd>>,
    /// The directory as opened and checked when the lock was taken: every later save,
    /// read and removal goes through it, never through the path again (a directory
    /// renamed and replaced under the path is not followed).
    handle: Option<Arc<SafeDir>>,
    /// The host-wide device claims, where this store takes them (a live daemon, calibrate).
    claims: Option<Claims>,
    /// `restore --force`: the running daemon whose lock the operator overrode; the devices
    /// it claims are not left to it (any other live owner's still are).
    forced_over: Option<u32>,
}

/// The lock file a live daemon holds in its state directory.
pub const LOCK_FILE_NAME: &str = "mergetune.lock";

impl FileStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileStore {
            dir: dir.into(),
            lock: None,
            handle: None,
            claims: None,
            forced_over: None,
        }
    }
    /// The operator overrode the lock of the running daemon `pid` (`restore --force`): a
    /// device whose claim that same process holds is restored anyway; one another live
    /// process claims is still left to it.
    pub fn forced_over(mut self, pid: u32) -> Self {
        self.forced_over = Some(pid);
        self
    }
    /// This store claims every disk it records before the first write to it, and leaves
    /// a disk another live process has claimed alone (see [`Claims`]).
    pub fn with_claims(mut self, claims: Claims) -> Self {
        self.claims = Some(claims);
        self
    }
    pub fn claims(&self) -> Option<&Claims> {
        self.claims.as_ref()
    }

    /// Claims every disk `state` records ([`Claims::claim_recorded`]).
    fn claim_recorded(&mut self, state: &SavedState) -> Result<(), StateError> {
        match self.claims.as_mut() {
            Some(c) => c.claim_recorded(state),
            None => Ok(()),
        }
    }

    /// Lets go of the claims of disks `state` no longer records.
    fn release_unrecorded(&mut self, state: &SavedState) {
        if let Some(c) = self.claims.as_mut() {
            c.release_unrecorded(state);
        }
    }
    pub fn path(&self) -> PathBuf {
        self.dir.join(STATE_FILE_NAME)
    }
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory, opened and checked; None when it does not exist and `create` is not
    /// asked.
    fn open(&self, create: bool) -> Result<Option<Arc<SafeDir>>, StateError> {
        if let Some(h) = &self.handle {
            return Ok(Some(h.clone()));
        }
        match SafeDir::open(&self.dir, create) {
            Ok(d) => Ok(Some(Arc::new(d))),
            Err(e) if !create && e.is_not_found() => Ok(None),
            Err(e) => Err(StateError::from_dir(e, !create)),
        }
    }

    /// Creates the directory if needed and proves a file can be written there (a probe,
    /// removed at once): a live daemon checks it before its first tick, since without it
    /// no tunable may be written.
    pub fn check_writable(&self) -> Result<(), StateError> {
        let dir = self.open(true)?.expect("created");
        dir.probe_writable(&format!(".{STATE_FILE_NAME}.probe.{}", std::process::id()))
            .map_err(|e| StateError::from_dir(e, false))
    }

    /// Takes the directory's lock for this store's life: a live daemon's claim on its
    /// records. Refused ([`StateError::Held`]) while another process holds it.
    pub fn lock(&mut self) -> Result<(), StateError> {
        let dir = self.open(true)?.expect("created");
        match dir
            .lock(LOCK_FILE_NAME)
            .map_err(|e| StateError::from_dir(e, false))?
        {
            Ok(fd) => {
                self.lock = Some(Arc::new(fd));
                self.handle = Some(dir);
                Ok(())
            }
            Err(pid) => Err(StateError::Held {
                path: self.dir.clone(),
                pid,
            }),
        }
    }

    /// Whether a live process holds the directory's lock (a running daemon), and its pid
    /// when it wrote one. A missing directory or lock file is nobody's.
    pub fn holder(&self) -> Result<Option<Option<u32>>, StateError> {
        if self.lock.is_some() {
            return Ok(None);
        }
        let Some(dir) = self.open(false)? else {
            return Ok(None);
        };
        dir.lock_holder(LOCK_FILE_NAME)
            .map_err(|e| StateError::from_dir(e, true))
    }
}

fn write_err(path: &Path, e: impl std::fmt::Display) -> StateError {
    StateError::Write {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// A state file larger than this is not one mergetune wrote (a record is about 100 bytes).
const MAX_STATE_BYTES: u64 = 16 << 20;

impl StateStore for FileStore {
    fn load(&self) -> Result<Option<Loaded>, StateError> {
        let path = self.path();
        let Some(dir) = self.open(false)? else {
            return Ok(None);
        };
        let Some(bytes) = dir
            .read(STATE_FILE_NAME, MAX_STATE_BYTES)
            .map_err(|e| StateError::from_dir(e, true))?
        else {
            return Ok(None);
        };
        if bytes.len() as u64 > MAX_STATE_BYTES {
            return Err(StateError::Corrupt {
                path,
                message: format!("over {MAX_STATE_BYTES} bytes: not a state file"),
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| StateError::Corrupt {
            path: path.clone(),
            message: "not UTF-8".into(),
        })?;
        parse_state(&text, &path).map(Some)
    }

    fn save(&mut self, state: &SavedState) -> Result<(), StateError> {
        let text = serde_json::to_string_pretty(state).map_err(|e| write_err(&self.path(), e))?;
        self.claim_recorded(state)?;
        let dir = self.open(true)?.expect("created");
        dir.write_atomic(STATE_FILE_NAME, text.as_bytes())
            .map_err(|e| StateError::from_dir(e, false))?;
        self.release_unrecorded(state);
        Ok(())
    }

    /// Removes the file; where the directory refuses (immutable, read-only entries), the
    /// file is emptied of records in place instead, so that it can never send a later
    /// `mergetune restore` over a value an operator set after the stop.
    fn remove(&mut self) -> Result<(), StateError> {
        let Some(dir) = self.open(false)? else {
            return Ok(());
        };
        let Err(unlink) = dir.remove(STATE_FILE_NAME) else {
            self.release_unrecorded(&SavedState::default());
            return Ok(());
        };
        let empty = serde_json::to_string_pretty(&SavedState::default())
            .map_err(|e| write_err(&self.path(), e))?;
        dir.rewrite_in_place(STATE_FILE_NAME, empty.as_bytes())
            .map_err(|_| StateError::from_dir(unlink, false))?;
        self.release_unrecorded(&SavedState::default());
        Ok(())
    }

    fn describe(&self) -> String {
        self.path().display().to_string()
    }

    fn other_owner(&self, id: &DeviceIdentity) -> Result<Option<Option<u32>>, StateError> {
        match &self.claims {
            Some(c) => match c.other_owner(id.dev)? {
                Some(Some(pid)) if self.forced_over == Some(pid) => Ok(None),
                owner => Ok(owner),
            },
            None => Ok(None),
        }
    }
}

/// The daemon's runtime directory, where the pointer to the state directory and the
/// host-wide device claims live: `explicit` (`--runtime-dir`), else on the machine the
/// unit's `RuntimeDirectory=` (the default `state_dir`). A run over a fake sysfs tree (tests)
/// has none unless asked, so it never leaves a pointer or a claim naming its temporary
/// directory for the real machine's daemon, `restore` or calibrate.
pub fn runtime_dir(explicit: Option<&Path>, roots: &KernelRoots) -> Option<PathBuf> {
    match explicit {
        Some(d) => Some(d.to_path_buf()),
        None if roots.is_real() => Some(PathBuf::from(mergetune_logic::config::DEFAULT_STATE_DIR)),
        None => None,
    }
}

/// The pointer's file name, in the runtime directory.
pub const POINTER_FILE_NAME: &str = "last-state-dir";
/// A pointer is one absolute path: anything longer is not one mergetune wrote.
const MAX_POINTER_BYTES: u64 = 4096;

/// `<runtime_dir>/last-state-dir`: the state directory of the last live daemon, when that
/// is not the runtime directory itself. Written at its start, removed at a stop that left
/// nothing to restore; read by `mergetune restore` (and the next start), which look there
/// as well as where their config says. It names a directory, never holds a record.
#[derive(Debug, Clone)]
pub struct StatePointer {
    runtime_dir: PathBuf,
}

impl StatePointer {
    pub fn new(runtime_dir: impl Into<PathBuf>) -> Self {
        StatePointer {
            runtime_dir: runtime_dir.into(),
        }
    }
    pub fn path(&self) -> PathBuf {
        self.runtime_dir.join(POINTER_FILE_NAME)
    }
    pub fn runtime_dir(&self) -> &Path {
        &self.runtime_dir
    }

    /// The directory it names, if there is a pointer. Only a small regular file holding
    /// one absolute path is accepted.
    pub fn read(&self) -> Result<Option<PathBuf>, StateError> {
        let path = self.path();
        let bad = |message: String| StateError::Corrupt {
            path: path.clone(),
            message,
        };
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StateError::Read { path, source }),
        };
        if !meta.is_file() || meta.len() > MAX_POINTER_BYTES {
            return Err(bad("not a small regular file".into()));
        }
        let text = std::fs::read_to_string(&path).map_err(|source| StateError::Read {
            path: path.clone(),
            source,
        })?;
        let dir = PathBuf::from(text.trim_end_matches('\n'));
        if !dir.is_absolute() || text.trim_end_matches('\n').contains(['\n', '\0']) {
            return Err(bad("does not hold one absolute path".into()));
        }
        Ok(Some(dir))
    }

    /// Points at `state_dir` (nothing is written when it is the runtime directory itself).
    pub fn write(&self, state_dir: &Path) -> Result<(), StateError> {
        if state_dir == self.runtime_dir {
            return self.clear_if(state_dir);
        }
        let text = format!("{}\n", state_dir.display());
        SafeDir::open(&self.runtime_dir, true)
            .and_then(|d| d.write_atomic(POINTER_FILE_NAME, text.as_bytes()))
            .map_err(|e| StateError::from_dir(e, false))
    }

    /// Removes the pointer if it names `state_dir` (another daemon's pointer stays).
    pub fn clear_if(&self, state_dir: &Path) -> Result<(), StateError> {
        if self.read().ok().flatten().as_deref() != Some(state_dir) {
            return Ok(());
        }
        let path = self.path();
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(write_err(&path, e)),
        }
    }
}

/// In-memory record (simulator, dry-run).
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    pub state: Option<SavedState>,
}

impl StateStore for MemoryStore {
    fn load(&self) -> Result<Option<Loaded>, StateError> {
        Ok(self.state.clone().map(|state| Loaded {
            state,
            rejected: Vec::new(),
        }))
    }
    fn save(&mut self, state: &SavedState) -> Result<(), StateError> {
        self.state = Some(state.clone());
        Ok(())
    }
    fn remove(&mut self) -> Result<(), StateError> {
        self.state = None;
        Ok(())
    }
    fn describe(&self) -> String {
        "memory".into()
    }
}

/// What restoring one tunable did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RestoreOutcome {
    Restored {
        from: String,
        to: String,
    },
    AlreadyOriginal {
        value: String,
    },
    /// Someone else changed it after mergetune: their value stays.
    LeftAlone {
        current: String,
        ours: String,
    },
    /// The device is gone: nothing to restore now (the record is kept for a while).
    Vanished,
    /// A loop device detached since the record (no backing file): nothing is written now;
    /// the record is kept (as a gone device's) for its re-attach, where the file decides.
    Detached,
    /// Another disk has the name now (re-attached, or removed and another added): the
    /// record is not its, so nothing is written and the record is dropped.
    Replaced {
        recorded: DeviceIdentity,
        now: Option<DeviceIdentity>,
    },
    /// A loop device re-attached to the same backing file since the record, holding
    /// mergetune's value: `restore --reattached leave` takes it for an operator's (the two
    /// cannot be told apart), so it stays and the record is dropped.
    ReattachedLeft {
        current: String,
    },
    /// The device is there but this `queue/iosched/` file is not: its scheduler was
    /// switched, and the file went with the old one. A hand-off of the tunable (the new
    /// scheduler starts from its own value); the record is dropped, not kept as if the
    /// device were gone.
    SchedulerChanged,
    /// Another live process owns the disk now (its claim is locked): nothing is written,
    /// and the record is kept for when that owner lets go (its own stop puts back what it
    /// found, which this record then takes back to the original).
    Owned {
        pid: Option<u32>,
    },
    Failed {
        error: String,
    },
}

impl RestoreOutcome {
    pub fn failed(&self) -> bool {
        matches!(self, RestoreOutcome::Failed { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreResult {
    pub device: String,
    pub tunable: Tunable,
    pub outcome: RestoreOutcome,
}

impl std::fmt::Display for RestoreResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = format!("{}/{}", self.device, self.tunable);
        match &self.outcome {
            RestoreOutcome::Restored { from, to } => write!(f, "{what}: restored {from} -> {to}"),
            RestoreOutcome::AlreadyOriginal { value } => {
                write!(f, "{what}: already at its original value {value}")
            }
            RestoreOutcome::LeftAlone { current, ours } => write!(
                f,
                "{what}: left at {current} (changed by someone else after mergetune wrote {ours})"
            ),
            RestoreOutcome::Vanished => write!(f, "{what}: device gone, nothing to restore now"),
            RestoreOutcome::Detached => write!(
                f,
                "{what}: loop device detached since the record: nothing written; the record is kept for its re-attach (to the same file: restored then; to another: dropped)"
            ),
            RestoreOutcome::Replaced { recorded, now } => write!(
                f,
                "{what}: left alone: another disk has the name now ({}; the record is of {recorded}): its values are its own, the record is dropped",
                now.as_ref()
                    .map_or_else(|| "no device number".to_string(), |n| n.to_string())
            ),
            RestoreOutcome::SchedulerChanged => write!(
                f,
                "{what}: handed off to a scheduler switch (the file went with the old scheduler; the new one keeps its own value)"
            ),
            RestoreOutcome::ReattachedLeft { current } => write!(
                f,
                "{what}: left at {current}: the loop device was re-attached to the same backing file since the record, and --reattached leave takes the value for an operator's; the record is dropped"
            ),
            RestoreOutcome::Owned { pid } => write!(
                f,
                "{what}: left alone: a running process{} owns the device now; the record is kept for a later restore, once it lets go",
                pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
            ),
            RestoreOutcome::Failed { error } => write!(f, "{what}: restore failed: {error}"),
        }
    }
}

/// What a restore does with a value of mergetune's on a loop device re-attached to the
/// same backing file since the record: its queue kept mergetune's value, or an operator
/// wrote the same one meanwhile, and the two cannot be told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reattached {
    /// Put the original back (the daemon's own stop, and `restore` unless told).
    #[default]
    Restore,
    /// Leave the value as an operator's, and drop the record.
    Leave,
}

impl std::str::FromStr for Reattached {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "restore" => Ok(Reattached::Restore),
            "leave" => Ok(Reattached::Leave),
            _ => Err(format!("{s:?} is neither \"restore\" nor \"leave\"")),
        }
    }
}

/// Restores one tunable per the rule in the module doc, to the disk the record was made on
/// only.
pub fn restore_attr(
    fs: &mut dyn BlockFs,
    dev: &str,
    t: Tunable,
    saved: &SavedAttr,
) -> RestoreOutcome {
    restore_attr_with(fs, dev, t, saved, Reattached::Restore)
}

/// [`restore_attr`], told what to do on a loop device re-attached to the same file.
pub fn restore_attr_with(
    fs: &mut dyn BlockFs,
    dev: &str,
    t: Tunable,
    saved: &SavedAttr,
    reattached: Reattached,
) -> RestoreOutcome {
    let mut same_queue = false;
    if let Some(recorded) = &saved.device {
        let now = match read_identity(fs, dev) {
            Ok(now) => now,
            Err(e) => {
                return RestoreOutcome::Failed {
                    error: e.to_string(),
                };
            }
        };
        let sameness = now.as_ref().map(|n| recorded.compare(n));
        if sameness == Some(Sameness::Detached) {
            return RestoreOutcome::Detached;
        }
        same_queue = sameness == Some(Sameness::SameQueue);
        if !now.as_ref().is_some_and(|n| recorded.same_device(n)) {
            // No device number at all: gone, if its tunable went too.
            if now.is_none() && !fs.attr_exists(dev, "queue/nomerges") {
                return gone(fs, dev, t);
            }
            return RestoreOutcome::Replaced {
                recorded: recorded.clone(),
                now,
            };
        }
    }
    let current = match fs.read_tunable(dev, t) {
        Ok(v) => v,
        Err(FsError::NotFound { .. }) => return gone(fs, dev, t),
        Err(e) => {
            return RestoreOutcome::Failed {
                error: e.to_string(),
            };
        }
    };
    if current == saved.original {
        return RestoreOutcome::AlreadyOriginal { value: current };
    }
    if same_queue && reattached == Reattached::Leave && saved.is_ours(&current) {
        return RestoreOutcome::ReattachedLeft { current };
    }
    if (saved.last_written.is_some() || saved.pending.is_some()) && !saved.is_ours(&current) {
        return RestoreOutcome::LeftAlone {
            current,
            ours: saved
                .last_written
                .clone()
                .or(saved.pending.clone())
                .unwrap_or_default(),
        };
    }
    match fs.write_tunable(dev, t, &saved.original) {
        Ok(()) => RestoreOutcome::Restored {
            from: current,
            to: saved.original.clone(),
        },
        Err(FsError::NotFound { .. }) => gone(fs, dev, t),
        Err(e) => RestoreOutcome::Failed {
            error: e.to_string(),
        },
    }
}

/// A tunable's file is not there: the device is gone, or (an `iosched/` file of a device
/// that is still there) its scheduler was switched.
fn gone(fs: &mut dyn BlockFs, dev: &str, t: Tunable) -> RestoreOutcome {
    if t.rel_path().starts_with("queue/iosched/") && fs.attr_exists(dev, "queue/nomerges") {
        RestoreOutcome::SchedulerChanged
    } else {
        RestoreOutcome::Vanished
    }
}

/// Restores everything in a record.
pub fn restore_all(fs: &mut dyn BlockFs, saved: &SavedState) -> Vec<RestoreResult> {
    let mut out = Vec::new();
    for (dev, attrs) in &saved.devices {
        for (t, rec) in attrs {
            out.push(RestoreResult {
                device: dev.clone(),
                tunable: *t,
                outcome: restore_attr(fs, dev, *t, rec),
            });
        }
    }
    out
}

/// What `restore_from_store` did: one result per record, and the entries it refused.
#[derive(Debug, Clone, Default)]
pub struct RestoreReport {
    pub results: Vec<RestoreResult>,
    pub rejected: Vec<Rejected>,
    /// Records kept in the file for a later restore (failed, or a vanished device within
    /// [`VANISHED_KEEP_SECS`]).
    pub kept: usize,
    /// The file could not be brought up to date (a read-only directory): it still holds
    /// the records of values put back, which a later restore would take for mergetune's.
    /// Why, when so ([`RestoreReport::stale_records`] says which and what).
    pub stale: Option<String>,
}

impl RestoreReport {
    pub fn failed(&self) -> bool {
        self.results.iter().any(|r| r.outcome.failed())
    }

    /// Where the file could not be updated: per record it still names, what a later
    /// `restore` would do with it.
    pub fn stale_records(&self) -> Vec<String> {
        let Some(why) = &self.stale else {
            return Vec::new();
        };
        self.results
            .iter()
            .filter_map(|r| {
                let what = format!("{}/{}", r.device, r.tunable);
                match &r.outcome {
                    RestoreOutcome::Restored { from, to } => Some(format!(
                        "{what}: restored {from} -> {to}, but the record stays ({why}): a later `mergetune restore` would put {to} back over a {from} set since; remove the file once it can be"
                    )),
                    RestoreOutcome::AlreadyOriginal { .. }
                    | RestoreOutcome::LeftAlone { .. }
                    | RestoreOutcome::ReattachedLeft { .. }
                    | RestoreOutcome::Replaced { .. }
                    | RestoreOutcome::SchedulerChanged => Some(format!(
                        "{what}: the record is stale but stays ({why}): a later `mergetune restore` would read it again and may put the original back over a value equal to mergetune's set since; remove the file once it can be"
                    )),
                    _ => None,
                }
            })
            .collect()
    }
}

/// Restores from a state store. Records that failed, and those of devices that are gone
/// (for [`VANISHED_KEEP_SECS`] after they were first seen gone, at `now_unix_secs`), stay in
/// the file for a later `mergetune restore` or the next start; the file is removed when
/// nothing is left. Refused entries are reported and dropped.
pub fn restore_from_store(
    fs: &mut dyn BlockFs,
    store: &mut dyn StateStore,
    now_unix_secs: u64,
) -> Result<RestoreReport, StateError> {
    restore_from_store_with(fs, store, now_unix_secs, Reattached::Restore)
}

/// [`restore_from_store`], told what to do on a loop device re-attached to the same file.
pub fn restore_from_store_with(
    fs: &mut dyn BlockFs,
    store: &mut dyn StateStore,
    now_unix_secs: u64,
    reattached: Reattached,
) -> Result<RestoreReport, StateError> {
    let Some(loaded) = store.load()? else {
        return Ok(RestoreReport::default());
    };
    let mut keep = SavedState {
        pid: loaded.state.pid,
        ..SavedState::default()
    };
    let mut results = Vec::new();
    for (dev, attrs) in &loaded.state.devices {
        for (t, rec) in attrs {
            let outcome = match rec.device.as_ref().map(|id| store.other_owner(id)) {
                Some(Ok(Some(pid))) => RestoreOutcome::Owned { pid },
                Some(Err(e)) => RestoreOutcome::Failed {
                    error: e.to_string(),
                },
                _ => restore_attr_with(fs, dev, *t, rec, reattached),
            };
            let kept = match &outcome {
                RestoreOutcome::Failed { .. } | RestoreOutcome::Owned { .. } => Some(rec.clone()),
                RestoreOutcome::Vanished | RestoreOutcome::Detached => {
                    let since = rec.vanished_at_unix_secs.unwrap_or(now_unix_secs);
                    (now_unix_secs.saturating_sub(since) < VANISHED_KEEP_SECS).then(|| SavedAttr {
                        vanished_at_unix_secs: Some(since),
                        ..rec.clone()
                    })
                }
                _ => None,
            };
            if let Some(k) = kept {
                keep.devices.entry(dev.clone()).or_default().insert(*t, k);
            }
            results.push(RestoreResult {
                device: dev.clone(),
                tunable: *t,
                outcome,
            });
        }
    }
    let kept = keep.devices.values().map(|m| m.len()).sum();
    let updated = if keep.is_empty() {
        store.remove()
    } else if keep != loaded.state || !loaded.rejected.is_empty() {
        store.save(&keep)
    } else {
        Ok(())
    };
    Ok(RestoreReport {
        results,
        rejected: loaded.rejected,
        kept,
        // The values are back either way: what the file still says is reported, per
        // record, not lost behind one error.
        stale: updated.err().map(|e| e.to_string()),
    })
}
