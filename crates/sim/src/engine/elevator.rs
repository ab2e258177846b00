//! The elevator's merge lookups: where a bio finds a queued request to join.
//!
//! Per device, the requests waiting in the scheduler are indexed three ways, as blk-mq and
//! the elevator core index them: the one-hit `last_merge` cache, the back-merge hash keyed
//! by a request's end sector, and a per-direction tree ordered by start sector (the
//! front-merge lookup, and mq-deadline's sector order). The FIFOs hold `(request,
//! generation)` and are cleaned lazily: an entry whose request was dispatched, freed or
//! reallocated is skipped when it reaches the head.
//!
//! [`Simulation::try_merge`] is the one place a bio joins a request, for the plug
//! (plug.rs) and for the lookups here alike; it honours the size and segment limits and
//! counts the merge.

use super::Simulation;
use super::slab::{NIL, ReqSlab, ReqState, Request};
use crate::cost::Step;
use mergetune_kernel::scheduler::Scheduler;
use mergetune_kernel::trace::{Dir, EventKind};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// A fast hash for u64 keys (end sectors): std's SipHash costs more than the lookup.
#[derive(Default, Clone, Copy)]
struct U64Hasher(u64);
impl Hasher for U64Hasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}
type FastMap<V> = HashMap<u64, V, BuildHasherDefault<U64Hasher>>;

/// One device's queued requests, indexed for merging and dispatch.
pub(super) struct Elevator {
    /// The one-hit cache (`q->last_merge`), or NIL.
    pub(super) last_merge: u32,
    /// End sector -> request, for back merges.
    hash: FastMap<u32>,
    /// Per direction, (start sector, request): front merges and sector order.
    sorted: [BTreeSet<(u64, u32)>; 2],
    /// The scheduler's FIFOs (which one a request joins is [`super::sched::fifo_of`]).
    fifo: [VecDeque<(u32, u32)>; 2],
    /// Requests waiting in the scheduler.
    pub(super) queued: u32,
}

impl Elevator {
    pub(super) fn new() -> Elevator {
        Elevator {
            last_merge: NIL,
            hash: FastMap::default(),
            sorted: [BTreeSet::new(), BTreeSet::new()],
            fifo: [VecDeque::new(), VecDeque::new()],
            queued: 0,
        }
    }

    /// Indexes queued request `r` in FIFO `q`; it becomes the one-hit candidate when there
    /// is none and merging is not off.
    #[inline]
    pub(super) fn add(&mut self, r: u32, rq: &Request, q: usize, cache_ok: bool) {
        self.fifo[q].push_back((r, rq.generation));
        self.hash.insert(rq.end_sector(), r);
        self.sorted[rq.dir.idx()].insert((rq.sector, r));
        self.queued += 1;
        if self.last_merge == NIL && cache_ok {
            self.last_merge = r;
        }
    }

    /// Takes request `r` out of the merge indexes (its FIFO entry goes stale).
    #[inline]
    pub(super) fn remove(&mut self, r: u32, rq: &Request) {
        let end = rq.end_sector();
        if self.hash.get(&end) == Some(&r) {
            self.hash.remove(&end);
        }
        self.sorted[rq.dir.idx()].remove(&(rq.sector, r));
        self.queued -= 1;
        if self.last_merge == r {
            self.last_merge = NIL;
        }
    }

    /// Empties the elevator, returning the queued requests as `(insert time, request)` in
    /// FIFO order (a scheduler switch carries them over).
    pub(super) fn take_queued(&mut self, reqs: &ReqSlab) -> Vec<(u64, u32)> {
        let mut pending: Vec<(u64, u32)> = Vec::new();
        for q in 0..2 {
            while let Some((r, g)) = self.fifo[q].pop_front() {
                if reqs.is_queued(r, g) {
                    pending.push((reqs[r as usize].insert_ns, r));
                }
            }
        }
        pending.sort_unstable();
        self.hash.clear();
        self.sorted[0].clear();
        self.sorted[1].clear();
        self.queued = 0;
        self.last_merge = NIL;
        pending
    }

    /// The oldest live request of FIFO `q`, left in place.
    #[inline]
    pub(super) fn fifo_peek(&mut self, q: usize, reqs: &ReqSlab) -> Option<u32> {
        while let Some(&(r, g)) = self.fifo[q].front() {
            if reqs.is_queued(r, g) {
                return Some(r);
            }
            self.fifo[q].pop_front();
        }
        None
    }

    #[inline]
    pub(super) fn fifo_pop(&mut self, q: usize, reqs: &ReqSlab) -> Option<u32> {
        let r = self.fifo_peek(q, reqs)?;
        self.fifo[q].pop_front();
        Some(r)
    }

    /// Whether any request of direction `dir` is queued.
    #[inline]
    pub(super) fn has_queued(&self, dir: Dir) -> bool {
        !self.sorted[dir.idx()].is_empty()
    }

    /// The first queued request of `dir` starting at or after `pos` (mq-deadline's
    /// `next_rq`).
    #[inline]
    pub(super) fn next_from(&self, dir: Dir, pos: u64) -> Option<u32> {
        self.sorted[dir.idx()]
            .range((pos, 0)..)
            .next()
            .map(|&(_, r)| r)
    }

    /// A queued request ending at `sector` (back-merge hash).
    #[inline]
    fn ending_at(&self, sector: u64) -> Option<u32> {
        self.hash.get(&sector).copied()
    }

