//! `mergetune advise TRACE`: helpful suggestions from a captured block trace.
//!
//! Carl Henrik's idea in the 2008 nomerges thread (docs/design.md): "a program which makes some helpful
//! suggestions after looking at a blktrace file ... suggest changing the I/O scheduler,
//! increasing a parameter such as slice_sync, or disable merges". This module reads the
//! tracing filesystem's block events (or blkparse's text) through the simulator's own line
//! parser ([`crate::kernel::trace::parse_event`]), one line at a time, and keeps only
//! fixed-size state per device: counters, log-scale histograms, a timeline of at most
//! [`TIMELINE_BUCKETS`] buckets (their width doubles as the trace grows), a reservoir of at
//! most [`SCATTER_POINTS`] sampled bios for the sector-over-time picture, and capped maps
//! (tasks, requests in flight). Memory is flat in trace length.
//!
//! The merge ladder (see [`crate::logic::policy`]): L0 keeps every merge, L1 drops front merges,
//! L2 (`nomerges=1`) keeps only the plug and one-hit (`last_merge`) merges, L3 none. A
//! trace does not say which path a merge took; the approximation used here: a merge is a
//! *simple* one (kept at L2) when the merged bio abuts the bio queued just before it by
//! the same task, or the bio queued just before it on the device. A merge needs a request
//! still waiting; when that request is the one built from the previous bio, the plug (same
//! task, same batch) or the one-hit cache (the queue's last request) finds it without the
//! hash or tree lookups. Merges into older requests needed the hash (back) or the tree
//! (front), and are lost at L2.
//!
//! Bad input never panics: a line that is not a block event is counted and skipped (the
//! first few are quoted with their line numbers); the report is best effort.

use crate::kernel::trace::{BioStream, BlockEvent, EventKind, TraceBio, is_blkparse_summary};
use crate::logic::config::PolicyConfig;
use crate::sim::engine::Dir;
use crate::sim::hist::Histogram;
use anyhow::{Context as _, bail};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::{Path, PathBuf};

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
/// Bad lines quoted in the report.
pub const MAX_ERROR_EXAMPLES: usize = 5;
/// The longest trace line read: block events are about 100 bytes; a longer line (or a
/// file with no newline) is skipped as bad without being held whole in memory.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Bios a `--what-if` replay takes at most from the trace (the simulator holds them).
pub const DEFAULT_WHAT_IF_MAX_BIOS: usize = 300_000;

/// A block device number as traces print it (`7,0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct DevNum {
    pub major: u32,
    pub minor: u32,
}

impl std::fmt::Display for DevNum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.major, self.minor)
    }
}

impl DevNum {
    /// `7,0`, `7:0`, or a device name resolved through `sysfs_root/block/NAME/dev`
    /// (a `loopN` not present here is taken as `7,N`).
    pub fn resolve(spec: &str, sysfs_root: &Path) -> Result<DevNum, String> {
        let spec = spec.trim().trim_start_matches("/dev/");
        if let Some((a, b)) = spec.split_once([',', ':'])
            && let (Ok(major), Ok(minor)) = (a.parse(), b.parse())
        {
            return Ok(DevNum { major, minor });
        }
        let p = sysfs_root.join("block").join(spec).join("dev");
        if let Ok(text) = std::fs::read_to_string(&p)
            && let Some((a, b)) = text.trim().split_once(':')
            && let (Ok(major), Ok(minor)) = (a.parse(), b.parse())
        {
            return Ok(DevNum { major, minor });
        }
        if let Some(n) = spec.strip_prefix("loop").and_then(|n| n.parse().ok()) {
            return Ok(DevNum { major: 7, minor: n });
        }
        Err(format!(
            "--device {spec:?}: not MAJOR,MINOR and no {} on this machine",
            p.display()
        ))
    }
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
    pub dev: DevNum,
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
    fn new(dev: DevNum) -> Self {
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

    fn feed(&mut self, ev: &BlockEvent, t0: u64) {
        let t = ev.t_ns;
        if self.first_ns.is_none() {
            self.first_ns = Some(t);
        }
        if t + 1_000_000 < self.last_ns {
            self.out_of_order += 1;
        }
        self.last_ns = self.last_ns.max(t);
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

    pub fn span_ns(&self) -> u64 {
        self.last_ns
            .saturating_sub(self.first_ns.unwrap_or(self.last_ns))
    }
}

/// A bad line, quoted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadLine {
    pub line: usize,
    pub message: String,
}

/// The streaming reader: feed lines, then [`Analyzer::finish`].
#[derive(Debug, Clone, Default)]
pub struct Analyzer {
    filter: Option<DevNum>,
    t0: Option<u64>,
    devices: BTreeMap<DevNum, DeviceAcc>,
    pub lines: u64,
    pub events: u64,
    pub bad_lines: u64,
    pub bad_examples: Vec<BadLine>,
    /// Block events of kinds advise does not use (`block_getrq`, unknown `block_*`, ...).
    pub other_events: u64,
    /// Events of devices not selected by `--device`.
    pub filtered_out: u64,
    /// Events beyond [`MAX_DEVICES`] devices.
    pub too_many_devices: u64,
    /// Events naming no device (plug, unplug).
    pub no_device: u64,
    pub merge_events_seen: bool,
    pub completion_events_seen: bool,
    summary_reached: bool,
}

impl Analyzer {
    pub fn new(filter: Option<DevNum>) -> Self {
        Analyzer {
            filter,
            ..Default::default()
        }
    }

