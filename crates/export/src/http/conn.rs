//! The endpoint's event loop: one level-triggered epoll over non-blocking sockets, and the
//! state of each connection (reading a head, writing a response, draining after an error)
//! with the deadlines and shedding described in the parent module.

use super::request::{Reply, find_head_end, http_date, parse_head, reason, route};
use super::{Documents, LISTENER, Limits, WAKE};
use bytes::Bytes;
use std::collections::HashMap;
use std::io::{self, IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, warn};

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

pub(super) struct Server {
    epfd: RawFd,
    listener: TcpListener,
    docs: Arc<dyn Documents>,
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
    pub(super) fn new(
        epfd: RawFd,
        listener: TcpListener,
        docs: Arc<dyn Documents>,
        limits: Limits,
    ) -> Server {
        Server {
            epfd,
            listener,
            docs,
            limits,
            conns: HashMap::new(),
            next_sweep: None,
            accept_paused_until: None,
            date: DateCache::default(),
        }
    }

    pub(super) fn run(&mut self) {
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
            &*self.docs,
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
