//! What a reload (SIGHUP) may change. Most keys take effect at the next tick; a few cannot
//! change under a running daemon without losing something, and a config that changes one
//! of them is refused whole, naming the key, with the old config kept:
//!
//! - `daemon.state_dir`: the originals of every write so far are recorded there. Moving it
//!   would leave them behind where nothing looks (the next `mergetune restore --config`
//!   reads the new key). A restart moves it safely: the stop restores every original
//!   first. The pointer in the runtime directory (crates/daemon/src/state.rs) names the
//!   directory actually in use, for a restore after a crash.
//!
//! Pure: [`vet`] compares two configs; [`Daemon::try_reload`] is the only way the run loop
//! reloads, so the tests drive the same check.

use crate::adaptive::Daemon;
use mergetune_logic::config::Config;
use std::path::PathBuf;

/// A reload refused: the key, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReloadRefused {
    #[error(
        "key `daemon.state_dir`: changed from {} to {}: a reload cannot move the state directory (the originals recorded in {} would be left behind); restart the service to use the new one (the stop restores every original first)",
        from.display(),
        to.display(),
        from.display()
    )]
    StateDir { from: PathBuf, to: PathBuf },
}

/// Whether `new` may replace `old` in a running daemon.
pub fn vet(old: &Config, new: &Config) -> Result<(), ReloadRefused> {
    if old.daemon.state_dir != new.daemon.state_dir {
        return Err(ReloadRefused::StateDir {
            from: old.daemon.state_dir.clone(),
            to: new.daemon.state_dir.clone(),
        });
    }
    Ok(())
}

impl Daemon {
    /// Takes `cfg` if [`vet`] allows it; otherwise keeps the running config.
    pub fn try_reload(&mut self, cfg: Config) -> Result<(), ReloadRefused> {
        vet(self.config(), &cfg)?;
        self.reload(cfg);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_state_dir_is_refused_naming_the_key_and_other_keys_pass() {
        let old = Config::default();
        let mut new = old.clone();
        new.policy.cost_profile = "lkml-2008".into();
        new.devices.exclude = vec!["sdb".into()];
        assert_eq!(vet(&old, &new), Ok(()));
        new.daemon.state_dir = "/var/lib/mergetune".into();
        let e = vet(&old, &new).unwrap_err();
        assert!(e.to_string().contains("`daemon.state_dir`"), "{e}");
        assert!(e.to_string().contains("/run/mergetune"), "{e}");
    }
}