    /// Feeds one line (1-based number, for messages).
    pub fn feed_line(&mut self, line_no: usize, raw: &str) {
        self.lines += 1;
        let line = raw.trim();
        if self.summary_reached || line.is_empty() || line.starts_with('#') {
            return;
        }
        if is_blkparse_summary(line) {
            self.summary_reached = true;
            return;
        }
        match crate::kernel::trace::parse_event(line) {
            Ok(ev) => self.feed_event(&ev),
            Err(e) => {
                let mut message = e.message;
                if !message.contains(':') && line.len() <= 120 {
                    message = format!("{message}: {line:?}");
                }
                self.bad_line(line_no, message);
            }
        }
    }

    pub fn feed_event(&mut self, ev: &BlockEvent) {
        self.events += 1;
        match ev.kind {
            EventKind::BackMerge | EventKind::FrontMerge => self.merge_events_seen = true,
            EventKind::Issue | EventKind::Complete => self.completion_events_seen = true,
            EventKind::Other | EventKind::GetRq | EventKind::Insert | EventKind::Remap => {
                self.other_events += 1
            }
            _ => {}
        }
        let Some((major, minor)) = ev.dev else {
            self.no_device += 1;
            return;
        };
        let dev = DevNum { major, minor };
        if self.filter.is_some_and(|f| f != dev) {
            self.filtered_out += 1;
            return;
        }
        let t0 = *self.t0.get_or_insert(ev.t_ns);
        if !self.devices.contains_key(&dev) && self.devices.len() >= MAX_DEVICES {
            self.too_many_devices += 1;
            return;
        }
        self.devices
            .entry(dev)
            .or_insert_with(|| DeviceAcc::new(dev))
            .feed(ev, t0);
    }

    /// Reads a whole trace from a reader, line by line (invalid UTF-8 is replaced, a line
    /// longer than [`MAX_LINE_BYTES`] is skipped as bad).
    pub fn read_from(&mut self, mut r: impl BufRead) -> std::io::Result<()> {
        use crate::kernel::lines::{Line, read_line_bounded};
        let mut buf = Vec::with_capacity(256);
        let mut n = 0usize;
        loop {
            match read_line_bounded(&mut r, &mut buf, MAX_LINE_BYTES)? {
                Line::Eof => return Ok(()),
                Line::Whole => {
                    n += 1;
                    self.feed_line(n, &String::from_utf8_lossy(&buf));
                }
                Line::TooLong => {
                    n += 1;
                    self.lines += 1;
                    self.bad_line(
                        n,
                        format!("longer than {MAX_LINE_BYTES} bytes: not a block event"),
                    );
                }
            }
        }
    }

    fn bad_line(&mut self, line: usize, message: String) {
        self.bad_lines += 1;
        if self.bad_examples.len() < MAX_ERROR_EXAMPLES {
            self.bad_examples.push(BadLine { line, message });
        }
    }

    pub fn devices(&self) -> impl Iterator<Item = &DeviceAcc> {
        self.devices.values()
    }

    pub fn device(&self, dev: DevNum) -> Option<&DeviceAcc> {
        self.devices.get(&dev)
    }

