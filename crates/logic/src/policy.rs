//! The merge policy: a pure function of (state, closed window, device capabilities, config,
//! now) to (new state, outcome with a human reason). No I/O, no clock: the same inputs give
//! the same outputs, which is what makes every decision explainable and replayable.
//!
//! Merging is a ladder (L0 everything, L1 no front merges, L2 nomerges=1, L3 nomerges=2),
//! walked down one step at a time after enough low windows, and up at once when merges are
//! seen; L3 is left only by a probe or by what the bio tap sees there, and a step down is
//! taken only toward a level the cost profile says saves measurably ([`Worth`], in
//! [`Caps`]). docs/policy.md has every rule and threshold; docs/design.md the 2008 thread
//! the ladder answers.
//!
//! This file holds the state, the capabilities, the outcome and the dispatcher [`decide`];
//! each mode's rules live in their own file (`merging`, `off`, `probing`, `trial`), the
//! reasons in [`reason`] and the workload signatures in [`signature`].

/// One step of a mode's decision: `Break` ends it with an evaluation, `Continue` hands the
/// state (and what the step found) on to the next step.
type Step<T> = std::ops::ControlFlow<Evaluation, T>;

/// What a step that continued handed on; the step's evaluation out of the caller else.
macro_rules! then {
    ($step:expr) => {
        match $step {
            std::ops::ControlFlow::Continue(v) => v,
            std::ops::ControlFlow::Break(e) => return e,
        }
    };
}

mod merging;
mod off;
pub mod possible;
mod probing;
pub mod reason;
pub mod signature;
mod trial;

use crate::pricing::worth::{Basis, Worth};
pub use reason::Reason;
pub use signature::Signature;

use crate::config::PolicyConfig;
use crate::decision::{DecisionKind, Level};
use crate::sampler::{Counters, Window};
use mergetune_kernel::scheduler::Scheduler;
use mergetune_kernel::tunable::Tunable;
use serde::{Deserialize, Serialize};

pub use crate::hourly::{ChangesLastHour, HOUR_MS};
/// How many merge-hostile workload signatures a device remembers.
pub const KNOWN_HOSTILE_MAX: usize = 4;
/// The deepest rung of the ladder (L3, no merges).
pub const DEEPEST_LEVEL: Level = Level::DEEPEST;
/// The first hold-off on steps to L3 after the bio tap called for merging at L3 and the
/// counters at L0 then showed it finding nothing; doubled at each such call in a row, up
/// to `probe_max_backoff_secs`.
pub const TAP_HOLDOFF_INITIAL_MS: u64 = 60_000;
/// How long a live saving at L3 must stay under the floor (its upper bound, window after
/// settled window) before L3 is left for lack of worth. Resting at L3 where it saves too
/// little costs nothing but the saving (the tap and the probes still bring merging back
/// for mergeable I/O), while each change freezes the queue; and a CPU-bound device under
/// contention runs at half its rate for seconds at a time (with two busy loops beside fio
/// on a loop device: "L3 saves 3.20 ms/s [2.11, 4.96]" at the contended rate, 26 s after
/// a step taken at 273,084 bios/s, then back down 4 s later).
pub const LEAVE_L3_NOT_WORTH_AFTER_MS: u64 = 30_000;
/// The bio tap's samples in a row (one every `[sense] every_ms`, 2 s by default) that must
/// call for merging before L3 is left for it, unless one is decisive
/// ([`TAP_DECISIVE_SHARE`]). A share just over the high threshold is what chance gives a
/// fast random load (11-18% of 512 sampled bios on random 4 KiB reads that the kernel
/// merged 0.0% of): a lone such sample, over before the next, does not pay for leaving
/// L3 (two writes at least, each a queue freeze), while mergeable I/O that stays is seen
/// again by the next sample.
pub const TAP_CONFIRM_SAMPLES: u32 = 2;
/// A sample at least this mergeable brings merging back with no second one: chance does
/// not make half of a random load's bios mergeable, and a real sequential stream at L3
/// loses up to 43% of its throughput for as long as it waits (each 2 s sample of waiting
/// on `same_signature`, random writes turning sequential at the same rate, size and read
/// share, took it past the 1-window reaction target).
pub const TAP_DECISIVE_SHARE: f64 = 0.5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// At L0, L1 or L2: the counters still show merges.
    Merging,
    /// At L3 (merging off), waiting for the next probe. Shown as `off`: the level is L3.
    #[serde(rename = "off")]
    AtL3,
    /// At L0 for a measured probe out of L3.
    Probing,
    /// At L2 for a measured trial from L0/L1 while merging pays: does L2 keep the merges?
    Trial,
}

