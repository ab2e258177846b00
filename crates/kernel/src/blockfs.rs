//! The one seam between mergetune and a block stack.
//!
//! Everything the daemon knows about devices comes through four small traits, one per part
//! of the kernel it reaches: [`Sysfs`] (the text of `/proc/diskstats`, the names under
//! `/sys/block`, and `/sys/block/<dev>/<attr>` files read and written as strings),
//! [`BioTap`] (the requests made and issued on a device), [`MergeSampler`] (where CPU goes on the merge
//! path) and [`HostFacts`] (kernel release, boot id). [`BlockFs`] is the four together, what
//! the daemon's loop takes; a function that needs one part takes that part alone, and a
//! world implements the parts it has (the others' defaults say "not here"). The real world
//! ([`RealFs`]) maps these onto a sysfs root and a procfs root given as parameters (so tests
//! run on a fake tree in a temp dir); the simulator implements the same traits over its
//! in-process devices, so the daemon loop cannot tell the difference. Values are exchanged
//! as the kernel prints them (`"0"`, `"none [mq-deadline]"`), which keeps every parser in
//! one place and exercised by both worlds.

use crate::biosense::{RealTaps, TapBatch, TapDrain, TapError, TapParams};
use crate::perf::{MergePathSampler, MergeSamples, PerfError, SamplerParams};
use crate::treefile::TreeFileError;
use crate::tunable::{Tunable, is_plain_device_name};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// An error touching one block-stack file. Every variant names the path.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum FsError {
    #[error("{path}: no such file or device")]
    NotFound { path: String },
    #[error("{path}: permission denied")]
    PermissionDenied { path: String },
    #[error("{path}: value {value:?} rejected (EINVAL)")]
    InvalidValue { path: String, value: String },
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    /// The path does not resolve inside the device's queue directory under the sysfs
    /// root (a symlink pointing out of it, a name that is not a device): never written.
    #[error("{path}: refused: {reason}")]
    Refused { path: String, reason: String },
}

impl FsError {
    /// What went wrong, without the path (for a message that names the path itself).
    pub fn reason(&self) -> String {
        match self {
            FsError::NotFound { .. } => "no such file or device".into(),
            FsError::PermissionDenied { .. } => "permission denied".into(),
            FsError::InvalidValue { value, .. } => format!("value {value:?} rejected (EINVAL)"),
            FsError::Io { message, .. } => message.clone(),
            FsError::Refused { reason, .. } => format!("refused: {reason}"),
        }
    }

    /// The path the error is about.
    pub fn path(&self) -> &str {
        match self {
            FsError::NotFound { path }
            | FsError::PermissionDenied { path }
            | FsError::InvalidValue { path, .. }
            | FsError::Io { path, .. }
            | FsError::Refused { path, .. } => path,
        }
    }

    fn from_io(path: &Path, err: std::io::Error, value: Option<&str>) -> FsError {
        let path = path.display().to_string();
        match err.kind() {
            ErrorKind::NotFound => FsError::NotFound { path },
            ErrorKind::PermissionDenied => FsError::PermissionDenied { path },
            ErrorKind::InvalidInput => FsError::InvalidValue {
                path,
                value: value.unwrap_or_default().to_string(),
            },
            _ => FsError::Io {
                path,
                message: err.to_string(),
            },
        }
    }
}

/// A read of the sysfs or procfs tree that failed ([`crate::treefile`]), as the block
/// stack's error: a link out of the tree or a file that is not regular is refused.
impl From<TreeFileError> for FsError {
    fn from(e: TreeFileError) -> Self {
        let path = e.path().display().to_string();
        match e {
            TreeFileError::Open {
                kind: std::io::ErrorKind::NotFound,
                ..
            } => FsError::NotFound { path },
            TreeFileError::Open {
                kind: std::io::ErrorKind::PermissionDenied,
                ..
            }
            | TreeFileError::Read {
                kind: std::io::ErrorKind::PermissionDenied,
                ..
            } => FsError::PermissionDenied { path },
            TreeFileError::OutsideTree { root, .. } => FsError::Refused {
                path,
                reason: format!(
                    "resolves outside {} (a symlink leading out of the tree): not read",
                    root.display()
                ),
            },
            TreeFileError::NotRegular { what, .. } => FsError::Refused {
                path,
                reason: format!("is {what}, not a regular file: not read (reading it could block)"),
            },
            TreeFileError::TooLarge { max_bytes, .. } => FsError::Io {
                path,
                message: format!("larger than {max_bytes} bytes: not read"),
            },
            TreeFileError::Open { message, .. } | TreeFileError::Read { message, .. } => {
                FsError::Io { path, message }
            }
        }
    }
}

