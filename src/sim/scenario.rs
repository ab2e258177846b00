//! Scenario files: TOML with serde, unknown keys rejected, every error naming its key.
//!
//! A scenario names a seed, devices (kind, tag depth, scheduler and tunables, stacking),
//! and timed phases, each with its workload jobs. [`Scenario::from_toml_str`] parses and
//! validates; a job with `trace = "file"` has its trace parsed here too (relative to the
//! scenario's directory), so a bad trace line is reported before anything runs.
//!
//! Every number is range-checked, not just type-checked: the engine turns times into u64
//! nanoseconds and rates into intervals, so a value like `bandwidth_mb_s = 1e-300` (a
//! service time past u64, wrapping to zero: full speed) or a sum of phases beyond u64 ns
//! would silently break the model. The ranges are wide enough for any real device and
//! narrow enough that no product of them overflows; iodepth x numjobs is bounded by the
//! engine's cap on bios in flight.

use super::cost::CostModel;
use crate::kernel::trace::{TraceBio, parse_trace};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bios alive at once (submitted, not completed; dm pieces included) at most. Scenario
/// validation keeps iodepth x numjobs under it; a trace replayed faster than the device
/// serves it, or bios split into many dm pieces, can still reach it, and then the
/// simulation stops with [`SimError::TooManyInFlight`] instead of growing without bound
/// (each bio costs about 64 bytes of slab plus its share of requests and events).
pub const MAX_IN_FLIGHT_BIOS: usize = 1 << 18;

/// Bounds of the scenario's numbers (see the module doc for why they exist).
pub mod limits {
    /// Device bandwidth, MB/s: 10 kB/s to 1 TB/s.
    pub const BANDWIDTH_MB_S: (f64, f64) = (0.01, 1e6);
    /// Per-request overheads and seek times, µs: up to 10 s.
    pub const SERVICE_US_MAX: f64 = 1e7;
    /// Think time and the trace plug gap, µs: up to 1,000 s.
    pub const PAUSE_US_MAX: f64 = 1e9;
    /// A rate limit, bios per second, when not 0 (unlimited).
    pub const RATE_IOPS: (f64, f64) = (0.001, 1e9);
    /// Simulated time over all phases, s (11.6 days).
    pub const TOTAL_DURATION_S: f64 = 1e6;
    /// Offsets and sizes of a job's region, MB (the largest device is 2^30 MB).
    pub const REGION_MB_MAX: u64 = 1 << 30;
    /// A job's `io_size_mb`.
    pub const IO_SIZE_MB_MAX: u64 = 1 << 40;
    /// One step of the cost model, cycles.
    pub const COST_CYCLES_MAX: u64 = 1_000_000;
}

