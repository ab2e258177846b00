//! The same-signature switch on the real kernel: one fio process on a loop device
//! this test creates runs random 4 KiB writes until the daemon has merging off (nomerges 2),
//! then, with no idle gap and at about the same rate, sequential 4 KiB writes submitted in
//! batches of 64 that the kernel merges. Rate, read share and bio size stay the same and the
//! merge counters read zero at nomerges 2, so only the bio tap can see the switch.
//!
//! The batched job is paced by `thinktime` (20 ms after each 64 bios, about 3,100 IOPS
//! here), not by `rate_iops`: fio's rate limiter waits for the I/O in flight before it
//! sleeps, so at `rate_iops=3000` the batches reach the kernel a few bios at a time and the
//! kernel merges under 1% of them (measured at nomerges 0: 128 merged of 14,872 writes in
//! 5 s; with the thinktime pacing 15,309 merged of 15,552 bios, 243 requests). A tap that
//! agrees with the kernel calls the first form not mergeable, as it is.
//!
//! - `the_bio_tap_sees_the_switch_at_l3`: the daemon's tap reports mergeable I/O within
//!   10 s of the switch (and nothing mergeable before it);
//! - `merging_is_back_within_10_s_of_the_switch`: nomerges leaves 2 within 10 s. It needs
//!   the policy's reaction to the tap's samples.
//!
//! Gated by MERGETUNE_KERNEL_TESTS=1; the daemon (the built binary, config
//! tests/fixtures/same_signature.toml) and fio are killed and the loop device detached
//! also when the test fails.

use crate::kernel;

use kernel::Proc;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Random writes run this long: enough for the daemon to reach L3 (about 3 s here).
const RANDOM_SECS: u64 = 20;
const SEQUENTIAL_SECS: u64 = 20;
const RATE_IOPS: u64 = 3000;
/// The batched job's pause after each batch of 64 bios: about RATE_IOPS with the batch's
/// own service time (3,098 IOPS measured here at nomerges 0).
const BATCH_THINKTIME_US: u64 = 20_000;
const REACTION: Duration = Duration::from_secs(10);

fn config_for(dev: &kernel::LoopDevice, dir: &Path) -> PathBuf {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/same_signature.toml");
    let text = std::fs::read_to_string(&fixture).unwrap();
    assert!(text.contains("@DEVICE@"));
    let path = dir.join("mergetune.toml");
    std::fs::write(&path, text.replace("@DEVICE@", dev.name())).unwrap();
    path
}

/// One fio process: random writes for RANDOM_SECS at RATE_IOPS, then sequential writes
/// submitted and reaped in batches of 64, paced by BATCH_THINKTIME_US to about the same rate. Both jobs are set up when fio starts and the
/// second one's I/O starts RANDOM_SECS later (`startdelay`), as the first one's runtime
/// ends: no idle gap (`stonewall` would set the second job up only after the first has
/// drained, a dip in the rate that the policy's workload-change rule notices).
fn fio_args(dev: &kernel::LoopDevice) -> Vec<String> {
    vec![
        "--direct=1".into(),
        "--ioengine=libaio".into(),
        "--bs=4k".into(),
        "--iodepth=64".into(),
        "--size=512M".into(),
        "--time_based".into(),
        format!("--filename={}", dev.dev_str()),
        "--name=random".into(),
        "--rw=randwrite".into(),
        "--norandommap".into(),
        "--randrepeat=1".into(),
        format!("--rate_iops={RATE_IOPS}"),
        format!("--runtime={RANDOM_SECS}"),
        "--name=log".into(),
        "--rw=write".into(),
        "--iodepth_batch_submit=64".into(),
        "--iodepth_batch_complete_min=64".into(),
        "--thinktime_blocks=64".into(),
        format!("--thinktime={BATCH_THINKTIME_US}"),
        format!("--startdelay={RANDOM_SECS}"),
        format!("--runtime={SEQUENTIAL_SECS}"),
    ]
}

struct Outcome {
    /// nomerges over time, since fio started.
    nomerges: Vec<(Duration, u8)>,
    /// When fio started (the switch is RANDOM_SECS later).
    switch_at: Duration,
    daemon_log: Vec<(Duration, String)>,
    daemon_text: String,
}