impl Mode {
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Merging => "merging",
            Mode::AtL3 => "off",
            Mode::Probing => "probing",
            Mode::Trial => "trial",
        }
    }
}

/// What a device's queue offers: which rungs of the ladder exist on it, whether the daemon
/// can see at L3, and what each rung saves there.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Caps {
    /// mq-deadline's iosched/front_merges exists and was 1 (L1 available).
    pub front_merges: bool,
    /// The scheduler treats nomerges=1 differently from 0 (mq-deadline, bfq: L2 available).
    pub simple_merges: bool,
    /// The daemon can sample the device's queued bios (the bio tap works), so L3 is not
    /// blind: a switch to mergeable I/O is seen although the merge counters read zero.
    pub sense_at_l3: bool,
    /// What not merging saves per level on this device (from the cost profile).
    pub worth: Worth,
}

impl Caps {
    /// All rungs (mq-deadline).
    pub const FULL: Caps = Caps {
        front_merges: true,
        simple_merges: true,
        sense_at_l3: false,
        worth: Worth::UNPRICED,
    };
    /// none / kyber: only L0 and L3 differ.
    pub const BARE: Caps = Caps {
        front_merges: false,
        simple_merges: false,
        sense_at_l3: false,
        worth: Worth::UNPRICED,
    };

    /// The rungs of a device running `scheduler` (None: one mergetune does not know), from
    /// its table ([`crate::tuners`]); L1 only where front_merges exists.
    pub fn for_scheduler(scheduler: Option<Scheduler>, has_front_merges: bool) -> Caps {
        let rungs = crate::tuners::rungs(scheduler);
        Caps {
            front_merges: has_front_merges && rungs.contains(&Level::L1),
            simple_merges: rungs.contains(&Level::L2),
            sense_at_l3: false,
            worth: Worth::UNPRICED,
        }
    }

    /// The same rungs, priced by a cost profile's table for this device.
    pub fn priced(self, worth: Worth) -> Caps {
        Caps { worth, ..self }
    }

    /// The same rungs, with (or without) sight at L3.
    pub fn sensing(self, sense_at_l3: bool) -> Caps {
        Caps {
            sense_at_l3,
            ..self
        }
    }

    /// Whether this device has the rung `level` (L0 and L3 exist everywhere).
    pub fn has(&self, level: Level) -> bool {
        match level {
            Level::L1 => self.front_merges,
            Level::L2 => self.simple_merges,
            Level::L0 | Level::L3 => true,
        }
    }
}

/// The deepest level the config allows (`[policy] disabled_nomerges`): L3 or L2.
pub fn deepest_allowed(cfg: &PolicyConfig) -> Level {
    if cfg.disabled_nomerges >= 2 {
        Level::L3
    } else {
        Level::L2
    }
}

/// The deepest level the policy may rest at on this device: the config's deepest allowed,
/// but L2 where the daemon cannot see at L3 (no bio tap: the merge counters read zero there).
pub fn deepest_level(cfg: &PolicyConfig, caps: Caps) -> Level {
    let allowed = deepest_allowed(cfg);
    if caps.sense_at_l3 {
        allowed
    } else {
        allowed.min(Level::L2)
    }
}

/// The next level down that exists on this device, within the deepest level allowed.
pub fn next_down(level: Level, caps: Caps, cfg: &PolicyConfig) -> Option<Level> {
    let deepest = deepest_level(cfg, caps);
    Level::ALL
        .into_iter()
        .find(|&l| l > level && l <= deepest && caps.has(l))
}

/// The levels below `level` this device can reach (the candidates of a step down).
fn levels_below(level: Level, caps: Caps, cfg: &PolicyConfig) -> impl Iterator<Item = Level> {
    let deepest = deepest_level(cfg, caps);
    Level::ALL
        .into_iter()
        .filter(move |&l| l > level && l <= deepest && caps.has(l))
}

/// Sampled bios a sensed window needs to be judged: a tap samples a short slice of a
/// window, so a quarter of `min_window_bios`.
pub fn sensed_min_bios(cfg: &PolicyConfig) -> u64 {
    (cfg.min_window_bios / 4).max(1)
}

