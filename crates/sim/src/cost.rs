//! The block-layer cost model: CPU per step a bio or request takes, priced from a cost
//! profile (`cost_profile`).
//!
//! Why steps: the daemon's case for turning merging off is the CPU spent on merge lookups
//! that find nothing (the 2008 nomerges thread, docs/design.md), against the CPU a merge saves by not allocating,
//! dispatching and completing a request. The simulator counts the steps each bio takes;
//! a profile prices them. [`CostModel::from_profile`] derives the prices from what a
//! profile measured for one scheduler:
//! - random unbatched 4 KiB at L3 is one bio that is its own request with no lookup: the
//!   per-request steps, split in the 2008 model's proportions (alloc 1100 : insert 400 :
//!   dispatch 600 : completion 800 : bio end 200);
//! - L2's extra over L3 is the plug check and the one-hit try (split 150 : 100), L0's
//!   extra over L2 the hash and front lookups, and L0 over L1 (mq-deadline) the front
//!   lookup. Only measurable changes count: a level whose interval contains 0 costs what
//!   L0 costs (`Cell::significant_change`), and a measured increase is
//!   not a negative lookup (clamped to 0);
//! - sequential batched at L0 (63 of 64 bios merged in the plug) gives what a merged bio
//!   costs, hence the merge step.
//!
//! The default is the profile measured on this machine's kernel
//! (`config/cost-profiles/measured-6.18.toml`, in ns); a scenario may name the 2008 one
//! (`cost_profile = "lkml-2008"`, in modelled cycles: 22.5% fewer block-layer cycles at
//! nomerges=2 for random 4 KiB QD32, from which the old defaults derive exactly), or
//! override every step in its `[cost]` table.

use mergetune_kernel::scheduler::Scheduler;
use mergetune_logic::decision::Level;
use mergetune_logic::pricing::profile::{self, CostProfile, Method, Workload};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CostModel {
    /// Look at the last request in the submitter's plug.
    pub plug_check: u64,
    /// Try the queue's one-hit `last_merge` request.
    pub one_hit: u64,
    /// Back-merge hash lookup (by end sector).
    pub hash_lookup: u64,
    /// Front-merge lookup in the sector-ordered tree.
    pub front_lookup: u64,
    /// Bookkeeping of a successful merge (any kind).
    pub merge: u64,
    /// Request allocation, tag/sched-tag setup and initialisation from the bio.
    pub request_alloc: u64,
    /// Insertion into the scheduler (or the dispatch list).
    pub insert: u64,
    /// Dispatch to the driver.
    pub dispatch: u64,
    /// Request completion (accounting, tag release, freeing).
    pub completion: u64,
    /// Per-bio end_io, paid by merged and unmerged bios alike.
    pub bio_complete: u64,
    /// dm: mapping and cloning one piece of a split bio.
    pub dm_split: u64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            plug_check: 150,
            one_hit: 100,
            hash_lookup: 300,
            front_lookup: 350,
            merge: 250,
            request_alloc: 1100,
            insert: 400,
            dispatch: 600,
            completion: 800,
            bio_complete: 200,
            dm_split: 300,
        }
    }
}

/// One step a bio or request takes, priced by [`CostModel::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    PlugCheck,
    OneHit,
    HashLookup,
    FrontLookup,
    Merge,
    RequestAlloc,
    Insert,
    Dispatch,
    Completion,
    BioComplete,
    DmSplit,
}

impl Step {
    pub const ALL: [Step; 11] = [
        Step::PlugCheck,
        Step::OneHit,
        Step::HashLookup,
        Step::FrontLookup,
        Step::Merge,
        Step::RequestAlloc,
        Step::Insert,
        Step::Dispatch,
        Step::Completion,
        Step::BioComplete,
        Step::DmSplit,
    ];

    /// Its key in a scenario's `[cost]` table (the [`CostModel`] field that prices it).
    pub fn key(self) -> &'static str {
        match self {
            Step::PlugCheck => "plug_check",
            Step::OneHit => "one_hit",
            Step::HashLookup => "hash_lookup",
            Step::FrontLookup => "front_lookup",
            Step::Merge => "merge",
            Step::RequestAlloc => "request_alloc",
            Step::Insert => "insert",
            Step::Dispatch => "dispatch",
            Step::Completion => "completion",
            Step::BioComplete => "bio_complete",
            Step::DmSplit => "dm_split",
        }
    }
}

