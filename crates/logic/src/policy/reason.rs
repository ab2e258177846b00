//! Why the policy did what it did. A reason keeps its numbers and is formatted only when
//! someone reads it (a tick for 64 devices stays cheap), and a test asks which reason it
//! is, not how it reads. The rarer holds are still text built where they are decided.
//! The enum and the wordings the modes share are here; each mode words its own reasons in
//! its file, beside the rules that give them, and the dispatcher (`policy.rs`) implements
//! `Display` by sending each reason to its wording.

use super::signature::SignatureChange;
use super::{Mode, Signature, Worth};
use crate::decision::Level;
use serde::Serialize;
use std::borrow::Cow;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(into = "String")]
pub enum Reason {
    /// Text from outside the policy (the daemon's notes: a failed write, a retry).
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
    /// No level below `at` can be priced yet (the saving is unknown, `worth`'s basis says
    /// why): merging stays on. Not a verdict of "not worth it": nothing was measured.
    SavingUnknown {
        at: Level,
        worth: Box<Worth>,
    },
    /// A step down (`step`, its own reason) from a level where the saving was last judged
    /// not worth it or unknown: what changed is the saving, `now` in words.
    WorthChanged(Box<(Reason, String)>),
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
    /// At L3 after a reload set `[policy] disabled_nomerges` under 2: the config no longer
    /// allows L3: back to `to`.
    L3NoLongerAllowed {
        disabled_nomerges: u8,
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
    /// At L3, the tap's sample shows mergeable I/O (its mergeable share at or over the
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
    /// No window closed at this tick, in the merging, probing or trial mode.
    WindowOpen(Mode),
    /// An idle window during a probe or a trial: it does not count.
    IdleDoesNotCount(Mode),
    /// Merging that pays at `level` starts a trial of L2 for `windows` windows.
    TrialStart {
        level: Level,
        ratio: f64,
        bios_per_sec: f64,
        windows: u32,
    },
    /// Low windows enough for the step to L3, but at `level` for less than the dwell time.
    Dwell {
        ratio: f64,
        low: f64,
        windows: u32,
        level: Level,
        at_level_ms: u64,
        dwell_ms: u64,
    },
    /// A step down is due but the hour's changes reach the cap (`windows`: the low windows
    /// counted, said for a step to L3).
    CapReached {
        ratio: f64,
        low: f64,
        windows: Option<u32>,
        cap: u32,
        level: Level,
    },
    /// One rung down after `windows` low windows.
    StepDown {
        ratio: f64,
        low: f64,
        windows: u32,
        bios_per_sec: f64,
        level: Level,
        next: Level,
    },
    /// The last step, to L3, after `windows` low windows.
    StepToL3 {
        ratio: f64,
        low: f64,
        windows: u32,
        bios_per_sec: f64,
        level: Level,
        next_probe_in_ms: u64,
    },
    /// Straight to L3: the low windows are of a workload that settled at L3 before.
    KnownHostileToL3(Box<KnownHostileToL3>),
    /// No step to L3 for `remaining_ms` more: the bio tap's last call for merging at L3
    /// was not borne out by the counters at L0.
    L3HeldOff {
        level: Level,
        remaining_ms: u64,
    },
    /// Straight from L0 to L3: not one bio merged in `windows` busy windows at L0, where
    /// every kind of merge is tried, and a bio tap watches L3. The rungs between would
    /// each count zero merges again; the tap watches for the change a dwell there waits
    /// for.
    NothingMergesToL3 {
        windows: u32,
        bios_per_sec: f64,
        next_probe_in_ms: u64,
    },
    /// At L3, the workload changed to one already found merge-hostile: no probe.
    KnownHostileChange {
        change: SignatureChange,
        next_probe_in_ms: u64,
    },
    /// At L3 the workload differs from the baseline, but not yet for long enough to count
    /// ([`SignatureChange::confirmed`]).
    ChangeUnconfirmed(Box<ChangeUnconfirmed>),
    /// At L3 a change in rate alone has lasted: the bio tap's next sample answers it (a
    /// slower or faster workload of the same shape is no sign of merges; contention is the
    /// likelier cause).
    RateChangeAwaitsTap {
        from_per_sec: f64,
        to_per_sec: f64,
        lasted_ms: u64,
        next_probe_in_ms: u64,
    },
    /// At L3 the tap's sample calls for merging, `samples` of the `of` in a row that
    /// bring merging back: a lone burst does not.
    SensedOnce {
        share: f64,
        sampled: u64,
        high: f64,
        samples: u32,
        of: u32,
    },
    /// At L3 the workload changed, but the tap's sample, clearly low, answers it.
    ChangeAnsweredByTap(Box<ChangeAnsweredByTap>),
    /// The timed probe, after `off_for_ms` at L3, for `windows` busy windows.
    TimedProbe {
        off_for_ms: u64,
        windows: u32,
    },
    /// A probe's busy window `window` of `of`.
    ProbeWindow {
        window: u32,
        of: u32,
        ratio: f64,
    },
    /// A probe that saw only idle windows ends at L0.
    ProbeInconclusive {
        idle_windows: u32,
    },
    /// A probe found merging rare, but L3 is no place to go back to here (`why`): L0
    /// stays.
    ProbeLowNoL3 {
        ratio: f64,
        low: f64,
        bios: u64,
        why: NoL3,
    },
    /// A probe found merging rare: back to L3.
    ProbeFoundNone {
        ratio: f64,
        low: f64,
        bios: u64,
        next_probe_in_ms: u64,
    },
    /// A probe found merges: L0 stays, and with `trial_windows`, a trial of L2 starts.
    ProbeFoundMerges {
        ratio: f64,
        low: f64,
        bios: u64,
        trial_windows: Option<u32>,
    },
    /// A trial of L2 that saw only idle windows: back to `back`.
    TrialInconclusive {
        back: Level,
    },
    /// A trial's busy window, before its last.
    TrialMeasuring,
    /// The trial of L2 completed no more requests per bio than its limit: L2 stays.
    TrialKeptMerges {
        requests_per_bio: f64,
        baseline_per_bio: f64,
        limit_per_bio: f64,
        back: Level,
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

/// Why L3 is no level to rest at on a device, as a probe that found merging rare says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoL3 {
    /// No bio tap: the merge counters are blind at L3.
    Blind,
    /// The config's deepest level allowed is L2 (`[policy] disabled_nomerges`).
    NotAllowed,
    /// The saving at L3 is not known yet (nothing priced it): no verdict.
    SavingUnknown,
    /// Priced, L3 saves too little here.
    NotWorth,
}

impl std::fmt::Display for NoL3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NoL3::Blind => "L3 would be blind (no bio tap)",
            NoL3::NotAllowed => "the config does not allow L3",
            NoL3::SavingUnknown => "the saving at L3 is unknown (not priced yet)",
            NoL3::NotWorth => "L3 is not worth it here",
        })
    }
}

