//! Why the policy did what it did. The frequent "nothing to do" reasons keep their numbers
//! and are formatted only when someone reads them (a tick for 64 devices stays cheap); the
//! rest are text built where the decision is taken.

use super::Worth;
use crate::decision::Level;
use serde::Serialize;
use std::borrow::Cow;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(into = "String")]
pub enum Reason {
    Text(Cow<'static, str>),
    Idle {
        bios: u64,
        min_bios: u64,
    },
    Pays {
        level: Level,
        ratio: f64,
        low: f64,
        bios_per_sec: f64,
    },
    LowWindow {
        ratio: f64,
        low: f64,
        bios_per_sec: f64,
        n: u32,
        k: u32,
        next: Level,
    },
    AtL3 {
        next_probe_in_ms: u64,
    },
    /// No level below `at` that the device can reach saves measurably (`below` marks the
    /// levels considered, by index). The worth is boxed: inline it made every reason (and
    /// so every evaluation, moved several times per device per tick) four times larger.
    NotWorth {
        at: Level,
        below: [bool; 4],
        worth: Box<Worth>,
    },
}

impl Reason {
    pub fn contains(&self, needle: &str) -> bool {
        self.to_string().contains(needle)
    }
}

impl From<Reason> for String {
    fn from(r: Reason) -> String {
        r.to_string()
    }
}

impl From<&'static str> for Reason {
    fn from(s: &'static str) -> Reason {
        Reason::Text(Cow::Borrowed(s))
    }
}

impl From<String> for Reason {
    fn from(s: String) -> Reason {
        Reason::Text(Cow::Owned(s))
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Text(t) => f.write_str(t),
            Reason::Idle { bios, min_bios } => {
                write!(f, "idle window: {bios} bios < {min_bios} (no decision)")
            }
            Reason::Pays {
                level,
                ratio,
                low,
                bios_per_sec,
            } => write!(
                f,
                "merging pays at {level}: merge ratio {} >= {} at {bios_per_sec:.0} bios/s",
                pct(*ratio),
                pct(*low)
            ),
            Reason::LowWindow {
                ratio,
                low,
                bios_per_sec,
                n,
                k,
                next,
            } => write!(
                f,
                "merge ratio {} < {} at {bios_per_sec:.0} bios/s: low window {n} of {k} before {next}",
                pct(*ratio),
                pct(*low)
            ),
            Reason::AtL3 { next_probe_in_ms } => {
                write!(f, "at L3; next probe in {}", secs(*next_probe_in_ms))
            }
            Reason::NotWorth { at, below, worth } => {
                let levels = Level::ALL
                    .into_iter()
                    .filter(|l| below[usize::from(l.index())]);
                write!(
                    f,
                    "not worth it here: {} (no level below {at} clears the bar); staying at {at}",
                    worth.describe(levels)
                )
            }
        }
    }
}

/// A ratio as a percentage: one decimal under 10%, none above.
pub(super) fn pct(x: f64) -> String {
    let p = x * 100.0;
    if p < 10.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

/// A duration in seconds: whole seconds when exact.
pub(super) fn secs(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}
