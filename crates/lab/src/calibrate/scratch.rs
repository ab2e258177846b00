//! The scratch loop device calibrate measures on: attached by this process over its own
//! file on a tmpfs (never an existing device), checked to be ours, detached and removed on
//! drop; and the clean-up of one a killed calibrate left behind.
//!
//! A loop device's queue outlives its attachment: the scheduler and `nomerges` calibrate
//! sets would be the next user's. So the values found at attach are kept (in memory, and in
//! a file beside the backing file for the clean-up after a kill) and put back before the
//! device is detached.

use anyhow::{Context, Result, bail};
use mergetune_kernel::scheduler::{Reported, Scheduler};
use mergetune_logic::decision::Level;
use std::path::{Path, PathBuf};
use std::process::Command;

const BACKING_PREFIX: &str = "mergetune-calibrate-";
/// Beside the backing file: the queue's values found at attach.
const QUEUE_ORIGINAL_FILE: &str = "queue-original.json";
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// A loop device this process attached over its own tmpfs file; detached and the file
/// removed on drop.
pub(super) struct ScratchLoop {
    /// The sysfs root the device's queue is read and written under (`/sys`).
    sysfs_root: PathBuf,
    pub(super) dev: PathBuf,
    pub(super) name: String,
    pub(super) dir: PathBuf,
    pub(super) direct_io: bool,
    /// The queue as it was found at attach, put back before the detach.
    original: Option<QueueOriginal>,
    /// Whether the device was seen over our file: only then is it ours to detach.
    ours: bool,
}

/// A loop device's queue values calibrate changes, as they were before.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueOriginal {
    scheduler: Reported,
    nomerges: u8,
}

impl QueueOriginal {
    /// Reads them from the queue of loop device `name` under `sysfs_root`.
    fn read(sysfs_root: &Path, name: &str) -> Result<QueueOriginal> {
        let q = sysfs_root.join("block").join(name).join("queue");
        let read = |f: &str| {
            let p = q.join(f);
            std::fs::read_to_string(&p).with_context(|| format!("read {}", p.display()))
        };
        let sched_text = read("scheduler")?;
        let scheduler = Reported::parse(&sched_text)
            .with_context(|| format!("{}: no active scheduler in {sched_text:?}", q.display()))?;
        let nomerges_text = read("nomerges")?;
        let nomerges = nomerges_text.trim().parse().with_context(|| {
            format!(
                "{}/nomerges: {nomerges_text:?} is not a number",
                q.display()
            )
        })?;
        Ok(QueueOriginal {
            scheduler,
            nomerges,
        })
    }

    /// Writes them back: nomerges first, then the scheduler (a switch that would drop the
    /// scheduler's own tunables comes last).
    fn put_back(&self, sysfs_root: &Path, name: &str) -> Result<()> {
        let q = sysfs_root.join("block").join(name).join("queue");
        for (f, v) in [
            ("nomerges", self.nomerges.to_string()),
            ("scheduler", self.scheduler.to_string()),
        ] {
            let p = q.join(f);
            std::fs::write(&p, &v).with_context(|| format!("write {v} to {}", p.display()))?;
        }
        Ok(())
    }

    fn save(&self, dir: &Path) -> Result<()> {
        let p = dir.join(QUEUE_ORIGINAL_FILE);
        let text = serde_json::to_string(self).context("serialise the queue's values")?;
        std::fs::write(&p, text).with_context(|| format!("write {}", p.display()))
    }

    /// What a killed run saved; None where it saved nothing readable.
    fn load(dir: &Path) -> Option<QueueOriginal> {
        let text = std::fs::read_to_string(dir.join(QUEUE_ORIGINAL_FILE)).ok()?;
        serde_json::from_str(&text).ok()
    }
}

