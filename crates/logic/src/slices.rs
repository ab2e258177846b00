//! Scheduler slices: keep reads from starving behind writes (the 2009 read/write ratio thread, docs/design.md), within bounds.
//!
//! A pure function of (state, window, scheduler, current values, originals, config, now) to
//! at most one bounded change with its reason, like the merge policy. The evidence is what
//! the counters give per window: the mean time per completed request in each direction
//! (ms reading / reads, ms writing / writes). When reads take `starve_ratio` times longer
//! than writes, and at least `min_read_ms_per_request`, for `windows` consecutive busy
//! mixed windows, reads are favoured one step: the first knob of the scheduler's table
//! ([`crate::tuners`]) not at its bound moves one step (mq-deadline: `writes_starved` + 1
//! up to `writes_starved_max`, then `read_expire` halved down to `read_expire_min_ms`; bfq:
//! `timeout_sync` x1.5 up to `timeout_sync_max_ms`, the sync queues' slice).
//!
//! A step is judged on the `windows` mixed windows after it: it stays when the reads' own
//! mean time per request fell by at least a tenth, and by more than the writes' throughput
//! fell (favouring reads costs writes; the exchange must pay). Otherwise it is undone and
//! no further step is taken while the mix lasts (no climbing to the bounds for nothing).
//! When the mix goes away (too few reads or writes) for as many windows, the steps are
//! undone, one per `windows`, back to the originals; while the mix lasts nothing moves back
//! (reads doing well then may be the steps' own doing). A tunable whose value was not the
//! kernel's default when mergetune first saw
//! it is the operator's and is never touched. Idling (`slice_idle`) is left alone: whether
//! idling helps a sync queue (the 2009 cfq latency thread) depends on per-process seekiness the counters do
//! not show; `mergetune advise` looks at that from a trace.

use crate::config::SlicesConfig;
use crate::decision::DecisionKind;
use crate::hourly::ChangesLastHour;
use crate::sampler::{Counters, Window};
use mergetune_kernel::scheduler::Scheduler;
use mergetune_kernel::tunable::Tunable;
use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SliceState {
    /// Consecutive busy mixed windows with reads starving.
    pub starving_windows: u32,
    /// Consecutive windows with reads not slower than writes (or no mix).
    pub calm_windows: u32,
    /// Steps taken so far, oldest first: (tunable, value before the step).
    pub steps: Vec<(Tunable, u64)>,
    /// The slice changes made in the last hour (`[slices] max_changes_per_hour`).
    pub changes: ChangesLastHour,
    /// The counters of the current run of mixed windows: the starving windows that lead
    /// to a step, then the windows after it that judge it.
    pub evidence: Counters,
    pub evidence_ms: u64,
    /// What the windows before the last step showed, until the step is judged.
    pub before_step: Option<StepEvidence>,
    /// Mixed windows seen since the last step.
    pub windows_since_step: u32,
    /// A step did not help: no more steps until the mix ends.
    pub stalled: bool,
    /// The judgement of a step that stays (it writes nothing), for the log; the caller
    /// takes it.
    pub kept: Option<String>,
}

/// What a step is judged on: the reads' mean time per request, the writes' throughput.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepEvidence {
    pub read_ms_per_request: f64,
    pub write_mb_per_sec: f64,
}

impl StepEvidence {
    fn of(c: &Counters, duration_ms: u64) -> Option<StepEvidence> {
        Some(StepEvidence {
            read_ms_per_request: mean_ms(c.read_ms, c.reads_completed)?,
            write_mb_per_sec: if duration_ms == 0 {
                0.0
            } else {
                c.sectors_written as f64 * 512.0 / 1e6 / (duration_ms as f64 / 1000.0)
            },
        })
    }
}

/// One change to make.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SliceChange {
    pub tunable: Tunable,
    pub from: u64,
    pub to: u64,
    pub kind: DecisionKind,
    pub reason: String,
}

/// Mean ms per completed request, per direction; None without requests.
fn mean_ms(ms: u64, n: u64) -> Option<f64> {
    (n > 0).then(|| ms as f64 / n as f64)
}

/// What one window and the device's current values show, for the steps of [`decide`].
struct Seen<'a> {
    counters: &'a Counters,
    values: &'a [(Tunable, u64)],
    owned: &'a [Tunable],
    cfg: &'a SlicesConfig,
    read_ms: Option<f64>,
    write_ms: Option<f64>,
}

