//! Read-before-write, original recording, dry-run, restore rules and write failures.

use crate::memkernel::{MemKernel, WriteFault};
use mergetune_daemon::actuator::{Actuator, SetOutcome};
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::state::{
    FileStore, MemoryStore, RestoreOutcome, StateStore, restore_from_store,
};
use mergetune_kernel::blockfs::{RealFs, Sysfs};
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::Config;
use std::path::{Path, PathBuf};

fn tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let q = t.path().join("sys/block/sda/queue");
    std::fs::create_dir_all(&q).unwrap();
    std::fs::write(q.join("nomerges"), "0\n").unwrap();
    std::fs::create_dir_all(t.path().join("proc")).unwrap();
    t
}

fn fs_of(t: &Path) -> RealFs {
    RealFs::new(t.join("sys"), t.join("proc"))
}

/// The sysfs of the tree at `t`, its state directory, and an actuator saving there.
fn on_tree(t: &Path, dry_run: bool) -> (RealFs, PathBuf, Actuator) {
    let state_dir = t.join("state");
    let a = Actuator::new(dry_run, Box::new(FileStore::new(&state_dir)));
    (fs_of(t), state_dir, a)
}

#[test]
fn records_original_before_first_write_and_restores() {
    let t = tree();
    let (mut fs, state_dir, mut a) = on_tree(t.path(), false);
    assert_eq!(
        a.set(&mut fs, "sda", Tunable::Nomerges, "0").unwrap(),
        SetOutcome::Unchanged
    );
    assert!(
        !state_dir.join("state.json").exists(),
        "nothing written, nothing recorded"
    );
    assert_eq!(
        a.set(&mut fs, "sda", Tunable::Nomerges, "2").unwrap(),
        SetOutcome::Written { from: "0".into() }
    );
    let saved = FileStore::new(&state_dir).load().unwrap().unwrap();
    let rec = saved.state.get("sda", Tunable::Nomerges).unwrap();
    assert_eq!(
        (rec.original.as_str(), rec.last_written.as_deref()),
        ("0", Some("2"))
    );
    // A second write keeps the first original.
    a.set(&mut fs, "sda", Tunable::Nomerges, "1").unwrap();
    let saved = FileStore::new(&state_dir).load().unwrap().unwrap();
    assert_eq!(
        saved.state.get("sda", Tunable::Nomerges).unwrap().original,
        "0"
    );
    // Restore from the file, as `mergetune restore` does.
    let mut store = FileStore::new(&state_dir);
    let res = restore_from_store(&mut fs, &mut store, 0).unwrap().results;
    assert_eq!(
        res[0].outcome,
        RestoreOutcome::Restored {
            from: "1".into(),
            to: "0".into()
        }
    );
    assert_eq!(fs.read_attr("sda", "queue/nomerges").unwrap(), "0");
    assert!(!state_dir.join("state.json").exists());
}

#[test]
fn restore_leaves_someone_elses_value() {
    let t = tree();
    let (mut fs, _, mut a) = on_tree(t.path(), false);
    a.set(&mut fs, "sda", Tunable::Nomerges, "2").unwrap();
    fs.write_tunable("sda", Tunable::Nomerges, "1").unwrap(); // the admin
    let res = a.restore_all(&mut fs, 0);
    assert!(
        matches!(res[0].outcome, RestoreOutcome::LeftAlone { .. }),
        "{res:?}"
    );
    assert_eq!(fs.read_attr("sda", "queue/nomerges").unwrap(), "1");
}

#[test]
fn dry_run_writes_nothing() {
    let t = tree();
    let mut fs = fs_of(t.path());
    let mut a = Actuator::new(true, Box::new(MemoryStore::default()));
    assert_eq!(
        a.set(&mut fs, "sda", Tunable::Nomerges, "2").unwrap(),
        SetOutcome::DryRun { from: "0".into() }
    );
    assert_eq!(fs.read_attr("sda", "queue/nomerges").unwrap(), "0");
    assert!(a.saved().is_empty());
}

#[test]
fn no_write_when_the_original_cannot_be_recorded() {
    let t = tree();
    let mut fs = fs_of(t.path());
    // A state "dir" that is a file: the record cannot be written.
    let bad = t.path().join("not-a-dir");
    std::fs::write(&bad, "x").unwrap();
    let mut a = Actuator::new(false, Box::new(FileStore::new(&bad)));
    let e = a.set(&mut fs, "sda", Tunable::Nomerges, "2").unwrap_err();
    assert!(e.to_string().contains("not-a-dir"), "{e}");
    assert_eq!(fs.read_attr("sda", "queue/nomerges").unwrap(), "0");
}

