//! Two loop devices on one scheduler (mq-deadline) doing different work, random 4 KiB reads
//! at full rate on one and 64 KiB sequential writes on the other, with two CPU burners
//! beside them: the daemon, with the shipped defaults but for the device list, prices each
//! device from its own tasks' merge-path samples, within seconds, and after the first
//! prices its sampler keeps to its duty cycle (1 s every 60 s). Pooled per scheduler, as
//! before, neither device ever got a price (both `saving unknown` for 90 s).

use crate::kernel;

use kernel::Proc;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// How long the daemon runs under the loads.
const RUN: Duration = Duration::from_secs(90);
/// A device's first resolved price at most this long after the daemon started (the goal
/// is about 10 s; measured 5.0-9.1 s on a loaded 2-CPU machine).
const FIRST_PRICE: Duration = Duration::from_secs(15);
/// The default duty cycle: one span every this long.
const EVERY: Duration = Duration::from_secs(60);
/// Back-to-back spans a device's first price may take (`live::FIRST_PRICE_MAX_SPANS`),
/// about a second each.
const FIRST_PRICE_SPANS: Duration = Duration::from_secs(10);

fn fio(dev: &kernel::LoopDevice, job: &[&str], t0: Instant) -> Proc {
    let mut c = Command::new("fio");
    c.args([
        "--name=price",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=32",
        "--time_based",
        "--output-format=terse",
    ])
    .args(job)
    .arg(format!("--runtime={}", RUN.as_secs() + 20))
    .arg(format!("--filename={}", dev.dev_str()));
    Proc::spawn("fio", &mut c, t0)
}

/// When `dev` first logged a resolved price for `shape`, from the log.
fn first_price(log: &[(Duration, String)], dev: &str, shape: &str) -> Option<Duration> {
    let prefix = format!("{dev}: merge path on mq-deadline under {shape}");
    log.iter()
        .find(|(_, l)| l.contains(&prefix) && !l.contains("not resolved"))
        .map(|(t, _)| *t)
}

/// Two loop devices of this test's on mq-deadline, warmed up, and a config with the shipped
/// defaults but for the device list, the state dir and the endpoint (in the temp dir).
fn devices_and_config() -> (
    kernel::LoopDevice,
    kernel::LoopDevice,
    tempfile::TempDir,
    PathBuf,
) {
    kernel::ensure_tracefs();
    let reads = kernel::LoopDevice::new(512);
    let writes = kernel::LoopDevice::new(512);
    for d in [&reads, &writes] {
        d.set_scheduler("mq-deadline");
        d.set_nomerges(0);
        d.warm_up();
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg: PathBuf = dir.path().join("mergetune.toml");
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\nstate_dir = {:?}\n[devices]\ninclude = [{:?}, {:?}]\n[metrics]\nlisten = \"\"\n",
            dir.path().join("state").display().to_string(),
            reads.name(),
            writes.name()
        ),
    )
    .unwrap();
    (reads, writes, dir, cfg)
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn two_devices_on_one_scheduler_each_get_their_own_price_and_the_sampler_keeps_its_duty_cycle() {
    let _k = kernel::require_kernel("price_per_device");
    let (reads, writes, _dir, cfg) = devices_and_config();
    let t0 = Instant::now();
    let mut loads = vec![
        fio(&reads, &["--rw=randread", "--bs=4k", "--norandommap"], t0),
        fio(&writes, &["--rw=write", "--bs=64k"], t0),
    ];
    for _ in 0..2 {
        loads.push(Proc::spawn(
            "burner",
            Command::new("sh").args(["-c", "while :; do :; done"]),
            t0,
        ));
    }
    std::thread::sleep(Duration::from_secs(2));
    let started = t0.elapsed();
    // -v: the sampler's spans are logged at debug level.
    let mut daemon = Proc::spawn(
        "mergetune",
        Command::new(env!("CARGO_BIN_EXE_mergetune"))
            .args(["run", "-v", "--log-format", "text", "-c"])
            .arg(&cfg),
        t0,
    );
    std::thread::sleep(RUN);
    let log = daemon.lines();
    let ended = t0.elapsed();
    daemon.stop();
    for l in &mut loads {
        l.stop();
    }
    let text = daemon.text();
    let r = first_price(&log, reads.name(), "reads, <= 4 KiB bios");
    let w = first_price(&log, writes.name(), "writes, 16-64 KiB bios");
    let spans: Vec<Duration> = log
        .iter()
        .filter(|(_, l)| l.contains("merge-path span ") && l.ends_with(" started"))
        .map(|(t, _)| *t)
        .collect();
    eprintln!(
        "price per device: {} first priced after {:?}, {} after {:?}; {} spans in {RUN:?}",
        reads.name(),
        r.map(|t| t.saturating_sub(started)),
        writes.name(),
        w.map(|t| t.saturating_sub(started)),
        spans.len()
    );
    for (dev, at) in [(reads.name(), r), (writes.name(), w)] {
        let at = at.unwrap_or_else(|| panic!("{dev}: no price of its own:\n{text}"));
        assert!(
            at.saturating_sub(started) <= FIRST_PRICE,
            "{dev}: first price {:?} after the daemon started:\n{text}",
            at.saturating_sub(started)
        );
    }
    // After both first prices, and the back-to-back spans a straddling one may still take,
    // one span per duty cycle (and one at the edge).
    let settled = r.max(w).unwrap() + FIRST_PRICE_SPANS;
    let after: Vec<&Duration> = spans.iter().filter(|t| **t > settled).collect();
    let allowed = (ended.saturating_sub(settled).as_secs() / EVERY.as_secs()) as usize + 1;
    assert!(
        after.len() <= allowed,
        "{} spans after {settled:?} ({after:?}), at most {allowed} at 1 s per 60 s:\n{text}",
        after.len()
    );
    assert!(!spans.is_empty(), "no span logged:\n{text}");
}
