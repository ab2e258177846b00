//! The merge path's price, from samples: ns of CPU per bio that each rung of the ladder
//! would not spend, with a 95% interval, and from it a device's saving in CPU ms per second.
//!
//! A `cpu-clock` sample stands for `period_ns` of CPU time (`kernel::perf`). Over a span
//! of sampling, the merge-path samples of a scheduler class times the period, over the
//! bios that went through that path in the same span, is the path's ns per bio. The
//! count is Poisson-like (each period of CPU time lands in the merge path or not), so its
//! interval is Poisson's (Wilson-Hilferty's approximation, within 1% of the exact bounds
//! from 5 counts on); with fewer than [`MIN_SAMPLES`] merge-path samples the price is not
//! resolved and the saving stays unknown.
//!
//! Which bios count, per rung (docs/policy.md "Pricing the merge path"): the whole merge
//! attempt runs for bios of devices below L3; the lookups past the one-hit cache only at
//! L0 and L1; mq-deadline's front lookup only at L0. Samples of the plug merge and of
//! schedulers without a merge function of their own (`none`) are shared by every device's
//! bios.
//!
//! A price is keyed by what it priced: the scheduler class and the workload's [`Shape`]
//! (read share and bio size class). The merge path's cost per bio depends on both (a
//! sequential phase priced at 263 ns per bio where random reads cost 28 on the same loop
//! device), so a price is only applied to a device running the shape it was measured on.

use super::floor::SavingFloor;
use super::profile::Verdict;
use crate::decision::Level;
use crate::pricing::worth::{Basis, Saving, SavingUnit, UnknownWhy, Worth};
use mergetune_kernel::perf::MergeSamples;
use mergetune_kernel::scheduler::Scheduler;
use serde::Serialize;

/// Fewer merge-path samples than this leave a price unresolved.
pub const MIN_SAMPLES: u64 = 10;
/// The coverage of every interval here.
pub const COVERAGE_PERCENT: f64 = 95.0;
const Z95: f64 = 1.959964;

/// The read mix of a workload, for keying a price.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadMix {
    /// At least 80% of the bios are reads.
    Reads,
    /// Between.
    Mixed,
    /// At most 20% of the bios are reads.
    Writes,
}

/// The bio size class of a workload, for keying a price: the merge path's work per bio
/// differs between small random bios and large sequential ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeClass {
    /// Up to 4 KiB.
    UpTo4k,
    /// Over 4 KiB, up to 16 KiB.
    UpTo16k,
    /// Over 16 KiB, up to 64 KiB.
    UpTo64k,
    /// Over 64 KiB.
    Over64k,
}

/// What a price was measured on, besides the scheduler: the read mix and the bio size
/// class of the bios that went through the merge path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shape {
    pub reads: ReadMix,
    pub size: SizeClass,
}

/// How many shapes there are (3 read mixes x 4 size classes).
pub const SHAPES: usize = 12;

impl Shape {
    /// Its index among the [`SHAPES`].
    pub fn index(self) -> usize {
        let reads = match self.reads {
            ReadMix::Reads => 0,
            ReadMix::Mixed => 1,
            ReadMix::Writes => 2,
        };
        reads * 4 + self.size as usize
    }

    fn from_index(i: usize) -> Shape {
        let reads = [ReadMix::Reads, ReadMix::Mixed, ReadMix::Writes][(i / 4) % 3];
        let size = [
            SizeClass::UpTo4k,
            SizeClass::UpTo16k,
            SizeClass::UpTo64k,
            SizeClass::Over64k,
        ][i % 4];
        Shape { reads, size }
    }

    /// The shape of a device's counters (None without bios).
    pub fn of_counters(c: &crate::sampler::Counters) -> Option<Shape> {
        Shape::of(c.bios(), c.read_bios(), c.sectors_read + c.sectors_written)
    }

