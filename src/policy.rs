//! The merge policy: a pure function of (state, closed window, config, now) to (new state,
//! outcome with a human reason). No I/O, no clock: the same inputs give the same outputs,
//! which is what makes every decision explainable and replayable.
//!
//! Brunelle's proposal (2008): watch merges against bios submitted, turn merging off when it
//! rarely succeeds, later turn it back on, watch, repeat. Axboe's objection: the gain is small
//! and wrongly not merging costs up to 5x throughput. So the policy is asymmetric:
//! - turning merging off needs `disable_after_windows` consecutive busy windows under the low
//!   threshold, the dwell time, and room under the hourly change cap;
//! - turning it on needs one busy window at or over the high threshold (visible at
//!   nomerges=1, where plug and one-hit merges still count), or a probe; neither dwell nor cap
//!   ever delays it;
//! - while merging is off the counters cannot show the merges being missed, so after a backoff
//!   the policy probes: merging on for `probe_windows` busy windows. Only a clearly low probe
//!   turns merging off again (doubling the backoff up to a cap); anything else keeps it on;
//! - idle windows (too few bios) decide nothing.

use crate::config::PolicyConfig;
use crate::sampler::{Counters, Window};
use serde::Serialize;
use std::borrow::Cow;

pub const HOUR_MS: u64 = 3_600_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// nomerges=0: the kernel default.
    Merging,
    /// nomerges=disabled_nomerges, waiting for the next probe.
    Off,
    /// nomerges=0 for a measured probe.
    Probing,
}

impl Mode {
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Merging => "merging",
            Mode::Off => "off",
            Mode::Probing => "probing",
        }
    }
}

/// Per-device policy state. Plain data: cloned, compared, serialised for replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyState {
    pub mode: Mode,
    /// When the current mode was entered.
    pub since_ms: u64,
    /// Consecutive busy windows under the low threshold (in `Merging`).
    pub low_windows: u32,
    /// The wait before the next probe once merging is turned off.
    pub backoff_ms: u64,
    /// When the next probe starts (in `Off`).
    pub next_probe_at_ms: Option<u64>,
    /// Counters accumulated over the busy windows of the current probe.
    pub probe_counters: Counters,
    pub probe_windows_done: u32,
    pub probe_idle_windows: u32,
    /// Times of the changes made in the last hour, oldest first.
    pub changes_ms: Vec<u64>,
}

impl PolicyState {
    pub fn new(now_ms: u64, cfg: &PolicyConfig) -> Self {
        PolicyState {
            mode: Mode::Merging,
            since_ms: now_ms,
            low_windows: 0,
            backoff_ms: cfg.probe_initial_backoff_secs * 1000,
            next_probe_at_ms: None,
            probe_counters: Counters::default(),
            probe_windows_done: 0,
            probe_idle_windows: 0,
            changes_ms: Vec::new(),
        }
    }

    /// The merge-ladder level this state stands for: 0 all merges, 1 no front merges,
    /// 2 simple merges only (nomerges=1), 3 no merges (nomerges=2).
    pub fn level(&self, cfg: &PolicyConfig) -> u8 {
        match self.mode {
            Mode::Merging | Mode::Probing => 0,
            Mode::Off => cfg.disabled_nomerges + 1,
        }
    }

    /// The nomerges value this state stands for.
    pub fn nomerges(&self, cfg: &PolicyConfig) -> u8 {
        match self.mode {
            Mode::Merging | Mode::Probing => 0,
            Mode::Off => cfg.disabled_nomerges,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// Nothing changes; the note says why.
    Hold,
    Disable,
    Enable,
    ProbeStart,
    ProbeSucceeded,
    ProbeFailed,
}

impl OutcomeKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            OutcomeKind::Hold => "hold",
            OutcomeKind::Disable => "disable",
            OutcomeKind::Enable => "enable",
            OutcomeKind::ProbeStart => "probe",
            OutcomeKind::ProbeSucceeded => "probe_succeeded",
            OutcomeKind::ProbeFailed => "probe_failed",
        }
    }
}

