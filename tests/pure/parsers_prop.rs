//! Fuzz-style properties for every parser of outside input: /proc/diskstats and
//! stat lines, the record file, tracefs text, scenario, config and cost-profile TOML, and
//! the `/status` document a peer serves. Random bytes and random mutations of real inputs
//! (control characters among them) never panic; an error names the line or the key and
//! never quotes a file that is not what it should be; what is accepted is usable, and what
//! is printed from it holds no raw control character. Special files (a FIFO, /dev/zero, a
//! directory) named as any input are refused at once. Case counts are bounded so the file
//! runs in a few seconds in release. (state.json has its own file, tests/pure/state_fuzz.rs.)

use mergetune_kernel::diskstats::{DiskstatsHealth, MAX_WARNINGS_PER_READ, parse_diskstats};
use mergetune_kernel::diskstats::{parse_diskstats_line, parse_stat_fields};
use mergetune_logic::document::DocumentError;
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(name)).unwrap()
}

/// One mutation of a text: overwrite a byte, insert one, delete a span, or duplicate a
/// line; positions are fractions so they scale to any text.
#[derive(Debug, Clone)]
enum Mutation {
    Set(f64, u8),
    Insert(f64, u8),
    Delete(f64, usize),
    DupLine(f64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let byte = prop_oneof![
        any::<u8>(),
        Just(b'\n'),
        Just(b' '),
        Just(0xff),
        Just(b'9'),
        Just(b'-')
    ];
    prop_oneof![
        (0.0..1.0f64, byte.clone()).prop_map(|(p, b)| Mutation::Set(p, b)),
        (0.0..1.0f64, byte).prop_map(|(p, b)| Mutation::Insert(p, b)),
        (0.0..1.0f64, 1..40usize).prop_map(|(p, n)| Mutation::Delete(p, n)),
        (0.0..1.0f64).prop_map(Mutation::DupLine),
    ]
}

fn apply(text: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut v = text.to_vec();
    for m in muts {
        let at = |p: f64, len: usize| ((p * len as f64) as usize).min(len);
        match *m {
            Mutation::Set(p, b) if !v.is_empty() => {
                let i = at(p, v.len() - 1);
                v[i] = b;
            }
            Mutation::Insert(p, b) => {
                let i = at(p, v.len());
                v.insert(i, b);
            }
            Mutation::Delete(p, n) if !v.is_empty() => {
                let i = at(p, v.len() - 1);
                v.drain(i..(i + n).min(v.len()));
            }
            Mutation::DupLine(p) => {
                let lines: Vec<&[u8]> = v.split(|&c| c == b'\n').collect();
                let i = at(p, lines.len().saturating_sub(1));
                let mut out = Vec::with_capacity(v.len() * 2);
                for (k, l) in lines.iter().enumerate() {
                    out.extend_from_slice(l);
                    out.push(b'\n');
                    if k == i {
                        out.extend_from_slice(l);
                        out.push(b'\n');
                    }
                }
                v = out;
            }
            _ => {}
        }
    }
    v
}

fn non_blank_lines(b: &[u8]) -> usize {
    b.split(|&c| c == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .count()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Every non-blank line is a device, a named error or part of a duplicate, never lost
    /// and never a panic; names in `devices` are unique.
    #[test]
    fn diskstats_random_bytes_every_line_accounted(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let d = parse_diskstats(&bytes);
        let dup_lines: usize = d.duplicates.iter().map(|x| x.lines.len()).sum();
        prop_assert_eq!(d.devices.len() + d.errors.len() + dup_lines, non_blank_lines(&bytes));
        let total = bytes.split(|&c| c == b'\n').count();
        for e in &d.errors {
            prop_assert!(e.line_no >= 1 && e.line_no <= total);
            let prefix = format!("line {}:", e.line_no);
            prop_assert!(e.to_string().starts_with(&prefix), "{}", e);
            prop_assert!(e.line.len() <= mergetune_kernel::diskstats::MAX_QUOTED_BYTES + 3);
        }
        let mut names: Vec<&str> = d.devices.iter().map(|x| x.name.as_str()).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        prop_assert_eq!(names.len(), n);
        let _ = parse_stat_fields(&bytes);
        let _ = parse_diskstats_line(&bytes);
    }

    /// Mutating a real file costs only the lines touched: every untouched line whose name
    /// stays unique still parses to the same device.
    #[test]
    fn diskstats_mutations_cost_only_their_lines(muts in proptest::collection::vec(mutation(), 1..6)) {
        let text = fixture("tests/fixtures/diskstats_mixed_kernels.txt");
        let good = parse_diskstats(&text);
        let bytes = apply(text.as_bytes(), &muts);
        let d = parse_diskstats(&bytes);
        let lines: Vec<&[u8]> = bytes.split(|&c| c == b'\n').collect();
        let dup_names: Vec<&str> = d.duplicates.iter().map(|x| x.name.as_str()).collect();
        for dev in &good.devices {
            let intact = lines.iter().filter(|l| {
                parse_diskstats_line(l).is_ok_and(|p| p == *dev)
            }).count();
            if intact == 1 && !dup_names.contains(&dev.name.as_str()) {
                prop_assert!(d.devices.contains(dev), "{} lost", dev.name);
            }
        }
    }

    /// However reads go, one review says at most MAX_WARNINGS_PER_READ (+1 summing up the
    /// rest), and the same read again says nothing new.
    #[test]
    fn diskstats_health_says_each_problem_once(reads in proptest::collection::vec(proptest::collection::vec(mutation(), 0..4), 1..8)) {
        let text = fixture("tests/fixtures/diskstats_6.18_after_fio.txt");
        let mut h = DiskstatsHealth::new();
        for muts in reads {
            let d = parse_diskstats(&apply(text.as_bytes(), &muts));
            let r = h.review(&d);
            prop_assert!(r.warnings.len() <= MAX_WARNINGS_PER_READ + 1);
            prop_assert_eq!(r.problem, !d.errors.is_empty() || !d.duplicates.is_empty() || d.devices.is_empty());
            let again = h.review(&d);
            prop_assert!(again.warnings.is_empty() && again.cleared.is_empty(), "{:?}", again);
        }
    }
}

/// A record file of four ticks a second apart, each with `diskstats` and `devices`.
fn recording(diskstats: &str, devices: &[String]) -> String {
    let mut text = String::new();
    for t in 0..4 {
        let rec = mergetune_daemon::record::TickRecord {
            t_ms: t * 1000,
            diskstats: Some(diskstats.as_bytes().to_vec()),
            devices: Some(devices.to_vec()),
            ..Default::default()
        };
        text.push_str(&serde_json::to_string(&rec).unwrap());
        text.push('\n');
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The record file: random mutations of a real recording load, or fail naming the file
    /// and (for a bad line) a line that exists.
    #[test]
    fn record_file_mutations_load_or_name_the_line(muts in proptest::collection::vec(mutation(), 1..5)) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rec.jsonl");
        let ds = fixture("tests/fixtures/diskstats_6.18_vda_loop.txt");
        let text = recording(&ds, &["vda".into(), "loop0".into()]);
        let bytes = apply(text.as_bytes(), &muts);
        std::fs::write(&p, &bytes).unwrap();
        match mergetune_daemon::record::load(&p) {
            Ok(ticks) => {
                prop_assert!(!ticks.is_empty());
                prop_assert!(ticks.windows(2).all(|w| w[0].t_ms <= w[1].t_ms));
                // What loads replays without a panic.
                let mut d = mergetune_daemon::adaptive::Daemon::simulated(Default::default());
                let _ = mergetune_daemon::record::replay(ticks, &mut d);
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains("rec.jsonl"), "{}", msg);
                if let mergetune_daemon::record::RecordError::Parse { line, .. } = e {
                    let lines = bytes.split(|&c| c == b'\n').count();
                    prop_assert!(line >= 1 && line <= lines, "line {} of {}", line, lines);
                }
            }
        }
    }

    /// tracefs text: random bytes and mutated real traces go through the streaming reader,
    /// the line parser and the whole-file parser without a panic; errors name a line.
    #[test]
    fn trace_text_never_panics_errors_name_a_line(
        muts in proptest::collection::vec(mutation(), 1..8),
        noise in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let text = fixture("tests/fixtures/trace_seq_batched_write.txt");
        let head: String = text.lines().take(80).collect::<Vec<_>>().join("\n");
        let mut bytes = apply(head.as_bytes(), &muts);
        bytes.extend_from_slice(&noise);
        let mut a = mergetune_lab::advise::Analyzer::new(None);
        a.read_from(&bytes[..]).unwrap();
        let lines = bytes.split(|&c| c == b'\n').count();
        for b in &a.bad_examples {
            prop_assert!(b.line >= 1 && b.line <= lines);
        }
        let an = a.finish(&Default::default());
        for d in &an.devices {
            prop_assert!(d.bios > 0, "a report only for a device with usable bios");
        }
        let s = String::from_utf8_lossy(&bytes);
        for l in s.lines() {
            let _ = mergetune_kernel::trace::parse_event(l);
        }
        if let Err(e) = mergetune_kernel::trace::parse_trace(&s, 10_000) {
            prop_assert!(e.line >= 1 && e.line <= lines, "{}", e);
        }
    }
}

/// A TOML value to put in place of a number: extremes, non-numbers, wrong types.
fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("nan".to_string()),
        Just("inf".to_string()),
        Just("-inf".to_string()),
        Just("1e-300".to_string()),
        Just("1e300".to_string()),
        Just("0".to_string()),
        Just("0.0".to_string()),
        Just("-1".to_string()),
        Just("9223372036854775807".to_string()),
        Just("\"x\"".to_string()),
        Just("[]".to_string()),
        (0u64..100_000).prop_map(|v| v.to_string()),
        (-1e9..1e9f64).prop_map(|v| format!("{v:?}")),
    ]
}

