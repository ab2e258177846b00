//! What the daemon itself would do with the device a trace shows: the level its rules
//! reach, from the same pieces the policy decides with ([`mergetune_logic::policy`]): the
//! rungs of the device's scheduler ([`Caps::for_scheduler`]), the config's deepest level
//! ([`deepest_level`]), the thresholds of `[policy]`, and the cost profile's [`Worth`] of
//! each level. `advise` recommends this level, not a table of its own, so that a
//! recommendation never contradicts the daemon, and says why when the trace alone would
//! go further. Pure.

use super::report::DeviceReport;
use mergetune_kernel::scheduler::Reported;
use mergetune_logic::config::PolicyConfig;
use mergetune_logic::decision::Level;
use mergetune_logic::policy::{Caps, deepest_level};
use mergetune_logic::pricing::floor::SavingFloor;
use mergetune_logic::pricing::worth::Worth;
use serde::Serialize;

/// The daemon's view of one traced device.
#[derive(Debug, Clone, Serialize)]
pub struct DaemonView {
    /// The cost profile that priced the levels (`[policy] cost_profile`).
    pub profile: String,
    /// The scheduler the device was priced and laddered for.
    pub scheduler: Reported,
    /// What the trace alone supports.
    #[serde(with = "mergetune_logic::decision::level_index")]
    pub trace_level: Level,
    /// Where the daemon's rules would take the device.
    #[serde(with = "mergetune_logic::decision::level_index")]
    pub level: Level,
    /// Why the daemon stops there (the profile's numbers when it is "not worth it").
    pub why: String,
}

/// The level the daemon would reach on a device running `scheduler` whose traffic is the
/// trace's, given what the trace supports (`trace`) and the profile's `worth` for that
/// scheduler. The daemon's rules, in the order it applies them: it steps down only from
/// a merge ratio below `disable_below_percent` (or tries L2 from one at or above
/// `enable_above_percent`), never between the two; only to a rung the scheduler has and
/// the config allows (L3 only with the bio tap, as the daemon assumes here when `[sense]`
/// could run); and only to a level the profile says saves measurably. It takes those rules
/// one step each in the daemon's order, so that the two read side by side. `floor` is
/// `[pricing] saving_floor_percent_cpu`: under live pricing with no price given it tells the
/// price at which the daemon would step down.
pub fn daemon_view(
    r: &DeviceReport,
    cfg: &PolicyConfig,
    trace: Level,
    scheduler: &Reported,
    profile: &str,
    worth: &Worth,
    floor: SavingFloor,
) -> DaemonView {
    // Where the scheduler has front_merges, the daemon finds it at 1 (the default).
    let caps = Caps::for_scheduler(scheduler.scheduler(), true)
        .sensing(true)
        .priced(*worth);
    let allowed = deepest_level(cfg, caps);
    let ratio = r.merge_percent;
    let view = |level: Level, why: String| DaemonView {
        profile: profile.to_string(),
        scheduler: scheduler.clone(),
        trace_level: trace,
        level,
        why,
    };
    if trace == Level::L0 {
        return view(
            Level::L0,
            "the trace supports no step down, nor would the daemon take one".into(),
        );
    }
    let between = ratio >= cfg.disable_below_percent && ratio < cfg.enable_above_percent;
    if between {
        return view(
            Level::L0,
            format!(
                "a merge ratio of {ratio:.1}% lies between disable_below_percent ({}%) and enable_above_percent ({}%), where the daemon changes nothing",
                cfg.disable_below_percent, cfg.enable_above_percent
            ),
        );
    }
    // From a high ratio the daemon only tries L2 (plug and one-hit merges kept); from a
    // low one it walks the whole ladder down to the deepest level allowed.
    let reachable: Vec<Level> = Level::ALL
        .into_iter()
        .filter(|&l| l > Level::L0 && l <= trace && l <= allowed && caps.has(l))
        .filter(|&l| ratio < cfg.disable_below_percent || l == Level::L2)
        .collect();
    let Some(&deepest) = reachable.last() else {
        let why = if trace > allowed {
            format!(
                "{trace} is deeper than the daemon goes on {scheduler} with this config (deepest {allowed}: disabled_nomerges, or L3 needs the bio tap)"
            )
        } else {
            format!("{scheduler} has no rung between L0 and {trace} the daemon can use")
        };
        return view(Level::L0, why);
    };
    if let mergetune_logic::pricing::worth::Basis::Unknown { .. } = worth.basis {
        // Priced live: by the daemon's sampler on the host, at run time. A trace holds no
        // CPU samples: say at which price the daemon steps down, not a guess.
        return view(
            Level::L0,
            live_unpriced(r.bios_per_s, floor, deepest, scheduler),
        );
    }
    let (level, why) = priced_choice(&reachable, trace, worth, profile, scheduler);
    view(level, why)
}

/// Why a live-priced device stays at L0 until the daemon has measured it, and the price per
/// bio at which the trace's rate makes `deepest` save the floor: the daemon steps down when
/// its measured price's lower bound reaches it.
fn live_unpriced(
    bios_per_s: f64,
    floor: SavingFloor,
    deepest: Level,
    scheduler: &Reported,
) -> String {
    let mut why = String::from(
        "priced live (cost_profile \"live\", no profile): the daemon measures the merge path's price per bio on the host, which a trace does not hold, and stays at L0 until it has",
    );
    if bios_per_s > 0.0 {
        let break_even_ns = floor.ms_per_sec() * 1e6 / bios_per_s;
        why.push_str(&format!(
            "; at this trace's {bios_per_s:.0} bios/s it goes to {deepest} on {scheduler} once that price's lower bound reaches {break_even_ns:.0} ns per bio (the floor, {:.2} ms of CPU per second): give the price `mergetune status` shows for the device as --price-ns for the daemon's answer",
            floor.ms_per_sec()
        ));
    }
    why
}

/// Among the rungs the daemon can reach, the deepest one the profile says saves
/// measurably, and why (L0 where none does).
fn priced_choice(
    reachable: &[Level],
    trace: Level,
    worth: &Worth,
    profile: &str,
    scheduler: &Reported,
) -> (Level, String) {
    match reachable.iter().rev().find(|&&l| worth.worth(l)) {
        Some(&l) if l == trace => (
            l,
            format!(
                "profile {profile}, for a device on {scheduler}: {}, a measurable saving",
                worth.describe([l])
            ),
        ),
        Some(&l) => (
            l,
            format!(
                "profile {profile}, for a device on {scheduler}: only {l} saves measurably ({})",
                worth.describe(reachable.iter().copied())
            ),
        ),
        None => (
            Level::L0,
            format!(
                "not worth it: profile {profile} measured no saving at {} ({}), so the daemon keeps merging on",
                one_of(reachable),
                worth.describe(reachable.iter().copied())
            ),
        ),
    }
}

/// `L2`, or `L1 or L2 or L3`: the levels named as alternatives.
fn one_of(levels: &[Level]) -> String {
    levels
        .iter()
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join(" or ")
}
