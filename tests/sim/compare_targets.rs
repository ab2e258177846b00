//! The policy's targets (docs/testing.md, docs/evaluation.md) on the shipped
//! comparison suite, at full length: each scenario is its own test so they run side by
//! side. A couple of minutes of CPU in release (`cargo test --release`, the README's test
//! command); much longer in debug.
//!
//! The targets, for the adaptive policy with the default config (the numbers docs/testing.md
//! gives, as constants below):
//! - at least [`MIN_OF_ORACLE_PERCENT`] of the oracle's block-layer CPU saving where that
//!   saving is significant (over [`SIGNIFICANT_PERCENT`] of the kernel default's CPU);
//! - at most [`MAX_LOSS_PERCENT`] throughput lost against the kernel default, in every phase;
//! - at most [`MAX_SETTLED_CHANGES_PER_HOUR`] level changes in any hour once settled at the
//!   oracle's level (convergence after a phase change excluded: that is the reaction);
//! - at every phase change where the oracle's level moves: a first step down within
//!   [`REACTION_TOWARD_RANDOM_WINDOWS`] windows when it moves deeper, back to the oracle's
//!   level within [`REACTION_TOWARD_MERGING_WINDOWS`] window when it moves up.
//!
//! A target only means something where it can fail. In the measured profile (this kernel's,
//! the default) the oracle stays at L0 everywhere, so a policy that does nothing meets every
//! target there. So each scenario is checked twice:
//! - `*_targets`: priced in the 2008 figures, where not merging pays and the oracle moves.
//!   Each such test first checks that the do-nothing policy (`kernel-default`, what
//!   `--policy off` runs) misses a target there, so that the test can fail; then that
//!   adaptive meets them all. Where even in 2008 costs the oracle keeps merging on
//!   (sequential and mixed loads), doing nothing is right, and what can fail is the safety
//!   targets: there static nomerges=2 must miss one.
//! - `*_measured`: in the measured profile nothing is worth it, so adaptive writes nothing
//!   (which static nomerges=2, writing once, fails).

use mergetune_lab::compare::{PolicySummary, ScenarioComparison, compare, suite_scenario};
use mergetune_logic::config::Config;
use mergetune_logic::decision::{DecisionKind, Level};
use mergetune_logic::pricing::profile;
use mergetune_sim::scenario::Scenario;

/// Share of a significant oracle saving adaptive must capture, in percent (docs/testing.md).
const MIN_OF_ORACLE_PERCENT: f64 = 90.0;
/// An oracle saving under this share of the kernel default's CPU, in percent, is not
/// significant: there is nothing to capture.
const SIGNIFICANT_PERCENT: f64 = 0.5;
/// Largest throughput loss against the kernel default in any phase, in percent.
const MAX_LOSS_PERCENT: f64 = 0.5;
/// And what adaptive keeps under in every phase of every scenario, in percent: a margin
/// under the goal (the rules that hold decisions on steady loads must not take it).
const MAX_LOSS_MARGIN_PERCENT: f64 = 0.4;
/// Most level changes in any hour once settled.
const MAX_SETTLED_CHANGES_PER_HOUR: usize = 2;
/// A first step down within this many windows after merge-hostile I/O starts.
const REACTION_TOWARD_RANDOM_WINDOWS: u64 = 3;
/// Back at the oracle's level within this many windows after mergeable I/O starts.
const REACTION_TOWARD_MERGING_WINDOWS: u64 = 1;

/// The targets one check holds a policy to.
#[derive(Debug, Clone, Copy)]
struct Targets {
    min_of_oracle_percent: f64,
    max_loss_percent: f64,
    toward_random_windows: u64,
}

/// The documented targets (docs/testing.md).
const DOCUMENTED: Targets = Targets {
    min_of_oracle_percent: MIN_OF_ORACLE_PERCENT,
    max_loss_percent: MAX_LOSS_PERCENT,
    toward_random_windows: REACTION_TOWARD_RANDOM_WINDOWS,
};

/// Where adaptive misses a documented target, what it does meet, pinned so that it cannot
/// slip; each is said in docs/evaluation.md, and its test also checks that the documented
/// target is still missed (a fix must tighten the pin, not hide behind it).
///
/// oltp_scans_bursts: after a burst, the window that holds its end still counts its
/// merges, so a database rate the daemon has not seen settle at L3 before (3 low windows,
/// not 2) is stepped down after 3.5 windows (7.1 s); the window straddle is the policy's.
/// The throughput target is met since the watch at L3 reads every 50 ms (a burst that
/// starts at L3 runs unmerged until the watch's next tick: 0.63% of burst-5's throughput
/// at 100 ms, 0.32% at 50 ms).
const OLTP_SCANS_BURSTS_MET: Targets = Targets {
    toward_random_windows: 4,
    ..DOCUMENTED
};

