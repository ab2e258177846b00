//! systemd integration: logging to the journal with structured fields, and `sd_notify`.
//!
//! Logging: under systemd (`JOURNAL_STREAM` names our stderr) events go to the journal
//! directly, each tracing field as a journal field in upper case: a decision carries
//! `DEVICE=`, `FROM=`, `TO=` and `REASON=` next to `MESSAGE=` (`journalctl -u mergetune
//! DEVICE=sda`). Elsewhere, readable lines on stderr. `-v` debug, `-vv` trace, `-q` warnings
//! only; `RUST_LOG` (an `EnvFilter` directive) overrides all three.
//!
//! Notify: `READY=1`, `STATUS=...`, `WATCHDOG=1` and `STOPPING=1` are datagrams to the unix
//! socket named by `$NOTIFY_SOCKET` (a path, or an abstract name starting with `@`). Outside
//! systemd nothing is sent.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The filter directive for `-v`/`-q` when `RUST_LOG` is not set.
pub fn default_directive(verbose: u8, quiet: bool) -> &'static str {
    match (quiet, verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        _ => "trace",
    }
}

/// `JOURNAL_STREAM` is "DEV:INODE" of the stream systemd connected to our stdout/stderr; it
/// is only ours when it matches stderr (a child of a service inherits the variable, not
/// necessarily the stream).
pub fn stderr_is_journal() -> bool {
    let Ok(v) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.split_once(':') else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Ok(fd) = io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    match std::fs::File::from(fd).metadata() {
        Ok(m) => m.dev() == dev && m.ino() == ino,
        Err(_) => false,
    }
}

/// Where log lines went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTarget {
    Journal,
    Stderr,
}

/// Installs the global subscriber. Call once, first thing in main.
pub fn init(verbose: u8, quiet: bool) -> LogTarget {
    let filter = || {
        EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new(default_directive(verbose, quiet)))
    };
    if stderr_is_journal() {
        match tracing_journald::layer() {
            Ok(layer) => {
                let layer = layer
                    .with_field_prefix(None)
                    .with_syslog_identifier("mergetune".to_string());
                if tracing_subscriber::registry()
                    .with(filter())
                    .with(layer)
                    .try_init()
                    .is_ok()
                {
                    return LogTarget::Journal;
                }
            }
            Err(e) => {
                eprintln!("mergetune: cannot open the journal socket ({e}); logging to stderr")
            }
        }
        // Stderr is the journal anyway: no timestamps (journald adds them), no colours.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter())
            .with_writer(io::stderr)
            .with_target(false)
            .with_ansi(false)
            .without_time()
            .try_init();
        return LogTarget::Stderr;
    }
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(io::stderr)
        .with_target(false)
        .with_ansi(io::stderr().is_terminal())
        .try_init();
    LogTarget::Stderr
}

/// Talks to the service manager over `$NOTIFY_SOCKET`.
#[derive(Debug)]
pub struct Notifier {
    target: Option<(UnixDatagram, NotifyAddr)>,
    watchdog: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum NotifyAddr {
    Path(std::path::PathBuf),
    Abstract(Vec<u8>),
}

impl Notifier {
    /// From `$NOTIFY_SOCKET`, `$WATCHDOG_USEC` and `$WATCHDOG_PID`. Without systemd every
    /// call is a no-op.
    pub fn from_env() -> Notifier {
        let socket = std::env::var_os("NOTIFY_SOCKET");
        let usec = std::env::var("WATCHDOG_USEC").ok();
        let pid = std::env::var("WATCHDOG_PID").ok();
        Self::from_values(socket.as_deref(), usec.as_deref(), pid.as_deref())
    }

    fn from_values(
        socket: Option<&std::ffi::OsStr>,
        watchdog_usec: Option<&str>,
        watchdog_pid: Option<&str>,
    ) -> Notifier {
        use std::os::unix::ffi::OsStrExt;
        let addr = socket.and_then(|s| {
            let b = s.as_bytes();
            match b.first() {
                Some(b'@') => Some(NotifyAddr::Abstract(b[1..].to_vec())),
                Some(b'/') => Some(NotifyAddr::Path(std::path::PathBuf::from(s))),
                _ => None,
            }
        });
        let target = addr.and_then(|a| UnixDatagram::unbound().ok().map(|s| (s, a)));
        let for_us = watchdog_pid
            .map(|p| p.trim().parse::<u32>().ok() == Some(std::process::id()))
            .unwrap_or(true);
        let watchdog = watchdog_usec
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|&u| u > 0 && for_us)
            .map(Duration::from_micros);
        Notifier { target, watchdog }
    }

    /// Whether a service manager listens.
    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// The watchdog timeout systemd expects pings within (`WatchdogSec=`), if any.
    pub fn watchdog_timeout(&self) -> Option<Duration> {
        self.watchdog
    }

    /// Sends `state` (newline-separated `KEY=VALUE` lines). Ok(false) when not under systemd.
    pub fn notify(&self, state: &str) -> io::Result<bool> {
        let Some((sock, addr)) = &self.target else {
            return Ok(false);
        };
        match addr {
            NotifyAddr::Path(p) => sock.send_to(state.as_bytes(), p)?,
            NotifyAddr::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let a = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                sock.send_to_addr(state.as_bytes(), &a)?
            }
        };
        Ok(true)
    }

    pub fn ready(&self, status: &str) -> io::Result<bool> {
        self.notify(&format!("READY=1\nSTATUS={}", one_line(status)))
    }

    pub fn status(&self, status: &str) -> io::Result<bool> {
        self.notify(&format!("STATUS={}", one_line(status)))
    }

    pub fn watchdog(&self) -> io::Result<bool> {
        if self.watchdog.is_none() {
            return Ok(false);
        }
        self.notify("WATCHDOG=1")
    }

    pub fn stopping(&self, status: &str) -> io::Result<bool> {
        self.notify(&format!("STOPPING=1\nSTATUS={}", one_line(status)))
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn sends_to_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).unwrap();
        let n = Notifier::from_values(Some(path.as_os_str()), None, None);
        assert!(n.ready("ok").unwrap());
        let mut buf = [0u8; 256];
        let len = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1\nSTATUS=ok");
        assert!(!n.watchdog().unwrap(), "no WATCHDOG_USEC: no ping");
    }

    #[test]
    fn sends_to_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("mergetune-test-{}", std::process::id());
        let a = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let server = UnixDatagram::bind_addr(&a).unwrap();
        let sock = format!("@{name}");
        let n = Notifier::from_values(
            Some(OsStr::new(&sock)),
            Some("30000000"),
            Some(&std::process::id().to_string()),
        );
        assert_eq!(n.watchdog_timeout(), Some(Duration::from_secs(30)));
        assert!(n.watchdog().unwrap());
        let mut buf = [0u8; 64];
        let len = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"WATCHDOG=1");
    }

    #[test]
    fn no_socket_no_op_and_foreign_watchdog_ignored() {
        let n = Notifier::from_values(None, Some("1000"), Some("1"));
        assert!(!n.enabled());
        assert_eq!(
            n.watchdog_timeout(),
            None,
            "WATCHDOG_PID of another process"
        );
        assert!(!n.ready("x").unwrap());
    }
}
