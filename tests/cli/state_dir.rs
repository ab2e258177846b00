//! Where the originals are recorded, and what happens when that place is wrong: a reload
//! never moves the state directory, `restore` finds the last daemon's records whatever the
//! config says now, a state directory that does not exist is an error while the unit's
//! ExecStopPost after a clean stop stays a quiet success, and a live run that cannot record
//! originals says it needs root instead of running blind, and says once, not every tick,
//! when saves start failing, and "persisted" only when a read-back proves it. The built
//! binary, live, on a fake sysfs tree.

use crate::fakesys;

use fakesys::{FakeSys, wait_until};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

fn restore(fs: &FakeSys, args: &[&std::ffi::OsStr]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mergetune"));
    c.arg("restore").args(args);
    fs.roots(&mut c);
    c.output().unwrap()
}

use crate::command::text;

/// `restore` with `args` on `fs`, which must refuse (exit 1): what it said.
fn restore_refused(fs: &FakeSys, args: &[&std::ffi::OsStr]) -> String {
    fs.refused(&[&["restore".as_ref()], args].concat())
}

/// `mergetune run` live on `fs`, its state in `state`: the state directory, the config, the
/// log and the daemon.
fn daemon_on(fs: &FakeSys) -> (PathBuf, PathBuf, PathBuf, fakesys::Daemon) {
    let dir = fs.p("state");
    let cfg = fs.config(&dir, "");
    let log = fs.p("daemon.log");
    let d = fs.daemon(&cfg, &log);
    (dir, cfg, log, d)
}

