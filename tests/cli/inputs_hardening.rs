//! Hostile inputs of the second bad-input sweep and the operator's `check-config`, each
//! checked the way it was met: the built binary on a bad file, a rogue endpoint, a
//! recording with forged names.

use mergetune_logic::config::{self, ConfigError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mergetune"))
}

/// Runs the binary, killing it after `limit`: a run that had to be killed is a failure
/// (it blocked), not a hang of the test suite.
fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{cmd:?} still running after {limit:?} (blocked); stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mkfifo(p: &Path) {
    rustix::fs::mkfifoat(rustix::fs::CWD, p, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
}

/// A FIFO made at `p`, and its path.
fn fifo_at(p: PathBuf) -> PathBuf {
    mkfifo(&p);
    p
}

/// `m.toml` in `dir`, a config whose cost profile is the file at `profile`.
fn config_with_profile(dir: &Path, profile: &Path) -> PathBuf {
    let cfg = dir.join("m.toml");
    std::fs::write(
        &cfg,
        format!(
            "[policy]\ncost_profile = {:?}\n",
            profile.display().to_string()
        ),
    )
    .unwrap();
    cfg
}

const SECRET: &str = "root:$6$saltsalt$hashhashhashhash:19000:0:99999:7:::\n";

// ---------------------------------------------------------------------------------------
// 23.4: a file that fails to parse is named by path, line and column, never quoted.

#[test]
fn a_profile_that_is_not_toml_is_placed_never_quoted() {
    let d = tempfile::tempdir().unwrap();
    let secret = d.path().join("shadow");
    std::fs::write(&secret, SECRET).unwrap();
    let cfg = config_with_profile(d.path(), &secret);
    let out = bin().arg("check-config").arg(&cfg).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:1:", secret.display())),
        "path:line:column: {stderr}"
    );
    for part in ["hashhash", "saltsalt", "root:$6"] {
        assert!(!stderr.contains(part), "quotes the file: {stderr}");
    }
    // A value of the wrong type is not echoed either.
    std::fs::write(&secret, "name = \"hunter2\"\nreps = \"hunter2\"\n").unwrap();
    let out = bin().arg("check-config").arg(&cfg).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:", secret.display())),
        "{stderr}"
    );
}

/// `advise /etc/shadow` once quoted the file's first line in its error. A file that is
/// not a trace is told by path, line number and reason, never quoted; nor is a line of a
/// trace that fails to parse (a forged time, sector or device).
#[test]
fn advise_never_quotes_a_file_that_is_not_a_trace() {
    let d = tempfile::tempdir().unwrap();
    let secret = d.path().join("shadow");
    let forged = "8,0 1 1 hunter2 99 Q W 100 + 8 [fio]\n8,0 1 2 0.1 99 Q W hunter3 + 8 [fio]\n";
    for content in [SECRET, forged] {
        std::fs::write(&secret, content).unwrap();
        for json in [false, true] {
            let mut c = crate::lab::lab();
            c.arg("advise");
            if json {
                c.arg("--json");
            }
            let out = c.arg(&secret).output().unwrap();
            let all = crate::command::text(&out);
            assert_eq!(out.status.code(), Some(1), "{all}");
            assert!(
                all.contains(&secret.display().to_string()) && all.contains("line 1"),
                "{all}"
            );
            for part in ["hashhash", "saltsalt", "root:$6", "hunter2", "hunter3"] {
                assert!(!all.contains(part), "quotes the file: {all}");
            }
        }
    }
}

