//! What the policy decides, as data: the merge ladder's [`Level`]s and the [`Decision`]s
//! the tuners take, each a [`DecisionKind`] and a list of typed [`Change`]s of
//! [`Tunable`]s. Exporters, logs, plots and status render them; nothing parses a string
//! mergetune built itself.

use mergetune_kernel::tunable::Tunable;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A rung of the merge ladder.
/// Written as `"L0"` .. `"L3"` (cost profiles name levels that way).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Level {
    /// nomerges=0, front_merges=1: every merge (the kernel default).
    #[default]
    L0,
    /// nomerges=0, front_merges=0: all but the rbtree front-merge lookup (mq-deadline).
    L1,
    /// nomerges=1: plug and one-hit merges only, still counted.
    L2,
    /// nomerges=2: no merges; the counters are blind to what merging would find.
    L3,
}

impl Level {
    pub const ALL: [Level; 4] = [Level::L0, Level::L1, Level::L2, Level::L3];
    /// The deepest rung.
    pub const DEEPEST: Level = Level::L3;

    pub fn index(self) -> u8 {
        self as u8
    }

    pub fn from_index(i: u8) -> Option<Level> {
        Level::ALL.get(usize::from(i)).copied()
    }

    /// The `queue/nomerges` value this level stands for.
    pub fn nomerges(self) -> u8 {
        match self {
            Level::L0 | Level::L1 => 0,
            Level::L2 => 1,
            Level::L3 => 2,
        }
    }

    /// mq-deadline's `iosched/front_merges` at this level.
    pub fn front_merges(self) -> u8 {
        match self {
            Level::L1 => 0,
            _ => 1,
        }
    }

    /// The level a queue's tunables stand for: `queue/nomerges`, and whether mq-deadline's
    /// `iosched/front_merges` is 0 (which matters only at nomerges=0).
    pub fn of_tunables(nomerges: u8, front_merges_off: bool) -> Level {
        match nomerges {
            0 if front_merges_off => Level::L1,
            0 => Level::L0,
            1 => Level::L2,
            _ => Level::L3,
        }
    }

    /// The next rung down, if any.
    pub fn below(self) -> Option<Level> {
        Level::from_index(self.index() + 1)
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "L{}", self.index())
    }
}

/// Serde for a [`Level`] written as its index, `0` .. `3`: the `/status` document and the
/// lab's JSON reports carry the number their readers (and the `device_ladder_level`
/// metric) use, while the code holds the enum. `#[serde(with = "level_index")]`.
pub mod level_index {
    use super::Level;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(level: &Level, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(level.index())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Level, D::Error> {
        let i = u8::deserialize(d)?;
        Level::from_index(i)
            .ok_or_else(|| D::Error::custom(format!("ladder level {i} is not 0, 1, 2 or 3")))
    }

    /// The same for an `Option<Level>` (`null` when absent).
    pub mod option {
        use super::Level;
        use serde::{Deserialize, Deserializer, Serializer, de::Error};

        pub fn serialize<S: Serializer>(level: &Option<Level>, s: S) -> Result<S::Ok, S::Error> {
            match level {
                Some(l) => s.serialize_some(&l.index()),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Level>, D::Error> {
            match Option::<u8>::deserialize(d)? {
                None => Ok(None),
                Some(i) => Level::from_index(i).map(Some).ok_or_else(|| {
                    D::Error::custom(format!("ladder level {i} is not 0, 1, 2 or 3"))
                }),
            }
        }
    }

    /// The same for a list of levels (`[0, 3, 0]`).
    pub mod vec {
        use super::Level;
        use serde::{Serializer, ser::SerializeSeq};

        pub fn serialize<S: Serializer>(levels: &[Level], s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(levels.len()))?;
            for l in levels {
                seq.serialize_element(&l.index())?;
            }
            seq.end()
        }
    }
}

/// What a decision is, for counting and filtering. The merge ladder, the slice tuner and
/// the exit path each have their own kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// Ladder: one step down (to L1 or L2).
    StepDown,
    /// Ladder: the last step, to L3.
    Disable,
    /// Ladder: back to L0 because merges are visible again.
    Enable,
    /// Ladder: L3 -> L0 to measure.
    Probe,
    /// Ladder: the probe found merges, so L0 stays (no write).
    ProbeSucceeded,
    /// Ladder: the probe found no merges: back to L3.
    ProbeFailed,
    /// Ladder: the probe saw only idle windows and measured nothing: it ends at L0, the safe
    /// level (no write).
    ProbeInconclusive,
    /// Ladder: L0/L1 -> L2 to see whether L2 keeps the merges.
    Trial,
    TrialSucceeded,
    TrialFailed,
    /// Ladder: merging finds nothing, but no level below saves measurably on this kernel
    /// (the cost profile): the device stays, nothing is written.
    NotWorthIt,
    /// Ladder: merging finds nothing, but no level below can be priced yet (the saving is
    /// unknown, not small): the device stays with merging on, nothing is written.
    SavingUnknown,
    /// Slices: one step favouring starving reads.
    FavourReads,
    /// Slices: a step undone because it did not pay.
    Undo,
    /// Slices: a step undone because the mix went away.
    Relax,
    /// A baseline controller pinning a level (`static:N`).
    Pin,
    /// An original value put back (exit, hand-off, recovery).
    Restore,
}

impl DecisionKind {
    pub const ALL: [DecisionKind; 17] = [
        DecisionKind::StepDown,
        DecisionKind::Disable,
        DecisionKind::Enable,
        DecisionKind::Probe,
        DecisionKind::ProbeSucceeded,
        DecisionKind::ProbeFailed,
        DecisionKind::ProbeInconclusive,
        DecisionKind::Trial,
        DecisionKind::TrialSucceeded,
        DecisionKind::TrialFailed,
        DecisionKind::NotWorthIt,
        DecisionKind::SavingUnknown,
        DecisionKind::FavourReads,
        DecisionKind::Undo,
        DecisionKind::Relax,
        DecisionKind::Pin,
        DecisionKind::Restore,
    ];

