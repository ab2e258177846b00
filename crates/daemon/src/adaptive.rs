//! One tick of mergetune, shared by every world: read counters through [`BlockFs`], turn
//! them into windows, ask the pure policy, apply through the [`Actuator`], and return the
//! decisions with their reasons. The real loop (`service::TickLoop`), dry-run and the simulator all
//! call [`Daemon::tick`]; only the `BlockFs` and the state store differ.

use crate::actuator::{Actuator, PersistChange};
use crate::controller::Controller;
use crate::snapshot::{DaemonSnapshot, DeviceSnapshot, PricingSnapshot};
use crate::state::MemoryStore;
use mergetune_kernel::blockfs::BlockFs;
use mergetune_kernel::devices::DeviceInfo;
use mergetune_kernel::diskstats::{
    DiskStat, Diskstats, DiskstatsHealth, HealthReport, parse_diskstats_into,
};
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::Config;
use mergetune_logic::decision::{Decision, Level};
use mergetune_logic::devices::Management;
use mergetune_logic::policy::{Caps, PolicyState};
use mergetune_logic::pricing::live::{LivePricing, TickBios};
use mergetune_logic::pricing::price::Shape;
use mergetune_logic::pricing::source::PricingSource;
use mergetune_logic::sampler::{Counters, Delta, SampleSet, Sampler, Window, WindowAcc};
use std::collections::{BTreeMap, HashMap};
use tracing::{info, warn};

mod device_tick;
mod membership;
mod slice_tuner;

use device_tick::DeviceTick;
pub use slice_tuner::SliceWrites;

use crate::snapshot::DaemonCounters;

/// The merge ladder's tunables.
pub const LADDER: [Tunable; 2] = [Tunable::Nomerges, Tunable::FrontMerges];
/// The slice tuner's tunables: every knob of every scheduler's table.
pub fn slices() -> &'static [Tunable] {
    mergetune_logic::tuners::slice_tunables()
}
/// A warning about an unreadable tunable is repeated at most this often per device.
const READ_WARN_EVERY_MS: u64 = 600_000;

/// Everything mergetune tracks about one device.
///
/// The parts a tick does not touch on every device (the slice tuner's state, used only
/// when it is on and a window closed; the last decision, written only when there is one)
/// are boxed: every tick walks all devices several times, and at 1024 devices the less
/// room each takes the more of them stay in cache.
#[derive(Debug, Clone)]
pub struct DeviceRuntime {
    pub info: DeviceInfo,
    /// The disk behind the name when it was found (None where the world does not say):
    /// another disk under the name is a new device, not a change by someone else.
    pub identity: Option<mergetune_kernel::devices::DeviceIdentity>,
    /// A tick found another disk under the name: the next rescan finds it afresh.
    pub another_disk: bool,
    /// A loop device re-attached to the same backing file while mergetune held records of
    /// it: a value equal to mergetune's may be an operator's (see membership.rs).
    pub reattached: bool,
    pub management: Management,
    pub policy: PolicyState,
    pub window: WindowAcc,
    /// The rungs of the merge ladder this device offers.
    pub caps: Caps,
    pub last_window: Option<Window>,
    /// When `last_window` closed.
    pub last_window_ms: u64,
    /// Scheduler slice tuning (`logic::slices`, `adaptive/slice_tuner.rs`).
    pub slices: Box<mergetune_logic::slices::SliceState>,
    /// The slice tuner's failed writes in a row and when it may write again (their own
    /// backoff: a slice tunable that cannot be written does not hold up the ladder's).
    pub slice_writes: Box<SliceWrites>,
    /// The counters of the last tick alone, for the device table.
    pub last_tick: Option<Window>,
    pub last_tick_ms: u64,
    pub last_reason: mergetune_logic::policy::Reason,
    pub last_decision: Option<Box<Decision>>,
    /// A failed write is retried no earlier than this.
    pub retry_after_ms: u64,
    /// Failed writes in a row: their exponential backoff and what of them is logged.
    pub write_backoff: crate::actuator::WriteBackoff,
    /// The last warning about an unreadable tunable, to repeat it rarely.
    pub read_warned_ms: Option<u64>,
    /// sense: the bio tap's duty cycle and samples at L3 (crates/daemon/src/sense.rs).
    pub sense: crate::sense::DeviceSense,
    /// What a step down would save here, as last priced (shown by status and /metrics).
    pub worth: mergetune_logic::pricing::worth::Worth,
    /// This tick's counters (`None` when the tick gave no delta: first sight, a reset, or
    /// no line in diskstats). Kept on the device, not in a map by name: a tick then
    /// allocates nothing per device for them.
    pub tick_counters: Option<Counters>,
    /// The hourly cap's refusal was logged for the current run of changes at the cap (said
    /// once; said again after the count fell under the cap and reached it again).
    pub cap_noted: bool,
    /// A time field of its diskstats line went backwards, and it was said.
    pub time_back_noted: bool,
    /// The device's line in the last read of diskstats, tried first at the next: the
    /// kernel prints the devices in the same order each time, so a tick finds each line
    /// with one compare of names instead of a search.
    pub diskstats_line: Option<usize>,
}

