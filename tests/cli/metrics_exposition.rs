//! The Prometheus exposition: a golden text for a fixed state, a parse with a real
//! text-format parser (type and help of every metric), and no dead metric (every registered
//! family gets a non-zero sample on some path of a scripted run).

use crate::configs::one_window_policy;
use crate::decisions::{applied, nomerges};
use crate::memkernel::{Load, MemDev, MemKernel, Tap, WriteFault};
use mergetune_daemon::actuator::Actuator;
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::snapshot::TickTiming;
use mergetune_daemon::state::{Loaded, MemoryStore, SavedState, StateError, StateStore};
use mergetune_export::metrics::Metrics;
use mergetune_logic::decision::Decision;

use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::Config;
use mergetune_logic::decision::{Applied, Change, DecisionKind, Level};
use mergetune_logic::devices::Management;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The in-memory kernel with these devices (name, nomerges) under mq-deadline, with a tap,
/// their counters growing by each device's traffic at every diskstats read (none until
/// set), merges hidden at nomerges=2 as the kernel does.
fn mem(devs: &[(&str, &str)]) -> MemKernel {
    let mut k = MemKernel {
        tap: Tap::ByLoad,
        advance_on_read: Some(0),
        ..MemKernel::default()
    };
    for (name, nomerges) in devs {
        k.add(
            name,
            MemDev::with_attrs(&[
                ("queue/nomerges", nomerges),
                ("queue/scheduler", "none [mq-deadline] kyber"),
                ("queue/rotational", "0"),
                ("queue/iosched/front_merges", "1"),
            ]),
        )
        .load = Load::Traffic((0, 0, 0, 0));
    }
    k
}

fn timing(now_ms: u64) -> TickTiming {
    TickTiming {
        now_ms,
        duration_seconds: 0.000_3,
        lag_seconds: 0.002,
    }
}

/// Two devices and a loop device, five ticks of steady traffic (one closed window), and two
/// decisions handed in as a tick would return them.
fn fixed_state() -> Metrics {
    let mut fs = mem(&[("sda", "0"), ("sdb", "1"), ("loop0", "0")]);
    fs.set_load("sda", Load::Traffic((900, 100, 400, 600)));
    fs.set_load("sdb", Load::Traffic((50, 0, 50, 0)));
    // Pinned, so that a change of the defaults does not change the golden text.
    let mut cfg = Config::default();
    cfg.daemon.interval_ms = 1000;
    cfg.policy.window_ticks = 5;
    cfg.policy.min_window_bios = 1000;
    let mut d = Daemon::simulated(cfg.clone());
    let m = Metrics::new();
    for t in 0..=cfg.policy.window_ticks as u64 {
        let now = t * cfg.daemon.interval_ms;
        let decisions = d.tick(now, &mut fs);
        assert!(
            decisions.is_empty(),
            "steady merging traffic decides nothing"
        );
        m.update(&d, &decisions, timing(now));
    }
    let decision =
        |kind: DecisionKind, from: &str, to: &str| applied(5000, "sda", kind, nomerges(from, to));
    m.update(
        &d,
        &[
            decision(DecisionKind::Disable, "0", "2"),
            decision(DecisionKind::Probe, "2", "0"),
        ],
        timing(6000),
    );
    m.config_reload(true);
    m
}

