//! Sensing at L3: from a sample of the tap's events on a device to [`Sensed`], and the
//! `[sense]` config that bounds how often the tap is open.
//!
//! At nomerges=2 the merge counters read zero whatever the workload does, so the only sight
//! of mergeable I/O is the request stream itself (tracefs `block_getrq` and `block_rq_issue`,
//! or the simulator's tap through the same [`mergetune_kernel::blockfs::BlockFs`] seam). The
//! kernel merges a bio only into a request that has not been issued yet: the newest one in
//! the submitter's plug, or one still waiting in the scheduler's or the software queue (the
//! hash of request ends for a back merge, the sort tree or list for a front merge). At
//! nomerges=2 each bio becomes its own request, so [`Mergeable`] keeps the requests made and
//! not yet issued and counts a new one mergeable when one of them ends where it starts (a
//! back merge) or starts where it ends (a front merge, counted apart: mq-deadline's
//! `front_merges` decides it). A request that merely continues one already issued (a
//! sequential stream at queue depth 1, each bio dispatched before the next arrives) is not
//! mergeable, as the kernel does not merge it. What this leaves out: the size limits
//! (`max_sectors_kb`, segments) that end a chain of merges, and requests made before the tap
//! opened. Measured against the kernel's own merge counters at L0 in
//! `tests/real_kernel/real_kernel_tap_agreement.rs` (docs/policy.md "Sensing at L3").
//! Below nomerges=2 (a dry run, whose tap sees the real level) a bio the kernel merged makes
//! no request: its merge event counts it, mergeable, so the share does not depend on the
//! level. Pure: events in, counts out; memory is bounded by `pending_requests` whatever the rate,
//! and a request whose issue the tap never saw (a lost event) ages out.

use crate::config::checks::{Checks, KeyProblems};
use crate::sampler::Sensed;
use mergetune_kernel::biosense::TapEvent;
use mergetune_kernel::trace::{Dir, EventKind};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};

/// A request made and not yet seen issued is forgotten after this long: mq-deadline's
/// write_expire (5 s) is the longest a default scheduler holds one; an older entry is one
/// whose issue event was lost.
pub const PENDING_MAX_AGE_NS: u64 = 5_000_000_000;

/// One request made and not yet issued.
#[derive(Debug, Clone, Copy)]
struct Pending {
    end: u64,
    made_ns: u64,
}

/// Counts the requests made on a device and those a request still waiting could have
/// taken (back or front), from the tap's events in time order.
#[derive(Debug, Clone)]
pub struct Mergeable {
    /// Per direction: the pending requests by start sector.
    by_start: [HashMap<u64, Pending>; 2],
    /// Per direction: how many pending requests end at a sector.
    ends: [HashMap<u64, u32>; 2],
    /// The requests in the order they were made, `(made_ns, dir, start)`, for the bound and
    /// the age limit (an entry already issued is skipped when it comes up).
    order: VecDeque<(u64, Dir, u64)>,
    capacity: usize,
    bios: u64,
    back: u64,
    front: u64,
}

impl Mergeable {
    /// At most `capacity` requests are remembered as pending (at least one); past it the
    /// oldest is forgotten.
    pub fn new(capacity: usize) -> Mergeable {
        Mergeable {
            by_start: [HashMap::new(), HashMap::new()],
            ends: [HashMap::new(), HashMap::new()],
            order: VecDeque::new(),
            capacity: capacity.max(1),
            bios: 0,
            back: 0,
            front: 0,
        }
    }

    pub fn push(&mut self, ev: &TapEvent) {
        match ev.kind {
            EventKind::GetRq => self.made(ev),
            EventKind::Issue => self.issued(ev.dir, ev.sector),
            // Below nomerges=2 (a dry run taps the real level) a bio that merged made no
            // request: the kernel's own call.
            EventKind::BackMerge | EventKind::FrontMerge if ev.nr_sectors > 0 => {
                self.bios += 1;
                if ev.kind == EventKind::BackMerge {
                    self.back += 1;
                } else {
                    self.front += 1;
                }
            }
            _ => {}
        }
    }

    fn made(&mut self, ev: &TapEvent) {
        if ev.nr_sectors == 0 {
            // A flush or an empty bio merges with nothing and carries no data.
            return;
        }
        self.age_out(ev.t_ns);
        let d = ev.dir.idx();
        let end = ev.sector.saturating_add(u64::from(ev.nr_sectors));
        self.bios += 1;
        if self.ends[d].contains_key(&ev.sector) {
            self.back += 1;
        } else if self.by_start[d].contains_key(&end) {
            self.front += 1;
        }
        // A second pending request at the same start (a rewrite) replaces the first.
        self.issued(ev.dir, ev.sector);
        self.by_start[d].insert(
            ev.sector,
            Pending {
                end,
                made_ns: ev.t_ns,
            },
        );
        *self.ends[d].entry(end).or_insert(0) += 1;
        self.order.push_back((ev.t_ns, ev.dir, ev.sector));
        while self.order.len() > self.capacity {
            self.forget_oldest();
        }
    }

