//! The rules of `advise`: from one device's figures to a merge level, a scheduler and a
//! slice setting, each with one line of evidence. Pure: a [`DeviceReport`] and the
//! policy's thresholds in, recommendations out.
//!
//! Two steps: [`trace_level`] is what the trace alone supports (the deepest level that
//! loses almost no merge); [`recommend_priced`] then asks the daemon's own rules
//! ([`super::daemon_view`](mod@super::daemon_view): the ladder of the device's scheduler and the cost profile's
//! [`Worth`]) which level the daemon would reach, recommends that one, and says so when the
//! two differ. [`recommend`] is the trace alone, unpriced, as the policy without a profile.

use super::daemon_view::{DaemonView, daemon_view};
use super::report::{DeviceReport, Recommendation, level_tunables, pct};
use mergetune_kernel::scheduler::{Reported, Scheduler};
use mergetune_logic::config::PolicyConfig;
use mergetune_logic::decision::Level;
use mergetune_logic::pricing::floor::SavingFloor;
use mergetune_logic::pricing::worth::Worth;

/// Unmerged bios below this share: the lookups a deeper level would skip cost too
/// little to matter, and L0 keeps every merge (Axboe: not merging can cost 5x).
pub const MIN_UNMERGED_PERCENT_TO_ACT: f64 = 20.0;

/// Merged bios at or above this share: merging visibly pays on the trace.
const MIN_MERGE_PERCENT_THAT_PAYS: f64 = 5.0;

/// The merge level, scheduler and slice recommendations, each with one line of evidence:
/// the recommended level and the recommendations, merge level first. From the trace alone,
/// with every level taken as worth it ([`Worth::UNPRICED`]).
pub fn recommend(r: &DeviceReport, cfg: &PolicyConfig) -> (Level, Vec<Recommendation>) {
    let (level, evidence) = trace_level(r, cfg);
    (level, recommendations(r, cfg, level, evidence))
}

/// The recommendations the daemon would stand behind: the level its rules reach on this
/// trace under `worth_of` (the cost profile's table for a scheduler), the scheduler and
/// slices for that level, a line saying whether the daemon agrees with the trace alone and
/// why not, and the warning that a value set by hand ends the daemon's management.
pub fn recommend_priced(
    r: &DeviceReport,
    cfg: &PolicyConfig,
    profile: &str,
    device_scheduler: Option<&Reported>,
    worth_of: &dyn Fn(&Reported) -> Worth,
    floor: SavingFloor,
) -> (Level, Vec<Recommendation>, DaemonView) {
    let (trace, trace_evidence) = trace_level(r, cfg);
    // The daemon acts on the scheduler the device runs (the capture's header, or
    // --scheduler); only when neither says, the one the trace alone would pick, and the
    // view says so.
    let sched = device_scheduler
        .cloned()
        .unwrap_or_else(|| scheduler_for(r, trace).0.into());
    let mut view = daemon_view(r, cfg, trace, &sched, profile, &worth_of(&sched), floor);
    if device_scheduler.is_none() {
        view.why.push_str(&format!(
            " (the device's scheduler is not known: no `# scheduler` line in the trace, no --scheduler; taken as {sched}, the trace's best fit)"
        ));
    }
    let evidence = if view.level == trace {
        trace_evidence
    } else {
        format!("{}; the trace alone: {trace_evidence}", view.why)
    };
    let mut recs = recommendations(r, cfg, view.level, evidence);
    recs.push(Recommendation {
        topic: "daemon".into(),
        setting: if view.level == trace {
            format!("agrees: it would reach {} here", view.level)
        } else {
            format!(
                "disagrees with the trace alone ({trace}): it would stay at {}",
                view.level
            )
        },
        evidence: view.why.clone(),
    });
    recs.push(Recommendation {
        topic: "by hand".into(),
        setting: "do not write these with echo while mergetune runs".into(),
        evidence: "a nomerges (or slice tunable) value set by anyone else makes the device admin-owned: mergetune leaves that device alone from then on (docs/operator.md, what it will and will not touch); to change what the daemon does, change its config or cost profile".into(),
    });
    (view.level, recs, view)
}

