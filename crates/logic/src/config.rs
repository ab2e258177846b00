//! Configuration: TOML, every key with a named default, unknown keys rejected, and a pure
//! [`Config::validate`] that names the offending key. Loading is the only I/O here and
//! lives in [`load_file`] (through the bounded reader of `kernel::userfile`); everything
//! else works on strings so tests need no files. A load reports every problem at once, each
//! at `FILE:LINE:COLUMN`, and never quotes the file (it may not be a config at all).

use crate::document::DocumentError;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub const DEFAULT_CONFIG_PATH: &str = "/etc/mergetune/mergetune.toml";

/// A configuration error; every variant names the file or the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (missing, not a regular file, too large); the error
    /// names the path.
    #[error("{error}")]
    File {
        path: PathBuf,
        error: mergetune_kernel::userfile::UserFileError,
    },
    /// The file holds nothing but white space: an editor or a tool may have truncated it
    /// before writing it, and the built-in defaults manage every disk (`include = ["*"]`),
    /// so it is refused, at start and at a reload alike (docs/configuration.md).
    #[error(
        "{}: holds no settings ({bytes} bytes, nothing but white space): refused, since a file being rewritten looks like this and the built-in defaults would manage every disk (include = [\"*\"]); for the defaults, put a comment in it (`# built-in defaults`) or use --config /dev/null",
        path.display()
    )]
    Empty { path: PathBuf, bytes: usize },
    /// The text is not a config, or a key's value is refused.
    #[error(transparent)]
    Document(#[from] DocumentError),
    /// Several keys are wrong: every one is listed.
    #[error("{origin}: {} errors:\n{}", errors.len(), errors.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))]
    Many {
        origin: String,
        errors: Vec<ConfigError>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub daemon: DaemonConfig,
    pub devices: DevicesConfig,
    pub policy: PolicyConfig,
    pub slices: SlicesConfig,
    pub metrics: MetricsConfig,
    /// The bio tap that keeps L3 from being blind (crates/logic/src/sense.rs).
    pub sense: crate::sense::SenseConfig,
    /// The live measurement of what merging costs (`pricing`).
    pub pricing: crate::pricing::config::PricingConfig,
}

pub(crate) mod checks;
mod slices;
mod values;
use checks::{Checks, Problems};
pub use slices::{DEFAULT_SLICES_ENABLED, SlicesConfig};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// Time between two samples of the counters, in milliseconds.
    pub interval_ms: u64,
    /// Where the state file with the original tunables lives.
    pub state_dir: PathBuf,
    /// How often the device list is rescanned for hot-plugged devices, in ticks.
    pub rescan_every_ticks: u32,
}

pub const DEFAULT_INTERVAL_MS: u64 = 1000;
pub const DEFAULT_STATE_DIR: &str = "/run/mergetune";
pub const DEFAULT_RESCAN_EVERY_TICKS: u32 = 30;
/// The shortest tick interval, in ms.
pub const MIN_INTERVAL_MS: u64 = 10;
/// The longest tick interval, in ms: an hour.
pub const MAX_INTERVAL_MS: u64 = 3_600_000;

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            interval_ms: DEFAULT_INTERVAL_MS,
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            rescan_every_ticks: DEFAULT_RESCAN_EVERY_TICKS,
        }
    }
}

use crate::devices::DevicesConfig;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// False: observe and log, never write (takes effect at once, also on SIGHUP).
    pub enabled: bool,
    /// Ticks aggregated into one decision window.
    pub window_ticks: u32,
    /// A window with fewer bios (completed + merged, both directions) decides nothing.
    pub min_window_bios: u64,
    /// Merge ratio (merged / bios) below which a window counts as "low", in percent.
    pub disable_below_percent: f64,
    /// Merge ratio at or above which merging is (re-)enabled, in percent. Must exceed
    /// `disable_below_percent`: the gap is the hysteresis band.
    pub enable_above_percent: f64,
    /// Consecutive low windows before one safe step down the merge ladder (L0 -> L1 no
    /// front merges, L1 -> L2 simple merges only): plug and one-hit merges stay, so
    /// sequential work keeps merging and stays visible. Where not one bio merged in this
    /// many windows at L0 and a bio tap watches L3, L0 goes straight to L3.
    pub step_down_after_windows: u32,
    /// Consecutive low windows at L2 before the last step, to L3 (no merges at all).
    pub disable_after_windows: u32,
    /// The deepest nomerges value the ladder may reach: 1 (stop at L2, simple merges only)
    /// or 2 (L3, no merges at all).
    pub disabled_nomerges: u8,
    /// Minimum time at L2 before the step to L3, in seconds (and before leaving a level
    /// reached by a probe). Never delays a step up.
    pub min_dwell_secs: u64,
    /// Time merging stays off before the first probe, in seconds.
    pub probe_initial_backoff_secs: u64,
    /// Upper bound of the probe backoff after repeated failed probes, in seconds.
    pub probe_max_backoff_secs: u64,
    /// Windows measured with merging back on during a probe.
    pub probe_windows: u32,
    /// While a device is at L3 its counters are read this often, in ms (the daemon ticks
    /// this fast while any device is at L3): merges are invisible there, so a workload
    /// change (rate, read share, bio size) is the only sign of merges being missed, and it
    /// is seen after one such tick (a window closes once it holds `min_window_bios` bios).
    /// 0, or a value not under `interval_ms`: every `interval_ms`, like any other level.
    pub l3_watch_interval_ms: u64,
    /// While merging pays at L0/L1, try L2 (plug and one-hit merges only, cheaper) for
    /// `probe_windows` windows; stay there when it completes at most this many percent more
    /// requests per bio than L0 did (i.e. it kept the merges). 0 disables the trial.
    pub trial_max_extra_requests_percent: f64,
    /// Cap on tunable changes per device in any rolling hour. When reached, merging is
    /// left on (changes that turn merging on are never refused).
    pub max_changes_per_hour: u32,
    /// What not merging saves: `live` (the default: measured on this host by sampling the
    /// merge path, `[pricing]`), a built-in cost profile (`measured-6.18`, measured on this
    /// project's machine; `lkml-2008`, the 2008 thread's figures) or the path of one
    /// `mergetune calibrate` wrote. A profile applies only to devices it matches (kernel
    /// series, and its device key if it has one); the others are "unknown".
    pub cost_profile: String,
}

