//! `/status`: the daemon's per-device state as JSON, and the client `mergetune status`
//! fetches it with (the table it prints is [`crate::table`]'s).
//!
//! The document is built from the daemon's [`DaemonSnapshot`] by
//! [`crate::metrics::Metrics::update`] after each tick; the client
//! here is a few lines over a plain TCP stream (the endpoint speaks HTTP/1.1 with a
//! `Content-Length`, never chunked), so the CLI needs no HTTP client library. A field
//! added since the first version is an `Option` (or has a default), so that a document from
//! an older daemon, which lacks it, still reads.

use mergetune_daemon::snapshot::{DaemonSnapshot, PricingSnapshot, TickTiming};
use mergetune_kernel::scheduler::Reported;
use mergetune_logic::decision::{Applied, Change, DecisionKind, Level, level_index};
use mergetune_logic::devices::Management;
use mergetune_logic::policy::Mode;
use mergetune_logic::pricing::floor::SavingFloor;
use mergetune_logic::pricing::profile::Verdict;
use mergetune_logic::pricing::worth::{Basis, SavingUnit, UnknownWhy, Worth};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The `/status` document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusSnapshot {
    pub version: String,
    pub dry_run: bool,
    /// Served by `mergetune simulate`: the devices are the simulator's (absent otherwise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub simulated: bool,
    pub policy_enabled: bool,
    pub interval_ms: u64,
    /// Time since the daemon started, in seconds (virtual time under the simulator).
    pub uptime_secs: f64,
    pub ticks: u64,
    pub last_tick_duration_ms: f64,
    /// The latest any tick started against its schedule since the daemon started.
    pub max_tick_lag_ms: f64,
    pub write_errors: u64,
    /// What prices a step down (absent from a daemon older than this field).
    pub pricing: Option<PricingStatus>,
    pub devices: Vec<DeviceStatus>,
}

/// What prices every device's step down: the live measurement or a cost profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PricingStatus {
    /// `"live"`, or the profile's name.
    pub profile: String,
    /// "measured on this host", "built-in, measured on kernel ...", or the profile's path.
    pub origin: String,
    /// The bar a live saving's lower bound must reach, CPU ms per second.
    pub floor_ms_per_sec: f64,
    /// Under live pricing, why the merge-path sampler cannot run here, with the fix
    /// (absent while it can).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler_unavailable: Option<String>,
    /// The `[pricing] fallback_profile` that prices the devices meanwhile (absent when
    /// none does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_profile: Option<String>,
}

/// One device of the `/status` document. Typed as the daemon holds it, so the client's
/// table renders from the same values and never re-reads a string the daemon built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceStatus {
    pub device: String,
    /// The active I/O scheduler as the kernel names it; `-` in the document when the
    /// device has none.
    #[serde(with = "scheduler_or_dash")]
    pub scheduler: Option<Reported>,
    /// `"status"`: managed, excluded, unsupported or admin-owned; `"why"`: the reason it is
    /// not managed (absent when managed).
    #[serde(flatten)]
    pub management: Management,
    /// The policy mode (merging, off, probing, trial), for managed devices.
    pub mode: Option<Mode>,
    /// The merge-ladder level as its index (0 all merges ... 3 none), for managed devices.
    #[serde(with = "level_index::option")]
    pub level: Option<Level>,
    /// nomerges when mergetune first saw the device.
    pub original_nomerges: Option<String>,
    /// nomerges now, as mergetune last read or wrote it.
    pub nomerges: Option<String>,
    /// Over the last tick.
    pub bios_per_sec: Option<f64>,
    pub read_merge_percent: Option<f64>,
    pub write_merge_percent: Option<f64>,
    /// The policy's latest note for the device (why it holds, or what it did).
    pub last_reason: String,
    pub last_decision: Option<DecisionStatus>,
    /// Seconds until the next probe, when merging is off and a probe is scheduled.
    pub next_probe_in_secs: Option<f64>,
    /// What the next step down would save and what priced it (managed devices; absent
    /// from a daemon older than this field).
    pub pricing: Option<DevicePricing>,
    /// Level changes in the last hour, counted toward `[policy] max_changes_per_hour`
    /// (managed devices; absent from a daemon older than this field).
    pub changes_last_hour: Option<u32>,
    /// The changes in the last hour reach the cap: steps down are refused.
    #[serde(default)]
    pub change_cap_reached: bool,
    /// A loop device re-attached to the same backing file: mergetune's records of it are
    /// kept, though a value equal to mergetune's may be an operator's (absent when not).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reattached: bool,
}

