//! `mergetune advise` on the command line: its arguments, and the run that reads the trace,
//! replays it for `--what-if`, draws `--plot` and prints the text or JSON report.

use super::accumulator::{DEFAULT_WHAT_IF_MAX_BIOS, DevNum};
use super::reader::analyze_file;
use super::render::render_text;
use super::svg::plot_advise;
use super::whatif::{read_bios, what_if};
use crate::logic::config::PolicyConfig;
use anyhow::bail;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `mergetune advise` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct AdviseArgs {
    /// The trace: tracing-filesystem text of block events (`mergetune trace capture`) or
    /// blkparse's default output.
    pub trace: PathBuf,
    /// Only this device: MAJOR,MINOR as the trace prints it (7,0) or a name (loop0).
    #[arg(long)]
    pub device: Option<String>,
    /// Root of sysfs, where a device name given to --device is looked up.
    #[arg(long, default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Replay the trace in the simulator under each merge level and scheduler candidate and
    /// show the modelled CPU, throughput and latency side by side.
    #[arg(long)]
    pub what_if: bool,
    /// With --what-if: replay at most this many bios per device.
    #[arg(long, default_value_t = DEFAULT_WHAT_IF_MAX_BIOS)]
    pub what_if_max_bios: usize,
    /// Draw the sector-over-time scatter, the size histogram, bios/s and queue depth (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Runs `mergetune advise`; returns the exit code.
pub fn run(args: AdviseArgs) -> anyhow::Result<i32> {
    let cfg = PolicyConfig::default();
    let filter = match &args.device {
        Some(d) => Some(DevNum::resolve(d, &args.sysfs_root).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let analysis = analyze_file(&args.trace, filter, &cfg)?;
    if analysis.devices.is_empty() {
        let mut msg = format!(
            "{}: no usable bios, nothing to advise from ({} lines, {} block events, {} not block events)",
            args.trace.display(),
            analysis.lines,
            analysis.events,
            analysis.bad_lines
        );
        if !analysis.devices_without_bios.is_empty() {
            let _ = write!(
                msg,
                "; device(s) {} have events but every bio queued has size 0",
                analysis.devices_without_bios.join(", ")
            );
        }
        if let Some(b) = analysis.bad_examples.first() {
            let _ = write!(msg, "; first bad line {}: {}", b.line, b.message);
        }
        if let Some(f) = filter {
            let _ = write!(msg, "; --device {f} matched nothing");
        }
        bail!(msg);
    }
    let mut what_ifs = Vec::new();
    if args.what_if {
        for d in &analysis.devices {
            let dev = DevNum::resolve(&d.device, Path::new("/nonexistent"))
                .map_err(anyhow::Error::msg)?;
            let (bios, truncated) = read_bios(&args.trace, dev, 10_000, args.what_if_max_bios)?;
            what_ifs.push(what_if(&d.device, bios, truncated, d)?);
        }
    }
    if let Some(p) = &args.plot {
        plot_advise(&analysis, p)?;
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "trace": args.trace.display().to_string(),
                "analysis": analysis,
                "what_if": what_ifs,
            }))?
        );
    } else {
        print!("{}", render_text(&analysis, &what_ifs));
        if let Some(p) = &args.plot {
            println!("\nplot written to {}", p.display());
        }
    }
    Ok(0)
}
