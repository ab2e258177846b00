//! `simulate --compare`: the adaptive policy against its alternatives, on the simulator.
//!
//! Each scenario runs under five controllers, all through the same [`Controller`] seam:
//! - `kernel-default`: L0 always (nothing written);
//! - `static-nomerges-2`: the admin who "knows" the load is random (L3 always);
//! - `naive-toggle`: Brunelle's switch without hysteresis, dwell or probing: every window,
//!   nomerges=2 when the merge ratio is under the low threshold, else 0;
//! - `adaptive`: mergetune's daemon, unchanged;
//! - `oracle`: knows each phase's true pattern. It is built from the scenario itself: the
//!   scenario is first run at each static ladder level, and for each phase the oracle takes
//!   the cheapest level whose throughput stays within 0.5% of L0's and that saves at least
//!   0.1% of L0's CPU (else L0: a toggle freezes the queue, not worth nothing); then it
//!   runs with that level set at every phase start.
//!
//! Figures per policy: block-layer CPU saved against the kernel default, priced in the
//! scenario's cost profile (the one measured on this kernel unless the scenario names
//! another; the oracle is chosen in it too) and, as a second column, in the other shipped
//! profile (the 2008 figures); the queue freezes of its `queue/nomerges` writes;
//! the worst phase's throughput loss and p99 latency change against the kernel default,
//! level changes (and per hour), and the time to react after each phase change.

use crate::daemon::adaptive::Daemon;
use crate::daemon::controller::{Controller, Decision, KernelDefault};
use crate::kernel::blockfs::BlockFs;
use crate::kernel::devices::active_scheduler;
use crate::kernel::diskstats::parse_diskstats;
use crate::kernel::tunable::Tunable;
use crate::logic::config::Config;
use crate::logic::decision::{Applied, Change, DecisionKind, Level};
use crate::logic::policy::{Caps, tunables};
use crate::logic::sampler::{Delta, Sampler, WindowAcc, WindowClose};
use crate::sim::{Scenario, SimError, Simulation, run_scenario};
use serde::Serialize;
use std::collections::BTreeMap;

/// Largest throughput loss the oracle accepts for a deeper level.
pub const ORACLE_MAX_LOSS: f64 = 0.005;
/// Least CPU saving (share of the phase's L0 CPU) for which the oracle leaves L0: a
/// `queue/nomerges` write freezes the queue, so it does not move for a saving that is
/// nothing (in the measured profile every level's saving can be exactly that).
pub const ORACLE_MIN_SAVING: f64 = 0.001;
/// An oracle saving below this (percent) is reported as none: "of oracle" is then 100 for
/// a policy that loses nothing, 0 for one that loses CPU.
const NOTHING_TO_SAVE_PERCENT: f64 = 0.01;

/// Sets ladder levels on every request-based device on a schedule of (start_ms, level).
pub struct LevelSchedule {
    interval_ms: u64,
    schedule: Vec<(u64, u8)>,
    kind: &'static str,
    caps: BTreeMap<String, Caps>,
    applied: BTreeMap<String, u8>,
}

impl LevelSchedule {
    pub fn new(interval_ms: u64, schedule: Vec<(u64, u8)>, kind: &'static str) -> Self {
        LevelSchedule {
            interval_ms,
            schedule,
            kind,
            caps: BTreeMap::new(),
            applied: BTreeMap::new(),
        }
    }

    fn discover(&mut self, fs: &mut dyn BlockFs) {
        if !self.caps.is_empty() {
            return;
        }
        for dev in fs.list_block_devices().unwrap_or_default() {
            if !fs.list_dir(&dev, "slaves").unwrap_or_default().is_empty()
                || !fs.attr_exists(&dev, "queue/nomerges")
            {
                continue;
            }
            let sched = fs
                .read_attr(&dev, "queue/scheduler")
                .ok()
                .and_then(|s| active_scheduler(&s));
            let fm = fs.read_attr(&dev, "queue/iosched/front_merges").ok();
            let caps = Caps::for_scheduler(sched.as_deref(), fm.as_deref() == Some("1"));
            self.applied.insert(dev.clone(), 0);
            self.caps.insert(dev, caps);
        }
    }
}

/// The deepest available level at or above... below `level` for these caps.
fn available(level: u8, caps: Caps) -> u8 {
    let mut l = level;
    while l > 0 && ((l == 1 && !caps.front_merges) || (l == 2 && !caps.simple_merges)) {
        l -= 1;
    }
    l
}

