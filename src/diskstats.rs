//! Pure parsers for the kernel's block counters: `/proc/diskstats` lines (14, 18 or 20
//! columns: kernels with 11, 15 or 17 stat fields) and `/sys/block/<dev>/stat` (the same
//! fields without major, minor and name). A bad line is reported with its number and the
//! reason, and never stops the other devices from being parsed.

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
}

/// One line of /proc/diskstats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiskStat {
    pub major: u32,
    pub minor: u32,
    pub name: String,
    pub fields: StatFields,
}

/// A line that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line_no}: {reason}: {line:?}")]
pub struct LineError {
    /// 1-based line number in the file.
    pub line_no: usize,
    pub line: String,
    pub reason: String,
}

/// The result of parsing a whole /proc/diskstats: the good lines and the bad ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diskstats {
    pub devices: Vec<DiskStat>,
    pub errors: Vec<LineError>,
}

/// Parses a decimal u64 token without going through `str::parse`'s generic path: this is
/// the hot loop of every tick (17 fields per device).
fn parse_u64(tok: &str) -> Option<u64> {
    let b = tok.as_bytes();
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

fn parse_fields<'a>(tokens: impl Iterator<Item = &'a str>) -> Result<StatFields, String> {
    let mut values = [0u64; MAX_FIELDS];
    let mut count = 0usize;
    for tok in tokens {
        if count == MAX_FIELDS {
            // Newer kernels may append fields; the 17 we know keep their meaning.
            count += 1;
            break;
        }
        values[count] = parse_u64(tok)
            .ok_or_else(|| format!("field {} is not a number: {tok:?}", count + 1))?;
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
        n => Err(format!("{n} stat fields, expected 11, 15 or 17")),
    }
}

/// Parses the stat fields (11, 15 or 17 numbers, whitespace-separated), as in
/// /sys/block/<dev>/stat.
pub fn parse_stat_fields(text: &str) -> Result<StatFields, String> {
    parse_fields(text.split_ascii_whitespace())
}

/// Parses one /proc/diskstats line: `major minor name` then the stat fields.
pub fn parse_diskstats_line(line: &str) -> Result<DiskStat, String> {
    let mut it = line.split_ascii_whitespace();
    let major = it.next().ok_or("empty line")?;
    let minor = it.next().ok_or("missing minor number")?;
    let name = it.next().ok_or("missing device name")?;
    let major = parse_u64(major)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| format!("major {major:?} is not a number"))?;
    let minor = parse_u64(minor)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| format!("minor {minor:?} is not a number"))?;
    let fields = parse_fields(it)?;
    Ok(DiskStat {
        major,
        minor,
        name: name.to_string(),
        fields,
    })
}

/// Parses a whole /proc/diskstats text. Blank lines are ignored.
pub fn parse_diskstats(text: &str) -> Diskstats {
    let mut out = Diskstats::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_diskstats_line(line) {
            Ok(d) => out.devices.push(d),
            Err(reason) => out.errors.push(LineError {
                line_no: i + 1,
                line: line.to_string(),
                reason,
            }),
        }
    }
    out
}

/// Renders stat fields as /sys/block/<dev>/stat does (17 fields, right-aligned).
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
        assert!(parse_diskstats_line("8 0 sda 1 2 3").is_err());
        assert!(parse_diskstats_line("8 0 sda 1 2 3 4 5 6 7 8 9 10 x").is_err());
        assert!(parse_diskstats_line("x 0 sda 1 2 3 4 5 6 7 8 9 10 11").is_err());
        assert!(parse_diskstats_line("8").is_err());
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
