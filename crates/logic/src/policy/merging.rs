//! The merging mode (L0, L1, L2: the counters still show merges): step up at once when
//! merges are visible, try L2 while merging pays, step down one rung after enough low
//! windows, but only toward a level the cost profile says saves measurably: else "not
//! worth it here". Two steps skip the rungs: to L3 for a workload already found
//! merge-hostile, and from L0 to L3 where not one bio merged with every kind of merge
//! tried and a bio tap watches L3 (the rungs between have nothing to show).

use super::reason::{KnownHostileToL3, pct, secs};
use super::{Ctx, DEEPEST_LEVEL, Evaluation, History, InMode, Merging, Mode, OutcomeKind, Reason};
use super::{Signature, Step, TAP_HOLDOFF_INITIAL_MS, change, hold, next_down, settle};
use crate::decision::{Level, count};
use crate::sampler::Window;
use std::ops::ControlFlow;

/// What one closed window shows.
struct Seen<'w> {
    w: &'w Window,
    ratio: f64,
    bios_per_sec: f64,
}

/// The steps in order: an idle window holds; a level not worth it, or one still seeing
/// merges, goes back to L0; merging that pays may start a trial of L2, and else holds; a
/// low window counts toward a step down, which is taken once the count, the dwell time and
/// the cap allow.
pub(super) fn decide(h: History, m: Merging, window: Option<&Window>, cx: &Ctx) -> Evaluation {
    let s = InMode { h, m };
    let Some(w) = window else {
        return hold(s, Reason::WindowOpen(Mode::Merging));
    };
    let bios = w.counters.bios();
    if bios < cx.cfg.min_window_bios {
        let min_bios = cx.cfg.min_window_bios;
        return hold(s, Reason::Idle { bios, min_bios });
    }
    let seen = Seen {
        w,
        ratio: w.counters.merge_ratio(),
        bios_per_sec: w.bios_per_sec(),
    };
    let s = count_busy_and_worth(s, cx);
    let s = count_empty(s, &seen);
    let s = check_the_tap_call(s, &seen, cx);
    let s = then!(back_to_l0(s, &seen, cx));
    let s = then!(while_merging_pays(s, &seen, cx));
    let (s, next) = then!(low_window(s, &seen, cx));
    let s = then!(hold_while_refuted(s, cx));
    let s = then!(straight_to_l3_if_known(s, &seen, cx));
    let s = then!(straight_to_l3_if_nothing_merges(s, &seen, cx));
    let s = then!(wait_for_the_step(s, &seen, cx, next));
    take_the_step(s, &seen, cx, next)
}

/// Counts the busy windows at this level, and those in a row in which a level below was
/// worth stepping down to (at this window's rate): a step down waits for as many of them
/// as it waits for low windows, so that one fast window does not take it.
fn count_busy_and_worth(mut s: InMode<Merging>, cx: &Ctx) -> InMode<Merging> {
    s.m.busy_windows = s.m.busy_windows.saturating_add(1);
    s.m.worth_windows = if cx.not_worth(s.m.level).is_none() {
        s.m.worth_windows.saturating_add(1)
    } else {
        0
    };
    s
}

/// Low windows that count toward a step down: those in a row that were also worth it.
fn steps_counted(m: &Merging) -> u32 {
    m.low_windows.min(m.worth_windows)
}

/// Counts the busy windows at L0 in which not one bio merged. Only at L0: a level above it
/// has turned some kinds of merge off, so its zero says nothing about them.
fn count_empty(mut s: InMode<Merging>, seen: &Seen) -> InMode<Merging> {
    s.m.empty_windows = if s.m.level == Level::L0 && seen.w.counters.merged() == 0 {
        s.m.empty_windows.saturating_add(1)
    } else {
        0
    };
    s
}