/// [`Reason::KnownHostileToL3`]'s numbers (boxed: a rare decision, kept out of the size of
/// every reason).
#[derive(Debug, Clone, PartialEq)]
pub struct KnownHostileToL3 {
    pub ratio: f64,
    pub low: f64,
    pub windows: u32,
    pub bios_per_sec: f64,
    /// The workload as it settled at L3 before.
    pub known: Signature,
    pub level: Level,
    pub next_probe_in_ms: u64,
}

/// [`Reason::ChangeUnconfirmed`]'s numbers (boxed, as above).
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeUnconfirmed {
    pub change: SignatureChange,
    /// Busy windows in a row that showed it.
    pub windows: u32,
    pub lasted_ms: u64,
    pub next_probe_in_ms: u64,
}

/// [`Reason::ChangeAnsweredByTap`]'s numbers (boxed, as above).
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeAnsweredByTap {
    pub change: SignatureChange,
    pub share: f64,
    pub sampled: u64,
    pub low: f64,
    pub next_probe_in_ms: u64,
}

impl Reason {
    pub fn contains(&self, needle: &str) -> bool {
        self.to_string().contains(needle)
    }

    /// Whether the device waits for an answer only the bio tap gives, so that the daemon
    /// takes a sample now rather than at the duty cycle's next one: at L3, a change in
    /// rate alone (confirmed or not yet: a sample that sees mergeable I/O brings merging
    /// back before the change has lasted).
    pub fn asks_the_tap(&self) -> bool {
        matches!(
            self,
            Reason::RateChangeAwaitsTap { .. } | Reason::ChangeUnconfirmed(_)
        )
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

/// The wording of the reasons every mode may give (the daemon's notes, an idle window, a
/// window still open, a level not worth it); each mode words its own beside its rules, and
/// `Reason`'s `Display` (in the policy's dispatcher) sends each reason to its wording.
pub(super) fn wording(reason: &Reason, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    match reason {
        Reason::Text(t) => f.write_str(t),
        Reason::Idle { bios, min_bios } => {
            write!(f, "idle window: {bios} bios < {min_bios} (no decision)")
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
        Reason::SavingUnknown { at, worth } => write!(
            f,
            "{}: merging stays on at {at} until a level below it is priced",
            worth.describe([])
        ),
        Reason::WorthChanged(b) => {
            let (step, now) = &**b;
            write!(
                f,
                "{step} (the saving was not worth it or unknown before; now {now})"
            )
        }
        Reason::LeaveNotWorth { from, why, to } => {
            write!(f, "{from} not worth it here: {why}; back to {to}")
        }
        Reason::WindowOpen(mode) => f.write_str(match mode {
            Mode::Probing => "probing; window still open",
            Mode::Trial => "trial of L2; window still open",
            Mode::Merging | Mode::AtL3 => "window still open",
        }),
        Reason::IdleDoesNotCount(mode) => f.write_str(match mode {
            Mode::Trial => "trial of L2; idle window does not count",
            _ => "probing; idle window does not count",
        }),
        _ => unreachable!("{reason:?} is worded by its mode"),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every evaluation carries a reason and is moved several times per device per tick:
    /// the rare, large reasons are boxed to keep this.
    #[test]
    fn a_reason_stays_at_most_40_bytes() {
        assert!(
            std::mem::size_of::<Reason>() <= 40,
            "{}",
            std::mem::size_of::<Reason>()
        );
    }
}