pub const DEFAULT_WINDOW_TICKS: u32 = 2;
pub const DEFAULT_MIN_WINDOW_BIOS: u64 = 1000;
pub const DEFAULT_DISABLE_BELOW_PERCENT: f64 = 1.0;
pub const DEFAULT_ENABLE_ABOVE_PERCENT: f64 = 5.0;
pub const DEFAULT_STEP_DOWN_AFTER_WINDOWS: u32 = 3;
pub const DEFAULT_DISABLE_AFTER_WINDOWS: u32 = 2;
pub const DEFAULT_DISABLED_NOMERGES: u8 = 2;
pub const DEFAULT_MIN_DWELL_SECS: u64 = 10;
pub const DEFAULT_PROBE_INITIAL_BACKOFF_SECS: u64 = 1800;
pub const DEFAULT_PROBE_MAX_BACKOFF_SECS: u64 = 3600;
pub const DEFAULT_PROBE_WINDOWS: u32 = 1;
pub const DEFAULT_L3_WATCH_INTERVAL_MS: u64 = 50;
pub const DEFAULT_TRIAL_MAX_EXTRA_REQUESTS_PERCENT: f64 = 2.0;
pub const DEFAULT_MAX_CHANGES_PER_HOUR: u32 = 60;
/// The longest dwell or probe backoff, in seconds: a year. The policy works in ms on a u64
/// clock; far larger values overflow it.
pub const MAX_POLICY_SECS: u64 = 365 * 24 * 3600;
/// The most probe windows: the policy gives up a probe after four times as many idle ones.
pub const MAX_PROBE_WINDOWS: u32 = 1000;
/// The most ticks between two rescans of the device list: a day at 1 s ticks. A disk
/// plugged in later is not managed before the next rescan.
pub const MAX_RESCAN_EVERY_TICKS: u32 = 86_400;
/// The most ticks in a decision window.
pub const MAX_WINDOW_TICKS: u32 = 3600;
/// The longest decision window (`window_ticks` times `interval_ms`), in ms: a day. Every
/// decision waits for whole windows; one longer than this reacts to no workload.
pub const MAX_WINDOW_MS: u64 = 86_400_000;
/// The most consecutive windows a step waits for (`step_down_after_windows`,
/// `disable_after_windows`, `[slices] windows`).
pub const MAX_STEP_WINDOWS: u32 = 1000;
/// The longest a step down waits for its evidence (`step_down_after_windows` windows), in
/// ms: a week. It is also how long `run --once` samples.
pub const MAX_DECISION_MS: u64 = 604_800_000;
/// The most bios (or requests) a window may be required to hold: a device completing ten
/// million a second fills it in 100 s; a larger threshold is never reached.
pub const MAX_WINDOW_COUNT: u64 = 1_000_000_000;
/// The highest cap on the ladder's changes per device and hour: one per tick at the
/// shortest interval (10 ms); a higher cap is never reached, as good as none.
pub const MAX_CHANGES_PER_HOUR: u32 = 360_000;
pub const DEFAULT_COST_PROFILE: &str = crate::pricing::profile::LIVE;

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            enabled: true,
            window_ticks: DEFAULT_WINDOW_TICKS,
            min_window_bios: DEFAULT_MIN_WINDOW_BIOS,
            disable_below_percent: DEFAULT_DISABLE_BELOW_PERCENT,
            enable_above_percent: DEFAULT_ENABLE_ABOVE_PERCENT,
            step_down_after_windows: DEFAULT_STEP_DOWN_AFTER_WINDOWS,
            disable_after_windows: DEFAULT_DISABLE_AFTER_WINDOWS,
            disabled_nomerges: DEFAULT_DISABLED_NOMERGES,
            min_dwell_secs: DEFAULT_MIN_DWELL_SECS,
            probe_initial_backoff_secs: DEFAULT_PROBE_INITIAL_BACKOFF_SECS,
            probe_max_backoff_secs: DEFAULT_PROBE_MAX_BACKOFF_SECS,
            probe_windows: DEFAULT_PROBE_WINDOWS,
            l3_watch_interval_ms: DEFAULT_L3_WATCH_INTERVAL_MS,
            trial_max_extra_requests_percent: DEFAULT_TRIAL_MAX_EXTRA_REQUESTS_PERCENT,
            max_changes_per_hour: DEFAULT_MAX_CHANGES_PER_HOUR,
            cost_profile: DEFAULT_COST_PROFILE.to_string(),
        }
    }
}

fn invalid(origin: &str, key: &str, reason: impl Into<String>) -> ConfigError {
    DocumentError::invalid(origin, key, reason).into()
}

