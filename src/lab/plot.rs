//! Pictures (SVG, plotters): what the policy did over a simulate or replay run, and what a
//! trace looks like for `advise`.
//!
//! A [`crate::sim::Report`] holds per-phase aggregates, the nomerges timeline and the
//! decisions; [`plot_report`] draws from those alone (phase-level steps). For per-tick
//! curves, run the controller inside a [`Sampling`] wrapper: it forwards every tick and
//! then reads the block stack's counters and tunables through the same [`BlockFs`] (the
//! simulator's, or a recording's in replay), giving a [`Series`] for [`plot_run`].

use crate::daemon::controller::{Controller, Decision};
use crate::kernel::blockfs::BlockFs;
use crate::kernel::tunable::Tunable;
use crate::lab::advise::{Analysis, SIZE_BUCKETS, size_bucket_label};
use crate::logic::decision::DecisionKind;
use crate::sim::report::Report;
use plotters::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{path}: {message}")]
    Draw { path: String, message: String },
    #[error("{path}: nothing to plot: {reason}")]
    Empty { path: String, reason: String },
}

type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

fn draw_err(path: &Path, e: Box<dyn std::error::Error>) -> PlotError {
    PlotError::Draw {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

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
    /// Ladder level 0..=3 from the tunables (nomerges, front_merges).
    pub level: u8,
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

fn level_of(nomerges: u8, front_merges: Option<u8>) -> u8 {
    match nomerges {
        0 if front_merges == Some(0) => 1,
        0 => 0,
        1 => 2,
        _ => 3,
    }
}

/// A [`Controller`] that runs another and samples the block stack after each tick.
pub struct Sampling<'a> {
    inner: &'a mut dyn Controller,
    prev: HashMap<String, [u64; 17]>,
    prev_t_ms: u64,
    series: Series,
}

impl<'a> Sampling<'a> {
    pub fn new(inner: &'a mut dyn Controller) -> Self {
        Sampling {
            inner,
            prev: HashMap::new(),
            prev_t_ms: 0,
            series: Series::default(),
        }
    }

    /// The samples and decisions so far.
    pub fn finish(self) -> Series {
        self.series
    }

    fn sample(&mut self, now_ms: u64, fs: &mut dyn BlockFs) {
        let Ok(text) = fs.read_diskstats() else {
            return;
        };
        let stats = crate::kernel::diskstats::parse_diskstats(&text);
        let dt_s = now_ms.saturating_sub(self.prev_t_ms) as f64 / 1000.0;
        for d in &stats.devices {
            let v = d.fields.values;
            let mut cur = [0u64; 17];
            cur[..v.len().min(17)].copy_from_slice(&v[..v.len().min(17)]);
            let Some(prev) = self.prev.insert(d.name.clone(), cur) else {
                continue;
            };
            if dt_s <= 0.0 {
                continue;
            }
            let delta = |i: usize| cur[i].checked_sub(prev[i]);
            let mut s = Sample {
                t_s: now_ms as f64 / 1000.0,
                ..Default::default()
            };
            for (k, (done, merged, ms)) in [(0usize, 1usize, 3usize), (4, 5, 7)].iter().enumerate()
            {
                let (Some(c), Some(m), Some(t)) = (delta(*done), delta(*merged), delta(*ms)) else {
                    continue; // a reset: no sample for this window
                };
                s.bios_per_s[k] = (c + m) as f64 / dt_s;
                if c + m > 0 {
                    s.merge_percent[k] = Some(m as f64 * 100.0 / (c + m) as f64);
                }
                if c > 0 {
                    s.await_ms[k] = Some(t as f64 / c as f64);
                }
            }
            let nomerges = fs
                .read_attr(&d.name, "queue/nomerges")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            let front = fs
                .read_attr(&d.name, "queue/iosched/front_merges")
                .ok()
                .and_then(|v| v.trim().parse().ok());
            s.level = level_of(nomerges, front);
            self.series
                .devices
                .entry(d.name.clone())
                .or_default()
                .push(s);
        }
        self.prev_t_ms = now_ms;
    }
}

impl Controller for Sampling<'_> {
    fn interval_ms(&self) -> u64 {
        self.inner.interval_ms()
    }
    fn next_tick_in_ms(&self) -> u64 {
        self.inner.next_tick_in_ms()
    }
    fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        let d = self.inner.tick(now_ms, fs);
        self.series.decisions.extend(d.iter().cloned());
        self.sample(now_ms, fs);
        d
    }
    fn restore(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        self.inner.restore(now_ms, fs)
    }
    fn snapshot(&self) -> Option<crate::daemon::snapshot::DaemonSnapshot> {
        self.inner.snapshot()
    }
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
        s.phases.push((
            p.name.clone(),
            p.start_ms as f64 / 1000.0,
            p.end_ms.min(report.duration_ms) as f64 / 1000.0,
        ));
        for d in &p.devices {
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
            let v = s.devices.entry(d.device.clone()).or_default();
            for t in [p.start_ms, p.end_ms.min(report.duration_ms)] {
                v.push(Sample {
                    t_s: t as f64 / 1000.0,
                    ..smp
                });
            }
        }
    }
    // Levels: replay nomerges and front_merges changes onto the steps.
    for (dev, samples) in s.devices.iter_mut() {
        let mut out = Vec::new();
        let (mut nm, mut fm) = (0u8, None);
        let mut events: Vec<(f64, u8, Option<u8>)> = Vec::new();
        for d in report
            .decisions
            .iter()
            .filter(|d| &d.device == dev && d.was_applied())
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
        let mut ei = 0;
        let (mut cur_nm, mut cur_fm) = (0u8, None);
        for smp in samples.iter() {
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
        *samples = out;
    }
    s
}

