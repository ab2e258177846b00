//! The daemon's entry point: [`run`] assembles the service from its parts and runs it,
//! where signals, files and the service manager meet; `mergetune run` parses its command
//! line into [`RunOptions`] and calls it. Each step of a start is a function here (config,
//! state recovery, metrics endpoint, signals); the loop itself is the daemon's
//! ([`mergetune_daemon::service::TickLoop`]), and `--once`'s look is [`once`]'s.
//!
//! It lives in the export layer, not the daemon's, because the service it assembles is
//! also an exporter: the metrics endpoint ([`crate::http`]), the service manager's
//! notifications ([`crate::logging::Notifier`]) and the device table of a look
//! ([`crate::table`]) are this crate's, and the daemon layer may not depend on them.
//!
//! Order at start: the signal handlers first (a SIGTERM or SIGINT during the start stops
//! the run before its first tick; a SIGHUP reloads after it), then config (with the command
//! line's overrides), then the originals a dead
//! predecessor left in the state file are put back before anything is read as "original",
//! then the endpoint, then ticks until a signal (or, with `--once`, until one decision's
//! worth of windows has been sampled). At stop every original value is restored; a dry run
//! wrote nothing and has nothing to restore. `--once` is a look, never a change: it decides
//! as the daemon would and writes nothing, as a dry run (a live look that wrote 0 -> 2 and
//! put it back a millisecond later changed the machine for nothing).
//!
//! A live run needs its state directory before anything else: without a record of the
//! originals it may write nothing, so it refuses to start (exit 1, naming the directory and
//! the error, and root when it is not root) rather than run as a daemon that can only look.
//! It holds the directory's lock for its life: a second daemon on the same directory
//! refuses to start, and `mergetune restore` leaves a live daemon's records alone. The
//! state directory is fixed for the run: a reload that changes it is refused
//! (crates/daemon/src/reload.rs), and a pointer in the runtime directory names it for
//! `mergetune restore`. At stop the metrics endpoint is closed first, with all its
//! connections, so the restore has descriptors to work with.

pub mod once;

use crate::endpoint::Endpoint;
use crate::http::ServerHandle;
use crate::logging::Notifier;
use crate::metrics::Metrics;
use anyhow::{Context, Result, bail};
use mergetune_daemon::actuator::Actuator;
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::service::{Event, Exporter, Reload, TickLoop, TickObserver};
use mergetune_daemon::state::{
    Claims, FileStore, MemoryStore, RestoreReport, StateError, StatePointer, StateStore,
    restore_from_store,
};
use mergetune_kernel::blockfs::RealFs;
use mergetune_kernel::roots::{KernelRoots, PROCFS, SYSFS};
use mergetune_logic::config::{self, Config, DEFAULT_CONFIG_PATH};
use once::Once;
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use tracing::{error, info, warn};

/// How a run that started ended (the command line makes it an exit code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every original value the run changed is back (or it changed none).
    Restored,
    /// At least one original value could not be put back at stop.
    RestoreFailed,
}

/// The hidden flags that point a command that reads or writes the machine (`run`,
/// `restore`) at a fake tree instead: the tests' way in. Defined once so the two commands
/// take the same fake host the same way.
#[derive(Debug, Clone, clap::Args)]
pub struct HostFlags {
    /// For tests: the root of a fake sysfs tree.
    #[arg(long, default_value = SYSFS, hide = true)]
    pub sysfs_root: PathBuf,
    /// For tests: the root of a fake procfs tree (a record's boot id is checked against
    /// the one read there).
    #[arg(long, default_value = PROCFS, hide = true)]
    pub procfs_root: PathBuf,
    /// For tests: the runtime directory that holds the pointer to the state directory and
    /// the device claims [default: /run/mergetune, and none under a fake --sysfs-root].
    #[arg(long, hide = true)]
    pub runtime_dir: Option<PathBuf>,
}

impl HostFlags {
    pub fn roots(&self) -> KernelRoots {
        KernelRoots::new(&self.sysfs_root, &self.procfs_root)
    }

    /// The runtime directory these flags name, or the machine's (see
    /// [`mergetune_daemon::state::runtime_dir`]).
    pub fn runtime_dir(&self) -> Option<PathBuf> {
        mergetune_daemon::state::runtime_dir(self.runtime_dir.as_deref(), &self.roots())
    }
}

