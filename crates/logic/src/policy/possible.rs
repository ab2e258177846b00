//! The decisions the ladder can take on a managed device, enumerated ahead of time: each
//! kind with the tunable values it would write. The exporter starts each of these series
//! at zero when the device is first managed, so `increase()` sees the first decision.
//!
//! Derived from the same pieces the policy and the daemon use: the levels a device has
//! ([`Caps::has`], [`deepest_allowed`]), each level's values ([`tunables`]) and the moves the
//! modes make (merging: step down, disable, enable, trial; at L3: enable, probe; probing:
//! failed back to L3; trial: failed back to where it started). A write leaves out a
//! tunable that already holds its value, as the daemon's does.

use super::{Caps, deepest_allowed, tunables};
use crate::config::PolicyConfig;
use crate::decision::{Change, DecisionKind, Level};
use mergetune_kernel::tunable::Tunable;

/// One decision the daemon can take on the device: its kind and what it writes (empty for
/// an outcome that stays where it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PossibleDecision {
    pub kind: DecisionKind,
    pub changes: Vec<Change>,
}

/// Outcomes that settle without a write (see `settle` in the policy).
const SETTLING: [DecisionKind; 5] = [
    DecisionKind::ProbeSucceeded,
    DecisionKind::ProbeInconclusive,
    DecisionKind::ProbeFailed,
    DecisionKind::TrialSucceeded,
    DecisionKind::NotWorthIt,
];

/// Every decision of the ladder a device with `caps` can take under `cfg`, each once. The
/// levels are those the config allows (a superset where the device cannot see at
/// L3: a zero that never moves costs nothing, a missing zero hides the first step).
pub fn possible_decisions(caps: Caps, cfg: &PolicyConfig) -> Vec<PossibleDecision> {
    let mut out: Vec<PossibleDecision> = Vec::new();
    for kind in SETTLING {
        push(&mut out, kind, Vec::new());
    }
    for (kind, from, to) in moves(caps, cfg) {
        for state in kernel_states(from, caps) {
            push(&mut out, kind, writes(&state, to, caps));
            if kind == DecisionKind::Trial {
                // A failed trial goes back where it started, from L2 as the trial wrote it.
                let at_l2 = at_level(state, to, caps);
                push(
                    &mut out,
                    DecisionKind::TrialFailed,
                    writes(&at_l2, from, caps),
                );
            }
        }
    }
    out
}

fn push(out: &mut Vec<PossibleDecision>, kind: DecisionKind, changes: Vec<Change>) {
    let d = PossibleDecision { kind, changes };
    if !out.contains(&d) {
        out.push(d);
    }
}

/// The level moves of each writing kind on this device.
fn moves(caps: Caps, cfg: &PolicyConfig) -> Vec<(DecisionKind, Level, Level)> {
    let deepest = deepest_allowed(cfg);
    let levels: Vec<Level> = Level::ALL
        .into_iter()
        .filter(|&l| caps.has(l) && l <= deepest)
        .collect();
    let has = |l: Level| levels.contains(&l);
    let merging: Vec<Level> = levels.iter().copied().filter(|&l| l < Level::L3).collect();
    let mut v = Vec::new();
    for &l in &merging {
        // One rung down; the rung to L3 is a disable.
        if let Some(&next) = levels.iter().find(|&&n| n > l) {
            let kind = if next == Level::L3 {
                DecisionKind::Disable
            } else {
                DecisionKind::StepDown
            };
            v.push((kind, l, next));
        }
        if has(Level::L3) {
            v.push((DecisionKind::Disable, l, Level::L3));
        }
        if l > Level::L0 {
            v.push((DecisionKind::Enable, l, Level::L0));
        }
        if has(Level::L2) && l < Level::L2 {
            v.push((DecisionKind::Trial, l, Level::L2));
        }
    }
    if has(Level::L3) {
        v.push((DecisionKind::Enable, Level::L3, Level::L0));
        if has(Level::L2) {
            v.push((DecisionKind::Enable, Level::L3, Level::L2));
        }
        v.push((DecisionKind::Probe, Level::L3, Level::L0));
        v.push((DecisionKind::ProbeFailed, Level::L0, Level::L3));
    }
    v
}

/// The tunables' values at `level`. Below L1 front_merges is not written, so it holds what
/// the level above left: either value where the device has it.
fn kernel_states(level: Level, caps: Caps) -> Vec<Vec<(Tunable, &'static str)>> {
    let base = tunables(level, caps);
    let written = |t: Tunable| base.iter().any(|&(b, _)| b == t);
    if caps.front_merges && !written(Tunable::FrontMerges) {
        ["0", "1"]
            .into_iter()
            .map(|v| {
                let mut s = base.clone();
                s.push((Tunable::FrontMerges, v));
                s
            })
            .collect()
    } else {
        vec![base]
    }
}