#[test]
fn a_config_or_scenario_that_is_not_toml_is_placed_never_quoted() {
    let d = tempfile::tempdir().unwrap();
    let secret = d.path().join("shadow");
    std::fs::write(&secret, SECRET).unwrap();
    for args in [vec!["check-config"], vec!["simulate"]] {
        let out = bin().args(&args).arg(&secret).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        for part in ["hashhash", "saltsalt", "root:$6"] {
            assert!(!stderr.contains(part), "{args:?} quotes the file: {stderr}");
        }
        assert!(
            stderr.contains("1:") || stderr.contains("line 1"),
            "{args:?}: {stderr}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 23.5: terminal escapes from outside never reach the terminal.

const EVIL: &str = "\x1b]0;pwned\x07\x1b[2J";

fn no_raw_escapes(what: &str, bytes: &[u8]) {
    assert!(
        !bytes.iter().any(|&b| b == 0x1b || b == 0x07),
        "{what} holds raw ESC/BEL: {:?}",
        String::from_utf8_lossy(bytes)
    );
}

/// A recording of the default scenario whose device is renamed to `name`.
fn recording_with_device_named(dir: &Path, name: &str) -> PathBuf {
    use mergetune_sim::scenario::Scenario;
    let sc = Scenario::default_scenario();
    let cfg = sc.daemon_config(&Default::default());
    let path = dir.join("rec.jsonl");
    crate::scenarios::record(&sc, cfg, &path, 60_000);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("sda"), "the default scenario's device is sda");
    let json_name = serde_json::to_string(name).unwrap();
    let evil = text.replace("sda", json_name.trim_matches('"'));
    std::fs::write(&path, evil).unwrap();
    path
}

#[test]
fn replay_of_a_recording_with_a_forged_device_name_prints_it_escaped() {
    let d = tempfile::tempdir().unwrap();
    let rec = recording_with_device_named(d.path(), &format!("sda{EVIL}"));
    let out = bin().arg("replay").arg(&rec).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("decision(s)"), "{stdout}");
    no_raw_escapes("replay's table", &out.stdout);
    no_raw_escapes("replay's log", &out.stderr);
    assert!(
        stdout.contains("sda\\x1b]0;pwned\\x07"),
        "the name is shown, escaped: {stdout}"
    );
}

/// A one-shot HTTP endpoint serving `body` as a 200, on a free port.
fn rogue_endpoint(body: Vec<u8>) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        // Every request (status may ask more than once) gets the same forged document.
        for _ in 0..4 {
            let Ok((mut s, _)) = l.accept() else { break };
            // The whole request, so that closing leaves nothing unread (that would reset).
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(&body);
            let _ = s.flush();
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    });
    addr
}

#[test]
fn status_against_a_rogue_endpoint_prints_its_names_escaped() {
    use mergetune_export::status::{DeviceStatus, StatusSnapshot};
    use mergetune_logic::devices::Management;
    let mut dev = DeviceStatus::new(&format!("sda{EVIL}"), Management::Managed);
    dev.scheduler = Some(mergetune_kernel::scheduler::Reported::Other(format!(
        "mq-deadline{EVIL}"
    )));
    // U+2028 breaks the line in many viewers; U+200B hides in a name.
    dev.last_reason = format!("forged\n{EVIL}\u{2028}line\u{200b}");
    let doc = StatusSnapshot {
        version: format!("9.9{EVIL}"),
        devices: vec![dev],
        ..Default::default()
    };
    let addr = rogue_endpoint(serde_json::to_vec(&doc).unwrap());
    let out = run_bounded(
        {
            let mut c = bin();
            c.args(["status", "--addr", &addr]);
            c
        },
        Duration::from_secs(20),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    no_raw_escapes("status's table", &out.stdout);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("sda\\x1b]0;pwned"), "{stdout}");
    assert!(
        stdout.contains("\\u{2028}line\\u{200b}") && !stdout.contains('\u{2028}'),
        "{stdout}"
    );
    assert_eq!(
        stdout.lines().count(),
        3,
        "a newline forges no row: {stdout}"
    );
}

// ---------------------------------------------------------------------------------------
// 23.6: special files are refused at once; nothing is read without a bound.

#[test]
fn a_fifo_state_file_does_not_block_restore() {
    let d = tempfile::tempdir().unwrap();
    mkfifo(&d.path().join("state.json"));
    let mut c = bin();
    c.arg("restore").arg("--state-dir").arg(d.path());
    let out = run_bounded(c, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("state.json") && stderr.contains("FIFO"),
        "{stderr}"
    );
}

