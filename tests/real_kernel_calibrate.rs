//! `mergetune calibrate --quick` on this machine's kernel (real-kernel test:
//! `MERGETUNE_KERNEL_TESTS=1`, as root): it runs on a scratch loop device it attaches
//! itself, writes a profile that validates and records this kernel, counts merges from the
//! device's stat (a batched sequential job merges, nomerges=2 merges nothing), and leaves no
//! loop device behind.

#[path = "support/kernel.rs"]
mod kernel;

use mergetune::logic::cost_profile::{CostProfile, Level, Method, Scheduler, Workload};
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
