//! The event-driven core of the simulator: [`Simulation`], its constructor and its clock.
//!
//! Design: everything is an index into a slab (`bios`, `reqs`, `devs`, `jobs`), events sit
//! in one binary heap ordered by (time, sequence) so equal times replay in a fixed order, and
//! no allocation happens per bio once the slabs have grown to the number in flight. The
//! stages of blk-mq each have a file under `engine/`, in the order a bio meets them:
//!
//! - `jobs.rs`: generator and trace-replay jobs submit batches of bios under a plug;
//! - `submit.rs`: **`Simulation::submit_bio` is where every bio enters a device's queue**
//!   (job bios, hand submissions, dm pieces); `rq_submit` follows blk-mq's merge order;
//! - `dm.rs`: dm-linear / dm-stripe split a bio at chunk or member boundaries onto members;
//! - `plug.rs`: the per-job plug and its one-try plug merge;
//! - `elevator.rs`: the one-hit `last_merge` cache, the back-merge hash, the front-merge
//!   tree, the FIFOs, and `try_merge`, the one place a bio joins a request;
//! - `dispatch.rs`: insertion (straight to a free tag when nothing waits), dispatch,
//!   completion;
//! - `sched.rs`, `deadline.rs`, `slice.rs`: the schedulers (none/kyber FIFO, mq-deadline,
//!   the sync/async slice scheduler standing for bfq), each with its own state;
//! - `media.rs`: SSD and rotational service times;
//! - `device.rs`: a device's state and the sysfs writes (`queue/nomerges` with its freeze,
//!   scheduler switch, iosched tunables);
//! - `stats.rs`: the kernel's 17 `stat` counters and the report's per-phase accumulators;
//! - `queue.rs`, `slab.rs`: the event heap and the bio/request slabs.
//!
//! Merging follows nomerges exactly (docs/design.md): unless nomerges=2, the plug merge,
//! then the one-hit cache; at nomerges=0 also the hash and front lookups (mq-deadline: only
//! with front_merges=1). `none` and kyber merge the same at 0 and 1.

mod deadline;
mod device;
mod dispatch;
mod dm;
mod elevator;
mod jobs;
mod media;
mod plug;
mod queue;
pub(crate) mod sched;
mod slab;
mod slice;
mod stats;
mod submit;

use super::scenario::MAX_IN_FLIGHT_BIOS;
use super::scenario::{Scenario, secs_to_ns};
use crate::cost::Costs;
use crate::rng::SplitMix64;
use device::Device;
pub use dm::{DmTable, Piece};
use jobs::Job;
use mergetune_kernel::trace::Dir;
use queue::{EvKind, EventQueue};
pub use sched::Tunables;
use slab::{BioSlab, ReqSlab};
pub use stats::{NomergesChange, PhaseAcc, PhaseInfo};

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum SimError {
    #[error("unknown device {0:?}")]
    UnknownDevice(String),
    #[error("{0}")]
    Invalid(String),
    #[error(
        "more than {cap} bios in flight at {at_ms} ms (job {job:?}): the simulation stopped there; lower iodepth or numjobs, replay the trace on a faster device, or shorten it"
    )]
    TooManyInFlight { cap: usize, at_ms: u64, job: String },
}

/// A bio to submit by hand (tests, crafted streams).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BioSpec {
    pub dir: Dir,
    pub sector: u64,
    pub nr_sectors: u32,
}

pub struct Simulation {
    now_ns: u64,
    events: EventQueue,
    bios: BioSlab,
    reqs: ReqSlab,
    pub(crate) devs: Vec<Device>,
    jobs: Vec<Job>,
    phases: Vec<PhaseInfo>,
    cur_phase: usize,
    /// Per phase, per device.
    acc: Vec<Vec<PhaseAcc>>,
    costs: Costs,
    rng: SplitMix64,
    end_ns: u64,
    /// Scratch for dm splits (dm.rs).
    pieces: Vec<Piece>,
    pub(crate) nomerges_log: Vec<NomergesChange>,
    pub(crate) scheduler_switches: u64,
    /// Writes of `queue/nomerges` (each one a queue freeze) and the time queues spent
    /// frozen by them.
    pub(crate) nomerges_writes: u64,
    pub(crate) nomerges_frozen_ns: u64,
    total_bios: u64,
    /// Set when the simulation had to stop (the in-flight cap); nothing runs after it.
    halted: Option<SimError>,
    name: String,
    seed: u64,
    /// sense: the bio taps (crates/sim/src/tap.rs), fed from `submit_bio` like block_bio_queue.
    pub(crate) taps: super::tap::Taps,
    /// The merge-path sampler's stand-in: the lookups' cost, as `charge` prices it.
    pub(crate) merge_meter: super::meter::MergeMeter,
}

/// Microseconds (as scenarios give them) to integer nanoseconds.
fn us_to_ns(v: f64) -> u64 {
    (v * 1000.0).round() as u64
}

