//! `mergetune run`: the daemon's loop, the edge where clocks, signals, files and the service
//! manager live. Each step of a start is a function here (config, state recovery, metrics
//! endpoint, signals), the loop is `TickLoop`, and `--once`'s look is [`crate::cli::once`]'s.
//!
//! Order at start: config (with the command line's overrides), then the originals a dead
//! predecessor left in the state file are put back before anything is read as "original",
//! then the endpoint, then ticks until a signal (or, with `--once`, until one decision's
//! worth of windows has been sampled). At stop every original value is restored; a dry run
//! wrote nothing and has nothing to restore.
//!
//! A live run needs its state directory before anything else: without a record of the
//! originals it may write nothing, so it refuses to start (exit 1, saying it needs root)
//! rather than run as a daemon that can only look. The state directory is fixed for the
//! run: a reload that changes it is refused (crates/daemon/src/reload.rs), and a pointer in the
//! runtime directory names it for `mergetune restore`. At stop the metrics endpoint is
//! closed first, with all its connections, so the restore has descriptors to work with.

use crate::cli::common::{EXIT_ERROR, EXIT_OK, load_config, unix_now_secs};
use crate::cli::once::Once;
use anyhow::{Context, Result, bail};
use mergetune_daemon::actuator::Actuator;
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::state::{
    FileStore, MemoryStore, StatePointer, StateStore, restore_from_store,
};
use mergetune_export::http::ServerHandle;
use mergetune_export::logging::Notifier;
use mergetune_export::metrics::{Metrics, TickTiming};
use mergetune_kernel::blockfs::RealFs;
use mergetune_logic::config::{self, Config, DEFAULT_CONFIG_PATH};
use mergetune_logic::decision::{Applied, Decision};
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};
use tracing::{error, info, warn};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Config file [default: /etc/mergetune/mergetune.toml if it exists, else built-in defaults].
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// Decide and log what would be written; write nothing (no tunable, no state file).
    /// Reads only world-readable files: needs no root.
    #[arg(long)]
    pub dry_run: bool,
    /// Sample for as long as one decision needs (step_down_after_windows windows), print
    /// the device table and every decision taken (with --dry-run: that it would take), exit.
    #[arg(long)]
    pub once: bool,
    /// With --once: print the devices and decisions as one JSON document.
    #[arg(long, requires = "once")]
    pub json: bool,
    /// Override the config's daemon.interval_ms: time between samples, in milliseconds.
    #[arg(long)]
    pub interval_ms: Option<u64>,
    /// Override the config's daemon.state_dir: where the original values are recorded.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// For tests: the root of a fake sysfs tree.
    #[arg(long, default_value = "/sys", hide = true)]
    pub sysfs_root: PathBuf,
    /// For tests: the root of a fake procfs tree.
    #[arg(long, default_value = "/proc", hide = true)]
    pub procfs_root: PathBuf,
    /// For tests: the runtime directory that holds the pointer to the state directory
    /// [default: /run/mergetune, and none under a fake --sysfs-root].
    #[arg(long, hide = true)]
    pub runtime_dir: Option<PathBuf>,
    /// Append every tick's raw samples to FILE (JSON lines, one per tick), for
    /// `mergetune replay`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Override the config's metrics.listen: IP:PORT of the read-only /metrics and /status endpoint;
    /// "" turns it off. With --once the endpoint is off unless this is given.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
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

/// Where the pointer to the state directory lives: the runtime directory (the unit's
/// `RuntimeDirectory=`, the default `state_dir`), or `--runtime-dir`. A run over a fake
/// sysfs tree (tests) keeps no pointer unless asked, so it never leaves one naming its
/// temporary directory for the real machine's `mergetune restore`.
pub fn runtime_dir(explicit: Option<&Path>, sysfs_root: &Path) -> Option<PathBuf> {
    match explicit {
        Some(d) => Some(d.to_path_buf()),
        None if sysfs_root == Path::new("/sys") => Some(PathBuf::from(config::DEFAULT_STATE_DIR)),
        None => None,
    }
}

/// Why a live run cannot start without a writable state directory, for the operator.
fn needs_root(dir: &Path, e: &dyn std::fmt::Display, euid: u32) -> String {
    let who = if euid == 0 {
        String::new()
    } else {
        format!(" (this is uid {euid}, not root)")
    };
    format!(
        "a live run needs root{who}: it records every original value in {} before it writes a tunable under /sys/block, and cannot: {e}. Nothing was written. To look without root: `mergetune run --once --dry-run`",
        dir.display()
    )
}