/// The sysfs and procfs files of a block stack: counters, device names, and per-device
/// attribute files.
///
/// `rel` paths are relative to the device directory, e.g. `"queue/nomerges"`,
/// `"queue/iosched/front_merges"`, `"stat"`, `"slaves"`.
pub trait Sysfs {
    /// The whole content of `/proc/diskstats`, as bytes: the parser takes it line by line,
    /// so one non-UTF-8 byte costs only its own line.
    fn read_diskstats(&mut self) -> Result<Vec<u8>, FsError>;
    /// The entries of `/sys/block` (whole devices only), sorted.
    fn list_block_devices(&mut self) -> Result<Vec<String>, FsError>;
    /// The content of `/sys/block/<dev>/<rel>`, with the trailing newline trimmed.
    fn read_attr(&mut self, dev: &str, rel: &str) -> Result<String, FsError>;
    /// Write `value` to the tunable's file of `dev`, as `echo value > file` would. The only
    /// write there is: a [`Tunable`] names one of the few files mergetune manages, so no
    /// input can turn a write into one of another path.
    fn write_tunable(&mut self, dev: &str, tunable: Tunable, value: &str) -> Result<(), FsError>;
    /// The current value of the tunable (trimmed).
    fn read_tunable(&mut self, dev: &str, tunable: Tunable) -> Result<String, FsError> {
        self.read_attr(dev, tunable.rel_path())
            .map(|v| v.trim().to_string())
    }
    /// The entry names of the directory `/sys/block/<dev>/<rel>` (e.g. `slaves`), sorted;
    /// an absent directory is an empty list.
    fn list_dir(&mut self, dev: &str, rel: &str) -> Result<Vec<String>, FsError>;
    /// Whether `/sys/block/<dev>/<rel>` exists.
    fn attr_exists(&mut self, dev: &str, rel: &str) -> bool;
}

/// The bio tap (crates/kernel/src/biosense.rs): a sample of the requests made and issued on
/// a device, the only sight of mergeable I/O at nomerges=2. A world without one (fake trees, the in-memory
/// kernel of the tests without a tap) keeps these defaults: "unsupported", and the policy
/// then knows that L3 is blind there.
pub trait BioTap {
    /// Whether a tap could be opened on `dev` (creates nothing).
    fn tap_available(&mut self, dev: &str) -> Result<(), TapError> {
        Err(TapError::Unsupported {
            path: dev.to_string(),
        })
    }
    /// Starts recording the requests made and issued on `dev` (a reopen starts afresh).
    fn tap_open(&mut self, dev: &str, params: &TapParams) -> Result<(), TapError> {
        let _ = params;
        Err(TapError::Unsupported {
            path: dev.to_string(),
        })
    }
    /// Appends the events of `dev` since the open or the last drain to the batch, in time
    /// order, with at most its `max` requests made among them; never blocks.
    fn tap_drain(&mut self, dev: &str, batch: TapBatch<'_>) -> Result<TapDrain, TapError> {
        let _ = batch;
        Err(TapError::Unsupported {
            path: dev.to_string(),
        })
    }
    /// Stops recording on `dev` between two samples: a world that can keeps what the tap
    /// set up, so that the next [`BioTap::tap_open`] is cheap (and starts afresh all the
    /// same); the others close it.
    fn tap_pause(&mut self, dev: &str) -> Result<(), TapError> {
        self.tap_close(dev)
    }
    /// Stops recording on `dev` and frees what the tap held (a closed tap: nothing to do).
    fn tap_close(&mut self, dev: &str) -> Result<(), TapError> {
        let _ = dev;
        Ok(())
    }
}

