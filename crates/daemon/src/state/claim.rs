//! One owner per device, whatever the state directories: a host-wide claim per disk.
//!
//! Whoever records an original of a device (a daemon, `calibrate`) first takes an
//! exclusive `flock` on `<runtime_dir>/devices/MAJ:MIN` and keeps it while it holds
//! records of that disk. The kernel drops a `flock` when its holder dies, SIGKILL included,
//! so "the device has a live owner" is exactly "its claim is locked": a second daemon with
//! another state directory, a `calibrate --device` and a start-up recovery or `restore`
//! each see the live owner (its pid is in the file) and leave the device to it. The
//! runtime directory is the unit's (`/run/mergetune`) or `--runtime-dir`, so tests claim in
//! a temporary directory. The claims directory is checked like a state directory
//! ([`super::safe_dir`]): its files decide who may write a disk.

use super::safe_dir::{DirError, SafeDir};
use super::{SavedState, StateError};
use mergetune_kernel::devices::DevNumber;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The claims' directory, under the runtime directory.
pub const CLAIMS_DIR_NAME: &str = "devices";

/// This process's claims, in `dir`.
#[derive(Debug, Clone)]
pub struct Claims {
    dir: PathBuf,
    held: BTreeMap<DevNumber, Arc<rustix::fd::OwnedFd>>,
}

fn claim_err(e: DirError) -> StateError {
    StateError::from_dir(e, false)
}

impl Claims {
    /// Claims kept in `<runtime_dir>/devices`.
    pub fn under(runtime_dir: &Path) -> Claims {
        Claims {
            dir: runtime_dir.join(CLAIMS_DIR_NAME),
            held: BTreeMap::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The claim file of `dev`.
    pub fn path(&self, dev: DevNumber) -> PathBuf {
        self.dir.join(dev.to_string())
    }

    /// Whether this process holds `dev`'s claim.
    pub fn holds(&self, dev: DevNumber) -> bool {
        self.held.contains_key(&dev)
    }

    /// Takes `dev`'s claim (kept until [`Claims::release`] or the process ends); refused
    /// with [`StateError::DeviceOwned`] while another live process holds it.
    pub fn claim(&mut self, device: &str, dev: DevNumber) -> Result<(), StateError> {
        if self.holds(dev) {
            return Ok(());
        }
        let dir = SafeDir::open(&self.dir, true).map_err(claim_err)?;
        match dir.lock(&dev.to_string()).map_err(claim_err)? {
            Ok(fd) => {
                self.held.insert(dev, Arc::new(fd));
                Ok(())
            }
            Err(pid) => Err(StateError::DeviceOwned {
                device: device.to_string(),
                path: self.path(dev),
                pid,
            }),
        }
    }

    /// Claims every disk `state` records; refused for a disk another live process owns
    /// when a write to it is about to be made (a `pending` value). A record kept of a disk
    /// someone else owns now (a vanished device's) is no reason to refuse the others. Every
    /// store that records originals on a real host takes its claims here.
    pub fn claim_recorded(&mut self, state: &SavedState) -> Result<(), StateError> {
        for (dev, attrs) in &state.devices {
            let Some(id) = attrs.values().find_map(|a| a.device.as_ref()) else {
                continue;
            };
            match self.claim(dev, id.dev) {
                Ok(()) => {}
                Err(e @ StateError::DeviceOwned { .. }) => {
                    if attrs.values().any(|a| a.pending.is_some()) {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Lets go of the claims of disks `state` no longer records.
    pub fn release_unrecorded(&mut self, state: &SavedState) {
        let recorded: Vec<_> = state
            .devices
            .values()
            .filter_map(|attrs| attrs.values().find_map(|a| a.device.as_ref()))
            .map(|id| id.dev)
            .collect();
        self.held.retain(|d, _| recorded.contains(d));
    }

    /// Lets `dev`'s claim go (its records are gone: nothing of this process's is there).
    pub fn release(&mut self, dev: DevNumber) {
        self.held.remove(&dev);
    }

    /// The devices claimed now.
    pub fn held(&self) -> impl Iterator<Item = DevNumber> + '_ {
        self.held.keys().copied()
    }

    /// Who else holds `dev`'s claim: None when nobody (or this process) does, else the pid
    /// it wrote, when readable. A missing claims directory is nobody's.
    pub fn other_owner(&self, dev: DevNumber) -> Result<Option<Option<u32>>, StateError> {
        if self.holds(dev) {
            return Ok(None);
        }
        let dir = match SafeDir::open(&self.dir, false) {
            Ok(d) => d,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(StateError::from_dir(e, true)),
        };
        dir.lock_holder(&dev.to_string())
            .map_err(|e| StateError::from_dir(e, true))
    }
}
