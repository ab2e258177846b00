//! Workload signatures: what a window's traffic looks like whatever the merge level (rate,
//! read share, bio size). At L3 the merge counters read zero, but a change of signature
//! still shows that the workload changed; and a device remembers the signatures it found
//! merge-hostile, so a known one is not walked down the whole ladder again.

use crate::sampler::Window;
use serde::Serialize;

/// What a window's traffic looks like, whatever the merge level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Signature {
    pub bios_per_sec: f64,
    /// Share of bios that are reads, 0..=1.
    pub read_share: f64,
    /// Mean bio size in sectors.
    pub sectors_per_bio: f64,
}

impl Signature {
    pub fn of(w: &Window) -> Signature {
        let c = &w.counters;
        let bios = c.bios().max(1) as f64;
        Signature {
            bios_per_sec: w.bios_per_sec(),
            read_share: c.read_bios() as f64 / bios,
            sectors_per_bio: (c.sectors_read + c.sectors_written) as f64 / bios,
        }
    }

    /// How this window differs from `base`, if enough to call it another workload: the
    /// read share by 20 points, the bio size by 2x, or the rate by 1.5x either way. The
    /// shape (share, size) is tested first: a change that moves both the shape and the
    /// rate is a change of shape, which needs no confirming (see [`SignatureChange`]).
    pub fn changed_from(&self, base: &Signature) -> Option<SignatureChange> {
        self.shape_changed_from(base)
            .or_else(|| self.rate_changed_from(base))
    }

    /// A change of shape alone: the read share by 20 points, or the bio size by 2x. Both
    /// are the same whatever the merge level (a bio is counted before it merges), so a
    /// shape measured at one level compares with one measured at another.
    pub fn shape_changed_from(&self, base: &Signature) -> Option<SignatureChange> {
        if (self.read_share - base.read_share).abs() >= 0.2 {
            return Some(SignatureChange::ReadShare {
                from: base.read_share,
                to: self.read_share,
            });
        }
        if ratio(self.sectors_per_bio, base.sectors_per_bio) >= 2.0 {
            return Some(SignatureChange::BioSize {
                from_sectors: base.sectors_per_bio,
                to_sectors: self.sectors_per_bio,
            });
        }
        None
    }

    /// A change of rate alone, by 1.5x either way. Unlike the shape, the rate depends on
    /// the level where the device is bound by its submitting CPU (not merging is what
    /// makes it faster), so only rates measured at the same level compare.
    pub fn rate_changed_from(&self, base: &Signature) -> Option<SignatureChange> {
        (ratio(self.bios_per_sec, base.bios_per_sec) >= 1.5).then_some(SignatureChange::Rate {
            from_per_sec: base.bios_per_sec,
            to_per_sec: self.bios_per_sec,
        })
    }
}

/// The larger over the smaller: infinite when only one is zero, 1 when both are.
fn ratio(a: f64, b: f64) -> f64 {
    if a <= 0.0 && b <= 0.0 {
        1.0
    } else {
        a.max(b) / a.min(b)
    }
}

/// What moved between two signatures. A change of shape (read share, bio size) is a new
/// workload: something submits I/O that did not before. A change in rate alone may be one,
/// or may be the same workload slowed or freed by CPU contention: a loop or NVMe device at
/// 190k bios/s is bound by its submitting CPU, and on a busy 2-core host a 100 ms window of
/// it was measured at 0.56x the window before (188982 -> 106170 bios/s, random 4 KiB
/// writes, nothing else changed), and 50 ms windows of random reads at full rate beside two
/// busy loops rose 1.8x (`bios/s 84720 -> 154360`) with nothing changed but the load
/// average. So at L3 a change in rate alone that is not decisive (a rise under
/// [`DECISIVE_RATE_RISE`], any fall) must last [`CHANGE_CONFIRM_WINDOWS`] busy windows
/// and [`RATE_CHANGE_CONFIRM_MS`] (a decisive rise counts at once), and then waits for the
/// bio tap's sample, which sees mergeable I/O directly; a change of shape probes at once.
/// (A false probe costs little, merging being on during it; but each is two writes, each a
/// queue freeze, and two changes under the hourly cap.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SignatureChange {
    Rate {
        from_per_sec: f64,
        to_per_sec: f64,
    },
    /// Shares of bios that are reads, 0..=1.
    ReadShare {
        from: f64,
        to: f64,
    },
    BioSize {
        from_sectors: f64,
        to_sectors: f64,
    },
}

/// How many busy windows at L3 go by before its rate is the baseline a rate change is
/// judged against: the first holds the queue freeze of the write to nomerges 2 (a drain of
/// the device's queue), and the rate the device was entered with was measured at another
/// level. Until then only a change of shape probes. Measured in CI (2026-12-03, random
/// 4 KiB writes on a loop device with mq-deadline): entered at 43706 bios/s measured at L2,
/// a 100 ms window at L3 ran 78370, and the rise was read as a new workload; a probe that
/// found nothing went back to L3 with its own L0 rate (34695) and read 66380 as another.
/// The baseline rate is the fastest of these windows, and after them the fastest window at
/// L3 that showed no change: contention only slows a CPU-bound device, so its end is no
/// rise.
pub const RATE_BASELINE_AFTER_WINDOWS: u32 = 2;