/// The config with the command line's overrides, logged, and the file it came from.
fn configure(args: &RunArgs) -> Result<(Config, Option<PathBuf>)> {
    let (mut cfg, cfg_path) = load_config(args.config.as_deref())?;
    apply_overrides(&mut cfg, args)?;
    match &cfg_path {
        Some(p) => info!("config {}: {}", p.display(), cfg.summary()),
        None => info!(
            "no config file at {DEFAULT_CONFIG_PATH}: built-in defaults: {}",
            cfg.summary()
        ),
    }
    info!("{}", cfg.tuners());
    for w in cfg.warnings() {
        warn!("{w}");
    }
    Ok((cfg, cfg_path))
}

/// The startup log's pricing line: what prices a step down, where it came from and
/// whether a profile matches the running kernel.
fn log_pricing(cfg: &Config, fs: &mut RealFs) {
    use mergetune_kernel::blockfs::BlockFs as _;
    let source = mergetune_daemon::pricing::PricingSource::from_config(cfg);
    info!(
        "{}",
        source.summary(
            fs.kernel_release().as_deref(),
            cfg.pricing.floor_ms_per_sec()
        )
    );
}

/// After the first tick (devices discovered and priced): per managed device what prices
/// it, whether the profile matches it, or the live floor.
fn log_device_pricing(daemon: &Daemon) {
    let snap = daemon.snapshot();
    for d in snap.devices.iter().filter(|d| d.management.is_managed()) {
        let (Some(worth), Some(level)) = (d.worth.as_ref(), d.level) else {
            continue;
        };
        let p = mergetune_export::status::DevicePricing::of(
            worth,
            level,
            &snap.pricing_name,
            snap.floor_ms_per_sec,
        );
        info!(device = %d.name, "{}: pricing: {}", d.name, p.sentence());
    }
}

