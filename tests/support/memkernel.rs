//! The one in-memory kernel of the tests and benches: devices with the queue files the
//! daemon reads and writes, counters that move with a chosen workload and honour nomerges
//! the way the kernel does (no merges counted at 2), a bio tap that reports each load's
//! mergeable share, and faults at chosen points: a read or write that fails, a device that
//! vanishes and comes back (with its values or the kernel's defaults), a value changed
//! behind mergetune's back, counters that restart, a garbage diskstats line, and a crash
//! in the middle of a write ([`Crash`]: the process dies just before or just after its n-th
//! tunable write, so nothing it does afterwards reaches the kernel or the state file). A
//! state store that goes through the real JSON format and can refuse saves.
//!
//! The options a test or bench sets are plain fields: which attributes a device has
//! ([`MemDev::with_attrs`], a `fallback` value for any other), how its counters move
//! ([`Load`], at each diskstats read with `advance_on_read` or at each [`MemKernel::advance`]),
//! how many stat fields a line prints, the tap ([`Tap`]), a scripted diskstats text, and the
//! [`Faults`]. It implements the sysfs and the bio tap; the merge-path sampler and the host
//! facts keep the traits' defaults (none here). Included with
//! `#[path = "support/memkernel.rs"] mod memkernel;`.

#![allow(dead_code)]

use mergetune_daemon::state::{
    Claims, Loaded, SavedAttr, SavedState, StateError, StateStore, parse_state,
};
use mergetune_kernel::biosense::{TapBatch, TapDrain, TapError, TapEvent, TapParams};
use mergetune_kernel::blockfs::{BioTap, FsError, HostFacts, MergeSampler, Sysfs};
use mergetune_kernel::perf::PerfError;

use mergetune_kernel::trace::{Dir, EventKind};
use mergetune_kernel::tunable::Tunable;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::rc::Rc;

/// Per-tick traffic of one device for [`Load::Traffic`]: (reads, read merges, writes, write
/// merges) at nomerges 0.
pub type Traffic = (u64, u64, u64, u64);

/// What a device's traffic looks like this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    Idle,
    /// 4 KiB random: nothing merges (L0 goes straight to L3 where the tap watches).
    Random,
    /// 4 KiB random with a rare merge (1 bio in 500 at nomerges 0 and 1), as a database's
    /// disk shows: under the low threshold, so the ladder is walked one rung at a time and
    /// every tunable gets written.
    RandomRareMerges,
    /// Batched sequential: 63 of 64 bios merge at nomerges 0 and 1 (plug merges).
    Sequential,
    /// Random reads starving behind writes: reads take 40 ms each, writes 2 ms.
    StarvingReads,
    /// These bios and merges each tick (at nomerges 2 every bio is its own request), 8
    /// sectors a request, and times that never move (10 ms reading, 20 ms writing, 30 ms
    /// busy).
    Traffic(Traffic),
    /// These stat fields grow by these amounts each tick, whatever nomerges is.
    Fixed([u64; 17]),
}

#[derive(Debug, Clone)]
pub struct MemDev {
    pub attrs: BTreeMap<String, String>,
    /// The value of every attribute not in `attrs` (None: such an attribute is absent).
    pub fallback: Option<String>,
    /// stat fields 1..=17.
    pub stat: [u64; 17],
    /// How many stat fields its diskstats line prints: 11 (an old kernel) or 17.
    pub stat_fields: usize,
    pub present: bool,
    pub load: Load,
}

impl MemDev {
    /// A disk under mq-deadline at the kernel's defaults.
    pub fn mq_deadline() -> MemDev {
        let mut d = MemDev::with_attrs(&[
            ("queue/scheduler", "none [mq-deadline] kyber"),
            ("queue/nomerges", "0"),
            ("queue/rotational", "0"),
            ("queue/iosched/front_merges", "1"),
            ("queue/iosched/writes_starved", "2"),
            ("queue/iosched/read_expire", "500"),
        ]);
        d.stat_fields = 11;
        d.load = Load::Idle;
        d
    }

    /// A disk with exactly these attributes (relative paths and values), 17 stat fields, and
    /// counters that do not move.
    pub fn with_attrs(attrs: &[(&str, &str)]) -> MemDev {
        MemDev {
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            fallback: None,
            stat: [0; 17],
            stat_fields: 17,
            present: true,
            load: Load::Fixed([0; 17]),
        }
    }

