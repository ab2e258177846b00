//! Logging: readable stderr lines outside systemd (a field the message already says is not
//! repeated), `--log-format json`, `-q`/`-v`/`RUST_LOG`, and the journal detection
//! (`JOURNAL_STREAM` must name our stderr; without a journald socket the daemon falls back
//! to plain lines without timestamps, which journald would add itself).
//!
//! The journal test runs the daemon in a private mount namespace with a tmpfs over `/run`,
//! so what it finds at `/run/systemd/journal` is the test's own (nothing, then a stand-in
//! socket), whatever the host runs, and the host's `/run` is never written.

use crate::needs;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where the daemon under test looks for journald's socket.
enum Journal {
    /// The host's `/run`, whatever is there (the tests that do not use the journal).
    Host,
    /// A private `/run` with no journald.
    Absent,
    /// A private `/run` whose `systemd/journal` is this directory (holding the test's socket).
    StandIn(PathBuf),
}

use crate::command::one_disk_tree as tree;

/// Runs `mergetune [flags] run --once --dry-run` on the tree with stderr to a file.
fn run(t: &Path, flags: &[&str], env: &[(&str, String)], journal_stream_is_stderr: bool) -> String {
    run_with(t, flags, env, journal_stream_is_stderr, Journal::Host)
}

fn run_with(
    t: &Path,
    flags: &[&str],
    env: &[(&str, String)],
    journal_stream_is_stderr: bool,
    journal: Journal,
) -> String {
    let err_path = t.join("stderr.log");
    let err = std::fs::File::create(&err_path).unwrap();
    let md = err.metadata().unwrap();
    let bin = env!("CARGO_BIN_EXE_mergetune");
    let mut cmd = match &journal {
        Journal::Host => Command::new(bin),
        Journal::Absent | Journal::StandIn(_) => {
            let prefix = needs::private_mount_ns();
            let mut c = Command::new(prefix[0]);
            c.args(&prefix[1..]).args(["sh", "-c"]);
            // $1: the stand-in directory ("" for none); the rest: the daemon's command line.
            c.arg(
                "set -e; mount -t tmpfs mergetune-test /run; \
                 if [ -n \"$1\" ]; then mkdir -p /run/systemd/journal; \
                 mount --bind \"$1\" /run/systemd/journal; fi; shift; exec \"$@\"",
            );
            c.arg("sh");
            match &journal {
                Journal::StandIn(dir) => c.arg(dir),
                _ => c.arg(""),
            };
            c.arg(bin);
            c
        }
    };
    cmd.args(flags).args([
        "run",
        "--once",
        "--dry-run",
        "--interval-ms",
        "10",
        "--config",
        "/dev/null",
    ]);
    crate::command::on_tree(&mut cmd, t)
        .env_remove("RUST_LOG")
        .env_remove("JOURNAL_STREAM")
        .stdout(Stdio::null())
        .stderr(err);
    if journal_stream_is_stderr {
        cmd.env("JOURNAL_STREAM", format!("{}:{}", md.dev(), md.ino()));
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let status = cmd.status().unwrap();
    let text = std::fs::read_to_string(&err_path).unwrap();
    assert!(status.success(), "{status}: {text}");
    text
}

#[test]
fn stderr_lines_and_verbosity_flags() {
    let t = tree();
    let normal = run(t.path(), &[], &[], false);
    assert!(normal.contains("INFO"), "{normal}");
    assert!(normal.contains("sda"), "{normal}");
    // Outside systemd: timestamps, and the device once: in the message, not again as a
    // field.
    assert!(
        normal
            .lines()
            .any(|l| l.starts_with("20") && l.contains(" INFO sda: ")),
        "{normal}"
    );
    assert!(!normal.contains("device=sda"), "{normal}");

    let quiet = run(t.path(), &["-q"], &[], false);
    assert!(!quiet.contains("INFO"), "-q: {quiet}");
    let debug = run(t.path(), &["-v"], &[], false);
    assert!(debug.len() >= normal.len(), "-v shows at least as much");
    let env = run(t.path(), &[], &[("RUST_LOG", "warn".to_string())], false);
    assert!(!env.contains("INFO"), "RUST_LOG=warn: {env}");
    let env = run(
        t.path(),
        &["-q"],
        &[("RUST_LOG", "info".to_string())],
        false,
    );
    assert!(env.contains("INFO"), "RUST_LOG overrides -q: {env}");
}

#[test]
fn json_lines_for_log_shippers() {
    let t = tree();
    let text = run(t.path(), &["--log-format", "json"], &[], false);
    let mut sda = None;
    for l in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not a JSON line: {l}"));
        assert!(
            v["timestamp"].as_str().is_some_and(|t| t.starts_with("20")),
            "{l}"
        );
        assert!(v["level"].is_string() && v["message"].is_string(), "{l}");
        if v["device"] == "sda" {
            sda = Some(v);
        }
    }
    let sda = sda.unwrap_or_else(|| panic!("no line with \"device\":\"sda\": {text}"));
    assert!(
        sda["message"].as_str().unwrap().starts_with("sda: "),
        "{sda}"
    );
    // Under systemd the journal stays the default; json is asked for explicitly.
    let journal = run(t.path(), &["--log-format", "text"], &[], true);
    assert!(journal.lines().any(|l| l.starts_with("20")), "{journal}");
}

