//! `mergetune restore`: put back every original value the state file records (after a
//! crash; the unit's `ExecStopPost`; `make uninstall`; the package's prerm). Exit 1 when a
//! value could not be restored, an entry of the file was rejected, or the directory it was
//! told to read does not exist.
//!
//! Where it looks, in order: the directory it is told (`--state-dir`, else the config's
//! `daemon.state_dir`); then the directory the last live daemon actually used, named by the
//! pointer in the runtime directory (crates/daemon/src/state.rs), which differs when the config
//! was edited after that daemon started; then the runtime directory itself, the default
//! `state_dir`. A directory other than the first is restored from only when its file was
//! left by a process that is gone (a running daemon's records are its own).
//!
//! No directory a running daemon holds (its lock, see crates/daemon/src/state.rs) is
//! restored from, the one asked for included, unless `--force`: that exits 1 and says
//! which process holds it. The unit's `ExecStopPost` runs after the daemon is gone, when
//! the lock is free. `--force` overrides that daemon and nothing else: the devices it
//! claims are written, a device another running process claims (a second daemon, a
//! `calibrate`) never is, `--force` or not; each is named with its owner's pid and its
//! record kept.
//!
//! A state directory that does not exist is an error (a wrong `--state-dir` must not read
//! as "nothing to restore"; a missing `--state-dir` is said and nothing else is read,
//! not even the pointer's directory), except the runtime directory (systemd creates it at the
//! unit's start, so its absence means no daemon ran since boot), and a config's
//! `state_dir` when the last daemon's records were found through the pointer (the config
//! was edited after that daemon started). A live daemon creates its `state_dir` before its
//! first tick, so the unit's `ExecStopPost` always finds it. A directory without a state file means nothing
//! is left to restore (the daemon's clean stop removes it), the unit's `ExecStopPost` after
//! every stop: that is a success.

use crate::cli::common::{EXIT_ERROR, EXIT_OK, load_config, unix_now_secs};
use mergetune_daemon::state::{
    Claims, FileStore, Reattached, RestoreReport, StateError, StatePointer, StateStore as _,
    restore_from_store_with,
};
use mergetune_export::entry::HostFlags;
use mergetune_kernel::blockfs::RealFs;
use mergetune_logic::config::DEFAULT_STATE_DIR;
use rustix::process::{Pid, test_kill_process};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// Directory holding state.json [default: the config's daemon.state_dir, /run/mergetune].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Config file to take state_dir from [default: /etc/mergetune/mergetune.toml if it exists].
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// Restore even from a state directory a running mergetune holds (its lock is taken),
    /// over the devices that daemon claims: it then finds its tunables changed and hands
    /// them off. A device another running process claims (a second daemon, calibrate) is
    /// never written, --force or not: it is named with that process's pid and its record
    /// kept; stop that process first.
    #[arg(long)]
    pub force: bool,
    /// A loop device re-attached to the same backing file since the record holds
    /// mergetune's value, or an operator wrote the same one: `restore` puts the original
    /// back, `leave` takes the value for the operator's and drops the record.
    #[arg(long, value_name = "restore|leave", default_value = "restore")]
    pub reattached: Reattached,
    #[command(flatten)]
    pub host: HostFlags,
}

/// Why a directory is read.
enum Source {
    Asked,
    Pointer(PathBuf),
    Runtime,
}

/// Whether the process that wrote a state file is still there (a running daemon): a
/// signal 0 only checks that the process exists. A pid outside the kernel's range is no
/// process (cast to a negative pid_t it would ask about a whole process group).
fn alive(pid: u32) -> bool {
    pid != std::process::id()
        && i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .is_some_and(|p| test_kill_process(p).is_ok())
}

/// Whether a directory may be restored from as far as a live daemon goes: not while one
/// holds its lock (its records are its own: restoring under it makes it hand its devices
/// off), unless `force`. A directory that cannot be checked is not restored from.
fn live_holder_allows(store: &mut FileStore, force: bool, code: &mut i32) -> bool {
    match store.holder() {
        Ok(None) => true,
        Ok(Some(pid)) => {
            let held = StateError::Held {
                path: store.dir().to_path_buf(),
                pid,
            };
            if force {
                eprintln!(
                    "mergetune: {held}: --force: restoring anyway over the devices it claims (a device another running process claims is left to it)"
                );
                if let Some(pid) = pid {
                    *store = store.clone().forced_over(pid);
                }
                true
            } else {
                eprintln!("mergetune: {held}: nothing restored from it");
                *code = EXIT_ERROR;
                false
            }
        }
        Err(e) => {
            eprintln!("mergetune: {e}: nothing restored from it");
            *code = EXIT_ERROR;
            false
        }
    }
}

