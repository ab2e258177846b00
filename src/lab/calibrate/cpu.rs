//! CPU time, read from procfs: the ns on CPU of fio's threads and of every kworker
//! (`schedstat`), and whole-machine busy time (`/proc/stat`, recorded but not used: the
//! machine is shared). A [`Snapshot`] takes them with the loop device's counters at once.

use super::scratch::ScratchLoop;
use anyhow::Result;
use std::time::Instant;

/// Sum of the first field of `/proc/PID/task/*/schedstat`: ns on CPU of all its threads.
fn task_runtime_ns(pid: u32) -> u64 {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    rd.flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// ns on CPU of every kworker thread (children of kthreadd named kworker/*).
fn kworker_runtime_ns() -> u64 {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut sum = 0;
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // comm is in parentheses and may contain spaces; the fields after it are plain.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 1..].split_whitespace().nth(1);
        if !comm.starts_with("kworker") || ppid != Some("2") {
            continue;
        }
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
            && let Some(v) = s
                .split_whitespace()
                .next()
                .and_then(|x| x.parse::<u64>().ok())
        {
            sum += v;
        }
    }
    sum
}

/// Whole-machine busy time (user+nice+system+irq+softirq) from `/proc/stat`, ns.
fn system_busy_ns() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(line) = s.lines().next() else {
        return 0;
    };
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // USER_HZ is 100 on every Linux ABI.
    let ticks = f.first().copied().unwrap_or(0)
        + f.get(1).copied().unwrap_or(0)
        + f.get(2).copied().unwrap_or(0)
        + f.get(5).copied().unwrap_or(0)
        + f.get(6).copied().unwrap_or(0);
    ticks * 10_000_000
}

pub(super) fn loadavg_1m() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Snapshot {
    pub(super) at: Instant,
    pub(super) reads: u64,
    pub(super) merged: u64,
    pub(super) fio_ns: u64,
    pub(super) kworker_ns: u64,
    pub(super) system_ns: u64,
}

pub(super) fn snapshot(lp: &ScratchLoop, fio_pid: u32) -> Result<Snapshot> {
    let (reads, merged) = lp.read_counts()?;
    Ok(Snapshot {
        at: Instant::now(),
        reads,
        merged,
        fio_ns: task_runtime_ns(fio_pid),
        kworker_ns: kworker_runtime_ns(),
        system_ns: system_busy_ns(),
    })
}
