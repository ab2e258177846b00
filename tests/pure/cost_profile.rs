//! Cost profiles: the shipped ones parse and validate, bad ones are refused naming the key,
//! and the simulator's step prices derive from them as documented in `sim::cost`.

use mergetune_kernel::scheduler::Scheduler;
use mergetune_logic::decision::Level;
use mergetune_logic::pricing::profile::{
    self, BUILTIN_NAMES, CostProfile, Method, ProfileError, Verdict, Workload,
};
use mergetune_sim::cost::CostModel;
use mergetune_sim::cost::Pricing;

fn key_of(e: ProfileError) -> String {
    match e {
        ProfileError::Invalid { key, .. } => key,
        other => panic!("expected a validation error, got {other}"),
    }
}

/// A minimal measured profile: one scheduler, L0 and L3 of random unbatched I/O, with the
/// L3 change and its interval given by the caller.
fn measured(change: f64, ci: [f64; 2]) -> String {
    format!(
        r#"
name = "t"
description = "test"
method = "cpu-bound-loop"
unit = "ns"
kernel_release = "6.18.0"
schedulers = ["none"]
cpu_measure = "fio + kworkers"
reps = 10
ci_coverage_percent = 97.9
noise_percent = 2.0

[[cell]]
scheduler = "none"
level = "L0"
workload = "random-unbatched"
cpu_per_io = 5000.0
cpu_per_io_ci = [4900.0, 5100.0]
merged_percent = 0.0

[[cell]]
scheduler = "none"
level = "L3"
workload = "random-unbatched"
cpu_per_io = {l3}
cpu_per_io_ci = [{lo}, {hi}]
merged_percent = 0.0
change_percent = {change}
change_ci = [{cl}, {ch}]
"#,
        l3 = 5000.0 * (1.0 + change / 100.0),
        lo = 5000.0 * (1.0 + change / 100.0) - 100.0,
        hi = 5000.0 * (1.0 + change / 100.0) + 100.0,
        cl = ci[0],
        ch = ci[1],
    )
}

#[test]
fn the_shipped_profiles_parse_and_validate() {
    for name in BUILTIN_NAMES {
        let p = profile::builtin(name).unwrap_or_else(|| panic!("{name} is not shipped"));
        assert_eq!(p.name, name);
        p.validate().unwrap();
        assert!(!p.render().is_empty());
    }
}

/// The profile's table gives the workload a column 21 wide: every workload's name is
/// padded to it, so the columns after it line up.
#[test]
fn the_rendered_table_pads_every_workload_to_its_column() {
    let table = profile::builtin(profile::MEASURED_NAME).unwrap().render();
    for w in Workload::ALL {
        let name = w.to_string();
        let rows: Vec<&str> = table.lines().filter(|l| l.contains(&name)).collect();
        assert!(!rows.is_empty(), "no row of {name} in\n{table}");
        for row in rows {
            let at = row.find(&name).unwrap();
            assert_eq!(&row[at..at + 22], format!("{name:<21} "), "{row}");
        }
    }
}

#[test]
fn the_measured_profile_records_its_provenance() {
    let p = profile::builtin(profile::MEASURED_NAME).unwrap();
    assert_eq!(p.method, Method::CpuBoundLoop);
    assert!(p.kernel_release.starts_with("6.18"), "{}", p.kernel_release);
    assert!(
        p.command.starts_with("mergetune calibrate"),
        "{}",
        p.command
    );
    assert!(!p.measured_at.is_empty());
    assert!(
        p.reps >= 10,
        "the shipped profile is a full run, not --quick"
    );
    assert!(p.ci_coverage_percent >= 95.0);
    assert!(
        p.toggle.is_some(),
        "the freeze of a nomerges write is measured"
    );
    for s in Scheduler::ALL {
        for &l in mergetune_logic::tuners::profile_levels(s) {
            for w in Workload::ALL {
                assert!(p.cell(s, l, w).is_some(), "{s} {l} {w} not measured");
            }
        }
    }
}

