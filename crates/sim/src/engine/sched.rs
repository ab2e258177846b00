//! The I/O schedulers a simulated device can run, and their sysfs tunables.
//!
//! `none` and kyber dispatch in FIFO order from the elevator; mq-deadline
//! ([`super::deadline`]) and the sync/async slice scheduler that stands for bfq/CFQ
//! ([`super::slice`]) each keep their own state. A device carries both states (only the
//! running scheduler's is used) so a switch back and forth keeps what it kept before.

use super::slab::Request;
use mergetune_kernel::scheduler::Scheduler;
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::tuners;

/// Which of the elevator's two FIFOs a request waits in: one for none and kyber, one per
/// direction for mq-deadline, sync and async classes for the slice model that runs bfq.
#[inline]
pub(super) fn fifo_of(s: Scheduler, rq: &Request) -> usize {
    match s {
        Scheduler::None | Scheduler::Kyber => 0,
        Scheduler::MqDeadline => rq.dir.idx(),
        Scheduler::Bfq => {
            if rq.sync {
                0
            } else {
                1
            }
        }
    }
}

/// Scheduler tunables, in the units sysfs shows them (ms unless named otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tunables {
    pub read_expire: u64,
    pub write_expire: u64,
    pub writes_starved: u64,
    pub fifo_batch: u64,
    pub front_merges: u64,
    pub slice_idle: u64,
    pub slice_sync: u64,
    pub slice_async: u64,
    pub fifo_expire_sync: u64,
    pub fifo_expire_async: u64,
    pub low_latency: u64,
    pub read_lat_nsec: u64,
    pub write_lat_nsec: u64,
    /// A slice knob of a scheduler's table that the models above do not read, by its place
    /// in [`Tunable::ALL`]: kept, so the daemon can read and write every knob it tunes.
    pub other_knobs: [u64; Tunable::ALL.len()],
}

/// The place in [`Tunable::ALL`] of the table knob whose file is `key`.
fn other_knob(key: &str) -> Option<usize> {
    Tunable::ALL
        .iter()
        .position(|&t| tuners::knob(t).is_some() && t.file_name() == key)
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            read_expire: 500,
            write_expire: 5000,
            writes_starved: 2,
            fifo_batch: 16,
            front_merges: 1,
            slice_idle: 8,
            slice_sync: 125,
            slice_async: 40,
            fifo_expire_sync: 125,
            fifo_expire_async: 250,
            low_latency: 1,
            read_lat_nsec: 2_000_000,
            write_lat_nsec: 10_000_000,
            other_knobs: Tunable::ALL.map(|t| tuners::knob(t).map_or(0, |k| k.default)),
        }
    }
}

impl Tunables {
    pub fn get(&self, key: &str) -> Option<u64> {
        Some(match key {
            "read_expire" => self.read_expire,
            "write_expire" => self.write_expire,
            "writes_starved" => self.writes_starved,
            "fifo_batch" => self.fifo_batch,
            "front_merges" => self.front_merges,
            "slice_idle" => self.slice_idle,
            "slice_sync" | "timeout_sync" => self.slice_sync,
            "slice_async" => self.slice_async,
            "fifo_expire_sync" => self.fifo_expire_sync,
            "fifo_expire_async" => self.fifo_expire_async,
            "low_latency" => self.low_latency,
            "read_lat_nsec" => self.read_lat_nsec,
            "write_lat_nsec" => self.write_lat_nsec,
            _ => self.other_knobs[other_knob(key)?],
        })
    }

    /// Sets a tunable; false if the key is unknown or the value out of range.
    pub fn set(&mut self, key: &str, v: u64) -> bool {
        let slot = match key {
            "read_expire" => &mut self.read_expire,
            "write_expire" => &mut self.write_expire,
            "writes_starved" => &mut self.writes_starved,
            "fifo_batch" if v >= 1 => &mut self.fifo_batch,
            "front_merges" if v <= 1 => &mut self.front_merges,
            "slice_idle" => &mut self.slice_idle,
            "slice_sync" | "timeout_sync" if v >= 1 => &mut self.slice_sync,
            "slice_async" if v >= 1 => &mut self.slice_async,
            "fifo_expire_sync" => &mut self.fifo_expire_sync,
            "fifo_expire_async" => &mut self.fifo_expire_async,
            "low_latency" if v <= 1 => &mut self.low_latency,
            "read_lat_nsec" => &mut self.read_lat_nsec,
            "write_lat_nsec" => &mut self.write_lat_nsec,
            _ => match other_knob(key) {
                Some(i) => &mut self.other_knobs[i],
                None => return false,
            },
        };
        *slot = v;
        true
    }
}
