//! A dry run is faithful: on the same load it takes the decisions the live daemon takes
//! (the same kinds, to the same levels), every one marked as a dry run, and it writes
//! nothing. Driven on the simulator with the daemon's own loop: the live daemon writes the
//! simulated tunables, the dry run leaves them at the kernel default and decides on the
//! level it would have set (crates/daemon/src/dryrun.rs). The real-kernel counterpart is
//! tests/real_kernel/real_kernel_daemon.rs, `a_dry_run_decides_as_the_live_daemon`.

use crate::scenarios::RandomThenSequential;
use mergetune_daemon::actuator::Actuator;
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::controller::Controller;
use mergetune_daemon::state::MemoryStore;
use mergetune_kernel::blockfs::Sysfs;
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::Config;
use mergetune_logic::decision::Decision;
use mergetune_logic::decision::{Applied, DecisionKind};
use mergetune_sim::engine::Simulation;
use mergetune_sim::scenario::DEFAULT_SCENARIO;
use mergetune_sim::scenario::Scenario;

/// Random writes on a `none` queue (L0 -> L3 straight), then batched sequential writes.
const RANDOM_THEN_SEQUENTIAL: RandomThenSequential = RandomThenSequential {
    name: "random-then-sequential",
    seed: 7,
    random_s: 40.0,
    random_read_percent: 0.0,
    random_iops: 6000.0,
    sequential_phase: "sequential",
    sequential_job: "backup",
    sequential_s: 40.0,
    sequential_read_percent: 100.0,
    sequential_iops: None,
};

/// One run: the decisions, and the largest nomerges the simulated kernel ever held.
struct Run {
    decisions: Vec<Decision>,
    max_nomerges: u8,
}

fn drive(sc: &Scenario, cfg: &Config, dry_run: bool) -> Run {
    let mut sim = Simulation::new(sc).unwrap();
    let mut d = Daemon::new(
        cfg.clone(),
        Actuator::new(dry_run, Box::new(MemoryStore::default())),
    );
    let end_ms = sim.duration_ns() / 1_000_000;
    let mut decisions = d.tick(0, &mut sim);
    let mut max_nomerges = 0;
    let mut t_ms = 0;
    while t_ms < end_ms {
        t_ms = (t_ms + d.next_tick_in_ms().max(1)).min(end_ms);
        sim.advance_to(t_ms * 1_000_000);
        decisions.extend(Controller::tick(&mut d, t_ms, &mut sim));
        for dev in sim.list_block_devices().unwrap() {
            if let Ok(v) = sim.read_tunable(&dev, Tunable::Nomerges) {
                max_nomerges = max_nomerges.max(v.trim().parse().unwrap_or(0));
            }
        }
    }
    Run {
        decisions,
        max_nomerges,
    }
}

/// The ladder level each decision leaves its device at, from the values it writes (the
/// dry run's "from" and "to" are those it would have written).
fn kinds_and_levels(decisions: &[Decision]) -> Vec<(String, DecisionKind, u8)> {
    let mut state: std::collections::BTreeMap<String, (String, String)> = Default::default();
    decisions
        .iter()
        .filter(|d| d.kind != DecisionKind::Restore)
        .map(|d| {
            let s = state
                .entry(d.device.clone())
                .or_insert(("0".into(), "1".into()));
            for c in &d.changes {
                match c.tunable {
                    Tunable::Nomerges => s.0 = c.to.clone(),
                    Tunable::FrontMerges => s.1 = c.to.clone(),
                    _ => {}
                }
            }
            let level = match (s.0.as_str(), s.1.as_str()) {
                ("2", _) => 3,
                ("1", _) => 2,
                (_, "0") => 1,
                _ => 0,
            };
            (d.device.clone(), d.kind, level)
        })
        .collect()
}

