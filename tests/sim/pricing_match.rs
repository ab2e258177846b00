//! The daemon and the simulator price a device from the same cells of a cost profile, for
//! every scheduler: the daemon's table (`PricingSource::profile_worth`, what a device's
//! caps carry) and the simulator's step costs (`sim::cost::Pricing`, indexed by its own
//! scheduler order) both go through `CostProfile::priced_scheduler` and
//! `CostProfile::priced_cell`. Over profiles that measured any subset of the schedulers,
//! in any order, with figures that tell the schedulers apart, each picks the same
//! (scheduler, level, workload) cell, and the simulator's model of a scheduler is the one
//! built from that scheduler's cells alone.

use mergetune_kernel::scheduler::Scheduler;
use mergetune_logic::decision::Level;
use mergetune_logic::pricing::profile::{self, CostProfile, PRICED_WORKLOAD};
use mergetune_logic::pricing::source::PricingSource;
use mergetune_logic::pricing::worth::{Basis, SavingUnit};
use mergetune_sim::cost::{CostModel, Pricing};
use proptest::prelude::*;

/// The measured profile restricted to `schedulers` (in that order), each cell's figures
/// moved by its own factor so that no two schedulers price alike.
fn profile_of(schedulers: &[Scheduler], factors: &[f64]) -> CostProfile {
    let mut p = profile::builtin(profile::MEASURED_NAME).expect("shipped");
    p.schedulers = schedulers.to_vec();
    p.cells.retain(|c| schedulers.contains(&c.scheduler));
    p.merge_path.retain(|c| schedulers.contains(&c.scheduler));
    for (c, f) in p.cells.iter_mut().zip(factors.iter().cycle()) {
        c.cpu_per_io *= f;
        c.cpu_per_io_ci = c.cpu_per_io_ci.map(|[lo, hi]| [lo * f, hi * f]);
        c.change_percent = c.change_percent.map(|x| x * f);
        c.change_ci = c.change_ci.map(|[lo, hi]| [lo * f, hi * f]);
    }
    p
}

/// `p` as it would be had it measured `s` alone.
fn only(p: &CostProfile, s: Scheduler) -> CostProfile {
    let mut q = p.clone();
    q.schedulers = vec![s];
    q.cells.retain(|c| c.scheduler == s);
    q.merge_path.retain(|c| c.scheduler == s);
    q
}

fn schedulers() -> impl Strategy<Value = Vec<Scheduler>> {
    proptest::sample::subsequence(Scheduler::ALL.to_vec(), 1..=4).prop_shuffle()
}

proptest! {
    #[test]
    fn the_daemon_and_the_simulator_price_each_scheduler_from_the_same_cell(
        scheds in schedulers(),
        factors in proptest::collection::vec(0.5f64..2.0, 1..16),
    ) {
        let p = profile_of(&scheds, &factors);
        let source = PricingSource::Profile {
            profile: Box::new(p.clone()),
            spec: "t.toml".into(),
        };
        let sim = Pricing::from_profile(&p);
        for s in Scheduler::ALL {
            // The rule, stated apart from the code: the device's own scheduler where the
            // profile measured it, else the profile's first.
            let want = if scheds.contains(&s) { s } else { scheds[0] };
            prop_assert_eq!(p.priced_scheduler(Some(s)), want);

            let w = source.profile_worth(Some(s), None, None);
            prop_assert_eq!(w.basis, Basis::Profile);
            prop_assert_eq!(w.scheduler, Some(want), "daemon, {}", s);
            for l in [Level::L1, Level::L2, Level::L3] {
                let cell = p.cell(want, l, PRICED_WORKLOAD);
                prop_assert_eq!(p.priced_cell(Some(s), l), cell);
                let saving = w.saving(l);
                prop_assert_eq!(saving.map(|v| v.value), cell.and_then(|c| c.change_percent));
                prop_assert_eq!(saving.and_then(|v| v.ci), cell.and_then(|c| c.change_ci));
                prop_assert!(saving.is_none_or(|v| v.unit == SavingUnit::PercentPerIo));
            }

            let k = s.index();
            let from_its_cells = CostModel::from_profile(&only(&p, want), want);
            prop_assert_eq!(sim.by_sched[k], from_its_cells, "simulator, {}", s);
            prop_assert_eq!(CostModel::from_profile(&p, s), from_its_cells);
        }
    }
}
