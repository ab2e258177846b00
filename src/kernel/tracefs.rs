//! `mergetune trace capture`: record one device's block events from the tracing filesystem.
//!
//! blktrace's relay files are refused on locked-down kernels (docs/design.md); the tracing
//! filesystem's block events work and their merge counts equal the kernel's stat deltas.
//! The capture uses a private tracefs instance (`instances/mergetune-PID`): its own ring
//! buffer and event switches, so the global buffer and other tools' tracing are untouched.
//! Every block event is filtered on the device's `dev_t`. Events are streamed from the
//! instance's `trace_pipe` to the output file while the capture runs, so a long capture
//! does not overrun the ring buffer. At the end (time up, Ctrl-C, SIGTERM or an error) the
//! events are switched off, a marker line ends the stream, and the instance is removed.
//! tracefs is mounted at /sys/kernel/tracing when it is not mounted, and left mounted.
//! The events go to a temp file next to `--output`, renamed over it only once the capture
//! has ended well: a capture that fails leaves an existing `--output` as it was.

use anyhow::{Context as _, bail};
use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Where tracefs lives, relative to the sysfs root (/sys/kernel/tracing on a real machine).
pub const TRACEFS_IN_SYSFS: &str = "kernel/tracing";
pub const INSTANCE_PREFIX: &str = "mergetune-";
/// Events enabled, in this order; those this kernel lacks are skipped (block_bio_queue is
/// required). Plug events name no device and cannot be filtered: left out.
pub const EVENTS: [&str; 8] = [
    "block_bio_queue",
    "block_bio_backmerge",
    "block_bio_frontmerge",
    "block_rq_insert",
    "block_rq_issue",
    "block_rq_complete",
    "block_rq_requeue",
    "block_split",
];
const END_MARKER: &str = "mergetune-capture-end";

#[derive(Debug, Clone, clap::Subcommand)]
pub enum TraceCommand {
    /// Record one device's block events from the tracing filesystem (root).
    Capture(CaptureArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct CaptureArgs {
    /// The device: a name under /sys/block (loop0, sda) or /dev/NAME.
    #[arg(long)]
    pub device: String,
    /// How long to record, in seconds (Ctrl-C stops earlier and keeps what was recorded).
    #[arg(long)]
    pub seconds: f64,
    /// Output file (tracefs text, readable by `mergetune advise`).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Ring buffer per CPU, KiB.
    #[arg(long, default_value_t = 8192)]
    pub buffer_kb: u64,
    /// Root of sysfs (the device number and tracefs at kernel/tracing are found under it).
    #[arg(long, default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Root of procfs (the kernel release for the capture's header).
    #[arg(long, default_value = "/proc")]
    pub procfs_root: PathBuf,
}

pub fn run(cmd: TraceCommand) -> anyhow::Result<i32> {
    match cmd {
        TraceCommand::Capture(a) => capture(&a),
    }
}

/// The device's `(major, minor)` from `<sysfs>/class/block/NAME/dev` (partitions too).
pub fn device_number(name: &str, sysfs_root: &Path) -> anyhow::Result<(String, u32, u32)> {
    let name = name.trim().trim_start_matches("/dev/").to_string();
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        bail!("--device {name:?}: not a block device name");
    }
    let p = sysfs_root.join("class/block").join(&name).join("dev");
    let text = std::fs::read_to_string(&p).map_err(|e| {
        anyhow::anyhow!(
            "--device {name}: no such block device ({}: {e})",
            p.display()
        )
    })?;
    let (a, b) = text
        .trim()
        .split_once(':')
        .with_context(|| format!("{}: unexpected content {text:?}", p.display()))?;
    Ok((name, a.parse()?, b.parse()?))
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn ensure_tracefs(tracefs: &Path) -> anyhow::Result<()> {
    if tracefs.join("instances").is_dir() {
        return Ok(());
    }
    let src = CString::new("nodev")?;
    let target = CString::new(tracefs.as_os_str().as_encoded_bytes())?;
    let fstype = CString::new("tracefs")?;
    // SAFETY: valid NUL-terminated strings, no data argument.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        bail!(
            "tracefs is not mounted and mounting it at {} failed: {}",
            tracefs.display(),
            std::io::Error::last_os_error()
        );
    }
    if !tracefs.join("instances").is_dir() {
        bail!(
            "tracefs mounted at {} but it has no instances/ directory",
            tracefs.display()
        );
    }
    eprintln!("mounted tracefs at {}", tracefs.display());
    Ok(())
}

/// The pid a capture instance is named after (`mergetune-PID`), if `name` is one.
pub fn instance_pid(name: &str) -> Option<u32> {
    name.strip_prefix(INSTANCE_PREFIX)?.parse().ok()
}

