//! The driver of live pricing: it opens, enables and drains the merge-path sampler
//! (`MergeSampler`, `kernel::perf` on a real machine, the simulator's own
//! accounting in virtual time) and feeds the pure state machine
//! (`logic::pricing::live::LivePricing`) the drained samples and the time, and logs what
//! it did. Which prices a device gets, and from what, is `logic::pricing`.

use mergetune_kernel::blockfs::MergeSampler;
use mergetune_logic::config::Config;
use mergetune_logic::pricing::config::PricingConfig;
use mergetune_logic::pricing::live::{
    FIRST_PRICE_MAX_SPANS, LivePricing, RETRY_OPEN_MS, SamplerStep, SpanEnd, TickBios,
};
use mergetune_logic::pricing::source::PricingSource;
use tracing::{debug, info, warn};

/// The config's pricing; a profile file that cannot be read any more (it was checked when
/// the config was loaded) leaves pricing live rather than guessed, and says so.
pub fn source(cfg: &Config) -> PricingSource {
    PricingSource::from_config(cfg).unwrap_or_else(|e| {
        warn!("{e}: measuring live instead");
        PricingSource::Live
    })
}

/// `[pricing] fallback_profile`, under live pricing; a profile file that cannot be read
/// any more (it was checked when the config was loaded) leaves none, and says so.
pub fn fallback(cfg: &Config) -> Option<PricingSource> {
    PricingSource::fallback_from_config(cfg).unwrap_or_else(|e| {
        warn!("[pricing] fallback_profile: {e}: no fallback while the sampler cannot run");
        None
    })
}

/// One tick of live pricing: count the bios of a span in progress, end it when due, start
/// the next when `wanted` (a managed device below L3 is busy) and due.
pub fn tick<'a>(
    live: &mut LivePricing,
    now_ms: u64,
    cfg: &PricingConfig,
    fs: &mut dyn MergeSampler,
    wanted: bool,
    bios: impl Iterator<Item = TickBios<'a>>,
) {
    let mut plan = live.count(cfg, now_ms, bios);
    if live.span_due(now_ms, cfg) {
        fs.merge_sampler_enable(false);
        let samples = fs.merge_sampler_drain();
        match live.end_span(&mut plan, now_ms, cfg, samples) {
            SpanEnd::Dropped { span_ms } => debug!(
                "merge-path span of {span_ms} ms dropped: a device's counters reset, a device appeared, or a device changed level during it"
            ),
            SpanEnd::Pooled {
                repriced,
                unattributable,
            } => {
                if let Some(why) = unattributable {
                    warn!(
                        "merge-path samples cannot be tied to devices here ({why}): a device is priced only where it is the only busy one on its scheduler"
                    );
                }
                for r in repriced {
                    info!("{r}");
                }
            }
        }
    }
    match live.next_step(&plan, now_ms, wanted) {
        SamplerStep::Wait => return,
        SamplerStep::Open => {
            if let Err(e) = fs.merge_sampler_open(cfg.period_us * 1000) {
                note_unavailable(live, now_ms, e.to_string());
                return;
            }
            info!(
                "merge-path sampler: cpu-clock every {} µs of CPU, {} ms every {} ms while a device below L3 is busy (back to back, up to {FIRST_PRICE_MAX_SPANS} spans, while a busy device's workload has no price, once per workload)",
                cfg.period_us, cfg.sample_ms, cfg.every_ms
            );
        }
        SamplerStep::Start => {}
    }
    let _ = fs.merge_sampler_drain();
    fs.merge_sampler_enable(true);
    live.started(now_ms);
    debug!("merge-path span {} started", live.started_spans());
}

/// Opens the merge-path sampler once at start (it stays disabled until a span), so that a
/// host where it cannot run says so at start, in one warning with the fix, and in
/// `status` and /metrics from the first tick, not at the first busy device.
pub fn check_at_start(
    live: &mut LivePricing,
    now_ms: u64,
    cfg: &PricingConfig,
    fs: &mut dyn MergeSampler,
) {
    match fs.merge_sampler_open(cfg.period_us * 1000) {
        Ok(()) => {
            info!("merge-path sampler: available (idle until a managed device below L3 is busy)")
        }
        Err(e) => note_unavailable(live, now_ms, e.to_string()),
    }
}

/// The sampler did not open: the state remembers why, and a new reason is one warning.
fn note_unavailable(live: &mut LivePricing, now_ms: u64, why: String) {
    if live.open_failed(now_ms, why.clone()) {
        warn!(
            "merge-path sampler unavailable: {why}; no device steps down on a live price (retried every {} min while a device is busy)",
            RETRY_OPEN_MS / 60_000
        );
    }
}
