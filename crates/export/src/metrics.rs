//! Prometheus metrics: one registry ([`prometheus_client`]) fed from the daemon after every
//! tick, and the `/status` snapshot taken at the same moment.
//!
//! The daemon's tick loop calls [`Metrics::update`] with the controller it just ticked and
//! the decisions of that tick; the metrics read the controller's
//! [`mergetune_daemon::snapshot::DaemonSnapshot`], never its internals. The HTTP side
//! ([`crate::http`]) only ever reads, through [`crate::http::Documents`]
//! ([`Metrics::render`], [`Metrics::status_json`]). Both sides take one short lock, so a
//! scrape never sees half a tick. The `/metrics` body is encoded by the refresh itself
//! (once per [`Metrics::update`], in each format a scraper has asked for), never by a
//! scrape: a scrape costs a copy of a reference-counted buffer, whatever the number of
//! scrapers, and the endpoint's thread needs no priority of its own to leave the tick loop
//! its CPU. Until a format is first asked for it is not encoded at all, so a daemon that
//! nobody scrapes pays nothing for it.
//!
//! Naming follows the Prometheus guide: `mergetune_` prefix, base units (seconds, ratios
//! 0..1), `_total` on counters, a `device` label, and no label with unbounded values (kinds
//! and nomerges values outside the known sets are reported as `other`). The full list with
//! meanings is in docs/metrics.md.

use crate::http::Documents;
use crate::status::StatusSnapshot;
use bytes::Bytes;
use mergetune_daemon::controller::Controller;
use mergetune_daemon::snapshot::{DaemonCounters, DaemonSnapshot};
use mergetune_logic::decision::Decision;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};

pub use crate::exposition::finish_exposition;
pub use crate::status::TickTiming;
pub use mergetune_logic::config::{DEFAULT_LISTEN, MetricsConfig, parse_listen};

mod labels;

