//! The off mode (L3, nomerges=2: the merge counters read zero whatever the load). It is a
//! level to rest at only where the daemon sees there (a bio tap, `Caps::sense_at_l3`) and
//! where the cost profile says it saves; otherwise the device leaves it at once. At L3:
//! - a sensed sample (the tap's bios of this window) whose share of bios mergeable into a
//!   request not yet issued reaches the high threshold is mergeable I/O the counters cannot
//!   show: back to L0 at once;
//! - the timed probe, or an early one when the workload's signature changes to one not
//!   already found merge-hostile, goes to L0 to measure, unless a sensed sample clearly
//!   under the low threshold already answers it (no excursion, no queue freeze).

use super::reason::{ChangeAnsweredByTap, ChangeUnconfirmed, pct, secs};
use super::signature::{
    CHANGE_CONFIRM_WINDOWS, RATE_BASELINE_AFTER_WINDOWS, RATE_BASELINE_MS, RATE_CHANGE_CONFIRM_MS,
    SignatureChange,
};
use super::{AtL3, Ctx, Evaluation, History, InMode, OutcomeKind, ProbeCause, Reason, Signature};
use super::{Step, TAP_CONFIRM_SAMPLES, TAP_DECISIVE_SHARE, change, hold, sensed_min_bios};
use crate::decision::{Level, count};
use crate::sampler::Window;
use std::ops::ControlFlow;

/// The share of the tap's bios mergeable into a request not yet issued, and how many it
/// sampled.
type Sensed = (f64, u64);

/// The steps in order: leave L3 where it is blind or not worth it; back to L0 when the tap
/// sees mergeable I/O; watch the workload's signature for a change; then, when a probe is
/// due (timed, or early for a changed workload), let a low sample answer it, or probe.
pub(super) fn decide(h: History, at: AtL3, window: Option<&Window>, cx: &Ctx) -> Evaluation {
    let s = then!(leave_where_blind_or_not_worth_it(
        InMode { h, m: at },
        window,
        cx
    ));
    // What the tap saw in this window, when it saw enough to judge.
    let sensed: Option<Sensed> = window
        .and_then(|w| w.sensed)
        .filter(|sn| sn.bios >= sensed_min_bios(cx.cfg))
        .map(|sn| (sn.mergeable as f64 / sn.bios as f64, sn.bios));
    let s = then!(back_when_the_tap_sees_merges(s, sensed, cx));
    let (s, changed, sig_now) = then!(watch_the_signature(s, window, cx));
    let due = s.m.next_probe_at_ms.unwrap_or(cx.now_ms);
    if cx.now_ms < due && changed.is_none() {
        let next_probe_in_ms = due - cx.now_ms;
        return hold(s, Reason::AtL3 { next_probe_in_ms });
    }
    // A sample taken since the change began (one opened before it holds the old
    // workload's bios) and clearly under the low threshold answers a probe without
    // leaving L3.
    let began_ms = window
        .and_then(|w| w.sensed)
        .map_or(0, |sn| cx.now_ms.saturating_sub(sn.sampled_ms));
    let sensed = sensed.filter(|_| changed.is_none() || s.m.changed_since_ms <= Some(began_ms));
    if let Some(low) = sensed.filter(|&(share, _)| share < cx.low) {
        return answered_by_the_tap(s, low, changed.zip(sig_now), due, cx);
    }
    // A change in rate alone waits for the tap's sample, which the daemon asks for at once
    // ([`Reason::asks_the_tap`]): a slower or faster workload of the same shape is no sign
    // of merges being missed, and CPU contention slows a CPU-bound device for seconds at a
    // time and frees it again (with two busy loops beside fio on a loop device here, falls
    // of 0.55-0.65x lasting over a second probed twice in 90 s, and rises of 1.8x measured
    // in 50 ms windows four times; four busy null_blk devices on 2 emulated vCPUs moved
    // each other's rates by 3.4-3.8x, and each such rise probed and found 0.0% merging).
    // The tap sees a switch to mergeable bios directly, in the next window.
    if let (
        Some(SignatureChange::Rate {
            from_per_sec,
            to_per_sec,
        }),
        None,
        true,
    ) = (changed, sensed, cx.now_ms < due)
    {
        let lasted_ms =
            s.m.changed_since_ms
                .map_or(0, |t| cx.now_ms.saturating_sub(t));
        let reason = Reason::RateChangeAwaitsTap {
            from_per_sec,
            to_per_sec,
            lasted_ms,
            next_probe_in_ms: due - cx.now_ms,
        };
        return hold(s, reason);
    }
    probe(s, changed, cx)
}

