//! `mergetune run --once`: one look at the machine that answers "what would it do?".
//!
//! A decision needs windows: the first step down the merge ladder is taken after
//! `step_down_after_windows` consecutive low windows of `window_ticks * interval_ms` each
//! (3 x 2 s by default). So the look samples that long (from the first tick, which only
//! takes the baseline, to the tick that closes the last window: about 6 s by default), with a progress line on a terminal, then prints the device table
//! and every decision taken, or, in a dry run, that it would take. A device that holds says
//! why in the table's last column (idle, merging pays, between the thresholds, ...).
//! Going on past the first decision would show steps a dry run cannot reach faithfully on a
//! first look (each step changes what the counters show), so the look ends there. A look
//! writes nothing, with or without `--dry-run` ([`super`]).

use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::snapshot::TickTiming;
use mergetune_logic::config::Config;
use mergetune_logic::decision::Decision;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};

/// The state of a one-shot look.
pub struct Once {
    /// How long to sample, from the first tick, in ms.
    span_ms: u64,
    windows: u32,
    window_ms: u64,
    first_tick_ms: Option<u64>,
    last_tick_ms: u64,
    ticks: u64,
    decisions: Vec<Decision>,
    /// Windows closed per managed device since the first tick.
    closed: BTreeMap<String, u32>,
    progress: bool,
    shown: bool,
}

/// How long one decision needs: `step_down_after_windows` windows.
pub fn span_ms(cfg: &Config) -> u64 {
    cfg.window_ms() * u64::from(cfg.policy.step_down_after_windows.max(1))
}

/// `40 ms`, `2.0 s`.
fn secs(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

impl Once {
    pub fn new(cfg: &Config) -> Once {
        Once {
            span_ms: span_ms(cfg),
            windows: cfg.policy.step_down_after_windows.max(1),
            window_ms: cfg.window_ms(),
            first_tick_ms: None,
            last_tick_ms: 0,
            ticks: 0,
            decisions: Vec::new(),
            closed: BTreeMap::new(),
            progress: std::io::stderr().is_terminal(),
            shown: false,
        }
    }

    /// Clears the progress line so the tick's log lines start at the left margin.
    pub fn before_tick(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            self.shown = false;
        }
    }

    /// Notes a tick; true when the look has sampled long enough: until every managed
    /// device has closed `step_down_after_windows` windows (a late tick moves the next
    /// window's start with it, so time alone is not enough), then stops at that tick, so
    /// the table says what the last window decided, never "window still open". At most
    /// three times [`span_ms`] (windows always close on time; this is a backstop).
    pub fn after_tick(&mut self, at_ms: u64, decisions: Vec<Decision>, daemon: &Daemon) -> bool {
        let first = *self.first_tick_ms.get_or_insert(at_ms);
        self.last_tick_ms = at_ms;
        self.ticks += 1;
        self.decisions.extend(decisions);
        let sampled = at_ms - first;
        let mut all_closed = true;
        for (name, d) in daemon.devices() {
            if !d.management.is_managed() {
                continue;
            }
            let n = self.closed.entry(name.clone()).or_insert(0);
            if d.last_window_ms == at_ms && sampled > 0 {
                *n += 1;
            }
            all_closed &= *n >= self.windows;
        }
        let done = (all_closed && self.ticks >= 2) || sampled >= 3 * self.span_ms;
        if self.progress && !done {
            let _ = write!(
                std::io::stderr(),
                "\rsampling {} of {} ({} of {}: one decision's worth)",
                secs(sampled),
                secs(self.span_ms),
                mergetune_logic::decision::count(self.windows.into(), "window"),
                secs(self.window_ms)
            );
            let _ = std::io::stderr().flush();
            self.shown = true;
        }
        done
    }

    fn sampled_ms(&self) -> u64 {
        self.last_tick_ms - self.first_tick_ms.unwrap_or(self.last_tick_ms)
    }

    /// Prints the device table and the decisions (or one JSON document).
    pub fn print(mut self, daemon: &Daemon, now_ms: u64, json: bool) -> anyhow::Result<()> {
        self.before_tick();
        let status = crate::status::StatusSnapshot::of(
            &daemon.snapshot(),
            TickTiming {
                now_ms,
                duration_seconds: 0.0,
                lag_seconds: 0.0,
            },
            0.0,
        );
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    // A look never writes (the entry's `//!`).
                    "dry_run": true,
                    "ticks": self.ticks,
                    "span_ms": self.sampled_ms(),
                    "decisions": self.decisions,
                    "devices": status.devices,
                }))?
            );
            return Ok(());
        }
        print!("{}", crate::table::render(&status.devices));
        println!("{}", self.summary(&status.devices));
        for d in &self.decisions {
            println!("  {d}");
        }
        Ok(())
    }

    /// The line under the table: how long it looked, and what it did or would do.
    fn summary(&self, devices: &[crate::status::DeviceStatus]) -> String {
        let managed = devices.iter().filter(|d| d.management.is_managed()).count();
        let looked = format!(
            "sampled {} ({} of {})",
            secs(self.sampled_ms()),
            mergetune_logic::decision::count(self.windows.into(), "window"),
            secs(self.window_ms)
        );
        match self.decisions.len() {
            0 => format!(
                "{looked}: no decision: {managed} managed device(s) hold (why: last column)"
            ),
            n => {
                format!("{looked}: {n} decision(s) it would take (dry run: nothing was written):")
            }
        }
    }
}

impl mergetune_daemon::service::TickObserver for Once {
    fn before_tick(&mut self) {
        Once::before_tick(self);
    }
    fn after_tick(&mut self, at_ms: u64, decisions: Vec<Decision>, daemon: &Daemon) -> bool {
        Once::after_tick(self, at_ms, decisions, daemon)
    }
}
