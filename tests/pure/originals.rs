//! The promise to the operator: every tunable ends at its original value, or at the last
//! value someone else set where mergetune handed it off; never at a value only mergetune
//! wrote, and a value that was not the kernel's default when mergetune first saw it is
//! never touched. Checked on the daemon's own tick loop over an in-memory block stack with
//! injected faults: deterministic cases for each way it used to break, then a property over
//! random workloads, fault schedules and reloads, stopped cleanly, crashed at the end, or
//! crashed inside a write (between its pending save and the write, or between the write and
//! its confirming save), and followed by `restore`.

use crate::memkernel;

use memkernel::{Crash, CrashAt, FixedStore, Load, MemKernel, SharedStore};
use mergetune_daemon::actuator::Actuator;
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::state::{RestoreOutcome, restore_from_store};
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::{self, Config};
use mergetune_logic::decision::Level;
use mergetune_logic::policy::{Mode, Reason};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Short windows so a few ticks walk the whole ladder.
fn fast_config() -> Config {
    let mut cfg = crate::configs::one_window_policy();
    cfg.daemon.interval_ms = 1000;
    cfg.daemon.rescan_every_ticks = 1;
    cfg.policy.step_down_after_windows = 1;
    cfg.policy.probe_initial_backoff_secs = 5;
    cfg.policy.probe_max_backoff_secs = 20;
    cfg.policy.l3_watch_interval_ms = 0;
    cfg.policy.cost_profile = "lkml-2008".into(); // not merging pays here (2008 figures)
    cfg.slices.windows = 1;
    cfg.validate("test").unwrap();
    cfg
}

fn daemon(store: &SharedStore) -> Daemon {
    Daemon::new(fast_config(), Actuator::new(false, Box::new(store.clone())))
}

/// A daemon over one mq-deadline disk `sda` under random writes with a rare merge (the
/// ladder is walked, so both tunables are written), at time 0.
fn random_sda() -> (SharedStore, MemKernel, Daemon, u64) {
    let store = SharedStore::default();
    let mut k = MemKernel::with(&["sda"]);
    k.devs.get_mut("sda").unwrap().load = Load::RandomRareMerges;
    let d = daemon(&store);
    (store, k, d, 0)
}

/// Ticks `n` times from `*t`, one second apart, with `bios` bios per tick.
/// sda's nomerges and front_merges are the kernel's defaults, 0 and 1.
fn assert_sda_at_the_kernels_defaults(k: &MemKernel) {
    assert_eq!(k.value("sda", Tunable::Nomerges).as_deref(), Some("0"));
    assert_eq!(k.value("sda", Tunable::FrontMerges).as_deref(), Some("1"));
}

/// sda's nomerges, which the daemon has taken off 0 (`why` it should have).
fn nomerges_off_0(k: &MemKernel, why: &str) -> String {
    let nm = k.value("sda", Tunable::Nomerges).unwrap();
    assert_ne!(nm, "0", "{why}");
    nm
}

/// The outcomes of a restore's `report`: `all` or `any` of them match `pattern`.
macro_rules! assert_outcomes {
    ($report:expr, $all_or_any:ident, $pattern:pat) => {
        assert!(
            $report
                .results
                .iter()
                .$all_or_any(|r| matches!(r.outcome, $pattern)),
            "{:?}",
            $report.results
        )
    };
}

fn run(d: &mut Daemon, k: &mut MemKernel, t: &mut u64, n: u64) {
    for _ in 0..n {
        k.advance(20_000);
        d.tick(*t, k);
        *t += 1000;
    }
}

#[test]
fn someone_elses_nomerges_leaves_mergetunes_front_merges_restored() {
    let (store, mut k, mut d, mut t) = random_sda();
    run(&mut d, &mut k, &mut t, 4);
    // L1 wrote front_merges 0, then L2 nomerges 1.
    assert_eq!(k.value("sda", Tunable::FrontMerges).as_deref(), Some("0"));
    assert_ne!(k.value("sda", Tunable::Nomerges).as_deref(), Some("0"));
    k.set_behind_back("sda", Tunable::Nomerges, "0"); // the admin
    run(&mut d, &mut k, &mut t, 3);
    // The hand-off puts back the tunable that is still mergetune's, at once.
    assert_eq!(k.value("sda", Tunable::FrontMerges).as_deref(), Some("1"));
    d.restore_all(t, &mut k);
    assert_sda_at_the_kernels_defaults(&k);
    assert!(store.text.borrow().is_none(), "nothing left to restore");
}

/// The tick holds an idle device's window without asking the policy, and still reads its
/// tunables: someone else's write is seen at the next window's close, busy or not.
#[test]
fn an_idle_devices_window_still_sees_someone_elses_write() {
    let (_store, mut k, mut d, mut t) = random_sda();
    let merging_at = |d: &Daemon, level: Level| {
        let s = d.snapshot();
        let dev = &s.devices.iter().find(|x| x.name == "sda").unwrap();
        dev.management.is_managed() && dev.level == Some(level) && dev.mode == Some(Mode::Merging)
    };
    run(&mut d, &mut k, &mut t, 2);
    assert!(merging_at(&d, Level::L1), "{:?}", d.snapshot().devices);
    assert_eq!(k.value("sda", Tunable::FrontMerges).as_deref(), Some("0"));
    k.devs.get_mut("sda").unwrap().load = Load::Idle;
    run(&mut d, &mut k, &mut t, 1);
    let s = d.snapshot();
    let dev = s.devices.iter().find(|x| x.name == "sda").unwrap();
    assert!(
        matches!(dev.last_reason, Reason::Idle { .. }),
        "{}",
        dev.last_reason
    );
    k.set_behind_back("sda", Tunable::Nomerges, "1"); // the admin
    run(&mut d, &mut k, &mut t, 1);
    let s = d.snapshot();
    let dev = s.devices.iter().find(|x| x.name == "sda").unwrap();
    assert!(!dev.management.is_managed(), "{:?}", dev.management);
    // The hand-off puts back the tunable that is still mergetune's, at once.
    assert_eq!(k.value("sda", Tunable::FrontMerges).as_deref(), Some("1"));
    assert_eq!(k.value("sda", Tunable::Nomerges).as_deref(), Some("1"));
}

#[test]
fn someone_elses_front_merges_leaves_mergetunes_nomerges_restored() {
    let (_store, mut k, mut d, mut t) = random_sda();
    // L1: front_merges 0 (nomerges still 0), then L2: nomerges 1.
    run(&mut d, &mut k, &mut t, 3);
    nomerges_off_0(&k, "at L2 or L3 by now");
    k.set_behind_back("sda", Tunable::FrontMerges, "1"); // someone else
    // front_merges is not checked above L1; a probe back to L0 sees it.
    run(&mut d, &mut k, &mut t, 40);
    d.restore_all(t, &mut k);
    assert_sda_at_the_kernels_defaults(&k);
}

#[test]
fn a_failed_state_save_means_no_write_and_nothing_lost() {
    let (store, mut k, mut d, mut t) = random_sda();
    *store.fail_saves.borrow_mut() = true;
    run(&mut d, &mut k, &mut t, 6);
    assert!(
        k.writes.is_empty(),
        "nothing written unrecorded: {:?}",
        k.writes
    );
    assert!(!d.counters.state_persisted, "the failed saves are reported");
    // The state directory failed, not sysfs (which was never tried): the counters say which.
    assert!(
        d.counters.state_save_errors > 0,
        "the failed saves are counted"
    );
    assert_eq!(d.counters.write_errors, 0, "no sysfs write failed");
    // The store comes back: the ladder goes on, recorded.
    *store.fail_saves.borrow_mut() = false;
    run(&mut d, &mut k, &mut t, 6);
    assert!(!k.writes.is_empty());
    assert!(d.counters.state_persisted);
    // A save failing after a write: the write is kept in memory and restored on exit.
    *store.fail_saves.borrow_mut() = true;
    k.devs.get_mut("sda").unwrap().load = Load::Sequential;
    run(&mut d, &mut k, &mut t, 30);
    d.restore_all(t, &mut k);
    assert_sda_at_the_kernels_defaults(&k);
}