    /// A queued request of `dir` starting at `end` (front-merge lookup).
    #[inline]
    fn starting_at(&self, dir: Dir, end: u64) -> Option<u32> {
        self.sorted[dir.idx()]
            .range((end, 0)..=(end, u32::MAX))
            .next()
            .map(|&(_, r)| r)
    }

    /// Re-keys queued request `r` after a back merge moved its end.
    #[inline]
    fn moved_end(&mut self, r: u32, old_end: u64, new_end: u64) {
        if self.hash.get(&old_end) == Some(&r) {
            self.hash.remove(&old_end);
        }
        self.hash.insert(new_end, r);
    }

    /// Re-keys queued request `r` after a front merge moved its start.
    #[inline]
    fn moved_start(&mut self, r: u32, dir: Dir, old_start: u64, new_start: u64) {
        let set = &mut self.sorted[dir.idx()];
        set.remove(&(old_start, r));
        set.insert((new_start, r));
    }
}

impl Simulation {
    /// The elevator's lookups for bio `b` on device `d` after the plug missed: the one-hit
    /// cache, then (nomerges=0 only) the back-merge hash and the front-merge lookup
    /// (mq-deadline: only with front_merges=1). Each lookup is charged whether or not it
    /// finds anything. True if the bio merged.
    #[inline]
    pub(super) fn try_elevator_merge(&mut self, b: u32, d: usize, eff_nomerges: u8) -> bool {
        let ph = self.cur_phase;
        let bio = self.bios[b as usize];
        self.charge(ph, d, Step::OneHit, 1);
        let lm = self.devs[d].elv.last_merge;
        if lm != NIL && self.try_merge(lm, b, true) {
            self.charge(ph, d, Step::Merge, 1);
            return true;
        }
        if eff_nomerges != 0 {
            return false;
        }
        // Nothing queued means nothing to find: the lookups are still charged (the
        // kernel does them), but the simulator skips the work.
        let queued = self.devs[d].elv.queued > 0;
        self.charge(ph, d, Step::HashLookup, 1);
        if queued
            && let Some(r) = self.devs[d].elv.ending_at(bio.sector)
            && self.try_merge(r, b, false)
        {
            self.devs[d].elv.last_merge = r;
            self.charge(ph, d, Step::Merge, 1);
            return true;
        }
        let dev = &self.devs[d];
        let front_ok = dev.sched != Scheduler::MqDeadline || dev.tun.front_merges == 1;
        if front_ok {
            self.charge(ph, d, Step::FrontLookup, 1);
            let end = bio.sector + bio.nr_sectors as u64;
            let hit = if queued {
                self.devs[d].elv.starting_at(bio.dir, end)
            } else {
                None
            };
            if let Some(r) = hit
                && self.try_merge(r, b, true)
            {
                self.devs[d].elv.last_merge = r;
                self.charge(ph, d, Step::Merge, 1);
                return true;
            }
        }
        false
    }

    /// Tries to merge bio `b` into request `r` (back, or front if allowed): same device
    /// and direction, the request still plugged or queued, within `max_sectors_kb` and
    /// `max_segments`, and (slice scheduler) the same sync class.
    pub(super) fn try_merge(&mut self, r: u32, b: u32, allow_front: bool) -> bool {
        let bio = self.bios[b as usize];
        let rq = self.reqs[r as usize];
        if rq.dev != bio.dev
            || rq.dir != bio.dir
            || !matches!(rq.state, ReqState::Plugged | ReqState::Queued)
        {
            return false;
        }
        let d = rq.dev as usize;
        let dev = &self.devs[d];
        if dev.sched == Scheduler::Bfq && rq.sync != bio.sync {
            return false;
        }
        let max_sectors = dev.max_sectors_kb as u64 * 2;
        if rq.nr_sectors as u64 + bio.nr_sectors as u64 > max_sectors
            || rq.nr_segs + 1 > dev.max_segments
        {
            return false;
        }
        let queued = rq.state == ReqState::Queued;
        let kind;
        if rq.end_sector() == bio.sector {
            kind = EventKind::BackMerge;
            let old_end = rq.end_sector();
            let new_end = old_end + bio.nr_sectors as u64;
            self.bios[rq.last_bio as usize].next = b;
            self.bios[b as usize].next = NIL;
            let rqm = &mut self.reqs[r as usize];
            rqm.last_bio = b;
            rqm.nr_sectors += bio.nr_sectors;
            rqm.nr_segs += 1;
            if queued {
                self.devs[d].elv.moved_end(r, old_end, new_end);
            }
        } else if allow_front && bio.sector + bio.nr_sectors as u64 == rq.sector {
            kind = EventKind::FrontMerge;
            self.bios[b as usize].next = rq.first_bio;
            let rqm = &mut self.reqs[r as usize];
            rqm.first_bio = b;
            rqm.sector = bio.sector;
            rqm.nr_sectors += bio.nr_sectors;
            rqm.nr_segs += 1;
            if queued {
                self.devs[d]
                    .elv
                    .moved_start(r, rq.dir, rq.sector, bio.sector);
            }
        } else {
            return false;
        }
        self.devs[d].cnt.merges[bio.dir.idx()] += 1;
        self.acc[self.cur_phase][d].merged[bio.dir.idx()] += 1;
        // sense: what the kernel's block_bio_backmerge / block_bio_frontmerge report.
        let now = self.now_ns;
        self.taps
            .record(d, now, kind, bio.dir, bio.sector, bio.nr_sectors);
        true
    }
}
