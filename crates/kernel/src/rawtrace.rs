//! The tracing ring buffer's binary pages (`per_cpu/cpuN/trace_pipe_raw`), parsed: what
//! the bio tap reads instead of `trace_pipe`, whose text the kernel formats event by event
//! (about 2.5 us per bio on the development machine, most of the tap's cost; a raw page
//! of ~70 bios is one read and a few hundred ns of parsing).
//!
//! Nothing here is guessed from a kernel version: the page header's layout comes from
//! `events/header_page` and the event's fields from its `format` file, both read when the
//! tap opens (one format per event: the tap's `block_getrq` and `block_rq_issue` keep their
//! fields at different offsets, and a record is told apart by its `common_type`, the
//! event's ID). What the kernel documents of the ring buffer (include/linux/ring_buffer.h):
//! a page is a u64 timestamp, a `commit` word (bytes of data; on 64-bit its bits 31 and up
//! flag events lost before this page, bit 30 that their count is stored after the data),
//! then events, each a u32 header (`type_len:5, time_delta:27`) and a payload:
//! - `type_len` 1..=28: the payload is `type_len * 4` bytes right after the header;
//! - 0: the payload's length (plus 4) is the next u32, the payload after it;
//! - 29: padding (a `time_delta` of 0: the rest of the page; else the next u32 is its length);
//! - 30: a time extend (the next u32 holds bits 27 and up of the delta), 8 bytes;
//! - 31: an absolute timestamp, in the same format, 8 bytes.
//!
//! Pure: pages in, bios out; the tap does the reading.

use crate::trace::{Dir, EventKind, rwbs_dir};

/// An error in the layout files; the tap then falls back to `trace_pipe`.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum LayoutError {
    #[error("{file}: no field {field:?}")]
    MissingField { file: String, field: &'static str },
    #[error("{file}: field {field:?} has size {size}, expected {expected}")]
    FieldSize {
        file: String,
        field: &'static str,
        size: usize,
        expected: &'static str,
    },
    #[error("{file}: no event ID")]
    NoId { file: String },
    #[error("{file}: no event name")]
    NoName { file: String },
}

impl LayoutError {
    /// What is wrong, without the file: for an error that names the file already (the bio
    /// tap's, whose every variant carries its path), so that it is said once.
    pub fn without_file(&self) -> String {
        match self {
            LayoutError::MissingField { field, .. } => format!("no field {field:?}"),
            LayoutError::FieldSize {
                field,
                size,
                expected,
                ..
            } => format!("field {field:?} has size {size}, expected {expected}"),
            LayoutError::NoId { .. } => "no event ID".into(),
            LayoutError::NoName { .. } => "no event name".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    offset: usize,
    size: usize,
}

/// `field:TYPE NAME;\toffset:N;\tsize:N;...` lines of a format file, by name.
fn fields(text: &str) -> Vec<(&str, Field)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut parts = rest.split(';').map(str::trim);
        let Some(decl) = parts.next() else { continue };
        // "unsigned int nr_sector", "char rwbs[10]", "u64 timestamp": the last word,
        // without its array bounds.
        let Some(name) = decl.split_whitespace().last() else {
            continue;
        };
        let name = name.split('[').next().unwrap_or(name);
        let mut offset = None;
        let mut size = None;
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                size = v.parse().ok();
            }
        }
        if let (Some(offset), Some(size)) = (offset, size) {
            out.push((name, Field { offset, size }));
        }
    }
    out
}

fn field(
    all: &[(&str, Field)],
    file: &str,
    name: &'static str,
    size_ok: impl Fn(usize) -> bool,
    expected: &'static str,
) -> Result<Field, LayoutError> {
    let f = all
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .ok_or_else(|| LayoutError::MissingField {
            file: file.to_string(),
            field: name,
        })?;
    if !size_ok(f.size) {
        return Err(LayoutError::FieldSize {
            file: file.to_string(),
            field: name,
            size: f.size,
            expected,
        });
    }
    Ok(f)
}

/// Where a page keeps its timestamp, commit word and data (`events/header_page`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLayout {
    timestamp: Field,
    commit: Field,
    data: Field,
}

impl PageLayout {
    /// Parses `events/header_page`; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<PageLayout, LayoutError> {
        let all = fields(text);
        Ok(PageLayout {
            timestamp: field(&all, file, "timestamp", |n| n == 8, "8")?,
            commit: field(&all, file, "commit", |n| n == 4 || n == 8, "4 or 8")?,
            data: field(
                &all,
                file,
                "data",
                |n| n > 0 && n <= 1 << 20,
                "1 B to 1 MiB",
            )?,
        })
    }

    /// Bytes of one page: what one read of `trace_pipe_raw` returns at most.
    pub fn page_size(&self) -> usize {
        self.data.offset + self.data.size
    }
}

/// Where a block event with a bio's or a request's extent (`block_bio_queue`,
/// `block_getrq`, `block_rq_issue`, ...) keeps its fields (its `format` file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BioLayout {
    id: u16,
    /// The event, from the format's `name:` line.
    kind: EventKind,
    common_type: Field,
    dev: Field,
    sector: Field,
    nr_sector: Field,
    rwbs: Field,
}

