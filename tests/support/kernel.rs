//! Harness for tests that run against the real kernel: loop devices, fio and the tracing
//! filesystem. Included by real-kernel test files with
//! `#[path = "support/kernel.rs"] mod kernel;`.
//!
//! Real-kernel tests are `#[ignore = "..."]`, so a plain `cargo test` reports them as ignored,
//! never as passed. They run with `-- --include-ignored` (or `--ignored`) and
//! `MERGETUNE_KERNEL_TESTS=1`, as `.ci/run` does. Once included, a test either runs or fails
//! with a message that says what is missing (the variable, root, fio, loop devices): it never
//! passes without having run. The variable stays as a second, explicit consent, because these
//! tests attach loop devices and write their queue settings as root.
//!
//! Safety: the harness only ever touches loop devices it attached itself (over a temp file,
//! checked through `/sys/block/loopN/loop/backing_file`), detaches them on drop (also when a
//! test panics), and uses its own tracefs instance, removed on drop.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use crate::needs::command_works;
use mergetune_kernel::biosense::TapParams;
use mergetune_kernel::blockfs::{BioTap, RealFs};
use std::time::{Duration, Instant};

/// The environment variable that turns real-kernel tests on.
pub const ENV_VAR: &str = "MERGETUNE_KERNEL_TESTS";
/// When set to 1, the facts test (re)writes the trace fixtures under `tests/fixtures/`.
pub const CAPTURE_ENV_VAR: &str = "MERGETUNE_CAPTURE_FIXTURES";

pub const TRACEFS: &str = "/sys/kernel/tracing";
const INSTANCE_PREFIX: &str = "mergetune-test-";
const LOCK_FILE: &str = "/run/lock/mergetune-kernel-tests.lock";

/// True when the real-kernel tests were asked for (`MERGETUNE_KERNEL_TESTS=1`).
pub fn kernel_tests_requested() -> bool {
    std::env::var(ENV_VAR)
        .map(|v| v.trim() == "1")
        .unwrap_or(false)
}

/// Held for the whole of a real-kernel test: serialises such tests inside one test binary
/// (a mutex) and across processes (an flock on a lock file), so that timings and tracefs
/// are not shared between two of them.
pub struct KernelSession {
    _guard: MutexGuard<'static, ()>,
    _lock: Option<fs::File>,
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Gate of every real-kernel test (each is also marked `#[ignore = "..."]`):
///
/// ```ignore
/// let _k = kernel::require_kernel("daemon_on_loop_device");
/// ```
///
/// Panics with a clear message unless `MERGETUNE_KERNEL_TESTS=1` is set and the process runs
/// as root with fio, losetup and loop-device support; otherwise returns the session that
/// serialises kernel tests. There is no way to skip: a test that was included but cannot run
/// must fail, not pass.
pub fn require_kernel(test: &str) -> KernelSession {
    if !kernel_tests_requested() {
        panic!(
            "{test}: a real-kernel test was included (--include-ignored or --ignored) but \
             {ENV_VAR}=1 is not set; run them as root with \
             `sudo {ENV_VAR}=1 cargo test --release -- --include-ignored`"
        );
    }
    let mut missing = Vec::new();
    let euid = rustix::process::geteuid().as_raw();
    if euid != 0 {
        missing.push(format!("root (running as uid {euid})"));
    }
    if !command_works("fio", &["--version"]) {
        missing.push("fio on PATH (apt-get install fio)".to_string());
    }
    if !command_works("losetup", &["--version"]) {
        missing.push("losetup on PATH (util-linux)".to_string());
    }
    if !Path::new("/dev/loop-control").exists() {
        missing.push("/dev/loop-control (modprobe loop)".to_string());
    }
    if !missing.is_empty() {
        panic!(
            "{test}: {ENV_VAR}=1 asks for real-kernel tests, but this machine lacks: {}",
            missing.join("; ")
        );
    }
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lock = take_file_lock();
    KernelSession {
        _guard: guard,
        _lock: lock,
    }
}

/// Gate of a real-kernel test that opens the bio tap: [`require_kernel`], then the tracing
/// filesystem mounted as the daemon mounts it.
pub fn require_tap_kernel(test: &str) -> KernelSession {
    let session = require_kernel(test);
    ensure_tracefs();
    session
}

/// [`require_kernel`], then a fresh loop device of `size_mib` MiB: the opening of most
/// real-kernel tests. Bound as `let (_k, dev) = ...`, the device is detached before the
/// session is released.
pub fn require_loop(test: &str, size_mib: u64) -> (KernelSession, LoopDevice) {
    let session = require_kernel(test);
    (session, LoopDevice::new(size_mib))
}

/// [`require_loop`] for a test that opens the bio tap ([`require_tap_kernel`]).
pub fn require_tap_loop(test: &str, size_mib: u64) -> (KernelSession, LoopDevice) {
    let session = require_tap_kernel(test);
    (session, LoopDevice::new(size_mib))
}

fn take_file_lock() -> Option<fs::File> {
    let _ = fs::create_dir_all("/run/lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .ok()?;
    // Blocks until the lock is free.
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).ok()?;
    Some(file)
}

/// The 17 fields of `/sys/block/<dev>/stat` (older kernels give fewer; missing ones are 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stat {
    pub fields: [u64; 17],
}

