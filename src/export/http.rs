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
//! - one request per connection per turn of the loop: a busy keep-alive client waits its
//!   turn like everyone else, and every response is a shared copy of the cached text.
//!
//! A failure here is logged and never reaches the daemon.

use crate::export::metrics::Metrics;
use bytes::Bytes;
use std::collections::HashMap;
use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, warn};

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
fn ensure_nofile(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Binds `addr` now (so a busy port is reported to the caller) and serves from a new thread.
pub fn serve(addr: SocketAddr, metrics: Arc<Metrics>, limits: Limits) -> io::Result<ServerHandle> {
    let listener = TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    let lfd = listener.as_raw_fd();
    ensure_nofile(limits.max_connections as u64 + 256);
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
            // The endpoint yields the CPU to the tick loop: under a flood of scrapers the
            // decisions keep their schedule and the scrapers wait (nice +10 for this thread
            // only; Linux applies it per thread).
            // SAFETY: gettid/setpriority on the calling thread; failure leaves the default.
            unsafe {
                let tid = libc::gettid();
                libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
            }
            let mut server = Server {
                epfd,
                listener,
                metrics,
                limits,
                conns: HashMap::new(),
                next_sweep: None,
                accept_paused_until: None,
                date: DateCache::default(),
            };
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
/// How long a connection closed after an error reply is drained.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 256 * 1024;

#[derive(Debug)]
enum State {
    /// Waiting for (the rest of) a request head; `started` is when the head's wait began.
    Reading { started: Instant, idle: bool },
    /// A response partly written: the unsent rest.
    Writing {
        head: Vec<u8>,
        body: Bytes,
        sent: usize,
        since: Instant,
        close: bool,
        /// After an error reply: half-close and read what the client still sends, so that
        /// closing with unread bytes does not reset the connection before it reads the reply.
        linger: bool,
    },
    /// Half-closed after an error reply, discarding input until the client closes.
    Draining { since: Instant, discarded: usize },
}

struct Conn {
    stream: TcpStream,
    opened: Instant,
    /// Last time the client sent bytes or took a response: the shedding order.
    active: Instant,
    buf: Vec<u8>,
    state: State,
}

impl Conn {
    fn deadline(&self, l: &Limits) -> Instant {
        let lifetime = self.opened + l.connection_lifetime;
        let d = match &self.state {
            State::Reading {
                started,
                idle: true,
            } if self.buf.is_empty() => *started + l.idle_timeout,
            State::Reading { started, .. } => *started + l.header_timeout,
            State::Writing { since, .. } => *since + l.write_timeout,
            State::Draining { since, .. } => *since + LINGER,
        };
        // An idle connection past its lifetime goes; a request in progress is finished.
        match self.state {
            State::Reading { .. } if self.buf.is_empty() => d.min(lifetime),
            _ => d,
        }
    }

    /// Idle: nothing of a request received and nothing to send, or only draining.
    fn idle(&self) -> bool {
        match self.state {
            State::Reading { .. } => self.buf.is_empty(),
            State::Draining { .. } => true,
            State::Writing { .. } => false,
        }
    }
}

/// `Date:` of responses, formatted once per second.
#[derive(Default)]
struct DateCache {
    secs: u64,
    text: String,
}

impl DateCache {
    fn get(&mut self) -> &str {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if now != self.secs || self.text.is_empty() {
            self.secs = now;
            self.text = http_date(now);
        }
        &self.text
    }
}

/// IMF-fixdate (RFC 9110 5.6.7) of a Unix time.
pub fn http_date(unix_secs: u64) -> String {
    let days = unix_secs / 86_400;
    let rem = unix_secs % 86_400;
    // 1970-01-01 was a Thursday.
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mon = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(month - 1) as usize];
    format!(
        "{weekday}, {day:02} {mon} {year} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

struct Server {
    epfd: RawFd,
    listener: TcpListener,
    metrics: Arc<Metrics>,
    limits: Limits,
    conns: HashMap<RawFd, Conn>,
    /// Earliest time a connection's deadline may have passed.
    next_sweep: Option<Instant>,
    accept_paused_until: Option<Instant>,
    date: DateCache,
}

/// What one turn of reading a connection decided.
enum Next {
    Keep,
    Close,
}

impl Server {
    fn run(&mut self) {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        loop {
            let now = Instant::now();
            let wake_at = match (self.next_sweep, self.accept_paused_until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let timeout_ms: libc::c_int = match wake_at {
                None => -1,
                Some(t) => t
                    .saturating_duration_since(now)
                    .as_millis()
                    .saturating_add(1)
                    .min(60_000) as libc::c_int,
            };
            // SAFETY: `events` outlives the call and its length is passed.
            let n = unsafe {
                libc::epoll_wait(
                    self.epfd,
                    events.as_mut_ptr(),
                    events.len() as libc::c_int,
                    timeout_ms,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                warn!("metrics endpoint: epoll_wait failed: {e}; endpoint stopped");
                return;
            }
            let now = Instant::now();
            for ev in &events[..n as usize] {
                match ev.u64 {
                    WAKE => return,
                    LISTENER => self.accept_all(now),
                    token => self.on_event(token as RawFd, ev.events, now),
                }
            }
            if self.accept_paused_until.is_some_and(|t| now >= t) {
                self.accept_paused_until = None;
                self.set_interest(self.listener.as_raw_fd(), LISTENER, libc::EPOLLIN);
            }
            if self.next_sweep.is_some_and(|t| now >= t) {
                self.sweep(now);
            }
        }
    }

    fn set_interest(&self, fd: RawFd, token: u64, events: libc::c_int) {
        let mut ev = libc::epoll_event {
            events: events as u32,
            u64: token,
        };
        // SAFETY: fd is registered with our epoll; ev is a valid local.
        unsafe {
            libc::epoll_ctl(self.epfd, libc::EPOLL_CTL_MOD, fd, &mut ev);
        }
    }

    fn schedule(&mut self, at: Instant) {
        self.next_sweep = Some(self.next_sweep.map_or(at, |t| t.min(at)));
    }

    /// Closes every connection past its deadline, and finds the next deadline.
    fn sweep(&mut self, now: Instant) {
        let limits = &self.limits;
        let mut next: Option<Instant> = None;
        self.conns.retain(|fd, c| {
            let d = c.deadline(limits);
            if d <= now {
                debug!("metrics endpoint: fd {fd}: time limit reached, closing");
                false
            } else {
                next = Some(next.map_or(d, |n| n.min(d)));
                true
            }
        });
        self.next_sweep = next;
    }

    /// Accepts what the kernel has queued (a bounded batch per turn).
    fn accept_all(&mut self, now: Instant) {
        let lfd = self.listener.as_raw_fd();
        for _ in 0..64 {
            // SAFETY: accept4 on our listening socket; the new fd is owned below.
            let fd = unsafe {
                libc::accept4(
                    lfd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => return,
                    Some(libc::EINTR) | Some(libc::ECONNABORTED) => continue,
                    Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS)
                    | Some(libc::ENOMEM) => {
                        // Out of descriptors: make room, or stop accepting for a moment
                        // (level-triggered epoll would otherwise spin on the queue).
                        if self.shed_one() {
                            continue;
                        }
                        warn!("metrics endpoint: accept failed: {e}; pausing 100 ms");
                        self.set_interest(lfd, LISTENER, 0);
                        self.accept_paused_until = Some(now + Duration::from_millis(100));
                        return;
                    }
                    _ => {
                        warn!("metrics endpoint: accept failed: {e}");
                        return;
                    }
                }
            }
            // SAFETY: fd is a fresh socket from accept4, owned by nobody else.
            let stream = unsafe { TcpStream::from_raw_fd(fd) };
            if self.conns.len() >= self.limits.max_connections.max(1) && !self.shed_one() {
                // Every slot is mid-request: this one goes (closing it is the answer).
                debug!("metrics endpoint: connection table full, refusing a connection");
                drop(stream);
                continue;
            }
            let mut c = Conn {
                stream,
                opened: now,
                active: now,
                buf: Vec::new(),
                state: State::Reading {
                    started: now,
                    idle: false,
                },
            };
            // The request is usually here already (deferred accept): answer it before
            // registering, so that a `Connection: close` scrape never touches epoll.
            if let Next::Close = self.read(&mut c, now) {
                continue;
            }
            let events = if matches!(c.state, State::Writing { .. }) {
                libc::EPOLLOUT
            } else {
                libc::EPOLLIN
            };
            let mut ev = libc::epoll_event {
                events: events as u32,
                u64: fd as u64,
            };
            // SAFETY: registering a socket we own; ev is a valid local.
            if unsafe { libc::epoll_ctl(self.epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
                continue;
            }
            let d = c.deadline(&self.limits);
            self.conns.insert(fd, c);
            self.schedule(d);
        }
    }

    /// Closes the connection that has been idle the longest (a partial request if no
    /// connection is idle); false when every connection is writing a response.
    fn shed_one(&mut self) -> bool {
        let victim = self
            .conns
            .iter()
            .filter(|(_, c)| c.idle())
            .min_by_key(|(_, c)| c.active)
            .or_else(|| {
                self.conns
                    .iter()
                    .filter(|(_, c)| matches!(c.state, State::Reading { .. }))
                    .min_by_key(|(_, c)| c.active)
            })
            .map(|(fd, _)| *fd);
        match victim {
            Some(fd) => {
                debug!("metrics endpoint: connection table full, closing idle fd {fd}");
                self.conns.remove(&fd);
                true
            }
            None => false,
        }
    }

    fn on_event(&mut self, fd: RawFd, events: u32, now: Instant) {
        let Some(mut c) = self.conns.remove(&fd) else {
            return;
        };
        let next = if let State::Draining { discarded, .. } = &mut c.state {
            let mut chunk = [0u8; 4096];
            match c.stream.read(&mut chunk) {
                Ok(n) if n > 0 && *discarded + n <= LINGER_BYTES => {
                    *discarded += n;
                    Next::Keep
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Next::Keep,
                _ => Next::Close,
            }
        } else if matches!(c.state, State::Writing { .. }) {
            if events & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0 {
                Next::Close
            } else {
                self.flush(&mut c, now)
            }
        } else {
            self.read(&mut c, now)
        };
        if let Next::Keep = next {
            let d = c.deadline(&self.limits);
            self.conns.insert(fd, c);
            self.schedule(d);
        }
    }

    /// Reads what the client sent and answers at most one complete request.
    fn read(&mut self, c: &mut Conn, now: Instant) -> Next {
        let limit = self.limits.max_request_head_bytes.max(1024);
        let mut chunk = [0u8; 4096];
        let room = (limit + 1).saturating_sub(c.buf.len()).min(chunk.len());
        let was_empty = c.buf.is_empty();
        match c.stream.read(&mut chunk[..room.max(1)]) {
            Ok(0) => return Next::Close,
            Ok(n) => {
                c.buf.extend_from_slice(&chunk[..n]);
                c.active = now;
                if was_empty {
                    // The head's time starts with its first byte on a kept-alive connection.
                    if let State::Reading { started, idle } = &mut c.state
                        && *idle
                    {
                        *started = now;
                        *idle = false;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Next::Keep,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Next::Keep,
            Err(_) => return Next::Close,
        }
        self.answer(c, now)
    }

    /// Answers the request at the front of the buffer, if its head is complete.
    fn answer(&mut self, c: &mut Conn, now: Instant) -> Next {
        let limit = self.limits.max_request_head_bytes.max(1024);
        let Some(end) = find_head_end(&c.buf) else {
            if c.buf.len() > limit {
                return self.reply_and_close(c, now, Reply::plain(431, "request head too large\n"));
            }
            return Next::Keep;
        };
        if end > limit {
            return self.reply_and_close(c, now, Reply::plain(431, "request head too large\n"));
        }
        let head = match parse_head(&c.buf[..end], self.limits.max_headers) {
            Ok(h) => h,
            Err(reply) => return self.reply_and_close(c, now, reply),
        };
        let reply = route(
            &self.metrics,
            head.method,
            head.path,
            head.accept.as_deref(),
            head.has_body,
        );
        let past_lifetime = now >= c.opened + self.limits.connection_lifetime;
        let close = head.close || head.has_body || past_lifetime;
        let framing = Framing {
            head_only: head.method == "HEAD",
            close,
            linger: head.has_body,
            http10: head.http10,
        };
        c.buf.drain(..end);
        self.send(c, now, reply, framing)
    }

    fn reply_and_close(&mut self, c: &mut Conn, now: Instant, reply: Reply) -> Next {
        c.buf.clear();
        let framing = Framing {
            head_only: false,
            close: true,
            linger: true,
            http10: false,
        };
        self.send(c, now, reply, framing)
    }

    /// Writes a response; what the socket does not take now is sent when it can.
    fn send(&mut self, c: &mut Conn, now: Instant, reply: Reply, f: Framing) -> Next {
        let mut head = Vec::with_capacity(256);
        let _ = write!(
            head,
            "HTTP/1.1 {} {}\r\ncontent-type: {}\r\ncontent-length: {}\r\ncache-control: no-store\r\ndate: {}\r\n",
            reply.status,
            reason(reply.status),
            reply.content_type,
            reply.body.len(),
            self.date.get()
        );
        if reply.status == 405 {
            head.extend_from_slice(b"allow: GET, HEAD\r\n");
        }
        if f.close {
            head.extend_from_slice(b"connection: close\r\n");
        } else if f.http10 {
            head.extend_from_slice(b"connection: keep-alive\r\n");
        }
        head.extend_from_slice(b"\r\n");
        let body = if f.head_only {
            Bytes::new()
        } else {
            reply.body
        };
        c.state = State::Writing {
            head,
            body,
            sent: 0,
            since: now,
            close: f.close,
            linger: f.linger,
        };
        let fd = c.stream.as_raw_fd();
        match self.flush(c, now) {
            Next::Keep if matches!(c.state, State::Writing { .. }) => {
                self.set_interest(fd, fd as u64, libc::EPOLLOUT);
                Next::Keep
            }
            other => other,
        }
    }

    /// Sends what is left of the response; back to reading when done.
    fn flush(&mut self, c: &mut Conn, now: Instant) -> Next {
        let State::Writing {
            head,
            body,
            sent,
            close,
            linger,
            ..
        } = &mut c.state
        else {
            return Next::Keep;
        };
        let was_partial = *sent > 0;
        loop {
            let total = head.len() + body.len();
            if *sent >= total {
                break;
            }
            let (h, b) = if *sent < head.len() {
                (&head[*sent..], &body[..])
            } else {
                (&head[..0], &body[*sent - head.len()..])
            };
            match c.stream.write_vectored(&[IoSlice::new(h), IoSlice::new(b)]) {
                Ok(0) => return Next::Close,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if was_partial {
                        c.active = now;
                    }
                    return Next::Keep;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        if *close {
            if !*linger {
                return Next::Close;
            }
            let _ = c.stream.shutdown(std::net::Shutdown::Write);
            c.state = State::Draining {
                since: now,
                discarded: 0,
            };
            let fd = c.stream.as_raw_fd();
            self.set_interest(fd, fd as u64, libc::EPOLLIN);
            return Next::Keep;
        }
        c.active = now;
        c.state = State::Reading {
            started: now,
            idle: true,
        };
        if was_partial {
            let fd = c.stream.as_raw_fd();
            self.set_interest(fd, fd as u64, libc::EPOLLIN);
        }
        if !c.buf.is_empty() {
            // A pipelined request: answered on this turn (its bytes are already here, and
            // level-triggered epoll would not report them again).
            if let State::Reading { idle, .. } = &mut c.state {
                *idle = false;
            }
            return self.answer(c, now);
        }
        Next::Keep
    }
}

/// How a reply is framed on the wire.
struct Framing {
    head_only: bool,
    close: bool,
    linger: bool,
    http10: bool,
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// The parts of a request head the endpoint uses.
#[derive(Debug, PartialEq, Eq)]
pub struct Head<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub http10: bool,
    pub accept: Option<String>,
    pub has_body: bool,
    pub close: bool,
}

/// Parses a request head (request line, header lines, the empty line). Errors are the reply.
pub fn parse_head(raw: &[u8], max_headers: usize) -> Result<Head<'_>, Reply> {
    let bad = || Reply::plain(400, "bad request\n");
    let text = std::str::from_utf8(raw).map_err(|_| bad())?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next().ok_or_else(bad)?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    if method.is_empty() || !method.bytes().all(is_token) {
        return Err(bad());
    }
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Err(bad()),
    };
    // Origin form, or absolute form (`http://host/metrics`); the query is ignored.
    let path = if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        rest.find('/').map_or("/", |i| &rest[i..])
    } else if target.starts_with('/') {
        target
    } else {
        return Err(bad());
    };
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let mut head = Head {
        method,
        path,
        http10,
        accept: None,
        has_body: false,
        close: http10,
    };
    let mut count = 0;
    let mut length: Option<u64> = None;
    for line in lines {
        if line.is_empty() {
            continue;
        }
        count += 1;
        if count > max_headers {
            return Err(Reply::plain(431, "too many request headers\n"));
        }
        let (name, value) = line.split_once(':').ok_or_else(bad)?;
        if name.is_empty() || !name.bytes().all(is_token) {
            // Includes obsolete line folding (a line starting with white space).
            return Err(bad());
        }
        let value = value.trim_matches([' ', '\t']);
        if name.eq_ignore_ascii_case("content-length") {
            let n: u64 = value.parse().map_err(|_| bad())?;
            if length.is_some_and(|l| l != n) {
                return Err(bad());
            }
            length = Some(n);
            head.has_body |= n > 0;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            head.has_body = true;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    head.close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") && http10 {
                    head.close = false;
                }
            }
        } else if name.eq_ignore_ascii_case("accept") {
            head.accept = Some(value.to_string());
        }
    }
    Ok(head)
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    }
}

/// A response before it is framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Bytes,
}

impl Reply {
    fn plain(status: u16, msg: &'static str) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: Bytes::from_static(msg.as_bytes()),
        }
    }
}

/// The routing table. Pure apart from reading `metrics`.
pub fn route(
    metrics: &Metrics,
    method: &str,
    path: &str,
    accept: Option<&str>,
    has_body: bool,
) -> Reply {
    if !matches!(path, "/metrics" | "/status") {
        return Reply::plain(404, "not found: try /metrics or /status\n");
    }
    if method != "GET" && method != "HEAD" {
        return Reply::plain(405, "method not allowed: read-only endpoint (GET, HEAD)\n");
    }
    if has_body {
        return Reply::plain(413, "a GET request has no body here\n");
    }
    match path {
        "/metrics" => {
            let om = accept.is_some_and(|a| a.contains("application/openmetrics-text"));
            Reply {
                status: 200,
                content_type: if om { OPENMETRICS_FORMAT } else { TEXT_FORMAT },
                body: metrics.render(om),
            }
        }
        _ => Reply {
            status: 200,
            content_type: "application/json",
            body: metrics.status_json(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_imf_fixdate() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn heads_parse_and_bad_ones_are_400() {
        let h = parse_head(
            b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: text/plain\r\nConnection: keep-alive, close\r\n\r\n",
            64,
        )
        .unwrap();
        assert_eq!(h.path, "/metrics");
        assert!(h.close && !h.has_body && !h.http10);
        assert_eq!(h.accept.as_deref(), Some("text/plain"));
        let h = parse_head(b"GET http://x:9725/status HTTP/1.0\r\n\r\n", 64).unwrap();
        assert_eq!((h.path, h.http10, h.close), ("/status", true, true));
        let h = parse_head(
            b"HEAD /status HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
            64,
        )
        .unwrap();
        assert!(!h.close);
        for bad in [
            &b"GET /metrics\r\n\r\n"[..],
            b"GET /metrics HTTP/2.0\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"G@T /metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nNo colon\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\n folded: x\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"GET /\xff HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(
                parse_head(bad, 64).unwrap_err().status,
                400,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let many: String = (0..5).map(|i| format!("X-{i}: y\r\n")).collect();
        let raw = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(parse_head(raw.as_bytes(), 4).unwrap_err().status, 431);
        let h = parse_head(b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 4).unwrap();
        assert!(h.has_body);
    }
}
