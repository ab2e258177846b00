//! `mergetune-lab advise` decides with the daemon's own rules and cost profile: it never
//! recommends a level the daemon with the same config would refuse, says when the trace
//! alone would go further and why not, and warns that a value set by hand ends the
//! daemon's management of the device. (It once recommended `L2: nomerges=1` on
//! `trace_mixed.txt`, and L3 and `none` on `trace_rand_read.txt`, both refused by the
//! default daemon.)

use mergetune_kernel::scheduler::Scheduler;
use mergetune_lab::advise::{analyze_file, daemon_view, trace_level};
use mergetune_logic::config::{Config, PolicyConfig};
use mergetune_logic::decision::Level;
use mergetune_logic::pricing::config::PricingConfig;
use mergetune_logic::pricing::profile::{builtin, resolve};
use mergetune_logic::pricing::worth::Worth;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn advise_json(name: &str, config: Option<&str>) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = crate::lab::lab();
    cmd.args(["advise", "--json"]).arg(fixture(name));
    if let Some(text) = config {
        let p = dir.path().join("c.toml");
        std::fs::write(&p, text).unwrap();
        cmd.arg("--config").arg(&p);
    }
    let out = crate::command::succeeded(&mut cmd);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn advise_text(name: &str) -> String {
    let out = crate::lab::lab()
        .args(["advise"])
        .arg(fixture(name))
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// The level the default daemon's profile allows on a scheduler: the deepest level (L1..L3)
/// whose saving is measurable, or L0.
fn deepest_worth_it(profile: &str, scheduler: &str) -> Level {
    // The daemon's default, "live", has no figures for a trace: advise prices it with the
    // measured profile (and says so), so that is what it must agree with.
    let profile = if profile == mergetune_logic::pricing::profile::LIVE {
        mergetune_logic::pricing::profile::MEASURED_NAME
    } else {
        profile
    };
    let w = Worth::from_profile(&resolve(profile).unwrap(), scheduler.parse().ok());
    Level::ALL
        .into_iter()
        .rfind(|&l| l > Level::L0 && w.worth(l))
        .unwrap_or(Level::L0)
}

#[test]
fn under_the_default_profile_advise_recommends_what_the_daemon_does() {
    let profile = match Config::default().policy.cost_profile.as_str() {
        mergetune_logic::pricing::profile::LIVE => {
            mergetune_logic::pricing::profile::MEASURED_NAME.to_string()
        }
        other => other.to_string(),
    };
    for name in ["trace_mixed.txt", "trace_rand_read.txt"] {
        let v = advise_json(name, None);
        let dev = &v["analysis"]["devices"][0];
        let view = &v["daemon"][0];
        let level = dev["recommended_level"].as_u64().unwrap();
        let scheduler = view["scheduler"].as_str().unwrap();
        let allowed = deepest_worth_it(&profile, scheduler);
        assert!(
            level <= u64::from(allowed.index()),
            "{name}: recommends L{level}, the default daemon goes no deeper than {allowed} on {scheduler}: {dev:#}"
        );
        // The trace alone would step down; the report says the daemon would not, and why.
        assert!(view["trace_level"].as_u64().unwrap() > level, "{view:#}");
        let recs = dev["recommendations"].as_array().unwrap();
        let daemon = recs.iter().find(|r| r["topic"] == "daemon").unwrap();
        assert!(
            daemon["setting"].as_str().unwrap().starts_with("disagrees"),
            "{daemon:#}"
        );
        // Under the default live pricing the saving is the daemon's measurement on the
        // host, which a trace does not hold: said, not priced with a stand-in profile.
        let evidence = daemon["evidence"].as_str().unwrap();
        assert!(
            evidence.contains("priced live") && evidence.contains("a trace does not hold"),
            "names what prices it: {daemon:#}"
        );
        assert_eq!(view["profile"], "live", "{view:#}");
        // No scheduler switch for merging's sake the daemon would not make either.
        let sched = recs.iter().find(|r| r["topic"] == "scheduler").unwrap();
        assert_ne!(sched["setting"], "none", "{name}: {sched:#}");
    }
}

#[test]
fn where_the_profile_shows_a_saving_advise_and_the_daemon_agree() {
    // The 2008 figures price every rung as a saving: the trace's own level stands.
    let cfg = "[policy]\ncost_profile = \"lkml-2008\"\n";
    for (name, want) in [("trace_mixed.txt", 2), ("trace_rand_read.txt", 3)] {
        let v = advise_json(name, Some(cfg));
        assert_eq!(
            v["analysis"]["devices"][0]["recommended_level"], want,
            "{name}"
        );
        assert_eq!(v["daemon"][0]["trace_level"], want, "{name}");
        let recs = v["analysis"]["devices"][0]["recommendations"]
            .as_array()
            .unwrap();
        let daemon = recs.iter().find(|r| r["topic"] == "daemon").unwrap();
        assert!(
            daemon["setting"].as_str().unwrap().starts_with("agrees"),
            "{daemon:#}"
        );
    }
}

#[test]
fn the_report_warns_that_a_hand_set_value_ends_management() {
    let text = advise_text("trace_rand_read.txt");
    assert!(text.contains("admin-owned"), "{text}");
}

#[test]
fn the_daemon_view_follows_the_ladder_rules() {
    // Pure: the same report, priced and laddered as the daemon would.
    let a = analyze_file(
        &fixture("trace_rand_read.txt"),
        None,
        &PolicyConfig::default(),
    )
    .unwrap();
    let r = &a.devices[0];
    let cfg = PolicyConfig::default();
    let (trace, _) = trace_level(r, &cfg);
    assert_eq!(trace, Level::L3);
    let lkml = builtin("lkml-2008").unwrap();
    // Priced on the 2008 figures, as the daemon would price a device on `sched`.
    let lkml_view = |cfg: &PolicyConfig, sched: Scheduler| {
        daemon_view(
            r,
            cfg,
            trace,
            &sched.into(),
            "lkml-2008",
            &Worth::from_profile(&lkml, Some(sched)),
            PricingConfig::default().floor(),
        )
    };
    // On none only L0 and L3 exist: the 2008 figures make L3 worth it.
    let v = lkml_view(&cfg, Scheduler::None);
    assert_eq!(v.level, Level::L3, "{}", v.why);
    // With disabled_nomerges = 1 the daemon stops at L2, which none does not have: L0.
    let shallow = PolicyConfig {
        disabled_nomerges: 1,
        ..PolicyConfig::default()
    };
    let v = lkml_view(&shallow, Scheduler::None);
    assert_eq!(v.level, Level::L0, "{}", v.why);
    // On mq-deadline it stops at L2 there.
    let v = lkml_view(&shallow, Scheduler::MqDeadline);
    assert_eq!(v.level, Level::L2, "{}", v.why);
    // Unpriced (no profile), every rung is worth it: the trace's level.
    let v = daemon_view(
        r,
        &cfg,
        trace,
        &Scheduler::None.into(),
        "none",
        &Worth::UNPRICED,
        PricingConfig::default().floor(),
    );
    assert_eq!(v.level, Level::L3, "{}", v.why);
}

/// Advise once priced and laddered an mq-deadline device on `none`'s row (the scheduler the
/// trace alone would pick). The device's own scheduler decides: from the capture's
/// `# scheduler` line, or `--scheduler`; without either, the view says it is a guess.
#[test]
fn advise_uses_the_devices_own_scheduler() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/trace_rand_read.txt"
    ))
    .unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[policy]\ncost_profile = \"measured-6.18\"\n").unwrap();
    let run = |text: &str, extra: &[&str]| -> serde_json::Value {
        let p = dir.path().join("t.txt");
        std::fs::write(&p, text).unwrap();
        let out = crate::command::succeeded(
            crate::lab::lab()
                .args(["advise", "--json", "-c"])
                .arg(&cfg)
                .args(extra)
                .arg(&p),
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let guessed = run(&fixture, &[]);
    assert!(
        guessed["daemon"][0]["why"]
            .as_str()
            .unwrap()
            .contains("scheduler is not known"),
        "{:#}",
        guessed["daemon"][0]
    );
    for sched in ["mq-deadline", "bfq", "none"] {
        let with_header = run(&format!("# scheduler {sched}\n{fixture}"), &[]);
        assert_eq!(
            with_header["daemon"][0]["scheduler"], sched,
            "{with_header:#}"
        );
        assert!(
            !with_header["daemon"][0]["why"]
                .as_str()
                .unwrap()
                .contains("not known")
        );
        let with_flag = run(&fixture, &["--scheduler", sched]);
        assert_eq!(with_flag["daemon"][0]["scheduler"], sched);
        assert_eq!(with_flag["daemon"], with_header["daemon"]);
    }
}

/// `mergetune-lab advise <trace> [--price-ns NS]` under the default config's live
/// pricing.
fn advise_live(name: &str, price_ns: Option<&str>) -> std::process::Output {
    let mut cmd = crate::lab::lab();
    cmd.args(["advise", "--json"]).arg(fixture(name));
    if let Some(ns) = price_ns {
        cmd.arg(format!("--price-ns={ns}"));
    }
    cmd.output().unwrap()
}

/// Under the default config (live pricing) a trace holds no price: advise says at which
/// price per bio the daemon steps down at the trace's rate (82,875 bios/s: 5 ms/s of floor
/// is 60 ns per bio), and with the price `mergetune status` shows (`--price-ns`) it gives
/// the daemon's answer, naming what priced it.
#[test]
fn under_live_pricing_advise_names_the_break_even_price_and_takes_the_daemons() {
    let view = |out: &std::process::Output| -> serde_json::Value {
        assert!(out.status.success(), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["daemon"][0].clone()
    };
    let unpriced = view(&advise_live("trace_rand_read.txt", None));
    assert_eq!(unpriced["level"], 0, "{unpriced}");
    let why = unpriced["why"].as_str().unwrap();
    assert!(why.contains("priced live"), "{why}");
    assert!(why.contains("reaches 60 ns per bio"), "{why}");
    assert!(why.contains("--price-ns"), "{why}");

    // 1,000 ns per bio at 82,875 bios/s saves 83 ms/s: the daemon goes to L3.
    let dear = view(&advise_live("trace_rand_read.txt", Some("1000")));
    assert_eq!(dear["level"], 3, "{dear}");
    assert!(
        dear["profile"]
            .as_str()
            .unwrap()
            .contains("--price-ns 1000"),
        "{dear}"
    );
    // 10 ns per bio saves 0.8 ms/s, under the floor: it keeps merging on.
    let cheap = view(&advise_live("trace_rand_read.txt", Some("10")));
    assert_eq!(cheap["level"], 0, "{cheap}");
    assert!(
        cheap["why"].as_str().unwrap().contains("not worth it"),
        "{cheap}"
    );

    for bad in ["0", "-5", "nan", "1e12"] {
        let out = advise_live("trace_rand_read.txt", Some(bad));
        assert!(!out.status.success(), "--price-ns {bad} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--price-ns"), "{bad}: {err}");
    }
}
