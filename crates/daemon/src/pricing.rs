//! What a step down would save, per device, as the daemon knows it: measured live on this
//! host (the default) or read from a cost profile that matches the device.
//!
//! Live: the merge-path sampler (`BlockFs::merge_sampler_*`, `kernel::perf` on a real
//! machine, the simulator's own accounting in virtual time) runs for `sample_ms` every
//! `every_ms` while a managed device below L3 is busy, and only then: its cost is paid only
//! where there is something to price. Each span's samples and the bios that went through
//! the merge path meanwhile (per scheduler class and level, from the same ticks' diskstats
//! deltas) are pooled over the last `keep_spans` spans younger than `max_age_secs`, and
//! priced by `logic::merge_cost`. A device's table is then its class's ns per bio times its
//! own bios/s, against the floor. At L3 nothing is sampled for that device (its merge path
//! is skipped), so the price from its last time below L3 stands.

use mergetune_kernel::blockfs::BlockFs;
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
        bios: SpanBios,
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
    /// Spans taken back to back so far while a busy class had no resolved price.
    first_price_spans: u32,
    /// Spans dropped because a reset or a level change overlapped them.
    pub dropped_spans: u64,
}

/// A failed open is tried again after this long.
const RETRY_OPEN_MS: u64 = 600_000;

/// While a busy scheduler class has no resolved price for its workload, spans follow each
/// other without the duty cycle's pause, up to this many in a row: a first price within
/// seconds of a busy device appearing (at 1 s spans and 1 ms periods, random 4 KiB reads
/// on a loop device at 200,000 bios/s give about 6 merge-path samples a span, and a price
/// needs 10), for at most this many seconds of continuous sampling (docs/policy.md, "What
/// the sampler costs": about 1.6% of each CPU while it runs).
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
}

impl LivePricing {
    /// Whether the sampler cannot run here.
    pub fn unavailable(&self) -> bool {
        matches!(self.state, SamplerState::Failed { .. })
    }

    /// One tick: count the bios of a span in progress, end it when due, start the next
    /// when `wanted` (a managed device below L3 is busy) and due.
    pub fn tick<'a>(
        &mut self,
        now_ms: u64,
        cfg: &PricingConfig,
        fs: &mut dyn BlockFs,
        wanted: bool,
        bios: impl Iterator<Item = TickBios<'a>>,
    ) {
        match &mut self.state {
            SamplerState::Sampling {
                since_ms,
                bios: acc,
                disturbed,
            } => {
                for b in bios {
                    *disturbed |= b.level_since_ms.is_some_and(|t| t > *since_ms);
                    match b.counters {
                        Some(c) => acc.add_device(
                            b.scheduler,
                            b.level,
                            c.bios(),
                            c.read_bios(),
                            c.sectors_read + c.sectors_written,
                        ),
                        None => *disturbed = true,
                    }
                }
                if now_ms.saturating_sub(*since_ms) >= cfg.sample_ms {
                    fs.merge_sampler_enable(false);
                    let samples = fs.merge_sampler_drain();
                    let mut span = *acc;
                    span.span_ms = now_ms.saturating_sub(*since_ms);
                    let span_disturbed = *disturbed;
                    if span_disturbed {
                        // Its samples ran over bios that were not all counted (a reset) or
                        // over two levels' paths (a change): pooled, they would inflate the
                        // price (seen on 6.12: 1.7-1.9 times calibrate's).
                        self.dropped_spans += 1;
                        debug!(
                            "merge-path span of {} ms dropped: a device's counters reset or a device changed level during it",
                            span.span_ms
                        );
                    } else {
                        self.spans.push_back((now_ms, samples, span));
                        self.reprice(now_ms, cfg);
                    }
                    let again = self.wants_first_price(&span, span_disturbed);
                    self.state = SamplerState::Idle {
                        next_at_ms: if again {
                            now_ms
                        } else {
                            now_ms + cfg.every_ms.saturating_sub(cfg.sample_ms)
                        },
                    };
                }
                return;
            }
            SamplerState::Failed { retry_at_ms, .. } if now_ms < *retry_at_ms => return,
            SamplerState::Idle { next_at_ms } if now_ms < *next_at_ms => return,
            _ => {}
        }
        if !wanted {
            return;
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
                "merge-path sampler: cpu-clock every {} µs of CPU, {} ms every {} ms while a device below L3 is busy (back to back, up to {FIRST_PRICE_MAX_SPANS} spans, until a busy scheduler's workload has a price)",
                cfg.period_us, cfg.sample_ms, cfg.every_ms
            );
        }
        let _ = fs.merge_sampler_drain();
        fs.merge_sampler_enable(true);
        self.state = SamplerState::Sampling {
            since_ms: now_ms,
            bios: SpanBios::default(),
            disturbed: false,
        };
    }

    /// Whether the next span should follow at once: a class whose bios went through the
    /// merge path in the span just ended has no resolved price for their shape (or the
    /// span was dropped), and fewer than [`FIRST_PRICE_MAX_SPANS`] spans were taken back to
    /// back for it.
    fn wants_first_price(&mut self, span: &SpanBios, dropped: bool) -> bool {
        let unpriced = dropped
            || (0..4).any(|k| {
                span.shape(k).is_some_and(|shape| {
                    !self.prices[k].is_some_and(|p| {
                        p.shape == shape && p.price.levels[3].is_some_and(|l3| l3.resolved())
                    })
                })
            });
        if unpriced && self.first_price_spans < FIRST_PRICE_MAX_SPANS {
            self.first_price_spans += 1;
            true
        } else {
            if !unpriced {
                self.first_price_spans = 0;
            }
            false
        }
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
                    "merge path on {} under {shape}: {:.0} ns per bio [{:.0}, {:.0}] (95%), {} samples over {} bios in {spans} spans{}{other}",
                    ["none/plug", "mq-deadline", "bfq", "kyber"][k],
                    l3.estimate,
                    l3.lo,
                    l3.hi,
                    l3.samples,
                    l3.bios,
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
