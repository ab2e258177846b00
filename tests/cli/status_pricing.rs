//! Everywhere a decision is shown, what priced it (as required: "status, /metrics and the
//! logs show per device the measured saving, its interval and the floor"): the startup log,
//! `check-config`'s summary, `/status` and the status table, `simulate`'s headline and unit
//! columns, `advise`'s what-if unit, and a `not_worth_it` that says it wrote nothing.

use mergetune::cli::check_config::check;
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::snapshot::TickTiming;
use mergetune_export::metrics::Metrics;
use mergetune_export::status::{PricingBasis, StatusSnapshot, UnknownReason};
use mergetune_logic::config::Config;
use mergetune_logic::decision::{Applied, DecisionKind, Level};
use mergetune_logic::pricing::profile::{Unit, builtin};
use mergetune_sim::engine::Simulation;
use mergetune_sim::report::Report;
use mergetune_sim::runner::run_scenario_observed;
use mergetune_sim::scenario::Scenario;

/// Random 4 KiB OLTP on mq-deadline: nothing merges, so the policy prices a step down.
fn oltp(profile: Option<&str>) -> Scenario {
    let p = profile
        .map(|p| format!("cost_profile = {p:?}\n"))
        .unwrap_or_default();
    let text = format!(
        "name = \"oltp-short\"\nseed = 1\n{p}\
         [[device]]\nname = \"nvme0n1\"\nkind = \"ssd\"\nscheduler = \"mq-deadline\"\n\
         queue_depth = 64\nparallelism = 16\nread_overhead_us = 70.0\nwrite_overhead_us = 20.0\n\
         bandwidth_mb_s = 2000.0\n\
         [[phase]]\nname = \"oltp\"\nduration_s = 20.0\n\
         [[phase.job]]\nname = \"db\"\ndevice = \"nvme0n1\"\npattern = \"random\"\n\
         read_percent = 70.0\nblock_size_kb = 4\niodepth = 32\nrate_iops = 20000.0\n"
    );
    Scenario::from_toml_str(&text, "<test>", None).unwrap()
}

/// The daemon run over the simulated scenario with `cost_profile`; the `/status` document
/// after the last tick and the run's report.
fn run(sc: &Scenario, cost_profile: &str) -> (StatusSnapshot, Report) {
    let mut cfg = Config::default();
    cfg.policy.cost_profile = cost_profile.into();
    let mut sim = Simulation::new(sc).unwrap();
    let mut d = Daemon::simulated(sc.daemon_config(&cfg));
    let m = Metrics::new();
    let report = run_scenario_observed(
        &mut sim,
        &mut d,
        "adaptive",
        &mut |_, _| {},
        &mut |c, decisions, now_ms| {
            m.update(
                c,
                decisions,
                TickTiming {
                    now_ms,
                    ..Default::default()
                },
            )
        },
    );
    (m.status(), report)
}

fn row<'a>(table: &'a str, device: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.starts_with(device))
        .unwrap_or_else(|| panic!("no row of {device}: {table}"))
}

#[test]
fn status_shows_the_profile_the_next_steps_saving_its_interval_and_coverage() {
    let (s, _) = run(&oltp(None), "measured-6.18");
    let p = builtin("measured-6.18").unwrap();
    let top = s.pricing.as_ref().expect("the document names its pricing");
    assert_eq!(top.profile, "measured-6.18");
    assert!(
        top.origin.contains("built-in, measured on kernel"),
        "{top:?}"
    );
    let dev = &s.devices[0];
    let pr = dev.pricing.as_ref().expect("a managed device's pricing");
    assert_eq!(pr.basis, PricingBasis::Profile, "{pr:?}");
    assert_eq!(pr.profile, "measured-6.18");
    assert_eq!(dev.level, Some(Level::L0));
    assert_eq!(pr.step, Some(Level::L1), "the next step down from L0");
    let saving = pr.saving.expect("the profile prices L1");
    assert!(saving.lo.is_some() && saving.hi.is_some(), "{saving:?}");
    assert_eq!(saving.coverage_percent, p.ci_coverage_percent);
    // The JSON, as a client without mergetune's types reads it: additive fields.
    let doc = serde_json::to_value(&s).unwrap();
    assert_eq!(doc["pricing"]["profile"], "measured-6.18", "{doc}");
    let jp = &doc["devices"][0]["pricing"];
    assert_eq!(jp["basis"], "profile", "{jp}");
    assert_eq!(jp["step"], 1, "{jp}");
    assert_eq!(jp["saving"]["unit"], "percent_per_io", "{jp}");
    assert!(jp["saving"]["lo"].is_number(), "{jp}");
    // The table: the profile, the step, its interval with its coverage; the header names
    // the profile and its origin.
    let t = mergetune_export::table::format_status(&s);
    let cov = mergetune_export::status::coverage(p.ci_coverage_percent);
    let cell = format!(
        "measured-6.18: L1 {:+.1}% [{:+.1}, {:+.1}] ({cov}) CPU/IO",
        saving.value,
        saving.lo.unwrap(),
        saving.hi.unwrap()
    );
    assert!(row(&t, "nvme0n1").contains(&cell), "{cell}\n{t}");
    assert!(
        t.lines()
            .next()
            .unwrap()
            .contains("priced by profile measured-6.18 (built-in, measured on kernel"),
        "{t}"
    );
}