/// The tunable values of a level, `queue/nomerges` first. `front_merges` is listed only
/// where the device has it and where it matters (L0, L1).
pub fn tunables(level: Level, caps: Caps) -> Vec<(Tunable, &'static str)> {
    let nomerges = match level.nomerges() {
        0 => "0",
        1 => "1",
        _ => "2",
    };
    let mut v = vec![(Tunable::Nomerges, nomerges)];
    // front_merges matters only at L0 and L1; at L2 and L3 nomerges already rules front
    // merges out, so the attribute is left where it is (one write per step, not two).
    if caps.front_merges && level <= Level::L1 {
        v.push((
            Tunable::FrontMerges,
            if level.front_merges() == 1 { "1" } else { "0" },
        ));
    }
    v
}

/// Per-device policy state: what every mode keeps ([`History`]) and the mode the device is
/// in with that mode's own data ([`Phase`]). The level follows from the phase (a probe is
/// at L0, a trial at L2, [`Phase::AtL3`] at L3), so a state whose level and mode disagree
/// cannot be built. Plain data: cloned, compared, serialised for replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyState {
    pub history: History,
    pub phase: Phase,
}

/// What the policy keeps across modes: the pacing of probes and trials, the hour's changes
/// and the workloads found merge-hostile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct History {
    /// When the current level was entered.
    pub since_ms: u64,
    /// The wait before the next timed probe once at L3, doubled after each failed one.
    pub backoff_ms: u64,
    /// The level changes made in the last hour (`[policy] max_changes_per_hour`).
    pub changes: ChangesLastHour,
    /// The wait before the next trial, doubled after each failed one.
    pub trial_backoff_ms: u64,
    /// No trial before this time.
    pub next_trial_at_ms: u64,
    /// Workloads that were found merge-hostile (stepped down to L3 and not thrown out by
    /// the bio tap, a probe found nothing, or the counters at L0 did not bear out the tap's
    /// call), newest last, at most [`KNOWN_HOSTILE_MAX`]. When one of them comes back,
    /// its low windows at L0-L2 take the device straight to L3.
    pub known_hostile: Vec<Signature>,
    /// The next hold-off on steps to L3 when the tap's call for merging is not borne out
    /// at L0 ([`TAP_HOLDOFF_INITIAL_MS`], doubled after each in a row).
    pub tap_holdoff_ms: u64,
    /// No step to L3 before this time: the tap's last call for merging was not borne out.
    pub l3_not_before_ms: u64,
}

/// The mode a device is in, each with what only that mode needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum Phase {
    /// At L0, L1 or L2: the counters still show merges.
    Merging(Merging),
    /// At L3 (merging off), waiting for the next probe.
    #[serde(rename = "off")]
    AtL3(AtL3),
    /// At L0 for a measured probe out of L3.
    Probing(Probe),
    /// At L2 for a measured trial from L0/L1 while merging pays: does L2 keep the merges?
    Trial(Trial),
}

/// The merging mode's data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Merging {
    /// L0, L1 or L2.
    pub level: Level,
    /// Consecutive busy windows under the low threshold at this level.
    pub low_windows: u32,
    /// Consecutive busy windows over the high threshold at L0/L1 (toward a trial of L2).
    pub high_windows: u32,
    /// Consecutive busy windows at L0 in which not one bio merged (toward the step
    /// straight to L3).
    pub empty_windows: u32,
    /// L0 was reached because the bio tap at L3 called for merging: the next busy window
    /// tells whether the counters bear it out.
    pub tap_called: bool,
    /// The tap's call was not borne out here (the counters at L0 found next to nothing):
    /// while steps to L3 are held off, the rungs between are not walked either (L0 has
    /// shown what merging finds; each rung is a write), and when the hold-off ends the
    /// workload, remembered as merge-hostile, goes straight back to L3.
    pub tap_refuted: bool,
    /// L2 was reached by a successful trial: its merges are the workload's merges, so a
    /// high ratio there is no reason to go back to L0.
    pub l2_verified: bool,
    /// "Not worth it here" was said at this level for the current run of low windows (it
    /// is a decision once, then a hold).
    pub not_worth_noted: bool,
    /// "Not worth it: saving unknown" was said: said again once the saving is known.
    pub unknown_noted: bool,
    /// Busy windows seen at this level since it was entered (saturating). The first holds
    /// the queue freeze of the write that led here (a drain of the device's queue): its rate
    /// is no measure of the level, so the level's worth is judged from the second.
    pub busy_windows: u32,
    /// Consecutive busy windows at this level in which a level below was worth stepping
    /// down to at that window's own rate: a step down needs as many of them as low windows,
    /// so that it is not taken on one fast window.
    pub worth_windows: u32,
}

