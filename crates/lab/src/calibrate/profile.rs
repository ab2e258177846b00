//! From samples to a cost profile: per cell the median CPU per I/O and its interval, the
//! change against L0 as the median of paired per-repetition differences; the toggle's cost
//! from its with/without pairs; and the profile written as TOML with the command that
//! produced it.

use super::fio::{IODEPTH, RunSample, ToggleSample};
use super::stats;
use anyhow::{Context, Result};
use mergetune_kernel::scheduler::Scheduler;
use mergetune_logic::decision::Level;
use mergetune_logic::pricing::profile::{Cell, CostProfile, Method, ToggleCost, Unit, Workload};
use std::path::Path;

pub(super) fn utc_now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Samples of one cell over the repetitions, in repetition order.
pub(super) type Samples = std::collections::BTreeMap<(Scheduler, Level, Workload), Vec<RunSample>>;

fn summarize_cells(samples: &Samples) -> Vec<Cell> {
    let mut cells = Vec::new();
    for (&(s, l, w), runs) in samples {
        let cpu: Vec<f64> = runs.iter().map(RunSample::cpu_per_io).collect();
        let e = stats::estimate(&cpu);
        let sub: Vec<f64> = runs.iter().map(RunSample::submitter_per_io).collect();
        let se = stats::estimate(&sub);
        let change = |f: fn(&RunSample) -> f64, mine: &[f64]| {
            if l == Level::L0 {
                return (None, None);
            }
            let base: Vec<f64> = samples
                .get(&(s, Level::L0, w))
                .map(|r| r.iter().map(f).collect())
                .unwrap_or_default();
            let de = stats::estimate(&stats::paired_change_percent(&base, mine));
            (Some(de.median), Some([de.low, de.high]))
        };
        let (change_percent, change_ci) = change(RunSample::cpu_per_io, &cpu);
        let (submitter_change_percent, submitter_change_ci) =
            change(RunSample::submitter_per_io, &sub);
        let med = |f: fn(&RunSample) -> f64| stats::median(&runs.iter().map(f).collect::<Vec<_>>());
        cells.push(Cell {
            scheduler: s,
            level: l,
            workload: w,
            cpu_per_io: e.median,
            cpu_per_io_ci: Some([e.low, e.high]),
            system_cpu_per_io: Some(med(RunSample::system_per_io)),
            iops: Some(med(RunSample::iops)),
            p99_us: Some(med(|r| r.p99_us)),
            merged_percent: med(RunSample::merged_percent).clamp(0.0, 100.0),
            change_percent,
            change_ci,
            submitter_cpu_per_io: Some(se.median),
            submitter_cpu_per_io_ci: Some([se.low, se.high]),
            submitter_change_percent,
            submitter_change_ci,
        });
    }
    cells
}

pub(super) fn summarize_toggle(
    scheduler: Scheduler,
    interval_ms: u64,
    runtime_s: f64,
    with: &[ToggleSample],
    without: &[ToggleSample],
) -> ToggleCost {
    let col = |v: &[ToggleSample], f: fn(&ToggleSample) -> f64| v.iter().map(f).collect::<Vec<_>>();
    let change = |f: fn(&ToggleSample) -> f64| {
        stats::estimate(&stats::paired_change_percent(
            &col(without, f),
            &col(with, f),
        ))
    };
    let writes: Vec<f64> = with
        .iter()
        .flat_map(|t| t.write_us.iter().copied())
        .collect();
    let p99 = change(|t| t.p99_us);
    let max = change(|t| t.max_us);
    let iops = change(|t| t.iops);
    ToggleCost {
        scheduler,
        interval_ms,
        runtime_s,
        reps: with.len() as u32,
        write_us_median: stats::median(&writes),
        write_us_max: writes.iter().copied().fold(0.0, f64::max),
        p99_us_without: stats::median(&col(without, |t| t.p99_us)),
        p99_us_with: stats::median(&col(with, |t| t.p99_us)),
        p99_change_percent: p99.median,
        p99_change_ci: [p99.low, p99.high],
        max_us_without: stats::median(&col(without, |t| t.max_us)),
        max_us_with: stats::median(&col(with, |t| t.max_us)),
        max_change_percent: max.median,
        max_change_ci: [max.low, max.high],
        iops_change_percent: iops.median,
        iops_change_ci: [iops.low, iops.high],
    }
}

/// What a calibration measured, and on what.
pub(super) struct Measured {
    /// The profile's name.
    pub(super) name: String,
    pub(super) loop_direct_io: bool,
    pub(super) kernel_release: String,
    pub(super) schedulers: Vec<Scheduler>,
    /// When the run started (RFC 3339, UTC) and how long it took, s.
    pub(super) measured_at: String,
    pub(super) duration_s: f64,
    pub(super) reps: u32,
    pub(super) window_ms: u64,
    /// The 1-minute load average at the start and at the end.
    pub(super) loadavg: Vec<f64>,
    pub(super) samples: Samples,
    pub(super) toggle: Option<ToggleCost>,
}

/// The cost profile of a calibration: its cells summarised, its noise and the interval's
/// coverage stated, the command line that produced it recorded.
pub(super) fn build_profile(m: Measured) -> CostProfile {
    let cells = summarize_cells(&m.samples);
    let coverage = stats::median_ci(&vec![0.0; m.reps as usize], 0.95).2 * 100.0;
    let noise: Vec<f64> = cells
        .iter()
        .filter_map(|c| {
            let [lo, hi] = c.cpu_per_io_ci?;
            Some((hi - lo) / 2.0 / c.cpu_per_io * 100.0)
        })
        .collect();
    let command = std::iter::once("mergetune".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    CostProfile {
        name: m.name,
        description: format!(
            "CPU per I/O measured by mergetune calibrate on a scratch loop device over a tmpfs \
             file (loop direct I/O {}), fio 4 KiB reads at QD{IODEPTH} with libaio pinned to one CPU",
            if m.loop_direct_io { "on" } else { "off" }
        ),
        method: Method::CpuBoundLoop,
        unit: Unit::Ns,
        kernel_release: m.kernel_release,
        schedulers: m.schedulers,
        cpu_measure: "schedstat ns of fio's threads + all kworkers over the window, per bio \
                      (completed + merged from the loop device's stat)"
            .into(),
        command,
        measured_at: m.measured_at,
        duration_s: m.duration_s,
        reps: m.reps,
        runtime_ms: m.window_ms,
        ci_coverage_percent: (coverage * 10.0).round() / 10.0,
        noise_percent: (stats::median(&noise) * 100.0).round() / 100.0,
        loadavg: m.loadavg,
        loop_direct_io: m.loop_direct_io,
        cells,
        toggle: m.toggle,
        device: None,
        merge_path: Vec::new(),
    }
}

/// Validates the profile and writes it (TOML, headed by the command that produced it) to
/// `output`, or prints it; its human summary goes to stderr.
pub(super) fn write_profile(profile: &CostProfile, output: Option<&Path>) -> Result<()> {
    profile
        .validate()
        .context("the measured profile does not validate")?;
    let text = format!(
        "# Written by `{}` on {} ({} s).\n{}",
        profile.command,
        profile.measured_at,
        profile.duration_s,
        profile.to_toml_string()
    );
    match output {
        Some(p) => {
            std::fs::write(p, &text).with_context(|| format!("write {}", p.display()))?;
            eprintln!("calibrate: wrote {}", p.display());
        }
        None => print!("{text}"),
    }
    eprint!("{}", profile.render());
    Ok(())
}
