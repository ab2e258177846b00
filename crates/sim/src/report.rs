//! The run report: per phase and device, throughput, merge ratios, latency, modelled CPU,
//! the nomerges timeline and every decision with its reason. Rendered as text or JSON;
//! contains nothing from the wall clock, so the same seed gives the same report.
//!
//! The modelled CPU is in the currency of the profile that priced the run: ns under a
//! measured profile, model cycles under `lkml-2008` or a `[cost]` table. The headline names
//! the profile and the unit, the column is labelled by it (`ns/IO`, `cyc/IO`), and the
//! JSON keeps its field name `cycles_per_io` (scripts read it) with `cycles_per_io_unit`
//! next to it: a rename would have broken every consumer for a name.

use super::engine::{NomergesChange, PhaseAcc, Simulation};
use mergetune_kernel::trace::Dir;
use mergetune_logic::decision::Decision;
use mergetune_logic::pricing::profile::{self, Unit};
use serde::Serialize;
use std::fmt::Write as _;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirReport {
    /// Bios submitted to this device.
    pub bios: u64,
    /// Requests completed (after merging).
    pub requests: u64,
    /// Bios merged into an existing request.
    pub merged: u64,
    /// Completed bios per second of phase time.
    pub iops: f64,
    pub mb_per_s: f64,
    /// merged / (requests + merged), percent.
    pub merge_percent: f64,
    pub lat_mean_us: f64,
    pub lat_p99_us: f64,
    pub lat_max_us: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceReport {
    pub device: String,
    pub read: DirReport,
    pub write: DirReport,
    /// Modelled block-layer CPU per bio submitted to this device, in `cycles_per_io_unit`.
    pub cycles_per_io: f64,
    /// The unit of `cycles_per_io`: `ns` (a measured profile) or `model-cycles`.
    pub cycles_per_io_unit: Unit,
}

/// A per-I/O CPU column's label in `unit`: `ns/IO`, `cyc/IO` (`noun` "IO" or "bio").
pub fn per_unit_label(unit: Unit, noun: &str) -> String {
    match unit {
        Unit::Ns => format!("ns/{noun}"),
        Unit::ModelCycles => format!("cyc/{noun}"),
    }
}

/// The unit in words, for a headline.
pub fn unit_words(unit: Unit) -> &'static str {
    match unit {
        Unit::Ns => "ns of CPU",
        Unit::ModelCycles => "model cycles (the 2008 thread's shares, not times)",
    }
}