impl Stat {
    /// Parses the whitespace-separated fields of a `stat` file.
    pub fn parse(text: &str) -> Result<Stat, String> {
        let mut fields = [0u64; 17];
        let mut n = 0;
        for (i, word) in text.split_whitespace().enumerate() {
            if i >= 17 {
                break;
            }
            fields[i] = word
                .parse()
                .map_err(|e| format!("stat field {}: {word:?}: {e}", i + 1))?;
            n = i + 1;
        }
        if n < 11 {
            return Err(format!(
                "stat has {n} fields, expected at least 11: {text:?}"
            ));
        }
        Ok(Stat { fields })
    }
    pub fn reads(&self) -> u64 {
        self.fields[0]
    }
    pub fn reads_merged(&self) -> u64 {
        self.fields[1]
    }
    pub fn sectors_read(&self) -> u64 {
        self.fields[2]
    }
    pub fn writes(&self) -> u64 {
        self.fields[4]
    }
    pub fn writes_merged(&self) -> u64 {
        self.fields[5]
    }
    pub fn sectors_written(&self) -> u64 {
        self.fields[6]
    }
    pub fn in_flight(&self) -> u64 {
        self.fields[8]
    }
    /// Field-wise `self - earlier` for the four counters the tests use (the device is ours
    /// and fresh, so counters neither wrap nor reset during a test).
    pub fn delta(&self, earlier: &Stat) -> StatDelta {
        StatDelta {
            reads: self.reads() - earlier.reads(),
            reads_merged: self.reads_merged() - earlier.reads_merged(),
            writes: self.writes() - earlier.writes(),
            writes_merged: self.writes_merged() - earlier.writes_merged(),
        }
    }
}

/// Counter deltas of one measured run: completed requests and merged bios per direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatDelta {
    pub reads: u64,
    pub reads_merged: u64,
    pub writes: u64,
    pub writes_merged: u64,
}

impl StatDelta {
    pub fn merged(&self) -> u64 {
        self.reads_merged + self.writes_merged
    }
    pub fn completed(&self) -> u64 {
        self.reads + self.writes
    }
    /// Bios submitted: completed requests plus bios merged into them.
    pub fn bios(&self) -> u64 {
        self.completed() + self.merged()
    }
}

impl fmt::Display for StatDelta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reads {} (merged {}), writes {} (merged {})",
            self.reads, self.reads_merged, self.writes, self.writes_merged
        )
    }
}

/// A loop device over a sparse temp file, attached with `--direct-io=on`, detached on drop
/// (also when the test panics).
pub struct LoopDevice {
    name: String,
    dev_path: PathBuf,
    backing: PathBuf,
    _dir: tempfile::TempDir,
    detached: bool,
    /// Scheduler and nomerges found at attach time: a loop device keeps its queue settings
    /// after detach, so they are put back before detaching.
    original: Option<(String, String)>,
}

