//! The plug: a submitter's private list of new requests, held back until the batch ends.
//!
//! Each job has one plug (fio's `iodepth_batch_submit` bios go out under it). While it is
//! active a new request joins it instead of the scheduler, and the next bio tries to merge
//! into the most recent plugged request for the same queue (`blk_attempt_plug_merge`: one
//! try; a plug can hold several queues, e.g. dm pieces). The plug is flushed at the end of
//! the batch or when it holds [`PLUG_MAX_REQUESTS`], inserting its requests in order.

use super::Simulation;
use crate::cost::Step;

/// blk-mq flushes a plug once it holds this many requests (BLK_MAX_REQUEST_COUNT).
pub(super) const PLUG_MAX_REQUESTS: usize = 32;

#[derive(Debug, Default)]
pub(super) struct Plug {
    /// Set while the job submits a batch.
    active: bool,
    reqs: Vec<u32>,
}

impl Plug {
    /// A plug sized for a full batch (no allocation while it fills).
    pub(super) fn for_batches() -> Plug {
        Plug {
            active: false,
            reqs: Vec::with_capacity(PLUG_MAX_REQUESTS),
        }
    }
}

impl Simulation {
    /// Job `j` starts a batch: its new requests wait in its plug.
    #[inline]
    pub(super) fn plug_start(&mut self, j: usize) {
        self.jobs[j].plug.active = true;
    }

    /// The plug merge for bio `b` on device `d` (charged whether or not it hits). True if
    /// the bio merged.
    #[inline]
    pub(super) fn try_plug_merge(&mut self, b: u32, j: usize, d: usize) -> bool {
        let ph = self.cur_phase;
        self.charge(ph, d, Step::PlugCheck, 1);
        let plug_rq = self.jobs[j]
            .plug
            .reqs
            .iter()
            .rev()
            .copied()
            .find(|&r| self.reqs[r as usize].dev == d as u32);
        if let Some(r) = plug_rq
            && self.try_merge(r, b, true)
        {
            self.charge(ph, d, Step::Merge, 1);
            return true;
        }
        false
    }

    /// A new request of job `j`: into its plug while one is active (flushing a full plug),
    /// else straight to the scheduler.
    #[inline]
    pub(super) fn plug_add(&mut self, j: usize, r: u32) {
        let plug = &mut self.jobs[j].plug;
        if plug.active {
            plug.reqs.push(r);
            if plug.reqs.len() >= PLUG_MAX_REQUESTS {
                self.flush_plug_list(j);
            }
        } else {
            self.insert(r);
        }
    }

    /// Inserts the plugged requests, oldest first; the plug stays active.
    fn flush_plug_list(&mut self, j: usize) {
        let mut list = std::mem::take(&mut self.jobs[j].plug.reqs);
        for &r in &list {
            self.insert(r);
        }
        list.clear();
        self.jobs[j].plug.reqs = list;
    }

    /// Job `j`'s batch ended: the plug is flushed and released.
    pub(super) fn flush_plug(&mut self, j: usize) {
        self.jobs[j].plug.active = false;
        self.flush_plug_list(j);
    }
}