impl Config {
    /// Checks every value and every relation between values. Pure.
    /// `origin` names where the config came from, for the message.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let mut problems = Problems {
            origin,
            found: Vec::new(),
        };
        self.check_daemon(&mut problems);
        self.check_devices(&mut problems);
        self.check_policy(&mut problems);
        if let Err(e) = self.metrics.validate(origin) {
            problems.found.push(e);
        }
        for (key, reason) in self.pricing.problems() {
            problems.push(&key, reason);
        }
        for (key, reason) in self.sense.problems() {
            problems.push(&format!("sense.{key}"), reason);
        }
        self.check_slices(&mut problems);
        problems.into_result()
    }

    fn check_daemon(&self, problems: &mut Problems) {
        let d = &self.daemon;
        problems.within(
            "daemon.interval_ms",
            d.interval_ms,
            MIN_INTERVAL_MS..=MAX_INTERVAL_MS,
        );
        if d.state_dir.as_os_str().as_encoded_bytes().contains(&0) {
            // No system call takes a path with a NUL: the daemon could not start.
            problems.push(
                "daemon.state_dir",
                "contains a NUL byte, which no path can hold",
            );
        } else if d
            .state_dir
            .as_os_str()
            .as_encoded_bytes()
            .iter()
            .any(u8::is_ascii_control)
        {
            // A newline in it would forge a line of every log and of the pointer file that
            // names it; no operator means one.
            problems.push(
                "daemon.state_dir",
                format!(
                    "{:?} contains a control character (a newline, a tab...)",
                    d.state_dir
                ),
            );
        } else if d.state_dir.as_os_str().is_empty() || !d.state_dir.is_absolute() {
            problems.push(
                "daemon.state_dir",
                format!("{:?} must be an absolute path", d.state_dir),
            );
        }
        problems.count(
            "daemon.rescan_every_ticks",
            d.rescan_every_ticks.into(),
            MAX_RESCAN_EVERY_TICKS.into(),
            "a disk plugged in waits that many ticks to be found",
        );
    }

    fn check_devices(&self, problems: &mut Problems) {
        for (key, list) in [
            ("devices.include", &self.devices.include),
            ("devices.exclude", &self.devices.exclude),
        ] {
            for (i, pat) in list.iter().enumerate() {
                let key = format!("{key}[{i}]");
                if pat.is_empty() || pat.contains('/') {
                    problems.push(&key, format!("{pat:?} is not a device-name glob"));
                }
                if let Err(e) = glob::Pattern::new(pat) {
                    problems.push(&key, format!("{pat:?} is not a valid glob: {e}"));
                }
            }
        }
    }

    fn check_policy(&self, problems: &mut Problems) {
        let p = &self.policy;
        if p.min_window_bios == 0 {
            // A window with no bio would count as evidence: an idle device steps down.
            problems.push(
                "policy.min_window_bios",
                "is 0, must be at least 1 (0 lets an idle device step down on no evidence)",
            );
        } else {
            problems.count(
                "policy.min_window_bios",
                p.min_window_bios,
                MAX_WINDOW_COUNT,
                "no window would ever hold that many bios, so nothing would be decided",
            );
        }
        for (key, v) in [
            ("policy.min_dwell_secs", p.min_dwell_secs),
            (
                "policy.probe_initial_backoff_secs",
                p.probe_initial_backoff_secs,
            ),
            ("policy.probe_max_backoff_secs", p.probe_max_backoff_secs),
        ] {
            // Turned into ms and added to the clock: a larger value overflows.
            if v > MAX_POLICY_SECS {
                problems.push(
                    key,
                    format!("{v} is more than {MAX_POLICY_SECS} s (a year)"),
                );
            }
        }
        if p.probe_windows > MAX_PROBE_WINDOWS {
            problems.push(
                "policy.probe_windows",
                format!("{} is more than {MAX_PROBE_WINDOWS}", p.probe_windows),
            );
        }
        self.check_policy_ladder(problems);
        self.check_policy_probes(problems);
        self.check_cost_profile(problems);
        if p.max_changes_per_hour < 2 {
            problems.push(
                "policy.max_changes_per_hour",
                format!(
                    "{} leaves no room to turn merging off and back on (at least 2)",
                    p.max_changes_per_hour
                ),
            );
        } else {
            problems.count(
                "policy.max_changes_per_hour",
                p.max_changes_per_hour.into(),
                MAX_CHANGES_PER_HOUR.into(),
                "a change per tick at the shortest interval",
            );
        }
    }

    /// The ladder's thresholds and counts: windows, percentages and their hysteresis band.
    fn check_policy_ladder(&self, problems: &mut Problems) {
        let p = &self.policy;
        problems.count(
            "policy.window_ticks",
            p.window_ticks.into(),
            MAX_WINDOW_TICKS.into(),
            "every decision waits for whole windows",
        );
        let window_ms = self
            .daemon
            .interval_ms
            .saturating_mul(p.window_ticks.into());
        let interval_ok = (MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&self.daemon.interval_ms);
        if interval_ok
            && (1..=MAX_WINDOW_TICKS).contains(&p.window_ticks)
            && window_ms > MAX_WINDOW_MS
        {
            problems.push(
                "policy.window_ticks",
                format!(
                    "{} ticks of daemon.interval_ms {} is a window of {window_ms} ms, more than {MAX_WINDOW_MS} ms (a day): a window that long reacts to no workload",
                    p.window_ticks, self.daemon.interval_ms
                ),
            );
        }
        problems.within(
            "policy.disable_below_percent",
            p.disable_below_percent,
            0.0..=100.0,
        );
        problems.within(
            "policy.enable_above_percent",
            p.enable_above_percent,
            0.0..=100.0,
        );
        if p.disable_below_percent >= p.enable_above_percent {
            problems.push(
                "policy.enable_above_percent",
                format!(
                    "{} must be greater than policy.disable_below_percent ({}): the thresholds overlap and leave no hysteresis band",
                    p.enable_above_percent, p.disable_below_percent
                ),
            );
        }
        let windows = "each is a window of evidence a step waits for";
        problems.count(
            "policy.step_down_after_windows",
            p.step_down_after_windows.into(),
            MAX_STEP_WINDOWS.into(),
            windows,
        );
        let decision_ms = window_ms.saturating_mul(p.step_down_after_windows.into());
        if interval_ok
            && window_ms <= MAX_WINDOW_MS
            && (1..=MAX_STEP_WINDOWS).contains(&p.step_down_after_windows)
            && decision_ms > MAX_DECISION_MS
        {
            problems.push(
                "policy.step_down_after_windows",
                format!(
                    "{} windows of {window_ms} ms is {decision_ms} ms of evidence per step, more than {MAX_DECISION_MS} ms (a week; `run --once` samples that long)",
                    p.step_down_after_windows
                ),
            );
        }
        problems.count(
            "policy.disable_after_windows",
            p.disable_after_windows.into(),
            MAX_STEP_WINDOWS.into(),
            windows,
        );
        if !(1..=2).contains(&p.disabled_nomerges) {
            problems.push(
                "policy.disabled_nomerges",
                format!("{} must be 1 or 2", p.disabled_nomerges),
            );
        }
    }

    /// The probes' timing, the trial's bound and the L3 watch.
    fn check_policy_probes(&self, problems: &mut Problems) {
        let p = &self.policy;
        problems.at_least_one(
            "policy.probe_initial_backoff_secs",
            p.probe_initial_backoff_secs,
        );
        if p.probe_max_backoff_secs < p.probe_initial_backoff_secs {
            problems.push(
                "policy.probe_max_backoff_secs",
                format!(
                    "{} is less than policy.probe_initial_backoff_secs ({})",
                    p.probe_max_backoff_secs, p.probe_initial_backoff_secs
                ),
            );
        }
        problems.within(
            "policy.trial_max_extra_requests_percent",
            p.trial_max_extra_requests_percent,
            0.0..=100.0,
        );
        problems.at_least_one("policy.probe_windows", p.probe_windows.into());
        let watch = p.l3_watch_interval_ms;
        if watch != 0 && !(10..=3_600_000).contains(&watch) {
            problems.push(
                "policy.l3_watch_interval_ms",
                format!("{watch} is outside 10..=3600000 (0 turns the watch off)"),
            );
        }
    }

    fn check_cost_profile(&self, problems: &mut Problems) {
        if let Some(why) = profile_spec_problem(&self.policy.cost_profile, true) {
            problems.push("policy.cost_profile", why);
        }
        let fallback = &self.pricing.fallback_profile;
        if fallback.is_empty() {
            return;
        }
        if let Some(why) = profile_spec_problem(fallback, false) {
            problems.push("pricing.fallback_profile", why);
        } else if self.policy.cost_profile.trim() != crate::pricing::profile::LIVE {
            problems.push(
                "pricing.fallback_profile",
                format!(
                    "{fallback:?} stands in for the live sampler, but [policy] cost_profile is {:?}, not \"live\": remove one",
                    self.policy.cost_profile
                ),
            );
        }
    }

    /// Things that are valid but an operator should know, each naming its key.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = self.sense.warnings();
        if self.daemon.state_dir != Path::new(DEFAULT_STATE_DIR) {
            w.push(format!(
                "key `daemon.state_dir`: {} is not {DEFAULT_STATE_DIR}, the only directory the shipped systemd unit lets the service write (RuntimeDirectory=, ProtectSystem=strict): add a drop-in with ReadWritePaths={} or mergetune cannot record originals and so writes nothing; `mergetune restore --config` (the unit's ExecStopPost) reads the same key",
                self.daemon.state_dir.display(),
                self.daemon.state_dir.display()
            ));
        }
        w
    }

    /// The tick interval while a device is at L3, in ms: the watch interval, never longer
    /// than `interval_ms`.
    pub fn l3_tick_ms(&self) -> u64 {
        match self.policy.l3_watch_interval_ms {
            0 => self.daemon.interval_ms,
            w => w.min(self.daemon.interval_ms),
        }
    }

    /// The length of a decision window, in ms.
    pub fn window_ms(&self) -> u64 {
        self.daemon.interval_ms * u64::from(self.policy.window_ticks)
    }

    /// One line describing the effective configuration.
    /// Which tuners this config turns on and what each may write: the startup log's word
    /// on what mergetune will change (the merge ladder always unless the policy is off;
    /// the slice tuner only when `[slices] enabled`).
    pub fn tuners(&self) -> String {
        let ladder = if self.policy.enabled {
            format!("merge ladder on ({})", crate::tuners::ladder_files())
        } else {
            "merge ladder observing only ([policy] enabled = false: writes nothing)".into()
        };
        let slices = if !self.slices.enabled {
            "slice tuner off ([slices] enabled = false: scheduler tunables are not touched)".into()
        } else if self.policy.enabled {
            format!(
                "slice tuner on ({}, when reads starve behind writes)",
                crate::tuners::slice_files()
            )
        } else {
            "slice tuner off ([policy] enabled = false)".into()
        };
        format!("tuners: {ladder}; {slices}")
    }

    pub fn summary(&self) -> String {
        format!(
            "interval {} ms (at L3 {} ms), window {} ticks, low below {}% (step after {}, off after {} windows), on at {}%, deepest nomerges {}, probe after {}..{} s, cap {}/h, include {:?}, exclude {:?}, policy {}",
            self.daemon.interval_ms,
            self.l3_tick_ms(),
            self.policy.window_ticks,
            self.policy.disable_below_percent,
            self.policy.step_down_after_windows,
            self.policy.disable_after_windows,
            self.policy.enable_above_percent,
            self.policy.disabled_nomerges,
            self.policy.probe_initial_backoff_secs,
            self.policy.probe_max_backoff_secs,
            self.policy.max_changes_per_hour,
            self.devices.include,
            self.devices.exclude,
            if self.policy.enabled {
                "enabled"
            } else {
                "disabled (observe only)"
            },
        )
    }
}