impl Controller for LevelSchedule {
    fn interval_ms(&self) -> u64 {
        self.interval_ms
    }
    fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        self.discover(fs);
        let want = self
            .schedule
            .iter()
            .rev()
            .find(|(t, _)| *t <= now_ms)
            .map(|(_, l)| *l)
            .unwrap_or(0);
        let mut out = Vec::new();
        for (dev, caps) in &self.caps {
            let level = available(want, *caps);
            if self.applied.get(dev) == Some(&level) {
                continue;
            }
            let from = self.applied.get(dev).copied().unwrap_or(0);
            // The schedule keeps indices 0..=3; the policy's ladder is typed.
            let typed = Level::from_index(level).unwrap_or(Level::TOP);
            for (t, value) in tunables(typed, *caps) {
                let cur = fs.read_tunable(dev, t).unwrap_or_default();
                if cur != value && fs.write_tunable(dev, t, value).is_ok() {
                    out.push(Decision {
                        at_ms: now_ms,
                        device: dev.clone(),
                        kind: DecisionKind::Pin,
                        changes: vec![Change {
                            tunable: t,
                            from: cur,
                            to: value.to_string(),
                        }],
                        reason: format!("{}: L{from} -> L{level}", self.kind),
                        applied: Applied::Yes,
                    });
                }
            }
            self.applied.insert(dev.clone(), level);
        }
        out
    }
    fn restore(&mut self, _now_ms: u64, _fs: &mut dyn BlockFs) -> Vec<Decision> {
        Vec::new()
    }
}

/// Brunelle's switch without Axboe's answers: one threshold, no dwell, no probe.
pub struct NaiveToggle {
    cfg: Config,
    sampler: Sampler,
    windows: BTreeMap<String, WindowAcc>,
    managed: Option<Vec<String>>,
}

impl NaiveToggle {
    pub fn new(cfg: Config) -> Self {
        NaiveToggle {
            cfg,
            sampler: Sampler::new(),
            windows: BTreeMap::new(),
            managed: None,
        }
    }
}

impl Controller for NaiveToggle {
    fn interval_ms(&self) -> u64 {
        self.cfg.daemon.interval_ms
    }
    fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        if self.managed.is_none() {
            let devs = fs.list_block_devices().unwrap_or_default();
            self.managed = Some(
                devs.into_iter()
                    .filter(|d| {
                        fs.list_dir(d, "slaves").unwrap_or_default().is_empty()
                            && fs.attr_exists(d, "queue/nomerges")
                    })
                    .collect(),
            );
        }
        let Ok(text) = fs.read_diskstats() else {
            return Vec::new();
        };
        let parsed = parse_diskstats(&text);
        let set = self.sampler.observe(&parsed.devices);
        let low = self.cfg.policy.disable_below_percent / 100.0;
        let mut out = Vec::new();
        for (stat, delta) in parsed.devices.iter().zip(set.deltas) {
            if !self
                .managed
                .as_ref()
                .is_some_and(|m| m.contains(&stat.name))
            {
                continue;
            }
            let acc = self.windows.entry(stat.name.clone()).or_default();
            let Delta::Counters(c) = delta else {
                acc.restart(now_ms);
                continue;
            };
            let close = WindowClose::fixed(self.cfg.window_ms(), self.cfg.daemon.interval_ms / 2);
            let Some(w) = acc.push(&c, now_ms, &close) else {
                continue;
            };
            if w.counters.bios() < self.cfg.policy.min_window_bios {
                continue;
            }
            let want = if w.counters.merge_ratio() < low {
                "2"
            } else {
                "0"
            };
            let cur = fs
                .read_tunable(&stat.name, Tunable::Nomerges)
                .unwrap_or_default();
            if cur != want
                && fs
                    .write_tunable(&stat.name, Tunable::Nomerges, want)
                    .is_ok()
            {
                out.push(Decision {
                    at_ms: now_ms,
                    device: stat.name.clone(),
                    kind: if want == "2" {
                        DecisionKind::Disable
                    } else {
                        DecisionKind::Enable
                    },
                    changes: vec![Change {
                        tunable: Tunable::Nomerges,
                        from: cur,
                        to: want.into(),
                    }],
                    reason: format!(
                        "naive toggle: merge ratio {:.1}% vs {:.1}%",
                        w.counters.merge_ratio() * 100.0,
                        low * 100.0
                    ),
                    applied: Applied::Yes,
                });
            }
        }
        out
    }
    fn restore(&mut self, _now_ms: u64, _fs: &mut dyn BlockFs) -> Vec<Decision> {
        Vec::new()
    }
}

