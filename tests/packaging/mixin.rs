//! The Prometheus project's own tools on what mergetune ships: `promtool check metrics` on
//! the live /metrics of a dry run against a fake sysfs/procfs tree (it must print nothing),
//! and `promtool check rules` / `promtool test rules` on config/mixin (every alert and
//! recording rule has a unit test there).
//!
//! promtool is Debian's `prometheus` package; `.ci/run` installs it. Without it these tests
//! say SKIP, except under CI (`CI` set), where a missing promtool is a failure.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn promtool() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("promtool"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "promtool not found under CI: .ci/run installs the prometheus package"
        );
        eprintln!("SKIP: promtool not found (apt-get install prometheus)");
    }
    found
}

fn mixin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/mixin")
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap();
    let text = crate::command::text(&out);
    (out.status.success(), text)
}

#[test]
fn promtool_checks_the_rules_and_alerts() {
    let Some(p) = promtool() else { return };
    let (ok, text) = run(Command::new(&p)
        .arg("check")
        .arg("rules")
        .arg(mixin().join("prometheus_rules.yaml"))
        .arg(mixin().join("prometheus_alerts.yaml")));
    assert!(ok, "{text}");
    assert!(text.contains("SUCCESS"), "{text}");
}

#[test]
fn promtool_unit_tests_of_every_alert_and_rule_pass() {
    let Some(p) = promtool() else { return };
    for t in ["tests/alerts_test.yaml", "tests/rules_test.yaml"] {
        let (ok, text) = run(Command::new(&p)
            .current_dir(mixin().join("tests"))
            .arg("test")
            .arg("rules")
            .arg(mixin().join(t)));
        assert!(ok, "{t}:\n{text}");
    }
    // Every alert and every recorded series is exercised by a test.
    let alerts = std::fs::read_to_string(mixin().join("prometheus_alerts.yaml")).unwrap();
    let rules = std::fs::read_to_string(mixin().join("prometheus_rules.yaml")).unwrap();
    let alert_tests = std::fs::read_to_string(mixin().join("tests/alerts_test.yaml")).unwrap();
    let rule_tests = std::fs::read_to_string(mixin().join("tests/rules_test.yaml")).unwrap();
    for name in alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert:"))
    {
        assert!(
            alert_tests.contains(&format!("alertname: {}", name.trim())),
            "alert {name} has no test"
        );
    }
    for name in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- record:"))
    {
        let name = name.trim();
        assert!(
            rule_tests.contains(&format!("expr: {name}\n")),
            "recorded series {name} has no test"
        );
    }
}

#[test]
fn every_alert_links_its_runbook_section_under_the_usual_annotation() {
    // `runbook_url` is the annotation Alertmanager templates and the mixins use; a section
    // that docs/metrics.md does not have is a dead link.
    let alerts = std::fs::read_to_string(mixin().join("prometheus_alerts.yaml")).unwrap();
    let runbook = crate::repo::text("docs/metrics.md");
    let names: Vec<&str> = alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert:"))
        .map(str::trim)
        .collect();
    let urls: Vec<&str> = alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("runbook_url:"))
        .map(|v| v.trim().trim_matches('"'))
        .collect();
    assert!(!names.is_empty());
    assert_eq!(urls.len(), names.len(), "one runbook_url per alert");
    assert!(
        !alerts.lines().any(|l| l.trim().starts_with("runbook:")),
        "`runbook:` is not the usual annotation"
    );
    for (name, url) in names.iter().zip(&urls) {
        assert_eq!(
            *url,
            format!("docs/metrics.md#{}", name.to_lowercase()),
            "{name}"
        );
        assert!(
            runbook.contains(&format!("\n### {name}\n")),
            "{name}: no section"
        );
    }
}

