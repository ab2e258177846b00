//! The state file's store, each rule pinned by a test that fails when the rule is broken
//! (the mutations cargo-mutants found surviving the restore tests, docs/testing.md): the
//! read-back that proves "persisted", what a missing or unreadable file means, which
//! versions load, how a refused entry is worded, and how long a vanished device's record
//! is kept.

use crate::memkernel::{FixedStore, MemKernel, SharedStore, written_record};
use mergetune_daemon::state::{
    FileStore, RestoreOutcome, SavedAttr, SavedState, StateError, StateStore, VANISHED_KEEP_SECS,
    parse_state, restore_from_store,
};
use mergetune_kernel::tunable::Tunable;
use std::path::Path;

/// A state of one record: sda's `tunable`.
fn sda_record(tunable: Tunable, record: SavedAttr) -> SavedState {
    let mut s = SavedState::default();
    s.devices
        .entry("sda".into())
        .or_default()
        .insert(tunable, record);
    s
}

/// A temporary directory, and an empty `state` directory in it.
fn state_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    std::fs::create_dir(&dir).unwrap();
    (tmp, dir)
}

fn one_record() -> SavedState {
    sda_record(Tunable::Nomerges, written_record("0", "2"))
}

#[test]
fn verify_proves_the_read_back_holds_exactly_what_was_saved() {
    let saved = one_record();
    // Nothing on disk is right only for an empty state.
    assert!(FixedStore(None).verify(&SavedState::default()).is_ok());
    let e = FixedStore(None).verify(&saved).unwrap_err().to_string();
    assert!(e.contains("no state file"), "{e}");
    // The same records: persisted.
    assert!(FixedStore(Some(saved.clone())).verify(&saved).is_ok());
    // Other records (an older save, someone else's file): not persisted.
    let mut other = saved.clone();
    other
        .devices
        .get_mut("sda")
        .unwrap()
        .get_mut(&Tunable::Nomerges)
        .unwrap()
        .last_written = Some("1".into());
    let e = FixedStore(Some(other))
        .verify(&saved)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not hold what was saved"), "{e}");
}

#[test]
fn a_missing_state_file_is_no_state_and_an_unreadable_one_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(
        FileStore::new(tmp.path().join("absent"))
            .load()
            .unwrap()
            .is_none()
    );
    // A state directory under a regular file cannot be read: an error naming the path, not
    // "no state" (which would let a daemon start as if nothing were left to restore).
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let store = FileStore::new(file.join("state"));
    match store.load() {
        Err(StateError::NotADirectory { path }) => assert_eq!(path, store.dir()),
        other => panic!("{other:?}"),
    }
}

fn euid_is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A link planted at the save's temporary name is removed, never followed: the file it
/// names is untouched, and the save still lands.
#[test]
fn a_save_never_writes_through_a_link_planted_at_its_temporary_name() {
    let (tmp, dir) = state_dir();
    let victim = tmp.path().join("root-only-file");
    std::fs::write(&victim, "secret\n").unwrap();
    chmod(&victim, 0o600);
    std::os::unix::fs::symlink(&victim, dir.join(".state.json.tmp")).unwrap();
    let mut store = FileStore::new(&dir);
    store.save(&one_record()).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret\n");
    assert_eq!(
        store.load().unwrap().unwrap().state.devices,
        one_record().devices
    );
    assert!(!dir.join(".state.json.tmp").exists());
}

/// A state file that is a link is refused, named, and never read through.
#[test]
fn a_state_file_that_is_a_link_is_refused_and_named() {
    let (tmp, dir) = state_dir();
    let real = tmp.path().join("elsewhere.json");
    std::fs::write(&real, serde_json::to_string(&one_record()).unwrap()).unwrap();
    std::os::unix::fs::symlink(&real, dir.join("state.json")).unwrap();
    match FileStore::new(&dir).load() {
        Err(e @ StateError::Unsafe { .. }) => {
            let t = e.to_string();
            assert!(
                t.contains(&*dir.join("state.json").to_string_lossy()),
                "{t}"
            );
            assert!(t.contains("symbolic link"), "{t}");
        }
        other => panic!("{other:?}"),
    }
}

