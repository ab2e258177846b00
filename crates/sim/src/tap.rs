//! The simulator's bio tap: the same events the kernel's `block_getrq`, `block_rq_issue`
//! and bio merge tracepoints give, through the same [`mergetune_kernel::blockfs::BlockFs`] seam, so the
//! daemon's sensing at L3 is tested in virtual time exactly as it runs on a real machine.
//!
//! The engine calls [`Taps::record`] when it makes a request for a bio on a request-based
//! device (after the plug and elevator merges; at nomerges=2, for every bio) and when it
//! dispatches one to the media, and when a bio merges into a request (never at nomerges=2;
//! a dm device makes no requests: its members' are recorded, as the kernel traces them). A device records only while its tap is open, into a bounded
//! queue (the ring buffer of a real tap): when it is full the oldest events are overwritten
//! and counted as lost, like tracefs' `[LOST N EVENTS]`. With no tap open a record is one
//! branch.

use mergetune_kernel::biosense::{TapBatch, TapDrain, TapEvent};
use mergetune_kernel::trace::{Dir, EventKind};
use std::collections::VecDeque;

/// The most events one simulated tap holds between drains (about a 512 KiB ring buffer).
pub const SIM_TAP_CAPACITY: usize = 8192;

#[derive(Debug, Default)]
struct Tap {
    events: VecDeque<TapEvent>,
    lost: u64,
}

/// The open taps of a simulation, indexed like its devices.
#[derive(Debug, Default)]
pub struct Taps {
    by_dev: Vec<Option<Tap>>,
    open: usize,
}

impl Taps {
    /// Records one event of device `d` at `t_ns` (a request made or issued), if its tap is
    /// open.
    #[inline]
    pub fn record(
        &mut self,
        d: usize,
        t_ns: u64,
        kind: EventKind,
        dir: Dir,
        sector: u64,
        nr_sectors: u32,
    ) {
        if self.open == 0 {
            return;
        }
        let Some(Some(tap)) = self.by_dev.get_mut(d) else {
            return;
        };
        if tap.events.len() >= SIM_TAP_CAPACITY {
            tap.events.pop_front();
            tap.lost += 1;
        }
        tap.events.push_back(TapEvent {
            t_ns,
            kind,
            dir,
            sector,
            nr_sectors,
        });
    }

    /// Opens (or reopens, empty) the tap of device `d`.
    pub fn open(&mut self, d: usize) {
        if self.by_dev.len() <= d {
            self.by_dev.resize_with(d + 1, || None);
        }
        if self.by_dev[d].is_none() {
            self.open += 1;
        }
        self.by_dev[d] = Some(Tap::default());
    }

    pub fn is_open(&self, d: usize) -> bool {
        matches!(self.by_dev.get(d), Some(Some(_)))
    }

    /// Moves the recorded events of `d` into the batch, up to the one before the
    /// `max + 1`-th request made (the rest is thrown away, as the real tap stops reading at
    /// its cap); None if its tap is not open.
    pub fn drain(&mut self, d: usize, TapBatch { out, max }: TapBatch<'_>) -> Option<TapDrain> {
        let tap = self.by_dev.get_mut(d)?.as_mut()?;
        let mut made = 0;
        let take = tap
            .events
            .iter()
            .position(|e| {
                made += usize::from(e.counts_as_bio());
                made > max
            })
            .unwrap_or(tap.events.len());
        out.extend(tap.events.drain(..take));
        let dropped = tap.events.iter().filter(|e| e.counts_as_bio()).count() as u64;
        tap.events.clear();
        let lost = std::mem::take(&mut tap.lost);
        Some(TapDrain { lost, dropped })
    }

    pub fn close(&mut self, d: usize) {
        if let Some(slot) = self.by_dev.get_mut(d)
            && slot.take().is_some()
        {
            self.open -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_open_taps_record_and_a_full_one_loses_the_oldest() {
        let mut t = Taps::default();
        let made = EventKind::GetRq;
        t.record(0, 1, made, Dir::Read, 0, 8);
        t.open(1);
        t.record(0, 2, made, Dir::Read, 0, 8);
        for i in 0..(SIM_TAP_CAPACITY as u64 + 3) {
            t.record(1, i, made, Dir::Write, i * 8, 8);
        }
        let mut out = Vec::new();
        assert!(t.drain(0, TapBatch::new(&mut out, 10)).is_none());
        let d = t.drain(1, TapBatch::new(&mut out, usize::MAX)).unwrap();
        assert_eq!(
            d,
            TapDrain {
                lost: 3,
                dropped: 0
            }
        );
        assert_eq!(out.len(), SIM_TAP_CAPACITY);
        assert_eq!(out[0].sector, 24);
        // Drained: the next drain starts empty; a closed tap records nothing.
        out.clear();
        // The cap counts requests made: an issue after the first is kept with it.
        t.record(1, 0, made, Dir::Write, 0, 8);
        t.record(1, 0, EventKind::Issue, Dir::Write, 0, 8);
        t.record(1, 0, made, Dir::Write, 8, 8);
        assert_eq!(
            t.drain(1, TapBatch::new(&mut out, 1)),
            Some(TapDrain {
                lost: 0,
                dropped: 1
            })
        );
        assert_eq!(out.len(), 2);
        t.close(1);
        t.record(1, 0, made, Dir::Write, 0, 8);
        assert!(!t.is_open(1));
        assert_eq!(t.open, 0);
    }
}
