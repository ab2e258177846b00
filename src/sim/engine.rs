//! The event-driven core: bios, plugs, the elevator, schedulers, devices and counters.
//!
//! Design: everything is an index into a slab (`bios`, `reqs`, `devs`, `jobs`), events sit
//! in one binary heap ordered by (time, sequence) so equal times replay in a fixed order, and
//! no allocation happens per bio once the slabs have grown to the number in flight. The
//! steps follow blk-mq:
//!
//! 1. A job submits a batch of bios under one plug. For each bio, unless nomerges=2: try the
//!    most recent plugged request for the queue (plug merge), then the queue's one-hit
//!    `last_merge` request, then (nomerges=0 only) the back-merge hash keyed by end sector
//!    and the front-merge lookup in the per-direction sector-ordered tree (mq-deadline:
//!    only if front_merges=1).
//!    `none` and kyber merge the same at 0 and 1 (docs/design.md). Otherwise a new request joins
//!    the plug; the plug is flushed at the end of the batch or at 32 requests.
//! 2. An inserted request is dispatched at once if the device has a free tag and nothing is
//!    queued; else it waits in the scheduler's structures, where later bios can merge into it.
//!    That is the only place merges happen besides the plug: under no tag pressure, unbatched
//!    I/O does not merge (as measured on the real kernel).
//! 3. Dispatch order: `none`/kyber FIFO; mq-deadline per-direction FIFOs and sector order
//!    with read_expire/write_expire, writes_starved and fifo_batch; bfq stands for a
//!    sync/async time-slice scheduler with slice_sync (timeout_sync), slice_async and
//!    slice_idle (CFQ's knobs of seeds 001 and 003).
//! 4. Devices: SSD (per-request overhead, bandwidth, `parallelism` channels) or rotational
//!    (seek by distance, rotation, transfer, one head); a completion event frees the tag,
//!    ends every bio of the request and lets their jobs submit again.
//! 5. dm-linear / dm-stripe are bio-based: a bio is split at chunk (stripe) or member
//!    (linear) boundaries, the pieces go to the members, the dm device counts one I/O per bio
//!    and never merges.
//!
//! Counters are the kernel's 17 `stat` fields: completed = requests after merging, merged =
//! bios merged into an existing request, ms fields from ns sums, io_ticks (time with at
//! least one request in flight) integrated over in-flight count changes, and the weighted
//! field 11 as the kernel prints it since 5.x: the sum of the per-direction ns, in ms.

use super::cost::{Costs, Step};
use super::hist::Histogram;
use super::rng::SplitMix64;
pub use super::scenario::MAX_IN_FLIGHT_BIOS;
use super::scenario::{DeviceKind, Pattern, Scenario, secs_to_ns};
pub use crate::kernel::trace::Dir;
use crate::kernel::trace::TraceBio;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

pub(crate) const NIL: u32 = u32::MAX;
/// blk-mq flushes a plug once it holds this many requests (BLK_MAX_REQUEST_COUNT).
const PLUG_MAX_REQUESTS: usize = 32;

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

/// The 17 fields of `/sys/block/<dev>/stat`, in kernel order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DiskStat(pub [u64; 17]);

impl DiskStat {
    pub fn completed(&self, d: Dir) -> u64 {
        self.0[d.idx() * 4]
    }
    pub fn merged(&self, d: Dir) -> u64 {
        self.0[d.idx() * 4 + 1]
    }
    pub fn sectors(&self, d: Dir) -> u64 {
        self.0[d.idx() * 4 + 2]
    }
    pub fn ticks_ms(&self, d: Dir) -> u64 {
        self.0[d.idx() * 4 + 3]
    }
    pub fn in_flight(&self) -> u64 {
        self.0[8]
    }
    pub fn io_ticks_ms(&self) -> u64 {
        self.0[9]
    }
    pub fn time_in_queue_ms(&self) -> u64 {
        self.0[10]
    }
    /// The same 17 fields as the daemon's parser holds them.
    pub fn fields(&self) -> crate::kernel::diskstats::StatFields {
        crate::kernel::diskstats::StatFields {
            values: self.0,
            field_count: crate::kernel::diskstats::MAX_FIELDS as u8,
        }
    }
    /// Formatted as the kernel prints `stat` (`%8u` fields separated by a space).
    pub fn render(&self) -> String {
        crate::kernel::diskstats::format_stat_fields(&self.fields())
    }
}

// ---------------------------------------------------------------- fast hash for u64 keys

#[derive(Default, Clone, Copy)]
pub(crate) struct U64Hasher(u64);
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

// ---------------------------------------------------------------- slab types

#[derive(Debug, Clone, Copy)]
struct Bio {
    job: u32,
    dev: u32,
    dir: Dir,
    sync: bool,
    sector: u64,
    nr_sectors: u32,
    submit_ns: u64,
    /// The dm bio this piece was split from, or NIL.
    parent: u32,
    /// dm bios: pieces still in flight.
    remaining: u32,
    /// Next bio of the same request, or the free list.
    next: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReqState {
    Free,
    Plugged,
    Queued,
    InFlight,
}

#[derive(Debug, Clone, Copy)]
struct Request {
    dev: u32,
    dir: Dir,
    sync: bool,
    state: ReqState,
    sector: u64,
    nr_sectors: u32,
    nr_segs: u32,
    first_bio: u32,
    last_bio: u32,
    alloc_ns: u64,
    insert_ns: u64,
    /// Bumped at every allocation: FIFO entries carry it so stale entries are skipped.
    generation: u32,
    next_free: u32,
}

// ---------------------------------------------------------------- devices

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedKind {
    None,
    MqDeadline,
    Kyber,
    Slice,
}

impl SchedKind {
    pub fn from_name(s: &str) -> Option<SchedKind> {
        match s {
            "none" => Some(SchedKind::None),
            "mq-deadline" => Some(SchedKind::MqDeadline),
            "kyber" => Some(SchedKind::Kyber),
            "bfq" => Some(SchedKind::Slice),
            _ => None,
        }
    }
    /// Index into `Pricing::by_sched` (none, mq-deadline, kyber, bfq).
    #[inline]
    fn idx(self) -> usize {
        self as usize
    }
    pub fn name(self) -> &'static str {
        match self {
            SchedKind::None => "none",
            SchedKind::MqDeadline => "mq-deadline",
            SchedKind::Kyber => "kyber",
            SchedKind::Slice => "bfq",
        }
    }
}

/// Scheduler tunables, in the units sysfs shows them (ms unless named otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tunables {
    pub read_expire: u64,
    pub write_expire: u64,
    pub writes_starved: u64,
    pub fifo_batch: u64,
    pub front_merges: u64,
    pub slice_idle: u64,
    pub slice_sync: u64,
    pub slice_async: u64,
    pub fifo_expire_sync: u64,
    pub fifo_expire_async: u64,
    pub low_latency: u64,
    pub read_lat_nsec: u64,
    pub write_lat_nsec: u64,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            read_expire: 500,
            write_expire: 5000,
            writes_starved: 2,
            fifo_batch: 16,
            front_merges: 1,
            slice_idle: 8,
            slice_sync: 125,
            slice_async: 40,
            fifo_expire_sync: 125,
            fifo_expire_async: 250,
            low_latency: 1,
            read_lat_nsec: 2_000_000,
            write_lat_nsec: 10_000_000,
        }
    }
}

