//! The Grafana dashboard (config/grafana/mergetune.json) queries only metrics the daemon
//! exports, has a device variable, and every panel has a query.

use mergetune::blockfs::RealFs;
use mergetune::config::Config;
use mergetune::controller::Decision;
use mergetune::daemon::Daemon;
use mergetune::metrics::{Metrics, TickTiming};
use mergetune::tunable::{Applied, Change, DecisionKind, Tunable};
use serde_json::Value;
use std::collections::BTreeSet;

fn dashboard() -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/grafana/mergetune.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A scrape of a daemon with one busy managed device and one decision: every family has
/// a sample (prometheus-client leaves empty families out).
fn scrape() -> String {
    let t = tempfile::tempdir().unwrap();
    let q = t.path().join("sys/block/sda/queue");
    std::fs::create_dir_all(&q).unwrap();
    std::fs::write(q.join("nomerges"), "0\n").unwrap();
    std::fs::write(q.join("scheduler"), "none [mq-deadline]\n").unwrap();
    std::fs::create_dir_all(t.path().join("proc")).unwrap();
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
    String::from_utf8(m.render(false).to_vec()).unwrap()
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

fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(pos) = expr[i..].find("mergetune_") {
        let start = i + pos;
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        out.push(expr[start..end].to_string());
        i = end;
    }
    out
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
    let known = exported();
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
    for a in d["annotations"]["list"].as_array().unwrap() {
        if let Some(expr) = a["expr"].as_str() {
            for n in metric_names(expr) {
                assert!(
                    known.contains(&n),
                    "annotation {}: {n} is not exported",
                    a["name"]
                );
            }
        }
    }
    for v in d["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["definition"].as_str() {
            for n in metric_names(q) {
                assert!(
                    known.contains(&n),
                    "variable {}: {n} is not exported",
                    v["name"]
                );
            }
        }
    }
    assert!(queries >= 15, "{queries} queries");
    // And the scrape really has samples of every family the dashboard needs.
    let text = scrape();
    for n in &known {
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
    assert!(vars.contains(&"device"), "{vars:?}");
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