/// Records another user could have written are refused, as sshd refuses keys: a group- or
/// world-writable directory or file, or one owned by another user.
#[test]
fn a_state_dir_or_file_another_user_could_write_is_refused_and_named() {
    let (_tmp, dir) = state_dir();
    let mut store = FileStore::new(&dir);
    store.save(&one_record()).unwrap();
    assert!(store.load().is_ok());

    chmod(&dir, 0o777);
    for e in [
        store.load().unwrap_err(),
        store.save(&one_record()).unwrap_err(),
        store.check_writable().unwrap_err(),
    ] {
        let t = e.to_string();
        assert!(matches!(e, StateError::Unsafe { .. }), "{e:?}");
        assert!(
            t.contains(&*dir.to_string_lossy()) && t.contains("0777"),
            "{t}"
        );
    }
    chmod(&dir, 0o700);

    chmod(&store.path(), 0o620);
    let t = store.load().unwrap_err().to_string();
    assert!(t.contains("state.json") && t.contains("0620"), "{t}");
    chmod(&store.path(), 0o600);
    assert!(store.load().is_ok());

    // Another owner: as root, give the file away; as a user, a directory root owns and
    // nobody else may write is trusted, one another user owns is not (the test can only
    // make the latter as root).
    if euid_is_root() {
        let nobody = rustix::process::Uid::from_raw(65534);
        rustix::fs::chown(store.path(), Some(nobody), None).unwrap();
        let t = store.load().unwrap_err().to_string();
        assert!(t.contains("owned by uid 65534"), "{t}");
        rustix::fs::chown(store.path(), Some(rustix::process::Uid::ROOT), None).unwrap();
        rustix::fs::chown(&dir, Some(nobody), None).unwrap();
        let t = store.load().unwrap_err().to_string();
        assert!(
            t.contains("owned by uid 65534") && t.contains(&*dir.to_string_lossy()),
            "{t}"
        );
    } else {
        assert!(
            FileStore::new("/").load().unwrap().is_none(),
            "root's own dir is trusted"
        );
    }
}

/// A live daemon's lock tells `restore` whose records these are; a second daemon cannot
/// take it, and it is free again once its holder is gone.
#[test]
fn the_state_dirs_lock_is_one_holders_and_free_once_it_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let mut live = FileStore::new(tmp.path());
    assert_eq!(FileStore::new(tmp.path()).holder().unwrap(), None);
    live.lock().unwrap();
    assert_eq!(
        live.holder().unwrap(),
        None,
        "its own lock holds nothing back from itself"
    );
    let other = FileStore::new(tmp.path());
    assert_eq!(
        other.holder().unwrap(),
        Some(Some(std::process::id())),
        "another store sees the holder's pid"
    );
    match FileStore::new(tmp.path()).lock() {
        Err(StateError::Held { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
        other => panic!("{other:?}"),
    }
    drop(live);
    assert_eq!(other.holder().unwrap(), None);
    assert!(FileStore::new(tmp.path()).lock().is_ok());
}

#[test]
fn check_writable_refuses_a_directory_that_cannot_be_made() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(
        FileStore::new(tmp.path().join("new"))
            .check_writable()
            .is_ok()
    );
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let e = FileStore::new(file.join("state"))
        .check_writable()
        .unwrap_err();
    assert!(matches!(e, StateError::Write { .. }), "{e:?}");
}