/// The embedded default scenario (`mergetune simulate` with no file).
pub const DEFAULT_SCENARIO: &str = include_str!("../../config/scenarios/default.toml");

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ScenarioError {
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: key `{key}`: {reason}")]
    Invalid {
        origin: String,
        key: String,
        reason: String,
    },
    #[error("{path}: {message}")]
    Read { path: String, message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    Ssd,
    Hdd,
    DmLinear,
    DmStripe,
}

impl DeviceKind {
    pub fn is_dm(self) -> bool {
        matches!(self, DeviceKind::DmLinear | DeviceKind::DmStripe)
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    pub name: String,
    pub kind: DeviceKind,
    /// Hardware tags: requests in service at once (NCQ / NVMe queue depth).
    #[serde(default)]
    pub queue_depth: Option<u32>,
    /// `none`, `mq-deadline`, `kyber` or `bfq` (dm devices: `none` only).
    #[serde(default)]
    pub scheduler: Option<String>,
    #[serde(default)]
    pub nomerges: u8,
    #[serde(default = "default_max_sectors_kb")]
    pub max_sectors_kb: u32,
    #[serde(default = "default_max_segments")]
    pub max_segments: u32,
    #[serde(default = "default_size_gib")]
    pub size_gib: u64,
    /// Scheduler tunables as in `queue/iosched/`, e.g. `front_merges = 0`.
    #[serde(default)]
    pub iosched: BTreeMap<String, u64>,
    // SSD
    #[serde(default)]
    pub read_overhead_us: Option<f64>,
    #[serde(default)]
    pub write_overhead_us: Option<f64>,
    #[serde(default)]
    pub bandwidth_mb_s: Option<f64>,
    #[serde(default)]
    pub parallelism: Option<u32>,
    // HDD
    #[serde(default)]
    pub rpm: Option<u32>,
    #[serde(default)]
    pub min_seek_us: Option<f64>,
    #[serde(default)]
    pub max_seek_us: Option<f64>,
    // dm
    #[serde(default)]
    pub members: Vec<String>,
    #[serde(default)]
    pub chunk_kb: Option<u32>,
}

fn default_max_sectors_kb() -> u32 {
    1280
}
fn default_max_segments() -> u32 {
    128
}
fn default_size_gib() -> u64 {
    100
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    #[default]
    Random,
    Sequential,
    Mixed,
}

/// One block size or a list picked uniformly per bio.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum BlockSizes {
    One(u32),
    Many(Vec<u32>),
}

impl Default for BlockSizes {
    fn default() -> Self {
        BlockSizes::One(4)
    }
}

impl BlockSizes {
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            BlockSizes::One(v) => vec![*v],
            BlockSizes::Many(v) => v.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub name: String,
    pub device: String,
    #[serde(default)]
    pub pattern: Pattern,
    /// Share of bios that are reads, percent.
    #[serde(default = "default_read_percent")]
    pub read_percent: f64,
    /// For `mixed`: share of bios continuing the sequential stream, percent.
    #[serde(default = "default_sequential_percent")]
    pub sequential_percent: f64,
    #[serde(default)]
    pub block_size_kb: BlockSizes,
    /// Bios in flight at most (fio iodepth).
    #[serde(default = "one")]
    pub iodepth: u32,
    /// Bios submitted together under one plug (fio iodepth_batch_submit): up to this many
    /// of the free slots at each submission.
    #[serde(default = "one")]
    pub batch: u32,
    /// Free slots needed before submitting again (fio iodepth_batch_complete_min);
    /// default: `batch`, so a batch is submitted whole once the previous one completed.
    #[serde(default)]
    pub batch_complete: Option<u32>,
    /// Pause after each completion before the slot is reused, in microseconds.
    #[serde(default)]
    pub think_time_us: f64,
    /// Rate limit in bios per second; 0 is unlimited.
    #[serde(default)]
    pub rate_iops: f64,
    /// Writes are synchronous (O_DIRECT) rather than async writeback; matters for the
    /// slice scheduler's sync/async classes. Reads are always sync.
    #[serde(default = "yes")]
    pub sync: bool,
    #[serde(default)]
    pub offset_mb: u64,
    /// Size of the region addressed; 0 is the rest of the device.
    #[serde(default)]
    pub size_mb: u64,
    /// Stop after submitting this much (fio `size` / `io_size`); 0 runs the whole phase.
    #[serde(default)]
    pub io_size_mb: u64,
    /// Identical copies of this job (each with its own stream and plug).
    #[serde(default = "one")]
    pub numjobs: u32,
    /// Replay this trace (tracefs `block_bio_queue` text or blkparse output) instead of
    /// generating bios; relative to the scenario file.
    #[serde(default)]
    pub trace: Option<PathBuf>,
    /// Trace replay without plug markers: bios at most this far apart share a plug.
    #[serde(default = "default_plug_gap_us")]
    pub trace_plug_gap_us: f64,
    #[serde(skip)]
    pub trace_bios: Option<Arc<Vec<TraceBio>>>,
}

fn default_read_percent() -> f64 {
    100.0
}
fn default_sequential_percent() -> f64 {
    50.0
}
fn default_plug_gap_us() -> f64 {
    // Captured batched fio submissions are 1-8 µs apart within a batch, and at least
    // 50 µs apart between batches (tests/fixtures/trace_seq_batched_write.txt).
    10.0
}
fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseSpec {
    pub name: String,
    pub duration_s: f64,
    #[serde(default, rename = "job")]
    pub jobs: Vec<JobSpec>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Step costs for every scheduler, overriding the profile.
    #[serde(default)]
    pub cost: Option<CostModel>,
    /// The cost profile that prices the steps: `measured-6.18` (default) or `lkml-2008`.
    #[serde(default)]
    pub cost_profile: Option<String>,
    #[serde(rename = "device")]
    pub devices: Vec<DeviceSpec>,
    #[serde(rename = "phase")]
    pub phases: Vec<PhaseSpec>,
}

fn default_seed() -> u64 {
    1
}

pub const SCHEDULERS: [&str; 4] = ["none", "mq-deadline", "kyber", "bfq"];

/// Tunables each scheduler exposes under `queue/iosched/`.
pub fn iosched_keys(scheduler: &str) -> &'static [&'static str] {
    match scheduler {
        "mq-deadline" => &[
            "fifo_batch",
            "front_merges",
            "read_expire",
            "write_expire",
            "writes_starved",
        ],
        "bfq" => &[
            "fifo_expire_async",
            "fifo_expire_sync",
            "low_latency",
            "slice_async",
            "slice_idle",
            "slice_sync",
            "timeout_sync",
        ],
        "kyber" => &["read_lat_nsec", "write_lat_nsec"],
        _ => &[],
    }
}

