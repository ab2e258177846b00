//! The `mergetune` command line: the edge where clocks, signals, files and exit codes live.
//! Everything it calls is testable without it.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use mergetune::daemon::actuator::Actuator;
use mergetune::daemon::adaptive::{Daemon, format_rows};
use mergetune::daemon::state::{FileStore, MemoryStore, StateStore, restore_from_store};
use mergetune::export::logging::Notifier;
use mergetune::export::metrics::{Metrics, TickTiming};
use mergetune::kernel::blockfs::RealFs;
use mergetune::logic::config::{self, Config, DEFAULT_CONFIG_PATH};
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};
use tracing::{error, info, warn};

#[derive(Parser, Debug)]
#[command(
    name = "mergetune",
    version,
    about = "Adaptive request-merge control for Linux block devices",
    long_about = "mergetune watches every block device's merge counters and turns request \
merging off (queue/nomerges) where it is wasted and back on where it pays, with hysteresis, \
probing and a reason for every decision. It restores the original values on exit and after a crash."
)]
struct Cli {
    /// More log output (-v debug, -vv trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Less log output (warnings and errors only).
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Log format: auto (journal under systemd, else text), text, json (one object per
    /// line, for log shippers) or journal.
    #[arg(long, global = true, value_enum, default_value_t)]
    log_format: mergetune::export::logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the daemon on this machine's block devices.
    Run(RunArgs),
    /// Validate a config file: exit 0 with a summary, or 1 naming the key and the reason.
    CheckConfig {
        /// The TOML file to check.
        path: PathBuf,
    },
    /// Put back every original value recorded in the state file, then remove it.
    Restore {
        /// Directory holding state.json [default: the config's daemon.state_dir, /run/mergetune].
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Config file to take state_dir from.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Root of sysfs.
        #[arg(long, default_value = "/sys")]
        sysfs_root: PathBuf,
    },
    /// Run the daemon's policy against an in-process simulated block stack in virtual time.
    Simulate(mergetune::cli::simulate::SimulateArgs),
    /// Run the policy over a recording (`run --record FILE`) and print the decisions it
    /// would make, with reasons: what-if tuning on production data, offline.
    Replay {
        /// The recording (JSON lines, one tick per line).
        file: PathBuf,
        /// Config for the replayed policy [default: built-in defaults].
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print the decisions as one JSON document.
        #[arg(long)]
        json: bool,
        /// Draw merge ratios, ladder level, bios/s and latency per device over time (SVG).
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
    },
    /// Read a captured block trace and suggest the merge level, scheduler and slice
    /// settings, each with its evidence (`--what-if`: their modelled effect).
    Advise(mergetune::lab::advise::AdviseArgs),
    /// Measure what merging costs in CPU per scheduler and level, and what a nomerges
    /// write costs in latency, on a scratch loop device; write a cost profile.
    Calibrate(mergetune::lab::calibrate::CalibrateArgs),
    /// Capture block traces for `advise`.
    Trace {
        #[command(subcommand)]
        command: mergetune::kernel::tracefs::TraceCommand,
    },
    /// Show a running daemon's devices: level, nomerges, merge ratios, last decision, next probe.
    Status {
        /// The daemon's metrics endpoint ([metrics] listen).
        #[arg(long, default_value = mergetune::export::metrics::DEFAULT_LISTEN)]
        addr: String,
        /// Print the raw /status JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Config file [default: /etc/mergetune/mergetune.toml if it exists, else built-in defaults].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Decide and log what would be written; write nothing (no tunable, no state file).
    #[arg(long)]
    dry_run: bool,
    /// Take two samples one interval apart, print the device table and decisions, restore, exit.
    #[arg(long)]
    once: bool,
    /// Override [daemon] interval_ms: time between samples, in milliseconds.
    #[arg(long)]
    interval_ms: Option<u64>,
    /// Override [daemon] state_dir: where the original values are recorded.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Root of sysfs (tests point this at a fake tree).
    #[arg(long, default_value = "/sys")]
    sysfs_root: PathBuf,
    /// Root of procfs (tests point this at a fake tree).
    #[arg(long, default_value = "/proc")]
    procfs_root: PathBuf,
    /// Append every tick's raw samples to FILE (JSON lines, one per tick), for
    /// `mergetune replay`.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Override [metrics] listen: IP:PORT of the read-only /metrics and /status endpoint;
    /// "" turns it off. With --once the endpoint is off unless this is given.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
}

fn main() {
    let cli = Cli::parse();
    mergetune::export::logging::init(cli.verbose, cli.quiet, cli.log_format);
    let code = match run_command(cli.command) {
        Ok(code) => code,
        Err(e) => {
            error!("{e:#}");
            eprintln!("mergetune: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

fn run_command(cmd: Command) -> Result<i32> {
    match cmd {
        Command::Run(args) => run_daemon(args),
        Command::CheckConfig { path } => match config::load_file(&path) {
            Ok(cfg) => {
                println!("{}: ok: {}", path.display(), cfg.summary());
                for w in cfg.warnings() {
                    println!("{}: warning: {w}", path.display());
                }
                Ok(0)
            }
            Err(e) => {
                eprintln!("mergetune: {e}");
                Ok(1)
            }
        },
        Command::Restore {
            state_dir,
            config,
            sysfs_root,
        } => {
            let dir = match state_dir {
                Some(d) => d,
                None => load_config(config.as_deref())?.0.daemon.state_dir,
            };
            let mut store = FileStore::new(&dir);
            let mut fs = RealFs::new(&sysfs_root, "/proc");
            let report = restore_from_store(&mut fs, &mut store, unix_now_secs())?;
            if report.results.is_empty() && report.rejected.is_empty() {
                println!("{}: nothing to restore", store.describe());
            }
            for r in &report.results {
                println!("{r}");
            }
            for r in &report.rejected {
                eprintln!("mergetune: {}: {r}", store.describe());
            }
            if report.kept > 0 {
                println!(
                    "{}: {} record(s) kept for a later restore",
                    store.describe(),
                    report.kept
                );
            }
            Ok(if report.failed() || !report.rejected.is_empty() {
                1
            } else {
                0
            })
        }
        Command::Simulate(args) => {
            mergetune::cli::simulate::run(args)?;
            Ok(0)
        }
        Command::Advise(args) => mergetune::lab::advise::run(args),
        Command::Calibrate(args) => mergetune::lab::calibrate::run(args),
        Command::Trace { command } => mergetune::kernel::tracefs::run(command),
        Command::Replay {
            file,
            config,
            json,
            plot,
        } => {
            let cfg = match &config {
                Some(p) => config::load_file(p)?,
                None => Config::default(),
            };
            let ticks = mergetune::daemon::record::load(&file)?;
            let n = ticks.len();
            // load() refuses ticks out of time order, so this cannot underflow.
            let span_ms = ticks
                .last()
                .map_or(0, |t| t.t_ms.saturating_sub(ticks[0].t_ms));
            let mut daemon = Daemon::simulated(cfg);
            let decisions = match &plot {
                Some(p) => {
                    let mut sampling = mergetune::lab::plot::Sampling::new(&mut daemon);
                    let d = mergetune::daemon::record::replay(ticks, &mut sampling);
                    let mut series = sampling.finish();
                    series.title = format!("replay of {}", file.display());
                    mergetune::lab::plot::plot_series(&series, p)?;
                    d
                }
                None => mergetune::daemon::record::replay(ticks, &mut daemon),
            };
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "file": file.display().to_string(),
                        "ticks": n,
                        "span_ms": span_ms,
                        "decisions": decisions,
                        "devices": daemon.rows(),
                    }))?
                );
            } else {
                println!(
                    "{}: {n} ticks over {:.1} s, {} decision(s)",
                    file.display(),
                    span_ms as f64 / 1000.0,
                    decisions.len()
                );
                for d in &decisions {
                    println!(
                        "{:>10.1} s  {:<10} {} [{}]: {}",
                        d.at_ms as f64 / 1000.0,
                        d.device,
                        d.changes_text(),
                        d.kind,
                        d.reason
                    );
                }
                print!("{}", format_rows(&daemon.rows()));
            }
            Ok(0)
        }
        Command::Status { addr, json } => {
            let timeout = Duration::from_secs(5);
            if json {
                let body = mergetune::export::status::http_get(&addr, "/status", timeout)?;
                println!("{}", String::from_utf8_lossy(&body).trim_end());
            } else {
                let s = mergetune::export::status::fetch(&addr, timeout)?;
                print!("{}", mergetune::export::status::format_status(&s));
            }
            Ok(0)
        }
    }
}

fn unix_now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The config and where it came from (None: built-in defaults).
fn load_config(path: Option<&Path>) -> Result<(Config, Option<PathBuf>)> {
    match path {
        Some(p) => Ok((config::load_file(p)?, Some(p.to_path_buf()))),
        None => {
            let p = Path::new(DEFAULT_CONFIG_PATH);
            if p.exists() {
                Ok((config::load_file(p)?, Some(p.to_path_buf())))
            } else {
                Ok((Config::default(), None))
            }
        }
    }
}

fn apply_overrides(cfg: &mut Config, args: &RunArgs) -> Result<()> {
    if let Some(ms) = args.interval_ms {
        cfg.daemon.interval_ms = ms;
    }
    if let Some(d) = &args.state_dir {
        cfg.daemon.state_dir = d.clone();
    }
    cfg.validate("command line")?;
    Ok(())
}

enum Event {
    Stop(&'static str),
    Reload,
}

fn run_daemon(args: RunArgs) -> Result<i32> {
    /// The one-line summary for systemd's STATUS= (`systemctl status mergetune`).
    fn status_line(daemon: &Daemon) -> String {
        let devs = daemon.devices();
        let managed = devs.values().filter(|d| d.management.is_managed()).count();
        let reduced = devs
            .values()
            .filter(|d| {
                d.management.is_managed()
                    && d.policy.level(&daemon.config().policy)
                        > mergetune::logic::decision::Level::L0
            })
            .count();
        let watching = if daemon.next_tick_in_ms() < daemon.config().daemon.interval_ms {
            format!(", watching L3 every {} ms", daemon.next_tick_in_ms())
        } else {
            String::new()
        };
        format!(
            "{}{managed} of {} devices managed, {reduced} with merging reduced{watching}, {} decisions, {} write errors",
            if daemon.actuator().dry_run() {
                "dry-run: "
            } else {
                ""
            },
            devs.len(),
            daemon.counters.decisions,
            daemon.counters.write_errors
        )
    }

    let (mut cfg, cfg_path) = load_config(args.config.as_deref())?;
    apply_overrides(&mut cfg, &args)?;
    match &cfg_path {
        Some(p) => info!("config {}: {}", p.display(), cfg.summary()),
        None => info!(
            "no config file at {DEFAULT_CONFIG_PATH}: built-in defaults: {}",
            cfg.summary()
        ),
    }
    for w in cfg.warnings() {
        warn!("{w}");
    }
    let mut fs = RealFs::new(&args.sysfs_root, &args.procfs_root);

    let store: Box<dyn StateStore> = if args.dry_run {
        let stale = FileStore::new(&cfg.daemon.state_dir);
        if stale.path().exists() {
            warn!(
                "{} exists: a previous run did not restore its changes; dry-run leaves it (run `mergetune restore`)",
                stale.path().display()
            );
        }
        info!("dry-run: decisions are logged, nothing is written");
        Box::new(MemoryStore::default())
    } else {
        let mut store = FileStore::new(&cfg.daemon.state_dir);
        // A state file left by a run that died holds the true originals: put them back
        // before anything else, so our own earlier writes are never taken as "original".
        let report = restore_from_store(&mut fs, &mut store, unix_now_secs())
            .context("cannot recover the original values from a previous run; inspect or remove the state file")?;
        for r in &report.results {
            info!(device = %r.device, "recovery after an unclean exit: {r}");
        }
        for r in &report.rejected {
            warn!("{}: {r}", store.describe());
        }
        if report.failed() {
            bail!(
                "could not restore every original value recorded in {}; not starting",
                store.describe()
            );
        }
        Box::new(store)
    };
    let mut actuator = Actuator::new(args.dry_run, store);
    actuator.set_clock_origin_unix_secs(unix_now_secs());
    if !args.dry_run {
        // Records of devices that are gone stay with the daemon until they come back.
        let kept = FileStore::new(&cfg.daemon.state_dir)
            .load()
            .ok()
            .flatten()
            .map(|l| l.state)
            .unwrap_or_default();
        actuator.adopt(kept);
    }
    let mut daemon = Daemon::new(cfg.clone(), actuator);

    // The read-only metrics endpoint. A bind failure is logged, never fatal: merge control
    // does not depend on being scraped (Prometheus' `up` shows the target down).
    let listen = match &args.metrics_listen {
        Some(l) => l.clone(),
        // `--once` looks at the machine next to a running service: no second endpoint.
        None if args.once => String::new(),
        None => cfg.metrics.listen.clone(),
    };
    let metrics = Arc::new(Metrics::new());
    let server = match mergetune::export::metrics::parse_listen(&listen) {
        Err(e) => bail!("--metrics-listen: {e}"),
        Ok(None) => {
            info!("metrics endpoint off ([metrics] listen = \"\")");
            None
        }
        Ok(Some(addr)) => {
            match mergetune::export::http::serve(
                addr,
                metrics.clone(),
                mergetune::export::http::Limits::default(),
            ) {
                Ok(h) => {
                    info!(
                        "metrics endpoint: http://{}/metrics and /status",
                        h.local_addr()
                    );
                    Some(h)
                }
                Err(e) => {
                    error!("metrics endpoint {addr}: cannot listen: {e}; running without metrics");
                    None
                }
            }
        }
    };
    let notifier = Notifier::from_env();
    // Pings at half the watchdog timeout at least, whatever the tick interval.
    let watchdog_every = notifier.watchdog_timeout().map(|t| t / 2);
    let mut last_ping = Instant::now();
    let mut last_status = String::new();
    let mut worst_lag = Duration::ZERO;

    let (tx, rx) = mpsc::channel::<Event>();
    {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
            .context("cannot install signal handlers")?;
        std::thread::spawn(move || {
            for sig in signals.forever() {
                let ev = match sig {
                    SIGHUP => Event::Reload,
                    SIGINT => Event::Stop("SIGINT"),
                    _ => Event::Stop("SIGTERM"),
                };
                if tx.send(ev).is_err() {
                    break;
                }
            }
        });
    }

    let mut recorder = match &args.record {
        Some(p) => {
            info!("recording every tick to {}", p.display());
            Some(mergetune::daemon::record::Recorder::create(p)?)
        }
        None => None,
    };
    let start = Instant::now();
    let now_ms = |start: &Instant| start.elapsed().as_millis() as u64;
    let mut next_tick = Duration::ZERO;
    let mut all_decisions = Vec::new();
    let stop_reason: &str = loop {
        let elapsed = start.elapsed();
        if elapsed >= next_tick {
            let lag = elapsed - next_tick;
            worst_lag = worst_lag.max(lag);
            let tick_at = now_ms(&start);
            let tick_start = Instant::now();
            let decisions = match recorder.as_mut() {
                Some(rec) => {
                    let mut rfs = mergetune::daemon::record::RecordingFs::new(&mut fs, tick_at);
                    let d = daemon.tick(tick_at, &mut rfs);
                    if let Err(e) = rec.write(&rfs.finish()) {
                        error!("{e}; recording stopped");
                        recorder = None;
                    }
                    d
                }
                None => daemon.tick(tick_at, &mut fs),
            };
            let took = tick_start.elapsed();
            if server.is_some() {
                metrics.update(
                    &daemon,
                    &decisions,
                    TickTiming {
                        now_ms: tick_at,
                        duration_seconds: took.as_secs_f64(),
                        lag_seconds: lag.as_secs_f64(),
                    },
                );
            }
            let status = status_line(&daemon);
            if daemon.counters.ticks == 1 {
                if let Err(e) = notifier.ready(&status) {
                    warn!("sd_notify READY=1: {e}");
                }
                last_status = status;
            } else if status != last_status {
                let _ = notifier.status(&status);
                last_status = status;
            }
            // A tick proves the loop alive; at the L3 watch's ten ticks a second, a ping at
            // every tick would be ten datagrams a second for nothing.
            if watchdog_every.is_some_and(|every| last_ping.elapsed() >= every / 2) {
                let _ = notifier.watchdog();
                last_ping = Instant::now();
            }
            if args.once {
                all_decisions.extend(decisions);
                if daemon.counters.ticks >= 2 {
                    break "--once";
                }
            }
            let interval = Duration::from_millis(daemon.next_tick_in_ms());
            next_tick += interval;
            // After a stall (suspend, a slow sysfs), skip missed ticks rather than burst.
            if next_tick < start.elapsed() {
                next_tick = start.elapsed() + interval;
            }
        }
        let mut wait = next_tick.saturating_sub(start.elapsed());
        if let Some(every) = watchdog_every {
            // A tick interval longer than the watchdog: ping from the same loop in between.
            if last_ping.elapsed() >= every {
                let _ = notifier.watchdog();
                last_ping = Instant::now();
            }
            wait = wait.min(every.saturating_sub(last_ping.elapsed()));
        }
        match rx.recv_timeout(wait) {
            Ok(Event::Stop(sig)) => break sig,
            Ok(Event::Reload) => match &cfg_path {
                Some(p) => match config::load_file(p) {
                    Ok(mut new_cfg) => {
                        if let Err(e) = apply_overrides(&mut new_cfg, &args) {
                            metrics.config_reload(false);
                            error!("SIGHUP: new config rejected, keeping the old one: {e:#}");
                        } else {
                            info!(
                                "SIGHUP: config reloaded from {}: {}",
                                p.display(),
                                new_cfg.summary()
                            );
                            if new_cfg.metrics != daemon.config().metrics
                                && args.metrics_listen.is_none()
                            {
                                warn!(
                                    "SIGHUP: [metrics] listen changed to {:?}: takes effect at the next restart",
                                    new_cfg.metrics.listen
                                );
                            }
                            metrics.config_reload(true);
                            daemon.reload(new_cfg);
                        }
                    }
                    Err(e) => {
                        metrics.config_reload(false);
                        error!("SIGHUP: new config rejected, keeping the old one: {e}")
                    }
                },
                None => warn!("SIGHUP: running on built-in defaults, no config file to reload"),
            },
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break "signal thread ended",
        }
    };
    if args.once {
        print!("{}", format_rows(&daemon.rows()));
        if all_decisions.is_empty() {
            println!("no decisions");
        }
        for d in &all_decisions {
            println!("{d}");
        }
    }
    let _ = notifier.stopping(&format!(
        "stopping ({stop_reason}): restoring original values"
    ));
    if worst_lag > Duration::from_millis(100) {
        info!("worst tick lag this run: {} ms", worst_lag.as_millis());
    }
    info!("stopping ({stop_reason}): restoring original values");
    let restored = daemon.restore_all(now_ms(&start), &mut fs);
    let failed = restored
        .iter()
        .filter(|d| matches!(d.applied, mergetune::logic::decision::Applied::Failed(_)))
        .count();
    info!(
        "stopped; {} value(s) restored",
        restored.iter().filter(|d| d.was_applied()).count()
    );
    Ok(if failed > 0 { 1 } else { 0 })
}
