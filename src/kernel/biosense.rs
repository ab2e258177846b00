//! The bio tap: a short sample of the bios queued on one device, from the tracing
//! filesystem, so that L3 (nomerges=2, merge counters at zero) is not blind.
//!
//! One private tracefs instance per tapped device (`instances/mergetune-sense-PID-MAJ_MIN`
//! under `<sysfs_root>/kernel/tracing`): its own ring buffer (`buffer_size_kb` per CPU, so
//! memory is bounded whatever the rate) and its own event switches, so the global buffer
//! and other tools' tracing are untouched. Only `block/block_bio_queue` is enabled, with
//! the filter `dev == MAJOR<<20|MINOR` evaluated in the kernel, so other devices' bios cost
//! nothing beyond the tracepoint's test. The instance's per-CPU `trace_pipe_raw` files are
//! read non-blocking (a drain never waits), a page at a time from each CPU in turn, parsed
//! by [`crate::kernel::rawtrace`] from the layouts the kernel publishes, and at most `max`
//! bios kept per drain, in time order. Where the layouts cannot be read, the instance's
//! `trace_pipe` text is read instead (the kernel formats each event for it, which costs
//! about ten times as much), each line parsed by [`crate::kernel::trace::parse_event`]. The instance is removed on close and on drop; instances
//! left by a process that is gone (SIGKILL) are removed before the first tap opens.
//! Nothing here decides when to tap: that is the daemon's duty cycle (src/daemon/sense.rs).

use crate::kernel::rawtrace::{BioLayout, PageLayout, parse_page};
use crate::kernel::trace::{Dir, EventKind, lost_events, parse_event};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub use crate::kernel::tracefs::TRACEFS_IN_SYSFS;
use crate::kernel::tracefs::sweep_dead_instances;

/// Instances of the tap are named `mergetune-sense-PID-MAJ_MIN` (the capture's are
/// `mergetune-PID`: neither cleanup takes the other's).
pub const SENSE_INSTANCE_PREFIX: &str = "mergetune-sense-";
const EVENT: &str = "events/block/block_bio_queue";
/// The most read from a `trace_pipe` in one drain: a flood cannot hold a tick.
const MAX_DRAIN_BYTES: usize = 64 << 20;
/// A line longer than this is not a block event: dropped.
const MAX_LINE_BYTES: usize = 4096;

/// One bio as it entered the block layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedBio {
    /// The event's timestamp (trace clock, or virtual time in the simulator), ns.
    pub t_ns: u64,
    pub dir: Dir,
    pub sector: u64,
    pub nr_sectors: u32,
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

/// What one drain saw besides the bios it returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapDrain {
    /// Events the ring buffer overwrote before they were read (`[LOST N EVENTS]`).
    pub lost: u64,
    /// Bios read but not kept (over `max`).
    pub dropped: u64,
}

/// An error of the bio tap. Every variant names the path (or the device, for worlds
/// without a tap).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TapError {
    #[error("{path}: this block stack has no bio tap")]
    Unsupported { path: String },
    #[error("{path}: no tracing filesystem here (not mounted?)")]
    NoTracefs { path: String },
    #[error("{path}: this kernel has no block:block_bio_queue tracepoint")]
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
    if !instances.is_dir() {
        return Err(TapError::NoTracefs {
            path: tracefs.display().to_string(),
        });
    }
    let ev = tracefs.join(EVENT);
    if !ev.is_dir() {
        return Err(TapError::NoEvent {
            path: ev.display().to_string(),
        });
    }
    let c = std::ffi::CString::new(instances.as_os_str().as_encoded_bytes()).map_err(|_| {
        TapError::Io {
            path: instances.display().to_string(),
            message: "path has a NUL byte".into(),
        }
    })?;
    // SAFETY: a valid NUL-terminated path; access(2) only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(TapError::io(&instances, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Removes tap instances whose process is gone (their ring buffers stay allocated until