/// The deepest level the trace supports, with its evidence: what is lost at each level,
/// not yet what is worth it.
pub fn trace_level(r: &DeviceReport, cfg: &PolicyConfig) -> (Level, String) {
    let low = cfg.disable_below_percent;
    let high = cfg.enable_above_percent;
    let merged = r.back_merges + r.front_merges;
    let unmerged = 100.0 - r.merge_percent;
    let lost = |l: Level| r.ladder[usize::from(l.index())].lost_percent_of_bios;
    let est = if r.merges_estimated {
        " (estimated from contiguity)"
    } else {
        ""
    };
    let (level, evidence) = if merged == 0 && r.sequential_percent >= high {
        (
            Level::L0,
            format!(
                "no merges in the trace, yet {:.1}% of bios start where their task's previous one ended: merging would pay (was nomerges=2 when captured?)",
                r.sequential_percent
            ),
        )
    } else if unmerged < MIN_UNMERGED_PERCENT_TO_ACT {
        (
            Level::L0,
            format!(
                "{:.1}% of {} bios merged{est}: only {:.1}% miss, so skipping lookups saves little and every level down loses merges",
                r.merge_percent, r.bios, unmerged
            ),
        )
    } else if lost(Level::L3) < low && r.sequential_percent < high {
        (
            Level::L3,
            format!(
                "{:.2}% of {} bios merged{est} and {:.1}% are contiguous with their task's previous bio: every merge lookup misses",
                r.merge_percent, r.bios, r.sequential_percent
            ),
        )
    } else if lost(Level::L2) < low {
        (
            Level::L2,
            format!(
                "{:.1}% of bios merged{est}, {:.0}% of those simply (plug/one-hit, kept at nomerges=1); {:.1}% of bios miss and would skip the hash and tree lookups",
                r.merge_percent,
                r.ladder[usize::from(Level::L2.index())].kept_percent,
                unmerged
            ),
        )
    } else if lost(Level::L1) < low {
        (
            Level::L1,
            format!(
                "{} front merges of {} bios ({:.2}%){est}: the front-merge lookup is nearly always wasted, back merges ({:.1}% of bios) stay",
                r.front_merges,
                r.bios,
                lost(Level::L1),
                pct(r.back_merges, r.bios)
            ),
        )
    } else {
        (
            Level::L0,
            format!(
                "{:.1}% of bios merged{est}, {:.1}% through the hash or tree lookups (lost at nomerges=1): keep every merge",
                r.merge_percent,
                lost(Level::L2)
            ),
        )
    };
    (level, evidence)
}

/// The scheduler for a device at `level`, with its evidence.
fn scheduler_for(r: &DeviceReport, level: Level) -> (Scheduler, String) {
    let read = r.read_percent;
    let one_dir = !(10.0..=90.0).contains(&read);
    let depth = r.queue_depth_max;
    match level {
        Level::L1 => (
            Scheduler::MqDeadline,
            "L1 is mq-deadline's iosched/front_merges=0; no other scheduler has it".to_string(),
        ),
        Level::L2 => (
            Scheduler::MqDeadline,
            format!(
                "nomerges=1 differs from 0 only under mq-deadline and bfq; {:.0}% reads{}",
                read,
                if one_dir {
                    ""
                } else {
                    " mixed with writes: mq-deadline's read_expire protects the reads"
                }
            ),
        ),
        Level::L3 if one_dir => (
            Scheduler::None,
            format!(
                "{:.0}% {} at queue depth up to {depth}, nothing merges: a scheduler's sorting and merging buy nothing, none is the cheapest",
                read.max(100.0 - read),
                if read >= 50.0 { "reads" } else { "writes" }
            ),
        ),
        Level::L3 => (
            Scheduler::MqDeadline,
            format!(
                "nothing merges, but reads ({read:.0}%) share the queue with writes: keep mq-deadline so read_expire bounds read latency"
            ),
        ),
        Level::L0 if r.merge_percent >= MIN_MERGE_PERCENT_THAT_PAYS => (
            Scheduler::MqDeadline,
            format!(
                "merges pay ({:.1}% of bios); mq-deadline merges and sorts at little cost (kernel default for single-queue devices)",
                r.merge_percent
            ),
        ),
        Level::L0 => (
            Scheduler::MqDeadline,
            format!(
                "merging keeps all its lookups here ({:.1}% of bios merge), and no scheduler change is advised for it: the kernel default for single-queue devices",
                r.merge_percent
            ),
        ),
    }
}

