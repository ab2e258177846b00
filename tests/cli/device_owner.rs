//! One owner per device, whatever the state directories: a second daemon's start-up
//! recovery, `calibrate --state-dir` and `calibrate --device` each see a live daemon and
//! leave its records and its device alone, naming its pid; `restore --state-dir X` with X
//! missing says so and reads nothing else; a lock file that is not a regular file is named
//! for what it is. The built binaries, live, on a fake sysfs tree.

use crate::command::text;
use crate::fakesys::{FakeSys, wait_until};
use std::process::Output;
use std::time::Duration;

/// A config like `fs.config`'s, at `name`, with its own state directory.
fn second_config(
    fs: &FakeSys,
    first: &std::path::Path,
    name: &str,
    dir: &str,
) -> std::path::PathBuf {
    let text = std::fs::read_to_string(first).unwrap();
    let old = format!("state_dir = \"{}\"", fs.p("state-a").display());
    let new = format!("state_dir = \"{}\"", fs.p(dir).display());
    assert!(text.contains(&old));
    let p = fs.p(name);
    std::fs::write(&p, text.replace(&old, &new)).unwrap();
    p
}

fn calibrate(fs: &FakeSys, args: &[&std::ffi::OsStr]) -> Output {
    crate::lab::lab()
        .arg("calibrate")
        .args(args)
        .arg("--sysfs-root")
        .arg(fs.sys())
        .arg("--runtime-dir")
        .arg(fs.run_dir())
        .output()
        .unwrap()
}

fn euid_is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A daemon on `fs` with its state in `state-a` (log `a.log`), once it has stepped sda
/// down to nomerges 1: the live owner the tests set others against.
fn daemon_at_l1(fs: &FakeSys) -> (std::path::PathBuf, crate::fakesys::Daemon) {
    let dir = fs.p("state-a");
    let cfg = fs.config(&dir, "");
    let d = fs.daemon(&cfg, &fs.p("a.log"));
    fs.wait_nomerges("1", Duration::from_secs(20));
    (dir, d)
}

/// A fake host with [`daemon_at_l1`] running on it, as root; `None` when not root (a live run
/// needs root: it says so and exits; the daemon tests run as root in CI).
fn root_and_a_daemon_at_l1() -> Option<(FakeSys, std::path::PathBuf, crate::fakesys::Daemon)> {
    if !euid_is_root() {
        return None;
    }
    let fs = FakeSys::new();
    let (dir, d) = daemon_at_l1(&fs);
    Some((fs, dir, d))
}

