//! The read-only HTTP endpoint: `GET /metrics` (Prometheus text, or OpenMetrics when the
//! scraper asks for it) and `GET /status` (JSON). Nothing else: other paths are 404, other
//! methods 405, a request with a body 413, a request head over 8 KiB or 64 headers 431,
//! anything that is not HTTP/1.x 400.
//!
//! One thread of its own runs a level-triggered epoll loop over non-blocking sockets, so the
//! daemon's synchronous tick loop keeps its interval whatever the scrapers do. It is a small
//! HTTP/1.1 server written for this job rather than hyper on tokio, for two measured reasons
//! (docs/metrics.md, "Cost"): a scrape is served from a cached buffer, so the per-connection
//! machinery was most of the user-space CPU of a scrape; and the defences below need to see
//! every connection's state, which hyper keeps to itself.
//!
//! Defences, all per connection and in [`Limits`]:
//! - every connection is accepted at once (none waits in the kernel's queue behind others);
//!   when `max_connections` are open, the idle connection (no request in progress) that has
//!   been quiet the longest is closed to make room, so idle or slow clients cannot lock a
//!   scraper out;
//! - a request head must be complete `header_timeout` after the connection opened or its
//!   first byte arrived; a kept-alive connection may sit idle `idle_timeout` between
//!   requests; a response must be taken by the client within `write_timeout`; a connection
//!   lives at most `connection_lifetime` (the response that crosses it says `close`);
//! - the connection table never takes the daemon's descriptors: `max_connections` is cut
//!   to what the open-files limit leaves after a reserve ([`connection_cap`]), so a flood of
//!   kept-alive clients cannot starve the state file's saves or the restore at stop (which
//!   also closes the endpoint first);
//! - one request per connection per turn of the loop: a busy keep-alive client waits its
//!   turn like everyone else, and every response is a shared copy of the cached text.
//!
//! A failure here is logged and never reaches the daemon. The endpoint serves whatever
//! implements [`Documents`] (the metrics registry does), so it knows nothing of metrics.
//!
//! Files: this one binds and runs the thread; `conn` is the event loop and the
//! per-connection state machine with its defences; `request` parses a request head and
//! routes it (pure, tested on bytes).

use bytes::Bytes;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

mod conn;
mod request;

pub use request::{Head, Reply, http_date, parse_head, route};

/// What the endpoint serves: the two documents, each already encoded (a scrape between two
/// ticks is a copy of a reference-counted buffer).
pub trait Documents: Send + Sync + 'static {
    /// `/metrics`: the Prometheus text format 0.0.4, or OpenMetrics 1.0 when `openmetrics`.
    fn render(&self, openmetrics: bool) -> Bytes;
    /// `/status`: JSON.
    fn status_json(&self) -> Bytes;
}

pub const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";
pub const OPENMETRICS_FORMAT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Bounds of the endpoint.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once; past it, the longest-idle one is closed for a new one.
    pub max_connections: usize,
    /// Largest request head (request line + headers), in bytes.
    pub max_request_head_bytes: usize,
    pub max_headers: usize,
    /// Time a client has to send a complete request head, from the connection's opening or
    /// the first byte of a later request.
    pub header_timeout: Duration,
    /// Longest wait for the next request on a kept-alive connection.
    pub idle_timeout: Duration,
    /// Time a client has to take a response.
    pub write_timeout: Duration,
    /// Longest life of one (keep-alive) connection.
    pub connection_lifetime: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            max_request_head_bytes: 8192,
            max_headers: 64,
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(120),
            write_timeout: Duration::from_secs(10),
            connection_lifetime: Duration::from_secs(600),
        }
    }
}

