//! systemd integration and log formats: logging to the journal with structured fields,
//! one readable line per event on a terminal, JSON lines for log shippers, and `sd_notify`.
//!
//! Logging (`--log-format`, [`LogFormat`]):
//! - `journal`: events go to the journal directly, each tracing field as a journal field in
//!   upper case: a decision carries `DEVICE=`, `FROM=`, `TO=` and `REASON=` next to
//!   `MESSAGE=` (`journalctl -u mergetune DEVICE=sda`).
//! - `text`: one line per event: time, level, the message, then only the fields whose value
//!   the message does not already say (a decision's message names its device, values and
//!   reason, so on a terminal it reads once).
//! - `json`: one JSON object per line: `timestamp`, `level`, `message` and every field.
//! - `auto` (the default): `journal` when `JOURNAL_STREAM` names our stderr (started by
//!   systemd), else `text`.
//!
//! `-v` debug, `-vv` trace, `-q` warnings only; `RUST_LOG` (an `EnvFilter` directive)
//! overrides all three. `NO_COLOR` (set, not empty) turns the level colours off.
//!
//! Simulated time ([`set_sim_time_ms`], set by `mergetune simulate` before each virtual
//! tick): a text line starts `[sim 12.5s]` instead of the wall clock and a JSON line
//! carries `sim_time_s`, so a simulated decision never reads as a change to a real disk.
//! `mergetune replay` does the same with the recording's time ([`set_replay_time_ms`]):
//! `[replay 12.5s]` and `replay_time_s`, since its decisions are not being taken now either.
//!
//! Notify: `READY=1`, `STATUS=...`, `WATCHDOG=1` and `STOPPING=1` are datagrams to the unix
//! socket named by `$NOTIFY_SOCKET` (a path, or an abstract name starting with `@`). Outside
//! systemd nothing is sent.

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::os::unix::net::UnixDatagram;
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// The virtual time of the simulation being logged, in ms; `u64::MAX` when not simulating.
static SIM_TIME_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

/// Whether [`SIM_TIME_MS`] is a replay's recorded time rather than a simulation's.
static REPLAYING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks the log lines that follow as simulated, at `ms` of virtual time (None: real again).
pub fn set_sim_time_ms(ms: Option<u64>) {
    REPLAYING.store(false, std::sync::atomic::Ordering::Relaxed);
    SIM_TIME_MS.store(ms.unwrap_or(u64::MAX), std::sync::atomic::Ordering::Relaxed);
}

/// Marks the log lines that follow as a replay's, at `ms` of the recording's time (None:
/// real again).
pub fn set_replay_time_ms(ms: Option<u64>) {
    REPLAYING.store(ms.is_some(), std::sync::atomic::Ordering::Relaxed);
    SIM_TIME_MS.store(ms.unwrap_or(u64::MAX), std::sync::atomic::Ordering::Relaxed);
}

/// The time of the simulation or replay being logged, with its label (`sim`, `replay`).
fn virtual_time_ms() -> Option<(&'static str, u64)> {
    let ms = SIM_TIME_MS.load(std::sync::atomic::Ordering::Relaxed);
    let label = if REPLAYING.load(std::sync::atomic::Ordering::Relaxed) {
        "replay"
    } else {
        "sim"
    };
    (ms != u64::MAX).then_some((label, ms))
}

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

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// `journal` under systemd, else `text`.
    #[default]
    Auto,
    /// One readable line per event.
    Text,
    /// One JSON object per line, every field included.
    Json,
    /// The journal's native protocol, fields as upper-case journal fields.
    Journal,
}

/// Where log lines went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTarget {
    Journal,
    Stderr,
}

/// An event's message and its other fields, as text.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.rest.push((field.name(), value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.rest.push((field.name(), format!("{value:?}")));
        }
    }
}

/// How an event becomes a line on stderr.
pub enum LineFormat {
    /// `[time] LEVEL message [key=value ...]`, a field shown only when the message does
    /// not already contain its value.
    Text { timestamps: bool, ansi: bool },
    /// `{"timestamp":..,"level":..,"message":..,<field>:..}`.
    Json,
}

