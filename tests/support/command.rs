//! Running the built binary, or a tool, in a test: what it printed once it has exited 0
//! (its stderr in the failure message when it has not), and the fake host it runs on.
//! Each test binary uses a part of it.
#![allow(dead_code)]

use std::process::{Command, Output};

/// `cmd`'s output, asserting first that it exited 0 (the assertion shows its stderr).
pub fn succeeded(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `cmd` (the binary's `run`, say) pointed at the fake host under `root`: its sysfs,
/// procfs and state directory there.
pub fn on_tree<'c>(cmd: &'c mut Command, root: &std::path::Path) -> &'c mut Command {
    cmd.arg("--sysfs-root")
        .arg(root.join("sys"))
        .arg("--procfs-root")
        .arg(root.join("proc"))
        .arg("--state-dir")
        .arg(root.join("state"))
}

/// The arguments of one text-logged tick of the daemon that writes nothing.
pub const DRY_RUN_ONCE: [&str; 5] = ["--log-format", "text", "run", "--once", "--dry-run"];

/// One text-logged `run --once --dry-run` of the binary (with `extra` arguments) on the
/// fake host under `root`, its sysfs and procfs there, with `config` as its config file
/// (written to `root/c.toml`).
pub fn dry_run_once(root: &std::path::Path, config: &str, extra: &[&str]) -> Output {
    let c = root.join("c.toml");
    std::fs::write(&c, config).unwrap();
    Command::new(env!("CARGO_BIN_EXE_mergetune"))
        .args(DRY_RUN_ONCE)
        .args(extra)
        .arg("--config")
        .arg(&c)
        .arg("--sysfs-root")
        .arg(root.join("sys"))
        .arg("--procfs-root")
        .arg(root.join("proc"))
        .output()
        .unwrap()
}

/// A fake host with one disk, `sda`: all merges on under mq-deadline, and one line of
/// diskstats.
pub fn one_disk_tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let q = t.path().join("sys/block/sda/queue");
    std::fs::create_dir_all(&q).unwrap();
    std::fs::write(q.join("nomerges"), "0\n").unwrap();
    std::fs::write(q.join("scheduler"), "none [mq-deadline]\n").unwrap();
    std::fs::create_dir_all(t.path().join("proc")).unwrap();
    std::fs::write(
        t.path().join("proc/diskstats"),
        "   8 0 sda 100 0 800 10 100 0 800 10 0 20 20\n",
    )
    .unwrap();
    t
}

/// Waits for `child` to exit, polling its peak RSS (VmHWM in /proc/PID/status, KiB: its
/// own mm after exec, so nothing of the test process counts) every 5 ms; the high-water
/// mark only grows. Returns the exit status and that peak.
pub fn wait_with_peak_rss(child: &mut std::process::Child) -> (std::process::ExitStatus, u64) {
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status_path)
            && let Some(kb) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        {
            peak = peak.max(kb);
        }
        if let Some(st) = child.try_wait().unwrap() {
            return (st, peak);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A free loopback port (bound, then released: nothing listens on it afterwards).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The whole HTTP/1.1 response to `GET path` from `addr` (None: no answer in 5 s).
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// Everything a command printed: its stdout, then its stderr.
pub fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