    /// The request of `dir` starting at `sector` left the queue (or is forgotten).
    fn issued(&mut self, dir: Dir, sector: u64) {
        let d = dir.idx();
        let Some(p) = self.by_start[d].remove(&sector) else {
            return;
        };
        if let Some(n) = self.ends[d].get_mut(&p.end) {
            *n -= 1;
            if *n == 0 {
                self.ends[d].remove(&p.end);
            }
        }
    }

    fn forget_oldest(&mut self) {
        if let Some((made_ns, dir, start)) = self.order.pop_front()
            && self.by_start[dir.idx()]
                .get(&start)
                .is_some_and(|p| p.made_ns == made_ns)
        {
            self.issued(dir, start);
        }
    }

    fn age_out(&mut self, now_ns: u64) {
        while self
            .order
            .front()
            .is_some_and(|&(t, _, _)| now_ns.saturating_sub(t) > PENDING_MAX_AGE_NS)
        {
            self.forget_oldest();
        }
    }

    pub fn extend<'a>(&mut self, events: impl IntoIterator<Item = &'a TapEvent>) {
        for e in events {
            self.push(e);
        }
    }

    /// Requests made so far (at nomerges=2, bios).
    pub fn bios(&self) -> u64 {
        self.bios
    }

    /// Requests remembered as pending now (at most the capacity).
    pub fn pending(&self) -> usize {
        self.by_start[0].len() + self.by_start[1].len()
    }

    /// The counts so far, for a tap that was open `sampled_ms`.
    pub fn sensed(&self, sampled_ms: u64) -> Sensed {
        Sensed {
            bios: self.bios,
            mergeable: self.back + self.front,
            front_mergeable: self.front,
            sampled_ms,
        }
    }

    /// Forgets everything (the next sample starts with no history).
    pub fn clear(&mut self) {
        for d in [Dir::Read, Dir::Write] {
            self.by_start[d.idx()].clear();
            self.ends[d.idx()].clear();
        }
        self.order.clear();
        self.bios = 0;
        self.back = 0;
        self.front = 0;
    }
}

/// [`Mergeable`] over a whole sample at once.
pub fn sense(events: &[TapEvent], capacity: usize, sampled_ms: u64) -> Sensed {
    let mut c = Mergeable::new(capacity);
    c.extend(events);
    c.sensed(sampled_ms)
}

/// The mergeable share of a sample in percent (0 for an empty one).
pub fn mergeable_percent(s: &Sensed) -> f64 {
    if s.bios == 0 {
        0.0
    } else {
        s.mergeable as f64 * 100.0 / s.bios as f64
    }
}

/// `[sense]`: the bio tap that keeps L3 from being blind. It is open only while a device is
/// at L3, for `open_ms` every `every_ms` (a bounded duty cycle: its cost is paid a fraction
/// of the time, docs/evaluation.md "Sensing overhead").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SenseConfig {
    /// false: never open the tap (then L3 is blind and the policy does not rest there).
    pub enabled: bool,
    /// How long the tap stays open per sample, in ms.
    pub open_ms: u64,
    /// Time from the start of one sample to the start of the next, in ms.
    pub every_ms: u64,
    /// The most requests remembered as made and not yet issued (per device): bounds the
    /// tap's memory whatever the rate; more than any queue holds (nr_requests, plugs).
    pub pending_requests: usize,
    /// Deprecated and ignored: the ends of the last bios the tap once compared a bio with.
    /// A bio is now mergeable only against requests not yet issued (`pending_requests`);
    /// the key is still read so that an older config loads, and check-config warns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent_bios: Option<usize>,
    /// A sample with fewer bios says nothing (it is not given to the policy).
    pub min_sample_bios: u64,
    /// The most bios one sample takes; the rest are left unread in the kernel's buffer and
    /// dropped with it (memory and the reader's CPU stay bounded: reading and parsing a bio
    /// costs about 3 us, docs/evaluation.md "Sensing overhead").
    pub max_sample_bios: usize,
    /// The tap's kernel ring buffer per CPU, in KiB (tracefs `buffer_size_kb`).
    pub buffer_kb: u64,
    /// After the tap failed on a device, it is tried again no earlier than this, in s.
    pub retry_after_secs: u64,
}

/// The highest duty cycle `[sense]` accepts: open at most a quarter of the time.
pub const MAX_SENSE_DUTY: f64 = 0.25;

impl Default for SenseConfig {
    fn default() -> Self {
        SenseConfig::DEFAULT
    }
}

