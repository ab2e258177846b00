//! Prometheus metrics: one registry ([`prometheus`]) fed from the daemon after every tick,
//! and the `/status` snapshot taken at the same moment.
//!
//! The daemon's tick loop calls [`Metrics::update`] with the controller it just ticked and
//! the decisions of that tick; the metrics read the controller's
//! [`mergetune_daemon::snapshot::DaemonSnapshot`], never its internals. The HTTP side
//! ([`crate::http`]) only ever reads, through [`crate::http::Documents`]
//! ([`Metrics::render`], [`Metrics::status_json`]). Both sides take one short lock, so a
//! scrape never sees half a tick. The `/metrics` body is encoded by the refresh itself
//! (once per [`Metrics::update`], by the crate's own `TextEncoder`, the text format 0.0.4),
//! never by a scrape: a scrape costs a copy of a reference-counted buffer, whatever the
//! number of scrapers, and the endpoint's thread needs no priority of its own to leave the
//! tick loop its CPU. Until the first scrape nothing is encoded at all, so a daemon that
//! nobody scrapes pays nothing for it. The encoder writes families sorted by name, series
//! sorted by label values and labels by name: the text is the same for the same state.
//!
//! Naming follows the Prometheus guide: `mergetune_` prefix, base units (seconds, ratios
//! 0..1), `_total` on counters, a `device` label, and no label with unbounded values (kinds
//! and nomerges values outside the known sets are reported as `other`). The full list with
//! meanings is in docs/metrics.md.

use crate::http::Documents;
use crate::status::StatusSnapshot;
use bytes::Bytes;
use mergetune_daemon::controller::Controller;
use mergetune_daemon::snapshot::{DaemonCounters, DaemonSnapshot, DeviceSnapshot};
use mergetune_logic::decision::{Decision, DecisionKind};
use mergetune_logic::policy::possible::PossibleDecision;
use mergetune_logic::sampler::Window;
use prometheus::core::Collector;
use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use mergetune_daemon::snapshot::TickTiming;
pub use mergetune_logic::config::{DEFAULT_LISTEN, MetricsConfig, parse_listen};

mod labels;

use labels::{
    BuildLabels, DecisionLabels, DeviceLabels, DirectionLabels, Family, LabelSet, ManagementLabels,
    PRICING_BASES, PROBE_OUTCOMES, PricingLabels, ProbeLabels, ProfileLabels, ResultLabels,
    SavingLabels, UnknownPriceLabels, decision_labels, dl,
};

pub use labels::MANAGEMENT_STATES;

fn tick_buckets() -> Vec<f64> {
    vec![
        0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
        0.5, 1.0,
    ]
}

fn lag_buckets() -> Vec<f64> {
    vec![
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    ]
}

/// Every family the endpoint exports, by what it is about.
struct Families {
    daemon: DaemonFamilies,
    device: DeviceFamilies,
    pricing: PricingFamilies,
}

/// The daemon's own families: what it runs as, its ticks and its error counters.
struct DaemonFamilies {
    build_info: Family<BuildLabels, IntGaugeVec>,
    dry_run: IntGauge,
    policy_enabled: IntGauge,
    write_errors: IntCounter,
    diskstats_errors: IntCounter,
    diskstats_resets: IntCounter,
    state_save_errors: IntCounter,
    tunable_read_errors: IntCounter,
    state_persisted: IntGauge,
    max_changes_per_hour: IntGauge,
    ticks: IntCounter,
    reloads: Family<ResultLabels, IntCounterVec>,
    tick_duration: Histogram,
    tick_lag: Histogram,
}

/// The per-device families: the ladder, the tunables and the last window.
struct DeviceFamilies {
    nomerges: Family<DeviceLabels, IntGaugeVec>,
    level: Family<DeviceLabels, IntGaugeVec>,
    management: Family<ManagementLabels, IntGaugeVec>,
    merge_ratio: Family<DirectionLabels, GaugeVec>,
    bios_rate: Family<DeviceLabels, GaugeVec>,
    decisions: Family<DecisionLabels, IntCounterVec>,
    level_changes: Family<DeviceLabels, IntCounterVec>,
    probes: Family<ProbeLabels, IntCounterVec>,
    changes_last_hour: Family<DeviceLabels, IntGaugeVec>,
    change_cap_reached: Family<DeviceLabels, IntGaugeVec>,
}