/// The bio tap's call for merging, checked by the counters (not borne out: the workload is
/// remembered as merge-hostile, and the rungs wait with L3, `hold_while_refuted`). L0 was reached because the tap
/// at L3 called bios mergeable; the first busy window here shows whether
/// merging finds them. A neighbour already dispatched cannot merge, so a sequential stream
/// at a low queue depth is contiguous and merges next to nothing: not borne out, steps to
/// L3 wait a hold-off that doubles at each such call in a row (up to the probes' longest
/// backoff), and one borne out resets it. Without it the tap and the counters take turns,
/// L0 -> L3 -> L0 every few seconds, a queue freeze each (seen on a loop device: four
/// rounds in 6 s). The hold-off keeps merging on, the safe side; the rungs above L3, whose
/// counters still see merges, stay open.
fn check_the_tap_call(mut s: InMode<Merging>, seen: &Seen, cx: &Ctx) -> InMode<Merging> {
    if !s.m.tap_called {
        return s;
    }
    s.m.tap_called = false;
    if seen.ratio >= cx.low {
        s.h.tap_holdoff_ms = TAP_HOLDOFF_INITIAL_MS;
    } else {
        s.h.l3_not_before_ms = cx.now_ms.saturating_add(s.h.tap_holdoff_ms);
        let longest = cx.max_backoff_ms.max(TAP_HOLDOFF_INITIAL_MS);
        s.h.tap_holdoff_ms = s.h.tap_holdoff_ms.saturating_mul(2).min(longest);
        s.m.tap_refuted = true;
        s.h.remember_hostile(Signature::of(seen.w));
    }
    s
}

/// The step from L0 straight to L3 is open here: L3 is a level to rest at (the config, a
/// bio tap, the profile), the device is at L0, and every low window so far merged
/// nothing. `empty_windows` counts from the same start, so it only catches up with
/// `low_windows` when no low window had a merge.
fn nothing_merges(s: &InMode<Merging>, cx: &Ctx) -> bool {
    s.m.level == Level::L0
        && s.m.empty_windows >= s.m.low_windows
        && cx.l3_allowed()
        && s.h.l3_held_off(cx.now_ms).is_none()
}

/// Back to L0 from a level no longer worth keeping, with nothing below it worth keeping
/// either (the other side of the band: live, the upper end of the saving's interval under
/// the floor; a profile or a reload that says the level saves nothing), judged from the
/// second busy window here (the first holds the write's queue freeze); or from a level
/// where merges are still counted (an L2 that a trial verified keeps its plug merges and
/// stays).
fn back_to_l0(mut s: InMode<Merging>, seen: &Seen, cx: &Ctx) -> Step<InMode<Merging>> {
    let (level, ratio, now_ms) = (s.m.level, seen.ratio, cx.now_ms);
    // L0 is always kept (`Worth::keeps`), so this never leaves L0 for L0.
    if s.m.busy_windows > 1 && cx.not_worth_keeping(level) {
        let judged = std::iter::once(level).chain(super::levels_below(level, cx.caps, cx.cfg));
        let reason = Reason::LeaveNotWorth {
            from: level,
            why: cx.caps.worth.describe(judged),
            to: Level::L0,
        };
        return ControlFlow::Break(change(
            s.h.move_to(Level::L0, now_ms),
            OutcomeKind::Enable,
            reason,
        ));
    }
    if level > Level::L0 && ratio >= cx.high && !(level == Level::L2 && s.m.l2_verified) {
        s.h.backoff_ms = cx.initial_backoff_ms;
        let reason = Reason::StillMerging {
            level,
            ratio,
            high: cx.high,
            bios_per_sec: seen.bios_per_sec,
        };
        return ControlFlow::Break(change(
            s.h.move_to(Level::L0, now_ms),
            OutcomeKind::Enable,
            reason,
        ));
    }
    ControlFlow::Continue(s)
}

/// Merging that pays: after enough high windows (and under the cap) a trial of L2, to see
/// whether plug and one-hit merges alone keep it; else a hold that clears the low count.
fn while_merging_pays(mut s: InMode<Merging>, seen: &Seen, cx: &Ctx) -> Step<InMode<Merging>> {
    let (cfg, level, ratio, rate) = (cx.cfg, s.m.level, seen.ratio, seen.bios_per_sec);
    if ratio >= cx.high && level < Level::L2 && cx.trial_allowed() {
        s.m.low_windows = 0;
        s.m.high_windows += 1;
        let k = cfg.step_down_after_windows;
        if s.m.high_windows >= k && cx.now_ms >= s.h.next_trial_at_ms && !cx.cap_reached {
            let s = s.h.start_trial(seen.w.counters, level, cx.now_ms);
            let reason = Reason::TrialStart {
                level,
                ratio,
                bios_per_sec: rate,
                windows: cfg.probe_windows,
            };
            return ControlFlow::Break(change(s, OutcomeKind::TrialStart, reason));
        }
    }
    if ratio >= cx.low {
        s.m.low_windows = 0;
        s.m.tap_refuted = false;
        s.m.not_worth_noted = false;
        s.m.unknown_noted = false;
        let low = cx.low;
        let reason = Reason::Pays {
            level,
            ratio,
            low,
            bios_per_sec: rate,
        };
        return ControlFlow::Break(hold(s, reason));
    }
    ControlFlow::Continue(s)
}

