//! `mergetune calibrate` (default mode): the merge path's CPU per bio, sampled where it is
//! spent, per scheduler x plugged/unplugged x 1 and N submitters.
//!
//! Method (docs/policy.md "Pricing the merge path"): fio random 4 KiB `O_DIRECT` reads
//! (never a write: fio runs with `--readonly`) at L0; a `cpu-clock` sampler on every CPU
//! with kernel callchains (`kernel::perf`); per window, the samples of fio's own processes
//! whose stack holds a merge function, times the sampling period, over the bios the
//! device's stat counted in the window. The windows' values give a median with its
//! order-statistic interval (`stats`), and the pooled count a Poisson one.
//!
//! On a scratch loop device (the default) or on the operator's device (`--device NAME`):
//! there the run is bounded in time (`--max-seconds`) and rate (`--rate-iops`), and the
//! device's tunables are recorded in a state file before the first write and put back at
//! the end; a guard process puts them back if calibrate is killed (even by SIGKILL).

use super::scratch::ScratchLoop;
use super::stats;
use anyhow::{Context, Result, bail};
use mergetune_daemon::actuator::Actuator;
use mergetune_daemon::state::{Claims, FileStore, StateError, StateStore, restore_from_store};
use mergetune_kernel::blockfs::{RealFs, Sysfs};
use mergetune_kernel::cputime;
use mergetune_kernel::devices::read_device;
use mergetune_kernel::perf::{self, MergePathSampler, MergeSamples, SamplerParams};
use mergetune_kernel::roots::{KernelRoots, PROCFS};
use mergetune_kernel::scheduler::Scheduler;
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::pricing::profile::{CostProfile, DeviceKey, MergePathCell, Method, Unit};
use rustix::process::{Pid, Signal, kill_process};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Sampling period: 250 µs of CPU per sample (4 kHz on a busy CPU).
pub const PERIOD_NS: u64 = 250_000;
/// Per CPU ring buffer, pages: 4 kHz of ~300-byte records, drained every window.
pub const BUFFER_PAGES: usize = 512;

/// What to measure and where (validated before any I/O: [`Plan::check`]).
#[derive(Debug, Clone)]
pub struct Plan {
    pub schedulers: Vec<Scheduler>,
    /// The operator's device, or None for a scratch loop device.
    pub device: Option<String>,
    pub windows: u32,
    pub window_ms: u64,
    /// N of "1 and N submitters".
    pub submitters: u32,
    pub rate_iops: Option<u64>,
    pub max_seconds: u64,
    pub state_dir: PathBuf,
    pub tmpfs_dir: PathBuf,
    pub size_mib: u64,
    pub name: String,
    pub output: Option<PathBuf>,
    pub roots: KernelRoots,
    /// Where the host-wide device claims live (the daemon's runtime directory); None: no
    /// claims (a fake sysfs tree without `--runtime-dir`).
    pub runtime_dir: Option<PathBuf>,
}

impl Plan {
    /// Every argument checked before the first I/O; the error names the flag.
    pub fn check(&self) -> Result<()> {
        if self.name.trim().is_empty() || self.name.chars().any(char::is_control) {
            bail!("--name: must be a non-empty name without control characters");
        }
        if !(2..=1000).contains(&self.windows) {
            bail!("--windows: {} is not in 2..=1000", self.windows);
        }
        if !(100..=60_000).contains(&self.window_ms) {
            bail!("--runtime-ms: {} is not in 100..=60000", self.window_ms);
        }
        if !(2..=64).contains(&self.submitters) {
            bail!("--submitters: {} is not in 2..=64", self.submitters);
        }
        if let Some(r) = self.rate_iops
            && !(100..=10_000_000).contains(&r)
        {
            bail!("--rate-iops: {r} is not in 100..=10000000");
        }
        if !(10..=86_400).contains(&self.max_seconds) {
            bail!("--max-seconds: {} is not in 10..=86400", self.max_seconds);
        }
        check_size_and_output(self.size_mib, self.output.as_deref())?;
        if self.schedulers.is_empty() {
            bail!("--schedulers: at least one");
        }
        Ok(())
    }

    /// fio runs per cell: warm-up and windows.
    fn cell_seconds(&self) -> f64 {
        1.0 + f64::from(self.windows) * self.window_ms as f64 / 1000.0
    }
}

/// One window's figures.
#[derive(Debug, Clone, Default)]
struct WindowFig {
    samples: MergeSamples,
    bios: u64,
    cpu_ns: u64,
    ms: f64,
}