/// The largest config file read: a config is a few KiB; more is not one (and `/dev/zero`
/// named as a config must not be read until memory runs out).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Parses and validates a config from TOML text. `origin` names it in errors.
pub fn load_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
    let checked = check_str(text, origin);
    finish(checked.config, checked.errors, origin)
}

/// The config, or every error in the order of the file (those without a position last).
fn finish(
    cfg: Option<Config>,
    mut errs: Vec<(usize, ConfigError)>,
    origin: &str,
) -> Result<Config, ConfigError> {
    errs.sort_by_key(|(at, _)| *at);
    let mut errs: Vec<ConfigError> = errs.into_iter().map(|(_, e)| e).collect();
    match (cfg, errs.len()) {
        (Some(c), 0) => Ok(c),
        (_, 1) => Err(errs.remove(0)),
        (_, 0) => Err(DocumentError::parse(origin, "not a config").into()),
        _ => Err(ConfigError::Many {
            origin: origin.to_string(),
            errors: errs,
        }),
    }
}

/// What [`check_str`] found: the config (the file with every unknown or mistyped key left
/// at its default; None after a syntax error), every problem, and where each key's value
/// sits in the text.
struct Checked {
    config: Option<Config>,
    /// Each with the byte offset it is about (`usize::MAX`: no place in the file).
    errors: Vec<(usize, ConfigError)>,
    /// `section.key` (and `section.key[i]` for array elements) -> byte offset of the value.
    positions: std::collections::BTreeMap<String, usize>,
}

