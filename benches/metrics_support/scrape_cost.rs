//! The scrape-cost ratio against node_exporter: `MERGETUNE_SCRAPE_COST=1 cargo bench --bench
//! metrics` (after `cargo build --release`; Debian package `prometheus-node-exporter`).
//!
//! Both exporters run on the same fake sysfs/procfs tree (`MERGETUNE_COST_DEVICES` devices,
//! default 16, counters moving every second): the release binary as a dry-run daemon at its
//! default 1 s tick, and `prometheus-node-exporter --collector.disable-defaults
//! --collector.diskstats` (`$NODE_EXPORTER` for another binary). Each round scrapes one of
//! them 500 times back to back over loopback, then the other (the order alternates from
//! round to round so that drift of the shared machine hits both alike), and takes each
//! process's whole CPU over its 500 scrapes from `/proc/PID/stat` (utime + stime, all
//! threads, the tick loop included) and, for resolution, the sum of
//! `/proc/PID/task/*/schedstat` (ns on CPU). It prints the ratio per round and the median
//! with its range, for a new connection per scrape and for one kept-alive connection, and
//! both processes' RSS (`/proc/PID/status` VmRSS, VmHWM) at the end.
//!
//! `MERGETUNE_COST_PACE_MS=N` spaces the scrapes N ms apart (the endpoint then sleeps
//! between scrapes and pays a wakeup for each, as with a real scrape interval; back to
//! back, a busy endpoint can find the next request already waiting).
//!
//! The request is what Prometheus 2.x sends (its Accept header), without
//! `Accept-Encoding: gzip` unless `MERGETUNE_COST_GZIP=1`: node_exporter compresses when
//! asked and mergetune never does, so without gzip node_exporter is measured at its cheapest.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};

use super::fake_host::FakeHost;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

use super::fake_host::env_or;

/// sda, sdb, ..., sdz, sdaa, ...: names node_exporter's default device filter keeps.
fn dev_name(i: usize) -> String {
    let mut s = String::new();
    let mut n = i;
    loop {
        s.insert(0, (b'a' + (n % 26) as u8) as char);
        if n < 26 {
            break;
        }
        n = n / 26 - 1;
    }
    format!("sd{s}")
}

/// Whole-process CPU: (utime + stime in clock ticks, sum of the threads' ns on CPU).
fn cpu(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let ticks = field(11) + field(12);
    let mut ns = 0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                ns += s
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    (ticks, ns)
}

/// (VmRSS kB, VmHWM kB) of a process.
fn rss_kb(pid: u32) -> (u64, u64) {
    let (rss, hwm, _) = super::proc_usage(pid);
    (rss, hwm)
}

/// A minimal HTTP/1.1 client: one GET, the body read by Content-Length, chunks or EOF.
struct Client {
    addr: SocketAddr,
    keep_alive: bool,
    gzip: bool,
    conn: Option<BufReader<TcpStream>>,
}

impl Client {
    fn get(&mut self) -> std::io::Result<usize> {
        if self.conn.is_none() {
            let s = TcpStream::connect(self.addr)?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.set_nodelay(true)?;
            self.conn = Some(BufReader::with_capacity(64 * 1024, s));
        }
        let r = self.conn.as_mut().unwrap();
        write!(
            r.get_mut(),
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nUser-Agent: Prometheus/2.42.0\r\nAccept: {ACCEPT}\r\n{}X-Prometheus-Scrape-Timeout-Seconds: 10\r\n{}\r\n",
            self.addr,
            if self.gzip {
                "Accept-Encoding: gzip\r\n"
            } else {
                ""
            },
            if self.keep_alive {
                ""
            } else {
                "Connection: close\r\n"
            },
        )?;
        let mut line = String::new();
        r.read_line(&mut line)?;
        if !line.starts_with("HTTP/1.1 200") {
            return Err(std::io::Error::other(format!("status line {line:?}")));
        }
        let (mut length, mut chunked, mut close) = (None, false, !self.keep_alive);
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let l = line.trim_end().to_ascii_lowercase();
            if l.is_empty() {
                break;
            }
            if let Some(v) = l.strip_prefix("content-length:") {
                length = v.trim().parse::<usize>().ok();
            } else if l.starts_with("transfer-encoding:") && l.contains("chunked") {
                chunked = true;
            } else if l.starts_with("connection:") && l.contains("close") {
                close = true;
            }
        }
        let mut body = Vec::with_capacity(64 * 1024);
        if chunked {
            loop {
                line.clear();
                r.read_line(&mut line)?;
                let size = usize::from_str_radix(line.trim(), 16)
                    .map_err(|_| std::io::Error::other(format!("chunk size {line:?}")))?;
                let start = body.len();
                body.resize(start + size + 2, 0);
                r.read_exact(&mut body[start..])?;
                body.truncate(start + size);
                if size == 0 {
                    break;
                }
            }
        } else if let Some(n) = length {
            body.resize(n, 0);
            r.read_exact(&mut body)?;
        } else {
            r.read_to_end(&mut body)?;
            close = true;
        }
        if close {
            self.conn = None;
        }
        Ok(body.len())
    }
}

