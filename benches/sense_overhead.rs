//! The bio tap's CPU cost, measured: `sudo cargo bench --bench sense_overhead` (root: it
//! creates a loop device over a file in /dev/shm and a tracefs instance; both removed at
//! the end, also on failure).
//!
//! fio writes random 4 KiB blocks at a fixed rate (`--rate_iops`, QD32, libaio) to the loop
//! device at nomerges=2 for the whole run. Meanwhile this process runs the daemon's own
//! sensing code ([`DeviceSense::tick`] over [`RealFs`], every 100 ms like the L3 watch) in
//! segments of SEGMENT_MS, one mode per segment, the modes of a repetition in a rotated
//! order: `off` (the tap never opens), `duty` (the daemon's tap with the default
//! `[sense]`: 100 ms every 2 s, at most 512 bios read per sample from the ring buffer's
//! binary pages, the tracefs instance paused between samples), `reopen` (the same, the
//! instance created and removed for each sample), `text` (the same duty cycle as the tap
//! was before either change: `trace_pipe` text, an instance per sample) and `open` (the
//! daemon's tap open the whole segment: the cost per bio while tapping, with more signal). CPU = the on-CPU time (schedstat, ns) of every fio thread (where the tracepoint,
//! its filter and the ring-buffer write run, in the submitter's context) plus every thread
//! of this process (trace_pipe formatting in the kernel, parsing here), per bio completed
//! (the loop device's stat). The cost of a mode is the per-repetition paired difference to
//! `off`, reported as a median with a distribution-free 95% interval.
//!
//! Environment: SENSE_BENCH_REPS (default 8), SENSE_BENCH_RATE_IOPS (default 20000),
//! SENSE_BENCH_MODES (a comma-separated subset of the modes; default all).

#[path = "../tests/support/kernel.rs"]
mod kernel;
#[path = "../tests/support/needs.rs"]
mod needs;

use mergetune_daemon::sense::DeviceSense;
use mergetune_kernel::biosense::{TapBatch, TapDrain, TapError, TapParams, TapRead};
use mergetune_kernel::blockfs::{BioTap, RealFs};
use mergetune_kernel::cputime;
use mergetune_lab::calibrate::stats;
use mergetune_logic::sense::SenseConfig;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Five duty cycles of the default config with 100 ms ticks (each sample closes at 100 ms,
/// the next opens 1,900 ms later): the `duty` segment is open 1/20 of the time.
const SEGMENT_MS: u64 = 10_000;
const TICK_MS: u64 = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    Duty,
    Reopen,
    Text,
    Open,
}

const MODES: [Mode; 5] = [Mode::Off, Mode::Duty, Mode::Reopen, Mode::Text, Mode::Open];

/// The real machine with the tap of an earlier design: `pause: false` closes where the
/// daemon pauses (every sample creates and removes its instance), `read` overrides how the
/// ring buffer is read.
struct Earlier<'a> {
    fs: &'a mut RealFs,
    pause: bool,
    read: TapRead,
}

impl BioTap for Earlier<'_> {
    fn tap_available(&mut self, dev: &str) -> Result<(), TapError> {
        self.fs.tap_available(dev)
    }
    fn tap_open(&mut self, dev: &str, params: &TapParams) -> Result<(), TapError> {
        let params = TapParams {
            read: self.read,
            ..*params
        };
        self.fs.tap_open(dev, &params)
    }
    fn tap_drain(&mut self, dev: &str, batch: TapBatch<'_>) -> Result<TapDrain, TapError> {
        self.fs.tap_drain(dev, batch)
    }
    fn tap_pause(&mut self, dev: &str) -> Result<(), TapError> {
        if self.pause {
            self.fs.tap_pause(dev)
        } else {
            self.fs.tap_close(dev)
        }
    }
    fn tap_close(&mut self, dev: &str) -> Result<(), TapError> {
        self.fs.tap_close(dev)
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// User and system CPU ticks of this process (/proc/self/stat fields 14 and 15).
fn own_ticks() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    (
        f.get(11).copied().unwrap_or(0),
        f.get(12).copied().unwrap_or(0),
    )
}

fn cpu_ns(fio: u32) -> (u64, u64) {
    let proc = Path::new(mergetune_kernel::roots::PROCFS);
    let f = cputime::family_runtime_ns(proc, fio).expect("fio's CPU time");
    let own = cputime::task_runtime_ns(proc, std::process::id()).expect("own CPU time");
    (f, own)
}

struct Fio(Child);

