//! Where the merge path's CPU goes, sampled: a `cpu-clock` software event per CPU
//! (`perf_event_open`, no hardware counters needed) with kernel callchains, read from its
//! ring buffer, each sample classed by the merge functions on its stack.
//!
//! Why sampling: the merge attempt costs tens to hundreds of ns per bio, far below what an
//! end-to-end CPU-per-I/O comparison resolves on a shared machine. A sample is taken every
//! `period_ns` of CPU time, so the samples whose callchain holds `blk_attempt_plug_merge`,
//! `blk_mq_sched_bio_merge`, the scheduler's `bio_merge` (and the lock slowpath under it)
//! each stand for `period_ns` spent in the merge path; divided by the bios submitted over
//! the same time, that is ns per bio, whatever else the machine runs (another tenant's load
//! only thins the samples). docs/policy.md "Pricing the merge path" has the method.
//!
//! Which device a sample's merge-path time was spent for: the merge attempt runs in the
//! task that submits the bio, so the sampler also samples the `block:block_bio_queue`
//! tracepoint (one event in [`BIO_EVENT_EVERY`], task id and the bio's device) over the
//! same span, and a merge-path sample counts for the devices its task queued bios on
//! ([`MergeSamples::by_submitter`]). Through perf, not `/proc/TID/fd`: the unit holds
//! CAP_PERFMON, not CAP_SYS_PTRACE, and `ProtectProc=invisible` hides other users' tasks;
//! and what a task queued is what it did, where its open files only say what it could do.
//!
//! The pure part ([`Symbols`] from a `kallsyms` text, [`classify`] of one callchain,
//! [`parse_records`] and [`parse_raw_records`] of the ring buffer's bytes, [`Submitters`]
//! from the bio events) is tested on real fixtures; the rest opens
//! the events and maps their buffers through [`crate::sys::perf`], the audited module that
//! holds the raw calls (the syscall, the `mmap` of each buffer, the reads of its head and
//! tail, the ioctls); this module only calls its safe API.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::scheduler::Scheduler;
use crate::sys::perf::{PerfRing, RingError, Sampling};

/// A sample's merge-path class: which rung of the ladder would not have spent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleClass {
    /// In the merge attempt at all: skipped at nomerges=2 (L3).
    pub merge_path: bool,
    /// In the lookups nomerges=1 skips (the elevator hash and the scheduler's own request
    /// merge): skipped at L2 as well.
    pub beyond_one_hit: bool,
    /// In mq-deadline's front-merge lookup: skipped at L1 as well.
    pub front_lookup: bool,
    /// The scheduler whose merge function is on the stack (None: the plug or a scheduler
    /// without one, e.g. `none`).
    pub scheduler: Option<Scheduler>,
}

/// What a function's samples mean (see [`SampleClass`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Merge,
    MergeOf(Scheduler),
    BeyondOneHit,
    BeyondOneHitOf(Scheduler),
    FrontLookup,
}

/// The functions of the merge path, by name, as in `kernel/block` since 5.16 (only the
/// newest plugged request is tried there). Inclusive: their callees (the scheduler lock's
/// slowpath, `elv_rb_find`, ...) are on the same stack below them.
const FUNCTIONS: [(&str, Role); 12] = [
    ("blk_attempt_plug_merge", Role::Merge),
    ("blk_mq_sched_bio_merge", Role::Merge),
    ("blk_bio_list_merge", Role::Merge),
    ("blk_mq_sched_try_merge", Role::Merge),
    ("blk_mq_sched_try_insert_merge", Role::Merge),
    ("elv_merge", Role::Merge),
    ("dd_bio_merge", Role::MergeOf(Scheduler::MqDeadline)),
    ("bfq_bio_merge", Role::MergeOf(Scheduler::Bfq)),
    ("kyber_bio_merge", Role::MergeOf(Scheduler::Kyber)),
    ("elv_rqhash_find", Role::BeyondOneHit),
    ("bfq_request_merge", Role::BeyondOneHitOf(Scheduler::Bfq)),
    ("dd_request_merge", Role::FrontLookup),
];

/// The address ranges of the merge functions, from a `kallsyms` text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Symbols {
    /// (start, end, role), sorted by start.
    ranges: Vec<(u64, u64, RoleTag)>,
    /// The names found, for the report of what was resolved.
    pub found: Vec<&'static str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RoleTag(Role);