/// The actuator: in a dry run over a memory store (nothing is written, not even the state
/// file); live over the state file, after putting back what a dead predecessor left.
fn actuator(args: &RunArgs, cfg: &Config, fs: &mut RealFs) -> Result<Actuator> {
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
        if let Err(e) = store.check_writable() {
            let euid = rustix::process::geteuid().as_raw();
            bail!("{}", needs_root(&cfg.daemon.state_dir, &e, euid));
        }
        let pointer =
            runtime_dir(args.runtime_dir.as_deref(), &args.sysfs_root).map(StatePointer::new);
        if let Some(p) = &pointer {
            recover_pointed(p, &cfg.daemon.state_dir, fs)?;
        }
        // A state file left by a run that died holds the true originals: put them back
        // before anything else, so our own earlier writes are never taken as "original".
        let report = restore_from_store(fs, &mut store, unix_now_secs())
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
        if let Some(p) = &pointer
            && let Err(e) = p.write(&cfg.daemon.state_dir)
        {
            warn!(
                "{e}: `mergetune restore` finds the originals only through daemon.state_dir ({})",
                cfg.daemon.state_dir.display()
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
    Ok(actuator)
}

/// Recovery from the directory the pointer names, when it is not this run's: the last
/// daemon ran with another `state_dir` (the config was edited since) and died.
fn recover_pointed(pointer: &StatePointer, state_dir: &Path, fs: &mut RealFs) -> Result<()> {
    let other = match pointer.read() {
        Ok(Some(d)) if d != state_dir => d,
        Ok(_) => return Ok(()),
        Err(e) => {
            warn!("{e}: ignored");
            return Ok(());
        }
    };
    let mut store = FileStore::new(&other);
    let report = restore_from_store(fs, &mut store, unix_now_secs()).with_context(|| {
        format!(
            "cannot recover the original values in {} (the last daemon's state_dir, named by {})",
            other.display(),
            pointer.path().display()
        )
    })?;
    for r in &report.results {
        info!(device = %r.device, "recovery from {} (the last daemon's state_dir): {r}", other.display());
    }
    if report.failed() {
        bail!(
            "could not restore every original value recorded in {}; not starting",
            store.describe()
        );
    }
    if report.kept > 0 {
        warn!(
            "{}: {} record(s) of devices that are gone stay there: `mergetune restore --state-dir {}` puts them back once the devices are",
            store.describe(),
            report.kept,
            other.display()
        );
    }
    Ok(())
}

/// The read-only metrics endpoint. A bind failure is logged, never fatal: merge control
/// does not depend on being scraped (Prometheus' `up` shows the target down).
fn endpoint(args: &RunArgs, cfg: &Config, metrics: &Arc<Metrics>) -> Result<Option<ServerHandle>> {
    let listen = match &args.metrics_listen {
        Some(l) => l.clone(),
        // `--once` looks at the machine next to a running service: no second endpoint.
        None if args.once => String::new(),
        None => cfg.metrics.listen.clone(),
    };
    match mergetune_export::metrics::parse_listen(&listen) {
        Err(e) => bail!("--metrics-listen: {e}"),
        Ok(None) => {
            info!("metrics endpoint off ([metrics] listen = \"\")");
            Ok(None)
        }
        Ok(Some(addr)) => {
            match mergetune_export::http::serve(
                addr,
                metrics.clone(),
                mergetune_export::http::Limits::default(),
            ) {
                Ok(h) => {
                    info!(
                        "metrics endpoint: http://{}/metrics and /status",
                        h.local_addr()
                    );
                    Ok(Some(h))
                }
                Err(e) => {
                    error!("metrics endpoint {addr}: cannot listen: {e}; running without metrics");
                    Ok(None)
                }
            }
        }
    }
}

enum Event {
    Stop(&'static str),
    Reload,
}

/// SIGTERM and SIGINT stop, SIGHUP reloads: delivered to the loop as [`Event`]s.
fn signals() -> Result<mpsc::Receiver<Event>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let (tx, rx) = mpsc::channel::<Event>();
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
    Ok(rx)
}

/// The one-line summary for systemd's STATUS= (`systemctl status mergetune`).
fn status_line(daemon: &Daemon) -> String {
    let devs = daemon.devices();
    let managed = devs.values().filter(|d| d.management.is_managed()).count();
    let reduced = devs
        .values()
        .filter(|d| {
            d.management.is_managed() && d.policy.level > mergetune_logic::decision::Level::L0
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

/// Whether the tick scheduled at `scheduled_ms` refreshes the metrics and `/status`: once
/// in each `interval_ms` of the schedule, and at every tick that decided something, so no
/// decision is counted late. A refresh walks every device (about 4 µs each, see
/// docs/metrics.md), and the L3 watch ticks up to ten times per interval; Prometheus
/// scrapes every few seconds, so the watch's extra ticks would refresh for nobody.
fn metrics_refresh_due(
    last_refresh_ms: Option<u64>,
    scheduled_ms: u64,
    interval_ms: u64,
    decided: bool,
) -> bool {
    let interval_ms = interval_ms.max(1);
    decided || last_refresh_ms.is_none_or(|last| scheduled_ms / interval_ms != last / interval_ms)
}

/// The tick loop's state: the daemon and everything around it that keeps time.
struct TickLoop {
    daemon: Daemon,
    fs: RealFs,
    metrics: Arc<Metrics>,
    server: Option<ServerHandle>,
    notifier: Notifier,
    /// Pings at half the watchdog timeout at least, whatever the tick interval.
    watchdog_every: Option<Duration>,
    last_ping: Instant,
    last_status: String,
    worst_lag: Duration,
    recorder: Option<mergetune_daemon::record::Recorder>,
    start: Instant,
    next_tick: Duration,
    /// The scheduled time of the tick that last refreshed the metrics.
    metrics_refreshed_ms: Option<u64>,
    /// Where this run's pointer to its state directory lives (live runs on the machine).
    pointer: Option<StatePointer>,
}

impl TickLoop {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Whether the next tick is due.
    fn due(&self) -> bool {
        self.start.elapsed() >= self.next_tick
    }

    /// One tick: sample, decide, apply, export, tell systemd. Returns the tick's time and
    /// its decisions.
    fn tick(&mut self) -> (u64, Vec<Decision>) {
        let lag = self.start.elapsed().saturating_sub(self.next_tick);
        self.worst_lag = self.worst_lag.max(lag);
        let tick_at = self.now_ms();
        let tick_start = Instant::now();
        let decisions = match self.recorder.as_mut() {
            Some(rec) => {
                let mut rfs = mergetune_daemon::record::RecordingFs::new(&mut self.fs, tick_at);
                let d = self.daemon.tick(tick_at, &mut rfs);
                if let Err(e) = rec.write(&rfs.finish()) {
                    error!("{e}; recording stopped");
                    self.recorder = None;
                }
                d
            }
            None => self.daemon.tick(tick_at, &mut self.fs),
        };
        let took = tick_start.elapsed();
        if self.server.is_some() {
            let timing = TickTiming {
                now_ms: tick_at,
                duration_seconds: took.as_secs_f64(),
                lag_seconds: lag.as_secs_f64(),
            };
            let scheduled_ms = self.next_tick.as_millis() as u64;
            let interval_ms = self.daemon.config().daemon.interval_ms;
            if metrics_refresh_due(
                self.metrics_refreshed_ms,
                scheduled_ms,
                interval_ms,
                !decisions.is_empty(),
            ) {
                self.metrics.update(&self.daemon, &decisions, timing);
                self.metrics_refreshed_ms = Some(scheduled_ms);
            } else {
                self.metrics.observe_tick(timing);
            }
        }
        let status = status_line(&self.daemon);
        if self.daemon.counters.ticks == 1 {
            log_device_pricing(&self.daemon);
            if let Err(e) = self.notifier.ready(&status) {
                warn!("sd_notify READY=1: {e}");
            }
            self.last_status = status;
        } else if status != self.last_status {
            let _ = self.notifier.status(&status);
            self.last_status = status;
        }
        // A tick proves the loop alive; at the L3 watch's ten ticks a second, a ping at
        // every tick would be ten datagrams a second for nothing.
        if self
            .watchdog_every
            .is_some_and(|every| self.last_ping.elapsed() >= every / 2)
        {
            let _ = self.notifier.watchdog();
            self.last_ping = Instant::now();
        }
        let interval = Duration::from_millis(self.daemon.next_tick_in_ms());
        self.next_tick += interval;
        // After a stall (suspend, a slow sysfs), skip missed ticks rather than burst.
        if self.next_tick < self.start.elapsed() {
            self.next_tick = self.start.elapsed() + interval;
        }
        (tick_at, decisions)
    }

    /// How long to wait for a signal before the next tick (or watchdog ping) is due; pings
    /// the watchdog when a tick interval is longer than it allows.
    fn wait(&mut self) -> Duration {
        let mut wait = self.next_tick.saturating_sub(self.start.elapsed());
        if let Some(every) = self.watchdog_every {
            if self.last_ping.elapsed() >= every {
                let _ = self.notifier.watchdog();
                self.last_ping = Instant::now();
            }
            wait = wait.min(every.saturating_sub(self.last_ping.elapsed()));
        }
        wait
    }

    /// SIGHUP: a new config from the same file, or the old one kept with the reason.
    fn reload(&mut self, cfg_path: Option<&std::path::Path>, args: &RunArgs) {
        let Some(p) = cfg_path else {
            warn!("SIGHUP: running on built-in defaults, no config file to reload");
            return;
        };
        let loaded = config::load_file(p)
            .map_err(anyhow::Error::from)
            .and_then(|mut c| apply_overrides(&mut c, args).map(|()| c));
        let new_cfg = match loaded {
            Err(e) => {
                self.metrics.config_reload(false);
                error!("SIGHUP: new config rejected, keeping the old one: {e:#}");
                return;
            }
            Ok(c) => c,
        };
        let summary = new_cfg.summary();
        let listen_changed = (new_cfg.metrics != self.daemon.config().metrics
            && args.metrics_listen.is_none())
        .then(|| new_cfg.metrics.listen.clone());
        match self.daemon.try_reload(new_cfg) {
            Err(e) => {
                self.metrics.config_reload(false);
                error!(
                    "SIGHUP: new config from {} rejected, keeping the old one: {e}",
                    p.display()
                );
            }
            Ok(()) => {
                info!("SIGHUP: config reloaded from {}: {summary}", p.display());
                if let Some(listen) = listen_changed {
                    warn!(
                        "SIGHUP: [metrics] listen changed to {listen:?}: takes effect at the next restart"
                    );
                }
                self.metrics.config_reload(true);
            }
        }
    }

    /// The stop: every original value restored (a dry run wrote none), the exit code. The
    /// endpoint goes first: its connections are descriptors the restore may need.
    fn stop(mut self, why: &str) -> i32 {
        if let Some(server) = self.server.take() {
            server.shutdown();
        }
        if self.worst_lag > Duration::from_millis(100) {
            info!("worst tick lag this run: {} ms", self.worst_lag.as_millis());
        }
        if self.daemon.actuator().dry_run() {
            let _ = self
                .notifier
                .stopping(&format!("stopping ({why}): dry run, nothing was written"));
            info!("stopping ({why}): dry run, nothing was written, nothing to restore");
            return EXIT_OK;
        }
        let _ = self
            .notifier
            .stopping(&format!("stopping ({why}): restoring original values"));
        info!("stopping ({why}): restoring original values");
        let now = self.now_ms();
        let restored = self.daemon.restore_all(now, &mut self.fs);
        let failed = restored
            .iter()
            .filter(|d| matches!(d.applied, Applied::Failed(_)))
            .count();
        info!(
            "stopped; {} value(s) restored",
            restored.iter().filter(|d| d.was_applied()).count()
        );
        // Nothing left to restore: the pointer to this run's state directory goes too.
        if let Some(p) = &self.pointer
            && !FileStore::new(&self.daemon.config().daemon.state_dir)
                .path()
                .exists()
        {
            let _ = p.clear_if(&self.daemon.config().daemon.state_dir);
        }
        if failed > 0 { EXIT_ERROR } else { EXIT_OK }
    }
}

pub fn run(args: RunArgs) -> Result<i32> {
    let (cfg, cfg_path) = configure(&args)?;
    let mut fs = RealFs::new(&args.sysfs_root, &args.procfs_root);
    log_pricing(&cfg, &mut fs);
    let actuator = actuator(&args, &cfg, &mut fs)?;
    let metrics = Arc::new(Metrics::new());
    let server = endpoint(&args, &cfg, &metrics)?;
    let notifier = Notifier::from_env();
    let watchdog_every = notifier.watchdog_timeout().map(|t| t / 2);
    let rx = signals()?;
    let recorder = match &args.record {
        Some(p) => {
            info!("recording every tick to {}", p.display());
            Some(mergetune_daemon::record::Recorder::create(p)?)
        }
        None => None,
    };
    let mut once = args.once.then(|| Once::new(&cfg, args.dry_run));
    let mut lp = TickLoop {
        daemon: Daemon::new(cfg, actuator),
        fs,
        metrics,
        server,
        notifier,
        watchdog_every,
        last_ping: Instant::now(),
        last_status: String::new(),
        worst_lag: Duration::ZERO,
        recorder,
        start: Instant::now(),
        next_tick: Duration::ZERO,
        metrics_refreshed_ms: None,
        pointer: (!args.dry_run)
            .then(|| runtime_dir(args.runtime_dir.as_deref(), &args.sysfs_root))
            .flatten()
            .map(StatePointer::new),
    };
    let stop_reason: &str = loop {
        if lp.due() {
            if let Some(o) = once.as_mut() {
                o.before_tick();
            }
            let (at, decisions) = lp.tick();
            if let Some(o) = once.as_mut()
                && o.after_tick(at, decisions, &lp.daemon)
            {
                break "--once";
            }
        }
        let wait = lp.wait();
        match rx.recv_timeout(wait) {
            Ok(Event::Stop(sig)) => break sig,
            Ok(Event::Reload) => lp.reload(cfg_path.as_deref(), &args),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break "signal thread ended",
        }
    };
    if let Some(o) = once {
        o.print(&lp.daemon, lp.now_ms(), args.json)?;
    }
    Ok(lp.stop(stop_reason))
}

#[cfg(test)]
mod tests {
    use super::metrics_refresh_due;

    #[test]
    fn metrics_refresh_every_tick_at_the_interval_and_once_per_interval_while_watching() {
        // Ticks on the interval: each one refreshes.
        let mut last = None;
        for t in [0, 1000, 2000, 3000] {
            assert!(metrics_refresh_due(last, t, 1000, false), "at {t} ms");
            last = Some(t);
        }
        // The L3 watch ticks every 100 ms: one refresh per second of the schedule.
        let mut refreshed = Vec::new();
        let mut last = Some(3000);
        for t in (3100..=6000).step_by(100) {
            if metrics_refresh_due(last, t, 1000, false) {
                refreshed.push(t);
                last = Some(t);
            }
        }
        assert_eq!(refreshed, vec![4000, 5000, 6000]);
        // A tick that decided refreshes at once, whatever the schedule.
        assert!(metrics_refresh_due(Some(4000), 4300, 1000, true));
        // The first tick always refreshes; an interval of 0 is not a division by zero.
        assert!(metrics_refresh_due(None, 0, 0, false));
        assert!(!metrics_refresh_due(Some(7), 7, 0, false));
    }
}
