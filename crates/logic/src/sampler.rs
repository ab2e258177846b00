//! Turns successive counter snapshots into per-device deltas and decision windows.
//!
//! Counters only grow, but they wrap (`unsigned int` ms fields at 2^32, `unsigned long` on
//! 32-bit kernels) and restart from zero when a device is removed and re-added under the
//! same name. A backwards step that is a plausible 32-bit wrap is taken as a wrap; any other
//! backwards step of a counter that must only grow (ios, merges, sectors), or a changed
//! major:minor, is a reset: the sample is dropped and the device starts afresh, never
//! producing a huge delta. The time fields (ms reading, writing, discarding, flushing, ms
//! doing I/O, weighted ms) are not such counters: on 6.12 with mq-deadline and bfq, rd_ms
//! and time_in_queue went backwards 7-9 times in about 130 reads of a busy device with no
//! reset at all. A time field that goes backwards gives 0 for that tick, and the snapshot
//! says which devices it happened to ([`SampleSet::time_went_back`]), so the daemon can
//! say it once. Pure: no I/O, no clock.

use mergetune_kernel::diskstats::{DiskStat, MAX_FIELDS, field};
use serde::Serialize;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a: device names are short and not attacker-chosen, and SipHash was a visible share
/// of a tick for many devices.
#[derive(Debug, Clone, Copy)]
pub struct FnvHasher(u64);

impl Default for FnvHasher {
    fn default() -> Self {
        FnvHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for FnvHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// The counters of one interval (or one window) that the policy uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub reads_completed: u64,
    pub reads_merged: u64,
    pub sectors_read: u64,
    pub read_ms: u64,
    pub writes_completed: u64,
    pub writes_merged: u64,
    pub sectors_written: u64,
    pub write_ms: u64,
}

impl Counters {
    pub fn add(&mut self, o: &Counters) {
        self.reads_completed += o.reads_completed;
        self.reads_merged += o.reads_merged;
        self.sectors_read += o.sectors_read;
        self.read_ms += o.read_ms;
        self.writes_completed += o.writes_completed;
        self.writes_merged += o.writes_merged;
        self.sectors_written += o.sectors_written;
        self.write_ms += o.write_ms;
    }
    /// Bios submitted for reading: requests completed plus bios merged into them.
    pub fn read_bios(&self) -> u64 {
        self.reads_completed + self.reads_merged
    }
    pub fn write_bios(&self) -> u64 {
        self.writes_completed + self.writes_merged
    }
    pub fn bios(&self) -> u64 {
        self.read_bios() + self.write_bios()
    }
    pub fn merged(&self) -> u64 {
        self.reads_merged + self.writes_merged
    }
    /// Merged / bios over both directions, i.e. the per-direction ratios weighted by
    /// traffic. 0 when there were no bios.
    pub fn merge_ratio(&self) -> f64 {
        ratio(self.merged(), self.bios())
    }
    pub fn read_merge_ratio(&self) -> f64 {
        ratio(self.reads_merged, self.read_bios())
    }
    pub fn write_merge_ratio(&self) -> f64 {
        ratio(self.writes_merged, self.write_bios())
    }
}

fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

/// The outcome of comparing two snapshots of one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delta {
    /// The first sight of a device: nothing to compare with yet.
    First,
    Counters(Counters),
    /// Counters went backwards (device re-added) or the device number changed.
    Reset,
}

const U32_SPAN: u64 = 1 << 32;

/// The increase of one field, or None when it is a reset.
fn field_delta(index: usize, prev: u64, cur: u64) -> Option<u64> {
    if cur >= prev {
        return Some(cur - prev);
    }
    // A 32-bit counter (always for ms fields; for the others on 32-bit kernels) that
    // wrapped shows a small step modulo 2^32. Anything else going backwards is a reset.
    if prev < U32_SPAN {
        let wrapped = U32_SPAN - prev + cur;
        let limit = if mergetune_kernel::diskstats::field_is_u32(index) {
            U32_SPAN / 2
        } else {
            U32_SPAN / 4
        };
        if wrapped < limit && prev >= U32_SPAN / 2 {
            return Some(wrapped);
        }
    }
    None
}

/// Whether a field counts time (ms) rather than events: it may step back without a reset.
fn is_time_field(index: usize) -> bool {
    index != field::IN_FLIGHT && mergetune_kernel::diskstats::field_is_u32(index)
}

/// Compares two snapshots of the same device name.
pub fn delta(prev: &DiskStat, cur: &DiskStat) -> Delta {
    delta_noting_time(prev, cur).0
}

