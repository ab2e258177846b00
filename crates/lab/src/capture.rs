//! `mergetune trace capture`: record one device's block events from the tracing filesystem.
//!
//! blktrace's relay files are refused on locked-down kernels (docs/design.md); the tracing
//! filesystem's block events work and their merge counts equal the kernel's stat deltas.
//! The tracefs mechanics are the kernel layer's ([`mergetune_kernel::tracefs`]). The capture uses a
//! private tracefs instance (`instances/mergetune-PID`): its own ring
//! buffer and event switches, so the global buffer and other tools' tracing are untouched.
//! Every block event is filtered on the device's `dev_t`. Events are streamed from the
//! instance's `trace_pipe` to the output file while the capture runs, so a long capture
//! does not overrun the ring buffer. At the end (time up, Ctrl-C, SIGTERM or an error) the
//! events are switched off, a marker line ends the stream, and the instance is removed.
//! tracefs is mounted at /sys/kernel/tracing when it is not mounted, and left mounted.
//! The events go to a temp file next to `--output`, renamed over it only once the capture
//! has ended well: a capture that fails leaves an existing `--output` as it was.

use anyhow::{Context as _, bail};
use mergetune_kernel::tracefs::{
    self, EVENTS, Instance, TRACEFS_IN_SYSFS, device_number, kernel_release,
};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The line written through the instance's `trace_marker` after the last event: the reader
/// stops at it.
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
    /// Output file (tracefs text, readable by `mergetune-lab advise`).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Ring buffer per CPU, KiB.
    #[arg(long, default_value_t = 8192)]
    pub buffer_kb: u64,
    /// Root of sysfs (the device number and tracefs at kernel/tracing are found under it).
    #[arg(long, default_value = mergetune_kernel::roots::SYSFS)]
    pub sysfs_root: PathBuf,
    /// Root of procfs (the kernel release for the capture's header).
    #[arg(long, default_value = mergetune_kernel::roots::PROCFS)]
    pub procfs_root: PathBuf,
}

