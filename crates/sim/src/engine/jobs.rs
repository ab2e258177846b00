//! The workload: jobs that submit bios, from a generator or a replayed trace.
//!
//! A generator job is fio-like: it submits up to `batch` bios under one plug (fio's
//! `iodepth_batch_submit`) whenever at least `batch_complete` of its `iodepth` slots are
//! free (`iodepth_batch_complete_min`), paced by think time and a rate limit, until its
//! `io_size_mb` budget is spent; completions are reaped one by one as they arrive. A trace
//! job replays one submitting task's bios at their recorded times (relative to the phase
//! start), a plug per recorded plug. Job 0 is the hand submitter of `submit_plugged`.
//! Only the jobs of the current phase are active.

use super::device::Device;
use super::plug::Plug;
use super::queue::EvKind;
use super::{SimError, Simulation, us_to_ns};
use crate::scenario::{JobSpec, Pattern, Scenario};
use mergetune_kernel::trace::{Dir, TraceBio};
use std::sync::Arc;

#[derive(Debug)]
pub(super) enum JobKind {
    Manual,
    Gen {
        pattern: Pattern,
        read_percent: f64,
        sequential_percent: f64,
        bs_sectors: Vec<u32>,
        region_start: u64,
        region_sectors: u64,
        cursor: u64,
    },
    Trace {
        bios: Arc<Vec<TraceBio>>,
        idx: usize,
        base_ns: u64,
    },
}

#[derive(Debug)]
pub(super) struct Job {
    pub(super) name: String,
    pub(super) dev: u32,
    phase: usize,
    pub(super) active: bool,
    kind: JobKind,
    iodepth: u32,
    batch: u32,
    /// Free slots needed before the job submits again (fio iodepth_batch_complete_min).
    batch_complete: u32,
    think_ns: u64,
    rate_interval_ns: u64,
    sync_writes: bool,
    /// Sectors still to submit when the job has an `io_size_mb`; u64::MAX otherwise.
    budget_sectors: u64,
    pub(super) outstanding: u32,
    next_think_ns: u64,
    next_rate_ns: u64,
    pub(super) wake_pending: bool,
    pub(super) plug: Plug,
}

impl Job {
    /// Job 0: the hand submitter (no queue-depth limit, always active).
    fn manual() -> Job {
        Job {
            name: "manual".into(),
            dev: 0,
            phase: usize::MAX,
            active: true,
            kind: JobKind::Manual,
            iodepth: u32::MAX,
            batch: 1,
            batch_complete: 1,
            think_ns: 0,
            rate_interval_ns: 0,
            sync_writes: true,
            budget_sectors: u64::MAX,
            outstanding: 0,
            next_think_ns: 0,
            next_rate_ns: 0,
            wake_pending: false,
            plug: Plug::default(),
        }
    }

    fn from_spec(js: &JobSpec, name: String, kind: JobKind, dev: u32, phase: usize) -> Job {
        Job {
            name,
            dev,
            phase,
            active: false,
            kind,
            iodepth: js.iodepth,
            batch: js.batch,
            batch_complete: js.batch_complete.unwrap_or(js.batch),
            think_ns: us_to_ns(js.think_time_us),
            rate_interval_ns: if js.rate_iops > 0.0 {
                (1e9 / js.rate_iops) as u64
            } else {
                0
            },
            sync_writes: js.sync,
            budget_sectors: if js.io_size_mb == 0 {
                u64::MAX
            } else {
                js.io_size_mb * 2048
            },
            outstanding: 0,
            next_think_ns: 0,
            next_rate_ns: 0,
            wake_pending: false,
            plug: Plug::for_batches(),
        }
    }
}