    /// The shape of `bios` bios of which `read_bios` were reads, `sectors` 512-byte sectors
    /// in all; None without bios.
    pub fn of(bios: u64, read_bios: u64, sectors: u64) -> Option<Shape> {
        if bios == 0 {
            return None;
        }
        let read_share = read_bios as f64 / bios as f64;
        let reads = if read_share >= 0.8 {
            ReadMix::Reads
        } else if read_share <= 0.2 {
            ReadMix::Writes
        } else {
            ReadMix::Mixed
        };
        let kib_per_bio = sectors as f64 / 2.0 / bios as f64;
        let size = if kib_per_bio <= 4.0 {
            SizeClass::UpTo4k
        } else if kib_per_bio <= 16.0 {
            SizeClass::UpTo16k
        } else if kib_per_bio <= 64.0 {
            SizeClass::UpTo64k
        } else {
            SizeClass::Over64k
        };
        Some(Shape { reads, size })
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reads = match self.reads {
            ReadMix::Reads => "reads",
            ReadMix::Mixed => "mixed reads and writes",
            ReadMix::Writes => "writes",
        };
        let size = match self.size {
            SizeClass::UpTo4k => "<= 4 KiB",
            SizeClass::UpTo16k => "4-16 KiB",
            SizeClass::UpTo64k => "16-64 KiB",
            SizeClass::Over64k => "> 64 KiB",
        };
        write!(f, "{reads}, {size} bios")
    }
}

/// Bios submitted over a span of sampling, by scheduler class (index as
/// [`MergeSamples::slot`]) and by which parts of the path they went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SpanBios {
    /// Bios of devices below L3 (the merge attempt ran).
    pub merge_path: [u64; 4],
    /// Of `merge_path`, the bios by the [`Shape`] of their device's tick (index
    /// [`Shape::index`]): the span's shape per class is the one most of them have.
    pub merge_path_shapes: [[u64; SHAPES]; 4],
    /// Bios of devices at L0 or L1 (the lookups past the one-hit cache ran).
    pub beyond_one_hit: [u64; 4],
    /// Bios of devices at L0 (mq-deadline's front lookup ran).
    pub front_lookup: [u64; 4],
    /// Span of the sampling, ms.
    pub span_ms: u64,
}

impl SpanBios {
    /// Counts one device's bios of a span at its level, of the device's workload `shape`
    /// in that tick.
    pub fn add_device(
        &mut self,
        scheduler: Option<Scheduler>,
        level: Level,
        bios: u64,
        shape: Option<Shape>,
    ) {
        let i = MergeSamples::slot(scheduler);
        if level < Level::L3 {
            self.merge_path[i] += bios;
            if let Some(sh) = shape {
                self.merge_path_shapes[i][sh.index()] += bios;
            }
        }
        if level <= Level::L1 {
            self.beyond_one_hit[i] += bios;
        }
        if level == Level::L0 {
            self.front_lookup[i] += bios;
        }
    }

    pub fn add(&mut self, o: &SpanBios) {
        for i in 0..4 {
            self.merge_path[i] += o.merge_path[i];
            for (a, b) in self.merge_path_shapes[i]
                .iter_mut()
                .zip(o.merge_path_shapes[i])
            {
                *a += b;
            }
            self.beyond_one_hit[i] += o.beyond_one_hit[i];
            self.front_lookup[i] += o.front_lookup[i];
        }
        self.span_ms += o.span_ms;
    }

    /// The shape of the bios of scheduler class `slot` that went through the merge path:
    /// the shape at least [`DOMINANT_SHARE`] of them had (several devices of one scheduler
    /// share its samples; a busy device beside a few bios of another is still priced); None
    /// when no shape holds that share, or without bios.
    pub fn shape(&self, slot: usize) -> Option<Shape> {
        let all = self.merge_path[slot];
        let (i, most) = self.merge_path_shapes[slot]
            .iter()
            .copied()
            .enumerate()
            .max_by_key(|&(_, n)| n)?;
        (all > 0 && most as f64 >= DOMINANT_SHARE * all as f64).then(|| Shape::from_index(i))
    }
}

/// The share of a class's merge-path bios one shape must hold to be the span's shape.
pub const DOMINANT_SHARE: f64 = 0.8;