/// someone does). An instance whose pid is alive is left alone. Returns what was removed.
pub fn remove_stale_instances(tracefs: &Path, procfs_root: &Path) -> Vec<PathBuf> {
    let event = EVENT.trim_start_matches("events/");
    let mut removed = Vec::new();
    for s in sweep_dead_instances(tracefs, procfs_root, sense_instance_pid, &[event]) {
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

/// One open tap: the instance, its event switched on, its `trace_pipe` open non-blocking.
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
        let ev = tap.dir.join(EVENT);
        if !ev.is_dir() {
            return Err(TapError::NoEvent {
                path: ev.display().to_string(),
            });
        }
        tap.write(
            &format!("{EVENT}/filter"),
            &format!("dev == {}", kernel_dev_t(major, minor)),
        )?;
        tap.write(&format!("{EVENT}/enable"), "1")?;
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
        matches!(self.reader, Some(Reader::Raw(_)))
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

    /// Stops recording and keeps the instance, its ring buffer, filter and pipe. With the
    /// event switched off (not only `tracing_on`) the tracepoint has no probe of ours, so a
    /// paused tap costs the device's bios nothing.
    pub fn pause(&mut self) -> Result<(), TapError> {
        self.paused = true;
        self.write(&format!("{EVENT}/enable"), "0")?;
        self.write("tracing_on", "0")
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
        if let Some(Reader::Text(t)) = self.reader.as_mut() {
            t.partial.clear();
        }
        self.write(&format!("{EVENT}/enable"), "1")?;
        self.write("tracing_on", "1")?;
        self.paused = false;
        Ok(())
    }

    fn write(&self, rel: &str, value: &str) -> Result<(), TapError> {
        write_file(&self.dir.join(rel), value)
    }

    /// Appends the bios queued since the last drain to `out`, at most `max` of them; never
    /// blocks.
    pub fn drain(&mut self, out: &mut Vec<QueuedBio>, max: usize) -> Result<TapDrain, TapError> {
        match self.reader.as_mut() {
            None => Err(TapError::NotOpen {
                path: self.dir.display().to_string(),
            }),
            Some(Reader::Text(t)) => t.drain(out, max),
            Some(Reader::Raw(r)) => r.drain(out, max),
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
        let _ = self.write(&format!("{EVENT}/enable"), "0");
        let _ = self.write("tracing_on", "0");
        // An instance with an open file cannot be removed (EBUSY): the readers go first.
        self.reader = None;
        let dir = std::mem::take(&mut self.dir);
        std::fs::remove_dir(&dir).map_err(|e| TapError::io(&dir, e))
    }
}

/// How a tap reads its instance's ring buffer.
#[derive(Debug)]
enum Reader {
    Raw(RawReader),
    Text(TextReader),
}

/// `per_cpu/cpuN/trace_pipe_raw`, one per CPU, and the layouts to parse their pages.
#[derive(Debug)]
struct RawReader {
    cpus: Vec<(PathBuf, std::fs::File)>,
    page: PageLayout,
    bio: BioLayout,
    /// One page.
    buf: Vec<u8>,
    raw: Vec<crate::kernel::rawtrace::RawBio>,
}

impl RawReader {
    /// A page from each CPU in turn until `max` bios are kept or every CPU is empty; the
    /// bios of the drain then sorted by time (each CPU's buffer is in order, the CPUs are
    /// not, and contiguity is judged in submission order).
    fn drain(&mut self, out: &mut Vec<QueuedBio>, max: usize) -> Result<TapDrain, TapError> {
        let RawReader {
            cpus,
            page,
            bio,
            buf,
            raw,
        } = self;
        let mut stats = TapDrain::default();
        let start = out.len();
        let mut total = 0usize;
        let mut empty = vec![false; cpus.len()];
        'rounds: while total < MAX_DRAIN_BYTES && !empty.iter().all(|&e| e) {
            for (i, (path, f)) in cpus.iter_mut().enumerate() {
                if empty[i] {
                    continue;
                }
                let n = match f.read(buf) {
                    Ok(0) => {
                        empty[i] = true;
                        continue;
                    }
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        empty[i] = true;
                        continue;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(TapError::io(path, e)),
                };
                total += n;
                raw.clear();
                stats.lost += parse_page(&buf[..n], page, bio, raw).lost;
                for b in raw.iter() {
                    let Some(dir) = b.dir else { continue };
                    if b.nr_sectors == 0 {
                        continue;
                    }
                    if out.len() - start >= max {
                        stats.dropped += 1;
                        continue;
                    }
                    out.push(QueuedBio {
                        t_ns: b.t_ns,
                        dir,
                        sector: b.sector,
                        nr_sectors: b.nr_sectors,
                    });
                }
                // Past `max` nothing more is read: the unread rest goes at the next
                // resume or with the instance.
                if out.len() - start >= max {
                    break 'rounds;
                }
            }
        }
        out[start..].sort_by_key(|b| b.t_ns);
        Ok(stats)
    }
}

/// `trace_pipe`, formatted by the kernel.
#[derive(Debug)]
struct TextReader {
    path: PathBuf,
    pipe: std::fs::File,
    /// The tail of the last read that did not end in a newline.
    partial: Vec<u8>,
    buf: Vec<u8>,
}

impl TextReader {
    fn drain(&mut self, out: &mut Vec<QueuedBio>, max: usize) -> Result<TapDrain, TapError> {
        let mut stats = TapDrain::default();
        let mut kept = 0usize;
        let mut total = 0usize;
        // Past `max` nothing more is read: formatting an event for trace_pipe and parsing
        // it is most of the tap's cost, and the unread rest goes with the instance.
        while total < MAX_DRAIN_BYTES && kept < max {
            let n = match self.pipe.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(TapError::io(&self.path, e)),
            };
            total += n;
            let mut chunk = &self.buf[..n];
            while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
                let line: &[u8] = if self.partial.is_empty() {
                    &chunk[..i]
                } else {
                    self.partial.extend_from_slice(&chunk[..i]);
                    &self.partial
                };
                take_line(line, out, max, &mut kept, &mut stats);
                self.partial.clear();
                chunk = &chunk[i + 1..];
            }
            if self.partial.len() + chunk.len() <= MAX_LINE_BYTES {
                self.partial.extend_from_slice(chunk);
            } else {
                self.partial.clear();
            }
        }
        Ok(stats)
    }
}

