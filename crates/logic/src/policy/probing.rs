//! The probing mode (at L0, out of L3): measure `probe_windows` busy windows with every
//! merge on. A clearly low probe goes back to L3 (a timed probe doubles the backoff); any
//! other stays at L0, and one where merging clearly pays tries L2 at once.

use super::reason::{pct, secs};
use super::{Ctx, Evaluation, Mode, OutcomeKind, PolicyState, Signature, TOP_LEVEL};
use super::{change, hold, settle};
use crate::decision::Level;
use crate::sampler::Window;

pub(super) fn decide(mut s: PolicyState, window: Option<&Window>, cx: &Ctx) -> Evaluation {
    let (cfg, now_ms, low, high) = (cx.cfg, cx.now_ms, cx.low, cx.high);
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
            return settle(
                s,
                OutcomeKind::ProbeSucceeded,
                format!("probe inconclusive after {n} idle windows; staying at L0"),
            );
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
    // The cap never keeps a failed probe from returning to L3: that only undoes the
    // probe's own excursion (probes themselves are paced by the backoff).
    if ratio < low && !cx.l3_allowed() {
        // Nothing to go back to: L3 is blind here or not worth it (the tap or the profile
        // changed during the probe). L0 it is; the ladder walks down from there.
        s.mode = Mode::Merging;
        s.since_ms = now_ms;
        s.low_windows = 0;
        s.backoff_ms = cx.initial_backoff_ms;
        let why = if cx.caps.sense_at_l3 {
            "L3 is not worth it here"
        } else {
            "L3 would be blind (no bio tap)"
        };
        return settle(
            s,
            OutcomeKind::ProbeFailed,
            format!(
                "probe found merge ratio {} < {} over {bios} bios, but {why}: staying at L0",
                pct(ratio),
                pct(low)
            ),
        );
    }
    if ratio < low {
        // A probe started by a workload change that finds nothing says nothing about the
        // timer: only timed probes double the backoff.
        if !s.probe_by_change {
            s.backoff_ms =
                (s.backoff_ms.saturating_mul(2)).clamp(cx.initial_backoff_ms, cx.max_backoff_ms);
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
    s.backoff_ms = cx.initial_backoff_ms;
    s.forget_hostile(&Signature::of(w));
    // The probe's windows at L0 are the baseline a trial of L2 needs: when merging clearly
    // pays, try L2 right away rather than after more windows at L0.
    if ratio >= high && cx.trial_allowed() && now_ms >= s.next_trial_at_ms && !cx.cap_reached {
        s.trial_baseline = s.probe_counters;
        s.trial_from_level = Level::L0;
        s.start_measuring(Level::L2, Mode::Trial, now_ms);
        let reason = format!(
            "{reason}; merging pays, so trying L2 (plug and one-hit merges only) for {}",
            crate::decision::count(cfg.probe_windows.into(), "window")
        );
        return change(s, OutcomeKind::TrialStart, reason);
    }
    settle(s, OutcomeKind::ProbeSucceeded, reason)
}
