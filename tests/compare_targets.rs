//! The policy's targets (issue 12, docs/evaluation.md) on the shipped comparison suite, at
//! full length: each scenario is its own test so they run side by side. About a minute
//! of CPU in release (`cargo test --release`, the README's test command); much longer in
//! debug.
//!
//! Targets, for the adaptive policy with the default config, in each scenario's own cost
//! profile (the one measured on this kernel unless the scenario names another; the daemon
//! is told the same profile, as an operator configures the one measured on their kernel):
//! - at least 90% of the oracle's block-layer CPU saving where that saving is significant
//!   (over [`SIGNIFICANT_PERCENT`] of the kernel default's CPU);
//! - at most 0.5% throughput lost against the kernel default, in every phase;
//! - at most 2 level changes in any hour once settled at the oracle's level (convergence
//!   after a phase change excluded: that is the reaction, below);
//! - a reaction within 3 windows at every phase change where the oracle's level moves,
//!   from whatever level the policy is at (toward mergeable I/O: back to the oracle's
//!   level; toward merge-hostile I/O: a first step down).
//!
//! The suite is also run in the 2008 profile (where not merging pays, so the ladder moves)
//! for the scenarios whose phases change, with the same safety targets.

use mergetune::lab::compare::{PolicySummary, ScenarioComparison, compare, suite_scenario};
use mergetune::logic::config::Config;
use mergetune::logic::cost_profile;
use mergetune::logic::decision::{DecisionKind, Level};
use mergetune::sim::Scenario;

/// An oracle saving under this share of the kernel default's CPU, in percent, is not
/// significant: there is nothing to capture.
const SIGNIFICANT_PERCENT: f64 = 0.5;

fn scenario(name: &str, profile: Option<&str>) -> Scenario {
    let mut sc = suite_scenario(name, 1.0).unwrap_or_else(|| panic!("no suite scenario {name}"));
    if let Some(p) = profile {
        sc.cost_profile = Some(p.to_string());
    }
    sc
}

fn row<'a>(c: &'a ScenarioComparison, policy: &str) -> &'a PolicySummary {
    c.rows.iter().find(|r| r.policy == policy).unwrap()
}

/// Checks the targets on `sc`; `min_of_oracle` is the share of a significant oracle
/// saving adaptive must capture, `deepest` the deepest level it may rest at (L2 without a
/// bio tap): a move of the oracle's level below it asks for no reaction.
fn assert_targets_on(sc: &Scenario, min_of_oracle: f64, deepest: Level) -> ScenarioComparison {
    let cfg = Config::default();
    let window_ms = cfg.window_ms();
    let name = format!("{} ({})", sc.name, sc.cost_profile_name());
    let c = compare(sc, &cfg).unwrap();
    let a = row(&c, "adaptive");
    let oracle_saved = row(&c, "oracle").cpu_saved_percent;
    if oracle_saved >= SIGNIFICANT_PERCENT {
        assert!(
            a.of_oracle_percent >= min_of_oracle,
            "{name}: adaptive captured {:.1}% of the oracle's {oracle_saved:.2}% CPU saving (< {min_of_oracle}%)",
            a.of_oracle_percent
        );
    }
    assert!(
        a.worst_throughput_loss_percent <= 0.5,
        "{name}: adaptive lost {:.2}% throughput in phase {} (> 0.5%)",
        a.worst_throughput_loss_percent,
        a.worst_throughput_loss_phase
    );
    assert!(
        a.settled_changes_per_hour_max <= 2,
        "{name}: {} level changes within an hour once settled (> 2)",
        a.settled_changes_per_hour_max
    );
    let moves: Vec<(Level, Level)> = c.oracle_levels.windows(2).map(|w| (w[0], w[1])).collect();
    let moves: Vec<(Level, Level)> = moves.into_iter().filter(|(a, b)| a != b).collect();
    assert_eq!(moves.len(), a.reaction_ms.len(), "{name}");
    for (i, ((from, to), r)) in moves.iter().zip(&a.reaction_ms).enumerate() {
        if to > from && *to > deepest && r.is_none() {
            // Already as deep as it may go (the policy's own targets above still hold).
            continue;
        }
        let ms = r.unwrap_or_else(|| panic!("{name}: phase change {i}: adaptive never reacted"));
        let limit = 3 * window_ms;
        assert!(
            ms <= limit,
            "{name}: phase change {i} (oracle L{from} -> L{to}): reacted after {ms} ms (> {limit})"
        );
    }
    // The oracle itself never loses more than it is allowed to.
    assert!(
        row(&c, "oracle").worst_throughput_loss_percent <= 0.5,
        "{name}"
    );
    c
}

