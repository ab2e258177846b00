//! The bio tap: a short sample of the requests made and issued on one device, from the
//! tracing filesystem, so that L3 (nomerges=2, merge counters at zero) is not blind.
//!
//! What the kernel merges is a bio into a request that has not been issued yet: the last
//! one in the submitter's plug (`blk_attempt_plug_merge`), or one still in the scheduler's
//! or the software queue (the elevator's hash and sort lookups, `blk_bio_list_merge` for
//! none). At nomerges=2 every bio becomes a request of its own (`block_getrq`, after the
//! split to the queue's limits) and leaves the queue at `block_rq_issue`; so the tap records
//! those two events, and the pure counting (`logic::sense`) calls a new request mergeable
//! when a request made and not yet issued ends where it starts (back) or starts where it
//! ends (front). A bio that merely continues one already dispatched (a sequential stream at
//! queue depth 1, O_DIRECT on a loop device) is not: the kernel does not merge it either.
//!
//! One private tracefs instance per tapped device (`instances/mergetune-sense-PID-MAJ_MIN`
//! under `<sysfs_root>/kernel/tracing`): its own ring buffer (`buffer_size_kb` per CPU, so
//! memory is bounded whatever the rate) and its own event switches, so the global buffer
//! and other tools' tracing are untouched. Only `block/block_getrq`,
//! `block/block_rq_issue` and the two bio merge events (which never fire at nomerges=2; below
//! it, as in a dry run, they are the bios that merged and so made no request) are enabled,
//! each with the filter `dev == MAJOR<<20|MINOR`
//! evaluated in the kernel, so other devices' I/O costs nothing beyond the tracepoints'
//! test. The instance's per-CPU `trace_pipe_raw` files are read non-blocking (a drain never
//! waits), a page at a time from each CPU in turn, parsed by [`crate::rawtrace`] from the
//! layouts the kernel publishes, and at most `max` requests made kept per drain, in time
//! order. Where the layouts cannot be read, the instance's `trace_pipe` text is read
//! instead (the kernel formats each event for it, which costs about ten times as much),
//! each line parsed by [`crate::trace::parse_event`].
//! Both readers are in `biosense/reader.rs`; this file holds the instance's life. The
//! instance is removed on close and on drop; instances left by a process that is gone
//! (SIGKILL) are removed before the first tap opens.
//! Nothing here decides when to tap: that is the daemon's duty cycle (crates/daemon/src/sense.rs).

use crate::trace::{Dir, EventKind};
use reader::Reader;
use std::collections::BTreeMap;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

mod reader;

use crate::tracefs::sweep_dead_instances;

/// Instances of the tap are named `mergetune-sense-PID-MAJ_MIN` (the capture's are
/// `mergetune-PID`: neither cleanup takes the other's).
pub const SENSE_INSTANCE_PREFIX: &str = "mergetune-sense-";
/// The tap's events, under the instance: a request made for a bio, a request issued, a bio
/// merged into a request (back or front: none at nomerges=2, so at L3 they cost nothing;
/// below L3, as in a dry run, they are the bios that merged and made no request).
pub(crate) const EVENTS: [&str; 4] = [
    "events/block/block_getrq",
    "events/block/block_rq_issue",
    "events/block/block_bio_backmerge",
    "events/block/block_bio_frontmerge",
];
/// Instances of an older tap enabled this one: switched off before a stale one is removed.
const OLD_EVENT: &str = "events/block/block_bio_queue";

/// One event of the tap: a request made for a bio ([`EventKind::GetRq`]; at nomerges=2
/// one per bio, after the split), a request issued to the driver ([`EventKind::Issue`]),
/// or a bio merged into a waiting request ([`EventKind::BackMerge`],
/// [`EventKind::FrontMerge`]; never at nomerges=2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapEvent {
    /// The event's timestamp (trace clock, or virtual time in the simulator), ns.
    pub t_ns: u64,
    /// [`EventKind::GetRq`], [`EventKind::Issue`], [`EventKind::BackMerge`] or
    /// [`EventKind::FrontMerge`]; no other kind is recorded.
    pub kind: EventKind,
    pub dir: Dir,
    pub sector: u64,
    pub nr_sectors: u32,
}

impl TapEvent {
    /// Whether this is a bio seen (a request made for it, or its merge): what a sample's
    /// size counts.
    pub fn counts_as_bio(&self) -> bool {
        counts_as_bio(self.kind)
    }
}

