//! The real-kernel counterpart of `mergetune-lab compare` (runs only with
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
//! a distribution-free interval from `lab::calibrate::stats` (order statistics, at least 95%
//! where the repetitions allow it: the 2nd and 9th of 10, 97.9%; the coverage is printed),
//! and the change against `default` is the median of the paired per-repetition ratios with
//! its interval; an interval that holds 0 is printed as "no measurable difference".
//!
//! The assertions check the mechanics: fio and the daemon ran, the device's original
//! nomerges is back after every run, static nomerges=2 merged nothing, and the adaptive
//! daemon kept the sequential phase merging (its merge ratio there is at least half the
//! default's: merging wrongly off, the loss the 2008 thread warned of, shows as ~0). And the
//! figures the docs quote from this test, with their intervals (`SequentialClaims`): static
//! nomerges=2 costs batched sequential writes more than a tenth of their throughput and more
//! than a tenth more CPU per I/O (measured in rounds of 10 alternating pairs of 2 s runs
//! after the phases, up to 3 rounds until the intervals resolve: `MERGETUNE_COMPARE_SEQ_*`),
//! and the daemon
//! loses measurably less than that.
//! (The kworker time here is every kworker's on the machine, so other tenants' work lands in
//! it; tests/real_kernel/real_kernel_abtest.rs counts the loop device's own, per pid.)
//! The figures in docs/evaluation.md come from a longer run of the same test:
//!     MERGETUNE_COMPARE_REPS=10 MERGETUNE_COMPARE_PHASE_S=15 MERGETUNE_KERNEL_TESTS=1 \
//!         cargo test --release --test real_kernel -- real_kernel_compare:: --nocapture

use crate::kernel;

use kernel::LoopDevice;
use mergetune_kernel::cputime;
use mergetune_lab::calibrate::stats::{self, Estimate};
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
    cputime::task_runtime_ns(Path::new(mergetune_kernel::roots::PROCFS), pid)
        .unwrap_or_else(|e| panic!("CPU time of {pid}: {e}"))
}

fn kworker_runtime_ns() -> u64 {
    cputime::kworker_runtime_ns(Path::new(mergetune_kernel::roots::PROCFS))
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
        if let Ok(ns) = cputime::task_runtime_ns(Path::new(mergetune_kernel::roots::PROCFS), pid) {
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
            r#"# Written by tests/real_kernel/real_kernel_compare.rs: the shipped defaults, this device only.
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
        let child = kernel::mergetune_run(config, state_dir, &[])
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
        // Our own child, not reaped yet.
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        );
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
        kernel::kill_unless_exited(&mut self.child);
    }
}

/// A median with its distribution-free interval, from `lab::calibrate::stats` (the one
/// implementation: order statistics with their exact binomial coverage, at least 95% where
/// n allows it, else the range with the lower coverage it reaches). Non-finite values
/// (a phase that did no I/O) are left out.
fn summary(xs: &[f64]) -> Estimate {
    let v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    stats::estimate(&v)
}

/// The coverage of an interval as printed: "97.9%".
fn coverage_text(e: &Estimate) -> String {
    format!("{:.1}%", e.coverage * 100.0)
}

/// A paired change with its interval and coverage; an interval that holds 0 is "no
/// measurable difference", and one below 95% says so.
fn change_text(changes: &[f64]) -> String {
    let e = summary(changes);
    let (m, lo, hi) = (e.median, e.low, e.high);
    let cov = coverage_text(&e);
    if e.coverage < 0.95 {
        format!(
            "{m:+.1}% [{lo:+.1}, {hi:+.1}] at {cov} only (n = {}: too few for 95%)",
            changes.len()
        )
    } else if lo <= 0.0 && hi >= 0.0 {
        format!("{m:+.1}% [{lo:+.1}, {hi:+.1}] ({cov}) no measurable difference")
    } else {
        format!("{m:+.1}% [{lo:+.1}, {hi:+.1}] ({cov})")
    }
}

