//! The run report: per phase and device, throughput, merge ratios, latency, modelled CPU,
//! the nomerges timeline and every decision with its reason. Rendered as text or JSON;
//! contains nothing from the wall clock, so the same seed gives the same report.

use super::engine::{Dir, NomergesChange, PhaseAcc, Simulation};
use crate::daemon::controller::Decision;
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
    /// Modelled block-layer cycles per bio submitted to this device.
    pub cycles_per_io: f64,
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
            duration_ms: sim.now_ns() / 1_000_000,
            total_bios: sim.total_bios(),
            phases,
            nomerges_timeline: sim.nomerges_log().to_vec(),
            decisions,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "scenario {}  seed {}  policy {}  {:.1} s simulated, {} bios",
            self.scenario,
            self.seed,
            self.policy,
            self.duration_ms as f64 / 1000.0,
            self.total_bios
        );
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
                "device", "dir", "IOPS", "MB/s", "merge%", "mean µs", "p99 µs", "max µs", "cyc/IO"
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
        s
    }
}
