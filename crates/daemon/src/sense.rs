//! When the bio tap is open, and what its samples become: the daemon's side of sensing at
//! L3 (the tap itself is the kernel layer's, crates/kernel/src/biosense.rs; the counting is pure,
//! crates/logic/src/sense.rs).
//!
//! [`DutyCycle`] is pure: given `now_ms` and whether the device is at L3, it says open,
//! drain, close or nothing. The tap is open only at L3, for `open_ms`, then shut for as long
//! as keeps the duty cycle at `open_ms / every_ms` even when the tick that closes it comes
//! late (the off time scales with the time it was really open). [`DeviceSense`] carries it
//! out on one device through its [`BioTap`] at each tick: every tick while open it drains the
//! tap into a [`Mergeable`] (so the kernel ring buffer never has to hold a whole sample),
//! and when the sample ends it keeps the [`Sensed`] for the next closed window. Between
//! samples the tap is paused, not closed (`BioTap::tap_pause`: on the real kernel the
//! tracefs instance stays, its event off), and it is closed when the device leaves L3. A tap that
//! cannot open (no tracefs, read-only under a unit without access) marks the device blind
//! (`Caps.sense_at_l3 = false`) and is tried again after `retry_after_secs`.

use mergetune_kernel::biosense::{TapBatch, TapError, TapEvent, TapParams};
use mergetune_kernel::blockfs::BioTap;
use mergetune_logic::sampler::Sensed;
use mergetune_logic::sense::{Mergeable, SenseConfig, mergeable_percent};
use tracing::{debug, info, warn};

/// What the tap of a device should do at this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapStep {
    /// Closed, and stays closed.
    Idle,
    /// Open it now.
    Open,
    /// It is open: drain it, keep it open.
    Drain,
    /// The sample is complete after `sampled_ms`: drain, close, report.
    Close { sampled_ms: u64 },
    /// The device left L3 while the tap was open: close and forget the partial sample.
    Abort,
}

/// The duty cycle of one device's tap. Plain data, time passed in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DutyCycle {
    open_since_ms: Option<u64>,
    next_open_ms: u64,
    /// When the last sample asked for out of turn was granted ([`DutyCycle::ask`]).
    asked_at_ms: Option<u64>,
    /// The next opening is an asked one.
    ask_pending: bool,
    /// The open sample was asked for: it ends as soon as it is whole.
    open_was_asked: bool,
}

impl DutyCycle {
    pub fn is_open(&self) -> bool {
        self.open_since_ms.is_some()
    }

    pub fn step(&mut self, now_ms: u64, at_l3: bool, cfg: &SenseConfig) -> TapStep {
        match self.open_since_ms {
            Some(_) if !at_l3 => {
                self.open_since_ms = None;
                TapStep::Abort
            }
            Some(t0) => {
                let open = now_ms.saturating_sub(t0);
                if open < cfg.open_ms {
                    return TapStep::Drain;
                }
                TapStep::Close {
                    sampled_ms: self.close(now_ms, cfg),
                }
            }
            None if at_l3 && now_ms >= self.next_open_ms => {
                self.open_since_ms = Some(now_ms);
                self.open_was_asked = std::mem::take(&mut self.ask_pending);
                TapStep::Open
            }
            None => TapStep::Idle,
        }
    }

    /// Ends the sample now: how long it was open. Off for (every - open) / open of the
    /// time it was open, so that the duty cycle is open_ms / every_ms however late or early
    /// it closes.
    fn close(&mut self, now_ms: u64, cfg: &SenseConfig) -> u64 {
        let open = self
            .open_since_ms
            .take()
            .map_or(0, |t0| now_ms.saturating_sub(t0));
        let off =
            open.saturating_mul(cfg.every_ms.saturating_sub(cfg.open_ms)) / cfg.open_ms.max(1);
        self.next_open_ms = now_ms.saturating_add(off);
        open
    }