impl Merging {
    /// Just arrived at `level`: nothing counted yet.
    fn at(level: Level) -> Merging {
        Merging {
            level,
            low_windows: 0,
            high_windows: 0,
            empty_windows: 0,
            tap_called: false,
            tap_refuted: false,
            l2_verified: false,
            not_worth_noted: false,
            unknown_noted: false,
            busy_windows: 0,
            worth_windows: 0,
        }
    }
}

/// The off mode's data (L3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AtL3 {
    /// When the next timed probe starts (None: at the next tick).
    pub next_probe_at_ms: Option<u64>,
    /// The workload's signature when L3 was entered: at L3 the counters cannot show missed
    /// merges, but they still show a workload change, which starts a probe at once. None
    /// until a busy window gives one. Its rate is re-taken at L3 (see
    /// [`signature::RATE_BASELINE_AFTER_WINDOWS`]) and then is the fastest unchanged
    /// window's.
    pub signature: Option<Signature>,
    /// Busy windows seen at L3 since it was entered (saturating).
    pub busy_windows: u32,
    /// The start of the first of the consecutive busy windows that differed from
    /// `signature` (None when the last one did not): a change counts only once it has
    /// lasted ([`SignatureChange::confirmed`](signature::SignatureChange::confirmed)).
    pub changed_since_ms: Option<u64>,
    /// How many busy windows in a row have differed from `signature`.
    pub changed_windows: u32,
    /// The bio tap's samples in a row that called for merging (a mergeable share at or
    /// over the high threshold): L3 is left for them only at [`TAP_CONFIRM_SAMPLES`].
    pub tap_high_samples: u32,
    /// Since when every settled window at L3 has priced the live saving's upper bound under
    /// the floor (None while it is kept): L3 is left for lack of worth only once this has
    /// lasted [`LEAVE_L3_NOT_WORTH_AFTER_MS`].
    pub not_kept_since_ms: Option<u64>,
}

/// Counters accumulated over the busy windows of a probe or a trial.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Measured {
    pub counters: Counters,
    pub windows_done: u32,
    pub idle_windows: u32,
}

/// What started a probe.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeCause {
    /// The timed probe.
    Timer,
    /// A workload change at L3. A failure then does not double the backoff, and the timed
    /// probe it came before keeps its time (`timer_at_ms`).
    Change { timer_at_ms: Option<u64> },
}

/// The probing mode's data (at L0).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Probe {
    pub measured: Measured,
    pub cause: ProbeCause,
}

/// The trial mode's data (at L2).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trial {
    pub measured: Measured,
    /// The window measured at the level the trial started from.
    pub baseline: Counters,
    /// The level the trial started from (to go back to).
    pub from_level: Level,
}

impl Phase {
    /// The ladder level this phase stands at.
    pub fn level(&self) -> Level {
        match self {
            Phase::Merging(m) => m.level,
            Phase::AtL3(_) => DEEPEST_LEVEL,
            Phase::Probing(_) => Level::L0,
            Phase::Trial(_) => Level::L2,
        }
    }

    /// The mode's name, as shown and exported.
    pub fn mode(&self) -> Mode {
        match self {
            Phase::Merging(_) => Mode::Merging,
            Phase::AtL3(_) => Mode::AtL3,
            Phase::Probing(_) => Mode::Probing,
            Phase::Trial(_) => Mode::Trial,
        }
    }
}

impl PolicyState {
    pub fn new(now_ms: u64, cfg: &PolicyConfig) -> Self {
        PolicyState {
            history: History {
                since_ms: now_ms,
                backoff_ms: cfg.probe_initial_backoff_secs * 1000,
                changes: ChangesLastHour::default(),
                trial_backoff_ms: cfg.probe_initial_backoff_secs * 1000,
                next_trial_at_ms: 0,
                known_hostile: Vec::new(),
                tap_holdoff_ms: TAP_HOLDOFF_INITIAL_MS,
                l3_not_before_ms: 0,
            },
            phase: Phase::Merging(Merging::at(Level::L0)),
        }
    }