/// Replaces the value of the `n`-th `key = value` line (modulo their number).
fn replace_value(text: &str, n: usize, value: &str) -> (String, String) {
    let lines: Vec<&str> = text.lines().collect();
    let keyed: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim_start();
            !t.starts_with('#') && !t.starts_with('[') && t.contains(" = ")
        })
        .map(|(i, _)| i)
        .collect();
    let i = keyed[n % keyed.len()];
    let key = lines[i].split(" = ").next().unwrap().trim().to_string();
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    out[i] = format!("{key} = {value}");
    (out.join("\n") + "\n", key)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Scenario TOML: any value in place of any key gives a scenario that builds and runs
    /// its first 10 ms, or an error naming the key (or the TOML position).
    #[test]
    fn scenario_values_are_accepted_and_run_or_named(n in 0usize..1000, value in toml_value()) {
        let base = fixture("config/scenarios/seed002_dm_stripe_oltp.toml");
        let (text, key) = replace_value(&base, n, &value);
        match mergetune_sim::scenario::Scenario::from_toml_str(&text, "s.toml", None) {
            Ok(sc) => {
                let mut sim = mergetune_sim::engine::Simulation::new(&sc).unwrap();
                sim.advance_to(10_000_000);
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.starts_with("s.toml: "), "{}", msg);
                match e {
                    mergetune_sim::scenario::ScenarioError::Document(DocumentError::Invalid { key: k, .. }) => {
                        // The key, the phases' total, or what refers to a renamed device.
                        let refers = key == "name" && (k.ends_with(".device") || k.ends_with(".members"));
                        prop_assert!(k.contains(&key) || k == "phase" || refers, "{} for {}", k, key);
                    }
                    mergetune_sim::scenario::ScenarioError::Document(DocumentError::Parse { message, .. }) => {
                        prop_assert!(message.contains("line") || message.contains(&key), "{}", message);
                    }
                    other => prop_assert!(false, "{}", other),
                }
            }
        }
    }

    /// Config TOML, the same way: accepted configs validate and drive a daemon tick; errors
    /// name the key or the position.
    #[test]
    fn config_values_are_accepted_or_named(n in 0usize..1000, value in toml_value()) {
        // Every key set (the shipped file has them all commented out).
        let base = crate::config_example::uncommented(&fixture("config/mergetune.toml"));
        let (text, key) = replace_value(&base, n, &value);
        match mergetune_logic::config::load_str(&text, "c.toml") {
            Ok(cfg) => {
                prop_assert!(cfg.validate("c.toml").is_ok());
                let mut sim = mergetune_sim::engine::Simulation::new(&mergetune_sim::scenario::Scenario::default_scenario()).unwrap();
                let mut d = mergetune_daemon::adaptive::Daemon::simulated(cfg);
                let _ = d.tick(0, &mut sim);
            }
            Err(e) => {
                let msg = e.to_string();
                // `c.toml:LINE:COLUMN: ...`, or `c.toml: ...` for what has no place.
                prop_assert!(msg.starts_with("c.toml:"), "{}", msg);
                match e {
                    mergetune_logic::config::ConfigError::Document(DocumentError::Invalid { key: k, .. }) => {
                        // The key itself, or (a rule between two keys) its partner, naming it.
                        prop_assert!(k.contains(&key) || msg.contains(&key), "{} for {}", msg, key);
                    }
                    // A syntax error: placed at `c.toml:LINE:COLUMN`.
                    mergetune_logic::config::ConfigError::Document(DocumentError::Parse { origin, message }) => {
                        prop_assert!(origin.starts_with("c.toml:") && origin.len() > "c.toml:".len(), "{} {}", origin, message);
                    }
                    // Several keys at once (a value and a rule relating it to another): the
                    // changed key is among them.
                    mergetune_logic::config::ConfigError::Many { .. } => {
                        prop_assert!(msg.contains(&key), "{} for {}", msg, key);
                    }
                    other => prop_assert!(false, "{}", other),
                }
            }
        }
    }
}

