//! Reading a tap's ring buffer, the two ways the kernel offers: the per-CPU binary pages
//! (`per_cpu/cpuN/trace_pipe_raw`, parsed by [`crate::rawtrace`] from the layouts
//! in `events/header_page` and the event's `format`), or the `trace_pipe` text the kernel
//! formats event by event (about ten times the cost; the fallback where the layouts cannot
//! be read). Both are read non-blocking and bounded: a drain never waits, keeps at most
//! `max` requests made (and the issues read with them, at most [`MAX_EVENTS_PER_REQUEST`]
//! events per request kept) and reads at most [`MAX_DRAIN_BYTES`], so a flood cannot hold
//! a tick. Whether a request is mergeable depends on the order of events across CPUs (an
//! issue on one CPU before a request made on another), so a drain that stops at `max` keeps
//! only the events up to the time every CPU it stopped reading had reached, and the reader
//! is then full: it reads nothing more until the tap resumes (the sample is complete).

use super::{EVENTS, TapBatch, TapDrain, TapError, TapEvent, counts_as_bio};
use crate::rawtrace::{BioLayout, PageLayout, parse_page};
use crate::trace::{EventKind, lost_events, parse_event};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The most read from a tap in one drain: a flood cannot hold a tick.
const MAX_DRAIN_BYTES: usize = 64 << 20;
/// A line longer than this is not a block event: dropped.
const MAX_LINE_BYTES: usize = 4096;
/// The most events a drain keeps per request made it may keep (plus a page's worth):
/// issues come one per request, so this bounds memory when a tap sees mostly issues.
const MAX_EVENTS_PER_REQUEST: usize = 4;
const EVENT_SLACK: usize = 1024;

/// The tap's events: what the readers keep.
fn tapped(kind: EventKind) -> bool {
    kind == EventKind::Issue || counts_as_bio(kind)
}

/// One drain: where its events go, what it counts of them against `max`, and what it lost
/// or dropped.
#[derive(Debug)]
struct Drain<'a> {
    out: &'a mut Vec<TapEvent>,
    max: usize,
    requests: usize,
    events: usize,
    stats: TapDrain,
}

