//! The `[slices]` table: the slice tuner's evidence thresholds, and one bound per slice knob
//! whose key, default and accepted range come from the knob's scheduler table
//! ([`crate::tuners`]). The bound keys are not fields of their own: serde is written out
//! here, in the order and with the errors derive would give (unknown keys rejected, each
//! missing key at its default), so a knob added to a table is a config key with no change
//! here.

use super::Config;
use super::checks::{Checks, Problems};
use crate::tuners;
use mergetune_kernel::tunable::Tunable;
use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::sync::LazyLock;

/// Off by default: the VM lab measured no benefit of the slice tuner beyond its noise
/// (docs/vmlab.md, "Slice tuner"), so mergetune changes only nomerges and front_merges unless an
/// operator turns slices on.
pub const DEFAULT_SLICES_ENABLED: bool = false;

/// The highest cap on slice changes per device and hour: one a second.
pub const MAX_SLICE_CHANGES_PER_HOUR: u32 = 3600;

/// The highest `starve_ratio`: mq-deadline and bfq keep reads within a few times the
/// writes' wait; a thousand times is never reached.
pub const MAX_STARVE_RATIO: f64 = 1000.0;

/// Scheduler slice tuning (`logic::slices`): favour reads when they starve behind writes.
#[derive(Debug, Clone, PartialEq)]
pub struct SlicesConfig {
    /// false (the default, [`DEFAULT_SLICES_ENABLED`]): never touch scheduler tunables.
    pub enabled: bool,
    /// Reads count as starving when their mean time per request is at least this many
    /// times the writes'...
    pub starve_ratio: f64,
    /// ...and at least this many ms: below it nobody waits noticeably, and the counters'
    /// millisecond resolution turns ratios of fast requests into noise.
    pub min_read_ms_per_request: f64,
    /// Consecutive windows of evidence before a step (and before undoing one).
    pub windows: u32,
    /// A window is "mixed" when both directions completed at least this many requests.
    pub min_requests: u64,
    /// How far mergetune moves each slice knob (mq-deadline's `writes_starved_max`,
    /// `read_expire_min_ms`, bfq's `timeout_sync_max_ms`), in table order.
    pub bounds: Vec<(Tunable, u64)>,
    /// Cap on slice changes per device in any rolling hour.
    pub max_changes_per_hour: u32,
}

impl Default for SlicesConfig {
    fn default() -> Self {
        SlicesConfig {
            enabled: DEFAULT_SLICES_ENABLED,
            starve_ratio: 1.5,
            min_read_ms_per_request: 10.0,
            windows: 3,
            min_requests: 20,
            bounds: tuners::knobs()
                .map(|k| (k.tunable, k.bound.default))
                .collect(),
            max_changes_per_hour: 12,
        }
    }
}

impl SlicesConfig {
    /// The configured bound of a slice knob (its table's default where none is set).
    pub fn bound(&self, t: Tunable) -> u64 {
        self.bounds
            .iter()
            .find(|(b, _)| *b == t)
            .map(|(_, v)| *v)
            .or_else(|| tuners::knob(t).map(|k| k.bound.default))
            .unwrap_or(0)
    }

    /// Sets the bound of a slice knob.
    pub fn set_bound(&mut self, t: Tunable, v: u64) {
        match self.bounds.iter_mut().find(|(b, _)| *b == t) {
            Some(slot) => slot.1 = v,
            None => self.bounds.push((t, v)),
        }
    }
}

impl Config {
    pub(super) fn check_slices(&self, problems: &mut Problems) {
        let sl = &self.slices;
        if !sl.starve_ratio.is_finite() || sl.starve_ratio <= 1.0 {
            problems.push(
                "slices.starve_ratio",
                format!("{} must be a number above 1", sl.starve_ratio),
            );
        } else if sl.starve_ratio > MAX_STARVE_RATIO {
            problems.push(
                "slices.starve_ratio",
                format!(
                    "{} is more than {MAX_STARVE_RATIO}, the most allowed: reads never wait that many times longer than writes, so the tuner would never act",
                    sl.starve_ratio
                ),
            );
        }
        problems.within(
            "slices.min_read_ms_per_request",
            sl.min_read_ms_per_request,
            0.0..=10_000.0,
        );
        problems.count(
            "slices.windows",
            sl.windows.into(),
            super::MAX_STEP_WINDOWS.into(),
            "each is a window of evidence a step waits for",
        );
        for k in tuners::knobs() {
            let key = format!("slices.{}", k.bound.key);
            problems.within(&key, sl.bound(k.tunable), k.bound.min..=k.bound.max);
        }
        problems.count(
            "slices.min_requests",
            sl.min_requests,
            super::MAX_WINDOW_COUNT,
            "no window would ever hold that many requests, so nothing would be decided",
        );
        problems.within(
            "slices.max_changes_per_hour",
            sl.max_changes_per_hour,
            1..=MAX_SLICE_CHANGES_PER_HOUR,
        );
    }
}

