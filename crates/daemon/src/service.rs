//! The live loop: ticks on a wall-clock schedule, a reload or a stop when a signal says so,
//! and at the stop every original value put back. The command line builds the pieces and
//! calls [`TickLoop::run`]; what the loop reports to goes through two small seams, so that
//! this crate needs neither the exporters nor systemd: an [`Exporter`] (the metrics and
//! `/status`, `mergetune_export::endpoint::Endpoint`) and a [`ServiceManager`] (sd_notify,
//! `mergetune_export::logging::Notifier`). Signals arrive as [`Event`]s on a channel, so
//! the loop never installs a handler itself.

use crate::adaptive::Daemon;
use crate::record::{Recorder, RecordingFs};
use crate::snapshot::TickTiming;
use crate::state::{FileStore, StatePointer};
use mergetune_kernel::blockfs::RealFs;
use mergetune_logic::config::Config;
use mergetune_logic::decision::{Applied, Decision, Level};
use std::io;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tracing::{error, info, warn};

/// Where each tick's results go: the metrics and `/status`.
pub trait Exporter {
    /// Everything, from the daemon's snapshot: at the interval, and at a tick that decided.
    fn refresh(&self, daemon: &Daemon, decisions: &[Decision], timing: TickTiming);
    /// Only the tick's timing (an L3 watch tick between two refreshes).
    fn observe_tick(&self, timing: TickTiming);
    /// A reload was taken (`true`) or refused.
    fn config_reload(&self, ok: bool);
    /// Closes the endpoint and its connections, at the stop: the restore may need the
    /// descriptors they hold.
    fn shutdown(&mut self);
}

/// The service manager's notifications (systemd's sd_notify protocol). Each returns
/// whether a notification was sent (none without `NOTIFY_SOCKET`).
pub trait ServiceManager {
    /// Half of this, at least, between two watchdog pings (`WATCHDOG_USEC`).
    fn watchdog_timeout(&self) -> Option<Duration>;
    fn ready(&self, status: &str) -> io::Result<bool>;
    fn status(&self, status: &str) -> io::Result<bool>;
    fn watchdog(&self) -> io::Result<bool>;
    fn stopping(&self, status: &str) -> io::Result<bool>;
}

/// What the loop is told, by the signal thread of the command line.
pub enum Event {
    /// Stop, and why (the signal's name).
    Stop(&'static str),
    /// Reload the config (SIGHUP).
    Reload,
}

/// A reload's new config, as the command line read it.
pub enum Reload {
    /// Running on built-in defaults: there is no file to read again.
    NoFile,
    /// The file, or the command line's overrides on it, did not validate: the old config
    /// stays, and this says why.
    Rejected(String),
    Loaded {
        cfg: Box<Config>,
        from: PathBuf,
        /// `--metrics-listen` was given: the config's `[metrics] listen` is not the one
        /// in use, so its change is not worth a warning.
        listen_from_command_line: bool,
    },
}

/// What `--once` (or any other watcher) is told around each tick.
pub trait TickObserver {
    fn before_tick(&mut self);
    /// Returns `true` to stop the loop after this tick.
    fn after_tick(&mut self, at_ms: u64, decisions: Vec<Decision>, daemon: &Daemon) -> bool;
}

/// How the loop ended.
pub struct Stopped {
    /// The daemon's time at the stop.
    pub at_ms: u64,
    /// Some original could not be restored (the state file keeps it for `mergetune restore`),
    /// or the state file could not be brought up to date (it names values put back).
    pub restore_failed: bool,
}

/// The daemon and everything around it that keeps time.
pub struct TickLoop {
    daemon: Daemon,
    fs: RealFs,
    exporter: Option<Box<dyn Exporter>>,
    manager: Box<dyn ServiceManager>,
    /// Pings at half the watchdog timeout at least, whatever the tick interval.
    watchdog_every: Option<Duration>,
    last_ping: Instant,
    last_status: String,
    worst_lag: Duration,
    recorder: Option<Recorder>,
    start: Instant,
    next_tick: Duration,
    /// The scheduled time of the tick that last refreshed the metrics.
    metrics_refreshed_ms: Option<u64>,
    /// Where this run's pointer to its state directory lives (live runs on the machine).
    pointer: Option<StatePointer>,
    /// Called once, after the first tick (devices found and priced): the command line's
    /// pricing log, which words a device's worth as `/status` does.
    after_first_tick: Option<fn(&Daemon)>,
}

impl TickLoop {
    /// The loop over `daemon`, starting now. `exporter` is `None` when the endpoint is off
    /// (then no tick spends time on metrics); `pointer` names the state directory for
    /// `mergetune restore`, and is cleared at a stop that left nothing to restore.
    pub fn new(
        daemon: Daemon,
        fs: RealFs,
        exporter: Option<Box<dyn Exporter>>,
        manager: Box<dyn ServiceManager>,
        recorder: Option<Recorder>,
        pointer: Option<StatePointer>,
    ) -> Self {
        let watchdog_every = manager.watchdog_timeout().map(|t| t / 2);
        TickLoop {
            daemon,
            fs,
            exporter,
            manager,
            watchdog_every,
            last_ping: Instant::now(),
            last_status: String::new(),
            worst_lag: Duration::ZERO,
            recorder,
            start: Instant::now(),
            next_tick: Duration::ZERO,
            metrics_refreshed_ms: None,
            pointer,
            after_first_tick: None,
        }
    }

