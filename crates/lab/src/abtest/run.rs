//! The real half of the experiment: one fio process on the device, the level switched
//! block by block through `BlockFs::write_tunable`, per-task CPU read through
//! `kernel::cputime`, bios from the device's stat counters. Returns every block's figures
//! (so a run can be re-derived) and their [`Analysis`].
//!
//! fio is pinned to one CPU, in a session of its own (with autogroups on, CPU is shared
//! between sessions first, so a task's own nice value would not lift it above another
//! session's build): `fio_autogroup_nice` raises that session, so that other tenants do not
//! take fio's CPU. The measuring thread is pinned to the other CPUs. The device's original
//! `nomerges` (and mq-deadline's `front_merges`) are put back at the end, also on an error.

use super::analysis::{Analysis, BlockMeasure, PairMeasure, analyse};
use super::plan::schedule;
use super::tasks::{delta, kworker_runs};
use mergetune_kernel::blockfs::{BlockFs, FsError};
use mergetune_kernel::cputime::{self, CpuTimeError, TaskTime};
use mergetune_kernel::diskstats::parse_stat_fields;
use mergetune_kernel::perf::{self, MergePathSampler, PerfError, SamplerParams};
use mergetune_kernel::scheduler::Reported;
use mergetune_kernel::sys::session;
use mergetune_kernel::tunable::{Tunable, is_plain_device_name};
use mergetune_logic::decision::Level;
use rustix::process::{Pid, Signal, kill_process};
use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const DEFAULT_PAIRS: usize = 240;
pub const DEFAULT_BLOCK_MS: u64 = 500;
/// After each level write: the write freezes the queue (drains in-flight I/O); the
/// block starts once that has passed.
pub const DEFAULT_SETTLE_MS: u64 = 50;
pub const DEFAULT_WARMUP_MS: u64 = 2_000;
/// The loop driver's tag depth: deeper than this only waits for a tag.
pub const DEFAULT_IODEPTH: u32 = 128;
/// "Busy near 100%": fio's submitting thread on CPU at least this share of a block.
pub const DEFAULT_MIN_BUSY: f64 = 0.95;
pub const DEFAULT_SEED: u64 = 1;
pub const DEFAULT_FIO_AUTOGROUP_NICE: i32 = -20;

/// What to measure, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct AbParams {
    /// The device (a name under /sys/block, e.g. `loop3`): one the caller owns.
    pub device: String,
    pub base: Level,
    pub test: Level,
    pub pairs: usize,
    pub block_ms: u64,
    pub settle_ms: u64,
    pub warmup_ms: u64,
    /// The CPU fio is pinned to.
    pub cpu: usize,
    pub iodepth: u32,
    pub min_busy: f64,
    pub seed: u64,
    /// The nice value of fio's own autogroup (None: leave it at 0).
    pub fio_autogroup_nice: Option<i32>,
}

