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
use crate::pricing::worth::{Saving, SavingUnit, UnknownWhy, Worth};
use mergetune_kernel::perf::{MergeSamples, PathCounts};
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

impl Shape {
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

/// One device's bios over a span of sampling, by which parts of the merge path they went
/// through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct DeviceBios {
    /// Its scheduler's slot ([`MergeSamples::slot`]).
    pub slot: usize,
    /// Bios below L3 (the merge attempt ran).
    pub merge_path: u64,
    /// Bios at L0 or L1 (the lookups past the one-hit cache ran).
    pub beyond_one_hit: u64,
    /// Bios at L0 (mq-deadline's front lookup ran).
    pub front_lookup: u64,
    /// The workload shape the device's price is kept under when the span ends (its
    /// settled shape: `live`'s hysteresis), which spans pool together.
    pub shape: Option<Shape>,
}

impl DeviceBios {
    pub fn add(&mut self, o: &DeviceBios) {
        self.slot = o.slot;
        self.merge_path += o.merge_path;
        self.beyond_one_hit += o.beyond_one_hit;
        self.front_lookup += o.front_lookup;
    }
}

/// Bios submitted over a span of sampling, per device (by name).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct SpanBios {
    pub devices: std::collections::BTreeMap<String, DeviceBios>,
    /// Span of the sampling, ms.
    pub span_ms: u64,
}

impl SpanBios {
    /// Counts one device's bios of a span at its level.
    pub fn add_device(
        &mut self,
        name: &str,
        scheduler: Option<Scheduler>,
        level: Level,
        bios: u64,
    ) {
        let d = match self.devices.get_mut(name) {
            Some(d) => d,
            None => self.devices.entry(name.to_string()).or_default(),
        };
        d.slot = MergeSamples::slot(scheduler);
        if level < Level::L3 {
            d.merge_path += bios;
        }
        if level <= Level::L1 {
            d.beyond_one_hit += bios;
        }
        if level == Level::L0 {
            d.front_lookup += bios;
        }
    }

    /// The devices a merge-path sample of slot `slot` can have been spent for: those whose
    /// bios went through the merge path in this span, on that scheduler (slot 0, the plug
    /// and `none`, runs for every scheduler's bios).
    fn candidates(&self, slot: usize) -> impl Iterator<Item = &str> {
        self.devices
            .iter()
            .filter(move |(_, d)| d.merge_path > 0 && (slot == 0 || d.slot == slot))
            .map(|(n, _)| n.as_str())
    }
}

/// The share of a slot's merge-path bios one device must hold to own the samples nobody
/// named (as the price per scheduler held a busy device beside a few bios of the root
/// disk): its price errs high by at most the others' samples, a fifth of the bios.
pub const DOMINANT_SHARE: f64 = 0.8;

impl SpanBios {
    /// The candidate of slot `slot` holding at least [`DOMINANT_SHARE`] of the candidates'
    /// merge-path bios, if one does.
    fn dominant(&self, slot: usize) -> Option<&str> {
        let bios_of = |n: &str| self.devices.get(n).map_or(0, |d| d.merge_path);
        let all: u64 = self.candidates(slot).map(bios_of).sum();
        let top = self.candidates(slot).max_by_key(|n| bios_of(n))?;
        (bios_of(top) as f64 >= DOMINANT_SHARE * all as f64).then_some(top)
    }
}

/// One device's merge-path samples over a span: those tied to it (`own`) and those that may
/// be its or another's (`maybe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceSamples {
    pub own: PathCounts,
    pub maybe: PathCounts,
}

impl DeviceSamples {
    pub fn add(&mut self, o: &DeviceSamples) {
        self.own.add(&o.own);
        self.maybe.add(&o.maybe);
    }
}