/// The result of one evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    pub state: PolicyState,
    pub kind: OutcomeKind,
    /// The nomerges value to write, when the outcome changes it.
    pub write_nomerges: Option<u8>,
    /// Why, with the numbers (static text when there are none, to keep ticks allocation-free).
    pub reason: Cow<'static, str>,
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

fn hold(state: PolicyState, reason: impl Into<Cow<'static, str>>) -> Evaluation {
    Evaluation {
        state,
        kind: OutcomeKind::Hold,
        write_nomerges: None,
        reason: reason.into(),
    }
}

/// Decides for one device at `now_ms`. `window` is the window that closed at this tick, if
/// any (probes start on time alone, so the policy is asked every tick).
pub fn decide(
    prev: &PolicyState,
    window: Option<&Window>,
    cfg: &PolicyConfig,
    now_ms: u64,
) -> Evaluation {
    let mut s = prev.clone();
    s.changes_ms.retain(|&t| now_ms.saturating_sub(t) < HOUR_MS);
    let low = cfg.disable_below_percent / 100.0;
    let high = cfg.enable_above_percent / 100.0;
    let initial_backoff_ms = cfg.probe_initial_backoff_secs * 1000;
    let max_backoff_ms = cfg.probe_max_backoff_secs * 1000;
    let cap_reached = s.changes_ms.len() as u64 >= u64::from(cfg.max_changes_per_hour);

    match s.mode {
        Mode::Merging => {
            let Some(w) = window else {
                return hold(s, "merging; window still open");
            };
            let bios = w.counters.bios();
            let ratio = w.counters.merge_ratio();
            let rate = w.bios_per_sec();
            if bios < cfg.min_window_bios {
                return hold(
                    s,
                    format!(
                        "idle window: {bios} bios < {} (no decision)",
                        cfg.min_window_bios
                    ),
                );
            }
            if ratio >= low {
                s.low_windows = 0;
                return hold(
                    s,
                    format!(
                        "merging pays: merge ratio {} >= {} at {rate:.0} bios/s",
                        pct(ratio),
                        pct(low)
                    ),
                );
            }
            s.low_windows += 1;
            let k = cfg.disable_after_windows;
            if s.low_windows < k {
                return hold(
                    s.clone(),
                    format!(
                        "merge ratio {} < {} at {rate:.0} bios/s: low window {} of {k}",
                        pct(ratio),
                        pct(low),
                        s.low_windows
                    ),
                );
            }
            let dwell_ms = cfg.min_dwell_secs * 1000;
            let in_mode_ms = now_ms.saturating_sub(s.since_ms);
            if in_mode_ms < dwell_ms {
                return hold(
                    s,
                    format!(
                        "merge ratio {} < {} for {k} windows, but merging only since {} (dwell {})",
                        pct(ratio),
                        pct(low),
                        secs(in_mode_ms),
                        secs(dwell_ms)
                    ),
                );
            }
            if cap_reached {
                return hold(
                    s,
                    format!(
                        "merge ratio {} < {} for {k} windows, but {} changes in the last hour reach the cap; merging stays on",
                        pct(ratio),
                        pct(low),
                        cfg.max_changes_per_hour
                    ),
                );
            }
            let n = s.low_windows;
            s.mode = Mode::Off;
            s.since_ms = now_ms;
            s.low_windows = 0;
            s.next_probe_at_ms = Some(now_ms + s.backoff_ms);
            s.changes_ms.push(now_ms);
            let reason = format!(
                "merge ratio {} < {} for {n} windows at {rate:.0} bios/s; next probe in {}",
                pct(ratio),
                pct(low),
                secs(s.backoff_ms)
            );
            Evaluation {
                state: s,
                kind: OutcomeKind::Disable,
                write_nomerges: Some(cfg.disabled_nomerges),
                reason: reason.into(),
            }
        }
        Mode::Off => {
            if let Some(w) = window {
                let bios = w.counters.bios();
                let ratio = w.counters.merge_ratio();
                if bios >= cfg.min_window_bios && ratio >= high {
                    s.mode = Mode::Merging;
                    s.since_ms = now_ms;
                    s.backoff_ms = initial_backoff_ms;
                    s.next_probe_at_ms = None;
                    s.changes_ms.push(now_ms);
                    let reason = format!(
                        "merges still counted at nomerges={}: ratio {} >= {} at {:.0} bios/s",
                        cfg.disabled_nomerges,
                        pct(ratio),
                        pct(high),
                        w.bios_per_sec()
                    );
                    return Evaluation {
                        state: s,
                        kind: OutcomeKind::Enable,
                        write_nomerges: Some(0),
                        reason: reason.into(),
                    };
                }
            }
            let due = s.next_probe_at_ms.unwrap_or(now_ms);
            if now_ms < due {
                let reason = format!("merging off; next probe in {}", secs(due - now_ms));
                return hold(s, reason);
            }
            let off_for = now_ms.saturating_sub(s.since_ms);
            s.mode = Mode::Probing;
            s.since_ms = now_ms;
            s.probe_counters = Counters::default();
            s.probe_windows_done = 0;
            s.probe_idle_windows = 0;
            s.next_probe_at_ms = None;
            s.changes_ms.push(now_ms);
            let reason = format!(
                "probe after {} off: merging back on for {} busy windows to measure",
                secs(off_for),
                cfg.probe_windows
            );
            Evaluation {
                state: s,
                kind: OutcomeKind::ProbeStart,
                write_nomerges: Some(0),
                reason: reason.into(),
            }
        }
        Mode::Probing => {
            let Some(w) = window else {
                return hold(s, "probing; window still open");
            };
            if w.counters.bios() < cfg.min_window_bios {
                s.probe_idle_windows += 1;
                // Merging on is the safe state: an idle probe simply ends with merging on.
                if s.probe_idle_windows >= 4 * cfg.probe_windows {
                    let n = s.probe_idle_windows;
                    s.mode = Mode::Merging;
                    s.since_ms = now_ms;
                    s.low_windows = 0;
                    return Evaluation {
                        state: s,
                        kind: OutcomeKind::ProbeSucceeded,
                        write_nomerges: None,
                        reason: format!(
                            "probe inconclusive after {n} idle windows; merging stays on"
                        )
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
            if ratio < low && !cap_reached {
                s.backoff_ms =
                    (s.backoff_ms.saturating_mul(2)).clamp(initial_backoff_ms, max_backoff_ms);
                s.mode = Mode::Off;
                s.since_ms = now_ms;
                s.next_probe_at_ms = Some(now_ms + s.backoff_ms);
                s.changes_ms.push(now_ms);
                let reason = format!(
                    "probe found merge ratio {} < {} over {bios} bios; merging off again, next probe in {}",
                    pct(ratio),
                    pct(low),
                    secs(s.backoff_ms)
                );
                return Evaluation {
                    state: s,
                    kind: OutcomeKind::ProbeFailed,
                    write_nomerges: Some(cfg.disabled_nomerges),
                    reason: reason.into(),
                };
            }
            let reason = if ratio < low {
                format!(
                    "probe found merge ratio {} < {} but the hourly change cap ({}) is reached; merging stays on",
                    pct(ratio),
                    pct(low),
                    cfg.max_changes_per_hour
                )
            } else {
                format!(
                    "probe found merge ratio {} >= {} over {bios} bios; merging stays on",
                    pct(ratio),
                    pct(low)
                )
            };
            s.mode = Mode::Merging;
            s.since_ms = now_ms;
            s.low_windows = 0;
            if ratio >= low {
                s.backoff_ms = initial_backoff_ms;
            }
            Evaluation {
                state: s,
                kind: OutcomeKind::ProbeSucceeded,
                write_nomerges: None,
                reason: reason.into(),
            }
        }
    }
}