impl AbParams {
    /// The defaults: L0 against L3, 240 pairs of 500 ms blocks, random 4 KiB reads at QD128,
    /// one I/O per `io_submit` (unplugged).
    pub fn new(device: &str, cpu: usize) -> AbParams {
        AbParams {
            device: device.to_string(),
            base: Level::L0,
            test: Level::L3,
            pairs: DEFAULT_PAIRS,
            block_ms: DEFAULT_BLOCK_MS,
            settle_ms: DEFAULT_SETTLE_MS,
            warmup_ms: DEFAULT_WARMUP_MS,
            cpu,
            iodepth: DEFAULT_IODEPTH,
            min_busy: DEFAULT_MIN_BUSY,
            seed: DEFAULT_SEED,
            fio_autogroup_nice: Some(DEFAULT_FIO_AUTOGROUP_NICE),
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !is_plain_device_name(&self.device) {
            return Err(format!("device {:?}: not a device name", self.device));
        }
        if self.base == self.test {
            return Err(format!("base and test are both {}", self.base));
        }
        if self.pairs == 0 {
            return Err("pairs: at least 1".into());
        }
        if !(100..=10_000).contains(&self.block_ms) {
            return Err(format!("block_ms {}: 100 to 10000", self.block_ms));
        }
        if self.settle_ms > 10_000 || self.warmup_ms > 60_000 {
            return Err("settle_ms <= 10000, warmup_ms <= 60000".into());
        }
        if self.iodepth == 0 || self.iodepth > 4096 {
            return Err(format!("iodepth {}: 1 to 4096", self.iodepth));
        }
        if !(self.min_busy > 0.0 && self.min_busy <= 1.0) {
            return Err(format!("min_busy {}: in (0, 1]", self.min_busy));
        }
        if let Some(n) = self.fio_autogroup_nice
            && !(-20..=19).contains(&n)
        {
            return Err(format!("fio_autogroup_nice {n}: -20 to 19"));
        }
        Ok(())
    }

    /// The wall time the blocks take, without warm-up: a bound for the caller.
    pub fn planned(&self) -> Duration {
        Duration::from_millis(self.pairs as u64 * 2 * (self.block_ms + self.settle_ms))
    }

    /// fio's arguments after `taskset -c CPU`.
    pub fn fio_args(&self, runtime_s: u64) -> Vec<String> {
        vec![
            "fio".into(),
            "--name=abtest".into(),
            format!("--filename=/dev/{}", self.device),
            "--direct=1".into(),
            "--rw=randread".into(),
            "--bs=4k".into(),
            "--ioengine=libaio".into(),
            format!("--iodepth={}", self.iodepth),
            "--norandommap".into(),
            "--randrepeat=0".into(),
            "--thread".into(),
            "--time_based".into(),
            format!("--runtime={runtime_s}"),
            "--output=/dev/null".into(),
        ]
    }
}

/// An error of the experiment. Every variant names the path it is about (a kernel file
/// through [`FsError`] / [`CpuTimeError`], the device, or fio's command).
#[derive(Debug, thiserror::Error)]
pub enum AbError {
    #[error("/dev/{device}: {reason}")]
    Params { device: String, reason: String },
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    CpuTime(#[from] CpuTimeError),
    #[error("{path}: {message}")]
    Stat { path: String, message: String },
    #[error("{command}: {message}")]
    Fio { command: String, message: String },
}

/// The run: its parameters, the device's scheduler, every block, and the analysis.
#[derive(Debug, Clone)]
pub struct AbReport {
    pub params: AbParams,
    pub scheduler: Reported,
    pub fio_command: String,
    pub submitter_tid: u32,
    pub duration: Duration,
    pub pairs: Vec<PairMeasure>,
    /// Over the pairs whose blocks were both CPU-bound: the result.
    pub analysis: Analysis,
    /// Over every pair whatever fio's share of its CPU: shown beside the result for what
    /// the CPU-bound check removed, never instead of it.
    pub unchecked: Analysis,
}

impl AbReport {
    /// One line per block: pair, position, level, wall ns, submitter ns, fio ns, kworker
    /// ns, bios, merged, exited tasks, the sampled merge path's ns (empty where not
    /// sampled): the run's data, to re-derive any figure.
    pub fn blocks_csv(&self) -> String {
        let mut s = String::from(
            "pair,pos,level,wall_ns,submitter_ns,fio_ns,kworker_ns,ios,merged,tasks_exited,merge_path_ns\n",
        );
        for (i, p) in self.pairs.iter().enumerate() {
            for (j, b) in p.blocks.iter().enumerate() {
                s.push_str(&format!(
                    "{i},{j},{},{},{},{},{},{},{},{},{}\n",
                    b.level,
                    b.wall_ns,
                    b.submitter_ns,
                    b.fio_ns,
                    b.kworker_ns,
                    b.ios,
                    b.merged,
                    b.tasks_exited,
                    b.merge_path_ns.map_or(String::new(), |n| n.to_string())
                ));
            }
        }
        s
    }
}

impl std::fmt::Display for AbReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &self.params;
        writeln!(
            f,
            "abtest {} ({}), {} vs {}: {} pairs of {} ms blocks (+{} ms settle), fio on CPU {} (autogroup nice {}), {:.0} s",
            p.device,
            self.scheduler,
            p.base,
            p.test,
            p.pairs,
            p.block_ms,
            p.settle_ms,
            p.cpu,
            p.fio_autogroup_nice.unwrap_or(0),
            self.duration.as_secs_f64()
        )?;
        writeln!(f, "fio: taskset -c {} {}", p.cpu, self.fio_command)?;
        writeln!(f, "{}", self.analysis)?;
        write!(
            f,
            "without the CPU-bound check (every pair; not the result):\n{}",
            self.unchecked
        )
    }
}