pub struct Daemon {
    cfg: Config,
    actuator: Actuator,
    sampler: Sampler,
    devices: BTreeMap<String, DeviceRuntime>,
    force_rescan: bool,
    /// Devices a reload cleared of their hands-off mark: rediscovered at the next tick.
    pending_rediscover: Vec<String>,
    /// Per device, the last error reading its queue attributes at a rescan: warned once,
    /// again only when it changes, and "readable again" when it clears.
    attr_read_errors: BTreeMap<String, String>,
    /// Per loop device re-attached to the same backing file while records of it were
    /// kept, the `diskseq` that was said (the warning is once per re-attach).
    reattached_noted: BTreeMap<String, u64>,
    /// Loop devices seen detached, with the disk they were before (see membership.rs).
    detached: BTreeMap<String, mergetune_kernel::devices::DeviceIdentity>,
    /// A reload happened: devices out of mergetune's care are looked at afresh at the next
    /// rescan (their values then, not those from before they left, are the originals).
    refresh_unmanaged: bool,
    diskstats_health: DiskstatsHealth,
    /// The last read of diskstats, parsed, and what the sampler made of it: kept only for
    /// their buffers, which the next tick overwrites (no allocation per device per tick).
    diskstats: Diskstats,
    samples: SampleSet,
    /// The time to the next tick, decided at the end of each tick: `interval_ms`, or the
    /// L3 watch interval while a managed device is at L3.
    next_step_ms: u64,
    /// Half the step that led to this tick: the tolerance of window lengths.
    slack_ms: u64,
    pub counters: DaemonCounters,
    /// `[policy] cost_profile`: what not merging saves, priced into each device's caps:
    /// live (the merge path sampled on this host) or a profile.
    pricing: PricingSource,
    /// The live measurement (idle unless `pricing` is live).
    live: LivePricing,
    /// `[pricing] fallback_profile`: prices the devices while live pricing's sampler
    /// cannot run here.
    fallback: Option<PricingSource>,
    /// `uname -r`, read at the first rescan, for matching a profile.
    kernel_release: Option<String>,
}

impl Daemon {
    pub fn new(cfg: Config, actuator: Actuator) -> Self {
        let cfg_interval = cfg.daemon.interval_ms;
        let pricing = crate::pricing::source(&cfg);
        let fallback = crate::pricing::fallback(&cfg);
        Daemon {
            cfg,
            actuator,
            sampler: Sampler::new(),
            devices: BTreeMap::new(),
            force_rescan: true,
            pending_rediscover: Vec::new(),
            attr_read_errors: BTreeMap::new(),
            reattached_noted: BTreeMap::new(),
            detached: BTreeMap::new(),
            refresh_unmanaged: false,
            diskstats_health: DiskstatsHealth::new(),
            diskstats: Diskstats::default(),
            samples: SampleSet::default(),
            next_step_ms: cfg_interval,
            slack_ms: cfg_interval / 2,
            counters: DaemonCounters::default(),
            pricing,
            live: LivePricing::default(),
            fallback,
            kernel_release: None,
        }
    }

    /// Under live pricing, opens the merge-path sampler once before the first tick, so
    /// that a host where it cannot run says so at start (one warning naming the fix) and in
    /// `status` and /metrics from the first tick.
    pub fn check_sampler(
        &mut self,
        now_ms: u64,
        fs: &mut dyn mergetune_kernel::blockfs::MergeSampler,
    ) {
        if matches!(self.pricing, PricingSource::Live) {
            crate::pricing::check_at_start(&mut self.live, now_ms, &self.cfg.pricing, fs);
            if let Some(f) = self.fallback_pricing() {
                warn!(
                    "pricing: the devices are priced by [pricing] fallback_profile {} ({}) until the sampler opens",
                    f.name(),
                    f.origin()
                );
            }
        }
    }