impl SenseConfig {
    /// Every key's default, stated once under its key (`SenseConfig::DEFAULT.open_ms`):
    /// what a config without `[sense]` runs with.
    pub const DEFAULT: SenseConfig = SenseConfig {
        enabled: true,
        open_ms: 100,
        every_ms: 2000,
        pending_requests: 4096,
        recent_bios: None,
        min_sample_bios: 64,
        max_sample_bios: 512,
        buffer_kb: 64,
        retry_after_secs: 600,
    };

    /// Keys still read and ignored (check-config warns, the schema does not list them).
    pub const DEPRECATED_KEYS: &'static [&'static str] = &["recent_bios"];

    /// The fraction of the time the tap is open at L3.
    pub fn duty(&self) -> f64 {
        self.open_ms as f64 / self.every_ms.max(1) as f64
    }

    /// Every problem with the `[sense]` keys, as (key under `sense.`, reason); the config's
    /// `validate()` turns them into errors naming `sense.KEY`.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut errs = KeyProblems::default();
        errs.within("open_ms", self.open_ms, 10..=60_000);
        if errs.within("every_ms", self.every_ms, 100..=3_600_000) && self.duty() > MAX_SENSE_DUTY {
            errs.push(
                "every_ms",
                format!(
                    "{} ms with open_ms {} is a duty cycle of {:.0}%, above the {:.0}% allowed (the tap costs CPU while open)",
                    self.every_ms,
                    self.open_ms,
                    self.duty() * 100.0,
                    MAX_SENSE_DUTY * 100.0
                ),
            );
        }
        errs.within("pending_requests", self.pending_requests, 16..=65_536);
        errs.within("min_sample_bios", self.min_sample_bios, 1..=1_000_000);
        if errs.within("max_sample_bios", self.max_sample_bios, 100..=10_000_000)
            && (self.max_sample_bios as u64) < self.min_sample_bios
        {
            errs.push(
                "max_sample_bios",
                format!(
                    "{} is below min_sample_bios {}",
                    self.max_sample_bios, self.min_sample_bios
                ),
            );
        }
        errs.within("buffer_kb", self.buffer_kb, 16..=65_536);
        errs.within("retry_after_secs", self.retry_after_secs, 1..=86_400);
        errs.0
    }

    /// What check-config warns of in `[sense]` (keys that load but do nothing).
    pub fn warnings(&self) -> Vec<String> {
        self.recent_bios
            .map(|_| {
                "key `sense.recent_bios` is deprecated and ignored: the tap now counts a bio mergeable only when a request not yet issued ends where it starts or starts where it ends (bounded by `sense.pending_requests`); remove the key".to_string()
            })
            .into_iter()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: EventKind, t_ns: u64, dir: Dir, sector: u64, nr: u32) -> TapEvent {
        TapEvent {
            t_ns,
            kind,
            dir,
            sector,
            nr_sectors: nr,
        }
    }

    fn made(t: u64, dir: Dir, sector: u64, nr: u32) -> TapEvent {
        ev(EventKind::GetRq, t, dir, sector, nr)
    }

    fn issued(t: u64, dir: Dir, sector: u64, nr: u32) -> TapEvent {
        ev(EventKind::Issue, t, dir, sector, nr)
    }

    const CAP: usize = SenseConfig::DEFAULT.pending_requests;

    #[test]
    fn a_sequential_stream_whose_previous_request_was_issued_is_not_mergeable() {
        // 64 KiB O_DIRECT writes at queue depth 1: each request is issued before the next
        // bio arrives, and the kernel merges none of them.
        let mut evs = Vec::new();
        for i in 0..100u64 {
            evs.push(made(i * 10, Dir::Write, i * 128, 128));
            evs.push(issued(i * 10 + 1, Dir::Write, i * 128, 128));
        }
        let s = sense(&evs, CAP, 250);
        assert_eq!((s.bios, s.mergeable, s.sampled_ms), (100, 0, 250));
    }

    #[test]
    fn a_plugged_sequential_batch_is_mergeable_but_its_first_request() {
        // 64 bios under one plug: each request waits in the plug until the unplug issues
        // them all, so each but the first ends up back-merged at L0.
        let mut evs: Vec<_> = (0..64u64).map(|i| made(i, Dir::Write, i * 8, 8)).collect();
        evs.extend((0..64u64).map(|i| issued(100 + i, Dir::Write, i * 8, 8)));
        let s = sense(&evs, CAP, 1);
        assert_eq!((s.bios, s.mergeable, s.front_mergeable), (64, 63, 0));
        // The next batch starts where the issued one ended: its first request merges with
        // nothing.
        let mut c = Mergeable::new(CAP);
        c.extend(&evs);
        c.push(&made(200, Dir::Write, 64 * 8, 8));
        assert_eq!(c.sensed(1).mergeable, 63);
    }

    #[test]
    fn a_request_ending_where_a_pending_one_starts_is_a_front_merge() {
        let evs = [made(0, Dir::Read, 800, 8), made(1, Dir::Read, 792, 8)];
        let s = sense(&evs, CAP, 1);
        assert_eq!((s.mergeable, s.front_mergeable), (1, 1));
    }

    #[test]
    fn mergeability_is_per_direction() {
        // A read that starts where a pending write ends merges with nothing.
        let evs = [made(0, Dir::Write, 0, 8), made(1, Dir::Read, 8, 8)];
        assert_eq!(sense(&evs, CAP, 1).mergeable, 0);
    }

    #[test]
    fn random_requests_with_a_deep_queue_are_rarely_mergeable() {
        // Random 4 KiB over 512 MiB with 64 requests pending at any time.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut pending = VecDeque::new();
        let mut evs = Vec::new();
        for t in 0..10_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let sector = (x % (1 << 17)) * 8;
            evs.push(made(t, Dir::Read, sector, 8));
            pending.push_back(sector);
            if pending.len() > 64 {
                evs.push(issued(t, Dir::Read, pending.pop_front().unwrap(), 8));
            }
        }
        let s = sense(&evs, CAP, 1);
        assert!(mergeable_percent(&s) < 0.5, "{s:?}");
    }

    #[test]
    fn below_l3_the_kernels_own_merges_count_as_mergeable_bios() {
        let evs = [
            made(0, Dir::Write, 0, 8),
            ev(EventKind::BackMerge, 1, Dir::Write, 8, 8),
            ev(EventKind::FrontMerge, 2, Dir::Write, 1000, 8),
            issued(3, Dir::Write, 0, 16),
        ];
        let s = sense(&evs, CAP, 1);
        assert_eq!((s.bios, s.mergeable, s.front_mergeable), (3, 2, 1));
    }

    #[test]
    fn memory_is_bounded_and_stale_requests_age_out() {
        // No issue is ever seen (lost events): at most `capacity` are remembered.
        let mut c = Mergeable::new(16);
        for i in 0..1000u64 {
            c.push(&made(i, Dir::Write, i * 1000, 8));
        }
        assert_eq!(c.pending(), 16);
        // The oldest were forgotten: a request continuing the first is not mergeable...
        c.push(&made(1000, Dir::Write, 8, 8));
        assert_eq!(c.sensed(0).mergeable, 0);
        // ... one continuing a recent one is.
        c.push(&made(1001, Dir::Write, 999 * 1000 + 8, 8));
        assert_eq!(c.sensed(0).mergeable, 1);
        // Older than the age limit: forgotten, whatever the capacity.
        let mut c = Mergeable::new(CAP);
        c.push(&made(0, Dir::Write, 0, 8));
        c.push(&made(PENDING_MAX_AGE_NS + 1, Dir::Write, 8, 8));
        assert_eq!(c.sensed(0).mergeable, 0);
        assert_eq!(c.pending(), 1);
    }

    #[test]
    fn empty_requests_and_unknown_issues_are_not_counted() {
        let evs = [
            issued(0, Dir::Write, 64, 8),
            made(1, Dir::Write, 0, 8),
            made(2, Dir::Write, 8, 0),
        ];
        let s = sense(&evs, CAP, 1);
        assert_eq!((s.bios, s.mergeable), (1, 0));
        assert_eq!(mergeable_percent(&Sensed::default()), 0.0);
    }

    #[test]
    fn clear_forgets_the_history() {
        let mut c = Mergeable::new(CAP);
        c.push(&made(0, Dir::Write, 0, 8));
        c.clear();
        c.push(&made(1, Dir::Write, 8, 8));
        assert_eq!(
            c.sensed(0),
            Sensed {
                bios: 1,
                mergeable: 0,
                front_mergeable: 0,
                sampled_ms: 0
            }
        );
    }

    #[test]
    fn the_old_recent_bios_key_loads_is_ignored_and_warned_of() {
        let c: SenseConfig = toml::from_str("recent_bios = 16\n").unwrap();
        assert!(c.problems().is_empty());
        let w = c.warnings();
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("sense.recent_bios") && w[0].contains("deprecated"),
            "{w:?}"
        );
        assert!(SenseConfig::default().warnings().is_empty());
    }

    #[test]
    fn the_default_config_is_valid_and_a_high_duty_cycle_is_refused() {
        assert!(SenseConfig::default().problems().is_empty());
        let c = SenseConfig {
            open_ms: 1000,
            every_ms: 2000,
            ..Default::default()
        };
        let e = c.problems();
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].0, "every_ms");
        assert!(e[0].1.contains("duty cycle of 50%"), "{}", e[0].1);
    }
}
