//! The simulated merge-path sampler: what `kernel::perf` would count on the simulated
//! kernel. Every lookup step the engine prices (`Simulation::charge`) while the meter is
//! on adds its cost to its class, and a drain turns the ns into samples of `period_ns`
//! each, keeping the remainder, so that the daemon prices the simulated path exactly as it
//! prices the real one (the plug check is shared by every scheduler, as
//! `blk_attempt_plug_merge` is in the kernel's callchains).

use super::cost::Step;
use mergetune_kernel::perf::{MergeSamples, PathCounts};
use mergetune_kernel::scheduler::Scheduler;

#[derive(Debug, Clone, Default)]
pub struct MergeMeter {
    pub(crate) on: bool,
    period_ns: u64,
    /// ns not yet drained, per device (the engine's index), per [`MergeSamples::slot`]:
    /// merge path, past the one-hit cache, front lookup.
    ns: Vec<[[u64; 4]; 3]>,
}

impl MergeMeter {
    pub(crate) fn open(&mut self, period_ns: u64) {
        self.period_ns = period_ns.max(1);
    }

    pub(crate) fn charge(&mut self, dev: usize, sched: Scheduler, step: Step, ns: u64) {
        let own = MergeSamples::slot(Some(sched));
        let (slot, parts) = match step {
            Step::PlugCheck => (0, 1),
            Step::OneHit => (own, 1),
            Step::HashLookup => (own, 2),
            Step::FrontLookup => (own, 3),
            _ => return,
        };
        if self.ns.len() <= dev {
            self.ns.resize(dev + 1, [[0; 4]; 3]);
        }
        for p in 0..parts {
            self.ns[dev][p][slot] += ns;
        }
    }

    /// The samples since the last drain; `name` gives a device's name from its index.
    pub(crate) fn drain(&mut self, name: impl Fn(usize) -> String) -> MergeSamples {
        let p = self.period_ns.max(1);
        let mut out = MergeSamples {
            period_ns: p,
            ..Default::default()
        };
        let take = |ns: &mut u64| {
            let n = *ns / p;
            *ns -= n * p;
            n
        };
        for (dev, ns) in self.ns.iter_mut().enumerate() {
            let mut counts = [PathCounts::default(); 4];
            for (slot, c) in counts.iter_mut().enumerate() {
                c.merge_path = take(&mut ns[0][slot]);
                c.beyond_one_hit = take(&mut ns[1][slot]);
                c.front_lookup = take(&mut ns[2][slot]);
                out.merge_path[slot] += c.merge_path;
                out.beyond_one_hit[slot] += c.beyond_one_hit;
                out.front_lookup[slot] += c.front_lookup;
                out.total += c.merge_path;
            }
            if counts.iter().any(|c| c.merge_path > 0) {
                out.by_submitter.insert(vec![name(dev)], counts);
            }
        }
        out
    }
}