const GOLDEN: &str = r#"# HELP mergetune_build_info Always 1; the version of the running mergetune in the version label.
# TYPE mergetune_build_info gauge
mergetune_build_info{version="VERSION"} 1
# HELP mergetune_config_reloads_total Config reloads (SIGHUP) by result: success, failure (the old config stays).
# TYPE mergetune_config_reloads_total counter
mergetune_config_reloads_total{result="failure"} 0
mergetune_config_reloads_total{result="success"} 1
# HELP mergetune_cost_profile_info Always 1, for what prices a step down: profile "live" (the merge path sampled on this host) or a cost profile's name, and its origin.
# TYPE mergetune_cost_profile_info gauge
mergetune_cost_profile_info{origin="measured on this host",profile="live"} 1
# HELP mergetune_decisions_total Decisions taken, by device, kind (step_down, disable, enable, probe, probe_succeeded, probe_failed, probe_inconclusive, restore, ...), tunable(s) written (attr) and their values from/to; in dry-run, decisions that would have been taken.
# TYPE mergetune_decisions_total counter
mergetune_decisions_total{attr="front_merges",device="sda",from="0",kind="enable",to="1"} 0
mergetune_decisions_total{attr="front_merges",device="sda",from="1",kind="step_down",to="0"} 0
mergetune_decisions_total{attr="nomerges",device="sda",from="0",kind="disable",to="2"} 1
mergetune_decisions_total{attr="nomerges",device="sda",from="0",kind="probe_failed",to="2"} 0
mergetune_decisions_total{attr="nomerges",device="sda",from="0",kind="step_down",to="1"} 0
mergetune_decisions_total{attr="nomerges",device="sda",from="0",kind="trial",to="1"} 0
mergetune_decisions_total{attr="nomerges",device="sda",from="1",kind="disable",to="2"} 0
mergetune_decisions_total{attr="nomerges",device="sda",from="1",kind="enable",to="0"} 0
mergetune_decisions_total{attr="nomerges",device="sda",from="1",kind="trial_failed",to="0"} 0
mergetune_decisions_total{attr="nomerges",device="sda",from="2",kind="enable",to="0"} 0
mergetune_decisions_total{attr="nomerges",device="sda",from="2",kind="enable",to="1"} 0
mergetune_decisions_total{attr="nomerges",device="sda",from="2",kind="probe",to="0"} 1
mergetune_decisions_total{attr="nomerges+front_merges",device="sda",from="1+0",kind="enable",to="0+1"} 0
mergetune_decisions_total{attr="nomerges+front_merges",device="sda",from="2+0",kind="enable",to="0+1"} 0
mergetune_decisions_total{attr="nomerges+front_merges",device="sda",from="2+0",kind="probe",to="0+1"} 0
mergetune_decisions_total{attr="none",device="sda",from="none",kind="not_worth_it",to="none"} 0
mergetune_decisions_total{attr="none",device="sda",from="none",kind="probe_failed",to="none"} 0
mergetune_decisions_total{attr="none",device="sda",from="none",kind="probe_inconclusive",to="none"} 0
mergetune_decisions_total{attr="none",device="sda",from="none",kind="probe_succeeded",to="none"} 0
mergetune_decisions_total{attr="none",device="sda",from="none",kind="trial_succeeded",to="none"} 0
# HELP mergetune_device_bios_per_second Bios submitted per second (completed + merged, both directions) in the device's last closed decision window.
# TYPE mergetune_device_bios_per_second gauge
mergetune_device_bios_per_second{device="sda"} 2000
# HELP mergetune_device_change_cap_reached 1 while a managed device's level changes in the last hour reach [policy] max_changes_per_hour (steps down are refused; merging stays on), else 0.
# TYPE mergetune_device_change_cap_reached gauge
mergetune_device_change_cap_reached{device="sda"} 0
# HELP mergetune_device_changes_last_hour Level changes of a managed device in the last hour, counted toward [policy] max_changes_per_hour.
# TYPE mergetune_device_changes_last_hour gauge
mergetune_device_changes_last_hour{device="sda"} 0
# HELP mergetune_device_ladder_level Merge-ladder level of a managed device: 0 all merges ... 3 no merges.
# TYPE mergetune_device_ladder_level gauge
mergetune_device_ladder_level{device="sda"} 0
# HELP mergetune_device_level_changes_total Moves of a managed device between merge-ladder levels that wrote a tunable (what [policy] max_changes_per_hour caps), from 0 when the device is first managed; in dry-run, moves that would have been written.
# TYPE mergetune_device_level_changes_total counter
mergetune_device_level_changes_total{device="sda"} 2
# HELP mergetune_device_management Always 1, for the device's current management state: managed, excluded, unsupported or admin-owned.
# TYPE mergetune_device_management gauge
mergetune_device_management{device="loop0",management="excluded"} 1
mergetune_device_management{device="sda",management="managed"} 1
mergetune_device_management{device="sdb",management="admin-owned"} 1
# HELP mergetune_device_merge_ratio Bios merged / bios submitted in the device's last closed decision window, per direction (0..1).
# TYPE mergetune_device_merge_ratio gauge
mergetune_device_merge_ratio{device="sda",direction="read"} 0.1
mergetune_device_merge_ratio{device="sda",direction="write"} 0.6
# HELP mergetune_device_nomerges queue/nomerges of the device as mergetune last read or wrote it (0 all merges, 1 simple merges only, 2 none).
# TYPE mergetune_device_nomerges gauge
mergetune_device_nomerges{device="loop0"} 0
mergetune_device_nomerges{device="sda"} 0
mergetune_device_nomerges{device="sdb"} 1
# HELP mergetune_device_price_unknown 1 where a managed device's saving is unknown (nothing steps down there), with why: not_measured_yet, measuring, other_workload, unattributed (its merge-path samples cannot be told from another device's), no_sampler or no_matching_profile.
# TYPE mergetune_device_price_unknown gauge
mergetune_device_price_unknown{device="sda",why="not_measured_yet"} 1
# HELP mergetune_device_pricing Always 1, for how a managed device's saving is known: basis live, profile or unknown (then nothing steps down).
# TYPE mergetune_device_pricing gauge
mergetune_device_pricing{basis="unknown",device="sda"} 1
# HELP mergetune_diskstats_errors_total Ticks where /proc/diskstats could not be read or had unparsable lines.
# TYPE mergetune_diskstats_errors_total counter
mergetune_diskstats_errors_total 0
# HELP mergetune_diskstats_resets_total Times a device's /proc/diskstats counters went backwards (device removed and re-added): its window restarted.
# TYPE mergetune_diskstats_resets_total counter
mergetune_diskstats_resets_total 0
# HELP mergetune_dry_run 1 when the daemon runs in dry-run (decides and logs, writes nothing), else 0.
# TYPE mergetune_dry_run gauge
mergetune_dry_run 0
# HELP mergetune_merge_sampler_unavailable 1 while live pricing's merge-path sampler cannot run on this host (perf_event_open refused: kernel.perf_event_paranoid above 2, or no CAP_PERFMON; the startup log and status say why and the fix), else 0; devices are then priced by [pricing] fallback_profile where it applies (mergetune_device_pricing basis profile), else unknown.
# TYPE mergetune_merge_sampler_unavailable gauge
mergetune_merge_sampler_unavailable 0
# HELP mergetune_merge_saving_floor_cpu_ratio The floor a live saving's lower bound must reach for a step down, CPU seconds per second ([pricing] saving_floor_percent_cpu / 100).
# TYPE mergetune_merge_saving_floor_cpu_ratio gauge
mergetune_merge_saving_floor_cpu_ratio 0.005
# HELP mergetune_policy_enabled 1 when [policy] enabled is true (decisions are written), else 0.
# TYPE mergetune_policy_enabled gauge
mergetune_policy_enabled 1
# HELP mergetune_policy_max_changes_per_hour [policy] max_changes_per_hour: the cap on tunable changes per device in any rolling hour.
# TYPE mergetune_policy_max_changes_per_hour gauge
mergetune_policy_max_changes_per_hour 60
# HELP mergetune_probes_total Probes (merging turned back on to measure) by device and outcome: started, succeeded (merging stays on), failed (merging off again), inconclusive (only idle windows: merging stays on).
# TYPE mergetune_probes_total counter
mergetune_probes_total{device="sda",outcome="failed"} 0
mergetune_probes_total{device="sda",outcome="inconclusive"} 0
mergetune_probes_total{device="sda",outcome="started"} 1
mergetune_probes_total{device="sda",outcome="succeeded"} 0
# HELP mergetune_state_persisted 1 when state.json holds every original value mergetune has recorded in memory, 0 while a record exists only in memory (a crash now would lose it).
# TYPE mergetune_state_persisted gauge
mergetune_state_persisted 1
# HELP mergetune_state_save_errors_total Failed saves of state.json, the record of original values (the records stay in memory and the save is retried).
# TYPE mergetune_state_save_errors_total counter
mergetune_state_save_errors_total 0
# HELP mergetune_sysfs_write_errors_total Writes of a device tunable that failed (the state is kept and the write retried later).
# TYPE mergetune_sysfs_write_errors_total counter
mergetune_sysfs_write_errors_total 0
# HELP mergetune_tick_duration_seconds Wall time of one tick: read counters, decide, write tunables.
# TYPE mergetune_tick_duration_seconds histogram
mergetune_tick_duration_seconds_bucket{le="0.00005"} 0
mergetune_tick_duration_seconds_bucket{le="0.0001"} 0
mergetune_tick_duration_seconds_bucket{le="0.00025"} 0
mergetune_tick_duration_seconds_bucket{le="0.0005"} 7
mergetune_tick_duration_seconds_bucket{le="0.001"} 7
mergetune_tick_duration_seconds_bucket{le="0.0025"} 7
mergetune_tick_duration_seconds_bucket{le="0.005"} 7
mergetune_tick_duration_seconds_bucket{le="0.01"} 7
mergetune_tick_duration_seconds_bucket{le="0.025"} 7
mergetune_tick_duration_seconds_bucket{le="0.05"} 7
mergetune_tick_duration_seconds_bucket{le="0.1"} 7
mergetune_tick_duration_seconds_bucket{le="0.25"} 7
mergetune_tick_duration_seconds_bucket{le="0.5"} 7
mergetune_tick_duration_seconds_bucket{le="1"} 7
mergetune_tick_duration_seconds_bucket{le="+Inf"} 7
mergetune_tick_duration_seconds_sum 0.0021
mergetune_tick_duration_seconds_count 7
# HELP mergetune_tick_lag_seconds How late a tick started against its schedule.
# TYPE mergetune_tick_lag_seconds histogram
mergetune_tick_lag_seconds_bucket{le="0.001"} 0
mergetune_tick_lag_seconds_bucket{le="0.005"} 7
mergetune_tick_lag_seconds_bucket{le="0.01"} 7
mergetune_tick_lag_seconds_bucket{le="0.025"} 7
mergetune_tick_lag_seconds_bucket{le="0.05"} 7
mergetune_tick_lag_seconds_bucket{le="0.1"} 7
mergetune_tick_lag_seconds_bucket{le="0.25"} 7
mergetune_tick_lag_seconds_bucket{le="0.5"} 7
mergetune_tick_lag_seconds_bucket{le="1"} 7
mergetune_tick_lag_seconds_bucket{le="2.5"} 7
mergetune_tick_lag_seconds_bucket{le="5"} 7
mergetune_tick_lag_seconds_bucket{le="+Inf"} 7
mergetune_tick_lag_seconds_sum 0.014
mergetune_tick_lag_seconds_count 7
# HELP mergetune_ticks_total Ticks (samples of the counters) taken.
# TYPE mergetune_ticks_total counter
mergetune_ticks_total 6
# HELP mergetune_tunable_read_errors_total Failed reads of a device tunable (queue/nomerges, queue/iosched/...).
# TYPE mergetune_tunable_read_errors_total counter
mergetune_tunable_read_errors_total 0
"#;