#[test]
fn the_2008_profile_prices_the_steps_as_the_old_defaults() {
    let p = profile::builtin(profile::LKML_2008_NAME).unwrap();
    for s in Scheduler::ALL {
        assert_eq!(
            CostModel::from_profile(&p, s),
            CostModel::default(),
            "{s} (priced like the thread's deadline)"
        );
    }
    let m = CostModel::default();
    let saving = 1.0 - m.unmerged_bio_cycles(2) as f64 / m.unmerged_bio_cycles(0) as f64;
    assert!((saving - 0.225).abs() < 1e-9, "{saving}");
}

#[test]
fn a_change_whose_interval_contains_zero_is_no_measurable_difference_and_costs_nothing() {
    let p = CostProfile::from_toml_str(&measured(-3.0, [-6.0, 0.5])).unwrap();
    let c = p
        .cell(Scheduler::None, Level::L3, Workload::RandomUnbatched)
        .unwrap();
    assert_eq!(c.verdict(), Some(Verdict::NoMeasurableDifference));
    assert_eq!(c.significant_change(), 0.0);
    let m = CostModel::from_profile(&p, Scheduler::None);
    assert_eq!(m.unmerged_bio_cycles(0), m.unmerged_bio_cycles(2));
}

#[test]
fn a_measurable_saving_becomes_lookup_cost() {
    let p = CostProfile::from_toml_str(&measured(-8.0, [-10.0, -6.0])).unwrap();
    let c = p
        .cell(Scheduler::None, Level::L3, Workload::RandomUnbatched)
        .unwrap();
    assert_eq!(c.verdict(), Some(Verdict::Saves));
    let m = CostModel::from_profile(&p, Scheduler::None);
    let (u0, u2) = (
        m.unmerged_bio_cycles(0) as f64,
        m.unmerged_bio_cycles(2) as f64,
    );
    assert!((u0 - 5000.0).abs() <= 2.0, "{u0}");
    assert!(((1.0 - u2 / u0) * 100.0 - 8.0).abs() < 0.1, "{u0} {u2}");
    // No L2 cell: L2 costs what L0 costs, so the whole saving is what nomerges=2 drops
    // beyond 1 (the plug check and the one-hit try), none of it hash or front lookups.
    assert!(m.plug_check > 0 && m.one_hit > 0);
    assert_eq!(m.hash_lookup + m.front_lookup, 0);
}

#[test]
fn a_measured_cost_increase_is_not_a_negative_lookup() {
    let p = CostProfile::from_toml_str(&measured(6.0, [3.0, 9.0])).unwrap();
    let c = p
        .cell(Scheduler::None, Level::L3, Workload::RandomUnbatched)
        .unwrap();
    assert_eq!(c.verdict(), Some(Verdict::Costs));
    let m = CostModel::from_profile(&p, Scheduler::None);
    assert_eq!(m.unmerged_bio_cycles(0), m.unmerged_bio_cycles(2));
}

#[test]
fn a_quick_profile_with_short_intervals_shows_no_saving() {
    let text = measured(-8.0, [-10.0, -6.0])
        .replace("ci_coverage_percent = 97.9", "ci_coverage_percent = 50.0");
    let p = CostProfile::from_toml_str(&text).unwrap();
    let m = CostModel::from_profile(&p, Scheduler::None);
    assert_eq!(m.unmerged_bio_cycles(0), m.unmerged_bio_cycles(2));
}

#[test]
fn pricing_takes_the_freeze_from_the_toggle_measurement() {
    let p = profile::builtin(profile::MEASURED_NAME).unwrap();
    let t = p.toggle.as_ref().unwrap();
    let pr = Pricing::from_profile(&p);
    assert_eq!(
        pr.freeze_min_ns,
        (t.write_us_median * 1000.0).round() as u64
    );
    assert_eq!(
        Pricing::builtin(profile::LKML_2008_NAME)
            .unwrap()
            .freeze_min_ns,
        0
    );
}

