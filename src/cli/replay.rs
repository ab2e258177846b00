//! `mergetune replay FILE`: the policy over a recording (`run --record FILE`), offline: the
//! decisions it makes with their reasons, then the device table as it stands at the end of
//! the recording (the same table and JSON fields as `status` and `run --once`).
//!
//! The policy runs with the config the recording carries (the recorded daemon's, reloads
//! aside), and with the prices and bio tap samples the recorded daemon got, so a replay of
//! a recording gives the recorded decisions; `-c` replays with another config instead (a
//! what-if). The first line says which config it is.

use crate::cli::common::{EXIT_OK, Watch};
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::record::ReplayGap;
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
}

/// `mergetune replay`: its arguments, and `--plot` (hidden), which moved to
/// `mergetune-lab replay --plot` ([`crate::cli::moved`]).
#[derive(Debug, clap::Args)]
pub struct ReplayCmd {
    #[command(flatten)]
    pub run: ReplayArgs,
    /// Moved: `mergetune-lab replay --plot`.
    #[arg(long, hide = true, value_name = "FILE.svg")]
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

/// The recording's ticks through `daemon` (with `watch` around it), at the recording's
/// time in the log: the decisions, and what the recording could not answer.
fn replay_ticks(
    daemon: &mut Daemon,
    ticks: Vec<mergetune_daemon::record::TickRecord>,
    watch: Option<&mut dyn Watch<()>>,
) -> anyhow::Result<(Vec<mergetune_logic::decision::Decision>, Vec<ReplayGap>)> {
    let mut ticks = Some(ticks);
    let mut out = (Vec::new(), Vec::new());
    let mut drive = |c: &mut dyn mergetune_daemon::controller::Controller| {
        out = mergetune_daemon::record::replay_with_gaps(
            ticks.take().unwrap_or_default(),
            &mut crate::cli::common::VirtualClocked {
                inner: c,
                stamp: mergetune_export::logging::set_replay_time_ms,
            },
        );
    };
    match watch {
        Some(w) => {
            w.around(daemon, &mut drive);
            w.finish(&())?;
        }
        None => drive(daemon),
    }
    Ok(out)
}

/// `mergetune replay`: the decisions and the table. `watch` goes around the daemon and is
/// done before anything is printed (the lab's plot: `mergetune-lab replay --plot`).
pub fn run_watched(args: ReplayArgs, watch: Option<&mut dyn Watch<()>>) -> anyhow::Result<i32> {
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
    let (decisions, gaps) = replay_ticks(&mut daemon, ticks, watch)?;
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
                "unanswered": gaps,
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
        if !gaps.is_empty() {
            println!("what the recording cannot answer, and how it changes this replay:");
            for g in &gaps {
                println!("  {}", printable(&g.to_string()));
            }
        }
        print!("{}", mergetune_export::table::render(&status.devices));
    }
    Ok(EXIT_OK)
}