/// What one phase cost and delivered under one policy.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseFigures {
    pub name: String,
    pub start_ms: u64,
    pub end_ms: u64,
    /// Block-layer CPU over all devices, in the scenario's cost profile.
    pub cycles: u64,
    /// The same in the second profile.
    pub cycles_second: u64,
    /// Bytes completed on the top devices (those nothing is stacked on).
    pub bytes: u64,
    /// The worst p99 completion latency over top devices and directions, in µs.
    pub p99_us: f64,
}

/// One policy's run of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyRun {
    pub policy: String,
    pub phases: Vec<PhaseFigures>,
    pub decisions: Vec<Decision>,
    /// `queue/nomerges` writes (each a queue freeze) and the time they kept queues frozen.
    pub nomerges_writes: u64,
    pub frozen_ms: f64,
    /// The simulator's report and the sampled time series, for `--plot`.
    #[serde(skip)]
    pub report: Option<crate::sim::Report>,
    #[serde(skip)]
    pub series: Option<crate::lab::plot::Series>,
}

fn figures(sim: &mut Simulation) -> Vec<PhaseFigures> {
    let devs = sim.device_names();
    let top: Vec<String> = devs
        .iter()
        .filter(|d| sim.list_dir(d, "holders").unwrap_or_default().is_empty())
        .cloned()
        .collect();
    let phases = sim.phases().to_vec();
    phases
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut f = PhaseFigures {
                name: p.name.clone(),
                start_ms: p.start_ns / 1_000_000,
                end_ms: p.end_ns / 1_000_000,
                cycles: 0,
                cycles_second: 0,
                bytes: 0,
                p99_us: 0.0,
            };
            for d in &devs {
                let Some(acc) = sim.phase_acc(i, d) else {
                    continue;
                };
                f.cycles += acc.cycles;
                f.cycles_second += acc.cycles_second;
                if top.contains(d) {
                    f.bytes += (acc.sectors[0] + acc.sectors[1]) * 512;
                    for h in &acc.lat {
                        if h.count() > 0 {
                            f.p99_us = f.p99_us.max(h.quantile(0.99) as f64 / 1000.0);
                        }
                    }
                }
            }
            f
        })
        .collect()
}

fn run_one(
    sc: &Scenario,
    controller: &mut dyn Controller,
    label: &str,
) -> Result<PolicyRun, SimError> {
    let mut sim = Simulation::new(sc)?;
    let mut sampling = crate::lab::plot::Sampling::new(controller);
    let report = run_scenario(&mut sim, &mut sampling, label, &mut |_, _| {});
    if let Some(e) = sim.halted() {
        return Err(e.clone());
    }
    let series = sampling.finish();
    let (nomerges_writes, frozen_ns) = sim.nomerges_freezes();
    Ok(PolicyRun {
        policy: label.to_string(),
        phases: figures(&mut sim),
        decisions: report.decisions.clone(),
        nomerges_writes,
        frozen_ms: frozen_ns as f64 / 1e6,
        report: Some(report),
        series: Some(series),
    })
}

/// The comparison of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioComparison {
    pub scenario: String,
    pub duration_s: f64,
    /// The cost profiles of `cpu_saved_percent` and `cpu_saved_second_percent`.
    pub profile: String,
    pub second_profile: String,
    /// The oracle's level per phase.
    pub oracle_levels: Vec<u8>,
    pub rows: Vec<PolicySummary>,
    pub runs: Vec<PolicyRun>,
}