/// `origin:line:column` of byte `offset` of `text`.
fn at(origin: &str, text: &str, offset: usize) -> String {
    let (line, col) = crate::printable::line_col(text, offset);
    format!("{origin}:{line}:{col}")
}

/// Every problem of a config text, each with `origin:line:column`: all syntax errors (then
/// nothing more can be said), every unknown key (serde's `deny_unknown_fields` stops at the
/// first, so the document is walked against the schema, which is the default config's own
/// keys), every value of the wrong type (each key deserialised alone), and what
/// [`Config::validate`] finds in the rest. Messages never quote the file's text.
fn check_str(text: &str, origin: &str) -> Checked {
    use crate::printable::without_quotes;
    use toml::de::DeTable;
    let mut out = Checked {
        config: None,
        errors: Vec::new(),
        positions: Default::default(),
    };
    let parse_error = |o: usize, message: &str| {
        let origin = at(origin, text, o);
        let message = without_quotes(message);
        (o, DocumentError::parse(origin, message).into())
    };
    let (doc, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        for e in syntax {
            out.errors
                .push(parse_error(e.span().map_or(0, |s| s.start), e.message()));
        }
        return out;
    }
    // Integers no TOML value holds are reported at their key and read as 0 (then
    // dropped): the parser's own error names neither.
    let oversized = values::oversized(doc.get_ref());
    let readable = values::without(text, &oversized);
    let mut plain: toml::Table = match toml::from_str(&readable) {
        Ok(t) => t,
        Err(e) => {
            out.errors
                .push(parse_error(e.span().map_or(0, |s| s.start), e.message()));
            return out;
        }
    };
    check_sections(&mut out, doc.get_ref(), &mut plain, text, origin);
    drop_oversized(&mut out, &oversized, &mut plain, text, origin);
    let cfg: Config = match plain.try_into() {
        Ok(c) => c,
        Err(e) => {
            out.errors.push((
                usize::MAX,
                DocumentError::parse(origin, without_quotes(e.message())).into(),
            ));
            return out;
        }
    };
    if let Err(e) = cfg.validate(origin) {
        place_validation_errors(&mut out, e, text, origin);
    }
    out.config = Some(cfg);
    out
}

/// Each integer beyond TOML's range in a known key: an error naming the key, the value and
/// what the key expects, and the key dropped (the document read it as 0). One in an unknown
/// key or section is that key's error already.
fn drop_oversized(
    out: &mut Checked,
    found: &[values::Oversized],
    plain: &mut toml::Table,
    text: &str,
    origin: &str,
) {
    for o in found {
        let mut parts = o.key.splitn(2, '.');
        let (Some(section), Some(rest)) = (parts.next(), parts.next()) else {
            continue;
        };
        let name = rest.split(['.', '[']).next().unwrap_or(rest);
        let Some(toml::Value::Table(s)) = plain.get_mut(section) else {
            continue;
        };
        if s.remove(name).is_none() {
            continue;
        }
        let probe = toml::Table::from_iter([(
            section.to_string(),
            toml::Value::Table(toml::Table::from_iter([(
                name.to_string(),
                toml::Value::Integer(values::TOML_MAX),
            )])),
        )]);
        let expected = match probe.try_into::<Config>() {
            Ok(_) => format!("an integer in 0..={}", values::TOML_MAX),
            Err(e) => values::expected_in(e.message()).unwrap_or_else(|| "a smaller value".into()),
        };
        out.errors.push((
            o.span.start,
            invalid(&at(origin, text, o.span.start), &o.key, o.reason(&expected)),
        ));
    }
}

/// Walks the document's sections against the schema, the default config's own keys: a
/// section it does not know, or one that is not a table, is an error and is dropped from
/// `plain`, as is every key [`check_key`] refuses.
fn check_sections(
    out: &mut Checked,
    doc: &toml::de::DeTable<'_>,
    plain: &mut toml::Table,
    text: &str,
    origin: &str,
) {
    use toml::de::DeValue;
    // Every field is plain data with a default: the schema serialises.
    let schema = toml::Table::try_from(Config::default()).expect("the default config serialises");
    let sections: Vec<&str> = schema.keys().map(String::as_str).collect();
    for (k, v) in doc.iter() {
        let section = k.get_ref().as_ref();
        let Some(toml::Value::Table(known)) = schema.get(section) else {
            out.errors.push((
                k.span().start,
                DocumentError::parse(
                    at(origin, text, k.span().start),
                    format!(
                        "unknown key `{}`: not a section of the config ({})",
                        crate::printable::printable(section),
                        sections.join(", ")
                    ),
                )
                .into(),
            ));
            plain.remove(section);
            continue;
        };
        let DeValue::Table(t) = v.get_ref() else {
            out.errors.push((
                v.span().start,
                invalid(
                    &at(origin, text, v.span().start),
                    section,
                    format!("must be a table ([{section}])"),
                ),
            ));
            plain.remove(section);
            continue;
        };
        for (k2, v2) in t.iter() {
            let name = k2.get_ref().as_ref();
            let key = KeyAt {
                section,
                name,
                key_at: k2.span().start,
                value: v2,
            };
            if !check_key(out, plain, known, &key, text, origin)
                && let Some(toml::Value::Table(s)) = plain.get_mut(section)
            {
                s.remove(name);
            }
        }
    }
}