impl Tunables {
    pub fn get(&self, key: &str) -> Option<u64> {
        Some(match key {
            "read_expire" => self.read_expire,
            "write_expire" => self.write_expire,
            "writes_starved" => self.writes_starved,
            "fifo_batch" => self.fifo_batch,
            "front_merges" => self.front_merges,
            "slice_idle" => self.slice_idle,
            "slice_sync" | "timeout_sync" => self.slice_sync,
            "slice_async" => self.slice_async,
            "fifo_expire_sync" => self.fifo_expire_sync,
            "fifo_expire_async" => self.fifo_expire_async,
            "low_latency" => self.low_latency,
            "read_lat_nsec" => self.read_lat_nsec,
            "write_lat_nsec" => self.write_lat_nsec,
            _ => return None,
        })
    }

    /// Sets a tunable; false if the key is unknown or the value out of range.
    pub fn set(&mut self, key: &str, v: u64) -> bool {
        let slot = match key {
            "read_expire" => &mut self.read_expire,
            "write_expire" => &mut self.write_expire,
            "writes_starved" => &mut self.writes_starved,
            "fifo_batch" if v >= 1 => &mut self.fifo_batch,
            "front_merges" if v <= 1 => &mut self.front_merges,
            "slice_idle" => &mut self.slice_idle,
            "slice_sync" | "timeout_sync" if v >= 1 => &mut self.slice_sync,
            "slice_async" if v >= 1 => &mut self.slice_async,
            "fifo_expire_sync" => &mut self.fifo_expire_sync,
            "fifo_expire_async" => &mut self.fifo_expire_async,
            "low_latency" if v <= 1 => &mut self.low_latency,
            "read_lat_nsec" => &mut self.read_lat_nsec,
            "write_lat_nsec" => &mut self.write_lat_nsec,
            _ => return false,
        };
        *slot = v;
        true
    }
}

/// A dm table: how a dm device maps its sectors onto members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DmTable {
    pub stripe: bool,
    /// dm-stripe chunk size in sectors.
    pub chunk_sectors: u64,
    /// Capacity each member contributes, in sectors.
    pub member_sectors: Vec<u64>,
}

/// One piece of a split dm bio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Index into the table's members.
    pub member: usize,
    pub member_sector: u64,
    pub nr_sectors: u32,
    /// Where this piece starts on the dm device.
    pub dm_sector: u64,
}

impl DmTable {
    pub fn capacity_sectors(&self) -> u64 {
        if self.stripe {
            let per = self.member_sectors.iter().copied().min().unwrap_or(0);
            let per = per - per % self.chunk_sectors.max(1);
            per * self.member_sectors.len() as u64
        } else {
            self.member_sectors.iter().sum()
        }
    }