    /// A move between merge-ladder levels (what `max_changes_per_hour` caps), when it
    /// writes: not the slice tuner's steps, a baseline's pin, or a restore.
    pub fn moves_the_ladder(self) -> bool {
        matches!(
            self,
            DecisionKind::StepDown
                | DecisionKind::Disable
                | DecisionKind::Enable
                | DecisionKind::Probe
                | DecisionKind::ProbeFailed
                | DecisionKind::Trial
                | DecisionKind::TrialFailed
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::StepDown => "step_down",
            DecisionKind::Disable => "disable",
            DecisionKind::Enable => "enable",
            DecisionKind::Probe => "probe",
            DecisionKind::ProbeSucceeded => "probe_succeeded",
            DecisionKind::ProbeFailed => "probe_failed",
            DecisionKind::ProbeInconclusive => "probe_inconclusive",
            DecisionKind::Trial => "trial",
            DecisionKind::TrialSucceeded => "trial_succeeded",
            DecisionKind::TrialFailed => "trial_failed",
            DecisionKind::NotWorthIt => "not_worth_it",
            DecisionKind::SavingUnknown => "saving_unknown",
            DecisionKind::FavourReads => "favour_reads",
            DecisionKind::Undo => "undo",
            DecisionKind::Relax => "relax",
            DecisionKind::Pin => "pin",
            DecisionKind::Restore => "restore",
        }
    }
}

impl fmt::Display for DecisionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One tunable written (or that would be written, in dry-run), with the values as the
/// kernel prints them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub tunable: Tunable,
    pub from: String,
    pub to: String,
}

/// What became of a decision's writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", content = "error", rename_all = "snake_case")]
pub enum Applied {
    /// Every change was written.
    Yes,
    /// The decision writes nothing (a `not_worth_it` or `saving_unknown`, a probe that ends where it started,
    /// a trial that stays): said as such, so that no one reads it as a write.
    NothingToWrite,
    /// Dry-run: nothing written.
    DryRun,
    /// A write failed (the error); the level or value is unchanged.
    Failed(String),
    /// Nothing was written for another reason (a restore that found the value already
    /// original, or someone else's).
    No,
}

/// One decision of a tuner (or of the exit path), with its reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Time of the tick that decided, in ms since the controller started.
    pub at_ms: u64,
    pub device: String,
    pub kind: DecisionKind,
    /// The writes, `queue/nomerges` first; empty when the decision writes nothing (a
    /// probe that ends where it started, a trial that stays).
    pub changes: Vec<Change>,
    /// A human reason with its numbers.
    pub reason: String,
    pub applied: Applied,
}

