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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "../tests/support/memkernel.rs"]
mod memkernel;
use memkernel::{MemDev, MemKernel};

const DEVICES: usize = 64;

fn diskstats_text(n: usize, tick: u64) -> String {
    let mut s = String::new();
    for i in 0..n {
        let r = 1000 + tick * (997 + i as u64);
        let w = 2000 + tick * 1013;
        s.push_str(&format!(
            "   8 {:>7} sd{} {r} {} {} 4000 {w} {} {} 9000 0 3000 13000 10 0 80 1 50 2\n",
            i * 16,
            i,
            r / 10,
            r * 8,
            w / 5,
            w * 8
        ));
    }
    s
}

/// `DEVICES` mq-deadline disks whose every other attribute reads "0", whose writes do not
/// stick, and whose counters grow at each diskstats read for `ticks` reads.
fn mem_kernel(ticks: u64) -> MemKernel {
    let mut k = MemKernel::default();
    for i in 0..DEVICES {
        let d = k.add(
            &format!("sd{i}"),
            MemDev::with_attrs(&[("queue/scheduler", "none [mq-deadline] kyber")]),
        );
        d.fallback = Some("0".into());
    }
    k.faults.writes_lost = true;
    k.diskstats_script = (1..=ticks)
        .map(|t| diskstats_text(DEVICES, t).into_bytes())
        .collect();
    k
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

#[path = "metrics_support/scrape_cost.rs"]
mod scrape_cost;
#[path = "metrics_support/watch_cpu.rs"]
mod watch_cpu;

fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

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

fn load_run() {
    let scrapers: usize = std::env::var("MERGETUNE_LOAD_SCRAPERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let secs: u64 = std::env::var("MERGETUNE_LOAD_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let bin = std::env::var("MERGETUNE_BIN").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/release/mergetune")
            .display()
            .to_string()
    });
    let t = tempfile::tempdir().unwrap();
    let sys = t.path().join("sys");
    let proc_ = t.path().join("proc");
    std::fs::create_dir_all(&proc_).unwrap();
    for i in 0..DEVICES {
        let q = sys.join(format!("block/sd{i}/queue"));
        std::fs::create_dir_all(&q).unwrap();
        std::fs::write(q.join("nomerges"), "0\n").unwrap();
        std::fs::write(q.join("scheduler"), "none [mq-deadline] kyber\n").unwrap();
        std::fs::write(q.join("rotational"), "0\n").unwrap();
    }
    write_atomic(&proc_.join("diskstats"), &diskstats_text(DEVICES, 0));
    // The fake kernel: counters move every 100 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let kernel = {
        let stop = stop.clone();
        let p = proc_.join("diskstats");
        std::thread::spawn(move || {
            let mut tick = 1;
            while !stop.load(Ordering::Relaxed) {
                write_atomic(&p, &diskstats_text(DEVICES, tick));
                tick += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
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
    let scrapes = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let worst_ms = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let sock: std::net::SocketAddr = addr.parse().unwrap();
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
    let (rss1, hwm1, cpu1) = proc_usage(pid);
    let lag_after = status_lag(&addr);
    // Memory after the load has gone: flat means back where it was.
    std::thread::sleep(Duration::from_secs(3));
    let (rss2, _, _) = proc_usage(pid);
    let n = scrapes.load(Ordering::Relaxed);
    let clk = 100.0; // USER_HZ
    let cpu_s = (cpu1 - cpu0) as f64 / clk;
    println!(
        "load: {scrapers} scrapers x {secs} s against {DEVICES} devices, tick {interval_ms} ms"
    );
    println!(
        "scrapes: {n} ({:.0}/s), errors: {}, slowest scrape {} ms",
        n as f64 / secs as f64,
        errors.load(Ordering::Relaxed),
        worst_ms.load(Ordering::Relaxed)
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
    stop.store(true, Ordering::Relaxed);
    kernel.join().unwrap();
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