/// Constructor step: the phases back to back from time 0, and the end of the last one.
fn build_phases(sc: &Scenario) -> (Vec<PhaseInfo>, u64) {
    let mut phases = Vec::new();
    let mut t = 0u64;
    for p in &sc.phases {
        let d = secs_to_ns(p.duration_s);
        phases.push(PhaseInfo {
            name: p.name.clone(),
            start_ns: t,
            end_ns: t + d,
        });
        t += d;
    }
    (phases, t)
}

impl Simulation {
    /// Builds a simulation from a validated scenario. Time starts at 0 with the first phase.
    pub fn new(sc: &Scenario) -> Result<Simulation, SimError> {
        sc.validate("scenario")
            .map_err(|e| SimError::Invalid(e.to_string()))?;
        let mut devs = device::build_devices(sc)?;
        device::wire_dm_members(&mut devs, sc)?;
        let jobs = jobs::build_jobs(sc, &devs)?;
        let (phases, end_ns) = build_phases(sc);
        let acc = (0..phases.len())
            .map(|_| (0..devs.len()).map(|_| PhaseAcc::default()).collect())
            .collect();
        let mut sim = Simulation {
            now_ns: 0,
            events: EventQueue::default(),
            bios: BioSlab::new(),
            reqs: ReqSlab::new(),
            devs,
            jobs,
            phases,
            cur_phase: 0,
            acc,
            costs: Costs::for_scenario(sc.cost_profile.as_deref(), sc.cost),
            rng: SplitMix64::new(sc.seed ^ 0x6d65_7267_6574_756e),
            end_ns,
            pieces: Vec::new(),
            nomerges_log: Vec::new(),
            scheduler_switches: 0,
            nomerges_writes: 0,
            nomerges_frozen_ns: 0,
            total_bios: 0,
            halted: None,
            name: sc.name.clone(),
            seed: sc.seed,
            taps: Default::default(), // sense: the bio taps
            merge_meter: Default::default(),
        };
        sim.log_initial_nomerges();
        sim.schedule_phases();
        Ok(sim)
    }

    /// Constructor step: the timeline starts with every request-based device's nomerges.
    fn log_initial_nomerges(&mut self) {
        for dev in &self.devs {
            if !dev.kind.is_dm() {
                self.nomerges_log.push(NomergesChange {
                    at_ms: 0,
                    device: dev.name.clone(),
                    value: dev.nomerges,
                });
            }
        }
    }

    /// Constructor step: one event per phase start.
    fn schedule_phases(&mut self) {
        for (p, info) in self.phases.iter().enumerate() {
            self.events.push(info.start_ns, EvKind::Phase, p as u32, 0);
        }
    }

    // ------------------------------------------------------------ public accessors

    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }
    pub fn duration_ns(&self) -> u64 {
        self.end_ns
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// The profile (or `[cost]` table) that prices this run's steps: the report names it.
    pub fn cost_pricing(&self) -> &crate::cost::Pricing {
        &self.costs.primary
    }
    /// Bios submitted by jobs so far (dm pieces not counted twice).
    pub fn total_bios(&self) -> u64 {
        self.total_bios
    }
    /// Why the simulation stopped early, if it did: its results are then incomplete and
    /// must not be reported as a run.
    pub fn halted(&self) -> Option<&SimError> {
        self.halted.as_ref()
    }
    pub fn device_names(&self) -> Vec<String> {
        self.devs.iter().map(|d| d.name.clone()).collect()
    }
    pub(crate) fn dev_index(&self, name: &str) -> Option<usize> {
        self.devs.iter().position(|d| d.name == name)
    }
    pub fn nomerges(&self, dev: &str) -> Option<u8> {
        self.dev_index(dev).map(|d| self.devs[d].nomerges)
    }

    // ------------------------------------------------------------ time

    /// Processes every event up to and including `t_ns`, then sets the clock to `t_ns`.
    pub fn advance_to(&mut self, t_ns: u64) {
        while let Some(ev) = self.events.peek() {
            if ev.t > t_ns || self.halted.is_some() {
                break;
            }
            self.events.pop();
            self.now_ns = self.now_ns.max(ev.t);
            match ev.kind() {
                Some(EvKind::Complete) => self.complete_req(ev.a()),
                Some(EvKind::JobWake) => {
                    let j = ev.a() as usize;
                    self.jobs[j].wake_pending = false;
                    self.job_try_submit(j);
                }
                Some(EvKind::Idle) => self.idle_expired(ev.a() as usize, ev.b()),
                Some(EvKind::Phase) => self.start_phase(ev.a() as usize),
                Some(EvKind::Unfreeze) => self.try_unfreeze(ev.a() as usize),
                None => {}
            }
        }
        self.now_ns = self.now_ns.max(t_ns);
    }

    /// Runs to the end of the last phase.
    pub fn run_to_end(&mut self) {
        let end = self.end_ns;
        self.advance_to(end);
    }
}
