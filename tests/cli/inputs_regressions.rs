//! Hostile inputs that once broke mergetune, each checked the way an operator would meet
//! it: a fake /sys and /proc tree under the daemon's own tick, the built binary on a bad
//! file, a scenario with values that broke the simulator.

use mergetune_daemon::actuator::Actuator;
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::state::MemoryStore;
use mergetune_kernel::blockfs::RealFs;
use mergetune_logic::config::Config;
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mergetune"))
}

use crate::logs::Logs;

/// A fake tree with whole disks `names`, each with the queue files the daemon reads.
struct Tree {
    root: tempfile::TempDir,
}

impl Tree {
    fn new(names: &[&str]) -> Tree {
        let root = tempfile::tempdir().unwrap();
        for name in names {
            let q = root.path().join("sys/block").join(name).join("queue");
            std::fs::create_dir_all(q.join("iosched")).unwrap();
            std::fs::write(q.join("nomerges"), "0\n").unwrap();
            std::fs::write(q.join("scheduler"), "none [mq-deadline] kyber\n").unwrap();
            std::fs::write(q.join("rotational"), "0\n").unwrap();
            std::fs::write(q.join("iosched/front_merges"), "1\n").unwrap();
            std::fs::create_dir_all(root.path().join("sys/block").join(name).join("slaves"))
                .unwrap();
        }
        std::fs::create_dir_all(root.path().join("proc")).unwrap();
        Tree { root }
    }
    fn fs(&self) -> RealFs {
        RealFs::new(self.root.path().join("sys"), self.root.path().join("proc"))
    }
    fn diskstats(&self, bytes: &[u8]) {
        std::fs::write(self.root.path().join("proc/diskstats"), bytes).unwrap();
    }
}

/// A dry-run daemon (it decides, never writes).
fn daemon() -> Daemon {
    Daemon::new(
        Config::default(),
        Actuator::new(true, Box::new(MemoryStore::default())),
    )
}

/// The fake tree with disks `names`, the daemon's view of it, a dry-run daemon and the
/// log to capture what it says.
fn dry_run_on(names: &[&str]) -> (Tree, RealFs, Daemon, Logs) {
    let tree = Tree::new(names);
    let fs = tree.fs();
    (tree, fs, daemon(), Logs::default())
}

/// A diskstats line whose write counters grow with `tick`.
fn line(minor: u32, name: &str, tick: u64) -> String {
    let w = 1000 + tick * 500;
    format!(
        "   8 {minor:>7} {name} 10 0 80 5 {w} 0 {} 40 0 50 50 0 0 0 0 0 0\n",
        w * 8
    )
}

#[test]
fn one_non_utf8_byte_costs_only_its_line_and_is_warned_once_per_change() {
    let (tree, mut fs, mut d, logs) = dry_run_on(&["sda", "sdb"]);
    logs.capture(|| {
        for tick in 0..10u64 {
            let mut text = line(0, "sda", tick).into_bytes();
            if tick < 6 {
                // sdb's third counter holds a byte that is not UTF-8 (one fault)...
                text.extend_from_slice(b"   8      16 sdb 1 2 \xff 4 5 6 7 8 0 9 10\n");
            } else {
                // ...then its line is cut short (another).
                text.extend_from_slice(b"   8      16 sdb 1 2 3\n");
            }
            tree.diskstats(&text);
            d.tick(tick * 1000, &mut fs);
            if tick == 5 {
                // While sdb's line holds the bad byte, sda is still read.
                let last = d.devices()["sda"].last_tick;
                assert_eq!(
                    last.map(|w| w.counters.writes_completed),
                    Some(500),
                    "{last:?}"
                );
                assert_eq!(d.devices()["sda"].last_tick_ms, 5000);
            }
        }
    });
    let warned = logs.warnings_about("sdb");
    assert_eq!(
        warned.len(),
        2,
        "one warning per change of sdb's fault: {warned:#?}"
    );
    assert!(warned[0].contains("line 2"), "{}", warned[0]);
    assert!(warned[1].contains("3 stat fields"), "{}", warned[1]);
    assert_eq!(
        d.counters.diskstats_errors, 10,
        "every read with a bad line counts"
    );
}