/// The merge-path sampler (crates/kernel/src/perf.rs): where CPU goes, so that a step down
/// is priced in CPU on this host. A world without one keeps these defaults, and the daemon's
/// saving is then "unknown".
pub trait MergeSampler {
    /// Sets the sampler up (disabled), one sample every `period_ns` of CPU per CPU.
    fn merge_sampler_open(&mut self, period_ns: u64) -> Result<(), PerfError> {
        let _ = period_ns;
        Err(PerfError::Unsupported {
            path: "merge-path sampler".into(),
        })
    }
    /// Starts or stops sampling (an open sampler).
    fn merge_sampler_enable(&mut self, on: bool) {
        let _ = on;
    }
    /// The samples since the last drain, classed.
    fn merge_sampler_drain(&mut self) -> MergeSamples {
        MergeSamples::default()
    }
}

/// Facts about the running host. A world without them (a simulation, a fake) keeps these
/// defaults: none.
pub trait HostFacts {
    /// The running kernel's release (`uname -r`), where this world has one.
    fn kernel_release(&mut self) -> Option<String> {
        None
    }
    /// This boot's id (`/proc/sys/kernel/random/boot_id`), where this world has one: a
    /// device's `diskseq` means something only within one boot.
    fn boot_id(&mut self) -> Option<String> {
        None
    }
    /// Which file `path` is (its file system's device number and its inode), where this
    /// world can tell: a loop device's backing file, so that a re-attach to the same file
    /// is told from an attach to another.
    fn file_identity(&mut self, _path: &str) -> Option<(u64, u64)> {
        None
    }
}

/// Everything the daemon's loop sees of a block stack: its files, its bio tap, its
/// merge-path sampler and the host's facts. Implemented by every world that has the four
/// parts (each part's defaults say "not here"); a function that needs one part takes that
/// part alone.
pub trait BlockFs: Sysfs + BioTap + MergeSampler + HostFacts {}

impl<T: Sysfs + BioTap + MergeSampler + HostFacts + ?Sized> BlockFs for T {}

/// The most of `/proc/diskstats` read in one tick: about 100,000 devices' lines.
pub const MAX_DISKSTATS_BYTES: u64 = 16 << 20;
/// The most read of one sysfs or procfs attribute: the kernel prints at most a page.
pub const MAX_ATTR_BYTES: u64 = 64 << 10;

/// The real machine (or a fake tree laid out like it): sysfs and procfs under given roots.
#[derive(Debug, Clone)]
pub struct RealFs {
    sysfs_root: PathBuf,
    procfs_root: PathBuf,
    /// The open bio taps (tracefs instances), removed when closed or when this is dropped.
    taps: RealTaps,
    /// The merge-path sampler, once opened (shared by clones: one set of perf events).
    sampler: Option<std::sync::Arc<std::sync::Mutex<MergePathSampler>>>,
    /// This boot's id, read once (it does not change while the process lives).
    boot_id: Option<Option<String>>,
}

impl RealFs {
    pub fn new(sysfs_root: impl Into<PathBuf>, procfs_root: impl Into<PathBuf>) -> Self {
        RealFs {
            sysfs_root: sysfs_root.into(),
            procfs_root: procfs_root.into(),
            taps: RealTaps::default(),
            sampler: None,
            boot_id: None,
        }
    }

    /// Removes the bio taps' tracefs instances whose process is gone (a daemon killed with
    /// SIGKILL leaves its instance, its ring buffer and, if it was sampling, its probe);
    /// returns the directories removed. Live processes' instances are left alone.
    pub fn remove_dead_taps(&self) -> Vec<PathBuf> {
        crate::biosense::remove_stale_instances(&self.tracefs_dir(), &self.procfs_root)
    }

    /// Where tracefs is expected: `<sysfs_root>/kernel/tracing`.
    pub fn tracefs_dir(&self) -> PathBuf {
        self.sysfs_root.join(crate::tracefs::TRACEFS_IN_SYSFS)
    }

    fn dev_number(&mut self, dev: &str) -> Result<(u32, u32), TapError> {
        let text = self.read_attr(dev, "dev").map_err(|e| TapError::Io {
            path: e.path().to_string(),
            message: e.reason(),
        })?;
        crate::biosense::parse_dev_number(&text).ok_or_else(|| TapError::Io {
            path: self.dev_path(dev, "dev").display().to_string(),
            message: format!("unexpected content {text:?}"),
        })
    }

    fn dev_path(&self, dev: &str, rel: &str) -> PathBuf {
        let mut p = self.sysfs_root.join("block").join(dev);
        if !rel.is_empty() {
            p.push(rel);
        }
        p
    }