fn run_switch(test: &str) -> Outcome {
    let session = kernel::require_tap_kernel(test);
    let dev = kernel::LoopDevice::mq_deadline_at_l0();
    let tmp = tempfile::tempdir().unwrap();
    let config = config_for(&dev, tmp.path());
    let t0 = Instant::now();
    let mut daemon = Proc::spawn(
        "daemon",
        Command::new(env!("CARGO_BIN_EXE_mergetune"))
            .arg("run")
            .arg("--config")
            .arg(&config)
            .arg("--state-dir")
            .arg(tmp.path().join("state"))
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1"),
        t0,
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(daemon.running(), "the daemon exited:\n{}", daemon.text());
    let args = fio_args(&dev);
    eprintln!("{}", kernel::fio_command_line(&args));
    let fio_start = t0.elapsed();
    let mut fio = Proc::spawn("fio", Command::new("fio").args(&args), t0);
    let switch_at = fio_start + Duration::from_secs(RANDOM_SECS);
    let end = switch_at + REACTION + Duration::from_secs(2);
    let mut nomerges = Vec::new();
    let mut last = None;
    while t0.elapsed() < end {
        let v = dev.nomerges();
        if last != Some(v) {
            nomerges.push((t0.elapsed(), v));
            last = Some(v);
        }
        assert!(daemon.running(), "the daemon exited:\n{}", daemon.text());
        assert!(fio.running(), "fio ended early:\n{}", fio.text());
        std::thread::sleep(Duration::from_millis(20));
    }
    fio.stop();
    daemon.stop();
    let out = Outcome {
        nomerges,
        switch_at,
        daemon_log: daemon.lines(),
        daemon_text: daemon.text(),
    };
    drop(dev);
    drop(session);
    out
}

impl Outcome {
    fn describe(&self) -> String {
        format!(
            "switch at {:.2}s; nomerges over time: {:?}; daemon log:\n{}",
            self.switch_at.as_secs_f64(),
            self.nomerges
                .iter()
                .map(|(t, v)| format!("{:.2}s {v}", t.as_secs_f64()))
                .collect::<Vec<_>>(),
            self.daemon_text
        )
    }

    /// nomerges was 2 before the switch (and since when).
    fn l3_before_switch(&self) -> Duration {
        let at = self
            .nomerges
            .iter()
            .filter(|(t, v)| *v == 2 && *t < self.switch_at)
            .map(|(t, _)| *t)
            .next_back()
            .unwrap_or_else(|| panic!("never at L3 before the switch: {}", self.describe()));
        let left = self
            .nomerges
            .iter()
            .any(|(t, v)| *v != 2 && *t > at && *t < self.switch_at);
        assert!(!left, "left L3 before the switch: {}", self.describe());
        at
    }
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn the_bio_tap_sees_the_switch_at_l3() {
    let out = run_switch("real_kernel_same_signature_tap");
    out.l3_before_switch();
    let mergeable: Vec<Duration> = out
        .daemon_log
        .iter()
        .filter(|(_, l)| l.contains("the bio tap saw") && l.contains("mergeable I/O"))
        .map(|(t, _)| *t)
        .collect();
    assert!(
        mergeable.iter().all(|t| *t >= out.switch_at),
        "mergeable I/O seen before the switch: {}",
        out.describe()
    );
    let seen = mergeable.first().unwrap_or_else(|| {
        panic!(
            "the tap never saw the sequential writes: {}",
            out.describe()
        )
    });
    assert!(
        *seen <= out.switch_at + REACTION,
        "seen {:.2}s after the switch: {}",
        (*seen - out.switch_at).as_secs_f64(),
        out.describe()
    );
    eprintln!(
        "the tap saw mergeable I/O {:.2}s after the switch",
        (*seen - out.switch_at).as_secs_f64()
    );
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn merging_is_back_within_10_s_of_the_switch() {
    let out = run_switch("real_kernel_same_signature_merging");
    out.l3_before_switch();
    let back = out
        .nomerges
        .iter()
        .find(|(t, v)| *t >= out.switch_at && *v != 2)
        .map(|(t, _)| *t)
        .unwrap_or_else(|| panic!("merging never came back: {}", out.describe()));
    assert!(
        back <= out.switch_at + REACTION,
        "merging back {:.2}s after the switch: {}",
        (back - out.switch_at).as_secs_f64(),
        out.describe()
    );
}