/// A low window, counted. Holds at the deepest level allowed here, and where nothing below
/// saves measurably (said once, when the step would have come; the rungs on the way to a
/// level that does save are taken: the counters still see merges on them). Else the rung
/// the step would go to.
fn low_window(mut s: InMode<Merging>, seen: &Seen, cx: &Ctx) -> Step<(InMode<Merging>, Level)> {
    let (cfg, level, ratio, low) = (cx.cfg, s.m.level, seen.ratio, cx.low);
    s.m.low_windows = s.m.low_windows.saturating_add(1);
    let Some(next) = next_down(level, cx.caps, cfg) else {
        let l3_blind = !cx.caps.sense_at_l3 && super::deepest_allowed(cfg) == DEEPEST_LEVEL;
        let reason = Reason::DeepestAllowed {
            level,
            ratio,
            low,
            l3_blind,
        };
        return ControlFlow::Break(hold(s, reason));
    };
    if let Some(reason) = cx.not_worth(level) {
        // An unknown saving is said once, and the known one once more when it comes.
        let unknown = matches!(reason, Reason::SavingUnknown { .. });
        let said = s.m.not_worth_noted || (unknown && s.m.unknown_noted);
        if !said && s.m.low_windows >= windows_before(next, cx) {
            let kind = if unknown {
                s.m.unknown_noted = true;
                OutcomeKind::SavingUnknown
            } else {
                s.m.not_worth_noted = true;
                OutcomeKind::NotWorthIt
            };
            return ControlFlow::Break(settle(s.into(), kind, reason));
        }
        return ControlFlow::Break(hold(s, reason));
    }
    ControlFlow::Continue((s, next))
}

/// After a call of the tap's that L0 did not bear out, no rung is walked while steps to L3
/// are held off: L0 showed what merging finds here (next to nothing), so each rung would
/// be a write that learns nothing (a false call was L3 -> L0 -> L1 -> L2, four writes with
/// front_merges, then a stay at L2). Merging stays fully on, the safe side; when the
/// hold-off ends, the workload goes straight back to L3 (`straight_to_l3_if_known`).
fn hold_while_refuted(s: InMode<Merging>, cx: &Ctx) -> Step<InMode<Merging>> {
    match s.h.l3_held_off(cx.now_ms) {
        Some(remaining_ms) if s.m.tap_refuted => {
            let level = s.m.level;
            ControlFlow::Break(hold(
                s,
                Reason::L3HeldOff {
                    level,
                    remaining_ms,
                },
            ))
        }
        _ => ControlFlow::Continue(s),
    }
}

/// How many low windows a step to `next` waits for: more for L3, where the counters go
/// blind.
fn windows_before(next: Level, cx: &Ctx) -> u32 {
    if next == DEEPEST_LEVEL {
        cx.cfg.disable_after_windows
    } else {
        cx.cfg.step_down_after_windows
    }
}

/// A workload already known to be merge-hostile: the safe rungs have nothing to show, so
/// straight to L3 (after two low windows, and under the cap).
fn straight_to_l3_if_known(s: InMode<Merging>, seen: &Seen, cx: &Ctx) -> Step<InMode<Merging>> {
    let (cfg, level) = (cx.cfg, s.m.level);
    let sig = Signature::of(seen.w);
    let known = cx.l3_allowed()
        && steps_counted(&s.m) >= cfg.step_down_after_windows.min(2)
        && !cx.cap_reached
        && s.h.l3_held_off(cx.now_ms).is_none()
        && s.h.is_known_hostile(&sig);
    if !known {
        return ControlFlow::Continue(s);
    }
    let n = s.m.low_windows;
    ControlFlow::Break(step_to_l3(s, sig, false, cx, |backoff_ms| {
        Reason::KnownHostileToL3(Box::new(KnownHostileToL3 {
            ratio: seen.ratio,
            low: cx.low,
            windows: n,
            bios_per_sec: seen.bios_per_sec,
            known: sig,
            level,
            next_probe_in_ms: backoff_ms,
        }))
    }))
}

