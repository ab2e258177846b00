//! The Grafana dashboard (config/grafana/mergetune.json) and the mixin's rules and alerts
//! (config/mixin/) query only metrics the daemon exports or the mixin records, the dashboard
//! has host and device variables and a fleet row on the recorded series, and every panel has
//! a query. (promtool's own checks of the rules are in tests/packaging/mixin.rs.)

use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::snapshot::TickTiming;
use mergetune_export::metrics::Metrics;
use mergetune_kernel::blockfs::RealFs;
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::Config;
use mergetune_logic::decision::Decision;
use mergetune_logic::decision::{Applied, Change, DecisionKind};
use serde_json::Value;
use std::collections::BTreeSet;

fn dashboard() -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/grafana/mergetune.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A scrape of a daemon with one busy managed device and one decision: every family has
/// a sample (the registry leaves empty families out).
fn scrape() -> String {
    // Its diskstats line is replaced before each tick below.
    let t = crate::command::one_disk_tree();
    let mut fs = RealFs::new(t.path().join("sys"), t.path().join("proc"));
    let mut cfg = Config::default();
    cfg.policy.window_ticks = 1;
    let mut d = Daemon::simulated(cfg);
    let m = Metrics::new();
    for i in 0..3u64 {
        std::fs::write(
            t.path().join("proc/diskstats"),
            format!(
                "   8 0 sda {} {} 0 0 {} {} 0 0 0 0 0\n",
                1000 * i,
                100 * i,
                1000 * i,
                10 * i
            ),
        )
        .unwrap();
        let now = i * 1000;
        let mut decisions = d.tick(now, &mut fs);
        decisions.push(Decision {
            at_ms: now,
            device: "sda".into(),
            kind: DecisionKind::Probe,
            changes: vec![Change {
                tunable: Tunable::Nomerges,
                from: "0".into(),
                to: "0".into(),
            }],
            reason: "test".into(),
            applied: Applied::Yes,
        });
        m.update(
            &d,
            &decisions,
            TickTiming {
                now_ms: now,
                duration_seconds: 0.001,
                lag_seconds: 0.0,
            },
        );
    }
    m.config_reload(true);
    String::from_utf8(m.render().to_vec()).unwrap()
}

/// Every series name a scrape can contain: the TYPE names, plus a histogram's
/// `_bucket`/`_sum`/`_count`.
fn exported() -> BTreeSet<String> {
    let text = scrape();
    let mut names = BTreeSet::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap();
            names.insert(name.to_string());
            if ty == "histogram" {
                for s in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{s}"));
                }
            }
        }
    }
    names
}

/// Every identifier of `expr` that names a mergetune series: `mergetune_...`, or a recorded
/// `level:mergetune_...:ops` (identifiers are `[A-Za-z0-9_:]+`; label values in quotes are
/// skipped).
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_quotes = false;
    let mut word = String::new();
    let mut flush = |w: &mut String| {
        if w.contains("mergetune_") {
            out.push(std::mem::take(w));
        }
        w.clear();
    };
    for c in expr.chars() {
        if c == '"' {
            in_quotes = !in_quotes;
            flush(&mut word);
        } else if !in_quotes && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            word.push(c);
        } else {
            flush(&mut word);
        }
    }
    flush(&mut word);
    out
}

fn mixin_file(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/mixin")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// (record or alert name, expr) of every rule in a rules file of the mixin's own layout:
/// `- record: NAME` or `- alert: NAME`, then `expr: ONE LINE` or `expr: |` and a more
/// indented block.
fn rules(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut name: Option<String> = None;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if let Some(n) = t
            .strip_prefix("- record:")
            .or_else(|| t.strip_prefix("- alert:"))
        {
            name = Some(n.trim().to_string());
        } else if let Some(e) = t.strip_prefix("expr:") {
            let indent = line.len() - t.len();
            let mut expr = e.trim().to_string();
            if expr == "|" {
                expr.clear();
                while let Some(next) = lines.peek() {
                    let nt = next.trim_start();
                    if !nt.is_empty() && next.len() - nt.len() <= indent {
                        break;
                    }
                    expr.push_str(nt);
                    expr.push('\n');
                    lines.next();
                }
            }
            let n = name.take().expect("expr without a record or alert name");
            out.push((n, expr));
        }
    }
    out
}

/// The series the mixin records.
fn recorded() -> BTreeSet<String> {
    rules(&mixin_file("prometheus_rules.yaml"))
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

#[test]
fn rules_and_alerts_name_only_exported_or_recorded_series() {
    let known = exported();
    let recorded = recorded();
    assert!(recorded.len() >= 10, "{recorded:?}");
    for file in ["prometheus_rules.yaml", "prometheus_alerts.yaml"] {
        let rs = rules(&mixin_file(file));
        assert!(rs.len() >= 8, "{file}: {} rules", rs.len());
        for (name, expr) in rs {
            let names = metric_names(&expr);
            // Prometheus' own `up` is the one other series an alert may use.
            assert!(
                !names.is_empty() || expr.starts_with("up{"),
                "{file} {name}: {expr:?} names no mergetune series"
            );
            for n in names {
                assert!(
                    known.contains(&n) || recorded.contains(&n),
                    "{file} {name}: {n} is neither exported nor recorded (expr {expr:?})"
                );
            }
        }
    }
    // The alerts the fleet docs promise.
    let alerts: BTreeSet<String> = rules(&mixin_file("prometheus_alerts.yaml"))
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for a in [
        "MergetuneDown",
        "MergetuneNotTicking",
        "MergetuneTickLag",
        "MergetuneSysfsWriteErrors",
        "MergetuneStateNotPersisted",
        "MergetuneDeviceFlapping",
        "MergetuneMergingOffWhileItPays",
        "MergetuneConfigReloadFailed",
    ] {
        assert!(alerts.contains(a), "no alert {a}: {alerts:?}");
    }
}

#[test]
fn the_mixin_ships_the_same_dashboard() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let a = std::fs::read(root.join("config/mixin/dashboards_out/mergetune.json")).unwrap();
    let b = std::fs::read(root.join("config/grafana/mergetune.json")).unwrap();
    assert!(
        a == b,
        "config/mixin/dashboards_out/mergetune.json differs from config/grafana/"
    );
}