impl Seen<'_> {
    fn value(&self, t: Tunable) -> Option<u64> {
        self.values.iter().find(|(n, _)| *n == t).map(|(_, v)| *v)
    }

    /// The tunable's value where the scheduler has it and the operator does not own it.
    fn usable(&self, t: Tunable) -> Option<u64> {
        self.value(t).filter(|_| !self.owned.contains(&t))
    }

    /// The read/write figures behind a decision, for its reason.
    fn evidence(&self, s: &SliceState) -> String {
        let c = self.counters;
        match (self.read_ms, self.write_ms) {
            (Some(r), Some(w)) => format!(
                "reads {r:.1} ms vs writes {w:.1} ms per request ({} and {} requests) for {} windows",
                c.reads_completed,
                c.writes_completed,
                s.starving_windows.max(s.calm_windows)
            ),
            _ => format!("no read/write mix for {} windows", s.calm_windows),
        }
    }
}

/// Decides for one device. `values` holds the current value of each tunable this module
/// may use (absent: the scheduler has no such tunable); `owned` says which of them the
/// operator set (never touched). The steps in order: count the window (starving, calm, or
/// mixed and fine); judge the last step once enough windows followed it (kept, or undone);
/// take a step toward the reads while they starve; relax the last step once the mix is
/// over.
pub fn decide(
    prev: &SliceState,
    window: &Window,
    scheduler: Scheduler,
    values: &[(Tunable, u64)],
    owned: &[Tunable],
    cfg: &SlicesConfig,
    now_ms: u64,
) -> (SliceState, Option<SliceChange>) {
    let mut s = prev.clone();
    s.changes.forget_older_than_an_hour(now_ms);
    let c = &window.counters;
    let seen = Seen {
        counters: c,
        values,
        owned,
        cfg,
        read_ms: mean_ms(c.read_ms, c.reads_completed),
        write_ms: mean_ms(c.write_ms, c.writes_completed),
    };
    count_the_window(&mut s, &seen, window.duration_ms);
    if s.changes.reached(cfg.max_changes_per_hour) {
        return (s, None);
    }
    if let Some(undo) = judge_the_last_step(&mut s, &seen, now_ms) {
        return (s, Some(undo));
    }
    if s.starving_windows >= cfg.windows
        && !s.stalled
        && let Some(step) = favour_reads(&mut s, &seen, scheduler, now_ms)
    {
        return (s, Some(step));
    }
    let relax = relax_after_the_mix(&mut s, &seen, now_ms);
    (s, relax)
}

/// The read/write ratio of the window (None without a mix of both), counted into the
/// starving and calm runs and into the evidence of the current run.
fn count_the_window(s: &mut SliceState, seen: &Seen, duration_ms: u64) {
    let (c, cfg) = (seen.counters, seen.cfg);
    let mixed = c.reads_completed >= cfg.min_requests && c.writes_completed >= cfg.min_requests;
    let ratio = match (mixed, seen.read_ms, seen.write_ms) {
        (true, Some(r), Some(w)) if w > 0.0 => Some(r / w),
        (true, Some(r), Some(_)) if r > 0.0 => Some(f64::INFINITY),
        (true, Some(_), Some(_)) => Some(1.0),
        _ => None,
    };
    let slow_reads = seen
        .read_ms
        .is_some_and(|r| r >= cfg.min_read_ms_per_request);
    match ratio {
        Some(r) if r >= cfg.starve_ratio && slow_reads => {
            s.starving_windows += 1;
            s.calm_windows = 0;
        }
        // Reads doing fine while the mix lasts may be the step's own doing: undoing it
        // then would only bring the starvation back. Steps are undone when the mix ends.
        Some(_) => {
            s.starving_windows = 0;
            s.calm_windows = 0;
        }
        None => {
            s.starving_windows = 0;
            s.calm_windows += 1;
            s.before_step = None;
            if s.calm_windows >= cfg.windows {
                s.stalled = false;
            }
        }
    }
    if ratio.is_some() {
        if s.starving_windows == 1 && s.before_step.is_none() {
            // A new run of starving windows: the evidence for a step starts here.
            s.evidence = Counters::default();
            s.evidence_ms = 0;
        }
        s.evidence.add(c);
        s.evidence_ms += duration_ms;
        if s.before_step.is_some() {
            s.windows_since_step += 1;
        }
    } else {
        s.evidence = Counters::default();
        s.evidence_ms = 0;
    }
}