/// Runs the experiment on `params.device` through `fs` (its tunables and stat) and
/// `procfs_root` (CPU times). The caller owns the device and has set its scheduler.
/// With `sampler`, the merge path is also sampled in every block (the second method:
/// [`super::analysis::Sampled`]).
pub fn run(
    params: &AbParams,
    fs: &mut dyn BlockFs,
    procfs_root: &Path,
    sampler: Option<&mut MergePathSampler>,
) -> Result<AbReport, AbError> {
    params.validate().map_err(|reason| AbError::Params {
        device: params.device.clone(),
        reason,
    })?;
    let dev = params.device.as_str();
    let scheduler_text = fs.read_attr(dev, "queue/scheduler")?;
    // A line with no active entry is shown as the kernel wrote it.
    let scheduler = Reported::parse(&scheduler_text)
        .unwrap_or_else(|| Reported::Other(scheduler_text.trim().to_string()));
    let has_front = fs.attr_exists(dev, Tunable::FrontMerges.rel_path());
    let original_nomerges = fs.read_tunable(dev, Tunable::Nomerges)?;
    let original_front = if has_front {
        Some(fs.read_tunable(dev, Tunable::FrontMerges)?)
    } else {
        None
    };
    let started = Instant::now();
    let result = measure(params, fs, procfs_root, has_front, sampler);
    // Put the device back whatever happened.
    let restored = fs
        .write_tunable(dev, Tunable::Nomerges, &original_nomerges)
        .and_then(|_| match &original_front {
            Some(v) => fs.write_tunable(dev, Tunable::FrontMerges, v),
            None => Ok(()),
        });
    let (pairs, submitter_tid, fio_command) = result?;
    restored?;
    let analysis = analyse(&pairs, params.base, params.test, params.min_busy);
    let unchecked = analyse(&pairs, params.base, params.test, 0.0);
    Ok(AbReport {
        params: params.clone(),
        scheduler,
        fio_command,
        submitter_tid,
        duration: started.elapsed(),
        pairs,
        analysis,
        unchecked,
    })
}

fn set_level(
    fs: &mut dyn BlockFs,
    dev: &str,
    level: Level,
    has_front: bool,
) -> Result<(), FsError> {
    if has_front {
        fs.write_tunable(dev, Tunable::FrontMerges, &level.front_merges().to_string())?;
    }
    fs.write_tunable(dev, Tunable::Nomerges, &level.nomerges().to_string())
}

/// One reading: fio's threads, every kworker, the device's bios.
struct Snap {
    at: Instant,
    fio: Vec<TaskTime>,
    kworkers: Vec<TaskTime>,
    ios: u64,
    merged: u64,
}

fn snap(fs: &mut dyn BlockFs, procfs: &Path, fio_pid: u32, dev: &str) -> Result<Snap, AbError> {
    let at = Instant::now();
    let fio = cputime::thread_times(procfs, fio_pid)?;
    let kworkers = cputime::kworker_times(procfs)?;
    let text = fs.read_attr(dev, "stat")?;
    let f = parse_stat_fields(&text).map_err(|message| AbError::Stat {
        path: format!("/sys/block/{dev}/stat"),
        message,
    })?;
    // Reads completed and reads merged: the job only reads.
    Ok(Snap {
        at,
        fio,
        kworkers,
        ios: f.get(0) + f.get(1),
        merged: f.get(1),
    })
}