/// The recommendations for a device at `level`: the level with `evidence`, its scheduler,
/// the slices.
fn recommendations(
    r: &DeviceReport,
    cfg: &PolicyConfig,
    level: Level,
    evidence: String,
) -> Vec<Recommendation> {
    let mut merge_level = Recommendation {
        topic: "merge level".into(),
        setting: format!("{level}: {}", level_tunables(level)),
        evidence,
    };
    if r.bios < cfg.min_window_bios {
        merge_level
            .evidence
            .push_str(&format!(" [only {} bios: too few for confidence]", r.bios));
    }
    let (sched, sev) = scheduler_for(r, level);
    let scheduler = Recommendation {
        topic: "scheduler".into(),
        setting: sched.to_string(),
        evidence: sev,
    };
    vec![merge_level, scheduler, slices_for(r, sched)]
}

/// The slice settings under scheduler `sched`. CFQ's slice_sync is gone since 5.0; its
/// jobs live in mq-deadline's expiries and bfq's idling. The first case that fits: no
/// scheduler; slow reads mixed with writes; one sequential sync stream; else the defaults.
fn slices_for(r: &DeviceReport, sched: Scheduler) -> Recommendation {
    let read = r.read_percent;
    let one_dir = !(10.0..=90.0).contains(&read);
    let depth = r.queue_depth_max;
    if sched == Scheduler::None {
        Recommendation {
            topic: "slices".into(),
            setting: "none has no slices; with bfq use slice_idle=0".into(),
            evidence: format!(
                "up to {depth} requests in flight from random access: idling for a task's next request (bfq slice_idle) would stall a full queue"
            ),
        }
    } else if let Some(rl) = r.read_latency.as_ref()
        && !one_dir
        && rl.p99_us > 100_000.0
    {
        Recommendation {
            topic: "slices".into(),
            setting: "mq-deadline read_expire=100, writes_starved=4".into(),
            evidence: format!(
                "read p99 {:.1} ms with {:.0}% writes in the queue: shorten the read deadline and let reads pass writes longer",
                rl.p99_us / 1000.0,
                100.0 - read
            ),
        }
    } else if depth <= 1 && r.sequential_percent >= 50.0 && r.sync_percent >= 50.0 {
        Recommendation {
            topic: "slices".into(),
            setting: "with bfq keep slice_idle=8 (ms); mq-deadline defaults".into(),
            evidence: format!(
                "one request at a time, {:.0}% sequential and sync: idling for the task's next request keeps the stream together",
                r.sequential_percent
            ),
        }
    } else {
        default_slices(r)
    }
}

/// The schedulers' default slices, with the worst completion p99 (of reads and writes) as
/// the evidence that the deadlines are far off.
fn default_slices(r: &DeviceReport) -> Recommendation {
    let depth = r.queue_depth_max;
    let worst = r
        .read_latency
        .as_ref()
        .map(|l| l.p99_us)
        .into_iter()
        .chain(r.write_latency.as_ref().map(|w| w.p99_us))
        .fold(0.0f64, f64::max);
    Recommendation {
        topic: "slices".into(),
        setting: "mq-deadline defaults (read_expire=500, write_expire=5000, fifo_batch=16); with bfq slice_idle=0".into(),
        evidence: if worst > 0.0 {
            format!(
                "completion p99 {:.2} ms is far below the 500 ms read deadline, and up to {depth} requests in flight make idling useless",
                worst / 1000.0
            )
        } else {
            format!(
                "no completions in the trace to judge deadlines; up to {depth} requests in flight make idling useless"
            )
        },
    }
}
