//! The trial mode (at L2, from L0 or L1, while merging pays): does L2 keep the merges?
//! Requests per bio over `probe_windows` busy windows against the window the trial started
//! from; L2 stays when it completed at most `trial_max_extra_requests_percent` more.

use super::reason::secs;
use super::{Ctx, Evaluation, Mode, OutcomeKind, PolicyState};
use super::{change, hold, settle};
use crate::sampler::{Counters, Window};

pub(super) fn decide(mut s: PolicyState, window: Option<&Window>, cx: &Ctx) -> Evaluation {
    let (cfg, now_ms) = (cx.cfg, cx.now_ms);
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
                format!("trial of L2 inconclusive (idle); back to {back}"),
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
        s.trial_backoff_ms = cx.initial_backoff_ms;
        let reason = format!(
            "L2 kept the merges: {:.1} requests per 100 bios vs {:.1} at {back} (limit {:.1}); staying at L2",
            trial * 100.0,
            base * 100.0,
            limit * 100.0
        );
        return settle(s, OutcomeKind::TrialSucceeded, reason);
    }
    s.trial_backoff_ms = s
        .trial_backoff_ms
        .saturating_mul(2)
        .clamp(cx.initial_backoff_ms, cx.max_backoff_ms);
    s.move_to(back, now_ms);
    s.next_trial_at_ms = now_ms + s.trial_backoff_ms;
    let reason = format!(
        "L2 lost merges: {:.1} requests per 100 bios vs {:.1} at {back} (limit {:.1}); back to {back}, next trial in {}",
        trial * 100.0,
        base * 100.0,
        limit * 100.0,
        secs(s.trial_backoff_ms)
    );
    change(s, OutcomeKind::TrialFailed, reason)
}
