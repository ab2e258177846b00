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
type Step<T = PolicyState> = std::ops::ControlFlow<Evaluation, T>;

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
mod probing;
pub mod reason;
pub mod signature;
mod trial;
pub mod worth;

pub use reason::Reason;
pub use signature::Signature;
pub use worth::Worth;

use crate::config::PolicyConfig;
use crate::decision::{DecisionKind, Level};
use crate::sampler::{Counters, Window};
use mergetune_kernel::tunable::Tunable;
use serde::{Deserialize, Serialize};

pub const HOUR_MS: u64 = 3_600_000;
/// How many merge-hostile workload signatures a device remembers.
pub const KNOWN_HOSTILE_MAX: usize = 4;
/// The deepest rung of the ladder (L3, no merges).
pub const DEEPEST_LEVEL: Level = Level::DEEPEST;

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

    pub fn for_scheduler(scheduler: Option<&str>, has_front_merges: bool) -> Caps {
        let sched = scheduler.unwrap_or("none");
        Caps {
            front_merges: has_front_merges && sched == "mq-deadline",
            simple_merges: matches!(sched, "mq-deadline" | "bfq"),
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

/// The deepest level the config allows.
pub fn floor_level(cfg: &PolicyConfig) -> Level {
    if cfg.disabled_nomerges >= 2 {
        Level::L3
    } else {
        Level::L2
    }
}

/// The deepest level the policy may rest at on this device: the config's floor, but L2
/// where the daemon cannot see at L3 (no bio tap: the merge counters read zero there).
pub fn deepest_level(cfg: &PolicyConfig, caps: Caps) -> Level {
    let floor = floor_level(cfg);
    if caps.sense_at_l3 {
        floor
    } else {
        floor.min(Level::L2)
    }
}

/// The next level down that exists on this device, within the deepest level allowed.
pub fn next_down(level: Level, caps: Caps, cfg: &PolicyConfig) -> Option<Level> {
    let floor = deepest_level(cfg, caps);
    Level::ALL
        .into_iter()
        .find(|&l| l > level && l <= floor && caps.has(l))
}

/// The levels below `level` this device can reach (the candidates of a step down).
fn levels_below(level: Level, caps: Caps, cfg: &PolicyConfig) -> impl Iterator<Item = Level> {
    let floor = deepest_level(cfg, caps);
    Level::ALL
        .into_iter()
        .filter(move |&l| l > level && l <= floor && caps.has(l))
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

/// Per-device policy state. Plain data: cloned, compared, serialised for replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyState {
    pub mode: Mode,
    /// The ladder level now.
    pub level: Level,
    /// When the current level was entered.
    pub since_ms: u64,
    /// Consecutive busy windows under the low threshold at this level.
    pub low_windows: u32,
    /// The wait before the next probe once at L3.
    pub backoff_ms: u64,
    /// When the next probe starts (at L3).
    pub next_probe_at_ms: Option<u64>,
    /// Counters accumulated over the busy windows of the current probe.
    pub probe_counters: Counters,
    pub probe_windows_done: u32,
    pub probe_idle_windows: u32,
    /// Times of the level changes made in the last hour, oldest first.
    pub changes_ms: Vec<u64>,
    /// Consecutive busy windows over the high threshold at L0/L1 (toward a trial of L2).
    pub high_windows: u32,
    /// The window measured at the level a trial started from.
    pub trial_baseline: Counters,
    /// L2 was reached by a successful trial: its merges are the workload's merges, so a
    /// high ratio there is no reason to go back to L0.
    pub l2_verified: bool,
    /// The wait before the next trial, doubled after each failed one.
    pub trial_backoff_ms: u64,
    /// No trial before this time.
    pub next_trial_at_ms: u64,
    /// The level a trial started from (to go back to).
    pub trial_from_level: Level,
    /// The workload's signature when L3 was entered: at L3 the counters cannot show missed
    /// merges, but they still show a workload change, which starts a probe at once.
    pub l3_signature: Option<Signature>,
    /// At L3, the start of the first of the consecutive windows whose rate alone fell
    /// from `l3_signature`'s: such a change probes once it has lasted
    /// [`signature::RATE_CHANGE_CONFIRM_MS`]. None when the last window showed no such change.
    pub l3_rate_change_since_ms: Option<u64>,
    /// Workloads that were confirmed merge-hostile (settled at L3, or a probe found
    /// nothing), newest last, at most [`KNOWN_HOSTILE_MAX`]. When one of them comes back,
    /// its low windows at L0-L2 take the device straight to L3.
    pub known_hostile: Vec<Signature>,
    /// The running probe was started by a workload change (a failure does not double the
    /// backoff of the timed probes).
    pub probe_by_change: bool,
    /// "Not worth it here" was said at this level for the current run of low
    /// windows (it is a decision once, then a hold).
    pub not_worth_noted: bool,
    /// "Not worth it: saving unknown" was said: said again once the saving is known.
    pub unknown_noted: bool,
}

impl PolicyState {
    pub fn new(now_ms: u64, cfg: &PolicyConfig) -> Self {
        PolicyState {
            mode: Mode::Merging,
            level: Level::L0,
            since_ms: now_ms,
            low_windows: 0,
            backoff_ms: cfg.probe_initial_backoff_secs * 1000,
            next_probe_at_ms: None,
            probe_counters: Counters::default(),
            probe_windows_done: 0,
            probe_idle_windows: 0,
            changes_ms: Vec::new(),
            high_windows: 0,
            trial_baseline: Counters::default(),
            l2_verified: false,
            trial_backoff_ms: cfg.probe_initial_backoff_secs * 1000,
            next_trial_at_ms: 0,
            trial_from_level: Level::L0,
            l3_signature: None,
            l3_rate_change_since_ms: None,
            known_hostile: Vec::new(),
            probe_by_change: false,
            not_worth_noted: false,
            unknown_noted: false,
        }
    }

    /// The nomerges value this state stands for.
    pub fn nomerges(&self) -> u8 {
        self.level.nomerges()
    }

    /// Puts the state at `level` in the merging mode, as after a step up (tests build
    /// situations with it; the policy itself moves only through [`decide`]).
    #[doc(hidden)]
    pub fn move_to_for_test(&mut self, level: Level, now_ms: u64) {
        self.move_to(level, now_ms);
    }

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

    /// Whether `sig` is one of the workloads already found merge-hostile.
    fn is_known_hostile(&self, sig: &Signature) -> bool {
        self.known_hostile
            .iter()
            .any(|k| sig.changed_from(k).is_none())
    }

    /// Moves to `level` in a measuring `mode` (a probe or a trial), counters reset.
    fn start_measuring(&mut self, level: Level, mode: Mode, now_ms: u64) {
        self.move_to(level, now_ms);
        self.mode = mode;
        self.probe_counters = Counters::default();
        self.probe_windows_done = 0;
        self.probe_idle_windows = 0;
    }

    fn move_to(&mut self, level: Level, now_ms: u64) {
        self.level = level;
        self.since_ms = now_ms;
        self.low_windows = 0;
        self.high_windows = 0;
        self.not_worth_noted = false;
        self.unknown_noted = false;
        self.l3_rate_change_since_ms = None;
        if level != Level::L2 {
            self.l2_verified = false;
        }
        self.changes_ms.push(now_ms);
        self.mode = if level == DEEPEST_LEVEL {
            Mode::AtL3
        } else {
            Mode::Merging
        };
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
        })
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            OutcomeKind::Hold => "hold",
            OutcomeKind::StepDown => "step_down",
            OutcomeKind::Disable => "disable",
            OutcomeKind::Enable => "enable",
            OutcomeKind::ProbeStart => "probe",
            OutcomeKind::ProbeSucceeded => "probe_succeeded",
            OutcomeKind::ProbeInconclusive => "probe_inconclusive",
            OutcomeKind::ProbeFailed => "probe_failed",
            OutcomeKind::TrialStart => "trial",
            OutcomeKind::TrialSucceeded => "trial_succeeded",
            OutcomeKind::TrialFailed => "trial_failed",
            OutcomeKind::NotWorthIt => "not_worth_it",
        }
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

fn hold(state: PolicyState, reason: impl Into<Reason>) -> Evaluation {
    Evaluation {
        state,
        kind: OutcomeKind::Hold,
        to_level: None,
        reason: reason.into(),
    }
}

fn change(state: PolicyState, kind: OutcomeKind, reason: String) -> Evaluation {
    let to = state.level;
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
        self.caps.simple_merges
            && floor_level(self.cfg) >= Level::L2
            && self.cfg.trial_max_extra_requests_percent > 0.0
            && self.caps.worth.worth(Level::L2)
    }

    /// L3 is a level to rest at: allowed by the config, seen by a bio tap, and worth it.
    fn l3_allowed(&self) -> bool {
        deepest_level(self.cfg, self.caps) == DEEPEST_LEVEL && self.caps.worth.worth(DEEPEST_LEVEL)
    }

    /// The "not worth it" reason for a device at `at`, if no level below it that this
    /// device can reach saves measurably.
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
        any.then_some(Reason::NotWorth {
            at,
            below,
            worth: Box::new(self.caps.worth),
        })
    }
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
    let mut s = prev.clone();
    if s.changes_ms
        .first()
        .is_some_and(|&t| now_ms.saturating_sub(t) >= HOUR_MS)
    {
        s.changes_ms.retain(|&t| now_ms.saturating_sub(t) < HOUR_MS);
    }
    let cx = Ctx {
        cfg,
        caps,
        now_ms,
        low: cfg.disable_below_percent / 100.0,
        high: cfg.enable_above_percent / 100.0,
        initial_backoff_ms: cfg.probe_initial_backoff_secs * 1000,
        max_backoff_ms: cfg.probe_max_backoff_secs * 1000,
        cap_reached: s.changes_ms.len() as u64 >= u64::from(cfg.max_changes_per_hour),
    };
    match s.mode {
        Mode::Merging => merging::decide(s, window, &cx),
        Mode::AtL3 => off::decide(s, window, &cx),
        Mode::Trial => trial::decide(s, window, &cx),
        Mode::Probing => probing::decide(s, window, &cx),
    }
}
