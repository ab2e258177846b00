//! The merge policy: a pure function of (state, closed window, device capabilities, config,
//! now) to (new state, outcome with a human reason). No I/O, no clock: the same inputs give
//! the same outputs, which is what makes every decision explainable and replayable.
//!
//! Brunelle's proposal (2008): watch merges against bios submitted, turn merging off when it
//! rarely succeeds, later turn it back on, watch, repeat. Axboe's objections: the gain is
//! small, wrongly not merging costs up to 5x throughput, the one-hit cache is "better than
//! free", and front merges are the expensive, rarely useful part. So merging is a ladder,
//! walked one step at a time, asymmetrically:
//!
//! | level | tunables | what stays |
//! |---|---|---|
//! | L0 | nomerges=0, front_merges=1 | everything (kernel default) |
//! | L1 | nomerges=0, front_merges=0 | all but the rbtree front-merge lookup (mq-deadline only) |
//! | L2 | nomerges=1 | plug and one-hit merges, still counted (mq-deadline, bfq only) |
//! | L3 | nomerges=2 | nothing; the counters go blind, so it is left only by a probe |
//!
//! - stepping down needs consecutive busy windows under the low threshold:
//!   `step_down_after_windows` for the safe steps to L1 and L2, `disable_after_windows` plus
//!   the dwell time and room under the hourly cap for the step to L3;
//! - stepping up is immediate and never blocked: at L1 or L2 a busy window whose visible
//!   merges reach the high threshold returns to L0 at once;
//! - at L3 the policy probes after a backoff: L0 for `probe_windows` busy windows; a clearly
//!   low probe returns to L3 and doubles the backoff (up to a cap), anything else stays at
//!   L0 and resets it;
//! - while merging pays at L0/L1, the policy tries L2 (a trial, after its own backoff):
//!   batched sequential work merges in the plug, so L2 often keeps every merge at a lower
//!   cost. The trial compares requests per bio at L2 with the window before it; L2 stays
//!   only when it completed at most `trial_max_extra_requests_percent` more requests;
//! - idle windows (too few bios) decide nothing.

use crate::kernel::tunable::Tunable;
use crate::logic::config::PolicyConfig;
use crate::logic::decision::DecisionKind;
use crate::logic::sampler::{Counters, Window};
use serde::Serialize;
use std::borrow::Cow;

pub const HOUR_MS: u64 = 3_600_000;
/// How many merge-hostile workload signatures a device remembers.
pub const KNOWN_HOSTILE_MAX: usize = 4;
pub const TOP_LEVEL: u8 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// At L0, L1 or L2: the counters still show merges.
    Merging,
    /// At L3, waiting for the next probe.
    Off,
    /// At L0 for a measured probe out of L3.
    Probing,
    /// At L2 for a measured trial from L0/L1 while merging pays: does L2 keep the merges?
    Trial,
}

impl Mode {
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Merging => "merging",
            Mode::Off => "off",
            Mode::Probing => "probing",
            Mode::Trial => "trial",
        }
    }
}

/// What a device's queue offers: which rungs of the ladder exist on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Caps {
    /// mq-deadline's iosched/front_merges exists and was 1 (L1 available).
    pub front_merges: bool,
    /// The scheduler treats nomerges=1 differently from 0 (mq-deadline, bfq: L2 available).
    pub simple_merges: bool,
    /// The daemon can sample the device's queued bios (the bio tap works), so L3 is not
    /// blind: a switch to mergeable I/O is seen although the merge counters read zero.
    pub sense_at_l3: bool,
}

impl Caps {
    /// All rungs (mq-deadline).
    pub const FULL: Caps = Caps {
        front_merges: true,
        simple_merges: true,
        sense_at_l3: false,
    };
    /// none / kyber: only L0 and L3 differ.
    pub const BARE: Caps = Caps {
        front_merges: false,
        simple_merges: false,
        sense_at_l3: false,
    };

    pub fn for_scheduler(scheduler: Option<&str>, has_front_merges: bool) -> Caps {
        let sched = scheduler.unwrap_or("none");
        Caps {
            front_merges: has_front_merges && sched == "mq-deadline",
            simple_merges: matches!(sched, "mq-deadline" | "bfq"),
            sense_at_l3: false,
        }
    }

    fn has(&self, level: u8) -> bool {
        match level {
            1 => self.front_merges,
            2 => self.simple_merges,
            _ => true,
        }
    }
}