/// The sampler as `calibrate` runs it (the same period and ring), opened disabled: `run`
/// enables it after fio's warm-up.
pub fn open_sampler(sysfs_root: &Path, procfs_root: &Path) -> Result<MergePathSampler, PerfError> {
    let symbols = perf::load_symbols(procfs_root)?;
    let params = SamplerParams {
        period_ns: crate::calibrate::merge_path::PERIOD_NS,
        buffer_pages: crate::calibrate::merge_path::BUFFER_PAGES,
    };
    MergePathSampler::open(sysfs_root, symbols, params)
}

fn block_measure(s0: &Snap, s1: &Snap, level: Level, submitter: u32, dev: &str) -> BlockMeasure {
    let fio = delta(&s0.fio, &s1.fio, |_| true);
    // The device's own workqueue, and kblockd: with a scheduler, a dispatch that found no
    // free tag is rerun from kblockd when one frees, so part of the device's dispatch runs
    // there (kblockd is per CPU and shared with other devices: an idle one adds nothing).
    let kw = delta(&s0.kworkers, &s1.kworkers, |t| {
        kworker_runs(&t.comm, dev) || kworker_runs(&t.comm, "kblockd")
    });
    let at = |s: &Snap| {
        s.fio
            .iter()
            .find(|t| t.pid == submitter)
            .map(|t| t.runtime_ns)
    };
    let (sub, sub_gone) = match (at(s0), at(s1)) {
        (Some(a), Some(b)) if b >= a => (b - a, 0),
        _ => (0, 1),
    };
    BlockMeasure {
        level,
        wall_ns: s1.at.duration_since(s0.at).as_nanos() as u64,
        submitter_ns: sub,
        fio_ns: fio.ns,
        kworker_ns: kw.ns,
        ios: s1.ios.saturating_sub(s0.ios),
        merged: s1.merged.saturating_sub(s0.merged),
        tasks_exited: fio.exited.len() + kw.exited.len() + sub_gone,
        merge_path_ns: None,
    }
}

/// fio, killed and reaped on drop.
struct Fio {
    child: Child,
    command: String,
}

impl Fio {
    fn start(params: &AbParams, runtime_s: u64, procfs: &Path) -> Result<Fio, AbError> {
        let args = params.fio_args(runtime_s);
        let command = args.join(" ");
        let mut cmd = Command::new("taskset");
        cmd.arg("-c")
            .arg(params.cpu.to_string())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // A session (and so an autogroup) of its own, whose nice value is set below.
        session::new_session_on_spawn(&mut cmd);
        let child = cmd.spawn().map_err(|e| AbError::Fio {
            command: command.clone(),
            message: format!("cannot start taskset: {e}"),
        })?;
        let fio = Fio { child, command };
        if let Some(n) = params.fio_autogroup_nice {
            cputime::set_autogroup_nice(procfs, fio.child.id(), n)?;
        }
        Ok(fio)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error if fio has exited (it runs past the last block).
    fn check_running(&mut self) -> Result<(), AbError> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(st)) => {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                Err(AbError::Fio {
                    command: self.command.clone(),
                    message: format!("exited early ({st}): {}", err.trim()),
                })
            }
            Err(e) => Err(AbError::Fio {
                command: self.command.clone(),
                message: e.to_string(),
            }),
        }
    }
}

