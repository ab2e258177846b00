//! Where this host's kernel interfaces are mounted: `/sys` and `/proc` on the machine, a
//! fake tree's folders under test. Every reader takes its root, so a test points the whole
//! program at a tree it built; these two constants are the one place that names the real
//! mount points.

use crate::blockfs::RealFs;
use std::path::{Path, PathBuf};

/// Where sysfs is on a real machine.
pub const SYSFS: &str = "/sys";
/// Where procfs is on a real machine.
pub const PROCFS: &str = "/proc";

/// The roots of sysfs and procfs one run reads and writes under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoots {
    pub sysfs: PathBuf,
    pub procfs: PathBuf,
}

impl KernelRoots {
    pub fn new(sysfs: impl Into<PathBuf>, procfs: impl Into<PathBuf>) -> Self {
        KernelRoots {
            sysfs: sysfs.into(),
            procfs: procfs.into(),
        }
    }

    /// The machine's own sysfs, not a fake tree: what is written under it reaches real
    /// devices, and host-wide files (the daemon's runtime directory) are the real ones.
    pub fn is_real(&self) -> bool {
        self.sysfs == Path::new(SYSFS)
    }

    /// A reader and writer of the block stack under these roots.
    pub fn fs(&self) -> RealFs {
        RealFs::new(&self.sysfs, &self.procfs)
    }
}

impl Default for KernelRoots {
    /// The machine's own.
    fn default() -> Self {
        KernelRoots::new(SYSFS, PROCFS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_machines_own_sysfs_is_real() {
        assert!(KernelRoots::default().is_real());
        assert!(!KernelRoots::new("/tmp/fake/sys", PROCFS).is_real());
        // A fake procfs beside the real sysfs still writes real devices.
        assert!(KernelRoots::new(SYSFS, "/tmp/fake/proc").is_real());
    }
}