/// Device `name`'s samples in a span. A sample is the device's when, of the devices its
/// task queued bios on, it is the only one whose bios went through that scheduler's merge
/// path in the span; or, with no such device named (a task whose bios were not sampled, a
/// sampler without bio events), when it is the only candidate of all or holds
/// [`DOMINANT_SHARE`] of their bios. A sample with more than one candidate is `maybe` for
/// each of them: it bounds their prices from above and is priced for none (docs/policy.md,
/// "Pricing the merge path").
pub fn attribute(name: &str, samples: &MergeSamples, bios: &SpanBios) -> DeviceSamples {
    let mut out = DeviceSamples::default();
    if bios.devices.get(name).is_none_or(|d| d.merge_path == 0) {
        return out;
    }
    // The samples no submitter holds (a world that counts only the totals: a recording of
    // an older daemon) are nobody's named ones.
    let mut unnamed = [PathCounts::default(); 4];
    for (slot, u) in unnamed.iter_mut().enumerate() {
        let held = |f: fn(&PathCounts) -> u64| -> u64 {
            samples.by_submitter.values().map(|c| f(&c[slot])).sum()
        };
        u.merge_path = samples.merge_path[slot].saturating_sub(held(|c| c.merge_path));
        u.beyond_one_hit = samples.beyond_one_hit[slot].saturating_sub(held(|c| c.beyond_one_hit));
        u.front_lookup = samples.front_lookup[slot].saturating_sub(held(|c| c.front_lookup));
    }
    let nobody: Vec<String> = Vec::new();
    let all = samples
        .by_submitter
        .iter()
        .chain(std::iter::once((&nobody, &unnamed)));
    for (submitter, counts) in all {
        for (slot, c) in counts.iter().enumerate() {
            if c.merge_path == 0 {
                continue;
            }
            let named: Vec<&str> = bios
                .candidates(slot)
                .filter(|d| submitter.iter().any(|s| s == d))
                .collect();
            let (n, mine) = if named.is_empty() {
                match bios.dominant(slot) {
                    Some(d) => (1, d == name),
                    None => (
                        bios.candidates(slot).count(),
                        bios.candidates(slot).any(|d| d == name),
                    ),
                }
            } else {
                (named.len(), named.contains(&name))
            };
            match (mine, n) {
                (false, _) => {}
                (true, 1) => out.own.add(c),
                (true, _) => out.maybe.add(c),
            }
        }
    }
    out
}

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

/// ns per bio of `own` samples over `bios`, the upper bound also counting the `maybe` ones.
fn per_bio(period_ns: u64, own: u64, maybe: u64, bios: u64) -> Option<NsPerBio> {
    if bios == 0 {
        return None;
    }
    let per = period_ns as f64 / bios as f64;
    Some(NsPerBio {
        estimate: own as f64 * per,
        lo: poisson_ci(own).0 * per,
        hi: poisson_ci(own + maybe).1 * per,
        samples: own,
        bios,
    })
}

/// The price of one device's merge path: ns per bio each rung would not spend.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClassPrice {
    /// Indexed by level: [None, L1 (front lookup), L2 (past the one-hit cache), L3 (all)].
    pub levels: [Option<NsPerBio>; 4],
}

