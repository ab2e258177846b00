//! A live run recorded through `RecordingFs` and replayed with the same config gives the
//! same decisions, tick for tick; a different config gives its own.

use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::record::{self, Recorder, RecordingFs};
use mergetune_kernel::blockfs::BlockFs;
use mergetune_logic::config::Config;
use mergetune_logic::decision::DecisionKind;
use mergetune_sim::engine::Simulation;
use mergetune_sim::scenario::Scenario;

/// Runs the daemon on the embedded default scenario for `secs` simulated seconds,
/// recording to `path` when given (as `run --record` does, config included).
fn run_sim(
    cfg: &Config,
    secs: u64,
    path: Option<&std::path::Path>,
) -> Vec<mergetune_logic::decision::Decision> {
    let sc = Scenario::default_scenario();
    let mut sim = Simulation::new(&sc).unwrap();
    let mut d = Daemon::simulated(cfg.clone());
    let mut rec = path.map(|p| Recorder::create(p).unwrap());
    let mut out = Vec::new();
    let mut t = 0;
    while t <= secs * 1000 {
        sim.advance_to(t * 1_000_000);
        let fs: &mut dyn BlockFs = &mut sim;
        match rec.as_mut() {
            Some(rec) => {
                let mut rfs = RecordingFs::new(fs, t);
                out.extend(d.tick(t, &mut rfs));
                rec.write_tick(rfs.finish(), d.config()).unwrap();
            }
            None => out.extend(d.tick(t, fs)),
        }
        // As the real loop does: faster while a device is watched at L3.
        t += d.next_tick_in_ms();
    }
    out
}

fn live(
    cfg: &Config,
    secs: u64,
    path: &std::path::Path,
) -> Vec<mergetune_logic::decision::Decision> {
    run_sim(cfg, secs, Some(path))
}

/// The default scenario's daemon config, priced live (by the merge-path sampler, every 2 s).
fn live_priced() -> Config {
    let mut cfg = Scenario::default_scenario().daemon_config(&Config::default());
    cfg.policy.cost_profile = "live".into();
    cfg.pricing.every_ms = 2_000;
    cfg
}

/// A recorded run taps, samples and prices as an unrecorded one does, so it decides the
/// same (the recorder once hid the bio tap and the merge-path sampler, and the recorded
/// daemon stopped at L2 where the unrecorded one went to L3).
#[test]
fn recording_observes_and_does_not_alter_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.jsonl");
    // Priced live, by the merge-path sampler, which the recorder once hid.
    let cfg = live_priced();
    let plain = run_sim(&cfg, 120, None);
    let recorded = run_sim(&cfg, 120, Some(&path));
    assert!(
        plain.iter().any(|d| d
            .changes
            .iter()
            .any(|c| c.tunable == mergetune_kernel::tunable::Tunable::Nomerges && c.to == "2")),
        "the unrecorded run reaches L3 with its bio tap: {plain:?}"
    );
    assert_eq!(plain, recorded);
}

/// A recording carries the config and the live prices (the sampler's answers), so a replay
/// with the recording's own config gives the recorded decisions.
#[test]
fn replay_of_a_live_priced_recording_with_its_own_config_gives_the_recorded_decisions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.jsonl");
    // Not the defaults, so the replay can only match with the recorded config.
    let mut cfg = live_priced();
    cfg.policy.step_down_after_windows += 1;
    let recorded = live(&cfg, 120, &path);
    let ticks = record::load(&path).unwrap();
    let (carried, reloads) = record::recorded_config(&ticks).expect("the config is recorded");
    assert_eq!((carried, reloads), (&cfg, 0));
    assert!(
        ticks
            .iter()
            .flat_map(|t| &t.calls)
            .any(|c| matches!(c, record::Call::SamplerDrain { total, .. } if *total > 0)),
        "the recording holds the sampler's live prices"
    );
    assert!(
        recorded
            .iter()
            .any(|d| matches!(d.kind, DecisionKind::StepDown | DecisionKind::Disable)),
        "a step down on a live price: {recorded:?}"
    );
    let mut d = Daemon::simulated(carried.clone());
    assert_eq!(recorded, record::replay(ticks, &mut d));
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
    // its bio tap).
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
    // A truncated last line (a crash mid-write) is skipped, and said.
    std::fs::write(&p, "{\"t_ms\": 0}\n{\"t_ms\": 1, \"disk").unwrap();
    assert_eq!(record::load(&p).unwrap().len(), 1);
    let r = record::load_recording(&p).unwrap();
    let t = r.truncated.expect("the cut line is reported");
    assert_eq!(t.line, 2);
    assert!(t.to_string().contains("line 2 is cut short"), "{t}");
    std::fs::write(&p, "").unwrap();
    assert!(
        record::load(&p)
            .unwrap_err()
            .to_string()
            .contains("no tick")
    );
    assert!(record::load(&dir.path().join("missing")).is_err());
}
