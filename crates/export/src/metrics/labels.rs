//! The label sets of the metric families, and the bounded label values of a decision: a
//! label never carries an unbounded value (a value a tunable cannot hold is `other`).
//!
//! Each label set is a struct, so a family cannot be given the wrong labels: [`Family`]
//! takes only its own set, and the set gives the registry its names and values in one order.

use mergetune_logic::decision::{Change, DecisionKind};
use prometheus::core::{MetricVec, MetricVecBuilder};
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::marker::PhantomData;
use std::sync::{Mutex, MutexGuard};

/// A label set: its names, and the values of one series in the same order.
pub(super) trait LabelSet {
    const NAMES: &'static [&'static str];
    fn values(&self) -> Vec<&str>;
}

/// A metric family (`V`, a `MetricVec` such as `IntGaugeVec`) whose series are keyed by
/// the label set `L`.
pub(super) struct Family<L, V> {
    vec: V,
    /// The series that exist, by a hash of their label values. The refresh removes the
    /// series of absent windows and savings every tick, most of which do not exist, and the
    /// crate's remove builds an error message for each of those (measured: about a fifth
    /// of `update`'s time in `cargo bench --bench metrics`). The crate keys its own series
    /// by a 64-bit hash of the values too.
    present: Mutex<HashSet<u64>>,
    labels: PhantomData<fn(&L)>,
}

impl<L: LabelSet, B: MetricVecBuilder> Family<L, MetricVec<B>> {
    pub(super) fn new(vec: MetricVec<B>) -> Self {
        Family {
            vec,
            present: Mutex::new(HashSet::new()),
            labels: PhantomData,
        }
    }

    fn key(values: &[&str]) -> u64 {
        let mut h = DefaultHasher::new();
        values.hash(&mut h);
        h.finish()
    }

    fn present(&self) -> MutexGuard<'_, HashSet<u64>> {
        self.present.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The series of `labels`, created (at zero) if it does not exist.
    pub(super) fn get_or_create(&self, labels: &L) -> B::M {
        let values = labels.values();
        self.present().insert(Self::key(&values));
        // The values come from the same impl as the names: the count always matches.
        self.vec.with_label_values(&values)
    }

    /// Drops the series of `labels`; nothing if there is none.
    pub(super) fn remove(&self, labels: &L) {
        let values = labels.values();
        if self.present().remove(&Self::key(&values)) {
            let _ = self.vec.remove_label_values(&values);
        }
    }

    /// Drops every series.
    pub(super) fn clear(&self) {
        self.present().clear();
        self.vec.reset();
    }
}

/// A label set, declared once: a struct of one `String` per label, whose field names are
/// the label names, in order.
macro_rules! label_set {
    ($name:ident { $($field:ident),+ }) => {
        #[derive(Clone, Debug, Hash, PartialEq, Eq)]
        pub(super) struct $name {
            $(pub(super) $field: String),+
        }

        impl LabelSet for $name {
            const NAMES: &'static [&'static str] = &[$(stringify!($field)),+];
            fn values(&self) -> Vec<&str> {
                vec![$(self.$field.as_str()),+]
            }
        }
    };
}

label_set!(DeviceLabels { device });
label_set!(ManagementLabels { device, management });
label_set!(DirectionLabels { device, direction });
label_set!(DecisionLabels {
    device,
    kind,
    attr,
    from,
    to
});
label_set!(ProbeLabels { device, outcome });
label_set!(ResultLabels { result });
label_set!(BuildLabels { version });
label_set!(ProfileLabels { profile, origin });
label_set!(PricingLabels { device, basis });
label_set!(UnknownPriceLabels { device, why });
label_set!(SavingLabels {
    device,
    level,
    bound
});

/// How a device's saving is known (the `basis` label).
pub(super) const PRICING_BASES: [&str; 4] = ["live", "profile", "unknown", "unpriced"];

/// The management states a device can be in (the `management` label).
pub const MANAGEMENT_STATES: [&str; 4] = ["managed", "excluded", "unsupported", "admin-owned"];
pub(super) const PROBE_OUTCOMES: [&str; 4] = ["started", "succeeded", "failed", "inconclusive"];

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

/// The series of one decision: its device, kind, and the tunables and values it wrote.
pub(super) fn decision_labels(
    device: &str,
    kind: DecisionKind,
    changes: &[Change],
) -> DecisionLabels {
    DecisionLabels {
        device: device.to_string(),
        kind: kind.as_str().to_string(),
        attr: attr_label(changes),
        from: value_label(changes, |c| &c.from),
        to: value_label(changes, |c| &c.to),
    }
}

pub(super) fn dl(device: &str) -> DeviceLabels {
    DeviceLabels {
        device: device.to_string(),
    }
}
