//! The real-kernel counterpart of `simulate --compare` (runs only with
//! `MERGETUNE_KERNEL_TESTS=1`, as root; fails when asked for and unable to run).
//!
//! One loop device over tmpfs (direct I/O, mq-deadline), and a phase-changing load: random
//! 4 KiB writes, then sequential 4 KiB writes submitted and reaped in batches, then random
//! again, each phase one fio process pinned to one CPU. Three controllers take turns, in a
//! shuffled order every repetition so that the machine's drift falls on all of them alike:
//! - `default`: the kernel default, nomerges 0, nothing running;
//! - `static2`: nomerges 2 set before the run, nothing running;
//! - `adaptive`: the built `mergetune run` daemon managing only this device, started before
//!   the first phase and stopped (SIGTERM) after the last, its own CPU time counted.
//!
//! Per controller and phase it reports throughput (fio's I/Os per second) and CPU per I/O:
//! on-CPU time of fio's threads, of every kworker (the loop device completes its requests in
//! one) and of the daemon, divided by fio's I/Os. Each is a median over the repetitions with
//! a distribution-free 95% interval (order statistics), and the change against `default` is
//! the median of the paired per-repetition ratios with its interval; an interval that holds
//! 0 is printed as "no measurable difference".
//!
//! The assertions check the mechanics, not the noise: fio and the daemon ran, the device's
//! original nomerges is back after every run, static nomerges=2 merged nothing, and the
//! adaptive daemon kept the sequential phase merging (its merge ratio there is at least half
//! the default's: merging wrongly off, the loss the 2008 thread warned of, shows as ~0).
//! The figures in docs/evaluation.md come from a longer run of the same test:
//!     MERGETUNE_COMPARE_REPS=10 MERGETUNE_COMPARE_PHASE_S=15 MERGETUNE_KERNEL_TESTS=1 \
//!         cargo test --release --test real_kernel_compare -- --nocapture

#[path = "support/kernel.rs"]
mod kernel;

use kernel::LoopDevice;
use mergetune::kernel::cputime;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const IODEPTH: u32 = 32;
const FIO_CPU: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Controller {
    Default,
    Static2,
    Adaptive,
}

impl Controller {
    const ALL: [Controller; 3] = [
        Controller::Default,
        Controller::Static2,
        Controller::Adaptive,
    ];
    fn name(self) -> &'static str {
        match self {
            Controller::Default => "default",
            Controller::Static2 => "static2",
            Controller::Adaptive => "adaptive",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Random,
    Sequential,
    RandomAgain,
}

impl Phase {
    const ALL: [Phase; 3] = [Phase::Random, Phase::Sequential, Phase::RandomAgain];
    fn name(self) -> &'static str {
        match self {
            Phase::Random => "random",
            Phase::Sequential => "sequential batched",
            Phase::RandomAgain => "random again",
        }
    }
}

/// One phase of one run.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    iops: f64,
    cpu_ns_per_io: f64,
    merge_ratio: f64,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn task_runtime_ns(pid: u32) -> u64 {
    cputime::task_runtime_ns(Path::new(cputime::PROCFS), pid)
        .unwrap_or_else(|e| panic!("CPU time of {pid}: {e}"))
}

fn kworker_runtime_ns() -> u64 {
    cputime::kworker_runtime_ns(Path::new(cputime::PROCFS))
        .unwrap_or_else(|e| panic!("kworker CPU time: {e}"))
}

/// fio args of one phase, time-based, pinned by taskset.
fn phase_args(dev: &LoopDevice, phase: Phase, secs: u64, json: &Path) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "-c".into(),
        FIO_CPU.to_string(),
        "fio".into(),
        "--name=phase".into(),
        format!("--filename={}", dev.dev_str()),
        "--direct=1".into(),
        "--bs=4k".into(),
        "--size=256M".into(),
        "--ioengine=libaio".into(),
        format!("--iodepth={IODEPTH}"),
        "--thread".into(),
        "--time_based".into(),
        format!("--runtime={secs}"),
        "--output-format=json".into(),
        format!("--output={}", json.display()),
    ];
    match phase {
        Phase::Random | Phase::RandomAgain => {
            v.extend(["--rw=randwrite", "--norandommap", "--randrepeat=1"].map(String::from))
        }
        Phase::Sequential => v.extend([
            "--rw=write".to_string(),
            format!("--iodepth_batch_submit={IODEPTH}"),
            format!("--iodepth_batch_complete_min={IODEPTH}"),
        ]),
    }
    v
}

fn fio_write_ios(json: &Path) -> (f64, f64) {
    let text = std::fs::read_to_string(json)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", json.display()));
    let start = text.find('{').expect("no JSON in fio output");
    let v: serde_json::Value = serde_json::from_str(&text[start..]).expect("fio JSON");
    let w = &v["jobs"][0]["write"];
    (
        w["total_ios"].as_f64().unwrap_or(0.0),
        w["iops"].as_f64().unwrap_or(0.0),
    )
}