/// A reader of `n` bytes of `b` with no newline, made on the fly.
struct Endless {
    left: u64,
    byte: u8,
}

impl std::io::Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.left) as usize;
        buf[..n].fill(self.byte);
        self.left -= n as u64;
        Ok(n)
    }
}

#[test]
fn a_50_mb_line_is_read_in_bounded_memory() {
    use mergetune_kernel::lines::{Line, read_line_bounded};
    let mut r = std::io::BufReader::new(Endless {
        left: 50 << 20,
        byte: b'x',
    });
    let mut buf = Vec::new();
    let max = 64 * 1024;
    assert_eq!(
        read_line_bounded(&mut r, &mut buf, max).unwrap(),
        Line::TooLong
    );
    assert_eq!(buf.len(), max);
    assert!(buf.capacity() <= 2 * max, "capacity {}", buf.capacity());
    assert_eq!(read_line_bounded(&mut r, &mut buf, max).unwrap(), Line::Eof);
    // advise takes such a "trace" as one bad line.
    let mut a = mergetune_lab::advise::Analyzer::new(None);
    a.read_from(std::io::BufReader::new(Endless {
        left: 50 << 20,
        byte: b'x',
    }))
    .unwrap();
    assert_eq!((a.lines, a.bad_lines), (1, 1));
    assert!(a.bad_examples[0].message.contains("longer than"));
}