#[test]
fn a_reload_that_moves_state_dir_is_refused_and_restore_after_a_crash_finds_the_originals() {
    let fs = FakeSys::new();
    let (old_dir, new_dir) = (fs.p("state-a"), fs.p("state-b"));
    let cfg = fs.config(&old_dir, "");
    let log = fs.p("daemon.log");
    let mut d = fs.daemon(&cfg, &log);
    fs.wait_nomerges("1", Duration::from_secs(20)); // L2, recorded in state-a
    assert!(old_dir.join("state.json").exists());
    // The operator edits the config to another directory and reloads.
    fs.config(&new_dir, "");
    d.signal(rustix::process::Signal::HUP);
    wait_until(
        "the reload's verdict in the log",
        Duration::from_secs(10),
        || std::fs::read_to_string(&log).is_ok_and(|l| l.contains("SIGHUP: new config")),
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("rejected, keeping the old one") && logged.contains("`daemon.state_dir`"),
        "the refusal names the key:\n{logged}"
    );
    assert!(
        old_dir.join("state.json").exists() && !new_dir.join("state.json").exists(),
        "the records stay where they were"
    );
    // Crash, then the unit's ExecStopPost: `restore --config` with the edited config.
    d.signal(rustix::process::Signal::KILL);
    d.wait();
    assert_eq!(fs.nomerges(), "1", "a killed daemon cannot restore");
    let o = restore(&fs, &["--config".as_ref(), cfg.as_os_str()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        fs.nomerges(),
        "0",
        "restore found the originals through the pointer:\n{}",
        text(&o)
    );
    assert!(text(&o).contains("state-a"), "it says where: {}", text(&o));
    assert!(!old_dir.join("state.json").exists());
    assert!(
        !fs.run_dir().join("last-state-dir").exists(),
        "the pointer goes with the last record"
    );
}

#[test]
fn restore_from_a_directory_that_does_not_exist_is_an_error() {
    let fs = FakeSys::new();
    let said = restore_refused(&fs, &["--state-dir".as_ref(), "/nonexistent/dir".as_ref()]);
    assert!(
        said.contains("/nonexistent/dir: no such directory"),
        "{said}"
    );
    assert!(!said.contains("nothing to restore"), "{said}");
    // The same through a config naming a directory that is not there.
    let cfg = fs.config(&fs.p("never-made"), "");
    let o = restore(&fs, &["--config".as_ref(), cfg.as_os_str()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

#[test]
fn the_units_restore_after_a_run_that_wrote_nothing_is_a_quiet_success() {
    let fs = FakeSys::new();
    let dir = fs.p("state");
    let cfg = fs.config(&dir, "");
    // Policy off: the daemon runs, writes nothing, and stops.
    let mut text_cfg = std::fs::read_to_string(&cfg).unwrap();
    text_cfg = text_cfg.replace("[policy]\n", "[policy]\nenabled = false\n");
    std::fs::write(&cfg, text_cfg).unwrap();
    let log = fs.p("daemon.log");
    let mut d = fs.daemon(&cfg, &log);
    wait_until(
        "the state directory made at start",
        Duration::from_secs(10),
        || dir.is_dir(),
    );
    std::thread::sleep(Duration::from_millis(300));
    d.signal(rustix::process::Signal::TERM);
    assert!(d.wait().success());
    let o = restore(&fs, &["--config".as_ref(), cfg.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).is_empty(),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("nothing to restore"), "{}", text(&o));
}

#[test]
fn a_live_run_that_cannot_record_originals_refuses_to_start_and_names_the_directory() {
    let fs = FakeSys::new();
    // A state_dir under a regular file cannot be made, even by root.
    std::fs::write(fs.p("file"), "x").unwrap();
    let cfg = fs.config(&fs.p("file/state"), "");
    // A plain run: it refuses before its first tick (`--once` never writes, so needs no
    // state directory).
    let t = fs.refused(&["run".as_ref(), "--config".as_ref(), cfg.as_os_str()]);
    let err = t.lines().find(|l| l.contains("error:")).unwrap_or_default();
    assert!(err.contains(&*fs.p("file/state").to_string_lossy()), "{t}");
    assert!(
        err.contains("Not a directory (os error 20)"),
        "the errno: {t}"
    );
    if rustix::process::geteuid().is_root() {
        // Root is not what is missing: the directory is at fault (an immutable state dir
        // once read as "a live run needs root").
        assert!(!err.contains("needs root"), "{t}");
        assert!(err.contains("daemon.state_dir"), "{t}");
    } else {
        assert!(err.contains("needs root"), "{t}");
        assert!(err.contains("--dry-run"), "{t}");
    }
    assert_eq!(fs.nomerges(), "0", "nothing written");
}

#[test]
fn failing_saves_are_logged_once_and_persisted_only_once_read_back() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: chattr +i needs root (CI runs this as root)");
        return;
    }
    let fs = FakeSys::new();
    let (dir, _, log, mut d) = daemon_on(&fs);
    fs.wait_nomerges("1", Duration::from_secs(20));
    // The state directory becomes unusable (immutable): every save fails. (The daemon
    // saves through the directory it opened at its start, so swapping another in under the
    // path would change nothing.)
    let _mutable = Mutable(vec![dir.clone()]);
    chattr("+i", &dir);
    // Merging shows again: the ladder goes back to the originals, which needs no record
    // (merging must not wait on the state directory).
    fs.merging.store(true, std::sync::atomic::Ordering::Relaxed);
    fs.wait_nomerges("0", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(2500)); // about 50 ticks
    let during = std::fs::read_to_string(&log).unwrap();
    let failing: Vec<&str> = during
        .lines()
        .filter(|l| l.contains("cannot write state file") || l.contains("could not be recorded"))
        .collect();
    assert!(
        failing.len() <= 1,
        "once per change of state, not per tick ({} lines):\n{during}",
        failing.len()
    );
    assert!(
        !during.contains("originals persisted") && !during.contains("value(s) persisted"),
        "nothing was persisted:\n{during}"
    );
    // The directory comes back: the next save is written and read back, and said once.
    chattr("-i", &dir);
    wait_until("the recovery in the log", Duration::from_secs(5), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("written and read back"))
    });
    fs.stop_restored(&mut d);
}

/// A SIGHUP that changes what prices a step down logs the pricing line the start logs, for
/// the new source; it once logged no pricing line.
#[test]
fn a_reload_that_changes_the_pricing_says_what_prices_now() {
    let fs = FakeSys::new();
    let (_, cfg, log, mut d) = daemon_on(&fs);
    wait_until("the first tick", Duration::from_secs(20), || {
        // The per-device pricing line: after the first tick, when signals are handled.
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("sda: pricing: profile lkml-2008"))
    });
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace("cost_profile = \"lkml-2008\"", "cost_profile = \"live\""),
    )
    .unwrap();
    d.signal(rustix::process::Signal::HUP);
    wait_until("the reload in the log", Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("SIGHUP: config reloaded"))
    });
    wait_until("the new pricing line", Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("SIGHUP: pricing: live"))
    });
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        !said.contains("SIGHUP: tuners:"),
        "the tuners did not change:\n{said}"
    );
    // A reload that turns the slice tuner on says so; it once said nothing of it.
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{text}\n[slices]\nenabled = true\n")).unwrap();
    d.signal(rustix::process::Signal::HUP);
    wait_until("the tuners line", Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|l| {
            l.contains("SIGHUP: tuners: merge ladder on") && l.contains("slice tuner on (")
        })
    });
    d.signal(rustix::process::Signal::TERM);
    d.wait();
}