/// Per-repetition paired changes of `f` of `s` against `base`, percent.
fn paired_changes(s: &[Sample], base: &[Sample], f: fn(&Sample) -> f64) -> Vec<f64> {
    s.iter()
        .zip(base)
        .map(|(a, b)| (f(a) / f(b) - 1.0) * 100.0)
        .collect()
}

fn shuffle<T>(items: &mut [T], seed: &mut u64) {
    for i in (1..items.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        items.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
}

/// What the documentation claims from the sequential phase, as paired changes against the
/// kernel default (percent).
struct SequentialClaims {
    static2_iops: Estimate,
    static2_cpu: Estimate,
    adaptive_iops: Estimate,
}

/// The documented bound on static nomerges=2's cost on batched sequential writes: more
/// than a tenth (docs/evaluation.md, "On the real kernel"). The short alternating runs of
/// this test measured medians of 18-30% (throughput) and 21-38% (CPU) on the shared
/// machine, less under load; a bound of a fifth failed once at -18.2% [-39.7, -5.1].
const STATIC2_SEQ_COST_PERCENT: f64 = 10.0;

impl SequentialClaims {
    /// Each claim's size holds of its median, and where the repetitions give 95% its
    /// interval must resolve the direction (lie wholly on the claimed side of 0): on a shared
    /// 2-CPU machine the intervals are too wide to hold the documented size itself, and a
    /// direction they do resolve. With fewer repetitions, the medians alone.
    fn check(&self) -> Result<(), String> {
        let sure = |e: &Estimate| e.coverage >= 0.95;
        let (si, sc, ai) = (&self.static2_iops, &self.static2_cpu, &self.adaptive_iops);
        if si.median >= -STATIC2_SEQ_COST_PERCENT || (sure(si) && si.high >= 0.0) {
            return Err(format!(
                "static nomerges=2 on batched sequential writes: throughput {:+.1}% [{:+.1}, {:+.1}] ({:.1}%), \
                 not the loss of more than {STATIC2_SEQ_COST_PERCENT}% the docs claim",
                si.median,
                si.low,
                si.high,
                si.coverage * 100.0
            ));
        }
        if sc.median <= STATIC2_SEQ_COST_PERCENT || (sure(sc) && sc.low <= 0.0) {
            return Err(format!(
                "static nomerges=2 on batched sequential writes: CPU per I/O {:+.1}% [{:+.1}, {:+.1}] ({:.1}%), \
                 not the cost of more than {STATIC2_SEQ_COST_PERCENT}% the docs claim",
                sc.median,
                sc.low,
                sc.high,
                sc.coverage * 100.0
            ));
        }
        let separated = if sure(si) {
            ai.median > si.high
        } else {
            ai.median > si.median / 2.0
        };
        if !separated {
            return Err(format!(
                "the daemon on batched sequential writes: throughput {:+.1}% [{:+.1}, {:+.1}], \
                 not measurably better than static nomerges=2's {:+.1}% [{:+.1}, {:+.1}]",
                ai.median, ai.low, ai.high, si.median, si.low, si.high
            ));
        }
        Ok(())
    }
}

// The statistics of the report, pinned without a kernel (these run everywhere).

#[test]
fn ten_paired_changes_are_reported_with_the_2nd_and_9th_values_at_97_9_percent() {
    // The old interval of this file was one rank off: for n = 10 it returned the 3rd and
    // 8th values (true coverage 1 - 2 * 56/1024 = 89.1%) and labelled them 95%.
    let changes: Vec<f64> = (1..=10).rev().map(f64::from).collect();
    let e = summary(&changes);
    assert_eq!((e.low, e.high), (2.0, 9.0), "{e:?}");
    assert!(
        (e.coverage - (1.0 - 2.0 * 11.0 / 1024.0)).abs() < 1e-12,
        "{e:?}"
    );
    assert_eq!(
        change_text(&changes),
        "+5.5% [+2.0, +9.0] (97.9%)",
        "the report prints the interval with its coverage"
    );
}

#[test]
fn fewer_than_six_changes_say_the_coverage_they_reach_never_100_percent() {
    // [min, max] of n values covers the median with 1 - 2 / 2^n: 93.8% for 5, 50% for 2.
    let five = [5.0, -1.0, 3.0, 2.0, 4.0];
    let e = summary(&five);
    assert_eq!((e.low, e.high), (-1.0, 5.0));
    assert!((e.coverage - 0.9375).abs() < 1e-12, "{e:?}");
    let text = change_text(&five);
    assert!(
        text.contains("93.8% only") && !text.contains("100"),
        "{text}"
    );
    let two = summary(&[1.0, 2.0]);
    assert_eq!((two.low, two.high, two.coverage), (1.0, 2.0, 0.5));
}

#[test]
fn the_sequential_claims_fail_on_a_run_that_does_not_show_them() {
    let est = |median: f64, low: f64, high: f64| Estimate {
        median,
        low,
        high,
        coverage: 0.979,
    };
    let documented = SequentialClaims {
        static2_iops: est(-44.1, -46.4, -34.3),
        static2_cpu: est(64.2, 43.7, 70.3),
        adaptive_iops: est(1.1, -5.3, 7.9),
    };
    assert_eq!(documented.check(), Ok(()));
    // A median short of the documented size, or an interval that does not resolve the
    // direction, is not the documented loss; a daemon that lost as much as static 2 did is
    // caught. (case, the run, what the failure names)
    let failing = [
        (
            "weak",
            SequentialClaims {
                static2_iops: est(-44.1, -46.4, 2.0),
                ..documented
            },
            "throughput",
        ),
        (
            "small",
            SequentialClaims {
                static2_iops: est(-8.0, -30.0, -5.0),
                ..documented
            },
            "throughput",
        ),
        (
            "cheap",
            SequentialClaims {
                static2_cpu: est(64.2, -1.0, 70.3),
                ..documented
            },
            "CPU per I/O",
        ),
        (
            "lost",
            SequentialClaims {
                adaptive_iops: est(-40.0, -45.0, -33.0),
                ..documented
            },
            "the daemon",
        ),
    ];
    for (case, claims, names) in failing {
        let e = claims.check().unwrap_err();
        assert!(e.contains(names), "{case}: {e}");
    }
    // With too few repetitions for 95%, the medians carry the claim.
    let short = SequentialClaims {
        static2_iops: Estimate {
            coverage: 0.5,
            ..est(-40.0, -45.0, -10.0)
        },
        static2_cpu: Estimate {
            coverage: 0.5,
            ..est(60.0, 5.0, 70.0)
        },
        adaptive_iops: Estimate {
            coverage: 0.5,
            ..est(0.0, -30.0, 5.0)
        },
    };
    assert_eq!(short.check(), Ok(()));
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
#[allow(clippy::too_many_lines)] // a test reads best as one story
fn adaptive_against_kernel_default_and_static_nomerges_2_on_a_phase_changing_load() {
    let _k = kernel::require_kernel("real_kernel_compare");
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
    // Every interval below has the coverage its n allows (97.9% for 10 repetitions).
    let cov = coverage_text(&summary(&vec![0.0; reps]));
    eprintln!(
        "| phase | controller | IOPS, median [{cov} CI] | vs default | CPU ns per I/O, median [{cov} CI] | vs default | merged |"
    );
    eprintln!("|---|---|---|---|---|---|---|");
    for (pi, phase) in Phase::ALL.into_iter().enumerate() {
        for (ci, c) in Controller::ALL.into_iter().enumerate() {
            let s = &samples[ci][pi];
            let iops = summary(&s.iter().map(|x| x.iops).collect::<Vec<_>>());
            let cpu = summary(&s.iter().map(|x| x.cpu_ns_per_io).collect::<Vec<_>>());
            let merged = summary(&s.iter().map(|x| x.merge_ratio * 100.0).collect::<Vec<_>>());
            let base = &samples[0][pi];
            let vs = |f: fn(&Sample) -> f64| -> String {
                if ci == 0 {
                    return "-".into();
                }
                change_text(&paired_changes(s, base, f))
            };
            eprintln!(
                "| {} | {} | {:.0} [{:.0}, {:.0}] | {} | {:.0} [{:.0}, {:.0}] | {} | {:.1}% |",
                phase.name(),
                c.name(),
                iops.median,
                iops.low,
                iops.high,
                vs(|x| x.iops),
                cpu.median,
                cpu.low,
                cpu.high,
                vs(|x| x.cpu_ns_per_io),
                merged.median
            );
        }
    }

    // The mechanics.
    let seq = 1;
    let merged_median = |ci: usize| {
        summary(
            &samples[ci][seq]
                .iter()
                .map(|x| x.merge_ratio)
                .collect::<Vec<_>>(),
        )
        .median
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

    // The figures docs/evaluation.md claims from this test ("The real kernel"), with their
    // intervals: static nomerges=2 on batched sequential writes costs more than a tenth of
    // the throughput and more than a tenth more CPU per I/O, and the daemon, which keeps
    // merging there, loses measurably less throughput than static 2.
    //
    // Static 2 against the default is measured apart, in short runs that alternate (ABBA)
    // right after one another: in the phase runs above a pair is up to 30 s apart, and on a
    // shared machine one slow run of the default (CI, 2026-12-02: 149,532 IOPS against
    // 202,039 in the other repetition) was enough to hide a 20% effect at n = 2.
    //
    // Under load (the same test beside a build, 2026-12-02 about 04:00 UTC) 10 pairs gave -22.3%
    // [-67.1, +83.8]: the noise, not the effect, set the interval. So the pairs come in
    // rounds of 10, up to `MERGETUNE_COMPARE_SEQ_ROUNDS` (3), pooled, until both intervals
    // resolve their direction; the claims are then checked on all of them. (Three looks: a
    // change of 0 resolves by chance in one of them with less than 3 x 2.1%.)
    let pairs = env_u64("MERGETUNE_COMPARE_SEQ_PAIRS", 10).max(1) as usize;
    let rounds = env_u64("MERGETUNE_COMPARE_SEQ_ROUNDS", 3).max(1) as usize;
    let pair_secs = env_u64("MERGETUNE_COMPARE_SEQ_S", 2).max(1);
    let iops = |x: &Sample| x.iops;
    let cpu = |x: &Sample| x.cpu_ns_per_io;
    let (mut seq_default, mut seq_static2) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        for i in 0..pairs {
            let order: [u8; 2] = if i % 2 == 0 { [0, 2] } else { [2, 0] };
            for nomerges in order {
                dev.set_nomerges(nomerges);
                let s = run_phase(&dev, Phase::Sequential, pair_secs, tmp.path(), None);
                if nomerges == 0 {
                    seq_default.push(s);
                } else {
                    assert_eq!(s.merge_ratio, 0.0, "static nomerges=2 merged something");
                    seq_static2.push(s);
                }
            }
        }
        let si = summary(&paired_changes(&seq_static2, &seq_default, iops));
        let sc = summary(&paired_changes(&seq_static2, &seq_default, cpu));
        eprintln!(
            "\nstatic2 against default on batched sequential writes, {} alternating pairs of {pair_secs} s \
             (round {round} of at most {rounds}): throughput {}, CPU per I/O {}",
            seq_default.len(),
            change_text(&paired_changes(&seq_static2, &seq_default, iops)),
            change_text(&paired_changes(&seq_static2, &seq_default, cpu))
        );
        let resolved = si.coverage >= 0.95 && si.high < 0.0 && sc.coverage >= 0.95 && sc.low > 0.0;
        if resolved {
            break;
        }
    }
    dev.set_nomerges(original);
    assert_eq!(dev.nomerges(), original);
    let claims = SequentialClaims {
        static2_iops: summary(&paired_changes(&seq_static2, &seq_default, iops)),
        static2_cpu: summary(&paired_changes(&seq_static2, &seq_default, cpu)),
        adaptive_iops: summary(&paired_changes(&samples[2][seq], &samples[0][seq], iops)),
    };
    if let Err(why) = claims.check() {
        panic!("{why}");
    }
    dev.detach();
}