/// Straight from L0 to L3 after `step_down_after_windows` busy windows in which not one
/// bio merged (not a low ratio: none), where L3 is a level to rest at. The walk's rungs
/// and its dwell at L2 are there to see merges that L0 would find and a deeper rung would
/// lose, and a workload that turns mergeable: at L0 every kind of merge is tried and none
/// was found, and at L3 the bio tap sees a switch to mergeable bios within one sensed
/// window. Under the hourly cap, like any step down.
fn straight_to_l3_if_nothing_merges(
    s: InMode<Merging>,
    seen: &Seen,
    cx: &Ctx,
) -> Step<InMode<Merging>> {
    let windows = s.m.empty_windows;
    let k = cx.cfg.step_down_after_windows;
    let ready = nothing_merges(&s, cx) && windows >= k && s.m.worth_windows >= k;
    if !ready || cx.cap_reached {
        return ControlFlow::Continue(s);
    }
    let sig = Signature::of(seen.w);
    ControlFlow::Break(step_to_l3(s, sig, true, cx, |backoff_ms| {
        Reason::NothingMergesToL3 {
            windows,
            bios_per_sec: seen.bios_per_sec,
            next_probe_in_ms: backoff_ms,
        }
    }))
}

/// Holds until the step may come: fewer low windows than the step waits for, at the level
/// for less than the dwell time (before L3), or the hour's changes at the cap.
fn wait_for_the_step(
    s: InMode<Merging>,
    seen: &Seen,
    cx: &Ctx,
    next: Level,
) -> Step<InMode<Merging>> {
    let (cfg, level, ratio, low) = (cx.cfg, s.m.level, seen.ratio, cx.low);
    let k = windows_before(next, cx);
    if steps_counted(&s.m) < k {
        let n = steps_counted(&s.m);
        // While nothing merges at L0 the windows count toward L3 itself.
        let (next, k) = if nothing_merges(&s, cx) {
            (DEEPEST_LEVEL, cfg.step_down_after_windows)
        } else {
            (next, k)
        };
        let reason = Reason::LowWindow {
            ratio,
            low,
            bios_per_sec: seen.bios_per_sec,
            n,
            k,
            next,
        };
        return ControlFlow::Break(hold(s, reason));
    }
    let cap = cfg.max_changes_per_hour;
    if next == DEEPEST_LEVEL
        && let Some(remaining_ms) = s.h.l3_held_off(cx.now_ms)
    {
        let reason = Reason::L3HeldOff {
            level,
            remaining_ms,
        };
        return ControlFlow::Break(hold(s, reason));
    }
    if next == DEEPEST_LEVEL {
        let dwell_ms = cfg.min_dwell_secs * 1000;
        let at_level_ms = cx.now_ms.saturating_sub(s.h.since_ms);
        if at_level_ms < dwell_ms {
            let reason = Reason::Dwell {
                ratio,
                low,
                windows: k,
                level,
                at_level_ms,
                dwell_ms,
            };
            return ControlFlow::Break(hold(s, reason));
        }
    }
    if cx.cap_reached {
        let reason = Reason::CapReached {
            ratio,
            low,
            windows: (next == DEEPEST_LEVEL).then_some(k),
            cap,
            level,
        };
        return ControlFlow::Break(hold(s, reason));
    }
    ControlFlow::Continue(s)
}

/// Whether "not worth it" or "saving unknown" was the last word on a step down from here
/// (said at this level, or by a probe that found merging rare but L3 not worth it).
fn said_not_worth(m: &Merging) -> bool {
    m.not_worth_noted || m.unknown_noted
}

/// The reason of a step down to `to`; where the last word was that no step was worth it
/// (or could be priced), it also says what changed: the saving, now.
fn what_changed(said: bool, step: Reason, to: Level, cx: &Ctx) -> Reason {
    if !said {
        return step;
    }
    let now = cx.caps.worth.describe([to]);
    Reason::WorthChanged(Box::new((step, now)))
}

/// The step to L3 with `sig` as its workload (remembered as merge-hostile when
/// `hostile`), the first probe after the current backoff; `reason` is told that backoff.
fn step_to_l3(
    s: InMode<Merging>,
    sig: Signature,
    hostile: bool,
    cx: &Ctx,
    reason: impl FnOnce(u64) -> Reason,
) -> Evaluation {
    let said = said_not_worth(&s.m);
    let backoff_ms = s.h.backoff_ms;
    let s =
        s.h.enter_l3(sig, cx.now_ms + backoff_ms, hostile, cx.now_ms);
    let reason = what_changed(said, reason(backoff_ms), DEEPEST_LEVEL, cx);
    change(s, OutcomeKind::Disable, reason)
}