/// How a device's saving is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PricingBasis {
    /// Measured on this host by the merge-path sampler.
    Live,
    /// A cost profile that applies here: the same kernel series, and the same kind of
    /// device where the profile names one.
    Profile,
    /// Nothing to price with: see `why`.
    Unknown,
    /// No pricing at all (every step is taken as worth it).
    Unpriced,
}

/// Why a device's saving is unknown (the daemon's `UnknownWhy`, as `/status` carries it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownReason {
    NotMeasuredYet,
    /// Sampled, but not yet the samples a price needs (`why_text` says how many).
    Measuring,
    /// Priced under another workload shape than the device runs now.
    OtherWorkload,
    /// Sampled, but its samples cannot be told apart from another device's.
    Unattributed,
    NoSampler,
    NoMatchingProfile,
}

impl UnknownReason {
    pub const ALL: [UnknownReason; 6] = [
        UnknownReason::NotMeasuredYet,
        UnknownReason::Measuring,
        UnknownReason::OtherWorkload,
        UnknownReason::Unattributed,
        UnknownReason::NoSampler,
        UnknownReason::NoMatchingProfile,
    ];

    /// Its name as `/status` writes it, for the metric's `why` label.
    pub fn label(self) -> &'static str {
        match self {
            UnknownReason::NotMeasuredYet => "not_measured_yet",
            UnknownReason::Measuring => "measuring",
            UnknownReason::OtherWorkload => "other_workload",
            UnknownReason::Unattributed => "unattributed",
            UnknownReason::NoSampler => "no_sampler",
            UnknownReason::NoMatchingProfile => "no_matching_profile",
        }
    }

    pub(crate) fn of(why: UnknownWhy) -> UnknownReason {
        match why {
            UnknownWhy::NotMeasuredYet => UnknownReason::NotMeasuredYet,
            UnknownWhy::Measuring { .. } => UnknownReason::Measuring,
            UnknownWhy::OtherWorkload => UnknownReason::OtherWorkload,
            UnknownWhy::Unattributed { .. } => UnknownReason::Unattributed,
            UnknownWhy::NoSampler => UnknownReason::NoSampler,
            UnknownWhy::NoMatchingProfile => UnknownReason::NoMatchingProfile,
        }
    }

    /// A few words, for the table's cell.
    pub fn short(self) -> &'static str {
        match self {
            UnknownReason::NotMeasuredYet => "not measured yet",
            UnknownReason::Measuring => "being measured",
            UnknownReason::OtherWorkload => "priced for another workload",
            UnknownReason::Unattributed => "samples shared with another device",
            UnknownReason::NoSampler => "no sampler here",
            UnknownReason::NoMatchingProfile => "profile does not match",
        }
    }
}

/// What a saving is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepSavingUnit {
    /// CPU ms per second saved on this device (live; positive saves).
    CpuMsPerSec,
    /// Change of CPU per I/O against L0, percent (a profile; negative is cheaper).
    PercentPerIo,
}

/// Whether a step's saving clears the bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepVerdict {
    Saves,
    Costs,
    NoMeasurableDifference,
}

/// The saving of one step down, with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepSaving {
    pub value: f64,
    /// The interval's bounds (absent for stated figures), at `coverage_percent`.
    pub lo: Option<f64>,
    pub hi: Option<f64>,
    pub coverage_percent: f64,
    pub unit: StepSavingUnit,
    pub verdict: StepVerdict,
}

/// A device's pricing in `/status`: the basis, the profile's name, and the saving of the
/// next step down (the level below the device's; at L3, L3's own) with the floor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DevicePricing {
    pub basis: PricingBasis,
    /// `"live"` or the profile's name.
    pub profile: String,
    /// The level priced.
    #[serde(with = "level_index::option", default)]
    pub step: Option<Level>,
    /// Absent where the step is not priced (not measured, or unknown).
    pub saving: Option<StepSaving>,
    /// Live pricing: the bar, CPU ms per second.
    pub floor_ms_per_sec: Option<f64>,
    /// Unknown: why, as a code and in words.
    pub why: Option<UnknownReason>,
    pub why_text: Option<String>,
}

