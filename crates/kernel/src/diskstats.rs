//! Pure parsers for the kernel's block counters: `/proc/diskstats` lines (14, 18 or 20
//! columns: kernels with 11, 15 or 17 stat fields) and `/sys/block/<dev>/stat` (the same
//! fields without major, minor and name).
//!
//! The input is bytes, not text: one stray non-UTF-8 byte must cost only the line it is
//! in, never the whole file. A bad line is reported with its number and a typed
//! [`LineFault`], and never stops the other devices from being parsed. A device name that
//! appears on two lines of one read cannot be diffed (which line is which device?): every
//! line of that name is set aside as a duplicate until the name is unique again.
//! [`DiskstatsHealth`] turns the problems of successive reads into log lines said once
//! per device per change of its fault, not once per tick.

use crate::trace::Dir;
use serde::Serialize;

/// Number of stat fields the newest kernels print (5.5+).
pub const MAX_FIELDS: usize = 17;

/// Index (0-based) of each stat field, per Documentation/admin-guide/iostats.rst.
pub mod field {
    pub const READS_COMPLETED: usize = 0;
    pub const READS_MERGED: usize = 1;
    pub const SECTORS_READ: usize = 2;
    pub const READ_MS: usize = 3;
    pub const WRITES_COMPLETED: usize = 4;
    pub const WRITES_MERGED: usize = 5;
    pub const SECTORS_WRITTEN: usize = 6;
    pub const WRITE_MS: usize = 7;
    pub const IN_FLIGHT: usize = 8;
    pub const IO_MS: usize = 9;
    pub const WEIGHTED_IO_MS: usize = 10;
    pub const DISCARDS_COMPLETED: usize = 11;
    pub const DISCARDS_MERGED: usize = 12;
    pub const SECTORS_DISCARDED: usize = 13;
    pub const DISCARD_MS: usize = 14;
    pub const FLUSHES_COMPLETED: usize = 15;
    pub const FLUSH_MS: usize = 16;
}

/// Whether a field is an `unsigned int` in the kernel (ms counters and in-flight) and so
/// wraps at 2^32 even on 64-bit kernels; the others are `unsigned long`.
pub fn field_is_u32(index: usize) -> bool {
    matches!(
        index,
        field::READ_MS
            | field::WRITE_MS
            | field::IN_FLIGHT
            | field::IO_MS
            | field::WEIGHTED_IO_MS
            | field::DISCARD_MS
            | field::FLUSH_MS
    )
}

/// The stat fields of one device; fields the kernel did not print read as 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StatFields {
    pub values: [u64; MAX_FIELDS],
    /// 11, 15 or 17: how many fields the kernel printed.
    pub field_count: u8,
}

impl StatFields {
    pub fn get(&self, index: usize) -> u64 {
        self.values[index]
    }

    /// Requests completed in one direction (after merging).
    pub fn completed(&self, dir: Dir) -> u64 {
        self.values[match dir {
            Dir::Read => field::READS_COMPLETED,
            Dir::Write => field::WRITES_COMPLETED,
        }]
    }

    /// Bios merged into an existing request, in one direction.
    pub fn merged(&self, dir: Dir) -> u64 {
        self.values[match dir {
            Dir::Read => field::READS_MERGED,
            Dir::Write => field::WRITES_MERGED,
        }]
    }

    /// 512-byte sectors moved in one direction.
    pub fn sectors(&self, dir: Dir) -> u64 {
        self.values[match dir {
            Dir::Read => field::SECTORS_READ,
            Dir::Write => field::SECTORS_WRITTEN,
        }]
    }

    /// Requests in flight (not a counter).
    pub fn in_flight(&self) -> u64 {
        self.values[field::IN_FLIGHT]
    }
}

/// One line of /proc/diskstats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiskStat {
    pub major: u32,
    pub minor: u32,
    pub name: String,
    pub fields: StatFields,
}

impl DiskStat {
    /// A line's slot before it is parsed into (no name, no fields).
    fn blank() -> DiskStat {
        DiskStat {
            major: 0,
            minor: 0,
            name: String::new(),
            fields: StatFields {
                values: [0; MAX_FIELDS],
                field_count: 0,
            },
        }
    }
}

/// Why a diskstats line could not be parsed. The values in the line are not part of it:
/// a counter field that holds changing garbage is one lasting fault, not a new one per read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LineFault {
    MissingMinor,
    MissingName,
    BadMajor,
    BadMinor,
    /// The device name is not UTF-8 (no /sys/block entry can match it).
    NameNotUtf8,
    /// A stat field (1-based) is not a decimal number that fits in 64 bits.
    NotANumber {
        field: usize,
    },
    /// Not 11, 15 or 17 (or more) stat fields.
    FieldCount {
        count: usize,
    },
}

impl std::fmt::Display for LineFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineFault::MissingMinor => write!(f, "missing minor number"),
            LineFault::MissingName => write!(f, "missing device name"),
            LineFault::BadMajor => write!(f, "major is not a number"),
            LineFault::BadMinor => write!(f, "minor is not a number"),
            LineFault::NameNotUtf8 => write!(f, "device name is not UTF-8"),
            LineFault::NotANumber { field } => write!(f, "field {field} is not a number"),
            LineFault::FieldCount { count } => {
                write!(f, "{count} stat fields, expected 11, 15 or 17")
            }
        }
    }
}

/// Bytes of a bad line (and of its bad token) quoted in messages: a 50 MB line must not
/// become a 50 MB log line.
pub const MAX_QUOTED_BYTES: usize = 160;