fn device_bios(fs: &mut RealFs, dev: &str) -> Result<u64> {
    let stat = fs.read_attr(dev, "stat")?;
    let f: Vec<u64> = stat
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    if f.len() < 8 {
        bail!("{dev}/stat: {stat:?} has fewer than 8 fields");
    }
    Ok(f[0] + f[1] + f[4] + f[5])
}

fn spawn_fio(
    dev: &Path,
    plugged: bool,
    jobs: u32,
    runtime_s: f64,
    rate: Option<u64>,
    cpu: usize,
) -> Result<Child> {
    let mut c = Command::new("fio");
    c.args([
        "--name=mergepath",
        "--readonly",
        "--direct=1",
        "--rw=randread",
        "--bs=4k",
        "--ioengine=libaio",
        "--iodepth=32",
        "--norandommap",
        "--randrepeat=0",
        "--time_based",
        "--group_reporting",
        "--output-format=terse",
    ])
    .arg(format!("--filename={}", dev.display()))
    .arg(format!(
        "--runtime={}ms",
        (runtime_s * 1000.0) as u64 + 2000
    ))
    .arg(format!("--numjobs={jobs}"));
    if plugged {
        // More than 2 iocbs per io_submit: libaio plugs the batch (AIO_PLUG_THRESHOLD).
        c.args([
            "--iodepth_batch_submit=16",
            "--iodepth_batch_complete_min=16",
        ]);
    } else {
        c.arg("--iodepth_batch_submit=1");
    }
    if jobs == 1 {
        c.arg(format!("--cpus_allowed={cpu}"));
    }
    if let Some(r) = rate {
        c.arg(format!("--rate_iops={}", r / u64::from(jobs).max(1)));
    }
    c.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawn fio (apt-get install fio)")
}

