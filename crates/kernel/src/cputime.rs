//! CPU time from procfs, for the measurements (calibrate, the benches, the real-kernel
//! comparison): ns on CPU of a process's threads and of the kernel's kworkers (the first
//! field of `schedstat`, which counts every ns, unlike the 10 ms ticks of `stat`), the
//! descendants of a process, and whole-machine busy time (`/proc/stat`).
//!
//! Every reader takes the procfs root, so a fake tree tests it. A thread or process that
//! exits while its siblings are read is skipped (it is gone, its time with it); a process
//! that is not there at all, or an unreadable `/proc/stat`, is an error, never a 0 that
//! would read as "cost nothing".

use std::path::{Path, PathBuf};

/// An error reading procfs or writing a process's setting there; the I/O error is kept
/// (its kind tells a process gone from a permission refused).
#[derive(Debug, thiserror::Error)]
pub enum CpuTimeError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: unexpected content: {content:?}")]
    Parse { path: PathBuf, content: String },
    #[error("{path}: cannot write {value:?}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: std::io::Error,
    },
}

impl CpuTimeError {
    /// `path` could not be read (a file or a directory).
    fn read(path: &Path) -> impl FnOnce(std::io::Error) -> CpuTimeError + '_ {
        move |source| CpuTimeError::Read {
            path: path.to_path_buf(),
            source,
        }
    }
}

fn read(path: &Path) -> Result<String, CpuTimeError> {
    std::fs::read_to_string(path).map_err(CpuTimeError::read(path))
}

/// The first field of a `schedstat` text: ns on CPU.
fn schedstat_ns(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// ns on CPU of all threads of `pid` (its `task/*/schedstat`).
pub fn task_runtime_ns(procfs_root: &Path, pid: u32) -> Result<u64, CpuTimeError> {
    let dir = procfs_root.join(pid.to_string()).join("task");
    let rd = std::fs::read_dir(&dir).map_err(CpuTimeError::read(&dir))?;
    Ok(rd
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| schedstat_ns(&s))
        .sum())
}

/// The pids of the processes in `/proc`, with their `stat` text (comm may hold spaces and
/// parentheses: the fields after the last `)` are plain).
fn processes(procfs_root: &Path) -> Result<Vec<(u32, String)>, CpuTimeError> {
    let rd = std::fs::read_dir(procfs_root).map_err(CpuTimeError::read(procfs_root))?;
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) {
            out.push((pid, stat));
        }
    }
    Ok(out)
}

/// comm and parent pid of a `/proc/PID/stat` text.
fn comm_and_ppid(stat: &str) -> Option<(&str, u32)> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let ppid = stat
        .get(close + 1..)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((stat.get(open + 1..close)?, ppid))
}

/// ns on CPU of every kworker thread (children of kthreadd, pid 2, named `kworker/*`): a
/// loop device's I/O and much of the block layer's deferred work run in them.
pub fn kworker_runtime_ns(procfs_root: &Path) -> Result<u64, CpuTimeError> {
    let mut sum = 0;
    for (pid, stat) in processes(procfs_root)? {
        if let Some((comm, 2)) = comm_and_ppid(&stat)
            && comm.starts_with("kworker")
        {
            sum += task_runtime_ns(procfs_root, pid).unwrap_or(0);
        }
    }
    Ok(sum)
}