pub fn run(cmd: TraceCommand) -> anyhow::Result<i32> {
    match cmd {
        TraceCommand::Capture(a) => capture(&a),
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
            // `{:?}`: 1e300 is said as 1e300, not as its 301 digits.
            bail!(
                "--seconds {:?}: must be a number of seconds above 0 and at most {MAX_CAPTURE_SECONDS} (a week)",
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
            .map_err(|e| anyhow::anyhow!("--seconds {:?}: {e}", self.seconds))
    }
}

/// Sets up the private instance: tracefs mounted if it is not, instances of dead captures
/// swept, the ring buffer sized, and every block event this kernel has filtered on the
/// device's `dev_t` and switched on. Returns the events this kernel lacks.
fn open_instance(
    tracefs: &Path,
    procfs_root: &Path,
    buffer_kb: u64,
    major: u32,
    minor: u32,
) -> anyhow::Result<(Instance, Vec<&'static str>)> {
    if tracefs::ensure_mounted(tracefs)? {
        eprintln!("mounted tracefs at {}", tracefs.display());
    }
    for s in tracefs::sweep_dead_captures(tracefs, procfs_root) {
        match s.removed {
            Ok(()) => eprintln!(
                "removed stale tracefs instance {} (left by capture pid {}, which is gone)",
                s.dir.display(),
                s.pid
            ),
            Err(e) => eprintln!(
                "warning: cannot remove stale tracefs instance {}: {e}",
                s.dir.display()
            ),
        }
    }
    let mut inst = Instance::create(tracefs)?;
    inst.write("tracing_on", "0")?;
    inst.write("buffer_size_kb", &buffer_kb.to_string())?;
    let dev_t = ((major as u64) << 20) | minor as u64;
    let filter = format!("dev == {dev_t}");
    let mut skipped = Vec::new();
    for ev in EVENTS {
        if !inst.has_block_event(ev) {
            if ev == "block_bio_queue" {
                bail!("this kernel has no block:block_bio_queue tracepoint");
            }
            skipped.push(ev);
            continue;
        }
        inst.enable_block_event(ev, &filter)?;
    }
    Ok((inst, skipped))
}

/// The reader: streams trace_pipe into the file until it sees the end marker, counting
/// events and the ones the ring buffer lost.
fn spawn_reader(
    pipe: std::fs::File,
    out: std::fs::File,
) -> std::thread::JoinHandle<std::io::Result<(std::fs::File, CaptureStats)>> {
    std::thread::spawn(move || {
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
            if let Some(n) = mergetune_kernel::trace::lost_events(&line) {
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
    })
}

/// The reader's result once it has seen the end marker, if it does within `wait`.
fn join_within<T>(reader: std::thread::JoinHandle<T>, wait: Duration) -> Option<T> {
    let wait_until = Instant::now() + wait;
    while !reader.is_finished() && Instant::now() < wait_until {
        std::thread::sleep(Duration::from_millis(20));
    }
    if reader.is_finished() {
        reader.join().ok()
    } else {
        None
    }
}

/// The file's header: the device, what was asked and enabled, the kernel, and the device's
/// scheduler (`advise` prices and ladders the device for it).
fn write_header(
    out: &mut std::fs::File,
    a: &CaptureArgs,
    name: &str,
    (major, minor): (u32, u32),
    inst: &Instance,
    skipped: &[&str],
) -> anyhow::Result<()> {
    writeln!(
        out,
        "# mergetune trace capture: device {name} ({major},{minor}), {} s requested, events {}{}\n# kernel {}",
        a.seconds,
        inst.enabled().join(" "),
        if skipped.is_empty() {
            String::new()
        } else {
            format!(" (absent here: {})", skipped.join(" "))
        },
        kernel_release(&a.procfs_root).unwrap_or_default()
    )?;
    if let Some(s) = std::fs::read_to_string(
        a.sysfs_root
            .join("block")
            .join(name)
            .join("queue/scheduler"),
    )
    .ok()
    .and_then(|t| mergetune_kernel::scheduler::Reported::parse(&t))
    {
        writeln!(out, "# scheduler {s}")?;
    }
    Ok(())
}

/// The file's last line: the events written, how long, and what was interrupted or lost.
fn end_line(stats: &CaptureStats, took: Duration, interrupted: bool) -> String {
    format!(
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
    )
}

/// The capture, in order: refusals before anything is touched, the signal handlers, the
/// pending output, the instance, the reader, the recording until time is up or a signal,
/// then the end marker through the ring buffer, the footer and the rename. The instance,
/// the reader and the pending output each live across all of it.
fn capture(a: &CaptureArgs) -> anyhow::Result<i32> {
    // Refusals first, before anything is touched.
    let deadline = a.checked_duration()?;
    let (name, major, minor) = device_number(&a.device, &a.sysfs_root)?;
    let euid = rustix::process::geteuid().as_raw();
    if euid != 0 {
        bail!(
            "trace capture needs root: the tracing filesystem is root-only (running as uid {euid})"
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install the SIGINT/SIGTERM handler")?;
    }
    let (pending, mut out) = PendingOutput::create(&a.output)?;
    let tracefs = a.sysfs_root.join(TRACEFS_IN_SYSFS);
    let (mut inst, skipped) = open_instance(&tracefs, &a.procfs_root, a.buffer_kb, major, minor)?;
    write_header(&mut out, a, &name, (major, minor), &inst, &skipped)?;
    // The reader streams trace_pipe into the file until it sees the end marker.
    let pipe = std::fs::File::open(inst.dir().join("trace_pipe"))
        .with_context(|| format!("cannot open {}/trace_pipe", inst.dir().display()))?;
    let reader = spawn_reader(pipe, out);
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
        join_within(reader, Duration::from_secs(10))
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
    writeln!(file, "{}", end_line(&stats, took, interrupted))?;
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
            // Said short: a value such as 1e300 is not printed as its 301 digits.
            assert!(e.len() < 120, "{s}: {e}");
        }
        let e = args(1e300, 8192)
            .checked_duration()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--seconds 1e300: "), "{e}");
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
}