/// What a sweep did with one instance of a dead process.
#[derive(Debug)]
pub struct Swept {
    pub dir: PathBuf,
    pub pid: u32,
    /// The removal's outcome (an instance still in use elsewhere cannot be removed).
    pub removed: std::io::Result<()>,
}

/// Removes the tracefs instances whose name `pid_of` maps to a pid that is gone (a
/// SIGKILLed process cannot clean up after itself, and an instance's ring buffer stays
/// allocated until someone does). The `events` (paths under the instance's `events/`) are
/// switched off first, as the owner's own cleanup does. An instance whose pid is alive is
/// left alone, whatever that process is now; so is one of this process. Shared by the
/// capture (`mergetune-PID`) and the bio tap (`mergetune-sense-PID-MAJ_MIN`): neither
/// prefix matches the other's names.
pub fn sweep_dead_instances(
    tracefs: &Path,
    procfs_root: &Path,
    pid_of: impl Fn(&str) -> Option<u32>,
    events: &[&str],
) -> Vec<Swept> {
    let Ok(entries) = std::fs::read_dir(tracefs.join("instances")) else {
        return Vec::new();
    };
    let mut swept = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(&pid_of) else {
            continue;
        };
        if pid == std::process::id() || procfs_root.join(pid.to_string()).exists() {
            continue;
        }
        let dir = e.path();
        for ev in events {
            let _ = std::fs::write(dir.join("events").join(ev).join("enable"), "0");
        }
        let removed = std::fs::remove_dir(&dir);
        swept.push(Swept { dir, pid, removed });
    }
    swept
}

/// Removes the instances of captures whose process is gone. Returns what was removed.
fn remove_stale_instances(tracefs: &Path, procfs_root: &Path) -> Vec<(PathBuf, u32)> {
    let events: Vec<String> = EVENTS.iter().map(|ev| format!("block/{ev}")).collect();
    let events: Vec<&str> = events.iter().map(String::as_str).collect();
    let mut removed = Vec::new();
    for s in sweep_dead_instances(tracefs, procfs_root, instance_pid, &events) {
        match s.removed {
            Ok(()) => removed.push((s.dir, s.pid)),
            Err(e) => eprintln!(
                "warning: cannot remove stale tracefs instance {}: {e}",
                s.dir.display()
            ),
        }
    }
    removed
}

/// A private tracefs instance: events off and the directory removed on drop (also on
/// error or panic).
struct Instance {
    dir: PathBuf,
    enabled: Vec<&'static str>,
}

impl Instance {
    fn create(tracefs: &Path) -> anyhow::Result<Instance> {
        let dir = tracefs
            .join("instances")
            .join(format!("{INSTANCE_PREFIX}{}", std::process::id()));
        std::fs::create_dir(&dir)
            .with_context(|| format!("cannot create tracefs instance {}", dir.display()))?;
        Ok(Instance {
            dir,
            enabled: Vec::new(),
        })
    }

    fn write(&self, rel: &str, value: &str) -> anyhow::Result<()> {
        let p = self.dir.join(rel);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&p)
            .with_context(|| format!("cannot open {}", p.display()))?;
        f.write_all(value.as_bytes())
            .with_context(|| format!("cannot write {value:?} to {}", p.display()))
    }

    fn disable(&mut self) {
        for ev in self.enabled.drain(..) {
            let _ = std::fs::write(self.dir.join(format!("events/block/{ev}/enable")), "0");
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.disable();
        let _ = std::fs::write(self.dir.join("tracing_on"), "0");
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!(
                "warning: cannot remove tracefs instance {}: {e}",
                self.dir.display()
            );
        }
    }
}

/// The capture's output while it is written: a temp file in `--output`'s directory (so
/// the final rename stays on one filesystem). [`PendingOutput::commit`] renames it over
/// `--output`; dropped without that (any failure), it is removed and `--output` is left
/// as it was.
struct PendingOutput {
    tmp: PathBuf,
    dest: PathBuf,
    committed: bool,
}

impl PendingOutput {
    fn create(dest: &Path) -> anyhow::Result<(PendingOutput, std::fs::File)> {
        let name = dest
            .file_name()
            .with_context(|| format!("--output {}: names no file", dest.display()))?;
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let tmp = dir.join(format!(
            ".{}.mergetune-{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        let f = std::fs::File::create(&tmp).with_context(|| {
            format!(
                "cannot create {} (the capture is written there, then renamed to {})",
                tmp.display(),
                dest.display()
            )
        })?;
        Ok((
            PendingOutput {
                tmp,
                dest: dest.to_path_buf(),
                committed: false,
            },
            f,
        ))
    }