    /// Splits `[sector, sector + nr)` at chunk (stripe) or member (linear) boundaries.
    pub fn map(&self, sector: u64, nr_sectors: u32, out: &mut Vec<Piece>) {
        out.clear();
        let end = sector + nr_sectors as u64;
        let mut s = sector;
        let n = self.member_sectors.len() as u64;
        if n == 0 {
            return;
        }
        while s < end {
            if self.stripe {
                let cs = self.chunk_sectors.max(1);
                let chunk = s / cs;
                let off = s % cs;
                let len = (cs - off).min(end - s);
                out.push(Piece {
                    member: (chunk % n) as usize,
                    member_sector: (chunk / n) * cs + off,
                    nr_sectors: len as u32,
                    dm_sector: s,
                });
                s += len;
            } else {
                let mut base = 0u64;
                let mut placed = false;
                for (m, &size) in self.member_sectors.iter().enumerate() {
                    if s < base + size {
                        let len = (base + size - s).min(end - s);
                        out.push(Piece {
                            member: m,
                            member_sector: s - base,
                            nr_sectors: len as u32,
                            dm_sector: s,
                        });
                        s += len;
                        placed = true;
                        break;
                    }
                    base += size;
                }
                if !placed {
                    // Past the end: the kernel would fail the bio; we wrap onto member 0.
                    let len = end - s;
                    out.push(Piece {
                        member: 0,
                        member_sector: s % self.member_sectors[0].max(1),
                        nr_sectors: len as u32,
                        dm_sector: s,
                    });
                    s = end;
                }
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Media {
    Ssd {
        overhead_ns: [u64; 2],
        ns_per_sector: f64,
    },
    Hdd {
        overhead_ns: u64,
        min_seek_ns: f64,
        max_seek_ns: f64,
        rev_ns: u64,
        ns_per_sector: f64,
    },
    Dm {
        table: DmTable,
        members: Vec<u32>,
    },
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    ios: [u64; 2],
    merges: [u64; 2],
    sectors: [u64; 2],
    ticks_ns: [u64; 2],
    in_flight: u64,
    io_ticks_ns: u64,
    last_ns: u64,
}

impl Counters {
    #[inline]
    fn acct(&mut self, now: u64) {
        let dt = now.saturating_sub(self.last_ns);
        if self.in_flight > 0 {
            self.io_ticks_ns += dt;
        }
        self.last_ns = now;
    }
}

pub(crate) struct Device {
    pub(crate) name: String,
    pub(crate) major: u32,
    pub(crate) minor: u32,
    pub(crate) kind: DeviceKind,
    media: Media,
    pub(crate) sched: SchedKind,
    pub(crate) tun: Tunables,
    pub(crate) nomerges: u8,
    pub(crate) max_sectors_kb: u32,
    pub(crate) max_segments: u32,
    pub(crate) queue_depth: u32,
    pub(crate) capacity_sectors: u64,
    pub(crate) holders: Vec<u32>,
    pub(crate) slaves: Vec<u32>,
    busy_tags: u32,
    /// A scheduler switch freezes the queue: nothing is dispatched until the requests in
    /// flight have completed (docs/design.md: constant switching cut throughput 25x).
    frozen: bool,
    /// A `queue/nomerges` write freezes the queue as `blk_mq_freeze_queue` does: new bios
    /// wait (`nm_waiting`, bio and job) while every allocated request completes, and at
    /// least until `nm_until_ns` (the measured time of one write).
    nm_frozen: bool,
    nm_since_ns: u64,
    nm_until_ns: u64,
    nm_waiting: Vec<(u32, u32)>,
    // elevator
    last_merge: u32,
    hash: FastMap<u32>,
    sorted: [BTreeSet<(u64, u32)>; 2],
    fifo: [VecDeque<(u32, u32)>; 2],
    queued: u32,
    // mq-deadline
    dd_last_dir: Dir,
    dd_batching: u64,
    dd_starved: u64,
    dd_next_pos: [u64; 2],
    // slice scheduler
    sl_active: Option<usize>,
    sl_last: usize,
    sl_end_ns: u64,
    sl_idling: bool,
    sl_idle_gen: u32,
    sl_sync_inflight: u32,
    sl_async_inflight: u32,
    sl_last_sync_done_ns: u64,
    // service
    /// Free times of the device's servers (SSD channels; one head for an HDD), as a
    /// min-heap so picking the earliest free one is O(log n).
    servers: BinaryHeap<Reverse<u64>>,
    head_sector: u64,
    cnt: Counters,
}

// ---------------------------------------------------------------- jobs

#[derive(Debug)]
enum JobKind {
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
struct Job {
    name: String,
    dev: u32,
    phase: usize,
    active: bool,
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
    outstanding: u32,
    next_think_ns: u64,
    next_rate_ns: u64,
    wake_pending: bool,
    plugging: bool,
    plug: Vec<u32>,
}

// ---------------------------------------------------------------- events

/// An event packed into 16 bytes (the heap is the hottest structure): the time, then
/// `seq` (16 bits, wrapping: equal times pop in submission order unless 65,536 events
/// apart, which is still deterministic), `kind` (4 bits), `b` (12 bits) and `a` (32 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Ev {
    t: u64,
    packed: u64,
}

impl Ev {
    fn kind(self) -> u8 {
        ((self.packed >> 44) & 0xF) as u8
    }
    fn a(self) -> u32 {
        self.packed as u32
    }
    fn b(self) -> u32 {
        ((self.packed >> 32) & 0xFFF) as u32
    }
}

/// Idle-timer generations travel in the event's 12-bit `b`.
const GEN_MASK: u32 = 0xFFF;

const EV_COMPLETE: u8 = 0;
const EV_JOB_WAKE: u8 = 1;
const EV_IDLE: u8 = 2;
const EV_PHASE: u8 = 3;
const EV_UNFREEZE: u8 = 4;

// ---------------------------------------------------------------- per-phase accounting

/// What one device did during one phase.
#[derive(Debug, Clone, Default)]
pub struct PhaseAcc {
    pub bios: [u64; 2],
    pub merged: [u64; 2],
    pub completed: [u64; 2],
    pub sectors: [u64; 2],
    pub lat: [Histogram; 2],
    /// CPU of the block-layer steps, in the scenario's own currency.
    pub cycles: u64,
    /// The same steps priced in the other shipped profile (`Costs::second`).
    pub cycles_second: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PhaseInfo {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// A change of `queue/nomerges`, for the report's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NomergesChange {
    pub at_ms: u64,
    pub device: String,
    pub value: u8,
}

// ---------------------------------------------------------------- the simulation

pub struct Simulation {
    now_ns: u64,
    seq: u64,
    events: BinaryHeap<Reverse<Ev>>,
    bios: Vec<Bio>,
    bio_free: u32,
    reqs: Vec<Request>,
    req_free: u32,
    pub(crate) devs: Vec<Device>,
    jobs: Vec<Job>,
    phases: Vec<PhaseInfo>,
    cur_phase: usize,
    acc: Vec<Vec<PhaseAcc>>,
    costs: Costs,
    rng: SplitMix64,
    end_ns: u64,
    pieces: Vec<Piece>,
    pub(crate) nomerges_log: Vec<NomergesChange>,
    pub(crate) scheduler_switches: u64,
    /// Writes of `queue/nomerges` (each one a queue freeze) and the time queues spent
    /// frozen by them.
    pub(crate) nomerges_writes: u64,
    pub(crate) nomerges_frozen_ns: u64,
    total_bios: u64,
    /// Bios allocated and not yet freed (see [`MAX_IN_FLIGHT_BIOS`]).
    live_bios: usize,
    /// Set when the simulation had to stop (the in-flight cap); nothing runs after it.
    halted: Option<SimError>,
    name: String,
    seed: u64,
    /// sense: the bio taps (src/sim/tap.rs), fed from `submit_bio` like block_bio_queue.
    pub(crate) taps: super::tap::Taps,
}

fn us(v: f64) -> u64 {
    (v * 1000.0).round() as u64
}

impl Simulation {
    /// Builds a simulation from a validated scenario. Time starts at 0 with the first phase.
    pub fn new(sc: &Scenario) -> Result<Simulation, SimError> {
        sc.validate("scenario")
            .map_err(|e| SimError::Invalid(e.to_string()))?;
        let mut devs: Vec<Device> = Vec::new();
        let (mut sd_n, mut nvme_n, mut dm_n) = (0u32, 0u32, 0u32);
        for spec in &sc.devices {
            let sched_name = spec.scheduler.clone().unwrap_or_else(|| {
                if spec.kind.is_dm() {
                    "none".into()
                } else {
                    "mq-deadline".into()
                }
            });
            let sched = SchedKind::from_name(&sched_name)
                .ok_or_else(|| SimError::Invalid(format!("bad scheduler {sched_name}")))?;
            let mut tun = Tunables::default();
            for (k, v) in &spec.iosched {
                if !tun.set(k, *v) {
                    return Err(SimError::Invalid(format!(
                        "device {}: iosched.{k} = {v} rejected",
                        spec.name
                    )));
                }
            }
            let capacity_sectors = spec.size_gib * 2 * 1024 * 1024;
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
            let (media, default_depth, parallel) = match spec.kind {
                DeviceKind::Ssd => {
                    let par = spec.parallelism.unwrap_or(8);
                    let bw = spec.bandwidth_mb_s.unwrap_or(500.0) * 1e6;
                    (
                        Media::Ssd {
                            overhead_ns: [
                                us(spec.read_overhead_us.unwrap_or(80.0)),
                                us(spec.write_overhead_us.unwrap_or(20.0)),
                            ],
                            ns_per_sector: 512.0 * 1e9 / (bw / par as f64),
                        },
                        32,
                        par as usize,
                    )
                }
                DeviceKind::Hdd => {
                    let bw = spec.bandwidth_mb_s.unwrap_or(150.0) * 1e6;
                    let rpm = spec.rpm.unwrap_or(7200) as f64;
                    (
                        Media::Hdd {
                            overhead_ns: 50_000,
                            min_seek_ns: spec.min_seek_us.unwrap_or(500.0) * 1000.0,
                            max_seek_ns: spec.max_seek_us.unwrap_or(15_000.0) * 1000.0,
                            rev_ns: (60e9 / rpm) as u64,
                            ns_per_sector: 512.0 * 1e9 / bw,
                        },
                        32,
                        1,
                    )
                }
                DeviceKind::DmLinear | DeviceKind::DmStripe => (
                    Media::Dm {
                        table: DmTable {
                            stripe: spec.kind == DeviceKind::DmStripe,
                            chunk_sectors: spec.chunk_kb.unwrap_or(128) as u64 * 2,
                            member_sectors: Vec::new(),
                        },
                        members: Vec::new(),
                    },
                    0,
                    0,
                ),
            };
            devs.push(Device {
                name: spec.name.clone(),
                major,
                minor,
                kind: spec.kind,
                media,
                sched,
                tun,
                nomerges: spec.nomerges,
                max_sectors_kb: spec.max_sectors_kb,
                max_segments: spec.max_segments,
                queue_depth: spec.queue_depth.unwrap_or(default_depth),
                capacity_sectors,
                holders: Vec::new(),
                slaves: Vec::new(),
                busy_tags: 0,
                frozen: false,
                nm_frozen: false,
                nm_since_ns: 0,
                nm_until_ns: 0,
                nm_waiting: Vec::new(),
                last_merge: NIL,
                hash: FastMap::default(),
                sorted: [BTreeSet::new(), BTreeSet::new()],
                fifo: [VecDeque::new(), VecDeque::new()],
                queued: 0,
                dd_last_dir: Dir::Read,
                dd_batching: 0,
                dd_starved: 0,
                dd_next_pos: [0, 0],
                sl_active: None,
                sl_last: 1,
                sl_end_ns: 0,
                sl_idling: false,
                sl_idle_gen: 0,
                sl_sync_inflight: 0,
                sl_async_inflight: 0,
                sl_last_sync_done_ns: 0,
                servers: (0..parallel).map(|_| Reverse(0)).collect(),
                head_sector: 0,
                cnt: Counters::default(),
            });
        }
        // Wire dm members.
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
            if let Media::Dm { table, members } = &mut devs[i].media {
                table.member_sectors = sizes;
                *members = ids;
                let cap = table.capacity_sectors();
                devs[i].capacity_sectors = cap.max(1);
            }
        }
        // Jobs: slot 0 is the manual submitter used by `submit_plugged`.
        let mut jobs = vec![Job {
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
            plugging: false,
            plug: Vec::new(),
        }];
        let mut phases = Vec::new();
        let mut t = 0u64;
        for (pi, p) in sc.phases.iter().enumerate() {
            let d = secs_to_ns(p.duration_s);
            phases.push(PhaseInfo {
                name: p.name.clone(),
                start_ns: t,
                end_ns: t + d,
            });
            t += d;
            for js in &p.jobs {
                let dev = sc
                    .devices
                    .iter()
                    .position(|d| d.name == js.device)
                    .ok_or_else(|| SimError::UnknownDevice(js.device.clone()))?
                    as u32;
                let cap = devs[dev as usize].capacity_sectors;
                for n in 0..js.numjobs {
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
                    // Clones of a sequential job start at spread-out offsets, as fio's
                    // numjobs on one file would not (they would share); spreading is the
                    // common setup (one file per job).
                    let cursor = region_start + region_sectors / js.numjobs as u64 * n as u64;
                    let mut kinds: Vec<(String, JobKind)> = Vec::new();
                    let base_name = if js.numjobs > 1 {
                        format!("{}.{n}", js.name)
                    } else {
                        js.name.clone()
                    };
                    match &js.trace_bios {
                        Some(b) => {
                            // One replay job per submitting task, each with its own plug.
                            let mut streams: Vec<u32> = b.iter().map(|x| x.stream).collect();
                            streams.sort_unstable();
                            streams.dedup();
                            for st in streams {
                                let bios: Vec<TraceBio> =
                                    b.iter().filter(|x| x.stream == st).copied().collect();
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
                    for (name, kind) in kinds {
                        jobs.push(Job {
                            name,
                            dev,
                            phase: pi,
                            active: false,
                            kind,
                            iodepth: js.iodepth,
                            batch: js.batch,
                            batch_complete: js.batch_complete.unwrap_or(js.batch),
                            think_ns: us(js.think_time_us),
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
                            plugging: false,
                            plug: Vec::with_capacity(PLUG_MAX_REQUESTS),
                        });
                    }
                }
            }
        }
        let ndev = devs.len();
        let acc = (0..phases.len())
            .map(|_| (0..ndev).map(|_| PhaseAcc::default()).collect())
            .collect();
        let mut sim = Simulation {
            now_ns: 0,
            seq: 0,
            events: BinaryHeap::new(),
            bios: Vec::new(),
            bio_free: NIL,
            reqs: Vec::new(),
            req_free: NIL,
            devs,
            jobs,
            phases,
            cur_phase: 0,
            acc,
            costs: Costs::for_scenario(sc.cost_profile.as_deref(), sc.cost),
            rng: SplitMix64::new(sc.seed ^ 0x6d65_7267_6574_756e),
            end_ns: t,
            pieces: Vec::new(),
            nomerges_log: Vec::new(),
            scheduler_switches: 0,
            nomerges_writes: 0,
            nomerges_frozen_ns: 0,
            total_bios: 0,
            live_bios: 0,
            halted: None,
            name: sc.name.clone(),
            seed: sc.seed,
            taps: Default::default(), // sense: the bio taps
        };
        for d in 0..sim.devs.len() {
            if !sim.devs[d].kind.is_dm() {
                let v = sim.devs[d].nomerges;
                let name = sim.devs[d].name.clone();
                sim.nomerges_log.push(NomergesChange {
                    at_ms: 0,
                    device: name,
                    value: v,
                });
            }
        }
        for p in 0..sim.phases.len() {
            let t = sim.phases[p].start_ns;
            sim.push_ev(t, EV_PHASE, p as u32, 0);
        }
        Ok(sim)
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
    /// Bios submitted by jobs so far (dm pieces not counted twice).
    pub fn total_bios(&self) -> u64 {
        self.total_bios
    }
    /// Why the simulation stopped early, if it did: its results are then incomplete and
    /// must not be reported as a run.
    pub fn halted(&self) -> Option<&SimError> {
        self.halted.as_ref()
    }
    pub fn phases(&self) -> &[PhaseInfo] {
        &self.phases
    }
    pub fn device_names(&self) -> Vec<String> {
        self.devs.iter().map(|d| d.name.clone()).collect()
    }
    pub(crate) fn dev_index(&self, name: &str) -> Option<usize> {
        self.devs.iter().position(|d| d.name == name)
    }
    pub fn phase_acc(&self, phase: usize, dev: &str) -> Option<&PhaseAcc> {
        let d = self.dev_index(dev)?;
        self.acc.get(phase)?.get(d)
    }
    pub fn nomerges_log(&self) -> &[NomergesChange] {
        &self.nomerges_log
    }
    pub fn nomerges(&self, dev: &str) -> Option<u8> {
        self.dev_index(dev).map(|d| self.devs[d].nomerges)
    }
    /// The dm table of a dm device.
    pub fn dm_table(&self, dev: &str) -> Option<&DmTable> {
        let d = self.dev_index(dev)?;
        match &self.devs[d].media {
            Media::Dm { table, .. } => Some(table),
            _ => None,
        }
    }

    /// The 17 `stat` fields of a device as of now.
    pub fn device_stat(&mut self, dev: &str) -> Option<DiskStat> {
        let d = self.dev_index(dev)?;
        Some(self.stat_of(d))
    }

    pub(crate) fn stat_of(&mut self, d: usize) -> DiskStat {
        let now = self.now_ns;
        let c = &mut self.devs[d].cnt;
        c.acct(now);
        let ms = |ns: u64| (ns / 1_000_000) as u32 as u64;
        DiskStat([
            c.ios[0],
            c.merges[0],
            c.sectors[0],
            ms(c.ticks_ns[0]),
            c.ios[1],
            c.merges[1],
            c.sectors[1],
            ms(c.ticks_ns[1]),
            c.in_flight,
            ms(c.io_ticks_ns),
            ms(c.ticks_ns[0] + c.ticks_ns[1]),
            0,
            0,
            0,
            0,
            0,
            0,
        ])
    }

    // ------------------------------------------------------------ tunables (used by fs.rs)

    pub(crate) fn set_nomerges(&mut self, d: usize, v: u8) {
        // queue_nomerges_store freezes the queue on every write, changed or not.
        if !self.devs[d].kind.is_dm() {
            self.nomerges_writes += 1;
            let now = self.now_ns;
            let until = now + self.costs.primary.freeze_min_ns;
            let dev = &mut self.devs[d];
            if !dev.nm_frozen {
                dev.nm_since_ns = now;
            }
            dev.nm_frozen = true;
            dev.nm_until_ns = dev.nm_until_ns.max(until);
            if until > now {
                self.push_ev(until, EV_UNFREEZE, d as u32, 0);
            }
        }
        if self.devs[d].nomerges != v {
            self.devs[d].nomerges = v;
            // The kernel drops the one-hit cache when merging is restricted.
            if v == 2 {
                self.devs[d].last_merge = NIL;
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
    fn try_unfreeze(&mut self, d: usize) {
        let dev = &self.devs[d];
        if !dev.nm_frozen || dev.cnt.in_flight > 0 || self.now_ns < dev.nm_until_ns {
            return;
        }
        self.nomerges_frozen_ns += self.now_ns - dev.nm_since_ns;
        let dev = &mut self.devs[d];
        dev.nm_frozen = false;
        dev.nm_until_ns = 0;
        let waiting = std::mem::take(&mut dev.nm_waiting);
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

    /// Names of the two currencies the steps are priced in: the scenario's own and the
    /// other shipped profile's (`PhaseAcc::cycles`, `PhaseAcc::cycles_second`).
    pub fn cost_names(&self) -> (&str, &str) {
        (&self.costs.primary.name, &self.costs.second.name)
    }

    /// Writes of `queue/nomerges` so far and the total time they kept queues frozen, ns.
    pub fn nomerges_freezes(&self) -> (u64, u64) {
        (self.nomerges_writes, self.nomerges_frozen_ns)
    }

    #[inline]
    fn charge(&mut self, ph: usize, d: usize, step: Step, n: u64) {
        let k = self.devs[d].sched.idx();
        let acc = &mut self.acc[ph][d];
        acc.cycles += self.costs.primary.by_sched[k].step(step) * n;
        acc.cycles_second += self.costs.second.by_sched[k].step(step) * n;
    }

    /// Switches the scheduler: the queue freezes until the requests in flight complete, and
    /// queued requests move to the new scheduler in FIFO order.
    pub(crate) fn set_scheduler(&mut self, d: usize, s: SchedKind) {
        if self.devs[d].sched == s {
            return;
        }
        self.scheduler_switches += 1;
        let mut pending: Vec<(u64, u32)> = Vec::new();
        for q in 0..2 {
            while let Some((r, g)) = self.devs[d].fifo[q].pop_front() {
                let rq = &self.reqs[r as usize];
                if rq.generation == g && rq.state == ReqState::Queued {
                    pending.push((rq.insert_ns, r));
                }
            }
        }
        pending.sort_unstable();
        let dev = &mut self.devs[d];
        dev.hash.clear();
        dev.sorted[0].clear();
        dev.sorted[1].clear();
        dev.queued = 0;
        dev.last_merge = NIL;
        dev.sched = s;
        dev.frozen = true;
        dev.tun = Tunables::default();
        dev.sl_active = None;
        dev.sl_idling = false;
        dev.sl_idle_gen = dev.sl_idle_gen.wrapping_add(1);
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

    // ------------------------------------------------------------ time

    fn push_ev(&mut self, t: u64, kind: u8, a: u32, b: u32) {
        self.seq += 1;
        let packed = ((self.seq & 0xFFFF) << 48)
            | ((kind as u64 & 0xF) << 44)
            | ((b & GEN_MASK) as u64) << 32
            | a as u64;
        self.events.push(Reverse(Ev { t, packed }));
    }

    /// Processes every event up to and including `t_ns`, then sets the clock to `t_ns`.
    pub fn advance_to(&mut self, t_ns: u64) {
        while let Some(Reverse(ev)) = self.events.peek().copied() {
            if ev.t > t_ns || self.halted.is_some() {
                break;
            }
            self.events.pop();
            self.now_ns = self.now_ns.max(ev.t);
            match ev.kind() {
                EV_COMPLETE => self.complete_req(ev.a()),
                EV_JOB_WAKE => {
                    let j = ev.a() as usize;
                    self.jobs[j].wake_pending = false;
                    self.job_try_submit(j);
                }
                EV_IDLE => self.idle_expired(ev.a() as usize, ev.b()),
                EV_PHASE => self.start_phase(ev.a() as usize),
                EV_UNFREEZE => self.try_unfreeze(ev.a() as usize),
                _ => {}
            }
        }
        self.now_ns = self.now_ns.max(t_ns);
    }

    /// Runs to the end of the last phase.
    pub fn run_to_end(&mut self) {
        let end = self.end_ns;
        self.advance_to(end);
    }

    fn start_phase(&mut self, p: usize) {
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

    // ------------------------------------------------------------ slabs

    fn alloc_bio(&mut self, bio: Bio) -> u32 {
        self.live_bios += 1;
        if self.bio_free != NIL {
            let i = self.bio_free;
            self.bio_free = self.bios[i as usize].next;
            self.bios[i as usize] = bio;
            i
        } else {
            self.bios.push(bio);
            (self.bios.len() - 1) as u32
        }
    }

    fn free_bio(&mut self, b: u32) {
        self.live_bios -= 1;
        self.bios[b as usize].next = self.bio_free;
        self.bio_free = b;
    }

    fn alloc_req(&mut self, b: u32) -> u32 {
        let bio = self.bios[b as usize];
        let r = if self.req_free != NIL {
            let i = self.req_free;
            self.req_free = self.reqs[i as usize].next_free;
            i
        } else {
            self.reqs.push(Request {
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
            (self.reqs.len() - 1) as u32
        };
        let rq = &mut self.reqs[r as usize];
        rq.dev = bio.dev;
        rq.dir = bio.dir;
        rq.sync = bio.sync;
        rq.state = ReqState::Plugged;
        rq.sector = bio.sector;
        rq.nr_sectors = bio.nr_sectors;
        rq.nr_segs = 1;
        rq.first_bio = b;
        rq.last_bio = b;
        rq.alloc_ns = self.now_ns;
        rq.generation = rq.generation.wrapping_add(1);
        self.bios[b as usize].next = NIL;
        r
    }

    fn free_req(&mut self, r: u32) {
        let rq = &mut self.reqs[r as usize];
        rq.state = ReqState::Free;
        rq.next_free = self.req_free;
        self.req_free = r;
    }

    // ------------------------------------------------------------ submission

    /// Submits bios by hand at the current time, all under one plug, from a built-in
    /// submitter (no queue-depth limit). For tests and crafted streams.
    pub fn submit_plugged(&mut self, dev: &str, bios: &[BioSpec]) -> Result<(), SimError> {
        let d = self
            .dev_index(dev)
            .ok_or_else(|| SimError::UnknownDevice(dev.into()))? as u32;
        self.jobs[0].plugging = true;
        for s in bios {
            let nr = s.nr_sectors.max(1);
            self.new_bio(0, d, s.dir, true, s.sector, nr);
        }
        self.flush_plug(0);
        Ok(())
    }

    fn new_bio(&mut self, j: usize, dev: u32, dir: Dir, sync: bool, sector: u64, nr: u32) {
        if self.live_bios >= MAX_IN_FLIGHT_BIOS {
            self.halt_in_flight(j);
            return;
        }
        let b = self.alloc_bio(Bio {
            job: j as u32,
            dev,
            dir,
            sync,
            sector,
            nr_sectors: nr,
            submit_ns: self.now_ns,
            parent: NIL,
            remaining: 0,
            next: NIL,
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

    fn submit_bio(&mut self, b: u32, j: usize) {
        let d = self.bios[b as usize].dev as usize;
        // sense: every bio entering a device is what the kernel's block_bio_queue reports.
        let x = &self.bios[b as usize];
        self.taps
            .record(d, self.now_ns, x.dir, x.sector, x.nr_sectors);
        if matches!(self.devs[d].media, Media::Dm { .. }) {
            self.dm_submit(b, j);
        } else {
            self.rq_submit(b, j);
        }
    }

    fn dm_submit(&mut self, b: u32, j: usize) {
        let bio = self.bios[b as usize];
        let d = bio.dev as usize;
        let ph = self.cur_phase;
        let now = self.now_ns;
        {
            let c = &mut self.devs[d].cnt;
            c.acct(now);
            c.in_flight += 1;
        }
        // The scratch vector is taken out while the pieces are submitted (no allocation
        // per bio once it has grown) and put back afterwards.
        let mut pieces = std::mem::take(&mut self.pieces);
        if let Media::Dm { table, .. } = &self.devs[d].media {
            table.map(bio.sector, bio.nr_sectors, &mut pieces);
        } else {
            pieces.clear();
        }
        self.acc[ph][d].bios[bio.dir.idx()] += 1;
        self.charge(ph, d, Step::DmSplit, pieces.len() as u64);
        self.bios[b as usize].remaining = pieces.len() as u32;
        for p in &pieces {
            let member = match &self.devs[d].media {
                Media::Dm { members, .. } => members[p.member],
                _ => continue,
            };
            let child = self.alloc_bio(Bio {
                job: bio.job,
                dev: member,
                dir: bio.dir,
                sync: bio.sync,
                sector: p.member_sector,
                nr_sectors: p.nr_sectors,
                submit_ns: now,
                parent: b,
                remaining: 0,
                next: NIL,
            });
            self.submit_bio(child, j);
        }
        self.pieces = pieces;
    }

    #[inline]
    fn eff_nomerges(dev: &Device) -> u8 {
        if dev.nomerges == 1 && matches!(dev.sched, SchedKind::None | SchedKind::Kyber) {
            0
        } else {
            dev.nomerges
        }
    }

    fn rq_submit(&mut self, b: u32, j: usize) {
        let bio = self.bios[b as usize];
        let d = bio.dev as usize;
        if self.devs[d].nm_frozen {
            // bio_queue_enter: wait for the freeze to end.
            self.devs[d].nm_waiting.push((b, j as u32));
            return;
        }
        let ph = self.cur_phase;
        let eff = Self::eff_nomerges(&self.devs[d]);
        self.acc[ph][d].bios[bio.dir.idx()] += 1;
        if eff < 2 {
            self.charge(ph, d, Step::PlugCheck, 1);
            // blk_attempt_plug_merge: one try, against the most recent request in the
            // plug for this queue (a plug can hold several queues: dm pieces).
            let plug_rq = self.jobs[j]
                .plug
                .iter()
                .rev()
                .copied()
                .find(|&r| self.reqs[r as usize].dev == d as u32);
            if let Some(r) = plug_rq
                && self.try_merge(r, b, true)
            {
                self.charge(ph, d, Step::Merge, 1);
                return;
            }
            self.charge(ph, d, Step::OneHit, 1);
            let lm = self.devs[d].last_merge;
            if lm != NIL && self.try_merge(lm, b, true) {
                self.charge(ph, d, Step::Merge, 1);
                return;
            }
            // Nothing queued means nothing to find: the lookups are still charged (the
            // kernel does them), but the simulator skips the work.
            let queued = self.devs[d].queued > 0;
            if eff == 0 {
                self.charge(ph, d, Step::HashLookup, 1);
                if queued
                    && let Some(&r) = self.devs[d].hash.get(&bio.sector)
                    && self.try_merge(r, b, false)
                {
                    self.devs[d].last_merge = r;
                    self.charge(ph, d, Step::Merge, 1);
                    return;
                }
                let dev = &self.devs[d];
                let front_ok = dev.sched != SchedKind::MqDeadline || dev.tun.front_merges == 1;
                if front_ok {
                    self.charge(ph, d, Step::FrontLookup, 1);
                    let end = bio.sector + bio.nr_sectors as u64;
                    let hit = if queued {
                        self.devs[d].sorted[bio.dir.idx()]
                            .range((end, 0)..=(end, u32::MAX))
                            .next()
                            .map(|&(_, r)| r)
                    } else {
                        None
                    };
                    if let Some(r) = hit
                        && self.try_merge(r, b, true)
                    {
                        self.devs[d].last_merge = r;
                        self.charge(ph, d, Step::Merge, 1);
                        return;
                    }
                }
            }
        }
        self.charge(ph, d, Step::RequestAlloc, 1);
        let now = self.now_ns;
        {
            let c = &mut self.devs[d].cnt;
            c.acct(now);
            c.in_flight += 1;
        }
        let r = self.alloc_req(b);
        if self.jobs[j].plugging {
            self.jobs[j].plug.push(r);
            if self.jobs[j].plug.len() >= PLUG_MAX_REQUESTS {
                self.flush_plug_list(j);
            }
        } else {
            self.insert(r);
        }
    }

    /// Tries to merge bio `b` into request `r` (back, or front if allowed).
    fn try_merge(&mut self, r: u32, b: u32, allow_front: bool) -> bool {
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
        if dev.sched == SchedKind::Slice && rq.sync != bio.sync {
            return false;
        }
        let max_sectors = dev.max_sectors_kb as u64 * 2;
        if rq.nr_sectors as u64 + bio.nr_sectors as u64 > max_sectors
            || rq.nr_segs + 1 > dev.max_segments
        {
            return false;
        }
        let queued = rq.state == ReqState::Queued;
        if rq.sector + rq.nr_sectors as u64 == bio.sector {
            let old_end = rq.sector + rq.nr_sectors as u64;
            let new_end = old_end + bio.nr_sectors as u64;
            self.bios[rq.last_bio as usize].next = b;
            self.bios[b as usize].next = NIL;
            let rqm = &mut self.reqs[r as usize];
            rqm.last_bio = b;
            rqm.nr_sectors += bio.nr_sectors;
            rqm.nr_segs += 1;
            if queued {
                let dev = &mut self.devs[d];
                if dev.hash.get(&old_end) == Some(&r) {
                    dev.hash.remove(&old_end);
                }
                dev.hash.insert(new_end, r);
            }
        } else if allow_front && bio.sector + bio.nr_sectors as u64 == rq.sector {
            self.bios[b as usize].next = rq.first_bio;
            let rqm = &mut self.reqs[r as usize];
            rqm.first_bio = b;
            rqm.sector = bio.sector;
            rqm.nr_sectors += bio.nr_sectors;
            rqm.nr_segs += 1;
            if queued {
                let set = &mut self.devs[d].sorted[rq.dir.idx()];
                set.remove(&(rq.sector, r));
                set.insert((bio.sector, r));
            }
        } else {
            return false;
        }
        let c = &mut self.devs[d].cnt;
        c.merges[bio.dir.idx()] += 1;
        self.acc[self.cur_phase][d].merged[bio.dir.idx()] += 1;
        true
    }

    fn flush_plug_list(&mut self, j: usize) {
        let mut list = std::mem::take(&mut self.jobs[j].plug);
        for &r in &list {
            self.insert(r);
        }
        list.clear();
        self.jobs[j].plug = list;
    }

    fn flush_plug(&mut self, j: usize) {
        self.jobs[j].plugging = false;
        self.flush_plug_list(j);
    }

    fn fifo_index(dev: &Device, rq: &Request) -> usize {
        match dev.sched {
            SchedKind::None | SchedKind::Kyber => 0,
            SchedKind::MqDeadline => rq.dir.idx(),
            SchedKind::Slice => {
                if rq.sync {
                    0
                } else {
                    1
                }
            }
        }
    }

    /// Puts a request into the scheduler's structures (FIFO, hash, sorted tree).
    fn enqueue(&mut self, r: u32) {
        let rq = &mut self.reqs[r as usize];
        rq.state = ReqState::Queued;
        rq.insert_ns = self.now_ns;
        let rq = *rq;
        let d = rq.dev as usize;
        let dev = &mut self.devs[d];
        let q = Self::fifo_index(dev, &rq);
        dev.fifo[q].push_back((r, rq.generation));
        dev.hash.insert(rq.sector + rq.nr_sectors as u64, r);
        dev.sorted[rq.dir.idx()].insert((rq.sector, r));
        dev.queued += 1;
        if dev.last_merge == NIL && Self::eff_nomerges(dev) < 2 {
            dev.last_merge = r;
        }
    }

    fn insert(&mut self, r: u32) {
        let rq = self.reqs[r as usize];
        let d = rq.dev as usize;
        self.charge(self.cur_phase, d, Step::Insert, 1);
        let dev = &self.devs[d];
        if dev.queued == 0
            && dev.busy_tags < dev.queue_depth
            && !dev.frozen
            && dev.sched != SchedKind::Slice
        {
            // Nothing waiting and a tag free: straight through, no chance to merge.
            self.reqs[r as usize].state = ReqState::Queued;
            self.reqs[r as usize].insert_ns = self.now_ns;
            self.dispatch_req(r);
            return;
        }
        self.enqueue(r);
        if self.devs[d].sched == SchedKind::Slice && rq.sync && self.devs[d].sl_idling {
            let dev = &mut self.devs[d];
            dev.sl_idling = false;
            dev.sl_idle_gen = dev.sl_idle_gen.wrapping_add(1);
        }
        self.run_dispatch(d);
    }

    // ------------------------------------------------------------ dispatch

    fn unqueue(&mut self, r: u32) {
        let rq = self.reqs[r as usize];
        let dev = &mut self.devs[rq.dev as usize];
        let end = rq.sector + rq.nr_sectors as u64;
        if dev.hash.get(&end) == Some(&r) {
            dev.hash.remove(&end);
        }
        dev.sorted[rq.dir.idx()].remove(&(rq.sector, r));
        dev.queued -= 1;
        if dev.last_merge == r {
            dev.last_merge = NIL;
        }
    }

    fn fifo_peek(&mut self, d: usize, q: usize) -> Option<u32> {
        while let Some(&(r, g)) = self.devs[d].fifo[q].front() {
            let rq = &self.reqs[r as usize];
            if rq.generation == g && rq.state == ReqState::Queued {
                return Some(r);
            }
            self.devs[d].fifo[q].pop_front();
        }
        None
    }

    fn fifo_pop(&mut self, d: usize, q: usize) -> Option<u32> {
        let r = self.fifo_peek(d, q)?;
        self.devs[d].fifo[q].pop_front();
        Some(r)
    }

    fn run_dispatch(&mut self, d: usize) {
        if self.devs[d].frozen {
            if self.devs[d].busy_tags > 0 {
                return;
            }
            self.devs[d].frozen = false;
        }
        loop {
            let dev = &self.devs[d];
            if dev.busy_tags >= dev.queue_depth || dev.queued == 0 {
                return;
            }
            let r = match dev.sched {
                SchedKind::None | SchedKind::Kyber => self.fifo_pop(d, 0),
                SchedKind::MqDeadline => self.dd_select(d),
                SchedKind::Slice => self.slice_select(d),
            };
            match r {
                Some(r) => {
                    self.unqueue(r);
                    self.dispatch_req(r);
                }
                None => return,
            }
        }
    }

    fn dd_next(&self, d: usize, dir: Dir) -> Option<u32> {
        let pos = self.devs[d].dd_next_pos[dir.idx()];
        self.devs[d].sorted[dir.idx()]
            .range((pos, 0)..)
            .next()
            .map(|&(_, r)| r)
    }

    /// mq-deadline's dd_dispatch_request, without priorities or zones.
    fn dd_select(&mut self, d: usize) -> Option<u32> {
        let dev = &self.devs[d];
        if dev.dd_batching < dev.tun.fifo_batch
            && let Some(r) = self.dd_next(d, dev.dd_last_dir)
        {
            return Some(r);
        }
        let reads = !self.devs[d].sorted[0].is_empty();
        let writes = !self.devs[d].sorted[1].is_empty();
        let dev = &mut self.devs[d];
        let dir = if reads {
            let starved = dev.dd_starved;
            if writes {
                dev.dd_starved += 1;
            }
            if writes && starved >= dev.tun.writes_starved {
                dev.dd_starved = 0;
                Dir::Write
            } else {
                Dir::Read
            }
        } else if writes {
            dev.dd_starved = 0;
            Dir::Write
        } else {
            return None;
        };
        let expire_ms = if dir == Dir::Read {
            dev.tun.read_expire
        } else {
            dev.tun.write_expire
        };
        dev.dd_batching = 0;
        dev.dd_last_dir = dir;
        let head = self.fifo_peek(d, dir.idx())?;
        let expired = self.reqs[head as usize]
            .insert_ns
            .saturating_add(expire_ms.saturating_mul(1_000_000))
            <= self.now_ns;
        if expired {
            return Some(head);
        }
        Some(self.dd_next(d, dir).unwrap_or(head))
    }

    /// The sync/async slice scheduler (bfq / CFQ stand-in).
    fn slice_select(&mut self, d: usize) -> Option<u32> {
        loop {
            let now = self.now_ns;
            match self.devs[d].sl_active {
                Some(c) => {
                    if now >= self.devs[d].sl_end_ns {
                        self.expire_slice(d, c);
                        continue;
                    }
                    let dev = &self.devs[d];
                    if c == 1 && dev.tun.low_latency == 1 {
                        // CFQ's low_latency: no async dispatch while sync I/O is in flight,
                        // and the async depth ramps up with the time since the last sync
                        // completion (one request right after it), so reads never queue
                        // behind a full device of writes.
                        if dev.sl_sync_inflight > 0 {
                            return None;
                        }
                        let since = now.saturating_sub(dev.sl_last_sync_done_ns);
                        let depth =
                            (since / dev.tun.slice_sync.max(1).saturating_mul(1_000_000)).max(1);
                        if dev.sl_async_inflight as u64 >= depth {
                            return None;
                        }
                    }
                    if let Some(r) = self.fifo_pop(d, c) {
                        return Some(r);
                    }
                    let dev = &mut self.devs[d];
                    if dev.sl_idling {
                        return None;
                    }
                    if c == 0 && dev.tun.slice_idle > 0 {
                        if dev.sl_sync_inflight > 0 {
                            // Wait for the class's in-flight I/O before idling (CFQ).
                            return None;
                        }
                        dev.sl_idling = true;
                        dev.sl_idle_gen = dev.sl_idle_gen.wrapping_add(1);
                        let t = now
                            .saturating_add(dev.tun.slice_idle.saturating_mul(1_000_000))
                            .min(dev.sl_end_ns);
                        let g = dev.sl_idle_gen;
                        self.push_ev(t, EV_IDLE, d as u32, g);
                        return None;
                    }
                    self.expire_slice(d, c);
                }
                None => {
                    let s = self.fifo_peek(d, 0).is_some();
                    let a = self.fifo_peek(d, 1).is_some();
                    let dev = &mut self.devs[d];
                    let c = match (s, a) {
                        (true, true) => 1 - dev.sl_last,
                        (true, false) => 0,
                        (false, true) => 1,
                        (false, false) => return None,
                    };
                    let slice_ms = if c == 0 {
                        dev.tun.slice_sync
                    } else {
                        dev.tun.slice_async
                    };
                    dev.sl_active = Some(c);
                    dev.sl_end_ns = now.saturating_add(slice_ms.max(1).saturating_mul(1_000_000));
                }
            }
        }
    }

    fn expire_slice(&mut self, d: usize, c: usize) {
        let dev = &mut self.devs[d];
        dev.sl_active = None;
        dev.sl_last = c;
        dev.sl_idling = false;
        dev.sl_idle_gen = dev.sl_idle_gen.wrapping_add(1);
    }

    fn idle_expired(&mut self, d: usize, gen_: u32) {
        let dev = &self.devs[d];
        if dev.sl_idling && dev.sl_idle_gen & GEN_MASK == gen_ {
            if let Some(c) = dev.sl_active {
                self.expire_slice(d, c);
            }
            self.run_dispatch(d);
        }
    }

    fn dispatch_req(&mut self, r: u32) {
        let rq = self.reqs[r as usize];
        let d = rq.dev as usize;
        let now = self.now_ns;
        self.reqs[r as usize].state = ReqState::InFlight;
        self.charge(self.cur_phase, d, Step::Dispatch, 1);
        let rng = &mut self.rng;
        let dev = &mut self.devs[d];
        dev.busy_tags += 1;
        if dev.sched == SchedKind::MqDeadline {
            if dev.dd_last_dir == rq.dir {
                dev.dd_batching += 1;
            } else {
                dev.dd_last_dir = rq.dir;
                dev.dd_batching = 1;
            }
            dev.dd_next_pos[rq.dir.idx()] = rq.sector + rq.nr_sectors as u64;
        }
        if dev.sched == SchedKind::Slice {
            if rq.sync {
                dev.sl_sync_inflight += 1;
            } else {
                dev.sl_async_inflight += 1;
            }
        }
        let end = match &dev.media {
            Media::Ssd {
                overhead_ns,
                ns_per_sector,
            } => {
                // A large request is striped over up to `parallelism` channels in 64 KiB
                // units; the per-request overhead varies by up to a quarter (garbage
                // collection, channel contention) so latency has a tail.
                let units = (rq.nr_sectors as usize)
                    .div_ceil(128)
                    .clamp(1, dev.servers.len().max(1));
                let ovh = overhead_ns[rq.dir.idx()];
                let svc = ovh
                    + rng.below(ovh / 4 + 1)
                    + (rq.nr_sectors as f64 * ns_per_sector / units as f64) as u64;
                match dev.servers.peek_mut() {
                    Some(mut top) => {
                        let end = top.0.max(now) + svc;
                        *top = Reverse(end);
                        end
                    }
                    None => now + svc,
                }
            }
            Media::Hdd {
                overhead_ns,
                min_seek_ns,
                max_seek_ns,
                rev_ns,
                ns_per_sector,
            } => {
                let start = dev.servers.peek().map_or(now, |r| r.0).max(now);
                let dist = rq.sector.abs_diff(dev.head_sector);
                let (seek, rot) = if dist == 0 {
                    (0, 0)
                } else {
                    let frac = (dist as f64 / dev.capacity_sectors.max(1) as f64).min(1.0);
                    (
                        (min_seek_ns + (max_seek_ns - min_seek_ns) * frac.sqrt()) as u64,
                        rng.below(*rev_ns),
                    )
                };
                let xfer = (rq.nr_sectors as f64 * ns_per_sector) as u64;
                let end = start + overhead_ns + seek + rot + xfer;
                dev.head_sector = rq.sector + rq.nr_sectors as u64;
                if let Some(mut top) = dev.servers.peek_mut() {
                    *top = Reverse(end);
                }
                end
            }
            Media::Dm { .. } => now,
        };
        self.push_ev(end, EV_COMPLETE, r, 0);
    }

    // ------------------------------------------------------------ completion

    fn complete_req(&mut self, r: u32) {
        let rq = self.reqs[r as usize];
        let d = rq.dev as usize;
        let now = self.now_ns;
        let ph = self.cur_phase;
        {
            let dev = &mut self.devs[d];
            dev.busy_tags -= 1;
            if dev.sched == SchedKind::Slice {
                if rq.sync {
                    dev.sl_sync_inflight = dev.sl_sync_inflight.saturating_sub(1);
                    dev.sl_last_sync_done_ns = now;
                } else {
                    dev.sl_async_inflight = dev.sl_async_inflight.saturating_sub(1);
                }
            }
            let c = &mut dev.cnt;
            c.acct(now);
            c.in_flight -= 1;
            c.ios[rq.dir.idx()] += 1;
            c.sectors[rq.dir.idx()] += rq.nr_sectors as u64;
            c.ticks_ns[rq.dir.idx()] += now - rq.alloc_ns;
            let acc = &mut self.acc[ph][d];
            acc.completed[rq.dir.idx()] += 1;
            acc.sectors[rq.dir.idx()] += rq.nr_sectors as u64;
            self.charge(ph, d, Step::Completion, 1);
        }
        self.free_req(r);
        let mut b = rq.first_bio;
        while b != NIL {
            let next = self.bios[b as usize].next;
            self.end_bio(b, d);
            b = next;
        }
        self.run_dispatch(d);
        self.try_unfreeze(d);
    }

    fn end_bio(&mut self, b: u32, d: usize) {
        let bio = self.bios[b as usize];
        let now = self.now_ns;
        let ph = self.cur_phase;
        let acc = &mut self.acc[ph][d];
        acc.lat[bio.dir.idx()].record(now - bio.submit_ns);
        self.charge(ph, d, Step::BioComplete, 1);
        self.free_bio(b);
        if bio.parent != NIL {
            let p = bio.parent as usize;
            self.bios[p].remaining -= 1;
            if self.bios[p].remaining == 0 {
                let pb = self.bios[p];
                let pd = pb.dev as usize;
                let c = &mut self.devs[pd].cnt;
                c.acct(now);
                c.in_flight -= 1;
                c.ios[pb.dir.idx()] += 1;
                c.sectors[pb.dir.idx()] += pb.nr_sectors as u64;
                c.ticks_ns[pb.dir.idx()] += now - pb.submit_ns;
                let acc = &mut self.acc[ph][pd];
                acc.completed[pb.dir.idx()] += 1;
                acc.sectors[pb.dir.idx()] += pb.nr_sectors as u64;
                self.end_bio(p as u32, pd);
            }
        } else {
            let j = bio.job as usize;
            let job = &mut self.jobs[j];
            job.outstanding -= 1;
            if job.think_ns > 0 {
                job.next_think_ns = job.next_think_ns.max(now.saturating_add(job.think_ns));
            }
            // Like fio reaping each completion as it arrives: the job may submit again at
            // once (a request's bios complete one after another, so with
            // batch_complete=1 they come back as single submissions).
            if job.active {
                self.job_try_submit(j);
            }
        }
    }

    // ------------------------------------------------------------ workload

    fn job_try_submit(&mut self, j: usize) {
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
                    self.push_ev(allowed, EV_JOB_WAKE, j as u32, 0);
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
            job.plugging = true;
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

    fn trace_submit(&mut self, j: usize) {
        let now = self.now_ns;
        let (bios, mut idx, base) = match &self.jobs[j].kind {
            JobKind::Trace { bios, idx, base_ns } => (bios.clone(), *idx, *base_ns),
            _ => return,
        };
        let dev = self.jobs[j].dev;
        let cap = self.devs[dev as usize].capacity_sectors;
        while idx < bios.len() && base + bios[idx].t_ns <= now && self.halted.is_none() {
            self.jobs[j].plugging = true;
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
            self.push_ev(t, EV_JOB_WAKE, j as u32, 0);
        }
    }

    /// Names of generator jobs (for reports).
    pub fn job_names(&self) -> Vec<String> {
        self.jobs.iter().skip(1).map(|j| j.name.clone()).collect()
    }
}
