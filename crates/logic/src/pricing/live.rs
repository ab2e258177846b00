//! Live pricing as a pure state machine: the merge-path sampler's spans, the bios counted
//! meanwhile, and the prices pooled from them. The daemon drives it (`daemon::pricing`):
//! it opens, enables and drains the sampler through its `BlockFs` and feeds this machine
//! the drained samples and the time; nothing here touches the sampler or reads a clock.
//!
//! The sampler runs for `sample_ms` every `every_ms` while a managed device below L3 is
//! busy, and only then: its cost is paid only where there is something to price. Each
//! span's samples and the bios that went through the merge path meanwhile (per scheduler
//! class and level, from the same ticks' diskstats deltas) are pooled over the last
//! `keep_spans` spans younger than `max_age_secs`, and priced by [`super::price`]. A
//! device's table is then its class's ns per bio times its own bios/s, against the floor.
//! At L3 nothing is sampled for that device (its merge path is skipped), so the price from
//! its last time below L3 stands.
//!
//! One tick of the driver is: [`LivePricing::count`] (the tick's bios), then, when
//! [`LivePricing::span_due`], stop and drain the sampler and [`LivePricing::end_span`],
//! then [`LivePricing::next_step`] says whether to open and start the next span.

use super::config::PricingConfig;
use super::floor::SavingFloor;
use super::price::{ClassPrice, MIN_SAMPLES, Shape, SpanBios, price, worth_live};
use crate::decision::Level;
use crate::pricing::worth::{UnknownWhy, Worth};
use mergetune_kernel::perf::MergeSamples;
use mergetune_kernel::scheduler::Scheduler;
use std::collections::VecDeque;
use std::fmt;

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
pub const RETRY_OPEN_MS: u64 = 600_000;

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
    pub scheduler: Option<Scheduler>,
    pub level: Level,
    /// This tick's bios (`None`: the device's counters gave no delta this tick: first
    /// sight or a reset, so its bios are unknown and the span is disturbed).
    pub counters: Option<&'a crate::sampler::Counters>,
    /// When the device's level last changed (managed devices): a change during a span
    /// disturbs it.
    pub level_since_ms: Option<u64>,
    /// A managed device below L3 whose last window was busy: its workload's shape, which
    /// wants a price, and its bios/s.
    pub busy_shape: Option<Shape>,
    pub busy_bios_per_sec: f64,
}

/// What [`LivePricing::count`] learnt of a tick, for the rest of it: the busy devices'
/// (class, shape, bios/s), few (managed devices below L3 with a busy window), kept to ask
/// again after a span ends and reprices.
#[derive(Debug, Clone, Default)]
pub struct TickPlan {
    busy: Vec<(usize, Shape, f64)>,
    first_price: bool,
    /// A span ended at this tick.
    ended: bool,
}

/// What the driver does with the sampler next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplerStep {
    /// Nothing this tick.
    Wait,
    /// Open the sampler (at `period_us`), then, when it opened, start a span as for
    /// [`SamplerStep::Start`]; when it did not, tell [`LivePricing::open_failed`].
    Open,
    /// Drain what the sampler holds (not counted), enable it and tell
    /// [`LivePricing::started`].
    Start,
}

/// What ending a span did, for the driver's log.
#[derive(Debug, Clone, PartialEq)]
pub enum SpanEnd {
    /// A device's counters reset, a device appeared or changed level during the span of
    /// these ms: its samples are not pooled.
    Dropped { span_ms: u64 },
    /// Pooled; the classes whose price changed.
    Pooled(Vec<Repriced>),
}

/// A class's new price, as the log says it.
#[derive(Debug, Clone, PartialEq)]
pub struct Repriced {
    slot: usize,
    shape: Shape,
    l3: super::price::NsPerBio,
    spans: u32,
    /// The shape whose price this one replaced.
    aged_out: Option<Shape>,
}

impl fmt::Display for Repriced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (l3, spans) = (self.l3, self.spans);
        write!(
            f,
            "merge path on {} under {}: {:.0} ns per bio [{:.0}, {:.0}] (95%), {} samples over {} bios in {spans} span{}",
            if self.slot == 0 {
                "none/plug"
            } else {
                Scheduler::ALL[self.slot].name()
            },
            self.shape,
            l3.estimate,
            l3.lo,
            l3.hi,
            l3.samples,
            l3.bios,
            if spans == 1 { "" } else { "s" },
        )?;
        if !l3.resolved() {
            write!(
                f,
                ": not resolved yet (a price needs {MIN_SAMPLES} samples)"
            )?;
        }
        if let Some(old) = self.aged_out {
            write!(f, " (the price for {old} aged out)")?;
        }
        Ok(())
    }
}