    pub fn finish(self, cfg: &PolicyConfig) -> Analysis {
        let mut notes = Vec::new();
        if self.bad_lines > 0 {
            notes.push(format!(
                "{} line(s) were not block events and were skipped",
                self.bad_lines
            ));
        }
        if self.other_events > 0 {
            notes.push(format!(
                "{} event(s) of kinds not used here (getrq, insert, remap, unknown block_*) were counted and ignored",
                self.other_events
            ));
        }
        if self.filtered_out > 0 {
            notes.push(format!(
                "{} event(s) of other devices left out by --device",
                self.filtered_out
            ));
        }
        if self.too_many_devices > 0 {
            notes.push(format!(
                "{} event(s) of devices beyond the first {MAX_DEVICES} were skipped",
                self.too_many_devices
            ));
        }
        if !self.merge_events_seen && self.devices.values().any(|d| d.issues < d.total_bios()) {
            notes.push(
                "no merge events (block_bio_backmerge/frontmerge) in the trace and fewer requests than bios: merges are estimated from contiguity"
                    .into(),
            );
        }
        // A device whose queue events all lack a size (size 0: corrupt, or flushes only) has
        // no bio to judge merging by: advice from it would be advice from nothing.
        let mut without_bios = Vec::new();
        for d in self.devices.values().filter(|d| d.total_bios() == 0) {
            without_bios.push(d.dev.to_string());
            notes.push(format!(
                "device {}: no usable bio ({} queue event(s) without a size, {} request(s) issued): no advice for it",
                d.dev, d.nodata, d.issues
            ));
        }
        let devices: Vec<DeviceReport> = self
            .devices
            .values()
            .filter(|d| d.total_bios() > 0)
            .map(|d| {
                // No merge events but as many requests as bios: nothing merged, known.
                let known = self.merge_events_seen || (d.issues > 0 && d.issues >= d.total_bios());
                DeviceReport::build(d, known, cfg)
            })
            .collect();
        Analysis {
            lines: self.lines,
            events: self.events,
            bad_lines: self.bad_lines,
            bad_examples: self.bad_examples,
            notes,
            devices,
            devices_without_bios: without_bios,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencyReport {
    pub requests: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LevelShare {
    pub level: u8,
    pub tunables: String,
    /// Merges this level would keep, of those the kernel made (or estimated), percent.
    pub kept_percent: f64,
    /// Merges it would lose, as a share of all bios, percent.
    pub lost_percent_of_bios: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Recommendation {
    /// `merge level`, `scheduler` or `slices`.
    pub topic: String,
    pub setting: String,
    pub evidence: String,
}

/// The report of one device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    pub device: String,
    pub span_s: f64,
    pub bios: u64,
    pub bytes: u64,
    pub read_percent: f64,
    /// Sync bios (all reads, writes with `S`), percent of bios.
    pub sync_percent: f64,
    pub bios_per_s: f64,
    pub mb_per_s: f64,
    pub size_hist: Vec<(String, u64)>,
    /// Distance to the previous bio of the same task: bucket label, bios.
    pub distance_per_task: Vec<(String, u64)>,
    /// Distance to the previous bio on the device.
    pub distance_overall: Vec<(String, u64)>,
    /// Bios starting where the previous bio of the same task ended, percent.
    pub sequential_percent: f64,
    pub back_merges: u64,
    pub front_merges: u64,
    pub simple_merges: u64,
    /// True when the merge counts are estimates (no merge events in the trace).
    pub merges_estimated: bool,
    /// merged / bios, percent (the kernel's merge ratio).
    pub merge_percent: f64,
    pub ladder: Vec<LevelShare>,
    pub splits: u64,
    pub flush_or_discard: u64,
    pub issues: u64,
    pub completes: u64,
    pub queue_depth_max: u32,
    pub queue_depth_mean: f64,
    pub read_latency: Option<LatencyReport>,
    pub write_latency: Option<LatencyReport>,
    pub out_of_order_events: u64,
    pub recommended_level: u8,
    pub recommendations: Vec<Recommendation>,
    #[serde(skip)]
    pub timeline: Timeline,
    #[serde(skip)]
    pub scatter: Vec<ScatterPoint>,
    #[serde(skip)]
    pub size_counts: [u64; SIZE_BUCKETS],
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 * 100.0 / b as f64
    }
}

fn latency(h: &Histogram) -> Option<LatencyReport> {
    (h.count() > 0).then(|| LatencyReport {
        requests: h.count(),
        mean_us: h.mean() / 1000.0,
        p50_us: h.quantile(0.5) as f64 / 1000.0,
        p99_us: h.quantile(0.99) as f64 / 1000.0,
        max_us: h.max() as f64 / 1000.0,
    })
}

fn level_tunables(level: u8) -> &'static str {
    match level {
        0 => "nomerges=0, front_merges=1",
        1 => "nomerges=0, front_merges=0",
        2 => "nomerges=1",
        _ => "nomerges=2",
    }
}

/// Unmerged bios below this share: the lookups a deeper level would skip cost too
/// little to matter, and L0 keeps every merge (Axboe: not merging can cost 5x).
pub const MIN_UNMERGED_PERCENT_TO_ACT: f64 = 20.0;

impl DeviceReport {
    fn build(d: &DeviceAcc, merges_seen: bool, cfg: &PolicyConfig) -> DeviceReport {
        let bios = d.total_bios();
        let bytes = d.bytes[0] + d.bytes[1];
        let span_ns = d.span_ns();
        let secs = (span_ns as f64 / 1e9).max(1e-9);
        let label = |arr: &[u64]| -> Vec<(String, u64)> {
            arr.iter()
                .enumerate()
                .map(|(i, &n)| (DIST_LABELS[i].to_string(), n))
                .collect()
        };
        // Merges: observed, or estimated from contiguity when the trace has no merge events.
        let (back, front, simple) = if merges_seen {
            (
                d.back_merges[0] + d.back_merges[1],
                d.front_merges[0] + d.front_merges[1],
                d.simple_merges,
            )
        } else {
            (
                d.dist_task[0],
                d.dist_task[1],
                d.dist_task[0] + d.dist_task[1],
            )
        };
        let merged = back + front;
        let simple = simple.min(merged);
        let lost = [0, front, merged - simple, merged];
        let ladder = (0..4u8)
            .map(|l| LevelShare {
                level: l,
                tunables: level_tunables(l).into(),
                kept_percent: if merged == 0 {
                    100.0
                } else {
                    pct(merged - lost[l as usize], merged)
                },
                lost_percent_of_bios: pct(lost[l as usize], bios),
            })
            .collect::<Vec<_>>();
        let seq = pct(d.dist_task[0], bios);
        let samples = d.timeline.depth_max[..d.timeline.used].to_vec();
        let depth_mean = if samples.is_empty() {
            0.0
        } else {
            samples.iter().map(|&x| x as f64).sum::<f64>() / samples.len() as f64
        };
        let mut r = DeviceReport {
            device: d.dev.to_string(),
            span_s: span_ns as f64 / 1e9,
            bios,
            bytes,
            read_percent: pct(d.bios[0], bios),
            sync_percent: pct(d.bios[0] + d.sync_writes, bios),
            bios_per_s: bios as f64 / secs,
            mb_per_s: bytes as f64 / 1e6 / secs,
            size_hist: d
                .size_hist
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, &n)| (size_bucket_label(i), n))
                .collect(),
            distance_per_task: label(&d.dist_task),
            distance_overall: label(&d.dist_dev),
            sequential_percent: seq,
            back_merges: back,
            front_merges: front,
            simple_merges: simple,
            merges_estimated: !merges_seen,
            merge_percent: pct(merged, bios),
            ladder,
            splits: d.splits,
            flush_or_discard: d.nodata,
            issues: d.issues,
            completes: d.completes,
            queue_depth_max: d.inflight_max,
            queue_depth_mean: depth_mean,
            read_latency: latency(&d.lat[0]),
            write_latency: latency(&d.lat[1]),
            out_of_order_events: d.out_of_order,
            recommended_level: 0,
            recommendations: Vec::new(),
            timeline: d.timeline.clone(),
            scatter: d.scatter.clone(),
            size_counts: d.size_hist,
        };
        r.advise(cfg);
        r
    }

