//! The per-device state `advise` keeps while it streams a trace: fixed size whatever the
//! trace's length. Counters, log-scale size and distance histograms, a [`Timeline`] of at
//! most [`TIMELINE_BUCKETS`] buckets (their width doubles as the trace grows), a reservoir
//! of at most [`SCATTER_POINTS`] sampled bios for the sector-over-time picture, and capped
//! maps (tasks, requests in flight).
//!
//! A merge is judged *simple* (kept at L2, `nomerges=1`) when the merged bio abuts the bio
//! queued just before it by the same task, or the bio queued just before it on the device:
//! the plug (same task, same batch) or the one-hit cache (the queue's last request) finds
//! that request without the hash or tree lookups (see the folder's `//!`).

use mergetune_kernel::devices::DevNumber;
use mergetune_kernel::trace::Dir;
use mergetune_kernel::trace::{BlockEvent, EventKind};
use mergetune_sim::hist::Histogram;
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// Size histogram buckets: `512 B << i`, the last one open (>= 16 MiB).
pub const SIZE_BUCKETS: usize = 16;
/// Distance buckets between consecutive bios (see [`DIST_LABELS`]).
pub const DIST_BUCKETS: usize = 8;
pub const DIST_LABELS: [&str; DIST_BUCKETS] = [
    "contiguous (starts where the previous ended)",
    "front-contiguous (ends where the previous started)",
    "within 64 KiB",
    "within 1 MiB",
    "within 16 MiB",
    "within 256 MiB",
    "farther than 256 MiB",
    "first bio / unknown",
];
/// Timeline buckets per device; the bucket width doubles whenever the trace outgrows them.
pub const TIMELINE_BUCKETS: usize = 256;
/// Sampled bios kept per device for the sector-over-time scatter.
pub const SCATTER_POINTS: usize = 4000;
/// Tasks tracked per device for per-task sequentiality; beyond, the map starts over.
pub const MAX_TASKS: usize = 4096;
/// Requests in flight tracked per device for completion latency.
pub const MAX_INFLIGHT: usize = 65536;
/// Devices kept apart in one trace; events of more devices are counted and skipped.
pub const MAX_DEVICES: usize = 64;
/// The least time a device's events must span for a rate: below it (one bio, or
/// timestamps that do not advance) bios/s and MB/s would be a division by almost nothing
/// (one bio gave "1000000000 bios/s"), so the device gets no rate and no advice.
pub const MIN_RATE_SPAN_NS: u64 = 1_000_000;
/// Bad lines quoted in the report.
pub const MAX_ERROR_EXAMPLES: usize = 5;
/// The longest trace line read: block events are about 100 bytes; a longer line (or a
/// file with no newline) is skipped as bad without being held whole in memory.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Bios a `--what-if` replay takes at most from the trace (the simulator holds them).
pub const DEFAULT_WHAT_IF_MAX_BIOS: usize = 300_000;

/// The device `--device` names: `7,0`, `7:0`, or a device name resolved through
/// `sysfs_root/block/NAME/dev` (a `loopN` not present here is taken as `7,N`).
pub fn resolve_device(spec: &str, sysfs_root: &Path) -> Result<DevNumber, String> {
    let spec = spec.trim().trim_start_matches("/dev/");
    if let Some((a, b)) = spec.split_once([',', ':'])
        && let (Ok(major), Ok(minor)) = (a.parse(), b.parse())
    {
        return Ok(DevNumber { major, minor });
    }
    let p = sysfs_root.join("block").join(spec).join("dev");
    if let Ok(text) = std::fs::read_to_string(&p)
        && let Ok(number) = DevNumber::try_from(text)
    {
        return Ok(number);
    }
    if let Some(n) = spec.strip_prefix("loop").and_then(|n| n.parse().ok()) {
        return Ok(DevNumber { major: 7, minor: n });
    }
    Err(format!(
        "--device {spec:?}: not MAJOR,MINOR and no {} on this machine",
        p.display()
    ))
}