    /// Whether the open bio tap of `dev` reads the ring buffer's binary pages rather than
    /// `trace_pipe` text (None: no tap open): the cheap way, which the tests hold to.
    pub fn tap_reads_raw_pages(&self, dev: &str) -> Option<bool> {
        self.taps.reads_raw_pages(dev)
    }
}

fn valid_dev_name(dev: &str) -> bool {
    is_plain_device_name(dev)
}

impl RealFs {
    /// The canonical path of `dev`'s tunable file, checked to resolve inside the device's
    /// own `queue/` directory, itself inside the sysfs root (`/sys/block/sda` is a symlink
    /// into `/sys/devices`, which is fine; a `queue/nomerges` pointing at `/etc` is not).
    fn tunable_path(&self, dev: &str, tunable: Tunable) -> Result<PathBuf, FsError> {
        let path = self.dev_path(dev, tunable.rel_path());
        let refused = |reason: String| FsError::Refused {
            path: path.display().to_string(),
            reason,
        };
        if !valid_dev_name(dev) {
            return Err(refused(format!("{dev:?} is not a plain block device name")));
        }
        let canon = |p: &Path| std::fs::canonicalize(p).map_err(|e| FsError::from_io(p, e, None));
        let root = canon(&self.sysfs_root)?;
        let queue = canon(&self.dev_path(dev, "queue"))?;
        if !queue.starts_with(&root) {
            return Err(refused(format!(
                "the queue directory resolves to {}, outside {}",
                queue.display(),
                root.display()
            )));
        }
        let file = canon(&path)?;
        if !file.starts_with(&queue) || !file.is_file() {
            return Err(refused(format!(
                "resolves to {}, not a file inside {}",
                file.display(),
                queue.display()
            )));
        }
        Ok(file)
    }
}

impl Sysfs for RealFs {
    fn read_diskstats(&mut self) -> Result<Vec<u8>, FsError> {
        // Bounded, non-blocking, a regular file under the root (crate::treefile): a fake or
        // broken procfs must not make a tick read without end, or block in open.
        Ok(crate::treefile::read_beneath(
            &self.procfs_root,
            Path::new("diskstats"),
            MAX_DISKSTATS_BYTES,
        )?)
    }

    fn list_block_devices(&mut self) -> Result<Vec<String>, FsError> {
        let path = self.sysfs_root.join("block");
        let rd = std::fs::read_dir(&path).map_err(|e| FsError::from_io(&path, e, None))?;
        Ok(sorted_names(rd))
    }

    fn read_attr(&mut self, dev: &str, rel: &str) -> Result<String, FsError> {
        let path = self.dev_path(dev, rel);
        if !valid_dev_name(dev) {
            return Err(FsError::NotFound {
                path: path.display().to_string(),
            });
        }
        let rel = Path::new("block").join(dev).join(rel);
        let s = crate::treefile::read_text_beneath(&self.sysfs_root, &rel, MAX_ATTR_BYTES)?;
        Ok(s.trim_end_matches('\n').to_string())
    }

    fn write_tunable(&mut self, dev: &str, tunable: Tunable, value: &str) -> Result<(), FsError> {
        use std::io::Write;
        let path = self.tunable_path(dev, tunable)?;
        if !tunable.accepts(value) {
            return Err(FsError::InvalidValue {
                path: path.display().to_string(),
                value: value.to_string(),
            });
        }
        // Like `echo v > file`: O_TRUNC on an existing file, the value in one write(2);
        // never create a file (a vanished device must be an error, not a new file).
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| FsError::from_io(&path, e, Some(value)))?;
        let mut buf = value.as_bytes().to_vec();
        buf.push(b'\n');
        f.write_all(&buf)
            .map_err(|e| FsError::from_io(&path, e, Some(value)))?;
        Ok(())
    }

    fn list_dir(&mut self, dev: &str, rel: &str) -> Result<Vec<String>, FsError> {
        let path = self.dev_path(dev, rel);
        let rd = match std::fs::read_dir(&path) {
            Ok(rd) => rd,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(FsError::from_io(&path, e, None)),
        };
        Ok(sorted_names(rd))
    }

    fn attr_exists(&mut self, dev: &str, rel: &str) -> bool {
        valid_dev_name(dev) && self.dev_path(dev, rel).exists()
    }
}