    /// A sample asked for out of turn: due now, however long the tap was shut, at most once
    /// per `every_ms` (a second ask within it waits for the schedule), so that the tap is
    /// open at most twice its duty cycle however often the policy asks. An asked sample
    /// also ends as soon as it holds a whole sample's bios ([`DeviceSense::tick`]), and the
    /// time it was open buys its own time shut.
    ///
    /// A sample already open when asked began before what it is asked about: it starts
    /// again from now. Returns whether the ask was granted.
    pub fn ask(&mut self, now_ms: u64, cfg: &SenseConfig) -> bool {
        let granted = self
            .asked_at_ms
            .is_none_or(|t| now_ms >= t.saturating_add(cfg.every_ms));
        if !granted {
            return false;
        }
        self.asked_at_ms = Some(now_ms);
        if self.is_open() {
            self.open_since_ms = Some(now_ms);
            self.open_was_asked = true;
        } else {
            self.ask_pending = true;
            self.next_open_ms = self.next_open_ms.min(now_ms);
        }
        true
    }

    /// The open sample was asked for out of turn.
    pub fn open_was_asked(&self) -> bool {
        self.is_open() && self.open_was_asked
    }

    /// The tap failed or was closed from outside: closed, next open per the schedule.
    pub fn reset(&mut self) {
        self.open_since_ms = None;
    }
}

/// Whether the tap works on a device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Availability {
    /// Not checked yet.
    #[default]
    Unknown,
    Usable,
    /// It failed at `at_ms`; tried again `retry_after_secs` later.
    Failed {
        at_ms: u64,
        error: TapError,
    },
}

/// The sensing of one device: its duty cycle, the sample being counted, the last result.
#[derive(Debug, Clone)]
pub struct DeviceSense {
    pub duty: DutyCycle,
    pub availability: Availability,
    acc: Mergeable,
    acc_capacity: usize,
    /// Requests made taken into the current sample (capped at `max_sample_bios`).
    taken: usize,
    buf: Vec<TapEvent>,
    /// Events the kernel ring buffer overwrote or the cap dropped in the current sample.
    pub lost: u64,
    /// The tap is paused between two samples (kept for the next one; closed off L3).
    parked: bool,
    /// The last complete sample, not yet given to a window.
    pending: Option<Sensed>,
    /// The last complete sample (for the operator).
    pub last: Option<Sensed>,
    pub samples: u64,
    pub failures: u64,
}

impl Default for DeviceSense {
    fn default() -> Self {
        DeviceSense {
            duty: DutyCycle::default(),
            availability: Availability::Unknown,
            acc: Mergeable::new(mergetune_logic::sense::SenseConfig::DEFAULT.pending_requests),
            acc_capacity: mergetune_logic::sense::SenseConfig::DEFAULT.pending_requests,
            taken: 0,
            buf: Vec::new(),
            lost: 0,
            parked: false,
            pending: None,
            last: None,
            samples: 0,
            failures: 0,
        }
    }
}

impl DeviceSense {
    /// Whether L3 can be watched on this device: `Caps.sense_at_l3`.
    pub fn usable(&self, cfg: &SenseConfig) -> bool {
        cfg.enabled && self.availability == Availability::Usable
    }

    /// A complete sample waits for the next window.
    pub fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// The sample completed since the last call, if any, for the window that closes now.
    pub fn take_sample(&mut self) -> Option<Sensed> {
        self.pending.take()
    }

    fn fail(&mut self, dev: &str, now_ms: u64, error: TapError, fs: &mut dyn BioTap) {
        self.failures += 1;
        if self.duty.is_open() || self.parked {
            let _ = fs.tap_close(dev);
            self.parked = false;
        }
        match &self.availability {
            Availability::Usable => {
                warn!(device = %dev, "{dev}: the bio tap failed, L3 is blind here until it works again: {error}")
            }
            Availability::Unknown => {
                info!(device = %dev, "{dev}: no bio tap, L3 would be blind here: {error}")
            }
            Availability::Failed { .. } => {}
        }
        self.availability = Availability::Failed {
            at_ms: now_ms,
            error,
        };
        self.duty.reset();
        self.forget();
    }

    fn forget(&mut self) {
        self.acc.clear();
        self.taken = 0;
        self.lost = 0;
        self.buf.clear();
    }