/// The figures that matter, per policy.
#[derive(Debug, Clone, Serialize)]
pub struct PolicySummary {
    pub policy: String,
    /// Block-layer CPU saved against the kernel default, percent of its CPU, in the
    /// scenario's cost profile.
    pub cpu_saved_percent: f64,
    /// The same in the second profile.
    pub cpu_saved_second_percent: f64,
    /// `queue/nomerges` writes and the time their freezes kept queues from dispatching.
    pub nomerges_writes: u64,
    pub frozen_ms: f64,
    /// This policy's saving as a share of the oracle's, percent (100 when the oracle saves
    /// nothing and neither does this policy).
    pub of_oracle_percent: f64,
    /// The worst phase's throughput loss against the kernel default, percent.
    pub worst_throughput_loss_percent: f64,
    pub worst_throughput_loss_phase: String,
    /// The worst phase's p99 latency change against the kernel default, percent.
    pub worst_p99_change_percent: f64,
    pub level_changes: usize,
    pub level_changes_per_hour: f64,
    /// Level changes after settling at the oracle's level of their phase (probes, trials,
    /// flapping: convergence excluded), the most in any rolling hour.
    pub settled_changes_per_hour_max: usize,
    /// Per phase change: ms until the policy moved toward the oracle's level (None: it
    /// never did within the phase; 0: it was already there).
    pub reaction_ms: Vec<Option<u64>>,
}

/// A write that moved a level: outcomes that end where they are (a probe that stays at L0,
/// a trial that stays at L2) wrote nothing.
fn is_level_change(d: &Decision) -> bool {
    d.was_applied() && d.kind != DecisionKind::Restore && d.changes.iter().any(|c| c.from != c.to)
}

/// The level changes made after the policy had settled at the oracle's level of their
/// phase: the churn on a steady workload, convergence after a phase change excluded.
/// Returns the most of them one device made within any rolling hour.
fn settled_changes_max_per_hour(
    decisions: &[Decision],
    phases: &[PhaseFigures],
    oracle_levels: &[u8],
) -> usize {
    let devices: std::collections::BTreeSet<&str> = decisions
        .iter()
        .filter(|d| is_level_change(d))
        .map(|d| d.device.as_str())
        .collect();
    devices
        .into_iter()
        .map(|device| {
            let mine: Vec<Decision> = decisions
                .iter()
                .filter(|d| d.device == device)
                .cloned()
                .collect();
            settled_changes_of_one_device(&mine, phases, oracle_levels)
        })
        .max()
        .unwrap_or(0)
}

fn settled_changes_of_one_device(
    decisions: &[Decision],
    phases: &[PhaseFigures],
    oracle_levels: &[u8],
) -> usize {
    let mut changes: Vec<u64> = decisions
        .iter()
        .filter(|d| is_level_change(d))
        .map(|d| d.at_ms)
        .collect();
    // Several attributes written at one tick are one change.
    changes.dedup();
    let mut settled: Vec<u64> = Vec::new();
    for (p, &target) in phases.iter().zip(oracle_levels) {
        let in_phase = |t: &&u64| **t >= p.start_ms && **t < p.end_ms;
        // A decision at tick t sets the level from t on; level_at(t + 1) sees it.
        let settled_from = if level_at(decisions, p.start_ms) == target {
            Some(p.start_ms)
        } else {
            changes
                .iter()
                .filter(in_phase)
                .find(|&&t| level_at(decisions, t + 1) == target)
                .map(|t| t + 1)
        };
        if let Some(from) = settled_from {
            settled.extend(changes.iter().filter(in_phase).filter(|&&t| t >= from));
        }
    }
    settled.sort_unstable();
    let mut most = 0;
    let mut first = 0;
    for (i, &t) in settled.iter().enumerate() {
        while t - settled[first] >= crate::logic::policy::HOUR_MS {
            first += 1;
        }
        most = most.max(i + 1 - first);
    }
    most
}

/// Counts changes of level: several attributes written at one tick are one change.
fn count_changes(decisions: &[Decision]) -> usize {
    let mut seen = std::collections::BTreeSet::new();
    decisions
        .iter()
        .filter(|d| is_level_change(d))
        .filter(|d| seen.insert((d.at_ms, d.device.clone())))
        .count()
}

