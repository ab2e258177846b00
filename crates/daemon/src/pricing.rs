//! What a step down would save, per device, as the daemon knows it: measured live on this
//! host (the default) or read from a cost profile that matches the device.
//!
//! Live: the merge-path sampler (`MergeSampler`, `kernel::perf` on a real
//! machine, the simulator's own accounting in virtual time) runs for `sample_ms` every
//! `every_ms` while a managed device below L3 is busy, and only then: its cost is paid only
//! where there is something to price. Each span's samples and the bios that went through
//! the merge path meanwhile (per scheduler class and level, from the same ticks' diskstats
//! deltas) are pooled over the last `keep_spans` spans younger than `max_age_secs`, and
//! priced by `logic::merge_cost`. A device's table is then its class's ns per bio times its
//! own bios/s, against the floor. At L3 nothing is sampled for that device (its merge path
//! is skipped), so the price from its last time below L3 stands.

use mergetune_kernel::blockfs::MergeSampler;
use mergetune_kernel::perf::MergeSamples;
use mergetune_logic::config::Config;
use mergetune_logic::cost_profile::{self, CostProfile, DeviceKey, kernel_series};
use mergetune_logic::decision::Level;
use mergetune_logic::merge_cost::{
    ClassPrice, MIN_SAMPLES, PricingConfig, Shape, SpanBios, price, worth_live,
};
use mergetune_logic::policy::worth::{UnknownWhy, Worth};
use std::collections::VecDeque;
use tracing::{debug, info, warn};

/// Where prices come from.
#[derive(Debug, Clone)]
pub enum PricingSource {
    Live,
    Profile {
        profile: Box<CostProfile>,
        /// The config's value: a built-in name or a path.
        spec: String,
    },
}

impl PricingSource {
    /// The config's source; a profile file that cannot be read any more (it was checked
    /// when the config was loaded) leaves every device unknown rather than guessed.
    pub fn from_config(cfg: &Config) -> PricingSource {
        let spec = cfg.policy.cost_profile.trim();
        if spec == cost_profile::LIVE {
            return PricingSource::Live;
        }
        match cost_profile::resolve(spec) {
            Ok(profile) => PricingSource::Profile {
                profile: Box::new(profile),
                spec: spec.to_string(),
            },
            Err(e) => {
                warn!("{e}: measuring live instead");
                PricingSource::Live
            }
        }
    }

    /// The profile's name ("live" when measured).
    pub fn name(&self) -> &str {
        match self {
            PricingSource::Live => cost_profile::LIVE,
            PricingSource::Profile { profile, .. } => &profile.name,
        }
    }

    /// Where the profile came from: "measured on this host", "built-in", or its path.
    pub fn origin(&self) -> String {
        match self {
            PricingSource::Live => "measured on this host".into(),
            PricingSource::Profile { spec, .. } if cost_profile::is_path(spec) => spec.clone(),
            PricingSource::Profile { profile, .. }
                if profile.method == cost_profile::Method::Stated =>
            {
                format!(
                    "built-in, figures stated for kernel {}",
                    profile.kernel_release
                )
            }
            PricingSource::Profile { profile, .. } => {
                format!("built-in, measured on kernel {}", profile.kernel_release)
            }
        }
    }

    /// What prices the steps, in one line for the startup log and `check-config`: the
    /// name, the origin and, for a profile, whether it matches the running kernel
    /// (`running_release`, None when unknown). A device's own match is its line of the
    /// first tick (the device kind is read there).
    pub fn summary(&self, running_release: Option<&str>, floor_ms_per_sec: f64) -> String {
        match self {
            PricingSource::Live => format!(
                "pricing: live ({}, by the merge-path sampler): a step down only where the lower bound of its saving's 95% interval reaches the floor, {floor_ms_per_sec:.2} ms/s of CPU",
                self.origin()
            ),
            PricingSource::Profile { profile, .. } => {
                let fit = match running_release {
                    _ if profile.method == cost_profile::Method::Stated => {
                        "stated figures, not a measurement: applied on any kernel".to_string()
                    }
                    None => "the running kernel is unknown: not checked".to_string(),
                    Some(run) => match profile_match(profile, Some(run), None) {
                        Ok(()) => format!("matches the running kernel {run}"),
                        Err(e) => format!(
                            "will not match here ({e}): every device stays unknown, nothing steps down"
                        ),
                    },
                };
                format!(
                    "pricing: profile {} ({}): {fit}",
                    profile.name,
                    self.origin()
                )
            }
        }
    }