impl<'a> Drain<'a> {
    fn new(TapBatch { out, max }: TapBatch<'a>) -> Drain<'a> {
        Drain {
            out,
            max,
            requests: 0,
            events: 0,
            stats: TapDrain::default(),
        }
    }

    /// Keeps `ev` if the drain may; counts it if so (and a request made that may not as
    /// dropped).
    fn keep(&mut self, ev: TapEvent) {
        let request = counts_as_bio(ev.kind);
        if self.full() {
            if request {
                self.stats.dropped += 1;
            }
            return;
        }
        if request {
            self.requests += 1;
        }
        self.events += 1;
        self.out.push(ev);
    }

    fn full(&self) -> bool {
        self.requests >= self.max
            || self.events >= self.max.saturating_mul(MAX_EVENTS_PER_REQUEST) + EVENT_SLACK
    }
}

/// How a tap reads its instance's ring buffer.
#[derive(Debug)]
pub(super) struct Reader {
    way: Way,
    /// A drain stopped at its cap: nothing more is read until the tap resumes.
    full: bool,
}

#[derive(Debug)]
enum Way {
    Raw(RawReader),
    Text(TextReader),
}

/// `per_cpu/cpuN/trace_pipe_raw`, one per CPU, and the layouts to parse their pages.
#[derive(Debug)]
struct RawReader {
    cpus: Vec<(PathBuf, std::fs::File)>,
    page: PageLayout,
    /// The layouts of the tap's events.
    events: Vec<BioLayout>,
    /// One page.
    buf: Vec<u8>,
    raw: Vec<crate::rawtrace::RawBio>,
}

impl RawReader {
    /// A page from each CPU in turn until the cap or every CPU is empty; the events of the
    /// drain then sorted by time (each CPU's buffer is in order, the CPUs are not).
    /// Whether the drain stopped at its cap.
    fn drain(&mut self, d: &mut Drain<'_>) -> Result<bool, TapError> {
        let RawReader {
            cpus,
            page,
            events,
            buf,
            raw,
        } = self;
        let mut full = false;
        let start = d.out.len();
        let mut total = 0usize;
        let mut empty = vec![false; cpus.len()];
        // The time of the last record read from each CPU.
        let mut reached: Vec<Option<u64>> = vec![None; cpus.len()];
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
                d.stats.lost += parse_page(&buf[..n], page, events, raw).lost;
                for b in raw.iter() {
                    reached[i] = Some(b.t_ns);
                    let Some(dir) = b.dir else { continue };
                    if b.nr_sectors == 0 || !tapped(b.kind) {
                        continue;
                    }
                    d.keep(TapEvent {
                        t_ns: b.t_ns,
                        kind: b.kind,
                        dir,
                        sector: b.sector,
                        nr_sectors: b.nr_sectors,
                    });
                }
                // Past the cap nothing more is read: the unread rest goes at the next
                // resume or with the instance.
                if d.full() {
                    full = true;
                    break 'rounds;
                }
            }
        }
        let out = &mut *d.out;
        out[start..].sort_by_key(|b| b.t_ns);
        if full || total >= MAX_DRAIN_BYTES {
            // Events of a CPU read further than another that still had some are cut there:
            // what the other CPU did before them is unknown.
            let upto = (0..cpus.len())
                .filter(|&i| !empty[i])
                .filter_map(|i| reached[i])
                .min();
            if let Some(upto) = upto {
                let keep = start + out[start..].partition_point(|b| b.t_ns <= upto);
                d.stats.dropped += out[keep..].iter().filter(|b| b.counts_as_bio()).count() as u64;
                out.truncate(keep);
            }
            full = true;
        }
        Ok(full)
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
    /// Lines until the cap or the pipe is empty; whether the drain stopped at its cap.
    fn drain(&mut self, d: &mut Drain<'_>) -> Result<bool, TapError> {
        let mut total = 0usize;
        // Past `max` nothing more is read: formatting an event for trace_pipe and parsing
        // it is most of the tap's cost, and the unread rest goes with the instance. The
        // text is in time order across CPUs already.
        while total < MAX_DRAIN_BYTES && !d.full() {
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
                take_line(line, d);
                self.partial.clear();
                chunk = &chunk[i + 1..];
            }
            if self.partial.len() + chunk.len() <= MAX_LINE_BYTES {
                self.partial.extend_from_slice(chunk);
            } else {
                self.partial.clear();
            }
        }
        Ok(d.full() || total >= MAX_DRAIN_BYTES)
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
    pub(super) fn raw(dir: &Path) -> Result<Reader, TapError> {
        // The layout error names the file too: said once, by the tap's error.
        let layout_err = |path: &Path, e: crate::rawtrace::LayoutError| TapError::Io {
            path: path.display().to_string(),
            message: e.without_file(),
        };
        let hp = dir.join("events/header_page");
        let page = PageLayout::parse(&read_text(&hp)?, &hp.display().to_string())
            .map_err(|e| layout_err(&hp, e))?;
        let mut events = Vec::with_capacity(EVENTS.len());
        for ev in EVENTS {
            let fmt = dir.join(ev).join("format");
            events.push(
                BioLayout::parse(&read_text(&fmt)?, &fmt.display().to_string())
                    .map_err(|e| layout_err(&fmt, e))?,
            );
        }
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
        Ok(Reader::of(Way::Raw(RawReader {
            cpus,
            buf: vec![0; page.page_size()],
            page,
            events,
            raw: Vec::new(),
        })))
    }

    pub(super) fn text(dir: &Path) -> Result<Reader, TapError> {
        let path = dir.join("trace_pipe");
        Ok(Reader::of(Way::Text(TextReader {
            pipe: open_nonblocking(&path)?,
            path,
            partial: Vec::new(),
            buf: vec![0; 64 << 10],
        })))
    }