/// The deepest level the config allows.
pub fn floor_level(cfg: &PolicyConfig) -> u8 {
    if cfg.disabled_nomerges >= 2 { 3 } else { 2 }
}

/// The next level down that exists on this device, within the config's floor.
pub fn next_down(level: u8, caps: Caps, cfg: &PolicyConfig) -> Option<u8> {
    let floor = floor_level(cfg);
    ((level + 1)..=floor).find(|&l| caps.has(l))
}

/// The tunable values of a level, `queue/nomerges` first. `front_merges` is listed only
/// where the device has it and where it matters (L0, L1).
pub fn tunables(level: u8, caps: Caps) -> Vec<(Tunable, &'static str)> {
    let nomerges = match level {
        0 | 1 => "0",
        2 => "1",
        _ => "2",
    };
    let mut v = vec![(Tunable::Nomerges, nomerges)];
    // front_merges matters only at L0 and L1; at L2 and L3 nomerges already rules front
    // merges out, so the attribute is left where it is (one write per step, not two).
    if caps.front_merges && level <= 1 {
        v.push((Tunable::FrontMerges, if level == 0 { "1" } else { "0" }));
    }
    v
}

/// Per-device policy state. Plain data: cloned, compared, serialised for replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyState {
    pub mode: Mode,
    /// The ladder level now: 0..=3.
    pub level: u8,
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
    pub trial_from_level: u8,
    /// The workload's signature when L3 was entered: at L3 the counters cannot show missed
    /// merges, but they still show a workload change, which starts a probe at once.
    pub l3_signature: Option<Signature>,
    /// Workloads that were confirmed merge-hostile (settled at L3, or a probe found
    /// nothing), newest last, at most [`KNOWN_HOSTILE_MAX`]. When one of them comes back,
    /// its low windows at L0-L2 take the device straight to L3.
    pub known_hostile: Vec<Signature>,
    /// The running probe was started by a workload change (a failure does not double the
    /// backoff of the timed probes).
    pub probe_by_change: bool,
}

/// What a window's traffic looks like, whatever the merge level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Signature {
    pub bios_per_sec: f64,
    /// Share of bios that are reads, 0..=1.
    pub read_share: f64,
    /// Mean bio size in sectors.
    pub sectors_per_bio: f64,
}

impl Signature {
    pub fn of(w: &Window) -> Signature {
        let c = &w.counters;
        let bios = c.bios().max(1) as f64;
        Signature {
            bios_per_sec: w.bios_per_sec(),
            read_share: c.read_bios() as f64 / bios,
            sectors_per_bio: (c.sectors_read + c.sectors_written) as f64 / bios,
        }
    }

    /// How this window differs from `base`, if enough to call it another workload: the
    /// rate by 1.5x either way, the read share by 20 points, or the bio size by 2x.
    pub fn changed_from(&self, base: &Signature) -> Option<String> {
        let ratio = |a: f64, b: f64| {
            if a <= 0.0 && b <= 0.0 {
                1.0
            } else if a <= 0.0 || b <= 0.0 {
                f64::INFINITY
            } else if a > b {
                a / b
            } else {
                b / a
            }
        };
        if ratio(self.bios_per_sec, base.bios_per_sec) >= 1.5 {
            return Some(format!(
                "bios/s {:.0} -> {:.0}",
                base.bios_per_sec, self.bios_per_sec
            ));
        }
        if (self.read_share - base.read_share).abs() >= 0.2 {
            return Some(format!(
                "reads {:.0}% -> {:.0}%",
                base.read_share * 100.0,
                self.read_share * 100.0
            ));
        }
        if ratio(self.sectors_per_bio, base.sectors_per_bio) >= 2.0 {
            return Some(format!(
                "bio size {:.1} -> {:.1} KiB",
                base.sectors_per_bio / 2.0,
                self.sectors_per_bio / 2.0
            ));
        }
        None
    }
}

impl PolicyState {
    pub fn new(now_ms: u64, cfg: &PolicyConfig) -> Self {
        PolicyState {
            mode: Mode::Merging,
            level: 0,
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
            trial_from_level: 0,
            l3_signature: None,
            known_hostile: Vec::new(),
            probe_by_change: false,
        }
    }

    /// The merge-ladder level: 0 all merges, 1 no front merges, 2 simple merges only
    /// (nomerges=1), 3 no merges (nomerges=2).
    pub fn level(&self, _cfg: &PolicyConfig) -> u8 {
        self.level
    }

