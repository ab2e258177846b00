//! `mergetune-lab trace capture` on a real loop device while fio runs: the file holds the
//! device's block events (and only its), `advise` reads it to the kernel's own merge
//! counts, and afterwards the private tracefs instance is gone and global tracing is as it
//! was; Ctrl-C (SIGINT) stops a capture early with the same cleanup. Runs only with
//! MERGETUNE_KERNEL_TESTS=1 (as root); then it fails, never skips, when it cannot run.

use crate::kernel;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TRACEFS: &str = "/sys/kernel/tracing";

fn bin() -> Command {
    crate::lab::lab()
}

/// `mergetune-lab trace capture` of `device` for `seconds` into `out`, output piped.
fn spawn_capture(device: &str, seconds: &str, out: &Path) -> std::process::Child {
    bin()
        .args([
            "trace",
            "capture",
            "--device",
            device,
            "--seconds",
            seconds,
            "-o",
        ])
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Instances of a capture process (`mergetune-PID`).
fn instance_of(pid: u32) -> std::path::PathBuf {
    Path::new(TRACEFS)
        .join("instances")
        .join(format!("mergetune-{pid}"))
}

/// Waits (at most 5 s) until the capture process `pid` has made its tracefs instance.
fn wait_for_instance_of(pid: u32) {
    let t = Instant::now();
    while !instance_of(pid).is_dir() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(instance_of(pid).is_dir(), "no tracefs instance appeared");
}

fn global_state() -> (String, String) {
    let read = |p: &str| {
        std::fs::read_to_string(Path::new(TRACEFS).join(p))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    (
        read("tracing_on"),
        read("events/block/block_bio_queue/enable"),
    )
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn capture_records_the_device_and_cleans_up() {
    let (_k, dev) = kernel::require_loop("capture_records_the_device_and_cleans_up", 256);
    dev.warm_up();
    let (major, minor) = dev.major_minor();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cap.txt");
    // Compared with tracing as the capture finds it mounted (it mounts tracefs itself when
    // it is not: that is not a change to the global tracing state).
    kernel::ensure_tracefs();
    let before_global = global_state();
    let before = dev.stat();
    let child = spawn_capture(dev.name(), "3", &out);
    let pid = child.id();
    // Wait for the instance to exist, then run the merge-friendly job.
    wait_for_instance_of(pid);
    std::thread::sleep(Duration::from_millis(300));
    kernel::run_fio(&kernel::job_batched_seq(&dev, "write", "8M"));
    dev.wait_idle();
    let delta = dev.stat().delta(&before);
    let res = child.wait_with_output().unwrap();
    assert!(
        res.status.success(),
        "capture failed: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    assert!(!instance_of(pid).exists(), "instance left behind");
    assert_eq!(global_state(), before_global, "global tracing changed");
    let text = std::fs::read_to_string(&out).unwrap();
    let counts = kernel::count_trace_events(&text);
    assert_eq!(
        kernel::event_count(&counts, "block_bio_queue"),
        delta.bios(),
        "{counts:?} vs {delta}"
    );
    assert_eq!(kernel::merge_events(&counts), delta.merged());
    let tag = format!(" {major},{minor} ");
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(l.contains(&tag), "event of another device: {l}");
    }
    // advise reads it to the kernel's numbers.
    let a = mergetune_lab::advise::analyze_file(&out, None, &Default::default()).unwrap();
    // The header names the device's scheduler, which advise ladders and prices it for.
    let active = std::fs::read_to_string(format!("/sys/block/{}/queue/scheduler", dev.name()))
        .ok()
        .and_then(|t| mergetune_kernel::scheduler::Reported::parse(&t))
        .and_then(|r| r.scheduler());
    assert!(active.is_some());
    assert_eq!(a.scheduler, active, "{}", &text[..text.len().min(400)]);
    let d = &a.devices[0];
    assert_eq!(d.bios, delta.bios());
    assert_eq!(d.back_merges + d.front_merges, delta.merged());
    assert_eq!(d.recommended_level, mergetune_logic::decision::Level::L0);
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn ctrl_c_stops_the_capture_and_cleans_up() {
    let (_k, dev) = kernel::require_loop("ctrl_c_stops_the_capture_and_cleans_up", 256);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cap.txt");
    let before_global = global_state();
    let child = spawn_capture(dev.name(), "60", &out);
    let pid = child.id();
    wait_for_instance_of(pid);
    kernel::run_fio(&kernel::job_rand(&dev, "randread", "4M"));
    let target = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(target, rustix::process::Signal::INT).unwrap();
    let t = Instant::now();
    let res = child.wait_with_output().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "did not stop on SIGINT"
    );
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    assert!(String::from_utf8_lossy(&res.stdout).contains("interrupted"));
    assert!(!instance_of(pid).exists(), "instance left behind");
    assert_eq!(global_state(), before_global);
    let text = std::fs::read_to_string(&out).unwrap();
    let counts = kernel::count_trace_events(&text);
    assert_eq!(kernel::event_count(&counts, "block_bio_queue"), 1024);
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn a_sigkilled_captures_instance_is_removed_by_the_next_capture() {
    let (_k, dev) = kernel::require_loop(
        "a_sigkilled_captures_instance_is_removed_by_the_next_capture",
        64,
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cap.txt");
    let capture = |seconds: &str| spawn_capture(dev.name(), seconds, &out);
    // A capture killed with SIGKILL cannot clean up: its instance stays.
    let mut killed = capture("60");
    let pid = killed.id();
    wait_for_instance_of(pid);
    killed.kill().unwrap();
    killed.wait().unwrap();
    assert!(instance_of(pid).is_dir(), "SIGKILL cannot have cleaned up");
    // An instance named after a live process (this test) is someone's: left alone.
    let ours = instance_of(std::process::id());
    std::fs::create_dir(&ours).unwrap();
    // The next capture removes the dead one and says so.
    let res = capture("0.5").wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&res.stderr);
    let live_kept = ours.is_dir();
    let _ = std::fs::remove_dir(&ours);
    assert!(res.status.success(), "{stderr}");
    assert!(
        !instance_of(pid).exists(),
        "stale instance still there: {stderr}"
    );
    assert!(
        stderr.contains("removed stale tracefs instance"),
        "{stderr}"
    );
    assert!(live_kept, "the instance of a live process was removed");
}

#[test]
fn refuses_a_missing_device_before_touching_anything() {
    // Runs everywhere: no root needed, nothing is written.
    let dir = tempfile::tempdir().unwrap();
    let out = bin()
        .args([
            "trace",
            "capture",
            "--device",
            "nosuchdev9",
            "--seconds",
            "1",
            "-o",
        ])
        .arg(dir.path().join("x.txt"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no such block device"), "{err}");
    assert!(!dir.path().join("x.txt").exists());
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn refuses_clearly_when_not_root() {
    let (_k, dev) = kernel::require_loop("refuses_clearly_when_not_root", 64);
    let dir = tempfile::tempdir().unwrap();
    // As nobody (setpriv, util-linux): refused before anything is touched.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(crate::lab::lab_bin())
        .args([
            "trace",
            "capture",
            "--device",
            dev.name(),
            "--seconds",
            "1",
            "-o",
        ])
        .arg(dir.path().join("x.txt"))
        .output()
        .expect("setpriv (util-linux) is needed to drop root");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs root"), "{err}");
}