fn describe(decisions: &[Decision]) -> String {
    decisions
        .iter()
        .map(|d| format!("  {:>7.1}s {d}", d.at_ms as f64 / 1000.0))
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_faithful(scenario: &Scenario, cfg: &Config, must_see: &[DecisionKind]) {
    let live = drive(scenario, cfg, false);
    let dry = drive(scenario, cfg, true);
    let (l, d) = (
        kinds_and_levels(&live.decisions),
        kinds_and_levels(&dry.decisions),
    );
    eprintln!(
        "live:\n{}\ndry run:\n{}",
        describe(&live.decisions),
        describe(&dry.decisions)
    );
    assert_eq!(
        d,
        l,
        "the dry run decided otherwise than the live daemon on the same load\nlive:\n{}\ndry run:\n{}",
        describe(&live.decisions),
        describe(&dry.decisions)
    );
    for kind in must_see {
        assert!(
            l.iter().any(|(_, k, _)| k == kind),
            "the scenario never led to {kind}: not a test of it\n{}",
            describe(&live.decisions)
        );
    }
    assert!(live.max_nomerges == 2, "the live daemon reached L3");
    assert_eq!(dry.max_nomerges, 0, "the dry run wrote a tunable");
    for x in dry
        .decisions
        .iter()
        .filter(|x| x.kind != DecisionKind::Restore)
    {
        assert_eq!(x.applied, Applied::DryRun, "not marked as a dry run: {x}");
    }
    // The same decisions, near the same times: the dry run's load is the real level's, so
    // a window may close a tick apart, never more than a few seconds.
    for (a, b) in live.decisions.iter().zip(&dry.decisions) {
        let gap = a.at_ms.abs_diff(b.at_ms);
        assert!(gap <= 5_000, "{a}\nvs the dry run's\n{b}\n{gap} ms apart");
    }
}

fn test_config() -> Config {
    let mut cfg = Config::default();
    // Priced in the 2008 figures, where the ladder moves (on the measured profile a dry
    // run and a live run agree trivially: both stay at L0, "not worth it").
    cfg.policy.cost_profile = "lkml-2008".into();
    cfg.policy.probe_initial_backoff_secs = 10;
    cfg.policy.probe_max_backoff_secs = 20;
    cfg.policy.min_dwell_secs = 2;
    cfg
}

#[test]
fn random_then_sequential_on_a_bare_queue() {
    assert_faithful(
        &RANDOM_THEN_SEQUENTIAL.scenario(),
        &test_config(),
        &[DecisionKind::Disable, DecisionKind::Probe],
    );
}

#[test]
fn the_built_in_scenario_on_mq_deadline() {
    // OLTP, a batched backup, OLTP again: L3 (straight from L0: the OLTP merges nothing),
    // probes and a trial of L2.
    assert_faithful(
        &Scenario::from_toml_str(DEFAULT_SCENARIO, "built-in", None).unwrap(),
        &test_config(),
        &[
            DecisionKind::Disable,
            DecisionKind::Probe,
            DecisionKind::Trial,
            DecisionKind::TrialSucceeded,
        ],
    );
}

#[test]
fn a_dry_run_probe_out_of_l3_would_write_2_to_0() {
    // The bug this fixes: the dry run never left the real L0, so its probe read
    // "queue/nomerges 0 -> 0" and was not marked as a dry run.
    let dry = drive(&RANDOM_THEN_SEQUENTIAL.scenario(), &test_config(), true);
    let probe = dry
        .decisions
        .iter()
        .find(|d| d.kind == DecisionKind::Probe)
        .expect("a probe");
    let c = probe
        .change_of(Tunable::Nomerges)
        .expect("a nomerges change");
    assert_eq!((c.from.as_str(), c.to.as_str()), ("2", "0"), "{probe}");
    assert_eq!(probe.applied, Applied::DryRun);
}

/// A dry run without root once said `no tracing filesystem here (not mounted?)` for a
/// tracing filesystem mounted mode 0700, and never said that it could not price a step
/// (no merge-path sampler), so could never step down where the live daemon would. Run as
/// `nobody` (setpriv, util-linux) over a fake tree whose tracing directory is root's: the
/// tap's error says permission, and the start says what the preview lacks.
#[test]
fn a_dry_run_as_another_user_says_what_it_lacks_and_why() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let q = root.join("sys/block/sda/queue");
    std::fs::create_dir_all(q.join("iosched")).unwrap();
    std::fs::write(q.join("nomerges"), "0\n").unwrap();
    std::fs::write(q.join("scheduler"), "none [mq-deadline]\n").unwrap();
    std::fs::write(q.join("rotational"), "0\n").unwrap();
    std::fs::write(q.join("iosched/front_merges"), "1\n").unwrap();
    std::fs::write(root.join("sys/block/sda/dev"), "8:0\n").unwrap();
    let tracing = root.join("sys/kernel/tracing");
    std::fs::create_dir_all(tracing.join("instances")).unwrap();
    std::fs::create_dir_all(tracing.join("events/block/block_bio_queue")).unwrap();
    std::fs::set_permissions(&tracing, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir_all(root.join("proc")).unwrap();
    std::fs::write(
        root.join("proc/diskstats"),
        "   8 0 sda 0 0 0 0 0 0 0 0 0 0 0\n",
    )
    .unwrap();
    // Every directory on the way readable by nobody (a tempdir is 0700).
    for d in [
        root.to_path_buf(),
        root.join("sys"),
        root.join("sys/kernel"),
        root.join("proc"),
    ] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_mergetune"))
        .args(crate::command::DRY_RUN_ONCE)
        .args([
            "--interval-ms",
            "20",
            "--config",
            "/dev/null",
            "--sysfs-root",
        ])
        .arg(root.join("sys"))
        .arg("--procfs-root")
        .arg(root.join("proc"))
        .output()
        .expect("setpriv (util-linux) is needed to drop root");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("dry run as uid 65534, not root: this preview lacks what the live daemon has"),
        "{err}"
    );
    assert!(
        err.to_lowercase().contains("permission denied") && err.contains("only root may use it"),
        "{err}"
    );
    assert!(!err.contains("not mounted?"), "{err}");
    assert!(
        err.contains("merge-path sampler") && err.contains("none steps down in this preview"),
        "{err}"
    );
}
