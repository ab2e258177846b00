//! The original tunables, kept so the machine is always left as it was found.
//!
//! Before the first write to any device attribute, its original value is recorded and the
//! state file is written atomically (temp file, fsync, rename, fsync of the directory), so a
//! crash at any point leaves either no record and no change, or a record. The record also
//! holds the value mergetune last wrote: restoring puts the original back only where the
//! attribute still holds mergetune's value, so a later change by someone else is never
//! overwritten.

use crate::blockfs::{BlockFs, FsError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const STATE_FILE_NAME: &str = "state.json";
const STATE_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{path}: cannot read state file: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{path}: state file is corrupt: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error("{path}: cannot write state file: {message}")]
    Write { path: PathBuf, message: String },
}

/// One recorded attribute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedAttr {
    pub original: String,
    /// What mergetune last wrote (None until the first write succeeded).
    pub last_written: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedState {
    pub version: u32,
    /// The pid of the daemon that wrote it, for the humans reading it.
    pub pid: u32,
    /// device -> attribute (relative to the device directory) -> record.
    pub devices: BTreeMap<String, BTreeMap<String, SavedAttr>>,
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
    pub fn get(&self, dev: &str, attr: &str) -> Option<&SavedAttr> {
        self.devices.get(dev).and_then(|m| m.get(attr))
    }
}

/// Where the record lives: a file for the daemon, memory for the simulator.
pub trait StateStore {
    fn load(&self) -> Result<Option<SavedState>, StateError>;
    fn save(&mut self, state: &SavedState) -> Result<(), StateError>;
    fn remove(&mut self) -> Result<(), StateError>;
    fn describe(&self) -> String;
}

/// `<dir>/state.json`.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileStore { dir: dir.into() }
    }
    pub fn path(&self) -> PathBuf {
        self.dir.join(STATE_FILE_NAME)
    }
}

fn write_err(path: &Path, e: impl std::fmt::Display) -> StateError {
    StateError::Write {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl StateStore for FileStore {
    fn load(&self) -> Result<Option<SavedState>, StateError> {
        let path = self.path();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(StateError::Read {
                    path,
                    message: e.to_string(),
                });
            }
        };
        let st: SavedState = serde_json::from_str(&text).map_err(|e| StateError::Corrupt {
            path: path.clone(),
            message: e.to_string(),
        })?;
        if st.version != STATE_VERSION {
            return Err(StateError::Corrupt {
                path,
                message: format!("version {} (expected {STATE_VERSION})", st.version),
            });
        }
        Ok(Some(st))
    }

    fn save(&mut self, state: &SavedState) -> Result<(), StateError> {
        let path = self.path();
        std::fs::create_dir_all(&self.dir).map_err(|e| write_err(&self.dir, e))?;
        let tmp = self.dir.join(format!(".{STATE_FILE_NAME}.tmp"));
        let text = serde_json::to_string_pretty(state).map_err(|e| write_err(&path, e))?;
        {
            let mut f = std::fs::File::create(&tmp).map_err(|e| write_err(&tmp, e))?;
            f.write_all(text.as_bytes())
                .map_err(|e| write_err(&tmp, e))?;
            f.sync_all().map_err(|e| write_err(&tmp, e))?;
        }
        std::fs::rename(&tmp, &path).map_err(|e| write_err(&path, e))?;
        // The rename is durable only once the directory is synced.
        if let Ok(d) = std::fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    fn remove(&mut self) -> Result<(), StateError> {
        let path = self.path();
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(write_err(&path, e)),
        }
    }

    fn describe(&self) -> String {
        self.path().display().to_string()
    }
}

/// In-memory record (simulator, dry-run).
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    pub state: Option<SavedState>,
}

impl StateStore for MemoryStore {
    fn load(&self) -> Result<Option<SavedState>, StateError> {
        Ok(self.state.clone())
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

/// What restoring one attribute did.
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
    /// The device is gone: nothing to restore.
    Vanished,
    Failed {
        error: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreResult {
    pub device: String,
    pub attr: String,
    pub outcome: RestoreOutcome,
}

impl std::fmt::Display for RestoreResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = format!("{}/{}", self.device, self.attr);
        match &self.outcome {
            RestoreOutcome::Restored { from, to } => write!(f, "{what}: restored {from} -> {to}"),
            RestoreOutcome::AlreadyOriginal { value } => {
                write!(f, "{what}: already at its original value {value}")
            }
            RestoreOutcome::LeftAlone { current, ours } => write!(
                f,
                "{what}: left at {current} (changed by someone else after mergetune wrote {ours})"
            ),
            RestoreOutcome::Vanished => write!(f, "{what}: device gone, nothing to restore"),
            RestoreOutcome::Failed { error } => write!(f, "{what}: restore failed: {error}"),
        }
    }
}

/// Restores one attribute per the rule in the module doc.
pub fn restore_attr(
    fs: &mut dyn BlockFs,
    dev: &str,
    attr: &str,
    saved: &SavedAttr,
) -> RestoreOutcome {
    let current = match fs.read_attr(dev, attr) {
        Ok(v) => v.trim().to_string(),
        Err(FsError::NotFound { .. }) => return RestoreOutcome::Vanished,
        Err(e) => {
            return RestoreOutcome::Failed {
                error: e.to_string(),
            };
        }
    };
    if current == saved.original {
        return RestoreOutcome::AlreadyOriginal { value: current };
    }
    if let Some(ours) = &saved.last_written
        && &current != ours
    {
        return RestoreOutcome::LeftAlone {
            current,
            ours: ours.clone(),
        };
    }
    match fs.write_attr(dev, attr, &saved.original) {
        Ok(()) => RestoreOutcome::Restored {
            from: current,
            to: saved.original.clone(),
        },
        Err(FsError::NotFound { .. }) => RestoreOutcome::Vanished,
        Err(e) => RestoreOutcome::Failed {
            error: e.to_string(),
        },
    }
}

/// Restores everything in a record.
pub fn restore_all(fs: &mut dyn BlockFs, saved: &SavedState) -> Vec<RestoreResult> {
    let mut out = Vec::new();
    for (dev, attrs) in &saved.devices {
        for (attr, rec) in attrs {
            out.push(RestoreResult {
                device: dev.clone(),
                attr: attr.clone(),
                outcome: restore_attr(fs, dev, attr, rec),
            });
        }
    }
    out
}

/// Restores from a state store and removes the record when nothing failed (a failed
/// restore keeps the file so a later `mergetune restore` can retry).
pub fn restore_from_store(
    fs: &mut dyn BlockFs,
    store: &mut dyn StateStore,
) -> Result<Vec<RestoreResult>, StateError> {
    let Some(saved) = store.load()? else {
        return Ok(Vec::new());
    };
    let results = restore_all(fs, &saved);
    if results
        .iter()
        .all(|r| !matches!(r.outcome, RestoreOutcome::Failed { .. }))
    {
        store.remove()?;
    }
    Ok(results)
}
