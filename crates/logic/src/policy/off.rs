//! The off mode (L3, nomerges=2: the merge counters read zero whatever the load). It is a
//! level to rest at only where the daemon sees there (a bio tap, `Caps::sense_at_l3`) and
//! where the cost profile says it saves; otherwise the device leaves it at once. At L3:
//! - a sensed sample (the tap's bios of this window) whose share of bios contiguous with a
//!   recent bio of the same direction reaches the high threshold is mergeable I/O the
//!   counters cannot show: back to L0 at once;
//! - the timed probe, or an early one when the workload's signature changes to one not
//!   already found merge-hostile, goes to L0 to measure, unless a sensed sample clearly
//!   under the low threshold already answers it (no excursion, no queue freeze).

use super::reason::{pct, secs};
use super::signature::{RATE_CHANGE_CONFIRM_MS, SignatureChange};
use super::{Ctx, Evaluation, Mode, OutcomeKind, PolicyState, Reason, Signature};
use super::{Step, change, hold, sensed_min_bios};
use crate::decision::Level;
use crate::sampler::Window;
use std::ops::ControlFlow;

/// The share of the tap's bios contiguous with a recent bio of the same direction, and how
/// many it sampled.
type Sensed = (f64, u64);

/// The steps in order: leave L3 where it is blind or not worth it; back to L0 when the tap
/// sees mergeable I/O; watch the workload's signature for a change; then, when a probe is
/// due (timed, or early for a changed workload), let a low sample answer it, or probe.
pub(super) fn decide(s: PolicyState, window: Option<&Window>, cx: &Ctx) -> Evaluation {
    let s = then!(leave_where_blind_or_not_worth_it(s, cx));
    // What the tap saw in this window, when it saw enough to judge.
    let sensed: Option<Sensed> = window
        .and_then(|w| w.sensed)
        .filter(|sn| sn.bios >= sensed_min_bios(cx.cfg))
        .map(|sn| (sn.contiguous as f64 / sn.bios as f64, sn.bios));
    let s = then!(back_when_the_tap_sees_merges(s, sensed, cx));
    let (s, changed, sig_now) = then!(watch_the_signature(s, window, cx));
    let due = s.next_probe_at_ms.unwrap_or(cx.now_ms);
    if cx.now_ms < due && changed.is_none() {
        let next_probe_in_ms = due - cx.now_ms;
        return hold(s, Reason::AtL3 { next_probe_in_ms });
    }
    // A sample clearly under the low threshold answers a probe without leaving L3.
    if let Some(low) = sensed.filter(|&(share, _)| share < cx.low) {
        return answered_by_the_tap(s, low, changed.zip(sig_now), due, cx);
    }
    probe(s, changed, cx)
}

/// Blind here (no tap, or it went away), or no longer worth it (a reload changed the
/// profile): to the deepest level that is both seen and worth it, else L0.
fn leave_where_blind_or_not_worth_it(mut s: PolicyState, cx: &Ctx) -> Step {
    if cx.l3_allowed() {
        return ControlFlow::Continue(s);
    }
    let to = if cx.caps.has(Level::L2)
        && super::floor_level(cx.cfg) >= Level::L2
        && cx.caps.worth.worth(Level::L2)
    {
        Level::L2
    } else {
        Level::L0
    };
    let why = if cx.caps.sense_at_l3 {
        format!(
            "L3 not worth it here: {}",
            cx.caps.worth.describe([Level::L3])
        )
    } else {
        "no bio tap at L3: the merge counters are blind there".to_string()
    };
    s.move_to(to, cx.now_ms);
    s.backoff_ms = cx.initial_backoff_ms;
    ControlFlow::Break(change(
        s,
        OutcomeKind::Enable,
        format!("{why}; back to {to}"),
    ))
}

/// A sensed sample at or over the high threshold is mergeable I/O the counters cannot
/// show: back to L0 at once.
fn back_when_the_tap_sees_merges(mut s: PolicyState, sensed: Option<Sensed>, cx: &Ctx) -> Step {
    let Some((share, n)) = sensed.filter(|&(share, _)| share >= cx.high) else {
        return ControlFlow::Continue(s);
    };
    s.move_to(Level::L0, cx.now_ms);
    s.backoff_ms = cx.initial_backoff_ms;
    let reason = format!(
        "sensed at L3: {} of {n} sampled bios start where a recent bio of the same direction ended (>= {}): merging would find them; back to L0",
        pct(share),
        pct(cx.high)
    );
    ControlFlow::Break(change(s, OutcomeKind::Enable, reason))
}

