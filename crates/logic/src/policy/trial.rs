//! The trial mode (at L2, from L0 or L1, while merging pays): does L2 keep the merges?
//! Requests per bio over `probe_windows` busy windows against the window the trial started
//! from; L2 stays when it completed at most `trial_max_extra_requests_percent` more.

use super::reason::secs;
use super::{Ctx, Evaluation, History, InMode, Merging, Mode, OutcomeKind, Reason, Trial};
use super::{change, hold, settle};
use crate::sampler::{Counters, Window};

pub(super) fn decide(h: History, t: Trial, window: Option<&Window>, cx: &Ctx) -> Evaluation {
    let (cfg, now_ms) = (cx.cfg, cx.now_ms);
    let mut s = InMode { h, m: t };
    let Some(w) = window else {
        return hold(s, Reason::WindowOpen(Mode::Trial));
    };
    let back = s.m.from_level;
    if w.counters.bios() < cfg.min_window_bios {
        s.m.measured.idle_windows += 1;
        if s.m.measured.idle_windows >= 4 * cfg.probe_windows {
            s.h.next_trial_at_ms = now_ms + s.h.trial_backoff_ms;
            return change(
                s.h.move_to(back, now_ms),
                OutcomeKind::TrialFailed,
                Reason::TrialInconclusive { back },
            );
        }
        return hold(s, Reason::IdleDoesNotCount(Mode::Trial));
    }
    s.m.measured.counters.add(&w.counters);
    s.m.measured.windows_done += 1;
    if s.m.measured.windows_done < cfg.probe_windows {
        return hold(s, Reason::TrialMeasuring);
    }
    let per_bio = |c: &Counters| {
        let b = c.bios();
        if b == 0 {
            1.0
        } else {
            (c.reads_completed + c.writes_completed) as f64 / b as f64
        }
    };
    let base = per_bio(&s.m.baseline);
    let trial = per_bio(&s.m.measured.counters);
    let limit = base * (1.0 + cfg.trial_max_extra_requests_percent / 100.0);
    if trial <= limit {
        s.h.trial_backoff_ms = cx.initial_backoff_ms;
        let reason = Reason::TrialKeptMerges {
            requests_per_bio: trial,
            baseline_per_bio: base,
            limit_per_bio: limit,
            back,
        };
        let since_ms = s.h.since_ms;
        let verified = Merging {
            l2_verified: true,
            ..Merging::at(super::Level::L2)
        };
        let s = s.h.settle_merging(verified, since_ms);
        return settle(s, OutcomeKind::TrialSucceeded, reason);
    }
    s.h.trial_backoff_ms =
        s.h.trial_backoff_ms
            .saturating_mul(2)
            .clamp(cx.initial_backoff_ms, cx.max_backoff_ms);
    s.h.next_trial_at_ms = now_ms + s.h.trial_backoff_ms;
    let backoff_ms = s.h.trial_backoff_ms;
    let s = s.h.move_to(back, now_ms);
    let reason = Reason::TrialLostMerges {
        requests_per_bio: trial,
        baseline_per_bio: base,
        limit_per_bio: limit,
        back,
        next_trial_in_ms: backoff_ms,
    };
    change(s, OutcomeKind::TrialFailed, reason)
}

/// The trial mode's wording ([`Reason`]'s `Display` sends
/// these reasons here, and only these).
pub(super) fn wording(reason: &Reason, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    match reason {
        Reason::TrialInconclusive { back } => {
            write!(f, "trial of L2 inconclusive (idle); back to {back}")
        }
        Reason::TrialMeasuring => f.write_str("trial of L2: measuring"),
        Reason::TrialKeptMerges {
            requests_per_bio,
            baseline_per_bio,
            limit_per_bio,
            back,
        } => write!(
            f,
            "L2 kept the merges: {:.1} requests per 100 bios vs {:.1} at {back} (limit {:.1}); staying at L2",
            requests_per_bio * 100.0,
            baseline_per_bio * 100.0,
            limit_per_bio * 100.0
        ),
        Reason::TrialLostMerges {
            requests_per_bio,
            baseline_per_bio,
            limit_per_bio,
            back,
            next_trial_in_ms,
        } => write!(
            f,
            "L2 lost merges: {:.1} requests per 100 bios vs {:.1} at {back} (limit {:.1}); back to {back}, next trial in {}",
            requests_per_bio * 100.0,
            baseline_per_bio * 100.0,
            limit_per_bio * 100.0,
            secs(*next_trial_in_ms)
        ),
        _ => unreachable!("{reason:?} is worded by another mode"),
    }
}