fn quote(b: &[u8]) -> String {
    let cut = &b[..b.len().min(MAX_QUOTED_BYTES)];
    let mut s = String::from_utf8_lossy(cut).into_owned();
    // Each bad byte became a 3-byte replacement character: cut again, on a char boundary.
    let mut end = s.len().min(MAX_QUOTED_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let shortened = end < s.len() || cut.len() < b.len();
    s.truncate(end);
    if shortened {
        s.push_str("...");
    }
    s
}

/// A line that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 1-based line number in the file.
    pub line_no: usize,
    /// The device name as far as it could be read (lossily decoded), for per-device
    /// bookkeeping; None when the line has no third column.
    pub device: Option<String>,
    pub fault: LineFault,
    /// The offending token, quoted (lossy, cut at [`MAX_QUOTED_BYTES`]).
    pub token: Option<String>,
    /// The line, quoted (lossy, cut at [`MAX_QUOTED_BYTES`]).
    pub line: String,
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line_no, self.fault)?;
        if let Some(t) = &self.token {
            write!(f, ": {t:?}")?;
        }
        write!(f, " in {:?}", self.line)
    }
}

impl std::error::Error for LineError {}

/// A device name found on more than one line of one read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    pub name: String,
    /// 1-based line numbers of every line with that name.
    pub lines: Vec<usize>,
}

/// The result of parsing a whole /proc/diskstats: the good lines, the bad ones, and the
/// names set aside because they are not unique.
#[derive(Debug, Clone, Default)]
pub struct Diskstats {
    /// Devices whose name is unique in this read, in file order.
    pub devices: Vec<DiskStat>,
    pub errors: Vec<LineError>,
    pub duplicates: Vec<Duplicate>,
    /// The bytes of the lines behind `devices`, for [`parse_diskstats_into`]'s next read.
    last_lines: LastLines,
}

/// Equal when what was parsed is equal: the bytes kept for the next read are not part of it.
impl PartialEq for Diskstats {
    fn eq(&self, other: &Self) -> bool {
        self.devices == other.devices
            && self.errors == other.errors
            && self.duplicates == other.duplicates
    }
}
impl Eq for Diskstats {}

/// The line behind each of `Diskstats::devices`, byte for byte, as last parsed: a line that
/// reads the same at the next read is that device again with the same counters, so it is
/// not parsed again. Most lines of a host's diskstats are idle devices and partitions, whose
/// counters do not move from one tick to the next; a compare of their bytes costs a fraction
/// of parsing 17 numbers. It keeps the last read itself (handed over by
/// [`parse_diskstats_into`]) and where each kept line lies in it: no line is copied.
#[derive(Debug, Clone, Default)]
struct LastLines {
    read: Vec<u8>,
    /// `read[spans[k].0..spans[k].1]` is the line of `devices[k]`.
    spans: Vec<(usize, usize)>,
    /// This read's, filled as it is parsed.
    next_spans: Vec<(usize, usize)>,
}

impl LastLines {
    /// The last read's line of slot `k`, if there is one.
    fn line(&self, k: usize) -> Option<&[u8]> {
        let &(start, end) = self.spans.get(k)?;
        self.read.get(start..end)
    }

    /// The read is done: it and its lines become what the next read compares with. `valid`
    /// is false when the devices no longer follow the lines one for one (a name set aside).
    fn finish(&mut self, read: Vec<u8>, valid: bool) {
        self.read = read;
        std::mem::swap(&mut self.spans, &mut self.next_spans);
        self.next_spans.clear();
        if !valid {
            self.spans.clear();
        }
    }
}

/// Parses a decimal u64 token without going through `str::parse`'s generic path: this is
/// the hot loop of every tick (17 fields per device).
fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

fn tokens(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|c| c.is_ascii_whitespace())
        .filter(|t| !t.is_empty())
}

/// A fault and the token it is about.
type Fault = (LineFault, Option<String>);

fn parse_fields<'a>(toks: impl Iterator<Item = &'a [u8]>) -> Result<StatFields, Fault> {
    let mut values = [0u64; MAX_FIELDS];
    let mut count = 0usize;
    for tok in toks {
        if count == MAX_FIELDS {
            // Newer kernels may append fields; the 17 we know keep their meaning.
            count += 1;
            break;
        }
        values[count] = parse_u64(tok)
            .ok_or_else(|| (LineFault::NotANumber { field: count + 1 }, Some(quote(tok))))?;
        count += 1;
    }
    match count {
        11 | 15 | 17 => Ok(StatFields {
            values,
            field_count: count as u8,
        }),
        n if n > MAX_FIELDS => Ok(StatFields {
            values,
            field_count: MAX_FIELDS as u8,
        }),
        n => Err((LineFault::FieldCount { count: n }, None)),
    }
}

/// Parses the stat fields (11, 15 or 17 numbers, whitespace-separated), as in
/// `/sys/block/<dev>/stat`.
pub fn parse_stat_fields(text: &(impl AsRef<[u8]> + ?Sized)) -> Result<StatFields, String> {
    parse_fields(tokens(text.as_ref())).map_err(|(fault, tok)| match tok {
        Some(t) => format!("{fault}: {t:?}"),
        None => fault.to_string(),
    })
}