/// How the tap's kernel side is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapParams {
    /// The ring buffer per CPU, KiB.
    pub buffer_kb: u64,
    /// How the ring buffer is read.
    pub read: TapRead,
}

impl TapParams {
    /// `buffer_kb` per CPU, read the cheap way.
    pub fn new(buffer_kb: u64) -> TapParams {
        TapParams {
            buffer_kb,
            read: TapRead::Pages,
        }
    }
}

/// How a tap reads its ring buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapRead {
    /// The binary per-CPU pages, falling back to the text where their layouts cannot be
    /// read: what the daemon uses.
    Pages,
    /// Only `trace_pipe`'s formatted text (the benchmark's reference).
    Text,
}

/// What a drain is asked for: where its events go and how many the caller still wants. One
/// argument, so that every world's `tap_drain` (real, recorded, replayed, simulated, the
/// tests') takes the same thing.
#[derive(Debug)]
pub struct TapBatch<'a> {
    /// The caller's buffer: the drain appends to it, in time order.
    pub out: &'a mut Vec<TapEvent>,
    /// How many requests made the caller still wants: the drain keeps no more (with the
    /// issues read among them) and counts those past it as dropped.
    pub max: usize,
}

impl<'a> TapBatch<'a> {
    /// Into `out`, at most `max` requests made.
    pub fn new(out: &'a mut Vec<TapEvent>, max: usize) -> TapBatch<'a> {
        TapBatch { out, max }
    }
}

/// What one drain saw besides the bios it returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapDrain {
    /// Events the ring buffer overwrote before they were read (`[LOST N EVENTS]`).
    pub lost: u64,
    /// Requests made that were read but not kept (over `max`, or past the point up to
    /// which every CPU's events were read, so that their order is known).
    pub dropped: u64,
}

/// An error of the bio tap. Every variant names the path (or the device, for worlds
/// without a tap). Serialisable: a recording keeps the tap's answers, so that a replay
/// fails the same way (`daemon::record`).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TapError {
    #[error("{path}: this block stack has no bio tap")]
    Unsupported { path: String },
    #[error("{path}: no tracing filesystem here (not mounted?)")]
    NoTracefs { path: String },
    /// The tracing filesystem is there but this user may not enter it (mounted mode 0700,
    /// root's): a permission, not an absence.
    #[error("{path}: the tracing filesystem is mounted but only root may use it ({message})")]
    NoAccess { path: String, message: String },
    #[error(
        "{path}: this kernel has no such block tracepoint (the tap needs block_getrq and block_rq_issue)"
    )]
    NoEvent { path: String },
    #[error("{path}: not writable ({message})")]
    NotWritable { path: String, message: String },
    #[error("{path}: the tap is not open")]
    NotOpen { path: String },
    #[error("{path}: {message}")]
    Io { path: String, message: String },
}

impl TapError {
    fn io(path: &Path, e: std::io::Error) -> TapError {
        let path = path.display().to_string();
        match e.kind() {
            ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => TapError::NotWritable {
                path,
                message: e.to_string(),
            },
            _ => TapError::Io {
                path,
                message: e.to_string(),
            },
        }
    }
}

/// The pid a tap instance is named after, if `name` is one.
pub fn sense_instance_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(SENSE_INSTANCE_PREFIX)?;
    rest.split('-').next()?.parse().ok()
}

/// The instance name of this process's tap on `(major, minor)`.
pub fn instance_name(major: u32, minor: u32) -> String {
    format!(
        "{SENSE_INSTANCE_PREFIX}{}-{major}_{minor}",
        std::process::id()
    )
}

/// The kernel's `dev_t` as tracepoints print and filter it (`MAJOR << 20 | MINOR`).
pub fn kernel_dev_t(major: u32, minor: u32) -> u64 {
    (u64::from(major) << 20) | u64::from(minor)
}

/// Parses `MAJ:MIN` (sysfs `dev`).
pub fn parse_dev_number(text: &str) -> Option<(u32, u32)> {
    let (a, b) = text.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn write_file(path: &Path, value: &str) -> Result<(), TapError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|e| TapError::io(path, e))?;
    f.write_all(value.as_bytes())
        .map_err(|e| TapError::io(path, e))
}