#[test]
fn corrupt_state_file_is_an_error_naming_the_path() {
    let t = tree();
    let dir = t.path().join("state");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("state.json"), "{ not json").unwrap();
    let e = FileStore::new(&dir).load().unwrap_err().to_string();
    assert!(e.contains("state.json") && e.contains("corrupt"), "{e}");
}

#[test]
fn failed_writes_are_counted_and_retried_no_faster_than_the_policy_allows() {
    let mut cfg = Config::default();
    cfg.daemon.interval_ms = 1000;
    cfg.policy.window_ticks = 1;
    cfg.policy.disable_after_windows = 2;
    cfg.policy.min_dwell_secs = 30;
    cfg.policy.cost_profile = "lkml-2008".into(); // not merging pays here (2008 figures)
    let mut d = Daemon::simulated(cfg);
    let mut fs = MemKernel::failing_sda(WriteFault::Refused);
    for t in 0..120u64 {
        d.tick(t * 1000, &mut fs);
    }
    // One try, then one per dwell period (30 s): 120 s gives at most 4-5 tries, not 118.
    assert!(
        fs.write_attempts >= 2 && fs.write_attempts <= 5,
        "{}",
        fs.write_attempts
    );
    assert_eq!(d.counters.write_errors, fs.write_attempts);
    assert!(
        d.devices()["sda"].management.is_managed(),
        "a failed write is not fatal"
    );
}

