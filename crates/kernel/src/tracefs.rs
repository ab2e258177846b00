//! The tracing filesystem's mechanics: mounting it, private instances, and sweeping the
//! instances a killed process left behind. blktrace's relay files are refused on locked-down
//! kernels (docs/design.md); the tracing filesystem's block events work and their merge
//! counts equal the kernel's stat deltas. A private instance (`instances/<prefix>PID…`) has
//! its own ring buffer and event switches, so the global buffer and other tools' tracing are
//! untouched. The `trace capture` command built on this is the lab's
//! (`lab::capture`); the bio tap is [`crate::biosense`].

use std::io::Write;
use std::path::{Path, PathBuf};

/// Where tracefs lives, relative to the sysfs root (/sys/kernel/tracing on a real machine).
pub const TRACEFS_IN_SYSFS: &str = "kernel/tracing";
/// The prefix of a capture's instance name (`mergetune-PID`).
pub const INSTANCE_PREFIX: &str = "mergetune-";
/// The block events a capture enables, in this order; those this kernel lacks are skipped
/// (block_bio_queue is required). Plug events name no device and cannot be filtered: left
/// out.
pub const EVENTS: [&str; 8] = [
    "block_bio_queue",
    "block_bio_backmerge",
    "block_bio_frontmerge",
    "block_rq_insert",
    "block_rq_issue",
    "block_rq_complete",
    "block_rq_requeue",
    "block_split",
];

/// What went wrong under tracefs or sysfs; the path in every variant.
#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    #[error("tracefs is not mounted and mounting it at {path} failed: {source}")]
    Mount {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tracefs mounted at {path} but it has no instances/ directory")]
    NoInstances { path: PathBuf },
    #[error("cannot create tracefs instance {path}: {source}")]
    CreateInstance {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        source: std::io::Error,
    },
    #[error("--device {name:?}: not a block device name")]
    BadDeviceName { name: String },
    #[error("--device {name}: no such block device ({path}: {source})")]
    NoSuchDevice {
        name: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: unexpected content {text:?} (want MAJOR:MINOR)")]
    BadDeviceNumber { path: PathBuf, text: String },
}

/// The device's `(name, major, minor)` from `<sysfs>/class/block/NAME/dev` (partitions
/// too); `name` may be given as `/dev/NAME`.
pub fn device_number(name: &str, sysfs_root: &Path) -> Result<(String, u32, u32), TracefsError> {
    let name = name.trim().trim_start_matches("/dev/").to_string();
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(TracefsError::BadDeviceName { name });
    }
    let path = sysfs_root.join("class/block").join(&name).join("dev");
    let text = std::fs::read_to_string(&path).map_err(|source| TracefsError::NoSuchDevice {
        name: name.clone(),
        path: path.clone(),
        source,
    })?;
    let parsed = text
        .trim()
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
    match parsed {
        Some((major, minor)) => Ok((name, major, minor)),
        None => Err(TracefsError::BadDeviceNumber { path, text }),
    }
}

/// Mounts tracefs at `tracefs` unless it is mounted there already (an `instances/`
/// directory shows it is). A mount made here is left mounted, as systemd hosts have it.
/// Returns whether it mounted.
pub fn ensure_mounted(tracefs: &Path) -> Result<bool, TracefsError> {
    if tracefs.join("instances").is_dir() {
        return Ok(false);
    }
    mount_tracefs(tracefs).map_err(|source| TracefsError::Mount {
        path: tracefs.to_path_buf(),
        source,
    })?;
    if !tracefs.join("instances").is_dir() {
        return Err(TracefsError::NoInstances {
            path: tracefs.to_path_buf(),
        });
    }
    Ok(true)
}

fn mount_tracefs(tracefs: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    // A NUL in the path is the caller's input, not the kernel's refusal: InvalidInput.
    let bad = |_| std::io::Error::from(std::io::ErrorKind::InvalidInput);
    let target = CString::new(tracefs.as_os_str().as_encoded_bytes()).map_err(bad)?;
    rustix::mount::mount(
        c"nodev",
        target.as_c_str(),
        c"tracefs",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .map_err(std::io::Error::from)
}

/// The pid a capture instance is named after (`mergetune-PID`), if `name` is one.
pub fn instance_pid(name: &str) -> Option<u32> {
    name.strip_prefix(INSTANCE_PREFIX)?.parse().ok()
}

/// What a sweep did with one instance of a dead process.
#[derive(Debug)]
pub struct Swept {
    pub dir: PathBuf,
    pub pid: u32,
    /// The removal's outcome (an instance still in use elsewhere cannot be removed).
    pub removed: std::io::Result<()>,
}

/// Removes the tracefs instances whose name `pid_of` maps to a pid that is gone (a
/// SIGKILLed process cannot clean up after itself, and an instance's ring buffer stays
/// allocated until someone does). The `events` (paths under the instance's `events/`) are
/// switched off first, as the owner's own cleanup does. An instance whose pid is alive is
/// left alone, whatever that process is now; so is one of this process. Shared by the
/// capture (`mergetune-PID`) and the bio tap (`mergetune-sense-PID-MAJ_MIN`): neither
/// prefix matches the other's names.
pub fn sweep_dead_instances(
    tracefs: &Path,
    procfs_root: &Path,
    pid_of: impl Fn(&str) -> Option<u32>,
    events: &[&str],
) -> Vec<Swept> {
    let Ok(entries) = std::fs::read_dir(tracefs.join("instances")) else {
        return Vec::new();
    };
    let mut swept = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(&pid_of) else {
            continue;
        };
        if pid == std::process::id() || procfs_root.join(pid.to_string()).exists() {
            continue;
        }
        let dir = e.path();
        for ev in events {
            let _ = std::fs::write(dir.join("events").join(ev).join("enable"), "0");
        }
        let removed = std::fs::remove_dir(&dir);
        swept.push(Swept { dir, pid, removed });
    }
    swept
}