/// `95%`, `89.1%`: a coverage as printed next to an interval.
pub fn coverage(percent: f64) -> String {
    let s = format!("{percent:.1}");
    format!("{}%", s.strip_suffix(".0").unwrap_or(&s))
}

impl PricingStatus {
    /// The daemon's pricing as `/status` carries it.
    pub fn of(p: &PricingSnapshot) -> PricingStatus {
        PricingStatus {
            profile: p.name.clone(),
            origin: p.origin.clone(),
            floor_ms_per_sec: p.floor.ms_per_sec(),
            sampler_unavailable: p.sampler_unavailable.clone(),
            fallback_profile: p.fallback.clone(),
        }
    }
}

impl DevicePricing {
    /// The pricing of a managed device at `level`, priced by `profile` (the daemon's
    /// pricing name) with the live `saving_floor`.
    pub fn of(
        worth: &Worth,
        level: Level,
        profile: &str,
        saving_floor: SavingFloor,
    ) -> DevicePricing {
        let step = level.below().unwrap_or(level);
        let live = profile == mergetune_logic::pricing::profile::LIVE;
        let (basis, floor, why) = match worth.basis {
            Basis::Live { floor } => (PricingBasis::Live, Some(floor.ms_per_sec()), None),
            Basis::Profile => (PricingBasis::Profile, None, None),
            Basis::Unknown { why } => (
                PricingBasis::Unknown,
                live.then_some(saving_floor.ms_per_sec()),
                Some(UnknownReason::of(why)),
            ),
            Basis::Unpriced => (PricingBasis::Unpriced, None, None),
        };
        let saving = worth.saving(step).map(|s| StepSaving {
            value: s.value,
            lo: s.ci.map(|c| c[0]),
            hi: s.ci.map(|c| c[1]),
            coverage_percent: worth.coverage_percent,
            unit: match s.unit {
                SavingUnit::CpuMsPerSec => StepSavingUnit::CpuMsPerSec,
                SavingUnit::PercentPerIo => StepSavingUnit::PercentPerIo,
            },
            verdict: match s.verdict {
                Verdict::Saves => StepVerdict::Saves,
                Verdict::Costs => StepVerdict::Costs,
                Verdict::NoMeasurableDifference => StepVerdict::NoMeasurableDifference,
            },
        });
        DevicePricing {
            basis,
            profile: profile.to_string(),
            step: Some(step),
            saving,
            floor_ms_per_sec: floor,
            why,
            why_text: why.map(|_| {
                let d = worth.describe(std::iter::empty());
                d.strip_prefix("saving unknown: ").unwrap_or(&d).to_string()
            }),
        }
    }

    /// `L3 0.41 [0.20, 0.75] (95%)` (ms/s) or `L3 -6.1% [-25.6, +17.5] (89%) CPU/IO`.
    fn saving_text(&self) -> Option<String> {
        let s = self.saving?;
        let step = self.step.map(|l| format!("{l} ")).unwrap_or_default();
        let interval = match (s.lo, s.hi) {
            (Some(lo), Some(hi)) => match s.unit {
                StepSavingUnit::CpuMsPerSec => {
                    format!(" [{lo:.2}, {hi:.2}] ({})", coverage(s.coverage_percent))
                }
                StepSavingUnit::PercentPerIo => {
                    format!(" [{lo:+.1}, {hi:+.1}] ({})", coverage(s.coverage_percent))
                }
            },
            _ => " (stated, no interval)".into(),
        };
        Some(match s.unit {
            StepSavingUnit::CpuMsPerSec => format!("{step}{:.2}{interval}", s.value),
            StepSavingUnit::PercentPerIo => format!("{step}{:+.1}%{interval} CPU/IO", s.value),
        })
    }

