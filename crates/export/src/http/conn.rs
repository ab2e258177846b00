//! The endpoint's event loop: one level-triggered epoll over non-blocking sockets, and the
//! state of each connection (reading a head, writing a response, draining after an error)
//! with the deadlines and shedding described in the parent module.

use super::request::{Parsed, Reply, parse_head, reason, route};
use super::{Documents, LISTENER, Limits, WAKE};
use bytes::Bytes;
use rustix::buffer::spare_capacity;
use rustix::event::{Timespec, epoll};
use rustix::io::Errno;
use rustix::net::SocketFlags;
use std::collections::HashMap;
use std::io::{self, IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
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

/// `Date:` of responses (IMF-fixdate, RFC 9110 5.6.7), formatted once per second.
#[derive(Default)]
struct DateCache {
    secs: u64,
    text: String,
}

impl DateCache {
    fn get(&mut self, now: SystemTime) -> &str {
        let secs = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if secs != self.secs || self.text.is_empty() {
            self.secs = secs;
            self.text = httpdate::fmt_http_date(now);
        }
        &self.text
    }
}

pub(super) struct Server {
    epfd: OwnedFd,
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
        epfd: OwnedFd,
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
        let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
        loop {
            let now = Instant::now();
            let wake_at = match (self.next_sweep, self.accept_paused_until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // At least a millisecond past the deadline (so it has passed when we wake), and
            // at most a minute.
            let timeout = wake_at.map(|t| {
                let wait = t
                    .saturating_duration_since(now)
                    .saturating_add(Duration::from_millis(1))
                    .min(Duration::from_secs(60));
                Timespec {
                    tv_sec: wait.as_secs() as i64,
                    tv_nsec: i64::from(wait.subsec_nanos()),
                }
            });
            events.clear();
            match epoll::wait(&self.epfd, spare_capacity(&mut events), timeout.as_ref()) {
                Ok(_) => {}
                Err(Errno::INTR) => continue,
                Err(e) => {
                    warn!("metrics endpoint: epoll_wait failed: {e}; endpoint stopped");
                    return;
                }
            }
            let now = Instant::now();
            for ev in &events {
                // Copied out: the kernel's epoll_event is packed.
                let (token, flags) = (ev.data.u64(), ev.flags);
                match token {
                    WAKE => return,
                    LISTENER => self.accept_all(now),
                    token => self.on_event(token as RawFd, flags, now),
                }
            }
            if self.accept_paused_until.is_some_and(|t| now >= t) {
                self.accept_paused_until = None;
                self.set_interest(&self.listener, LISTENER, epoll::EventFlags::IN);
            }
            if self.next_sweep.is_some_and(|t| now >= t) {
                self.sweep(now);
            }
        }
    }

    fn set_interest(&self, fd: impl AsFd, token: u64, events: epoll::EventFlags) {
        // Fails only for a descriptor that is not registered, which every caller's is.
        let _ = epoll::modify(&self.epfd, fd, epoll::EventData::new_u64(token), events);
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
        for _ in 0..64 {
            let fd = match rustix::net::accept_with(
                &self.listener,
                SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            ) {
                Ok(fd) => fd,
                Err(Errno::AGAIN) => return,
                Err(Errno::INTR | Errno::CONNABORTED) => continue,
                Err(e @ (Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM)) => {
                    // Out of descriptors: make room, or stop accepting for a moment
                    // (level-triggered epoll would otherwise spin on the queue).
                    if self.shed_one() {
                        continue;
                    }
                    warn!("metrics endpoint: accept failed: {e}; pausing 100 ms");
                    self.set_interest(&self.listener, LISTENER, epoll::EventFlags::empty());
                    self.accept_paused_until = Some(now + Duration::from_millis(100));
                    return;
                }
                Err(e) => {
                    warn!("metrics endpoint: accept failed: {e}");
                    return;
                }
            };
            let stream = TcpStream::from(fd);
            if self.conns.len() >= self.limits.max_connections.max(1) && !self.shed_one() {
                // Every slot is mid-request: this one goes (closing it is the answer).
                debug!("metrics endpoint: connection table full, refusing a connection");
                drop(stream);
                continue;
            }
            let fd = stream.as_raw_fd();
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
                epoll::EventFlags::OUT
            } else {
                epoll::EventFlags::IN
            };
            let token = epoll::EventData::new_u64(fd as u64);
            if epoll::add(&self.epfd, &c.stream, token, events).is_err() {
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

    fn on_event(&mut self, fd: RawFd, events: epoll::EventFlags, now: Instant) {
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
            if events.intersects(epoll::EventFlags::ERR | epoll::EventFlags::HUP) {
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
        let (head, end) = match parse_head(&c.buf, self.limits.max_headers) {
            Ok(Parsed::Partial) if c.buf.len() > limit => {
                return self.reply_and_close(c, now, Reply::plain(431, "request head too large\n"));
            }
            Ok(Parsed::Partial) => return Next::Keep,
            Ok(Parsed::Complete { len, .. }) if len > limit => {
                return self.reply_and_close(c, now, Reply::plain(431, "request head too large\n"));
            }
            Ok(Parsed::Complete { head, len }) => (head, len),
            Err(reply) => return self.reply_and_close(c, now, reply),
        };
        let reply = route(&*self.docs, head.method, head.path, head.has_body);
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
            self.date.get(SystemTime::now())
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
        match self.flush(c, now) {
            Next::Keep if matches!(c.state, State::Writing { .. }) => {
                let token = c.stream.as_raw_fd() as u64;
                self.set_interest(&c.stream, token, epoll::EventFlags::OUT);
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
            let token = c.stream.as_raw_fd() as u64;
            self.set_interest(&c.stream, token, epoll::EventFlags::IN);
            return Next::Keep;
        }
        c.active = now;
        c.state = State::Reading {
            started: now,
            idle: true,
        };
        if was_partial {
            let token = c.stream.as_raw_fd() as u64;
            self.set_interest(&c.stream, token, epoll::EventFlags::IN);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_date_header_is_an_imf_fixdate_of_the_current_second() {
        let mut cache = DateCache::default();
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(cache.get(at), "Sun, 06 Nov 1994 08:49:37 GMT");
        // Within the same second, the cached text; a second later, a new one.
        assert_eq!(
            cache.get(at + Duration::from_millis(900)),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(
            cache.get(at + Duration::from_secs(1)),
            "Sun, 06 Nov 1994 08:49:38 GMT"
        );
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(cache.get(leap), "Tue, 29 Feb 2000 00:00:00 GMT");
    }
}
