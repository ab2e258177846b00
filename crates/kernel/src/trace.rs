//! Parsing captured kernel traces into a replayable bio stream.
//!
//! Two text formats are accepted, line by line:
//! - the tracing filesystem's output of `block:block_bio_queue` events, e.g.
//!   `fio-8916 [001] ..... 344.612387: block_bio_queue: 7,0 WS 0 + 8 [fio]`; other `block_*`
//!   events are skipped except `block_plug` / `block_unplug`, which delimit plugs;
//! - blkparse's default output, using its `Q` events (`P` / `U` delimit plugs):
//!   `  8,0    3        1     0.000000000  2176  Q   R 2504 + 1792 [xfs_io]`; the summary
//!   blkparse prints at the end (from a line starting with `CPU` or `Total`) ends parsing.
//!
//! Why plugs matter: a batched submission merges in the plug (the 2009 aio batching thread, docs/design.md), and a trace of
//! only `block_bio_queue` events does not show plugs; then bios at most `plug_gap_ns` apart
//! are taken to share one. Flush-only and discard bios are skipped. Any malformed line gives
//! an error naming its line number, never a panic.
//!
//! The line parser is public for other readers of the same text: [`parse_event`] turns
//! one line into a [`BlockEvent`] of any kind (merges, issues, completions, splits, with
//! its device), and [`BioStream`] groups queue events into plugs. `mergetune advise`
//! streams a trace through them; [`parse_trace`] is the same two steps over a whole text.

use serde::Serialize;

/// The direction of a bio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    Read = 0,
    Write = 1,
}

impl Dir {
    #[inline]
    pub fn idx(self) -> usize {
        self as usize
    }
}

/// One bio of a trace, at its time relative to the first bio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceBio {
    pub t_ns: u64,
    pub dir: Dir,
    pub sync: bool,
    pub sector: u64,
    pub nr_sectors: u32,
    /// The submitting task (pid), so interleaved submitters replay with their own plugs.
    pub stream: u32,
    /// This bio opens a new plug (the ones after it up to the next opener share it).
    pub plug_start: bool,
}

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("line {line}: {message}")]
pub struct TraceError {
    pub line: usize,
    pub message: String,
}

/// The kind of a block event, named as the tracing filesystem (`block_bio_queue`, ...) or
/// blkparse (`Q`, `M`, ...) prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// `block_bio_queue` / `Q`: a bio enters the block layer.
    Queue,
    /// `block_bio_backmerge` / `M`.
    BackMerge,
    /// `block_bio_frontmerge` / `F`.
    FrontMerge,
    /// `block_getrq` / `G`: a new request is allocated for a bio.
    GetRq,
    /// `block_rq_insert` / `I`: a request enters the scheduler.
    Insert,
    /// `block_rq_issue` / `D`: a request is dispatched to the driver.
    Issue,
    /// `block_rq_complete` / `C`.
    Complete,
    /// `block_rq_requeue` / `R`.
    Requeue,
    /// `block_split` / `X`.
    Split,
    /// `block_bio_remap`, `block_rq_remap` / `A`.
    Remap,
    /// `block_plug` / `P`.
    Plug,
    /// `block_unplug` / `U`, `UT`.
    Unplug,
    /// Any other `block_*` event or blkparse action.
    Other,
}

impl EventKind {
    /// The kind of a tracefs event named `name` (`block_getrq`, ...).
    pub fn from_tracefs(name: &str) -> EventKind {
        match name {
            "block_bio_queue" => EventKind::Queue,
            "block_bio_backmerge" => EventKind::BackMerge,
            "block_bio_frontmerge" => EventKind::FrontMerge,
            "block_getrq" => EventKind::GetRq,
            "block_rq_insert" => EventKind::Insert,
            "block_rq_issue" => EventKind::Issue,
            "block_rq_complete" => EventKind::Complete,
            "block_rq_requeue" => EventKind::Requeue,
            "block_split" => EventKind::Split,
            "block_bio_remap" | "block_rq_remap" => EventKind::Remap,
            "block_plug" => EventKind::Plug,
            "block_unplug" => EventKind::Unplug,
            _ => EventKind::Other,
        }
    }

    fn from_blkparse(action: &str) -> EventKind {
        match action {
            "Q" => EventKind::Queue,
            "M" => EventKind::BackMerge,
            "F" => EventKind::FrontMerge,
            "G" => EventKind::GetRq,
            "I" => EventKind::Insert,
            "D" => EventKind::Issue,
            "C" => EventKind::Complete,
            "R" => EventKind::Requeue,
            "X" => EventKind::Split,
            "A" => EventKind::Remap,
            "P" => EventKind::Plug,
            "U" | "UT" => EventKind::Unplug,
            _ => EventKind::Other,
        }
    }

