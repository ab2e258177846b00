//! A request's life after the plug: insertion, dispatch to the device, completion.
//!
//! An inserted request goes straight to the device when a tag is free and nothing is
//! queued (so under no tag pressure, unbatched I/O never merges, as measured on the real
//! kernel); otherwise it waits in the elevator, where later bios can merge into it, until
//! the device's scheduler picks it (FIFO for none and kyber, deadline.rs, slice.rs). The
//! media (media.rs) says when it completes; completion frees the tag, ends every bio of
//! the request (and a dm bio with its last piece) and lets their jobs submit again.

use super::Simulation;
use super::queue::EvKind;
use super::slab::{NIL, ReqState};
use crate::cost::Step;
use mergetune_kernel::scheduler::Scheduler;
use mergetune_kernel::trace::EventKind;

impl Simulation {
    /// A request leaves the plug (or was never plugged).
    pub(super) fn insert(&mut self, r: u32) {
        let rq = self.reqs[r as usize];
        let d = rq.dev as usize;
        self.charge(self.cur_phase, d, Step::Insert, 1);
        let dev = &self.devs[d];
        if dev.elv.queued == 0
            && dev.busy_tags < dev.queue_depth
            && !dev.frozen
            && dev.sched != Scheduler::Bfq
        {
            // Nothing waiting and a tag free: straight through, no chance to merge.
            self.reqs[r as usize].state = ReqState::Queued;
            self.reqs[r as usize].insert_ns = self.now_ns;
            self.dispatch_req(r);
            return;
        }
        self.enqueue(r);
        if self.devs[d].sched == Scheduler::Bfq && rq.sync {
            self.devs[d].slice.sync_arrived();
        }
        self.run_dispatch(d);
    }

    /// Puts a request into the elevator (FIFO, hash, sorted tree) to wait.
    pub(super) fn enqueue(&mut self, r: u32) {
        let rq = &mut self.reqs[r as usize];
        rq.state = ReqState::Queued;
        rq.insert_ns = self.now_ns;
        let rq = *rq;
        let dev = &mut self.devs[rq.dev as usize];
        let q = super::sched::fifo_of(dev.sched, &rq);
        let cache_ok = dev.eff_nomerges() < 2;
        dev.elv.add(r, &rq, q, cache_ok);
    }

    /// Dispatches from device `d`'s scheduler while tags are free.
    pub(super) fn run_dispatch(&mut self, d: usize) {
        if self.devs[d].frozen {
            if self.devs[d].busy_tags > 0 {
                return;
            }
            self.devs[d].frozen = false;
        }
        loop {
            let now = self.now_ns;
            let dev = &mut self.devs[d];
            if dev.busy_tags >= dev.queue_depth || dev.elv.queued == 0 {
                return;
            }
            let r = match dev.sched {
                Scheduler::None | Scheduler::Kyber => dev.elv.fifo_pop(0, &self.reqs),
                Scheduler::MqDeadline => dev.dd.select(&mut dev.elv, &self.reqs, &dev.tun, now),
                Scheduler::Bfq => dev.slice.select(
                    d as u32,
                    &mut dev.elv,
                    &self.reqs,
                    &dev.tun,
                    now,
                    &mut self.events,
                ),
            };
            match r {
                Some(r) => {
                    let rq = self.reqs[r as usize];
                    self.devs[d].elv.remove(r, &rq);
                    self.dispatch_req(r);
                }
                None => return,
            }
        }
    }

    /// Device `d`'s slice idle timer of generation `gen_` fired.
    pub(super) fn idle_expired(&mut self, d: usize, gen_: u32) {
        if self.devs[d].slice.idle_timer(gen_) {
            self.run_dispatch(d);
        }
    }

    /// Request `r` takes a tag; its completion is scheduled.
    fn dispatch_req(&mut self, r: u32) {
        let rq = self.reqs[r as usize];
        let d = rq.dev as usize;
        let now = self.now_ns;
        self.reqs[r as usize].state = ReqState::InFlight;
        // sense: what the kernel's block_rq_issue reports.
        self.taps
            .record(d, now, EventKind::Issue, rq.dir, rq.sector, rq.nr_sectors);
        self.charge(self.cur_phase, d, Step::Dispatch, 1);
        let dev = &mut self.devs[d];
        dev.busy_tags += 1;
        match dev.sched {
            Scheduler::MqDeadline => dev.dd.dispatched(&rq),
            Scheduler::Bfq => dev.slice.dispatched(rq.sync),
            Scheduler::None | Scheduler::Kyber => {}
        }
        let end = dev.media.service_end_ns(
            &mut dev.servers,
            &rq,
            dev.capacity_sectors,
            &mut self.rng,
            now,
        );
        self.events.push(end, EvKind::Complete, r, 0);
    }

    /// Request `r` completed.
    pub(super) fn complete_req(&mut self, r: u32) {
        let rq = self.reqs[r as usize];
        let d = rq.dev as usize;
        let now = self.now_ns;
        let ph = self.cur_phase;
        let dev = &mut self.devs[d];
        dev.busy_tags -= 1;
        if dev.sched == Scheduler::Bfq {
            dev.slice.completed(rq.sync, now);
        }
        dev.cnt
            .io_done(rq.dir, rq.nr_sectors as u64, rq.alloc_ns, now);
        self.acc[ph][d].io_done(rq.dir, rq.nr_sectors as u64);
        self.charge(ph, d, Step::Completion, 1);
        self.reqs.free(r);
        let mut b = rq.first_bio;
        while b != NIL {
            let next = self.bios[b as usize].next;
            self.end_bio(b, d);
            b = next;
        }
        self.run_dispatch(d);
        self.try_unfreeze(d);
    }

    /// Bio `b` on device `d` ended: its latency is recorded and its submitter (a dm bio,
    /// or a job) learns of it.
    pub(super) fn end_bio(&mut self, b: u32, d: usize) {
        let bio = self.bios[b as usize];
        let now = self.now_ns;
        let ph = self.cur_phase;
        self.acc[ph][d].lat[bio.dir.idx()].record(now - bio.submit_ns);
        self.charge(ph, d, Step::BioComplete, 1);
        self.bios.free(b);
        if bio.parent != NIL {
            self.dm_piece_done(bio.parent);
        } else {
            self.job_bio_done(bio.job as usize);
        }
    }
}