    /// The merge level, scheduler and slice recommendations, each with one line of evidence.
    fn advise(&mut self, cfg: &PolicyConfig) {
        let low = cfg.disable_below_percent;
        let high = cfg.enable_above_percent;
        let merged = self.back_merges + self.front_merges;
        let unmerged = 100.0 - self.merge_percent;
        let lost = |l: usize| self.ladder[l].lost_percent_of_bios;
        let est = if self.merges_estimated {
            " (estimated from contiguity)"
        } else {
            ""
        };
        let (level, evidence) = if merged == 0 && self.sequential_percent >= high {
            (
                0,
                format!(
                    "no merges in the trace, yet {:.1}% of bios start where their task's previous one ended: merging would pay (was nomerges=2 when captured?)",
                    self.sequential_percent
                ),
            )
        } else if unmerged < MIN_UNMERGED_PERCENT_TO_ACT {
            (
                0,
                format!(
                    "{:.1}% of {} bios merged{est}: only {:.1}% miss, so skipping lookups saves little and every level down loses merges",
                    self.merge_percent, self.bios, unmerged
                ),
            )
        } else if lost(3) < low && self.sequential_percent < high {
            (
                3,
                format!(
                    "{:.2}% of {} bios merged{est} and {:.1}% are contiguous with their task's previous bio: every merge lookup misses",
                    self.merge_percent, self.bios, self.sequential_percent
                ),
            )
        } else if lost(2) < low {
            (
                2,
                format!(
                    "{:.1}% of bios merged{est}, {:.0}% of those simply (plug/one-hit, kept at nomerges=1); {:.1}% of bios miss and would skip the hash and tree lookups",
                    self.merge_percent, self.ladder[2].kept_percent, unmerged
                ),
            )
        } else if lost(1) < low {
            (
                1,
                format!(
                    "{} front merges of {} bios ({:.2}%){est}: the front-merge lookup is nearly always wasted, back merges ({:.1}% of bios) stay",
                    self.front_merges,
                    self.bios,
                    lost(1),
                    pct(self.back_merges, self.bios)
                ),
            )
        } else {
            (
                0,
                format!(
                    "{:.1}% of bios merged{est}, {:.1}% through the hash or tree lookups (lost at nomerges=1): keep every merge",
                    self.merge_percent,
                    lost(2)
                ),
            )
        };
        self.recommended_level = level;
        let mut recs = vec![Recommendation {
            topic: "merge level".into(),
            setting: format!("L{level}: {}", level_tunables(level)),
            evidence,
        }];
        if self.bios < cfg.min_window_bios {
            recs[0].evidence.push_str(&format!(
                " [only {} bios: too few for confidence]",
                self.bios
            ));
        }
        let read = self.read_percent;
        let one_dir = !(10.0..=90.0).contains(&read);
        let depth = self.queue_depth_max;
        let (sched, sev) = match level {
            1 => (
                "mq-deadline",
                "L1 is mq-deadline's iosched/front_merges=0; no other scheduler has it".to_string(),
            ),
            2 => (
                "mq-deadline",
                format!(
                    "nomerges=1 differs from 0 only under mq-deadline and bfq; {:.0}% reads{}",
                    read,
                    if one_dir {
                        ""
                    } else {
                        " mixed with writes: mq-deadline's read_expire protects the reads"
                    }
                ),
            ),
            3 if one_dir => (
                "none",
                format!(
                    "{:.0}% {} at queue depth up to {depth}, nothing merges: a scheduler's sorting and merging buy nothing, none is the cheapest",
                    read.max(100.0 - read),
                    if read >= 50.0 { "reads" } else { "writes" }
                ),
            ),
            3 => (
                "mq-deadline",
                format!(
                    "nothing merges, but reads ({read:.0}%) share the queue with writes: keep mq-deadline so read_expire bounds read latency"
                ),
            ),
            _ => (
                "mq-deadline",
                format!(
                    "merges pay ({:.1}% of bios); mq-deadline merges and sorts at little cost (kernel default for single-queue devices)",
                    self.merge_percent
                ),
            ),
        };
        recs.push(Recommendation {
            topic: "scheduler".into(),
            setting: sched.into(),
            evidence: sev,
        });
        // Slices: CFQ's slice_sync is gone since 5.0; its jobs live in mq-deadline's
        // expiries and bfq's idling.
        let rl = self.read_latency.as_ref();
        let wl = self.write_latency.as_ref();
        let slice = if sched == "none" {
            Recommendation {
                topic: "slices".into(),
                setting: "none has no slices; with bfq use slice_idle=0".into(),
                evidence: format!(
                    "up to {depth} requests in flight from random access: idling for a task's next request (bfq slice_idle) would stall a full queue"
                ),
            }
        } else if let Some(r) = rl
            && !one_dir
            && r.p99_us > 100_000.0
        {
            Recommendation {
                topic: "slices".into(),
                setting: "mq-deadline read_expire=100, writes_starved=4".into(),
                evidence: format!(
                    "read p99 {:.1} ms with {:.0}% writes in the queue: shorten the read deadline and let reads pass writes longer",
                    r.p99_us / 1000.0,
                    100.0 - read
                ),
            }
        } else if depth <= 1 && self.sequential_percent >= 50.0 && self.sync_percent >= 50.0 {
            Recommendation {
                topic: "slices".into(),
                setting: "with bfq keep slice_idle=8 (ms); mq-deadline defaults".into(),
                evidence: format!(
                    "one request at a time, {:.0}% sequential and sync: idling for the task's next request keeps the stream together",
                    self.sequential_percent
                ),
            }
        } else {
            let worst = rl
                .map(|r| r.p99_us)
                .into_iter()
                .chain(wl.map(|w| w.p99_us))
                .fold(0.0f64, f64::max);
            Recommendation {
                topic: "slices".into(),
                setting: "mq-deadline defaults (read_expire=500, write_expire=5000, fifo_batch=16); with bfq slice_idle=0".into(),
                evidence: if worst > 0.0 {
                    format!(
                        "completion p99 {:.2} ms is far below the 500 ms read deadline, and up to {depth} requests in flight make idling useless",
                        worst / 1000.0
                    )
                } else {
                    format!(
                        "no completions in the trace to judge deadlines; up to {depth} requests in flight make idling useless"
                    )
                },
            }
        };
        recs.push(slice);
        self.recommendations = recs;
    }
}

/// The whole result.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    pub lines: u64,
    pub events: u64,
    pub bad_lines: u64,
    pub bad_examples: Vec<BadLine>,
    pub notes: Vec<String>,
    pub devices: Vec<DeviceReport>,
    /// Devices with events but no usable bio (every queue event without a size).
    pub devices_without_bios: Vec<String>,
}