    /// The table a profile gives a device, or unknown where it does not match.
    pub fn profile_worth(
        &self,
        scheduler: Option<&str>,
        running_release: Option<&str>,
        key: Option<&DeviceKey>,
    ) -> Worth {
        match self {
            PricingSource::Live => Worth::unknown(UnknownWhy::NotMeasuredYet),
            PricingSource::Profile { profile, .. } => {
                match profile_match(profile, running_release, key) {
                    Ok(()) => Worth::from_profile(profile, scheduler),
                    Err(_) => Worth::unknown(UnknownWhy::NoMatchingProfile),
                }
            }
        }
    }
}

/// Whether a profile applies to a device: the same kernel series (`major.minor`) and, if
/// the profile names one, the same kind of device. Unknown values (a simulated world, a
/// fake tree) do not refuse. The error says what differs.
pub fn profile_match(
    p: &CostProfile,
    running_release: Option<&str>,
    key: Option<&DeviceKey>,
) -> Result<(), String> {
    // Stated figures (the 2008 thread's) are a model an operator names on purpose, not a
    // measurement of a kernel: they apply anywhere, and their origin says what they are.
    if p.method == cost_profile::Method::Stated {
        return Ok(());
    }
    if let Some(run) = running_release
        && kernel_series(run) != kernel_series(&p.kernel_release)
    {
        return Err(format!(
            "measured on kernel {}, running {run}",
            p.kernel_release
        ));
    }
    if let (Some(want), Some(have)) = (&p.device, key) {
        let same = want.rotational == have.rotational
            && want.driver == have.driver
            && (want.nr_hw_queues == 0 || want.nr_hw_queues == have.nr_hw_queues)
            && (want.model.is_empty() || want.model == have.model);
        if !same {
            return Err(format!(
                "measured on a {} device ({} hw queues{}), this one is {} ({} hw queues{})",
                want.driver,
                want.nr_hw_queues,
                if want.rotational { ", rotational" } else { "" },
                have.driver,
                have.nr_hw_queues,
                if have.rotational { ", rotational" } else { "" },
            ));
        }
    }
    Ok(())
}

/// The sampler's state.
#[derive(Debug, Clone, PartialEq)]
enum SamplerState {
    /// Not opened yet.
    Closed,
    /// Could not open: why, and when to try again.
    Failed { why: String, retry_at_ms: u64 },
    /// Open, disabled, next span no earlier than this.
    Idle { next_at_ms: u64 },
    /// Sampling since this time, with the bios counted so far; `disturbed` when a device's
    /// counters reset or a device changed level meanwhile (the span is then dropped).
    Sampling {
        since_ms: u64,
        bios: Box<SpanBios>,
        disturbed: bool,
    },
}

/// One scheduler class's price and what it was measured on.
#[derive(Debug, Clone, Copy, PartialEq)]
struct SlotPrice {
    /// The workload shape of the spans pooled into it.
    shape: Shape,
    price: ClassPrice,
    /// Spans pooled.
    spans: u32,
}

/// The live measurement and its prices.
#[derive(Debug, Clone)]
pub struct LivePricing {
    state: SamplerState,
    spans: VecDeque<(u64, MergeSamples, SpanBios)>,
    prices: [Option<SlotPrice>; 4],
    /// Spans started at once so far while a busy device's workload had no resolved price
    /// (reset when every busy device's has one).
    first_price_spans: u32,
    /// Spans dropped because a reset, a new device or a level change overlapped them.
    dropped_spans: u64,
}

/// A failed open is tried again after this long.
const RETRY_OPEN_MS: u64 = 600_000;

/// While a busy scheduler class has no resolved price for its workload, spans follow each
/// other without the duty cycle's pause, up to this many in a row: a first price within
/// seconds of a busy device appearing (at 1 s spans and 1 ms periods, random 4 KiB reads
/// on a loop device at 200,000 bios/s give about 6 merge-path samples a span, and a price
/// needs 10), for at most this many seconds of continuous sampling (docs/policy.md, "What
/// the sampler costs": 16.1 µs a sample at 1,000 samples a second per CPU is, computed,
/// about 1.6% of each CPU while it runs).
pub const FIRST_PRICE_MAX_SPANS: u32 = 10;