/// [`delta`], and whether a time field went backwards (taken as 0 for this tick).
pub fn delta_noting_time(prev: &DiskStat, cur: &DiskStat) -> (Delta, bool) {
    if prev.major != cur.major || prev.minor != cur.minor {
        return (Delta::Reset, false);
    }
    let mut d = [0u64; MAX_FIELDS];
    let mut time_back = false;
    for (i, slot) in d.iter_mut().enumerate() {
        if i == field::IN_FLIGHT {
            continue; // a gauge, not a counter
        }
        match field_delta(i, prev.fields.values[i], cur.fields.values[i]) {
            Some(v) => *slot = v,
            None if is_time_field(i) => time_back = true,
            None => return (Delta::Reset, false),
        }
    }
    (Delta::Counters(counters_from(&d)), time_back)
}

fn counters_from(v: &[u64; MAX_FIELDS]) -> Counters {
    Counters {
        reads_completed: v[field::READS_COMPLETED],
        reads_merged: v[field::READS_MERGED],
        sectors_read: v[field::SECTORS_READ],
        read_ms: v[field::READ_MS],
        writes_completed: v[field::WRITES_COMPLETED],
        writes_merged: v[field::WRITES_MERGED],
        sectors_written: v[field::SECTORS_WRITTEN],
        write_ms: v[field::WRITE_MS],
    }
}

/// Keeps the previous snapshot of every device and yields deltas for a new one.
///
/// The previous counters are updated in place (no per-tick allocation for known devices);
/// a generation number finds the devices that vanished. They are kept in the order of the
/// last snapshot, and each device of a new one is looked for first at its own position
/// there: the kernel prints the devices in the same order each time, so a tick finds each
/// device with one compare of names, walking the previous counters in memory order (a
/// lookup by name per device was a visible share of a tick at 1024 devices). A device that
/// is not where it was is found by name, and the order is then made that of this snapshot.
#[derive(Debug, Default, Clone)]
pub struct Sampler {
    /// The previous snapshot of each device, in the order of the last one.
    prev: Vec<Previous>,
    /// Where each device is in `prev`.
    index: HashMap<String, usize, BuildHasherDefault<FnvHasher>>,
    generation: u64,
}

/// One device's previous snapshot, the last generation that saw it, and its position in
/// that snapshot.
#[derive(Debug, Clone)]
struct Previous {
    stat: DiskStat,
    seen: u64,
    at: usize,
}

/// What one new snapshot means per device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleSet {
    /// One entry per device of the snapshot, in the snapshot's order.
    pub deltas: Vec<Delta>,
    /// Devices present in the previous snapshot and absent now.
    pub vanished: Vec<String>,
    /// Positions in the snapshot of the devices a time field of which went backwards
    /// (taken as no time passed: not a reset).
    pub time_went_back: Vec<usize>,
}

impl Sampler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a new snapshot; devices that appear or vanish are handled without error.
    pub fn observe(&mut self, snapshot: &[DiskStat]) -> SampleSet {
        let mut out = SampleSet::default();
        self.observe_into(snapshot, &mut out);
        out
    }

    /// [`Sampler::observe`] into the result of an earlier call, which it replaces (its
    /// buffers are reused: a tick allocates nothing for them).
    pub fn observe_into(&mut self, snapshot: &[DiskStat], out: &mut SampleSet) {
        self.generation += 1;
        let generation = self.generation;
        out.deltas.clear();
        out.deltas.reserve(snapshot.len());
        out.vanished.clear();
        out.time_went_back.clear();
        let mut moved = false;
        for (at, cur) in snapshot.iter().enumerate() {
            let slot = match self.prev.get(at) {
                Some(p) if p.stat.name == cur.name => Some(at),
                _ => {
                    moved = true;
                    self.index.get(cur.name.as_str()).copied()
                }
            };
            let d = match slot {
                Some(i) => {
                    let p = &mut self.prev[i];
                    p.seen = generation;
                    p.at = at;
                    if p.stat.fields == cur.fields
                        && p.stat.major == cur.major
                        && p.stat.minor == cur.minor
                    {
                        // An idle device: nothing moved, and nothing to keep (one compare
                        // of its fields instead of seventeen deltas and a copy).
                        Delta::Counters(Counters::default())
                    } else {
                        let (d, time_back) = delta_noting_time(&p.stat, cur);
                        if time_back {
                            out.time_went_back.push(at);
                        }
                        p.stat.major = cur.major;
                        p.stat.minor = cur.minor;
                        p.stat.fields = cur.fields;
                        d
                    }
                }
                None => {
                    self.index.insert(cur.name.clone(), self.prev.len());
                    self.prev.push(Previous {
                        stat: cur.clone(),
                        seen: generation,
                        at,
                    });
                    Delta::First
                }
            };
            out.deltas.push(d);
        }
        if self.prev.len() > snapshot.len() || self.prev.iter().any(|p| p.seen != generation) {
            moved = true;
            self.prev.retain(|p| {
                let keep = p.seen == generation;
                if !keep {
                    out.vanished.push(p.stat.name.clone());
                }
                keep
            });
            out.vanished.sort();
        }
        if moved {
            self.reorder();
        }
    }

    /// Puts the previous snapshots in the order of the last one (each device's `at`) and
    /// indexes them again: after a device appeared, vanished or moved.
    fn reorder(&mut self) {
        self.prev.sort_by_key(|p| p.at);
        self.index.clear();
        for (i, p) in self.prev.iter().enumerate() {
            self.index.insert(p.stat.name.clone(), i);
        }
    }
}