/// At L3 with the state directory full, a sequential load must bring merging back at
/// once: writing the originals back needs no new record.
#[test]
fn merging_comes_back_while_the_state_cannot_be_saved() {
    let store = SharedStore::default();
    let mut k = MemKernel::with(&["sda"]);
    k.devs.get_mut("sda").unwrap().load = Load::Random;
    let mut d = daemon(&store);
    let mut t = 0;
    run(&mut d, &mut k, &mut t, 6);
    assert_eq!(
        k.value("sda", Tunable::Nomerges).as_deref(),
        Some("2"),
        "at L3"
    );
    let recorded = store.text.borrow().clone().unwrap();
    *store.fail_saves.borrow_mut() = true;
    k.devs.get_mut("sda").unwrap().load = Load::Sequential;
    run(&mut d, &mut k, &mut t, 3);
    assert_eq!(
        k.value("sda", Tunable::Nomerges).as_deref(),
        Some("0"),
        "merging back on though no save succeeds: {:?}",
        d.devices()["sda"].last_reason
    );
    assert_eq!(k.value("sda", Tunable::FrontMerges).as_deref(), Some("1"));
    assert_eq!(d.devices()["sda"].policy.level(), Level::L0);
    // The file still holds the L3 record; a restore from it after a crash now leaves the
    // originals as they are.
    assert_eq!(store.text.borrow().as_deref(), Some(recorded.as_str()));
    let mut file = store.clone();
    *file.fail_saves.borrow_mut() = false;
    let report = restore_from_store(&mut k, &mut file, 0).unwrap();
    assert_outcomes!(report, all, RestoreOutcome::AlreadyOriginal { .. });
    // A step away from the original still waits for a record.
    *file.fail_saves.borrow_mut() = true;
    k.devs.get_mut("sda").unwrap().load = Load::Random;
    let writes = k.writes.len();
    run(&mut d, &mut k, &mut t, 6);
    assert_eq!(
        k.writes.len(),
        writes,
        "nothing written unrecorded: {:?}",
        k.writes
    );
}

#[test]
fn a_device_gone_for_a_while_and_back_at_mergetunes_value_is_still_restored() {
    let (_store, mut k, mut d, mut t) = random_sda();
    run(&mut d, &mut k, &mut t, 6);
    assert_eq!(k.value("sda", Tunable::Nomerges).as_deref(), Some("2"));
    k.devs.get_mut("sda").unwrap().present = false;
    run(&mut d, &mut k, &mut t, 5); // several rescans
    k.devs.get_mut("sda").unwrap().present = true; // back, still at nomerges 2
    run(&mut d, &mut k, &mut t, 1);
    assert_eq!(
        k.value("sda", Tunable::Nomerges).as_deref(),
        Some("0"),
        "its original is put back as it returns"
    );
    assert!(d.devices()["sda"].management.is_managed());
    d.restore_all(t, &mut k);
    assert_eq!(k.value("sda", Tunable::Nomerges).as_deref(), Some("0"));
}

#[test]
fn a_device_still_gone_at_exit_keeps_its_record_for_the_next_restore() {
    let (store, mut k, mut d, mut t) = random_sda();
    run(&mut d, &mut k, &mut t, 6);
    k.devs.get_mut("sda").unwrap().present = false;
    run(&mut d, &mut k, &mut t, 3);
    d.restore_all(t, &mut k);
    assert!(store.text.borrow().is_some(), "the record stays");
    k.devs.get_mut("sda").unwrap().present = true;
    let mut s = store.clone();
    let report = restore_from_store(&mut k, &mut s, 1000).unwrap();
    assert!(!report.failed());
    assert_eq!(k.value("sda", Tunable::Nomerges).as_deref(), Some("0"));
    assert!(store.text.borrow().is_none());
}

#[test]
fn an_unreadable_tunable_is_counted_and_warned_about_rarely() {
    let (_store, mut k, mut d, mut t) = random_sda();
    run(&mut d, &mut k, &mut t, 1);
    k.faults
        .failing_reads
        .insert(("sda".into(), "queue/nomerges".into()));
    run(&mut d, &mut k, &mut t, 20);
    assert!(
        d.counters.tunable_read_errors >= 10,
        "{}",
        d.counters.tunable_read_errors
    );
    assert!(
        k.writes.is_empty(),
        "no decision on a tunable it cannot read"
    );
}

/// A daemon over `sda` under random writes whose process dies at `at` (see [`CrashAt`]).
fn crashing_sda(at: CrashAt) -> (SharedStore, MemKernel, Daemon, u64) {
    let (store, mut k, d, t) = random_sda();
    k.crash = store.crash.clone();
    k.crash.borrow_mut().at = Some(at);
    (store, k, d, t)
}

/// Ticks until the process is dead (at most `n` ticks), then "reboots": `restore`.
fn crash_and_restore(
    store: &SharedStore,
    k: &mut MemKernel,
    mut d: Daemon,
    t: &mut u64,
) -> Vec<mergetune_daemon::state::RestoreResult> {
    for _ in 0..20 {
        if k.crash.borrow().dead {
            break;
        }
        run(&mut d, k, t, 1);
    }
    assert!(k.crash.borrow().dead, "the crash point was reached");
    drop(d);
    *k.crash.borrow_mut() = Crash::default();
    let mut s = store.clone();
    let report = restore_from_store(k, &mut s, *t / 1000).unwrap();
    assert!(store.text.borrow().is_none(), "nothing left to restore");
    report.results
}

#[test]
fn a_crash_after_the_pending_save_and_before_the_write_restores_what_was_written_before() {
    // Write 1: front_merges 1 -> 0 (L1), confirmed. Write 2: nomerges 0 -> 1 (L2): its
    // pending record is saved, then the process dies before the write.
    let (store, mut k, d, mut t) = crashing_sda(CrashAt::BeforeWrite(2));
    let results = crash_and_restore(&store, &mut k, d, &mut t);
    assert_sda_at_the_kernels_defaults(&k);
    let outcome = |t: Tunable| {
        results
            .iter()
            .find(|r| r.tunable == t)
            .map(|r| r.outcome.clone())
    };
    assert_eq!(
        outcome(Tunable::Nomerges),
        Some(RestoreOutcome::AlreadyOriginal { value: "0".into() }),
        "the pending write never happened: nothing to put back"
    );
    assert_eq!(
        outcome(Tunable::FrontMerges),
        Some(RestoreOutcome::Restored {
            from: "0".into(),
            to: "1".into()
        })
    );
}

#[test]
fn a_crash_after_the_write_and_before_its_confirming_save_restores_the_pending_value() {
    // The first write (front_merges 1 -> 0) reaches the kernel; the save that would have
    // recorded it as written never happens: the file names it only as pending.
    let (store, mut k, d, mut t) = crashing_sda(CrashAt::AfterWrite(1));
    let results = crash_and_restore(&store, &mut k, d, &mut t);
    assert_eq!(
        results
            .iter()
            .map(|r| (r.tunable, r.outcome.clone()))
            .collect::<Vec<_>>(),
        vec![(
            Tunable::FrontMerges,
            RestoreOutcome::Restored {
                from: "0".into(),
                to: "1".into()
            }
        )],
        "the pending value is mergetune's: restored, not left alone as someone else's"
    );
    assert_eq!(k.value("sda", Tunable::FrontMerges).as_deref(), Some("1"));
}