fn run_phase(dev: &LoopDevice, phase: Phase, secs: u64, dir: &Path, daemon: Option<u32>) -> Sample {
    let json = dir.join("fio.json");
    let _ = std::fs::remove_file(&json);
    let before = dev.stat();
    let kw0 = kworker_runtime_ns();
    let d0 = daemon.map(task_runtime_ns).unwrap_or(0);
    let mut child: Child = Command::new("taskset")
        .args(phase_args(dev, phase, secs, &json))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run taskset fio: {e}"));
    let pid = child.id();
    // schedstat of an exited process is gone: sample fio's threads while it runs.
    let mut fio_ns = 0;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        // Between try_wait and this read fio may have exited: its last reading stands.
        if let Ok(ns) = cputime::task_runtime_ns(Path::new(cputime::PROCFS), pid) {
            fio_ns = fio_ns.max(ns);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        panic!("fio ({}) failed ({status}): {err}", phase.name());
    }
    dev.wait_idle();
    let kw = kworker_runtime_ns().saturating_sub(kw0);
    let d = daemon.map(task_runtime_ns).unwrap_or(0).saturating_sub(d0);
    let delta = dev.stat().delta(&before);
    let (ios, iops) = fio_write_ios(&json);
    assert!(ios > 0.0, "fio did no I/O in phase {}", phase.name());
    Sample {
        iops,
        cpu_ns_per_io: (fio_ns + kw + d) as f64 / ios,
        merge_ratio: delta.merged() as f64 / delta.bios().max(1) as f64,
    }
}

fn write_config(dir: &Path, dev: &LoopDevice, state_dir: &Path) -> PathBuf {
    let p = dir.join("mergetune.toml");
    std::fs::write(
        &p,
        format!(
            r#"# Written by tests/real_kernel_compare.rs: the shipped defaults, this device only.
[daemon]
state_dir = "{state}"

[devices]
include = ["{name}"]
exclude = ["vd*", "sd*", "hd*", "nvme*", "xvd*", "mmcblk*", "zram*", "ram*", "dm-*", "md*", "sr*"]

[metrics]
listen = ""
"#,
            state = state_dir.display(),
            name = dev.name()
        ),
    )
    .unwrap();
    p
}

struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn start(config: &Path, state_dir: &Path) -> Daemon {
        let log = config.with_file_name("daemon.log");
        let err = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_mergetune"))
            .arg("run")
            .arg("--config")
            .arg(config)
            .arg("--state-dir")
            .arg(state_dir)
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("cannot start mergetune run");
        Daemon { child, log }
    }
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    fn assert_alive(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("the daemon exited ({st}); its log:\n{}", self.log_text());
        }
    }
    fn stop(&mut self) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(
                    st.success(),
                    "the daemon exited with {st} on SIGTERM; its log:\n{}",
                    self.log_text()
                );
                return;
            }
            assert!(Instant::now() < deadline, "the daemon ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Distribution-free confidence interval of the median: the order statistics whose ranks
/// the binomial(n, 1/2) puts around the middle with at least `level` coverage, and the
/// coverage reached (below `level` when n is too small: 6 samples are needed for 95%).
fn median_ci_coverage(xs: &[f64], level: f64) -> (f64, f64, f64, f64) {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, f64::NAN, 0.0);
    }
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    // P(X < k) for X ~ Bin(n, 1/2); widen [k, n-1-k] until coverage >= level.
    let pmf = |k: usize| -> f64 {
        let mut c = 1.0f64;
        for i in 0..k {
            c = c * (n - i) as f64 / (i + 1) as f64;
        }
        c / 2f64.powi(n as i32)
    };
    let coverage = |k: usize| 1.0 - 2.0 * (0..k).map(pmf).sum::<f64>();
    let mut k = n / 2;
    while k > 0 && coverage(k) < level {
        k -= 1;
    }
    let lo = k.min(n - 1);
    let hi = (n - 1 - k).max(lo);
    (median, v[lo], v[hi], coverage(k))
}

fn median_ci(xs: &[f64], level: f64) -> (f64, f64, f64) {
    let (m, lo, hi, _) = median_ci_coverage(xs, level);
    (m, lo, hi)
}

fn change_text(changes: &[f64]) -> String {
    let (m, lo, hi, coverage) = median_ci_coverage(changes, 0.95);
    if coverage < 0.95 {
        format!(
            "{m:+.1}% (n = {} too small for a 95% interval)",
            changes.len()
        )
    } else if lo <= 0.0 && hi >= 0.0 {
        format!("{m:+.1}% [{lo:+.1}, {hi:+.1}] no measurable difference")
    } else {
        format!("{m:+.1}% [{lo:+.1}, {hi:+.1}]")
    }
}