/// Accumulates per-tick deltas into a window, until a [`WindowClose`] says it is complete
/// (on elapsed time: `window_ticks * interval_ms` in the daemon's config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WindowAcc {
    pub ticks: u32,
    pub counters: Counters,
    pub started_ms: u64,
}

/// A closed window, handed to the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    pub counters: Counters,
    pub duration_ms: u64,
    /// What the bio tap saw in this window, if the device was sampled (at L3 the merge
    /// counters read zero whatever the load, so this is the only sight of mergeable I/O).
    pub sensed: Option<Sensed>,
}

/// A sample of the requests made on a device at L3 (tracefs `block_getrq` and
/// `block_rq_issue`, or the simulator's tap through the same seam; `logic::sense`): how many
/// were made, and how many a request not yet issued could have taken, which are the merges
/// the kernel would have made at L0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Sensed {
    /// Requests made (at nomerges=2 one per bio).
    pub bios: u64,
    /// Of those, the ones a pending request ended or started at: back and front merges.
    pub mergeable: u64,
    /// Of `mergeable`, the front merges only (what mq-deadline's `front_merges` decides).
    pub front_mergeable: u64,
    /// How long the tap was open, in ms.
    pub sampled_ms: u64,
}

impl Window {
    pub fn bios_per_sec(&self) -> f64 {
        if self.duration_ms == 0 {
            0.0
        } else {
            self.counters.bios() as f64 * 1000.0 / self.duration_ms as f64
        }
    }
}

/// When a window closes: once `min_ms` have passed and it holds at least `min_bios` bios, or
/// once `full_ms` have passed whatever it holds. Elapsed time is compared with `slack_ms`
/// of tolerance (half a tick), so a late tick at the window's start does not push its end
/// one whole tick later. Windows close on time, not on a tick count, because the tick
/// interval changes (shorter while a device is watched at L3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowClose {
    pub min_ms: u64,
    pub full_ms: u64,
    pub min_bios: u64,
    pub slack_ms: u64,
}

impl WindowClose {
    /// A window of `ms`, whatever it holds.
    pub fn fixed(ms: u64, slack_ms: u64) -> Self {
        WindowClose {
            min_ms: ms,
            full_ms: ms,
            min_bios: 0,
            slack_ms,
        }
    }
}

impl WindowAcc {
    pub fn restart(&mut self, now_ms: u64) {
        *self = WindowAcc {
            ticks: 0,
            counters: Counters::default(),
            started_ms: now_ms,
        };
    }