#[test]
fn a_scheduler_switch_hands_off_its_tunables_instead_of_keeping_them_as_a_device_gone() {
    let (store, mut k, mut d, mut t) = random_sda();
    run(&mut d, &mut k, &mut t, 4);
    assert_eq!(k.value("sda", Tunable::FrontMerges).as_deref(), Some("0"));
    // The admin switches sda to `none`: mq-deadline's iosched/ files go with it.
    let dev = k.devs.get_mut("sda").unwrap();
    dev.attrs
        .retain(|rel, _| !rel.starts_with("queue/iosched/"));
    dev.attrs
        .insert("queue/scheduler".into(), "[none] mq-deadline kyber".into());
    run(&mut d, &mut k, &mut t, 3);
    let text = store.text.borrow().clone().unwrap_or_default();
    assert!(
        !text.contains("front_merges"),
        "no record is kept for a file that went with its scheduler: {text}"
    );
    let results = d.actuator().saved();
    assert!(results.get("sda", Tunable::FrontMerges).is_none());
    d.restore_all(t, &mut k);
    assert_eq!(k.value("sda", Tunable::Nomerges).as_deref(), Some("0"));
    assert!(store.text.borrow().is_none(), "nothing kept for 7 days");
    // And `restore` from a file that still names it says what happened.
    let mut s = store.clone();
    *s.text.borrow_mut() = Some(
        r#"{"version":2,"pid":1,"devices":{"sda":{"queue/iosched/front_merges":{"original":"1","last_written":"0"}}}}"#
            .into(),
    );
    let report = restore_from_store(&mut k, &mut s, 0).unwrap();
    assert_eq!(report.results[0].outcome, RestoreOutcome::SchedulerChanged);
    assert!(report.results[0].to_string().contains("scheduler switch"));
    assert_eq!(report.kept, 0);
}

#[test]
fn a_value_that_was_not_the_kernels_default_is_never_touched() {
    // sda is managed (nomerges 0), but an operator set its slice tunables.
    let store = SharedStore::default();
    let mut k = MemKernel::with(&["sda"]);
    let dev = k.devs.get_mut("sda").unwrap();
    dev.attrs
        .insert(Tunable::WritesStarved.rel_path().into(), "4".into());
    dev.attrs
        .insert(Tunable::ReadExpire.rel_path().into(), "250".into());
    let mut d = daemon(&store);
    let mut t = 0;
    for load in [
        Load::StarvingReads,
        Load::Random,
        Load::StarvingReads,
        Load::Idle,
    ] {
        k.devs.get_mut("sda").unwrap().load = load;
        run(&mut d, &mut k, &mut t, 30);
    }
    // Someone else then moves read_expire before mergetune ever wrote it.
    k.set_behind_back("sda", Tunable::ReadExpire, "300");
    k.devs.get_mut("sda").unwrap().load = Load::StarvingReads;
    run(&mut d, &mut k, &mut t, 30);
    let touched: Vec<_> = k
        .writes
        .iter()
        .filter(|(_, t, _)| matches!(t, Tunable::WritesStarved | Tunable::ReadExpire))
        .collect();
    assert!(touched.is_empty(), "written: {touched:?}");
    assert!(
        k.writes.iter().any(|(_, t, _)| *t == Tunable::Nomerges),
        "the ladder did manage the device"
    );
    d.restore_all(t, &mut k);
    assert_eq!(k.value("sda", Tunable::WritesStarved).as_deref(), Some("4"));
    assert_eq!(k.value("sda", Tunable::ReadExpire).as_deref(), Some("300"));
}

/// A slice tunable that cannot be written (EIO here, EPERM on an immutable file) backs off
/// as the ladder's writes do: 100 ms doubling to five minutes, said once, and once more when
/// a write works again. Before, every window's step was tried again and warned about.
#[test]
fn failing_slice_writes_back_off_and_are_said_once() {
    use mergetune_logic::decision::Applied;
    let store = SharedStore::default();
    let mut cfg = fast_config();
    cfg.slices.enabled = true;
    let mut d = Daemon::new(cfg, Actuator::new(false, Box::new(store.clone())));
    let mut k = MemKernel::with(&["sda"]);
    k.devs.get_mut("sda").unwrap().load = Load::StarvingReads;
    let slice_tunables = mergetune_daemon::adaptive::slices();
    for t in slice_tunables {
        k.faults.failing_writes.insert(("sda".into(), *t));
    }
    let is_slice = |t: &Tunable| slice_tunables.contains(t);
    let mut t = 0u64;
    let mut tries = 0;
    let said = logged(|| {
        for _ in 0..120 {
            k.advance(20_000);
            tries += d
                .tick(t, &mut k)
                .iter()
                .filter(|x| matches!(x.applied, Applied::Failed(_)))
                .filter(|x| x.changes.iter().any(|c| is_slice(&c.tunable)))
                .count();
            t += 1000;
        }
    });
    // 120 windows of one second: tries at 0, 1, 2, 3, 4, 6, 10, 17, 30, 56, 108 s.
    assert!((2..=12).contains(&tries), "{tries} tries in 120 s:\n{said}");
    let warned = said
        .lines()
        .filter(|l| l.contains("slices unchanged") && l.contains("WARN"))
        .count();
    assert_eq!(warned, 1, "{said}");
    assert!(said.contains("backing off"), "{said}");
    k.faults.failing_writes.clear();
    let said = logged(|| run(&mut d, &mut k, &mut t, 400));
    assert_eq!(
        said.matches("slices: written again after").count(),
        1,
        "{said}"
    );
    assert!(
        k.writes.iter().any(|(_, tn, _)| is_slice(tn)),
        "the slices were tuned once the writes worked"
    );
}

#[test]
fn restore_puts_back_the_recorded_originals_not_the_kernels_defaults() {
    // Records whose originals are not the kernel's defaults (a file from another release,
    // or from a machine whose kernel has other defaults): restore writes what is recorded.
    let mut k = MemKernel::with(&["sda"]);
    for (t, v) in [
        (Tunable::Nomerges, "2"),
        (Tunable::FrontMerges, "1"),
        (Tunable::WritesStarved, "5"),
        (Tunable::ReadExpire, "125"),
    ] {
        k.set_behind_back("sda", t, v);
    }
    let mut s = SharedStore::default();
    *s.text.borrow_mut() = Some(
        r#"{"version":2,"pid":1,"devices":{"sda":{
            "queue/nomerges":{"original":"1","last_written":"2"},
            "queue/iosched/front_merges":{"original":"0","last_written":"1"},
            "queue/iosched/writes_starved":{"original":"4","last_written":"5"},
            "queue/iosched/read_expire":{"original":"250","last_written":"125"}}}}"#
            .into(),
    );
    let report = restore_from_store(&mut k, &mut s, 0).unwrap();
    assert!(!report.failed(), "{:?}", report.results);
    assert_eq!(k.value("sda", Tunable::Nomerges).as_deref(), Some("1"));
    assert_eq!(k.value("sda", Tunable::FrontMerges).as_deref(), Some("0"));
    assert_eq!(k.value("sda", Tunable::WritesStarved).as_deref(), Some("4"));
    assert_eq!(k.value("sda", Tunable::ReadExpire).as_deref(), Some("250"));
}

/// Collects what the daemon logs while `f` runs.
fn logged(f: impl FnOnce()) -> String {
    let logs = crate::logs::Logs::default();
    logs.capture(f);
    logs.text()
}

