//! The restore at stop must not fail for lack of file descriptors. With the open-files
//! limit lowered to 256 and more kept-alive connections to the endpoint than that, SIGTERM
//! still restores every original and exits 0: the endpoint holds at most what the limit
//! leaves after a reserve, and closes before the restore. The built binary, live, on a
//! fake sysfs tree; connections only to 127.0.0.1, bounded in count and time.

use crate::fakesys;

use fakesys::{FakeSys, wait_until};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const NOFILE: u64 = 256;
const CONNECTIONS: usize = 400;
/// The flood goes on through the stop, up to this many connections in all.
const FLOOD_MAX: usize = 3000;

/// Opens a kept-alive scrape; None if the endpoint did not take it in time.
fn scrape(addr: SocketAddr) -> Option<TcpStream> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    Some(s)
}

#[test]
fn a_flood_of_kept_alive_connections_cannot_make_the_restore_at_stop_fail() {
    let fs = FakeSys::new();
    let cfg = fs.config(&fs.p("state"), "127.0.0.1:0");
    let log = fs.p("daemon.log");
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_mergetune"));
    daemon.arg("run").arg("--config").arg(&cfg);
    fs.roots(&mut daemon);
    // The limit is set in the child before the daemon starts, as setrlimit between fork and
    // exec would: `ulimit -n` sets the soft and the hard limit, then the shell execs the
    // daemon in place (the same pid) with the daemon's arguments.
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("ulimit -n {NOFILE} && exec \"$0\" \"$@\""))
        .arg(daemon.get_program())
        .args(daemon.get_args());
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut d = fakesys::Daemon(c.spawn().unwrap());
    let mut addr = None;
    wait_until(
        "the endpoint's address in the log",
        Duration::from_secs(10),
        || {
            let l = std::fs::read_to_string(&log).unwrap_or_default();
            addr = l
                .split("metrics endpoint: http://")
                .nth(1)
                .and_then(|r| r.split('/').next())
                .map(str::to_string);
            addr.is_some()
        },
    );
    let addr: SocketAddr = addr.unwrap().parse().unwrap();
    assert!(addr.ip().is_loopback(), "{addr}");
    fs.wait_nomerges("1", Duration::from_secs(20)); // L2: there is something to restore
    // Kept-alive scrapers, more than the daemon has descriptors, and more coming through
    // the stop (each descriptor the endpoint frees is wanted by the next connection).
    let mut conns = Vec::new();
    let until = Instant::now() + Duration::from_secs(20);
    while conns.len() < CONNECTIONS && Instant::now() < until {
        conns.extend(scrape(addr));
    }
    assert_eq!(conns.len(), CONNECTIONS, "connections opened");
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut more = Vec::new();
            let until = Instant::now() + Duration::from_secs(20);
            while !stop.load(Ordering::Relaxed)
                && more.len() < FLOOD_MAX - CONNECTIONS
                && Instant::now() < until
            {
                more.extend(scrape(addr));
            }
            more.len()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    d.signal(rustix::process::Signal::TERM);
    let status = d.wait();
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "exit {status}:\n{logged}");
    assert_eq!(fs.nomerges(), "0", "the original is back:\n{logged}");
    assert!(!logged.contains("Too many open files"), "{logged}");
    drop(conns);
}