impl Symbols {
    /// Reads the ranges from `kallsyms` text: a function ends where the next text symbol
    /// starts. Addresses of 0 (a reader without the right to see them) resolve nothing.
    pub fn from_kallsyms(text: &str) -> Symbols {
        let mut text_syms: Vec<(u64, &str)> = Vec::new();
        for line in text.lines() {
            let mut f = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            if !matches!(kind, "t" | "T") {
                continue;
            }
            let Ok(a) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if a != 0 {
                text_syms.push((a, name));
            }
        }
        text_syms.sort_unstable();
        let mut ranges = Vec::new();
        let mut found = Vec::new();
        for (i, (start, name)) in text_syms.iter().enumerate() {
            let Some((fname, role)) = FUNCTIONS.iter().find(|(n, _)| n == name) else {
                continue;
            };
            let end = text_syms
                .get(i + 1..)
                .and_then(|rest| rest.iter().find(|(a, _)| a > start))
                .map_or(start + 4096, |(a, _)| *a);
            ranges.push((*start, end, RoleTag(*role)));
            if !found.contains(fname) {
                found.push(*fname);
            }
        }
        ranges.sort_unstable_by_key(|r| r.0);
        Symbols { ranges, found }
    }

    /// Whether the sampler can see the merge path at all (the plug merge and the
    /// scheduler's entry resolved).
    pub fn usable(&self) -> bool {
        self.found.contains(&"blk_attempt_plug_merge")
            && self.found.contains(&"blk_mq_sched_bio_merge")
    }

    fn role_of(&self, ip: u64) -> Option<Role> {
        let i = self.ranges.partition_point(|r| r.0 <= ip);
        let (start, end, RoleTag(role)) = *self.ranges.get(i.checked_sub(1)?)?;
        (start <= ip && ip < end).then_some(role)
    }
}

/// perf's callchain context markers (`PERF_CONTEXT_*`) are the top 4095 values.
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

/// The class of one sample from its callchain (leaf first, as perf writes it).
pub fn classify(symbols: &Symbols, callchain: &[u64]) -> SampleClass {
    let mut c = SampleClass::default();
    for &ip in callchain {
        if ip >= PERF_CONTEXT_MAX {
            continue;
        }
        let Some(role) = symbols.role_of(ip) else {
            continue;
        };
        c.merge_path = true;
        match role {
            Role::Merge => {}
            Role::MergeOf(s) => c.scheduler = Some(s),
            Role::BeyondOneHit => c.beyond_one_hit = true,
            Role::BeyondOneHitOf(s) => {
                c.beyond_one_hit = true;
                c.scheduler = Some(s);
            }
            Role::FrontLookup => {
                c.beyond_one_hit = true;
                c.front_lookup = true;
                c.scheduler = Some(Scheduler::MqDeadline);
            }
        }
    }
    c
}

/// Merge-path sample counts of one scheduler slot, by the parts of [`SampleClass`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathCounts {
    pub merge_path: u64,
    pub beyond_one_hit: u64,
    pub front_lookup: u64,
}

/// One sample's counts: 1 in each part its class is in.
impl From<SampleClass> for PathCounts {
    fn from(c: SampleClass) -> PathCounts {
        PathCounts {
            merge_path: c.merge_path.into(),
            beyond_one_hit: c.beyond_one_hit.into(),
            front_lookup: c.front_lookup.into(),
        }
    }
}

impl PathCounts {
    pub fn add(&mut self, o: &PathCounts) {
        self.merge_path += o.merge_path;
        self.beyond_one_hit += o.beyond_one_hit;
        self.front_lookup += o.front_lookup;
    }
}

/// Sample counts over a span of sampling, by class: what the logic's merge-cost model
/// prices. Each sample stands for `period_ns` of CPU.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MergeSamples {
    pub period_ns: u64,
    /// Every sample read (kernel mode, any task).
    pub total: u64,
    /// Merge-path samples per scheduler, indexed by [`MergeSamples::slot`]: none (the plug
    /// only) first, then the others in [`Scheduler::ALL`]'s order.
    pub merge_path: [u64; 4],
    pub beyond_one_hit: [u64; 4],
    pub front_lookup: [u64; 4],
    /// Samples the kernel dropped (a full buffer): the span is then an undercount.
    pub lost: u64,
    /// The merge-path samples again, by the devices (whole disks, by name, sorted) their
    /// task queued at least [`SUBMITTER_MIN_SHARE`] of its sampled bios on during the span,
    /// then by slot: a one-device key is that device's; an empty key is a task with no bio
    /// event sampled (or no attribution here: [`MergeSamples::attribution_error`]).
    pub by_submitter: BTreeMap<Vec<String>, [PathCounts; 4]>,
    /// Why no sample could be tied to a device in this span (the bio events could not be
    /// opened), where that is so.
    pub attribution_error: Option<String>,
}

impl MergeSamples {
    /// The index of a scheduler in the arrays: its [`Scheduler::index`]; no scheduler
    /// (the plug, or one mergetune does not know) counts as none.
    pub fn slot(s: Option<Scheduler>) -> usize {
        s.unwrap_or(Scheduler::None).index()
    }

