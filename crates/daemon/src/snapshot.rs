//! What a controller shows the outside after a tick: plain data, copied out of the daemon,
//! so the exporters (metrics, `/status`, the device table) and the lab's plot sampler read
//! one type in every world (real, dry-run, simulated) and never the daemon's internals.
//!
//! [`crate::controller::Controller::snapshot`] hands it out; the adaptive daemon
//! builds it from its per-device runtime, the fixed baselines have none.

use mergetune_kernel::scheduler::Reported;
use mergetune_logic::decision::{Decision, Level};
use mergetune_logic::devices::Management;
use mergetune_logic::policy::{Mode, Reason};
use mergetune_logic::pricing::floor::SavingFloor;
use mergetune_logic::pricing::worth::{Basis, Worth};
use mergetune_logic::sampler::Window;
use serde::Serialize;

/// The daemon's own counters, for the operator (exported as metrics by the export layer).
#[derive(Debug, Clone, Serialize)]
pub struct DaemonCounters {
    pub ticks: u64,
    pub decisions: u64,
    pub write_errors: u64,
    pub diskstats_errors: u64,
    pub counter_resets: u64,
    /// Failed saves of the state file.
    pub state_save_errors: u64,
    /// Failed reads of a device tunable.
    pub tunable_read_errors: u64,
    /// The state file holds every record mergetune has in memory.
    pub state_persisted: bool,
}

impl Default for DaemonCounters {
    fn default() -> Self {
        DaemonCounters {
            ticks: 0,
            decisions: 0,
            write_errors: 0,
            diskstats_errors: 0,
            counter_resets: 0,
            state_save_errors: 0,
            tunable_read_errors: 0,
            state_persisted: true,
        }
    }
}

/// The daemon after a tick.
#[derive(Debug, Clone, Default)]
pub struct DaemonSnapshot {
    /// Decides and logs, writes nothing.
    pub dry_run: bool,
    /// `[policy] enabled`.
    pub policy_enabled: bool,
    /// `[policy] max_changes_per_hour`.
    pub max_changes_per_hour: u32,
    /// `[daemon] interval_ms`.
    pub interval_ms: u64,
    pub counters: DaemonCounters,
    pub pricing: PricingSnapshot,
    /// Every device with a request queue, by name.
    pub devices: Vec<DeviceSnapshot>,
}

/// What prices a step down on every device (`/status` carries it as its `pricing`).
#[derive(Debug, Clone, Default)]
pub struct PricingSnapshot {
    /// "live", or a profile's name ("" for a controller that prices nothing).
    pub name: String,
    /// Where it came from: "measured on this host", a built-in's kernel, a file's path.
    pub origin: String,
    /// Under live pricing, why the merge-path sampler cannot run here, with the fix (None
    /// while it can, before it was tried, or under a profile).
    pub sampler_unavailable: Option<String>,
    /// The `[pricing] fallback_profile` pricing the devices while the sampler cannot run.
    pub fallback: Option<String>,
    /// The live pricing's floor.
    pub floor: SavingFloor,
}

impl PricingSnapshot {
    /// The name of what priced `worth`: the fallback profile's for a profile's table while
    /// it stands in for the sampler, else the daemon's pricing name.
    pub fn name_of(&self, worth: &Worth) -> &str {
        match (&self.fallback, worth.basis) {
            (Some(f), Basis::Profile) => f,
            _ => &self.name,
        }
    }
}

/// One device after a tick.
#[derive(Debug, Clone)]
pub struct DeviceSnapshot {
    pub name: String,
    /// The active I/O scheduler, when the device has one.
    pub scheduler: Option<Reported>,
    pub management: Management,
    /// The merge-ladder level: managed devices only. In dry-run the level the daemon would
    /// have set.
    pub level: Option<Level>,
    /// The policy mode: managed devices only.
    pub mode: Option<Mode>,
    /// `queue/nomerges` as mergetune last read or wrote it (in dry-run: as read).
    pub nomerges: Option<String>,
    /// `queue/nomerges` when mergetune first saw the device.
    pub original_nomerges: Option<String>,
    /// The last closed decision window.
    pub last_window: Option<Window>,
    /// The counters of the last tick alone.
    pub last_tick: Option<Window>,
    /// The policy's latest note for the device (why it holds, or what it did).
    pub last_reason: Reason,
    pub last_decision: Option<Decision>,
    /// When the next probe starts (managed, at L3).
    pub next_probe_at_ms: Option<u64>,
    /// What a step down would save here, as last priced (managed devices).
    pub worth: Option<mergetune_logic::pricing::worth::Worth>,
    /// Level changes in the last hour, counted toward `[policy] max_changes_per_hour`
    /// (managed devices). At the cap, steps down are refused (steps up never are).
    pub changes_last_hour: Option<u32>,
    /// The decisions the ladder can take on the device (managed devices; empty otherwise):
    /// the exporter starts their counters at zero.
    pub possible_decisions: Vec<mergetune_logic::policy::possible::PossibleDecision>,
    /// A loop device re-attached to the same backing file while mergetune held records of
    /// it: they are kept, though an operator's write of mergetune's own value meanwhile
    /// cannot be told from mergetune's.
    pub reattached: bool,
}

/// Timing of one tick, measured at the edge (the live loop, `service`, or the simulator's CLI).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TickTiming {
    /// The tick's time in ms since the daemon started (real or virtual): the same `now_ms`
    /// passed to `Daemon::tick`.
    pub now_ms: u64,
    /// Wall time the tick took, in seconds.
    pub duration_seconds: f64,
    /// How late the tick started against its schedule, in seconds (0 when on time).
    pub lag_seconds: f64,
}