/// The unit of a run priced by `pricing`: a shipped profile's own; a scenario's `[cost]`
/// table is in the model cycles its defaults are.
pub fn pricing_unit(pricing_name: &str) -> Unit {
    profile::builtin(pricing_name)
        .map(|p| p.unit)
        .unwrap_or(Unit::ModelCycles)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseReport {
    pub name: String,
    pub start_ms: u64,
    pub end_ms: u64,
    pub devices: Vec<DeviceReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub policy: String,
    /// The profile that priced the simulated kernel's steps (`[cost]` for a scenario's
    /// own table), and the unit of every `cycles_per_io`.
    pub cost_profile: String,
    pub cost_unit: Unit,
    /// What the daemon priced its steps with (`live` or a profile), for the adaptive
    /// policy; absent for the fixed baselines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemon_pricing: Option<String>,
    pub duration_ms: u64,
    pub total_bios: u64,
    pub phases: Vec<PhaseReport>,
    pub nomerges_timeline: Vec<NomergesChange>,
    pub decisions: Vec<Decision>,
}

fn dir_report(acc: &PhaseAcc, dir: Dir, secs: f64) -> DirReport {
    let i = dir.idx();
    let h = &acc.lat[i];
    let requests = acc.completed[i];
    let merged = acc.merged[i];
    let secs = secs.max(1e-9);
    DirReport {
        bios: acc.bios[i],
        requests,
        merged,
        iops: h.count() as f64 / secs,
        mb_per_s: acc.sectors[i] as f64 * 512.0 / 1e6 / secs,
        merge_percent: if requests + merged == 0 {
            0.0
        } else {
            merged as f64 * 100.0 / (requests + merged) as f64
        },
        lat_mean_us: h.mean() / 1000.0,
        lat_p99_us: h.quantile(0.99) as f64 / 1000.0,
        lat_max_us: h.max() as f64 / 1000.0,
    }
}

impl Report {
    pub fn build(sim: &Simulation, policy: &str, decisions: Vec<Decision>) -> Report {
        let names = sim.device_names();
        let cost_profile = sim.cost_pricing().name.clone();
        let cost_unit = pricing_unit(&cost_profile);
        let phases = sim
            .phases()
            .iter()
            .enumerate()
            .map(|(p, info)| {
                let end = info.end_ns.min(sim.now_ns());
                let secs = end.saturating_sub(info.start_ns) as f64 / 1e9;
                let devices = names
                    .iter()
                    .filter_map(|n| {
                        let acc = sim.phase_acc(p, n)?;
                        let bios = acc.bios[0] + acc.bios[1];
                        Some(DeviceReport {
                            device: n.clone(),
                            read: dir_report(acc, Dir::Read, secs),
                            write: dir_report(acc, Dir::Write, secs),
                            cycles_per_io: if bios == 0 {
                                0.0
                            } else {
                                acc.cycles as f64 / bios as f64
                            },
                            cycles_per_io_unit: cost_unit,
                        })
                    })
                    .collect();
                PhaseReport {
                    name: info.name.clone(),
                    start_ms: info.start_ns / 1_000_000,
                    end_ms: info.end_ns / 1_000_000,
                    devices,
                }
            })
            .collect();
        Report {
            scenario: sim.name().to_string(),
            seed: sim.seed(),
            policy: policy.to_string(),
            cost_profile,
            cost_unit,
            daemon_pricing: None,
            duration_ms: sim.now_ns() / 1_000_000,
            total_bios: sim.total_bios(),
            phases,
            nomerges_timeline: sim.nomerges_log().to_vec(),
            decisions,
        }
    }

    /// Where the run's profile came from, in words.
    fn cost_origin(&self) -> String {
        match profile::builtin(&self.cost_profile) {
            Some(p) => mergetune_logic::pricing::source::PricingSource::Profile {
                spec: self.cost_profile.clone(),
                profile: Box::new(p),
            }
            .origin(),
            None => "the scenario's own [cost] table".into(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The report as text: the run and its pricing, each phase's table per device and
    /// direction, then what the daemon did.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        self.write_header(&mut s);
        self.write_phases(&mut s);
        self.write_decisions(&mut s);
        s
    }

    /// The run (scenario, seed, policy, length) and what priced it.
    fn write_header(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "scenario {}  seed {}  policy {}  {:.1} s simulated, {} bios",
            self.scenario,
            self.seed,
            self.policy,
            self.duration_ms as f64 / 1000.0,
            self.total_bios
        );
        let _ = writeln!(
            s,
            "priced in cost profile {} ({}): CPU per I/O ({}) in {}{}",
            self.cost_profile,
            self.cost_origin(),
            per_unit_label(self.cost_unit, "IO"),
            unit_words(self.cost_unit),
            match &self.daemon_pricing {
                Some(p) if *p == self.cost_profile => {
                    "; the daemon priced its steps with the same profile".to_string()
                }
                Some(p) if p == profile::LIVE => {
                    "; the daemon priced its steps live (the simulator's merge-path accounting)"
                        .to_string()
                }
                Some(p) => format!("; the daemon priced its steps with {p}"),
                None => String::new(),
            }
        );
    }

    /// Per phase, a row per device and direction that saw bios.
    fn write_phases(&self, s: &mut String) {
        let cpu_label = per_unit_label(self.cost_unit, "IO");
        for p in &self.phases {
            let _ = writeln!(
                s,
                "\nphase {} ({:.1}–{:.1} s)",
                p.name,
                p.start_ms as f64 / 1000.0,
                p.end_ms as f64 / 1000.0
            );
            let _ = writeln!(
                s,
                "  {:<9} {:>3} {:>10} {:>9} {:>7} {:>10} {:>10} {:>10} {:>9}",
                "device", "dir", "IOPS", "MB/s", "merge%", "mean µs", "p99 µs", "max µs", cpu_label
            );
            for d in &p.devices {
                if d.read.bios + d.write.bios == 0 {
                    continue;
                }
                for (label, r) in [("R", &d.read), ("W", &d.write)] {
                    if r.bios == 0 {
                        continue;
                    }
                    let _ = writeln!(
                        s,
                        "  {:<9} {:>3} {:>10.0} {:>9.1} {:>7.1} {:>10.1} {:>10.1} {:>10.1} {:>9.0}",
                        d.device,
                        label,
                        r.iops,
                        r.mb_per_s,
                        r.merge_percent,
                        r.lat_mean_us,
                        r.lat_p99_us,
                        r.lat_max_us,
                        d.cycles_per_io
                    );
                }
            }
        }
    }

    /// nomerges over time, then every decision.
    fn write_decisions(&self, s: &mut String) {
        let _ = writeln!(s, "\nnomerges over time:");
        for c in &self.nomerges_timeline {
            let _ = writeln!(
                s,
                "  {:>9.1} s  {:<9} nomerges={}",
                c.at_ms as f64 / 1000.0,
                c.device,
                c.value
            );
        }
        let _ = writeln!(s, "\ndecisions ({}):", self.decisions.len());
        if self.decisions.is_empty() {
            let _ = writeln!(s, "  none");
        }
        for d in &self.decisions {
            let _ = writeln!(s, "  {:>9.1} s  {d}", d.at_ms as f64 / 1000.0);
        }
    }
}
