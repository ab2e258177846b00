//! `mergetune calibrate`: measures what merging costs in CPU on this kernel, per scheduler
//! and ladder level, and what one `queue/nomerges` write (a queue freeze) costs in latency,
//! and writes a cost profile (`cost_profile`) for the simulator and the policy.
//!
//! Method, and why:
//! - CPU-bound: a scratch loop device over a tmpfs file (never an existing device), so that
//!   there is no device time to wait for; fio pinned to one CPU saturates it.
//! - What is counted: the CPU time (`/proc/PID/task/*/schedstat`, ns) of fio's threads plus
//!   that of every kworker over a measured window. The submission path (plug, merge
//!   lookups, request allocation, insertion, dispatch) runs in fio's thread; the loop
//!   device's work (the copy to and from the tmpfs file and the completion) runs in a
//!   kworker; block completions that come back by IPI run as softirqs in whatever task they
//!   interrupt, and this kernel has no IRQ time accounting, so on fio's saturated CPU they
//!   land in fio's time. Whole-machine busy time from `/proc/stat` is recorded beside it
//!   but not used: the machine is shared, and it counts other tenants' builds.
//! - I/O counts and merges come from `/sys/block/loopN/stat` deltas over the same window
//!   (never fio's figures); a bio is completed + merged.
//! - Levels are interleaved within each repetition (and the order shuffled from a seed),
//!   so slow drift of the shared machine hits every level alike; a level's change against
//!   L0 is the median of per-repetition paired differences, with a distribution-free 95%
//!   interval from order statistics ([`stats`]). An interval that contains 0 is "no
//!   measurable difference".
//!
//! This module is the only one that names `/dev/loop*`, losetup, tmpfs paths and fio: it
//! is a kernel-layer edge, like `tracecap`.

use crate::logic::cost_profile::{
    Cell, CostProfile, Level, Method, Scheduler, ToggleCost, Unit, Workload,
};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Pure statistics of the calibration: medians and their intervals.
pub mod stats {
    /// The median (mean of the two middle values for an even count); NaN when empty.
    pub fn median(xs: &[f64]) -> f64 {
        if xs.is_empty() {
            return f64::NAN;
        }
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    /// P(X <= k) for X ~ Binomial(n, 1/2).
    fn binom_half_cdf(n: usize, k: usize) -> f64 {
        let mut c = 1.0f64; // C(n, 0)
        let mut sum = 0.0;
        for i in 0..=k.min(n) {
            if i > 0 {
                c = c * (n - i + 1) as f64 / i as f64;
            }
            sum += c;
        }
        sum / 2f64.powi(n as i32)
    }

    /// A distribution-free interval for the median from order statistics: the narrowest
    /// [x(k), x(n+1-k)] whose coverage 1 - 2 P(Bin(n, 1/2) <= k-1) is at least `level`
    /// (e.g. 0.95). Returns (low, high, coverage achieved). With too few values for the
    /// level (n < 6 at 95%), the range [min, max] and its lower coverage.
    pub fn median_ci(xs: &[f64], level: f64) -> (f64, f64, f64) {
        let n = xs.len();
        if n == 0 {
            return (f64::NAN, f64::NAN, 0.0);
        }
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        let coverage = |k: usize| 1.0 - 2.0 * binom_half_cdf(n, k - 1);
        let mut k = 1;
        while k < n.div_ceil(2) && coverage(k + 1) >= level {
            k += 1;
        }
        let cov = if n == 1 { 0.0 } else { coverage(k) };
        (v[k - 1], v[n - k], cov)
    }

    /// Per-repetition change of `b` against the reference `a`, percent.
    pub fn paired_change_percent(a: &[f64], b: &[f64]) -> Vec<f64> {
        a.iter()
            .zip(b)
            .filter(|(x, _)| **x > 0.0)
            .map(|(x, y)| (y / x - 1.0) * 100.0)
            .collect()
    }

    /// A median with its interval.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Estimate {
        pub median: f64,
        pub low: f64,
        pub high: f64,
        pub coverage: f64,
    }

    pub fn estimate(xs: &[f64]) -> Estimate {
        let (low, high, coverage) = median_ci(xs, 0.95);
        Estimate {
            median: median(xs),
            low,
            high,
            coverage,
        }
    }