/// A timeline of fixed size whose bucket width doubles when time runs past its end.
#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    /// Width of one bucket, ns.
    pub bucket_ns: u64,
    /// Bios queued per bucket, reads and writes.
    pub bios: Vec<[u64; 2]>,
    /// Merges (back + front) per bucket.
    pub merges: Vec<u64>,
    /// Highest number of requests in flight (issued, not completed) seen in the bucket.
    pub depth_max: Vec<u32>,
    /// Buckets holding data: `0..used`.
    pub used: usize,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            bucket_ns: 1_000,
            bios: vec![[0; 2]; TIMELINE_BUCKETS],
            merges: vec![0; TIMELINE_BUCKETS],
            depth_max: vec![0; TIMELINE_BUCKETS],
            used: 0,
        }
    }
}

impl Timeline {
    fn index(&mut self, t_rel_ns: u64) -> usize {
        while t_rel_ns / self.bucket_ns >= TIMELINE_BUCKETS as u64 {
            self.fold();
        }
        let i = (t_rel_ns / self.bucket_ns) as usize;
        self.used = self.used.max(i + 1);
        i
    }

    fn fold(&mut self) {
        for i in 0..TIMELINE_BUCKETS / 2 {
            let (a, b) = (2 * i, 2 * i + 1);
            self.bios[i] = [
                self.bios[a][0] + self.bios[b][0],
                self.bios[a][1] + self.bios[b][1],
            ];
            self.merges[i] = self.merges[a] + self.merges[b];
            self.depth_max[i] = self.depth_max[a].max(self.depth_max[b]);
        }
        for i in TIMELINE_BUCKETS / 2..TIMELINE_BUCKETS {
            self.bios[i] = [0; 2];
            self.merges[i] = 0;
            self.depth_max[i] = 0;
        }
        self.used = self.used.div_ceil(2);
        self.bucket_ns = self.bucket_ns.saturating_mul(2);
    }
}

/// One sampled bio of the scatter picture.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScatterPoint {
    /// Seconds since the first event of the trace.
    pub t_s: f64,
    pub sector: u64,
    pub write: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct Pos {
    start: u64,
    end: u64,
    /// The latest bio abuts the one before it (back or front): a merge of it is simple.
    abuts: bool,
}

/// Where a bio lands relative to the previous one (bucket of [`DIST_LABELS`]).
fn dist_bucket(prev: Option<Pos>, start: u64, end: u64) -> usize {
    let Some(p) = prev else { return 7 };
    if start == p.end {
        return 0;
    }
    if end == p.start {
        return 1;
    }
    let d = start.abs_diff(p.end);
    match d {
        0..=128 => 2,
        129..=2048 => 3,
        2049..=32768 => 4,
        32769..=524288 => 5,
        _ => 6,
    }
}

fn size_bucket(bytes: u64) -> usize {
    let units = (bytes / 512).max(1);
    (63 - units.leading_zeros() as usize).min(SIZE_BUCKETS - 1)
}

/// Lower bound of a size bucket, for labels.
pub fn size_bucket_label(i: usize) -> String {
    let b = 512u64 << i;
    let s = if b >= 1 << 20 {
        format!("{} MiB", b >> 20)
    } else if b >= 1024 {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    };
    if i == SIZE_BUCKETS - 1 {
        format!(">= {s}")
    } else {
        s
    }
}

/// Everything kept for one device: fixed size.
#[derive(Debug, Clone)]
pub struct DeviceAcc {
    pub dev: DevNumber,
    pub bios: [u64; 2],
    pub bytes: [u64; 2],
    pub sync_writes: u64,
    /// Queue events without data (flushes, discards).
    pub nodata: u64,
    pub size_hist: [u64; SIZE_BUCKETS],
    pub dist_task: [u64; DIST_BUCKETS],
    pub dist_dev: [u64; DIST_BUCKETS],
    pub back_merges: [u64; 2],
    pub front_merges: [u64; 2],
    /// Merges whose bio abuts the bio queued just before it (kept at L2, see module doc).
    pub simple_merges: u64,
    pub splits: u64,
    pub requeues: u64,
    pub issues: u64,
    pub completes: u64,
    pub inflight_max: u32,
    pub lat: [Histogram; 2],
    /// Completions with no matching issue (started before the capture, or map full).
    pub unmatched_completes: u64,
    pub first_ns: Option<u64>,
    pub last_ns: u64,
    /// The earliest and the latest bio queued: the rates' span is between them, whatever
    /// the order of the lines (a trace whose clock steps back, or reversed, made a span of
    /// 0 from the first line to the latest).
    pub queue_min_ns: u64,
    pub queue_max_ns: u64,
    /// Events earlier than the previous event of this device by more than 1 ms.
    pub out_of_order: u64,
    pub timeline: Timeline,
    pub scatter: Vec<ScatterPoint>,
    /// Times the per-task map was full and started over.
    pub task_map_resets: u64,
    scatter_seen: u64,
    rng: u64,
    inflight: u32,
    last_pos: Option<Pos>,
    tasks: HashMap<u32, Pos>,
    inflight_map: HashMap<u64, (u64, Dir)>,
}

