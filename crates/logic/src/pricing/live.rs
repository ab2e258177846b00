//! Live pricing as a pure state machine: the merge-path sampler's spans, the bios counted
//! meanwhile, and a price per device from them. The daemon drives it (`daemon::pricing`):
//! it opens, enables and drains the sampler through its `BlockFs` and feeds this machine
//! the drained samples and the time; nothing here touches the sampler or reads a clock.
//!
//! The sampler runs for `sample_ms` every `every_ms` while a managed device below L3 is
//! busy, and only then: its cost is paid only where there is something to price. Each
//! span's samples carry the devices their tasks queued bios on (`kernel::perf`), and each
//! device's bios over the span are counted from the same ticks' diskstats deltas; a device
//! is priced from the samples tied to it ([`super::price::attribute`]) over its own bios,
//! pooled over the last `keep_spans` spans younger than `max_age_secs` in which it ran the
//! workload shape it runs now. So two devices on one scheduler doing different work each
//! get their own price, whatever the other does (docs/policy.md, "Pricing the merge
//! path"). At L3 nothing is sampled for that device (its merge path is skipped), so the
//! price from its last time below L3 stands.
//!
//! The sampler's own cost is bounded per device: spans follow each other at once only
//! until a busy device's workload has a price that decides, or [`FIRST_PRICE_MAX_SPANS`]
//! spans, once per workload shape; a shape is the device's only after it held for
//! [`SHAPE_SETTLE_MS`] ([`ShapeHysteresis`]), so a size class flipping between neighbours
//! neither ages the price out nor starts sampling again; a price that later straddles the
//! floor waits for the duty cycle.
//!
//! One tick of the driver is: [`LivePricing::count`] (the tick's bios), then, when
//! [`LivePricing::span_due`], stop and drain the sampler and [`LivePricing::end_span`],
//! then [`LivePricing::next_step`] says whether to open and start the next span.

use super::config::PricingConfig;
use super::floor::SavingFloor;
use super::price::{
    ClassPrice, DeviceBios, DeviceSamples, MIN_SAMPLES, Shape, SpanBios, attribute, price_device,
    worth_live,
};
use crate::decision::Level;
use crate::pricing::worth::{UnknownWhy, Worth};
use mergetune_kernel::perf::MergeSamples;
use mergetune_kernel::scheduler::Scheduler;
use std::collections::{BTreeMap, VecDeque};
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

/// A device's workload shape with hysteresis: the shape its price is kept under changes
/// only when another shape held for [`SHAPE_SETTLE_MS`] without a break. Batched
/// sequential writes whose size class flips between "<= 4 KiB" and "4-16 KiB" from one
/// window to the next keep their first shape and their price.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShapeHysteresis {
    settled: Option<Shape>,
    /// Another shape, seen without a break since this time.
    candidate: Option<(Shape, u64)>,
}

/// How long another workload shape must hold before a device's price is for it: ten of the
/// default 1 s windows.
pub const SHAPE_SETTLE_MS: u64 = 10_000;

impl ShapeHysteresis {
    /// The shape the device's price is kept under.
    pub fn settled(&self) -> Option<Shape> {
        self.settled
    }

    /// Notes the device's last window's `shape` at `now_ms`; true when the settled shape
    /// changed to another (not on the first one).
    pub fn observe(&mut self, shape: Shape, now_ms: u64) -> bool {
        let Some(settled) = self.settled else {
            self.settled = Some(shape);
            return false;
        };
        if shape == settled {
            self.candidate = None;
            return false;
        }
        match self.candidate {
            Some((c, since)) if c == shape => {
                if now_ms.saturating_sub(since) < SHAPE_SETTLE_MS {
                    return false;
                }
                self.settled = Some(shape);
                self.candidate = None;
                true
            }
            _ => {
                self.candidate = Some((shape, now_ms));
                false
            }
        }
    }
}

/// One device's price and what it was measured on.
#[derive(Debug, Clone, Copy, PartialEq)]
struct DevicePrice {
    /// The workload shape of the spans pooled into it.
    shape: Shape,
    price: ClassPrice,
    /// Spans pooled.
    spans: u32,
    /// Merge-path samples that may be this device's or another's (in the upper bound only).
    maybe: u64,
}

