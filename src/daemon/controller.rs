//! What drives a block stack each tick: the adaptive daemon, or a fixed baseline.
//!
//! The simulator runs a [`Controller`] in virtual time exactly as the real daemon loop runs
//! its own: every [`Controller::next_tick_in_ms`] it calls [`Controller::tick`] with the current time and the
//! [`BlockFs`] of the world. The adaptive daemon ([`crate::daemon::adaptive::Daemon`]) is one
//! implementation; the kernel default (`off`) and pinned `static:N` are the others.

use crate::kernel::blockfs::BlockFs;

pub use crate::logic::decision::Decision;

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
    /// The adaptive daemon behind this controller, if it is one: lets the metrics and
    /// status layers read the same per-device state in every world.
    fn as_daemon(&self) -> Option<&crate::daemon::adaptive::Daemon> {
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