    /// The ladder level now.
    pub fn level(&self) -> Level {
        self.phase.level()
    }

    /// The mode now.
    pub fn mode(&self) -> Mode {
        self.phase.mode()
    }

    /// When the next timed probe starts, at L3 (None elsewhere: the timer runs only there).
    pub fn next_probe_at_ms(&self) -> Option<u64> {
        match &self.phase {
            Phase::AtL3(at) => at.next_probe_at_ms,
            _ => None,
        }
    }

    /// At L3, the rate the device's saving is judged at: the baseline the watch keeps
    /// (the fastest window there that showed no change), not one 50 ms window's, which
    /// contention can halve (a window priced at such a rate read "L3 saves 2.93 ms/s
    /// [1.98, 4.33]" on a loop device whose L3 ran at twice it). A workload that really
    /// slowed moves the baseline (the tap answers the fall), and is then judged at its rate.
    pub fn l3_rate_bios_per_sec(&self) -> Option<f64> {
        match &self.phase {
            Phase::AtL3(at) => at.signature.map(|s| s.bios_per_sec),
            _ => None,
        }
    }

    /// The nomerges value this state stands for.
    pub fn nomerges(&self) -> u8 {
        self.level().nomerges()
    }

    /// Puts the state at `level` as after a step there (tests build situations with it;
    /// the policy itself moves only through [`decide`]).
    #[doc(hidden)]
    pub fn move_to_for_test(&mut self, level: Level, now_ms: u64) {
        *self = self.history.clone().move_to(level, now_ms);
    }
}

impl History {
    /// Notes a workload as merge-hostile (replacing a like one, keeping the newest few).
    fn remember_hostile(&mut self, sig: Signature) {
        self.known_hostile.retain(|k| sig.changed_from(k).is_some());
        self.known_hostile.push(sig);
        if self.known_hostile.len() > KNOWN_HOSTILE_MAX {
            self.known_hostile.remove(0);
        }
    }

    /// Forgets a workload that turned out to merge.
    fn forget_hostile(&mut self, sig: &Signature) {
        self.known_hostile.retain(|k| sig.changed_from(k).is_some());
    }

    /// How long steps to L3 are still held off at `now_ms` (the tap's last call for
    /// merging was not borne out at L0), if they are.
    fn l3_held_off(&self, now_ms: u64) -> Option<u64> {
        (now_ms < self.l3_not_before_ms).then(|| self.l3_not_before_ms - now_ms)
    }

    /// Whether `sig` is one of the workloads already found merge-hostile.
    fn is_known_hostile(&self, sig: &Signature) -> bool {
        self.known_hostile
            .iter()
            .any(|k| sig.changed_from(k).is_none())
    }

    /// A change of level (a write): counted toward the hourly cap, timed from now.
    fn changed_level(&mut self, now_ms: u64) {
        self.since_ms = now_ms;
        self.changes.record(now_ms);
    }

    /// A step to `level`: L3 with nothing seen there yet (its probe due at once), else the
    /// merging mode with nothing counted.
    fn move_to(mut self, level: Level, now_ms: u64) -> PolicyState {
        self.changed_level(now_ms);
        let phase = if level == DEEPEST_LEVEL {
            Phase::AtL3(AtL3 {
                next_probe_at_ms: None,
                signature: None,
                busy_windows: 0,
                changed_since_ms: None,
                changed_windows: 0,
                tap_high_samples: 0,
                not_kept_since_ms: None,
            })
        } else {
            Phase::Merging(Merging::at(level))
        };
        PolicyState {
            history: self,
            phase,
        }
    }

    /// The step to L3 with `sig` as its workload, remembered as merge-hostile when
    /// `hostile`; the next timed probe at `next_probe_at_ms`.
    fn enter_l3(
        mut self,
        sig: Signature,
        next_probe_at_ms: u64,
        hostile: bool,
        now_ms: u64,
    ) -> PolicyState {
        self.changed_level(now_ms);
        if hostile {
            self.remember_hostile(sig);
        }
        PolicyState {
            history: self,
            phase: Phase::AtL3(AtL3 {
                next_probe_at_ms: Some(next_probe_at_ms),
                signature: Some(sig),
                busy_windows: 0,
                changed_since_ms: None,
                changed_windows: 0,
                tap_high_samples: 0,
                not_kept_since_ms: None,
            }),
        }
    }