impl DeviceAcc {
    pub(super) fn new(dev: DevNumber) -> Self {
        DeviceAcc {
            dev,
            bios: [0; 2],
            bytes: [0; 2],
            sync_writes: 0,
            nodata: 0,
            size_hist: [0; SIZE_BUCKETS],
            dist_task: [0; DIST_BUCKETS],
            dist_dev: [0; DIST_BUCKETS],
            back_merges: [0; 2],
            front_merges: [0; 2],
            simple_merges: 0,
            splits: 0,
            requeues: 0,
            issues: 0,
            completes: 0,
            inflight_max: 0,
            lat: [Histogram::default(), Histogram::default()],
            unmatched_completes: 0,
            first_ns: None,
            last_ns: 0,
            queue_min_ns: u64::MAX,
            queue_max_ns: 0,
            out_of_order: 0,
            timeline: Timeline::default(),
            scatter: Vec::with_capacity(SCATTER_POINTS),
            task_map_resets: 0,
            scatter_seen: 0,
            rng: 0x9E37_79B9_7F4A_7C15 ^ ((dev.major as u64) << 32 | dev.minor as u64),
            inflight: 0,
            last_pos: None,
            tasks: HashMap::new(),
            inflight_map: HashMap::new(),
        }
    }

    /// Bytes of heap this device's state can grow to at most: a bound that does not
    /// depend on the trace's length (the test of flat memory asserts on it).
    pub fn state_bound_bytes() -> usize {
        let per_task = 64; // key + Pos + hash-map overhead, generously
        let per_req = 64;
        std::mem::size_of::<DeviceAcc>()
            + 2 * std::mem::size_of::<Histogram>()
            + 2 * 1024 * 8
            + TIMELINE_BUCKETS * (16 + 8 + 4)
            + SCATTER_POINTS * std::mem::size_of::<ScatterPoint>()
            + MAX_TASKS * per_task
            + MAX_INFLIGHT * per_req
    }

    /// Entries in the capped maps now (tasks, requests in flight), for tests.
    pub fn map_sizes(&self) -> (usize, usize) {
        (self.tasks.len(), self.inflight_map.len())
    }

    fn next_rand(&mut self) -> u64 {
        // xorshift64*: deterministic sampling, same trace, same picture.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(super) fn feed(&mut self, ev: &BlockEvent, t0: u64) {
        let t = ev.t_ns;
        if self.first_ns.is_none() {
            self.first_ns = Some(t);
        }
        if t + 1_000_000 < self.last_ns {
            self.out_of_order += 1;
        }
        self.last_ns = self.last_ns.max(t);
        if ev.kind == EventKind::Queue {
            self.queue_min_ns = self.queue_min_ns.min(t);
            self.queue_max_ns = self.queue_max_ns.max(t);
        }
        let rel = t.saturating_sub(t0);
        match ev.kind {
            EventKind::Queue => self.queue(ev, rel),
            EventKind::BackMerge | EventKind::FrontMerge => {
                let d = ev.dir.unwrap_or(Dir::Read).idx();
                if ev.kind == EventKind::BackMerge {
                    self.back_merges[d] += 1;
                } else {
                    self.front_merges[d] += 1;
                }
                if self.merge_is_simple(ev) {
                    self.simple_merges += 1;
                }
                let i = self.timeline.index(rel);
                self.timeline.merges[i] += 1;
            }
            EventKind::Issue => {
                self.issues += 1;
                self.inflight = self.inflight.saturating_add(1);
                self.inflight_max = self.inflight_max.max(self.inflight);
                if let (Some((sector, _)), Some(dir)) = (ev.extent, ev.dir)
                    && (self.inflight_map.len() < MAX_INFLIGHT
                        || self.inflight_map.contains_key(&sector))
                {
                    self.inflight_map.insert(sector, (t, dir));
                }
                let i = self.timeline.index(rel);
                self.timeline.depth_max[i] = self.timeline.depth_max[i].max(self.inflight);
            }
            EventKind::Complete => {
                self.completes += 1;
                self.inflight = self.inflight.saturating_sub(1);
                match ev.extent.and_then(|(s, _)| self.inflight_map.remove(&s)) {
                    Some((t_issue, dir)) => self.lat[dir.idx()].record(t.saturating_sub(t_issue)),
                    None => self.unmatched_completes += 1,
                }
                let i = self.timeline.index(rel);
                self.timeline.depth_max[i] = self.timeline.depth_max[i].max(self.inflight);
            }
            EventKind::Requeue => {
                self.requeues += 1;
                self.inflight = self.inflight.saturating_sub(1);
                if let Some((s, _)) = ev.extent {
                    self.inflight_map.remove(&s);
                }
            }
            EventKind::Split => self.splits += 1,
            _ => {}
        }
    }