/// What `mergetune run` was asked to do: its flags, parsed by the command line.
#[derive(clap::Args, Debug, Clone)]
pub struct RunOptions {
    /// Config file [default: /etc/mergetune/mergetune.toml if it exists, else built-in defaults].
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// Decide and log what would be written; write nothing (no tunable, no state file).
    /// Reads only world-readable files: needs no root. MERGETUNE_DRY_RUN=1 in the
    /// environment does the same: the unit's drop-in for installing a fleet in dry run
    /// (empty, 0, false, no or off leave it live).
    #[arg(
        long,
        env = "MERGETUNE_DRY_RUN",
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub dry_run: bool,
    /// Sample for as long as one decision needs (step_down_after_windows windows), print
    /// the device table and every decision it would take, exit. Writes nothing, with or
    /// without --dry-run (no tunable, no state file); run as root it sees what the daemon
    /// would (the bio tap, the merge-path sampler).
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
    #[command(flatten)]
    pub host: HostFlags,
    /// Append every tick's raw samples to FILE (JSON lines, one per tick), for
    /// `mergetune replay`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Override the config's metrics.listen: IP:PORT of the read-only /metrics and /status endpoint;
    /// "" turns it off. With --once the endpoint is off unless this is given.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
}

/// Seconds since the epoch, by the wall clock (0 before it).
pub fn unix_now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The config and where it came from (None: built-in defaults, no file at
/// [`DEFAULT_CONFIG_PATH`]).
pub fn load_config(path: Option<&Path>) -> Result<(Config, Option<PathBuf>)> {
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

fn apply_overrides(cfg: &mut Config, args: &RunOptions) -> Result<()> {
    if let Some(ms) = args.interval_ms {
        cfg.daemon.interval_ms = ms;
    }
    if let Some(d) = &args.state_dir {
        cfg.daemon.state_dir = d.clone();
    }
    cfg.validate("command line")?;
    Ok(())
}

/// Why a live run cannot start without a writable state directory, for the operator: root
/// is named only when this is not root; as root the directory itself is at fault (read-only,
/// immutable, full, owned by another user), and the error says which, with its path.
fn cannot_record(dir: &Path, e: &dyn std::fmt::Display, euid: u32) -> String {
    let why = format!(
        "it records every original value in {} before it writes a tunable under /sys/block, and cannot: {e}. Nothing was written.",
        dir.display()
    );
    if euid == 0 {
        format!(
            "cannot record the original values in the state directory: {why} Fix the directory (daemon.state_dir) and start again"
        )
    } else {
        format!(
            "a live run needs root (this is uid {euid}, not root): {why} To look without root: `mergetune run --once --dry-run`"
        )
    }
}

/// The config with the command line's overrides, logged, and the file it came from.
fn configure(args: &RunOptions) -> Result<(Config, Option<PathBuf>)> {
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
    use mergetune_kernel::blockfs::HostFacts as _;
    let source = mergetune_daemon::pricing::source(cfg);
    info!(
        "{}",
        source.summary(fs.kernel_release().as_deref(), cfg.pricing.floor())
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
        let p = crate::status::DevicePricing::of(
            worth,
            level,
            snap.pricing.name_of(worth),
            snap.pricing.floor,
        );
        info!(device = %d.name, "{}: pricing: {}", d.name, p.sentence());
    }
}

/// What a dry run by another user than root lacks that the live daemon (root, with the
/// unit's CAP_PERFMON and CAP_SYSLOG) has, and what that changes in the preview; None as
/// root. The bio tap's reason is the kernel layer's own (a tracing filesystem mounted mode
/// 0700 says "permission denied", not "not mounted").
fn preview_limits(cfg: &Config, fs: &RealFs, euid: u32) -> Option<String> {
    if euid == 0 {
        return None;
    }
    let mut lacks = Vec::new();
    if cfg.sense.enabled
        && let Err(e) = mergetune_kernel::biosense::check_available(&fs.tracefs_dir())
    {
        lacks.push(format!(
            "the bio tap ({e}): at L3 the preview counts the kernel's merges in its place"
        ));
    }
    if cfg.policy.cost_profile.trim() == mergetune_logic::pricing::profile::LIVE {
        lacks.push(
            "the merge-path sampler (perf_event_open of cpu-clock on every CPU needs root or CAP_PERFMON, and the kernel's symbol addresses CAP_SYSLOG): under cost_profile \"live\" no device gets a price here, so none steps down in this preview where the live daemon may".to_string(),
        );
    }
    if lacks.is_empty() {
        return None;
    }
    Some(format!(
        "dry run as uid {euid}, not root: this preview lacks what the live daemon has: {}. For the live daemon's view without a write: `sudo mergetune run --once`",
        lacks.join("; ")
    ))
}

/// The actuator: in a dry run over a memory store (nothing is written, not even the state
/// file); live over the state file, after putting back what a dead predecessor left.
fn actuator(args: &RunOptions, cfg: &Config, fs: &mut RealFs) -> Result<Actuator> {
    let store: Box<dyn StateStore> = if args.dry_run {
        dry_run_store(cfg, fs)
    } else {
        Box::new(live_store(args, cfg, fs)?)
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

/// A dry run's store: in memory. Says what a previous run left and what this preview lacks.
fn dry_run_store(cfg: &Config, fs: &RealFs) -> Box<dyn StateStore> {
    let stale = FileStore::new(&cfg.daemon.state_dir);
    if stale.path().exists() {
        warn!(
            "{} exists: a previous run did not restore its changes; dry-run leaves it (run `mergetune restore`)",
            stale.path().display()
        );
    }
    info!("dry-run: decisions are logged, nothing is written");
    if let Some(limits) = preview_limits(cfg, fs, rustix::process::geteuid().as_raw()) {
        warn!("{limits}");
    }
    Box::new(MemoryStore::default())
}

/// A live run's store: the state file, writable and locked, after the originals a dead
/// predecessor recorded (here or in the directory the pointer names) are put back.
fn live_store(args: &RunOptions, cfg: &Config, fs: &mut RealFs) -> Result<FileStore> {
    let runtime = args.host.runtime_dir();
    let mut store = FileStore::new(&cfg.daemon.state_dir);
    if let Some(rt) = &runtime {
        // One owner per device, whatever the state directories.
        store = store.with_claims(Claims::under(rt));
    }
    if let Err(e) = store.check_writable() {
        let euid = rustix::process::geteuid().as_raw();
        bail!("{}", cannot_record(&cfg.daemon.state_dir, &e, euid));
    }
    // One live daemon per state directory: a second would take the first's records for
    // originals, and `mergetune restore` tells a live daemon's records by this lock.
    store.lock().map_err(|e| match e {
        e @ StateError::Held { .. } => anyhow::Error::new(e)
            .context("not starting: the state directory belongs to another daemon"),
        e => anyhow::Error::new(e).context("not starting: cannot take the state directory's lock"),
    })?;
    let pointer = runtime.as_deref().map(StatePointer::new);
    if let Some(p) = &pointer {
        recover_pointed(p, &cfg.daemon.state_dir, fs)?;
    }
    // A state file left by a run that died holds the true originals: put them back
    // before anything else, so our own earlier writes are never taken as "original".
    let report = restore_from_store(fs, &mut store, unix_now_secs()).context(
        "cannot recover the original values from a previous run; inspect or remove the state file",
    )?;
    for r in &report.results {
        info!(device = %r.device, "recovery after an unclean exit: {r}");
    }
    for r in &report.rejected {
        warn!("{}: {r}", store.describe());
    }
    refuse_unless_restored(&report, &store)?;
    if let Some(p) = &pointer
        && let Err(e) = p.write(&cfg.daemon.state_dir)
    {
        warn!(
            "{e}: `mergetune restore` finds the originals only through daemon.state_dir ({})",
            cfg.daemon.state_dir.display()
        );
    }
    Ok(store)
}

/// Logs the records that could not be read and refuses to start while any original value
/// recorded in `store` is not back.
fn refuse_unless_restored(report: &RestoreReport, store: &FileStore) -> Result<()> {
    for s in report.stale_records() {
        error!("{}: {s}", store.describe());
    }
    if report.failed() || report.stale.is_some() {
        bail!(
            "could not restore every original value recorded in {}; not starting",
            store.describe()
        );
    }
    Ok(())
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
    let mut store = FileStore::new(&other).with_claims(Claims::under(pointer.runtime_dir()));
    // A daemon still running there owns those records: they are not a dead one's.
    match store.holder() {
        Ok(None) => {}
        Ok(Some(pid)) => {
            let held = StateError::Held {
                path: other.clone(),
                pid,
            };
            warn!(
                "{held}: the last daemon's state_dir (named by {}) is left to it",
                pointer.path().display()
            );
            return Ok(());
        }
        Err(e) => {
            warn!(
                "{e}: the last daemon's state_dir (named by {}) is not recovered from",
                pointer.path().display()
            );
            return Ok(());
        }
    }
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
    refuse_unless_restored(&report, &store)?;
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
fn endpoint(
    args: &RunOptions,
    cfg: &Config,
    metrics: &Arc<Metrics>,
) -> Result<Option<ServerHandle>> {
    let (listen, off_because) = match &args.metrics_listen {
        Some(l) => (l.clone(), "--metrics-listen \"\""),
        // `--once` looks at the machine next to a running service: no second endpoint.
        None if args.once => (
            String::new(),
            "--once: off unless --metrics-listen ADDR is given",
        ),
        None => (cfg.metrics.listen.clone(), "[metrics] listen = \"\""),
    };
    match crate::metrics::parse_listen(&listen) {
        Err(e) => bail!("--metrics-listen: {e}"),
        Ok(None) => {
            info!("metrics endpoint off ({off_because})");
            Ok(None)
        }
        Ok(Some(addr)) => {
            match crate::http::serve(addr, metrics.clone(), crate::http::Limits::default()) {
                Ok(h) => {
                    info!(
                        "metrics endpoint: http://{}/metrics and /status",
                        h.local_addr()
                    );
                    Ok(Some(h))
                }
                Err(e) => {
                    error!("metrics endpoint {e}; running without metrics");
                    Ok(None)
                }
            }
        }
    }
}

/// The signals, caught from the start of [`run`]: the events they became, and a sender to
/// put back an event taken early.
struct Signals {
    rx: mpsc::Receiver<Event>,
    tx: mpsc::Sender<Event>,
}

impl Signals {
    /// What arrived during the start, before the loop runs: a stop is returned (the loop
    /// then never ticks, and nothing has been written); a reload is put back for the loop,
    /// which reads the config again after its first tick.
    fn during_start(&self) -> Option<&'static str> {
        let mut reload = false;
        while let Ok(ev) = self.rx.try_recv() {
            match ev {
                Event::Stop(sig) => {
                    info!("{sig} during the start: stopping before the first tick");
                    return Some(sig);
                }
                Event::Reload => reload = true,
            }
        }
        if reload {
            info!("SIGHUP during the start: the config is read again after the first tick");
            let _ = self.tx.send(Event::Reload);
        }
        None
    }
}

/// SIGTERM and SIGINT stop, SIGHUP reloads: delivered to the loop as [`Event`]s. Installed
/// first, before the config, the lock, the recovery and the endpoint: until then a SIGHUP's
/// default action kills the process (exit 129) in the middle of its start.
fn signals() -> Result<Signals> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let (tx, rx) = mpsc::channel::<Event>();
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
        .context("cannot install signal handlers")?;
    let sender = tx.clone();
    std::thread::spawn(move || {
        for sig in signals.forever() {
            let ev = match sig {
                SIGHUP => Event::Reload,
                SIGINT => Event::Stop("SIGINT"),
                _ => Event::Stop("SIGTERM"),
            };
            if sender.send(ev).is_err() {
                break;
            }
        }
    });
    Ok(Signals { rx, tx })
}

/// SIGHUP's config: the same file read again, with the command line's overrides.
fn reread(cfg_path: Option<&Path>, args: &RunOptions) -> Reload {
    let Some(p) = cfg_path else {
        return Reload::NoFile;
    };
    let loaded = config::load_file(p)
        .map_err(anyhow::Error::from)
        .and_then(|mut c| apply_overrides(&mut c, args).map(|()| c));
    match loaded {
        Err(e) => Reload::Rejected(format!("{e:#}")),
        Ok(cfg) => Reload::Loaded {
            cfg: Box::new(cfg),
            from: p.to_path_buf(),
            listen_from_command_line: args.metrics_listen.is_some(),
        },
    }
}

/// Runs the daemon as `mergetune run` was asked to: assembles the service, ticks until a
/// signal (or one look's worth) and restores. An error: it could not start.
pub fn run(mut args: RunOptions) -> Result<Outcome> {
    let signals = signals()?;
    if args.once && !args.dry_run {
        info!(
            "--once writes nothing: it decides once, as the daemon would, and says what it would write (as --dry-run; as root it also has the bio tap and the merge-path sampler)"
        );
        args.dry_run = true;
    }
    let (cfg, cfg_path) = configure(&args)?;
    let mut fs = args.host.roots().fs();
    log_pricing(&cfg, &mut fs);
    let actuator = actuator(&args, &cfg, &mut fs)?;
    let metrics = Arc::new(Metrics::new());
    let exporter = endpoint(&args, &cfg, &metrics)?.map(|server| {
        Box::new(Endpoint {
            metrics,
            server: Some(server),
        }) as Box<dyn Exporter>
    });
    let recorder = match &args.record {
        Some(p) => {
            info!("recording every tick to {}", p.display());
            Some(mergetune_daemon::record::Recorder::create(p)?)
        }
        None => None,
    };
    let mut once = args.once.then(|| Once::new(&cfg));
    let pointer = (!args.dry_run)
        .then(|| args.host.runtime_dir())
        .flatten()
        .map(StatePointer::new);
    let mut daemon = Daemon::new(cfg, actuator);
    daemon.check_sampler(0, &mut fs);
    let mut lp = TickLoop::new(
        daemon,
        fs,
        exporter,
        Box::new(Notifier::from_env()),
        recorder,
        pointer,
    )
    .after_first_tick(log_device_pricing);
    let observer = once.as_mut().map(|o| o as &mut dyn TickObserver);
    let stop_reason = match signals.during_start() {
        Some(sig) => sig,
        None => lp.run(&signals.rx, observer, &mut || {
            reread(cfg_path.as_deref(), &args)
        }),
    };
    if let Some(o) = once {
        o.print(lp.daemon(), lp.now_ms(), args.json)?;
    }
    let stopped = lp.stop(stop_reason);
    Ok(if stopped.restore_failed {
        Outcome::RestoreFailed
    } else {
        Outcome::Restored
    })
}