#[test]
fn golden_exposition_for_a_fixed_state() {
    let m = fixed_state();
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    let want = GOLDEN.replace("VERSION", env!("CARGO_PKG_VERSION"));
    if text != want {
        for (i, (a, b)) in text.lines().zip(want.lines()).enumerate() {
            if a != b {
                eprintln!("first difference at line {}:\n got: {a}\nwant: {b}", i + 1);
                break;
            }
        }
        panic!("exposition drifted from the golden text; got:\n{text}");
    }
    // The second render of the same state is the cached buffer, byte for byte.
    assert_eq!(m.render(), m.render());
}

#[test]
fn a_real_parser_reads_every_metric_with_its_type_and_help() {
    use prometheus_parse::{Scrape, Value};
    let m = fixed_state();
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    // Declared types, from the TYPE lines.
    let mut types = BTreeMap::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap();
            types.insert(name.to_string(), ty.to_string());
        }
    }
    assert!(types.len() >= 17, "{types:?}");
    for (name, ty) in &types {
        assert!(name.starts_with("mergetune_"), "{name}: prefix");
        let help = scrape
            .docs
            .get(name)
            .unwrap_or_else(|| panic!("{name}: no HELP"));
        assert!(help.len() > 20, "{name}: HELP too short: {help:?}");
        match ty.as_str() {
            "counter" => assert!(name.ends_with("_total"), "{name}: counter without _total"),
            "gauge" => assert!(
                !name.ends_with("_total"),
                "{name}: gauge named like a counter"
            ),
            "histogram" => assert!(name.ends_with("_seconds"), "{name}: histogram unit"),
            other => panic!("{name}: unexpected type {other}"),
        }
        let samples: Vec<_> = scrape
            .samples
            .iter()
            .filter(|s| &s.metric == name)
            .collect();
        assert!(!samples.is_empty(), "{name}: no sample parsed");
        for s in samples {
            let ok = matches!(
                (ty.as_str(), &s.value),
                ("counter", Value::Counter(_))
                    | ("gauge", Value::Gauge(_))
                    | ("histogram", Value::Histogram(_))
            );
            assert!(ok, "{name}: parsed as {:?}, declared {ty}", s.value);
        }
    }
    // Every parsed sample belongs to a declared family (histogram _sum/_count included).
    for s in &scrape.samples {
        let base = s
            .metric
            .strip_suffix("_sum")
            .or_else(|| s.metric.strip_suffix("_count"))
            .filter(|b| types.get(*b).map(String::as_str) == Some("histogram"))
            .unwrap_or(&s.metric);
        assert!(types.contains_key(base), "{}: undeclared", s.metric);
        // Bounded labels: only these names ever appear.
        for (k, _) in s.labels.iter() {
            assert!(
                [
                    "device",
                    "management",
                    "direction",
                    "kind",
                    "attr",
                    "from",
                    "to",
                    "outcome",
                    "result",
                    "version",
                    "profile",
                    "origin",
                    "basis",
                    "level",
                    "bound",
                    "why"
                ]
                .contains(&k.as_str()),
                "{}: unexpected label {k}",
                s.metric
            );
        }
    }
}

/// Families with at least one non-zero sample (histograms: a non-zero count).
fn live_families(text: &str) -> BTreeSet<String> {
    let mut declared = BTreeSet::new();
    let mut live = BTreeSet::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            declared.insert(rest.split(' ').next().unwrap().to_string());
            continue;
        }
        if l.starts_with('#') || l.is_empty() {
            continue;
        }
        let name_end = l.find(['{', ' ']).unwrap();
        let name = &l[..name_end];
        let value: f64 = l.rsplit(' ').next().unwrap().parse().unwrap();
        if value == 0.0 || name.ends_with("_bucket") {
            continue;
        }
        let base = name.strip_suffix("_count").unwrap_or(name);
        let base = if declared.contains(base) { base } else { name };
        live.insert(base.to_string());
    }
    live
}

fn declared_families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|r| r.split(' ').next().unwrap().to_string())
        .collect()
}

/// A policy that reacts fast and probes often, priced in the 2008 figures (where not
/// merging pays), so that a few hundred ticks cover every decision kind.
fn fast_policy() -> Config {
    let mut cfg = one_window_policy();
    cfg.policy.probe_initial_backoff_secs = 1;
    cfg.policy.probe_max_backoff_secs = 2;
    cfg.policy.probe_windows = 1;
    cfg.policy.max_changes_per_hour = 100_000;
    cfg.policy.cost_profile = "lkml-2008".into();
    cfg
}