impl Default for LivePricing {
    fn default() -> Self {
        LivePricing {
            state: SamplerState::Closed,
            spans: VecDeque::new(),
            prices: [None; 4],
            first_price_spans: 0,
            dropped_spans: 0,
        }
    }
}

/// One device's share of a tick, for the span's bios.
pub struct TickBios<'a> {
    pub scheduler: Option<&'a str>,
    pub level: Level,
    /// This tick's bios (`None`: the device's counters gave no delta this tick: first
    /// sight or a reset, so its bios are unknown and the span is disturbed).
    pub counters: Option<&'a mergetune_logic::sampler::Counters>,
    /// When the device's level last changed (managed devices): a change during a span
    /// disturbs it.
    pub level_since_ms: Option<u64>,
    /// A managed device below L3 whose last window was busy: its workload's shape, which
    /// wants a price, and its bios/s.
    pub busy_shape: Option<Shape>,
    pub busy_bios_per_sec: f64,
}

impl LivePricing {
    /// Whether the sampler cannot run here.
    pub fn unavailable(&self) -> bool {
        matches!(self.state, SamplerState::Failed { .. })
    }

    /// One tick: count the bios of a span in progress, end it when due, start the next
    /// when `wanted` (a managed device below L3 is busy) and due: at once while a busy
    /// device's workload has no resolved price ([`FIRST_PRICE_MAX_SPANS`]).
    pub fn tick<'a>(
        &mut self,
        now_ms: u64,
        cfg: &PricingConfig,
        fs: &mut dyn MergeSampler,
        wanted: bool,
        bios: impl Iterator<Item = TickBios<'a>>,
    ) {
        // The busy devices' (class, shape): few (managed devices below L3 with a busy
        // window), kept to ask again after a span ends and reprices.
        let mut busy: Vec<(usize, Shape, f64)> = Vec::new();
        for b in bios {
            if let Some(shape) = b.busy_shape {
                let slot = MergeSamples::slot(
                    b.scheduler
                        .and_then(mergetune_kernel::perf::SchedulerClass::of_name),
                );
                busy.push((slot, shape, b.busy_bios_per_sec));
            }
            if let SamplerState::Sampling {
                since_ms,
                bios: acc,
                disturbed,
            } = &mut self.state
            {
                *disturbed |= b.level_since_ms.is_some_and(|t| t > *since_ms);
                match b.counters {
                    Some(c) => {
                        acc.add_device(b.scheduler, b.level, c.bios(), Shape::of_counters(c))
                    }
                    None => *disturbed = true,
                }
            }
        }
        let mut first_price = self.wants_first_price(&busy, cfg.floor_ms_per_sec());
        match &mut self.state {
            SamplerState::Sampling {
                since_ms,
                bios: acc,
                disturbed,
            } => {
                if now_ms.saturating_sub(*since_ms) < cfg.sample_ms {
                    return;
                }
                fs.merge_sampler_enable(false);
                let samples = fs.merge_sampler_drain();
                let mut span = **acc;
                span.span_ms = now_ms.saturating_sub(*since_ms);
                let dropped = *disturbed;
                if dropped {
                    // Its samples ran over bios that were not all counted (a reset) or
                    // over two levels' paths (a change): pooled, they would inflate the
                    // price (seen on 6.12: 1.7-1.9 times calibrate's).
                    self.dropped_spans += 1;
                    debug!(
                        "merge-path span of {} ms dropped: a device's counters reset, a device appeared, or a device changed level during it",
                        span.span_ms
                    );
                } else {
                    self.spans.push_back((now_ms, samples, span));
                    self.reprice(now_ms, cfg);
                }
                self.state = SamplerState::Idle {
                    next_at_ms: now_ms + cfg.every_ms.saturating_sub(cfg.sample_ms),
                };
                first_price = self.wants_first_price(&busy, cfg.floor_ms_per_sec());
                // While a first price is wanted the next span starts at this very tick
                // (below), also after a span that was dropped or did not resolve it.
                if !(first_price && wanted) {
                    return;
                }
            }
            SamplerState::Failed { retry_at_ms, .. } if now_ms < *retry_at_ms => return,
            SamplerState::Idle { next_at_ms } if now_ms < *next_at_ms && !first_price => return,
            _ => {}
        }
        if !wanted {
            return;
        }
        if first_price {
            self.first_price_spans += 1;
        }
        if matches!(
            self.state,
            SamplerState::Closed | SamplerState::Failed { .. }
        ) {
            if let Err(e) = fs.merge_sampler_open(cfg.period_us * 1000) {
                let why = e.to_string();
                if !matches!(&self.state, SamplerState::Failed { why: w, .. } if *w == why) {
                    warn!(
                        "merge-path sampler unavailable: {why}; no device steps down on a live price (retried every {} min)",
                        RETRY_OPEN_MS / 60_000
                    );
                }
                self.state = SamplerState::Failed {
                    why,
                    retry_at_ms: now_ms + RETRY_OPEN_MS,
                };
                return;
            }
            info!(
                "merge-path sampler: cpu-clock every {} µs of CPU, {} ms every {} ms while a device below L3 is busy (back to back, up to {FIRST_PRICE_MAX_SPANS} spans, while a busy device's workload has no price)",
                cfg.period_us, cfg.sample_ms, cfg.every_ms
            );
        }
        let _ = fs.merge_sampler_drain();
        fs.merge_sampler_enable(true);
        self.state = SamplerState::Sampling {
            since_ms: now_ms,
            bios: Box::default(),
            disturbed: false,
        };
    }

    /// Whether a busy device's workload (`busy`: its class, shape and bios/s) has no price
    /// that decides (none, not resolved, or one whose saving at the device's rate still
    /// straddles the floor: a first span of 10 samples priced "42 ns per bio [17, 94]", at
    /// 285,000 bios/s [4.9, 27] ms/s against 5, and the duty cycle's next span came 60 s
    /// later), and fewer than [`FIRST_PRICE_MAX_SPANS`] spans were started at once for it;
    /// the count starts again once every busy device's workload has one that decides.
    fn wants_first_price(&mut self, busy: &[(usize, Shape, f64)], floor_ms_per_sec: f64) -> bool {
        let missing = busy.iter().any(|&(slot, shape, bios_per_sec)| {
            !self.prices[slot].is_some_and(|p| {
                p.shape == shape
                    && p.price.levels[3].is_some_and(|l3| {
                        let lo = l3.lo * bios_per_sec / 1e6;
                        let hi = l3.hi * bios_per_sec / 1e6;
                        l3.resolved() && (lo >= floor_ms_per_sec || hi < floor_ms_per_sec)
                    })
            })
        });
        if !missing {
            self.first_price_spans = 0;
        }
        missing && self.first_price_spans < FIRST_PRICE_MAX_SPANS
    }

    /// Prices each class whose bios the newest span holds, from the pooled spans of the
    /// same workload shape for that class: a price measured on another shape is replaced
    /// (aged out), not pooled with this one.
    fn reprice(&mut self, now_ms: u64, cfg: &PricingConfig) {
        let max_age_ms = cfg.max_age_secs * 1000;
        while self.spans.len() > cfg.keep_spans as usize
            || self
                .spans
                .front()
                .is_some_and(|(at, _, _)| now_ms.saturating_sub(*at) > max_age_ms)
        {
            self.spans.pop_front();
        }
        let Some((_, _, newest)) = self.spans.back().copied() else {
            return;
        };
        for k in 0..4 {
            // A class without bios in the newest span keeps its last price.
            let Some(shape) = newest.shape(k) else {
                continue;
            };
            let mut samples = MergeSamples::default();
            let mut bios = SpanBios::default();
            let mut spans = 0u32;
            for (_, s, b) in self
                .spans
                .iter()
                .filter(|(_, _, b)| b.shape(k) == Some(shape))
            {
                samples.add(s);
                bios.add(b);
                spans += 1;
            }
            let Some(fresh) = price(&samples, &bios)[k] else {
                continue;
            };
            let before = self.prices[k];
            let now = SlotPrice {
                shape,
                price: fresh,
                spans,
            };
            self.prices[k] = Some(now);
            if before.map(|b| (b.shape, b.price)) == Some((shape, fresh)) {
                continue;
            }
            if let Some(l3) = fresh.levels[3] {
                let other = before
                    .filter(|b| b.shape != shape)
                    .map(|b| format!(" (the price for {} aged out)", b.shape))
                    .unwrap_or_default();
                info!(
                    "merge path on {} under {shape}: {:.0} ns per bio [{:.0}, {:.0}] (95%), {} samples over {} bios in {spans} span{}{}{other}",
                    ["none/plug", "mq-deadline", "bfq", "kyber"][k],
                    l3.estimate,
                    l3.lo,
                    l3.hi,
                    l3.samples,
                    l3.bios,
                    if spans == 1 { "" } else { "s" },
                    if l3.resolved() {
                        String::new()
                    } else {
                        format!(": not resolved yet (a price needs {MIN_SAMPLES} samples)")
                    },
                );
            }
        }
    }

    /// A device's table at `bios_per_sec`, for a device whose workload has `shape` (None:
    /// not known yet, the class's price is taken as it is).
    pub fn worth(
        &self,
        scheduler: Option<&str>,
        shape: Option<Shape>,
        bios_per_sec: f64,
        cfg: &PricingConfig,
    ) -> Worth {
        if let SamplerState::Failed { .. } = self.state {
            return Worth::unknown(UnknownWhy::NoSampler);
        }
        let slot =
            MergeSamples::slot(scheduler.and_then(mergetune_kernel::perf::SchedulerClass::of_name));
        let Some(p) = self.prices[slot] else {
            return Worth::unknown(UnknownWhy::NotMeasuredYet);
        };
        if shape.is_some_and(|s| s != p.shape) {
            return Worth::unknown(UnknownWhy::OtherWorkload);
        }
        if let Some(l3) = p.price.levels[3].filter(|l3| !l3.resolved()) {
            return Worth::unknown(UnknownWhy::Measuring {
                samples: l3.samples,
                needed: MIN_SAMPLES,
                spans: p.spans,
            });
        }
        worth_live(
            Some(&p.price),
            scheduler,
            bios_per_sec,
            cfg.floor_ms_per_sec(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mergetune_kernel::perf::PerfError;
    use mergetune_logic::policy::worth::Basis;
    use mergetune_logic::sampler::Counters;

    /// A world whose only part is a merge-path sampler that hands out the samples queued
    /// for it, one batch per drain.
    #[derive(Default)]
    struct Sampler {
        batches: VecDeque<MergeSamples>,
        /// Enabled since the last drain: the next drain hands out a batch.
        ran: bool,
    }

    impl MergeSampler for Sampler {
        fn merge_sampler_open(&mut self, _: u64) -> Result<(), PerfError> {
            Ok(())
        }
        fn merge_sampler_enable(&mut self, on: bool) {
            self.ran |= on;
        }
        fn merge_sampler_drain(&mut self) -> MergeSamples {
            if !std::mem::take(&mut self.ran) {
                return MergeSamples::default();
            }
            self.batches.pop_front().unwrap_or_default()
        }
    }

    /// `n` merge-path samples of mq-deadline, 1 ms each.
    fn mq_deadline_samples(n: u64) -> MergeSamples {
        let mut s = MergeSamples {
            period_ns: 1_000_000,
            ..Default::default()
        };
        s.merge_path[1] = n;
        s
    }

    /// One second of random 4 KiB reads (or, `sequential`, 128 KiB writes) at `bios` bios.
    fn tick_of(bios: u64, sequential: bool) -> Counters {
        if sequential {
            Counters {
                writes_completed: bios,
                sectors_written: bios * 256,
                ..Default::default()
            }
        } else {
            Counters {
                reads_completed: bios,
                sectors_read: bios * 8,
                ..Default::default()
            }
        }
    }

    /// Runs the pricing one tick a second from `t0` for `ticks` ticks, one mq-deadline device
    /// at L0 with `counters` each tick (None: a reset), its level last changed at
    /// `level_since_ms`.
    fn run(
        p: &mut LivePricing,
        fs: &mut Sampler,
        t0: u64,
        ticks: u64,
        counters: Option<Counters>,
        level_since_ms: u64,
    ) -> u64 {
        let cfg = PricingConfig::default();
        let mut now = t0;
        for _ in 0..ticks {
            let bios = std::iter::once(TickBios {
                scheduler: Some("mq-deadline"),
                level: Level::L0,
                counters: counters.as_ref(),
                level_since_ms: Some(level_since_ms),
                busy_shape: counters.as_ref().and_then(Shape::of_counters),
                busy_bios_per_sec: counters.map_or(0.0, |c| c.bios() as f64),
            });
            p.tick(now, &cfg, fs, true, bios);
            now += 1000;
        }
        now
    }

    fn reads() -> Option<Shape> {
        Shape::of_counters(&tick_of(1, false))
    }

    #[test]
    fn a_first_price_comes_from_spans_back_to_back_and_says_how_far_it_is() {
        let cfg = PricingConfig::default();
        let mut p = LivePricing::default();
        // 6 samples a span: under the 10 a price needs after one span, resolved after two.
        let mut fs = Sampler {
            batches: [6, 6, 6].map(mq_deadline_samples).into(),
            ..Default::default()
        };
        let now = run(&mut p, &mut fs, 0, 2, Some(tick_of(100_000, false)), 0);
        let w = p.worth(Some("mq-deadline"), reads(), 100_000.0, &cfg);
        assert_eq!(
            w.basis,
            Basis::Unknown {
                why: UnknownWhy::Measuring {
                    samples: 6,
                    needed: MIN_SAMPLES,
                    spans: 1
                }
            },
            "{w:?}"
        );
        // The second span started at once, not 60 s later.
        run(&mut p, &mut fs, now, 1, Some(tick_of(100_000, false)), 0);
        let w = p.worth(Some("mq-deadline"), reads(), 100_000.0, &cfg);
        assert!(matches!(w.basis, Basis::Live { .. }), "{w:?}");
    }

    #[test]
    fn a_price_belongs_to_the_workload_shape_it_was_measured_on() {
        let cfg = PricingConfig::default();
        let mut p = LivePricing::default();
        let mut fs = Sampler {
            batches: [40, 40].map(mq_deadline_samples).into(),
            ..Default::default()
        };
        let now = run(&mut p, &mut fs, 0, 2, Some(tick_of(100_000, true)), 0);
        let seq = Shape::of_counters(&tick_of(1, true));
        assert!(matches!(
            p.worth(Some("mq-deadline"), seq, 100_000.0, &cfg).basis,
            Basis::Live { .. }
        ));
        // Priced under sequential writes: not the random reads' price.
        let w = p.worth(Some("mq-deadline"), reads(), 100_000.0, &cfg);
        assert_eq!(
            w.basis,
            Basis::Unknown {
                why: UnknownWhy::OtherWorkload
            }
        );
        assert!(
            w.keeps(Level::L3) && !w.worth(Level::L3),
            "pending: no step"
        );
        // A span of random reads replaces it.
        run(&mut p, &mut fs, now, 2, Some(tick_of(100_000, false)), 0);
        let w = p.worth(Some("mq-deadline"), reads(), 100_000.0, &cfg);
        assert!(matches!(w.basis, Basis::Live { .. }), "{w:?}");
        assert_eq!(
            p.worth(Some("mq-deadline"), seq, 100_000.0, &cfg).basis,
            Basis::Unknown {
                why: UnknownWhy::OtherWorkload
            }
        );
    }

    #[test]
    fn spans_over_a_reset_or_a_level_change_are_dropped_not_pooled() {
        let cfg = PricingConfig::default();
        let mut p = LivePricing::default();
        // A reset: the tick's bios are unknown while the samples ran on (an inflated price).
        let mut fs = Sampler {
            batches: [500, 500].map(mq_deadline_samples).into(),
            ..Default::default()
        };
        let now = run(&mut p, &mut fs, 0, 1, Some(tick_of(100_000, false)), 0);
        let now = run(&mut p, &mut fs, now, 1, None, 0);
        assert_eq!(p.dropped_spans, 1);
        assert_eq!(
            p.worth(Some("mq-deadline"), reads(), 100_000.0, &cfg).basis,
            Basis::Unknown {
                why: UnknownWhy::NotMeasuredYet
            }
        );
        // A level change during the next span (the device's level changed after it began).
        let next = now - 1000 + PricingConfig::default().every_ms;
        run(&mut p, &mut fs, next, 1, Some(tick_of(100_000, false)), 0);
        run(
            &mut p,
            &mut fs,
            next + 1000,
            1,
            Some(tick_of(100_000, false)),
            next + 500,
        );
        assert_eq!(p.dropped_spans, 2);
        assert!(
            p.prices.iter().all(Option::is_none),
            "nothing pooled: {:?}",
            p.prices
        );
    }
}