fn summarize(
    run: &PolicyRun,
    base: &PolicyRun,
    oracle_saved: f64,
    oracle_levels: &[u8],
    duration_s: f64,
) -> PolicySummary {
    let saved_in = |cycles: fn(&PhaseFigures) -> u64| {
        let total = |r: &PolicyRun| r.phases.iter().map(cycles).sum::<u64>() as f64;
        let base_cycles = total(base);
        if base_cycles > 0.0 {
            (base_cycles - total(run)) / base_cycles * 100.0
        } else {
            0.0
        }
    };
    let saved = saved_in(|p| p.cycles);
    let mut worst_loss = f64::MIN;
    let mut worst_phase = String::new();
    let mut worst_p99 = f64::MIN;
    for (p, b) in run.phases.iter().zip(&base.phases) {
        let loss = if b.bytes > 0 {
            (b.bytes as f64 - p.bytes as f64) / b.bytes as f64 * 100.0
        } else {
            0.0
        };
        if loss > worst_loss {
            worst_loss = loss;
            worst_phase = p.name.clone();
        }
        if b.p99_us > 0.0 {
            worst_p99 = worst_p99.max((p.p99_us / b.p99_us - 1.0) * 100.0);
        }
    }
    // Reaction: after each phase change where the oracle's level moves, the first level
    // change in the same direction.
    let mut reaction_ms = Vec::new();
    for i in 1..run.phases.len() {
        let (prev, next) = (oracle_levels[i - 1], oracle_levels[i]);
        if prev == next {
            continue;
        }
        let start = run.phases[i].start_ms;
        let end = run.phases[i].end_ms;
        let down = next > prev;
        let at_start = level_at(&run.decisions, start);
        // Toward less merging: any step down counts as reacting; toward more merging: the
        // level must reach the oracle's (a probe from L3 to L0 does).
        let reached = |level: u8| {
            if down {
                level > at_start
            } else {
                level <= next
            }
        };
        let already = if down {
            at_start >= next
        } else {
            at_start <= next
        };
        let moved = run
            .decisions
            .iter()
            .filter(|d| d.was_applied() && d.at_ms >= start && d.at_ms < end)
            .map(|d| d.at_ms)
            .find(|&t| reached(level_at(&run.decisions, t + 1)))
            .map(|t| t - start);
        reaction_ms.push(if already { Some(0) } else { moved });
    }
    PolicySummary {
        policy: run.policy.clone(),
        cpu_saved_percent: saved,
        cpu_saved_second_percent: saved_in(|p| p.cycles_second),
        nomerges_writes: run.nomerges_writes,
        frozen_ms: run.frozen_ms,
        // Where the oracle saves nothing (merging pays throughout), matching or beating it
        // is all there is to capture.
        of_oracle_percent: if oracle_saved.abs() < NOTHING_TO_SAVE_PERCENT {
            if saved >= -1e-9 { 100.0 } else { 0.0 }
        } else {
            saved / oracle_saved * 100.0
        },
        worst_throughput_loss_percent: worst_loss.max(0.0),
        worst_throughput_loss_phase: worst_phase,
        worst_p99_change_percent: if worst_p99 == f64::MIN {
            0.0
        } else {
            worst_p99
        },
        level_changes: count_changes(&run.decisions),
        level_changes_per_hour: count_changes(&run.decisions) as f64 / (duration_s / 3600.0),
        settled_changes_per_hour_max: settled_changes_max_per_hour(
            &run.decisions,
            &run.phases,
            oracle_levels,
        ),
        reaction_ms,
    }
}

/// The ladder level implied by the last nomerges/front_merges writes before `t_ms` (on the
/// first device that changed; the shipped scenarios move their devices together).
fn level_at(decisions: &[Decision], t_ms: u64) -> u8 {
    let mut nomerges = "0".to_string();
    let mut front = "1".to_string();
    for d in decisions
        .iter()
        .filter(|d| d.was_applied() && d.at_ms < t_ms)
    {
        for c in &d.changes {
            match c.tunable {
                Tunable::Nomerges => nomerges = c.to.clone(),
                Tunable::FrontMerges => front = c.to.clone(),
                _ => {}
            }
        }
    }
    match (nomerges.as_str(), front.as_str()) {
        ("2", _) => 3,
        ("1", _) => 2,
        (_, "0") => 1,
        _ => 0,
    }
}

