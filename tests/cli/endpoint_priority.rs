//! The endpoint asks for nothing the shipped unit refuses: its thread runs at the priority of
//! the process. (It used to set nice +10 on itself, which `SystemCallFilter=~@resources`
//! turns into EPERM under systemd, so what was documented and measured outside the unit was
//! not what a systemd install got. A scrape now only copies a body the refresh encoded.)

use mergetune_export::http::{Limits, serve};
use mergetune_export::metrics::Metrics;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// (name, nice) of every thread of this process, from /proc/self/task/*/stat.
fn threads() -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_string();
        // Fields after the name start at field 3 (state); nice is field 19.
        let nice = stat[close + 1..]
            .split_whitespace()
            .nth(19 - 3)
            .and_then(|v| v.parse().ok())
            .unwrap();
        out.push((name, nice));
    }
    out
}

/// The nice value of the calling thread (Linux applies nice per thread).
fn own_nice() -> i64 {
    let tid = rustix::thread::gettid().as_raw_pid();
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    let close = stat.rfind(')').unwrap();
    stat[close + 1..]
        .split_whitespace()
        .nth(19 - 3)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn the_endpoint_thread_keeps_the_priority_it_was_started_with() {
    // Start the endpoint from a thread one step nicer than the process (raising nice needs
    // no privilege), so that a thread that sets any fixed priority of its own shows, whether
    // the tests run at nice 0 or under `nice -n 10`.
    let (h, start) = std::thread::spawn(|| {
        let want = (own_nice() + 1).min(19);
        // PRIO_PROCESS with a thread id sets that thread's nice value alone.
        let tid = rustix::thread::gettid();
        let _ = rustix::process::setpriority_process(Some(tid), want as i32);
        let start = own_nice();
        let h = serve(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(Metrics::new()),
            Limits::default(),
        )
        .unwrap();
        (h, start)
    })
    .join()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let http = || {
        threads()
            .into_iter()
            .find(|(n, _)| n.starts_with("mergetune-http"))
            .map(|(_, nice)| nice)
    };
    while http().is_none() {
        assert!(Instant::now() < deadline, "no mergetune-http thread");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Let the thread run its prologue before looking again.
    std::thread::sleep(Duration::from_millis(200));
    let nice = http().unwrap();
    h.shutdown();
    assert_eq!(
        nice, start,
        "the endpoint thread changed its priority (setpriority is refused under the unit)"
    );
}