const PANEL_H: u32 = 190;
const COL_W: u32 = 720;
const DECISION: RGBColor = RGBColor(120, 40, 160);
const PROBE: RGBColor = RGBColor(230, 120, 0);
const READ: RGBColor = RGBColor(31, 119, 180);
const WRITE: RGBColor = RGBColor(214, 39, 40);
const SHADE: RGBColor = RGBColor(235, 235, 235);

fn font(size: u32) -> TextStyle<'static> {
    ("sans-serif", size).into_font().into()
}

/// Draws one run (columns: runs side by side; rows: per device, four panels).
fn draw_runs(path: &Path, runs: &[&Series]) -> DrawResult<()> {
    let mut devices: Vec<String> = Vec::new();
    for r in runs {
        for (d, smp) in &r.devices {
            let busy = smp.iter().any(|s| s.bios_per_s[0] + s.bios_per_s[1] > 0.0);
            if busy && !devices.contains(d) {
                devices.push(d.clone());
            }
        }
    }
    if devices.is_empty() {
        return Err("no device had any I/O".into());
    }
    let rows = devices.len() * 4;
    let w = COL_W * runs.len() as u32;
    let h = PANEL_H * rows as u32 + 40;
    let root = SVGBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(40);
    let t = if runs.len() == 1 {
        runs[0].title.clone()
    } else {
        runs.iter()
            .map(|r| r.title.as_str())
            .collect::<Vec<_>>()
            .join("   |   ")
    };
    title.draw(&Text::new(t, (10, 12), font(18)))?;
    let cols = body.split_evenly((1, runs.len()));
    for (ci, run) in runs.iter().enumerate() {
        let panels = cols[ci].split_evenly((rows, 1));
        let x_max = run
            .devices
            .values()
            .flat_map(|v| v.iter().map(|s| s.t_s))
            .chain(run.phases.iter().map(|p| p.2))
            .fold(1e-3f64, f64::max);
        for (di, dev) in devices.iter().enumerate() {
            let empty = Vec::new();
            let smp = run.devices.get(dev).unwrap_or(&empty);
            let decs: Vec<&Decision> = run.decisions.iter().filter(|d| &d.device == dev).collect();
            for k in 0..4 {
                let area = &panels[di * 4 + k];
                draw_panel(area, k, dev, smp, &decs, &run.phases, x_max)?;
            }
        }
    }
    root.present()?;
    Ok(())
}