    fn queue(&mut self, ev: &BlockEvent, rel: u64) {
        let (Some(dir), Some((start, nr))) = (ev.dir, ev.extent.filter(|e| e.1 > 0)) else {
            self.nodata += 1;
            return;
        };
        let d = dir.idx();
        let end = start.saturating_add(nr as u64);
        let bytes = nr as u64 * 512;
        self.bios[d] += 1;
        self.bytes[d] = self.bytes[d].saturating_add(bytes);
        if dir == Dir::Write && ev.sync {
            self.sync_writes += 1;
        }
        self.size_hist[size_bucket(bytes)] += 1;
        if self.tasks.len() >= MAX_TASKS && !self.tasks.contains_key(&ev.pid) {
            self.tasks.clear();
            self.task_map_resets += 1;
        }
        let prev_task = self.tasks.get(&ev.pid).copied();
        let bt = dist_bucket(prev_task, start, end);
        let bd = dist_bucket(self.last_pos, start, end);
        self.dist_task[bt] += 1;
        self.dist_dev[bd] += 1;
        let pos = Pos {
            start,
            end,
            abuts: bt <= 1 || bd <= 1,
        };
        self.tasks.insert(ev.pid, pos);
        self.last_pos = Some(pos);
        let i = self.timeline.index(rel);
        self.timeline.bios[i][d] += 1;
        // Reservoir sampling (algorithm R).
        self.scatter_seen += 1;
        let point = ScatterPoint {
            t_s: rel as f64 / 1e9,
            sector: start,
            write: dir == Dir::Write,
        };
        if self.scatter.len() < SCATTER_POINTS {
            self.scatter.push(point);
        } else {
            let j = self.next_rand() % self.scatter_seen;
            if (j as usize) < SCATTER_POINTS {
                self.scatter[j as usize] = point;
            }
        }
    }

    fn merge_is_simple(&self, ev: &BlockEvent) -> bool {
        let Some((start, _)) = ev.extent else {
            return false;
        };
        match self.tasks.get(&ev.pid) {
            Some(p) if p.start == start => p.abuts,
            _ => self.last_pos.is_some_and(|p| p.start == start && p.abuts),
        }
    }

    pub fn total_bios(&self) -> u64 {
        self.bios[0] + self.bios[1]
    }

    pub fn merges(&self) -> u64 {
        self.back_merges[0] + self.back_merges[1] + self.front_merges[0] + self.front_merges[1]
    }

    /// From the earliest to the latest bio queued on the device (the bios are what the
    /// rates count).
    pub fn span_ns(&self) -> u64 {
        self.queue_max_ns
            .saturating_sub(self.queue_min_ns.min(self.queue_max_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_is_named_by_number_by_its_sysfs_dev_file_or_as_a_loop_device() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("block/sdb")).unwrap();
        std::fs::write(root.join("block/sdb/dev"), "8:16\n").unwrap();
        let number = |major, minor| Ok(DevNumber { major, minor });
        assert_eq!(resolve_device("7,3", root), number(7, 3));
        assert_eq!(resolve_device("7:3", root), number(7, 3));
        assert_eq!(resolve_device("/dev/sdb", root), number(8, 16));
        assert_eq!(resolve_device("loop5", root), number(7, 5));
        let e = resolve_device("nvme9n1", root).unwrap_err();
        assert!(
            e.starts_with("--device \"nvme9n1\": not MAJOR,MINOR"),
            "{e}"
        );
    }
}
