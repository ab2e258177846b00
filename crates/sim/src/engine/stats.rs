//! What the simulation counts: the kernel's per-device counters and the report's
//! per-phase accumulators, and the pricing of each block-layer step into both.
//!
//! Counters are the kernel's 17 `stat` fields: completed = requests after merging, merged =
//! bios merged into an existing request, ms fields from ns sums, io_ticks (time with at
//! least one request in flight) integrated over in-flight count changes, and the weighted
//! field 11 as the kernel prints it since 5.x: the sum of the per-direction ns, in ms.
//! The per-phase accumulators ([`PhaseAcc`]) hold what the report shows: bios, merges,
//! requests, sectors, latency histograms and modelled CPU in two currencies.

use super::Simulation;
use crate::cost::Step;
use crate::hist::Histogram;
use mergetune_kernel::diskstats::{MAX_FIELDS, StatFields};
use mergetune_kernel::trace::Dir;
use serde::Serialize;

/// A device's running counters, in ns where the kernel shows ms.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counters {
    ios: [u64; 2],
    pub(super) merges: [u64; 2],
    sectors: [u64; 2],
    ticks_ns: [u64; 2],
    pub(super) in_flight: u64,
    io_ticks_ns: u64,
    last_ns: u64,
}

impl Counters {
    /// Integrates io_ticks up to `now` (call before in_flight changes).
    #[inline]
    fn acct(&mut self, now: u64) {
        let dt = now.saturating_sub(self.last_ns);
        if self.in_flight > 0 {
            self.io_ticks_ns += dt;
        }
        self.last_ns = now;
    }

    /// An I/O (request, or dm bio) started.
    #[inline]
    pub(super) fn started(&mut self, now: u64) {
        self.acct(now);
        self.in_flight += 1;
    }

    /// An I/O started at `start_ns` completed.
    #[inline]
    pub(super) fn io_done(&mut self, dir: Dir, sectors: u64, start_ns: u64, now: u64) {
        self.acct(now);
        self.in_flight -= 1;
        self.ios[dir.idx()] += 1;
        self.sectors[dir.idx()] += sectors;
        self.ticks_ns[dir.idx()] += now - start_ns;
    }

    /// The 17 `stat` fields as of `now`, as the kernel prints them.
    fn stat(&mut self, now: u64) -> StatFields {
        self.acct(now);
        let ms = |ns: u64| (ns / 1_000_000) as u32 as u64;
        let values = [
            self.ios[0],
            self.merges[0],
            self.sectors[0],
            ms(self.ticks_ns[0]),
            self.ios[1],
            self.merges[1],
            self.sectors[1],
            ms(self.ticks_ns[1]),
            self.in_flight,
            ms(self.io_ticks_ns),
            ms(self.ticks_ns[0] + self.ticks_ns[1]),
            0,
            0,
            0,
            0,
            0,
            0,
        ];
        StatFields {
            values,
            field_count: MAX_FIELDS as u8,
        }
    }
}

/// What one device did during one phase.
#[derive(Debug, Clone, Default)]
pub struct PhaseAcc {
    pub bios: [u64; 2],
    pub merged: [u64; 2],
    pub completed: [u64; 2],
    pub sectors: [u64; 2],
    pub lat: [Histogram; 2],
    /// CPU of the block-layer steps, in the scenario's own currency.
    pub cycles: u64,
    /// The same steps priced in the other shipped profile (`Costs::second`).
    pub cycles_second: u64,
}

impl PhaseAcc {
    #[inline]
    pub(super) fn io_done(&mut self, dir: Dir, sectors: u64) {
        self.completed[dir.idx()] += 1;
        self.sectors[dir.idx()] += sectors;
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PhaseInfo {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// A change of `queue/nomerges`, for the report's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NomergesChange {
    pub at_ms: u64,
    pub device: String,
    pub value: u8,
}

impl Simulation {
    /// Prices `n` of `step` on device `d` (its current scheduler's price) into phase `ph`,
    /// in both currencies.
    #[inline]
    pub(super) fn charge(&mut self, ph: usize, d: usize, step: Step, n: u64) {
        let sched = self.devs[d].sched;
        let k = sched.index();
        let acc = &mut self.acc[ph][d];
        let spent = self.costs.primary.by_sched[k].step(step) * n;
        acc.cycles += spent;
        acc.cycles_second += self.costs.second.by_sched[k].step(step) * n;
        if self.merge_meter.on {
            self.merge_meter.charge(d, sched, step, spent);
        }
    }

    /// The 17 `stat` fields of a device as of now.
    pub fn device_stat(&mut self, dev: &str) -> Option<StatFields> {
        let d = self.dev_index(dev)?;
        Some(self.stat_of(d))
    }

    pub(crate) fn stat_of(&mut self, d: usize) -> StatFields {
        let now = self.now_ns;
        self.devs[d].cnt.stat(now)
    }

    pub fn phase_acc(&self, phase: usize, dev: &str) -> Option<&PhaseAcc> {
        let d = self.dev_index(dev)?;
        self.acc.get(phase)?.get(d)
    }

    pub fn phases(&self) -> &[PhaseInfo] {
        &self.phases
    }

    pub fn nomerges_log(&self) -> &[NomergesChange] {
        &self.nomerges_log
    }

    /// Names of the two currencies the steps are priced in: the scenario's own and the
    /// other shipped profile's (`PhaseAcc::cycles`, `PhaseAcc::cycles_second`).
    pub fn cost_names(&self) -> (&str, &str) {
        (&self.costs.primary.name, &self.costs.second.name)
    }

    /// Writes of `queue/nomerges` so far and the total time they kept queues frozen, ns.
    pub fn nomerges_freezes(&self) -> (u64, u64) {
        (self.nomerges_writes, self.nomerges_frozen_ns)
    }
}
