//! The saving floor: the share of one CPU a level's saving must reach, at the lower end of
//! its interval, for a step down (and under which, at the upper end, a level is left).
//!
//! One value, as the operator writes it (`[pricing] saving_floor_percent_cpu`, percent of
//! one CPU), and its three units as methods: the percent of the config, the CPU ms per
//! second a live saving is counted in, and the ratio (CPU seconds per second) the metric
//! `merge_saving_floor_cpu_ratio` exports. Each unit is derived from the percent the same
//! way everywhere, so no two places can round it differently.

use serde::{Deserialize, Serialize};

/// The saving floor. Serialized as the config writes it: a bare number, percent of one CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SavingFloor {
    percent_cpu: f64,
}

impl SavingFloor {
    /// The floor of `percent` of one CPU (0.5: 5 ms of CPU per second).
    pub const fn from_percent_cpu(percent: f64) -> SavingFloor {
        SavingFloor {
            percent_cpu: percent,
        }
    }

    /// Percent of one CPU, as configured.
    pub fn percent_cpu(self) -> f64 {
        self.percent_cpu
    }

    /// CPU ms per second, the unit of a live saving.
    pub fn ms_per_sec(self) -> f64 {
        self.percent_cpu * 10.0
    }

    /// CPU seconds per second (the exported gauge).
    pub fn ratio(self) -> f64 {
        self.ms_per_sec() / 1000.0
    }

    /// Serializes the floor in CPU ms per second, for the JSON fields named
    /// `floor_ms_per_sec` (`#[serde(serialize_with)]`).
    pub fn serialize_ms_per_sec<S: serde::Serializer>(
        floor: &SavingFloor,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(floor.ms_per_sec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_units_are_one_value() {
        let f = SavingFloor::from_percent_cpu(0.5);
        assert_eq!(f.percent_cpu(), 0.5);
        assert_eq!(f.ms_per_sec(), 5.0);
        assert_eq!(f.ratio(), 0.005);
    }
}