    /// Fisher-Yates shuffle driven by a seeded SplitMix64: the same seed, the same order.
    pub fn shuffle<T>(items: &mut [T], seed: u64) {
        let mut rng = crate::sim::rng::SplitMix64::new(seed);
        for i in (1..items.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct CalibrateArgs {
    /// A short run for tests: 2 repetitions of 300 ms windows, 2 short toggle pairs.
    #[arg(long)]
    pub quick: bool,
    /// Write the profile here (TOML) [default: print it].
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Repetitions of every cell [default: 10; --quick: 2].
    #[arg(long)]
    pub reps: Option<u32>,
    /// Measured window of each run, ms [default: 1000; --quick: 300].
    #[arg(long)]
    pub runtime_ms: Option<u64>,
    /// Schedulers to measure (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,mq-deadline,bfq,kyber"
    )]
    pub schedulers: Vec<String>,
    /// The CPU fio is pinned to [default: the last one].
    #[arg(long)]
    pub cpu: Option<usize>,
    /// A tmpfs directory for the scratch loop device's backing file.
    #[arg(long, default_value = "/dev/shm")]
    pub tmpfs_dir: PathBuf,
    /// Size of the backing file, MiB.
    #[arg(long, default_value_t = 512)]
    pub size_mib: u64,
    /// Seed of the interleaving order.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Skip the toggle-freeze measurement.
    #[arg(long)]
    pub no_toggle: bool,
    /// Toggle measurement: pairs of (toggled, untoggled) runs [default: 5; --quick: 2].
    #[arg(long)]
    pub toggle_reps: Option<u32>,
    /// Toggle measurement: length of each run, s [default: 20; --quick: 2].
    #[arg(long)]
    pub toggle_runtime_s: Option<f64>,
    /// Toggle measurement: one nomerges write every this many ms [default: 1000; --quick: 250].
    #[arg(long)]
    pub toggle_interval_ms: Option<u64>,
    /// Toggle measurement: the scheduler.
    #[arg(long, default_value = "mq-deadline")]
    pub toggle_scheduler: String,
    /// Name written into the profile.
    #[arg(long, default_value = crate::logic::cost_profile::MEASURED_NAME)]
    pub name: String,
}

/// Queue depth of every measured job (the 2008 figure's QD32).
const IODEPTH: u32 = 32;
const BACKING_PREFIX: &str = "mergetune-calibrate-";
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// fio runs this long before the window opens (after its first I/O is seen).
const RAMP_MS: u64 = 200;

// ---------------------------------------------------------------- the scratch loop device

/// A loop device this process attached over its own tmpfs file; detached and the file
/// removed on drop.
struct ScratchLoop {
    dev: PathBuf,
    name: String,
    dir: PathBuf,
    direct_io: bool,
}

fn run_cmd(cmd: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {cmd}"))?;
    if !out.status.success() {
        bail!(
            "{cmd} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn is_tmpfs(dir: &Path) -> Result<bool> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    // SAFETY: statfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        bail!(
            "statfs {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(st.f_type as i64 == TMPFS_MAGIC)
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Detaches loop devices left by a calibrate run that was killed (its backing file is
/// ours by name, and its process is gone); returns their names.
fn detach_leftovers(tmpfs_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/sys/block") else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let Ok(back) = std::fs::read_to_string(e.path().join("loop/backing_file")) else {
            continue;
        };
        let back = PathBuf::from(back.trim().trim_end_matches(" (deleted)"));
        let Some(parent) = back.parent() else {
            continue;
        };
        let Some(dname) = parent.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        let Some(pid) = dname
            .strip_prefix(BACKING_PREFIX)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if parent.parent() != Some(tmpfs_dir) || pid_alive(pid) {
            continue;
        }
        let dev = format!("/dev/{name}");
        if run_cmd("losetup", &["-d", &dev]).is_ok() {
            let _ = std::fs::remove_dir_all(parent);
            out.push(name);
        }
    }
    out
}

impl ScratchLoop {
    fn create(tmpfs_dir: &Path, size_mib: u64) -> Result<ScratchLoop> {
        if !is_tmpfs(tmpfs_dir)? {
            bail!(
                "{} is not a tmpfs: the measurement must not wait for a device (--tmpfs-dir)",
                tmpfs_dir.display()
            );
        }
        let dir = tmpfs_dir.join(format!("{BACKING_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        let file = dir.join("backing");
        let f = std::fs::File::create(&file).with_context(|| format!("{}", file.display()))?;
        // Real pages, not holes: reads of a hole would not copy anything.
        use std::os::fd::AsRawFd;
        let len = (size_mib * 1024 * 1024) as libc::off_t;
        // SAFETY: fallocate on a file descriptor we own.
        if unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len) } != 0 {
            let e = std::io::Error::last_os_error();
            let _ = std::fs::remove_dir_all(&dir);
            bail!("fallocate {}: {e}", file.display());
        }
        drop(f);
        let fstr = file.to_string_lossy().into_owned();
        let dev = match run_cmd("losetup", &["-f", "--show", "--direct-io=on", &fstr]) {
            Ok(d) => d,
            // Direct I/O refused on this tmpfs: a buffered loop, said in the profile.
            Err(_) => match run_cmd("losetup", &["-f", "--show", &fstr]) {
                Ok(d) => d,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(e);
                }
            },
        };
        let dev = PathBuf::from(dev);
        let name = dev
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut lp = ScratchLoop {
            dev,
            name,
            dir,
            direct_io: false,
        };
        if !lp.name.starts_with("loop") {
            bail!("losetup printed {}, not a loop device", lp.dev.display());
        }
        let back = lp.sys("loop/backing_file")?;
        if back.trim() != fstr {
            bail!(
                "{}: backing file is {back:?}, not ours ({fstr}): refusing to use it",
                lp.name
            );
        }
        lp.direct_io = lp.sys("loop/dio")?.trim() == "1";
        Ok(lp)
    }

    fn sys_path(&self, rel: &str) -> PathBuf {
        Path::new("/sys/block").join(&self.name).join(rel)
    }

    fn sys(&self, rel: &str) -> Result<String> {
        let p = self.sys_path(rel);
        std::fs::read_to_string(&p).with_context(|| format!("read {}", p.display()))
    }

    fn set(&self, rel: &str, value: &str) -> Result<()> {
        let p = self.sys_path(rel);
        std::fs::write(&p, value).with_context(|| format!("write {value} to {}", p.display()))
    }

    fn set_scheduler(&self, s: Scheduler) -> Result<()> {
        self.set("queue/scheduler", s.name())?;
        let now = self.sys("queue/scheduler")?;
        if !now.contains(&format!("[{}]", s.name())) {
            bail!("{}: scheduler {} did not take: {now}", self.name, s.name());
        }
        Ok(())
    }

    fn set_level(&self, s: Scheduler, l: Level) -> Result<()> {
        if s == Scheduler::MqDeadline {
            self.set("queue/iosched/front_merges", &l.front_merges().to_string())?;
        }
        self.set("queue/nomerges", &l.nomerges().to_string())
    }

    /// Reads completed, reads merged (the jobs only read).
    fn read_counts(&self) -> Result<(u64, u64)> {
        let s = self.sys("stat")?;
        let f: Vec<u64> = s
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        if f.len() < 2 {
            bail!("{}: short stat line {s:?}", self.name);
        }
        Ok((f[0], f[1]))
    }
}

impl Drop for ScratchLoop {
    fn drop(&mut self) {
        let dev = self.dev.to_string_lossy().into_owned();
        if let Err(e) = run_cmd("losetup", &["-d", &dev]) {
            eprintln!("mergetune calibrate: cannot detach {dev}: {e:#}");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------- CPU time

/// Sum of the first field of `/proc/PID/task/*/schedstat`: ns on CPU of all its threads.
fn task_runtime_ns(pid: u32) -> u64 {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    rd.flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// ns on CPU of every kworker thread (children of kthreadd named kworker/*).
fn kworker_runtime_ns() -> u64 {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut sum = 0;
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // comm is in parentheses and may contain spaces; the fields after it are plain.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 1..].split_whitespace().nth(1);
        if !comm.starts_with("kworker") || ppid != Some("2") {
            continue;
        }
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
            && let Some(v) = s
                .split_whitespace()
                .next()
                .and_then(|x| x.parse::<u64>().ok())
        {
            sum += v;
        }
    }
    sum
}

/// Whole-machine busy time (user+nice+system+irq+softirq) from `/proc/stat`, ns.
fn system_busy_ns() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(line) = s.lines().next() else {
        return 0;
    };
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // USER_HZ is 100 on every Linux ABI.
    let ticks = f.first().copied().unwrap_or(0)
        + f.get(1).copied().unwrap_or(0)
        + f.get(2).copied().unwrap_or(0)
        + f.get(5).copied().unwrap_or(0)
        + f.get(6).copied().unwrap_or(0);
    ticks * 10_000_000
}

fn loadavg_1m() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

#[derive(Debug, Clone, Copy)]
struct Snapshot {
    at: Instant,
    reads: u64,
    merged: u64,
    fio_ns: u64,
    kworker_ns: u64,
    system_ns: u64,
}

fn snapshot(lp: &ScratchLoop, fio_pid: u32) -> Result<Snapshot> {
    let (reads, merged) = lp.read_counts()?;
    Ok(Snapshot {
        at: Instant::now(),
        reads,
        merged,
        fio_ns: task_runtime_ns(fio_pid),
        kworker_ns: kworker_runtime_ns(),
        system_ns: system_busy_ns(),
    })
}

// ---------------------------------------------------------------- one fio run

/// What one measured run gave, over its window.
#[derive(Debug, Clone, Copy)]
struct RunSample {
    bios: u64,
    merged: u64,
    window_ns: u64,
    cpu_ns: u64,
    /// fio's threads alone: the submission path, where the merge lookups run.
    submitter_ns: u64,
    system_ns: u64,
    p99_us: f64,
}

impl RunSample {
    fn cpu_per_io(&self) -> f64 {
        self.cpu_ns as f64 / self.bios.max(1) as f64
    }
    fn submitter_per_io(&self) -> f64 {
        self.submitter_ns as f64 / self.bios.max(1) as f64
    }
    fn system_per_io(&self) -> f64 {
        self.system_ns as f64 / self.bios.max(1) as f64
    }
    fn iops(&self) -> f64 {
        self.bios as f64 / (self.window_ns as f64 / 1e9)
    }
    fn merged_percent(&self) -> f64 {
        self.merged as f64 / self.bios.max(1) as f64 * 100.0
    }
}

struct FioJob<'a> {
    dev: &'a Path,
    workload: Workload,
    cpu: usize,
    runtime_ms: u64,
    json: PathBuf,
}

fn spawn_fio(job: &FioJob) -> Result<Child> {
    let rw = if job.workload.sequential() {
        "read"
    } else {
        "randread"
    };
    let mut args: Vec<String> = vec![
        "-c".into(),
        job.cpu.to_string(),
        "fio".into(),
        "--name=calibrate".into(),
        format!("--filename={}", job.dev.display()),
        "--direct=1".into(),
        format!("--rw={rw}"),
        "--bs=4k".into(),
        "--ioengine=libaio".into(),
        format!("--iodepth={IODEPTH}"),
        "--norandommap".into(),
        "--randrepeat=1".into(),
        "--thread".into(),
        "--time_based".into(),
        format!("--ramp_time={RAMP_MS}ms"),
        format!("--runtime={}ms", job.runtime_ms),
        "--output-format=json".into(),
        format!("--output={}", job.json.display()),
    ];
    if job.workload.batched() {
        args.push(format!("--iodepth_batch_submit={IODEPTH}"));
        args.push(format!("--iodepth_batch_complete_min={IODEPTH}"));
    }
    Command::new("taskset")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run taskset fio (apt-get install fio util-linux)")
}

/// (p99, max, iops) of the read side of fio's JSON, µs.
fn parse_fio_json(text: &str) -> Result<(f64, f64, f64)> {
    // fio may print notes before the JSON document.
    let start = text.find('{').context("no JSON in fio output")?;
    let v: serde_json::Value = serde_json::from_str(&text[start..]).context("fio JSON")?;
    let read = &v["jobs"][0]["read"];
    let clat = &read["clat_ns"];
    let p99 = clat["percentile"]["99.000000"]
        .as_f64()
        .context("fio JSON: no clat p99")?;
    let max = clat["max"].as_f64().unwrap_or(0.0);
    let iops = read["iops"].as_f64().unwrap_or(0.0);
    Ok((p99 / 1000.0, max / 1000.0, iops))
}

fn wait_fio(mut child: Child, json: &Path) -> Result<(f64, f64, f64)> {
    let status = child.wait().context("waiting for fio")?;
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        bail!("fio failed ({status}): {}", err.trim());
    }
    let text = std::fs::read_to_string(json).with_context(|| format!("{}", json.display()))?;
    parse_fio_json(&text)
}

/// Waits until the device has seen I/O from fio (or fio ended).
fn wait_for_io(lp: &ScratchLoop, child: &mut Child, before: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if lp.read_counts()?.0 > before {
            return Ok(());
        }
        if let Some(st) = child.try_wait()? {
            bail!("fio exited ({st}) before doing any I/O");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("fio did no I/O on {} within 10 s", lp.dev.display());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A window closes once it is `window_ms` long and has counted this many bios: on the
/// shared machine fio can be starved for a few hundred ms.
const MIN_WINDOW_BIOS: u64 = 2000;
/// ... or fails when it has not within this much more.
const MAX_WINDOW_EXTRA_MS: u64 = 10_000;

fn measure_run(
    lp: &ScratchLoop,
    workload: Workload,
    cpu: usize,
    window_ms: u64,
    json: &Path,
) -> Result<RunSample> {
    let before = lp.read_counts()?.0;
    let job = FioJob {
        dev: &lp.dev,
        workload,
        cpu,
        // An upper bound: fio is stopped (SIGINT, after which it still writes its JSON)
        // as soon as the window closes.
        runtime_ms: window_ms + MAX_WINDOW_EXTRA_MS + 5_000,
        json: json.to_path_buf(),
    };
    let mut child = spawn_fio(&job)?;
    let pid = child.id();
    let measured = (|| -> Result<(Snapshot, Snapshot)> {
        wait_for_io(lp, &mut child, before)?;
        std::thread::sleep(Duration::from_millis(RAMP_MS));
        let a = snapshot(lp, pid)?;
        std::thread::sleep(Duration::from_millis(window_ms));
        let deadline = a.at + Duration::from_millis(window_ms + MAX_WINDOW_EXTRA_MS);
        loop {
            let (r, m) = lp.read_counts()?;
            if (r + m) - (a.reads + a.merged) >= MIN_WINDOW_BIOS {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "fewer than {MIN_WINDOW_BIOS} bios in {} ms",
                    window_ms + MAX_WINDOW_EXTRA_MS
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let b = snapshot(lp, pid)?;
        if let Some(st) = child.try_wait()? {
            bail!("fio ended ({st}) before the measured window closed");
        }
        Ok((a, b))
    })();
    // SAFETY: kill on the pid of our own child, which has not been reaped yet.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
    let status = child.wait().context("waiting for fio")?;
    let (a, b) = measured?;
    let text = std::fs::read_to_string(json).unwrap_or_default();
    let (p99_us, _, _) = parse_fio_json(&text).with_context(|| format!("fio ({status})"))?;
    let bios = (b.reads - a.reads) + (b.merged - a.merged);
    Ok(RunSample {
        bios,
        merged: b.merged - a.merged,
        window_ns: b.at.duration_since(a.at).as_nanos() as u64,
        cpu_ns: (b.fio_ns - a.fio_ns) + b.kworker_ns.saturating_sub(a.kworker_ns),
        submitter_ns: b.fio_ns - a.fio_ns,
        system_ns: b.system_ns.saturating_sub(a.system_ns),
        p99_us,
    })
}

// ---------------------------------------------------------------- the toggle freeze

struct ToggleSample {
    p99_us: f64,
    max_us: f64,
    iops: f64,
    write_us: Vec<f64>,
}

/// One run of `runtime_s` under random 4 KiB reads at QD32; with `toggle`, a write of
/// `queue/nomerges` every `interval_ms`. The value written is the one already there: the
/// kernel freezes the queue on every write, changed or not (measured: 250 µs either way),
/// so the toggled run differs from the other by the freezes alone, not by a level.
fn toggle_run(
    lp: &ScratchLoop,
    cpu: usize,
    runtime_s: f64,
    interval_ms: u64,
    toggle: bool,
    json: &Path,
) -> Result<ToggleSample> {
    let job = FioJob {
        dev: &lp.dev,
        workload: Workload::RandomUnbatched,
        cpu,
        runtime_ms: (runtime_s * 1000.0) as u64,
        json: json.to_path_buf(),
    };
    let before = lp.read_counts()?.0;
    let mut child = spawn_fio(&job)?;
    wait_for_io(lp, &mut child, before)?;
    let mut write_us = Vec::new();
    if toggle {
        let path = lp.sys_path("queue/nomerges");
        let value = lp.sys("queue/nomerges")?.trim().to_string();
        let mut next = Instant::now() + Duration::from_millis(interval_ms);
        while child.try_wait()?.is_none() {
            let now = Instant::now();
            if now < next {
                std::thread::sleep((next - now).min(Duration::from_millis(20)));
                continue;
            }
            let t = Instant::now();
            std::fs::write(&path, &value)
                .with_context(|| format!("write {value} to {}", path.display()))?;
            write_us.push(t.elapsed().as_nanos() as f64 / 1000.0);
            next += Duration::from_millis(interval_ms);
        }
    }
    let (p99_us, max_us, iops) = wait_fio(child, json)?;
    Ok(ToggleSample {
        p99_us,
        max_us,
        iops,
        write_us,
    })
}

// ---------------------------------------------------------------- the whole calibration

fn utc_now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

fn check_tools() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("calibrate needs root (it attaches a scratch loop device)");
    }
    for (tool, arg) in [
        ("fio", "--version"),
        ("taskset", "--version"),
        ("losetup", "--version"),
    ] {
        let ok = Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            bail!("{tool} not found (apt-get install fio util-linux)");
        }
    }
    Ok(())
}

/// Samples of one cell over the repetitions, in repetition order.
type Samples = std::collections::BTreeMap<(Scheduler, Level, Workload), Vec<RunSample>>;

fn summarize_cells(samples: &Samples) -> Vec<Cell> {
    let mut cells = Vec::new();
    for (&(s, l, w), runs) in samples {
        let cpu: Vec<f64> = runs.iter().map(RunSample::cpu_per_io).collect();
        let e = stats::estimate(&cpu);
        let sub: Vec<f64> = runs.iter().map(RunSample::submitter_per_io).collect();
        let se = stats::estimate(&sub);
        let change = |f: fn(&RunSample) -> f64, mine: &[f64]| {
            if l == Level::L0 {
                return (None, None);
            }
            let base: Vec<f64> = samples
                .get(&(s, Level::L0, w))
                .map(|r| r.iter().map(f).collect())
                .unwrap_or_default();
            let de = stats::estimate(&stats::paired_change_percent(&base, mine));
            (Some(de.median), Some([de.low, de.high]))
        };
        let (change_percent, change_ci) = change(RunSample::cpu_per_io, &cpu);
        let (submitter_change_percent, submitter_change_ci) =
            change(RunSample::submitter_per_io, &sub);
        let med = |f: fn(&RunSample) -> f64| stats::median(&runs.iter().map(f).collect::<Vec<_>>());
        cells.push(Cell {
            scheduler: s,
            level: l,
            workload: w,
            cpu_per_io: e.median,
            cpu_per_io_ci: Some([e.low, e.high]),
            system_cpu_per_io: Some(med(RunSample::system_per_io)),
            iops: Some(med(RunSample::iops)),
            p99_us: Some(med(|r| r.p99_us)),
            merged_percent: med(RunSample::merged_percent).clamp(0.0, 100.0),
            change_percent,
            change_ci,
            submitter_cpu_per_io: Some(se.median),
            submitter_cpu_per_io_ci: Some([se.low, se.high]),
            submitter_change_percent,
            submitter_change_ci,
        });
    }
    cells
}

fn summarize_toggle(
    scheduler: Scheduler,
    interval_ms: u64,
    runtime_s: f64,
    with: &[ToggleSample],
    without: &[ToggleSample],
) -> ToggleCost {
    let col = |v: &[ToggleSample], f: fn(&ToggleSample) -> f64| v.iter().map(f).collect::<Vec<_>>();
    let change = |f: fn(&ToggleSample) -> f64| {
        stats::estimate(&stats::paired_change_percent(
            &col(without, f),
            &col(with, f),
        ))
    };
    let writes: Vec<f64> = with
        .iter()
        .flat_map(|t| t.write_us.iter().copied())
        .collect();
    let p99 = change(|t| t.p99_us);
    let max = change(|t| t.max_us);
    let iops = change(|t| t.iops);
    ToggleCost {
        scheduler,
        interval_ms,
        runtime_s,
        reps: with.len() as u32,
        write_us_median: stats::median(&writes),
        write_us_max: writes.iter().copied().fold(0.0, f64::max),
        p99_us_without: stats::median(&col(without, |t| t.p99_us)),
        p99_us_with: stats::median(&col(with, |t| t.p99_us)),
        p99_change_percent: p99.median,
        p99_change_ci: [p99.low, p99.high],
        max_us_without: stats::median(&col(without, |t| t.max_us)),
        max_us_with: stats::median(&col(with, |t| t.max_us)),
        max_change_percent: max.median,
        max_change_ci: [max.low, max.high],
        iops_change_percent: iops.median,
        iops_change_ci: [iops.low, iops.high],
    }
}

fn parse_schedulers(names: &[String]) -> Result<Vec<Scheduler>> {
    let mut out = Vec::new();
    for n in names {
        let s = Scheduler::from_name(n.trim())
            .with_context(|| format!("--schedulers: unknown scheduler {n:?}"))?;
        if !out.contains(&s) {
            out.push(s);
        }
    }
    if out.is_empty() {
        bail!("--schedulers: at least one");
    }
    Ok(out)
}

/// `mergetune calibrate`.
pub fn run(args: CalibrateArgs) -> Result<i32> {
    check_tools()?;
    let schedulers = parse_schedulers(&args.schedulers)?;
    let toggle_sched = Scheduler::from_name(&args.toggle_scheduler)
        .with_context(|| format!("--toggle-scheduler {:?}", args.toggle_scheduler))?;
    let reps = args.reps.unwrap_or(if args.quick { 2 } else { 10 });
    let window_ms = args
        .runtime_ms
        .unwrap_or(if args.quick { 300 } else { 1000 });
    let toggle_reps = args.toggle_reps.unwrap_or(if args.quick { 2 } else { 5 });
    let toggle_runtime_s = args
        .toggle_runtime_s
        .unwrap_or(if args.quick { 2.0 } else { 20.0 });
    let toggle_interval_ms = args
        .toggle_interval_ms
        .unwrap_or(if args.quick { 250 } else { 1000 });
    if reps == 0 || window_ms < 50 || toggle_reps == 0 || toggle_interval_ms == 0 {
        bail!("--reps, --toggle-reps and --toggle-interval-ms must be >= 1, --runtime-ms >= 50");
    }
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let cpu = args.cpu.unwrap_or(ncpu - 1);

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("signal handler")?;
    }
    for name in detach_leftovers(&args.tmpfs_dir) {
        eprintln!("calibrate: detached {name}, left by an earlier calibrate that was killed");
    }
    let started = Instant::now();
    let measured_at = utc_now_rfc3339();
    let load_start = loadavg_1m();
    let lp = ScratchLoop::create(&args.tmpfs_dir, args.size_mib)?;
    let json = lp.dir.join("fio.json");
    eprintln!(
        "calibrate: {} over a {} MiB tmpfs file (loop direct I/O {}), fio on CPU {cpu}, {reps} reps of {window_ms} ms windows",
        lp.dev.display(),
        args.size_mib,
        if lp.direct_io { "on" } else { "off: buffered" }
    );
    // The first heavy run on a new loop device can be a cold outlier.
    measure_run(&lp, Workload::RandomUnbatched, cpu, window_ms, &json)?;

    let mut samples: Samples = Samples::new();
    for rep in 0..reps {
        let mut order = schedulers.clone();
        let n = order.len();
        order.rotate_left(rep as usize % n);
        for (si, &s) in order.iter().enumerate() {
            lp.set_scheduler(s)?;
            let mut cells: Vec<(Level, Workload)> = s
                .levels()
                .iter()
                .flat_map(|&l| Workload::ALL.into_iter().map(move |w| (l, w)))
                .collect();
            stats::shuffle(&mut cells, args.seed ^ ((rep as u64) << 32) ^ si as u64);
            for (l, w) in cells {
                if stop.load(Ordering::Relaxed) {
                    bail!("interrupted");
                }
                lp.set_level(s, l)?;
                // A run starved past its deadline by other tenants is tried again, twice.
                let mut r = measure_run(&lp, w, cpu, window_ms, &json);
                for _ in 0..2 {
                    if let Err(e) = &r {
                        eprintln!("calibrate: {s} {l} {w}: {e:#}; again");
                        r = measure_run(&lp, w, cpu, window_ms, &json);
                    }
                }
                let r = r.with_context(|| format!("{s} {l} {w}"))?;
                samples.entry((s, l, w)).or_default().push(r);
            }
            lp.set_level(s, Level::L0)?;
        }
        eprintln!(
            "calibrate: rep {}/{reps} done ({:.0} s)",
            rep + 1,
            started.elapsed().as_secs_f64()
        );
    }

    let toggle = if args.no_toggle {
        None
    } else {
        lp.set_scheduler(toggle_sched)?;
        lp.set_level(toggle_sched, Level::L0)?;
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for rep in 0..toggle_reps {
            // ABBA order: neither arm always runs first.
            let arms = if rep % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for t in arms {
                if stop.load(Ordering::Relaxed) {
                    bail!("interrupted");
                }
                let r = toggle_run(&lp, cpu, toggle_runtime_s, toggle_interval_ms, t, &json)?;
                if t { with.push(r) } else { without.push(r) }
            }
        }
        eprintln!(
            "calibrate: toggle runs done ({:.0} s)",
            started.elapsed().as_secs_f64()
        );
        Some(summarize_toggle(
            toggle_sched,
            toggle_interval_ms,
            toggle_runtime_s,
            &with,
            &without,
        ))
    };

    let cells = summarize_cells(&samples);
    let coverage = stats::median_ci(&vec![0.0; reps as usize], 0.95).2 * 100.0;
    let noise: Vec<f64> = cells
        .iter()
        .filter_map(|c| {
            let [lo, hi] = c.cpu_per_io_ci?;
            Some((hi - lo) / 2.0 / c.cpu_per_io * 100.0)
        })
        .collect();
    let command = std::iter::once("mergetune".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let profile = CostProfile {
        name: args.name.clone(),
        description: format!(
            "CPU per I/O measured by mergetune calibrate on a scratch loop device over a tmpfs \
             file (loop direct I/O {}), fio 4 KiB reads at QD{IODEPTH} with libaio pinned to one CPU",
            if lp.direct_io { "on" } else { "off" }
        ),
        method: Method::CpuBoundLoop,
        unit: Unit::Ns,
        kernel_release: run_cmd("uname", &["-r"]).unwrap_or_default(),
        schedulers: schedulers.clone(),
        cpu_measure: "schedstat ns of fio's threads + all kworkers over the window, per bio \
                      (completed + merged from the loop device's stat)"
            .into(),
        command,
        measured_at,
        duration_s: started.elapsed().as_secs_f64().round(),
        reps,
        runtime_ms: window_ms,
        ci_coverage_percent: (coverage * 10.0).round() / 10.0,
        noise_percent: (stats::median(&noise) * 100.0).round() / 100.0,
        loadavg: vec![load_start, loadavg_1m()],
        loop_direct_io: lp.direct_io,
        cells,
        toggle,
    };
    drop(lp);
    profile
        .validate()
        .context("the measured profile does not validate")?;
    let text = format!(
        "# Written by `{}` on {} ({} s).\n{}",
        profile.command,
        profile.measured_at,
        profile.duration_s,
        profile.to_toml_string()
    );
    match &args.output {
        Some(p) => {
            std::fs::write(p, &text).with_context(|| format!("write {}", p.display()))?;
            eprintln!("calibrate: wrote {}", p.display());
        }
        None => print!("{text}"),
    }
    eprint!("{}", profile.render());
    Ok(0)
}