fn draw_panel(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    kind: usize,
    dev: &str,
    smp: &[Sample],
    decs: &[&Decision],
    phases: &[(String, f64, f64)],
    x_max: f64,
) -> DrawResult<()> {
    let (caption, ydesc) = match kind {
        0 => (format!("{dev}: merge ratio"), "merged / bios (%)"),
        1 => (format!("{dev}: merge ladder level"), "level (L0..L3)"),
        2 => (format!("{dev}: bios per second"), "bios/s"),
        _ => (format!("{dev}: mean latency per request"), "latency (ms)"),
    };
    let val = |s: &Sample, d: usize| -> Option<f64> {
        match kind {
            0 => s.merge_percent[d],
            1 => Some(s.level as f64),
            2 => Some(s.bios_per_s[d]),
            _ => s.await_ms[d],
        }
    };
    let y_max = match kind {
        0 => 100.0,
        1 => 3.3,
        _ => {
            smp.iter()
                .flat_map(|s| [val(s, 0), val(s, 1)])
                .flatten()
                .fold(0.0f64, f64::max)
                .max(1e-6)
                * 1.1
        }
    };
    let y_min = if kind == 1 { -0.3 } else { 0.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, font(15))
        .margin(6)
        .x_label_area_size(32)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..x_max, y_min..y_max)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc("time (s)")
        .y_desc(ydesc)
        .label_style(font(11))
        .axis_desc_style(font(12))
        .light_line_style(WHITE.mix(0.0));
    if kind == 1 {
        mesh.y_labels(4)
            .y_label_formatter(&|v| format!("L{}", v.round() as i64));
    }
    mesh.draw()?;
    // Phase boundaries: every other phase shaded, names on the first panel.
    for (i, (name, a, b)) in phases.iter().enumerate() {
        if i % 2 == 1 {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(*a, y_min), (*b, y_max)],
                SHADE.mix(0.6).filled(),
            )))?;
        }
        if kind == 0 {
            chart.draw_series(std::iter::once(Text::new(
                name.clone(),
                (*a + (b - a) * 0.02, y_max * 0.97),
                font(11),
            )))?;
        }
    }
    // Decisions and probes as vertical lines.
    if kind <= 1 {
        for d in decs {
            let x = d.at_ms as f64 / 1000.0;
            let c = if matches!(
                d.kind,
                DecisionKind::Probe | DecisionKind::ProbeSucceeded | DecisionKind::ProbeFailed
            ) {
                PROBE
            } else {
                DECISION
            };
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(x, y_min), (x, y_max)],
                c.stroke_width(1),
            )))?;
        }
    }
    if kind == 1 {
        chart
            .draw_series(LineSeries::new(
                step(smp.iter().map(|s| (s.t_s, s.level as f64))),
                BLACK.stroke_width(2),
            ))?
            .label("level")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.stroke_width(2)));
        chart
            .draw_series(std::iter::once(PathElement::new(vec![], DECISION)))?
            .label("decision")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], DECISION));
        chart
            .draw_series(std::iter::once(PathElement::new(vec![], PROBE)))?
            .label("probe")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], PROBE));
    } else {
        for (d, (label, color)) in [("reads", READ), ("writes", WRITE)].into_iter().enumerate() {
            // A window without I/O of a direction leaves a gap, not a line across it.
            let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
            for s in smp {
                match val(s, d) {
                    Some(v) => runs.last_mut().unwrap_or(&mut Vec::new()).push((s.t_s, v)),
                    None if runs.last().is_some_and(|r| !r.is_empty()) => runs.push(Vec::new()),
                    None => {}
                }
            }
            runs.retain(|r| !r.is_empty());
            if runs.is_empty() {
                continue;
            }
            for r in runs.iter().skip(1) {
                chart.draw_series(LineSeries::new(r.clone(), color.stroke_width(2)))?;
            }
            chart
                .draw_series(LineSeries::new(runs[0].clone(), color.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
    }
    chart
        .configure_series_labels()
        .position(if kind == 1 {
            SeriesLabelPosition::MiddleRight
        } else {
            SeriesLabelPosition::UpperRight
        })
        .label_font(font(11))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}

/// Turns points into a step line (each value holds until the next point).
fn step(pts: impl Iterator<Item = (f64, f64)>) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (x, y) in pts {
        if let Some(&(_, py)) = out.last() {
            out.push((x, py));
        }
        out.push((x, y));
    }
    out
}

/// A simulate run from its report alone (phase-level steps, level from the decisions).
pub fn plot_report(report: &Report, path: &Path) -> Result<(), PlotError> {
    plot_run(report, None, path)
}

/// A run, with per-tick samples when the run went through a [`Sampling`] wrapper.
pub fn plot_run(report: &Report, series: Option<&Series>, path: &Path) -> Result<(), PlotError> {
    let s = with_phases(report, series);
    draw_runs(path, &[&s]).map_err(|e| draw_err(path, e))
}

fn with_phases(report: &Report, series: Option<&Series>) -> Series {
    let base = series_from_report(report);
    match series {
        Some(s) => Series {
            devices: s.devices.clone(),
            decisions: report.decisions.clone(),
            phases: base.phases,
            title: base.title,
        },
        None => base,
    }
}

/// `--compare`: the runs of several policies side by side (same scenario).
pub fn plot_compare(runs: &[(&Report, Option<&Series>)], path: &Path) -> Result<(), PlotError> {
    if runs.is_empty() {
        return Err(PlotError::Empty {
            path: path.display().to_string(),
            reason: "no run to compare".into(),
        });
    }
    let all: Vec<Series> = runs.iter().map(|(r, s)| with_phases(r, *s)).collect();
    let refs: Vec<&Series> = all.iter().collect();
    draw_runs(path, &refs).map_err(|e| draw_err(path, e))
}

/// A replay (`mergetune replay --plot`): the recorded counters sampled tick by tick.
pub fn plot_series(series: &Series, path: &Path) -> Result<(), PlotError> {
    draw_runs(path, &[series]).map_err(|e| draw_err(path, e))
}

/// `advise --plot`: per device, sector over time (sampled bios), the size histogram,
/// bios/s and merges/s, and requests in flight over time.
pub fn plot_advise(a: &Analysis, path: &Path) -> Result<(), PlotError> {
    if a.devices.is_empty() {
        return Err(PlotError::Empty {
            path: path.display().to_string(),
            reason: "the trace has no bios".into(),
        });
    }
    draw_advise(a, path).map_err(|e| draw_err(path, e))
}

fn draw_advise(a: &Analysis, path: &Path) -> DrawResult<()> {
    let n = a.devices.len() as u32;
    let root = SVGBackend::new(path, (2 * COL_W, n * 2 * 260)).into_drawing_area();
    root.fill(&WHITE)?;
    let rows = root.split_evenly((n as usize, 1));
    for (d, area) in a.devices.iter().zip(rows.iter()) {
        let cells = area.split_evenly((2, 2));
        // Sector over time.
        let t_max = d.scatter.iter().map(|p| p.t_s).fold(1e-6f64, f64::max);
        let gib = |s: u64| s as f64 * 512.0 / (1u64 << 30) as f64;
        let s_max = d
            .scatter
            .iter()
            .map(|p| gib(p.sector))
            .fold(1e-6f64, f64::max)
            * 1.05;
        let mut c = ChartBuilder::on(&cells[0])
            .caption(
                format!(
                    "device {}: where bios land ({} of {} bios sampled)",
                    d.device,
                    d.scatter.len(),
                    d.bios
                ),
                font(15),
            )
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..t_max * 1.02, 0f64..s_max)?;
        c.configure_mesh()
            .x_desc("time (s)")
            .y_desc("offset (GiB)")
            .label_style(font(11))
            .axis_desc_style(font(12))
            .draw()?;
        for (write, color, label) in [(false, READ, "reads"), (true, WRITE, "writes")] {
            let pts: Vec<(f64, f64)> = d
                .scatter
                .iter()
                .filter(|p| p.write == write)
                .map(|p| (p.t_s, gib(p.sector)))
                .collect();
            if pts.is_empty() {
                continue;
            }
            c.draw_series(pts.into_iter().map(|p| Circle::new(p, 1, color.filled())))?
                .label(label)
                .legend(move |(x, y)| Circle::new((x + 6, y), 3, color.filled()));
        }
        c.configure_series_labels()
            .label_font(font(11))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        // Size histogram.
        let first = d.size_counts.iter().position(|&x| x > 0).unwrap_or(0);
        let last = d
            .size_counts
            .iter()
            .rposition(|&x| x > 0)
            .unwrap_or(SIZE_BUCKETS - 1);
        let (lo, hi) = (first.saturating_sub(1), (last + 2).min(SIZE_BUCKETS));
        let y_max = d.size_counts.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.1;
        let mut c = ChartBuilder::on(&cells[1])
            .caption(format!("device {}: bio sizes", d.device), font(15))
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(64)
            .build_cartesian_2d(lo as f64..hi as f64, 0f64..y_max)?;
        c.configure_mesh()
            .x_desc("bio size (bucket from)")
            .y_desc("bios")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .x_labels(hi - lo + 1)
            .x_label_formatter(&|v| {
                let i = v.floor() as usize;
                if (v - v.floor()).abs() < 1e-9 && i < SIZE_BUCKETS {
                    size_bucket_label(i)
                } else {
                    String::new()
                }
            })
            .label_style(font(11))
            .axis_desc_style(font(12))
            .draw()?;
        c.draw_series((lo..hi).map(|i| {
            Rectangle::new(
                [
                    (i as f64 + 0.1, 0.0),
                    (i as f64 + 0.9, d.size_counts[i] as f64),
                ],
                READ.mix(0.8).filled(),
            )
        }))?;
        // Bios/s and merges/s over time.
        let tl = &d.timeline;
        let bsec = tl.bucket_ns as f64 / 1e9;
        let xs = |i: usize| (i as f64 + 0.5) * bsec;
        let rate_max = (0..tl.used)
            .map(|i| (tl.bios[i][0] + tl.bios[i][1]) as f64 / bsec)
            .fold(1e-6f64, f64::max)
            * 1.1;
        let mut c = ChartBuilder::on(&cells[2])
            .caption(
                format!("device {}: bios and merges per second", d.device),
                font(15),
            )
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..(tl.used.max(1) as f64 * bsec), 0f64..rate_max)?;
        c.configure_mesh()
            .x_desc("time (s)")
            .y_desc("per second")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .label_style(font(11))
            .axis_desc_style(font(12))
            .draw()?;
        for (label, color, f) in [
            ("read bios/s", READ, 0usize),
            ("write bios/s", WRITE, 1),
            ("merges/s", BLACK, 2),
        ] {
            let pts: Vec<(f64, f64)> = (0..tl.used)
                .map(|i| {
                    let v = match f {
                        0 | 1 => tl.bios[i][f],
                        _ => tl.merges[i],
                    };
                    (xs(i), v as f64 / bsec)
                })
                .collect();
            c.draw_series(LineSeries::new(pts, color.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        c.configure_series_labels()
            .label_font(font(11))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        // Requests in flight.
        let dmax = (0..tl.used)
            .map(|i| tl.depth_max[i])
            .max()
            .unwrap_or(0)
            .max(1) as f64
            * 1.1;
        let mut c = ChartBuilder::on(&cells[3])
            .caption(
                format!("device {}: requests in flight (peak per bucket)", d.device),
                font(15),
            )
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..(tl.used.max(1) as f64 * bsec), 0f64..dmax)?;
        c.configure_mesh()
            .x_desc("time (s)")
            .y_desc("requests")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .label_style(font(11))
            .axis_desc_style(font(12))
            .draw()?;
        if d.issues > 0 {
            c.draw_series(LineSeries::new(
                (0..tl.used).map(|i| (xs(i), tl.depth_max[i] as f64)),
                BLACK.stroke_width(2),
            ))?;
        } else {
            c.draw_series(std::iter::once(Text::new(
                "no block_rq_issue events in the trace",
                (0.0, dmax / 2.0),
                font(13),
            )))?;
        }
    }
    root.present()?;
    Ok(())
}
