//! The probing mode (at L0, out of L3): measure `probe_windows` busy windows with every
//! merge on. A clearly low probe goes back to L3 (a timed probe doubles the backoff); any
//! other stays at L0, and one where merging clearly pays tries L2 at once.

use super::reason::{NoL3, pct, secs};
use super::{Ctx, Evaluation, History, InMode, Merging, Mode, OutcomeKind, Probe, Reason};
use super::{ProbeCause, Signature, change, hold, settle};
use crate::decision::{Level, count};
use crate::sampler::Window;

/// The steps in order: an idle window counts toward giving up (at L0, the safe level); a
/// busy one is added to the probe's counters until it has `probe_windows` of them; then
/// the probe's merge ratio decides: low goes back to L3 (or stays at L0 where L3 is not
/// allowed), anything else stays at L0 and may try L2.
pub(super) fn decide(h: History, p: Probe, window: Option<&Window>, cx: &Ctx) -> Evaluation {
    let (cfg, mut s) = (cx.cfg, InMode { h, m: p });
    let Some(w) = window else {
        return hold(s, Reason::WindowOpen(Mode::Probing));
    };
    if w.counters.bios() < cfg.min_window_bios {
        return idle_window(s, cx);
    }
    let measured = &mut s.m.measured;
    measured.counters.add(&w.counters);
    measured.windows_done += 1;
    if measured.windows_done < cfg.probe_windows {
        let reason = Reason::ProbeWindow {
            window: measured.windows_done,
            of: cfg.probe_windows,
            ratio: measured.counters.merge_ratio(),
        };
        return hold(s, reason);
    }
    if measured.counters.merge_ratio() < cx.low {
        low_probe(s, w, cx)
    } else {
        merging_pays(s, w, cx)
    }
}

/// An idle window does not count; enough of them end the probe at L0.
fn idle_window(mut s: InMode<Probe>, cx: &Ctx) -> Evaluation {
    s.m.measured.idle_windows += 1;
    if s.m.measured.idle_windows < 4 * cx.cfg.probe_windows {
        return hold(s, Reason::IdleDoesNotCount(Mode::Probing));
    }
    let n = s.m.measured.idle_windows;
    settle(
        s.h.settle_merging(Merging::at(Level::L0), cx.now_ms),
        OutcomeKind::ProbeInconclusive,
        Reason::ProbeInconclusive { idle_windows: n },
    )
}

/// A probe that found merging rare: back to L3 (a timed probe doubles the backoff), or,
/// where L3 is blind or not worth it now (the tap or the profile changed during the
/// probe), L0, from where the ladder walks down. The cap never keeps a failed probe from
/// returning to L3: that only undoes the probe's own excursion (probes themselves are
/// paced by the backoff).
fn low_probe(mut s: InMode<Probe>, w: &Window, cx: &Ctx) -> Evaluation {
    let (now_ms, low) = (cx.now_ms, cx.low);
    let ratio = s.m.measured.counters.merge_ratio();
    let bios = s.m.measured.counters.bios();
    if !cx.l3_allowed() {
        s.h.backoff_ms = cx.initial_backoff_ms;
        let reason = Reason::ProbeLowNoL3 {
            ratio,
            low,
            bios,
            why: cx.why_no_l3(),
        };
        // A step to L3 later says what changed since (`merging`'s `say_what_changed`).
        let mut m = Merging::at(Level::L0);
        m.not_worth_noted = matches!(
            reason,
            Reason::ProbeLowNoL3 {
                why: NoL3::NotWorth,
                ..
            }
        );
        m.unknown_noted = matches!(
            reason,
            Reason::ProbeLowNoL3 {
                why: NoL3::SavingUnknown,
                ..
            }
        );
        return settle(
            s.h.settle_merging(m, now_ms),
            OutcomeKind::ProbeFailed,
            reason,
        );
    }
    // A probe started by a workload change that finds nothing says nothing about the
    // timer: only timed probes double the backoff.
    let timer = match s.m.cause {
        ProbeCause::Timer => {
            s.h.backoff_ms =
                (s.h.backoff_ms.saturating_mul(2)).clamp(cx.initial_backoff_ms, cx.max_backoff_ms);
            None
        }
        ProbeCause::Change { timer_at_ms } => timer_at_ms.filter(|&t| t > now_ms),
    };
    let next_probe_at_ms = timer.unwrap_or(now_ms + s.h.backoff_ms);
    let next_in = next_probe_at_ms - now_ms;
    let s =
        s.h.enter_l3(Signature::of(w), next_probe_at_ms, true, now_ms);
    let reason = Reason::ProbeFoundNone {
        ratio,
        low,
        bios,
        next_probe_in_ms: next_in,
    };
    change(s, OutcomeKind::ProbeFailed, reason)
}

/// A probe that found merges: stay at L0, the workload no longer known as merge-hostile.
/// The probe's windows at L0 are the baseline a trial of L2 needs: when merging clearly
/// pays, try L2 right away rather than after more windows at L0.
fn merging_pays(mut s: InMode<Probe>, w: &Window, cx: &Ctx) -> Evaluation {
    let (cfg, now_ms) = (cx.cfg, cx.now_ms);
    let measured = s.m.measured.counters;
    let ratio = measured.merge_ratio();
    let bios = measured.bios();
    let found = |trial_windows| Reason::ProbeFoundMerges {
        ratio,
        low: cx.low,
        bios,
        trial_windows,
    };
    s.h.backoff_ms = cx.initial_backoff_ms;
    s.h.forget_hostile(&Signature::of(w));
    if ratio >= cx.high && cx.trial_allowed() && now_ms >= s.h.next_trial_at_ms && !cx.cap_reached {
        let s = s.h.start_trial(measured, Level::L0, now_ms);
        return change(s, OutcomeKind::TrialStart, found(Some(cfg.probe_windows)));
    }
    let s = s.h.settle_merging(Merging::at(Level::L0), now_ms);
    settle(s, OutcomeKind::ProbeSucceeded, found(None))
}

/// The probing mode's wording ([`Reason`]'s `Display` sends
/// these reasons here, and only these).
pub(super) fn wording(reason: &Reason, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    match reason {
        Reason::ProbeWindow { window, of, ratio } => write!(
            f,
            "probing: window {window} of {of}, merge ratio so far {}",
            pct(*ratio)
        ),
        Reason::ProbeInconclusive { idle_windows } => write!(
            f,
            "probe inconclusive after {idle_windows} idle windows; staying at L0"
        ),
        Reason::ProbeLowNoL3 {
            ratio,
            low,
            bios,
            why,
        } => write!(
            f,
            "probe found merge ratio {} < {} over {bios} bios, but {why}: staying at L0",
            pct(*ratio),
            pct(*low),
        ),
        Reason::ProbeFoundNone {
            ratio,
            low,
            bios,
            next_probe_in_ms,
        } => write!(
            f,
            "probe found merge ratio {} < {} over {bios} bios; back to L3, next probe in {}",
            pct(*ratio),
            pct(*low),
            secs(*next_probe_in_ms)
        ),
        Reason::ProbeFoundMerges {
            ratio,
            low,
            bios,
            trial_windows,
        } => {
            write!(
                f,
                "probe found merge ratio {} >= {} over {bios} bios; staying at L0",
                pct(*ratio),
                pct(*low)
            )?;
            match trial_windows {
                Some(n) => write!(
                    f,
                    "; merging pays, so trying L2 (plug and one-hit merges only) for {}",
                    count(u64::from(*n), "window")
                ),
                None => Ok(()),
            }
        }
        _ => unreachable!("{reason:?} is worded by another mode"),
    }
}
