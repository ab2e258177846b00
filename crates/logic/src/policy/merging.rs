//! The merging mode (L0, L1, L2: the counters still show merges): step up at once when
//! merges are visible, try L2 while merging pays, step down one rung after enough low
//! windows (straight to L3 for a workload already found merge-hostile), but only toward a
//! level the cost profile says saves measurably: else "not worth it here".

use super::reason::{pct, secs};
use super::{Ctx, Evaluation, Mode, OutcomeKind, PolicyState, Reason, Signature, TOP_LEVEL};
use super::{change, hold, next_down, settle};
use crate::decision::Level;
use crate::sampler::Window;

pub(super) fn decide(mut s: PolicyState, window: Option<&Window>, cx: &Ctx) -> Evaluation {
    let (cfg, now_ms, low, high) = (cx.cfg, cx.now_ms, cx.low, cx.high);
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
    // A level that saves nothing measurable, with nothing worth it below (the profile or
    // the scheduler changed since it was reached): its lost merges buy nothing.
    if level > Level::L0 && !cx.caps.worth.worth(level) && cx.not_worth(level).is_some() {
        s.move_to(Level::L0, now_ms);
        let why = cx.caps.worth.describe([level]);
        return change(
            s,
            OutcomeKind::Enable,
            format!("{level} not worth it here: {why}; back to L0"),
        );
    }
    if level > Level::L0 && ratio >= high && !(level == Level::L2 && s.l2_verified) {
        s.move_to(Level::L0, now_ms);
        s.backoff_ms = cx.initial_backoff_ms;
        return change(
            s,
            OutcomeKind::Enable,
            format!(
                "merges still counted at {level}: ratio {} >= {} at {rate:.0} bios/s; back to L0",
                pct(ratio),
                pct(high)
            ),
        );
    }
    if ratio >= high && level < Level::L2 && cx.trial_allowed() {
        s.low_windows = 0;
        s.high_windows += 1;
        let k = cfg.step_down_after_windows;
        if s.high_windows >= k && now_ms >= s.next_trial_at_ms && !cx.cap_reached {
            s.trial_baseline = w.counters;
            s.trial_from_level = level;
            s.start_measuring(Level::L2, Mode::Trial, now_ms);
            let reason = format!(
                "merging pays at {level} ({} at {rate:.0} bios/s): trying L2 (plug and one-hit merges only) for {}",
                pct(ratio),
                crate::decision::count(cfg.probe_windows.into(), "window")
            );
            return change(s, OutcomeKind::TrialStart, reason);
        }
    }
    if ratio >= low {
        s.low_windows = 0;
        s.not_worth_noted = false;
        s.unknown_noted = false;
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
    s.low_windows = s.low_windows.saturating_add(1);
    let Some(next) = next_down(level, cx.caps, cfg) else {
        let blind = if !cx.caps.sense_at_l3 && super::floor_level(cfg) == TOP_LEVEL {
            " (L3 would be blind: no bio tap)"
        } else {
            ""
        };
        return hold(
            s,
            format!(
                "merge ratio {} < {} at {level}, the deepest level allowed here{blind}",
                pct(ratio),
                pct(low)
            ),
        );
    };
    let k = if next == TOP_LEVEL {
        cfg.disable_after_windows
    } else {
        cfg.step_down_after_windows
    };
    // Nothing below saves measurably: say so once, when the step would have come, then
    // hold quietly. The rungs on the way to a level that does save are taken (they are
    // the safe path there: the counters still see merges on them).
    if let Some(reason) = cx.not_worth(level) {
        // An unknown saving is said once, and the known one once more when it comes.
        let unknown = matches!(
            cx.caps.worth.basis,
            crate::policy::worth::Basis::Unknown { .. }
        );
        let said = s.not_worth_noted || (unknown && s.unknown_noted);
        if !said && s.low_windows >= k {
            if unknown {
                s.unknown_noted = true;
            } else {
                s.not_worth_noted = true;
            }
            return settle(s, OutcomeKind::NotWorthIt, reason);
        }
        return hold(s, reason);
    }
    // A workload already known to be merge-hostile: the safe rungs have nothing to show,
    // go straight to L3 (after two low windows, and under the cap).
    let sig = Signature::of(w);
    let known = cx.l3_allowed()
        && s.low_windows >= cfg.step_down_after_windows.min(2)
        && !cx.cap_reached
        && s.is_known_hostile(&sig);
    if known {
        let n = s.low_windows;
        s.move_to(TOP_LEVEL, now_ms);
        s.next_probe_at_ms = Some(now_ms + s.backoff_ms);
        s.l3_signature = Some(sig);
        let reason = format!(
            "merge ratio {} < {} for {n} windows at {rate:.0} bios/s, a workload that settled at L3 before ({:.0} bios/s, {:.0}% reads, {:.1} KiB): {level} -> L3, next probe in {}",
            pct(ratio),
            pct(low),
            sig.bios_per_sec,
            sig.read_share * 100.0,
            sig.sectors_per_bio / 2.0,
            secs(s.backoff_ms)
        );
        return change(s, OutcomeKind::Disable, reason);
    }
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
                    "merge ratio {} < {} for {k} windows, but at {level} only for {} (dwell {})",
                    pct(ratio),
                    pct(low),
                    secs(at_level_ms),
                    secs(dwell_ms)
                ),
            );
        }
        if cx.cap_reached {
            return hold(
                s,
                format!(
                    "merge ratio {} < {} for {k} windows, but {} changes in the last hour reach the cap; staying at {level}",
                    pct(ratio),
                    pct(low),
                    cfg.max_changes_per_hour
                ),
            );
        }
    } else if cx.cap_reached {
        return hold(
            s,
            format!(
                "merge ratio {} < {}, but {} changes in the last hour reach the cap; staying at {level}",
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
            "merge ratio {} < {} for {n} windows at {rate:.0} bios/s; {level} -> L3 (no merges), next probe in {}",
            pct(ratio),
            pct(low),
            secs(s.backoff_ms)
        );
        change(s, OutcomeKind::Disable, reason)
    } else {
        let reason = format!(
            "merge ratio {} < {} for {n} windows at {rate:.0} bios/s; {level} -> {next}",
            pct(ratio),
            pct(low)
        );
        change(s, OutcomeKind::StepDown, reason)
    }
}
