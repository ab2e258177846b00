//! A host where the merge-path sampler cannot run (a distribution's
//! `kernel.perf_event_paranoid` of 3 refuses perf events without CAP_SYS_ADMIN: Debian 12
//! and 13; no CAP_PERFMON) is never inert in silence: the daemon checks the sampler at
//! start, and `status` (document and table) and /metrics say that it cannot run, why, and
//! the fix; `[pricing] fallback_profile` prices the devices meanwhile, and each device's
//! pricing names it. The refusal is injected through the `MergeSampler` trait (the
//! memory kernel answers `perf_event_open` as a paranoid-3 kernel does); the startup line
//! of the binary is checked on a fake tree, where the sampler finds no kernel symbols.

use crate::memkernel::{Load, MemKernel};
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::snapshot::TickTiming;
use mergetune_export::metrics::Metrics;
use mergetune_export::status::{PricingBasis, StatusSnapshot, UnknownReason};
use mergetune_export::table::format_status;
use mergetune_kernel::perf::{PARANOID_SYSCTL_DROP_IN, open_refused};
use mergetune_logic::config::Config;

/// A kernel at `perf_event_paranoid` 3, one busy disk of random I/O.
fn paranoid_host() -> MemKernel {
    let mut fs = MemKernel::with(&["sda"]);
    fs.devs.get_mut("sda").unwrap().load = Load::Random;
    fs.perf_refusal = Some(open_refused(
        &std::io::Error::from_raw_os_error(13),
        Some(3),
    ));
    fs
}

/// The daemon as `mergetune run` starts it (the sampler checked before the first tick),
/// ticked for `secs` seconds of random I/O; the `/status` document and /metrics after.
fn run(cfg: Config, fs: &mut MemKernel, secs: u64) -> (StatusSnapshot, String) {
    let mut d = Daemon::simulated(cfg);
    d.check_sampler(0, fs);
    let m = Metrics::new();
    for t in 0..=secs {
        fs.advance(5000);
        let decisions = d.tick(t * 1000, fs);
        m.update(
            &d,
            &decisions,
            TickTiming {
                now_ms: t * 1000,
                ..Default::default()
            },
        );
    }
    let text = String::from_utf8(m.render().to_vec()).unwrap();
    (m.status(), text)
}

fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_refused_sampler_is_said_in_status_the_table_and_metrics_with_the_fix() {
    let mut fs = paranoid_host();
    let (s, text) = run(Config::default(), &mut fs, 60);
    let p = s.pricing.as_ref().expect("the document names its pricing");
    let why = p
        .sampler_unavailable
        .as_deref()
        .expect("status says the sampler cannot run");
    assert!(why.contains("kernel.perf_event_paranoid is 3"), "{why}");
    assert!(
        why.contains(&format!(
            "echo kernel.perf_event_paranoid=2 > {PARANOID_SYSCTL_DROP_IN} && sysctl --system"
        )),
        "the fix, with its sysctl drop-in: {why}"
    );
    assert!(why.contains("[pricing] fallback_profile"), "{why}");
    assert_eq!(p.fallback_profile, None);
    assert_eq!(
        metric(&text, "mergetune_merge_sampler_unavailable"),
        Some(1.0),
        "{text}"
    );
    let sda = &s.devices[0];
    let pricing = sda.pricing.as_ref().unwrap();
    assert_eq!(
        (pricing.basis, pricing.why),
        (PricingBasis::Unknown, Some(UnknownReason::NoSampler))
    );
    assert_eq!(
        metric(
            &text,
            "mergetune_device_pricing{basis=\"unknown\",device=\"sda\"}"
        ),
        Some(1.0),
        "{text}"
    );
    // Inert, and said: nothing was written.
    assert!(fs.writes.is_empty(), "{:?}", fs.writes);
    let table = format_status(&s);
    assert!(
        table.contains("merge-path sampler unavailable: ")
            && table.contains("no [pricing] fallback_profile: nothing is priced"),
        "{table}"
    );
}