pub(super) fn run_cmd(cmd: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {cmd}"))?;
    if !out.status.success() {
        bail!(
            "{cmd} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn is_tmpfs(dir: &Path) -> Result<bool> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    let st = match rustix::fs::statfs(c.as_c_str()) {
        Ok(st) => st,
        Err(e) => bail!("statfs {}: {}", dir.display(), std::io::Error::from(e)),
    };
    Ok(st.f_type as i64 == TMPFS_MAGIC)
}

fn pid_alive(procfs_root: &Path, pid: u32) -> bool {
    procfs_root.join(pid.to_string()).exists()
}

/// Detaches loop devices left by a calibrate run that was killed (its backing file is
/// ours by name, and its process is gone); returns their names.
pub(super) fn detach_leftovers(
    tmpfs_dir: &Path,
    sysfs_root: &Path,
    procfs_root: &Path,
) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(sysfs_root.join("block")) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let Ok(back) = std::fs::read_to_string(e.path().join("loop/backing_file")) else {
            continue;
        };
        let back = PathBuf::from(back.trim().trim_end_matches(" (deleted)"));
        let Some(parent) = back.parent() else {
            continue;
        };
        let Some(dname) = parent.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        let Some(pid) = dname
            .strip_prefix(BACKING_PREFIX)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if parent.parent() != Some(tmpfs_dir) || pid_alive(procfs_root, pid) {
            continue;
        }
        if let Some(orig) = QueueOriginal::load(parent)
            && let Err(e) = orig.put_back(sysfs_root, &name)
        {
            eprintln!("mergetune-lab calibrate: {name}: cannot put its queue back: {e:#}");
        }
        let dev = format!("/dev/{name}");
        if run_cmd("losetup", &["-d", &dev]).is_ok() {
            let _ = std::fs::remove_dir_all(parent);
            out.push(name);
        }
    }
    out
}

impl ScratchLoop {
    /// Attaches a loop device over a new `size_mib` file under `tmpfs_dir`; its queue is
    /// then read and written under `sysfs_root`.
    pub(super) fn create(
        tmpfs_dir: &Path,
        size_mib: u64,
        sysfs_root: &Path,
    ) -> Result<ScratchLoop> {
        if !is_tmpfs(tmpfs_dir)? {
            bail!(
                "{} is not a tmpfs: the measurement must not wait for a device (--tmpfs-dir)",
                tmpfs_dir.display()
            );
        }
        let dir = tmpfs_dir.join(format!("{BACKING_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        let file = dir.join("backing");
        let f = std::fs::File::create(&file).with_context(|| format!("{}", file.display()))?;
        // Real pages, not holes: reads of a hole would not copy anything.
        let len = size_mib * 1024 * 1024;
        if let Err(e) = rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, len) {
            let e = std::io::Error::from(e);
            let _ = std::fs::remove_dir_all(&dir);
            bail!("fallocate {}: {e}", file.display());
        }
        drop(f);
        let fstr = file.to_string_lossy().into_owned();
        let dev = match run_cmd("losetup", &["-f", "--show", "--direct-io=on", &fstr]) {
            Ok(d) => d,
            // Direct I/O refused on this tmpfs: a buffered loop, said in the profile.
            Err(_) => match run_cmd("losetup", &["-f", "--show", &fstr]) {
                Ok(d) => d,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(e);
                }
            },
        };
        let dev = PathBuf::from(dev);
        let name = dev
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut lp = ScratchLoop {
            sysfs_root: sysfs_root.to_path_buf(),
            dev,
            name,
            dir,
            direct_io: false,
            original: None,
            ours: false,
        };
        if !lp.name.starts_with("loop") {
            bail!("losetup printed {}, not a loop device", lp.dev.display());
        }
        let back = lp.sys("loop/backing_file")?;
        if back.trim() != fstr {
            bail!(
                "{}: backing file is {back:?}, not ours ({fstr}): refusing to use it",
                lp.name
            );
        }
        lp.ours = true;
        lp.direct_io = lp.sys("loop/dio")?.trim() == "1";
        let original = QueueOriginal::read(&lp.sysfs_root, &lp.name)?;
        original.save(&lp.dir)?;
        lp.original = Some(original);
        Ok(lp)
    }

    pub(super) fn sys_path(&self, rel: &str) -> PathBuf {
        self.sysfs_root.join("block").join(&self.name).join(rel)
    }

    pub(super) fn sys(&self, rel: &str) -> Result<String> {
        let p = self.sys_path(rel);
        std::fs::read_to_string(&p).with_context(|| format!("read {}", p.display()))
    }

    fn set(&self, rel: &str, value: &str) -> Result<()> {
        let p = self.sys_path(rel);
        std::fs::write(&p, value).with_context(|| format!("write {value} to {}", p.display()))
    }

    pub(super) fn set_scheduler(&self, s: Scheduler) -> Result<()> {
        self.set("queue/scheduler", s.name())?;
        let now = self.sys("queue/scheduler")?;
        if !now.contains(&format!("[{}]", s.name())) {
            bail!("{}: scheduler {} did not take: {now}", self.name, s.name());
        }
        Ok(())
    }