const DO_NOTHING: &str = "kernel-default";
const ALWAYS_OFF: &str = "static-nomerges-2";

fn scenario(name: &str, profile: &str) -> Scenario {
    let mut sc = suite_scenario(name, 1.0).unwrap_or_else(|| panic!("no suite scenario {name}"));
    sc.cost_profile = Some(profile.to_string());
    sc
}

fn row<'a>(c: &'a ScenarioComparison, policy: &str) -> &'a PolicySummary {
    c.rows
        .iter()
        .find(|r| r.policy == policy)
        .unwrap_or_else(|| panic!("no row {policy}"))
}

/// The targets `policy` misses on `c`, each said with its figure; empty when it meets all.
fn misses(c: &ScenarioComparison, policy: &str, window_ms: u64, t: Targets) -> Vec<String> {
    let r = row(c, policy);
    let oracle_saved = row(c, "oracle").cpu_saved_percent;
    let mut missed = Vec::new();
    let min_share = t.min_of_oracle_percent;
    if oracle_saved >= SIGNIFICANT_PERCENT && r.of_oracle_percent < min_share {
        missed.push(format!(
            "captured {:.1}% of the oracle's {oracle_saved:.2}% CPU saving (target >= {min_share}%)",
            r.of_oracle_percent
        ));
    }
    if r.worst_throughput_loss_percent > t.max_loss_percent {
        missed.push(format!(
            "lost {:.2}% throughput in phase {} (target <= {}%)",
            r.worst_throughput_loss_percent, r.worst_throughput_loss_phase, t.max_loss_percent
        ));
    }
    if r.settled_changes_per_hour_max > MAX_SETTLED_CHANGES_PER_HOUR {
        missed.push(format!(
            "{} level changes within an hour once settled (target <= {MAX_SETTLED_CHANGES_PER_HOUR})",
            r.settled_changes_per_hour_max
        ));
    }
    let moves = oracle_moves(c);
    assert_eq!(moves.len(), r.reaction_ms.len(), "{}: {policy}", c.scenario);
    for (i, ((from, to), reacted)) in moves.iter().zip(&r.reaction_ms).enumerate() {
        let windows = if to > from {
            t.toward_random_windows
        } else {
            REACTION_TOWARD_MERGING_WINDOWS
        };
        let limit = windows * window_ms;
        match reacted {
            Some(ms) if *ms <= limit => {}
            Some(ms) => missed.push(format!(
                "phase change {i} (oracle {from} -> {to}): reacted after {ms} ms (target <= {windows} windows, {limit} ms)"
            )),
            None => missed.push(format!(
                "phase change {i} (oracle {from} -> {to}): never reacted (target <= {windows} windows)"
            )),
        }
    }
    missed
}

/// The oracle's level changes, in order, as (from, to).
fn oracle_moves(c: &ScenarioComparison) -> Vec<(Level, Level)> {
    c.oracle_levels
        .windows(2)
        .map(|w| (w[0], w[1]))
        .filter(|(from, to)| from != to)
        .collect()
}

/// Adaptive loses at most the margin in every phase; returns its row.
fn assert_adaptive_within_the_margin(c: &ScenarioComparison) -> &PolicySummary {
    let a = row(c, "adaptive");
    assert!(
        a.worst_throughput_loss_percent <= MAX_LOSS_MARGIN_PERCENT,
        "{}: adaptive lost {:.2}% in {} (at most {MAX_LOSS_MARGIN_PERCENT}% in every phase)\n{}",
        c.scenario,
        a.worst_throughput_loss_percent,
        a.worst_throughput_loss_phase,
        figures(c)
    );
    a
}

/// Turning merging off for good loses throughput on this scenario (so a policy that did
/// would fail here).
fn assert_always_off_loses_throughput(c: &ScenarioComparison) {
    let off = row(c, ALWAYS_OFF).worst_throughput_loss_percent;
    assert!(
        off > 5.0,
        "{ALWAYS_OFF} lost only {off:.2}%\n{}",
        figures(c)
    );
}

fn figures(c: &ScenarioComparison) -> String {
    let mut s = format!(
        "{} ({}), oracle levels {:?}:",
        c.scenario, c.profile, c.oracle_levels
    );
    for r in &c.rows {
        s += &format!(
            "\n  {:18} saved {:7.2}% of-oracle {:6.1}% loss {:6.2}% changes {:3} settled/h {:2} reaction {:?}",
            r.policy,
            r.cpu_saved_percent,
            r.of_oracle_percent,
            r.worst_throughput_loss_percent,
            r.level_changes,
            r.settled_changes_per_hour_max,
            r.reaction_ms
        );
    }
    s
}