    /// The nomerges value this state stands for.
    pub fn nomerges(&self, _cfg: &PolicyConfig) -> u8 {
        match self.level {
            0 | 1 => 0,
            2 => 1,
            _ => 2,
        }
    }

    /// Puts the state at `level` in the merging mode, as after a step up (tests build
    /// situations with it; the policy itself moves only through [`decide`]).
    #[doc(hidden)]
    pub fn move_to_for_test(&mut self, level: u8, now_ms: u64) {
        self.move_to(level, now_ms);
        self.mode = if level == TOP_LEVEL {
            Mode::Off
        } else {
            Mode::Merging
        };
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

    /// Moves to `level` in a measuring `mode` (a probe or a trial), counters reset.
    fn start_measuring(&mut self, level: u8, mode: Mode, now_ms: u64) {
        self.move_to(level, now_ms);
        self.mode = mode;
        self.probe_counters = Counters::default();
        self.probe_windows_done = 0;
        self.probe_idle_windows = 0;
    }

    fn move_to(&mut self, level: u8, now_ms: u64) {
        self.level = level;
        self.since_ms = now_ms;
        self.low_windows = 0;
        self.high_windows = 0;
        if level != 2 {
            self.l2_verified = false;
        }
        self.changes_ms.push(now_ms);
        self.mode = if level == TOP_LEVEL {
            Mode::Off
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
    ProbeSucceeded,
    ProbeFailed,
    /// L0/L1 -> L2 to see whether L2 keeps the merges.
    TrialStart,
    /// L2 kept the merges: stay (no write).
    TrialSucceeded,
    /// L2 lost merges: back where the trial started.
    TrialFailed,
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
            OutcomeKind::ProbeFailed => DecisionKind::ProbeFailed,
            OutcomeKind::TrialStart => DecisionKind::Trial,
            OutcomeKind::TrialSucceeded => DecisionKind::TrialSucceeded,
            OutcomeKind::TrialFailed => DecisionKind::TrialFailed,
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
            OutcomeKind::ProbeFailed => "probe_failed",
            OutcomeKind::TrialStart => "trial",
            OutcomeKind::TrialSucceeded => "trial_succeeded",
            OutcomeKind::TrialFailed => "trial_failed",
        }
    }
}

/// Why the policy did what it did. The frequent "nothing to do" reasons keep their numbers
/// and are formatted only when someone reads them (a tick for 64 devices stays cheap);
/// the rest are text.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(into = "String")]
pub enum Reason {
    Text(Cow<'static, str>),
    Idle {
        bios: u64,
        min_bios: u64,
    },
    Pays {
        level: u8,
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
        next: u8,
    },
    AtL3 {
        next_probe_in_ms: u64,
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
                "merging pays at L{level}: merge ratio {} >= {} at {bios_per_sec:.0} bios/s",
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
                "merge ratio {} < {} at {bios_per_sec:.0} bios/s: low window {n} of {k} before L{next}",
                pct(*ratio),
                pct(*low)
            ),
            Reason::AtL3 { next_probe_in_ms } => {
                write!(f, "at L3; next probe in {}", secs(*next_probe_in_ms))
            }
        }
    }
}

/// The result of one evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    pub state: PolicyState,
    pub kind: OutcomeKind,
    /// The level to apply, when the outcome changes it.
    pub to_level: Option<u8>,
    /// Why, with the numbers.
    pub reason: Reason,
}