#[test]
fn an_unreadable_queue_attribute_is_warned_about_once_until_it_changes() {
    let (_store, mut k, mut d, mut t) = random_sda();
    let key = ("sda".to_string(), "queue/scheduler".to_string());
    let log = logged(|| {
        run(&mut d, &mut k, &mut t, 1);
        k.faults.failing_reads.insert(key.clone());
        run(&mut d, &mut k, &mut t, 30); // a rescan every tick here
        k.faults.failing_reads.remove(&key);
        run(&mut d, &mut k, &mut t, 3);
        k.faults.failing_reads.insert(key.clone());
        run(&mut d, &mut k, &mut t, 5);
    });
    let warned = log
        .lines()
        .filter(|l| l.contains("cannot read queue attributes"))
        .count();
    assert_eq!(warned, 2, "once, and once more after it cleared:\n{log}");
    assert_eq!(log.matches("readable again").count(), 1, "{log}");
}

#[test]
fn persisted_is_claimed_only_once_the_file_reads_back() {
    // A store whose saves report success and keep nothing (a lying file system).
    let mut k = MemKernel::with(&["sda"]);
    k.devs.get_mut("sda").unwrap().load = Load::Random;
    let mut d = Daemon::new(
        fast_config(),
        Actuator::new(false, Box::new(FixedStore(None))),
    );
    let mut t = 0;
    run(&mut d, &mut k, &mut t, 6);
    assert!(
        k.writes.is_empty(),
        "nothing is written over an unproven record: {:?}",
        k.writes
    );
    assert!(!d.counters.state_persisted);
    assert!(d.counters.state_save_errors > 0);
}

/// One step of a fault schedule, applied between two ticks.
#[derive(Debug, Clone)]
enum Step {
    Load(usize, Load),
    Tick(u8),
    FailRead(usize, Tunable, bool),
    FailWrite(usize, Tunable, bool),
    FailSaves(bool),
    Foreign(usize, Tunable, u8),
    Vanish(usize),
    Return(usize, bool),
    /// Another disk takes the name (new diskseq, the kernel's defaults); then, if given,
    /// its operator writes this nomerges on it.
    Replace(usize, Option<u8>),
    /// Loop-style: the device is detached (its queue and values stay, `diskseq` moves).
    Detach(usize),
    /// Loop-style: attached again, to the same backing file (`true`: the same disk, its
    /// queue holding what it held) or to another (another disk, whose values, the queue's
    /// as they stand, are its own).
    Attach(usize, bool),
    DiskstatsFails(bool),
    Reload(Reload),
    /// A `calibrate --device` on this device while the daemon ticks this many times.
    Calibrate(usize, u8),
    /// A second daemon (its own state directory, the same runtime directory) ticking
    /// alongside for this many ticks, then stopped.
    SecondDaemon(u8),
}

/// A SIGHUP with a new config (the run loop's path: parse, validate, `try_reload`).
#[derive(Debug, Clone, Copy)]
enum Reload {
    /// `daemon.state_dir` moved: must be refused, the old config kept.
    StateDir,
    /// The other cost profile.
    CostProfile,
    /// `devices.exclude` names this device (it leaves mergetune's care).
    Exclude(usize),
    /// `devices.exclude` empty again.
    IncludeAll,
    /// A file that does not parse: rejected before the daemon sees it.
    Broken,
}

/// How the run ends.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// SIGTERM: `restore_all`, then the unit's `restore`.
    Clean,
    /// SIGKILL after the schedule, then `restore` from the file.
    CrashAtEnd,
    /// SIGKILL inside a tunable write (or at the end, if the schedule writes fewer).
    CrashIn(CrashAt),
}

const DEVS: [&str; 2] = ["sda", "sdb"];
const WATCHED: [Tunable; 4] = [
    Tunable::Nomerges,
    Tunable::FrontMerges,
    Tunable::WritesStarved,
    Tunable::ReadExpire,
];

/// The machine as found: sda at the kernel's defaults; sdb managed, but with two slice
/// tunables an operator set (not the defaults 2 and 500): they are never to be touched.
fn kernel() -> MemKernel {
    let mut k = MemKernel::with(&DEVS);
    // Both are loop-style devices: their queues survive a detach and a re-attach.
    for d in DEVS {
        k.loop_attach(d, &format!("/img/{d}-0000"));
    }
    let sdb = k.devs.get_mut("sdb").unwrap();
    sdb.attrs
        .insert(Tunable::WritesStarved.rel_path().into(), "4".into());
    sdb.attrs
        .insert(Tunable::ReadExpire.rel_path().into(), "250".into());
    k
}

fn tunable() -> impl Strategy<Value = Tunable> {
    prop::sample::select(WATCHED.to_vec())
}