    pub fn add_sample(&mut self, c: SampleClass) {
        self.total += 1;
        let i = Self::slot(c.scheduler);
        if c.merge_path {
            self.merge_path[i] += 1;
        }
        if c.beyond_one_hit {
            self.beyond_one_hit[i] += 1;
        }
        if c.front_lookup {
            self.front_lookup[i] += 1;
        }
    }

    /// Counts a sample of a task that queued bios on `submitter` (see
    /// [`MergeSamples::by_submitter`]).
    pub fn add_sample_of(&mut self, c: SampleClass, submitter: &[String]) {
        self.add_sample(c);
        if c.merge_path {
            let slot = Self::slot(c.scheduler);
            match self.by_submitter.get_mut(submitter) {
                Some(counts) => counts[slot].add(&c.into()),
                None => {
                    let mut counts = [PathCounts::default(); 4];
                    counts[slot].add(&c.into());
                    self.by_submitter.insert(submitter.to_vec(), counts);
                }
            }
        }
    }

    pub fn add(&mut self, o: &MergeSamples) {
        self.total += o.total;
        self.lost += o.lost;
        for (k, counts) in &o.by_submitter {
            let mine = self.by_submitter.entry(k.clone()).or_default();
            for (a, b) in mine.iter_mut().zip(counts) {
                a.add(b);
            }
        }
        if self.attribution_error.is_none() {
            self.attribution_error.clone_from(&o.attribution_error);
        }
        for i in 0..4 {
            self.merge_path[i] += o.merge_path[i];
            self.beyond_one_hit[i] += o.beyond_one_hit[i];
            self.front_lookup[i] += o.front_lookup[i];
        }
        if self.period_ns == 0 {
            self.period_ns = o.period_ns;
        }
    }
}

/// One sample record as read: its task and callchain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub pid: u32,
    pub tid: u32,
    pub callchain: Vec<u64>,
}

const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_SAMPLE: u32 = 9;

/// Calls `on_record(kind, body)` for each whole record of a ring buffer's bytes; a
/// truncated or malformed one ends the walk (the rest is not trusted).
fn for_each_record(bytes: &[u8], mut on_record: impl FnMut(u32, &[u8]) -> bool) {
    let mut off = 0usize;
    while off + 8 <= bytes.len() {
        let Some(kind) = u32_at(bytes, off) else {
            break;
        };
        let size = usize::from(u16::from_ne_bytes([bytes[off + 6], bytes[off + 7]]));
        if size < 8 || off + size > bytes.len() {
            break;
        }
        if !on_record(kind, &bytes[off + 8..off + size]) {
            break;
        }
        off += size;
    }
}

fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    b.get(o..o + 4)
        .map(|s| u32::from_ne_bytes(s.try_into().unwrap_or([0; 4])))
}

fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    b.get(o..o + 8)
        .map(|s| u64::from_ne_bytes(s.try_into().unwrap_or([0; 8])))
}

/// Parses the records of a ring buffer's bytes (whole records, as copied out), with
/// `PERF_SAMPLE_TID | PERF_SAMPLE_CALLCHAIN`: calls `on_sample` for each sample, returns the
/// lost count. A truncated or malformed record ends the parse (the rest is not trusted).
pub fn parse_records(bytes: &[u8], mut on_sample: impl FnMut(u32, u32, &[u64])) -> u64 {
    let mut lost = 0u64;
    let mut chain: Vec<u64> = Vec::with_capacity(64);
    for_each_record(bytes, |kind, rec| {
        match kind {
            PERF_RECORD_SAMPLE => {
                let (Some(pid), Some(tid), Some(nr)) =
                    (u32_at(rec, 0), u32_at(rec, 4), u64_at(rec, 8))
                else {
                    return false;
                };
                let Ok(nr) = usize::try_from(nr) else {
                    return false;
                };
                if 16 + nr.saturating_mul(8) > rec.len() {
                    return false;
                }
                chain.clear();
                chain.extend((0..nr).filter_map(|i| u64_at(rec, 16 + i * 8)));
                on_sample(pid, tid, &chain);
            }
            PERF_RECORD_LOST => lost += u64_at(rec, 8).unwrap_or(0),
            _ => {}
        }
        true
    });
    lost
}

/// Parses the records of a ring buffer's bytes with `PERF_SAMPLE_TID | PERF_SAMPLE_RAW`:
/// calls `on_sample(tid, raw)` for each sample (`raw` is the tracepoint's record: its
/// common fields, then its own, at the offsets its tracefs `format` gives), returns the
/// lost count.
pub fn parse_raw_records(bytes: &[u8], mut on_sample: impl FnMut(u32, &[u8])) -> u64 {
    let mut lost = 0u64;
    for_each_record(bytes, |kind, rec| {
        match kind {
            PERF_RECORD_SAMPLE => {
                let (Some(tid), Some(size)) = (u32_at(rec, 4), u32_at(rec, 8)) else {
                    return false;
                };
                let Some(raw) = rec.get(12..12 + size as usize) else {
                    return false;
                };
                on_sample(tid, raw);
            }
            PERF_RECORD_LOST => lost += u64_at(rec, 8).unwrap_or(0),
            _ => {}
        }
        true
    });
    lost
}