/// Streams a trace file through an [`Analyzer`].
pub fn analyze_file(
    path: &Path,
    filter: Option<DevNum>,
    cfg: &PolicyConfig,
) -> anyhow::Result<Analysis> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut a = Analyzer::new(filter);
    a.read_from(std::io::BufReader::with_capacity(1 << 16, f))
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(a.finish(cfg))
}

/// Reads the bios of one device for a replay (at most `max_bios`), rebased to the first
/// and in file order, as [`crate::sim::parse_trace`] gives them. Returns the bios and
/// whether the trace had more.
pub fn read_bios(
    path: &Path,
    dev: DevNum,
    plug_gap_ns: u64,
    max_bios: usize,
) -> anyhow::Result<(Vec<TraceBio>, bool)> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut r = std::io::BufReader::with_capacity(1 << 16, f);
    let mut stream = BioStream::new(plug_gap_ns);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    let mut truncated = false;
    loop {
        match crate::kernel::lines::read_line_bounded(&mut r, &mut buf, MAX_LINE_BYTES)? {
            crate::kernel::lines::Line::Eof => break,
            crate::kernel::lines::Line::TooLong => continue,
            crate::kernel::lines::Line::Whole => {}
        }
        let text = String::from_utf8_lossy(&buf);
        let line = text.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if is_blkparse_summary(line) {
            break;
        }
        let Ok(ev) = crate::kernel::trace::parse_event(line) else {
            continue;
        };
        // Plug markers name no device in tracefs: they go through.
        if ev
            .dev
            .is_some_and(|(a, b)| DevNum { major: a, minor: b } != dev)
        {
            continue;
        }
        if let Some(b) = stream.push(&ev) {
            if out.len() >= max_bios {
                truncated = true;
                break;
            }
            out.push(b);
        }
    }
    crate::kernel::trace::rebase_times(&mut out);
    Ok((out, truncated))
}

