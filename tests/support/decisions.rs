//! Decisions as the daemon returns them, built by tests that feed them to the metrics or
//! return them from a controller of their own. Included with
//! `#[path = "../support/decisions.rs"] mod decisions;`.

#![allow(dead_code)]

use mergetune_kernel::tunable::Tunable;
use mergetune_logic::decision::{Applied, Change, Decision, DecisionKind};

/// The one change of a decision that moves nomerges from `from` to `to`.
pub fn nomerges(from: &str, to: &str) -> Vec<Change> {
    vec![Change {
        tunable: Tunable::Nomerges,
        from: from.into(),
        to: to.into(),
    }]
}

/// A decision of `kind` on `device` at `at_ms`, applied, with `changes`.
pub fn applied(at_ms: u64, device: &str, kind: DecisionKind, changes: Vec<Change>) -> Decision {
    Decision {
        at_ms,
        device: device.into(),
        kind,
        changes,
        reason: "test".into(),
        applied: Applied::Yes,
    }
}