    fn of(way: Way) -> Reader {
        Reader { way, full: false }
    }

    pub(super) fn is_raw(&self) -> bool {
        matches!(self.way, Way::Raw(_))
    }

    /// Appends the events read since the last drain to the batch; never blocks.
    pub(super) fn drain(&mut self, batch: TapBatch<'_>) -> Result<TapDrain, TapError> {
        let mut d = Drain::new(batch);
        if self.full {
            return Ok(d.stats);
        }
        self.full = match &mut self.way {
            Way::Raw(r) => r.drain(&mut d)?,
            Way::Text(t) => t.drain(&mut d)?,
        };
        Ok(d.stats)
    }

    /// Starts a new sample over a cleared ring buffer: not full, and without the text
    /// tail it will never complete (pages have none).
    pub(super) fn restart(&mut self) {
        self.full = false;
        if let Way::Text(t) = &mut self.way {
            t.partial.clear();
        }
    }
}

fn take_line(line: &[u8], d: &mut Drain<'_>) {
    let Ok(line) = std::str::from_utf8(line) else {
        return;
    };
    if let Some(n) = lost_events(line) {
        d.stats.lost += n;
        return;
    }
    let Ok(ev) = parse_event(line) else {
        return;
    };
    if !tapped(ev.kind) {
        return;
    }
    let (Some(dir), Some((sector, nr_sectors))) = (ev.dir, ev.extent) else {
        return;
    };
    if nr_sectors == 0 {
        // A flush without data: nothing to merge.
        return;
    }
    d.keep(TapEvent {
        t_ns: ev.t_ns,
        kind: ev.kind,
        dir,
        sector,
        nr_sectors,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Dir;

    #[test]
    fn a_bad_layout_file_is_named_once() {
        // Not "PATH: PATH: no field ...": the layout error names the file already.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("events")).unwrap();
        let hp = dir.path().join("events/header_page");
        std::fs::write(&hp, "nothing of a page header\n").unwrap();
        let Err(e) = Reader::raw(dir.path()) else {
            panic!("a header_page with no fields was taken")
        };
        let text = e.to_string();
        assert_eq!(text.matches(&hp.display().to_string()).count(), 1, "{text}");
        assert!(text.contains("no field"), "{text}");
    }

    #[test]
    fn request_and_issue_lines_become_events_lost_events_are_counted_and_max_is_kept() {
        let mut out = Vec::new();
        let mut d = Drain::new(TapBatch::new(&mut out, 2));
        for l in [
            "fio-8916 [001] ..... 344.612387: block_getrq: 7,0 WS 0 + 8 [fio]",
            "fio-8916 [001] ..... 344.612388: block_rq_issue: 7,0 WS 4096 () 0 + 8 none,0,0 [fio]",
            "CPU:1 [LOST 12 EVENTS]",
            "fio-8916 [001] ..... 344.612389: block_bio_queue: 7,0 R 8 + 8 [fio]",
            "garbage",
            "fio-8916 [001] ..... 344.612390: block_getrq: 7,0 FWS 0 + 0 [fio]",
            "fio-8916 [001] ..... 344.612391: block_getrq: 7,0 R 8 + 8 [fio]",
            "fio-8916 [001] ..... 344.612392: block_getrq: 7,0 W 16 + 8 [fio]",
        ] {
            take_line(l.as_bytes(), &mut d);
        }
        let stats = d.stats;
        let got: Vec<_> = out
            .iter()
            .map(|e| (e.kind, e.dir, e.sector, e.nr_sectors))
            .collect();
        assert_eq!(
            got,
            [
                (EventKind::GetRq, Dir::Write, 0, 8),
                (EventKind::Issue, Dir::Write, 0, 8),
                (EventKind::GetRq, Dir::Read, 8, 8),
            ]
        );
        assert_eq!(
            stats,
            TapDrain {
                lost: 12,
                dropped: 1
            }
        );
    }
}
