//! The daemon under an editor, a signal at start, a write that can never succeed and a
//! hostile tree: a reload of an empty config keeps the running one, a SIGHUP during the
//! start is handled, failing writes back off and say so once, a FIFO at the diskstats path
//! does not block the tick (nor the SIGTERM after it), attribute reads do not follow links
//! out of the tree, and `restore --procfs-root` checks records against the fake boot id.

use crate::command::text;
use crate::fakesys::{FakeSys, wait_until};
use crate::logs::Logs;
use crate::memkernel::{MemKernel, WriteFault};
use rustix::process::Signal;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn log_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Config that leaves sda alone: only `sdz` (absent) is included.
fn config_excluding_sda(fs: &FakeSys) -> std::path::PathBuf {
    fs.write(
        "mergetune.toml",
        &format!(
            "[daemon]\ninterval_ms = 50\nstate_dir = \"{}\"\n[devices]\ninclude = [\"sdz\"]\n[policy]\ncost_profile = \"lkml-2008\"\nwindow_ticks = 2\nmin_window_bios = 100\nmin_dwell_secs = 0\nmax_changes_per_hour = 100\n[metrics]\nlisten = \"\"\n",
            fs.p("state").display()
        ),
    )
}

#[test]
fn a_reload_of_an_emptied_config_keeps_the_running_one_and_says_so() {
    let fs = FakeSys::new();
    let cfg = config_excluding_sda(&fs);
    let log = fs.p("daemon.log");
    let mut d = fs.daemon(&cfg, &log);
    wait_until("the first tick", Duration::from_secs(10), || {
        log_of(&log).contains("tuners:")
    });
    // An editor that truncates before it writes: SIGHUP between the two.
    std::fs::write(&cfg, "").unwrap();
    d.signal(Signal::HUP);
    wait_until("the reload's verdict", Duration::from_secs(10), || {
        log_of(&log).contains("SIGHUP: new config")
    });
    // Under the built-in defaults (include = ["*"]) sda would step down within a second.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(fs.nomerges(), "0", "sda stays unmanaged:\n{}", log_of(&log));
    let l = log_of(&log);
    assert!(
        l.contains("keeping the old one") && l.contains("holds no settings"),
        "{l}"
    );
    d.signal(Signal::TERM);
    assert!(d.wait().success(), "{}", log_of(&log));
    // At start the same file is refused, naming it.
    let o = Command::new(env!("CARGO_BIN_EXE_mergetune"))
        .args(["check-config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("holds no settings"), "{}", text(&o));
}

#[test]
fn a_sighup_during_the_start_is_handled_not_fatal() {
    // SIGHUPs from the first log line on, through the start (config, lock, recovery,
    // endpoint): before, the first one in that window killed the daemon (exit 129).
    for round in 0..3 {
        let fs = FakeSys::new();
        let cfg = fs.config(&fs.p("state"), "127.0.0.1:0");
        let log = fs.p("daemon.log");
        let mut d = fs.daemon(&cfg, &log);
        let until = Instant::now() + Duration::from_secs(10);
        while log_of(&log).is_empty() {
            assert!(Instant::now() < until, "no log line");
            std::thread::sleep(Duration::from_micros(200));
        }
        let burst = Instant::now();
        while burst.elapsed() < Duration::from_millis(150) {
            if d.0.try_wait().unwrap().is_some() {
                break;
            }
            d.signal(Signal::HUP);
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            d.0.try_wait().unwrap().is_none(),
            "round {round}: a SIGHUP during the start killed the daemon: {:?}\n{}",
            d.0.try_wait(),
            log_of(&log)
        );
        d.signal(Signal::TERM);
        assert!(d.wait().success(), "{}", log_of(&log));
        assert!(
            log_of(&log).contains("SIGHUP: config reloaded"),
            "{}",
            log_of(&log)
        );
    }
}

#[test]
fn a_write_that_keeps_failing_backs_off_and_is_said_once() {
    use mergetune_daemon::adaptive::Daemon;
    let mut cfg = mergetune_logic::config::Config::default();
    cfg.daemon.interval_ms = 50;
    cfg.policy.window_ticks = 2;
    cfg.policy.min_dwell_secs = 0;
    cfg.policy.max_changes_per_hour = 100;
    cfg.policy.cost_profile = "lkml-2008".into();
    let mut d = Daemon::simulated(cfg);
    let mut fs = MemKernel::failing_sda(WriteFault::Immutable);
    let logs = Logs::default();
    logs.capture(|| {
        for t in 0..200u64 {
            d.tick(t * 50, &mut fs); // 10 s
        }
    });
    let text = logs.text();
    let warned: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("permission denied"))
        .collect();
    assert_eq!(warned.len(), 1, "said once:\n{text}");
    assert!(
        warned[0].contains("doubling") && warned[0].contains("nomerges"),
        "{}",
        warned[0]
    );
    // 100 ms doubling: tries at 0, 0.1, 0.3, 0.7, 1.5, 3.1, 6.3 s (and the windows'
    // rounding): not one every 100 ms (84 in 10 s before).
    assert!(
        (4..=9).contains(&fs.write_attempts),
        "{} tries in 10 s",
        fs.write_attempts
    );
    // Written again: the backoff starts over, and it is said.
    fs.faults.failing_devices.clear();
    logs.clear();
    logs.capture(|| {
        for t in 200..2000u64 {
            d.tick(t * 50, &mut fs);
        }
    });
    assert!(
        logs.text().contains("written again after"),
        "{}",
        logs.text()
    );
}

/// A tree of one disk whose diskstats path is a FIFO (no writer).
fn fifo_tree() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let q = root.path().join("sys/block/sda/queue");
    std::fs::create_dir_all(q.join("iosched")).unwrap();
    std::fs::write(q.join("nomerges"), "0\n").unwrap();
    std::fs::write(q.join("scheduler"), "none [mq-deadline]\n").unwrap();
    std::fs::write(q.join("iosched/front_merges"), "1\n").unwrap();
    std::fs::create_dir_all(root.path().join("proc")).unwrap();
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        root.path().join("proc/diskstats"),
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    root
}

