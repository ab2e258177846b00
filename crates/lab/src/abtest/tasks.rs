//! CPU time of a set of tasks over a block, by per-pid delta between two readings
//! (`kernel::cputime::TaskTime`), never by a sum over the machine: a pid that is in both
//! readings counts its difference; one that appeared counts all its time (it started within
//! the block); one that exited, or whose pid was reused (its time went backwards), took its
//! time in the block with it, so the block cannot be measured: the caller drops it.

use mergetune_kernel::cputime::TaskTime;
use std::collections::BTreeMap;

/// The CPU time of the counted tasks over a block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskDelta {
    pub ns: u64,
    /// Counted tasks that were not there at the start.
    pub appeared: usize,
    /// Counted tasks that were gone at the end (or whose pid was reused).
    pub exited: Vec<u32>,
}

/// The delta of the tasks `counted` accepts in either reading (a kworker may name the
/// device only at the start or only at the end of a block).
pub fn delta(
    before: &[TaskTime],
    after: &[TaskTime],
    counted: impl Fn(&TaskTime) -> bool,
) -> TaskDelta {
    let b: BTreeMap<u32, &TaskTime> = before.iter().map(|t| (t.pid, t)).collect();
    let a: BTreeMap<u32, &TaskTime> = after.iter().map(|t| (t.pid, t)).collect();
    let mut out = TaskDelta::default();
    for (pid, t0) in &b {
        match a.get(pid) {
            Some(t1) if counted(t0) || counted(t1) => {
                if t1.runtime_ns >= t0.runtime_ns {
                    out.ns += t1.runtime_ns - t0.runtime_ns;
                } else {
                    // Another task under the same pid: the old one's remainder is lost.
                    out.ns += t1.runtime_ns;
                    out.exited.push(*pid);
                    out.appeared += 1;
                }
            }
            None if counted(t0) => out.exited.push(*pid),
            _ => {}
        }
    }
    for (pid, t1) in &a {
        if !b.contains_key(pid) && counted(t1) {
            out.ns += t1.runtime_ns;
            out.appeared += 1;
        }
    }
    out
}

/// Whether a kworker's name says it last ran (`-`) or is running (`+`) work of the
/// workqueue `wq` (a loop device's is named after it: `loop1`). The part before the first
/// `+` or `-` is the worker's id (`u8:2`, `1:1H`), which holds neither; the rest is the
/// workqueue's name, compared whole (so `loop1` is not `loop10`).
pub fn kworker_runs(comm: &str, wq: &str) -> bool {
    let Some(rest) = comm.strip_prefix("kworker/") else {
        return false;
    };
    match rest.find(['+', '-']) {
        Some(i) => &rest[i + 1..] == wq,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(pid: u32, comm: &str, ns: u64) -> TaskTime {
        TaskTime {
            pid,
            comm: comm.into(),
            runtime_ns: ns,
        }
    }

    #[test]
    fn a_kworker_counts_only_for_its_own_workqueue() {
        assert!(kworker_runs("kworker/u8:2-loop1", "loop1"));
        assert!(kworker_runs("kworker/u8:2+loop1", "loop1"));
        assert!(!kworker_runs("kworker/u8:2-loop10", "loop1"));
        assert!(!kworker_runs("kworker/u8:3-ext4-rsv-conversion", "loop1"));
        assert!(!kworker_runs("kworker/1:1H-kblockd", "loop1"));
        assert!(!kworker_runs("kworker/0:2", "loop1"));
        assert!(!kworker_runs("loop1", "loop1"));
    }

    #[test]
    fn per_pid_deltas_count_arrivals_and_flag_exits() {
        let all = |_: &TaskTime| true;
        let before = [t(10, "a", 1_000), t(11, "b", 5_000), t(12, "c", 7_000)];
        let after = [t(10, "a", 1_600), t(12, "c", 7_000), t(13, "d", 250)];
        let d = delta(&before, &after, all);
        // 10 ran 600, 12 did not run, 13 appeared with 250; 11 exited.
        assert_eq!(d.ns, 850);
        assert_eq!(d.appeared, 1);
        assert_eq!(d.exited, vec![11]);
    }

    #[test]
    fn a_reused_pid_is_an_exit_and_an_arrival_never_a_huge_or_negative_delta() {
        let d = delta(&[t(10, "a", 9_000)], &[t(10, "a", 300)], |_| true);
        assert_eq!((d.ns, d.appeared, d.exited), (300, 1, vec![10]));
    }

    #[test]
    fn only_the_devices_kworkers_count_and_a_name_at_either_end_is_enough() {
        let dev = |x: &TaskTime| kworker_runs(&x.comm, "loop1");
        let before = [
            t(20, "kworker/u8:0-loop1", 1_000),
            t(21, "kworker/u8:1-events_unbound", 1_000),
            t(22, "kworker/u8:2-events_unbound", 1_000),
            t(23, "kworker/u8:3-loop1", 1_000),
        ];
        let after = [
            // Ran loop work, then something else: named by the start.
            t(20, "kworker/u8:0-flush-254:0", 1_400),
            // Never the device's: left out, however much it ran.
            t(21, "kworker/u8:1-events_unbound", 900_000),
            // Took the device's work during the block: named by the end.
            t(22, "kworker/u8:2+loop1", 1_100),
            // A new worker for the device.
            t(24, "kworker/u8:4-loop1", 50),
        ];
        let d = delta(&before, &after, dev);
        assert_eq!(d.ns, 400 + 100 + 50);
        assert_eq!(d.appeared, 1);
        // 23 was the device's and is gone: its time in the block is unknown.
        assert_eq!(d.exited, vec![23]);
        // Another tenant's kworker exiting does not matter.
        let d = delta(&before[1..2], &[], dev);
        assert_eq!(d, TaskDelta::default());
    }
}