    /// `f` is called once, after the first tick.
    pub fn after_first_tick(mut self, f: fn(&Daemon)) -> Self {
        self.after_first_tick = Some(f);
        self
    }

    pub fn daemon(&self) -> &Daemon {
        &self.daemon
    }

    /// ms since the loop started: the daemon's clock.
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Ticks when due and waits for the next tick, a watchdog ping or an event, until a
    /// stop: a signal, `observer` (`--once`), or the signal thread gone. `reload` reads
    /// the config again at a SIGHUP. Returns why it stopped; the caller then calls
    /// [`TickLoop::stop`].
    pub fn run(
        &mut self,
        events: &mpsc::Receiver<Event>,
        mut observer: Option<&mut dyn TickObserver>,
        reload: &mut dyn FnMut() -> Reload,
    ) -> &'static str {
        loop {
            if self.due() {
                if let Some(o) = observer.as_deref_mut() {
                    o.before_tick();
                }
                let (at, decisions) = self.tick();
                if let Some(o) = observer.as_deref_mut()
                    && o.after_tick(at, decisions, &self.daemon)
                {
                    return "--once";
                }
            }
            let wait = self.wait();
            match events.recv_timeout(wait) {
                Ok(Event::Stop(sig)) => return sig,
                Ok(Event::Reload) => self.reload(reload()),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return "signal thread ended",
            }
        }
    }

    /// Whether the next tick is due.
    fn due(&self) -> bool {
        self.start.elapsed() >= self.next_tick
    }

    /// One tick: sample, decide, apply, export, tell the service manager. Returns the
    /// tick's time and its decisions.
    fn tick(&mut self) -> (u64, Vec<Decision>) {
        let lag = self.start.elapsed().saturating_sub(self.next_tick);
        self.worst_lag = self.worst_lag.max(lag);
        let tick_at = self.now_ms();
        let tick_start = Instant::now();
        let decisions = self.tick_daemon(tick_at);
        let timing = TickTiming {
            now_ms: tick_at,
            duration_seconds: tick_start.elapsed().as_secs_f64(),
            lag_seconds: lag.as_secs_f64(),
        };
        self.export(&decisions, timing);
        self.notify_after_tick();
        let interval = Duration::from_millis(self.daemon.next_tick_in_ms());
        self.next_tick += interval;
        // After a stall (suspend, a slow sysfs), skip missed ticks rather than burst.
        if self.next_tick < self.start.elapsed() {
            self.next_tick = self.start.elapsed() + interval;
        }
        (tick_at, decisions)
    }

