//! The label sets of the metric families, and the bounded label values of a decision: a
//! label never carries an unbounded value (a value a tunable cannot hold is `other`).

use mergetune_logic::decision::Change;
use prometheus_client::encoding::EncodeLabelSet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DeviceLabels {
    pub(super) device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ManagementLabels {
    pub(super) device: String,
    pub(super) management: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DirectionLabels {
    pub(super) device: String,
    pub(super) direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DecisionLabels {
    pub(super) device: String,
    pub(super) kind: String,
    pub(super) attr: String,
    pub(super) from: String,
    pub(super) to: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ProbeLabels {
    pub(super) device: String,
    pub(super) outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabels {
    pub(super) result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct BuildLabels {
    pub(super) version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ProfileLabels {
    pub(super) profile: String,
    pub(super) origin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PricingLabels {
    pub(super) device: String,
    pub(super) basis: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SavingLabels {
    pub(super) device: String,
    pub(super) level: String,
    pub(super) bound: String,
}

/// How a device's saving is known (the `basis` label).
pub(super) const PRICING_BASES: [&str; 4] = ["live", "profile", "unknown", "unpriced"];

/// The management states a device can be in (the `management` label).
pub const MANAGEMENT_STATES: [&str; 4] = ["managed", "excluded", "unsupported", "admin-owned"];
pub(super) const PROBE_OUTCOMES: [&str; 3] = ["started", "succeeded", "failed"];

/// The values a decision wrote (`2`, or `0+1` when it wrote nomerges and front_merges),
/// as a bounded label value: values are the kernel's, so one that is not a value the
/// tunable can hold is `other`; no change is `none`.
pub(super) fn value_label(changes: &[Change], pick: impl Fn(&Change) -> &String) -> String {
    if changes.is_empty() {
        return "none".to_string();
    }
    if changes.iter().all(|c| c.tunable.accepts(pick(c))) {
        changes
            .iter()
            .map(|c| pick(c).as_str())
            .collect::<Vec<_>>()
            .join("+")
    } else {
        "other".to_string()
    }
}

/// The tunable(s) a decision wrote, by file name: `nomerges`, `nomerges+front_merges`,
/// `none` without a write.
pub(super) fn attr_label(changes: &[Change]) -> String {
    if changes.is_empty() {
        return "none".to_string();
    }
    changes
        .iter()
        .map(|c| c.tunable.file_name())
        .collect::<Vec<_>>()
        .join("+")
}

pub(super) fn dl(device: &str) -> DeviceLabels {
    DeviceLabels {
        device: device.to_string(),
    }
}
