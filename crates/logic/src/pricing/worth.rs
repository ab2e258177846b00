//! What not merging is worth on this device: measured live on this host, or read from a
//! cost profile.
//!
//! Axboe's objection (the 2008 linux-kernel "nomerges" thread) is that the gain of not
//! merging is small while the loss of wrongly not merging is large. So a step down is taken
//! only toward a level whose saving is shown, with its interval, to clear a bar:
//! - **live** (the default, [`Basis::Live`]): the daemon samples where CPU goes
//!   (`pricing::price`) and prices each level in CPU ms per second on this device, the
//!   merge path's ns per bio times the device's bios/s. A level is worth it when the lower
//!   end of its 95% (Poisson) interval reaches the floor (`[pricing] saving_floor_percent_cpu`);
//! - **profile** ([`Basis::Profile`]): a cost profile (`pricing::profile`) that matches
//!   the device states per scheduler and level how CPU per I/O changes against L0 when
//!   merging finds nothing; a level is worth it when its interval lies wholly below 0;
//! - **unknown** ([`Basis::Unknown`]): nothing measured yet, or no profile matches: nothing
//!   is worth it, and the reason says which.
//!
//! The bar is a band, not a line (Axboe's objection is the cost of toggling): a step down
//! needs the saving's lower bound at or over the floor ([`Worth::worth`]); a level is left
//! for lack of worth only where its upper bound falls under the floor
//! ([`Worth::keeps`]). Between the two the device stays where it is.
//!
//! [`Worth`] is a small `Copy` table the daemon puts in the policy's `Caps` before each
//! decision; the policy reads it there and stays pure.

use super::floor::SavingFloor;
use super::profile::{CostProfile, Method, Verdict};
use crate::decision::Level;
use mergetune_kernel::scheduler::Scheduler;
use serde::Serialize;
use std::fmt::Write as _;

/// What a saving is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SavingUnit {
    /// Change of CPU per I/O against L0, percent (negative is cheaper): a profile's cells.
    PercentPerIo,
    /// CPU ms per second saved on this device (positive saves): the live measurement.
    CpuMsPerSec,
}

/// A level's saving against L0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Saving {
    /// In `unit`.
    pub value: f64,
    /// The interval of `value` (absent for stated figures), at `coverage_percent`.
    pub ci: Option<[f64; 2]>,
    pub unit: SavingUnit,
    /// Saves (clears the bar), costs, or no measurable difference.
    pub verdict: Verdict,
}

/// Where the table came from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "basis")]
pub enum Basis {
    /// No pricing at all: every level is worth it (the ladder's mechanics tests).
    Unpriced,
    /// A cost profile's cells for this device's scheduler.
    Profile,
    /// Measured on this host: the merge path's CPU, sampled.
    Live {
        /// The bar (0.5% of one CPU is 5 ms/s), written in CPU ms per second.
        #[serde(
            rename = "floor_ms_per_sec",
            serialize_with = "SavingFloor::serialize_ms_per_sec"
        )]
        floor: SavingFloor,
    },
    /// Nothing to price with yet.
    Unknown { why: UnknownWhy },
}

/// Why a device's saving is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownWhy {
    /// The live sampler has not measured this device's scheduler at L0 yet.
    NotMeasuredYet,
    /// The live sampler is measuring it: `samples` merge-path samples so far in `spans`
    /// spans, of the `needed` a price needs.
    Measuring {
        samples: u64,
        needed: u64,
        spans: u32,
    },
    /// The scheduler's price was measured under another workload shape (read share, bio
    /// size class) than the device runs now: it is not this workload's price.
    OtherWorkload,
    /// The live sampler measured the merge path, but `shared` of its samples may be this
    /// device's or another's on the same scheduler (their tasks queued bios on both, or no
    /// bio of theirs was seen), and only `samples` are surely this device's: fewer than a
    /// price needs.
    Unattributed { samples: u64, shared: u64 },
    /// The live sampler cannot run here (no CAP_PERFMON, no symbols, a world without one).
    NoSampler,
    /// The named profile matches neither this kernel nor this device.
    NoMatchingProfile,
}

impl UnknownWhy {
    fn text(self) -> std::borrow::Cow<'static, str> {
        match self {
            UnknownWhy::NotMeasuredYet => {
                "the merge path has not been sampled under this scheduler here yet".into()
            }
            UnknownWhy::Measuring {
                samples,
                needed,
                spans,
            } => format!(
                "the merge path is being measured here: {samples} of the {needed} merge-path samples a price needs, in {spans} span{}",
                if spans == 1 { "" } else { "s" }
            )
            .into(),
            UnknownWhy::OtherWorkload => {
                "the merge path was priced under another workload shape (read share or bio size) than this device runs now; measuring this one"
                    .into()
            }
            UnknownWhy::Unattributed { samples, shared } => format!(
                "the merge path's samples here cannot be told apart from another device's on the same scheduler: {samples} are surely this device's, {shared} may be its or another's"
            )
            .into(),
            UnknownWhy::NoSampler => {
                "the merge path cannot be measured here (the cpu-clock sampler needs root or CAP_PERFMON and kallsyms)".into()
            }
            UnknownWhy::NoMatchingProfile => {
                "no cost profile matches this kernel and device".into()
            }
        }
    }

    /// Whether this is a measurement still to come (nothing says merging is not worth
    /// stepping down for), as opposed to a pricing that cannot say anything here.
    pub fn pending(self) -> bool {
        matches!(
            self,
            UnknownWhy::NotMeasuredYet
                | UnknownWhy::Measuring { .. }
                | UnknownWhy::OtherWorkload
                | UnknownWhy::Unattributed { .. }
        )
    }
}