impl<S, N> FormatEvent<S, N> for LineFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut f = Fields::default();
        event.record(&mut f);
        match *self {
            LineFormat::Text { timestamps, ansi } => {
                write_text(&mut w, event, &f, timestamps, ansi)
            }
            LineFormat::Json => write_json(&mut w, event, f),
        }
    }
}

/// [`LineFormat::Text`]'s line.
fn write_text(
    w: &mut Writer<'_>,
    event: &Event<'_>,
    f: &Fields,
    timestamps: bool,
    ansi: bool,
) -> std::fmt::Result {
    if let Some((label, ms)) = virtual_time_ms() {
        write!(w, "[{label} {:.1}s] ", ms as f64 / 1000.0)?;
    } else if timestamps {
        SystemTime.format_time(w)?;
        w.write_char(' ')?;
    }
    let level = *event.metadata().level();
    let colour = match level {
        tracing::Level::ERROR => "31",
        tracing::Level::WARN => "33",
        tracing::Level::INFO => "32",
        tracing::Level::DEBUG => "34",
        tracing::Level::TRACE => "35",
    };
    if ansi {
        write!(w, "\x1b[{colour}m{level:>5}\x1b[0m ")?;
    } else {
        write!(w, "{level:>5} ")?;
    }
    // Names in a message come from devices, recordings and peers: no raw control
    // character reaches the terminal or the log file (line breaks stay).
    w.write_str(&mergetune_logic::printable::printable_lines(&text_line(
        &f.message, &f.rest,
    )))?;
    writeln!(w)
}

/// The message, then `key=value` for each field whose value it does not contain.
pub fn text_line(message: &str, fields: &[(&str, String)]) -> String {
    let mut out = message.to_string();
    for (k, v) in fields {
        if v.is_empty() || message.contains(v.as_str()) {
            continue;
        }
        if v.contains([' ', '"', '=']) {
            let _ = write!(out, " {k}={v:?}");
        } else {
            let _ = write!(out, " {k}={v}");
        }
    }
    out
}

/// [`LineFormat::Json`]'s line.
fn write_json(w: &mut Writer<'_>, event: &Event<'_>, mut f: Fields) -> std::fmt::Result {
    let mut ts = String::new();
    SystemTime.format_time(&mut Writer::new(&mut ts))?;
    let level = event.metadata().level().to_string();
    if let Some((label, ms)) = virtual_time_ms() {
        let key = if label == "replay" {
            "replay_time_s"
        } else {
            "sim_time_s"
        };
        f.rest.push((key, format!("{:.3}", ms as f64 / 1000.0)));
    }
    writeln!(w, "{}", json_line(&ts, &level, &f.message, &f.rest))
}

/// One JSON object; a field named like one of the fixed keys keeps its value under
/// `field_<name>`.
pub fn json_line(timestamp: &str, level: &str, message: &str, fields: &[(&str, String)]) -> String {
    let mut m = serde_json::Map::new();
    m.insert("timestamp".into(), timestamp.into());
    m.insert("level".into(), level.into());
    m.insert("message".into(), message.into());
    for (k, v) in fields {
        let key = if m.contains_key(*k) {
            format!("field_{k}")
        } else {
            k.to_string()
        };
        m.insert(key, v.as_str().into());
    }
    serde_json::Value::Object(m).to_string()
}

