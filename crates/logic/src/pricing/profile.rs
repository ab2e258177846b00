//! Cost profiles: what one I/O costs in CPU, per scheduler, merge level and workload, as
//! measured by `mergetune calibrate` on one kernel (or as stated by a source, for the 2008
//! figures), with the method and the noise recorded next to the numbers.
//!
//! Design: a profile is data (TOML, `deny_unknown_fields`), parsed and checked by pure
//! functions; the simulator turns it into step costs (`sim::cost`), and `calibrate` writes
//! it. A level's change against L0 is stored as the median of paired per-repetition
//! differences with its confidence interval, because that is what the levels were
//! interleaved for: an interval that contains 0 is "no measurable difference" and the
//! simulator then charges nothing for it ([`Cell::significant_change`]).
//!
//! Matching is here too, once: whether a profile applies to a device ([`profile_match`])
//! and which of its cells prices a device's scheduler ([`CostProfile::priced_scheduler`],
//! [`CostProfile::priced_cell`]), read alike by the daemon's table and the simulator.
//!
//! One file of about 900 lines on purpose: it is one concern, the profile format. Most of
//! it is the schema's field documentation and the checks that name each bad key; the
//! queries the policy and the simulator ask of a profile sit next to the fields they read,
//! and splitting schema from checks would put every key in two places.

use crate::decision::Level;
use mergetune_kernel::scheduler::Scheduler;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The profile measured on this machine's kernel: the simulator's default currency.
pub const MEASURED: &str = include_str!("../../../../config/cost-profiles/measured-6.18.toml");
/// The 2008 linux-kernel "nomerges" thread's figures, as `sim::cost` stated them.
pub const LKML_2008: &str = include_str!("../../../../config/cost-profiles/lkml-2008.toml");
/// `[policy] cost_profile = "live"`: no profile, the daemon measures the merge path on the
/// host it runs on (`pricing::live`). The default.
pub const LIVE: &str = "live";
/// Name of the measured profile (a scenario's `cost_profile`).
pub const MEASURED_NAME: &str = "measured-6.18";
/// Name of the 2008 profile.
pub const LKML_2008_NAME: &str = "lkml-2008";

/// The shipped profiles by name.
pub fn builtin(name: &str) -> Option<CostProfile> {
    let text = match name {
        MEASURED_NAME => MEASURED,
        LKML_2008_NAME => LKML_2008,
        _ => return None,
    };
    // Both files are tested; failing here would be a build defect.
    Some(CostProfile::from_toml_str(text).expect("shipped cost profile is valid"))
}

/// Names accepted by [`builtin`].
pub const BUILTIN_NAMES: [&str; 2] = [MEASURED_NAME, LKML_2008_NAME];

/// Whether a profile reference (`[policy] cost_profile`) names a file rather than a
/// built-in profile: it contains a `/` or ends in `.toml`.
pub fn is_path(spec: &str) -> bool {
    spec.contains('/') || spec.ends_with(".toml")
}

/// The largest profile file read: a measured profile is about 30 KiB.
pub const MAX_PROFILE_BYTES: u64 = 4 << 20;

/// A built-in profile by name, or a profile file (a path, see [`is_path`]). Reading the
/// file is the only I/O of this module: a regular file only, at most [`MAX_PROFILE_BYTES`]
/// (a FIFO would block the check and the reload, `/dev/zero` fill memory). An error names
/// the path, line and column and never quotes the file: a file named by mistake (or on
/// purpose, to read it through the daemon's log) may hold secrets.
pub fn resolve(spec: &str) -> Result<CostProfile, ProfileError> {
    if let Some(p) = builtin(spec) {
        return Ok(p);
    }
    if !is_path(spec) {
        return Err(bad(
            "name",
            format!(
                "{spec:?} is neither a built-in profile ({}) nor a path",
                BUILTIN_NAMES.join(", ")
            ),
        ));
    }
    let path = std::path::Path::new(spec);
    let text = mergetune_kernel::userfile::read_text(path, MAX_PROFILE_BYTES).map_err(|e| {
        ProfileError::Read {
            path: path.to_path_buf(),
            message: e.reason(),
        }
    })?;
    let p: CostProfile = toml::from_str(&text).map_err(|e| {
        let (line, column) = crate::printable::line_col(&text, e.span().map_or(0, |s| s.start));
        ProfileError::Syntax {
            path: path.to_path_buf(),
            line,
            column,
            message: crate::printable::without_quotes(e.message()),
        }
    })?;
    p.validate().map_err(|e| match e {
        ProfileError::Invalid { key, reason } => ProfileError::Invalid {
            key,
            reason: format!("{reason} (in {spec})"),
        },
        other => other,
    })?;
    Ok(p)
}