    /// Of `wanted`, the schedulers this kernel can run on the scratch device, tried up
    /// front (one listed in `queue/scheduler`, or one its module loads for), and those it
    /// cannot, said on stderr: a kernel without bfq must not cost a run its every other
    /// cell and then fail. None at all is an error.
    pub(super) fn usable_schedulers(&self, wanted: &[Scheduler]) -> Result<Vec<Scheduler>> {
        let mut usable = Vec::new();
        for &s in wanted {
            match self.set_scheduler(s) {
                Ok(()) => usable.push(s),
                Err(e) => eprintln!(
                    "calibrate: skipping scheduler {}: this kernel does not offer it ({e:#})",
                    s.name()
                ),
            }
        }
        if usable.is_empty() {
            bail!(
                "--schedulers: this kernel offers none of {}",
                wanted
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(usable)
    }

    pub(super) fn set_level(&self, s: Scheduler, l: Level) -> Result<()> {
        if s == Scheduler::MqDeadline {
            self.set("queue/iosched/front_merges", &l.front_merges().to_string())?;
        }
        self.set("queue/nomerges", &l.nomerges().to_string())
    }

    /// Reads completed, reads merged (the jobs only read).
    pub(super) fn read_counts(&self) -> Result<(u64, u64)> {
        let s = self.sys("stat")?;
        let f: Vec<u64> = s
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        if f.len() < 2 {
            bail!("{}: short stat line {s:?}", self.name);
        }
        Ok((f[0], f[1]))
    }
}

impl Drop for ScratchLoop {
    fn drop(&mut self) {
        if !self.ours {
            let _ = std::fs::remove_dir_all(&self.dir);
            return;
        }
        if let Some(orig) = self.original.take()
            && let Err(e) = orig.put_back(&self.sysfs_root, &self.name)
        {
            eprintln!(
                "mergetune-lab calibrate: {}: cannot put its queue back: {e:#}",
                self.name
            );
        }
        let dev = self.dev.to_string_lossy().into_owned();
        if let Err(e) = run_cmd("losetup", &["-d", &dev]) {
            eprintln!("mergetune-lab calibrate: cannot detach {dev}: {e:#}");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_queue(root: &Path, scheduler: &str, nomerges: &str) -> PathBuf {
        let q = root.join("block/loop9/queue");
        std::fs::create_dir_all(&q).unwrap();
        std::fs::write(q.join("scheduler"), scheduler).unwrap();
        std::fs::write(q.join("nomerges"), nomerges).unwrap();
        q
    }

    #[test]
    fn the_queue_found_at_attach_is_what_is_put_back_and_what_a_killed_run_left_says() {
        let t = tempfile::tempdir().unwrap();
        let q = fake_queue(t.path(), "none [mq-deadline] kyber\n", "1\n");
        let orig = QueueOriginal::read(t.path(), "loop9").unwrap();
        assert_eq!(
            orig,
            QueueOriginal {
                scheduler: Scheduler::MqDeadline.into(),
                nomerges: 1
            }
        );
        // What calibrate does to it, then the put-back.
        std::fs::write(q.join("scheduler"), "[none] mq-deadline kyber\n").unwrap();
        std::fs::write(q.join("nomerges"), "2\n").unwrap();
        orig.put_back(t.path(), "loop9").unwrap();
        assert_eq!(
            std::fs::read_to_string(q.join("scheduler")).unwrap(),
            "mq-deadline"
        );
        assert_eq!(std::fs::read_to_string(q.join("nomerges")).unwrap(), "1");
        // Saved beside the backing file, it is read back whole by the clean-up after a kill.
        let dir = t.path().join("mergetune-calibrate-1");
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(QueueOriginal::load(&dir), None, "nothing saved yet");
        orig.save(&dir).unwrap();
        assert_eq!(QueueOriginal::load(&dir), Some(orig));
        std::fs::write(dir.join(QUEUE_ORIGINAL_FILE), "{\"scheduler\": 3}").unwrap();
        assert_eq!(
            QueueOriginal::load(&dir),
            None,
            "a damaged file is no original"
        );
    }

    #[test]
    fn a_queue_that_cannot_be_read_is_refused_with_its_path() {
        let t = tempfile::tempdir().unwrap();
        fake_queue(t.path(), "mq-deadline kyber\n", "0\n");
        let e = format!("{:#}", QueueOriginal::read(t.path(), "loop9").unwrap_err());
        assert!(e.contains("loop9/queue: no active scheduler"), "{e}");
        fake_queue(t.path(), "[none]\n", "two\n");
        let e = format!("{:#}", QueueOriginal::read(t.path(), "loop9").unwrap_err());
        assert!(
            e.contains("loop9/queue/nomerges: \"two\\n\" is not a number"),
            "{e}"
        );
        let e = format!("{:#}", QueueOriginal::read(t.path(), "loop8").unwrap_err());
        assert!(e.contains("loop8/queue/scheduler"), "{e}");
    }
}