/// ns per bio with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NsPerBio {
    pub estimate: f64,
    pub lo: f64,
    pub hi: f64,
    /// Merge-path samples behind it.
    pub samples: u64,
    /// Bios behind it.
    pub bios: u64,
}

impl NsPerBio {
    pub fn resolved(&self) -> bool {
        self.samples >= MIN_SAMPLES
    }
}

/// Poisson 95% bounds of a count (Wilson-Hilferty).
pub fn poisson_ci(n: u64) -> (f64, f64) {
    let lo = if n == 0 {
        0.0
    } else {
        let nf = n as f64;
        (nf * (1.0 - 1.0 / (9.0 * nf) - Z95 / (3.0 * nf.sqrt())).powi(3)).max(0.0)
    };
    let m = (n + 1) as f64;
    let hi = m * (1.0 - 1.0 / (9.0 * m) + Z95 / (3.0 * m.sqrt())).powi(3);
    (lo, hi)
}

/// ns per bio of a count of samples over bios; the shared (slot 0) samples are spread over
/// every class's bios and added.
fn per_bio(
    period_ns: u64,
    own: u64,
    own_bios: u64,
    shared: u64,
    all_bios: u64,
) -> Option<NsPerBio> {
    if all_bios == 0 {
        return None;
    }
    let p = period_ns as f64;
    let part = |n: u64, bios: u64| -> (f64, f64, f64) {
        if bios == 0 || n == 0 {
            let hi = if bios == 0 {
                0.0
            } else {
                poisson_ci(0).1 * p / bios as f64
            };
            return (0.0, 0.0, hi);
        }
        let (lo, hi) = poisson_ci(n);
        let b = bios as f64;
        (n as f64 * p / b, lo * p / b, hi * p / b)
    };
    let (e1, l1, h1) = part(own, own_bios);
    let (e2, l2, h2) = part(shared, all_bios);
    // Summing the bounds of two independent counts is conservative (wider than the
    // interval of the sum).
    Some(NsPerBio {
        estimate: e1 + e2,
        lo: l1 + l2,
        hi: h1 + h2,
        samples: own + shared,
        bios: own_bios.max(all_bios),
    })
}

/// The price of one scheduler class: ns per bio each rung would not spend.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClassPrice {
    /// Indexed by level: [None, L1 (front lookup), L2 (past the one-hit cache), L3 (all)].
    pub levels: [Option<NsPerBio>; 4],
}

/// Prices every scheduler class from a span's samples and bios.
pub fn price(samples: &MergeSamples, bios: &SpanBios) -> [Option<ClassPrice>; 4] {
    let mut out = [None; 4];
    let all_l3: u64 = bios.merge_path.iter().sum();
    let all_l2: u64 = bios.beyond_one_hit.iter().sum();
    let all_l1: u64 = bios.front_lookup.iter().sum();
    for (k, slot) in out.iter_mut().enumerate() {
        // slot 0 (none, plug) has no samples of its own: only the shared ones
        let own = |a: &[u64; 4]| if k == 0 { 0 } else { a[k] };
        let own_bios = |a: &[u64; 4]| if k == 0 { 0 } else { a[k] };
        if bios.merge_path[k] == 0 {
            continue;
        }
        let l3 = per_bio(
            samples.period_ns,
            own(&samples.merge_path),
            own_bios(&bios.merge_path),
            samples.merge_path[0],
            all_l3,
        );
        let l2 = per_bio(
            samples.period_ns,
            own(&samples.beyond_one_hit),
            own_bios(&bios.beyond_one_hit),
            samples.beyond_one_hit[0],
            all_l2,
        );
        let l1 = (k == MergeSamples::slot(Some(Scheduler::MqDeadline)))
            .then(|| {
                per_bio(
                    samples.period_ns,
                    samples.front_lookup[k],
                    bios.front_lookup[k],
                    0,
                    all_l1.max(1),
                )
            })
            .flatten();
        *slot = Some(ClassPrice {
            levels: [None, l1, l2.filter(|_| all_l2 > 0), l3],
        });
    }
    out
}

