//! Per-tick curves of a run: [`Sampling`] is a [`Controller`] that runs another and, after
//! each of its ticks, reads the block stack's counters and ladder tunables through the same
//! [`BlockFs`] (the simulator's, or a recording's in replay).
//!
//! The counters go through the daemon's own [`Sampler`], so the pictures see the deltas
//! the policy sees: a counter that wraps is a wrap, one that goes backwards (a device
//! re-added) is a reset and costs that device one sample, never a spike.

use super::series::{Sample, Series, level_of};
use mergetune_daemon::controller::Controller;
use mergetune_kernel::blockfs::BlockFs;
use mergetune_kernel::diskstats::parse_diskstats;
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::decision::Decision;
use mergetune_logic::sampler::{Counters, Delta, Sampler};

/// A [`Controller`] that runs another and samples the block stack after each tick.
pub struct Sampling<'a> {
    inner: &'a mut dyn Controller,
    sampler: Sampler,
    prev_t_ms: u64,
    series: Series,
}

impl<'a> Sampling<'a> {
    pub fn new(inner: &'a mut dyn Controller) -> Self {
        Sampling {
            inner,
            sampler: Sampler::new(),
            prev_t_ms: 0,
            series: Series::default(),
        }
    }

    /// The samples and decisions so far.
    pub fn finish(self) -> Series {
        self.series
    }

    fn sample(&mut self, now_ms: u64, fs: &mut dyn BlockFs) {
        let Ok(text) = fs.read_diskstats() else {
            return;
        };
        let stats = parse_diskstats(&text);
        let set = self.sampler.observe(&stats.devices);
        let dt_s = now_ms.saturating_sub(self.prev_t_ms) as f64 / 1000.0;
        for (d, delta) in stats.devices.iter().zip(set.deltas) {
            // The first sight of a device, or a reset: no window to draw.
            let Delta::Counters(c) = delta else {
                continue;
            };
            if dt_s <= 0.0 {
                continue;
            }
            let mut s = window_sample(&c, now_ms, dt_s);
            let nomerges = fs
                .read_tunable(&d.name, Tunable::Nomerges)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let front = fs
                .read_tunable(&d.name, Tunable::FrontMerges)
                .ok()
                .and_then(|v| v.parse().ok());
            s.level = level_of(nomerges, front);
            self.series
                .devices
                .entry(d.name.clone())
                .or_default()
                .push(s);
        }
        self.prev_t_ms = now_ms;
    }
}

/// One device's sample of a window of `dt_s` seconds ending at `now_ms` (level left at
/// L0 for the caller).
fn window_sample(c: &Counters, now_ms: u64, dt_s: f64) -> Sample {
    let mut s = Sample {
        t_s: now_ms as f64 / 1000.0,
        ..Default::default()
    };
    let dirs = [
        (c.reads_completed, c.reads_merged, c.read_ms),
        (c.writes_completed, c.writes_merged, c.write_ms),
    ];
    for (k, (done, merged, ms)) in dirs.into_iter().enumerate() {
        let bios = done + merged;
        s.bios_per_s[k] = bios as f64 / dt_s;
        if bios > 0 {
            s.merge_percent[k] = Some(merged as f64 * 100.0 / bios as f64);
        }
        if done > 0 {
            s.await_ms[k] = Some(ms as f64 / done as f64);
        }
    }
    s
}

impl Controller for Sampling<'_> {
    fn interval_ms(&self) -> u64 {
        self.inner.interval_ms()
    }
    fn next_tick_in_ms(&self) -> u64 {
        self.inner.next_tick_in_ms()
    }
    fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        let d = self.inner.tick(now_ms, fs);
        self.series.decisions.extend(d.iter().cloned());
        self.sample(now_ms, fs);
        d
    }
    fn restore(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        self.inner.restore(now_ms, fs)
    }
    // The only use of the daemon's internals here: the live exporter of `simulate
    // --metrics-listen` reads the wrapped daemon through this. It forwards whatever the
    // controller seam offers (a downcast today, a status snapshot once it has one).
    fn snapshot(&self) -> Option<mergetune_daemon::snapshot::DaemonSnapshot> {
        self.inner.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_gives_rates_merge_ratios_and_mean_latency_per_direction() {
        let c = Counters {
            reads_completed: 30,
            reads_merged: 10,
            read_ms: 60,
            writes_completed: 0,
            writes_merged: 0,
            ..Default::default()
        };
        let s = window_sample(&c, 2_000, 0.5);
        assert_eq!(s.t_s, 2.0);
        assert_eq!(s.bios_per_s, [80.0, 0.0]);
        assert_eq!(s.merge_percent, [Some(25.0), None]);
        assert_eq!(s.await_ms, [Some(2.0), None]);
    }
}