    /// The daemon's tick, through the recorder when `--record` asked for one.
    fn tick_daemon(&mut self, tick_at: u64) -> Vec<Decision> {
        let Some(rec) = self.recorder.as_mut() else {
            return self.daemon.tick(tick_at, &mut self.fs);
        };
        let mut rfs = RecordingFs::new(&mut self.fs, tick_at);
        let decisions = self.daemon.tick(tick_at, &mut rfs);
        if let Err(e) = rec.write_tick(rfs.finish(), self.daemon.config()) {
            error!("{e}; recording stopped");
            self.recorder = None;
        }
        decisions
    }

    fn export(&mut self, decisions: &[Decision], timing: TickTiming) {
        let Some(exporter) = self.exporter.as_ref() else {
            return;
        };
        let scheduled_ms = self.next_tick.as_millis() as u64;
        let interval_ms = self.daemon.config().daemon.interval_ms;
        if metrics_refresh_due(
            self.metrics_refreshed_ms,
            scheduled_ms,
            interval_ms,
            !decisions.is_empty(),
        ) {
            exporter.refresh(&self.daemon, decisions, timing);
            self.metrics_refreshed_ms = Some(scheduled_ms);
        } else {
            exporter.observe_tick(timing);
        }
    }

    /// READY=1 after the first tick, STATUS= when the summary changes, and the watchdog.
    fn notify_after_tick(&mut self) {
        let status = status_line(&self.daemon);
        if self.daemon.counters.ticks == 1 {
            if let Some(first) = self.after_first_tick {
                first(&self.daemon);
            }
            if let Err(e) = self.manager.ready(&status) {
                warn!("sd_notify READY=1: {e}");
            }
            self.last_status = status;
        } else if status != self.last_status {
            let _ = self.manager.status(&status);
            self.last_status = status;
        }
        // A tick proves the loop alive; at the L3 watch's ten ticks a second, a ping at
        // every tick would be ten datagrams a second for nothing.
        if self
            .watchdog_every
            .is_some_and(|every| self.last_ping.elapsed() >= every / 2)
        {
            let _ = self.manager.watchdog();
            self.last_ping = Instant::now();
        }
    }

    /// How long to wait for a signal before the next tick (or watchdog ping) is due; pings
    /// the watchdog when a tick interval is longer than it allows.
    fn wait(&mut self) -> Duration {
        let mut wait = self.next_tick.saturating_sub(self.start.elapsed());
        if let Some(every) = self.watchdog_every {
            if self.last_ping.elapsed() >= every {
                let _ = self.manager.watchdog();
                self.last_ping = Instant::now();
            }
            wait = wait.min(every.saturating_sub(self.last_ping.elapsed()));
        }
        wait
    }

