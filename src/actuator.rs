//! Applies tunable changes: read before write, write only a changed value, record the
//! original in the state store before the first write, and in dry-run write nothing at all.
//! A failed write is returned (and counted by the caller), never fatal.

use crate::blockfs::{BlockFs, FsError};
use crate::state::{SavedAttr, SavedState, StateError, StateStore};

#[derive(Debug, thiserror::Error)]
pub enum ActuatorError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error("not writing, the original could not be recorded: {0}")]
    State(#[from] StateError),
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

pub struct Actuator {
    dry_run: bool,
    store: Box<dyn StateStore>,
    saved: SavedState,
}

impl Actuator {
    pub fn new(dry_run: bool, store: Box<dyn StateStore>) -> Self {
        Actuator {
            dry_run,
            store,
            saved: SavedState::default(),
        }
    }

    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    pub fn saved(&self) -> &SavedState {
        &self.saved
    }

    /// Sets `dev/attr` to `value`.
    pub fn set(
        &mut self,
        fs: &mut dyn BlockFs,
        dev: &str,
        attr: &str,
        value: &str,
    ) -> Result<SetOutcome, ActuatorError> {
        let current = fs.read_attr(dev, attr)?.trim().to_string();
        if current == value {
            return Ok(SetOutcome::Unchanged);
        }
        if self.dry_run {
            return Ok(SetOutcome::DryRun { from: current });
        }
        if self.saved.get(dev, attr).is_none() {
            self.saved
                .devices
                .entry(dev.to_string())
                .or_default()
                .insert(
                    attr.to_string(),
                    SavedAttr {
                        original: current.clone(),
                        last_written: None,
                    },
                );
            if let Err(e) = self.store.save(&self.saved) {
                // Never write what we could not record.
                if let Some(m) = self.saved.devices.get_mut(dev) {
                    m.remove(attr);
                }
                return Err(e.into());
            }
        }
        fs.write_attr(dev, attr, value)?;
        if let Some(rec) = self
            .saved
            .devices
            .get_mut(dev)
            .and_then(|m| m.get_mut(attr))
        {
            rec.last_written = Some(value.to_string());
        }
        // The write happened; a failure to note it only weakens the "left alone" check on
        // restore, so it is reported but does not undo the change.
        self.store.save(&self.saved)?;
        Ok(SetOutcome::Written { from: current })
    }

    /// Stops tracking a device (someone else took it over): its values will not be restored.
    pub fn forget(&mut self, dev: &str) -> Result<(), StateError> {
        if self.saved.devices.remove(dev).is_some() {
            self.store.save(&self.saved)?;
        }
        Ok(())
    }

    /// Stops tracking one attribute of a device (someone else took it over).
    pub fn forget_attr(&mut self, dev: &str, attr: &str) -> Result<(), StateError> {
        let removed = self
            .saved
            .devices
            .get_mut(dev)
            .is_some_and(|m| m.remove(attr).is_some());
        if removed {
            self.saved.devices.retain(|_, m| !m.is_empty());
            self.store.save(&self.saved)?;
        }
        Ok(())
    }

    /// Restores every recorded original and clears the record.
    pub fn restore_all(&mut self, fs: &mut dyn BlockFs) -> Vec<crate::state::RestoreResult> {
        let results = crate::state::restore_all(fs, &self.saved);
        let failed: Vec<_> = results
            .iter()
            .filter(|r| matches!(r.outcome, crate::state::RestoreOutcome::Failed { .. }))
            .map(|r| (r.device.clone(), r.attr.clone()))
            .collect();
        self.saved
            .devices
            .iter_mut()
            .for_each(|(d, m)| m.retain(|a, _| failed.contains(&(d.clone(), a.clone()))));
        self.saved.devices.retain(|_, m| !m.is_empty());
        let _ = if self.saved.is_empty() {
            self.store.remove()
        } else {
            self.store.save(&self.saved)
        };
        results
    }
}

impl Actuator {
    /// Restores one device's recorded originals (it left mergetune's care) and forgets it.
    pub fn restore_all_for(
        &mut self,
        fs: &mut dyn BlockFs,
        dev: &str,
    ) -> Vec<crate::state::RestoreResult> {
        let Some(attrs) = self.saved.devices.get(dev).cloned() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (attr, rec) in &attrs {
            out.push(crate::state::RestoreResult {
                device: dev.to_string(),
                attr: attr.clone(),
                outcome: crate::state::restore_attr(fs, dev, attr, rec),
            });
        }
        let _ = self.forget(dev);
        out
    }
}