/// The keys of `[slices]` before and after the knobs' bounds, in the order they are
/// written and listed.
const BEFORE: [&str; 5] = [
    "enabled",
    "starve_ratio",
    "min_read_ms_per_request",
    "windows",
    "min_requests",
];
const AFTER: [&str; 1] = ["max_changes_per_hour"];

/// Every key of `[slices]`, as an unknown key's error lists them.
fn fields() -> &'static [&'static str] {
    static FIELDS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
        BEFORE
            .into_iter()
            .chain(tuners::knobs().map(|k| k.bound.key))
            .chain(AFTER)
            .collect()
    });
    &FIELDS
}

/// One key of `[slices]`.
enum Field {
    Enabled,
    StarveRatio,
    MinReadMs,
    Windows,
    MinRequests,
    Bound(Tunable),
    MaxChanges,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Field, D::Error> {
        d.deserialize_identifier(FieldVisitor)
    }
}

struct FieldVisitor;

impl Visitor<'_> for FieldVisitor {
    type Value = Field;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("field identifier")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
        Ok(match v {
            "enabled" => Field::Enabled,
            "starve_ratio" => Field::StarveRatio,
            "min_read_ms_per_request" => Field::MinReadMs,
            "windows" => Field::Windows,
            "min_requests" => Field::MinRequests,
            "max_changes_per_hour" => Field::MaxChanges,
            _ => match tuners::knobs().find(|k| k.bound.key == v) {
                Some(k) => Field::Bound(k.tunable),
                None => return Err(E::unknown_field(v, fields())),
            },
        })
    }
}

struct SlicesVisitor;

impl<'de> Visitor<'de> for SlicesVisitor {
    type Value = SlicesConfig;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("struct SlicesConfig")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SlicesConfig, A::Error> {
        let mut c = SlicesConfig::default();
        let mut seen: Vec<&'static str> = Vec::new();
        while let Some(field) = map.next_key::<Field>()? {
            let name = match &field {
                Field::Enabled => BEFORE[0],
                Field::StarveRatio => BEFORE[1],
                Field::MinReadMs => BEFORE[2],
                Field::Windows => BEFORE[3],
                Field::MinRequests => BEFORE[4],
                Field::Bound(t) => tuners::knob(*t).map_or("", |k| k.bound.key),
                Field::MaxChanges => AFTER[0],
            };
            if seen.contains(&name) {
                return Err(de::Error::duplicate_field(name));
            }
            seen.push(name);
            match field {
                Field::Enabled => c.enabled = map.next_value()?,
                Field::StarveRatio => c.starve_ratio = map.next_value()?,
                Field::MinReadMs => c.min_read_ms_per_request = map.next_value()?,
                Field::Windows => c.windows = map.next_value()?,
                Field::MinRequests => c.min_requests = map.next_value()?,
                Field::Bound(t) => c.set_bound(t, map.next_value()?),
                Field::MaxChanges => c.max_changes_per_hour = map.next_value()?,
            }
        }
        Ok(c)
    }
}

impl<'de> Deserialize<'de> for SlicesConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SlicesConfig, D::Error> {
        d.deserialize_struct("SlicesConfig", fields(), SlicesVisitor)
    }
}

impl Serialize for SlicesConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("SlicesConfig", fields().len())?;
        st.serialize_field(BEFORE[0], &self.enabled)?;
        st.serialize_field(BEFORE[1], &self.starve_ratio)?;
        st.serialize_field(BEFORE[2], &self.min_read_ms_per_request)?;
        st.serialize_field(BEFORE[3], &self.windows)?;
        st.serialize_field(BEFORE[4], &self.min_requests)?;
        for k in tuners::knobs() {
            st.serialize_field(k.bound.key, &self.bound(k.tunable))?;
        }
        st.serialize_field(AFTER[0], &self.max_changes_per_hour)?;
        st.end()
    }
}
