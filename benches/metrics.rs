//! Cost of the metrics layer for 64 devices, and a load run against a live daemon.
//!
//! `cargo bench --bench metrics` (criterion): `update` (after each tick), `encode` (the text
//! of one scrape when the tick changed it: paid once per tick however many scrapers),
//! `cached` (a scrape between two ticks), and `http_scrape` (one GET /metrics over loopback:
//! connect, request, response, close; client and server CPU together).
//!
//! `MERGETUNE_LOAD=1 cargo bench --bench metrics` runs the load check instead: the release
//! binary (`target/release/mergetune`, or `$MERGETUNE_BIN`) as a dry-run daemon on a fake
//! sysfs/procfs tree of 64 busy devices, then 200 concurrent scrapers for 10 s
//! (`MERGETUNE_LOAD_SCRAPERS`, `MERGETUNE_LOAD_SECS`); it prints scrapes, errors, the
//! daemon's worst tick lag (from /status), its CPU per scrape and its memory before and
//! after. docs/metrics.md records the figures.
//!
//! `MERGETUNE_WATCH_CPU=1 cargo bench --bench metrics`: the daemon's CPU with 64 devices at
//! L3 under the L3 watch (`metrics_support/watch_cpu.rs`; `MERGETUNE_BINS=A:B` compares two
//! binaries).

use criterion::{Criterion, criterion_group};
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::snapshot::TickTiming;
use mergetune_export::http::{Limits, serve};
use mergetune_export::metrics::Metrics;
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::Config;
use mergetune_logic::decision::Decision;
use mergetune_logic::decision::{Applied, Change, DecisionKind};
use std::hint::black_box;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "../tests/support/memkernel.rs"]
mod memkernel;
use memkernel::MemKernel;

const DEVICES: usize = 64;

fn diskstats_text(n: usize, tick: u64) -> String {
    fake_host::busy_diskstats(n, tick, |i| format!("sd{i}"))
}

/// `DEVICES` unsettled disks whose counters grow at each diskstats read for `ticks` reads.
fn mem_kernel(ticks: u64) -> MemKernel {
    MemKernel::unsettled(
        DEVICES,
        (1..=ticks)
            .map(|t| diskstats_text(DEVICES, t).into_bytes())
            .collect(),
    )
}

/// A daemon with 64 devices, every one with a closed window, and one decision each in the
/// metrics (so every family has its full set of series).
fn loaded() -> (Daemon, MemKernel, Metrics) {
    let cfg = Config::default();
    let mut fs = mem_kernel(u64::from(cfg.policy.window_ticks) + 1);
    let mut d = Daemon::simulated(cfg.clone());
    let m = Metrics::new();
    for t in 0..=u64::from(cfg.policy.window_ticks) {
        let decisions = d.tick(t * 1000, &mut fs);
        m.update(&d, &decisions, timing(t * 1000));
    }
    let decisions: Vec<Decision> = fs
        .devs
        .keys()
        .map(|n| Decision {
            at_ms: 6000,
            device: n.clone(),
            kind: DecisionKind::Disable,
            changes: vec![Change {
                tunable: Tunable::Nomerges,
                from: "0".into(),
                to: "2".into(),
            }],
            reason: "bench".into(),
            applied: Applied::Yes,
        })
        .collect();
    m.update(&d, &decisions, timing(6000));
    (d, fs, m)
}

fn timing(now_ms: u64) -> TickTiming {
    TickTiming {
        now_ms,
        duration_seconds: 0.0002,
        lag_seconds: 0.0,
    }
}

fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<usize> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::with_capacity(64 * 1024);
    s.read_to_end(&mut buf)?;
    if !buf.starts_with(b"HTTP/1.1 200") {
        return Err(std::io::Error::other("not 200"));
    }
    Ok(buf.len())
}

fn bench(c: &mut Criterion) {
    let (d, _fs, m) = loaded();
    let bytes = m.render().len();
    eprintln!("64 devices: one scrape is {bytes} bytes");
    let mut g = c.benchmark_group("metrics_64_devices");
    g.bench_function("update", |b| {
        b.iter(|| m.update(black_box(&d), &[], timing(7000)))
    });
    g.bench_function("encode", |b| {
        b.iter(|| {
            // A new generation each time: the text is encoded, not served from the cache.
            m.config_reload(true);
            black_box(m.render())
        })
    });
    g.bench_function("cached", |b| b.iter(|| black_box(m.render())));
    let (_d2, _fs2, m2) = loaded();
    let server = serve(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(m2),
        Limits::default(),
    )
    .unwrap();
    let addr = server.local_addr();
    g.bench_function("http_scrape", |b| {
        b.iter(|| black_box(http_get(addr, "/metrics").unwrap()))
    });
    g.finish();
}

criterion_group!(benches, bench);

#[path = "metrics_support/fake_host.rs"]
mod fake_host;
// fakesys's helpers for the tests say what a command printed with `command::text`.
#[path = "../tests/support/command.rs"]
mod command;
#[path = "../tests/support/fakesys.rs"]
mod fakesys;
#[path = "metrics_support/scrape_cost.rs"]
mod scrape_cost;
#[path = "metrics_support/watch_cpu.rs"]
mod watch_cpu;