/// How step downs are priced: the profile, each device's basis and saving, the floor.
struct PricingFamilies {
    cost_profile_info: Family<ProfileLabels, IntGaugeVec>,
    sampler_unavailable: IntGauge,
    pricing: Family<PricingLabels, IntGaugeVec>,
    unknown: Family<UnknownPriceLabels, IntGaugeVec>,
    saving: Family<SavingLabels, GaugeVec>,
    saving_floor: Gauge,
}

/// The registry's prefix of every family name.
const PREFIX: &str = "mergetune";

/// What the registry of [`Metrics::build`] is filled with: each call registers one family.
struct Registrar {
    registry: Registry,
    /// The full name of every family registered, in order ([`Metrics::family_names`]).
    names: std::cell::RefCell<Vec<String>>,
}

impl Registrar {
    /// `help` as it appears after `# HELP name`: the sentence and its full stop.
    fn opts(name: &str, help: &str) -> Opts {
        Opts::new(name, format!("{help}."))
    }

    fn add<C: Collector + Clone + 'static>(&self, c: C) -> C {
        // The names are constants of this file, distinct and valid: every test that builds
        // a `Metrics` checks it.
        self.registry
            .register(Box::new(c.clone()))
            .expect("metric families have distinct, valid names");
        self.names
            .borrow_mut()
            .extend(c.desc().iter().map(|d| format!("{PREFIX}_{}", d.fq_name)));
        c
    }

    fn int_gauge(&self, name: &str, help: &str) -> IntGauge {
        self.add(IntGauge::with_opts(Self::opts(name, help)).expect("a valid name"))
    }

    fn gauge(&self, name: &str, help: &str) -> Gauge {
        self.add(Gauge::with_opts(Self::opts(name, help)).expect("a valid name"))
    }

    fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.add(IntCounter::with_opts(Self::opts(name, help)).expect("a valid name"))
    }

    fn histogram(&self, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
        let opts = HistogramOpts::new(name, format!("{help}.")).buckets(buckets);
        self.add(Histogram::with_opts(opts).expect("a valid name and buckets"))
    }

    fn int_gauges<L: LabelSet>(&self, name: &str, help: &str) -> Family<L, IntGaugeVec> {
        let v = IntGaugeVec::new(Self::opts(name, help), L::NAMES).expect("valid names");
        Family::new(self.add(v))
    }

    fn gauges<L: LabelSet>(&self, name: &str, help: &str) -> Family<L, GaugeVec> {
        let v = GaugeVec::new(Self::opts(name, help), L::NAMES).expect("valid names");
        Family::new(self.add(v))
    }

    fn counters<L: LabelSet>(&self, name: &str, help: &str) -> Family<L, IntCounterVec> {
        let v = IntCounterVec::new(Self::opts(name, help), L::NAMES).expect("valid names");
        Family::new(self.add(v))
    }
}

/// Every family the endpoint exports, registered under the `mergetune_` prefix. Counters
/// are named with their `_total`; each HELP as docs/metrics.md has it.
fn families(r: &Registrar) -> Families {
    Families {
        daemon: daemon_families(r),
        device: device_families(r),
        pricing: pricing_families(r),
    }
}