    /// Events whose payload is `DEV RWBS SECTOR + COUNT [comm]` at fixed positions.
    fn bio_shaped(self) -> bool {
        matches!(
            self,
            EventKind::Queue | EventKind::BackMerge | EventKind::FrontMerge | EventKind::GetRq
        )
    }
}

/// One line of a trace, any block event, as printed (absolute time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockEvent {
    /// The timestamp as printed, in ns (not rebased).
    pub t_ns: u64,
    pub kind: EventKind,
    /// `(major, minor)`; None for events that name no device (tracefs `block_plug`).
    pub dev: Option<(u32, u32)>,
    /// The task the event ran in (tracefs `TASK-PID`, blkparse's PID column); 0 if unknown.
    pub pid: u32,
    /// Direction from the RWBS field; None for flushes without data, discards, and events
    /// without an RWBS field.
    pub dir: Option<Dir>,
    /// Synchronous (reads always; writes with `S` in RWBS).
    pub sync: bool,
    /// `SECTOR + COUNT`, where the event has one.
    pub extent: Option<(u64, u32)>,
}

/// Why a line is not a block event. `event` is set when the line was recognised as that
/// event and only its payload is bad (a best-effort reader may skip such a line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct LineError {
    pub event: Option<EventKind>,
    pub message: String,
}

/// True for the first line of the summary blkparse prints after its events.
pub fn is_blkparse_summary(line: &str) -> bool {
    let line = line.trim_start();
    line.starts_with("CPU") || line.starts_with("Total")
}

fn parse_time(s: &str) -> Option<u64> {
    let s = s.trim_end_matches(':');
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    let secs: u64 = secs.parse().ok()?;
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut ns: u64 = 0;
    for (i, b) in frac.bytes().enumerate() {
        ns += (b - b'0') as u64 * 10u64.pow(8 - i as u32);
    }
    secs.checked_mul(1_000_000_000)?.checked_add(ns)
}

/// The count of a ring buffer's `[LOST N EVENTS]` marker line (`trace_pipe` prints one
/// where it overwrote events before they were read); None for any other line. A marker
/// whose count does not parse counts 0.
pub fn lost_events(line: &str) -> Option<u64> {
    let i = line.find("[LOST ")?;
    Some(
        line[i + 6..]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0),
    )
}

/// The direction of a bio from its RWBS field: None for discards, flushes without data and
/// what is not an RWBS field.
pub fn rwbs_dir(s: &str) -> Option<Dir> {
    parse_rwbs(s).ok().flatten().map(|(dir, _)| dir)
}

/// RWBS to a direction; None for flushes without data and discards.
fn parse_rwbs(s: &str) -> Result<Option<(Dir, bool)>, String> {
    if s.is_empty() || !s.bytes().all(|b| b"RWDFSMANE".contains(&b)) {
        return Err(format!("bad RWBS field {s:?}"));
    }
    if s.contains('D') || s.contains('E') {
        return Ok(None);
    }
    let sync = s.contains('S');
    if s.contains('W') {
        Ok(Some((Dir::Write, sync)))
    } else if s.contains('R') {
        Ok(Some((Dir::Read, true)))
    } else {
        Ok(None)
    }
}

fn parse_sector_count(sec: &str, nr: &str) -> Result<(u64, u32), String> {
    let sector = sec
        .parse::<u64>()
        .map_err(|_| format!("bad sector {sec:?}"))?;
    let nr = nr
        .parse::<u32>()
        .map_err(|_| format!("bad sector count {nr:?}"))?;
    Ok((sector, nr))
}

/// `sector + nr` starting at `toks[i]`.
fn parse_extent(toks: &[&str], i: usize) -> Result<Option<(u64, u32)>, String> {
    match (toks.get(i), toks.get(i + 1), toks.get(i + 2)) {
        (Some(sec), Some(&"+"), Some(nr)) => parse_sector_count(sec, nr).map(Some),
        // A flush or other data-less bio has no extent.
        (None, _, _) | (Some(_), None, _) => Ok(None),
        (Some(t), _, _) if t.starts_with('[') => Ok(None),
        _ => Err("expected `SECTOR + COUNT`".into()),
    }
}