    fn commit(mut self) -> anyhow::Result<()> {
        std::fs::rename(&self.tmp, &self.dest).with_context(|| {
            format!(
                "cannot rename {} to {}",
                self.tmp.display(),
                self.dest.display()
            )
        })?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for PendingOutput {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Summary of a capture.
#[derive(Debug, Clone, Default)]
pub struct CaptureStats {
    pub events: u64,
    pub lost: u64,
    pub bytes: u64,
}

/// The longest capture, in seconds: a week (a capture streams to disk; longer is a typo).
pub const MAX_CAPTURE_SECONDS: f64 = 7.0 * 24.0 * 3600.0;
/// The largest ring buffer per CPU, KiB (1 GiB).
pub const MAX_BUFFER_KB: u64 = 1 << 20;

impl CaptureArgs {
    /// The arguments checked, before anything is touched: how long to record. A duration
    /// that does not fit a `Duration` (1e300 s) must be refused here, not panic after the
    /// instance is set up.
    pub fn checked_duration(&self) -> anyhow::Result<Duration> {
        if !(self.seconds.is_finite() && self.seconds > 0.0 && self.seconds <= MAX_CAPTURE_SECONDS)
        {
            bail!(
                "--seconds {}: must be a number of seconds above 0 and at most {MAX_CAPTURE_SECONDS} (a week)",
                self.seconds
            );
        }
        if !(1..=MAX_BUFFER_KB).contains(&self.buffer_kb) {
            bail!(
                "--buffer-kb {}: must be 1..={MAX_BUFFER_KB}",
                self.buffer_kb
            );
        }
        Duration::try_from_secs_f64(self.seconds)
            .map_err(|e| anyhow::anyhow!("--seconds {}: {e}", self.seconds))
    }
}

/// The running kernel's release (`uname -r`), from `<procfs>/sys/kernel/osrelease`.
pub fn kernel_release(procfs_root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(procfs_root.join("sys/kernel/osrelease")).ok()?;
    let r = text.trim();
    (!r.is_empty()).then(|| r.to_string())
}

fn capture(a: &CaptureArgs) -> anyhow::Result<i32> {
    // Refusals first, before anything is touched.
    let deadline = a.checked_duration()?;
    let (name, major, minor) = device_number(&a.device, &a.sysfs_root)?;
    if euid() != 0 {
        bail!(
            "trace capture needs root: the tracing filesystem is root-only (running as uid {})",
            euid()
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install the SIGINT/SIGTERM handler")?;
    }
    let (pending, mut out) = PendingOutput::create(&a.output)?;
    let tracefs = a.sysfs_root.join(TRACEFS_IN_SYSFS);
    ensure_tracefs(&tracefs)?;
    for (dir, pid) in remove_stale_instances(&tracefs, &a.procfs_root) {
        eprintln!(
            "removed stale tracefs instance {} (left by capture pid {pid}, which is gone)",
            dir.display()
        );
    }
    let mut inst = Instance::create(&tracefs)?;
    inst.write("tracing_on", "0")?;
    inst.write("buffer_size_kb", &a.buffer_kb.to_string())?;
    let dev_t = ((major as u64) << 20) | minor as u64;
    let filter = format!("dev == {dev_t}");
    let mut skipped = Vec::new();
    for ev in EVENTS {
        let base = format!("events/block/{ev}");
        if !inst.dir.join(&base).is_dir() {
            if ev == "block_bio_queue" {
                bail!("this kernel has no block:block_bio_queue tracepoint");
            }
            skipped.push(ev);
            continue;
        }
        inst.write(&format!("{base}/filter"), &filter)?;
        inst.write(&format!("{base}/enable"), "1")?;
        inst.enabled.push(ev);
    }
    writeln!(
        out,
        "# mergetune trace capture: device {name} ({major},{minor}), {} s requested, events {}{}\n# kernel {}",
        a.seconds,
        inst.enabled.join(" "),
        if skipped.is_empty() {
            String::new()
        } else {
            format!(" (absent here: {})", skipped.join(" "))
        },
        kernel_release(&a.procfs_root).unwrap_or_default()
    )?;
    // The reader streams trace_pipe into the file until it sees the end marker.
    let pipe = std::fs::File::open(inst.dir.join("trace_pipe"))
        .with_context(|| format!("cannot open {}/trace_pipe", inst.dir.display()))?;
    let reader = std::thread::spawn(move || -> std::io::Result<(std::fs::File, CaptureStats)> {
        let mut stats = CaptureStats::default();
        let mut r = BufReader::with_capacity(1 << 16, pipe);
        let mut w = std::io::BufWriter::with_capacity(1 << 16, out);
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line)? == 0 {
                break;
            }
            if line.contains(END_MARKER) {
                break;
            }
            if let Some(n) = crate::kernel::trace::lost_events(&line) {
                stats.lost += n;
            } else {
                stats.events += 1;
            }
            stats.bytes += line.len() as u64;
            w.write_all(line.as_bytes())?;
        }
        w.flush()?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        Ok((f, stats))
    });
    inst.write("tracing_on", "1")?;
    let start = Instant::now();
    eprintln!(
        "recording block events of {name} ({major},{minor}) for {} s into {} (Ctrl-C stops)",
        a.seconds,
        a.output.display()
    );
    while start.elapsed() < deadline && !stop.load(Ordering::Relaxed) && !reader.is_finished() {
        std::thread::sleep(Duration::from_millis(50).min(deadline.saturating_sub(start.elapsed())));
    }
    let took = start.elapsed();
    let interrupted = stop.load(Ordering::Relaxed);
    inst.disable();
    // The marker goes through the same ring buffer, after the last block event.
    let marker = inst.write("trace_marker", END_MARKER);
    let _ = inst.write("tracing_on", "0");
    let result = if marker.is_ok() {
        let wait_until = Instant::now() + Duration::from_secs(10);
        while !reader.is_finished() && Instant::now() < wait_until {
            std::thread::sleep(Duration::from_millis(20));
        }
        if reader.is_finished() {
            reader.join().ok()
        } else {
            None
        }
    } else {
        None
    };
    drop(inst);
    let (mut file, stats) = match result {
        Some(Ok(v)) => v,
        Some(Err(e)) => bail!("writing {}: {e}", pending.tmp.display()),
        None => bail!(
            "the trace reader did not finish; {} was left as it was",
            a.output.display()
        ),
    };
    writeln!(
        file,
        "# end of capture: {} events in {:.2} s{}{}",
        stats.events,
        took.as_secs_f64(),
        if interrupted { ", interrupted" } else { "" },
        if stats.lost > 0 {
            format!(
                ", {} events LOST (ring buffer overran: raise --buffer-kb)",
                stats.lost
            )
        } else {
            String::new()
        }
    )?;
    file.sync_all()
        .with_context(|| format!("writing {}", pending.tmp.display()))?;
    drop(file);
    pending.commit()?;
    println!(
        "{}: {} block events of {name} in {:.2} s{}{}",
        a.output.display(),
        stats.events,
        took.as_secs_f64(),
        if interrupted { " (interrupted)" } else { "" },
        if stats.lost > 0 {
            format!("; {} events lost, raise --buffer-kb", stats.lost)
        } else {
            String::new()
        }
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(seconds: f64, buffer_kb: u64) -> CaptureArgs {
        CaptureArgs {
            device: "loop0".into(),
            seconds,
            output: "/nonexistent/out.txt".into(),
            buffer_kb,
            sysfs_root: "/nonexistent".into(),
            procfs_root: "/nonexistent".into(),
        }
    }

    #[test]
    fn capture_arguments_out_of_range_are_refused_not_a_panic() {
        for s in [1e300, f64::MAX, f64::INFINITY, f64::NAN, 0.0, -5.0, 1e9] {
            let e = args(s, 8192).checked_duration().unwrap_err().to_string();
            assert!(e.contains("--seconds"), "{s}: {e}");
        }
        for kb in [0, u64::MAX] {
            let e = args(1.0, kb).checked_duration().unwrap_err().to_string();
            assert!(e.contains("--buffer-kb"), "{kb}: {e}");
        }
        assert_eq!(
            args(2.5, 8192).checked_duration().unwrap(),
            Duration::from_millis(2500)
        );
        assert_eq!(
            args(MAX_CAPTURE_SECONDS, 8192).checked_duration().unwrap(),
            Duration::from_secs(7 * 24 * 3600)
        );
    }

    #[test]
    fn only_capture_instances_name_a_pid() {
        assert_eq!(instance_pid("mergetune-4242"), Some(4242));
        assert_eq!(instance_pid("mergetune-"), None);
        assert_eq!(instance_pid("mergetune-12x"), None);
        assert_eq!(instance_pid("perf-4242"), None);
    }

    #[test]
    fn stale_instances_of_dead_pids_go_live_ones_stay() {
        // A fake tracefs and procfs: rmdir of a plain empty directory stands for tracefs's.
        let root = tempfile::tempdir().unwrap();
        let tracefs = root.path().join("tracing");
        let procfs = root.path().join("proc");
        std::fs::create_dir_all(tracefs.join("instances/mergetune-111")).unwrap();
        std::fs::create_dir_all(tracefs.join("instances/mergetune-222")).unwrap();
        std::fs::create_dir_all(tracefs.join("instances/someone-else-333")).unwrap();
        std::fs::create_dir_all(procfs.join("222")).unwrap();
        let removed = remove_stale_instances(&tracefs, &procfs);
        assert_eq!(removed.len(), 1, "{removed:?}");
        assert_eq!(removed[0].1, 111);
        assert!(!tracefs.join("instances/mergetune-111").exists());
        assert!(tracefs.join("instances/mergetune-222").exists());
        assert!(tracefs.join("instances/someone-else-333").exists());
    }
}
