//! The submit path: how a bio enters a device's queue.
//!
//! Every bio, whoever made it (a job's generator, a trace replay, a hand submission, a dm
//! split), enters a device through one function, [`Simulation::submit_bio`], the
//! simulator's `submit_bio_noacct` (where the kernel fires `block_bio_queue`). From there a
//! dm device splits it (dm.rs); a request-based device runs [`Simulation::rq_submit`],
//! blk-mq's order: wait out a `queue/nomerges` freeze, then unless nomerges=2 the plug
//! merge (plug.rs), then the elevator's one-hit, hash and front lookups (elevator.rs); a
//! bio that merged nowhere allocates a request, which joins the plug or is inserted.

use super::slab::Bio;
use super::{BioSpec, MAX_IN_FLIGHT_BIOS, SimError, Simulation};
use crate::cost::Step;
use mergetune_kernel::trace::{Dir, EventKind};

impl Simulation {
    /// Submits bios by hand at the current time, all under one plug, from a built-in
    /// submitter (no queue-depth limit). For tests and crafted streams.
    pub fn submit_plugged(&mut self, dev: &str, bios: &[BioSpec]) -> Result<(), SimError> {
        let d = self
            .dev_index(dev)
            .ok_or_else(|| SimError::UnknownDevice(dev.into()))? as u32;
        self.plug_start(0);
        for s in bios {
            let nr = s.nr_sectors.max(1);
            self.new_bio(0, d, s.dir, true, s.sector, nr);
        }
        self.flush_plug(0);
        Ok(())
    }

    /// A new bio from job `j`, submitted now; at the in-flight cap the run halts instead.
    pub(super) fn new_bio(
        &mut self,
        j: usize,
        dev: u32,
        dir: Dir,
        sync: bool,
        sector: u64,
        nr: u32,
    ) {
        if self.bios.live() >= MAX_IN_FLIGHT_BIOS {
            self.halt_in_flight(j);
            return;
        }
        let b = self.bios.alloc(Bio {
            submit_ns: self.now_ns,
            ..Bio::new(j as u32, dev, dir, sync, sector, nr)
        });
        self.jobs[j].outstanding += 1;
        self.total_bios += 1;
        self.submit_bio(b, j);
    }

    /// Stops the simulation at the in-flight cap: every job stops submitting and no
    /// further event is processed.
    fn halt_in_flight(&mut self, j: usize) {
        if self.halted.is_none() {
            self.halted = Some(SimError::TooManyInFlight {
                cap: MAX_IN_FLIGHT_BIOS,
                at_ms: self.now_ns / 1_000_000,
                job: self.jobs[j].name.clone(),
            });
        }
        for job in &mut self.jobs {
            job.active = false;
        }
    }

    /// Bio `b` (from job `j`'s context, under its plug if one is active) enters the queue
    /// of device `self.bios[b].dev`. The one entry point of every bio into every device,
    /// dm pieces included: the place to observe what is submitted.
    pub(super) fn submit_bio(&mut self, b: u32, j: usize) {
        let d = self.bios[b as usize].dev as usize;
        if self.devs[d].media.is_dm() {
            self.dm_submit(b, j);
        } else {
            self.rq_submit(b, j);
        }
    }

    /// Bio `b` on a request-based device: merge it or make it a request.
    pub(super) fn rq_submit(&mut self, b: u32, j: usize) {
        let bio = self.bios[b as usize];
        let d = bio.dev as usize;
        if self.devs[d].nm_freeze.frozen {
            // bio_queue_enter: wait for the freeze to end (try_unfreeze resubmits here).
            self.devs[d].nm_freeze.waiting.push((b, j as u32));
            return;
        }
        let ph = self.cur_phase;
        let eff = self.devs[d].eff_nomerges();
        self.acc[ph][d].bios[bio.dir.idx()] += 1;
        if eff < 2 && (self.try_plug_merge(b, j, d) || self.try_elevator_merge(b, d, eff)) {
            return;
        }
        self.charge(ph, d, Step::RequestAlloc, 1);
        let now = self.now_ns;
        self.devs[d].cnt.started(now);
        let r = self.reqs.alloc(&mut self.bios, b, now);
        // sense: a request made for a bio is what the kernel's block_getrq reports.
        self.taps.record(
            d,
            now,
            EventKind::GetRq,
            bio.dir,
            bio.sector,
            bio.nr_sectors,
        );
        self.plug_add(j, r);
    }
}