    /// The step to L0 for a probe.
    fn start_probe(mut self, cause: ProbeCause, now_ms: u64) -> PolicyState {
        self.changed_level(now_ms);
        PolicyState {
            history: self,
            phase: Phase::Probing(Probe {
                measured: Measured::default(),
                cause,
            }),
        }
    }

    /// The step to L2 for a trial from `from_level`, measured against `baseline`.
    fn start_trial(mut self, baseline: Counters, from_level: Level, now_ms: u64) -> PolicyState {
        self.changed_level(now_ms);
        PolicyState {
            history: self,
            phase: Phase::Trial(Trial {
                measured: Measured::default(),
                baseline,
                from_level,
            }),
        }
    }

    /// Stays at `level` in the merging mode without a write (a probe or a trial that ends
    /// where it is), timed from `since_ms`.
    fn settle_merging(mut self, m: Merging, since_ms: u64) -> PolicyState {
        self.since_ms = since_ms;
        PolicyState {
            history: self,
            phase: Phase::Merging(m),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// Nothing changes; the note says why.
    Hold,
    /// One step down the ladder (to L1 or L2).
    StepDown,
    /// The last step, to L3.
    Disable,
    /// Back to L0 because merges are visible again.
    Enable,
    ProbeStart,
    /// The probe found merges: L0 stays (no write).
    ProbeSucceeded,
    /// The probe found none: back to L3.
    ProbeFailed,
    /// The probe saw only idle windows: it ends at L0 having measured nothing (no write).
    ProbeInconclusive,
    /// L0/L1 -> L2 to see whether L2 keeps the merges.
    TrialStart,
    /// L2 kept the merges: stay (no write).
    TrialSucceeded,
    /// L2 lost merges: back where the trial started.
    TrialFailed,
    /// The merges find nothing, but no level below saves measurably on this kernel (the
    /// cost profile): the device stays (no write).
    NotWorthIt,
    /// The merges find nothing, but no level below can be priced yet (the saving is
    /// unknown): the device stays with merging on (no write).
    SavingUnknown,
}

impl OutcomeKind {
    /// The decision this outcome is, if it is one (a hold is not).
    pub fn decision_kind(self) -> Option<DecisionKind> {
        Some(match self {
            OutcomeKind::Hold => return None,
            OutcomeKind::StepDown => DecisionKind::StepDown,
            OutcomeKind::Disable => DecisionKind::Disable,
            OutcomeKind::Enable => DecisionKind::Enable,
            OutcomeKind::ProbeStart => DecisionKind::Probe,
            OutcomeKind::ProbeSucceeded => DecisionKind::ProbeSucceeded,
            OutcomeKind::ProbeInconclusive => DecisionKind::ProbeInconclusive,
            OutcomeKind::ProbeFailed => DecisionKind::ProbeFailed,
            OutcomeKind::TrialStart => DecisionKind::Trial,
            OutcomeKind::TrialSucceeded => DecisionKind::TrialSucceeded,
            OutcomeKind::TrialFailed => DecisionKind::TrialFailed,
            OutcomeKind::NotWorthIt => DecisionKind::NotWorthIt,
            OutcomeKind::SavingUnknown => DecisionKind::SavingUnknown,
        })
    }
}

/// The result of one evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    pub state: PolicyState,
    pub kind: OutcomeKind,
    /// The level to apply, when the outcome changes it.
    pub to_level: Option<Level>,
    /// Why, with the numbers.
    pub reason: Reason,
}

/// A mode's working value, handed from step to step: the history (`h`) and the data of
/// the mode the device is in (`m`). It becomes a [`PolicyState`] again when the mode's
/// decision is made.
struct InMode<M> {
    h: History,
    m: M,
}

macro_rules! in_mode_into_state {
    ($($data:ident => $phase:ident),*) => {$(
        impl From<InMode<$data>> for PolicyState {
            fn from(s: InMode<$data>) -> PolicyState {
                PolicyState {
                    history: s.h,
                    phase: Phase::$phase(s.m),
                }
            }
        }
    )*};
}
in_mode_into_state!(Merging => Merging, AtL3 => AtL3, Probe => Probing, Trial => Trial);

fn hold(state: impl Into<PolicyState>, reason: impl Into<Reason>) -> Evaluation {
    Evaluation {
        state: state.into(),
        kind: OutcomeKind::Hold,
        to_level: None,
        reason: reason.into(),
    }
}

/// An outcome that writes: the state's level is the one to apply.
fn change(state: PolicyState, kind: OutcomeKind, reason: impl Into<Reason>) -> Evaluation {
    let to = state.level();
    Evaluation {
        state,
        kind,
        to_level: Some(to),
        reason: reason.into(),
    }
}

/// An outcome that writes nothing: the state moves on (a probe that ends at L0, a trial
/// that stays at L2), the kernel's tunables stay as they are.
fn settle(state: PolicyState, kind: OutcomeKind, reason: impl Into<Reason>) -> Evaluation {
    Evaluation {
        state,
        kind,
        to_level: None,
        reason: reason.into(),
    }
}

/// What every mode needs from the config and the clock, computed once per evaluation.
struct Ctx<'a> {
    cfg: &'a PolicyConfig,
    caps: Caps,
    now_ms: u64,
    /// The low and high merge-ratio thresholds, as fractions.
    low: f64,
    high: f64,
    initial_backoff_ms: u64,
    max_backoff_ms: u64,
    /// The hourly cap on changes is reached: no step down, no probe or trial start.
    cap_reached: bool,
}

