//! Scenario files: TOML with serde, unknown keys rejected, every error naming its key.
//!
//! A scenario names a seed, devices (kind, tag depth, scheduler and tunables, stacking),
//! and timed phases, each with its workload jobs. [`Scenario::from_toml_str`] parses and
//! validates; a job with `trace = "file"` has its trace parsed here too (relative to the
//! scenario's directory), so a bad trace line is reported before anything runs.
//!
//! Every number is range-checked, not just type-checked ([`Scenario::validate`] and its
//! [`limits`], in validate.rs, say why). A key whose field is an `Option` may be left out
//! (serde reads it as `None`); the others left out take the default their field names.

mod validate;
pub use validate::limits;

use super::cost::CostModel;
use mergetune_kernel::scheduler::{Reported, Scheduler};
use mergetune_kernel::trace::{TraceBio, parse_trace};
use mergetune_logic::document::DocumentError;
use mergetune_logic::tuners;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

/// Bios alive at once (submitted, not completed; dm pieces included) at most. Scenario
/// validation keeps iodepth x numjobs under it; a trace replayed faster than the device
/// serves it, or bios split into many dm pieces, can still reach it, and then the
/// simulation stops with [`super::engine::SimError::TooManyInFlight`] instead of growing without bound
/// (each bio costs about 64 bytes of slab plus its share of requests and events).
pub const MAX_IN_FLIGHT_BIOS: usize = 1 << 18;

/// The embedded default scenario (`mergetune simulate` with no file).
pub const DEFAULT_SCENARIO: &str = include_str!("../../../config/scenarios/default.toml");

/// The largest scenario file read (the shipped ones are a few KiB).
pub const MAX_SCENARIO_BYTES: u64 = 4 << 20;
/// The largest trace a scenario replays (the simulator holds every bio of it).
pub const MAX_TRACE_BYTES: u64 = 1 << 30;

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ScenarioError {
    /// The text is not a scenario, or a key's value is refused.
    #[error(transparent)]
    Document(#[from] DocumentError),
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
    pub queue_depth: Option<u32>,
    /// `none`, `mq-deadline`, `kyber` or `bfq` (dm devices: `none` only); another name
    /// is refused by validation.
    pub scheduler: Option<Reported>,
    #[serde(default)]
    pub nomerges: u8,
    #[serde(default = "value_u32::<1280>")]
    pub max_sectors_kb: u32,
    #[serde(default = "value_u32::<128>")]
    pub max_segments: u32,
    #[serde(default = "value_u64::<100>")]
    pub size_gib: u64,
    /// Scheduler tunables as in `queue/iosched/`, e.g. `front_merges = 0`.
    #[serde(default)]
    pub iosched: BTreeMap<String, u64>,
    // SSD
    pub read_overhead_us: Option<f64>,
    pub write_overhead_us: Option<f64>,
    pub bandwidth_mb_s: Option<f64>,
    pub parallelism: Option<u32>,
    // HDD
    pub rpm: Option<u32>,
    pub min_seek_us: Option<f64>,
    pub max_seek_us: Option<f64>,
    // dm
    #[serde(default)]
    pub members: Vec<String>,
    pub chunk_kb: Option<u32>,
}

/// A default serde calls for a key left out, with the value written at the key
/// (`default = "value_u32::<128>"`). Floats cannot be const parameters: those keys have a
/// function of their own.
const fn value_u32<const V: u32>() -> u32 {
    V
}
const fn value_u64<const V: u64>() -> u64 {
    V
}
const fn value_bool<const V: bool>() -> bool {
    V
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
    #[serde(default = "value_u32::<1>")]
    pub iodepth: u32,
    /// Bios submitted together under one plug (fio iodepth_batch_submit): up to this many
    /// of the free slots at each submission.
    #[serde(default = "value_u32::<1>")]
    pub batch: u32,
    /// Free slots needed before submitting again (fio iodepth_batch_complete_min);
    /// default: `batch`, so a batch is submitted whole once the previous one completed.
    pub batch_complete: Option<u32>,
    /// Pause after each completion before the slot is reused, in microseconds.
    #[serde(default)]
    pub think_time_us: f64,
    /// Rate limit in bios per second; 0 is unlimited.
    #[serde(default)]
    pub rate_iops: f64,
    /// Writes are synchronous (O_DIRECT) rather than async writeback; matters for the
    /// slice scheduler's sync/async classes. Reads are always sync.
    #[serde(default = "value_bool::<true>")]
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
    #[serde(default = "value_u32::<1>")]
    pub numjobs: u32,
    /// Replay this trace (tracefs `block_bio_queue` text or blkparse output) instead of
    /// generating bios; relative to the scenario file.
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
    #[serde(default = "value_u64::<1>")]
    pub seed: u64,
    /// Step costs for every scheduler, overriding the profile.
    pub cost: Option<CostModel>,
    /// The cost profile that prices the steps: `measured-6.18` (default) or `lkml-2008`.
    pub cost_profile: Option<String>,
    #[serde(rename = "device")]
    pub devices: Vec<DeviceSpec>,
    #[serde(rename = "phase")]
    pub phases: Vec<PhaseSpec>,
}

/// The order the simulated kernel lists its schedulers in `queue/scheduler` (the order a
/// kernel registers them), and names them in a scenario's error. Presentation only:
/// tables indexed by scheduler follow [`Scheduler::ALL`].
pub const LISTED: [Scheduler; 4] = [
    Scheduler::None,
    Scheduler::MqDeadline,
    Scheduler::Kyber,
    Scheduler::Bfq,
];

/// The files each scheduler's model has under `queue/iosched/` beyond the slice knobs of
/// its table ([`mergetune_logic::tuners`]), which every simulated scheduler offers too.
fn model_keys(s: Scheduler) -> &'static [&'static str] {
    match s {
        Scheduler::MqDeadline => &["fifo_batch", "front_merges", "write_expire"],
        Scheduler::Bfq => &[
            "fifo_expire_async",
            "fifo_expire_sync",
            "low_latency",
            "slice_async",
            "slice_idle",
            "slice_sync",
        ],
        Scheduler::Kyber => &["read_lat_nsec", "write_lat_nsec"],
        Scheduler::None => &[],
    }
}