/// The window's signature against the one L3 was reached with: what changed (None if
/// nothing, or too few bios to tell), and the signature now. A change to a workload this
/// device already found merge-hostile (say a database that alternates between two rates)
/// needs no probe: it becomes the new baseline. Without this, two known workloads taking
/// turns would probe at every turn. A fall in rate alone counts once it has lasted
/// [`RATE_CHANGE_CONFIRM_MS`]: until then the device holds, saying so, unless the timed
/// probe is due anyway.
fn watch_the_signature(
    mut s: PolicyState,
    window: Option<&Window>,
    cx: &Ctx,
) -> Step<(PolicyState, Option<SignatureChange>, Option<Signature>)> {
    let now_ms = cx.now_ms;
    let Some(w) = window.filter(|w| w.counters.bios() >= cx.cfg.min_window_bios) else {
        return ControlFlow::Continue((s, None, None));
    };
    let sig = Signature::of(w);
    let mut changed = match &s.l3_signature {
        Some(base) => sig.changed_from(base),
        None => {
            s.l3_signature = Some(sig);
            None
        }
    };
    let due = s.next_probe_at_ms.unwrap_or(now_ms);
    if let Some(what) = changed
        && s.is_known_hostile(&sig)
    {
        s.l3_signature = Some(sig);
        s.l3_rate_change_since_ms = None;
        if now_ms < due {
            return ControlFlow::Break(hold(
                s,
                format!(
                    "workload changed at L3 ({what}) to one already found merge-hostile: no probe; next probe in {}",
                    secs(due - now_ms)
                ),
            ));
        }
        changed = None;
    }
    match changed {
        Some(what) if what.needs_confirming() => {
            let since_ms = *s
                .l3_rate_change_since_ms
                .get_or_insert(now_ms.saturating_sub(w.duration_ms));
            let lasted_ms = now_ms.saturating_sub(since_ms);
            if lasted_ms < RATE_CHANGE_CONFIRM_MS {
                if now_ms < due {
                    return ControlFlow::Break(hold(
                        s,
                        format!(
                            "at L3 the rate fell ({what}) for {}: a probe if it lasts {} (CPU contention also slows a workload); next probe in {}",
                            secs(lasted_ms),
                            secs(RATE_CHANGE_CONFIRM_MS),
                            secs(due - now_ms)
                        ),
                    ));
                }
                changed = None;
            }
        }
        _ => s.l3_rate_change_since_ms = None,
    }
    ControlFlow::Continue((s, changed, Some(sig)))
}

/// A probe answered by a sample clearly under the low threshold: stay at L3, with no
/// excursion and no queue freeze. A changed workload answered so is remembered as
/// merge-hostile.
fn answered_by_the_tap(
    mut s: PolicyState,
    (share, n): Sensed,
    changed: Option<(SignatureChange, Signature)>,
    due: u64,
    cx: &Ctx,
) -> Evaluation {
    let now_ms = cx.now_ms;
    let tap = format!(
        "{} of {n} sampled bios contiguous (< {})",
        pct(share),
        pct(cx.low)
    );
    if let Some((what, sig)) = changed {
        s.l3_signature = Some(sig);
        s.remember_hostile(sig);
        return hold(
            s,
            format!(
                "workload changed at L3 ({what}), but the tap sees {tap}: no probe needed; next probe in {}",
                secs(due.saturating_sub(now_ms))
            ),
        );
    }
    s.next_probe_at_ms = Some(now_ms + s.backoff_ms);
    let reason = format!(
        "probe answered by the tap at L3: {tap}; staying, next probe in {}",
        secs(s.backoff_ms)
    );
    hold(s, reason)
}

/// To L0 to measure: at once for a changed workload, else the timed probe.
fn probe(mut s: PolicyState, changed: Option<SignatureChange>, cx: &Ctx) -> Evaluation {
    let (cfg, now_ms) = (cx.cfg, cx.now_ms);
    let off_for = now_ms.saturating_sub(s.since_ms);
    s.probe_by_change = changed.is_some();
    if let Some(what) = changed {
        s.start_measuring(Level::L0, Mode::Probing, now_ms);
        let reason = format!(
            "workload changed at L3 ({what}): probing at once, L0 for {}",
            crate::decision::count(cfg.probe_windows.into(), "busy window")
        );
        return change(s, OutcomeKind::ProbeStart, reason);
    }
    s.start_measuring(Level::L0, Mode::Probing, now_ms);
    s.next_probe_at_ms = None;
    let reason = format!(
        "probe after {} at L3: L0 for {} to measure",
        secs(off_for),
        crate::decision::count(cfg.probe_windows.into(), "busy window")
    );
    change(s, OutcomeKind::ProbeStart, reason)
}