fn open_nonblocking(path: &Path) -> Result<std::fs::File, TapError> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| TapError::io(path, e))
}

/// A tracefs layout file, read with reads of 64 KiB. `events/header_page` answers only the
/// first read of an open file, cut to its size, and EOF after that: `read_to_string`'s
/// first 32-byte probe would get a third of it.
fn read_text(path: &Path) -> Result<String, TapError> {
    let mut f = std::fs::File::open(path).map_err(|e| TapError::io(path, e))?;
    let mut buf = vec![0u8; 64 << 10];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(TapError::io(path, e)),
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|_| TapError::Io {
        path: path.display().to_string(),
        message: "not UTF-8".into(),
    })
}

impl Reader {
    fn raw(dir: &Path) -> Result<Reader, TapError> {
        let layout_err = |path: &Path, e: crate::kernel::rawtrace::LayoutError| TapError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        let hp = dir.join("events/header_page");
        let page = PageLayout::parse(&read_text(&hp)?, &hp.display().to_string())
            .map_err(|e| layout_err(&hp, e))?;
        let fmt = dir.join(EVENT).join("format");
        let bio = BioLayout::parse(&read_text(&fmt)?, &fmt.display().to_string())
            .map_err(|e| layout_err(&fmt, e))?;
        let per_cpu = dir.join("per_cpu");
        let mut names: Vec<String> = std::fs::read_dir(&per_cpu)
            .map_err(|e| TapError::io(&per_cpu, e))?
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with("cpu"))
            .collect();
        names.sort();
        let mut cpus = Vec::with_capacity(names.len());
        for n in names {
            let path = per_cpu.join(n).join("trace_pipe_raw");
            let f = open_nonblocking(&path)?;
            cpus.push((path, f));
        }
        if cpus.is_empty() {
            return Err(TapError::Io {
                path: per_cpu.display().to_string(),
                message: "no CPUs".into(),
            });
        }
        Ok(Reader::Raw(RawReader {
            cpus,
            buf: vec![0; page.page_size()],
            page,
            bio,
            raw: Vec::new(),
        }))
    }

    fn text(dir: &Path) -> Result<Reader, TapError> {
        let path = dir.join("trace_pipe");
        Ok(Reader::Text(TextReader {
            pipe: open_nonblocking(&path)?,
            path,
            partial: Vec::new(),
            buf: vec![0; 64 << 10],
        }))
    }
}