impl Ctx<'_> {
    /// A trial of L2 is possible on this device and config at all.
    fn trial_allowed(&self) -> bool {
        // Every config allows L2 (the deepest allowed is L2 or L3).
        self.caps.simple_merges
            && self.cfg.trial_max_extra_requests_percent > 0.0
            && self.caps.worth.worth(Level::L2)
    }

    /// L3 is a level to rest at: allowed by the config, seen by a bio tap, and worth it.
    fn l3_allowed(&self) -> bool {
        deepest_level(self.cfg, self.caps) == DEEPEST_LEVEL && self.caps.worth.worth(DEEPEST_LEVEL)
    }

    /// Why L3 is no level to rest at here (asked where [`Ctx::l3_allowed`] is false).
    fn why_no_l3(&self) -> reason::NoL3 {
        if !self.caps.sense_at_l3 {
            reason::NoL3::Blind
        } else if deepest_allowed(self.cfg) < DEEPEST_LEVEL {
            reason::NoL3::NotAllowed
        } else if matches!(self.caps.worth.basis, Basis::Unknown { .. }) {
            reason::NoL3::SavingUnknown
        } else {
            reason::NoL3::NotWorth
        }
    }

    /// Whether a device at `at` (below L0) should leave it for lack of worth: neither `at`
    /// nor any level below it that this device can reach is worth keeping
    /// ([`Worth::keeps`]: live, the upper end of the saving's interval under the floor).
    /// The other side of the band whose first side is [`Ctx::not_worth`].
    fn not_worth_keeping(&self, at: Level) -> bool {
        at > Level::L0
            && std::iter::once(at)
                .chain(levels_below(at, self.caps, self.cfg))
                .all(|l| !self.caps.worth.keeps(l))
    }

    /// The "not worth it" reason for a device at `at`, if no level below it that this
    /// device can reach saves measurably; "saving unknown" where nothing prices them yet
    /// (that is no verdict, and is never worded as one).
    fn not_worth(&self, at: Level) -> Option<Reason> {
        let mut below = [false; 4];
        let mut any = false;
        for l in levels_below(at, self.caps, self.cfg) {
            below[usize::from(l.index())] = true;
            any = true;
            if self.caps.worth.worth(l) {
                return None;
            }
        }
        if !any {
            return None;
        }
        let worth = Box::new(self.caps.worth);
        Some(match worth.basis {
            Basis::Unknown { .. } => Reason::SavingUnknown { at, worth },
            _ => Reason::NotWorth { at, below, worth },
        })
    }
}

