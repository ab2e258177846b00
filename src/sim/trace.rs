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
//! Why plugs matter: a batched submission merges in the plug (seed 004), and a trace of
//! only `block_bio_queue` events does not show plugs; then bios at most `plug_gap_ns` apart
//! are taken to share one. Flush-only and discard bios are skipped. Any malformed line gives
//! an error naming its line number, never a panic.

use super::engine::Dir;

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

enum Ev {
    Bio {
        t_ns: u64,
        dir: Dir,
        sync: bool,
        sector: u64,
        nr: u32,
        stream: u32,
    },
    Plug,
    Unplug,
    Skip,
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

/// `sector + nr` starting at `toks[i]`.
fn parse_extent(toks: &[&str], i: usize) -> Result<Option<(u64, u32)>, String> {
    match (toks.get(i), toks.get(i + 1), toks.get(i + 2)) {
        (Some(sec), Some(&"+"), Some(nr)) => {
            let sector = sec
                .parse::<u64>()
                .map_err(|_| format!("bad sector {sec:?}"))?;
            let nr = nr
                .parse::<u32>()
                .map_err(|_| format!("bad sector count {nr:?}"))?;
            Ok(Some((sector, nr)))
        }
        // A flush or other data-less bio has no extent.
        (None, _, _) | (Some(_), None, _) => Ok(None),
        (Some(t), _, _) if t.starts_with('[') => Ok(None),
        _ => Err("expected `SECTOR + COUNT`".into()),
    }
}

fn bio_ev(t_ns: u64, stream: u32, rwbs: &str, toks: &[&str], i: usize) -> Result<Ev, String> {
    let Some((dir, sync)) = parse_rwbs(rwbs)? else {
        return Ok(Ev::Skip);
    };
    match parse_extent(toks, i)? {
        Some((sector, nr)) if nr > 0 => Ok(Ev::Bio {
            t_ns,
            dir,
            sync,
            sector,
            nr,
            stream,
        }),
        _ => Ok(Ev::Skip),
    }
}

fn parse_line(line: &str) -> Result<Option<Ev>, String> {
    let toks: Vec<&str> = line.split_whitespace().collect();
    // tracefs: "... TIMESTAMP: block_xxx: ..."
    if let Some(i) = toks
        .iter()
        .position(|t| t.starts_with("block_") && t.ends_with(':'))
    {
        let event = &toks[i][..toks[i].len() - 1];
        let t_ns = match i.checked_sub(1).and_then(|j| parse_time(toks[j])) {
            Some(t) => t,
            None => return Err("missing or bad timestamp before the event name".into()),
        };
        return match event {
            "block_bio_queue" => {
                let dev = toks.get(i + 1).ok_or("missing MAJOR,MINOR")?;
                if !dev.contains(',') {
                    return Err(format!("bad device {dev:?}, expected MAJOR,MINOR"));
                }
                let rwbs = toks.get(i + 2).ok_or("missing RWBS field")?;
                // "TASK-PID" is the first token; a task name may itself contain '-'.
                let stream = toks[0]
                    .rsplit('-')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0);
                bio_ev(t_ns, stream, rwbs, &toks, i + 3).map(Some)
            }
            "block_plug" => Ok(Some(Ev::Plug)),
            "block_unplug" => Ok(Some(Ev::Unplug)),
            _ => Ok(Some(Ev::Skip)),
        };
    }
    // blkparse: DEV CPU SEQ TIME PID ACTION RWBS ...
    if toks.len() >= 6 && toks[0].contains(',') {
        let t_ns = parse_time(toks[3]).ok_or_else(|| format!("bad time {:?}", toks[3]))?;
        return match toks[5] {
            "Q" => {
                let rwbs = toks.get(6).ok_or("missing RWBS field")?;
                let stream = toks[4].parse().unwrap_or(0);
                bio_ev(t_ns, stream, rwbs, &toks, 7).map(Some)
            }
            "P" => Ok(Some(Ev::Plug)),
            "U" | "UT" => Ok(Some(Ev::Unplug)),
            _ => Ok(Some(Ev::Skip)),
        };
    }
    Err("not a tracefs block event or a blkparse event line".into())
}

/// Parses a whole trace. Times are made relative to the first bio. Without plug markers,
/// bios at most `plug_gap_ns` after the previous one of the same task share its plug.
pub fn parse_trace(text: &str, plug_gap_ns: u64) -> Result<Vec<TraceBio>, TraceError> {
    let mut out: Vec<TraceBio> = Vec::new();
    let mut saw_markers = false;
    let mut in_plug = false;
    let mut plug_open_pending = true;
    // Last bio time per stream, for gap-based plug grouping.
    let mut last_t: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
    for (idx, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with("CPU") || line.starts_with("Total") {
            break; // blkparse summary
        }
        let ev = parse_line(line).map_err(|message| TraceError {
            line: idx + 1,
            message,
        })?;
        match ev {
            Some(Ev::Plug) => {
                saw_markers = true;
                in_plug = true;
                plug_open_pending = true;
            }
            Some(Ev::Unplug) => {
                saw_markers = true;
                in_plug = false;
                plug_open_pending = true;
            }
            Some(Ev::Bio {
                t_ns,
                dir,
                sync,
                sector,
                nr,
                stream,
            }) => {
                let plug_start = if saw_markers {
                    let s = plug_open_pending || !in_plug;
                    plug_open_pending = false;
                    s
                } else {
                    match last_t.get(&stream) {
                        None => true,
                        Some(&prev) => t_ns.saturating_sub(prev) > plug_gap_ns,
                    }
                };
                last_t.insert(stream, t_ns);
                out.push(TraceBio {
                    t_ns,
                    dir,
                    sync,
                    sector,
                    nr_sectors: nr,
                    stream,
                    plug_start,
                });
            }
            Some(Ev::Skip) | None => {}
        }
    }
    if let Some(t0) = out.first().map(|b| b.t_ns) {
        let mut last = 0;
        for b in &mut out {
            // Out-of-order lines (several CPUs) are replayed no earlier than their
            // predecessor: replay is in file order.
            b.t_ns = b.t_ns.saturating_sub(t0).max(last);
            last = b.t_ns;
        }
    }
    Ok(out)
}