impl Scenario {
    /// The cost profile that prices this scenario: the one it names, else the profile
    /// measured on this project's kernel.
    pub fn cost_profile_name(&self) -> &str {
        self.cost_profile
            .as_deref()
            .unwrap_or(crate::logic::cost_profile::MEASURED_NAME)
    }

    /// The daemon's config for a run of this scenario: `cfg` with `[policy] cost_profile`
    /// set to the scenario's profile. The simulated kernel costs what that profile says,
    /// and a daemon is told the profile of its kernel, as an operator configures the one
    /// `mergetune calibrate` measured on theirs.
    pub fn daemon_config(
        &self,
        cfg: &crate::logic::config::Config,
    ) -> crate::logic::config::Config {
        let mut c = cfg.clone();
        c.policy.cost_profile = self.cost_profile_name().to_string();
        c
    }

    /// The embedded default scenario.
    pub fn default_scenario() -> Scenario {
        // The embedded file is tested; failing here would be a build defect.
        Scenario::from_toml_str(DEFAULT_SCENARIO, "<embedded default.toml>", None)
            .expect("embedded default scenario is valid")
    }

    /// Reads and validates a scenario file; traces are resolved next to it.
    pub fn load_file(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let base = path.parent().map(Path::to_path_buf);
        Scenario::from_toml_str(&text, &path.display().to_string(), base.as_deref())
    }