    /// Closes an open tap (device no longer managed, sensing turned off, exit).
    pub fn stop(&mut self, dev: &str, fs: &mut dyn BioTap) {
        if self.duty.is_open() || self.parked {
            self.duty.reset();
            self.parked = false;
            let _ = fs.tap_close(dev);
        }
        self.forget();
        self.pending = None;
    }

    /// One tick: checks availability when due, then opens, drains or closes the tap as the
    /// duty cycle says. `threshold` (the policy's `enable_above_percent`) only
    /// chooses what is logged: a sample crossing it, either way, is told at info level.
    pub fn tick(
        &mut self,
        dev: &str,
        now_ms: u64,
        at_l3: bool,
        cfg: &SenseConfig,
        threshold: f64,
        fs: &mut dyn BioTap,
    ) {
        if !cfg.enabled {
            self.stop(dev, fs);
            return;
        }
        if !self.check_availability(dev, now_ms, cfg, fs) {
            return;
        }
        if !at_l3 {
            self.pending = None;
            if self.parked {
                self.parked = false;
                let _ = fs.tap_close(dev);
            }
        }
        match self.duty.step(now_ms, at_l3, cfg) {
            TapStep::Idle => {}
            TapStep::Open => {
                if self.acc_capacity != cfg.pending_requests {
                    self.acc = Mergeable::new(cfg.pending_requests);
                    self.acc_capacity = cfg.pending_requests;
                }
                self.forget();
                let params = TapParams::new(cfg.buffer_kb);
                self.parked = false;
                if let Err(e) = fs.tap_open(dev, &params) {
                    self.fail(dev, now_ms, e, fs);
                }
            }
            TapStep::Drain => {
                if let Err(e) = self.drain(dev, cfg, fs) {
                    self.fail(dev, now_ms, e, fs);
                } else if self.duty.open_was_asked() && self.taken >= cfg.max_sample_bios {
                    // An asked sample is whole: its answer is for this tick's window.
                    let sampled_ms = self.duty.close(now_ms, cfg);
                    self.finish_sample(dev, now_ms, sampled_ms, cfg, threshold, fs);
                }
            }
            TapStep::Close { sampled_ms } => match self.drain(dev, cfg, fs) {
                Ok(()) => self.finish_sample(dev, now_ms, sampled_ms, cfg, threshold, fs),
                Err(e) => self.fail(dev, now_ms, e, fs),
            },
            TapStep::Abort => {
                let _ = fs.tap_close(dev);
                self.forget();
            }
        }
    }

    /// Takes a sample now, out of turn, where the policy waits for one
    /// ([`mergetune_logic::policy::Reason::asks_the_tap`]) and the duty cycle grants it
    /// ([`DutyCycle::ask`]): the tap opens at once, and the sample answers the next window
    /// that holds a whole one.
    pub fn ask(
        &mut self,
        dev: &str,
        now_ms: u64,
        cfg: &SenseConfig,
        threshold: f64,
        fs: &mut dyn BioTap,
    ) {
        let was_open = self.duty.is_open();
        if !self.usable(cfg) || !self.duty.ask(now_ms, cfg) {
            return;
        }
        if !was_open {
            self.tick(dev, now_ms, true, cfg, threshold, fs);
            return;
        }
        // What the open sample holds is from before: drained and forgotten.
        match self.drain(dev, cfg, fs) {
            Ok(()) => self.forget(),
            Err(e) => self.fail(dev, now_ms, e, fs),
        }
    }

    /// Whether the tap can be used now: checked when nothing is known yet, and again
    /// `retry_after_secs` after a failure (said once when it works again).
    fn check_availability(
        &mut self,
        dev: &str,
        now_ms: u64,
        cfg: &SenseConfig,
        fs: &mut dyn BioTap,
    ) -> bool {
        let due = match &self.availability {
            Availability::Unknown => true,
            Availability::Usable => false,
            Availability::Failed { at_ms, .. } => {
                now_ms >= at_ms.saturating_add(cfg.retry_after_secs.saturating_mul(1000))
            }
        };
        if due {
            match fs.tap_available(dev) {
                Ok(()) => {
                    if self.availability != Availability::Unknown {
                        info!(device = %dev, "{dev}: the bio tap works again: L3 is watched");
                    }
                    self.availability = Availability::Usable;
                }
                Err(e) => {
                    self.fail(dev, now_ms, e, fs);
                    return false;
                }
            }
        }
        self.availability == Availability::Usable
    }