    /// One tick of its load: `bios` bios for the loads that take a count.
    fn advance(&mut self, bios: u64) {
        let nomerges = self.attrs.get("queue/nomerges").map(|v| v.trim());
        let at_2 = nomerges == Some("2");
        let d = &mut self.stat;
        let merged = match self.load {
            Load::Idle => {
                d[4] += 1;
                return;
            }
            Load::StarvingReads => {
                let reads = bios / 4;
                d[0] += reads;
                d[2] += reads * 8;
                d[3] += reads * 40;
                d[4] += bios - reads;
                d[6] += (bios - reads) * 8;
                d[7] += (bios - reads) * 2;
                return;
            }
            Load::Traffic((r, rm, w, wm)) => {
                if at_2 {
                    // No merges: every bio is its own request.
                    d[0] += r + rm;
                    d[4] += w + wm;
                } else {
                    d[0] += r;
                    d[1] += rm;
                    d[4] += w;
                    d[5] += wm;
                }
                Self::traffic_fixed_fields(d);
                return;
            }
            Load::Fixed(by) => {
                for (f, b) in d.iter_mut().zip(by) {
                    *f += b;
                }
                return;
            }
            Load::Random => 0,
            Load::RandomRareMerges if at_2 => 0,
            Load::RandomRareMerges => bios / 500,
            Load::Sequential if at_2 => 0,
            Load::Sequential => bios / 64 * 63,
        };
        d[4] += bios - merged; // writes completed
        d[5] += merged; // writes merged
        d[6] += bios * 8; // sectors written
        d[7] += bios / 10; // ms writing
    }

    /// The fields of [`Load::Traffic`] that follow from the counts.
    fn traffic_fixed_fields(d: &mut [u64; 17]) {
        d[2] = d[0] * 8;
        d[3] = 10;
        d[6] = d[4] * 8;
        d[7] = 20;
        d[9] = 30;
        d[10] = 30;
    }

    /// Its counters restart from zero (a driver reloaded, a counter wrapped).
    fn reset(&mut self) {
        self.stat = [0; 17];
        if matches!(self.load, Load::Traffic(_)) {
            Self::traffic_fixed_fields(&mut self.stat);
        }
    }

    /// The bios its tap sees in one drain: how many, and how many of them mergeable.
    fn tap_share(&self, blind: bool) -> (usize, usize) {
        let (n, mergeable) = match self.load {
            Load::Idle | Load::Fixed(_) => (0, 0),
            Load::Sequential => (128, 128 / 64 * 63),
            Load::Random | Load::RandomRareMerges | Load::StarvingReads => (128, 0),
            Load::Traffic((r, rm, w, wm)) => {
                let total = (r + rm + w + wm).max(1);
                (200, (200 * (rm + wm) / total) as usize)
            }
        };
        (n, if blind { 0 } else { mergeable })
    }
}

/// Where the process dies: at its n-th tunable write (1-based), before the write reaches
/// the kernel (the pending record is on disk, the write never happened) or after it (the
/// write happened, the confirming save never does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashAt {
    BeforeWrite(usize),
    AfterWrite(usize),
}

/// A crash shared by the kernel and the store: once `dead`, the process's writes and saves
/// go nowhere.
#[derive(Debug, Clone, Default)]
pub struct Crash {
    pub at: Option<CrashAt>,
    pub writes: usize,
    pub dead: bool,
}

pub type SharedCrash = Rc<RefCell<Crash>>;

/// How a device's every tunable write fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFault {
    /// EBUSY, as a device in use answers.
    Busy,
    /// EINVAL, as a kernel that refuses the value answers.
    Refused,
    /// EPERM, as a file with the immutable attribute answers (`chattr +i`).
    Immutable,
}

/// Faults armed for the next operations.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Reads of these (device, relative path) fail with EIO.
    pub failing_reads: BTreeSet<(String, String)>,
    /// Reads failed because of `failing_reads`.
    pub failed_reads: u64,
    /// Writes of these tunables fail with EIO.
    pub failing_writes: BTreeSet<(String, Tunable)>,
    /// Every tunable write of these devices fails so.
    pub failing_devices: BTreeMap<String, WriteFault>,
    /// /proc/diskstats cannot be read.
    pub diskstats_fails: bool,
    /// Next diskstats read: a garbage line appended.
    pub garbage_once: bool,
    /// Next diskstats read: this device's counters restart from zero.
    pub reset_once: Option<String>,
    /// Every tunable write is acknowledged and lost: the value read back stays as it was
    /// (a driver that ignores the file).
    pub writes_lost: bool,
}