/// One bio event in this many is sampled: at 200,000 bios/s, about 3,000 events a second,
/// plenty to see which device each busy task queues on.
pub const BIO_EVENT_EVERY: u64 = 64;

/// A task is counted as submitting to a device when at least this share of its sampled
/// bios in the span went to it: one stray bio (a log line to the root disk) does not make
/// a task that feeds one device look like it feeds two.
pub const SUBMITTER_MIN_SHARE: f64 = 0.05;

/// Which devices each task queued bios on over a span, from the sampled bio events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Submitters {
    /// tid -> (device number as the kernel packs it, events).
    seen: HashMap<u32, Vec<(u32, u64)>>,
}

impl Submitters {
    /// Notes one sampled bio of task `tid` on device `dev` (the kernel's `dev_t`).
    pub fn note(&mut self, tid: u32, dev: u32) {
        let v = self.seen.entry(tid).or_default();
        match v.iter_mut().find(|(d, _)| *d == dev) {
            Some((_, n)) => *n += 1,
            None => v.push((dev, 1)),
        }
    }

    /// The device numbers task `tid` queued at least [`SUBMITTER_MIN_SHARE`] of its
    /// sampled bios on.
    pub fn of(&self, tid: u32) -> Vec<u32> {
        let Some(v) = self.seen.get(&tid) else {
            return Vec::new();
        };
        let all: u64 = v.iter().map(|(_, n)| n).sum();
        v.iter()
            .filter(|(_, n)| *n as f64 >= SUBMITTER_MIN_SHARE * all as f64)
            .map(|(d, _)| *d)
            .collect()
    }
}

/// The kernel's packing of a device number in trace records (`MINORBITS` is 20).
pub fn dev_major_minor(dev: u32) -> (u32, u32) {
    (dev >> 20, dev & ((1 << 20) - 1))
}

/// Where the `dev` field lies in a tracepoint's raw record, from its tracefs `format`
/// text (`field:dev_t dev;\toffset:8;\tsize:4;...`): (offset, size of 4).
pub fn dev_field(format: &str) -> Option<usize> {
    format.lines().find_map(|l| {
        let mut parts = l.trim().split(';').map(str::trim);
        let decl = parts.next()?.strip_prefix("field:")?;
        if decl.split_whitespace().last()? != "dev" {
            return None;
        }
        let mut offset = None;
        let mut size = None;
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.parse::<usize>().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                size = v.parse::<usize>().ok();
            }
        }
        (size == Some(4)).then_some(offset).flatten()
    })
}

#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("{path}: no merge-path sampler in this world")]
    Unsupported { path: String },
    /// A file the sampler is set up from (kallsyms, the online CPUs, a tracepoint's id
    /// and format) could not be read.
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Symbols { path: PathBuf, message: String },
    #[error(
        "{path}: the merge functions are not in the symbol table (no kallsyms addresses: not root, or kptr_restrict)"
    )]
    NoSymbols { path: PathBuf },
    #[error("perf_event_open(cpu-clock, cpu {cpu}): {message}")]
    Open { cpu: usize, message: String },
    #[error("mmap of the perf buffer of cpu {cpu}: {source}")]
    Map {
        cpu: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a CPU list: {list:?}")]
    Cpus { path: PathBuf, list: String },
}

