//! Driving a [`Controller`] against the simulation in virtual time: advance the sim to the
//! next tick, call `controller.tick(now_ms, &mut sim)`, repeat after `next_tick_in_ms()`. The
//! adaptive policy is the daemon's own ([`mergetune_daemon::adaptive::Daemon::simulated`]); there is no
//! second copy of the policy here. `off` is [`KernelDefault`], `static:N` is
//! [`StaticNomerges`].

use super::engine::Simulation;
use super::report::Report;
use mergetune_daemon::controller::{Controller, KernelDefault};
use mergetune_kernel::blockfs::BlockFs;
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::Config;
use mergetune_logic::decision::Decision;
use mergetune_logic::decision::{Applied, Change, DecisionKind};
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Adaptive,
    Off,
    Static(u8),
}

impl FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Policy, String> {
        match s {
            "adaptive" => Ok(Policy::Adaptive),
            "off" => Ok(Policy::Off),
            _ => match s.strip_prefix("static:").map(str::parse::<u8>) {
                Some(Ok(n)) if n <= 2 => Ok(Policy::Static(n)),
                _ => Err(format!(
                    "unknown policy {s:?}: expected adaptive, off or static:N with N in 0..=2"
                )),
            },
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Policy::Adaptive => write!(f, "adaptive"),
            Policy::Off => write!(f, "off"),
            Policy::Static(n) => write!(f, "static:{n}"),
        }
    }
}

impl Policy {
    /// The controller for this policy; `cfg` configures the adaptive daemon (and the tick
    /// interval of the others).
    pub fn controller(self, cfg: Config) -> Box<dyn Controller> {
        let interval_ms = cfg.daemon.interval_ms.max(1);
        match self {
            Policy::Adaptive => Box::new(mergetune_daemon::adaptive::Daemon::simulated(cfg)),
            Policy::Off => Box::new(KernelDefault { interval_ms }),
            Policy::Static(n) => Box::new(StaticNomerges::new(n, interval_ms)),
        }
    }
}

/// Pins `queue/nomerges` to a value on every request-based (non-stacked) device at the
/// first tick, and puts the originals back on restore.
#[derive(Debug, Clone)]
pub struct StaticNomerges {
    pub value: u8,
    pub interval_ms: u64,
    originals: Vec<(String, String)>,
    done: bool,
}

impl StaticNomerges {
    pub fn new(value: u8, interval_ms: u64) -> Self {
        StaticNomerges {
            value,
            interval_ms,
            originals: Vec::new(),
            done: false,
        }
    }
}

impl Controller for StaticNomerges {
    fn interval_ms(&self) -> u64 {
        self.interval_ms
    }

    fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        if self.done {
            return Vec::new();
        }
        self.done = true;
        let mut out = Vec::new();
        let Ok(devs) = fs.list_block_devices() else {
            return out;
        };
        for dev in devs {
            // Stacked (bio-based) devices do not merge: the policy acts on the bottom.
            if fs.list_dir(&dev, "slaves").map(|s| !s.is_empty()) != Ok(false) {
                continue;
            }
            let Ok(from) = fs.read_tunable(&dev, Tunable::Nomerges) else {
                continue;
            };
            let to = self.value.to_string();
            if from == to {
                continue;
            }
            let applied = match fs.write_tunable(&dev, Tunable::Nomerges, &to) {
                Ok(()) => {
                    self.originals.push((dev.clone(), from.clone()));
                    Applied::Yes
                }
                Err(e) => Applied::Failed(e.to_string()),
            };
            out.push(Decision {
                at_ms: now_ms,
                device: dev,
                kind: DecisionKind::Pin,
                changes: vec![Change {
                    tunable: Tunable::Nomerges,
                    from,
                    to,
                }],
                reason: format!("static policy pins nomerges={}", self.value),
                applied,
            });
        }
        out
    }

    fn restore(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        let mut out = Vec::new();
        for (dev, orig) in self.originals.drain(..) {
            let applied = match fs.write_tunable(&dev, Tunable::Nomerges, &orig) {
                Ok(()) => Applied::Yes,
                Err(e) => Applied::Failed(e.to_string()),
            };
            out.push(Decision {
                at_ms: now_ms,
                device: dev,
                kind: DecisionKind::Restore,
                changes: vec![Change {
                    tunable: Tunable::Nomerges,
                    from: self.value.to_string(),
                    to: orig,
                }],
                reason: "end of run: original value put back".into(),
                applied,
            });
        }
        out
    }
}

/// Runs the whole scenario under `controller`, calling `progress(now_ns, end_ns)` after
/// every tick, and returns the report. The controller is not restored at the end: the
/// report shows the state the policy left (restore would only rewrite the originals).
pub fn run_scenario(
    sim: &mut Simulation,
    controller: &mut dyn Controller,
    policy_label: &str,
    progress: &mut dyn FnMut(u64, u64),
) -> Report {
    run_scenario_observed(sim, controller, policy_label, progress, &mut |_, _, _| {})
}

/// Called after every tick with the controller, that tick's decisions and its time in ms.
pub type TickHook<'a> = dyn FnMut(&dyn Controller, &[Decision], u64) + 'a;

/// [`run_scenario`], also calling `on_tick(controller, decisions, now_ms)` after every tick
/// with the decisions of that tick (the metrics exporter of `simulate --metrics-listen`).
pub fn run_scenario_observed(
    sim: &mut Simulation,
    controller: &mut dyn Controller,
    policy_label: &str,
    progress: &mut dyn FnMut(u64, u64),
    on_tick: &mut TickHook<'_>,
) -> Report {
    let end = sim.duration_ns();
    // The first tick sees the devices before any workload starts, like a daemon started
    // before the jobs; each later tick follows the events up to its time.
    let mut decisions = controller.tick(0, sim);
    on_tick(&*controller, &decisions, 0);
    let mut t = 0u64;
    // A simulation halted at its in-flight cap has nothing left to run.
    while t < end && sim.halted().is_none() {
        let step_ns = controller.next_tick_in_ms().max(1) * 1_000_000;
        t = (t + step_ns).min(end);
        sim.advance_to(t);
        let now = controller.tick(t / 1_000_000, sim);
        on_tick(&*controller, &now, t / 1_000_000);
        decisions.extend(now);
        progress(t, end);
    }
    Report::build(sim, policy_label, decisions)
}