#[test]
fn a_fallback_profile_prices_the_devices_while_the_sampler_cannot_run() {
    let mut fs = paranoid_host();
    let mut cfg = Config::default();
    cfg.pricing.fallback_profile = "lkml-2008".into();
    assert!(cfg.validate("test").is_ok());
    let (s, text) = run(cfg, &mut fs, 60);
    let p = s.pricing.as_ref().unwrap();
    assert!(p.sampler_unavailable.is_some());
    assert_eq!(p.fallback_profile.as_deref(), Some("lkml-2008"));
    assert_eq!(
        metric(&text, "mergetune_merge_sampler_unavailable"),
        Some(1.0)
    );
    let pricing = s.devices[0].pricing.as_ref().unwrap();
    assert_eq!(
        (pricing.basis, pricing.profile.as_str()),
        (PricingBasis::Profile, "lkml-2008"),
        "{pricing:?}"
    );
    assert_eq!(
        metric(
            &text,
            "mergetune_device_pricing{basis=\"profile\",device=\"sda\"}"
        ),
        Some(1.0),
        "{text}"
    );
    // Priced, the random load steps down.
    assert!(
        fs.writes.iter().any(|(d, _, _)| d == "sda"),
        "no step down on sda with a fallback profile: {:?}",
        s.devices[0].last_reason
    );
    assert!(format_status(&s).contains("priced meanwhile by [pricing] fallback_profile lkml-2008"));
}

#[test]
fn a_fallback_profile_needs_live_pricing_and_a_profile_name() {
    let mut cfg = Config::default();
    cfg.pricing.fallback_profile = "live".into();
    let e = cfg.validate("c.toml").unwrap_err().to_string();
    assert!(e.contains("pricing.fallback_profile"), "{e}");
    let mut cfg = Config::default();
    cfg.policy.cost_profile = "measured-6.18".into();
    cfg.pricing.fallback_profile = "lkml-2008".into();
    let e = cfg.validate("c.toml").unwrap_err().to_string();
    assert!(
        e.contains("pricing.fallback_profile") && e.contains("not \"live\""),
        "{e}"
    );
}

#[test]
fn the_daemon_says_at_start_that_the_sampler_cannot_run() {
    // A fake tree has no /proc/kallsyms: the sampler cannot price, and the binary says so
    // in one warning before its first tick, at the default log level.
    let t = crate::command::one_disk_tree();
    let out = crate::command::on_tree(
        std::process::Command::new(env!("CARGO_BIN_EXE_mergetune")).args([
            "run",
            "--once",
            "--interval-ms",
            "100",
        ]),
        t.path(),
    )
    .arg("--config")
    .arg("/dev/null")
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("merge-path sampler unavailable"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let first_device_line = stderr.lines().position(|l| l.contains("sda")).unwrap();
    let warned = stderr
        .lines()
        .position(|l| l.contains("merge-path sampler unavailable"))
        .unwrap();
    assert!(warned < first_device_line, "said at start:\n{stderr}");
}

#[test]
fn a_fallback_profile_path_is_taken_from_the_configs_directory_and_read_at_load() {
    use mergetune_logic::config::load_file;
    let d = tempfile::tempdir().unwrap();
    let stated = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("config/cost-profiles/lkml-2008.toml"),
    )
    .unwrap();
    std::fs::write(d.path().join("measured-here.toml"), stated).unwrap();
    let cfg_path = d.path().join("mergetune.toml");
    std::fs::write(
        &cfg_path,
        "[pricing]\nfallback_profile = \"measured-here.toml\"\n",
    )
    .unwrap();
    let cfg = load_file(&cfg_path).unwrap();
    assert_eq!(
        std::path::PathBuf::from(&cfg.pricing.fallback_profile),
        d.path().join("measured-here.toml")
    );
    // A profile that cannot be read stops the start (and a reload), naming the key.
    std::fs::write(&cfg_path, "[pricing]\nfallback_profile = \"gone.toml\"\n").unwrap();
    let e = load_file(&cfg_path).unwrap_err().to_string();
    assert!(
        e.contains("pricing.fallback_profile") && e.contains("gone.toml"),
        "{e}"
    );
}
