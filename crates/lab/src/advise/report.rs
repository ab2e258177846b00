//! What `advise` reports per device, built from its accumulated state: the figures
//! (sizes, distances, merges, the ladder's kept and lost shares, latencies, depth) as
//! plain serialisable data. The recommendations are filled in by [`super::rules`].

use super::accumulator::{
    DIST_LABELS, DeviceAcc, SIZE_BUCKETS, ScatterPoint, Timeline, size_bucket_label,
};
use mergetune_kernel::devices::DevNumber;
use mergetune_logic::decision::{Level, level_index};
use mergetune_sim::hist::Histogram;
use serde::Serialize;

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
    #[serde(with = "level_index")]
    pub level: Level,
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
    /// The device as the trace prints it (`7,0`).
    pub device: String,
    /// The same device, for what reads the trace again (`--what-if`).
    #[serde(skip)]
    pub number: DevNumber,
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
    #[serde(with = "level_index")]
    pub recommended_level: Level,
    pub recommendations: Vec<Recommendation>,
    #[serde(skip)]
    pub timeline: Timeline,
    #[serde(skip)]
    pub scatter: Vec<ScatterPoint>,
    #[serde(skip)]
    pub size_counts: [u64; SIZE_BUCKETS],
}

pub(super) fn pct(a: u64, b: u64) -> f64 {
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

/// The tunables that make a ladder level, for the report.
pub(super) fn level_tunables(level: Level) -> &'static str {
    match level {
        Level::L0 => "nomerges=0, front_merges=1",
        Level::L1 => "nomerges=0, front_merges=0",
        Level::L2 => "nomerges=1",
        Level::L3 => "nomerges=2",
    }
}

impl DeviceReport {
    /// The figures of one device; its recommendations are left empty for the rules. The
    /// report has 37 fields, one line each in the literal at the end.
    pub(super) fn build(d: &DeviceAcc, merges_seen: bool) -> DeviceReport {
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
        let (back, front, simple) = merges(d, merges_seen);
        let merged = back + front;
        let ladder = ladder(front, merged, simple, bios);
        let seq = pct(d.dist_task[0], bios);
        let samples = d.timeline.depth_max[..d.timeline.used].to_vec();
        let depth_mean = if samples.is_empty() {
            0.0
        } else {
            samples.iter().map(|&x| x as f64).sum::<f64>() / samples.len() as f64
        };
        DeviceReport {
            device: d.dev.traced().to_string(),
            number: d.dev,
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
            recommended_level: Level::L0,
            recommendations: Vec::new(),
            timeline: d.timeline.clone(),
            scatter: d.scatter.clone(),
            size_counts: d.size_hist,
        }
    }
}

/// A device's back, front and simple merges: observed, or estimated from contiguity when
/// the trace has no merge events; never more simple merges than merges.
fn merges(d: &DeviceAcc, merges_seen: bool) -> (u64, u64, u64) {
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
    (back, front, simple.min(back + front))
}

/// What each ladder level keeps of the `merged` merges and loses of the `bios`: none; the
/// front merges; all but the simple ones; all.
fn ladder(front: u64, merged: u64, simple: u64, bios: u64) -> Vec<LevelShare> {
    let lost = [0, front, merged - simple, merged];
    Level::ALL
        .into_iter()
        .zip(lost)
        .map(|(level, lost)| LevelShare {
            level,
            tunables: level_tunables(level).into(),
            kept_percent: if merged == 0 {
                100.0
            } else {
                pct(merged - lost, merged)
            },
            lost_percent_of_bios: pct(lost, bios),
        })
        .collect()
}

/// A bad line, quoted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadLine {
    pub line: usize,
    pub message: String,
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
    /// Why each device with events gives no advice: no bio queued, every queue event
    /// without a size, or bios spanning too little time for a rate (one sentence each).
    pub devices_without_bios: Vec<String>,
    /// The traced device's scheduler, from the capture's `# scheduler NAME` header.
    pub scheduler: Option<mergetune_kernel::scheduler::Scheduler>,
}