impl BioLayout {
    /// Parses the event's `format` file; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<BioLayout, LayoutError> {
        let id = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("ID:")?.trim().parse().ok())
            .ok_or_else(|| LayoutError::NoId {
                file: file.to_string(),
            })?;
        let kind = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("name:"))
            .map(|n| EventKind::from_tracefs(n.trim()))
            .ok_or_else(|| LayoutError::NoName {
                file: file.to_string(),
            })?;
        let all = fields(text);
        Ok(BioLayout {
            id,
            kind,
            common_type: field(&all, file, "common_type", |n| n == 2, "2")?,
            dev: field(&all, file, "dev", |n| n == 4 || n == 8, "4 or 8")?,
            sector: field(&all, file, "sector", |n| n == 8, "8")?,
            nr_sector: field(&all, file, "nr_sector", |n| n == 4, "4")?,
            rwbs: field(&all, file, "rwbs", |n| (1..=64).contains(&n), "1 to 64")?,
        })
    }

    fn end(&self) -> usize {
        [
            self.common_type,
            self.dev,
            self.sector,
            self.nr_sector,
            self.rwbs,
        ]
        .iter()
        .map(|f| f.offset + f.size)
        .max()
        .unwrap_or(0)
    }
}

/// One event of a raw page with a bio's or a request's extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawBio {
    /// Trace clock, ns.
    pub t_ns: u64,
    /// Which of the layouts it matched.
    pub kind: EventKind,
    /// The kernel's `dev_t` (`MAJOR << 20 | MINOR`).
    pub dev: u64,
    /// None for a discard or a flush without data.
    pub dir: Option<Dir>,
    pub sector: u64,
    pub nr_sectors: u32,
}

/// What a page held besides its bios.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageStats {
    /// Events the ring buffer overwrote before this page (1 when it says so without a count).
    pub lost: u64,
    /// Events of another type, and records too short for the layout.
    pub skipped: u64,
}

fn le(bytes: &[u8], at: usize, size: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(size)?)?;
    Some(b.iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x)))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    le(bytes, at, 4).map(|v| v as u32)
}

/// Bit 30 and up of a commit word are flags (bit 31 is sign-extended on 64-bit).
const COMMIT_LENGTH_MASK: u64 = (1 << 30) - 1;
const MISSED_EVENTS: u64 = 1 << 31;
const MISSED_STORED: u64 = 1 << 30;

/// Appends the events of one page (as `trace_pipe_raw` returns it) that match one of
/// `layouts` to `out`. A page cut short or garbled ends the parse at the first record that
/// does not fit: what came before it stands.
pub fn parse_page(
    page: &[u8],
    pl: &PageLayout,
    layouts: &[BioLayout],
    out: &mut Vec<RawBio>,
) -> PageStats {
    let mut stats = PageStats::default();
    let (Some(mut ts), Some(commit)) = (
        le(page, pl.timestamp.offset, pl.timestamp.size),
        le(page, pl.commit.offset, pl.commit.size),
    ) else {
        return stats;
    };
    let len = (commit & COMMIT_LENGTH_MASK) as usize;
    let data_start = pl.data.offset;
    let data_end = data_start.saturating_add(len).min(page.len());
    if commit & MISSED_EVENTS != 0 {
        stats.lost += if commit & MISSED_STORED != 0 {
            le(page, data_end, pl.commit.size).unwrap_or(1)
        } else {
            1
        };
    }
    let mut at = data_start;
    while at + 4 <= data_end {
        let Some(h) = u32_at(page, at) else { break };
        let type_len = h & 0x1f;
        let delta = u64::from(h >> 5);
        let (payload, size) = match type_len {
            29 => {
                if delta == 0 {
                    break;
                }
                let Some(n) = u32_at(page, at + 4) else { break };
                (None, 4 + n as usize)
            }
            30 | 31 => {
                let Some(hi) = u32_at(page, at + 4) else {
                    break;
                };
                let v = (u64::from(hi) << 27) | delta;
                if type_len == 30 {
                    ts = ts.wrapping_add(v);
                } else {
                    // Absolute, in the bits a u59 holds; the page's top bits stay.
                    ts = (ts & !((1u64 << 59) - 1)) | v;
                }
                (None, 8)
            }
            0 => {
                let Some(n) = u32_at(page, at + 4) else { break };
                ts = ts.wrapping_add(delta);
                (
                    Some((at + 8, (n as usize).saturating_sub(4))),
                    4 + n as usize,
                )
            }
            n => {
                ts = ts.wrapping_add(delta);
                (Some((at + 4, n as usize * 4)), 4 + n as usize * 4)
            }
        };
        if size < 4 || at + size > data_end {
            break;
        }
        if let Some((p, plen)) = payload {
            match bio(&page[p..p + plen.min(data_end - p)], layouts, ts) {
                Some(b) => out.push(b),
                None => stats.skipped += 1,
            }
        }
        at += size;
    }
    stats
}