/// The targets in the scenario's own profile; in the measured one, also: nothing is
/// worth it, so adaptive writes nothing and says why.
fn assert_targets(name: &str) -> ScenarioComparison {
    let sc = scenario(name, None);
    let c = assert_targets_on(&sc, 90.0, Level::L3);
    if sc.cost_profile_name() == cost_profile::MEASURED_NAME {
        let a = row(&c, "adaptive");
        assert_eq!(a.level_changes, 0, "{name}: {a:?}");
        assert_eq!(a.nomerges_writes, 0, "{name}");
    }
    c
}

/// The same scenario priced in the 2008 figures, where the ladder does move. Without a bio
/// tap the deepest level is L2, which keeps 16.25 of the oracle's 22.5% on random I/O
/// (72%): the share asked here; the safety targets are the same.
fn assert_targets_2008(name: &str) -> ScenarioComparison {
    assert_targets_on(
        &scenario(name, Some(cost_profile::LKML_2008_NAME)),
        70.0,
        Level::L2,
    )
}

#[test]
fn oltp_steady() {
    let c = assert_targets("oltp_steady");
    let a = c.runs.iter().find(|r| r.policy == "adaptive").unwrap();
    let said: Vec<_> = a
        .decisions
        .iter()
        .filter(|d| d.kind == DecisionKind::NotWorthIt)
        .collect();
    assert_eq!(
        said.len(),
        1,
        "said once for the one random workload: {said:?}"
    );
    assert!(said[0].changes.is_empty());
    assert!(
        said[0].reason.starts_with("not worth it here"),
        "{}",
        said[0].reason
    );
}

#[test]
fn backup() {
    let c = assert_targets("backup");
    // The admin who "knows" the load is random loses throughput on a backup.
    assert!(row(&c, "static-nomerges-2").worst_throughput_loss_percent > 5.0);
}

#[test]
fn oltp_backup_every_minute() {
    let c = assert_targets("oltp_backup_every_minute");
    // Static nomerges=2 never merges: the backups lose throughput.
    assert!(row(&c, "static-nomerges-2").worst_throughput_loss_percent > 5.0);
}

#[test]
fn oltp_backup_every_minute_in_2008_costs() {
    let c = assert_targets_2008("oltp_backup_every_minute");
    // Once a sequential phase follows a random one, the naive toggle cannot see the merges
    // it disabled.
    assert!(row(&c, "naive-toggle").worst_throughput_loss_percent > 5.0);
    assert!(row(&c, "adaptive").level_changes > 0);
}

#[test]
fn mix_noise() {
    assert_targets("mix_noise");
}

#[test]
fn bursty_spikes() {
    assert_targets("bursty_spikes");
}

#[test]
fn bursty_spikes_in_2008_costs() {
    assert_targets_2008("bursty_spikes");
}

#[test]
fn dm_stripe_oltp() {
    assert_targets("dm_stripe_oltp");
}

#[test]
fn readers_vs_writer() {
    let c = assert_targets("readers_vs_writer");
    assert!(row(&c, "static-nomerges-2").worst_throughput_loss_percent > 5.0);
}

#[test]
fn same_signature() {
    // Random 4 KiB writes, then at the same rate, size and read share sequential batched
    // ones: priced in 2008 figures, so merging does go off first.
    let sc = scenario("same_signature", None);
    assert_eq!(sc.cost_profile_name(), cost_profile::LKML_2008_NAME);
    // The CPU target is the measured profile's; here the reaction and throughput targets
    // apply (without a tap adaptive rests at L2: 66% of the oracle's L3 saving).
    let c = assert_targets_on(&sc, 0.0, Level::L2);
    let a = row(&c, "adaptive");
    assert!(a.level_changes >= 2, "off, then back on: {a:?}");
    assert_eq!(a.reaction_ms.len(), 1, "{:?}", c.oracle_levels);
}

#[test]
fn without_the_l3_watch_the_spikes_cost_throughput() {
    // What meets the target on short sequential spikes is the watch at L3: read the
    // counters once a second only, and each spike runs a whole second unmerged.
    let mut cfg = Config::default();
    cfg.policy.l3_watch_interval_ms = 0;
    let sc = scenario("bursty_spikes", Some(cost_profile::LKML_2008_NAME));
    let c = compare(&sc, &cfg).unwrap();
    let a = row(&c, "adaptive");
    assert!(
        a.worst_throughput_loss_percent > 0.5,
        "without the watch adaptive lost only {:.2}%",
        a.worst_throughput_loss_percent
    );
}
