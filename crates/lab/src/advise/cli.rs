//! `mergetune advise` on the command line: its arguments, and the run that reads the trace,
//! replays it for `--what-if`, draws `--plot` and prints the text or JSON report.

use super::accumulator::{DEFAULT_WHAT_IF_MAX_BIOS, resolve_device};
use super::reader::analyze_file;
use super::render::render_text;
use super::rules::recommend_priced;
use super::svg::plot_advise;
use super::whatif::{read_bios, what_if};
use anyhow::{Context as _, bail};
use mergetune_kernel::devices::DevNumber;
use mergetune_kernel::scheduler::{Reported, Scheduler};
use mergetune_logic::config::Config;
use mergetune_logic::pricing::worth::Worth;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `mergetune-lab advise` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct AdviseArgs {
    /// The trace: tracing-filesystem text of block events (`mergetune-lab trace capture`) or
    /// blkparse's default output.
    pub trace: PathBuf,
    /// Only this device: MAJOR,MINOR as the trace prints it (7,0) or a name (loop0).
    #[arg(long)]
    pub device: Option<String>,
    /// The daemon's config: its `[policy]` thresholds and cost profile decide the advice, as
    /// they would decide the daemon's steps (default: the built-in defaults).
    #[arg(short, long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Root of sysfs, where a device name given to --device is looked up (for tests).
    #[arg(long, default_value = mergetune_kernel::roots::SYSFS, hide = true)]
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
    /// The traced device's I/O scheduler (none, mq-deadline, bfq, kyber), for a trace
    /// without the `# scheduler` line `mergetune-lab trace capture` writes: the daemon's
    /// ladder and price are the device's scheduler's.
    #[arg(long, value_name = "NAME")]
    pub scheduler: Option<Scheduler>,
    /// Under live pricing (the default `cost_profile`): the merge path's price per bio the
    /// daemon measured for the device, in ns (the lower bound of the interval `mergetune
    /// status` shows), so that the advice prices the trace as the daemon does. Without it
    /// the advice says at which price the daemon would step down.
    #[arg(long, value_name = "NS")]
    pub price_ns: Option<f64>,
}

/// The largest `--price-ns` taken: 10 ms per bio is beyond any merge path.
const MAX_PRICE_NS: f64 = 1e7;

/// The worth of each level on a device under live pricing, given the price per bio the
/// daemon measured (`--price-ns`), as the daemon computes it ([`worth_live`]): only L3's
/// price is given, a point (its lower bound), at the trace's rate.
fn worth_of_given_price(
    price_ns: f64,
    scheduler: &Reported,
    bios: u64,
    bios_per_s: f64,
    floor: mergetune_logic::pricing::floor::SavingFloor,
) -> Worth {
    use mergetune_logic::pricing::price::{ClassPrice, MIN_SAMPLES, NsPerBio, worth_live};
    let l3 = NsPerBio {
        estimate: price_ns,
        lo: price_ns,
        hi: price_ns,
        samples: MIN_SAMPLES,
        bios,
    };
    let price = ClassPrice {
        levels: [None, None, None, Some(l3)],
    };
    worth_live(Some(&price), scheduler.scheduler(), bios_per_s, floor)
}

/// The profile `--what-if` models CPU with: the config's, except that `live` (the daemon's
/// own measurement on the host) cannot price a trace, so the measured profile stands in.
/// The recommendation itself is not priced with a stand-in: under `live` its saving is
/// unknown, and said so ([`super::daemon_view`]).
fn trace_profile(
    cfg: &mergetune_logic::config::PolicyConfig,
) -> anyhow::Result<(String, mergetune_logic::pricing::profile::CostProfile)> {
    let mut profile_name = cfg.cost_profile.trim().to_string();
    if profile_name == mergetune_logic::pricing::profile::LIVE {
        // A trace cannot be sampled for where its CPU went: advise prices it with the
        // profile measured on this project's kernel, and says so; the daemon prices live.
        profile_name = mergetune_logic::pricing::profile::MEASURED_NAME.to_string();
    }
    let profile = mergetune_logic::pricing::profile::resolve(&profile_name)
        .with_context(|| format!("cost profile {profile_name}"))?;
    Ok((profile_name, profile))
}