#[test]
fn a_record_line_over_the_bound_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rec.jsonl");
    let mut text = String::from("{\"t_ms\": 0}\n{\"t_ms\": 1, \"diskstats\": \"");
    text.push_str(&"8 0 sda 1 2 3 4 5 6 7 8 9 10 11\\n".repeat(1000));
    text.push_str("\"}\n");
    std::fs::write(&p, &text).unwrap();
    let e = mergetune_daemon::record::load_bounded(&p, 4096)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rec.jsonl") && e.contains("line 2") && e.contains("longer than"),
        "{e}"
    );
    assert_eq!(mergetune_daemon::record::load(&p).unwrap().len(), 2);
}

/// A mutation that plants a control character: a terminal escape that a printed name or
/// value must not pass through to the operator's terminal.
fn control_mutation() -> impl Strategy<Value = Mutation> {
    let ctl = prop_oneof![
        Just(0x1bu8),
        Just(0x07),
        Just(b'\r'),
        Just(0x9b),
        Just(0x00),
        Just(0x7f)
    ];
    prop_oneof![
        (0.0..1.0f64, ctl.clone()).prop_map(|(p, b)| Mutation::Insert(p, b)),
        (0.0..1.0f64, ctl).prop_map(|(p, b)| Mutation::Set(p, b)),
    ]
}

