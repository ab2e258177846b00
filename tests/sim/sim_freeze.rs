//! A `queue/nomerges` write freezes the simulated queue as the kernel's
//! `queue_nomerges_store` does: nothing is dispatched until the requests in flight have
//! completed and the measured time of one write has passed; every write counts, changed
//! value or not; and the steps of every run are priced in two currencies.

use mergetune_kernel::trace::Dir;
use mergetune_logic::pricing::profile;
use mergetune_sim::cost::Pricing;
use mergetune_sim::engine::Simulation;
use mergetune_sim::scenario::Scenario;

fn scenario(kind: &str, profile: &str) -> Scenario {
    // The SSD is fast (5 us a request) and its job keeps one I/O in flight, so that its
    // drain is shorter than the measured write; the HDD's 32 take milliseconds.
    let (fast, qd) = if kind == "ssd" {
        ("read_overhead_us = 5.0\n", 1)
    } else {
        ("", 32)
    };
    let text = format!(
        "cost_profile = \"{profile}\"\n\
         [[device]]\nname = \"sda\"\nkind = \"{kind}\"\nqueue_depth = 32\n{fast}\
         [[phase]]\nname = \"p\"\nduration_s = 1.0\n\
         [[phase.job]]\nname = \"r\"\ndevice = \"sda\"\niodepth = {qd}\n"
    );
    Scenario::from_toml_str(&text, "t", None).unwrap()
}

/// Reads completed in 1 s, and (writes, frozen ns), with a nomerges write every
/// `every_ms` (0: none), alternating 0 and `value`.
fn run(kind: &str, profile: &str, every_ms: u64, value: &str) -> (u64, (u64, u64)) {
    let mut s = Simulation::new(&scenario(kind, profile)).unwrap();
    for i in 1..=1000u64 {
        s.advance_to(i * 1_000_000);
        // No write at the very end: its freeze would outlast the run.
        if every_ms > 0 && i % every_ms == 0 && i < 1000 {
            let v = if (i / every_ms).is_multiple_of(2) {
                "0"
            } else {
                value
            };
            s.write_attr("sda", "queue/nomerges", v).unwrap();
        }
    }
    s.run_to_end();
    (
        s.device_stat("sda").unwrap().completed(Dir::Read),
        s.nomerges_freezes(),
    )
}

#[test]
fn every_nomerges_write_freezes_the_queue_and_costs_throughput() {
    let (steady, (w0, f0)) = run("hdd", profile::MEASURED_NAME, 0, "2");
    assert_eq!((w0, f0), (0, 0));
    let (toggled, (writes, frozen_ns)) = run("hdd", profile::MEASURED_NAME, 10, "2");
    assert_eq!(writes, 99);
    // A rotational disk with 32 tags drains in milliseconds, not microseconds.
    assert!(
        frozen_ns / writes > 1_000_000,
        "{frozen_ns} ns over {writes} writes"
    );
    assert!(toggled < steady, "{toggled} vs {steady}");
}

#[test]
fn a_write_of_the_same_value_freezes_too() {
    // The kernel freezes on every write (measured: the write takes as long either way).
    let (_, (writes, frozen_ns)) = run("ssd", profile::MEASURED_NAME, 10, "0");
    assert_eq!(writes, 99);
    assert!(frozen_ns > 0);
}

#[test]
fn the_freeze_lasts_at_least_the_measured_write() {
    let min_ns = Pricing::builtin(profile::MEASURED_NAME)
        .unwrap()
        .freeze_min_ns;
    assert!(min_ns > 0, "the measured profile has a toggle measurement");
    let (_, (writes, frozen_ns)) = run("ssd", profile::MEASURED_NAME, 10, "2");
    assert!(
        frozen_ns >= writes * min_ns,
        "{frozen_ns} < {writes} x {min_ns}"
    );
    // The 2008 figures say nothing of freezes: only the drain is modelled.
    let (_, (_, drain_only_ns)) = run("ssd", profile::LKML_2008_NAME, 10, "2");
    assert!(drain_only_ns < frozen_ns, "{drain_only_ns} vs {frozen_ns}");
}

#[test]
fn a_run_is_priced_in_its_profile_and_in_the_other_one() {
    for (profile, other) in [
        (profile::MEASURED_NAME, profile::LKML_2008_NAME),
        (profile::LKML_2008_NAME, profile::MEASURED_NAME),
    ] {
        let mut s = Simulation::new(&scenario("ssd", profile)).unwrap();
        s.run_to_end();
        assert_eq!(s.cost_names(), (profile, other));
        let acc = s.phase_acc(0, "sda").unwrap();
        assert!(acc.cycles > 0 && acc.cycles_second > 0);
        assert_ne!(acc.cycles, acc.cycles_second);
    }
}