impl Decision {
    /// The changes as `tunable from -> to`, for a label or a line (never parsed back).
    pub fn render_changes(changes: &[Change], sep: &str, arrow: &str) -> String {
        if changes.is_empty() {
            return "-".into();
        }
        changes
            .iter()
            .map(|c| format!("{} {}{arrow}{}", c.tunable, c.from, c.to))
            .collect::<Vec<_>>()
            .join(sep)
    }

    /// Whether the writes happened.
    pub fn was_applied(&self) -> bool {
        self.applied == Applied::Yes
    }

    /// The change of `t`, if this decision writes it.
    pub fn change_of(&self, t: Tunable) -> Option<&Change> {
        self.changes.iter().find(|c| c.tunable == t)
    }

    /// `queue/nomerges 0 -> 2` or `queue/nomerges 0 -> 0, queue/iosched/front_merges 1 -> 0`,
    /// or `-` without a change.
    pub fn changes_text(&self) -> String {
        Decision::render_changes(&self.changes, ", ", " -> ")
    }
}

impl fmt::Display for Decision {
    /// `sda queue/nomerges 0 -> 2 [disable]: reason`, with `, dry-run` or `, failed: ...`
    /// in the brackets when nothing was written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let note = match &self.applied {
            Applied::Yes => String::new(),
            Applied::DryRun => ", dry-run".into(),
            Applied::Failed(e) => format!(", failed: {e}"),
            Applied::No => ", not applied".into(),
            Applied::NothingToWrite => ", nothing to write".into(),
        };
        write!(
            f,
            "{} {} [{}{}]: {}",
            self.device,
            self.changes_text(),
            self.kind,
            note,
            self.reason
        )
    }
}

/// "1 window", "3 busy windows": a count as a reason says it (`noun` in the singular,
/// taking an s).
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_map_to_nomerges() {
        assert_eq!(
            Level::ALL.map(Level::nomerges),
            [0, 0, 1, 2],
            "L0 and L1 differ only in front_merges"
        );
        assert_eq!(Level::L2.below(), Some(Level::L3));
        assert_eq!(Level::L3.below(), None);
    }

    #[test]
    fn tunables_read_back_as_the_level_that_wrote_them() {
        for level in Level::ALL {
            let front_off = level.front_merges() == 0;
            assert_eq!(Level::of_tunables(level.nomerges(), front_off), level);
        }
        // front_merges matters only while nomerges is 0.
        assert_eq!(Level::of_tunables(2, true), Level::L3);
        assert_eq!(Level::of_tunables(1, false), Level::L2);
    }

    #[test]
    fn one_window_is_said_in_the_singular() {
        assert_eq!(count(1, "window"), "1 window");
        assert_eq!(count(0, "window"), "0 windows");
        assert_eq!(count(3, "busy window"), "3 busy windows");
    }

    #[test]
    fn json_carries_a_level_as_its_index_and_refuses_other_numbers() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Doc {
            #[serde(with = "level_index")]
            level: Level,
            #[serde(with = "level_index::option")]
            maybe: Option<Level>,
            #[serde(serialize_with = "level_index::vec::serialize", skip_deserializing)]
            per_phase: Vec<Level>,
        }
        let doc = Doc {
            level: Level::L3,
            maybe: None,
            per_phase: vec![Level::L0, Level::L2],
        };
        let text = serde_json::to_string(&doc).unwrap();
        assert_eq!(text, r#"{"level":3,"maybe":null,"per_phase":[0,2]}"#);
        let back: Doc = serde_json::from_str(r#"{"level":1,"maybe":2}"#).unwrap();
        assert_eq!((back.level, back.maybe), (Level::L1, Some(Level::L2)));
        let err = serde_json::from_str::<Doc>(r#"{"level":4,"maybe":null}"#).unwrap_err();
        assert!(err.to_string().contains("ladder level 4"), "{err}");
        let err = serde_json::from_str::<Doc>(r#"{"level":0,"maybe":9}"#).unwrap_err();
        assert!(err.to_string().contains("ladder level 9"), "{err}");
    }
}
