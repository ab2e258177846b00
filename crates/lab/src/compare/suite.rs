//! The shipped comparison suite, embedded so `simulate --compare` works anywhere, and the
//! scaling of its phases for short runs. To add a scenario: a file under
//! config/scenarios/compare/ and one entry in [`SUITE`].

use mergetune_sim::scenario::Scenario;

/// The shipped comparison suite, embedded so `simulate --compare` works anywhere.
pub const SUITE: &[(&str, &str)] = &[
    (
        "oltp_steady",
        include_str!("../../../../config/scenarios/compare/oltp_steady.toml"),
    ),
    (
        "backup",
        include_str!("../../../../config/scenarios/compare/backup.toml"),
    ),
    (
        "oltp_backup_every_minute",
        include_str!("../../../../config/scenarios/compare/oltp_backup_every_minute.toml"),
    ),
    (
        "mix_noise",
        include_str!("../../../../config/scenarios/compare/mix_noise.toml"),
    ),
    (
        "bursty_spikes",
        include_str!("../../../../config/scenarios/compare/bursty_spikes.toml"),
    ),
    (
        "dm_stripe_oltp",
        include_str!("../../../../config/scenarios/compare/dm_stripe_oltp.toml"),
    ),
    (
        "readers_vs_writer",
        include_str!("../../../../config/scenarios/compare/readers_vs_writer.toml"),
    ),
    (
        "same_signature",
        include_str!("../../../../config/scenarios/compare/same_signature.toml"),
    ),
    (
        "oltp_scans_bursts",
        include_str!("../../../../config/scenarios/compare/oltp_scans_bursts.toml"),
    ),
    (
        "oltp_scans64_bursts",
        include_str!("../../../../config/scenarios/compare/oltp_scans64_bursts.toml"),
    ),
];

/// The suite's scenarios, each phase's duration scaled by `scale` (1.0: as shipped; the
/// short suite of the tests uses less), never below 10 s.
pub fn suite(scale: f64) -> Result<Vec<Scenario>, mergetune_sim::scenario::ScenarioError> {
    SUITE
        .iter()
        .map(|(name, text)| {
            let mut sc = Scenario::from_toml_str(text, &format!("<suite:{name}>"), None)?;
            scale_phases(&mut sc, scale);
            Ok(sc)
        })
        .collect()
}

/// Scales every phase's duration, never below 10 s.
pub fn scale_phases(sc: &mut Scenario, scale: f64) {
    for p in &mut sc.phases {
        p.duration_s = (p.duration_s * scale).max(10.0_f64.min(p.duration_s));
    }
}

/// One scenario of the suite by name, scaled like [`suite`].
pub fn suite_scenario(name: &str, scale: f64) -> Option<Scenario> {
    let (_, text) = SUITE.iter().find(|(n, _)| *n == name)?;
    let mut sc = Scenario::from_toml_str(text, &format!("<suite:{name}>"), None).ok()?;
    scale_phases(&mut sc, scale);
    Some(sc)
}