fn take_line(
    line: &[u8],
    out: &mut Vec<QueuedBio>,
    max: usize,
    kept: &mut usize,
    stats: &mut TapDrain,
) {
    let Ok(line) = std::str::from_utf8(line) else {
        return;
    };
    if let Some(n) = lost_events(line) {
        stats.lost += n;
        return;
    }
    let Ok(ev) = parse_event(line) else {
        return;
    };
    if ev.kind != EventKind::Queue {
        return;
    }
    let (Some(dir), Some((sector, nr_sectors))) = (ev.dir, ev.extent) else {
        return;
    };
    if nr_sectors == 0 {
        // A flush without data: nothing to merge.
        return;
    }
    if *kept >= max {
        stats.dropped += 1;
        return;
    }
    *kept += 1;
    out.push(QueuedBio {
        t_ns: ev.t_ns,
        dir,
        sector,
        nr_sectors,
    });
}

impl Drop for BioTap {
    fn drop(&mut self) {
        if let Err(e) = self.shut() {
            tracing::warn!("cannot remove the bio tap's tracefs instance: {e}");
        }
    }
}

/// The taps of a real machine, by device name: what [`crate::kernel::blockfs::RealFs`]
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

    pub fn drain(
        &mut self,
        dev: &str,
        out: &mut Vec<QueuedBio>,
        max: usize,
    ) -> Result<TapDrain, TapError> {
        match self.open.get_mut(dev) {
            Some(t) => t.drain(out, max),
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
    fn lines_become_bios_lost_events_are_counted_and_max_is_kept() {
        let mut out = Vec::new();
        let mut stats = TapDrain::default();
        let mut kept = 0;
        for l in [
            "fio-8916 [001] ..... 344.612387: block_bio_queue: 7,0 WS 0 + 8 [fio]",
            "fio-8916 [001] ..... 344.612388: block_bio_queue: 7,0 R 8 + 8 [fio]",
            "CPU:1 [LOST 12 EVENTS]",
            "fio-8916 [001] ..... 344.612389: block_bio_backmerge: 7,0 WS 8 + 8 [fio]",
            "garbage",
            "fio-8916 [001] ..... 344.612390: block_bio_queue: 7,0 FWS 0 + 0 [fio]",
            "fio-8916 [001] ..... 344.612391: block_bio_queue: 7,0 W 16 + 8 [fio]",
        ] {
            take_line(l.as_bytes(), &mut out, 2, &mut kept, &mut stats);
        }
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].dir, Dir::Write);
        assert_eq!(
            (out[1].dir, out[1].sector, out[1].nr_sectors),
            (Dir::Read, 8, 8)
        );
        assert_eq!(
            stats,
            TapDrain {
                lost: 12,
                dropped: 1
            }
        );
    }

    #[test]
    fn stale_tap_instances_of_dead_pids_go_live_ones_and_others_stay() {
        let root = tempfile::tempdir().unwrap();
        let tracefs = root.path().join("tracing");
        let procfs = root.path().join("proc");
        for n in [
            "mergetune-sense-111-7_0",
            "mergetune-sense-222-7_0",
            "mergetune-111",
            "perf-111",
        ] {
            std::fs::create_dir_all(tracefs.join("instances").join(n)).unwrap();
        }
        std::fs::create_dir_all(procfs.join("222")).unwrap();
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
        std::fs::create_dir_all(tracefs.join(EVENT)).unwrap();
        assert_eq!(check_available(&tracefs), Ok(()));
    }
}