/// One pass over a well-formed line (the case of every line of every tick): `None` at the
/// first thing it does not expect, and [`parse_line`] then says what is wrong. Two paths,
/// so that the common one has no iterator of tokens, no per-digit overflow check and no
/// error values to build, and the other keeps every fault's exact wording.
fn parse_line_fast(line: &[u8]) -> Option<DiskStat> {
    let mut d = DiskStat::blank();
    parse_line_fast_into(line, &mut d).map(|_renamed| d)
}

/// [`parse_line_fast`] into a `DiskStat` of an earlier read: its name's buffer is reused,
/// so a tick allocates nothing per line. Whether the slot's name changed; None (and `d`
/// half written, its name untouched) at the first thing it does not expect.
fn parse_line_fast_into(line: &[u8], d: &mut DiskStat) -> Option<bool> {
    let mut at = 0usize;
    let major = next_number(line, &mut at).and_then(|v| u32::try_from(v).ok())?;
    let minor = next_number(line, &mut at).and_then(|v| u32::try_from(v).ok())?;
    skip_whitespace(line, &mut at);
    let start = at;
    while at < line.len() && !line[at].is_ascii_whitespace() {
        at += 1;
    }
    if at == start {
        return None;
    }
    let Ok(name) = std::str::from_utf8(&line[start..at]) else {
        return None;
    };
    let values = &mut d.fields.values;
    let mut count = 0usize;
    loop {
        skip_whitespace(line, &mut at);
        if at == line.len() || count == MAX_FIELDS {
            break;
        }
        let v = next_number(line, &mut at)?;
        values[count] = v;
        count += 1;
    }
    // More than 17 fields (a newer kernel) or a wrong count: the slow path decides.
    if !matches!(count, 11 | 15 | 17) || at != line.len() {
        return None;
    }
    // Fields the kernel did not print read as 0.
    values[count..].fill(0);
    d.fields.field_count = count as u8;
    d.major = major;
    d.minor = minor;
    let renamed = d.name != name;
    if renamed {
        d.name.clear();
        d.name.push_str(name);
    }
    Some(renamed)
}

fn skip_whitespace(line: &[u8], at: &mut usize) {
    while *at < line.len() && line[*at].is_ascii_whitespace() {
        *at += 1;
    }
}

/// `10^n` for the digits of one word.
const POW10: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// The high bit of each byte of `word` that is not an ASCII digit, without a carry from
/// one byte into the next: `'0' ^ b` is 0-9 exactly for a digit, and adding 0x76 to the
/// low seven bits sets the high bit from 10 up.
fn non_digits(word: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = word ^ 0x3030_3030_3030_3030;
    (((x & LOW7) + 0x7676_7676_7676_7676) | x) & !LOW7
}

/// The value of eight ASCII digits, the first in the lowest byte (leading zeros may be
/// zero bytes): pairs, then fours, then the eight, by three multiplies.
fn eight_digits(word: u64) -> u64 {
    let v = ((word & 0x0f0f_0f0f_0f0f_0f0f).wrapping_mul(2561)) >> 8;
    let v = ((v & 0x00ff_00ff_00ff_00ff).wrapping_mul(6_553_601)) >> 16;
    ((v & 0x0000_ffff_0000_ffff).wrapping_mul(42_949_672_960_001)) >> 32
}

/// The decimal number that starts after the whitespace at `*at`, ending at whitespace or
/// the end of the line, as [`parse_u64`] reads it (at most 20 digits, no overflow).
///
/// Eight bytes at a time while eight are left: where the digits end is found by a mask,
/// not by a branch per byte, whose misprediction at the end of each number (17 of them a
/// line, of varying lengths) was most of the parse; the rest of the line byte by byte.
/// (An eight-bytes-at-a-time parser tried before measured slower; with this one and the
/// sampler's change of 2026-12-03, `tick/pure/64` measured 0.78 of the byte loop's:
/// docs/design.md, "What a tick costs".)
#[inline(always)]
fn next_number(line: &[u8], at: &mut usize) -> Option<u64> {
    skip_whitespace(line, at);
    let start = *at;
    let mut v: u64 = 0;
    while let Some(chunk) = line.get(*at..*at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().ok()?);
        let n = (non_digits(word).trailing_zeros() / 8) as usize;
        if n == 0 {
            break;
        }
        // The digits after the `n` are shifted out; zero bytes come in as leading zeros.
        let part = eight_digits(word << (8 * (8 - n)));
        v = match *at + n - start {
            // 19 digits never overflow; the 20th may (u64::MAX has 20).
            0..=19 => v * POW10[n] + part,
            20 => v.checked_mul(POW10[n])?.checked_add(part)?,
            _ => return None,
        };
        *at += n;
        if n < 8 {
            break;
        }
    }
    while *at < line.len() {
        let d = line[*at].wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        v = match *at - start {
            // 19 digits never overflow; the 20th may (u64::MAX has 20), and the checked
            // parser takes no more than 20.
            0..19 => v * 10 + u64::from(d),
            19 => v.checked_mul(10)?.checked_add(u64::from(d))?,
            _ => return None,
        };
        *at += 1;
    }
    let ends_token = *at == line.len() || line[*at].is_ascii_whitespace();
    (*at > start && ends_token).then_some(v)
}