/// The families of [`Families::daemon`], registered.
fn daemon_families(r: &Registrar) -> DaemonFamilies {
    DaemonFamilies {
        build_info: r.int_gauges(
            "build_info",
            "Always 1; the version of the running mergetune in the version label",
        ),
        dry_run: r.int_gauge(
            "dry_run",
            "1 when the daemon runs in dry-run (decides and logs, writes nothing), else 0",
        ),
        policy_enabled: r.int_gauge(
            "policy_enabled",
            "1 when [policy] enabled is true (decisions are written), else 0",
        ),
        write_errors: r.counter(
            "sysfs_write_errors_total",
            "Writes of a device tunable that failed (the state is kept and the write retried later)",
        ),
        diskstats_errors: r.counter(
            "diskstats_errors_total",
            "Ticks where /proc/diskstats could not be read or had unparsable lines",
        ),
        diskstats_resets: r.counter(
            "diskstats_resets_total",
            "Times a device's /proc/diskstats counters went backwards (device removed and re-added): its window restarted",
        ),
        state_save_errors: r.counter(
            "state_save_errors_total",
            "Failed saves of state.json, the record of original values (the records stay in memory and the save is retried)",
        ),
        tunable_read_errors: r.counter(
            "tunable_read_errors_total",
            "Failed reads of a device tunable (queue/nomerges, queue/iosched/...)",
        ),
        state_persisted: r.int_gauge(
            "state_persisted",
            "1 when state.json holds every original value mergetune has recorded in memory, 0 while a record exists only in memory (a crash now would lose it)",
        ),
        max_changes_per_hour: r.int_gauge(
            "policy_max_changes_per_hour",
            "[policy] max_changes_per_hour: the cap on tunable changes per device in any rolling hour",
        ),
        ticks: r.counter(
            "ticks_total",
            "Ticks (samples of the counters) taken",
        ),
        reloads: r.counters(
            "config_reloads_total",
            "Config reloads (SIGHUP) by result: success, failure (the old config stays)",
        ),
        tick_duration: r.histogram(
            "tick_duration_seconds",
            "Wall time of one tick: read counters, decide, write tunables", tick_buckets(),
        ),
        tick_lag: r.histogram(
            "tick_lag_seconds",
            "How late a tick started against its schedule", lag_buckets(),
        ),
    }
}

/// The families of [`Families::device`], registered.
fn device_families(r: &Registrar) -> DeviceFamilies {
    DeviceFamilies {
        nomerges: r.int_gauges(
            "device_nomerges",
            "queue/nomerges of the device as mergetune last read or wrote it (0 all merges, 1 simple merges only, 2 none)",
        ),
        level: r.int_gauges(
            "device_ladder_level",
            "Merge-ladder level of a managed device: 0 all merges ... 3 no merges",
        ),
        management: r.int_gauges(
            "device_management",
            "Always 1, for the device's current management state: managed, excluded, unsupported or admin-owned",
        ),
        merge_ratio: r.gauges(
            "device_merge_ratio",
            "Bios merged / bios submitted in the device's last closed decision window, per direction (0..1)",
        ),
        bios_rate: r.gauges(
            "device_bios_per_second",
            "Bios submitted per second (completed + merged, both directions) in the device's last closed decision window",
        ),
        decisions: r.counters(
            "decisions_total",
            "Decisions taken, by device, kind (step_down, disable, enable, probe, probe_succeeded, probe_failed, probe_inconclusive, restore, ...), tunable(s) written (attr) and their values from/to; in dry-run, decisions that would have been taken",
        ),
        level_changes: r.counters(
            "device_level_changes_total",
            "Moves of a managed device between merge-ladder levels that wrote a tunable (what [policy] max_changes_per_hour caps), from 0 when the device is first managed; in dry-run, moves that would have been written",
        ),
        probes: r.counters(
            "probes_total",
            "Probes (merging turned back on to measure) by device and outcome: started, succeeded (merging stays on), failed (merging off again), inconclusive (only idle windows: merging stays on)",
        ),
        changes_last_hour: r.int_gauges(
            "device_changes_last_hour",
            "Level changes of a managed device in the last hour, counted toward [policy] max_changes_per_hour",
        ),
        change_cap_reached: r.int_gauges(
            "device_change_cap_reached",
            "1 while a managed device's level changes in the last hour reach [policy] max_changes_per_hour (steps down are refused; merging stays on), else 0",
        ),
    }
}