    /// Whether the live sampler's prices are the devices' now: live pricing, and the
    /// sampler can run or no fallback profile stands in for it.
    fn live_prices(&self) -> bool {
        matches!(self.pricing, PricingSource::Live) && self.fallback_pricing().is_none()
    }

    /// `[pricing] fallback_profile` while it prices the devices in the sampler's place
    /// (live pricing, and the sampler cannot run).
    fn fallback_pricing(&self) -> Option<&PricingSource> {
        let live = matches!(self.pricing, PricingSource::Live);
        self.fallback
            .as_ref()
            .filter(|_| live && self.live.unavailable())
    }

    /// The adaptive daemon for the simulator: originals kept in memory, no real clock.
    pub fn simulated(cfg: Config) -> Self {
        Daemon::new(cfg, Actuator::new(false, Box::new(MemoryStore::default())))
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn devices(&self) -> &BTreeMap<String, DeviceRuntime> {
        &self.devices
    }

    pub fn actuator(&self) -> &Actuator {
        &self.actuator
    }

    /// `queue/nomerges` of a device as mergetune last read or wrote it.
    pub fn nomerges_of(&self, name: &str) -> Option<String> {
        self.actuator
            .expected(name, Tunable::Nomerges)
            .map(str::to_string)
            .or_else(|| self.devices.get(name)?.info.nomerges.clone())
    }

    /// `queue/nomerges` of a device when mergetune first saw it.
    pub fn original_nomerges(&self, name: &str) -> Option<String> {
        self.actuator
            .first_seen(name, Tunable::Nomerges)
            .map(str::to_string)
    }

    /// Takes a new (already validated) config; device membership is re-evaluated at the
    /// next tick, policy state is kept.
    ///
    /// A reload is also how an operator clears a device that was left alone because
    /// someone else changed its tunables: it is forgotten and rediscovered from scratch,
    /// taking its current values as the new originals (managed again if nomerges is 0).
    pub fn reload(&mut self, cfg: Config) {
        self.pricing = crate::pricing::source(&cfg);
        self.fallback = crate::pricing::fallback(&cfg);
        self.cfg = cfg;
        self.force_rescan = true;
        self.refresh_unmanaged = true;
        let foreign: Vec<String> = self
            .devices
            .keys()
            .filter(|n| {
                self.actuator.any_theirs(n, &LADDER) || self.actuator.any_theirs(n, slices())
            })
            .cloned()
            .collect();
        self.pending_rediscover.extend(foreign);
    }

    /// One tick at `now_ms` (ms since the daemon started, real or virtual).
    pub fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        self.slack_ms = self.next_step_ms / 2;
        let _ = self.actuator.retry_persist();
        let (decisions, watching) = self.tick_inner(now_ms, fs);
        self.log_persist_change();
        self.next_step_ms = self.step_after_tick(watching);
        self.counters.state_persisted = self.actuator.persisted();
        self.counters.state_save_errors = self.actuator.save_errors();
        decisions
    }

    /// The state file's health, logged once per change of state (docs/operator.md): the
    /// failed saves in between are counted (`mergetune_state_save_errors_total`), not logged.
    fn log_persist_change(&mut self) {
        match self.actuator.take_persist_change() {
            Some(PersistChange::Failing(e)) => warn!(
                "{e}; the originals are kept in memory and restored on exit, no tunable is written until the state file can be saved (said once; `mergetune_state_persisted` shows it)"
            ),
            Some(PersistChange::Persisted { records }) => info!(
                "state file {} written and read back: {records} original value(s) persisted",
                self.actuator.store_name()
            ),
            None => {}
        }
    }

    /// The time to the next tick: while a managed device is at L3 (merges invisible, only a
    /// workload change shows that some are being missed) the counters are read every
    /// `l3_watch_interval_ms`, so a sequential phase starting there runs unmerged for one
    /// short tick instead of a whole interval. Reading the counters costs microseconds.
    pub fn next_tick_in_ms(&self) -> u64 {
        self.next_step_ms
    }