/// The 2008 model's split of a request's own cost (alloc, insert, dispatch, completion,
/// bio end) and of the plug-and-one-hit lookups: the measurement gives only the sums.
const REQUEST_SHARES: [f64; 5] = [1100.0, 400.0, 600.0, 800.0, 200.0];
const SIMPLE_LOOKUP_SHARES: [f64; 2] = [150.0, 100.0];

impl CostModel {
    #[inline]
    pub fn step(&self, s: Step) -> u64 {
        match s {
            Step::PlugCheck => self.plug_check,
            Step::OneHit => self.one_hit,
            Step::HashLookup => self.hash_lookup,
            Step::FrontLookup => self.front_lookup,
            Step::Merge => self.merge,
            Step::RequestAlloc => self.request_alloc,
            Step::Insert => self.insert,
            Step::Dispatch => self.dispatch,
            Step::Completion => self.completion,
            Step::BioComplete => self.bio_complete,
            Step::DmSplit => self.dm_split,
        }
    }

    /// Step costs for `sched` from a profile, from the cells the daemon's table reads
    /// (`CostProfile::priced_scheduler`, `CostProfile::priced_cell`): a scheduler the
    /// profile did not measure is priced like its first one (the 2008 thread measured
    /// deadline only).
    pub fn from_profile(p: &CostProfile, sched: Scheduler) -> CostModel {
        let s = p.priced_scheduler(Some(sched));
        // A measured profile whose intervals fall short of 95% (a --quick run) shows no
        // measurable difference anywhere.
        let trusted = p.method != Method::CpuBoundLoop || p.ci_coverage_percent >= 95.0;
        let cell = |l: Level| p.priced_cell(Some(sched), l);
        let u0 = cell(Level::L0).map(|c| c.cpu_per_io).unwrap_or(0.0);
        let at = |l: Level| {
            let ch = match cell(l) {
                Some(c) if trusted => c.significant_change(),
                _ => 0.0,
            };
            u0 * (1.0 + ch / 100.0)
        };
        let (u1, u2, u3) = (at(Level::L1), at(Level::L2), at(Level::L3));
        let (base, simple, front, hash) = match p.merge_path_cell(s, false) {
            // The merge path sampled where it is spent (ns per bio, unplugged, one
            // submitter): L3 saves all of it, L2 what lies past the one-hit cache; the
            // rest of a request's cost is L0's minus the path.
            Some(m) => {
                let lookups = m.l3_ns_per_bio.min(u0);
                let past_one_hit = m.l2_ns_per_bio.clamp(0.0, lookups);
                let front = if s == Scheduler::MqDeadline {
                    past_one_hit / 2.0
                } else {
                    0.0
                };
                (
                    u0 - lookups,
                    lookups - past_one_hit,
                    front,
                    past_one_hit - front,
                )
            }
            None => {
                let base = u3.min(u0);
                let lookups = u0 - base;
                let simple = (u2 - base).clamp(0.0, lookups);
                let front = if s == Scheduler::MqDeadline {
                    (u0 - u1).clamp(0.0, lookups - simple)
                } else {
                    0.0
                };
                (base, simple, front, lookups - simple - front)
            }
        };
        let share = |x: f64, parts: &[f64], i: usize| x * parts[i] / parts.iter().sum::<f64>();
        let plug_check = share(simple, &SIMPLE_LOOKUP_SHARES, 0);
        let bio_complete = share(base, &REQUEST_SHARES, 4);
        // What a merged bio costs, from the sequential batched run at L0.
        let merge = match p.cell(s, Level::L0, Workload::SequentialBatched) {
            Some(c) if c.merged_percent > 0.0 => {
                let m = c.merged_percent / 100.0;
                let merged_bio = (c.cpu_per_io - (1.0 - m) * u0) / m;
                (merged_bio - plug_check - bio_complete).max(0.0)
            }
            _ => base * 250.0 / 3100.0,
        };
        let r = |x: f64| x.round().max(0.0) as u64;
        CostModel {
            plug_check: r(plug_check),
            one_hit: r(share(simple, &SIMPLE_LOOKUP_SHARES, 1)),
            hash_lookup: r(hash),
            front_lookup: r(front),
            merge: r(merge),
            request_alloc: r(share(base, &REQUEST_SHARES, 0)),
            insert: r(share(base, &REQUEST_SHARES, 1)),
            dispatch: r(share(base, &REQUEST_SHARES, 2)),
            completion: r(share(base, &REQUEST_SHARES, 3)),
            bio_complete: r(bio_complete),
            // No dm device to measure here: the 2008 model's share of a request.
            dm_split: r(base * 300.0 / 3100.0),
        }
    }