#[test]
fn special_files_named_as_inputs_are_refused_at_once() {
    let d = tempfile::tempdir().unwrap();
    let fifo = fifo_at(d.path().join("fifo"));
    let fifo_s = fifo.display().to_string();
    let dir_s = d.path().display().to_string();
    let cfg_with = |profile: &str| {
        let p = d.path().join(format!("with-{}.toml", profile.len()));
        std::fs::write(&p, format!("[policy]\ncost_profile = {profile:?}\n")).unwrap();
        p.display().to_string()
    };
    let fifo_profile = cfg_with(&fifo_s);
    let zero_profile = cfg_with("/dev/zero");
    let cases: Vec<Vec<&str>> = vec![
        vec!["check-config", "/dev/zero"],
        vec!["check-config", &fifo_s],
        vec!["check-config", &dir_s],
        vec!["check-config", &fifo_profile],
        vec!["check-config", &zero_profile],
        vec!["simulate", "/dev/zero"],
        vec!["simulate", &fifo_s],
        vec!["replay", "/dev/zero"],
        vec!["replay", &fifo_s],
        vec!["advise", "/dev/zero"],
        vec!["advise", &fifo_s],
    ];
    for args in cases {
        // advise is the lab's binary's.
        let mut c = if args[0] == "advise" {
            crate::lab::lab()
        } else {
            bin()
        };
        c.args(&args);
        let out = run_bounded(c, Duration::from_secs(20));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("not a regular file"),
            "{args:?} names why: {stderr}"
        );
    }
}

/// `--record` to a FIFO once blocked in open before the first tick (and ignored SIGTERM
/// until a reader came); anything but a regular file is refused, named, at once.
#[test]
fn record_to_a_fifo_or_a_directory_is_refused_before_the_first_tick() {
    let d = tempfile::tempdir().unwrap();
    let fifo = fifo_at(d.path().join("rec.fifo"));
    for (target, what) in [(fifo.as_path(), "a FIFO"), (d.path(), "a directory")] {
        let mut c = bin();
        c.args([
            "run",
            "--dry-run",
            "--once",
            "--config",
            "/dev/null",
            "--record",
        ])
        .arg(target)
        .arg("--sysfs-root")
        .arg(d.path())
        .arg("--procfs-root")
        .arg(d.path());
        let out = run_bounded(c, Duration::from_secs(20));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&target.display().to_string())
                && stderr.contains(what)
                && stderr.contains("not a regular file"),
            "{stderr}"
        );
    }
}

#[test]
fn the_reload_does_not_block_on_a_fifo_profile() {
    // The daemon's reload reads the new config with the same load_file.
    let d = tempfile::tempdir().unwrap();
    let fifo = fifo_at(d.path().join("profile.toml"));
    let cfg = config_with_profile(d.path(), &fifo);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(config::load_file(&cfg).map_err(|e| e.to_string()));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("load_file blocked on a FIFO profile");
    let e = r.unwrap_err();
    assert!(e.contains("profile.toml") && e.contains("FIFO"), "{e}");
}

// ---------------------------------------------------------------------------------------
// 23.9: advise drops bios no block device can have, and says how many.

#[test]
fn advise_drops_impossible_bios_and_says_how_many() {
    let d = tempfile::tempdir().unwrap();
    let mut body = crate::traces::sequential(200, |t, s| {
        format!("  fio-1 [000] ..... {t:.6}: block_bio_queue: 7,0 R {s} + 8 [fio]\n")
    });
    for (i, (sector, count)) in [
        (5000u64, 4294967295u64),
        (18446744073709551615, 8),
        (9223372036854775807, 8),
    ]
    .into_iter()
    .enumerate()
    {
        body.push_str(&format!(
            "  fio-1 [000] ..... 10.3{i}: block_bio_queue: 7,0 R {sector} + {count} [fio]\n"
        ));
    }
    let p = d.path().join("trace.txt");
    std::fs::write(&p, &body).unwrap();
    let a = mergetune_lab::advise::analyze_file(&p, None, &Default::default()).unwrap();
    assert_eq!(a.devices.len(), 1);
    assert_eq!(a.devices[0].bios, 200, "only the possible bios count");
    assert!(
        a.notes
            .iter()
            .any(|n| n.starts_with("3 event(s) with a size or sector no block device can have")),
        "{:?}",
        a.notes
    );
}

// ---------------------------------------------------------------------------------------
// 23.11: a relative profile is the config's neighbour; a profile of another kernel is said.