/// What the measured job does: 4 KiB reads at queue depth 32, random or sequential, one
/// I/O per submission or 32 under one plug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    RandomUnbatched,
    RandomBatched,
    SequentialUnbatched,
    SequentialBatched,
}

impl Workload {
    pub const ALL: [Workload; 4] = [
        Workload::RandomUnbatched,
        Workload::RandomBatched,
        Workload::SequentialUnbatched,
        Workload::SequentialBatched,
    ];
    pub fn sequential(self) -> bool {
        matches!(
            self,
            Workload::SequentialUnbatched | Workload::SequentialBatched
        )
    }
    pub fn batched(self) -> bool {
        matches!(self, Workload::RandomBatched | Workload::SequentialBatched)
    }
}

/// The name a profile's cells and the lab's flags give the workload (serde's too); it
/// honours a width, as the profile's table pads it.
impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Workload::RandomUnbatched => "random-unbatched",
            Workload::RandomBatched => "random-batched",
            Workload::SequentialUnbatched => "sequential-unbatched",
            Workload::SequentialBatched => "sequential-batched",
        })
    }
}

/// How the figures were obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// `mergetune calibrate`: a loop device over a tmpfs file, fio pinned to one CPU.
    CpuBoundLoop,
    /// Figures stated by a source, not measured here (no intervals).
    Stated,
    /// `mergetune calibrate` (the default mode): the merge path's CPU per bio, sampled
    /// with `cpu-clock` callchains under fio (`merge_path` cells, ns).
    MergePathSampling,
}

/// The unit of `cpu_per_io`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unit {
    /// CPU nanoseconds per I/O, measured.
    Ns,
    /// Modelled CPU cycles per I/O (the 2008 figures are shares, not times).
    ModelCycles,
}

/// One (scheduler, level, workload) measurement: medians over the repetitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cell {
    pub scheduler: Scheduler,
    pub level: Level,
    pub workload: Workload,
    /// CPU per I/O (bio submitted), median over repetitions, in the profile's unit.
    pub cpu_per_io: f64,
    /// Its interval [low, high], at the profile's `ci_coverage_percent` (97.9% for 10 repetitions: the 2nd and 9th values); absent for stated figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_per_io_ci: Option<[f64; 2]>,
    /// Whole-machine busy CPU (/proc/stat) per I/O: includes other tenants' work; kept to
    /// show the noise of the shared machine, not used by the simulator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_cpu_per_io: Option<f64>,
    /// I/Os per second of wall time (median).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<f64>,
    /// p99 completion latency from fio, µs (median).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<f64>,
    /// Bios merged, percent of bios submitted (from the device's stat deltas).
    pub merged_percent: f64,
    /// Change of CPU per I/O against L0 of the same scheduler and workload, percent: the
    /// median of the per-repetition paired differences (absent at L0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_percent: Option<f64>,
    /// Its interval, at the profile's `ci_coverage_percent`; absent for stated figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_ci: Option<[f64; 2]>,
    /// The submitter's CPU alone (fio's threads: plug, merge lookups, request allocation,
    /// insertion, dispatch), without the loop worker; median and interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter_cpu_per_io: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter_cpu_per_io_ci: Option<[f64; 2]>,
    /// Its paired change against L0, percent, and interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter_change_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter_change_ci: Option<[f64; 2]>,
}