/// Per level, whether not merging pays on this device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Worth {
    pub basis: Basis,
    /// The scheduler whose cells or samples were read.
    pub scheduler: Option<Scheduler>,
    /// Indexed by level; L0 is the reference and stays None, as does a level not priced
    /// (which is then not worth it).
    pub levels: [Option<Saving>; 4],
    /// The interval's coverage, percent.
    pub coverage_percent: f64,
    /// The profile's intervals fall short of 95% (a quick calibration): nothing is
    /// measurable, nothing is worth it.
    pub untrusted: bool,
}

impl Worth {
    /// No pricing: every level is taken as worth it (the policy as it was before it read
    /// costs; the tests of the ladder's mechanics use it).
    pub const UNPRICED: Worth = Worth {
        basis: Basis::Unpriced,
        scheduler: None,
        levels: [None; 4],
        coverage_percent: 0.0,
        untrusted: false,
    };

    /// Nothing is worth it, and why.
    pub const fn unknown(why: UnknownWhy) -> Worth {
        Worth {
            basis: Basis::Unknown { why },
            scheduler: None,
            levels: [None; 4],
            coverage_percent: 0.0,
            untrusted: false,
        }
    }

    /// A live table: the savings of `levels` in CPU ms per second, their intervals at
    /// `coverage_percent`, judged against `floor`.
    pub const fn live(
        floor: SavingFloor,
        scheduler: Option<Scheduler>,
        levels: [Option<Saving>; 4],
        coverage_percent: f64,
    ) -> Worth {
        Worth {
            basis: Basis::Live { floor },
            scheduler,
            levels,
            coverage_percent,
            untrusted: false,
        }
    }

    /// The table for a device running `scheduler` (None: one mergetune does not know). A
    /// scheduler the profile did not measure is read like the profile's first one, as the
    /// simulator prices it (the 2008 thread measured deadline only).
    pub fn from_profile(p: &CostProfile, scheduler: Option<Scheduler>) -> Worth {
        let s = p.priced_scheduler(scheduler);
        let untrusted = p.method == Method::CpuBoundLoop && p.ci_coverage_percent < 95.0;
        let mut levels = [None; 4];
        for l in [Level::L1, Level::L2, Level::L3] {
            levels[usize::from(l.index())] = p.priced_cell(scheduler, l).and_then(|c| {
                Some(Saving {
                    value: c.change_percent?,
                    ci: c.change_ci,
                    unit: SavingUnit::PercentPerIo,
                    verdict: c.verdict()?,
                })
            });
        }
        Worth {
            basis: Basis::Profile,
            scheduler: Some(s),
            levels,
            coverage_percent: p.ci_coverage_percent,
            untrusted,
        }
    }

    /// Whether stepping down to `level` saves measurably (L0 always "is").
    pub fn worth(&self, level: Level) -> bool {
        if matches!(self.basis, Basis::Unpriced) || level == Level::L0 {
            return true;
        }
        !self.untrusted
            && self
                .saving(level)
                .is_some_and(|s| s.verdict == Verdict::Saves)
    }

    /// Whether a device already at `level` keeps it: the other side of the band. Live, the
    /// level is kept unless the upper end of its saving's interval is under the floor (a
    /// saving whose interval still reaches the floor is no evidence that the step was
    /// wrong, and each change freezes the queue); an unpriced level has nothing to keep it.
    /// A profile's table is fixed between reloads, so its verdict decides both ways. A
    /// price still being measured keeps what the device has; no sampler, or no matching
    /// profile, keeps nothing (the safe side is merging on).
    pub fn keeps(&self, level: Level) -> bool {
        if level == Level::L0 {
            return true;
        }
        match self.basis {
            Basis::Unpriced => true,
            Basis::Profile => self.worth(level),
            Basis::Live { floor } => self.saving(level).is_some_and(|s| {
                let upper = s.ci.map_or(s.value, |[_, hi]| hi);
                upper >= floor.ms_per_sec()
            }),
            Basis::Unknown { why } => why.pending(),
        }
    }

    pub fn saving(&self, level: Level) -> Option<Saving> {
        self.levels[usize::from(level.index())]
    }