fn parse_line(line: &[u8]) -> Result<DiskStat, (Fault, Option<String>)> {
    let mut it = tokens(line);
    let no_dev = |f: LineFault, t: Option<String>| ((f, t), None);
    let major = it
        .next()
        .ok_or_else(|| no_dev(LineFault::MissingMinor, None))?;
    let minor = it
        .next()
        .ok_or_else(|| no_dev(LineFault::MissingMinor, None))?;
    let name = it
        .next()
        .ok_or_else(|| no_dev(LineFault::MissingName, None))?;
    // Quoted only on error: a good line allocates nothing but its name.
    let with_dev = |f: Fault| (f, Some(quote(name)));
    let major = parse_u64(major)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| with_dev((LineFault::BadMajor, Some(quote(major)))))?;
    let minor = parse_u64(minor)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| with_dev((LineFault::BadMinor, Some(quote(minor)))))?;
    let name = std::str::from_utf8(name)
        .map_err(|_| with_dev((LineFault::NameNotUtf8, Some(quote(name)))))?;
    let fields = parse_fields(it).map_err(with_dev)?;
    Ok(DiskStat {
        major,
        minor,
        name: name.to_string(),
        fields,
    })
}

/// Parses one /proc/diskstats line: `major minor name` then the stat fields. The error
/// says line 1 (one line); [`parse_diskstats`] numbers the lines of a file.
pub fn parse_diskstats_line(line: &(impl AsRef<[u8]> + ?Sized)) -> Result<DiskStat, LineError> {
    let line = line.as_ref();
    if let Some(d) = parse_line_fast(line) {
        return Ok(d);
    }
    parse_line(line).map_err(|((fault, token), device)| LineError {
        line_no: 1,
        device,
        fault,
        token,
        line: quote(line),
    })
}

/// Parses a whole /proc/diskstats. Blank lines are ignored; a line that is not UTF-8, has
/// the wrong number of fields or a non-number costs only itself; a name on several lines
/// costs all of them (see [`Diskstats::duplicates`]).
pub fn parse_diskstats(input: &(impl AsRef<[u8]> + ?Sized)) -> Diskstats {
    let input = input.as_ref();
    // One line a device: sized once, so the devices are not moved as the vector grows.
    let mut out = Diskstats {
        devices: Vec::with_capacity(count_newlines(input) + 1),
        ..Diskstats::default()
    };
    parse_lines(input, &mut out);
    out
}

/// [`parse_diskstats`] of a read it keeps, into the result of an earlier read, which it
/// replaces: the devices and their names are overwritten in place, so a reader that keeps one `Diskstats` (the
/// daemon's tick) allocates nothing per line, nor moves a device as the vector grows. A line
/// the same, byte for byte, as the one its slot was parsed from at the last read is not
/// parsed again (`LastLines`).
pub fn parse_diskstats_into(input: Vec<u8>, out: &mut Diskstats) {
    parse_lines(&input, out);
    // A name set aside shifts the devices after it off their lines.
    let valid = out.duplicates.is_empty();
    out.last_lines.finish(input, valid);
}

/// Parses `input` into `out`, each line into the next slot, taking a line from the last
/// read where it reads the same ([`LastLines`], empty for a fresh parse), and noting where
/// each kept line lies for the next.
fn parse_lines(input: &[u8], out: &mut Diskstats) {
    out.last_lines.next_spans.clear();
    out.errors.clear();
    out.duplicates.clear();
    // Every kept line in a slot that held the same name before: the names are those of the
    // last parse, which were unique (it set aside every repeat), so nothing repeats now.
    let mut names_as_before = true;
    let mut kept = 0usize;
    let mut line_nos = Vec::with_capacity(out.devices.len());
    let mut at = 0usize;
    let mut line_no = 0usize;
    // A line that failed to parse may have written part of itself into the next slot.
    let mut slot_written = false;
    loop {
        let end = line_end(input, at);
        let line = &input[at..end];
        line_no += 1;
        let parsed = if !slot_written && out.last_lines.line(kept) == Some(line) {
            // The slot still holds this very line's parse, from the last read.
            true
        } else {
            if kept == out.devices.len() {
                out.devices.push(DiskStat::blank());
            }
            let slot = &mut out.devices[kept];
            slot_written = true;
            let renamed = match parse_line_fast_into(line, slot) {
                Some(renamed) => Some(renamed),
                None if line.iter().all(u8::is_ascii_whitespace) => None,
                None => match parse_diskstats_line(line) {
                    Ok(d) => {
                        let renamed = slot.name != d.name;
                        *slot = d;
                        Some(renamed)
                    }
                    Err(mut e) => {
                        e.line_no = line_no;
                        out.errors.push(e);
                        None
                    }
                },
            };
            // A slot new to this read is blank, its name empty: a parse into it renames.
            if let Some(renamed) = renamed {
                names_as_before &= !renamed;
            }
            renamed.is_some()
        };
        if parsed {
            out.last_lines.next_spans.push((at, end));
            kept += 1;
            line_nos.push(line_no);
            slot_written = false;
        }
        if end == input.len() {
            break;
        }
        at = end + 1;
    }
    out.devices.truncate(kept);
    if !names_as_before {
        set_aside_duplicates(out, &line_nos);
    }
}