/// Installs the global subscriber. Call once, first thing in main. A line that cannot be
/// written to stderr (a reader gone from its pipe) is dropped: tracing would say so with
/// `eprintln!`, which panics on that same pipe and would end the daemon before it puts the
/// devices' settings back.
pub fn init(verbose: u8, quiet: bool, format: LogFormat) -> LogTarget {
    let filter = || {
        EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new(default_directive(verbose, quiet)))
    };
    let under_systemd = stderr_is_journal();
    let format = match format {
        LogFormat::Auto if under_systemd => LogFormat::Journal,
        LogFormat::Auto => LogFormat::Text,
        f => f,
    };
    let line_format = match format {
        LogFormat::Journal => {
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
                    let _ = writeln!(
                        io::stderr(),
                        "mergetune: cannot open the journal socket ({e}); logging to stderr"
                    );
                }
            }
            // Stderr is (likely) the journal anyway: no timestamps (journald adds them), no
            // colours.
            LineFormat::Text {
                timestamps: false,
                ansi: false,
            }
        }
        LogFormat::Json => LineFormat::Json,
        LogFormat::Text | LogFormat::Auto => {
            use std::io::IsTerminal;
            LineFormat::Text {
                timestamps: true,
                ansi: io::stderr().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
            }
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(io::stderr)
        .log_internal_errors(false)
        .event_format(line_format)
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

/// The live loop's service manager is systemd, through these notifications.
impl mergetune_daemon::service::ServiceManager for Notifier {
    fn watchdog_timeout(&self) -> Option<Duration> {
        Notifier::watchdog_timeout(self)
    }
    fn ready(&self, status: &str) -> io::Result<bool> {
        Notifier::ready(self, status)
    }
    fn status(&self, status: &str) -> io::Result<bool> {
        Notifier::status(self, status)
    }
    fn watchdog(&self) -> io::Result<bool> {
        Notifier::watchdog(self)
    }
    fn stopping(&self, status: &str) -> io::Result<bool> {
        Notifier::stopping(self, status)
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::sync::{Arc, Mutex};

    /// A writer into a shared buffer, for a subscriber under test.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn decision_line<E>(format: E) -> String
    where
        E: FormatEvent<
                tracing_subscriber::Registry,
                tracing_subscriber::fmt::format::DefaultFields,
            > + Send
            + Sync
            + 'static,
    {
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .event_format(format)
            .finish();
        tracing::subscriber::with_default(sub, || {
            // As the daemon logs a decision: the message says it all, the fields repeat it
            // for the journal and JSON.
            tracing::info!(device = %"sda", from = %"0", to = %"2",
                reason = %"merge ratio 0.0% < 1.0% for 2 windows", extra = %"kept",
                "sda: queue/nomerges 0 -> 2: disable: merge ratio 0.0% < 1.0% for 2 windows");
        });
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn a_terminal_line_says_the_reason_once() {
        let line = decision_line(LineFormat::Text {
            timestamps: false,
            ansi: false,
        });
        assert_eq!(
            line,
            " INFO sda: queue/nomerges 0 -> 2: disable: merge ratio 0.0% < 1.0% for 2 windows extra=kept\n"
        );
        assert_eq!(line.matches("merge ratio").count(), 1, "{line}");
        let stamped = decision_line(LineFormat::Text {
            timestamps: true,
            ansi: false,
        });
        assert!(stamped.starts_with("20"), "{stamped}");
    }

    #[test]
    fn a_json_line_carries_every_field() {
        let line = decision_line(LineFormat::Json);
        assert_eq!(line.lines().count(), 1, "{line}");
        let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["device"], "sda");
        assert_eq!(v["from"], "0");
        assert_eq!(v["to"], "2");
        assert_eq!(v["reason"], "merge ratio 0.0% < 1.0% for 2 windows");
        assert!(v["message"].as_str().unwrap().starts_with("sda: "), "{v}");
        assert!(v["timestamp"].as_str().unwrap().starts_with("20"), "{v}");
    }

    #[test]
    fn fields_the_message_does_not_say_are_kept_quoted_when_needed() {
        let fields = [
            ("device", "sda".to_string()),
            ("path", "/x y".to_string()),
            ("empty", String::new()),
        ];
        assert_eq!(text_line("sda: gone", &fields), "sda: gone path=\"/x y\"");
        let j = json_line("t", "INFO", "m", &[("message", "dup".into())]);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(
            (v["message"].as_str(), v["field_message"].as_str()),
            (Some("m"), Some("dup"))
        );
    }

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