/// A version that is a number but not a whole one is named as such: `"version": 2.0` once
/// said `no "version" number`, though a number was there.
#[test]
fn a_version_that_is_not_a_whole_number_is_named_as_such() {
    let p = Path::new("/run/mergetune/state.json");
    for (v, says) in [
        ("2.0", "must be a whole number from 1 to"),
        ("\"2\"", "not \"2\""),
        ("-1", "not -1"),
    ] {
        let doc = format!(r#"{{"version": {v}, "pid": 1, "devices": {{}}}}"#);
        let e = parse_state(&doc, p).unwrap_err().to_string();
        assert!(e.contains(says) && e.contains("\"version\""), "{v}: {e}");
    }
    let e = parse_state(r#"{"pid": 1, "devices": {}}"#, p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no \"version\""), "{e}");
}

#[test]
fn a_state_file_from_a_newer_build_is_refused_not_misread() {
    let p = Path::new("/run/mergetune/state.json");
    let newest = mergetune_daemon::state::STATE_VERSION;
    let doc = |v: u32| format!(r#"{{"version": {v}, "pid": 1, "devices": {{}}}}"#);
    assert!(parse_state(&doc(newest), p).is_ok());
    assert!(parse_state(&doc(1), p).is_ok());
    match parse_state(&doc(newest + 1), p) {
        Err(StateError::TooNew { version, .. }) => assert_eq!(version, u64::from(newest + 1)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_refused_entry_says_which_device_and_attribute_and_why() {
    let p = Path::new("/run/mergetune/state.json");
    let loaded = parse_state(
        r#"{"version": 2, "pid": 1, "devices": {"sda": {"queue/not_a_tunable": {"original": "0"}}}}"#,
        p,
    )
    .unwrap();
    let line = loaded.rejected[0].to_string();
    assert!(
        line.starts_with("sda/queue/not_a_tunable: skipped: "),
        "{line}"
    );
}

/// A vanished device's record stays a week after it was first seen gone, then goes.
#[test]
fn a_vanished_devices_record_is_kept_for_exactly_a_week() {
    assert_eq!(VANISHED_KEEP_SECS, 7 * 24 * 3600);
    let gone_at = 1_000_000_000u64;
    let restore_at = |now: u64| {
        let mut state = one_record();
        for r in state.devices.get_mut("sda").unwrap().values_mut() {
            r.vanished_at_unix_secs = Some(gone_at);
        }
        let mut store = SharedStore::default();
        *store.text.borrow_mut() = Some(serde_json::to_string(&state).unwrap());
        // The kernel has no sda: the device is gone.
        let mut fs = MemKernel::with(&["sdb"]);
        let report = restore_from_store(&mut fs, &mut store, now).unwrap();
        assert!(
            report
                .results
                .iter()
                .all(|r| r.outcome == RestoreOutcome::Vanished),
            "{report:?}"
        );
        (report.kept, store.text.borrow().is_some())
    };
    assert_eq!(restore_at(gone_at + VANISHED_KEEP_SECS - 1), (1, true));
    assert_eq!(restore_at(gone_at + VANISHED_KEEP_SECS), (0, false));
}

/// A state file is refused above 16 MiB (a record is about 100 bytes: anything that large
/// is not one mergetune wrote), and read up to it.
#[test]
fn a_state_file_of_16_mib_is_read_and_one_byte_more_is_refused() {
    const MAX: usize = 16 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let store = FileStore::new(tmp.path());
    let doc = r#"{"version": 2, "pid": 1, "devices": {}}"#;
    let padded = |len: usize| format!("{doc}{}", " ".repeat(len - doc.len()));
    std::fs::write(store.path(), padded(MAX)).unwrap();
    assert!(store.load().unwrap().is_some());
    std::fs::write(store.path(), padded(MAX + 1)).unwrap();
    match store.load() {
        Err(StateError::Corrupt { message, .. }) => {
            assert!(message.contains("not a state file"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn removing_a_state_file_that_is_not_there_is_fine_and_one_that_cannot_go_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let mut store = FileStore::new(tmp.path());
    assert!(store.remove().is_ok());
    // A directory where the file should be cannot be removed as a file: the originals
    // may still be recorded somewhere the operator must look, so it is said.
    std::fs::create_dir(store.path()).unwrap();
    assert!(matches!(store.remove(), Err(StateError::Write { .. })));
}

/// A front_merges file that is not there means one of two things: the device is gone (its
/// record is kept for when it comes back), or it is there under another scheduler (the
/// record is dropped: the new scheduler starts from its own value).
#[test]
fn a_missing_iosched_file_tells_a_gone_device_from_a_switched_scheduler() {
    let state = sda_record(Tunable::FrontMerges, written_record("1", "0"));
    let outcome = |fs: &mut MemKernel| {
        let results = mergetune_daemon::state::restore_all(fs, &state);
        assert_eq!(results.len(), 1, "{results:?}");
        results[0].outcome.clone()
    };
    // No sda at all.
    assert_eq!(
        outcome(&mut MemKernel::with(&["sdb"])),
        RestoreOutcome::Vanished
    );
    // sda is there, its scheduler no longer mq-deadline (no iosched/front_merges).
    let mut switched = MemKernel::with(&["sda"]);
    let sda = switched.devs.get_mut("sda").unwrap();
    sda.attrs.remove("queue/iosched/front_merges");
    assert_eq!(outcome(&mut switched), RestoreOutcome::SchedulerChanged);
    // And a restore that wrote is reported, not dropped.
    let mut back = MemKernel::with(&["sda"]);
    back.devs
        .get_mut("sda")
        .unwrap()
        .attrs
        .insert("queue/iosched/front_merges".into(), "0".into());
    assert_eq!(
        outcome(&mut back),
        RestoreOutcome::Restored {
            from: "0".into(),
            to: "1".into()
        }
    );
}

/// Messages name the state file by its path (`describe`), so an operator can find it.
#[test]
fn the_file_store_is_described_by_its_path() {
    let store = FileStore::new("/run/mergetune");
    assert_eq!(store.describe(), "/run/mergetune/state.json");
}

/// The runtime directory (where the pointer and the device claims live) is the one asked
/// for, else the machine's; a run over a fake sysfs tree has none unless asked, so a test
/// never leaves a pointer or a claim naming its temporary directory on the real machine.
#[test]
fn the_runtime_directory_is_the_one_asked_for_else_the_machines_and_none_over_a_fake_tree() {
    use mergetune_daemon::state::runtime_dir;
    use mergetune_kernel::roots::{KernelRoots, PROCFS};
    let real = KernelRoots::default();
    let fake = KernelRoots::new("/tmp/fake/sys", PROCFS);
    let asked = Path::new("/tmp/rt");
    assert_eq!(runtime_dir(Some(asked), &fake).as_deref(), Some(asked));
    assert_eq!(runtime_dir(Some(asked), &real).as_deref(), Some(asked));
    assert_eq!(
        runtime_dir(None, &real).as_deref(),
        Some(Path::new("/run/mergetune"))
    );
    assert_eq!(runtime_dir(None, &fake), None);
}

/// No pointer is no pointer; a pointer that cannot be read is an error, never taken as
/// "no earlier state directory" (its originals would then never be looked for).
#[test]
fn a_missing_pointer_is_none_and_an_unreadable_one_is_an_error() {
    use mergetune_daemon::state::StatePointer;
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(StatePointer::new(tmp.path()).read().unwrap(), None);
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let under_a_file = StatePointer::new(file.join("run"));
    assert!(matches!(under_a_file.read(), Err(StateError::Read { .. })));
}

/// The pointer is one absolute path in a small regular file; anything else is refused
/// with the reason, never followed.
#[test]
fn a_state_pointer_is_one_absolute_path_in_a_small_regular_file() {
    use mergetune_daemon::state::StatePointer;
    let tmp = tempfile::tempdir().unwrap();
    let p = StatePointer::new(tmp.path());
    let refused = |p: &StatePointer| match p.read() {
        Err(StateError::Corrupt { message, .. }) => message,
        other => panic!("{other:?}"),
    };
    // 4096 bytes is the most a pointer may hold: newlines after the path are its end.
    let path = "/var/lib/mergetune";
    std::fs::write(
        p.path(),
        format!("{path}{}", "\n".repeat(4096 - path.len())),
    )
    .unwrap();
    assert_eq!(p.read().unwrap(), Some(path.into()));
    std::fs::write(
        p.path(),
        format!("{path}{}", "\n".repeat(4097 - path.len())),
    )
    .unwrap();
    assert!(refused(&p).contains("small regular file"));
    std::fs::write(p.path(), "var/lib/mergetune\n").unwrap();
    assert!(refused(&p).contains("one absolute path"));
    std::fs::write(p.path(), "/var/lib/a\n/var/lib/b\n").unwrap();
    assert!(refused(&p).contains("one absolute path"));
    std::fs::remove_file(p.path()).unwrap();
    std::fs::create_dir(p.path()).unwrap();
    assert!(refused(&p).contains("small regular file"));
}

/// A restore that fails keeps its record in the file, for `mergetune restore` or the next
/// start to try again; one that succeeds leaves nothing behind.
#[test]
fn a_failed_restore_keeps_its_record_and_a_done_one_leaves_none() {
    let run = |fail: bool| {
        let mut store = SharedStore::default();
        *store.text.borrow_mut() = Some(serde_json::to_string(&one_record()).unwrap());
        let mut fs = MemKernel::with(&["sda"]);
        fs.set_behind_back("sda", Tunable::Nomerges, "2");
        if fail {
            fs.faults
                .failing_writes
                .insert(("sda".into(), Tunable::Nomerges));
        }
        let report = restore_from_store(&mut fs, &mut store, 0).unwrap();
        (report.failed(), report.kept, store.text.borrow().is_some())
    };
    assert_eq!(run(true), (true, 1, true));
    assert_eq!(run(false), (false, 0, false));
}

/// The simulator's and a dry run's store: what was saved loads, what was removed is gone.
#[test]
fn the_memory_store_forgets_what_was_removed() {
    let mut m = mergetune_daemon::state::MemoryStore::default();
    m.save(&one_record()).unwrap();
    assert_eq!(m.load().unwrap().unwrap().state, one_record());
    m.remove().unwrap();
    assert!(m.load().unwrap().is_none());
    assert_eq!(m.describe(), "memory");
}

/// A stop clears the pointer only when it names this run's state directory: another
/// daemon's pointer stays.
#[test]
fn clear_if_removes_only_a_pointer_to_this_state_directory() {
    use mergetune_daemon::state::StatePointer;
    let tmp = tempfile::tempdir().unwrap();
    let p = StatePointer::new(tmp.path().join("run"));
    let mine = Path::new("/var/lib/mergetune-a");
    p.write(mine).unwrap();
    p.clear_if(Path::new("/var/lib/mergetune-b")).unwrap();
    assert_eq!(p.read().unwrap().as_deref(), Some(mine));
    p.clear_if(mine).unwrap();
    assert_eq!(p.read().unwrap(), None);
    // Nothing to clear is not an error.
    p.clear_if(mine).unwrap();
}

/// The first restore that finds a device gone dates its record; a week later, the record
/// goes (an undated record would be kept for ever).
#[test]
fn a_gone_devices_record_is_dated_at_the_first_restore_that_misses_it() {
    let mut store = SharedStore::default();
    *store.text.borrow_mut() = Some(serde_json::to_string(&one_record()).unwrap());
    let mut fs = MemKernel::with(&["sdb"]);
    let t0 = 1_000_000_000u64;
    assert_eq!(restore_from_store(&mut fs, &mut store, t0).unwrap().kept, 1);
    let dated = store.load().unwrap().unwrap().state;
    assert_eq!(
        dated.devices["sda"][&Tunable::Nomerges].vanished_at_unix_secs,
        Some(t0)
    );
    assert_eq!(
        restore_from_store(&mut fs, &mut store, t0 + VANISHED_KEEP_SECS)
            .unwrap()
            .kept,
        0
    );
    assert!(store.text.borrow().is_none());
}

/// The file is rewritten when what it keeps changed or when it held refused entries (they
/// are dropped, said once), and left as it is otherwise.
#[test]
fn the_state_file_is_rewritten_only_when_what_it_keeps_changes() {
    let gone_at = 1_000_000_000u64;
    let mut state = one_record();
    for r in state.devices.get_mut("sda").unwrap().values_mut() {
        r.vanished_at_unix_secs = Some(gone_at);
    }
    let text = serde_json::to_string(&state).unwrap();
    let mut fs = MemKernel::with(&["sdb"]);
    // Nothing changed: the very same text stays.
    let mut store = SharedStore::default();
    let padded = format!("{text}   ");
    *store.text.borrow_mut() = Some(padded.clone());
    restore_from_store(&mut fs, &mut store, gone_at + 1).unwrap();
    assert_eq!(store.text.borrow().as_deref(), Some(padded.as_str()));
    // A refused entry: rewritten without it.
    let with_refused = text.replacen(
        r#""sda":{"#,
        r#""sda":{"queue/not_a_tunable":{"original":"0"},"#,
        1,
    );
    assert_ne!(
        with_refused, text,
        "the fixture must hold the refused entry"
    );
    *store.text.borrow_mut() = Some(with_refused);
    let report = restore_from_store(&mut fs, &mut store, gone_at + 1).unwrap();
    assert_eq!(report.rejected.len(), 1);
    let after = store.text.borrow().clone().unwrap();
    assert!(!after.contains("not_a_tunable"), "{after}");
    assert_eq!(parse_state(&after, Path::new("mem")).unwrap().state, state);
}

/// One owner per device, whatever the state directories: two stores with their own
/// directories and one runtime directory. The first to write a disk claims it; the
/// second's write to it is refused naming the owner's pid (nothing written), and a restore
/// through the second leaves the owned disk alone and keeps its record. Once the owner
/// lets go (its records gone), the disk is free.
#[test]
fn a_device_claimed_by_one_store_is_left_alone_by_another() {
    use mergetune_daemon::actuator::Actuator;
    use mergetune_daemon::state::{
        Claims, FileStore, RestoreOutcome, StateStore, restore_from_store,
    };
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let store = |name: &str| FileStore::new(tmp.path().join(name)).with_claims(Claims::under(&run));
    let mut k = MemKernel::with(&["sda"]);
    let mut first = Actuator::new(false, Box::new(store("a")));
    let mut second = Actuator::new(false, Box::new(store("b")));
    first.set(&mut k, "sda", Tunable::Nomerges, "2").unwrap();
    assert!(run.join("devices/8:0").exists());
    let e = second
        .set(&mut k, "sda", Tunable::Nomerges, "1")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "owned by a running process (pid {})",
            std::process::id()
        )),
        "{e}"
    );
    assert_eq!(
        k.value("sda", Tunable::Nomerges).as_deref(),
        Some("2"),
        "nothing written"
    );
    // Records left in the second's directory by a dead run, of the owned disk.
    let mut b = store("b");
    let mut rec = written_record("0", "2");
    rec.device = mergetune_kernel::devices::read_identity(&mut k, "sda").unwrap();
    let state = sda_record(Tunable::Nomerges, rec);
    FileStore::new(tmp.path().join("b")).save(&state).unwrap();
    let report = restore_from_store(&mut k, &mut b, 0).unwrap();
    assert!(
        matches!(report.results[0].outcome, RestoreOutcome::Owned { pid: Some(p) } if p == std::process::id()),
        "{:?}",
        report.results
    );
    assert_eq!(report.kept, 1);
    assert_eq!(k.value("sda", Tunable::Nomerges).as_deref(), Some("2"));
    // The owner puts its original back and lets go: the disk is anyone's again.
    first.restore_all(&mut k, 0);
    assert_eq!(k.value("sda", Tunable::Nomerges).as_deref(), Some("0"));
    second.set(&mut k, "sda", Tunable::Nomerges, "1").unwrap();
}

/// A restore whose state file cannot be updated (a read-only directory) has still put the
/// values back: it says so per record, with what a later restore would do, instead of one
/// "cannot write state file" that hid them (and then a second restore reverted an
/// operator's value set equal to mergetune's).
#[test]
fn a_restore_that_cannot_clear_its_records_says_per_record_what_a_later_one_would_do() {
    use mergetune_daemon::state::{StateStore, restore_from_store};
    let mut k = MemKernel::with(&["sda"]);
    k.set_behind_back("sda", Tunable::Nomerges, "1");
    let mut store = SharedStore::default();
    let state = sda_record(Tunable::Nomerges, written_record("0", "1"));
    store.save(&state).unwrap();
    *store.fail_saves.borrow_mut() = true;
    let report = restore_from_store(&mut k, &mut store, 0).unwrap();
    assert_eq!(k.value("sda", Tunable::Nomerges).as_deref(), Some("0"));
    let said = report.stale_records();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("sda/queue/nomerges: restored 1 -> 0, but the record stays")
            && said[0].contains("Read-only file system")
            && said[0].contains("a later `mergetune restore` would put 0 back over a 1 set since"),
        "{said:?}"
    );
}