/// `pid` and all its descendants (through each thread's `children`), sorted.
pub fn family(procfs_root: &Path, pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let tasks = procfs_root.join(out[i].to_string()).join("task");
        if let Ok(rd) = std::fs::read_dir(tasks) {
            for t in rd.flatten() {
                if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                    out.extend(c.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
                }
            }
        }
        i += 1;
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// ns on CPU of `pid` and all its descendants (fio's job processes are its children).
pub fn family_runtime_ns(procfs_root: &Path, pid: u32) -> Result<u64, CpuTimeError> {
    let own = task_runtime_ns(procfs_root, pid)?;
    let rest: u64 = family(procfs_root, pid)
        .into_iter()
        .filter(|&p| p != pid)
        .map(|p| task_runtime_ns(procfs_root, p).unwrap_or(0))
        .sum();
    Ok(own + rest)
}

/// Whole-machine busy time (user + nice + system + irq + softirq of the `cpu` line of
/// `/proc/stat`), ns. USER_HZ is 100 on every Linux ABI.
pub fn system_busy_ns(procfs_root: &Path) -> Result<u64, CpuTimeError> {
    let path = procfs_root.join("stat");
    let text = read(&path)?;
    let parse_err = || CpuTimeError::Parse {
        path: path.clone(),
        content: text.lines().next().unwrap_or_default().to_string(),
    };
    let line = text.lines().next().ok_or_else(parse_err)?;
    let mut f = line.split_whitespace();
    if f.next() != Some("cpu") {
        return Err(parse_err());
    }
    let v: Vec<u64> = f.map(|x| x.parse().unwrap_or(0)).collect();
    if v.len() < 7 {
        return Err(parse_err());
    }
    Ok((v[0] + v[1] + v[2] + v[5] + v[6]) * 10_000_000)
}

/// The 1-minute load average (`/proc/loadavg`).
pub fn loadavg_1m(procfs_root: &Path) -> Result<f64, CpuTimeError> {
    let path = procfs_root.join("loadavg");
    let text = read(&path)?;
    text.split_whitespace()
        .next()
        .and_then(|x| x.parse().ok())
        .ok_or(CpuTimeError::Parse {
            path,
            content: text.clone(),
        })
}

/// One task's CPU time at one moment: its id (a thread id for a thread), its name as procfs
/// shows it (a kworker's names the work it last ran: `kworker/u8:2-loop1`, `+` while running
/// it), and its ns on CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskTime {
    pub pid: u32,
    pub comm: String,
    pub runtime_ns: u64,
}

/// Each thread of `pid` with its ns on CPU (`task/TID/schedstat`, `task/TID/comm`), sorted
/// by thread id. A thread that exits while the others are read is left out; the process
/// itself missing is an error.
pub fn thread_times(procfs_root: &Path, pid: u32) -> Result<Vec<TaskTime>, CpuTimeError> {
    let dir = procfs_root.join(pid.to_string()).join("task");
    let rd = std::fs::read_dir(&dir).map_err(CpuTimeError::read(&dir))?;
    let mut out: Vec<TaskTime> = rd
        .flatten()
        .filter_map(|t| {
            let tid = t.file_name().to_str()?.parse::<u32>().ok()?;
            let ns = schedstat_ns(&std::fs::read_to_string(t.path().join("schedstat")).ok()?)?;
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            Some(TaskTime {
                pid: tid,
                comm: comm.trim_end().to_string(),
                runtime_ns: ns,
            })
        })
        .collect();
    out.sort_by_key(|t| t.pid);
    Ok(out)
}

/// Every kworker (a child of kthreadd named `kworker/*`) with its name and ns on CPU, sorted
/// by pid: one reading of each, so that a caller can take per-pid deltas and see which
/// kworkers appeared or exited in between (a sum over all of them cannot).
pub fn kworker_times(procfs_root: &Path) -> Result<Vec<TaskTime>, CpuTimeError> {
    let mut out = Vec::new();
    for (pid, stat) in processes(procfs_root)? {
        if let Some((comm, 2)) = comm_and_ppid(&stat)
            && comm.starts_with("kworker")
        {
            // A kworker is one thread: its own schedstat.
            let p = procfs_root.join(pid.to_string()).join("schedstat");
            if let Some(ns) = std::fs::read_to_string(p)
                .ok()
                .and_then(|s| schedstat_ns(&s))
            {
                out.push(TaskTime {
                    pid,
                    comm: comm.to_string(),
                    runtime_ns: ns,
                });
            }
        }
    }
    out.sort_by_key(|t| t.pid);
    Ok(out)
}