impl Drop for Fio {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Segment {
    mode: Mode,
    bios: u64,
    fio_ns: u64,
    own_ns: u64,
    wall_ms: u64,
    samples: u64,
    /// This process's user and system CPU ticks (10 ms) in the segment.
    own_user_ticks: u64,
    own_sys_ticks: u64,
}

impl Segment {
    fn ns_per_bio(&self) -> f64 {
        (self.fio_ns + self.own_ns) as f64 / self.bios.max(1) as f64
    }
    fn cpu_ms_per_s(&self) -> f64 {
        (self.fio_ns + self.own_ns) as f64 / 1e6 / (self.wall_ms as f64 / 1000.0)
    }
}

fn segment(mode: Mode, dev: &kernel::LoopDevice, fs: &mut RealFs, fio: u32) -> Segment {
    let cfg = match mode {
        Mode::Off | Mode::Duty | Mode::Reopen | Mode::Text => SenseConfig::default(),
        Mode::Open => SenseConfig {
            open_ms: SEGMENT_MS * 2,
            every_ms: SEGMENT_MS * 2,
            max_sample_bios: usize::MAX,
            ..SenseConfig::default()
        },
    };
    let mut sense = DeviceSense::default();
    let before = dev.stat();
    let (f0, o0) = cpu_ns(fio);
    let (u0, s0) = own_ticks();
    let start = Instant::now();
    let mut now_ms = 0;
    let mut fs = Earlier {
        fs,
        pause: !matches!(mode, Mode::Reopen | Mode::Text),
        read: if mode == Mode::Text {
            TapRead::Text
        } else {
            TapRead::Pages
        },
    };
    let fs: &mut dyn BioTap = &mut fs;
    while now_ms < SEGMENT_MS {
        sense.tick(dev.name(), now_ms, mode != Mode::Off, &cfg, 5.0, fs);
        now_ms += TICK_MS;
        let due = start + Duration::from_millis(now_ms);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    sense.stop(dev.name(), fs);
    let wall_ms = start.elapsed().as_millis() as u64;
    let (f1, o1) = cpu_ns(fio);
    let (u1, s1) = own_ticks();
    let d = dev.stat().delta(&before);
    assert!(
        !matches!(
            sense.availability,
            mergetune_daemon::sense::Availability::Failed { .. }
        ),
        "the tap failed: {:?}",
        sense.availability
    );
    Segment {
        mode,
        bios: d.bios(),
        fio_ns: f1 - f0,
        own_ns: o1 - o0,
        wall_ms,
        samples: sense.samples,
        own_user_ticks: u1 - u0,
        own_sys_ticks: s1 - s0,
    }
}

fn fmt(e: &stats::Estimate) -> String {
    format!("{:+.0} [{:+.0}, {:+.0}]", e.median, e.low, e.high)
}

/// The modes to run: all, or those `SENSE_BENCH_MODES` names (`off,duty`, say: e.g. to
/// profile one under perf).
fn selected_modes() -> Vec<Mode> {
    let modes: Vec<Mode> = match std::env::var("SENSE_BENCH_MODES") {
        Ok(list) => MODES
            .into_iter()
            .filter(|m| {
                list.split(',')
                    .any(|n| n.trim().eq_ignore_ascii_case(&format!("{m:?}")))
            })
            .collect(),
        Err(_) => MODES.to_vec(),
    };
    assert!(
        !modes.is_empty(),
        "SENSE_BENCH_MODES names no mode of {MODES:?}"
    );
    modes
}

/// fio's arguments: random 4 KiB direct writes at `rate` IOPS for `total_s` on `dev`.
fn fio_args(dev: &kernel::LoopDevice, rate: u64, total_s: u64) -> Vec<String> {
    vec![
        "--name=rand".into(),
        format!("--filename={}", dev.dev_str()),
        "--direct=1".into(),
        "--rw=randwrite".into(),
        "--bs=4k".into(),
        "--size=512M".into(),
        "--ioengine=libaio".into(),
        "--iodepth=32".into(),
        "--norandommap".into(),
        "--randrepeat=1".into(),
        format!("--rate_iops={rate}"),
        "--time_based".into(),
        format!("--runtime={total_s}"),
    ]
}

/// One segment's line as it is measured.
fn print_segment(r: usize, s: &Segment) {
    println!(
        "rep {r} {:>4?}: {:>7} bios in {} ms, {} samples, fio {:.1} ms + tap process {:.1} ms CPU (user {} sys {} ticks): {:.0} ns/bio, {:.1} ms CPU/s",
        s.mode,
        s.bios,
        s.wall_ms,
        s.samples,
        s.fio_ns as f64 / 1e6,
        s.own_ns as f64 / 1e6,
        s.own_user_ticks,
        s.own_sys_ticks,
        s.ns_per_bio(),
        s.cpu_ms_per_s()
    );
}

/// Per mode: CPU per bio and per second, and the rate, each a median over the repetitions.
fn report_modes(modes: &[(&str, &Vec<&Segment>)]) {
    for (name, v) in modes {
        let ns: Vec<f64> = v.iter().map(|s| s.ns_per_bio()).collect();
        let cpu: Vec<f64> = v.iter().map(|s| s.cpu_ms_per_s()).collect();
        let rate: Vec<f64> = v
            .iter()
            .map(|s| s.bios as f64 / (s.wall_ms as f64 / 1000.0))
            .collect();
        let (e, c) = (stats::estimate(&ns), stats::estimate(&cpu));
        println!(
            "  {name:>4}: {:.0} ns CPU per bio [{:.0}, {:.0}], {:.1} ms CPU/s [{:.1}, {:.1}], {:.0} bios/s",
            e.median,
            e.low,
            e.high,
            c.median,
            c.low,
            c.high,
            stats::median(&rate)
        );
    }
}

/// Each mode against `off` (and `duty` against the others) in the same repetition: the
/// tap process's own CPU, then all of it.
fn report_paired(off: &[&Segment], duty: &[&Segment], modes: &[(&str, &Vec<&Segment>)]) {
    // The tap process's own CPU: measured cleanly (fio's share is lost in the noise).
    let own_ms_per_s = |s: &Segment| s.own_ns as f64 / 1e6 / (s.wall_ms as f64 / 1000.0);
    for (name, v) in modes {
        let d: Vec<f64> = off
            .iter()
            .zip(v.iter())
            .map(|(a, b)| (own_ms_per_s(b) - own_ms_per_s(a)) * 1000.0)
            .collect();
        let e = stats::estimate(&d);
        println!("  {name} - off, tap process only: {} us CPU per s", fmt(&e));
    }
    for (name, v) in modes.iter().filter(|(n, _)| ["reopen", "text"].contains(n)) {
        let d: Vec<f64> = duty
            .iter()
            .zip(v.iter())
            .map(|(a, b)| (own_ms_per_s(a) - own_ms_per_s(b)) * 1000.0)
            .collect();
        println!(
            "  duty - {name}, tap process only: {} us CPU per s",
            fmt(&stats::estimate(&d))
        );
    }
    for (name, v) in modes {
        let d_ns: Vec<f64> = off
            .iter()
            .zip(v.iter())
            .map(|(a, b)| b.ns_per_bio() - a.ns_per_bio())
            .collect();
        let d_cpu: Vec<f64> = off
            .iter()
            .zip(v.iter())
            .map(|(a, b)| (b.cpu_ms_per_s() - a.cpu_ms_per_s()) * 1000.0)
            .collect();
        let (e, c) = (stats::estimate(&d_ns), stats::estimate(&d_cpu));
        println!(
            "  {name} - off: {} ns CPU per bio, {} us CPU per s (interval coverage {:.1}%)",
            fmt(&e),
            fmt(&c),
            e.coverage * 100.0
        );
    }
}

fn main() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("sense_overhead: needs root (a loop device and a tracefs instance)");
        std::process::exit(1);
    }
    let reps = env_u64("SENSE_BENCH_REPS", 8) as usize;
    let rate = env_u64("SENSE_BENCH_RATE_IOPS", 20_000);
    kernel::ensure_tracefs();
    let dev = kernel::LoopDevice::new(600);
    dev.warm_up();
    dev.set_nomerges(2);
    let modes = selected_modes();
    let total_s = reps as u64 * modes.len() as u64 * SEGMENT_MS / 1000 + 30;
    let args = fio_args(&dev, rate, total_s);
    println!("load: {}", kernel::fio_command_line(&args));
    println!(
        "kernel {}, loop over {}, {} CPUs, load average {}",
        kernel::kernel_release(),
        dev.backing_fs(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let fio = Fio(Command::new("fio")
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("fio"));
    let fio_pid = fio.0.id();
    std::thread::sleep(Duration::from_secs(3));
    let mut fs = mergetune_kernel::roots::KernelRoots::default().fs();
    let mut segs: Vec<Segment> = Vec::new();
    for r in 0..reps {
        for k in 0..modes.len() {
            let mode = modes[(r + k) % modes.len()];
            let s = segment(mode, &dev, &mut fs, fio_pid);
            print_segment(r, &s);
            segs.push(s);
        }
    }
    drop(fio);
    let per = |m: Mode| -> Vec<&Segment> { segs.iter().filter(|s| s.mode == m).collect() };
    let (off, duty, reopen, text, open) = (
        per(Mode::Off),
        per(Mode::Duty),
        per(Mode::Reopen),
        per(Mode::Text),
        per(Mode::Open),
    );
    if modes.len() < MODES.len() {
        println!("(a subset of the modes: the per-segment lines above only)");
        return;
    }
    println!(
        "\n{reps} repetitions of {SEGMENT_MS} ms per mode, paired against `off` in the same repetition"
    );
    report_modes(&[
        ("off", &off),
        ("duty", &duty),
        ("reopen", &reopen),
        ("text", &text),
        ("open", &open),
    ]);
    report_paired(
        &off,
        &duty,
        &[
            ("duty", &duty),
            ("reopen", &reopen),
            ("text", &text),
            ("open", &open),
        ],
    );
}
