//! `mergetune replay FILE`: the policy over a recording (`run --record FILE`), offline: the
//! decisions it makes with their reasons, then the device table as it stands at the end of
//! the recording (the same table and JSON fields as `status` and `run --once`).
//!
//! The policy runs with the config the recording carries (the recorded daemon's, reloads
//! aside), and with the prices and bio tap samples the recorded daemon got, so a replay of
//! a recording gives the recorded decisions; `-c` replays with another config instead (a
//! what-if). The first line says which config it is.

use crate::cli::common::EXIT_OK;
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::snapshot::TickTiming;
use mergetune_logic::config::{self, Config};
use mergetune_logic::printable::printable;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The recording (JSON lines, one tick per line).
    pub file: PathBuf,
    /// Config for the replayed policy [default: the one the recording carries, else
    /// built-in defaults].
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// Print the decisions and the devices as one JSON document.
    #[arg(long)]
    pub json: bool,
    /// Draw merge ratios, ladder level, bios/s and latency per device over time (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// The replay's config and a sentence saying where it came from.
fn replay_config(
    explicit: Option<&std::path::Path>,
    ticks: &[mergetune_daemon::record::TickRecord],
) -> anyhow::Result<(Config, String)> {
    if let Some(p) = explicit {
        let cfg = config::load_file(p)?;
        return Ok((
            cfg,
            format!(
                "config {} (given with -c: a what-if, not the recorded daemon's)",
                printable(&p.display().to_string())
            ),
        ));
    }
    match mergetune_daemon::record::recorded_config(ticks) {
        None => Ok((
            Config::default(),
            "built-in defaults (the recording carries no config: made before configs were recorded; give the daemon's with -c)".into(),
        )),
        Some((cfg, reloads)) => {
            cfg.validate("the recording's config")?;
            let mut said = format!(
                "the recording's config (the recorded daemon's: {})",
                cfg.summary()
            );
            if reloads > 0 {
                said.push_str(&format!(
                    "; the recorded daemon was reloaded {reloads} time(s) with another config: replayed with the first throughout"
                ));
            }
            Ok((cfg.clone(), said))
        }
    }
}

#[allow(clippy::too_many_lines)] // shortened by the pricing/cli/traits move
pub fn run(args: ReplayArgs) -> anyhow::Result<i32> {
    let recording = mergetune_daemon::record::load_recording(&args.file)?;
    if let Some(t) = &recording.truncated {
        tracing::warn!("{}: {t}", printable(&args.file.display().to_string()));
    }
    let ticks = recording.ticks;
    let (cfg, config_said) = replay_config(args.config.as_deref(), &ticks)?;
    let n = ticks.len();
    // load() refuses ticks out of time order, so this cannot underflow.
    let span_ms = ticks
        .last()
        .map_or(0, |t| t.t_ms.saturating_sub(ticks[0].t_ms));
    let end_ms = ticks.last().map_or(0, |t| t.t_ms);
    let mut daemon = Daemon::simulated(cfg);
    let decisions = match &args.plot {
        Some(p) => {
            let mut sampling = mergetune_lab::plot::Sampling::new(&mut daemon);
            let d = mergetune_daemon::record::replay(
                ticks,
                &mut crate::cli::common::VirtualClocked {
                    inner: &mut sampling,
                    stamp: mergetune_export::logging::set_replay_time_ms,
                },
            );
            let mut series = sampling.finish();
            series.title = format!("replay of {}", args.file.display());
            mergetune_lab::plot::plot_series(&series, p)?;
            d
        }
        None => mergetune_daemon::record::replay(
            ticks,
            &mut crate::cli::common::VirtualClocked {
                inner: &mut daemon,
                stamp: mergetune_export::logging::set_replay_time_ms,
            },
        ),
    };
    mergetune_export::logging::set_replay_time_ms(None);
    let status = mergetune_export::status::StatusSnapshot::of(
        &daemon.snapshot(),
        TickTiming {
            now_ms: end_ms,
            duration_seconds: 0.0,
            lag_seconds: 0.0,
        },
        0.0,
    );
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "file": args.file.display().to_string(),
                "config": config_said,
                "truncated_last_line": recording.truncated,
                "ticks": n,
                "span_ms": span_ms,
                "decisions": decisions,
                "devices": status.devices,
            }))?
        );
    } else {
        // Device names and reasons come from the recording: shown, never sent raw.
        println!(
            "{}: {n} ticks over {:.1} s, {} decision(s)",
            printable(&args.file.display().to_string()),
            span_ms as f64 / 1000.0,
            decisions.len()
        );
        println!("replayed with {config_said}");
        if let Some(t) = &recording.truncated {
            println!("{t}");
        }
        for d in &decisions {
            println!(
                "{:>10.1} s  {:<10} {} [{}]: {}",
                d.at_ms as f64 / 1000.0,
                printable(&d.device),
                printable(&d.changes_text()),
                d.kind,
                printable(&d.reason)
            );
        }
        print!("{}", mergetune_export::table::render(&status.devices));
    }
    Ok(EXIT_OK)
}