/// Blind here (no tap, or it went away), no longer allowed (a reload made the config's
/// deepest allowed level L2), or no longer worth keeping: to L2 where it is worth keeping, else L0. Worth is
/// the band's upper side ([`crate::pricing::worth::Worth::keeps`]: live, the upper end of the saving's
/// interval under the floor), judged only on a busy window after the first
/// [`RATE_BASELINE_AFTER_WINDOWS`] at L3: the first holds the queue freeze of the write,
/// and a saving priced at that depressed rate is no measure of L3 (seen on a loop device:
/// 0 -> 2 at 201542 bios/s, then 2 -> 0 0.2 s later on 6.69 ms/s [4.05, 10.57], 22 writes
/// in 104 s).
fn leave_where_blind_or_not_worth_it(
    mut s: InMode<AtL3>,
    window: Option<&Window>,
    cx: &Ctx,
) -> Step<InMode<AtL3>> {
    let blind = !cx.caps.sense_at_l3;
    let l3_disallowed = super::deepest_allowed(cx.cfg) < Level::L3;
    let settled_window = window.is_some_and(|w| w.counters.bios() >= cx.cfg.min_window_bios)
        && s.m.busy_windows >= RATE_BASELINE_AFTER_WINDOWS;
    let not_kept = settled_window && !cx.caps.worth.keeps(Level::L3);
    if settled_window && !not_kept {
        s.m.not_kept_since_ms = None;
    }
    // A live saving under the floor must last; a profile (fixed between reloads) or no
    // pricing at all leaves at once.
    let lasted = match cx.caps.worth.basis {
        crate::pricing::worth::Basis::Live { .. } if not_kept => {
            let since = *s.m.not_kept_since_ms.get_or_insert(cx.now_ms);
            cx.now_ms.saturating_sub(since) >= super::LEAVE_L3_NOT_WORTH_AFTER_MS
        }
        _ => not_kept,
    };
    if !(blind || l3_disallowed || lasted) {
        return ControlFlow::Continue(s);
    }
    // Every config allows L2 (the deepest allowed is L2 or L3).
    let to = if cx.caps.has(Level::L2) && cx.caps.worth.keeps(Level::L2) {
        Level::L2
    } else {
        Level::L0
    };
    let reason = if blind {
        Reason::BlindAtL3 { to }
    } else if l3_disallowed {
        Reason::L3NoLongerAllowed {
            disabled_nomerges: cx.cfg.disabled_nomerges,
            to,
        }
    } else {
        Reason::LeaveNotWorth {
            from: Level::L3,
            why: cx.caps.worth.describe([Level::L3]),
            to,
        }
    };
    s.h.backoff_ms = cx.initial_backoff_ms;
    ControlFlow::Break(change(
        s.h.move_to(to, cx.now_ms),
        OutcomeKind::Enable,
        reason,
    ))
}

