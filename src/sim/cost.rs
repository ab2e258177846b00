//! The block-layer cost model: modelled CPU cycles for each step a bio or request takes.
//!
//! Why a model: the daemon's whole case for turning merging off is the CPU spent on merge
//! lookups that find nothing (seed 000), and that cost cannot be measured in a simulator,
//! only stated. The defaults are chosen so that random 4 KiB I/O at queue depth 32 spends
//! 22.5% fewer block-layer cycles at nomerges=2 than at 0 (900 of 4,000 cycles are lookups:
//! plug 150 + one-hit 100 + hash 300 + front 350), the 2008 thread's 20–25%, and so that a
//! successful merge (lookups up to the hit + 250 + 200 per bio) is far cheaper than a new
//! request (1,100 alloc + 400 insert + 600 dispatch + 800 completion + 200 per bio). The
//! 2008 figure is an upper bound: on a 6.18 kernel the measured saving is 0–11% (see
//! DESIGN.md); a scenario can override every number in its `[cost]` table.

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

impl CostModel {
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