    /// SIGHUP: the new config, or the old one kept with the reason.
    fn reload(&mut self, reload: Reload) {
        let (new_cfg, from, listen_from_command_line) = match reload {
            Reload::NoFile => {
                warn!("SIGHUP: running on built-in defaults, no config file to reload");
                return;
            }
            Reload::Rejected(e) => {
                self.config_reload(false);
                error!("SIGHUP: new config rejected, keeping the old one: {e}");
                return;
            }
            Reload::Loaded {
                cfg,
                from,
                listen_from_command_line,
            } => (cfg, from, listen_from_command_line),
        };
        let summary = new_cfg.summary();
        // Which tuners run is not in the summary: a reload that turns one on or off says so
        // in the start's own words.
        let tuners_now = new_cfg.tuners();
        let tuners_changed = tuners_now != self.daemon.config().tuners();
        let pricing_changed = new_cfg.policy.cost_profile
            != self.daemon.config().policy.cost_profile
            || new_cfg.pricing != self.daemon.config().pricing;
        let listen_changed = (new_cfg.metrics != self.daemon.config().metrics
            && !listen_from_command_line)
            .then(|| new_cfg.metrics.listen.clone());
        match self.daemon.try_reload(*new_cfg) {
            Err(e) => {
                self.config_reload(false);
                error!(
                    "SIGHUP: new config from {} rejected, keeping the old one: {e}",
                    from.display()
                );
            }
            Ok(()) => {
                info!("SIGHUP: config reloaded from {}: {summary}", from.display());
                if tuners_changed {
                    info!("SIGHUP: {tuners_now}");
                }
                if pricing_changed {
                    // The same line as at start (mergetune_export::entry), for what prices now.
                    use mergetune_kernel::blockfs::HostFacts as _;
                    let cfg = self.daemon.config();
                    info!(
                        "SIGHUP: {}",
                        crate::pricing::source(cfg)
                            .summary(self.fs.kernel_release().as_deref(), cfg.pricing.floor())
                    );
                }
                if let Some(listen) = listen_changed {
                    warn!(
                        "SIGHUP: [metrics] listen changed to {listen:?}: takes effect at the next restart"
                    );
                }
                self.config_reload(true);
            }
        }
    }

    fn config_reload(&self, ok: bool) {
        if let Some(e) = &self.exporter {
            e.config_reload(ok);
        }
    }

    /// The stop: every original value restored (a dry run wrote none). The endpoint goes
    /// first: its connections are descriptors the restore may need.
    pub fn stop(mut self, why: &str) -> Stopped {
        if let Some(mut exporter) = self.exporter.take() {
            exporter.shutdown();
        }
        if self.worst_lag > Duration::from_millis(100) {
            info!("worst tick lag this run: {} ms", self.worst_lag.as_millis());
        }
        let at_ms = self.now_ms();
        if self.daemon.actuator().dry_run() {
            let _ = self
                .manager
                .stopping(&format!("stopping ({why}): dry run, nothing was written"));
            info!("stopping ({why}): dry run, nothing was written, nothing to restore");
            return Stopped {
                at_ms,
                restore_failed: false,
            };
        }
        let _ = self
            .manager
            .stopping(&format!("stopping ({why}): restoring original values"));
        info!("stopping ({why}): restoring original values");
        let restored = self.daemon.restore_all(at_ms, &mut self.fs);
        let failed = restored
            .iter()
            .filter(|d| matches!(d.applied, Applied::Failed(_)))
            .count();
        let restored_count = restored.iter().filter(|d| d.was_applied()).count();
        let stale = self
            .daemon
            .actuator()
            .unpersisted_because()
            .map(str::to_string);
        match &stale {
            None => info!("stopped; {restored_count} value(s) restored"),
            // The file names values this stop has put back: a later `mergetune restore`
            // would take an operator's value that equals one of them for mergetune's.
            Some(e) => error!(
                "stopped; {restored_count} value(s) restored, but the records could not be cleared: {e}. {} still names values that are no longer mergetune's: remove it before anyone runs `mergetune restore`",
                self.daemon.actuator().store_name()
            ),
        }
        // Nothing left to restore: the pointer to this run's state directory goes too.
        let state_dir = &self.daemon.config().daemon.state_dir;
        if let Some(p) = &self.pointer
            && !FileStore::new(state_dir).path().exists()
        {
            let _ = p.clear_if(state_dir);
        }
        Stopped {
            at_ms,
            restore_failed: failed > 0 || stale.is_some(),
        }
    }
}

/// The one-line summary for systemd's STATUS= (`systemctl status mergetune`).
fn status_line(daemon: &Daemon) -> String {
    let devs = daemon.devices();
    let managed = devs.values().filter(|d| d.management.is_managed()).count();
    let reduced = devs
        .values()
        .filter(|d| d.management.is_managed() && d.policy.level() > Level::L0)
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