/// One row of the `--what-if` table.
#[derive(Debug, Clone, Serialize)]
pub struct WhatIfRow {
    pub label: String,
    pub scheduler: String,
    pub level: u8,
    pub merge_percent: f64,
    pub requests: u64,
    /// Modelled block-layer cycles per bio.
    pub cycles_per_bio: f64,
    pub mb_per_s: f64,
    pub read_mean_us: f64,
    pub read_p99_us: f64,
    pub write_mean_us: f64,
    pub write_p99_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct WhatIf {
    pub device: String,
    pub bios: usize,
    pub truncated: bool,
    pub span_s: f64,
    pub model: String,
    pub rows: Vec<WhatIfRow>,
}

/// Replays `bios` in the simulator under each ladder level (mq-deadline) and under `none`
/// at nomerges 0 and 2, with nothing changing the tunables during the run.
pub fn what_if(
    device: &str,
    bios: Vec<TraceBio>,
    truncated: bool,
    report: &DeviceReport,
) -> anyhow::Result<WhatIf> {
    use crate::sim::{Scenario, Simulation, run_scenario};
    use std::sync::Arc;
    if bios.is_empty() {
        bail!("no bios of device {device} to replay");
    }
    let span_ns = bios.last().map(|b| b.t_ns).unwrap_or(0);
    // The device: an SSD-like queue with 128 tags (as loop and virtio devices have), its
    // per-request overhead taken from the trace's median completion latency when known.
    // The trace's latencies include queueing: with 8 channels a request cannot take longer
    // than 8 / (requests per second) at the rate the trace completed them (Little's law).
    let span_s = (report.span_s).max(1e-6);
    let over = |l: Option<&LatencyReport>, dflt: f64| {
        l.map(|l| {
            let busy_us = 8.0 * span_s * 1e6 / l.requests.max(1) as f64;
            l.p50_us.min(busy_us).clamp(5.0, 20_000.0)
        })
        .unwrap_or(dflt)
    };
    let r_us = over(report.read_latency.as_ref(), 80.0);
    let w_us = over(report.write_latency.as_ref(), 20.0);
    let model = format!(
        "simulated SSD, 128 tags, 8 channels, 2000 MB/s, {r_us:.0} µs per read and {w_us:.0} µs per write request (from the trace's completions where it has them); bios replayed at their traced times; MB/s over the replay plus a drain margin"
    );
    let dur_s = span_ns as f64 / 1e9 * 1.1 + 0.05;
    let candidates: [(&str, &str, u8); 6] = [
        ("L0", "mq-deadline", 0),
        ("L1", "mq-deadline", 1),
        ("L2", "mq-deadline", 2),
        ("L3", "mq-deadline", 3),
        ("none, nomerges=0", "none", 0),
        ("none, nomerges=2", "none", 3),
    ];
    let bios = Arc::new(bios);
    let mut rows = Vec::new();
    for (label, sched, level) in candidates {
        let nomerges = match level {
            0 | 1 => 0,
            2 => 1,
            _ => 2,
        };
        let iosched = if sched == "mq-deadline" {
            format!(
                "[device.iosched]\nfront_merges = {}\n",
                u8::from(level == 0)
            )
        } else {
            String::new()
        };
        let text = format!(
            "name = \"advise-what-if\"\nseed = 1\n\
             [[device]]\nname = \"trace\"\nkind = \"ssd\"\nscheduler = \"{sched}\"\n\
             nomerges = {nomerges}\nqueue_depth = 128\nparallelism = 8\n\
             bandwidth_mb_s = 2000.0\nread_overhead_us = {r_us}\nwrite_overhead_us = {w_us}\n\
             {iosched}\
             [[phase]]\nname = \"replay\"\nduration_s = {dur_s}\n\
             [[phase.job]]\nname = \"trace\"\ndevice = \"trace\"\n"
        );
        let mut sc = Scenario::from_toml_str(&text, "<advise what-if>", None)
            .map_err(|e| anyhow::anyhow!("what-if scenario: {e}"))?;
        sc.phases[0].jobs[0].trace_bios = Some(bios.clone());
        let mut sim = Simulation::new(&sc).context("building the what-if simulation")?;
        let mut ctl = crate::daemon::controller::KernelDefault { interval_ms: 1000 };
        let rep = run_scenario(&mut sim, &mut ctl, "static", &mut |_, _| {});
        if let Some(e) = sim.halted() {
            bail!("what-if {label}: {e}");
        }
        let Some(d) = rep.phases.first().and_then(|p| p.devices.first()) else {
            bail!("what-if: the simulation reported no device");
        };
        let merged = d.read.merged + d.write.merged;
        let requests = d.read.requests + d.write.requests;
        rows.push(WhatIfRow {
            label: label.into(),
            scheduler: sched.into(),
            level,
            merge_percent: pct(merged, merged + requests),
            requests,
            cycles_per_bio: d.cycles_per_io,
            mb_per_s: d.read.mb_per_s + d.write.mb_per_s,
            read_mean_us: d.read.lat_mean_us,
            read_p99_us: d.read.lat_p99_us,
            write_mean_us: d.write.lat_mean_us,
            write_p99_us: d.write.lat_p99_us,
        });
    }
    Ok(WhatIf {
        device: device.into(),
        bios: bios.len(),
        truncated,
        span_s: span_ns as f64 / 1e9,
        model,
        rows,
    })
}

/// Renders the analysis as text.
pub fn render_text(a: &Analysis, what_ifs: &[WhatIf]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} lines, {} block events, {} device(s)",
        a.lines,
        a.events,
        a.devices.len()
    );
    for n in &a.notes {
        let _ = writeln!(s, "note: {n}");
    }
    for b in &a.bad_examples {
        let _ = writeln!(s, "  skipped line {}: {}", b.line, b.message);
    }
    for d in &a.devices {
        let _ = writeln!(s, "\n== device {} ({:.3} s traced)", d.device, d.span_s);
        let _ = writeln!(
            s,
            "bios {}  ({:.1} MB, {:.0} bios/s, {:.1} MB/s)  reads {:.1}%  writes {:.1}%  sync {:.1}%",
            d.bios,
            d.bytes as f64 / 1e6,
            d.bios_per_s,
            d.mb_per_s,
            d.read_percent,
            100.0 - d.read_percent,
            d.sync_percent
        );
        if d.flush_or_discard + d.splits > 0 {
            let _ = writeln!(
                s,
                "flushes/discards {}  splits {}",
                d.flush_or_discard, d.splits
            );
        }
        let _ = writeln!(s, "sizes:");
        for (l, n) in &d.size_hist {
            let _ = writeln!(s, "  {l:>10}  {n:>9}  {:>5.1}%", pct(*n, d.bios));
        }
        let _ = writeln!(
            s,
            "distance to the previous bio:       same task       overall"
        );
        for (i, (l, n)) in d.distance_per_task.iter().enumerate() {
            let o = d.distance_overall[i].1;
            if *n + o == 0 {
                continue;
            }
            let _ = writeln!(
                s,
                "  {l:<48} {:>6.1}%  {:>6.1}%",
                pct(*n, d.bios),
                pct(o, d.bios)
            );
        }
        let _ = writeln!(
            s,
            "merges{}: back {}  front {}  ({:.1}% of bios; {} simple: plug/one-hit)",
            if d.merges_estimated {
                " (estimated)"
            } else {
                " the kernel made"
            },
            d.back_merges,
            d.front_merges,
            d.merge_percent,
            d.simple_merges
        );
        let _ = writeln!(
            s,
            "merge ladder:  level  tunables                     kept  lost (% of bios)"
        );
        for l in &d.ladder {
            let _ = writeln!(
                s,
                "               L{}     {:<28} {:>5.1}%  {:>5.2}%",
                l.level, l.tunables, l.kept_percent, l.lost_percent_of_bios
            );
        }
        if d.issues + d.completes > 0 {
            let _ = writeln!(
                s,
                "queue depth (requests issued, not completed): max {}  mean of per-bucket peaks {:.1}",
                d.queue_depth_max, d.queue_depth_mean
            );
        }
        for (name, l) in [("read", &d.read_latency), ("write", &d.write_latency)] {
            if let Some(l) = l {
                let _ = writeln!(
                    s,
                    "{name} completion latency: {} requests, mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
                    l.requests, l.mean_us, l.p50_us, l.p99_us, l.max_us
                );
            }
        }
        if d.out_of_order_events > 0 {
            let _ = writeln!(
                s,
                "note: {} event(s) more than 1 ms earlier than the one before (several CPUs' buffers); counted in file order",
                d.out_of_order_events
            );
        }
        let _ = writeln!(s, "recommendations:");
        for r in &d.recommendations {
            let _ = writeln!(
                s,
                "  {:<12} {}\n               because {}",
                r.topic, r.setting, r.evidence
            );
        }
        for w in what_ifs.iter().filter(|w| w.device == d.device) {
            let _ = writeln!(
                s,
                "what-if: {} bios{} over {:.3} s; {}",
                w.bios,
                if w.truncated {
                    " (the first ones only)"
                } else {
                    ""
                },
                w.span_s,
                w.model
            );
            let _ = writeln!(
                s,
                "  {:<18} {:>7} {:>8} {:>9} {:>8} {:>10} {:>10} {:>10} {:>10}",
                "candidate",
                "merge%",
                "requests",
                "cyc/bio",
                "MB/s",
                "R mean µs",
                "R p99 µs",
                "W mean µs",
                "W p99 µs"
            );
            let base = w.rows.first().map(|r| r.cycles_per_bio).unwrap_or(0.0);
            for r in &w.rows {
                let mark = if r.scheduler == "mq-deadline" && r.level == d.recommended_level {
                    " <- recommended"
                } else {
                    ""
                };
                let _ = writeln!(
                    s,
                    "  {:<18} {:>7.1} {:>8} {:>9.0} {:>8.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}{}{mark}",
                    r.label,
                    r.merge_percent,
                    r.requests,
                    r.cycles_per_bio,
                    r.mb_per_s,
                    r.read_mean_us,
                    r.read_p99_us,
                    r.write_mean_us,
                    r.write_p99_us,
                    if base > 0.0 && r.label != "L0" {
                        format!(
                            "  ({:+.1}% CPU vs L0)",
                            (r.cycles_per_bio / base - 1.0) * 100.0
                        )
                    } else {
                        String::new()
                    }
                );
            }
        }
    }
    s
}