    /// The numbers behind a "not worth it", per level in `levels`: "L3 saves 1.2 ms/s
    /// [0.8, 1.6] of CPU (95% interval), under the floor of 5.0 ms/s" or, for a profile,
    /// "L3 -6.1% [-25.6, +17.5] CPU per I/O on mq-deadline (89% interval)".
    pub fn describe(&self, levels: impl IntoIterator<Item = Level>) -> String {
        if let Basis::Unknown { why } = self.basis {
            return format!("saving unknown: {}", why.text());
        }
        let mut s = String::new();
        for l in levels {
            if !s.is_empty() {
                s.push_str(", ");
            }
            match self.saving(l) {
                Some(v) if v.unit == SavingUnit::CpuMsPerSec => {
                    let _ = write!(s, "{l} saves {:.2} ms/s", v.value);
                    if let Some([lo, hi]) = v.ci {
                        let _ = write!(s, " [{lo:.2}, {hi:.2}]");
                    }
                }
                Some(v) => {
                    let _ = write!(s, "{l} {:+.1}%", v.value);
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
        match self.basis {
            Basis::Live { floor } => {
                let _ = write!(
                    s,
                    " of CPU, measured here ({:.0}% intervals); floor {:.2} ms/s",
                    self.coverage_percent,
                    floor.ms_per_sec()
                );
                if let Some(sch) = self.scheduler {
                    let _ = write!(s, " on {sch}");
                }
            }
            Basis::Profile => {
                if let Some(sch) = self.scheduler {
                    let _ = write!(s, " CPU per I/O on {sch}");
                }
                if self.coverage_percent > 0.0 {
                    let _ = write!(s, " ({:.1}% intervals)", self.coverage_percent);
                }
            }
            Basis::Unpriced | Basis::Unknown { .. } => {}
        }
        if self.untrusted {
            s.push_str(" (the profile's intervals are under 95%: nothing is measurable)");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(value: f64, ci: [f64; 2], verdict: Verdict) -> Worth {
        let mut levels = [None; 4];
        levels[3] = Some(Saving {
            value,
            ci: Some(ci),
            unit: SavingUnit::CpuMsPerSec,
            verdict,
        });
        let floor = SavingFloor::from_percent_cpu(0.5);
        Worth::live(floor, Some(Scheduler::MqDeadline), levels, 95.0)
    }

    #[test]
    fn a_live_saving_is_worth_it_only_with_its_verdict_and_says_its_floor() {
        let w = live(12.7, [9.8, 15.6], Verdict::Saves);
        assert!(w.worth(Level::L3));
        assert!(!w.worth(Level::L2), "an unpriced level is not worth it");
        let n = live(1.2, [0.8, 1.6], Verdict::NoMeasurableDifference);
        assert!(!n.worth(Level::L3));
        let d = n.describe([Level::L3]);
        assert!(d.contains("L3 saves 1.20 ms/s [0.80, 1.60]"), "{d}");
        assert!(d.contains("floor 5.00 ms/s"), "{d}");
        assert!(d.contains("95% intervals"), "{d}");
    }

    #[test]
    fn unknown_is_never_worth_it_and_says_why() {
        let w = Worth::unknown(UnknownWhy::NoMatchingProfile);
        assert!(!w.worth(Level::L3) && !w.worth(Level::L1));
        assert!(w.worth(Level::L0));
        assert!(w.describe([Level::L3]).contains("no cost profile matches"));
    }

    #[test]
    fn a_live_level_is_kept_until_its_upper_bound_falls_under_the_floor() {
        // The flap seen on a loop device: stepped down at a lower bound over 5 ms/s, then
        // judged at 6.69 [4.05, 10.57]: in the band, so kept, not left.
        let band = live(6.69, [4.05, 10.57], Verdict::NoMeasurableDifference);
        assert!(!band.worth(Level::L3), "no step down inside the band");
        assert!(band.keeps(Level::L3), "no step back inside the band");
        let under = live(2.0, [1.2, 4.9], Verdict::NoMeasurableDifference);
        assert!(!under.keeps(Level::L3), "clearly under the floor: left");
        let over = live(12.7, [9.8, 15.6], Verdict::Saves);
        assert!(over.worth(Level::L3) && over.keeps(Level::L3));
        assert!(
            !over.keeps(Level::L2),
            "an unpriced level has nothing to keep it"
        );
        assert!(over.keeps(Level::L0));
    }

    #[test]
    fn a_price_still_to_come_keeps_the_level_and_no_sampler_does_not() {
        let measuring = Worth::unknown(UnknownWhy::Measuring {
            samples: 4,
            needed: 10,
            spans: 1,
        });
        assert!(measuring.keeps(Level::L3) && !measuring.worth(Level::L3));
        let d = measuring.describe([Level::L3]);
        assert!(d.contains("4 of the 10 merge-path samples"), "{d}");
        assert!(!Worth::unknown(UnknownWhy::NoSampler).keeps(Level::L3));
        assert!(!Worth::unknown(UnknownWhy::NoMatchingProfile).keeps(Level::L2));
    }
}
