//! SIGKILL at random points of a real run never loses an original (runs only with
//! `MERGETUNE_KERNEL_TESTS=1`, as root; fails when asked for and unable to run).
//!
//! A loop device (mq-deadline, nomerges 0, front_merges 1) under random 4 KiB writes, and
//! 50 times: start `mergetune run` with windows of one 50 ms tick (so the ladder is walked
//! within a few hundred ms, probes every second or two), SIGKILL it after a pseudo-random
//! delay of 0 to 1.5 s, run `mergetune restore` as the unit's ExecStopPost does, and check
//! both tunables are back at their originals. The report says at how many kills mergetune's
//! own values were in place, so the test shows it exercised the case it guards.

use crate::kernel;

use kernel::LoopDevice;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KILLS: u64 = 50;

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn fifty_sigkills_lose_no_original() {
    let (_k, dev) = kernel::require_loop("fifty_sigkills_lose_no_original", 600);
    dev.set_scheduler("mq-deadline");
    dev.set_nomerges(0);
    dev.set_queue_attr("iosched/front_merges", "1");
    dev.warm_up();
    let tmp = tempfile::tempdir().unwrap();
    let (state_dir, config) = fast_ladder_config(tmp.path(), &dev, (1, 2));
    let fio = random_writes(&dev, 600);
    let bin = env!("CARGO_BIN_EXE_mergetune");
    let mut ours_at_kill = 0;
    let mut levels_seen = std::collections::BTreeSet::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let started = Instant::now();
    let mut failure = None;
    for i in 0..KILLS {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = Duration::from_millis(seed % 1500);
        let mut d = Command::new(bin)
            .args(["run", "-q", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start mergetune");
        std::thread::sleep(delay);
        let killed_pid = d.id();
        let _ = d.kill(); // SIGKILL
        let _ = d.wait();
        let nm = dev.nomerges();
        let fm = dev.queue_attr("iosched/front_merges");
        levels_seen.insert((nm, fm.clone()));
        if nm != 0 || fm != "1" {
            ours_at_kill += 1;
        }
        let out = Command::new(bin)
            .args(["restore", "--state-dir"])
            .arg(&state_dir)
            .output()
            .unwrap();
        let (nm_after, fm_after) = (dev.nomerges(), dev.queue_attr("iosched/front_merges"));
        // The killed daemon's bio tap instance, if it had one, goes with the restore.
        let left_tap = std::fs::read_dir(std::path::Path::new(kernel::TRACEFS).join("instances"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with(&format!("mergetune-sense-{killed_pid}-")));
        if let Some(n) = left_tap {
            failure = Some(format!(
                "kill {i}: the tracefs instance {n} outlived the restore"
            ));
            break;
        }
        if nm_after != 0 || fm_after != "1" || !out.status.success() {
            failure = Some(format!(
                "kill {i} after {delay:?}: nomerges {nm} front_merges {fm} at the kill, {nm_after} and {fm_after} after restore ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
            break;
        }
    }
    stop_fio(fio);
    if let Some(f) = failure {
        panic!("{f}");
    }
    eprintln!(
        "{KILLS} SIGKILLs in {:.1} s: mergetune's values in place at {ours_at_kill} of them (levels seen: {levels_seen:?}); 0 originals lost",
        started.elapsed().as_secs_f64()
    );
    assert!(
        ours_at_kill >= KILLS / 4,
        "only {ours_at_kill} kills found mergetune's values in place: the test did not exercise its case"
    );
}

/// Another disk under a killed daemon's device name, as it was first found: a loop device
/// at mergetune's nomerges, the daemon killed, the loop device detached and attached to
/// another file (the same name and number, a new `diskseq`), its new owner setting nomerges
/// to the value mergetune had written to the old disk. `mergetune restore` must leave it
/// alone, saying why.
#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn restore_never_writes_a_loop_device_reattached_to_another_file() {
    let _k =
        kernel::require_kernel("restore_never_writes_a_loop_device_reattached_to_another_file");
    let mut dev = LoopDevice::mq_deadline_at_l0();
    let tmp = tempfile::tempdir().unwrap();
    // No probe within the test: the kill finds the device at L3.
    let (state_dir, config) = fast_ladder_config(tmp.path(), &dev, (600, 600));
    let fio = random_writes(&dev, 30);
    let mut d = start_daemon(&["-q"], &config, Stdio::null());
    wait_for_a_step_down(&dev);
    let _ = d.kill();
    let _ = d.wait();
    stop_fio(fio);
    let ours = dev.nomerges();
    assert_ne!(ours, 0, "the daemon never stepped down: nothing to test");
    let state = std::fs::read_to_string(state_dir.join("state.json")).unwrap();
    let seq_before = dev.diskseq();
    assert!(
        state.contains(&format!("\"diskseq\": {seq_before}")),
        "the record names the disk: {state}"
    );
    dev.reattach(64);
    let seq_after = dev.diskseq();
    assert_ne!(seq_before, seq_after, "a re-attach makes a new disk");
    dev.set_nomerges(ours); // its new owner's value, the same as mergetune's on the old disk
    let out = restore(&state_dir);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(dev.nomerges(), ours, "the new disk's value stands: {said}");
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("another disk has the name now")
            && said.contains(&format!("diskseq {seq_after}"))
            && said.contains(&format!("diskseq {seq_before}")),
        "{said}"
    );
    assert!(
        !state_dir.join("state.json").exists(),
        "the old disk's records are dropped"
    );
    eprintln!(
        "{}: nomerges {ours} recorded on diskseq {seq_before}; re-attached as diskseq {seq_after} and set to {ours} by hand; restore said: {}",
        dev.name(),
        said.trim()
    );
}

/// A loop device at L3 detached and re-attached to the same backing file keeps its
/// original: its queue keeps nomerges across both while `diskseq` moves twice. Once with
/// the daemon running (it says so, and its stop leaves the original), once after a SIGKILL
/// (then `restore` puts it back). Before, the daemon dropped its records as "another disk"
/// and the device stayed at mergetune's value.
#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn a_loop_device_reattached_to_the_same_file_keeps_its_original() {
    let _k = kernel::require_kernel("a_loop_device_reattached_to_the_same_file_keeps_its_original");
    let mut dev = LoopDevice::mq_deadline_at_l0();
    for killed in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let (state_dir, config) = fast_ladder_config(tmp.path(), &dev, (600, 600));
        let log = tmp.path().join("daemon.log");
        let fio = random_writes(&dev, 30);
        // Waited for on every path but a failed assertion, where the test ends anyway.
        #[allow(clippy::zombie_processes)]
        let mut d = start_daemon(&[], &config, std::fs::File::create(&log).unwrap().into());
        wait_for_a_step_down(&dev);
        stop_fio(fio);
        let ours = dev.nomerges();
        assert_ne!(ours, 0, "the daemon never stepped down: nothing to test");
        if killed {
            let _ = d.kill();
            let _ = d.wait();
        }
        let seq_before = dev.diskseq();
        dev.detach_only();
        std::thread::sleep(Duration::from_millis(500));
        dev.attach_same();
        let seq_after = dev.diskseq();
        assert_ne!(seq_before, seq_after);
        std::thread::sleep(Duration::from_millis(500));
        let said = if killed {
            let out = restore(&state_dir);
            assert!(out.status.success(), "{out:?}");
            String::from_utf8_lossy(&out.stdout).to_string()
        } else {
            wait_for_log(&log, "re-attached to the same backing file");
            stop_and_read_log(&mut d, &log)
        };
        assert_eq!(
            dev.nomerges(),
            0,
            "killed {killed}: the original is back: {said}"
        );
        if !killed {
            assert!(
                said.contains("re-attached to the same backing file"),
                "{said}"
            );
        }
        eprintln!(
            "{} at nomerges {ours}, diskseq {seq_before} -> {seq_after} (detached, re-attached to the same file), {}: back at 0",
            dev.name(),
            if killed {
                "SIGKILL then restore"
            } else {
                "daemon running, then SIGTERM"
            }
        );
    }
}

/// `mergetune run` with `args` and `config`, its stderr to `stderr`.
fn start_daemon(args: &[&str], config: &std::path::Path, stderr: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_mergetune"))
        .arg("run")
        .args(args)
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("cannot start mergetune")
}

/// Waits (up to 20 s) for the daemon to move `dev` off nomerges 0.
fn wait_for_a_step_down(dev: &LoopDevice) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while dev.nomerges() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `mergetune restore` from `state_dir`, as the unit's ExecStopPost runs it.
fn restore(state_dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mergetune"))
        .args(["restore", "--state-dir"])
        .arg(state_dir)
        .output()
        .unwrap()
}

/// Waits until the daemon's log at `log` says `what`, or 5 s: the daemon sees a re-attach at
/// its next rescan (every 30 ticks, 1.5 s at this file's 50 ms ticks), so up to three rescans.
fn wait_for_log(log: &std::path::Path, what: &str) {
    let by = Instant::now() + Duration::from_secs(5);
    while Instant::now() < by && !std::fs::read_to_string(log).unwrap().contains(what) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGTERM to the daemon, waited for; its log.
fn stop_and_read_log(d: &mut std::process::Child, log: &std::path::Path) -> String {
    rustix::process::kill_process(
        rustix::process::Pid::from_child(d),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let _ = d.wait();
    std::fs::read_to_string(log).unwrap()
}

/// The daemon's config for these tests, in `dir`: this device only, windows of one 50 ms
/// tick so the ladder is walked within a few hundred ms, probes `probe_backoff_secs` apart
/// (min, max). Returns the state directory and the config file.
fn fast_ladder_config(
    dir: &std::path::Path,
    dev: &LoopDevice,
    probe_backoff_secs: (u64, u64),
) -> (std::path::PathBuf, std::path::PathBuf) {
    let state_dir = dir.join("state");
    let config = dir.join("mergetune.toml");
    std::fs::write(
        &config,
        format!(
            r#"# Written by tests/real_kernel/real_kernel_sigkill.rs.
[daemon]
interval_ms = 50
state_dir = "{state}"
[devices]
include = ["{name}"]
[policy]
cost_profile = "lkml-2008"
window_ticks = 1
min_window_bios = 50
step_down_after_windows = 1
disable_after_windows = 1
min_dwell_secs = 0
probe_initial_backoff_secs = {min}
probe_max_backoff_secs = {max}
l3_watch_interval_ms = 0
[metrics]
listen = ""
"#,
            state = state_dir.display(),
            name = dev.name(),
            min = probe_backoff_secs.0,
            max = probe_backoff_secs.1,
        ),
    )
    .unwrap();
    (state_dir, config)
}

/// Random 4 KiB writes on `dev` for `runtime_s`, in the background.
fn random_writes(dev: &LoopDevice, runtime_s: u64) -> Child {
    let mut args = kernel::job_rand(dev, "randwrite", "32M");
    args.retain(|a| !a.starts_with("--io_size="));
    args.extend(["--time_based".to_string(), format!("--runtime={runtime_s}")]);
    Command::new("fio")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start fio")
}

/// Stops fio with SIGINT, which it passes on to the job process it forked (a SIGKILL of
/// the parent alone left that job writing to the loop device), then makes sure.
fn stop_fio(mut fio: Child) {
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_child(&fio),
        rustix::process::Signal::INT,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && matches!(fio.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = fio.kill();
    let _ = fio.wait();
}
