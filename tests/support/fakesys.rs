//! A small fake sysfs/procfs tree for running the built binary live, for the state and
//! descriptor tests: one mq-deadline disk `sda` whose counters a thread moves as random
//! 4 KiB traffic (nothing merges), a state directory, a runtime directory (for the pointer)
//! and a config. Included with `#[path = "support/fakesys.rs"] mod fakesys;`.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub struct FakeSys {
    /// First, so that it stops before the tree goes.
    traffic: Option<Ticker>,
    pub root: tempfile::TempDir,
    /// Sequential traffic (63 of 64 bios merge, none at nomerges 2) instead of random.
    pub merging: Arc<AtomicBool>,
}

/// A thread that calls `step` every `period` until it is dropped, then is joined: a fake
/// tree's traffic.
pub struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    pub fn every(period: Duration, mut step: impl FnMut() + Send + 'static) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                step();
                std::thread::sleep(period);
            }
        });
        Ticker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes `text` to `path` as the kernel's files change: all at once (a rename).
pub fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

impl FakeSys {
    /// The tree, with traffic running.
    pub fn new() -> FakeSys {
        let root = tempfile::tempdir().unwrap();
        let q = root.path().join("sys/block/sda/queue");
        std::fs::create_dir_all(q.join("iosched")).unwrap();
        std::fs::create_dir_all(root.path().join("sys/block/sda/slaves")).unwrap();
        std::fs::write(q.join("nomerges"), "0\n").unwrap();
        // A device number: records name their disk, and its claim is by number.
        std::fs::write(root.path().join("sys/block/sda/dev"), "8:0\n").unwrap();
        std::fs::write(q.join("scheduler"), "none [mq-deadline] kyber\n").unwrap();
        std::fs::write(q.join("rotational"), "0\n").unwrap();
        std::fs::write(q.join("iosched/front_merges"), "1\n").unwrap();
        std::fs::create_dir_all(root.path().join("proc")).unwrap();
        std::fs::create_dir_all(root.path().join("run")).unwrap();
        let mut fs = FakeSys {
            traffic: None,
            root,
            merging: Arc::new(AtomicBool::new(false)),
        };
        let diskstats = fs.p("proc/diskstats");
        let nomerges = fs.p("sys/block/sda/queue/nomerges");
        let merging = fs.merging.clone();
        let (mut writes, mut merged, mut sectors) = (0u64, 0u64, 0u64);
        fs.traffic = Some(Ticker::every(Duration::from_millis(10), move || {
            let nm = std::fs::read_to_string(&nomerges).unwrap_or_default();
            let m = if merging.load(Ordering::Relaxed) && nm.trim() != "2" {
                504
            } else {
                0
            };
            writes += 512 - m;
            merged += m;
            sectors += 512 * 8;
            write_atomic(
                &diskstats,
                &format!("   8       0 sda 0 0 0 0 {writes} {merged} {sectors} 0 0 0 0\n"),
            );
        }));
        fs
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }
    /// Writes `text` to the file `rel` under the root, making its directories; its path.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.p(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }
    pub fn sys(&self) -> PathBuf {
        self.p("sys")
    }
    pub fn run_dir(&self) -> PathBuf {
        self.p("run")
    }
    pub fn nomerges(&self) -> String {
        std::fs::read_to_string(self.p("sys/block/sda/queue/nomerges"))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// Writes `mergetune.toml` with this state directory and metrics address; its path.
    pub fn config(&self, state_dir: &Path, listen: &str) -> PathBuf {
        let path = self.p("mergetune.toml");
        std::fs::write(
            &path,
            format!(
                r#"[daemon]
interval_ms = 50
state_dir = "{}"

[policy]
cost_profile = "lkml-2008"
window_ticks = 2
min_window_bios = 100
min_dwell_secs = 0
max_changes_per_hour = 100

[metrics]
listen = "{listen}"
"#,
                state_dir.display()
            ),
        )
        .unwrap();
        path
    }

    /// `mergetune run` live on this tree, its log in `log`.
    pub fn daemon(&self, config: &Path, log: &Path) -> Daemon {
        let mut c = Command::new(env!("CARGO_BIN_EXE_mergetune"));
        c.arg("run").arg("--config").arg(config);
        self.roots(&mut c);
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap());
        Daemon(c.spawn().unwrap())
    }

    /// The hidden roots every command takes here (sysfs, runtime; procfs for `run` and
    /// `restore`).
    pub fn roots(&self, c: &mut Command) {
        c.arg("--sysfs-root")
            .arg(self.sys())
            .arg("--runtime-dir")
            .arg(self.run_dir());
        let reads_procfs = c
            .get_args()
            .next()
            .is_some_and(|a| a == "run" || a == "restore");
        if reads_procfs {
            c.arg("--procfs-root").arg(self.p("proc"));
        }
    }

    /// `mergetune` with `args` on this tree (the hidden roots added): its output.
    pub fn mergetune(&self, args: &[&OsStr]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_mergetune"));
        c.args(args);
        self.roots(&mut c);
        c.output().unwrap()
    }

    /// [`FakeSys::mergetune`] that must refuse (exit 1): what it said.
    pub fn refused(&self, args: &[&OsStr]) -> String {
        let o = self.mergetune(args);
        let said = crate::command::text(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {said}");
        said
    }

    /// Stops `d` with SIGTERM: it exits 0, and sda is back at nomerges 0.
    pub fn stop_restored(&self, d: &mut Daemon) {
        d.signal(rustix::process::Signal::TERM);
        assert!(d.wait().success());
        assert_eq!(self.nomerges(), "0");
    }

    /// Waits until sda is at nomerges `value` (the ladder's L2 here is 1), or fails.
    pub fn wait_nomerges(&self, value: &str, timeout: Duration) {
        let until = Instant::now() + timeout;
        while self.nomerges() != value {
            assert!(
                Instant::now() < until,
                "sda never reached nomerges {value} (it is {})",
                self.nomerges()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub struct Daemon(pub Child);

impl Daemon {
    pub fn signal(&self, sig: rustix::process::Signal) {
        // Our own child, not reaped yet.
        rustix::process::kill_process(rustix::process::Pid::from_child(&self.0), sig).unwrap();
    }
    /// Waits (at most 15 s) for the exit.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        let until = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < until, "the daemon did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (at most `timeout`) until `f` holds.
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