/// `sector + nr` anywhere after `toks[i]` (request events print bytes and a command first).
fn find_extent(toks: &[&str], i: usize) -> Result<Option<(u64, u32)>, String> {
    match toks.iter().skip(i + 1).position(|t| *t == "+") {
        Some(p) => {
            let p = p + i + 1;
            match toks.get(p + 1) {
                Some(nr) => parse_sector_count(toks[p - 1], nr).map(Some),
                None => Err("missing sector count after `+`".into()),
            }
        }
        None => Ok(None),
    }
}

fn parse_dev(s: &str) -> Result<(u32, u32), String> {
    s.split_once(',')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .ok_or_else(|| format!("bad device {s:?}, expected MAJOR,MINOR"))
}

/// The payload `DEV RWBS ...` from `toks[i]` (the device) on.
fn payload(kind: EventKind, toks: &[&str], i: usize) -> Result<BlockEvent, String> {
    let dev = parse_dev(toks.get(i).ok_or("missing MAJOR,MINOR")?)?;
    let rwbs = toks.get(i + 1).ok_or("missing RWBS field")?;
    let (dir, sync) = match parse_rwbs(rwbs)? {
        Some((d, s)) => (Some(d), s),
        None => (None, false),
    };
    let extent = match kind {
        k if k.bio_shaped() => parse_extent(toks, i + 2)?,
        EventKind::Issue | EventKind::Insert | EventKind::Complete | EventKind::Requeue => {
            find_extent(toks, i + 1)?
        }
        _ => None,
    };
    Ok(BlockEvent {
        t_ns: 0,
        kind,
        dev: Some(dev),
        pid: 0,
        dir,
        sync,
        extent,
    })
}

/// Parses one line of tracefs or blkparse text into a block event. Blank lines, `#`
/// comments and blkparse's summary are not events: the caller skips them (see
/// [`is_blkparse_summary`]); here they are errors like any other non-event line.
pub fn parse_event(line: &str) -> Result<BlockEvent, LineError> {
    let toks: Vec<&str> = line.split_whitespace().collect();
    // tracefs: "TASK-PID [CPU] FLAGS TIMESTAMP: block_xxx: ..."
    if let Some(i) = toks
        .iter()
        .position(|t| t.starts_with("block_") && t.ends_with(':'))
    {
        return parse_tracefs_event(&toks, i);
    }
    // blkparse: DEV CPU SEQ TIME PID ACTION RWBS ...
    if toks.len() >= 6 && toks[0].contains(',') {
        return parse_blkparse_event(&toks);
    }
    Err(fatal(
        "not a tracefs block event or a blkparse event line".into(),
    ))
}

/// An error that names no event: the line is no event, or its time does not parse.
fn fatal(message: String) -> LineError {
    LineError {
        event: None,
        message,
    }
}

/// An error in the payload of a `kind` event.
fn payload_error(kind: EventKind, message: String) -> LineError {
    LineError {
        event: Some(kind),
        message,
    }
}

/// Plugs, unplugs and other events carry no payload that is parsed: only their device,
/// when it reads as one.
fn has_no_payload(kind: EventKind) -> bool {
    matches!(kind, EventKind::Plug | EventKind::Unplug | EventKind::Other)
}

/// An event without a payload, on `dev`; its time and pid are set by the caller.
fn bare_event(kind: EventKind, dev: Option<(u32, u32)>) -> BlockEvent {
    BlockEvent {
        t_ns: 0,
        kind,
        dev,
        pid: 0,
        dir: None,
        sync: false,
        extent: None,
    }
}

/// A tracefs line, split into `toks`, whose event name `block_xxx:` is `toks[i]`.
fn parse_tracefs_event(toks: &[&str], i: usize) -> Result<BlockEvent, LineError> {
    let name = &toks[i][..toks[i].len() - 1];
    let kind = EventKind::from_tracefs(name);
    let t_ns = i
        .checked_sub(1)
        .and_then(|j| parse_time(toks[j]))
        .ok_or_else(|| fatal("missing or bad timestamp before the event name".into()))?;
    // "TASK-PID" sits before "[CPU]"; a task name may itself contain '-' or spaces.
    let task = toks[..i]
        .iter()
        .position(|t| t.starts_with('[') && t.ends_with(']'))
        .and_then(|c| c.checked_sub(1))
        .map_or(toks[0], |c| toks[c]);
    let pid = task
        .rsplit('-')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let mut ev = if has_no_payload(kind) {
        bare_event(kind, toks.get(i + 1).and_then(|d| parse_dev(d).ok()))
    } else {
        payload(kind, toks, i + 1).map_err(|message| payload_error(kind, message))?
    };
    ev.t_ns = t_ns;
    ev.pid = pid;
    Ok(ev)
}