#[test]
fn status_under_live_pricing_shows_the_floor_and_why_the_saving_is_unknown() {
    let (s, _) = run(&oltp(None), "live");
    let top = s.pricing.as_ref().unwrap();
    assert_eq!(top.profile, "live");
    assert_eq!(top.floor_ms_per_sec, 5.0);
    let pr = s.devices[0].pricing.as_ref().unwrap();
    // The simulated world here has merge-path accounting but this run never resolved a
    // price: unknown, and why, with the floor it would have to clear.
    if pr.basis == PricingBasis::Live {
        let t = mergetune_export::table::format_status(&s);
        // The next step's own price where its rung was sampled enough, else "not measured"
        // (the first step from L0 on mq-deadline is L1, the front lookup alone).
        let want = match pr.saving {
            Some(saving) => format!(
                "live: L1 {:.2} [{:.2}, {:.2}] (95%) / 5.00 ms/s",
                saving.value,
                saving.lo.unwrap(),
                saving.hi.unwrap()
            ),
            None => "live: L1 not measured / 5.00 ms/s".to_string(),
        };
        assert!(row(&t, "nvme0n1").contains(&want), "{want}\n{t}");
        return;
    }
    assert_eq!(pr.basis, PricingBasis::Unknown, "{pr:?}");
    assert_eq!(pr.why, Some(UnknownReason::NotMeasuredYet), "{pr:?}");
    assert_eq!(pr.floor_ms_per_sec, Some(5.0));
    assert!(
        pr.why_text
            .as_deref()
            .is_some_and(|w| w.contains("not been measured")),
        "{pr:?}"
    );
    let t = mergetune_export::table::format_status(&s);
    assert!(
        row(&t, "nvme0n1").contains("live: unknown: not measured yet / 5.00 ms/s"),
        "{t}"
    );
    assert!(
        t.lines()
            .next()
            .unwrap()
            .contains("priced live (measured on this host), floor 5.00 ms/s"),
        "{t}"
    );
}

#[test]
fn a_not_worth_it_says_nothing_was_written() {
    let (s, report) = run(&oltp(None), "measured-6.18");
    let nwi: Vec<_> = report
        .decisions
        .iter()
        .filter(|d| d.kind == DecisionKind::NotWorthIt)
        .collect();
    assert!(!nwi.is_empty(), "no not_worth_it: not a test of it");
    for d in &nwi {
        assert!(d.changes.is_empty(), "{d}");
        assert_eq!(d.applied, Applied::NothingToWrite, "{d}");
        assert!(
            d.to_string().contains("[not_worth_it, nothing to write]"),
            "{d}"
        );
    }
    let last = s.devices[0].last_decision.as_ref().unwrap();
    assert_eq!(last.kind, DecisionKind::NotWorthIt);
    let doc = serde_json::to_value(&s).unwrap();
    assert_eq!(
        doc["devices"][0]["last_decision"]["applied"],
        serde_json::json!({"result": "nothing_to_write"}),
        "{doc}"
    );
    let t = mergetune_export::table::format_status(&s);
    assert!(row(&t, "nvme0n1").contains("(nothing to write)"), "{t}");
}

#[test]
fn simulate_names_its_profile_and_labels_the_cpu_column_by_its_unit() {
    for (profile, unit, label, json_unit) in [
        ("measured-6.18", Unit::Ns, "ns/IO", "ns"),
        ("lkml-2008", Unit::ModelCycles, "cyc/IO", "model-cycles"),
    ] {
        let (_, mut report) = run(&oltp(Some(profile)), "live");
        assert_eq!(report.cost_profile, profile);
        assert_eq!(report.cost_unit, unit);
        report.daemon_pricing = Some(profile.into());
        let text = report.render_text();
        let head = text.lines().nth(1).unwrap();
        assert!(
            head.starts_with(&format!("priced in cost profile {profile} (built-in"))
                && head.contains(label),
            "{head}"
        );
        let columns = text.lines().find(|l| l.contains("merge%")).unwrap();
        assert!(columns.trim_end().ends_with(label), "{columns}");
        let other = if label == "ns/IO" { "cyc/IO" } else { "ns/IO" };
        assert!(!text.contains(other), "{text}");
        let doc: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(doc["cost_unit"], json_unit, "{profile}");
        let dev = &doc["phases"][0]["devices"][0];
        assert!(dev["cycles_per_io"].is_number(), "{dev}");
        assert_eq!(dev["cycles_per_io_unit"], json_unit, "{dev}");
    }
}

