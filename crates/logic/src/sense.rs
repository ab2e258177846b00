//! Sensing at L3: from a sample of the bios queued on a device to [`Sensed`], and the
//! `[sense]` config that bounds how often the tap is open.
//!
//! At nomerges=2 the merge counters read zero whatever the workload does, so the only sight
//! of mergeable I/O is the bio stream itself (tracefs `block_bio_queue`, or the simulator's
//! tap through the same [`mergetune_kernel::blockfs::BlockFs`] seam). A bio the kernel would
//! have back-merged is one that starts where a recent bio of the same direction ended: the
//! plug merge tries the newest plugged request, the one-hit cache the last merged one, the
//! hash any queued request's end. [`Contiguity`] counts such bios against the last
//! `recent_bios` ends per direction; that share is what merging would have found (an upper
//! bound: a bio whose neighbour was already dispatched cannot merge; the counters at L0
//! then show it, and the policy holds L3 off for a while). Pure: bios in, counts out;
//! memory is the two small rings whatever the rate.

use crate::sampler::Sensed;
use mergetune_kernel::biosense::QueuedBio;
use mergetune_kernel::trace::Dir;
use serde::{Deserialize, Serialize};

/// Counts queued bios and those contiguous with a recent bio of the same direction.
#[derive(Debug, Clone)]
pub struct Contiguity {
    /// The ends (`sector + nr_sectors`) of the last bios, per direction, as rings.
    ends: [Vec<u64>; 2],
    next: [usize; 2],
    recent: usize,
    bios: u64,
    contiguous: u64,
}

impl Contiguity {
    /// `recent` ends are remembered per direction (at least one).
    pub fn new(recent: usize) -> Contiguity {
        let recent = recent.max(1);
        Contiguity {
            ends: [Vec::with_capacity(recent), Vec::with_capacity(recent)],
            next: [0, 0],
            recent,
            bios: 0,
            contiguous: 0,
        }
    }

    pub fn push(&mut self, bio: &QueuedBio) {
        if bio.nr_sectors == 0 {
            // A flush or an empty bio merges with nothing and carries no data.
            return;
        }
        let d = bio.dir.idx();
        self.bios += 1;
        if self.ends[d].contains(&bio.sector) {
            self.contiguous += 1;
        }
        let end = bio.sector.saturating_add(u64::from(bio.nr_sectors));
        if self.ends[d].len() < self.recent {
            self.ends[d].push(end);
        } else {
            self.ends[d][self.next[d]] = end;
            self.next[d] = (self.next[d] + 1) % self.recent;
        }
    }

    pub fn extend<'a>(&mut self, bios: impl IntoIterator<Item = &'a QueuedBio>) {
        for b in bios {
            self.push(b);
        }
    }

    pub fn bios(&self) -> u64 {
        self.bios
    }

    /// The counts so far, for a tap that was open `sampled_ms`.
    pub fn sensed(&self, sampled_ms: u64) -> Sensed {
        Sensed {
            bios: self.bios,
            contiguous: self.contiguous,
            sampled_ms,
        }
    }

    /// Forgets everything (the next sample starts with no history).
    pub fn clear(&mut self) {
        for d in [Dir::Read, Dir::Write] {
            self.ends[d.idx()].clear();
            self.next[d.idx()] = 0;
        }
        self.bios = 0;
        self.contiguous = 0;
    }
}

/// [`Contiguity`] over a whole sample at once.
pub fn sense(bios: &[QueuedBio], recent: usize, sampled_ms: u64) -> Sensed {
    let mut c = Contiguity::new(recent);
    c.extend(bios);
    c.sensed(sampled_ms)
}

