//! `advise --plot`: per device, sector over time (sampled bios), the size histogram,
//! bios/s and merges/s, and requests in flight over time.

use super::accumulator::{SIZE_BUCKETS, Timeline, size_bucket_label};
use super::report::{Analysis, DeviceReport};
use crate::plot::style::{COL_W, DrawResult, PlotError, READ, WRITE, draw_err, font};
use plotters::prelude::*;
use std::path::Path;

/// One panel of the figure.
type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
/// A panel's chart, over f64 by f64.
type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

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

/// One figure: a row per device, of four panels.
fn draw_advise(a: &Analysis, path: &Path) -> DrawResult<()> {
    let n = a.devices.len() as u32;
    let root = SVGBackend::new(path, (2 * COL_W, n * 2 * 260)).into_drawing_area();
    root.fill(&WHITE)?;
    let rows = root.split_evenly((n as usize, 1));
    for (d, area) in a.devices.iter().zip(rows.iter()) {
        let cells = area.split_evenly((2, 2));
        draw_scatter(&cells[0], d)?;
        draw_sizes(&cells[1], d)?;
        draw_rates(&cells[2], d)?;
        draw_in_flight(&cells[3], d)?;
    }
    root.present()?;
    Ok(())
}

/// Where bios land: sector over time, reads and writes apart (sampled bios).
fn draw_scatter(area: &Area, d: &DeviceReport) -> DrawResult<()> {
    let t_max = d.scatter.iter().map(|p| p.t_s).fold(1e-6f64, f64::max);
    let gib = |s: u64| s as f64 * 512.0 / (1u64 << 30) as f64;
    let s_max = d
        .scatter
        .iter()
        .map(|p| gib(p.sector))
        .fold(1e-6f64, f64::max)
        * 1.05;
    let mut c = panel(
        area,
        format!(
            "device {}: where bios land ({} of {} bios sampled)",
            d.device,
            d.scatter.len(),
            d.bios
        ),
        0f64..t_max * 1.02,
        0f64..s_max,
    )?;
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
    draw_legend(&mut c)
}

/// The histogram of bio sizes, over the buckets that hold any.
fn draw_sizes(area: &Area, d: &DeviceReport) -> DrawResult<()> {
    let first = d.size_counts.iter().position(|&x| x > 0).unwrap_or(0);
    let last = d
        .size_counts
        .iter()
        .rposition(|&x| x > 0)
        .unwrap_or(SIZE_BUCKETS - 1);
    let (lo, hi) = (first.saturating_sub(1), (last + 2).min(SIZE_BUCKETS));
    let y_max = d.size_counts.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.1;
    let mut c = panel(
        area,
        format!("device {}: bio sizes", d.device),
        lo as f64..hi as f64,
        0f64..y_max,
    )?;
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
    Ok(())
}

/// Bios per second, per direction, and merges per second, over time.
fn draw_rates(area: &Area, d: &DeviceReport) -> DrawResult<()> {
    let tl = &d.timeline;
    let bsec = tl.bucket_ns as f64 / 1e9;
    let xs = |i: usize| (i as f64 + 0.5) * bsec;
    let rate_max = (0..tl.used)
        .map(|i| (tl.bios[i][0] + tl.bios[i][1]) as f64 / bsec)
        .fold(1e-6f64, f64::max)
        * 1.1;
    let caption = format!("device {}: bios and merges per second", d.device);
    let mut c = time_panel(area, caption, tl, rate_max, "per second")?;
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
    draw_legend(&mut c)
}

/// Requests in flight over time: the peak of each bucket.
fn draw_in_flight(area: &Area, d: &DeviceReport) -> DrawResult<()> {
    let tl = &d.timeline;
    let bsec = tl.bucket_ns as f64 / 1e9;
    let xs = |i: usize| (i as f64 + 0.5) * bsec;
    let dmax = (0..tl.used)
        .map(|i| tl.depth_max[i])
        .max()
        .unwrap_or(0)
        .max(1) as f64
        * 1.1;
    let caption = format!("device {}: requests in flight (peak per bucket)", d.device);
    let mut c = time_panel(area, caption, tl, dmax, "requests")?;
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
    Ok(())
}

/// A panel's chart over `x` by `y`, with `caption` above and the label areas every panel
/// has.
fn panel<'a, 'b>(
    area: &'a Area<'b>,
    caption: String,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
) -> DrawResult<Chart<'a, 'b>> {
    Ok(ChartBuilder::on(area)
        .caption(caption, font(15))
        .margin(8)
        .x_label_area_size(34)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)?)
}

/// A [`panel`] over the timeline's seconds and 0 to `y_max`, with its mesh: seconds
/// across, whole numbers of `y_desc` up.
fn time_panel<'a, 'b>(
    area: &'a Area<'b>,
    caption: String,
    tl: &Timeline,
    y_max: f64,
    y_desc: &str,
) -> DrawResult<Chart<'a, 'b>> {
    let bsec = tl.bucket_ns as f64 / 1e9;
    let mut c = panel(
        area,
        caption,
        0f64..(tl.used.max(1) as f64 * bsec),
        0f64..y_max,
    )?;
    c.configure_mesh()
        .x_desc("time (s)")
        .y_desc(y_desc)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style(font(11))
        .axis_desc_style(font(12))
        .draw()?;
    Ok(c)
}

/// The legend of a panel's series, in its corner.
fn draw_legend<'a, 'b: 'a>(c: &mut Chart<'a, 'b>) -> DrawResult<()> {
    c.configure_series_labels()
        .label_font(font(11))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}