impl Drop for Fio {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // Our own child, not yet reaped: the pid is still its own.
            let _ = kill_process(Pid::from_child(&self.child), Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Pins the calling thread to every CPU but `cpu` and gives the old mask back on drop, so
/// that the readings never take fio's CPU.
struct PinnedAway {
    old: CpuSet,
}

impl PinnedAway {
    fn new(cpu: usize) -> Option<PinnedAway> {
        // `None`: the calling thread.
        let old = sched_getaffinity(None).ok()?;
        let mut away = old;
        away.unset(cpu);
        if away.count() == 0 {
            return None;
        }
        sched_setaffinity(None, &away).ok()?;
        Some(PinnedAway { old })
    }
}

impl Drop for PinnedAway {
    fn drop(&mut self) {
        // Restores the mask read in `new`, for the calling thread.
        let _ = sched_setaffinity(None, &self.old);
    }
}

type Measured = (Vec<PairMeasure>, u32, String);

fn measure(
    params: &AbParams,
    fs: &mut dyn BlockFs,
    procfs: &Path,
    has_front: bool,
    mut sampler: Option<&mut MergePathSampler>,
) -> Result<Measured, AbError> {
    let dev = params.device.as_str();
    set_level(fs, dev, params.base, has_front)?;
    let _pinned = PinnedAway::new(params.cpu);
    // fio outlives the last block by a margin (snapshots take a few ms each); it is
    // stopped as soon as the blocks are done.
    let runtime_s = (params.warmup_ms / 1000) + params.planned().as_secs() * 3 / 2 + 30;
    let mut fio = Fio::start(params, runtime_s, procfs)?;
    let pid = fio.pid();
    // Warm-up at the base level; the submitting thread is the one that ran most.
    std::thread::sleep(Duration::from_millis(params.warmup_ms.max(500) / 2));
    fio.check_running()?;
    let w0 = cputime::thread_times(procfs, pid)?;
    std::thread::sleep(Duration::from_millis(params.warmup_ms.max(500) / 2));
    fio.check_running()?;
    let w1 = cputime::thread_times(procfs, pid)?;
    let submitter = w1
        .iter()
        .max_by_key(|t| {
            let before = w0
                .iter()
                .find(|x| x.pid == t.pid)
                .map_or(0, |x| x.runtime_ns);
            t.runtime_ns.saturating_sub(before)
        })
        .map(|t| t.pid)
        .ok_or_else(|| AbError::Fio {
            command: fio.command.clone(),
            message: "no threads".into(),
        })?;

    let plan = schedule(params.pairs, params.base, params.test, params.seed);
    let mut pairs = Vec::with_capacity(plan.len());
    if let Some(s) = sampler.as_deref_mut() {
        s.enable();
    }
    let mut cx = BlockCx {
        params,
        fs,
        procfs,
        fio: &mut fio,
        submitter,
        has_front,
        sampler,
    };
    let measured = (|| -> Result<(), AbError> {
        for p in plan {
            let first = one_block(&mut cx, p.first)?;
            let second = one_block(&mut cx, p.second)?;
            pairs.push(PairMeasure {
                blocks: [first, second],
            });
        }
        Ok(())
    })();
    if let Some(s) = cx.sampler {
        s.disable();
    }
    measured?;
    let command = fio.command.clone();
    drop(fio);
    Ok((pairs, submitter, command))
}

/// What every block of a run needs.
struct BlockCx<'a> {
    params: &'a AbParams,
    fs: &'a mut dyn BlockFs,
    procfs: &'a Path,
    fio: &'a mut Fio,
    submitter: u32,
    has_front: bool,
    sampler: Option<&'a mut MergePathSampler>,
}

/// One block: the level written, the settle, then two readings `block_ms` apart; with a
/// sampler, what it read in between (what it read during the settle is thrown away).
fn one_block(cx: &mut BlockCx<'_>, level: Level) -> Result<BlockMeasure, AbError> {
    let dev = cx.params.device.as_str();
    set_level(cx.fs, dev, level, cx.has_front)?;
    std::thread::sleep(Duration::from_millis(cx.params.settle_ms));
    let fio_pid = cx.fio.pid();
    if let Some(s) = cx.sampler.as_deref_mut() {
        s.drain(Some(&BTreeSet::new()));
    }
    let s0 = snap(cx.fs, cx.procfs, fio_pid, dev)?;
    let end = s0.at + Duration::from_millis(cx.params.block_ms);
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    let s1 = snap(cx.fs, cx.procfs, fio_pid, dev)?;
    let sampled = cx
        .sampler
        .as_deref_mut()
        .map(|s| s.drain(Some(&BTreeSet::from([fio_pid]))));
    cx.fio.check_running()?;
    let mut b = block_measure(&s0, &s1, level, cx.submitter, dev);
    // Every class of merge path counts (the plug's, and the scheduler's own).
    b.merge_path_ns = sampled
        .filter(|m| m.lost == 0)
        .map(|m| m.merge_path.iter().sum::<u64>() * m.period_ns);
    Ok(b)
}
