//! What drives a block stack each tick: the adaptive daemon, or a fixed baseline.
//!
//! The simulator runs a [`Controller`] in virtual time exactly as the real daemon loop runs
//! its own: every [`Controller::next_tick_in_ms`] it calls [`Controller::tick`] with the current time and the
//! [`BlockFs`] of the world. The adaptive daemon (`daemon::adaptive::Daemon`) is one
//! implementation; the kernel default (`off`) and pinned `static:N` are the others. What a
//! controller shows the exporters is its [`Controller::snapshot`], never its internals.

use crate::snapshot::DaemonSnapshot;
use mergetune_kernel::blockfs::BlockFs;

use mergetune_logic::decision::Decision;

/// A policy driving a block stack.
pub trait Controller {
    /// The configured interval between ticks, in ms of (real or virtual) time.
    fn interval_ms(&self) -> u64;
    /// The time from the tick just made to the next one, in ms: `interval_ms` unless the
    /// controller asks to look more often for a while (the daemon's L3 watch).
    fn next_tick_in_ms(&self) -> u64 {
        self.interval_ms()
    }
    /// Observe and act once at `now_ms`; returns the decisions taken at this tick.
    fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision>;
    /// Put back every original value this controller changed.
    fn restore(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision>;
    /// What the controller shows the exporters after a tick, the same in every world;
    /// `None` for a controller with no per-device state (the fixed baselines).
    fn snapshot(&self) -> Option<DaemonSnapshot> {
        None
    }
}

/// The kernel default: never touches anything.
#[derive(Debug, Clone)]
pub struct KernelDefault {
    pub interval_ms: u64,
}

impl Controller for KernelDefault {
    fn interval_ms(&self) -> u64 {
        self.interval_ms
    }
    fn tick(&mut self, _now_ms: u64, _fs: &mut dyn BlockFs) -> Vec<Decision> {
        Vec::new()
    }
    fn restore(&mut self, _now_ms: u64, _fs: &mut dyn BlockFs) -> Vec<Decision> {
        Vec::new()
    }
}