/// Judges the last step once `windows` mixed windows have followed it: it stays when the
/// reads' own time per request fell by at least a tenth, and by more than the writes'
/// throughput fell. (The read/write ratio would also "improve" when writes merely got
/// slower.) Otherwise it is undone and no further step is taken while this mix lasts.
fn judge_the_last_step(s: &mut SliceState, seen: &Seen, now_ms: u64) -> Option<SliceChange> {
    let before = s.before_step?;
    if s.windows_since_step < seen.cfg.windows {
        return None;
    }
    let after = StepEvidence::of(&s.evidence, s.evidence_ms)?;
    s.before_step = None;
    let read_gain = 1.0 - after.read_ms_per_request / before.read_ms_per_request.max(1e-9);
    let write_loss = if before.write_mb_per_sec > 0.0 {
        (1.0 - after.write_mb_per_sec / before.write_mb_per_sec).max(0.0)
    } else {
        0.0
    };
    let figures = format!(
        "reads {:.1} -> {:.1} ms per request ({:+.0}%), writes {:.1} -> {:.1} MB/s ({:+.0}%)",
        before.read_ms_per_request,
        after.read_ms_per_request,
        -read_gain * 100.0,
        before.write_mb_per_sec,
        after.write_mb_per_sec,
        -write_loss * 100.0
    );
    let last = s.steps.last().copied();
    let name = last.map_or("", |(t, _)| t.file_name());
    let prev_value = last.map_or(0, |(_, v)| v);
    let cur_value = last.and_then(|(t, _)| seen.value(t).map(|v| (t, v)));
    if read_gain >= 0.1 && write_loss <= read_gain {
        s.kept = Some(format!(
            "{name} -> {} kept: {figures}",
            cur_value.map_or(0, |(_, v)| v)
        ));
        return None;
    }
    s.stalled = true;
    s.starving_windows = 0;
    let (t, cur) = cur_value?;
    s.steps.pop();
    s.changes.record(now_ms);
    let reason = format!(
        "{name} {prev_value} -> {cur} did not pay ({figures}): back to {prev_value}, no further step while this mix lasts"
    );
    Some(SliceChange {
        tunable: t,
        from: cur,
        to: prev_value,
        kind: DecisionKind::Undo,
        reason,
    })
}

/// The next step toward the reads for this scheduler: the first knob of its table
/// ([`crate::tuners`]) the operator does not own that is not at its configured bound.
fn next_step(seen: &Seen, scheduler: Scheduler) -> Option<(Tunable, u64, u64)> {
    crate::tuners::table(scheduler).knobs.iter().find_map(|k| {
        let v = seen.usable(k.tunable)?;
        let to = (k.step)(v, seen.cfg.bound(k.tunable))?;
        Some((k.tunable, v, to))
    })
}

/// A step toward the reads, its evidence kept to judge it by.
fn favour_reads(
    s: &mut SliceState,
    seen: &Seen,
    scheduler: Scheduler,
    now_ms: u64,
) -> Option<SliceChange> {
    let (t, from, to) = next_step(seen, scheduler)?;
    let name = t.file_name();
    let reason = format!(
        "reads starving: {}; {name} {from} -> {to}",
        seen.evidence(s)
    );
    s.steps.push((t, from));
    s.before_step = StepEvidence::of(&s.evidence, s.evidence_ms);
    s.windows_since_step = 0;
    s.evidence = Counters::default();
    s.evidence_ms = 0;
    s.starving_windows = 0;
    s.changes.record(now_ms);
    Some(SliceChange {
        tunable: t,
        from,
        to,
        kind: DecisionKind::FavourReads,
        reason,
    })
}

/// Once the mix is over for `windows` windows, the last step is undone (one a window). A
/// step whose tunable the scheduler no longer has is dropped.
fn relax_after_the_mix(s: &mut SliceState, seen: &Seen, now_ms: u64) -> Option<SliceChange> {
    if s.calm_windows < seen.cfg.windows {
        return None;
    }
    let &(t, before) = s.steps.last()?;
    let name = t.file_name();
    let Some(cur) = seen.value(t) else {
        s.steps.pop();
        return None;
    };
    let reason = format!(
        "read/write mix over: {}; {name} {cur} -> {before}",
        seen.evidence(s)
    );
    s.steps.pop();
    s.calm_windows = 0;
    s.changes.record(now_ms);
    Some(SliceChange {
        tunable: t,
        from: cur,
        to: before,
        kind: DecisionKind::Relax,
        reason,
    })
}