#[test]
#[allow(clippy::too_many_lines)] // a test reads best as one story
fn no_dead_metric_every_family_is_fed_by_some_path() {
    let cfg = fast_policy();
    cfg.validate("test").unwrap();

    let mut fs = mem(&[("sda", "0"), ("sdb", "0"), ("sdc", "1")]);
    let m = Metrics::new();
    let mut d = Daemon::simulated(cfg.clone());
    let hostile = (1000, 0, 0, 0);
    let friendly = (500, 400, 500, 400);
    let mut kinds = BTreeSet::new();
    let mut now = 0;
    // Gauges go up and down: a family is live when some scrape during the run shows it.
    let mut live = BTreeSet::new();
    let mut tick =
        |d: &mut Daemon, fs: &mut MemKernel, kinds: &mut BTreeSet<String>, now: &mut u64| {
            let decisions = d.tick(*now, fs);
            for x in &decisions {
                kinds.insert(x.kind.as_str().to_string());
            }
            m.update(d, &decisions, timing(*now));
            live.extend(live_families(std::str::from_utf8(&m.render()).unwrap()));
            *now += cfg.daemon.interval_ms;
        };
    // Random I/O until merging is off and probes have failed, then sequential until merging
    // is back on: every outcome the policy has.
    fs.set_load("sda", Load::Traffic(hostile));
    fs.set_load("sdb", Load::Traffic(friendly));
    for _ in 0..400 {
        tick(&mut d, &mut fs, &mut kinds, &mut now);
        if kinds.contains("probe_failed") {
            break;
        }
    }
    fs.set_load("sda", Load::Traffic(friendly));
    for _ in 0..400 {
        tick(&mut d, &mut fs, &mut kinds, &mut now);
        if kinds.contains("probe_succeeded") || kinds.contains("enable") {
            break;
        }
    }
    // A failing write, an unreadable diskstats line, a counter reset.
    fs.set_load("sda", Load::Traffic(hostile));
    fs.faults
        .failing_devices
        .insert("sda".into(), WriteFault::Busy);
    for _ in 0..400 {
        tick(&mut d, &mut fs, &mut kinds, &mut now);
        if d.counters.write_errors > 0 {
            break;
        }
    }
    fs.faults.garbage_once = true;
    tick(&mut d, &mut fs, &mut kinds, &mut now);
    fs.faults.reset_once = Some("sdb".into());
    tick(&mut d, &mut fs, &mut kinds, &mut now);
    tick(&mut d, &mut fs, &mut kinds, &mut now);
    m.config_reload(true);
    m.config_reload(false);
    assert!(kinds.contains("disable"), "{kinds:?}");
    assert!(kinds.contains("probe"), "{kinds:?}");
    assert!(kinds.contains("probe_failed"), "{kinds:?}");

    let text = String::from_utf8(m.render().to_vec()).unwrap();
    let declared = declared_families(&text);
    live.extend(live_families(&text));

    // The gauges whose interesting value is the other one come from a dry-run daemon with
    // the policy disabled.
    let mut cfg2 = cfg.clone();
    cfg2.policy.enabled = true;
    let m2 = Metrics::new();
    let mut dry = Daemon::new(cfg2, Actuator::new(true, Box::new(MemoryStore::default())));
    let decisions = dry.tick(0, &mut fs);
    m2.update(&dry, &decisions, timing(0));
    live.extend(live_families(std::str::from_utf8(&m2.render()).unwrap()));

    // The state-file and read-error series, from a daemon whose state file cannot be saved
    // and one of whose devices' nomerges cannot be read (what each counts is pinned by
    // `state_and_read_error_series_count_the_daemons_own_failures`).
    let (m3, _, _) = daemon_with_failing_store_and_reads(&cfg);
    live.extend(live_families(std::str::from_utf8(&m3.render()).unwrap()));

    // The hourly cap's series, from a daemon whose cap is one change: its first step
    // reaches it.
    let mut cfg4 = cfg.clone();
    cfg4.policy.max_changes_per_hour = 1;
    let m4 = Metrics::new();
    let mut capped = Daemon::simulated(cfg4);
    let mut fs4 = mem(&[("sda", "0")]);
    fs4.set_load("sda", Load::Traffic(hostile));
    for t in 0..400 {
        let decisions = capped.tick(t * cfg.daemon.interval_ms, &mut fs4);
        m4.update(&capped, &decisions, timing(t * cfg.daemon.interval_ms));
        if !decisions.is_empty() {
            break;
        }
    }
    live.extend(live_families(std::str::from_utf8(&m4.render()).unwrap()));

    // The sampler's refusal, from a daemon under live pricing on a host without one,
    // checked at start as `mergetune run` does.
    let mut cfg5 = cfg.clone();
    cfg5.policy.cost_profile = "live".into();
    let m5 = Metrics::new();
    let mut inert = Daemon::simulated(cfg5);
    let mut fs5 = mem(&[("sda", "0")]);
    inert.check_sampler(0, &mut fs5);
    let decisions = inert.tick(0, &mut fs5);
    m5.update(&inert, &decisions, timing(0));
    live.extend(live_families(std::str::from_utf8(&m5.render()).unwrap()));

    let dead: Vec<_> = declared.difference(&live).collect();
    assert!(
        dead.is_empty(),
        "registered but never fed: {dead:?}\n(decision kinds seen: {kinds:?})\n{text}"
    );
}

/// A probe that found merges worth a trial of L2 once went on as the trial and counted
/// no outcome (`started 2, failed 1, succeeded 0`). Every probe started ends in exactly
/// one outcome: that one in `succeeded`.
#[test]
fn a_probe_that_goes_on_as_a_trial_counts_as_succeeded() {
    let cfg = fast_policy();
    cfg.validate("test").unwrap();
    let mut fs = mem(&[("sda", "0")]);
    fs.tap = Tap::Blind;
    let m = Metrics::new();
    let mut d = Daemon::simulated(cfg.clone());
    let mut all: Vec<DecisionKind> = Vec::new();
    let mut now = 0;
    let mut run = |fs: &mut MemKernel,
                   all: &mut Vec<DecisionKind>,
                   until: &dyn Fn(&[DecisionKind]) -> bool| {
        for _ in 0..600 {
            let decisions = d.tick(now, fs);
            all.extend(decisions.iter().map(|x| x.kind));
            m.update(&d, &decisions, timing(now));
            now += cfg.daemon.interval_ms;
            if until(all) {
                return String::from_utf8(m.render().to_vec()).unwrap();
            }
        }
        panic!("never reached in {all:?}");
    };
    fs.set_load("sda", Load::Traffic((1000, 0, 0, 0)));
    run(&mut fs, &mut all, &|a| {
        a.contains(&DecisionKind::ProbeFailed)
    });
    fs.set_load("sda", Load::Traffic((500, 400, 500, 400)));
    // The probe after this one finds merges and goes on as a trial.
    let text = run(&mut fs, &mut all, &|a| {
        a.windows(2)
            .any(|w| w == [DecisionKind::Probe, DecisionKind::Trial])
    });
    let n = |outcome: &str| {
        sample(
            &text,
            &format!(r#"mergetune_probes_total{{device="sda",outcome="{outcome}"}}"#),
        )
        .unwrap()
    };
    assert!(n("succeeded") >= 1.0, "{all:?}\n{text}");
    assert_eq!(
        n("started"),
        n("succeeded") + n("failed") + n("inconclusive"),
        "every probe ends in one outcome: {all:?}"
    );
}

/// The metric names of docs/metrics.md's reference: the first cell of each table row.
fn documented_metrics() -> BTreeSet<String> {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).unwrap();
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `mergetune_"))
        .map(|rest| format!("mergetune_{}", &rest[..rest.find('`').unwrap()]))
        .collect()
}

/// docs/metrics.md once claimed to list every metric and missed four. Every family the
/// exporter registers (the daemon's, and `mergetune_simulated` of `simulate`'s) is in its
/// reference table, and every metric the table names is one the exporter registers.
#[test]
fn docs_metrics_lists_exactly_the_metrics_exported() {
    let exported: BTreeSet<String> = Metrics::simulated()
        .family_names()
        .iter()
        .cloned()
        .collect();
    let daemon: BTreeSet<String> = Metrics::new().family_names().iter().cloned().collect();
    assert!(daemon.is_subset(&exported) && exported.len() == daemon.len() + 1);
    assert!(exported.len() > 20, "{exported:?}");
    let documented = documented_metrics();
    let undocumented: Vec<_> = exported.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&exported).collect();
    assert!(
        undocumented.is_empty() && stale.is_empty(),
        "exported but not in docs/metrics.md: {undocumented:?}; in docs/metrics.md but not exported: {stale:?}"
    );
}

/// A state store that cannot save (a read-only or full state directory), counting the
/// saves and removes it refused.
struct FailingStore {
    refused: Arc<AtomicU64>,
}

impl StateStore for FailingStore {
    fn load(&self) -> Result<Option<Loaded>, StateError> {
        Ok(None)
    }
    fn save(&mut self, _state: &SavedState) -> Result<(), StateError> {
        self.refused.fetch_add(1, Ordering::Relaxed);
        Err(StateError::Write {
            path: "/nonexistent/state.json".into(),
            message: "Read-only file system".into(),
        })
    }
    fn remove(&mut self) -> Result<(), StateError> {
        self.refused.fetch_add(1, Ordering::Relaxed);
        Err(StateError::Write {
            path: "/nonexistent/state.json".into(),
            message: "Read-only file system".into(),
        })
    }
    fn describe(&self) -> String {
        "failing store".into()
    }
}

/// The value of the sample `series` (name and labels, exactly as exposed), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

