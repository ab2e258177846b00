//! A fake tracefs and procfs for the tests of the instance sweeps (the capture's and the
//! bio tap's): rmdir of a plain empty directory stands for tracefs's.

use std::path::PathBuf;

/// A scratch directory holding `tracing/` with the trace instances `instances` and `proc/`
/// with the processes `live_pids`: (the directory, the tracefs root, the procfs root).
pub(crate) fn tracefs_and_procfs(
    instances: &[&str],
    live_pids: &[u32],
) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let tracefs = root.path().join("tracing");
    let procfs = root.path().join("proc");
    for n in instances {
        std::fs::create_dir_all(tracefs.join("instances").join(n)).unwrap();
    }
    for pid in live_pids {
        std::fs::create_dir_all(procfs.join(pid.to_string())).unwrap();
    }
    (root, tracefs, procfs)
}