/// `mergetune advise` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct AdviseArgs {
    /// The trace: tracing-filesystem text of block events (`mergetune trace capture`) or
    /// blkparse's default output.
    pub trace: PathBuf,
    /// Only this device: MAJOR,MINOR as the trace prints it (7,0) or a name (loop0).
    #[arg(long)]
    pub device: Option<String>,
    /// Root of sysfs, where a device name given to --device is looked up.
    #[arg(long, default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Replay the trace in the simulator under each merge level and scheduler candidate and
    /// show the modelled CPU, throughput and latency side by side.
    #[arg(long)]
    pub what_if: bool,
    /// With --what-if: replay at most this many bios per device.
    #[arg(long, default_value_t = DEFAULT_WHAT_IF_MAX_BIOS)]
    pub what_if_max_bios: usize,
    /// Draw the sector-over-time scatter, the size histogram, bios/s and queue depth (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Runs `mergetune advise`; returns the exit code.
pub fn run(args: AdviseArgs) -> anyhow::Result<i32> {
    let cfg = PolicyConfig::default();
    let filter = match &args.device {
        Some(d) => Some(DevNum::resolve(d, &args.sysfs_root).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let analysis = analyze_file(&args.trace, filter, &cfg)?;
    if analysis.devices.is_empty() {
        let mut msg = format!(
            "{}: no usable bios, nothing to advise from ({} lines, {} block events, {} not block events)",
            args.trace.display(),
            analysis.lines,
            analysis.events,
            analysis.bad_lines
        );
        if !analysis.devices_without_bios.is_empty() {
            let _ = write!(
                msg,
                "; device(s) {} have events but every bio queued has size 0",
                analysis.devices_without_bios.join(", ")
            );
        }
        if let Some(b) = analysis.bad_examples.first() {
            let _ = write!(msg, "; first bad line {}: {}", b.line, b.message);
        }
        if let Some(f) = filter {
            let _ = write!(msg, "; --device {f} matched nothing");
        }
        bail!(msg);
    }
    let mut what_ifs = Vec::new();
    if args.what_if {
        for d in &analysis.devices {
            let dev = DevNum::resolve(&d.device, Path::new("/nonexistent"))
                .map_err(anyhow::Error::msg)?;
            let (bios, truncated) = read_bios(&args.trace, dev, 10_000, args.what_if_max_bios)?;
            what_ifs.push(what_if(&d.device, bios, truncated, d)?);
        }
    }
    if let Some(p) = &args.plot {
        crate::lab::plot::plot_advise(&analysis, p)?;
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "trace": args.trace.display().to_string(),
                "analysis": analysis,
                "what_if": what_ifs,
            }))?
        );
    } else {
        print!("{}", render_text(&analysis, &what_ifs));
        if let Some(p) = &args.plot {
            println!("\nplot written to {}", p.display());
        }
    }
    Ok(0)
}
