//! A simulated request-based or dm device: its identity and limits as sysfs shows them,
//! and the state of every stage a request passes (elevator, schedulers, media, counters).
//!
//! The writes the daemon makes through `BlockFs` (fs.rs) land here: `queue/nomerges`
//! (with the queue freeze it costs), `queue/scheduler` (a switch freezes dispatch until
//! the requests in flight complete and carries the queued ones over) and
//! `queue/iosched/*`. Constructor steps: [`build_devices`] numbers devices like the kernel
//! (sd*: 8:16n, nvme*: 259:n, dm: 253:n), [`wire_dm_members`] stacks dm devices on theirs.

use super::deadline::Deadline;
use super::elevator::Elevator;
use super::media::{Media, Servers};
use super::queue::EvKind;
use super::sched::Tunables;
use super::slab::NIL;
use super::slice::SliceSched;
use super::stats::{Counters, NomergesChange};
use super::{SimError, Simulation};
use crate::scenario::{DeviceKind, DeviceSpec, Scenario};
use mergetune_kernel::scheduler::Scheduler;

pub(crate) struct Device {
    pub(crate) name: String,
    pub(crate) major: u32,
    pub(crate) minor: u32,
    pub(crate) kind: DeviceKind,
    pub(super) media: Media,
    pub(crate) sched: Scheduler,
    pub(crate) tun: Tunables,
    pub(crate) nomerges: u8,
    pub(crate) max_sectors_kb: u32,
    pub(crate) max_segments: u32,
    pub(crate) queue_depth: u32,
    pub(crate) capacity_sectors: u64,
    pub(crate) holders: Vec<u32>,
    pub(crate) slaves: Vec<u32>,
    pub(super) busy_tags: u32,
    /// A scheduler switch freezes the queue: nothing is dispatched until the requests in
    /// flight have completed (docs/design.md: constant switching cut throughput 25x).
    pub(super) frozen: bool,
    pub(super) nm_freeze: NomergesFreeze,
    pub(super) elv: Elevator,
    pub(super) dd: Deadline,
    pub(super) slice: SliceSched,
    pub(super) servers: Servers,
    pub(super) cnt: Counters,
}

/// A `queue/nomerges` write freezes the queue as `blk_mq_freeze_queue` does: new bios
/// wait (`waiting`, bio and job) while every allocated request completes, and at least
/// until `until_ns` (the measured time of one write).
#[derive(Default)]
pub(super) struct NomergesFreeze {
    pub(super) frozen: bool,
    since_ns: u64,
    until_ns: u64,
    pub(super) waiting: Vec<(u32, u32)>,
}

impl Device {
    /// nomerges as the merge code applies it: `none` and kyber merge the same at 0 and 1
    /// (docs/design.md).
    #[inline]
    pub(super) fn eff_nomerges(&self) -> u8 {
        if self.nomerges == 1 && matches!(self.sched, Scheduler::None | Scheduler::Kyber) {
            0
        } else {
            self.nomerges
        }
    }

    fn from_spec(spec: &DeviceSpec, major: u32, minor: u32) -> Result<Device, SimError> {
        let sched = spec
            .scheduler()
            .map_err(|name| SimError::Invalid(format!("bad scheduler {name}")))?;
        let mut tun = Tunables::default();
        for (k, v) in &spec.iosched {
            if !tun.set(k, *v) {
                return Err(SimError::Invalid(format!(
                    "device {}: iosched.{k} = {v} rejected",
                    spec.name
                )));
            }
        }
        let setup = Media::from_spec(spec);
        Ok(Device {
            name: spec.name.clone(),
            major,
            minor,
            kind: spec.kind,
            media: setup.media,
            sched,
            tun,
            nomerges: spec.nomerges,
            max_sectors_kb: spec.max_sectors_kb,
            max_segments: spec.max_segments,
            queue_depth: spec.queue_depth.unwrap_or(setup.default_depth),
            capacity_sectors: spec.size_gib * 2 * 1024 * 1024,
            holders: Vec::new(),
            slaves: Vec::new(),
            busy_tags: 0,
            frozen: false,
            nm_freeze: NomergesFreeze::default(),
            elv: Elevator::new(),
            dd: Deadline::new(),
            slice: SliceSched::new(),
            servers: setup.servers,
            cnt: Counters::default(),
        })
    }
}