fn reload() -> impl Strategy<Value = Reload> {
    prop_oneof![
        Just(Reload::StateDir),
        Just(Reload::CostProfile),
        (0..DEVS.len()).prop_map(Reload::Exclude),
        Just(Reload::IncludeAll),
        Just(Reload::Broken),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let dev = 0..DEVS.len();
    prop_oneof![
        4 => (dev.clone(), prop::sample::select(vec![
            Load::Idle, Load::Random, Load::RandomRareMerges, Load::Sequential,
            Load::StarvingReads,
        ])).prop_map(|(d, l)| Step::Load(d, l)),
        8 => (1u8..8).prop_map(Step::Tick),
        1 => (dev.clone(), tunable(), any::<bool>()).prop_map(|(d, t, b)| Step::FailRead(d, t, b)),
        1 => (dev.clone(), tunable(), any::<bool>()).prop_map(|(d, t, b)| Step::FailWrite(d, t, b)),
        1 => any::<bool>().prop_map(Step::FailSaves),
        1 => (dev.clone(), tunable(), 0u8..3).prop_map(|(d, t, v)| Step::Foreign(d, t, v)),
        1 => dev.clone().prop_map(Step::Vanish),
        1 => (dev.clone(), any::<bool>()).prop_map(|(d, b)| Step::Return(d, b)),
        1 => (dev.clone(), proptest::option::of(0u8..3)).prop_map(|(d, v)| Step::Replace(d, v)),
        1 => dev.clone().prop_map(Step::Detach),
        1 => (dev.clone(), any::<bool>()).prop_map(|(d, same)| Step::Attach(d, same)),
        1 => any::<bool>().prop_map(Step::DiskstatsFails),
        1 => reload().prop_map(Step::Reload),
        1 => (dev.clone(), 1u8..6).prop_map(|(d, n)| Step::Calibrate(d, n)),
        1 => (1u8..8).prop_map(Step::SecondDaemon),
    ]
}

/// Runs `f` with no fault armed and no crash pending: another process's writes (calibrate,
/// a second daemon's restore) are not the daemon under test's, whose crash counts its own.
fn unfaulted<R>(k: &mut MemKernel, f: impl FnOnce(&mut MemKernel) -> R) -> R {
    let faults = std::mem::take(&mut k.faults);
    let crash = std::mem::take(&mut *k.crash.borrow_mut());
    let out = f(k);
    k.faults = faults;
    *k.crash.borrow_mut() = crash;
    out
}

/// The error of a claim refused, if it does not name this process as the owner (every
/// owner here is this process: the claims are real `flock`s on separate descriptions).
fn names_the_owner(what: &str, e: &str) -> Result<(), String> {
    let pid = format!("(pid {})", std::process::id());
    if e.contains("owned by a running process") && !e.contains(&pid) {
        return Err(format!(
            "{what} refused without naming the owner {pid}: {e}"
        ));
    }
    Ok(())
}

/// A `calibrate --device dev` while the daemon ticks `n` times. It claims the device as
/// calibrate does (crates/lab/src/calibrate/merge_path.rs): refused, naming the owner's pid,
/// while the daemon holds records of it; else it owns the device for the ticks (nomerges 2
/// written through an actuator of its own, whose saves claim as every store does), the
/// daemon writes nothing to it meanwhile, and it puts back what it found.
fn calibrate_alongside(
    d: &mut Daemon,
    k: &mut MemKernel,
    t: &mut u64,
    rt: &std::path::Path,
    dev: &str,
    n: u8,
) -> Result<(), String> {
    use mergetune_daemon::state::{Claims, StateError};
    let Some(id) = mergetune_kernel::devices::read_identity(k, dev)
        .ok()
        .flatten()
    else {
        return Ok(());
    };
    let mut claims = Claims::under(rt);
    match claims.claim(dev, id.dev) {
        Ok(()) => {}
        Err(e @ StateError::DeviceOwned { .. }) => {
            return names_the_owner("calibrate", &e.to_string());
        }
        Err(e) => return Err(format!("calibrate's claim: {e}")),
    }
    let store = SharedStore {
        claims: Some(claims),
        ..SharedStore::default()
    };
    let mut cal = Actuator::new(false, Box::new(store.clone()));
    let _ = unfaulted(k, |k| cal.set(k, dev, Tunable::Nomerges, "2"));
    let before = k.writes.len();
    run(d, k, t, u64::from(n));
    if let Some(w) = k.writes[before..].iter().find(|(w, _, _)| w == dev) {
        return Err(format!(
            "the daemon wrote {w:?} while calibrate owned {dev}"
        ));
    }
    unfaulted(k, |k| cal.restore_device(k, dev));
    if store.text.borrow().is_some() {
        return Err(format!(
            "calibrate left records of {dev}: {:?}",
            store.text.borrow()
        ));
    }
    Ok(())
}

/// The devices whose claim a live process holds now (every owner here is this process:
/// the claims are real `flock`s, on separate open descriptions).
fn claimed(k: &mut MemKernel, rt: &std::path::Path) -> Vec<String> {
    let claims = mergetune_daemon::state::Claims::under(rt);
    DEVS.iter()
        .filter(|d| {
            mergetune_kernel::devices::read_identity(k, d)
                .ok()
                .flatten()
                .is_some_and(|id| matches!(claims.other_owner(id.dev), Ok(Some(_))))
        })
        .map(|d| d.to_string())
        .collect()
}

/// The devices a store's file records.
fn recorded(store: &SharedStore) -> Vec<String> {
    use mergetune_daemon::state::StateStore;
    store
        .load()
        .ok()
        .flatten()
        .map(|l| l.state.devices.into_keys().collect())
        .unwrap_or_default()
}

/// A second daemon with its own state directory, ticking alongside the first for `n`
/// ticks, then stopped (SIGTERM, then its unit's `restore`). Neither writes a device whose
/// claim the other holds, and each write the second is refused names the owner's pid.
fn second_daemon_alongside(
    d: &mut Daemon,
    k: &mut MemKernel,
    t: &mut u64,
    rt: &std::path::Path,
    n: u8,
) -> Result<(), String> {
    use mergetune_daemon::state::Claims;
    use mergetune_logic::decision::Applied;
    // The second's saves never fail (it runs unfaulted): its file names exactly the
    // devices it claims, and every other claim is the first's.
    let store = SharedStore {
        claims: Some(Claims::under(rt)),
        ..SharedStore::default()
    };
    let mut second = daemon(&store);
    let untouched = |k: &MemKernel, from: usize, others: &[String], who: &str| match k.writes
        [from..]
        .iter()
        .find(|(w, _, _)| others.contains(w))
    {
        Some(w) => Err(format!("{who} wrote {w:?}, a device the other daemon owns")),
        None => Ok(()),
    };
    for _ in 0..n {
        k.advance(20_000);
        let seconds = recorded(&store);
        let from = k.writes.len();
        d.tick(*t, k);
        untouched(k, from, &seconds, "the first daemon")?;
        let firsts: Vec<String> = claimed(k, rt)
            .into_iter()
            .filter(|x| !seconds.contains(x))
            .collect();
        let from = k.writes.len();
        let decisions = unfaulted(k, |k| second.tick(*t, k));
        untouched(k, from, &firsts, "the second daemon")?;
        for x in &decisions {
            if let Applied::Failed(e) = &x.applied {
                names_the_owner("the second daemon", e)?;
            }
        }
        *t += 1000;
    }
    unfaulted(k, |k| {
        second.restore_all(*t, k);
        drop(second);
        let mut s = store.clone();
        restore_from_store(k, &mut s, *t / 1000).map_err(|e| e.to_string())
    })?;
    if store.text.borrow().is_some() {
        return Err(format!(
            "the second daemon left records: {:?}",
            store.text.borrow()
        ));
    }
    Ok(())
}

fn crash_in() -> impl Strategy<Value = Stop> {
    (1usize..12, any::<bool>()).prop_map(|(n, before)| {
        Stop::CrashIn(if before {
            CrashAt::BeforeWrite(n)
        } else {
            CrashAt::AfterWrite(n)
        })
    })
}

/// A value someone else might write to `t` (a plausible one for it).
fn foreign_value(t: Tunable, v: u8) -> String {
    match t {
        Tunable::Nomerges => v.to_string(),
        Tunable::FrontMerges => (v % 2).to_string(),
        Tunable::WritesStarved => (v + 1).to_string(),
        _ => (100 * (u64::from(v) + 1)).to_string(),
    }
}

/// Applies a reload the way the run loop does; Err if the daemon did not behave.
fn apply_reload(d: &mut Daemon, r: Reload) -> Result<(), String> {
    let mut cfg = d.config().clone();
    match r {
        Reload::StateDir => {
            let before = cfg.daemon.state_dir.clone();
            cfg.daemon.state_dir = "/var/lib/elsewhere".into();
            if d.try_reload(cfg).is_ok() || d.config().daemon.state_dir != before {
                return Err("a reload moved daemon.state_dir".into());
            }
            return Ok(());
        }
        Reload::CostProfile => {
            cfg.policy.cost_profile = if cfg.policy.cost_profile == "lkml-2008" {
                mergetune_logic::pricing::profile::MEASURED_NAME.into()
            } else {
                "lkml-2008".into()
            };
        }
        Reload::Exclude(i) => cfg.devices.exclude = vec![DEVS[i].to_string()],
        Reload::IncludeAll => cfg.devices.exclude.clear(),
        Reload::Broken => {
            if config::load_str("[policy]\nbogus = 1\n", "test").is_ok() {
                return Err("a broken config was accepted".into());
            }
            return Ok(());
        }
    }
    cfg.validate("test").map_err(|e| e.to_string())?;
    d.try_reload(cfg).map_err(|e| e.to_string())
}

/// Whether `v` on `dev`'s `t` could be mergetune's own value as its state file may name
/// it: what it last wrote there, or, once a save has failed (the file may be older than
/// memory), anything it wrote there. Someone else's write of such a value cannot be told
/// from mergetune's, so the schedule does not make it.
fn may_be_ours(
    k: &MemKernel,
    since: &BTreeMap<String, usize>,
    dev: &str,
    t: Tunable,
    v: &str,
    saves_failed: bool,
) -> bool {
    // Only writes to the disk under the name now: a value mergetune wrote to a disk since
    // replaced is nobody's on the new one.
    let from = since.get(dev).copied().unwrap_or(0);
    let mut ours = k.writes[from..]
        .iter()
        .rev()
        .filter(|(d, tn, _)| d == dev && *tn == t);
    if saves_failed {
        ours.any(|(_, _, w)| w == v)
    } else {
        ours.next().is_some_and(|(_, _, w)| w == v)
    }
}

/// [`check`] of `steps` ending with a clean stop, and ending with a crash.
fn check_clean_and_crashed(steps: &[Step]) {
    for stop in [Stop::Clean, Stop::CrashAtEnd] {
        check(steps, stop).unwrap_or_else(|e| panic!("{stop:?}: {e}"));
    }
}

/// Runs a schedule, then stops as `stop` says and runs `restore`, and returns what went
/// wrong, if anything. The expected end of each tunable is exact: its original, or the
/// last value someone else set on it (a reset device's kernel defaults count as that). A
/// foreign write of the value already there changes nothing, and one of the value
/// mergetune's record may name as its own cannot be told from its own: neither is made.
#[allow(clippy::too_many_lines)] // the test's checker: one walk of the steps, read as one
fn check(steps: &[Step], stop: Stop) -> Result<(), String> {
    // The runtime directory whose `devices/` holds the host-wide claims: the daemon's,
    // calibrate's and a second daemon's.
    let rt = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = SharedStore {
        claims: Some(mergetune_daemon::state::Claims::under(rt.path())),
        ..SharedStore::default()
    };
    let mut k = kernel();
    k.crash = store.crash.clone();
    if let Stop::CrashIn(at) = stop {
        k.crash.borrow_mut().at = Some(at);
    }
    let mut originals: BTreeMap<(String, Tunable), String> = DEVS
        .iter()
        .flat_map(|d| WATCHED.iter().map(move |t| (d.to_string(), *t)))
        .map(|(d, t)| {
            let v = k.value(&d, t).unwrap();
            ((d, t), v)
        })
        .collect();
    let mut theirs: BTreeMap<(String, Tunable), String> = BTreeMap::new();
    // What the kernel gives back to a re-added device: its old values, or the defaults.
    let defaults = memkernel::MemDev::mq_deadline().attrs;
    let mut d = daemon(&store);
    let mut t = 0u64;
    let mut saves_failed = false;
    // Where in `k.writes` the disk now under each name began.
    let mut disk_since: BTreeMap<String, usize> = BTreeMap::new();
    // Each name's backing file, while a loop-style disk has it.
    let mut backing: BTreeMap<String, Option<String>> = DEVS
        .iter()
        .map(|d| (d.to_string(), Some(format!("/img/{d}-0000"))))
        .collect();
    for s in steps {
        match s {
            Step::Load(i, l) => {
                let dev = k.devs.get_mut(DEVS[*i]).unwrap();
                // A detached loop device has no file to do I/O on.
                if dev.attrs.contains_key("loop/backing_file") {
                    dev.load = *l;
                }
            }
            Step::Tick(n) => run(&mut d, &mut k, &mut t, u64::from(*n)),
            Step::FailRead(i, tn, on) => {
                let key = (DEVS[*i].to_string(), tn.rel_path().to_string());
                if *on {
                    k.faults.failing_reads.insert(key);
                } else {
                    k.faults.failing_reads.remove(&key);
                }
            }
            Step::FailWrite(i, tn, on) => {
                let key = (DEVS[*i].to_string(), *tn);
                if *on {
                    k.faults.failing_writes.insert(key);
                } else {
                    k.faults.failing_writes.remove(&key);
                }
            }
            Step::FailSaves(on) => {
                saves_failed |= *on;
                *store.fail_saves.borrow_mut() = *on;
            }
            Step::Foreign(i, tn, v) => {
                let (dev, v) = (DEVS[*i], foreign_value(*tn, *v));
                if k.value(dev, *tn).as_deref() != Some(v.as_str())
                    && !may_be_ours(&k, &disk_since, dev, *tn, &v, saves_failed)
                {
                    k.set_behind_back(dev, *tn, &v);
                    theirs.insert((dev.to_string(), *tn), v);
                }
            }
            Step::Vanish(i) => k.devs.get_mut(DEVS[*i]).unwrap().present = false,
            Step::Return(i, reset) => {
                let dev = k.devs.get_mut(DEVS[*i]).unwrap();
                if !dev.present && *reset {
                    for tn in WATCHED {
                        let def = &defaults[tn.rel_path()];
                        if dev.attrs.get(tn.rel_path()) != Some(def) {
                            theirs.insert((DEVS[*i].to_string(), tn), def.clone());
                        }
                    }
                    // Back under the same identity (a kernel without diskseq, where the
                    // number is all there is to compare).
                    let mut attrs = defaults.clone();
                    for id in ["dev", "diskseq", "loop/backing_file"] {
                        if let Some(v) = dev.attrs.get(id) {
                            attrs.insert(id.into(), v.clone());
                        }
                    }
                    dev.attrs = attrs;
                    dev.stat = [0; 17];
                }
                dev.present = true;
            }
            Step::Replace(i, admin) => {
                let dev = DEVS[*i];
                k.replace(dev);
                // Another loop-style disk: a fresh queue, attached to a file of its own (a
                // fresh loop device seen before any attach cannot be told from the old
                // one detached, see docs/hardening.md).
                let file = format!("/img/{dev}-{:04}", k.files.len());
                k.loop_attach(dev, &file);
                backing.insert(dev.to_string(), Some(file));
                disk_since.insert(dev.to_string(), k.writes.len());
                // The new disk's values, the kernel's defaults, are its originals.
                for tn in WATCHED {
                    originals.insert((dev.to_string(), tn), defaults[tn.rel_path()].clone());
                    theirs.remove(&(dev.to_string(), tn));
                }
                if let Some(v) = admin {
                    let v = foreign_value(Tunable::Nomerges, *v);
                    if k.value(dev, Tunable::Nomerges).as_deref() != Some(v.as_str()) {
                        k.set_behind_back(dev, Tunable::Nomerges, &v);
                        theirs.insert((dev.to_string(), Tunable::Nomerges), v);
                    }
                }
            }
            Step::Detach(i) => {
                // Only an attached loop device can be detached; a detached one does no I/O.
                let dev = DEVS[*i];
                if k.devs[dev].attrs.contains_key("loop/backing_file") {
                    k.loop_detach(dev);
                    k.devs.get_mut(dev).unwrap().load = Load::Idle;
                }
            }
            Step::Attach(i, same) => {
                let dev = DEVS[*i];
                // The backing file of the disk now under the name (none once another,
                // non-loop disk took it).
                if let (true, Some(file)) = (*same, backing.get(dev).cloned().flatten()) {
                    k.loop_attach(dev, &file);
                } else {
                    let file = format!("/img/{dev}-{:04}", k.files.len());
                    k.loop_attach(dev, &file);
                    backing.insert(dev.to_string(), Some(file));
                    disk_since.insert(dev.to_string(), k.writes.len());
                    // Another disk: the queue's values as they stand are its originals.
                    for tn in WATCHED {
                        originals.insert((dev.to_string(), tn), k.value(dev, tn).unwrap());
                        theirs.remove(&(dev.to_string(), tn));
                    }
                }
            }
            Step::DiskstatsFails(on) => k.faults.diskstats_fails = *on,
            Step::Reload(r) => apply_reload(&mut d, *r)?,
            Step::Calibrate(i, n) => {
                calibrate_alongside(&mut d, &mut k, &mut t, rt.path(), DEVS[*i], *n)?
            }
            Step::SecondDaemon(n) => {
                second_daemon_alongside(&mut d, &mut k, &mut t, rt.path(), *n)?
            }
        }
        if k.crash.borrow().dead {
            break;
        }
    }
    // Every device is back for the final check (a gone one cannot be judged), a detached
    // one attached again to its file.
    for dev in k.devs.values_mut() {
        dev.present = true;
    }
    for (dev, file) in &backing {
        if let Some(file) = file
            && !k.devs[dev.as_str()].attrs.contains_key("loop/backing_file")
        {
            k.loop_attach(dev, file);
        }
    }
    let crashed = !matches!(stop, Stop::Clean) || k.crash.borrow().dead;
    if !crashed {
        d.restore_all(t, &mut k);
    }
    drop(d);
    // `mergetune restore` (ExecStopPost), a new process, runs after every stop, once sysfs
    // answers again.
    *k.crash.borrow_mut() = Crash::default();
    k.faults = Default::default();
    *store.fail_saves.borrow_mut() = false;
    let mut s = store.clone();
    let report = restore_from_store(&mut k, &mut s, t / 1000).map_err(|e| e.to_string())?;
    if report.failed() {
        return Err(format!("restore failed: {:?}", report.results));
    }
    for ((dev, tn), orig) in &originals {
        let now = k.value(dev, *tn).unwrap();
        let want = theirs.get(&(dev.clone(), *tn)).unwrap_or(orig);
        if &now != want {
            return Err(format!(
                "{dev} {tn} ends at {now}, not {want} (original {orig}, someone else's last: {:?}; mergetune wrote {:?})",
                theirs.get(&(dev.clone(), *tn)),
                k.writes
                    .iter()
                    .filter(|(d, t, _)| d == dev && t == tn)
                    .map(|(_, _, v)| v)
                    .collect::<Vec<_>>()
            ));
        }
    }
    Ok(())
}

/// How many random schedules a run checks in all (CI runs the default, at least 10,000),
/// shared out between the three ways of stopping.
fn cases(share_percent: u32) -> u32 {
    let total: u32 = std::env::var("MERGETUNE_FAULT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    (total * share_percent).div_ceil(100)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(30),
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    /// Clean stop: `restore_all` on exit, then the unit's `restore`.
    #[test]
    fn no_fault_schedule_strands_a_value_after_a_clean_stop(
        steps in prop::collection::vec(step(), 1..60)
    ) {
        if let Err(e) = check(&steps, Stop::Clean) {
            return Err(TestCaseError::fail(e));
        }
    }

    /// Crash (SIGKILL, watchdog) at the end of the schedule, then `restore` from the file.
    #[test]
    fn no_fault_schedule_strands_a_value_after_a_crash(
        steps in prop::collection::vec(step(), 1..60)
    ) {
        if let Err(e) = check(&steps, Stop::CrashAtEnd) {
            return Err(TestCaseError::fail(e));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(40),
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    /// Crash inside the n-th write: after its pending save and before the write, or after
    /// the write and before its confirming save; then `restore` from the file.
    #[test]
    fn no_fault_schedule_strands_a_value_after_a_crash_inside_a_write(
        steps in prop::collection::vec(step(), 1..60),
        stop in crash_in(),
    ) {
        if let Err(e) = check(&steps, stop) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// Records name the disk they were made on. A disk that takes the name while the daemon
/// runs is a new device: not "changed by someone else" (no hand-off, no admin-owned mark),
/// found afresh, and the old disk's originals are never written to it.
#[test]
fn another_disk_under_the_name_is_a_new_device_not_someone_elses_change() {
    let (store, mut k, mut d, mut t) = random_sda();
    run(&mut d, &mut k, &mut t, 6);
    nomerges_off_0(&k, "stepped down");
    let recorded = store.text.borrow().clone().unwrap();
    assert!(
        recorded.contains("\"diskseq\": 1") || recorded.contains("\"diskseq\":1"),
        "{recorded}"
    );
    assert!(recorded.contains("\"dev\":\"8:0\""), "{recorded}");
    k.replace("sda"); // nomerges 0 again, a new diskseq
    k.devs.get_mut("sda").unwrap().load = Load::Idle;
    let writes = k.writes.len();
    run(&mut d, &mut k, &mut t, 2);
    let dev = &d.devices()["sda"];
    assert!(dev.management.is_managed(), "{:?}", dev.management);
    assert_eq!(dev.policy.level(), Level::L0, "found afresh");
    assert_eq!(
        k.writes.len(),
        writes,
        "nothing written: {:?}",
        &k.writes[writes..]
    );
    assert!(
        store.text.borrow().is_none(),
        "the old disk's records are dropped"
    );
}

/// A disk gone while its records were kept, and another disk under its name later holding
/// the value mergetune had written to the old one (its operator's), is left alone: its
/// value stands, and the old records go.
#[test]
fn a_vanished_disks_records_are_never_restored_onto_its_successor() {
    let (store, mut k, mut d, mut t) = random_sda();
    run(&mut d, &mut k, &mut t, 6);
    let ours = k.value("sda", Tunable::Nomerges).unwrap();
    assert_ne!(ours, "0");
    k.devs.get_mut("sda").unwrap().present = false;
    run(&mut d, &mut k, &mut t, 3);
    k.replace("sda");
    k.set_behind_back("sda", Tunable::Nomerges, &ours); // its operator's, by chance the same
    let writes = k.writes.len();
    run(&mut d, &mut k, &mut t, 2);
    assert_eq!(k.value("sda", Tunable::Nomerges), Some(ours.clone()));
    assert_eq!(k.writes.len(), writes, "{:?}", &k.writes[writes..]);
    // And after a crash, from the file: the same answer.
    let (store2, mut k2, mut d2, mut t2) = random_sda();
    run(&mut d2, &mut k2, &mut t2, 6);
    drop(d2);
    k2.replace("sda");
    k2.set_behind_back("sda", Tunable::Nomerges, &ours);
    let mut file = store2.clone();
    let report = restore_from_store(&mut k2, &mut file, 0).unwrap();
    assert_outcomes!(report, all, RestoreOutcome::Replaced { .. });
    assert_eq!(k2.value("sda", Tunable::Nomerges), Some(ours));
    assert_eq!(
        report.kept, 0,
        "the records of a disk that is gone for good are dropped"
    );
    assert!(store2.text.borrow().is_none());
    let _ = store;
}

/// Found by the property: another disk under the name, while a read of one of its queue
/// files fails (so no rescan looks at it) and its operator's value equals mergetune's old
/// one (so no change shows). A probe then wrote the old disk's original over the
/// operator's value. The write path itself now checks the disk.
#[test]
fn a_replaced_disk_nobody_looked_at_yet_is_never_written_with_the_old_disks_values() {
    let steps = vec![
        Step::Foreign(1, Tunable::FrontMerges, 0),
        Step::Load(1, Load::Random),
        Step::Tick(2),
        Step::FailRead(1, Tunable::FrontMerges, true),
        Step::Replace(1, Some(2)),
        Step::Load(0, Load::Idle),
        Step::Tick(5),
    ];
    check_clean_and_crashed(&steps);
}

/// A loop device at L3 (its original 0), detached and re-attached to the same backing
/// file: the queue kept mergetune's value across both, and `diskseq` moved twice. The disk
/// is the same (its backing file says so): the records stay, and both the daemon's stop
/// and a `restore` after a crash put the original back. Before, the daemon dropped the
/// records as "another disk" and then took its own value for an operator's.
#[test]
fn a_loop_device_reattached_to_the_same_file_keeps_its_original() {
    for crash in [false, true] {
        let (store, mut k, mut d, mut t) = random_sda();
        k.loop_attach("sda", "/img/a");
        run(&mut d, &mut k, &mut t, 8);
        let ours = k.value("sda", Tunable::Nomerges).unwrap();
        assert_ne!(ours, "0", "stepped down");
        k.loop_detach("sda");
        run(&mut d, &mut k, &mut t, 2);
        k.loop_attach("sda", "/img/a");
        let said = logged(|| run(&mut d, &mut k, &mut t, 2));
        assert!(store.text.borrow().is_some(), "the records stay");
        assert!(
            said.contains("re-attached to the same backing file")
                && said.contains("--reattached leave"),
            "{said}"
        );
        assert!(
            d.snapshot()
                .devices
                .iter()
                .any(|x| x.name == "sda" && x.reattached)
        );
        // And `status`'s table says it on the device's row, not only its JSON.
        let status = mergetune_export::status::StatusSnapshot::of(
            &d.snapshot(),
            mergetune_daemon::snapshot::TickTiming {
                now_ms: t,
                ..Default::default()
            },
            0.0,
        );
        let table = mergetune_export::table::format_status(&status);
        assert!(
            table.lines().any(|l| l.starts_with("sda ")
                && l.contains("re-attached to the same backing file, records kept")),
            "{table}"
        );
        if crash {
            drop(d);
            let mut file = store.clone();
            restore_from_store(&mut k, &mut file, 0).unwrap();
        } else {
            d.restore_all(t, &mut k);
        }
        assert_eq!(
            k.value("sda", Tunable::Nomerges).as_deref(),
            Some("0"),
            "crash {crash}"
        );
    }
}

/// The same, re-attached to another file: another disk, whose queue's values are its own
/// (nothing written, the records dropped); and `restore --reattached leave` takes a value
/// on a same-file re-attach for an operator's.
#[test]
fn a_loop_device_reattached_elsewhere_is_another_disk_and_leave_is_honoured() {
    let (store, mut k, mut d, mut t) = random_sda();
    k.loop_attach("sda", "/img/a");
    run(&mut d, &mut k, &mut t, 8);
    let ours = k.value("sda", Tunable::Nomerges).unwrap();
    k.loop_detach("sda");
    k.loop_attach("sda", "/img/b");
    let writes = k.writes.len();
    run(&mut d, &mut k, &mut t, 2);
    d.restore_all(t, &mut k);
    assert_eq!(k.value("sda", Tunable::Nomerges), Some(ours.clone()));
    assert!(
        k.writes[writes..]
            .iter()
            .all(|(_, tn, _)| *tn != Tunable::Nomerges),
        "{:?}",
        &k.writes[writes..]
    );
    let _ = store;

    let (store, mut k, mut d, mut t) = random_sda();
    k.loop_attach("sda", "/img/a");
    run(&mut d, &mut k, &mut t, 8);
    drop(d);
    k.loop_detach("sda");
    k.loop_attach("sda", "/img/a");
    let mut file = store.clone();
    let report = mergetune_daemon::state::restore_from_store_with(
        &mut k,
        &mut file,
        0,
        mergetune_daemon::state::Reattached::Leave,
    )
    .unwrap();
    assert_outcomes!(report, any, RestoreOutcome::ReattachedLeft { .. });
    assert_eq!(k.value("sda", Tunable::Nomerges), Some(ours));
    assert!(store.text.borrow().is_none(), "the record is dropped");
}

/// A schedule the property found once: a loop-style sda detached, attached to another file
/// while /proc/diskstats fails, loaded, detached again, then a clean stop. No value may be
/// stranded.
#[test]
fn a_detach_attach_to_another_file_while_diskstats_fails_strands_nothing() {
    let steps = [
        Step::Detach(0),
        Step::Tick(1),
        Step::DiskstatsFails(true),
        Step::Attach(0, false),
        Step::Load(0, Load::Random),
        Step::Tick(1),
        Step::Detach(0),
        Step::DiskstatsFails(false),
        Step::Tick(1),
    ];
    check_clean_and_crashed(&steps);
}

/// And another: a calibrate of sda between two reloads, then sda detached while the load's
/// counters wait behind a failing /proc/diskstats.
#[test]
fn a_device_detached_after_a_calibrate_and_reloads_strands_nothing() {
    let steps = [
        Step::Tick(1),
        Step::Reload(Reload::CostProfile),
        Step::Calibrate(0, 1),
        Step::DiskstatsFails(true),
        Step::Load(0, Load::Random),
        Step::Tick(1),
        Step::Reload(Reload::CostProfile),
        Step::Detach(0),
        Step::DiskstatsFails(false),
        Step::Tick(2),
        Step::Load(0, Load::Idle),
    ];
    check_clean_and_crashed(&steps);
}

/// Another the property found: sda vanishes and comes back detached while /proc/diskstats
/// fails, then the load's counters arrive; the process dies inside the second write.
#[test]
fn a_device_back_detached_after_diskstats_failed_strands_nothing() {
    let steps = [
        Step::Tick(1),
        Step::Load(0, Load::Random),
        Step::DiskstatsFails(true),
        Step::Tick(1),
        Step::Vanish(0),
        Step::Tick(1),
        Step::Detach(0),
        Step::Return(0, false),
        Step::DiskstatsFails(false),
        Step::Tick(2),
    ];
    for stop in [
        Stop::Clean,
        Stop::CrashAtEnd,
        Stop::CrashIn(CrashAt::AfterWrite(2)),
    ] {
        check(&steps, stop).unwrap_or_else(|e| panic!("{stop:?}: {e}"));
    }
}

/// One owner per device, in-process through the claim code path the binaries use: with
/// the daemon stepping sda down (its records, so its claim), a `calibrate --device sda`
/// is refused naming the owner's pid, and a second daemon with its own state directory
/// is refused each write to sda, naming it too, and writes nothing there; both leave the
/// daemon's value, which its stop puts back to the original.
#[test]
fn a_concurrent_calibrate_and_a_second_daemon_see_the_live_owner() {
    use mergetune_daemon::state::{Claims, StateError};
    use mergetune_logic::decision::Applied;
    let rt = tempfile::tempdir().unwrap();
    let store = SharedStore {
        claims: Some(Claims::under(rt.path())),
        ..SharedStore::default()
    };
    let mut k = MemKernel::with(&["sda"]);
    k.devs.get_mut("sda").unwrap().load = Load::RandomRareMerges;
    let mut d = daemon(&store);
    let mut t = 0;
    run(&mut d, &mut k, &mut t, 2);
    assert_eq!(k.value("sda", Tunable::FrontMerges).as_deref(), Some("0"));
    let pid = format!("(pid {})", std::process::id());
    let id = mergetune_kernel::devices::read_identity(&mut k, "sda")
        .unwrap()
        .unwrap();
    match Claims::under(rt.path()).claim("sda", id.dev) {
        Err(e @ StateError::DeviceOwned { .. }) => {
            assert!(e.to_string().contains(&pid), "{e}")
        }
        other => panic!("calibrate's claim was not refused: {other:?}"),
    }
    let second_store = SharedStore {
        claims: Some(Claims::under(rt.path())),
        ..SharedStore::default()
    };
    let mut second = daemon(&second_store);
    let mut refused = 0;
    for _ in 0..6 {
        k.advance(20_000);
        let before = k.writes.len();
        for x in second.tick(t, &mut k) {
            if let Applied::Failed(e) = &x.applied {
                assert!(e.contains(&pid), "{e}");
                refused += 1;
            }
        }
        assert_eq!(k.writes.len(), before, "{:?}", &k.writes[before..]);
        t += 1000;
    }
    assert!(refused > 0, "the second daemon never tried sda");
    second.restore_all(t, &mut k);
    drop(second);
    d.restore_all(t, &mut k);
    assert_sda_at_the_kernels_defaults(&k);
}
