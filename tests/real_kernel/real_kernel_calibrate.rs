//! `mergetune calibrate --quick` on this machine's kernel (real-kernel test:
//! `MERGETUNE_KERNEL_TESTS=1`, as root): it runs on a scratch loop device it attaches
//! itself, writes a profile that validates and records this kernel, counts merges from the
//! device's stat (a batched sequential job merges, nomerges=2 merges nothing), and leaves no
//! loop device behind.

use crate::kernel;

use mergetune_logic::cost_profile::{CostProfile, Method, Scheduler, Workload};
use mergetune_logic::decision::Level;
use std::collections::BTreeSet;
use std::process::Command;

/// Attached loop devices with their backing files.
fn attached_loops() -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir("/sys/block").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Ok(b) = std::fs::read_to_string(e.path().join("loop/backing_file")) {
            out.insert((name, b.trim().to_string()));
        }
    }
    out
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn calibrate_quick_writes_a_valid_profile_and_leaves_no_loop_device() {
    let Some(_k) = kernel::require_kernel("calibrate_quick") else {
        return;
    };
    let before = attached_loops();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("profile.toml");
    let run = Command::new(env!("CARGO_BIN_EXE_mergetune"))
        .args([
            "calibrate",
            "--end-to-end",
            "--quick",
            "--schedulers",
            "none,mq-deadline",
            "--toggle-reps",
            "1",
            "--output",
        ])
        .arg(&out)
        .output()
        .expect("run mergetune calibrate");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "calibrate failed: {stderr}");
    assert_eq!(
        attached_loops(),
        before,
        "calibrate left a loop device behind"
    );
    assert!(
        !attached_loops()
            .iter()
            .any(|(_, b)| b.contains("mergetune-calibrate-")),
        "a scratch backing file is still attached"
    );

    let text = std::fs::read_to_string(&out).unwrap();
    let p = CostProfile::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let uname = Command::new("uname").arg("-r").output().unwrap();
    assert_eq!(
        p.kernel_release,
        String::from_utf8_lossy(&uname.stdout).trim()
    );
    assert_eq!(p.method, Method::CpuBoundLoop);
    assert_eq!(p.reps, 2);
    assert_eq!(p.schedulers, vec![Scheduler::None, Scheduler::MqDeadline]);
    assert!(
        p.ci_coverage_percent < 95.0,
        "two reps cannot give a 95% interval"
    );
    let t = p.toggle.as_ref().expect("toggle measured");
    assert!(t.write_us_median > 0.0);
    for s in [Scheduler::None, Scheduler::MqDeadline] {
        for &l in s.levels() {
            for w in Workload::ALL {
                let c = p
                    .cell(s, l, w)
                    .unwrap_or_else(|| panic!("{s} {l} {w} missing"));
                assert!(c.cpu_per_io > 0.0 && c.iops.unwrap_or(0.0) > 0.0, "{c:?}");
            }
        }
        // Merges come from the loop device's stat: the plug merges 31 of every 32 bios of
        // the batched sequential job, nomerges=2 none.
        let seq = |l| {
            p.cell(s, l, Workload::SequentialBatched)
                .unwrap()
                .merged_percent
        };
        assert!(seq(Level::L0) > 90.0, "{s}: {}", seq(Level::L0));
        assert_eq!(seq(Level::L3), 0.0, "{s}");
    }
}

/// Sectors written so far to a device (field 7 of its stat).
fn sectors_written(dev: &kernel::LoopDevice) -> u64 {
    let stat = std::fs::read_to_string(dev.sys_dir().join("stat")).unwrap();
    stat.split_whitespace().nth(6).unwrap().parse().unwrap()
}

/// Ends the fio jobs a killed calibrate left on `dev` (they would hold the device open).
fn kill_fio_on(dev: &kernel::LoopDevice) {
    let _ = Command::new("pkill")
        .args(["-f", &format!("filename={}", dev.dev_str())])
        .status();
    std::thread::sleep(std::time::Duration::from_millis(500));
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn calibrate_on_a_device_samples_the_merge_path_read_only_and_puts_its_tunables_back() {
    let Some(_k) = kernel::require_kernel("calibrate_device") else {
        return;
    };
    let dev = kernel::LoopDevice::new(512);
    dev.set_scheduler("mq-deadline");
    // Operator's values that are not the kernel's defaults: calibrate measures at L0 and
    // must put these back.
    dev.set_queue_attr("nomerges", "1");
    dev.set_queue_attr("iosched/front_merges", "0");
    let written = sectors_written(&dev);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("device.toml");
    let run = Command::new(env!("CARGO_BIN_EXE_mergetune"))
        .args(["calibrate", "--device", dev.name(), "--windows", "3"])
        .args(["--runtime-ms", "300", "--state-dir"])
        .arg(dir.path().join("state"))
        .arg("--output")
        .arg(&out)
        .output()
        .expect("run mergetune calibrate --device");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "calibrate --device failed: {stderr}");
    assert_eq!(
        sectors_written(&dev),
        written,
        "calibrate wrote to the device"
    );
    assert_eq!(dev.queue_attr("nomerges").trim(), "1", "{stderr}");
    assert_eq!(
        dev.queue_attr("iosched/front_merges").trim(),
        "0",
        "{stderr}"
    );
    let p = mergetune_logic::cost_profile::CostProfile::from_toml_str(
        &std::fs::read_to_string(&out).unwrap(),
    )
    .expect("the profile parses");
    assert_eq!(
        p.merge_path.len(),
        4,
        "plugged/unplugged x 1/2 submitters: {p:?}"
    );
    assert!(
        p.merge_path.iter().all(|c| c.bios > 0 && c.samples > 0),
        "{p:?}"
    );
    let key = p
        .device
        .as_ref()
        .expect("the profile is keyed by its device");
    assert_eq!(key.driver, "loop");
    eprintln!("calibrate --device: {}", p.render_merge_path());
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn a_sigkill_mid_calibration_puts_the_devices_tunables_back() {
    let Some(_k) = kernel::require_kernel("calibrate_sigkill") else {
        return;
    };
    let dev = kernel::LoopDevice::new(512);
    dev.set_scheduler("mq-deadline");
    dev.set_queue_attr("nomerges", "1");
    dev.set_queue_attr("iosched/front_merges", "0");
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mergetune"))
        .args(["calibrate", "--device", dev.name(), "--windows", "50"])
        .args(["--runtime-ms", "500", "--state-dir"])
        .arg(dir.path().join("state"))
        .arg("--output")
        .arg(dir.path().join("never.toml"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run mergetune calibrate --device");
    // Until calibrate has written the level it measures at (L0).
    let t = std::time::Instant::now();
    while dev.queue_attr("nomerges").trim() != "0" {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "calibrate never set nomerges 0"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    // The guard notices and puts the operator's values back.
    let t = std::time::Instant::now();
    while dev.queue_attr("nomerges").trim() != "1"
        || dev.queue_attr("iosched/front_merges").trim() != "0"
    {
        if t.elapsed() > std::time::Duration::from_secs(10) {
            kill_fio_on(&dev);
            panic!(
                "after SIGKILL: nomerges {}, front_merges {} (want 1, 0)",
                dev.queue_attr("nomerges").trim(),
                dev.queue_attr("iosched/front_merges").trim()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    eprintln!(
        "calibrate SIGKILL: tunables back {:?} after the kill",
        t.elapsed()
    );
    kill_fio_on(&dev);
}
