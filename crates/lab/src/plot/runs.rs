//! Drawing runs: per device four panels (merge ratio, ladder level, bios per second,
//! latency) over time, decisions and probes as vertical lines, phases shaded; several runs
//! side by side for `--compare`.

use super::series::{Sample, Series, series_from_report};
use super::style::{
    COL_W, DECISION, DrawResult, PANEL_H, PROBE, PlotError, READ, SHADE, WRITE, draw_err, font,
};
use mergetune_logic::decision::Decision;
use mergetune_logic::decision::DecisionKind;
use mergetune_sim::report::Report;
use plotters::prelude::*;
use std::path::Path;

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

/// One panel of the runs figure: axes, series, markers and legend in drawing order on one
/// area.
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
    let val = |s: &Sample, d: usize| panel_value(kind, s, d);
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
    draw_phases(&mut chart, phases, kind == 0, (y_min, y_max))?;
    if kind <= 1 {
        draw_decisions(&mut chart, decs, (y_min, y_max))?;
    }
    if kind == 1 {
        draw_level(&mut chart, smp)?;
    } else {
        draw_directions(&mut chart, smp, kind)?;
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

/// A panel's chart: time against the panel's value.
type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// What panel `kind` shows of sample `s` in direction `d` (0 reads, 1 writes).
fn panel_value(kind: usize, s: &Sample, d: usize) -> Option<f64> {
    match kind {
        0 => s.merge_percent[d],
        1 => Some(f64::from(s.level.index())),
        2 => Some(s.bios_per_s[d]),
        _ => s.await_ms[d],
    }
}

/// Phase boundaries: every other phase shaded, and with `names`, each phase's name.
fn draw_phases(
    chart: &mut Chart<'_, '_>,
    phases: &[(String, f64, f64)],
    names: bool,
    (y_min, y_max): (f64, f64),
) -> DrawResult<()> {
    for (i, (name, a, b)) in phases.iter().enumerate() {
        if i % 2 == 1 {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(*a, y_min), (*b, y_max)],
                SHADE.mix(0.6).filled(),
            )))?;
        }
        if names {
            chart.draw_series(std::iter::once(Text::new(
                name.clone(),
                (*a + (b - a) * 0.02, y_max * 0.97),
                font(11),
            )))?;
        }
    }
    Ok(())
}

/// Decisions and probes as vertical lines.
fn draw_decisions(
    chart: &mut Chart<'_, '_>,
    decs: &[&Decision],
    (y_min, y_max): (f64, f64),
) -> DrawResult<()> {
    for d in decs {
        let x = d.at_ms as f64 / 1000.0;
        let c = if matches!(
            d.kind,
            DecisionKind::Probe
                | DecisionKind::ProbeSucceeded
                | DecisionKind::ProbeFailed
                | DecisionKind::ProbeInconclusive
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
    Ok(())
}

/// The ladder level as a step line, and the legend of the decision and probe lines.
fn draw_level(chart: &mut Chart<'_, '_>, smp: &[Sample]) -> DrawResult<()> {
    chart
        .draw_series(LineSeries::new(
            step(smp.iter().map(|s| (s.t_s, f64::from(s.level.index())))),
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
    Ok(())
}

/// Panel `kind`'s value per direction; a window without I/O of a direction leaves a gap.
fn draw_directions(chart: &mut Chart<'_, '_>, smp: &[Sample], kind: usize) -> DrawResult<()> {
    for (d, (label, color)) in [("reads", READ), ("writes", WRITE)].into_iter().enumerate() {
        // A window without I/O of a direction leaves a gap, not a line across it.
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for s in smp {
            match panel_value(kind, s, d) {
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

/// A run, with per-tick samples when the run went through a [`super::Sampling`] wrapper.
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