/// The step down one rung; to L3 it remembers the workload as merge-hostile and sets the
/// first probe.
fn take_the_step(s: InMode<Merging>, seen: &Seen, cx: &Ctx, next: Level) -> Evaluation {
    let (level, ratio, low, rate, now_ms) =
        (s.m.level, seen.ratio, cx.low, seen.bios_per_sec, cx.now_ms);
    let n = s.m.low_windows;
    let said = said_not_worth(&s.m);
    if next == DEEPEST_LEVEL {
        step_to_l3(s, Signature::of(seen.w), true, cx, |backoff_ms| {
            Reason::StepToL3 {
                ratio,
                low,
                windows: n,
                bios_per_sec: rate,
                level,
                next_probe_in_ms: backoff_ms,
            }
        })
    } else {
        let reason = Reason::StepDown {
            ratio,
            low,
            windows: n,
            bios_per_sec: rate,
            level,
            next,
        };
        let reason = what_changed(said, reason, next, cx);
        change(s.h.move_to(next, now_ms), OutcomeKind::StepDown, reason)
    }
}

/// The merging mode's wording where it holds its level or steps up ([`Reason`]'s `Display` sends
/// these reasons here, and only these).
pub(super) fn holds(reason: &Reason, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    match reason {
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
        Reason::TrialStart {
            level,
            ratio,
            bios_per_sec,
            windows,
        } => write!(
            f,
            "merging pays at {level} ({} at {bios_per_sec:.0} bios/s): trying L2 (plug and one-hit merges only) for {}",
            pct(*ratio),
            count(u64::from(*windows), "window")
        ),
        _ => unreachable!("{reason:?} is worded by another mode"),
    }
}

/// The merging mode's wording where a step down is due but held back ([`Reason`]'s `Display` sends
/// these reasons here, and only these).
pub(super) fn held_back(reason: &Reason, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    match reason {
        Reason::Dwell {
            ratio,
            low,
            windows,
            level,
            at_level_ms,
            dwell_ms,
        } => write!(
            f,
            "merge ratio {} < {} for {windows} windows, but at {level} only for {} (dwell {})",
            pct(*ratio),
            pct(*low),
            secs(*at_level_ms),
            secs(*dwell_ms)
        ),
        Reason::CapReached {
            ratio,
            low,
            windows,
            cap,
            level,
        } => {
            write!(f, "merge ratio {} < {}", pct(*ratio), pct(*low))?;
            if let Some(k) = windows {
                write!(f, " for {k} windows")?;
            }
            write!(
                f,
                ", but {cap} changes in the last hour reach the cap; staying at {level}"
            )
        }
        Reason::L3HeldOff {
            level,
            remaining_ms,
        } => write!(
            f,
            "at {level}, no step down toward L3 for another {}: the bio tap's last call for merging at L3 was not borne out by the counters at L0 (the hold-off doubles at each such call in a row)",
            secs(*remaining_ms)
        ),
        _ => unreachable!("{reason:?} is worded by another mode"),
    }
}

/// The merging mode's wording where it steps down ([`Reason`]'s `Display` sends
/// these reasons here, and only these).
pub(super) fn steps(reason: &Reason, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    match reason {
        Reason::StepDown {
            ratio,
            low,
            windows,
            bios_per_sec,
            level,
            next,
        } => write!(
            f,
            "merge ratio {} < {} for {windows} windows at {bios_per_sec:.0} bios/s; {level} -> {next}",
            pct(*ratio),
            pct(*low)
        ),
        Reason::StepToL3 {
            ratio,
            low,
            windows,
            bios_per_sec,
            level,
            next_probe_in_ms,
        } => write!(
            f,
            "merge ratio {} < {} for {windows} windows at {bios_per_sec:.0} bios/s; {level} -> L3 (no merges), next probe in {}",
            pct(*ratio),
            pct(*low),
            secs(*next_probe_in_ms)
        ),
        Reason::NothingMergesToL3 {
            windows,
            bios_per_sec,
            next_probe_in_ms,
        } => write!(
            f,
            "no bio merged in {windows} windows at L0 at {bios_per_sec:.0} bios/s, with every kind of merge tried, and the bio tap watches L3: L0 -> L3 (the rungs between would count zero again), next probe in {}",
            secs(*next_probe_in_ms)
        ),
        Reason::KnownHostileToL3(k) => write!(
            f,
            "merge ratio {} < {} for {} windows at {:.0} bios/s, a workload found merge-hostile here before ({:.0} bios/s, {:.0}% reads, {:.1} KiB): {} -> L3, next probe in {}",
            pct(k.ratio),
            pct(k.low),
            k.windows,
            k.bios_per_sec,
            k.known.bios_per_sec,
            k.known.read_share * 100.0,
            k.known.sectors_per_bio / 2.0,
            k.level,
            secs(k.next_probe_in_ms)
        ),
        _ => unreachable!("{reason:?} is worded by another mode"),
    }
}