/// Runs the whole comparison for one scenario.
pub fn compare(sc: &Scenario, cfg: &Config) -> Result<ScenarioComparison, SimError> {
    // The daemon reads the scenario's cost profile, the one the oracle is chosen in.
    let cfg = &sc.daemon_config(cfg);
    let interval_ms = cfg.daemon.interval_ms;
    // Static levels, for the oracle.
    let (profile, second_profile) = {
        let sim = Simulation::new(sc)?;
        let (a, b) = sim.cost_names();
        (a.to_string(), b.to_string())
    };
    let mut statics = Vec::new();
    for level in 0..=3u8 {
        let mut c = LevelSchedule::new(interval_ms, vec![(0, level)], "pin");
        statics.push(run_one(sc, &mut c, &format!("static-L{level}"))?);
    }
    let base = &statics[0];
    let nphases = base.phases.len();
    let mut oracle_levels = Vec::with_capacity(nphases);
    for i in 0..nphases {
        let b = base.phases[i].bytes as f64;
        let worth = base.phases[i].cycles as f64 * (1.0 - ORACLE_MIN_SAVING);
        let mut best = 0u8;
        for (level, run) in statics.iter().enumerate().skip(1) {
            let p = &run.phases[i];
            let within = b == 0.0 || (b - p.bytes as f64) / b <= ORACLE_MAX_LOSS;
            if within
                && (p.cycles as f64) < worth
                && p.cycles < statics[best as usize].phases[i].cycles
            {
                best = level as u8;
            }
        }
        oracle_levels.push(best);
    }
    let schedule: Vec<(u64, u8)> = base
        .phases
        .iter()
        .zip(&oracle_levels)
        .map(|(p, l)| (p.start_ms, *l))
        .collect();

    let runs = vec![
        run_one(sc, &mut KernelDefault { interval_ms }, "kernel-default")?,
        run_one(
            sc,
            &mut LevelSchedule::new(interval_ms, vec![(0, 3)], "pin"),
            "static-nomerges-2",
        )?,
        run_one(sc, &mut NaiveToggle::new(cfg.clone()), "naive-toggle")?,
        run_one(sc, &mut Daemon::simulated(cfg.clone()), "adaptive")?,
        run_one(
            sc,
            &mut LevelSchedule::new(interval_ms, schedule, "oracle"),
            "oracle",
        )?,
    ];
    let duration_s = sc.duration_ns() as f64 / 1e9;
    let total = |r: &PolicyRun| r.phases.iter().map(|p| p.cycles).sum::<u64>() as f64;
    let base_cycles = total(&runs[0]);
    let oracle_saved = if base_cycles > 0.0 {
        (base_cycles - total(&runs[4])) / base_cycles * 100.0
    } else {
        0.0
    };
    let rows = runs
        .iter()
        .map(|r| summarize(r, &runs[0], oracle_saved, &oracle_levels, duration_s))
        .collect();
    Ok(ScenarioComparison {
        scenario: sc.name.clone(),
        duration_s,
        profile,
        second_profile,
        oracle_levels,
        rows,
        runs,
    })
}

