//! The summary of one policy's run against the kernel default and the oracle: CPU saved,
//! the share of the oracle's saving, the worst phase's throughput and p99, level changes
//! (all, per hour, and after settling), and the time to react after each phase change.

use super::figures::{PhaseFigures, PolicyRun, PolicySummary};
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::decision::Decision;
use mergetune_logic::decision::{DecisionKind, Level};

/// An oracle saving below this (percent) is reported as none: "of oracle" is then 100 for
/// a policy that loses nothing, 0 for one that loses CPU.
const NOTHING_TO_SAVE_PERCENT: f64 = 0.01;

/// A write that moved a level: outcomes that end where they are (a probe that stays at L0,
/// a trial that stays at L2) wrote nothing.
fn is_level_change(d: &Decision) -> bool {
    d.was_applied() && d.kind != DecisionKind::Restore && d.changes.iter().any(|c| c.from != c.to)
}

/// The level changes made after the policy had settled at the oracle's level of their
/// phase: the churn on a steady workload, convergence after a phase change excluded.
/// Returns the most of them one device made within any rolling hour.
fn settled_changes_max_per_hour(
    decisions: &[Decision],
    phases: &[PhaseFigures],
    oracle_levels: &[Level],
) -> usize {
    let devices: std::collections::BTreeSet<&str> = decisions
        .iter()
        .filter(|d| is_level_change(d))
        .map(|d| d.device.as_str())
        .collect();
    devices
        .into_iter()
        .map(|device| {
            let mine: Vec<Decision> = decisions
                .iter()
                .filter(|d| d.device == device)
                .cloned()
                .collect();
            settled_changes_of_one_device(&mine, phases, oracle_levels)
        })
        .max()
        .unwrap_or(0)
}

fn settled_changes_of_one_device(
    decisions: &[Decision],
    phases: &[PhaseFigures],
    oracle_levels: &[Level],
) -> usize {
    let mut changes: Vec<u64> = decisions
        .iter()
        .filter(|d| is_level_change(d))
        .map(|d| d.at_ms)
        .collect();
    // Several attributes written at one tick are one change.
    changes.dedup();
    let mut settled: Vec<u64> = Vec::new();
    for (p, &target) in phases.iter().zip(oracle_levels) {
        let in_phase = |t: &&u64| **t >= p.start_ms && **t < p.end_ms;
        // A decision at tick t sets the level from t on; level_at(t + 1) sees it.
        let settled_from = if level_at(decisions, p.start_ms) == target {
            Some(p.start_ms)
        } else {
            changes
                .iter()
                .filter(in_phase)
                .find(|&&t| level_at(decisions, t + 1) == target)
                .map(|t| t + 1)
        };
        if let Some(from) = settled_from {
            settled.extend(changes.iter().filter(in_phase).filter(|&&t| t >= from));
        }
    }
    settled.sort_unstable();
    let mut most = 0;
    let mut first = 0;
    for (i, &t) in settled.iter().enumerate() {
        while t - settled[first] >= mergetune_logic::policy::HOUR_MS {
            first += 1;
        }
        most = most.max(i + 1 - first);
    }
    most
}

/// Counts changes of level: several attributes written at one tick are one change.
fn count_changes(decisions: &[Decision]) -> usize {
    let mut seen = std::collections::BTreeSet::new();
    decisions
        .iter()
        .filter(|d| is_level_change(d))
        .filter(|d| seen.insert((d.at_ms, d.device.clone())))
        .count()
}

/// One policy's run against the kernel default's (`base`) and the oracle's: the CPU saved,
/// what it cost in throughput and p99 at the worst phase, how often it changed level, and
/// how fast it followed the oracle at each phase change.
pub fn summarize(
    run: &PolicyRun,
    base: &PolicyRun,
    oracle_saved: f64,
    oracle_levels: &[Level],
    duration_s: f64,
) -> PolicySummary {
    let saved_in = |cycles: fn(&PhaseFigures) -> u64| {
        let total = |r: &PolicyRun| r.phases.iter().map(cycles).sum::<u64>() as f64;
        let base_cycles = total(base);
        if base_cycles > 0.0 {
            (base_cycles - total(run)) / base_cycles * 100.0
        } else {
            0.0
        }
    };
    let saved = saved_in(|p| p.cycles);
    let (worst_loss, worst_phase, worst_p99) = worst_phase(run, base);
    let reaction_ms = reactions(run, oracle_levels);
    PolicySummary {
        policy: run.policy.clone(),
        cpu_saved_percent: saved,
        cpu_saved_second_percent: saved_in(|p| p.cycles_second),
        nomerges_writes: run.nomerges_writes,
        frozen_ms: run.frozen_ms,
        // Where the oracle saves nothing (merging pays throughout), matching or beating it
        // is all there is to capture.
        of_oracle_percent: if oracle_saved.abs() < NOTHING_TO_SAVE_PERCENT {
            if saved >= -1e-9 { 100.0 } else { 0.0 }
        } else {
            saved / oracle_saved * 100.0
        },
        worst_throughput_loss_percent: worst_loss.max(0.0),
        worst_throughput_loss_phase: worst_phase,
        worst_p99_change_percent: if worst_p99 == f64::MIN {
            0.0
        } else {
            worst_p99
        },
        level_changes: count_changes(&run.decisions),
        level_changes_per_hour: count_changes(&run.decisions) as f64 / (duration_s / 3600.0),
        settled_changes_per_hour_max: settled_changes_max_per_hour(
            &run.decisions,
            &run.phases,
            oracle_levels,
        ),
        reaction_ms,
    }
}