impl PerfError {
    /// Reads one of the files the sampler is set up from.
    fn read(path: &Path) -> Result<String, PerfError> {
        std::fs::read_to_string(path).map_err(|source| PerfError::Read {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The path or resource the error is about.
    pub fn path(&self) -> String {
        match self {
            PerfError::Read { path, .. }
            | PerfError::Symbols { path, .. }
            | PerfError::NoSymbols { path }
            | PerfError::Cpus { path, .. } => path.display().to_string(),
            PerfError::Unsupported { path } => path.clone(),
            PerfError::Open { cpu, .. } | PerfError::Map { cpu, .. } => {
                format!("perf_event_open cpu {cpu}")
            }
        }
    }
}

/// `kernel.perf_event_paranoid`, where it can be read.
fn read_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The sysctl drop-in that lowers `kernel.perf_event_paranoid` to 2 for the sampler, at
/// boot and with `sysctl --system` (docs/hardening.md): the one file the fix names.
pub const PARANOID_SYSCTL_DROP_IN: &str = "/etc/sysctl.d/60-mergetune-perf.conf";

/// Why `perf_event_open` refused, in words an operator can act on, with the exact fix. At
/// `perf_event_paranoid` 3 (Debian's default, a distribution patch: mainline stops at 2;
/// Ubuntu's is 4) the Debian 12 and 13 kernels refused the system-wide event to a daemon
/// holding CAP_PERFMON (the VM lab's `default-pricing-under-systemd`, 2026-12-05), where
/// mainline lets CAP_PERFMON through.
pub fn open_refused(e: &std::io::Error, paranoid: Option<i32>) -> String {
    match (e.raw_os_error(), paranoid) {
        (Some(13), Some(p)) if p >= 3 => format!(
            "{e}: kernel.perf_event_paranoid is {p}, a distribution's setting that refuses perf events to anything without CAP_SYS_ADMIN. Fix: `echo kernel.perf_event_paranoid=2 > {PARANOID_SYSCTL_DROP_IN} && sysctl --system` (docs/hardening.md), or price without the sampler: a profile measured once here (`mergetune-lab calibrate`) as [pricing] fallback_profile"
        ),
        (Some(13), Some(p)) => format!(
            "{e}: kernel.perf_event_paranoid is {p}: the sampler needs CAP_PERFMON (or root); the shipped unit keeps it in CapabilityBoundingSet= (docs/hardening.md): a drop-in that narrows the set drops it"
        ),
        _ => e.to_string(),
    }
}

/// The CPUs that are online, from `/sys/devices/system/cpu/online` ("0-3,6").
pub fn online_cpus(sysfs_root: &Path) -> Result<Vec<usize>, PerfError> {
    let path = sysfs_root.join("devices/system/cpu/online");
    let text = PerfError::read(&path)?;
    parse_cpu_list(text.trim()).ok_or_else(|| PerfError::Cpus {
        path,
        list: text.trim().to_string(),
    })
}

/// "0-3,6" as a list; None when malformed.
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 65_536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// Loads the merge functions' ranges from `<procfs_root>/kallsyms`.
pub fn load_symbols(procfs_root: &Path) -> Result<Symbols, PerfError> {
    let path = procfs_root.join("kallsyms");
    let text = PerfError::read(&path)?;
    let s = Symbols::from_kallsyms(&text);
    if s.usable() {
        Ok(s)
    } else {
        Err(PerfError::NoSymbols { path })
    }
}

/// Deep enough for the merge path under a syscall and an interrupt; bounds each record.
const MAX_STACK: u16 = 48;

/// How the sampler is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerParams {
    /// CPU time between two samples on one CPU, ns.
    pub period_ns: u64,
    /// Data pages of each CPU's ring buffer (a power of two).
    pub buffer_pages: usize,
}

/// One CPU's event and its mapped ring buffer (the raw calls are [`crate::sys::perf`]'s).
struct CpuBuffer {
    ring: PerfRing,
    scratch: Vec<u8>,
}

impl CpuBuffer {
    fn open(cpu: usize, p: &SamplerParams) -> Result<CpuBuffer, PerfError> {
        let cpu_arg = i32::try_from(cpu).map_err(|_| PerfError::Open {
            cpu,
            message: "CPU number out of range".into(),
        })?;
        let ring = PerfRing::open(
            cpu_arg,
            Sampling::CpuClock {
                period_ns: p.period_ns,
                max_stack: MAX_STACK,
            },
            p.buffer_pages,
        )
        .map_err(|e| match e {
            RingError::Open(e) => PerfError::Open {
                cpu,
                message: open_refused(&e, read_paranoid()),
            },
            RingError::Map(source) => PerfError::Map { cpu, source },
        })?;
        Ok(CpuBuffer {
            ring,
            scratch: Vec::new(),
        })
    }

    /// Copies out the whole records written since the last drain and frees their space.
    fn drain(&mut self) -> &[u8] {
        self.ring.drain_into(&mut self.scratch);
        &self.scratch
    }
}

/// The sampled `block:block_bio_queue` events, one ring per CPU, and the whole disk of
/// each device number seen.
struct BioEvents {
    cpus: Vec<PerfRing>,
    /// Where the `dev` field lies in the raw record.
    dev_offset: usize,
    sysfs_root: PathBuf,
    /// Device number -> whole disk's name (None: not a block device sysfs knows).
    disks: HashMap<u32, Option<String>>,
    scratch: Vec<u8>,
}

impl BioEvents {
    /// Opens the bio events (disabled) on `cpus`; the tracepoint's id and format come from
    /// tracefs under `sysfs_root`.
    fn open(sysfs_root: &Path, cpus: &[usize]) -> Result<BioEvents, PerfError> {
        let dir = sysfs_root
            .join(crate::tracefs::TRACEFS_IN_SYSFS)
            .join("events/block/block_bio_queue");
        let read = |name: &str| PerfError::read(&dir.join(name));
        let id: u64 = read("id")?.trim().parse().map_err(|_| PerfError::Symbols {
            path: dir.join("id"),
            message: "not a tracepoint id".into(),
        })?;
        let dev_offset = dev_field(&read("format")?).ok_or(PerfError::Symbols {
            path: dir.join("format"),
            message: "no 4-byte dev field".into(),
        })?;
        let mut rings = Vec::new();
        for &cpu in cpus {
            let cpu_arg = i32::try_from(cpu).unwrap_or(i32::MAX);
            rings.push(
                PerfRing::open(
                    cpu_arg,
                    Sampling::Tracepoint {
                        id,
                        every_events: BIO_EVENT_EVERY,
                    },
                    64,
                )
                .map_err(|e| match e {
                    RingError::Open(e) => PerfError::Open {
                        cpu,
                        message: format!("block_bio_queue: {}", open_refused(&e, read_paranoid())),
                    },
                    RingError::Map(source) => PerfError::Map { cpu, source },
                })?,
            );
        }
        Ok(BioEvents {
            cpus: rings,
            dev_offset,
            sysfs_root: sysfs_root.to_path_buf(),
            disks: HashMap::new(),
            scratch: Vec::new(),
        })
    }

    /// The tasks' devices over the span, from what the rings hold; the lost count.
    fn drain(&mut self) -> (Submitters, u64) {
        let mut out = Submitters::default();
        let mut lost = 0;
        let off = self.dev_offset;
        for ring in &mut self.cpus {
            ring.drain_into(&mut self.scratch);
            lost += parse_raw_records(&self.scratch, |tid, raw| {
                if let Some(dev) = u32_at(raw, off) {
                    out.note(tid, dev);
                }
            });
        }
        (out, lost)
    }

    /// The whole disk of device number `dev` (a partition's parent), by name.
    fn disk(&mut self, dev: u32) -> Option<String> {
        let root = &self.sysfs_root;
        self.disks
            .entry(dev)
            .or_insert_with(|| {
                let (major, minor) = dev_major_minor(dev);
                let link = root.join(format!("dev/block/{major}:{minor}"));
                let target = std::fs::read_link(&link).ok()?;
                let mut names = target
                    .iter()
                    .rev()
                    .map(|c| c.to_string_lossy().into_owned());
                let own = names.next()?;
                if link.join("partition").exists() {
                    names.next()
                } else {
                    Some(own)
                }
            })
            .clone()
    }

    fn enable(&self, on: bool) {
        for r in &self.cpus {
            if on { r.enable() } else { r.disable() }
        }
    }
}

/// The sampler: one `cpu-clock` event per online CPU, system-wide, kernel stacks only, and
/// the bio events that tie its samples to devices (absent, with why, where they could not
/// be opened: every sample is then unattributed).
pub struct MergePathSampler {
    cpus: Vec<CpuBuffer>,
    symbols: Symbols,
    params: SamplerParams,
    enabled: bool,
    bios: Result<BioEvents, String>,
}

impl MergePathSampler {
    /// Opens the events (disabled) on every online CPU; needs CAP_PERFMON or root (or
    /// `perf_event_paranoid` <= 0) and the symbol table's addresses.
    pub fn open(
        sysfs_root: &Path,
        symbols: Symbols,
        params: SamplerParams,
    ) -> Result<MergePathSampler, PerfError> {
        let online = online_cpus(sysfs_root)?;
        let mut cpus = Vec::new();
        for &cpu in &online {
            cpus.push(CpuBuffer::open(cpu, &params)?);
        }
        Ok(MergePathSampler {
            cpus,
            symbols,
            params,
            enabled: false,
            bios: BioEvents::open(sysfs_root, &online).map_err(|e| e.to_string()),
        })
    }

    pub fn params(&self) -> SamplerParams {
        self.params
    }

    pub fn symbols(&self) -> &Symbols {
        &self.symbols
    }

    pub fn enable(&mut self) {
        if !self.enabled {
            if let Ok(b) = &self.bios {
                b.enable(true);
            }
            for c in &self.cpus {
                c.ring.enable();
            }
            self.enabled = true;
        }
    }

    pub fn disable(&mut self) {
        if self.enabled {
            for c in &self.cpus {
                c.ring.disable();
            }
            if let Ok(b) = &self.bios {
                b.enable(false);
            }
            self.enabled = false;
        }
    }

    /// The samples since the last drain, classed and tied to the devices their tasks
    /// queued bios on; with `only_pids`, only those tasks' samples count (calibrate keeps
    /// to its fio processes).
    pub fn drain(&mut self, only_pids: Option<&BTreeSet<u32>>) -> MergeSamples {
        let mut out = MergeSamples {
            period_ns: self.params.period_ns,
            ..Default::default()
        };
        let submitters = match &mut self.bios {
            Ok(b) => Some(b.drain().0),
            Err(why) => {
                out.attribution_error = Some(why.clone());
                None
            }
        };
        // tid -> its devices' names, resolved once per drain.
        let mut names: HashMap<u32, Vec<String>> = HashMap::new();
        let symbols = &self.symbols;
        let mut bios = self.bios.as_mut().ok();
        for c in &mut self.cpus {
            let bytes = c.drain();
            out.lost += parse_records(bytes, |pid, tid, chain| {
                if !only_pids.is_none_or(|set| set.contains(&pid)) {
                    return;
                }
                let class = classify(symbols, chain);
                if !class.merge_path {
                    out.add_sample(class);
                    return;
                }
                let key = names.entry(tid).or_insert_with(|| {
                    let (Some(subs), Some(b)) = (submitters.as_ref(), bios.as_deref_mut()) else {
                        return Vec::new();
                    };
                    let mut v: Vec<String> =
                        subs.of(tid).into_iter().filter_map(|d| b.disk(d)).collect();
                    v.sort_unstable();
                    v.dedup();
                    v
                });
                out.add_sample_of(class, key);
            });
        }
        out
    }
}

impl std::fmt::Debug for MergePathSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergePathSampler")
            .field("cpus", &self.cpus.len())
            .field("params", &self.params)
            .field("enabled", &self.enabled)
            .finish()
    }
}