/// The kinds (and names) of the jobs one clone `n` of spec `js` becomes: one generator, or
/// one replay job per submitting task of its trace, each with its own plug.
fn job_kinds(js: &JobSpec, n: u32, cap: u64) -> Vec<(String, JobKind)> {
    let region_start = (js.offset_mb * 2048).min(cap.saturating_sub(1));
    let mut region_sectors = if js.size_mb == 0 {
        cap - region_start
    } else {
        (js.size_mb * 2048).min(cap - region_start)
    };
    let bs_sectors: Vec<u32> = js
        .block_size_kb
        .to_vec()
        .iter()
        .map(|kb| (kb * 2).max(1))
        .collect();
    let max_bs = bs_sectors.iter().copied().max().unwrap_or(8) as u64;
    region_sectors = region_sectors.max(max_bs);
    // Clones of a sequential job start at spread-out offsets, as fio's numjobs on one
    // file would not (they would share); spreading is the common setup (one file per job).
    let cursor = region_start + region_sectors / js.numjobs as u64 * n as u64;
    let base_name = if js.numjobs > 1 {
        format!("{}.{n}", js.name)
    } else {
        js.name.clone()
    };
    let mut kinds: Vec<(String, JobKind)> = Vec::new();
    match &js.trace_bios {
        Some(b) => {
            let mut streams: Vec<u32> = b.iter().map(|x| x.stream).collect();
            streams.sort_unstable();
            streams.dedup();
            for st in streams {
                let bios: Vec<TraceBio> = b.iter().filter(|x| x.stream == st).copied().collect();
                kinds.push((
                    format!("{base_name}.{st}"),
                    JobKind::Trace {
                        bios: Arc::new(bios),
                        idx: 0,
                        base_ns: 0,
                    },
                ));
            }
        }
        None => kinds.push((
            base_name,
            JobKind::Gen {
                pattern: js.pattern,
                read_percent: js.read_percent,
                sequential_percent: js.sequential_percent,
                bs_sectors,
                region_start,
                region_sectors,
                cursor,
            },
        )),
    }
    kinds
}

/// Constructor step: job 0 (the hand submitter), then every phase's jobs in file order,
/// `numjobs` clones each, on their devices' regions.
pub(super) fn build_jobs(sc: &Scenario, devs: &[Device]) -> Result<Vec<Job>, SimError> {
    let mut jobs = vec![Job::manual()];
    for (pi, p) in sc.phases.iter().enumerate() {
        for js in &p.jobs {
            let dev = sc
                .devices
                .iter()
                .position(|d| d.name == js.device)
                .ok_or_else(|| SimError::UnknownDevice(js.device.clone()))?
                as u32;
            let cap = devs[dev as usize].capacity_sectors;
            for n in 0..js.numjobs {
                for (name, kind) in job_kinds(js, n, cap) {
                    jobs.push(Job::from_spec(js, name, kind, dev, pi));
                }
            }
        }
    }
    Ok(jobs)
}

impl Simulation {
    /// Phase `p` starts: its jobs become active (trace replays restart their clock) and
    /// submit; every other job stops.
    pub(super) fn start_phase(&mut self, p: usize) {
        self.cur_phase = p;
        for j in 1..self.jobs.len() {
            let active = self.jobs[j].phase == p;
            self.jobs[j].active = active;
            if active {
                if let JobKind::Trace { base_ns, idx, .. } = &mut self.jobs[j].kind {
                    *base_ns = self.now_ns;
                    *idx = 0;
                }
                self.job_try_submit(j);
            }
        }
    }

    /// A bio of job `j` completed. Like fio reaping each completion as it arrives, the job
    /// may submit again at once (a request's bios complete one after another, so with
    /// batch_complete=1 they come back as single submissions).
    pub(super) fn job_bio_done(&mut self, j: usize) {
        let now = self.now_ns;
        let job = &mut self.jobs[j];
        job.outstanding -= 1;
        if job.think_ns > 0 {
            job.next_think_ns = job.next_think_ns.max(now.saturating_add(job.think_ns));
        }
        if job.active {
            self.job_try_submit(j);
        }
    }