/// What [`decide`] says, done in place with no copy of the state, where it can only hold
/// and only the hourly count of changes ages:
/// - no window closed at this tick, outside L3 (the window is still open);
/// - a window closed with fewer bios than a window needs, while merging (an idle device).
///
/// The tick asks it first for every device; these are most devices at most ticks on a host
/// with many idle ones. `None` where [`decide`] must be asked: at L3, whose probes run on a
/// clock of their own, and in a probe or trial, which read even an idle window. The
/// policy's property test checks that the two agree.
pub fn hold_without_deciding(
    state: &mut PolicyState,
    window: Option<&Window>,
    cfg: &PolicyConfig,
    now_ms: u64,
) -> Option<Reason> {
    let reason = match (&state.phase, window) {
        (Phase::AtL3(_), _) => return None,
        (_, None) => Reason::WindowOpen(state.mode()),
        (Phase::Merging(_), Some(w)) if w.counters.bios() < cfg.min_window_bios => Reason::Idle {
            bios: w.counters.bios(),
            min_bios: cfg.min_window_bios,
        },
        _ => return None,
    };
    state.history.changes.forget_older_than_an_hour(now_ms);
    Some(reason)
}

/// Decides for one device at `now_ms`. `window` is the window that closed at this tick, if
/// any (probes start on time alone, so the policy is asked every tick).
pub fn decide(
    prev: &PolicyState,
    window: Option<&Window>,
    caps: Caps,
    cfg: &PolicyConfig,
    now_ms: u64,
) -> Evaluation {
    let PolicyState { mut history, phase } = prev.clone();
    history.changes.forget_older_than_an_hour(now_ms);
    let cx = Ctx {
        cfg,
        caps,
        now_ms,
        low: cfg.disable_below_percent / 100.0,
        high: cfg.enable_above_percent / 100.0,
        initial_backoff_ms: cfg.probe_initial_backoff_secs * 1000,
        max_backoff_ms: cfg.probe_max_backoff_secs * 1000,
        cap_reached: history.changes.reached(cfg.max_changes_per_hour),
    };
    match phase {
        Phase::Merging(m) => merging::decide(history, m, window, &cx),
        Phase::AtL3(at) => off::decide(history, at, window, &cx),
        Phase::Trial(t) => trial::decide(history, t, window, &cx),
        Phase::Probing(p) => probing::decide(history, p, window, &cx),
    }
}

/// A reason in words. Each mode words the reasons it gives beside its rules (`merging`,
/// `off`, `probing`, `trial`), the wordings they share are in `reason`: this sends each
/// reason to its wording, as [`decide`] sends each state to its mode.
impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Text(_)
            | Reason::Idle { .. }
            | Reason::NotWorth { .. }
            | Reason::SavingUnknown { .. }
            | Reason::WorthChanged(_)
            | Reason::LeaveNotWorth { .. }
            | Reason::WindowOpen(_)
            | Reason::IdleDoesNotCount(_) => reason::wording(self, f),
            Reason::Pays { .. }
            | Reason::LowWindow { .. }
            | Reason::StillMerging { .. }
            | Reason::DeepestAllowed { .. }
            | Reason::TrialStart { .. } => merging::holds(self, f),
            Reason::Dwell { .. } | Reason::CapReached { .. } | Reason::L3HeldOff { .. } => {
                merging::held_back(self, f)
            }
            Reason::StepDown { .. }
            | Reason::StepToL3 { .. }
            | Reason::KnownHostileToL3(_)
            | Reason::NothingMergesToL3 { .. } => merging::steps(self, f),
            Reason::BlindAtL3 { .. }
            | Reason::L3NoLongerAllowed { .. }
            | Reason::SensedMergeable { .. }
            | Reason::ProbeOnChange { .. }
            | Reason::TimedProbe { .. } => off::leaves(self, f),
            Reason::AtL3 { .. }
            | Reason::AnsweredByTap { .. }
            | Reason::KnownHostileChange { .. }
            | Reason::RateChangeAwaitsTap { .. }
            | Reason::ChangeUnconfirmed(_)
            | Reason::SensedOnce { .. }
            | Reason::ChangeAnsweredByTap(_) => off::stays(self, f),
            Reason::ProbeWindow { .. }
            | Reason::ProbeInconclusive { .. }
            | Reason::ProbeLowNoL3 { .. }
            | Reason::ProbeFoundNone { .. }
            | Reason::ProbeFoundMerges { .. } => probing::wording(self, f),
            Reason::TrialInconclusive { .. }
            | Reason::TrialMeasuring
            | Reason::TrialKeptMerges { .. }
            | Reason::TrialLostMerges { .. } => trial::wording(self, f),
        }
    }
}
