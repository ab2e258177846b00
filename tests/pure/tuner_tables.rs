//! The tuner tables (`logic::tuners`) are the one place a scheduler's rungs and slice knobs
//! are written: every slice tunable sits in exactly one table, and what the tables say is
//! what the simulator's sysfs offers and the config accepts.

use mergetune_kernel::blockfs::Sysfs;
use mergetune_kernel::scheduler::Scheduler;
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::{Config, load_str};
use mergetune_logic::decision::Level;
use mergetune_logic::tuners::{self, TABLES};
use mergetune_sim::engine::Simulation;
use mergetune_sim::scenario::Scenario;

#[test]
fn there_is_one_table_per_scheduler_in_the_one_order() {
    for (s, t) in Scheduler::ALL.into_iter().zip(TABLES) {
        assert_eq!(t.scheduler, s);
        assert_eq!(tuners::table(s).scheduler, s);
        assert!(t.rungs.is_sorted(), "{s}: rungs out of order");
        assert!(
            t.rungs.contains(&Level::L0) && t.rungs.contains(&Level::L3),
            "{s}: L0 and L3 exist everywhere"
        );
    }
}

#[test]
fn every_slice_tunable_sits_in_exactly_one_table() {
    for t in Tunable::ALL {
        let n = TABLES
            .iter()
            .filter(|tb| tb.knobs.iter().any(|k| k.tunable == t))
            .count();
        let want = usize::from(!t.is_ladder());
        assert_eq!(n, want, "{t} is in {n} tables");
    }
    let mut keys: Vec<&str> = tuners::knobs().map(|k| k.bound.key).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), tuners::knobs().count(), "a bound key is shared");
}

/// A scenario of one device running `s`.
fn one_device(s: Scheduler) -> Simulation {
    let text = format!(
        "[[device]]\nname = \"sda\"\nkind = \"ssd\"\nscheduler = \"{s}\"\n\
         [[phase]]\nname = \"p\"\nduration_s = 1.0\n"
    );
    Simulation::new(&Scenario::from_toml_str(&text, "t", None).unwrap()).unwrap()
}

#[test]
fn the_simulator_offers_every_knob_at_its_kernel_default() {
    for table in TABLES {
        for k in table.knobs {
            let mut sim = one_device(table.scheduler);
            let t = k.tunable;
            assert_eq!(
                sim.read_tunable("sda", t).unwrap().trim(),
                k.default.to_string(),
                "{}: {t}",
                table.scheduler
            );
            let bound = Config::default().slices.bound(t);
            let to = (k.step)(k.default, bound).expect("a step from the default");
            sim.write_tunable("sda", t, &to.to_string()).unwrap();
            assert_eq!(sim.read_tunable("sda", t).unwrap().trim(), to.to_string());
            // Another scheduler does not have it.
            for other in Scheduler::ALL.into_iter().filter(|&o| o != table.scheduler) {
                if tuners::table(other).knobs.iter().all(|o| o.tunable != t) {
                    assert!(one_device(other).read_tunable("sda", t).is_err());
                }
            }
        }
    }
}

#[test]
fn the_config_accepts_every_bound_within_its_range() {
    let defaults = Config::default();
    for k in tuners::knobs() {
        let b = k.bound;
        assert_eq!(defaults.slices.bound(k.tunable), b.default, "{}", b.key);
        for ok in [b.min, b.default, b.max] {
            let cfg = load_str(&format!("[slices]\n{} = {ok}\n", b.key), "t").unwrap();
            assert_eq!(cfg.slices.bound(k.tunable), ok);
        }
        let e = load_str(&format!("[slices]\n{} = {}\n", b.key, b.max + 1), "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("slices.{}", b.key)), "{e}");
    }
    let e = load_str("[slices]\nno_such_max = 1\n", "t")
        .unwrap_err()
        .to_string();
    for k in tuners::knobs() {
        assert!(e.contains(k.bound.key), "{e}");
    }
}
