//! The read-only HTTP endpoint: `GET /metrics` (the Prometheus text format 0.0.4) and
//! `GET /status` (JSON). Nothing else: other paths are 404, other methods 405, a request
//! with a body 413, a request head over 8 KiB or 64 headers 431, anything that is not
//! HTTP/1.x 400.
//!
//! One thread of its own runs a level-triggered epoll loop over non-blocking sockets, so the
//! daemon's synchronous tick loop keeps its interval whatever the scrapers do. It is a small
//! HTTP/1.1 server written for this job rather than hyper on tokio, for two measured reasons
//! (docs/metrics.md, "Cost"): a scrape is served from a cached buffer, so the per-connection
//! machinery was most of the user-space CPU of a scrape; and the defences below need to see
//! every connection's state, which hyper keeps to itself. The system calls go through
//! rustix (safe wrappers), the request head through httparse and the `Date` header through
//! httpdate; the one option no safe binding offers, `TCP_DEFER_ACCEPT`, is set by the
//! kernel layer ([`mergetune_kernel::sys::sockopt`]).
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
use rustix::event::{EventfdFlags, epoll, eventfd};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

mod conn;
mod request;

pub use request::{Head, Parsed, Reply, parse_head, route};

/// What the endpoint serves: the two documents, each already encoded (a scrape between two
/// ticks is a copy of a reference-counted buffer).
pub trait Documents: Send + Sync + 'static {
    /// `/metrics`: the Prometheus text format 0.0.4.
    fn render(&self) -> Bytes;
    /// `/status`: JSON.
    fn status_json(&self) -> Bytes;
}

/// The `/metrics` content type, whatever the scraper's `Accept` prefers: Prometheus asks for
/// OpenMetrics first and takes this format as its fallback (docs/design.md, "Exposition").
pub const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

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
    /// The eventfd the server thread's epoll watches: a write to it stops the thread.
    wake: OwnedFd,
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
        if let Some(t) = self.thread.take() {
            // An eventfd write of 8 bytes fails only when its counter would overflow,
            // which a handful of stops cannot reach.
            let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Raises the soft open-files limit so that `want` descriptors fit (up to the hard limit):
/// the default soft limit of 1024 would make the connection table's bound unreachable.
/// Returns the soft limit in force afterwards (`u64::MAX` when unlimited).
fn ensure_nofile(want: u64) -> u64 {
    let lim = getrlimit(Resource::Nofile);
    // None is RLIM_INFINITY.
    let current = lim.current.unwrap_or(u64::MAX);
    if current >= want {
        return current;
    }
    let raised = want.min(lim.maximum.unwrap_or(u64::MAX));
    let new = Rlimit {
        current: Some(raised),
        maximum: lim.maximum,
    };
    match setrlimit(Resource::Nofile, new) {
        Ok(()) => raised,
        Err(_) => current,
    }
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

/// Why the endpoint could not start; each names the address it was for. The I/O error is
/// part of the message, not a separate source, so that a chain of contexts (anyhow's
/// `{:#}`) says it once.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address is taken, not local, or needs a privilege (a port under 1024).
    #[error("{addr}: cannot listen: {cause}")]
    Bind { addr: SocketAddr, cause: io::Error },
    /// The listener is bound but what serves it could not be set up.
    #[error("{addr}: cannot set the endpoint up ({step}): {cause}")]
    Setup {
        addr: SocketAddr,
        step: &'static str,
        cause: io::Error,
    },
}

/// Binds `addr` now (so a busy port is reported to the caller) and serves from a new thread.
/// Long because it sets the listener up option by option (backlog, TCP_NODELAY,
/// TCP_DEFER_ACCEPT, the connection cap under the open-files limit), each failure logged
/// where it happens, before the thread starts.
pub fn serve(
    addr: SocketAddr,
    docs: Arc<dyn Documents>,
    mut limits: Limits,
) -> Result<ServerHandle, ServeError> {
    let setup = |step: &'static str| {
        move |e: io::Error| ServeError::Setup {
            addr,
            step,
            cause: e,
        }
    };
    let listener = TcpListener::bind(addr).map_err(|cause| ServeError::Bind { addr, cause })?;
    listener
        .set_nonblocking(true)
        .map_err(setup("non-blocking"))?;
    let local = listener.local_addr().map_err(setup("local address"))?;
    let nofile = ensure_nofile(nofile_wanted(limits.max_connections));
    let cap = connection_cap(limits.max_connections, nofile);
    if cap < limits.max_connections {
        tracing::info!(
            "metrics endpoint: at most {cap} connections (open-files limit {nofile}, {} kept for the daemon)",
            reserved_fds(nofile)
        );
        limits.max_connections = cap;
    }
    // The three options below make the endpoint cheaper and keep silent clients out of the
    // table; it still serves without them, so a refusal is logged, not fatal.
    // A deeper accept queue for bursts of connections (Linux takes a second listen()).
    if let Err(e) = rustix::net::listen(&listener, 1024) {
        tracing::debug!("metrics endpoint: listen backlog 1024: {e}");
    }
    // Accepted sockets inherit TCP_NODELAY: one setsockopt instead of one per connection.
    // A response is a single write; Nagle would only delay its tail.
    if let Err(e) = rustix::net::sockopt::set_tcp_nodelay(&listener, true) {
        tracing::debug!("metrics endpoint: TCP_NODELAY: {e}");
    }
    // Wake for a connection when its request has arrived, not at its handshake: one wakeup
    // per scrape instead of two, and a client that connects and never speaks is held by the
    // kernel (for at most the header timeout), not in our table.
    let defer = limits
        .header_timeout
        .clamp(Duration::from_secs(1), Duration::from_secs(60));
    if let Err(e) = mergetune_kernel::sys::sockopt::set_tcp_defer_accept(&listener, defer) {
        tracing::debug!("metrics endpoint: TCP_DEFER_ACCEPT: {e}");
    }
    let epfd = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| setup("epoll")(e.into()))?;
    let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
        .map_err(|e| setup("eventfd")(e.into()))?;
    for (fd, key) in [(listener.as_fd(), LISTENER), (wake.as_fd(), WAKE)] {
        epoll::add(
            &epfd,
            fd,
            epoll::EventData::new_u64(key),
            epoll::EventFlags::IN,
        )
        .map_err(|e| setup("epoll")(e.into()))?;
    }
    let thread = std::thread::Builder::new()
        .name("mergetune-http".into())
        .spawn(move || {
            // No priority of its own: the unit's SystemCallFilter refuses setpriority, and a
            // scrape needs none, since the refresh encodes the body and a scrape only copies
            // it (crate::metrics). Every descriptor is owned: the epoll and the connections
            // close with `server`.
            let mut server = conn::Server::new(epfd, listener, docs, limits);
            server.run();
        })
        .map_err(setup("thread"))?;
    Ok(ServerHandle {
        addr: local,
        wake,
        thread: Some(thread),
    })
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
