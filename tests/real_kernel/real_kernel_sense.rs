//! The bio tap on the real kernel: on a loop device this test creates, the tap (a private
//! tracefs instance with only block_getrq and block_rq_issue, filtered on the device) sees
//! a sequential batched fio job as almost all mergeable and a random one as almost none, at
//! nomerges=2 where the merge counters read zero for both; a paused tap records nothing and
//! resumes in the same instance with nothing left over; and no instance is left. Whether
//! its share agrees with the kernel's merges is `real_kernel_tap_agreement.rs`.
//! Gated by MERGETUNE_KERNEL_TESTS=1 (fails, never skips, when asked and unable to run).

use crate::kernel;

use mergetune_kernel::biosense::{SENSE_INSTANCE_PREFIX, TapBatch, TapEvent, TapParams, TapRead};
use mergetune_kernel::blockfs::{BioTap, RealFs};
use mergetune_logic::sampler::Sensed;
use mergetune_logic::sense::{Mergeable, SenseConfig, mergeable_percent};
use std::process::Command;
use std::time::{Duration, Instant};

/// Runs fio with `args` while the tap of `dev` is open, draining it every 50 ms; returns
/// what the tap counted and the stat delta.
fn tapped(
    fs: &mut RealFs,
    dev: &kernel::LoopDevice,
    args: &[String],
) -> (Sensed, kernel::StatDelta, u64) {
    let before = dev.stat();
    // Two events per bio (a request made, one issued): a ring buffer that holds 50 ms of
    // the batched job at this machine's rate.
    kernel::open_raw_tap(fs, dev, 4096);
    let mut child = kernel::spawn_fio(args);
    let start = Instant::now();
    let mut acc = Mergeable::new(SenseConfig::DEFAULT.pending_requests);
    let mut buf: Vec<TapEvent> = Vec::new();
    let mut lost = 0;
    loop {
        let done = child.try_wait().expect("wait fio").is_some();
        buf.clear();
        let d = fs
            .tap_drain(dev.name(), TapBatch::new(&mut buf, 1_000_000))
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
    fs.tap_drain(dev.name(), TapBatch::new(&mut buf, 1_000_000))
        .expect("drain");
    acc.extend(&buf);
    fs.tap_close(dev.name()).expect("close");
    let ms = start.elapsed().as_millis() as u64;
    (acc.sensed(ms), dev.stat().delta(&before), lost)
}

/// Puts `dev` at L3 (nomerges=2: the kernel merges nothing, the tap is what sees it) and
/// returns the sysfs to tap it through.
fn at_l3(dev: &kernel::LoopDevice) -> RealFs {
    dev.set_nomerges(2);
    mergetune_kernel::roots::KernelRoots::default().fs()
}

/// Dropping `fs` removes the tap instances it opened: none of this process's is left.
fn assert_dropping_leaves_no_instance(fs: RealFs) {
    drop(fs);
    assert!(our_instances().is_empty(), "left: {:?}", our_instances());
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
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn the_tap_sees_batched_sequential_as_mergeable_and_random_as_not_at_l3() {
    let (_k, dev) = kernel::require_tap_loop("real_kernel_sense", 600);
    dev.warm_up();
    let mut fs = at_l3(&dev);
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
    assert!(mergeable_percent(&s) >= 95.0, "sequential: {s:?}");
    assert!(our_instances().is_empty(), "left: {:?}", our_instances());

    let rand = kernel::job_rand(&dev, "randwrite", "32M");
    let (s, delta, lost) = tapped(&mut fs, &dev, &rand);
    eprintln!("random: {s:?}, lost {lost}, stat {delta}");
    assert_eq!(delta.merged(), 0, "{delta}");
    assert!(s.bios >= 8000, "the tap saw {} bios", s.bios);
    assert!(mergeable_percent(&s) <= 2.0, "random: {s:?}");

    // Other devices' bios never reach the tap: the filter is on this device's dev_t.
    assert_dropping_leaves_no_instance(fs);
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn a_dropped_realfs_removes_its_open_taps_and_stale_ones_go_at_the_next_open() {
    let (_k, dev) = kernel::require_tap_loop("real_kernel_sense_cleanup", 64);
    let mut fs = mergetune_kernel::roots::KernelRoots::default().fs();
    fs.tap_open(dev.name(), &TapParams::new(64)).unwrap();
    assert_eq!(our_instances().len(), 1);
    assert_dropping_leaves_no_instance(fs);

    // An instance named after a pid that is gone (a SIGKILLed daemon) is removed when a
    // tap next opens; the running test's own are not touched by that sweep.
    let dead = dead_pid();
    let stale = std::path::PathBuf::from("/sys/kernel/tracing/instances")
        .join(format!("{SENSE_INSTANCE_PREFIX}{dead}-7_0"));
    std::fs::create_dir(&stale).unwrap();
    let mut fs = mergetune_kernel::roots::KernelRoots::default().fs();
    fs.tap_open(dev.name(), &TapParams::new(64)).unwrap();
    let gone = !stale.exists();
    if !gone {
        let _ = std::fs::remove_dir(&stale);
    }
    fs.tap_close(dev.name()).unwrap();
    assert!(gone, "{} was not removed", stale.display());
    assert!(our_instances().is_empty(), "left: {:?}", our_instances());
}

/// Writes `count` 4 KiB blocks from block `seek` of `dev`, one direct bio each (dd).
fn dd_write(dev: &kernel::LoopDevice, seek: u64, count: u64) {
    let st = Command::new("dd")
        .args([
            "if=/dev/zero".to_string(),
            format!("of={}", dev.dev_str()),
            "bs=4k".into(),
            format!("seek={seek}"),
            format!("count={count}"),
            "oflag=direct".into(),
            "conv=notrunc".into(),
            "status=none".into(),
        ])
        .status()
        .expect("dd");
    assert!(st.success(), "dd to {} failed", dev.dev_str());
}

fn drain_all(fs: &mut RealFs, dev: &kernel::LoopDevice) -> Vec<TapEvent> {
    // The last events can still be on their way into the ring buffer.
    std::thread::sleep(Duration::from_millis(100));
    let mut buf = Vec::new();
    fs.tap_drain(dev.name(), TapBatch::new(&mut buf, 1_000_000))
        .expect("drain");
    buf
}

fn inode_of(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .ino()
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn a_paused_tap_records_nothing_and_resumes_in_the_same_instance_without_leftovers() {
    let (_k, dev) = kernel::require_tap_loop("real_kernel_sense_pause", 64);
    let mut fs = at_l3(&dev);
    let params = TapParams::new(64);
    fs.tap_open(dev.name(), &params).unwrap();
    let names = our_instances();
    assert_eq!(names.len(), 1, "{names:?}");
    let dir = std::path::Path::new("/sys/kernel/tracing/instances").join(&names[0]);
    let ino = inode_of(&dir);

    // A sample that leaves requests unread (as the 512-request cap does), then the pause.
    dd_write(&dev, 0, 64);
    std::thread::sleep(Duration::from_millis(100));
    let mut first = Vec::new();
    fs.tap_drain(dev.name(), TapBatch::new(&mut first, 8))
        .unwrap();
    let made = |evs: &[TapEvent]| evs.iter().filter(|e| e.counts_as_bio()).count();
    assert!(
        (1..=8).contains(&made(&first)),
        "the first sample saw {first:?}"
    );
    // Full: the rest of the sample is not read.
    let mut more = Vec::new();
    fs.tap_drain(dev.name(), TapBatch::new(&mut more, 8))
        .unwrap();
    assert!(more.is_empty(), "read past the cap: {more:?}");
    fs.tap_pause(dev.name()).unwrap();
    for ev in ["block_getrq", "block_rq_issue"] {
        assert_eq!(
            std::fs::read_to_string(dir.join(format!("events/block/{ev}/enable")))
                .unwrap()
                .trim(),
            "0",
            "a paused tap has {ev} off"
        );
    }

    // Bios queued while paused are not recorded.
    dd_write(&dev, 1000, 32);

    // The next open resumes the same instance, and its first drain holds neither the last
    // sample's unread rest nor what was queued while paused.
    fs.tap_open(dev.name(), &params).unwrap();
    assert_eq!(our_instances(), names);
    assert_eq!(inode_of(&dir), ino, "a resume reuses the instance");
    let stale = drain_all(&mut fs, &dev);
    assert!(stale.is_empty(), "after resume, before any I/O: {stale:?}");

    dd_write(&dev, 4000, 16);
    let fresh = drain_all(&mut fs, &dev);
    // Each direct write is a request made and issued before the next: none mergeable.
    assert_eq!(made(&fresh), 16, "{fresh:?}");
    assert_eq!(fresh.len(), 32, "{fresh:?}");
    assert_eq!(
        mergetune_logic::sense::sense(&fresh, SenseConfig::DEFAULT.pending_requests, 1).mergeable,
        0
    );
    for b in &fresh {
        // Block 4000 of 4 KiB is sector 32,000.
        assert!(
            (32_000..32_000 + 16 * 8).contains(&b.sector),
            "a bio from before the resume: {b:?}"
        );
    }

    // Other parameters: a new instance, not the paused one (the kernel rounds the size
    // to whole pages, so it is compared with what it read before, not with 128).
    let size_kb = || {
        std::fs::read_to_string(dir.join("buffer_size_kb"))
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    let small_kb = size_kb();
    fs.tap_pause(dev.name()).unwrap();
    fs.tap_open(dev.name(), &TapParams::new(128)).unwrap();
    assert_eq!(our_instances().len(), 1);
    assert!(size_kb() > small_kb, "{} KiB, was {small_kb}", size_kb());
    fs.tap_pause(dev.name()).unwrap();
    // A paused tap is still the RealFs's own: dropping it removes the instance.
    assert_dropping_leaves_no_instance(fs);
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn the_text_fallback_reads_the_same_bios_as_the_pages() {
    let (_k, dev) = kernel::require_tap_loop("real_kernel_sense_text", 64);
    let mut fs = at_l3(&dev);
    let mut seen = Vec::new();
    for read in [TapRead::Pages, TapRead::Text] {
        fs.tap_open(
            dev.name(),
            &TapParams {
                read,
                ..TapParams::new(64)
            },
        )
        .unwrap();
        assert_eq!(
            fs.tap_reads_raw_pages(dev.name()),
            Some(read == TapRead::Pages)
        );
        dd_write(&dev, 2000, 24);
        let bios = drain_all(&mut fs, &dev);
        fs.tap_close(dev.name()).unwrap();
        seen.push(
            bios.iter()
                .map(|b| (b.kind, b.dir, b.sector, b.nr_sectors))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(seen[0].len(), 48, "{:?}", seen[0]);
    assert_eq!(seen[0], seen[1], "pages and text disagree");
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