/// What the change against L0 amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Saves,
    Costs,
    NoMeasurableDifference,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Saves => "saves",
            Verdict::Costs => "costs more",
            Verdict::NoMeasurableDifference => "no measurable difference",
        })
    }
}

impl Cell {
    /// Saves, costs, or no measurable difference: the interval decides; a stated figure
    /// (no interval) is taken as it is.
    pub fn verdict(&self) -> Option<Verdict> {
        let c = self.change_percent?;
        Some(match self.change_ci {
            Some([lo, hi]) if lo <= 0.0 && hi >= 0.0 => Verdict::NoMeasurableDifference,
            _ if c < 0.0 => Verdict::Saves,
            _ if c > 0.0 => Verdict::Costs,
            _ => Verdict::NoMeasurableDifference,
        })
    }

    /// The change against L0 in percent when it is measurable, else 0.
    pub fn significant_change(&self) -> f64 {
        match self.verdict() {
            Some(Verdict::Saves) | Some(Verdict::Costs) => self.change_percent.unwrap_or(0.0),
            _ => 0.0,
        }
    }
}

/// The workload whose cells price the ladder's levels: random 4 KiB reads, one per
/// submission, where a merge lookup finds nothing (what a step down saves).
pub const PRICED_WORKLOAD: Workload = Workload::RandomUnbatched;

/// The queue-freeze cost of one `queue/nomerges` write under load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToggleCost {
    pub scheduler: Scheduler,
    /// A write every this many ms during the toggled runs.
    pub interval_ms: u64,
    pub runtime_s: f64,
    /// Pairs of (toggled, untoggled) runs.
    pub reps: u32,
    /// How long the `queue/nomerges` write itself took (the freeze and unfreeze), µs.
    pub write_us_median: f64,
    pub write_us_max: f64,
    /// p99 and max completion latency of the fio job, µs (medians over repetitions).
    pub p99_us_without: f64,
    pub p99_us_with: f64,
    /// Paired change of p99 with toggles against without, percent, with its interval.
    pub p99_change_percent: f64,
    pub p99_change_ci: [f64; 2],
    pub max_us_without: f64,
    pub max_us_with: f64,
    pub max_change_percent: f64,
    pub max_change_ci: [f64; 2],
    /// Paired change of IOPS, percent, with its interval.
    pub iops_change_percent: f64,
    pub iops_change_ci: [f64; 2],
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostProfile {
    pub name: String,
    pub description: String,
    pub method: Method,
    pub unit: Unit,
    /// `uname -r` where it was measured (for stated figures: what they came from).
    pub kernel_release: String,
    pub schedulers: Vec<Scheduler>,
    /// What CPU time was counted (text for humans).
    pub cpu_measure: String,
    /// The exact command that produced the profile.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// UTC time of the measurement (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub measured_at: String,
    /// Wall time the measurement took, seconds.
    #[serde(default)]
    pub duration_s: f64,
    /// Repetitions of every cell (levels interleaved within each).
    pub reps: u32,
    /// Measured window of every run, ms.
    #[serde(default)]
    pub runtime_ms: u64,
    /// Coverage of the intervals actually achieved with `reps` (order statistics), percent.
    #[serde(default)]
    pub ci_coverage_percent: f64,
    /// The noise: median over cells of the relative half-width of the CPU-per-I/O
    /// interval, percent.
    #[serde(default)]
    pub noise_percent: f64,
    /// The 1-minute load average at the start and at the end (the machine is shared).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loadavg: Vec<f64>,
    /// Whether the loop device ran with direct I/O on its tmpfs backing file.
    #[serde(default)]
    pub loop_direct_io: bool,
    #[serde(rename = "cell")]
    pub cells: Vec<Cell>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toggle: Option<ToggleCost>,
    /// What the profile was measured on, for matching it to a device (absent: any device
    /// of the same kernel series).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceKey>,
    /// The merge path's CPU per bio (method `merge-path-sampling`).
    #[serde(default, rename = "merge_path", skip_serializing_if = "Vec::is_empty")]
    pub merge_path: Vec<MergePathCell>,
}