/// The directories to restore from, in order: the one asked for (or the config's), the
/// last daemon's (named by the pointer in the runtime directory), and the runtime
/// directory itself.
fn candidate_dirs(primary: &Path, runtime: Option<&Path>) -> Vec<(PathBuf, Source)> {
    let mut dirs: Vec<(PathBuf, Source)> = vec![(primary.to_path_buf(), Source::Asked)];
    if let Some(rt) = runtime {
        let pointer = StatePointer::new(rt);
        match pointer.read() {
            Ok(Some(d)) => dirs.push((d, Source::Pointer(pointer.path()))),
            Ok(None) => {}
            Err(e) => eprintln!("mergetune: {e}: ignored"),
        }
        dirs.push((rt.to_path_buf(), Source::Runtime));
    }
    dirs
}

/// Whether to restore from this directory. The one asked for: when it exists (a missing
/// one is noted, unless it is the unit's own). Another: only a state file whose writer is
/// gone (a missing file is nothing to say; an unreadable one is an error).
fn should_restore(
    dir: &Path,
    source: &Source,
    store: &mut FileStore,
    runtime: Option<&Path>,
    force: bool,
    missing: &mut Option<PathBuf>,
    code: &mut i32,
) -> bool {
    match source {
        Source::Asked => {
            if dir.exists() && !dir.is_dir() {
                eprintln!(
                    "mergetune: {}: not a directory: nothing restored from it",
                    dir.display()
                );
                *code = EXIT_ERROR;
                return false;
            }
            if !dir.is_dir() {
                let unit_dir = runtime == Some(dir) || dir == Path::new(DEFAULT_STATE_DIR);
                if !unit_dir {
                    *missing = Some(dir.to_path_buf());
                }
                return false;
            }
            live_holder_allows(store, force, code)
        }
        Source::Pointer(_) | Source::Runtime => {
            if !live_holder_allows(store, false, code) {
                return false;
            }
            let pid = match store.load() {
                Ok(Some(l)) => l.state.pid,
                Ok(None) => return false,
                Err(e) => {
                    eprintln!("mergetune: {e}");
                    *code = EXIT_ERROR;
                    return false;
                }
            };
            if alive(pid) {
                println!(
                    "{}: left as it is: it belongs to the running process {pid}",
                    store.describe()
                );
                return false;
            }
            match source {
                Source::Pointer(p) => println!(
                    "{}: the last daemon's state_dir (named by {}), not the one asked for: restoring from it too",
                    dir.display(),
                    p.display()
                ),
                _ => println!(
                    "{}: the runtime directory holds a state file too: restoring from it",
                    dir.display()
                ),
            }
            true
        }
    }
}

/// The config's `state_dir`. An emptied config (refused by `run`) still lets the unit's
/// ExecStopPost restore: from the default directory, and the pointer's.
fn config_state_dir(path: Option<&Path>) -> anyhow::Result<PathBuf> {
    match load_config(path) {
        Ok((cfg, _)) => Ok(cfg.daemon.state_dir),
        Err(e) => match e.downcast_ref::<mergetune_logic::config::ConfigError>() {
            Some(empty @ mergetune_logic::config::ConfigError::Empty { .. }) => {
                eprintln!(
                    "mergetune: {empty}; restoring from {}",
                    mergetune_logic::config::DEFAULT_STATE_DIR
                );
                Ok(PathBuf::from(mergetune_logic::config::DEFAULT_STATE_DIR))
            }
            _ => Err(e),
        },
    }
}

