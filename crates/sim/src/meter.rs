//! The simulated merge-path sampler: what `kernel::perf` would count on the simulated
//! kernel. Every lookup step the engine prices (`Simulation::charge`) while the meter is
//! on adds its cost to its class, and a drain turns the ns into samples of `period_ns`
//! each, keeping the remainder, so that the daemon prices the simulated path exactly as it
//! prices the real one (the plug check is shared by every scheduler, as
//! `blk_attempt_plug_merge` is in the kernel's callchains).

use super::cost::Step;
use mergetune_kernel::perf::MergeSamples;
use mergetune_kernel::scheduler::Scheduler;

#[derive(Debug, Clone, Default)]
pub struct MergeMeter {
    pub(crate) on: bool,
    period_ns: u64,
    /// ns not yet drained, per [`MergeSamples::slot`]: merge path, past the one-hit cache,
    /// front lookup.
    ns: [[u64; 4]; 3],
}

impl MergeMeter {
    pub(crate) fn open(&mut self, period_ns: u64) {
        self.period_ns = period_ns.max(1);
    }

    pub(crate) fn charge(&mut self, sched: Scheduler, step: Step, ns: u64) {
        let own = MergeSamples::slot(Some(sched));
        let (slot, parts) = match step {
            Step::PlugCheck => (0, 1),
            Step::OneHit => (own, 1),
            Step::HashLookup => (own, 2),
            Step::FrontLookup => (own, 3),
            _ => return,
        };
        for p in 0..parts {
            self.ns[p][slot] += ns;
        }
    }

    pub(crate) fn drain(&mut self) -> MergeSamples {
        let p = self.period_ns.max(1);
        let mut out = MergeSamples {
            period_ns: p,
            ..Default::default()
        };
        for slot in 0..4 {
            let take = |ns: &mut u64| {
                let n = *ns / p;
                *ns -= n * p;
                n
            };
            out.merge_path[slot] = take(&mut self.ns[0][slot]);
            out.beyond_one_hit[slot] = take(&mut self.ns[1][slot]);
            out.front_lookup[slot] = take(&mut self.ns[2][slot]);
            out.total += out.merge_path[slot];
        }
        out
    }
}