/// The device a profile was measured on: a profile applies to a device with the same
/// values (and a kernel of the same `major.minor` series).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceKey {
    /// `queue/rotational`.
    pub rotational: bool,
    /// Entries of `/sys/block/<dev>/mq`.
    pub nr_hw_queues: u32,
    /// The driver, as the device's name says it: "loop", "nvme", "sd", "vd", ...
    pub driver: String,
    /// `device/model` where the device has one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
}

/// One cell of the merge path's price: ns of CPU per bio that each rung would not spend,
/// medians over the windows with their order-statistic intervals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergePathCell {
    pub scheduler: Scheduler,
    /// Submissions of more than 2 iocbs (plugged) or of one (unplugged).
    pub plugged: bool,
    /// fio jobs submitting at once.
    pub submitters: u32,
    /// The whole merge attempt (what nomerges=2, L3, saves), ns per bio.
    pub l3_ns_per_bio: f64,
    pub l3_ci: [f64; 2],
    /// Past the one-hit cache (what nomerges=1, L2, saves).
    pub l2_ns_per_bio: f64,
    pub l2_ci: [f64; 2],
    /// The submitters' whole CPU per bio, for the share.
    pub cpu_ns_per_bio: f64,
    /// Merge-path samples and all samples of the submitters, and the bios.
    pub merge_samples: u64,
    pub samples: u64,
    pub bios: u64,
    /// Windows measured (and dropped: fio not submitting).
    pub windows: u32,
    /// Bios per second over the windows.
    pub bios_per_sec: f64,
}

impl CostProfile {
    /// The merge-path cells for humans.
    pub fn render_merge_path(&self) -> String {
        let mut s = format!(
            "cost profile {} (merge path sampled; kernel {}; {} windows per cell, intervals {:.1}%)\n",
            self.name, self.kernel_release, self.reps, self.ci_coverage_percent
        );
        s.push_str(&format!(
            "  {:<12} {:<10} {:>4} {:>13} {:>17} {:>12} {:>17} {:>12} {:>7} {:>9}\n",
            "scheduler",
            "submission",
            "jobs",
            "L3 ns/bio",
            "interval",
            "L2 ns/bio",
            "interval",
            "CPU ns/bio",
            "share",
            "bios/s"
        ));
        for c in &self.merge_path {
            s.push_str(&format!(
                "  {:<12} {:<10} {:>4} {:>13.1} {:>17} {:>12.1} {:>17} {:>12.0} {:>6.1}% {:>9.0}\n",
                c.scheduler.name(),
                if c.plugged { "plugged" } else { "unplugged" },
                c.submitters,
                c.l3_ns_per_bio,
                format!("[{:.1}, {:.1}]", c.l3_ci[0], c.l3_ci[1]),
                c.l2_ns_per_bio,
                format!("[{:.1}, {:.1}]", c.l2_ci[0], c.l2_ci[1]),
                c.cpu_ns_per_bio,
                c.l3_ns_per_bio / c.cpu_ns_per_bio.max(1e-9) * 100.0,
                c.bios_per_sec
            ));
        }
        s
    }

    /// The L3 price of the unplugged single-submitter cell of `scheduler`, if measured.
    pub fn merge_path_cell(&self, scheduler: Scheduler, plugged: bool) -> Option<&MergePathCell> {
        self.merge_path
            .iter()
            .filter(|c| c.scheduler == scheduler && c.plugged == plugged)
            .min_by_key(|c| c.submitters)
    }
}