    /// Adds one tick's delta; returns the window when `close` says it is complete, and
    /// restarts.
    pub fn push(&mut self, delta: &Counters, now_ms: u64, close: &WindowClose) -> Option<Window> {
        self.counters.add(delta);
        self.ticks += 1;
        let elapsed_ms = now_ms.saturating_sub(self.started_ms);
        let reached = |ms: u64| elapsed_ms + close.slack_ms >= ms;
        let complete = reached(close.full_ms)
            || (reached(close.min_ms) && self.counters.bios() >= close.min_bios);
        if complete {
            let w = Window {
                counters: self.counters,
                duration_ms: elapsed_ms,
                sensed: None,
            };
            self.restart(now_ms);
            Some(w)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mergetune_kernel::diskstats::parse_diskstats_line;

    fn stat(line: &str) -> DiskStat {
        parse_diskstats_line(line).unwrap()
    }

    #[test]
    fn plain_delta() {
        let a = stat("8 0 sda 10 5 100 7 20 30 400 9 0 10 20");
        let b = stat("8 0 sda 15 6 140 9 25 40 480 11 2 12 25");
        let Delta::Counters(c) = delta(&a, &b) else {
            panic!()
        };
        assert_eq!(
            (c.reads_completed, c.reads_merged, c.writes_merged),
            (5, 1, 10)
        );
        assert_eq!(c.bios(), 5 + 1 + 5 + 10);
    }

    /// A time field that steps back (rd_ms and time_in_queue on 6.12 with mq-deadline and
    /// bfq) is no reset: the I/O counts of the tick stand, the time is 0, and the snapshot
    /// says which device. A counter that must only grow stepping back still is a reset.
    #[test]
    fn a_time_field_going_backwards_is_not_a_reset() {
        let a = stat("8 0 sda 10 5 100 70 20 30 400 90 0 100 200");
        let b = stat("8 0 sda 15 6 140 69 25 40 480 95 2 101 190");
        let (d, time_back) = delta_noting_time(&a, &b);
        let Delta::Counters(c) = d else {
            panic!("{d:?}")
        };
        assert!(time_back);
        assert_eq!((c.reads_completed, c.read_ms, c.write_ms), (5, 0, 5));
        let mut s = Sampler::new();
        s.observe(std::slice::from_ref(&a));
        let set = s.observe(std::slice::from_ref(&b));
        assert_eq!(set.time_went_back, [0]);
        assert!(matches!(set.deltas[0], Delta::Counters(_)));
        let re_added = stat("8 0 sda 3 0 24 69 25 40 480 95 2 101 190");
        assert_eq!(delta(&a, &re_added), Delta::Reset);
    }

    /// The sampler's shortcut for a line that did not move gives what `delta` gives: a
    /// zero delta, whatever the values (a u32 field near its wrap, a device in flight), and
    /// the next change is diffed against the same counters.
    #[test]
    fn an_unchanged_device_has_the_zero_delta_that_delta_gives() {
        let idle = stat("8 0 sda 4294967295 5 100 4294967290 20 30 400 9 3 10 20");
        let moved = stat("8 0 sda 4294967295 6 108 4294967290 20 30 400 9 3 11 21");
        assert_eq!(delta(&idle, &idle), Delta::Counters(Counters::default()));
        let mut s = Sampler::new();
        assert_eq!(
            s.observe(std::slice::from_ref(&idle)).deltas,
            [Delta::First]
        );
        for _ in 0..3 {
            let set = s.observe(std::slice::from_ref(&idle));
            assert_eq!(set.deltas, [delta(&idle, &idle)]);
        }
        let set = s.observe(std::slice::from_ref(&moved));
        assert_eq!(set.deltas, [delta(&idle, &moved)]);
        let devno = stat("8 16 sda 4294967295 6 108 4294967290 20 30 400 9 3 11 21");
        assert_eq!(
            s.observe(&[devno]).deltas,
            [Delta::Reset],
            "same fields, new device number"
        );
    }

    /// Counters that step back are a reset, not a huge delta; so is a new device number.
    #[test]
    fn backwards_or_a_changed_devno_is_reset() {
        for (a, b) in [
            (
                "8 0 sda 1000 5 100 7 20 30 400 9 0 10 20",
                "8 0 sda 3 0 8 1 0 0 0 0 0 1 1",
            ),
            (
                "8 0 sda 1 1 1 1 1 1 1 1 0 1 1",
                "8 16 sda 2 2 2 2 2 2 2 2 0 2 2",
            ),
        ] {
            assert_eq!(delta(&stat(a), &stat(b)), Delta::Reset, "{a} -> {b}");
        }
    }

    #[test]
    fn ms_field_wraps_at_u32() {
        let a = stat("8 0 sda 1 0 8 4294967290 0 0 0 0 0 0 0");
        let b = stat("8 0 sda 2 0 16 4 0 0 0 0 0 0 0");
        let Delta::Counters(c) = delta(&a, &b) else {
            panic!("expected wrap")
        };
        assert_eq!(c.read_ms, 10);
    }

    /// Devices that move in the kernel's order, appear between others or vanish are diffed
    /// against their own previous counters, found by name where not at their place.
    #[test]
    fn devices_that_move_appear_or_vanish_keep_their_own_counters() {
        let line = |name: &str, minor: u32, v: u64| {
            stat(&format!("8 {minor} {name} {v} 0 {v} 0 0 0 0 0 0 0 0"))
        };
        let mut s = Sampler::new();
        let r = s.observe(&[line("sda", 0, 10), line("sdb", 16, 100)]);
        assert_eq!(r.deltas, vec![Delta::First, Delta::First]);
        let reads = |c: &Delta| match c {
            Delta::Counters(c) => Some(c.reads_completed),
            _ => None,
        };
        // sdc appears in the middle, sda and sdb swap places.
        let r = s.observe(&[line("sdb", 16, 130), line("sdc", 32, 5), line("sda", 0, 11)]);
        let got: Vec<Option<u64>> = r.deltas.iter().map(reads).collect();
        assert_eq!(got, vec![Some(30), None, Some(1)]);
        assert_eq!(r.deltas[1], Delta::First);
        assert!(r.vanished.is_empty());
        // The same order again, then sdb vanishes.
        let r = s.observe(&[line("sdb", 16, 131), line("sdc", 32, 7), line("sda", 0, 13)]);
        let got: Vec<Option<u64>> = r.deltas.iter().map(reads).collect();
        assert_eq!(got, vec![Some(1), Some(2), Some(2)]);
        let mut out = SampleSet::default();
        s.observe_into(&[line("sda", 0, 20), line("sdc", 32, 7)], &mut out);
        let got: Vec<Option<u64>> = out.deltas.iter().map(reads).collect();
        assert_eq!(got, vec![Some(7), Some(0)]);
        assert_eq!(out.vanished, vec!["sdb".to_string()]);
        // Back under the same name: a first sight, not a delta against the old counters.
        let r = s.observe(&[line("sdb", 16, 1), line("sda", 0, 21), line("sdc", 32, 8)]);
        assert_eq!(r.deltas[0], Delta::First);
        assert_eq!(reads(&r.deltas[1]), Some(1));
    }

    #[test]
    fn hotplug_appear_and_vanish() {
        let mut s = Sampler::new();
        let r = s.observe(&[stat("8 0 sda 1 0 8 1 0 0 0 0 0 0 0")]);
        assert_eq!(r.deltas, vec![Delta::First]);
        let r = s.observe(&[stat("8 16 sdb 1 0 8 1 0 0 0 0 0 0 0")]);
        assert_eq!(r.deltas, vec![Delta::First]);
        assert_eq!(r.vanished, vec!["sda".to_string()]);
    }

    #[test]
    fn window_closes_after_n_ticks() {
        let mut w = WindowAcc::default();
        w.restart(0);
        let d = Counters {
            writes_completed: 10,
            writes_merged: 90,
            ..Default::default()
        };
        let close = WindowClose::fixed(300, 50);
        assert!(w.push(&d, 100, &close).is_none());
        assert!(w.push(&d, 200, &close).is_none());
        let win = w.push(&d, 300, &close).unwrap();
        assert_eq!(win.counters.bios(), 300);
        assert_eq!(win.duration_ms, 300);
        assert!((win.counters.merge_ratio() - 0.9).abs() < 1e-9);
        assert_eq!(w.ticks, 0);
        // A tick that comes a little early still closes the window (half a tick of slack);
        w.restart(300);
        assert!(w.push(&d, 400, &close).is_none());
        assert!(w.push(&d, 500, &close).is_none());
        assert!(w.push(&d, 580, &close).is_some());
        // one that comes half a tick early does not.
        w.restart(0);
        assert!(w.push(&d, 240, &close).is_none());
    }

    #[test]
    fn window_closes_early_once_it_holds_enough_bios() {
        let d = Counters {
            reads_completed: 400,
            ..Default::default()
        };
        let close = WindowClose {
            min_ms: 100,
            full_ms: 2000,
            min_bios: 1000,
            slack_ms: 50,
        };
        let mut w = WindowAcc::default();
        w.restart(0);
        assert!(w.push(&d, 100, &close).is_none(), "400 bios");
        assert!(w.push(&d, 200, &close).is_none(), "800 bios");
        let win = w.push(&d, 300, &close).expect("1200 bios after 300 ms");
        assert_eq!((win.counters.bios(), win.duration_ms), (1200, 300));
        // A quiet window runs to its full length, then closes with what it has.
        let quiet = Counters {
            reads_completed: 10,
            ..Default::default()
        };
        for t in (400..2300).step_by(100) {
            assert!(w.push(&quiet, t, &close).is_none(), "at {t}");
        }
        let win = w.push(&quiet, 2300, &close).expect("full length");
        assert_eq!(win.duration_ms, 2000);
    }
}