    /// `watching`: how closely the devices must be watched, as the tick's walk of them
    /// found; `None` when the tick did not walk them (diskstats unreadable).
    fn step_after_tick(&self, watching: Option<Watch>) -> u64 {
        let watching = watching.unwrap_or_else(|| {
            self.devices
                .values()
                .map(watch_of)
                .max()
                .unwrap_or_default()
        });
        match watching {
            _ if !self.cfg.policy.enabled => self.cfg.daemon.interval_ms,
            Watch::Interval => self.cfg.daemon.interval_ms,
            // With the watch turned off (0) the answer, too, waits for the interval.
            Watch::AskedSample if self.cfg.policy.l3_watch_interval_ms > 0 => {
                self.cfg.l3_tick_ms().min(ASKED_SAMPLE_TICK_MS)
            }
            Watch::AtL3 | Watch::AskedSample => self.cfg.l3_tick_ms(),
        }
    }

    /// The tick's work; with its decisions, whether a managed device is at L3 after it
    /// (`None` when diskstats could not be read and no device was looked at).
    fn tick_inner(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> (Vec<Decision>, Option<Watch>) {
        let rescan_every = u64::from(self.cfg.daemon.rescan_every_ticks.max(1));
        if self.force_rescan || self.counters.ticks.is_multiple_of(rescan_every) {
            self.force_rescan = false;
            self.rescan(now_ms, fs);
        }
        self.counters.ticks += 1;
        if !self.read_diskstats(fs) {
            return (Vec::new(), None);
        }
        // Taken out for the walk of the devices, and put back for their buffers.
        let parsed = std::mem::take(&mut self.diskstats);
        let samples = std::mem::take(&mut self.samples);
        self.take_tick_counters(&parsed.devices, &samples.deltas, now_ms);
        self.note_time_went_back(&parsed.devices, &samples.time_went_back);
        self.diskstats = parsed;
        self.samples = samples;

        if matches!(self.pricing, PricingSource::Live) {
            self.tick_pricing(now_ms, fs);
        }
        let mut decisions = Vec::new();
        let live_prices = self.live_prices();
        let mut step = DeviceTick {
            cfg: &self.cfg,
            actuator: &mut self.actuator,
            live: live_prices.then_some(&self.live),
            slack_ms: self.slack_ms,
            counters: &mut self.counters,
            force_rescan: &mut self.force_rescan,
            now_ms,
            fs,
        };
        // One walk of the devices: at 1024 devices each walk is a cache miss per device.
        let mut watching = Watch::Interval;
        for (name, dev) in self.devices.iter_mut() {
            if dev.management.is_managed() {
                decisions.extend(step.ladder(name, dev));
                decisions.extend(step.slices(name, dev));
            }
            // sense: a device that is no longer managed (or was just handed off) keeps no
            // tap open.
            if !dev.management.is_managed() {
                dev.sense.stop(name, step.fs);
            }
            watching = watching.max(watch_of(dev));
        }
        self.counters.decisions += decisions.len() as u64;
        (decisions, Some(watching))
    }

    /// Reads and parses diskstats into `self.diskstats`, logs what is wrong with the read,
    /// and samples it into `self.samples`. False when it could not be read.
    fn read_diskstats(&mut self, fs: &mut dyn BlockFs) -> bool {
        let health = match fs.read_diskstats() {
            Ok(bytes) => {
                parse_diskstats_into(bytes, &mut self.diskstats);
                self.diskstats_health.review(&self.diskstats)
            }
            Err(e) => {
                let h = self.diskstats_health.read_failed(&e.to_string());
                self.note_diskstats_health(&h);
                return false;
            }
        };
        self.note_diskstats_health(&health);
        self.sampler
            .observe_into(&self.diskstats.devices, &mut self.samples);
        true
    }

    /// Hands each known device its counters of this tick (none when the tick gave no delta:
    /// first sight, a reset, or no line in this read), restarting its window where the
    /// counters cannot be diffed.
    fn take_tick_counters(&mut self, lines: &[DiskStat], deltas: &[Delta], now_ms: u64) {
        // Built only when a device is not on the line it was on last time.
        let mut line_of: Option<HashMap<&str, usize>> = None;
        for (name, dev) in self.devices.iter_mut() {
            dev.tick_counters = None;
            let hinted = dev
                .diskstats_line
                .filter(|&i| lines.get(i).is_some_and(|d| d.name == *name));
            dev.diskstats_line = hinted.or_else(|| {
                let by_name = line_of.get_or_insert_with(|| {
                    let names = lines.iter().map(|d| d.name.as_str());
                    names.zip(0..).collect()
                });
                by_name.get(name.as_str()).copied()
            });
            let Some(line) = dev.diskstats_line else {
                continue;
            };
            let prev_tick_ms = dev.last_tick_ms;
            dev.last_tick_ms = now_ms;
            match deltas[line] {
                Delta::First => dev.window.restart(now_ms),
                Delta::Reset => {
                    self.counters.counter_resets += 1;
                    info!(device = %name, "{name}: counters went backwards (device re-added?): window restarted");
                    dev.window.restart(now_ms);
                }
                Delta::Counters(c) => {
                    dev.last_tick = Some(Window {
                        counters: c,
                        duration_ms: now_ms.saturating_sub(prev_tick_ms),
                        sensed: None,
                    });
                    dev.tick_counters = Some(c);
                }
            }
        }
    }

    /// A device whose diskstats time fields went backwards (taken as no time passed, not a
    /// reset: its window and its bios go on) is said once.
    fn note_time_went_back(&mut self, lines: &[DiskStat], at: &[usize]) {
        for &i in at {
            let Some(dev) = lines
                .get(i)
                .and_then(|l| self.devices.get_mut(l.name.as_str()))
            else {
                continue;
            };
            if !dev.time_back_noted {
                dev.time_back_noted = true;
                info!(device = %dev.info.name, "{}: a /proc/diskstats time field (ms reading, writing or doing I/O) went backwards while its I/O counters grew: taken as no time passed that tick, not a device reset (seen on 6.12 with mq-deadline and bfq; said once per device)", dev.info.name);
            }
        }
    }

    /// The live pricing's tick: the bios of this tick by scheduler and level, and whether
    /// a managed device below L3 is busy (only then is sampling worth its cost).
    fn tick_pricing(&mut self, now_ms: u64, fs: &mut dyn BlockFs) {
        let min_bios = self.cfg.policy.min_window_bios;
        let wanted = self.cfg.policy.enabled
            && self.devices.values().any(|d| {
                d.management.is_managed()
                    && d.policy.level() < Level::L3
                    && d.last_window.is_some_and(|w| w.counters.bios() >= min_bios)
            });
        let dry_run = self.actuator.dry_run();
        let actuator = &self.actuator;
        let bios = self.devices.values().filter_map(|d| {
            // A device not in this read of diskstats has no bios to count.
            d.diskstats_line?;
            let managed = d.management.is_managed();
            // The path its bios take is the kernel's: a dry run's would-be level is not
            // written, so its bios still take the path of the level it found (and its
            // samples are priced as the live daemon's would be at that level).
            let real = dry_run.then(|| {
                actuator
                    .first_seen(&d.info.name, Tunable::Nomerges)
                    .and_then(|v| v.trim().parse().ok())
                    .map_or(Level::L0, |n| Level::of_tunables(n, false))
            });
            let level = if managed {
                real.unwrap_or(d.policy.level())
            } else {
                // someone else's device: its own nomerges says which path its bios take
                Level::of_tunables(
                    d.info
                        .nomerges
                        .as_deref()
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0),
                    false,
                )
            };
            Some(TickBios {
                name: &d.info.name,
                managed,
                scheduler: d.info.known_scheduler(),
                level,
                counters: d.tick_counters.as_ref(),
                // A dry run's level changes are not the kernel's: they disturb no span.
                level_since_ms: (managed && !dry_run).then_some(d.policy.history.since_ms),
                busy_shape: d
                    .last_window
                    .filter(|w| {
                        managed && d.policy.level() < Level::L3 && w.counters.bios() >= min_bios
                    })
                    .and_then(|w| Shape::of_counters(&w.counters)),
                busy_bios_per_sec: d.last_window.map_or(0.0, |w| w.bios_per_sec()),
            })
        });
        crate::pricing::tick(&mut self.live, now_ms, &self.cfg.pricing, fs, wanted, bios);
    }