/// Whether a profile applies to a device: the same kernel series (`major.minor`) and, if
/// the profile names one, the same kind of device. Unknown values (a simulated world, a
/// fake tree) do not refuse. The error says what differs.
pub fn profile_match(
    p: &CostProfile,
    running_release: Option<&str>,
    key: Option<&DeviceKey>,
) -> Result<(), String> {
    // Stated figures (the 2008 thread's) are a model an operator names on purpose, not a
    // measurement of a kernel: they apply anywhere, and their origin says what they are.
    if p.method == Method::Stated {
        return Ok(());
    }
    if let Some(run) = running_release
        && kernel_series(run) != kernel_series(&p.kernel_release)
    {
        return Err(format!(
            "measured on kernel {}, running {run}",
            p.kernel_release
        ));
    }
    if let (Some(want), Some(have)) = (&p.device, key) {
        let same = want.rotational == have.rotational
            && want.driver == have.driver
            && (want.nr_hw_queues == 0 || want.nr_hw_queues == have.nr_hw_queues)
            && (want.model.is_empty() || want.model == have.model);
        if !same {
            return Err(format!(
                "measured on a {} device ({} hw queues{}), this one is {} ({} hw queues{})",
                want.driver,
                want.nr_hw_queues,
                if want.rotational { ", rotational" } else { "" },
                have.driver,
                have.nr_hw_queues,
                if have.rotational { ", rotational" } else { "" },
            ));
        }
    }
    Ok(())
}