fn shuffle<T>(items: &mut [T], seed: &mut u64) {
    for i in (1..items.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        items.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn adaptive_against_kernel_default_and_static_nomerges_2_on_a_phase_changing_load() {
    let Some(_k) = kernel::require_kernel("real_kernel_compare") else {
        return;
    };
    let reps = env_u64("MERGETUNE_COMPARE_REPS", 2).max(1) as usize;
    let secs = env_u64("MERGETUNE_COMPARE_PHASE_S", 5).max(2);
    let mut dev = LoopDevice::new(512);
    assert_eq!(
        dev.backing_fs(),
        "tmpfs",
        "the comparison needs a loop over tmpfs"
    );
    dev.set_scheduler("mq-deadline");
    dev.warm_up();
    let original = dev.nomerges();
    let tmp = tempfile::tempdir().unwrap();
    let state_dir = tmp.path().join("state");
    let config = write_config(tmp.path(), &dev, &state_dir);

    // samples[controller][phase] = one Sample per repetition, in repetition order.
    let mut samples = vec![vec![Vec::<Sample>::new(); Phase::ALL.len()]; Controller::ALL.len()];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let started = Instant::now();
    for rep in 0..reps {
        let mut order = Controller::ALL;
        shuffle(&mut order, &mut seed);
        for c in order {
            let ci = Controller::ALL.iter().position(|x| *x == c).unwrap();
            let mut daemon = None;
            match c {
                Controller::Default => dev.set_nomerges(0),
                Controller::Static2 => dev.set_nomerges(2),
                Controller::Adaptive => {
                    dev.set_nomerges(0);
                    let mut d = Daemon::start(&config, &state_dir);
                    std::thread::sleep(Duration::from_millis(500));
                    d.assert_alive();
                    daemon = Some(d);
                }
            }
            let pid = daemon.as_ref().map(|d| d.child.id());
            for (pi, phase) in Phase::ALL.into_iter().enumerate() {
                let s = run_phase(&dev, phase, secs, tmp.path(), pid);
                eprintln!(
                    "rep {rep} {:8} {:18} {:9.0} IOPS {:7.0} ns/IO merged {:5.1}% (nomerges now {})",
                    c.name(),
                    phase.name(),
                    s.iops,
                    s.cpu_ns_per_io,
                    s.merge_ratio * 100.0,
                    dev.nomerges()
                );
                samples[ci][pi].push(s);
            }
            if let Some(mut d) = daemon {
                d.assert_alive();
                eprintln!("adaptive daemon's log:\n{}", d.log_text().trim_end());
                d.stop();
            }
            dev.set_nomerges(original);
            assert_eq!(dev.nomerges(), original);
        }
    }
    eprintln!(
        "\n{reps} repetitions of {} phases of {secs} s, {:.0} s in all; mq-deadline, loop over tmpfs, fio 4 KiB QD{IODEPTH} on CPU {FIO_CPU}",
        Phase::ALL.len(),
        started.elapsed().as_secs_f64()
    );
    eprintln!(
        "| phase | controller | IOPS, median [95% CI] | vs default | CPU ns per I/O, median [95% CI] | vs default | merged |"
    );
    eprintln!("|---|---|---|---|---|---|---|");
    for (pi, phase) in Phase::ALL.into_iter().enumerate() {
        for (ci, c) in Controller::ALL.into_iter().enumerate() {
            let s = &samples[ci][pi];
            let iops: Vec<f64> = s.iter().map(|x| x.iops).collect();
            let cpu: Vec<f64> = s.iter().map(|x| x.cpu_ns_per_io).collect();
            let merged: Vec<f64> = s.iter().map(|x| x.merge_ratio * 100.0).collect();
            let (im, ilo, ihi) = median_ci(&iops, 0.95);
            let (cm, clo, chi) = median_ci(&cpu, 0.95);
            let base = &samples[0][pi];
            let vs = |f: fn(&Sample) -> f64| -> String {
                if ci == 0 {
                    return "-".into();
                }
                let ch: Vec<f64> = s
                    .iter()
                    .zip(base)
                    .map(|(a, b)| (f(a) / f(b) - 1.0) * 100.0)
                    .collect();
                change_text(&ch)
            };
            eprintln!(
                "| {} | {} | {im:.0} [{ilo:.0}, {ihi:.0}] | {} | {cm:.0} [{clo:.0}, {chi:.0}] | {} | {:.1}% |",
                phase.name(),
                c.name(),
                vs(|x| x.iops),
                vs(|x| x.cpu_ns_per_io),
                median_ci(&merged, 0.95).0
            );
        }
    }

    // The mechanics.
    let seq = 1;
    let merged_median = |ci: usize| {
        median_ci(
            &samples[ci][seq]
                .iter()
                .map(|x| x.merge_ratio)
                .collect::<Vec<_>>(),
            0.95,
        )
        .0
    };
    let default_seq = merged_median(0);
    assert!(
        default_seq > 0.5,
        "batched sequential writes merged only {:.1}% at the kernel default: the load is not the one this test needs",
        default_seq * 100.0
    );
    assert!(
        samples[1][seq].iter().all(|s| s.merge_ratio == 0.0),
        "static nomerges=2 merged something"
    );
    let adaptive_seq = merged_median(2);
    assert!(
        adaptive_seq >= default_seq / 2.0,
        "the adaptive daemon kept merging off in the sequential phase: merged {:.1}% against the default's {:.1}%",
        adaptive_seq * 100.0,
        default_seq * 100.0
    );
    dev.detach();
}