/// Sets the nice value of the autogroup (the session's scheduling group) of `pid`, as
/// `/proc/PID/autogroup` takes it. With autogroups on, CPU is shared between sessions
/// first, so a task's own nice value does not lift it above another session's build; a
/// measurement that must own its CPU starts its load in a session of its own and raises
/// that. Root only for a negative value; an error names the file.
pub fn set_autogroup_nice(procfs_root: &Path, pid: u32, nice: i32) -> Result<(), CpuTimeError> {
    let path = procfs_root.join(pid.to_string()).join("autogroup");
    std::fs::write(&path, nice.to_string()).map_err(|source| CpuTimeError::Write {
        path,
        value: nice.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// A procfs with fio (100, threads 100 and 101) and its child 120, two kworkers (one a
    /// child of kthreadd, one an impostor under pid 1), and kthreadd: (file, text).
    const FAKE_PROC: [(&str, &str); 14] = [
        ("100/stat", "100 (fio) S 1 100 ..."),
        ("100/task/100/schedstat", "1000 5 6\n"),
        ("100/task/101/schedstat", "2000 5 6\n"),
        ("100/task/100/children", "120 "),
        ("120/stat", "120 (fio) S 100 100 ..."),
        ("120/task/120/schedstat", "40000 1 1\n"),
        ("2/stat", "2 (kthreadd) S 0 0 ..."),
        ("2/task/2/schedstat", "7 1 1\n"),
        ("30/stat", "30 (kworker/1:2-loop0) I 2 0 ..."),
        ("30/task/30/schedstat", "500000 1 1\n"),
        ("31/stat", "31 (kworker) x (evil)) S 1 0 ..."),
        ("31/task/31/schedstat", "9 1 1\n"),
        ("stat", "cpu  10 1 5 100 0 2 3 0 0 0\ncpu0 1 1 1 1 1 1 1\n"),
        ("loadavg", "0.44 1.06 1.60 2/90 1234\n"),
    ];

    /// [`FAKE_PROC`] written out.
    fn fake() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (rel, text) in FAKE_PROC {
            put(d.path(), rel, text);
        }
        d
    }

    #[test]
    fn a_process_counts_all_its_threads_and_a_family_its_children() {
        let d = fake();
        assert_eq!(task_runtime_ns(d.path(), 100).unwrap(), 3000);
        assert_eq!(family(d.path(), 100), vec![100, 120]);
        assert_eq!(family_runtime_ns(d.path(), 100).unwrap(), 43_000);
    }

    #[test]
    fn only_kthreadds_kworkers_count() {
        assert_eq!(kworker_runtime_ns(fake().path()).unwrap(), 500_000);
    }

    #[test]
    fn per_task_times_name_each_thread_and_kworker() {
        let d = fake();
        put(d.path(), "100/task/100/comm", "fio\n");
        put(d.path(), "100/task/101/comm", "fio\n");
        let t = thread_times(d.path(), 100).unwrap();
        assert_eq!(
            t.iter().map(|x| (x.pid, x.runtime_ns)).collect::<Vec<_>>(),
            vec![(100, 1000), (101, 2000)]
        );
        assert_eq!(t[0].comm, "fio");
        put(d.path(), "30/schedstat", "500000 1 1\n");
        assert_eq!(
            kworker_times(d.path()).unwrap(),
            vec![TaskTime {
                pid: 30,
                comm: "kworker/1:2-loop0".into(),
                runtime_ns: 500_000
            }]
        );
        assert!(thread_times(d.path(), 999).is_err());
    }

    #[test]
    fn machine_busy_time_is_in_ns_and_a_missing_process_is_an_error() {
        let d = fake();
        assert_eq!(
            system_busy_ns(d.path()).unwrap(),
            (10 + 1 + 5 + 2 + 3) * 10_000_000
        );
        assert_eq!(loadavg_1m(d.path()).unwrap(), 0.44);
        assert!(matches!(
            task_runtime_ns(d.path(), 999),
            Err(CpuTimeError::Read { path, source })
                if path.ends_with("999/task") && source.kind() == std::io::ErrorKind::NotFound
        ));
        put(d.path(), "stat", "intr 1 2 3\n");
        assert!(matches!(
            system_busy_ns(d.path()),
            Err(CpuTimeError::Parse { .. })
        ));
    }
}