/// The worst phase against the base run: its throughput loss (percent of the base's
/// bytes, MIN without phases), its name, and the worst p99 change (percent, MIN when no
/// phase has a base p99).
fn worst_phase(run: &PolicyRun, base: &PolicyRun) -> (f64, String, f64) {
    let mut worst_loss = f64::MIN;
    let mut worst_phase = String::new();
    let mut worst_p99 = f64::MIN;
    for (p, b) in run.phases.iter().zip(&base.phases) {
        let loss = if b.bytes > 0 {
            (b.bytes as f64 - p.bytes as f64) / b.bytes as f64 * 100.0
        } else {
            0.0
        };
        if loss > worst_loss {
            worst_loss = loss;
            worst_phase = p.name.clone();
        }
        if b.p99_us > 0.0 {
            worst_p99 = worst_p99.max((p.p99_us / b.p99_us - 1.0) * 100.0);
        }
    }
    (worst_loss, worst_phase, worst_p99)
}

/// Reaction: after each phase change where the oracle's level moves, the time to the first
/// level change in the same direction (0 when already there, None when it never came).
fn reactions(run: &PolicyRun, oracle_levels: &[Level]) -> Vec<Option<u64>> {
    let mut reaction_ms = Vec::new();
    for i in 1..run.phases.len() {
        let (prev, next) = (oracle_levels[i - 1], oracle_levels[i]);
        if prev == next {
            continue;
        }
        let start = run.phases[i].start_ms;
        let end = run.phases[i].end_ms;
        let down = next > prev;
        let at_start = level_at(&run.decisions, start);
        // Toward less merging: any step down counts as reacting; toward more merging: the
        // level must reach the oracle's (a probe from L3 to L0 does).
        let reached = |level: Level| {
            if down {
                level > at_start
            } else {
                level <= next
            }
        };
        let already = if down {
            at_start >= next
        } else {
            at_start <= next
        };
        let moved = run
            .decisions
            .iter()
            .filter(|d| d.was_applied() && d.at_ms >= start && d.at_ms < end)
            .map(|d| d.at_ms)
            .find(|&t| reached(level_at(&run.decisions, t + 1)))
            .map(|t| t - start);
        reaction_ms.push(if already { Some(0) } else { moved });
    }
    reaction_ms
}

/// The ladder level implied by the last nomerges/front_merges writes before `t_ms` (on the
/// first device that changed; the shipped scenarios move their devices together).
fn level_at(decisions: &[Decision], t_ms: u64) -> Level {
    let mut nomerges = 0u8;
    let mut front_off = false;
    for d in decisions
        .iter()
        .filter(|d| d.was_applied() && d.at_ms < t_ms)
    {
        for c in &d.changes {
            match c.tunable {
                // Values as the controllers wrote them: "0", "1", "2".
                Tunable::Nomerges => nomerges = c.to.parse().unwrap_or(nomerges),
                Tunable::FrontMerges => front_off = c.to == "0",
                _ => {}
            }
        }
    }
    Level::of_tunables(nomerges, front_off)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mergetune_logic::decision::{Applied, Change};

    fn change(at_ms: u64, device: &str, from: &str, to: &str) -> Decision {
        Decision {
            at_ms,
            device: device.into(),
            kind: DecisionKind::Pin,
            changes: vec![Change {
                tunable: Tunable::Nomerges,
                from: from.into(),
                to: to.into(),
            }],
            reason: String::new(),
            applied: Applied::Yes,
        }
    }

    fn phase(start_ms: u64, end_ms: u64) -> PhaseFigures {
        PhaseFigures {
            name: "p".into(),
            start_ms,
            end_ms,
            cycles: 0,
            cycles_second: 0,
            bytes: 0,
            p99_us: 0.0,
        }
    }

    #[test]
    fn settled_changes_leave_out_convergence_and_count_per_device_per_hour() {
        let h = mergetune_logic::policy::HOUR_MS;
        let phases = [phase(0, 3 * h)];
        // Convergence to L3 (not counted), then probes: out and back, each two changes.
        let mut d = vec![change(10_000, "sda", "0", "2")];
        for t in [h / 2, h / 2 + h, 2 * h + h / 2] {
            d.push(change(t, "sda", "2", "0"));
            d.push(change(t + 2000, "sda", "0", "2"));
        }
        assert_eq!(settled_changes_max_per_hour(&d, &phases, &[Level::L3]), 2);
        // Another device doing the same at other times does not add to sda's hour.
        let mut both = d.clone();
        for x in &d {
            let mut y = x.clone();
            y.device = "sdb".into();
            y.at_ms += 600_000;
            both.push(y);
        }
        both.sort_by_key(|x| x.at_ms);
        assert_eq!(
            settled_changes_max_per_hour(&both, &phases, &[Level::L3]),
            2
        );
        // Probes every 20 minutes: three in an hour, six changes.
        let mut fast = vec![change(10_000, "sda", "0", "2")];
        for k in 1..6u64 {
            fast.push(change(k * 1_200_000, "sda", "2", "0"));
            fast.push(change(k * 1_200_000 + 2000, "sda", "0", "2"));
        }
        assert_eq!(
            settled_changes_max_per_hour(&fast, &phases, &[Level::L3]),
            6
        );
        // A stay at a wrong level never settles: nothing counted.
        assert_eq!(
            settled_changes_max_per_hour(&fast, &phases, &[Level::L2]),
            0
        );
    }
}