/// Prices a device from its samples and its bios pooled over spans (both summed over the
/// same spans); None without merge-path bios.
pub fn price_device(
    period_ns: u64,
    samples: &DeviceSamples,
    bios: &DeviceBios,
) -> Option<ClassPrice> {
    let (own, maybe) = (samples.own, samples.maybe);
    let l3 = per_bio(period_ns, own.merge_path, maybe.merge_path, bios.merge_path)?;
    let l2 = per_bio(
        period_ns,
        own.beyond_one_hit,
        maybe.beyond_one_hit,
        bios.beyond_one_hit,
    );
    let l1 = (bios.slot == MergeSamples::slot(Some(Scheduler::MqDeadline)))
        .then(|| {
            per_bio(
                period_ns,
                own.front_lookup,
                maybe.front_lookup,
                bios.front_lookup,
            )
        })
        .flatten();
    Some(ClassPrice {
        levels: [None, l1, l2, Some(l3)],
    })
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
    Worth::live(floor, scheduler, levels, COVERAGE_PERCENT)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::samples_of;
    use super::*;
    use crate::pricing::worth::Basis;

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
        let s = samples_of(&["loop0"], 1, merge_samples);
        let mut b = SpanBios::default();
        b.add_device("loop0", Some(Scheduler::MqDeadline), Level::L0, bios);
        b.span_ms = 10_000;
        (s, b)
    }

    fn price_of(name: &str, s: &MergeSamples, b: &SpanBios) -> Option<ClassPrice> {
        price_device(s.period_ns, &attribute(name, s, b), &b.devices[name])
    }

    #[test]
    fn mq_deadline_samples_price_its_bios_and_the_saving_scales_with_the_rate() {
        // 100 samples of 1 ms over 500,000 bios: 200 ns per bio
        let (s, b) = mq_deadline_span(100, 500_000);
        let p = price_of("loop0", &s, &b).expect("priced");
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
        let worth_of = |merge_samples| {
            let (s, b) = mq_deadline_span(merge_samples, 1_000);
            let p = price_of("loop0", &s, &b).expect("priced");
            worth_live(
                Some(&p),
                Some(Scheduler::MqDeadline),
                1e9,
                SavingFloor::from_percent_cpu(0.0),
            )
        };
        let w = worth_of(MIN_SAMPLES - 1);
        assert!(matches!(w.basis, Basis::Unknown { .. }), "{w:?}");
        let w = worth_of(MIN_SAMPLES);
        assert!(matches!(w.basis, Basis::Live { .. }), "{w:?}");
    }

    #[test]
    fn bios_at_l3_do_not_dilute_the_price() {
        let (s, mut b) = mq_deadline_span(100, 500_000);
        b.add_device("loop1", Some(Scheduler::MqDeadline), Level::L3, 5_000_000);
        let p = price_of("loop0", &s, &b).unwrap();
        assert!((p.levels[3].unwrap().estimate - 200.0).abs() < 1e-9);
    }

    /// Two devices on mq-deadline: loop0 under random reads (100 samples over 500,000 bios),
    /// loop1 under large writes (30 samples over 30,000 bios), and a plug sample of loop1's
    /// task beside a `none` device.
    fn two_devices() -> (MergeSamples, SpanBios) {
        let mut s = samples_of(&["loop0"], 1, 100);
        s.add(&samples_of(&["loop1"], 1, 20));
        s.add(&samples_of(&["loop1"], 0, 10));
        let mut b = SpanBios::default();
        b.add_device("loop0", Some(Scheduler::MqDeadline), Level::L0, 500_000);
        b.add_device("loop1", Some(Scheduler::MqDeadline), Level::L0, 30_000);
        b.add_device("nvme0n1", Some(Scheduler::None), Level::L0, 100_000);
        (s, b)
    }

    #[test]
    fn each_device_on_a_shared_scheduler_is_priced_from_its_own_tasks_samples() {
        let (s, b) = two_devices();
        let p0 = price_of("loop0", &s, &b).unwrap().levels[3].unwrap();
        let p1 = price_of("loop1", &s, &b).unwrap().levels[3].unwrap();
        assert!((p0.estimate - 200.0).abs() < 1e-9, "{p0:?}");
        // loop1's own 20 mq-deadline samples and its task's 10 plug samples over 30,000 bios
        assert!((p1.estimate - 1000.0).abs() < 1e-9, "{p1:?}");
        let none = price_of("nvme0n1", &s, &b).unwrap().levels[3].unwrap();
        assert_eq!(none.samples, 0, "no sample of its task: {none:?}");
    }

    #[test]
    fn a_sample_that_cannot_be_attributed_widens_its_candidates_intervals_only() {
        let (mut s, b) = two_devices();
        // 40 samples of a task that queued on both, 50 of one whose bios were not seen
        s.add(&samples_of(&["loop0", "loop1"], 1, 40));
        s.add(&samples_of(&[], 1, 50));
        // loop0 holds 94% of the bios: the 50 nobody named are its own, the 40 of a task
        // on both are not
        let d0 = attribute("loop0", &s, &b);
        assert_eq!((d0.own.merge_path, d0.maybe.merge_path), (150, 40));
        let p0 = price_device(s.period_ns, &d0, &b.devices["loop0"])
            .unwrap()
            .levels[3]
            .unwrap();
        assert!((p0.estimate - 300.0).abs() < 1e-9, "{p0:?}");
        // the upper bound counts them all: at least 190 samples over 500,000 bios
        assert!(p0.hi > 380.0, "{p0:?}");
        // with comparable loads the ones nobody named are nobody's either
        let mut even = b.clone();
        even.devices.get_mut("loop1").unwrap().merge_path = 500_000;
        let d0 = attribute("loop0", &s, &even);
        assert_eq!((d0.own.merge_path, d0.maybe.merge_path), (100, 90));
        // the none device cannot have spent mq-deadline's samples
        assert_eq!(attribute("nvme0n1", &s, &b), DeviceSamples::default());
        // alone on its scheduler, a device owns the samples nobody named
        let mut alone = b.clone();
        alone.devices.remove("loop1");
        let d0 = attribute("loop0", &samples_of(&[], 1, 50), &alone);
        assert_eq!((d0.own.merge_path, d0.maybe.merge_path), (50, 0));
    }

    #[test]
    fn a_workload_has_a_shape() {
        // random 4 KiB reads: 8 sectors a bio
        let random_reads = Shape::of(1000, 1000, 8000).unwrap();
        assert_eq!(random_reads.reads, ReadMix::Reads);
        assert_eq!(random_reads.size, SizeClass::UpTo4k);
        let seq_writes = Shape::of(1000, 0, 256_000).unwrap();
        assert_eq!(
            (seq_writes.reads, seq_writes.size),
            (ReadMix::Writes, SizeClass::Over64k)
        );
        assert_eq!(Shape::of(0, 0, 0), None);
    }
}
