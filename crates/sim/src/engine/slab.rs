//! The slabs: bios and requests live in vectors with free lists, addressed by `u32` index.
//!
//! Only what is in flight exists: a freed slot is reused by the next allocation, so memory
//! follows the number of bios in flight, never the run length, and no allocation happens
//! per bio once the slabs have grown. `NIL` ends every list.

use mergetune_kernel::trace::Dir;
use std::ops::{Index, IndexMut};

pub(crate) const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
pub(super) struct Bio {
    pub(super) job: u32,
    pub(super) dev: u32,
    pub(super) dir: Dir,
    pub(super) sync: bool,
    pub(super) sector: u64,
    pub(super) nr_sectors: u32,
    pub(super) submit_ns: u64,
    /// The dm bio this piece was split from, or NIL.
    pub(super) parent: u32,
    /// dm bios: pieces still in flight.
    pub(super) remaining: u32,
    /// Next bio of the same request, or the free list.
    pub(super) next: u32,
}

impl Bio {
    /// A bio that is not yet part of any request or split.
    #[inline]
    pub(super) fn new(job: u32, dev: u32, dir: Dir, sync: bool, sector: u64, nr: u32) -> Bio {
        Bio {
            job,
            dev,
            dir,
            sync,
            sector,
            nr_sectors: nr,
            submit_ns: 0,
            parent: NIL,
            remaining: 0,
            next: NIL,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReqState {
    Free,
    Plugged,
    Queued,
    InFlight,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Request {
    pub(super) dev: u32,
    pub(super) dir: Dir,
    pub(super) sync: bool,
    pub(super) state: ReqState,
    pub(super) sector: u64,
    pub(super) nr_sectors: u32,
    pub(super) nr_segs: u32,
    pub(super) first_bio: u32,
    pub(super) last_bio: u32,
    pub(super) alloc_ns: u64,
    pub(super) insert_ns: u64,
    /// Bumped at every allocation: FIFO entries carry it so stale entries are skipped.
    pub(super) generation: u32,
    pub(super) next_free: u32,
}

impl Request {
    #[inline]
    pub(super) fn end_sector(&self) -> u64 {
        self.sector + self.nr_sectors as u64
    }
}

/// Bios, with the count of those alive (for the in-flight cap).
pub(super) struct BioSlab {
    items: Vec<Bio>,
    free: u32,
    live: usize,
}

impl BioSlab {
    pub(super) fn new() -> BioSlab {
        BioSlab {
            items: Vec::new(),
            free: NIL,
            live: 0,
        }
    }

    /// Bios allocated and not yet freed.
    #[inline]
    pub(super) fn live(&self) -> usize {
        self.live
    }

    #[inline]
    pub(super) fn alloc(&mut self, bio: Bio) -> u32 {
        self.live += 1;
        if self.free != NIL {
            let i = self.free;
            self.free = self.items[i as usize].next;
            self.items[i as usize] = bio;
            i
        } else {
            self.items.push(bio);
            (self.items.len() - 1) as u32
        }
    }

    #[inline]
    pub(super) fn free(&mut self, b: u32) {
        self.live -= 1;
        self.items[b as usize].next = self.free;
        self.free = b;
    }
}

impl Index<usize> for BioSlab {
    type Output = Bio;
    #[inline]
    fn index(&self, i: usize) -> &Bio {
        &self.items[i]
    }
}

impl IndexMut<usize> for BioSlab {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut Bio {
        &mut self.items[i]
    }
}

pub(super) struct ReqSlab {
    items: Vec<Request>,
    free: u32,
}

impl ReqSlab {
    pub(super) fn new() -> ReqSlab {
        ReqSlab {
            items: Vec::new(),
            free: NIL,
        }
    }

    /// A plugged request holding bio `b` alone, allocated at `now_ns`.
    #[inline]
    pub(super) fn alloc(&mut self, bios: &mut BioSlab, b: u32, now_ns: u64) -> u32 {
        let bio = bios[b as usize];
        let r = if self.free != NIL {
            let i = self.free;
            self.free = self.items[i as usize].next_free;
            i
        } else {
            self.items.push(Request {
                dev: 0,
                dir: Dir::Read,
                sync: true,
                state: ReqState::Free,
                sector: 0,
                nr_sectors: 0,
                nr_segs: 0,
                first_bio: NIL,
                last_bio: NIL,
                alloc_ns: 0,
                insert_ns: 0,
                generation: 0,
                next_free: NIL,
            });
            (self.items.len() - 1) as u32
        };
        let rq = &mut self.items[r as usize];
        rq.dev = bio.dev;
        rq.dir = bio.dir;
        rq.sync = bio.sync;
        rq.state = ReqState::Plugged;
        rq.sector = bio.sector;
        rq.nr_sectors = bio.nr_sectors;
        rq.nr_segs = 1;
        rq.first_bio = b;
        rq.last_bio = b;
        rq.alloc_ns = now_ns;
        rq.generation = rq.generation.wrapping_add(1);
        bios[b as usize].next = NIL;
        r
    }

    #[inline]
    pub(super) fn free(&mut self, r: u32) {
        let rq = &mut self.items[r as usize];
        rq.state = ReqState::Free;
        rq.next_free = self.free;
        self.free = r;
    }

    /// Whether a FIFO entry `(r, generation)` still names a queued request.
    #[inline]
    pub(super) fn is_queued(&self, r: u32, generation: u32) -> bool {
        let rq = &self.items[r as usize];
        rq.generation == generation && rq.state == ReqState::Queued
    }
}

impl Index<usize> for ReqSlab {
    type Output = Request;
    #[inline]
    fn index(&self, i: usize) -> &Request {
        &self.items[i]
    }
}

impl IndexMut<usize> for ReqSlab {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut Request {
        &mut self.items[i]
    }
}