/// Tunables each scheduler exposes under `queue/iosched/`, sorted: its model's files and
/// its table's slice knobs.
pub fn iosched_keys(s: Scheduler) -> &'static [&'static str] {
    static KEYS: LazyLock<[Vec<&'static str>; 4]> = LazyLock::new(|| {
        Scheduler::ALL.map(|s| {
            let knobs = tuners::table(s).knobs.iter().map(|k| k.tunable.file_name());
            let mut v: Vec<&'static str> = model_keys(s).iter().copied().chain(knobs).collect();
            v.sort_unstable();
            v.dedup();
            v
        })
    });
    &KEYS[s.index()]
}

impl DeviceSpec {
    /// The scheduler the device runs: the one named, else none on a dm device and
    /// mq-deadline on the others; Err with the name of one the simulator does not have.
    pub fn scheduler(&self) -> Result<Scheduler, &str> {
        match &self.scheduler {
            Some(Reported::Known(s)) => Ok(*s),
            Some(Reported::Other(name)) => Err(name),
            None if self.kind.is_dm() => Ok(Scheduler::None),
            None => Ok(Scheduler::MqDeadline),
        }
    }
}

impl Scenario {
    /// The cost profile that prices this scenario: the one it names, else the profile
    /// measured on this project's kernel.
    pub fn cost_profile_name(&self) -> &str {
        self.cost_profile
            .as_deref()
            .unwrap_or(mergetune_logic::pricing::profile::MEASURED_NAME)
    }

    /// The daemon's config for a run of this scenario: `cfg` with `[policy] cost_profile`
    /// set to the scenario's profile. The simulated kernel costs what that profile says,
    /// and a daemon is told the profile of its kernel, as an operator configures the one
    /// `mergetune calibrate` measured on theirs.
    pub fn daemon_config(
        &self,
        cfg: &mergetune_logic::config::Config,
    ) -> mergetune_logic::config::Config {
        let mut c = cfg.clone();
        let name = self.cost_profile_name();
        // A scenario priced in measured ns runs the daemon as shipped: it measures the
        // simulated merge path live (`sim::meter`), as it would on the host. One in another
        // currency (the 2008 model cycles) is told its profile.
        let measured = mergetune_logic::pricing::profile::builtin(name)
            .is_some_and(|p| p.unit == mergetune_logic::pricing::profile::Unit::Ns);
        if !(measured && cfg.policy.cost_profile == mergetune_logic::pricing::profile::LIVE) {
            c.policy.cost_profile = name.to_string();
        }
        c
    }

    /// The embedded default scenario.
    pub fn default_scenario() -> Scenario {
        // The embedded file is tested; failing here would be a build defect.
        Scenario::from_toml_str(DEFAULT_SCENARIO, "<embedded default.toml>", None)
            .expect("embedded default scenario is valid")
    }

    /// Reads and validates a scenario file (a regular file of at most
    /// [`MAX_SCENARIO_BYTES`]); traces are resolved next to it.
    pub fn load_file(path: &Path) -> Result<Scenario, ScenarioError> {
        let text =
            mergetune_kernel::userfile::read_text(path, MAX_SCENARIO_BYTES).map_err(|e| {
                ScenarioError::Read {
                    path: path.display().to_string(),
                    message: e.reason(),
                }
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
        // Where, never what: a file named by mistake may hold secrets.
        let mut s: Scenario = toml::from_str(text).map_err(|e| {
            let (line, column) =
                mergetune_logic::printable::line_col(text, e.span().map_or(0, |s| s.start));
            DocumentError::parse(
                origin,
                format!(
                    "line {line}, column {column}: {}",
                    mergetune_logic::printable::without_quotes(e.message())
                ),
            )
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
                    let text = mergetune_kernel::userfile::read_text(&path, MAX_TRACE_BYTES)
                        .map_err(|e| DocumentError::invalid(origin, &key, e.to_string()))?;
                    let gap_ns = (job.trace_plug_gap_us * 1000.0) as u64;
                    let bios = parse_trace(&text, gap_ns).map_err(|e| {
                        DocumentError::invalid(origin, key, format!("{}: {e}", path.display()))
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
}

pub fn secs_to_ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}
