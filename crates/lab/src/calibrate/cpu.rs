//! CPU time at one moment: the ns on CPU of fio's threads and of every kworker, and
//! whole-machine busy time (recorded but not used: the machine is shared), read by
//! `kernel::cputime`. A `Snapshot` takes them with the loop device's counters at once.

use super::scratch::ScratchLoop;
use anyhow::Result;
use mergetune_kernel::cputime;
use std::path::Path;
use std::time::Instant;

/// The calibration runs on the real machine only.
const PROC: &str = mergetune_kernel::roots::PROCFS;

pub(super) fn loadavg_1m() -> f64 {
    cputime::loadavg_1m(Path::new(PROC)).unwrap_or(f64::NAN)
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Snapshot {
    pub(super) at: Instant,
    pub(super) reads: u64,
    pub(super) merged: u64,
    pub(super) fio_ns: u64,
    pub(super) kworker_ns: u64,
    pub(super) system_ns: u64,
}

pub(super) fn snapshot(lp: &ScratchLoop, fio_pid: u32) -> Result<Snapshot> {
    let (reads, merged) = lp.read_counts()?;
    let proc = Path::new(PROC);
    Ok(Snapshot {
        at: Instant::now(),
        reads,
        merged,
        fio_ns: cputime::task_runtime_ns(proc, fio_pid)?,
        kworker_ns: cputime::kworker_runtime_ns(proc)?,
        system_ns: cputime::system_busy_ns(proc)?,
    })
}