/// A device's table: each priced level's saving in CPU ms per second at `bios_per_sec`,
/// worth it when the interval's lower end reaches the `floor`.
pub fn worth_live(
    price: Option<&ClassPrice>,
    scheduler: Option<Scheduler>,
    bios_per_sec: f64,
    floor: SavingFloor,
) -> Worth {
    let Some(price) = price else {
        return Worth::unknown(UnknownWhy::NotMeasuredYet);
    };
    let mut levels = [None; 4];
    let mut any = false;
    for l in [Level::L1, Level::L2, Level::L3] {
        let i = usize::from(l.index());
        let Some(ns) = price.levels[i].filter(NsPerBio::resolved) else {
            continue;
        };
        any = true;
        let to_ms = |ns_per_bio: f64| ns_per_bio * bios_per_sec / 1e6;
        let (value, lo, hi) = (to_ms(ns.estimate), to_ms(ns.lo), to_ms(ns.hi));
        let verdict = if lo >= floor.ms_per_sec() {
            Verdict::Saves
        } else {
            Verdict::NoMeasurableDifference
        };
        levels[i] = Some(Saving {
            value,
            ci: Some([lo, hi]),
            unit: SavingUnit::CpuMsPerSec,
            verdict,
        });
    }
    if !any {
        return Worth::unknown(UnknownWhy::NotMeasuredYet);
    }
    Worth {
        basis: Basis::Live { floor },
        scheduler,
        levels,
        coverage_percent: COVERAGE_PERCENT,
        untrusted: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOOR_5_MS: SavingFloor = SavingFloor::from_percent_cpu(0.5);

    #[test]
    fn poisson_bounds_hold_the_count_and_are_those_of_the_tables() {
        // exact 95% bounds for 10: [4.795, 18.39]; for 0: [0, 3.689]
        let (lo, hi) = poisson_ci(10);
        assert!(
            (lo - 4.795).abs() < 0.1 && (hi - 18.39).abs() < 0.1,
            "{lo} {hi}"
        );
        let (lo, hi) = poisson_ci(0);
        assert!(lo == 0.0 && (hi - 3.689).abs() < 0.05, "{hi}");
    }

    fn mq_deadline_span(merge_samples: u64, bios: u64) -> (MergeSamples, SpanBios) {
        let mut s = MergeSamples {
            period_ns: 1_000_000,
            ..Default::default()
        };
        s.merge_path[1] = merge_samples;
        s.total = merge_samples * 30;
        let mut b = SpanBios::default();
        b.add_device(
            Some(Scheduler::MqDeadline),
            Level::L0,
            bios,
            Shape::of(bios, bios, 8 * bios),
        );
        b.span_ms = 10_000;
        (s, b)
    }

    #[test]
    fn mq_deadline_samples_price_its_bios_and_the_saving_scales_with_the_rate() {
        // 100 samples of 1 ms over 500,000 bios: 200 ns per bio
        let (s, b) = mq_deadline_span(100, 500_000);
        let p = price(&s, &b)[1].expect("priced");
        let l3 = p.levels[3].expect("L3 priced");
        assert!((l3.estimate - 200.0).abs() < 1e-9);
        assert!(l3.lo < 200.0 && l3.hi > 200.0);
        // at 50,000 bios/s: 10 ms/s, lower end about 8.1 ms/s: clears a 5 ms/s floor
        let w = worth_live(Some(&p), Some(Scheduler::MqDeadline), 50_000.0, FLOOR_5_MS);
        assert!(w.worth(Level::L3));
        let v = w.saving(Level::L3).unwrap();
        assert!((v.value - 10.0).abs() < 1e-9, "{v:?}");
        // at 10,000 bios/s: 2 ms/s, under the floor
        let w = worth_live(Some(&p), Some(Scheduler::MqDeadline), 10_000.0, FLOOR_5_MS);
        assert!(!w.worth(Level::L3));
        assert!(w.describe([Level::L3]).contains("floor 5.00 ms/s"));
    }

    #[test]
    fn too_few_samples_leave_the_saving_unknown() {
        let (s, b) = mq_deadline_span(MIN_SAMPLES - 1, 1_000);
        let p = price(&s, &b)[1].expect("priced");
        let w = worth_live(
            Some(&p),
            Some(Scheduler::MqDeadline),
            1e9,
            SavingFloor::from_percent_cpu(0.0),
        );
        assert!(matches!(w.basis, Basis::Unknown { .. }), "{w:?}");
        let (s, b) = mq_deadline_span(MIN_SAMPLES, 1_000);
        let p = price(&s, &b)[1].expect("priced");
        let w = worth_live(
            Some(&p),
            Some(Scheduler::MqDeadline),
            1e9,
            SavingFloor::from_percent_cpu(0.0),
        );
        assert!(matches!(w.basis, Basis::Live { .. }), "{w:?}");
    }

    #[test]
    fn bios_at_l3_do_not_dilute_the_price() {
        let (s, mut b) = mq_deadline_span(100, 500_000);
        b.add_device(Some(Scheduler::MqDeadline), Level::L3, 5_000_000, None);
        let p = price(&s, &b)[1].unwrap();
        assert!((p.levels[3].unwrap().estimate - 200.0).abs() < 1e-9);
    }

    #[test]
    fn plug_samples_are_shared_by_every_scheduler() {
        let mut s = MergeSamples {
            period_ns: 1_000_000,
            ..Default::default()
        };
        s.merge_path[0] = 100;
        let mut b = SpanBios::default();
        b.add_device(
            Some(Scheduler::None),
            Level::L0,
            250_000,
            Shape::of(1, 1, 8),
        );
        b.add_device(
            Some(Scheduler::MqDeadline),
            Level::L0,
            250_000,
            Shape::of(1, 1, 8),
        );
        let prices = price(&s, &b);
        let none = prices[0].unwrap().levels[3].unwrap().estimate;
        let dd = prices[1].unwrap().levels[3].unwrap().estimate;
        assert!(
            (none - 200.0).abs() < 1e-9 && (dd - 200.0).abs() < 1e-9,
            "{none} {dd}"
        );
        assert!(prices[2].is_none(), "no bfq bios: no bfq price");
    }

    #[test]
    fn a_span_has_the_shape_of_its_merge_path_bios() {
        let mut b = SpanBios::default();
        // random 4 KiB reads: 8 sectors a bio
        let random_reads = Shape::of(1000, 1000, 8000).unwrap();
        assert_eq!(random_reads.reads, ReadMix::Reads);
        assert_eq!(random_reads.size, SizeClass::UpTo4k);
        b.add_device(
            Some(Scheduler::MqDeadline),
            Level::L0,
            100_000,
            Some(random_reads),
        );
        assert_eq!(b.shape(1), Some(random_reads));
        // the same scheduler's bios at L3 do not count toward its shape, and a few bios of
        // another device do not change it (a root disk beside a busy loop device)
        let seq_writes = Shape::of(1000, 0, 256_000).unwrap();
        assert_eq!(
            (seq_writes.reads, seq_writes.size),
            (ReadMix::Writes, SizeClass::Over64k)
        );
        b.add_device(
            Some(Scheduler::MqDeadline),
            Level::L3,
            1_000_000,
            Some(seq_writes),
        );
        b.add_device(
            Some(Scheduler::MqDeadline),
            Level::L0,
            300,
            Some(seq_writes),
        );
        assert_eq!(b.shape(1), Some(random_reads));
        // two shapes of comparable weight: no shape, no keyed price
        b.add_device(
            Some(Scheduler::MqDeadline),
            Level::L0,
            100_000,
            Some(seq_writes),
        );
        assert_eq!(b.shape(1), None);
        assert_eq!(SpanBios::default().shape(1), None);
        for i in 0..SHAPES {
            assert_eq!(Shape::from_index(i).index(), i);
        }
    }
}