/// The bio tap of the in-memory kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Tap {
    /// None: the trait's defaults ("unsupported"), so L3 is blind.
    #[default]
    Absent,
    /// On present devices, each load's mergeable share as queued bios, whatever nomerges is
    /// (the tap sees bios as they are queued, before any merge).
    ByLoad,
    /// As `ByLoad`, but no bio reported as mergeable (so that only a probe can find merges
    /// at L3).
    Blind,
}

#[derive(Debug, Clone, Default)]
pub struct MemKernel {
    pub devs: BTreeMap<String, MemDev>,
    pub faults: Faults,
    pub tap: Tap,
    /// Each diskstats read first moves every device's counters by one tick of its load with
    /// this many bios (None: only [`MemKernel::advance`] moves them).
    pub advance_on_read: Option<u64>,
    /// Diskstats texts served in turn, one a read, instead of the devices' counters.
    pub diskstats_script: Vec<Vec<u8>>,
    /// The script's next text.
    pub script_next: usize,
    /// Tunable writes tried, failed or not.
    pub write_attempts: u64,
    /// Writes mergetune made, in order.
    pub writes: Vec<(String, Tunable, String)>,
    /// A crash to inject (shared with the [`SharedStore`]).
    pub crash: SharedCrash,
    /// The last `diskseq` given out: every disk made gets the next.
    pub last_diskseq: u64,
    /// What `perf_event_open` answers the merge-path sampler (None: the trait's default,
    /// "not here"): a host whose kernel refuses it (`kernel::perf::open_refused`).
    pub perf_refusal: Option<String>,
    /// Backing files by path: (file system device, inode), as `stat` would number them.
    pub files: BTreeMap<String, (u64, u64)>,
}

impl MemKernel {
    /// Disks at the kernel's defaults, each with its own device number (8:0, 8:16, ...)
    /// and `diskseq`, as the kernel numbers them, with a tap.
    pub fn with(names: &[&str]) -> MemKernel {
        let mut k = MemKernel {
            tap: Tap::ByLoad,
            ..MemKernel::default()
        };
        for (i, n) in names.iter().enumerate() {
            let mut d = MemDev::mq_deadline();
            d.attrs.insert("dev".into(), format!("8:{}", i * 16));
            k.devs.insert(n.to_string(), d);
            k.new_diskseq(n);
        }
        k
    }

    /// `n` mq-deadline disks, sd0.., whose every other attribute reads "0", whose writes do
    /// not stick (the read-back always says "0"), and whose diskstats reads go through
    /// `script`: the benches' host, where every tick reads and decides and nothing settles.
    pub fn unsettled(n: usize, script: Vec<Vec<u8>>) -> MemKernel {
        let mut k = MemKernel::default();
        for i in 0..n {
            let d = k.add(
                &format!("sd{i}"),
                MemDev::with_attrs(&[("queue/scheduler", "none [mq-deadline] kyber")]),
            );
            d.fallback = Some("0".into());
        }
        k.faults.writes_lost = true;
        k.diskstats_script = script;
        k
    }