    /// Job `j` submits what its depth, pacing and budget allow now, batch by batch; if
    /// pacing holds it back, a wake-up is scheduled.
    pub(super) fn job_try_submit(&mut self, j: usize) {
        if !self.jobs[j].active {
            return;
        }
        if matches!(self.jobs[j].kind, JobKind::Trace { .. }) {
            self.trace_submit(j);
            return;
        }
        if matches!(self.jobs[j].kind, JobKind::Manual) {
            return;
        }
        loop {
            let now = self.now_ns;
            let job = &mut self.jobs[j];
            if !job.active {
                return; // halted at the in-flight cap
            }
            let free = job.iodepth - job.outstanding.min(job.iodepth);
            if free == 0 || free < job.batch_complete || job.budget_sectors == 0 {
                return;
            }
            let allowed = job.next_think_ns.max(job.next_rate_ns);
            if allowed > now {
                if !job.wake_pending {
                    job.wake_pending = true;
                    self.events.push(allowed, EvKind::JobWake, j as u32, 0);
                }
                return;
            }
            let n = job.batch.min(free);
            if job.rate_interval_ns > 0 {
                job.next_rate_ns = job
                    .next_rate_ns
                    .max(now)
                    .saturating_add(job.rate_interval_ns.saturating_mul(n as u64));
            }
            self.plug_start(j);
            for _ in 0..n {
                if self.jobs[j].budget_sectors == 0 {
                    break;
                }
                let (dir, sync, sector, nr) = self.gen_bio(j);
                let job = &mut self.jobs[j];
                let nr = (nr as u64).min(job.budget_sectors) as u32;
                if job.budget_sectors != u64::MAX {
                    job.budget_sectors -= nr as u64;
                }
                let dev = job.dev;
                self.new_bio(j, dev, dir, sync, sector, nr);
            }
            self.flush_plug(j);
        }
    }

    /// The next bio of generator job `j`: direction, sync class, sector, size.
    fn gen_bio(&mut self, j: usize) -> (Dir, bool, u64, u32) {
        let rng = &mut self.rng;
        let job = &mut self.jobs[j];
        let sync_writes = job.sync_writes;
        let JobKind::Gen {
            pattern,
            read_percent,
            sequential_percent,
            bs_sectors,
            region_start,
            region_sectors,
            cursor,
        } = &mut job.kind
        else {
            return (Dir::Read, true, 0, 8);
        };
        let dir = if rng.percent(*read_percent) {
            Dir::Read
        } else {
            Dir::Write
        };
        let nr = if bs_sectors.len() > 1 {
            bs_sectors[rng.below(bs_sectors.len() as u64) as usize]
        } else {
            bs_sectors[0]
        };
        let seq = match pattern {
            Pattern::Random => false,
            Pattern::Sequential => true,
            Pattern::Mixed => rng.percent(*sequential_percent),
        };
        let end = *region_start + *region_sectors;
        let sector = if seq {
            if *cursor + nr as u64 > end {
                *cursor = *region_start;
            }
            let s = *cursor;
            *cursor += nr as u64;
            s
        } else {
            let slots = (*region_sectors / nr as u64).max(1);
            *region_start + rng.below(slots) * nr as u64
        };
        let sync = dir == Dir::Read || sync_writes;
        (dir, sync, sector, nr)
    }

    /// Trace job `j` submits every recorded bio whose time has come, a plug per recorded
    /// plug, and schedules a wake-up for the next one.
    fn trace_submit(&mut self, j: usize) {
        let now = self.now_ns;
        let (bios, mut idx, base) = match &self.jobs[j].kind {
            JobKind::Trace { bios, idx, base_ns } => (bios.clone(), *idx, *base_ns),
            _ => return,
        };
        let dev = self.jobs[j].dev;
        let cap = self.devs[dev as usize].capacity_sectors;
        while idx < bios.len() && base + bios[idx].t_ns <= now && self.halted.is_none() {
            self.plug_start(j);
            loop {
                let tb = bios[idx];
                let sector = tb.sector % cap;
                let sync = tb.dir == Dir::Read || tb.sync;
                self.new_bio(j, dev, tb.dir, sync, sector, tb.nr_sectors);
                idx += 1;
                if idx >= bios.len() || bios[idx].plug_start {
                    break;
                }
            }
            self.flush_plug(j);
        }
        if let JobKind::Trace { idx: i, .. } = &mut self.jobs[j].kind {
            *i = idx;
        }
        if idx < bios.len() && !self.jobs[j].wake_pending {
            self.jobs[j].wake_pending = true;
            let t = base + bios[idx].t_ns;
            self.events.push(t, EvKind::JobWake, j as u32, 0);
        }
    }
}