/// The price slot of a scheduler (`MergeSamples::slot`).
fn slot_of(scheduler: Option<Scheduler>) -> usize {
    MergeSamples::slot(scheduler)
}

impl LivePricing {
    /// Whether the sampler cannot run here.
    pub fn unavailable(&self) -> bool {
        matches!(self.state, SamplerState::Failed { .. })
    }

    /// Why the sampler cannot run here, while it cannot.
    pub fn unavailable_why(&self) -> Option<&str> {
        match &self.state {
            SamplerState::Failed { why, .. } => Some(why),
            _ => None,
        }
    }

    /// Spans dropped so far (a reset, a new device or a level change overlapped them).
    pub fn dropped_spans(&self) -> u64 {
        self.dropped_spans
    }

    /// Counts a tick's bios into the span in progress and notes the busy devices.
    pub fn count<'a>(
        &mut self,
        cfg: &PricingConfig,
        bios: impl Iterator<Item = TickBios<'a>>,
    ) -> TickPlan {
        let mut busy = Vec::new();
        for b in bios {
            if let Some(shape) = b.busy_shape {
                busy.push((slot_of(b.scheduler), shape, b.busy_bios_per_sec));
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
        let first_price = self.wants_first_price(&busy, cfg.floor());
        TickPlan {
            busy,
            first_price,
            ended: false,
        }
    }

    /// Whether the span in progress has run its `sample_ms`: the driver then disables and
    /// drains the sampler and hands the samples to [`LivePricing::end_span`].
    pub fn span_due(&self, now_ms: u64, cfg: &PricingConfig) -> bool {
        matches!(self.state, SamplerState::Sampling { since_ms, .. }
            if now_ms.saturating_sub(since_ms) >= cfg.sample_ms)
    }

    /// Ends the span in progress with its drained `samples`: pooled and priced, or dropped
    /// when disturbed.
    pub fn end_span(
        &mut self,
        plan: &mut TickPlan,
        now_ms: u64,
        cfg: &PricingConfig,
        samples: MergeSamples,
    ) -> SpanEnd {
        let SamplerState::Sampling {
            since_ms,
            bios,
            disturbed,
        } = std::mem::replace(&mut self.state, SamplerState::Closed)
        else {
            unreachable!("end_span is called only while a span is due");
        };
        let mut span = *bios;
        span.span_ms = now_ms.saturating_sub(since_ms);
        let end = if disturbed {
            // Its samples ran over bios that were not all counted (a reset) or over two
            // levels' paths (a change): pooled, they would inflate the price (seen on 6.12:
            // 1.7-1.9 times calibrate's).
            self.dropped_spans += 1;
            SpanEnd::Dropped {
                span_ms: span.span_ms,
            }
        } else {
            self.spans.push_back((now_ms, samples, span));
            SpanEnd::Pooled(self.reprice(now_ms, cfg))
        };
        self.state = SamplerState::Idle {
            next_at_ms: now_ms + cfg.every_ms.saturating_sub(cfg.sample_ms),
        };
        plan.first_price = self.wants_first_price(&plan.busy, cfg.floor());
        plan.ended = true;
        end
    }

    /// Whether to start a span now: when `wanted` (a managed device below L3 is busy) and
    /// due, at once while a busy device's workload has no resolved price
    /// ([`FIRST_PRICE_MAX_SPANS`]), also right after a span that was dropped or did not
    /// resolve it.
    pub fn next_step(&mut self, plan: &TickPlan, now_ms: u64, wanted: bool) -> SamplerStep {
        let first_price = plan.first_price;
        if plan.ended {
            if !(first_price && wanted) {
                return SamplerStep::Wait;
            }
        } else {
            match &self.state {
                SamplerState::Sampling { .. } => return SamplerStep::Wait,
                SamplerState::Failed { retry_at_ms, .. } if now_ms < *retry_at_ms => {
                    return SamplerStep::Wait;
                }
                SamplerState::Idle { next_at_ms } if now_ms < *next_at_ms && !first_price => {
                    return SamplerStep::Wait;
                }
                _ => {}
            }
        }
        if !wanted {
            return SamplerStep::Wait;
        }
        if first_price {
            self.first_price_spans += 1;
        }
        match self.state {
            SamplerState::Closed | SamplerState::Failed { .. } => SamplerStep::Open,
            _ => SamplerStep::Start,
        }
    }

    /// The sampler did not open, for `why`: tried again after [`RETRY_OPEN_MS`]. True when
    /// the reason is new (worth a warning), false when it failed so before.
    pub fn open_failed(&mut self, now_ms: u64, why: String) -> bool {
        let new = !matches!(&self.state, SamplerState::Failed { why: w, .. } if *w == why);
        self.state = SamplerState::Failed {
            why,
            retry_at_ms: now_ms + RETRY_OPEN_MS,
        };
        new
    }

    /// The sampler was enabled at `now_ms`: a span begins.
    pub fn started(&mut self, now_ms: u64) {
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
    fn wants_first_price(&mut self, busy: &[(usize, Shape, f64)], floor: SavingFloor) -> bool {
        let floor_ms_per_sec = floor.ms_per_sec();
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

    /// Drops the spans past `keep_spans` or `max_age_secs`.
    fn age_out(&mut self, now_ms: u64, cfg: &PricingConfig) {
        let max_age_ms = cfg.max_age_secs * 1000;
        while self.spans.len() > cfg.keep_spans as usize
            || self
                .spans
                .front()
                .is_some_and(|(at, _, _)| now_ms.saturating_sub(*at) > max_age_ms)
        {
            self.spans.pop_front();
        }
    }

    /// Prices each class whose bios the newest span holds, from the pooled spans of the
    /// same workload shape for that class: a price measured on another shape is replaced
    /// (aged out), not pooled with this one. Returns the classes whose price changed.
    fn reprice(&mut self, now_ms: u64, cfg: &PricingConfig) -> Vec<Repriced> {
        self.age_out(now_ms, cfg);
        let Some((_, _, newest)) = self.spans.back().copied() else {
            return Vec::new();
        };
        let mut out = Vec::new();
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
            self.prices[k] = Some(SlotPrice {
                shape,
                price: fresh,
                spans,
            });
            if before.map(|b| (b.shape, b.price)) == Some((shape, fresh)) {
                continue;
            }
            if let Some(l3) = fresh.levels[3] {
                out.push(Repriced {
                    slot: k,
                    shape,
                    l3,
                    spans,
                    aged_out: before.filter(|b| b.shape != shape).map(|b| b.shape),
                });
            }
        }
        out
    }

    /// A device's table at `bios_per_sec`, for a device whose workload has `shape` (None:
    /// not known yet, the class's price is taken as it is).
    pub fn worth(
        &self,
        scheduler: Option<Scheduler>,
        shape: Option<Shape>,
        bios_per_sec: f64,
        cfg: &PricingConfig,
    ) -> Worth {
        if let SamplerState::Failed { .. } = self.state {
            return Worth::unknown(UnknownWhy::NoSampler);
        }
        let Some(p) = self.prices[slot_of(scheduler)] else {
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
        worth_live(Some(&p.price), scheduler, bios_per_sec, cfg.floor())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pricing::worth::Basis;
    use crate::sampler::Counters;

    /// A merge-path sampler that hands out the samples queued for it, one batch per drain,
    /// and the daemon's driver over it (`daemon::pricing::tick`), without its logs.
    #[derive(Default)]
    struct Sampler {
        batches: VecDeque<MergeSamples>,
        /// Enabled since the last drain: the next drain hands out a batch.
        ran: bool,
    }

    impl Sampler {
        fn drain(&mut self) -> MergeSamples {
            if !std::mem::take(&mut self.ran) {
                return MergeSamples::default();
            }
            self.batches.pop_front().unwrap_or_default()
        }
    }

    impl LivePricing {
        fn tick<'a>(
            &mut self,
            now_ms: u64,
            cfg: &PricingConfig,
            fs: &mut Sampler,
            wanted: bool,
            bios: impl Iterator<Item = TickBios<'a>>,
        ) {
            let mut plan = self.count(cfg, bios);
            if self.span_due(now_ms, cfg) {
                let samples = fs.drain();
                self.end_span(&mut plan, now_ms, cfg, samples);
            }
            if self.next_step(&plan, now_ms, wanted) == SamplerStep::Wait {
                return;
            }
            let _ = fs.drain();
            fs.ran = true;
            self.started(now_ms);
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
                scheduler: Some(Scheduler::MqDeadline),
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
        let w = p.worth(Some(Scheduler::MqDeadline), reads(), 100_000.0, &cfg);
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
        let w = p.worth(Some(Scheduler::MqDeadline), reads(), 100_000.0, &cfg);
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
            p.worth(Some(Scheduler::MqDeadline), seq, 100_000.0, &cfg)
                .basis,
            Basis::Live { .. }
        ));
        // Priced under sequential writes: not the random reads' price.
        let w = p.worth(Some(Scheduler::MqDeadline), reads(), 100_000.0, &cfg);
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
        let w = p.worth(Some(Scheduler::MqDeadline), reads(), 100_000.0, &cfg);
        assert!(matches!(w.basis, Basis::Live { .. }), "{w:?}");
        assert_eq!(
            p.worth(Some(Scheduler::MqDeadline), seq, 100_000.0, &cfg)
                .basis,
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
            p.worth(Some(Scheduler::MqDeadline), reads(), 100_000.0, &cfg)
                .basis,
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
