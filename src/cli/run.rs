//! `mergetune run`: its command line. The daemon is assembled and run by
//! [`mergetune_export::entry::run`]; this parses the flags and turns the outcome into the
//! exit code.

use crate::cli::common::{EXIT_ERROR, EXIT_OK};
use mergetune_export::entry::{Outcome, RunOptions};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Config file [default: /etc/mergetune/mergetune.toml if it exists, else built-in defaults].
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// Decide and log what would be written; write nothing (no tunable, no state file).
    /// Reads only world-readable files: needs no root. MERGETUNE_DRY_RUN=1 in the
    /// environment does the same: the unit's drop-in for installing a fleet in dry run
    /// (empty, 0, false, no or off leave it live).
    #[arg(
        long,
        env = "MERGETUNE_DRY_RUN",
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub dry_run: bool,
    /// Sample for as long as one decision needs (step_down_after_windows windows), print
    /// the device table and every decision it would take, exit. Writes nothing, with or
    /// without --dry-run (no tunable, no state file); run as root it sees what the daemon
    /// would (the bio tap, the merge-path sampler).
    #[arg(long)]
    pub once: bool,
    /// With --once: print the devices and decisions as one JSON document.
    #[arg(long, requires = "once")]
    pub json: bool,
    /// Override the config's daemon.interval_ms: time between samples, in milliseconds.
    #[arg(long)]
    pub interval_ms: Option<u64>,
    /// Override the config's daemon.state_dir: where the original values are recorded.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// For tests: the root of a fake sysfs tree.
    #[arg(long, default_value = "/sys", hide = true)]
    pub sysfs_root: PathBuf,
    /// For tests: the root of a fake procfs tree.
    #[arg(long, default_value = "/proc", hide = true)]
    pub procfs_root: PathBuf,
    /// For tests: the runtime directory that holds the pointer to the state directory
    /// [default: /run/mergetune, and none under a fake --sysfs-root].
    #[arg(long, hide = true)]
    pub runtime_dir: Option<PathBuf>,
    /// Append every tick's raw samples to FILE (JSON lines, one per tick), for
    /// `mergetune replay`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Override the config's metrics.listen: IP:PORT of the read-only /metrics and /status endpoint;
    /// "" turns it off. With --once the endpoint is off unless this is given.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
}

pub fn run(args: RunArgs) -> anyhow::Result<i32> {
    let outcome = mergetune_export::entry::run(RunOptions {
        config: args.config,
        dry_run: args.dry_run,
        once: args.once,
        json: args.json,
        interval_ms: args.interval_ms,
        state_dir: args.state_dir,
        sysfs_root: args.sysfs_root,
        procfs_root: args.procfs_root,
        runtime_dir: args.runtime_dir,
        record: args.record,
        metrics_listen: args.metrics_listen,
    })?;
    Ok(match outcome {
        Outcome::Restored => EXIT_OK,
        Outcome::RestoreFailed => EXIT_ERROR,
    })
}