/// One cell: fio at L0 on `dev`, `windows` sampled windows.
#[allow(clippy::too_many_arguments)]
fn measure_cell(
    plan: &Plan,
    fs: &mut RealFs,
    sampler: &mut MergePathSampler,
    dev: &str,
    dev_path: &Path,
    plugged: bool,
    jobs: u32,
    cpu: usize,
    stop: &AtomicBool,
) -> Result<Vec<WindowFig>> {
    let mut child = spawn_fio(
        dev_path,
        plugged,
        jobs,
        plan.cell_seconds(),
        plan.rate_iops,
        cpu,
    )?;
    let result = (|| -> Result<Vec<WindowFig>> {
        // I/O flowing, and 500 ms of ramp.
        let t0 = Instant::now();
        let start = device_bios(fs, dev)?;
        while device_bios(fs, dev)? == start {
            if t0.elapsed() > Duration::from_secs(10) {
                bail!("fio did no I/O on {dev} in 10 s");
            }
            if let Some(st) = child.try_wait()? {
                bail!("fio exited early ({st})");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(500));
        let pids: BTreeSet<u32> = cputime::family(&plan.roots.procfs, child.id())
            .into_iter()
            .collect();
        sampler.enable();
        let _ = sampler.drain(None);
        let mut out = Vec::new();
        let mut bios0 = device_bios(fs, dev)?;
        let mut cpu0 = family_cpu(&plan.roots.procfs, &pids);
        let mut t = Instant::now();
        for _ in 0..plan.windows {
            if stop.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            std::thread::sleep(Duration::from_millis(plan.window_ms));
            let samples = sampler.drain(Some(&pids));
            let bios1 = device_bios(fs, dev)?;
            let cpu1 = family_cpu(&plan.roots.procfs, &pids);
            let now = Instant::now();
            out.push(WindowFig {
                samples,
                bios: bios1.saturating_sub(bios0),
                cpu_ns: cpu1.saturating_sub(cpu0),
                ms: now.duration_since(t).as_secs_f64() * 1000.0,
            });
            (bios0, cpu0, t) = (bios1, cpu1, now);
        }
        sampler.disable();
        Ok(out)
    })();
    sampler.disable();
    stop_fio(&plan.roots.procfs, &mut child);
    result
}

/// Ends fio and its job processes (a SIGKILL of the parent alone would leave the jobs
/// submitting into the next cell): SIGINT to each, as fio itself stops them, then waits.
fn stop_fio(procfs: &Path, child: &mut Child) {
    let family = cputime::family(procfs, child.id());
    for pid in &family {
        // Only a real pid: 0 or a negative one would signal a whole process group.
        let Some(pid) = i32::try_from(*pid).ok().and_then(Pid::from_raw) else {
            continue;
        };
        let _ = kill_process(pid, Signal::INT);
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(_)) = child.try_wait()
            && family
                .iter()
                .all(|p| !procfs.join(p.to_string()).join("task").exists())
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn family_cpu(procfs: &Path, pids: &BTreeSet<u32>) -> u64 {
    pids.iter()
        .filter_map(|&p| cputime::task_runtime_ns(procfs, p).ok())
        .sum()
}

/// The cell's figures from its windows; windows where fio submitted nothing are dropped.
fn summarize(s: Scheduler, plugged: bool, jobs: u32, ws: &[WindowFig]) -> MergePathCell {
    let kept: Vec<&WindowFig> = ws.iter().filter(|w| w.bios > 0).collect();
    let per = |f: &dyn Fn(&MergeSamples) -> u64| -> Vec<f64> {
        kept.iter()
            .map(|w| f(&w.samples) as f64 * PERIOD_NS as f64 / w.bios as f64)
            .collect()
    };
    let l3 = per(&|m| m.merge_path.iter().sum());
    let l2 = per(&|m| m.beyond_one_hit.iter().sum());
    let e3 = stats::estimate(&l3);
    let e2 = stats::estimate(&l2);
    let bios: u64 = kept.iter().map(|w| w.bios).sum();
    let cpu: u64 = kept.iter().map(|w| w.cpu_ns).sum();
    let ms: f64 = kept.iter().map(|w| w.ms).sum();
    let r = |x: f64| (x * 10.0).round() / 10.0;
    MergePathCell {
        scheduler: s,
        plugged,
        submitters: jobs,
        l3_ns_per_bio: r(e3.median),
        l3_ci: [r(e3.low), r(e3.high)],
        l2_ns_per_bio: r(e2.median),
        l2_ci: [r(e2.low), r(e2.high)],
        cpu_ns_per_bio: r(cpu as f64 / bios.max(1) as f64),
        merge_samples: kept
            .iter()
            .map(|w| w.samples.merge_path.iter().sum::<u64>())
            .sum(),
        samples: kept.iter().map(|w| w.samples.total).sum(),
        bios,
        windows: kept.len() as u32,
        bios_per_sec: r(bios as f64 / (ms / 1000.0).max(1e-9)),
    }
}

/// The key of the device measured.
pub fn device_key(fs: &mut RealFs, dev: &str) -> DeviceKey {
    let rotational = fs
        .read_attr(dev, "queue/rotational")
        .is_ok_and(|v| v.trim() == "1");
    let nr_hw_queues = fs.list_dir(dev, "mq").map_or(0, |v| v.len() as u32);
    let driver: String = dev
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    let model = fs
        .read_attr(dev, "device/model")
        .map(|m| m.trim().to_string())
        .unwrap_or_default();
    DeviceKey {
        rotational,
        nr_hw_queues,
        driver,
        model,
    }
}

/// The state directory's store: its lock taken for calibrate's life, and the device claims
/// where there is a runtime directory. A live daemon's directory is refused, naming it.
fn own_store(dir: &Path, runtime_dir: Option<&Path>) -> Result<FileStore> {
    std::fs::create_dir_all(dir).with_context(|| format!("--state-dir {}", dir.display()))?;
    let mut store = FileStore::new(dir);
    if let Some(rt) = runtime_dir {
        store = store.with_claims(Claims::under(rt));
    }
    store.lock().map_err(|e| match e {
        e @ StateError::Held { .. } => anyhow::Error::new(e).context(format!(
            "--state-dir {}: a running mergetune records its originals there; calibrate keeps its own (another --state-dir)",
            dir.display()
        )),
        e => anyhow::Error::new(e).context(format!("--state-dir {}", dir.display())),
    })?;
    Ok(store)
}

/// `--device`'s claim, taken for calibrate's life: refused while another live process (a
/// daemon managing it) owns the device, naming its pid.
fn claim_device(store: &mut FileStore, fs: &mut RealFs, dev: &str) -> Result<()> {
    let Some(id) = mergetune_kernel::devices::read_identity(fs, dev)
        .with_context(|| format!("--device {dev}"))?
    else {
        return Ok(());
    };
    let Some(claims) = store.claims() else {
        return Ok(());
    };
    let mut claims = claims.clone();
    claims.claim(dev, id.dev).with_context(|| {
        format!("--device {dev}: stop the daemon managing it (or exclude it in its config) first")
    })?;
    *store = store.clone().with_claims(claims);
    Ok(())
}

/// Ownership first, before any other work: the state directory's lock and the device's
/// claim (a live daemon's are refused, naming it).
fn take_ownership(plan: &Plan) -> Result<FileStore> {
    let mut store = own_store(&plan.state_dir, plan.runtime_dir.as_deref())?;
    if let Some(d) = &plan.device {
        let mut fs = plan.roots.fs();
        claim_device(&mut store, &mut fs, d)?;
    }
    Ok(store)
}

/// The hidden guard: waits until its parent (calibrate) closes our stdin, whatever way it
/// ended, then puts back what the state file in `dir` records (not when a live daemon took
/// the directory meanwhile, nor to a device another live process owns now).
pub fn guard(dir: &Path, sysfs_root: &Path, runtime_dir: Option<&Path>) -> Result<i32> {
    let mut buf = [0u8; 64];
    let mut stdin = std::io::stdin();
    while stdin.read(&mut buf).map(|n| n > 0).unwrap_or(false) {}
    let mut store = own_store_after_parent(dir, runtime_dir)?;
    let mut fs = KernelRoots::new(sysfs_root, PROCFS).fs();
    let report = restore_from_store(&mut fs, &mut store, 0)?;
    for r in &report.results {
        eprintln!("calibrate guard: {r}");
    }
    for s in report.stale_records() {
        eprintln!("calibrate guard: {}: {s}", store.describe());
    }
    Ok(if report.failed() || report.stale.is_some() {
        1
    } else {
        0
    })
}

/// The state directory's lock, taken by the guard once calibrate is gone. Calibrate's
/// stdin pipe reads end-of-file as it exits, but the kernel may release its `flock` a
/// moment later (the lock file's last reference is dropped after the pipe's), so a lock
/// still held is tried again for a while before the guard gives up.
fn own_store_after_parent(dir: &Path, runtime_dir: Option<&Path>) -> Result<FileStore> {
    const PATIENCE: Duration = Duration::from_secs(5);
    let started = Instant::now();
    loop {
        match own_store(dir, runtime_dir) {
            Err(e)
                if started.elapsed() < PATIENCE
                    && matches!(
                        e.downcast_ref::<StateError>(),
                        Some(StateError::Held { .. })
                    ) =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

fn spawn_guard(dir: &Path, sysfs_root: &Path, runtime_dir: Option<&Path>) -> Result<Child> {
    let exe = std::env::current_exe().context("the mergetune binary's path")?;
    let mut c = Command::new(exe);
    c.arg("calibrate")
        .arg("--guard")
        .arg(dir)
        .arg("--sysfs-root")
        .arg(sysfs_root);
    if let Some(rt) = runtime_dir {
        c.arg("--runtime-dir").arg(rt);
    }
    c.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .context("spawn the calibrate guard")
}

/// `mergetune calibrate` in its default mode: one measurement procedure in order (guard,
/// scratch device or the operator's, sampler, the alternating blocks, the profile), whose
/// guard and device live across every step.
pub fn run(mut plan: Plan, kernel_release: String) -> Result<i32> {
    plan.check()?;
    let mut store = take_ownership(&plan)?;
    let symbols = perf::load_symbols(&plan.roots.procfs)?;
    let params = SamplerParams {
        period_ns: PERIOD_NS,
        buffer_pages: BUFFER_PAGES,
    };
    let mut sampler = MergePathSampler::open(&plan.roots.sysfs, symbols, params)?;
    let stop = super::signals::stop_on_signals()?;
    let mut fs = plan.roots.fs();
    let (scratch, dev) = open_device(&mut plan, &mut fs)?;
    let dev_path = PathBuf::from("/dev").join(&dev);
    restore_earlier(&plan, &mut store)?;
    let guard = spawn_guard(
        &plan.state_dir,
        &plan.roots.sysfs,
        plan.runtime_dir.as_deref(),
    )?;
    let mut act = Actuator::new(false, Box::new(store));
    let key = device_key(&mut fs, &dev);
    let started = Instant::now();
    let measured_at = super::profile::utc_now_rfc3339();
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = ncpu - 1;
    announce(&plan, &dev, scratch.is_some());
    let result = (|| -> Result<Vec<MergePathCell>> {
        let mut cells = Vec::new();
        for &s in &plan.schedulers {
            // A scratch device switches schedulers; the operator's keeps its own (a switch
            // drains the queue and is the operator's choice): run() checked it is `s`.
            if let Some(lp) = &scratch {
                lp.set_scheduler(s)?;
            }
            all_merges_on(&mut act, &mut fs, &dev, s)?;
            for plugged in [false, true] {
                for jobs in [1, plan.submitters] {
                    if over_budget(&plan, started, s, plugged, jobs) {
                        return Ok(cells);
                    }
                    let ws = measure_cell(
                        &plan,
                        &mut fs,
                        &mut sampler,
                        &dev,
                        &dev_path,
                        plugged,
                        jobs,
                        cpu,
                        &stop,
                    )
                    .with_context(|| format!("{s} plugged={plugged} submitters={jobs}"))?;
                    let c = summarize(s, plugged, jobs, &ws);
                    report_cell(&c, plan.windows);
                    cells.push(c);
                }
            }
        }
        Ok(cells)
    })();
    let loop_direct_io = put_back(act, &mut fs, guard, scratch, &dev);
    let cells = result?;
    if cells.is_empty() {
        bail!("no cell measured");
    }
    let measured = Measured {
        measured_at,
        duration_s: started.elapsed().as_secs_f64().round(),
        loop_direct_io,
        device: key,
        cells,
    };
    let profile = merge_path_profile(&plan, &dev, kernel_release, measured);
    super::profile::write_profile(&profile, plan.output.as_deref())?;
    Ok(0)
}

/// After the cells: the device put back by the run itself, then the guard let go (it finds
/// nothing left), then the scratch device detached; whether the scratch device ran with loop
/// direct I/O.
fn put_back(
    mut act: Actuator,
    fs: &mut RealFs,
    mut guard: Child,
    scratch: Option<ScratchLoop>,
    dev: &str,
) -> bool {
    let restored = act.restore_all(fs, 0);
    for r in &restored {
        eprintln!("calibrate: {r}");
    }
    // The lock and the claim go with the actuator's store: the guard takes the lock.
    drop(act);
    drop(guard.stdin.take());
    let _ = guard.wait();
    let loop_direct_io = scratch_dio(fs, dev);
    drop(scratch);
    loop_direct_io
}

/// What the run measures, said before it starts.
fn announce(plan: &Plan, dev: &str, scratch: bool) {
    eprintln!(
        "calibrate: merge path on {dev} ({}), {} windows of {} ms per cell, cpu-clock sampling every {} µs",
        if scratch {
            "a scratch loop device over tmpfs"
        } else {
            "read-only"
        },
        plan.windows,
        plan.window_ms,
        PERIOD_NS / 1000
    );
}

/// Every merge on, as at L0: nomerges 0 and, on mq-deadline, front merges.
fn all_merges_on(act: &mut Actuator, fs: &mut RealFs, dev: &str, s: Scheduler) -> Result<()> {
    act.set(fs, dev, Tunable::Nomerges, "0")?;
    if s == Scheduler::MqDeadline {
        act.set(fs, dev, Tunable::FrontMerges, "1")?;
    }
    Ok(())
}

/// Whether the next cell would overrun `--max-seconds`, said when it would.
fn over_budget(plan: &Plan, started: Instant, s: Scheduler, plugged: bool, jobs: u32) -> bool {
    let budget = Duration::from_secs(plan.max_seconds);
    if started.elapsed() + Duration::from_secs_f64(plan.cell_seconds() + 3.0) <= budget {
        return false;
    }
    eprintln!(
        "calibrate: --max-seconds {} reached: {s} {} x{jobs} and later cells not measured",
        plan.max_seconds,
        if plugged { "plugged" } else { "unplugged" }
    );
    true
}

/// The device to measure: the operator's `--device` (a whole disk with a request queue,
/// measured under its own scheduler only), or a scratch loop device of our own, whose
/// usable schedulers narrow the plan's.
fn open_device(plan: &mut Plan, fs: &mut RealFs) -> Result<(Option<ScratchLoop>, String)> {
    Ok(match &plan.device {
        Some(d) => {
            let info = read_device(fs, d).with_context(|| format!("--device {d}"))?;
            if info.scheduler.is_none() || info.nomerges.is_none() {
                bail!(
                    "--device {d}: not a whole disk with a request queue (no queue/scheduler or queue/nomerges)"
                );
            }
            let own = mergetune_kernel::scheduler::Reported::known(info.scheduler.as_ref());
            if plan.schedulers.len() != 1 || own != Some(plan.schedulers[0]) {
                bail!(
                    "--device {d}: measures the device's own scheduler ({}) only; pass --schedulers {} (switching a device's scheduler drains its queue and is the operator's choice)",
                    info.scheduler.as_ref().map_or("?", |s| s.name()),
                    info.scheduler.as_ref().map_or("?", |s| s.name())
                );
            }
            (None, d.clone())
        }
        None => {
            let lp = ScratchLoop::create(&plan.tmpfs_dir, plan.size_mib, &plan.roots.sysfs)?;
            plan.schedulers = lp.usable_schedulers(&plan.schedulers)?;
            let name = lp.name.clone();
            (Some(lp), name)
        }
    })
}

/// Originals first, in a state file (the guard restores them if calibrate is killed): what
/// an earlier run that is gone left is put back before anything is written. `store` holds
/// the directory's lock, so no live process's records are among them.
fn restore_earlier(plan: &Plan, store: &mut FileStore) -> Result<()> {
    if let Some(loaded) = store.load()? {
        let pid = loaded.state.pid;
        let mut f = plan.roots.fs();
        let rep = restore_from_store(&mut f, store, 0)?;
        for r in &rep.results {
            eprintln!("calibrate: left by an earlier run that is gone (pid {pid}): {r}");
        }
        if let Some(e) = &rep.stale {
            bail!(
                "{}: {e}: its records of values put back stay",
                store.describe()
            );
        }
    }
    Ok(())
}

/// One measured cell, said as it is measured: the saving of L3 and L2 per bio with their
/// intervals, against the CPU per bio.
fn report_cell(c: &MergePathCell, windows: u32) {
    eprintln!(
        "calibrate: {:<11} {:<9} x{}: L3 {:>6.1} ns/bio [{:.1}, {:.1}], L2 {:>5.1} [{:.1}, {:.1}] ({:.1}% intervals) of {:>6.0} ns/bio CPU; {} merge samples of {}; {:.0} bios/s",
        c.scheduler.name(),
        if c.plugged { "plugged" } else { "unplugged" },
        c.submitters,
        c.l3_ns_per_bio,
        c.l3_ci[0],
        c.l3_ci[1],
        c.l2_ns_per_bio,
        c.l2_ci[0],
        c.l2_ci[1],
        // The windows' count fixes the order statistics' coverage.
        stats::median_ci(&vec![0.0; windows as usize], 0.95).2 * 100.0,
        c.cpu_ns_per_bio,
        c.merge_samples,
        c.samples,
        c.bios_per_sec
    );
}

/// What a calibrate run measured, for its profile.
struct Measured {
    /// When the run started (RFC 3339, UTC).
    measured_at: String,
    duration_s: f64,
    loop_direct_io: bool,
    device: DeviceKey,
    cells: Vec<MergePathCell>,
}

/// The cost profile of a merge-path run on `dev`.
fn merge_path_profile(plan: &Plan, dev: &str, kernel_release: String, m: Measured) -> CostProfile {
    let coverage = stats::median_ci(&vec![0.0; plan.windows as usize], 0.95).2;
    CostProfile {
        name: plan.name.clone(),
        description: format!(
            "The merge path's CPU per bio, sampled by mergetune calibrate with cpu-clock callchains under fio random 4 KiB O_DIRECT reads on {dev}"
        ),
        method: Method::MergePathSampling,
        unit: Unit::Ns,
        kernel_release,
        schedulers: plan.schedulers.clone(),
        cpu_measure: format!(
            "cpu-clock samples every {} µs of CPU whose kernel stack holds a merge function, of fio's processes, per bio (completed + merged from the device's stat)",
            PERIOD_NS / 1000
        ),
        command: std::iter::once("mergetune".to_string())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        measured_at: m.measured_at,
        duration_s: m.duration_s,
        reps: plan.windows,
        runtime_ms: plan.window_ms,
        ci_coverage_percent: (coverage * 1000.0).round() / 10.0,
        noise_percent: 0.0,
        loadavg: Vec::new(),
        loop_direct_io: m.loop_direct_io,
        cells: Vec::new(),
        toggle: None,
        device: Some(m.device),
        merge_path: m.cells,
    }
}

/// What the sampler costs the tasks it interrupts, measured: fio at full rate on a scratch
/// loop device (mq-deadline, unplugged, pinned to the last CPU), the sampler switched on
/// and off in alternating blocks of `window_ms` within one fio run (order random within
/// each pair), at a period 10 times shorter than the daemon's so that the cost is large
/// enough to resolve. Per pair, fio's CPU per second with the sampler on minus off, over
/// the samples per second taken on fio's CPU, is the cost of one sample. Printed with its
/// interval and scaled to the daemon's settings (`[pricing]`) against the saving at this rate.
/// One measurement procedure in order over one fio run, whose device, sampler and fio
/// process live across every block.
pub fn overhead(
    plan: &Plan,
    pairs: u32,
    pricing: &mergetune_logic::pricing::config::PricingConfig,
) -> Result<i32> {
    let mut sampler = amplified_sampler(plan)?;
    let mut fs = plan.roots.fs();
    let lp = ScratchLoop::create(&plan.tmpfs_dir, plan.size_mib, &plan.roots.sysfs)?;
    lp.set_scheduler(Scheduler::MqDeadline)?;
    let dev = lp.name.clone();
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = ncpu - 1;
    let mut child = spawn_overhead_fio(&lp.dev, plan.window_ms, pairs, cpu)?;
    let result = (|| -> Result<(Vec<f64>, Vec<f64>, f64, f64)> {
        wait_for_io(&mut fs, &dev)?;
        std::thread::sleep(Duration::from_millis(500));
        let pids: BTreeSet<u32> = cputime::family(&plan.roots.procfs, child.id())
            .into_iter()
            .collect();
        let mut per_sample = Vec::new();
        let mut merge_ns = Vec::new();
        let (mut bios_sum, mut secs_sum) = (0u64, 0f64);
        for on_first in pair_order(pairs) {
            let mut cpu_per_s = [0f64; 2];
            let mut samples_per_s = 0f64;
            for on in [on_first, !on_first] {
                if on {
                    sampler.enable();
                    let _ = sampler.drain(None);
                }
                let (b0, c0, t) = (
                    device_bios(&mut fs, &dev)?,
                    family_cpu(&plan.roots.procfs, &pids),
                    Instant::now(),
                );
                std::thread::sleep(Duration::from_millis(plan.window_ms));
                let (b1, c1, secs) = (
                    device_bios(&mut fs, &dev)?,
                    family_cpu(&plan.roots.procfs, &pids),
                    t.elapsed().as_secs_f64(),
                );
                cpu_per_s[usize::from(on)] = c1.saturating_sub(c0) as f64 / secs;
                if on {
                    sampler.disable();
                    let s = sampler.drain(Some(&pids));
                    samples_per_s = s.total as f64 / secs;
                    let bios = b1.saturating_sub(b0).max(1);
                    merge_ns.push(
                        s.merge_path.iter().sum::<u64>() as f64 * AMPLIFIED_PERIOD_NS as f64
                            / bios as f64,
                    );
                    bios_sum += bios;
                    secs_sum += secs;
                }
            }
            if samples_per_s > 0.0 {
                per_sample.push((cpu_per_s[1] - cpu_per_s[0]) / samples_per_s);
            }
        }
        Ok((
            per_sample,
            merge_ns,
            bios_sum as f64 / secs_sum.max(1e-9),
            secs_sum,
        ))
    })();
    sampler.disable();
    stop_fio(&plan.roots.procfs, &mut child);
    drop(lp);
    let (per_sample, merge_ns, bios_per_s, _) = result?;
    report_overhead(plan, pricing, ncpu, &per_sample, &merge_ns, bios_per_s);
    Ok(0)
}

/// `overhead`'s one fio run: long enough for `pairs` pairs of `window_ms` blocks and the
/// start-up before them.
fn spawn_overhead_fio(dev: &Path, window_ms: u64, pairs: u32, cpu: usize) -> Result<Child> {
    let block_s = window_ms as f64 / 1000.0;
    spawn_fio(
        dev,
        false,
        1,
        2.0 * block_s * f64::from(pairs) + 2.0,
        None,
        cpu,
    )
}

/// The period of `overhead`'s sampler: 10 times shorter than the daemon's, so that its cost
/// is large enough to resolve.
const AMPLIFIED_PERIOD_NS: u64 = 100_000;

/// The merge-path sampler at [`AMPLIFIED_PERIOD_NS`].
fn amplified_sampler(plan: &Plan) -> Result<MergePathSampler> {
    let symbols = perf::load_symbols(&plan.roots.procfs)?;
    let params = SamplerParams {
        period_ns: AMPLIFIED_PERIOD_NS,
        buffer_pages: BUFFER_PAGES,
    };
    Ok(MergePathSampler::open(&plan.roots.sysfs, symbols, params)?)
}

/// Waits until fio's first I/O reaches `dev` (10 s at the most).
fn wait_for_io(fs: &mut RealFs, dev: &str) -> Result<()> {
    let t0 = Instant::now();
    let start = device_bios(fs, dev)?;
    while device_bios(fs, dev)? == start {
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("fio did no I/O on {dev} in 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Per pair, whether the sampler is on in its first block: a fixed pseudo-random order.
fn pair_order(pairs: u32) -> Vec<bool> {
    (0..u64::from(pairs))
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) & 1 == 1)
        .collect()
}

/// `overhead`'s figures: the cost of one sample, the merge path's saving at fio's rate, and
/// the daemon's sampler at its settings against that saving.
fn report_overhead(
    plan: &Plan,
    pricing: &mergetune_logic::pricing::config::PricingConfig,
    ncpu: usize,
    per_sample: &[f64],
    merge_ns: &[f64],
    bios_per_s: f64,
) {
    let e = stats::estimate(per_sample);
    let m = stats::estimate(merge_ns);
    // The daemon's sampler: one sample per period_us of CPU on each busy CPU, on for
    // sample_ms of every every_ms; here fio's CPU alone is counted (its CPU is where the
    // merge path runs), the other CPU's share is the same per sample.
    let duty = pricing.sample_ms as f64 / pricing.every_ms as f64;
    let daemon_samples_per_s = 1e9 / (pricing.period_us as f64 * 1000.0);
    let cost = |ns_per_sample: f64| ns_per_sample * daemon_samples_per_s * ncpu as f64 * duty / 1e6;
    let saving = |ns_per_bio: f64| ns_per_bio * bios_per_s / 1e6;
    println!(
        "sampler overhead: {} pairs of {} ms blocks, sampling every {} µs when on, fio at {:.0} bios/s on mq-deadline",
        per_sample.len(),
        plan.window_ms,
        AMPLIFIED_PERIOD_NS / 1000,
        bios_per_s
    );
    println!(
        "  cost of one sample: {:.0} ns [{:.0}, {:.0}] of fio's CPU ({:.1}% interval)",
        e.median,
        e.low,
        e.high,
        e.coverage * 100.0
    );
    println!(
        "  merge path: {:.0} ns/bio [{:.0}, {:.0}], saving at this rate {:.2} ms/s [{:.2}, {:.2}] ({:.1}% intervals)",
        m.median,
        m.low,
        m.high,
        saving(m.median),
        saving(m.low),
        saving(m.high),
        m.coverage * 100.0
    );
    println!(
        "  the daemon's sampler ({} µs period, {} ms every {} ms, {} CPUs busy): {:.3} ms/s [{:.3}, {:.3}], {:.1}% [{:.1}, {:.1}] of the saving it protects ({:.1}% intervals)",
        pricing.period_us,
        pricing.sample_ms,
        pricing.every_ms,
        ncpu,
        cost(e.median),
        cost(e.low),
        cost(e.high),
        cost(e.median) / saving(m.median) * 100.0,
        cost(e.low) / saving(m.median) * 100.0,
        cost(e.high) / saving(m.median) * 100.0,
        e.coverage * 100.0
    );
}

fn scratch_dio(fs: &mut RealFs, dev: &str) -> bool {
    fs.read_attr(dev, "loop/dio").is_ok_and(|v| v.trim() == "1")
}

/// `--size-mib` within bounds, and `--output`'s directory there (both modes).
pub(super) fn check_size_and_output(size_mib: u64, output: Option<&Path>) -> Result<()> {
    if !(16..=65_536).contains(&size_mib) {
        bail!("--size-mib: {size_mib} is not in 16..=65536");
    }
    if let Some(out) = output {
        let parent = out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            bail!(
                "--output {}: directory {} does not exist",
                out.display(),
                parent.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            schedulers: vec![Scheduler::MqDeadline],
            device: None,
            windows: 10,
            window_ms: 500,
            submitters: 2,
            rate_iops: None,
            max_seconds: 300,
            state_dir: "/tmp".into(),
            tmpfs_dir: "/dev/shm".into(),
            size_mib: 512,
            name: "x".into(),
            output: None,
            roots: KernelRoots::default(),
            runtime_dir: None,
        }
    }

    #[test]
    fn every_argument_is_checked_before_any_io() {
        assert!(plan().check().is_ok());
        type Mutation = Box<dyn Fn(&mut Plan)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|p| p.name = String::new()), "--name"),
            (Box::new(|p| p.name = "a\u{1b}b".into()), "--name"),
            (Box::new(|p| p.windows = 1), "--windows"),
            (Box::new(|p| p.window_ms = 0), "--runtime-ms"),
            (Box::new(|p| p.submitters = 1), "--submitters"),
            (Box::new(|p| p.rate_iops = Some(0)), "--rate-iops"),
            (Box::new(|p| p.max_seconds = 0), "--max-seconds"),
            (Box::new(|p| p.size_mib = 0), "--size-mib"),
            (Box::new(|p| p.size_mib = u64::MAX), "--size-mib"),
            (
                Box::new(|p| p.output = Some("/nonexistent/x".into())),
                "--output",
            ),
        ];
        for (f, flag) in cases {
            let mut p = plan();
            f(&mut p);
            let e = p.check().expect_err(flag).to_string();
            assert!(e.starts_with(flag), "{e}");
        }
    }
}