    /// Cycles for one bio that merges with nothing and becomes its own request, when the
    /// lookups allowed at `nomerges` (0, 1 or 2) are all tried and all miss.
    pub fn unmerged_bio_cycles(&self, nomerges: u8) -> u64 {
        let base =
            self.request_alloc + self.insert + self.dispatch + self.completion + self.bio_complete;
        let lookups = match nomerges {
            0 => self.plug_check + self.one_hit + self.hash_lookup + self.front_lookup,
            1 => self.plug_check + self.one_hit,
            _ => 0,
        };
        base + lookups
    }

    /// Cycles for a bio merged into the last request of its plug.
    pub fn plug_merged_bio_cycles(&self) -> u64 {
        self.plug_check + self.merge + self.bio_complete
    }
}

/// The step prices of one currency for each scheduler (indexed by [`Scheduler::index`]),
/// plus the minimum time a `queue/nomerges`
/// write freezes the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Pricing {
    pub name: String,
    pub by_sched: [CostModel; 4],
    pub freeze_min_ns: u64,
}

impl Pricing {
    pub fn from_profile(p: &CostProfile) -> Pricing {
        Pricing {
            name: p.name.clone(),
            by_sched: Scheduler::ALL.map(|s| CostModel::from_profile(p, s)),
            freeze_min_ns: p
                .toggle
                .as_ref()
                .map(|t| (t.write_us_median * 1000.0).round() as u64)
                .unwrap_or(0),
        }
    }

    /// One model for every scheduler (a scenario's `[cost]` table).
    pub fn uniform(name: &str, m: CostModel) -> Pricing {
        Pricing {
            name: name.to_string(),
            by_sched: [m; 4],
            freeze_min_ns: 0,
        }
    }

    /// A shipped profile by name.
    pub fn builtin(name: &str) -> Option<Pricing> {
        profile::builtin(name).map(|p| Pricing::from_profile(&p))
    }
}

/// What a scenario is priced in: its own currency (`primary`: its `[cost]` table, else the
/// profile it names, else the one measured on this kernel) and the other shipped profile
/// (`second`), so that a comparison can report both.
#[derive(Debug, Clone, PartialEq)]
pub struct Costs {
    pub primary: Pricing,
    pub second: Pricing,
}

impl Costs {
    pub fn for_scenario(profile: Option<&str>, table: Option<CostModel>) -> Costs {
        let name = profile.unwrap_or(profile::MEASURED_NAME);
        let other = if name == profile::MEASURED_NAME {
            profile::LKML_2008_NAME
        } else {
            profile::MEASURED_NAME
        };
        // Names are checked by Scenario::validate; an unknown one falls back to measured.
        let named = Pricing::builtin(name)
            .or_else(|| Pricing::builtin(profile::MEASURED_NAME))
            .expect("shipped cost profiles are valid");
        let primary = match table {
            Some(m) => Pricing::uniform("[cost]", m),
            None => named,
        };
        let second = Pricing::builtin(other).expect("shipped cost profiles are valid");
        Costs { primary, second }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Validation walks [`Step::ALL`] by [`Step::key`]: both must be the `[cost]` table's
    /// keys, every one, each pricing its own step.
    #[test]
    fn every_cost_key_is_one_step_and_prices_it() {
        let keys: Vec<&str> = Step::ALL.iter().map(|s| s.key()).collect();
        let table = toml::Value::try_from(CostModel::default()).unwrap();
        let mut fields: Vec<&str> = table
            .as_table()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        fields.sort_unstable();
        assert_eq!(sorted, fields);
        for (i, s) in Step::ALL.into_iter().enumerate() {
            let text = format!("{} = {}", s.key(), 7000 + i);
            let model: CostModel = toml::from_str(&text).unwrap();
            assert_eq!(model.step(s), 7000 + i as u64, "{}", s.key());
        }
    }

    /// The engine charges a device's steps to `by_sched[scheduler.index()]`: that slot is
    /// the model of that scheduler, for a profile that prices each scheduler differently.
    #[test]
    fn the_engine_s_slot_of_a_scheduler_holds_that_scheduler_s_model() {
        let p = mergetune_logic::pricing::profile::builtin("measured-6.18").expect("shipped");
        let pricing = Pricing::from_profile(&p);
        for s in Scheduler::ALL {
            assert_eq!(
                pricing.by_sched[s.index()],
                CostModel::from_profile(&p, s),
                "{s}"
            );
        }
    }
}
