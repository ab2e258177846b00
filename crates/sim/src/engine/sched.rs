//! The I/O schedulers a simulated device can run, and their sysfs tunables.
//!
//! `none` and kyber dispatch in FIFO order from the elevator; mq-deadline
//! ([`super::deadline`]) and the sync/async slice scheduler that stands for bfq/CFQ
//! ([`super::slice`]) each keep their own state. A device carries both states (only the
//! running scheduler's is used) so a switch back and forth keeps what it kept before.

use super::slab::Request;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedKind {
    None,
    MqDeadline,
    Kyber,
    Slice,
}

impl SchedKind {
    pub fn from_name(s: &str) -> Option<SchedKind> {
        match s {
            "none" => Some(SchedKind::None),
            "mq-deadline" => Some(SchedKind::MqDeadline),
            "kyber" => Some(SchedKind::Kyber),
            "bfq" => Some(SchedKind::Slice),
            _ => None,
        }
    }
    /// Index into `Pricing::by_sched` (none, mq-deadline, kyber, bfq).
    #[inline]
    pub(super) fn idx(self) -> usize {
        self as usize
    }
    pub fn name(self) -> &'static str {
        match self {
            SchedKind::None => "none",
            SchedKind::MqDeadline => "mq-deadline",
            SchedKind::Kyber => "kyber",
            SchedKind::Slice => "bfq",
        }
    }
    /// Which of the elevator's two FIFOs a request waits in: one for none and kyber, one
    /// per direction for mq-deadline, sync and async classes for the slice scheduler.
    #[inline]
    pub(super) fn fifo_of(self, rq: &Request) -> usize {
        match self {
            SchedKind::None | SchedKind::Kyber => 0,
            SchedKind::MqDeadline => rq.dir.idx(),
            SchedKind::Slice => {
                if rq.sync {
                    0
                } else {
                    1
                }
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
            _ => return None,
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
            _ => return false,
        };
        *slot = v;
        true
    }
}