    /// Parses and validates scenario text; `origin` names it in errors, `base_dir` resolves
    /// relative trace paths (None: the current directory).
    pub fn from_toml_str(
        text: &str,
        origin: &str,
        base_dir: Option<&Path>,
    ) -> Result<Scenario, ScenarioError> {
        let mut s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            origin: origin.to_string(),
            message: e.to_string().trim_end().replace('\n', " "),
        })?;
        if s.name.is_empty() {
            s.name = Path::new(origin)
                .file_stem()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "scenario".into());
        }
        s.validate(origin)?;
        for (pi, phase) in s.phases.iter_mut().enumerate() {
            for (ji, job) in phase.jobs.iter_mut().enumerate() {
                if let Some(p) = &job.trace {
                    let path = match base_dir {
                        Some(b) if p.is_relative() => b.join(p),
                        _ => p.clone(),
                    };
                    let key = format!("phase[{pi}].job[{ji}].trace");
                    let text =
                        std::fs::read_to_string(&path).map_err(|e| ScenarioError::Invalid {
                            origin: origin.into(),
                            key: key.clone(),
                            reason: format!("{}: {e}", path.display()),
                        })?;
                    let gap_ns = (job.trace_plug_gap_us * 1000.0) as u64;
                    let bios = parse_trace(&text, gap_ns).map_err(|e| ScenarioError::Invalid {
                        origin: origin.into(),
                        key,
                        reason: format!("{}: {e}", path.display()),
                    })?;
                    job.trace_bios = Some(Arc::new(bios));
                }
            }
        }
        Ok(s)
    }

    /// Total virtual duration in ns.
    pub fn duration_ns(&self) -> u64 {
        self.phases.iter().map(|p| secs_to_ns(p.duration_s)).sum()
    }

    pub fn validate(&self, origin: &str) -> Result<(), ScenarioError> {
        let bad = |key: String, reason: &str| ScenarioError::Invalid {
            origin: origin.to_string(),
            key,
            reason: reason.to_string(),
        };
        if let Some(p) = &self.cost_profile
            && !crate::logic::cost_profile::BUILTIN_NAMES.contains(&p.as_str())
        {
            return Err(bad(
                "cost_profile".into(),
                &format!(
                    "must be one of {}",
                    crate::logic::cost_profile::BUILTIN_NAMES.join(", ")
                ),
            ));
        }
        if self.devices.is_empty() {
            return Err(bad("device".into(), "at least one [[device]] is required"));
        }
        if self.phases.is_empty() {
            return Err(bad("phase".into(), "at least one [[phase]] is required"));
        }
        if let Some(c) = &self.cost {
            for (key, v) in [
                ("plug_check", c.plug_check),
                ("one_hit", c.one_hit),
                ("hash_lookup", c.hash_lookup),
                ("front_lookup", c.front_lookup),
                ("merge", c.merge),
                ("request_alloc", c.request_alloc),
                ("insert", c.insert),
                ("dispatch", c.dispatch),
                ("completion", c.completion),
                ("bio_complete", c.bio_complete),
                ("dm_split", c.dm_split),
            ] {
                if v > limits::COST_CYCLES_MAX {
                    return Err(bad(
                        format!("cost.{key}"),
                        &format!("must be at most {} cycles", limits::COST_CYCLES_MAX),
                    ));
                }
            }
        }
        let mut names = HashSet::new();
        let mut used_members = HashSet::new();
        for (i, d) in self.devices.iter().enumerate() {
            let k = |f: &str| format!("device[{i}].{f}");
            if d.name.is_empty()
                || d.name.contains('/')
                || d.name.contains(char::is_whitespace)
                || d.name == "."
                || d.name == ".."
            {
                return Err(bad(k("name"), "must be a plain device name like sda"));
            }
            if !names.insert(d.name.as_str()) {
                return Err(bad(k("name"), "duplicate device name"));
            }
            if d.nomerges > 2 {
                return Err(bad(k("nomerges"), "must be 0, 1 or 2"));
            }
            if let Some(q) = d.queue_depth
                && !(1..=4096).contains(&q)
            {
                return Err(bad(k("queue_depth"), "must be in 1..=4096"));
            }
            if !(4..=65536).contains(&d.max_sectors_kb) {
                return Err(bad(k("max_sectors_kb"), "must be in 4..=65536"));
            }
            if !(1..=4096).contains(&d.max_segments) {
                return Err(bad(k("max_segments"), "must be in 1..=4096"));
            }
            if d.size_gib == 0 || d.size_gib > 1 << 20 {
                return Err(bad(k("size_gib"), "must be in 1..=1048576"));
            }
            let sched = d.scheduler.as_deref().unwrap_or(if d.kind.is_dm() {
                "none"
            } else {
                "mq-deadline"
            });
            if !SCHEDULERS.contains(&sched) {
                return Err(bad(
                    k("scheduler"),
                    "must be one of none, mq-deadline, kyber, bfq",
                ));
            }
            if d.kind.is_dm() && sched != "none" {
                return Err(bad(k("scheduler"), "dm devices are bio-based: only none"));
            }
            for key in d.iosched.keys() {
                if !iosched_keys(sched).contains(&key.as_str()) {
                    return Err(bad(
                        k(&format!("iosched.{key}")),
                        &format!("not a tunable of {sched}"),
                    ));
                }
            }
            for (key, v) in &d.iosched {
                if matches!(key.as_str(), "front_merges" | "low_latency") && *v > 1 {
                    return Err(bad(k(&format!("iosched.{key}")), "must be 0 or 1"));
                }
                if key == "fifo_batch" && *v == 0 {
                    return Err(bad(k(&format!("iosched.{key}")), "must be at least 1"));
                }
            }
            let service = |v: Option<f64>, f: &str| -> Result<(), ScenarioError> {
                match v {
                    Some(x) if !(0.0..=limits::SERVICE_US_MAX).contains(&x) => Err(bad(
                        k(f),
                        &format!(
                            "must be a number of µs in 0..={} (10 s)",
                            limits::SERVICE_US_MAX
                        ),
                    )),
                    _ => Ok(()),
                }
            };
            service(d.read_overhead_us, "read_overhead_us")?;
            service(d.write_overhead_us, "write_overhead_us")?;
            service(d.min_seek_us, "min_seek_us")?;
            service(d.max_seek_us, "max_seek_us")?;
            let (lo, hi) = limits::BANDWIDTH_MB_S;
            if let Some(b) = d.bandwidth_mb_s
                && !(lo..=hi).contains(&b)
            {
                return Err(bad(
                    k("bandwidth_mb_s"),
                    &format!("must be in {lo}..={hi} MB/s"),
                ));
            }
            if let Some(p) = d.parallelism
                && !(1..=1024).contains(&p)
            {
                return Err(bad(k("parallelism"), "must be in 1..=1024"));
            }
            if let Some(r) = d.rpm
                && !(1000..=30000).contains(&r)
            {
                return Err(bad(k("rpm"), "must be in 1000..=30000"));
            }
            if d.kind.is_dm() {
                if d.members.is_empty() {
                    return Err(bad(k("members"), "a dm device needs members"));
                }
                for m in &d.members {
                    let Some(md) = self.devices.iter().find(|x| &x.name == m) else {
                        return Err(bad(k("members"), &format!("no device named {m:?}")));
                    };
                    if md.kind.is_dm() {
                        return Err(bad(k("members"), "members must be disks, not dm devices"));
                    }
                    if !used_members.insert(m.clone()) {
                        return Err(bad(k("members"), &format!("{m} is already a member")));
                    }
                }
                if let Some(c) = d.chunk_kb
                    && (c < 4 || !c.is_power_of_two())
                {
                    return Err(bad(k("chunk_kb"), "must be a power of two >= 4"));
                }
            } else if !d.members.is_empty() {
                return Err(bad(k("members"), "only dm devices have members"));
            }
        }
        let mut total_s = 0.0;
        for (pi, p) in self.phases.iter().enumerate() {
            let k = |f: &str| format!("phase[{pi}].{f}");
            let max_s = limits::TOTAL_DURATION_S;
            if !(p.duration_s.is_finite() && p.duration_s > 0.0 && p.duration_s <= max_s) {
                return Err(bad(k("duration_s"), "must be in (0, 1e6] seconds"));
            }
            total_s += p.duration_s;
            if total_s > max_s {
                return Err(bad(
                    "phase".into(),
                    &format!(
                        "the phases last {total_s} s up to phase[{pi}]; the simulator runs at most {max_s} s in all"
                    ),
                ));
            }
            // Jobs of a phase run at once: their queues add up.
            let mut in_flight = 0u64;
            for (ji, j) in p.jobs.iter().enumerate() {
                let k = |f: &str| format!("phase[{pi}].job[{ji}].{f}");
                let Some(dev) = self.devices.iter().find(|d| d.name == j.device) else {
                    return Err(bad(k("device"), &format!("no device named {:?}", j.device)));
                };
                if used_members.contains(&dev.name) {
                    return Err(bad(
                        k("device"),
                        "is a dm member; submit to the dm device instead",
                    ));
                }
                if !(0.0..=100.0).contains(&j.read_percent) {
                    return Err(bad(k("read_percent"), "must be in 0..=100"));
                }
                if !(0.0..=100.0).contains(&j.sequential_percent) {
                    return Err(bad(k("sequential_percent"), "must be in 0..=100"));
                }
                let bs = j.block_size_kb.to_vec();
                if bs.is_empty() || bs.iter().any(|&b| b == 0 || b > 65536) {
                    return Err(bad(k("block_size_kb"), "each size must be in 1..=65536"));
                }
                if !(1..=65536).contains(&j.iodepth) {
                    return Err(bad(k("iodepth"), "must be in 1..=65536"));
                }
                if j.batch == 0 || j.batch > j.iodepth {
                    return Err(bad(k("batch"), "must be in 1..=iodepth"));
                }
                if let Some(c) = j.batch_complete
                    && (c == 0 || c > j.iodepth)
                {
                    return Err(bad(k("batch_complete"), "must be in 1..=iodepth"));
                }
                let pause = limits::PAUSE_US_MAX;
                if !(0.0..=pause).contains(&j.think_time_us) {
                    return Err(bad(
                        k("think_time_us"),
                        &format!("must be in 0..={pause} µs"),
                    ));
                }
                let (lo, hi) = limits::RATE_IOPS;
                if !(j.rate_iops == 0.0 || (lo..=hi).contains(&j.rate_iops)) {
                    return Err(bad(
                        k("rate_iops"),
                        &format!("must be 0 (unlimited) or in {lo}..={hi} bios/s"),
                    ));
                }
                if !(0.0..=pause).contains(&j.trace_plug_gap_us) {
                    return Err(bad(
                        k("trace_plug_gap_us"),
                        &format!("must be in 0..={pause} µs"),
                    ));
                }
                if !(1..=1024).contains(&j.numjobs) {
                    return Err(bad(k("numjobs"), "must be in 1..=1024"));
                }
                for (f, v, max) in [
                    ("offset_mb", j.offset_mb, limits::REGION_MB_MAX),
                    ("size_mb", j.size_mb, limits::REGION_MB_MAX),
                    ("io_size_mb", j.io_size_mb, limits::IO_SIZE_MB_MAX),
                ] {
                    if v > max {
                        return Err(bad(k(f), &format!("must be at most {max} MB")));
                    }
                }
                let cap = MAX_IN_FLIGHT_BIOS as u64;
                let job_bios = u64::from(j.iodepth) * u64::from(j.numjobs);
                in_flight += job_bios;
                if in_flight > cap {
                    return Err(bad(
                        k("iodepth"),
                        &format!(
                            "iodepth x numjobs = {job_bios}: with the phase's other jobs up to {in_flight} bios in flight, more than the simulator's cap of {cap}"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

pub fn secs_to_ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}
