//! The bio tap on the real kernel: on a loop device this test creates, the tap (a private
//! tracefs instance with only block_bio_queue, filtered on the device) sees a sequential
//! batched fio job as almost all contiguous and a random one as almost none, at
//! nomerges=2 where the merge counters read zero for both; and no instance is left.
//! Gated by MERGETUNE_KERNEL_TESTS=1 (fails, never skips, when asked and unable to run).

#[path = "support/kernel.rs"]
mod kernel;

use mergetune::kernel::biosense::{QueuedBio, SENSE_INSTANCE_PREFIX, TapParams};
use mergetune::kernel::blockfs::{BlockFs, RealFs};
use mergetune::logic::sampler::Sensed;
use mergetune::logic::sense::{Contiguity, contiguous_percent};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs fio with `args` while the tap of `dev` is open, draining it every 50 ms; returns
/// what the tap counted and the stat delta.
fn tapped(
    fs: &mut RealFs,
    dev: &kernel::LoopDevice,
    args: &[String],
) -> (Sensed, kernel::StatDelta, u64) {
    let before = dev.stat();
    fs.tap_open(dev.name(), &TapParams { buffer_kb: 512 })
        .unwrap_or_else(|e| panic!("tap_open {}: {e}", dev.name()));
    let mut child = Command::new("fio")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fio");
    let start = Instant::now();
    let mut acc = Contiguity::new(16);
    let mut buf: Vec<QueuedBio> = Vec::new();
    let mut lost = 0;
    loop {
        let done = child.try_wait().expect("wait fio").is_some();
        buf.clear();
        let d = fs
            .tap_drain(dev.name(), &mut buf, 1_000_000)
            .expect("drain");
        lost += d.lost + d.dropped;
        acc.extend(&buf);
        if done {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "fio ran over 2 min"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "{} failed",
        kernel::fio_command_line(args)
    );
    // The last events can still be on their way into the ring buffer.
    std::thread::sleep(Duration::from_millis(100));
    buf.clear();
    fs.tap_drain(dev.name(), &mut buf, 1_000_000)
        .expect("drain");
    acc.extend(&buf);
    fs.tap_close(dev.name()).expect("close");
    let ms = start.elapsed().as_millis() as u64;
    (acc.sensed(ms), dev.stat().delta(&before), lost)
}

fn our_instances() -> Vec<String> {
    let prefix = format!("{SENSE_INSTANCE_PREFIX}{}-", std::process::id());
    std::fs::read_dir("/sys/kernel/tracing/instances")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_tap_sees_sequential_as_contiguous_and_random_as_not_at_l3() {
    let Some(_k) = kernel::require_kernel("real_kernel_sense") else {
        return;
    };
    kernel::ensure_tracefs();
    let dev = kernel::LoopDevice::new(600);
    dev.warm_up();
    dev.set_nomerges(2);
    let mut fs = RealFs::new("/sys", "/proc");
    fs.tap_available(dev.name())
        .unwrap_or_else(|e| panic!("the tap is not available: {e}"));

    let seq = kernel::job_batched_seq(&dev, "write", "32M");
    let (s, delta, lost) = tapped(&mut fs, &dev, &seq);
    eprintln!("sequential: {s:?}, lost {lost}, stat {delta}");
    assert_eq!(delta.merged(), 0, "nomerges=2 merges nothing: {delta}");
    assert!(
        s.bios >= 8000 && s.bios <= 8192 + 64,
        "the tap saw {} of {} bios",
        s.bios,
        delta.bios()
    );
    assert!(contiguous_percent(&s) >= 95.0, "sequential: {s:?}");
    assert!(our_instances().is_empty(), "left: {:?}", our_instances());

    let rand = kernel::job_rand(&dev, "randwrite", "32M");
    let (s, delta, lost) = tapped(&mut fs, &dev, &rand);
    eprintln!("random: {s:?}, lost {lost}, stat {delta}");
    assert_eq!(delta.merged(), 0, "{delta}");
    assert!(s.bios >= 8000, "the tap saw {} bios", s.bios);
    assert!(contiguous_percent(&s) <= 2.0, "random: {s:?}");

    // Other devices' bios never reach the tap: the filter is on this device's dev_t.
    drop(fs);
    assert!(our_instances().is_empty(), "left: {:?}", our_instances());
}

#[test]
fn a_dropped_realfs_removes_its_open_taps_and_stale_ones_go_at_the_next_open() {
    let Some(_k) = kernel::require_kernel("real_kernel_sense_cleanup") else {
        return;
    };
    kernel::ensure_tracefs();
    let dev = kernel::LoopDevice::new(64);
    let mut fs = RealFs::new("/sys", "/proc");
    fs.tap_open(dev.name(), &TapParams { buffer_kb: 64 })
        .unwrap();
    assert_eq!(our_instances().len(), 1);
    drop(fs);
    assert!(our_instances().is_empty(), "left: {:?}", our_instances());

    // An instance named after a pid that is gone (a SIGKILLed daemon) is removed when a
    // tap next opens; the running test's own are not touched by that sweep.
    let dead = dead_pid();
    let stale = std::path::PathBuf::from("/sys/kernel/tracing/instances")
        .join(format!("{SENSE_INSTANCE_PREFIX}{dead}-7_0"));
    std::fs::create_dir(&stale).unwrap();
    let mut fs = RealFs::new("/sys", "/proc");
    fs.tap_open(dev.name(), &TapParams { buffer_kb: 64 })
        .unwrap();
    let gone = !stale.exists();
    if !gone {
        let _ = std::fs::remove_dir(&stale);
    }
    fs.tap_close(dev.name()).unwrap();
    assert!(gone, "{} was not removed", stale.display());
    assert!(our_instances().is_empty(), "left: {:?}", our_instances());
}

/// A pid no process has: a child that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    pid
}