#[test]
fn a_duplicate_device_name_is_set_aside_until_unique_again() {
    let (tree, mut fs, mut d, logs) = dry_run_on(&["sda"]);
    let mut ticks_with_counters = Vec::new();
    logs.capture(|| {
        for tick in 0..12u64 {
            let mut text = line(0, "sda", tick);
            if tick < 6 {
                // A second "sda" (another device number, smaller counters).
                text.push_str(&line(16, "sda", 0));
            }
            tree.diskstats(text.as_bytes());
            d.tick(tick * 1000, &mut fs);
            // (At tick 0 the device is discovered, with that time.)
            if tick > 0 && d.devices()["sda"].last_tick_ms == tick * 1000 {
                ticks_with_counters.push((tick, d.devices()["sda"].last_tick));
            }
        }
    });
    assert_eq!(d.counters.counter_resets, 0, "no phantom reset every tick");
    // While the name is ambiguous nothing is read for it; once unique, the first read is a
    // fresh start and the next a real delta (500 writes per tick, no phantom rate).
    let ticks: Vec<u64> = ticks_with_counters.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        ticks,
        (6..12).collect::<Vec<_>>(),
        "{ticks_with_counters:?}"
    );
    let last = d.devices()["sda"].last_tick.unwrap();
    assert_eq!(last.counters.writes_completed, 500);
    let warned = logs.warnings_about("\"sda\"");
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert!(warned[0].contains("lines (1, 2)"), "{}", warned[0]);
    let infos: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| l.contains("INFO") && l.contains("sda"))
        .collect();
    assert!(
        infos.len() <= 3,
        "no INFO line every tick (device found, unique again): {infos:#?}"
    );
}

#[test]
fn an_empty_diskstats_is_warned_once_and_counted() {
    let (tree, mut fs, mut d, logs) = dry_run_on(&["sda"]);
    logs.capture(|| {
        for tick in 0..5u64 {
            tree.diskstats(b"");
            d.tick(tick * 1000, &mut fs);
        }
        tree.diskstats(line(0, "sda", 5).as_bytes());
        d.tick(5000, &mut fs);
    });
    assert_eq!(d.counters.diskstats_errors, 5);
    let warned = logs.warnings_about("diskstats");
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert!(warned[0].contains("no device"), "{}", warned[0]);
}

#[test]
fn replay_of_a_recording_whose_time_goes_backwards_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rec.jsonl");
    // Two runs appended to one file: the second starts again at 0.
    std::fs::write(&p, "{\"t_ms\": 1000}\n{\"t_ms\": 2000}\n\n{\"t_ms\": 0}\n").unwrap();
    let out = bin().arg("replay").arg(&p).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "stdout: {stdout}");
    assert!(
        stderr.contains("rec.jsonl") && stderr.contains("line 4") && stderr.contains("t_ms"),
        "{stderr}"
    );
    assert!(
        !stdout.contains("ticks over"),
        "no (underflowed) span printed: {stdout}"
    );
}

fn write_trace(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("trace.txt");
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn advise_on_a_trace_without_usable_bios_says_so_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    // Queue events of size 0 (corrupt, or flushes only) and the requests they made.
    let body = crate::traces::sequential(50, |t, s| {
        format!(
            "  fio-1 [000] ..... {t:.6}: block_bio_queue: 7,0 W {s} + 0 [fio]\n\
             \x20 fio-1 [000] ..... {t:.6}: block_rq_issue: 7,0 W 4096 () {s} + 8 be,0,4 [fio]\n\
             \x20 fio-1 [000] ..... {t:.6}: block_rq_complete: 7,0 W () {s} + 8 be,0,4 [0]\n"
        )
    });
    let p = write_trace(dir.path(), &body);
    let out = crate::lab::lab().arg("advise").arg(&p).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "stdout: {stdout}");
    assert!(stderr.contains("no usable bio"), "{stderr}");
    assert!(
        !stdout.contains("nomerges=2"),
        "no advice from no data: {stdout}"
    );
}