/// `major.minor` of a kernel release ("6.18.44-fc-v857" -> "6.18").
pub fn kernel_series(release: &str) -> &str {
    let mut dots = release.match_indices('.').map(|(i, _)| i);
    let _ = dots.next();
    let end = dots
        .next()
        .or_else(|| release.find(|c: char| !(c.is_ascii_digit() || c == '.')))
        .unwrap_or(release.len());
    &release[..end]
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProfileError {
    #[error("cost profile {path}: {message}")]
    Read {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("cost profile: {0}")]
    Parse(String),
    /// A profile file that cannot be read as one: where, never what it holds.
    #[error("cost profile {}:{line}:{column}: {message}", path.display())]
    Syntax {
        path: std::path::PathBuf,
        line: usize,
        column: usize,
        message: String,
    },

    #[error("cost profile: key `{key}`: {reason}")]
    Invalid { key: String, reason: String },
}

fn bad(key: impl Into<String>, reason: impl Into<String>) -> ProfileError {
    ProfileError::Invalid {
        key: key.into(),
        reason: reason.into(),
    }
}

fn check_ci(key: String, value: f64, ci: Option<[f64; 2]>) -> Result<(), ProfileError> {
    if let Some([lo, hi]) = ci {
        if !(lo.is_finite() && hi.is_finite()) {
            return Err(bad(key, "interval bounds must be finite"));
        }
        if !(lo <= value && value <= hi) {
            return Err(bad(key, format!("[{lo}, {hi}] does not contain {value}")));
        }
    }
    Ok(())
}

impl CostProfile {
    pub fn from_toml_str(text: &str) -> Result<CostProfile, ProfileError> {
        let p: CostProfile = toml::from_str(text)
            .map_err(|e| ProfileError::Parse(e.to_string().trim_end().replace('\n', " ")))?;
        p.validate()?;
        Ok(p)
    }

    pub fn to_toml_string(&self) -> String {
        // Every field is plain data: serialising cannot fail.
        toml::to_string(self).expect("cost profile serialises")
    }

    /// The cell of (scheduler, level, workload), if measured.
    pub fn cell(&self, s: Scheduler, l: Level, w: Workload) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.scheduler == s && c.level == l && c.workload == w)
    }

    /// The scheduler whose cells price a device running `scheduler`: itself where the
    /// profile measured it, else the profile's first (the 2008 thread measured deadline
    /// only; an unknown scheduler is None). The one matching rule of the daemon's table
    /// (`Worth::from_profile`) and the simulator's step costs (`sim::cost`).
    pub fn priced_scheduler(&self, scheduler: Option<Scheduler>) -> Scheduler {
        match scheduler {
            Some(s) if self.schedulers.contains(&s) => s,
            _ => self.schedulers[0],
        }
    }

    /// The cell that prices `level` on a device running `scheduler`: the matched
    /// scheduler's ([`CostProfile::priced_scheduler`]) under [`PRICED_WORKLOAD`].
    pub fn priced_cell(&self, scheduler: Option<Scheduler>, level: Level) -> Option<&Cell> {
        self.cell(self.priced_scheduler(scheduler), level, PRICED_WORKLOAD)
    }

    /// Checks what the simulator and the reports rely on; the error names the key.
    pub fn validate(&self) -> Result<(), ProfileError> {
        self.check_header()?;
        let measured = self.method == Method::CpuBoundLoop;
        for (i, c) in self.cells.iter().enumerate() {
            self.check_cell(i, c, measured)?;
        }
        for (i, c) in self.merge_path.iter().enumerate() {
            self.check_merge_path_cell(i, c)?;
        }
        if self.method == Method::MergePathSampling {
            if self.merge_path.is_empty() {
                return Err(bad("merge_path", "a sampled profile has at least one cell"));
            }
            return Ok(());
        }
        // The simulator derives step costs from random unbatched I/O at every level.
        for s in &self.schedulers {
            if self
                .cell(*s, Level::L0, Workload::RandomUnbatched)
                .is_none()
            {
                return Err(bad(
                    "cell",
                    format!("{s} has no L0 random-unbatched cell (the simulator's reference)"),
                ));
            }
        }
        if let Some(t) = &self.toggle {
            self.check_toggle(t, measured)?;
        }
        Ok(())
    }

    /// The profile's own fields: name, kernel, schedulers, repetitions, coverage, noise.
    fn check_header(&self) -> Result<(), ProfileError> {
        if self.name.trim().is_empty() {
            return Err(bad("name", "must not be empty"));
        }
        if self.kernel_release.trim().is_empty() {
            return Err(bad("kernel_release", "must not be empty"));
        }
        if self.schedulers.is_empty() {
            return Err(bad("schedulers", "at least one scheduler"));
        }
        for (i, s) in self.schedulers.iter().enumerate() {
            if self.schedulers[..i].contains(s) {
                return Err(bad("schedulers", format!("{s} listed twice")));
            }
        }
        if self.reps == 0 {
            return Err(bad("reps", "must be at least 1"));
        }
        if !(self.duration_s.is_finite() && self.duration_s >= 0.0) {
            return Err(bad("duration_s", "must be a finite number >= 0"));
        }
        if !(0.0..=100.0).contains(&self.ci_coverage_percent) {
            return Err(bad("ci_coverage_percent", "must be in 0..=100"));
        }
        if !(self.noise_percent.is_finite() && self.noise_percent >= 0.0) {
            return Err(bad("noise_percent", "must be a finite number >= 0"));
        }
        if self.method == Method::CpuBoundLoop && self.unit != Unit::Ns {
            return Err(bad("unit", "a measured profile is in ns"));
        }
        Ok(())
    }

    /// One measured cell: its scheduler and level exist, it is measured once, and every
    /// figure is finite with an interval that holds it (a measured profile's must have one).
    fn check_cell(&self, i: usize, c: &Cell, measured: bool) -> Result<(), ProfileError> {
        let k = |f: &str| format!("cell[{i}].{f}");
        if !self.schedulers.contains(&c.scheduler) {
            return Err(bad(
                k("scheduler"),
                format!("{} is not in `schedulers`", c.scheduler),
            ));
        }
        if !crate::tuners::profile_levels(c.scheduler).contains(&c.level) {
            return Err(bad(
                k("level"),
                format!(
                    "{} has no {} (front_merges is mq-deadline's)",
                    c.scheduler, c.level
                ),
            ));
        }
        if self.cells[..i]
            .iter()
            .any(|o| (o.scheduler, o.level, o.workload) == (c.scheduler, c.level, c.workload))
        {
            return Err(bad(
                k("workload"),
                format!("{} {} {} measured twice", c.scheduler, c.level, c.workload),
            ));
        }
        if !(c.cpu_per_io.is_finite() && c.cpu_per_io > 0.0) {
            return Err(bad(k("cpu_per_io"), "must be a finite number > 0"));
        }
        check_ci(k("cpu_per_io_ci"), c.cpu_per_io, c.cpu_per_io_ci)?;
        if let Some(v) = c.submitter_cpu_per_io {
            check_ci(k("submitter_cpu_per_io_ci"), v, c.submitter_cpu_per_io_ci)?;
        }
        if let Some(v) = c.submitter_change_percent {
            check_ci(k("submitter_change_ci"), v, c.submitter_change_ci)?;
        }
        if measured && c.cpu_per_io_ci.is_none() {
            return Err(bad(
                k("cpu_per_io_ci"),
                "a measured cell needs its interval",
            ));
        }
        if !(0.0..=100.0).contains(&c.merged_percent) {
            return Err(bad(k("merged_percent"), "must be in 0..=100"));
        }
        for (f, v) in [
            ("system_cpu_per_io", c.system_cpu_per_io),
            ("iops", c.iops),
            ("p99_us", c.p99_us),
        ] {
            if let Some(x) = v
                && !(x.is_finite() && x >= 0.0)
            {
                return Err(bad(k(f), "must be a finite number >= 0"));
            }
        }
        match (c.level, c.change_percent) {
            (Level::L0, Some(_)) => {
                return Err(bad(k("change_percent"), "L0 is the reference: no change"));
            }
            (Level::L0, None) => {}
            (_, None) => return Err(bad(k("change_percent"), "needed above L0")),
            (_, Some(ch)) => {
                if !(ch.is_finite() && ch > -100.0) {
                    return Err(bad(k("change_percent"), "must be finite and > -100"));
                }
                check_ci(k("change_ci"), ch, c.change_ci)?;
                if measured && c.change_ci.is_none() {
                    return Err(bad(k("change_ci"), "a measured change needs its interval"));
                }
            }
        }
        Ok(())
    }

    /// One merge-path cell: its scheduler exists and each ns-per-bio figure is finite,
    /// inside its interval.
    fn check_merge_path_cell(&self, i: usize, c: &MergePathCell) -> Result<(), ProfileError> {
        let k = |f: &str| format!("merge_path[{i}].{f}");
        if !self.schedulers.contains(&c.scheduler) {
            return Err(bad(
                k("scheduler"),
                format!("{} is not in `schedulers`", c.scheduler),
            ));
        }
        for (f, v, ci) in [
            ("l3_ns_per_bio", c.l3_ns_per_bio, c.l3_ci),
            ("l2_ns_per_bio", c.l2_ns_per_bio, c.l2_ci),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(bad(k(f), "must be a finite number >= 0"));
            }
            let [lo, hi] = ci;
            if !(lo.is_finite() && hi.is_finite() && lo <= v && v <= hi) {
                return Err(bad(k(f), "its interval must hold it: lo <= value <= hi"));
            }
        }
        if c.submitters == 0 {
            return Err(bad(k("submitters"), "must be at least 1"));
        }
        Ok(())
    }

    /// The toggle measurement: figures finite, intervals holding their medians.
    fn check_toggle(&self, t: &ToggleCost, measured: bool) -> Result<(), ProfileError> {
        if !self.schedulers.contains(&t.scheduler) && measured {
            return Err(bad("toggle.scheduler", "not in `schedulers`"));
        }
        if t.interval_ms == 0 || t.reps == 0 {
            return Err(bad("toggle", "interval_ms and reps must be at least 1"));
        }
        for (f, v) in [
            ("write_us_median", t.write_us_median),
            ("write_us_max", t.write_us_max),
            ("p99_us_without", t.p99_us_without),
            ("p99_us_with", t.p99_us_with),
            ("max_us_without", t.max_us_without),
            ("max_us_with", t.max_us_with),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(bad(format!("toggle.{f}"), "must be a finite number >= 0"));
            }
        }
        if t.write_us_median > t.write_us_max {
            return Err(bad("toggle.write_us_median", "exceeds write_us_max"));
        }
        check_ci(
            "toggle.p99_change_ci".into(),
            t.p99_change_percent,
            Some(t.p99_change_ci),
        )?;
        check_ci(
            "toggle.max_change_ci".into(),
            t.max_change_percent,
            Some(t.max_change_ci),
        )?;
        check_ci(
            "toggle.iops_change_ci".into(),
            t.iops_change_percent,
            Some(t.iops_change_ci),
        )?;
        Ok(())
    }

    /// A table of the cells for humans: per scheduler, workload and level.
    pub fn render(&self) -> String {
        if self.method == Method::MergePathSampling {
            return self.render_merge_path();
        }
        let unit = match self.unit {
            Unit::Ns => "ns",
            Unit::ModelCycles => "cycles",
        };
        let mut s = format!(
            "cost profile {} ({}; kernel {}; {} reps, intervals {:.1}%, noise {:.1}%)\n",
            self.name,
            match self.method {
                Method::CpuBoundLoop => "measured",
                Method::Stated => "stated",
                Method::MergePathSampling => "sampled",
            },
            self.kernel_release,
            self.reps,
            self.ci_coverage_percent,
            self.noise_percent
        );
        s.push_str(&format!(
            "  {:<12} {:<21} {:<3} {:>11} {:>21} {:>9} {:>8} {:>7} {:>8} {:>17}  {:<24} {:>9} {:>17}\n",
            "scheduler",
            "workload",
            "lvl",
            format!("CPU {unit}/io"),
            "interval",
            "IOPS",
            "p99 us",
            "merged%",
            "vs L0 %",
            "interval",
            "verdict",
            "fio vs L0",
            "interval"
        ));
        let mut cells: Vec<&Cell> = self.cells.iter().collect();
        cells.sort_by_key(|c| (c.scheduler, c.workload, c.level));
        for c in cells {
            s.push_str(&cell_row(c));
        }
        if let Some(t) = &self.toggle {
            s.push_str(&toggle_line(t));
        }
        s
    }
}