/// A live (not dry-run) daemon on sda (random traffic, so that it wants to turn merging
/// off) and sdb (whose nomerges reads fail after the first ticks), with a state file that
/// cannot be saved. Returns the metrics after its run, the saves the store refused and the
/// reads the kernel failed.
fn daemon_with_failing_store_and_reads(cfg: &Config) -> (Metrics, u64, u64) {
    let refused = Arc::new(AtomicU64::new(0));
    let store = FailingStore {
        refused: refused.clone(),
    };
    // No rescan after the first tick: a rescan reads nomerges too (discovery, which does
    // not count as a tunable read error), and the count here is the daemon's watch.
    let mut cfg = cfg.clone();
    cfg.daemon.rescan_every_ticks = 1000;
    let mut d = Daemon::new(cfg.clone(), Actuator::new(false, Box::new(store)));
    let mut fs = mem(&[("sda", "0"), ("sdb", "0")]);
    fs.set_load("sda", Load::Traffic((1000, 0, 0, 0)));
    fs.set_load("sdb", Load::Traffic((500, 400, 500, 400)));
    let m = Metrics::new();
    let mut now = 0;
    for i in 0..40 {
        if i == 5 {
            fs.faults
                .failing_reads
                .insert(("sdb".into(), "queue/nomerges".into()));
        }
        let decisions = d.tick(now, &mut fs);
        m.update(&d, &decisions, timing(now));
        now += cfg.daemon.interval_ms;
    }
    let refused = refused.load(Ordering::Relaxed);
    (m, refused, fs.faults.failed_reads)
}

#[test]
fn state_and_read_error_series_count_the_daemons_own_failures() {
    let mut cfg = one_window_policy();
    cfg.policy.cost_profile = "lkml-2008".into(); // not merging pays: the daemon wants to write
    cfg.validate("test").unwrap();
    let (m, refused, failed_reads) = daemon_with_failing_store_and_reads(&cfg);
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    assert!(refused > 0, "the daemon never tried to save its originals");
    assert!(failed_reads > 0, "the daemon never read sdb's nomerges");
    // Every refused save is one error, counted by the daemon; the record exists only in
    // memory, and no tunable was written without it.
    assert_eq!(
        sample(&text, "mergetune_state_save_errors_total"),
        Some(refused as f64),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mergetune_state_persisted"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"mergetune_device_nomerges{device="sda"}"#),
        Some(0.0),
        "{text}"
    );
    // Every failed read of a tunable is one error.
    assert_eq!(
        sample(&text, "mergetune_tunable_read_errors_total"),
        Some(failed_reads as f64),
        "{text}"
    );
}

