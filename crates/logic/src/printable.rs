//! Text from outside made safe to print. Device names, scheduler names, scenario names,
//! record fields and whole status documents come from files, recordings and network
//! peers mergetune does not control; printed raw, an ESC or BEL in them drives the
//! operator's terminal (retitles it, clears it, hides lines) and a newline forges a log
//! line. Every print site passes such text through [`printable`]: control characters
//! (C0, DEL, C1), the bidirectional overrides, the line and paragraph separators and the
//! invisible format characters (zero-width space, BOM...) become visible escapes, everything else
//! is left as it is, so an ordinary name prints unchanged and without a copy.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Bidirectional formatting characters: they reorder what a terminal shows.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

/// Characters that print as nothing or break a line where the reader sees none: the line
/// and paragraph separators, the zero-width and other invisible format characters (a name
/// with U+200B looks like one without it), the byte-order mark and the tag characters.
fn is_invisible_or_line_break(c: char) -> bool {
    matches!(c,
        '\u{ad}' | '\u{61c}' | '\u{180e}' | '\u{200b}'..='\u{200d}' | '\u{2028}' | '\u{2029}'
        | '\u{2060}'..='\u{2064}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}'
        | '\u{e0000}'..='\u{e007f}')
}

fn needs_escape(c: char) -> bool {
    c.is_control() || is_bidi_control(c) || is_invisible_or_line_break(c)
}

/// `s` with every control character shown as an escape (`\x1b`, `\n`, `\u{9b}`).
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x100 && needs_escape(c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Multi-line text (a log message, an error with one line per key): each line through
/// [`printable`], the line breaks kept.
pub fn printable_lines(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c != '\n' && needs_escape(c)) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(s.split('\n').map(printable).collect::<Vec<_>>().join("\n"))
}

/// Line and column (1-based; the column counts characters) of byte `offset` of `text`:
/// where an error in a file is, named without quoting the file.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut o = offset.min(text.len());
    while !text.is_char_boundary(o) {
        o -= 1;
    }
    let before = &text[..o];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// A parser's message about a file, without the file's text: what it quotes as found
/// (anything in `"..."` or `` `...` `` before the word "expected") becomes `…`; the names
/// it expects, which come from the schema, stay. A password hash that happens to parse as
/// a TOML key must not reach stderr and the journal from a message about it.
pub fn without_quotes(message: &str) -> String {
    // The name of an unknown or missing field is a key of a document that parsed as TOML:
    // naming it is what the operator needs; no line of a non-TOML file gets that far.
    if message.starts_with("unknown field `") || message.starts_with("missing field `") {
        return printable(message).into_owned();
    }
    let cut = message.find("expected").unwrap_or(message.len());
    let (found, expected) = message.split_at(cut);
    let mut out = String::with_capacity(message.len());
    let mut open: Option<char> = None;
    for c in found.chars() {
        match open {
            Some(q) if c == q => {
                out.push('…');
                out.push(c);
                open = None;
            }
            Some(_) => {}
            None if c == '"' || c == '`' => {
                out.push(c);
                open = Some(c);
            }
            None => out.push(c),
        }
    }
    if let Some(q) = open {
        out.push('…');
        out.push(q);
    }
    out.push_str(expected);
    printable(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ordinary_name_is_unchanged_and_not_copied() {
        for s in ["sda", "nvme0n1p1", "dm-0", "mq-deadline", "été ✓", ""] {
            assert!(matches!(printable(s), Cow::Borrowed(x) if x == s));
        }
    }

    #[test]
    fn separators_and_invisible_characters_are_shown() {
        // U+2028 breaks a line in many terminals and viewers, U+200B makes
        // "sda\u{200b}" look like "sda".
        assert_eq!(printable("sda\u{2028}sdb"), "sda\\u{2028}sdb");
        assert_eq!(printable("sda\u{2029}"), "sda\\u{2029}");
        assert_eq!(printable("sd\u{200b}a"), "sd\\u{200b}a");
        assert_eq!(printable("\u{feff}sda"), "\\u{feff}sda");
        assert_eq!(printable("sda\u{ad}"), "sda\\xad");
        assert_eq!(printable("nvme0n1 é ü 中"), "nvme0n1 é ü 中");
    }

    #[test]
    fn terminal_escapes_are_shown_not_sent() {
        let s = printable("\x1b]0;pwned\x07\x1b[2J\u{9b}1m\u{202e}x\ny\x7f");
        assert_eq!(s, "\\x1b]0;pwned\\x07\\x1b[2J\\x9b1m\\u{202e}x\\ny\\x7f");
        assert!(!s.chars().any(needs_escape));
    }

    #[test]
    fn lines_keep_their_breaks_and_lose_their_escapes() {
        assert_eq!(printable_lines("a\x1b[2J\nb"), "a\\x1b[2J\nb");
        assert!(matches!(printable_lines("a\nb"), Cow::Borrowed(_)));
    }

    #[test]
    fn positions_count_lines_and_characters() {
        let t = "a = 1\nbé = x\n";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 6), (2, 1));
        assert_eq!(line_col(t, t.find('x').unwrap()), (2, 6));
        assert_eq!(line_col(t, 10_000), (3, 1));
    }

    #[test]
    fn what_was_found_is_not_quoted_what_is_expected_is() {
        assert_eq!(
            without_quotes("unknown field `bogus`, expected one of `name`, `unit`"),
            "unknown field `bogus`, expected one of `name`, `unit`"
        );
        assert_eq!(
            without_quotes("duplicate key `root:$6$salt`"),
            "duplicate key `…`"
        );
        assert_eq!(
            without_quotes("invalid type: string \"hunter2\", expected u32"),
            "invalid type: string \"…\", expected u32"
        );
        assert_eq!(
            without_quotes("key with no value, expected `=`"),
            "key with no value, expected `=`"
        );
    }
}