fn raw_controls(s: &str) -> bool {
    s.chars().any(|c| c.is_control() && c != '\n')
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The cost profile TOML, read as a file: random mutations (control characters among
    /// them) load as a valid profile, or fail naming the file; a file that is not TOML is
    /// placed by line and column, and no line of it reaches the message.
    #[test]
    fn profile_file_mutations_load_or_are_placed_never_quoted(
        muts in proptest::collection::vec(prop_oneof![mutation(), control_mutation()], 1..6),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("prof.toml");
        let base = mergetune_logic::pricing::profile::LKML_2008;
        let bytes = apply(base.as_bytes(), &muts);
        std::fs::write(&p, &bytes).unwrap();
        let spec = p.display().to_string();
        match mergetune_logic::pricing::profile::resolve(&spec) {
            Ok(prof) => prop_assert!(prof.validate().is_ok()),
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains("prof.toml"), "{}", msg);
                prop_assert!(!raw_controls(&msg), "{:?}", msg);
                if let mergetune_logic::pricing::profile::ProfileError::Syntax { line, column, .. } = e {
                    let text = String::from_utf8_lossy(&bytes);
                    prop_assert!(line >= 1 && line <= text.lines().count() + 1, "line {}", line);
                    prop_assert!(column >= 1);
                    // No line of the file, beyond a few characters, is echoed.
                    for l in text.lines().map(str::trim).filter(|l| l.len() > 12) {
                        prop_assert!(!msg.contains(l), "quotes {:?}: {}", l, msg);
                    }
                }
            }
        }
    }

    /// The `/status` document from a peer: random mutations of a real one (control
    /// characters among them) decode or are refused; what decodes renders a table with no
    /// raw control character and one line per device.
    #[test]
    fn status_document_mutations_render_without_raw_controls(
        muts in proptest::collection::vec(prop_oneof![mutation(), control_mutation()], 1..6),
        name_ctl in proptest::collection::vec(0u8..0x20, 0..4),
    ) {
        use mergetune_export::status::{DeviceStatus, StatusSnapshot};
        use mergetune_logic::devices::Management;
        let mut name = String::from("sda");
        name.extend(name_ctl.iter().map(|&b| b as char));
        let mut dev = DeviceStatus::new(&name, Management::Managed);
        dev.last_reason = "window still open".into();
        let doc = StatusSnapshot {
            version: "0.1.0".into(),
            devices: vec![dev, DeviceStatus::new("loop0", Management::Excluded("loop device".into()))],
            ..Default::default()
        };
        let bytes = apply(&serde_json::to_vec(&doc).unwrap(), &muts);
        if let Ok(s) = serde_json::from_slice::<StatusSnapshot>(&bytes) {
            let t = mergetune_export::table::format_status(&s);
            prop_assert!(!raw_controls(&t), "{:?}", t);
            prop_assert_eq!(t.lines().count(), 2 + s.devices.len(), "{}", t);
        }
    }

    /// The record file with control characters planted, raw (which JSON refuses) and
    /// escaped in a device's name (which JSON carries): it loads or fails naming the file,
    /// and what loads replays into a table with no raw control character, the name shown
    /// escaped.
    #[test]
    fn record_file_with_control_characters_replays_to_a_clean_table(
        muts in proptest::collection::vec(control_mutation(), 0..3),
        name_ctl in proptest::collection::vec(prop_oneof![Just('\x1b'), Just('\x07'), Just('\u{9b}'), Just('\x7f')], 1..4),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rec.jsonl");
        let mut name = String::from("vda");
        name.extend(name_ctl);
        let ds = fixture("tests/fixtures/diskstats_6.18_vda_loop.txt").replace(" vda ", &format!(" {name} "));
        let text = recording(&ds, &[name.clone(), "loop0".into()]);
        let bytes = apply(text.as_bytes(), &muts);
        std::fs::write(&p, &bytes).unwrap();
        match mergetune_daemon::record::load(&p) {
            Ok(ticks) => {
                let end = ticks.last().map_or(0, |t| t.t_ms);
                let mut d = mergetune_daemon::adaptive::Daemon::simulated(Default::default());
                let decisions = mergetune_daemon::record::replay(ticks, &mut d);
                let status = mergetune_export::status::StatusSnapshot::of(
                    &d.snapshot(),
                    mergetune_daemon::snapshot::TickTiming { now_ms: end, ..Default::default() },
                    0.0,
                );
                let t = mergetune_export::table::render(&status.devices);
                prop_assert!(!raw_controls(&t), "{:?}", t);
                if muts.is_empty() {
                    let shown = mergetune_logic::printable::printable(&name).into_owned();
                    prop_assert!(t.contains(&shown), "{} not in {}", shown, t);
                }
                for dec in &decisions {
                    let shown = mergetune_logic::printable::printable(&dec.device);
                    prop_assert!(!raw_controls(&shown));
                }
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains("rec.jsonl"), "{}", msg);
            }
        }
    }
}