/// Why a trace gave nothing to advise from, with what it did hold.
fn nothing_to_advise(
    analysis: &crate::advise::Analysis,
    trace: &Path,
    filter: Option<DevNumber>,
) -> String {
    let mut msg = format!(
        "{}: no usable bios, nothing to advise from ({} lines, {} block events, {} not block events)",
        trace.display(),
        analysis.lines,
        analysis.events,
        analysis.bad_lines
    );
    for why in &analysis.devices_without_bios {
        let _ = write!(msg, "; {why}");
    }
    if let Some(b) = analysis.bad_examples.first() {
        let _ = write!(msg, "; first bad line {}: {}", b.line, b.message);
    }
    if let Some(f) = filter {
        let _ = write!(msg, "; --device {} matched nothing", f.traced());
    }
    msg
}

/// `--price-ns` is a live price: refused under a profile (which prices the trace itself),
/// and outside (0, [`MAX_PRICE_NS`]].
fn check_price_ns(price_ns: Option<f64>, live: bool, cost_profile: &str) -> anyhow::Result<()> {
    let Some(ns) = price_ns else {
        return Ok(());
    };
    if !live {
        bail!(
            "--price-ns {ns}: the price of live pricing, but the config's [policy] cost_profile is {cost_profile:?}, which prices the trace itself"
        );
    }
    if !(ns.is_finite() && ns > 0.0 && ns <= MAX_PRICE_NS) {
        bail!("--price-ns {ns}: not a price per bio in ns (0 < ns <= {MAX_PRICE_NS})");
    }
    Ok(())
}

/// Runs `mergetune-lab advise`; returns the exit code.
pub fn run(args: AdviseArgs) -> anyhow::Result<i32> {
    let config = match &args.config {
        Some(p) => mergetune_logic::config::load_file(p)?,
        None => Config::default(),
    };
    let (cfg, floor) = (config.policy, config.pricing.floor());
    let live = cfg.cost_profile.trim() == mergetune_logic::pricing::profile::LIVE;
    check_price_ns(args.price_ns, live, &cfg.cost_profile)?;
    let (profile_name, profile) = trace_profile(&cfg)?;
    let filter = match &args.device {
        Some(d) => Some(resolve_device(d, &args.sysfs_root).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let mut analysis = analyze_file(&args.trace, filter, &cfg)?;
    let priced_with = match (live, args.price_ns) {
        (true, Some(ns)) => format!(
            "{} (--price-ns {ns})",
            mergetune_logic::pricing::profile::LIVE
        ),
        (true, None) => mergetune_logic::pricing::profile::LIVE.to_string(),
        (false, _) => profile_name.clone(),
    };
    // --scheduler is the operator's word for the device's scheduler, over the trace's.
    let scheduler = args.scheduler.or(analysis.scheduler).map(Reported::Known);
    let mut views = Vec::new();
    for d in &mut analysis.devices {
        // The daemon's rules and profile decide what is recommended (the trace's own level
        // is kept in the evidence when they disagree).
        let (bios, bios_per_s) = (d.bios, d.bios_per_s);
        let worth_of = |scheduler: &Reported| match (live, args.price_ns) {
            (true, Some(ns)) => worth_of_given_price(ns, scheduler, bios, bios_per_s, floor),
            (true, None) => {
                Worth::unknown(mergetune_logic::pricing::worth::UnknownWhy::NotMeasuredYet)
            }
            (false, _) => Worth::from_profile(&profile, scheduler.scheduler()),
        };
        let (level, recs, view) =
            recommend_priced(d, &cfg, &priced_with, scheduler.as_ref(), &worth_of, floor);
        d.recommended_level = level;
        d.recommendations = recs;
        views.push(view);
    }
    if analysis.devices.is_empty() {
        bail!(nothing_to_advise(&analysis, &args.trace, filter));
    }
    let mut what_ifs = Vec::new();
    if args.what_if {
        for d in &analysis.devices {
            let (bios, truncated) =
                read_bios(&args.trace, d.number, 10_000, args.what_if_max_bios)?;
            what_ifs.push(what_if(&d.device, bios, truncated, d, &profile_name)?);
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
                "daemon": views,
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