/// And for at least this long after L3 was entered, every window that keeps the shape
/// raises the baseline rate rather than being judged against it: a device bound by its
/// submitting CPU speeds up at L3 over a few seconds, not in one window (on a loop device
/// in a 6.12 guest: `probe: workload changed at L3 (bios/s 42480 -> 67930)` 2 s after the
/// daemon's own step to L3, and the probe found nothing). A faster L3 is the saving, not a
/// new workload. A change of shape, and the bio tap's samples, are judged from the first
/// window all the same.
pub const RATE_BASELINE_MS: u64 = 3000;

/// How long a change in rate alone (up or down) must last, at L3, before it counts: twenty
/// watch windows of 50 ms, or one whole-second window. Half a second was not enough under
/// a loaded emulated guest (`90670 -> 53494` probed on noise, TCG, 2026-12).
pub const RATE_CHANGE_CONFIRM_MS: u64 = 1000;

/// Busy windows in a row a change in rate alone must be seen in, at L3, before it counts
/// (with [`RATE_CHANGE_CONFIRM_MS`]), unless it is decisive ([`SignatureChange::decisive`]).
/// One window is 50 ms at the watch's default rate: a single noisy window, or the one that
/// holds a queue freeze, is no workload change.
pub const CHANGE_CONFIRM_WINDOWS: u32 = 3;

/// A rise in rate by this factor or more counts with its first window: a scan or a burst
/// beside a rate-limited database multiplies the rate (4000 -> 12687 bios/s and 7000 ->
/// 30160 in the simulator's `bursty_spikes`). It does not probe: contention moves rates by
/// as much (four busy null_blk devices on 2 emulated vCPUs: 3.4-3.8x, each probe finding
/// 0.0% merging), so, like any change of rate alone, it waits for the bio tap's sample,
/// which the daemon takes at once ([`super::Reason::asks_the_tap`]); counted, a clearly
/// low sample answers it.
pub const DECISIVE_RATE_RISE: f64 = 3.0;

impl SignatureChange {
    /// A change in rate alone (the shape is the same), which contention also causes.
    pub fn is_rate_only(&self) -> bool {
        matches!(self, SignatureChange::Rate { .. })
    }

    /// A change that counts with its first window: any change of shape (the read share and
    /// the bio size of a window of at least `min_window_bios` bios do not move by 20 points
    /// or 2x on noise: the read share's standard deviation over 1000 bios is under 1.6
    /// points, and contention moves neither), and a rise in rate of
    /// [`DECISIVE_RATE_RISE`] or more. Losses are counted in the time merging stays wrongly
    /// off: a 15 s batched scan after random work loses 43% of its throughput at L3, so each
    /// 50 ms window of waiting costs 0.14% of that phase (the simulator's `bursty_spikes`
    /// in the 2008 figures: waiting three windows for its `reads 80% -> 100%` took its
    /// worst phase from 0.30% to 0.45%, over the 0.4% every phase must stay under).
    pub fn decisive(&self) -> bool {
        match *self {
            SignatureChange::Rate {
                from_per_sec,
                to_per_sec,
            } => to_per_sec >= from_per_sec * DECISIVE_RATE_RISE,
            SignatureChange::ReadShare { .. } | SignatureChange::BioSize { .. } => true,
        }
    }

    /// Whether a change seen in `windows` busy windows in a row over `lasted_ms` counts: a
    /// decisive one at once; one in rate alone after [`CHANGE_CONFIRM_WINDOWS`] and
    /// [`RATE_CHANGE_CONFIRM_MS`] (then the bio tap's next sample answers it).
    pub fn confirmed(&self, windows: u32, lasted_ms: u64) -> bool {
        self.decisive()
            || (windows >= CHANGE_CONFIRM_WINDOWS && lasted_ms >= RATE_CHANGE_CONFIRM_MS)
    }
}

impl std::fmt::Display for SignatureChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            SignatureChange::Rate {
                from_per_sec,
                to_per_sec,
            } => write!(f, "bios/s {from_per_sec:.0} -> {to_per_sec:.0}"),
            SignatureChange::ReadShare { from, to } => {
                write!(f, "reads {:.0}% -> {:.0}%", from * 100.0, to * 100.0)
            }
            SignatureChange::BioSize {
                from_sectors,
                to_sectors,
            } => write!(
                f,
                "bio size {:.1} -> {:.1} KiB",
                from_sectors / 2.0,
                to_sectors / 2.0
            ),
        }
    }
}