impl Drop for MergePathSampler {
    fn drop(&mut self) {
        self.disable();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "\
ffffffff81b32750 T elv_rb_find
ffffffff81b327a0 T elv_rb_next
ffffffff81b335d0 T elv_rqhash_find
ffffffff81b33680 T elv_other
ffffffff81b33740 T elv_merge
ffffffff81b33900 T elv_after
ffffffff81b41e70 T blk_attempt_plug_merge
ffffffff81b41f70 T blk_after
ffffffff81b51330 T blk_mq_sched_bio_merge
ffffffff81b51400 T blk_after2
ffffffff81b6be90 t dd_request_merge
ffffffff81b6bf80 t dd_bio_merge
ffffffff81b6c100 t dd_after
ffffffff8226f230 T native_queued_spin_lock_slowpath
ffffffff8226f300 T after_lock
ffffffff81000000 D some_data
";

    #[test]
    fn a_sample_under_dd_bio_merge_is_mq_deadline_merge_path_with_its_lock() {
        let s = Symbols::from_kallsyms(KALLSYMS);
        assert!(s.usable());
        // leaf first: the lock slowpath under dd_bio_merge under blk_mq_submit_bio (not ours)
        let chain = [
            PERF_CONTEXT_MAX + 3,
            0xffffffff8226f240,
            0xffffffff81b6bfa0,
            0xffffffff99999999,
        ];
        let c = classify(&s, &chain);
        assert!(c.merge_path);
        assert_eq!(c.scheduler, Some(Scheduler::MqDeadline));
        assert!(!c.beyond_one_hit);
    }

    #[test]
    fn the_front_lookup_is_beyond_the_one_hit_cache_and_a_range_ends_at_the_next_symbol() {
        let s = Symbols::from_kallsyms(KALLSYMS);
        let c = classify(
            &s,
            &[0xffffffff81b32760, 0xffffffff81b6bea0, 0xffffffff81b337a0],
        );
        assert!(c.merge_path && c.beyond_one_hit && c.front_lookup);
        // elv_rb_next is not elv_rb_find
        assert_eq!(classify(&s, &[0xffffffff81b327a8]), SampleClass::default());
        // past dd_bio_merge's end
        assert_eq!(classify(&s, &[0xffffffff81b6c110]), SampleClass::default());
    }

    #[test]
    fn zeroed_addresses_resolve_nothing() {
        // what a reader without the right to see addresses gets (kptr_restrict)
        let hidden: String = KALLSYMS
            .lines()
            .map(|l| format!("0000000000000000{}\n", &l[16..]))
            .collect();
        let s = Symbols::from_kallsyms(&hidden);
        assert!(!s.usable());
        assert!(s.found.is_empty());
    }

    fn record(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_ne_bytes());
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn records_give_samples_and_lost_counts_and_a_truncated_one_ends_the_parse() {
        let mut body = Vec::new();
        body.extend_from_slice(&42u32.to_ne_bytes());
        body.extend_from_slice(&43u32.to_ne_bytes());
        body.extend_from_slice(&2u64.to_ne_bytes());
        body.extend_from_slice(&1u64.to_ne_bytes());
        body.extend_from_slice(&2u64.to_ne_bytes());
        let mut bytes = record(PERF_RECORD_SAMPLE, &body);
        let mut lost = Vec::new();
        lost.extend_from_slice(&7u64.to_ne_bytes());
        lost.extend_from_slice(&5u64.to_ne_bytes());
        bytes.extend(record(PERF_RECORD_LOST, &lost));
        bytes.extend(record(5, &[0; 16]));
        let mut seen = Vec::new();
        let n = parse_records(&bytes, |p, t, c| seen.push((p, t, c.to_vec())));
        assert_eq!(n, 5);
        assert_eq!(seen, vec![(42, 43, vec![1, 2])]);
        // a sample claiming more frames than it holds
        let mut bad = body.clone();
        bad[8..16].copy_from_slice(&1000u64.to_ne_bytes());
        let mut seen = 0;
        parse_records(&record(PERF_RECORD_SAMPLE, &bad), |_, _, _| seen += 1);
        assert_eq!(seen, 0);
        // cut in the middle of a record
        let cut = &bytes[..bytes.len() - 3];
        assert_eq!(parse_records(cut, |_, _, _| {}), 5);
    }

    #[test]
    fn cpu_lists_as_sysfs_writes_them() {
        assert_eq!(parse_cpu_list("0-3,6"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn an_unreadable_cpu_list_keeps_its_io_error_and_a_bad_one_is_quoted() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("devices/system/cpu/online");
        let e = online_cpus(d.path()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}: No such file or directory (os error 2)", path.display())
        );
        let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            source.map(std::io::Error::kind),
            Some(std::io::ErrorKind::NotFound)
        );
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "0-x\n").unwrap();
        assert_eq!(
            online_cpus(d.path()).unwrap_err().to_string(),
            format!("{}: not a CPU list: \"0-x\"", path.display())
        );
    }