/// The families of [`Families::pricing`], registered.
fn pricing_families(r: &Registrar) -> PricingFamilies {
    PricingFamilies {
        cost_profile_info: r.int_gauges(
            "cost_profile_info",
            "Always 1, for what prices a step down: profile \"live\" (the merge path sampled on this host) or a cost profile's name, and its origin",
        ),
        sampler_unavailable: r.int_gauge(
            "merge_sampler_unavailable",
            "1 while live pricing's merge-path sampler cannot run on this host (perf_event_open refused: kernel.perf_event_paranoid above 2, or no CAP_PERFMON; the startup log and status say why and the fix), else 0; devices are then priced by [pricing] fallback_profile where it applies (mergetune_device_pricing basis profile), else unknown",
        ),
        pricing: r.int_gauges(
            "device_pricing",
            "Always 1, for how a managed device's saving is known: basis live, profile or unknown (then nothing steps down)",
        ),
        unknown: r.int_gauges(
            "device_price_unknown",
            "1 where a managed device's saving is unknown (nothing steps down there), with why: not_measured_yet, measuring, other_workload, unattributed (its merge-path samples cannot be told from another device's), no_sampler or no_matching_profile",
        ),
        saving: r.gauges(
            "device_merge_saving_cpu_ratio",
            "CPU seconds per second a step down to a level would save on the device (live pricing): the estimate and the bounds of its 95% interval",
        ),
        saving_floor: r.gauge(
            "merge_saving_floor_cpu_ratio",
            "The floor a live saving's lower bound must reach for a step down, CPU seconds per second ([pricing] saving_floor_percent_cpu / 100)",
        ),
    }
}

struct Inner {
    generation: u64,
    /// Devices with per-device series, to drop the series of a device that went away.
    exported: BTreeSet<String>,
    /// The daemon's counters at the last update, to add only the difference.
    last: DaemonCounters,
    status: StatusSnapshot,
    max_lag_seconds: f64,
    /// The cost profile `cost_profile_info` has a series for.
    profile: Option<ProfileLabels>,
    /// Devices with a probe started and no outcome counted yet.
    open_probes: BTreeSet<String>,
    /// Per device, the possible decisions whose series were last started at 0: they are
    /// created again only when the list changes (a reload, new rungs).
    zeroed: BTreeMap<String, Vec<PossibleDecision>>,
    /// The `/metrics` body of the last refresh; `None` until first asked for, and from then
    /// on re-encoded by every refresh.
    text: Option<Bytes>,
    /// Encodings of the registry so far (one per refresh once scraped, plus the first
    /// scrape): what [`Metrics::encodings`] reports.
    encodings: u64,
    status_json: Option<(u64, Bytes)>,
}

/// The exporter's state: registry, families and the last `/status` snapshot.
pub struct Metrics {
    registry: Registry,
    /// Every family registered, exported once it has a series.
    names: Vec<String>,
    f: Families,
    inner: Mutex<Inner>,
    /// Served by `mergetune simulate`: `mergetune_simulated 1` and `/status` say so.
    simulated: bool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The daemon's metrics.
    pub fn new() -> Self {
        Self::build(false)
    }

    /// The metrics of `mergetune simulate --metrics-listen`: the same families, plus
    /// `mergetune_simulated 1`, so that no dashboard takes the simulator's devices for the
    /// host's.
    pub fn simulated() -> Self {
        Self::build(true)
    }