#[test]
fn the_flapping_rule_counts_the_series_the_daemon_exports_from_zero() {
    // Decision series first appear at 1, and `increase()` misses that step; so the rule
    // reads the daemon's count of level changes, exported at 0 from a device's first sight,
    // which leaves out what writes nothing (a device priced `not_worth_it` every minute is
    // not flapping):
    // tests/cli/metrics_exposition.rs pins the daemon's side.
    let rules = std::fs::read_to_string(mixin().join("prometheus_rules.yaml")).unwrap();
    let rule = rules
        .split("- record: ")
        .find(|r| r.starts_with("instance_device:mergetune_level_changes:increase1h"))
        .expect("the level changes rule");
    assert!(
        rule.contains("increase(mergetune_device_level_changes_total[1h])")
            && !rule.contains("mergetune_decisions_total"),
        "{rule}"
    );
    let alert_tests = std::fs::read_to_string(mixin().join("tests/alerts_test.yaml")).unwrap();
    let as_exported = alert_tests
        .split("- name: ")
        .find(|t| t.starts_with("device flapping, as the daemon exports it"))
        .expect("a flapping test with the daemon's shape");
    assert!(as_exported.contains("values: '_x5 0+"), "{as_exported}");
}

use crate::command::free_port;

/// The body of a 200 answer to `GET path` from `addr`.
fn get(addr: &str, path: &str) -> Option<String> {
    let buf = crate::command::http_get(addr, path)?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

#[test]
#[allow(clippy::too_many_lines)] // a test reads best as one story
fn promtool_finds_nothing_to_say_about_the_live_metrics() {
    let Some(p) = promtool() else { return };
    let t = tempfile::tempdir().unwrap();
    for (dev, nomerges) in [("sda", "0"), ("sdb", "1")] {
        let q = t.path().join("sys/block").join(dev).join("queue");
        std::fs::create_dir_all(q.join("iosched")).unwrap();
        std::fs::write(q.join("nomerges"), format!("{nomerges}\n")).unwrap();
        std::fs::write(q.join("scheduler"), "none [mq-deadline]\n").unwrap();
        std::fs::write(q.join("rotational"), "0\n").unwrap();
        std::fs::write(q.join("iosched/front_merges"), "1\n").unwrap();
    }
    std::fs::create_dir_all(t.path().join("proc")).unwrap();
    let diskstats = t.path().join("proc/diskstats");
    let write = |i: u64| {
        let text = format!(
            "   8 0 sda {} {} {} 10 {} {} {} 20 0 30 30\n   8 16 sdb 5 0 40 1 5 0 40 1 0 2 2\n",
            1000 * i,
            10 * i,
            8000 * i,
            1000 * i,
            900 * i,
            8000 * i
        );
        let tmp = diskstats.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &diskstats).unwrap();
    };
    write(1);
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = crate::command::on_tree(
        Command::new(env!("CARGO_BIN_EXE_mergetune"))
            .args(["-q", "run", "--dry-run", "--interval-ms", "100"])
            .args(["--config", "/dev/null", "--metrics-listen", &addr]),
        t.path(),
    )
    .stdout(Stdio::null())
    .spawn()
    .unwrap();
    // Traffic for a few windows, so that the per-device families have samples.
    let start = Instant::now();
    let mut i = 1;
    let text = loop {
        std::thread::sleep(Duration::from_millis(100));
        i += 1;
        write(i);
        if let Some(text) = get(&addr, "/metrics")
            && text.contains("mergetune_device_merge_ratio{")
        {
            break text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no per-device samples after 20 s"
        );
    };
    let _ = child.kill();
    let _ = child.wait();
    for family in [
        "mergetune_state_persisted 1",
        "mergetune_state_save_errors_total 0",
        "mergetune_tunable_read_errors_total 0",
        "mergetune_diskstats_resets_total 0",
        "mergetune_policy_max_changes_per_hour ",
        "mergetune_dry_run 1",
    ] {
        assert!(text.contains(family), "{family}: not in\n{text}");
    }
    let mut lint = Command::new(&p)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    lint.stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = lint.wait_with_output().unwrap();
    let said = crate::command::text(&out);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics:\n{said}\non\n{text}"
    );
}