/// Renders comparisons as a table for humans.
pub fn render(comparisons: &[ScenarioComparison], window_ms: u64) -> String {
    let mut s = String::new();
    for c in comparisons {
        s.push_str(&format!(
            "\nscenario {} ({:.0} s; CPU in {}, second column {}; oracle levels per phase: {})\n",
            c.scenario,
            c.duration_s,
            c.profile,
            c.second_profile,
            c.oracle_levels
                .iter()
                .map(|l| format!("L{l}"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
        s.push_str(&format!(
            "  {:<18} {:>9} {:>9} {:>9} {:>11} {:>9} {:>8} {:>9} {:>9} {:>9}  {}\n",
            "policy",
            "CPU sav%",
            "(2nd)",
            "of oracle",
            "worst tput%",
            "p99 chg%",
            "changes",
            "chg/hour",
            "settled/h",
            "frozen ms",
            "reaction per phase change"
        ));
        for r in &c.rows {
            let react: Vec<String> = r
                .reaction_ms
                .iter()
                .map(|m| match m {
                    Some(ms) => format!("{:.1}w", *ms as f64 / window_ms as f64),
                    None => "never".into(),
                })
                .collect();
            s.push_str(&format!(
                "  {:<18} {:>9.2} {:>9.2} {:>9.0} {:>11.2} {:>9.1} {:>8} {:>9.1} {:>9} {:>9.1}  {}\n",
                r.policy,
                r.cpu_saved_percent,
                r.cpu_saved_second_percent,
                r.of_oracle_percent,
                -r.worst_throughput_loss_percent,
                r.worst_p99_change_percent,
                r.level_changes,
                r.level_changes_per_hour,
                r.settled_changes_per_hour_max,
                r.frozen_ms,
                react.join(" ")
            ));
        }
    }
    s
}

/// The shipped comparison suite, embedded so `simulate --compare` works anywhere.
pub const SUITE: &[(&str, &str)] = &[
    (
        "oltp_steady",
        include_str!("../../config/scenarios/compare/oltp_steady.toml"),
    ),
    (
        "backup",
        include_str!("../../config/scenarios/compare/backup.toml"),
    ),
    (
        "oltp_backup_every_minute",
        include_str!("../../config/scenarios/compare/oltp_backup_every_minute.toml"),
    ),
    (
        "mix_noise",
        include_str!("../../config/scenarios/compare/mix_noise.toml"),
    ),
    (
        "bursty_spikes",
        include_str!("../../config/scenarios/compare/bursty_spikes.toml"),
    ),
    (
        "dm_stripe_oltp",
        include_str!("../../config/scenarios/compare/dm_stripe_oltp.toml"),
    ),
    (
        "readers_vs_writer",
        include_str!("../../config/scenarios/compare/readers_vs_writer.toml"),
    ),
    (
        "same_signature",
        include_str!("../../config/scenarios/compare/same_signature.toml"),
    ),
];

/// The suite's scenarios, each phase's duration scaled by `scale` (1.0: as shipped; the
/// short suite of the tests uses less), never below 10 s.
pub fn suite(scale: f64) -> Result<Vec<Scenario>, crate::sim::ScenarioError> {
    SUITE
        .iter()
        .map(|(name, text)| {
            let mut sc = Scenario::from_toml_str(text, &format!("<suite:{name}>"), None)?;
            scale_phases(&mut sc, scale);
            Ok(sc)
        })
        .collect()
}

/// Scales every phase's duration, never below 10 s.
pub fn scale_phases(sc: &mut Scenario, scale: f64) {
    for p in &mut sc.phases {
        p.duration_s = (p.duration_s * scale).max(10.0_f64.min(p.duration_s));
    }
}

/// One scenario of the suite by name, scaled like [`suite`].
pub fn suite_scenario(name: &str, scale: f64) -> Option<Scenario> {
    let (_, text) = SUITE.iter().find(|(n, _)| *n == name)?;
    let mut sc = Scenario::from_toml_str(text, &format!("<suite:{name}>"), None).ok()?;
    scale_phases(&mut sc, scale);
    Some(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(at_ms: u64, device: &str, from: &str, to: &str) -> Decision {
        Decision {
            at_ms,
            device: device.into(),
            kind: DecisionKind::Pin,
            changes: vec![Change {
                tunable: Tunable::Nomerges,
                from: from.into(),
                to: to.into(),
            }],
            reason: String::new(),
            applied: Applied::Yes,
        }
    }

    fn phase(start_ms: u64, end_ms: u64) -> PhaseFigures {
        PhaseFigures {
            name: "p".into(),
            start_ms,
            end_ms,
            cycles: 0,
            cycles_second: 0,
            bytes: 0,
            p99_us: 0.0,
        }
    }

    #[test]
    fn settled_changes_leave_out_convergence_and_count_per_device_per_hour() {
        let h = crate::logic::policy::HOUR_MS;
        let phases = [phase(0, 3 * h)];
        // Convergence to L3 (not counted), then probes: out and back, each two changes.
        let mut d = vec![change(10_000, "sda", "0", "2")];
        for t in [h / 2, h / 2 + h, 2 * h + h / 2] {
            d.push(change(t, "sda", "2", "0"));
            d.push(change(t + 2000, "sda", "0", "2"));
        }
        assert_eq!(settled_changes_max_per_hour(&d, &phases, &[3]), 2);
        // Another device doing the same at other times does not add to sda's hour.
        let mut both = d.clone();
        for x in &d {
            let mut y = x.clone();
            y.device = "sdb".into();
            y.at_ms += 600_000;
            both.push(y);
        }
        both.sort_by_key(|x| x.at_ms);
        assert_eq!(settled_changes_max_per_hour(&both, &phases, &[3]), 2);
        // Probes every 20 minutes: three in an hour, six changes.
        let mut fast = vec![change(10_000, "sda", "0", "2")];
        for k in 1..6u64 {
            fast.push(change(k * 1_200_000, "sda", "2", "0"));
            fast.push(change(k * 1_200_000 + 2000, "sda", "0", "2"));
        }
        assert_eq!(settled_changes_max_per_hour(&fast, &phases, &[3]), 6);
        // A stay at a wrong level never settles: nothing counted.
        assert_eq!(settled_changes_max_per_hour(&fast, &phases, &[2]), 0);
    }
}
