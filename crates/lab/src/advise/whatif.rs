//! `advise --what-if`: the trace's bios replayed in the simulator under each ladder level
//! (mq-deadline) and under `none` at nomerges 0 and 2, nothing changing the tunables during
//! a run, so the modelled CPU, throughput and latency of each candidate sit side by side.

use super::accumulator::MAX_LINE_BYTES;
use super::report::{DeviceReport, LatencyReport, pct};
use anyhow::{Context as _, bail};
use mergetune_kernel::devices::DevNumber;
use mergetune_kernel::scheduler::Scheduler;
use mergetune_kernel::trace::{BioStream, TraceBio, is_blkparse_summary};
use mergetune_logic::decision::{Level, level_index};
use serde::Serialize;
use std::path::Path;

/// Reads the bios of one device for a replay (at most `max_bios`), rebased to the first
/// and in file order, as [`mergetune_kernel::trace::parse_trace`] gives them. Returns the bios and
/// whether the trace had more.
pub fn read_bios(
    path: &Path,
    dev: DevNumber,
    plug_gap_ns: u64,
    max_bios: usize,
) -> anyhow::Result<(Vec<TraceBio>, bool)> {
    let f = mergetune_kernel::userfile::open_regular(path)
        .map_err(|e| anyhow::anyhow!("cannot open {e}"))?;
    let mut r = std::io::BufReader::with_capacity(1 << 16, f);
    let mut stream = BioStream::new(plug_gap_ns);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    let mut truncated = false;
    loop {
        match mergetune_kernel::lines::read_line_bounded(&mut r, &mut buf, MAX_LINE_BYTES)? {
            mergetune_kernel::lines::Line::Eof => break,
            mergetune_kernel::lines::Line::TooLong => continue,
            mergetune_kernel::lines::Line::Whole => {}
        }
        let text = String::from_utf8_lossy(&buf);
        let line = text.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if is_blkparse_summary(line) {
            break;
        }
        let Ok(ev) = mergetune_kernel::trace::parse_event(line) else {
            continue;
        };
        // Plug markers name no device in tracefs: they go through.
        if ev
            .dev
            .is_some_and(|(major, minor)| DevNumber { major, minor } != dev)
        {
            continue;
        }
        if let Some(b) = stream.push(&ev) {
            if out.len() >= max_bios {
                truncated = true;
                break;
            }
            out.push(b);
        }
    }
    mergetune_kernel::trace::rebase_times(&mut out);
    Ok((out, truncated))
}