    /// Logs what [`DiskstatsHealth`] says of this read, and counts a read with a problem.
    fn note_diskstats_health(&mut self, h: &HealthReport) {
        self.counters.diskstats_errors += u64::from(h.problem);
        for w in &h.warnings {
            warn!("diskstats: {w}");
        }
        for c in &h.cleared {
            info!("diskstats: {c}");
        }
    }

    /// What the daemon shows the exporters: per device its management, level, mode,
    /// windows and last decision, and the daemon's counters.
    pub fn snapshot(&self) -> DaemonSnapshot {
        DaemonSnapshot {
            dry_run: self.actuator.dry_run(),
            policy_enabled: self.cfg.policy.enabled,
            max_changes_per_hour: self.cfg.policy.max_changes_per_hour,
            interval_ms: self.cfg.daemon.interval_ms,
            counters: self.counters.clone(),
            pricing: PricingSnapshot {
                name: self.pricing.name().to_string(),
                origin: self.pricing.origin(),
                sampler_unavailable: matches!(self.pricing, PricingSource::Live)
                    .then(|| self.live.unavailable_why().map(str::to_string))
                    .flatten(),
                fallback: self.fallback_pricing().map(|f| f.name().to_string()),
                floor: self.cfg.pricing.floor(),
            },
            devices: self
                .devices
                .values()
                .map(|d| {
                    let name = &d.info.name;
                    let managed = d.management.is_managed();
                    DeviceSnapshot {
                        name: name.clone(),
                        scheduler: d.info.scheduler.clone(),
                        management: d.management.clone(),
                        level: managed.then_some(d.policy.level()),
                        mode: managed.then_some(d.policy.mode()),
                        nomerges: self.nomerges_of(name),
                        original_nomerges: self.original_nomerges(name),
                        reattached: d.reattached,
                        last_window: d.last_window,
                        last_tick: d.last_tick,
                        last_reason: d.last_reason.clone(),
                        last_decision: d.last_decision.as_deref().cloned(),
                        next_probe_at_ms: if managed {
                            d.policy.next_probe_at_ms()
                        } else {
                            None
                        },
                        worth: managed.then_some(d.worth),
                        changes_last_hour: managed.then(|| d.policy.history.changes.count()),
                        possible_decisions: if managed {
                            mergetune_logic::policy::possible::possible_decisions(
                                d.caps,
                                &self.cfg.policy,
                            )
                        } else {
                            Vec::new()
                        },
                    }
                })
                .collect(),
        }
    }
}

