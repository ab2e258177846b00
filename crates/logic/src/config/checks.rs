//! The rules a config value is checked against, written once: a problem names its key, and
//! [`Checks`] holds the common rules (at least 1, a count under a bound, a range) so that a
//! value out of range reads the same in every section. The whole config reports through
//! [`Problems`] (each problem a [`ConfigError`] naming the config's origin); a section that
//! checks itself alone (`[sense]`, `[pricing]`) through [`KeyProblems`].

use super::ConfigError;
use std::fmt::Display;
use std::ops::RangeInclusive;

/// Where checks report; the common rules are its default methods.
pub(crate) trait Checks {
    /// Records that `key` is wrong, and why.
    fn push(&mut self, key: &str, reason: impl Into<String>);

    fn at_least_one(&mut self, key: &str, v: u64) {
        if v == 0 {
            self.push(key, "is 0, must be at least 1");
        }
    }

    /// A count in `1..=max`, `why` saying what the bound protects.
    fn count(&mut self, key: &str, v: u64, max: u64, why: &str) {
        if v == 0 {
            self.at_least_one(key, v);
        } else if v > max {
            self.push(
                key,
                format!("{v} is more than {max}, the most allowed: {why}"),
            );
        }
    }

    /// Whether `v` lies in `range` (NaN never does); when not, says so.
    fn within<T: PartialOrd + Display>(
        &mut self,
        key: &str,
        v: T,
        range: RangeInclusive<T>,
    ) -> bool {
        let inside = range.contains(&v);
        if !inside {
            let (lo, hi) = range.into_inner();
            self.push(key, format!("{v} is outside {lo}..={hi}"));
        }
        inside
    }
}

/// The problems `validate` finds, each naming its key, collected so that one run names
/// them all.
pub(super) struct Problems<'a> {
    pub(super) origin: &'a str,
    pub(super) found: Vec<ConfigError>,
}

impl Checks for Problems<'_> {
    fn push(&mut self, key: &str, reason: impl Into<String>) {
        self.found.push(super::invalid(self.origin, key, reason));
    }
}

impl Problems<'_> {
    pub(super) fn into_result(mut self) -> Result<(), ConfigError> {
        match self.found.len() {
            0 => Ok(()),
            1 => Err(self.found.remove(0)),
            _ => Err(ConfigError::Many {
                origin: self.origin.to_string(),
                errors: self.found,
            }),
        }
    }
}

/// The problems of one section checked on its own: `(key, reason)` in the order found.
#[derive(Debug, Default)]
pub(crate) struct KeyProblems(pub(crate) Vec<(String, String)>);

impl Checks for KeyProblems {
    fn push(&mut self, key: &str, reason: impl Into<String>) {
        self.0.push((key.to_string(), reason.into()));
    }
}