/// One row of the `--what-if` table.
#[derive(Debug, Clone, Serialize)]
pub struct WhatIfRow {
    pub label: String,
    pub scheduler: Scheduler,
    #[serde(with = "level_index")]
    pub level: Level,
    pub merge_percent: f64,
    pub requests: u64,
    /// Modelled block-layer CPU per bio, in `cycles_per_bio_unit` (the field keeps its
    /// name for the scripts that read it).
    pub cycles_per_bio: f64,
    /// `ns` under a measured profile, `model-cycles` under `lkml-2008`.
    pub cycles_per_bio_unit: mergetune_logic::pricing::profile::Unit,
    pub mb_per_s: f64,
    pub read_mean_us: f64,
    pub read_p99_us: f64,
    pub write_mean_us: f64,
    pub write_p99_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct WhatIf {
    pub device: String,
    pub bios: usize,
    pub truncated: bool,
    pub span_s: f64,
    pub model: String,
    /// The unit of every row's `cycles_per_bio` (the profile's).
    pub unit: mergetune_logic::pricing::profile::Unit,
    pub rows: Vec<WhatIfRow>,
}

/// Replays `bios` in the simulator under each ladder level (mq-deadline) and under `none`
/// at nomerges 0 and 2, with nothing changing the tunables during the run, priced in the
/// cost profile `profile` (the one the recommendation was decided with): one scenario per
/// candidate, run, and tabulated in the same pass.
pub fn what_if(
    device: &str,
    bios: Vec<TraceBio>,
    truncated: bool,
    report: &DeviceReport,
    profile: &str,
) -> anyhow::Result<WhatIf> {
    use std::sync::Arc;
    if bios.is_empty() {
        bail!("no bios of device {device} to replay");
    }
    let span_ns = bios.last().map(|b| b.t_ns).unwrap_or(0);
    // The device: an SSD-like queue with 128 tags (as loop and virtio devices have), its
    // per-request overhead taken from the trace's median completion latency when known.
    // The trace's latencies include queueing: with 8 channels a request cannot take longer
    // than 8 / (requests per second) at the rate the trace completed them (Little's law).
    let span_s = (report.span_s).max(1e-6);
    let over = |l: Option<&LatencyReport>, dflt: f64| {
        l.map(|l| {
            let busy_us = 8.0 * span_s * 1e6 / l.requests.max(1) as f64;
            l.p50_us.min(busy_us).clamp(5.0, 20_000.0)
        })
        .unwrap_or(dflt)
    };
    let r_us = over(report.read_latency.as_ref(), 80.0);
    let w_us = over(report.write_latency.as_ref(), 20.0);
    let unit = mergetune_sim::report::pricing_unit(profile);
    let model = format!(
        "priced in cost profile {profile} (CPU per bio in {}); simulated SSD, 128 tags, 8 channels, 2000 MB/s, {r_us:.0} µs per read and {w_us:.0} µs per write request (from the trace's completions where it has them); bios replayed at their traced times; MB/s over the replay plus a drain margin",
        mergetune_sim::report::unit_words(unit)
    );
    let dur_s = span_ns as f64 / 1e9 * 1.1 + 0.05;
    let candidates: [(&str, Scheduler, Level); 6] = [
        ("L0", Scheduler::MqDeadline, Level::L0),
        ("L1", Scheduler::MqDeadline, Level::L1),
        ("L2", Scheduler::MqDeadline, Level::L2),
        ("L3", Scheduler::MqDeadline, Level::L3),
        ("none, nomerges=0", Scheduler::None, Level::L0),
        ("none, nomerges=2", Scheduler::None, Level::L3),
    ];
    let bios = Arc::new(bios);
    let mut rows = Vec::new();
    for (label, sched, level) in candidates {
        rows.push(run_candidate(
            profile,
            (label, sched, level),
            (r_us, w_us),
            dur_s,
            &bios,
        )?);
    }
    Ok(WhatIf {
        device: device.into(),
        bios: bios.len(),
        truncated,
        span_s: span_ns as f64 / 1e9,
        model,
        unit,
        rows,
    })
}

/// One candidate of [`what_if`]: its scenario run over the traced bios, as a row.
fn run_candidate(
    profile: &str,
    (label, sched, level): (&str, Scheduler, Level),
    service_us: (f64, f64),
    dur_s: f64,
    bios: &std::sync::Arc<Vec<TraceBio>>,
) -> anyhow::Result<WhatIfRow> {
    use mergetune_sim::engine::Simulation;
    use mergetune_sim::runner::run_scenario;
    use mergetune_sim::scenario::Scenario;
    let text = scenario_text(profile, sched, level, service_us, dur_s);
    let mut sc = Scenario::from_toml_str(&text, "<advise what-if>", None)
        .map_err(|e| anyhow::anyhow!("what-if scenario: {e}"))?;
    sc.phases[0].jobs[0].trace_bios = Some(bios.clone());
    let mut sim = Simulation::new(&sc).context("building the what-if simulation")?;
    let mut ctl = mergetune_daemon::controller::KernelDefault { interval_ms: 1000 };
    let rep = run_scenario(&mut sim, &mut ctl, "static", &mut |_, _| {});
    if let Some(e) = sim.halted() {
        bail!("what-if {label}: {e}");
    }
    let Some(d) = rep.phases.first().and_then(|p| p.devices.first()) else {
        bail!("what-if: the simulation reported no device");
    };
    let merged = d.read.merged + d.write.merged;
    let requests = d.read.requests + d.write.requests;
    Ok(WhatIfRow {
        label: label.into(),
        scheduler: sched,
        level,
        merge_percent: pct(merged, merged + requests),
        requests,
        cycles_per_bio: d.cycles_per_io,
        cycles_per_bio_unit: d.cycles_per_io_unit,
        mb_per_s: d.read.mb_per_s + d.write.mb_per_s,
        read_mean_us: d.read.lat_mean_us,
        read_p99_us: d.read.lat_p99_us,
        write_mean_us: d.write.lat_mean_us,
        write_p99_us: d.write.lat_p99_us,
    })
}

/// The scenario of one candidate: the modelled SSD under `sched` with `level`'s tunables
/// and the per-request overheads `(read, write)` in µs, one job replaying the trace for
/// `dur_s`.
fn scenario_text(
    profile: &str,
    sched: Scheduler,
    level: Level,
    (r_us, w_us): (f64, f64),
    dur_s: f64,
) -> String {
    let nomerges = level.nomerges();
    let iosched = if sched == Scheduler::MqDeadline {
        format!(
            "[device.iosched]\nfront_merges = {}\n",
            // Off from L1 down: the replay's scenario states the whole queue.
            u8::from(level == Level::L0)
        )
    } else {
        String::new()
    };
    format!(
        "name = \"advise-what-if\"\nseed = 1\ncost_profile = {profile:?}\n\
         [[device]]\nname = \"trace\"\nkind = \"ssd\"\nscheduler = \"{sched}\"\n\
         nomerges = {nomerges}\nqueue_depth = 128\nparallelism = 8\n\
         bandwidth_mb_s = 2000.0\nread_overhead_us = {r_us}\nwrite_overhead_us = {w_us}\n\
         {iosched}\
         [[phase]]\nname = \"replay\"\nduration_s = {dur_s}\n\
         [[phase.job]]\nname = \"trace\"\ndevice = \"trace\"\n"
    )
}