fn bio(rec: &[u8], layouts: &[BioLayout], t_ns: u64) -> Option<RawBio> {
    // common_type is at the same place in every event (the common fields come first).
    let id = le(rec, layouts.first()?.common_type.offset, 2)?;
    let bl = layouts.iter().find(|l| u64::from(l.id) == id)?;
    if rec.len() < bl.end() {
        return None;
    }
    let rwbs = &rec[bl.rwbs.offset..bl.rwbs.offset + bl.rwbs.size];
    let rwbs = &rwbs[..rwbs.iter().position(|&b| b == 0).unwrap_or(rwbs.len())];
    Some(RawBio {
        t_ns,
        kind: bl.kind,
        dev: le(rec, bl.dev.offset, bl.dev.size)?,
        dir: rwbs_dir(std::str::from_utf8(rwbs).ok()?),
        sector: le(rec, bl.sector.offset, 8)?,
        nr_sectors: le(rec, bl.nr_sector.offset, 4)? as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/rawtrace");

    fn read(name: &str) -> Vec<u8> {
        std::fs::read(format!("{FIXTURE}/{name}")).unwrap()
    }

    fn layouts() -> (PageLayout, BioLayout) {
        let hp = String::from_utf8(read("header_page")).unwrap();
        let fmt = String::from_utf8(read("format")).unwrap();
        (
            PageLayout::parse(&hp, "header_page").unwrap(),
            BioLayout::parse(&fmt, "format").unwrap(),
        )
    }

    /// The text the kernel printed for the same events: (t_ns, dir, sector, nr).
    fn text_events() -> Vec<(u64, Option<Dir>, u64, u32)> {
        let text = String::from_utf8(read("trace.txt")).unwrap();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| crate::trace::parse_event(l).ok())
            .map(|e| (e.t_ns, e.dir, e.extent.unwrap().0, e.extent.unwrap().1))
            .collect()
    }

    #[test]
    fn the_layouts_of_the_development_kernel_are_read_from_its_files() {
        let (pl, bl) = layouts();
        assert_eq!(pl.page_size(), 4096);
        assert_eq!(bl.id, 2097);
        assert_eq!(
            (bl.dev.offset, bl.sector.offset, bl.nr_sector.offset),
            (8, 16, 24)
        );
        assert_eq!(bl.rwbs.size, 10);
    }

    #[test]
    fn raw_pages_give_the_bios_the_text_trace_shows() {
        let (pl, bl) = layouts();
        let mut bios = Vec::new();
        for cpu in ["cpu0.raw", "cpu1.raw"] {
            let data = read(cpu);
            for page in data.chunks(pl.page_size()) {
                let st = parse_page(page, &pl, &[bl], &mut bios);
                assert_eq!(st, PageStats::default(), "{cpu}");
            }
        }
        bios.sort_by_key(|b| b.t_ns);
        assert!(bios.iter().all(|b| b.dev == 7 << 20), "all on loop0 (7:0)");
        let got: Vec<_> = bios
            .iter()
            // The text rounds its timestamps to the microsecond.
            .map(|b| ((b.t_ns + 500) / 1000 * 1000, b.dir, b.sector, b.nr_sectors))
            .collect();
        assert_eq!(got.len(), 101);
        assert_eq!(got, text_events());
    }

    #[test]
    fn a_cut_or_garbled_page_keeps_what_came_before_and_never_panics() {
        let (pl, bl) = layouts();
        let page = read("cpu1.raw");
        let mut all = Vec::new();
        parse_page(&page, &pl, &[bl], &mut all);
        for cut in [0, 3, 15, 16, 20, 100, 1000, 4095] {
            let mut some = Vec::new();
            parse_page(&page[..cut], &pl, &[bl], &mut some);
            assert!(some.len() <= all.len());
            assert_eq!(some[..], all[..some.len()], "cut at {cut}");
        }
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut p = page.clone();
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let i = (rng % p.len() as u64) as usize;
            p[i] = (rng >> 32) as u8;
            let mut out = Vec::new();
            parse_page(&p, &pl, &[bl], &mut out);
        }
    }

    #[test]
    fn lost_events_are_counted_from_the_commit_flags() {
        let (pl, bl) = layouts();
        let mut page = read("cpu1.raw");
        let len = le(&page, 8, 8).unwrap() & COMMIT_LENGTH_MASK;
        // Bit 31 sign-extended, as a 64-bit kernel stores it, with the count after the data.
        let commit = len | MISSED_STORED | !(MISSED_EVENTS - 1);
        page[8..16].copy_from_slice(&commit.to_le_bytes());
        let end = 16 + len as usize;
        page[end..end + 8].copy_from_slice(&42u64.to_le_bytes());
        let mut out = Vec::new();
        let st = parse_page(&page, &pl, &[bl], &mut out);
        assert_eq!(st.lost, 42);
        assert_eq!(out.len(), 61);
    }

    #[test]
    fn a_format_without_a_field_is_an_error_naming_it() {
        let fmt = String::from_utf8(read("format")).unwrap();
        let no_sector: String = fmt
            .lines()
            .filter(|l| !l.contains(" sector;"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            BioLayout::parse(&no_sector, "F"),
            Err(LayoutError::MissingField {
                file: "F".into(),
                field: "sector"
            })
        );
    }
}
