//! `mergetune restore`: put back every original value the state file records (after a
//! crash; the unit's `ExecStopPost`; `make uninstall`; the package's prerm). Exit 1 when a
//! value could not be restored or an entry of the file was rejected.

use crate::cli::common::{EXIT_ERROR, EXIT_OK, load_config, unix_now_secs};
use crate::daemon::state::{FileStore, StateStore as _, restore_from_store};
use crate::kernel::blockfs::RealFs;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// Directory holding state.json [default: the config's daemon.state_dir, /run/mergetune].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Config file to take state_dir from [default: /etc/mergetune/mergetune.toml if it exists].
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// For tests: the root of a fake sysfs tree.
    #[arg(long, default_value = "/sys", hide = true)]
    pub sysfs_root: PathBuf,
}

pub fn run(args: RestoreArgs) -> anyhow::Result<i32> {
    let dir = match args.state_dir {
        Some(d) => d,
        None => load_config(args.config.as_deref())?.0.daemon.state_dir,
    };
    let mut store = FileStore::new(&dir);
    let mut fs = RealFs::new(&args.sysfs_root, "/proc");
    let report = restore_from_store(&mut fs, &mut store, unix_now_secs())?;
    // After a SIGKILL the daemon's bio tap instance is left behind; the machine is put
    // back whole, not only its tunables.
    for dir in fs.remove_dead_taps() {
        println!(
            "removed tracefs instance {} (its process is gone)",
            dir.display()
        );
    }
    if report.results.is_empty() && report.rejected.is_empty() {
        println!("{}: nothing to restore", store.describe());
    }
    for r in &report.results {
        println!("{r}");
    }
    for r in &report.rejected {
        eprintln!("mergetune: {}: {r}", store.describe());
    }
    if report.kept > 0 {
        println!(
            "{}: {} record(s) kept for a later restore",
            store.describe(),
            report.kept
        );
    }
    Ok(if report.failed() || !report.rejected.is_empty() {
        EXIT_ERROR
    } else {
        EXIT_OK
    })
}