/// One `[section] name = value` of the text, where it stands.
struct KeyAt<'a, 'v> {
    section: &'a str,
    name: &'a str,
    key_at: usize,
    value: &'a toml::Spanned<toml::de::DeValue<'v>>,
}

/// Checks one key of a known section: that the section has it, and that its value alone
/// deserialises (so that one wrong type does not hide the next). Records where the value
/// (and each array element) stands, for the validation's messages. False: the key is
/// dropped from what is deserialised next.
fn check_key(
    out: &mut Checked,
    plain: &toml::Table,
    known: &toml::Table,
    key: &KeyAt,
    text: &str,
    origin: &str,
) -> bool {
    use crate::printable::without_quotes;
    use toml::de::DeValue;
    let (section, name) = (key.section, key.name);
    let full = format!("{section}.{name}");
    // A deprecated key is read (and warned of) but not part of the schema, which is what a
    // config names.
    let deprecated =
        section == "sense" && crate::sense::SenseConfig::DEPRECATED_KEYS.contains(&name);
    if !known.contains_key(name) && !deprecated {
        out.errors.push((
            key.key_at,
            DocumentError::parse(
                at(origin, text, key.key_at),
                format!(
                    "unknown key `{section}.{}` (the keys of [{section}]: {})",
                    crate::printable::printable(name),
                    known
                        .keys()
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .into(),
        ));
        return false;
    }
    let value_at = key.value.span().start;
    out.positions.insert(full.clone(), value_at);
    if let DeValue::Array(a) = key.value.get_ref() {
        for (i, e) in a.iter().enumerate() {
            out.positions.insert(format!("{full}[{i}]"), e.span().start);
        }
    }
    let value = plain
        .get(section)
        .and_then(|s| s.get(name))
        .cloned()
        .unwrap_or(toml::Value::Boolean(false));
    let mut one = toml::Table::new();
    one.insert(
        section.to_string(),
        toml::Value::Table(toml::Table::from_iter([(name.to_string(), value)])),
    );
    match one.try_into::<Config>() {
        Ok(_) => true,
        Err(e) => {
            // The value of a known key of a document that parsed as TOML: shown (see
            // `values`), with what the key expects.
            let shown = plain.get(section).and_then(|s| s.get(name)).map_or_else(
                || without_quotes(e.message()),
                |v| values::wrong_value(v, e.message()),
            );
            out.errors
                .push((value_at, invalid(&at(origin, text, value_at), &full, shown)));
            false
        }
    }
}

/// The validation's errors, each placed at its key's value in the text where the text
/// has the key (a default that fails a relation has no place: it sorts last).
/// Whether `reason` names `key` as a key (not as the prefix of a longer one).
fn mentions_key(reason: &str, key: &str) -> bool {
    reason.match_indices(key).any(|(i, _)| {
        let after = reason[i + key.len()..].chars().next();
        let before = reason[..i].chars().next_back();
        !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
    })
}

fn place_validation_errors(out: &mut Checked, e: ConfigError, text: &str, origin: &str) {
    let list = match e {
        ConfigError::Many { errors, .. } => errors,
        e => vec![e],
    };
    for e in list {
        out.errors.push(match e {
            ConfigError::Document(DocumentError::Invalid {
                origin: o,
                key,
                reason,
            }) => match out.positions.get(&key).copied().or_else(|| {
                // A rule between two keys, the file setting only the other one (the one
                // the error names in its reason): placed there.
                out.positions
                    .iter()
                    .filter(|(k, _)| !k.contains('[') && mentions_key(&reason, k))
                    .map(|(_, &p)| p)
                    .min()
            }) {
                Some(p) => (p, invalid(&at(origin, text, p), &key, reason)),
                None => (usize::MAX, invalid(&o, &key, reason)),
            },
            other => (usize::MAX, other),
        });
    }
}

/// What is wrong with a profile's name in the config (`live` allowed where `allow_live`):
/// a built-in name or a path (containing / or ending in .toml).
fn profile_spec_problem(raw: &str, allow_live: bool) -> Option<String> {
    let cp = raw.trim();
    if cp.contains('\0') {
        return Some("contains a NUL byte, which no path can hold".into());
    }
    let live_ok = allow_live && cp == crate::pricing::profile::LIVE;
    if cp.is_empty()
        || (!live_ok
            && !crate::pricing::profile::BUILTIN_NAMES.contains(&cp)
            && !crate::pricing::profile::is_path(cp))
    {
        return Some(format!(
            "{raw:?} is neither a built-in profile ({}) nor a path (containing / or ending in .toml)",
            crate::pricing::profile::BUILTIN_NAMES.join(", ")
        ));
    }
    None
}

/// Reads, parses and validates a config file, and the cost profile file it names (a
/// built-in name needs no reading), so that a bad profile stops the start or the reload.
/// Every problem is reported at once, the profile's too. A relative `cost_profile` is
/// taken from the config file's directory (under systemd the working directory is `/`),
/// and the config returned holds it resolved.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let text = mergetune_kernel::userfile::read_text(path, MAX_CONFIG_BYTES).map_err(|e| {
        ConfigError::File {
            path: path.to_path_buf(),
            error: e,
        }
    })?;
    if text.trim().is_empty() && !is_char_device(path) {
        return Err(ConfigError::Empty {
            path: path.to_path_buf(),
            bytes: text.len(),
        });
    }
    let origin = path.display().to_string();
    let mut checked = check_str(&text, &origin);
    if let Some(cfg) = checked.config.as_mut() {
        cfg.policy.cost_profile = resolve_profile_path(&cfg.policy.cost_profile, path);
        cfg.pricing.fallback_profile = resolve_profile_path(&cfg.pricing.fallback_profile, path);
        for (key, spec) in [
            ("policy.cost_profile", cfg.policy.cost_profile.clone()),
            (
                "pricing.fallback_profile",
                cfg.pricing.fallback_profile.clone(),
            ),
        ] {
            let named_ok = !checked
                .errors
                .iter()
                .any(|(_, e)| matches!(e, ConfigError::Document(d) if d.key() == Some(key)));
            if named_ok
                && !spec.is_empty()
                && spec != crate::pricing::profile::LIVE
                && let Err(e) = crate::pricing::profile::resolve(&spec)
            {
                let (p, o) = match checked.positions.get(key) {
                    Some(&p) => (p, at(&origin, &text, p)),
                    None => (usize::MAX, origin.clone()),
                };
                checked.errors.push((p, invalid(&o, key, e.to_string())));
            }
        }
    }
    finish(checked.config, checked.errors, &origin)
}