/// The targets where they can fail: the scenario priced in the 2008 figures. Returns the
/// comparison for the scenario's own further checks.
fn assert_targets(name: &str) -> ScenarioComparison {
    assert_targets_met(name, DOCUMENTED)
}

/// [`assert_targets`] for a scenario where adaptive misses a documented target: it must
/// still miss it (or the pin is stale), and meet `met`.
fn assert_known_miss(name: &str, met: Targets) -> ScenarioComparison {
    let c = assert_targets_met(name, met);
    let window_ms = Config::default().window_ms();
    assert!(
        !misses(&c, "adaptive", window_ms, DOCUMENTED).is_empty(),
        "{name}: adaptive now meets the documented targets: drop its pin ({met:?})\n{}",
        figures(&c)
    );
    c
}

fn assert_targets_met(name: &str, t: Targets) -> ScenarioComparison {
    let cfg = Config::default();
    let window_ms = cfg.window_ms();
    let c = compare(&scenario(name, profile::LKML_2008_NAME), &cfg).unwrap();
    eprintln!("{}", figures(&c));
    assert_adaptive_within_the_margin(&c);
    // The oracle itself stays within the throughput it is allowed to lose.
    assert!(
        row(&c, "oracle").worst_throughput_loss_percent <= MAX_LOSS_PERCENT,
        "{}",
        figures(&c)
    );
    // The test can fail: doing nothing misses a target here, or (where the oracle keeps
    // merging on and doing nothing is right) turning merging off does.
    let oracle_moves = c.oracle_levels.iter().any(|l| *l != Level::L0);
    let counter = if oracle_moves { DO_NOTHING } else { ALWAYS_OFF };
    assert!(
        !misses(&c, counter, window_ms, DOCUMENTED).is_empty(),
        "{name}: {counter} meets every target, so these targets cannot fail here\n{}",
        figures(&c)
    );
    let missed = misses(&c, "adaptive", window_ms, t);
    assert!(
        missed.is_empty(),
        "{name} (lkml-2008): adaptive misses the target(s) of docs/testing.md it is held to:\n  {}\n{}",
        missed.join("\n  "),
        figures(&c)
    );
    c
}

/// In the measured profile nothing is worth it: adaptive writes nothing and loses nothing.
/// Static nomerges=2 (one write) must fail the same check, so that it can fail.
fn assert_measured(name: &str) -> ScenarioComparison {
    let cfg = Config::default();
    let c = compare(&scenario(name, profile::MEASURED_NAME), &cfg).unwrap();
    eprintln!("{}", figures(&c));
    let writes_nothing = |policy: &str| {
        let r = row(&c, policy);
        r.level_changes == 0 && r.nomerges_writes == 0 && r.worst_throughput_loss_percent <= 0.0
    };
    assert!(!writes_nothing(ALWAYS_OFF), "{}", figures(&c));
    assert!(
        writes_nothing("adaptive"),
        "{name} (measured): adaptive wrote where nothing is worth it\n{}",
        figures(&c)
    );
    c
}

#[test]
fn oltp_steady_targets() {
    assert_targets("oltp_steady");
}

#[test]
fn oltp_steady_measured() {
    let c = assert_measured("oltp_steady");
    let a = c.runs.iter().find(|r| r.policy == "adaptive").unwrap();
    let said: Vec<_> = a
        .decisions
        .iter()
        .filter(|d| d.kind == DecisionKind::NotWorthIt)
        .collect();
    // Once while the live price is unknown, once more when it is known (the simulated
    // merge path at 5,000 bios/s needs a few sampling spans for 10 samples): never more.
    assert!(
        (1..=2).contains(&said.len()),
        "said once, or once unknown and once known, for the one random workload: {said:?}"
    );
    assert!(said[0].changes.is_empty());
}

#[test]
fn backup_targets() {
    let c = assert_targets("backup");
    // The admin who "knows" the load is random loses throughput on a backup.
    assert_always_off_loses_throughput(&c);
}

#[test]
fn backup_measured() {
    assert_measured("backup");
}

#[test]
fn oltp_backup_every_minute_targets() {
    let c = assert_targets("oltp_backup_every_minute");
    // Static nomerges=2 never merges: the backups lose throughput. Once a sequential phase
    // follows a random one, the naive toggle cannot see the merges it disabled.
    assert_always_off_loses_throughput(&c);
    assert!(row(&c, "naive-toggle").worst_throughput_loss_percent > 5.0);
    assert!(row(&c, "adaptive").level_changes > 0);
}