/// Sweeps the instances of captures whose process is gone (their block events switched off
/// first).
pub fn sweep_dead_captures(tracefs: &Path, procfs_root: &Path) -> Vec<Swept> {
    let events: Vec<String> = EVENTS.iter().map(|ev| format!("block/{ev}")).collect();
    let events: Vec<&str> = events.iter().map(String::as_str).collect();
    sweep_dead_instances(tracefs, procfs_root, instance_pid, &events)
}

/// A private tracefs instance: its events off and the directory removed on drop (also on
/// error or panic).
pub struct Instance {
    dir: PathBuf,
    enabled: Vec<&'static str>,
}

impl Instance {
    /// Creates `instances/mergetune-PID` under `tracefs`.
    pub fn create(tracefs: &Path) -> Result<Instance, TracefsError> {
        let dir = tracefs
            .join("instances")
            .join(format!("{INSTANCE_PREFIX}{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|source| TracefsError::CreateInstance {
            path: dir.clone(),
            source,
        })?;
        Ok(Instance {
            dir,
            enabled: Vec::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The block events switched on, in order.
    pub fn enabled(&self) -> &[&'static str] {
        &self.enabled
    }

    /// Writes `value` to the instance's file `rel` (truncating, as tracefs wants).
    pub fn write(&self, rel: &str, value: &str) -> Result<(), TracefsError> {
        let path = self.dir.join(rel);
        let err = |source| TracefsError::Write {
            path: path.clone(),
            value: value.to_string(),
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .map_err(err)?;
        f.write_all(value.as_bytes()).map_err(err)
    }

    /// Whether this kernel has the block event `ev` in this instance.
    pub fn has_block_event(&self, ev: &str) -> bool {
        self.dir.join("events/block").join(ev).is_dir()
    }

    /// Sets the block event's filter and switches it on; [`Instance::disable`] and drop
    /// switch it off.
    pub fn enable_block_event(
        &mut self,
        ev: &'static str,
        filter: &str,
    ) -> Result<(), TracefsError> {
        let base = format!("events/block/{ev}");
        self.write(&format!("{base}/filter"), filter)?;
        self.write(&format!("{base}/enable"), "1")?;
        self.enabled.push(ev);
        Ok(())
    }

    /// Switches every event this instance enabled off.
    pub fn disable(&mut self) {
        for ev in self.enabled.drain(..) {
            let _ = std::fs::write(self.dir.join(format!("events/block/{ev}/enable")), "0");
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.disable();
        let _ = std::fs::write(self.dir.join("tracing_on"), "0");
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!(
                "warning: cannot remove tracefs instance {}: {e}",
                self.dir.display()
            );
        }
    }
}

/// The running kernel's release (`uname -r`), from `<procfs>/sys/kernel/osrelease`.
pub fn kernel_release(procfs_root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(procfs_root.join("sys/kernel/osrelease")).ok()?;
    let r = text.trim();
    (!r.is_empty()).then(|| r.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_capture_instances_name_a_pid() {
        assert_eq!(instance_pid("mergetune-4242"), Some(4242));
        assert_eq!(instance_pid("mergetune-"), None);
        assert_eq!(instance_pid("mergetune-12x"), None);
        assert_eq!(instance_pid("perf-4242"), None);
    }

    #[test]
    fn stale_instances_of_dead_pids_go_live_ones_stay() {
        let (_root, tracefs, procfs) = crate::tracefs_fixture::tracefs_and_procfs(
            &["mergetune-111", "mergetune-222", "someone-else-333"],
            &[222],
        );
        let swept = sweep_dead_captures(&tracefs, &procfs);
        assert_eq!(swept.len(), 1, "{swept:?}");
        assert_eq!(swept[0].pid, 111);
        assert!(swept[0].removed.is_ok());
        assert!(!tracefs.join("instances/mergetune-111").exists());
        assert!(tracefs.join("instances/mergetune-222").exists());
        assert!(tracefs.join("instances/someone-else-333").exists());
    }

    #[test]
    fn a_device_number_is_read_from_sysfs_and_bad_names_are_refused() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("class/block/loop7")).unwrap();
        std::fs::write(root.path().join("class/block/loop7/dev"), "7:7\n").unwrap();
        assert_eq!(
            device_number("/dev/loop7", root.path()).unwrap(),
            ("loop7".to_string(), 7, 7)
        );
        for bad in ["", "..", "a/b"] {
            assert!(matches!(
                device_number(bad, root.path()),
                Err(TracefsError::BadDeviceName { .. })
            ));
        }
        let e = device_number("sdz", root.path()).unwrap_err().to_string();
        assert!(e.contains("class/block/sdz/dev"), "{e}");
        std::fs::write(root.path().join("class/block/loop7/dev"), "x\n").unwrap();
        assert!(matches!(
            device_number("loop7", root.path()),
            Err(TracefsError::BadDeviceNumber { .. })
        ));
    }
}