/// A blkparse event line, split into `toks` (at least 6, the first a device).
fn parse_blkparse_event(toks: &[&str]) -> Result<BlockEvent, LineError> {
    let t_ns = parse_time(toks[3]).ok_or_else(|| fatal(format!("bad time {:?}", toks[3])))?;
    let kind = EventKind::from_blkparse(toks[5]);
    let pid = toks[4].parse().unwrap_or(0);
    let mut ev = if has_no_payload(kind) {
        bare_event(kind, parse_dev(toks[0]).ok())
    } else {
        // blkparse puts the device first and the RWBS after the action.
        let mut shifted: Vec<&str> = Vec::with_capacity(toks.len());
        shifted.push(toks[0]);
        shifted.extend_from_slice(&toks[6..]);
        payload(kind, &shifted, 0).map_err(|message| payload_error(kind, message))?
    };
    ev.t_ns = t_ns;
    ev.pid = pid;
    Ok(ev)
}

/// Turns block events, in file order, into the bios a replay submits, grouping them into
/// plugs: by `block_plug`/`block_unplug` (`P`/`U`) markers when the trace has them, else
/// by time (bios at most `plug_gap_ns` after the previous one of the same task share its
/// plug). Times stay as printed (absolute). Memory: one timestamp per task.
#[derive(Debug, Clone, Default)]
pub struct BioStream {
    plug_gap_ns: u64,
    saw_markers: bool,
    in_plug: bool,
    plug_open_pending: bool,
    last_t: std::collections::HashMap<u32, u64>,
}

impl BioStream {
    pub fn new(plug_gap_ns: u64) -> Self {
        BioStream {
            plug_gap_ns,
            plug_open_pending: true,
            ..Default::default()
        }
    }

    /// Feeds one event; returns the bio it submits, if any (`Queue` events with data).
    pub fn push(&mut self, ev: &BlockEvent) -> Option<TraceBio> {
        match ev.kind {
            EventKind::Plug => {
                self.saw_markers = true;
                self.in_plug = true;
                self.plug_open_pending = true;
                None
            }
            EventKind::Unplug => {
                self.saw_markers = true;
                self.in_plug = false;
                self.plug_open_pending = true;
                None
            }
            EventKind::Queue => {
                let dir = ev.dir?;
                let (sector, nr) = ev.extent.filter(|&(_, nr)| nr > 0)?;
                let stream = ev.pid;
                let t_ns = ev.t_ns;
                let plug_start = if self.saw_markers {
                    let s = self.plug_open_pending || !self.in_plug;
                    self.plug_open_pending = false;
                    s
                } else {
                    match self.last_t.get(&stream) {
                        None => true,
                        Some(&prev) => t_ns.saturating_sub(prev) > self.plug_gap_ns,
                    }
                };
                self.last_t.insert(stream, t_ns);
                Some(TraceBio {
                    t_ns,
                    dir,
                    sync: ev.sync,
                    sector,
                    nr_sectors: nr,
                    stream,
                    plug_start,
                })
            }
            _ => None,
        }
    }
}

/// Parses a whole trace. Times are made relative to the first bio. Without plug markers,
/// bios at most `plug_gap_ns` after the previous one of the same task share its plug.
pub fn parse_trace(text: &str, plug_gap_ns: u64) -> Result<Vec<TraceBio>, TraceError> {
    let mut out: Vec<TraceBio> = Vec::new();
    let mut stream = BioStream::new(plug_gap_ns);
    for (idx, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if is_blkparse_summary(line) {
            break;
        }
        let ev = match parse_event(line) {
            Ok(ev) => ev,
            // Only the bios matter here: a bad payload of any other event is skipped.
            Err(e) if e.event.is_some_and(|k| k != EventKind::Queue) => continue,
            Err(e) => {
                return Err(TraceError {
                    line: idx + 1,
                    message: e.message,
                });
            }
        };
        if let Some(b) = stream.push(&ev) {
            out.push(b);
        }
    }
    rebase_times(&mut out);
    Ok(out)
}

/// Makes bio times relative to the first bio. Out-of-order lines (several CPUs) are
/// replayed no earlier than their predecessor: replay is in file order.
pub fn rebase_times(bios: &mut [TraceBio]) {
    if let Some(t0) = bios.first().map(|b| b.t_ns) {
        let mut last = 0;
        for b in bios {
            b.t_ns = b.t_ns.saturating_sub(t0).max(last);
            last = b.t_ns;
        }
    }
}