struct Exporter {
    name: &'static str,
    child: Child,
    addr: SocketAddr,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        // SIGTERM: mergetune restores (nothing, in dry-run) and exits.
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        );
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn wait_up(addr: SocketAddr, name: &str) {
    let t = Instant::now();
    let mut c = Client {
        addr,
        keep_alive: false,
        gzip: false,
        conn: None,
    };
    while c.get().is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{name} did not answer on {addr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Per round: (mergetune ticks, node ticks, mergetune ns, node ns).
fn rounds(
    m: &Exporter,
    n: &Exporter,
    keep_alive: bool,
    gzip: bool,
    count: usize,
    reps: usize,
) -> Vec<[u64; 4]> {
    let pace = Duration::from_millis(env_or("MERGETUNE_COST_PACE_MS", 0));
    let mut out = Vec::new();
    for rep in 0..reps {
        let mut row = [0u64; 4];
        let order: [(usize, &Exporter); 2] = if rep % 2 == 0 {
            [(0, m), (1, n)]
        } else {
            [(1, n), (0, m)]
        };
        for (slot, e) in order {
            let mut c = Client {
                addr: e.addr,
                keep_alive,
                gzip,
                conn: None,
            };
            let pid = e.child.id();
            let (t0, ns0) = cpu(pid);
            for _ in 0..count {
                c.get().unwrap_or_else(|err| panic!("{}: {err}", e.name));
                if !pace.is_zero() {
                    std::thread::sleep(pace);
                }
            }
            drop(c);
            let (t1, ns1) = cpu(pid);
            row[slot] = t1 - t0;
            row[slot + 2] = ns1 - ns0;
        }
        out.push(row);
    }
    out
}

/// The release binary as a dry-run daemon on the fake host under `root`.
fn spawn_mergetune(bin: &str, root: &Path) -> Exporter {
    let maddr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mchild = super::dry_run_daemon(
        Path::new(bin),
        Path::new("/dev/null"),
        &maddr.to_string(),
        root,
    )
    .stdin(Stdio::null())
    .spawn()
    .unwrap_or_else(|e| panic!("{bin}: {e} (cargo build --release first)"));
    Exporter {
        name: "mergetune",
        child: mchild,
        addr: maddr,
    }
}

/// node_exporter with only its diskstats collector, on the fake host.
fn spawn_node_exporter(node_bin: &str, host: &FakeHost, udev: &Path) -> Exporter {
    let naddr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let nchild = Command::new(node_bin)
        .args(["--collector.disable-defaults", "--collector.diskstats"])
        .arg(format!("--web.listen-address={naddr}"))
        .arg(format!("--path.procfs={}", host.proc_.display()))
        .arg(format!("--path.sysfs={}", host.sys.display()))
        .arg(format!("--path.udev.data={}", udev.display()))
        .arg("--log.level=error")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{node_bin}: {e} (apt-get install prometheus-node-exporter, or set NODE_EXPORTER)"
            )
        });
    Exporter {
        name: "node_exporter",
        child: nchild,
        addr: naddr,
    }
}

