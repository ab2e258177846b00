//! One fio run: the job (4 KiB reads at QD32, libaio, pinned to one CPU, batched or not),
//! the measured window between two snapshots once fio's I/O is seen and ramped, and the
//! toggle runs that write `queue/nomerges` under load. The counts come from the loop
//! device's stat file, never from fio's own figures.

use super::scratch::ScratchLoop;
use anyhow::{Context, Result, bail};
use mergetune_kernel::cputime;
use mergetune_kernel::roots::PROCFS;
use mergetune_logic::pricing::profile::Workload;
use rustix::process::{Pid, Signal, kill_process};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Queue depth of every measured job (the 2008 figure's QD32).
pub(super) const IODEPTH: u32 = 32;
/// fio runs this long before the window opens (after its first I/O is seen).
const RAMP_MS: u64 = 200;

/// The counters and CPU times at one moment, read at once: the loop device's reads and
/// merges, the ns on CPU of fio's threads and of every kworker, and whole-machine busy time
/// (recorded but not used: the machine is shared). A window is the difference of two.
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    at: Instant,
    reads: u64,
    merged: u64,
    fio_ns: u64,
    kworker_ns: u64,
    system_ns: u64,
}

/// A [`Snapshot`] now, of the scratch device and fio's process (calibrate runs on the real
/// machine only: the machine's procfs).
fn snapshot(lp: &ScratchLoop, fio_pid: u32) -> Result<Snapshot> {
    let (reads, merged) = lp.read_counts()?;
    let proc = Path::new(PROCFS);
    Ok(Snapshot {
        at: Instant::now(),
        reads,
        merged,
        fio_ns: cputime::task_runtime_ns(proc, fio_pid)?,
        kworker_ns: cputime::kworker_runtime_ns(proc)?,
        system_ns: cputime::system_busy_ns(proc)?,
    })
}

/// What one measured run gave: the counters and CPU times at the two ends of its window,
/// and fio's p99 latency; every figure is their difference.
#[derive(Debug, Clone, Copy)]
pub(super) struct RunSample {
    start: Snapshot,
    end: Snapshot,
    pub(super) p99_us: f64,
}

impl RunSample {
    fn bios(&self) -> u64 {
        (self.end.reads - self.start.reads) + self.merged()
    }
    fn merged(&self) -> u64 {
        self.end.merged - self.start.merged
    }
    /// fio's threads alone: the submission path, where the merge lookups run.
    fn submitter_ns(&self) -> u64 {
        self.end.fio_ns - self.start.fio_ns
    }
    /// fio's threads and every kworker (completions).
    fn cpu_ns(&self) -> u64 {
        self.submitter_ns() + self.end.kworker_ns.saturating_sub(self.start.kworker_ns)
    }
    fn per_io(&self, ns: u64) -> f64 {
        ns as f64 / self.bios().max(1) as f64
    }
    pub(super) fn cpu_per_io(&self) -> f64 {
        self.per_io(self.cpu_ns())
    }
    pub(super) fn submitter_per_io(&self) -> f64 {
        self.per_io(self.submitter_ns())
    }
    pub(super) fn system_per_io(&self) -> f64 {
        self.per_io(self.end.system_ns.saturating_sub(self.start.system_ns))
    }
    pub(super) fn iops(&self) -> f64 {
        let window_ns = self.end.at.duration_since(self.start.at).as_nanos() as u64;
        self.bios() as f64 / (window_ns as f64 / 1e9)
    }
    pub(super) fn merged_percent(&self) -> f64 {
        self.merged() as f64 / self.bios().max(1) as f64 * 100.0
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

pub(super) fn measure_run(
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
    // Our own child, not reaped yet: the pid is still its own. An error (it has exited
    // already) shows in the wait below.
    let _ = kill_process(Pid::from_child(&child), Signal::INT);
    let status = child.wait().context("waiting for fio")?;
    let (a, b) = measured?;
    let text = std::fs::read_to_string(json).unwrap_or_default();
    let (p99_us, _, _) = parse_fio_json(&text).with_context(|| format!("fio ({status})"))?;
    Ok(RunSample {
        start: a,
        end: b,
        p99_us,
    })
}

// ---------------------------------------------------------------- the toggle freeze

pub(super) struct ToggleSample {
    pub(super) p99_us: f64,
    pub(super) max_us: f64,
    pub(super) iops: f64,
    pub(super) write_us: Vec<f64>,
}

/// One run of `runtime_s` under random 4 KiB reads at QD32; with `toggle`, a write of
/// `queue/nomerges` every `interval_ms`. The value written is the one already there: the
/// kernel freezes the queue on every write, changed or not (measured: 250 µs either way),
/// so the toggled run differs from the other by the freezes alone, not by a level.
pub(super) fn toggle_run(
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
