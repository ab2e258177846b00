//! An in-memory block stack for fault injection: devices with the queue files the daemon
//! reads and writes, counters that move with a chosen workload and honour nomerges the way
//! the kernel does (no merges counted at 2), and faults at chosen points: a read or write
//! that fails, a device that vanishes and comes back (with its values or the kernel's
//! defaults), a value changed behind mergetune's back, and a crash in the middle of a
//! write ([`Crash`]: the process dies just before or just after its n-th tunable write, so
//! nothing it does afterwards reaches the kernel or the state file). A state store that
//! goes through the real JSON format and can refuse saves. Included with
//! `#[path = "support/memkernel.rs"] mod memkernel;`.

#![allow(dead_code)]

use mergetune_daemon::state::{SavedAttr, SavedState, StateError, StateStore, parse_state};
#[path = "faketap.rs"]
mod faketap;

use mergetune_kernel::biosense::{QueuedBio, TapDrain, TapError, TapParams};
use mergetune_kernel::blockfs::{BlockFs, FsError};
use mergetune_kernel::tunable::Tunable;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::rc::Rc;

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
}

#[derive(Debug, Clone)]
pub struct MemDev {
    pub attrs: BTreeMap<String, String>,
    /// stat fields 1..=11.
    pub stat: [u64; 11],
    pub present: bool,
    pub load: Load,
}

impl MemDev {
    /// A disk under mq-deadline at the kernel's defaults.
    pub fn mq_deadline() -> MemDev {
        let mut attrs = BTreeMap::new();
        for (k, v) in [
            ("queue/scheduler", "none [mq-deadline] kyber"),
            ("queue/nomerges", "0"),
            ("queue/rotational", "0"),
            ("queue/iosched/front_merges", "1"),
            ("queue/iosched/writes_starved", "2"),
            ("queue/iosched/read_expire", "500"),
        ] {
            attrs.insert(k.to_string(), v.to_string());
        }
        MemDev {
            attrs,
            stat: [0; 11],
            present: true,
            load: Load::Idle,
        }
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

/// Faults armed for the next operations.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Reads of these (device, relative path) fail with EIO.
    pub failing_reads: BTreeSet<(String, String)>,
    /// Writes of these tunables fail with EIO.
    pub failing_writes: BTreeSet<(String, Tunable)>,
    /// /proc/diskstats cannot be read.
    pub diskstats_fails: bool,
}

#[derive(Debug, Clone, Default)]
pub struct MemKernel {
    pub devs: BTreeMap<String, MemDev>,
    pub faults: Faults,
    /// Writes mergetune made, in order.
    pub writes: Vec<(String, Tunable, String)>,
    /// A crash to inject (shared with the [`SharedStore`]).
    pub crash: SharedCrash,
    /// The last `diskseq` given out: every disk made gets the next.
    pub last_diskseq: u64,
}

impl MemKernel {
    /// Disks at the kernel's defaults, each with its own device number (8:0, 8:16, ...)
    /// and `diskseq`, as the kernel numbers them.
    pub fn with(names: &[&str]) -> MemKernel {
        let mut k = MemKernel::default();
        for (i, n) in names.iter().enumerate() {
            let mut d = MemDev::mq_deadline();
            d.attrs.insert("dev".into(), format!("8:{}", i * 16));
            k.devs.insert(n.to_string(), d);
            k.new_diskseq(n);
        }
        k
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

    pub fn value(&self, dev: &str, t: Tunable) -> Option<String> {
        self.devs.get(dev)?.attrs.get(t.rel_path()).cloned()
    }

    /// Someone else writes a tunable.
    pub fn set_behind_back(&mut self, dev: &str, t: Tunable, value: &str) {
        if let Some(d) = self.devs.get_mut(dev) {
            d.attrs.insert(t.rel_path().to_string(), value.to_string());
        }
    }

    /// One tick of traffic: `bios` bios per device of its load.
    pub fn advance(&mut self, bios: u64) {
        for d in self.devs.values_mut().filter(|d| d.present) {
            let nomerges = d.attrs.get("queue/nomerges").map(String::as_str);
            let merged = match d.load {
                Load::Idle => {
                    d.stat[4] += 1;
                    continue;
                }
                Load::StarvingReads => {
                    let reads = bios / 4;
                    d.stat[0] += reads;
                    d.stat[2] += reads * 8;
                    d.stat[3] += reads * 40;
                    d.stat[4] += bios - reads;
                    d.stat[6] += (bios - reads) * 8;
                    d.stat[7] += (bios - reads) * 2;
                    continue;
                }
                Load::Random => 0,
                Load::RandomRareMerges if nomerges == Some("2") => 0,
                Load::RandomRareMerges => bios / 500,
                Load::Sequential if nomerges == Some("2") => 0,
                Load::Sequential => bios / 64 * 63,
            };
            d.stat[4] += bios - merged; // writes completed
            d.stat[5] += merged; // writes merged
            d.stat[6] += bios * 8; // sectors written
            d.stat[7] += bios / 10; // ms writing
        }
    }
}

fn eio(path: String) -> FsError {
    FsError::Io {
        path,
        message: "Input/output error (injected)".into(),
    }
}

impl BlockFs for MemKernel {
    // A bio tap that reports each load's mergeable share as queued, whatever nomerges is.
    fn tap_available(&mut self, dev: &str) -> Result<(), TapError> {
        match self.devs.get(dev) {
            Some(d) if d.present => Ok(()),
            _ => Err(TapError::Unsupported {
                path: dev.to_string(),
            }),
        }
    }
    fn tap_open(&mut self, dev: &str, _p: &TapParams) -> Result<(), TapError> {
        self.tap_available(dev)
    }
    fn tap_drain(
        &mut self,
        dev: &str,
        out: &mut Vec<QueuedBio>,
        max: usize,
    ) -> Result<TapDrain, TapError> {
        self.tap_available(dev)?;
        let n = 128;
        match self.devs[dev].load {
            Load::Idle => {}
            Load::Sequential => faketap::bios(out, n, n / 64 * 63, max),
            Load::Random | Load::RandomRareMerges | Load::StarvingReads => {
                faketap::bios(out, n, 0, max)
            }
        }
        Ok(TapDrain::default())
    }