    /// The status table's cell: `live: L3 0.41 [0.20, 0.75] (95%) / 5.00 ms/s`,
    /// `measured-6.18: L3 -6.1% [-25.6, +17.5] (89%) CPU/IO`, `live: unknown: not
    /// measured yet / 5.00 ms/s`.
    pub fn cell(&self) -> String {
        let body = match (self.basis, self.why) {
            (PricingBasis::Unpriced, _) => "unpriced".to_string(),
            (_, Some(why)) => format!("unknown: {}", why.short()),
            _ => self.saving_text().unwrap_or_else(|| {
                let step = self.step.map(|l| format!("{l} ")).unwrap_or_default();
                format!("{step}not measured")
            }),
        };
        let floor = self
            .floor_ms_per_sec
            .map(|f| format!(" / {f:.2} ms/s"))
            .unwrap_or_default();
        format!("{}: {body}{floor}", self.profile)
    }

    /// The startup log's words: "measured live, floor 5.00 ms/s; not measured yet",
    /// "profile measured-6.18 matches; L3 -6.1% ...", "profile X does not match ...".
    pub fn sentence(&self) -> String {
        let saving = self.saving_text();
        let head = match (self.basis, self.why) {
            (PricingBasis::Unpriced, _) => {
                return "unpriced: every step is taken as worth it".into();
            }
            (PricingBasis::Live, _)
            | (
                PricingBasis::Unknown,
                Some(
                    UnknownReason::NotMeasuredYet
                    | UnknownReason::Measuring
                    | UnknownReason::OtherWorkload
                    | UnknownReason::NoSampler,
                ),
            ) => format!(
                "measured live, floor {:.2} ms/s",
                self.floor_ms_per_sec.unwrap_or(0.0)
            ),
            // Stated figures (no interval) are a model named on purpose, not a measurement
            // of a kernel: they apply anywhere, and the line says so.
            (PricingBasis::Profile, _) if self.saving.is_some_and(|s| s.lo.is_none()) => {
                format!(
                    "profile {} (stated figures, applied on any kernel)",
                    self.profile
                )
            }
            (PricingBasis::Profile, _) => {
                format!(
                    "profile {} applies here (same kernel series; the device kind too where the profile names one)",
                    self.profile
                )
            }
            (_, _) => format!(
                "profile {} does not match this kernel or device: saving unknown, merging stays on",
                self.profile
            ),
        };
        match (saving, &self.why_text) {
            (Some(s), _) => format!("{head}; {s}"),
            (None, Some(w)) if self.why != Some(UnknownReason::NoMatchingProfile) => {
                format!("{head}; {w}")
            }
            _ => head,
        }
    }
}