#[test]
fn a_relative_cost_profile_is_found_next_to_the_config() {
    let d = tempfile::tempdir().unwrap();
    let sub = d.path().join("etc");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(
        sub.join("mine.toml"),
        mergetune_logic::pricing::profile::LKML_2008,
    )
    .unwrap();
    let cfg = sub.join("m.toml");
    std::fs::write(&cfg, "[policy]\ncost_profile = \"mine.toml\"\n").unwrap();
    // The test's working directory is the crate root: no mine.toml there.
    assert!(!Path::new("mine.toml").exists());
    let c = config::load_file(&cfg).unwrap();
    assert_eq!(
        Path::new(&c.policy.cost_profile),
        sub.join("mine.toml"),
        "held resolved, for the daemon and the reload"
    );
    // And from another working directory, through the binary (systemd runs it from /).
    crate::command::succeeded(bin().current_dir("/").arg("check-config").arg(&cfg));
}

#[test]
fn check_config_says_when_the_profile_is_of_another_kernel() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("m.toml");
    std::fs::write(&cfg, "[policy]\ncost_profile = \"measured-6.18\"\n").unwrap();
    let measured_on = mergetune_logic::pricing::profile::builtin("measured-6.18")
        .unwrap()
        .kernel_release;
    let r = mergetune::cli::check_config::check(&cfg, Some("9.9.9-other"));
    assert!(r.ok, "{:?}", r.errors);
    let w: Vec<&String> = r
        .warnings
        .iter()
        .filter(|w| w.contains("policy.cost_profile"))
        .collect();
    assert_eq!(w.len(), 1, "{:?}", r.warnings);
    assert!(
        w[0].contains(&measured_on) && w[0].contains("9.9.9-other"),
        "{}",
        w[0]
    );
    let same = mergetune::cli::check_config::check(&cfg, Some(&measured_on));
    assert!(
        !same
            .warnings
            .iter()
            .any(|w| w.contains("policy.cost_profile")),
        "{:?}",
        same.warnings
    );
}

// ---------------------------------------------------------------------------------------
// 23.12: check-config refuses what would break the daemon.

#[test]
fn values_that_break_the_daemon_are_refused_naming_the_key() {
    for (text, key) in [
        ("[policy]\nmin_window_bios = 0\n", "policy.min_window_bios"),
        (
            "[daemon]\nstate_dir = \"/run/merge\\u0000tune\"\n",
            "daemon.state_dir",
        ),
        (
            "[policy]\ncost_profile = \"/etc/p\\u0000.toml\"\n",
            "policy.cost_profile",
        ),
        (
            "[policy]\nmin_dwell_secs = 9223372036854775807\n",
            "policy.min_dwell_secs",
        ),
        (
            "[policy]\nprobe_initial_backoff_secs = 18446744073709551\nprobe_max_backoff_secs = 18446744073709551\n",
            "policy.probe_initial_backoff_secs",
        ),
        (
            "[policy]\nprobe_windows = 4294967295\n",
            "policy.probe_windows",
        ),
    ] {
        let e = config::load_str(text, "c.toml").unwrap_err().to_string();
        assert!(e.contains(key), "{text:?}: {e}");
        assert!(e.contains("c.toml:"), "{text:?}: {e}");
    }
}

// ---------------------------------------------------------------------------------------
// 23.13: the status deadline is total.

#[test]
fn a_trickling_endpoint_cannot_hold_status_past_its_deadline() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let mut req = [0u8; 4096];
            let _ = s.read(&mut req);
            // One byte every 200 ms, for 20 s: every read succeeds within any per-read
            // timeout, the whole answer never does.
            for _ in 0..100 {
                if s.write_all(b"H").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    });
    let start = Instant::now();
    let r = mergetune_export::status::http_get(&addr, "/status", Duration::from_secs(1));
    let took = start.elapsed();
    assert!(r.is_err());
    assert!(took < Duration::from_secs(3), "held for {took:?}");
    assert!(r.unwrap_err().to_string().contains("within"), "says why");
}

// ---------------------------------------------------------------------------------------
// 22.8: check-config names every bad key, each with file:line:column.