    fn read_diskstats(&mut self) -> Result<Vec<u8>, FsError> {
        if self.faults.diskstats_fails {
            return Err(eio("mem:/proc/diskstats".into()));
        }
        let mut s = String::new();
        for (i, (name, d)) in self.devs.iter().enumerate().filter(|(_, (_, d))| d.present) {
            let f = d.stat;
            s.push_str(&format!(
                "   8 {} {name} {} {} {} {} {} {} {} {} 0 {} {}\n",
                i * 16,
                f[0],
                f[1],
                f[2],
                f[3],
                f[4],
                f[5],
                f[6],
                f[7],
                f[9],
                f[10]
            ));
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
        let path = format!("mem:/sys/block/{dev}/{rel}");
        if self
            .faults
            .failing_reads
            .contains(&(dev.to_string(), rel.to_string()))
        {
            return Err(eio(path));
        }
        match self.devs.get(dev).filter(|d| d.present) {
            Some(d) => d.attrs.get(rel).cloned().ok_or(FsError::NotFound { path }),
            None => Err(FsError::NotFound { path }),
        }
    }

    fn write_tunable(&mut self, dev: &str, t: Tunable, value: &str) -> Result<(), FsError> {
        let path = format!("mem:/sys/block/{dev}/{}", t.rel_path());
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
        if self.faults.failing_writes.contains(&(dev.to_string(), t)) {
            return Err(eio(path));
        }
        let Some(d) = self.devs.get_mut(dev).filter(|d| d.present) else {
            return Err(FsError::NotFound { path });
        };
        if !d.attrs.contains_key(t.rel_path()) {
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
        if self.devs.get(dev).is_some_and(|d| d.present) {
            Ok(Vec::new())
        } else {
            Err(FsError::NotFound {
                path: format!("mem:/sys/block/{dev}"),
            })
        }
    }

    fn attr_exists(&mut self, dev: &str, rel: &str) -> bool {
        self.devs
            .get(dev)
            .is_some_and(|d| d.present && (rel.is_empty() || d.attrs.contains_key(rel)))
    }
}

/// A state store kept as the JSON text a file would hold, shared with the test (which
/// reads it after a "crash"), and able to refuse saves.
#[derive(Debug, Clone, Default)]
pub struct SharedStore {
    pub text: Rc<RefCell<Option<String>>>,
    pub fail_saves: Rc<RefCell<bool>>,
    /// Once the process is dead, its saves never reach the file.
    pub crash: SharedCrash,
}

impl StateStore for SharedStore {
    fn load(&self) -> Result<Option<mergetune_daemon::state::Loaded>, StateError> {
        match self.text.borrow().as_deref() {
            None => Ok(None),
            Some(t) => parse_state(t, Path::new("mem:state.json")).map(Some),
        }
    }
    fn save(&mut self, state: &SavedState) -> Result<(), StateError> {
        if self.crash.borrow().dead {
            return Ok(());
        }
        if *self.fail_saves.borrow() {
            return Err(StateError::Write {
                path: "mem:state.json".into(),
                message: "No space left on device (injected)".into(),
            });
        }
        *self.text.borrow_mut() = Some(serde_json::to_string(state).unwrap());
        Ok(())
    }
    fn remove(&mut self) -> Result<(), StateError> {
        if self.crash.borrow().dead {
            return Ok(());
        }
        if *self.fail_saves.borrow() {
            return Err(StateError::Write {
                path: "mem:state.json".into(),
                message: "Read-only file system (injected)".into(),
            });
        }
        *self.text.borrow_mut() = None;
        Ok(())
    }
    fn describe(&self) -> String {
        "mem:state.json".into()
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