#[test]
fn advise_labels_the_what_if_cpu_column_by_the_profiles_unit() {
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/trace_rand_read.txt"
    );
    let d = tempfile::tempdir().unwrap();
    let lkml = d.path().join("lkml.toml");
    std::fs::write(&lkml, "[policy]\ncost_profile = \"lkml-2008\"\n").unwrap();
    let measured = d.path().join("measured.toml");
    std::fs::write(&measured, "[policy]\ncost_profile = \"measured-6.18\"\n").unwrap();
    for (cfg, label, json_unit) in [
        (&measured, "ns/bio", "ns"),
        (&lkml, "cyc/bio", "model-cycles"),
    ] {
        let o = crate::lab::lab()
            .args(["advise", "--what-if", trace, "--config"])
            .arg(cfg)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let header = out
            .lines()
            .find(|l| l.trim_start().starts_with("candidate"))
            .unwrap_or_else(|| panic!("no what-if table: {out}"));
        assert!(header.contains(label), "{header}");
        let other = if label == "ns/bio" {
            "cyc/bio"
        } else {
            "ns/bio"
        };
        assert!(!out.contains(other), "{out}");
        let o = crate::lab::lab()
            .args(["advise", "--what-if", "--json", trace, "--config"])
            .arg(cfg)
            .output()
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let w = &doc["what_if"][0];
        assert_eq!(w["unit"], json_unit, "{w}");
        assert_eq!(w["rows"][0]["cycles_per_bio_unit"], json_unit, "{w}");
    }
}

#[test]
fn check_config_summary_names_the_profile_its_origin_and_its_match() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("m.toml");
    std::fs::write(&cfg, "[policy]\ncost_profile = \"measured-6.18\"\n").unwrap();
    let other = check(&cfg, Some("6.1.0-other"));
    assert!(other.ok, "{:?}", other.errors);
    for want in [
        "pricing: profile measured-6.18 (built-in, measured on kernel",
        "will not match here",
        "every device stays unknown",
    ] {
        assert!(other.summary.contains(want), "{want}: {}", other.summary);
    }
    assert!(other.summary.ends_with(&other.pricing));
    // Another build of the same series matches, as the daemon decides: no warning.
    let same = check(&cfg, Some("6.18.1-other-build"));
    assert!(
        same.summary
            .contains("matches the running kernel 6.18.1-other-build"),
        "{}",
        same.summary
    );
    assert!(
        !same.warnings.iter().any(|w| w.contains("cost_profile")),
        "{:?}",
        same.warnings
    );
    let live = d.path().join("l.toml");
    std::fs::write(&live, "# built-in defaults\n").unwrap();
    let l = check(&live, Some("6.1.0-other"));
    assert!(
        l.summary.contains("pricing: live (measured on this host")
            && l.summary.contains("floor, 5.00 ms/s"),
        "{}",
        l.summary
    );
}

/// A fake tree with one managed mq-deadline disk (not rotational, front merges on, no
/// holders); `release` as the running kernel.
fn tree(release: Option<&str>) -> tempfile::TempDir {
    let t = crate::command::one_disk_tree();
    let q = t.path().join("sys/block/sda/queue");
    std::fs::create_dir_all(q.join("iosched")).unwrap();
    std::fs::create_dir_all(t.path().join("sys/block/sda/slaves")).unwrap();
    std::fs::write(q.join("rotational"), "0\n").unwrap();
    std::fs::write(q.join("iosched/front_merges"), "1\n").unwrap();
    std::fs::create_dir_all(t.path().join("proc/sys/kernel")).unwrap();
    if let Some(r) = release {
        std::fs::write(t.path().join("proc/sys/kernel/osrelease"), format!("{r}\n")).unwrap();
    }
    t
}

fn startup_log(t: &tempfile::TempDir, config: &str) -> String {
    let o = crate::command::dry_run_once(t.path(), config, &["--interval-ms", "50"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    err
}

fn line<'a>(log: &'a str, want: &str) -> &'a str {
    log.lines()
        .find(|l| l.contains(want))
        .unwrap_or_else(|| panic!("no line with {want:?}: {log}"))
}

#[test]
fn the_startup_log_names_the_pricing_and_each_devices_match() {
    let t = tree(Some("6.1.0-other"));
    let log = startup_log(&t, "# built-in defaults\n");
    assert!(
        line(&log, "pricing: live").contains("measured on this host"),
        "{log}"
    );
    assert!(
        line(&log, "sda: pricing:").contains("measured live, floor 5.00 ms/s"),
        "{log}"
    );
    let log = startup_log(&t, "[policy]\ncost_profile = \"measured-6.18\"\n");
    let top = line(&log, "pricing: profile measured-6.18");
    assert!(
        top.contains("built-in, measured on kernel") && top.contains("will not match here"),
        "{top}"
    );
    assert!(
        line(&log, "sda: pricing:").contains("profile measured-6.18 does not match"),
        "{log}"
    );
    let t = tree(None);
    let log = startup_log(&t, "[policy]\ncost_profile = \"measured-6.18\"\n");
    assert!(
        line(&log, "sda: pricing:")
            .contains("profile measured-6.18 applies here (same kernel series"),
        "{log}"
    );
}