#[test]
fn a_dry_run_keeps_what_it_would_have_written_and_writes_nothing() {
    let t = tree();
    let (mut fs, state_dir, mut a) = on_tree(t.path(), true);
    let kernel = |t: &Path| {
        std::fs::read_to_string(t.join("sys/block/sda/queue/nomerges"))
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(
        a.set(&mut fs, "sda", Tunable::Nomerges, "2").unwrap(),
        SetOutcome::DryRun { from: "0".into() }
    );
    assert_eq!(a.would_be("sda", Tunable::Nomerges), Some("2"));
    assert_eq!(a.as_seen("sda", Tunable::Nomerges, "0"), "2");
    // The next decision starts from the would-be value, as the live one starts from the
    // value it wrote: L3 -> L0 would write 2 -> 0, and another 2 would write nothing.
    assert_eq!(
        a.set(&mut fs, "sda", Tunable::Nomerges, "2").unwrap(),
        SetOutcome::Unchanged
    );
    assert_eq!(
        a.set(&mut fs, "sda", Tunable::Nomerges, "0").unwrap(),
        SetOutcome::DryRun { from: "2".into() }
    );
    assert_eq!(
        a.would_be("sda", Tunable::Nomerges),
        None,
        "back to the kernel's"
    );
    a.set(&mut fs, "sda", Tunable::Nomerges, "1").unwrap();
    assert_eq!(kernel(t.path()), "0", "the kernel's value is never written");
    assert!(!state_dir.join("state.json").exists(), "nor the state file");
    // Exit (or any hand-back) forgets the would-be values, and restores nothing.
    assert!(a.restore_all(&mut fs, 0).is_empty());
    assert_eq!(a.would_be("sda", Tunable::Nomerges), None);
    assert_eq!(kernel(t.path()), "0");
}

// ---- The actuator's own accounting (mutants cargo-mutants found surviving, docs/testing.md)

mod accounting {
    use crate::memkernel::{MemKernel, SharedStore, written_record};
    use mergetune_daemon::actuator::{Actuator, PersistChange};
    use mergetune_daemon::state::{SavedState, StateStore};
    use mergetune_kernel::tunable::Tunable;

    /// A failing state file is said once when it starts failing and once when it is
    /// written again; every failed save in between is counted, not said.
    #[test]
    fn the_state_files_health_is_said_once_per_change_and_every_failure_counted() {
        let store = SharedStore::default();
        let mut a = Actuator::new(false, Box::new(store.clone()));
        assert!(!a.dry_run());
        assert!(Actuator::new(true, Box::new(SharedStore::default())).dry_run());
        assert_eq!(a.store_name(), "mem:state.json");
        assert_eq!((a.save_errors(), a.take_persist_change()), (0, None));
        let mut fs = MemKernel::with(&["sda"]);
        *store.fail_saves.borrow_mut() = true;
        // Record before write: the save fails, so nothing is written.
        assert!(a.set(&mut fs, "sda", Tunable::Nomerges, "2").is_err());
        assert!(a.set(&mut fs, "sda", Tunable::Nomerges, "2").is_err());
        assert_eq!(a.save_errors(), 2);
        assert!(matches!(
            a.take_persist_change(),
            Some(PersistChange::Failing(_))
        ));
        assert_eq!(a.take_persist_change(), None, "said once");
        *store.fail_saves.borrow_mut() = false;
        a.set(&mut fs, "sda", Tunable::Nomerges, "2").unwrap();
        assert_eq!(
            a.take_persist_change(),
            Some(PersistChange::Persisted { records: 1 })
        );
        assert_eq!(a.save_errors(), 2);
    }

    /// Records an earlier run kept for a device that was gone are taken over, dated at this
    /// run's start when they carry no date, so the next restore still puts them back.
    #[test]
    fn adopted_records_of_a_gone_device_are_kept_and_dated_from_the_clock_origin() {
        let mut kept = SavedState::default();
        kept.devices
            .entry("sdz".into())
            .or_default()
            .insert(Tunable::Nomerges, written_record("0", "2"));
        let store = SharedStore::default();
        let mut a = Actuator::new(false, Box::new(store.clone()));
        a.set_clock_origin_unix_secs(1_700_000_000);
        a.adopt(kept);
        let saved = a.saved();
        let rec = &saved.devices["sdz"][&Tunable::Nomerges];
        assert_eq!(rec.original, "0");
        assert_eq!(rec.vanished_at_unix_secs, Some(1_700_000_000));
        // A vanished device's records are dated from the origin plus the daemon's time.
        let mut fs = MemKernel::with(&["sda"]);
        a.set(&mut fs, "sda", Tunable::Nomerges, "2").unwrap();
        a.device_vanished("sda", 5_000);
        let on_disk = store.load().unwrap().unwrap().state;
        assert_eq!(
            on_disk.devices["sda"][&Tunable::Nomerges].vanished_at_unix_secs,
            Some(1_700_000_005)
        );
    }

    /// At exit, the records of a device that is gone are kept for the next start and dated
    /// at the exit (the clock origin plus the daemon's time, in whole seconds); a device
    /// that is there but could not be restored keeps its record undated.
    #[test]
    fn restore_all_dates_only_a_gone_devices_records_at_the_exit() {
        let store = SharedStore::default();
        let mut a = Actuator::new(false, Box::new(store.clone()));
        a.set_clock_origin_unix_secs(1_700_000_000);
        let mut fs = MemKernel::with(&["sda", "sdb", "sdc"]);
        for dev in ["sda", "sdb", "sdc"] {
            a.set(&mut fs, dev, Tunable::Nomerges, "2").unwrap();
        }
        fs.devs.get_mut("sdb").unwrap().present = false;
        fs.faults
            .failing_writes
            .insert(("sdc".into(), Tunable::Nomerges));
        let out = a.restore_all(&mut fs, 7_900);
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(fs.value("sda", Tunable::Nomerges).as_deref(), Some("0"));
        let on_disk = store.load().unwrap().unwrap().state;
        assert!(!on_disk.devices.contains_key("sda"), "{on_disk:?}");
        assert_eq!(
            on_disk.devices["sdb"][&Tunable::Nomerges].vanished_at_unix_secs,
            Some(1_700_000_007)
        );
        assert_eq!(
            on_disk.devices["sdc"][&Tunable::Nomerges].vanished_at_unix_secs,
            None,
            "a failed restore of a device that is there is no vanishing"
        );
    }

    /// sda, and an actuator saving to `store` that has set its nomerges to 2 (or, on a dry
    /// run, would have).
    fn sda_at_nomerges_2(dry_run: bool, store: SharedStore) -> (Actuator, MemKernel) {
        let mut a = Actuator::new(dry_run, Box::new(store));
        let mut fs = MemKernel::with(&["sda"]);
        a.set(&mut fs, "sda", Tunable::Nomerges, "2").unwrap();
        (a, fs)
    }

    /// What mergetune last wrote is its own write, not the kernel's value and not a guess.
    #[test]
    fn last_written_is_the_last_value_mergetune_wrote() {
        let mut a = Actuator::new(false, Box::new(SharedStore::default()));
        let mut fs = MemKernel::with(&["sda"]);
        assert_eq!(a.last_written("sda", Tunable::Nomerges), None);
        a.set(&mut fs, "sda", Tunable::Nomerges, "1").unwrap();
        a.set(&mut fs, "sda", Tunable::Nomerges, "2").unwrap();
        assert_eq!(a.last_written("sda", Tunable::Nomerges), Some("2"));
    }

    /// A dry run's "would be" values go with the device: one that comes back starts from
    /// what the kernel holds, not from what a dry run once would have written.
    #[test]
    fn a_dry_runs_would_be_values_are_forgotten_when_the_device_goes() {
        let (mut a, fs) = sda_at_nomerges_2(true, SharedStore::default());
        assert_eq!(a.would_be("sda", Tunable::Nomerges), Some("2"));
        assert_eq!(fs.value("sda", Tunable::Nomerges).as_deref(), Some("0"));
        a.device_vanished("sda", 1_000);
        assert_eq!(a.would_be("sda", Tunable::Nomerges), None);
    }

    /// A tunable is someone else's only once their write was seen and handed off to them.
    #[test]
    fn a_tunable_is_theirs_only_after_a_hand_off() {
        let (mut a, mut fs) = sda_at_nomerges_2(false, SharedStore::default());
        assert!(!a.is_theirs("sda", Tunable::Nomerges));
        assert!(!a.is_theirs("sdb", Tunable::Nomerges));
        assert!(!a.any_theirs("sda", &[Tunable::Nomerges, Tunable::FrontMerges]));
        fs.set_behind_back("sda", Tunable::Nomerges, "1");
        a.hand_off(
            &mut fs,
            "sda",
            Tunable::Nomerges,
            "1",
            &[Tunable::FrontMerges],
        );
        assert!(a.is_theirs("sda", Tunable::Nomerges));
        assert!(!a.is_theirs("sda", Tunable::FrontMerges));
        assert!(a.any_theirs("sda", &[Tunable::FrontMerges, Tunable::Nomerges]));
        assert!(!a.any_theirs("sda", &[Tunable::FrontMerges]));
    }

    /// After failed saves, the next tick's retry writes the records once the store takes
    /// them again; nothing is retried while the store is up to date.
    #[test]
    fn a_failed_save_is_retried_until_the_records_are_on_disk() {
        let store = SharedStore::default();
        let (mut a, _) = sda_at_nomerges_2(false, store.clone());
        *store.fail_saves.borrow_mut() = true;
        // A vanished device's save fails: the file still holds the older records.
        a.device_vanished("sda", 1_000);
        assert!(!a.persisted());
        assert!(a.retry_persist().is_err());
        *store.fail_saves.borrow_mut() = false;
        a.retry_persist().unwrap();
        assert!(a.persisted());
        let on_disk = store.load().unwrap().unwrap().state;
        assert!(
            on_disk.devices["sda"][&Tunable::Nomerges]
                .vanished_at_unix_secs
                .is_some()
        );
    }

    /// A device back in mergetune's care after a reload starts from what it holds then:
    /// what was first seen of a tunable it never wrote is forgotten.
    #[test]
    fn refresh_unowned_forgets_what_was_seen_of_tunables_never_written() {
        let mut a = Actuator::new(false, Box::new(SharedStore::default()));
        a.observe("sda", Tunable::FrontMerges, Some("1"));
        assert_eq!(a.first_seen("sda", Tunable::FrontMerges), Some("1"));
        let mut fs = MemKernel::with(&["sda"]);
        a.set(&mut fs, "sda", Tunable::Nomerges, "2").unwrap();
        a.refresh_unowned("sda");
        assert_eq!(a.first_seen("sda", Tunable::FrontMerges), None);
        // What it wrote keeps its record, original included.
        assert_eq!(a.saved().devices["sda"][&Tunable::Nomerges].original, "0");
        assert_eq!(a.expected("sda", Tunable::Nomerges), Some("2"));
    }

    /// Only a device seen to vanish has records kept from before it went.
    #[test]
    fn has_vanished_records_only_after_the_device_went() {
        let (mut a, _) = sda_at_nomerges_2(false, SharedStore::default());
        assert!(!a.has_vanished_records("sda"));
        assert!(!a.has_vanished_records("sdb"));
        a.device_vanished("sda", 1_000);
        assert!(a.has_vanished_records("sda"));
    }

    /// A device that leaves mergetune's care is restored, and the state file then holds
    /// nothing more to restore for it.
    #[test]
    fn restoring_a_device_saves_the_records_without_it() {
        let store = SharedStore::default();
        let (mut a, mut fs) = sda_at_nomerges_2(false, store.clone());
        assert!(store.load().unwrap().is_some());
        let out = a.restore_device(&mut fs, "sda");
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(fs.value("sda", Tunable::Nomerges).as_deref(), Some("0"));
        let left = store.load().unwrap().map(|l| l.state);
        assert!(left.as_ref().is_none_or(|s| s.is_empty()), "{left:?}");
    }
}