/// Where the line that starts at `from` ends: its `\n`, or the end of the input. Eight
/// bytes at a time (a byte is zero after `^ b'\n'` exactly where the high bit of this
/// carry-free test stays clear), so that finding the lines costs little beside parsing them.
fn line_end(input: &[u8], from: usize) -> usize {
    let mut at = from;
    while let Some(chunk) = input.get(at..at + 8) {
        let newlines = zero_bytes(u64::from_le_bytes(chunk.try_into().unwrap_or_default()));
        if newlines != 0 {
            return at + (newlines.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    input[at..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(input.len(), |i| at + i)
}

/// The high bit of each byte of `word` that is `\n`.
fn zero_bytes(word: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = word ^ 0x0a0a_0a0a_0a0a_0a0a;
    !((((x & LOW7) + LOW7) | x) | LOW7)
}

/// The `\n` bytes of `input`, eight at a time.
fn count_newlines(input: &[u8]) -> usize {
    let mut chunks = input.chunks_exact(8);
    let mut n = 0usize;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        n += zero_bytes(word).count_ones() as usize;
    }
    n + chunks.remainder().iter().filter(|&&c| c == b'\n').count()
}

fn set_aside_duplicates(out: &mut Diskstats, line_nos: &[usize]) {
    if out.devices.len() < 2 {
        return;
    }
    // The common case, no repeat, is told by sorted name hashes (cheap u64 compares); only
    // a repeated hash takes the exact path by name.
    let mut hashes: Vec<u64> = out
        .devices
        .iter()
        .map(|d| {
            d.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            })
        })
        .collect();
    hashes.sort_unstable();
    if !hashes.windows(2).any(|w| w[0] == w[1]) {
        return;
    }
    let mut order: Vec<u32> = (0..out.devices.len() as u32).collect();
    order.sort_unstable_by(|&a, &b| {
        out.devices[a as usize]
            .name
            .cmp(&out.devices[b as usize].name)
    });
    let same = |a: u32, b: u32| out.devices[a as usize].name == out.devices[b as usize].name;
    if !order.windows(2).any(|w| same(w[0], w[1])) {
        return;
    }
    let mut drop = vec![false; out.devices.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i + 1;
        while j < order.len() && same(order[i], order[j]) {
            j += 1;
        }
        if j - i > 1 {
            let mut lines: Vec<usize> = order[i..j].iter().map(|&k| line_nos[k as usize]).collect();
            lines.sort_unstable();
            for &k in &order[i..j] {
                drop[k as usize] = true;
            }
            out.duplicates.push(Duplicate {
                name: out.devices[order[i] as usize].name.clone(),
                lines,
            });
        }
        i = j;
    }
    let mut k = 0;
    out.devices.retain(|_| {
        let keep = !drop[k];
        k += 1;
        keep
    });
}

/// Distinct problems remembered at most (bad lines by device, duplicate names): a file of
/// a million bad lines must not grow the bookkeeping without bound.
pub const MAX_TRACKED_PROBLEMS: usize = 4096;
/// Warnings one read yields at most; the rest are summed up in one more line.
pub const MAX_WARNINGS_PER_READ: usize = 8;

/// What to say about one read of /proc/diskstats.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthReport {
    /// The read had a problem (unreadable, a bad line, a duplicate name, no device at
    /// all): the daemon counts it in `mergetune_diskstats_errors_total`.
    pub problem: bool,
    /// Problems new in this read, or whose fault changed: warn.
    pub warnings: Vec<String>,
    /// Problems gone since the previous read: say so once.
    pub cleared: Vec<String>,
}

/// Remembers which diskstats problems were already said, so each is logged once per
/// device per change of its fault (and once when it clears), not once per tick. Pure:
/// the daemon feeds it every read and logs what it returns.
#[derive(Debug, Clone, Default)]
pub struct DiskstatsHealth {
    /// Bad lines by device name (or `line N` for a line without a name).
    faults: std::collections::BTreeMap<String, LineFault>,
    duplicates: std::collections::BTreeSet<String>,
    empty: bool,
    read_error: Option<String>,
}

impl DiskstatsHealth {
    pub fn new() -> Self {
        Self::default()
    }

    /// A read that failed: warn when the error is new or changed.
    pub fn read_failed(&mut self, error: &str) -> HealthReport {
        let mut r = HealthReport {
            problem: true,
            ..Default::default()
        };
        if self.read_error.as_deref() != Some(error) {
            r.warnings.push(error.to_string());
            self.read_error = Some(error.to_string());
        }
        r
    }

    /// A read that succeeded and parsed into `parsed`: whether it lists any device, its bad
    /// lines, its repeated names, each said when it starts or changes and once when it
    /// clears, with at most [`MAX_WARNINGS_PER_READ`] warnings.
    pub fn review(&mut self, parsed: &Diskstats) -> HealthReport {
        let mut r = HealthReport {
            problem: !parsed.errors.is_empty() || !parsed.duplicates.is_empty(),
            ..Default::default()
        };
        let mut hidden = 0usize;
        if let Some(e) = self.read_error.take() {
            r.cleared.push(format!("readable again (was: {e})"));
        }
        self.review_empty(parsed, &mut r, &mut hidden);
        self.review_faults(parsed, &mut r, &mut hidden);
        self.review_duplicates(parsed, &mut r, &mut hidden);
        if hidden > 0 {
            r.warnings
                .push(format!("... and {hidden} more problem(s) not shown"));
        }
        r
    }

    /// No device at all (and no bad line to explain it) is a problem of its own.
    fn review_empty(&mut self, parsed: &Diskstats, r: &mut HealthReport, hidden: &mut usize) {
        let empty = parsed.devices.is_empty() && !r.problem;
        if empty {
            r.problem = true;
            if !self.empty {
                warn_capped(r, hidden, "lists no device: nothing to sample".into());
            }
        } else if self.empty {
            r.cleared.push("lists devices again".into());
        }
        self.empty = empty;
    }