/// What live pricing keeps of one device.
#[derive(Debug, Clone, Default)]
struct DeviceState {
    managed: bool,
    shape: ShapeHysteresis,
    price: Option<DevicePrice>,
    /// Spans started at once for this shape's first price.
    first_spans: u32,
    /// A price for the settled shape decided (cleared when the shape changes): later spans
    /// keep to the duty cycle.
    decided: bool,
    last_seen_ms: u64,
}

/// The live measurement and its prices.
#[derive(Debug, Clone)]
pub struct LivePricing {
    state: SamplerState,
    spans: VecDeque<(u64, MergeSamples, SpanBios)>,
    devices: BTreeMap<String, DeviceState>,
    /// Spans dropped because a reset, a new device or a level change overlapped them.
    dropped_spans: u64,
    /// Spans started so far.
    started_spans: u64,
    /// Why samples cannot be tied to devices here, once said.
    attribution_said: bool,
}

/// A span is due this fraction of `sample_ms` early (1/10: 100 ms of a 1 s span).
const SPAN_EARLY_DIV: u64 = 10;

/// A failed open is tried again after this long.
pub const RETRY_OPEN_MS: u64 = 600_000;

/// While a busy device's workload has no price that decides, spans follow each other
/// without the duty cycle's pause, up to this many for one workload shape: a first price
/// within seconds of a busy device appearing (at 1 s spans and 1 ms periods, random 4 KiB
/// reads on a loop device at 200,000 bios/s give about 6 merge-path samples a span, and a
/// price needs 10), for at most this many seconds of continuous sampling (docs/policy.md,
/// "What the sampler costs").
pub const FIRST_PRICE_MAX_SPANS: u32 = 10;

impl Default for LivePricing {
    fn default() -> Self {
        LivePricing {
            state: SamplerState::Closed,
            spans: VecDeque::new(),
            devices: BTreeMap::new(),
            dropped_spans: 0,
            started_spans: 0,
            attribution_said: false,
        }
    }
}

/// One device's share of a tick, for the span's bios.
pub struct TickBios<'a> {
    pub name: &'a str,
    /// Managed: only these are priced (the others' bios are counted, as candidates for
    /// the samples).
    pub managed: bool,
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

/// What [`LivePricing::count`] learnt of a tick, for the rest of it: the busy devices
/// (managed, below L3, with a busy window) and their bios/s, kept to ask again after a
/// span ends and reprices.
#[derive(Debug, Clone, Default)]
pub struct TickPlan {
    busy: Vec<(String, f64)>,
    /// The busy devices whose workload wants its first price.
    first_price: Vec<String>,
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
    /// Pooled; the devices whose price changed, and, the first time, why no sample could
    /// be tied to a device here.
    Pooled {
        repriced: Vec<Repriced>,
        unattributable: Option<String>,
    },
}

/// A device's new price, as the log says it.
#[derive(Debug, Clone, PartialEq)]
pub struct Repriced {
    device: String,
    slot: usize,
    shape: Shape,
    l3: super::price::NsPerBio,
    spans: u32,
    maybe: u64,
    /// The shape whose price this one replaced.
    aged_out: Option<Shape>,
}

impl fmt::Display for Repriced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (l3, spans) = (self.l3, self.spans);
        write!(
            f,
            "{}: merge path on {} under {}: {:.0} ns per bio [{:.0}, {:.0}] (95%), {} samples over {} bios in {spans} span{}",
            self.device,
            Scheduler::ALL[self.slot].name(),
            self.shape,
            l3.estimate,
            l3.lo,
            l3.hi,
            l3.samples,
            l3.bios,
            if spans == 1 { "" } else { "s" },
        )?;
        if self.maybe > 0 {
            write!(
                f,
                "; {} more may be this device's or another's on the same scheduler (counted in the upper bound only)",
                self.maybe
            )?;
        }
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