impl LoopDevice {
    /// Attaches a new loop device over a fresh sparse file of `size_mib` MiB. Panics with
    /// the reason when that fails (the caller asked for real-kernel tests).
    pub fn new(size_mib: u64) -> LoopDevice {
        let base = backing_dir();
        let dir = tempfile::Builder::new()
            .prefix("mergetune-loop-")
            .tempdir_in(&base)
            .unwrap_or_else(|e| panic!("cannot create a temp dir in {}: {e}", base.display()));
        let backing = dir.path().join("backing.img");
        let file = fs::File::create(&backing)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", backing.display()));
        file.set_len(size_mib * 1024 * 1024)
            .unwrap_or_else(|e| panic!("cannot size {}: {e}", backing.display()));
        drop(file);
        let out = Command::new("losetup")
            .args(["-f", "--show", "--direct-io=on"])
            .arg(&backing)
            .output()
            .unwrap_or_else(|e| panic!("cannot run losetup: {e}"));
        if !out.status.success() {
            panic!(
                "losetup -f --show --direct-io=on {} failed ({}): {}",
                backing.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let name = printed.strip_prefix("/dev/").unwrap_or("").to_string();
        let is_loop = name
            .strip_prefix("loop")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        let mut dev = LoopDevice {
            name,
            dev_path: PathBuf::from(&printed),
            backing,
            _dir: dir,
            detached: !is_loop,
            original: None,
        };
        assert!(
            is_loop,
            "losetup printed {printed:?}, not a /dev/loopN path"
        );
        // Make sure the device we got is over our file before touching anything of it.
        let recorded = dev.sys("loop/backing_file");
        let ours = fs::canonicalize(&dev.backing).unwrap();
        if Path::new(recorded.trim()) != ours {
            // Not ours: never detach or write to it.
            dev.detached = true;
            panic!(
                "{} reports backing file {:?}, expected {}",
                dev.name,
                recorded.trim(),
                ours.display()
            );
        }
        let dio = dev.sys("loop/dio");
        assert_eq!(
            dio.trim(),
            "1",
            "{}: direct I/O did not stick (loop/dio = {}); the backing filesystem of {} \
             must support O_DIRECT (set MERGETUNE_KERNEL_TEST_DIR to another directory)",
            dev.name,
            dio.trim(),
            dev.backing.display()
        );
        dev.original = Some((dev.scheduler(), dev.queue_attr("nomerges")));
        dev
    }

    /// The backing file's filesystem type (from /proc/mounts), e.g. `tmpfs`.
    pub fn backing_fs(&self) -> String {
        fs_type_of(&self.backing)
    }

    /// Kernel name, e.g. `loop3`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/dev/loop3`.
    pub fn dev_path(&self) -> &Path {
        &self.dev_path
    }

    /// The path as a string, for fio's `--filename=`.
    pub fn dev_str(&self) -> String {
        self.dev_path.display().to_string()
    }

    /// `/sys/block/loop3`.
    pub fn sys_dir(&self) -> PathBuf {
        Path::new("/sys/block").join(&self.name)
    }

    fn sys(&self, rel: &str) -> String {
        let p = self.sys_dir().join(rel);
        fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
    }

    /// (major, minor) from `/sys/block/loopN/dev`.
    pub fn major_minor(&self) -> (u32, u32) {
        let text = self.sys("dev");
        let (a, b) = text
            .trim()
            .split_once(':')
            .unwrap_or_else(|| panic!("bad dev {text:?}"));
        (a.parse().unwrap(), b.parse().unwrap())
    }

    /// The kernel-internal dev_t (`major << 20 | minor`), as tracepoint filters compare it.
    pub fn kernel_dev_t(&self) -> u64 {
        let (major, minor) = self.major_minor();
        ((major as u64) << 20) | minor as u64
    }

    /// Reads `queue/<attr>`, trimmed.
    pub fn queue_attr(&self, attr: &str) -> String {
        self.sys(&format!("queue/{attr}")).trim().to_string()
    }

    /// Writes `queue/<attr>` of this (our own) loop device.
    pub fn set_queue_attr(&self, attr: &str, value: &str) {
        let p = self.sys_dir().join("queue").join(attr);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", p.display()));
        f.write_all(value.as_bytes())
            .unwrap_or_else(|e| panic!("cannot write {value:?} to {}: {e}", p.display()));
    }

    /// The active scheduler (the bracketed entry of `queue/scheduler`).
    pub fn scheduler(&self) -> String {
        let text = self.queue_attr("scheduler");
        text.split_whitespace()
            .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
            .unwrap_or(text.as_str())
            .to_string()
    }

    pub fn set_scheduler(&self, sched: &str) {
        self.set_queue_attr("scheduler", sched);
        assert_eq!(
            self.scheduler(),
            sched,
            "{}: scheduler did not switch",
            self.name
        );
    }

    pub fn nomerges(&self) -> u8 {
        let v = self.queue_attr("nomerges");
        v.parse()
            .unwrap_or_else(|e| panic!("{}: nomerges {v:?}: {e}", self.name))
    }

    pub fn set_nomerges(&self, value: u8) {
        self.set_queue_attr("nomerges", &value.to_string());
        assert_eq!(
            self.nomerges(),
            value,
            "{}: nomerges did not stick",
            self.name
        );
    }

    /// Parsed `/sys/block/loopN/stat`.
    pub fn stat(&self) -> Stat {
        let text = self.sys("stat");
        Stat::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", self.name))
    }

    /// Runs one fio job and returns the stat delta it caused.
    pub fn measure(&self, args: &[String]) -> StatDelta {
        let before = self.stat();
        run_fio(args);
        self.wait_idle();
        self.stat().delta(&before)
    }

    /// Waits until no request is in flight (counters settled), at most 5 s.
    pub fn wait_idle(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.stat().in_flight() != 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A new loop device's first heavy run can be a cold outlier: run the merge-friendly
    /// and the merge-hostile job once each, unmeasured.
    pub fn warm_up(&self) {
        run_fio(&job_batched_seq(self, "write", "32M"));
        run_fio(&job_rand(self, "randread", "32M"));
        self.wait_idle();
    }

    /// `/sys/block/loopN/diskseq`: new for every disk the kernel makes, and for every file
    /// attached to a loop device.
    pub fn diskseq(&self) -> u64 {
        let t = self.sys("diskseq");
        t.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{}: diskseq {t:?}", self.name))
    }

    /// A fresh 600 MiB device on mq-deadline with merging on (L0), warmed up: the one the
    /// daemon tests run their loads on.
    pub fn mq_deadline_at_l0() -> LoopDevice {
        let dev = LoopDevice::new(600);
        dev.set_scheduler("mq-deadline");
        dev.set_nomerges(0);
        dev.warm_up();
        dev
    }

    /// Detaches the device and attaches another fresh file of `size_mib` MiB to the same
    /// loop device (what an operator does to reuse loopN): the same name and number, a new
    /// disk. Panics, touching nothing more, when the device was taken in between.
    pub fn reattach(&mut self, size_mib: u64) {
        self.detach_only();
        let next = self.backing.with_file_name("backing-2.img");
        let file = fs::File::create(&next).unwrap();
        file.set_len(size_mib * 1024 * 1024).unwrap();
        drop(file);
        self.attach(&next);
        self.backing = next;
    }

    /// Detaches the device (`losetup -d`), leaving it ours: [`LoopDevice::attach_same`]
    /// attaches the same backing file again. The queue and its values stay.
    pub fn detach_only(&mut self) {
        let out = Command::new("losetup")
            .arg("-d")
            .arg(&self.dev_path)
            .output()
            .unwrap();
        assert!(out.status.success(), "losetup -d: {out:?}");
    }

    /// Attaches the same backing file again after [`LoopDevice::detach_only`]. Panics,
    /// touching nothing more, when the device was taken in between.
    pub fn attach_same(&mut self) {
        let backing = self.backing.clone();
        self.attach(&backing);
    }

    /// Attaches `file` to this (detached) loop device again. Panics, touching nothing more,
    /// when the device was taken in between or holds another file.
    fn attach(&mut self, file: &Path) {
        let out = Command::new("losetup")
            .arg("--direct-io=on")
            .arg(&self.dev_path)
            .arg(file)
            .output()
            .unwrap();
        if !out.status.success() {
            // Someone else's now, or gone: never touched again.
            self.detached = true;
            panic!(
                "re-attaching {} failed: {}",
                self.dev_path.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let recorded = self.sys("loop/backing_file");
        if Path::new(recorded.trim()) != fs::canonicalize(file).unwrap() {
            self.detached = true;
            panic!("{} took another file: {recorded:?}", self.name);
        }
    }

    /// Detaches now (also done on drop).
    pub fn detach(&mut self) {
        if self.detached {
            return;
        }
        self.detached = true;
        if let Some((sched, nomerges)) = self.original.take() {
            let queue = self.sys_dir().join("queue");
            let _ = fs::write(queue.join("nomerges"), &nomerges);
            if !sched.is_empty() && sched != "-" {
                let _ = fs::write(queue.join("scheduler"), &sched);
            }
        }
        let mut last = String::new();
        for _ in 0..50 {
            match Command::new("losetup")
                .arg("-d")
                .arg(&self.dev_path)
                .output()
            {
                Ok(out) if out.status.success() => return,
                Ok(out) => last = String::from_utf8_lossy(&out.stderr).trim().to_string(),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "warning: could not detach {}: {last}",
            self.dev_path.display()
        );
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        self.detach();
    }
}

/// Where backing files go: `$MERGETUNE_KERNEL_TEST_DIR`, else /dev/shm when it is a tmpfs
/// (tmpfs takes O_DIRECT since 6.6; a file that random writes scattered over a disk
/// filesystem mounted with `discard` can take a minute to delete), else the temp dir.
fn backing_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("MERGETUNE_KERNEL_TEST_DIR") {
        return PathBuf::from(dir);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && fs_type_of(shm) == "tmpfs" {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// The filesystem type of the mount that holds `path` (longest mount-point prefix in
/// /proc/mounts); "unknown" when it cannot be told.
pub fn fs_type_of(path: &Path) -> String {
    let path = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let mut f = line.split_whitespace();
        let (Some(_), Some(mnt), Some(fstype)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let mnt = mnt.replace("\\040", " ");
        if path.starts_with(&mnt) && best.as_ref().is_none_or(|(len, _)| mnt.len() >= *len) {
            best = Some((mnt.len(), fstype.to_string()));
        }
    }
    best.map(|(_, t)| t)
        .unwrap_or_else(|| "unknown".to_string())
}

/// Runs fio with `args` and returns its stdout; panics with fio's output on failure.
pub fn run_fio(args: &[String]) -> String {
    let out = Command::new("fio")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run fio: {e}"));
    if !out.status.success() {
        panic!(
            "fio {} failed ({}):\n{}\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts fio with `args` in the background, its stderr kept for the failure message.
pub fn spawn_fio(args: &[String]) -> std::process::Child {
    Command::new("fio")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fio")
}

/// Opens the bio tap of `dev` with a ring buffer of `buffer_kb` per CPU, and checks that it
/// reads the binary pages: on this kernel the layouts are readable, so not the 10x dearer text.
pub fn open_raw_tap(fs: &mut RealFs, dev: &LoopDevice, buffer_kb: u64) {
    fs.tap_open(dev.name(), &TapParams::new(buffer_kb))
        .unwrap_or_else(|e| panic!("tap_open {}: {e}", dev.name()));
    assert_eq!(fs.tap_reads_raw_pages(dev.name()), Some(true));
}

/// `mergetune run` (with `extra` arguments) on `config`, its state in `state_dir`: its
/// environment plain (no `RUST_LOG`, no colour) and stdin closed. The caller says where
/// its output goes.
pub fn mergetune_run(config: &Path, state_dir: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mergetune"));
    c.arg("run")
        .args(extra)
        .arg("--config")
        .arg(config)
        .arg("--state-dir")
        .arg(state_dir)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    c
}

/// Kills `child` unless it has exited already, and reaps it (a test's daemon on drop).
pub fn kill_unless_exited(child: &mut std::process::Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The printable command line of a fio job.
pub fn fio_command_line(args: &[String]) -> String {
    let mut s = String::from("fio");
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// One fio job on `dev` as docs/design.md runs them: direct 4 KiB I/O through libaio at QD64;
/// `sizes` say how much, `submit` how it is submitted and reaped.
fn job(name: &str, dev: &LoopDevice, rw: &str, sizes: &[String], submit: [&str; 2]) -> Vec<String> {
    let mut v = vec![
        format!("--name={name}"),
        format!("--filename={}", dev.dev_str()),
        "--direct=1".to_string(),
        format!("--rw={rw}"),
        "--bs=4k".to_string(),
    ];
    v.extend_from_slice(sizes);
    v.extend(strings(&["--ioengine=libaio", "--iodepth=64"]));
    v.extend(strings(&submit));
    v
}

/// docs/design.md's merge-friendly job: sequential 4 KiB, libaio, QD64, submitted and reaped in
/// batches of 64. `rw` is `write` or `read`.
pub fn job_batched_seq(dev: &LoopDevice, rw: &str, size: &str) -> Vec<String> {
    job(
        "f",
        dev,
        rw,
        &[format!("--size={size}")],
        [
            "--iodepth_batch_submit=64",
            "--iodepth_batch_complete_min=64",
        ],
    )
}

/// docs/design.md's merge-hostile job: random 4 KiB over 512 MiB, `io_size` in total, libaio,
/// QD64, one I/O per submission. `rw` is `randread` or `randwrite`.
pub fn job_rand(dev: &LoopDevice, rw: &str, io_size: &str) -> Vec<String> {
    job(
        "h",
        dev,
        rw,
        &["--size=512M".to_string(), format!("--io_size={io_size}")],
        ["--norandommap", "--randrepeat=1"],
    )
}

/// A mixed load in one fio run: the batched sequential writer (size `size`) and, at the
/// same time, the unbatched random reader (io_size `size`) in the second half of the device.
pub fn job_mixed(dev: &LoopDevice, size: &str) -> Vec<String> {
    let mut v = Vec::new();
    v.push(format!("--filename={}", dev.dev_str()));
    v.extend(strings(&[
        "--direct=1",
        "--ioengine=libaio",
        "--bs=4k",
        "--iodepth=64",
        "--name=seqw",
        "--rw=write",
        "--offset=0",
    ]));
    v.push(format!("--size={size}"));
    v.extend(strings(&[
        "--iodepth_batch_submit=64",
        "--iodepth_batch_complete_min=64",
        "--name=randr",
        "--rw=randread",
        "--offset=256M",
        "--size=256M",
    ]));
    v.push(format!("--io_size={size}"));
    v.extend(strings(&["--norandommap", "--randrepeat=1"]));
    v
}

/// The block events a capture enables.
pub const TRACE_EVENTS: [&str; 6] = [
    "block_bio_queue",
    "block_bio_backmerge",
    "block_bio_frontmerge",
    "block_rq_issue",
    "block_rq_complete",
    "block_split",
];

/// A capture of the block tracepoints of one loop device, in a tracefs instance of its own
/// (its own ring buffer, so global tracing is left alone). Mounts tracefs at
/// /sys/kernel/tracing when it is not mounted (and leaves it mounted). Drop disables the
/// events, clears the buffer and removes the instance.
pub struct TraceCapture {
    instance: PathBuf,
}

impl TraceCapture {
    /// Starts capturing the block events of `dev` (filtered on its dev_t).
    pub fn start(dev: &LoopDevice) -> TraceCapture {
        ensure_tracefs();
        remove_stale_instances();
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let instance = Path::new(TRACEFS)
            .join("instances")
            .join(format!("{INSTANCE_PREFIX}{}-{n}", std::process::id()));
        fs::create_dir(&instance).unwrap_or_else(|e| {
            panic!("cannot create tracefs instance {}: {e}", instance.display())
        });
        let cap = TraceCapture { instance };
        // 8 MiB per CPU: the 32 MiB batched job writes about 16,500 events (about 1 MB).
        cap.write("buffer_size_kb", "8192");
        let filter = format!("dev == {}", dev.kernel_dev_t());
        for ev in TRACE_EVENTS {
            cap.write(&format!("events/block/{ev}/filter"), &filter);
            cap.write(&format!("events/block/{ev}/enable"), "1");
        }
        cap.write("trace", "");
        cap.write("tracing_on", "1");
        cap
    }

    fn write(&self, rel: &str, value: &str) {
        let p = self.instance.join(rel);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&p)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", p.display()));
        f.write_all(value.as_bytes())
            .unwrap_or_else(|e| panic!("cannot write {value:?} to {}: {e}", p.display()));
    }

    /// Empties the buffer (between two measured runs).
    pub fn clear(&self) {
        self.write("trace", "");
    }

    /// The `trace` text so far. Panics when the ring buffer lost events.
    pub fn read(&self) -> String {
        let p = self.instance.join("trace");
        let text =
            fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
        if let Some((held, written)) = entries_header(&text) {
            assert_eq!(
                held, written,
                "tracefs ring buffer overran ({held} of {written} events kept)"
            );
        }
        text
    }

    fn disable(&self) {
        for ev in TRACE_EVENTS {
            let p = self.instance.join(format!("events/block/{ev}/enable"));
            let _ = fs::write(p, "0");
        }
        let _ = fs::write(self.instance.join("tracing_on"), "0");
        let _ = fs::write(self.instance.join("trace"), "");
    }
}

impl Drop for TraceCapture {
    fn drop(&mut self) {
        self.disable();
        if let Err(e) = fs::remove_dir(&self.instance) {
            eprintln!(
                "warning: cannot remove tracefs instance {}: {e}",
                self.instance.display()
            );
        }
    }
}

/// Mounts the tracing filesystem at its usual place unless it is there already (the
/// kernel layer's own mount, so the tests mount it as the daemon does).
pub fn ensure_tracefs() {
    mergetune_kernel::tracefs::ensure_mounted(Path::new(TRACEFS)).unwrap_or_else(|e| panic!("{e}"));
}

/// Removes instances left by test processes that died without dropping their capture.
fn remove_stale_instances() {
    // Instances are named `PREFIX-PID-N`: the pid is the first part after the prefix.
    let pid_of = |name: &str| {
        name.strip_prefix(INSTANCE_PREFIX)?
            .split('-')
            .next()?
            .parse()
            .ok()
    };
    let events: Vec<String> = TRACE_EVENTS
        .iter()
        .map(|ev| format!("block/{ev}"))
        .collect();
    let events: Vec<&str> = events.iter().map(String::as_str).collect();
    mergetune_kernel::tracefs::sweep_dead_instances(
        Path::new(TRACEFS),
        Path::new("/proc"),
        pid_of,
        &events,
    );
}

/// `entries-in-buffer/entries-written: A/B` from the trace header.
fn entries_header(text: &str) -> Option<(u64, u64)> {
    let line = text
        .lines()
        .take(10)
        .find(|l| l.contains("entries-in-buffer/entries-written:"))?;
    let nums = line.split(':').nth(1)?.split_whitespace().next()?;
    let (a, b) = nums.split_once('/')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Counts the events of a `trace` text by event name (`block_bio_queue`, ...).
pub fn count_trace_events(text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        // "<task>-<pid> [cpu] flags timestamp: event: payload"
        let mut parts = line.splitn(3, ": ");
        let (Some(_), Some(event)) = (parts.next(), parts.next()) else {
            continue;
        };
        if event.starts_with("block_") {
            *counts.entry(event.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

/// Merge events (back and front) in a count map.
pub fn merge_events(counts: &BTreeMap<String, u64>) -> u64 {
    counts.get("block_bio_backmerge").copied().unwrap_or(0)
        + counts.get("block_bio_frontmerge").copied().unwrap_or(0)
}

pub fn event_count(counts: &BTreeMap<String, u64>, event: &str) -> u64 {
    counts.get(event).copied().unwrap_or(0)
}

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// nomerges of every block device that is not `except`, read only: a test asserts that
/// nothing but its own device changed.
pub fn other_devices_nomerges(except: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Ok(entries) = fs::read_dir("/sys/block") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == except {
                continue;
            }
            if let Ok(v) = fs::read_to_string(e.path().join("queue/nomerges")) {
                out.insert(name, v.trim().to_string());
            }
        }
    }
    out
}

/// A child process whose stdout and stderr are echoed (with the time since `t0`) and kept,
/// stopped with SIGTERM (then SIGKILL after 15 s) when dropped: the daemon and fio of the
/// real-kernel tests.
pub struct Proc {
    child: std::process::Child,
    log: std::sync::Arc<Mutex<Vec<(std::time::Duration, String)>>>,
}

impl Proc {
    pub fn spawn(what: &str, cmd: &mut Command, t0: std::time::Instant) -> Proc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let log = std::sync::Arc::new(Mutex::new(Vec::new()));
        let pipes: Vec<Box<dyn std::io::Read + Send>> = vec![
            Box::new(child.stderr.take().unwrap()),
            Box::new(child.stdout.take().unwrap()),
        ];
        for pipe in pipes {
            let log = std::sync::Arc::clone(&log);
            let what = what.to_string();
            std::thread::spawn(move || {
                for line in std::io::BufRead::lines(std::io::BufReader::new(pipe)) {
                    let Ok(line) = line else { break };
                    eprintln!("{what} [{:6.2}s] {line}", t0.elapsed().as_secs_f64());
                    log.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((t0.elapsed(), line));
                }
            });
        }
        Proc { child, log }
    }

    pub fn lines(&self) -> Vec<(std::time::Duration, String)> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn text(&self) -> String {
        self.lines()
            .iter()
            .map(|(t, l)| format!("[{:6.2}s] {l}", t.as_secs_f64()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn stop(&mut self) {
        if self.running() {
            // Our own child, not reaped yet.
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&self.child),
                rustix::process::Signal::TERM,
            );
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
            while self.running() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}
