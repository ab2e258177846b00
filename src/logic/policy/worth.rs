//! What not merging is worth on this device, read once from the cost profile.
//!
//! Axboe's objection (the 2008 linux-kernel "nomerges" thread) is that the gain of not
//! merging is small while the loss of wrongly not merging is large. A cost profile
//! (`config/cost-profiles/*.toml`, `logic::cost_profile`) says per scheduler and level how
//! CPU per I/O changes against L0 when merging finds nothing (random 4 KiB, one I/O per
//! submission: the cell the simulator also prices lookups from), with the 95% interval of
//! that change. A level is worth stepping down to only when its interval lies wholly below
//! 0; an interval that holds 0 is "no measurable difference" and a wholly positive one is a
//! cost. [`Worth::from_profile`] derives the table once, purely, for one scheduler; the
//! daemon puts it in [`super::Caps`] and [`super::decide`] reads it there.

use crate::logic::cost_profile::{CostProfile, Level, Method, Scheduler, Verdict, Workload};
use serde::Serialize;
use std::fmt::Write as _;

/// A level's change of CPU per I/O against L0, as the profile states it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Saving {
    /// Percent; negative is cheaper.
    pub change_percent: f64,
    /// The 95% interval of the change (absent for stated figures).
    pub ci: Option<[f64; 2]>,
    /// Saves, costs, or no measurable difference (the interval decides).
    pub verdict: Verdict,
}

/// Per level, whether not merging pays on this device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Worth {
    /// The scheduler whose cells were read (None: no profile, every level is worth it).
    pub scheduler: Option<Scheduler>,
    /// Indexed by level; L0 is the reference and stays None, as does a level the profile
    /// did not measure (which is then not worth it).
    pub levels: [Option<Saving>; 4],
    /// The profile's intervals fall short of 95% (a quick calibration): nothing is
    /// measurable, nothing is worth it.
    pub untrusted: bool,
}

impl Worth {
    /// No profile: every level is taken as worth it (the policy as it was before it read
    /// costs; the tests of the ladder's mechanics use it).
    pub const UNPRICED: Worth = Worth {
        scheduler: None,
        levels: [None; 4],
        untrusted: false,
    };

    /// The table for a device running `scheduler` (its `queue/scheduler` name). A
    /// scheduler the profile did not measure is read like the profile's first one, as the
    /// simulator prices it (the 2008 thread measured deadline only).
    pub fn from_profile(p: &CostProfile, scheduler: Option<&str>) -> Worth {
        let wanted = Scheduler::from_name(scheduler.unwrap_or("none"));
        let s = match wanted {
            Some(s) if p.schedulers.contains(&s) => s,
            _ => p.schedulers[0],
        };
        let untrusted = p.method == Method::CpuBoundLoop && p.ci_coverage_percent < 95.0;
        let mut levels = [None; 4];
        for l in [Level::L1, Level::L2, Level::L3] {
            levels[usize::from(l.index())] =
                p.cell(s, l, Workload::RandomUnbatched).and_then(|c| {
                    Some(Saving {
                        change_percent: c.change_percent?,
                        ci: c.change_ci,
                        verdict: c.verdict()?,
                    })
                });
        }
        Worth {
            scheduler: Some(s),
            levels,
            untrusted,
        }
    }

    /// Whether stepping down to `level` saves measurably (L0 always "is").
    pub fn worth(&self, level: Level) -> bool {
        if self.scheduler.is_none() || level == Level::L0 {
            return true;
        }
        !self.untrusted
            && self
                .saving(level)
                .is_some_and(|s| s.verdict == Verdict::Saves)
    }

    pub fn saving(&self, level: Level) -> Option<Saving> {
        self.levels[usize::from(level.index())]
    }

    /// "L3 -6.1% [-25.6, +17.5]" per level in `levels`, and the scheduler: the numbers
    /// behind a "not worth it".
    pub fn describe(&self, levels: impl IntoIterator<Item = Level>) -> String {
        let mut s = String::new();
        for l in levels {
            if !s.is_empty() {
                s.push_str(", ");
            }
            match self.saving(l) {
                Some(v) => {
                    let _ = write!(s, "{l} {:+.1}%", v.change_percent);
                    if let Some([lo, hi]) = v.ci {
                        let _ = write!(s, " [{lo:+.1}, {hi:+.1}]");
                    }
                    if v.verdict == Verdict::Costs {
                        s.push_str(" (a cost)");
                    }
                }
                None => {
                    let _ = write!(s, "{l} not measured");
                }
            }
        }
        if let Some(sch) = self.scheduler {
            let _ = write!(s, " CPU per I/O on {sch}");
        }
        if self.untrusted {
            s.push_str(" (the profile's intervals are under 95%: nothing is measurable)");
        }
        s
    }
}
