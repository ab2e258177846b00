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
use super::{Ctx, Evaluation, Mode, OutcomeKind, PolicyState, Reason, Signature};
use super::{change, hold, sensed_min_bios};
use crate::decision::Level;
use crate::sampler::Window;

pub(super) fn decide(mut s: PolicyState, window: Option<&Window>, cx: &Ctx) -> Evaluation {
    let (cfg, now_ms) = (cx.cfg, cx.now_ms);
    if !cx.l3_allowed() {
        // Blind here (no tap, or it went away), or no longer worth it (a reload changed
        // the profile): the deepest level that is both seen and worth it, else L0.
        let to = if cx.caps.has(Level::L2)
            && super::floor_level(cfg) >= Level::L2
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
        s.move_to(to, now_ms);
        s.backoff_ms = cx.initial_backoff_ms;
        return change(s, OutcomeKind::Enable, format!("{why}; back to {to}"));
    }
    // What the tap saw in this window, when it saw enough to judge.
    let sensed = window
        .and_then(|w| w.sensed)
        .filter(|sn| sn.bios >= sensed_min_bios(cfg))
        .map(|sn| (sn.contiguous as f64 / sn.bios as f64, sn.bios));
    if let Some((share, n)) = sensed
        && share >= cx.high
    {
        s.move_to(Level::L0, now_ms);
        s.backoff_ms = cx.initial_backoff_ms;
        let reason = format!(
            "sensed at L3: {} of {n} sampled bios start where a recent bio of the same direction ended (>= {}): merging would find them; back to L0",
            pct(share),
            pct(cx.high)
        );
        return change(s, OutcomeKind::Enable, reason);
    }
    // A sample clearly under the low threshold answers a probe without leaving L3.
    let sensed_low = sensed.filter(|&(share, _)| share < cx.low);
    let due = s.next_probe_at_ms.unwrap_or(now_ms);
    let mut changed = None;
    let mut sig_now = None;
    if let Some(w) = window
        && w.counters.bios() >= cfg.min_window_bios
    {
        let sig = Signature::of(w);
        sig_now = Some(sig);
        match &s.l3_signature {
            Some(base) => changed = sig.changed_from(base),
            None => s.l3_signature = Some(sig),
        }
        // A change to a workload this device already found merge-hostile (say a database
        // that alternates between two rates) needs no probe: it becomes the new baseline.
        // Without this, two known workloads taking turns would probe at every turn.
        if let Some(what) = &changed
            && s.is_known_hostile(&sig)
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
    if let Some((share, n)) = sensed_low {
        let tap = format!(
            "{} of {n} sampled bios contiguous (< {})",
            pct(share),
            pct(cx.low)
        );
        if let (Some(what), Some(sig)) = (changed, sig_now) {
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
        return hold(s, reason);
    }
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