/// `calibrate --device sda --state-dir state_dir` on `fs`, which must refuse (exit 1): what
/// it said.
fn calibrate_refused(fs: &FakeSys, state_dir: &std::path::Path) -> String {
    let o = calibrate(
        fs,
        &[
            "--device".as_ref(),
            "sda".as_ref(),
            "--state-dir".as_ref(),
            state_dir.as_os_str(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    text(&o)
}

/// Issue: a second daemon's start followed the pointer to a live daemon's state directory
/// and restored its records (2 -> 0) while it ran.
#[test]
fn a_second_daemons_start_leaves_a_live_daemons_records_alone() {
    if !euid_is_root() {
        // A live run needs root (it says so and exits); the daemon tests run as root in CI.
        return;
    }
    let fs = FakeSys::new();
    let cfg_a = fs.config(&fs.p("state-a"), "");
    let cfg_b = second_config(&fs, &cfg_a, "b.toml", "state-b");
    let (log_a, log_b) = (fs.p("a.log"), fs.p("b.log"));
    let mut a = fs.daemon(&cfg_a, &log_a);
    fs.wait_nomerges("1", Duration::from_secs(20));
    let mut b = fs.daemon(&cfg_b, &log_b);
    wait_until(
        "the second daemon's first tick",
        Duration::from_secs(10),
        || std::fs::read_to_string(&log_b).is_ok_and(|l| l.contains("sda:")),
    );
    std::thread::sleep(Duration::from_millis(500));
    let said_b = std::fs::read_to_string(&log_b).unwrap();
    assert!(
        !said_b.contains("restored 1 -> 0"),
        "the second daemon restored a live one's record:\n{said_b}"
    );
    assert!(
        said_b.contains(&format!("held by a running mergetune (pid {})", a.0.id())),
        "it says whose they are:\n{said_b}"
    );
    assert_eq!(fs.nomerges(), "1", "the live daemon's value stays");
    let said_a = std::fs::read_to_string(&log_a).unwrap();
    assert!(!said_a.contains("by someone else"), "{said_a}");
    b.signal(rustix::process::Signal::TERM);
    b.wait();
    fs.stop_restored(&mut a);
}

/// Issue: `calibrate --state-dir` on a live daemon's directory "restored" its record and
/// deleted state.json; `calibrate --device` on a device it manages recorded the daemon's
/// value as the original.
#[test]
fn calibrate_refuses_a_live_daemons_state_dir_and_device_naming_its_pid() {
    let Some((fs, dir, mut d)) = root_and_a_daemon_at_l1() else {
        return;
    };
    let pid = format!("pid {}", d.0.id());
    let said = calibrate_refused(&fs, &dir);
    assert!(
        said.contains("--state-dir") && said.contains(&pid),
        "{said}"
    );
    assert!(dir.join("state.json").exists(), "the daemon's records stay");
    assert_eq!(fs.nomerges(), "1");
    let own = fs.p("calibrate-state");
    let said = calibrate_refused(&fs, &own);
    assert!(
        said.contains("--device sda") && said.contains(&pid),
        "{said}"
    );
    assert!(!own.join("state.json").exists(), "nothing recorded");
    assert_eq!(fs.nomerges(), "1");
    fs.stop_restored(&mut d);
}

/// Issue: `restore --state-dir X` with X missing reported on the pointer's directory.
#[test]
fn restore_of_a_missing_state_dir_says_so_and_reads_nothing_else() {
    let fs = FakeSys::new();
    let other = fs.p("state-a");
    // Left by a daemon that is gone: the pointer's directory would be restored from.
    fs.write(
        "state-a/state.json",
        r#"{"version": 3, "pid": 4294967295, "devices": {}}"#,
    );
    std::fs::write(
        fs.run_dir().join("last-state-dir"),
        format!("{}\n", other.display()),
    )
    .unwrap();
    let missing = fs.p("no-such-dir");
    let said = fs.refused(&[
        "restore".as_ref(),
        "--state-dir".as_ref(),
        missing.as_os_str(),
    ]);
    assert!(
        said.contains(&format!("{}: no such directory", missing.display())),
        "{said}"
    );
    assert!(
        !said.contains("state-a"),
        "nothing about the pointer's directory: {said}"
    );
}

/// `restore --force` overrides the lock of the daemon whose directory it is told, never
/// another running owner's claim: records of a device a live daemon claims, found in
/// another directory (as a killed daemon's, or a copy), are left to that owner, naming its
/// pid, and kept. Before, `--force` dropped the claims and wrote the original under it.
#[test]
fn restore_force_never_writes_a_device_another_running_process_claims() {
    let Some((fs, dir, mut d)) = root_and_a_daemon_at_l1() else {
        return;
    };
    let other = fs.p("state-old");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(dir.join("state.json"), other.join("state.json")).unwrap();
    let o = fs.mergetune(&[
        "restore".as_ref(),
        "--force".as_ref(),
        "--state-dir".as_ref(),
        other.as_os_str(),
    ]);
    let said = text(&o);
    assert!(
        said.contains(&format!(
            "a running process (pid {}) owns the device now",
            d.0.id()
        )),
        "{said}"
    );
    assert_eq!(fs.nomerges(), "1", "the live owner's value stays: {said}");
    assert!(other.join("state.json").exists(), "the record is kept");
    let said_a = std::fs::read_to_string(fs.p("a.log")).unwrap();
    assert!(!said_a.contains("by someone else"), "{said_a}");
    fs.stop_restored(&mut d);
}

/// Puts something that is not a regular file at the lock file's path.
type MakeLock = fn(&std::path::Path);

/// Issue: a lock file that is a FIFO, a directory or a symlink was blamed on "another
/// daemon" with "Invalid argument".
#[test]
fn a_lock_file_that_is_not_a_regular_file_is_named_for_what_it_is() {
    if !euid_is_root() {
        return;
    }
    let cases: [(&str, MakeLock, &str); 3] = [
        (
            "fifo",
            |p| {
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    p,
                    rustix::fs::FileType::Fifo,
                    rustix::fs::Mode::from_raw_mode(0o600),
                    0,
                )
                .unwrap()
            },
            "not a regular file (a FIFO)",
        ),
        (
            "dir",
            |p| std::fs::create_dir(p).unwrap(),
            "not a regular file (a directory)",
        ),
        (
            "symlink",
            |p| std::os::unix::fs::symlink("/etc/hostname", p).unwrap(),
            "a symbolic link",
        ),
    ];
    for (what, make, says) in cases {
        let fs = FakeSys::new();
        let dir = fs.p("state-a");
        std::fs::create_dir_all(&dir).unwrap();
        make(&dir.join("mergetune.lock"));
        let cfg = fs.config(&dir, "");
        let said = fs.refused(&["run".as_ref(), "--config".as_ref(), cfg.as_os_str()]);
        assert!(
            said.contains("mergetune.lock") && said.contains(says),
            "{what}: {said}"
        );
        assert!(!said.contains("another daemon"), "{what}: {said}");
        assert!(!said.contains("Invalid argument"), "{what}: {said}");
        assert_eq!(fs.nomerges(), "0");
    }
}

/// Issue: only the last component of `state_dir` was trusted. A parent another user owns
/// could swap the directory for a link elsewhere under a running daemon; the start now
/// refuses it, naming the ancestor, and a running daemon saves through the directory it
/// opened, never the path again.
#[test]
fn a_state_dir_under_another_users_directory_is_refused_naming_the_ancestor() {
    if !euid_is_root() {
        return;
    }
    let fs = FakeSys::new();
    let parent = fs.p("users");
    std::fs::create_dir_all(parent.join("state")).unwrap();
    rustix::fs::chown(
        &parent,
        Some(rustix::fs::Uid::from_raw(1000)),
        Some(rustix::fs::Gid::from_raw(1000)),
    )
    .unwrap();
    let cfg = fs.config(&parent.join("state"), "");
    let said = fs.refused(&["run".as_ref(), "--config".as_ref(), cfg.as_os_str()]);
    assert!(
        said.contains(&format!(
            "its ancestor {} is owned by uid 1000",
            parent.display()
        )),
        "{said}"
    );
    assert_eq!(fs.nomerges(), "0");

    // A trusted directory, swapped under a running daemon: its saves stay in the one it
    // opened (with its lock), so a SIGKILL then `restore` of that directory finds them.
    let (dir, mut d) = daemon_at_l1(&fs);
    let moved = fs.p("state-moved");
    std::fs::rename(&dir, &moved).unwrap();
    std::fs::create_dir(&dir).unwrap();
    fs.merging.store(true, std::sync::atomic::Ordering::Relaxed);
    fs.wait_nomerges("0", Duration::from_secs(20)); // a step back up: a save
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !dir.join("state.json").exists(),
        "nothing saved through the path again"
    );
    d.signal(rustix::process::Signal::KILL);
    d.wait();
    let _ = moved;
}