/// Constructor step: one device per spec, in file order, numbered like the kernel.
pub(super) fn build_devices(sc: &Scenario) -> Result<Vec<Device>, SimError> {
    let mut devs: Vec<Device> = Vec::new();
    let (mut sd_n, mut nvme_n, mut dm_n) = (0u32, 0u32, 0u32);
    for spec in &sc.devices {
        let (major, minor) = if spec.kind.is_dm() {
            dm_n += 1;
            (253, dm_n - 1)
        } else if spec.name.starts_with("nvme") {
            nvme_n += 1;
            (259, nvme_n - 1)
        } else {
            sd_n += 1;
            (8, (sd_n - 1) * 16)
        };
        devs.push(Device::from_spec(spec, major, minor)?);
    }
    Ok(devs)
}

/// Constructor step: fills each dm device's table with its members (by name), records
/// `slaves/` and `holders/`, and sets the dm device's capacity from the table.
pub(super) fn wire_dm_members(devs: &mut [Device], sc: &Scenario) -> Result<(), SimError> {
    for (i, spec) in sc.devices.iter().enumerate() {
        if !spec.kind.is_dm() {
            continue;
        }
        let mut ids = Vec::new();
        let mut sizes = Vec::new();
        for m in &spec.members {
            let id = sc
                .devices
                .iter()
                .position(|d| &d.name == m)
                .ok_or_else(|| SimError::UnknownDevice(m.clone()))?;
            ids.push(id as u32);
            sizes.push(devs[id].capacity_sectors);
            devs[id].holders.push(i as u32);
        }
        devs[i].slaves = ids.clone();
        if let Some((table, members)) = devs[i].media.dm_mut() {
            table.member_sectors = sizes;
            *members = ids;
            let cap = table.capacity_sectors();
            devs[i].capacity_sectors = cap.max(1);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- writes (used by fs.rs)

impl Simulation {
    pub(crate) fn set_nomerges(&mut self, d: usize, v: u8) {
        // queue_nomerges_store freezes the queue on every write, changed or not.
        if !self.devs[d].kind.is_dm() {
            self.nomerges_writes += 1;
            let now = self.now_ns;
            let until = now + self.costs.primary.freeze_min_ns;
            let fz = &mut self.devs[d].nm_freeze;
            if !fz.frozen {
                fz.since_ns = now;
            }
            fz.frozen = true;
            fz.until_ns = fz.until_ns.max(until);
            if until > now {
                self.events.push(until, EvKind::Unfreeze, d as u32, 0);
            }
        }
        if self.devs[d].nomerges != v {
            self.devs[d].nomerges = v;
            // The kernel drops the one-hit cache when merging is restricted.
            if v == 2 {
                self.devs[d].elv.last_merge = NIL;
            }
            self.nomerges_log.push(NomergesChange {
                at_ms: self.now_ns / 1_000_000,
                device: self.devs[d].name.clone(),
                value: v,
            });
        }
        self.try_unfreeze(d);
    }

    /// Ends a nomerges freeze once every allocated request has completed and the write's
    /// time has passed, then submits the bios that waited.
    pub(super) fn try_unfreeze(&mut self, d: usize) {
        let dev = &self.devs[d];
        if !dev.nm_freeze.frozen || dev.cnt.in_flight > 0 || self.now_ns < dev.nm_freeze.until_ns {
            return;
        }
        self.nomerges_frozen_ns += self.now_ns - dev.nm_freeze.since_ns;
        let fz = &mut self.devs[d].nm_freeze;
        fz.frozen = false;
        fz.until_ns = 0;
        let waiting = std::mem::take(&mut fz.waiting);
        let mut jobs: Vec<usize> = Vec::new();
        for &(b, j) in &waiting {
            self.rq_submit(b, j as usize);
            if !jobs.contains(&(j as usize)) {
                jobs.push(j as usize);
            }
        }
        for j in jobs {
            self.flush_plug(j);
        }
    }

    /// Switches the scheduler: the queue freezes until the requests in flight complete, and
    /// queued requests move to the new scheduler in FIFO order.
    pub(crate) fn set_scheduler(&mut self, d: usize, s: Scheduler) {
        if self.devs[d].sched == s {
            return;
        }
        self.scheduler_switches += 1;
        let pending = self.devs[d].elv.take_queued(&self.reqs);
        let dev = &mut self.devs[d];
        dev.sched = s;
        dev.frozen = true;
        dev.tun = Tunables::default();
        dev.slice.reset();
        for (_, r) in pending {
            self.enqueue(r);
        }
        self.run_dispatch(d);
    }

    pub(crate) fn set_tunable(&mut self, d: usize, key: &str, v: u64) -> bool {
        let ok = self.devs[d].tun.set(key, v);
        if ok {
            self.run_dispatch(d);
        }
        ok
    }
}