#[test]
fn probe_and_decision_series_count_the_daemons_own_decisions() {
    // A policy that reacts fast and probes often, with the tap blind to merges, so that
    // at L3 only probes find them: random traffic until probes have failed, then mergeable
    // traffic until one has succeeded.
    let mut cfg = fast_policy();
    // No trial of L2 after a probe that finds merges: the probe's own outcome is reported.
    cfg.policy.trial_max_extra_requests_percent = 0.0;
    cfg.validate("test").unwrap();
    let mut fs = mem(&[("sda", "0")]);
    fs.tap = Tap::Blind;
    let m = Metrics::new();
    let mut d = Daemon::simulated(cfg.clone());
    let mut all: Vec<DecisionKind> = Vec::new();
    let mut now = 0;
    // The label of each kind, as docs/metrics.md lists them.
    let kind_labels = [
        (DecisionKind::Disable, "disable"),
        (DecisionKind::StepDown, "step_down"),
        (DecisionKind::Enable, "enable"),
        (DecisionKind::Probe, "probe"),
        (DecisionKind::ProbeSucceeded, "probe_succeeded"),
        (DecisionKind::ProbeFailed, "probe_failed"),
        (DecisionKind::ProbeInconclusive, "probe_inconclusive"),
    ];
    let outcomes = [
        (DecisionKind::Probe, "started"),
        (DecisionKind::ProbeSucceeded, "succeeded"),
        (DecisionKind::ProbeFailed, "failed"),
        (DecisionKind::ProbeInconclusive, "inconclusive"),
    ];
    let check = |all: &[DecisionKind], text: &str| {
        let count = |k: DecisionKind| all.iter().filter(|x| **x == k).count() as f64;
        for (kind, outcome) in outcomes {
            let series = format!(r#"mergetune_probes_total{{device="sda",outcome="{outcome}"}}"#);
            assert_eq!(
                sample(text, &series),
                Some(count(kind)),
                "{series} after {all:?}\n{text}"
            );
        }
        for (kind, label) in kind_labels {
            let kind_label = format!(r#"kind="{label}""#);
            let exported: f64 = text
                .lines()
                .filter(|l| l.starts_with("mergetune_decisions_total{"))
                .filter(|l| l.contains(r#"device="sda""#) && l.contains(&kind_label))
                .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
                .sum();
            assert_eq!(exported, count(kind), "{label} after {all:?}\n{text}");
        }
        // The moves between levels are counted from 0, exported before the first one (else
        // `increase()` misses it); a probe that ends where it started (succeeded,
        // inconclusive) moves nothing.
        let moves = all.iter().filter(|k| k.moves_the_ladder()).count() as f64;
        assert_eq!(
            sample(
                text,
                r#"mergetune_device_level_changes_total{device="sda"}"#
            ),
            Some(moves),
            "after {all:?}\n{text}"
        );
    };
    let mut phase = |fs: &mut MemKernel, all: &mut Vec<DecisionKind>, now: &mut u64, until| {
        for _ in 0..600 {
            let decisions = d.tick(*now, fs);
            all.extend(decisions.iter().map(|x| x.kind));
            m.update(&d, &decisions, timing(*now));
            check(all, std::str::from_utf8(&m.render()).unwrap());
            *now += cfg.daemon.interval_ms;
            if all.contains(&until) {
                return;
            }
        }
        panic!("no {until:?} in {all:?}");
    };
    fs.set_load("sda", Load::Traffic((1000, 0, 0, 0)));
    phase(&mut fs, &mut all, &mut now, DecisionKind::ProbeFailed);
    // Failed probes and no succeeded one: a swap of the two outcomes shows here.
    assert!(!all.contains(&DecisionKind::ProbeSucceeded), "{all:?}");
    fs.set_load("sda", Load::Traffic((500, 400, 500, 400)));
    phase(&mut fs, &mut all, &mut now, DecisionKind::ProbeSucceeded);
}

/// What writes nothing (a `not_worth_it` a minute), a restore and the slice tuner's steps
/// are not level changes: only the ladder's writing moves count toward the cap, as the
/// policy counts them.
#[test]
fn only_the_ladders_writing_moves_are_level_changes() {
    let mut fs = mem(&[("sda", "0")]);
    let m = Metrics::new();
    let mut d = Daemon::simulated(Config::default());
    d.tick(0, &mut fs);
    let decision = |kind: DecisionKind, changes: Vec<Change>| applied(0, "sda", kind, changes);
    let starved = vec![Change {
        tunable: Tunable::WritesStarved,
        from: "2".into(),
        to: "4".into(),
    }];
    let series = r#"mergetune_device_level_changes_total{device="sda"}"#;
    m.update(&d, &[], timing(0));
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    assert_eq!(sample(&text, series), Some(0.0), "{text}");
    m.update(
        &d,
        &[
            decision(DecisionKind::NotWorthIt, Vec::new()),
            decision(DecisionKind::ProbeSucceeded, Vec::new()),
            decision(DecisionKind::Restore, nomerges("2", "0")),
            decision(DecisionKind::FavourReads, starved),
            decision(DecisionKind::Disable, nomerges("0", "2")),
        ],
        timing(1000),
    );
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    assert_eq!(sample(&text, series), Some(1.0), "{text}");
}

#[test]
fn a_removed_device_drops_its_series_but_keeps_its_history() {
    let mut fs = mem(&[("sda", "0"), ("sdb", "0")]);
    let m = Metrics::new();
    let mut d = Daemon::simulated(Config::default());
    d.tick(0, &mut fs);
    let gone = applied(0, "sdb", DecisionKind::Disable, nomerges("0", "2"));
    m.update(&d, std::slice::from_ref(&gone), timing(0));
    fs.devs.get_mut("sdb").unwrap().present = false;
    let mut cfg = Config::default();
    cfg.daemon.rescan_every_ticks = 1;
    d.reload(cfg);
    d.tick(1000, &mut fs);
    m.update(&d, &[], timing(1000));
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    assert!(
        !text.contains(r#"mergetune_device_nomerges{device="sdb"}"#),
        "{text}"
    );
    assert!(
        !text.contains(r#"mergetune_device_management{device="sdb""#),
        "{text}"
    );
    assert!(text.contains(r#"mergetune_decisions_total{attr="nomerges",device="sdb",from="0",kind="disable",to="2"} 1"#));
    assert!(text.contains(r#"mergetune_device_nomerges{device="sda"} 0"#));
}

#[test]
fn status_snapshot_has_rows_last_decision_and_next_probe() {
    let mut cfg = one_window_policy();
    cfg.policy.probe_initial_backoff_secs = 600;
    cfg.policy.probe_max_backoff_secs = 600;
    cfg.policy.max_changes_per_hour = 1000;
    cfg.policy.cost_profile = "lkml-2008".into(); // not merging pays here (2008 figures)
    let mut fs = mem(&[("sda", "0"), ("sdb", "1")]);
    fs.set_load("sda", Load::Traffic((1000, 0, 0, 0)));
    let m = Metrics::new();
    let mut d = Daemon::simulated(cfg.clone());
    let mut now = 0;
    let mut seen_off = false;
    for _ in 0..200 {
        let decisions = d.tick(now, &mut fs);
        m.update(&d, &decisions, timing(now));
        now += 1000;
        if d.devices()["sda"].policy.next_probe_at_ms().is_some() {
            seen_off = true;
            break;
        }
    }
    assert!(seen_off, "merging never went off on random traffic");
    let s: mergetune_export::status::StatusSnapshot =
        serde_json::from_slice(&m.status_json()).unwrap();
    assert_eq!(s, m.status());
    // The document's shape, as a client without mergetune's types reads it: the state and
    // why, the mode alone, the level as its index; null where the device is not managed.
    let doc: serde_json::Value = serde_json::from_slice(&m.status_json()).unwrap();
    let by_name = |name: &str| {
        doc["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["device"] == name)
            .unwrap()
            .clone()
    };
    let (sda_doc, sdb_doc) = (by_name("sda"), by_name("sdb"));
    assert_eq!(sda_doc["status"], "managed", "{sda_doc}");
    assert!(sda_doc.get("why").is_none(), "{sda_doc}");
    assert_eq!(sda_doc["mode"], "off", "{sda_doc}");
    assert_eq!(sda_doc["level"], 3, "{sda_doc}");
    assert_eq!(sdb_doc["status"], "admin-owned", "{sdb_doc}");
    assert!(
        sdb_doc["why"].as_str().is_some_and(|w| !w.is_empty()),
        "{sdb_doc}"
    );
    assert!(
        sdb_doc["mode"].is_null() && sdb_doc["level"].is_null(),
        "{sdb_doc}"
    );
    let sda = s.devices.iter().find(|x| x.device == "sda").unwrap();
    assert_eq!(sda.management, Management::Managed);
    assert!(sda.level.unwrap() > Level::L0);
    assert_eq!(sda.original_nomerges.as_deref(), Some("0"));
    assert_ne!(sda.nomerges.as_deref(), Some("0"));
    let last = sda.last_decision.as_ref().expect("last decision");
    assert!(last.applied == Applied::Yes, "{last:?}");
    let next = sda.next_probe_in_secs.expect("next probe");
    assert!(next > 0.0 && next <= 600.0, "{next}");
    let sdb = s.devices.iter().find(|x| x.device == "sdb").unwrap();
    assert!(matches!(sdb.management, Management::AdminOwned(_)));
    assert_eq!(sdb.level, None);
    let table = mergetune_export::table::format_status(&s);
    assert!(table.contains("sda"), "{table}");
    assert!(
        table.contains("0\u{2192}"),
        "nomerges original -> now: {table}"
    );
    assert!(
        table.contains("in 10m") || table.contains("in 9m"),
        "{table}"
    );
}

#[test]
fn a_watch_tick_is_counted_at_the_next_refresh_and_changes_nothing_before_it() {
    let m = fixed_state();
    let before = String::from_utf8(m.render().to_vec()).unwrap();
    let status_before = m.status();
    let count = |text: &str, family: &str| -> u64 {
        let key = format!("\n{family}_count ");
        let at = text
            .find(&key)
            .unwrap_or_else(|| panic!("{family}: {text}"));
        text[at + key.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    m.observe_tick(TickTiming {
        now_ms: 6100,
        duration_seconds: 0.000_4,
        lag_seconds: 0.25,
    });
    // Until the next refresh a scrape is served from the text of the last one, and /status
    // stays as it was: the watch's extra ticks cost no encoding.
    assert_eq!(String::from_utf8(m.render().to_vec()).unwrap(), before);
    assert_eq!(m.status(), status_before);
    // The refresh shows both ticks in the histograms, and the watch tick's lag as the worst.
    m.update_from(
        &mergetune_daemon::snapshot::DaemonSnapshot::default(),
        &[],
        timing(7000),
    );
    let after = String::from_utf8(m.render().to_vec()).unwrap();
    for family in [
        "mergetune_tick_duration_seconds",
        "mergetune_tick_lag_seconds",
    ] {
        assert_eq!(
            count(&after, family),
            count(&before, family) + 2,
            "{family}"
        );
    }
    assert_eq!(
        m.status().max_tick_lag_ms,
        250.0,
        "the watch tick's lag is kept"
    );
}

#[test]
fn the_refresh_encodes_the_body_and_a_scrape_only_copies_it() {
    let m = fixed_state();
    // A format nobody asked for is not encoded by a refresh: a daemon without scrapers pays
    // nothing for its exposition.
    let unscraped = m.encodings();
    m.update_from(
        &mergetune_daemon::snapshot::DaemonSnapshot::default(),
        &[],
        timing(7000),
    );
    assert_eq!(m.encodings(), unscraped, "no format asked for yet");
    // The first request for a format encodes it once.
    let first = m.render();
    assert_eq!(m.encodings(), unscraped + 1);
    // From then on the refresh encodes, before any scrape, and the scrapes until the next
    // refresh copy that body: the endpoint's thread never encodes.
    m.update_from(
        &mergetune_daemon::snapshot::DaemonSnapshot::default(),
        &[],
        timing(8000),
    );
    assert_eq!(
        m.encodings(),
        unscraped + 2,
        "encoded by the refresh itself"
    );
    let bodies: Vec<_> = (0..100).map(|_| m.render()).collect();
    assert_eq!(m.encodings(), unscraped + 2, "100 scrapes, no encoding");
    assert!(bodies.windows(2).all(|w| w[0] == w[1]));
    assert_ne!(bodies[0], first, "the refresh's body shows the new tick");
    let reloads = |body: &str| -> u64 {
        let key = "mergetune_config_reloads_total{result=\"success\"} ";
        let at = body.find(key).unwrap_or_else(|| panic!("{body}"));
        body[at + key.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = reloads(std::str::from_utf8(&m.render()).unwrap());
    m.config_reload(true);
    let after_reload = m.encodings();
    assert_eq!(after_reload, unscraped + 3, "one reload, one encoding");
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    assert_eq!(m.encodings(), after_reload);
    assert_eq!(reloads(&text), before + 1, "the reload shows");
}

#[test]
fn before_the_first_update_the_status_already_names_the_version() {
    // The endpoint can be scraped before the first tick has been counted.
    let m = Metrics::new();
    assert_eq!(m.status().version, env!("CARGO_PKG_VERSION"));
    let doc: serde_json::Value = serde_json::from_slice(&m.status_json()).unwrap();
    assert_eq!(doc["version"], env!("CARGO_PKG_VERSION"), "{doc}");
}

#[test]
fn a_direction_without_bios_in_the_window_has_no_merge_ratio() {
    // Writes only: the read ratio is 0 of 0, not a number to show.
    let mut fs = mem(&[("sda", "0")]);
    fs.set_load("sda", Load::Traffic((0, 0, 900, 100)));
    let mut cfg = Config::default();
    cfg.policy.window_ticks = 1;
    let mut d = Daemon::simulated(cfg.clone());
    let m = Metrics::new();
    for t in 0..4u64 {
        let now = t * cfg.daemon.interval_ms;
        let decisions = d.tick(now, &mut fs);
        m.update(&d, &decisions, timing(now));
    }
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    assert_eq!(
        sample(
            &text,
            r#"mergetune_device_merge_ratio{device="sda",direction="write"}"#
        ),
        Some(0.1),
        "{text}"
    );
    assert!(
        !text.contains(r#"mergetune_device_merge_ratio{device="sda",direction="read"}"#),
        "{text}"
    );
}

/// The series of a labelled family, as lines of the exposition.
/// node_exporter's practice: a counter the daemon can increment exists at 0 from the start,
/// or `increase()` and `rate()` never see its first step (a series first seen at 1 has no
/// earlier sample to increase from).
#[test]
fn a_managed_devices_decision_series_start_at_zero_and_the_first_step_reads_one() {
    let cfg = fast_policy();
    let mut fs = mem(&[("sda", "0")]);
    // Random reads merge nothing: the device steps down within a few windows.
    fs.set_load("sda", Load::Traffic((1000, 0, 0, 0)));
    let m = Metrics::new();
    let mut d = Daemon::simulated(cfg.clone());
    let decisions = d.tick(0, &mut fs);
    assert!(decisions.is_empty(), "{decisions:?}");
    m.update(&d, &decisions, timing(0));
    let before = String::from_utf8(m.render().to_vec()).unwrap();
    let series = |text: &str| -> BTreeMap<String, String> {
        family_lines(text, "mergetune_decisions_total")
            .into_iter()
            .map(|l| {
                let (name, value) = l.rsplit_once(' ').unwrap();
                (name.to_string(), value.to_string())
            })
            .collect()
    };
    let at_start = series(&before);
    assert!(
        !at_start.is_empty() && at_start.values().all(|v| v == "0"),
        "a freshly managed device's decision series, all at 0:\n{before}"
    );
    let mut now = 0;
    let first = loop {
        now += cfg.daemon.interval_ms;
        assert!(now < 600_000, "no decision in 10 minutes");
        let decisions = d.tick(now, &mut fs);
        m.update(&d, &decisions, timing(now));
        if let Some(first) = decisions.into_iter().next() {
            break first;
        }
    };
    let after_text = String::from_utf8(m.render().to_vec()).unwrap();
    let after = series(&after_text);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        at_start.keys().collect::<Vec<_>>(),
        "the first decision ({first}) increments a series that was there at 0:\n{after_text}"
    );
    let moved: Vec<(&String, &String)> = after.iter().filter(|(_, v)| *v != "0").collect();
    assert_eq!(moved.len(), 1, "{after_text}");
    let (name, value) = moved[0];
    assert_eq!(value, "1", "increase() over the two scrapes is 1");
    assert!(
        name.contains(&format!(r#"kind="{}""#, first.kind)),
        "{name} is the series of {first}"
    );
}

/// The label value of `key` in a series written as `{a="x",b="y"}`.
fn label<'a>(series: &'a str, key: &str) -> Option<&'a str> {
    let start = series.find(&format!(r#"{key}=""#))? + key.len() + 2;
    series[start..].split('"').next()
}

/// The mixin's promtool tests feed the rules the label sets the daemon exports: every
/// ladder decision series there is one a freshly managed mq-deadline device already
/// carries at 0 (restore and the slice tuner's kinds are not known ahead).
#[test]
fn the_mixin_tests_decision_series_are_ones_the_daemon_exports() {
    let mut fs = mem(&[("sda", "0")]);
    let m = Metrics::new();
    let mut d = Daemon::simulated(fast_policy());
    let decisions = d.tick(0, &mut fs);
    m.update(&d, &decisions, timing(0));
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    let key = |series: &str| -> Option<[String; 4]> {
        Some(["kind", "attr", "from", "to"].map(|k| label(series, k).unwrap_or("").to_string()))
    };
    let exported: BTreeSet<[String; 4]> = family_lines(&text, "mergetune_decisions_total")
        .into_iter()
        .filter_map(key)
        .collect();
    let mixin = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/mixin/tests");
    let mut checked = 0;
    for file in ["alerts_test.yaml", "rules_test.yaml"] {
        let yaml = std::fs::read_to_string(mixin.join(file)).unwrap();
        for line in yaml
            .lines()
            .filter(|l| l.contains("mergetune_decisions_total{"))
        {
            let k = key(line).unwrap();
            if ["restore", "favour_reads", "undo", "relax", "pin"].contains(&k[0].as_str()) {
                continue;
            }
            assert!(
                exported.contains(&k),
                "{file}: {line}\nis no series the daemon exports; it exports:\n{text}"
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 3,
        "the mixin tests feed decision series (the rules test does)"
    );
}

fn family_lines<'a>(text: &'a str, family: &str) -> Vec<&'a str> {
    let prefix = format!("{family}{{");
    text.lines().filter(|l| l.starts_with(&prefix)).collect()
}

/// A managed device priced live, as the daemon's snapshot gives it after the sampler has
/// measured its scheduler: L2 saves 12 ms/s [8, 16], L3 20 ms/s with no interval, and L1
/// carries a profile's cell (percent per I/O), which is no CPU rate and is not exported.
fn live_priced_snapshot() -> mergetune_daemon::snapshot::DaemonSnapshot {
    use mergetune_logic::policy::{Mode, Reason};
    use mergetune_logic::pricing::profile::Verdict;
    use mergetune_logic::pricing::worth::Worth;
    use mergetune_logic::pricing::worth::{Basis, Saving, SavingUnit};
    let saving = |value: f64, ci: Option<[f64; 2]>, unit: SavingUnit| Saving {
        value,
        ci,
        unit,
        verdict: Verdict::Saves,
    };
    let worth = Worth {
        basis: Basis::Live {
            floor: mergetune_logic::pricing::floor::SavingFloor::from_percent_cpu(0.5),
        },
        scheduler: None,
        levels: [
            None,
            Some(saving(-3.0, Some([-4.0, -2.0]), SavingUnit::PercentPerIo)),
            Some(saving(12.0, Some([8.0, 16.0]), SavingUnit::CpuMsPerSec)),
            Some(saving(20.0, None, SavingUnit::CpuMsPerSec)),
        ],
        coverage_percent: 95.0,
        untrusted: false,
    };
    mergetune_daemon::snapshot::DaemonSnapshot {
        pricing: mergetune_daemon::snapshot::PricingSnapshot {
            name: "live".into(),
            origin: "measured on this host".into(),
            floor: mergetune_logic::pricing::floor::SavingFloor::from_percent_cpu(0.5),
            ..Default::default()
        },
        devices: vec![mergetune_daemon::snapshot::DeviceSnapshot {
            name: "sda".into(),
            scheduler: Some(mergetune_kernel::scheduler::Scheduler::MqDeadline.into()),
            management: Management::Managed,
            level: Some(Level::L0),
            mode: Some(Mode::Merging),
            nomerges: Some("0".into()),
            original_nomerges: Some("0".into()),
            last_window: None,
            last_tick: None,
            last_reason: Reason::from(""),
            last_decision: None,
            next_probe_at_ms: None,
            worth: Some(worth),
            changes_last_hour: Some(3),
            possible_decisions: Vec::new(),
            reattached: false,
        }],
        max_changes_per_hour: 60,
        ..Default::default()
    }
}

/// The hourly cap, when hit, is alertable: the device's changes in the last hour and
/// whether they reach `[policy] max_changes_per_hour`, and `/status` says it in the row.
#[test]
fn a_device_at_the_hourly_cap_says_so_in_metrics_and_status() {
    let m = Metrics::new();
    let mut snap = live_priced_snapshot();
    m.update_from(&snap, &[], timing(1000));
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    assert_eq!(
        family_lines(&text, "mergetune_device_change_cap_reached"),
        [r#"mergetune_device_change_cap_reached{device="sda"} 0"#],
        "{text}"
    );
    snap.devices[0].changes_last_hour = Some(60);
    m.update_from(&snap, &[], timing(2000));
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    assert_eq!(
        family_lines(&text, "mergetune_device_changes_last_hour"),
        [r#"mergetune_device_changes_last_hour{device="sda"} 60"#],
        "{text}"
    );
    assert_eq!(
        family_lines(&text, "mergetune_device_change_cap_reached"),
        [r#"mergetune_device_change_cap_reached{device="sda"} 1"#],
        "{text}"
    );
    let status = m.status();
    let dev = &status.devices[0];
    assert!(
        dev.change_cap_reached && dev.changes_last_hour == Some(60),
        "{dev:?}"
    );
    let table = mergetune_export::table::render(&status.devices);
    assert!(
        table.contains("hourly cap reached (60 changes in the last hour): steps down refused"),
        "{table}"
    );
}

#[test]
fn a_live_priced_device_exports_its_basis_and_its_savings_in_cpu_seconds_per_second() {
    let m = Metrics::new();
    m.update_from(&live_priced_snapshot(), &[], timing(1000));
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    assert_eq!(
        family_lines(&text, "mergetune_device_pricing"),
        [r#"mergetune_device_pricing{basis="live",device="sda"} 1"#],
        "one basis, the device's: {text}"
    );
    let saving = |level: u8, bound: &str| {
        sample(
            &text,
            &format!(
                r#"mergetune_device_merge_saving_cpu_ratio{{bound="{bound}",device="sda",level="{level}"}}"#
            ),
        )
    };
    // ms of CPU per second, exported in seconds per second.
    assert_eq!(saving(2, "estimate"), Some(0.012), "{text}");
    assert_eq!(saving(2, "lower"), Some(0.008), "{text}");
    assert_eq!(saving(2, "upper"), Some(0.016), "{text}");
    assert_eq!(saving(3, "estimate"), Some(0.02), "{text}");
    assert_eq!(saving(3, "lower"), None, "no interval, no bound: {text}");
    for bound in ["estimate", "lower", "upper"] {
        assert_eq!(
            saving(1, bound),
            None,
            "a percent per I/O is no CPU rate: {text}"
        );
        assert_eq!(saving(0, bound), None, "L0 is the reference: {text}");
    }
}

#[test]
fn without_a_pricing_name_no_cost_profile_series_is_exported() {
    // A controller that prices nothing (a static baseline) names no profile.
    let m = Metrics::new();
    m.update_from(
        &mergetune_daemon::snapshot::DaemonSnapshot::default(),
        &[],
        timing(1000),
    );
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    assert!(
        !text.contains("mergetune_cost_profile_info{"),
        "no profile, no series: {text}"
    );
    m.update_from(&live_priced_snapshot(), &[], timing(2000));
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    assert_eq!(
        family_lines(&text, "mergetune_cost_profile_info"),
        [r#"mergetune_cost_profile_info{origin="measured on this host",profile="live"} 1"#]
    );
}

#[test]
fn each_update_refreshes_the_status_document() {
    let m = Metrics::new();
    let mut snapshot = mergetune_daemon::snapshot::DaemonSnapshot::default();
    for ticks in 1..=3 {
        snapshot.counters.ticks = ticks;
        m.update_from(&snapshot, &[], timing(ticks * 1000));
        let doc: serde_json::Value = serde_json::from_slice(&m.status_json()).unwrap();
        assert_eq!(doc["ticks"], ticks, "{doc}");
        // A second read of the same update is the same document.
        assert_eq!(m.status_json(), m.status_json());
    }
}

#[test]
fn each_probe_decision_counts_under_its_outcome() {
    let outcomes = [
        (DecisionKind::Probe, "started"),
        (DecisionKind::ProbeSucceeded, "succeeded"),
        (DecisionKind::ProbeFailed, "failed"),
        (DecisionKind::ProbeInconclusive, "inconclusive"),
    ];
    for (kind, outcome) in outcomes {
        let m = Metrics::new();
        let decision = Decision {
            at_ms: 1000,
            device: "sda".into(),
            kind,
            changes: Vec::new(),
            reason: "test".into(),
            applied: Applied::NothingToWrite,
        };
        m.update_from(&live_priced_snapshot(), &[decision], timing(1000));
        let text = String::from_utf8(m.render().to_vec()).unwrap();
        // A managed device has every outcome's series from the start, at 0.
        for (_, each) in outcomes {
            let series = format!(r#"mergetune_probes_total{{device="sda",outcome="{each}"}}"#);
            let want = if each == outcome { 1.0 } else { 0.0 };
            assert_eq!(sample(&text, &series), Some(want), "{kind:?}: {text}");
        }
    }
}

#[test]
fn a_tick_of_negative_or_no_finite_duration_is_not_observed() {
    let m = Metrics::new();
    let snapshot = mergetune_daemon::snapshot::DaemonSnapshot::default();
    // A watch tick shows at the next refresh, which observes its own tick too.
    let count_after_refresh = |m: &Metrics, now_ms: u64| {
        m.update_from(&snapshot, &[], timing(now_ms));
        let text = String::from_utf8(m.render().to_vec()).unwrap();
        sample(&text, "mergetune_tick_duration_seconds_count")
    };
    m.observe_tick(timing(500));
    assert_eq!(
        count_after_refresh(&m, 1000),
        Some(2.0),
        "a watch tick and a refresh"
    );
    let mut want = 2.0;
    for (i, bad) in [-0.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]
        .into_iter()
        .enumerate()
    {
        m.observe_tick(TickTiming {
            now_ms: 2000,
            duration_seconds: bad,
            lag_seconds: 0.0,
        });
        want += 1.0;
        assert_eq!(
            count_after_refresh(&m, 3000 + i as u64),
            Some(want),
            "a duration of {bad} is no tick's"
        );
    }
}