/// One connection mode's rounds (CPU of each exporter per round: stat ticks, then
/// schedstat ns), their ratios and the median, over `scrapes` scrapes per exporter.
fn report_rounds(label: &str, rows: &[[u64; 4]], clk: f64, scrapes: usize) {
    let mut by_stat = Vec::new();
    let mut by_ns = Vec::new();
    println!("\n{label}:");
    println!(
        "round  mergetune CPU (stat ms / schedstat ms)  node_exporter CPU (stat ms / schedstat ms)  ratio (stat / schedstat)"
    );
    for (i, r) in rows.iter().enumerate() {
        let ms = |ticks: u64| ticks as f64 * 1000.0 / clk;
        let rs = if r[1] > 0 {
            r[0] as f64 / r[1] as f64
        } else {
            f64::NAN
        };
        let rn = if r[3] > 0 {
            r[2] as f64 / r[3] as f64
        } else {
            f64::NAN
        };
        by_stat.push(rs);
        by_ns.push(rn);
        println!(
            "{:>5}  {:>10.0} / {:>8.1}                     {:>10.0} / {:>8.1}                          {rs:.3} / {rn:.3}",
            i + 1,
            ms(r[0]),
            r[2] as f64 / 1e6,
            ms(r[1]),
            r[3] as f64 / 1e6
        );
    }
    let tot = |k: usize| rows.iter().map(|r| r[k]).sum::<u64>() as f64;
    let lo_hi = |v: &[f64]| {
        let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    };
    let (slo, shi) = lo_hi(&by_stat);
    let (nlo, nhi) = lo_hi(&by_ns);
    println!(
        "ratio mergetune / node_exporter CPU: /proc/PID/stat median {:.3} (range {slo:.3}..{shi:.3}, all rounds together {:.3}); schedstat median {:.3} (range {nlo:.3}..{nhi:.3})",
        median(&mut by_stat),
        tot(0) / tot(1),
        median(&mut by_ns),
    );
    println!(
        "per scrape: mergetune {:.1} us, node_exporter {:.1} us (schedstat, all rounds)",
        tot(2) / 1e3 / scrapes as f64,
        tot(3) / 1e3 / scrapes as f64
    );
}

pub fn run() {
    let devices: usize = env_or("MERGETUNE_COST_DEVICES", 16);
    let count: usize = env_or("MERGETUNE_COST_SCRAPES", 500);
    let reps: usize = env_or("MERGETUNE_COST_ROUNDS", 7);
    let gzip = std::env::var_os("MERGETUNE_COST_GZIP").is_some_and(|v| v == "1");
    let bin = super::fake_host::release_bin();
    let node_bin =
        std::env::var("NODE_EXPORTER").unwrap_or_else(|_| "prometheus-node-exporter".into());

    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("udev")).unwrap();
    let host = FakeHost::start(
        t.path(),
        (0..devices).map(dev_name),
        super::fake_host::QUEUE,
        Duration::from_secs(1),
        move |tick| super::fake_host::busy_diskstats(devices, tick, dev_name),
    );

    let m = spawn_mergetune(&bin, t.path());
    let n = spawn_node_exporter(&node_bin, &host, &t.path().join("udev"));
    wait_up(m.addr, m.name);
    wait_up(n.addr, n.name);
    // Warm up both (allocators, Go's runtime, the first encode), then settle.
    let _ = rounds(&m, &n, true, gzip, 100, 2);
    std::thread::sleep(Duration::from_secs(1));

    let size = |e: &Exporter| {
        Client {
            addr: e.addr,
            keep_alive: false,
            gzip,
            conn: None,
        }
        .get()
        .unwrap()
    };
    println!(
        "scrape cost: {devices} devices, {count} scrapes per exporter per round, {reps} rounds, gzip {}, {} ms between scrapes",
        if gzip { "asked" } else { "not asked" },
        env_or::<u64>("MERGETUNE_COST_PACE_MS", 0)
    );
    println!(
        "one scrape: mergetune {} bytes, node_exporter {} bytes",
        size(&m),
        size(&n)
    );
    let clk = rustix::param::clock_ticks_per_second() as f64;
    for (label, keep_alive) in [
        ("new connection per scrape", false),
        ("one kept-alive connection", true),
    ] {
        let rows = rounds(&m, &n, keep_alive, gzip, count, reps);
        report_rounds(label, &rows, clk, count * reps);
    }
    let (mr, mh) = rss_kb(m.child.id());
    let (nr, nh) = rss_kb(n.child.id());
    println!(
        "\nRSS: mergetune {mr} kB (peak {mh} kB = {:.2} MiB), node_exporter {nr} kB (peak {nh} kB)",
        mh as f64 / 1024.0
    );
    drop(m);
    drop(n);
    drop(host);
    let _: PathBuf = t.path().to_path_buf();
}
