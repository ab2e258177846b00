//! mq-deadline's dispatch (`dd_dispatch_request`, without priorities or zones).
//!
//! Per direction a FIFO (the elevator's FIFO `dir`) and sector order (the elevator's
//! sorted tree). Requests go out in batches of `fifo_batch` in sector order from where the
//! last one ended; a new batch prefers reads, but switches to writes once reads have been
//! chosen `writes_starved` times while writes waited; it starts at the FIFO head when that
//! request's `read_expire`/`write_expire` has passed.

use super::elevator::Elevator;
use super::sched::Tunables;
use super::slab::{ReqSlab, Request};
use mergetune_kernel::trace::Dir;

/// mq-deadline's per-device state.
pub(super) struct Deadline {
    last_dir: Dir,
    /// Requests dispatched in the current batch.
    batching: u64,
    /// Batches given to reads while writes waited.
    starved: u64,
    /// Per direction, the sector after the last dispatched request.
    next_pos: [u64; 2],
}

impl Deadline {
    pub(super) fn new() -> Deadline {
        Deadline {
            last_dir: Dir::Read,
            batching: 0,
            starved: 0,
            next_pos: [0, 0],
        }
    }

    /// The next request to dispatch, or None when nothing is queued.
    pub(super) fn select(
        &mut self,
        elv: &mut Elevator,
        reqs: &ReqSlab,
        tun: &Tunables,
        now_ns: u64,
    ) -> Option<u32> {
        if self.batching < tun.fifo_batch
            && let Some(r) = elv.next_from(self.last_dir, self.next_pos[self.last_dir.idx()])
        {
            return Some(r);
        }
        let reads = elv.has_queued(Dir::Read);
        let writes = elv.has_queued(Dir::Write);
        let dir = if reads {
            let starved = self.starved;
            if writes {
                self.starved += 1;
            }
            if writes && starved >= tun.writes_starved {
                self.starved = 0;
                Dir::Write
            } else {
                Dir::Read
            }
        } else if writes {
            self.starved = 0;
            Dir::Write
        } else {
            return None;
        };
        let expire_ms = if dir == Dir::Read {
            tun.read_expire
        } else {
            tun.write_expire
        };
        self.batching = 0;
        self.last_dir = dir;
        let head = elv.fifo_peek(dir.idx(), reqs)?;
        let expired = reqs[head as usize]
            .insert_ns
            .saturating_add(expire_ms.saturating_mul(1_000_000))
            <= now_ns;
        if expired {
            return Some(head);
        }
        Some(elv.next_from(dir, self.next_pos[dir.idx()]).unwrap_or(head))
    }

    /// Request `rq` went to the device: it extends or starts a batch.
    #[inline]
    pub(super) fn dispatched(&mut self, rq: &Request) {
        if self.last_dir == rq.dir {
            self.batching += 1;
        } else {
            self.last_dir = rq.dir;
            self.batching = 1;
        }
        self.next_pos[rq.dir.idx()] = rq.end_sector();
    }
}