/// Sensed samples at or over the high threshold, [`TAP_CONFIRM_SAMPLES`] in a row (or one
/// at [`TAP_DECISIVE_SHARE`]), are mergeable I/O the counters cannot show: back to L0 at
/// once. A lone one (a burst over before the next sample) holds, and a sample under the
/// threshold starts the count again. The workload L3 was entered with is no longer remembered as merge-hostile: it
/// did not settle here (if the counters at L0 find nothing, it is remembered again there).
fn back_when_the_tap_sees_merges(
    mut s: InMode<AtL3>,
    sensed: Option<Sensed>,
    cx: &Ctx,
) -> Step<InMode<AtL3>> {
    let Some((share, n)) = sensed else {
        return ControlFlow::Continue(s);
    };
    if share < cx.high {
        s.m.tap_high_samples = 0;
        return ControlFlow::Continue(s);
    }
    s.m.tap_high_samples = s.m.tap_high_samples.saturating_add(1);
    if s.m.tap_high_samples < TAP_CONFIRM_SAMPLES && share < TAP_DECISIVE_SHARE {
        let reason = Reason::SensedOnce {
            share,
            sampled: n,
            high: cx.high,
            samples: s.m.tap_high_samples,
            of: TAP_CONFIRM_SAMPLES,
        };
        return ControlFlow::Break(hold(s, reason));
    }
    s.h.backoff_ms = cx.initial_backoff_ms;
    if let Some(sig) = s.m.signature {
        s.h.forget_hostile(&sig);
    }
    let mut s = s.h.move_to(Level::L0, cx.now_ms);
    if let super::Phase::Merging(m) = &mut s.phase {
        // The counters at L0 tell whether the call was right (`merging::check_the_tap_call`).
        m.tap_called = true;
    }
    let reason = Reason::SensedMergeable {
        share,
        sampled: n,
        high: cx.high,
    };
    ControlFlow::Break(change(s, OutcomeKind::Enable, reason))
}

/// The window's signature against the one L3 was reached with: what changed (None if
/// nothing, or too few bios to tell), and the signature now. A change counts once it has
/// lasted ([`SignatureChange::confirmed`]): until then the device holds, saying so, unless
/// the timed probe is due anyway. A change to a workload this device already found
/// merge-hostile (say a database that alternates between two rates) needs no probe: it
/// becomes the new baseline. Without this, two known workloads taking turns would probe
/// at every turn.
fn watch_the_signature(
    mut s: InMode<AtL3>,
    window: Option<&Window>,
    cx: &Ctx,
) -> Step<(InMode<AtL3>, Option<SignatureChange>, Option<Signature>)> {
    let Some(w) = window.filter(|w| w.counters.bios() >= cx.cfg.min_window_bios) else {
        return ControlFlow::Continue((s, None, None));
    };
    let sig = Signature::of(w);
    let settling = cx.now_ms.saturating_sub(s.h.since_ms) < RATE_BASELINE_MS;
    let changed = against_the_baseline(&mut s.m, &sig, settling);
    let due = s.m.next_probe_at_ms.unwrap_or(cx.now_ms);
    let (mut s, changed) = confirm_the_change(s, changed, w, due, cx)?;
    let Some(what) = changed else {
        return ControlFlow::Continue((s, None, Some(sig)));
    };
    if !s.h.is_known_hostile(&sig) {
        return ControlFlow::Continue((s, Some(what), Some(sig)));
    }
    // A new baseline: a change from it is timed from its own start.
    s.m.signature = Some(sig);
    s.m.changed_since_ms = None;
    s.m.changed_windows = 0;
    if cx.now_ms >= due {
        return ControlFlow::Continue((s, None, Some(sig)));
    }
    let reason = Reason::KnownHostileChange {
        change: what,
        next_probe_in_ms: due - cx.now_ms,
    };
    ControlFlow::Break(hold(s, reason))
}

/// What changed from the baseline, which this window may move. A change of shape counts
/// from the first busy window at L3. The rate only once the first
/// [`RATE_BASELINE_AFTER_WINDOWS`] windows and [`RATE_BASELINE_MS`] at L3 (`settling`
/// until then) have set it (the entry's rate was measured at another level; the first
/// window holds the write's queue freeze; a CPU-bound device speeds up at L3 over
/// seconds): the fastest of them, and after them the fastest window showing no change, so
/// that the end of CPU contention is no rise.
fn against_the_baseline(at: &mut AtL3, sig: &Signature, settling: bool) -> Option<SignatureChange> {
    at.busy_windows = at.busy_windows.saturating_add(1);
    let Some(base) = at.signature.as_mut() else {
        at.signature = Some(*sig);
        return None;
    };
    let changed = if settling || at.busy_windows <= RATE_BASELINE_AFTER_WINDOWS {
        sig.shape_changed_from(base)
    } else {
        sig.changed_from(base)
    };
    if changed.is_none() {
        base.bios_per_sec = match at.busy_windows {
            1 => sig.bios_per_sec,
            _ => base.bios_per_sec.max(sig.bios_per_sec),
        };
    }
    changed
}