/// A running endpoint. Dropping it stops the server thread.
pub struct ServerHandle {
    addr: SocketAddr,
    wake: Option<RawFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving, and waits for the server thread to end.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(fd) = self.wake {
            let one: u64 = 1;
            // SAFETY: fd is the eventfd created in `serve` and owned by this handle until
            // the thread has ended (it is closed below, after the join).
            unsafe {
                libc::write(fd, (&one as *const u64).cast(), 8);
            }
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(fd) = self.wake.take() {
            // SAFETY: the thread that also used it has ended.
            unsafe {
                libc::close(fd);
            }
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Raises the soft open-files limit so that `want` descriptors fit (up to the hard limit):
/// the default soft limit of 1024 would make the connection table's bound unreachable.
/// Returns the soft limit in force afterwards (None if it cannot be read).
fn ensure_nofile(want: u64) -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return None;
        }
        if lim.rlim_cur < want {
            let raised = libc::rlimit {
                rlim_cur: want.min(lim.rlim_max),
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    Some(lim.rlim_cur)
}

/// Descriptors the connection table leaves to the rest of the daemon, out of an
/// open-files limit of `nofile`: a quarter, at least 256 (the kept-open stat files of a
/// large machine, the bio taps, the state file, the tunables the restore writes), and at
/// most half, so that a tiny limit still leaves the endpoint some connections.
pub fn reserved_fds(nofile: u64) -> u64 {
    (nofile / 4).max(256).min(nofile / 2)
}

/// The connections the endpoint may hold: `configured`, cut to what an open-files limit of
/// `nofile` leaves after [`reserved_fds`] (at least 1).
pub fn connection_cap(configured: usize, nofile: u64) -> usize {
    let room = nofile.saturating_sub(reserved_fds(nofile));
    configured
        .min(usize::try_from(room).unwrap_or(usize::MAX))
        .max(1)
}

/// The open-files limit under which [`connection_cap`] leaves `max_connections` whole.
fn nofile_wanted(max_connections: usize) -> u64 {
    (max_connections as u64 + 256) * 4 / 3 + 1
}

/// Binds `addr` now (so a busy port is reported to the caller) and serves from a new thread.
pub fn serve(
    addr: SocketAddr,
    docs: Arc<dyn Documents>,
    mut limits: Limits,
) -> io::Result<ServerHandle> {
    let listener = TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    let lfd = listener.as_raw_fd();
    if let Some(nofile) = ensure_nofile(nofile_wanted(limits.max_connections)) {
        let cap = connection_cap(limits.max_connections, nofile);
        if cap < limits.max_connections {
            tracing::info!(
                "metrics endpoint: at most {cap} connections (open-files limit {nofile}, {} kept for the daemon)",
                reserved_fds(nofile)
            );
            limits.max_connections = cap;
        }
    }
    // SAFETY: plain syscalls on descriptors this function owns; results are checked.
    let (epfd, wake) = unsafe {
        // A deeper accept queue for bursts of connections (Linux takes a second listen()).
        libc::listen(lfd, 1024);
        // Accepted sockets inherit TCP_NODELAY: one setsockopt instead of one per
        // connection. A response is a single write; Nagle would only delay its tail.
        let one: libc::c_int = 1;
        libc::setsockopt(
            lfd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        // Wake for a connection when its request has arrived, not at its handshake: one
        // wakeup per scrape instead of two, and a client that connects and never speaks
        // is held by the kernel (for at most the header timeout), not in our table.
        let defer: libc::c_int = limits.header_timeout.as_secs().clamp(1, 60) as libc::c_int;
        libc::setsockopt(
            lfd,
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&defer as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let epfd = cvt(libc::epoll_create1(libc::EPOLL_CLOEXEC))?;
        let wake = match cvt(libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)) {
            Ok(w) => w,
            Err(e) => {
                libc::close(epfd);
                return Err(e);
            }
        };
        for (fd, token) in [(lfd, LISTENER), (wake, WAKE)] {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: token,
            };
            if let Err(e) = cvt(libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev)) {
                libc::close(epfd);
                libc::close(wake);
                return Err(e);
            }
        }
        (epfd, wake)
    };
    let thread = std::thread::Builder::new()
        .name("mergetune-http".into())
        .spawn(move || {
            // No priority of its own: the unit's SystemCallFilter refuses setpriority, and a
            // scrape needs none, since the refresh encodes the body and a scrape only copies
            // it (crate::metrics).
            let mut server = conn::Server::new(epfd, listener, docs, limits);
            server.run();
            // SAFETY: the epoll fd is ours; every connection closed with `server`.
            unsafe {
                libc::close(epfd);
            }
        });
    match thread {
        Ok(t) => Ok(ServerHandle {
            addr: local,
            wake: Some(wake),
            thread: Some(t),
        }),
        Err(e) => {
            // SAFETY: the thread never started: both descriptors are still only ours.
            unsafe {
                libc::close(epfd);
                libc::close(wake);
            }
            Err(e)
        }
    }
}

const LISTENER: u64 = u64::MAX;
const WAKE: u64 = u64::MAX - 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_stay_well_below_the_open_files_limit() {
        // The hard limit of the issue: 1024 descriptors, a quarter kept.
        assert_eq!(connection_cap(1024, 1024), 768);
        assert_eq!(reserved_fds(1024), 256);
        // A small limit: half kept, half for connections.
        assert_eq!(connection_cap(1024, 256), 128);
        assert_eq!(connection_cap(1024, 1), 1);
        // Where the limit can be raised, the configured bound is kept whole.
        let want = nofile_wanted(1024);
        assert_eq!(connection_cap(1024, want), 1024);
        assert!(want - 1024 >= reserved_fds(want));
        for nofile in [64, 256, 1000, 1024, 4096, 65536, 1 << 20] {
            let cap = connection_cap(usize::MAX, nofile) as u64;
            assert!(cap + 128.min(nofile / 2) <= nofile, "{nofile}: {cap}");
        }
    }
}
