//! `[pricing]`: the live measurement's settings and their checks.

use super::floor::SavingFloor;
use crate::config::checks::{Checks, KeyProblems};
use serde::Serialize;

/// `[pricing]`: the live measurement of the merge path (the default pricing,
/// `[policy] cost_profile = "live"`).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PricingConfig {
    /// A step down is taken only where the level's saving, at the lower end of its 95%
    /// interval, reaches this share of one CPU, percent (0.5: 5 ms of CPU per second).
    pub saving_floor_percent_cpu: SavingFloor,
    /// The sampler runs for sample_ms every every_ms while a managed device below L3 is
    /// busy (its duty cycle: sample_ms / every_ms, at most 50%).
    pub sample_ms: u64,
    pub every_ms: u64,
    /// CPU time between two samples on one CPU, µs.
    pub period_us: u64,
    /// Spans of sampling pooled into one price (the newest), and the age past which a
    /// span no longer counts.
    pub keep_spans: u32,
    pub max_age_secs: u64,
    /// A cost profile that prices the devices while the sampler cannot run on this host
    /// (`kernel.perf_event_paranoid` above 2, no CAP_PERFMON): a built-in name or the path
    /// of one `mergetune-lab calibrate` wrote here. "" (the default): none, the devices stay
    /// unknown then and nothing steps down. Only with `cost_profile = "live"`.
    pub fallback_profile: String,
}

impl Default for PricingConfig {
    fn default() -> Self {
        PricingConfig::DEFAULT
    }
}

impl PricingConfig {
    /// Every key's default, stated once under its key (`PricingConfig::DEFAULT.sample_ms`):
    /// what a config without `[pricing]` runs with.
    pub const DEFAULT: PricingConfig = PricingConfig {
        saving_floor_percent_cpu: SavingFloor::from_percent_cpu(0.5),
        sample_ms: 1000,
        every_ms: 60_000,
        period_us: 1000,
        keep_spans: 30,
        max_age_secs: 900,
        fallback_profile: String::new(),
    };

    /// The saving floor.
    pub fn floor(&self) -> SavingFloor {
        self.saving_floor_percent_cpu
    }

    /// (key, reason) of every bad value. Pure.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = KeyProblems::default();
        let f = self.saving_floor_percent_cpu.percent_cpu();
        if !(f.is_finite() && f > 0.0 && f <= 100.0) {
            out.push(
                "pricing.saving_floor_percent_cpu",
                format!("{f} is not in (0, 100]: a floor of 0 would step down for nothing"),
            );
        }
        out.within("pricing.sample_ms", self.sample_ms, 100..=60_000);
        if self.every_ms < self.sample_ms.saturating_mul(2) || self.every_ms > 86_400_000 {
            out.push(
                "pricing.every_ms",
                format!(
                    "{} must be at least twice sample_ms ({}) and at most 86400000",
                    self.every_ms, self.sample_ms
                ),
            );
        }
        out.within("pricing.period_us", self.period_us, 100..=100_000);
        out.within("pricing.keep_spans", self.keep_spans, 1..=1000);
        out.within("pricing.max_age_secs", self.max_age_secs, 10..=604_800);
        out.0
    }
}