/// `scheduler` in the document: the name the kernel gave, `-` for a device without one.
mod scheduler_or_dash {
    use mergetune_kernel::scheduler::Reported;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(s: &Option<Reported>, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_str(s.as_ref().map_or("-", Reported::name))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Reported>, D::Error> {
        let name = String::deserialize(d)?;
        Ok((name != "-").then(|| Reported::from(name)))
    }
}

impl DeviceStatus {
    /// A device with nothing known yet but its name and management (tests build rows
    /// from it).
    pub fn new(device: &str, management: Management) -> DeviceStatus {
        DeviceStatus {
            device: device.to_string(),
            scheduler: None,
            management,
            mode: None,
            level: None,
            original_nomerges: None,
            nomerges: None,
            bios_per_sec: None,
            read_merge_percent: None,
            write_merge_percent: None,
            last_reason: String::new(),
            last_decision: None,
            next_probe_in_secs: None,
            pricing: None,
            changes_last_hour: None,
            change_cap_reached: false,
            reattached: false,
        }
    }
}

/// A device's last decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionStatus {
    pub at_ms: u64,
    pub ago_secs: f64,
    pub kind: DecisionKind,
    pub changes: Vec<Change>,
    pub reason: String,
    pub applied: Applied,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

impl StatusSnapshot {
    /// The `/status` document of the daemon's snapshot taken at `t.now_ms`.
    pub fn of(daemon: &DaemonSnapshot, t: TickTiming, max_lag_seconds: f64) -> StatusSnapshot {
        let devices = daemon
            .devices
            .iter()
            .map(|d| {
                // Rates and merge shares over the last tick alone.
                let tick = d.last_tick;
                DeviceStatus {
                    device: d.name.clone(),
                    scheduler: d.scheduler.clone(),
                    management: d.management.clone(),
                    mode: d.mode,
                    level: d.level,
                    original_nomerges: d.original_nomerges.clone(),
                    nomerges: d.nomerges.clone(),
                    bios_per_sec: tick.map(|w| w.bios_per_sec().round()),
                    read_merge_percent: tick
                        .filter(|w| w.counters.read_bios() > 0)
                        .map(|w| round1(w.counters.read_merge_ratio() * 100.0)),
                    write_merge_percent: tick
                        .filter(|w| w.counters.write_bios() > 0)
                        .map(|w| round1(w.counters.write_merge_ratio() * 100.0)),
                    last_reason: d.last_reason.to_string(),
                    last_decision: d.last_decision.as_ref().map(|x| DecisionStatus {
                        at_ms: x.at_ms,
                        ago_secs: round3(t.now_ms.saturating_sub(x.at_ms) as f64 / 1000.0),
                        kind: x.kind,
                        changes: x.changes.clone(),
                        reason: x.reason.clone(),
                        applied: x.applied.clone(),
                    }),
                    next_probe_in_secs: d
                        .next_probe_at_ms
                        .map(|at| round3(at.saturating_sub(t.now_ms) as f64 / 1000.0)),
                    pricing: d.worth.as_ref().zip(d.level).map(|(w, l)| {
                        DevicePricing::of(w, l, daemon.pricing.name_of(w), daemon.pricing.floor)
                    }),
                    changes_last_hour: d.changes_last_hour,
                    change_cap_reached: d
                        .changes_last_hour
                        .is_some_and(|n| n >= daemon.max_changes_per_hour),
                    reattached: d.reattached,
                }
            })
            .collect();
        StatusSnapshot {
            version: env!("CARGO_PKG_VERSION").to_string(),
            dry_run: daemon.dry_run,
            simulated: false,
            policy_enabled: daemon.policy_enabled,
            interval_ms: daemon.interval_ms,
            uptime_secs: round3(t.now_ms as f64 / 1000.0),
            ticks: daemon.counters.ticks,
            last_tick_duration_ms: round3(t.duration_seconds * 1000.0),
            max_tick_lag_ms: round3(max_lag_seconds * 1000.0),
            write_errors: daemon.counters.write_errors,
            pricing: (!daemon.pricing.name.is_empty()).then(|| PricingStatus::of(&daemon.pricing)),
            devices,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// Nothing answers at the address: the daemon is not running there (`mergetune status`
    /// exits 3 on it).
    #[error(
        "{addr}: cannot connect: {source} (is mergetune running with [metrics] listen = \"{addr}\"?)"
    )]
    NotRunning {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{addr}: {message}")]
    Connect { addr: String, message: String },
    #[error("{addr}: bad response: {message}")]
    Response { addr: String, message: String },
}

/// The largest answer read: a status document of 64 devices is about 60 KiB.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// Fetches `path` from `addr` (host:port) with one HTTP/1.1 GET; returns the body of a 200.
/// `timeout` bounds the whole exchange, connect to last byte: a peer that trickles one byte
/// a second cannot hold the caller longer (a per-read timeout never fires on it).
pub fn http_get(addr: &str, path: &str, timeout: Duration) -> Result<Vec<u8>, StatusError> {
    let deadline = std::time::Instant::now() + timeout;
    let conn_err = |message: String| StatusError::Connect {
        addr: addr.to_string(),
        message,
    };
    let resp_err = |message: String| StatusError::Response {
        addr: addr.to_string(),
        message,
    };
    let sock = addr
        .to_socket_addrs()
        .map_err(|e| conn_err(format!("cannot resolve: {e}")))?
        .next()
        .ok_or_else(|| conn_err("resolves to no address".into()))?;
    let mut s =
        TcpStream::connect_timeout(&sock, timeout).map_err(|source| StatusError::NotRunning {
            addr: addr.to_string(),
            source,
        })?;
    let left = || {
        deadline
            .saturating_duration_since(std::time::Instant::now())
            .max(Duration::from_millis(1))
    };
    s.set_write_timeout(Some(left())).ok();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: mergetune/{}\r\nConnection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION")
    )
    .map_err(|e| conn_err(format!("cannot send: {e}")))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if std::time::Instant::now() >= deadline {
            return Err(conn_err(format!(
                "no complete answer within {:.1} s",
                timeout.as_secs_f64()
            )));
        }
        s.set_read_timeout(Some(left())).ok();
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > MAX_RESPONSE_BYTES {
                    return Err(resp_err(format!("larger than {MAX_RESPONSE_BYTES} bytes")));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(conn_err(format!(
                    "no complete answer within {:.1} s",
                    timeout.as_secs_f64()
                )));
            }
            Err(e) => return Err(conn_err(format!("cannot read: {e}"))),
        }
    }
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| resp_err("no end of headers".into()))?;
    let head = String::from_utf8_lossy(&buf[..split]);
    let status_line = head.lines().next().unwrap_or("");
    let code = status_line.split(' ').nth(1).unwrap_or("");
    if code != "200" {
        return Err(resp_err(format!("{status_line:?} for {path}")));
    }
    Ok(buf[split + 4..].to_vec())
}