/// How closely the ticks must come, for all devices: the closest one needs. A managed
/// device at L3, whose merges only a workload change shows, needs the L3 watch interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Watch {
    /// No device at L3: every `interval_ms`.
    #[default]
    Interval,
    /// A managed device at L3: every `l3_watch_interval_ms`.
    AtL3,
    /// A device at L3 waits for a sample of its bio tap asked out of turn: every
    /// [`ASKED_SAMPLE_TICK_MS`], so that the answer is read as soon as it is whole.
    AskedSample,
}

/// The tick while an asked sample is open. A sample is whole at `max_sample_bios` (512 by
/// default): 17 ms of a 30,000 bios/s scan. At the 50 ms watch tick the answer to a rise
/// in rate waited a whole tick more than the probe it replaced, and a batched scan at L3
/// loses 43% of its throughput while it waits (the simulator's `bursty_spikes`, in the
/// 2008 figures: 0.45% of a 15 s spike, over the 0.4% every phase must stay under).
pub const ASKED_SAMPLE_TICK_MS: u64 = 10;

fn watch_of(dev: &DeviceRuntime) -> Watch {
    if !dev.management.is_managed() || dev.policy.mode() != mergetune_logic::policy::Mode::AtL3 {
        Watch::Interval
    } else if dev.sense.duty.open_was_asked() {
        Watch::AskedSample
    } else {
        Watch::AtL3
    }
}

impl Controller for Daemon {
    fn interval_ms(&self) -> u64 {
        self.cfg.daemon.interval_ms
    }
    fn next_tick_in_ms(&self) -> u64 {
        Daemon::next_tick_in_ms(self)
    }
    fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        Daemon::tick(self, now_ms, fs)
    }
    fn restore(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        self.restore_all(now_ms, fs)
    }
    fn snapshot(&self) -> Option<DaemonSnapshot> {
        Some(Daemon::snapshot(self))
    }
}