/// `/dev/null` (a character device: `read_text` reads no other) says "no config": the
/// built-in defaults, as asked.
fn is_char_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

/// A `cost_profile` path relative to the config file's directory; a built-in name or an
/// absolute path as it is.
pub fn resolve_profile_path(spec: &str, config_path: &Path) -> String {
    let p = Path::new(spec);
    if crate::pricing::profile::BUILTIN_NAMES.contains(&spec)
        || !crate::pricing::profile::is_path(spec)
        || p.is_absolute()
    {
        return spec.to_string();
    }
    match config_path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(p).display().to_string(),
        _ => spec.to_string(),
    }
}

/// The default listen address: loopback only. 9725 is in the exporters' 9100-9999 range and
/// is not the default of any widely deployed exporter (docs/metrics.md).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9725";

/// The `[metrics]` section of the config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `host:port` of the read-only HTTP endpoint serving `/metrics` and `/status`;
    /// `""` turns it off.
    pub listen: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: DEFAULT_LISTEN.to_string(),
        }
    }
}

impl MetricsConfig {
    /// Pure check of the section; the error names `metrics.listen`.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        parse_listen(&self.listen)
            .map(|_| ())
            .map_err(|reason| invalid(origin, "metrics.listen", reason))
    }
}

/// `""` -> Ok(None) (off); `ip:port` -> the address; anything else -> why not.
pub fn parse_listen(s: &str) -> Result<Option<SocketAddr>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    s.parse::<SocketAddr>().map(Some).map_err(|_| {
        format!(
            "{s:?} is not an IP:PORT address (e.g. \"127.0.0.1:9725\", \"[::1]:9725\"; \"\" turns the endpoint off)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Config::default().validate("defaults").unwrap();
    }

    #[test]
    fn every_wrong_key_is_reported_not_only_the_first() {
        let e = load_str(
            "[daemon]\ninterval_ms = 1\n[policy]\nwindow_ticks = 0\n[slices]\nmin_requests = 0\nmax_changes_per_hour = 0\n",
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        for key in [
            "daemon.interval_ms",
            "policy.window_ticks",
            "slices.min_requests",
            "slices.max_changes_per_hour",
        ] {
            assert!(e.contains(key), "{key} missing from: {e}");
        }
        assert!(e.contains("4 errors"), "{e}");
    }

    #[test]
    fn a_rule_between_two_keys_is_placed_where_the_file_sets_one() {
        // Only disable_below_percent is in the file; the overlap is reported
        // on enable_above_percent, which the file leaves at its default.
        let e = load_str("[policy]\n\ndisable_below_percent = 60\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.toml:3:"), "{e}");
        assert!(e.contains("policy.enable_above_percent"), "{e}");
        let e = load_str("[policy]\nprobe_initial_backoff_secs = 99999\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.toml:2:"), "{e}");
        assert!(mentions_key("less than policy.x (3)", "policy.x"));
        assert!(!mentions_key("less than policy.x_y (3)", "policy.x"));
    }

    #[test]
    fn a_state_dir_with_a_control_character_is_refused() {
        let e = load_str("[daemon]\nstate_dir = \"/run/a\\nb\"\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("daemon.state_dir") && e.contains("control character"),
            "{e}"
        );
        assert!(!e.contains("\n"), "no raw newline echoed: {e:?}");
    }

    #[test]
    fn every_number_key_has_a_bound_that_validation_enforces() {
        // Every numeric key of the schema, set to u32::MAX (what `run --once` never finished
        // with for window_ticks and step_down_after_windows), is refused naming its key
        // and the value.
        let schema = toml::Table::try_from(Config::default()).unwrap();
        let mut tried = 0;
        let mut accepted = Vec::new();
        for (section, keys) in &schema {
            let toml::Value::Table(keys) = keys else {
                continue;
            };
            for (name, v) in keys {
                if !matches!(v, toml::Value::Integer(_) | toml::Value::Float(_)) {
                    continue;
                }
                tried += 1;
                let text = format!("[{section}]\n{name} = 4294967295\n");
                let e = match load_str(&text, "t") {
                    Ok(_) => {
                        accepted.push(format!("{section}.{name}"));
                        continue;
                    }
                    Err(e) => e.to_string(),
                };
                assert!(
                    e.contains(&format!("`{section}.{name}`")) && e.contains("4294967295"),
                    "{section}.{name}: {e}"
                );
            }
        }
        assert_eq!(accepted, Vec::<String>::new(), "accepted at 4294967295");
        assert!(tried >= 30, "only {tried} numeric keys");
    }

    #[test]
    fn a_window_or_a_decision_longer_than_its_bound_is_refused() {
        let e = load_str(
            "[daemon]\ninterval_ms = 3600000\n[policy]\nwindow_ticks = 25\n",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("policy.window_ticks") && e.contains("90000000 ms"),
            "{e}"
        );
        let e = load_str(
            "[daemon]\ninterval_ms = 3600000\n[policy]\nwindow_ticks = 2\nstep_down_after_windows = 85\n",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("policy.step_down_after_windows") && e.contains("a week"),
            "{e}"
        );
        // The longest interval with the default window is accepted.
        load_str("[daemon]\ninterval_ms = 3600000\n", "t").unwrap();
        // The bounds themselves are accepted where the product is.
        load_str(
            "[policy]\nstep_down_after_windows = 1000\ndisable_after_windows = 1000\n",
            "t",
        )
        .unwrap();
    }

    #[test]
    fn a_wrong_value_is_named_with_its_key_and_what_the_key_expects() {
        for (text, want) in [
            (
                "[daemon]\ninterval_ms = \"fast\"\n",
                "t:2:15: key `daemon.interval_ms`: \"fast\" is a string, expected an integer in 0..=9223372036854775807",
            ),
            (
                "[daemon]\nrescan_every_ticks = 5000000000\n",
                "key `daemon.rescan_every_ticks`: 5000000000 is out of range, expected an integer in 0..=4294967295",
            ),
            (
                "[policy]\nwindow_ticks = 99999999999999999999\n",
                "t:2:16: key `policy.window_ticks`: 99999999999999999999 is larger than any TOML integer (at most 9223372036854775807), expected an integer in 0..=4294967295",
            ),
            (
                "[policy]\nmin_window_bios = 18446744073709551615\n",
                "key `policy.min_window_bios`: 18446744073709551615 is larger than any TOML integer",
            ),
            (
                "[devices]\ninclude = \"sda\"\n",
                "key `devices.include`: \"sda\" is a string, expected an array",
            ),
        ] {
            let e = load_str(text, "t").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}:\n{e}\nwanted: {want}");
        }
        // An oversized integer does not hide the other keys' errors.
        let e = load_str(
            "[policy]\nwindow_ticks = 99999999999999999999\nstep_down_after_windows = 0\n",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("2 errors") && e.contains("step_down_after_windows"),
            "{e}"
        );
    }

    #[test]
    fn an_empty_config_file_is_refused_and_dev_null_or_a_comment_are_the_defaults() {
        let dir = std::env::temp_dir().join(format!("mergetune-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("m.toml");
        for blank in ["", "\n\n  \t\n"] {
            std::fs::write(&p, blank).unwrap();
            let e = load_file(&p).unwrap_err();
            assert!(matches!(e, ConfigError::Empty { .. }), "{e}");
            let e = e.to_string();
            assert!(
                e.contains(&p.display().to_string()) && e.contains("include"),
                "{e}"
            );
        }
        std::fs::write(&p, "# built-in defaults\n").unwrap();
        assert_eq!(load_file(&p).unwrap(), Config::default());
        assert_eq!(
            load_file(Path::new("/dev/null")).unwrap(),
            Config::default()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(load_str("", "t").unwrap(), Config::default());
    }

    #[test]
    fn unknown_key_is_named() {
        let e = load_str("[policy]\nenabeld = true\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("enabeld"), "{e}");
    }

    #[test]
    fn overlapping_thresholds_rejected() {
        let e = load_str(
            "[policy]\ndisable_below_percent = 5.0\nenable_above_percent = 5.0\n",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("policy.enable_above_percent"), "{e}");
        assert!(e.contains("overlap"), "{e}");
    }

    #[test]
    fn bad_values_name_their_key() {
        for (text, key) in [
            ("[daemon]\ninterval_ms = 0\n", "daemon.interval_ms"),
            ("[daemon]\nstate_dir = \"rel\"\n", "daemon.state_dir"),
            ("[devices]\ninclude = [\"sd[\"]\n", "devices.include[0]"),
            (
                "[policy]\ndisabled_nomerges = 3\n",
                "policy.disabled_nomerges",
            ),
            ("[policy]\nwindow_ticks = 0\n", "policy.window_ticks"),
            (
                "[policy]\nl3_watch_interval_ms = 5\n",
                "policy.l3_watch_interval_ms",
            ),
            (
                "[policy]\nprobe_max_backoff_secs = 1\n",
                "policy.probe_max_backoff_secs",
            ),
            (
                "[policy]\nmax_changes_per_hour = 1\n",
                "policy.max_changes_per_hour",
            ),
            (
                "[policy]\ndisable_below_percent = -1.0\n",
                "policy.disable_below_percent",
            ),
            ("[policy]\ncost_profile = \"fast\"\n", "policy.cost_profile"),
            ("[policy]\ncost_profile = \"\"\n", "policy.cost_profile"),
        ] {
            let e = load_str(text, "t").unwrap_err().to_string();
            assert!(e.contains(key), "{text:?}: {e}");
        }
    }

    #[test]
    fn the_cost_profile_is_a_builtin_name_or_a_file_that_loads() {
        for name in crate::pricing::profile::BUILTIN_NAMES {
            let c = load_str(&format!("[policy]\ncost_profile = {name:?}\n"), "t").unwrap();
            assert_eq!(c.policy.cost_profile, name);
        }
        let dir = std::env::temp_dir().join(format!("mergetune-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg_path = dir.join("m.toml");
        // A path is checked when the file is loaded: missing, then valid.
        let prof = dir.join("mine.toml");
        let text = format!(
            "[policy]\ncost_profile = {:?}\n",
            prof.display().to_string()
        );
        std::fs::write(&cfg_path, &text).unwrap();
        let e = load_file(&cfg_path).unwrap_err().to_string();
        assert!(
            e.contains("policy.cost_profile") && e.contains("mine.toml"),
            "{e}"
        );
        std::fs::write(&prof, crate::pricing::profile::LKML_2008).unwrap();
        assert!(load_file(&cfg_path).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn wrong_type_is_a_parse_error_naming_the_key() {
        let e = load_str("[daemon]\ninterval_ms = \"fast\"\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("interval_ms"), "{e}");
    }
}