/// One cell's row of [`CostProfile::render`]'s table.
fn cell_row(c: &Cell) -> String {
    let ci = or_dash(c.cpu_per_io_ci.map(|[a, b]| format!("[{a:.0}, {b:.0}]")));
    format!(
        "  {:<12} {:<21} {:<3} {:>11.0} {:>21} {:>9} {:>8} {:>7.1} {:>8} {:>17}  {:<24} {:>9} {:>17}\n",
        c.scheduler.name(),
        c.workload,
        c.level.to_string(),
        c.cpu_per_io,
        ci,
        or_dash(c.iops.map(|x| format!("{x:.0}"))),
        or_dash(c.p99_us.map(|x| format!("{x:.0}"))),
        c.merged_percent,
        signed(c.change_percent),
        signed_ci(c.change_ci),
        c.verdict().map(|v| v.to_string()).unwrap_or_default(),
        signed(c.submitter_change_percent),
        signed_ci(c.submitter_change_ci)
    )
}

/// A table cell, "-" where there is no figure.
fn or_dash(x: Option<String>) -> String {
    x.unwrap_or_else(|| "-".into())
}

/// A change in percent, with its sign.
fn signed(x: Option<f64>) -> String {
    or_dash(x.map(|x| format!("{x:+.1}")))
}

