//! Reading outside text line by line with a bound on the line: a file with no newline (or
//! one 50 MB line) must cost at most `max` bytes of memory, not the whole file. The part of
//! a line beyond the bound is read and dropped, and the caller is told it was too long.

use std::io::BufRead;

/// What [`read_line_bounded`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// End of input: no more bytes.
    Eof,
    /// A whole line is in the buffer (without its `\n`).
    Whole,
    /// The line was longer than the bound: the buffer holds its first `max` bytes, the
    /// rest was skipped up to and including its `\n`.
    TooLong,
}

/// Reads one line into `buf` (cleared first), keeping at most `max` bytes of it.
pub fn read_line_bounded(
    r: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    let mut any = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(match (any, too_long) {
                (false, _) => Line::Eof,
                (true, false) => Line::Whole,
                (true, true) => Line::TooLong,
            });
        }
        any = true;
        let (part, used, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], i + 1, true),
            None => (chunk, chunk.len(), false),
        };
        let room = max.saturating_sub(buf.len());
        if part.len() > room {
            too_long = true;
        }
        buf.extend_from_slice(&part[..part.len().min(room)]);
        r.consume(used);
        if done {
            return Ok(if too_long { Line::TooLong } else { Line::Whole });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8], max: usize) -> Vec<(Line, Vec<u8>)> {
        let mut r = std::io::BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            let l = read_line_bounded(&mut r, &mut buf, max).unwrap();
            if l == Line::Eof {
                return out;
            }
            out.push((l, buf.clone()));
        }
    }

    #[test]
    fn lines_within_the_bound_come_whole_longer_ones_cut() {
        let got = all(b"ab\n\nabcdefghij\nxyz", 5);
        assert_eq!(
            got,
            vec![
                (Line::Whole, b"ab".to_vec()),
                (Line::Whole, Vec::new()),
                (Line::TooLong, b"abcde".to_vec()),
                (Line::Whole, b"xyz".to_vec()),
            ]
        );
        assert_eq!(all(b"abcdefgh", 3), vec![(Line::TooLong, b"abc".to_vec())]);
        assert_eq!(all(b"", 3), vec![]);
    }
}