#[test]
fn journal_stream_of_another_stream_is_ignored() {
    let t = tree();
    let text = run(
        t.path(),
        &[],
        &[("JOURNAL_STREAM", "1:1".to_string())],
        false,
    );
    assert!(
        text.lines().any(|l| l.starts_with("20")),
        "plain stderr with timestamps: {text}"
    );
}

/// Without a journald socket: plain lines without timestamps. Then with a stand-in journald
/// socket: native journal entries with the tracing fields as upper-case journal fields.
#[test]
#[ignore = "needs unshare (util-linux) and root or user namespaces: cargo test --release --test packaging -- systemd_journal:: --include-ignored"]
fn under_systemd_lines_go_to_the_journal_with_structured_fields() {
    needs::require_private_mount_ns("under_systemd_lines_go_to_the_journal_with_structured_fields");
    let t = tree();
    let text = run_with(t.path(), &[], &[], true, Journal::Absent);
    assert!(text.contains("cannot open the journal socket"), "{text}");
    let log_lines: Vec<&str> = text.lines().filter(|l| l.contains("INFO")).collect();
    assert!(!log_lines.is_empty(), "{text}");
    for l in &log_lines {
        assert!(
            l.trim_start().starts_with("INFO"),
            "no timestamp under systemd: {l}"
        );
    }

    // A stand-in journald: a datagram socket in the test's own directory, which the daemon
    // sees at /run/systemd/journal/socket.
    let sock_dir = t.path().join("journal");
    std::fs::create_dir(&sock_dir).unwrap();
    let sock = std::os::unix::net::UnixDatagram::bind(sock_dir.join("socket")).unwrap();
    // Read while the daemon runs, as journald does: a socket queues only
    // net.unix.max_dgram_qlen datagrams (10 here), and a sender blocks on a full queue.
    sock.set_read_timeout(Some(std::time::Duration::from_millis(100)))
        .unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let sock = sock.try_clone().unwrap();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut entries = Vec::new();
            let mut buf = vec![0u8; 65536];
            loop {
                match sock.recv(&mut buf) {
                    Ok(n) => entries.push(buf[..n].to_vec()),
                    Err(_) if done.load(std::sync::atomic::Ordering::SeqCst) => break,
                    Err(_) => {}
                }
            }
            entries
        })
    };
    let text = run_with(t.path(), &[], &[], true, Journal::StandIn(sock_dir.clone()));
    // The daemon has exited: the reader drains what is still queued, then stops.
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let entries = reader.join().unwrap();
    assert!(
        !text.contains("INFO"),
        "lines went to the journal, not stderr: {text}"
    );
    let parsed: Vec<Vec<(String, String)>> = entries.iter().map(|e| parse_native(e)).collect();
    let sda = parsed
        .iter()
        .find(|e| e.iter().any(|(k, v)| k == "DEVICE" && v == "sda"))
        .unwrap_or_else(|| panic!("no entry with DEVICE=sda in {parsed:?}"));
    let get = |key: &str| sda.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    assert_eq!(get("SYSLOG_IDENTIFIER"), Some("mergetune"), "{sda:?}");
    assert!(
        get("MESSAGE").is_some_and(|m| m.starts_with("sda: ")),
        "{sda:?}"
    );
    assert!(get("PRIORITY").is_some(), "{sda:?}");
}

/// The journal's native protocol: `KEY=value\n`, or `KEY\n` + 64-bit little-endian length +
/// value + `\n` for values that may hold newlines.
fn parse_native(mut b: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let Some(nl) = b.iter().position(|&c| c == b'\n') else {
            break;
        };
        let line = &b[..nl];
        if let Some(eq) = line.iter().position(|&c| c == b'=') {
            out.push((
                String::from_utf8_lossy(&line[..eq]).to_string(),
                String::from_utf8_lossy(&line[eq + 1..]).to_string(),
            ));
            b = &b[nl + 1..];
        } else {
            let key = String::from_utf8_lossy(line).to_string();
            let rest = &b[nl + 1..];
            if rest.len() < 8 {
                break;
            }
            let len = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
            let value = &rest[8..8 + len];
            out.push((key, String::from_utf8_lossy(value).to_string()));
            b = &rest[8 + len + 1..];
        }
    }
    out
}
