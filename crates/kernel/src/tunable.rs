//! The vocabulary every layer shares: the tunables mergetune may write. Plain data, no I/O.
//!
//! A [`Tunable`] is a closed set: these are the only files under a device's `queue/`
//! directory that mergetune ever writes, and the only ones a state file may name. Anything
//! else read from outside (a state file, a recording) that does not parse into one is
//! refused, so no input can make mergetune write another path.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A device tunable mergetune may write, relative to `/sys/block/<dev>/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
pub enum Tunable {
    /// `queue/nomerges`: 0 all merges, 1 simple merges only, 2 none.
    Nomerges,
    /// mq-deadline's `queue/iosched/front_merges` (0/1).
    FrontMerges,
    /// mq-deadline's `queue/iosched/writes_starved`.
    WritesStarved,
    /// mq-deadline's `queue/iosched/read_expire` (ms).
    ReadExpire,
    /// bfq's `queue/iosched/timeout_sync` (ms).
    TimeoutSync,
}

impl Tunable {
    pub const ALL: [Tunable; 5] = [
        Tunable::Nomerges,
        Tunable::FrontMerges,
        Tunable::WritesStarved,
        Tunable::ReadExpire,
        Tunable::TimeoutSync,
    ];

    /// The file relative to the device directory.
    pub fn rel_path(self) -> &'static str {
        match self {
            Tunable::Nomerges => "queue/nomerges",
            Tunable::FrontMerges => "queue/iosched/front_merges",
            Tunable::WritesStarved => "queue/iosched/writes_starved",
            Tunable::ReadExpire => "queue/iosched/read_expire",
            Tunable::TimeoutSync => "queue/iosched/timeout_sync",
        }
    }

    /// The file's own name (`nomerges`, `writes_starved`, ...).
    pub fn file_name(self) -> &'static str {
        let p = self.rel_path();
        &p[p.rfind('/').map_or(0, |i| i + 1)..]
    }

    /// The tunable a relative path names, if it is one mergetune may write: exact match
    /// only (no `..`, no leading `/`, no other file).
    pub fn from_rel_path(rel: &str) -> Option<Tunable> {
        Tunable::ALL.into_iter().find(|t| t.rel_path() == rel)
    }

    /// Whether `value` is a value this tunable can hold: decimal digits within the
    /// kernel's range for it. A state file can only ever put back such a value.
    pub fn accepts(self, value: &str) -> bool {
        if value.is_empty() || value.len() > 10 || !value.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        let Ok(v) = value.parse::<u64>() else {
            return false;
        };
        match self {
            Tunable::Nomerges => v <= 2,
            Tunable::FrontMerges => v <= 1,
            Tunable::WritesStarved | Tunable::ReadExpire | Tunable::TimeoutSync => {
                v <= u64::from(u32::MAX)
            }
        }
    }

    /// Whether the merge ladder (rather than the slice tuner) owns this tunable.
    pub fn is_ladder(self) -> bool {
        matches!(self, Tunable::Nomerges | Tunable::FrontMerges)
    }
}

impl fmt::Display for Tunable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rel_path())
    }
}

impl From<Tunable> for &'static str {
    fn from(t: Tunable) -> &'static str {
        t.rel_path()
    }
}

impl TryFrom<String> for Tunable {
    type Error = String;
    fn try_from(s: String) -> Result<Tunable, String> {
        Tunable::from_rel_path(&s).ok_or_else(|| format!("{s:?} is not a tunable mergetune writes"))
    }
}

/// Whether `name` is a plain `/sys/block` entry name: what the kernel uses for disks
/// (`sda`, `nvme0n1`, `dm-0`, `cciss!c0d0`), never a path.
pub fn is_plain_device_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':' | b'!' | b'+')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_known_files_are_tunables() {
        for t in Tunable::ALL {
            assert_eq!(Tunable::from_rel_path(t.rel_path()), Some(t));
        }
        for bad in [
            "/tmp/x/victim",
            "../../../../etc/passwd",
            "queue/../../../etc/passwd",
            "queue/nomerges/../scheduler",
            "queue/scheduler",
            "queue/iosched/../nomerges",
            "",
        ] {
            assert_eq!(Tunable::from_rel_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn values_are_bounded_decimal_numbers() {
        assert!(Tunable::Nomerges.accepts("2"));
        assert!(!Tunable::Nomerges.accepts("3"));
        assert!(!Tunable::Nomerges.accepts("0\n1"));
        assert!(!Tunable::FrontMerges.accepts("-1"));
        assert!(Tunable::ReadExpire.accepts("500"));
        assert!(!Tunable::ReadExpire.accepts("99999999999"));
        assert!(!Tunable::TimeoutSync.accepts(""));
    }

    #[test]
    fn device_names_are_plain_sysfs_names() {
        for ok in ["sda", "nvme0n1", "dm-0", "cciss!c0d0", "loop7", "md127"] {
            assert!(is_plain_device_name(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../sda",
            "sda/queue",
            "/dev/sda",
            "a b",
            ".hidden",
        ] {
            assert!(!is_plain_device_name(bad), "{bad}");
        }
    }
}