/// Whether a tap can be opened under `tracefs`: mounted, with the tracepoint, and the
/// instances directory writable (a read-only mount, as a unit without
/// `ReadWritePaths=/sys/kernel/tracing` gives, fails here). Creates nothing.
pub fn check_available(tracefs: &Path) -> Result<(), TapError> {
    let instances = tracefs.join("instances");
    match std::fs::metadata(&instances) {
        Ok(m) if m.is_dir() => {}
        // A mode 0700 mount stats as "permission denied" for anyone but root, which
        // `is_dir` took for "not there".
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            return Err(TapError::NoAccess {
                path: tracefs.display().to_string(),
                message: e.to_string(),
            });
        }
        _ => {
            return Err(TapError::NoTracefs {
                path: tracefs.display().to_string(),
            });
        }
    }
    for ev in EVENTS {
        let ev = tracefs.join(ev);
        if !ev.is_dir() {
            return Err(TapError::NoEvent {
                path: ev.display().to_string(),
            });
        }
    }
    let c = std::ffi::CString::new(instances.as_os_str().as_encoded_bytes()).map_err(|_| {
        TapError::Io {
            path: instances.display().to_string(),
            message: "path has a NUL byte".into(),
        }
    })?;
    rustix::fs::access(c.as_c_str(), rustix::fs::Access::WRITE_OK)
        .map_err(|e| TapError::io(&instances, std::io::Error::from(e)))
}

/// Removes tap instances whose process is gone (their ring buffers stay allocated until
/// someone does). An instance whose pid is alive is left alone. Returns what was removed.
pub fn remove_stale_instances(tracefs: &Path, procfs_root: &Path) -> Vec<PathBuf> {
    let events = [EVENTS[0], EVENTS[1], EVENTS[2], EVENTS[3], OLD_EVENT]
        .map(|e| e.trim_start_matches("events/"));
    let mut removed = Vec::new();
    for s in sweep_dead_instances(tracefs, procfs_root, sense_instance_pid, &events) {
        match s.removed {
            Ok(()) => removed.push(s.dir),
            Err(err) => tracing::warn!(
                "cannot remove stale tracefs instance {}: {err}",
                s.dir.display()
            ),
        }
    }
    removed
}

/// Whether an event of `kind` is a bio seen (see [`TapEvent::counts_as_bio`]).
pub fn counts_as_bio(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::GetRq | EventKind::BackMerge | EventKind::FrontMerge
    )
}

/// One open tap: the instance, its events switched on, its readers open non-blocking.
/// Between two samples it can be paused (event off, instance kept) so that the next sample
/// does not pay for creating and removing the instance.
#[derive(Debug)]
pub struct BioTap {
    dir: PathBuf,
    reader: Option<Reader>,
    /// What the instance was set up for: a resume reuses it only for the same.
    number: (u32, u32),
    params: TapParams,
    paused: bool,
}