/// A change not yet confirmed ([`SignatureChange::confirmed`]: a change in rate alone that
/// is not decisive, seen in fewer than [`CHANGE_CONFIRM_WINDOWS`] busy windows in a row or
/// for less than [`RATE_CHANGE_CONFIRM_MS`]) is no change yet: hold and say so, or, when the timed probe is due, let it run. A window
/// showing no change ends the count.
fn confirm_the_change(
    mut s: InMode<AtL3>,
    changed: Option<SignatureChange>,
    w: &Window,
    due: u64,
    cx: &Ctx,
) -> Step<(InMode<AtL3>, Option<SignatureChange>)> {
    let now_ms = cx.now_ms;
    let Some(what) = changed else {
        s.m.changed_since_ms = None;
        s.m.changed_windows = 0;
        return ControlFlow::Continue((s, None));
    };
    let since_ms =
        *s.m.changed_since_ms
            .get_or_insert(now_ms.saturating_sub(w.duration_ms));
    s.m.changed_windows = s.m.changed_windows.saturating_add(1);
    let lasted_ms = now_ms.saturating_sub(since_ms);
    if what.confirmed(s.m.changed_windows, lasted_ms) {
        // Kept while the change lasts: a rate change waits for the tap's next sample
        // (`decide`).
        return ControlFlow::Continue((s, changed));
    }
    if now_ms >= due {
        return ControlFlow::Continue((s, None));
    }
    let reason = Reason::ChangeUnconfirmed(Box::new(ChangeUnconfirmed {
        change: what,
        windows: s.m.changed_windows,
        lasted_ms,
        next_probe_in_ms: due - now_ms,
    }));
    ControlFlow::Break(hold(s, reason))
}

/// A probe answered by a sample clearly under the low threshold: stay at L3, with no
/// excursion and no queue freeze. A changed workload answered so is remembered as
/// merge-hostile.
fn answered_by_the_tap(
    mut s: InMode<AtL3>,
    (share, n): Sensed,
    changed: Option<(SignatureChange, Signature)>,
    due: u64,
    cx: &Ctx,
) -> Evaluation {
    let now_ms = cx.now_ms;
    if let Some((what, sig)) = changed {
        s.m.signature = Some(sig);
        s.m.changed_since_ms = None;
        s.m.changed_windows = 0;
        s.h.remember_hostile(sig);
        let reason = Reason::ChangeAnsweredByTap(Box::new(ChangeAnsweredByTap {
            change: what,
            share,
            sampled: n,
            low: cx.low,
            next_probe_in_ms: due.saturating_sub(now_ms),
        }));
        return hold(s, reason);
    }
    s.m.next_probe_at_ms = Some(now_ms + s.h.backoff_ms);
    let reason = Reason::AnsweredByTap {
        share,
        sampled: n,
        low: cx.low,
        next_probe_in_ms: s.h.backoff_ms,
    };
    hold(s, reason)
}

/// To L0 to measure: at once for a changed workload, else the timed probe.
fn probe(s: InMode<AtL3>, changed: Option<SignatureChange>, cx: &Ctx) -> Evaluation {
    let (cfg, now_ms) = (cx.cfg, cx.now_ms);
    let off_for = now_ms.saturating_sub(s.h.since_ms);
    if let Some(what) = changed {
        let timer_at_ms = s.m.next_probe_at_ms;
        let s = s.h.start_probe(ProbeCause::Change { timer_at_ms }, now_ms);
        let reason = Reason::ProbeOnChange {
            change: what,
            windows: cfg.probe_windows,
        };
        return change(s, OutcomeKind::ProbeStart, reason);
    }
    let s = s.h.start_probe(ProbeCause::Timer, now_ms);
    let reason = Reason::TimedProbe {
        off_for_ms: off_for,
        windows: cfg.probe_windows,
    };
    change(s, OutcomeKind::ProbeStart, reason)
}