/// The contiguous share of a sample in percent (0 for an empty one).
pub fn contiguous_percent(s: &Sensed) -> f64 {
    if s.bios == 0 {
        0.0
    } else {
        s.contiguous as f64 * 100.0 / s.bios as f64
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
    /// Ends of recent bios remembered per direction when judging contiguity.
    pub recent_bios: usize,
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

pub const DEFAULT_SENSE_OPEN_MS: u64 = 100;
pub const DEFAULT_SENSE_EVERY_MS: u64 = 2000;
pub const DEFAULT_SENSE_RECENT_BIOS: usize = 16;
pub const DEFAULT_SENSE_MIN_SAMPLE_BIOS: u64 = 64;
pub const DEFAULT_SENSE_MAX_SAMPLE_BIOS: usize = 512;
pub const DEFAULT_SENSE_BUFFER_KB: u64 = 64;
pub const DEFAULT_SENSE_RETRY_AFTER_SECS: u64 = 600;
/// The highest duty cycle `[sense]` accepts: open at most a quarter of the time.
pub const MAX_SENSE_DUTY: f64 = 0.25;

impl Default for SenseConfig {
    fn default() -> Self {
        SenseConfig {
            enabled: true,
            open_ms: DEFAULT_SENSE_OPEN_MS,
            every_ms: DEFAULT_SENSE_EVERY_MS,
            recent_bios: DEFAULT_SENSE_RECENT_BIOS,
            min_sample_bios: DEFAULT_SENSE_MIN_SAMPLE_BIOS,
            max_sample_bios: DEFAULT_SENSE_MAX_SAMPLE_BIOS,
            buffer_kb: DEFAULT_SENSE_BUFFER_KB,
            retry_after_secs: DEFAULT_SENSE_RETRY_AFTER_SECS,
        }
    }
}

impl SenseConfig {
    /// The fraction of the time the tap is open at L3.
    pub fn duty(&self) -> f64 {
        self.open_ms as f64 / self.every_ms.max(1) as f64
    }

    /// Every problem with the `[sense]` keys, as (key under `sense.`, reason); the config's
    /// `validate()` turns them into errors naming `sense.KEY`.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut errs = Vec::new();
        let mut bad = |key: &'static str, reason: String| errs.push((key, reason));
        if !(10..=60_000).contains(&self.open_ms) {
            bad("open_ms", format!("{} is outside 10..=60000", self.open_ms));
        }
        if !(100..=3_600_000).contains(&self.every_ms) {
            bad(
                "every_ms",
                format!("{} is outside 100..=3600000", self.every_ms),
            );
        } else if self.duty() > MAX_SENSE_DUTY {
            bad(
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
        if !(1..=1024).contains(&self.recent_bios) {
            bad(
                "recent_bios",
                format!("{} is outside 1..=1024", self.recent_bios),
            );
        }
        if !(1..=1_000_000).contains(&self.min_sample_bios) {
            bad(
                "min_sample_bios",
                format!("{} is outside 1..=1000000", self.min_sample_bios),
            );
        }
        if !(100..=10_000_000).contains(&self.max_sample_bios) {
            bad(
                "max_sample_bios",
                format!("{} is outside 100..=10000000", self.max_sample_bios),
            );
        } else if (self.max_sample_bios as u64) < self.min_sample_bios {
            bad(
                "max_sample_bios",
                format!(
                    "{} is below min_sample_bios {}",
                    self.max_sample_bios, self.min_sample_bios
                ),
            );
        }
        if !(16..=65_536).contains(&self.buffer_kb) {
            bad(
                "buffer_kb",
                format!("{} is outside 16..=65536", self.buffer_kb),
            );
        }
        if !(1..=86_400).contains(&self.retry_after_secs) {
            bad(
                "retry_after_secs",
                format!("{} is outside 1..=86400", self.retry_after_secs),
            );
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bio(dir: Dir, sector: u64, nr: u32) -> QueuedBio {
        QueuedBio {
            t_ns: 0,
            dir,
            sector,
            nr_sectors: nr,
        }
    }

    #[test]
    fn a_sequential_stream_is_contiguous_but_its_first_bio() {
        let bios: Vec<_> = (0..100).map(|i| bio(Dir::Write, i * 8, 8)).collect();
        let s = sense(&bios, 16, 250);
        assert_eq!((s.bios, s.contiguous, s.sampled_ms), (100, 99, 250));
    }

    #[test]
    fn contiguity_is_per_direction() {
        // A read that starts where a write ended merges with nothing.
        let bios = [bio(Dir::Write, 0, 8), bio(Dir::Read, 8, 8)];
        assert_eq!(sense(&bios, 16, 1).contiguous, 0);
    }

    #[test]
    fn interleaved_streams_are_found_within_the_recent_ends() {
        // Four sequential streams taking turns: each bio continues the one four back.
        let bios: Vec<_> = (0..400u64)
            .map(|i| bio(Dir::Read, (i % 4) * 1_000_000 + (i / 4) * 8, 8))
            .collect();
        assert_eq!(sense(&bios, 4, 1).contiguous, 396);
        // Remembering fewer ends than streams misses them all.
        assert_eq!(sense(&bios, 3, 1).contiguous, 0);
    }

    #[test]
    fn random_bios_are_rarely_contiguous() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let bios: Vec<_> = (0..10_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                bio(Dir::Write, (x % (1 << 20)) * 8, 8)
            })
            .collect();
        let s = sense(&bios, 16, 1);
        assert!(contiguous_percent(&s) < 1.0, "{s:?}");
    }

    #[test]
    fn empty_bios_are_not_counted() {
        let bios = [bio(Dir::Write, 0, 8), bio(Dir::Write, 8, 0)];
        assert_eq!(sense(&bios, 16, 1).bios, 1);
        assert_eq!(contiguous_percent(&Sensed::default()), 0.0);
    }

    #[test]
    fn clear_forgets_the_history() {
        let mut c = Contiguity::new(16);
        c.push(&bio(Dir::Write, 0, 8));
        c.clear();
        c.push(&bio(Dir::Write, 8, 8));
        assert_eq!(
            c.sensed(0),
            Sensed {
                bios: 1,
                contiguous: 0,
                sampled_ms: 0
            }
        );
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