    #[test]
    fn a_refusal_at_paranoid_3_says_what_to_do() {
        let eacces = std::io::Error::from_raw_os_error(13);
        let m = open_refused(&eacces, Some(3));
        assert!(m.contains("kernel.perf_event_paranoid is 3"), "{m}");
        assert!(
            m.contains(&format!(
                "echo kernel.perf_event_paranoid=2 > {PARANOID_SYSCTL_DROP_IN} && sysctl --system"
            )),
            "{m}"
        );
        assert!(!m.contains('\n'), "one line: {m}");
        assert!(open_refused(&eacces, Some(2)).contains("needs CAP_PERFMON"));
        let enoent = std::io::Error::from_raw_os_error(2);
        assert_eq!(open_refused(&enoent, Some(3)), enoent.to_string());
    }

    const BIO_QUEUE_FORMAT: &str = "name: block_bio_queue
ID: 2097
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:dev_t dev;	offset:8;	size:4;	signed:0;
	field:sector_t sector;	offset:16;	size:8;	signed:0;
	field:unsigned int nr_sector;	offset:24;	size:4;	signed:0;
";

    #[test]
    fn the_bio_events_dev_field_is_found_in_the_tracefs_format_and_unpacked() {
        assert_eq!(dev_field(BIO_QUEUE_FORMAT), Some(8));
        assert_eq!(dev_field("field:int common_pid;\toffset:4;\tsize:4;"), None);
        // loop2 is 7:2; the kernel packs it as 7 << 20 | 2
        assert_eq!(dev_major_minor((7 << 20) | 2), (7, 2));
    }