    /// sda on mq-deadline under random traffic (10,000 writes per tick, none merged) whose
    /// tunable writes always fail with `fault`.
    pub fn failing_sda(fault: WriteFault) -> MemKernel {
        let mut k = MemKernel::default();
        k.add(
            "sda",
            MemDev::with_attrs(&[
                ("queue/nomerges", "0"),
                ("queue/scheduler", "[mq-deadline] none"),
            ]),
        )
        .load = Load::Fixed([0, 0, 0, 0, 10_000, 0, 80_000, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        k.advance_on_read = Some(0);
        k.faults.failing_devices.insert("sda".into(), fault);
        k
    }

    /// Adds (or replaces) a device.
    pub fn add(&mut self, name: &str, dev: MemDev) -> &mut MemDev {
        self.devs.insert(name.to_string(), dev);
        self.devs.get_mut(name).unwrap()
    }

    fn new_diskseq(&mut self, dev: &str) {
        self.last_diskseq += 1;
        let seq = self.last_diskseq.to_string();
        if let Some(d) = self.devs.get_mut(dev) {
            d.attrs.insert("diskseq".into(), seq);
        }
    }

    /// Another disk takes `dev`'s name (a loop device detached and attached to another
    /// file; a disk removed and another added): same name and device number, a new
    /// `diskseq`, the kernel's defaults, counters from zero.
    pub fn replace(&mut self, dev: &str) {
        let Some(d) = self.devs.get_mut(dev) else {
            return;
        };
        let number = d.attrs.get("dev").cloned();
        let load = d.load;
        *d = MemDev::mq_deadline();
        d.load = load;
        if let Some(n) = number {
            d.attrs.insert("dev".into(), n);
        }
        self.new_diskseq(dev);
    }

    /// A loop device detached (`losetup -d`): its queue and its values stay, its backing
    /// file goes, and `diskseq` moves (as 6.18 does).
    pub fn loop_detach(&mut self, dev: &str) {
        if let Some(d) = self.devs.get_mut(dev) {
            d.attrs.remove("loop/backing_file");
        }
        self.new_diskseq(dev);
    }

    /// A loop device attached to `file` (`losetup DEV FILE`): the queue keeps every value
    /// it held, `diskseq` moves. A path not seen before is a new file (a new inode).
    pub fn loop_attach(&mut self, dev: &str, file: &str) {
        let next = self.files.len() as u64 + 1000;
        self.files.entry(file.to_string()).or_insert((64, next));
        if let Some(d) = self.devs.get_mut(dev) {
            d.attrs
                .insert("loop/backing_file".into(), format!("{file}\n"));
        }
        self.new_diskseq(dev);
    }

    pub fn value(&self, dev: &str, t: Tunable) -> Option<String> {
        self.devs.get(dev)?.attrs.get(t.rel_path()).cloned()
    }

    /// Someone else writes a tunable.
    pub fn set_behind_back(&mut self, dev: &str, t: Tunable, value: &str) {
        if let Some(d) = self.devs.get_mut(dev) {
            d.attrs.insert(t.rel_path().to_string(), value.to_string());
        }
    }

    /// The device's load from now on.
    pub fn set_load(&mut self, dev: &str, load: Load) {
        if let Some(d) = self.devs.get_mut(dev) {
            d.load = load;
        }
    }

    /// How many writes of this tunable mergetune made.
    pub fn writes_of(&self, t: Tunable) -> usize {
        self.writes.iter().filter(|w| w.1 == t).count()
    }

    /// One tick of traffic: `bios` bios per device of its load.
    pub fn advance(&mut self, bios: u64) {
        for d in self.devs.values_mut().filter(|d| d.present) {
            d.advance(bios);
        }
    }

    fn present(&self, dev: &str) -> Option<&MemDev> {
        self.devs.get(dev).filter(|d| d.present)
    }
}

fn eio(path: String) -> FsError {
    FsError::Io {
        path,
        message: "Input/output error (injected)".into(),
    }
}

fn attr_path(dev: &str, rel: &str) -> String {
    format!("mem:/sys/block/{dev}/{rel}")
}

impl Sysfs for MemKernel {
    fn read_diskstats(&mut self) -> Result<Vec<u8>, FsError> {
        if self.faults.diskstats_fails {
            return Err(eio("mem:/proc/diskstats".into()));
        }
        if !self.diskstats_script.is_empty() {
            let t = self.diskstats_script[self.script_next % self.diskstats_script.len()].clone();
            self.script_next += 1;
            return Ok(t);
        }
        let reset = self.faults.reset_once.take();
        if let Some(bios) = self.advance_on_read {
            for (name, d) in self.devs.iter_mut().filter(|(_, d)| d.present) {
                if reset.as_deref() != Some(name.as_str()) {
                    d.advance(bios);
                }
            }
        }
        if let Some(d) = reset.and_then(|r| self.devs.get_mut(&r)) {
            d.reset();
        }
        let mut s = String::new();
        for (i, (name, d)) in self.devs.iter().enumerate().filter(|(_, (_, d))| d.present) {
            s.push_str(&format!("   8 {:>7} {name}", i * 16));
            for f in &d.stat[..d.stat_fields] {
                s.push_str(&format!(" {f}"));
            }
            s.push('\n');
        }
        if std::mem::take(&mut self.faults.garbage_once) {
            s.push_str("this is not a diskstats line\n");
        }
        Ok(s.into_bytes())
    }

    fn list_block_devices(&mut self) -> Result<Vec<String>, FsError> {
        Ok(self
            .devs
            .iter()
            .filter(|(_, d)| d.present)
            .map(|(n, _)| n.clone())
            .collect())
    }

    fn read_attr(&mut self, dev: &str, rel: &str) -> Result<String, FsError> {
        if !self.faults.failing_reads.is_empty()
            && self
                .faults
                .failing_reads
                .contains(&(dev.to_string(), rel.to_string()))
        {
            self.faults.failed_reads += 1;
            return Err(eio(attr_path(dev, rel)));
        }
        self.present(dev)
            .and_then(|d| d.attrs.get(rel).or(d.fallback.as_ref()).cloned())
            .ok_or_else(|| FsError::NotFound {
                path: attr_path(dev, rel),
            })
    }

    fn write_tunable(&mut self, dev: &str, t: Tunable, value: &str) -> Result<(), FsError> {
        self.write_attempts += 1;
        let path = attr_path(dev, t.rel_path());
        let after = {
            let mut c = self.crash.borrow_mut();
            if c.dead {
                return Ok(()); // a dead process writes nothing
            }
            c.writes += 1;
            if c.at == Some(CrashAt::BeforeWrite(c.writes)) {
                c.dead = true;
                return Ok(());
            }
            c.at == Some(CrashAt::AfterWrite(c.writes))
        };
        if self.faults.writes_lost {
            return Ok(());
        }
        match self.faults.failing_devices.get(dev) {
            Some(WriteFault::Busy) => {
                return Err(FsError::Io {
                    path,
                    message: "Device or resource busy".into(),
                });
            }
            Some(WriteFault::Refused) => {
                return Err(FsError::InvalidValue {
                    path,
                    value: value.into(),
                });
            }
            Some(WriteFault::Immutable) => {
                return Err(FsError::PermissionDenied { path });
            }
            None => {}
        }
        if self.faults.failing_writes.contains(&(dev.to_string(), t)) {
            return Err(eio(path));
        }
        let Some(d) = self.devs.get_mut(dev).filter(|d| d.present) else {
            return Err(FsError::NotFound { path });
        };
        if !d.attrs.contains_key(t.rel_path()) && d.fallback.is_none() {
            return Err(FsError::NotFound { path });
        }
        if !t.accepts(value) {
            return Err(FsError::InvalidValue {
                path,
                value: value.into(),
            });
        }
        d.attrs.insert(t.rel_path().to_string(), value.to_string());
        self.writes.push((dev.to_string(), t, value.to_string()));
        if after {
            self.crash.borrow_mut().dead = true;
        }
        Ok(())
    }

    fn list_dir(&mut self, dev: &str, _rel: &str) -> Result<Vec<String>, FsError> {
        if self.present(dev).is_some() {
            Ok(Vec::new())
        } else {
            Err(FsError::NotFound {
                path: format!("mem:/sys/block/{dev}"),
            })
        }
    }

    fn attr_exists(&mut self, dev: &str, rel: &str) -> bool {
        self.present(dev)
            .is_some_and(|d| rel.is_empty() || d.fallback.is_some() || d.attrs.contains_key(rel))
    }
}

impl BioTap for MemKernel {
    fn tap_available(&mut self, dev: &str) -> Result<(), TapError> {
        match self.present(dev) {
            Some(_) if self.tap != Tap::Absent => Ok(()),
            // The trait's default words.
            _ => Err(TapError::Unsupported {
                path: dev.to_string(),
            }),
        }
    }
    fn tap_open(&mut self, dev: &str, _p: &TapParams) -> Result<(), TapError> {
        self.tap_available(dev)
    }
    fn tap_drain(&mut self, dev: &str, batch: TapBatch<'_>) -> Result<TapDrain, TapError> {
        self.tap_available(dev)?;
        let (n, mergeable) = self.devs[dev].tap_share(self.tap == Tap::Blind);
        tap_bios(batch, n, mergeable);
        Ok(TapDrain::default())
    }
}

impl MergeSampler for MemKernel {
    fn merge_sampler_open(&mut self, _period_ns: u64) -> Result<(), PerfError> {
        Err(match &self.perf_refusal {
            Some(message) => PerfError::Open {
                cpu: 0,
                message: message.clone(),
            },
            None => PerfError::Unsupported {
                path: "merge-path sampler".into(),
            },
        })
    }
}

impl HostFacts for MemKernel {
    fn file_identity(&mut self, path: &str) -> Option<(u64, u64)> {
        self.files.get(path).copied()
    }
}

/// What tracefs `block_getrq` and `block_rq_issue` would report for a load whose share of
/// mergeable bios is known: appends `n` write requests of 8 sectors (at most the batch's `max`
/// requests in its `out` in all), the first `mergeable` after the first each starting where the previous
/// one ended while it still waits (issued together after the last of them), the rest
/// scattered far apart and each issued at once.
pub fn tap_bios(TapBatch { out, max }: TapBatch<'_>, n: usize, mergeable: usize) {
    let ev = |i: usize, kind, sector| TapEvent {
        t_ns: i as u64 * 1000,
        kind,
        dir: Dir::Write,
        sector,
        nr_sectors: 8,
    };
    let made = out.iter().filter(|e| e.counts_as_bio()).count();
    let mut waiting: Vec<u64> = Vec::new();
    let mut end = 0u64;
    for i in 0..n.min(max.saturating_sub(made)) {
        let chained = i > 0 && i <= mergeable;
        if !chained {
            out.extend(waiting.drain(..).map(|s| ev(i, EventKind::Issue, s)));
        }
        // Scattered: no earlier request ends here.
        let sector = if chained {
            end
        } else {
            (i as u64 + 1) * 1_000_003 * 8
        };
        out.push(ev(i, EventKind::GetRq, sector));
        waiting.push(sector);
        end = sector + 8;
    }
    out.extend(waiting.drain(..).map(|s| ev(n, EventKind::Issue, s)));
}

/// A state store kept as the JSON text a file would hold, shared with the test (which
/// reads it after a "crash"), and able to refuse saves.
#[derive(Debug, Clone, Default)]
pub struct SharedStore {
    pub text: Rc<RefCell<Option<String>>>,
    pub fail_saves: Rc<RefCell<bool>>,
    /// Once the process is dead, its saves never reach the file.
    pub crash: SharedCrash,
    /// The host-wide device claims, taken and checked as a file store takes them (real
    /// `flock`s in a test's directory): set, the store is one owner among others.
    pub claims: Option<Claims>,
}

impl SharedStore {
    /// Sets the file's text (`None`: removes it) as a save or a remove does: nothing once
    /// the process is dead, the injected `failure` while saves fail.
    fn put(&mut self, text: Option<String>, failure: &str) -> Result<(), StateError> {
        if self.crash.borrow().dead {
            return Ok(());
        }
        if *self.fail_saves.borrow() {
            return Err(StateError::Write {
                path: "mem:state.json".into(),
                message: failure.into(),
            });
        }
        *self.text.borrow_mut() = text;
        Ok(())
    }
}

impl StateStore for SharedStore {
    fn load(&self) -> Result<Option<Loaded>, StateError> {
        match self.text.borrow().as_deref() {
            None => Ok(None),
            Some(t) => parse_state(t, Path::new("mem:state.json")).map(Some),
        }
    }
    fn save(&mut self, state: &SavedState) -> Result<(), StateError> {
        if self.crash.borrow().dead {
            return Ok(());
        }
        if let Some(c) = self.claims.as_mut() {
            c.claim_recorded(state)?;
        }
        self.put(
            Some(serde_json::to_string(state).unwrap()),
            "No space left on device (injected)",
        )?;
        if let Some(c) = self.claims.as_mut() {
            c.release_unrecorded(state);
        }
        Ok(())
    }
    fn remove(&mut self) -> Result<(), StateError> {
        if self.crash.borrow().dead {
            return Ok(());
        }
        self.put(None, "Read-only file system (injected)")?;
        if let Some(c) = self.claims.as_mut() {
            c.release_unrecorded(&SavedState::default());
        }
        Ok(())
    }
    fn describe(&self) -> String {
        "mem:state.json".into()
    }
    fn other_owner(
        &self,
        id: &mergetune_kernel::devices::DeviceIdentity,
    ) -> Result<Option<Option<u32>>, StateError> {
        match &self.claims {
            Some(c) => c.other_owner(id.dev),
            None => Ok(None),
        }
    }
}

/// A store that loads whatever it is given (`None`: nothing) and keeps nothing it is asked
/// to save, while saying it did: a lying file system, once the daemon checks what it wrote.
pub struct FixedStore(pub Option<SavedState>);

impl StateStore for FixedStore {
    fn load(&self) -> Result<Option<Loaded>, StateError> {
        Ok(self.0.clone().map(|state| Loaded {
            state,
            rejected: Vec::new(),
        }))
    }
    fn save(&mut self, _: &SavedState) -> Result<(), StateError> {
        Ok(())
    }
    fn remove(&mut self) -> Result<(), StateError> {
        Ok(())
    }
    fn describe(&self) -> String {
        "fixed".into()
    }
}

/// A record as mergetune leaves it once it has written `last_written` over `original`.
pub fn written_record(original: &str, last_written: &str) -> SavedAttr {
    SavedAttr {
        original: original.into(),
        last_written: Some(last_written.into()),
        pending: None,
        vanished_at_unix_secs: None,
        device: None,
    }
}
