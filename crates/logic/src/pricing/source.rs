//! Where a device's prices come from (`[policy] cost_profile`): measured live on this
//! host (the default), or a cost profile that matches the device's kernel and kind.
//!
//! Under live pricing, `[pricing] fallback_profile` names a profile that prices the devices
//! while the sampler cannot run on the host (a distribution's `perf_event_paranoid` above
//! 2, no CAP_PERFMON): a host that cannot sample is then not inert, and the sampler, retried
//! while a device is busy, takes over as soon as it opens. Which of the two prices a
//! device is its basis (live or profile) in `status` and `mergetune_device_pricing`.

use super::floor::SavingFloor;
use super::profile::{self, CostProfile, DeviceKey, Method, ProfileError, profile_match};
use crate::config::Config;
use crate::pricing::worth::{UnknownWhy, Worth};
use mergetune_kernel::scheduler::Scheduler;

/// Where prices come from.
#[derive(Debug, Clone)]
pub enum PricingSource {
    Live,
    Profile {
        profile: Box<CostProfile>,
        /// The config's value: a built-in name or a path.
        spec: String,
    },
}

impl PricingSource {
    /// The config's source, or why its profile cannot be had: a profile file that cannot
    /// be read any more (it was checked when the config was loaded); the caller then
    /// measures live rather than guess.
    pub fn from_config(cfg: &Config) -> Result<PricingSource, ProfileError> {
        let spec = cfg.policy.cost_profile.trim();
        if spec == profile::LIVE {
            return Ok(PricingSource::Live);
        }
        Ok(PricingSource::Profile {
            profile: Box::new(profile::resolve(spec)?),
            spec: spec.to_string(),
        })
    }

    /// `[pricing] fallback_profile` as a source (None when unset), or why its profile
    /// cannot be had (it was checked when the config was loaded).
    pub fn fallback_from_config(cfg: &Config) -> Result<Option<PricingSource>, ProfileError> {
        let spec = cfg.pricing.fallback_profile.trim();
        if spec.is_empty() || spec == profile::LIVE {
            return Ok(None);
        }
        Ok(Some(PricingSource::Profile {
            profile: Box::new(profile::resolve(spec)?),
            spec: spec.to_string(),
        }))
    }

    /// The profile's name ("live" when measured).
    pub fn name(&self) -> &str {
        match self {
            PricingSource::Live => profile::LIVE,
            PricingSource::Profile { profile, .. } => &profile.name,
        }
    }

    /// Where the profile came from: "measured on this host", "built-in", or its path.
    pub fn origin(&self) -> String {
        match self {
            PricingSource::Live => "measured on this host".into(),
            PricingSource::Profile { spec, .. } if profile::is_path(spec) => spec.clone(),
            PricingSource::Profile { profile, .. } if profile.method == Method::Stated => {
                format!(
                    "built-in, figures stated for kernel {}",
                    profile.kernel_release
                )
            }
            PricingSource::Profile { profile, .. } => {
                format!("built-in, measured on kernel {}", profile.kernel_release)
            }
        }
    }

    /// What prices the steps, in one line for the startup log and `check-config`: the
    /// name, the origin and, for a profile, whether it matches the running kernel
    /// (`running_release`, None when unknown). A device's own match is its line of the
    /// first tick (the device kind is read there).
    pub fn summary(&self, running_release: Option<&str>, floor: SavingFloor) -> String {
        match self {
            PricingSource::Live => format!(
                "pricing: live ({}, by the merge-path sampler): a step down only where the lower bound of its saving's 95% interval reaches the floor, {:.2} ms/s of CPU",
                self.origin(),
                floor.ms_per_sec()
            ),
            PricingSource::Profile { profile, .. } => {
                let fit = match running_release {
                    _ if profile.method == Method::Stated => {
                        "stated figures, not a measurement: applied on any kernel".to_string()
                    }
                    None => "the running kernel is unknown: not checked".to_string(),
                    Some(run) => match profile_match(profile, Some(run), None) {
                        Ok(()) => format!("matches the running kernel {run}"),
                        Err(e) => format!(
                            "will not match here ({e}): every device stays unknown, nothing steps down"
                        ),
                    },
                };
                format!(
                    "pricing: profile {} ({}): {fit}",
                    profile.name,
                    self.origin()
                )
            }
        }
    }

    /// The table a profile gives a device, or unknown where it does not match.
    pub fn profile_worth(
        &self,
        scheduler: Option<Scheduler>,
        running_release: Option<&str>,
        key: Option<&DeviceKey>,
    ) -> Worth {
        match self {
            PricingSource::Live => Worth::unknown(UnknownWhy::NotMeasuredYet),
            PricingSource::Profile { profile, .. } => {
                match profile_match(profile, running_release, key) {
                    Ok(()) => Worth::from_profile(profile, scheduler),
                    Err(_) => Worth::unknown(UnknownWhy::NoMatchingProfile),
                }
            }
        }
    }
}