impl BioTap {
    /// Creates the instance for `(major, minor)` under `tracefs` and starts tracing.
    pub fn open(
        tracefs: &Path,
        (major, minor): (u32, u32),
        params: &TapParams,
    ) -> Result<BioTap, TapError> {
        check_available(tracefs)?;
        let dir = tracefs.join("instances").join(instance_name(major, minor));
        if dir.exists() {
            // Ours, left by an earlier tap of this process that could not be removed.
            let _ = std::fs::remove_dir(&dir);
        }
        std::fs::create_dir(&dir).map_err(|e| TapError::io(&dir, e))?;
        // From here the instance exists: dropping `tap` on any error removes it.
        let mut tap = BioTap {
            dir,
            reader: None,
            number: (major, minor),
            params: *params,
            paused: false,
        };
        tap.write("tracing_on", "0")?;
        tap.write("buffer_size_kb", &params.buffer_kb.to_string())?;
        for ev in EVENTS {
            let dir = tap.dir.join(ev);
            if !dir.is_dir() {
                return Err(TapError::NoEvent {
                    path: dir.display().to_string(),
                });
            }
            tap.write(
                &format!("{ev}/filter"),
                &format!("dev == {}", kernel_dev_t(major, minor)),
            )?;
        }
        tap.enable("1")?;
        let raw = match params.read {
            TapRead::Pages => Reader::raw(&tap.dir),
            TapRead::Text => Err(TapError::Unsupported {
                path: tap.dir.display().to_string(),
            }),
        };
        let reader = match raw {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("{}: reading trace_pipe text: {e}", tap.dir.display());
                Reader::text(&tap.dir)?
            }
        };
        tap.reader = Some(reader);
        tap.write("tracing_on", "1")?;
        Ok(tap)
    }

    /// Whether the tap reads the binary per-CPU pages (else the formatted text).
    pub fn reads_raw_pages(&self) -> bool {
        self.reader.as_ref().is_some_and(Reader::is_raw)
    }

    /// The instance directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether [`BioTap::resume`] gives what a fresh [`BioTap::open`] with these arguments
    /// would.
    pub fn fits(&self, number: (u32, u32), params: &TapParams) -> bool {
        self.number == number && self.params == *params
    }

    /// Stops recording and keeps the instance, its ring buffer, filters and readers. With
    /// the events switched off (not only `tracing_on`) the tracepoints have no probe of
    /// ours, so a paused tap costs the device's I/O nothing.
    pub fn pause(&mut self) -> Result<(), TapError> {
        self.paused = true;
        self.enable("0")?;
        self.write("tracing_on", "0")
    }

    /// Switches the tap's events on ("1") or off ("0").
    fn enable(&self, value: &str) -> Result<(), TapError> {
        for ev in EVENTS {
            self.write(&format!("{ev}/enable"), value)?;
        }
        Ok(())
    }

    /// Starts recording again after [`BioTap::pause`], as a fresh open would: what the last
    /// sample left unread is thrown away (truncating the instance's `trace` clears its ring
    /// buffer; reading it would cost the formatting the read cap saves).
    pub fn resume(&mut self) -> Result<(), TapError> {
        let trace = self.dir.join("trace");
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&trace)
            .map_err(|e| TapError::io(&trace, e))?;
        if let Some(r) = self.reader.as_mut() {
            r.restart();
        }
        self.enable("1")?;
        self.write("tracing_on", "1")?;
        self.paused = false;
        Ok(())
    }

    fn write(&self, rel: &str, value: &str) -> Result<(), TapError> {
        write_file(&self.dir.join(rel), value)
    }

    /// Appends the events recorded since the last drain to the batch, in time order;
    /// never blocks.
    pub fn drain(&mut self, batch: TapBatch<'_>) -> Result<TapDrain, TapError> {
        match self.reader.as_mut() {
            None => Err(TapError::NotOpen {
                path: self.dir.display().to_string(),
            }),
            Some(r) => r.drain(batch),
        }
    }

    /// Stops tracing and removes the instance.
    pub fn close(mut self) -> Result<(), TapError> {
        self.shut()
    }

    fn shut(&mut self) -> Result<(), TapError> {
        if self.dir.as_os_str().is_empty() {
            return Ok(());
        }
        let _ = self.enable("0");
        let _ = self.write("tracing_on", "0");
        // An instance with an open file cannot be removed (EBUSY): the readers go first.
        self.reader = None;
        let dir = std::mem::take(&mut self.dir);
        std::fs::remove_dir(&dir).map_err(|e| TapError::io(&dir, e))
    }
}

impl Drop for BioTap {
    fn drop(&mut self) {
        if let Err(e) = self.shut() {
            tracing::warn!("cannot remove the bio tap's tracefs instance: {e}");
        }
    }
}

/// The taps of a real machine, by device name: what [`crate::blockfs::RealFs`]
/// holds. A clone owns no tap (the original's instances are the original's to remove).
#[derive(Debug, Default)]
pub struct RealTaps {
    open: BTreeMap<String, BioTap>,
    /// Stale instances were looked for (once per process).
    cleaned: bool,
}

impl Clone for RealTaps {
    fn clone(&self) -> Self {
        RealTaps::default()
    }
}

impl RealTaps {
    pub fn is_open(&self, dev: &str) -> bool {
        self.open.contains_key(dev)
    }

    /// Whether the open tap of `dev` reads binary pages (None: no tap open).
    pub fn reads_raw_pages(&self, dev: &str) -> Option<bool> {
        self.open.get(dev).map(BioTap::reads_raw_pages)
    }