pub fn run(args: RestoreArgs) -> anyhow::Result<i32> {
    let primary = match &args.state_dir {
        Some(d) => d.clone(),
        None => config_state_dir(args.config.as_deref())?,
    };
    let runtime = args.host.runtime_dir();
    if args.state_dir.is_some() && !primary.exists() {
        // The operator named the directory: what another one holds is not what was asked.
        note_missing(&primary, true);
        return Ok(EXIT_ERROR);
    }
    let mut code = EXIT_OK;
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut fs = args.host.roots().fs();
    let mut restored_any = false;
    // The directory asked for is missing: an error, unless it comes from the config and
    // the last daemon's records were found elsewhere (the config was edited after it
    // started; the next start creates the new directory).
    let mut missing: Option<PathBuf> = None;
    for (dir, source) in candidate_dirs(&primary, runtime.as_deref()) {
        if seen.contains(&dir) {
            continue;
        }
        seen.push(dir.clone());
        let mut store = FileStore::new(&dir);
        if let Some(rt) = runtime.as_deref() {
            // A device a live process owns now is left to it (--force: except the devices
            // of the daemon whose lock it overrides).
            store = store.with_claims(Claims::under(rt));
        }
        if !should_restore(
            &dir,
            &source,
            &mut store,
            runtime.as_deref(),
            args.force,
            &mut missing,
            &mut code,
        ) {
            continue;
        }
        let report = restore_dir(
            &mut fs,
            &mut store,
            &dir,
            runtime.as_deref(),
            args.reattached,
        )?;
        restored_any |= !report.results.is_empty() || !report.rejected.is_empty();
        if report.failed() || !report.rejected.is_empty() || report.stale.is_some() {
            code = EXIT_ERROR;
        }
    }
    if let Some(dir) = missing {
        let explicit = args.state_dir.is_some();
        note_missing(&dir, explicit);
        if explicit || !restored_any {
            code = EXIT_ERROR;
        }
    }
    remove_dead_taps(&fs);
    if !restored_any && code == EXIT_OK {
        println!(
            "{}: nothing to restore",
            FileStore::new(&primary).describe()
        );
    }
    Ok(code)
}

/// Restores from the state file in `dir` and says what was done: each record's result,
/// each rejected entry, the records kept. When none is kept, a pointer in the runtime
/// directory naming `dir` is cleared.
fn restore_dir(
    fs: &mut RealFs,
    store: &mut FileStore,
    dir: &Path,
    runtime: Option<&Path>,
    reattached: Reattached,
) -> anyhow::Result<RestoreReport> {
    let report = restore_from_store_with(fs, store, unix_now_secs(), reattached)?;
    for r in &report.results {
        println!("{r}");
    }
    for r in &report.rejected {
        eprintln!("mergetune: {}: {r}", store.describe());
    }
    // The values are back, but the file still names them as mergetune's: said per record.
    for s in report.stale_records() {
        eprintln!("mergetune: {}: {s}", store.describe());
    }
    if report.kept > 0 {
        println!(
            "{}: {} record(s) kept for a later restore",
            store.describe(),
            report.kept
        );
    } else if let Some(rt) = runtime.filter(|_| report.stale.is_none()) {
        // Nothing left there: a pointer naming it has done its job.
        let _ = StatePointer::new(rt).clear_if(dir);
    }
    Ok(report)
}

/// Says that the directory asked for does not exist, and where it came from (`explicit`:
/// `--state-dir`, else the config's `daemon.state_dir`).
fn note_missing(dir: &Path, explicit: bool) {
    eprintln!(
        "mergetune: {}: no such directory: nothing restored from it (check {})",
        dir.display(),
        if explicit {
            "--state-dir"
        } else {
            "daemon.state_dir"
        }
    );
}

/// After a SIGKILL the daemon's bio tap instance is left behind; the machine is put back
/// whole, not only its tunables.
fn remove_dead_taps(fs: &RealFs) {
    for dir in fs.remove_dead_taps() {
        println!(
            "removed tracefs instance {} (its process is gone)",
            dir.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::alive;

    #[test]
    fn a_state_file_pid_beyond_the_pid_range_is_no_running_daemon() {
        // u32::MAX read as a pid_t is -1: kill(-1, 0) asks about every process we may
        // signal, which answers yes; the file's writer is gone all the same.
        assert!(!alive(u32::MAX));
        assert!(!alive(0));
        // ourselves: our own records are never another daemon's
        assert!(!alive(std::process::id()));
    }

    #[test]
    fn a_live_child_is_a_running_process_and_a_reaped_one_is_not() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(alive(pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!alive(pid));
    }
}