/// Fetches and decodes `/status` from `addr`.
pub fn fetch(addr: &str, timeout: Duration) -> Result<StatusSnapshot, StatusError> {
    let body = http_get(addr, "/status", timeout)?;
    serde_json::from_slice(&body).map_err(|e| StatusError::Response {
        addr: addr.to_string(),
        message: format!("/status is not a mergetune status document: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mergetune_kernel::scheduler::Scheduler;
    use mergetune_logic::pricing::worth::Saving;

    fn live_worth() -> Worth {
        let mut levels = [None; 4];
        levels[1] = Some(Saving {
            value: 12.7,
            ci: Some([9.8, 15.6]),
            unit: SavingUnit::CpuMsPerSec,
            verdict: Verdict::Saves,
        });
        let floor = SavingFloor::from_percent_cpu(0.5);
        Worth::live(floor, Some(Scheduler::MqDeadline), levels, 95.0)
    }

    #[test]
    fn a_live_saving_shows_its_interval_coverage_and_floor() {
        let p = DevicePricing::of(
            &live_worth(),
            Level::L0,
            "live",
            SavingFloor::from_percent_cpu(0.5),
        );
        assert_eq!(p.basis, PricingBasis::Live);
        assert_eq!(p.step, Some(Level::L1));
        assert_eq!(p.cell(), "live: L1 12.70 [9.80, 15.60] (95%) / 5.00 ms/s");
        assert_eq!(
            p.sentence(),
            "measured live, floor 5.00 ms/s; L1 12.70 [9.80, 15.60] (95%)"
        );
        // At L1 the next step is L2, which is not priced here: said, with the floor.
        let p = DevicePricing::of(
            &live_worth(),
            Level::L1,
            "live",
            SavingFloor::from_percent_cpu(0.5),
        );
        assert_eq!(p.cell(), "live: L2 not measured / 5.00 ms/s");
    }

    #[test]
    fn coverage_is_printed_as_measured() {
        assert_eq!(coverage(95.0), "95%");
        assert_eq!(coverage(97.9), "97.9%");
        assert_eq!(coverage(89.06), "89.1%");
    }

    #[test]
    fn a_document_from_a_daemon_older_than_the_pricing_fields_still_reads() {
        let mut dev = DeviceStatus::new("sda", Management::Managed);
        dev.changes_last_hour = Some(2);
        let doc = StatusSnapshot {
            devices: vec![dev],
            ..Default::default()
        };
        let mut old = serde_json::to_value(&doc).unwrap();
        old.as_object_mut().unwrap().remove("pricing");
        let row = old["devices"][0].as_object_mut().unwrap();
        assert!(row.remove("pricing").is_some() && row.remove("changes_last_hour").is_some());
        let read: StatusSnapshot = serde_json::from_value(old).unwrap();
        assert_eq!(read.pricing, None);
        assert_eq!(read.devices[0].changes_last_hour, None);
        assert_eq!(read.devices[0].device, "sda");
    }

    #[test]
    fn an_unknown_reasons_label_is_its_status_name() {
        for r in UnknownReason::ALL {
            assert_eq!(
                serde_json::to_string(&r).unwrap(),
                format!("\"{}\"", r.label())
            );
        }
    }

    #[test]
    fn nothing_at_the_address_is_not_running_with_the_connect_error_kept() {
        // A port just given up: nothing listens there.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        let e = http_get(&addr, "/status", Duration::from_secs(5)).unwrap_err();
        let StatusError::NotRunning { source, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(source.kind(), std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            e.to_string(),
            format!(
                "{addr}: cannot connect: {source} (is mergetune running with [metrics] listen = \"{addr}\"?)"
            )
        );
    }
}