/// `state` after the move to `to`: the level's values written over it.
fn at_level(
    mut state: Vec<(Tunable, &'static str)>,
    to: Level,
    caps: Caps,
) -> Vec<(Tunable, &'static str)> {
    for (t, value) in tunables(to, caps) {
        if let Some(held) = state.iter_mut().find(|(s, _)| *s == t) {
            held.1 = value;
        }
    }
    state
}

/// What moving from `state` to `to` writes: each of the level's values the tunable does
/// not already hold, in the level's order.
fn writes(state: &[(Tunable, &str)], to: Level, caps: Caps) -> Vec<Change> {
    tunables(to, caps)
        .into_iter()
        .filter_map(|(t, value)| {
            let from = state.iter().find(|&&(s, _)| s == t).map(|&(_, v)| v)?;
            (from != value).then(|| Change {
                tunable: t,
                from: from.to_string(),
                to: value.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(ds: &[PossibleDecision], kind: DecisionKind, changes: &[(Tunable, &str, &str)]) -> bool {
        let want: Vec<Change> = changes
            .iter()
            .map(|&(tunable, from, to)| Change {
                tunable,
                from: from.into(),
                to: to.into(),
            })
            .collect();
        ds.contains(&PossibleDecision {
            kind,
            changes: want,
        })
    }

    #[test]
    fn a_bare_queue_only_disables_probes_and_enables_between_l0_and_l3() {
        let ds = possible_decisions(Caps::BARE, &PolicyConfig::default());
        let n = Tunable::Nomerges;
        assert!(has(&ds, DecisionKind::Disable, &[(n, "0", "2")]));
        assert!(has(&ds, DecisionKind::Probe, &[(n, "2", "0")]));
        assert!(has(&ds, DecisionKind::Enable, &[(n, "2", "0")]));
        assert!(has(&ds, DecisionKind::ProbeFailed, &[(n, "0", "2")]));
        assert!(has(&ds, DecisionKind::NotWorthIt, &[]));
        assert!(
            !ds.iter().any(|d| d.kind == DecisionKind::StepDown
                || d.kind == DecisionKind::Trial
                || d.changes.iter().any(|c| c.to == "1")),
            "no L1 or L2 on a bare queue: {ds:?}"
        );
    }

    #[test]
    fn mq_deadline_writes_front_merges_only_where_it_differs() {
        let ds = possible_decisions(Caps::FULL, &PolicyConfig::default());
        let (n, f) = (Tunable::Nomerges, Tunable::FrontMerges);
        // L0 -> L1: front_merges alone.
        assert!(has(&ds, DecisionKind::StepDown, &[(f, "1", "0")]));
        // L1 -> L2: nomerges alone, front_merges stays 0.
        assert!(has(&ds, DecisionKind::StepDown, &[(n, "0", "1")]));
        assert!(has(&ds, DecisionKind::Disable, &[(n, "1", "2")]));
        // Back from L3 to L0: front_merges 1 again if L1 had it off.
        assert!(has(
            &ds,
            DecisionKind::Enable,
            &[(n, "2", "0"), (f, "0", "1")]
        ));
        assert!(has(&ds, DecisionKind::Probe, &[(n, "2", "0")]));
        assert!(has(&ds, DecisionKind::Trial, &[(n, "0", "1")]));
        // A failed trial goes back to where it started: front_merges is already there.
        assert!(has(&ds, DecisionKind::TrialFailed, &[(n, "1", "0")]));
        assert!(
            !ds.iter()
                .any(|d| d.kind == DecisionKind::TrialFailed && d.changes.len() > 1),
            "{ds:?}"
        );
        // Nothing writes what is already there.
        assert!(ds.iter().all(|d| d.changes.iter().all(|c| c.from != c.to)));
        let unique = ds
            .iter()
            .filter(|d| ds.iter().filter(|e| e == d).count() == 1);
        assert_eq!(unique.count(), ds.len(), "each decision once");
    }

    #[test]
    fn l2_as_the_deepest_allowed_never_writes_nomerges_2() {
        let cfg = PolicyConfig {
            disabled_nomerges: 1,
            ..PolicyConfig::default()
        };
        let ds = possible_decisions(Caps::FULL, &cfg);
        assert!(ds.iter().all(|d| d.changes.iter().all(|c| c.to != "2")));
        assert!(!ds.iter().any(|d| d.kind == DecisionKind::Probe));
        assert!(has(
            &ds,
            DecisionKind::StepDown,
            &[(Tunable::Nomerges, "0", "1")]
        ));
    }
}