    #[test]
    fn raw_samples_give_the_task_and_its_record() {
        let mut body = Vec::new();
        body.extend_from_slice(&10u32.to_ne_bytes());
        body.extend_from_slice(&11u32.to_ne_bytes());
        let raw: Vec<u8> = (0..12u8).collect();
        body.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        body.extend_from_slice(&raw);
        let mut seen = Vec::new();
        let lost = parse_raw_records(&record(PERF_RECORD_SAMPLE, &body), |t, r| {
            seen.push((t, r.to_vec()))
        });
        assert_eq!((lost, seen), (0, vec![(11, raw)]));
    }

    #[test]
    fn a_task_submits_to_the_devices_that_hold_a_share_of_its_bios() {
        let mut s = Submitters::default();
        for _ in 0..99 {
            s.note(7, 1);
        }
        // one stray bio of 100 to another device does not make the task ambiguous
        s.note(7, 2);
        assert_eq!(s.of(7), vec![1]);
        for _ in 0..20 {
            s.note(8, 1);
            s.note(8, 3);
        }
        let mut both = s.of(8);
        both.sort_unstable();
        assert_eq!(both, vec![1, 3]);
        assert!(s.of(9).is_empty());
    }

    #[test]
    fn a_merge_path_sample_is_kept_under_its_tasks_devices() {
        let mut m = MergeSamples::default();
        let dd = SampleClass {
            merge_path: true,
            scheduler: Some(Scheduler::MqDeadline),
            ..Default::default()
        };
        m.add_sample_of(dd, &["loop1".to_string()]);
        m.add_sample_of(dd, &["loop1".to_string()]);
        m.add_sample_of(SampleClass::default(), &["loop1".to_string()]);
        assert_eq!(m.total, 3);
        assert_eq!(m.by_submitter[&vec!["loop1".to_string()]][1].merge_path, 2);
    }
}