fn pct(x: f64) -> String {
    let p = x * 100.0;
    if p < 10.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

fn secs(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
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
    let low = cfg.disable_below_percent / 100.0;
    let high = cfg.enable_above_percent / 100.0;
    let initial_backoff_ms = cfg.probe_initial_backoff_secs * 1000;
    let max_backoff_ms = cfg.probe_max_backoff_secs * 1000;
    let cap_reached = s.changes_ms.len() as u64 >= u64::from(cfg.max_changes_per_hour);

    match s.mode {
        Mode::Merging => {
            let Some(w) = window else {
                return hold(s, "window still open");
            };
            let bios = w.counters.bios();
            let ratio = w.counters.merge_ratio();
            let rate = w.bios_per_sec();
            let level = s.level;
            if bios < cfg.min_window_bios {
                return hold(
                    s,
                    Reason::Idle {
                        bios,
                        min_bios: cfg.min_window_bios,
                    },
                );
            }
            if level > 0 && ratio >= high && !(level == 2 && s.l2_verified) {
                s.move_to(0, now_ms);
                s.backoff_ms = initial_backoff_ms;
                return change(
                    s,
                    OutcomeKind::Enable,
                    format!(
                        "merges still counted at L{level}: ratio {} >= {} at {rate:.0} bios/s; back to L0",
                        pct(ratio),
                        pct(high)
                    ),
                );
            }
            if ratio >= high
                && level < 2
                && caps.simple_merges
                && floor_level(cfg) >= 2
                && cfg.trial_max_extra_requests_percent > 0.0
            {
                s.low_windows = 0;
                s.high_windows += 1;
                let k = cfg.step_down_after_windows;
                if s.high_windows >= k && now_ms >= s.next_trial_at_ms && !cap_reached {
                    s.trial_baseline = w.counters;
                    s.trial_from_level = level;
                    s.start_measuring(2, Mode::Trial, now_ms);
                    let reason = format!(
                        "merging pays at L{level} ({} at {rate:.0} bios/s): trying L2 (plug and one-hit merges only) for {} windows",
                        pct(ratio),
                        cfg.probe_windows
                    );
                    return change(s, OutcomeKind::TrialStart, reason);
                }
            }
            if ratio >= low {
                s.low_windows = 0;
                return hold(
                    s,
                    Reason::Pays {
                        level,
                        ratio,
                        low,
                        bios_per_sec: rate,
                    },
                );
            }
            s.low_windows += 1;
            let Some(next) = next_down(level, caps, cfg) else {
                return hold(
                    s,
                    format!(
                        "merge ratio {} < {} at L{level}, the deepest level allowed here",
                        pct(ratio),
                        pct(low)
                    ),
                );
            };
            // A workload already known to be merge-hostile: the safe rungs have nothing to
            // show, go straight to L3 (after two low windows, and under the cap).
            let sig = Signature::of(w);
            let known = floor_level(cfg) == TOP_LEVEL
                && s.low_windows >= cfg.step_down_after_windows.min(2)
                && !cap_reached
                && s.known_hostile
                    .iter()
                    .any(|k| sig.changed_from(k).is_none());
            if known {
                let n = s.low_windows;
                s.move_to(TOP_LEVEL, now_ms);
                s.next_probe_at_ms = Some(now_ms + s.backoff_ms);
                s.l3_signature = Some(sig);
                let reason = format!(
                    "merge ratio {} < {} for {n} windows at {rate:.0} bios/s, a workload that settled at L3 before ({:.0} bios/s, {:.0}% reads, {:.1} KiB): L{level} -> L3, next probe in {}",
                    pct(ratio),
                    pct(low),
                    sig.bios_per_sec,
                    sig.read_share * 100.0,
                    sig.sectors_per_bio / 2.0,
                    secs(s.backoff_ms)
                );
                return change(s, OutcomeKind::Disable, reason);
            }
            let k = if next == TOP_LEVEL {
                cfg.disable_after_windows
            } else {
                cfg.step_down_after_windows
            };
            if s.low_windows < k {
                let n = s.low_windows;
                return hold(
                    s,
                    Reason::LowWindow {
                        ratio,
                        low,
                        bios_per_sec: rate,
                        n,
                        k,
                        next,
                    },
                );
            }
            if next == TOP_LEVEL {
                let dwell_ms = cfg.min_dwell_secs * 1000;
                let at_level_ms = now_ms.saturating_sub(s.since_ms);
                if at_level_ms < dwell_ms {
                    return hold(
                        s,
                        format!(
                            "merge ratio {} < {} for {k} windows, but at L{level} only for {} (dwell {})",
                            pct(ratio),
                            pct(low),
                            secs(at_level_ms),
                            secs(dwell_ms)
                        ),
                    );
                }
                if cap_reached {
                    return hold(
                        s,
                        format!(
                            "merge ratio {} < {} for {k} windows, but {} changes in the last hour reach the cap; staying at L{level}",
                            pct(ratio),
                            pct(low),
                            cfg.max_changes_per_hour
                        ),
                    );
                }
            } else if cap_reached {
                return hold(
                    s,
                    format!(
                        "merge ratio {} < {}, but {} changes in the last hour reach the cap; staying at L{level}",
                        pct(ratio),
                        pct(low),
                        cfg.max_changes_per_hour
                    ),
                );
            }
            let n = s.low_windows;
            s.move_to(next, now_ms);
            if next == TOP_LEVEL {
                s.next_probe_at_ms = Some(now_ms + s.backoff_ms);
                s.l3_signature = Some(sig);
                s.remember_hostile(sig);
                let reason = format!(
                    "merge ratio {} < {} for {n} windows at {rate:.0} bios/s; L{level} -> L3 (no merges), next probe in {}",
                    pct(ratio),
                    pct(low),
                    secs(s.backoff_ms)
                );
                change(s, OutcomeKind::Disable, reason)
            } else {
                let reason = format!(
                    "merge ratio {} < {} for {n} windows at {rate:.0} bios/s; L{level} -> L{next}",
                    pct(ratio),
                    pct(low)
                );
                change(s, OutcomeKind::StepDown, reason)
            }
        }
        Mode::Off => {
            let due = s.next_probe_at_ms.unwrap_or(now_ms);
            let mut changed = None;
            if let Some(w) = window
                && w.counters.bios() >= cfg.min_window_bios
            {
                let sig = Signature::of(w);
                match &s.l3_signature {
                    Some(base) => changed = sig.changed_from(base),
                    None => s.l3_signature = Some(sig),
                }
                // A change to a workload this device already found merge-hostile (say a
                // database that alternates between two rates) needs no probe: it becomes
                // the new baseline. Without this, two known workloads taking turns would
                // probe at every turn.
                if let Some(what) = &changed
                    && s.known_hostile
                        .iter()
                        .any(|k| sig.changed_from(k).is_none())
                {
                    let what = what.clone();
                    s.l3_signature = Some(sig);
                    if now_ms < due {
                        return hold(
                            s,
                            format!(
                                "workload changed at L3 ({what}) to one already found merge-hostile: no probe; next probe in {}",
                                secs(due - now_ms)
                            ),
                        );
                    }
                    changed = None;
                }
            }
            if now_ms < due && changed.is_none() {
                return hold(
                    s,
                    Reason::AtL3 {
                        next_probe_in_ms: due - now_ms,
                    },
                );
            }
            let off_for = now_ms.saturating_sub(s.since_ms);
            s.probe_by_change = changed.is_some();
            if let Some(what) = changed {
                s.start_measuring(0, Mode::Probing, now_ms);
                let reason = format!(
                    "workload changed at L3 ({what}): probing at once, L0 for {} busy windows",
                    cfg.probe_windows
                );
                return change(s, OutcomeKind::ProbeStart, reason);
            }
            s.start_measuring(0, Mode::Probing, now_ms);
            s.next_probe_at_ms = None;
            let reason = format!(
                "probe after {} at L3: L0 for {} busy windows to measure",
                secs(off_for),
                cfg.probe_windows
            );
            change(s, OutcomeKind::ProbeStart, reason)
        }
        Mode::Trial => {
            let Some(w) = window else {
                return hold(s, "trial of L2; window still open");
            };
            let back = s.trial_from_level;
            if w.counters.bios() < cfg.min_window_bios {
                s.probe_idle_windows += 1;
                if s.probe_idle_windows >= 4 * cfg.probe_windows {
                    s.move_to(back, now_ms);
                    s.next_trial_at_ms = now_ms + s.trial_backoff_ms;
                    return change(
                        s,
                        OutcomeKind::TrialFailed,
                        format!("trial of L2 inconclusive (idle); back to L{back}"),
                    );
                }
                return hold(s, "trial of L2; idle window does not count");
            }
            s.probe_counters.add(&w.counters);
            s.probe_windows_done += 1;
            if s.probe_windows_done < cfg.probe_windows {
                return hold(s, "trial of L2: measuring");
            }
            let per_bio = |c: &Counters| {
                let b = c.bios();
                if b == 0 {
                    1.0
                } else {
                    (c.reads_completed + c.writes_completed) as f64 / b as f64
                }
            };
            let base = per_bio(&s.trial_baseline);
            let trial = per_bio(&s.probe_counters);
            let limit = base * (1.0 + cfg.trial_max_extra_requests_percent / 100.0);
            if trial <= limit {
                s.mode = Mode::Merging;
                s.l2_verified = true;
                s.trial_backoff_ms = initial_backoff_ms;
                let reason = format!(
                    "L2 kept the merges: {:.1} requests per 100 bios vs {:.1} at L{back} (limit {:.1}); staying at L2",
                    trial * 100.0,
                    base * 100.0,
                    limit * 100.0
                );
                return Evaluation {
                    state: s,
                    kind: OutcomeKind::TrialSucceeded,
                    to_level: None,
                    reason: reason.into(),
                };
            }
            s.trial_backoff_ms = s
                .trial_backoff_ms
                .saturating_mul(2)
                .clamp(initial_backoff_ms, max_backoff_ms);
            s.move_to(back, now_ms);
            s.next_trial_at_ms = now_ms + s.trial_backoff_ms;
            let reason = format!(
                "L2 lost merges: {:.1} requests per 100 bios vs {:.1} at L{back} (limit {:.1}); back to L{back}, next trial in {}",
                trial * 100.0,
                base * 100.0,
                limit * 100.0,
                secs(s.trial_backoff_ms)
            );
            change(s, OutcomeKind::TrialFailed, reason)
        }
        Mode::Probing => {
            let Some(w) = window else {
                return hold(s, "probing; window still open");
            };
            if w.counters.bios() < cfg.min_window_bios {
                s.probe_idle_windows += 1;
                // L0 is the safe level: an idle probe simply ends there.
                if s.probe_idle_windows >= 4 * cfg.probe_windows {
                    let n = s.probe_idle_windows;
                    s.mode = Mode::Merging;
                    s.since_ms = now_ms;
                    s.low_windows = 0;
                    return Evaluation {
                        state: s,
                        kind: OutcomeKind::ProbeSucceeded,
                        to_level: None,
                        reason: format!("probe inconclusive after {n} idle windows; staying at L0")
                            .into(),
                    };
                }
                return hold(s, "probing; idle window does not count");
            }
            s.probe_counters.add(&w.counters);
            s.probe_windows_done += 1;
            if s.probe_windows_done < cfg.probe_windows {
                let reason = format!(
                    "probing: window {} of {}, merge ratio so far {}",
                    s.probe_windows_done,
                    cfg.probe_windows,
                    pct(s.probe_counters.merge_ratio())
                );
                return hold(s, reason);
            }
            let ratio = s.probe_counters.merge_ratio();
            let bios = s.probe_counters.bios();
            // The cap never keeps a failed probe from returning to L3: that only undoes
            // the probe's own excursion (probes themselves are paced by the backoff).
            if ratio < low {
                // A probe started by a workload change that finds nothing says nothing
                // about the timer: only timed probes double the backoff.
                if !s.probe_by_change {
                    s.backoff_ms =
                        (s.backoff_ms.saturating_mul(2)).clamp(initial_backoff_ms, max_backoff_ms);
                }
                let timer = s
                    .next_probe_at_ms
                    .filter(|&t| t > now_ms && s.probe_by_change);
                s.move_to(TOP_LEVEL, now_ms);
                let sig = Signature::of(w);
                s.l3_signature = Some(sig);
                s.remember_hostile(sig);
                s.next_probe_at_ms = Some(timer.unwrap_or(now_ms + s.backoff_ms));
                let next_in = s.next_probe_at_ms.unwrap_or(now_ms) - now_ms;
                let reason = format!(
                    "probe found merge ratio {} < {} over {bios} bios; back to L3, next probe in {}",
                    pct(ratio),
                    pct(low),
                    secs(next_in)
                );
                return change(s, OutcomeKind::ProbeFailed, reason);
            }
            let reason = format!(
                "probe found merge ratio {} >= {} over {bios} bios; staying at L0",
                pct(ratio),
                pct(low)
            );
            s.mode = Mode::Merging;
            s.since_ms = now_ms;
            s.low_windows = 0;
            s.backoff_ms = initial_backoff_ms;
            s.forget_hostile(&Signature::of(w));
            // The probe's windows at L0 are the baseline a trial of L2 needs: when merging
            // clearly pays, try L2 right away rather than after more windows at L0.
            if ratio >= high
                && caps.simple_merges
                && floor_level(cfg) >= 2
                && cfg.trial_max_extra_requests_percent > 0.0
                && now_ms >= s.next_trial_at_ms
                && !cap_reached
            {
                s.trial_baseline = s.probe_counters;
                s.trial_from_level = 0;
                s.start_measuring(2, Mode::Trial, now_ms);
                let reason = format!(
                    "{reason}; merging pays, so trying L2 (plug and one-hit merges only) for {} windows",
                    cfg.probe_windows
                );
                return change(s, OutcomeKind::TrialStart, reason);
            }
            Evaluation {
                state: s,
                kind: OutcomeKind::ProbeSucceeded,
                to_level: None,
                reason: reason.into(),
            }
        }
    }
}