/// A change's interval, with the signs.
fn signed_ci(ci: Option<[f64; 2]>) -> String {
    or_dash(ci.map(|[a, b]| format!("[{a:+.1}, {b:+.1}]")))
}

/// The toggle measurement's line of [`CostProfile::render`].
fn toggle_line(t: &ToggleCost) -> String {
    format!(
        "  toggle ({}, a nomerges write every {} ms, {:.0} s runs, {} pairs): write {:.0} us median, {:.0} us max; \
         p99 {:.0} -> {:.0} us ({:+.1}% [{:+.1}, {:+.1}]); max {:.0} -> {:.0} us ({:+.1}% [{:+.1}, {:+.1}]); \
         IOPS {:+.1}% [{:+.1}, {:+.1}]\n",
        t.scheduler,
        t.interval_ms,
        t.runtime_s,
        t.reps,
        t.write_us_median,
        t.write_us_max,
        t.p99_us_without,
        t.p99_us_with,
        t.p99_change_percent,
        t.p99_change_ci[0],
        t.p99_change_ci[1],
        t.max_us_without,
        t.max_us_with,
        t.max_change_percent,
        t.max_change_ci[0],
        t.max_change_ci[1],
        t.iops_change_percent,
        t.iops_change_ci[0],
        t.iops_change_ci[1],
    )
}
