//! The data a run's picture is drawn from: per-device [`Sample`]s over time, the decisions
//! and the phases. [`series_from_report`] builds one at phase granularity from a report
//! alone; [`super::sampling::Sampling`] builds one tick by tick.

use mergetune_kernel::tunable::Tunable;
use mergetune_logic::decision::Decision;
use mergetune_logic::decision::Level;
use mergetune_sim::report::{DeviceReport, Report};
use std::collections::BTreeMap;

/// One sample of one device: the tick's window, read from the counters.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Sample {
    /// End of the window, seconds.
    pub t_s: f64,
    /// Bios (completed + merged) per second, reads and writes.
    pub bios_per_s: [f64; 2],
    /// merged / bios, percent; None when the window had no bios of that direction.
    pub merge_percent: [Option<f64>; 2],
    /// Mean time per completed request (ms spent / requests completed), ms.
    pub await_ms: [Option<f64>; 2],
    /// Ladder level from the tunables (nomerges, front_merges).
    pub level: Level,
}

/// Per-device samples and the decisions of a run.
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub devices: BTreeMap<String, Vec<Sample>>,
    pub decisions: Vec<Decision>,
    /// Phase boundaries: (name, start s, end s).
    pub phases: Vec<(String, f64, f64)>,
    pub title: String,
}

pub(super) fn level_of(nomerges: u8, front_merges: Option<u8>) -> Level {
    Level::of_tunables(nomerges, front_merges == Some(0))
}

/// A series at phase granularity from a report alone: one step per phase, the level from
/// the nomerges timeline and the front_merges decisions.
pub fn series_from_report(report: &Report) -> Series {
    let mut s = Series {
        title: format!("{} — policy {}", report.scenario, report.policy),
        decisions: report.decisions.clone(),
        ..Default::default()
    };
    for p in &report.phases {
        let end_ms = p.end_ms.min(report.duration_ms);
        s.phases.push((
            p.name.clone(),
            p.start_ms as f64 / 1000.0,
            end_ms as f64 / 1000.0,
        ));
        for d in &p.devices {
            let smp = phase_sample(d);
            let v = s.devices.entry(d.device.clone()).or_default();
            // The step: the phase's figures at its start and at its end.
            for t in [p.start_ms, end_ms] {
                v.push(Sample {
                    t_s: t as f64 / 1000.0,
                    ..smp
                });
            }
        }
    }
    // Levels: replay nomerges and front_merges changes onto the steps.
    for (dev, samples) in s.devices.iter_mut() {
        *samples = with_levels(samples, &ladder_events(report, dev));
    }
    s
}

/// One device's figures over a phase, time and level left at their defaults. Bios per
/// second are `iops` scaled by (requests + merged) / requests.
fn phase_sample(d: &DeviceReport) -> Sample {
    let mut smp = Sample::default();
    for (k, r) in [&d.read, &d.write].into_iter().enumerate() {
        smp.bios_per_s[k] = r.iops
            * if r.requests > 0 {
                (r.requests + r.merged) as f64 / r.requests as f64
            } else {
                1.0
            };
        if r.bios > 0 {
            smp.merge_percent[k] = Some(r.merge_percent);
            smp.await_ms[k] = Some(r.lat_mean_us / 1000.0);
        }
    }
    smp
}

/// A change of a device's ladder tunables: when (s), and the nomerges and front_merges it
/// leaves.
type LadderEvent = (f64, u8, Option<u8>);

/// The device's applied decisions that change nomerges or front_merges, in order, each
/// with both values after it (a nomerges that does not parse leaves it as it was; a
/// front_merges that does not parse is unknown).
fn ladder_events(report: &Report, dev: &str) -> Vec<LadderEvent> {
    let (mut nm, mut fm) = (0u8, None);
    let mut events = Vec::new();
    for d in report
        .decisions
        .iter()
        .filter(|d| d.device == dev && d.was_applied())
    {
        let mut ladder = false;
        for c in &d.changes {
            match c.tunable {
                Tunable::Nomerges => nm = c.to.parse().unwrap_or(nm),
                Tunable::FrontMerges => fm = c.to.parse().ok(),
                _ => continue,
            }
            ladder = true;
        }
        if !ladder {
            continue;
        }
        events.push((d.at_ms as f64 / 1000.0, nm, fm));
    }
    events
}

/// The steps with their levels: each sample at the level of the last change at or before
/// it. A change later than the last step so far adds a step at its own time, with that
/// step's figures (or the sample's, when it is the first) at the new level.
fn with_levels(samples: &[Sample], events: &[LadderEvent]) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut ei = 0;
    let (mut cur_nm, mut cur_fm) = (0u8, None);
    for smp in samples {
        while ei < events.len() && events[ei].0 <= smp.t_s {
            let e = events[ei];
            if e.0 > out.last().map(|x: &Sample| x.t_s).unwrap_or(-1.0) {
                out.push(Sample {
                    t_s: e.0,
                    level: level_of(e.1, e.2),
                    ..*out.last().unwrap_or(smp)
                });
            }
            cur_nm = e.1;
            cur_fm = e.2;
            ei += 1;
        }
        out.push(Sample {
            level: level_of(cur_nm, cur_fm),
            ..*smp
        });
    }
    out
}