fn panels(v: &Value, out: &mut Vec<Value>) {
    if let Some(ps) = v.get("panels").and_then(Value::as_array) {
        for p in ps {
            out.push(p.clone());
            panels(p, out);
        }
    }
}

#[test]
fn every_query_names_an_exported_metric() {
    let d = dashboard();
    let exported_names = exported();
    let mut known = exported_names.clone();
    known.extend(recorded());
    // And every family registered, for those this scrape has no sample of (a live saving
    // needs a measurement first).
    known.extend(Metrics::new().family_names().iter().cloned());
    let mut all = Vec::new();
    panels(&d, &mut all);
    let mut queries = 0;
    for p in all.iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().unwrap_or("?");
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("{title}: no targets"));
        assert!(!targets.is_empty(), "{title}: no query");
        for t in targets {
            let expr = t["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{title}: target without expr"));
            let names = metric_names(expr);
            assert!(
                !names.is_empty(),
                "{title}: {expr:?} names no mergetune metric"
            );
            for n in names {
                assert!(
                    known.contains(&n),
                    "{title}: {n} is not exported (query {expr:?})"
                );
            }
            queries += 1;
        }
    }
    // Annotations and template variables query metrics too.
    for (list, query, what) in [
        ("annotations", "expr", "annotation"),
        ("templating", "definition", "variable"),
    ] {
        for a in d[list]["list"].as_array().unwrap() {
            if let Some(expr) = a[query].as_str() {
                for n in metric_names(expr) {
                    assert!(
                        known.contains(&n),
                        "{what} {}: {n} is not exported",
                        a["name"]
                    );
                }
            }
        }
    }
    assert!(queries >= 15, "{queries} queries");
    // And the scrape really has samples of every family the dashboard needs.
    let text = scrape();
    for n in &exported_names {
        if !n.ends_with("_bucket") && !n.ends_with("_sum") && !n.ends_with("_count") {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(n.as_str()) && !l.starts_with('#')),
                "{n}: no sample"
            );
        }
    }
}

#[test]
fn has_a_device_variable_used_by_the_per_device_panels() {
    let d = dashboard();
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for v in ["job", "instance", "device"] {
        assert!(vars.contains(&v), "{v}: {vars:?}");
    }
    let mut all = Vec::new();
    panels(&d, &mut all);
    for metric in [
        "mergetune_device_merge_ratio",
        "mergetune_device_ladder_level",
        "mergetune_decisions_total",
        "mergetune_probes_total",
        "mergetune_tick_duration_seconds_bucket",
        "mergetune_sysfs_write_errors_total",
    ] {
        let used = all.iter().any(|p| {
            p["targets"].as_array().is_some_and(|ts| {
                ts.iter()
                    .any(|t| t["expr"].as_str().is_some_and(|e| e.contains(metric)))
            })
        });
        assert!(used, "no panel shows {metric}");
    }
    // The fleet row is built on the recording rules.
    let recorded = recorded();
    let fleet_queries = all
        .iter()
        .filter_map(|p| p["targets"].as_array())
        .flatten()
        .filter_map(|t| t["expr"].as_str())
        .filter(|e| metric_names(e).iter().any(|n| recorded.contains(n)))
        .count();
    assert!(
        fleet_queries >= 6,
        "{fleet_queries} queries on recorded series"
    );
    let per_device = all
        .iter()
        .filter(|p| p["title"] == "Merge ratio (last window)" || p["title"] == "Ladder level")
        .count();
    assert_eq!(per_device, 2);
    for p in all.iter().filter(|p| {
        p["targets"].as_array().is_some_and(|ts| {
            ts.iter().any(|t| {
                t["expr"]
                    .as_str()
                    .is_some_and(|e| e.contains("mergetune_device_"))
            })
        }) && p["title"] != "Managed devices"
            && p["title"] != "Merging reduced"
    }) {
        let uses = p["targets"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["expr"].as_str().unwrap().contains("$device"));
        assert!(uses, "{}: per-device panel ignores $device", p["title"]);
    }
}

#[test]
fn the_device_state_table_lists_every_device_not_only_the_managed_ones() {
    // The table answers "which devices does mergetune see, and why does it leave some
    // alone": an excluded or unsupported device must appear in it, so neither the $device
    // variable it filters on nor its own query may be narrowed to management="managed".
    let d = dashboard();
    let var = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "device")
        .unwrap();
    let q = var["query"]["query"].as_str().unwrap();
    assert!(q.contains("mergetune_device_management"), "{q}");
    assert!(!q.contains("management="), "device variable narrowed: {q}");
    let mut all = Vec::new();
    panels(&d, &mut all);
    let table = all.iter().find(|p| p["title"] == "Device state").unwrap();
    for t in table["targets"].as_array().unwrap() {
        let e = t["expr"].as_str().unwrap();
        assert!(!e.contains("management="), "table narrowed: {e}");
    }
}