use labels::{
    BuildLabels, DecisionLabels, DeviceLabels, DirectionLabels, ManagementLabels, PRICING_BASES,
    PROBE_OUTCOMES, PricingLabels, ProbeLabels, ProfileLabels, ResultLabels, SavingLabels,
    attr_label, dl, value_label,
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

struct Families {
    build_info: Family<BuildLabels, Gauge>,
    dry_run: Gauge,
    policy_enabled: Gauge,
    nomerges: Family<DeviceLabels, Gauge>,
    level: Family<DeviceLabels, Gauge>,
    management: Family<ManagementLabels, Gauge>,
    merge_ratio: Family<DirectionLabels, Gauge<f64, AtomicU64>>,
    bios_rate: Family<DeviceLabels, Gauge<f64, AtomicU64>>,
    decisions: Family<DecisionLabels, Counter>,
    probes: Family<ProbeLabels, Counter>,
    write_errors: Counter,
    diskstats_errors: Counter,
    diskstats_resets: Counter,
    state_save_errors: Counter,
    tunable_read_errors: Counter,
    state_persisted: Gauge,
    max_changes_per_hour: Gauge,
    ticks: Counter,
    reloads: Family<ResultLabels, Counter>,
    tick_duration: Histogram,
    tick_lag: Histogram,
    cost_profile_info: Family<ProfileLabels, Gauge>,
    pricing: Family<PricingLabels, Gauge>,
    saving: Family<SavingLabels, Gauge<f64, AtomicU64>>,
    saving_floor: Gauge<f64, AtomicU64>,
}

struct Inner {
    generation: u64,
    /// Devices with per-device series, to drop the series of a device that went away.
    exported: BTreeSet<String>,
    /// The daemon's counters at the last update, to add only the difference.
    last: DaemonCounters,
    status: StatusSnapshot,
    max_lag_seconds: f64,
    /// The `/metrics` bodies of the last refresh, per format; `None` until first asked for,
    /// and from then on re-encoded by every refresh.
    text: Option<Bytes>,
    openmetrics: Option<Bytes>,
    /// Encodings of the registry so far (one per refresh with a wanted format, plus a
    /// format's first request): what [`Metrics::encodings`] reports.
    encodings: u64,
    status_json: Option<(u64, Bytes)>,
}

/// The exporter's state: registry, families and the last `/status` snapshot.
pub struct Metrics {
    registry: Registry,
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
        let f = Families {
            build_info: Family::default(),
            dry_run: Gauge::default(),
            policy_enabled: Gauge::default(),
            nomerges: Family::default(),
            level: Family::default(),
            management: Family::default(),
            merge_ratio: Family::default(),
            bios_rate: Family::default(),
            decisions: Family::default(),
            probes: Family::default(),
            write_errors: Counter::default(),
            diskstats_errors: Counter::default(),
            diskstats_resets: Counter::default(),
            state_save_errors: Counter::default(),
            tunable_read_errors: Counter::default(),
            state_persisted: Gauge::default(),
            max_changes_per_hour: Gauge::default(),
            ticks: Counter::default(),
            reloads: Family::default(),
            tick_duration: Histogram::new(tick_buckets()),
            tick_lag: Histogram::new(lag_buckets()),
            cost_profile_info: Family::default(),
            pricing: Family::default(),
            saving: Family::default(),
            saving_floor: Gauge::default(),
        };
        let mut r = Registry::with_prefix("mergetune");
        r.register(
            "build_info",
            "Always 1; the version of the running mergetune in the version label",
            f.build_info.clone(),
        );
        r.register(
            "dry_run",
            "1 when the daemon runs in dry-run (decides and logs, writes nothing), else 0",
            f.dry_run.clone(),
        );
        r.register(
            "policy_enabled",
            "1 when [policy] enabled is true (decisions are written), else 0",
            f.policy_enabled.clone(),
        );
        r.register(
            "device_nomerges",
            "queue/nomerges of the device as mergetune last read or wrote it (0 all merges, 1 simple merges only, 2 none)",
            f.nomerges.clone(),
        );
        r.register(
            "device_ladder_level",
            "Merge-ladder level of a managed device: 0 all merges ... 3 no merges",
            f.level.clone(),
        );
        r.register(
            "device_management",
            "Always 1, for the device's current management state: managed, excluded, unsupported or admin-owned",
            f.management.clone(),
        );
        r.register(
            "device_merge_ratio",
            "Bios merged / bios submitted in the device's last closed decision window, per direction (0..1)",
            f.merge_ratio.clone(),
        );
        r.register(
            "device_bios_per_second",
            "Bios submitted per second (completed + merged, both directions) in the device's last closed decision window",
            f.bios_rate.clone(),
        );
        r.register(
            "decisions",
            "Decisions taken, by device, kind (step_down, disable, enable, probe, probe_succeeded, probe_failed, restore, ...), tunable(s) written (attr) and their values from/to; in dry-run, decisions that would have been taken",
            f.decisions.clone(),
        );
        r.register(
            "probes",
            "Probes (merging turned back on to measure) by device and outcome: started, succeeded (merging stays on), failed (merging off again)",
            f.probes.clone(),
        );
        r.register(
            "sysfs_write_errors",
            "Writes of a device tunable that failed (the state is kept and the write retried later)",
            f.write_errors.clone(),
        );
        r.register(
            "diskstats_errors",
            "Ticks where /proc/diskstats could not be read or had unparsable lines",
            f.diskstats_errors.clone(),
        );
        r.register(
            "diskstats_resets",
            "Times a device's /proc/diskstats counters went backwards (device removed and re-added): its window restarted",
            f.diskstats_resets.clone(),
        );
        r.register(
            "state_save_errors",
            "Failed saves of state.json, the record of original values (the records stay in memory and the save is retried)",
            f.state_save_errors.clone(),
        );
        r.register(
            "tunable_read_errors",
            "Failed reads of a device tunable (queue/nomerges, queue/iosched/...)",
            f.tunable_read_errors.clone(),
        );
        r.register(
            "state_persisted",
            "1 when state.json holds every original value mergetune has recorded in memory, 0 while a record exists only in memory (a crash now would lose it)",
            f.state_persisted.clone(),
        );
        r.register(
            "policy_max_changes_per_hour",
            "[policy] max_changes_per_hour: the cap on tunable changes per device in any rolling hour",
            f.max_changes_per_hour.clone(),
        );
        r.register(
            "ticks",
            "Ticks (samples of the counters) taken",
            f.ticks.clone(),
        );
        r.register(
            "config_reloads",
            "Config reloads (SIGHUP) by result: success, failure (the old config stays)",
            f.reloads.clone(),
        );
        r.register(
            "tick_duration_seconds",
            "Wall time of one tick: read counters, decide, write tunables",
            f.tick_duration.clone(),
        );
        r.register(
            "tick_lag_seconds",
            "How late a tick started against its schedule",
            f.tick_lag.clone(),
        );
        r.register(
            "cost_profile_info",
            "Always 1, for what prices a step down: profile \"live\" (the merge path sampled on this host) or a cost profile's name, and its origin",
            f.cost_profile_info.clone(),
        );
        r.register(
            "device_pricing",
            "Always 1, for how a managed device's saving is known: basis live, profile or unknown (then nothing steps down)",
            f.pricing.clone(),
        );
        r.register(
            "device_merge_saving_cpu_ratio",
            "CPU seconds per second a step down to a level would save on the device (live pricing): the estimate and the bounds of its 95% interval",
            f.saving.clone(),
        );
        r.register(
            "merge_saving_floor_cpu_ratio",
            "The floor a live saving's lower bound must reach for a step down, CPU seconds per second ([pricing] saving_floor_percent_cpu / 100)",
            f.saving_floor.clone(),
        );
        if simulated {
            let g: Gauge = Gauge::default();
            g.set(1);
            r.register(
                "simulated",
                "1: these metrics come from mergetune simulate (simulated devices in virtual time), not from a host's devices",
                g,
            );
        }
        f.build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_string(),
            })
            .set(1);
        // Nothing recorded yet is nothing unsaved.
        f.state_persisted.set(1);
        for result in ["success", "failure"] {
            f.reloads
                .get_or_create(&ResultLabels {
                    result: result.to_string(),
                })
                .get();
        }
        Metrics {
            registry: r,
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
                text: None,
                openmetrics: None,
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
        f.dry_run.set(i64::from(daemon.dry_run));
        f.policy_enabled.set(i64::from(daemon.policy_enabled));
        f.max_changes_per_hour
            .set(i64::from(daemon.max_changes_per_hour));

        let mut present = BTreeSet::new();
        for dev in &daemon.devices {
            let name = &dev.name;
            present.insert(name.clone());
            let labels = dl(name);
            match dev
                .nomerges
                .as_deref()
                .and_then(|v| v.trim().parse::<i64>().ok())
            {
                Some(v) => {
                    f.nomerges.get_or_create(&labels).set(v);
                }
                None => {
                    f.nomerges.remove(&labels);
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
                    f.management.get_or_create(&l).set(1);
                } else {
                    f.management.remove(&l);
                }
            }
            if let Some(level) = dev.level {
                f.level.get_or_create(&labels).set(i64::from(level.index()));
                for outcome in PROBE_OUTCOMES {
                    f.probes
                        .get_or_create(&ProbeLabels {
                            device: name.clone(),
                            outcome: outcome.to_string(),
                        })
                        .get();
                }
            } else {
                f.level.remove(&labels);
            }
            let w = dev.last_window.as_ref();
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
                    device: name.clone(),
                    direction: direction.to_string(),
                };
                match (bios, ratio) {
                    (Some(b), Some(r)) if b > 0 && r.is_finite() => {
                        f.merge_ratio.get_or_create(&l).set(r);
                    }
                    _ => {
                        f.merge_ratio.remove(&l);
                    }
                }
            }
            self.export_saving(name, dev.worth.as_ref());
            match w.map(|w| w.bios_per_sec()).filter(|r| r.is_finite()) {
                Some(r) => {
                    f.bios_rate.get_or_create(&labels).set(r);
                }
                None => {
                    f.bios_rate.remove(&labels);
                }
            }
        }
        let gone: Vec<String> = inner.exported.difference(&present).cloned().collect();
        for name in gone {
            self.forget_device(&name);
        }
        inner.exported = present;

        for d in decisions {
            let device = d.device.clone();
            f.decisions
                .get_or_create(&DecisionLabels {
                    device: device.clone(),
                    kind: d.kind.as_str().to_string(),
                    attr: attr_label(&d.changes),
                    from: value_label(&d.changes, |c| &c.from),
                    to: value_label(&d.changes, |c| &c.to),
                })
                .inc();
            let outcome = match d.kind.as_str() {
                "probe" => "started",
                "probe_succeeded" => "succeeded",
                "probe_failed" => "failed",
                _ => continue,
            };
            f.probes
                .get_or_create(&ProbeLabels {
                    device,
                    outcome: outcome.to_string(),
                })
                .inc();
        }

        let c = &daemon.counters;
        let add = |counter: &Counter, now: u64, before: u64| {
            // A smaller value means a new daemon behind the same exporter: count it whole.
            counter.inc_by(if now >= before { now - before } else { now });
        };
        add(&f.write_errors, c.write_errors, inner.last.write_errors);
        add(
            &f.diskstats_errors,
            c.diskstats_errors,
            inner.last.diskstats_errors,
        );
        add(
            &f.diskstats_resets,
            c.counter_resets,
            inner.last.counter_resets,
        );
        add(
            &f.state_save_errors,
            c.state_save_errors,
            inner.last.state_save_errors,
        );
        add(
            &f.tunable_read_errors,
            c.tunable_read_errors,
            inner.last.tunable_read_errors,
        );
        f.state_persisted.set(i64::from(c.state_persisted));
        add(&f.ticks, c.ticks, inner.last.ticks);
        f.saving_floor.set(daemon.floor_ms_per_sec / 1000.0);
        let profile = ProfileLabels {
            profile: daemon.pricing_name.clone(),
            origin: daemon.pricing_origin.clone(),
        };
        if !daemon.pricing_name.is_empty() && f.cost_profile_info.get(&profile).is_none() {
            f.cost_profile_info.clear();
            f.cost_profile_info.get_or_create(&profile).set(1);
        }
        inner.last = c.clone();

        self.observe_timing(&mut inner, t);

        let max_lag = inner.max_lag_seconds;
        inner.status = StatusSnapshot::of(daemon, t, max_lag);
        inner.status.simulated = self.simulated;
        inner.generation += 1;
        self.encode(&mut inner);
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
            f.tick_duration.observe(t.duration_seconds);
        }
        let lag = if t.lag_seconds.is_finite() {
            t.lag_seconds.max(0.0)
        } else {
            0.0
        };
        f.tick_lag.observe(lag);
        inner.max_lag_seconds = inner.max_lag_seconds.max(lag);
    }

    /// A managed device's pricing basis and, where live, its savings per level.
    fn export_saving(&self, name: &str, worth: Option<&mergetune_logic::policy::Worth>) {
        use mergetune_logic::policy::worth::{Basis, SavingUnit};
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
                f.pricing.get_or_create(&l).set(1);
            } else {
                f.pricing.remove(&l);
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
                        f.saving.get_or_create(&l).set(v / 1000.0);
                    }
                    None => {
                        f.saving.remove(&l);
                    }
                }
            }
        }
    }

    fn forget_device(&self, name: &str) {
        let f = &self.f;
        self.export_saving(name, None);
        let labels = dl(name);
        f.nomerges.remove(&labels);
        f.level.remove(&labels);
        f.bios_rate.remove(&labels);
        for state in MANAGEMENT_STATES {
            f.management.remove(&ManagementLabels {
                device: name.to_string(),
                management: state.to_string(),
            });
        }
        for direction in ["read", "write"] {
            f.merge_ratio.remove(&DirectionLabels {
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
            .reloads
            .get_or_create(&ResultLabels {
                result: if ok { "success" } else { "failure" }.to_string(),
            })
            .inc();
        inner.generation += 1;
        self.encode(&mut inner);
    }

    /// Encodes the registry once for every format a scraper has asked for (both come from
    /// one OpenMetrics encoding), so that the scrapes until the next refresh only copy.
    fn encode(&self, inner: &mut Inner) {
        let (text, openmetrics) = (inner.text.is_some(), inner.openmetrics.is_some());
        if !text && !openmetrics {
            return;
        }
        let om = self.encode_openmetrics(inner);
        if text {
            inner.text = Some(Bytes::from(finish_exposition(&om, false)));
        }
        if openmetrics {
            inner.openmetrics = Some(Bytes::from(finish_exposition(&om, true)));
        }
    }

    fn encode_openmetrics(&self, inner: &mut Inner) -> String {
        inner.encodings += 1;
        let mut om = String::with_capacity(16 * 1024);
        if prometheus_client::encoding::text::encode(&mut om, &self.registry).is_err() {
            om = "# encoding failed\n".to_string();
        }
        om
    }

    /// The exposition: the Prometheus text format 0.0.4 by default, OpenMetrics 1.0 when
    /// `openmetrics` is true, as the last refresh encoded it. Only the first request for a
    /// format encodes (from then on every refresh does).
    pub fn render(&self, openmetrics: bool) -> Bytes {
        let mut inner = self.lock();
        let slot = if openmetrics {
            &inner.openmetrics
        } else {
            &inner.text
        };
        if let Some(b) = slot {
            return b.clone();
        }
        let om = self.encode_openmetrics(&mut inner);
        let bytes = Bytes::from(finish_exposition(&om, openmetrics));
        let slot = if openmetrics {
            &mut inner.openmetrics
        } else {
            &mut inner.text
        };
        *slot = Some(bytes.clone());
        bytes
    }

    /// How many times the registry has been encoded: once per refresh for the formats in
    /// use, plus each format's first request; never once per scrape. For tests and benches.
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
    fn render(&self, openmetrics: bool) -> Bytes {
        Metrics::render(self, openmetrics)
    }
    fn status_json(&self) -> Bytes {
        Metrics::status_json(self)
    }
}