/// The off mode's wording where L3 is left ([`Reason`]'s `Display` sends
/// these reasons here, and only these).
pub(super) fn leaves(reason: &Reason, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    match reason {
        Reason::L3NoLongerAllowed {
            disabled_nomerges,
            to,
        } => write!(
            f,
            "the config no longer allows L3 ([policy] disabled_nomerges = {disabled_nomerges}); back to {to}"
        ),
        Reason::BlindAtL3 { to } => write!(
            f,
            "no bio tap at L3: the merge counters are blind there; back to {to}"
        ),
        Reason::SensedMergeable {
            share,
            sampled,
            high,
        } => write!(
            f,
            "sensed at L3: {} of {sampled} sampled bios would merge into a request not yet issued (>= {}): merging would find them; back to L0",
            pct(*share),
            pct(*high)
        ),
        Reason::ProbeOnChange { change, windows } => write!(
            f,
            "workload changed at L3 ({change}): probing at once, L0 for {}",
            count(u64::from(*windows), "busy window")
        ),
        Reason::TimedProbe {
            off_for_ms,
            windows,
        } => write!(
            f,
            "probe after {} at L3: L0 for {} to measure",
            secs(*off_for_ms),
            count(u64::from(*windows), "busy window")
        ),
        _ => unreachable!("{reason:?} is worded by another mode"),
    }
}

/// The off mode's wording where L3 stays ([`Reason`]'s `Display` sends
/// these reasons here, and only these).
pub(super) fn stays(reason: &Reason, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    match reason {
        Reason::AtL3 { next_probe_in_ms } => {
            write!(f, "at L3; next probe in {}", secs(*next_probe_in_ms))
        }
        Reason::AnsweredByTap {
            share,
            sampled,
            low,
            next_probe_in_ms,
        } => write!(
            f,
            "probe answered by the tap at L3: {} of {sampled} sampled bios mergeable (< {}); staying, next probe in {}",
            pct(*share),
            pct(*low),
            secs(*next_probe_in_ms)
        ),
        Reason::KnownHostileChange {
            change,
            next_probe_in_ms,
        } => write!(
            f,
            "workload changed at L3 ({change}) to one already found merge-hostile: no probe; next probe in {}",
            secs(*next_probe_in_ms)
        ),
        Reason::RateChangeAwaitsTap {
            from_per_sec,
            to_per_sec,
            lasted_ms,
            next_probe_in_ms,
        } => write!(
            f,
            "at L3 the rate changed ({}) for {}, the same shape: the bio tap's next sample says whether merging would find anything (a change of rate alone is no sign of merges; CPU contention also slows and frees a workload); next probe in {}",
            SignatureChange::Rate {
                from_per_sec: *from_per_sec,
                to_per_sec: *to_per_sec
            },
            secs(*lasted_ms),
            secs(*next_probe_in_ms)
        ),
        Reason::ChangeUnconfirmed(c) => {
            let ChangeUnconfirmed {
                change,
                windows,
                lasted_ms,
                next_probe_in_ms,
            } = &**c;
            write!(
                f,
                "at L3 the workload differs ({change}) in {} for {}: a change of rate alone counts once seen in {CHANGE_CONFIRM_WINDOWS} windows in a row over {} (CPU contention also moves the rate); next probe in {}",
                count(u64::from(*windows), "busy window"),
                secs(*lasted_ms),
                secs(RATE_CHANGE_CONFIRM_MS),
                secs(*next_probe_in_ms)
            )
        }
        Reason::SensedOnce {
            share,
            sampled,
            high,
            samples,
            of,
        } => write!(
            f,
            "sensed at L3: {} of {sampled} sampled bios start where a recent bio of the same direction ended (>= {}), sample {samples} of {of} in a row before merging comes back (a lone burst does not pay for the writes)",
            pct(*share),
            pct(*high)
        ),
        Reason::ChangeAnsweredByTap(c) => write!(
            f,
            "workload changed at L3 ({}), but the tap sees {} of {} sampled bios mergeable (< {}): no probe needed; next probe in {}",
            c.change,
            pct(c.share),
            c.sampled,
            pct(c.low),
            secs(c.next_probe_in_ms)
        ),
        _ => unreachable!("{reason:?} is worded by another mode"),
    }
}
