//! The simulator's bio tap: the same events the kernel's `block_bio_queue` tracepoint gives,
//! through the same [`mergetune_kernel::blockfs::BlockFs`] seam, so the daemon's sensing at L3
//! is tested in virtual time exactly as it runs on a real machine.
//!
//! The engine calls [`Taps::record`] for every bio it submits to a device (a dm device's
//! bio and each piece it splits into on a member, as the kernel traces both). A device
//! records only while its tap is open, into a bounded queue (the ring buffer of a real
//! tap): when it is full the oldest events are overwritten and counted as lost, like
//! tracefs' `[LOST N EVENTS]`. With no tap open a record is one branch.

use mergetune_kernel::biosense::{QueuedBio, TapDrain};
use mergetune_kernel::trace::Dir;
use std::collections::VecDeque;

/// The most events one simulated tap holds between drains (about a 512 KiB ring buffer).
pub const SIM_TAP_CAPACITY: usize = 8192;

#[derive(Debug, Default)]
struct Tap {
    bios: VecDeque<QueuedBio>,
    lost: u64,
}

/// The open taps of a simulation, indexed like its devices.
#[derive(Debug, Default)]
pub struct Taps {
    by_dev: Vec<Option<Tap>>,
    open: usize,
}

impl Taps {
    /// Records one bio queued on device `d` at `t_ns`, if its tap is open.
    #[inline]
    pub fn record(&mut self, d: usize, t_ns: u64, dir: Dir, sector: u64, nr_sectors: u32) {
        if self.open == 0 {
            return;
        }
        let Some(Some(tap)) = self.by_dev.get_mut(d) else {
            return;
        };
        if tap.bios.len() >= SIM_TAP_CAPACITY {
            tap.bios.pop_front();
            tap.lost += 1;
        }
        tap.bios.push_back(QueuedBio {
            t_ns,
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

    /// Moves up to `max` recorded bios of `d` into `out`; None if its tap is not open.
    pub fn drain(&mut self, d: usize, out: &mut Vec<QueuedBio>, max: usize) -> Option<TapDrain> {
        let tap = self.by_dev.get_mut(d)?.as_mut()?;
        let take = tap.bios.len().min(max);
        out.extend(tap.bios.drain(..take));
        let dropped = tap.bios.len() as u64;
        tap.bios.clear();
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
        t.record(0, 1, Dir::Read, 0, 8);
        t.open(1);
        t.record(0, 2, Dir::Read, 0, 8);
        for i in 0..(SIM_TAP_CAPACITY as u64 + 3) {
            t.record(1, i, Dir::Write, i * 8, 8);
        }
        let mut out = Vec::new();
        assert!(t.drain(0, &mut out, 10).is_none());
        let d = t.drain(1, &mut out, usize::MAX).unwrap();
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
        t.record(1, 0, Dir::Write, 0, 8);
        t.record(1, 0, Dir::Write, 8, 8);
        assert_eq!(
            t.drain(1, &mut out, 1),
            Some(TapDrain {
                lost: 0,
                dropped: 1
            })
        );
        t.close(1);
        t.record(1, 0, Dir::Write, 0, 8);
        assert!(!t.is_open(1));
        assert_eq!(t.open, 0);
    }
}