#[test]
fn check_config_names_every_bad_key_with_its_place() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("m.toml");
    let text = "\
[daemon]
interval_ms = 1
bogus = 2
[policy]
enabeld = true
window_ticks = \"two\"
min_window_bios = 0
cost_profile = \"missing.toml\"
[nonsense]
x = 1
";
    std::fs::write(&cfg, text).unwrap();
    let e = config::load_file(&cfg).unwrap_err();
    let ConfigError::Many { errors, .. } = &e else {
        panic!("several errors expected: {e}");
    };
    let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    let p = cfg.display().to_string();
    for want in [
        format!("{p}:2:15: key `daemon.interval_ms`"),
        format!("{p}:3:1: unknown key `daemon.bogus`"),
        format!("{p}:5:1: unknown key `policy.enabeld`"),
        format!("{p}:6:16: key `policy.window_ticks`: \"two\" is a string, expected an integer"),
        format!("{p}:7:19: key `policy.min_window_bios`"),
        format!("{p}:8:16: key `policy.cost_profile`: cost profile"),
        format!("{p}:9:2: unknown key `nonsense`"),
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(&want)),
            "missing {want:?} in:\n{}",
            lines.join("\n")
        );
    }
    assert_eq!(lines.len(), 7, "{}", lines.join("\n"));
    // In the file's order, one line each, no flattened snippet.
    let positions: Vec<usize> = lines
        .iter()
        .map(|l| l[p.len() + 1..].split(':').next().unwrap().parse().unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] <= w[1]), "{positions:?}");
    for l in &lines {
        assert!(!l.contains('\n') && !l.contains(" | "), "{l}");
    }
    // The binary prints the same, and every one.
    let out = bin().arg("check-config").arg(&cfg).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 7, "{stderr}");
}

#[test]
fn a_syntax_error_is_placed_without_a_snippet() {
    let e = config::load_str("[policy]\nwindow_ticks = = 2\n", "c.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("c.toml:2:16: "), "{e}");
    assert!(!e.contains('|') && !e.contains('^'), "{e}");
}

// ---------------------------------------------------------------------------------------
// 23.13: a reload that changes only the cost profile says so in words.

use crate::logs::Logs;

#[test]
fn a_reload_of_the_cost_profile_alone_logs_the_new_prices_in_words() {
    use mergetune_daemon::adaptive::Daemon;
    use mergetune_sim::engine::Simulation;
    use mergetune_sim::scenario::Scenario;
    let sc = Scenario::default_scenario();
    let mut cfg = sc.daemon_config(&Default::default());
    cfg.policy.cost_profile = "measured-6.18".into();
    let mut sim = Simulation::new(&sc).unwrap();
    let mut d = Daemon::simulated(cfg.clone());
    let logs = Logs::default();
    logs.capture(|| {
        let mut t = 0;
        while t <= 3000 {
            sim.advance_to(t * 1_000_000);
            d.tick(t, &mut sim);
            t += 1000;
        }
        logs.clear();
        let mut new = cfg.clone();
        new.policy.cost_profile = "lkml-2008".into();
        d.reload(new);
        while t <= 6000 {
            sim.advance_to(t * 1_000_000);
            d.tick(t, &mut sim);
            t += 1000;
        }
    });
    let text = logs.text();
    let line = text
        .lines()
        .find(|l| l.contains("sda:") && l.contains("cost profile"))
        .unwrap_or_else(|| panic!("no word of the new prices:\n{text}"));
    assert!(
        !text.contains("Caps {") && !text.contains("Worth {"),
        "{text}"
    );
    assert!(
        !text.contains("scheduler now"),
        "the scheduler did not change:\n{text}"
    );
    assert!(line.contains("L2") && line.contains('%'), "{line}");
}

#[test]
fn simulate_prints_forged_scenario_and_device_names_escaped() {
    let d = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config/scenarios/default.toml"),
    )
    .unwrap();
    // TOML carries the escapes; the parsed names hold raw ESC and BEL.
    let evil = base
        .replace(
            "name = \"default\"",
            "name = \"default\\u001b]0;pwned\\u0007\"",
        )
        .replace("\"sda\"", "\"sda\\u001b[2J\"");
    assert_ne!(evil, base);
    let p = d.path().join("evil.toml");
    std::fs::write(&p, evil).unwrap();
    let out = bin().arg("simulate").arg(&p).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() {
        no_raw_escapes("simulate's report", &out.stdout);
        no_raw_escapes("simulate's log", &out.stderr);
        assert!(stdout.contains("default\\x1b]0;pwned"), "{stdout}");
    } else {
        // Refusing such names is as good, if it says why without echoing them raw.
        no_raw_escapes("simulate's error", &out.stderr);
    }
}

