//! What a config error says about a value: the value (as TOML writes it, control characters
//! escaped, cut after [`MAX_SHOWN_CHARS`]), what kind of value it is, and what the key
//! expects, in words an operator reads ("an integer in 0..=4294967295", not serde's "u32").
//!
//! Only a value the TOML parser already took for a known key of a known section is shown:
//! a file that is not a config (a password file named by mistake) fails at its syntax or
//! its first unknown section, whose messages keep quoting nothing
//! ([`crate::printable::without_quotes`]).
//!
//! Integers beyond TOML's range (a signed 64-bit integer) are found here too, before the
//! document is read into values: the parser's own error for them names neither the key
//! nor the value ("u64 value was too large", "invalid type: integer … as i128").

use crate::printable::{printable, without_quotes};
use std::ops::Range;
use toml::de::{DeTable, DeValue};

/// The longest value a message shows; a longer one is cut and ends in `…`.
pub const MAX_SHOWN_CHARS: usize = 60;

/// The value as the file wrote it (TOML syntax), printable and at most
/// [`MAX_SHOWN_CHARS`] characters.
pub fn shown(v: &toml::Value) -> String {
    let text = match v {
        toml::Value::Table(_) => return "a table".to_string(),
        v => v.to_string(),
    };
    let text = printable(&text).into_owned();
    if text.chars().count() <= MAX_SHOWN_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(MAX_SHOWN_CHARS).collect();
    cut.push('…');
    cut
}

/// What kind of TOML value `v` is, with its article.
fn kind(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a number with a fraction",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date-time",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// The largest integer a TOML document can hold.
pub const TOML_MAX: i64 = i64::MAX;

/// Serde's name of what it expected, in an operator's words.
fn expected(serde_expected: &str) -> String {
    let range = |max: u64| format!("an integer in 0..={max}");
    match serde_expected.trim() {
        "u8" => range(u8::MAX.into()),
        "u16" => range(u16::MAX.into()),
        "u32" => range(u32::MAX.into()),
        "u64" | "usize" => range(TOML_MAX as u64),
        "i64" | "i32" => "an integer".into(),
        "f64" | "f32" => "a number".into(),
        "a boolean" => "true or false".into(),
        "a sequence" => "an array".into(),
        "path string" => "a path (a string)".into(),
        other => printable(other).into_owned(),
    }
}

/// What serde's `message` says a key expects, in an operator's words (None: it does not say).
pub fn expected_in(message: &str) -> Option<String> {
    message.rsplit_once(", expected ").map(|(_, w)| expected(w))
}

/// The reason a key's value did not deserialise, from serde's `message` about `value`: the
/// value, what it is and what the key expects.
pub fn wrong_value(value: &toml::Value, message: &str) -> String {
    let (head, want) = match message.rsplit_once(", expected ") {
        Some((h, w)) => (h, Some(w)),
        None => (message, None),
    };
    let v = shown(value);
    let about_an_element = matches!(value, toml::Value::Array(_))
        && !head.contains("sequence")
        && !head.contains("array");
    match want {
        Some(w) if about_an_element => format!("{v}: each element must be {}", expected(w)),
        Some(w) if head.starts_with("invalid type:") => {
            format!("{v} is {}, expected {}", kind(value), expected(w))
        }
        Some(w) if head.starts_with("invalid value:") => {
            format!("{v} is out of range, expected {}", expected(w))
        }
        _ => format!("{v}: {}", without_quotes(message)),
    }
}

/// An integer literal that no TOML integer holds, where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oversized {
    /// `section.key` (`section.key[i]` in an array).
    pub key: String,
    /// The literal's bytes in the text.
    pub span: Range<usize>,
    /// The literal as written (digits only, so safe to show).
    pub literal: String,
}

impl Oversized {
    /// The reason, for the key's error.
    pub fn reason(&self, expected: &str) -> String {
        format!(
            "{} is larger than any TOML integer (at most {TOML_MAX}), expected {expected}",
            printable(&self.literal)
        )
    }
}

/// Every integer of the document beyond TOML's range, in the order of the text.
pub fn oversized(doc: &DeTable<'_>) -> Vec<Oversized> {
    let mut out = Vec::new();
    for (k, v) in doc.iter() {
        walk(k.get_ref(), v, &mut out);
    }
    out.sort_by_key(|o| o.span.start);
    out
}

fn walk(path: &str, v: &toml::Spanned<DeValue<'_>>, out: &mut Vec<Oversized>) {
    match v.get_ref() {
        DeValue::Integer(i) if i64::from_str_radix(i.as_str(), i.radix()).is_err() => {
            out.push(Oversized {
                key: path.to_string(),
                span: v.span(),
                literal: i.to_string(),
            });
        }
        DeValue::Table(t) => {
            for (k, v) in t.iter() {
                walk(&format!("{path}.{}", k.get_ref()), v, out);
            }
        }
        DeValue::Array(a) => {
            for (i, e) in a.iter().enumerate() {
                walk(&format!("{path}[{i}]"), e, out);
            }
        }
        _ => {}
    }
}

/// `text` with each of `spans` (ascending, not overlapping) replaced by `0`: a document the
/// parser reads whole, whose keys at those spans are then dropped.
pub fn without(text: &str, found: &[Oversized]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for o in found {
        out.push_str(&text[from..o.span.start]);
        out.push('0');
        from = o.span.end;
    }
    out.push_str(&text[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_value_is_shown_with_its_kind_and_what_the_key_expects() {
        let s = toml::Value::String("fast".into());
        assert_eq!(
            wrong_value(&s, "invalid type: string \"fast\", expected u64"),
            "\"fast\" is a string, expected an integer in 0..=9223372036854775807"
        );
        assert_eq!(
            wrong_value(
                &toml::Value::Integer(5_000_000_000),
                "invalid value: integer `5000000000`, expected u32"
            ),
            "5000000000 is out of range, expected an integer in 0..=4294967295"
        );
        let long = toml::Value::String("x\n".repeat(100));
        let w = wrong_value(&long, "invalid type: string \"…\", expected a boolean");
        assert!(
            w.ends_with("…\" is a string, expected true or false") || w.contains("…"),
            "{w}"
        );
        assert!(!w.contains('\n'), "{w:?}");
    }

    #[test]
    fn integers_beyond_toml_are_found_with_their_key_and_blanked() {
        let text =
            "[policy]\nwindow_ticks = 99999999999999999999\n[a]\nb = [1, 18446744073709551615]\n";
        let (doc, errs) = DeTable::parse_recoverable(text);
        assert!(errs.is_empty());
        let found = oversized(doc.get_ref());
        let keys: Vec<&str> = found.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["policy.window_ticks", "a.b[1]"]);
        assert_eq!(found[0].literal, "99999999999999999999");
        let blank = without(text, &found);
        assert!(toml::from_str::<toml::Table>(&blank).is_ok(), "{blank}");
    }
}