#[test]
fn a_fifo_at_the_diskstats_path_neither_blocks_the_tick_nor_the_stop() {
    let t = fifo_tree();
    let log = t.path().join("daemon.log");
    let mut c = Command::new(env!("CARGO_BIN_EXE_mergetune"));
    c.args(["run", "--config", "/dev/null", "--metrics-listen", ""])
        .arg("--state-dir")
        .arg(t.path().join("state"))
        .arg("--sysfs-root")
        .arg(t.path().join("sys"))
        .arg("--procfs-root")
        .arg(t.path().join("proc"))
        .args(["--interval-ms", "50"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut d = crate::fakesys::Daemon(c.spawn().unwrap());
    wait_until("the diskstats error", Duration::from_secs(10), || {
        log_of(&log).contains("diskstats")
    });
    let l = log_of(&log);
    assert!(l.contains("a FIFO"), "the error says what is there:\n{l}");
    d.signal(Signal::TERM);
    let s = d.wait();
    assert!(s.success(), "{s:?}\n{}", log_of(&log));
}

#[test]
fn an_attribute_read_does_not_follow_a_link_out_of_the_tree() {
    use mergetune_kernel::blockfs::{FsError, RealFs, Sysfs};
    let d = tempfile::tempdir().unwrap();
    let q = d.path().join("sys/block/sda/queue");
    std::fs::create_dir_all(&q).unwrap();
    std::fs::write(d.path().join("outside"), "secret\n").unwrap();
    std::os::unix::fs::symlink(d.path().join("outside"), q.join("scheduler")).unwrap();
    std::fs::write(q.join("nomerges"), "0\n").unwrap();
    let mut fs = RealFs::new(d.path().join("sys"), d.path().join("proc"));
    assert_eq!(fs.read_attr("sda", "queue/nomerges").unwrap(), "0");
    let e = fs.read_attr("sda", "queue/scheduler").unwrap_err();
    assert!(matches!(e, FsError::Refused { .. }), "{e}");
    assert!(
        e.to_string().contains("queue/scheduler") && e.to_string().contains("outside"),
        "{e}"
    );
}

#[test]
fn restore_checks_records_against_the_boot_id_of_its_procfs_root() {
    let fs = FakeSys::new();
    fs.write(
        "proc/sys/kernel/random/boot_id",
        "0badc0de-fake-boot-0000-000000000000\n",
    );
    let state = fs.p("state");
    let cfg = fs.config(&state, "");
    let log = fs.p("daemon.log");
    let d = fs.daemon(&cfg, &log);
    fs.wait_nomerges("1", Duration::from_secs(20));
    drop(d); // SIGKILL: the records stay
    let mut c = Command::new(env!("CARGO_BIN_EXE_mergetune"));
    c.arg("restore").arg("--state-dir").arg(&state);
    fs.roots(&mut c);
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        fs.nomerges(),
        "0",
        "restored under the fake boot id: {}",
        text(&o)
    );
}

#[test]
fn a_recording_whose_only_line_is_cut_short_says_so() {
    let d = tempfile::tempdir().unwrap();
    let rec = d.path().join("rec.jsonl");
    std::fs::write(
        &rec,
        "{\"t_ms\": 0, \"diskstats\": \"   8       0 sda 1 0 8",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_mergetune"))
        .arg("replay")
        .arg(&rec)
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("line 1") && out.contains("cut short") && !out.contains("holds no tick"),
        "{out}"
    );
}