#[test]
fn unknown_keys_are_refused() {
    let text = measured(-8.0, [-10.0, -6.0]).replace("reps = 10", "reps = 10\nrepz = 3");
    let e = CostProfile::from_toml_str(&text).unwrap_err();
    assert!(
        matches!(e, ProfileError::Parse(ref m) if m.contains("repz")),
        "{e}"
    );
}

#[test]
fn validation_names_the_key() {
    let ok = measured(-8.0, [-10.0, -6.0]);
    let cases: &[(&str, &str, &str)] = &[
        (
            "kernel_release = \"6.18.0\"",
            "kernel_release = \"\"",
            "kernel_release",
        ),
        ("reps = 10", "reps = 0", "reps"),
        ("unit = \"ns\"", "unit = \"model-cycles\"", "unit"),
        (
            "schedulers = [\"none\"]",
            "schedulers = [\"none\", \"none\"]",
            "schedulers",
        ),
        // L1 is mq-deadline's front_merges=0: none has no such level.
        ("level = \"L3\"", "level = \"L1\"", "cell[1].level"),
        (
            "cpu_per_io = 5000.0",
            "cpu_per_io = -1.0",
            "cell[0].cpu_per_io",
        ),
        // An interval must contain its median.
        (
            "cpu_per_io_ci = [4900.0, 5100.0]",
            "cpu_per_io_ci = [5200.0, 5300.0]",
            "cell[0].cpu_per_io_ci",
        ),
        (
            "change_ci = [-10, -6]",
            "change_ci = [-5, -1]",
            "cell[1].change_ci",
        ),
        (
            "merged_percent = 0.0\n\n[[cell]]",
            "merged_percent = 120.0\n\n[[cell]]",
            "cell[0].merged_percent",
        ),
        // L0 is the reference.
        (
            "merged_percent = 0.0\n\n[[cell]]",
            "merged_percent = 0.0\nchange_percent = 1.0\n\n[[cell]]",
            "cell[0].change_percent",
        ),
        // The simulator's reference cell must be there.
        (
            "level = \"L0\"\nworkload = \"random-unbatched\"",
            "level = \"L0\"\nworkload = \"random-batched\"",
            "cell",
        ),
        (
            "schedulers = [\"none\"]",
            "schedulers = [\"kyber\"]",
            "cell[0].scheduler",
        ),
    ];
    for (from, to, key) in cases {
        assert!(ok.contains(from), "fixture lacks {from:?}");
        let text = ok.replacen(from, to, 1);
        let e = CostProfile::from_toml_str(&text).expect_err(&format!("{to} accepted"));
        assert_eq!(key_of(e), *key, "{to}");
    }
    // A cell measured twice.
    let twice = format!(
        "{ok}\n[[cell]]\nscheduler = \"none\"\nlevel = \"L0\"\nworkload = \"random-unbatched\"\n\
         cpu_per_io = 1.0\ncpu_per_io_ci = [1.0, 1.0]\nmerged_percent = 0.0\n"
    );
    assert_eq!(
        key_of(CostProfile::from_toml_str(&twice).unwrap_err()),
        "cell[2].workload"
    );
}

#[test]
fn a_profile_round_trips_through_toml() {
    let p = profile::builtin(profile::MEASURED_NAME).unwrap();
    let again = CostProfile::from_toml_str(&p.to_toml_string()).unwrap();
    assert_eq!(p, again);
}

#[test]
fn a_scenario_names_a_profile_and_an_unknown_name_is_refused() {
    use mergetune_sim::scenario::Scenario;
    let base =
        "[[device]]\nname = \"sda\"\nkind = \"ssd\"\n[[phase]]\nname = \"p\"\nduration_s = 1\n";
    let sc = Scenario::from_toml_str(&format!("cost_profile = \"lkml-2008\"\n{base}"), "t", None)
        .unwrap();
    assert_eq!(sc.cost_profile.as_deref(), Some("lkml-2008"));
    let e = Scenario::from_toml_str(&format!("cost_profile = \"1999\"\n{base}"), "t", None)
        .unwrap_err();
    assert!(e.to_string().contains("cost_profile"), "{e}");
}