fn mkfifo(p: &Path) {
    rustix::fs::mkfifoat(rustix::fs::CWD, p, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
}

/// Runs `f` on another thread; panics when it has not returned within 10 s (it blocked).
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what} blocked"))
}

#[test]
#[allow(clippy::too_many_lines)] // a test reads best as one story
fn every_reader_of_a_named_file_refuses_a_fifo_dev_zero_and_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    for p in [fifo.clone(), "/dev/zero".into(), dir.path().to_path_buf()] {
        let shown = p.display().to_string();
        // `read` of `p` (on another thread, in case it blocks) names `p` and refuses it.
        let refused = |what: &str, read: fn(PathBuf) -> String| {
            let q = p.clone();
            let msg = bounded(what, move || read(q));
            assert!(
                msg.contains(&shown) && msg.contains("not a regular file"),
                "{what} on {shown}: {msg}"
            );
        };
        refused("config", |q| {
            mergetune_logic::config::load_file(&q)
                .unwrap_err()
                .to_string()
        });
        refused("profile", |q| {
            mergetune_logic::pricing::profile::resolve(&q.display().to_string())
                .unwrap_err()
                .to_string()
        });
        refused("scenario", |q| {
            mergetune_sim::scenario::Scenario::load_file(&q)
                .unwrap_err()
                .to_string()
        });
        refused("record", |q| {
            mergetune_daemon::record::load(&q).unwrap_err().to_string()
        });
        refused("trace", |q| {
            format!(
                "{:#}",
                mergetune_lab::advise::analyze_file(&q, None, &Default::default()).unwrap_err()
            )
        });
        if p.starts_with("/dev") && !rustix::process::geteuid().is_root() {
            // Making a character device to stand as state.json needs root (CI has it).
            continue;
        }
        refused("state file", |q| {
            use mergetune_daemon::state::StateStore;
            // The store reads `<dir>/state.json`, never through a link: make a file of
            // `p`'s kind under that name (a link to it is refused as a link).
            let d = tempfile::tempdir().unwrap();
            let at = d.path().join("state.json");
            let meta = std::fs::metadata(&q).unwrap();
            use std::os::unix::fs::{FileTypeExt, MetadataExt};
            if meta.is_dir() {
                std::fs::create_dir(&at).unwrap();
            } else if meta.file_type().is_fifo() {
                mkfifo(&at);
            } else {
                use rustix::fs::{CWD, FileType, Mode, mknodat};
                mknodat(
                    CWD,
                    &at,
                    FileType::CharacterDevice,
                    Mode::from_raw_mode(0o600),
                    meta.rdev(),
                )
                .expect("mknod of a character device");
            }
            let e = mergetune_daemon::state::FileStore::new(d.path())
                .load()
                .map(|_| ())
                .unwrap_err()
                .to_string();
            // The message names the state file; the link's target is what was refused.
            e.replace(
                &d.path().join("state.json").display().to_string(),
                &q.display().to_string(),
            )
        });
    }
}