    /// Bad lines, by device (or line number), at most [`MAX_TRACKED_PROBLEMS`] of them.
    fn review_faults(&mut self, parsed: &Diskstats, r: &mut HealthReport, hidden: &mut usize) {
        let mut faults = std::collections::BTreeMap::new();
        for e in &parsed.errors {
            let key = e
                .device
                .clone()
                .unwrap_or_else(|| format!("line {}", e.line_no));
            if faults.contains_key(&key) {
                continue;
            }
            if faults.len() >= MAX_TRACKED_PROBLEMS {
                *hidden += usize::from(!self.faults.contains_key(&key));
                continue;
            }
            if self.faults.get(&key) != Some(&e.fault) {
                warn_capped(
                    r,
                    hidden,
                    format!("{e} (this device is skipped; the others are still read)"),
                );
            }
            faults.insert(key, e.fault);
        }
        for key in self.faults.keys().filter(|k| !faults.contains_key(*k)) {
            r.cleared.push(format!("{key}: no bad line any more"));
        }
        self.faults = faults;
    }

    /// Names on several lines, at most [`MAX_TRACKED_PROBLEMS`] of them.
    fn review_duplicates(&mut self, parsed: &Diskstats, r: &mut HealthReport, hidden: &mut usize) {
        let mut dups = std::collections::BTreeSet::new();
        for d in parsed.duplicates.iter().take(MAX_TRACKED_PROBLEMS) {
            if !self.duplicates.contains(&d.name) {
                let lines: Vec<String> = d.lines.iter().take(8).map(|l| l.to_string()).collect();
                warn_capped(
                    r,
                    hidden,
                    format!(
                        "device name {:?} appears on {} lines ({}{}): its counters cannot be told apart and are ignored until the name is unique again",
                        d.name,
                        d.lines.len(),
                        lines.join(", "),
                        if d.lines.len() > 8 { ", ..." } else { "" }
                    ),
                );
            }
            dups.insert(d.name.clone());
        }
        for name in self.duplicates.iter().filter(|n| !dups.contains(*n)) {
            r.cleared.push(format!(
                "device name {name:?} is unique again: its counters are read again"
            ));
        }
        self.duplicates = dups;
    }
}

/// A warning of this read, unless it already holds [`MAX_WARNINGS_PER_READ`]: then it is
/// only counted, for the "... and N more" line.
fn warn_capped(r: &mut HealthReport, hidden: &mut usize, msg: String) {
    if r.warnings.len() < MAX_WARNINGS_PER_READ {
        r.warnings.push(msg);
    } else {
        *hidden += 1;
    }
}

/// Renders stat fields as `/sys/block/<dev>/stat` does (17 fields, right-aligned).
pub fn format_stat_fields(fields: &StatFields) -> String {
    let mut s = String::with_capacity(MAX_FIELDS * 9);
    for (i, v) in fields.values[..fields.field_count as usize]
        .iter()
        .enumerate()
    {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(&format!("{v:>8}"));
    }
    s
}