    /// The end of a sampling span, drained: the tap paused (parked for the next span), the
    /// sample kept for the policy when it holds enough bios, and logged at info level when
    /// it crosses `threshold`, either way.
    fn finish_sample(
        &mut self,
        dev: &str,
        now_ms: u64,
        sampled_ms: u64,
        cfg: &SenseConfig,
        threshold: f64,
        fs: &mut dyn BioTap,
    ) {
        let paused = fs.tap_pause(dev);
        self.parked = paused.is_ok();
        if let Err(e) = paused {
            self.fail(dev, now_ms, e, fs);
            return;
        }
        let s = self.acc.sensed(sampled_ms);
        let high = |x: &Sensed| mergeable_percent(x) >= threshold;
        let pct = mergeable_percent(&s);
        if s.bios >= cfg.min_sample_bios && self.last.is_none_or(|l| high(&l) != high(&s)) {
            info!(device = %dev, "{dev}: at L3 the bio tap saw {pct:.1}% mergeable bios ({} of {} in {sampled_ms} ms, {} front, {} lost): {}", s.mergeable, s.bios, s.front_mergeable, self.lost,
                    if high(&s) { "mergeable I/O" } else { "nothing to merge" });
        } else {
            debug!(device = %dev, "{dev}: bio tap sample: {pct:.1}% mergeable ({} of {} in {sampled_ms} ms, {} front, {} lost)", s.mergeable, s.bios, s.front_mergeable, self.lost);
        }
        self.samples += 1;
        self.last = Some(s);
        self.pending = (s.bios >= cfg.min_sample_bios).then_some(s);
        self.forget();
    }