/// (VmRSS kB, VmHWM kB, utime+stime in clock ticks) of a process.
fn proc_usage(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let cpu = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (kb("VmRSS:"), kb("VmHWM:"), cpu)
}

/// The release binary as a dry-run daemon on the fake tree under `root` (`sys/`, `proc/`,
/// state in `state/`), serving metrics on `addr`.
fn dry_run_daemon(bin: &Path, config: &Path, addr: &str, root: &Path) -> std::process::Command {
    let mut c = std::process::Command::new(bin);
    c.args(["-q", "run", "--dry-run", "--config"])
        .arg(config)
        .arg("--metrics-listen")
        .arg(addr)
        .arg("--sysfs-root")
        .arg(root.join("sys"))
        .arg("--procfs-root")
        .arg(root.join("proc"))
        .arg("--state-dir")
        .arg(root.join("state"));
    c
}

fn status_lag(addr: &str) -> f64 {
    mergetune_export::status::fetch(addr, Duration::from_secs(5))
        .map(|s| s.max_tick_lag_ms)
        .unwrap_or(f64::NAN)
}

/// `scrapers` threads scraping `/metrics` back to back until `deadline`: the scrapes,
/// the errors and the slowest scrape in ms.
fn scrape_until(sock: std::net::SocketAddr, scrapers: usize, deadline: Instant) -> (u64, u64, u64) {
    let scrapes = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let worst_ms = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..scrapers)
        .map(|_| {
            let (scrapes, errors, worst_ms) = (scrapes.clone(), errors.clone(), worst_ms.clone());
            std::thread::spawn(move || {
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    match http_get(sock, "/metrics") {
                        Ok(_) => scrapes.fetch_add(1, Ordering::Relaxed),
                        Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                    };
                    worst_ms.fetch_max(t0.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    (
        scrapes.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed),
        worst_ms.load(Ordering::Relaxed),
    )
}

fn load_run() {
    let scrapers: usize = fake_host::env_or("MERGETUNE_LOAD_SCRAPERS", 200);
    let secs: u64 = fake_host::env_or("MERGETUNE_LOAD_SECS", 10);
    let bin = fake_host::release_bin();
    let t = tempfile::tempdir().unwrap();
    // The fake kernel: counters move every 100 ms.
    let host = fake_host::FakeHost::start(
        t.path(),
        (0..DEVICES).map(|i| format!("sd{i}")),
        fake_host::QUEUE,
        Duration::from_millis(100),
        |tick| diskstats_text(DEVICES, tick),
    );
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let interval_ms = 100;
    let mut child = dry_run_daemon(Path::new(&bin), Path::new("/dev/null"), &addr, t.path())
        .arg("--interval-ms")
        .arg(interval_ms.to_string())
        .spawn()
        .unwrap_or_else(|e| panic!("{bin}: {e} (cargo build --release first)"));
    let pid = child.id();
    // Warm up: 5 s of ticks and a few scrapes.
    std::thread::sleep(Duration::from_secs(5));
    for _ in 0..10 {
        let _ = http_get(addr.parse().unwrap(), "/metrics");
    }
    let lag_before = status_lag(&addr);
    let (rss0, _, cpu0) = proc_usage(pid);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (scrapes, errors, worst_ms) = scrape_until(addr.parse().unwrap(), scrapers, deadline);
    let (rss1, hwm1, cpu1) = proc_usage(pid);
    let lag_after = status_lag(&addr);
    // Memory after the load has gone: flat means back where it was.
    std::thread::sleep(Duration::from_secs(3));
    let (rss2, _, _) = proc_usage(pid);
    let n = scrapes;
    let clk = 100.0; // USER_HZ
    let cpu_s = (cpu1 - cpu0) as f64 / clk;
    println!(
        "load: {scrapers} scrapers x {secs} s against {DEVICES} devices, tick {interval_ms} ms"
    );
    println!(
        "scrapes: {n} ({:.0}/s), errors: {}, slowest scrape {} ms",
        n as f64 / secs as f64,
        errors,
        worst_ms
    );
    println!(
        "daemon CPU: {cpu_s:.2} s over the run = {:.1} us per scrape (ticks included)",
        cpu_s * 1e6 / n.max(1) as f64
    );
    println!("worst tick lag: {lag_before:.1} ms before the load, {lag_after:.1} ms after it");
    println!(
        "daemon memory: RSS {rss0} kB before, {rss1} kB at the end (peak {hwm1} kB), {rss2} kB 3 s later"
    );
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    let _ = child.wait();
    drop(host);
}

fn main() {
    if std::env::var_os("MERGETUNE_LOAD").is_some() {
        load_run();
        return;
    }
    if std::env::var_os("MERGETUNE_SCRAPE_COST").is_some() {
        scrape_cost::run();
        return;
    }
    if std::env::var_os("MERGETUNE_WATCH_CPU").is_some() {
        watch_cpu::run();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