/// Renders one /proc/diskstats line as the kernel prints it.
pub fn format_diskstats_line(stat: &DiskStat) -> String {
    let mut s = format!("{:>4} {:>7} {}", stat.major, stat.minor, stat.name);
    for v in &stat.fields.values[..stat.fields.field_count as usize] {
        s.push(' ');
        s.push_str(&v.to_string());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_17_field_line() {
        let d = parse_diskstats_line(
            " 254       0 vda 4429 2395 680330 1930 282 1035 11072 231 0 920 2344 2992 49 37576 181 6 0",
        )
        .unwrap();
        assert_eq!((d.major, d.minor, d.name.as_str()), (254, 0, "vda"));
        assert_eq!(d.fields.field_count, 17);
        assert_eq!(d.fields.get(field::READS_MERGED), 2395);
        assert_eq!(d.fields.get(field::WRITES_MERGED), 1035);
        assert_eq!(d.fields.get(field::FLUSHES_COMPLETED), 6);
    }

    #[test]
    fn rejects_short_and_garbage_lines() {
        let fault = |l: &str| parse_diskstats_line(l).unwrap_err().fault;
        assert_eq!(fault("8 0 sda 1 2 3"), LineFault::FieldCount { count: 3 });
        assert_eq!(
            fault("8 0 sda 1 2 3 4 5 6 7 8 9 10 x"),
            LineFault::NotANumber { field: 11 }
        );
        assert_eq!(
            fault("x 0 sda 1 2 3 4 5 6 7 8 9 10 11"),
            LineFault::BadMajor
        );
        assert_eq!(fault("8"), LineFault::MissingMinor);
        assert_eq!(fault("8 0"), LineFault::MissingName);
    }

    /// The one-pass parser is only a shortcut: on any line it accepts it must give what the
    /// checked parser gives, and it must accept every line the kernel prints. Lines from a
    /// 6.18 host and a 4.19 guest, then byte-level damage of them (a deterministic
    /// xorshift, so a failure repeats).
    #[test]
    fn the_fast_path_agrees_with_the_checked_parser() {
        let good = [
            " 254       0 vda 4429 2395 680330 1930 282 1035 11072 231 0 920 2344 2992 49 37576 181 6 0",
            "   7       0 loop0 97 0 2116 23 0 0 0 0 0 40 23 0 0 0 0",
            "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11",
            "   8       1 sda1 18446744073709551615 0 0 0 0 0 0 0 0 0 4294967295",
        ];
        for l in good {
            assert!(parse_line_fast(l.as_bytes()).is_some(), "{l}");
            assert_eq!(
                parse_line_fast(l.as_bytes()),
                parse_line(l.as_bytes()).ok(),
                "{l}"
            );
        }
        let alphabet = b"0123456789 \t\nx-+\xff9";
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut accepted = 0;
        for _ in 0..20_000 {
            let mut line = good[(next() % 4) as usize].as_bytes().to_vec();
            for _ in 0..=(next() % 3) {
                let at = (next() as usize) % (line.len() + 1);
                let c = alphabet[(next() as usize) % alphabet.len()];
                match next() % 4 {
                    0 if at < line.len() => line[at] = c,
                    3 => {
                        // a run of digits: numbers of every length up to past 20
                        let run: Vec<u8> = (0..next() % 24)
                            .map(|_| b'0' + (next() % 10) as u8)
                            .collect();
                        line.splice(at..at, run);
                    }
                    1 if at < line.len() => {
                        line.remove(at);
                    }
                    _ => line.insert(at, c),
                }
            }
            let fast = parse_line_fast(&line);
            let checked = parse_line(&line).ok();
            if fast.is_some() {
                accepted += 1;
                assert_eq!(fast, checked, "{:?}", String::from_utf8_lossy(&line));
            } else if let Some(d) = checked {
                // Only a line of more than 17 fields may take the checked path to a good
                // result (a newer kernel's: the 17 known fields are kept).
                assert!(tokens(&line).count() - 3 > MAX_FIELDS, "{d:?}");
            }
        }
        assert!(
            accepted > 1000,
            "the damage left too few good lines: {accepted}"
        );
    }

    fn bad(device: &str, fault: LineFault) -> LineError {
        LineError {
            line_no: 2,
            device: Some(device.into()),
            fault,
            token: None,
            line: String::new(),
        }
    }

    #[test]
    fn health_warns_once_per_change_and_once_when_cleared() {
        let mut h = DiskstatsHealth::new();
        let with = |errors: Vec<LineError>| Diskstats {
            devices: vec![parse_diskstats_line("8 0 sda 1 2 3 4 5 6 7 8 9 10 11").unwrap()],
            errors,
            ..Diskstats::default()
        };
        let nan = LineFault::NotANumber { field: 3 };
        let r = h.review(&with(vec![bad("sdb", nan)]));
        assert!(r.problem);
        assert_eq!(r.warnings.len(), 1, "{r:?}");
        for _ in 0..5 {
            let r = h.review(&with(vec![bad("sdb", nan)]));
            assert!(
                r.problem && r.warnings.is_empty() && r.cleared.is_empty(),
                "{r:?}"
            );
        }
        let r = h.review(&with(vec![bad("sdb", LineFault::FieldCount { count: 3 })]));
        assert_eq!(r.warnings.len(), 1, "a changed fault is said again");
        let r = h.review(&with(vec![]));
        assert!(!r.problem && r.warnings.is_empty());
        assert_eq!(r.cleared, vec!["sdb: no bad line any more".to_string()]);
        let r = h.review(&with(vec![]));
        assert_eq!(r, HealthReport::default());
    }

    #[test]
    fn health_bounds_what_it_says_and_remembers() {
        let mut h = DiskstatsHealth::new();
        let many = Diskstats {
            devices: Vec::new(),
            errors: (0..3 * MAX_TRACKED_PROBLEMS)
                .map(|i| bad(&format!("d{i}"), LineFault::BadMajor))
                .collect(),
            ..Diskstats::default()
        };
        let r = h.review(&many);
        assert_eq!(r.warnings.len(), MAX_WARNINGS_PER_READ + 1);
        assert!(r.warnings.last().unwrap().contains("more problem"), "{r:?}");
        assert_eq!(h.faults.len(), MAX_TRACKED_PROBLEMS);
    }

    #[test]
    fn health_of_reads_that_fail_or_find_nothing() {
        let mut h = DiskstatsHealth::new();
        assert_eq!(h.read_failed("x: gone").warnings.len(), 1);
        assert!(h.read_failed("x: gone").warnings.is_empty());
        let r = h.review(&Diskstats::default());
        assert!(r.problem);
        assert_eq!(
            r.warnings,
            vec!["lists no device: nothing to sample".to_string()]
        );
        assert_eq!(r.cleared.len(), 1, "readable again: {r:?}");
        assert!(h.review(&Diskstats::default()).warnings.is_empty());
    }

    /// Parsing into the result of an earlier read (the daemon's tick) gives what a fresh
    /// parse gives, whatever the earlier read held: more or fewer lines, longer names, bad
    /// lines, duplicates, fewer fields.
    #[test]
    fn parsing_into_an_earlier_read_is_a_fresh_parse() {
        let reads: [&[u8]; 5] = [
            b"   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n   8      16 sdb 1 2 3 4 5 6 7 8 9 10 11\n",
            b"   8      16 a_much_longer_name 9 9 9 9 9 9 9 9 9 9 9\n\n garbage\n",
            b"",
            b"   8       0 sda 18446744073709551615 0 0 0 0 0 0 0 0 0 4294967295 1 2 3 4\n   8       0 sda 1 1 1 1 1 1 1 1 1 1 1\n   7       0 loop0 1 1 1 1 1 1 1 1 1 1 1",
            b"   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19\n   8       1 sda1 12345678901 2 3 4 5 6 7 8 9 10 11\n\xff 1 x\n",
        ];
        let mut kept = Diskstats::default();
        for round in 0..3 {
            for (i, text) in reads.iter().enumerate() {
                parse_diskstats_into(text.to_vec(), &mut kept);
                assert_eq!(kept, parse_diskstats(text), "round {round}, read {i}");
            }
        }
    }

    /// Lines that read as they did at the last read are taken from it, not parsed again: in
    /// any sequence of reads, whatever moved, repeated, broke or was set aside in between,
    /// each read gives what a fresh parse of it gives. The pool holds idle lines (the same
    /// at every read), busy ones, lines that half parse before they fail (they write into
    /// the slot the next line may be taken from), blank lines, a name given twice, and a
    /// line of 18 fields that only the checked parser reads. A fresh parse is itself held to
    /// what each line parsed alone gives, with every repeated name set aside.
    #[test]
    #[allow(clippy::too_many_lines)] // a test reads best as one story
    fn reads_that_repeat_lines_give_what_a_fresh_parse_gives() {
        let pool: [&[u8]; 11] = [
            b"   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17",
            b"   8       0 sda 1 2 3 4 5 6 7 8 9 10 12 12 13 14 15 16 17",
            b"   8      16 sdb 5 0 40 1 0 0 0 0 0 4 4",
            b"   8      16 sdb 6 0 48 1 0 0 0 0 0 5 5",
            b"   8      32 sdc 7 7 7 7 7 7 7 7 7 7 7 7 7 7 7",
            b"   8      48 sdd 1 2 3 4 5 6 7 8 9 10 x1",
            b"   8      48 sdd 1 2 3 4 5 6 7 8",
            b"",
            b"   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0",
            b"   9       0 sda 3 3 3 3 3 3 3 3 3 3 3",
            b"   8      16 sdb 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18",
        ];
        // Line by line, without parse_lines: each good line's device, then every name that
        // occurs more than once dropped, and their line numbers.
        let alone = |text: &[u8]| {
            let good: Vec<(usize, DiskStat)> = text
                .split(|&b| b == b'\n')
                .enumerate()
                .filter_map(|(i, l)| Some((i + 1, parse_diskstats_line(l).ok()?)))
                .collect();
            let count = |name: &str| good.iter().filter(|(_, d)| d.name == name).count();
            let devices: Vec<DiskStat> = good
                .iter()
                .filter(|(_, d)| count(&d.name) == 1)
                .map(|(_, d)| d.clone())
                .collect();
            let mut repeated: Vec<(String, Vec<usize>)> = Vec::new();
            for (line, d) in good.iter().filter(|(_, d)| count(&d.name) > 1) {
                match repeated.iter_mut().find(|(n, _)| *n == d.name) {
                    Some((_, lines)) => lines.push(*line),
                    None => repeated.push((d.name.clone(), vec![*line])),
                }
            }
            repeated.sort();
            // A line that is not blank and does not parse is an error; a blank one is not.
            let errors = text
                .split(|&b| b == b'\n')
                .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
                .filter(|l| parse_diskstats_line(l).is_err())
                .count();
            (devices, repeated, errors)
        };
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for sequence in 0..400 {
            let mut kept = Diskstats::default();
            let mut read: Vec<&[u8]> = (0..1 + next(6)).map(|_| pool[next(pool.len())]).collect();
            for i in 0..8 {
                // Change one line, or none, or add or drop one: most lines repeat.
                match next(4) {
                    0 => {
                        let at = next(read.len());
                        read[at] = pool[next(pool.len())];
                    }
                    1 => read.insert(next(read.len() + 1), pool[next(pool.len())]),
                    2 if read.len() > 1 => {
                        read.remove(next(read.len()));
                    }
                    _ => {}
                }
                let text = read.join(&b'\n');
                parse_diskstats_into(text.clone(), &mut kept);
                let fresh = parse_diskstats(&text);
                assert_eq!(
                    kept,
                    fresh,
                    "sequence {sequence}, read {i}: {:?}",
                    String::from_utf8_lossy(&text)
                );
                let mut repeated: Vec<(String, Vec<usize>)> = fresh
                    .duplicates
                    .iter()
                    .map(|d| (d.name.clone(), d.lines.clone()))
                    .collect();
                repeated.sort();
                assert_eq!(
                    (fresh.devices, repeated, fresh.errors.len()),
                    alone(&text),
                    "sequence {sequence}, read {i}: {:?}",
                    String::from_utf8_lossy(&text)
                );
            }
        }
    }

    /// The word-at-a-time number parser reads every length, at every offset of the line's
    /// end, as the checked one does.
    #[test]
    fn numbers_of_every_length_parse_as_the_checked_parser_reads_them() {
        for digits in 1..=22usize {
            for first in [b'0', b'1', b'9'] {
                let mut n = vec![first];
                n.extend((1..digits).map(|i| b'0' + (i * 7 % 10) as u8));
                for tail in ["", " ", "  7", "x"] {
                    let mut line = n.clone();
                    line.extend_from_slice(tail.as_bytes());
                    let mut at = 0;
                    let got = next_number(&line, &mut at);
                    let want = if tail == "x" { None } else { parse_u64(&n) };
                    assert_eq!(got, want, "{:?}", String::from_utf8_lossy(&line));
                    if want.is_some() {
                        assert_eq!(at, n.len());
                    }
                }
            }
        }
    }

    #[test]
    fn roundtrip_format() {
        let line = "   8       0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17";
        let d = parse_diskstats_line(line).unwrap();
        assert_eq!(parse_diskstats_line(&format_diskstats_line(&d)).unwrap(), d);
        assert_eq!(
            parse_stat_fields(&format_stat_fields(&d.fields)).unwrap(),
            d.fields
        );
    }
}
