//! The daemon's own CPU while its devices sit at L3 under the L3 watch:
//! `MERGETUNE_WATCH_CPU=1 cargo bench --bench metrics` (after `cargo build --release`).
//!
//! A fake sysfs/procfs tree of `MERGETUNE_WATCH_DEVICES` (default 64) mq-deadline devices,
//! each with 8,000 random reads per second and no merges, the counters moved every 100 ms.
//! The release binary runs on it as a dry-run daemon with the 2008 cost profile, so its
//! ladder steps every device down to L3. From then on the loop ticks at the watch interval
//! (100 ms). After 35 s (L3 is reached after about 22 s) the daemon's CPU is read from
//! `/proc/PID/stat` (utime + stime, all threads) over 30 s, and `/status` must show every
//! device at L3 at both ends.
//!
//! `MERGETUNE_BINS=A:B` compares two binaries, alternating A B, B A, ... for
//! `MERGETUNE_WATCH_REPS` repetitions (default 3), so that drift of the shared machine hits
//! both alike. It prints every run and the median of each, and the paired differences.

use mergetune_lab::calibrate::stats::median;
use mergetune_logic::decision::Level;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::fake_host::env_or;

fn diskstats(n: usize, tick: u64) -> String {
    let mut s = String::new();
    for i in 0..n {
        // 800 reads per 100 ms, 8 sectors each, never merged; no writes.
        let r = 1000 + tick * 800;
        s.push_str(&format!(
            "   8 {:>7} sd{i} {r} 0 {} 4000 0 0 0 0 0 3000 13000 0 0 0 0 0 0\n",
            i * 16,
            r * 8
        ));
    }
    s
}

/// The levels of every device in `/status` (None: the daemon did not answer).
fn levels(addr: &str) -> Option<Vec<Option<Level>>> {
    let s = mergetune_export::status::fetch(addr, Duration::from_secs(5)).ok()?;
    Some(s.devices.iter().map(|d| d.level).collect())
}

/// One run of `bin`: its CPU in ms per second at L3, and whether every device was at L3.
fn run_once(bin: &Path, devices: usize, port: u16) -> (f64, bool) {
    let t = tempfile::tempdir().unwrap();
    let queue = [super::fake_host::QUEUE, &[("iosched/front_merges", "1")]].concat();
    let host = super::fake_host::FakeHost::start(
        t.path(),
        (0..devices).map(|i| format!("sd{i}")),
        &queue,
        Duration::from_millis(100),
        move |tick| diskstats(devices, tick),
    );
    let cfg = t.path().join("mergetune.toml");
    std::fs::write(&cfg, "[policy]\ncost_profile = \"lkml-2008\"\n").unwrap();
    let addr = format!("127.0.0.1:{port}");
    let mut child = super::dry_run_daemon(bin, &cfg, &addr, t.path())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (cargo build --release first)", bin.display()));
    let pid = child.id();
    std::thread::sleep(Duration::from_secs(35));
    let all_l3 = |l: Option<Vec<Option<Level>>>| {
        l.is_some_and(|v| !v.is_empty() && v.iter().all(|x| *x == Some(Level::L3)))
    };
    let at_l3_before = all_l3(levels(&addr));
    let (c0, w0) = (super::proc_usage(pid).2, Instant::now());
    std::thread::sleep(Duration::from_secs(30));
    let (c1, secs) = (super::proc_usage(pid).2, w0.elapsed().as_secs_f64());
    let at_l3_after = all_l3(levels(&addr));
    let _ = child.kill();
    let _ = child.wait();
    drop(host);
    let clk = 100.0; // USER_HZ
    (
        (c1 - c0) as f64 / clk / secs * 1000.0,
        at_l3_before && at_l3_after,
    )
}

pub fn run() {
    let devices = env_or("MERGETUNE_WATCH_DEVICES", 64);
    let reps = env_or("MERGETUNE_WATCH_REPS", 3).max(1);
    let bins: Vec<PathBuf> = match std::env::var("MERGETUNE_BINS") {
        Ok(v) => v.split(':').map(PathBuf::from).collect(),
        Err(_) => vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/mergetune")],
    };
    println!(
        "watch: {devices} devices at L3 (dry run, 2008 profile), CPU over 30 s after 35 s, {reps} repetitions"
    );
    let mut per_bin: Vec<Vec<f64>> = vec![Vec::new(); bins.len()];
    let mut port = 9831;
    for r in 0..reps {
        let mut order: Vec<usize> = (0..bins.len()).collect();
        if r % 2 == 1 {
            order.reverse();
        }
        for i in order {
            port += 1;
            let (ms, at_l3) = run_once(&bins[i], devices, port);
            let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
            println!(
                "rep {r} {}: {ms:.2} ms CPU per s{} (load {})",
                bins[i].display(),
                if at_l3 {
                    ""
                } else {
                    ", NOT every device at L3: not comparable"
                },
                load.split_whitespace().next().unwrap_or("?")
            );
            per_bin[i].push(ms);
        }
    }
    for (b, v) in bins.iter().zip(&per_bin) {
        println!(
            "{}: median {:.2} ms/s, runs {v:.2?}",
            b.display(),
            median(v)
        );
    }
    if let [a, b] = per_bin.as_slice() {
        let d: Vec<f64> = b.iter().zip(a).map(|(b, a)| b - a).collect();
        println!("paired B - A: median {:.2} ms/s, each {d:.2?}", median(&d));
    }
}
