//! Why the policy did what it did. A reason keeps its numbers and is formatted only when
//! someone reads it (a tick for 64 devices stays cheap), and a test asks which reason it
//! is, not how it reads. The rarer holds are still text built where they are decided.

use super::Worth;
use super::signature::SignatureChange;
use crate::decision::{Level, count};
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
    /// Merges are still counted at `level` (over the high threshold): back to L0.
    StillMerging {
        level: Level,
        ratio: f64,
        high: f64,
        bios_per_sec: f64,
    },
    /// `from` saves nothing measurable here any more (`why`, from the cost profile): back
    /// to `to`.
    LeaveNotWorth {
        from: Level,
        why: String,
        to: Level,
    },
    /// At L3 without a bio tap, where the merge counters are blind: back to `to`.
    BlindAtL3 {
        to: Level,
    },
    /// Low windows at the deepest level allowed here; `l3_blind` when L3 is allowed by the
    /// config but would be blind (no bio tap).
    DeepestAllowed {
        level: Level,
        ratio: f64,
        low: f64,
        l3_blind: bool,
    },
    /// At L3, the tap's sample shows mergeable I/O (its contiguous share at or over the
    /// high threshold): back to L0.
    SensedMergeable {
        share: f64,
        sampled: u64,
        high: f64,
    },
    /// A timed probe answered at L3 by a sample clearly under the low threshold.
    AnsweredByTap {
        share: f64,
        sampled: u64,
        low: f64,
        next_probe_in_ms: u64,
    },
    /// A workload change at L3 starts a probe at once, for `windows` busy windows.
    ProbeOnChange {
        change: SignatureChange,
        windows: u32,
    },
    /// The trial of L2 completed more requests per bio than its limit: back to `back`.
    TrialLostMerges {
        requests_per_bio: f64,
        baseline_per_bio: f64,
        limit_per_bio: f64,
        back: Level,
        next_trial_in_ms: u64,
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
            Reason::StillMerging {
                level,
                ratio,
                high,
                bios_per_sec,
            } => write!(
                f,
                "merges still counted at {level}: ratio {} >= {} at {bios_per_sec:.0} bios/s; back to L0",
                pct(*ratio),
                pct(*high)
            ),
            Reason::LeaveNotWorth { from, why, to } => {
                write!(f, "{from} not worth it here: {why}; back to {to}")
            }
            Reason::BlindAtL3 { to } => write!(
                f,
                "no bio tap at L3: the merge counters are blind there; back to {to}"
            ),
            Reason::DeepestAllowed {
                level,
                ratio,
                low,
                l3_blind,
            } => write!(
                f,
                "merge ratio {} < {} at {level}, the deepest level allowed here{}",
                pct(*ratio),
                pct(*low),
                if *l3_blind {
                    " (L3 would be blind: no bio tap)"
                } else {
                    ""
                }
            ),
            Reason::SensedMergeable {
                share,
                sampled,
                high,
            } => write!(
                f,
                "sensed at L3: {} of {sampled} sampled bios start where a recent bio of the same direction ended (>= {}): merging would find them; back to L0",
                pct(*share),
                pct(*high)
            ),
            Reason::AnsweredByTap {
                share,
                sampled,
                low,
                next_probe_in_ms,
            } => write!(
                f,
                "probe answered by the tap at L3: {} of {sampled} sampled bios contiguous (< {}); staying, next probe in {}",
                pct(*share),
                pct(*low),
                secs(*next_probe_in_ms)
            ),
            Reason::ProbeOnChange { change, windows } => write!(
                f,
                "workload changed at L3 ({change}): probing at once, L0 for {}",
                count(u64::from(*windows), "busy window")
            ),
            Reason::TrialLostMerges {
                requests_per_bio,
                baseline_per_bio,
                limit_per_bio,
                back,
                next_trial_in_ms,
            } => write!(
                f,
                "L2 lost merges: {:.1} requests per 100 bios vs {:.1} at {back} (limit {:.1}); back to {back}, next trial in {}",
                requests_per_bio * 100.0,
                baseline_per_bio * 100.0,
                limit_per_bio * 100.0,
                secs(*next_trial_in_ms)
            ),
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