/// `restore` while the daemon runs would put the originals back under it (the daemon then
/// hands its devices off as "changed by someone else") and delete its live records. The
/// config's own directory is refused like any other a live daemon holds, naming the daemon;
/// `--force` restores anyway. After the daemon's stop (the unit's ExecStopPost) the lock is
/// free.
#[test]
fn restore_leaves_a_running_daemons_state_dir_alone_unless_forced() {
    let fs = FakeSys::new();
    let (dir, cfg, _, mut d) = daemon_on(&fs);
    fs.wait_nomerges("1", Duration::from_secs(20));
    assert!(dir.join("state.json").exists());
    let o = restore(&fs, &["--config".as_ref(), cfg.as_os_str()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let said = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        said.contains(&*dir.to_string_lossy())
            && said.contains(&format!("held by a running mergetune (pid {})", d.0.id()))
            && said.contains("--force"),
        "{said}"
    );
    assert_eq!(fs.nomerges(), "1", "the live daemon's value stays");
    assert!(dir.join("state.json").exists(), "its records stay");
    // A second daemon on the same directory would take the first one's writes for originals.
    let mut second = Command::new(env!("CARGO_BIN_EXE_mergetune"));
    second.args(["run", "--config"]).arg(&cfg);
    fs.roots(&mut second);
    let o2 = second.output().unwrap();
    assert_eq!(o2.status.code(), Some(1), "{}", text(&o2));
    assert!(
        text(&o2).contains("held by a running mergetune"),
        "{}",
        text(&o2)
    );

    let o = restore(
        &fs,
        &["--config".as_ref(), cfg.as_os_str(), "--force".as_ref()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(fs.nomerges(), "0", "forced: {}", text(&o));
    d.signal(rustix::process::Signal::TERM);
    assert!(d.wait().success());
    let o = restore(&fs, &["--config".as_ref(), cfg.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "after the stop: {}", text(&o));
}

/// A state dir that is a file is "not a directory", not "no such directory".
#[test]
fn restore_from_a_file_says_it_is_not_a_directory() {
    let fs = FakeSys::new();
    let said = restore_refused(&fs, &["--state-dir".as_ref(), "/dev/null".as_ref()]);
    assert!(said.contains("/dev/null: not a directory"), "{said}");
}

/// `chattr` on a path, failing the test when it cannot (it runs as root in CI).
fn chattr(flag: &str, p: &std::path::Path) {
    let st = Command::new("chattr").arg(flag).arg(p).status().unwrap();
    assert!(st.success(), "chattr {flag} {}", p.display());
}

/// Takes the immutable flags off at the end, whatever happened, so the tree can go.
struct Mutable(Vec<std::path::PathBuf>);
impl Drop for Mutable {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = Command::new("chattr").arg("-i").arg(p).status();
        }
    }
}

/// A stop whose state directory refuses changes (immutable) once put the originals back and
/// left its records behind, naming mergetune's values; an operator's later value equal to
/// one of them was then "restored" by `mergetune restore`. The stop empties the file in
/// place where it cannot remove it, and says so plainly (exit 1) where it cannot even do
/// that.
#[test]
fn a_stop_that_cannot_remove_its_records_empties_them_or_says_so() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: chattr +i needs root (CI runs this as root)");
        return;
    }
    for file_too in [false, true] {
        let fs = FakeSys::new();
        let (dir, cfg, log, mut d) = daemon_on(&fs);
        fs.wait_nomerges("1", Duration::from_secs(20));
        let state = dir.join("state.json");
        let _guard = Mutable(vec![dir.clone(), state.clone()]);
        chattr("+i", &dir);
        if file_too {
            chattr("+i", &state);
        }
        d.signal(rustix::process::Signal::TERM);
        let status = d.wait();
        let logged = std::fs::read_to_string(&log).unwrap();
        assert_eq!(fs.nomerges(), "0", "the original is back:\n{logged}");
        // The operator sets the value mergetune had written, by hand.
        std::fs::write(fs.p("sys/block/sda/queue/nomerges"), "1\n").unwrap();
        let o = restore(&fs, &["--config".as_ref(), cfg.as_os_str()]);
        if file_too {
            assert!(
                !status.success(),
                "a stale record is a failed stop:\n{logged}"
            );
            assert!(
                logged.contains("the records could not be cleared")
                    && logged.contains(&*state.to_string_lossy())
                    && logged.contains("remove it before anyone runs `mergetune restore`"),
                "{logged}"
            );
        } else {
            assert!(status.success(), "{logged}");
            assert!(logged.contains("stopped; "), "{logged}");
            assert_eq!(
                fs.nomerges(),
                "1",
                "the operator's value stays: {}",
                text(&o)
            );
            assert!(o.status.success(), "{}", text(&o));
        }
    }
}
