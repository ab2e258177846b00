//! The off mode (L3, nomerges=2: the merge counters read zero whatever the load): wait for
//! the timed probe, or probe at once when the workload's signature changes to one not
//! already found merge-hostile.

use super::reason::secs;
use super::{Ctx, Evaluation, Mode, OutcomeKind, PolicyState, Reason, Signature};
use super::{change, hold};
use crate::logic::decision::Level;
use crate::logic::sampler::Window;

pub(super) fn decide(mut s: PolicyState, window: Option<&Window>, cx: &Ctx) -> Evaluation {
    let (cfg, now_ms) = (cx.cfg, cx.now_ms);
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
    let off_for = now_ms.saturating_sub(s.since_ms);
    s.probe_by_change = changed.is_some();
    if let Some(what) = changed {
        s.start_measuring(Level::L0, Mode::Probing, now_ms);
        let reason = format!(
            "workload changed at L3 ({what}): probing at once, L0 for {} busy windows",
            cfg.probe_windows
        );
        return change(s, OutcomeKind::ProbeStart, reason);
    }
    s.start_measuring(Level::L0, Mode::Probing, now_ms);
    s.next_probe_at_ms = None;
    let reason = format!(
        "probe after {} at L3: L0 for {} busy windows to measure",
        secs(off_for),
        cfg.probe_windows
    );
    change(s, OutcomeKind::ProbeStart, reason)
}