/// check-config's summary must say whether the slice tuner is on; it once did not.
#[test]
fn check_config_says_whether_the_slice_tuner_is_on() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("m.toml");
    std::fs::write(&cfg, "# defaults\n").unwrap();
    let r = mergetune::cli::check_config::check(&cfg, None);
    assert!(r.summary.contains("slice tuner off"), "{}", r.summary);
    std::fs::write(&cfg, "[slices]\nenabled = true\n").unwrap();
    let r = mergetune::cli::check_config::check(&cfg, None);
    assert!(r.summary.contains("slice tuner on"), "{}", r.summary);
}

/// `simulate --help` once suggested the daemon's own port for the simulator's
/// endpoint, where it would collide with a running service.
#[test]
fn simulate_help_does_not_suggest_the_daemons_port() {
    let out = bin().args(["simulate", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let line = help
        .lines()
        .skip_while(|l| !l.contains("--metrics-listen"))
        .take(4)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(line.contains("127.0.0.1:9726"), "{line}");
    assert!(!line.contains("e.g. 127.0.0.1:9725"), "{line}");
}

/// Bad timestamps once made rates out of nothing. One bio gave 1,000,000,000 bios/s, a
/// reversed trace 200,000,000,000, a clock that steps back "0.000 s traced"; a trace of
/// completions only said "every bio queued has size 0". Now: too short a span is no rate
/// and no advice, said; the span runs from the earliest to the latest timestamp whatever
/// the order of the lines (and a clock that steps back is noted); a trace without queue
/// events says that.
#[test]
fn advise_gives_no_rate_from_too_little_time_and_reads_a_reversed_clock_right() {
    let d = tempfile::tempdir().unwrap();
    let q = |t: f64, sector: u64| {
        format!("fio-1 [000] ..... {t:.6}: block_bio_queue: 8,0 R {sector} + 8 [fio]\n")
    };
    let advise = |name: &str, text: &str| {
        let p = d.path().join(name);
        std::fs::write(&p, text).unwrap();
        let out = crate::lab::lab()
            .args(["advise", "--json"])
            .arg(&p)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // One bio: no span, no rate.
    let (code, _, err) = advise("one.txt", &q(10.0, 0));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("too little time for a rate"), "{err}");
    assert!(!err.contains("bios/s"), "{err}");
    // 1,000 bios over 1 s, in reverse order: 1,000 bios/s, not 200,000,000,000.
    let reversed: String = (0..1000u64)
        .rev()
        .map(|i| q(10.0 + i as f64 / 999.0, i * 64))
        .collect();
    let (code, out, err) = advise("reversed.txt", &reversed);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rate = v["analysis"]["devices"][0]["bios_per_s"].as_f64().unwrap();
    assert!((rate - 1000.0).abs() < 1.0, "{rate}");
    assert!(out.contains("the clock steps back"), "{out}");
    // A clock that steps back to before the first line: the span is still 1 s.
    let mut stepped = q(10.5, 0);
    stepped.push_str(
        &(1..1000u64)
            .map(|i| {
                q(
                    10.0 + (i % 500) as f64 / 998.0 + if i >= 500 { 0.5 } else { 0.0 },
                    i * 64,
                )
            })
            .collect::<String>(),
    );
    let (code, out, err) = advise("stepped.txt", &stepped);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let span = v["analysis"]["devices"][0]["span_s"].as_f64().unwrap();
    assert!(span > 0.9, "{span}");
    // Completions only.
    let completes: String = (0..10u64)
        .map(|i| {
            format!(
                "fio-1 [000] ..... {:.6}: block_rq_complete: 8,0 R () {} + 8 [0]\n",
                10.0 + i as f64 / 10.0,
                i * 8
            )
        })
        .collect();
    let (code, _, err) = advise("completes.txt", &completes);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no block_bio_queue event"), "{err}");
    assert!(!err.contains("size 0"), "{err}");
}