    fn build(simulated: bool) -> Self {
        let r = Registrar {
            registry: Registry::new_custom(Some(PREFIX.into()), None).expect("a valid prefix"),
            names: std::cell::RefCell::new(Vec::new()),
        };
        let f = families(&r);
        if simulated {
            r.int_gauge(
                "simulated",
                "1: these metrics come from mergetune simulate (simulated devices in virtual time), not from a host's devices",
            )
            .set(1);
        }
        f.daemon
            .build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_string(),
            })
            .set(1);
        // Nothing recorded yet is nothing unsaved.
        f.daemon.state_persisted.set(1);
        for result in ["success", "failure"] {
            f.daemon
                .reloads
                .get_or_create(&ResultLabels {
                    result: result.to_string(),
                })
                .get();
        }
        Metrics {
            registry: r.registry,
            names: r.names.into_inner(),
            f,
            inner: Mutex::new(Inner {
                generation: 1,
                exported: BTreeSet::new(),
                last: DaemonCounters::default(),
                status: StatusSnapshot {
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ..StatusSnapshot::default()
                },
                max_lag_seconds: 0.0,
                profile: None,
                open_probes: BTreeSet::new(),
                zeroed: BTreeMap::new(),
                text: None,
                encodings: 0,
                status_json: None,
            }),
            simulated,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere must not take the exporter (or the daemon) down with it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the controller after a tick: per-device gauges, decision and probe counters,
    /// the daemon's own counters, tick timing and the `/status` snapshot. A controller
    /// without a snapshot (a fixed baseline) exports nothing.
    pub fn update(&self, controller: &dyn Controller, decisions: &[Decision], t: TickTiming) {
        if let Some(snap) = controller.snapshot() {
            self.update_from(&snap, decisions, t);
        }
    }

    /// [`Metrics::update`] from a snapshot already taken.
    pub fn update_from(&self, daemon: &DaemonSnapshot, decisions: &[Decision], t: TickTiming) {
        let mut inner = self.lock();
        let f = &self.f;
        f.daemon.dry_run.set(i64::from(daemon.dry_run));
        f.daemon
            .policy_enabled
            .set(i64::from(daemon.policy_enabled));
        f.daemon
            .max_changes_per_hour
            .set(i64::from(daemon.max_changes_per_hour));

        let mut present = BTreeSet::new();
        for dev in &daemon.devices {
            present.insert(dev.name.clone());
            self.export_device(dev, daemon.max_changes_per_hour);
            self.zero_decisions(dev, &mut inner.zeroed);
        }
        let gone: Vec<String> = inner.exported.difference(&present).cloned().collect();
        for name in gone {
            self.forget_device(&name);
        }
        inner.exported = present;

        self.count_decisions(decisions, &mut inner.open_probes);
        self.add_counters(&daemon.counters, &inner.last);
        let pricing = &daemon.pricing;
        f.pricing.saving_floor.set(pricing.floor.ratio());
        f.pricing
            .sampler_unavailable
            .set(i64::from(pricing.sampler_unavailable.is_some()));
        let profile = ProfileLabels {
            profile: pricing.name.clone(),
            origin: pricing.origin.clone(),
        };
        if !pricing.name.is_empty() && inner.profile.as_ref() != Some(&profile) {
            f.pricing.cost_profile_info.clear();
            f.pricing.cost_profile_info.get_or_create(&profile).set(1);
            inner.profile = Some(profile);
        }
        inner.last = daemon.counters.clone();

        self.observe_timing(&mut inner, t);

        let max_lag = inner.max_lag_seconds;
        inner.status = StatusSnapshot::of(daemon, t, max_lag);
        inner.status.simulated = self.simulated;
        inner.generation += 1;
        self.encode(&mut inner);
    }

    /// One device's series: nomerges, management state, level (and its probe counters at
    /// 0), merge ratio per direction, saving and bio rate; a series whose value is unknown
    /// now is removed.
    fn export_device(&self, dev: &DeviceSnapshot, max_changes_per_hour: u32) {
        let f = &self.f;
        let name = &dev.name;
        let labels = dl(name);
        match dev
            .nomerges
            .as_deref()
            .and_then(|v| v.trim().parse::<i64>().ok())
        {
            Some(v) => {
                f.device.nomerges.get_or_create(&labels).set(v);
            }
            None => {
                f.device.nomerges.remove(&labels);
            }
        }
        // One series per device, for its current state (a change drops the old one).
        let label = dev.management.label();
        for state in MANAGEMENT_STATES {
            let l = ManagementLabels {
                device: name.clone(),
                management: state.to_string(),
            };
            if state == label {
                f.device.management.get_or_create(&l).set(1);
            } else {
                f.device.management.remove(&l);
            }
        }
        match dev.changes_last_hour {
            Some(n) => {
                f.device
                    .changes_last_hour
                    .get_or_create(&labels)
                    .set(i64::from(n));
                f.device
                    .change_cap_reached
                    .get_or_create(&labels)
                    .set(i64::from(n >= max_changes_per_hour));
            }
            None => {
                f.device.changes_last_hour.remove(&labels);
                f.device.change_cap_reached.remove(&labels);
            }
        }
        if let Some(level) = dev.level {
            f.device
                .level
                .get_or_create(&labels)
                .set(i64::from(level.index()));
            // At 0 from the device's first sight: a counter that first appears at 1 hides
            // its first step from `increase()` (the flapping rule missed a cap hit so).
            f.device.level_changes.get_or_create(&labels).get();
            for outcome in PROBE_OUTCOMES {
                f.device
                    .probes
                    .get_or_create(&ProbeLabels {
                        device: name.clone(),
                        outcome: outcome.to_string(),
                    })
                    .get();
            }
        } else {
            f.device.level.remove(&labels);
        }

        self.export_window(name, dev.last_window.as_ref());
        self.export_saving(name, dev.worth.as_ref());
    }

    /// The device's last closed window: merge ratio per direction and bio rate.
    fn export_window(&self, name: &str, w: Option<&Window>) {
        let f = &self.f;
        let labels = dl(name);
        for (direction, bios, ratio) in [
            (
                "read",
                w.map(|w| w.counters.read_bios()),
                w.map(|w| w.counters.read_merge_ratio()),
            ),
            (
                "write",
                w.map(|w| w.counters.write_bios()),
                w.map(|w| w.counters.write_merge_ratio()),
            ),
        ] {
            let l = DirectionLabels {
                device: name.to_string(),
                direction: direction.to_string(),
            };
            match (bios, ratio) {
                (Some(b), Some(r)) if b > 0 && r.is_finite() => {
                    f.device.merge_ratio.get_or_create(&l).set(r);
                }
                _ => {
                    f.device.merge_ratio.remove(&l);
                }
            }
        }
        match w.map(|w| w.bios_per_sec()).filter(|r| r.is_finite()) {
            Some(r) => {
                f.device.bios_rate.get_or_create(&labels).set(r);
            }
            None => {
                f.device.bios_rate.remove(&labels);
            }
        }
    }

    /// Every decision the ladder can take on the device, at 0 until taken: a series first
    /// seen at 1 is a step `increase()` and `rate()` never see. Decision series are history
    /// and stay, so a list already started is not walked again.
    fn zero_decisions(
        &self,
        dev: &DeviceSnapshot,
        zeroed: &mut BTreeMap<String, Vec<PossibleDecision>>,
    ) {
        if dev.possible_decisions.is_empty()
            || zeroed.get(&dev.name) == Some(&dev.possible_decisions)
        {
            return;
        }
        for d in &dev.possible_decisions {
            self.f
                .device
                .decisions
                .get_or_create(&decision_labels(&dev.name, d.kind, &d.changes))
                .get();
        }
        zeroed.insert(dev.name.clone(), dev.possible_decisions.clone());
    }

    /// Each decision under its kind, tunable and values, and each probe under its outcome:
    /// every probe started ends in exactly one. A probe that finds merges worth a trial of
    /// L2 goes on as that trial (decision `trial`, not `probe_succeeded`): it succeeded, and
    /// is counted so, or `MergetuneMergingOffWhileItPays` would never see that path.
    fn count_decisions(&self, decisions: &[Decision], open_probes: &mut BTreeSet<String>) {
        let f = &self.f;
        for d in decisions {
            let device = d.device.clone();
            f.device
                .decisions
                .get_or_create(&decision_labels(&device, d.kind, &d.changes))
                .inc();
            if d.kind.moves_the_ladder() && !d.changes.is_empty() {
                f.device.level_changes.get_or_create(&dl(&device)).inc();
            }
            let outcome = match d.kind {
                DecisionKind::Probe => {
                    open_probes.insert(device.clone());
                    "started"
                }
                DecisionKind::Trial if open_probes.remove(&device) => "succeeded",
                DecisionKind::ProbeSucceeded => "succeeded",
                DecisionKind::ProbeFailed => "failed",
                DecisionKind::ProbeInconclusive => "inconclusive",
                _ => continue,
            };
            if outcome != "started" {
                open_probes.remove(&device);
            }
            f.device
                .probes
                .get_or_create(&ProbeLabels {
                    device,
                    outcome: outcome.to_string(),
                })
                .inc();
        }
    }

    /// The daemon's counters, by what they grew since the last update.
    fn add_counters(&self, c: &DaemonCounters, last: &DaemonCounters) {
        let f = &self.f;
        let add = |counter: &IntCounter, now: u64, before: u64| {
            // A smaller value means a new daemon behind the same exporter: count it whole.
            counter.inc_by(if now >= before { now - before } else { now });
        };
        add(&f.daemon.write_errors, c.write_errors, last.write_errors);
        add(
            &f.daemon.diskstats_errors,
            c.diskstats_errors,
            last.diskstats_errors,
        );
        add(
            &f.daemon.diskstats_resets,
            c.counter_resets,
            last.counter_resets,
        );
        add(
            &f.daemon.state_save_errors,
            c.state_save_errors,
            last.state_save_errors,
        );
        add(
            &f.daemon.tunable_read_errors,
            c.tunable_read_errors,
            last.tunable_read_errors,
        );
        f.daemon.state_persisted.set(i64::from(c.state_persisted));
        add(&f.daemon.ticks, c.ticks, last.ticks);
    }

    /// Counts a tick that refreshes nothing else: its duration and lag go into the
    /// histograms and the worst lag; the device series and `/status` stay as the last
    /// [`Metrics::update`] left them, and scrapes keep the text of that update, so the tick
    /// shows at the next refresh. The daemon loop calls this on the L3 watch's extra ticks,
    /// so that the per-device refresh runs at most once per `interval_ms`.
    pub fn observe_tick(&self, t: TickTiming) {
        let mut inner = self.lock();
        self.observe_timing(&mut inner, t);
    }

    fn observe_timing(&self, inner: &mut Inner, t: TickTiming) {
        let f = &self.f;
        if t.duration_seconds.is_finite() && t.duration_seconds >= 0.0 {
            f.daemon.tick_duration.observe(t.duration_seconds);
        }
        let lag = if t.lag_seconds.is_finite() {
            t.lag_seconds.max(0.0)
        } else {
            0.0
        };
        f.daemon.tick_lag.observe(lag);
        inner.max_lag_seconds = inner.max_lag_seconds.max(lag);
    }

    /// A managed device's pricing basis and, where live, its savings per level.
    fn export_saving(&self, name: &str, worth: Option<&mergetune_logic::pricing::worth::Worth>) {
        use mergetune_logic::pricing::worth::{Basis, SavingUnit};
        let f = &self.f;
        let basis = worth.map(|w| match w.basis {
            Basis::Live { .. } => "live",
            Basis::Profile => "profile",
            Basis::Unknown { .. } => "unknown",
            Basis::Unpriced => "unpriced",
        });
        for b in PRICING_BASES {
            let l = PricingLabels {
                device: name.to_string(),
                basis: b.to_string(),
            };
            if Some(b) == basis {
                f.pricing.pricing.get_or_create(&l).set(1);
            } else {
                f.pricing.pricing.remove(&l);
            }
        }
        let why = worth.and_then(|w| match w.basis {
            Basis::Unknown { why } => Some(crate::status::UnknownReason::of(why)),
            _ => None,
        });
        for r in crate::status::UnknownReason::ALL {
            let l = UnknownPriceLabels {
                device: name.to_string(),
                why: r.label().to_string(),
            };
            if Some(r) == why {
                f.pricing.unknown.get_or_create(&l).set(1);
            } else {
                f.pricing.unknown.remove(&l);
            }
        }
        for level in mergetune_logic::decision::Level::ALL {
            let saving = worth
                .and_then(|w| w.saving(level))
                .filter(|s| s.unit == SavingUnit::CpuMsPerSec);
            for (bound, v) in [
                ("estimate", saving.map(|s| s.value)),
                ("lower", saving.and_then(|s| s.ci).map(|c| c[0])),
                ("upper", saving.and_then(|s| s.ci).map(|c| c[1])),
            ] {
                let l = SavingLabels {
                    device: name.to_string(),
                    level: level.index().to_string(),
                    bound: bound.to_string(),
                };
                match v.filter(|v| v.is_finite()) {
                    Some(v) => {
                        f.pricing.saving.get_or_create(&l).set(v / 1000.0);
                    }
                    None => {
                        f.pricing.saving.remove(&l);
                    }
                }
            }
        }
    }

    fn forget_device(&self, name: &str) {
        let f = &self.f;
        self.export_saving(name, None);
        let labels = dl(name);
        f.device.nomerges.remove(&labels);
        f.device.level.remove(&labels);
        f.device.bios_rate.remove(&labels);
        f.device.changes_last_hour.remove(&labels);
        f.device.change_cap_reached.remove(&labels);
        for state in MANAGEMENT_STATES {
            f.device.management.remove(&ManagementLabels {
                device: name.to_string(),
                management: state.to_string(),
            });
        }
        for direction in ["read", "write"] {
            f.device.merge_ratio.remove(&DirectionLabels {
                device: name.to_string(),
                direction: direction.to_string(),
            });
        }
        // Decision and probe counters stay: they are history, and a device that comes back
        // under the same name continues them.
    }

    /// Counts a config reload (SIGHUP) by its result.
    pub fn config_reload(&self, ok: bool) {
        let mut inner = self.lock();
        self.f
            .daemon
            .reloads
            .get_or_create(&ResultLabels {
                result: if ok { "success" } else { "failure" }.to_string(),
            })
            .inc();
        // `/status` holds nothing a reload changes (its document stays the last update's).
        self.encode(&mut inner);
    }

    /// Encodes the registry if a scraper has asked for it, so that the scrapes until the
    /// next refresh only copy.
    fn encode(&self, inner: &mut Inner) {
        if inner.text.is_some() {
            inner.text = Some(self.encode_text(inner));
        }
    }

    fn encode_text(&self, inner: &mut Inner) -> Bytes {
        inner.encodings += 1;
        // Sized from the last body: it grows by a device's series at most between two.
        let last = inner.text.as_ref().map_or(16 * 1024, |b| b.len() + 4096);
        let mut text = String::with_capacity(last);
        // It fails only on a family without series, which `gather` leaves out.
        if let Err(e) = TextEncoder::new().encode_utf8(&self.registry.gather(), &mut text) {
            text = format!("# encoding failed: {e}\n");
        }
        Bytes::from(text)
    }

    /// The exposition, the Prometheus text format 0.0.4, as the last refresh encoded it.
    /// Only the first request encodes (from then on every refresh does).
    pub fn render(&self) -> Bytes {
        let mut inner = self.lock();
        if let Some(b) = &inner.text {
            return b.clone();
        }
        let bytes = self.encode_text(&mut inner);
        inner.text = Some(bytes.clone());
        bytes
    }

    /// The full name of every metric family this exporter can export (with the
    /// `mergetune_` prefix; a counter's with its `_total`), whether or not it has a series
    /// yet: what docs/metrics.md must list.
    pub fn family_names(&self) -> &[String] {
        &self.names
    }

    /// How many times the registry has been encoded: once per refresh once scraped, plus
    /// the first scrape; never once per scrape. For tests and benches.
    pub fn encodings(&self) -> u64 {
        self.lock().encodings
    }

    /// The `/status` document (JSON), serialised at most once per update.
    pub fn status_json(&self) -> Bytes {
        let mut inner = self.lock();
        let generation = inner.generation;
        if let Some((g, b)) = &inner.status_json
            && *g == generation
        {
            return b.clone();
        }
        let json = serde_json::to_vec_pretty(&inner.status)
            .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}").into_bytes());
        let bytes = Bytes::from(json);
        inner.status_json = Some((generation, bytes.clone()));
        bytes
    }

    /// The last `/status` snapshot.
    pub fn status(&self) -> StatusSnapshot {
        self.lock().status.clone()
    }
}

impl Documents for Metrics {
    fn render(&self) -> Bytes {
        Metrics::render(self)
    }
    fn status_json(&self) -> Bytes {
        Metrics::status_json(self)
    }
}