/// Whether a price decides at `bios_per_sec`: resolved, and its saving's interval wholly on
/// one side of the floor (a first span of 10 samples priced "42 ns per bio [17, 94]", at
/// 285,000 bios/s [4.9, 27] ms/s against 5: it straddles).
fn decides(p: &ClassPrice, bios_per_sec: f64, floor: SavingFloor) -> bool {
    p.levels[3].is_some_and(|l3| {
        let lo = l3.lo * bios_per_sec / 1e6;
        let hi = l3.hi * bios_per_sec / 1e6;
        l3.resolved() && (lo >= floor.ms_per_sec() || hi < floor.ms_per_sec())
    })
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

    /// Spans started so far: the sampler's cost is this many times `sample_ms`.
    pub fn started_spans(&self) -> u64 {
        self.started_spans
    }

    /// Counts a tick's bios into the span in progress, notes each busy device's workload
    /// shape at `now_ms`, and the busy devices.
    pub fn count<'a>(
        &mut self,
        cfg: &PricingConfig,
        now_ms: u64,
        bios: impl Iterator<Item = TickBios<'a>>,
    ) -> TickPlan {
        let mut busy = Vec::new();
        for b in bios {
            if b.managed {
                let d = match self.devices.get_mut(b.name) {
                    Some(d) => d,
                    None => self.devices.entry(b.name.to_string()).or_default(),
                };
                d.managed = true;
                d.last_seen_ms = now_ms;
                if let Some(shape) = b.busy_shape {
                    if !d.decided && d.shape.settled().is_some_and(|s| s != shape) {
                        // No price has decided yet: the shape follows the workload at once
                        // (a first window that caught the tail of other I/O is not kept for
                        // 10 s), and the first-price spans already taken still count.
                        d.shape = ShapeHysteresis::default();
                        d.shape.observe(shape, now_ms);
                    } else if d.shape.observe(shape, now_ms) {
                        // The device's own workload changed: its first price again.
                        d.first_spans = 0;
                        d.decided = false;
                    }
                    busy.push((b.name.to_string(), b.busy_bios_per_sec));
                }
            }
            if let SamplerState::Sampling {
                since_ms,
                bios: acc,
                disturbed,
            } = &mut self.state
            {
                *disturbed |= b.level_since_ms.is_some_and(|t| t > *since_ms);
                match b.counters {
                    Some(c) => acc.add_device(b.name, b.scheduler, b.level, c.bios()),
                    None => *disturbed = true,
                }
            }
        }
        // A device gone for longer than a price lives is forgotten.
        let max_age_ms = cfg.max_age_secs * 1000;
        self.devices
            .retain(|_, d| now_ms.saturating_sub(d.last_seen_ms) <= max_age_ms);
        let first_price = self.wants_first_price(&busy, cfg.floor());
        TickPlan {
            busy,
            first_price,
            ended: false,
        }
    }

    /// Whether the span in progress has run its `sample_ms`: the driver then disables and
    /// drains the sampler and hands the samples to [`LivePricing::end_span`].
    /// A tick a few ms early counts as on time (ticks follow the wall clock, and a span
    /// begun at one tick was otherwise ended only at the tick after next: 2 s per 1 s span
    /// while a first price was wanted); the price divides the samples by the bios counted
    /// over the same ticks, so the span's exact length does not enter it.
    pub fn span_due(&self, now_ms: u64, cfg: &PricingConfig) -> bool {
        matches!(self.state, SamplerState::Sampling { since_ms, .. }
            if now_ms.saturating_sub(since_ms) >= cfg.sample_ms - cfg.sample_ms / SPAN_EARLY_DIV)
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
            let unattributable = match &samples.attribution_error {
                Some(why) if !self.attribution_said => {
                    self.attribution_said = true;
                    Some(why.clone())
                }
                _ => None,
            };
            // Each device's bios are kept under the shape its price is for.
            for (name, d) in &mut span.devices {
                d.shape = self.devices.get(name).and_then(|s| s.shape.settled());
            }
            self.spans.push_back((now_ms, samples, span));
            SpanEnd::Pooled {
                repriced: self.reprice(now_ms, cfg),
                unattributable,
            }
        };
        self.state = SamplerState::Idle {
            next_at_ms: now_ms + cfg.every_ms.saturating_sub(cfg.sample_ms),
        };
        plan.first_price = self.wants_first_price(&plan.busy, cfg.floor());
        plan.ended = true;
        end
    }

    /// Whether to start a span now: when `wanted` (a managed device below L3 is busy) and
    /// due, at once while a busy device's workload wants its first price
    /// ([`FIRST_PRICE_MAX_SPANS`]), also right after a span that was dropped or did not
    /// resolve it.
    pub fn next_step(&mut self, plan: &TickPlan, now_ms: u64, wanted: bool) -> SamplerStep {
        let first_price = !plan.first_price.is_empty();
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
        for name in &plan.first_price {
            if let Some(d) = self.devices.get_mut(name) {
                d.first_spans += 1;
            }
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
        self.started_spans += 1;
        self.state = SamplerState::Sampling {
            since_ms: now_ms,
            bios: Box::default(),
            disturbed: false,
        };
    }

    /// The busy devices (`busy`: name and bios/s) whose workload wants its first price: no
    /// price for its settled shape that decides at its rate, none that decided since the
    /// shape settled, and fewer than [`FIRST_PRICE_MAX_SPANS`] spans started at once for
    /// it. A price that decided once and straddles later waits for the duty cycle.
    fn wants_first_price(&mut self, busy: &[(String, f64)], floor: SavingFloor) -> Vec<String> {
        let mut out = Vec::new();
        for (name, bios_per_sec) in busy {
            let Some(d) = self.devices.get_mut(name) else {
                continue;
            };
            let settled = d.shape.settled();
            if d.price.is_some_and(|p| {
                Some(p.shape) == settled && decides(&p.price, *bios_per_sec, floor)
            }) {
                d.decided = true;
            }
            if !d.decided && d.first_spans < FIRST_PRICE_MAX_SPANS {
                out.push(name.clone());
            }
        }
        out
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

    /// Prices each managed device whose bios went through the merge path in the newest
    /// span, from the pooled spans in which it ran its settled shape: a price measured on
    /// another shape is replaced (aged out), not pooled with this one. Returns the devices
    /// whose price changed.
    fn reprice(&mut self, now_ms: u64, cfg: &PricingConfig) -> Vec<Repriced> {
        self.age_out(now_ms, cfg);
        let Some((_, _, newest)) = self.spans.back() else {
            return Vec::new();
        };
        let names: Vec<(String, DeviceBios)> = newest
            .devices
            .iter()
            .filter(|(n, d)| {
                d.merge_path > 0
                    && d.shape.is_some()
                    && self.devices.get(*n).is_some_and(|s| s.managed)
            })
            .map(|(n, d)| (n.clone(), *d))
            .collect();
        let mut out = Vec::new();
        for (name, newest_bios) in names {
            let Some(r) = self.reprice_device(&name, newest_bios) else {
                continue;
            };
            out.push(r);
        }
        out
    }

    /// One device's new price from the spans of its settled shape (`newest`: its bios in
    /// the newest span); None when unchanged.
    fn reprice_device(&mut self, name: &str, newest: DeviceBios) -> Option<Repriced> {
        let shape = newest.shape?;
        let mut samples = DeviceSamples::default();
        let mut bios = DeviceBios::default();
        let mut spans = 0u32;
        let mut period_ns = 0;
        for (_, s, b) in &self.spans {
            let Some(d) = b.devices.get(name).filter(|d| d.shape == Some(shape)) else {
                continue;
            };
            samples.add(&attribute(name, s, b));
            bios.add(d);
            spans += 1;
            period_ns = s.period_ns;
        }
        let fresh = price_device(period_ns, &samples, &bios)?;
        let state = self.devices.get_mut(name)?;
        let before = state.price;
        state.price = Some(DevicePrice {
            shape,
            price: fresh,
            spans,
            maybe: samples.maybe.merge_path,
        });
        if before.map(|b| (b.shape, b.price)) == Some((shape, fresh)) {
            return None;
        }
        Some(Repriced {
            device: name.to_string(),
            slot: newest.slot,
            shape,
            l3: fresh.levels[3]?,
            spans,
            maybe: samples.maybe.merge_path,
            aged_out: before.filter(|b| b.shape != shape).map(|b| b.shape),
        })
    }

    /// Device `name`'s table at `bios_per_sec`, for the workload shape it has settled on.
    pub fn worth(
        &self,
        name: &str,
        scheduler: Option<Scheduler>,
        bios_per_sec: f64,
        cfg: &PricingConfig,
    ) -> Worth {
        if let SamplerState::Failed { .. } = self.state {
            return Worth::unknown(UnknownWhy::NoSampler);
        }
        let Some(d) = self.devices.get(name) else {
            return Worth::unknown(UnknownWhy::NotMeasuredYet);
        };
        let Some(p) = d.price else {
            return Worth::unknown(UnknownWhy::NotMeasuredYet);
        };
        if d.shape.settled().is_some_and(|s| s != p.shape) {
            return Worth::unknown(UnknownWhy::OtherWorkload);
        }
        if let Some(l3) = p.price.levels[3].filter(|l3| !l3.resolved()) {
            if p.maybe >= MIN_SAMPLES {
                return Worth::unknown(UnknownWhy::Unattributed {
                    samples: l3.samples,
                    shared: p.maybe,
                });
            }
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
    use super::super::fixtures::samples_of;
    use super::*;
    use crate::pricing::worth::Basis;
    use crate::sampler::Counters;
    use mergetune_kernel::perf::PathCounts;

    /// A merge-path sampler that hands out the samples queued for it, one batch per drain
    /// (the default batch once they run out), and the daemon's driver over it
    /// (`daemon::pricing::tick`), without its logs.
    #[derive(Default)]
    struct Sampler {
        batches: VecDeque<MergeSamples>,
        /// Handed out once the batches run out.
        steady: MergeSamples,
        /// Enabled since the last drain: the next drain hands out a batch.
        ran: bool,
    }

    impl Sampler {
        /// Hands out `samples` at every drain after a run.
        fn steady(samples: MergeSamples) -> Sampler {
            Sampler {
                steady: samples,
                ..Default::default()
            }
        }

        /// Hands out each of `batches` in turn, one per drain after a run, then empty ones.
        fn batches<const N: usize>(batches: [MergeSamples; N]) -> Sampler {
            Sampler {
                batches: batches.into(),
                ..Default::default()
            }
        }

        fn drain(&mut self) -> MergeSamples {
            if !std::mem::take(&mut self.ran) {
                return MergeSamples::default();
            }
            self.batches
                .pop_front()
                .unwrap_or_else(|| self.steady.clone())
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
            let mut plan = self.count(cfg, now_ms, bios);
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

    /// Merge-path samples, 1 ms each: per (device whose task took them, slot, count).
    fn samples(of: &[(&str, usize, u64)]) -> MergeSamples {
        let mut s = MergeSamples {
            period_ns: 1_000_000,
            ..Default::default()
        };
        for &(dev, slot, n) in of {
            s.add(&samples_of(&[dev], slot, n));
        }
        s
    }

    /// `n` merge-path samples of mq-deadline taken by loop0's task.
    fn mq_deadline_samples(n: u64) -> MergeSamples {
        samples(&[("loop0", 1, n)])
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

    /// One device in a tick: name, scheduler, counters (None: a reset), managed.
    struct Dev {
        name: &'static str,
        scheduler: Scheduler,
        counters: Option<Counters>,
        managed: bool,
    }

    fn dev(name: &'static str, scheduler: Scheduler, counters: Counters) -> Dev {
        Dev {
            name,
            scheduler,
            counters: Some(counters),
            managed: true,
        }
    }

    /// Runs the pricing one tick a second from `t0` for `ticks` ticks, the devices of
    /// `devs(tick)` at L0, their level last changed at `level_since_ms`.
    fn run_with(
        p: &mut LivePricing,
        fs: &mut Sampler,
        t0: u64,
        ticks: u64,
        level_since_ms: u64,
        devs: impl Fn(u64) -> Vec<Dev>,
    ) -> u64 {
        let cfg = PricingConfig::default();
        let mut now = t0;
        for i in 0..ticks {
            let ds = devs(i);
            let bios = ds.iter().map(|d| TickBios {
                name: d.name,
                managed: d.managed,
                scheduler: Some(d.scheduler),
                level: Level::L0,
                counters: d.counters.as_ref(),
                level_since_ms: d.managed.then_some(level_since_ms),
                busy_shape: d
                    .counters
                    .as_ref()
                    .filter(|_| d.managed)
                    .and_then(Shape::of_counters),
                busy_bios_per_sec: d.counters.map_or(0.0, |c| c.bios() as f64),
            });
            p.tick(now, &cfg, fs, true, bios);
            now += 1000;
        }
        now
    }

    /// [`run_with`] for loop0 alone on mq-deadline with `counters` each tick.
    fn run(
        p: &mut LivePricing,
        fs: &mut Sampler,
        t0: u64,
        ticks: u64,
        counters: Option<Counters>,
        level_since_ms: u64,
    ) -> u64 {
        run_with(p, fs, t0, ticks, level_since_ms, |_| {
            vec![Dev {
                name: "loop0",
                scheduler: Scheduler::MqDeadline,
                counters,
                managed: true,
            }]
        })
    }

    fn worth0(p: &LivePricing, rate: f64) -> Worth {
        p.worth(
            "loop0",
            Some(Scheduler::MqDeadline),
            rate,
            &PricingConfig::default(),
        )
    }

    /// One more second of random reads at 100,000 bios/s, after which loop0 is priced.
    #[track_caller]
    fn assert_priced_a_second_later(p: &mut LivePricing, fs: &mut Sampler, now: u64) {
        run(p, fs, now, 1, Some(tick_of(100_000, false)), 0);
        let w = worth0(p, 100_000.0);
        assert!(matches!(w.basis, Basis::Live { .. }), "{w:?}");
    }

    #[test]
    fn a_first_price_comes_from_spans_back_to_back_and_says_how_far_it_is() {
        let mut p = LivePricing::default();
        // 6 samples a span: under the 10 a price needs after one span, resolved after two.
        let mut fs = Sampler::batches([6, 6, 6].map(mq_deadline_samples));
        let now = run(&mut p, &mut fs, 0, 2, Some(tick_of(100_000, false)), 0);
        let w = worth0(&p, 100_000.0);
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
        assert_priced_a_second_later(&mut p, &mut fs, now);
    }

    #[test]
    fn a_price_belongs_to_the_workload_shape_it_was_measured_on() {
        let mut p = LivePricing::default();
        let mut fs = Sampler::steady(mq_deadline_samples(40));
        let now = run(&mut p, &mut fs, 0, 2, Some(tick_of(100_000, true)), 0);
        assert!(matches!(worth0(&p, 100_000.0).basis, Basis::Live { .. }));
        // Random reads for less than the settling time: still the sequential price.
        let now = run(&mut p, &mut fs, now, 5, Some(tick_of(100_000, false)), 0);
        assert!(matches!(worth0(&p, 100_000.0).basis, Basis::Live { .. }));
        assert_eq!(
            p.devices["loop0"].shape.settled(),
            Shape::of_counters(&tick_of(1, true))
        );
        // Once they held: not the sequential writes' price any more...
        let now = run(&mut p, &mut fs, now, 6, Some(tick_of(100_000, false)), 0);
        let w = worth0(&p, 100_000.0);
        assert_eq!(
            w.basis,
            Basis::Unknown {
                why: UnknownWhy::OtherWorkload
            },
            "{w:?}"
        );
        assert!(
            w.keeps(Level::L3) && !w.worth(Level::L3),
            "pending: no step"
        );
        // ...and the span started then prices them a second later, not after the duty cycle.
        assert_priced_a_second_later(&mut p, &mut fs, now);
    }

    #[test]
    fn spans_over_a_reset_or_a_level_change_are_dropped_not_pooled() {
        let mut p = LivePricing::default();
        // A reset: the tick's bios are unknown while the samples ran on (an inflated price).
        let mut fs = Sampler::batches([500, 500].map(mq_deadline_samples));
        let now = run(&mut p, &mut fs, 0, 1, Some(tick_of(100_000, false)), 0);
        let now = run(&mut p, &mut fs, now, 1, None, 0);
        assert_eq!(p.dropped_spans, 1);
        assert_eq!(
            worth0(&p, 100_000.0).basis,
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
            p.devices.values().all(|d| d.price.is_none()),
            "nothing pooled: {:?}",
            p.devices
        );
    }

    /// loop0 under random 4 KiB reads and loop1 under 128 KiB writes, both on mq-deadline.
    fn reads_beside_writes(_: u64) -> Vec<Dev> {
        vec![
            dev("loop0", Scheduler::MqDeadline, tick_of(200_000, false)),
            dev("loop1", Scheduler::MqDeadline, tick_of(20_000, true)),
        ]
    }

    #[test]
    fn two_devices_on_one_scheduler_doing_different_work_each_get_their_own_price() {
        let mut p = LivePricing::default();
        // Per 1 s span: 8 samples of loop0's task (40 ns per bio), 6 of loop1's (300 ns).
        let mut fs = Sampler::steady(samples(&[("loop0", 1, 8), ("loop1", 1, 6)]));
        run_with(&mut p, &mut fs, 0, 4, 0, reads_beside_writes);
        let cfg = PricingConfig::default();
        let w0 = p.worth("loop0", Some(Scheduler::MqDeadline), 200_000.0, &cfg);
        let w1 = p.worth("loop1", Some(Scheduler::MqDeadline), 20_000.0, &cfg);
        let ms = |w: &Worth| w.saving(Level::L3).map(|s| s.value);
        // 40 ns x 200,000 bios/s = 8 ms/s; 300 ns x 20,000 bios/s = 6 ms/s
        assert!(ms(&w0).is_some_and(|v| (v - 8.0).abs() < 1e-6), "{w0:?}");
        assert!(ms(&w1).is_some_and(|v| (v - 6.0).abs() < 1e-6), "{w1:?}");
    }

    #[test]
    fn samples_that_cannot_be_told_apart_leave_both_devices_unknown_and_say_why() {
        let mut p = LivePricing::default();
        // A sampler without bio events: nobody named, two candidates on one scheduler.
        let mut fs = Sampler::steady(samples(&[("", 1, 20)]));
        fs.steady.by_submitter = [(Vec::new(), {
            let mut c = [PathCounts::default(); 4];
            c[1].merge_path = 20;
            c
        })]
        .into();
        // Comparable loads: neither holds the bios that would make it the samples' owner.
        run_with(&mut p, &mut fs, 0, 4, 0, |_| {
            vec![
                dev("loop0", Scheduler::MqDeadline, tick_of(200_000, false)),
                dev("loop1", Scheduler::MqDeadline, tick_of(100_000, true)),
            ]
        });
        let w0 = worth0(&p, 200_000.0);
        assert!(
            matches!(
                w0.basis,
                Basis::Unknown {
                    why: UnknownWhy::Unattributed { samples: 0, .. }
                }
            ),
            "{w0:?}"
        );
    }

    /// Spans started over `secs` seconds of `devs`, after the first `settle` seconds.
    fn spans_over(
        fs: &mut Sampler,
        settle: u64,
        secs: u64,
        devs: impl Fn(u64) -> Vec<Dev> + Copy,
    ) -> (LivePricing, u64) {
        let mut p = LivePricing::default();
        let now = run_with(&mut p, fs, 0, settle, 0, devs);
        let before = p.started_spans();
        run_with(&mut p, fs, now, secs, 0, move |i| devs(settle + i));
        let n = p.started_spans() - before;
        (p, n)
    }

    #[test]
    fn a_size_class_flipping_between_neighbours_keeps_the_price_and_the_duty_cycle() {
        // Batched sequential writes: 4 KiB bios one window, 8 KiB the next.
        let flipping = |i: u64| {
            let c = Counters {
                writes_completed: 50_000,
                sectors_written: 50_000 * if i.is_multiple_of(2) { 8 } else { 16 },
                ..Default::default()
            };
            vec![dev("loop0", Scheduler::MqDeadline, c)]
        };
        let mut fs = Sampler::steady(mq_deadline_samples(40));
        let (p, spans) = spans_over(&mut fs, 20, 600, flipping);
        // 600 s at 1 s per 60 s: 10 spans, 11 at the edges.
        assert!(spans <= 11, "{spans} spans in 600 s");
        assert!(
            matches!(worth0(&p, 50_000.0).basis, Basis::Live { .. }),
            "the price did not age out"
        );
    }

    #[test]
    fn a_saving_flipping_between_deciding_and_straddling_keeps_the_duty_cycle() {
        // 12 samples over 100,000 bios a span (120 ns per bio, [62, 210]): at 100,000
        // bios/s the saving's interval [6.2, 21] ms/s clears a 5 ms/s floor, at 50,000 bios/s
        // [3.1, 10.5] straddles it; the rate flips every 30 s.
        let flipping = |i: u64| {
            let rate = if (i / 30).is_multiple_of(2) {
                100_000
            } else {
                50_000
            };
            vec![dev("loop0", Scheduler::MqDeadline, tick_of(rate, false))]
        };
        let mut fs = Sampler::steady(mq_deadline_samples(12));
        let (_, spans) = spans_over(&mut fs, 20, 600, flipping);
        assert!(spans <= 11, "{spans} spans in 600 s");
    }

    #[test]
    fn only_managed_devices_are_priced() {
        let mut p = LivePricing::default();
        let mut fs = Sampler::steady(samples(&[("nvme0n1", 0, 30), ("sda", 1, 30)]));
        run_with(&mut p, &mut fs, 0, 3, 0, |_| {
            vec![
                dev("nvme0n1", Scheduler::None, tick_of(100_000, false)),
                Dev {
                    managed: false,
                    ..dev("sda", Scheduler::MqDeadline, tick_of(100_000, true))
                },
            ]
        });
        assert!(p.devices.contains_key("nvme0n1"));
        assert!(!p.devices.contains_key("sda"), "{:?}", p.devices);
    }
}