    /// Opens (or reopens) the tap of `dev`, whose device number is `number`.
    pub fn open(
        &mut self,
        tracefs: &Path,
        procfs_root: &Path,
        dev: &str,
        number: (u32, u32),
        params: &TapParams,
    ) -> Result<(), TapError> {
        if !self.cleaned {
            self.cleaned = true;
            for dir in remove_stale_instances(tracefs, procfs_root) {
                tracing::info!(
                    "removed stale tracefs instance {} (its process is gone)",
                    dir.display()
                );
            }
        }
        if let Some(mut old) = self.open.remove(dev) {
            if old.is_paused() && old.fits(number, params) {
                match old.resume() {
                    Ok(()) => {
                        self.open.insert(dev.to_string(), old);
                        return Ok(());
                    }
                    Err(e) => tracing::debug!("{dev}: cannot resume the bio tap, reopening: {e}"),
                }
            }
            let _ = old.close();
        }
        let tap = BioTap::open(tracefs, number, params)?;
        self.open.insert(dev.to_string(), tap);
        Ok(())
    }

    pub fn drain(&mut self, dev: &str, batch: TapBatch<'_>) -> Result<TapDrain, TapError> {
        match self.open.get_mut(dev) {
            Some(t) => t.drain(batch),
            None => Err(TapError::NotOpen {
                path: dev.to_string(),
            }),
        }
    }

    /// Pauses the tap of `dev` (kept for the next [`RealTaps::open`]); none open: nothing.
    pub fn pause(&mut self, dev: &str) -> Result<(), TapError> {
        let Some(t) = self.open.get_mut(dev) else {
            return Ok(());
        };
        let paused = t.pause();
        if paused.is_err() {
            // A tap that cannot be switched off is not kept recording.
            let _ = self.close(dev);
        }
        paused
    }

    pub fn close(&mut self, dev: &str) -> Result<(), TapError> {
        match self.open.remove(dev) {
            Some(t) => t.close(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_names_carry_pid_and_device() {
        let n = instance_name(7, 3);
        assert!(n.starts_with(SENSE_INSTANCE_PREFIX), "{n}");
        assert!(n.ends_with("-7_3"), "{n}");
        assert_eq!(sense_instance_pid(&n), Some(std::process::id()));
        assert_eq!(sense_instance_pid("mergetune-sense-42-8_0"), Some(42));
        // The capture's instances are not the tap's.
        assert_eq!(sense_instance_pid("mergetune-42"), None);
        assert_eq!(sense_instance_pid("mergetune-sense-x-8_0"), None);
    }

    #[test]
    fn device_numbers_are_packed_as_the_kernel_prints_them() {
        assert_eq!(kernel_dev_t(7, 0), 7 << 20);
        assert_eq!(kernel_dev_t(259, 3), (259 << 20) | 3);
        assert_eq!(parse_dev_number("7:12\n"), Some((7, 12)));
        assert_eq!(parse_dev_number("7"), None);
    }

    #[test]
    fn stale_tap_instances_of_dead_pids_go_live_ones_and_others_stay() {
        let (_root, tracefs, procfs) = crate::tracefs_fixture::tracefs_and_procfs(
            &[
                "mergetune-sense-111-7_0",
                "mergetune-sense-222-7_0",
                "mergetune-111",
                "perf-111",
            ],
            &[222],
        );
        let removed = remove_stale_instances(&tracefs, &procfs);
        assert_eq!(
            removed,
            vec![tracefs.join("instances/mergetune-sense-111-7_0")]
        );
        for n in ["mergetune-sense-222-7_0", "mergetune-111", "perf-111"] {
            assert!(tracefs.join("instances").join(n).exists(), "{n}");
        }
    }

    #[test]
    fn no_tracefs_and_no_event_are_told_apart() {
        let root = tempfile::tempdir().unwrap();
        let tracefs = root.path().join("tracing");
        assert!(matches!(
            check_available(&tracefs),
            Err(TapError::NoTracefs { .. })
        ));
        std::fs::create_dir_all(tracefs.join("instances")).unwrap();
        assert!(matches!(
            check_available(&tracefs),
            Err(TapError::NoEvent { .. })
        ));
        std::fs::create_dir_all(tracefs.join(EVENTS[0])).unwrap();
        assert!(matches!(
            check_available(&tracefs),
            Err(TapError::NoEvent { path }) if path.ends_with("block_rq_issue")
        ));
        for ev in &EVENTS[1..] {
            std::fs::create_dir_all(tracefs.join(ev)).unwrap();
        }
        assert_eq!(check_available(&tracefs), Ok(()));
    }
}