    fn drain(&mut self, dev: &str, cfg: &SenseConfig, fs: &mut dyn BioTap) -> Result<(), TapError> {
        self.buf.clear();
        let room = cfg.max_sample_bios.saturating_sub(self.taken);
        let d = fs.tap_drain(dev, TapBatch::new(&mut self.buf, room))?;
        self.lost += d.lost + d.dropped;
        self.taken += self.buf.iter().filter(|e| e.counts_as_bio()).count();
        self.acc.extend(&self.buf);
        self.buf.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mergetune_kernel::biosense::TapDrain;

    fn cfg() -> SenseConfig {
        SenseConfig::default()
    }

    /// Steps a duty cycle every `tick_ms` for `until_ms` at L3; returns the open and close
    /// times.
    fn run(tick_ms: u64, until_ms: u64) -> (Vec<u64>, Vec<(u64, u64)>) {
        let mut d = DutyCycle::default();
        let (mut opens, mut closes) = (Vec::new(), Vec::new());
        let mut t = 0;
        while t <= until_ms {
            match d.step(t, true, &cfg()) {
                TapStep::Open => opens.push(t),
                TapStep::Close { sampled_ms } => closes.push((t, sampled_ms)),
                _ => {}
            }
            t += tick_ms;
        }
        (opens, closes)
    }

    #[test]
    fn at_l3_the_tap_opens_at_once_for_open_ms_every_every_ms() {
        let (opens, closes) = run(50, 10_000);
        assert_eq!(opens, vec![0, 2000, 4000, 6000, 8000, 10_000]);
        assert_eq!(closes[0], (100, 100));
        assert!(closes.iter().all(|&(_, ms)| ms == 100));
    }

    #[test]
    fn late_closing_ticks_keep_the_duty_cycle() {
        // Ticking every second, each sample lasts a whole second: the tap then stays shut
        // 19 seconds, so it is open a twentieth of the time as configured.
        let (opens, closes) = run(1000, 40_000);
        assert_eq!(opens, vec![0, 20_000, 40_000]);
        assert!(closes.iter().all(|&(_, ms)| ms == 1000));
    }

    /// A world whose tap only says what was asked of it.
    #[derive(Default)]
    struct CallLog(Vec<&'static str>);

    impl BioTap for CallLog {
        fn tap_available(&mut self, _: &str) -> Result<(), TapError> {
            Ok(())
        }
        fn tap_open(&mut self, _: &str, _: &TapParams) -> Result<(), TapError> {
            self.0.push("open");
            Ok(())
        }
        fn tap_drain(&mut self, _: &str, _: TapBatch<'_>) -> Result<TapDrain, TapError> {
            Ok(Default::default())
        }
        fn tap_pause(&mut self, _: &str) -> Result<(), TapError> {
            self.0.push("pause");
            Ok(())
        }
        fn tap_close(&mut self, _: &str) -> Result<(), TapError> {
            self.0.push("close");
            Ok(())
        }
    }

    #[test]
    fn between_samples_at_l3_the_tap_is_paused_and_it_is_closed_when_l3_ends() {
        let (mut fs, mut sense) = (CallLog::default(), DeviceSense::default());
        let at_l3_until_ms = 4_100;
        for t in (0..=6_000).step_by(100) {
            sense.tick("loop0", t, t < at_l3_until_ms, &cfg(), 5.0, &mut fs);
        }
        // Samples at 0, 2,000 and 4,000 ms; the one at 4,000 was still open at 4,100.
        assert_eq!(
            fs.0,
            ["open", "pause", "open", "pause", "open", "close"],
            "{:?}",
            fs.0
        );
        // A paused tap off L3 is closed at once, and stop() closes a paused one too.
        let (mut fs, mut sense) = (CallLog::default(), DeviceSense::default());
        for t in (0..=300).step_by(100) {
            sense.tick("loop0", t, true, &cfg(), 5.0, &mut fs);
        }
        sense.tick("loop0", 400, false, &cfg(), 5.0, &mut fs);
        assert_eq!(fs.0, ["open", "pause", "close"]);
        let (mut fs, mut sense) = (CallLog::default(), DeviceSense::default());
        for t in (0..=300).step_by(100) {
            sense.tick("loop0", t, true, &cfg(), 5.0, &mut fs);
        }
        sense.stop("loop0", &mut fs);
        assert_eq!(fs.0, ["open", "pause", "close"]);
    }

    #[test]
    fn an_ask_opens_the_tap_at_once_at_most_once_per_every_ms() {
        let mut d = DutyCycle::default();
        assert_eq!(d.step(0, true, &cfg()), TapStep::Open);
        assert_eq!(
            d.step(100, true, &cfg()),
            TapStep::Close { sampled_ms: 100 }
        );
        // Shut until 2,000 ms; asked at 500, it opens at the next step.
        assert!(d.ask(500, &cfg()));
        assert_eq!(d.step(500, true, &cfg()), TapStep::Open);
        assert!(d.open_was_asked());
        // Closed early after 20 ms (whole), it owes 380 ms shut.
        assert_eq!(d.close(520, &cfg()), 20);
        assert_eq!(d.step(600, true, &cfg()), TapStep::Idle);
        // A second ask within every_ms of the first is not granted: the schedule stands.
        assert!(!d.ask(1_000, &cfg()));
        assert_eq!(d.step(1_000, true, &cfg()), TapStep::Open);
        assert!(!d.open_was_asked(), "a timed sample, not an asked one");
        // Asked while open (after every_ms): the sample starts again from now.
        assert!(d.ask(2_550, &cfg()));
        assert!(d.open_was_asked());
        assert_eq!(d.step(2_600, true, &cfg()), TapStep::Drain);
        assert_eq!(
            d.step(2_650, true, &cfg()),
            TapStep::Close { sampled_ms: 100 }
        );
    }

    #[test]
    fn never_open_away_from_l3_and_leaving_l3_aborts() {
        let mut d = DutyCycle::default();
        assert_eq!(d.step(0, false, &cfg()), TapStep::Idle);
        assert_eq!(d.step(100, true, &cfg()), TapStep::Open);
        assert_eq!(d.step(150, true, &cfg()), TapStep::Drain);
        assert_eq!(d.step(180, false, &cfg()), TapStep::Abort);
        assert!(!d.is_open());
        assert_eq!(d.step(400, false, &cfg()), TapStep::Idle);
        // Back at L3: the aborted sample does not delay the next one.
        assert_eq!(d.step(500, true, &cfg()), TapStep::Open);
    }
}