#[test]
fn oltp_backup_every_minute_measured() {
    assert_measured("oltp_backup_every_minute");
}

#[test]
fn mix_noise_targets() {
    assert_targets("mix_noise");
}

#[test]
fn mix_noise_measured() {
    assert_measured("mix_noise");
}

#[test]
fn bursty_spikes_targets() {
    assert_targets("bursty_spikes");
}

#[test]
fn bursty_spikes_measured() {
    assert_measured("bursty_spikes");
}

#[test]
fn dm_stripe_oltp_targets() {
    assert_targets("dm_stripe_oltp");
}

#[test]
fn dm_stripe_oltp_measured() {
    assert_measured("dm_stripe_oltp");
}

#[test]
fn readers_vs_writer_targets() {
    let c = assert_targets("readers_vs_writer");
    assert_always_off_loses_throughput(&c);
}

#[test]
fn readers_vs_writer_measured() {
    assert_measured("readers_vs_writer");
}

#[test]
fn same_signature_targets() {
    // Random 4 KiB writes, then at the same rate, size and read share sequential batched
    // ones: merging goes off first, then must come back.
    // The random phase: not one bio merged at L0, so straight to L3 after three windows
    // (the walk down the rungs had cost 85% of the oracle; now 93%).
    let c = assert_targets("same_signature");
    let a = row(&c, "adaptive");
    assert!(a.level_changes >= 2, "off, then back on: {a:?}");
    assert_eq!(a.reaction_ms.len(), 1, "{:?}", c.oracle_levels);
}

#[test]
fn same_signature_measured() {
    assert_measured("same_signature");
}

#[test]
fn oltp_scans_bursts_targets() {
    // A database's random I/O all along, with long batched scans and short checkpoint
    // bursts beside it: the oracle moves at every phase change (L3 for the database alone,
    // L2 with a scan or a burst beside it, where plug merges still catch the batched
    // stream), and adaptive must follow without losing the scans' or the bursts' merges.
    let c = assert_known_miss("oltp_scans_bursts", OLTP_SCANS_BURSTS_MET);
    assert_always_off_loses_throughput(&c);
    assert!(row(&c, "adaptive").level_changes > 0);
}

#[test]
fn oltp_scans_bursts_measured() {
    assert_measured("oltp_scans_bursts");
}

#[test]
fn without_the_l3_watch_the_spikes_cost_throughput() {
    // What meets the target on short sequential spikes is the watch at L3: read the
    // counters once a second only, and each spike runs a whole second unmerged.
    let mut cfg = Config::default();
    cfg.policy.l3_watch_interval_ms = 0;
    let sc = scenario("bursty_spikes", profile::LKML_2008_NAME);
    let c = compare(&sc, &cfg).unwrap();
    let a = row(&c, "adaptive");
    assert!(
        a.worst_throughput_loss_percent > MAX_LOSS_PERCENT,
        "without the watch adaptive lost only {:.2}%",
        a.worst_throughput_loss_percent
    );
}

/// oltp_scans64_bursts, a database's mixed random reads and writes all along with 64 KiB
/// scans and checkpoint bursts beside it, holds adaptive to the loss side: no phase loses
/// more than the margin, and merging is back within one window wherever the oracle turns
/// it on. (The saving side is not held here: in the simulator the bio tap at L3 calls the
/// 64 KiB scan at queue depth 8 contiguous, 46% of its sample, which merging at L0 does
/// not bear out, 0.0%; merging then stays on through each hold-off, the safe side, and
/// adaptive captures about half of the oracle's saving.)
#[test]
fn oltp_scans64_bursts_targets() {
    let cfg = Config::default();
    let window_ms = cfg.window_ms();
    let c = compare(
        &scenario("oltp_scans64_bursts", profile::LKML_2008_NAME),
        &cfg,
    )
    .unwrap();
    eprintln!("{}", figures(&c));
    let a = assert_adaptive_within_the_margin(&c);
    let moves = oracle_moves(&c);
    assert_eq!(moves.len(), a.reaction_ms.len());
    for ((from, to), reacted) in moves.iter().zip(&a.reaction_ms) {
        if to < from {
            let limit = REACTION_TOWARD_MERGING_WINDOWS * window_ms;
            assert!(
                reacted.is_some_and(|ms| ms <= limit),
                "{from} -> {to}: {reacted:?}\n{}",
                figures(&c)
            );
        }
    }
    // The test can fail: turning merging off for good loses the scans' throughput.
    assert_always_off_loses_throughput(&c);
}

#[test]
fn oltp_scans64_bursts_measured() {
    assert_measured("oltp_scans64_bursts");
}
