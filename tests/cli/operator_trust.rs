//! What the operator is told matches what happens: simulated and replayed output never
//! looks live, the status header counts ticks without claiming their interval, the
//! completions offer only what `--help` shows, the startup log names the tuners that are
//! on, `--help` says what is changed by default, and machine-readable modes stay
//! machine-readable.

use crate::command::succeeded;
use mergetune_export::status::StatusSnapshot;
use mergetune_export::table::format_status;
use mergetune_logic::config::Config;
use mergetune_sim::scenario::Scenario;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mergetune"))
}

/// A recording of the daemon on the embedded default scenario (priced in the 2008 figures,
/// so that it decides something), and the config it ran with.
fn recording(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let sc = Scenario::default_scenario();
    let cfg = sc.daemon_config(&Config::default());
    let path = dir.join("rec.jsonl");
    crate::scenarios::record(&sc, cfg.clone(), &path, 60_000);
    let conf = dir.join("c.toml");
    std::fs::write(
        &conf,
        format!("[policy]\ncost_profile = {:?}\n", cfg.policy.cost_profile),
    )
    .unwrap();
    (path, conf)
}

#[test]
fn replayed_decisions_are_logged_in_the_recordings_time_not_the_wall_clock() {
    let dir = tempfile::tempdir().unwrap();
    let (rec, conf) = recording(dir.path());
    // The replay's stderr (its log) in `format`, once it has exited 0.
    let replay_log = |format: &str| {
        let o = succeeded(
            bin()
                .args(["--log-format", format, "replay"])
                .arg(&rec)
                .arg("--config")
                .arg(&conf),
        );
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = replay_log("text");
    crate::logs::nomerges_lines_marked(&err, "[replay ");
    // JSON carries the recording's time too.
    let err = replay_log("json");
    let line = err
        .lines()
        .find(|l| l.contains("queue/nomerges"))
        .unwrap_or_else(|| panic!("{err}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert!(v["replay_time_s"].is_string(), "{line}");
}

#[test]
fn status_of_a_simulator_says_simulated_first() {
    let s = StatusSnapshot {
        simulated: true,
        ..StatusSnapshot::default()
    };
    let text = format_status(&s);
    assert!(text.starts_with("SIMULATED: "), "{text}");
    let live = format_status(&StatusSnapshot::default());
    assert!(!live.contains("SIMULATED"), "{live}");
}

#[test]
fn the_status_header_does_not_claim_every_tick_took_the_interval() {
    // At L3 the daemon ticks every l3_watch_interval_ms (50 ms): "N ticks of 1000 ms" was
    // false while a device was watched.
    let s = StatusSnapshot {
        ticks: 124,
        interval_ms: 1000,
        ..StatusSnapshot::default()
    };
    let text = format_status(&s);
    assert!(!text.contains("ticks of"), "{text}");
    assert!(text.contains("124 ticks, interval 1000 ms"), "{text}");
}

#[test]
fn completions_offer_only_what_help_shows() {
    let d = tempfile::tempdir().unwrap();
    succeeded(bin().args(["generate", "completions"]).arg(d.path()));
    for f in ["mergetune.bash", "_mergetune", "mergetune.fish"] {
        let s = std::fs::read_to_string(d.path().join(f)).unwrap();
        assert!(!s.contains("generate"), "{f} offers the hidden generate");
        assert!(s.contains("check-config") && s.contains("dry-run"), "{f}");
    }
    // Per subcommand, bash offers exactly the flags of its --help (run and restore hide
    // their test roots, --sysfs-root and --procfs-root).
    let bash = std::fs::read_to_string(d.path().join("mergetune.bash")).unwrap();
    for sub in ["run", "restore", "replay", "status", "simulate"] {
        let case = format!("mergetune__subcmd__{sub})\n");
        let at = bash.find(&case).unwrap_or_else(|| panic!("no {sub} case"));
        let opts = bash[at..]
            .lines()
            .find_map(|l| l.trim().strip_prefix("opts=\""))
            .unwrap()
            .trim_end_matches('"');
        let help = String::from_utf8(bin().args([sub, "--help"]).output().unwrap().stdout).unwrap();
        for flag in opts.split_whitespace().filter(|o| o.starts_with("--")) {
            // The flag as a whole word of the help (not the start of a longer one).
            let shown = help.match_indices(flag).any(|(i, _)| {
                help[i + flag.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
            });
            assert!(
                shown,
                "{sub}: bash offers {flag}, which --help does not show"
            );
        }
    }
    // `simulate --policy` takes off|static:N|adaptive, not a file name.
    let bash = std::fs::read_to_string(d.path().join("mergetune.bash")).unwrap();
    let at = bash.find("--policy)").expect("a --policy case in bash");
    let case = &bash[at..at + bash[at..].find(";;").unwrap()];
    assert!(!case.contains("compgen -f"), "{case}");
}

#[test]
fn the_man_page_names_the_docs_where_make_install_puts_them() {
    let d = tempfile::tempdir().unwrap();
    let page = |doc_dir: Option<&str>| {
        let mut c = bin();
        c.args(["generate", "man"]);
        if let Some(dd) = doc_dir {
            c.args(["--doc-dir", dd]);
        }
        let out = d.path().join(doc_dir.map_or("default", |_| "given"));
        assert!(c.arg(&out).status().unwrap().success());
        std::fs::read_to_string(out.join("mergetune.8")).unwrap()
    };
    // `make install`'s default PREFIX is /usr/local (roff escapes the hyphens).
    let default = page(None);
    assert!(
        default.contains("/usr/local/share/doc/mergetune/operator.md"),
        "{default}"
    );
    assert!(!default.contains("/usr/share/doc"), "{default}");
    let given = page(Some("/usr/share/doc/mergetune"));
    assert!(
        given.contains("/usr/share/doc/mergetune/operator.md"),
        "{given}"
    );
    assert!(given.contains("/usr/share/doc/mergetune/mergetune.toml.example"));
}

#[test]
fn help_and_the_startup_log_say_what_is_changed_by_default() {
    let o = bin().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for want in [
        "front_merges",
        "slice tuner",
        "off by",
        "default",
        "writes_starved",
    ] {
        assert!(help.contains(want), "--help lacks {want:?}: {help}");
    }
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("sys/block")).unwrap();
    std::fs::create_dir_all(t.path().join("proc")).unwrap();
    std::fs::write(t.path().join("proc/diskstats"), "").unwrap();
    let run = |config: &str| {
        let o = crate::command::dry_run_once(t.path(), config, &[]);
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let log = run("# built-in defaults\n");
    let tuners = log
        .lines()
        .find(|l| l.contains("tuners:"))
        .unwrap_or_else(|| panic!("no tuners line: {log}"));
    assert!(tuners.contains("merge ladder on"), "{tuners}");
    assert!(tuners.contains("slice tuner off"), "{tuners}");
    let log = run("[slices]\nenabled = true\n");
    let tuners = log.lines().find(|l| l.contains("tuners:")).unwrap();
    assert!(tuners.contains("slice tuner on"), "{tuners}");
}

#[test]
fn json_logging_keeps_every_stderr_line_json() {
    let o = succeeded(bin().args(["--log-format", "json", "simulate"]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("wall time"), "{err}");
    for l in err.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            serde_json::from_str::<serde_json::Value>(l).is_ok(),
            "not JSON: {l}"
        );
    }
}

#[test]
fn status_json_without_a_daemon_still_prints_a_document() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = bin()
        .args(["status", "--json", "--addr"])
        .arg(format!("127.0.0.1:{port}"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&o.stdout)));
    assert_eq!(v["running"], false);
}

#[test]
fn a_typo_is_not_pointed_at_the_long_root_only_calibrate() {
    let o = crate::lab::lab().arg("frobnicate").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unrecognized subcommand 'frobnicate'"),
        "{err}"
    );
    assert!(!err.contains("calibrate"), "{err}");
    // Other suggestions stay: they are cheap to follow.
    let o = crate::lab::lab().arg("advis").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("'advise'"), "{err}");
}

#[test]
fn one_window_is_said_in_the_singular_in_reasons() {
    // probe_windows = 1 by default: "for 1 windows" was printed.
    let o = succeeded(bin().args(["--log-format", "text", "simulate"]));
    let all = crate::command::text(&o);
    assert!(!all.contains(" 1 windows"), "{all}");
    assert!(!all.contains(" 1 busy windows"), "{all}");
}