#[test]
fn a_failed_trace_capture_leaves_an_existing_output_untouched() {
    // A fake sysfs: the device exists, tracefs has instances/ but its instance has none of
    // tracefs's files, so the capture fails after its first checks.
    let root = tempfile::tempdir().unwrap();
    let sys = root.path().join("sys");
    std::fs::create_dir_all(sys.join("class/block/fake0")).unwrap();
    std::fs::write(sys.join("class/block/fake0/dev"), "7:99\n").unwrap();
    std::fs::create_dir_all(sys.join("kernel/tracing/instances")).unwrap();
    std::fs::create_dir_all(root.path().join("proc")).unwrap();
    let out_dir = root.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let output = out_dir.join("precious.txt");
    std::fs::write(&output, "yesterday's capture\n").unwrap();
    let out = crate::lab::lab()
        .args(["trace", "capture", "--device", "fake0", "--seconds", "1"])
        .arg("--sysfs-root")
        .arg(&sys)
        .arg("--procfs-root")
        .arg(root.path().join("proc"))
        .arg("-o")
        .arg(&output)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    if rustix::process::geteuid().is_root() {
        // It got past creating its output: as far as the tracefs instance.
        assert!(stderr.contains("instances/mergetune-"), "{stderr}");
    } else {
        assert!(stderr.contains("needs root"), "{stderr}");
    }
    assert_eq!(
        std::fs::read_to_string(&output).unwrap(),
        "yesterday's capture\n"
    );
    let left: Vec<_> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "no temp file left behind: {left:?}");
}

fn scenario(device_extra: &str, job_extra: &str, phases: usize) -> String {
    let mut s = format!("[[device]]\nname = \"sda\"\nkind = \"ssd\"\n{device_extra}\n");
    for i in 0..phases {
        s.push_str(&format!(
            "[[phase]]\nname = \"p{i}\"\nduration_s = 1000000.0\n\
             [[phase.job]]\nname = \"j\"\ndevice = \"sda\"\n{job_extra}\n"
        ));
    }
    s
}

fn scenario_error(text: &str) -> String {
    match mergetune_sim::scenario::Scenario::from_toml_str(text, "t.toml", None) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn scenario_values_that_broke_the_simulator_are_refused_naming_the_key() {
    let cases: [(&str, &str, usize, &str); 9] = [
        ("bandwidth_mb_s = 1e-300", "", 1, "device[0].bandwidth_mb_s"),
        ("bandwidth_mb_s = 1e300", "", 1, "device[0].bandwidth_mb_s"),
        (
            "read_overhead_us = 1e300",
            "",
            1,
            "device[0].read_overhead_us",
        ),
        ("", "iodepth = 65536\nnumjobs = 1024", 1, "phase[0].job[0]"),
        (
            "",
            "think_time_us = 1e300",
            1,
            "phase[0].job[0].think_time_us",
        ),
        ("", "rate_iops = 1e-300", 1, "phase[0].job[0].rate_iops"),
        (
            "",
            "trace_plug_gap_us = 1e300",
            1,
            "phase[0].job[0].trace_plug_gap_us",
        ),
        // Each phase is within bounds, the sum is not.
        ("", "", 3, "phase"),
        ("", "read_percent = nan", 1, "phase[0].job[0].read_percent"),
    ];
    for (dev, job, phases, key) in cases {
        let e = scenario_error(&scenario(dev, job, phases));
        assert!(e.contains(&format!("`{key}")), "{dev} {job}: {e}");
    }
    // The bounds leave real setups alone.
    let ok = scenario("bandwidth_mb_s = 3000.0", "iodepth = 256\nnumjobs = 64", 1);
    mergetune_sim::scenario::Scenario::from_toml_str(&ok, "t.toml", None).unwrap();
}

/// Peak RSS (VmHWM, KiB) of `mergetune ARGS`, polled while it runs, and its exit status.
fn peak_rss_kib(args: &[&std::ffi::OsStr]) -> (bool, u64) {
    let mut child = crate::lab::lab()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (status, peak) = crate::command::wait_with_peak_rss(&mut child);
    (status.success(), peak)
}

#[test]
fn advise_reads_a_50_mb_file_without_newline_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("one-line.txt");
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
        let chunk = [b'x'; 1 << 16];
        for _ in 0..800 {
            f.write_all(&chunk).unwrap(); // 50 MiB, no newline
        }
    }
    let (ok, peak) = peak_rss_kib(&[std::ffi::OsStr::new("advise"), p.as_os_str()]);
    eprintln!("advise on a 50 MiB line: peak RSS {peak} KiB");
    assert!(!ok, "no bios in it: advise must fail");
    assert!(
        peak < 40 * 1024,
        "peak RSS {peak} KiB: the line was held whole (50 MiB)"
    );
}