/// A diskstats line of a device whose I/O counters only grow.
fn diskstats_line(ios: [u64; 6], times: [u64; 4]) -> String {
    let [rc, rm, rs, wc, wm, ws] = ios;
    let [rms, wms, io, wio] = times;
    format!("7 0 loop0 {rc} {rm} {rs} {rms} {wc} {wm} {ws} {wms} 0 {io} {wio} 0 0 0 0 0 0")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A reset-free series (ios, merges and sectors only grow) whose time fields step back
    /// at random (as 6.12's rd_ms and time_in_queue do) never restarts a window and never
    /// loses a tick's bios: every tick is a delta, and the deltas add up to the series'
    /// growth. A real reset (the counts drop) still is one.
    #[test]
    fn time_fields_going_backwards_never_restart_a_window(
        steps in proptest::collection::vec(
            (proptest::array::uniform6(0u64..5000), proptest::array::uniform4(-3000i64..3000)),
            1..40,
        )
    ) {
        use mergetune_kernel::diskstats::parse_diskstats_line;
        use mergetune_logic::sampler::{Delta, Sampler};
        let mut ios = [1_000u64; 6];
        let mut times = [1_000_000u64; 4];
        let mut sampler = Sampler::new();
        let first = parse_diskstats_line(&diskstats_line(ios, times)).unwrap();
        prop_assert_eq!(&sampler.observe(&[first]).deltas, &[Delta::First]);
        let start = ios;
        let mut bios = 0u64;
        for (grow, dt) in &steps {
            for (v, g) in ios.iter_mut().zip(grow) {
                *v += g;
            }
            for (t, d) in times.iter_mut().zip(dt) {
                *t = t.saturating_add_signed(*d);
            }
            let line = parse_diskstats_line(&diskstats_line(ios, times)).unwrap();
            let set = sampler.observe(&[line]);
            match set.deltas[0] {
                Delta::Counters(c) => bios += c.bios(),
                other => prop_assert!(false, "{:?} at {:?} / {:?}", other, ios, times),
            }
        }
        let grown = (ios[0] - start[0]) + (ios[1] - start[1]) + (ios[3] - start[3]) + (ios[4] - start[4]);
        prop_assert_eq!(bios, grown);
        // The device re-added: its counts start again from near zero.
        let reset = parse_diskstats_line(&diskstats_line([1; 6], times)).unwrap();
        prop_assert_eq!(&sampler.observe(&[reset]).deltas, &[Delta::Reset]);
    }
}
