//! A live run recorded through `RecordingFs` and replayed with the same config gives the
//! same decisions, tick for tick; a different config gives its own.

use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::record::{self, Recorder, RecordingFs};
use mergetune_kernel::blockfs::BlockFs;
use mergetune_logic::config::Config;
use mergetune_logic::decision::DecisionKind;
use mergetune_sim::engine::Simulation;
use mergetune_sim::scenario::Scenario;

/// Runs the daemon on the embedded default scenario for `secs` simulated seconds, recording.
fn live(
    cfg: &Config,
    secs: u64,
    path: &std::path::Path,
) -> Vec<mergetune_logic::decision::Decision> {
    let sc = Scenario::default_scenario();
    let mut sim = Simulation::new(&sc).unwrap();
    let mut d = Daemon::simulated(cfg.clone());
    let mut rec = Recorder::create(path).unwrap();
    let mut out = Vec::new();
    let mut t = 0;
    while t <= secs * 1000 {
        sim.advance_to(t * 1_000_000);
        let fs: &mut dyn BlockFs = &mut sim;
        let mut rfs = RecordingFs::new(fs, t);
        out.extend(d.tick(t, &mut rfs));
        rec.write(&rfs.finish()).unwrap();
        // As the real loop does: faster while a device is watched at L3.
        t += d.next_tick_in_ms();
    }
    out
}

#[test]
fn replay_with_the_same_config_gives_the_same_decisions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.jsonl");
    let cfg = Scenario::default_scenario().daemon_config(&Config::default());
    let recorded = live(&cfg, 120, &path);
    assert!(
        recorded.len() >= 3,
        "the scenario should make the policy move: {recorded:?}"
    );
    let ticks = record::load(&path).unwrap();
    // Once a second, ten times a second while at L3 (the default scenario gets to L3 with
    // a bio tap, to L2 without one).
    assert!(
        recorded
            .iter()
            .any(|d| matches!(d.kind, DecisionKind::StepDown | DecisionKind::Disable)),
        "{recorded:?}"
    );
    assert!(ticks.len() >= 121, "{} ticks", ticks.len());
    let mut d = Daemon::simulated(cfg.clone());
    let replayed = record::replay(ticks.clone(), &mut d);
    assert_eq!(recorded, replayed);

    // What-if: a stricter config decides differently on the same data.
    let mut strict = cfg.clone();
    strict.policy.step_down_after_windows = 20;
    let mut d = Daemon::simulated(strict);
    let other = record::replay(ticks, &mut d);
    assert_ne!(recorded, other);
}

#[test]
fn bad_recordings_are_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.jsonl");
    std::fs::write(&p, "{\"t_ms\": 0}\nnot json\n{\"t_ms\": 2}\n").unwrap();
    let e = record::load(&p).unwrap_err().to_string();
    assert!(e.contains("bad.jsonl") && e.contains("line 2"), "{e}");
    // A truncated last line (a crash mid-write) is skipped.
    std::fs::write(&p, "{\"t_ms\": 0}\n{\"t_ms\": 1, \"disk").unwrap();
    assert_eq!(record::load(&p).unwrap().len(), 1);
    std::fs::write(&p, "").unwrap();
    assert!(
        record::load(&p)
            .unwrap_err()
            .to_string()
            .contains("no tick")
    );
    assert!(record::load(&dir.path().join("missing")).is_err());
}