/// The names in a directory, sorted; an entry that cannot be read or whose name is not
/// UTF-8 is left out.
fn sorted_names(rd: std::fs::ReadDir) -> Vec<String> {
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

impl BioTap for RealFs {
    fn tap_available(&mut self, dev: &str) -> Result<(), TapError> {
        self.dev_number(dev)?;
        crate::biosense::check_available(&self.tracefs_dir())
    }

    fn tap_open(&mut self, dev: &str, params: &TapParams) -> Result<(), TapError> {
        let number = self.dev_number(dev)?;
        let tracefs = self.tracefs_dir();
        self.taps
            .open(&tracefs, &self.procfs_root, dev, number, params)
    }

    fn tap_drain(&mut self, dev: &str, batch: TapBatch<'_>) -> Result<TapDrain, TapError> {
        self.taps.drain(dev, batch)
    }

    fn tap_pause(&mut self, dev: &str) -> Result<(), TapError> {
        self.taps.pause(dev)
    }

    fn tap_close(&mut self, dev: &str) -> Result<(), TapError> {
        self.taps.close(dev)
    }
}

impl MergeSampler for RealFs {
    fn merge_sampler_open(&mut self, period_ns: u64) -> Result<(), PerfError> {
        if self.sampler.is_some() {
            return Ok(());
        }
        let symbols = crate::perf::load_symbols(&self.procfs_root)?;
        // 1 ms of CPU per sample and a daemon that drains every tick (100 ms to 1 s):
        // 32 pages hold a second of samples on a CPU busy in the kernel.
        let pages = (32 * 1_000_000 / period_ns.max(1)).clamp(8, 512) as usize;
        let s = MergePathSampler::open(
            &self.sysfs_root,
            symbols,
            SamplerParams {
                period_ns,
                buffer_pages: pages,
            },
        )?;
        self.sampler = Some(std::sync::Arc::new(std::sync::Mutex::new(s)));
        Ok(())
    }
    fn merge_sampler_enable(&mut self, on: bool) {
        if let Some(s) = &self.sampler
            && let Ok(mut s) = s.lock()
        {
            if on { s.enable() } else { s.disable() }
        }
    }
    fn merge_sampler_drain(&mut self) -> MergeSamples {
        self.sampler
            .as_ref()
            .and_then(|s| s.lock().ok().map(|mut s| s.drain(None)))
            .unwrap_or_default()
    }
}

impl HostFacts for RealFs {
    fn boot_id(&mut self) -> Option<String> {
        let procfs_root = &self.procfs_root;
        self.boot_id
            .get_or_insert_with(|| {
                crate::treefile::read_text_beneath(
                    procfs_root,
                    Path::new("sys/kernel/random/boot_id"),
                    MAX_ATTR_BYTES,
                )
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty() && s.len() <= 64)
            })
            .clone()
    }
    fn file_identity(&mut self, path: &str) -> Option<(u64, u64)> {
        // stat, never open: the path is the kernel's word, and may name anything.
        let st = rustix::fs::stat(path).ok()?;
        Some((st.st_dev, st.st_ino))
    }
    fn kernel_release(&mut self) -> Option<String> {
        crate::treefile::read_text_beneath(
            &self.procfs_root,
            Path::new("sys/kernel/osrelease"),
            MAX_ATTR_BYTES,
        )
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_fs_error_is_its_path_then_its_reason_and_the_reason_names_no_path() {
        let path = "/sys/block/sdz/dev".to_string();
        for e in [
            FsError::NotFound { path: path.clone() },
            FsError::PermissionDenied { path: path.clone() },
            FsError::InvalidValue {
                path: path.clone(),
                value: "9".into(),
            },
            FsError::Io {
                path: path.clone(),
                message: "Input/output error".into(),
            },
            FsError::Refused {
                path: path.clone(),
                reason: "outside the queue".into(),
            },
        ] {
            assert_eq!(e.to_string(), format!("{path}: {}", e.reason()));
            assert!(!e.reason().contains(&path), "{e}");
        }
    }

    /// The tap's error for a device without a `dev` file named the path twice.
    #[test]
    fn the_taps_error_for_an_unreadable_device_number_names_the_path_once() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("block/sdz")).unwrap();
        let mut fs = RealFs::new(root.path(), root.path());
        let e = fs.dev_number("sdz").unwrap_err().to_string();
        let path = root.path().join("block/sdz/dev").display().to_string();
        assert_eq!(e.matches(&path).count(), 1, "{e}");
    }
}
